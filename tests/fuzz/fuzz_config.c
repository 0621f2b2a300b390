/* fuzz_config.c - libFuzzer target: the configuration layers
 * (src/config/config.c): a config file, ATTND_* variables and flags, as
 * attn_config_from_cli reads them at start-up.
 *
 * The input is NUL-separated pieces, after a first byte of framing:
 *   piece 0    the config file's text, written to c.json in a folder of
 *              this process's own under $TMPDIR (when bit 0 or 1 names
 *              it; run.sh sets TMPDIR=/dev/shm), removed at exit
 *   bit 0      "--config DIR/c.json" comes first on the command line
 *   bit 1      ATTND_CONFIG=DIR/c.json is in the environment
 *   the rest   a piece "ATTND_NAME=value" is a variable (getenv_fn finds
 *              the first of a name); any other piece is an argument
 * Inputs that name /dev/, /proc/ or /sys/ are skipped: a flag may name
 * any file, and reading a terminal or a pipe would only hang the fuzzer.
 * Every input checks, besides the sanitizers:
 *   - a failure is ATTN_EINVAL, ATTN_EIO, ATTN_ETOOBIG or ATTN_EPARSE with
 *     a message, and leaves the config and the action as they were;
 *   - --help and --version leave the config as it was;
 *   - a success round-trips: the config written as --check-config writes
 *     it (attn_config_write_json), read back as a config file over the
 *     defaults, is written again the same, byte for byte, but for the
 *     relative paths (models_dir, api_keys_file, tls_*_file,
 *     session_dir), which a file resolves against its folder: each must
 *     read back as the folder joined to it, or, when that is too long, be
 *     refused;
 *   - --healthcheck is seen by attn_config_healthcheck_arg too, and every
 *     ATTND_* name gets an answer from attn_config_env_unknown.
 * Any violation aborts (a crash for libFuzzer).
 *
 * Build and run: tests/fuzz/run.sh config [seconds]
 */
#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "attn/config.h"
#include "attn/limits.h"

#define MAX_PIECES 64

static char dir[PATH_MAX - 32], file[PATH_MAX], back[PATH_MAX];
static const char *env[MAX_PIECES];
static size_t n_env;

static void fail(const char *what, const char *detail) {
  fprintf(stderr, "fuzz_config: %s: %s\n", what, detail);
  abort();
}

static void put(const char *path, const char *p, size_t n) {
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(p, 1, n, f) != n || fclose(f) != 0) fail("write", path);
}

static const char *fake_getenv(const char *name) {
  size_t n = strlen(name);
  for (size_t i = 0; i < n_env; i++)
    if (strncmp(env[i], name, n) == 0 && env[i][n] == '=')
      return env[i] + n + 1;
  return NULL;
}

/* The config as --check-config prints it, in a new string. */
static char *as_json(const attn_config *c) {
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  if (!f) fail("open_memstream", "");
  if (attn_config_write_json(c, f) != ATTN_OK) fail("write_json", "");
  fclose(f);
  return text;
}

/* The keys that a config file resolves against its folder when relative
 * (K_PATH and K_FILE in config.c); set by a variable or a flag, they stay
 * as given. */
static const size_t path_keys[] = {offsetof(attn_config, models_dir),
                                   offsetof(attn_config, api_keys_file),
                                   offsetof(attn_config, tls_cert_file),
                                   offsetof(attn_config, tls_key_file),
                                   offsetof(attn_config, tls_client_ca_file),
                                   offsetof(attn_config, session_dir)};

static const char *skip_dot_slash(const char *p) {
  while (p[0] == '.' && p[1] == '/')
    for (p += 2; *p == '/';) p++;
  return p;
}

/* The config that c's --check-config output is read back as: each
 * relative path joined to dir (back.json's folder); false when one is
 * then longer than a path may be. */
static bool read_back_as(const attn_config *c, attn_config *want) {
  *want = *c;
  for (size_t i = 0; i < sizeof path_keys / sizeof path_keys[0]; i++) {
    const char *v = (const char *)c + path_keys[i];
    char *w = (char *)want + path_keys[i];
    if (v[0] == '/' || v[0] == '\0') continue;
    v = skip_dot_slash(v);
    if (strcmp(v, ".") == 0) v = "";
    char joined[sizeof dir + ATTN_MAX_PATH_LEN + 2];
    snprintf(joined, sizeof joined, "%s%s%s", dir, *v ? "/" : "", v);
    size_t n = strlen(joined);
    if (n > ATTN_MAX_PATH_LEN) return false;
    memcpy(w, joined, n + 1);
  }
  return true;
}

