/* attention.c - scaled dot-product and multi-head attention.
 *
 * DESIGN
 * Work is cut into units of (batch b, head h, block of tile_q query rows);
 * units are independent, so they run on attn__parallel_for threads without
 * locks, each with its own scratch, and each calls single-threaded matrix
 * products: gemm.c's AVX-512 kernels where the CPU has them, else (and for
 * the shapes those do not take) OpenBLAS's cblas_sgemm.  For the scores
 * product the keys of each (b, key head) are packed once, before the units
 * run, when the query has at least PACK_MIN_ROWS rows per head; for the
 * streaming path's P V product the values too (rows of Dv floats side by
 * side), and each streaming unit copies its query rows into its scratch
 * when heads sit side by side (issue 45: rows H * D floats apart strode
 * over a page every few rows and, 4 KiB apart, put a register tile's rows
 * in one set of L1).
 * The bits a unit produces do not depend on which thread ran it, so results
 * are identical from run to run.  Which kernels a call's products ran
 * (gemm.c's thread-local bits, handed to the calling thread by
 * attn__parallel_for) is taken at the call's start and end and named in
 * attn_exec.kernel (report_kernel).
 *
 * Two paths compute a unit:
 *  - materialised (weights wanted): S = scale * Q_blk K^T, written
 *    straight into the caller's weights when it wants them per head; a fused
 *    pass adds masks and finds the row max, a second takes exp and the double
 *    sum, a third normalises; then O_blk = P V.
 *  - streaming (no weights): keys are taken tile_k at a time.  For each tile
 *    S = scale * Q_blk K_tile^T, and an online softmax keeps per row the
 *    running max m and sum l: when m grows, l and the partial output are
 *    rescaled by exp(m_old - m_new); O += P V_tile.  At the end O /= l.
 *    Extra memory is O(tile_q * (tile_k + Dv)) per thread.
 * In both, a causal, window or key-length limit bounds the keys a block
 * can see: each query row sees a band [row_vbeg, row_end) whose ends never
 * decrease with the row, and columns (or whole key tiles) outside the band
 * of a block's rows are never computed.  With a window's left bound the
 * streaming path takes WINDOW_ROWS rows at a time over their own band, so
 * a windowed call costs Lq x (window + WINDOW_ROWS), not Lq x Lk.  A row
 * with no visible key yields 0 output and 0 weights.
 * The score variants are row passes before the masks: softcap (a rational
 * tanh, per kernel set in softmax.c) and ALiBi's distance bias.  Rotary
 * positions rotate q and k before the core: in engine-owned copies for
 * sdpa, in the projection buffers for mha (each chunk of rows as soon as
 * it is projected), from cos / sin tables built once per call.
 *
 * Multi-head attention projects Q, K and V over row chunks (weights stored
 * [out, in] are packed once for the NT kernel, or go to cblas_sgemm through
 * CblasTrans), runs the core on head views into the projections (head h =
 * column block h), writing each head's output over its own Q block (no
 * longer needed), then projects that concatenation with W_O.  Peak extra
 * memory: Q, K, V projections, the per-thread scratch, and the packed keys
 * (as large as K) or a packed weight.  attn_mha runs these as stages
 * (mha_prepare: every check; mha_alloc; mha_project_in; mha_attend;
 * mha_project_out; mha_free); plan_core plans the core for both entries.
 *
 * bf16 (attn_precision): the same units and passes; the products read
 * bf16 operands (gemm.c): keys and values packed per (b, key head) into
 * bf16 panels before the units run (always, whatever the shape, and no
 * per-unit band packing), each unit's query rows and each group's
 * probabilities rounded into its thread's scratch, values paired from an
 * even key (a zero before an odd first key).  mha packs its four weights
 * into bf16 panels on every call (copied, not rounded, from a weight held
 * in bfloat16: attn_weight.bf16) and rounds each chunk's input rows;
 * rotary is applied to the fp32 q and k, which are rounded after it.
 * Scores, masks, softmax and outputs stay fp32, so the fp32 code is
 * unchanged and fp32 calls give the same bits as before.
 *
 * Invariants: every public entry validates shapes (attn_*_check) and values
 * (non-finite scan) before allocating or computing; allocation happens
 * before any thread starts, so the parallel part cannot fail.
 */
#include <cblas.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "attn/engine.h"
#include "attn/tensor.h"
#include "internal.h"

/* Query rows per unit: taller blocks pack each key/value tile (streaming)
 * or key block (materialised) once for more rows.  Measured at n=2048,
 * d=512, h=8, 1 thread: streaming 256 rows 2-4% faster than 128;
 * materialised (per-head weights) 256 rows 119.4 ms, 128 rows 122.7, 384
 * 119.5, 512 122.2, and 256 no slower at n=512 and n=4096. */
#define TILE_Q_STREAMING 256
#define TILE_Q_MATERIALISED 256
#define TILE_K_DEFAULT 512 /* keys per streaming tile */
/* Rows per sgemm where a causal diagonal crosses a tile: each group of rows
 * computes only the keys its last row can see.  At n=2048, h=8, d=64, 1
 * thread this takes the causal/non-causal time of the core from 0.57 to
 * 0.54 (causal 45.1 ms; 32 rows 45.7 ms, 128 rows 46.6 ms). */
#define DIAG_ROWS 64
/* Rows per group in the materialised path: the group's scores (24 x Lk
 * floats) stay in L2 from the scores product through the softmax passes to
 * P V.  n=2048 d=512 h=8 per-head weights, 1 thread: all 256 rows of a
 * unit at once 85.1 ms, 128 rows 89.5, 64 rows 81.0, 32 rows 66.7, 24 rows
 * 62.7, 12 rows 64.7; n=4096 d=1024 h=16: 256 rows 882 ms, 32 rows 705, 24
 * rows 703, 48 rows 821. */
#define MAT_ROWS 24
/* Rows per group in the streaming path when a window bounds the keys on
 * the left: each group computes its rows' band, WINDOW_ROWS + window keys
 * wide (plus up to 31 to start on a packed panel) for window + 1 useful
 * ones per row.  One 12-row register block (gemm.c's tile): at n = 16384,
 * window [256, 0], h = 8, d = 64, 1 thread, on a heavily loaded machine,
 * the fastest of 8 calls in three alternating runs took 332, 332 and 237
 * ms with 12 rows against 445, 353 and 306 with 24 (6, 16 and 48 rows
 * were not told apart from these by the noise). */
#define WINDOW_ROWS 12
/* Query rows per head from which the keys are packed for the AVX-512 NT
 * kernel (below, attn__gemm_nt computes the scores unpacked: its own
 * 16-key tile up to 16 keys, else cblas_sgemm). */
#define PACK_MIN_ROWS 32
/* Input rows this many floats apart (or a multiple) are copied for the
 * projections' tiles (proj_ctx.xf). */
#define PROJ_ALIAS_LD 1024
#define PROJ_ROWS \
  128 /* rows per projection sgemm chunk (balances 2 threads at n=512) */
#define MAX_THREADS 64      /* upper bound on threads of one call */
#define SMALL_CALL_WORK 2e6 /* B*H*Lq*Lk*Dv below which one thread runs */

/* ---- parallel_for ------------------------------------------------------ */

typedef struct pf_shared {
  attn__unit_fn fn;
  void *ctx;
  int64_t n;
  atomic_llong next;
  atomic_uint ran; /* the started threads' gemm kernels (attn__gemm_ran_*) */
} pf_shared;

typedef struct pf_arg {
  pf_shared *sh;
  int tid;
} pf_arg;

static void pf_loop(pf_shared *sh, int tid) {
  for (;;) {
    int64_t u = atomic_fetch_add(&sh->next, 1);
    if (u >= sh->n) break;
    sh->fn(sh->ctx, u, tid);
  }
}

static void *pf_thread(void *a) {
  pf_arg *p = a;
  pf_loop(p->sh, p->tid);
  atomic_fetch_or(&p->sh->ran, attn__gemm_ran_take());
  return NULL;
}

static int clamp_threads(int threads, int64_t units) {
  if (threads < 1) threads = 1;
  if (threads > MAX_THREADS) threads = MAX_THREADS;
  if (units < threads) threads = units < 1 ? 1 : (int)units;
  return threads;
}

void attn__parallel_for(int threads, int64_t n_units, attn__unit_fn fn,
                        void *ctx) {
  pf_shared sh = {.fn = fn, .ctx = ctx, .n = n_units};
  pthread_t tids[MAX_THREADS];
  pf_arg args[MAX_THREADS];
  int started = 0;
  atomic_init(&sh.next, 0);
  atomic_init(&sh.ran, 0);
  threads = clamp_threads(threads, n_units);
  for (int t = 1; t < threads; t++) {
    args[t] = (pf_arg){&sh, t};
    if (pthread_create(&tids[t], NULL, pf_thread, &args[t]) != 0) break;
    started++;
  }
  pf_loop(&sh, 0);
  for (int t = 1; t <= started; t++) pthread_join(tids[t], NULL);
  attn__gemm_ran_add(atomic_load(&sh.ran));
}

/* ---- validation -------------------------------------------------------- */

#define LANES 16

/* 1 when every value of the row is finite.  x * 0 is NaN for NaN and Inf. */
static int row_finite(const float *p, int64_t n) {
  float lane[LANES] = {0};
  float acc = 0.0f;
  int64_t j = 0;
  for (; j + LANES <= n; j += LANES)
    for (int k = 0; k < LANES; k++) lane[k] += p[j + k] * 0.0f;
  for (; j < n; j++) acc += p[j] * 0.0f;
  for (int k = 0; k < LANES; k++) acc += lane[k];
  return acc == 0.0f;
}

/* First non-finite element of a [n0][n1][rows][cols] view, or -1. */
static int64_t view_nonfinite(const float *data, int64_t n0, int64_t s0,
                              int64_t n1, int64_t s1, int64_t rows, int64_t ld,
                              int64_t cols) {
  /* heads side by side filling whole rows (an [L, H*D] matrix seen as H
   * heads): one pass over each batch's rows, rows only on failure (per
   * row of 64 values the calls cost more than the check) */
  if (n1 > 1 && s1 == cols && ld == n1 * cols) {
    int64_t a = 0;
    while (a < n0 && row_finite(data + a * s0, rows * ld)) a++;
    if (a == n0) return -1;
  }
  for (int64_t a = 0; a < n0; a++)
    for (int64_t b = 0; b < n1; b++) {
      /* contiguous rows: one pass over the matrix (a call per row of a
       * small request costs more than its check), rows only on failure */
      if (ld == cols && row_finite(data + a * s0 + b * s1, rows * cols))
        continue;
      for (int64_t i = 0; i < rows; i++) {
        const float *r = data + a * s0 + b * s1 + i * ld;
        if (!row_finite(r, cols)) return (a * n1 + b) * rows + i;
      }
    }
  return -1;
}

/* a and b address the same elements (given the same dimensions). */
static bool same_view(const attn_view *a, const attn_view *b) {
  return a->data == b->data && a->sb == b->sb && a->sh == b->sh &&
         a->ld == b->ld;
}

static int fits_int(int64_t v) {
  return v >= 0 && v <= INT_MAX;
}

/* The variants of attn_attend_opts (engine.h): causal alignment, window,
 * softcap, ALiBi slopes (H values, read here: they are options) and rotary
 * positions on heads of Dh values. */
attn_status attn__check_variants(const attn_attend_opts *o, int64_t H,
                                 int64_t Dh, attn_diag *d) {
  if (o->causal != ATTN_CAUSAL_NONE && o->causal != ATTN_CAUSAL_BOTTOM_RIGHT &&
      o->causal != ATTN_CAUSAL_TOP_LEFT)
    return attn_diag_set(d, ATTN_EINVAL,
                         "causal is %d; expected 0 (none), 1 (bottom-right) "
                         "or 2 (top-left)",
                         o->causal);
  if (o->has_window) {
    if (o->window_left < -1 || o->window_right < -1)
      return attn_diag_set(
          d, ATTN_EINVAL,
          "window %s is %lld; a window bound is -1 "
          "(unbounded) or >= 0",
          o->window_left < -1 ? "left" : "right",
          (long long)(o->window_left < -1 ? o->window_left : o->window_right));
    if (o->causal && o->window_right > 0)
      return attn_diag_set(d, ATTN_EINVAL,
                           "window right is %lld with causal attention: causal "
                           "already hides every key right of the diagonal, so "
                           "the right bound must be 0 or -1",
                           (long long)o->window_right);
  }
  if (o->softcap != 0.0f && !(isfinite(o->softcap) && o->softcap > 0.0f))
    return attn_diag_set(d, ATTN_EINVAL,
                         "softcap is %g; it must be a finite number > 0 "
                         "(0 = off)",
                         (double)o->softcap);
  if (o->alibi_slopes)
    for (int64_t h = 0; h < H; h++)
      if (!isfinite(o->alibi_slopes[h]))
        return attn_diag_set(d, ATTN_EINVAL,
                             "alibi slope %lld (of %lld heads) is %g; slopes "
                             "must be finite",
                             (long long)h, (long long)H,
                             (double)o->alibi_slopes[h]);
  const attn_rotary *r = &o->rotary;
  if (r->on) {
    if (r->dims < 0 || r->dims > Dh || r->dims % 2 != 0)
      return attn_diag_set(d, ATTN_EINVAL,
                           "rotary dims is %lld; it must be even and at most "
                           "the head dim %lld (0 = the head dim)",
                           (long long)r->dims, (long long)Dh);
    if (r->dims == 0 && Dh % 2 != 0)
      return attn_diag_set(d, ATTN_EINVAL,
                           "rotary dims defaults to the head dim, %lld, which "
                           "is odd; give an even dims below it",
                           (long long)Dh);
    if (r->base != 0.0 && !(isfinite(r->base) && r->base > 1.0))
      return attn_diag_set(d, ATTN_EINVAL,
                           "rotary base is %g; it must be a finite number > 1 "
                           "(0 = 10000)",
                           r->base);
    if (r->has_query_offset &&
        (r->query_offset > INT_MAX || r->query_offset < -(int64_t)INT_MAX))
      return attn_diag_set(d, ATTN_EINVAL,
                           "rotary query_offset is %lld; the limit is +-%d",
                           (long long)r->query_offset, INT_MAX);
  }
  return ATTN_OK;
}

