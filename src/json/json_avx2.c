/* json_avx2.c - the numbers of a packed JSON array, 64 bytes at a time on
 * AVX2 (attn__json_windows_avx2, see internal.h).
 *
 * DESIGN
 *
 * Purpose: the same job as json_avx512.c (read its DESIGN first) for CPUs
 * with AVX2 (and BMI1/2, POPCNT) but no AVX-512, such as AMD Zen 2
 * and 3, where json_parse.c's SSE2 chunk path (pack_chunk, number_known)
 * costs ~21 ns a number: one scalar division and one cvtsi2sd per number,
 * each number's length found before its digits can be merged.  Here a
 * 64-byte window is classified at once, and the numbers are converted four
 * at a time.  Same contract, same accepted form, same fallbacks: what this
 * does not take, json_parse.c parses one number at a time, so values and
 * errors cannot differ.
 *
 * Algorithm, for the window W = p[0..63] (bit i of a mask is byte i):
 *   1. Classes: as json_avx512.c step 1, from two 32-byte halves: a
 *      compare each (digits: one signed compare after moving '0'..'9' to
 *      -128..-119; whitespace: the nibble-table shuffle), vpmovmskb, and
 *      the halves joined into one 64-bit mask per class.
 *   2, 3. Flags and how many: json_avx512.c's steps 2 and 3 unchanged (pure
 *      64-bit mask arithmetic), except that the k-th start is found by
 *      clearing k low bits (the rare path) rather than with pdep, which is
 *      microcoded and slow on Zen 1 and 2.  The next window's start, the
 *      loop's critical path, is guessed early as the last token start in
 *      bytes 32..63 (one delimiter mask of the upper half, bsr) and
 *      checked against the real end by a predicted branch: -5% (kernel
 *      harness, 2,048 numbers such as -0.482913).
 *   4. Per number, in order: its start a (S), its dot or, without one, its
 *      end d (M = DOT | (E & ~(T + DOT)), json_avx512.c step 4), and its
 *      end z (E), each by tzcnt and blsr on its own mask: one bit per taken
 *      token in each.  L = d - a (the integer part with its '-') and
 *      F = z - d (0 without a dot, else fraction digits + 1) pick one of
 *      256 byte shuffles (SHUF, built by macros below) that right-align
 *      the digits of the 16 bytes loaded at a into a 16-byte lane, skipping
 *      the dot and filling zeros in front.  Lane byte 0 is never a digit
 *      (at most 15: tokens are under 16 bytes), and SHUF copies the
 *      token's first byte there: after the two saturating subtractions
 *      below it holds 1 for a '-' and 0 for a digit, and a '-' inside the
 *      right-aligned integer part becomes a leading 0.  So the sign costs
 *      no scalar work: it comes out of the digit merge as 10^15.
 *   5. Digits: two numbers per register (lanes), two registers per group of
 *      four: 10a+b (vpmaddubsw), 100ab+cd (vpmaddwd), pack the two
 *      registers, 10^4 x + y (vpmaddwd): the two 8-digit halves of each
 *      number in one qword, in order, so hi * 10^8 + lo (vpmuludq) gives
 *      m = neg * 10^15 + the digits' value, below 2 * 10^15.
 *   6. Value: m >= 10^15 is the sign; m minus that is below 2^52, so
 *      OR-ing in the exponent of 2^52 and subtracting 2^52 gives it as an
 *      exact double (AVX2 has no 64-bit integer conversion), and one
 *      vdivpd by 10^(F - 1) (exact: Clinger's fast path, as json_parse.c's
 *      number_known) the correctly rounded value of four numbers (two
 *      for a pair).  The sign
 *      is xored in, so "-0" stays -0.
 * Groups of four, the last one a pair when at most two numbers are left
 * (5 or 6 a window is the common count: -10% against a second group of
 * four).  A group may reach past the k-th number (k is rarely a multiple
 * of 4): the extra slots are computed from whatever tokens follow (or from
 * tzcnt's 64 once a mask is empty) and never stored past the return value,
 * except into out[0 .. room), which the caller provides anyway.  So that
 * those loads stay inside the text, a start may be 64 and 16 bytes are
 * read from it: windows read from the text while READ (80) bytes remain,
 * and the last ones (64 to 79 bytes left) from a zero-padded copy.
 *
 * Threads: pure function over constant tables; callable from any thread.
 * Checked by tests/test_codec.c: every packed-array test runs with each
 * path ("avx512", "avx2", "sse2", "scalar") against the plain parse.
 */
