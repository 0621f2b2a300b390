/* f32fmt_avx2.c - attn_f32_shortest_list, 8 floats at a time on AVX2.
 *
 * DESIGN
 *
 * Purpose: the AVX-512 path of f32fmt_avx512.c for CPUs without AVX-512
 * (Zen 2, Zen 3, Intel client parts): print float lists as "a,b,c" with
 * the very same bytes as calling attn_f32_shortest per element, several
 * times faster.  f32fmt.c picks it at start-up, after AVX-512, when the CPU
 * has AVX2, BMI1, BMI2 and POPCNT; everything here is compiled with
 * per-function target attributes, so the binary still runs on any x86-64.
 * No pdep/pext (microcoded on Zen 2).
 *
 * Algorithm.  Read the DESIGN of f32fmt_avx512.c first: this is the same
 * pipeline, one float per 32-bit lane, 8 lanes per block, with compare
 * masks and blends where that code has mask registers.  Differences:
 *   1. Lane kinds as there: NaN, Inf and subnormal lanes are printed by
 *      attn_f32_shortest at the end, zeros get dec = 0, e = 0, powers of
 *      two stay in the vector path; a tail of m < 8 floats is a masked
 *      load (vpmaskmovd: no read past v + n), dead lanes read as +0.
 *   2. g = G[k] by two 64-bit gathers (even and odd lanes); 77 entries
 *      are too many for register permutes with 8-lane vpermd.  (Scalar
 *      loads instead measured the same.)
 *   3. The 64-bit products per vpmuludq on the even lanes, and on the odd
 *      ones shifted down: 4 per register, no cross-lane widening; the
 *      results merge back with one shift and a blend.  All values of
 *      step 4 are below 2^31, so the signed compares of AVX2 serve.
 *   5. Digits as there (64-bit lanes); the count of significant digits
 *      smears the nonzero-byte flags down and adds them with vpsadbw (no
 *      vector lzcnt).
 *   6. Text.  No vpermb, so the byte shuffle is a pshufb within a 128-bit
 *      lane: one register holds the 16-byte source slots of two floats,
 *        [fd 'e' sign x1 x0 '-' '0' '.' d1 .. d8]
 *      (unpack of the digit and exponent words: floats (0, 4), (2, 6),
 *      (1, 5), (3, 7) per register), and the shuffle index comes whole
 *      from TEXT, one of 46 rows picked per float by sign and form
 *      (0.000ddd by e, ddd.ddd by e, integer, d[.ddd]e+XX by n): a 16-byte
 *      load per float instead of computing the index byte by byte.  The
 *      row and the length are vector arithmetic, stored for the scalar
 *      steps.
 *   7. Output as there: per float one 16-byte store of its slot at p, a
 *      ',' at p + len (len <= 16), p += len + 1.  Float i starts at most
 *      17 * i bytes into out, so both stores end within 17 * (i + 1),
 *      inside the n * (ATTN_F32_MAX_CHARS + 1) bytes the caller reserves.
 *   8. Groups.  Lists go 4 blocks (32 floats) at a time, then 2, then 1,
 *      each statement written for the U blocks side by side (EACH); rows
 *      of at most 8 floats go 4 or 2 rows at a time; a group with a block
 *      of zeros is printed one block at a time.
 * Measured on Zen 3 (EPYC, 2 vCPUs under KVM, lists of 1280): ~150 M
 * floats/s at best for random bit patterns and for [-1, 1]; bench_f32fmt,
 * with the other vCPU busy, 86-124 against 32-37 for the scalar loop
 * (~3x).  One block at a time was ~1.3x slower, 2 blocks as fast as 4.
 * Broadcast constants from memory (C32) gained ~5%; storing the texts
 * straight from registers instead of through the slots, nothing.
 *
 * Threads: pure function over constant tables; callable from any thread.
 * Checked by tests/test_f32fmt.c (random and special inputs, every tail
 * length, rows of every width 1..70) and by bench_f32fmt
 * --exhaustive-batch (all 2^32 floats, batch vs scalar).
 */
#include "internal.h"

#if ATTN__F32_HAVE_AVX2

#include <immintrin.h>
#include <string.h>

#include "attn/f32fmt.h"

#define TARGET __attribute__((target("avx2,bmi,bmi2,popcnt")))
#define INLINE static inline __attribute__((always_inline)) TARGET

/* ---- constants ---------------------------------------------------------- */

