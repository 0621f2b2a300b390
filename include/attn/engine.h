/* engine.h - exact multi-head attention on OpenBLAS.
 *
 * The engine knows nothing of HTTP, JSON or worker pools: it takes fp32
 * row-major views, validates them, computes, and returns a status.  It links
 * only OpenBLAS, libm and the C library (threads included).
 *
 * Conventions
 *  - All matrices are row-major fp32.  A head is a pointer plus strides into a
 *    larger matrix, never a copy: Q projected to [L, H*D] gives head h at
 *    column block h (sh = D, ld = H*D).
 *  - Grouped-query attention: with H query heads and Hkv key/value heads
 *    (H % Hkv == 0), query head h reads key/value head h / (H / Hkv).
 *  - Positions: i is the query row (0..Lq-1), j the key row (0..Lk-1), and
 *    offset = Lk - Lq aligns the last query with the last key.  Causal
 *    masking is aligned to the bottom-right corner by default (causal = 1,
 *    FlashAttention 2.1+): query i may attend key j iff j <= i + offset.
 *    The variants of attn_attend_opts (top-left causal, sliding window,
 *    ALiBi, softcap, rotary positions) are defined exactly there.
 *  - MASK POLARITY.  A boolean mask here is TRUE = BLOCKED (the key is not
 *    attended), the convention of PyTorch nn.MultiheadAttention's attn_mask
 *    and key_padding_mask.  It is the OPPOSITE of
 *    torch.nn.functional.scaled_dot_product_attention, whose boolean attn_mask
 *    is TRUE = ATTEND.  An fp32 mask is added to the scaled scores; -inf in it
 *    blocks, NaN and +inf are rejected (ATTN_ENONFINITE).
 *  - A query row whose keys are all blocked produces output 0 and weights 0,
 *    never NaN.
 *  - NaN or +-Inf in activations, weights or biases: ATTN_ENONFINITE, with the
 *    tensor named in the diagnostic.  Nothing is computed.
 *  - Threads: attn_exec.threads says how many threads one call may use.  The
 *    engine spreads work over its own threads, each calling single-threaded
 *    sgemm; OpenBLAS's process-wide thread count is changed only through
 *    attn_engine_set_blas_threads(), which callers should set to 1 when they
 *    run several engine calls at once (Debian 12's OpenBLAS 0.3.21 has no
 *    per-call thread setting).
 *
 * Every function is thread-safe: calls share no mutable state except
 * OpenBLAS's global thread count.
 */
#ifndef ATTN_ENGINE_H
#define ATTN_ENGINE_H

#include <stddef.h>
#include <stdint.h>

#include "attn/kv.h"
#include "attn/status.h"

/* Read-only 4-d view [B][H][L][D]: element (b,h,i,d) is at
 * data[b*sb + h*sh + i*ld + d].  The last dimension is contiguous. */
typedef struct attn_view {
  const float *data;
  int64_t sb, sh, ld;
} attn_view;

/* Writable 4-d view, same layout rules. */
typedef struct attn_mview {
  float *data;
  int64_t sb, sh, ld;
} attn_mview;

typedef enum {
  ATTN_MASK_NONE = 0,
  ATTN_MASK_BOOL, /* uint8_t, nonzero = blocked */
  ATTN_MASK_ADD   /* float, added to the scaled scores; -inf = blocked */
} attn_mask_kind;

/* attn_mask: contiguous [mb, mh, Lq, Lk] where mb is 1 or B and mh is 1 or H
 * (size-1 dimensions broadcast).  A [Lq, Lk] mask is mb = mh = 1. */
typedef struct attn_mask {
  attn_mask_kind kind;
  const void *data;
  int64_t mb, mh;
} attn_mask;

typedef enum {
  ATTN_KPM_NONE = 0,
  ATTN_KPM_BOOL,   /* pad: uint8_t [B, Lk], nonzero = padding key (ignored) */
  ATTN_KPM_LENGTHS /* lengths: int64_t [B]; keys j >= lengths[b] are padding */
} attn_kpm_kind;

typedef struct attn_key_padding {
  attn_kpm_kind kind;
  const uint8_t *pad;
  const int64_t *lengths;
} attn_key_padding;

typedef enum {
  ATTN_WEIGHTS_NONE = 0,
  ATTN_WEIGHTS_PER_HEAD, /* [B, H, Lq, Lk] */
  ATTN_WEIGHTS_MEAN /* [B, Lq, Lk], mean over heads (average_attn_weights) */
} attn_weights_mode;

