/* f32fmt.c - shortest round-trip float32 -> decimal text (JSON number).
 *
 * DESIGN
 *
 * Purpose: encode response tensors fast.  snprintf("%.9g") is ~10x slower
 * and not shortest; "try %.6g..%.9g until strtof matches" is slower still.
 * This is a Schubfach-style conversion (R. Giulietti, "The Schubfach way to
 * render doubles", 2020) specialised for binary32, written from the paper's
 * description: integer arithmetic only, three 64x64->128 multiplies.
 *
 * Algorithm.  A finite nonzero float is v = c * 2^q (c < 2^24).  strtof
 * maps back to v exactly the reals in its rounding interval R_v, whose ends
 * are the midpoints to the neighbouring floats: in units of 2^(q-2) they are
 * cbl = 4c-2 (4c-1 when v is a power of two with a closer lower neighbour)
 * and cbr = 4c+2; R_v is closed when c is even (ties go to even), open
 * otherwise.  Pick k = floor(log10(width of R_v)), so that scaled by 10^-k
 * R_v has width in [1, 10): it then holds at most one multiple of 10 and,
 * around u = v*10^-k, at least one of the integers s = floor(u), s+1.
 *   1. If a multiple of 10 lies in R_v it is the unique shortest candidate:
 *      any decimal with fewer digits than s is such a multiple.
 *   2. Otherwise the answer has as many digits as s: take whichever of s,
 *      s+1 is in R_v, or, when both are, the one nearer u (tie: even).
 * The scaled bounds 4*X*2^q*10^-k (X = cbl, 4c, cbr) are computed as
 * "round to odd" integers: floor, with the low bit forced to 1 when the
 * value is not an integer.  That keeps every comparison against the
 * multiples of 4 used above exact.  10^-k comes from the table below as a
 * 64-bit mantissa rounded up; the product's top 64 bits keep 31 fraction
 * bits above the truncation noise, enough for the round-to-odd to be exact
 * (bench_f32fmt --exhaustive checks all 2^32 inputs against strtof and an
 * exact shortest/nearest criterion).
 *
 * Output.  The decimal significand (at most 9 digits) is scaled to exactly
 * 9 digits and split into bytes with SWAR multiply-shift arithmetic; the
 * text is then placed with a few overlapping 1-, 2-, 4- and 8-byte stores,
 * all inside out[0..16).  The hot path branches only on the output form
 * (plain or scientific; real data predicts it well) and on a rare trailing
 * zero, never on the digits.  NaN, Inf, zeros, subnormals and powers of
 * two take a separate, general path (shortest_rare), so that the hot path
 * can assume a 6..9 digit significand.  A portable byte-by-byte formatter
 * (and 32-bit-limb multiply) serves big-endian targets and non-GNU
 * compilers; -DATTN_F32FMT_PORTABLE forces it, and the unit test compares
 * it with the fast one on millions of inputs.
 *
 * Lists (f32fmt_list.c).  attn_f32_shortest_list prints v[0..n) joined
 * by ','.  Its portable version (list_portable) is the per-element loop and
 * the reference.  f32fmt_avx512.c does the same conversion 16 floats at a time
 * (same bytes, 3.2-3.6x the throughput on Zen 4), f32fmt_avx2.c 8 at a
 * time for CPUs without AVX-512 (same bytes, ~3-4.5x on Zen 3); a
 * constructor picks the first the CPU can run: avx512 (F/BW/DQ/VL/CD/VBMI),
 * then avx2 (AVX2, BMI1, BMI2, POPCNT), then the portable loop.
 * attn__f32fmt_set_impl (internal.h) lets tests and the bench force any
 * of them.
 * attn_f32_shortest_rows prints a matrix as "[..],[..]" in one call per
 * implementation (rows_portable is its reference): responses nest rows of
 * 16 or 64 floats, and a call per row cost ~40-70 ns of set-up and buffer
 * bookkeeping each.
 *
 * Threads: pure functions and constant tables; callable from any thread.
 * The list implementation is chosen before main (or by a test, while no
 * list is being printed) and only read afterwards.
 * Invariants: K_MIN..K_MAX covers every k that binary32 needs; G is checked
 * entry by entry against an exact recomputation in tests/test_f32fmt.c.
 */
#include "attn/f32fmt.h"

#include <stdint.h>
#include <string.h>

#include "internal.h"

