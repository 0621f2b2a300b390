/* kv_kernels.c - the kernels of attn_kv_attend: one chunk of query rows of
 * one sequence and some of its kv heads against the sequence's blocks
 * (attn__kv_job, internal.h).  AVX-512, AVX2 and portable C, one chosen at
 * start-up.
 *
 * DESIGN
 * Decode is bound by memory: every cached key and value is read once per
 * step and used for two multiply-adds per query head of its group.  So
 * the kernels walk the blocks in order, in each block the job's heads in
 * order (their panels are consecutive: one contiguous read), and for each
 * head take its rows 4 at a time (a tile): one load of a key or value row
 * feeds the tile's 4 rows (a GQA group of 4 is one tile: each key and
 * value is read once), and the head's panel, 2 x 16 x D values, stays in
 * L1 for the tiles.  Per head, block and tile:
 *  - scores: keys are stored [D][16] (kv.h), so a vector load is one dim
 *    of the block's 16 keys; with the query value broadcast, a
 *    multiply-add per dim and row accumulates the 16 scores of a row in
 *    one register (two, even and odd dims, to hide the latency);
 *  - the online softmax per row: scale, softcap and ALiBi (softmax.c's
 *    row passes), the lanes the row cannot see set to -inf, the block's
 *    max, alpha = exp(m_old - m_new) when the max grows, p = exp(s - m),
 *    the 16 lane sums l = l alpha + p; the max is reduced across lanes
 *    only when a lane passes the running one (a compare and a mask test
 *    otherwise: after the first blocks it seldom grows), and a tile whose
 *    rows all keep their max adds o + sum instead of o * 1 + sum (the
 *    same bits, on the adders: the FMA pipes are what bf16 and fp16 are
 *    bound by): +4% on a cache-resident step (B 1, T 1024, 23.0 -> 23.9
 *    GB/s bf16, 23.0 -> 23.7 fp16);
 *  - values: stored [16][D]; for each 16 columns, sum_j p_j v_j over the
 *    block's tokens the tile sees, in registers, then o = o alpha + that
 *    sum (one rounding per block, not per token).
 * The panels two and four ahead are prefetched into L2 along the way
 * (PF_DIST, PF_FAR).  The walk (KV_WALK) keeps a tile's halves apart: a
 * tile's scores and softmax, then the previous tile's values; and an
 * AVX-512 tile of 4 rows that see every lane, whose maxima do not grow,
 * takes its softmax straight-line (update16_x4).  Same bits; bf16 and
 * fp16 +3-4% (+2-3% from memory at B 8, T 4096), fp32's 256-bit code
 * unchanged.
 * Values are widened exactly on load: fp16 by vcvtph2ps; bf16, which kv.h
 * stores in pairs (two dims of a key, two tokens of a value in one 32-bit
 * word), by a shift (the low one) and a mask (the high one): two integer
 * operations for 32 values instead of a widening and a shift for 16,
 * which took bf16 from 21 to 23 GB/s (B 8, T 4096, 1 thread, alternating
 * runs).  So the arithmetic is fp32 for every dtype.  At 4 heads a group
 * that is 4 multiply-adds per key or value read: one core's FMA pipes
 * (one 512-bit FMA a cycle on Zen 4, 3.65 G a second here) cap bf16 and
 * fp16 at ~29 GB/s, and the kernel reaches about 22, below one core's
 * streaming read (~30 GB/s), while fp32 is bound by memory and how well
 * the reads overlap the work.
 * A row's operations and their order depend only on its head's rows, the
 * blocks and the kernel set, never on other heads or units, so results
 * repeat bit for bit.  The portable kernel is the straightforward one:
 * per row, per key, per dim.
 * Stateless but for the kernel choice (a constructor, or tests). */
#include <math.h>
#include <string.h>

#include "internal.h"
#include "vexp.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#include <immintrin.h>
#define ATTN_X86 1
#endif

#define BT ATTN_KV_BLOCK_TOKENS
#define TILE 4 /* rows per tile */

/* The lanes of the block starting at key kb that row r sees. */
static unsigned lane_mask(const attn__kv_job *j, int64_t r, int64_t kb) {
  int64_t a = j->lo[r] - kb, b = j->hi[r] - kb;
  if (a < 0) a = 0;
  if (b > BT - 1) b = BT - 1;
  if (a > b) return 0;
  return ((2u << b) - 1u) & ~((1u << a) - 1u);
}

/* Softcap and ALiBi on the 16 scores of row r in s (already scaled). */
static void score_variants(const attn__kv_job *j, int64_t r, int64_t kb,
                           float *s) {
  if (j->softcap > 0.0f) attn__row_softcap(s, BT, j->softcap);
  if (j->slope) attn__row_alibi(s, BT, j->slope[r], kb - j->pos[r]);
}

static size_t esize(attn_kv_dtype dt) {
  return attn_kv_dtype_size(dt);
}

/* ---- portable ------------------------------------------------------------ */

/* Row r against the block at kp (keys) / vp (values), lanes in mask. */
static void row_scalar(const attn__kv_job *j, int64_t r, int64_t kb,
                       const void *kp, const void *vp, unsigned mask) {
  int64_t D = j->D;
  const float *q = j->q + r * D;
  float s[BT], mx = -INFINITY;
  for (int k = 0; k < BT; k++) {
    float acc = 0.0f;
    for (int64_t c = 0; c < D; c++)
      acc +=
          q[c] * attn__kv_elem(kp, j->dtype, attn_kv_key_index(j->dtype, c, k));
    s[k] = acc * j->scale;
  }
  score_variants(j, r, kb, s);
  for (int k = 0; k < BT; k++) {
    if (!(mask >> k & 1u)) s[k] = -INFINITY;
    mx = s[k] > mx ? s[k] : mx;
  }
  float mo = j->m[r], mn = mx > mo ? mx : mo;
  float alpha = mn > mo ? attn__expf(mo - mn) : 1.0f;
  for (int k = 0; k < BT; k++) {
    s[k] = attn__expf(s[k] - mn);
    j->l[r * BT + k] = j->l[r * BT + k] * alpha + s[k];
  }
  for (int64_t c = 0; c < D; c++) {
    float acc = 0.0f;
    for (int k = 0; k < BT; k++)
      if (mask >> k & 1u)
        acc += s[k] * attn__kv_elem(vp, j->dtype,
                                    attn_kv_value_index(j->dtype, D, k, c));
    j->o[r * D + c] = j->o[r * D + c] * alpha + acc;
  }
  j->m[r] = mn;
}