static attn_status check_opts(const attn_attend_opts *o, int64_t B, int64_t H,
                              int64_t Dh, attn_diag *d) {
  attn_status s;
  if (o->has_scale && !isfinite(o->scale))
    return attn_diag_set(d, ATTN_EINVAL, "scale must be a finite number");
  if ((s = attn__check_variants(o, H, Dh, d))) return s;
  switch (o->mask.kind) {
    case ATTN_MASK_NONE:
      break;
    case ATTN_MASK_BOOL:
    case ATTN_MASK_ADD:
      if (!o->mask.data)
        return attn_diag_set(d, ATTN_EINVAL, "attn_mask: data is NULL");
      if (o->mask.mb != 1 && o->mask.mb != B)
        return attn_diag_set(d, ATTN_ESHAPE,
                             "attn_mask: dim 0 (batch) is %lld, expected 1 "
                             "or B=%lld",
                             (long long)o->mask.mb, (long long)B);
      if (o->mask.mh != 1 && o->mask.mh != H)
        return attn_diag_set(d, ATTN_ESHAPE,
                             "attn_mask: dim 1 (heads) is %lld, expected 1 "
                             "or H=%lld",
                             (long long)o->mask.mh, (long long)H);
      break;
    default:
      return attn_diag_set(d, ATTN_EINVAL, "attn_mask: unknown kind %d",
                           (int)o->mask.kind);
  }
  switch (o->kpm.kind) {
    case ATTN_KPM_NONE:
      break;
    case ATTN_KPM_BOOL:
      if (!o->kpm.pad)
        return attn_diag_set(d, ATTN_EINVAL, "key_padding_mask: data is NULL");
      break;
    case ATTN_KPM_LENGTHS:
      if (!o->kpm.lengths)
        return attn_diag_set(d, ATTN_EINVAL, "key_lengths: data is NULL");
      break;
    default:
      return attn_diag_set(d, ATTN_EINVAL, "key_padding_mask: unknown kind %d",
                           (int)o->kpm.kind);
  }
  if (o->weights != ATTN_WEIGHTS_NONE && o->weights != ATTN_WEIGHTS_PER_HEAD &&
      o->weights != ATTN_WEIGHTS_MEAN)
    return attn_diag_set(d, ATTN_EINVAL, "unknown attention-weights mode %d",
                         (int)o->weights);
  if (o->precision != ATTN_PRECISION_FP32 &&
      o->precision != ATTN_PRECISION_BF16)
    return attn_diag_set(d, ATTN_EINVAL,
                         "precision is %d; expected 0 (fp32) or 1 (bf16)",
                         (int)o->precision);
  return ATTN_OK;
}

/* Values that only the data can show: masks and key lengths. */
static attn_status check_opt_values(const attn_attend_opts *o, int64_t B,
                                    int64_t Lq, int64_t Lk, attn_diag *d) {
  if (o->mask.kind == ATTN_MASK_ADD) {
    const float *m = o->mask.data;
    int64_t n = o->mask.mb * o->mask.mh * Lq * Lk;
    for (int64_t i = 0; i < n; i++)
      if (isnan(m[i]) || m[i] == INFINITY)
        return attn_diag_set(
            d, ATTN_ENONFINITE,
            "attn_mask: element %lld is %s (only finite values "
            "and -inf are allowed)",
            (long long)i, isnan(m[i]) ? "NaN" : "+inf");
  }
  if (o->kpm.kind == ATTN_KPM_LENGTHS)
    for (int64_t b = 0; b < B; b++)
      if (o->kpm.lengths[b] < 0 || o->kpm.lengths[b] > Lk)
        return attn_diag_set(
            d, ATTN_EINVAL, "key_lengths[%lld] is %lld, expected 0..Lk=%lld",
            (long long)b, (long long)o->kpm.lengths[b], (long long)Lk);
  return ATTN_OK;
}

static attn_status check_dim(const char *what, int64_t v, attn_diag *d) {
  if (v < 1)
    return attn_diag_set(d, ATTN_ESHAPE, "%s is %lld; it must be >= 1", what,
                         (long long)v);
  if (!fits_int(v))
    return attn_diag_set(d, ATTN_ETOOBIG, "%s is %lld; the limit is %d", what,
                         (long long)v, INT_MAX);
  return ATTN_OK;
}

static attn_status check_view(const char *name, const attn_view *v, int64_t D,
                              const char *dname, attn_diag *d) {
  if (!v->data) return attn_diag_set(d, ATTN_EINVAL, "%s: data is NULL", name);
  if (v->ld < D || !fits_int(v->ld))
    return attn_diag_set(d, ATTN_ESHAPE,
                         "%s: row stride %lld is smaller than %s=%lld", name,
                         (long long)v->ld, dname, (long long)D);
  return ATTN_OK;
}

attn_status attn_sdpa_check(const attn_sdpa_problem *p, attn_diag *d) {
  attn_status s;
  if (!p) return attn_diag_set(d, ATTN_EINVAL, "problem is NULL");
  if ((s = check_dim("B (batch)", p->B, d)) || (s = check_dim("H", p->H, d)) ||
      (s = check_dim("Hkv", p->Hkv, d)) || (s = check_dim("Lq", p->Lq, d)) ||
      (s = check_dim("Lk", p->Lk, d)) || (s = check_dim("Dk", p->Dk, d)) ||
      (s = check_dim("Dv", p->Dv, d)))
    return s;
  if (p->H % p->Hkv != 0)
    return attn_diag_set(d, ATTN_ESHAPE,
                         "H=%lld query heads is not a multiple of Hkv=%lld "
                         "key/value heads",
                         (long long)p->H, (long long)p->Hkv);
  if ((s = check_view("query", &p->q, p->Dk, "Dk", d)) ||
      (s = check_view("key", &p->k, p->Dk, "Dk", d)) ||
      (s = check_view("value", &p->v, p->Dv, "Dv", d)))
    return s;
  return check_opts(&p->o, p->B, p->H, p->Dk, d);
}

/* ---- the core: attention on views -------------------------------------- */

typedef struct core_ctx {
  int64_t B, H, Lq, Lk, Dk, Dv, group;
  attn_view q, k, v;
  attn_mview out;
  const attn_attend_opts *o;
  float scale, softcap;
  float *weights;
  int64_t tq, tk, sld, nqb; /* sld: the streaming scores' row stride */
  int streaming;
  float **scratch;   /* per thread */
  float *kpack;      /* keys packed per (b, key head), or NULL: see scores() */
  size_t kpack_head; /* floats per (b, key head) in kpack */
  size_t vpack_at;   /* > 0: the streaming path's values, rows of Dv floats
                        side by side, at this float of each head's kpack */
  size_t upack_at;   /* > 0: a window's units pack their band's keys at this
                        float of their scratch (see plan_unit_scratch) */
  size_t qcopy_at;   /* > 0: fp32 streaming units copy their query rows to
                        this float of their scratch */
  /* bf16 (attn_precision): keys and values packed per (b, key head) as
   * bf16 panels (gemm.c), and in each thread's scratch from float bf_at
   * on the unit's query rows in bf16 (tq rows of Dk2 values) and then a
   * group's probabilities in bf16 (rows of pb_ld values) */
  int bf16;
  int64_t Dk2, pb_ld;
  uint16_t *kb, *vb;
  size_t kb_head, vb_head, bf_at, pb_at;
} core_ctx;

/* S[rows, w] (row stride lds) = scale * Q rows K[j0, j0 + w)^T for batch b,
 * key head hk, Q rows from qrow.  Packed keys are used where the tile starts
 * on a panel: a unit's own (upan, keys from ub on) or the call's; other
 * calls go to cblas_sgemm. */
static void scores(const core_ctx *c, int64_t b, int64_t hk, int64_t rows,
                   int64_t j0, int64_t w, const float *qrow, int64_t qld,
                   float *S, int64_t lds, const float *upan, int64_t ub,
                   const uint16_t *qb) {
  if (c->bf16) { /* qb: the rows in bf16 */
    int64_t ps = attn__bf16_panel_stride(c->Dk);
    const uint16_t *pan =
        c->kb + (size_t)(b * (c->H / c->group) + hk) * c->kb_head;
    attn__bf16_gemm(rows, w, c->Dk2 / 2, c->scale, qb, c->Dk2,
                    pan + (j0 / ATTN__PANEL) * ps, ps, j0 % ATTN__PANEL, 0, S,
                    lds);
  } else if (upan && (j0 - ub) % ATTN__PANEL == 0) {
    attn__gemm_nt_packed(rows, w, c->Dk, c->scale, qrow, qld,
                         upan + (j0 - ub) * c->Dk, S, lds);
  } else if (c->kpack && j0 % ATTN__PANEL == 0) {
    const float *pan =
        c->kpack + (size_t)(b * (c->H / c->group) + hk) * c->kpack_head;
    attn__gemm_nt_packed(rows, w, c->Dk, c->scale, qrow, qld, pan + j0 * c->Dk,
                         S, lds);
  } else {
    const float *kp = c->k.data + b * c->k.sb + hk * c->k.sh + j0 * c->k.ld;
    attn__gemm_nt(rows, w, c->Dk, c->scale, qrow, qld, kp, c->k.ld, S, lds);
  }
}

/* bf16: the unit's bf16 area of thread tid (see core_ctx). */
static inline uint16_t *bf_area(const core_ctx *c, int tid) {
  return (uint16_t *)(void *)(c->scratch[tid] + c->bf_at);
}

/* bf16: query rows [i0, i0 + m) of head (b, h) rounded into qb (rows of
 * Dk2 values, a zero after an odd Dk). */
static void q_bf16(const core_ctx *c, int64_t b, int64_t h, int64_t i0,
                   int64_t m, uint16_t *qb) {
  for (int64_t r = 0; r < m; r++) {
    const float *q = c->q.data + b * c->q.sb + h * c->q.sh + (i0 + r) * c->q.ld;
    attn__bf16_convert(q, c->Dk, qb + r * c->Dk2);
    if (c->Dk2 > c->Dk) qb[r * c->Dk2 + c->Dk] = 0;
  }
}

/* bf16: o[rows, Dv] = P V (+ o when acc) over keys [s, e) of key head
 * (b, hk); P's row r at P + r * ldp holds key s at column 0.  The rows go
 * to pb in bf16 from the even key s2 <= s (zeros before s and after e),
 * so that their pairs are the value panels' pairs. */
static void pv_bf16(const core_ctx *c, int64_t b, int64_t hk, int64_t rows,
                    const float *P, int64_t ldp, int64_t s, int64_t e, float *o,
                    int64_t ldo, int acc, uint16_t *pb) {
  int64_t s2 = s & ~(int64_t)1, e2 = (e + 1) & ~(int64_t)1;
  for (int64_t r = 0; r < rows; r++) {
    uint16_t *d = pb + r * c->pb_ld;
    if (s > s2) d[0] = 0;
    attn__bf16_convert(P + r * ldp, e - s, d + (s - s2));
    if (e2 > e) d[e - s2] = 0;
  }
  const uint16_t *pan = c->vb +
                        (size_t)(b * (c->H / c->group) + hk) * c->vb_head +
                        (s2 / 2) * 2 * ATTN__PANEL;
  attn__bf16_gemm(rows, c->Dv, (e2 - s2) / 2, 1.0f, pb, c->pb_ld, pan,
                  attn__bf16_panel_stride(c->Lk), 0, acc, o, ldo);
}

/* Keys visible from query i form the band [row_vbeg, row_end): both ends
 * are non-decreasing in i, so a block of rows sees the keys from its first
 * row's begin to its last row's end. */
static inline int64_t row_end(const core_ctx *c, int64_t b, int64_t i) {
  const attn_attend_opts *o = c->o;
  int64_t e = c->Lk;
  if (o->causal == ATTN_CAUSAL_BOTTOM_RIGHT) {
    int64_t ce = i + (c->Lk - c->Lq) + 1;
    if (ce < e) e = ce;
  } else if (o->causal == ATTN_CAUSAL_TOP_LEFT && i + 1 < e) {
    e = i + 1;
  }
  if (o->has_window && o->window_right >= 0 &&
      o->window_right < c->Lk + c->Lq) { /* wider: no bound */
    int64_t we = i + (c->Lk - c->Lq) + o->window_right + 1;
    if (we < e) e = we;
  }
  if (o->kpm.kind == ATTN_KPM_LENGTHS && o->kpm.lengths[b] < e)
    e = o->kpm.lengths[b];
  return e < 0 ? 0 : e;
}

/* 1 when a window bounds the keys on the left (row_vbeg can be > 0). */
static inline int band_left(const core_ctx *c) {
  const attn_attend_opts *o = c->o;
  return o->has_window && o->window_left >= 0 && o->window_left < c->Lk + c->Lq;
}

