/* f32fmt.c - shortest round-trip float32 -> decimal text (JSON number).
 *
 * DESIGN
 *
 * Purpose: encode response tensors fast.  snprintf("%.9g") is ~10x slower
 * and not shortest; "try %.6g..%.9g until strtof matches" is slower still.
 * This is a Schubfach-style conversion (R. Giulietti, "The Schubfach way to
 * render doubles", 2020) specialised for binary32, written from the paper's
 * description: integer arithmetic only, one 64x64->128 multiply per bound.
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
 * bits above the truncation noise, enough (and checked over all 2^32
 * inputs by bench_f32fmt --exhaustive) for the round-to-odd to be exact.
 *
 * Output.  The decimal significand (< 2^28, at most 9 digits) is split
 * into digits with SWAR multiply-shift arithmetic, leading and trailing
 * zero digits are dropped with ctz/clz, and the whole text (at most 16
 * bytes) is assembled in a 128-bit register and stored once.  A portable
 * byte-by-byte formatter serves big-endian targets and compilers without
 * unsigned __int128; -DATTN_F32FMT_PORTABLE forces it (the unit tests run
 * both).
 *
 * Threads: pure functions and a constant table; callable from anywhere.
 * Invariants: K_MIN..K_MAX covers every k that binary32 needs (checked by a
 * unit test that recomputes the table with exact integer arithmetic).
 */
#include "attn/f32fmt.h"

#include <stdint.h>
#include <string.h>

#if defined(__GNUC__) && defined(__BYTE_ORDER__) && \
    __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__ && !defined(ATTN_F32FMT_PORTABLE)
#define ATTN__F32_FAST 1
#else
#define ATTN__F32_FAST 0
#endif

/* Range of k = floor(log10(2^q)) (or of (3/4)*2^q) over binary32's q. */
#if defined(__GNUC__)
#define UNLIKELY(x) __builtin_expect(!!(x), 0)
#define INLINE static inline __attribute__((always_inline))
#else
#define UNLIKELY(x) (x)
#define INLINE static inline
#endif

#define K_MIN (-45)
#define K_MAX 31

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

/* floor(q * log10(2)) for |q| <= 160 (exhaustively checked by the
 * generator); >> of a negative int is arithmetic on every gcc/clang target. */
static inline int flog10_pow2(int q) { return (q * 78913) >> 18; }

/* floor(log10(3/4 * 2^q)) for |q| <= 160. */
static inline int flog10_3q_pow2(int q) { return (q * 78913 - 32752) >> 18; }

/* floor(x * log2(10)) for |x| <= 60. */
static inline int flog2_pow10(int x) { return (x * 1741647) >> 19; }

/* High 64 bits of a * b. */
INLINE uint64_t mulhi64(uint64_t a, uint64_t b) {
#if defined(__SIZEOF_INT128__)
  __extension__ typedef unsigned __int128 u128;
  return (uint64_t)(((u128)a * b) >> 64);
#else
  uint64_t a0 = (uint32_t)a, a1 = a >> 32, b0 = (uint32_t)b, b1 = b >> 32;
  uint64_t p00 = a0 * b0, p01 = a0 * b1, p10 = a1 * b0, p11 = a1 * b1;
  uint64_t mid = (p00 >> 32) + (uint32_t)p01 + (uint32_t)p10;
  return p11 + (p01 >> 32) + (p10 >> 32) + (mid >> 32);
#endif
}

/* Round-to-odd of cp * g / 2^95: floor, low bit set if any of the 31
 * fraction bits kept above the truncated low word is nonzero. */
INLINE uint32_t rop(uint64_t g, uint64_t cp) {
  uint64_t hi = mulhi64(g, cp);
  return (uint32_t)(hi >> 31) | ((hi & 0x7fffffffu) != 0);
}

/* The shortest, nearest decimal dec * 10^*k in R_v for v = c * 2^q; irr
 * marks the power-of-two case with the asymmetric interval.  dec may carry
 * trailing zeros; it is < 2^28 (9 digits at most) and never 0. */
INLINE uint32_t to_decimal(uint32_t c, int q, int irr, int *kout) {
  int k = irr ? flog10_3q_pow2(q) : flog10_pow2(q);
  int sh = q + flog2_pow10(-k) + 32; /* h + 32, h in 0..3 */
  uint64_t g = G[k - K_MIN];
  uint64_t cb = (uint64_t)c << 2;
  uint32_t vb = rop(g, cb << sh);
  uint32_t vbl = rop(g, (cb - 2 + (uint64_t)irr) << sh);
  uint32_t vbr = rop(g, (cb + 2) << sh);
  uint32_t open = c & 1; /* odd c: ties round away from v, ends excluded */
  uint32_t s = vb >> 2, t = s + 1;
  /* Step 1: the multiple of 10 below or above u, if exactly one is in. */
  uint32_t sp = s / 10 * 10, tp = sp + 10;
  uint32_t upin = vbl + open <= sp << 2;
  uint32_t wpin = (tp << 2) + open <= vbr;
  /* Step 2: s or t = s+1, whichever is in; both in: the nearer, tie even.
   * At least one is in (width >= 1), so "s not in" means t. */
  uint32_t uin = vbl + open <= s << 2;
  uint32_t win = (t << 2) + open <= vbr;
  int32_t cmp = (int32_t)(vb - ((s + t) << 1)); /* sign of u - (s + 1/2) */
  uint32_t pick_t = (uin ^ 1) | (win & ((cmp > 0) | ((cmp == 0) & s & 1)));
  /* s < 10: sp = 0 is no candidate (and 10 = t is caught by step 2). */
  uint32_t shorter = (upin ^ wpin) & (s >= 10);
  uint32_t sel = 0u - shorter; /* masks, not ?:, so no branch is emitted */
  *kout = k;
  return ((sp + 10 * wpin) & sel) | ((s + pick_t) & ~sel);
}

