/* kv_attend.c - attention over sessions' KV blocks: the checks, the keys
 * and values a step appends (attn_kv_encode), and the decode / prefill
 * driver (attn_kv_attend).  The kernels are in kv_kernels.c.
 *
 * DESIGN
 * A call is cut into units of (sequence b, some of its kv heads); a unit
 * runs in one thread from start to end.  A decode step's unit takes all
 * kv heads of its sequence, whose panels are one contiguous read per
 * block, halved until there are two units a thread (heads_per_unit); a
 * prefill's unit takes one kv head.  Within a unit the step's t query
 * tokens are taken CHUNK_ROWS rows a head at a time (the G = H / Hkv
 * heads of a token are consecutive rows): the chunk's queries are copied
 * and turned (rotary, in double) into the thread's scratch, head by head,
 * then the kernel walks the blocks the chunk can see, in order, keeping
 * each row's online softmax (max m, 16 lane sums l, unnormalised output
 * o); at the end each row is divided by its sum.  A chunk reads each key
 * and value row once for all its rows (a decode step's chunk is one
 * token: every block is read once per GQA group).  Rows of a token see
 * the same keys; the chunk's key range is the union of its rows' ranges,
 * and a row skips the blocks it cannot see.  A head's arithmetic depends
 * on its own rows and the blocks only: not on the other heads of its
 * unit, the batch or the thread count (engine.h: the same bits alone or
 * in any batch).
 *
 * Rotary angles are computed exactly for every position (cos and sin of
 * the double product, as ref.c), not by recurrence: a key's stored bytes
 * and a query's turned values depend only on the position, never on how
 * the tokens were cut into steps.
 *
 * Invariants: checks (attn_kv_check, the non-finite scan) run before any
 * allocation; the workspace is allocated before the threads start, so the
 * parallel part cannot fail.
 */
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "attn/engine.h"
#include "attn/tensor.h"
#include "internal.h"

#define BT ATTN_KV_BLOCK_TOKENS
/* Query rows per chunk: a decode step of up to 64 heads per kv head is one
 * chunk; a prefill of 4 heads per kv head takes 16 tokens a chunk, whose
 * scratch (queries and outputs, 64 KiB at D = 128) stays in L2 while the
 * blocks stream by. */
#define CHUNK_ROWS 64
/* A step with this many query rows per kv head or more is a prefill: its
 * units take one kv head each (heads_per_unit). */
#define GROUP_ROWS 16
#define MAX_THREADS 64
#define ROPE_BASE 10000.0
/* A decode step takes a thread for every this many bytes of keys and
 * values it reads, up to the threads it is given.  Starting and joining a
 * thread costs 23-28 us here (pthread_create and join, p50; waking a
 * parked thread on the other vCPU costs the same, 25 us: this VM's
 * wake-up), and a second thread splits a sequence's heads into units of
 * 2 (heads_per_unit), whose panels read slower than 8 heads' together.
 * B 1, fp32, 2 threads given, wall time, 1 MiB a thread against 4 MiB
 * (bench_decode's line, from memory / hot): T 256 (2 MiB) 0.21 -> 0.12
 * ms, 23 -> 38 GB/s; T 512 (4 MiB) 0.30 -> 0.22 ms; T 1024 (8 MiB, 2
 * threads either way) 0.41 / 0.39; one thread alone: T 256 0.13, T 512
 * 0.18, T 1024 0.37.  In the server with blas_threads_per_worker auto
 * (B 1, T 256: bench/sessions --sections 2 --threads 0) the attend took
 * 113-118 us on 2 threads against 72 us on one.  Results do not depend
 * on the threads (units are cut by heads, each head's arithmetic its
 * own). */
#define STEP_BYTES_PER_THREAD ((double)(4 << 20))

static double step_bytes_per_thread = STEP_BYTES_PER_THREAD;

double attn__kv_set_step_bytes(double bytes) {
  double was = step_bytes_per_thread;
  step_bytes_per_thread = bytes;
  return was;
}

/* ---- checks -------------------------------------------------------------- */