/* First key visible from query i (the window's left bound), never past
 * row_end: an empty row is [e, e). */
static inline int64_t row_vbeg(const core_ctx *c, int64_t b, int64_t i) {
  const attn_attend_opts *o = c->o;
  if (!band_left(c)) return 0;
  int64_t v = i + (c->Lk - c->Lq) - o->window_left, e = row_end(c, b, i);
  return v < 0 ? 0 : v < e ? v : e;
}

/* Down to a packed panel's first key (the packed NT kernel's tiles start
 * there). */
static inline int64_t panel_floor(int64_t j) {
  return j / ATTN__PANEL * ATTN__PANEL;
}

/* Softcap and ALiBi on the scores s of keys [j0, j0 + n) of query i, head
 * h, then the masks and the row maximum (attn__row_mask_max). */
static inline float prep_max(const core_ctx *c, int64_t b, int64_t h, int64_t i,
                             float *s, int64_t j0, int64_t n, const float *add,
                             const uint8_t *blk, const uint8_t *pad) {
  if (c->softcap > 0.0f) attn__row_softcap(s, n, c->softcap);
  if (c->o->alibi_slopes)
    attn__row_alibi(s, n, c->o->alibi_slopes[h], j0 - (i + c->Lk - c->Lq));
  return attn__row_mask_max(s, n, add, blk, pad);
}

static inline const float *add_row(const core_ctx *c, int64_t b, int64_t h,
                                   int64_t i) {
  const attn_mask *m = &c->o->mask;
  if (m->kind != ATTN_MASK_ADD) return NULL;
  int64_t bm = m->mb == 1 ? 0 : b, hm = m->mh == 1 ? 0 : h;
  return (const float *)m->data + ((bm * m->mh + hm) * c->Lq + i) * c->Lk;
}

static inline const uint8_t *blk_row(const core_ctx *c, int64_t b, int64_t h,
                                     int64_t i) {
  const attn_mask *m = &c->o->mask;
  if (m->kind != ATTN_MASK_BOOL) return NULL;
  int64_t bm = m->mb == 1 ? 0 : b, hm = m->mh == 1 ? 0 : h;
  return (const uint8_t *)m->data + ((bm * m->mh + hm) * c->Lq + i) * c->Lk;
}

static inline const uint8_t *pad_row(const core_ctx *c, int64_t b) {
  return c->o->kpm.kind == ATTN_KPM_BOOL ? c->o->kpm.pad + b * c->Lk : NULL;
}

static inline const float *offf(const float *p, int64_t j) {
  return p ? p + j : NULL;
}
static inline const uint8_t *offu(const uint8_t *p, int64_t j) {
  return p ? p + j : NULL;
}

/* Units are numbered so that the heaviest causal blocks (last rows) come
 * first, which balances threads. */
static void unit_coords(const core_ctx *c, int64_t u, int per_head, int64_t *b,
                        int64_t *h, int64_t *i0, int64_t *i1) {
  int64_t qb = c->nqb - 1 - u % c->nqb, rest = u / c->nqb;
  if (per_head) {
    *h = rest % c->H;
    *b = rest / c->H;
  } else {
    *h = 0;
    *b = rest;
  }
  *i0 = qb * c->tq;
  *i1 = *i0 + c->tq < c->Lq ? *i0 + c->tq : c->Lq;
}

static void zero_rows(float *p, int64_t rows, int64_t ld, int64_t cols) {
  for (int64_t r = 0; r < rows; r++) memset(p + r * ld, 0, cols * sizeof *p);
}

static void materialised_unit(void *vctx, int64_t u, int tid) {
  const core_ctx *c = vctx;
  int mean = c->o->weights == ATTN_WEIGHTS_MEAN;
  int per_head = c->o->weights == ATTN_WEIGHTS_PER_HEAD;
  int64_t b, h, i0, i1;
  unit_coords(c, u, !mean, &b, &h, &i0, &i1);
  int64_t h0 = mean ? 0 : h, h1 = mean ? c->H : h + 1, m = i1 - i0;
  int64_t Lk = c->Lk, jend = row_end(c, b, i1 - 1);
  float invH = 1.0f / (float)c->H;
  for (h = h0; h < h1; h++) {
    int64_t hk = h / c->group;
    const float *qp = c->q.data + b * c->q.sb + h * c->q.sh + i0 * c->q.ld;
    const float *vp = c->v.data + b * c->v.sb + hk * c->v.sh;
    float *op = c->out.data + b * c->out.sb + h * c->out.sh + i0 * c->out.ld;
    float *S = per_head ? c->weights + ((b * c->H + h) * c->Lq + i0) * Lk
                        : c->scratch[tid];
    uint16_t *qb = NULL, *pb = NULL;
    if (c->bf16) {
      qb = bf_area(c, tid);
      pb = qb + c->pb_at;
      q_bf16(c, b, h, i0, m, qb);
    }
    /* Row groups of MAT_ROWS: scores, softmax and P V for a group while
     * its scores are still in L2, each group only as wide as its last row
     * sees (a causal diagonal). */
    /* Each group computes keys [j0, w): from the panel of its first row's
     * first visible key (0 without a window) to its last row's last. */
    int64_t step = MAT_ROWS;
    for (int64_t r0 = 0; r0 < m; r0 += step) {
      int64_t r1 = r0 + step < m ? r0 + step : m;
      int64_t w = row_end(c, b, i0 + r1 - 1);
      int64_t jv = row_vbeg(c, b, i0 + r0), j0 = panel_floor(jv);
      if (w > j0)
        scores(c, b, hk, r1 - r0, j0, w - j0, qp + r0 * c->q.ld, c->q.ld,
               S + r0 * Lk + j0, Lk, NULL, 0, qb ? qb + r0 * c->Dk2 : NULL);
      for (int64_t r = r0; r < r1; r++) {
        int64_t i = i0 + r, e = row_end(c, b, i), v0 = row_vbeg(c, b, i);
        float *row = S + r * Lk;
        /* left of the band: zeros (P V reads from jv; weights from 0) */
        int64_t z0 = per_head ? 0 : jv;
        if (v0 > z0) memset(row + z0, 0, (v0 - z0) * sizeof *row);
        float mx = prep_max(
            c, b, h, i, row + v0, v0, e - v0, offf(add_row(c, b, h, i), v0),
            offu(blk_row(c, b, h, i), v0), offu(pad_row(c, b), v0));
        if (mx == -INFINITY) {
          memset(row + v0, 0, (jend - v0) * sizeof *row);
          continue;
        }
        double sum = attn__row_exp_sum(row + v0, e - v0, mx);
        attn__row_scale(row + v0, e - v0, (float)(1.0 / sum));
        if (jend > e) memset(row + e, 0, (jend - e) * sizeof *row);
      }
      /* P V from the group's first visible key: the columns before it,
       * computed to start on a panel, are zeros in every row */
      if (w > jv && c->bf16)
        pv_bf16(c, b, hk, r1 - r0, S + r0 * Lk + jv, Lk, jv, w,
                op + r0 * c->out.ld, c->out.ld, 0, pb);
      else if (w > jv)
        attn__gemm_nn(r1 - r0, c->Dv, w - jv, S + r0 * Lk + jv, Lk,
                      vp + jv * c->v.ld, c->v.ld, 0, op + r0 * c->out.ld,
                      c->out.ld);
      else
        zero_rows(op + r0 * c->out.ld, r1 - r0, c->out.ld, c->Dv);
    }
    if (per_head && jend < Lk) zero_rows(S + jend, m, Lk, Lk - jend);
    if (mean) {
      float *W = c->weights + (b * c->Lq + i0) * Lk;
      for (int64_t r = 0; r < m; r++) {
        float *wr = W + r * Lk;
        int64_t v0 = row_vbeg(c, b, i0 + r);
        if (h == 0) {
          memset(wr, 0, Lk * sizeof *wr);
        }
        attn__row_axpy(wr + v0, S + r * Lk + v0, jend - v0, invH);
      }
    }
  }
}

/* A streaming unit: head (b, h) of key head hk, query rows [i0, i0 + m)
 * at qp (rows qld apart: the caller's, or a copy in the scratch), values
 * from vp (rows vld apart: the caller's, or packed), the online softmax's
 * state in the thread's scratch, and a window's own packed keys (upan,
 * from key ub) or bf16 rows (qb) when used. */
typedef struct stream_unit {
  int64_t b, h, hk, i0;
  const float *qp, *vp;
  int64_t qld, vld;
  float *S, *O, *mrun;
  double *lrun;
  const float *upan;
  int64_t ub;
  uint16_t *qb;
} stream_unit;

/* One step of the online softmax for rows [r0, r1) of a streaming unit
 * (query rows i0 + r) against keys [j0, j0 + w): scores into S, the running
 * max mrun and sum lrun updated (O rescaled where the max grew), then
 * O += P V.  Rows that see fewer than w of these keys get zeros past their
 * last one. */
static void streaming_rows(const core_ctx *c, const stream_unit *su, int64_t r0,
                           int64_t r1, int64_t j0, int64_t w) {
  int64_t tk = c->sld, Dv = c->Dv, b = su->b, h = su->h, i0 = su->i0;
  float *S = su->S, *O = su->O, *mrun = su->mrun;
  double *lrun = su->lrun;
  uint16_t *qb = su->qb;
  scores(c, b, su->hk, r1 - r0, j0, w, su->qp + r0 * su->qld, su->qld,
         S + r0 * tk, tk, su->upan, su->ub, qb ? qb + r0 * c->Dk2 : NULL);
  for (int64_t r = r0; r < r1; r++) {
    /* this row's keys of the tile: [v0, e) (relative to j0) */
    int64_t i = i0 + r, e = row_end(c, b, i) - j0, v0 = row_vbeg(c, b, i) - j0;
    float *row = S + r * tk;
    if (e > w) e = w;
    if (v0 < 0) v0 = 0;
    if (e <= v0) {
      memset(row, 0, w * sizeof *row);
      continue;
    }
    float tmax = prep_max(c, b, h, i, row + v0, j0 + v0, e - v0,
                          offf(add_row(c, b, h, i), j0 + v0),
                          offu(blk_row(c, b, h, i), j0 + v0),
                          offu(pad_row(c, b), j0 + v0));
    float mnew = tmax > mrun[r] ? tmax : mrun[r];
    if (mnew == -INFINITY) {
      memset(row, 0, w * sizeof *row);
      continue;
    }
    double s = attn__row_exp_sum(row + v0, e - v0, mnew);
    if (v0 > 0) memset(row, 0, v0 * sizeof *row);
    if (w > e) memset(row + e, 0, (w - e) * sizeof *row);
    if (mnew != mrun[r]) {
      float corr = mrun[r] == -INFINITY ? 0.0f : attn__expf(mrun[r] - mnew);
      lrun[r] *= corr;
      attn__row_scale(O + r * Dv, Dv, corr);
      mrun[r] = mnew;
    }
    lrun[r] += s;
  }
  /* P V from the rows' first visible key of the tile (zeros before it in
   * every row: the columns computed to start on a panel) */
  int64_t jv = row_vbeg(c, b, i0 + r0) - j0;
  if (jv < 0) jv = 0;
  if (jv < w && qb)
    pv_bf16(c, b, su->hk, r1 - r0, S + r0 * tk + jv, tk, j0 + jv, j0 + w,
            O + r0 * Dv, Dv, 1, qb + c->pb_at);
  else if (jv < w)
    attn__gemm_nn(r1 - r0, Dv, w - jv, S + r0 * tk + jv, tk,
                  su->vp + (j0 + jv) * su->vld, su->vld, 1, O + r0 * Dv, Dv);
}

/* The lines of rows [p, p + rows * ld) (cols floats each) asked for ahead,
 * for writing: the output's, before the unit's last key tile, so that its
 * stores at the end do not each wait for a line from memory (1% of the
 * call at n 2048, h 8, d 64). */
static void prefetch_rows(float *p, int64_t rows, int64_t ld, int64_t cols) {
  for (int64_t r = 0; r < rows; r++)
    for (int64_t j = 0; j < cols; j += 16)
      __builtin_prefetch(p + r * ld + j, 1, 2);
}

