/* test_f32fmt.c - attn_f32_shortest (src/fmt/f32fmt.c).
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
 *   - the power-of-ten table and the log helpers, recomputed exactly;
 *   - attn_f32_shortest_list, with each implementation this CPU has
 *     ("avx512", "avx2", "portable", switched with the attn__f32fmt_set_impl
 *     hook; each one the CPU has must be selectable, and the default is
 *     the first of them),
 *     against attn_f32_shortest per element joined by ',': on 2^22 random
 *     bit patterns (NaN and Inf included), 2^20 values in [-1, 1], special
 *     values scattered over every lane position, every length 0..70 at
 *     every alignment mod 16; nothing stored past ATTN_F32_LIST_MAX_CHARS;
 *     attn_f32_append_list (contiguous and strided) against attn_f32_append;
 *   - attn_f32_shortest_rows with each implementation against "[" + the
 *     per-element join + "]" per row (every tail, every width 1..70 with
 *     1..9 rows, padded strides, nothing stored past
 *     ATTN_F32_ROWS_MAX_CHARS), and attn_f32_append_rows against
 *     attn_f32_append_list per row (chunks of short rows, long rows).
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

#include "attn/buf.h"
#include "attn/f32fmt.h"
#include "unit.h"

/* The same sources (the conversion and the lists) compiled with
 * ATTN_F32FMT_PORTABLE, their external names renamed (the list function is
 * then the per-element loop over the portable formatter). */
size_t attn_test_f32_portable(float v, char *out);
size_t attn_test_f32_list_portable(const float *v, size_t n, char *out);
size_t attn_test_f32_rows_portable(const float *v, size_t rows, size_t cols,
                                   size_t ld, char *out);
#define ATTN_F32FMT_PORTABLE 1
#define attn_f32_shortest attn_test_f32_portable
#define attn_f32_shortest_list attn_test_f32_list_portable
#define attn_f32_shortest_rows attn_test_f32_rows_portable
#define attn__f32_g attn_test_f32_g
#define attn__f32fmt_set_impl attn_test_f32fmt_set_impl
#define attn__f32fmt_impl_name attn_test_f32fmt_impl_name
#include "../src/fmt/f32fmt.c"
#include "../src/fmt/f32fmt_list.c"
#undef attn_f32_shortest
#undef attn_f32_shortest_list
#undef attn_f32_shortest_rows
#undef attn__f32_g
#undef attn__f32fmt_set_impl
#undef attn__f32fmt_impl_name
#undef ATTN_F32FMT_PORTABLE

/* The real implementation hook (src/fmt/internal.h, whose include
 * guard the copy above has used up). */
int attn__f32fmt_set_impl(const char *name);
const char *attn__f32fmt_impl_name(void);

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

/* ---- lists ------------------------------------------------------------ */

typedef size_t (*list_fn)(const float *v, size_t n, char *out);

/* The reference: attn_f32_shortest per element, joined by ','. */
static size_t join_scalar(const float *v, size_t n, char *out) {
  char *p = out;
  for (size_t i = 0; i < n; i++) {
    if (i) *p++ = ',';
    p += attn_f32_shortest(v[i], p);
  }
  return (size_t)(p - out);
}

#define LIST_MAX 4200
#define GUARD 64
static char list_want[ATTN_F32_LIST_MAX_CHARS(LIST_MAX)];
static char list_got[ATTN_F32_LIST_MAX_CHARS(LIST_MAX) + GUARD];

/* fn(v, n) == join_scalar(v, n), and fn stored nothing past the room it
 * documents.  Returns 0 and sets why (naming the first differing element)
 * on failure. */
