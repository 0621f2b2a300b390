/* f32fmt_avx512.c - attn_f32_shortest_list, 16 floats at a time on AVX-512.
 *
 * DESIGN
 *
 * Purpose: print float lists (response tensors) as "a,b,c" several times
 * faster than calling attn_f32_shortest per element, with the very same
 * bytes.  f32fmt.c picks this path at start-up when the CPU has AVX-512
 * F/BW/DQ/VL/CD/VBMI; the portable loop there stays the reference, and
 * everything here is compiled with per-function target attributes so that
 * the binary still runs on CPUs without AVX-512.
 *
 * Algorithm.  The same Schubfach conversion as f32fmt.c (read its DESIGN
 * first), one float per 32-bit lane, 16 lanes per block, no branches on
 * the data:
 *   1. NaN, Inf and subnormal lanes are flagged and, like zeros (and the
 *      dead lanes of a tail), replaced by a harmless normal float; at the
 *      end each flagged lane is printed by attn_f32_shortest itself.  They
 *      are ~1/256 of random bit patterns and absent from typical tensors.
 *      Zeros are common (ReLU, padding) and too cheap in the scalar code to
 *      leave to it (a call per element made a list of zeros 4x slower
 *      than the portable loop): they get dec = 0, e = 0 at the end of
 *      step 4, which the text step prints as "0" / "-0"; a block of only
 *      zeros skips the vector work altogether.  Powers of two
 *      (the asymmetric interval, "irr" in f32fmt.c) stay in the vector
 *      path: another k formula and lower bound 4c - 1, selected by mask.
 *   2. k, h and 10^-k's mantissa g: multiply-shift logs as in f32fmt.c; g
 *      comes from the 77-entry table split into 32-bit halves gh, gl, held
 *      in registers and looked up with permutes (no gather).
 *   3. The three scaled bounds, 8 lanes per 64-bit-lane register.  The
 *      scalar code takes the top 64 bits of (X << (32 + h)) * g, X < 2^27;
 *      with g = gh * 2^32 + gl that is exactly
 *         hi = (X * gh << h) + (X * gl >> (32 - h)),
 *      two 32x32->64 multiplies (vpmuludq) and no bits lost.  The bounds
 *      4c -+ 2 (or 4c - 1) reuse 4c's products (+- 2 gh, +- 2 gl, or
 *      - gh, - gl).  Round to odd as in rop(): hi >> 31, low bit forced
 *      when hi's low 31 bits are nonzero.
 *   4. The choice between s, s+1 and the multiple of 10 (steps 1, 2 of the
 *      DESIGN in f32fmt.c) with mask registers instead of branches.
 *   5. Digits.  dec has 6..9 digits on this path (also for powers of two:
 *      s >= 2^23 * 4/3 there); scaled to exactly nine,
 *      d9 = dec * 10^(9 - digits), it splits into a first digit and eight
 *      more, computed per 64-bit lane by the multiply-shift steps of
 *      f32fmt.c's digits8 (lane-wise 32- and 16-bit multiplies are exact
 *      there).  The number of significant digits n comes from the last
 *      nonzero digit byte (lzcnt), so trailing zeros need no special case;
 *      the decimal exponent of the first digit is e.
 *   6. Text.  Each float gets a 16-byte source slot
 *         [d0 d1 .. d8 'e' sign x1 x0 '-' '0' '.']
 *      (one 2-register byte permute per 4 slots) and its text is one byte
 *      shuffle of that slot.  The shuffle index of output byte j is
 *         j - A, minus 1 past the point position B,
 *         9 + (j - C) from the exponent position C on (scientific form),
 *      then fixed up: negative index -> '0' (leading zeros of 0.000ddd),
 *      j == B -> '.', j == 0 of a negative float -> '-'.  A, B, C are
 *      per-float bytes from (sign, e, n), broadcast to the float's 16 bytes
 *      by vpermb.  The three output forms of f32fmt.h map to:
 *        0.000ddd (e = -5..-1): A = sign - e, B = sign + 1 (the "minus 1"
 *          puts d0 at j = A + 1, after "0." and -e - 1 zeros), no C;
 *        ddd[.ddd] (e = 0..8): A = sign, B = sign + e + 1 if n > e + 1
 *          (else no point: the integer's trailing zeros are d9's), no C;
 *        d[.ddd]e+XX (other e): A = sign, B = sign + 1 if n > 1, C after
 *          the digits.
 *      "No B / C" is 255, beyond every j.  The texts are at most 16 bytes
 *      (ATTN_F32_MAX_CHARS), so a slot holds any text, also those of the
 *      rare lanes.
 *   7. Output: per float, one 16-byte store of its slot at p, a ',' at
 *      p + len (len <= 16), p += len + 1.  Float i starts at most 17 * i
 *      bytes into out, so both stores end within 17 * (i + 1): inside the
 *      n * (ATTN_F32_MAX_CHARS + 1) bytes the caller reserves.
 *      A tail of m < 16 floats is one more block with a masked load.
 *   8. Groups.  A block is ~660 instructions on one chain of ~200 cycles,
 *      more than a Zen 4 core's out-of-order window can overlap with the
 *      next block, so lists go 4 blocks (64 floats) at a time, then 2, then
 *      1, every statement written for the U blocks of a group side by side
 *      (EACH); rows of at most 16 floats go 4 or 2 rows at a time.  A group
 *      with a block of zeros is printed one block at a time (group()).
 * Measured on Zen 4 (bench_f32fmt, lists of 1280): ~340 M floats/s for
 * random bit patterns and for [-1, 1] (~230 one block at a time), against
 * 65 and 73 for the scalar loop; handling zeros and powers of two here
 * instead of in the scalar fallback cost ~6% of the one-block speed.
 * Gathers instead of the permute lookups of step 2 cost ~15%; the store
 * loop of step 7 is under a tenth of the time (storing straight from
 * registers, or one compress per 4 texts, gained nothing); loading the
 * constants from memory (C32 below) gained ~10%.
 *
 * Threads: pure function over constant tables; callable from any thread.
 * Checked by tests/test_f32fmt.c (random and special inputs, every tail
 * length) and by bench_f32fmt --exhaustive-batch (all 2^32 floats, batch
 * vs scalar).
 */
