/* test_log.c - the log (src/common/log.c): the names of its levels and
 * formats, its time stamps against gmtime_r + strftime, and the access line
 * in both formats, byte for byte, and repeated lines counted instead of
 * written (attn_log_repeated), the client fields of access lines (a hostile
 * User-Agent escaped and cut), and journald's priority prefixes and how
 * the journal's stream is told apart.  Lines go to stderr, which a test points
 * at a mkstemp() file under /tmp for the call. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "attn/log.h"
#include "unit.h"

/* The names config values and log lines spell; NULL for foreign values. */
START_TEST(test_names) {
  ck_assert_str_eq(attn_log_level_name(ATTN_LOG_WARN), "warn");
  ck_assert_str_eq(attn_log_format_name(ATTN_LOG_TEXT), "text");
  ck_assert_ptr_null(attn_log_level_name((attn_log_level)7));
}
END_TEST

/* attn__log_time against gmtime_r + strftime, in an order that changes
 * the second, keeps it, and goes back (each thread caches one second). */
START_TEST(test_log_time) {
  static const struct timespec ts[] = {{0, 0},
                                       {0, 999999999},
                                       {1, 5000000},
                                       {1700000000, 123456789},
                                       {1700000000, 987000000},
                                       {1699999999, 1000000},
                                       {1700000001, 0},
                                       {1700000001, 999999},
                                       {253402300799, 999999999}};
  for (size_t i = 0; i < sizeof ts / sizeof *ts; i++) {
    char got[ATTN_LOG_TIME_MAX], want[64];
    struct tm tm;
    gmtime_r(&ts[i].tv_sec, &tm);
    size_t k = strftime(want, sizeof want, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(want + k, sizeof want - k, ".%03ldZ", ts[i].tv_nsec / 1000000);
    size_t n = attn__log_time(&ts[i], got);
    ck_assert_str_eq(got, want);
    ck_assert_uint_eq(n, strlen(want));
  }
}
END_TEST

/* The access line as the printf formats of the previous version wrote it,
 * after its time stamp; stderr goes to a file for the call. */
static void check_access_line(attn_log_format fmt, const attn_access *a,
                              const char *want_tail) {
  char path[] = "/tmp/attn-test-log-XXXXXX";
  int fd = mkstemp(path);
  ck_assert_int_ge(fd, 0);
  int saved = dup(STDERR_FILENO);
  ck_assert_int_ge(saved, 0);
  ck_assert_int_ge(dup2(fd, STDERR_FILENO), 0);
  attn_log_init(ATTN_LOG_INFO, fmt);
  attn_log_access(a);
  dup2(saved, STDERR_FILENO);
  close(saved);
  attn_log_init(ATTN_LOG_INFO, ATTN_LOG_JSON);
  char line[1024] = {0};
  ck_assert_int_gt(pread(fd, line, sizeof line - 1, 0), 0);
  close(fd);
  unlink(path);
  /* the time is checked above; what follows it must match */
  const char *tail =
      fmt == ATTN_LOG_JSON ? strstr(line, "Z\",") : strstr(line, "Z ");
  ck_assert_ptr_nonnull(tail);
  ck_assert_str_eq(tail + (fmt == ATTN_LOG_JSON ? 3 : 2), want_tail);
}

/* fmt (the status, the two byte counts, the three times) with a's values. */
static void want_line(char *out, size_t n, const char *fmt,
                      const attn_access *a) {
  snprintf(out, n, fmt, a->status, (unsigned long long)a->bytes_in,
           (unsigned long long)a->bytes_out, a->queue_ms, a->compute_ms,
           a->total_ms);
}

START_TEST(test_access_line) {
  attn_access a = {.method = "POST",
                   .path = "/v2/models/sdpa/infer",
                   .request_id = "id \"7\"",
                   .status = 200,
                   .bytes_in = 9745,
                   .bytes_out = (uint64_t)1 << 40,
                   .queue_ms = 0.0125, /* near a tie: printf's case */
                   .compute_ms = 12345.678901,
                   .total_ms = 0.9996};
  char want[512];
  want_line(want, sizeof want,
            "\"type\":\"access\",\"method\":\"POST\",\"path\":"
            "\"/v2/models/sdpa/infer\",\"status\":%d,\"bytes_in\":%llu,"
            "\"bytes_out\":%llu,\"queue_ms\":%.3f,\"compute_ms\":%.3f,"
            "\"total_ms\":%.3f,\"request_id\":\"id \\\"7\\\"\"}\n",
            &a);
  check_access_line(ATTN_LOG_JSON, &a, want);
  want_line(want, sizeof want,
            "access POST /v2/models/sdpa/infer %d in=%llu out=%llu "
            "queue_ms=%.3f compute_ms=%.3f total_ms=%.3f "
            "id=\"id \\\"7\\\"\"\n", /* quoted: it holds a space */
            &a);
  check_access_line(ATTN_LOG_TEXT, &a, want);
  /* no method, path or id */
  attn_access b = {.status = 404, .queue_ms = -0.0, .total_ms = 1e12};
  want_line(want, sizeof want,
            "\"type\":\"access\",\"method\":\"\",\"path\":\"\",\"status\":%d,"
            "\"bytes_in\":%llu,\"bytes_out\":%llu,\"queue_ms\":%.3f,"
            "\"compute_ms\":%.3f,\"total_ms\":%.3f,\"request_id\":\"\"}\n",
            &b);
  check_access_line(ATTN_LOG_JSON, &b, want);
  /* a request cut short says why, after total_ms */
  attn_access c = {.method = "POST",
                   .path = "/v1/attention",
                   .status = 499,
                   .request_id = "r",
                   .closed = "timeout"};
  want_line(want, sizeof want,
            "\"type\":\"access\",\"method\":\"POST\",\"path\":"
            "\"/v1/attention\",\"status\":%d,\"bytes_in\":%llu,"
            "\"bytes_out\":%llu,\"queue_ms\":%.3f,\"compute_ms\":%.3f,"
            "\"total_ms\":%.3f,\"closed\":\"timeout\",\"request_id\":\"r\"}\n",
            &c);
  check_access_line(ATTN_LOG_JSON, &c, want);
  want_line(want, sizeof want,
            "access POST /v1/attention %d in=%llu out=%llu queue_ms=%.3f "
            "compute_ms=%.3f total_ms=%.3f closed=timeout id=r\n",
            &c);
  check_access_line(ATTN_LOG_TEXT, &c, want);
}
END_TEST

/* client, model and user_agent: after trace_id, before request_id; the
 * User-Agent always escaped (JSON string, in text too) and cut to
 * ATTN_LOG_USER_AGENT_MAX bytes; a model name with a space or a control
 * byte quoted in text; each left out when NULL or "". */
START_TEST(test_access_client_fields) {
  static const char *const nums =
      "\"status\":200,\"bytes_in\":0,\"bytes_out\":0,\"queue_ms\":0.000,"
      "\"compute_ms\":0.000,\"total_ms\":0.000";
  static const char *const text_nums =
      "200 in=0 out=0 queue_ms=0.000 compute_ms=0.000 total_ms=0.000";
  /* X-Request-Id may hold spaces and quotes (printable ASCII): in a text
   * line it must not forge a field */
  const attn_access hostile = {.method = "POST",
                               .path = "/v2/models/m x/infer",
                               .request_id = "r status=500 \"q\"",
                               .status = 200,
                               .client = "::1",
                               .model = "m x",
                               .user_agent = "ev\"il\n\x01\\ua"};
  /* a plain model name as it is; no user agent, no client: left out */
  const attn_access plain = {.method = "POST",
                             .path = "/v1/attention",
                             .request_id = "r",
                             .status = 200,
                             .client = "",
                             .model = "attention"};
  const struct {
    const attn_access *a;
    attn_log_format fmt;
    const char *head, *tail; /* around the numbers */
  } cases[] = {
      {&hostile, ATTN_LOG_JSON,
       "\"type\":\"access\",\"method\":\"POST\",\"path\":"
       "\"/v2/models/m x/infer\",",
       ",\"client\":\"::1\",\"model\":\"m x\",\"user_agent\":"
       "\"ev\\\"il\\n\\u0001\\\\ua\",\"request_id\":"
       "\"r status=500 \\\"q\\\"\"}\n"},
      {&hostile, ATTN_LOG_TEXT, "access POST \"/v2/models/m x/infer\" ",
       " client=::1 model=\"m x\" user_agent=\"ev\\\"il\\n\\u0001\\\\ua\" "
       "id=\"r status=500 \\\"q\\\"\"\n"},
      {&plain, ATTN_LOG_TEXT, "access POST /v1/attention ",
       " model=attention id=r\n"}};
  char want[1024];
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    snprintf(want, sizeof want, "%s%s%s", cases[i].head,
             cases[i].fmt == ATTN_LOG_JSON ? nums : text_nums, cases[i].tail);
    check_access_line(cases[i].fmt, cases[i].a, want);
  }
  /* a long User-Agent is cut to ATTN_LOG_USER_AGENT_MAX bytes */
  char ua[4 * ATTN_LOG_USER_AGENT_MAX];
  memset(ua, 'u', sizeof ua - 1);
  ua[sizeof ua - 1] = '\0';
  attn_access c = {.method = "GET",
                   .path = "/",
                   .request_id = "r",
                   .status = 200,
                   .user_agent = ua};
  snprintf(want, sizeof want,
           "\"type\":\"access\",\"method\":\"GET\",\"path\":\"/\",%s,"
           "\"user_agent\":\"%.*s\",\"request_id\":\"r\"}\n",
           nums, ATTN_LOG_USER_AGENT_MAX, ua);
  check_access_line(ATTN_LOG_JSON, &c, want);
}
END_TEST

