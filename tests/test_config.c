/* test_config.c - the configuration module: defaults, each layer overriding
 * the one before, strict parsing of every type, file errors, argv handling,
 * and that config/attnd.json and docs/configuration.md list exactly the keys
 * of the table in src/config/config.c.
 *
 * The environment is injected through a fake getenv; files are written to
 * mkstemp() paths under /tmp and removed by the test that made them.
 * ATTN_SOURCE_DIR (set by the build) locates config/ and docs/. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "attn/config.h"
#include "attn/log.h"
#include "unit.h"

#ifndef ATTN_SOURCE_DIR
#define ATTN_SOURCE_DIR "."
#endif

/* ---- helpers ------------------------------------------------------------ */

/* Fake environment: NULL-terminated name, value pairs. */
static const char *const *fake_env;

static const char *fake_getenv(const char *name) {
  for (const char *const *p = fake_env; p && p[0]; p += 2)
    if (strcmp(p[0], name) == 0) return p[1];
  return NULL;
}

/* Run attn_config_from_cli with argv given as string literals. */
static attn_status cli_run(attn_config *c, attn_cli_action *a,
                           const char *const *env, char **argv, size_t argc,
                           attn_diag *d) {
  fake_env = env;
  return attn_config_from_cli(c, (int)argc, argv, fake_getenv, a, d);
}
#define CLI(c, a, env, d, ...)                               \
  cli_run(c, a, env, (char **)(const char *[]){__VA_ARGS__}, \
          sizeof((const char *[]){__VA_ARGS__}) / sizeof(char *), d)

/* Write text to a new temporary file; returns its path (static buffer per
 * slot; the caller unlinks it). */
static char tmp_paths[4][64];
static const char *write_tmp(int slot, const char *text, size_t len) {
  char *path = tmp_paths[slot];
  snprintf(path, sizeof tmp_paths[slot], "/tmp/attn_test_cfg_XXXXXX");
  int fd = mkstemp(path);
  ck_assert_int_ge(fd, 0);
  FILE *f = fdopen(fd, "wb");
  ck_assert_ptr_nonnull(f);
  ck_assert_uint_eq(fwrite(text, 1, len, f), len);
  ck_assert_int_eq(fclose(f), 0);
  return path;
}
#define WRITE_TMP(slot, s) write_tmp(slot, s, strlen(s))

/* Whole file into a malloc'd NUL-terminated string. */
static char *slurp(const char *path) {
  FILE *f = fopen(path, "rb");
  ck_assert_msg(f != NULL, "cannot open %s", path);
  char *buf = NULL;
  size_t cap = 0, len = 0;
  for (;;) {
    if (len + 4096 + 1 > cap) {
      cap = cap ? cap * 2 : 8192;
      buf = realloc(buf, cap);
      ck_assert_ptr_nonnull(buf);
    }
    size_t n = fread(buf + len, 1, cap - len - 1, f);
    len += n;
    if (n == 0) break;
  }
  fclose(f);
  buf[len] = '\0';
  return buf;
}

static size_t n_keys(void) {
  size_t n = 0;
  while (attn_config_key_name(n)) n++;
  return n;
}

/* "ATTND_" + upper(key) and "--" + key with dashes. */
static void env_of(const char *key, char *buf, size_t size) {
  size_t n = (size_t)snprintf(buf, size, "ATTND_");
  for (const char *p = key; *p && n + 1 < size; p++)
    buf[n++] = (char)(*p >= 'a' && *p <= 'z' ? *p - 'a' + 'A' : *p);
  buf[n] = '\0';
}
static void flag_of(const char *key, char *buf, size_t size) {
  size_t n = (size_t)snprintf(buf, size, "--");
  for (const char *p = key; *p && n + 1 < size; p++)
    buf[n++] = *p == '_' ? '-' : *p;
  buf[n] = '\0';
}

/* A config whose every field differs from the default. */
static void non_default(attn_config *c) {
  attn_config_defaults(c);
  snprintf(c->host, sizeof c->host, "127.0.0.1");
  c->port = 1;
  c->workers = 3;
  c->blas_threads_per_worker = 4;
  c->queue_capacity = 5;
  c->queue_timeout_ms = 6;
  c->drain_timeout_ms = 7;
  c->shutdown_delay_ms = 14;
  c->max_body_bytes = 8000;
  c->max_total_body_bytes = 16000;
  c->max_seq_len = 9;
  c->max_tensor_elements = 10;
  c->max_weights_elements = 11;
  c->max_connections = 12;
  c->connection_timeout_s = 13;
  snprintf(c->models_dir, sizeof c->models_dir, "/srv/models");
  snprintf(c->session_dir, sizeof c->session_dir, "/var/lib/attnd/sessions");
  c->cpu_scheduling_policy = ATTN_SCHED_OTHER;
  c->log_level = ATTN_LOG_ERROR;
  c->log_format = ATTN_LOG_TEXT;
  c->log_priority_prefix = ATTN_LOG_PREFIX_NEVER;
  c->access_log = false;
  snprintf(c->access_log_exclude, sizeof c->access_log_exclude,
           "/v2/health/, /metrics");
  snprintf(c->api_keys_file, sizeof c->api_keys_file, "/etc/attnd/keys");
  c->metrics_require_key = true;
  snprintf(c->admin_api_keys_file, sizeof c->admin_api_keys_file,
           "/etc/attnd/admin-keys");
  c->model_control = ATTN_MODEL_CONTROL_EXPLICIT;
  snprintf(c->tls_cert_file, sizeof c->tls_cert_file, "/tls/crt.pem");
  snprintf(c->tls_key_file, sizeof c->tls_key_file, "/tls/key.pem");
  snprintf(c->tls_client_ca_file, sizeof c->tls_client_ca_file, "/tls/ca.pem");
  snprintf(c->cors_allow_origins, sizeof c->cors_allow_origins,
           "https://a.example, http://b.example:3000");
}

#define ASSERT_UNCHANGED(c, before)                      \
  ck_assert_msg(memcmp(&(c), &(before), sizeof(c)) == 0, \
                "config changed on failure")
#define ASSERT_DIAG_HAS(d, s) \
  ck_assert_msg(strstr((d).msg, s) != NULL, "diag '%s' lacks '%s'", (d).msg, s)

/* ---- defaults and table -------------------------------------------------- */

START_TEST(test_defaults) {
  attn_config c;
  memset(&c, 0xAB, sizeof c);
  attn_config_defaults(&c);
  ck_assert_str_eq(c.host, "0.0.0.0");
  ck_assert_int_eq(c.port, 8080);
  ck_assert_int_eq(c.workers, 0);
  ck_assert_int_eq(c.blas_threads_per_worker, 0);
  ck_assert_int_eq(c.queue_capacity, 64);
  ck_assert_int_eq(c.queue_timeout_ms, 10000);
  ck_assert_int_eq(c.drain_timeout_ms, 30000);
  ck_assert_int_eq(c.shutdown_delay_ms, 0);
  ck_assert_int_eq(c.max_body_bytes, 256LL * 1024 * 1024);
  ck_assert_int_eq(c.max_total_body_bytes, 0);
  ck_assert_int_eq(c.max_seq_len, 16384);
  ck_assert_int_eq(c.max_tensor_elements, 64LL * 1024 * 1024);
  ck_assert_int_eq(c.max_weights_elements, 16LL * 1024 * 1024);
  ck_assert_int_eq(c.max_connections, 1024);
  ck_assert_int_eq(c.connection_timeout_s, 60);
  ck_assert_int_eq(c.header_timeout_s, 10);
  ck_assert_int_eq(c.body_min_rate_bytes_s, 500);
  ck_assert_int_eq(c.max_connections_per_ip, 0);
  ck_assert_str_eq(c.models_dir, "config/models");
  ck_assert_str_eq(c.models_dir_from, "");
  ck_assert_int_eq(c.log_level, ATTN_LOG_INFO);
  ck_assert_int_eq(c.log_format, ATTN_LOG_JSON);
  ck_assert_int_eq(c.log_priority_prefix, ATTN_LOG_PREFIX_AUTO);
  ck_assert(c.access_log);
  ck_assert_str_eq(c.access_log_exclude, "");
  ck_assert_int_eq(c.cpu_scheduling_policy, ATTN_SCHED_BATCH);
  ck_assert_int_eq(c.model_control, ATTN_MODEL_CONTROL_NONE);
  ck_assert_str_eq(c.admin_api_keys_file, "");
}
END_TEST

START_TEST(test_key_names) {
  static const char *const want[] = {"host",
                                     "port",
                                     "metrics_port",
                                     "workers",
                                     "blas_threads_per_worker",
                                     "http_threads",
                                     "cpu_scheduling_policy",
                                     "queue_capacity",
                                     "queue_timeout_ms",
                                     "shutdown_delay_ms",
                                     "drain_timeout_ms",
                                     "max_body_bytes",
                                     "max_inflate_ratio",
                                     "max_total_body_bytes",
                                     "max_seq_len",
                                     "max_tensor_elements",
                                     "max_weights_elements",
                                     "kv_cache_bytes",
                                     "max_sessions",
                                     "session_idle_timeout_s",
                                     "session_dir",
                                     "max_connections",
                                     "connection_timeout_s",
                                     "header_timeout_s",
                                     "body_min_rate_bytes_s",
                                     "max_connections_per_ip",
                                     "models_dir",
                                     "model_name",
                                     "models_poll_s",
                                     "log_level",
                                     "log_format",
                                     "log_priority_prefix",
                                     "access_log",
                                     "access_log_exclude",
                                     "api_keys_file",
                                     "metrics_require_key",
                                     "admin_api_keys_file",
                                     "model_control",
                                     "tls_cert_file",
                                     "tls_key_file",
                                     "tls_client_ca_file",
                                     "cors_allow_origins"};
  size_t n = sizeof want / sizeof want[0];
  ck_assert_uint_eq(n_keys(), n);
  for (size_t i = 0; i < n; i++)
    ck_assert_str_eq(attn_config_key_name(i), want[i]);
  ck_assert_ptr_null(attn_config_key_name(n));
  ck_assert_ptr_null(attn_config_key_name((size_t)-1));
  ck_assert_str_eq(attn_sched_policy_name(ATTN_SCHED_BATCH), "batch");
  ck_assert_str_eq(attn_sched_policy_name(ATTN_SCHED_OTHER), "other");
  ck_assert_ptr_null(attn_sched_policy_name((attn_sched_policy)2));
}
END_TEST