static attn_status check_dims(const attn_kv_problem *p, attn_diag *d) {
  if (p->B < 0 || p->B > INT32_MAX)
    return attn_diag_set(d, ATTN_ESHAPE, "batch is %lld; it must be in [0, %d]",
                         (long long)p->B, INT32_MAX);
  if (p->t < 1 || p->t > INT32_MAX)
    return attn_diag_set(d, ATTN_ESHAPE,
                         "query rows (t) is %lld; it must be in [1, %d]",
                         (long long)p->t, INT32_MAX);
  if (p->H < 1 || p->H > INT32_MAX || p->Hkv < 1 || p->Hkv > p->H ||
      p->H % p->Hkv != 0)
    return attn_diag_set(d, ATTN_ESHAPE,
                         "num_heads %lld and num_kv_heads %lld: both >= 1 and "
                         "num_kv_heads must divide num_heads",
                         (long long)p->H, (long long)p->Hkv);
  if (p->D < 1 || p->D > INT32_MAX)
    return attn_diag_set(d, ATTN_ESHAPE, "head_dim is %lld; it must be >= 1",
                         (long long)p->D);
  if (!attn_kv_dtype_size(p->dtype))
    return attn_diag_set(d, ATTN_EINVAL, "kv_dtype %d is not fp32, bf16, fp16",
                         (int)p->dtype);
  if (p->B > 0 && (!p->kv || !p->q))
    return attn_diag_set(d, ATTN_EINVAL, "%s is NULL",
                         p->kv ? "query" : "the views");
  return ATTN_OK;
}

static attn_status check_view(const attn_kv_problem *p, int64_t b,
                              attn_diag *d) {
  const attn_kv_view *v = &p->kv[b];
  if (v->shape.num_kv_heads != p->Hkv || v->shape.head_dim != p->D ||
      v->shape.dtype != p->dtype)
    return attn_diag_set(
        d, ATTN_ESHAPE,
        "sequence %lld is %lld kv heads x %lld dims (%s); "
        "the batch is %lld x %lld (%s)",
        (long long)b, (long long)v->shape.num_kv_heads,
        (long long)v->shape.head_dim,
        attn_kv_dtype_name(v->shape.dtype) ? attn_kv_dtype_name(v->shape.dtype)
                                           : "?",
        (long long)p->Hkv, (long long)p->D, attn_kv_dtype_name(p->dtype));
  if (v->len < 0 || v->len > INT32_MAX || (v->len > 0 && !v->blocks))
    return attn_diag_set(d, ATTN_EINVAL,
                         "sequence %lld: bad view (length %lld)", (long long)b,
                         (long long)v->len);
  if (!p->queries_only && v->len < p->t)
    return attn_diag_set(d, ATTN_ESHAPE,
                         "sequence %lld holds %lld tokens, fewer than the "
                         "step's %lld: append the step's keys and values first",
                         (long long)b, (long long)v->len, (long long)p->t);
  return ATTN_OK;
}

static attn_status check_kv_opts(const attn_kv_problem *p, attn_diag *d) {
  const attn_attend_opts *o = &p->o;
  if (o->causal != ATTN_CAUSAL_BOTTOM_RIGHT)
    return attn_diag_set(d, ATTN_EINVAL,
                         "causal is %d; attention over a session is causal, "
                         "bottom-right (1)",
                         o->causal);
  if (o->mask.kind != ATTN_MASK_NONE || o->kpm.kind != ATTN_KPM_NONE ||
      o->weights != ATTN_WEIGHTS_NONE)
    return attn_diag_set(d, ATTN_EINVAL,
                         "attention over a session takes no mask, key "
                         "padding or weights");
  if (o->precision != ATTN_PRECISION_FP32)
    return attn_diag_set(d, ATTN_EINVAL,
                         "precision must be fp32: the storage dtype is the "
                         "session's kv_dtype");
  if (o->rotary.on && o->rotary.has_query_offset)
    return attn_diag_set(d, ATTN_EINVAL,
                         "rotary query_offset: a session's positions are "
                         "absolute");
  if (o->has_scale && !isfinite(o->scale))
    return attn_diag_set(d, ATTN_EINVAL, "scale must be a finite number");
  return attn__check_variants(o, p->H, p->D, d);
}