/* Causal alignment (attn_attend_opts.causal).  offset = Lk - Lq. */
typedef enum {
  ATTN_CAUSAL_NONE = 0,
  ATTN_CAUSAL_BOTTOM_RIGHT = 1, /* j <= i + offset (FlashAttention 2.1+) */
  ATTN_CAUSAL_TOP_LEFT = 2      /* j <= i (PyTorch's is_causal) */
} attn_causal;

/* Rotary position embedding (RoPE, Su et al. 2021), applied to every query
 * and key head: to the given q and k (sdpa, on the engine's own copies; the
 * caller's inputs are never written) or to the projections (mha, in place
 * in the engine's buffers), never to the values.  With R = dims, the pairs
 * (x_a, x_b) of a head's first R values are rotated by the angle
 * pos * base^(-2t/R), t = 0..R/2-1:
 *   x_a' = x_a cos - x_b sin,   x_b' = x_b cos + x_a sin
 * where (a, b) = (t, t + R/2) (NeoX / Llama halves, interleaved = 0) or
 * (2t, 2t + 1) (GPT-J pairs, interleaved = 1); values R..D-1 are unchanged.
 * The head dim is Dk for sdpa, E / H for mha.  Key j has position j; query
 * i has position query_offset + i.  Angles are computed in double. */
typedef struct attn_rotary {
  int on;               /* 0: no rotary positions (the other fields unused) */
  int interleaved;      /* 0: NeoX halves, 1: GPT-J pairs */
  int64_t dims;         /* R: even, <= the head dim; 0 = the head dim */
  double base;          /* > 1, finite; 0 = 10000 */
  int has_query_offset; /* 0: query_offset = Lk - Lq */
  int64_t query_offset; /* |query_offset| <= INT_MAX */
} attn_rotary;

/* Arithmetic of a call (attn_attend_opts.precision).
 * ATTN_PRECISION_BF16: the operands of every matrix product are rounded to
 * bfloat16 (round to nearest even; fp32 subnormals become 0): for sdpa q,
 * k (after rotary) and v; for mha the inputs xq, xk, xv, the four
 * projection weights, the projected Q, K (after bias and rotary) and V,
 * and the heads' output before W_O.  The softmax probabilities enter P V
 * rounded to bfloat16: the materialised path rounds the normalised
 * probabilities; the streaming path rounds exp(s - running max) and
 * divides its fp32 output by the row's sum (in double, of the unrounded
 * values) at the end, so the two differ by bf16 roundings.  Every product
 * accumulates in fp32; scaling, softcap, ALiBi, masks, biases and the
 * softmax are fp32 as in ATTN_PRECISION_FP32; outputs and weights are fp32
 * (the weights are the unrounded probabilities).  A fully blocked row
 * still gives output 0 and weights 0.
 * Bound (tests/test_engine.c, on random inputs of magnitude <= 1 and head
 * dims <= 128, against the double reference of the unrounded problem):
 * outputs within 1e-2 x (1 + |ref|), weights within 4e-3.
 * Kernels: vdpbf16ps where the CPU has AVX512-BF16, else a portable kernel
 * with the same rounding and summation order (the same bits, unless a
 * partial sum falls below FLT_MIN, which vdpbf16ps flushes to 0) and no
 * speed-up.  attn_engine_kernel_for() names the kernel in use,
 * attn_exec.kernel the kernel one call ran. */
typedef enum {
  ATTN_PRECISION_FP32 = 0, /* fp32 throughout (the default) */
  ATTN_PRECISION_BF16 = 1  /* bf16 operands, fp32 accumulation */
} attn_precision;

/* Options shared by sdpa and mha.  Zero-initialised is plain attention.
 * A score is built in this order, for query head h, query i, key j:
 *   s = scale * q_i . k_j                    (q, k after rotary, if on)
 *   s = softcap * tanh(s / softcap)          (if softcap > 0)
 *   s += -alibi_slopes[h] * |j - (i + offset)|   (if alibi_slopes)
 *   s += attn_mask[i, j]                     (ATTN_MASK_ADD)
 *   s = -inf where key j is not visible from query i:
 *     causal = 1 and j > i + offset; causal = 2 and j > i;
 *     has_window and window_left >= 0 and j < i + offset - window_left;
 *     has_window and window_right >= 0 and j > i + offset + window_right;
 *     a boolean attn_mask, key_padding_mask or key length blocks it.
 * then softmax over j and the weighted sum of values.  A row with no
 * visible key gives output 0 and weights 0.  Keys outside the causal /
 * window band are never computed: the cost of a windowed call grows with
 * Lq x (window_left + window_right + 1), not Lq x Lk.
 * Invalid (ATTN_EINVAL, with the reason): causal other than 0, 1, 2; a
 * window bound below -1; window_right > 0 with causal (causal already hides
 * the keys right of the diagonal: use 0 or -1); softcap negative or not
 * finite; a slope that is not finite; rotary dims odd, negative or larger
 * than the head dim (or, with dims = 0, an odd head dim), base <= 1 or not
 * finite (0 = default), |query_offset| > INT_MAX; a precision other than
 * ATTN_PRECISION_FP32 and ATTN_PRECISION_BF16. */