/* ---- attn_config_set: text parsing --------------------------------------- */

START_TEST(test_set_each_type) {
  attn_config c;
  attn_config_defaults(&c);
  attn_diag d = {{0}};
  ck_assert_int_eq(attn_config_set(&c, "host", "::1", &d), ATTN_OK);
  ck_assert_str_eq(c.host, "::1");
  ck_assert_int_eq(attn_config_set(&c, "port", "0", &d), ATTN_OK);
  ck_assert_int_eq(c.port, 0);
  ck_assert_int_eq(attn_config_set(&c, "port", "65535", &d), ATTN_OK);
  ck_assert_int_eq(c.port, 65535);
  ck_assert_int_eq(attn_config_set(&c, "max_body_bytes", "8589934592", &d),
                   ATTN_OK);
  ck_assert_int_eq(c.max_body_bytes, 8589934592LL);
  ck_assert_int_eq(
      attn_config_set(&c, "max_tensor_elements", "1099511627776", &d), ATTN_OK);
  ck_assert_int_eq(c.max_tensor_elements, 1LL << 40);
  ck_assert_int_eq(attn_config_set(&c, "queue_timeout_ms", "007", &d), ATTN_OK);
  ck_assert_int_eq(c.queue_timeout_ms, 7);
  ck_assert_int_eq(attn_config_set(&c, "log_level", "debug", &d), ATTN_OK);
  ck_assert_int_eq(c.log_level, ATTN_LOG_DEBUG);
  ck_assert_int_eq(attn_config_set(&c, "log_level", "error", &d), ATTN_OK);
  ck_assert_int_eq(c.log_level, ATTN_LOG_ERROR);
  ck_assert_int_eq(attn_config_set(&c, "log_format", "text", &d), ATTN_OK);
  ck_assert_int_eq(c.log_format, ATTN_LOG_TEXT);
  ck_assert_int_eq(attn_config_set(&c, "model_control", "explicit", &d),
                   ATTN_OK);
  ck_assert_int_eq(c.model_control, ATTN_MODEL_CONTROL_EXPLICIT);
  ck_assert_str_eq(attn_model_control_name(c.model_control), "explicit");
  ck_assert_int_eq(attn_config_set(&c, "model_control", "poll", &d),
                   ATTN_EINVAL);
  ASSERT_DIAG_HAS(d, "none, explicit");
  ck_assert_int_eq(attn_config_set(&c, "model_control", "none", &d), ATTN_OK);
  ck_assert_int_eq(c.model_control, ATTN_MODEL_CONTROL_NONE);
  ck_assert_int_eq(attn_config_set(&c, "cpu_scheduling_policy", "other", &d),
                   ATTN_OK);
  ck_assert_int_eq(c.cpu_scheduling_policy, ATTN_SCHED_OTHER);
  ck_assert_int_eq(attn_config_set(&c, "cpu_scheduling_policy", "batch", &d),
                   ATTN_OK);
  ck_assert_int_eq(c.cpu_scheduling_policy, ATTN_SCHED_BATCH);
  ck_assert_int_eq(attn_config_set(&c, "models_dir", "/a b/c", &d), ATTN_OK);
  ck_assert_str_eq(c.models_dir, "/a b/c");
}
END_TEST

START_TEST(test_set_bad_int_text) {
  static const char *const bad[] = {"12abc",
                                    "",
                                    "99999999999999999999",
                                    "-99999999999999999999",
                                    "+5",
                                    " 5",
                                    "5 ",
                                    "0x10",
                                    "-",
                                    "1.0",
                                    "1e3",
                                    "８"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    attn_config c, before;
    attn_config_defaults(&c);
    before = c;
    attn_diag d = {{0}};
    ck_assert_msg(attn_config_set(&c, "workers", bad[i], &d) == ATTN_EINVAL,
                  "'%s' accepted", bad[i]);
    ASSERT_UNCHANGED(c, before);
    ASSERT_DIAG_HAS(d, "workers");
    ASSERT_DIAG_HAS(d, "0..256");
  }
  attn_config c;
  attn_config_defaults(&c);
  attn_diag d = {{0}};
  ck_assert_int_eq(attn_config_set(&c, "port", "12abc", &d), ATTN_EINVAL);
  ck_assert_str_eq(d.msg,
                   "port: '12abc' is not an integer (port must be 0..65535)");
  ck_assert_int_eq(
      attn_config_set(&c, "max_body_bytes", "99999999999999999999", &d),
      ATTN_EINVAL);
  ASSERT_DIAG_HAS(d, "out of range");
}
END_TEST

START_TEST(test_set_out_of_range) {
  static const struct {
    const char *key, *value, *range;
  } cases[] = {
      {"port", "65536", "0..65535"},
      {"port", "-1", "0..65535"},
      {"workers", "-1", "0..256"},
      {"workers", "257", "0..256"},
      {"blas_threads_per_worker", "65", "0..64"},
      {"queue_capacity", "1000001", "1..1000000"},
      {"queue_timeout_ms", "3600001", "0..3600000"},
      {"drain_timeout_ms", "-5", "0..3600000"},
      {"max_body_bytes", "1023", "1024..8589934592"},
      {"max_body_bytes", "8589934593", "1024..8589934592"},
      {"max_seq_len", "0", "1..1048576"},
      {"max_tensor_elements", "1099511627777", "1..1099511627776"},
      {"max_weights_elements", "-1", "0..1099511627776"},
      {"max_connections", "65537", "1..65536"},
      {"connection_timeout_s", "86401", "0..86400"},
      {"workers", "4294967298", "0..256"}, /* would wrap to 2 as an int */
      {"shutdown_delay_ms", "3600001", "0..3600000"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    attn_config c, before;
    attn_config_defaults(&c);
    before = c;
    attn_diag d = {{0}};
    ck_assert_msg(
        attn_config_set(&c, cases[i].key, cases[i].value, &d) == ATTN_EINVAL,
        "%s=%s accepted", cases[i].key, cases[i].value);
    ASSERT_UNCHANGED(c, before);
    ASSERT_DIAG_HAS(d, cases[i].key);
    ASSERT_DIAG_HAS(d, cases[i].value);
    ASSERT_DIAG_HAS(d, cases[i].range);
    ASSERT_DIAG_HAS(d, "out of range");
  }
}
END_TEST

START_TEST(test_set_bool_forms) {
  static const struct {
    const char *text;
    bool v;
  } ok[] = {{"true", true}, {"false", false}, {"1", true},    {"0", false},
            {"yes", true},  {"no", false},    {"TRUE", true}, {"No", false}};
  attn_config c;
  attn_diag d = {{0}};
  for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
    attn_config_defaults(&c);
    c.access_log = !ok[i].v;
    ck_assert_msg(attn_config_set(&c, "access_log", ok[i].text, &d) == ATTN_OK,
                  "'%s' rejected", ok[i].text);
    ck_assert_msg(c.access_log == ok[i].v, "'%s' gave %d", ok[i].text,
                  c.access_log);
  }
  static const char *const bad[] = {"",  "2",     "on",   "off",
                                    "y", "truee", " true"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    attn_config_defaults(&c);
    ck_assert_msg(attn_config_set(&c, "access_log", bad[i], &d) == ATTN_EINVAL,
                  "'%s' accepted", bad[i]);
    ASSERT_DIAG_HAS(d, "not a boolean");
    ck_assert(c.access_log);
  }
}
END_TEST

START_TEST(test_set_enum_and_string) {
  attn_config c, before;
  attn_config_defaults(&c);
  before = c;
  attn_diag d = {{0}};
  ck_assert_int_eq(attn_config_set(&c, "log_level", "verbose", &d),
                   ATTN_EINVAL);
  ck_assert_str_eq(
      d.msg, "log_level: 'verbose' is not one of debug, info, warn, error");
  ck_assert_int_eq(attn_config_set(&c, "log_level", "INFO", &d), ATTN_EINVAL);
  ck_assert_int_eq(attn_config_set(&c, "log_format", "", &d), ATTN_EINVAL);
  ck_assert_int_eq(attn_config_set(&c, "host", "", &d), ATTN_EINVAL);
  ASSERT_DIAG_HAS(d, "empty");
  ck_assert_int_eq(attn_config_set(&c, "host", "a\nb", &d), ATTN_EINVAL);
  ASSERT_DIAG_HAS(d, "control character");
  char longv[ATTN_MAX_HOST_LEN + 2];
  memset(longv, 'h', sizeof longv - 1);
  longv[sizeof longv - 1] = '\0'; /* 256 bytes: one too many */
  ck_assert_int_eq(attn_config_set(&c, "host", longv, &d), ATTN_EINVAL);
  ASSERT_DIAG_HAS(d, "too long");
  ASSERT_DIAG_HAS(d, "1..255 bytes");
  ASSERT_UNCHANGED(c, before);
  longv[ATTN_MAX_HOST_LEN] = '\0'; /* exactly 255 fits */
  ck_assert_int_eq(attn_config_set(&c, "host", longv, &d), ATTN_OK);
  ck_assert_uint_eq(strlen(c.host), ATTN_MAX_HOST_LEN);
}
END_TEST