static int list_ok(list_fn fn, const float *v, size_t n) {
  size_t room = ATTN_F32_LIST_MAX_CHARS(n);
  size_t lw = join_scalar(v, n, list_want);
  memset(list_got, '#', room + GUARD);
  size_t lg = fn(v, n, list_got);
  for (size_t i = room; i < room + GUARD; i++)
    FAIL_IF(list_got[i] != '#', "n=%zu: byte %zu past the room written", n,
            i - room);
  FAIL_IF(lg > room, "n=%zu: length %zu > room %zu", n, lg, room);
  if (lg == lw && memcmp(list_want, list_got, lw) == 0) return 1;
  size_t pw = 0, pg = 0, j = 0; /* find the first differing element */
  for (;; j++) {
    size_t ew = pw, eg = pg;
    while (ew < lw && list_want[ew] != ',') ew++;
    while (eg < lg && list_got[eg] != ',') eg++;
    if (j + 1 >= n || ew - pw != eg - pg ||
        memcmp(list_want + pw, list_got + pg, ew - pw) != 0)
      break;
    pw = ew + 1, pg = eg + 1;
  }
  FAIL_IF(1, "n=%zu element %zu (0x%08x): want \"%.*s\", got \"%.*s\"", n, j,
          j < n ? to_bits(v[j]) : 0, (int)(lw - pw < 16 ? lw - pw : 16),
          list_want + pw, (int)(lg - pg < 16 ? lg - pg : 16), list_got + pg);
  return 0;
}

/* List implementations; the tests below run with each one the CPU has,
 * selected with the hook, and the fixture restores the default. */
static const char *const impl_names[] = {"avx512", "avx2", "portable"};

static const char *default_impl;

static void impl_setup(void) {
  default_impl = attn__f32fmt_impl_name();
}

static void impl_teardown(void) {
  attn__f32fmt_set_impl(default_impl);
}

static void check_list(const float *v, size_t n, const char *impl) {
  if (!list_ok(attn_f32_shortest_list, v, n)) ck_abort_msg("%s: %s", impl, why);
}

static float list_in[LIST_MAX + 16];

START_TEST(list_random_bits) {
  int impls = 0;
  for (size_t k = 0; k < N_OF(impl_names); k++) {
    const char *impl = impl_names[k];
    if (!attn__f32fmt_set_impl(impl)) { /* the CPU lacks it */
      UNIT_SKIPPED(impl);
      continue;
    }
    impls++;
    rng = 0x853c49e6748fea9bu;
    for (uint32_t done = 0; done < (1u << 22);) {
      size_t n = 3900 + rnd32() % 300; /* every tail length */
      for (size_t i = 0; i < n; i++) list_in[i] = from_bits(rnd32());
      check_list(list_in, n, impl);
      done += (uint32_t)n;
    }
  }
  ck_assert_int_ge(impls, 1);
  if (impls == 1) fprintf(stderr, "f32fmt lists: only portable on this CPU\n");
}
END_TEST

START_TEST(list_unit_interval) {
  for (size_t k = 0; k < N_OF(impl_names); k++) {
    const char *impl = impl_names[k];
    if (!attn__f32fmt_set_impl(impl)) { /* the CPU lacks it */
      UNIT_SKIPPED(impl);
      continue;
    }
    rng = 0xda3e39cb94b95bdbu;
    for (uint32_t done = 0; done < (1u << 20);) {
      size_t n = 1280 + rnd32() % 17;
      for (size_t i = 0; i < n; i++)
        list_in[i] = (float)((double)(int32_t)rnd32() / 2147483648.0);
      check_list(list_in, n, impl);
      done += (uint32_t)n;
    }
  }
}
END_TEST

/* Special values: each alone, all together, and each at every lane
 * position among ordinary values. */
