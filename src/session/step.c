/* step.c - a step of B held sessions on one layer
 * (attn_session_attend, include/attn/session.h).
 *
 * DESIGN
 * Three phases, the sessions' locks held throughout (taken in address
 * order, so two steps over overlapping batches cannot deadlock):
 *   1. check: every session (layer, shape, queries, position, max_tokens,
 *      weights' size), its rows encoded as the pool stores them
 *      (attn_kv_encode, the session's rotary at the tokens' positions;
 *      encode_fast here, the same bytes, for rows without rotary into
 *      fp32 or bf16, the most of a step's fixed cost otherwise) and
 *      a retry's rows compared with the stored ones (attn_kv_seq_read);
 *      every buffer allocated.  Nothing has changed yet: a failure
 *      returns with *bad the session's index.
 *   2. append: each session's encoded rows; when the pool refuses one, the
 *      sessions appended so far are truncated back to their lengths
 *      before the step (a truncate back gives blocks back and cannot
 *      fail), and the step answers ENOSPACE.
 *   3. attend: attn_kv_attend once per group of sessions with the same
 *      storage dtype and variants (one attn_kv_problem holds one of each),
 *      the group's queries gathered and its answers scattered back to the
 *      batch's order; one call over the batch's own buffers when every
 *      session is in one group.  The engine's answer for a sequence does
 *      not depend on the other sequences of the call, its position or the
 *      threads, so neither grouping nor batching changes a bit of it.  A
 *      failure here (out of memory) undoes the appends too.
 * The step's keys and values are appended before the attention reads
 * them (the step's rows see themselves, causally).  A retry (position +
 * t is the length and the stored rows are these rows' bytes) appends
 * nothing and computes the same answer again: the rows a query sees are
 * the same bytes, so the answer is the same bits.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn/tensor.h"
#include "internal.h"

/* One session of the step. */
typedef struct step_slot {
  attn_session *s;
  attn_kv_seq *seq; /* its layer */
  int64_t len0;     /* the layer's length before the step */
  int64_t len1;     /* and after */
  int append;       /* 1: its rows are appended (not a retry) */
  int appended;
  int group;
  unsigned char *k, *v; /* the encoded rows */
} step_slot;

typedef struct step_ctx {
  attn_session_store *st;
  const attn_session_step *p;
  uint64_t now_ns;
  int64_t B, t, H, Hkv, D;
  int qo; /* queries only */
  step_slot *slot;
  size_t row_elems; /* t x Hkv x D */
  unsigned char *rows, *cmp;
} step_ctx;

/* ---- phase 1: checks ----------------------------------------------------- */

/* Exponent bits all ones: Inf or NaN (isfinite's answer, on the bits). */
#define F32_EXP 0x7f800000u

/* 1 when every value of x[0, n) is finite: a loop on the bits that
 * vectorises (isfinite's early exit per value did not, and a step of B 8
 * tests 32,768 queries); the caller then looks for the first that is not,
 * value by value, only when one is there. */
static int all_finite(const float *x, size_t n) {
  uint32_t bad = 0;
  for (size_t i = 0; i < n; i++) {
    uint32_t u;
    memcpy(&u, x + i, 4);
    bad |= (u & F32_EXP) == F32_EXP;
  }
  return !bad;
}

/* n values of x into dst as dt (fp32 or bf16), all or nothing: 1 when every
 * value was finite and within the dtype (dst written, as attn_kv_encode
 * writes it: attn_f32_to_bf16's rounding, nearest even, without its NaN
 * case, which cannot be reached here); 0 otherwise (dst holds anything). */
static int store_fast(const float *x, size_t n, attn_kv_dtype dt,
                      unsigned char *dst) {
  uint32_t bad = 0;
  if (dt == ATTN_KV_FP32) {
    memcpy(dst, x, n * 4);
    return all_finite(x, n);
  }
  for (size_t i = 0; i < n; i++) {
    uint32_t u;
    memcpy(&u, x + i, 4);
    uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    bad |= ((u & F32_EXP) == F32_EXP) | ((r & 0x7fffu) == 0x7f80u);
    uint16_t h = (uint16_t)r;
    memcpy(dst + 2 * i, &h, 2);
  }
  return !bad;
}

