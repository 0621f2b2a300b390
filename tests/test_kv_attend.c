/* test_kv_attend.c - attention over sessions' KV blocks (engine.h:
 * attn_kv_attend, attn_kv_encode; src/engine/kv_attend.c, kv_kernels.c).
 *
 * Every kernel set (avx512, avx2, scalar: the straightforward one) on 1
 * and 3 threads against the double reference over the stored values
 * (attn_ref_kv_attend), outputs and lse within 1e-5 (1 + |ref|); and
 * against ref.c's double sdpa of the whole sequence, unrounded and
 * unrotated (causal bottom-right, the same variants): within 1e-5 (1 +
 * |ref|) for fp32 storage, 2e-2 (1 + |ref|) for bf16 and fp16 (lse against
 * the fp32-storage reference).  The weights (attn_kv_weights): rows that
 * sum to 1 and times the values give the reference's output.  Then: lse
 * by counting, rows that see nothing, bitwise batch invariance, prefill in
 * one step against smaller steps, and the checks. */
#include <math.h>
#include <stdio.h>

#include "attn/engine.h"
#include "attn/kv.h"
#include "unit.h"

/* The kernel choice (attn__kv_set_kernel). */
#include "../src/engine/internal.h"

static const char *const kernel_sets[] = {"avx512", "avx2", "scalar"};
#define NSETS 3

static uint64_t rs = 1;
static float rnd(void) { /* uniform in [-1, 1) */
  return (float)((xs64(&rs) >> 40) / (double)(1ull << 24) * 2.0 - 1.0);
}
static float *rnd_buf(size_t n, float amp) {
  float *p = malloc((n ? n : 1) * sizeof *p);
  ck_assert_ptr_nonnull(p);
  for (size_t i = 0; i < n; i++) p[i] = amp * rnd();
  return p;
}

/* A batch of sequences of one shape, with the keys and values each holds
 * kept dense and unrotated (hk, hv: [cap][Hkv][D]) for ref.c's sdpa. */
typedef struct sess {
  attn_kv_pool *pool;
  int64_t B, H, Hkv, D, cap;
  attn_kv_dtype dt;
  attn_attend_opts o;
  float slopes[64];
  attn_kv_seq *seq[8];
  float *hk[8], *hv[8];
} sess;

static void sess_init(sess *s, int64_t B, int64_t H, int64_t Hkv, int64_t D,
                      attn_kv_dtype dt, const attn_attend_opts *o) {
  attn_diag d;
  memset(s, 0, sizeof *s);
  s->B = B, s->H = H, s->Hkv = Hkv, s->D = D, s->dt = dt, s->cap = 1024;
  s->o = *o;
  s->o.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
  if (o->alibi_slopes) {
    ck_assert_int_eq(attn_alibi_slopes(H, s->slopes, &d), ATTN_OK);
    s->o.alibi_slopes = s->slopes;
  }
  ck_assert_int_eq(attn_kv_pool_create((size_t)512 << 20, &s->pool, &d),
                   ATTN_OK);
  attn_kv_shape sh = {Hkv, D, dt};
  for (int64_t b = 0; b < B; b++) {
    ck_assert_int_eq(attn_kv_seq_create(s->pool, &sh, &s->seq[b], &d), ATTN_OK);
    s->hk[b] = malloc((size_t)(s->cap * Hkv * D) * sizeof(float));
    s->hv[b] = malloc((size_t)(s->cap * Hkv * D) * sizeof(float));
  }
}

static void sess_free(sess *s) {
  for (int64_t b = 0; b < s->B; b++) {
    attn_kv_seq_free(s->seq[b]);
    free(s->hk[b]);
    free(s->hv[b]);
  }
  attn_kv_pool_destroy(s->pool);
}

/* Append t tokens (k, v [t][Hkv][D] fp32) to sequence b, as a session
 * step does: encode (rotary, dtype), then append. */
static void sess_append_rows(sess *s, int64_t b, int64_t t, const float *k,
                             const float *v) {
  attn_diag d;
  int64_t len = attn_kv_seq_len(s->seq[b]), row = s->Hkv * s->D;
  ck_assert_int_le(len + t, s->cap);
  size_t e = attn_kv_dtype_size(s->dt);
  void *ke = malloc((size_t)(t * row) * e + 1),
       *ve = malloc((size_t)(t * row) * e + 1);
  attn_kv_rows r = {t, s->Hkv, s->D, s->dt, len, k, v};
  ck_assert_msg(attn_kv_encode(&r, &s->o, ke, ve, &d) == ATTN_OK, "%s", d.msg);
  ck_assert_int_eq(attn_kv_seq_append(s->seq[b], t, ke, ve, &d), ATTN_OK);
  memcpy(s->hk[b] + len * row, k, (size_t)(t * row) * sizeof(float));
  memcpy(s->hv[b] + len * row, v, (size_t)(t * row) * sizeof(float));
  free(ke);
  free(ve);
}

