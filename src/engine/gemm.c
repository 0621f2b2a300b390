/* gemm.c - the attention core's two matrix products with AVX-512 kernels
 * (and AVX2 ones for small calls).
 *
 * DESIGN
 * Attention spends two thirds of its FLOPs in S = Q K^T (inner dimension
 * Dk, usually 64) and O = P V (output width Dv, usually 64).  OpenBLAS
 * runs these thin shapes below its square-matrix rate, and when it is
 * pinned to 256-bit kernels (OPENBLAS_CORETYPE=Haswell on an AVX-512 CPU)
 * at half of what the core can do.  Both products here use one register
 * tile of 12 rows x 32 columns (24 zmm accumulators, 16 FMA lanes each):
 * per step of the inner dimension, two vector loads of B and 12 values of
 * A feed 24 FMAs, so the FMA units, not the loads, set the pace.  Each FMA
 * broadcasts its A value from memory itself ({1to16}, FMA_BCAST): with a
 * vbroadcastss per row shared by two FMAs, the tiles ran at 90-94% of the
 * Zen 4's FMA peak, and at 94-98% without (issue 45).
 *  - NT (S = alpha A B^T): B's rows are keys with Dk contiguous, but the
 *    kernel needs 32 keys side by side per Dk step, so B is first packed
 *    into panels of 32 keys stored [Dk][32] (attn__pack_nt; zeros past the
 *    last key).  The engine packs each key head once per call and every
 *    query block reuses it.
 *    A call with at most 16 keys and no packed panels (a small request's
 *    scores: fewer than PACK_MIN_ROWS queries) transposes them into one
 *    16-wide panel on the stack and runs the same arithmetic on one column
 *    half, so its bits are those of the packed path.
 *  - NN (C = A B or C += A B): B's rows (values) already hold Dv side by
 *    side; no packing.
 * Edges: columns past N are masked in loads and stores, and the last
 * block of fewer than 12 rows runs a kernel compiled for its row count.
 * Each output is one FMA chain over the inner dimension in order: results
 * do not depend on the thread or on where a block starts, so the engine's
 * bits are the same from run to run.  They differ from OpenBLAS's in the
 * last bits (different summation order); tests compare both with the
 * double reference and each other.
 * On CPUs with AVX2 and FMA but no AVX-512F the same tiles run at 8 lanes
 * (below), for small calls only: a small request's products, where
 * OpenBLAS's call overhead and packing cost more than the arithmetic.
 * cblas_sgemm remains beside these kernels as the reference and the
 * fallback: it is used on CPUs without either, when attn__set_gemm
 * chooses "blas", and for calls these kernels do not take.
 * Stateless but for the choice, written once at start-up (a constructor)
 * or by tests and benchmarks before engine calls, and for what ran: each
 * entry point ORs the bit of the kernel it ran (1 << GEMM_*: its own or
 * cblas_sgemm) into a thread-local word, one store per product, which the
 * engine takes at the start and end of a call (attn__gemm_ran_take; its
 * threads hand theirs over in attn__parallel_for) to name what a call ran
 * (attn__gemm_ran_name: "avx512+blas" when a product fell through).
 */
#include <cblas.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define ATTN_GEMM_X86 1
#endif

#include "internal.h"

#define MR 12          /* rows of the register tile */
#define NT_SMALL_K 256 /* longest inner dimension of the small NT path */
#define NR ATTN__PANEL /* columns of the register tile (two zmm) */

size_t attn__pack_floats(int64_t n, int64_t k) {
  return (size_t)((n + NR - 1) / NR) * NR * (size_t)k;
}

#ifdef ATTN_GEMM_X86
static void pack_panel_avx512(int64_t k, const float *b, int64_t ldb, float *p);
#endif

void attn__pack_nt(int64_t n, int64_t k, const float *b, int64_t ldb,
                   float *panels) {
#ifdef ATTN_GEMM_X86
  /* 16 row offsets of ldb floats must fit the gathers' int32 indices */
  int gather = __builtin_cpu_supports("avx512f") && ldb <= INT32_MAX / 64;
#endif
  for (int64_t j0 = 0; j0 < n; j0 += NR) {
    float *p = panels + (j0 / NR) * k * NR;
    int64_t nr = n - j0 < NR ? n - j0 : NR;
#ifdef ATTN_GEMM_X86
    if (gather && nr == NR) {
      pack_panel_avx512(k, b + j0 * ldb, ldb, p);
      continue;
    }
#endif
    if (nr < NR) memset(p, 0, (size_t)(k * NR) * sizeof *p);
    /* 32 rows of b walked together: row jj's k-th value goes to p[k][jj] */
    for (int64_t jj = 0; jj < nr; jj++) {
      const float *row = b + (j0 + jj) * ldb;
      for (int64_t kk = 0; kk < k; kk++) p[kk * NR + jj] = row[kk];
    }
  }
}

#ifdef ATTN_GEMM_X86
#define AVX512 __attribute__((target("avx512f")))
#define INLINE __attribute__((always_inline)) static inline

/* c += broadcast(*a) * b, the scalar broadcast by the FMA's own memory
 * operand ({1to16}): GCC loads a broadcast used twice into a register
 * with a separate vbroadcastss, which on Zen 4 takes an FP pipe slot
 * beside the FMAs. */
#define FMA_BCAST(c, b, a)                          \
  __asm__("vfmadd231ps %[x]%{1to16%}, %[y], %[acc]" \
          : [acc] "+v"(c)                           \
          : [y] "v"(b), [x] "m"(*(a)))

static AVX512 inline __mmask16 lane_mask(int64_t n) {
  return n >= 16  ? (__mmask16)0xFFFF
         : n <= 0 ? (__mmask16)0
                  : (__mmask16)((1u << n) - 1);
}

/* C[mr, w] = alpha * A[mr, k] P^T for one panel P [k][w], w = 32 (NR, the
 * packed panels) or 16 (nt_small's): one FMA chain per element over k in
 * order, then alpha, so a column's bits do not depend on w.  full: all w
 * columns stored, without masks. */
