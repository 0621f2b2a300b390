/* internal.h - shared internals of the engine (attn__ prefix).  Not a public
 * header: only the engine sources include it. */
#ifndef ATTN_ENGINE_INTERNAL_H
#define ATTN_ENGINE_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "attn/engine.h"
#include "attn/tensor.h"

/* ---- softmax.c: row primitives, vectorised by the compiler, one clone per
 * instruction set chosen at run time.  All take n >= 0. ------------------ */

/* Fused mask pass over one row of scaled scores: s[j] += add[j] (if add),
 * s[j] = -inf where blk_a[j] or blk_b[j] is nonzero (if given).  Returns the
 * row maximum (-inf when every entry is blocked or n == 0). */
float attn__row_mask_max(float *s, int64_t n, const float *add,
                         const uint8_t *blk_a, const uint8_t *blk_b);

/* s[j] = exp(s[j] - m) for j < n; returns the sum in double.  m must be
 * finite.  exp of -inf is 0. */
double attn__row_exp_sum(float *s, int64_t n, float m);

/* s[j] *= f. */
void attn__row_scale(float *s, int64_t n, float f);

/* dst[j] = src[j] * f. */
void attn__row_scale_to(float *dst, const float *src, int64_t n, float f);

/* dst[j] += f * src[j]. */
void attn__row_axpy(float *dst, const float *src, int64_t n, float f);

/* s[j] = cap * tanh(s[j] / cap) (logit soft-capping); cap > 0. */
void attn__row_softcap(float *s, int64_t n, float cap);

/* s[j] -= slope * |d0 + j| (ALiBi; d0 + j is key position minus the
 * query's aligned position, |d0 + j| <= INT_MAX). */
void attn__row_alibi(float *s, int64_t n, float slope, int64_t d0);

/* Rotate one head's first 2 * half values by the angles whose cosines and
 * sines are cs[t], sn[t]: pairs (x[t], x[t + half]) or, interleaved,
 * (x[2t], x[2t + 1]) (see attn_rotary in engine.h). */
void attn__rope(float *x, const float *cs, const float *sn, int64_t half,
                int interleaved);

/* The softcap kernels' tanh, exposed for tests: absolute error below
 * 3.5e-7. */
float attn__tanhf(float x);

/* The vectorisable exp used above, exposed for tests: relative error below
 * 2e-7 on [-87, 0], exactly 0 below -87.33 and for -inf. */
float attn__expf(float x);

/* Name of the row-kernel set in use ("avx512", "avx2", "scalar"). */
const char *attn__kernel_name(void);

/* Use the named kernel set; returns 0 (and changes nothing) when it is
 * unknown or the CPU lacks it.  For tests and benchmarks: call it before
 * engine calls, never during one. */
int attn__set_kernel(const char *name);

/* ---- gemm.c: the attention core's products (AVX-512 kernels, AVX2 ones
 * for small calls, cblas_sgemm beside them as reference and fallback) ---- */

#define ATTN__PANEL 32 /* keys per packed panel */
/* The AVX2 kernels take an NN call of at most this many multiply-adds
 * (m * n * k; OpenBLAS is faster above, see gemm.c). */
#define ATTN__GEMM_AVX2_MAX_WORK 131072.0

/* Floats that attn__pack_nt writes for n rows of k values. */
size_t attn__pack_floats(int64_t n, int64_t k);
/* Pack rows [0, n) of b (k values each, row stride ldb) as panels of 32
 * rows, panel p stored [k][32] (row 32p + j's value i at p[i * 32 + j]),
 * zeros past row n.  panels: attn__pack_floats(n, k) floats, 64-byte
 * aligned. */
void attn__pack_nt(int64_t n, int64_t k, const float *b, int64_t ldb,
                   float *panels);
/* 1 when the NT product takes packed panels (the AVX-512 kernels are in
 * use); 0 means pack nothing and call attn__gemm_nt. */
int attn__gemm_packs(void);
/* c[m, n] = alpha * a[m, k] b^T with b packed (attn__pack_nt) from the row
 * that c's column 0 stands for.  Only when attn__gemm_packs(). */