static void sess_append(sess *s, int64_t b, int64_t t) {
  size_t n = (size_t)(t * s->Hkv * s->D);
  float *k = rnd_buf(n, 1.0f), *v = rnd_buf(n, 1.0f);
  sess_append_rows(s, b, t, k, v);
  free(k);
  free(v);
}

/* The problem over sequences idx[0..n) of s (views into vw). */
static attn_kv_problem sess_problem(const sess *s, const int64_t *idx,
                                    int64_t n, int64_t t, const float *q,
                                    attn_kv_view *vw) {
  for (int64_t i = 0; i < n; i++) vw[i] = attn_kv_seq_view(s->seq[idx[i]]);
  attn_kv_problem p = {n, t, s->H, s->Hkv, s->D, s->dt, vw, q, 0, s->o};
  return p;
}

static void run(const attn_kv_problem *p, int threads, float *out, float *lse) {
  attn_exec x = {.threads = threads};
  attn_diag d;
  ck_assert_msg(attn_kv_attend(p, &x, out, lse, &d) == ATTN_OK, "%s", d.msg);
}

/* |got - ref| <= tol (1 + |ref|) everywhere (equal infinities pass);
 * reports the first failure. */
static int close_to(const char *ctx, const char *what, const float *got,
                    const double *ref, size_t n, double tol) {
  for (size_t i = 0; i < n; i++) {
    if (isinf(ref[i]) && (double)got[i] == ref[i]) continue;
    if (!(fabs((double)got[i] - ref[i]) <= tol * (1.0 + fabs(ref[i])))) {
      fprintf(stderr, "%s: %s[%zu] = %.9g, reference %.9g\n", ctx, what, i,
              (double)got[i], ref[i]);
      return 0;
    }
  }
  return 1;
}

/* ref.c's sdpa of sequence b's whole problem (its history, unrounded and
 * unrotated; the step's t queries q [t][H][D]): out [t][H][D]. */
static void dense_ref(const sess *s, int64_t b, int64_t t, const float *q,
                      double *out) {
  int64_t H = s->H, D = s->D, len = attn_kv_seq_len(s->seq[b]);
  float *qh = malloc((size_t)(H * t * D) * sizeof *qh);
  double *o = malloc((size_t)(H * t * D) * sizeof *o);
  for (int64_t i = 0; i < t; i++)
    for (int64_t h = 0; h < H; h++)
      memcpy(qh + (h * t + i) * D, q + (i * H + h) * D, (size_t)D * 4);
  attn_sdpa_problem p = {1,
                         H,
                         s->Hkv,
                         t,
                         len,
                         D,
                         D,
                         {qh, 0, t * D, D},
                         {s->hk[b], 0, D, s->Hkv * D},
                         {s->hv[b], 0, D, s->Hkv * D},
                         s->o};
  attn_diag d;
  ck_assert_msg(attn_ref_sdpa(&p, o, NULL, &d) == ATTN_OK, "%s", d.msg);
  for (int64_t i = 0; i < t; i++)
    for (int64_t h = 0; h < H; h++)
      memcpy(out + (i * H + h) * D, o + (h * t + i) * D, (size_t)D * 8);
  free(qh);
  free(o);
}

/* ---- the table ----------------------------------------------------------- */

enum {
  V_WINDOW = 1,
  V_ALIBI = 2,
  V_SOFTCAP = 4,
  V_ROPE = 8,
  V_ROPE_PAIRS = 16,
  V_ROPE_SHORT = 32,
  V_SCALE = 64
};

typedef struct kv_case {
  int B, t, H, Hkv, D;
  attn_kv_dtype dt;
  int variants, window, len0; /* window left; history up to len0 tokens */
} kv_case;