#include "internal.h"

#if ATTN__JSON_HAVE_AVX2

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#define TARGET __attribute__((target("avx2,bmi,bmi2,popcnt")))
#define INLINE static inline TARGET __attribute__((always_inline))

/* Bytes read from a window's start: a number's 16 bytes from a start of
 * at most 64 (an empty mask's tzcnt, see DESIGN). */
#define READ (ATTN__JSON_WINDOW + 16)

/* SHUF[L << 4 | F], lane byte j (DESIGN step 4): with nf = F ? F - 1 : 0
 * fraction digits and D = L + nf digit bytes, byte 0 takes the token's
 * first byte, bytes 1 .. 15 - D a zero (index 0x80), then the integer part
 * (token bytes 0 .. L - 1) and the fraction (token bytes L + 1 ..).
 * Entries no valid token selects (L == 0, D > 15) hold whatever the
 * formula gives: their results are never stored. */
#define NF(F) ((F) > 0 ? (F)-1 : 0)
#define SB(L, F, j)                                         \
  (uint8_t)((j) == 0               ? 0                      \
            : (j) < 16 - (L)-NF(F) ? 0x80                   \
            : (j) < 16 - NF(F)     ? (j) - (16 - (L)-NF(F)) \
                                   : (L) + 1 + (j) - (16 - NF(F)))
#define ROW(L, F)                                                             \
  {                                                                           \
    SB(L, F, 0), SB(L, F, 1), SB(L, F, 2), SB(L, F, 3), SB(L, F, 4),          \
        SB(L, F, 5), SB(L, F, 6), SB(L, F, 7), SB(L, F, 8), SB(L, F, 9),      \
        SB(L, F, 10), SB(L, F, 11), SB(L, F, 12), SB(L, F, 13), SB(L, F, 14), \
        SB(L, F, 15)                                                          \
  }
#define ROWS(L)                                                                \
  ROW(L, 0), ROW(L, 1), ROW(L, 2), ROW(L, 3), ROW(L, 4), ROW(L, 5), ROW(L, 6), \
      ROW(L, 7), ROW(L, 8), ROW(L, 9), ROW(L, 10), ROW(L, 11), ROW(L, 12),     \
      ROW(L, 13), ROW(L, 14), ROW(L, 15)
static const uint8_t SHUF[256][16] __attribute__((aligned(64))) = {
    ROWS(0),  ROWS(1),  ROWS(2),  ROWS(3), ROWS(4),  ROWS(5),
    ROWS(6),  ROWS(7),  ROWS(8),  ROWS(9), ROWS(10), ROWS(11),
    ROWS(12), ROWS(13), ROWS(14), ROWS(15)};

/* DIV[L << 4 | F] = 10^(F - 1), the divisor of a number with F - 1
 * fraction digits; F == 0 (no dot) divides by 1.  Indexed like SHUF, so
 * that the key needs no second mask. */
#define P16                                                                \
  1e0, 1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, \
      1e13, 1e14
static const double DIV[256]
    __attribute__((aligned(64))) = {P16, P16, P16, P16, P16, P16, P16, P16,
                                    P16, P16, P16, P16, P16, P16, P16, P16};

/* Step 1's constants: 32 copies of a byte, compared from memory.  Left
 * to _mm256_set1_epi8, GCC 12 rebuilt each one in the loop (mov, vmovd,
 * vpbroadcastb: the window needs more than the 16 ymm registers); an
 * address it cannot see through (kv) makes the load part of the compare. */
#define R8(x) x, x, x, x, x, x, x, x
#define B32(x) \
  { R8(x), R8(x), R8(x), R8(x) }
static const uint8_t K_DOT[32] __attribute__((aligned(32))) = B32('.');
static const uint8_t K_MIN[32] __attribute__((aligned(32))) = B32('-');
static const uint8_t K_COM[32] __attribute__((aligned(32))) = B32(',');
static const uint8_t K_CLO[32] __attribute__((aligned(32))) = B32(']');
static const uint8_t K_ZERO[32] __attribute__((aligned(32))) = B32('0');
static const uint8_t K_D50[32] __attribute__((aligned(32))) = B32(0x50);
static const uint8_t K_D118[32] __attribute__((aligned(32))) = B32(0x8A);
/* JSON whitespace: bytes equal to their low nibble's entry in a table that
 * holds ' ', '\t', '\n', '\r' at 0, 9, 10, 13 and 0 elsewhere (a byte >=
 * 0x80 reads 0), as in json_avx512.c. */