AVX512 INLINE void tile_nt(const int mr, const int w, const int full, int64_t k,
                           const float *a, int64_t lda, const float *p,
                           float alpha, float *c, int64_t ldc, __mmask16 m0,
                           __mmask16 m1) {
  __m512 c0[MR], c1[MR];
  _Pragma("GCC unroll 12") for (int r = 0; r < mr; r++) c0[r] = c1[r] =
      _mm512_setzero_ps();
  for (int64_t kk = 0; kk < k; kk++) {
    __m512 b0 = _mm512_load_ps(p + kk * w);
    __m512 b1 = w > 16 ? _mm512_load_ps(p + kk * w + 16) : b0;
    _Pragma("GCC unroll 12") for (int r = 0; r < mr; r++) {
      FMA_BCAST(c0[r], b0, a + r * lda + kk);
      if (w > 16) FMA_BCAST(c1[r], b1, a + r * lda + kk);
    }
  }
  __m512 al = _mm512_set1_ps(alpha);
  _Pragma("GCC unroll 12") for (int r = 0; r < mr; r++) {
    if (full) {
      _mm512_storeu_ps(c + r * ldc, _mm512_mul_ps(c0[r], al));
      if (w > 16) _mm512_storeu_ps(c + r * ldc + 16, _mm512_mul_ps(c1[r], al));
    } else {
      _mm512_mask_storeu_ps(c + r * ldc, m0, _mm512_mul_ps(c0[r], al));
      if (w > 16)
        _mm512_mask_storeu_ps(c + r * ldc + 16, m1, _mm512_mul_ps(c1[r], al));
    }
  }
}

/* C[mr, <=32] = A[mr, k] B[k, <=32] (+ C when acc); columns by mask, or
 * all 32 without masks when full (the masks then live in no register,
 * which left the loop short of registers). */
AVX512 INLINE void tile_nn(const int mr, const int full, int64_t k,
                           const float *a, int64_t lda, const float *b,
                           int64_t ldb, int acc, float *c, int64_t ldc,
                           __mmask16 m0, __mmask16 m1) {
  __m512 c0[MR], c1[MR];
  _Pragma("GCC unroll 12") for (int r = 0; r < mr; r++) c0[r] = c1[r] =
      _mm512_setzero_ps();
  for (int64_t kk = 0; kk < k; kk++) {
    __m512 b0 = full ? _mm512_loadu_ps(b) : _mm512_maskz_loadu_ps(m0, b);
    __m512 b1 =
        full ? _mm512_loadu_ps(b + 16) : _mm512_maskz_loadu_ps(m1, b + 16);
    b += ldb;
    _Pragma("GCC unroll 12") for (int r = 0; r < mr; r++) {
      FMA_BCAST(c0[r], b0, a + r * lda + kk);
      FMA_BCAST(c1[r], b1, a + r * lda + kk);
    }
  }
  _Pragma("GCC unroll 12") for (int r = 0; r < mr; r++) {
    float *cr = c + r * ldc;
    if (full) {
      if (acc) {
        c0[r] = _mm512_add_ps(c0[r], _mm512_loadu_ps(cr));
        c1[r] = _mm512_add_ps(c1[r], _mm512_loadu_ps(cr + 16));
      }
      _mm512_storeu_ps(cr, c0[r]);
      _mm512_storeu_ps(cr + 16, c1[r]);
      continue;
    }
    if (acc) {
      c0[r] = _mm512_add_ps(c0[r], _mm512_maskz_loadu_ps(m0, cr));
      c1[r] = _mm512_add_ps(c1[r], _mm512_maskz_loadu_ps(m1, cr + 16));
    }
    _mm512_mask_storeu_ps(cr, m0, c0[r]);
    _mm512_mask_storeu_ps(cr + 16, m1, c1[r]);
  }
}

/* One function per row count, so each keeps its tile in registers. */
#define ROW_CASES(X) \
  X(12) X(11) X(10) X(9) X(8) X(7) X(6) X(5) X(4) X(3) X(2) X(1)

/* narrow: a 16-wide panel (m1 unused), else a 32-wide one. */
static AVX512 void block_nt(int mr, int narrow, int64_t k, const float *a,
                            int64_t lda, const float *p, float alpha, float *c,
                            int64_t ldc, __mmask16 m0, __mmask16 m1) {
  switch (mr) {
#define X(n)                                                  \
  case n:                                                     \
    if (narrow)                                               \
      tile_nt(n, 16, 0, k, a, lda, p, alpha, c, ldc, m0, m1); \
    else if (m1 == 0xFFFF)                                    \
      tile_nt(n, NR, 1, k, a, lda, p, alpha, c, ldc, m0, m1); \
    else                                                      \
      tile_nt(n, NR, 0, k, a, lda, p, alpha, c, ldc, m0, m1); \
    break;
    ROW_CASES(X)
#undef X
  }
}

static AVX512 void block_nn(int mr, int64_t k, const float *a, int64_t lda,
                            const float *b, int64_t ldb, int acc, float *c,
                            int64_t ldc, __mmask16 m0, __mmask16 m1) {
  switch (mr) {
#define X(n)                                                 \
  case n:                                                    \
    if (m1 == 0xFFFF)                                        \
      tile_nn(n, 1, k, a, lda, b, ldb, acc, c, ldc, m0, m1); \
    else                                                     \
      tile_nn(n, 0, k, a, lda, b, ldb, acc, c, ldc, m0, m1); \
    break;
    ROW_CASES(X)
#undef X
  }
}

static AVX512 void nt_avx512(int64_t m, int64_t n, int64_t k, float alpha,
                             const float *a, int64_t lda, const float *panels,
                             float *c, int64_t ldc) {
  for (int64_t j0 = 0; j0 < n; j0 += NR) {
    const float *p = panels + (j0 / NR) * k * NR;
    __mmask16 m0 = lane_mask(n - j0), m1 = lane_mask(n - j0 - 16);
    for (int64_t i0 = 0; i0 < m; i0 += MR)
      block_nt(m - i0 < MR ? (int)(m - i0) : MR, 0, k, a + i0 * lda, lda, p,
               alpha, c + i0 * ldc + j0, ldc, m0, m1);
  }
}

/* r[t][j] <- r[j][t]: 16 x 16 floats.  Unpacking pairs of rows, then
 * pairs of those, leaves in 128-bit lane L of r[4i + e] element 4L + e of
 * rows 4i..4i+3; two rounds of 128-bit lane shuffles gather each lane L
 * across the four groups. */