static const kv_case cases[] = {
    {3, 1, 8, 2, 64, ATTN_KV_FP32, 0, 0, 90},
    {3, 1, 8, 2, 64, ATTN_KV_BF16, 0, 0, 90},
    {3, 1, 8, 2, 64, ATTN_KV_FP16, 0, 0, 90},
    {2, 5, 4, 4, 40, ATTN_KV_FP32, V_WINDOW, 7, 60},
    {2, 17, 8, 1, 128, ATTN_KV_FP32, V_ALIBI, 0, 40},
    {2, 3, 6, 2, 32, ATTN_KV_FP16, V_SOFTCAP, 0, 50},
    {2, 1, 12, 4, 64, ATTN_KV_BF16, V_ROPE, 0, 70},
    {2, 9, 8, 8, 16, ATTN_KV_FP32, V_ROPE | V_ROPE_PAIRS | V_ROPE_SHORT, 0, 30},
    {2, 33, 4, 2, 8, ATTN_KV_FP32, 127, 20, 50},
    {2, 2, 4, 2, 48, ATTN_KV_BF16, 127, 9, 40},
    {2, 4, 4, 1, 24, ATTN_KV_FP16, 127 & ~V_ROPE_PAIRS, 5, 40},
    {1, 70, 32, 8, 128, ATTN_KV_FP32, V_WINDOW | V_ROPE, 30, 20},
    {4, 1, 32, 8, 128, ATTN_KV_FP16, 0, 0, 300},
    {2, 1, 64, 1, 16, ATTN_KV_FP32, V_ALIBI, 0, 45},
    {2, 2, 2, 1, 1, ATTN_KV_FP32, V_SOFTCAP | V_SCALE, 0, 20},
    {2, 6, 3, 1, 7, ATTN_KV_BF16, V_WINDOW | V_ALIBI, 0, 20},
};

static attn_attend_opts case_opts(const kv_case *c) {
  attn_attend_opts o = {0};
  if (c->variants & V_WINDOW) {
    o.has_window = 1;
    o.window_left = c->window;
    o.window_right = 0;
  }
  if (c->variants & V_ALIBI) o.alibi_slopes = (const float *)1; /* sess_init */
  if (c->variants & V_SOFTCAP) o.softcap = 1.5f;
  if (c->variants & V_ROPE) {
    o.rotary.on = 1;
    o.rotary.interleaved = (c->variants & V_ROPE_PAIRS) != 0;
    o.rotary.dims = c->variants & V_ROPE_SHORT ? (c->D / 2) & ~1 : 0;
    o.rotary.base = c->variants & V_ROPE_SHORT ? 500.0 : 0.0;
  }
  if (c->variants & V_SCALE) {
    o.has_scale = 1;
    o.scale = 0.7f;
  }
  return o;
}

/* A case's batch: each sequence a history of up to len0 tokens, then the
 * step's t tokens appended; q [B][t][H][D]. */
static float *case_batch(const kv_case *c, sess *s) {
  attn_attend_opts o = case_opts(c);
  sess_init(s, c->B, c->H, c->Hkv, c->D, c->dt, &o);
  for (int b = 0; b < c->B; b++) {
    int64_t h = (int64_t)(xs64(&rs) % (uint64_t)(c->len0 + 1));
    if (b == 0) h = c->len0; /* one long one, one maybe empty */
    if (h) sess_append(s, b, h);
    sess_append(s, b, c->t);
  }
  return rnd_buf((size_t)(c->B * c->t * c->H * c->D), 2.0f);
}

static void case_ctx(const kv_case *c, const char *set, int th, char *buf,
                     size_t n) {
  snprintf(
      buf, n,
      "B=%d t=%d H=%d Hkv=%d D=%d %s variants=%d window=%d [%s, %d threads]",
      c->B, c->t, c->H, c->Hkv, c->D, attn_kv_dtype_name(c->dt), c->variants,
      c->window, set, th);
}

START_TEST(kv_attend_matches_reference) {
  const kv_case *c = &cases[_i];
  rs = 1000 + (uint64_t)_i;
  sess s;
  float *q = case_batch(c, &s);
  int64_t idx[8] = {0, 1, 2, 3, 4, 5, 6, 7};
  attn_kv_view vw[8];
  attn_kv_problem p = sess_problem(&s, idx, c->B, c->t, q, vw);
  size_t no = (size_t)(c->B * c->t * c->H * c->D), nl = no / (size_t)c->D;
  double *ro = malloc(no * 8), *rl = malloc(nl * 8);
  float *out = malloc(no * 4), *lse = malloc(nl * 4);
  attn_diag d;
  ck_assert_msg(attn_ref_kv_attend(&p, ro, rl, &d) == ATTN_OK, "%s", d.msg);
  const char *was = attn__kv_kernel_name();
  double bytes = attn__kv_set_step_bytes(0.0); /* 3 threads, however small */
  char ctx[200];
  for (int k = 0; k < NSETS; k++) {
    if (!attn__kv_set_kernel(kernel_sets[k])) {
      UNIT_SKIPPED(kernel_sets[k]);
      continue;
    }
    for (int th = 1; th <= 3; th += 2) {
      case_ctx(c, kernel_sets[k], th, ctx, sizeof ctx);
      memset(out, 0xff, no * 4);
      run(&p, th, out, lse);
      ck_assert(close_to(ctx, "out", out, ro, no, 1e-5));
      ck_assert(close_to(ctx, "lse", lse, rl, nl, 1e-5));
    }
  }
  ck_assert(attn__kv_set_kernel(was));
  attn__kv_set_step_bytes(bytes);
  free(ro);
  free(rl);
  free(out);
  free(lse);
  free(q);
  sess_free(&s);
}
END_TEST

