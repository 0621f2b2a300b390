/* test_session.c - the session store (include/attn/session.h,
 * src/session/store.c, step.c).
 *
 * The spec's checks and defaults; create's idempotence and conflicts;
 * owners kept apart; max_sessions; steps against a float64 reference of
 * full causal attention over each session's whole history (the rows kept
 * dense and unrotated here; rotary, scale, window, ALiBi and softcap
 * applied in double): within 1e-5 (1 + |ref|) for fp32 storage, 2e-2 for
 * bf16 and fp16; prefill in one step against smaller steps; the same bits
 * alone, in a batch of mixed variants at another position and on another
 * thread count; queries only; all or nothing when the pool is full; the
 * position, a retry (the same bits, nothing appended) and a retry with
 * other rows; fork (copy on write), truncate, delete while held, expiry
 * and its message, the weights; and threads stepping their own sessions
 * while others create, fork and delete. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>

#include "attn/engine.h"
#include "attn/session.h"
#include "../src/session/internal.h" /* a session's lock, held as a step holds it */
#include "unit.h"

static uint64_t rs = 7;
static float rnd(void) { /* uniform in [-1, 1) */
  return (float)((xs64(&rs) >> 40) / (double)(1ull << 24) * 2.0 - 1.0);
}
static float *rnd_buf(size_t n) {
  float *p = malloc((n ? n : 1) * sizeof *p);
  ck_assert_ptr_nonnull(p);
  for (size_t i = 0; i < n; i++) p[i] = rnd();
  return p;
}

#define SEC 1000000000ull

static attn_session_limits limits(void) {
  attn_session_limits l = {(size_t)64 << 20, 64, 0, 4096, 1 << 20};
  return l;
}

static attn_session_store *store_new(const attn_session_limits *l) {
  attn_session_store *st;
  attn_diag d;
  ck_assert_msg(attn_session_store_create(l, &st, &d) == ATTN_OK, "%s", d.msg);
  return st;
}

static attn_session_spec spec_of(int64_t H, int64_t Hkv, int64_t D,
                                 attn_kv_dtype dt) {
  attn_session_spec f;
  memset(&f, 0, sizeof f);
  f.num_heads = H, f.num_kv_heads = Hkv, f.head_dim = D, f.kv_dtype = dt;
  return f;
}

/* ---- a session and its history, dense ------------------------------------ */

typedef struct tsess {
  attn_session *s;
  attn_session_spec f; /* filled (the store's) */
  float slopes[64];    /* the ALiBi slopes in force, when on */
  float *hk, *hv;      /* [cap][Hkv][D], unrotated fp32 */
  int64_t len, cap;
} tsess;

static void ts_open(attn_session_store *st, tsess *ts, const char *id,
                    const attn_session_spec *f) {
  attn_diag d;
  int created;
  memset(ts, 0, sizeof *ts);
  ck_assert_msg(
      attn_session_create(st, 0, id, f, 0, &created, NULL, &d) == ATTN_OK, "%s",
      d.msg);
  ck_assert_int_eq(created, 1);
  ck_assert_int_eq(attn_session_get(st, 0, id, 0, &ts->s, &d), ATTN_OK);
  ts->f = *attn_session_spec_of(ts->s);
  if (ts->f.alibi == ATTN_SESSION_ALIBI_STANDARD)
    ck_assert_int_eq(attn_alibi_slopes(ts->f.num_heads, ts->slopes, &d),
                     ATTN_OK);
  else if (ts->f.alibi == ATTN_SESSION_ALIBI_SLOPES)
    memcpy(ts->slopes, ts->f.alibi_slopes,
           (size_t)ts->f.num_heads * sizeof(float));
  ts->cap = 1024;
  size_t n = (size_t)(ts->cap * ts->f.num_kv_heads * ts->f.head_dim);
  ts->hk = malloc(n * sizeof(float));
  ts->hv = malloc(n * sizeof(float));
}

static void ts_close(tsess *ts) {
  attn_session_put(ts->s);
  free(ts->hk);
  free(ts->hv);
}

/* Rotate one head x (D doubles) to position pos, as engine.h defines. */
static void rot(double *x, const attn_session_spec *f, int64_t pos) {
  if (!f->has_rotary) return;
  int64_t R = f->rotary_dims, half = R / 2;
  for (int64_t i = 0; i < half; i++) {
    double a = (double)pos * pow(f->rotary_base, -2.0 * (double)i / (double)R);
    int64_t ia = f->rotary_interleaved ? 2 * i : i;
    int64_t ib = f->rotary_interleaved ? 2 * i + 1 : i + half;
    double xa = x[ia], xb = x[ib];
    x[ia] = xa * cos(a) - xb * sin(a);
    x[ib] = xb * cos(a) + xa * sin(a);
  }
}

/* Full causal attention of query rows q [t][H][D] over the history's
 * first len tokens, in double, row i standing at len - t + i (with qo, at
 * len): out [t][H][D], lse [t][H], w [H][t][len] (may be NULL). */
static void dense_ref(const tsess *ts, int64_t len, int qo, int64_t t,
                      const float *q, double *out, double *lse, double *w) {
  const attn_session_spec *f = &ts->f;
  int64_t H = f->num_heads, Hkv = f->num_kv_heads, D = f->head_dim;
  double *qd = malloc((size_t)D * sizeof *qd), *kd = malloc(D * sizeof *kd);
  double *sc = malloc((size_t)(len + 1) * sizeof *sc);
  for (int64_t i = 0; i < t; i++)
    for (int64_t h = 0; h < H; h++) {
      int64_t pos = qo ? len : len - t + i, hk = h / (H / Hkv), at = i * H + h;
      for (int64_t c = 0; c < D; c++) qd[c] = q[at * D + c];
      rot(qd, f, pos);
      double mx = -INFINITY, sum = 0.0;
      for (int64_t j = 0; j < len; j++) {
        sc[j] = -INFINITY;
        if (j > pos ||
            (f->has_window && f->window_left >= 0 && j < pos - f->window_left))
          continue;
        for (int64_t c = 0; c < D; c++) kd[c] = ts->hk[(j * Hkv + hk) * D + c];
        rot(kd, f, j);
        double s = 0.0;
        for (int64_t c = 0; c < D; c++) s += qd[c] * kd[c];
        s *= (double)f->scale;
        if (f->softcap > 0) s = f->softcap * tanh(s / f->softcap);
        if (f->alibi) s -= ts->slopes[h] * fabs((double)(j - pos));
        sc[j] = s;
        mx = s > mx ? s : mx;
      }
      for (int64_t j = 0; j < len; j++) sum += exp(sc[j] - mx);
      for (int64_t c = 0; c < D; c++) {
        double o = 0.0;
        for (int64_t j = 0; j < len; j++)
          if (sc[j] > -INFINITY)
            o += exp(sc[j] - mx) / sum * ts->hv[(j * Hkv + hk) * D + c];
        out[at * D + c] = o;
      }
      lse[at] = sum > 0 ? mx + log(sum) : -INFINITY;
      for (int64_t j = 0; w && j < len; j++)
        w[(h * t + i) * len + j] =
            sc[j] > -INFINITY ? exp(sc[j] - mx) / sum : 0.0;
    }
  free(qd);
  free(kd);
  free(sc);
}

static int close_to(const char *ctx, const float *got, const double *ref,
                    size_t n, double tol) {
  for (size_t i = 0; i < n; i++) {
    if (isinf(ref[i]) && (double)got[i] == ref[i]) continue;
    if (!(fabs((double)got[i] - ref[i]) <= tol * (1.0 + fabs(ref[i])))) {
      fprintf(stderr, "%s: [%zu] = %.9g, reference %.9g\n", ctx, i,
              (double)got[i], ref[i]);
      return 0;
    }
  }
  return 1;
}

/* A step's inputs and outputs for n sessions of one shape. */
typedef struct tstep {
  int64_t n, t, H, Hkv, D;
  float *q, *k, *v, *out, *lse;
  int64_t len[8];
} tstep;

static void tstep_init(tstep *s, const tsess *ts, int64_t n, int64_t t) {
  memset(s, 0, sizeof *s);
  s->n = n, s->t = t, s->H = ts->f.num_heads, s->Hkv = ts->f.num_kv_heads;
  s->D = ts->f.head_dim;
  s->q = rnd_buf((size_t)(n * t * s->H * s->D));
  s->k = rnd_buf((size_t)(n * t * s->Hkv * s->D));
  s->v = rnd_buf((size_t)(n * t * s->Hkv * s->D));
  s->out = malloc((size_t)(n * t * s->H * s->D) * sizeof(float));
  s->lse = malloc((size_t)(n * t * s->H) * sizeof(float));
}