START_TEST(test_set_unknown_key) {
  attn_config c, before;
  attn_config_defaults(&c);
  before = c;
  attn_diag d = {{0}};
  ck_assert_int_eq(attn_config_set(&c, "wokers", "3", &d), ATTN_EINVAL);
  ck_assert_str_eq(d.msg, "unknown key 'wokers' (did you mean 'workers'?)");
  ck_assert_int_eq(attn_config_set(&c, "prot", "3", &d),
                   ATTN_EINVAL); /* swap */
  ck_assert_str_eq(d.msg, "unknown key 'prot' (did you mean 'port'?)");
  ck_assert_int_eq(attn_config_set(&c, "max_body_byte", "3", &d), ATTN_EINVAL);
  ASSERT_DIAG_HAS(d, "did you mean 'max_body_bytes'?");
  ck_assert_int_eq(attn_config_set(&c, "Port", "3", &d),
                   ATTN_EINVAL); /* case */
  ASSERT_DIAG_HAS(d, "did you mean 'port'?");
  ck_assert_int_eq(attn_config_set(&c, "threads", "3", &d), ATTN_EINVAL);
  ck_assert_str_eq(d.msg, "unknown key 'threads'");
  ck_assert_int_eq(attn_config_set(&c, "", "3", &d), ATTN_EINVAL);
  ck_assert_int_eq(attn_config_set(&c, "port", NULL, NULL), ATTN_EINVAL);
  ASSERT_UNCHANGED(c, before);
}
END_TEST

/* ---- files ----------------------------------------------------------------
 */

START_TEST(test_file_overrides_some_keys) {
  const char *p =
      WRITE_TMP(0,
                "{ \"workers\": 8, \"host\": \"127.0.0.1\",\n"
                "  \"access_log\": false, \"log_level\": \"warn\",\n"
                "  \"max_body_bytes\": 1e6 }\n");
  attn_config c;
  attn_config_defaults(&c);
  attn_diag d = {{0}};
  attn_status st = attn_config_load_file(&c, p, &d);
  unlink(p);
  ck_assert_msg(st == ATTN_OK, "%s", d.msg);
  ck_assert_int_eq(c.workers, 8);
  ck_assert_str_eq(c.host, "127.0.0.1");
  ck_assert(!c.access_log);
  ck_assert_int_eq(c.log_level, ATTN_LOG_WARN);
  ck_assert_int_eq(c.max_body_bytes, 1000000);
  ck_assert_int_eq(c.port, 8080); /* absent keys keep their value */
  ck_assert_int_eq(c.queue_capacity, 64);
}
END_TEST

