/* log.h - process log on stderr: JSON lines or text.
 *
 * One line per call, written with a single write(2) so lines from several
 * threads never interleave.  Level and format are set once at start-up by
 * main (before threads start) and read-only afterwards. */
#ifndef ATTN_LOG_H
#define ATTN_LOG_H

#include <stddef.h>
#include <stdint.h>

#include "attn/config.h"

void attn_log_init(attn_log_level level, attn_log_format format);

#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
void attn_log(attn_log_level level, const char *fmt, ...);

/* One access-log line (always JSON fields, or key=value in text format). */
typedef struct attn_access {
  const char *method, *path, *request_id;
  int status;
  uint64_t bytes_in, bytes_out;
  double queue_ms, compute_ms, total_ms;
  const char *closed; /* why the connection ended early, or NULL (omitted) */
} attn_access;

void attn_log_access(const attn_access *a);

/* Internal (tests): ts as "YYYY-MM-DDTHH:MM:SS.mmmZ" (UTC) into out, which
 * holds ATTN_LOG_TIME_MAX bytes; returns the length.  Any thread. */
#define ATTN_LOG_TIME_MAX 40
struct timespec;
size_t attn__log_time(const struct timespec *ts, char *out);

#endif