typedef struct attn_attend_opts {
  int causal;           /* attn_causal: 0 none, 1 bottom-right, 2 top-left */
  int has_scale;        /* 0: scale = 1/sqrt(Dk) */
  float scale;          /* used when has_scale; must be finite */
  attn_mask mask;       /* optional attn_mask */
  attn_key_padding kpm; /* optional key_padding_mask or key lengths */
  attn_weights_mode weights;
  /* Sliding window (FlashAttention's window_size): when has_window, key j
   * is visible from query i iff
   *   i + offset - window_left <= j <= i + offset + window_right,
   * a bound of -1 being unbounded on that side. */
  int has_window;
  int64_t window_left, window_right;
  /* ALiBi (Press et al. 2022): one slope per query head (H floats), or
   * NULL.  attn_alibi_slopes() gives the standard ones. */
  const float *alibi_slopes;
  float softcap; /* > 0: logit soft-capping (Gemma 2: 50); 0 = off */
  attn_rotary rotary;
  /* ATTN_PRECISION_FP32 (0) or ATTN_PRECISION_BF16 (see attn_precision).
   * An option of the problem rather than of attn_exec because it changes
   * the answer, not only how it is computed: the reference kernels
   * (attn_ref_*) read it too and round the same way. */
  attn_precision precision;
} attn_attend_opts;

/* The standard ALiBi slopes for H heads (Press et al., the reference
 * get_slopes): for H a power of 2, slope_h = 2^(-8 (h + 1) / H); otherwise,
 * with P the largest power of 2 below H, the P slopes for P heads followed
 * by the first H - P of the even-indexed slopes for 2P heads,
 * 2^(-8 (2k + 1) / (2P)).  Returns ATTN_EINVAL when H < 1 or H > INT_MAX. */
attn_status attn_alibi_slopes(int64_t H, float *slopes, attn_diag *d);

typedef enum {
  ATTN_PATH_AUTO = 0,     /* materialised iff weights are wanted */
  ATTN_PATH_MATERIALISED, /* scores -> softmax -> sgemm with V */
  ATTN_PATH_STREAMING     /* key tiles with online softmax; no weights */
} attn_path;

/* How to run one call.  Zero-initialised is valid (1 thread, auto path). */
typedef struct attn_exec {
  int threads; /* threads this call may use; <= 0 means 1 */
  attn_path path;
  int tile_q; /* query rows per work unit; 0 = engine default */
  int tile_k; /* keys per streaming tile; 0 = engine default */
  /* When not NULL, a successful attn_sdpa or attn_mha sets *kernel to the
   * kernel its matrix products ran on, a static string: for bf16
   * attn_engine_bf16_kernel_name(); for fp32 "avx512", "avx2" or "blas"
   * when that one ran every product, "avx512+blas" or "avx2+blas" when
   * some ran on the engine's own kernels and the rest on OpenBLAS's
   * cblas_sgemm (shapes those kernels do not take: with AVX-512 the
   * scores or a projection of fewer than 32 rows over more than 16 keys
   * or outputs; with AVX2 also every product of more than 131072
   * multiply-adds); attn_engine_kernel_for(fp32) when no product ran.
   * For a response's timing: each product sets a bit, read per call. */
  const char **kernel;
} attn_exec;

/* Scaled dot-product attention on views.
 * q [B,H,Lq,Dk], k [B,Hkv,Lk,Dk], v [B,Hkv,Lk,Dv]. */
typedef struct attn_sdpa_problem {
  int64_t B, H, Hkv, Lq, Lk, Dk, Dv;
  attn_view q, k, v;
  attn_attend_opts o;
} attn_sdpa_problem;