START_TEST(test_file_errors) {
  static const struct {
    const char *text;
    attn_status st;
    const char *msg; /* substring of the diagnostic, after the path */
  } cases[] = {
      {"{\"wokers\": 3}", ATTN_EINVAL,
       "unknown key 'wokers' (did you mean 'workers'?)"},
      {"{\"port\": 70000}", ATTN_EINVAL,
       "port: 70000 is out of range (port must be 0..65535)"},
      {"{\"port\": -1}", ATTN_EINVAL, "port must be 0..65535"},
      {"{\"port\": 1e30}", ATTN_EINVAL, "out of range"},
      {"{\"port\": 80.5}", ATTN_EINVAL, "port: 80.5 is not an integer"},
      {"{\"port\": \"8080\"}", ATTN_EINVAL,
       "port: must be an integer, not a string"},
      {"{\"port\": null}", ATTN_EINVAL, "port: must be an integer, not null"},
      {"{\"access_log\": \"true\"}", ATTN_EINVAL,
       "access_log: must be true or false, not a string"},
      {"{\"access_log\": 1}", ATTN_EINVAL,
       "access_log: must be true or false, not a number"},
      {"{\"host\": 1}", ATTN_EINVAL, "host: must be a string, not a number"},
      {"{\"host\": [\"a\"]}", ATTN_EINVAL,
       "host: must be a string, not an array"},
      {"{\"host\": \"\"}", ATTN_EINVAL, "host: empty value"},
      {"{\"log_format\": \"xml\"}", ATTN_EINVAL,
       "log_format: 'xml' is not one of json, text"},
      {"{\"workers\": 2, \"workers\": 3}", ATTN_EINVAL,
       "duplicate key 'workers'"},
      {"[1, 2]", ATTN_EPARSE, "must be a JSON object, not an array"},
      {"8080", ATTN_EPARSE, "must be a JSON object"},
      {"", ATTN_EPARSE, ":1:1: invalid JSON"},
      {"{\"port\": 1,\n \"host\": }", ATTN_EPARSE, ":2:10: invalid JSON"},
      {"{\"port\": 1} x", ATTN_EPARSE, "invalid JSON"},
      {"{\"port\": 1,}", ATTN_EPARSE, "invalid JSON"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    /* A valid key before the bad one must not be applied either. */
    const char *p = WRITE_TMP(0, cases[i].text);
    attn_config c, before;
    non_default(&c);
    before = c;
    attn_diag d = {{0}};
    attn_status st = attn_config_load_file(&c, p, &d);
    unlink(p);
    ck_assert_msg(st == cases[i].st, "case %zu '%s': got %s (%s)", i,
                  cases[i].text, attn_status_name(st), d.msg);
    ASSERT_UNCHANGED(c, before);
    ck_assert_msg(strncmp(d.msg, p, strlen(p)) == 0, "diag '%s' lacks path",
                  d.msg);
    ASSERT_DIAG_HAS(d, cases[i].msg);
  }
}
END_TEST

START_TEST(test_file_partial_failure_changes_nothing) {
  const char *p = WRITE_TMP(0, "{\"workers\": 9, \"port\": 99999}");
  attn_config c, before;
  attn_config_defaults(&c);
  before = c;
  attn_diag d = {{0}};
  ck_assert_int_eq(attn_config_load_file(&c, p, &d), ATTN_EINVAL);
  unlink(p);
  ASSERT_UNCHANGED(c, before);
  ck_assert_int_eq(c.workers, 0);
}
END_TEST

START_TEST(test_file_io_errors) {
  attn_config c, before;
  attn_config_defaults(&c);
  before = c;
  attn_diag d = {{0}};
  ck_assert_int_eq(attn_config_load_file(&c, "/nonexistent/attnd.json", &d),
                   ATTN_EIO);
  ASSERT_DIAG_HAS(d, "/nonexistent/attnd.json: cannot open");
  ck_assert_int_eq(attn_config_load_file(&c, "/tmp", &d), ATTN_EIO);
  ASSERT_DIAG_HAS(d, "/tmp: cannot read");
  ck_assert_int_eq(attn_config_load_file(&c, NULL, &d), ATTN_EINVAL);

  /* Too big: valid JSON padded with whitespace past the limit. */
  size_t n = ATTN_MAX_CONFIG_FILE_BYTES + 1;
  char *big = malloc(n);
  ck_assert_ptr_nonnull(big);
  memset(big, ' ', n);
  big[0] = '{';
  big[n - 1] = '}';
  const char *p = write_tmp(0, big, n);
  free(big);
  ck_assert_int_eq(attn_config_load_file(&c, p, &d), ATTN_ETOOBIG);
  unlink(p);

  /* NUL byte inside. */
  p = write_tmp(1, "{\"port\": 1}\0{\"port\": 2}", 23);
  ck_assert_int_eq(attn_config_load_file(&c, p, &d), ATTN_EPARSE);
  ASSERT_DIAG_HAS(d, "NUL");
  unlink(p);
  ASSERT_UNCHANGED(c, before);
}
END_TEST

/* The read buffer starts at the file's size and grows: a file of exactly
 * the limit is read whole, and so is a pipe (no size) longer than the
 * first 4096 bytes. */
START_TEST(test_file_sizes) {
  attn_config c;
  attn_config_defaults(&c);
  attn_diag d = {{0}};
  size_t n = ATTN_MAX_CONFIG_FILE_BYTES;
  char *text = malloc(n);
  ck_assert_ptr_nonnull(text);
  memset(text, ' ', n);
  memcpy(text, "{\"port\": 7", 10);
  text[n - 1] = '}';
  const char *p = write_tmp(0, text, n);
  ck_assert_msg(attn_config_load_file(&c, p, &d) == ATTN_OK, "%s", d.msg);
  ck_assert_int_eq(c.port, 7);
  unlink(p);

  int fds[2];
  ck_assert_int_eq(pipe(fds), 0);
  size_t m = 10000; /* within the pipe's buffer: written before reading */
  memcpy(text, "{\"port\": 9", 10);
  memset(text + 10, ' ', m - 11);
  text[m - 1] = '}';
  ck_assert_int_eq(write(fds[1], text, m), (ssize_t)m);
  close(fds[1]);
  char path[64];
  snprintf(path, sizeof path, "/dev/fd/%d", fds[0]);
  ck_assert_msg(attn_config_load_file(&c, path, &d) == ATTN_OK, "%s", d.msg);
  ck_assert_int_eq(c.port, 9);
  close(fds[0]);
  free(text);
}
END_TEST

START_TEST(test_shipped_file_equals_defaults) {
  /* Start from zeros so that a key missing from the file shows up. */
  attn_config c, def;
  memset(&c, 0, sizeof c);
  attn_config_defaults(&def);
  attn_diag d = {{0}};
  const char *path = ATTN_SOURCE_DIR "/config/attnd.json";
  ck_assert_msg(attn_config_load_file(&c, path, &d) == ATTN_OK, "%s", d.msg);
  /* Its models_dir, "models", is relative to its folder config/: the
   * directory that the default, config/models, names from the source
   * root. */
  ck_assert_str_eq(c.models_dir, ATTN_SOURCE_DIR "/config/models");
  ck_assert_str_eq(c.models_dir_from, ATTN_SOURCE_DIR
                   "/config/attnd.json: models_dir 'models', "
                   "relative to the file's folder");
  memcpy(c.models_dir, def.models_dir, sizeof c.models_dir);
  memset(c.models_dir_from, 0, sizeof c.models_dir_from);
  ck_assert_msg(memcmp(&c, &def, sizeof c) == 0,
                "config/attnd.json differs from the built-in defaults");

  /* Byte for byte what --check-config prints for the defaults (models_dir
   * as the file writes it): so the file lists exactly the table's keys, in
   * table order. */
  char *want = NULL;
  size_t want_len = 0;
  FILE *m = open_memstream(&want, &want_len);
  ck_assert_ptr_nonnull(m);
  snprintf(def.models_dir, sizeof def.models_dir, "models");
  ck_assert_int_eq(attn_config_write_json(&def, m), ATTN_OK);
  fclose(m);
  char *have = slurp(path);
  ck_assert_str_eq(have, want);
  free(have);
  free(want);
}
END_TEST

START_TEST(test_write_json_round_trip) {
  attn_config c, back;
  non_default(&c);
  snprintf(c.models_dir, sizeof c.models_dir, "/m/\"quoted\"\\dir/é");
  char *text = NULL;
  size_t len = 0;
  FILE *m = open_memstream(&text, &len);
  ck_assert_ptr_nonnull(m);
  ck_assert_int_eq(attn_config_write_json(&c, m), ATTN_OK);
  fclose(m);
  ck_assert_ptr_nonnull(
      strstr(text, "\"models_dir\": \"/m/\\\"quoted\\\"\\\\dir/é\""));
  ck_assert_ptr_nonnull(strstr(text, "\"access_log\": false,\n"));
  ck_assert_ptr_nonnull(strstr(text,
                               "\"cors_allow_origins\": \"https://a.example, "
                               "http://b.example:3000\"\n}\n"));
  const char *p = write_tmp(0, text, len);
  free(text);
  attn_config_defaults(&back);
  attn_diag d = {{0}};
  attn_status st = attn_config_load_file(&back, p, &d);
  unlink(p);
  ck_assert_msg(st == ATTN_OK, "%s", d.msg);
  /* the one difference: where models_dir came from */
  char from[128];
  snprintf(from, sizeof from, "%s: models_dir", p);
  ck_assert_str_eq(back.models_dir_from, from);
  memset(back.models_dir_from, 0, sizeof back.models_dir_from);
  ck_assert_msg(memcmp(&c, &back, sizeof c) == 0,
                "round trip changed the config");
}
END_TEST

START_TEST(test_docs_list_every_key) {
  char *doc = slurp(ATTN_SOURCE_DIR "/docs/configuration.md");
  size_t n = n_keys();
  bool *seen = calloc(n, sizeof *seen);
  ck_assert_ptr_nonnull(seen);
  /* Rows of the key table start with "| `key` |"; the table ends at the next
   * heading. */
  char *start = strstr(doc, "## Keys");
  ck_assert_ptr_nonnull(start);
  char *end = strstr(start + 1, "\n## ");
  ck_assert_ptr_nonnull(end);
  *end = '\0';
  size_t rows = 0;
  for (char *line = start; line && *line;
       line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
    if (strncmp(line, "| `", 3) != 0) continue;
    char *nl = strchr(line, '\n');
    if (nl) *nl = '\0';
    char key[64];
    const char *ks = line + 3, *ke = strchr(ks, '`');
    ck_assert_ptr_nonnull(ke);
    snprintf(key, sizeof key, "%.*s", (int)(ke - ks), ks);
    size_t i = 0;
    while (i < n && strcmp(attn_config_key_name(i), key) != 0) i++;
    ck_assert_msg(i < n, "docs list unknown key '%s'", key);
    ck_assert_msg(!seen[i], "docs list '%s' twice", key);
    seen[i] = true;
    rows++;
    char want[96];
    env_of(key, want, sizeof want);
    ck_assert_msg(strstr(line, want), "docs row '%s' lacks %s", key, want);
    flag_of(key, want, sizeof want);
    ck_assert_msg(strstr(line, want), "docs row '%s' lacks %s", key, want);
    if (nl) *nl = '\n';
  }
  for (size_t i = 0; i < n; i++)
    ck_assert_msg(seen[i], "docs/configuration.md lacks key '%s'",
                  attn_config_key_name(i));
  ck_assert_uint_eq(rows, n);
  free(seen);
  free(doc);
}
END_TEST

/* ---- command line and environment ------------------------------------------
 */

START_TEST(test_cli_no_sources_is_defaults) {
  attn_config c, def;
  memset(&c, 0, sizeof c);
  attn_config_defaults(&def);
  attn_cli_action a = ATTN_CLI_HELP;
  attn_diag d = {{0}};
  ck_assert_int_eq(CLI(&c, &a, NULL, &d, "attnd"), ATTN_OK);
  ck_assert_int_eq(a, ATTN_CLI_RUN);
  ck_assert(memcmp(&c, &def, sizeof c) == 0);
  /* NULL getenv: no environment at all. */
  char *argv[] = {"attnd", NULL};
  ck_assert_int_eq(attn_config_from_cli(&c, 1, argv, NULL, &a, &d), ATTN_OK);
  ck_assert(memcmp(&c, &def, sizeof c) == 0);
  /* argc 0 is allowed (execve with an empty argv). */
  ck_assert_int_eq(attn_config_from_cli(&c, 0, argv, NULL, &a, &d), ATTN_OK);
}
END_TEST

START_TEST(test_cli_layers_precedence) {
  const char *file =
      WRITE_TMP(0,
                "{\"port\": 1, \"workers\": 3, \"queue_capacity\": 5,"
                " \"log_level\": \"warn\"}");
  const char *env[] = {"ATTND_CONFIG",  file, "ATTND_PORT", "2",
                       "ATTND_WORKERS", "4",  NULL};
  attn_config c;
  attn_cli_action a;
  attn_diag d = {{0}};
  attn_status st = CLI(&c, &a, env, &d, "attnd", "--port", "3");
  ck_assert_msg(st == ATTN_OK, "%s", d.msg);
  ck_assert_int_eq(c.port, 3);                  /* flag > env > file */
  ck_assert_int_eq(c.workers, 4);               /* env > file */
  ck_assert_int_eq(c.queue_capacity, 5);        /* file > default */
  ck_assert_int_eq(c.log_level, ATTN_LOG_WARN); /* file > default */
  ck_assert_int_eq(c.max_connections, 1024);    /* default */

  /* Without the flag the environment wins; without env, the file. */
  st = CLI(&c, &a, env, &d, "attnd");
  ck_assert_msg(st == ATTN_OK, "%s", d.msg);
  ck_assert_int_eq(c.port, 2);
  const char *env_file_only[] = {"ATTND_CONFIG", file, NULL};
  st = CLI(&c, &a, env_file_only, &d, "attnd");
  ck_assert_msg(st == ATTN_OK, "%s", d.msg);
  ck_assert_int_eq(c.port, 1);
  ck_assert_int_eq(c.workers, 3);
  unlink(file);
}
END_TEST

START_TEST(test_cli_config_flag_beats_env) {
  const char *good = WRITE_TMP(0, "{\"workers\": 7}");
  const char *bad = WRITE_TMP(1, "{\"wokers\": 7}");
  const char *env[] = {"ATTND_CONFIG", bad, NULL};
  attn_config c;
  attn_cli_action a;
  attn_diag d = {{0}};
  /* --config wins, so the bad ATTND_CONFIG file is never read. */
  attn_status st = CLI(&c, &a, env, &d, "attnd", "--config", good);
  ck_assert_msg(st == ATTN_OK, "%s", d.msg);
  ck_assert_int_eq(c.workers, 7);
  char eqform[128];
  snprintf(eqform, sizeof eqform, "--config=%s", good);
  st = CLI(&c, &a, env, &d, "attnd", eqform);
  ck_assert_msg(st == ATTN_OK, "%s", d.msg);
  ck_assert_int_eq(c.workers, 7);
  /* Only ATTND_CONFIG: the bad file is read and reported. */
  ck_assert_int_eq(CLI(&c, &a, env, &d, "attnd"), ATTN_EINVAL);
  ASSERT_DIAG_HAS(d, "unknown key 'wokers'");
  ASSERT_DIAG_HAS(d, bad);
  const char *empty[] = {"ATTND_CONFIG", "", NULL};
  ck_assert_int_eq(CLI(&c, &a, empty, &d, "attnd"), ATTN_EINVAL);
  ASSERT_DIAG_HAS(d, "ATTND_CONFIG");
  ck_assert_int_eq(CLI(&c, &a, NULL, &d, "attnd", "--config="), ATTN_EINVAL);
  ck_assert_int_eq(
      CLI(&c, &a, NULL, &d, "attnd", "--config", "/nonexistent.json"),
      ATTN_EIO);
  unlink(good);
  unlink(bad);
}
END_TEST

START_TEST(test_cli_every_key_has_env_and_flag) {
  /* An empty value is an error for every type but the optional texts
   * (default "": unset), which refuse a control character instead, so the
   * diagnostic proves the variable (or flag) was read for that key. */
  size_t n = n_keys();
  attn_config def;
  attn_config_defaults(&def);
  for (size_t i = 0; i < n; i++) {
    const char *key = attn_config_key_name(i);
    char env_name[96], flag[96];
    env_of(key, env_name, sizeof env_name);
    flag_of(key, flag, sizeof flag);
    int optional =
        !strcmp(key, "api_keys_file") || !strcmp(key, "tls_cert_file") ||
        !strcmp(key, "admin_api_keys_file") || !strcmp(key, "tls_key_file") ||
        !strcmp(key, "tls_client_ca_file") ||
        !strcmp(key, "cors_allow_origins") || !strcmp(key, "session_dir") ||
        !strcmp(key, "access_log_exclude") || !strcmp(key, "model_name");
    const char *bad = optional ? "\x01" : "";
    const char *env[] = {env_name, bad, NULL};
    attn_config c;
    attn_cli_action a;
    attn_diag d = {{0}};
    if (optional) {
      const char *unset[] = {env_name, "", NULL};
      ck_assert_int_eq(CLI(&c, &a, unset, &d, "attnd"), ATTN_OK);
    }
    ck_assert_msg(CLI(&c, &a, env, &d, "attnd") == ATTN_EINVAL, "%s ignored",
                  env_name);
    ck_assert_msg(strncmp(d.msg, env_name, strlen(env_name)) == 0, "diag '%s'",
                  d.msg);
    char eq[128];
    snprintf(eq, sizeof eq, "%s=%s", flag, bad);
    ck_assert_msg(CLI(&c, &a, NULL, &d, "attnd", eq) == ATTN_EINVAL,
                  "%s ignored", flag);
    ck_assert_msg(strncmp(d.msg, flag, strlen(flag)) == 0, "diag '%s'", d.msg);
  }
}
END_TEST

START_TEST(test_cli_access_keys) {
  attn_config c;
  attn_cli_action a;
  attn_diag d = {{0}};
  ck_assert_int_eq(CLI(&c, &a, NULL, &d, "attnd", "--tls-cert-file", "c.pem"),
                   ATTN_EINVAL);
  ASSERT_DIAG_HAS(d, "tls_key_file is not");
  ck_assert_int_eq(CLI(&c, &a, NULL, &d, "attnd", "--tls-key-file", "k.pem"),
                   ATTN_EINVAL);
  ASSERT_DIAG_HAS(d, "tls_cert_file is not");
  ck_assert_int_eq(
      CLI(&c, &a, NULL, &d, "attnd", "--tls-client-ca-file", "ca.pem"),
      ATTN_EINVAL);
  ASSERT_DIAG_HAS(d, "mutual TLS needs HTTPS");
  ck_assert_int_eq(
      CLI(&c, &a, NULL, &d, "attnd", "--tls-cert-file", "c.pem",
          "--tls-key-file", "k.pem", "--tls-client-ca-file", "ca.pem"),
      ATTN_OK);
  ck_assert_str_eq(c.tls_client_ca_file, "ca.pem");
  static const char *const bad[][2] = {
      {"https://a.example/", "has a path"},
      {"a.example", "does not begin with http"},
      {"ftp://a.example", "does not begin with http"},
      {"https://", "has no host"},
      {"https://a.example, *", "'*' allows every origin"},
      {"https://*.example", "is not an origin"}};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    ck_assert_int_eq(
        CLI(&c, &a, NULL, &d, "attnd", "--cors-allow-origins", bad[i][0]),
        ATTN_EINVAL);
    ASSERT_DIAG_HAS(d, bad[i][1]);
  }
  ck_assert_int_eq(CLI(&c, &a, NULL, &d, "attnd", "--cors-allow-origins",
                       "https://a.example,http://localhost:3000  "
                       "HTTPS://B.example:8443"),
                   ATTN_OK);
  ck_assert_int_eq(CLI(&c, &a, NULL, &d, "attnd", "--cors-allow-origins", "*"),
                   ATTN_OK);
  ck_assert_str_eq(c.cors_allow_origins, "*");
  /* in a config file, a JSON list of origins too */
  static const char list[] =
      "{\"cors_allow_origins\": [\"https://a.example\", "
      "\"http://localhost:3000\"]}";
  const char *p = write_tmp(0, list, strlen(list));
  attn_config_defaults(&c);
  ck_assert_int_eq(attn_config_load_file(&c, p, &d), ATTN_OK);
  unlink(p);
  ck_assert_str_eq(c.cors_allow_origins,
                   "https://a.example, http://localhost:3000");
  static const char *const bad_list[][2] = {
      {"{\"cors_allow_origins\": [\"https://a.example\", 3]}",
       "cors_allow_origins[1]: must be a string, not a number"},
      {"{\"workers\": [1]}", "workers: must be an integer, not an array"}};
  for (size_t i = 0; i < sizeof bad_list / sizeof bad_list[0]; i++) {
    p = write_tmp(0, bad_list[i][0], strlen(bad_list[i][0]));
    ck_assert_int_eq(attn_config_load_file(&c, p, &d), ATTN_EINVAL);
    unlink(p);
    ASSERT_DIAG_HAS(d, bad_list[i][1]);
  }
  /* ATTND_API_KEY is read (by main), not a key: never printed */
  ck_assert_ptr_null(attn_config_env_unknown("ATTND_API_KEY"));
  ck_assert_int_eq(attn_config_set(&c, "api_key", "x", &d), ATTN_EINVAL);
}
END_TEST