static void run_scalar(const attn__kv_job *j) {
  for (int64_t blk = j->blk0; blk < j->blk1; blk++)
    for (int64_t h = 0; h < j->nheads; h++) {
      const unsigned char *kp = (const unsigned char *)j->blocks[blk] +
                                j->head_off + (size_t)h * j->panel;
      const unsigned char *vp = kp + j->voff;
      for (int64_t r = h * j->rows; r < (h + 1) * j->rows; r++) {
        unsigned mask = lane_mask(j, r, blk * BT);
        if (mask) row_scalar(j, r, blk * BT, kp, vp, mask);
      }
    }
}

#ifdef ATTN_X86

#define INLINE __attribute__((always_inline)) static inline
#define HI16 ((int)0xFFFF0000u) /* the high bf16 of a pair, as an fp32 */

/* ---- AVX-512 ------------------------------------------------------------- */

#define AVX512 __attribute__((target("avx512f,avx512bw,avx512vl")))
/* Software prefetch: each head's first tile asks for the panel PF_DIST
 * panels ahead in reading order (the heads of a block, then the next
 * block) into L2, spread over the work: its keys a line per 2 (fp32) or
 * 4 (bf16, fp16) dims in the scores loop, its values likewise in the
 * values loop.  One thread, B 8, T 4096, GB/s of keys and values read,
 * fp32 / bf16, on the shared machine: no software prefetch 14.5 / 12;
 * one panel ahead into L1 14-16 / 12-14, into L2 17-19 / 16-20; two
 * ahead into L2 20.5 / 21 (kept); three ahead 18-20 / 18.  Rechecked
 * 2026-12-07 as ratios to the streaming read (B 8, T 4096, 1 thread,
 * fp32 / bf16 / fp16): 2 ahead T1 0.76 / 0.72 / 0.70; 1, 4, 8 ahead the
 * same within noise; T2 the same (T1 and T2 are one hint here); T0
 * 0.52 / 0.55 / 0.49 and NTA 0.49-0.67 (L1 or no L2); none 0.27 / 0.26 /
 * 0.36, and a burst of a whole panel's lines at a head's start (instead
 * of spread over the work) no better than none: the hardware prefetchers
 * do not follow these reads, and a burst of prefetches is mostly
 * dropped.  What helped: asking for every line twice, two panels ahead
 * and again four ahead (PF_FAR; the same spread, twice the prefetches):
 * fp32 0.76 -> 0.85-0.90 (1 thread), bf16 / fp16 within noise (they are
 * bound by the FMA pipes); 1 and 2, 2 and 3, 4 and 1 ahead gave 0.81-0.89
 * for fp32 alike.  Prefetches that find no free miss buffer are dropped
 * and the second request catches most of those.  PF_DIST, PF_FAR and
 * PF_HINT may be set with -D to rerun these. */
#ifndef PF_DIST
#define PF_DIST 2
#endif
#ifndef PF_HINT
#define PF_HINT _MM_HINT_T1
#endif

#ifndef PF_FAR
#define PF_FAR 4
#endif

/* Where a tile's prefetches go: the panels PF_DIST and PF_FAR ahead (NULL
 * past the end, and then far is too); near NULL: none. */
typedef struct kv_pf {
  const char *near, *far;
} kv_pf;

static const kv_pf KV_PF_NONE = {NULL, NULL};

/* The panel dist after head h of block blk, or NULL past the end. */
static const char *panel_ahead(const attn__kv_job *j, int64_t blk, int64_t h,
                               int64_t dist) {
  int64_t ph = h + dist, pb = blk + ph / j->nheads;
  if (pb >= j->blk1) return NULL;
  return (const char *)j->blocks[pb] + j->head_off +
         (size_t)(ph % j->nheads) * j->panel;
}

static kv_pf prefetch_panels(const attn__kv_job *j, int64_t blk, int64_t h) {
  kv_pf p = {panel_ahead(j, blk, h, PF_DIST), NULL};
  if (p.near) p.far = panel_ahead(j, blk, h, PF_FAR);
  return p;
}

/* The same bytes further on in both panels (a panel's values: voff). */
static kv_pf pf_at(kv_pf p, size_t off) {
  return p.near ? (kv_pf){p.near + off, p.far ? p.far + off : NULL} : p;
}

/* Line off of both panels (near is not NULL).  A macro: as a static
 * inline function, GCC 12 -O3 dropped every prefetch of the AVX-512 and
 * AVX2 kernels it was inlined into. */
#define pf_line(p, off)                                  \
  do {                                                   \
    _mm_prefetch((p).near + (off), PF_HINT);             \
    if ((p).far) _mm_prefetch((p).far + (off), PF_HINT); \
  } while (0)

/* A tile between its halves: scores and softmax done (its probabilities
 * in p), its values to come. */
typedef struct kv_half {
  const unsigned char *kp;
  kv_pf pf;
  int64_t r0;
  int R, jlo, jhi, rescale, on;
  float alpha[TILE];
  float *p;
} kv_half;

/* Call f(..., R) with R the literal 4, 3, 2 or 1 for n rows (4: n >= 4),
 * so that each inlines its own tile size. */
#define KV_BY_ROWS(n, f, ...) \
  do {                        \
    if ((n) >= 4)             \
      f(__VA_ARGS__, 4);      \
    else if ((n) == 3)        \
      f(__VA_ARGS__, 3);      \
    else if ((n) == 2)        \
      f(__VA_ARGS__, 2);      \
    else                      \
      f(__VA_ARGS__, 1);      \
  } while (0)

