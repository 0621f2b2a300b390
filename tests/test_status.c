/* test_status.c - the status table and attn_diag (src/common/status.c). */
#include "attn/status.h"
#include "unit.h"

START_TEST(test_status_text) {
  ck_assert_str_eq(attn_strerror(ATTN_OK), "ok");
  ck_assert_str_eq(attn_strerror(ATTN_ESHAPE), "tensor shape mismatch");
  ck_assert_str_eq(attn_status_name(ATTN_EBUSY), "EBUSY");
  ck_assert_str_eq(attn_strerror((attn_status)-999), "unknown status");
  attn_diag d;
  ck_assert_int_eq(attn_diag_set(&d, ATTN_EINVAL, "x=%d", 7), ATTN_EINVAL);
  ck_assert_str_eq(d.msg, "x=7");
  ck_assert_int_eq(attn_diag_set(NULL, ATTN_ENOMEM, "y"), ATTN_ENOMEM);
}
END_TEST

Suite *status_suite(void) {
  Suite *s = suite_create("status");
  TCase *tc = tcase_create("status");
  tcase_add_test(tc, test_status_text);
  suite_add_tcase(s, tc);
  return s;
}