attn_status attn_kv_check(const attn_kv_problem *p, attn_diag *d) {
  attn_status s;
  if ((s = check_dims(p, d)) || (s = check_kv_opts(p, d))) return s;
  for (int64_t b = 0; b < p->B; b++)
    if ((s = check_view(p, b, d))) return s;
  return ATTN_OK;
}

/* ---- rotary -------------------------------------------------------------- */

/* Frequencies of rotary positions on heads of D values: th[f] =
 * base^(-2f / R), f < half = R / 2.  0 when rotary is off. */
static int64_t rope_freqs(const attn_rotary *r, int64_t D, double *th) {
  if (!r->on) return 0;
  int64_t R = r->dims ? r->dims : D, half = R / 2;
  double base = r->base != 0.0 ? r->base : ROPE_BASE;
  for (int64_t f = 0; f < half; f++)
    th[f] = pow(base, -2.0 * (double)f / (double)R);
  return half;
}

/* cos (cs[f]) and sin (cs[half + f]) of the angles of position pos,
 * exactly (cos and sin of the double product). */
static void rope_angles(int64_t pos, const double *th, int64_t half,
                        double *cs) {
  for (int64_t f = 0; f < half; f++) {
    double a = (double)pos * th[f];
    cs[f] = cos(a);
    cs[half + f] = sin(a);
  }
}

/* Turn n heads of D values (x[h * D + c]) by the angles cs, in double. */
static void rope_apply(float *x, int64_t n, int64_t D, int64_t half,
                       int interleaved, const double *cs) {
  for (int64_t h = 0; h < n; h++) {
    float *v = x + h * D;
    for (int64_t f = 0; f < half; f++) {
      int64_t ia = interleaved ? 2 * f : f;
      int64_t ib = interleaved ? 2 * f + 1 : f + half;
      double xa = v[ia], xb = v[ib], c = cs[f], s = cs[half + f];
      v[ia] = (float)(xa * c - xb * s);
      v[ib] = (float)(xb * c + xa * s);
    }
  }
}

/* ---- encode -------------------------------------------------------------- */

static attn_status first_nonfinite(const float *x, size_t n, const char *name,
                                   const attn_kv_rows *r, attn_diag *d) {
  for (size_t i = 0; i < n; i++)
    if (!isfinite(x[i])) {
      size_t row = (size_t)(r->Hkv * r->D);
      return attn_diag_set(d, ATTN_ENONFINITE, "%s[%zu][%zu][%zu] is %g", name,
                           i / row, i % row / (size_t)r->D, i % (size_t)r->D,
                           (double)x[i]);
    }
  return ATTN_OK;
}

/* Row x (n values) into dst as dt; ATTN_EINVAL naming the first value
 * beyond the dtype's range. */
static attn_status store_row(const float *x, int64_t n, attn_kv_dtype dt,
                             unsigned char *dst, const char *name, int64_t i,
                             int64_t D, attn_diag *d) {
  if (dt == ATTN_KV_FP32) {
    memcpy(dst, x, (size_t)n * 4);
    return ATTN_OK;
  }
  for (int64_t c = 0; c < n; c++) {
    uint16_t h =
        dt == ATTN_KV_BF16 ? attn_f32_to_bf16(x[c]) : attn_f32_to_f16(x[c]);
    if ((h & 0x7fffu) == (dt == ATTN_KV_BF16 ? 0x7f80u : 0x7c00u))
      return attn_diag_set(
          d, ATTN_EINVAL, "%s[%lld][%lld][%lld] is %g, beyond %s's range", name,
          (long long)i, (long long)(c / D), (long long)(c % D), (double)x[c],
          attn_kv_dtype_name(dt));
    memcpy(dst + 2 * c, &h, 2);
  }
  return ATTN_OK;
}