/* Bytes a problem needs, computed with overflow checks and without touching
 * tensor data: `workspace` is what the engine allocates internally during the
 * call (for `threads` threads), `out` and `weights` what the caller must
 * provide.  Returns ATTN_ETOOBIG if a size overflows size_t. */
typedef struct attn_bytes {
  size_t workspace, out, weights;
} attn_bytes;

/* Validate shapes and options only (no data is read).
 * Returns ATTN_OK, ATTN_EINVAL or ATTN_ESHAPE with a diagnostic naming the
 * dimension. */
attn_status attn_sdpa_check(const attn_sdpa_problem *p, attn_diag *d);
attn_status attn_sdpa_bytes(const attn_sdpa_problem *p, const attn_exec *x,
                            attn_bytes *b, attn_diag *d);

/* Compute softmax(q k^T * scale + mask) v into out (B,H,Lq,Dv view) and, when
 * p->o.weights is not NONE, the weights into `weights` (contiguous, shape as
 * described by attn_weights_mode).  On failure the outputs may have been
 * partially written and nothing stays allocated. */
attn_status attn_sdpa(const attn_sdpa_problem *p, const attn_exec *x,
                      attn_mview out, float *weights, attn_diag *d);

/* Projection weights.  IN_OUT: stored [in, out] row-major (textbook X @ W);
 * OUT_IN: stored [out, in] (PyTorch state_dict), used through transposed
 * sgemm.  ld is the stored row stride (0 = packed: out for IN_OUT, in for
 * OUT_IN), so a block of PyTorch's packed in_proj_weight is a pointer offset.
 */
typedef enum { ATTN_W_IN_OUT = 0, ATTN_W_OUT_IN } attn_wlayout;
/* bf16: the same matrix stored as bfloat16 bits (same layout and ld), or
 * NULL.  A bf16 call reads bf16 when it is set (no rounding: a weight kept
 * in bfloat16, half the memory); data may then be NULL, and an fp32 call
 * of such a weight is ATTN_EINVAL.  When both are set, bf16 must hold data
 * rounded to nearest even (what a bf16 call would round data to). */
typedef struct attn_weight {
  const float *data;
  attn_wlayout layout;
  int64_t ld;
  const uint16_t *bf16;
} attn_weight;

/* Multi-head attention with projections.
 *   Q = xq Wq + bq   [B,Lq,E] x [E, E]          -> H heads of Dh = E/H
 *   K = xk Wk + bk   [B,Lk,kdim] x [kdim, Hkv*Dh]
 *   V = xv Wv + bv   [B,Lk,vdim] x [vdim, Hkv*Dh]
 *   out = concat_h(attention_h) Wo + bo           [B,Lq,E]
 * xq, xk, xv are contiguous row-major.  xk == NULL: self-attention (xk = xv =
 * xq, Lk = Lq, kdim = vdim = E).  xv == NULL with xk set: xv = xk.
 * Biases may be NULL.  E % H == 0 and H % Hkv == 0. */
typedef struct attn_mha_problem {
  int64_t B, Lq, Lk, E, H, Hkv, kdim, vdim;
  const float *xq, *xk, *xv;
  attn_weight wq, wk, wv, wo;
  const float *bq, *bk, *bv, *bo;
  attn_attend_opts o;
} attn_mha_problem;

attn_status attn_mha_check(const attn_mha_problem *p, attn_diag *d);
attn_status attn_mha_bytes(const attn_mha_problem *p, const attn_exec *x,
                           attn_bytes *b, attn_diag *d);

/* out: contiguous [B, Lq, E]; weights as in attn_sdpa.  Self-attention
 * requires Lk == Lq (it is set from Lq when xk is NULL). */
attn_status attn_mha(const attn_mha_problem *p, const attn_exec *x, float *out,
                     float *weights, attn_diag *d);

/* FLOPs of a call as counted for the sgemm bound: projections
 * 2*B*(Lq*E*E + Lk*kdim*Hkv*Dh + Lk*vdim*Hkv*Dh + Lq*E*E) and attention
 * 2*B*H*Lq*Lk*(Dk+Dv) (causal not discounted). */
double attn_mha_flops(const attn_mha_problem *p);
double attn_sdpa_flops(const attn_sdpa_problem *p);

/* The one place OpenBLAS's process-wide thread count is changed.  Call it
 * once at start-up (the server sets 1: parallelism belongs to the engine).
 * Not thread-safe against concurrent sgemm calls. */
void attn_engine_set_blas_threads(int n);
int attn_engine_blas_threads(void);

