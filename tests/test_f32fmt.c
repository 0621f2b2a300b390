/* test_f32fmt.c - attn_f32_shortest (src/codec/f32fmt.c).
 *
 * What is checked, and against what:
 *   - a table of (bits, exact text) cases whose texts come from an
 *     independent exact reference (rational arithmetic in Python), covering
 *     each output form, ties, open interval ends and the extremes;
 *   - round trip: strtof(text) is bit-identical to the input, on 2^21
 *     random bit patterns (fixed seed, finite only), on 2^19 uniform values
 *     in [-1, 1] and on special values (powers of 2 and 10 and their
 *     neighbours, FLT_MIN/MAX, subnormal min/max, 1/3, 0.1, integers);
 *   - shortness, on every 8th random input and all special values: no
 *     "%.*e" with fewer digits round-trips, nor either of the two decimals
 *     with one digit less around the text (the only candidates, see
 *     bench/bench_f32fmt.c); nearness: when glibc's exactly rounded
 *     "%.*e" with as many digits round-trips, it has our digits;
 *   - JSON grammar (RFC 8259) and the documented plain/scientific split;
 *     "null" for NaN and Inf; no byte written past ATTN_F32_MAX_CHARS;
 *   - the portable formatter gives the same bytes as the fast one;
 *   - the power-of-ten table and the log helpers, recomputed exactly.
 *
 * The portable build of the formatter comes from including the source
 * under another name (below); that also exposes its static table.
 */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn/f32fmt.h"
#include "unit.h"

/* The same source compiled with ATTN_F32FMT_PORTABLE, renamed. */
size_t attn_test_f32_portable(float v, char *out);
#define ATTN_F32FMT_PORTABLE 1
#define attn_f32_shortest attn_test_f32_portable
#include "../src/codec/f32fmt.c"
#undef attn_f32_shortest
#undef ATTN_F32FMT_PORTABLE

#define N_OF(a) (sizeof(a) / sizeof((a)[0]))

static float from_bits(uint32_t b) {
  float f;
  memcpy(&f, &b, sizeof f);
  return f;
}

static uint32_t to_bits(float f) {
  uint32_t b;
  memcpy(&b, &f, sizeof b);
  return b;
}

static uint64_t rng = 0x2545f4914f6cdd1du;

static uint32_t rnd32(void) { /* xorshift64*, fixed seed */
  rng ^= rng >> 12;
  rng ^= rng << 25;
  rng ^= rng >> 27;
  return (uint32_t)((rng * 0x2545f4914f6cdd1du) >> 32);
}

/* Check's ck_assert records its location through a pipe on every call
 * (a system call each), too slow for millions of inputs: the bulk checks
 * below collect the first failure here and assert once per input. */
static char why[256];

#define FAIL_IF(cond, ...)                    \
  do {                                        \
    if (cond) {                               \
      snprintf(why, sizeof why, __VA_ARGS__); \
      return 0;                               \
    }                                         \
  } while (0)

/* Formats v with fn into a 32-byte buffer pre-filled with '#', checks the
 * length and that nothing past ATTN_F32_MAX_CHARS was touched, and
 * NUL-terminates the text.  Returns 0 (and sets why) on failure. */
static int fmt_with(size_t (*fn)(float, char *), float v, char *buf,
                    size_t *len) {
  memset(buf, '#', 32);
  size_t n = fn(v, buf);
  FAIL_IF(n < 1 || n > ATTN_F32_MAX_CHARS, "0x%08x: length %zu", to_bits(v), n);
  for (int i = ATTN_F32_MAX_CHARS; i < 32; i++)
    FAIL_IF(buf[i] != '#', "0x%08x: byte %d written", to_bits(v), i);
  buf[n] = 0;
  *len = n;
  return 1;
}

static int is_digit(char c) {
  return c >= '0' && c <= '9';
}

/* RFC 8259 number: -? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)? */
static int json_number_ok(const char *s) {
  if (*s == '-') s++;
  if (*s == '0')
    s++;
  else if (*s >= '1' && *s <= '9')
    while (is_digit(*s)) s++;
  else
    return 0;
  if (*s == '.') {
    s++;
    if (!is_digit(*s)) return 0;
    while (is_digit(*s)) s++;
  }
  if (*s == 'e' || *s == 'E') {
    s++;
    if (*s == '+' || *s == '-') s++;
    if (!is_digit(*s)) return 0;
    while (is_digit(*s)) s++;
  }
  return *s == 0;
}