static void tstep_free(tstep *s) {
  free(s->q);
  free(s->k);
  free(s->v);
  free(s->out);
  free(s->lse);
}

/* Run the step over ts[0..n) (k, v NULL when qo); on success the rows join
 * the dense histories. */
static attn_status tstep_run(attn_session_store *st, tstep *s, tsess **ts,
                             int qo, const int64_t *position, int threads,
                             int64_t *bad, attn_diag *d) {
  attn_session *ss[8];
  for (int64_t b = 0; b < s->n; b++) ss[b] = ts[b]->s;
  attn_session_step p = {
      s->n,   s->t, 0, ss, position, s->q, qo ? NULL : s->k, qo ? NULL : s->v,
      threads};
  attn_status r =
      attn_session_attend(st, &p, 5, s->out, s->lse, s->len, NULL, bad, d);
  if (r || qo) return r;
  size_t row = (size_t)(s->Hkv * s->D);
  for (int64_t b = 0; b < s->n; b++) {
    tsess *x = ts[b];
    if (s->len[b] == x->len) continue; /* a retry */
    ck_assert_int_eq(s->len[b], x->len + s->t);
    memcpy(x->hk + x->len * (int64_t)row, s->k + (size_t)(b * s->t) * row,
           (size_t)s->t * row * sizeof(float));
    memcpy(x->hv + x->len * (int64_t)row, s->v + (size_t)(b * s->t) * row,
           (size_t)s->t * row * sizeof(float));
    x->len += s->t;
  }
  return r;
}

/* Each session's answer of the last step against dense_ref. */
static void tstep_check(const tstep *s, tsess **ts, int qo, double tol,
                        const char *ctx) {
  size_t qn = (size_t)(s->t * s->H * s->D), ln = (size_t)(s->t * s->H);
  double *ro = malloc(qn * sizeof *ro), *rl = malloc(ln * sizeof *rl);
  for (int64_t b = 0; b < s->n; b++) {
    int64_t L = ts[b]->len;
    dense_ref(ts[b], L, qo, s->t, s->q + b * qn, ro, rl, NULL);
    ck_assert_msg(close_to(ctx, s->out + b * qn, ro, qn, tol), "%s: out b %lld",
                  ctx, (long long)b);
    ck_assert_msg(close_to(ctx, s->lse + b * ln, rl, ln, tol), "%s: lse b %lld",
                  ctx, (long long)b);
  }
  free(ro);
  free(rl);
}

/* One checked step of t tokens over ts[0..n). */
static void step_ok(attn_session_store *st, tsess **ts, int64_t n, int64_t t,
                    int qo, double tol, const char *ctx) {
  tstep s;
  attn_diag d;
  tstep_init(&s, ts[0], n, t);
  ck_assert_msg(tstep_run(st, &s, ts, qo, NULL, 2, NULL, &d) == ATTN_OK,
                "%s: %s", ctx, d.msg);
  tstep_check(&s, ts, qo, tol, ctx);
  tstep_free(&s);
}

/* A store of limits l (the defaults when NULL) and its session "a" of
 * spec f with a checked history of n tokens. */
static attn_session_store *one_session(const attn_session_limits *l,
                                       const attn_session_spec *f, tsess *a,
                                       int64_t n) {
  attn_session_limits def = limits();
  attn_session_store *st = store_new(l ? l : &def);
  tsess *pa = a;
  ts_open(st, a, "a", f);
  if (n) step_ok(st, &pa, 1, n, 0, f->kv_dtype ? 2e-2 : 1e-5, "history");
  return st;
}

/* ---- the spec ---------------------------------------------------------------
 */

START_TEST(session_spec_checks) {
  attn_session_limits l = limits();
  attn_session_store *st = store_new(&l);
  attn_diag d;
  int created;
  static float slopes[4] = {0.5f, 0.25f, NAN, 1};
  /* Each bad field, its message in the client's terms. */
  attn_session_spec f = spec_of(8, 3, 16, ATTN_KV_FP32);
  ck_assert_int_eq(attn_session_create(st, 0, "a", &f, 0, &created, NULL, &d),
                   ATTN_EINVAL);
  ck_assert_str_eq(d.msg, "num_kv_heads (3) must divide num_heads (8)");
  f = spec_of(8, 0, 16, ATTN_KV_FP32);
  f.max_tokens = 9000;
  ck_assert_int_eq(attn_session_create(st, 0, "a", &f, 0, &created, NULL, &d),
                   ATTN_EINVAL);
  ck_assert_str_eq(d.msg,
                   "max_tokens is 9000; this server allows at most 4096 "
                   "(max_seq_len)");
  const struct {
    int what;
    const char *needle;
  } cases[] = {{0, "num_heads"},
               {1, "head_dim"},
               {2, "layers"},
               {3, "kv_dtype"},
               {4, "scale"},
               {5, "window"},
               {6, "alibi"},
               {7, "alibi[2]"},
               {8, "softcap"},
               {9, "rotary"},
               {10, "rotary"},
               {11, "max_tokens"},
               {12,
                "alibi has 3 slopes; give one per query head: "
                "num_heads (4)"}};
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    f = spec_of(4, 0, 16, ATTN_KV_FP32);
    switch (cases[i].what) {
      case 0:
        f.num_heads = 0;
        break;
      case 1:
        f.head_dim = 0;
        break;
      case 2:
        f.layers = -1;
        break;
      case 3:
        f.kv_dtype = (attn_kv_dtype)7;
        break;
      case 4:
        f.has_scale = true, f.scale = INFINITY;
        break;
      case 5:
        f.has_window = true, f.window_left = -2;
        break;
      case 6:
        f.alibi = ATTN_SESSION_ALIBI_SLOPES;
        break;
      case 7:
        f.alibi = ATTN_SESSION_ALIBI_SLOPES, f.alibi_slopes = slopes;
        f.alibi_count = f.num_heads;
        break;
      case 8:
        f.softcap = -1;
        break;
      case 9:
        f.has_rotary = true, f.rotary_dims = 5;
        break;
      case 10:
        f.has_rotary = true, f.rotary_base = 0.5;
        break;
      case 11:
        f.max_tokens = -1;
        break;
      case 12: /* fewer slopes than heads: never read past them */
        f.alibi = ATTN_SESSION_ALIBI_SLOPES, f.alibi_slopes = slopes;
        f.alibi_count = 3;
        break;
    }
    ck_assert_int_eq(attn_session_create(st, 0, "a", &f, 0, &created, NULL, &d),
                     ATTN_EINVAL);
    ck_assert_msg(strstr(d.msg, cases[i].needle), "case %zu: %s", i, d.msg);
  }
  ck_assert_int_eq(
      attn_session_create(st, 0, "bad id!", &f, 0, &created, NULL, &d),
      ATTN_EINVAL);
  /* Defaults, filled. */
  f = spec_of(8, 0, 16, ATTN_KV_BF16);
  f.has_rotary = true;
  attn_session_info info;
  ck_assert_int_eq(attn_session_create(st, 0, "a", &f, 0, &created, &info, &d),
                   ATTN_OK);
  ck_assert_int_eq(created, 1);
  ck_assert_str_eq(info.id, "a");
  ck_assert_int_eq(info.spec.layers, 1);
  ck_assert_int_eq(info.spec.num_kv_heads, 8);
  ck_assert_int_eq(info.spec.max_tokens, 4096);
  ck_assert(info.spec.has_scale && info.spec.scale == 0.25f);
  ck_assert(info.spec.rotary_base == 10000.0);
  ck_assert_int_eq(info.spec.rotary_dims, 16);
  ck_assert_int_eq(info.length[0], 0);
  attn_session_info_clear(&info);
  attn_session_store_destroy(st);
}
END_TEST

START_TEST(session_create_idempotent) {
  attn_session_limits l = limits();
  attn_session_store *st = store_new(&l);
  attn_diag d;
  int created;
  attn_session_spec f = spec_of(8, 2, 16, ATTN_KV_FP32), g;
  f.layers = 2;
  ck_assert_int_eq(attn_session_create(st, 0, "s", &f, 0, &created, NULL, &d),
                   ATTN_OK);
  ck_assert_int_eq(created, 1);
  /* The same once filled: 0. */
  g = f;
  g.has_scale = true, g.scale = 0.25f, g.max_tokens = 4096;
  ck_assert_int_eq(attn_session_create(st, 0, "s", &g, 0, &created, NULL, &d),
                   ATTN_OK);
  ck_assert_int_eq(created, 0);
  g = f, g.num_heads = 16;
  ck_assert_int_eq(attn_session_create(st, 0, "s", &g, 0, &created, NULL, &d),
                   ATTN_ECONFLICT);
  ck_assert_str_eq(d.msg,
                   "session 's' exists with another shape: num_heads is 8 "
                   "there, 16 here");
  g = f, g.kv_dtype = ATTN_KV_FP16;
  ck_assert_int_eq(attn_session_create(st, 0, "s", &g, 0, &created, NULL, &d),
                   ATTN_ECONFLICT);
  ck_assert_msg(strstr(d.msg, "kv_dtype is fp32 there, fp16 here"), "%s",
                d.msg);
  g = f, g.has_rotary = true;
  ck_assert_int_eq(attn_session_create(st, 0, "s", &g, 0, &created, NULL, &d),
                   ATTN_ECONFLICT);
  ck_assert_msg(strstr(d.msg, "rotary is off there"), "%s", d.msg);
  attn_session_stats ss;
  attn_session_store_stats(st, &ss);
  ck_assert_uint_eq(ss.sessions, 1);
  attn_session_store_destroy(st);
}
END_TEST