#if defined(__GNUC__) && defined(__BYTE_ORDER__) && \
    __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__ &&    \
    !defined(ATTN_F32FMT_PORTABLE)
#define ATTN__F32_FAST 1
#else
#define ATTN__F32_FAST 0
#endif

#if defined(__GNUC__)
#define UNLIKELY(x) __builtin_expect(!!(x), 0)
#define INLINE static inline __attribute__((always_inline))
#define NOINLINE static __attribute__((noinline))
#else
#define UNLIKELY(x) (x)
#define INLINE static inline
#define NOINLINE static
#endif

/* Range of k = floor(log10(2^q)) (or of (3/4)*2^q) over binary32's q. */
#define K_MIN ATTN__F32_K_MIN
#define K_MAX ATTN__F32_K_MAX

/* G[k - K_MIN] = floor(10^-k * 2^(63 - r)) + 1 with r = floor(log2(10^-k)),
 * i.e. 10^-k's 64-bit mantissa (top bit set), rounded up.  Generated with
 * exact rational arithmetic (Python fractions); tests/test_f32fmt.c
 * recomputes every entry with its own bignum and compares. */
static const uint64_t G[K_MAX - K_MIN + 1] = {
    0xb35dbf821ae4f38cu, 0x8f7e32ce7bea5c70u, 0xe596b7b0c643c71au,
    0xb7abc627050305aeu, 0x92efd1b8d0cf37bfu, 0xeb194f8e1ae525feu,
    0xbc143fa4e250eb32u, 0x96769950b50d88f5u, 0xf0bdc21abb48db21u,
    0xc097ce7bc90715b4u, 0x9a130b963a6c115du, 0xf684df56c3e01bc7u,
    0xc5371912364ce306u, 0x9dc5ada82b70b59eu, 0xfc6f7c4045812297u,
    0xc9f2c9cd04674edfu, 0xa18f07d736b90be6u, 0x813f3978f8940985u,
    0xcecb8f27f4200f3bu, 0xa56fa5b99019a5c9u, 0x84595161401484a1u,
    0xd3c21bcecceda101u, 0xa968163f0a57b401u, 0x878678326eac9001u,
    0xd8d726b7177a8001u, 0xad78ebc5ac620001u, 0x8ac7230489e80001u,
    0xde0b6b3a76400001u, 0xb1a2bc2ec5000001u, 0x8e1bc9bf04000001u,
    0xe35fa931a0000001u, 0xb5e620f480000001u, 0x9184e72a00000001u,
    0xe8d4a51000000001u, 0xba43b74000000001u, 0x9502f90000000001u,
    0xee6b280000000001u, 0xbebc200000000001u, 0x9896800000000001u,
    0xf424000000000001u, 0xc350000000000001u, 0x9c40000000000001u,
    0xfa00000000000001u, 0xc800000000000001u, 0xa000000000000001u,
    0x8000000000000001u, 0xcccccccccccccccdu, 0xa3d70a3d70a3d70bu,
    0x83126e978d4fdf3cu, 0xd1b71758e219652cu, 0xa7c5ac471b478424u,
    0x8637bd05af6c69b6u, 0xd6bf94d5e57a42bdu, 0xabcc77118461cefdu,
    0x89705f4136b4a598u, 0xdbe6fecebdedd5bfu, 0xafebff0bcb24aaffu,
    0x8cbccc096f5088ccu, 0xe12e13424bb40e14u, 0xb424dc35095cd810u,
    0x901d7cf73ab0acdau, 0xe69594bec44de15cu, 0xb877aa3236a4b44au,
    0x9392ee8e921d5d08u, 0xec1e4a7db69561a6u, 0xbce5086492111aebu,
    0x971da05074da7befu, 0xf1c90080baf72cb2u, 0xc16d9a0095928a28u,
    0x9abe14cd44753b53u, 0xf79687aed3eec552u, 0xc612062576589ddbu,
    0x9e74d1b791e07e49u, 0xfd87b5f28300ca0eu, 0xcad2f7f5359a3b3fu,
    0xa2425ff75e14fc32u, 0x81ceb32c4b43fcf5u,
};
const uint64_t *const attn__f32_g = G; /* for f32fmt_avx512.c, _avx2.c */

/* floor(q * log10(2)) for -160 <= q < 130 (checked by the table generator;
 * the unit test rechecks the q binary32 uses exactly); >> of a negative
 * int is arithmetic on every compiler we build with. */