#define WS16 ' ', 0, 0, 0, 0, 0, 0, 0, 0, '\t', '\n', 0, 0, '\r', 0, 0
static const uint8_t K_WS[32] __attribute__((aligned(32))) = {WS16, WS16};

static inline TARGET __m256i kv(const uint8_t *p) {
  __asm__("" : "+r"(p));
  return _mm256_load_si256((const __m256i *)(const void *)p);
}

/* Byte mask of two 32-byte compare results, lo = bytes 0..31. */
static inline TARGET uint64_t mask64(__m256i lo, __m256i hi) {
  return (uint64_t)(uint32_t)_mm256_movemask_epi8(lo) |
         (uint64_t)(uint32_t)_mm256_movemask_epi8(hi) << 32;
}

static inline TARGET uint64_t eq64(__m256i lo, __m256i hi, const uint8_t *k) {
  return mask64(_mm256_cmpeq_epi8(lo, kv(k)), _mm256_cmpeq_epi8(hi, kv(k)));
}

/* '0'..'9' + 0x50 are the signed bytes -128..-119, the only ones below
 * -118. */
static inline TARGET __m256i is_digit(__m256i x) {
  return _mm256_cmpgt_epi8(kv(K_D118), _mm256_add_epi8(x, kv(K_D50)));
}

static inline TARGET __m256i is_ws(__m256i x) {
  return _mm256_cmpeq_epi8(_mm256_shuffle_epi8(kv(K_WS), x), x);
}

/* ',', ']' or whitespace. */
static inline TARGET __m256i is_delim(__m256i x) {
  return _mm256_or_si256(_mm256_or_si256(_mm256_cmpeq_epi8(x, kv(K_COM)),
                                         _mm256_cmpeq_epi8(x, kv(K_CLO))),
                         is_ws(x));
}

/* Where step 4 stands: the start, dot-or-end and end masks, their bits
 * for the numbers not yet converted lowest. */
typedef struct {
  uint64_t s, d, e;
} cursor;

/* The next number's start *a and shuffle key *key (L << 4 | F, DESIGN
 * step 4; masked to the table, since past the taken numbers the bits may
 * belong to anything). */
INLINE void take(cursor *c, unsigned *a, unsigned *key) {
  unsigned sa = (unsigned)_tzcnt_u64(c->s), sd = (unsigned)_tzcnt_u64(c->d),
           sz = (unsigned)_tzcnt_u64(c->e);
  c->s = _blsr_u64(c->s);
  c->d = _blsr_u64(c->d);
  c->e = _blsr_u64(c->e);
  *a = sa;
  *key = ((sd - sa) << 4 | (sz - sd)) & 0xFF;
}

/* Two numbers' digits (step 4, 5), starting at p + a0 and p + a1 with
 * keys k0, k1: their four 4-digit groups as dwords, lane 0 and 1. */
INLINE __m256i groups2(const char *p, unsigned a0, unsigned a1, unsigned k0,
                       unsigned k1) {
  const __m256i k1s =
      _mm256_setr_epi8(-1, '0', '0', '0', '0', '0', '0', '0', '0', '0', '0',
                       '0', '0', '0', '0', '0', -1, '0', '0', '0', '0', '0',
                       '0', '0', '0', '0', '0', '0', '0', '0', '0', '0');
  const __m256i k2s =
      _mm256_setr_epi8('.', 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, '.', 0,
                       0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);
  __m256i x = _mm256_loadu2_m128i((const __m128i *)(const void *)(p + a1),
                                  (const __m128i *)(const void *)(p + a0));
  __m256i c = _mm256_loadu2_m128i((const __m128i *)(const void *)SHUF[k1],
                                  (const __m128i *)(const void *)SHUF[k0]);
  __m256i r = _mm256_shuffle_epi8(x, c);
  /* digits: r - '0'; byte 0: '-' -> 1 ('.' - '-'), a digit -> 0 */
  __m256i d =
      _mm256_or_si256(_mm256_subs_epu8(r, k1s), _mm256_subs_epu8(k2s, r));
  d = _mm256_maddubs_epi16(d, _mm256_set1_epi16(0x010A));     /* 10a+b */
  return _mm256_madd_epi16(d, _mm256_set1_epi32(0x00010064)); /* 100x+y */
}