AVX512 INLINE void transpose16(__m512 r[16]) {
  __m512 t[16];
  _Pragma("GCC unroll 8") for (int i = 0; i < 8; i++) {
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  _Pragma("GCC unroll 4") for (int i = 0; i < 4; i++) {
    __m512d a = _mm512_castps_pd(t[4 * i]), b = _mm512_castps_pd(t[4 * i + 1]);
    __m512d c = _mm512_castps_pd(t[4 * i + 2]),
            d = _mm512_castps_pd(t[4 * i + 3]);
    r[4 * i] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
    r[4 * i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
    r[4 * i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
    r[4 * i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
  }
  _Pragma("GCC unroll 4") for (int e = 0; e < 4; e++) {
    __m512 u = _mm512_shuffle_f32x4(r[e], r[4 + e], 0x88); /* lanes 0, 2 */
    __m512 v = _mm512_shuffle_f32x4(r[e], r[4 + e], 0xdd); /* lanes 1, 3 */
    __m512 u2 = _mm512_shuffle_f32x4(r[8 + e], r[12 + e], 0x88);
    __m512 v2 = _mm512_shuffle_f32x4(r[8 + e], r[12 + e], 0xdd);
    t[e] = _mm512_shuffle_f32x4(u, u2, 0x88);      /* element e */
    t[8 + e] = _mm512_shuffle_f32x4(u, u2, 0xdd);  /* element 8 + e */
    t[4 + e] = _mm512_shuffle_f32x4(v, v2, 0x88);  /* element 4 + e */
    t[12 + e] = _mm512_shuffle_f32x4(v, v2, 0xdd); /* element 12 + e */
  }
  _Pragma("GCC unroll 16") for (int j = 0; j < 16; j++) r[j] = t[j];
}

/* One full panel of 32 rows: 16 x 16 blocks transposed in registers and
 * stored contiguously, the last k % 16 values by gathers of 16 rows (the
 * scalar loop's writes, 32 floats apart, cost several times more: a tenth
 * of a windowed call at n = 16384). */
static AVX512 void pack_panel_avx512(int64_t k, const float *b, int64_t ldb,
                                     float *p) {
  __m512i idx = _mm512_mullo_epi32(
      _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
      _mm512_set1_epi32((int)ldb));
  int64_t kk = 0;
  for (; kk + 16 <= k; kk += 16)
    for (int half = 0; half < 2; half++) {
      __m512 r[16];
      for (int i = 0; i < 16; i++)
        r[i] = _mm512_loadu_ps(b + (half * 16 + i) * ldb + kk);
      transpose16(r);
      for (int t = 0; t < 16; t++)
        _mm512_storeu_ps(p + (kk + t) * NR + half * 16, r[t]);
    }
  const float *b16 = b + 16 * ldb;
  for (; kk < k; kk++) {
    _mm512_storeu_ps(p + kk * NR, _mm512_i32gather_ps(idx, b + kk, 4));
    _mm512_storeu_ps(p + kk * NR + 16, _mm512_i32gather_ps(idx, b16 + kk, 4));
  }
}
/* NT for at most 16 keys (b's n <= 16 rows) and k <= NT_SMALL_K: the keys
 * transposed into one 16-wide panel on the stack, then the narrow tile.  A
 * small request's scores (16 queries, 16 keys, Dk 64) took OpenBLAS ~0.55 us,
 * most of it packing and call overhead for 16K multiply-adds; packing
 * them into the 32-wide panels instead computed twice the columns. */
static AVX512 void nt_small_avx512(int64_t m, int64_t n, int64_t k, float alpha,
                                   const float *a, int64_t lda, const float *b,
                                   int64_t ldb, float *c, int64_t ldc) {
  float p[NT_SMALL_K * 16] __attribute__((aligned(64)));
  for (int64_t k0 = 0; k0 < k; k0 += 16) { /* 16 x 16 blocks, transposed */
    int64_t kw = k - k0 < 16 ? k - k0 : 16;
    __mmask16 km = lane_mask(kw);
    __m512 r[16];
    _Pragma("GCC unroll 16") for (int j = 0; j < 16; j++) r[j] =
        j < n ? _mm512_maskz_loadu_ps(km, b + j * ldb + k0)
              : _mm512_setzero_ps();
    transpose16(r);
    for (int64_t t = 0; t < kw; t++) _mm512_store_ps(p + (k0 + t) * 16, r[t]);
  }
  __mmask16 m0 = lane_mask(n);
  for (int64_t i0 = 0; i0 < m; i0 += MR)
    block_nt(m - i0 < MR ? (int)(m - i0) : MR, 1, k, a + i0 * lda, lda, p,
             alpha, c + i0 * ldc, ldc, m0, 0);
}

static AVX512 void nn_avx512(int64_t m, int64_t n, int64_t k, const float *a,
                             int64_t lda, const float *b, int64_t ldb, int acc,
                             float *c, int64_t ldc) {
  for (int64_t j0 = 0; j0 < n; j0 += NR) {
    __mmask16 m0 = lane_mask(n - j0), m1 = lane_mask(n - j0 - 16);
    for (int64_t i0 = 0; i0 < m; i0 += MR)
      block_nn(m - i0 < MR ? (int)(m - i0) : MR, k, a + i0 * lda, lda, b + j0,
               ldb, acc, c + i0 * ldc + j0, ldc, m0, m1);
  }
}

/* ---- AVX2 + FMA: the same products, 8 lanes ------------------------------
 * The AVX-512 kernels' arithmetic on CPUs without AVX-512 (Zen 2 and 3,
 * Intel client parts): a register tile of 6 rows x 16 columns (12 ymm
 * accumulators; two loads of B and six broadcasts of A feed 12 FMAs per
 * step).  Each output is the same FMA chain over the inner dimension in
 * order, then alpha, as in the AVX-512 tiles, so the two kernels give the
 * same bits (tests/test_engine.c checks each against that chain in scalar
 * fmaf, and the two against each other where a CPU has both).  Edge
 * columns: masked loads and stores (vmaskmovps) only in the block that
 * needs them (the masked store is slow on Zen).
 * Only small calls come here: NT with at most 16 keys (the keys transposed
 * into a 16-wide panel on the stack, as nt_small_avx512) and NN of at most
 * ATTN__GEMM_AVX2_MAX_WORK multiply-adds.  On Zen 3 (2026-12-02) a small
 * request's attn_sdpa ([16,64] self-attention with weights) took 1.6-2.3
 * us against 2.6-3.8 with OpenBLAS; used for every product, with panels
 * packed as for AVX-512, the large request (n = 2048, d_model = 512)
 * was 10-25% slower than with OpenBLAS, and the attention core alone
 * 20-30% (docs/performance.md): OpenBLAS blocks for the caches, these
 * tiles do not. */
#define AVX2 __attribute__((target("avx2,fma")))
#define MR2 6

/* -1 in lanes below n (0..8), 0 above. */
static AVX2 inline __m256i lanes8(int64_t n) {
  static const int32_t ones[16] = {-1, -1, -1, -1, -1, -1, -1, -1,
                                   0,  0,  0,  0,  0,  0,  0,  0};
  int64_t k = n < 0 ? 0 : n > 8 ? 8 : n;
  return _mm256_loadu_si256((const __m256i *)(const void *)(ones + 8 - k));
}

/* c[0 .. 16) of one row: at the right edge (edge) by the lane masks k0
 * and k1 of the two halves. */
AVX2 INLINE void store16(float *c, __m256 x0, __m256 x1, int edge, __m256i k0,
                         __m256i k1) {
  if (edge) {
    _mm256_maskstore_ps(c, k0, x0);
    _mm256_maskstore_ps(c + 8, k1, x1);
  } else {
    _mm256_storeu_ps(c, x0);
    _mm256_storeu_ps(c + 8, x1);
  }
}

/* C[mr, 16] = alpha * A[mr, k] P^T for a panel P stored [k][16], zeros
 * past the last key. */
AVX2 INLINE void tile2_nt(const int mr, int64_t k, const float *a, int64_t lda,
                          const float *p, float alpha, float *c, int64_t ldc,
                          int edge, __m256i k0, __m256i k1) {
  __m256 c0[MR2], c1[MR2];
  _Pragma("GCC unroll 6") for (int r = 0; r < mr; r++) c0[r] = c1[r] =
      _mm256_setzero_ps();
  for (int64_t kk = 0; kk < k; kk++) {
    __m256 b0 = _mm256_load_ps(p + kk * 16),
           b1 = _mm256_load_ps(p + kk * 16 + 8);
    _Pragma("GCC unroll 6") for (int r = 0; r < mr; r++) {
      __m256 x = _mm256_broadcast_ss(a + r * lda + kk);
      c0[r] = _mm256_fmadd_ps(x, b0, c0[r]);
      c1[r] = _mm256_fmadd_ps(x, b1, c1[r]);
    }
  }
  __m256 al = _mm256_set1_ps(alpha);
  _Pragma("GCC unroll 6") for (int r = 0; r < mr; r++)
      store16(c + r * ldc, _mm256_mul_ps(c0[r], al), _mm256_mul_ps(c1[r], al),
              edge, k0, k1);
}

/* C[mr, 16] = A[mr, k] B[k, 16] (+ C when acc); at the edge B's and C's
 * columns by mask. */
AVX2 INLINE void tile2_nn(const int mr, int64_t k, const float *a, int64_t lda,
                          const float *b, int64_t ldb, int acc, float *c,
                          int64_t ldc, int edge, __m256i k0, __m256i k1) {
  __m256 c0[MR2], c1[MR2];
  _Pragma("GCC unroll 6") for (int r = 0; r < mr; r++) c0[r] = c1[r] =
      _mm256_setzero_ps();
  for (int64_t kk = 0; kk < k; kk++) {
    __m256 b0, b1;
    if (edge) {
      b0 = _mm256_maskload_ps(b, k0);
      b1 = _mm256_maskload_ps(b + 8, k1);
    } else {
      b0 = _mm256_loadu_ps(b);
      b1 = _mm256_loadu_ps(b + 8);
    }
    b += ldb;
    _Pragma("GCC unroll 6") for (int r = 0; r < mr; r++) {
      __m256 x = _mm256_broadcast_ss(a + r * lda + kk);
      c0[r] = _mm256_fmadd_ps(x, b0, c0[r]);
      c1[r] = _mm256_fmadd_ps(x, b1, c1[r]);
    }
  }
  _Pragma("GCC unroll 6") for (int r = 0; r < mr; r++) {
    if (acc) {
      float *cr = c + r * ldc;
      c0[r] = _mm256_add_ps(
          c0[r], edge ? _mm256_maskload_ps(cr, k0) : _mm256_loadu_ps(cr));
      c1[r] = _mm256_add_ps(c1[r], edge ? _mm256_maskload_ps(cr + 8, k1)
                                        : _mm256_loadu_ps(cr + 8));
    }
    store16(c + r * ldc, c0[r], c1[r], edge, k0, k1);
  }
}

#define ROW_CASES2(X) X(6) X(5) X(4) X(3) X(2) X(1)

static AVX2 void block2_nt(int mr, int64_t k, const float *a, int64_t lda,
                           const float *p, float alpha, float *c, int64_t ldc,
                           int edge, __m256i k0, __m256i k1) {
  switch (mr) {
#define X(n)                                                \
  case n:                                                   \
    tile2_nt(n, k, a, lda, p, alpha, c, ldc, edge, k0, k1); \
    break;
    ROW_CASES2(X)
#undef X
  }
}

static AVX2 void block2_nn(int mr, int64_t k, const float *a, int64_t lda,
                           const float *b, int64_t ldb, int acc, float *c,
                           int64_t ldc, int edge, __m256i k0, __m256i k1) {
  switch (mr) {
#define X(n)                                                   \
  case n:                                                      \
    tile2_nn(n, k, a, lda, b, ldb, acc, c, ldc, edge, k0, k1); \
    break;
    ROW_CASES2(X)
#undef X
  }
}

/* Columns [0, cols) (at most 16) of an NT product over a 16-wide panel p. */
static AVX2 void nt2_columns(int64_t m, int64_t cols, int64_t k, float alpha,
                             const float *a, int64_t lda, const float *p,
                             float *c, int64_t ldc) {
  int edge = cols < 16;
  __m256i k0 = lanes8(cols), k1 = lanes8(cols - 8);
  for (int64_t i0 = 0; i0 < m; i0 += MR2)
    block2_nt(m - i0 < MR2 ? (int)(m - i0) : MR2, k, a + i0 * lda, lda, p,
              alpha, c + i0 * ldc, ldc, edge, k0, k1);
}

/* r[t][j] <- r[j][t]: 8 x 8 floats (unpack pairs of rows, then pairs of
 * those, then swap 128-bit halves). */
AVX2 INLINE void transpose8(__m256 r[8]) {
  __m256 t[8], u[8];
  _Pragma("GCC unroll 4") for (int i = 0; i < 4; i++) {
    t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  _Pragma("GCC unroll 2") for (int i = 0; i < 2; i++) {
    u[4 * i] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);
    u[4 * i + 1] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0xEE);
    u[4 * i + 2] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
    u[4 * i + 3] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xEE);
  }
  _Pragma("GCC unroll 4") for (int i = 0; i < 4; i++) {
    r[i] = _mm256_permute2f128_ps(u[i], u[4 + i], 0x20);
    r[4 + i] = _mm256_permute2f128_ps(u[i], u[4 + i], 0x31);
  }
}

/* NT for at most 16 keys and k <= NT_SMALL_K, as nt_small_avx512: the
 * keys transposed into one 16-wide panel on the stack (zeros past n), by
 * 8 x 8 blocks.  A scalar transposition cost as much as the products. */
static AVX2 void nt_small_avx2(int64_t m, int64_t n, int64_t k, float alpha,
                               const float *a, int64_t lda, const float *b,
                               int64_t ldb, float *c, int64_t ldc) {
  float p[NT_SMALL_K * 16] __attribute__((aligned(32)));
  for (int64_t k0 = 0; k0 < k; k0 += 8) {
    int64_t kw = k - k0 < 8 ? k - k0 : 8;
    __m256i km = lanes8(kw);
    for (int h = 0; h < 2; h++) {
      __m256 r[8];
      _Pragma("GCC unroll 8") for (int j = 0; j < 8; j++) r[j] =
          8 * h + j < n ? _mm256_maskload_ps(b + (8 * h + j) * ldb + k0, km)
                        : _mm256_setzero_ps();
      transpose8(r);
      for (int64_t t = 0; t < kw; t++)
        _mm256_store_ps(p + (k0 + t) * 16 + 8 * h, r[t]);
    }
  }
  nt2_columns(m, n, k, alpha, a, lda, p, c, ldc);
}

static AVX2 void nn_avx2(int64_t m, int64_t n, int64_t k, const float *a,
                         int64_t lda, const float *b, int64_t ldb, int acc,
                         float *c, int64_t ldc) {
  for (int64_t j0 = 0; j0 < n; j0 += 16) {
    int edge = n - j0 < 16;
    __m256i k0 = lanes8(n - j0), k1 = lanes8(n - j0 - 8);
    for (int64_t i0 = 0; i0 < m; i0 += MR2)
      block2_nn(m - i0 < MR2 ? (int)(m - i0) : MR2, k, a + i0 * lda, lda,
                b + j0, ldb, acc, c + i0 * ldc + j0, ldc, edge, k0, k1);
  }
}
#endif /* ATTN_GEMM_X86 */

/* ---- the choice ---------------------------------------------------------- */

enum { GEMM_BLAS, GEMM_AVX512, GEMM_AVX2 };
static int use_kernel; /* GEMM_BLAS: cblas_sgemm only */

static int have(int kernel) {
#ifdef ATTN_GEMM_X86
  __builtin_cpu_init();
  if (kernel == GEMM_AVX512) return __builtin_cpu_supports("avx512f");
  if (kernel == GEMM_AVX2)
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#endif
  return kernel == GEMM_BLAS;
}

static const char *const gemm_names[] = {"blas", "avx512", "avx2"};

/* The kernels this thread's products ran since attn__gemm_ran_take: bit
 * 1 << GEMM_* of each.  A thread's own word: no atomics, no sharing; in
 * an executable the linker makes each access one %fs-relative store. */
static _Thread_local unsigned ran;

__attribute__((constructor)) static void pick_gemm(void) {
  use_kernel = have(GEMM_AVX512) ? GEMM_AVX512
               : have(GEMM_AVX2) ? GEMM_AVX2
                                 : GEMM_BLAS;
}

int attn__set_gemm(const char *name) {
  for (int i = 0; i < (int)(sizeof gemm_names / sizeof *gemm_names); i++)
    if (strcmp(name, gemm_names[i]) == 0 && have(i)) {
      use_kernel = i;
      return 1;
    }
  return 0;
}

const char *attn__gemm_name(void) {
  return gemm_names[use_kernel];
}

int attn__gemm_packs(void) {
  return use_kernel == GEMM_AVX512;
}

unsigned attn__gemm_ran_take(void) {
  unsigned r = ran;
  ran = 0;
  return r;
}

void attn__gemm_ran_add(unsigned bits) {
  ran |= bits;
}

const char *attn__gemm_ran_name(unsigned bits) {
  /* by bit: 1 blas, 2 avx512, 4 avx2 (1 << GEMM_*) */
  static const char *const names[] = {
      NULL,   "blas",      "avx512",      "avx512+blas",
      "avx2", "avx2+blas", "avx512+avx2", "avx512+avx2+blas"};
  bits &= 7u;
  return bits ? names[bits] : gemm_names[use_kernel];
}

/* ---- entry points -------------------------------------------------------- */

void attn__gemm_nt_packed(int64_t m, int64_t n, int64_t k, float alpha,
                          const float *a, int64_t lda, const float *panels,
                          float *c, int64_t ldc) {
#ifdef ATTN_GEMM_X86
  ran |= 1u << GEMM_AVX512;
  nt_avx512(m, n, k, alpha, a, lda, panels, c, ldc);
#else
  (void)m, (void)n, (void)k, (void)alpha, (void)a, (void)lda, (void)panels;
  (void)c, (void)ldc; /* attn__gemm_packs() is 0: never called */
#endif
}

void attn__gemm_nt(int64_t m, int64_t n, int64_t k, float alpha, const float *a,
                   int64_t lda, const float *b, int64_t ldb, float *c,
                   int64_t ldc) {
#ifdef ATTN_GEMM_X86
  if (use_kernel != GEMM_BLAS && n <= 16 && k <= NT_SMALL_K) {
    ran |= 1u << use_kernel;
    if (use_kernel == GEMM_AVX2)
      nt_small_avx2(m, n, k, alpha, a, lda, b, ldb, c, ldc);
    else
      nt_small_avx512(m, n, k, alpha, a, lda, b, ldb, c, ldc);
    return;
  }
#endif
  ran |= 1u << GEMM_BLAS;
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)m, (int)n, (int)k,
              alpha, a, (int)lda, b, (int)ldb, 0.0f, c, (int)ldc);
}