static attn_status check_rows(const attn_kv_rows *r, const attn_attend_opts *o,
                              attn_diag *d) {
  if (r->t < 0 || r->Hkv < 1 || r->Hkv > INT32_MAX || r->D < 1 ||
      r->D > INT32_MAX || r->pos0 < 0 || r->pos0 > INT32_MAX - r->t)
    return attn_diag_set(d, ATTN_ESHAPE,
                         "rows: t %lld, num_kv_heads %lld, head_dim %lld, "
                         "position %lld out of range",
                         (long long)r->t, (long long)r->Hkv, (long long)r->D,
                         (long long)r->pos0);
  if (!attn_kv_dtype_size(r->dtype))
    return attn_diag_set(d, ATTN_EINVAL, "kv_dtype %d is not fp32, bf16, fp16",
                         (int)r->dtype);
  if (r->t > 0 && (!r->k || !r->v))
    return attn_diag_set(d, ATTN_EINVAL, "%s is NULL", r->k ? "value" : "key");
  attn_attend_opts rot = {0};
  rot.rotary = o->rotary;
  rot.rotary.has_query_offset = 0;
  return attn__check_variants(&rot, 1, r->D, d);
}

attn_status attn_kv_encode(const attn_kv_rows *r, const attn_attend_opts *o,
                           void *k_out, void *v_out, attn_diag *d) {
  attn_status s;
  if ((s = check_rows(r, o, d))) return s;
  size_t n = (size_t)(r->t * r->Hkv * r->D), row = (size_t)(r->Hkv * r->D);
  if ((s = first_nonfinite(r->k, n, "key", r, d)) ||
      (s = first_nonfinite(r->v, n, "value", r, d)))
    return s;
  size_t e = attn_kv_dtype_size(r->dtype), half_max = (size_t)r->D / 2 + 1;
  float *x = malloc(row * sizeof *x);
  double *th = malloc(3 * half_max * sizeof *th);
  if (!x || !th) {
    free(x);
    free(th);
    return attn_diag_set(d, ATTN_ENOMEM, "encode: out of memory");
  }
  int64_t half = rope_freqs(&o->rotary, r->D, th);
  for (int64_t i = 0; i < r->t && s == ATTN_OK; i++) {
    memcpy(x, r->k + (size_t)i * row, row * sizeof *x);
    if (half) {
      rope_angles(r->pos0 + i, th, half, th + half_max);
      rope_apply(x, r->Hkv, r->D, half, o->rotary.interleaved, th + half_max);
    }
    s = store_row(x, (int64_t)row, r->dtype,
                  (unsigned char *)k_out + (size_t)i * row * e, "key", i, r->D,
                  d);
    if (s == ATTN_OK)
      s = store_row(r->v + (size_t)i * row, (int64_t)row, r->dtype,
                    (unsigned char *)v_out + (size_t)i * row * e, "value", i,
                    r->D, d);
  }
  free(x);
  free(th);
  return s;
}

/* ---- the driver ---------------------------------------------------------- */

/* A thread's scratch, carved from one allocation. */
typedef struct kv_scratch {
  float *q, *o, *l, *m, *slope, *pbuf;
  int64_t *lo, *hi, *pos;
  double *cs;
} kv_scratch;

typedef struct kv_plan {
  int64_t G, chunk_tokens, rows_max, half;
  int64_t hpu, ups;  /* kv heads per unit, units per sequence */
  size_t per_thread; /* bytes, a multiple of 64 */
  int threads;
} kv_plan;

static size_t up64(size_t n) {
  return (n + 63) / 64 * 64;
}

/* Sizes of one thread's scratch (pieces 64-byte aligned); 0 on overflow. */
static size_t scratch_bytes(int64_t rows, int64_t D, int64_t half) {
  size_t qd, n = 0;
  if (!attn_size_mul((size_t)rows, (size_t)D * sizeof(float), &qd)) return 0;
  size_t parts[] = {qd,
                    qd,
                    (size_t)rows * 16 * sizeof(float),
                    (size_t)rows * sizeof(float),
                    (size_t)rows * sizeof(float),
                    9 * 16 * sizeof(float),
                    3 * (size_t)rows * sizeof(int64_t),
                    (2 * (size_t)half + (size_t)D) * sizeof(double)};
  for (size_t i = 0; i < sizeof parts / sizeof *parts; i++)
    if (!attn_size_add(n, up64(parts[i]), &n)) return 0;
  return n;
}