static void streaming_unit(void *vctx, int64_t u, int tid) {
  const core_ctx *c = vctx;
  stream_unit su = {0};
  int64_t b, h, i0, i1;
  unit_coords(c, u, 1, &b, &h, &i0, &i1);
  int64_t m = i1 - i0, hk = h / c->group, tk = c->tk, Dv = c->Dv;
  int64_t jend = row_end(c, b, i1 - 1);
  float *op = c->out.data + b * c->out.sb + h * c->out.sh + i0 * c->out.ld;
  su.b = b;
  su.h = h;
  su.hk = hk;
  su.i0 = i0;
  su.qp = c->q.data + b * c->q.sb + h * c->q.sh + i0 * c->q.ld;
  su.qld = c->q.ld;
  su.vp = c->v.data + b * c->v.sb + hk * c->v.sh;
  su.vld = c->v.ld;
  if (c->kpack && c->vpack_at) {
    su.vp = c->kpack + (size_t)(b * (c->H / c->group) + hk) * c->kpack_head +
            c->vpack_at;
    su.vld = Dv;
  }
  /* scratch: l [tq] doubles first (malloc alignment), then S [tq, sld],
   * O [tq, Dv], m [tq] floats, then (fp32) the unit's query rows */
  su.lrun = (double *)(void *)c->scratch[tid];
  su.S = c->scratch[tid] + 2 * c->tq;
  su.O = su.S + c->tq * c->sld;
  su.mrun = su.O + c->tq * Dv;
  if (c->qcopy_at && c->kpack && su.qld != c->Dk) {
    /* heads side by side: rows H * Dk floats apart, often a multiple of
     * 4 KiB, put the 12 rows of a register tile in one set of L1 (with
     * the packed keys only: a small call's few rows are not worth it) */
    float *qc = c->scratch[tid] + c->qcopy_at;
    for (int64_t r = 0; r < m; r++)
      memcpy(qc + r * c->Dk, su.qp + r * su.qld, (size_t)c->Dk * sizeof *qc);
    su.qp = qc;
    su.qld = c->Dk;
  }
  if (c->bf16) {
    su.qb = bf_area(c, tid);
    q_bf16(c, b, h, i0, m, su.qb);
  }

  memset(su.O, 0, m * Dv * sizeof *su.O);
  for (int64_t r = 0; r < m; r++) {
    su.mrun[r] = -INFINITY;
    su.lrun[r] = 0.0;
  }
  if (band_left(c)) {
    /* A window's left edge: groups of WINDOW_ROWS rows, each over its own
     * band only, from the panel of its first row's first key to its last
     * row's last key, in tiles of tk: the keys left of the band are never
     * computed, and a group's band (rows + window) is often one tile.
     * When planned, the unit first packs its own band's keys (cache-sized)
     * instead of reading the call's packed keys. */
    su.ub = panel_floor(row_vbeg(c, b, i0));
    if (c->upack_at && jend > su.ub) {
      float *pp = c->scratch[tid] + c->upack_at;
      attn__pack_nt(jend - su.ub, c->Dk,
                    c->k.data + b * c->k.sb + hk * c->k.sh + su.ub * c->k.ld,
                    c->k.ld, pp);
      su.upan = pp;
    }
    for (int64_t r0 = 0; r0 < m; r0 += WINDOW_ROWS) {
      int64_t r1 = r0 + WINDOW_ROWS < m ? r0 + WINDOW_ROWS : m;
      int64_t hi = row_end(c, b, i0 + r1 - 1);
      for (int64_t j0 = panel_floor(row_vbeg(c, b, i0 + r0)); j0 < hi; j0 += tk)
        streaming_rows(c, &su, r0, r1, j0, hi - j0 < tk ? hi - j0 : tk);
    }
  } else {
    for (int64_t j0 = 0; j0 < jend; j0 += tk) {
      int64_t tn = jend - j0 < tk ? jend - j0 : tk;
      if (j0 > 0 && j0 + tk >= jend) prefetch_rows(op, m, c->out.ld, Dv);
      /* Row groups as in materialised_unit: DIAG_ROWS at a time when a
       * causal diagonal crosses this tile, each only as wide as its last
       * row sees. */
      int64_t step = row_end(c, b, i0) - j0 < tn ? DIAG_ROWS : m;
      for (int64_t r0 = 0; r0 < m; r0 += step) {
        int64_t r1 = r0 + step < m ? r0 + step : m;
        int64_t w = row_end(c, b, i0 + r1 - 1) - j0;
        if (w > tn) w = tn;
        if (w <= 0) continue; /* these rows see no key of this tile */
        streaming_rows(c, &su, r0, r1, j0, w);
      }
    }
  }
  float *O = su.O;
  double *lrun = su.lrun;
  for (int64_t r = 0; r < m; r++) {
    float *dst = op + r * c->out.ld;
    if (lrun[r] != 0.0) { /* 0: no key attended; NaN (overflowed
                             scores) stays NaN, as in materialised_unit */
      attn__row_scale_to(dst, O + r * Dv, Dv, (float)(1.0 / lrun[r]));
    } else {
      memset(dst, 0, Dv * sizeof *dst);
    }
  }
}

/* Tile sizes and path for a problem; returns floats of scratch per thread
 * and the number of units. */
typedef struct core_plan {
  int streaming;
  int64_t tq, tk, sld, nqb, units;
  int threads;
  size_t scratch_floats;
  size_t kpack_head, kpack_floats; /* packed keys: per key head, in all */
  size_t vpack_at;                 /* see core_ctx */
  size_t upack_at;                 /* see core_ctx */
  size_t qcopy_at;                 /* see core_ctx */
  int bf16; /* attn_precision BF16: the fields below as in core_ctx */
  int64_t Dk2, pb_ld;
  size_t bf_at, pb_at, kb_head, vb_head;
  size_t bf_panel_floats; /* the bf16 key and value panels, in floats */
} core_plan;

/* Keys a block of tq query rows can see at most when a window bounds them
 * on the left and something (causal or the window) on the right; else -1. */
static int64_t band_keys(const attn_attend_opts *o, int64_t Lq, int64_t Lk,
                         int64_t tq) {
  if (!o->has_window || o->window_left < 0 || o->window_left >= Lk + Lq)
    return -1;
  int64_t rext = -1; /* keys right of i + Lk - Lq a row may see */
  if (o->causal == ATTN_CAUSAL_BOTTOM_RIGHT) rext = 0;
  if (o->causal == ATTN_CAUSAL_TOP_LEFT) rext = Lq > Lk ? Lq - Lk : 0;
  if (o->window_right >= 0 && o->window_right < Lk + Lq &&
      (rext < 0 || o->window_right < rext))
    rext = o->window_right;
  if (rext < 0) return -1;
  int64_t band = tq + o->window_left + rext;
  return band < Lk ? band : Lk;
}

/* The path, the tile sizes, the units and the threads of a call (x not
 * NULL). */
static attn_status plan_tiles(int64_t B, int64_t H, int64_t Lq, int64_t Lk,
                              int64_t Dv, const attn_attend_opts *o,
                              const attn_exec *x, core_plan *pl, attn_diag *d) {
  if (x->path == ATTN_PATH_STREAMING && o->weights != ATTN_WEIGHTS_NONE)
    return attn_diag_set(d, ATTN_EINVAL,
                         "the streaming path cannot return attention weights");
  if (x->path != ATTN_PATH_AUTO && x->path != ATTN_PATH_MATERIALISED &&
      x->path != ATTN_PATH_STREAMING)
    return attn_diag_set(d, ATTN_EINVAL, "unknown path %d", (int)x->path);
  pl->streaming =
      x->path == ATTN_PATH_STREAMING ||
      (x->path == ATTN_PATH_AUTO && o->weights == ATTN_WEIGHTS_NONE);
  pl->tq = x->tile_q > 0   ? x->tile_q
           : pl->streaming ? TILE_Q_STREAMING
                           : TILE_Q_MATERIALISED;
  pl->tk = x->tile_k > 0 ? x->tile_k : TILE_K_DEFAULT;
  if (pl->tq > Lq) pl->tq = Lq;
  if (pl->tk > Lk) pl->tk = Lk;
  pl->nqb = (Lq + pl->tq - 1) / pl->tq;
  int mean = !pl->streaming && o->weights == ATTN_WEIGHTS_MEAN;
  pl->units = B * (mean ? 1 : H) * pl->nqb;
  pl->threads = clamp_threads(x->threads, pl->units);
  /* Starting a thread costs tens of microseconds: small calls run on the
   * caller's thread alone. */
  if ((double)B * (double)H * (double)Lq * (double)Lk * (double)Dv <
      SMALL_CALL_WORK)
    pl->threads = 1;
  return ATTN_OK;
}

/* Floats of a unit's fp32 scratch into *f: the streaming state or the
 * materialised path's block of scores, then a window's band of packed keys
 * (pl->upack_at). */
static attn_status plan_unit_scratch(const attn_attend_opts *o, int64_t Lq,
                                     int64_t Lk, int64_t Dk, int64_t Dv, int bf,
                                     core_plan *pl, size_t *f, attn_diag *d) {
  if (pl->streaming) {
    /* l [tq] doubles, S [tq, sld], O [tq, Dv], m [tq], and in fp32 the
     * query rows [tq, Dk] on a line.  S's rows are a line longer than
     * whole lines of tk floats: 2 KiB apart (tk 512), a register tile's
     * 12 rows of scores fell in two sets of L1. */
    pl->sld = (pl->tk + 15) / 16 * 16 + 16;
    *f = 2 * (size_t)pl->tq + (size_t)pl->tq * (size_t)pl->sld +
         (size_t)pl->tq * (size_t)Dv + (size_t)pl->tq;
    if (!bf) {
      pl->qcopy_at = (*f + 15) / 16 * 16;
      *f = pl->qcopy_at + (size_t)pl->tq * (size_t)Dk;
    }
  } else if (o->weights == ATTN_WEIGHTS_PER_HEAD) {
    *f = 0;
  } else {
    if (!attn_size_mul((size_t)pl->tq, (size_t)Lk, f))
      return attn_diag_set(d, ATTN_ETOOBIG, "scores block overflows");
  }
  /* A window narrower than half the keys: each streaming unit packs its
   * own band (tq + window keys, plus a panel's alignment) into its scratch,
   * where it stays in cache; the call's packed keys, a buffer as large as
   * K written once and read from memory again, and its page faults were a
   * tenth of a windowed call at n = 16384. */
  int64_t band = band_keys(o, Lq, Lk, pl->tq);
  if (pl->streaming && attn__gemm_packs() && Lq >= PACK_MIN_ROWS && !bf &&
      band > 0 && 2 * band <= Lk) {
    pl->upack_at = (*f + 15) / 16 * 16; /* 64-byte aligned panels */
    *f = pl->upack_at + attn__pack_floats(band + ATTN__PANEL, Dk);
  }
  return ATTN_OK;
}

/* bf16: every product reads packed bf16 panels of the keys and values
 * (per call, whatever the shape: the kernels take nothing else; a
 * window's units read them too, no band packing), and each thread
 * converts its unit's query rows and a group's probabilities (at most
 * MAT_ROWS rows of Lk keys, or tq rows of a tk-key tile, plus a pair's
 * alignment) into its scratch, after the *f floats planned so far. */
static attn_status plan_bf16(int64_t B, int64_t Hkv, int64_t Lk, int64_t Dk,
                             int64_t Dv, core_plan *pl, size_t *f,
                             attn_diag *d) {
  int64_t prow = pl->streaming ? pl->tq : pl->tq < MAT_ROWS ? pl->tq : MAT_ROWS;
  size_t qe, pe, kall, vall, all;
  pl->bf16 = 1;
  pl->Dk2 = (Dk + 1) & ~(int64_t)1;
  pl->pb_ld = ((pl->streaming ? pl->tk : Lk) + 3) & ~(int64_t)1;
  qe = ((size_t)pl->tq * (size_t)pl->Dk2 + 31) / 32 * 32;
  if (!attn_size_mul((size_t)prow, (size_t)pl->pb_ld, &pe) ||
      !attn_size_add(qe, pe, &pe))
    return attn_diag_set(d, ATTN_ETOOBIG, "bf16 scratch overflows");
  pl->bf_at = (*f + 15) / 16 * 16;
  pl->pb_at = qe;
  *f = pl->bf_at + (pe + 1) / 2;
  pl->kb_head = attn__bf16_pack_elems(Lk, Dk);
  pl->vb_head = attn__bf16_pack_elems(Dv, Lk);
  if (!attn_size_mul(pl->kb_head, (size_t)B * (size_t)Hkv, &kall) ||
      !attn_size_mul(pl->vb_head, (size_t)B * (size_t)Hkv, &vall) ||
      !attn_size_add(kall, vall, &all))
    return attn_diag_set(d, ATTN_ETOOBIG, "bf16 panels overflow");
  pl->bf_panel_floats = (all + 1) / 2;
  return ATTN_OK;
}

/* Keys packed once per (b, key head) for the AVX-512 NT kernel when
 * enough query rows reuse them (packing costs about what 32 rows of
 * scores do); not with a window's band packing nor in bf16.  The
 * streaming path's values go beside them, each key head's rows side by
 * side (the heads of an [L, H * Dv] matrix are Dv of every H * Dv floats:
 * the P V kernel's loads then strode over a page every few keys, and the
 * core took 4% longer than on one head, n 2048, d 64, h 8, issue 45). */
static void plan_kpack(int64_t B, int64_t Hkv, int64_t Lq, int64_t Lk,
                       int64_t Dk, int64_t Dv, int bf, core_plan *pl) {
  if (attn__gemm_packs() && Lq >= PACK_MIN_ROWS && !pl->upack_at && !bf) {
    size_t per = attn__pack_floats(Lk, Dk), all, vf;
    if (pl->streaming && attn_size_mul((size_t)Lk, (size_t)Dv, &vf) &&
        attn_size_add(vf, per, &vf)) {
      pl->vpack_at = per;
      per = (vf + 15) / 16 * 16; /* the next head's panels on a line */
    }
    if (attn_size_mul(per, (size_t)B * (size_t)Hkv, &all)) {
      pl->kpack_head = per;
      pl->kpack_floats = all;
    }
  }
}

/* Plans a call: checks the path, then tiles and threads, scratch, bf16
 * panels and packed keys, in that order (the first failure's diagnostic). */
static attn_status plan_core(int64_t B, int64_t H, int64_t Hkv, int64_t Lq,
                             int64_t Lk, int64_t Dk, int64_t Dv,
                             const attn_attend_opts *o, const attn_exec *x,
                             core_plan *pl, attn_diag *d) {
  attn_exec dflt = {0};
  int bf = o->precision == ATTN_PRECISION_BF16;
  size_t f = 0;
  attn_status s;
  if (!x) x = &dflt;
  memset(pl, 0, sizeof *pl);
  if ((s = plan_tiles(B, H, Lq, Lk, Dv, o, x, pl, d)) ||
      (s = plan_unit_scratch(o, Lq, Lk, Dk, Dv, bf, pl, &f, d)) ||
      (bf && (s = plan_bf16(B, Hkv, Lk, Dk, Dv, pl, &f, d))))
    return s;
  pl->scratch_floats = f;
  plan_kpack(B, Hkv, Lq, Lk, Dk, Dv, bf, pl);
  return ATTN_OK;
}