/* TEXT[23 * sign + form]: the pshufb index that turns a float's source
 * slot [fd 'e' sign x1 x0 '-' '0' '.' d1 .. d8] (digit 0 at byte 0, digit
 * i >= 1 at byte 7 + i) into its text; bytes past the text are don't-care
 * (6, a '0').  Forms 0..4: 0.000ddd with e = -1 - form; 5..12: a point
 * after digit e = form - 5; 13: an integer (no point; its trailing zeros
 * are d9's); 14..22: scientific with n = form - 13 digits. */
static const uint8_t TEXT[46][16] __attribute__((aligned(16))) = {
    /* 0.ddd, 0.0ddd .. 0.0000ddd (e = -1 .. -5) */
    {6, 7, 0, 8, 9, 10, 11, 12, 13, 14, 15, 6, 6, 6, 6, 6},
    {6, 7, 6, 0, 8, 9, 10, 11, 12, 13, 14, 15, 6, 6, 6, 6},
    {6, 7, 6, 6, 0, 8, 9, 10, 11, 12, 13, 14, 15, 6, 6, 6},
    {6, 7, 6, 6, 6, 0, 8, 9, 10, 11, 12, 13, 14, 15, 6, 6},
    {6, 7, 6, 6, 6, 6, 0, 8, 9, 10, 11, 12, 13, 14, 15, 6},
    /* d.ddd, dd.ddd .. dddddddd.ddd (e = 0 .. 7) */
    {0, 7, 8, 9, 10, 11, 12, 13, 14, 15, 6, 6, 6, 6, 6, 6},
    {0, 8, 7, 9, 10, 11, 12, 13, 14, 15, 6, 6, 6, 6, 6, 6},
    {0, 8, 9, 7, 10, 11, 12, 13, 14, 15, 6, 6, 6, 6, 6, 6},
    {0, 8, 9, 10, 7, 11, 12, 13, 14, 15, 6, 6, 6, 6, 6, 6},
    {0, 8, 9, 10, 11, 7, 12, 13, 14, 15, 6, 6, 6, 6, 6, 6},
    {0, 8, 9, 10, 11, 12, 7, 13, 14, 15, 6, 6, 6, 6, 6, 6},
    {0, 8, 9, 10, 11, 12, 13, 7, 14, 15, 6, 6, 6, 6, 6, 6},
    {0, 8, 9, 10, 11, 12, 13, 14, 7, 15, 6, 6, 6, 6, 6, 6},
    /* ddd, an integer */
    {0, 8, 9, 10, 11, 12, 13, 14, 15, 6, 6, 6, 6, 6, 6, 6},
    /* de+XX, d.de+XX .. d.dddddddde+XX (n = 1 .. 9) */
    {0, 1, 2, 3, 4, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6},
    {0, 7, 8, 1, 2, 3, 4, 6, 6, 6, 6, 6, 6, 6, 6, 6},
    {0, 7, 8, 9, 1, 2, 3, 4, 6, 6, 6, 6, 6, 6, 6, 6},
    {0, 7, 8, 9, 10, 1, 2, 3, 4, 6, 6, 6, 6, 6, 6, 6},
    {0, 7, 8, 9, 10, 11, 1, 2, 3, 4, 6, 6, 6, 6, 6, 6},
    {0, 7, 8, 9, 10, 11, 12, 1, 2, 3, 4, 6, 6, 6, 6, 6},
    {0, 7, 8, 9, 10, 11, 12, 13, 1, 2, 3, 4, 6, 6, 6, 6},
    {0, 7, 8, 9, 10, 11, 12, 13, 14, 1, 2, 3, 4, 6, 6, 6},
    {0, 7, 8, 9, 10, 11, 12, 13, 14, 15, 1, 2, 3, 4, 6, 6},
    /* -0.ddd, -0.0ddd .. -0.0000ddd (e = -1 .. -5) */
    {5, 6, 7, 0, 8, 9, 10, 11, 12, 13, 14, 15, 6, 6, 6, 6},
    {5, 6, 7, 6, 0, 8, 9, 10, 11, 12, 13, 14, 15, 6, 6, 6},
    {5, 6, 7, 6, 6, 0, 8, 9, 10, 11, 12, 13, 14, 15, 6, 6},
    {5, 6, 7, 6, 6, 6, 0, 8, 9, 10, 11, 12, 13, 14, 15, 6},
    {5, 6, 7, 6, 6, 6, 6, 0, 8, 9, 10, 11, 12, 13, 14, 15},
    /* -d.ddd, -dd.ddd .. -dddddddd.ddd (e = 0 .. 7) */
    {5, 0, 7, 8, 9, 10, 11, 12, 13, 14, 15, 6, 6, 6, 6, 6},
    {5, 0, 8, 7, 9, 10, 11, 12, 13, 14, 15, 6, 6, 6, 6, 6},
    {5, 0, 8, 9, 7, 10, 11, 12, 13, 14, 15, 6, 6, 6, 6, 6},
    {5, 0, 8, 9, 10, 7, 11, 12, 13, 14, 15, 6, 6, 6, 6, 6},
    {5, 0, 8, 9, 10, 11, 7, 12, 13, 14, 15, 6, 6, 6, 6, 6},
    {5, 0, 8, 9, 10, 11, 12, 7, 13, 14, 15, 6, 6, 6, 6, 6},
    {5, 0, 8, 9, 10, 11, 12, 13, 7, 14, 15, 6, 6, 6, 6, 6},
    {5, 0, 8, 9, 10, 11, 12, 13, 14, 7, 15, 6, 6, 6, 6, 6},
    /* -ddd, an integer */
    {5, 0, 8, 9, 10, 11, 12, 13, 14, 15, 6, 6, 6, 6, 6, 6},
    /* -de+XX, -d.de+XX .. -d.dddddddde+XX (n = 1 .. 9) */
    {5, 0, 1, 2, 3, 4, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6},
    {5, 0, 7, 8, 1, 2, 3, 4, 6, 6, 6, 6, 6, 6, 6, 6},
    {5, 0, 7, 8, 9, 1, 2, 3, 4, 6, 6, 6, 6, 6, 6, 6},
    {5, 0, 7, 8, 9, 10, 1, 2, 3, 4, 6, 6, 6, 6, 6, 6},
    {5, 0, 7, 8, 9, 10, 11, 1, 2, 3, 4, 6, 6, 6, 6, 6},
    {5, 0, 7, 8, 9, 10, 11, 12, 1, 2, 3, 4, 6, 6, 6, 6},
    {5, 0, 7, 8, 9, 10, 11, 12, 13, 1, 2, 3, 4, 6, 6, 6},
    {5, 0, 7, 8, 9, 10, 11, 12, 13, 14, 1, 2, 3, 4, 6, 6},
    {5, 0, 7, 8, 9, 10, 11, 12, 13, 14, 15, 1, 2, 3, 4, 6},
};