START_TEST(session_owners_and_limits) {
  attn_session_limits l = limits();
  l.max_sessions = 3;
  attn_session_store *st = store_new(&l);
  attn_diag d;
  int created;
  attn_session *s;
  attn_session_spec f = spec_of(2, 1, 8, ATTN_KV_FP32);
  ck_assert_int_eq(attn_session_create(st, 1, "b", &f, 0, &created, NULL, &d),
                   ATTN_OK);
  ck_assert_int_eq(attn_session_create(st, 1, "a", &f, 0, &created, NULL, &d),
                   ATTN_OK);
  /* Another owner: its own "a", no collision, no sight of owner 1's. */
  f.head_dim = 4;
  ck_assert_int_eq(attn_session_create(st, 2, "a", &f, 0, &created, NULL, &d),
                   ATTN_OK);
  ck_assert_int_eq(created, 1);
  ck_assert_int_eq(attn_session_get(st, 2, "b", 0, &s, &d), ATTN_ENOTFOUND);
  ck_assert_str_eq(d.msg, "session 'b' not found");
  ck_assert_int_eq(attn_session_delete(st, 2, "b", &d), ATTN_ENOTFOUND);
  attn_session_info *v;
  size_t n;
  ck_assert_int_eq(attn_session_list(st, 1, 0, &v, &n, &d), ATTN_OK);
  ck_assert_uint_eq(n, 2);
  ck_assert_str_eq(v[0].id, "a");
  ck_assert_str_eq(v[1].id, "b");
  ck_assert_int_eq(v[0].spec.head_dim, 8);
  for (size_t i = 0; i < n; i++) attn_session_info_clear(&v[i]);
  free(v);
  ck_assert_int_eq(attn_session_list(st, 2, 0, &v, &n, &d), ATTN_OK);
  ck_assert_uint_eq(n, 1);
  ck_assert_int_eq(v[0].spec.head_dim, 4);
  attn_session_info_clear(&v[0]);
  free(v);
  /* max_sessions: a fourth is refused, an existing one still found. */
  ck_assert_int_eq(attn_session_create(st, 2, "c", &f, 0, &created, NULL, &d),
                   ATTN_ENOSPACE);
  ck_assert_msg(strstr(d.msg, "max_sessions = 3"), "%s", d.msg);
  ck_assert_int_eq(attn_session_create(st, 2, "a", &f, 0, &created, NULL, &d),
                   ATTN_OK);
  ck_assert_int_eq(attn_session_get(st, 2, "a", 0, &s, &d), ATTN_OK);
  ck_assert_int_eq(attn_session_fork(st, s, "c", 0, NULL, &d), ATTN_ENOSPACE);
  ck_assert_int_eq(attn_session_delete(st, 1, "b", &d), ATTN_OK);
  ck_assert_int_eq(attn_session_fork(st, s, "a", 0, NULL, &d), ATTN_ECONFLICT);
  ck_assert_int_eq(attn_session_fork(st, s, "c", 0, NULL, &d), ATTN_OK);
  ck_assert_int_eq(attn_session_fork(st, s, "c", 0, NULL, &d), ATTN_ECONFLICT);
  attn_session_put(s);
  attn_session_store_destroy(st);
}
END_TEST

/* ---- steps against the reference --------------------------------------------
 */

typedef struct step_case {
  const char *name;
  int64_t H, Hkv, D;
  attn_kv_dtype dt;
  int scale, window, alibi, softcap, rotary; /* rotary 2: interleaved */
} step_case;

static const step_case cases[] = {
    {"plain", 4, 4, 16, ATTN_KV_FP32, 0, 0, 0, 0, 0},
    {"gqa scale", 8, 2, 32, ATTN_KV_FP32, 1, 0, 0, 0, 0},
    {"mqa window", 4, 1, 16, ATTN_KV_FP32, 0, 1, 0, 0, 0},
    {"alibi standard", 6, 3, 8, ATTN_KV_FP32, 0, 0, 1, 0, 0},
    {"alibi slopes", 4, 2, 8, ATTN_KV_FP32, 0, 0, 2, 0, 0},
    {"softcap", 4, 2, 16, ATTN_KV_FP32, 1, 0, 0, 1, 0},
    {"rotary halves", 4, 2, 16, ATTN_KV_FP32, 0, 0, 0, 0, 1},
    {"rotary pairs", 4, 4, 12, ATTN_KV_FP32, 0, 1, 1, 1, 2},
    {"odd dim", 3, 1, 7, ATTN_KV_FP32, 0, 0, 0, 0, 0},
    {"bf16", 8, 2, 16, ATTN_KV_BF16, 0, 0, 0, 0, 1},
    {"fp16", 4, 2, 9, ATTN_KV_FP16, 0, 1, 1, 0, 0},
    {"bf16 odd", 2, 1, 5, ATTN_KV_BF16, 0, 0, 0, 1, 0},
};
#define NCASES (sizeof cases / sizeof *cases)

static float case_slopes[8] = {0.3f, 0.05f, 0.7f, 0.125f,
                               0.2f, 0.4f,  0.6f, 0.8f};

static attn_session_spec case_spec(const step_case *c) {
  attn_session_spec f = spec_of(c->H, c->Hkv, c->D, c->dt);
  if (c->scale) f.has_scale = true, f.scale = 0.3f;
  if (c->window) f.has_window = true, f.window_left = 5;
  if (c->alibi == 1) f.alibi = ATTN_SESSION_ALIBI_STANDARD;
  if (c->alibi == 2)
    f.alibi = ATTN_SESSION_ALIBI_SLOPES, f.alibi_slopes = case_slopes,
    f.alibi_count = f.num_heads;
  if (c->softcap) f.softcap = 2.0f;
  if (c->rotary) {
    f.has_rotary = true;
    f.rotary_interleaved = c->rotary == 2;
    f.rotary_dims = c->D % 4 == 0 ? c->D / 2 : 0;
    f.rotary_base = c->rotary == 2 ? 500.0 : 0.0;
  }
  return f;
}

START_TEST(session_steps_match_reference) {
  const step_case *c = &cases[_i];
  attn_session_limits l = limits();
  attn_session_store *st = store_new(&l);
  attn_session_spec f = case_spec(c);
  double tol = c->dt == ATTN_KV_FP32 ? 1e-5 : 2e-2;
  tsess a, b, e;
  ts_open(st, &a, "a", &f);
  ts_open(st, &b, "b", &f);
  ts_open(st, &e, "c", &f);
  tsess *ab[3] = {&a, &b, &e};
  /* Prefill of different lengths (one session at a time), then decode
   * and small steps of the three in a batch, then queries only. */
  step_ok(st, ab, 1, 20, 0, tol, c->name);
  step_ok(st, ab + 1, 1, 3, 0, tol, c->name);
  step_ok(st, ab + 2, 1, 17, 0, tol, c->name);
  for (int i = 0; i < 3; i++) step_ok(st, ab, 3, 1, 0, tol, c->name);
  step_ok(st, ab, 3, 5, 0, tol, c->name);
  step_ok(st, ab, 3, 2, 1, tol, c->name);
  ck_assert_int_eq(a.len, 28);
  ts_close(&a);
  ts_close(&b);
  ts_close(&e);
  attn_session_store_destroy(st);
}
END_TEST