/* access_log_exclude: path prefixes, split as cors_allow_origins (flag,
 * environment, a JSON list in a file); one that is not a path stops the
 * start with a message naming the setting and the item. */
START_TEST(test_cli_access_log_exclude) {
  attn_config c;
  attn_cli_action a;
  attn_diag d = {{0}};
  ck_assert_int_eq(CLI(&c, &a, NULL, &d, "attnd", "--access-log-exclude",
                       "/v2/health/,/metrics"),
                   ATTN_OK);
  ck_assert_str_eq(c.access_log_exclude, "/v2/health/,/metrics");
  const char *env[] = {"ATTND_ACCESS_LOG_EXCLUDE", "/v2/health/ /metrics",
                       NULL};
  ck_assert_int_eq(CLI(&c, &a, env, &d, "attnd"), ATTN_OK);
  ck_assert_str_eq(c.access_log_exclude, "/v2/health/ /metrics");
  static const char *const bad[] = {"v2/health/", "/metrics,health", "/a, *"};
  static const char *const named[] = {"'v2/health/'", "'health'", "'*'"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    ck_assert_int_eq(
        CLI(&c, &a, NULL, &d, "attnd", "--access-log-exclude", bad[i]),
        ATTN_EINVAL);
    ASSERT_DIAG_HAS(d, "access_log_exclude: ");
    ASSERT_DIAG_HAS(d, named[i]);
    ASSERT_DIAG_HAS(d, "does not begin with '/'");
  }
  static const char list[] =
      "{\"access_log_exclude\": [\"/v2/health/\", \"/metrics\"]}";
  const char *p = write_tmp(0, list, strlen(list));
  attn_config_defaults(&c);
  ck_assert_int_eq(attn_config_load_file(&c, p, &d), ATTN_OK);
  unlink(p);
  ck_assert_str_eq(c.access_log_exclude, "/v2/health/, /metrics");
}
END_TEST

START_TEST(test_env_unknown) {
  /* every variable attnd reads is known */
  for (size_t i = 0; i < n_keys(); i++) {
    char env_name[96];
    env_of(attn_config_key_name(i), env_name, sizeof env_name);
    ck_assert_msg(attn_config_env_unknown(env_name) == NULL, "%s", env_name);
  }
  ck_assert_ptr_null(attn_config_env_unknown("ATTND_CONFIG"));
  ck_assert_ptr_null(attn_config_env_unknown("HOME"));
  ck_assert_ptr_null(attn_config_env_unknown("ATTN_WORKERS"));
  ck_assert_ptr_null(attn_config_env_unknown(NULL));
  /* typos get the nearest variable; the key part is compared */
  ck_assert_str_eq(attn_config_env_unknown("ATTND_WORKRS"), "ATTND_WORKERS");
  ck_assert_str_eq(attn_config_env_unknown("ATTND_workers"), "ATTND_WORKERS");
  ck_assert_str_eq(attn_config_env_unknown("ATTND_CONFG"), "ATTND_CONFIG");
  ck_assert_str_eq(attn_config_env_unknown("ATTND_MAX_BODY_BYTE"),
                   "ATTND_MAX_BODY_BYTES");
  ck_assert_str_eq(attn_config_env_unknown("ATTND_ZZZ"), "");
  ck_assert_str_eq(attn_config_env_unknown("ATTND_"), "");
}
END_TEST

START_TEST(test_cli_flag_forms) {
  attn_config c;
  attn_cli_action a;
  attn_diag d = {{0}};
  attn_status st =
      CLI(&c, &a, NULL, &d, "attnd", "--host", "::", "--port=0", "--workers",
          "16", "--blas-threads-per-worker=2", "--max-body-bytes", "1024",
          "--access-log", "no", "--log-format=text", "--models-dir", "m=1",
          "--queue-timeout-ms", "-0");
  ck_assert_msg(st == ATTN_OK, "%s", d.msg);
  ck_assert_int_eq(a, ATTN_CLI_RUN);
  ck_assert_str_eq(c.host, "::");
  ck_assert_int_eq(c.port, 0);
  ck_assert_int_eq(c.workers, 16);
  ck_assert_int_eq(c.blas_threads_per_worker, 2);
  ck_assert_int_eq(c.max_body_bytes, 1024);
  ck_assert(!c.access_log);
  ck_assert_int_eq(c.log_format, ATTN_LOG_TEXT);
  ck_assert_str_eq(c.models_dir, "m=1");
  ck_assert_int_eq(c.queue_timeout_ms, 0);
  /* Repeated: the last wins.  A value may start with a single dash. */
  st =
      CLI(&c, &a, NULL, &d, "attnd", "--port", "1", "--port=2", "--host", "-x");
  ck_assert_msg(st == ATTN_OK, "%s", d.msg);
  ck_assert_int_eq(c.port, 2);
  ck_assert_str_eq(c.host, "-x");
  /* A value starting with "--" needs the = form. */
  st = CLI(&c, &a, NULL, &d, "attnd", "--models-dir=--odd");
  ck_assert_msg(st == ATTN_OK, "%s", d.msg);
  ck_assert_str_eq(c.models_dir, "--odd");
}
END_TEST