/* The kernels OpenBLAS chose when it loaded ("Haswell", "SkylakeX",
 * "Prescott", ...: openblas_get_corename()).  Any thread. */
const char *attn_engine_blas_core(void);

/* The OPENBLAS_CORETYPE that suits this CPU when OpenBLAS runs kernels far
 * below it, else NULL.  OpenBLAS before 0.3.25 (Debian 12 has 0.3.21)
 * falls back to its "Prescott" (SSE3) kernels on x86 CPUs newer than it
 * (Raptor Lake, Emerald Rapids, Zen 5, ...), about 5x slower.  Returns
 * "SkylakeX" when the CPU has AVX-512 F, CD, BW, DQ and VL, "Haswell" when
 * it has AVX2 and FMA, NULL otherwise or when OpenBLAS already runs AVX2 or
 * AVX-512 kernels.  OpenBLAS reads OPENBLAS_CORETYPE only when it loads:
 * acting on the answer is the program's (attnd's main re-executes itself).
 * Any thread. */
const char *attn_engine_blas_better_core(void);

/* Name of the row max / exp kernels chosen at start-up from the CPU:
 * "avx512", "avx2" or "scalar". */
const char *attn_engine_kernel_name(void);

/* 1 when this CPU has AVX512-BF16 (vdpbf16ps): bf16 calls then run the
 * fast kernel, else the portable one.  Any thread. */
int attn_engine_bf16_native(void);

/* The kernel that bf16 calls use: "avx512bf16" or "portable". */
const char *attn_engine_bf16_kernel_name(void);

/* The matrix-product kernel in use for precision p: for
 * ATTN_PRECISION_BF16 attn_engine_bf16_kernel_name(), for fp32 gemm.c's
 * "avx512", "avx2" or "blas" (OpenBLAS for every product).  An fp32 call
 * may still run some products on OpenBLAS (shapes its own kernels do not
 * take): attn_exec.kernel names what one call actually ran. */
const char *attn_engine_kernel_for(attn_precision p);

/* "fp32" or "bf16", the names requests and model files use. */
const char *attn_precision_name(attn_precision p);
/* *p from "fp32" or "bf16" (exactly); 0 for anything else (NULL too). */
int attn_precision_parse(const char *s, attn_precision *p);

/* ---- Sessions: attention over a sequence's KV blocks ----------------------
 * A decode or prefill step of B sequences (include/attn/kv.h: one layer of
 * a session each) that share H query heads, Hkv key/value heads (H % Hkv
 * == 0: query head h reads kv head h / (H / Hkv)), head dim D and the
 * storage dtype.  The step's keys and values are appended to each
 * sequence first (attn_kv_encode, then attn_kv_seq_append); then query row
 * i (0..t-1) of sequence b stands at absolute position
 *   pos = len_b - t + i       (len_b = kv[b].len, the step included)
 * and sees the keys at positions j <= pos (causal, bottom-right), and j >=
 * pos - window_left with a window.  With queries_only, nothing was
 * appended: every row stands at pos = len_b (where the next token would)
 * and sees every cached token (within the window).
 * Options (attn_attend_opts, as for sdpa): causal must be
 * ATTN_CAUSAL_BOTTOM_RIGHT; scale, window (right bound 0 or -1),
 * alibi_slopes (H), softcap and rotary as engine.h defines them, with the
 * positions above: rotary turns each query at its pos and each key at its
 * own position when it is encoded (keys are stored turned;
 * rotary.has_query_offset must be 0); ALiBi's distance is |j - pos|.  No
 * mask, key padding or weights; precision FP32: the storage dtype is the
 * view's, and arithmetic is fp32 throughout (bf16 and fp16 values are
 * widened exactly).
 * Outputs: out [B][t][H][D] and lse [B][t][H], fp32.  lse is the natural
 * log of the sum of exp over the row's final logits (after scale, softcap,
 * ALiBi and masking), as FlashAttention's softmax_lse: answers over
 * disjoint keys merge by it.  A row that sees no key (queries_only with
 * an empty sequence or a window of 0) gives output 0 and lse -inf
 * (log 0; FlashAttention 2 writes +inf there).
 * Work: one unit per (sequence, kv head), each read once for all H / Hkv
 * heads of its group, keys in block order, in one thread (any); so a
 * sequence's answer is bitwise the same alone or in any batch, at any
 * batch position, on any thread count, on every repeat, for a given
 * kernel set (attn_engine_kv_kernel_name).  Blocks are read in order;
 * softmax is online (FlashAttention 2), per block of 16 keys. */