void attn__gemm_nn(int64_t m, int64_t n, int64_t k, const float *a, int64_t lda,
                   const float *b, int64_t ldb, int acc, float *c,
                   int64_t ldc) {
#ifdef ATTN_GEMM_X86
  if (use_kernel == GEMM_AVX2 &&
      (double)m * (double)n * (double)k <= ATTN__GEMM_AVX2_MAX_WORK) {
    ran |= 1u << GEMM_AVX2;
    nn_avx2(m, n, k, a, lda, b, ldb, acc, c, ldc);
    return;
  }
  if (use_kernel == GEMM_AVX512) {
    ran |= 1u << GEMM_AVX512;
    nn_avx512(m, n, k, a, lda, b, ldb, acc, c, ldc);
    return;
  }
#endif
  ran |= 1u << GEMM_BLAS;
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)m, (int)n, (int)k,
              1.0f, a, (int)lda, b, (int)ldb, acc ? 1.0f : 0.0f, c, (int)ldc);
}

/* ---- bfloat16 products ---------------------------------------------------
 * For attn_precision ATTN_PRECISION_BF16 (engine.h): the same products on
 * bf16 operands with fp32 accumulation.  The right-hand operand is packed
 * into 32-column panels of bf16 pairs (internal.h): keys and [out, in]
 * weights from rows (attn__bf16_pack_nt), values and [in, out] weights
 * from columns (attn__bf16_pack_nn); the left-hand one is bf16 rows whose
 * consecutive pairs a 32-bit broadcast reads.
 *  - AVX512-BF16 (Zen 4 and 5, Cooper Lake, Sapphire Rapids and later):
 *    the fp32 kernels' register tile, 12 rows x 32 columns in 24 zmm
 *    accumulators, but each step is a pair of inner values: two loads of
 *    the panel, 12 broadcasts of a pair, 24 vdpbf16ps, each 32
 *    multiply-adds where an FMA does 16.
 *  - portable: the same chain in C, one output at a time over the pairs,
 *    odd product then even product, each added to the fp32 sum with one
 *    rounding (a product of two bf16 values is exact in fp32, so this is
 *    what vdpbf16ps computes).  No faster than fp32; it exists so that a
 *    bf16 request means the same numbers on every CPU.
 * Columns that do not start on a panel (off > 0: a streaming key tile
 * that starts inside a panel) are computed into a 12 x 32 block on the
 * stack and copied. */
