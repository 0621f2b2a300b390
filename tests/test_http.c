/* test_http.c - what src/server/http.c does without a connection: the
 * numbers of its headers (attn__header_number). */
#include <stdint.h>

#include "../src/server/internal.h"
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

Suite *http_suite(void) {
  Suite *s = suite_create("http");
  TCase *tc = tcase_create("http");
  tcase_add_test(tc, test_header_number);
  suite_add_tcase(s, tc);
  return s;
}