#include "internal.h"

#if ATTN__F32_HAVE_AVX512

#include <immintrin.h>
#include <string.h>

#include "attn/f32fmt.h"

#define TARGET    \
  __attribute__(( \
      target("avx512f,avx512bw,avx512dq,avx512vl,avx512cd,avx512vbmi")))
#define INLINE static inline __attribute__((always_inline)) TARGET

/* ---- constant byte patterns --------------------------------------------- */

#define X4(v) v, v, v, v
#define X16(v) X4(v), X4(v), X4(v), X4(v)

/* BCAST[g][o]: byte 16t + j <- byte 4 * (4g + t) + o, i.e. parameter byte o
 * of float 4g + t broadcast over the float's 16-byte lane. */
#define BC1(g, o)                                                          \
  {                                                                        \
    X16(16 * (g) + (o)), X16(16 * (g) + 4 + (o)), X16(16 * (g) + 8 + (o)), \
        X16(16 * (g) + 12 + (o))                                           \
  }
#define BC3(g) \
  { BC1(g, 0), BC1(g, 1), BC1(g, 2) }
static const uint8_t BCAST[4][3][64]
    __attribute__((aligned(64))) = {BC3(0), BC3(1), BC3(2), BC3(3)};

/* LAYOUT[u]: the source slots of floats 4u..4u+3 of a half, from the digit
 * register (bytes 0..63: 8 digits per float) and the W register (bytes
 * 64..127: first digit, 'e', sign, x1, x0, '-', '0', '.' per float). */
#define LAYF(f)                                                              \
  64 + 8 * (f), 8 * (f), 8 * (f) + 1, 8 * (f) + 2, 8 * (f) + 3, 8 * (f) + 4, \
      8 * (f) + 5, 8 * (f) + 6, 8 * (f) + 7, 65 + 8 * (f), 66 + 8 * (f),     \
      67 + 8 * (f), 68 + 8 * (f), 69 + 8 * (f), 70 + 8 * (f), 71 + 8 * (f)
static const uint8_t LAYOUT[2][64] __attribute__((aligned(64))) = {
    {LAYF(0), LAYF(1), LAYF(2), LAYF(3)}, {LAYF(4), LAYF(5), LAYF(6), LAYF(7)}};

#define IOTA16 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15
static const uint8_t JPOS[64]
    __attribute__((aligned(64))) = {IOTA16, IOTA16, IOTA16, IOTA16};