static attn_status weights_floats(int64_t B, int64_t H, int64_t Lq, int64_t Lk,
                                  attn_weights_mode w, size_t *n) {
  size_t r = 0;
  if (w == ATTN_WEIGHTS_NONE) {
    *n = 0;
    return ATTN_OK;
  }
  if (!attn_size_mul((size_t)B, (size_t)Lq, &r) ||
      !attn_size_mul(r, (size_t)Lk, &r) ||
      (w == ATTN_WEIGHTS_PER_HEAD && !attn_size_mul(r, (size_t)H, &r)))
    return ATTN_ETOOBIG;
  *n = r;
  return ATTN_OK;
}

/* n floats on a 64-byte boundary (a cache line, one zmm register), so that
 * rows whose stride is a multiple of 16 floats never split a vector load
 * across two lines; NULL when out of memory.  Free with free(). */
static float *alloc_floats(size_t n) {
  size_t bytes;
  if (!attn_size_mul(n ? n : 1, sizeof(float), &bytes) ||
      !attn_size_add(bytes, 63, &bytes))
    return NULL;
  return aligned_alloc(64, bytes / 64 * 64);
}

/* Allocate per-thread scratch; on failure nothing stays allocated. */
static attn_status alloc_scratch(const core_plan *pl, float ***out) {
  *out = NULL;
  if (pl->scratch_floats == 0) return ATTN_OK;
  float **s = calloc((size_t)pl->threads, sizeof *s);
  if (!s) return ATTN_ENOMEM;
  for (int t = 0; t < pl->threads; t++) {
    s[t] = alloc_floats(pl->scratch_floats);
    if (!s[t]) {
      for (int k = 0; k < t; k++) free(s[k]);
      free(s);
      return ATTN_ENOMEM;
    }
  }
  *out = s;
  return ATTN_OK;
}

static void free_scratch(float **s, int threads) {
  if (!s) return;
  for (int t = 0; t < threads; t++) free(s[t]);
  free(s);
}

static void pack_unit(void *vctx, int64_t u, int tid) {
  const core_ctx *c = vctx;
  int64_t Hkv = c->H / c->group, b = u / Hkv, hk = u % Hkv;
  (void)tid;
  if (c->bf16) {
    attn__bf16_pack_nt(c->Lk, c->Dk, c->k.data + b * c->k.sb + hk * c->k.sh,
                       c->k.ld, c->kb + (size_t)u * c->kb_head);
    attn__bf16_pack_nn(c->Dv, c->Lk, c->v.data + b * c->v.sb + hk * c->v.sh,
                       c->v.ld, c->vb + (size_t)u * c->vb_head);
    return;
  }
  float *kp = c->kpack + (size_t)u * c->kpack_head;
  attn__pack_nt(c->Lk, c->Dk, c->k.data + b * c->k.sb + hk * c->k.sh, c->k.ld,
                kp);
  if (c->vpack_at) {
    const float *v = c->v.data + b * c->v.sb + hk * c->v.sh;
    float *vp = kp + c->vpack_at;
    for (int64_t j = 0; j < c->Lk; j++)
      memcpy(vp + j * c->Dv, v + j * c->v.ld, (size_t)c->Dv * sizeof *vp);
  }
}

/* Packs the keys when planned (if that memory cannot be had, the unpacked
 * cblas path runs instead: same answer within rounding), then the units.
 * bf16 needs its panels: ATTN_ENOMEM without them, nothing computed. */
static attn_status run_core(core_ctx *c, const core_plan *pl) {
  c->tq = pl->tq;
  c->tk = pl->tk;
  c->sld = pl->sld;
  c->nqb = pl->nqb;
  c->streaming = pl->streaming;
  c->upack_at = pl->upack_at;
  c->qcopy_at = pl->qcopy_at;
  c->kpack = NULL;
  c->vpack_at = 0;
  c->bf16 = pl->bf16;
  if (c->bf16) {
    float *mem = alloc_floats(pl->bf_panel_floats);
    if (!mem) return ATTN_ENOMEM;
    c->Dk2 = pl->Dk2;
    c->pb_ld = pl->pb_ld;
    c->bf_at = pl->bf_at;
    c->pb_at = pl->pb_at;
    c->kb_head = pl->kb_head;
    c->vb_head = pl->vb_head;
    c->kb = (uint16_t *)(void *)mem;
    c->vb = c->kb + (size_t)c->B * (size_t)(c->H / c->group) * c->kb_head;
    attn__parallel_for(pl->threads, c->B * (c->H / c->group), pack_unit, c);
    attn__parallel_for(pl->threads, pl->units,
                       pl->streaming ? streaming_unit : materialised_unit, c);
    free(mem);
    c->kb = c->vb = NULL;
    return ATTN_OK;
  }
  if (pl->kpack_floats) {
    c->kpack = alloc_floats(pl->kpack_floats);
    c->kpack_head = pl->kpack_head;
    c->vpack_at = pl->vpack_at;
    if (c->kpack)
      attn__parallel_for(pl->threads, c->B * (c->H / c->group), pack_unit, c);
  }
  attn__parallel_for(pl->threads, pl->units,
                     pl->streaming ? streaming_unit : materialised_unit, c);
  free(c->kpack);
  c->kpack = NULL;
  return ATTN_OK;
}

static float default_scale(const attn_attend_opts *o, int64_t Dk) {
  return o->has_scale ? o->scale : (float)(1.0 / sqrt((double)Dk));
}

/* ---- rotary positions ---------------------------------------------------- */

/* Angles are exact (cos and sin of the double product pos * theta) every
 * ROPE_EXACT positions and one rotation by theta further in between
 * (relative error ~1e-15 after ROPE_EXACT steps): one cos and sin pair per
 * 32 positions and frequency instead of one per position (at n = 2048 and
 * 32 frequencies, libm's pairs alone would cost a third of the 5% the
 * variant may cost). */
#define ROPE_EXACT 32
#define ROPE_DEFAULT_BASE 10000.0

/* Rotary positions resolved for one call: cos and sin tables [L][half] for
 * the query positions (query_offset + i) and the key positions (j); they
 * share one table when those are the same positions. */
typedef struct rope_tabs {
  int on, interleaved;
  int64_t half, qoff;
  double base;
  float *mem;
  const float *qcs, *qsn, *kcs, *ksn;
} rope_tabs;

static void rope_plan(const attn_attend_opts *o, int64_t Dh, int64_t Lq,
                      int64_t Lk, rope_tabs *t) {
  const attn_rotary *r = &o->rotary;
  memset(t, 0, sizeof *t);
  if (!r->on) return;
  t->on = 1;
  t->interleaved = r->interleaved != 0;
  t->half = (r->dims ? r->dims : Dh) / 2;
  t->base = r->base != 0.0 ? r->base : ROPE_DEFAULT_BASE;
  t->qoff = r->has_query_offset ? r->query_offset : Lk - Lq;
}

static int rope_shared(const rope_tabs *t, int64_t Lq, int64_t Lk) {
  return t->qoff == 0 && Lq == Lk;
}

/* Floats of the tables (0 without rotary). */
static size_t rope_floats(const rope_tabs *t, int64_t Lq, int64_t Lk) {
  if (!t->on) return 0;
  return 2 * (size_t)t->half * (size_t)(rope_shared(t, Lq, Lk) ? Lk : Lq + Lk);
}

/* cos and sin of (p0 + k) * base^(-2t / (2 half)) into cs, sn [n][half]. */
static void rope_fill(const rope_tabs *t, int64_t p0, int64_t n, float *cs,
                      float *sn) {
  int64_t half = t->half;
  for (int64_t f = 0; f < half; f++) {
    double th = pow(t->base, -2.0 * (double)f / (double)(2 * half));
    double c1 = cos(th), s1 = sin(th), co = 1.0, si = 0.0;
    for (int64_t k = 0; k < n; k++) {
      if (k % ROPE_EXACT == 0) {
        double a = (double)(p0 + k) * th;
        co = cos(a);
        si = sin(a);
      } else {
        double cn = co * c1 - si * s1;
        si = si * c1 + co * s1;
        co = cn;
      }
      cs[k * half + f] = (float)co;
      sn[k * half + f] = (float)si;
    }
  }
}

/* Allocate and fill the tables planned in t; ATTN_ENOMEM on failure. */
static attn_status rope_build(rope_tabs *t, int64_t Lq, int64_t Lk) {
  if (!t->on) return ATTN_OK;
  size_t kf = (size_t)Lk * (size_t)t->half;
  t->mem = alloc_floats(rope_floats(t, Lq, Lk));
  if (!t->mem) return ATTN_ENOMEM;
  float *kcs = t->mem, *ksn = kcs + kf;
  rope_fill(t, 0, Lk, kcs, ksn);
  t->kcs = kcs;
  t->ksn = ksn;
  if (rope_shared(t, Lq, Lk)) {
    t->qcs = kcs;
    t->qsn = ksn;
  } else {
    float *qcs = ksn + kf, *qsn = qcs + (size_t)Lq * (size_t)t->half;
    rope_fill(t, t->qoff, Lq, qcs, qsn);
    t->qcs = qcs;
    t->qsn = qsn;
  }
  return ATTN_OK;
}

/* sdpa: q or k copied from its view into a contiguous [B][heads][L][D]
 * buffer and rotated there, one (b, head) per unit. */
typedef struct rope_copy {
  const attn_view *src;
  float *dst;
  int64_t heads, L, D;
  const float *cs, *sn;
  const rope_tabs *t;
} rope_copy;

static void rope_copy_unit(void *vctx, int64_t u, int tid) {
  const rope_copy *c = vctx;
  int64_t b = u / c->heads, h = u % c->heads;
  (void)tid;
  for (int64_t i = 0; i < c->L; i++) {
    const float *src =
        c->src->data + b * c->src->sb + h * c->src->sh + i * c->src->ld;
    float *dst = c->dst + (u * c->L + i) * c->D;
    memcpy(dst, src, (size_t)c->D * sizeof *dst);
    attn__rope(dst, c->cs + i * c->t->half, c->sn + i * c->t->half, c->t->half,
               c->t->interleaved);
  }
}

/* a * b * c * d floats, or SIZE_MAX when that overflows (then every size
 * check and allocation fails). */
static size_t floats4(int64_t a, int64_t b, int64_t c, int64_t d) {
  size_t n;
  if (!attn_size_mul((size_t)a, (size_t)b, &n) ||
      !attn_size_mul(n, (size_t)c, &n) || !attn_size_mul(n, (size_t)d, &n))
    return SIZE_MAX;
  return n;
}

/* Floats of sdpa's rotated copies of q and k, and of the tables (SIZE_MAX
 * when too many). */
static size_t sdpa_rope_floats(const attn_sdpa_problem *p, const rope_tabs *t) {
  size_t n;
  if (!t->on) return 0;
  if (!attn_size_add(floats4(p->B, p->H, p->Lq, p->Dk),
                     floats4(p->B, p->Hkv, p->Lk, p->Dk), &n) ||
      !attn_size_add(n, rope_floats(t, p->Lq, p->Lk), &n))
    return SIZE_MAX;
  return n;
}

/* ---- ALiBi slopes -------------------------------------------------------- */

attn_status attn_alibi_slopes(int64_t H, float *slopes, attn_diag *d) {
  if (H < 1 || H > INT_MAX)
    return attn_diag_set(d, ATTN_EINVAL, "alibi: %lld heads; expected 1 to %d",
                         (long long)H, INT_MAX);
  if (!slopes) return attn_diag_set(d, ATTN_EINVAL, "alibi: slopes is NULL");
  int64_t P = 1; /* the largest power of 2 <= H */
  while (P <= H / 2) P *= 2;
  for (int64_t h = 0; h < P; h++)
    slopes[h] = (float)exp2(-8.0 * (double)(h + 1) / (double)P);
  for (int64_t k = 0; k < H - P; k++)
    slopes[P + k] = (float)exp2(-8.0 * (double)(2 * k + 1) / (double)(2 * P));
  return ATTN_OK;
}

/* ---- sdpa --------------------------------------------------------------- */

attn_status attn_sdpa_bytes(const attn_sdpa_problem *p, const attn_exec *x,
                            attn_bytes *bytes, attn_diag *d) {
  attn_status s = attn_sdpa_check(p, d);
  core_plan pl;
  size_t n, ws;
  if (s) return s;
  if ((s = plan_core(p->B, p->H, p->Hkv, p->Lq, p->Lk, p->Dk, p->Dv, &p->o, x,
                     &pl, d)))
    return s;
  rope_tabs rt;
  rope_plan(&p->o, p->Dk, p->Lq, p->Lk, &rt);
  if (!attn_size_mul(pl.scratch_floats, (size_t)pl.threads, &ws) ||
      !attn_size_add(ws, pl.kpack_floats, &ws) ||
      !attn_size_add(ws, pl.bf_panel_floats, &ws) ||
      !attn_size_add(ws, sdpa_rope_floats(p, &rt), &ws) ||
      !attn_size_mul(ws, sizeof(float), &ws))
    return attn_diag_set(d, ATTN_ETOOBIG, "workspace size overflows");
  bytes->workspace = ws;
  if (!attn_size_mul((size_t)p->B * (size_t)p->H, (size_t)p->Lq, &n) ||
      !attn_size_mul(n, (size_t)p->Dv * sizeof(float), &bytes->out))
    return attn_diag_set(d, ATTN_ETOOBIG, "output size overflows");
  if (weights_floats(p->B, p->H, p->Lq, p->Lk, p->o.weights, &n) ||
      !attn_size_mul(n, sizeof(float), &bytes->weights))
    return attn_diag_set(d, ATTN_ETOOBIG, "weights size overflows");
  return ATTN_OK;
}