/* ---- repeated lines ---------------------------------------------------- */

/* stderr into a new temporary file for a while (text lines). */
typedef struct capture {
  char path[32];
  int fd, saved;
} capture;

static void capture_begin(capture *c) {
  snprintf(c->path, sizeof c->path, "/tmp/attn-test-log-XXXXXX");
  c->fd = mkstemp(c->path);
  ck_assert_int_ge(c->fd, 0);
  c->saved = dup(STDERR_FILENO);
  ck_assert_int_ge(c->saved, 0);
  ck_assert_int_ge(dup2(c->fd, STDERR_FILENO), 0);
  attn_log_init(ATTN_LOG_INFO, ATTN_LOG_TEXT);
}

/* Ends the capture; what was written as it is, into out (n bytes). */
static void capture_raw(capture *c, char *out, size_t n) {
  dup2(c->saved, STDERR_FILENO);
  close(c->saved);
  attn_log_init(ATTN_LOG_INFO, ATTN_LOG_JSON);
  memset(out, 0, n);
  ck_assert_int_ge(pread(c->fd, out, n - 1, 0), 0);
  close(c->fd);
  unlink(c->path);
}

/* Ends the capture; what was written, without the time stamps ("LEVEL
 * msg" lines). */
static void capture_end(capture *c, char *out, size_t n) {
  char raw[8192];
  capture_raw(c, raw, sizeof raw);
  size_t k = 0;
  out[0] = '\0';
  for (char *line = raw, *end; *line; line = end + 1) {
    end = strchr(line, '\n');
    ck_assert_ptr_nonnull(end);
    const char *rest = strchr(line, ' '); /* past the time */
    ck_assert_ptr_nonnull(rest);
    size_t len = (size_t)(end - rest);
    ck_assert_uint_lt(k + len + 1, n);
    memcpy(out + k, rest + 1, len); /* with its '\n' */
    k += len;
  }
  out[k] = '\0';
}