static int by_address(const void *a, const void *b) {
  const step_slot *x = *(const step_slot *const *)a;
  const step_slot *y = *(const step_slot *const *)b;
  if (x->s != y->s) return (uintptr_t)x->s < (uintptr_t)y->s ? -1 : 1;
  return x < y ? -1 : x > y;
}

static attn_status check_args(const attn_session_step *p, float *out,
                              float *lse, int64_t *length, float **weights,
                              attn_diag *d) {
  if (!p || p->B < 1 || !p->sessions)
    return attn_diag_set(d, ATTN_EINVAL, "a step needs at least one session");
  if (p->t < 1 || p->t > INT32_MAX)
    return attn_diag_set(d, ATTN_EINVAL,
                         "a step has 1 to %d tokens; this one has %lld",
                         INT32_MAX, (long long)p->t);
  if (!p->q || !out || !lse || !length)
    return attn_diag_set(d, ATTN_EINVAL, "a step needs queries and outputs");
  if (!p->k != !p->v)
    return attn_diag_set(d, ATTN_EINVAL,
                         "a step has keys and values, or neither (queries "
                         "only)");
  if (weights && p->B != 1)
    return attn_diag_set(d, ATTN_EINVAL,
                         "attention weights are for a step of one session; "
                         "this one has %lld",
                         (long long)p->B);
  for (int64_t b = 0; b < p->B; b++)
    if (!p->sessions[b])
      return attn_diag_set(d, ATTN_EINVAL, "session %lld of the step is NULL",
                           (long long)b);
  return ATTN_OK;
}

/* attn_kv_encode's work for the usual step, done here in loops that
 * vectorise (it converts a value at a time, through calls): rows without
 * rotary positions into fp32 or bf16 storage, every value finite and
 * within the dtype.  1 when k_out and v_out hold the rows as
 * attn_kv_encode writes them; 0 when the caller is to call it (rotary,
 * fp16, a shape it refuses, or a value it refuses, for its message).
 * tests/test_session.c: session_encode_fast_like_reference. */
static int encode_fast(const attn_kv_rows *r, const attn_attend_opts *o,
                       unsigned char *k_out, unsigned char *v_out) {
  if (o->rotary.on || (r->dtype != ATTN_KV_FP32 && r->dtype != ATTN_KV_BF16) ||
      r->t < 0 || r->Hkv < 1 || r->Hkv > INT32_MAX || r->D < 1 ||
      r->D > INT32_MAX || r->pos0 < 0 || r->pos0 > INT32_MAX - r->t ||
      (r->t > 0 && (!r->k || !r->v)))
    return 0;
  size_t n = (size_t)(r->t * r->Hkv * r->D);
  return store_fast(r->k, n, r->dtype, k_out) &&
         store_fast(r->v, n, r->dtype, v_out);
}