/* sdpa's value checks, after its shape checks and plan: q, k and v (a view
 * that is the one before it is not looked at twice), then the options'
 * values. */
/* view_nonfinite's scan on threads: the view as matrices of rows x cols
 * (rows ld apart), in units of FINITE_ROWS rows; a unit that finds a
 * non-finite value sets bad.  Only the answer "all finite" is taken from
 * here: the first bad row is found again by view_nonfinite. */
#define FINITE_ROWS 256
#define FINITE_MIN_FLOATS ((int64_t)1 << 20) /* below: one thread scans */

typedef struct finite_ctx {
  const float *data;
  int64_t n1, s0, s1, rows, ld, cols, per; /* per: units per matrix */
  atomic_int bad;
} finite_ctx;

static void finite_unit(void *vctx, int64_t u, int tid) {
  finite_ctx *f = vctx;
  int64_t m = u / f->per, i0 = u % f->per * FINITE_ROWS;
  int64_t i1 = i0 + FINITE_ROWS < f->rows ? i0 + FINITE_ROWS : f->rows;
  const float *p = f->data + m / f->n1 * f->s0 + m % f->n1 * f->s1;
  int ok = 1;
  (void)tid;
  if (f->ld == f->cols)
    ok = row_finite(p + i0 * f->ld, (i1 - i0) * f->cols);
  else
    for (int64_t i = i0; i < i1 && ok; i++)
      ok = row_finite(p + i * f->ld, f->cols);
  if (!ok) atomic_store(&f->bad, 1);
}

static int64_t view_nonfinite_on(int threads, const float *data, int64_t n0,
                                 int64_t s0, int64_t n1, int64_t s1,
                                 int64_t rows, int64_t ld, int64_t cols) {
  if (threads > 1 && n0 * n1 * rows * cols >= FINITE_MIN_FLOATS) {
    finite_ctx f = {data, n1, s0, s1, rows, ld, cols, 0, 0};
    if (n1 > 1 && s1 == cols && ld == n1 * cols) { /* heads side by side */
      f.n1 = 1;
      f.cols = f.ld;
    }
    f.per = (rows + FINITE_ROWS - 1) / FINITE_ROWS;
    atomic_init(&f.bad, 0);
    attn__parallel_for(threads, n0 * f.n1 * f.per, finite_unit, &f);
    if (!atomic_load(&f.bad)) return -1;
  }
  return view_nonfinite(data, n0, s0, n1, s1, rows, ld, cols);
}

static attn_status sdpa_check_values(const attn_sdpa_problem *p, int threads,
                                     attn_diag *d) {
  int64_t at;
  if ((at = view_nonfinite_on(threads, p->q.data, p->B, p->q.sb, p->H, p->q.sh,
                              p->Lq, p->q.ld, p->Dk)) >= 0)
    return attn_diag_set(d, ATTN_ENONFINITE,
                         "query contains NaN or Inf (row %lld of [B*H*Lq])",
                         (long long)at);
  /* self-attention passes the query as the key, and often the key as the
   * value: the same elements need no second look */
  bool k_is_q = p->Hkv == p->H && p->Lk == p->Lq && same_view(&p->k, &p->q);
  bool v_is_k = p->Dv == p->Dk && same_view(&p->v, &p->k);
  if (!k_is_q &&
      (at = view_nonfinite_on(threads, p->k.data, p->B, p->k.sb, p->Hkv,
                              p->k.sh, p->Lk, p->k.ld, p->Dk)) >= 0)
    return attn_diag_set(d, ATTN_ENONFINITE,
                         "key contains NaN or Inf (row %lld of [B*Hkv*Lk])",
                         (long long)at);
  if (!v_is_k &&
      (at = view_nonfinite_on(threads, p->v.data, p->B, p->v.sb, p->Hkv,
                              p->v.sh, p->Lk, p->v.ld, p->Dv)) >= 0)
    return attn_diag_set(d, ATTN_ENONFINITE,
                         "value contains NaN or Inf (row %lld of [B*Hkv*Lk])",
                         (long long)at);
  return check_opt_values(&p->o, p->B, p->Lq, p->Lk, d);
}

/* sdpa's rotary positions (rt planned and on): q and k rotated in copies of
 * the engine's own, *qr and *kr, which c's q and k then view.  ATTN_ENOMEM
 * (nothing rotated) without the tables or the copies; the caller frees
 * rt->mem, *qr and *kr either way. */
static attn_status sdpa_rotate(const attn_sdpa_problem *p, int threads,
                               rope_tabs *rt, float **qr, float **kr,
                               core_ctx *c) {
  if (rope_build(rt, p->Lq, p->Lk) ||
      !(*qr = alloc_floats(floats4(p->B, p->H, p->Lq, p->Dk))) ||
      !(*kr = alloc_floats(floats4(p->B, p->Hkv, p->Lk, p->Dk))))
    return ATTN_ENOMEM;
  rope_copy cq = {&p->q, *qr, p->H, p->Lq, p->Dk, rt->qcs, rt->qsn, rt};
  rope_copy ck = {&p->k, *kr, p->Hkv, p->Lk, p->Dk, rt->kcs, rt->ksn, rt};
  attn__parallel_for(threads, p->B * p->H, rope_copy_unit, &cq);
  attn__parallel_for(threads, p->B * p->Hkv, rope_copy_unit, &ck);
  c->q = (attn_view){*qr, p->H * p->Lq * p->Dk, p->Lq * p->Dk, p->Dk};
  c->k = (attn_view){*kr, p->Hkv * p->Lk * p->Dk, p->Lk * p->Dk, p->Dk};
  return ATTN_OK;
}

/* *x->kernel when asked (attn_exec): what the products of the call that
 * took the bits at its start ran. */
static void report_kernel(const attn_exec *x, attn_precision p) {
  unsigned bits = attn__gemm_ran_take();
  if (x && x->kernel)
    *x->kernel = p == ATTN_PRECISION_BF16 ? attn__bf16_name()
                                          : attn__gemm_ran_name(bits);
}

attn_status attn_sdpa(const attn_sdpa_problem *p, const attn_exec *x,
                      attn_mview out, float *weights, attn_diag *d) {
  attn_status s = attn_sdpa_check(p, d);
  core_plan pl;
  float **scratch;
  if (s) return s;
  if (!out.data || out.ld < p->Dv)
    return attn_diag_set(d, ATTN_EINVAL, "output view is NULL or too narrow");
  if (p->o.weights != ATTN_WEIGHTS_NONE && !weights)
    return attn_diag_set(d, ATTN_EINVAL, "weights requested but buffer NULL");
  if ((s = plan_core(p->B, p->H, p->Hkv, p->Lq, p->Lk, p->Dk, p->Dv, &p->o, x,
                     &pl, d)) ||
      (s = sdpa_check_values(p, pl.threads, d)))
    return s;
  if ((s = alloc_scratch(&pl, &scratch)))
    return attn_diag_set(d, s, "cannot allocate attention workspace");
  core_ctx c = {.B = p->B,
                .H = p->H,
                .Lq = p->Lq,
                .Lk = p->Lk,
                .Dk = p->Dk,
                .Dv = p->Dv,
                .group = p->H / p->Hkv,
                .q = p->q,
                .k = p->k,
                .v = p->v,
                .out = out,
                .o = &p->o,
                .scale = default_scale(&p->o, p->Dk),
                .softcap = p->o.softcap,
                .weights = weights,
                .scratch = scratch};
  rope_tabs rt;
  float *qr = NULL, *kr = NULL;
  (void)attn__gemm_ran_take(); /* this call's products from here on */
  rope_plan(&p->o, p->Dk, p->Lq, p->Lk, &rt);
  if (rt.on && sdpa_rotate(p, pl.threads, &rt, &qr, &kr, &c)) {
    free(rt.mem);
    free(qr);
    free(kr);
    free_scratch(scratch, pl.threads);
    return attn_diag_set(d, ATTN_ENOMEM,
                         "cannot allocate the rotated query and key");
  }
  s = run_core(&c, &pl);
  free_scratch(scratch, pl.threads);
  free(rt.mem);
  free(qr);
  free(kr);
  if (s)
    return attn_diag_set(d, s,
                         "cannot allocate the bf16 key and value "
                         "panels");
  report_kernel(x, p->o.precision);
  return ATTN_OK;
}

double attn_sdpa_flops(const attn_sdpa_problem *p) {
  return 2.0 * (double)p->B * (double)p->H * (double)p->Lq * (double)p->Lk *
         (double)(p->Dk + p->Dv);
}

/* ---- mha ---------------------------------------------------------------- */

void attn__mha_normalise(const attn_mha_problem *in, attn_mha_problem *p) {
  *p = *in;
  if (!p->xk) {
    p->xk = p->xv = p->xq;
    p->Lk = p->Lq;
    p->kdim = p->vdim = p->E;
  } else if (!p->xv) {
    p->xv = p->xk;
    p->vdim = p->kdim;
  }
}

static attn_status check_weight(const char *name, const attn_weight *w,
                                int64_t in, int64_t out, attn_precision prec,
                                attn_diag *d) {
  if (!w->data && !w->bf16)
    return attn_diag_set(d, ATTN_EINVAL, "%s is missing", name);
  if (!w->data && prec != ATTN_PRECISION_BF16)
    return attn_diag_set(d, ATTN_EINVAL,
                         "%s is held in bfloat16 only: an fp32 call needs "
                         "its fp32 values",
                         name);
  if (w->layout != ATTN_W_IN_OUT && w->layout != ATTN_W_OUT_IN)
    return attn_diag_set(d, ATTN_EINVAL, "%s: unknown layout", name);
  int64_t need = w->layout == ATTN_W_IN_OUT ? out : in;
  if (w->ld != 0 && (w->ld < need || !fits_int(w->ld)))
    return attn_diag_set(
        d, ATTN_ESHAPE, "%s: row stride %lld is smaller than its %s dim %lld",
        name, (long long)w->ld, w->layout == ATTN_W_IN_OUT ? "out" : "in",
        (long long)need);
  return ATTN_OK;
}

int64_t attn__weight_ld(const attn_weight *w, int64_t in, int64_t out) {
  return w->ld ? w->ld : (w->layout == ATTN_W_IN_OUT ? out : in);
}

static attn_status mha_check_norm(const attn_mha_problem *p, attn_diag *d) {
  attn_status s;
  if ((s = check_dim("B (batch)", p->B, d)) ||
      (s = check_dim("Lq", p->Lq, d)) || (s = check_dim("Lk", p->Lk, d)) ||
      (s = check_dim("E (embed_dim)", p->E, d)) ||
      (s = check_dim("num_heads", p->H, d)) ||
      (s = check_dim("num_kv_heads", p->Hkv, d)) ||
      (s = check_dim("kdim", p->kdim, d)) ||
      (s = check_dim("vdim", p->vdim, d)))
    return s;
  if (p->E % p->H != 0)
    return attn_diag_set(d, ATTN_ESHAPE,
                         "embed_dim %lld is not divisible by num_heads %lld",
                         (long long)p->E, (long long)p->H);
  if (p->H % p->Hkv != 0)
    return attn_diag_set(
        d, ATTN_ESHAPE, "num_heads %lld is not a multiple of num_kv_heads %lld",
        (long long)p->H, (long long)p->Hkv);
  if (!p->xq) return attn_diag_set(d, ATTN_EINVAL, "query is missing");
  int64_t kw = p->Hkv * (p->E / p->H);
  if ((s = check_weight("w_q", &p->wq, p->E, p->E, p->o.precision, d)) ||
      (s = check_weight("w_k", &p->wk, p->kdim, kw, p->o.precision, d)) ||
      (s = check_weight("w_v", &p->wv, p->vdim, kw, p->o.precision, d)) ||
      (s = check_weight("w_o", &p->wo, p->E, p->E, p->o.precision, d)))
    return s;
  return check_opts(&p->o, p->B, p->H, p->E / p->H, d);
}

attn_status attn_mha_check(const attn_mha_problem *in, attn_diag *d) {
  attn_mha_problem p;
  if (!in) return attn_diag_set(d, ATTN_EINVAL, "problem is NULL");
  attn__mha_normalise(in, &p);
  return mha_check_norm(&p, d);
}

typedef struct mha_sizes {
  size_t q, k, v; /* floats of each projection */
} mha_sizes;

static attn_status mha_sizes_of(const attn_mha_problem *p, mha_sizes *z) {
  size_t kw = (size_t)(p->Hkv * (p->E / p->H)), t;
  if (!attn_size_mul((size_t)p->B, (size_t)p->Lq, &t) ||
      !attn_size_mul(t, (size_t)p->E, &z->q) ||
      !attn_size_mul((size_t)p->B, (size_t)p->Lk, &t) ||
      !attn_size_mul(t, kw, &z->k))
    return ATTN_ETOOBIG;
  z->v = z->k;
  return ATTN_OK;
}

/* bf16: the four weights' panels and the projections' per-thread rows
 * (an upper bound: all four weights at once), in floats. */