/* Slot of float i in a block: the text step makes floats (0, 4), (2, 6),
 * (1, 5), (3, 7) two 128-bit lanes of one register each, stored in that
 * order (3-bit bit reversal). */
static const uint8_t SLOT[8] = {0, 4, 2, 6, 1, 5, 3, 7};

/* Live-lane masks for a tail of m floats: LIVE + 8 - m. */
static const int32_t LIVE[16] = {-1, -1, -1, -1, -1, -1, -1, -1,
                                 0,  0,  0,  0,  0,  0,  0,  0};

/* 10^(9 - digits) for 6..9 digits, indexed by digits & 7 (vpermd). */
static const int32_t SCALE[8]
    __attribute__((aligned(32))) = {10, 1, 0, 0, 0, 0, 1000, 100};

/* A vector of copies of x, as a broadcast load from memory (see C32 in
 * f32fmt_avx512.c: GCC 12 otherwise rebuilds many such constants with a
 * move to a general register and vpbroadcastd at every use). */
#define C32(x)                                \
  __extension__({                             \
    static const uint32_t k_ = (uint32_t)(x); \
    const uint32_t *p_ = &k_;                 \
    __asm__("" : "+r"(p_));                   \
    _mm256_set1_epi32((int)*p_);              \
  })
#define C64(x)                                \
  __extension__({                             \
    static const uint64_t k_ = (uint64_t)(x); \
    const uint64_t *p_ = &k_;                 \
    __asm__("" : "+r"(p_));                   \
    _mm256_set1_epi64x((long long)*p_);       \
  })

/* ---- helpers ------------------------------------------------------------ */

/* The odd 32-bit lanes moved to the even ones (for vpmuludq). */
INLINE __m256i odd(__m256i x) {
  return _mm256_srli_epi64(x, 32);
}

/* The even 32-bit lanes of x, zero-extended to 64 bits. */
INLINE __m256i even(__m256i x) {
  return _mm256_and_si256(x, C64(0xffffffffu));
}

/* 32-bit lanes from the low halves of the 64-bit lanes of e (even lanes)
 * and o (odd lanes). */
INLINE __m256i merge(__m256i e, __m256i o) {
  return _mm256_blend_epi32(e, _mm256_slli_epi64(o, 32), 0xaa);
}

