/* session_dir.c - restarts that lose no session (server.h, session_dir in
 * docs/configuration.md): main writes every session to session_dir after
 * the drain and reads them back at the next start.
 *
 * DESIGN
 * A session is one file, the same session file GET /v1/sessions/{id}/kv
 * answers (src/codec/session_file.c), but with its owner tag (the file
 * stays on the server's disk), named "<owner tag>-<id>.safetensors": a
 * session id's bytes (A-Z a-z 0-9 . _ : -) are a file name's, and the tag
 * in front keeps two keys' sessions of one id apart and every name off
 * "." and "..".
 * Writing: export (the rows as stored), encode, write to ".attnd-<name>.tmp",
 * fsync, rename over <name>, and once all are written fsync the folder:
 * after a crash a file is whole or absent, never half written under its
 * name.  Nothing serves meanwhile (after the drain), so no session
 * changes under it.  After a drain that ran out of time, steps may still
 * run: each session is taken only while no step holds it (a few tries a
 * millisecond apart), so that what is written is its state between two
 * steps; one a step still holds is not saved (an error names it: that
 * step was cut off, its client has no answer) and the rest are.
 * Reading: every "*.safetensors" file, in name order, with attn_read_file
 * (no FIFO, no device; at most what the store's cache could hold plus a
 * header), decoded as strictly as PUT's file, imported with the file's
 * owner and id (the id in its metadata, not the name), its idle clock
 * starting now.  A file loaded is removed (the folder fsynced after); a
 * file skipped is left for someone to look at, with a warning naming it
 * and why; our own temporary files from a write that never finished are
 * removed.  Nothing here stops the start.
 * Threads: main's, before the server serves or after it stopped.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "attn/buf.h"
#include "attn/clock.h"
#include "attn/codec.h"
#include "attn/file.h"
#include "attn/limits.h"
#include "attn/log.h"
#include "attn/server.h"
#include "attn/session.h"

#define SUFFIX ".safetensors"
#define TMP_PREFIX ".attnd-"
#define TMP_SUFFIX ".tmp"

/* The whole of b to fd; 0, or -1 with errno. */
static int write_all(int fd, const char *b, size_t n) {
  while (n) {
    ssize_t w = write(fd, b, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return -1;
    b += w;
    n -= (size_t)w;
  }
  return 0;
}

typedef struct saver {
  const char *dir;
  int dirfd, running; /* running: steps may still run (attn_sessions_save) */
  size_t written, failed;
  uint64_t bytes;
} saver;

#define BUSY_TRIES 20 /* a millisecond apart: a step's lock, not a stat's */

/* s exported: at once, or when steps may run, only between two of them. */
static attn_status take(const saver *sv, attn_session *s, attn_session_dump *x,
                        attn_diag *d) {
  if (!sv->running) return attn_session_export(s, x, d);
  attn_status r = ATTN_EBUSY;
  for (int i = 0; i < BUSY_TRIES && r == ATTN_EBUSY; i++) {
    if (i) nanosleep(&(struct timespec){0, 1000000}, NULL);
    r = attn_session_export_idle(s, x, d);
  }
  return r;
}

/* One session to its file; logs a failure. */
static int save_one(void *user, attn_session *s) {
  saver *sv = user;
  attn_session_dump x;
  attn_diag d = {{0}};
  attn_buf b;
  char name[ATTN_SESSION_ID_MAX + 64], tmp[sizeof name + 16];
  const char *why = NULL;
  int fd = -1;
  attn_buf_init(&b, 0);
  if (take(sv, s, &x, &d)) {
    attn_log(ATTN_LOG_ERROR, "session_dir: session '%s' not saved: %s",
             attn_session_id(s), d.msg);
    sv->failed++;
    return 0;
  }
  snprintf(name, sizeof name, "%016" PRIx64 "-%s" SUFFIX, x.owner, x.id);
  snprintf(tmp, sizeof tmp, TMP_PREFIX "%s" TMP_SUFFIX, name);
  if (attn_session_file_encode(&b, &x))
    why = "out of memory encoding it";
  else if ((fd = openat(sv->dirfd, tmp,
                        O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600)) < 0 ||
           write_all(fd, b.data, b.len) || fsync(fd))
    why = strerror(errno);
  if (fd >= 0 && close(fd) && !why) why = strerror(errno);
  if (!why && renameat(sv->dirfd, tmp, sv->dirfd, name)) why = strerror(errno);
  if (why) {
    if (fd >= 0) unlinkat(sv->dirfd, tmp, 0);
    attn_log(ATTN_LOG_ERROR, "session_dir: session '%s' not saved to %s/%s: %s",
             x.id, sv->dir, name, why);
    sv->failed++;
  } else {
    sv->written++;
    sv->bytes += b.len;
  }
  attn_buf_free(&b);
  attn_session_dump_clear(&x);
  return 0;
}

size_t attn_sessions_save(attn_session_store *st, const char *dir,
                          int running) {
  saver sv = {dir, -1, running, 0, 0, 0};
  uint64_t t0 = attn_now_ns();
  attn_session_stats stats;
  attn_session_store_stats(st, &stats);
  if (mkdir(dir, 0700) && errno != EEXIST) {
    attn_log(ATTN_LOG_ERROR,
             "session_dir: cannot make %s: %s; %zu sessions not saved", dir,
             strerror(errno), stats.sessions);
    return 0;
  }
  if ((sv.dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0) {
    attn_log(ATTN_LOG_ERROR,
             "session_dir: cannot open %s: %s; %zu sessions not saved", dir,
             strerror(errno), stats.sessions);
    return 0;
  }
  if (attn_session_each(st, save_one, &sv) < 0)
    attn_log(ATTN_LOG_ERROR, "session_dir: out of memory; no session saved");
  if (fsync(sv.dirfd))
    attn_log(ATTN_LOG_ERROR, "session_dir: fsync of %s: %s", dir,
             strerror(errno));
  close(sv.dirfd);
  attn_log(ATTN_LOG_INFO,
           "session_dir: %zu session%s saved to %s (%" PRIu64
           " bytes, %.0f ms)%s",
           sv.written, sv.written == 1 ? "" : "s", dir, sv.bytes,
           (double)(attn_now_ns() - t0) / 1e6,
           sv.failed ? "; some were not: see above" : "");
  return sv.written;
}

static int has_suffix(const char *s, const char *suf) {
  size_t n = strlen(s), m = strlen(suf);
  return n >= m && strcmp(s + n - m, suf) == 0;
}

static int by_name(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The "*.safetensors" names of dir, sorted (*n of them; NULL: none or no
 * memory); our temporary files are removed on the way. */
static char **list_files(DIR *dh, const char *dir, size_t *n) {
  char **v = NULL;
  size_t cap = 0;
  struct dirent *e;
  *n = 0;
  while ((e = readdir(dh))) {
    const char *nm = e->d_name;
    if (!strncmp(nm, TMP_PREFIX, strlen(TMP_PREFIX)) &&
        has_suffix(nm, TMP_SUFFIX)) {
      attn_log(ATTN_LOG_WARN,
               "session_dir: removed %s/%s, a file left by a save that did "
               "not finish",
               dir, nm);
      unlinkat(dirfd(dh), nm, 0);
      continue;
    }
    if (nm[0] == '.' || !has_suffix(nm, SUFFIX)) continue;
    if (*n == cap) {
      char **w = realloc(v, (cap = cap ? 2 * cap : 16) * sizeof *v);
      if (!w) break;
      v = w;
    }
    if (!(v[*n] = strdup(nm))) break;
    ++*n;
  }
  if (*n) qsort(v, *n, sizeof *v, by_name);
  return v;
}

/* One file into the store: 1 loaded, 0 skipped (logged). */
static int load_one(attn_session_store *st, int dfd, const char *dir,
                    const char *nm, size_t max_bytes) {
  char path[ATTN_MAX_PATH_LEN + 300];
  char *buf = NULL;
  size_t len = 0;
  attn_diag d = {{0}};
  attn_session_dump x;
  snprintf(path, sizeof path, "%s/%s", dir, nm);
  attn_status s = attn_read_file(path, path, max_bytes, &buf, &len, &d);
  if (!s && !(s = attn_session_file_decode(buf, len, &x, &d))) {
    s = attn_session_import(st, x.owner, x.id, &x, attn_now_ns(), NULL, &d);
    attn_session_dump_clear(&x);
  }
  free(buf);
  if (s) {
    attn_log(ATTN_LOG_WARN, "session_dir: skipped %s: %s", path, d.msg);
    return 0;
  }
  if (unlinkat(dfd, nm, 0))
    attn_log(ATTN_LOG_WARN,
             "session_dir: loaded %s but cannot remove it: %s (it would be "
             "loaded again at the next start)",
             path, strerror(errno));
  return 1;
}

size_t attn_sessions_load(attn_session_store *st, const char *dir) {
  uint64_t t0 = attn_now_ns();
  DIR *dh = opendir(dir);
  if (!dh) {
    if (errno == ENOENT)
      attn_log(ATTN_LOG_INFO,
               "session_dir: %s does not exist yet: no "
               "sessions to load",
               dir);
    else
      attn_log(ATTN_LOG_WARN,
               "session_dir: cannot read %s: %s; no "
               "sessions loaded",
               dir, strerror(errno));
    return 0;
  }
  attn_session_stats stats;
  attn_session_store_stats(st, &stats);
  /* a session's rows take no more than its blocks, which the cache holds */
  size_t max_bytes = stats.limit_bytes + 8 + ATTN_SAFETENSORS_MAX_HEADER;
  size_t n = 0, loaded = 0;
  char **names = list_files(dh, dir, &n);
  for (size_t i = 0; i < n; i++) {
    loaded += (size_t)load_one(st, dirfd(dh), dir, names[i], max_bytes);
    free(names[i]);
  }
  free(names);
  if (loaded) fsync(dirfd(dh));
  closedir(dh);
  attn_log(ATTN_LOG_INFO,
           "session_dir: %zu session%s loaded from %s (%.0f ms)%s", loaded,
           loaded == 1 ? "" : "s", dir, (double)(attn_now_ns() - t0) / 1e6,
           loaded < n ? "; files skipped: see above" : "");
  return loaded;
}