static size_t special_list(float *out) {
  size_t n = 0;
  static const uint32_t bits[] = {
      0x00000000, /* 0 */
      0x80000000, /* -0 */
      0x00000001, /* smallest subnormal */
      0x80000001, /* its negative */
      0x00000002, /* 3e-45 */
      0x007fffff, /* largest subnormal */
      0x807fffff, /* its negative */
      0x00400000, /* subnormal power of two */
      0x00012345, /* subnormal */
      0x00800000, /* FLT_MIN */
      0x80800000, /* -FLT_MIN */
      0x00800001, /* FLT_MIN's successor */
      0x7f7fffff, /* FLT_MAX */
      0xff7fffff, /* -FLT_MAX */
      0x7f800000, /* inf */
      0xff800000, /* -inf */
      0x7fc00000, /* NaN */
      0xffc00000, /* -NaN */
      0x7f800001, /* signalling NaN */
      0xffffffff, /* NaN, all ones */
      0x3f800000, /* 1 */
      0xbf800000, /* -1 */
      0x3fc00000, /* 1.5 */
      0x42c80000, /* 100 */
      0x4cbebc20, /* 1e8: "100000000" */
      0x3727c5ac, /* 0.00001 */
      0x4e6e6b28, /* 1e+09 */
      0x4b800000, /* 2^24 */
      0x4c000005, /* open interval end */
      0x40094000, /* tie to even */
      0x3eaaaaab, /* 1/3 */
      0x3dcccccd, /* 0.1 */
  };
  for (size_t i = 0; i < N_OF(bits); i++) out[n++] = from_bits(bits[i]);
  float more[] = {FLT_MAX,
                  -FLT_MAX,
                  FLT_MIN,
                  FLT_TRUE_MIN,
                  -FLT_TRUE_MIN,
                  FLT_EPSILON,
                  1.5f,
                  -2.5f,
                  100.0f,
                  1e8f,
                  1e-8f,
                  0.5f,
                  12.5f,
                  65504.0f,
                  123456792.0f,
                  -1.23456789e-5f,
                  -1.0000001e-5f,
                  9.9999999e-5f,
                  -9.87654321e-5f,
                  1.17549435e-38f,
                  3.0e-39f,
                  -7.0e-45f};
  for (size_t i = 0; i < N_OF(more); i++) out[n++] = more[i];
  for (int e = -149; e <= 127; e++) out[n++] = ldexpf(1.0f, e);
  for (int e = -45; e <= 38; e++) {
    char t[16];
    snprintf(t, sizeof t, "1e%d", e);
    out[n++] = strtof(t, NULL);
    out[n++] = -nextafterf(strtof(t, NULL), 0);
  }
  for (int i = 1; i <= 300; i++) out[n++] = (float)i * (i % 2 ? 1 : -1);
  for (int i = 1; i <= 100; i++) out[n++] = (float)i / 8;
  return n;
}

START_TEST(list_special_values) {
  static float sp[1024];
  size_t nsp = special_list(sp);
  ck_assert_uint_le(nsp, N_OF(sp));
  for (size_t k = 0; k < N_OF(impl_names); k++) {
    const char *impl = impl_names[k];
    if (!attn__f32fmt_set_impl(impl)) { /* the CPU lacks it */
      UNIT_SKIPPED(impl);
      continue;
    }
    check_list(sp, nsp, impl);
    for (size_t i = 0; i < nsp; i++) check_list(sp + i, 1, impl);
    /* each special value at each of the 16 lane positions */
    rng = 0x1234567u;
    for (size_t i = 0; i < nsp; i++)
      for (size_t pos = 0; pos < 16; pos++) {
        for (size_t j = 0; j < 32; j++)
          list_in[j] = (float)((double)(int32_t)rnd32() / 1e9);
        list_in[pos] = sp[i];
        list_in[16 + (pos + 5) % 16] = sp[(i * 7 + pos) % nsp];
        check_list(list_in, 32, impl);
      }
    /* lists of zeros of both signs (whole blocks of zeros take a shortcut
     * in the vector code), and ReLU-like lists, half zeros */
    for (size_t n = 1; n <= 50; n++) {
      for (size_t j = 0; j < n; j++) list_in[j] = rnd32() % 3 ? 0.0f : -0.0f;
      check_list(list_in, n, impl);
      for (size_t j = 0; j < n; j++)
        list_in[j] = rnd32() % 2 ? 0.0f : (float)rnd32() / 4294967296.0f;
      check_list(list_in, n, impl);
    }
  }
}
END_TEST

/* Whole blocks of zeros next to ordinary ones: the vector code prints 4 or
 * 2 blocks (or rows of up to 16 floats) side by side, and a group with a
 * block of zeros goes one block at a time.  Lists of 6 blocks (a group of
 * 4, then one of 2) and 6 rows of 9 and of 16 floats, every pattern of
 * zero and nonzero blocks. */