/* floor(x / 10) per 32-bit lane. */
INLINE __m256i div10(__m256i x) {
  const __m256i m = C64(0xcccccccdu);
  __m256i ev = _mm256_srli_epi64(_mm256_mul_epu32(x, m), 35);
  __m256i od = _mm256_srli_epi64(_mm256_mul_epu32(odd(x), m), 3);
  return _mm256_blend_epi32(ev, od, 0xaa);
}

/* rop() of f32fmt.c from the limb products a = X * gh, b = X * gl:
 * hi = (a << h) + (b >> (32 - h)), then hi >> 31 rounded to odd.  Only
 * the low 32 bits of each 64-bit lane of the result are meaningful. */
INLINE __m256i rop(__m256i a, __m256i b, __m256i h, __m256i h32) {
  __m256i hi =
      _mm256_add_epi64(_mm256_sllv_epi64(a, h), _mm256_srlv_epi64(b, h32));
  const __m256i m31 = C32(0x7fffffff);
  /* (hi & m31) + m31 has bit 31 set iff hi's low 31 bits are nonzero */
  __m256i frac =
      _mm256_srli_epi32(_mm256_add_epi32(_mm256_and_si256(hi, m31), m31), 31);
  return _mm256_or_si256(_mm256_srli_epi64(hi, 31), frac);
}

/* ---- blocks ------------------------------------------------------------- */

#define UMAX 4
#define EACH _Pragma("GCC unroll 4") for (int u = 0; u < U; u++)

/* Texts of the U blocks of m floats at vu[0..U), 1 <= m <= 8, each
 * followed by ',', to out; with rowsep, the ',' between two blocks becomes
 * "],[" (U rows of m floats).  Returns the bytes written, or 0 when U > 1
 * and one of the blocks is all zeros (then group() prints them one at a
 * time).  Stores stay below out + 17 * (floats) (+ 2 per row with
 * rowsep).
 * One function of ~260 lines on purpose: steps 1 to 7 of the DESIGN
 * (with f32fmt_avx512.c's), marked by number, each written once for the U
 * blocks side by side (EACH), and each reading the U-vector arrays the
 * steps before it computed (bits, be, t, k, h, the bounds, dec, d9, e,
 * ...).  The compiler keeps those in registers as far as they fit because
 * the body is one always-inlined function with U a constant; helpers would
 * pass the arrays through memory by pointer (or, inlined back, be this
 * same code), and the statements of the U blocks must stay interleaved for
 * their latency chains to overlap, the point of the groups.  The pieces
 * that stand alone are functions already (odd, even, merge, div10, rop). */