/* Step 5's end and step 6: from the packed 4-digit groups of t (two
 * numbers per lane) to the values, over the divisors dv. */
INLINE __m256d values(__m256i t, __m256d dv) {
  t = _mm256_madd_epi16(t, _mm256_set1_epi32(0x00012710)); /* 10^4 x + y */
  __m256i m =
      _mm256_add_epi64(_mm256_mul_epu32(t, _mm256_set1_epi64x(100000000)),
                       _mm256_srli_epi64(t, 32));
  /* m >= 10^15: a '-' (step 6) */
  const __m256i e15 = _mm256_set1_epi64x(1000000000000000ll);
  __m256i neg = _mm256_cmpgt_epi64(m, _mm256_set1_epi64x(999999999999999ll));
  m = _mm256_sub_epi64(m, _mm256_and_si256(neg, e15));
  const __m256i magic = _mm256_set1_epi64x(0x4330000000000000ll); /* 2^52 */
  __m256d v = _mm256_sub_pd(_mm256_castsi256_pd(_mm256_or_si256(m, magic)),
                            _mm256_castsi256_pd(magic));
  v = _mm256_div_pd(v, dv);
  return _mm256_xor_pd(v, _mm256_castsi256_pd(_mm256_slli_epi64(neg, 63)));
}

/* The next four numbers (steps 4-6) into out[0 .. 4), or out[0 .. left)
 * when fewer than 4 places are left. */
INLINE void convert4(const char *p, cursor *c, double *out, size_t left) {
  unsigned a0, a1, a2, a3, k0, k1, k2, k3;
  take(c, &a0, &k0);
  take(c, &a1, &k1);
  take(c, &a2, &k2);
  take(c, &a3, &k3);
  /* lanes (0, 2) and (1, 3): the pack puts them back in order */
  __m256i t = _mm256_packus_epi32(groups2(p, a0, a2, k0, k2),
                                  groups2(p, a1, a3, k1, k3));
  __m256d v = values(t, _mm256_setr_pd(DIV[k0], DIV[k1], DIV[k2], DIV[k3]));
  if (left >= 4) {
    _mm256_storeu_pd(out, v);
  } else { /* the last places */
    __m128d h = _mm256_castpd256_pd128(v);
    if (left >= 2) {
      _mm_storeu_pd(out, h);
      h = _mm256_extractf128_pd(v, 1);
    }
    if (left & 1) _mm_storel_pd(out + (left & 2), h);
  }
}

/* The next two numbers into out[0 .. 2), or out[0] when left is 1: a
 * window's last one or two (of 5 or 6, the common counts), without the
 * work of two more. */
INLINE void convert2(const char *p, cursor *c, double *out, size_t left) {
  unsigned a0, a1, k0, k1;
  take(c, &a0, &k0);
  take(c, &a1, &k1);
  __m256i t = groups2(p, a0, a1, k0, k1);
  /* qwords n0, n0, n1, n1 */
  __m256d v = values(_mm256_packus_epi32(t, t),
                     _mm256_setr_pd(DIV[k0], DIV[k0], DIV[k1], DIV[k1]));
  __m128d h = _mm256_castpd256_pd128(_mm256_permute4x64_pd(v, 0x08));
  if (left >= 2)
    _mm_storeu_pd(out, h);
  else
    _mm_storel_pd(out, h);
}

/* One window at p (READ bytes readable): the numbers it takes into out
 * (at most room), *adv and *closed as internal.h says.  *guess is where
 * the next window starts in the common case, found early (DESIGN step 3):
 * the last token start in bytes 32..63. */