static void round_trip(const attn_config *c) {
  char *one = as_json(c);
  put(back, one, strlen(one));
  attn_config c2, want;
  attn_config_defaults(&c2);
  attn_diag d = {{0}};
  attn_status s = attn_config_load_file(&c2, back, &d);
  if (!read_back_as(c, &want)) {
    /* a relative path too long once joined to the folder: refused, named */
    if (s != ATTN_EINVAL || !strstr(d.msg, "relative to the file's folder"))
      fail("a relative path too long in a file is not refused", d.msg);
    free(one);
    return;
  }
  if (s) fail("--check-config's output is refused as a config file", d.msg);
  char *two = as_json(&c2), *three = as_json(&want);
  if (strcmp(two, three) != 0) {
    fprintf(stderr, "first:\n%s\nread back:\n%s\nexpected:\n%s\n", one, two,
            three);
    fail("round trip", "differs");
  }
  free(one);
  free(two);
  free(three);
}

static int check_failure(attn_status s, const attn_diag *d) {
  return (s == ATTN_EINVAL || s == ATTN_EIO || s == ATTN_ETOOBIG ||
          s == ATTN_EPARSE) &&
         d->msg[0];
}

static void run(int argc, char **argv) {
  attn_config c, before;
  memset(&c, 0xA5, sizeof c);
  before = c;
  attn_cli_action act = (attn_cli_action)77;
  attn_diag d = {{0}};
  attn_status s = attn_config_from_cli(&c, argc, argv, fake_getenv, &act, &d);
  const char *url;
  bool hc = attn_config_healthcheck_arg(argc, argv, &url);
  for (size_t i = 0; i < n_env; i++) attn_config_env_unknown(env[i]);
  if (s != ATTN_OK) {
    if (!check_failure(s, &d)) fail(attn_status_name(s), d.msg);
    if (memcmp(&c, &before, sizeof c) || act != 77)
      fail("failure changed the config or the action", d.msg);
    return;
  }
  if (act == ATTN_CLI_HELP || act == ATTN_CLI_VERSION) {
    if (memcmp(&c, &before, sizeof c)) fail("--help changed the config", "");
    return;
  }
  if (act == ATTN_CLI_HEALTHCHECK && !hc)
    fail("healthcheck_arg missed --healthcheck", "");
  round_trip(&c);
}

static void remove_dir(void) {
  unlink(file);
  unlink(back);
  rmdir(dir);
}

static int unsafe(const char *p) {
  return strstr(p, "/dev/") || strstr(p, "/proc/") || strstr(p, "/sys/");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!dir[0]) {
    const char *tmp = getenv("TMPDIR");
    /* absolute: read_back_as joins paths to it as config.c does */
    snprintf(dir, sizeof dir, "%s/fuzz_config.XXXXXX",
             tmp && tmp[0] == '/' ? tmp : "/tmp");
    if (!mkdtemp(dir)) fail("mkdtemp", dir);
    snprintf(file, sizeof file, "%s/c.json", dir);
    snprintf(back, sizeof back, "%s/back.json", dir);
    atexit(remove_dir);
  }
  if (size == 0) return 0;
  char *text = malloc(size); /* the pieces, each NUL-terminated */
  if (!text) return 0;
  memcpy(text, data + 1, size - 1);
  text[size - 1] = '\0';
  size_t flen = strlen(text);
  if (data[0] & 3) put(file, text, flen);
  char *argv[MAX_PIECES + 3], cfg_env[PATH_MAX + 16];
  int argc = 0;
  argv[argc++] = "attnd";
  n_env = 0;
  if (data[0] & 1) argv[argc++] = "--config", argv[argc++] = file;
  if (data[0] & 2) {
    snprintf(cfg_env, sizeof cfg_env, "ATTND_CONFIG=%s", file);
    env[n_env++] = cfg_env;
  }
  int bad = 0;
  for (char *p = text + flen + 1;
       p < text + size && argc < MAX_PIECES && n_env < MAX_PIECES;
       p += strlen(p) + 1) {
    bad |= unsafe(p);
    if (strncmp(p, "ATTND_", 6) == 0 && strchr(p, '='))
      env[n_env++] = p;
    else
      argv[argc++] = p;
  }
  argv[argc] = NULL;
  if (!bad) run(argc, argv);
  free(text);
  return 0;
}