/* A job's walk, for a kernel set's halves of a tile: the blocks in order,
 * in each the heads in order (their panels are one contiguous read), each
 * head's rows a tile at a time (4 rows, then what is left); the first
 * tile of a head prefetches the panels PF_DIST and PF_FAR ahead.  A
 * tile's halves are kept apart: its scores and softmax
 * (scores(j, kp, kb, r0, pf, t, R) into t), then the previous tile's
 * values (values(j, t, R)): other rows, or the same rows' previous block,
 * so that the softmax's chain has independent multiply-adds behind it.
 * Each row's operations and their order are those of scores, softmax,
 * values block by block: the same bits as a tile at a time.  With
 * update16_x4, bf16 and fp16 +3-4% (B 1, T 2048, cache-resident, 1
 * thread: 24.0 -> 24.6 and 23.2 -> 24.2 GB/s, medians of 8 alternating
 * runs); fp32 (256 bits) the same within 1% (36.6 and 36.5 GB/s).  A
 * macro so that each set inlines its own halves under its own target. */
#define KV_WALK(j, scores, values)                                          \
  do {                                                                      \
    kv_half half_[2];                                                       \
    int cur_ = 0;                                                           \
    half_[0].on = half_[1].on = 0;                                          \
    half_[0].p = (j)->pbuf;                                                 \
    half_[1].p = (j)->pbuf + TILE * BT;                                     \
    for (int64_t blk = (j)->blk0; blk < (j)->blk1; blk++)                   \
      for (int64_t h = 0; h < (j)->nheads; h++) {                           \
        const unsigned char *kp = (const unsigned char *)(j)->blocks[blk] + \
                                  (j)->head_off + (size_t)h * (j)->panel;   \
        kv_pf pf = prefetch_panels((j), blk, h);                            \
        int64_t end = (h + 1) * (j)->rows;                                  \
        for (int64_t r0 = h * (j)->rows; r0 < end;                          \
             r0 += TILE, pf = KV_PF_NONE) {                                 \
          KV_BY_ROWS(end - r0, scores, (j), kp, blk * BT, r0, pf,           \
                     &half_[cur_]);                                         \
          cur_ ^= 1;                                                        \
          if (half_[cur_].on)                                               \
            KV_BY_ROWS(half_[cur_].R, values, (j), &half_[cur_]);           \
        }                                                                   \
      }                                                                     \
    if (half_[cur_ ^ 1].on)                                                 \
      KV_BY_ROWS(half_[cur_ ^ 1].R, values, (j), &half_[cur_ ^ 1]);         \
  } while (0)

AVX512 INLINE __m512 ld16(const unsigned char *p, attn_kv_dtype dt) {
  if (dt == ATTN_KV_FP32) return _mm512_loadu_ps(p);
  __m256i h = _mm256_loadu_si256((const __m256i *)p);
  if (dt == ATTN_KV_BF16)
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  return _mm512_cvtph_ps(h);
}

AVX512 INLINE __m512 ld16_mask(const unsigned char *p, attn_kv_dtype dt,
                               __mmask16 k) {
  if (dt == ATTN_KV_FP32) return _mm512_maskz_loadu_ps(k, p);
  __m256i h = _mm256_maskz_loadu_epi16(k, p);
  if (dt == ATTN_KV_BF16)
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  return _mm512_cvtph_ps(h);
}

/* s[r] = the 16 scores of rows q[r] (unscaled), r < R. */
AVX512 INLINE void scores16(const unsigned char *kp, const float *q, int64_t D,
                            int R, attn_kv_dtype dt, __m512 *s, kv_pf pf) {
  size_t step = BT * esize(dt), e = esize(dt);
  __m512 a[TILE], b[TILE];
  for (int r = 0; r < R; r++) a[r] = b[r] = _mm512_setzero_ps();
  int64_t d = 0;
  for (; d + 2 <= D; d += 2) {
    __m512 k0, k1;
    if (dt == ATTN_KV_BF16) { /* dims d and d + 1 side by side (kv.h) */
      __m512i x = _mm512_loadu_si512(kp + (size_t)d * step);
      k0 = _mm512_castsi512_ps(_mm512_slli_epi32(x, 16));
      k1 = _mm512_castsi512_ps(_mm512_and_si512(x, _mm512_set1_epi32(HI16)));
    } else {
      k0 = ld16(kp + (size_t)d * step, dt);
      k1 = ld16(kp + (size_t)(d + 1) * step, dt);
    }
    if (pf.near)
      for (size_t k = 0; k < e / 2; k++)
        pf_line(pf, ((size_t)d / 2 * (e / 2) + k) * 64);
    for (int r = 0; r < R; r++) {
      a[r] = _mm512_fmadd_ps(_mm512_set1_ps(q[r * D + d]), k0, a[r]);
      b[r] = _mm512_fmadd_ps(_mm512_set1_ps(q[r * D + d + 1]), k1, b[r]);
    }
  }
  if (d < D) {
    __m512 k0 = dt == ATTN_KV_BF16
                    ? _mm512_castsi512_ps(_mm512_slli_epi32(
                          _mm512_loadu_si512(kp + (size_t)d * step), 16))
                    : ld16(kp + (size_t)d * step, dt);
    for (int r = 0; r < R; r++)
      a[r] = _mm512_fmadd_ps(_mm512_set1_ps(q[r * D + d]), k0, a[r]);
  }
  for (int r = 0; r < R; r++) s[r] = _mm512_add_ps(a[r], b[r]);
}

/* The online softmax of row r for this block; p (16 floats) gets the
 * probabilities, the return value is alpha. */
AVX512 INLINE float update16(const attn__kv_job *j, int64_t r, int64_t kb,
                             __m512 x, unsigned mask, float *p) {
  x = _mm512_mul_ps(x, _mm512_set1_ps(j->scale));
  if (j->softcap > 0.0f || j->slope) {
    float *tmp = j->pbuf + 2 * TILE * BT;
    _mm512_storeu_ps(tmp, x);
    score_variants(j, r, kb, tmp);
    x = _mm512_loadu_ps(tmp);
  }
  x = _mm512_mask_blend_ps((__mmask16)mask, _mm512_set1_ps(-INFINITY), x);
  float mo = j->m[r], mn = mo, alpha = 1.0f, *l = j->l + r * BT;
  /* The max grows only when a lane passes it: then (and only then) the
   * reduction, alpha and the rescaled sums; otherwise l + p, which is
   * l * 1 + p rounded alike. */
  if (_mm512_cmp_ps_mask(x, _mm512_set1_ps(mo), _CMP_GT_OQ)) {
    mn = _mm512_reduce_max_ps(x);
    alpha = attn__expf(mo - mn);
  }
  __m512 pv = attn__exp16(_mm512_sub_ps(x, _mm512_set1_ps(mn)));
  if (alpha != 1.0f)
    _mm512_storeu_ps(
        l, _mm512_fmadd_ps(_mm512_loadu_ps(l), _mm512_set1_ps(alpha), pv));
  else
    _mm512_storeu_ps(l, _mm512_add_ps(_mm512_loadu_ps(l), pv));
  _mm512_storeu_ps(p, pv);
  j->m[r] = mn;
  return alpha;
}