size_t attn__bf16_pack_elems(int64_t n, int64_t k) {
  return (size_t)((n + NR - 1) / NR) * (size_t)attn__bf16_panel_stride(k);
}

void attn__bf16_pack_nt_scalar(int64_t n, int64_t k, const float *b,
                               int64_t ldb, uint16_t *panels) {
  int64_t ps = attn__bf16_panel_stride(k), kp = (k + 1) / 2;
  for (int64_t j0 = 0; j0 < n; j0 += NR) {
    uint16_t *p = panels + (j0 / NR) * ps;
    int64_t nr = n - j0 < NR ? n - j0 : NR;
    if (nr < NR || k % 2) memset(p, 0, (size_t)ps * sizeof *p);
    for (int64_t jj = 0; jj < nr; jj++) {
      const float *row = b + (j0 + jj) * ldb;
      for (int64_t kk = 0; kk < k; kk++)
        p[(kk / 2) * 2 * NR + 2 * jj + (kk & 1)] = attn__bf16(row[kk]);
    }
    (void)kp;
  }
}

void attn__bf16_pack_nn_scalar(int64_t n, int64_t k, const float *b,
                               int64_t ldb, uint16_t *panels) {
  int64_t ps = attn__bf16_panel_stride(k);
  for (int64_t j0 = 0; j0 < n; j0 += NR) {
    uint16_t *p = panels + (j0 / NR) * ps;
    int64_t nr = n - j0 < NR ? n - j0 : NR;
    if (nr < NR || k % 2) memset(p, 0, (size_t)ps * sizeof *p);
    for (int64_t kk = 0; kk < k; kk++) {
      const float *row = b + kk * ldb + j0;
      uint16_t *d = p + (kk / 2) * 2 * NR + (kk & 1);
      for (int64_t jj = 0; jj < nr; jj++) d[2 * jj] = attn__bf16(row[jj]);
    }
  }
}