/* attn_log_repeated: the first line of a kind is written, the next ones
 * counted until their time has passed; attn_log_flush_repeats writes the
 * counts (each with the latest line), at once with all; kinds are apart. */
START_TEST(test_log_repeated) {
  static const char kind_a[] = "a", kind_b[] = "b";
  capture c;
  char got[4096];
  attn__log_repeat_forget();
  attn__log_repeat_interval(3600ull * 1000000000u); /* never passes */
  capture_begin(&c);
  for (int i = 0; i < 200; i++)
    attn_log_repeated(ATTN_LOG_WARN, kind_a, "junk %d", i);
  attn_log_repeated(ATTN_LOG_WARN, kind_b, "other");
  attn_log_repeated(ATTN_LOG_WARN, kind_b, "other again");
  attn_log_flush_repeats(0); /* the time has not passed: nothing */
  capture_end(&c, got, sizeof got);
  ck_assert_str_eq(got, "warn  junk 0\nwarn  other\n");
  capture_begin(&c);
  attn_log_flush_repeats(1);
  attn_log_flush_repeats(1); /* nothing left */
  capture_end(&c, got, sizeof got);
  ck_assert_str_eq(got,
                   "warn  junk 199 (198 more like this suppressed)\n"
                   "warn  other again\n");
  /* once the time has passed, the next line is written with the count of
   * the ones before it, and flush writes what is pending */
  capture_begin(&c);
  attn_log_repeated(ATTN_LOG_WARN, kind_a, "junk 200");
  attn_log_repeated(ATTN_LOG_WARN, kind_a, "junk 201");
  attn__log_repeat_interval(0);
  attn_log_repeated(ATTN_LOG_WARN, kind_a, "junk 202");
  attn__log_repeat_interval(3600ull * 1000000000u);
  attn_log_repeated(ATTN_LOG_WARN, kind_a, "junk 203");
  attn_log_repeated(ATTN_LOG_WARN, kind_a, "junk 204");
  attn__log_repeat_interval(0);
  attn_log_flush_repeats(0);
  attn_log_repeated(ATTN_LOG_DEBUG, kind_a, "below the level: never");
  attn__log_repeat_interval((uint64_t)ATTN_LOG_REPEAT_S * 1000000000u);
  capture_end(&c, got, sizeof got);
  ck_assert_str_eq(got,
                   "warn  junk 202 (2 more like this suppressed)\n"
                   "warn  junk 204 (1 more like this suppressed)\n");
}
END_TEST