/* Session b's layer, shape and queries. */
static attn_status check_shape(const step_ctx *c, int64_t b, attn_diag *d) {
  const attn_session *s = c->slot[b].s, *s0 = c->slot[0].s;
  const attn_session_spec *f = &s->spec, *f0 = &s0->spec;
  if (c->p->layer < 0 || c->p->layer >= f->layers)
    return attn_diag_set(d, ATTN_EINVAL,
                         "layer %lld is out of range: session '%s' has %lld "
                         "layers (0..%lld)",
                         (long long)c->p->layer, s->id, (long long)f->layers,
                         (long long)f->layers - 1);
  const char *what = f->num_heads != f0->num_heads         ? "num_heads"
                     : f->num_kv_heads != f0->num_kv_heads ? "num_kv_heads"
                     : f->head_dim != f0->head_dim         ? "head_dim"
                                                           : NULL;
  if (what) {
    int64_t v = what[4] == 'h'   ? f->num_heads
                : what[4] == 'k' ? f->num_kv_heads
                                 : f->head_dim;
    int64_t v0 = what[4] == 'h'   ? f0->num_heads
                 : what[4] == 'k' ? f0->num_kv_heads
                                  : f0->head_dim;
    return attn_diag_set(d, ATTN_EINVAL,
                         "the sessions of a step share %s: session '%s' has "
                         "%lld, session '%s' (the first) %lld",
                         what, s->id, (long long)v, s0->id, (long long)v0);
  }
  size_t n = (size_t)(c->t * c->H * c->D);
  const float *q = c->p->q + (size_t)b * n;
  if (all_finite(q, n)) return ATTN_OK;
  size_t i = 0;
  while (isfinite(q[i])) i++;
  return attn_diag_set(d, ATTN_ENONFINITE, "query[%lld][%zu][%zu][%zu] is %g",
                       (long long)b, i / (size_t)(c->H * c->D),
                       i / (size_t)c->D % (size_t)c->H, i % (size_t)c->D,
                       (double)q[i]);
}

/* Session b's position (or a retry), max_tokens, and its rows encoded. */
static attn_status check_rows(step_ctx *c, int64_t b, attn_diag *d) {
  step_slot *x = &c->slot[b];
  const attn_session *s = x->s;
  int64_t L = x->len0, t = c->t, layer = c->p->layer;
  int64_t pos = c->p->position ? c->p->position[b] : L;
  x->len1 = L;
  if (c->qo) {
    if (L == 0)
      return attn_diag_set(d, ATTN_ECONFLICT,
                           "session '%s' layer %lld holds no token: a step "
                           "with queries only needs one",
                           s->id, (long long)layer);
    return ATTN_OK;
  }
  if (pos < 0)
    return attn_diag_set(d, ATTN_EINVAL, "position %lld of session '%s' < 0",
                         (long long)pos, s->id);
  if (pos != L && pos + t != L) /* pos + t == L: a retry, checked below */
    return attn_diag_set(d, ATTN_ECONFLICT,
                         "session '%s' layer %lld has length %lld; the step "
                         "is at position %lld",
                         s->id, (long long)layer, (long long)L, (long long)pos);
  if (pos == L && L + t > s->spec.max_tokens)
    return attn_diag_set(d, ATTN_EINVAL,
                         "session '%s' holds at most max_tokens = %lld tokens "
                         "per layer; layer %lld has %lld and this step adds "
                         "%lld",
                         s->id, (long long)s->spec.max_tokens, (long long)layer,
                         (long long)L, (long long)t);
  size_t e = attn_kv_dtype_size(s->spec.kv_dtype);
  size_t off = (size_t)b * c->row_elems;
  attn_kv_rows r = {t,   c->Hkv,        c->D,         s->spec.kv_dtype,
                    pos, c->p->k + off, c->p->v + off};
  attn_diag sub;
  attn_status st = ATTN_OK;
  if (!encode_fast(&r, &s->o, x->k, x->v) &&
      (st = attn_kv_encode(&r, &s->o, x->k, x->v, &sub)))
    return attn_diag_set(d, st, "session '%s': %s", s->id, sub.msg);
  if (pos == L) {
    x->append = 1;
    x->len1 = L + t;
    return ATTN_OK;
  }
  size_t bytes = c->row_elems * e;
  if ((st = attn_kv_seq_read(x->seq, pos, t, c->cmp, c->cmp + bytes, d)))
    return st;
  if (memcmp(c->cmp, x->k, bytes) || memcmp(c->cmp + bytes, x->v, bytes))
    return attn_diag_set(d, ATTN_ECONFLICT,
                         "session '%s' layer %lld has length %lld; the step "
                         "is at position %lld, and its keys or values are "
                         "not the ones stored there (a retry sends the same)",
                         s->id, (long long)layer, (long long)L, (long long)pos);
  return ATTN_OK;
}