START_TEST(test_cli_errors_change_nothing) {
  static const struct {
    const char *argv[4];
    const char *msg;
  } cases[] = {
      {{"attnd", "--port"}, "option '--port' needs a value"},
      {{"attnd", "--port", "--workers", "2"}, "option '--port' needs a value"},
      {{"attnd", "--config"}, "option '--config' needs a value"},
      {{"attnd", "--port", "12abc"},
       "--port: '12abc' is not an integer (port must be 0..65535)"},
      {{"attnd", "--port="}, "--port: '' is not an integer"},
      {{"attnd", "--workers", "-1"},
       "--workers: -1 is out of range (workers must be 0..256)"},
      {{"attnd", "--shutdown-delay-ms", "3600001"},
       "--shutdown-delay-ms: 3600001 is out of range (shutdown_delay_ms must "
       "be 0..3600000)"},
      {{"attnd", "--check-config", "--healthcheck"},
       "--check-config and --healthcheck cannot be used together"},
      {{"attnd", "--healthcheck="}, "option '--healthcheck=' needs a URL"},
      {{"attnd", "--healthchek"}, "did you mean '--healthcheck'?"},
      {{"attnd", "--wokers", "3"},
       "unknown option '--wokers' (did you mean '--workers'?)"},
      {{"attnd", "--queue_capacity", "3"}, "did you mean '--queue-capacity'?"},
      {{"attnd", "--confg", "x"}, "did you mean '--config'?"},
      {{"attnd", "--frobnicate"}, "unknown option '--frobnicate'; try --help"},
      {{"attnd", "serve"}, "unexpected argument 'serve'"},
      {{"attnd", "-p", "80"}, "unexpected argument '-p'"},
      {{"attnd", "--"}, "unexpected argument '--'"},
      {{"attnd", "--check-config=yes"},
       "option '--check-config' takes no value"},
      {{"attnd", "--access-log", "maybe"},
       "--access-log: 'maybe' is not a boolean"},
      /* each in range, but not together */
      {{"attnd", "--max-total-body-bytes", "1000000"},
       "max_total_body_bytes=1000000 is less than max_body_bytes=268435456"},
  };
  const char *env[] = {"ATTND_WORKERS", "5", NULL};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    size_t argc = 0;
    while (argc < 4 && cases[i].argv[argc]) argc++;
    attn_config c, before;
    non_default(&c);
    before = c;
    attn_cli_action a = ATTN_CLI_VERSION;
    attn_diag d = {{0}};
    attn_status st = cli_run(&c, &a, env, (char **)cases[i].argv, argc, &d);
    ck_assert_msg(st == ATTN_EINVAL, "case %zu: %s", i, attn_status_name(st));
    ASSERT_UNCHANGED(c, before);
    ck_assert_int_eq(a, ATTN_CLI_VERSION);
    ASSERT_DIAG_HAS(d, cases[i].msg);
  }
  /* A bad environment value is reported with its variable name. */
  const char *bad_env[] = {"ATTND_PORT", "80x", NULL};
  attn_config c;
  attn_cli_action a;
  attn_diag d = {{0}};
  ck_assert_int_eq(CLI(&c, &a, bad_env, &d, "attnd"), ATTN_EINVAL);
  ck_assert_str_eq(
      d.msg, "ATTND_PORT: '80x' is not an integer (port must be 0..65535)");
  /* ...even when a flag would override it: every layer must be valid. */
  ck_assert_int_eq(CLI(&c, &a, bad_env, &d, "attnd", "--port", "80"),
                   ATTN_EINVAL);
}
END_TEST

START_TEST(test_cli_actions) {
  attn_config c, before;
  non_default(&c);
  before = c;
  attn_cli_action a = ATTN_CLI_RUN;
  attn_diag d = {{0}};
  const char *bad_env[] = {"ATTND_PORT", "bad", NULL};
  /* --help and --version return at once, reading nothing, changing nothing. */
  ck_assert_int_eq(CLI(&c, &a, bad_env, &d, "attnd", "--help", "--bogus"),
                   ATTN_OK);
  ck_assert_int_eq(a, ATTN_CLI_HELP);
  ASSERT_UNCHANGED(c, before);
  ck_assert_int_eq(CLI(&c, &a, NULL, &d, "attnd", "-h"), ATTN_OK);
  ck_assert_int_eq(a, ATTN_CLI_HELP);
  ck_assert_int_eq(
      CLI(&c, &a, bad_env, &d, "attnd", "--config", "/nonexistent", "-V"),
      ATTN_OK);
  ck_assert_int_eq(a, ATTN_CLI_VERSION);
  ck_assert_int_eq(CLI(&c, &a, NULL, &d, "attnd", "--version"), ATTN_OK);
  ck_assert_int_eq(a, ATTN_CLI_VERSION);
  ck_assert_int_eq(CLI(&c, &a, NULL, &d, "attnd", "--port", "9", "--help=x"),
                   ATTN_EINVAL);
  /* --check-config still builds and validates the config. */
  ck_assert_int_eq(
      CLI(&c, &a, NULL, &d, "attnd", "--check-config", "--port", "9"), ATTN_OK);
  ck_assert_int_eq(a, ATTN_CLI_CHECK);
  ck_assert_int_eq(c.port, 9);
  ck_assert_int_eq(CLI(&c, &a, bad_env, &d, "attnd", "--check-config"),
                   ATTN_EINVAL);
}
END_TEST

START_TEST(test_usage_lists_every_key) {
  char *text = NULL;
  size_t len = 0;
  FILE *m = open_memstream(&text, &len);
  ck_assert_ptr_nonnull(m);
  attn_config_usage(m, "attnd");
  fclose(m);
  ck_assert_ptr_nonnull(strstr(text, "Usage: attnd "));
  static const char *const fixed[] = {
      "--config FILE", "--check-config", "--help",
      "--version",     "ATTND_CONFIG",   "default 8080, range 0..65535"};
  for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++)
    ck_assert_msg(strstr(text, fixed[i]), "usage lacks %s", fixed[i]);
  for (size_t i = 0; attn_config_key_name(i); i++) {
    char name[96], want[112];
    flag_of(attn_config_key_name(i), name, sizeof name);
    snprintf(want, sizeof want, "  %s ", name);
    ck_assert_msg(strstr(text, want), "usage lacks '%s'", want);
    env_of(attn_config_key_name(i), name, sizeof name);
    snprintf(want, sizeof want, "env %s\n", name);
    ck_assert_msg(strstr(text, want), "usage lacks '%s'", want);
  }
  free(text);
}
END_TEST

/* ---- memory: the budget and the limit it is derived from ---------------- */

START_TEST(test_body_budget) {
  attn_config c;
  attn_config_defaults(&c);
  const int64_t mib = 1024 * 1024;
  /* auto: half the memory, never below max_body_bytes, at most 2^40 */
  ck_assert_int_eq(attn_config_body_budget(&c, 24000 * (uint64_t)mib),
                   12000 * mib);
  ck_assert_int_eq(attn_config_body_budget(&c, 300 * (uint64_t)mib), 256 * mib);
  ck_assert_int_eq(attn_config_body_budget(&c, UINT64_MAX), 1LL << 40);
  /* set: taken as it is */
  attn_diag d = {{0}};
  ck_assert_int_eq(attn_config_set(&c, "max_total_body_bytes", "536870912", &d),
                   ATTN_OK);
  ck_assert_int_eq(attn_config_body_budget(&c, 64 * (uint64_t)mib), 512 * mib);
  /* equal to max_body_bytes is allowed: one body at a time */
  attn_cli_action a;
  ck_assert_int_eq(CLI(&c, &a, NULL, &d, "attnd", "--max-body-bytes", "4096",
                       "--max-total-body-bytes", "4096"),
                   ATTN_OK);
  ck_assert_int_eq(c.max_total_body_bytes, 4096);
}
END_TEST

/* A fake root for attn_memory_limit: files at root/rel, directories made as
 * needed and all removed by fake_root_remove. */
static char fake_root[64];
static char fake_made[16][160];
static int fake_n;

static void fake_file(const char *rel, const char *text) {
  char path[160];
  snprintf(path, sizeof path, "%s/%s", fake_root, rel);
  for (char *p = path + strlen(fake_root) + 1; (p = strchr(p, '/')); p++) {
    *p = '\0';
    if (mkdir(path, 0700) == 0) {
      ck_assert_int_lt(fake_n, 16);
      snprintf(fake_made[fake_n++], sizeof fake_made[0], "%s", path);
    }
    *p = '/';
  }
  FILE *f = fopen(path, "w");
  ck_assert_ptr_nonnull(f);
  fputs(text, f);
  ck_assert_int_eq(fclose(f), 0);
  ck_assert_int_lt(fake_n, 16);
  snprintf(fake_made[fake_n++], sizeof fake_made[0], "%s", path);
}