/* Prefill in one step: the same rows (within 1e-6) as in several. */
START_TEST(session_prefill_one_or_many) {
  attn_session_limits l = limits();
  attn_session_store *st = store_new(&l);
  attn_session_spec f = case_spec(&cases[7]);
  tsess a, b;
  ts_open(st, &a, "a", &f);
  ts_open(st, &b, "b", &f);
  tsess *pa = &a, *pb = &b;
  tstep one;
  attn_diag d;
  int64_t T = 40, cut[] = {7, 1, 16, 16};
  tstep_init(&one, &a, 1, T);
  ck_assert_int_eq(tstep_run(st, &one, &pa, 0, NULL, 1, NULL, &d), ATTN_OK);
  size_t qrow = (size_t)(a.f.num_heads * a.f.head_dim);
  size_t krow = (size_t)(a.f.num_kv_heads * a.f.head_dim);
  int64_t at = 0;
  for (int i = 0; i < 4; i++) {
    tstep s;
    tstep_init(&s, &b, 1, cut[i]);
    memcpy(s.q, one.q + at * qrow, cut[i] * qrow * sizeof(float));
    memcpy(s.k, one.k + at * krow, cut[i] * krow * sizeof(float));
    memcpy(s.v, one.v + at * krow, cut[i] * krow * sizeof(float));
    ck_assert_int_eq(tstep_run(st, &s, &pb, 0, NULL, 3, NULL, &d), ATTN_OK);
    double *ro = malloc(cut[i] * qrow * sizeof *ro);
    for (size_t j = 0; j < cut[i] * qrow; j++) ro[j] = one.out[at * qrow + j];
    ck_assert(close_to("prefill", s.out, ro, cut[i] * qrow, 1e-6));
    free(ro);
    at += cut[i];
    tstep_free(&s);
  }
  tstep_free(&one);
  ts_close(&a);
  ts_close(&b);
  attn_session_store_destroy(st);
}
END_TEST

/* Alone, or third in a batch of mixed variants and dtypes (the engine
 * called per group) on other threads: the same bits. */
START_TEST(session_bitwise_in_any_batch) {
  attn_session_limits l = limits();
  attn_session_store *st = store_new(&l);
  attn_session_spec f = case_spec(&cases[1]), g = f, h = f;
  g.kv_dtype = ATTN_KV_BF16;
  h.softcap = 3.0f;
  tsess a1, a2, x, y;
  ts_open(st, &a1, "a1", &f);
  ts_open(st, &a2, "a2", &f);
  ts_open(st, &x, "x", &g);
  ts_open(st, &y, "y", &h);
  tsess *px = &x, *py = &y;
  step_ok(st, &px, 1, 9, 0, 2e-2, "x");
  step_ok(st, &py, 1, 30, 0, 1e-5, "y");
  attn_diag d;
  for (int round = 0; round < 3; round++) {
    int64_t t = round == 0 ? 24 : round == 1 ? 1 : 3;
    tstep s1, s2;
    tsess *alone[1] = {&a1}, *batch[3] = {&x, &y, &a2};
    tstep_init(&s1, &a1, 1, t);
    tstep_init(&s2, &a1, 3, t);
    size_t qn = (size_t)(t * 8 * 32), kn = (size_t)(t * 2 * 32);
    memcpy(s2.q + 2 * qn, s1.q, qn * sizeof(float));
    memcpy(s2.k + 2 * kn, s1.k, kn * sizeof(float));
    memcpy(s2.v + 2 * kn, s1.v, kn * sizeof(float));
    ck_assert_int_eq(tstep_run(st, &s1, alone, 0, NULL, 1, NULL, &d), ATTN_OK);
    ck_assert_msg(tstep_run(st, &s2, batch, 0, NULL, 2, NULL, &d) == ATTN_OK,
                  "%s", d.msg);
    ck_assert(!memcmp(s1.out, s2.out + 2 * qn, qn * sizeof(float)));
    ck_assert(!memcmp(s1.lse, s2.lse + 2 * t * 8, (size_t)t * 8 * 4));
    tstep_check(&s2, batch, 0, 2e-2, "batch");
    tstep_free(&s1);
    tstep_free(&s2);
  }
  ts_close(&a1);
  ts_close(&a2);
  ts_close(&x);
  ts_close(&y);
  attn_session_store_destroy(st);
}
END_TEST

START_TEST(session_checks_of_a_step) {
  attn_session_limits l = limits();
  attn_session_store *st = store_new(&l);
  attn_session_spec f = spec_of(4, 2, 8, ATTN_KV_FP32), g = f;
  f.layers = 2;
  f.max_tokens = 10;
  g.num_kv_heads = 1;
  tsess a, b, c;
  ts_open(st, &a, "a", &f);
  ts_open(st, &b, "b", &f);
  ts_open(st, &c, "c", &g);
  attn_diag d;
  int64_t bad;
  tstep s;
  tstep_init(&s, &a, 2, 4);
  /* Queries only on an empty layer. */
  tsess *ab[2] = {&a, &b}, *aa[2] = {&a, &a}, *ac[2] = {&a, &c};
  ck_assert_int_eq(tstep_run(st, &s, ab, 1, NULL, 1, &bad, &d), ATTN_ECONFLICT);
  ck_assert_str_eq(d.msg,
                   "session 'a' layer 0 holds no token: a step with queries "
                   "only needs one");
  ck_assert_int_eq(tstep_run(st, &s, aa, 0, NULL, 1, &bad, &d), ATTN_EINVAL);
  ck_assert_int_eq(bad, 1);
  ck_assert_msg(strstr(d.msg,
                       "sessions 0 and 1 of the step are both session "
                       "'a'"),
                "%s", d.msg);
  ck_assert_int_eq(tstep_run(st, &s, ac, 0, NULL, 1, &bad, &d), ATTN_EINVAL);
  ck_assert_int_eq(bad, 1);
  ck_assert_msg(strstr(d.msg, "num_kv_heads"), "%s", d.msg);
  /* Layer out of range. */
  attn_session *ss[1] = {a.s};
  attn_session_step p = {1, 4, 2, ss, NULL, s.q, s.k, s.v, 1};
  ck_assert_int_eq(
      attn_session_attend(st, &p, 0, s.out, s.lse, s.len, NULL, &bad, &d),
      ATTN_EINVAL);
  ck_assert_str_eq(d.msg,
                   "layer 2 is out of range: session 'a' has 2 layers (0..1)");
  /* max_tokens: 4 + 4 fit, a third 4 does not. */
  ck_assert_int_eq(tstep_run(st, &s, ab, 0, NULL, 1, &bad, &d), ATTN_OK);
  ck_assert_int_eq(tstep_run(st, &s, ab, 0, NULL, 1, &bad, &d), ATTN_OK);
  ck_assert_int_eq(tstep_run(st, &s, ab, 0, NULL, 1, &bad, &d), ATTN_EINVAL);
  ck_assert_str_eq(d.msg,
                   "session 'a' holds at most max_tokens = 10 tokens per "
                   "layer; layer 0 has 8 and this step adds 4");
  /* A NaN in a key: nothing changes in either session. */
  s.t = 1;
  s.k[2 * 8 + 3] = NAN; /* b's row */
  ck_assert_int_eq(tstep_run(st, &s, ab, 0, NULL, 1, &bad, &d),
                   ATTN_ENONFINITE);
  ck_assert_int_eq(bad, 1);
  attn_session_info info;
  ck_assert_int_eq(attn_session_info_get(a.s, 0, &info, &d), ATTN_OK);
  ck_assert_int_eq(info.length[0], 8);
  ck_assert_int_eq(info.length[1], 0);
  attn_session_info_clear(&info);
  tstep_free(&s);
  ts_close(&a);
  ts_close(&b);
  ts_close(&c);
  attn_session_store_destroy(st);
}
END_TEST

/* What a step stores: step.c encodes the usual rows itself (no rotary,
 * fp32 or bf16, every value finite and within range: encode_fast) and
 * leaves the rest to attn_kv_encode.  Either way the stored bytes are
 * attn_kv_encode's, bit for bit (ties of bf16's rounding both ways, the
 * largest finite values, subnormals, -0, random values; rows of 3 tokens
 * x 2 heads x 37 dims, not a whole vector), for every dtype, without and
 * with rotary; and a value it refuses (Inf, NaN, beyond bf16's or fp16's
 * range, in a key or a value) gets its message, with nothing stored. */