/* 10^(9 - digits) for 6..9 digits. */
static const uint32_t SCALE[16] __attribute__((aligned(64))) = {
    0, 0, 0, 0, 0, 0, 1000, 100, 10, 1, 0, 0, 0, 0, 0, 0};

/* ---- helpers ------------------------------------------------------------ */

/* A vector of copies of x.  _mm512_set1 would do, but GCC 12 rebuilds such
 * constants at every use (mov to a general register, then vpbroadcastd:
 * too many to keep in registers here); hiding the value behind a pointer
 * it cannot see through makes each a broadcast load folded into the
 * instruction that uses it ({1to16}), ~10% faster overall. */
#define C32(x)                                \
  __extension__({                             \
    static const uint32_t k_ = (uint32_t)(x); \
    const uint32_t *p_ = &k_;                 \
    __asm__("" : "+r"(p_));                   \
    _mm512_set1_epi32((int)*p_);              \
  })
#define C64(x)                                \
  __extension__({                             \
    static const uint64_t k_ = (uint64_t)(x); \
    const uint64_t *p_ = &k_;                 \
    __asm__("" : "+r"(p_));                   \
    _mm512_set1_epi64((long long)*p_);        \
  })

/* The pow10 table split into 32-bit halves, 16 entries per register. */
typedef struct tables {
  __m512i hi[5], lo[5];
} tables;

INLINE void tables_init(tables *t) {
  const __m512i odd = _mm512_set_epi32(31, 29, 27, 25, 23, 21, 19, 17, 15, 13,
                                       11, 9, 7, 5, 3, 1);
  const __m512i even = _mm512_sub_epi32(odd, C32(1));
  const uint64_t *g = attn__f32_g;
  _Static_assert(ATTN__F32_NG == 77, "table split below assumes 77 entries");
  for (int i = 0; i < 5; i++) { /* entries 16i..16i+15; 77..79 read as 0 */
    __m512i a = _mm512_loadu_si512(g + 16 * i);
    __m512i b = i < 4 ? _mm512_loadu_si512(g + 16 * i + 8)
                      : _mm512_maskz_loadu_epi64(0x1f, g + 72);
    t->hi[i] = _mm512_permutex2var_epi32(a, odd, b);
    t->lo[i] = _mm512_permutex2var_epi32(a, even, b);
  }
}

/* Entry idx (0..79) of a 5-register table, per 32-bit lane. */
INLINE __m512i lookup(const __m512i t[5], __m512i idx, __mmask16 ge32,
                      __mmask16 ge64) {
  __m512i r = _mm512_permutex2var_epi32(t[0], idx, t[1]);  /* idx & 31 */
  __m512i r2 = _mm512_permutex2var_epi32(t[2], idx, t[3]); /* 32 + .. */
  r2 = _mm512_mask_permutexvar_epi32(r2, ge64, idx, t[4]); /* 64 + .. */
  return _mm512_mask_mov_epi32(r, ge32, r2);
}

/* floor(x / 10) per 32-bit lane. */
INLINE __m512i div10(__m512i x) {
  const __m512i m = C64(0xcccccccdu);
  __m512i ev = _mm512_srli_epi64(_mm512_mul_epu32(x, m), 35);
  __m512i od =
      _mm512_srli_epi64(_mm512_mul_epu32(_mm512_srli_epi64(x, 32), m), 3);
  return _mm512_mask_blend_epi32(0xaaaa, ev, od);
}

/* 32-bit lanes 0..7 (half 0) or 8..15 (half 1), zero-extended to 64. */
INLINE __m512i widen(__m512i x, int half) {
  return _mm512_cvtepu32_epi64(half ? _mm512_extracti64x4_epi64(x, 1)
                                    : _mm512_castsi512_si256(x));
}

/* Low 32-bit halves of a's and b's 64-bit lanes as 16 lanes (a first). */
INLINE __m512i pack(__m512i a, __m512i b) {
  const __m512i ix = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12,
                                      10, 8, 6, 4, 2, 0);
  return _mm512_permutex2var_epi32(a, ix, b);
}

/* rop() of f32fmt.c from the limb products a = X * gh, b = X * gl:
 * hi = (a << h) + (b >> (32 - h)), then hi >> 31 rounded to odd. */