/* Against ref.c on the whole problem: the sequence's unrounded, unrotated
 * history, causal bottom-right, the same variants.  lse for bf16 and fp16
 * storage against the reference over fp32 storage of the same rows. */
START_TEST(kv_attend_matches_dense_reference) {
  const kv_case *c = &cases[_i];
  rs = 2000 + (uint64_t)_i;
  sess s;
  float *q = case_batch(c, &s);
  int64_t idx[8] = {0, 1, 2, 3, 4, 5, 6, 7};
  attn_kv_view vw[8];
  attn_kv_problem p = sess_problem(&s, idx, c->B, c->t, q, vw);
  size_t per = (size_t)(c->t * c->H * c->D), nl = (size_t)(c->B * c->t * c->H);
  float *out = malloc(per * (size_t)c->B * 4), *lse = malloc(nl * 4);
  double *ro = malloc(per * 8);
  double tol = c->dt == ATTN_KV_FP32 ? 1e-5 : 2e-2;
  char ctx[200];
  case_ctx(c, attn__kv_kernel_name(), 2, ctx, sizeof ctx);
  run(&p, 2, out, lse);
  for (int b = 0; b < c->B; b++) {
    dense_ref(&s, b, c->t, q + (size_t)b * per, ro);
    ck_assert(close_to(ctx, "out", out + (size_t)b * per, ro, per, tol));
  }
  if (c->dt != ATTN_KV_FP32) { /* the same rows stored as fp32 */
    sess f;
    attn_attend_opts o = s.o;
    o.alibi_slopes = o.alibi_slopes ? (const float *)1 : NULL;
    sess_init(&f, c->B, c->H, c->Hkv, c->D, ATTN_KV_FP32, &o);
    for (int b = 0; b < c->B; b++)
      sess_append_rows(&f, b, attn_kv_seq_len(s.seq[b]), s.hk[b], s.hv[b]);
    attn_kv_problem pf = sess_problem(&f, idx, c->B, c->t, q, vw);
    double *rl = malloc(nl * 8), *ro32 = malloc(per * (size_t)c->B * 8);
    attn_diag d;
    ck_assert_int_eq(attn_ref_kv_attend(&pf, ro32, rl, &d), ATTN_OK);
    ck_assert(close_to(ctx, "lse", lse, rl, nl, tol));
    free(rl);
    free(ro32);
    sess_free(&f);
  }
  free(out);
  free(lse);
  free(ro);
  free(q);
  sess_free(&s);
}
END_TEST

/* ---- lse and empty rows ----------------------------------------------------
 */

/* Zero queries: every score is 0, so lse = log(keys seen) and the output
 * is the mean of the values seen; a row that sees nothing (queries only,
 * over an empty sequence or a window of 0) gives 0 and -inf. */
/* attn_kv_weights on fp32 storage: each row sums to 1 (0 for a row that
 * sees nothing), and the weights times the values are the reference's
 * output, within 1e-5 (1 + |ref|). */
START_TEST(kv_weights_match_reference) {
  const kv_case *c = &cases[_i];
  if (c->dt != ATTN_KV_FP32) return;
  rs = 3000 + (uint64_t)_i;
  sess s;
  float *q = case_batch(c, &s);
  int64_t idx[8] = {0, 1, 2, 3, 4, 5, 6, 7}, H = c->H, t = c->t, D = c->D;
  attn_kv_view vw[8];
  attn_kv_problem p = sess_problem(&s, idx, c->B, c->t, q, vw);
  size_t no = (size_t)(c->B * t * H * D), nw = 0;
  for (int b = 0; b < c->B; b++) nw += (size_t)(H * t * vw[b].len);
  double *ro = malloc(no * 8), *rl = malloc(no / (size_t)D * 8);
  float *w = malloc(nw * 4);
  attn_diag d;
  ck_assert_msg(attn_ref_kv_attend(&p, ro, rl, &d) == ATTN_OK, "%s", d.msg);
  ck_assert_msg(attn_kv_weights(&p, w, &d) == ATTN_OK, "%s", d.msg);
  const float *wb = w;
  for (int b = 0; b < c->B; b++) {
    int64_t L = vw[b].len, G = H / c->Hkv;
    for (int64_t h = 0; h < H; h++)
      for (int64_t i = 0; i < t; i++) {
        const float *row = wb + (h * t + i) * L;
        double sum = 0.0;
        for (int64_t j = 0; j < L; j++) sum += row[j];
        ck_assert_msg(fabs(sum - 1.0) < 1e-5 ||
                          (sum == 0.0 && isinf(rl[(b * t + i) * H + h])),
                      "b %d h %lld i %lld: weights sum to %g", b, (long long)h,
                      (long long)i, sum);
        for (int64_t e = 0; e < D; e++) {
          double o = 0.0, r = ro[((b * t + i) * H + h) * D + e];
          for (int64_t j = 0; j < L; j++)
            o += row[j] * (double)s.hv[b][(j * c->Hkv + h / G) * D + e];
          ck_assert_msg(fabs(o - r) <= 1e-5 * (1.0 + fabs(r)),
                        "b %d h %lld i %lld: weights x values %g, out %g", b,
                        (long long)h, (long long)i, o, r);
        }
      }
    wb += H * t * L;
  }
  free(ro);
  free(rl);
  free(w);
  free(q);
  sess_free(&s);
}
END_TEST

