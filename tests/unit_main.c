/* unit_main.c - runs every unit suite in one Check runner, so Check prints
 * one closing line with the total counts.
 *
 * The suites are those of ATTN_UNIT_SUITES (unit.h, from the lists of
 * tests/meson.build), in that order.  CK_RUN_SUITE=name (Check's own
 * variable) runs a single suite, CK_RUN_CASE=name a single test case, while
 * developing; meson test runs each suite so (the unit suite of
 * tests/meson.build).  Exit status is 0 only when every check passed and
 * at least one ran (a name that matches nothing is a failure). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "unit.h"

/* UNIT_SKIPPED: one line per function and variant.  Check runs each test
 * in a process of its own, so a test that meets a missing variant many
 * times (a helper called in a loop) says it once; with CK_FORK=no, once
 * per run. */
void unit_skipped(const char *func, const char *variant) {
  static struct { const char *func, *variant; } seen[64];
  static int n_seen;
  for (int i = 0; i < n_seen; i++)
    if (seen[i].func == func && strcmp(seen[i].variant, variant) == 0) return;
  if (n_seen < (int)(sizeof seen / sizeof *seen)) {
    seen[n_seen].func = func;
    seen[n_seen].variant = variant;
    n_seen++;
  }
  size_t n = strlen(func); /* START_TEST(x) defines x_fn */
  if (n > 3 && strcmp(func + n - 3, "_fn") == 0) n -= 3;
  fprintf(stderr, "skipped: %.*s [%s]: not on this CPU\n", (int)n, func,
          variant);
}

int main(void) {
  /* Check's default limit of 4 s a test is a hang guard, not a timing
   * assertion: on a loaded machine (or under a sanitizer) buf_numbers and
   * others overran it.  120 s unless the caller sets its own; Check reads it
   * in tcase_create, so before the suites are made. */
  setenv("CK_DEFAULT_TIMEOUT", "120", 0);
  SRunner *sr = srunner_create(NULL);
#define ATTN_UNIT_ADD(name) srunner_add_suite(sr, name##_suite());
  ATTN_UNIT_SUITES(ATTN_UNIT_ADD)
#undef ATTN_UNIT_ADD
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr), ran = srunner_ntests_run(sr);
  srunner_free(sr);
  if (ran == 0) { /* a suite or case name that matches none passes Check */
    const char *suite = getenv("CK_RUN_SUITE"), *tcase = getenv("CK_RUN_CASE");
    fprintf(stderr, "unit: no test ran (CK_RUN_SUITE=%s, CK_RUN_CASE=%s)\n",
            suite ? suite : "", tcase ? tcase : "");
    return EXIT_FAILURE;
  }
  return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