/* o alpha + a; o + a when no row of the tile rescales (rescale 0, every
 * alpha 1: the same bits, on the adders instead of the FMA pipes). */
AVX512 INLINE __m512 oupd16(__m512 o, float alpha, __m512 a, int rescale) {
  return rescale ? _mm512_fmadd_ps(o, _mm512_set1_ps(alpha), a)
                 : _mm512_add_ps(o, a);
}

/* Columns [c, c + 16) of the tile's outputs (lanes in k): o = o alpha +
 * sum over tokens jlo..jhi of p_j v_j.  16 columns a pass, not 32 (a
 * pass then reads one line of each fp32 value row: 21 GB/s against 20
 * with two lines, B 8, T 4096, measured before fp32 moved to the 256-bit
 * code; kept for fp16). */
AVX512 INLINE void vals16(const unsigned char *vp, int64_t D, int R,
                          attn_kv_dtype dt, const float *pb, const float *alpha,
                          float *o, int jlo, int jhi, int64_t c, __mmask16 k,
                          kv_pf pf, int rescale) {
  size_t e = esize(dt);
  int full = k == 0xFFFF;
  __m512 a[TILE];
  for (int r = 0; r < R; r++) a[r] = _mm512_setzero_ps();
  for (int jj = jlo; jj <= jhi; jj++) {
    const unsigned char *row = vp + ((size_t)jj * (size_t)D + (size_t)c) * e;
    __m512 v = full ? ld16(row, dt) : ld16_mask(row, dt, k);
    size_t it = (size_t)c + (size_t)jj; /* (c / 16) * 16 + jj */
    if (pf.near && it * e % 4 == 0) pf_line(pf, it * e / 4 * 64);
    for (int r = 0; r < R; r++)
      a[r] = _mm512_fmadd_ps(_mm512_set1_ps(pb[r * BT + jj]), v, a[r]);
  }
  for (int r = 0; r < R; r++) {
    float *orow = o + r * D + c;
    if (full)
      _mm512_storeu_ps(orow,
                       oupd16(_mm512_loadu_ps(orow), alpha[r], a[r], rescale));
    else
      _mm512_mask_storeu_ps(
          orow, k,
          oupd16(_mm512_maskz_loadu_ps(k, orow), alpha[r], a[r], rescale));
  }
}

/* vals16 for bf16 values, stored in token pairs (kv.h): one load is 16
 * columns of tokens 2 jp and 2 jp + 1; a token outside jlo..jhi that
 * shares a pair has p = 0 (its lane was masked) and a finite value. */
AVX512 INLINE void vals16_pairs(const unsigned char *vp, int64_t D, int R,
                                const float *pb, const float *alpha, float *o,
                                int jlo, int jhi, int64_t c, __mmask16 k,
                                kv_pf pf, int rescale) {
  int full = k == 0xFFFF;
  __m512 a[TILE], b[TILE];
  for (int r = 0; r < R; r++) a[r] = b[r] = _mm512_setzero_ps();
  for (int jp = jlo / 2; jp <= jhi / 2; jp++) {
    const unsigned char *row = vp + ((size_t)jp * (size_t)D + (size_t)c) * 4;
    __m512i x =
        full ? _mm512_loadu_si512(row) : _mm512_maskz_loadu_epi32(k, row);
    __m512 v0 = _mm512_castsi512_ps(_mm512_slli_epi32(x, 16));
    __m512 v1 =
        _mm512_castsi512_ps(_mm512_and_si512(x, _mm512_set1_epi32(HI16)));
    if (pf.near) pf_line(pf, ((size_t)c / 16 * 8 + (size_t)jp) * 64);
    for (int r = 0; r < R; r++) {
      a[r] = _mm512_fmadd_ps(_mm512_set1_ps(pb[r * BT + 2 * jp]), v0, a[r]);
      b[r] = _mm512_fmadd_ps(_mm512_set1_ps(pb[r * BT + 2 * jp + 1]), v1, b[r]);
    }
  }
  for (int r = 0; r < R; r++) {
    float *orow = o + r * D + c;
    __m512 sum = _mm512_add_ps(a[r], b[r]);
    if (full)
      _mm512_storeu_ps(orow,
                       oupd16(_mm512_loadu_ps(orow), alpha[r], sum, rescale));
    else
      _mm512_mask_storeu_ps(
          orow, k,
          oupd16(_mm512_maskz_loadu_ps(k, orow), alpha[r], sum, rescale));
  }
}

/* Every column of the tile's outputs, 16 at a time. */
AVX512 INLINE void values16(const unsigned char *vp, int64_t D, int R,
                            attn_kv_dtype dt, const float *pb,
                            const float *alpha, float *o, int jlo, int jhi,
                            kv_pf vpf, int rescale) {
  int64_t c = 0;
  for (; c + 16 <= D; c += 16)
    if (dt == ATTN_KV_BF16)
      vals16_pairs(vp, D, R, pb, alpha, o, jlo, jhi, c, 0xFFFF, vpf, rescale);
    else
      vals16(vp, D, R, dt, pb, alpha, o, jlo, jhi, c, 0xFFFF, vpf, rescale);
  __mmask16 k = (__mmask16)((1u << (D - c)) - 1u);
  if (c < D && dt == ATTN_KV_BF16)
    vals16_pairs(vp, D, R, pb, alpha, o, jlo, jhi, c, k, KV_PF_NONE, rescale);
  else if (c < D)
    vals16(vp, D, R, dt, pb, alpha, o, jlo, jhi, c, k, KV_PF_NONE, rescale);
}

