/* test_buf.c - attn_buf, the growing byte buffer with a cap
 * (src/common/buf.c), and its number writers against printf. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn/buf.h"
#include "unit.h"

START_TEST(buf_basics) {
  attn_buf b;
  attn_buf_init(&b, 10);
  ck_assert_int_eq(attn_buf_puts(&b, "hello"), ATTN_OK);
  ck_assert_int_eq(attn_buf_printf(&b, "%d", 12345), ATTN_OK);
  ck_assert_int_eq(attn_buf_append(&b, "x", 1), ATTN_ETOOBIG);
  ck_assert_int_eq(attn_buf_json_string(&b, ""), ATTN_ETOOBIG);
  ck_assert_int_eq(b.len, 10);
  ck_assert_str_eq(b.data, "hello12345");
  size_t n;
  char *p = attn_buf_steal(&b, &n);
  ck_assert_int_eq(n, 10);
  ck_assert_ptr_null(b.data);
  free(p);
  p = attn_buf_steal(&b, &n); /* empty buffer still yields a string */
  ck_assert_int_eq(n, 0);
  ck_assert_str_eq(p, "");
  free(p);
  attn_buf_init(&b, 0);
  char big[1000];
  memset(big, 'a', sizeof big - 1);
  big[sizeof big - 1] = '\0';
  ck_assert_int_eq(attn_buf_printf(&b, "%s|%s", big, big), ATTN_OK);
  ck_assert_int_eq(b.len, 1999);
  ck_assert_int_eq(b.data[999], '|');
  attn_buf_free(&b);
  attn_buf_free(&b);
  attn_buf_free(NULL);
}
END_TEST

/* attn_buf_i64 and attn_buf_fixed3 give printf's "%lld" and "%.3f" text. */
START_TEST(buf_numbers) {
  static const int64_t ints[] = {
      0, 1, -1, 9, 10, -10, 123456789, INT64_MAX, INT64_MIN, INT64_MIN + 1};
  static const double fixed[] = {
      0.0,     -0.0,   0.0005,   0.0015,    0.0025,   1.0005,       -0.0004,
      -0.0005, 2.5e-4, 999.9995, 1e-300,    123.456,  1073741.8235, 1e6,
      1e12,    -1e15,  4e18,     1.0 / 3.0, 2.0 / 3.0};
  char want[400];
  attn_buf b;
  uint64_t rng = 99;
  for (int i = 0; i < 200000; i++) {
    int64_t v;
    double x;
    if (i < (int)(sizeof ints / sizeof *ints)) {
      v = ints[i];
    } else {
      v = (int64_t)xs64(&rng) >> (xs64(&rng) % 64);
    }
    attn_buf_init(&b, 0);
    ck_assert_int_eq(attn_buf_i64(&b, v), ATTN_OK);
    snprintf(want, sizeof want, "%lld", (long long)v);
    ck_assert_str_eq(b.data, want);
    attn_buf_free(&b);
    if (i < (int)(sizeof fixed / sizeof *fixed)) {
      x = fixed[i];
    } else { /* milliseconds-like values, and exact ties k / 2000 */
      uint64_t r = xs64(&rng);
      x = r & 1 ? (double)(r >> 12) / 4503599627370496.0 * 1e4
                : (double)((int64_t)(r >> 20) % 20000001 - 10000000) / 2000.0;
    }
    attn_buf_init(&b, 0);
    ck_assert_int_eq(attn_buf_fixed3(&b, x), ATTN_OK);
    snprintf(want, sizeof want, "%.3f", x);
    ck_assert_msg(strcmp(b.data, want) == 0, "%.17g: '%s', printf '%s'", x,
                  b.data, want);
    attn_buf_free(&b);
  }
}
END_TEST

Suite *buf_suite(void) {
  Suite *s = suite_create("buf");
  TCase *tc = tcase_create("buf");
  tcase_add_test(tc, buf_basics);
  tcase_add_test(tc, buf_numbers);
  suite_add_tcase(s, tc);
  return s;
}