INLINE size_t blocks(const float *const vu[], unsigned m, char *out,
                     const int U, const int rowsep) {
  __attribute__((aligned(32))) char slot[UMAX][8 * 16];
  __attribute__((aligned(32))) uint32_t len[UMAX][8], off[UMAX][8];
  const __m256i one = C32(1);
  const __m256i live =
      _mm256_loadu_si256((const __m256i *)(LIVE + 8 - (m < 8 ? m : 8)));
  __m256i bits[UMAX], be[UMAX], t[UMAX], zero[UMAX], rare[UMAX], irr[UMAX];

  /* 1. lane kinds; rare, zero (and dead) lanes compute on 1.0000001f */
  EACH {
    bits[u] = m >= 8 ? _mm256_loadu_si256((const __m256i *)vu[u])
                     : _mm256_maskload_epi32((const int *)vu[u], live);
    be[u] = _mm256_and_si256(_mm256_srli_epi32(bits[u], 23), C32(0xff));
    t[u] = _mm256_and_si256(bits[u], C32(0x7fffff));
    __m256i z = _mm256_setzero_si256();
    __m256i tz = _mm256_cmpeq_epi32(t[u], z);
    __m256i be0 = _mm256_cmpeq_epi32(be[u], z);
    __m256i be255 = _mm256_cmpeq_epi32(be[u], C32(0xff));
    zero[u] = _mm256_and_si256(be0, tz); /* +-0, and the dead lanes */
    rare[u] = _mm256_or_si256(_mm256_andnot_si256(tz, be0), be255);
    irr[u] = _mm256_andnot_si256(
        be255, _mm256_and_si256(tz, _mm256_cmpgt_epi32(be[u], one)));
  }
  if (U == 1 && _mm256_movemask_ps(_mm256_castsi256_ps(zero[0])) == 0xff) {
    /* all zeros (padding, masked rows) */
    unsigned ng = (unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(bits[0]));
    char *p = out;
    for (unsigned i = 0; i < m; i++) {
      unsigned sn = (ng >> i) & 1;
      p[0] = '-';
      p[sn] = '0';
      p[sn + 1] = ',';
      p += sn + 2;
    }
    return (size_t)(p - out);
  }
  if (U > 1)
    for (int u = 0; u < U; u++)
      if (_mm256_movemask_ps(_mm256_castsi256_ps(zero[u])) == 0xff) return 0;
  EACH {
    __m256i sub = _mm256_or_si256(rare[u], zero[u]);
    be[u] = _mm256_blendv_epi8(be[u], C32(127), sub);
    t[u] = _mm256_blendv_epi8(t[u], one, sub);
  }

  /* 2. k = floor(log10(2^q)) (of 3/4 2^q for irr), h = q + floor(log2(
   * 10^-k)), g = G[k] (even and odd lanes) */
  __m256i k[UMAX], h[UMAX], ge[UMAX], go[UMAX], c4[UMAX];
  EACH {
    __m256i q = _mm256_sub_epi32(be[u], C32(150));
    __m256i q10 = _mm256_mullo_epi32(q, C32(78913));
    k[u] = _mm256_blendv_epi8(
        _mm256_srai_epi32(q10, 18),
        _mm256_srai_epi32(_mm256_sub_epi32(q10, C32(32752)), 18), irr[u]);
    h[u] = _mm256_add_epi32(
        q, _mm256_srai_epi32(_mm256_mullo_epi32(
                                 _mm256_sub_epi32(_mm256_setzero_si256(), k[u]),
                                 C32(1741647)),
                             19));
    __m256i idx = _mm256_sub_epi32(k[u], C32(ATTN__F32_K_MIN));
    const long long *g = (const long long *)attn__f32_g;
    ge[u] = _mm256_i64gather_epi64(g, even(idx), 8);
    go[u] = _mm256_i64gather_epi64(g, odd(idx), 8);
    c4[u] = _mm256_slli_epi32(_mm256_or_si256(t[u], C32(0x800000)), 2);
  }

  /* 3. the scaled bounds vbl, vb, vbr, 4 lanes at a time */
  __m256i VB[UMAX], lo[UMAX], hi[UMAX];
  EACH {
    __m256i vb[2], vbl[2], vbr[2];
    for (int hf = 0; hf < 2; hf++) {
      __m256i x = hf ? odd(c4[u]) : c4[u];
      __m256i g = hf ? go[u] : ge[u];
      __m256i g1 = _mm256_srli_epi64(g, 32), g0 = even(g);
      __m256i h64 = hf ? odd(h[u]) : even(h[u]);
      __m256i h32 = _mm256_sub_epi64(C64(32), h64);
      __m256i a = _mm256_mul_epu32(x, g1), b = _mm256_mul_epu32(x, g0);
      __m256i a2 = _mm256_add_epi64(g1, g1), b2 = _mm256_add_epi64(g0, g0);
      /* lower bound 4c - 2, or 4c - 1 for irr */
      __m256i ir = hf ? _mm256_shuffle_epi32(irr[u], 0xf5)
                      : _mm256_shuffle_epi32(irr[u], 0xa0);
      __m256i a1 = _mm256_blendv_epi8(a2, g1, ir);
      __m256i b1 = _mm256_blendv_epi8(b2, g0, ir);
      vb[hf] = rop(a, b, h64, h32);
      vbl[hf] = rop(_mm256_sub_epi64(a, a1), _mm256_sub_epi64(b, b1), h64, h32);
      vbr[hf] = rop(_mm256_add_epi64(a, a2), _mm256_add_epi64(b, b2), h64, h32);
    }
    VB[u] = merge(vb[0], vb[1]);
    __m256i c1 = _mm256_and_si256(t[u], one);
    lo[u] = _mm256_add_epi32(merge(vbl[0], vbl[1]), c1);
    hi[u] = _mm256_sub_epi32(merge(vbr[0], vbr[1]), c1);
  }

  /* 4. shortest, then nearest (see to_decimal in f32fmt.c); all values are
   * below 2^31, so signed compares do */
  __m256i dec[UMAX];
  EACH {
    __m256i s = _mm256_srli_epi32(VB[u], 2), s10 = div10(s);
    __m256i sp4 = _mm256_mullo_epi32(s10, C32(40)),
            s4 = _mm256_slli_epi32(s, 2);
    __m256i no_up = _mm256_cmpgt_epi32(lo[u], sp4);
    __m256i no_wp = _mm256_cmpgt_epi32(_mm256_add_epi32(sp4, C32(40)), hi[u]);
    __m256i no_short = _mm256_and_si256(no_up, no_wp);
    __m256i no_u = _mm256_cmpgt_epi32(lo[u], s4);
    __m256i no_w = _mm256_cmpgt_epi32(_mm256_add_epi32(s4, C32(4)), hi[u]);
    __m256i near_t =
        _mm256_cmpgt_epi32(_mm256_add_epi32(_mm256_and_si256(VB[u], C32(3)),
                                            _mm256_and_si256(s, one)),
                           C32(2));
    __m256i pick_t = _mm256_or_si256(no_u, _mm256_andnot_si256(no_w, near_t));
    /* masks are -1: s - pick_t is s + 1 where picked */
    __m256i d2 = _mm256_sub_epi32(s, pick_t);
    __m256i d1 = _mm256_add_epi32(s10, _mm256_add_epi32(one, no_wp));
    dec[u] = _mm256_blendv_epi8(d1, d2, no_short);
    k[u] = _mm256_add_epi32(k[u], _mm256_add_epi32(one, no_short));
    /* zeros: dec = 0 and e = 0 (below) print as "0" */
    dec[u] = _mm256_andnot_si256(zero[u], dec[u]);
  }

  /* 5. nine digits d9 = dec * 10^(9 - n0); e = exponent of the first */
  __m256i d9[UMAX], e[UMAX], expw[UMAX];
  EACH {
    __m256i n0 = _mm256_sub_epi32(
        _mm256_sub_epi32(C32(6), _mm256_cmpgt_epi32(dec[u], C32(999999))),
        _mm256_add_epi32(_mm256_cmpgt_epi32(dec[u], C32(9999999)),
                         _mm256_cmpgt_epi32(dec[u], C32(99999999))));
    d9[u] = _mm256_mullo_epi32(
        dec[u], _mm256_permutevar8x32_epi32(
                    _mm256_load_si256((const __m256i *)SCALE), n0));
    e[u] = _mm256_add_epi32(k[u], _mm256_sub_epi32(n0, one));
    e[u] = _mm256_andnot_si256(zero[u], e[u]);
    /* exponent text "e+XX" as one 32-bit word */
    __m256i ae = _mm256_abs_epi32(e[u]);
    __m256i x1 = _mm256_srli_epi32(_mm256_mullo_epi32(ae, C32(205)), 11);
    __m256i x0 = _mm256_sub_epi32(ae, _mm256_mullo_epi32(x1, C32(10)));
    __m256i sg = _mm256_castps_si256(_mm256_blendv_ps(
        _mm256_castsi256_ps(C32('+' << 8)), _mm256_castsi256_ps(C32('-' << 8)),
        _mm256_castsi256_ps(e[u])));
    expw[u] = _mm256_add_epi32(
        _mm256_or_si256(sg, C32(0x30300000 | 'e')),
        _mm256_or_si256(_mm256_slli_epi32(x1, 16), _mm256_slli_epi32(x0, 24)));
  }

  /* digits, 4 floats per register: w = [fd 'e' sign x1 x0 '-' '0' '.'] and
   * z = [d1 .. d8] per 64-bit lane; n = significant digits */
  __m256i z[UMAX][2], w[UMAX][2], n[UMAX];
  EACH {
    __m256i nn[2];
    for (int hf = 0; hf < 2; hf++) {
      __m256i d = hf ? odd(d9[u]) : d9[u];
      __m256i fd = _mm256_srli_epi64(_mm256_mul_epu32(d, C64(1441151881)), 57);
      __m256i r = _mm256_sub_epi64(d, _mm256_mul_epu32(fd, C64(100000000)));
      __m256i h4 = _mm256_srli_epi64(_mm256_mul_epu32(r, C64(0xd1b71759)), 45);
      __m256i l4 = _mm256_sub_epi64(r, _mm256_mul_epu32(h4, C64(10000)));
      __m256i x = _mm256_or_si256(h4, _mm256_slli_epi64(l4, 32));
      /* as digits8(): 2 x 4 digits -> 4 x 2 -> 8 x 1, first digit lowest */
      __m256i dd = _mm256_srli_epi32(_mm256_mullo_epi32(x, C32(10486)), 20);
      x = _mm256_or_si256(
          dd, _mm256_slli_epi32(
                  _mm256_sub_epi32(x, _mm256_mullo_epi32(dd, C32(100))), 16));
      dd = _mm256_srli_epi16(_mm256_mullo_epi16(x, _mm256_set1_epi16(103)), 10);
      x = _mm256_or_si256(
          dd,
          _mm256_slli_epi16(_mm256_sub_epi16(x, _mm256_mullo_epi16(
                                                    dd, _mm256_set1_epi16(10))),
                            8));
      /* significant digits: 1 + the number of bytes up to the last nonzero
       * one: flag nonzero bytes (0x80), smear the flags down, count */
      __m256i nz =
          _mm256_and_si256(_mm256_add_epi64(x, C64(0x7f7f7f7f7f7f7f7f)),
                           C64(0x8080808080808080));
      nz = _mm256_or_si256(nz, _mm256_srli_epi64(nz, 8));
      nz = _mm256_or_si256(nz, _mm256_srli_epi64(nz, 16));
      nz = _mm256_or_si256(nz, _mm256_srli_epi64(nz, 32));
      nn[hf] = _mm256_add_epi64(
          _mm256_srli_epi64(_mm256_sad_epu8(nz, _mm256_setzero_si256()), 7),
          C64(1));
      z[u][hf] = _mm256_or_si256(x, C64(0x3030303030303030));
      __m256i ew = hf ? odd(expw[u]) : even(expw[u]);
      w[u][hf] = _mm256_or_si256(
          _mm256_or_si256(fd, _mm256_slli_epi64(ew, 8)),
          C64(0x2e302d0000000030)); /* '0' + fd, ..., '-', '0', '.' */
    }
    n[u] = merge(nn[0], nn[1]);
  }

  /* 6. text: form (the TEXT row) and length per float */
  EACH {
    __m256i sgn = _mm256_srli_epi32(bits[u], 31), nu = n[u], eu = e[u];
    __m256i f0 =
        _mm256_and_si256(_mm256_cmpgt_epi32(_mm256_setzero_si256(), eu),
                         _mm256_cmpgt_epi32(eu, C32(-6)));
    __m256i f1 = _mm256_and_si256(_mm256_cmpgt_epi32(eu, C32(-1)),
                                  _mm256_cmpgt_epi32(C32(9), eu));
    __m256i P = _mm256_add_epi32(eu, one); /* digits before the point */
    __m256i pt = _mm256_cmpgt_epi32(nu, P);
    __m256i sn = _mm256_add_epi32(sgn, nu);
    /* scientific: d[.ddd]e+XX */
    __m256i T = _mm256_add_epi32(nu, C32(13));
    __m256i L = _mm256_sub_epi32(_mm256_add_epi32(sn, C32(4)),
                                 _mm256_cmpgt_epi32(nu, one));
    /* plain: ddd.ddd or an integer */
    __m256i Tp = _mm256_blendv_epi8(C32(13), _mm256_add_epi32(eu, C32(5)), pt);
    __m256i Lp = _mm256_blendv_epi8(_mm256_add_epi32(sgn, P),
                                    _mm256_add_epi32(sn, one), pt);
    T = _mm256_blendv_epi8(T, Tp, f1);
    L = _mm256_blendv_epi8(L, Lp, f1);
    /* 0.000ddd */
    T = _mm256_blendv_epi8(T, _mm256_sub_epi32(C32(-1), eu), f0);
    L = _mm256_blendv_epi8(L, _mm256_sub_epi32(_mm256_add_epi32(sn, one), eu),
                           f0);
    T = _mm256_add_epi32(
        _mm256_slli_epi32(T, 4),
        _mm256_and_si256(_mm256_srai_epi32(bits[u], 31), C32(23 * 16)));
    _mm256_store_si256((__m256i *)off[u], T);
    _mm256_store_si256((__m256i *)len[u], L);
  }

  /* ... and one pshufb of each float's source slot */
  EACH {
    const uint8_t *tx = &TEXT[0][0];
    for (int pr = 0; pr < 4; pr++) {
      int f = (pr & 1) * 2 + (pr >> 1); /* floats f, f + 4 */
      __m256i src = pr & 1
                        ? _mm256_unpackhi_epi64(w[u][pr >> 1], z[u][pr >> 1])
                        : _mm256_unpacklo_epi64(w[u][pr >> 1], z[u][pr >> 1]);
      __m256i ix = _mm256_loadu2_m128i((const __m128i *)(tx + off[u][f + 4]),
                                       (const __m128i *)(tx + off[u][f]));
      _mm256_store_si256((__m256i *)(slot[u] + 32 * pr),
                         _mm256_shuffle_epi8(src, ix));
    }
  }

  /* rare lanes: the scalar function, into their slots */
  EACH {
    unsigned r = (unsigned)_mm256_movemask_ps(
        _mm256_castsi256_ps(_mm256_and_si256(rare[u], live)));
    for (; r; r &= r - 1) {
      unsigned i = (unsigned)__builtin_ctz(r);
      len[u][i] = (uint32_t)attn_f32_shortest(vu[u][i], slot[u] + 16 * SLOT[i]);
    }
  }

  /* 7. concatenate */
  char *p = out;
  for (int u = 0; u < U; u++) {
    if (u && rowsep) {
      p[-1] = ']';
      *p++ = ',';
      *p++ = '[';
    }
    for (unsigned i = 0; i < m; i++) {
      memcpy(p, slot[u] + 16 * SLOT[i], 16);
      p[len[u][i]] = ',';
      p += len[u][i] + 1;
    }
  }
  return (size_t)(p - out);
}