typedef struct attn_kv_problem {
  int64_t B, t, H, Hkv, D;
  attn_kv_dtype dtype;
  const attn_kv_view *kv; /* [B], each of shape {Hkv, D, dtype} */
  const float *q;         /* [B][t][H][D], not rotated */
  int queries_only;
  attn_attend_opts o;
} attn_kv_problem;

/* Shapes, views and options, no data read.  ATTN_EINVAL, ATTN_ESHAPE
 * (naming the sequence and the dimension). */
attn_status attn_kv_check(const attn_kv_problem *p, attn_diag *d);
/* The workspace a call allocates for `threads` threads; out and weights:
 * the caller's out (floats x 4) and lse bytes. */
attn_status attn_kv_bytes(const attn_kv_problem *p, const attn_exec *x,
                          attn_bytes *b, attn_diag *d);
/* out [B][t][H][D], lse [B][t][H].  Non-finite queries: ATTN_ENONFINITE,
 * nothing written.  x->threads threads at most (path, tiles ignored); a
 * decode step (t x H / Hkv < 16 rows per kv head) takes one per 4 MiB of
 * keys and values it reads (a thread's start costs what it would save). */
attn_status attn_kv_attend(const attn_kv_problem *p, const attn_exec *x,
                           float *out, float *lse, attn_diag *d);

/* The new rows of a step, fp32, [t][Hkv][D] each, the first at absolute
 * position pos0. */
typedef struct attn_kv_rows {
  int64_t t, Hkv, D;
  attn_kv_dtype dtype;
  int64_t pos0;
  const float *k, *v;
} attn_kv_rows;

/* The rows as a sequence stores them: keys turned by o->rotary (only that
 * option is read) at their positions, then both rounded to the dtype
 * (nearest even, as attn_f32_to_f16 / attn_f32_to_bf16); k_out, v_out
 * [t][Hkv][D] elements, ready for attn_kv_seq_append.  The same rows and
 * position always give the same bytes (a retried step can be compared
 * with what is stored).  ATTN_ENONFINITE for NaN or Inf, ATTN_EINVAL for
 * a value beyond fp16's range (|x| >= 65520) when the dtype is fp16, each
 * naming the tensor and the index; nothing is written then. */
attn_status attn_kv_encode(const attn_kv_rows *r, const attn_attend_opts *o,
                           void *k_out, void *v_out, attn_diag *d);

/* The attention probabilities of a step (attn_kv_attend's problem, the
 * step's tokens already appended, or queries_only): for each sequence b in
 * batch order, a block of [H][t][len_b] floats (len_b = kv[b].len), the
 * blocks one after another; weight [h][i][j] is exp(s_ij - lse_i) with
 * s_ij the final logit of query row i, head h and key j (rotary-turned
 * query, scale, softcap, ALiBi, then the causal and window masks, in the
 * kernels' order), 0 for a key the row does not see.  Scalar and plain:
 * logits and sums in double over the stored values (widened exactly),
 * the queries turned as the kernels turn them; for the few rows a client
 * asks weights for, not for speed.  Checks as attn_kv_check; ATTN_ENOMEM.
 */
attn_status attn_kv_weights(const attn_kv_problem *p, float *w, attn_diag *d);

/* The kernel set attn_kv_attend uses: "avx512", "avx2" or "scalar". */
const char *attn_engine_kv_kernel_name(void);

/* ---- Reference kernels (src/engine/ref.c) --------------------------------
 * Plain, unblocked, double-precision implementations of the same contracts,
 * used by tests and benchmarks to check the fast paths.  With
 * o.precision = ATTN_PRECISION_BF16 they round as attn_precision says
 * (rotary applied in double before the rounding; the probabilities
 * normalised, then rounded, for P V), accumulating in double: the scalar
 * reference of the bf16 kernels.  out is contiguous
 * [B,H,Lq,Dv] (sdpa) or [B,Lq,E] (mha); weights as above or NULL. */
attn_status attn_ref_sdpa(const attn_sdpa_problem *p, double *out,
                          double *weights, attn_diag *d);
attn_status attn_ref_mha(const attn_mha_problem *p, double *out,
                         double *weights, attn_diag *d);
/* attn_kv_attend in double, from the values the blocks hold (widened
 * exactly), queries turned in double: out [B][t][H][D], lse [B][t][H]. */
attn_status attn_ref_kv_attend(const attn_kv_problem *p, double *out,
                               double *lse, attn_diag *d);

#endif /* ATTN_ENGINE_H */