INLINE int flog10_pow2(int q) {
  return (q * 78913) >> 18;
}

/* floor(log10(3/4 * 2^q)), same range. */
INLINE int flog10_3q_pow2(int q) {
  return (q * 78913 - 32752) >> 18;
}

/* floor(x * log2(10)) for |x| <= 60. */
INLINE int flog2_pow10(int x) {
  return (x * 1741647) >> 19;
}

/* High 64 bits of a * b.  The 32-bit-limb version also serves the portable
 * build, so that the unit test exercises it. */
INLINE uint64_t mulhi64(uint64_t a, uint64_t b) {
#if defined(__SIZEOF_INT128__) && !defined(ATTN_F32FMT_PORTABLE)
  __extension__ typedef unsigned __int128 u128;
  return (uint64_t)(((u128)a * b) >> 64);
#else
  uint64_t a0 = (uint32_t)a, a1 = a >> 32, b0 = (uint32_t)b, b1 = b >> 32;
  uint64_t p00 = a0 * b0, p01 = a0 * b1, p10 = a1 * b0, p11 = a1 * b1;
  uint64_t mid = (p00 >> 32) + (uint32_t)p01 + (uint32_t)p10;
  return p11 + (p01 >> 32) + (p10 >> 32) + (mid >> 32);
#endif
}

/* Round-to-odd of cp * g / 2^95: the floor, its low bit set if any of the
 * 31 fraction bits kept above the dropped low word is nonzero. */
INLINE uint32_t rop(uint64_t g, uint64_t cp) {
  uint64_t hi = mulhi64(g, cp);
  return (uint32_t)(hi >> 31) | ((hi & 0x7fffffffu) != 0);
}

/* The shortest, nearest decimal dec * 10^*kout in R_v for v = c * 2^q (see
 * DESIGN).  irr marks the power-of-two case with the closer lower
 * neighbour; rare says s may be < 10 (subnormals), where step 1 must be
 * skipped: 0 is no candidate, and 10 competes with s+1 on nearness in
 * step 2 instead.  dec is never 0 and below 2^28; it has trailing zeros
 * only when R_v holds a multiple of 100 (or for 10 from step 2). */
INLINE uint32_t to_decimal(uint32_t c, int q, int irr, int rare, int *kout) {
  int k = irr ? flog10_3q_pow2(q) : flog10_pow2(q);
  int sh = q + flog2_pow10(-k) + 32; /* h + 32 with h in 0..3 */
  uint64_t g = G[k - K_MIN];
  uint64_t cb = (uint64_t)c << 2;
  uint32_t vb = rop(g, cb << sh);
  uint32_t vbl = rop(g, (cb - 2 + (uint64_t)irr) << sh);
  uint32_t vbr = rop(g, (cb + 2) << sh);
  /* x is in R_v iff lo <= 4x <= hi (odd c: the ends are excluded). */
  uint32_t lo = vbl + (c & 1), hi = vbr - (c & 1);
  uint32_t s = vb >> 2, s10 = s / 10, sp = s10 * 10;
  /* Step 1: sp or sp + 10 (never both: the width is < 10). */
  uint32_t upin = lo <= sp << 2, wpin = (sp << 2) + 40 <= hi;
  uint32_t shorter = upin | wpin;
  if (rare) shorter &= s >= 10;
  /* Step 2: s if t = s+1 is out, t if s is out, else the nearer: vb & 3
   * is 0 or 2 when u - s is exactly 0 or 1/2, 1 or 3 when u - s is in
   * (0, 1/2) or (1/2, 1); a tie (2) goes to the even one. */
  uint32_t uin = lo <= s << 2, win = (s << 2) + 4 <= hi;
  uint32_t near_t = (vb & 3) + (s & 1) > 2;
  uint32_t pick_t = (uin ^ 1) | (win & near_t);
  /* Masks, not ?:, so that no (unpredictable) branch is emitted. */
  uint32_t sel = 0u - shorter;
  *kout = k + (int)shorter;
  return ((s10 + wpin) & sel) | ((s + pick_t) & ~sel);
}

#if ATTN__F32_FAST
/* b < 10^8 -> its 8 decimal digits as byte values 0..9, most significant in
 * the lowest byte (memory order on little-endian). */
