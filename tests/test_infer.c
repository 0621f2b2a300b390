/* test_infer.c - what src/server/infer.c does without a queue: Triton's
 * `timeout` found in a v2 JSON header before the job is queued
 * (attn__json_timeout_us). */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "../src/server/internal.h"
#include "unit.h"

static int64_t t_us(const char *json) {
  return attn__json_timeout_us(json, strlen(json));
}

START_TEST(test_json_timeout) {
  ck_assert_int_eq(t_us("{\"parameters\": {\"timeout\": 200000}}"), 200000);
  ck_assert_int_eq(
      t_us("{\"id\": \"a\\\"timeout\\\"\", \"inputs\": [{\"name\":"
           " \"q\", \"data\": [1, [2, {}], \"]}\"]}], "
           "\"parameters\" : { \"priority\": 1, \"timeout\" :0 } }"),
      0);
  /* only the top level's parameters count */
  ck_assert_int_eq(t_us("{\"inputs\": [{\"parameters\": {\"timeout\": 5}}]}"),
                   -1);
  ck_assert_int_eq(t_us("{\"timeout\": 5}"), -1);
  ck_assert_int_eq(t_us("{\"parameters\": {\"timeout\": -5}}"), -1);
  ck_assert_int_eq(t_us("{\"parameters\": {\"timeout\": 1.5}}"), -1);
  ck_assert_int_eq(t_us("{\"parameters\": {\"timeout\": \"5\"}}"), -1);
  ck_assert_int_eq(t_us("{\"parameters\": {\"timeout\": 5"), 5);
  ck_assert_int_eq(t_us("{\"parameters\": {\"timeout\""), -1);
  ck_assert_int_eq(t_us("{\"parameters\" {\"timeout\": 5}}"), -1);
  ck_assert_int_eq(t_us("[\"timeout\"]"), -1);
  ck_assert_int_eq(t_us(""), -1);
  /* a huge number is cut short, never overflows */
  ck_assert_int_eq(
      t_us("{\"parameters\": {\"timeout\": 99999999999999999999999}}"), -1);
  /* the scan stops at n: a header followed by binary data */
  const char bin[] = "{\"parameters\":{\"timeout\":7}}\x00\xff\"timeout\"";
  ck_assert_int_eq(attn__json_timeout_us(bin, sizeof bin - 1), 7);
  ck_assert_int_eq(attn__json_timeout_us(bin, 20), -1);
  /* a long body: found at its end (where tritonclient puts parameters),
   * not in its middle (left to the worker's decode) */
  char big[4096];
  int k = snprintf(big, sizeof big, "{\"inputs\": [%*s], ", 3000, "");
  snprintf(big + k, sizeof big - (size_t)k,
           "\"parameters\": {\"timeout\": 42}}");
  ck_assert_int_eq(t_us(big), 42);
  k = snprintf(big, sizeof big, "{\"id\": \"%*s\", ", 1000, "");
  k += snprintf(big + k, sizeof big - (size_t)k,
                "\"parameters\": {\"timeout\": 42}, ");
  snprintf(big + k, sizeof big - (size_t)k, "\"inputs\": [%*s]}", 1000, "");
  ck_assert_int_eq(t_us(big), -1);
}
END_TEST

Suite *infer_suite(void) {
  Suite *s = suite_create("infer");
  TCase *tc = tcase_create("infer");
  tcase_add_test(tc, test_json_timeout);
  suite_add_tcase(s, tc);
  return s;
}
