/* test_http.c - what src/server/http.c does without a connection: the
 * numbers of its headers (attn__header_number), the path of a request
 * target (attn__target_path, attn__path_control). */
#include <stdint.h>

#include "../src/server/internal.h"
#include "../src/server/http.h"
#include "unit.h"

/* attn__header_number: what http.c reads Content-Length and
 * Inference-Header-Content-Length with. */
START_TEST(test_header_number) {
  uint64_t v = 7;
  ck_assert_int_eq(attn__header_number(NULL, &v), 0);
  ck_assert_int_eq(attn__header_number("", &v), 0);
  ck_assert_int_eq(attn__header_number("+1", &v), 0);
  ck_assert_int_eq(attn__header_number("1x", &v), 0);
  ck_assert_uint_eq(v, 7);
  ck_assert_int_eq(attn__header_number(" \t42\t ", &v), 1);
  ck_assert_uint_eq(v, 42);
  ck_assert_int_eq(attn__header_number("18446744073709551615", &v), 1);
  ck_assert_uint_eq(v, UINT64_MAX);
  ck_assert_int_eq(attn__header_number("18446744073709551616", &v), 2);
  ck_assert_uint_eq(v, UINT64_MAX);
}
END_TEST

/* attn__target_path: absolute-form targets routed by their path. */
START_TEST(test_target_path) {
  ck_assert_str_eq(attn__target_path("/v2/health/ready"), "/v2/health/ready");
  ck_assert_str_eq(attn__target_path("http://h/v2/x"), "/v2/x");
  ck_assert_str_eq(attn__target_path("HTTPS://h:8080/a/b"), "/a/b");
  ck_assert_str_eq(attn__target_path("http://h"), "/");
  ck_assert_str_eq(attn__target_path("http:/x"), "http:/x");
  ck_assert_str_eq(attn__target_path("*"), "*");
}
END_TEST

/* attn__path_control: the first control byte of a decoded path. */
START_TEST(test_path_control) {
  ck_assert_int_eq(attn__path_control("/v2/models/sdpa"), -1);
  ck_assert_int_eq(attn__path_control(""), -1);
  ck_assert_int_eq(attn__path_control("/a\x01b"), 2);
  ck_assert_int_eq(attn__path_control("/a\x1f"), 2);
  ck_assert_int_eq(attn__path_control("\x7f"), 0);
  ck_assert_int_eq(attn__path_control("/caf\xc3\xa9"), -1); /* UTF-8 */
}
END_TEST

Suite *http_suite(void) {
  Suite *s = suite_create("http");
  TCase *tc = tcase_create("http");
  tcase_add_test(tc, test_header_number);
  tcase_add_test(tc, test_target_path);
  tcase_add_test(tc, test_path_control);
  suite_add_tcase(s, tc);
  return s;
}
