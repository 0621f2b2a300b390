/* log.c - stderr logging, JSON lines or text (see include/attn/log.h), and
 * the names of its levels and formats.
 *
 * Thread-safe: each line is formatted into a local buffer and written with
 * one write(2); the level and format are set before threads start.
 *
 * Repeated lines (attn_log_repeated): a table of ATTN_LOG_REPEAT_KINDS
 * kinds, and one more slot that counts the lines of kinds that find no
 * room, under one mutex: per kind the time of its last written line, the
 * lines counted since and the latest of them (its text, for the line that
 * reports the count).  The text is formatted before the lock; the lines
 * are written after it.  Why: libmicrohttpd reports each failed TLS
 * handshake (src/server/http.c, mhd_log), so 200 junk handshakes wrote
 * 200 warnings; now 2 lines, the second with "(199 more like this
 * suppressed)" after ATTN_LOG_REPEAT_S. */
#include "attn/log.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "attn/buf.h"

const char *const attn_log_level_names[ATTN_LOG_ERROR + 2] = {
    "debug", "info", "warn", "error", NULL};
const char *const attn_log_format_names[ATTN_LOG_TEXT + 2] = {"json", "text",
                                                              NULL};

_Static_assert(ATTN_LOG_DEBUG == 0 && ATTN_LOG_INFO == 1 &&
                   ATTN_LOG_WARN == 2 && ATTN_LOG_ERROR == 3,
               "attn_log_level_names[] is indexed by attn_log_level");
_Static_assert(ATTN_LOG_JSON == 0 && ATTN_LOG_TEXT == 1,
               "attn_log_format_names[] is indexed by attn_log_format");

const char *attn_log_level_name(attn_log_level l) {
  return (unsigned)l <= ATTN_LOG_ERROR ? attn_log_level_names[l] : NULL;
}

const char *attn_log_format_name(attn_log_format f) {
  return (unsigned)f <= ATTN_LOG_TEXT ? attn_log_format_names[f] : NULL;
}

static attn_log_level g_level = ATTN_LOG_INFO;
static attn_log_format g_format = ATTN_LOG_JSON;

void attn_log_init(attn_log_level level, attn_log_format format) {
  g_level = level;
  g_format = format;
}

size_t attn__log_time(const struct timespec *ts, char *out) {
  /* gmtime_r and strftime once a second per thread: the date and time of
   * day are kept for the second they were made for */
  static _Thread_local bool have;
  static _Thread_local time_t sec;
  static _Thread_local char day[32];
  static _Thread_local size_t n;
  if (!have || ts->tv_sec != sec) {
    struct tm tm;
    gmtime_r(&ts->tv_sec, &tm);
    n = strftime(day, sizeof day, "%Y-%m-%dT%H:%M:%S", &tm);
    sec = ts->tv_sec;
    have = true;
  }
  memcpy(out, day, n);
  unsigned ms = (unsigned)(ts->tv_nsec / 1000000) % 1000;
  out[n] = '.';
  out[n + 1] = (char)('0' + ms / 100);
  out[n + 2] = (char)('0' + ms / 10 % 10);
  out[n + 3] = (char)('0' + ms % 10);
  out[n + 4] = 'Z';
  out[n + 5] = '\0';
  return n + 5;
}

static void timestamp(char *out) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  attn__log_time(&ts, out);
}

static void emit(attn_buf *b) {
  if (attn_buf_append(b, "\n", 1) == ATTN_OK) {
    ssize_t r = write(STDERR_FILENO, b->data, b->len);
    (void)r;
  }
  attn_buf_free(b);
}

/* One line holding msg. */
static void write_line(attn_log_level level, const char *msg) {
  char ts[ATTN_LOG_TIME_MAX];
  attn_buf b;
  timestamp(ts);
  attn_buf_init(&b, 0);
  if (g_format == ATTN_LOG_JSON) {
    attn_buf_printf(&b, "{\"time\":\"%s\",\"level\":\"%s\",\"msg\":", ts,
                    attn_log_level_name(level));
    attn_buf_json_string(&b, msg);
    attn_buf_puts(&b, "}");
  } else {
    attn_buf_printf(&b, "%s %-5s %s", ts, attn_log_level_name(level), msg);
  }
  emit(&b);
}

void attn_log(attn_log_level level, const char *fmt, ...) {
  char msg[1024];
  va_list ap;
  if (level < g_level) return;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  write_line(level, msg);
}

/* ---- repeated lines --------------------------------------------------- */

typedef struct repeat {
  const void *kind; /* NULL: free (the overflow slot: any kind) */
  uint64_t last_ns; /* its last written line */
  uint64_t counted; /* lines since, not written */
  attn_log_level level;
  char latest[1024]; /* the latest of them */
} repeat;

static pthread_mutex_t repeat_mu = PTHREAD_MUTEX_INITIALIZER;
static repeat repeats[ATTN_LOG_REPEAT_KINDS + 1]; /* the last: overflow */
static uint64_t repeat_ns = (uint64_t)ATTN_LOG_REPEAT_S * 1000000000u;

void attn__log_repeat_interval(uint64_t ns) {
  pthread_mutex_lock(&repeat_mu);
  repeat_ns = ns;
  pthread_mutex_unlock(&repeat_mu);
}