START_TEST(session_encode_fast_like_reference) {
  static const uint32_t special[] = {
      0x3f808000u, 0x3f818000u, 0x3f80c000u, 0x00000001u, 0x80000000u,
      0x007fffffu, 0x477fefffu, 0x387fc000u, 0x33000000u, 0x00008000u,
      /* beyond fp16's range: fp32 and bf16 only */
      0x7f7f0000u, 0x7f7f7fffu, 0xff7f7fffu, 0x477ff000u};
  static const uint32_t refused[] = {0x7f800000u, 0xff800000u, 0x7fc00000u,
                                     0x7f7f8000u, 0xff7fffffu, 0x477ff000u};
  static const attn_kv_dtype dts[] = {ATTN_KV_FP32, ATTN_KV_BF16, ATTN_KV_FP16};
  const int64_t t = 3, Hkv = 2, D = 37;
  const size_t n = (size_t)(t * Hkv * D);
  for (int di = 0; di < 3; di++)
    for (int rope = 0; rope < 2; rope++) {
      attn_session_spec f = spec_of(4, Hkv, D - 1, dts[di]);
      f.head_dim = D; /* odd: rotary takes the even dims below it */
      f.has_rotary = rope;
      f.rotary_dims = rope ? 36 : 0;
      attn_session_limits l = limits();
      attn_session_store *st = store_new(&l);
      tsess a, *pa = &a;
      ts_open(st, &a, "a", &f);
      tstep s;
      tstep_init(&s, &a, 1, t);
      size_t ns = sizeof special / sizeof *special - (di == 2 ? 4 : 0);
      for (size_t i = 0; i < ns; i++) {
        memcpy(&s.k[5 * i], &special[i], 4);
        memcpy(&s.v[7 * i + 1], &special[i], 4);
      }
      attn_diag d, dr;
      int64_t bad, pos = 0;
      ck_assert_msg(tstep_run(st, &s, &pa, 0, &pos, 1, &bad, &d) == ATTN_OK,
                    "%s", d.msg);
      size_t e = attn_kv_dtype_size(dts[di]);
      unsigned char *rk = malloc(n * e), *rv = malloc(n * e);
      attn_attend_opts o = {0}; /* the session's rotary, as store.c */
      o.rotary.on = a.f.has_rotary;
      o.rotary.interleaved = a.f.rotary_interleaved;
      o.rotary.dims = a.f.rotary_dims;
      o.rotary.base = a.f.rotary_base;
      attn_kv_rows r = {t, Hkv, D, dts[di], 0, s.k, s.v};
      ck_assert_int_eq(attn_kv_encode(&r, &o, rk, rv, &dr), ATTN_OK);
      attn_session_dump x;
      ck_assert_int_eq(attn_session_export(a.s, &x, &d), ATTN_OK);
      ck_assert_int_eq(x.length[0], t);
      ck_assert_msg(!memcmp(x.k[0], rk, n * e) && !memcmp(x.v[0], rv, n * e),
                    "dtype %d rotary %d: stored rows differ from "
                    "attn_kv_encode's",
                    di, rope);
      attn_session_dump_clear(&x);
      /* refused values: the reference's message, nothing appended */
      for (size_t i = 0; i < 2 * (sizeof refused / sizeof *refused); i++) {
        float *row = i % 2 ? s.v : s.k;
        size_t at = 11 + 13 * i;
        float keep = row[at];
        memcpy(&row[at], &refused[i / 2], 4);
        attn_kv_rows r2 = {t, Hkv, D, dts[di], t, s.k, s.v};
        attn_status want = attn_kv_encode(&r2, &o, rk, rv, &dr);
        pos = t;
        attn_status got = tstep_run(st, &s, &pa, 0, &pos, 1, &bad, &d);
        ck_assert_int_eq(got, want);
        if (want) {
          char m[ATTN_DIAG_MAX + 16];
          snprintf(m, sizeof m, "session 'a': %s", dr.msg);
          ck_assert_str_eq(d.msg, m);
        } else { /* within fp32's range: stored; take it back */
          ck_assert_int_eq(attn_session_truncate(a.s, t, 0, NULL, &d), ATTN_OK);
          a.len = t;
        }
        attn_session_info info;
        ck_assert_int_eq(attn_session_info_get(a.s, 0, &info, &d), ATTN_OK);
        ck_assert_int_eq(info.length[0], t);
        attn_session_info_clear(&info);
        row[at] = keep;
      }
      free(rk);
      free(rv);
      tstep_free(&s);
      ts_close(&a);
      attn_session_store_destroy(st);
    }
}
END_TEST

/* The pool full: ENOSPACE, and no session of the batch changed. */
START_TEST(session_pool_full_all_or_nothing) {
  attn_session_limits l = limits();
  l.cache_bytes = (size_t)8 << 20; /* one chunk */
  attn_session_store *st = store_new(&l);
  attn_session_spec f = spec_of(8, 8, 128, ATTN_KV_FP32); /* 128 KiB blocks */
  tsess a, b;
  ts_open(st, &a, "a", &f);
  ts_open(st, &b, "b", &f);
  tsess *ab[2] = {&a, &b}, *pb = &b;
  attn_diag d;
  int64_t bad;
  tstep s;
  /* b takes 56 blocks (of 64 or so), then a batch where a fits, b not. */
  tstep_init(&s, &a, 1, 16 * 56);
  ck_assert_msg(tstep_run(st, &s, &pb, 0, NULL, 2, &bad, &d) == ATTN_OK, "%s",
                d.msg);
  tstep_free(&s);
  attn_session_stats before, after;
  attn_session_store_stats(st, &before);
  tstep_init(&s, &a, 2, 16 * 6);
  ck_assert_int_eq(tstep_run(st, &s, ab, 0, NULL, 2, &bad, &d), ATTN_ENOSPACE);
  ck_assert_int_eq(bad, 1);
  ck_assert_msg(strstr(d.msg, "the KV cache is full") &&
                    strstr(d.msg, "by 2 sessions") &&
                    strstr(d.msg, "limit 8388608 bytes"),
                "%s", d.msg);
  attn_session_store_stats(st, &after);
  ck_assert_uint_eq(after.used_bytes, before.used_bytes);
  ck_assert_uint_eq(after.tokens_total, before.tokens_total);
  attn_session_info info;
  ck_assert_int_eq(attn_session_info_get(a.s, 0, &info, &d), ATTN_OK);
  ck_assert_int_eq(info.length[0], 0);
  attn_session_info_clear(&info);
  ck_assert_int_eq(attn_session_info_get(b.s, 0, &info, &d), ATTN_OK);
  ck_assert_int_eq(info.length[0], 16 * 56);
  attn_session_info_clear(&info);
  tstep_free(&s);
  ts_close(&a);
  ts_close(&b);
  attn_session_store_destroy(st);
}
END_TEST

/* A position other than the length: 409, nothing changes.  A retry: the
 * same bits, nothing appended; a retry with other rows: 409. */
START_TEST(session_position_and_retry) {
  attn_session_spec f = case_spec(&cases[7]);
  f.kv_dtype = ATTN_KV_BF16;
  tsess a, *pa = &a;
  attn_session_store *st = one_session(NULL, &f, &a, 6);
  attn_diag d;
  int64_t pos = 6, bad;
  tstep s;
  tstep_init(&s, &a, 1, 4);
  ck_assert_int_eq(tstep_run(st, &s, &pa, 0, &pos, 1, &bad, &d), ATTN_OK);
  size_t qn = (size_t)(4 * a.f.num_heads * a.f.head_dim);
  float *out = malloc(qn * sizeof *out), *lse = malloc(qn * sizeof *lse);
  memcpy(out, s.out, qn * sizeof *out);
  memcpy(lse, s.lse, (size_t)(4 * a.f.num_heads) * sizeof *lse);
  attn_session_stats st0, st1;
  attn_session_store_stats(st, &st0);
  ck_assert_uint_eq(st0.tokens_total, 10);
  /* The retry. */
  memset(s.out, 0, qn * sizeof *out);
  ck_assert_int_eq(tstep_run(st, &s, &pa, 0, &pos, 2, &bad, &d), ATTN_OK);
  ck_assert_int_eq(s.len[0], 10);
  ck_assert(!memcmp(out, s.out, qn * sizeof *out));
  ck_assert(!memcmp(lse, s.lse, (size_t)(4 * a.f.num_heads) * sizeof *lse));
  attn_session_store_stats(st, &st1);
  ck_assert_uint_eq(st1.tokens_total, 10);
  /* Other rows at the retry's position. */
  s.v[5] += 0.5f;
  ck_assert_int_eq(tstep_run(st, &s, &pa, 0, &pos, 1, &bad, &d),
                   ATTN_ECONFLICT);
  ck_assert_msg(strstr(d.msg, "not the ones stored"), "%s", d.msg);
  /* A position that is neither. */
  pos = 3;
  ck_assert_int_eq(tstep_run(st, &s, &pa, 0, &pos, 1, &bad, &d),
                   ATTN_ECONFLICT);
  ck_assert_str_eq(d.msg,
                   "session 'a' layer 0 has length 10; the step is at "
                   "position 3");
  pos = 11;
  ck_assert_int_eq(tstep_run(st, &s, &pa, 0, &pos, 1, &bad, &d),
                   ATTN_ECONFLICT);
  attn_session_info info;
  ck_assert_int_eq(attn_session_info_get(a.s, 0, &info, &d), ATTN_OK);
  ck_assert_int_eq(info.length[0], 10);
  attn_session_info_clear(&info);
  step_ok(st, &pa, 1, 2, 0, 2e-2, "after");
  free(out);
  free(lse);
  tstep_free(&s);
  ts_close(&a);
  attn_session_store_destroy(st);
}
END_TEST

