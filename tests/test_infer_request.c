/* test_infer_request.c - requests and responses as the codecs fill them
 * (src/common/infer_request.c): freeing a partly filled one, lookups. */
#include <stdlib.h>
#include <string.h>

#include "attn/infer_request.h"
#include "unit.h"

START_TEST(infer_free_partial) {
  attn_infer_request r;
  memset(&r, 0, sizeof r);
  r.inputs = calloc(3, sizeof *r.inputs);
  r.n_inputs = 3; /* only the first filled */
  r.inputs[0].name = xstrdup("a");
  attn_infer_request_free(&r);
  attn_infer_request_free(&r);
  attn_infer_request_free(NULL);
  attn_infer_response_free(NULL);
  ck_assert_ptr_null(attn_infer_find_input(&r, "a"));
  ck_assert_ptr_null(attn_infer_find_param(NULL, "a"));
}
END_TEST

Suite *infer_request_suite(void) {
  Suite *s = suite_create("infer_request");
  TCase *tc = tcase_create("infer_request");
  tcase_add_test(tc, infer_free_partial);
  suite_add_tcase(s, tc);
  return s;
}