static size_t mha_bf16_floats(const attn_mha_problem *p, int threads) {
  if (p->o.precision != ATTN_PRECISION_BF16) return 0;
  int64_t kw = p->Hkv * (p->E / p->H), in2 = p->E;
  if (p->kdim > in2) in2 = p->kdim;
  if (p->vdim > in2) in2 = p->vdim;
  in2 = (in2 + 1) & ~(int64_t)1;
  size_t n =
      2 * attn__bf16_pack_elems(p->E, p->E) +
      attn__bf16_pack_elems(kw, p->kdim) + attn__bf16_pack_elems(kw, p->vdim) +
      (size_t)clamp_threads(threads, MAX_THREADS) * PROJ_ROWS * (size_t)in2;
  return n / 2 + 64;
}

/* fp32: the projections' per-thread copies of input rows (proj_ctx.xf;
 * an upper bound), in floats. */
static size_t mha_xf_floats(const attn_mha_problem *p, int threads) {
  if (p->o.precision == ATTN_PRECISION_BF16) return 0;
  int64_t in = p->E;
  if (p->kdim > in) in = p->kdim;
  if (p->vdim > in) in = p->vdim;
  if (in < PROJ_ALIAS_LD) return 0;
  return (size_t)clamp_threads(threads, MAX_THREADS) * PROJ_ROWS *
         ((size_t)in + 32);
}

attn_status attn_mha_bytes(const attn_mha_problem *in, const attn_exec *x,
                           attn_bytes *bytes, attn_diag *d) {
  attn_mha_problem p;
  core_plan pl;
  mha_sizes z;
  size_t f, n;
  attn_status s;
  if (!in) return attn_diag_set(d, ATTN_EINVAL, "problem is NULL");
  attn__mha_normalise(in, &p);
  if ((s = mha_check_norm(&p, d))) return s;
  if ((s = plan_core(p.B, p.H, p.Hkv, p.Lq, p.Lk, p.E / p.H, p.E / p.H, &p.o, x,
                     &pl, d)))
    return s;
  rope_tabs rt;
  rope_plan(&p.o, p.E / p.H, p.Lq, p.Lk, &rt);
  if (mha_sizes_of(&p, &z) ||
      !attn_size_mul(pl.scratch_floats, (size_t)pl.threads, &f) ||
      !attn_size_add(f, pl.kpack_floats, &f) ||
      !attn_size_add(f, pl.bf_panel_floats, &f) ||
      !attn_size_add(f, mha_bf16_floats(&p, x ? x->threads : 1), &f) ||
      !attn_size_add(f, mha_xf_floats(&p, x ? x->threads : 1), &f) ||
      !attn_size_add(f, rope_floats(&rt, p.Lq, p.Lk), &f) ||
      !attn_size_add(f, z.q, &f) || !attn_size_add(f, z.k, &f) ||
      !attn_size_add(f, z.v, &f) ||
      !attn_size_mul(f, sizeof(float), &bytes->workspace) ||
      !attn_size_mul(z.q, sizeof(float), &bytes->out) ||
      weights_floats(p.B, p.H, p.Lq, p.Lk, p.o.weights, &n) ||
      !attn_size_mul(n, sizeof(float), &bytes->weights))
    return attn_diag_set(d, ATTN_ETOOBIG, "problem size overflows");
  return ATTN_OK;
}

typedef struct proj_job {
  const float *x;
  int64_t rows, in, out;
  const attn_weight *w;
  const float *bias;
  float *y;
  int64_t ldx, ldy; /* row strides of x and y; 0 = in and out */
  float *wpack;     /* an [out, in] weight packed for the NT kernel, or NULL */
  uint16_t *wb;     /* bf16: the weight's panels (gemm.c) */
} proj_job;

/* Rotary positions on a job's output heads: heads of Dh values from
 * column col, row r at position index r % L of the tables cs, sn
 * [L][t->half]. */
typedef struct rope_seg {
  const float *cs, *sn; /* NULL: none */
  int64_t col, heads, Dh, L;
  const rope_tabs *t;
} rope_seg;

typedef struct proj_ctx {
  proj_job job[3];
  int64_t chunks[3];
  int njobs;
  rope_seg rope[3][2]; /* per job: q, k (the fused job has both) */
  /* bf16: the weights packed as bf16 panels, each chunk's input rows
   * rounded into its thread's xb (PROJ_ROWS rows of xb_ld values) */
  int bf16;
  uint16_t *xb;
  int64_t xb_ld;
  /* fp32: each chunk's input rows copied into its thread's xf (PROJ_ROWS
   * rows of xf_ld values) when the input's rows are a multiple of 4 KiB
   * apart: a register tile's 12 rows then fall in one L1 set and evict
   * each other (d_model 1024, n 2048, one thread, Zen 4: mha 427 -> 345
   * ms, the projections from ~70 to ~100 GFLOP/s; at 2 KiB apart, d_model
   * 512, the copy cost 1% and gained nothing).  The same products on the
   * same values: same bits.  NULL: no job needs it, or no memory for it
   * (then the rows are read where they are). */
  float *xf;
  int64_t xf_ld;
} proj_ctx;

static int proj_copy = 1; /* attn__set_proj_copy (tests) */

int attn__set_proj_copy(int on) {
  int was = proj_copy;
  proj_copy = on;
  return was;
}

/* Rows ld floats apart that a tile should read from a copy (proj_ctx.xf). */
static int rows_alias(int64_t ld) {
  return proj_copy && ld >= PROJ_ALIAS_LD && ld % PROJ_ALIAS_LD == 0;
}

static void proj_unit(void *vctx, int64_t u, int tid) {
  const proj_ctx *c = vctx;
  int j = 0;
  (void)tid;
  while (u >= c->chunks[j]) u -= c->chunks[j++];
  const proj_job *p = &c->job[j];
  int64_t r0 = u * PROJ_ROWS;
  int64_t r1 = r0 + PROJ_ROWS < p->rows ? r0 + PROJ_ROWS : p->rows;
  int64_t ldx = p->ldx ? p->ldx : p->in, ldy = p->ldy ? p->ldy : p->out;
  int64_t ldw = attn__weight_ld(p->w, p->in, p->out);
  if (c->bf16) {
    uint16_t *xb = c->xb + (size_t)tid * PROJ_ROWS * (size_t)c->xb_ld;
    int64_t in2 = (p->in + 1) & ~(int64_t)1;
    for (int64_t r = r0; r < r1; r++) {
      attn__bf16_convert(p->x + r * ldx, p->in, xb + (r - r0) * c->xb_ld);
      if (in2 > p->in) xb[(r - r0) * c->xb_ld + p->in] = 0;
    }
    attn__bf16_gemm(r1 - r0, p->out, in2 / 2, 1.0f, xb, c->xb_ld, p->wb,
                    attn__bf16_panel_stride(p->in), 0, 0, p->y + r0 * ldy, ldy);
  } else {
    const float *x = p->x + r0 * ldx;
    int64_t lx = ldx;
    if (c->xf && rows_alias(ldx)) {
      float *xf = c->xf + (size_t)tid * PROJ_ROWS * (size_t)c->xf_ld;
      for (int64_t r = r0; r < r1; r++)
        memcpy(xf + (r - r0) * c->xf_ld, p->x + r * ldx,
               (size_t)p->in * sizeof(float));
      x = xf;
      lx = c->xf_ld;
    }
    if (p->w->layout == ATTN_W_IN_OUT)
      attn__gemm_nn(r1 - r0, p->out, p->in, x, lx, p->w->data, ldw, 0,
                    p->y + r0 * ldy, ldy);
    else if (p->wpack)
      attn__gemm_nt_packed(r1 - r0, p->out, p->in, 1.0f, x, lx, p->wpack,
                           p->y + r0 * ldy, ldy);
    else
      attn__gemm_nt(r1 - r0, p->out, p->in, 1.0f, x, lx, p->w->data, ldw,
                    p->y + r0 * ldy, ldy);
  }
  if (p->bias)
    for (int64_t r = r0; r < r1; r++)
      attn__row_axpy(p->y + r * ldy, p->bias, p->out, 1.0f);
  for (int g = 0; g < 2; g++) { /* while the rows are in cache */
    const rope_seg *rs = &c->rope[j][g];
    if (!rs->cs) continue;
    for (int64_t r = r0; r < r1; r++) {
      int64_t at = r % rs->L * rs->t->half;
      float *y = p->y + r * ldy + rs->col;
      for (int64_t h = 0; h < rs->heads; h++)
        attn__rope(y + h * rs->Dh, rs->cs + at, rs->sn + at, rs->t->half,
                   rs->t->interleaved);
    }
  }
}

/* A weight into bf16 panels: rounded from fp32, or copied when it is held
 * in bfloat16. */
static void pack_weight_bf16(const attn_weight *w, int64_t in, int64_t out,
                             int64_t ldw, uint16_t *wb) {
  if (w->bf16 && w->layout == ATTN_W_IN_OUT)
    attn__bf16_pack_nn_u16(out, in, w->bf16, ldw, wb);
  else if (w->bf16)
    attn__bf16_pack_nt_u16(out, in, w->bf16, ldw, wb);
  else if (w->layout == ATTN_W_IN_OUT)
    attn__bf16_pack_nn(out, in, w->data, ldw, wb);
  else
    attn__bf16_pack_nt(out, in, w->data, ldw, wb);
}

/* Weights stored [out, in] are packed for the NT kernel when enough rows
 * use them (without the memory, cblas_sgemm takes them as they are).
 * bf16: every weight is packed as bf16 panels and each thread gets a
 * buffer for its chunk's rounded input rows; ATTN_ENOMEM (nothing
 * computed) without that memory. */
static attn_status run_proj(proj_ctx *c, int threads) {
  int64_t total = 0, work = 0, in2max = 2, xfmax = 0;
  attn_status s = ATTN_OK;
  c->xb = NULL;
  c->xf = NULL;
  for (int j = 0; j < c->njobs; j++) {
    proj_job *p = &c->job[j];
    c->chunks[j] = (p->rows + PROJ_ROWS - 1) / PROJ_ROWS;
    total += c->chunks[j];
    work += p->rows * p->in * p->out;
    p->wpack = NULL;
    p->wb = NULL;
    if (!c->bf16 && rows_alias(p->ldx ? p->ldx : p->in) && p->in > xfmax)
      xfmax = p->in;
    if (c->bf16) {
      int64_t ldw = attn__weight_ld(p->w, p->in, p->out);
      if (((p->in + 1) & ~(int64_t)1) > in2max)
        in2max = (p->in + 1) & ~(int64_t)1;
      p->wb = (uint16_t *)(void *)alloc_floats(
          (attn__bf16_pack_elems(p->out, p->in) + 1) / 2);
      if (!p->wb) {
        s = ATTN_ENOMEM;
        continue;
      }
      pack_weight_bf16(p->w, p->in, p->out, ldw, p->wb);
    } else if (p->w->layout == ATTN_W_OUT_IN && attn__gemm_packs() &&
               p->rows >= PACK_MIN_ROWS) {
      if ((p->wpack = alloc_floats(attn__pack_floats(p->out, p->in))))
        attn__pack_nt(p->out, p->in, p->w->data,
                      attn__weight_ld(p->w, p->in, p->out), p->wpack);
    }
  }
  if ((double)work < SMALL_CALL_WORK) threads = 1;
  threads = clamp_threads(threads, total);
  if (c->bf16 && !s) {
    c->xb_ld = in2max;
    c->xb = (uint16_t *)(void *)alloc_floats((size_t)threads * PROJ_ROWS *
                                             (size_t)in2max / 2);
    if (!c->xb) s = ATTN_ENOMEM;
  }
  if (xfmax && !s) { /* rows 16 floats longer: one line further each */
    c->xf_ld = (xfmax + 15) / 16 * 16 + 16;
    c->xf = alloc_floats((size_t)threads * PROJ_ROWS * (size_t)c->xf_ld);
  }
  if (!s) attn__parallel_for(threads, total, proj_unit, c);
  for (int j = 0; j < c->njobs; j++) {
    free(c->job[j].wpack);
    free(c->job[j].wb);
    c->job[j].wpack = NULL;
    c->job[j].wb = NULL;
  }
  free(c->xb);
  free(c->xf);
  c->xb = NULL;
  c->xf = NULL;
  return s;
}

/* The first row of a bfloat16 matrix holding NaN or Inf, or -1. */
static int64_t bf16_nonfinite(const uint16_t *m, int64_t rows, int64_t ld,
                              int64_t cols) {
  for (int64_t r = 0; r < rows; r++)
    for (int64_t c = 0; c < cols; c++)
      if ((m[r * ld + c] & 0x7f80u) == 0x7f80u) return r;
  return -1;
}

static attn_status check_weight_values(const char *name, const attn_weight *w,
                                       int64_t in, int64_t out,
                                       attn_precision prec, attn_diag *d) {
  int64_t rows = w->layout == ATTN_W_IN_OUT ? in : out;
  int64_t cols = w->layout == ATTN_W_IN_OUT ? out : in;
  int64_t ld = attn__weight_ld(w, in, out);
  int64_t at = w->bf16 && (prec == ATTN_PRECISION_BF16 || !w->data)
                   ? bf16_nonfinite(w->bf16, rows, ld, cols)
                   : view_nonfinite(w->data, 1, 0, 1, 0, rows, ld, cols);
  if (at >= 0)
    return attn_diag_set(d, ATTN_ENONFINITE,
                         "%s contains NaN or Inf (row %lld)", name,
                         (long long)at);
  return ATTN_OK;
}