/* The weights' size (B is 1), before anything changes. */
static attn_status check_weights(const step_ctx *c, attn_diag *d) {
  const attn_session_limits *lim = &c->st->lim;
  double n = (double)c->H * (double)c->t * (double)c->slot[0].len1;
  if (n > (double)lim->max_weights_elements)
    return attn_diag_set(d, ATTN_ETOOBIG,
                         "attention weights of num_heads x tokens x length = "
                         "%lld x %lld x %lld elements; this server allows at "
                         "most %lld (max_weights_elements)",
                         (long long)c->H, (long long)c->t,
                         (long long)c->slot[0].len1,
                         (long long)lim->max_weights_elements);
  return ATTN_OK;
}

/* Buffers for every session's encoded rows and a retry's stored ones. */
static attn_status alloc_rows(step_ctx *c, attn_diag *d) {
  size_t per, all;
  if (c->qo) return ATTN_OK;
  if (!attn_size_mul(c->row_elems, 2 * sizeof(float), &per) ||
      !attn_size_mul(per, (size_t)c->B, &all) || !(c->rows = malloc(all)) ||
      !(c->cmp = malloc(per)))
    return attn_diag_set(d, ATTN_ENOMEM, "step: out of memory");
  for (int64_t b = 0; b < c->B; b++) {
    size_t e = attn_kv_dtype_size(c->slot[b].s->spec.kv_dtype);
    c->slot[b].k = c->rows + (size_t)b * per;
    c->slot[b].v = c->slot[b].k + c->row_elems * e;
  }
  return ATTN_OK;
}

/* ---- phase 2: appends ---------------------------------------------------- */

static void undo(step_ctx *c) {
  for (int64_t b = 0; b < c->B; b++)
    if (c->slot[b].appended) {
      attn_kv_seq_truncate(c->slot[b].seq, c->slot[b].len0, NULL);
      c->slot[b].appended = 0;
    }
}

static attn_status append_all(step_ctx *c, int64_t *bad, attn_diag *d) {
  for (int64_t b = 0; b < c->B; b++) {
    step_slot *x = &c->slot[b];
    if (!x->append) continue;
    attn_diag sub;
    attn_status s = attn_kv_seq_append(x->seq, c->t, x->k, x->v, &sub);
    if (s == ATTN_OK) {
      x->appended = 1;
      continue;
    }
    undo(c);
    *bad = b;
    if (s != ATTN_ETOOBIG) return attn_diag_set(d, s, "%s", sub.msg);
    attn_kv_pool_stats ps;
    attn_kv_pool_stats_get(c->st->pool, &ps);
    return attn_diag_set(d, ATTN_ENOSPACE,
                         "the KV cache is full: session '%s' needs room for "
                         "%lld more tokens; %zu bytes in use by %zu sessions, "
                         "limit %zu bytes (kv_cache_bytes)",
                         x->s->id, (long long)c->t, ps.used_bytes,
                         attn__session_count(c->st), ps.limit_bytes);
  }
  return ATTN_OK;
}

/* ---- phase 3: attention -------------------------------------------------- */

/* 1 when two sessions' steps can share one engine call: the same storage
 * dtype and the same variants (attn_kv_problem has one of each). */
static int same_engine(const attn_session *a, const attn_session *b) {
  const attn_session_spec *x = &a->spec, *y = &b->spec;
  if (x->kv_dtype != y->kv_dtype || x->scale != y->scale ||
      x->has_window != y->has_window || x->window_left != y->window_left ||
      x->softcap != y->softcap || x->has_rotary != y->has_rotary ||
      x->rotary_base != y->rotary_base || x->rotary_dims != y->rotary_dims ||
      x->rotary_interleaved != y->rotary_interleaved ||
      !a->slopes != !b->slopes)
    return 0;
  return !a->slopes || !memcmp(a->slopes, b->slopes,
                               (size_t)x->num_heads * sizeof *a->slopes);
}