START_TEST(zero_blocks_in_groups) {
  static float v[6 * 16];
  static char want[ATTN_F32_ROWS_MAX_CHARS(6, 16)];
  static char got[ATTN_F32_ROWS_MAX_CHARS(6, 16) + GUARD];
  for (size_t k = 0; k < N_OF(impl_names); k++) {
    const char *impl = impl_names[k];
    if (!attn__f32fmt_set_impl(impl)) { /* the CPU lacks it */
      UNIT_SKIPPED(impl);
      continue;
    }
    rng = 0x0badc0ffee0ddf00u;
    for (unsigned pat = 0; pat < 64; pat++) {
      for (size_t i = 0; i < N_OF(v); i++)
        v[i] = pat >> (i / 16) & 1
                   ? (i % 3 ? 0.0f : -0.0f)
                   : (float)((double)(int32_t)rnd32() / 2147483648.0);
      check_list(v, N_OF(v), impl);
      for (size_t cols = 9; cols <= 16; cols += 7) {
        size_t lw = 0;
        for (size_t r = 0; r < 6; r++) {
          if (r) want[lw++] = ',';
          want[lw++] = '[';
          lw += join_scalar(v + 16 * r, cols, want + lw);
          want[lw++] = ']';
        }
        size_t room = ATTN_F32_ROWS_MAX_CHARS(6, cols);
        memset(got, '#', room + GUARD);
        size_t lg = attn_f32_shortest_rows(v, 6, cols, 16, got);
        for (size_t i = room; i < room + GUARD; i++)
          ck_assert_msg(got[i] == '#', "%s pattern %u: byte %zu past the room",
                        impl, pat, i - room);
        ck_assert_msg(lg == lw && memcmp(got, want, lw) == 0,
                      "%s pattern %u cols=%zu: \"%.*s\" want \"%.*s\"", impl,
                      pat, cols, (int)(lg < 200 ? lg : 200), got,
                      (int)(lw < 200 ? lw : 200), want);
      }
    }
  }
}
END_TEST

/* Every length 0..70 at every start alignment mod 16 (the vector loop's
 * tails), random bit patterns and [-1, 1] values. */
START_TEST(list_every_length) {
  for (size_t k = 0; k < N_OF(impl_names); k++) {
    const char *impl = impl_names[k];
    if (!attn__f32fmt_set_impl(impl)) { /* the CPU lacks it */
      UNIT_SKIPPED(impl);
      continue;
    }
    rng = 0x2545f4914f6cdd1du;
    for (size_t n = 0; n <= 70; n++)
      for (size_t off = 0; off < 16; off++)
        for (int kind = 0; kind < 2; kind++) {
          for (size_t i = 0; i < n + off; i++)
            list_in[i] = kind ? (float)((double)(int32_t)rnd32() / 2147483648.0)
                              : from_bits(rnd32());
          check_list(list_in + off, n, impl);
        }
    /* n = 0 writes nothing and returns 0 */
    memset(list_got, '#', 8);
    ck_assert_uint_eq(attn_f32_shortest_list(list_in, 0, list_got), 0);
    ck_assert_int_eq(list_got[0], '#');
  }
}
END_TEST

/* The portable source (included above) gives the same lists too. */
START_TEST(list_portable_copy) {
  rng = 0x9e3779b97f4a7c15u;
  for (int round = 0; round < 64; round++) {
    size_t n = rnd32() % 2000;
    for (size_t i = 0; i < n; i++) list_in[i] = from_bits(rnd32());
    ck_assert_msg(list_ok(attn_test_f32_list_portable, list_in, n), "%s", why);
  }
}
END_TEST

/* Broken list functions, to show that list_ok says no. */
static size_t bad_drop_last(const float *v, size_t n, char *out) {
  size_t len = join_scalar(v, n, out);
  return len ? len - 1 : 0;
}
static size_t bad_separator(const float *v, size_t n, char *out) {
  size_t len = join_scalar(v, n, out);
  char *c = memchr(out, ',', len);
  if (c) *c = ';';
  return len;
}
static size_t bad_overrun(const float *v, size_t n, char *out) {
  size_t len = join_scalar(v, n, out);
  out[ATTN_F32_LIST_MAX_CHARS(n)] = 'x';
  return len;
}
static size_t bad_one_digit(const float *v, size_t n, char *out) {
  size_t len = join_scalar(v, n, out);
  if (len > 3) out[len - 1] = out[len - 1] == '1' ? '2' : '1';
  return len;
}