/* As attn__bf16_pack_nt / _nn from values already in bfloat16: a copy
 * into the panel layout, no rounding. */
void attn__bf16_pack_nt_u16(int64_t n, int64_t k, const uint16_t *b,
                            int64_t ldb, uint16_t *panels) {
  int64_t ps = attn__bf16_panel_stride(k);
  for (int64_t j0 = 0; j0 < n; j0 += NR) {
    uint16_t *p = panels + (j0 / NR) * ps;
    int64_t nr = n - j0 < NR ? n - j0 : NR;
    if (nr < NR || k % 2) memset(p, 0, (size_t)ps * sizeof *p);
    for (int64_t jj = 0; jj < nr; jj++) {
      const uint16_t *row = b + (j0 + jj) * ldb;
      for (int64_t kk = 0; kk < k; kk++)
        p[(kk / 2) * 2 * NR + 2 * jj + (kk & 1)] = row[kk];
    }
  }
}

void attn__bf16_pack_nn_u16(int64_t n, int64_t k, const uint16_t *b,
                            int64_t ldb, uint16_t *panels) {
  int64_t ps = attn__bf16_panel_stride(k);
  for (int64_t j0 = 0; j0 < n; j0 += NR) {
    uint16_t *p = panels + (j0 / NR) * ps;
    int64_t nr = n - j0 < NR ? n - j0 : NR;
    if (nr < NR || k % 2) memset(p, 0, (size_t)ps * sizeof *p);
    for (int64_t kk = 0; kk < k; kk++) {
      const uint16_t *row = b + kk * ldb + j0;
      uint16_t *d = p + (kk / 2) * 2 * NR + (kk & 1);
      for (int64_t jj = 0; jj < nr; jj++) d[2 * jj] = row[jj];
    }
  }
}

enum { BF16_PORTABLE, BF16_AVX512 };
static int bf16_kernel;