/* The problem of the sessions idx[0..n) (views filled from their layers). */
static attn_kv_problem problem(const step_ctx *c, const int64_t *idx, int64_t n,
                               attn_kv_view *views, const float *q) {
  const attn_session *s = c->slot[idx[0]].s;
  attn_kv_problem p;
  memset(&p, 0, sizeof p);
  for (int64_t i = 0; i < n; i++)
    views[i] = attn_kv_seq_view(c->slot[idx[i]].seq);
  p.B = n, p.t = c->t, p.H = c->H, p.Hkv = c->Hkv, p.D = c->D;
  p.dtype = s->spec.kv_dtype;
  p.kv = views;
  p.q = q;
  p.queries_only = c->qo;
  p.o = s->o;
  return p;
}

static attn_status attend_all(step_ctx *c, float *out, float *lse,
                              attn_diag *d) {
  int64_t B = c->B, groups = 0;
  size_t qn = (size_t)(c->t * c->H * c->D), ln = (size_t)(c->t * c->H);
  attn_exec x = {0};
  x.threads = c->p->threads;
  for (int64_t b = 0; b < B; b++) c->slot[b].group = -1;
  for (int64_t b = 0; b < B; b++) {
    if (c->slot[b].group >= 0) continue;
    c->slot[b].group = (int)groups;
    for (int64_t b2 = b + 1; b2 < B; b2++)
      if (c->slot[b2].group < 0 && same_engine(c->slot[b].s, c->slot[b2].s))
        c->slot[b2].group = (int)groups;
    groups++;
  }
  int64_t *idx = malloc((size_t)B * sizeof *idx);
  attn_kv_view *views = malloc((size_t)B * sizeof *views);
  float *gq = NULL, *go = NULL, *gl = NULL;
  if (groups > 1) {
    gq = malloc((size_t)B * qn * sizeof *gq);
    go = malloc((size_t)B * qn * sizeof *go);
    gl = malloc((size_t)B * ln * sizeof *gl);
  }
  attn_status s = ATTN_OK;
  if (!idx || !views || (groups > 1 && (!gq || !go || !gl)))
    s = attn_diag_set(d, ATTN_ENOMEM, "step: out of memory");
  for (int64_t g = 0; g < groups && s == ATTN_OK; g++) {
    int64_t n = 0;
    for (int64_t b = 0; b < B; b++)
      if (c->slot[b].group == g) idx[n++] = b;
    if (groups == 1) { /* the whole batch, in order */
      attn_kv_problem p = problem(c, idx, n, views, c->p->q);
      s = attn_kv_attend(&p, &x, out, lse, d);
      break;
    }
    for (int64_t i = 0; i < n; i++)
      memcpy(gq + (size_t)i * qn, c->p->q + (size_t)idx[i] * qn,
             qn * sizeof *gq);
    attn_kv_problem p = problem(c, idx, n, views, gq);
    if ((s = attn_kv_attend(&p, &x, go, gl, d))) break;
    for (int64_t i = 0; i < n; i++) {
      memcpy(out + (size_t)idx[i] * qn, go + (size_t)i * qn, qn * sizeof *go);
      memcpy(lse + (size_t)idx[i] * ln, gl + (size_t)i * ln, ln * sizeof *gl);
    }
  }
  free(idx);
  free(views);
  free(gq);
  free(go);
  free(gl);
  return s;
}

static attn_status weights_of(step_ctx *c, float *w, attn_diag *d) {
  int64_t idx = 0;
  attn_kv_view view;
  attn_kv_problem p = problem(c, &idx, 1, &view, c->p->q);
  return attn_kv_weights(&p, w, d);
}

/* ---- the step ------------------------------------------------------------ */