/* update16 for the 4 rows of a tile that all see every lane, without
 * softcap or ALiBi, when no row's max grows (after the first blocks,
 * nearly always): the same operations as update16 (its blend is then the
 * identity, alpha 1, l + p), straight-line for the 4 rows instead of a
 * row at a time.  0, having changed nothing, when a max grows. */
AVX512 INLINE int update16_x4(const attn__kv_job *j, int64_t r0,
                              const __m512 *s, float *p) {
  const __m512 sc = _mm512_set1_ps(j->scale);
  __m512 x[TILE], mv[TILE];
  __mmask16 grow = 0;
  for (int r = 0; r < TILE; r++) {
    x[r] = _mm512_mul_ps(s[r], sc);
    mv[r] = _mm512_set1_ps(j->m[r0 + r]);
    grow |= _mm512_cmp_ps_mask(x[r], mv[r], _CMP_GT_OQ);
  }
  if (grow) return 0;
  for (int r = 0; r < TILE; r++) {
    __m512 pv = attn__exp16(_mm512_sub_ps(x[r], mv[r]));
    float *l = j->l + (r0 + r) * BT;
    _mm512_storeu_ps(l, _mm512_add_ps(_mm512_loadu_ps(l), pv));
    _mm512_storeu_ps(p + r * BT, pv);
  }
  return 1;
}

/* Rows [r0, r0 + R) against one block, the first half: scores and the
 * online softmax into t (KV_WALK). */
AVX512 INLINE void tile16_scores(const attn__kv_job *j, const unsigned char *kp,
                                 int64_t kb, int64_t r0, kv_pf pf, kv_half *t,
                                 int R, attn_kv_dtype dt) {
  unsigned mask[TILE], any = 0;
  for (int r = 0; r < R; r++) any |= mask[r] = lane_mask(j, r0 + r, kb);
  t->on = any != 0;
  if (!any) return;
  int64_t D = j->D;
  __m512 s[TILE];
  scores16(kp, j->q + r0 * D, D, R, dt, s, pf);
  t->kp = kp, t->pf = pf, t->r0 = r0, t->R = R;
  t->jlo = __builtin_ctz(any), t->jhi = 31 - __builtin_clz(any);
  t->rescale = 0;
  for (int r = 0; r < R; r++) t->alpha[r] = 1.0f;
  if (R == TILE && (mask[0] & mask[1] & mask[2] & mask[3]) == 0xFFFFu &&
      !(j->softcap > 0.0f) && !j->slope && update16_x4(j, r0, s, t->p))
    return;
  for (int r = 0; r < R; r++) {
    if (mask[r])
      t->alpha[r] = update16(j, r0 + r, kb, s[r], mask[r], t->p + r * BT);
    else
      _mm512_storeu_ps(t->p + r * BT, _mm512_setzero_ps());
    t->rescale |= t->alpha[r] != 1.0f;
  }
}

/* The second half: the values. */
AVX512 INLINE void tile16_values(const attn__kv_job *j, const kv_half *t, int R,
                                 attn_kv_dtype dt) {
  int64_t D = j->D;
  const unsigned char *vp = t->kp + j->voff;
  kv_pf vpf = pf_at(t->pf, j->voff);
  float *o = j->o + t->r0 * D;
  if (t->rescale)
    values16(vp, D, R, dt, t->p, t->alpha, o, t->jlo, t->jhi, vpf, 1);
  else
    values16(vp, D, R, dt, t->p, t->alpha, o, t->jlo, t->jhi, vpf, 0);
}

#define BF16_SCORES16(...) tile16_scores(__VA_ARGS__, ATTN_KV_BF16)
#define BF16_VALUES16(...) tile16_values(__VA_ARGS__, ATTN_KV_BF16)
#define FP16_SCORES16(...) tile16_scores(__VA_ARGS__, ATTN_KV_FP16)
#define FP16_VALUES16(...) tile16_values(__VA_ARGS__, ATTN_KV_FP16)

AVX512 static void run512(const attn__kv_job *j) {
  if (j->dtype == ATTN_KV_BF16)
    KV_WALK(j, BF16_SCORES16, BF16_VALUES16);
  else
    KV_WALK(j, FP16_SCORES16, FP16_VALUES16);
}

/* ---- AVX2 ---------------------------------------------------------------- */

#define AVX2 __attribute__((target("avx2,fma,f16c")))

AVX2 INLINE __m256 ld8(const unsigned char *p, attn_kv_dtype dt) {
  if (dt == ATTN_KV_FP32) return _mm256_loadu_ps((const float *)p);
  __m128i h = _mm_loadu_si128((const __m128i *)p);
  if (dt == ATTN_KV_BF16)
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  return _mm256_cvtph_ps(h);
}

/* scores8's loop for bf16 keys, stored in dim pairs (kv.h): one load is
 * dims d and d + 1 of 8 keys, added in that order. */
AVX2 INLINE void scores8_pairs(const unsigned char *kp, const float *q,
                               int64_t D, int R, __m256 *s, kv_pf pf) {
  const __m256i hi = _mm256_set1_epi32(HI16);
  for (int64_t d = 0; d < D; d += 2) {
    const unsigned char *p = kp + (size_t)d * BT * 2;
    __m256i x0 = _mm256_loadu_si256((const __m256i *)p);
    __m256i x1 = _mm256_loadu_si256((const __m256i *)(p + 32));
    __m256 a0 = _mm256_castsi256_ps(_mm256_slli_epi32(x0, 16));
    __m256 a1 = _mm256_castsi256_ps(_mm256_slli_epi32(x1, 16));
    __m256 b0 = _mm256_castsi256_ps(_mm256_and_si256(x0, hi));
    __m256 b1 = _mm256_castsi256_ps(_mm256_and_si256(x1, hi));
    if (pf.near) pf_line(pf, (size_t)d / 2 * 64);
    for (int r = 0; r < R; r++) {
      __m256 qa = _mm256_set1_ps(q[r * D + d]);
      s[2 * r] = _mm256_fmadd_ps(qa, a0, s[2 * r]);
      s[2 * r + 1] = _mm256_fmadd_ps(qa, a1, s[2 * r + 1]);
      if (d + 1 == D) continue; /* odd D: the partner is padding */
      __m256 qb = _mm256_set1_ps(q[r * D + d + 1]);
      s[2 * r] = _mm256_fmadd_ps(qb, b0, s[2 * r]);
      s[2 * r + 1] = _mm256_fmadd_ps(qb, b1, s[2 * r + 1]);
    }
  }
}