void attn__gemm_nt_packed(int64_t m, int64_t n, int64_t k, float alpha,
                          const float *a, int64_t lda, const float *panels,
                          float *c, int64_t ldc);
/* c[m, n] = alpha * a[m, k] b[n, k]^T: with the AVX-512 or AVX2 kernels in
 * use and n <= 16, k <= 256 by their tile (the packed path's bits), else by
 * cblas_sgemm. */
void attn__gemm_nt(int64_t m, int64_t n, int64_t k, float alpha, const float *a,
                   int64_t lda, const float *b, int64_t ldb, float *c,
                   int64_t ldc);
/* c[m, n] = a[m, k] b[k, n], plus c's old value when acc.  All > 0.  By
 * the AVX-512 kernels when in use, the AVX2 ones when in use and m * n * k
 * <= ATTN__GEMM_AVX2_MAX_WORK, else cblas_sgemm. */
void attn__gemm_nn(int64_t m, int64_t n, int64_t k, const float *a, int64_t lda,
                   const float *b, int64_t ldb, int acc, float *c, int64_t ldc);
/* "avx512", "avx2" or "blas". */
const char *attn__gemm_name(void);
/* The kernels this thread's fp32 products above ran since the last take,
 * as bits (what attn__gemm_ran_name reads), and none from then on.  A
 * call takes them at its start (dropping what came before) and its end;
 * attn__parallel_for adds its threads' bits to the calling thread's. */
unsigned attn__gemm_ran_take(void);
void attn__gemm_ran_add(unsigned bits);
/* The name of what ran: "avx512", "avx2" or "blas" when one kernel ran
 * every product, "avx512+blas" or "avx2+blas" when some fell through to
 * cblas_sgemm; attn__gemm_name() when no product ran (bits 0). */
const char *attn__gemm_ran_name(unsigned bits);
/* Use "avx512" (returns 0 when the CPU lacks AVX-512F), "avx2" (0 without
 * AVX2 and FMA) or "blas".  The default is the first the CPU has.  For
 * tests and benchmarks: before engine calls, never during one. */
int attn__set_gemm(const char *name);
/* attention.c: whether mha's projections copy input rows that lie a
 * multiple of 4 KiB apart before their tiles read them (1, the default)
 * or read them in place (0: tests compare the two); returns the previous
 * setting.  Not thread-safe: set it before calls. */
int attn__set_proj_copy(int on);

/* ---- gemm.c: bfloat16 products (attn_precision ATTN_PRECISION_BF16) ----
 * Operands are bfloat16 (uint16_t, the top half of an fp32), accumulation
 * fp32.  A right-hand operand is packed into panels of 32 columns, each
 * stored [kpairs][32][2]: pair t of column j holds its inner values 2t and
 * 2t + 1 side by side (zeros past the last column or inner value), the
 * layout vdpbf16ps reads.  A left-hand operand is bf16 rows whose pair t
 * is at row + 2t (row stride even, a zero after an odd last value). */

/* x rounded to bfloat16, to nearest even; NaN stays NaN (quiet), values
 * below FLT_MIN in magnitude (fp32 subnormals) become a signed zero, as
 * vcvtneps2bf16 and vdpbf16ps (DAZ) treat them. */