/* Fork: both sides append other tokens; neither sees the other's. */
START_TEST(session_fork_copy_on_write) {
  attn_session_spec f = case_spec(&cases[6]);
  tsess a, b, *pa = &a, *pb = &b;
  attn_session_store *st = one_session(NULL, &f, &a, 21);
  attn_diag d;
  attn_session_info info;
  ck_assert_int_eq(attn_session_fork(st, a.s, "b", 0, &info, &d), ATTN_OK);
  ck_assert_str_eq(info.id, "b");
  ck_assert_int_eq(info.length[0], 21);
  attn_session_info_clear(&info);
  /* b: a's history, then its own. */
  b = a;
  ck_assert_int_eq(attn_session_get(st, 0, "b", 0, &b.s, &d), ATTN_OK);
  size_t n = (size_t)(b.cap * b.f.num_kv_heads * b.f.head_dim);
  b.hk = malloc(n * sizeof(float));
  b.hv = malloc(n * sizeof(float));
  memcpy(b.hk, a.hk, n * sizeof(float));
  memcpy(b.hv, a.hv, n * sizeof(float));
  tsess *ab[2] = {&a, &b};
  step_ok(st, &pa, 1, 3, 0, 1e-5, "a after fork");
  step_ok(st, &pb, 1, 5, 0, 1e-5, "b after fork");
  step_ok(st, ab, 2, 1, 0, 1e-5, "both");
  step_ok(st, ab, 2, 2, 1, 1e-5, "both, queries");
  ck_assert_int_eq(a.len, 25);
  ck_assert_int_eq(b.len, 27);
  ts_close(&a);
  ts_close(&b);
  attn_session_store_destroy(st);
}
END_TEST

START_TEST(session_truncate_then_append) {
  attn_session_spec f = case_spec(&cases[3]);
  f.layers = 3;
  tsess a, *pa = &a;
  attn_session_store *st = one_session(NULL, &f, &a, 37);
  attn_diag d;
  attn_session_info info;
  ck_assert_int_eq(attn_session_truncate(a.s, 50, 0, &info, &d), ATTN_OK);
  ck_assert_int_eq(info.length[0], 37);
  ck_assert_int_eq(info.length[1], 0);
  attn_session_info_clear(&info);
  ck_assert_int_eq(attn_session_truncate(a.s, 5, 0, &info, &d), ATTN_OK);
  ck_assert_int_eq(info.length[0], 5);
  attn_session_info_clear(&info);
  ck_assert_int_eq(attn_session_truncate(a.s, -1, 0, NULL, &d), ATTN_EINVAL);
  a.len = 5;
  step_ok(st, &pa, 1, 4, 0, 1e-5, "after truncate");
  step_ok(st, &pa, 1, 1, 0, 1e-5, "after truncate");
  ts_close(&a);
  attn_session_store_destroy(st);
}
END_TEST

START_TEST(session_weights) {
  attn_session_spec f = case_spec(&cases[7]);
  tsess a;
  attn_session_store *st = one_session(NULL, &f, &a, 19);
  attn_diag d;
  int64_t bad, H = a.f.num_heads, t = 3, L = 22;
  tstep s;
  tstep_init(&s, &a, 1, t);
  attn_session *ss[1] = {a.s};
  attn_session_step p = {1, t, 0, ss, NULL, s.q, s.k, s.v, 1};
  float *w = NULL;
  ck_assert_msg(attn_session_attend(st, &p, 0, s.out, s.lse, s.len, &w, &bad,
                                    &d) == ATTN_OK,
                "%s", d.msg);
  memcpy(a.hk + 19 * 4 * 12, s.k, (size_t)(t * 4 * 12) * sizeof(float));
  memcpy(a.hv + 19 * 4 * 12, s.v, (size_t)(t * 4 * 12) * sizeof(float));
  a.len = L;
  double *ro = malloc((size_t)(t * H * 12) * sizeof *ro),
         *rl = malloc((size_t)(t * H) * sizeof *rl),
         *rw = malloc((size_t)(H * t * L) * sizeof *rw);
  dense_ref(&a, L, 0, t, s.q, ro, rl, rw);
  ck_assert(close_to("weights", w, rw, (size_t)(H * t * L), 1e-5));
  for (int64_t r = 0; r < H * t; r++) {
    double sum = 0;
    for (int64_t j = 0; j < L; j++) sum += w[r * L + j];
    ck_assert_msg(fabs(sum - 1.0) < 1e-5, "row %lld sums to %g", (long long)r,
                  sum);
  }
  free(w);
  /* Beyond max_weights_elements: ETOOBIG, nothing appended. */
  attn_session_limits l2 = limits();
  l2.max_weights_elements = H * t * (L + t) - 1;
  tsess b;
  attn_session_store *st2 = one_session(&l2, &f, &b, L);
  ss[0] = b.s;
  ck_assert_int_eq(
      attn_session_attend(st2, &p, 0, s.out, s.lse, s.len, &w, &bad, &d),
      ATTN_ETOOBIG);
  ck_assert_msg(strstr(d.msg, "max_weights_elements"), "%s", d.msg);
  ck_assert_ptr_null(w);
  attn_session_info info;
  ck_assert_int_eq(attn_session_info_get(b.s, 0, &info, &d), ATTN_OK);
  ck_assert_int_eq(info.length[0], L);
  attn_session_info_clear(&info);
  /* Queries only fit (no new tokens); two sessions do not take weights. */
  p.k = p.v = NULL;
  ck_assert_int_eq(
      attn_session_attend(st2, &p, 0, s.out, s.lse, s.len, &w, &bad, &d),
      ATTN_OK);
  free(w);
  ts_close(&b);
  attn_session_store_destroy(st2);
  free(ro);
  free(rl);
  free(rw);
  tstep_free(&s);
  ts_close(&a);
  attn_session_store_destroy(st);
}
END_TEST

/* ---- lifetime: expiry, delete -----------------------------------------------
 */

START_TEST(session_sweep_expires_the_idle) {
  attn_session_limits l = limits();
  l.idle_timeout_ns = 10 * SEC;
  attn_session_store *st = store_new(&l);
  attn_session_spec f = spec_of(2, 1, 8, ATTN_KV_FP32);
  attn_diag d;
  int created;
  attn_session *s, *held;
  ck_assert_int_eq(attn_session_create(st, 0, "a", &f, 0, &created, NULL, &d),
                   ATTN_OK);
  ck_assert_int_eq(
      attn_session_create(st, 0, "b", &f, 5 * SEC, &created, NULL, &d),
      ATTN_OK);
  ck_assert_int_eq(
      attn_session_create(st, 0, "c", &f, 6 * SEC, &created, NULL, &d),
      ATTN_OK);
  ck_assert_int_eq(attn_session_get(st, 0, "a", 8 * SEC, &s, &d), ATTN_OK);
  attn_session_put(s);
  ck_assert_uint_eq(attn_session_sweep(st, 14 * SEC), 0);
  ck_assert_uint_eq(attn_session_sweep(st, 15 * SEC), 1); /* b */
  ck_assert_int_eq(attn_session_get(st, 0, "b", 15 * SEC, &s, &d),
                   ATTN_ENOTFOUND);
  ck_assert_str_eq(d.msg,
                   "session 'b' expired after 10 s idle "
                   "(session_idle_timeout_s)");
  ck_assert_int_eq(attn_session_get(st, 0, "z", 15 * SEC, &s, &d),
                   ATTN_ENOTFOUND);
  ck_assert_str_eq(d.msg, "session 'z' not found");
  /* c held while it expires (with a, idle since 8 s): unlinked, still
   * usable until put. */
  ck_assert_int_eq(attn_session_get(st, 0, "c", 15 * SEC, &held, &d), ATTN_OK);
  ck_assert_uint_eq(attn_session_sweep(st, 25 * SEC), 2);
  attn_session_info info;
  ck_assert_int_eq(attn_session_info_get(held, 25 * SEC, &info, &d), ATTN_OK);
  ck_assert_int_eq(info.length[0], 0);
  attn_session_info_clear(&info);
  attn_session_put(held);
  attn_session_stats ss;
  attn_session_store_stats(st, &ss);
  ck_assert_uint_eq(ss.sessions, 0);
  ck_assert_uint_eq(ss.expired_total, 3);
  ck_assert_int_eq(attn_session_get(st, 0, "c", 25 * SEC, &s, &d),
                   ATTN_ENOTFOUND);
  ck_assert_msg(strstr(d.msg, "expired"), "%s", d.msg);
  /* Made again: found, not "expired". */
  ck_assert_int_eq(
      attn_session_create(st, 0, "b", &f, 30 * SEC, &created, NULL, &d),
      ATTN_OK);
  ck_assert_int_eq(created, 1);
  ck_assert_int_eq(attn_session_delete(st, 0, "b", &d), ATTN_OK);
  ck_assert_int_eq(attn_session_get(st, 0, "b", 30 * SEC, &s, &d),
                   ATTN_ENOTFOUND);
  ck_assert_str_eq(d.msg, "session 'b' not found");
  ck_assert_int_eq(
      attn_session_create(st, 0, "d", &f, 30 * SEC, &created, NULL, &d),
      ATTN_OK);
  ck_assert_uint_eq(attn_session_sweep(st, 100 * SEC), 1);
  attn_session_store_stats(st, &ss);
  ck_assert_uint_eq(ss.sessions, 0);
  ck_assert_uint_eq(ss.expired_total, 4);
  attn_session_store_destroy(st);
}
END_TEST