/* s[2r], s[2r + 1] = lanes 0-7 and 8-15 of row r's scores (unscaled). */
AVX2 INLINE void scores8(const unsigned char *kp, const float *q, int64_t D,
                         int R, attn_kv_dtype dt, __m256 *s, kv_pf pf) {
  size_t step = BT * esize(dt), e = esize(dt);
  for (int r = 0; r < 2 * R; r++) s[r] = _mm256_setzero_ps();
  if (dt == ATTN_KV_BF16) {
    scores8_pairs(kp, q, D, R, s, pf);
    return;
  }
  for (int64_t d = 0; d < D; d++) {
    __m256 k0 = ld8(kp + (size_t)d * step, dt);
    __m256 k1 = ld8(kp + (size_t)d * step + step / 2, dt);
    if (pf.near && (size_t)d * e % 4 == 0) pf_line(pf, (size_t)d * e / 4 * 64);
    for (int r = 0; r < R; r++) {
      __m256 qd = _mm256_set1_ps(q[r * D + d]);
      s[2 * r] = _mm256_fmadd_ps(qd, k0, s[2 * r]);
      s[2 * r + 1] = _mm256_fmadd_ps(qd, k1, s[2 * r + 1]);
    }
  }
}

AVX2 INLINE __m256 lanes8(unsigned bits) {
  const __m256i pick = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
  __m256i v = _mm256_and_si256(_mm256_set1_epi32((int)bits), pick);
  return _mm256_castsi256_ps(_mm256_cmpeq_epi32(v, pick));
}

AVX2 INLINE float hmax8(__m256 m) {
  __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
  h = _mm_max_ps(h, _mm_movehl_ps(h, h));
  h = _mm_max_ss(h, _mm_movehdup_ps(h));
  return _mm_cvtss_f32(h);
}

/* As update16, for the two halves x0, x1 of row r's scores. */
AVX2 INLINE float update8(const attn__kv_job *j, int64_t r, int64_t kb,
                          __m256 x0, __m256 x1, unsigned mask, float *p) {
  const __m256 sc = _mm256_set1_ps(j->scale), ninf = _mm256_set1_ps(-INFINITY);
  x0 = _mm256_mul_ps(x0, sc);
  x1 = _mm256_mul_ps(x1, sc);
  if (j->softcap > 0.0f || j->slope) {
    float *tmp = j->pbuf + 2 * TILE * BT;
    _mm256_storeu_ps(tmp, x0);
    _mm256_storeu_ps(tmp + 8, x1);
    score_variants(j, r, kb, tmp);
    x0 = _mm256_loadu_ps(tmp);
    x1 = _mm256_loadu_ps(tmp + 8);
  }
  x0 = _mm256_blendv_ps(ninf, x0, lanes8(mask & 0xFFu));
  x1 = _mm256_blendv_ps(ninf, x1, lanes8(mask >> 8));
  float mo = j->m[r], mn = mo, alpha = 1.0f, *l = j->l + r * BT;
  __m256 mov = _mm256_set1_ps(mo); /* as update16: reduce when it grows */
  if (_mm256_movemask_ps(_mm256_or_ps(_mm256_cmp_ps(x0, mov, _CMP_GT_OQ),
                                      _mm256_cmp_ps(x1, mov, _CMP_GT_OQ)))) {
    mn = hmax8(_mm256_max_ps(x0, x1));
    alpha = attn__expf(mo - mn);
  }
  __m256 p0 = attn__exp8(_mm256_sub_ps(x0, _mm256_set1_ps(mn)));
  __m256 p1 = attn__exp8(_mm256_sub_ps(x1, _mm256_set1_ps(mn)));
  if (alpha != 1.0f) {
    __m256 al = _mm256_set1_ps(alpha);
    _mm256_storeu_ps(l, _mm256_fmadd_ps(_mm256_loadu_ps(l), al, p0));
    _mm256_storeu_ps(l + 8, _mm256_fmadd_ps(_mm256_loadu_ps(l + 8), al, p1));
  } else {
    _mm256_storeu_ps(l, _mm256_add_ps(_mm256_loadu_ps(l), p0));
    _mm256_storeu_ps(l + 8, _mm256_add_ps(_mm256_loadu_ps(l + 8), p1));
  }
  _mm256_storeu_ps(p, p0);
  _mm256_storeu_ps(p + 8, p1);
  j->m[r] = mn;
  return alpha;
}

/* Columns [c, c + 8 w) (w = 1 or 2) as vals16 (AVX-512). */
AVX2 INLINE void vals8(const unsigned char *vp, int64_t D, int R,
                       attn_kv_dtype dt, const float *pb, const float *alpha,
                       float *o, int jlo, int jhi, int64_t c, int w, kv_pf pf) {
  size_t e = esize(dt);
  __m256 a0[TILE], a1[TILE];
  for (int r = 0; r < R; r++) a0[r] = a1[r] = _mm256_setzero_ps();
  for (int jj = jlo; jj <= jhi; jj++) {
    const unsigned char *row = vp + ((size_t)jj * (size_t)D + (size_t)c) * e;
    __m256 v0 = ld8(row, dt), v1 = w == 2 ? ld8(row + 8 * e, dt) : v0;
    size_t it = (size_t)c + (size_t)jj; /* (c / 16) * 16 + jj */
    if (pf.near && it * e % 4 == 0) pf_line(pf, it * e / 4 * 64);
    for (int r = 0; r < R; r++) {
      __m256 pj = _mm256_set1_ps(pb[r * BT + jj]);
      a0[r] = _mm256_fmadd_ps(pj, v0, a0[r]);
      if (w == 2) a1[r] = _mm256_fmadd_ps(pj, v1, a1[r]);
    }
  }
  for (int r = 0; r < R; r++) {
    float *orow = o + r * D + c;
    __m256 al = _mm256_set1_ps(alpha[r]);
    _mm256_storeu_ps(orow, _mm256_fmadd_ps(_mm256_loadu_ps(orow), al, a0[r]));
    if (w == 2)
      _mm256_storeu_ps(orow + 8,
                       _mm256_fmadd_ps(_mm256_loadu_ps(orow + 8), al, a1[r]));
  }
}