/* Significant digits of a decimal text (no leading or trailing zeros) into
 * dig, their count into *nd and the exponent of the first one into *e10;
 * returns 0 for a text without a nonzero digit. */
static int sig_digits(const char *t, char *dig, int *nd, int *e10) {
  int n = 0, before_point = 0, seen_point = 0, lead = 0;
  if (*t == '-') t++;
  for (; *t && *t != 'e' && *t != 'E'; t++) {
    if (*t == '.') {
      seen_point = 1;
      continue;
    }
    if (!seen_point) before_point++;
    if (n == 0 && *t == '0') {
      lead++;
      continue;
    }
    dig[n++] = *t;
  }
  if (n == 0) return 0;
  int ex = (*t == 'e' || *t == 'E') ? (int)strtol(t + 1, NULL, 10) : 0;
  while (n > 1 && dig[n - 1] == '0') n--;
  dig[n] = 0;
  *nd = n;
  *e10 = before_point - 1 - lead + ex;
  return 1;
}

static int round_trips(const char *text, uint32_t bits) {
  return to_bits(strtof(text, NULL)) == bits;
}

/* All checks for one bit pattern; deep adds shortness and nearness.
 * Returns 0 and sets why on the first failure. */
static int check_bits_ok(uint32_t bits, int deep) {
  char a[32], b[32], dig[16], t[48];
  float v = from_bits(bits);
  size_t n, m;
  if (!fmt_with(attn_f32_shortest, v, a, &n)) return 0;
  if (!fmt_with(attn_test_f32_portable, v, b, &m)) return 0;
  FAIL_IF(n != m || strcmp(a, b) != 0, "0x%08x: fast \"%s\" != portable \"%s\"",
          bits, a, b);
  if (!isfinite(v)) {
    FAIL_IF(strcmp(a, "null") != 0, "0x%08x: \"%s\" for non-finite", bits, a);
    return 1;
  }
  FAIL_IF(!json_number_ok(a), "0x%08x: \"%s\" is no JSON number", bits, a);
  FAIL_IF(!round_trips(a, bits), "0x%08x: \"%s\" reads back as %.9g", bits, a,
          (double)strtof(a, NULL));
  if (v == 0) {
    FAIL_IF(strcmp(a, bits ? "-0" : "0") != 0, "0x%08x: \"%s\"", bits, a);
    return 1;
  }
  int nd, e10;
  FAIL_IF(!sig_digits(a, dig, &nd, &e10), "0x%08x: \"%s\" has no digit", bits,
          a);
  int sci = strchr(a, 'e') != NULL;
  FAIL_IF(sci != (e10 < -5 || e10 > 8), "0x%08x: form of \"%s\"", bits, a);
  if (sci) { /* d[.ddd]e[+-]XX */
    const char *x = strchr(a, 'e');
    FAIL_IF(strlen(x) != 4 || (x[1] != '+' && x[1] != '-'),
            "0x%08x: exponent of \"%s\"", bits, a);
  }
  if (!deep) return 1;
  /* shortness: no fewer digits round-trip */
  for (int p = 1; p < nd; p++) {
    snprintf(t, sizeof t, "%.*e", p - 1, (double)v);
    FAIL_IF(round_trips(t, bits), "0x%08x: \"%s\" but \"%s\" too", bits, a, t);
  }
  if (nd >= 2) { /* the two (nd-1)-digit decimals around the text */
    unsigned long long d = strtoull(dig, NULL, 10), lo = d / 10;
    int ex = e10 - nd + 2; /* exponent of lo's last digit */
    snprintf(t, sizeof t, "%llue%d", lo, ex);
    FAIL_IF(round_trips(t, bits), "0x%08x: \"%s\" but \"%s\" too", bits, a, t);
    snprintf(t, sizeof t, "%llue%d", lo + 1, ex);
    FAIL_IF(round_trips(t, bits), "0x%08x: \"%s\" but \"%s\" too", bits, a, t);
  }
  /* nearness: glibc rounds exactly (ties to even, like us) */
  snprintf(t, sizeof t, "%.*e", nd - 1, (double)v);
  if (round_trips(t, bits)) {
    char dig2[16];
    int nd2, e2;
    FAIL_IF(
        !sig_digits(t, dig2, &nd2, &e2) || strcmp(dig, dig2) != 0 || e10 != e2,
        "0x%08x: \"%s\" but nearer \"%s\"", bits, a, t);
  }
  return 1;
}