static void fake_root_make(void) {
  snprintf(fake_root, sizeof fake_root, "/tmp/attn_test_mem_XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(fake_root));
  fake_n = 0;
}

static void fake_root_remove(void) {
  while (fake_n > 0) ck_assert_int_eq(remove(fake_made[--fake_n]), 0);
  ck_assert_int_eq(rmdir(fake_root), 0);
}

START_TEST(test_memory_limit) {
  const uint64_t gib = 1024 * 1024 * 1024, phys = 24 * gib;
  /* nothing readable: the RAM (or no limit at all) */
  ck_assert_uint_eq(attn_memory_limit("/nonexistent", phys), phys);
  ck_assert_uint_eq(attn_memory_limit("/nonexistent", 0), UINT64_MAX);

  /* cgroup v2, a pod's limit on the parent of the container's cgroup
   * ("max" on the container itself) */
  fake_root_make();
  fake_file("proc/self/cgroup", "0::/kubepods/pod1/ctr\n");
  fake_file("sys/fs/cgroup/kubepods/pod1/ctr/memory.max", "max\n");
  fake_file("sys/fs/cgroup/kubepods/pod1/memory.max", "2147483648\n");
  fake_file("sys/fs/cgroup/kubepods/memory.max", "8589934592\n");
  ck_assert_uint_eq(attn_memory_limit(fake_root, phys), 2 * gib);
  ck_assert_uint_eq(attn_memory_limit(fake_root, gib), gib); /* RAM smaller */
  fake_root_remove();

  /* cgroup v2 inside a container's namespace: "0::/", the mount's top */
  fake_root_make();
  fake_file("proc/self/cgroup", "0::/\n");
  fake_file("sys/fs/cgroup/memory.max", "1073741824\n");
  ck_assert_uint_eq(attn_memory_limit(fake_root, phys), gib);
  fake_root_remove();

  /* cgroup v1 (Docker --memory): /proc/self/cgroup names the host's path,
   * the mount shows the container's own cgroup at its top; v1's "no limit"
   * is a number near 2^63; memory may share a line with other controllers */
  fake_root_make();
  fake_file("proc/self/cgroup",
            "5:cpu,cpuacct:/docker/abc\n"
            "4:blkio,memory:/docker/abc\n"
            "0::/\n");
  fake_file("sys/fs/cgroup/memory/memory.limit_in_bytes", "536870912\n");
  fake_file("sys/fs/cgroup/cpu/memory.limit_in_bytes", "1024\n"); /* not it */
  ck_assert_uint_eq(attn_memory_limit(fake_root, phys), gib / 2);
  fake_root_remove();

  fake_root_make();
  fake_file("proc/self/cgroup", "4:memory:/user.slice\n");
  fake_file("sys/fs/cgroup/memory/memory.limit_in_bytes",
            "9223372036854771712\n");
  fake_file("sys/fs/cgroup/memory/user.slice/memory.limit_in_bytes",
            "3221225472\n");
  ck_assert_uint_eq(attn_memory_limit(fake_root, phys), 3 * gib);
  /* garbage and empty files are skipped */
  fake_file("sys/fs/cgroup/memory/user.slice/memory.limit_in_bytes", "12x\n");
  fake_n--; /* the same path twice: remove it once */
  ck_assert_uint_eq(attn_memory_limit(fake_root, phys), phys);
  fake_root_remove();
}
END_TEST

/* cgroup CPU quotas, found like memory limits: v2 cpu.max on the path and
 * its ancestors, v1 cfs quota over period; none is 0. */
START_TEST(test_cpu_quota) {
  ck_assert(attn_cpu_quota("/nonexistent") == 0);

  /* v2: a pod's quota on the parent, "max" on the container itself */
  fake_root_make();
  fake_file("proc/self/cgroup", "0::/kubepods/pod1/ctr\n");
  fake_file("sys/fs/cgroup/kubepods/pod1/ctr/cpu.max", "max 100000\n");
  fake_file("sys/fs/cgroup/kubepods/pod1/cpu.max", "150000 100000\n");
  fake_file("sys/fs/cgroup/kubepods/cpu.max", "400000 100000\n");
  ck_assert(attn_cpu_quota(fake_root) == 1.5);
  fake_root_remove();

  /* v2 in the container's own namespace: the mount's top; no quota */
  fake_root_make();
  fake_file("proc/self/cgroup", "0::/\n");
  fake_file("sys/fs/cgroup/cpu.max", "max 100000\n");
  ck_assert(attn_cpu_quota(fake_root) == 0);
  fake_file("sys/fs/cgroup/cpu.max", "200000 100000\n");
  fake_n--; /* the same path twice: remove it once */
  ck_assert(attn_cpu_quota(fake_root) == 2.0);
  fake_root_remove();

  /* v1 (Docker --cpus): the cpu,cpuacct hierarchy, seen at the mount's
   * top; -1 is no quota; the memory hierarchy's files are not read */
  fake_root_make();
  fake_file("proc/self/cgroup",
            "5:cpu,cpuacct:/docker/abc\n"
            "4:memory:/docker/abc\n");
  fake_file("sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us", "50000\n");
  fake_file("sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us", "100000\n");
  fake_file("sys/fs/cgroup/memory/cpu.cfs_quota_us", "1000\n"); /* not it */
  fake_file("sys/fs/cgroup/memory/cpu.cfs_period_us", "100000\n");
  ck_assert(attn_cpu_quota(fake_root) == 0.5);
  fake_root_remove();

  fake_root_make();
  fake_file("proc/self/cgroup", "3:cpu:/user.slice\n");
  fake_file("sys/fs/cgroup/cpu/cpu.cfs_quota_us", "-1\n");
  fake_file("sys/fs/cgroup/cpu/cpu.cfs_period_us", "100000\n");
  ck_assert(attn_cpu_quota(fake_root) == 0);
  fake_file("sys/fs/cgroup/cpu/user.slice/cpu.cfs_quota_us", "300000\n");
  fake_file("sys/fs/cgroup/cpu/user.slice/cpu.cfs_period_us", "100000\n");
  ck_assert(attn_cpu_quota(fake_root) == 3.0);
  fake_root_remove();
}
END_TEST

/* The CPUs auto settings count: online, affinity and quota (rounded up),
 * the smallest, at least 1; and the log's explanation. */
START_TEST(test_cpus_allowed) {
  char why[160];
  ck_assert_int_eq(attn_cpus_allowed(8, 0, 0, NULL, 0), 8);
  ck_assert_int_eq(attn_cpus_allowed(8, 3, 0, why, sizeof why), 3);
  ck_assert_str_eq(why,
                   "3 CPUs allowed: no cgroup CPU quota, 3 in the "
                   "affinity mask, 8 online");
  ck_assert_int_eq(attn_cpus_allowed(4, 4, 1.5, why, sizeof why), 2);
  ck_assert_str_eq(why,
                   "2 CPUs allowed: cgroup CPU quota 1.5 CPUs, 4 in the "
                   "affinity mask, 4 online");
  ck_assert_int_eq(attn_cpus_allowed(4, 4, 2.0, NULL, 0), 2);
  ck_assert_int_eq(attn_cpus_allowed(4, 4, 2.0000001, NULL, 0), 2);
  ck_assert_int_eq(attn_cpus_allowed(4, 2, 3.0, NULL, 0), 2);
  ck_assert_int_eq(attn_cpus_allowed(4, 0, 16.0, NULL, 0), 4);
  ck_assert_int_eq(attn_cpus_allowed(4, 0, 0.1, why, sizeof why), 1);
  ck_assert_str_eq(why, "1 CPU allowed: cgroup CPU quota 0.1 CPUs, 4 online");
  ck_assert_int_eq(attn_cpus_allowed(0, 0, 0, NULL, 0), 1);
}
END_TEST

/* --healthcheck [URL]: the action, the URL where argv has one, settings
 * read as for a start; attn_config_healthcheck_arg agrees, even on an
 * argv the config refuses. */
START_TEST(test_cli_healthcheck) {
  attn_config c;
  attn_cli_action a;
  attn_diag d = {{0}};
  const char *url = "unset";
  const char *env[] = {"ATTND_PORT", "9001", NULL};
  ck_assert_int_eq(CLI(&c, &a, env, &d, "attnd", "--healthcheck"), ATTN_OK);
  ck_assert_int_eq(a, ATTN_CLI_HEALTHCHECK);
  ck_assert_int_eq(c.port, 9001);
  char *argv1[] = {"attnd", "--healthcheck", NULL};
  ck_assert(attn_config_healthcheck_arg(2, argv1, &url));
  ck_assert_ptr_null(url);
  /* a URL after it; an option after it is not one */
  ck_assert_int_eq(CLI(&c, &a, env, &d, "attnd", "--healthcheck",
                       "http://[::1]:7/x", "--port", "5"),
                   ATTN_OK);
  ck_assert_int_eq(a, ATTN_CLI_HEALTHCHECK);
  ck_assert_int_eq(c.port, 5);
  char *argv2[] = {"attnd", "--healthcheck", "http://[::1]:7/x", "--port", "5",
                   NULL};
  ck_assert(attn_config_healthcheck_arg(5, argv2, &url));
  ck_assert_str_eq(url, "http://[::1]:7/x");
  char *argv3[] = {"attnd",       "--port", "5", "--healthcheck",
                   "--log-level", "warn",   NULL};
  ck_assert(attn_config_healthcheck_arg(6, argv3, &url));
  ck_assert_ptr_null(url);
  ck_assert_int_eq(cli_run(&c, &a, NULL, argv3, 6, &d), ATTN_OK);
  ck_assert_int_eq(a, ATTN_CLI_HEALTHCHECK);
  ck_assert_int_eq(c.log_level, ATTN_LOG_WARN);
  char *argv4[] = {"attnd", "--healthcheck=http://h:1", "--bogus", NULL};
  ck_assert(attn_config_healthcheck_arg(3, argv4, &url));
  ck_assert_str_eq(url, "http://h:1");
  ck_assert_int_eq(cli_run(&c, &a, NULL, argv4, 3, &d), ATTN_EINVAL);
  /* a second argument that is not an option after the URL */
  ck_assert_int_eq(CLI(&c, &a, NULL, &d, "attnd", "--healthcheck", "a", "b"),
                   ATTN_EINVAL);
  ASSERT_DIAG_HAS(d, "unexpected argument 'b'");
  /* the value of another option is never taken for it */
  char *argv5[] = {"attnd", "--models-dir=--healthcheck", NULL};
  ck_assert(!attn_config_healthcheck_arg(2, argv5, &url));
  ck_assert_ptr_null(url);
  ck_assert_int_eq(cli_run(&c, &a, NULL, argv5, 2, &d), ATTN_OK);
  ck_assert_int_eq(a, ATTN_CLI_RUN);
}
END_TEST

/* --reload[=PID]: the action with the settings read as for a start (the
 * port it looks for); a PID only after '=' and a positive integer;
 * attn_config_reload_arg agrees; not with --check-config or
 * --healthcheck. */
START_TEST(test_cli_reload) {
  attn_config c;
  attn_cli_action a;
  attn_diag d = {{0}};
  const char *env[] = {"ATTND_PORT", "9002", NULL};
  ck_assert_int_eq(CLI(&c, &a, env, &d, "attnd", "--reload"), ATTN_OK);
  ck_assert_int_eq(a, ATTN_CLI_RELOAD);
  ck_assert_int_eq(c.port, 9002);
  char *argv1[] = {"attnd", "--port", "7", "--reload", NULL};
  ck_assert_int_eq(attn_config_reload_arg(4, argv1), 0);
  ck_assert_int_eq(cli_run(&c, &a, NULL, argv1, 4, &d), ATTN_OK);
  ck_assert_int_eq(c.port, 7);
  char *argv2[] = {"attnd", "--reload=4242", NULL};
  ck_assert_int_eq(attn_config_reload_arg(2, argv2), 4242);
  ck_assert_int_eq(cli_run(&c, &a, NULL, argv2, 2, &d), ATTN_OK);
  ck_assert_int_eq(a, ATTN_CLI_RELOAD);
  char *argv3[] = {"attnd", "--models-dir=--reload", NULL};
  ck_assert_int_eq(attn_config_reload_arg(2, argv3), -1);
  ck_assert_int_eq(CLI(&c, &a, NULL, &d, "attnd", "--reload", "12"),
                   ATTN_EINVAL);
  ASSERT_DIAG_HAS(d, "unexpected argument '12'");
  ck_assert_int_eq(CLI(&c, &a, NULL, &d, "attnd", "--reload=x"), ATTN_EINVAL);
  ASSERT_DIAG_HAS(d, "give the process id");
  ck_assert_int_eq(CLI(&c, &a, NULL, &d, "attnd", "--reload=-3"), ATTN_EINVAL);
  ck_assert_int_eq(CLI(&c, &a, NULL, &d, "attnd", "--healthcheck", "--reload"),
                   ATTN_EINVAL);
  ASSERT_DIAG_HAS(d, "--healthcheck and --reload cannot be used together");
  ck_assert_int_eq(CLI(&c, &a, NULL, &d, "attnd", "--relod"), ATTN_EINVAL);
  ASSERT_DIAG_HAS(d, "did you mean '--reload'?");
}
END_TEST

/* Write text to the file at path (made or truncated). */
static void put_file(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  ck_assert_ptr_nonnull(f);
  fputs(text, f);
  ck_assert_int_eq(fclose(f), 0);
}

/* attn_config_check_models_dir(c) returns st and says want. */
static void models_dir_says(const attn_config *c, attn_status st,
                            const char *want) {
  attn_diag d = {{0}};
  ck_assert_int_eq(attn_config_check_models_dir(c, &d), st);
  ASSERT_DIAG_HAS(d, want);
}

/* A relative models_dir in a file is relative to the file's folder; from
 * the environment or a flag, to the working directory.  Each remembers
 * where it came from, and attn_config_check_models_dir judges it: the
 * default may be absent, a configured one may not. */
START_TEST(test_models_dir_origin) {
  char dir[] = "/tmp/attn_test_md_XXXXXX", path[128], sub[128], want[8400];
  char cwd[4096];
  ck_assert_ptr_nonnull(mkdtemp(dir));
  ck_assert_ptr_nonnull(getcwd(cwd, sizeof cwd));
  snprintf(path, sizeof path, "%s/attnd.json", dir);
  snprintf(sub, sizeof sub, "%s/models", dir);
  ck_assert_int_eq(mkdir(sub, 0700), 0);
  put_file(path, "{\"models_dir\": \"./models\"}");

  attn_config c;
  attn_cli_action a;
  attn_diag d = {{0}};
  ck_assert_int_eq(CLI(&c, &a, NULL, &d, "attnd", "--config", path), ATTN_OK);
  ck_assert_str_eq(c.models_dir, sub);
  snprintf(want, sizeof want,
           "%s: models_dir './models', relative to the file's folder", path);
  ck_assert_str_eq(c.models_dir_from, want);
  ck_assert_int_eq(attn_config_check_models_dir(&c, &d), ATTN_OK);

  /* the environment and a flag: as written, the working directory's */
  const char *env[] = {"ATTND_CONFIG", path, "ATTND_MODELS_DIR", "models",
                       NULL};
  ck_assert_int_eq(CLI(&c, &a, env, &d, "attnd"), ATTN_OK);
  ck_assert_str_eq(c.models_dir, "models");
  ck_assert_str_eq(c.models_dir_from, "ATTND_MODELS_DIR");
  ck_assert_int_eq(CLI(&c, &a, env, &d, "attnd", "--models-dir", "m2"),
                   ATTN_OK);
  ck_assert_str_eq(c.models_dir, "m2");
  ck_assert_str_eq(c.models_dir_from, "--models-dir");
  snprintf(want, sizeof want,
           "models_dir 'm2' (set by --models-dir, relative to the working "
           "directory %s) does not exist",
           cwd);
  models_dir_says(&c, ATTN_EINVAL, want);

  /* an absolute path in the file is kept; a missing one is an error */
  put_file(path, "{\"models_dir\": \"/nonexistent/models\"}");
  ck_assert_int_eq(CLI(&c, &a, NULL, &d, "attnd", "--config", path), ATTN_OK);
  ck_assert_str_eq(c.models_dir, "/nonexistent/models");
  snprintf(want, sizeof want,
           "models_dir '/nonexistent/models' (set by %s: models_dir) does "
           "not exist",
           path);
  models_dir_says(&c, ATTN_EINVAL, want);

  /* not a directory, whatever its origin */
  ck_assert_int_eq(attn_config_set(&c, "models_dir", path, &d), ATTN_OK);
  ck_assert_str_eq(c.models_dir_from, "models_dir");
  models_dir_says(&c, ATTN_EINVAL, "(set by models_dir) is not a directory");
  snprintf(c.models_dir_from, sizeof c.models_dir_from, "%s", "");
  models_dir_says(&c, ATTN_EINVAL, "(the built-in default) is not a directory");

  /* the default may be absent: ENOTFOUND, for a warning */
  attn_config_defaults(&c);
  snprintf(c.models_dir, sizeof c.models_dir, "%s/absent", dir);
  models_dir_says(&c, ATTN_ENOTFOUND,
                  "(the built-in default) does not exist: only the built-in "
                  "models are served");

  /* a relative file name: the folder made absolute from the working
   * directory, so the printed path means the same anywhere */
  attn_config_defaults(&c);
  put_file(path, "{\"models_dir\": \"models\"}");
  ck_assert_int_eq(chdir(dir), 0);
  attn_status st = attn_config_load_file(&c, "./attnd.json", &d);
  ck_assert_int_eq(chdir(cwd), 0);
  ck_assert_msg(st == ATTN_OK, "%s", d.msg);
  char real[4096 + 16];
  ck_assert_ptr_nonnull(realpath(dir, real)); /* /tmp may be a symlink */
  snprintf(want, sizeof want, "%s/models", real);
  ck_assert_str_eq(c.models_dir, want);

  ck_assert_int_eq(unlink(path), 0);
  ck_assert_int_eq(rmdir(sub), 0);
  ck_assert_int_eq(rmdir(dir), 0);
}
END_TEST

Suite *config_suite(void) {
  Suite *s = suite_create("config");
  TCase *t = tcase_create("table");
  tcase_add_test(t, test_defaults);
  tcase_add_test(t, test_key_names);
  suite_add_tcase(s, t);

  t = tcase_create("set");
  tcase_add_test(t, test_set_each_type);
  tcase_add_test(t, test_set_bad_int_text);
  tcase_add_test(t, test_set_out_of_range);
  tcase_add_test(t, test_set_bool_forms);
  tcase_add_test(t, test_set_enum_and_string);
  tcase_add_test(t, test_set_unknown_key);
  suite_add_tcase(s, t);

  t = tcase_create("file");
  tcase_add_test(t, test_file_overrides_some_keys);
  tcase_add_test(t, test_file_errors);
  tcase_add_test(t, test_file_partial_failure_changes_nothing);
  tcase_add_test(t, test_file_io_errors);
  tcase_add_test(t, test_file_sizes);
  tcase_add_test(t, test_shipped_file_equals_defaults);
  tcase_add_test(t, test_write_json_round_trip);
  tcase_add_test(t, test_docs_list_every_key);
  suite_add_tcase(s, t);

  t = tcase_create("cli");
  tcase_add_test(t, test_cli_no_sources_is_defaults);
  tcase_add_test(t, test_cli_layers_precedence);
  tcase_add_test(t, test_cli_config_flag_beats_env);
  tcase_add_test(t, test_cli_every_key_has_env_and_flag);
  tcase_add_test(t, test_env_unknown);
  tcase_add_test(t, test_cli_access_keys);
  tcase_add_test(t, test_cli_access_log_exclude);
  tcase_add_test(t, test_cli_flag_forms);
  tcase_add_test(t, test_cli_errors_change_nothing);
  tcase_add_test(t, test_cli_actions);
  tcase_add_test(t, test_cli_healthcheck);
  tcase_add_test(t, test_cli_reload);
  tcase_add_test(t, test_models_dir_origin);
  tcase_add_test(t, test_usage_lists_every_key);
  suite_add_tcase(s, t);

  t = tcase_create("memory");
  tcase_add_test(t, test_body_budget);
  tcase_add_test(t, test_memory_limit);
  tcase_add_test(t, test_cpu_quota);
  tcase_add_test(t, test_cpus_allowed);
  suite_add_tcase(s, t);
  return s;
}