static attn_status run(step_ctx *c, float *out, float *lse, int64_t *length,
                       float **weights, int64_t *bad, attn_diag *d) {
  attn_status s;
  float *w = NULL;
  for (int64_t b = 0; b < c->B; b++) {
    *bad = b;
    if ((s = check_shape(c, b, d))) return s;
  }
  if ((s = alloc_rows(c, d))) {
    *bad = 0;
    return s;
  }
  for (int64_t b = 0; b < c->B; b++) {
    *bad = b;
    if ((s = check_rows(c, b, d))) return s;
  }
  *bad = 0;
  if (weights) {
    if ((s = check_weights(c, d))) return s;
    size_t n = (size_t)(c->H * c->t * c->slot[0].len1);
    if (!(w = malloc((n ? n : 1) * sizeof *w)))
      return attn_diag_set(d, ATTN_ENOMEM, "step: out of memory");
  }
  if ((s = append_all(c, bad, d)) || (s = attend_all(c, out, lse, d)) ||
      (weights && (s = weights_of(c, w, d)))) {
    undo(c);
    free(w);
    return s;
  }
  uint64_t tokens = 0;
  for (int64_t b = 0; b < c->B; b++) {
    length[b] = c->slot[b].len1;
    tokens += c->slot[b].append ? (uint64_t)c->t : 0;
  }
  attn__session_stepped(c->st, c->p->sessions, (size_t)c->B, c->now_ns, tokens);
  if (weights) *weights = w;
  return ATTN_OK;
}

attn_status attn_session_attend(attn_session_store *st,
                                const attn_session_step *step, uint64_t now_ns,
                                float *out, float *lse, int64_t *length,
                                float **weights, int64_t *bad, attn_diag *d) {
  int64_t ignore;
  attn_status s;
  if (!bad) bad = &ignore;
  *bad = 0;
  if (weights) *weights = NULL;
  if ((s = check_args(step, out, lse, length, weights, d))) return s;
  int64_t B = step->B;
  const attn_session *s0 = step->sessions[0];
  step_ctx c = {st,
                step,
                now_ns,
                B,
                step->t,
                s0->spec.num_heads,
                s0->spec.num_kv_heads,
                s0->spec.head_dim,
                !step->k,
                NULL,
                (size_t)(step->t * s0->spec.num_kv_heads * s0->spec.head_dim),
                NULL,
                NULL};
  c.slot = calloc((size_t)B, sizeof *c.slot);
  step_slot **ord = malloc((size_t)B * sizeof *ord);
  if (!c.slot || !ord) {
    free(c.slot);
    free(ord);
    return attn_diag_set(d, ATTN_ENOMEM, "step: out of memory");
  }
  for (int64_t b = 0; b < B; b++) {
    c.slot[b].s = step->sessions[b];
    ord[b] = &c.slot[b];
  }
  qsort(ord, (size_t)B, sizeof *ord, by_address);
  for (int64_t i = 1; i < B; i++)
    if (ord[i]->s == ord[i - 1]->s) {
      *bad = ord[i] - c.slot;
      s = attn_diag_set(d, ATTN_EINVAL,
                        "sessions %lld and %lld of the step are both session "
                        "'%s': a session appears once in a step",
                        (long long)(ord[i - 1] - c.slot),
                        (long long)(ord[i] - c.slot), ord[i]->s->id);
      free(c.slot);
      free(ord);
      return s;
    }
  for (int64_t i = 0; i < B; i++) pthread_mutex_lock(&ord[i]->s->lock);
  for (int64_t b = 0; b < B; b++) {
    attn_session *x = c.slot[b].s;
    int64_t l = step->layer;
    c.slot[b].seq = l >= 0 && l < x->spec.layers ? x->seq[l] : NULL;
    c.slot[b].len0 = c.slot[b].seq ? attn_kv_seq_len(c.slot[b].seq) : 0;
  }
  s = run(&c, out, lse, length, weights, bad, d);
  for (int64_t i = B - 1; i >= 0; i--) pthread_mutex_unlock(&ord[i]->s->lock);
  free(c.rows);
  free(c.cmp);
  free(c.slot);
  free(ord);
  return s;
}