static void scratch_carve(unsigned char *m, int64_t rows, int64_t D,
                          int64_t half, kv_scratch *s) {
  size_t qd = (size_t)rows * (size_t)D * sizeof(float);
  s->q = (float *)m;
  m += up64(qd);
  s->o = (float *)m;
  m += up64(qd);
  s->l = (float *)m;
  m += up64((size_t)rows * 16 * sizeof(float));
  s->m = (float *)m;
  m += up64((size_t)rows * sizeof(float));
  s->slope = (float *)m;
  m += up64((size_t)rows * sizeof(float));
  s->pbuf = (float *)m;
  m += up64(9 * 16 * sizeof(float));
  s->lo = (int64_t *)m;
  s->hi = s->lo + rows;
  s->pos = s->hi + rows;
  m += up64(3 * (size_t)rows * sizeof(int64_t));
  s->cs = (double *)m;
  (void)half;
}

/* Kv heads per unit: a decode step's unit takes every kv head of its
 * sequence (the heads' panels are one contiguous read per block: 2-3
 * times the single thread's read speed of 8 KiB panels here), halved
 * until the units are enough for the threads; a prefill's unit takes one
 * kv head and more query rows.  Per head, the arithmetic is the same
 * whatever the grouping: only the order of reads changes. */
static int64_t heads_per_unit(const attn_kv_problem *p, int64_t G, int th) {
  if (p->t * G >= GROUP_ROWS) return 1;
  int64_t hpu = p->Hkv, want = th == 1 ? 1 : 2 * (int64_t)th;
  while (hpu > 1 && p->B * ((p->Hkv + hpu - 1) / hpu) < want)
    hpu = (hpu + 1) / 2;
  return hpu;
}

/* th, or fewer for a small decode step (step_bytes_per_thread). */
static int step_threads(const attn_kv_problem *p, int64_t G, int th) {
  if (th == 1 || p->t * G >= GROUP_ROWS) return th;
  double bytes = 0.0, row = (double)(p->Hkv * p->D) * 2.0 *
                            (double)attn_kv_dtype_size(p->dtype);
  for (int64_t b = 0; b < p->B; b++) bytes += (double)p->kv[b].len * row;
  if (!(step_bytes_per_thread > 0.0)) return th;
  double most = bytes / step_bytes_per_thread;
  return most < 1.0 ? 1 : most < (double)th ? (int)most : th;
}

static attn_status plan(const attn_kv_problem *p, const attn_exec *x,
                        kv_plan *pl, attn_diag *d) {
  int th = x && x->threads > 1 ? x->threads : 1;
  if (th > MAX_THREADS) th = MAX_THREADS;
  pl->G = p->H / p->Hkv;
  th = step_threads(p, pl->G, th);
  pl->chunk_tokens = CHUNK_ROWS / pl->G < 1 ? 1 : CHUNK_ROWS / pl->G;
  if (pl->chunk_tokens > p->t) pl->chunk_tokens = p->t;
  pl->hpu = heads_per_unit(p, pl->G, th);
  pl->ups = (p->Hkv + pl->hpu - 1) / pl->hpu;
  pl->rows_max = pl->chunk_tokens * pl->G * pl->hpu;
  pl->half =
      p->o.rotary.on ? (p->o.rotary.dims ? p->o.rotary.dims : p->D) / 2 : 0;
  int64_t units = p->B * pl->ups;
  if (units < th) th = units < 1 ? 1 : (int)units;
  pl->threads = th;
  pl->per_thread = scratch_bytes(pl->rows_max, p->D, pl->half);
  size_t all;
  if (!pl->per_thread || !attn_size_mul(pl->per_thread, (size_t)th, &all))
    return attn_diag_set(d, ATTN_ETOOBIG, "the workspace overflows");
  return ATTN_OK;
}

attn_status attn_kv_bytes(const attn_kv_problem *p, const attn_exec *x,
                          attn_bytes *b, attn_diag *d) {
  attn_status s;
  kv_plan pl;
  if ((s = attn_kv_check(p, d)) || (s = plan(p, x, &pl, d))) return s;
  size_t rows = (size_t)(p->B * p->t * p->H);
  if (!attn_size_mul(rows, (size_t)p->D * sizeof(float), &b->out))
    return attn_diag_set(d, ATTN_ETOOBIG, "the output overflows");
  b->weights = rows * sizeof(float); /* lse */
  b->workspace = pl.per_thread * (size_t)pl.threads + (size_t)pl.half * 8;
  return ATTN_OK;
}

