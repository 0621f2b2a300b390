/* test_log.c - the log (src/common/log.c): the names of its levels and
 * formats, its time stamps against gmtime_r + strftime, and the access line
 * in both formats, byte for byte.  Lines go to stderr, which a test points
 * at a mkstemp() file under /tmp for the call. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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
            "queue_ms=%.3f compute_ms=%.3f total_ms=%.3f id=id \"7\"\n",
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

Suite *log_suite(void) {
  Suite *s = suite_create("log");
  TCase *t = tcase_create("log");
  tcase_add_test(t, test_names);
  tcase_add_test(t, test_log_time);
  tcase_add_test(t, test_access_line);
  suite_add_tcase(s, t);
  return s;
}