static inline uint16_t attn__bf16(float x) {
  uint32_t u;
  memcpy(&u, &x, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
  if ((u & 0x7f800000u) == 0) return (uint16_t)((u >> 16) & 0x8000u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}
static inline float attn__bf16_f32(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}
/* x rounded to bfloat16 and back. */
static inline float attn__bf16_round(float x) {
  return attn__bf16_f32(attn__bf16(x));
}

/* uint16_t elements of the panels for n columns of k inner values. */
size_t attn__bf16_pack_elems(int64_t n, int64_t k);
/* Elements from one panel to the next for k inner values. */
static inline int64_t attn__bf16_panel_stride(int64_t k) {
  return (k + 1) / 2 * 2 * ATTN__PANEL;
}
/* Pack n columns of k values: _nt from b[n][k] (column j is row j of b:
 * keys, [out, in] weights), _nn from b[k][n] (values, [in, out]
 * weights); ldb is b's row stride.  Rounded by attn__bf16. */
void attn__bf16_pack_nt(int64_t n, int64_t k, const float *b, int64_t ldb,
                        uint16_t *panels);
void attn__bf16_pack_nn(int64_t n, int64_t k, const float *b, int64_t ldb,
                        uint16_t *panels);
/* The scalar reference of the two (the same bits): the packing of the
 * portable kernel, and what tests compare the vector packing with. */
void attn__bf16_pack_nt_scalar(int64_t n, int64_t k, const float *b,
                               int64_t ldb, uint16_t *panels);
void attn__bf16_pack_nn_scalar(int64_t n, int64_t k, const float *b,
                               int64_t ldb, uint16_t *panels);
/* The same from values already in bfloat16 (a copy, no rounding). */
void attn__bf16_pack_nt_u16(int64_t n, int64_t k, const uint16_t *b,
                            int64_t ldb, uint16_t *panels);
void attn__bf16_pack_nn_u16(int64_t n, int64_t k, const uint16_t *b,
                            int64_t ldb, uint16_t *panels);
/* dst[j] = attn__bf16(src[j]) for j < n (the vector conversion where the
 * fast kernel is in use: the same bits). */
void attn__bf16_convert(const float *src, int64_t n, uint16_t *dst);
/* c[m, n] = alpha * a[m, 2 kp] B (+ c's old value when acc), where B's
 * columns are columns [off, off + n) (off < 32) of the panels b, b +
 * bstride, ...; a's rows have stride lda (even).  Every output is one fp32
 * chain over the pairs in order, each pair adding its odd then its even
 * product (vdpbf16ps's order, checked on Zen 4; the products of bf16
 * values are exact, so each step is one rounding), then times alpha, or
 * fma(sum, alpha, old) when acc: the fast and portable kernels agree bit
 * for bit unless a partial sum falls below FLT_MIN (vdpbf16ps flushes
 * it). */
void attn__bf16_gemm(int64_t m, int64_t n, int64_t kp, float alpha,
                     const uint16_t *a, int64_t lda, const uint16_t *b,
                     int64_t bstride, int64_t off, int acc, float *c,
                     int64_t ldc);
/* "avx512bf16" or "portable". */
const char *attn__bf16_name(void);
/* Use "avx512bf16" (0 when the CPU lacks AVX512-BF16) or "portable".
 * The default is the first the CPU has.  For tests and benchmarks: before
 * engine calls, never during one. */
int attn__set_bf16(const char *name);

/* ---- shared by attention.c and ref.c ----------------------------------- */

/* Copy *in to *p with the self-attention defaults resolved: xk == NULL means
 * xk = xv = xq, Lk = Lq, kdim = vdim = E; xv == NULL means xv = xk and
 * vdim = kdim. */
void attn__mha_normalise(const attn_mha_problem *in, attn_mha_problem *p);

/* Stored row stride of a projection weight with in -> out features. */
int64_t attn__weight_ld(const attn_weight *w, int64_t in, int64_t out);

/* ---- attention.c: checks shared with kv_attend.c ------------------------ */

/* The variants of o (engine.h): causal alignment, window, softcap, ALiBi
 * slopes (H values) and rotary positions on heads of Dh values. */
attn_status attn__check_variants(const attn_attend_opts *o, int64_t H,
                                 int64_t Dh, attn_diag *d);

/* ---- kv_kernels.c: attention over a sequence's KV blocks --------------- */

/* Element i of a block's keys or values stored as dt, as fp32. */
static inline float attn__kv_elem(const void *p, attn_kv_dtype dt, size_t i) {
  const unsigned char *b = (const unsigned char *)p;
  if (dt == ATTN_KV_FP32) {
    float f;
    memcpy(&f, b + 4 * i, 4);
    return f;
  }
  uint16_t h;
  memcpy(&h, b + 2 * i, 2);
  return dt == ATTN_KV_BF16 ? attn_bf16_to_f32(h) : attn_f16_to_f32(h);
}

/* Key (value when v) c of token j, kv head hk, of a view, as stored,
 * widened: the plain readers' access (ref.c, attn_kv_weights). */
static inline float attn__kv_view_elem(const attn_kv_view *w, int64_t j,
                                       int64_t hk, int64_t c, int v) {
  const attn_kv_shape *sh = &w->shape;
  int64_t s = j % ATTN_KV_BLOCK_TOKENS;
  const unsigned char *panel =
      (const unsigned char *)w->blocks[j / ATTN_KV_BLOCK_TOKENS] +
      (size_t)hk * attn_kv_panel_bytes(sh);
  if (v)
    return attn__kv_elem(panel + attn_kv_values_offset(sh), sh->dtype,
                         attn_kv_value_index(sh->dtype, sh->head_dim, s, c));
  return attn__kv_elem(panel, sh->dtype, attn_kv_key_index(sh->dtype, c, s));
}

/* kv_attend.c: the final logits of one query row of query head h (q: D
 * doubles, turned) standing at pos, over the keys of view w it sees
 * (engine.h's order: scale, softcap, ALiBi; causal and window by range),
 * in double: sc[j - *lo] for j in [*lo, *hi] (*hi < *lo when none).
 * Returns their maximum (-inf when none).  ref.c and attn_kv_weights. */
double attn__kv_row_logits(const attn_kv_problem *p, const attn_kv_view *w,
                           int64_t h, int64_t pos, const double *q,
                           double scale, double *sc, int64_t *lo, int64_t *hi);

/* One chunk of query rows of one sequence and nheads consecutive kv heads
 * against blocks [blk0, blk1) of the sequence, continuing an online
 * softmax whose state the rows carry: m (running max), l (16 lane sums
 * each) and o (the unnormalised output).  Each head has `rows` rows, head
 * h's at [h * rows, h * rows + rows) of every array; row r sees keys
 * [lo[r], hi[r]] (absolute positions) and stands at pos[r] (ALiBi's
 * distance).  For each block the heads are taken in order (their panels
 * are consecutive in the block), and a head's rows 4 at a time (a tile:
 * one load of a key or value row serves the tile).  A row's arithmetic
 * depends only on its head's rows and the blocks, never on nheads. */
typedef struct attn__kv_job {
  const void *const *blocks;
  size_t head_off; /* bytes from a block to the first head's panel */
  size_t panel;    /* bytes of one head's panel (attn_kv_panel_bytes) */
  size_t voff;     /* bytes from a panel to its values */
  int64_t D, nheads;
  attn_kv_dtype dtype;
  int64_t blk0, blk1, rows;
  const float *q; /* [nheads * rows][D], rotated */
  float *o;       /* [nheads * rows][D] */
  float *m;       /* [nheads * rows] */
  float *l;       /* [nheads * rows][16] */
  const int64_t *lo, *hi, *pos;
  const float *slope; /* [nheads * rows] ALiBi slopes, or NULL */
  float scale, softcap;
  float *pbuf; /* scratch: [2][4][16] probabilities, [16] scores */
} attn__kv_job;

void attn__kv_run(const attn__kv_job *j);
/* "avx512", "avx2" or "scalar" (the portable kernel, plain C: the
 * straightforward path the tests hold the vector ones against). */
const char *attn__kv_kernel_name(void);
/* Use the named kernel set; 0 (nothing changed) when unknown or the CPU
 * lacks it.  For tests and benchmarks: before engine calls. */
int attn__kv_set_kernel(const char *name);
/* Bytes of keys and values a decode step reads per thread it takes
 * (kv_attend.c, 1 MiB; 0: every thread it is given, whatever its size).
 * Returns the value before.  For tests: before engine calls. */
double attn__kv_set_step_bytes(double bytes);

/* ---- parallel.c-like helper in attention.c --------------------------- */
typedef void (*attn__unit_fn)(void *ctx, int64_t unit, int tid);
/* Run fn(ctx, u, tid) for every u in [0, n_units) on up to `threads`
 * threads (the caller's included); tid < threads indexes per-thread scratch.
 * Units are taken in order from a shared counter.  If threads cannot be
 * started the caller's thread does the rest: never fails.  The kernels the
 * started threads' products ran are added to the caller's
 * (attn__gemm_ran_add). */
void attn__parallel_for(int threads, int64_t n_units, attn__unit_fn fn,
                        void *ctx);

#endif