typedef struct kv_ctx {
  const attn_kv_problem *p;
  const kv_plan *pl;
  const double *th;
  float scale;
  unsigned char *mem;
  float *out, *lse;
} kv_ctx;

/* The heads [hk0, hk0 + nh) of sequence b: one unit's work. */
typedef struct kv_unit_at {
  int64_t b, hk0, nh;
} kv_unit_at;

/* Rows of tokens [i0, i0 + n) of a unit, head by head: turned queries,
 * the keys each row sees, fresh softmax state. */
static void chunk_rows(const kv_ctx *c, const kv_unit_at *u, int64_t i0,
                       int64_t n, const kv_scratch *s) {
  const attn_kv_problem *p = c->p;
  int64_t G = c->pl->G, D = p->D, len = p->kv[u->b].len, rows = n * G;
  int64_t left = p->o.has_window ? p->o.window_left : -1;
  for (int64_t i = i0; i < i0 + n; i++) {
    int64_t pos = p->queries_only ? len : len - p->t + i;
    if (c->pl->half) rope_angles(pos, c->th, c->pl->half, s->cs);
    for (int64_t hl = 0; hl < u->nh; hl++) {
      int64_t r0 = hl * rows + (i - i0) * G, h0 = (u->hk0 + hl) * G;
      memcpy(s->q + r0 * D, p->q + ((u->b * p->t + i) * p->H + h0) * D,
             (size_t)(G * D) * sizeof(float));
      if (c->pl->half)
        rope_apply(s->q + r0 * D, G, D, c->pl->half, p->o.rotary.interleaved,
                   s->cs);
      for (int64_t g = 0; g < G; g++) {
        s->pos[r0 + g] = pos;
        s->hi[r0 + g] = pos < len - 1 ? pos : len - 1;
        s->lo[r0 + g] = left >= 0 && pos - left > 0 ? pos - left : 0;
        s->slope[r0 + g] = p->o.alibi_slopes ? p->o.alibi_slopes[h0 + g] : 0;
        s->m[r0 + g] = -INFINITY;
      }
    }
  }
  memset(s->o, 0, (size_t)(u->nh * rows * D) * sizeof(float));
  memset(s->l, 0, (size_t)(u->nh * rows * 16) * sizeof(float));
}

/* Each row divided by its sum into out and lse. */
static void chunk_finish(const kv_ctx *c, const kv_unit_at *u, int64_t i0,
                         int64_t n, const kv_scratch *s) {
  const attn_kv_problem *p = c->p;
  int64_t G = c->pl->G, D = p->D, rows = n * G;
  for (int64_t r = 0; r < u->nh * rows; r++) {
    int64_t i = i0 + r % rows / G;
    int64_t at = (u->b * p->t + i) * p->H + (u->hk0 + r / rows) * G + r % G;
    float *out = c->out + at * D;
    double sum = 0.0;
    for (int k = 0; k < 16; k++) sum += (double)s->l[r * 16 + k];
    if (s->m[r] == -INFINITY || !(sum > 0.0)) {
      memset(out, 0, (size_t)D * sizeof *out);
      c->lse[at] = -INFINITY;
      continue;
    }
    double inv = 1.0 / sum; /* a multiply a value: vectorised, unlike / */
    for (int64_t k = 0; k < D; k++)
      out[k] = (float)((double)s->o[r * D + k] * inv);
    c->lse[at] = (float)((double)s->m[r] + log(sum));
  }
}