START_TEST(list_checker_rejects) {
  float v[5] = {0.1f, -2.5f, 1e-7f, 3.0f, 7.0f};
  ck_assert_msg(list_ok(join_scalar, v, 5), "%s", why);
  ck_assert(!list_ok(bad_drop_last, v, 5));
  ck_assert(!list_ok(bad_separator, v, 5));
  ck_assert(!list_ok(bad_overrun, v, 5));
  ck_assert(!list_ok(bad_one_digit, v, 5));
  ck_assert_msg(strstr(why, "element 4") != NULL, "%s", why);
}
END_TEST

/* attn_f32_shortest_rows(v, rows, cols, ld) with the current
 * implementation against "[" + the per-element join + "]" per row, joined
 * by ',' (built in want, room for it), and nothing stored past
 * ATTN_F32_ROWS_MAX_CHARS (got has GUARD bytes more).  what names the case
 * in a failure's message, which shows the first differing byte. */
static void check_rows(const float *v, size_t rows, size_t cols, size_t ld,
                       char *want, char *got, const char *what) {
  const char *impl = attn__f32fmt_impl_name();
  size_t lw = 0;
  for (size_t r = 0; r < rows; r++) {
    if (r) want[lw++] = ',';
    want[lw++] = '[';
    lw += join_scalar(v + r * ld, cols, want + lw);
    want[lw++] = ']';
  }
  size_t room = ATTN_F32_ROWS_MAX_CHARS(rows, cols);
  memset(got, '#', room + GUARD);
  size_t lg = attn_f32_shortest_rows(v, rows, cols, ld, got);
  for (size_t i = room; i < room + GUARD; i++)
    ck_assert_msg(got[i] == '#',
                  "%s %s rows=%zu cols=%zu: byte %zu past the room written",
                  impl, what, rows, cols, i - room);
  size_t d = 0;
  while (d < lw && d < lg && got[d] == want[d]) d++;
  ck_assert_msg(lg == lw && d == lw,
                "%s %s rows=%zu cols=%zu ld=%zu: at byte %zu got \"%.*s\" "
                "want \"%.*s\"",
                impl, what, rows, cols, ld, d, (int)(lg - d < 24 ? lg - d : 24),
                got + d, (int)(lw - d < 24 ? lw - d : 24), want + d);
}

/* attn_f32_shortest_rows with each implementation against "[" + the
 * per-element join + "]" per row, joined by ',': every cols 0..40 (every
 * tail of a 16-float block), 0..4 rows, row strides cols..cols+17, special
 * values among random bits; nothing stored past ATTN_F32_ROWS_MAX_CHARS. */
START_TEST(rows_match_lists) {
  static float v[4 * 60];
  static char want[ATTN_F32_ROWS_MAX_CHARS(4, 40)];
  static char got[ATTN_F32_ROWS_MAX_CHARS(4, 40) + GUARD];
  rng = 0x2545f4914f6cdd1du;
  for (size_t i = 0; i < N_OF(v); i++)
    v[i] = i % 53 == 7   ? NAN
           : i % 47 == 9 ? 0.0f
           : i % 43 == 1 ? -INFINITY
                         : from_bits(rnd32());
  for (size_t k = 0; k < N_OF(impl_names); k++) {
    const char *impl = impl_names[k];
    if (!attn__f32fmt_set_impl(impl)) { /* the CPU lacks it */
      UNIT_SKIPPED(impl);
      continue;
    }
    for (size_t cols = 0; cols <= 40; cols++)
      for (size_t rows = 0; rows <= 4; rows++)
        for (size_t ld = cols; ld <= cols + 17 && rows * ld <= N_OF(v);
             ld += 1 + ld % 5)
          check_rows(v, rows, cols, ld, want, got, "special");
  }
}
END_TEST

/* Random bits, with NaN, Inf, zeros and subnormals much more frequent. */
static float mixed_bits(uint32_t r) {
  if (r % 29 == 0) return NAN;
  if (r % 31 == 0) return INFINITY;
  if (r % 37 == 0) return r & 64 ? -0.0f : 0.0f;
  if (r % 41 == 0) return from_bits(r & 0x807fffffu); /* subnormal */
  return from_bits(r);
}