/* More kinds than the table holds: the ones past it share one count. */
START_TEST(test_log_repeated_kinds) {
  static char kinds[ATTN_LOG_REPEAT_KINDS + 8];
  capture c;
  char got[8192];
  attn__log_repeat_forget();
  attn__log_repeat_interval(3600ull * 1000000000u);
  capture_begin(&c);
  for (int round = 0; round < 3; round++)
    for (int i = 0; i < ATTN_LOG_REPEAT_KINDS + 8; i++)
      attn_log_repeated(ATTN_LOG_WARN, &kinds[i], "kind %d", i);
  attn_log_flush_repeats(1);
  capture_end(&c, got, sizeof got);
  attn__log_repeat_interval((uint64_t)ATTN_LOG_REPEAT_S * 1000000000u);
  size_t lines = 0;
  for (const char *p = got; (p = strchr(p, '\n')) != NULL; p++) lines++;
  /* the table's kinds: each its first line, then its count; the others
   * one line, then one count of the rest */
  ck_assert_uint_eq(lines, 2 * ATTN_LOG_REPEAT_KINDS + 2);
  ck_assert_ptr_nonnull(strstr(got, "kind 0 (1 more like this suppressed)\n"));
  ck_assert_ptr_nonnull(
      strstr(got, "kind 39 (22 more like this suppressed)\n"));
}
END_TEST

/* ---- priority prefixes -------------------------------------------------- */

/* With prefixes on, each line begins with its level's syslog priority, as
 * journald parses it ("<N>" at the line's start): error 3, warn 4, info
 * 6, debug 7, access lines 6; off, none. */
