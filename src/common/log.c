/* log.c - stderr logging, JSON lines or text (see include/attn/log.h).
 *
 * Thread-safe: each line is formatted into a local buffer and written with
 * one write(2); the level and format are set before threads start. */
#include "attn/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "attn/buf.h"

static attn_log_level g_level = ATTN_LOG_INFO;
static attn_log_format g_format = ATTN_LOG_JSON;

void attn_log_init(attn_log_level level, attn_log_format format) {
  g_level = level;
  g_format = format;
}

static void timestamp(char *out, size_t n) {
  struct timespec ts;
  struct tm tm;
  clock_gettime(CLOCK_REALTIME, &ts);
  gmtime_r(&ts.tv_sec, &tm);
  size_t k = strftime(out, n, "%Y-%m-%dT%H:%M:%S", &tm);
  snprintf(out + k, n - k, ".%03ldZ", ts.tv_nsec / 1000000);
}

static void emit(attn_buf *b) {
  if (attn_buf_append(b, "\n", 1) == ATTN_OK) {
    ssize_t r = write(STDERR_FILENO, b->data, b->len);
    (void)r;
  }
  attn_buf_free(b);
}

void attn_log(attn_log_level level, const char *fmt, ...) {
  char msg[1024], ts[40];
  va_list ap;
  attn_buf b;
  if (level < g_level) return;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  timestamp(ts, sizeof ts);
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

void attn_log_access(const attn_access *a) {
  char ts[40];
  attn_buf b;
  timestamp(ts, sizeof ts);
  attn_buf_init(&b, 0);
  if (g_format == ATTN_LOG_JSON) {
    attn_buf_printf(&b, "{\"time\":\"%s\",\"type\":\"access\",\"method\":", ts);
    attn_buf_json_string(&b, a->method ? a->method : "");
    attn_buf_puts(&b, ",\"path\":");
    attn_buf_json_string(&b, a->path ? a->path : "");
    attn_buf_printf(&b,
                    ",\"status\":%d,\"bytes_in\":%llu,\"bytes_out\":%llu,"
                    "\"queue_ms\":%.3f,\"compute_ms\":%.3f,\"total_ms\":%.3f,"
                    "\"request_id\":",
                    a->status, (unsigned long long)a->bytes_in,
                    (unsigned long long)a->bytes_out, a->queue_ms,
                    a->compute_ms, a->total_ms);
    attn_buf_json_string(&b, a->request_id ? a->request_id : "");
    attn_buf_puts(&b, "}");
  } else {
    attn_buf_printf(&b,
                    "%s access %s %s %d in=%llu out=%llu queue_ms=%.3f "
                    "compute_ms=%.3f total_ms=%.3f id=%s",
                    ts, a->method, a->path, a->status,
                    (unsigned long long)a->bytes_in,
                    (unsigned long long)a->bytes_out, a->queue_ms,
                    a->compute_ms, a->total_ms,
                    a->request_id ? a->request_id : "");
  }
  emit(&b);
}