/* attn_f32_shortest_rows, each implementation against "[" + the
 * per-element join + "]" per row: every width 1..70 (the AVX2 path groups
 * rows of up to 8 floats, the AVX-512 one rows of up to 16; wider rows go
 * block by block with a tail), 1..9 rows (groups of 4, 2, 1), row stride
 * cols or cols + 3, random bits with NaN, Inf, zeros and subnormals
 * mixed in, and [-1, 1] values. */
START_TEST(rows_every_width) {
  static float v[9 * 73];
  static char want[ATTN_F32_ROWS_MAX_CHARS(9, 70)];
  static char got[ATTN_F32_ROWS_MAX_CHARS(9, 70) + GUARD];
  for (size_t k = 0; k < N_OF(impl_names); k++) {
    const char *impl = impl_names[k];
    if (!attn__f32fmt_set_impl(impl)) { /* the CPU lacks it */
      UNIT_SKIPPED(impl);
      continue;
    }
    rng = 0x6a09e667f3bcc908u;
    for (size_t cols = 1; cols <= 70; cols++)
      for (int kind = 0; kind < 2; kind++) {
        for (size_t i = 0; i < N_OF(v); i++)
          v[i] = kind ? (float)((double)(int32_t)rnd32() / 2147483648.0)
                      : mixed_bits(rnd32());
        for (size_t rows = 1; rows <= 9; rows++)
          for (size_t ld = cols; ld <= cols + 3; ld += 3)
            check_rows(v, rows, cols, ld, want, got,
                       kind ? "[-1, 1]" : "mixed");
      }
  }
}
END_TEST

/* Each list implementation the CPU can run is selectable (so the tests
 * above did not skip it), and the default is the first of avx512, avx2,
 * portable that the CPU has. */
START_TEST(impl_available) {
  int avx512 = 0, avx2 = 0;
#if defined(__x86_64__) && defined(__GNUC__)
  __builtin_cpu_init();
  avx512 = __builtin_cpu_supports("avx512f") &&
           __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512dq") &&
           __builtin_cpu_supports("avx512vl") &&
           __builtin_cpu_supports("avx512cd") &&
           __builtin_cpu_supports("avx512vbmi");
  avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("bmi") &&
         __builtin_cpu_supports("bmi2") && __builtin_cpu_supports("popcnt");
#endif
  const char *want = avx512 ? "avx512" : avx2 ? "avx2" : "portable";
  ck_assert_str_eq(default_impl, want);
  ck_assert_int_eq(attn__f32fmt_set_impl("avx512"), avx512);
  ck_assert_int_eq(attn__f32fmt_set_impl("avx2"), avx2);
  if (avx2) ck_assert_str_eq(attn__f32fmt_impl_name(), "avx2");
  ck_assert_int_eq(attn__f32fmt_set_impl("portable"), 1);
  ck_assert_str_eq(attn__f32fmt_impl_name(), "portable");
  ck_assert_int_eq(attn__f32fmt_set_impl("avx3"), 0);
  ck_assert_str_eq(attn__f32fmt_impl_name(), "portable");
}
END_TEST

/* attn_f32_append_rows against "[" attn_f32_append_list "]" per row: short
 * rows in chunks, rows that make several chunks, rows longer than a chunk,
 * padded row strides. */
