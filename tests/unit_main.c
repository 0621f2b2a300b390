/* unit_main.c - runs every unit suite in one Check runner, so Check prints
 * one closing line with the total counts.
 *
 * The suites are those of ATTN_UNIT_SUITES (unit.h, from the lists of
 * tests/meson.build), in that order.  CK_RUN_SUITE=name (Check's own
 * variable) runs a single suite, CK_RUN_CASE=name a single test case, while
 * developing.  Exit status is 0 only when every check passed. */
#include <stdlib.h>

#include "unit.h"

int main(void) {
  SRunner *sr = srunner_create(NULL);
#define ATTN_UNIT_ADD(name) srunner_add_suite(sr, name##_suite());
  ATTN_UNIT_SUITES(ATTN_UNIT_ADD)
#undef ATTN_UNIT_ADD
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