#if ATTN__F32_FAST
/* b < 10^8 -> its 8 decimal digits as byte values 0..9, most significant in
 * the lowest byte (memory order on little-endian). */
INLINE uint64_t digits8(uint32_t b) {
  uint64_t hi4 = b / 10000, lo4 = b - hi4 * 10000;
  uint64_t x = hi4 | lo4 << 32;                         /* 2 x 32-bit lanes */
  uint64_t d = ((x * 10486) >> 20) & 0x0000007f0000007fu; /* lane / 100 */
  x = d | (x - d * 100) << 16;                          /* 4 x 16-bit lanes */
  d = ((x * 103) >> 10) & 0x000f000f000f000fu;          /* lane / 10 */
  return d | (x - d * 10) << 8;                         /* 8 x 8-bit lanes */
}

static const uint32_t P10[10] = {1,      10,      100,      1000,      10000,
                                 100000, 1000000, 10000000, 100000000,
                                 1000000000};

INLINE size_t format(char *out, uint32_t neg, uint32_t dec, int k) {
  /* Normalise dec (1..9 digits, maybe trailing zeros) to exactly 9 digits:
   * first digit fd, then the 8 digits of z; e is the decimal exponent of
   * the first digit and n the significant digit count. */
  int t = ((32 - __builtin_clz(dec)) * 1233) >> 12; /* ~ floor(log10) */
  int n0 = t + 1 - (dec < P10[t]);                   /* digits of dec */
  int e = k + n0 - 1;
  uint32_t d9 = dec * P10[9 - n0];
  uint32_t fd = d9 / 100000000u; /* 1..9 */
  uint64_t z = digits8(d9 - fd * 100000000u);
  int n = 1 + (z != 0) + ((63 - __builtin_clzll(z | 1)) >> 3);
  uint64_t zc = z + 0x3030303030303030u; /* ASCII; zero digits pad */
  char c0 = (char)('0' + fd);
  char *p = out;
  size_t len;
  *p = '-';
  p += neg;
  /* Every store stays inside out[0..16); later stores overwrite the zero
   * padding of earlier ones. */
  if ((unsigned)(e + 5) <= 13) { /* plain: -5 <= e <= 8 */
    if (e < 0) {                 /* 0.000ddd */
      memcpy(p, "0.000000", 8);
      p[1 - e] = c0;
      memcpy(p + 2 - e, &zc, 8);
      len = (size_t)(n + 1 - e);
    } else if (n <= e + 1) { /* integer: ddd000, e + 1 <= 9 digits */
      *p = c0;
      memcpy(p + 1, &zc, 8);
      len = (size_t)e + 1;
    } else { /* ddd.ddd: '.' after digit e; n + 1 <= 10 bytes */
      uint64_t dig = (uint8_t)c0 | zc << 8;         /* digits 0..7 */
      uint64_t m = ~(uint64_t)0 >> (56 - 8 * e);     /* bytes 0..e */
      uint64_t lo = (dig & m) | (dig & ~m) << 8 | ((uint64_t)'.' << 8 * e) << 8;
      uint16_t hi = (uint16_t)(zc >> 48); /* digits 7, 8 */
      hi = e == 7 ? (uint16_t)((hi & 0xff00u) | '.') : hi;
      memcpy(p, &lo, 8);
      memcpy(p + 8, &hi, 2);
      len = (size_t)n + 1;
    }
  } else { /* d[.ddd]e+XX, |e| in 6..45 */
    uint32_t ae = e < 0 ? (uint32_t)-e : (uint32_t)e;
    uint32_t tens = ae * 103 >> 10; /* ae / 10 for ae < 100 */
    uint32_t ex = 'e' | (uint32_t)(e < 0 ? '-' : '+') << 8 |
                  ('0' + tens) << 16 | ('0' + ae - 10 * tens) << 24;
    int at = n + (n > 1); /* no point for one digit */
    p[0] = c0;
    p[1] = '.';
    memcpy(p + 2, &zc, 8);
    memcpy(p + at, &ex, 4);
    len = (size_t)at + 4;
  }
  return len + neg;
}
#else
static size_t format(char *out, uint32_t neg, uint32_t dec, int k) {
  char dig[10]; /* reversed digits */
  int n = 0, i;
  char *p = out;
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

size_t attn_f32_shortest(float v, char *out) {
  uint32_t bits;
  memcpy(&bits, &v, sizeof bits);
  uint32_t neg = bits >> 31;
  uint32_t be = (bits >> 23) & 0xff, t = bits & 0x7fffff;
  if (UNLIKELY(be == 0xff)) { /* NaN, Inf: not JSON numbers */
    memcpy(out, "null", 4);
    return 4;
  }
  if (UNLIKELY((bits << 1) == 0)) { /* +-0 */
    out[0] = '-';
    out[neg] = '0';
    return neg + 1;
  }
  uint32_t c = be ? t | 0x800000u : t;
  int q = be ? (int)be - 150 : -149;
  int k;
  uint32_t dec = to_decimal(c, q, t == 0 && be > 1, &k);
  return format(out, neg, dec, k);
}