INLINE __m512i rop(__m512i a, __m512i b, __m512i h, __m512i h32) {
  __m512i hi =
      _mm512_add_epi64(_mm512_sllv_epi64(a, h), _mm512_srlv_epi64(b, h32));
  __mmask8 frac = _mm512_test_epi64_mask(hi, C64(0x7fffffff));
  __m512i r = _mm512_srli_epi64(hi, 31);
  return _mm512_mask_or_epi64(r, frac, r, C64(1));
}

/* ---- one block ---------------------------------------------------------- */

/* Each statement of the steps below runs for U blocks (1, 2 or 4) side by
 * side.  One block is a chain of ~200 cycles of latency, about 660
 * instructions, twice what the out-of-order window of a core holds, so one
 * block at a time leaves the vector units idle much of the time; with the
 * blocks' statements interleaved, the chains of 2 and 4 blocks overlap
 * (the small v1 answer: ~1.2x with 2 blocks, ~1.45x with 4; bench_f32fmt
 * lists ~1.48x). */
#define UMAX 4
#define EACH _Pragma("GCC unroll 4") for (int u = 0; u < U; u++)

/* Texts of the U blocks of m floats at vu[0..U), 1 <= m <= 16, each
 * followed by ',', to out; with rowsep, the ',' between two blocks becomes
 * "],[" (U rows of m floats).  Returns the bytes written, or 0 when U > 1
 * and one of the blocks is all zeros (then group() prints them one at a
 * time).  Stores stay below out + 17 * (floats) (+ 2 per row with
 * rowsep).
 * One function of ~270 lines on purpose: steps 1 to 7 of the DESIGN, marked
 * by number, each written once for the U blocks side by side (EACH), and
 * each reading the U-vector arrays the steps before it computed (bits, be,
 * t, k, h, the bounds, dec, d9, e, ...).  The compiler keeps those in
 * registers as far as they fit because the body is one always-inlined
 * function with U a constant; helpers would pass the arrays through memory
 * by pointer (or, inlined back, be this same code), and the statements of
 * the U blocks must stay interleaved for their latency chains to overlap,
 * the point of the groups.  The pieces that stand alone are functions
 * already (lookup, div10, widen, pack, rop). */