START_TEST(kv_attend_lse_counts_keys) {
  const char *was = attn__kv_kernel_name();
  for (int k = 0; k < NSETS; k++) {
    if (!attn__kv_set_kernel(kernel_sets[k])) {
      UNIT_SKIPPED(kernel_sets[k]);
      continue;
    }
    attn_attend_opts o = {.has_window = 1, .window_left = 20};
    sess s;
    sess_init(&s, 2, 4, 2, 16, ATTN_KV_FP32, &o);
    sess_append(&s, 0, 37);
    float *q = calloc(2 * 3 * 4 * 16, sizeof *q), out[2 * 3 * 4 * 16],
          lse[2 * 3 * 4];
    int64_t idx[2] = {0, 1};
    attn_kv_view vw[2];
    /* 3 new tokens on sequence 0 at positions 34, 35, 36: they see 21 keys
     * each (window 20); 3 queries only on the empty sequence 1 */
    attn_kv_problem p = sess_problem(&s, idx, 1, 3, q, vw);
    run(&p, 1, out, lse);
    for (int i = 0; i < 3 * 4; i++)
      ck_assert_float_eq_tol(lse[i], logf(21.0f), 1e-6);
    for (int c = 0; c < 16; c++) { /* row (i = 0, h = 0): keys 14..34 */
      double m = 0;
      for (int j = 14; j <= 34; j++) m += s.hv[0][(j * 2) * 16 + c] / 21.0;
      ck_assert_double_eq_tol(out[c], m, 1e-6);
    }
    p = sess_problem(&s, idx + 1, 1, 3, q, vw);
    p.queries_only = 1;
    run(&p, 1, out, lse);
    for (int i = 0; i < 3 * 4; i++) ck_assert(isinf(lse[i]) && lse[i] < 0);
    for (int i = 0; i < 3 * 4 * 16; i++) ck_assert(out[i] == 0.0f);
    /* queries only: every cached token, or none with a window of 0 */
    p = sess_problem(&s, idx, 1, 3, q, vw);
    p.queries_only = 1;
    p.o.window_left = 40;
    run(&p, 1, out, lse);
    for (int i = 0; i < 3 * 4; i++)
      ck_assert_float_eq_tol(lse[i], logf(37.0f), 1e-6);
    p.o.window_left = 0;
    run(&p, 1, out, lse);
    for (int i = 0; i < 3 * 4; i++) ck_assert(isinf(lse[i]) && lse[i] < 0);
    for (int i = 0; i < 3 * 4 * 16; i++) ck_assert(out[i] == 0.0f);
    free(q);
    sess_free(&s);
  }
  ck_assert(attn__kv_set_kernel(was));
}
END_TEST

/* ---- batch invariance ------------------------------------------------------
 */

/* A sequence's answer, bit for bit, alone or in batches of every size, at
 * every position, on 1, 2 and 3 threads, twice.  8 kv heads: the units
 * take 8, 4, 2 or 1 of them depending on the batch and the threads. */
