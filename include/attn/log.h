/* log.h - process log on stderr: JSON lines or text; its levels and
 * formats (which config.h's log_level and log_format keys use).
 *
 * One line per call, written with a single write(2) so lines from several
 * threads never interleave.  Level and format are set once at start-up by
 * main (before threads start) and read-only afterwards.  The log needs
 * nothing from the config: config.h includes this header, not the other
 * way round. */
#ifndef ATTN_LOG_H
#define ATTN_LOG_H

#include <stddef.h>
#include <stdint.h>

/* Levels, least severe first: a line is written when its level is at least
 * the one set (config key log_level). */
typedef enum {
  ATTN_LOG_DEBUG,
  ATTN_LOG_INFO,
  ATTN_LOG_WARN,
  ATTN_LOG_ERROR
} attn_log_level;

/* Line formats (config key log_format). */
typedef enum { ATTN_LOG_JSON, ATTN_LOG_TEXT } attn_log_format;

/* Their names as config values and log lines spell them ("info", "json"),
 * indexed by the enum and NULL-terminated: the config's table of keys
 * reads its choices from these. */
extern const char *const attn_log_level_names[ATTN_LOG_ERROR + 2];
extern const char *const attn_log_format_names[ATTN_LOG_TEXT + 2];

/* The name of a level or format; NULL for foreign values. */
const char *attn_log_level_name(attn_log_level l);
const char *attn_log_format_name(attn_log_format f);

void attn_log_init(attn_log_level level, attn_log_format format);

/* Syslog priority prefixes (config key log_priority_prefix): every line
 * begins with "<N>", its level's syslog priority (error 3, warn 4, info 6,
 * debug 7; access lines 6), which journald reads off a stream and strips
 * (systemd.exec(5), SyslogLevelPrefix=, on by default), so that
 * `journalctl -p err` finds the errors.  auto: only when stderr is the
 * journal (attn_log_stream_is_journal); a terminal or `docker logs` would
 * show the "<3>". */
typedef enum {
  ATTN_LOG_PREFIX_AUTO,
  ATTN_LOG_PREFIX_ALWAYS,
  ATTN_LOG_PREFIX_NEVER
} attn_log_prefix_mode;
extern const char *const attn_log_prefix_names[ATTN_LOG_PREFIX_NEVER + 2];

/* The syslog priority of a level's lines (3, 4, 6 or 7). */
int attn_log_priority(attn_log_level level);

/* Prefix every line from now on (on) or none.  Set by main before threads
 * start, as attn_log_init. */
void attn_log_set_priority_prefix(int on);

/* Whether fd is the journal's stream: journal_stream is the value of
 * JOURNAL_STREAM ("DEV:INODE" in decimal, which systemd sets for a
 * service whose stdout or stderr it connects to the journal) and fd's
 * fstat(2) has that device and inode (not so when the service's stderr
 * was redirected elsewhere).  0 for NULL, a malformed value or another
 * file.  Any thread. */
int attn_log_stream_is_journal(const char *journal_stream, int fd);

#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
void attn_log(attn_log_level level, const char *fmt, ...);

/* attn_log for lines that can come in floods: a client's junk, or a
 * library's complaint about it, once per connection.  kind (any address
 * that stays the same for lines of one kind: a format string literal)
 * names the kind.  Its first line is written; the lines of that kind that
 * follow within ATTN_LOG_REPEAT_S of the last one written are only
 * counted, and the next line written for the kind (the next such line
 * after that time, or attn_log_flush_repeats) is the latest of them
 * followed by "(N more like this suppressed)".  So a flood of one kind
 * writes a line per ATTN_LOG_REPEAT_S.  ATTN_LOG_REPEAT_KINDS kinds are
 * followed at once (a kind with nothing pending makes room after
 * ATTN_LOG_REPEAT_S); beyond that, lines share one count.  Any thread. */
#define ATTN_LOG_REPEAT_S 10
#define ATTN_LOG_REPEAT_KINDS 32
#if defined(__GNUC__)
__attribute__((format(printf, 3, 4)))
#endif
void attn_log_repeated(attn_log_level level, const void *kind, const char *fmt,
                       ...);

/* Writes the pending count of every kind whose ATTN_LOG_REPEAT_S has
 * passed since its last line, or (all) of every kind: main calls it once a
 * second, and with all at exit.  Any thread. */
void attn_log_flush_repeats(int all);

/* Internal (tests): attn__log_repeat_interval sets ATTN_LOG_REPEAT_S, in
 * nanoseconds, from now on; attn__log_repeat_forget empties the table of
 * kinds and writes nothing. */
void attn__log_repeat_interval(uint64_t ns);
void attn__log_repeat_forget(void);

/* The bytes of a User-Agent an access line keeps (the rest is cut). */
#define ATTN_LOG_USER_AGENT_MAX 256

/* One access-log line (always JSON fields, or key=value in text format). */
typedef struct attn_access {
  const char *method, *path, *request_id;
  /* the peer's address as libmicrohttpd saw it ("127.0.0.1", "::1"), the
   * model the request named or ran, and its User-Agent (escaped, cut to
   * ATTN_LOG_USER_AGENT_MAX bytes); each NULL or "": omitted */
  const char *client, *model, *user_agent;
  int status;
  uint64_t bytes_in, bytes_out;
  double queue_ms, compute_ms, total_ms;
  const char *closed;   /* why the connection ended early, or NULL (omitted) */
  const char *trace_id; /* a W3C traceparent's, or NULL (omitted) */
} attn_access;

void attn_log_access(const attn_access *a);

/* Internal (tests): ts as "YYYY-MM-DDTHH:MM:SS.mmmZ" (UTC) into out, which
 * holds ATTN_LOG_TIME_MAX bytes; returns the length.  Any thread. */
#define ATTN_LOG_TIME_MAX 40
struct timespec;
size_t attn__log_time(const struct timespec *ts, char *out);

#endif