INLINE size_t window(const char *p, size_t room, double *out, size_t *adv,
                     int *closed, unsigned *guess) {
  const __m256i w0 = _mm256_loadu_si256((const __m256i *)(const void *)p);
  const __m256i w1 =
      _mm256_loadu_si256((const __m256i *)(const void *)(p + 32));
  const uint32_t d1 = (uint32_t)_mm256_movemask_epi8(is_delim(w1));
  {
    uint32_t th = ~d1;
    /* | 1: defined for a half of delimiters only (and a wrong guess) */
    *guess = 63 - (unsigned)__builtin_clz((th & ~(th << 1)) | 1);
  }

  /* 1. classes */
  uint64_t tok = ~((uint64_t)(uint32_t)_mm256_movemask_epi8(is_delim(w0)) |
                   (uint64_t)d1 << 32);
  uint64_t dig = mask64(is_digit(w0), is_digit(w1));
  uint64_t dot = eq64(w0, w1, K_DOT), min = eq64(w0, w1, K_MIN),
           com = eq64(w0, w1, K_COM), clo = eq64(w0, w1, K_CLO),
           zero = eq64(w0, w1, K_ZERO);
  uint64_t ws = ~(tok | com | clo);
  /* 2. flags (internal.h) */
  attn__json_marks mk =
      attn__json_window_marks(tok, dig, dot, min, clo, ws, zero);
  uint64_t s = mk.s, e = mk.e, f = mk.f;
  unsigned c = mk.c;

  /* 3. how many (json_avx512.c step 3) */
  unsigned k, end;
  int shut = 0;
  unsigned last = 63 - (unsigned)__builtin_clzll(s); /* p[0] starts one */
  k = (unsigned)__builtin_popcountll(s) - 1;
  if (!(clo | f) && k - 1 < room) {
    end = last;
  } else {
    unsigned ff = f ? (unsigned)__builtin_ctzll(f) : 64;
    uint64_t below_f = ff == 64 ? ~0ull : (1ull << ff) - 1;
    uint64_t sx = s | (clo ? 1ull << c : 0);
    k = (unsigned)__builtin_popcountll(sx & below_f);
    if (k < 2) return 0;
    k--;
    shut = clo && c < ff; /* the ']' is the last token's successor */
    if (k > room) {
      k = (unsigned)room;
      shut = 0;
    }
    end = c;
    if (!shut) { /* the k-th start (from 0) */
      uint64_t t = s;
      for (unsigned i = 0; i < k; i++) t &= t - 1;
      end = (unsigned)__builtin_ctzll(t);
    }
  }
  if ((unsigned)__builtin_popcountll(com & ((1ull << end) - 1)) !=
      (shut ? k - 1 : k))
    return 0;

  /* 4-6, four numbers at a time.  The middle mask: each token's dot, or
   * its end when it has none (json_avx512.c step 4). */
  cursor cur = {s, dot | (e & ~(tok + dot)), e};
  for (unsigned i = 0; i < k; i += 4) {
    if (k - i <= 2) {
      convert2(p, &cur, out + i, room - i);
      break;
    }
    convert4(p, &cur, out + i, room - i);
  }
  *adv = end;
  *closed = shut;
  return k;
}

/* A window with fewer than READ bytes left in the text: from a copy with
 * zeros after its 64 bytes. */
static TARGET __attribute__((noinline)) size_t window_padded(
    const char *p, size_t room, double *out, size_t *adv, int *closed) {
  char buf[READ] __attribute__((aligned(32)));
  unsigned guess;
  memcpy(buf, p, ATTN__JSON_WINDOW);
  memset(buf + ATTN__JSON_WINDOW, 0, READ - ATTN__JSON_WINDOW);
  return window(buf, room, out, adv, closed, &guess);
}

/* Windows one after another while each takes something (the loop lives
 * here, as in json_avx512.c).  The next window's start is the loop's
 * critical path: taken from the guess, a short chain (load, compare,
 * vpmovmskb, bsr), and only checked against the window's real end, a
 * predicted branch, rather than waiting for all of steps 1-3. */
TARGET size_t attn__json_windows_avx2(const char *p, size_t len, size_t room,
                                      double *out, size_t *adv, int *closed) {
  size_t n = 0, at = 0;
  int shut = 0;
  while (len - at >= ATTN__JSON_WINDOW && n < room) {
    size_t a, got;
    if (len - at >= READ) {
      unsigned guess;
      got = window(p + at, room - n, out + n, &a, &shut, &guess);
      if (!got) break;
      n += got;
      if (__builtin_expect(a != guess, 0)) {
        __asm__ volatile(""); /* a branch, not a cmov on the late end */
        at += a;
      } else {
        at += guess;
      }
    } else {
      got = window_padded(p + at, room - n, out + n, &a, &shut);
      if (!got) break;
      n += got;
      at += a;
    }
    if (shut) break;
  }
  *adv = at;
  *closed = shut;
  return n;
}

#endif /* ATTN__JSON_HAVE_AVX2 */