START_TEST(session_delete_while_held) {
  attn_session_spec f = case_spec(&cases[0]);
  tsess a, *pa = &a;
  attn_session_store *st = one_session(NULL, &f, &a, 30);
  attn_diag d;
  attn_session *s;
  ck_assert_int_eq(attn_session_delete(st, 0, "a", &d), ATTN_OK);
  ck_assert_int_eq(attn_session_get(st, 0, "a", 0, &s, &d), ATTN_ENOTFOUND);
  ck_assert_int_eq(attn_session_delete(st, 0, "a", &d), ATTN_ENOTFOUND);
  /* The holder still steps it; its blocks go when it is put. */
  step_ok(st, &pa, 1, 2, 0, 1e-5, "held");
  attn_session_stats ss;
  attn_session_store_stats(st, &ss);
  ck_assert_uint_eq(ss.sessions, 0);
  ck_assert_uint_gt(ss.used_bytes, 0);
  ck_assert_uint_eq(ss.tokens_total, 32);
  ts_close(&a);
  attn_session_store_stats(st, &ss);
  ck_assert_uint_eq(ss.used_bytes, 0);
  attn_session_store_destroy(st);
}
END_TEST

/* ---- threads ----------------------------------------------------------------
 */

typedef struct worker {
  attn_session_store *st;
  int id, failures;
} worker;

/* Steps its own session, checked against the reference. */
static void *stepper(void *arg) {
  worker *w = arg;
  char id[32];
  snprintf(id, sizeof id, "w%d", w->id);
  attn_session_spec f = case_spec(&cases[1 + w->id % 4]);
  tsess a;
  ts_open(w->st, &a, id, &f);
  tsess *pa = &a;
  for (int i = 0; i < 12; i++)
    step_ok(w->st, &pa, 1, i % 3 ? 1 : 7, 0, 1e-5, id);
  ts_close(&a);
  return NULL;
}

/* Creates, forks, steps and deletes sessions of its own. */
static void *churner(void *arg) {
  worker *w = arg;
  attn_session_spec f = spec_of(4, 2, 16, ATTN_KV_FP32);
  attn_diag d;
  for (int i = 0; i < 40; i++) {
    char a[32], b[32];
    int created;
    attn_session *s;
    snprintf(a, sizeof a, "c%d.%d", w->id, i);
    snprintf(b, sizeof b, "f%d.%d", w->id, i);
    if (attn_session_create(w->st, 0, a, &f, 0, &created, NULL, &d) ||
        attn_session_get(w->st, 0, a, 0, &s, &d)) {
      w->failures++;
      continue;
    }
    if (attn_session_fork(w->st, s, b, 0, NULL, &d)) w->failures++;
    attn_session_put(s);
    if (attn_session_delete(w->st, 0, a, &d)) w->failures++;
    if (i % 2 && attn_session_delete(w->st, 0, b, &d)) w->failures++;
    attn_session_sweep(w->st, 0);
  }
  return NULL;
}

/* 1 when two dumps hold the same first n rows of layer 0, bit for bit. */
static int same_rows(const attn_session_dump *x, const attn_session_dump *y,
                     const attn_session_spec *f, int64_t n) {
  size_t bytes = (size_t)n * (size_t)(f->num_kv_heads * f->head_dim) *
                 attn_kv_dtype_size(f->kv_dtype);
  return !memcmp(x->k[0], y->k[0], bytes) && !memcmp(x->v[0], y->v[0], bytes);
}

/* Export, then import under another owner and id: the same lengths,
 * spec and rows, and the next step bitwise the same on both (every case:
 * rotary keys are stored turned, bf16 odd dims, fp16, slopes); a taken
 * id, a length past max_tokens and a full pool refused, nothing kept. */
START_TEST(session_export_import_bitwise) {
  attn_session_spec f = case_spec(&cases[_i]);
  f.layers = 2;
  tsess a;
  attn_session_store *st = one_session(NULL, &f, &a, 23);
  attn_diag d;
  attn_session_dump x, y;
  attn_session_info info;
  ck_assert_int_eq(attn_session_export(a.s, &x, &d), ATTN_OK);
  ck_assert_str_eq(x.id, "a");
  ck_assert_uint_eq(x.owner, 0);
  ck_assert_int_eq(x.length[0], 23);
  ck_assert_int_eq(x.length[1], 0);
  ck_assert_ptr_null(x.k[1]);
  ck_assert_msg(attn_session_import(st, 7, "b", &x, 0, &info, &d) == ATTN_OK,
                "%s", d.msg);
  ck_assert_str_eq(info.id, "b");
  ck_assert_int_eq(info.length[0], 23);
  ck_assert_int_eq(info.length[1], 0);
  ck_assert_int_eq(info.spec.kv_dtype, a.f.kv_dtype);
  attn_session_info_clear(&info);
  ck_assert_int_eq(attn_session_import(st, 7, "b", &x, 0, NULL, &d),
                   ATTN_ECONFLICT);
  x.length[1] = a.f.max_tokens + 1;
  ck_assert_int_eq(attn_session_import(st, 7, "c", &x, 0, NULL, &d),
                   ATTN_EINVAL);
  ck_assert_ptr_nonnull(strstr(d.msg, "layer 1 has"));
  x.length[1] = 0;
  /* A pool of 64 KiB: imports until one does not fit; that one keeps
   * nothing. */
  attn_session_limits small = limits();
  small.cache_bytes = (size_t)64 << 10;
  small.max_sessions = 1000;
  attn_session_store *st2 = store_new(&small);
  attn_session_stats s0, s9;
  attn_status r = ATTN_OK;
  int k = 0;
  char id[16];
  while (r == ATTN_OK && k < 1000) {
    snprintf(id, sizeof id, "a%d", k++);
    attn_session_store_stats(st2, &s0);
    r = attn_session_import(st2, 0, id, &x, 0, NULL, &d);
  }
  ck_assert_msg(r == ATTN_ENOSPACE, "%s", d.msg);
  ck_assert_ptr_nonnull(strstr(d.msg, "KV cache is full"));
  attn_session_store_stats(st2, &s9);
  ck_assert_uint_eq(s9.sessions, (size_t)k - 1);
  ck_assert_uint_eq(s9.used_bytes, s0.used_bytes);
  attn_session_store_destroy(st2);
  /* The next step, the same bits on both. */
  attn_session *b;
  ck_assert_int_eq(attn_session_get(st, 7, "b", 0, &b, &d), ATTN_OK);
  tstep s1, s2;
  tsess *pa = &a;
  tstep_init(&s1, &a, 1, 3);
  tstep_init(&s2, &a, 1, 3);
  size_t qn = (size_t)(3 * s1.H * s1.D), kn = (size_t)(3 * s1.Hkv * s1.D);
  memcpy(s2.q, s1.q, qn * sizeof(float));
  memcpy(s2.k, s1.k, kn * sizeof(float));
  memcpy(s2.v, s1.v, kn * sizeof(float));
  ck_assert_int_eq(tstep_run(st, &s1, &pa, 0, NULL, 1, NULL, &d), ATTN_OK);
  attn_session *one[1] = {b};
  attn_session_step p = {1, 3, 0, one, NULL, s2.q, s2.k, s2.v, 2};
  ck_assert_msg(attn_session_attend(st, &p, 5, s2.out, s2.lse, s2.len, NULL,
                                    NULL, &d) == ATTN_OK,
                "%s", d.msg);
  ck_assert_int_eq(s2.len[0], 26);
  ck_assert(!memcmp(s1.out, s2.out, qn * sizeof(float)));
  ck_assert(!memcmp(s1.lse, s2.lse, (size_t)(3 * s1.H) * sizeof(float)));
  /* and the rows after it, bit for bit */
  attn_session_dump_clear(&x);
  ck_assert_int_eq(attn_session_export(a.s, &x, &d), ATTN_OK);
  ck_assert_int_eq(attn_session_export(b, &y, &d), ATTN_OK);
  ck_assert_str_eq(y.id, "b");
  ck_assert_uint_eq(y.owner, 7);
  ck_assert_int_eq(y.length[0], 26);
  ck_assert(same_rows(&x, &y, &a.f, 26));
  attn_session_dump_clear(&x);
  attn_session_dump_clear(&y);
  tstep_free(&s1);
  tstep_free(&s2);
  attn_session_put(b);
  ts_close(&a);
  attn_session_store_destroy(st);
}
END_TEST