INLINE uint64_t digits8(uint32_t b) {
  uint64_t hi4 = b / 10000, lo4 = b - hi4 * 10000;
  uint64_t x = hi4 | lo4 << 32;                           /* 2 x 32-bit */
  uint64_t d = ((x * 10486) >> 20) & 0x0000007f0000007fu; /* lane / 100 */
  x = d | (x - d * 100) << 16;                            /* 4 x 16-bit */
  d = ((x * 103) >> 10) & 0x000f000f000f000fu;            /* lane / 10 */
  return d | (x - d * 10) << 8;                           /* 8 x 8-bit */
}

static const uint32_t P10[10] = {
    1, 10, 100, 1000, 10000, 100000, 1000000, 10000000, 100000000, 1000000000};

/* "e-45" .. "e+38", 4 bytes each, indexed by exponent + 45. */
static const char EXP10[84 * 4 + 1] =
    "e-45e-44e-43e-42e-41e-40e-39e-38e-37e-36e-35e-34e-33e-32e-31e-30"
    "e-29e-28e-27e-26e-25e-24e-23e-22e-21e-20e-19e-18e-17e-16e-15e-14"
    "e-13e-12e-11e-10e-09e-08e-07e-06e-05e-04e-03e-02e-01e+00e+01e+02"
    "e+03e+04e+05e+06e+07e+08e+09e+10e+11e+12e+13e+14e+15e+16e+17e+18"
    "e+19e+20e+21e+22e+23e+24e+25e+26e+27e+28e+29e+30e+31e+32e+33e+34"
    "e+35e+36e+37e+38";

/* Writes dec * 10^k, with '-' first when neg, to out; returns the length.
 * With rare = 0 the caller promises that dec has 6..9 digits and no
 * trailing zero (true on the hot path, see attn_f32_shortest); with
 * rare = 1 any dec in 1..10^9-1 is fine.  (No clz anywhere: x86 BSR keeps
 * a false dependency on its destination, which chains calls together.) */
INLINE size_t format(char *out, uint32_t neg, uint32_t dec, int k, int rare) {
  int n0 = 6 + (dec >= 1000000) + (dec >= 10000000) + (dec >= 100000000);
  if (rare)
    n0 = 1 + (dec >= 10) + (dec >= 100) + (dec >= 1000) + (dec >= 10000) +
         (dec >= 100000) + (dec >= 1000000) + (dec >= 10000000) +
         (dec >= 100000000);
  /* Scale to exactly 9 digits: first digit fd, then the 8 digits of z. */
  int e = k + n0 - 1; /* decimal exponent of the first digit */
  uint32_t d9 = dec * P10[9 - n0];
  uint32_t fd = d9 / 100000000u; /* 1..9 */
  uint64_t z = digits8(d9 - fd * 100000000u);
  int n = n0; /* significant digits */
  if (rare) {
    /* n = 2 + index of the last nonzero byte of z (1 if none): flag
     * nonzero bytes (digits <= 9, so +0x7f sets bit 7 exactly for them),
     * smear the flags down to lower bytes, count them with a multiply. */
    uint64_t nz = ((z + 0x7f7f7f7f7f7f7f7fu) & 0x8080808080808080u) >> 7;
    nz |= nz >> 8;
    nz |= nz >> 16;
    nz |= nz >> 32;
    n = 1 + (int)((nz * 0x0101010101010101u) >> 56);
  }
  uint64_t zc = z + 0x3030303030303030u; /* ASCII, zero digits pad */
  char c0 = (char)('0' + fd);
  char *p = out;
  size_t len;
  *p = '-';
  p += neg;
  /* Every store stays inside out[0..16); later stores overwrite the
   * padding of earlier ones. */
  if ((unsigned)(e + 5) <= 13) { /* plain: -5 <= e <= 8 */
    if (e < 0) {                 /* 0.000ddd */
      memcpy(p, "0.000000", 8);
      p[1 - e] = c0;
      memcpy(p + 2 - e, &zc, 8);
      len = (size_t)(n + 1 - e);
    } else if (n <= e + 1) { /* integer ddd000: e + 1 <= 9 digits */
      *p = c0;
      memcpy(p + 1, &zc, 8);
      len = (size_t)e + 1;
    } else { /* ddd.ddd, '.' after digit e: n + 1 <= 10 bytes */
      uint64_t dig = (uint8_t)c0 | zc << 8;      /* digits 0..7 */
      uint64_t m = ~(uint64_t)0 >> (56 - 8 * e); /* bytes 0..e */
      uint64_t w = (dig & m) | (dig & ~m) << 8 | ((uint64_t)'.' << 8 * e) << 8;
      uint16_t w2 = (uint16_t)(zc >> 48); /* digits 7, 8 */
      w2 = e == 7 ? (uint16_t)((w2 & 0xff00u) | '.') : w2;
      memcpy(p, &w, 8);
      memcpy(p + 8, &w2, 2);
      len = (size_t)n + 1;
    }
  } else {                /* d[.ddd]e+XX, |e| in 6..45 */
    int at = n + (n > 1); /* no point after a single digit */
    p[0] = c0;
    p[1] = '.';
    memcpy(p + 2, &zc, 8);
    memcpy(p + at, EXP10 + 4 * (e + 45), 4);
    len = (size_t)at + 4;
  }
  return len + neg;
}
#else
/* Portable formatter: same text, one byte at a time. */
INLINE size_t format(char *out, uint32_t neg, uint32_t dec, int k, int rare) {
  char dig[10]; /* reversed digits */
  int n = 0, i;
  char *p = out;
  (void)rare;
  while (dec % 10 == 0) {
    dec /= 10;
    k++;
  }
  for (; dec; dec /= 10) dig[n++] = (char)('0' + dec % 10);
  int e = k + n - 1;
  if (neg) *p++ = '-';
  if (e >= -5 && e < 9) {
    if (e < 0) {
      *p++ = '0';
      *p++ = '.';
      for (i = -1; i > e; i--) *p++ = '0';
      for (i = n - 1; i >= 0; i--) *p++ = dig[i];
    } else {
      for (i = 0; i < n; i++) {
        *p++ = dig[n - 1 - i];
        if (i == e && i < n - 1) *p++ = '.';
      }
      for (i = n; i <= e; i++) *p++ = '0';
    }
  } else {
    int ae = e < 0 ? -e : e;
    *p++ = dig[n - 1];
    if (n > 1) {
      *p++ = '.';
      for (i = n - 2; i >= 0; i--) *p++ = dig[i];
    }
    *p++ = 'e';
    *p++ = e < 0 ? '-' : '+';
    *p++ = (char)('0' + ae / 10);
    *p++ = (char)('0' + ae % 10);
  }
  return (size_t)(p - out);
}
#endif