static void kv_unit(void *vctx, int64_t unit, int tid) {
  const kv_ctx *c = vctx;
  const attn_kv_problem *p = c->p;
  int64_t ups = c->pl->ups, G = c->pl->G;
  kv_unit_at u = {unit / ups, unit % ups * c->pl->hpu, c->pl->hpu};
  if (u.nh > p->Hkv - u.hk0) u.nh = p->Hkv - u.hk0;
  kv_scratch s;
  scratch_carve(c->mem + (size_t)tid * c->pl->per_thread, c->pl->rows_max, p->D,
                c->pl->half, &s);
  const attn_kv_shape *sh = &p->kv[u.b].shape;
  size_t panel = attn_kv_panel_bytes(sh);
  attn__kv_job j = {p->kv[u.b].blocks,
                    (size_t)u.hk0 * panel,
                    panel,
                    attn_kv_values_offset(sh),
                    p->D,
                    u.nh,
                    p->dtype,
                    0,
                    0,
                    0,
                    s.q,
                    s.o,
                    s.m,
                    s.l,
                    s.lo,
                    s.hi,
                    s.pos,
                    p->o.alibi_slopes ? s.slope : NULL,
                    c->scale,
                    p->o.softcap,
                    s.pbuf};
  for (int64_t i0 = 0; i0 < p->t; i0 += c->pl->chunk_tokens) {
    int64_t n =
        p->t - i0 < c->pl->chunk_tokens ? p->t - i0 : c->pl->chunk_tokens;
    chunk_rows(c, &u, i0, n, &s);
    int64_t klo = s.lo[0], khi = s.hi[n * G - 1];
    j.rows = n * G;
    j.blk0 = klo / BT;
    j.blk1 = khi >= klo ? khi / BT + 1 : j.blk0;
    attn__kv_run(&j);
    chunk_finish(c, &u, i0, n, &s);
  }
}

/* The first query value that is not finite, or -1.  Exponent bits all
 * ones is inf or NaN: an OR over 256 values at a time, which the compiler
 * vectorises (isfinite per value it does not: 1.3 us of a B 1 step's 8
 * at T 16), then the value found within them. */
static int64_t q_nonfinite(const attn_kv_problem *p) {
  size_t n = (size_t)(p->B * p->t * p->H * p->D);
  for (size_t i0 = 0; i0 < n; i0 += 256) {
    size_t m = n - i0 < 256 ? n - i0 : 256;
    uint32_t bad = 0;
    for (size_t i = 0; i < m; i++) {
      uint32_t u;
      memcpy(&u, p->q + i0 + i, sizeof u);
      bad |= (u & 0x7f800000u) == 0x7f800000u;
    }
    if (bad)
      for (size_t i = i0; i < i0 + m; i++)
        if (!isfinite(p->q[i])) return (int64_t)i;
  }
  return -1;
}

attn_status attn_kv_attend(const attn_kv_problem *p, const attn_exec *x,
                           float *out, float *lse, attn_diag *d) {
  attn_status s;
  kv_plan pl;
  if ((s = attn_kv_check(p, d)) || (s = plan(p, x, &pl, d))) return s;
  if (p->B == 0) return ATTN_OK;
  if (!out || !lse)
    return attn_diag_set(d, ATTN_EINVAL, "%s is NULL", out ? "lse" : "out");
  int64_t bad = q_nonfinite(p);
  if (bad >= 0) {
    int64_t D = p->D, H = p->H, t = p->t;
    return attn_diag_set(
        d, ATTN_ENONFINITE, "query[%lld][%lld][%lld][%lld] is %g",
        (long long)(bad / (D * H * t)), (long long)(bad / (D * H) % t),
        (long long)(bad / D % H), (long long)(bad % D), (double)p->q[bad]);
  }
  unsigned char *mem = aligned_alloc(64, pl.per_thread * (size_t)pl.threads);
  double *th = malloc(((size_t)pl.half + 1) * sizeof *th);
  if (!mem || !th) {
    free(mem);
    free(th);
    return attn_diag_set(d, ATTN_ENOMEM, "kv attend: out of memory");
  }
  rope_freqs(&p->o.rotary, p->D, th);
  kv_ctx c = {
      p,   &pl,
      th,  p->o.has_scale ? p->o.scale : (float)(1.0 / sqrt((double)p->D)),
      mem, out,
      lse};
  attn__parallel_for(pl.threads, p->B * pl.ups, kv_unit, &c);
  free(mem);
  free(th);
  return ATTN_OK;
}

/* ---- weights ------------------------------------------------------------- */