/* vals8 for bf16 values, stored in token pairs (kv.h), as vals16_pairs:
 * tokens 2 jp and 2 jp + 1 added in that order. */
AVX2 INLINE void vals8_pairs(const unsigned char *vp, int64_t D, int R,
                             const float *pb, const float *alpha, float *o,
                             int jlo, int jhi, int64_t c, int w, kv_pf pf) {
  const __m256i hi = _mm256_set1_epi32(HI16);
  __m256 a0[TILE], a1[TILE];
  for (int r = 0; r < R; r++) a0[r] = a1[r] = _mm256_setzero_ps();
  for (int jp = jlo / 2; jp <= jhi / 2; jp++) {
    const unsigned char *row = vp + ((size_t)jp * (size_t)D + (size_t)c) * 4;
    __m256i x0 = _mm256_loadu_si256((const __m256i *)row);
    __m256i x1 = w == 2 ? _mm256_loadu_si256((const __m256i *)(row + 32)) : x0;
    __m256 e0 = _mm256_castsi256_ps(_mm256_slli_epi32(x0, 16));
    __m256 o0 = _mm256_castsi256_ps(_mm256_and_si256(x0, hi));
    __m256 e1 = _mm256_castsi256_ps(_mm256_slli_epi32(x1, 16));
    __m256 o1 = _mm256_castsi256_ps(_mm256_and_si256(x1, hi));
    if (pf.near) pf_line(pf, ((size_t)c / 16 * 8 + (size_t)jp) * 64);
    for (int r = 0; r < R; r++) {
      __m256 pe = _mm256_set1_ps(pb[r * BT + 2 * jp]);
      __m256 po = _mm256_set1_ps(pb[r * BT + 2 * jp + 1]);
      a0[r] = _mm256_fmadd_ps(po, o0, _mm256_fmadd_ps(pe, e0, a0[r]));
      if (w == 2)
        a1[r] = _mm256_fmadd_ps(po, o1, _mm256_fmadd_ps(pe, e1, a1[r]));
    }
  }
  for (int r = 0; r < R; r++) {
    float *orow = o + r * D + c;
    __m256 al = _mm256_set1_ps(alpha[r]);
    _mm256_storeu_ps(orow, _mm256_fmadd_ps(_mm256_loadu_ps(orow), al, a0[r]));
    if (w == 2)
      _mm256_storeu_ps(orow + 8,
                       _mm256_fmadd_ps(_mm256_loadu_ps(orow + 8), al, a1[r]));
  }
}

/* The last D % 8 columns, one at a time. */
static void values_tail(const unsigned char *vp, int64_t D, int R,
                        attn_kv_dtype dt, const float *pb, const float *alpha,
                        float *o, int jlo, int jhi, int64_t c0) {
  for (int r = 0; r < R; r++)
    for (int64_t c = c0; c < D; c++) {
      float acc = 0.0f;
      for (int jj = jlo; jj <= jhi; jj++)
        acc += pb[r * BT + jj] *
               attn__kv_elem(vp, dt, attn_kv_value_index(dt, D, jj, c));
      o[r * D + c] = o[r * D + c] * alpha[r] + acc;
    }
}

/* update8 for a full 4-row tile, as update16_x4 (the same operations as
 * update8 there). */
AVX2 INLINE int update8_x4(const attn__kv_job *j, int64_t r0, const __m256 *s,
                           float *p) {
  const __m256 sc = _mm256_set1_ps(j->scale);
  __m256 x[2 * TILE], mv[TILE], grow = _mm256_setzero_ps();
  for (int r = 0; r < TILE; r++) {
    x[2 * r] = _mm256_mul_ps(s[2 * r], sc);
    x[2 * r + 1] = _mm256_mul_ps(s[2 * r + 1], sc);
    mv[r] = _mm256_set1_ps(j->m[r0 + r]);
    grow = _mm256_or_ps(grow, _mm256_cmp_ps(x[2 * r], mv[r], _CMP_GT_OQ));
    grow = _mm256_or_ps(grow, _mm256_cmp_ps(x[2 * r + 1], mv[r], _CMP_GT_OQ));
  }
  if (_mm256_movemask_ps(grow)) return 0;
  for (int r = 0; r < TILE; r++) {
    __m256 p0 = attn__exp8(_mm256_sub_ps(x[2 * r], mv[r]));
    __m256 p1 = attn__exp8(_mm256_sub_ps(x[2 * r + 1], mv[r]));
    float *l = j->l + (r0 + r) * BT;
    _mm256_storeu_ps(l, _mm256_add_ps(_mm256_loadu_ps(l), p0));
    _mm256_storeu_ps(l + 8, _mm256_add_ps(_mm256_loadu_ps(l + 8), p1));
    _mm256_storeu_ps(p + r * BT, p0);
    _mm256_storeu_ps(p + r * BT + 8, p1);
  }
  return 1;
}

/* Rows [r0, r0 + R) against one block, the first half: scores and the
 * online softmax into t (KV_WALK). */
AVX2 INLINE void tile8_scores(const attn__kv_job *j, const unsigned char *kp,
                              int64_t kb, int64_t r0, kv_pf pf, kv_half *t,
                              int R, attn_kv_dtype dt) {
  unsigned mask[TILE], any = 0;
  for (int r = 0; r < R; r++) any |= mask[r] = lane_mask(j, r0 + r, kb);
  t->on = any != 0;
  if (!any) return;
  int64_t D = j->D;
  __m256 s[2 * TILE];
  scores8(kp, j->q + r0 * D, D, R, dt, s, pf);
  t->kp = kp, t->pf = pf, t->r0 = r0, t->R = R;
  t->jlo = __builtin_ctz(any), t->jhi = 31 - __builtin_clz(any);
  for (int r = 0; r < R; r++) t->alpha[r] = 1.0f;
  if (R == TILE && (mask[0] & mask[1] & mask[2] & mask[3]) == 0xFFFFu &&
      !(j->softcap > 0.0f) && !j->slope && update8_x4(j, r0, s, t->p))
    return;
  for (int r = 0; r < R; r++) {
    if (mask[r])
      t->alpha[r] = update8(j, r0 + r, kb, s[2 * r], s[2 * r + 1], mask[r],
                            t->p + r * BT);
    else
      memset(t->p + r * BT, 0, BT * sizeof(float));
  }
}

