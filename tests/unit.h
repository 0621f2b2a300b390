/* unit.h - what every unit-test file shares.  Each tests/test_X.c defines
 * one `Suite *X_suite(void)`; unit_main.c runs them all in one SRunner so
 * that Check prints one closing line with the total counts.
 *
 * The suites are named in one place, the lists of tests/meson.build, which
 * hands them over as ATTN_UNIT_SUITES(X): X(status) X(tensor) ... for the
 * suites this build has (the server-side ones only when cJSON and friends
 * are there). */
#ifndef ATTN_TESTS_UNIT_H
#define ATTN_TESTS_UNIT_H

#include <check.h>

#ifndef ATTN_UNIT_SUITES /* set by tests/meson.build */
#error "ATTN_UNIT_SUITES(X) is not defined: build the tests with meson"
#endif

#define ATTN_UNIT_DECLARE(name) Suite *name##_suite(void);
ATTN_UNIT_SUITES(ATTN_UNIT_DECLARE)
#undef ATTN_UNIT_DECLARE

/* Directory holding tests/ data (golden vectors); set by meson. */
#ifndef ATTN_TEST_DATA_DIR
#define ATTN_TEST_DATA_DIR "tests"
#endif

#endif