void attn__log_repeat_forget(void) {
  pthread_mutex_lock(&repeat_mu);
  memset(repeats, 0, sizeof repeats);
  pthread_mutex_unlock(&repeat_mu);
}

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* The slot of kind: its own, a free one, one whose time has passed with
 * nothing counted, or the overflow slot.  Under repeat_mu. */
static repeat *repeat_slot(const void *kind, uint64_t now) {
  repeat *room = NULL;
  for (int i = 0; i < ATTN_LOG_REPEAT_KINDS; i++) {
    repeat *r = &repeats[i];
    if (r->kind == kind) return r;
    if (!room && (!r->kind || (!r->counted && now - r->last_ns >= repeat_ns)))
      room = r;
  }
  if (!room) return &repeats[ATTN_LOG_REPEAT_KINDS];
  *room = (repeat){.kind = kind};
  return room;
}

/* msg followed by " (N more like this suppressed)" into out (msg alone
 * for none). */
static void with_count(char *out, size_t n, const char *msg, uint64_t count) {
  if (count)
    snprintf(out, n, "%s (%llu more like this suppressed)", msg,
             (unsigned long long)count);
  else
    snprintf(out, n, "%s", msg);
}

void attn_log_repeated(attn_log_level level, const void *kind, const char *fmt,
                       ...) {
  char msg[1024], line[1100];
  va_list ap;
  if (level < g_level) return;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  uint64_t now = now_ns();
  pthread_mutex_lock(&repeat_mu);
  repeat *r = repeat_slot(kind, now);
  bool write = r->last_ns == 0 || now - r->last_ns >= repeat_ns;
  if (write) {
    with_count(line, sizeof line, msg, r->counted);
    r->last_ns = now;
    r->counted = 0;
  } else {
    r->counted++;
    r->level = level;
    snprintf(r->latest, sizeof r->latest, "%s", msg);
  }
  pthread_mutex_unlock(&repeat_mu);
  if (write) write_line(level, line);
}

void attn_log_flush_repeats(int all) {
  uint64_t now = now_ns();
  for (int i = 0; i <= ATTN_LOG_REPEAT_KINDS; i++) {
    char line[1100];
    attn_log_level level = ATTN_LOG_INFO;
    pthread_mutex_lock(&repeat_mu);
    repeat *r = &repeats[i];
    bool write = r->counted && (all || now - r->last_ns >= repeat_ns);
    if (write) {
      with_count(line, sizeof line, r->latest, r->counted - 1); /* + it */
      level = r->level;
      r->last_ns = now;
      r->counted = 0;
    }
    pthread_mutex_unlock(&repeat_mu);
    if (write) write_line(level, line);
  }
}

/* ,"json_key": in JSON lines, " text_key=" in text. */
static void key(attn_buf *b, const char *json_key, const char *text_key) {
  bool json = g_format == ATTN_LOG_JSON;
  attn_buf_puts(b, json ? ",\"" : " ");
  attn_buf_puts(b, json ? json_key : text_key);
  attn_buf_puts(b, json ? "\":" : "=");
}

/* A text field: a JSON string, or the text as it is. */
static void text_field(attn_buf *b, const char *json_key, const char *text_key,
                       const char *v) {
  key(b, json_key, text_key);
  if (g_format == ATTN_LOG_JSON)
    attn_buf_json_string(b, v);
  else
    attn_buf_puts(b, v);
}

/* Access lines are written for every request, on the HTTP threads: no
 * printf (its %.3f alone took ~0.3 us a number here), the time from
 * attn__log_time. */
void attn_log_access(const attn_access *a) {
  char ts[ATTN_LOG_TIME_MAX];
  attn_buf b;
  bool json = g_format == ATTN_LOG_JSON;
  timestamp(ts);
  attn_buf_init(&b, 0);
  if (attn_buf_reserve(&b, 320) != ATTN_OK) return;
  if (json) {
    attn_buf_puts(&b, "{\"time\":\"");
    attn_buf_puts(&b, ts);
    attn_buf_puts(&b, "\",\"type\":\"access\",\"method\":");
    attn_buf_json_string(&b, a->method ? a->method : "");
    attn_buf_puts(&b, ",\"path\":");
    attn_buf_json_string(&b, a->path ? a->path : "");
    attn_buf_puts(&b, ",\"status\":");
  } else {
    attn_buf_puts(&b, ts);
    attn_buf_puts(&b, " access ");
    attn_buf_puts(&b, a->method ? a->method : "(null)");
    attn_buf_puts(&b, " ");
    attn_buf_puts(&b, a->path ? a->path : "(null)");
    attn_buf_puts(&b, " ");
  }
  attn_buf_i64(&b, a->status);
  key(&b, "bytes_in", "in");
  attn_buf_u64(&b, a->bytes_in);
  key(&b, "bytes_out", "out");
  attn_buf_u64(&b, a->bytes_out);
  key(&b, "queue_ms", "queue_ms");
  attn_buf_fixed3(&b, a->queue_ms);
  key(&b, "compute_ms", "compute_ms");
  attn_buf_fixed3(&b, a->compute_ms);
  key(&b, "total_ms", "total_ms");
  attn_buf_fixed3(&b, a->total_ms);
  if (a->closed) text_field(&b, "closed", "closed", a->closed);
  if (a->trace_id) text_field(&b, "trace_id", "trace", a->trace_id);
  text_field(&b, "request_id", "id", a->request_id ? a->request_id : "");
  if (json) attn_buf_puts(&b, "}");
  emit(&b);
}