/* One block of m floats, 1 <= m <= 8 (the tails and the fallback of
 * group(): one copy of the code). */
static TARGET __attribute__((noinline)) size_t block1(const float *v,
                                                      unsigned m, char *out) {
  const float *vu[1] = {v};
  return blocks(vu, m, out, 1, 0);
}

/* blocks() for U = 2 or 4, or one block at a time when one of them is all
 * zeros (the shortcut for zeros is per block). */
INLINE size_t group(const float *const vu[], unsigned m, char *out, const int U,
                    int rowsep) {
  size_t k = blocks(vu, m, out, U, rowsep);
  if (k) return k;
  for (int u = 0; u < U; u++) {
    if (u && rowsep) {
      out[k - 1] = ']';
      out[k++] = ',';
      out[k++] = '[';
    }
    k += block1(vu[u], m, out + k);
  }
  return k;
}

static TARGET __attribute__((noinline)) size_t group4(const float *const vu[],
                                                      unsigned m, char *out,
                                                      int rowsep) {
  return group(vu, m, out, 4, rowsep);
}

static TARGET __attribute__((noinline)) size_t group2(const float *const vu[],
                                                      unsigned m, char *out,
                                                      int rowsep) {
  return group(vu, m, out, 2, rowsep);
}

/* The floats of v[0..n) as texts each followed by ',', at p: 32 at a time,
 * then 16, then 8 and the tail; returns the end. */