START_TEST(json_f32_rows_paths) {
  static float v[3 * 2100];
  rng = 0x9e3779b97f4a7c15u;
  for (size_t i = 0; i < N_OF(v); i++)
    v[i] = i % 61 == 2 ? NAN : from_bits(rnd32());
  const size_t shapes[][3] = {/* rows, cols, ld */
                              {0, 5, 5},       {1, 0, 0},       {3, 0, 4},
                              {16, 16, 16},    {16, 64, 64},    {5, 7, 9},
                              {300, 7, 7},     {2, 1024, 1030}, {3, 1025, 1025},
                              {2, 2100, 2100}, {1, 3, 3}};
  for (size_t k = 0; k < N_OF(impl_names); k++) {
    if (!attn__f32fmt_set_impl(impl_names[k])) { /* the CPU lacks it */
      UNIT_SKIPPED(impl_names[k]);
      continue;
    }
    for (size_t t = 0; t < N_OF(shapes); t++) {
      size_t rows = shapes[t][0], cols = shapes[t][1], ld = shapes[t][2];
      attn_buf got, want;
      attn_buf_init(&got, 0);
      attn_buf_init(&want, 0);
      ck_assert_int_eq(attn_f32_append_rows(&got, v, rows, cols, ld), ATTN_OK);
      for (size_t r = 0; r < rows; r++) {
        ck_assert_int_eq(attn_buf_puts(&want, r ? ",[" : "["), ATTN_OK);
        ck_assert_int_eq(
            attn_f32_append_list(&want, v + r * ld, cols, 1, false), ATTN_OK);
        ck_assert_int_eq(attn_buf_puts(&want, "]"), ATTN_OK);
      }
      ck_assert_msg(got.len == want.len &&
                        (!got.len || memcmp(got.data, want.data, got.len) == 0),
                    "%s rows=%zu cols=%zu ld=%zu", impl_names[k], rows, cols,
                    ld);
      if (got.len) ck_assert_int_eq(got.data[got.len], '\0');
      attn_buf_free(&got);
      attn_buf_free(&want);
    }
  }
}
END_TEST

/* attn_f32_append_list (src/fmt/f32fmt_buf.c): the contiguous path (the
 * list function) and the strided loop against attn_f32_append per element,
 * across its 1024-number chunks, with and without the leading comma. */
START_TEST(json_f32_list_paths) {
  static float v[2 * 2600];
  rng = 0x51ed2701a3c5d9e7u;
  for (size_t i = 0; i < N_OF(v); i++)
    v[i] = i % 97 == 3 ? NAN : i % 89 == 5 ? -INFINITY : from_bits(rnd32());
  size_t ns[] = {0, 1, 15, 16, 17, 1023, 1024, 1025, 2600};
  for (size_t k = 0; k < N_OF(impl_names); k++) {
    const char *impl = impl_names[k];
    if (!attn__f32fmt_set_impl(impl)) { /* the CPU lacks it */
      UNIT_SKIPPED(impl);
      continue;
    }
    for (size_t t = 0; t < N_OF(ns); t++)
      for (int lead = 0; lead < 2; lead++)
        for (int64_t stride = 1; stride <= 2; stride++) {
          size_t n = ns[t];
          attn_buf got, want;
          attn_buf_init(&got, 0);
          attn_buf_init(&want, 0);
          ck_assert_int_eq(attn_buf_puts(&got, "["), ATTN_OK);
          ck_assert_int_eq(attn_buf_puts(&want, "["), ATTN_OK);
          ck_assert_int_eq(attn_f32_append_list(&got, v, n, stride, lead),
                           ATTN_OK);
          for (size_t i = 0; i < n; i++) {
            if (i || lead) ck_assert_int_eq(attn_buf_puts(&want, ","), ATTN_OK);
            ck_assert_int_eq(attn_f32_append(&want, v[(int64_t)i * stride]),
                             ATTN_OK);
          }
          ck_assert_msg(
              got.len == want.len && memcmp(got.data, want.data, got.len) == 0,
              "%s n=%zu lead=%d stride=%d", impl, n, lead, (int)stride);
          ck_assert_int_eq(got.data[got.len], '\0');
          attn_buf_free(&got);
          attn_buf_free(&want);
        }
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
  tc = tcase_create("list");
  tcase_set_timeout(tc, 300);
  tcase_add_checked_fixture(tc, impl_setup, impl_teardown);
  tcase_add_test(tc, list_checker_rejects);
  tcase_add_test(tc, list_every_length);
  tcase_add_test(tc, list_special_values);
  tcase_add_test(tc, zero_blocks_in_groups);
  tcase_add_test(tc, list_random_bits);
  tcase_add_test(tc, list_unit_interval);
  tcase_add_test(tc, list_portable_copy);
  tcase_add_test(tc, json_f32_list_paths);
  tcase_add_test(tc, rows_match_lists);
  tcase_add_test(tc, rows_every_width);
  tcase_add_test(tc, impl_available);
  tcase_add_test(tc, json_f32_rows_paths);
  suite_add_tcase(s, tc);
  return s;
}