static void check_bits(uint32_t bits, int deep) {
  if (!check_bits_ok(bits, deep)) ck_abort_msg("%s", why);
}

/* ---- table ------------------------------------------------------------ */

static const struct {
  uint32_t bits;
  const char *text;
} cases[] = {
    {0x00000000, "0"},
    {0x80000000, "-0"},
    {0x3f800000, "1"},
    {0xbf800000, "-1"},
    {0x3dcccccd, "0.1"},
    {0x3eaaaaab, "0.33333334"}, /* 1/3 */
    {0x42f68000, "123.25"},
    {0x4cbebc20, "100000000"},
    {0x4e6e6b26, "999999900"}, /* 999999872 */
    {0x4e6e6b27, "999999940"},
    {0x4e6e6b28, "1e+09"},
    {0x3727c5ac, "0.00001"}, /* 9.99999975e-06 */
    {0x3727c5ab, "9.999999e-06"},
    {0xb900f990, "-0.000123"},
    {0x34210fb0, "1.5e-07"},
    {0x3f000000, "0.5"},
    {0x40000000, "2"},
    {0x44800000, "1024"},
    {0x501502f9, "1e+10"},
    {0x358637bd, "1e-06"},
    {0x374f2049, "0.000012345678"},
    {0x38800000, "0.000061035156"}, /* 2^-14 */
    {0x41480000, "12.5"},
    {0xe197c9ce, "-3.5e+20"},
    {0x40490fdb, "3.1415927"},
    {0x42c80000, "100"},
    {0x3e99999a, "0.3"},
    {0x3e4ccccd, "0.2"},
    {0x3f333333, "0.7"},
    {0x3a83126f, "0.001"},
    {0xb627c5ac, "-2.5e-06"},
    {0x477fe000, "65504"},
    {0x4b800000, "16777216"},
    {0x4ceb79a3, "123456790"}, /* 123456792 */
    {0x7e967699, "1e+38"},
    {0x7f7fffff, "3.4028235e+38"}, /* FLT_MAX */
    {0x00800000, "1.1754944e-38"}, /* FLT_MIN */
    {0x007fffff, "1.1754942e-38"}, /* largest subnormal */
    {0x00000001, "1e-45"},         /* smallest subnormal */
    {0x00000002, "3e-45"},
    {0x00000003, "4e-45"},
    {0x0000000a, "1.4e-44"},
    {0x000003e8, "1.401e-42"},
    {0x4c000005, "33554452"},  /* odd: 33554450 is the excluded end */
    {0x40094000, "2.1445312"}, /* tie between ...12 and ...13: even */
    {0x4009c000, "2.1523438"}, /* tie between ...37 and ...38: even */
    {0x7f800000, "null"},
    {0xff800000, "null"},
    {0x7fc00000, "null"},
    {0xffc00001, "null"},
    {0x7f800001, "null"},
};

START_TEST(table_case) {
  char buf[32];
  float v = from_bits(cases[_i].bits);
  size_t n = 0;
  ck_assert_msg(fmt_with(attn_f32_shortest, v, buf, &n), "%s", why);
  ck_assert_msg(strcmp(buf, cases[_i].text) == 0, "0x%08x: \"%s\", want \"%s\"",
                cases[_i].bits, buf, cases[_i].text);
  ck_assert_uint_eq(n, strlen(cases[_i].text));
  check_bits(cases[_i].bits, 1);
}
END_TEST

/* ---- bulk ------------------------------------------------------------- */

START_TEST(random_bits) {
  rng = 0x2545f4914f6cdd1du;
  for (uint32_t done = 0; done < (1u << 21);) {
    uint32_t b = rnd32();
    if (((b >> 23) & 0xff) == 0xff) continue; /* finite only */
    check_bits(b, done % 8 == 0);
    done++;
  }
}
END_TEST

START_TEST(unit_interval) {
  rng = 0x9e3779b97f4a7c15u;
  for (uint32_t i = 0; i < (1u << 19); i++) {
    float v = (float)((double)(int32_t)rnd32() / 2147483648.0);
    check_bits(to_bits(v), i % 8 == 0);
  }
}
END_TEST