START_TEST(kv_attend_batch_invariant) {
  static const attn_kv_dtype dts[] = {ATTN_KV_FP32, ATTN_KV_BF16, ATTN_KV_FP16};
  const char *was = attn__kv_kernel_name();
  double bytes = attn__kv_set_step_bytes(0.0); /* the threads, however small */
  for (int k = 0; k < NSETS; k++) {
    if (!attn__kv_set_kernel(kernel_sets[k])) {
      UNIT_SKIPPED(kernel_sets[k]);
      continue;
    }
    for (int di = 0; di < 3; di++) {
      rs = 77 + (uint64_t)di;
      attn_attend_opts o = {.softcap = 3.0f, .rotary = {.on = 1}};
      sess s;
      int64_t t = di == 1 ? 3 : 1, B = 6, H = 16, D = 32, per = t * H * D;
      sess_init(&s, B, H, 8, D, dts[di], &o);
      for (int b = 0; b < B; b++) sess_append(&s, b, 10 + 37 * b);
      float *q = rnd_buf((size_t)(B * per), 2.0f);
      float *alone = malloc((size_t)(B * per) * 4),
            *la = malloc((size_t)(B * t * H) * 4);
      float *out = malloc((size_t)(B * per) * 4),
            *lse = malloc((size_t)(B * t * H) * 4);
      float *qb = malloc((size_t)(B * per) * 4);
      attn_kv_view vw[8];
      for (int64_t b = 0; b < B; b++) {
        attn_kv_problem p = sess_problem(&s, &b, 1, t, q + b * per, vw);
        run(&p, 1, alone + b * per, la + b * t * H);
      }
      for (int rep = 0; rep < 2; rep++)
        for (int64_t n = 1; n <= B; n++)
          for (int th = 1; th <= 3; th++) {
            int64_t idx[8];
            for (int64_t i = 0; i < n; i++) /* a rotation of the sequences */
              idx[i] = (i + n + th + rep) % B;
            for (int64_t i = 0; i < n; i++)
              memcpy(qb + i * per, q + idx[i] * per, (size_t)per * 4);
            attn_kv_problem p = sess_problem(&s, idx, n, t, qb, vw);
            run(&p, th, out, lse);
            for (int64_t i = 0; i < n; i++) {
              ck_assert_msg(memcmp(out + i * per, alone + idx[i] * per,
                                   (size_t)per * 4) == 0,
                            "%s %s: sequence %lld at %lld of %lld, %d threads",
                            kernel_sets[k], attn_kv_dtype_name(dts[di]),
                            (long long)idx[i], (long long)i, (long long)n, th);
              ck_assert(memcmp(lse + i * t * H, la + idx[i] * t * H,
                               (size_t)(t * H) * 4) == 0);
            }
          }
      free(q);
      free(qb);
      free(alone);
      free(la);
      free(out);
      free(lse);
      sess_free(&s);
    }
  }
  ck_assert(attn__kv_set_kernel(was));
  attn__kv_set_step_bytes(bytes);
}
END_TEST

/* ---- prefill in steps ------------------------------------------------------
 */

/* The same 61 tokens as one prefill step and as steps of 1, 2, 5, 13 and
 * 40 (two sessions): every token's answer within 1e-6 (1 + |ref|), every
 * dtype, with the variants on; the stored keys and values are the same
 * bytes. */
START_TEST(kv_prefill_one_step_or_many) {
  static const attn_kv_dtype dts[] = {ATTN_KV_FP32, ATTN_KV_BF16, ATTN_KV_FP16};
  static const int64_t steps[] = {1, 2, 5, 13, 40};
  const int64_t T = 61, H = 8, Hkv = 2, D = 48, row = Hkv * D, qrow = H * D;
  for (int di = 0; di < 3; di++) {
    rs = 5 + (uint64_t)di;
    attn_attend_opts o = {.has_window = 1,
                          .window_left = 23,
                          .softcap = 4.0f,
                          .alibi_slopes = (const float *)1,
                          .rotary = {.on = 1, .interleaved = di == 2}};
    float *k = rnd_buf((size_t)(T * row), 1.0f),
          *v = rnd_buf((size_t)(T * row), 1.0f);
    float *q = rnd_buf((size_t)(T * qrow), 2.0f);
    float *one = malloc((size_t)(T * qrow) * 4),
          *l1 = malloc((size_t)(T * H) * 4);
    float *many = malloc((size_t)(T * qrow) * 4),
          *lm = malloc((size_t)(T * H) * 4);
    sess a, m;
    sess_init(&a, 1, H, Hkv, D, dts[di], &o);
    sess_init(&m, 1, H, Hkv, D, dts[di], &o);
    int64_t zero = 0;
    attn_kv_view vw[1];
    sess_append_rows(&a, 0, T, k, v);
    attn_kv_problem p = sess_problem(&a, &zero, 1, T, q, vw);
    run(&p, 2, one, l1);
    for (int64_t at = 0, st = 0; at < T; st++) {
      int64_t n = steps[st % 5] < T - at ? steps[st % 5] : T - at;
      sess_append_rows(&m, 0, n, k + at * row, v + at * row);
      p = sess_problem(&m, &zero, 1, n, q + at * qrow, vw);
      run(&p, 1, many + at * qrow, lm + at * H);
      at += n;
    }
    size_t e = attn_kv_dtype_size(dts[di]);
    unsigned char *ka = malloc((size_t)(T * row) * e),
                  *km = malloc((size_t)(T * row) * e);
    attn_diag d;
    ck_assert_int_eq(attn_kv_seq_read(a.seq[0], 0, T, ka, NULL, &d), ATTN_OK);
    ck_assert_int_eq(attn_kv_seq_read(m.seq[0], 0, T, km, NULL, &d), ATTN_OK);
    ck_assert(memcmp(ka, km, (size_t)(T * row) * e) == 0);
    for (int64_t i = 0; i < T * qrow; i++)
      ck_assert_msg(fabsf(one[i] - many[i]) <= 1e-6f * (1.0f + fabsf(one[i])),
                    "%s: out[%lld] %.9g in one step, %.9g in steps",
                    attn_kv_dtype_name(dts[di]), (long long)i, (double)one[i],
                    (double)many[i]);
    for (int64_t i = 0; i < T * H; i++)
      ck_assert(fabsf(l1[i] - lm[i]) <= 1e-6f * (1.0f + fabsf(l1[i])));
    free(ka);
    free(km);
    free(k);
    free(v);
    free(q);
    free(one);
    free(l1);
    free(many);
    free(lm);
    sess_free(&a);
    sess_free(&m);
  }
}
END_TEST

