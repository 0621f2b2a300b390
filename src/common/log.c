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
 * suppressed)" after ATTN_LOG_REPEAT_S.
 *
 * Priority prefixes: with attn_log_set_priority_prefix on, each line
 * starts with "<N>" (attn_log_priority), in the same write(2): journald
 * reads a stream line by line and takes a leading "<N>" as the line's
 * priority (and strips it).  main turns it on when stderr is the journal
 * (attn_log_stream_is_journal) or log_priority_prefix says always. */
#include "attn/log.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "attn/buf.h"

const char *const attn_log_level_names[ATTN_LOG_ERROR + 2] = {
    "debug", "info", "warn", "error", NULL};
const char *const attn_log_format_names[ATTN_LOG_TEXT + 2] = {"json", "text",
                                                              NULL};
const char *const attn_log_prefix_names[ATTN_LOG_PREFIX_NEVER + 2] = {
    "auto", "always", "never", NULL};

_Static_assert(ATTN_LOG_DEBUG == 0 && ATTN_LOG_INFO == 1 &&
                   ATTN_LOG_WARN == 2 && ATTN_LOG_ERROR == 3,
               "attn_log_level_names[] is indexed by attn_log_level");
_Static_assert(ATTN_LOG_JSON == 0 && ATTN_LOG_TEXT == 1,
               "attn_log_format_names[] is indexed by attn_log_format");
_Static_assert(ATTN_LOG_PREFIX_AUTO == 0 && ATTN_LOG_PREFIX_ALWAYS == 1 &&
                   ATTN_LOG_PREFIX_NEVER == 2,
               "attn_log_prefix_names[] is indexed by attn_log_prefix_mode");

const char *attn_log_level_name(attn_log_level l) {
  return (unsigned)l <= ATTN_LOG_ERROR ? attn_log_level_names[l] : NULL;
}

const char *attn_log_format_name(attn_log_format f) {
  return (unsigned)f <= ATTN_LOG_TEXT ? attn_log_format_names[f] : NULL;
}

static attn_log_level g_level = ATTN_LOG_INFO;
static attn_log_format g_format = ATTN_LOG_JSON;
static int g_prefix; /* "<N>" before each line */

void attn_log_init(attn_log_level level, attn_log_format format) {
  g_level = level;
  g_format = format;
}

/* syslog(3)'s LOG_ERR, LOG_WARNING, LOG_INFO, LOG_DEBUG */
int attn_log_priority(attn_log_level level) {
  switch (level) {
    case ATTN_LOG_ERROR:
      return 3;
    case ATTN_LOG_WARN:
      return 4;
    case ATTN_LOG_DEBUG:
      return 7;
    default:
      return 6;
  }
}

void attn_log_set_priority_prefix(int on) {
  g_prefix = on != 0;
}

/* A decimal number of *p up to the byte stop, into *out; 0 when there is
 * none or it does not fit. */
static int parse_decimal(const char **p, char stop, unsigned long long *out) {
  const char *s = *p;
  unsigned long long v = 0;
  if (*s < '0' || *s > '9') return 0;
  for (; *s >= '0' && *s <= '9'; s++) {
    if (v > (~0ull - 9) / 10) return 0;
    v = v * 10 + (unsigned)(*s - '0');
  }
  if (*s != stop) return 0;
  *p = s;
  *out = v;
  return 1;
}

int attn_log_stream_is_journal(const char *journal_stream, int fd) {
  unsigned long long dev, ino;
  struct stat st;
  const char *p = journal_stream;
  if (!p || !parse_decimal(&p, ':', &dev)) return 0;
  p++;
  if (!parse_decimal(&p, '\0', &ino) || fstat(fd, &st) != 0) return 0;
  return (unsigned long long)st.st_dev == dev &&
         (unsigned long long)st.st_ino == ino;
}

/* A new line into b, with its priority prefix when they are on. */
static void begin_line(attn_buf *b, int priority) {
  attn_buf_init(b, 0);
  if (g_prefix) {
    char pre[4] = {'<', (char)('0' + priority), '>', '\0'};
    attn_buf_puts(b, pre);
  }
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
  begin_line(&b, attn_log_priority(level));
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

/* A text line's value that a client chose (a model name from the URL):
 * as it is when it is a plain word, else quoted and escaped as a JSON
 * string, so that a space, a quote or a control byte cannot forge a field
 * or a line. */
static void text_word(attn_buf *b, const char *v) {
  const unsigned char *p = (const unsigned char *)v;
  for (; *p; p++)
    if (*p <= 0x20 || *p == '"' || *p == '\\' || *p == 0x7f) break;
  if (*v && !*p)
    attn_buf_puts(b, v);
  else
    attn_buf_json_string(b, v);
}

/* The client fields of an access line: client, model, user_agent (each
 * omitted when NULL or "").  client is an address (peers.c made it), so
 * it is written as it is. */
static void client_fields(attn_buf *b, const attn_access *a) {
  bool json = g_format == ATTN_LOG_JSON;
  if (a->client && *a->client) { /* digits, '.', ':', hex: never escaped */
    key(b, "client", "client");
    if (json) attn_buf_puts(b, "\"");
    attn_buf_puts(b, a->client);
    if (json) attn_buf_puts(b, "\"");
  }
  if (a->model && *a->model) {
    key(b, "model", "model");
    if (json)
      attn_buf_json_string(b, a->model);
    else
      text_word(b, a->model);
  }
  if (a->user_agent && *a->user_agent) {
    /* cut (a sequence cut in two becomes U+FFFD), always quoted */
    char ua[ATTN_LOG_USER_AGENT_MAX + 1];
    size_t n = strnlen(a->user_agent, ATTN_LOG_USER_AGENT_MAX);
    memcpy(ua, a->user_agent, n);
    ua[n] = '\0';
    key(b, "user_agent", "user_agent");
    attn_buf_json_string(b, ua);
  }
}

/* Access lines are written for every request, on the HTTP threads: no
 * printf (its %.3f alone took ~0.3 us a number here), the time from
 * attn__log_time. */
void attn_log_access(const attn_access *a) {
  char ts[ATTN_LOG_TIME_MAX];
  attn_buf b;
  bool json = g_format == ATTN_LOG_JSON;
  timestamp(ts);
  begin_line(&b, attn_log_priority(ATTN_LOG_INFO));
  /* room for a typical line (with a short User-Agent) at once */
  if (attn_buf_reserve(&b, 512) != ATTN_OK) return;
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
    text_word(&b, a->path ? a->path : "(null)");
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
  client_fields(&b, a);
  /* the client's X-Request-Id may hold spaces and quotes: a word or quoted */
  key(&b, "request_id", "id");
  if (json)
    attn_buf_json_string(&b, a->request_id ? a->request_id : "");
  else
    text_word(&b, a->request_id ? a->request_id : "");
  if (json) attn_buf_puts(&b, "}");
  emit(&b);
}