double attn__kv_row_logits(const attn_kv_problem *p, const attn_kv_view *w,
                           int64_t h, int64_t pos, const double *q,
                           double scale, double *sc, int64_t *lo, int64_t *hi) {
  int64_t D = p->D, hk = h / (p->H / p->Hkv);
  int64_t a =
      p->o.has_window && p->o.window_left >= 0 ? pos - p->o.window_left : 0;
  double mx = -INFINITY;
  *lo = a < 0 ? 0 : a;
  *hi = pos < w->len - 1 ? pos : w->len - 1;
  for (int64_t j = *lo; j <= *hi; j++) {
    double s = 0.0;
    for (int64_t c = 0; c < D; c++)
      s += q[c] * attn__kv_view_elem(w, j, hk, c, 0);
    s *= scale;
    if (p->o.softcap > 0.0f)
      s = (double)p->o.softcap * tanh(s / (double)p->o.softcap);
    if (p->o.alibi_slopes)
      s -= (double)p->o.alibi_slopes[h] * fabs((double)(j - pos));
    sc[j - *lo] = s;
    mx = s > mx ? s : mx;
  }
  return mx;
}

/* Row i, head h of sequence b: the probabilities over the view's len keys
 * into row (len floats).  q: D doubles, the turned query widened; sc: len
 * doubles. */
static void weights_row(const attn_kv_problem *p, int64_t b, int64_t h,
                        int64_t pos, const double *q, float scale, double *sc,
                        float *row) {
  int64_t lo, hi, len = p->kv[b].len;
  double sum = 0.0;
  double mx = attn__kv_row_logits(p, &p->kv[b], h, pos, q, scale, sc, &lo, &hi);
  memset(row, 0, (size_t)len * sizeof *row);
  for (int64_t j = lo; j <= hi; j++) sum += exp(sc[j - lo] - mx);
  if (!(sum > 0.0)) return;
  double lse = mx + log(sum);
  for (int64_t j = lo; j <= hi; j++) row[j] = (float)exp(sc[j - lo] - lse);
}

attn_status attn_kv_weights(const attn_kv_problem *p, float *w, attn_diag *d) {
  attn_status s = attn_kv_check(p, d);
  if (s) return s;
  if (p->B == 0) return ATTN_OK;
  if (!w) return attn_diag_set(d, ATTN_EINVAL, "weights is NULL");
  int64_t D = p->D, most = 1, half_max = p->D / 2 + 1;
  for (int64_t b = 0; b < p->B; b++)
    most = p->kv[b].len > most ? p->kv[b].len : most;
  float *q = malloc((size_t)D * sizeof *q);
  double *qd = malloc((size_t)D * sizeof *qd);
  double *sc = malloc((size_t)most * sizeof *sc);
  double *th = malloc(3 * (size_t)half_max * sizeof *th);
  if (!q || !qd || !sc || !th) {
    free(q);
    free(qd);
    free(sc);
    free(th);
    return attn_diag_set(d, ATTN_ENOMEM, "kv weights: out of memory");
  }
  int64_t half = rope_freqs(&p->o.rotary, D, th);
  float scale = p->o.has_scale ? p->o.scale : (float)(1.0 / sqrt((double)D));
  for (int64_t b = 0; b < p->B; b++) {
    int64_t len = p->kv[b].len;
    for (int64_t h = 0; h < p->H; h++)
      for (int64_t i = 0; i < p->t; i++) {
        int64_t pos = p->queries_only ? len : len - p->t + i;
        memcpy(q, p->q + ((b * p->t + i) * p->H + h) * D,
               (size_t)D * sizeof *q);
        if (half) {
          rope_angles(pos, th, half, th + half_max);
          rope_apply(q, 1, D, half, p->o.rotary.interleaved, th + half_max);
        }
        for (int64_t c = 0; c < D; c++) qd[c] = q[c];
        weights_row(p, b, h, pos, qd, scale, sc, w + (h * p->t + i) * len);
      }
    w += p->H * p->t * len;
  }
  free(q);
  free(qd);
  free(sc);
  free(th);
  return ATTN_OK;
}

const char *attn_engine_kv_kernel_name(void) {
  return attn__kv_kernel_name();
}