START_TEST(special_values) {
  float sp[] = {FLT_MAX,  FLT_MIN,    1.0f / 3,    0.1f,
                2.0f / 3, 1e-45f,     FLT_EPSILON, 1.0f - FLT_EPSILON / 2,
                1.5e-7f,  0.1f + 0.2f};
  for (size_t i = 0; i < N_OF(sp); i++) {
    check_bits(to_bits(sp[i]), 1);
    check_bits(to_bits(-sp[i]), 1);
    check_bits(to_bits(nextafterf(sp[i], 0)), 1);
    check_bits(to_bits(nextafterf(sp[i], INFINITY)), 1);
  }
  check_bits(0x007fffff, 1);                            /* subnormal max */
  check_bits(0x00000001, 1);                            /* subnormal min */
  for (uint32_t b = 1; b < 4096; b++) check_bits(b, 1); /* tiny subnormals */
  for (int e = -149; e <= 127; e++) { /* powers of two and neighbours */
    uint32_t b = to_bits(ldexpf(1.0f, e));
    check_bits(b, 1);
    check_bits(b - 1, 1);
    check_bits(b + 1, 1);
    check_bits(b | 0x80000000u, 1);
  }
  for (int e = -45; e <= 38; e++) { /* powers of ten and neighbours */
    char t[16];
    snprintf(t, sizeof t, "1e%d", e);
    uint32_t b = to_bits(strtof(t, NULL));
    check_bits(b, 1);
    check_bits(b - 1, 1);
    if (b < 0x7f7fffff) check_bits(b + 1, 1);
  }
  for (int i = 0; i <= 100000; i++) check_bits(to_bits((float)i), i < 2000);
  for (int i = 1; i <= 1000; i++) check_bits(to_bits((float)i / 1000), 1);
}
END_TEST

START_TEST(nonfinite_is_null) {
  char buf[32];
  float v[] = {INFINITY,
               -INFINITY,
               NAN,
               -NAN,
               from_bits(0x7f800001),
               from_bits(0xffffffff)};
  for (size_t i = 0; i < N_OF(v); i++) {
    size_t n = 0;
    ck_assert_msg(fmt_with(attn_f32_shortest, v[i], buf, &n), "%s", why);
    ck_assert_uint_eq(n, 4);
    ck_assert_str_eq(buf, "null");
  }
}
END_TEST

/* The checkers above must be able to say no. */
START_TEST(checkers_reject) {
  const char *bad[] = {"",   "-",   "01",  "1.",   ".5",  "1e", "1e+",
                       "+1", "0x1", "NaN", "1.e5", "--1", "1 ", "1e5.0"};
  const char *good[] = {"0", "-0", "0.5", "1e+09", "1E5", "-1.25e-07", "10"};
  for (size_t i = 0; i < N_OF(bad); i++)
    ck_assert_msg(!json_number_ok(bad[i]), "accepted \"%s\"", bad[i]);
  for (size_t i = 0; i < N_OF(good); i++)
    ck_assert_msg(json_number_ok(good[i]), "rejected \"%s\"", good[i]);
  char dig[16];
  int nd, e10;
  ck_assert(sig_digits("-0.000120", dig, &nd, &e10));
  ck_assert_str_eq(dig, "12");
  ck_assert_int_eq(nd, 2);
  ck_assert_int_eq(e10, -4);
  ck_assert(sig_digits("100000000", dig, &nd, &e10));
  ck_assert_str_eq(dig, "1");
  ck_assert_int_eq(e10, 8);
  ck_assert(sig_digits("1.5e-07", dig, &nd, &e10));
  ck_assert_int_eq(e10, -7);
  ck_assert(!round_trips("0.1", 0x3dcccccc));
  ck_assert(round_trips("0.1", 0x3dcccccd));
}
END_TEST

/* ---- the power-of-ten table, recomputed exactly ------------------------ */

/* Little-endian base-2^32 naturals, big enough for 10^46 * 2^160. */
typedef struct {
  uint32_t w[16];
} tbig;

static void tb_set(tbig *b, uint32_t v) {
  memset(b, 0, sizeof *b);
  b->w[0] = v;
}

static void tb_mul(tbig *b, uint32_t m) {
  uint64_t carry = 0;
  for (int i = 0; i < 16; i++) {
    carry += (uint64_t)b->w[i] * m;
    b->w[i] = (uint32_t)carry;
    carry >>= 32;
  }
  if (carry) ck_abort_msg("tbig overflow"); /* not ck_assert: see why */
}

static void tb_div(tbig *b, uint32_t d) { /* floor */
  uint64_t rem = 0;
  for (int i = 15; i >= 0; i--) {
    uint64_t cur = rem << 32 | b->w[i];
    b->w[i] = (uint32_t)(cur / d);
    rem = cur % d;
  }
}

static void tb_shl(tbig *b, int s) {
  for (; s > 0; s--) tb_mul(b, 2);
}