/* ---- checks ----------------------------------------------------------------
 */

/* Two fp32 sequences of len0 tokens and 1 token. */
static void two_sessions(sess *s, int64_t H, int64_t Hkv, int64_t D,
                         int64_t len0) {
  attn_attend_opts o = {0};
  sess_init(s, 2, H, Hkv, D, ATTN_KV_FP32, &o);
  sess_append(s, 0, len0);
  sess_append(s, 1, 1);
}

START_TEST(kv_attend_refuses) {
  sess s;
  two_sessions(&s, 4, 2, 8, 5);
  float q[2 * 2 * 4 * 8] = {0}, out[2 * 2 * 4 * 8], lse[2 * 2 * 4];
  int64_t idx[2] = {0, 1};
  attn_kv_view vw[2];
  attn_exec x = {0};
  attn_diag d;
  attn_kv_problem p = sess_problem(&s, idx, 2, 2, q, vw);
  ck_assert_int_eq(attn_kv_attend(&p, &x, out, lse, &d), ATTN_ESHAPE);
  ck_assert_msg(strstr(d.msg, "sequence 1 holds 1 tokens") != NULL, "%s",
                d.msg);
  p = sess_problem(&s, idx, 2, 1, q, vw);
  q[1 * 4 * 8 + 2 * 8 + 3] = NAN;
  ck_assert_int_eq(attn_kv_attend(&p, &x, out, lse, &d), ATTN_ENONFINITE);
  ck_assert_str_eq(d.msg, "query[1][0][2][3] is nan");
  q[1 * 4 * 8 + 2 * 8 + 3] = 0.0f;
  p.o.causal = 0;
  ck_assert_int_eq(attn_kv_attend(&p, &x, out, lse, &d), ATTN_EINVAL);
  ck_assert(strstr(d.msg, "causal") != NULL);
  p.o = s.o;
  p.o.has_window = 1;
  p.o.window_right = 2;
  ck_assert_int_eq(attn_kv_attend(&p, &x, out, lse, &d), ATTN_EINVAL);
  p.o = s.o;
  p.o.weights = ATTN_WEIGHTS_PER_HEAD;
  ck_assert_int_eq(attn_kv_attend(&p, &x, out, lse, &d), ATTN_EINVAL);
  p.o = s.o;
  p.o.rotary = (attn_rotary){.on = 1, .has_query_offset = 1};
  ck_assert_int_eq(attn_kv_attend(&p, &x, out, lse, &d), ATTN_EINVAL);
  p.o = s.o;
  p.Hkv = 4;
  ck_assert_int_eq(attn_kv_attend(&p, &x, out, lse, &d), ATTN_ESHAPE);
  ck_assert(strstr(d.msg, "sequence 0 is 2 kv heads") != NULL);
  p.Hkv = 3;
  ck_assert_int_eq(attn_kv_check(&p, &d), ATTN_ESHAPE);
  p.Hkv = 2;
  attn_bytes by;
  ck_assert_int_eq(attn_kv_bytes(&p, &x, &by, &d), ATTN_OK);
  ck_assert_uint_eq(by.out, 2 * 4 * 8 * 4);
  ck_assert_uint_gt(by.workspace, 0);
  p.B = 0;
  ck_assert_int_eq(attn_kv_attend(&p, &x, NULL, NULL, &d), ATTN_OK);
  sess_free(&s);
}
END_TEST