START_TEST(test_priority_prefix) {
  capture c;
  char got[4096];
  capture_begin(&c);
  attn_log_init(ATTN_LOG_DEBUG, ATTN_LOG_JSON);
  attn_log_set_priority_prefix(1);
  attn_log(ATTN_LOG_ERROR, "e");
  attn_log(ATTN_LOG_WARN, "w");
  attn_log(ATTN_LOG_INFO, "i");
  attn_log(ATTN_LOG_DEBUG, "d");
  attn_access a = {.method = "GET", .path = "/", .status = 200};
  attn_log_access(&a);
  attn_log_init(ATTN_LOG_DEBUG, ATTN_LOG_TEXT);
  attn_log(ATTN_LOG_ERROR, "te");
  attn_log_set_priority_prefix(0);
  attn_log(ATTN_LOG_ERROR, "plain");
  capture_raw(&c, got, sizeof got);
  static const char *const want[][2] = {
      {"<3>{", "\"level\":\"error\",\"msg\":\"e\"}"},
      {"<4>{", "\"level\":\"warn\",\"msg\":\"w\"}"},
      {"<6>{", "\"level\":\"info\",\"msg\":\"i\"}"},
      {"<7>{", "\"level\":\"debug\",\"msg\":\"d\"}"},
      {"<6>{", "\"type\":\"access\""},
      {"<3>2", "error te"},
      {"2", "error plain"}};
  char *line = got;
  for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
    char *end = strchr(line, '\n');
    ck_assert_ptr_nonnull(end);
    *end = '\0';
    ck_assert_msg(strncmp(line, want[i][0], strlen(want[i][0])) == 0,
                  "line %zu: '%s'", i, line);
    ck_assert_msg(strstr(line, want[i][1]) != NULL, "line %zu: '%s'", i, line);
    line = end + 1;
  }
  ck_assert_str_eq(line, "");
  ck_assert_int_eq(attn_log_priority(ATTN_LOG_ERROR), 3);
  ck_assert_int_eq(attn_log_priority(ATTN_LOG_DEBUG), 7);
}
END_TEST

/* JOURNAL_STREAM names the journal's stream by device and inode: a match
 * with fd's fstat only; anything malformed, or another file, is not. */
START_TEST(test_stream_is_journal) {
  char path[] = "/tmp/attn-test-log-XXXXXX";
  int fd = mkstemp(path);
  ck_assert_int_ge(fd, 0);
  struct stat st;
  ck_assert_int_eq(fstat(fd, &st), 0);
  unsigned long long dev = (unsigned long long)st.st_dev,
                     ino = (unsigned long long)st.st_ino;
  char v[64];
  snprintf(v, sizeof v, "%llu:%llu", dev, ino);
  ck_assert_int_eq(attn_log_stream_is_journal(v, fd), 1);
  ck_assert_int_eq(attn_log_stream_is_journal(v, -1), 0);
  snprintf(v, sizeof v, "%llu:%llu", dev, ino + 1);
  ck_assert_int_eq(attn_log_stream_is_journal(v, fd), 0);
  snprintf(v, sizeof v, "%llu:%llu ", dev, ino);
  ck_assert_int_eq(attn_log_stream_is_journal(v, fd), 0);
  static const char *const junk[] = {
      "", ":", "1:", ":1", "x:1", "1:x", "1:2:3", "99999999999999999999999:1"};
  for (size_t i = 0; i < sizeof junk / sizeof junk[0]; i++)
    ck_assert_int_eq(attn_log_stream_is_journal(junk[i], fd), 0);
  ck_assert_int_eq(attn_log_stream_is_journal(NULL, fd), 0);
  close(fd);
  unlink(path);
}
END_TEST

Suite *log_suite(void) {
  Suite *s = suite_create("log");
  TCase *t = tcase_create("log");
  tcase_add_test(t, test_names);
  tcase_add_test(t, test_log_time);
  tcase_add_test(t, test_access_line);
  tcase_add_test(t, test_access_client_fields);
  tcase_add_test(t, test_priority_prefix);
  tcase_add_test(t, test_stream_is_journal);
  tcase_add_test(t, test_log_repeated);
  tcase_add_test(t, test_log_repeated_kinds);
  suite_add_tcase(s, t);
  return s;
}