static void tb_shr(tbig *b, int s) {
  for (; s > 0; s--) tb_div(b, 2);
}

static int tb_cmp(const tbig *a, const tbig *b) {
  for (int i = 15; i >= 0; i--)
    if (a->w[i] != b->w[i]) return a->w[i] < b->w[i] ? -1 : 1;
  return 0;
}

/* sign of m1 * 2^a1 * 10^b1 - m2 * 2^a2 * 10^b2 */
static int cmp_terms(uint32_t m1, int a1, int b1, uint32_t m2, int a2, int b2) {
  tbig x, y;
  tb_set(&x, m1);
  tb_set(&y, m2);
  for (; b1 > b2; b1--) tb_mul(&x, 10);
  for (; b2 > b1; b2--) tb_mul(&y, 10);
  if (a1 > a2) tb_shl(&x, a1 - a2);
  if (a2 > a1) tb_shl(&y, a2 - a1);
  return tb_cmp(&x, &y);
}

START_TEST(pow10_table) {
  /* log helpers over every exponent they see */
  for (int q = -151; q <= 105; q++) {
    int k = flog10_pow2(q), k3 = flog10_3q_pow2(q);
    ck_assert_msg(
        cmp_terms(1, 0, k, 1, q, 0) <= 0 && cmp_terms(1, q, 0, 1, 0, k + 1) < 0,
        "flog10_pow2(%d) = %d", q, k);
    ck_assert_msg(cmp_terms(1, 0, k3, 3, q - 2, 0) <= 0 &&
                      cmp_terms(3, q - 2, 0, 1, 0, k3 + 1) < 0,
                  "flog10_3q_pow2(%d) = %d", q, k3);
  }
  for (int x = -K_MAX; x <= -K_MIN; x++) {
    int r = flog2_pow10(x);
    ck_assert_msg(
        cmp_terms(1, r, 0, 1, 0, x) <= 0 && cmp_terms(1, 0, x, 1, r + 1, 0) < 0,
        "flog2_pow10(%d) = %d", x, r);
  }
  /* every k binary32 needs is in the table, and h = q + r is in 0..3 */
  for (int be = 0; be <= 254; be++) {
    int q = be ? be - 150 : -149, k = flog10_pow2(q);
    int h = q + flog2_pow10(-k);
    ck_assert(k >= K_MIN && k <= K_MAX && h >= 0 && h <= 3);
    if (be > 1) { /* power of two: the asymmetric interval */
      k = flog10_3q_pow2(q);
      h = q + flog2_pow10(-k);
      ck_assert(k >= K_MIN && k <= K_MAX && h >= 0 && h <= 3);
    }
  }
  ck_assert_int_eq(flog10_pow2(-149), K_MIN);
  /* G[k - K_MIN] = floor(10^-k * 2^(63 - r)) + 1, r = floor(log2 10^-k) */
  for (int k = K_MIN; k <= K_MAX; k++) {
    int x = -k, r = flog2_pow10(x);
    tbig v;
    tb_set(&v, 1);
    if (x >= 0) {
      for (int i = 0; i < x; i++) tb_mul(&v, 10);
      if (r <= 63)
        tb_shl(&v, 63 - r);
      else
        tb_shr(&v, r - 63);
    } else {
      tb_shl(&v, 63 - r);
      for (int i = 0; i < -x; i++) tb_div(&v, 10);
    }
    for (int i = 2; i < 16; i++) ck_assert_uint_eq(v.w[i], 0);
    uint64_t want = ((uint64_t)v.w[1] << 32 | v.w[0]) + 1;
    ck_assert_msg(G[k - K_MIN] == want, "G for k = %d", k);
    ck_assert(G[k - K_MIN] >> 63 == 1);
  }
}
END_TEST

Suite *f32fmt_suite(void) {
  Suite *s = suite_create("f32fmt");
  TCase *tc = tcase_create("table");
  tcase_add_loop_test(tc, table_case, 0, (int)N_OF(cases));
  tcase_add_test(tc, nonfinite_is_null);
  tcase_add_test(tc, checkers_reject);
  tcase_add_test(tc, pow10_table);
  suite_add_tcase(s, tc);
  tc = tcase_create("bulk");
  tcase_set_timeout(tc, 300); /* seconds; sanitizer builds are slow */
  tcase_add_test(tc, random_bits);
  tcase_add_test(tc, unit_interval);
  tcase_add_test(tc, special_values);
  suite_add_tcase(s, tc);
  return s;
}