#ifdef ATTN_GEMM_X86
#define BF16K __attribute__((target("avx512f,avx512bf16")))

static BF16K void convert_avx512bf16(const float *src, int64_t n,
                                     uint16_t *dst) {
  int64_t j = 0;
  for (; j + 16 <= n; j += 16) {
    __m256bh h = _mm512_cvtneps_pbh(_mm512_loadu_ps(src + j));
    _mm256_storeu_si256((__m256i *)(void *)(dst + j), (__m256i)h);
  }
  for (; j < n; j++) dst[j] = attn__bf16(src[j]);
}

/* attn__bf16_pack_nt_scalar with vcvtne2ps2bf16 (the same rounding): 16
 * columns x 16 pairs at a time, each column's 32 values converted into 16
 * pairs, then transposed so that a pair row of 16 columns is one store. */
static BF16K void pack_nt_avx512bf16(int64_t n, int64_t k, const float *b,
                                     int64_t ldb, uint16_t *panels) {
  int64_t ps = attn__bf16_panel_stride(k), kp = (k + 1) / 2;
  for (int64_t j0 = 0; j0 < n; j0 += NR) {
    uint16_t *p = panels + (j0 / NR) * ps;
    for (int64_t c0 = 0; c0 < NR; c0 += 16)
      for (int64_t t0 = 0; t0 < kp; t0 += 16) {
        __m512 r[16]; /* 16 columns' pairs, as 32-bit lanes */
        int64_t left = k - 2 * t0;
        __mmask16 m0 = lane_mask(left), m1 = lane_mask(left - 16);
        for (int c = 0; c < 16; c++) {
          int64_t j = j0 + c0 + c;
          const float *row = b + j * ldb + 2 * t0;
          r[c] = j < n ? (__m512)_mm512_cvtne2ps_pbh(
                             _mm512_maskz_loadu_ps(m1, row + 16),
                             _mm512_maskz_loadu_ps(m0, row))
                       : _mm512_setzero_ps();
        }
        transpose16(r); /* r[t]: pair t0 + t of the 16 columns */
        int64_t np = kp - t0 < 16 ? kp - t0 : 16;
        for (int64_t t = 0; t < np; t++)
          _mm512_storeu_ps((void *)(p + (t0 + t) * 2 * NR + 2 * c0), r[t]);
      }
  }
}

/* attn__bf16_pack_nn_scalar vectorised: rows kk and kk + 1 of b, 16
 * columns at a time, rounded and interleaved into 16 pairs. */
static BF16K void pack_nn_avx512bf16(int64_t n, int64_t k, const float *b,
                                     int64_t ldb, uint16_t *panels) {
  int64_t ps = attn__bf16_panel_stride(k);
  for (int64_t j0 = 0; j0 < n; j0 += NR) {
    uint16_t *p = panels + (j0 / NR) * ps;
    for (int64_t c0 = 0; c0 < NR; c0 += 16) {
      __mmask16 m = lane_mask(n - j0 - c0);
      for (int64_t kk = 0; kk < k; kk += 2) {
        const float *row = b + kk * ldb + j0 + c0;
        __m256bh e = _mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(m, row));
        __m256bh o =
            _mm512_cvtneps_pbh(kk + 1 < k ? _mm512_maskz_loadu_ps(m, row + ldb)
                                          : _mm512_setzero_ps());
        __m512i pair = _mm512_or_si512(
            _mm512_cvtepu16_epi32((__m256i)e),
            _mm512_slli_epi32(_mm512_cvtepu16_epi32((__m256i)o), 16));
        _mm512_storeu_si512((void *)(p + (kk / 2) * 2 * NR + 2 * c0), pair);
      }
    }
  }
}

/* C[mr, <= 32] = alpha * A[mr, 2 kp] P (+ C when acc) for one panel P. */
BF16K INLINE void tile_bf16(const int mr, int64_t kp, const uint16_t *a,
                            int64_t lda, const uint16_t *p, float alpha,
                            int acc, float *c, int64_t ldc, __mmask16 m0,
                            __mmask16 m1) {
  __m512 c0[MR], c1[MR];
  _Pragma("GCC unroll 12") for (int r = 0; r < mr; r++) c0[r] = c1[r] =
      _mm512_setzero_ps();
  for (int64_t t = 0; t < kp; t++) {
    __m512i b0 = _mm512_loadu_si512((const void *)(p + t * 2 * NR));
    __m512i b1 = _mm512_loadu_si512((const void *)(p + t * 2 * NR + NR));
    _Pragma("GCC unroll 12") for (int r = 0; r < mr; r++) {
      int32_t pair;
      memcpy(&pair, a + r * lda + 2 * t, sizeof pair);
      __m512i x = _mm512_set1_epi32(pair);
      c0[r] = _mm512_dpbf16_ps(c0[r], (__m512bh)x, (__m512bh)b0);
      c1[r] = _mm512_dpbf16_ps(c1[r], (__m512bh)x, (__m512bh)b1);
    }
  }
  __m512 al = _mm512_set1_ps(alpha);
  _Pragma("GCC unroll 12") for (int r = 0; r < mr; r++) {
    __m512 x0, x1;
    if (acc) { /* one rounding, as fmaf in the portable kernel */
      x0 = _mm512_fmadd_ps(c0[r], al, _mm512_maskz_loadu_ps(m0, c + r * ldc));
      x1 = _mm512_fmadd_ps(c1[r], al,
                           _mm512_maskz_loadu_ps(m1, c + r * ldc + 16));
    } else {
      x0 = _mm512_mul_ps(c0[r], al);
      x1 = _mm512_mul_ps(c1[r], al);
    }
    _mm512_mask_storeu_ps(c + r * ldc, m0, x0);
    _mm512_mask_storeu_ps(c + r * ldc + 16, m1, x1);
  }
}

static BF16K void block_bf16(int mr, int64_t kp, const uint16_t *a, int64_t lda,
                             const uint16_t *p, float alpha, int acc, float *c,
                             int64_t ldc, __mmask16 m0, __mmask16 m1) {
  switch (mr) {
#define X(n)                                                 \
  case n:                                                    \
    tile_bf16(n, kp, a, lda, p, alpha, acc, c, ldc, m0, m1); \
    break;
    ROW_CASES(X)
#undef X
  }
}
#endif /* ATTN_GEMM_X86 */

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && \
    !defined(__SANITIZE_ADDRESS__)