/* The second half: the values. */
AVX2 INLINE void tile8_values(const attn__kv_job *j, const kv_half *t, int R,
                              attn_kv_dtype dt) {
  int64_t D = j->D, c = 0;
  int jlo = t->jlo, jhi = t->jhi;
  const unsigned char *vp = t->kp + j->voff;
  kv_pf vpf = pf_at(t->pf, j->voff);
  const float *p = t->p, *alpha = t->alpha;
  float *o = j->o + t->r0 * D;
  for (; c + 16 <= D; c += 16)
    if (dt == ATTN_KV_BF16)
      vals8_pairs(vp, D, R, p, alpha, o, jlo, jhi, c, 2, vpf);
    else
      vals8(vp, D, R, dt, p, alpha, o, jlo, jhi, c, 2, vpf);
  if (c + 8 <= D) {
    if (dt == ATTN_KV_BF16)
      vals8_pairs(vp, D, R, p, alpha, o, jlo, jhi, c, 1, KV_PF_NONE);
    else
      vals8(vp, D, R, dt, p, alpha, o, jlo, jhi, c, 1, KV_PF_NONE);
    c += 8;
  }
  if (c < D) values_tail(vp, D, R, dt, p, alpha, o, jlo, jhi, c);
}

#define FP32_SCORES8(...) tile8_scores(__VA_ARGS__, ATTN_KV_FP32)
#define FP32_VALUES8(...) tile8_values(__VA_ARGS__, ATTN_KV_FP32)
#define BF16_SCORES8(...) tile8_scores(__VA_ARGS__, ATTN_KV_BF16)
#define BF16_VALUES8(...) tile8_values(__VA_ARGS__, ATTN_KV_BF16)
#define FP16_SCORES8(...) tile8_scores(__VA_ARGS__, ATTN_KV_FP16)
#define FP16_VALUES8(...) tile8_values(__VA_ARGS__, ATTN_KV_FP16)

AVX2 static void run_avx2(const attn__kv_job *j) {
  if (j->dtype == ATTN_KV_FP32)
    KV_WALK(j, FP32_SCORES8, FP32_VALUES8);
  else if (j->dtype == ATTN_KV_BF16)
    KV_WALK(j, BF16_SCORES8, BF16_VALUES8);
  else
    KV_WALK(j, FP16_SCORES8, FP16_VALUES8);
}
/* The AVX-512 set: 512-bit kernels for bf16 and fp16, the 256-bit ones for
 * fp32, which read fp32 blocks faster on Zen 4: B 8, T 4096, 1 thread,
 * the two alternating in one process, 3 runs of 20 calls, medians 21.3,
 * 21.1, 23.2 GB/s against 18.2, 19.5, 20.2 with 512 bits (bf16: 512 bits
 * 19.8, 19.7, 19.9 against 19.0, 18.9, 18.8).  Why the 512-bit fp32 loop
 * is slower was not found (no performance counters in this VM).  With the
 * blocks in cache it is the other way (2026-12-07, B 1, 1 thread, CPU
 * time): 512 bits 41, 44, 42 GB/s at T 256, 1024, 4096 against 36.7,
 * 39, 37 (repeated calls), but from memory 19, 23.7, 24.6 against 20.5,
 * 25.2, 26.6 (96 MiB read between calls).  Not chosen by T: whether a
 * step's blocks are in cache depends on the whole step and what ran
 * before (a model's other layers), not on one sequence's length, and a
 * choice by the batch would break batch invariance. */
static void run_avx512(const attn__kv_job *j) {
  if (j->dtype == ATTN_KV_FP32)
    run_avx2(j);
  else
    run512(j);
}
#endif /* ATTN_X86 */

/* ---- the choice ---------------------------------------------------------- */

typedef struct kv_kernel {
  const char *name;
  void (*run)(const attn__kv_job *);
} kv_kernel;

static const kv_kernel kernels[] = {
#ifdef ATTN_X86
    {"avx512", run_avx512},
    {"avx2", run_avx2},
#endif
    {"scalar", run_scalar},
};
#define NKERNELS (sizeof kernels / sizeof kernels[0])

static const kv_kernel *active = &kernels[NKERNELS - 1];

#ifdef ATTN_X86
/* F16C from CPUID leaf 1 (ECX bit 29): clang 14's __builtin_cpu_supports
 * knows no "f16c" (the fuzz build, CC=clang, failed on it). */
static int has_f16c(void) {
  unsigned a, b, c, d;
  return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C) != 0;
}
#endif

static int supported(const kv_kernel *k) {
#ifdef ATTN_X86
  __builtin_cpu_init();
  int avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
             has_f16c();
  if (strcmp(k->name, "avx512") == 0) /* its fp32 runs the AVX2 code */
    return avx2 && __builtin_cpu_supports("avx512f") &&
           __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl");
  if (strcmp(k->name, "avx2") == 0) return avx2;
#endif
  return strcmp(k->name, "scalar") == 0;
}

__attribute__((constructor)) static void pick_kv_kernel(void) {
  for (size_t i = 0; i < NKERNELS; i++)
    if (supported(&kernels[i])) {
      active = &kernels[i];
      return;
    }
}

int attn__kv_set_kernel(const char *name) {
  for (size_t i = 0; i < NKERNELS; i++)
    if (strcmp(kernels[i].name, name) == 0 && supported(&kernels[i])) {
      active = &kernels[i];
      return 1;
    }
  return 0;
}

const char *attn__kv_kernel_name(void) {
  return active->name;
}

void attn__kv_run(const attn__kv_job *j) {
  active->run(j);
}