static TARGET char *list(const float *v, size_t n, char *p) {
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const float *vu[4] = {v + i, v + i + 8, v + i + 16, v + i + 24};
    p += group4(vu, 8, p, 0);
  }
  if (i + 16 <= n) {
    const float *vu[2] = {v + i, v + i + 8};
    p += group2(vu, 8, p, 0);
    i += 16;
  }
  for (; i < n; i += 8)
    p += block1(v + i, n - i < 8 ? (unsigned)(n - i) : 8u, p);
  return p;
}

TARGET size_t attn__f32_list_avx2(const float *v, size_t n, char *out) {
  char *p = list(v, n, out);
  return n ? (size_t)(p - out) - 1 : 0;
}

/* Row r: '[' at p, its blocks (each text followed by ','), the last ','
 * turned into ']', then ','.  A row starts at most r * (17 cols + 3) bytes
 * into out and its stores end within 17 cols + 3 bytes of its start, as
 * ATTN_F32_ROWS_MAX_CHARS allows.  Rows of up to 8 floats (one block) go
 * 4 or 2 at a time. */
TARGET size_t attn__f32_rows_avx2(const float *v, size_t rows, size_t cols,
                                  size_t ld, char *out) {
  char *p = out;
  size_t r = 0;
  if (cols && cols <= 8) {
    unsigned m = (unsigned)cols;
    for (; r + 4 <= rows; r += 4) {
      const float *a = v + r * ld;
      const float *vu[4] = {a, a + ld, a + 2 * ld, a + 3 * ld};
      *p++ = '[';
      p += group4(vu, m, p, 1) - 1; /* the last row's last ',' */
      *p++ = ']';
      *p++ = ',';
    }
    if (r + 2 <= rows) {
      const float *vu[2] = {v + r * ld, v + (r + 1) * ld};
      *p++ = '[';
      p += group2(vu, m, p, 1) - 1;
      *p++ = ']';
      *p++ = ',';
      r += 2;
    }
  }
  for (; r < rows; r++) {
    *p++ = '[';
    p = list(v + r * ld, cols, p);
    if (cols) p--; /* the ',' after the row's last number */
    *p++ = ']';
    *p++ = ',';
  }
  return rows ? (size_t)(p - out) - 1 : 0;
}

#endif /* ATTN__F32_HAVE_AVX2 */