INLINE size_t blocks(const tables *tb, const float *const vu[], unsigned m,
                     char *out, const int U, const int rowsep) {
  __attribute__((aligned(64))) char slot[UMAX][16 * 16];
  uint8_t len8[UMAX][16];
  const __m512i one = C32(1);
  __mmask16 live = (__mmask16)(m >= 16 ? 0xffffu : (1u << m) - 1);
  __m512i bits[UMAX], be[UMAX], t[UMAX];
  __mmask16 zero[UMAX], rare[UMAX], irr[UMAX];

  /* 1. lane kinds; rare, zero (and dead) lanes compute on 1.0000001f */
  EACH {
    bits[u] = _mm512_maskz_loadu_epi32(live, vu[u]);
    be[u] = _mm512_and_si512(_mm512_srli_epi32(bits[u], 23), C32(0xff));
    t[u] = _mm512_and_si512(bits[u], C32(0x7fffff));
    __mmask16 tz = _mm512_testn_epi32_mask(t[u], t[u]);
    __mmask16 be0 = _mm512_testn_epi32_mask(be[u], be[u]);
    __mmask16 be255 = _mm512_cmpeq_epi32_mask(be[u], C32(0xff));
    zero[u] = be0 & tz; /* +-0 */
    rare[u] = (__mmask16)((be0 & ~tz) | be255);
    irr[u] = _mm512_mask_cmpgt_epu32_mask(tz & ~be255, be[u], one);
  }
  if (U == 1 && zero[0] == live) { /* all zeros (padding, masked rows) */
    unsigned ng = _mm512_movepi32_mask(bits[0]);
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
      if (zero[u] == live) return 0;
  EACH {
    be[u] = _mm512_mask_mov_epi32(be[u], rare[u] | zero[u], C32(127));
    t[u] = _mm512_mask_mov_epi32(t[u], rare[u] | zero[u], one);
  }

  /* 2. k = floor(log10(2^q)) (of 3/4 2^q for irr), h = q + floor(log2(
   * 10^-k)), g = G[k] */
  __m512i k[UMAX], h[UMAX], gh[UMAX], gl[UMAX], c4[UMAX];
  EACH {
    __m512i q = _mm512_sub_epi32(be[u], C32(150));
    __m512i q10 = _mm512_mullo_epi32(q, C32(78913));
    k[u] = _mm512_srai_epi32(q10, 18);
    k[u] = _mm512_mask_srai_epi32(k[u], irr[u],
                                  _mm512_sub_epi32(q10, C32(32752)), 18);
    h[u] = _mm512_add_epi32(
        q, _mm512_srai_epi32(_mm512_mullo_epi32(
                                 _mm512_sub_epi32(_mm512_setzero_si512(), k[u]),
                                 C32(1741647)),
                             19));
  }
  EACH {
    __m512i idx = _mm512_sub_epi32(k[u], C32(ATTN__F32_K_MIN));
    __mmask16 ge32 = _mm512_cmpge_epi32_mask(idx, C32(32));
    __mmask16 ge64 = _mm512_cmpge_epi32_mask(idx, C32(64));
    gh[u] = lookup(tb->hi, idx, ge32, ge64);
    gl[u] = lookup(tb->lo, idx, ge32, ge64);
    c4[u] = _mm512_slli_epi32(_mm512_or_si512(t[u], C32(0x800000)), 2);
  }

  /* 3. the scaled bounds vbl, vb, vbr, 8 lanes at a time */
  __m512i VB[UMAX], lo[UMAX], hi[UMAX];
  EACH {
    __m512i vb[2], vbl[2], vbr[2];
    for (int hf = 0; hf < 2; hf++) {
      __m512i x = widen(c4[u], hf), g1 = widen(gh[u], hf),
              g0 = widen(gl[u], hf);
      __m512i h64 = widen(h[u], hf), h32 = _mm512_sub_epi64(C64(32), h64);
      __m512i a = _mm512_mul_epu32(x, g1), b = _mm512_mul_epu32(x, g0);
      __m512i a2 = _mm512_add_epi64(g1, g1), b2 = _mm512_add_epi64(g0, g0);
      /* lower bound 4c - 2, or 4c - 1 for irr */
      __mmask8 ir = (__mmask8)(irr[u] >> (8 * hf));
      __m512i a1 = _mm512_mask_mov_epi64(a2, ir, g1);
      __m512i b1 = _mm512_mask_mov_epi64(b2, ir, g0);
      vb[hf] = rop(a, b, h64, h32);
      vbl[hf] = rop(_mm512_sub_epi64(a, a1), _mm512_sub_epi64(b, b1), h64, h32);
      vbr[hf] = rop(_mm512_add_epi64(a, a2), _mm512_add_epi64(b, b2), h64, h32);
    }
    VB[u] = pack(vb[0], vb[1]);
    __m512i c1 = _mm512_and_si512(t[u], one);
    lo[u] = _mm512_add_epi32(pack(vbl[0], vbl[1]), c1);
    hi[u] = _mm512_sub_epi32(pack(vbr[0], vbr[1]), c1);
  }

  /* 4. shortest, then nearest (see to_decimal in f32fmt.c) */
  __m512i dec[UMAX];
  EACH {
    __m512i s = _mm512_srli_epi32(VB[u], 2), s10 = div10(s);
    __m512i sp4 = _mm512_mullo_epi32(s10, C32(40)),
            s4 = _mm512_slli_epi32(s, 2);
    __mmask16 upin = _mm512_cmple_epu32_mask(lo[u], sp4);
    __mmask16 wpin =
        _mm512_cmple_epu32_mask(_mm512_add_epi32(sp4, C32(40)), hi[u]);
    __mmask16 shorter = upin | wpin;
    __mmask16 uin = _mm512_cmple_epu32_mask(lo[u], s4);
    __mmask16 win =
        _mm512_cmple_epu32_mask(_mm512_add_epi32(s4, C32(4)), hi[u]);
    __mmask16 near_t = _mm512_cmpgt_epu32_mask(
        _mm512_add_epi32(_mm512_and_si512(VB[u], C32(3)),
                         _mm512_and_si512(s, one)),
        C32(2));
    __mmask16 pick_t = (__mmask16)(~uin | (win & near_t));
    dec[u] = _mm512_mask_add_epi32(s, pick_t, s, one);
    dec[u] = _mm512_mask_mov_epi32(dec[u], shorter,
                                   _mm512_mask_add_epi32(s10, wpin, s10, one));
    k[u] = _mm512_mask_add_epi32(k[u], shorter, k[u], one);
    /* zeros: dec = 0 and e = 0 (below) print as "0"; the mask is
     * recomputed where used, as keeping it live costs more (mask register
     * pressure) */
    dec[u] = _mm512_maskz_mov_epi32(
        (__mmask16)~_mm512_testn_epi32_mask(bits[u], C32(0x7fffffff)), dec[u]);
  }

  /* 5. nine digits d9 = dec * 10^(9 - n0); e = exponent of the first */
  __m512i d9[UMAX], e[UMAX], expw[UMAX];
  EACH {
    __m512i n0 = C32(6);
    n0 = _mm512_mask_add_epi32(
        n0, _mm512_cmpge_epu32_mask(dec[u], C32(1000000)), n0, one);
    n0 = _mm512_mask_add_epi32(
        n0, _mm512_cmpge_epu32_mask(dec[u], C32(10000000)), n0, one);
    n0 = _mm512_mask_add_epi32(
        n0, _mm512_cmpge_epu32_mask(dec[u], C32(100000000)), n0, one);
    d9[u] = _mm512_mullo_epi32(
        dec[u], _mm512_permutexvar_epi32(n0, _mm512_load_si512(SCALE)));
    e[u] = _mm512_add_epi32(k[u], _mm512_sub_epi32(n0, one));
    e[u] = _mm512_maskz_mov_epi32(
        (__mmask16)~_mm512_testn_epi32_mask(bits[u], C32(0x7fffffff)), e[u]);
  }

  /* exponent text "e+XX" as one 32-bit word */
  EACH {
    __m512i ae = _mm512_abs_epi32(e[u]);
    __m512i x1 = _mm512_srli_epi32(_mm512_mullo_epi32(ae, C32(205)), 11);
    __m512i x0 = _mm512_sub_epi32(ae, _mm512_mullo_epi32(x1, C32(10)));
    __m512i sg = _mm512_mask_mov_epi32(
        C32('+' << 8), _mm512_cmplt_epi32_mask(e[u], _mm512_setzero_si512()),
        C32('-' << 8));
    expw[u] = _mm512_add_epi32(
        _mm512_or_si512(sg, C32(0x30300000 | 'e')),
        _mm512_or_si512(_mm512_slli_epi32(x1, 16), _mm512_slli_epi32(x0, 24)));
  }

  __m512i z[UMAX][2], w[UMAX][2], n[UMAX];
  EACH {
    __m512i nn[2];
    for (int hf = 0; hf < 2; hf++) {
      __m512i d = widen(d9[u], hf);
      __m512i fd = _mm512_srli_epi64(_mm512_mul_epu32(d, C64(1441151881)), 57);
      __m512i r = _mm512_sub_epi64(d, _mm512_mul_epu32(fd, C64(100000000)));
      __m512i h4 = _mm512_srli_epi64(_mm512_mul_epu32(r, C64(0xd1b71759)), 45);
      __m512i l4 = _mm512_sub_epi64(r, _mm512_mul_epu32(h4, C64(10000)));
      __m512i x = _mm512_or_si512(h4, _mm512_slli_epi64(l4, 32));
      /* as digits8(): 2 x 4 digits -> 4 x 2 -> 8 x 1, first digit lowest */
      __m512i dd = _mm512_srli_epi32(_mm512_mullo_epi32(x, C32(10486)), 20);
      x = _mm512_or_si512(
          dd, _mm512_slli_epi32(
                  _mm512_sub_epi32(x, _mm512_mullo_epi32(dd, C32(100))), 16));
      dd = _mm512_srli_epi16(_mm512_mullo_epi16(x, _mm512_set1_epi16(103)), 10);
      x = _mm512_or_si512(
          dd,
          _mm512_slli_epi16(_mm512_sub_epi16(x, _mm512_mullo_epi16(
                                                    dd, _mm512_set1_epi16(10))),
                            8));
      /* significant digits: 2 + index of the last nonzero byte (1 if none) */
      __m512i nz =
          _mm512_and_si512(_mm512_add_epi64(x, C64(0x7f7f7f7f7f7f7f7f)),
                           C64(0x8080808080808080));
      nn[hf] = _mm512_add_epi64(
          _mm512_srai_epi64(_mm512_sub_epi64(C64(56), _mm512_lzcnt_epi64(nz)),
                            3),
          C64(2));
      z[u][hf] = _mm512_or_si512(x, C64(0x3030303030303030));
      w[u][hf] = _mm512_or_si512(
          _mm512_or_si512(fd, _mm512_slli_epi64(widen(expw[u], hf), 8)),
          C64(0x2e302d0000000030)); /* '0' + fd, ..., '-', '0', '.' */
    }
    n[u] = pack(nn[0], nn[1]);
  }

  /* 6. text: per-float layout parameters A, B, C and the text length */
  __m512i prm[UMAX], L[UMAX];
  EACH {
    __m512i sgn = _mm512_srli_epi32(bits[u], 31);
    __mmask16 f0 =
        _mm512_cmplt_epu32_mask(_mm512_add_epi32(e[u], C32(5)), C32(5));
    __mmask16 f1 = _mm512_cmplt_epu32_mask(e[u], C32(9));
    __mmask16 f2 = (__mmask16) ~(f0 | f1);
    __m512i P = _mm512_mask_add_epi32(one, f1, e[u], one); /* point after P */
    __mmask16 pt = _mm512_cmpgt_epu32_mask(n[u], P);
    __m512i D = _mm512_max_epu32(n[u], P);
    D = _mm512_mask_add_epi32(D, pt, D, one); /* digits and point */
    __m512i A = _mm512_mask_sub_epi32(sgn, f0, sgn, e[u]);
    __m512i B = _mm512_mask_add_epi32(C32(0xff), pt, sgn, P);
    B = _mm512_mask_add_epi32(B, f0, sgn, one);
    __m512i sD = _mm512_add_epi32(sgn, D);
    __m512i C = _mm512_mask_mov_epi32(C32(0xff), f2, sD);
    L[u] = _mm512_mask_add_epi32(sD, f2, sD, C32(4));
    L[u] = _mm512_mask_add_epi32(L[u], f0, A, _mm512_add_epi32(n[u], one));
    prm[u] = _mm512_or_si512(
        A, _mm512_or_si512(_mm512_slli_epi32(B, 8), _mm512_slli_epi32(C, 16)));
    _mm_storeu_si128((__m128i *)len8[u], _mm512_cvtepi32_epi8(L[u]));
  }

  /* ... then one shuffle of each float's source slot */
  const __m512i J = _mm512_load_si512(JPOS);
  const __m512i J9 = _mm512_add_epi8(J, _mm512_set1_epi8(9));
  for (int g = 0; g < 4; g++) {
    EACH {
      unsigned neg = _mm512_movepi32_mask(bits[u]);
      __m512i src = _mm512_permutex2var_epi8(
          z[u][g >> 1], _mm512_load_si512(LAYOUT[g & 1]), w[u][g >> 1]);
      __m512i a =
          _mm512_permutexvar_epi8(_mm512_load_si512(BCAST[g][0]), prm[u]);
      __m512i b =
          _mm512_permutexvar_epi8(_mm512_load_si512(BCAST[g][1]), prm[u]);
      __m512i c =
          _mm512_permutexvar_epi8(_mm512_load_si512(BCAST[g][2]), prm[u]);
      __m512i ix = _mm512_sub_epi8(J, a);
      ix = _mm512_mask_sub_epi8(ix, _mm512_cmpgt_epu8_mask(J, b), ix,
                                _mm512_set1_epi8(1));
      ix = _mm512_mask_sub_epi8(ix, _mm512_cmpge_epu8_mask(J, c), J9, c);
      ix = _mm512_mask_mov_epi8(ix, _mm512_movepi8_mask(ix),
                                _mm512_set1_epi8(14)); /* '0' */
      ix = _mm512_mask_mov_epi8(ix, _mm512_cmpeq_epi8_mask(J, b),
                                _mm512_set1_epi8(15)); /* '.' */
      /* '-' at byte 0 of each negative float's lane: bit i -> bit 16 i */
      uint64_t nm = ((neg >> (4 * g)) & 15) * 0x0000200040008001u;
      ix = _mm512_mask_mov_epi8(ix, (__mmask64)(nm & 0x0001000100010001u),
                                _mm512_set1_epi8(13));
      _mm512_store_si512(slot[u] + 64 * g, _mm512_shuffle_epi8(src, ix));
    }
  }

  /* rare lanes: the scalar function, into their slots */
  EACH {
    for (unsigned r = rare[u] & live; r; r &= r - 1) {
      unsigned i = (unsigned)__builtin_ctz(r);
      len8[u][i] = (uint8_t)attn_f32_shortest(vu[u][i], slot[u] + 16 * i);
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
      memcpy(p, slot[u] + 16 * i, 16);
      p[len8[u][i]] = ',';
      p += len8[u][i] + 1;
    }
  }
  return (size_t)(p - out);
}

/* One block of m floats, 1 <= m <= 16 (the tails and the fallback of
 * group(): one copy of the code). */
static TARGET __attribute__((noinline)) size_t block1(const tables *tb,
                                                      const float *v,
                                                      unsigned m, char *out) {
  const float *vu[1] = {v};
  return blocks(tb, vu, m, out, 1, 0);
}

/* blocks() for U = 2 or 4, or one block at a time when one of them is all
 * zeros (the shortcut for zeros is per block). */
INLINE size_t group(const tables *tb, const float *const vu[], unsigned m,
                    char *out, const int U, int rowsep) {
  size_t k = blocks(tb, vu, m, out, U, rowsep);
  if (k) return k;
  for (int u = 0; u < U; u++) {
    if (u && rowsep) {
      out[k - 1] = ']';
      out[k++] = ',';
      out[k++] = '[';
    }
    k += block1(tb, vu[u], m, out + k);
  }
  return k;
}

static TARGET __attribute__((noinline)) size_t group4(const tables *tb,
                                                      const float *const vu[],
                                                      unsigned m, char *out,
                                                      int rowsep) {
  return group(tb, vu, m, out, 4, rowsep);
}

static TARGET __attribute__((noinline)) size_t group2(const tables *tb,
                                                      const float *const vu[],
                                                      unsigned m, char *out,
                                                      int rowsep) {
  return group(tb, vu, m, out, 2, rowsep);
}

/* The floats of v[0..n) as texts each followed by ',', at p: 64 at a time,
 * then 32, then 16 and the tail; returns the end. */
static TARGET char *list(const tables *tb, const float *v, size_t n, char *p) {
  size_t i = 0;
  for (; i + 64 <= n; i += 64) {
    const float *vu[4] = {v + i, v + i + 16, v + i + 32, v + i + 48};
    p += group4(tb, vu, 16, p, 0);
  }
  if (i + 32 <= n) {
    const float *vu[2] = {v + i, v + i + 16};
    p += group2(tb, vu, 16, p, 0);
    i += 32;
  }
  for (; i < n; i += 16)
    p += block1(tb, v + i, n - i < 16 ? (unsigned)(n - i) : 16u, p);
  return p;
}

TARGET size_t attn__f32_list_avx512(const float *v, size_t n, char *out) {
  tables tb;
  tables_init(&tb);
  char *p = list(&tb, v, n, out);
  return n ? (size_t)(p - out) - 1 : 0;
}

/* Row r: '[' at p, its blocks (each text followed by ','), the last ','
 * turned into ']', then ','.  A row starts at most r * (17 cols + 3) bytes
 * into out and its stores end within 17 cols + 3 bytes of its start, as
 * ATTN_F32_ROWS_MAX_CHARS allows.  Rows of up to 16 floats (one block)
 * go 4 or 2 at a time.  One tables_init for all rows. */
TARGET size_t attn__f32_rows_avx512(const float *v, size_t rows, size_t cols,
                                    size_t ld, char *out) {
  tables tb;
  tables_init(&tb);
  char *p = out;
  size_t r = 0;
  if (cols && cols <= 16) {
    unsigned m = (unsigned)cols;
    for (; r + 4 <= rows; r += 4) {
      const float *a = v + r * ld;
      const float *vu[4] = {a, a + ld, a + 2 * ld, a + 3 * ld};
      *p++ = '[';
      p += group4(&tb, vu, m, p, 1) - 1; /* the last row's last ',' */
      *p++ = ']';
      *p++ = ',';
    }
    if (r + 2 <= rows) {
      const float *vu[2] = {v + r * ld, v + (r + 1) * ld};
      *p++ = '[';
      p += group2(&tb, vu, m, p, 1) - 1;
      *p++ = ']';
      *p++ = ',';
      r += 2;
    }
  }
  for (; r < rows; r++) {
    *p++ = '[';
    p = list(&tb, v + r * ld, cols, p);
    if (cols) p--; /* the ',' after the row's last number */
    *p++ = ']';
    *p++ = ',';
  }
  return rows ? (size_t)(p - out) - 1 : 0;
}

#endif /* ATTN__F32_HAVE_AVX512 */
