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
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#ifndef ATTN_UNIT_SUITES /* set by tests/meson.build */
#error "ATTN_UNIT_SUITES(X) is not defined: build the tests with meson"
#endif

#define ATTN_UNIT_DECLARE(name) Suite *name##_suite(void);
ATTN_UNIT_SUITES(ATTN_UNIT_DECLARE)
#undef ATTN_UNIT_DECLARE

/* ---- variants a CPU lacks ------------------------------------------------ */

/* A test that runs each SIMD path (AVX-512, AVX2, ...) leaves out those the
 * CPU lacks, and says so: UNIT_SKIPPED("avx512") writes a line
 *   skipped: json_packed_like_plain [avx512]: not on this CPU
 * on stderr, once per test and variant, naming the function it is called
 * in (for a Check test, the test). */
#define UNIT_SKIPPED(variant) unit_skipped(__func__, (variant))
void unit_skipped(const char *func, const char *variant);

/* ---- helpers more than one test file uses ------------------------------ */

/* A copy of s that the test owns (a failed allocation fails the test). */
static inline char *xstrdup(const char *s) {
  size_t n = strlen(s) + 1;
  char *p = malloc(n);
  ck_assert_ptr_nonnull(p);
  memcpy(p, s, n);
  return p;
}

/* A copy of s with every ' turned into ": JSON in test tables is written
 * with ' for " to stay readable. */
static inline char *unquote(const char *s) {
  size_t n = strlen(s);
  char *p = malloc(n + 1);
  ck_assert_ptr_nonnull(p);
  for (size_t i = 0; i <= n; i++) p[i] = s[i] == '\'' ? '"' : s[i];
  return p;
}

/* xorshift64: the next of a cheap, repeatable sequence of random bits. */
static inline uint64_t xs64(uint64_t *s) {
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return *s;
}

/* p[0, n) parses with attn_json_parse and with cJSON to the same tree
 * (test_json.c; test_codec.c runs it on its tables' bodies). */
void check_like_cjson(const char *p, size_t n, const char *ctx);

/* Directory holding tests/ data (golden vectors); set by meson. */
#ifndef ATTN_TEST_DATA_DIR
#define ATTN_TEST_DATA_DIR "tests"
#endif

#endif