static attn_status check_vec(const char *name, const float *v, int64_t n,
                             attn_diag *d) {
  if (v && !row_finite(v, n))
    return attn_diag_set(d, ATTN_ENONFINITE, "%s contains NaN or Inf", name);
  return ATTN_OK;
}

static attn_status mha_check_values(const attn_mha_problem *p, attn_diag *d) {
  int64_t kw = p->Hkv * (p->E / p->H), at;
  attn_status s;
  if ((at = view_nonfinite(p->xq, 1, 0, 1, 0, p->B * p->Lq, p->E, p->E)) >= 0)
    return attn_diag_set(d, ATTN_ENONFINITE,
                         "query contains NaN or Inf (row %lld of [B*Lq])",
                         (long long)at);
  if (p->xk != p->xq && (at = view_nonfinite(p->xk, 1, 0, 1, 0, p->B * p->Lk,
                                             p->kdim, p->kdim)) >= 0)
    return attn_diag_set(d, ATTN_ENONFINITE,
                         "key contains NaN or Inf (row %lld of [B*Lk])",
                         (long long)at);
  if (p->xv != p->xk && p->xv != p->xq &&
      (at = view_nonfinite(p->xv, 1, 0, 1, 0, p->B * p->Lk, p->vdim,
                           p->vdim)) >= 0)
    return attn_diag_set(d, ATTN_ENONFINITE,
                         "value contains NaN or Inf (row %lld of [B*Lk])",
                         (long long)at);
  if ((s = check_weight_values("w_q", &p->wq, p->E, p->E, p->o.precision, d)) ||
      (s = check_weight_values("w_k", &p->wk, p->kdim, kw, p->o.precision,
                               d)) ||
      (s = check_weight_values("w_v", &p->wv, p->vdim, kw, p->o.precision,
                               d)) ||
      (s = check_weight_values("w_o", &p->wo, p->E, p->E, p->o.precision, d)) ||
      (s = check_vec("b_q", p->bq, p->E, d)) ||
      (s = check_vec("b_k", p->bk, kw, d)) ||
      (s = check_vec("b_v", p->bv, kw, d)) ||
      (s = check_vec("b_o", p->bo, p->E, d)))
    return s;
  return check_opt_values(&p->o, p->B, p->Lq, p->Lk, d);
}

static int follows(const float *next, const float *prev, int64_t step) {
  return (uintptr_t)next == (uintptr_t)(prev + step);
}

/* q, k, v are consecutive blocks, step elements apart, of one matrix in
 * each form they are held in (fp32, bfloat16). */
static int blocks_follow(const attn_weight *q, const attn_weight *k,
                         const attn_weight *v, int64_t step) {
  if (!q->data != !k->data || !q->data != !v->data || !q->bf16 != !k->bf16 ||
      !q->bf16 != !v->bf16)
    return 0;
  if (q->data &&
      (!follows(k->data, q->data, step) || !follows(v->data, k->data, step)))
    return 0;
  return !q->bf16 || ((uintptr_t)k->bf16 == (uintptr_t)(q->bf16 + step) &&
                      (uintptr_t)v->bf16 == (uintptr_t)(k->bf16 + step));
}

/* Self-attention whose three projections are blocks of one packed matrix
 * (PyTorch's in_proj_weight [3E, E], or a textbook W_qkv [E, 3E]) runs as one
 * sgemm with N = 3E, so X is packed once instead of three times.  On success
 * *w3 describes the whole [E -> 3E] matrix and *b3 the packed bias (or
 * NULL). */
static int qkv_fusable(const attn_mha_problem *p, attn_weight *w3,
                       const float **b3) {
  int64_t E = p->E;
  attn_wlayout lay = p->wq.layout;
  if (p->xk != p->xq || p->xv != p->xq || p->Hkv != p->H) return 0;
  if (p->wk.layout != lay || p->wv.layout != lay) return 0;
  int64_t ld = attn__weight_ld(&p->wq, E, E);
  if (attn__weight_ld(&p->wk, E, E) != ld ||
      attn__weight_ld(&p->wv, E, E) != ld)
    return 0;
  if (lay == ATTN_W_IN_OUT && ld < 3 * E) return 0;
  int64_t step = lay == ATTN_W_OUT_IN ? E * ld : E;
  if (!blocks_follow(&p->wq, &p->wk, &p->wv, step)) return 0;
  if (!p->bq && !p->bk && !p->bv) {
    *b3 = NULL;
  } else if (p->bq && p->bk && p->bv && follows(p->bk, p->bq, E) &&
             follows(p->bv, p->bk, E)) {
    *b3 = p->bq;
  } else {
    return 0;
  }
  *w3 = (attn_weight){p->wq.data, lay, ld, p->wq.bf16};
  return 1;
}

/* An mha call's buffers from allocation to clean-up: the Q, K and V
 * projections (fused: one [B*L, 3E] buffer in Q holding q | k | v, and K,
 * V NULL), head h being column block h of rows ldq (Q) or ldk (K, V)
 * floats apart; the core's scratch; the rotary tables. */
typedef struct mha_work {
  int64_t Dh, kw, ldq, ldk;
  int fused;
  attn_weight w3; /* fused: the whole [E -> 3E] weight and its bias */
  const float *b3;
  float *Q, *K, *V;
  float **scratch;
  rope_tabs rt;
} mha_work;

/* mha's checks before any allocation: the problem normalised into *p, its
 * shapes, the buffers, the plan (into *pl), the sizes (into *z), then the
 * values. */
static attn_status mha_prepare(const attn_mha_problem *in, const attn_exec *x,
                               const float *out, const float *weights,
                               attn_mha_problem *p, core_plan *pl, mha_sizes *z,
                               attn_diag *d) {
  attn_status s;
  if (!in) return attn_diag_set(d, ATTN_EINVAL, "problem is NULL");
  attn__mha_normalise(in, p);
  if ((s = mha_check_norm(p, d))) return s;
  if (!out) return attn_diag_set(d, ATTN_EINVAL, "output buffer is NULL");
  if (p->o.weights != ATTN_WEIGHTS_NONE && !weights)
    return attn_diag_set(d, ATTN_EINVAL, "weights requested but buffer NULL");
  int64_t Dh = p->E / p->H;
  if ((s = plan_core(p->B, p->H, p->Hkv, p->Lq, p->Lk, Dh, Dh, &p->o, x, pl,
                     d)))
    return s;
  if (mha_sizes_of(p, z))
    return attn_diag_set(d, ATTN_ETOOBIG, "problem size overflows");
  return mha_check_values(p, d);
}

/* Allocates w's projections, the scratch and the rotary tables; on failure
 * what was allocated stays in *w for mha_free. */
static attn_status mha_alloc(const attn_mha_problem *p, const core_plan *pl,
                             const mha_sizes *z, mha_work *w, attn_diag *d) {
  w->Dh = p->E / p->H;
  w->kw = p->Hkv * w->Dh;
  w->fused = qkv_fusable(p, &w->w3, &w->b3);
  w->ldq = w->fused ? 3 * p->E : p->E;
  w->ldk = w->fused ? 3 * p->E : w->kw;
  if (w->fused) {
    w->Q = alloc_floats(z->q + z->k + z->v); /* [B*L, 3E]: q | k | v */
  } else {
    w->Q = alloc_floats(z->q);
    w->K = alloc_floats(z->k);
    w->V = alloc_floats(z->v);
  }
  rope_plan(&p->o, w->Dh, p->Lq, p->Lk, &w->rt);
  if (!w->Q || (!w->fused && (!w->K || !w->V)) ||
      alloc_scratch(pl, &w->scratch) || rope_build(&w->rt, p->Lq, p->Lk))
    return attn_diag_set(d, ATTN_ENOMEM, "cannot allocate %zu MB of workspace",
                         (z->q + z->k + z->v) * sizeof(float) >> 20);
  return ATTN_OK;
}

/* Projects the inputs into Q, K and V (one job when fused), rotating the Q
 * and K heads as their rows are projected. */
static attn_status mha_project_in(const attn_mha_problem *p, mha_work *w,
                                  int threads, attn_diag *d) {
  const rope_tabs *rt = &w->rt;
  int64_t Dh = w->Dh, kw = w->kw;
  int fused = w->fused;
  proj_ctx pc = {.njobs = fused ? 1 : 3,
                 .bf16 = p->o.precision == ATTN_PRECISION_BF16};
  if (fused) {
    pc.job[0] =
        (proj_job){p->xq, p->B * p->Lq, p->E, 3 * p->E, &w->w3, w->b3, w->Q, 0,
                   0,     NULL,         NULL};
  } else {
    pc.job[0] = (proj_job){
        p->xq, p->B * p->Lq, p->E, p->E, &p->wq, p->bq, w->Q, 0, 0, NULL, NULL};
    pc.job[1] =
        (proj_job){p->xk, p->B * p->Lk, p->kdim, kw, &p->wk, p->bk, w->K, 0,
                   0,     NULL,         NULL};
    pc.job[2] =
        (proj_job){p->xv, p->B * p->Lk, p->vdim, kw, &p->wv, p->bv, w->V, 0,
                   0,     NULL,         NULL};
  }
  if (rt->on) { /* rotate Q and K heads as their rows are projected */
    pc.rope[0][0] = (rope_seg){rt->qcs, rt->qsn, 0, p->H, Dh, p->Lq, rt};
    pc.rope[fused ? 0 : 1][fused] =
        (rope_seg){rt->kcs, rt->ksn, fused ? p->E : 0, p->Hkv, Dh, p->Lk, rt};
  }
  attn_status s = run_proj(&pc, threads);
  if (s)
    return attn_diag_set(d, s,
                         "cannot allocate the bf16 projection "
                         "weights");
  return ATTN_OK;
}

/* The core on head views into the projections, each head's output written
 * over its own Q block (no longer needed: see DESIGN). */
static attn_status mha_attend(const attn_mha_problem *p, const mha_work *w,
                              const core_plan *pl, float *weights,
                              attn_diag *d) {
  int64_t Dh = w->Dh, ldq = w->ldq, ldk = w->ldk;
  float *Q = w->Q;
  const float *Kp = w->fused ? Q + p->E : w->K;
  const float *Vp = w->fused ? Q + 2 * p->E : w->V;
  core_ctx c = {.B = p->B,
                .H = p->H,
                .Lq = p->Lq,
                .Lk = p->Lk,
                .Dk = Dh,
                .Dv = Dh,
                .group = p->H / p->Hkv,
                .q = {Q, p->Lq * ldq, Dh, ldq},
                .k = {Kp, p->Lk * ldk, Dh, ldk},
                .v = {Vp, p->Lk * ldk, Dh, ldk},
                .out = {Q, p->Lq * ldq, Dh, ldq}, /* over Q: see DESIGN */
                .o = &p->o,
                .scale = default_scale(&p->o, Dh),
                .softcap = p->o.softcap,
                .weights = weights,
                .scratch = w->scratch};
  attn_status s = run_core(&c, pl);
  if (s)
    return attn_diag_set(d, s,
                         "cannot allocate the bf16 key and value "
                         "panels");
  return ATTN_OK;
}

/* The concatenated heads (in Q) projected with W_O into out. */
static attn_status mha_project_out(const attn_mha_problem *p, const mha_work *w,
                                   float *out, int threads, attn_diag *d) {
  proj_ctx po = {.njobs = 1, .bf16 = p->o.precision == ATTN_PRECISION_BF16};
  po.job[0] = (proj_job){w->Q, p->B * p->Lq, p->E, p->E, &p->wo, p->bo,
                         out,  w->ldq,       0,    NULL, NULL};
  attn_status s = run_proj(&po, threads);
  if (s)
    return attn_diag_set(d, s,
                         "cannot allocate the bf16 projection "
                         "weights");
  return ATTN_OK;
}

/* Frees what mha_alloc allocated (any of it NULL). */
static void mha_free(mha_work *w, int threads) {
  free_scratch(w->scratch, threads);
  free(w->rt.mem);
  free(w->Q);
  free(w->K);
  free(w->V);
}

/* Checks, allocates, projects Q, K and V, runs the core, projects the
 * output, frees (the stages above). */
attn_status attn_mha(const attn_mha_problem *in, const attn_exec *x, float *out,
                     float *weights, attn_diag *d) {
  attn_mha_problem p;
  core_plan pl;
  mha_sizes z = {0};
  mha_work w = {0};
  attn_status s;
  attn_exec dflt = {0};
  if (!x) x = &dflt;
  if ((s = mha_prepare(in, x, out, weights, &p, &pl, &z, d))) return s;
  (void)attn__gemm_ran_take(); /* this call's products from here on */
  if (!(s = mha_alloc(&p, &pl, &z, &w, d)) &&
      !(s = mha_project_in(&p, &w, x->threads, d)) &&
      !(s = mha_attend(&p, &w, &pl, weights, d)))
    s = mha_project_out(&p, &w, out, x->threads, d);
  mha_free(&w, pl.threads);
  if (!s) report_kernel(x, p.o.precision);
  return s;
}

double attn_mha_flops(const attn_mha_problem *in) {
  attn_mha_problem p;
  attn__mha_normalise(in, &p);
  double Dh = (double)(p.E / (p.H ? p.H : 1)), kw = (double)p.Hkv * Dh;
  double B = (double)p.B, Lq = (double)p.Lq, Lk = (double)p.Lk;
  double E = (double)p.E;
  return 2.0 * B *
             (Lq * E * E + Lk * (double)p.kdim * kw + Lk * (double)p.vdim * kw +
              Lq * E * E) +
         2.0 * B * (double)p.H * Lq * Lk * 2.0 * Dh;
}