/* Text of dec * 10^k for any dec (trailing zeros allowed), off the hot
 * path. */
NOINLINE size_t format_rare(char *out, uint32_t neg, uint32_t dec, int k) {
  return format(out, neg, dec, k, 1);
}

/* NaN, Inf, zeros, subnormals and powers of two, off the hot path. */
NOINLINE size_t shortest_rare(uint32_t bits, char *out) {
  uint32_t neg = bits >> 31;
  uint32_t be = (bits >> 23) & 0xff, t = bits & 0x7fffff;
  if (be == 0xff) { /* NaN, Inf: not JSON numbers */
    memcpy(out, "null", 4);
    return 4;
  }
  if ((bits << 1) == 0) { /* +-0 */
    out[0] = '-';
    out[neg] = '0';
    return neg + 1;
  }
  uint32_t c = be ? t | 0x800000u : t;
  int q = be ? (int)be - 150 : -149;
  int k;
  uint32_t dec = to_decimal(c, q, t == 0 && be > 1, 1, &k);
  return format(out, neg, dec, k, 1);
}

size_t attn_f32_shortest(float v, char *out) {
  uint32_t bits;
  memcpy(&bits, &v, sizeof bits);
  uint32_t be = (bits >> 23) & 0xff, t = bits & 0x7fffff;
  if (UNLIKELY(be - 1 >= 0xfe || t == 0)) return shortest_rare(bits, out);
  /* Normal, not a power of two: c > 2^23 and 2^q * 10^-k >= 1, so
   * s = floor(c * 2^q * 10^-k) >= 2^23 has 7..9 digits, and dec (s, s+1
   * or (s +- 9) / 10) has 6..9.  A trailing zero is rare (R_v holds a
   * multiple of 100): the general formatter strips it. */
  int k;
  uint32_t dec = to_decimal(t | 0x800000u, (int)be - 150, 0, 0, &k);
  if (UNLIKELY(dec % 10 == 0)) return format_rare(out, bits >> 31, dec, k);
  return format(out, bits >> 31, dec, k, 0);
}