#define BF16_CLONES \
  __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define BF16_CLONES
#endif

/* The portable tile: C[mr, cols] (cols <= 32) as tile_bf16 computes it. */
BF16_CLONES static void block_bf16_portable(int mr, int64_t kp,
                                            const uint16_t *a, int64_t lda,
                                            const uint16_t *p, float alpha,
                                            int acc, float *c, int64_t ldc,
                                            int64_t cols) {
  float t[NR];
  for (int r = 0; r < mr; r++) {
    for (int j = 0; j < NR; j++) t[j] = 0.0f;
    const uint16_t *ar = a + r * lda;
    for (int64_t s = 0; s < kp; s++) {
      float a0 = attn__bf16_f32(ar[2 * s]), a1 = attn__bf16_f32(ar[2 * s + 1]);
      const uint16_t *q = p + s * 2 * NR;
      for (int j = 0; j < NR; j++) {
        float u = t[j] + a1 * attn__bf16_f32(q[2 * j + 1]);
        t[j] = u + a0 * attn__bf16_f32(q[2 * j]);
      }
    }
    for (int64_t j = 0; j < cols; j++)
      c[r * ldc + j] = acc ? fmaf(t[j], alpha, c[r * ldc + j]) : t[j] * alpha;
  }
}

void attn__bf16_pack_nt(int64_t n, int64_t k, const float *b, int64_t ldb,
                        uint16_t *panels) {
#ifdef ATTN_GEMM_X86
  if (bf16_kernel == BF16_AVX512) {
    pack_nt_avx512bf16(n, k, b, ldb, panels);
    return;
  }
#endif
  attn__bf16_pack_nt_scalar(n, k, b, ldb, panels);
}

void attn__bf16_pack_nn(int64_t n, int64_t k, const float *b, int64_t ldb,
                        uint16_t *panels) {
#ifdef ATTN_GEMM_X86
  if (bf16_kernel == BF16_AVX512) {
    pack_nn_avx512bf16(n, k, b, ldb, panels);
    return;
  }
#endif
  attn__bf16_pack_nn_scalar(n, k, b, ldb, panels);
}

void attn__bf16_convert(const float *src, int64_t n, uint16_t *dst) {
#ifdef ATTN_GEMM_X86
  if (bf16_kernel == BF16_AVX512) {
    convert_avx512bf16(src, n, dst);
    return;
  }
#endif
  for (int64_t j = 0; j < n; j++) dst[j] = attn__bf16(src[j]);
}

/* Rows [0, m) of one panel's columns [lo, hi) (0 <= lo < hi <= 32) into
 * c (c's column 0 is the panel's column lo). */
static void panel_bf16(int64_t m, int64_t lo, int64_t hi, int64_t kp,
                       float alpha, const uint16_t *a, int64_t lda,
                       const uint16_t *p, int acc, float *c, int64_t ldc) {
  for (int64_t i0 = 0; i0 < m; i0 += MR) {
    int mr = m - i0 < MR ? (int)(m - i0) : MR;
    const uint16_t *ai = a + i0 * lda;
    float *ci = c + i0 * ldc;
    if (lo > 0) { /* via a block on the stack, then the wanted columns */
      float tmp[MR * NR];
      panel_bf16(mr, 0, hi, kp, 1.0f, ai, lda, p, 0, tmp, NR);
      for (int r = 0; r < mr; r++)
        for (int64_t j = lo; j < hi; j++)
          ci[r * ldc + j - lo] =
              acc ? fmaf(tmp[r * NR + j], alpha, ci[r * ldc + j - lo])
                  : tmp[r * NR + j] * alpha;
      continue;
    }
#ifdef ATTN_GEMM_X86
    if (bf16_kernel == BF16_AVX512) {
      block_bf16(mr, kp, ai, lda, p, alpha, acc, ci, ldc, lane_mask(hi),
                 lane_mask(hi - 16));
      continue;
    }
#endif
    block_bf16_portable(mr, kp, ai, lda, p, alpha, acc, ci, ldc, hi);
  }
}

void attn__bf16_gemm(int64_t m, int64_t n, int64_t kp, float alpha,
                     const uint16_t *a, int64_t lda, const uint16_t *b,
                     int64_t bstride, int64_t off, int acc, float *c,
                     int64_t ldc) {
  for (int64_t q = 0; q * NR < off + n; q++) {
    int64_t lo = q * NR > off ? q * NR : off;
    int64_t hi = (q + 1) * NR < off + n ? (q + 1) * NR : off + n;
    panel_bf16(m, lo - q * NR, hi - q * NR, kp, alpha, a, lda, b + q * bstride,
               acc, c + (lo - off), ldc);
  }
}

static int have_bf16(void) {
#ifdef ATTN_GEMM_X86
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") &&
         __builtin_cpu_supports("avx512bf16");
#else
  return 0;
#endif
}

__attribute__((constructor)) static void pick_bf16(void) {
  bf16_kernel = have_bf16() ? BF16_AVX512 : BF16_PORTABLE;
}

const char *attn__bf16_name(void) {
  return bf16_kernel == BF16_AVX512 ? "avx512bf16" : "portable";
}

int attn__set_bf16(const char *name) {
  if (strcmp(name, "portable") == 0) {
    bf16_kernel = BF16_PORTABLE;
    return 1;
  }
  if (strcmp(name, "avx512bf16") == 0 && have_bf16()) {
    bf16_kernel = BF16_AVX512;
    return 1;
  }
  return 0;
}

int attn_engine_bf16_native(void) {
  return have_bf16();
}

const char *attn_engine_bf16_kernel_name(void) {
  return attn__bf16_name();
}

const char *attn_engine_kernel_for(attn_precision p) {
  return p == ATTN_PRECISION_BF16 ? attn__bf16_name() : attn__gemm_name();
}

const char *attn_precision_name(attn_precision p) {
  return p == ATTN_PRECISION_BF16 ? "bf16" : "fp32";
}

int attn_precision_parse(const char *s, attn_precision *p) {
  if (s && strcmp(s, "fp32") == 0) {
    *p = ATTN_PRECISION_FP32;
    return 1;
  }
  if (s && strcmp(s, "bf16") == 0) {
    *p = ATTN_PRECISION_BF16;
    return 1;
  }
  return 0;
}