/* A non-finite query value is named wherever it is: the scan looks at 256
 * values at a time, then within them (here past the first 256, and the
 * first of two). */
START_TEST(kv_attend_names_nonfinite_query) {
  sess s;
  two_sessions(&s, 32, 8, 16, 1);
  float *q = rnd_buf(2 * 32 * 16, 1.0f), out[2 * 32 * 16], lse[2 * 32];
  int64_t idx[2] = {0, 1};
  attn_kv_view vw[2];
  attn_exec x = {0};
  attn_diag d;
  attn_kv_problem p = sess_problem(&s, idx, 2, 1, q, vw);
  q[700] = -INFINITY; /* sequence 1, head 11, value 12 */
  ck_assert_int_eq(attn_kv_attend(&p, &x, out, lse, &d), ATTN_ENONFINITE);
  ck_assert_str_eq(d.msg, "query[1][0][11][12] is -inf");
  q[1000] = NAN;
  ck_assert_int_eq(attn_kv_attend(&p, &x, out, lse, &d), ATTN_ENONFINITE);
  ck_assert_str_eq(d.msg, "query[1][0][11][12] is -inf");
  q[700] = 0.5f;
  ck_assert_int_eq(attn_kv_attend(&p, &x, out, lse, &d), ATTN_ENONFINITE);
  ck_assert_str_eq(d.msg, "query[1][0][30][8] is nan");
  q[1000] = 0.5f;
  ck_assert_int_eq(attn_kv_attend(&p, &x, out, lse, &d), ATTN_OK);
  free(q);
  sess_free(&s);
}
END_TEST

/* Encoding: the bytes depend on the rows and the position only (one step
 * or many); NaN, Inf and values beyond fp16's range are refused, named. */
START_TEST(kv_encode_checks) {
  attn_attend_opts o = {.rotary = {.on = 1}};
  float k[3 * 2 * 4], v[3 * 2 * 4];
  for (int i = 0; i < 24; i++) k[i] = v[i] = rnd();
  uint16_t a[24], b[24], va[24], vb[24];
  attn_diag d;
  attn_kv_rows r = {3, 2, 4, ATTN_KV_FP16, 7, k, v};
  ck_assert_int_eq(attn_kv_encode(&r, &o, a, va, &d), ATTN_OK);
  for (int i = 0; i < 3; i++) {
    attn_kv_rows one = {1, 2, 4, ATTN_KV_FP16, 7 + i, k + 8 * i, v + 8 * i};
    ck_assert_int_eq(attn_kv_encode(&one, &o, b + 8 * i, vb + 8 * i, &d),
                     ATTN_OK);
  }
  ck_assert(memcmp(a, b, sizeof a) == 0 && memcmp(va, vb, sizeof va) == 0);
  ck_assert(a[0] != attn_f32_to_f16(k[0])); /* turned: position 7 */
  ck_assert(va[5] == attn_f32_to_f16(v[5]));
  v[13] = 70000.0f;
  ck_assert_int_eq(attn_kv_encode(&r, &o, a, va, &d), ATTN_EINVAL);
  ck_assert_str_eq(d.msg, "value[1][1][1] is 70000, beyond fp16's range");
  r.dtype = ATTN_KV_BF16;
  ck_assert_int_eq(attn_kv_encode(&r, &o, a, va, &d), ATTN_OK);
  k[22] = INFINITY;
  ck_assert_int_eq(attn_kv_encode(&r, &o, a, va, &d), ATTN_ENONFINITE);
  ck_assert_str_eq(d.msg, "key[2][1][2] is inf");
  k[22] = 0.0f;
  o.rotary.dims = 3;
  ck_assert_int_eq(attn_kv_encode(&r, &o, a, va, &d), ATTN_EINVAL);
  ck_assert(strstr(d.msg, "rotary dims") != NULL);
}
END_TEST

Suite *kv_attend_suite(void) {
  Suite *s = suite_create("kv_attend");
  TCase *tc = tcase_create("kv_attend");
  int n = (int)(sizeof cases / sizeof *cases);
  tcase_add_loop_test(tc, kv_attend_matches_reference, 0, n);
  tcase_add_loop_test(tc, kv_attend_matches_dense_reference, 0, n);
  tcase_add_loop_test(tc, kv_weights_match_reference, 0, n);
  tcase_add_test(tc, kv_attend_lse_counts_keys);
  tcase_add_test(tc, kv_attend_batch_invariant);
  tcase_add_test(tc, kv_prefill_one_step_or_many);
  tcase_add_test(tc, kv_attend_refuses);
  tcase_add_test(tc, kv_attend_names_nonfinite_query);
  tcase_add_test(tc, kv_encode_checks);
  suite_add_tcase(s, tc);
  return s;
}