/* attn_session_export_idle, for a save while steps may run (a drain that
 * ran out of time): EBUSY naming the session while a step holds its lock
 * (held here as a step holds it), nothing exported; once it is free, the
 * same rows as attn_session_export. */
START_TEST(session_export_idle_skips_a_held_session) {
  attn_session_spec f = case_spec(&cases[0]);
  tsess a;
  attn_session_store *st = one_session(NULL, &f, &a, 5);
  attn_diag d = {{0}};
  attn_session_dump x, y;
  pthread_mutex_lock(&a.s->lock);
  ck_assert_int_eq(attn_session_export_idle(a.s, &x, &d), ATTN_EBUSY);
  ck_assert_msg(strstr(d.msg, "session 'a'") && strstr(d.msg, "running"), "%s",
                d.msg);
  ck_assert_ptr_null(x.data);
  ck_assert_ptr_null(x.length);
  pthread_mutex_unlock(&a.s->lock);
  ck_assert_msg(attn_session_export_idle(a.s, &x, &d) == ATTN_OK, "%s", d.msg);
  ck_assert_int_eq(attn_session_export(a.s, &y, &d), ATTN_OK);
  ck_assert_int_eq(x.length[0], 5);
  ck_assert_int_eq(y.length[0], 5);
  ck_assert(same_rows(&x, &y, &a.f, 5));
  attn_session_dump_clear(&x);
  attn_session_dump_clear(&y);
  ts_close(&a);
  attn_session_store_destroy(st);
}
END_TEST

/* attn_session_each: every session, held, once; a nonzero return stops. */
static int count_each(void *user, attn_session *s) {
  int *n = user;
  ck_assert_ptr_nonnull(attn_session_id(s));
  return ++*n == 2;
}

START_TEST(session_each_visits_all) {
  attn_session_limits l = limits();
  attn_session_store *st = store_new(&l);
  attn_session_spec f = spec_of(2, 1, 4, ATTN_KV_FP32);
  attn_diag d;
  int n = 0;
  ck_assert_int_eq(attn_session_each(st, count_each, &n), 0);
  for (int i = 0; i < 3; i++) {
    char id[16];
    snprintf(id, sizeof id, "s%d", i);
    ck_assert_int_eq(
        attn_session_create(st, (uint64_t)i, id, &f, 0, NULL, NULL, &d),
        ATTN_OK);
  }
  ck_assert_int_eq(attn_session_each(st, count_each, &n), 2);
  attn_session_store_destroy(st);
}
END_TEST

START_TEST(session_threads) {
  attn_session_limits l = limits();
  l.max_sessions = 1000;
  attn_session_store *st = store_new(&l);
  pthread_t th[6];
  worker w[6];
  for (int i = 0; i < 6; i++) {
    w[i] = (worker){st, i, 0};
    ck_assert_int_eq(
        pthread_create(&th[i], NULL, i < 4 ? stepper : churner, &w[i]), 0);
  }
  for (int i = 0; i < 6; i++) pthread_join(th[i], NULL);
  for (int i = 0; i < 6; i++) ck_assert_int_eq(w[i].failures, 0);
  attn_session_stats ss;
  attn_session_store_stats(st, &ss);
  ck_assert_uint_eq(ss.sessions, 4 + 2 * 20);
  attn_session_store_destroy(st);
}
END_TEST

/* Threads stepping overlapping batches of the same sessions, in
 * opposite orders (the locks are taken by address: no deadlock), while
 * another creates, gets and sweeps with a short idle timeout (the held
 * sessions expire under their holders and stay usable). */
typedef struct overlap {
  attn_session_store *st;
  attn_session *s[3];
  int k, failures;
} overlap;

static void *overlap_stepper(void *arg) {
  overlap *o = arg;
  float q[2][2 * 8], k[2][8], out[2][2 * 8], lse[2][2];
  int64_t len[2];
  attn_diag d;
  for (int j = 0; j < 2; j++) {
    for (int i = 0; i < 16; i++) q[j][i] = 0.25f * (float)(i % 5);
    for (int i = 0; i < 8; i++) k[j][i] = 0.125f * (float)i;
  }
  for (int i = 0; i < 60; i++) {
    int a = (o->k + i) % 3, b = (a + 1) % 3;
    attn_session *ss[2] = {o->s[o->k % 2 ? a : b], o->s[o->k % 2 ? b : a]};
    attn_session_step p = {2, 1, 0, ss, NULL, q[0], k[0], k[0], 1};
    if (attn_session_attend(o->st, &p, 5, out[0], lse[0], len, NULL, NULL, &d))
      o->failures++;
  }
  return NULL;
}

static void *overlap_sweeper(void *arg) {
  overlap *o = arg;
  attn_session_spec f = spec_of(2, 1, 8, ATTN_KV_FP32);
  attn_diag d;
  uint64_t now = 0;
  for (int i = 0; i < 200; i++) {
    int created;
    attn_session *s;
    now += 600;
    if (attn_session_create(o->st, 0, "e", &f, now, &created, NULL, &d))
      o->failures++;
    if (attn_session_get(o->st, 0, "e", now, &s, &d) == ATTN_OK)
      attn_session_put(s);
    attn_session_sweep(o->st, now);
  }
  return NULL;
}

START_TEST(session_threads_overlapping_batches) {
  attn_session_limits l = limits();
  l.idle_timeout_ns = 1000;
  attn_session_store *st = store_new(&l);
  attn_session_spec f = spec_of(2, 1, 8, ATTN_KV_FP32);
  overlap o[4];
  attn_session *s[3];
  attn_diag d;
  int created;
  for (int i = 0; i < 3; i++) {
    char id[8];
    snprintf(id, sizeof id, "o%d", i);
    ck_assert_int_eq(attn_session_create(st, 0, id, &f, 0, &created, NULL, &d),
                     ATTN_OK);
    ck_assert_int_eq(attn_session_get(st, 0, id, 0, &s[i], &d), ATTN_OK);
  }
  pthread_t th[4];
  for (int i = 0; i < 4; i++) {
    o[i] = (overlap){st, {s[0], s[1], s[2]}, i, 0};
    ck_assert_int_eq(
        pthread_create(&th[i], NULL, i < 3 ? overlap_stepper : overlap_sweeper,
                       &o[i]),
        0);
  }
  for (int i = 0; i < 4; i++) pthread_join(th[i], NULL);
  for (int i = 0; i < 4; i++) ck_assert_int_eq(o[i].failures, 0);
  for (int i = 0; i < 3; i++) {
    attn_session_info info;
    ck_assert_int_eq(attn_session_info_get(s[i], 0, &info, &d), ATTN_OK);
    ck_assert_int_eq(info.length[0], 120);
    attn_session_info_clear(&info);
    attn_session_put(s[i]);
  }
  attn_session_stats ss;
  attn_session_store_stats(st, &ss);
  ck_assert_uint_eq(ss.tokens_total, 360);
  attn_session_store_destroy(st);
}
END_TEST

Suite *session_suite(void) {
  Suite *s = suite_create("session");
  TCase *tc = tcase_create("session");
  tcase_add_test(tc, session_spec_checks);
  tcase_add_test(tc, session_create_idempotent);
  tcase_add_test(tc, session_owners_and_limits);
  tcase_add_loop_test(tc, session_steps_match_reference, 0, (int)NCASES);
  tcase_add_test(tc, session_prefill_one_or_many);
  tcase_add_test(tc, session_bitwise_in_any_batch);
  tcase_add_test(tc, session_checks_of_a_step);
  tcase_add_test(tc, session_encode_fast_like_reference);
  tcase_add_test(tc, session_pool_full_all_or_nothing);
  tcase_add_test(tc, session_position_and_retry);
  tcase_add_test(tc, session_fork_copy_on_write);
  tcase_add_test(tc, session_truncate_then_append);
  tcase_add_test(tc, session_weights);
  tcase_add_test(tc, session_sweep_expires_the_idle);
  tcase_add_test(tc, session_delete_while_held);
  tcase_add_loop_test(tc, session_export_import_bitwise, 0, (int)NCASES);
  tcase_add_test(tc, session_export_idle_skips_a_held_session);
  tcase_add_test(tc, session_each_visits_all);
  tcase_add_test(tc, session_threads);
  tcase_add_test(tc, session_threads_overlapping_batches);
  suite_add_tcase(s, tc);
  return s;
}
