/* test_model.c - the model layer: built-in sdpa and mha against the engine's
 * double-precision reference kernels, resident models loaded from files this
 * test writes (safetensors weights with known values, seeded weights), and
 * every client mistake with the substring its message must contain.
 *
 * Requests are built by hand as a codec would leave them (float inputs FP32,
 * BOOL as uint8, key_lengths INT32/INT64); expected values come from
 * attn_ref_sdpa / attn_ref_mha on problems built here independently of the
 * model code. */
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "attn/limits.h"
#include "attn/model.h"
#include "unit.h"

/* The built-in models every registry has: sdpa, mha, kv_attention. */
#define N_BUILTIN 3

/* ---- helpers ------------------------------------------------------------- */

static uint64_t rng_state;

static float frand(void) {
  rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
  return (float)((double)(rng_state >> 40) / 16777216.0 * 2.0 - 1.0);
}

static float *rnd(size_t n) {
  float *f = malloc(n * sizeof *f);
  ck_assert_ptr_nonnull(f);
  for (size_t i = 0; i < n; i++) f[i] = frand();
  return f;
}

static size_t numel(int rank, const int64_t *shape) {
  size_t n = 1;
  for (int i = 0; i < rank; i++) n *= (size_t)shape[i];
  return n;
}

static void rq_init(attn_infer_request *r) {
  memset(r, 0, sizeof *r);
  r->binary_data_output = -1;
  r->timeout_us = -1;
}

/* Adds an input holding a copy of data. */
static void add_in(attn_infer_request *r, const char *name, attn_dtype dt,
                   int rank, const int64_t *shape, const void *data) {
  r->inputs = realloc(r->inputs, (r->n_inputs + 1) * sizeof *r->inputs);
  ck_assert_ptr_nonnull(r->inputs);
  attn_infer_input *x = &r->inputs[r->n_inputs++];
  memset(x, 0, sizeof *x);
  x->name = strdup(name);
  x->wire_dtype = dt;
  x->tensor.dtype = dt;
  x->tensor.rank = rank;
  memcpy(x->tensor.shape, shape, (size_t)rank * sizeof *shape);
  size_t bytes = numel(rank, shape) * attn_dtype_size(dt);
  x->tensor.data = malloc(bytes ? bytes : 1);
  if (bytes) memcpy(x->tensor.data, data, bytes);
  x->tensor.owns = true;
}

static attn_param *add_p(attn_infer_request *r, const char *name,
                         attn_param_type t) {
  r->params = realloc(r->params, (r->n_params + 1) * sizeof *r->params);
  ck_assert_ptr_nonnull(r->params);
  attn_param *p = &r->params[r->n_params++];
  memset(p, 0, sizeof *p);
  p->name = strdup(name);
  p->type = t;
  return p;
}
static void add_pb(attn_infer_request *r, const char *n, bool v) {
  add_p(r, n, ATTN_PARAM_BOOL)->b = v;
}
static void add_pi(attn_infer_request *r, const char *n, int64_t v) {
  add_p(r, n, ATTN_PARAM_INT)->i = v;
}
static void add_pd(attn_infer_request *r, const char *n, double v) {
  add_p(r, n, ATTN_PARAM_DOUBLE)->d = v;
}
static void add_ps(attn_infer_request *r, const char *n, const char *v) {
  add_p(r, n, ATTN_PARAM_STRING)->s = strdup(v);
}

static void add_out(attn_infer_request *r, const char *name, int binary) {
  r->outputs_given = true;
  r->outputs = realloc(r->outputs, (r->n_outputs + 1) * sizeof *r->outputs);
  ck_assert_ptr_nonnull(r->outputs);
  r->outputs[r->n_outputs].name = strdup(name);
  r->outputs[r->n_outputs].datatype = ATTN_DT_INVALID; /* not said: FP32 */
  r->outputs[r->n_outputs++].binary = binary;
}

static const attn_infer_output *out_named(const attn_infer_response *r,
                                          const char *name) {
  for (size_t i = 0; i < r->n_outputs; i++)
    if (strcmp(r->outputs[i].name, name) == 0) return &r->outputs[i];
  return NULL;
}

static void check_shape(const attn_tensor *t, int rank, const int64_t *want) {
  ck_assert_int_eq(t->rank, rank);
  for (int i = 0; i < rank; i++)
    ck_assert_msg(t->shape[i] == want[i], "dim %d is %lld, want %lld", i,
                  (long long)t->shape[i], (long long)want[i]);
}

static void check_close(const float *got, const double *ref, size_t n,
                        const char *what) {
  for (size_t i = 0; i < n; i++)
    ck_assert_msg(fabs((double)got[i] - ref[i]) <= 1e-5 * (1.0 + fabs(ref[i])),
                  "%s[%zu] = %.9g, reference %.9g", what, i, (double)got[i],
                  ref[i]);
}

static attn_registry *builtins(void) {
  attn_registry *reg = NULL;
  attn_diag d = {{0}};
  ck_assert_int_eq(attn_registry_create(NULL, &reg, &d), ATTN_OK);
  return reg;
}

/* Runs req on model `name` and expects failure with status s and `sub` in the
 * message; the response must stay empty. */
static void expect_err(const attn_registry *reg, const char *name,
                       const attn_infer_request *req,
                       const attn_model_limits *lim, attn_status s,
                       const char *sub) {
  attn_infer_response resp;
  attn_diag d = {{0}};
  memset(&resp, 0xff, sizeof resp);
  const attn_model *m = attn_registry_find(reg, name, NULL);
  ck_assert_ptr_nonnull(m);
  attn_status got = attn_model_infer(m, req, lim, NULL, &resp, &d);
  ck_assert_msg(got == s, "status %s, want %s (%s)", attn_status_name(got),
                attn_status_name(s), d.msg);
  ck_assert_msg(strstr(d.msg, sub) != NULL, "'%s' not in '%s'", sub, d.msg);
  ck_assert_ptr_null(resp.outputs);
  ck_assert_ptr_null(resp.model_name);
  ck_assert_uint_eq(resp.n_outputs, 0);
}

/* ---- sdpa against the reference --------------------------------------------
 */

typedef struct sdpa_case {
  int rank;
  int64_t B, H, Hkv, Lq, Lk, Dk, Dv;
  bool causal, avg, has_scale;
  double scale;
  int mask; /* 0 none, 1 BOOL [Lq,Lk], 2 FP32 [B,1,Lq,Lk], 3 BOOL [B*H,Lq,Lk] */
  int kpm;  /* 0 none, 1 BOOL [B,Lk], 2 INT32 lengths, 3 INT64, 4 BOOL [Lk] */
} sdpa_case;

static void run_sdpa(const sdpa_case *c) {
  const int r = c->rank;
  const int64_t B = c->B, H = c->H, Hkv = c->Hkv, Lq = c->Lq, Lk = c->Lk;
  const int64_t Dk = c->Dk, Dv = c->Dv;
  int64_t qs[4], ks[4], vs[4];
  /* shapes without the omitted leading dims */
  const int64_t q4[4] = {B, H, Lq, Dk}, k4[4] = {B, Hkv, Lk, Dk},
                v4[4] = {B, Hkv, Lk, Dv};
  for (int i = 0; i < r; i++) {
    qs[i] = q4[4 - r + i];
    ks[i] = k4[4 - r + i];
    vs[i] = v4[4 - r + i];
  }
  float *q = rnd(numel(4, q4)), *k = rnd(numel(4, k4)), *v = rnd(numel(4, v4));
  attn_infer_request req;
  rq_init(&req);
  req.id = strdup("req-7");
  add_in(&req, "query", ATTN_DT_FP32, r, qs, q);
  add_in(&req, "key", ATTN_DT_FP32, r, ks, k);
  add_in(&req, "value", ATTN_DT_FP32, r, vs, v);

  attn_sdpa_problem p;
  memset(&p, 0, sizeof p);
  p.B = B, p.H = H, p.Hkv = Hkv, p.Lq = Lq, p.Lk = Lk, p.Dk = Dk, p.Dv = Dv;
  p.q = (attn_view){q, H * Lq * Dk, Lq * Dk, Dk};
  p.k = (attn_view){k, Hkv * Lk * Dk, Lk * Dk, Dk};
  p.v = (attn_view){v, Hkv * Lk * Dv, Lk * Dv, Dv};
  p.o.causal = c->causal;
  if (c->causal) add_pb(&req, "causal", true);
  if (c->has_scale) {
    p.o.has_scale = 1;
    p.o.scale = (float)c->scale;
    add_pd(&req, "scale", c->scale);
  }
  p.o.weights = c->avg ? ATTN_WEIGHTS_MEAN : ATTN_WEIGHTS_PER_HEAD;
  if (c->avg) add_pb(&req, "average_attn_weights", true);

  uint8_t *bm = NULL;
  float *fm = NULL;
  if (c->mask == 1 || c->mask == 3) {
    int64_t n = c->mask == 1 ? 1 : B * H;
    bm = malloc((size_t)(n * Lq * Lk));
    for (int64_t i = 0; i < n * Lq * Lk; i++) bm[i] = frand() > 0.3f;
    p.o.mask = (attn_mask){ATTN_MASK_BOOL, bm, c->mask == 1 ? 1 : B,
                           c->mask == 1 ? 1 : H};
    if (c->mask == 1)
      add_in(&req, "attn_mask", ATTN_DT_BOOL, 2, (int64_t[]){Lq, Lk}, bm);
    else
      add_in(&req, "attn_mask", ATTN_DT_BOOL, 3, (int64_t[]){B * H, Lq, Lk},
             bm);
  } else if (c->mask == 2) {
    fm = rnd((size_t)(B * Lq * Lk));
    fm[1] = -INFINITY;
    p.o.mask = (attn_mask){ATTN_MASK_ADD, fm, B, 1};
    add_in(&req, "attn_mask", ATTN_DT_FP32, 4, (int64_t[]){B, 1, Lq, Lk}, fm);
  }
  uint8_t *pad = NULL;
  int64_t *len64 = NULL;
  if (c->kpm == 1 || c->kpm == 4) {
    pad = calloc((size_t)(B * Lk), 1);
    for (int64_t b = 0; b < B; b++) pad[b * Lk + Lk - 1 - b % Lk] = 1;
    p.o.kpm = (attn_key_padding){ATTN_KPM_BOOL, pad, NULL};
    if (c->kpm == 1)
      add_in(&req, "key_padding_mask", ATTN_DT_BOOL, 2, (int64_t[]){B, Lk},
             pad);
    else
      add_in(&req, "key_padding_mask", ATTN_DT_BOOL, 1, (int64_t[]){Lk}, pad);
  } else if (c->kpm == 2 || c->kpm == 3) {
    len64 = malloc((size_t)B * sizeof *len64);
    int32_t *len32 = malloc((size_t)B * sizeof *len32);
    for (int64_t b = 0; b < B; b++)
      len64[b] = len32[b] = (int32_t)((b * 3) % (Lk + 1));
    p.o.kpm = (attn_key_padding){ATTN_KPM_LENGTHS, NULL, len64};
    if (c->kpm == 2)
      add_in(&req, "key_lengths", ATTN_DT_INT32, 1, (int64_t[]){B}, len32);
    else
      add_in(&req, "key_lengths", ATTN_DT_INT64, 1, (int64_t[]){B}, len64);
    free(len32);
  }

  size_t on = (size_t)(B * H * Lq * Dv);
  size_t wn = (size_t)(B * (c->avg ? 1 : H) * Lq * Lk);
  double *ro = malloc(on * sizeof *ro), *rw = malloc(wn * sizeof *rw);
  attn_diag d = {{0}};
  ck_assert_msg(attn_ref_sdpa(&p, ro, rw, &d) == ATTN_OK, "%s", d.msg);

  attn_registry *reg = builtins();
  const attn_model *m = attn_registry_find(reg, "sdpa", NULL);
  attn_infer_response resp;
  memset(&resp, 0, sizeof resp);
  attn_exec x = {.threads = 2, .path = ATTN_PATH_AUTO};
  ck_assert_msg(attn_model_infer(m, &req, NULL, &x, &resp, &d) == ATTN_OK, "%s",
                d.msg);
  ck_assert_str_eq(resp.model_name, "sdpa");
  ck_assert_str_eq(resp.model_version, "1");
  ck_assert_str_eq(resp.id, "req-7");
  ck_assert_uint_eq(resp.n_outputs, 2);
  ck_assert_str_eq(resp.outputs[0].name, "attn_output");
  ck_assert_str_eq(resp.outputs[1].name, "attn_weights");
  const attn_tensor *o = &resp.outputs[0].tensor, *w = &resp.outputs[1].tensor;
  ck_assert_int_eq(o->dtype, ATTN_DT_FP32);
  ck_assert(!resp.outputs[0].binary);
  int64_t os[4], ws[4];
  memcpy(os, qs, sizeof os);
  os[r - 1] = Dv;
  int wr = r;
  memcpy(ws, qs, sizeof ws);
  ws[r - 1] = Lk;
  if (c->avg && r >= 3) { /* H dropped */
    wr = r - 1;
    ws[r - 3] = Lq;
    ws[r - 2] = Lk;
  }
  check_shape(o, r, os);
  check_shape(w, wr, ws);
  check_close(o->data, ro, on, "attn_output");
  check_close(w->data, rw, wn, "attn_weights");

  /* Same request, same bits. */
  attn_infer_response again;
  ck_assert_int_eq(attn_model_infer(m, &req, NULL, &x, &again, &d), ATTN_OK);
  ck_assert_mem_eq(again.outputs[0].tensor.data, o->data, on * sizeof(float));
  ck_assert_mem_eq(again.outputs[1].tensor.data, w->data, wn * sizeof(float));
  attn_infer_response_free(&again);
  /* Without weights (the engine may take its streaming path): same output
   * within tolerance, one output only. */
  add_pb(&req, "need_weights", false);
  ck_assert_int_eq(attn_model_infer(m, &req, NULL, &x, &again, &d), ATTN_OK);
  ck_assert_uint_eq(again.n_outputs, 1);
  check_close(again.outputs[0].tensor.data, ro, on, "attn_output (no weights)");
  attn_infer_response_free(&again);

  attn_infer_response_free(&resp);
  attn_infer_request_free(&req);
  attn_registry_destroy(reg);
  free(q), free(k), free(v), free(bm), free(fm), free(pad), free(len64);
  free(ro), free(rw);
}

START_TEST(sdpa_rank4_gqa) {
  rng_state = 1;
  run_sdpa(&(sdpa_case){
      .rank = 4, .B = 2, .H = 4, .Hkv = 2, .Lq = 5, .Lk = 7, .Dk = 8, .Dv = 6});
  run_sdpa(&(sdpa_case){.rank = 4,
                        .B = 3,
                        .H = 2,
                        .Hkv = 1,
                        .Lq = 4,
                        .Lk = 9,
                        .Dk = 5,
                        .Dv = 3,
                        .avg = true,
                        .causal = true});
}
END_TEST

START_TEST(sdpa_rank3_rank2) {
  rng_state = 2;
  run_sdpa(&(sdpa_case){.rank = 3,
                        .B = 1,
                        .H = 3,
                        .Hkv = 3,
                        .Lq = 6,
                        .Lk = 6,
                        .Dk = 4,
                        .Dv = 4,
                        .causal = true});
  run_sdpa(&(sdpa_case){.rank = 3,
                        .B = 1,
                        .H = 4,
                        .Hkv = 2,
                        .Lq = 3,
                        .Lk = 5,
                        .Dk = 4,
                        .Dv = 2,
                        .avg = true});
  run_sdpa(&(sdpa_case){.rank = 2,
                        .B = 1,
                        .H = 1,
                        .Hkv = 1,
                        .Lq = 7,
                        .Lk = 4,
                        .Dk = 3,
                        .Dv = 5,
                        .has_scale = true,
                        .scale = 0.3});
  run_sdpa(&(sdpa_case){.rank = 2,
                        .B = 1,
                        .H = 1,
                        .Hkv = 1,
                        .Lq = 2,
                        .Lk = 3,
                        .Dk = 3,
                        .Dv = 1,
                        .avg = true});
}
END_TEST

START_TEST(sdpa_masks) {
  rng_state = 3;
  run_sdpa(&(sdpa_case){.rank = 4,
                        .B = 2,
                        .H = 2,
                        .Hkv = 2,
                        .Lq = 4,
                        .Lk = 6,
                        .Dk = 4,
                        .Dv = 4,
                        .mask = 1,
                        .kpm = 1});
  run_sdpa(&(sdpa_case){.rank = 4,
                        .B = 2,
                        .H = 2,
                        .Hkv = 1,
                        .Lq = 4,
                        .Lk = 6,
                        .Dk = 4,
                        .Dv = 4,
                        .mask = 2,
                        .kpm = 2});
  run_sdpa(&(sdpa_case){.rank = 4,
                        .B = 3,
                        .H = 2,
                        .Hkv = 2,
                        .Lq = 3,
                        .Lk = 5,
                        .Dk = 2,
                        .Dv = 3,
                        .mask = 3,
                        .kpm = 3,
                        .causal = true});
  run_sdpa(&(sdpa_case){.rank = 3,
                        .B = 1,
                        .H = 2,
                        .Hkv = 2,
                        .Lq = 3,
                        .Lk = 5,
                        .Dk = 2,
                        .Dv = 3,
                        .mask = 3,
                        .kpm = 4});
  run_sdpa(&(sdpa_case){.rank = 2,
                        .B = 1,
                        .H = 1,
                        .Hkv = 1,
                        .Lq = 3,
                        .Lk = 5,
                        .Dk = 2,
                        .Dv = 3,
                        .mask = 1,
                        .kpm = 3});
}
END_TEST

/* ---- mha against the reference ----------------------------------------------
 */

typedef struct mha_case {
  bool batched;
  int64_t B, Lq, Lk, E, H, Hkv, kdim, vdim;
  int kv; /* 0 self-attention, 1 key only (value = key), 2 key and value */
  bool bias, causal, avg, kv_param, kpm;
} mha_case;

static void run_mha(const mha_case *c) {
  const int64_t B = c->B, Lq = c->Lq, E = c->E, H = c->H, Hkv = c->Hkv;
  const int64_t Lk = c->kv ? c->Lk : Lq, kdim = c->kv ? c->kdim : E;
  const int64_t vdim = c->kv == 2 ? c->vdim : kdim, kw = Hkv * (E / H);
  const int r = c->batched ? 3 : 2;
  float *xq = rnd((size_t)(B * Lq * E)), *xk = rnd((size_t)(B * Lk * kdim)),
        *xv = rnd((size_t)(B * Lk * vdim));
  float *wq = rnd((size_t)(E * E)), *wk = rnd((size_t)(kdim * kw)),
        *wv = rnd((size_t)(vdim * kw)), *wo = rnd((size_t)(E * E));
  float *bq = rnd((size_t)E), *bk = rnd((size_t)kw), *bv = rnd((size_t)kw),
        *bo = rnd((size_t)E);
  uint8_t *pad = calloc((size_t)(B * Lk), 1);
  pad[Lk - 1] = 1;

  attn_infer_request req;
  rq_init(&req);
  int64_t sq[3] = {B, Lq, E}, sk[3] = {B, Lk, kdim}, sv[3] = {B, Lk, vdim};
  const int off = c->batched ? 0 : 1;
  add_in(&req, "query", ATTN_DT_FP32, r, sq + off, xq);
  if (c->kv >= 1) add_in(&req, "key", ATTN_DT_FP32, r, sk + off, xk);
  if (c->kv == 2) add_in(&req, "value", ATTN_DT_FP32, r, sv + off, xv);
  add_in(&req, "w_q", ATTN_DT_FP32, 2, (int64_t[]){E, E}, wq);
  add_in(&req, "w_k", ATTN_DT_FP32, 2, (int64_t[]){kdim, kw}, wk);
  add_in(&req, "w_v", ATTN_DT_FP32, 2, (int64_t[]){vdim, kw}, wv);
  add_in(&req, "w_o", ATTN_DT_FP32, 2, (int64_t[]){E, E}, wo);
  if (c->bias) {
    add_in(&req, "b_q", ATTN_DT_FP32, 1, &E, bq);
    add_in(&req, "b_k", ATTN_DT_FP32, 1, &kw, bk);
    add_in(&req, "b_v", ATTN_DT_FP32, 1, &kw, bv);
    add_in(&req, "b_o", ATTN_DT_FP32, 1, &E, bo);
  }
  if (c->kpm)
    add_in(&req, "key_padding_mask", ATTN_DT_BOOL, c->batched ? 2 : 1,
           c->batched ? (int64_t[]){B, Lk} : (int64_t[]){Lk}, pad);
  add_pi(&req, "num_heads", H);
  if (c->kv_param) add_pd(&req, "num_kv_heads", (double)Hkv); /* 2.0 is ok */
  if (c->causal) add_pb(&req, "causal", true);
  if (c->avg) add_pb(&req, "average_attn_weights", true);

  attn_mha_problem p;
  memset(&p, 0, sizeof p);
  p.B = B, p.Lq = Lq, p.Lk = Lk, p.E = E, p.H = H, p.Hkv = Hkv;
  p.kdim = kdim, p.vdim = vdim;
  p.xq = xq;
  p.xk = c->kv ? xk : NULL;
  p.xv = c->kv == 2 ? xv : NULL;
  p.wq = (attn_weight){wq, ATTN_W_IN_OUT, 0, NULL};
  p.wk = (attn_weight){wk, ATTN_W_IN_OUT, 0, NULL};
  p.wv = (attn_weight){wv, ATTN_W_IN_OUT, 0, NULL};
  p.wo = (attn_weight){wo, ATTN_W_IN_OUT, 0, NULL};
  if (c->bias) p.bq = bq, p.bk = bk, p.bv = bv, p.bo = bo;
  p.o.causal = c->causal;
  p.o.weights = c->avg ? ATTN_WEIGHTS_MEAN : ATTN_WEIGHTS_PER_HEAD;
  if (c->kpm) p.o.kpm = (attn_key_padding){ATTN_KPM_BOOL, pad, NULL};
  size_t on = (size_t)(B * Lq * E),
         wn = (size_t)(B * (c->avg ? 1 : H) * Lq * Lk);
  double *ro = malloc(on * sizeof *ro), *rw = malloc(wn * sizeof *rw);
  attn_diag d = {{0}};
  ck_assert_msg(attn_ref_mha(&p, ro, rw, &d) == ATTN_OK, "%s", d.msg);

  attn_registry *reg = builtins();
  attn_infer_response resp;
  ck_assert_msg(attn_model_infer(attn_registry_find(reg, "mha", "1"), &req,
                                 NULL, NULL, &resp, &d) == ATTN_OK,
                "%s", d.msg);
  ck_assert_str_eq(resp.model_name, "mha");
  ck_assert_ptr_null(resp.id);
  const attn_infer_output *o = out_named(&resp, "attn_output"),
                          *w = out_named(&resp, "attn_weights");
  ck_assert_ptr_nonnull(o);
  ck_assert_ptr_nonnull(w);
  check_shape(&o->tensor, r, sq + off);
  int64_t ws[4] = {B, H, Lq, Lk};
  if (c->avg) ws[1] = Lq, ws[2] = Lk;
  check_shape(&w->tensor, (c->avg ? 3 : 4) - off, ws + off);
  check_close(o->tensor.data, ro, on, "attn_output");
  check_close(w->tensor.data, rw, wn, "attn_weights");
  attn_infer_response_free(&resp);
  attn_infer_request_free(&req);
  attn_registry_destroy(reg);
  free(xq), free(xk), free(xv), free(wq), free(wk), free(wv), free(wo);
  free(bq), free(bk), free(bv), free(bo), free(pad), free(ro), free(rw);
}

START_TEST(mha_self_and_cross) {
  rng_state = 4;
  run_mha(&(mha_case){.batched = true,
                      .B = 2,
                      .Lq = 5,
                      .E = 8,
                      .H = 2,
                      .Hkv = 2,
                      .bias = true,
                      .causal = true});
  run_mha(&(mha_case){.batched = false,
                      .B = 1,
                      .Lq = 4,
                      .E = 12,
                      .H = 3,
                      .Hkv = 3,
                      .avg = true,
                      .kpm = true});
  run_mha(&(mha_case){.batched = true,
                      .B = 2,
                      .Lq = 3,
                      .Lk = 6,
                      .E = 8,
                      .H = 4,
                      .Hkv = 4,
                      .kdim = 5,
                      .vdim = 7,
                      .kv = 2,
                      .bias = true,
                      .kpm = true});
  run_mha(&(mha_case){.batched = true,
                      .B = 1,
                      .Lq = 3,
                      .Lk = 4,
                      .E = 6,
                      .H = 2,
                      .Hkv = 2,
                      .kdim = 3,
                      .kv = 1});
}
END_TEST

START_TEST(mha_gqa) {
  rng_state = 5;
  run_mha(&(mha_case){.batched = true,
                      .B = 2,
                      .Lq = 4,
                      .E = 16,
                      .H = 4,
                      .Hkv = 2,
                      .bias = true,
                      .kv_param = true});
  run_mha(&(mha_case){.batched = false,
                      .B = 1,
                      .Lq = 3,
                      .Lk = 5,
                      .E = 12,
                      .H = 6,
                      .Hkv = 1,
                      .kdim = 4,
                      .vdim = 9,
                      .kv = 2,
                      .kv_param = true,
                      .avg = true});
}
END_TEST

/* ---- resident models --------------------------------------------------------
 */

static char tmpdir[64];

static void mk_tmpdir(void) {
  snprintf(tmpdir, sizeof tmpdir, "/tmp/attn_model_XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(tmpdir));
}

static void rm_tmpdir(void) {
  DIR *dp = opendir(tmpdir);
  if (!dp) return;
  struct dirent *e;
  char path[512];
  while ((e = readdir(dp)) != NULL) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
    snprintf(path, sizeof path, "%s/%s", tmpdir, e->d_name);
    unlink(path);
  }
  closedir(dp);
  rmdir(tmpdir);
}

static void write_file(const char *name, const void *p, size_t n) {
  char path[512];
  snprintf(path, sizeof path, "%s/%s", tmpdir, name);
  FILE *f = fopen(path, "wb");
  ck_assert_ptr_nonnull(f);
  ck_assert_uint_eq(fwrite(p, 1, n, f), n);
  fclose(f);
}

static void write_text(const char *name, const char *text) {
  write_file(name, text, strlen(text));
}

typedef struct st_tensor {
  const char *name;
  int rank;
  int64_t shape[2];
  const float *data;
} st_tensor;

/* An F32 safetensors file of the given tensors, in order. */
static void write_st(const char *name, const st_tensor *t, size_t n) {
  char hdr[4096];
  size_t at = 0, off = 0;
  at += (size_t)snprintf(hdr + at, sizeof hdr - at,
                         "{\"__metadata__\":{\"format\":\"pt\"}");
  for (size_t i = 0; i < n; i++) {
    size_t bytes = numel(t[i].rank, t[i].shape) * 4;
    if (t[i].rank == 1)
      at += (size_t)snprintf(hdr + at, sizeof hdr - at,
                             ",\"%s\":{\"dtype\":\"F32\",\"shape\":[%lld],"
                             "\"data_offsets\":[%zu,%zu]}",
                             t[i].name, (long long)t[i].shape[0], off,
                             off + bytes);
    else
      at += (size_t)snprintf(hdr + at, sizeof hdr - at,
                             ",\"%s\":{\"dtype\":\"F32\",\"shape\":[%lld,%lld],"
                             "\"data_offsets\":[%zu,%zu]}",
                             t[i].name, (long long)t[i].shape[0],
                             (long long)t[i].shape[1], off, off + bytes);
    off += bytes;
  }
  at += (size_t)snprintf(hdr + at, sizeof hdr - at, "}");
  ck_assert_uint_lt(at, sizeof hdr);
  size_t total = 8 + at + off;
  unsigned char *buf = malloc(total);
  for (int i = 0; i < 8; i++) buf[i] = (unsigned char)((uint64_t)at >> (8 * i));
  memcpy(buf + 8, hdr, at);
  size_t pos = 8 + at;
  for (size_t i = 0; i < n; i++) {
    size_t bytes = numel(t[i].rank, t[i].shape) * 4;
    memcpy(buf + pos, t[i].data, bytes);
    pos += bytes;
  }
  write_file(name, buf, total);
  free(buf);
}

/* Packed PyTorch layout: in_proj_weight [3E,E], in_proj_bias [3E],
 * out_proj.weight [E,E], out_proj.bias [E]. */
START_TEST(resident_packed) {
  rng_state = 6;
  mk_tmpdir();
  const int64_t E = 8, H = 2, B = 2, L = 5;
  float *in_w = rnd((size_t)(3 * E * E)), *in_b = rnd((size_t)(3 * E)),
        *out_w = rnd((size_t)(E * E)), *out_b = rnd((size_t)E);
  st_tensor ts[] = {{"in_proj_weight", 2, {3 * E, E}, in_w},
                    {"in_proj_bias", 1, {3 * E, 0}, in_b},
                    {"out_proj.weight", 2, {E, E}, out_w},
                    {"out_proj.bias", 1, {E, 0}, out_b}};
  write_st("tiny.safetensors", ts, 4);
  write_text("tiny.json",
             "{\"name\": \"tiny\", \"embed_dim\": 8, \"num_heads\": 2, "
             "\"weights\": \"tiny.safetensors\", \"description\": \"t\", "
             "\"version\": 3}");
  write_text("README.txt", "not a model");

  attn_registry *reg = NULL;
  attn_diag d = {{0}};
  ck_assert_msg(attn_registry_create(tmpdir, &reg, &d) == ATTN_OK, "%s", d.msg);
  ck_assert_uint_eq(attn_registry_count(reg), N_BUILTIN + 1);
  ck_assert_str_eq(attn_model_name(attn_registry_at(reg, 0)), "sdpa");
  ck_assert_str_eq(attn_model_name(attn_registry_at(reg, 1)), "mha");
  ck_assert_str_eq(attn_model_name(attn_registry_at(reg, 2)), "kv_attention");
  const attn_model *m = attn_registry_at(reg, N_BUILTIN);
  ck_assert_str_eq(attn_model_name(m), "tiny");
  ck_assert_str_eq(attn_model_version(m), "3");
  ck_assert_ptr_eq(attn_registry_find(reg, "tiny", "3"), m);
  ck_assert_ptr_eq(attn_registry_find(reg, "tiny", ""), m);
  ck_assert_ptr_null(attn_registry_find(reg, "tiny", "1"));
  ck_assert_ptr_null(attn_registry_find(reg, "nope", NULL));
  attn_model_info info;
  attn_model_info_get(m, &info);
  ck_assert_str_eq(info.kind, "resident");
  ck_assert_str_eq(info.description, "t");
  ck_assert_int_eq(info.embed_dim, 8);
  ck_assert_int_eq(info.num_kv_heads, 2);
  ck_assert(info.bias && !info.seeded);
  size_t n;
  const attn_model_io *ins = attn_model_inputs(m, &n);
  ck_assert_uint_eq(n, 7);
  ck_assert_str_eq(ins[0].name, "query");
  ck_assert_int_eq(ins[0].rank, 3);
  ck_assert_int_eq(ins[0].shape[0], -1);
  ck_assert_int_eq(ins[0].shape[2], 8);
  ck_assert(!ins[0].optional && ins[1].optional);
  const attn_model_io *outs = attn_model_outputs(m, &n);
  ck_assert_uint_eq(n, 2);
  ck_assert_int_eq(outs[1].shape[1], 2);

  float *x = rnd((size_t)(B * L * E));
  attn_infer_request req;
  rq_init(&req);
  add_in(&req, "query", ATTN_DT_FP32, 3, (int64_t[]){B, L, E}, x);
  add_pi(&req, "num_heads", 2);
  add_pb(&req, "causal", true);
  attn_infer_response resp;
  ck_assert_msg(attn_model_infer(m, &req, NULL, NULL, &resp, &d) == ATTN_OK,
                "%s", d.msg);
  ck_assert_str_eq(resp.model_name, "tiny");
  ck_assert_str_eq(resp.model_version, "3");

  attn_mha_problem p;
  memset(&p, 0, sizeof p);
  p.B = B, p.Lq = p.Lk = L, p.E = E, p.H = p.Hkv = H, p.kdim = p.vdim = E;
  p.xq = x;
  p.wq = (attn_weight){in_w, ATTN_W_OUT_IN, E, NULL};
  p.wk = (attn_weight){in_w + E * E, ATTN_W_OUT_IN, E, NULL};
  p.wv = (attn_weight){in_w + 2 * E * E, ATTN_W_OUT_IN, E, NULL};
  p.wo = (attn_weight){out_w, ATTN_W_OUT_IN, E, NULL};
  p.bq = in_b, p.bk = in_b + E, p.bv = in_b + 2 * E, p.bo = out_b;
  p.o.causal = 1;
  p.o.weights = ATTN_WEIGHTS_PER_HEAD;
  double ro[2 * 5 * 8], rw[2 * 2 * 5 * 5];
  ck_assert_int_eq(attn_ref_mha(&p, ro, rw, &d), ATTN_OK);
  check_close(out_named(&resp, "attn_output")->tensor.data, ro, B * L * E,
              "attn_output");
  check_close(out_named(&resp, "attn_weights")->tensor.data, rw, B * H * L * L,
              "attn_weights");
  attn_infer_response_free(&resp);

  /* num_heads must match the model */
  req.params[0].i = 4;
  expect_err(reg, "tiny", &req, NULL, ATTN_EINVAL, "'num_heads' is 4");
  req.params[0].i = 2;
  /* query width must be embed_dim */
  attn_infer_request bad;
  rq_init(&bad);
  add_in(&bad, "query", ATTN_DT_FP32, 2, (int64_t[]){5, 4}, x);
  expect_err(reg, "tiny", &bad, NULL, ATTN_ESHAPE, "embed_dim 8");
  attn_infer_request_free(&bad);
  /* weights are not inputs of a resident model */
  add_in(&req, "w_q", ATTN_DT_FP32, 2, (int64_t[]){E, E}, out_w);
  expect_err(reg, "tiny", &req, NULL, ATTN_EINVAL, "unknown input 'w_q'");

  attn_infer_request_free(&req);
  attn_registry_destroy(reg);
  free(in_w), free(in_b), free(out_w), free(out_b), free(x);
  rm_tmpdir();
}
END_TEST

/* Split layout with GQA and kdim/vdim != E, no bias. */
START_TEST(resident_split_gqa) {
  rng_state = 7;
  mk_tmpdir();
  const int64_t E = 12, H = 4, Hkv = 2, kw = Hkv * E / H, kdim = 5, vdim = 7;
  const int64_t B = 2, Lq = 3, Lk = 6;
  float *qw = rnd((size_t)(E * E)), *kwt = rnd((size_t)(kw * kdim)),
        *vw = rnd((size_t)(kw * vdim)), *ow = rnd((size_t)(E * E));
  st_tensor ts[] = {{"out_proj.weight", 2, {E, E}, ow},
                    {"q_proj_weight", 2, {E, E}, qw},
                    {"k_proj_weight", 2, {kw, kdim}, kwt},
                    {"v_proj_weight", 2, {kw, vdim}, vw}};
  write_st("g.safetensors", ts, 4);
  write_text("gqa.json",
             "{\"name\": \"gqa\", \"embed_dim\": 12, \"num_heads\": 4, "
             "\"num_kv_heads\": 2, \"kdim\": 5, \"vdim\": 7, \"bias\": false, "
             "\"weights\": \"g.safetensors\"}");
  attn_registry *reg = NULL;
  attn_diag d = {{0}};
  ck_assert_msg(attn_registry_create(tmpdir, &reg, &d) == ATTN_OK, "%s", d.msg);
  const attn_model *m = attn_registry_find(reg, "gqa", NULL);
  ck_assert_ptr_nonnull(m);
  ck_assert_str_eq(attn_model_version(m), "1");

  float *xq = rnd((size_t)(B * Lq * E)), *xk = rnd((size_t)(B * Lk * kdim)),
        *xv = rnd((size_t)(B * Lk * vdim));
  attn_infer_request req;
  rq_init(&req);
  add_in(&req, "query", ATTN_DT_FP32, 3, (int64_t[]){B, Lq, E}, xq);
  add_in(&req, "key", ATTN_DT_FP32, 3, (int64_t[]){B, Lk, kdim}, xk);
  add_in(&req, "value", ATTN_DT_FP32, 3, (int64_t[]){B, Lk, vdim}, xv);
  add_in(&req, "key_lengths", ATTN_DT_INT64, 1, (int64_t[]){B},
         (int64_t[]){4, 6});
  add_pb(&req, "average_attn_weights", true);
  attn_infer_response resp;
  ck_assert_msg(attn_model_infer(m, &req, NULL, NULL, &resp, &d) == ATTN_OK,
                "%s", d.msg);

  attn_mha_problem p;
  memset(&p, 0, sizeof p);
  p.B = B, p.Lq = Lq, p.Lk = Lk, p.E = E, p.H = H, p.Hkv = Hkv;
  p.kdim = kdim, p.vdim = vdim;
  p.xq = xq, p.xk = xk, p.xv = xv;
  p.wq = (attn_weight){qw, ATTN_W_OUT_IN, 0, NULL};
  p.wk = (attn_weight){kwt, ATTN_W_OUT_IN, 0, NULL};
  p.wv = (attn_weight){vw, ATTN_W_OUT_IN, 0, NULL};
  p.wo = (attn_weight){ow, ATTN_W_OUT_IN, 0, NULL};
  int64_t lens[2] = {4, 6};
  p.o.kpm = (attn_key_padding){ATTN_KPM_LENGTHS, NULL, lens};
  p.o.weights = ATTN_WEIGHTS_MEAN;
  double ro[2 * 3 * 12], rw[2 * 3 * 6];
  ck_assert_int_eq(attn_ref_mha(&p, ro, rw, &d), ATTN_OK);
  check_close(out_named(&resp, "attn_output")->tensor.data, ro, B * Lq * E,
              "attn_output");
  const attn_infer_output *w = out_named(&resp, "attn_weights");
  check_shape(&w->tensor, 3, (int64_t[]){B, Lq, Lk});
  check_close(w->tensor.data, rw, B * Lq * Lk, "attn_weights");
  attn_infer_response_free(&resp);

  /* without key the model's kdim cannot be met */
  attn_infer_request self;
  rq_init(&self);
  add_in(&self, "query", ATTN_DT_FP32, 3, (int64_t[]){B, Lq, E}, xq);
  expect_err(reg, "gqa", &self, NULL, ATTN_ESHAPE, "kdim 5");
  attn_infer_request_free(&self);

  attn_infer_request_free(&req);
  attn_registry_destroy(reg);
  free(qw), free(kwt), free(vw), free(ow), free(xq), free(xk), free(xv);
  rm_tmpdir();
}
END_TEST

START_TEST(resident_seeded) {
  mk_tmpdir();
  write_text("a.json",
             "{\"name\": \"demo\", \"embed_dim\": 16, \"num_heads\": 4, "
             "\"num_kv_heads\": 2, \"seed\": 1234}");
  write_text("b.json",
             "{\"name\": \"demo2\", \"embed_dim\": 16, \"num_heads\": 4, "
             "\"seed\": 1234, \"bias\": false}");
  attn_registry *r1 = NULL, *r2 = NULL;
  attn_diag d = {{0}};
  ck_assert_msg(attn_registry_create(tmpdir, &r1, &d) == ATTN_OK, "%s", d.msg);
  ck_assert_msg(attn_registry_create(tmpdir, &r2, &d) == ATTN_OK, "%s", d.msg);
  ck_assert_uint_eq(attn_registry_count(r1), N_BUILTIN + 2);
  attn_model_info info;
  attn_model_info_get(attn_registry_find(r1, "demo", NULL), &info);
  ck_assert(info.seeded);
  ck_assert_int_eq(info.num_kv_heads, 2);

  rng_state = 8;
  float *x = rnd(2 * 6 * 16);
  attn_infer_request req;
  rq_init(&req);
  add_in(&req, "query", ATTN_DT_FP32, 3, (int64_t[]){2, 6, 16}, x);
  req.binary_data_output = 1;
  attn_infer_response a, b;
  ck_assert_msg(attn_model_infer(attn_registry_find(r1, "demo", NULL), &req,
                                 NULL, NULL, &a, &d) == ATTN_OK,
                "%s", d.msg);
  ck_assert_int_eq(attn_model_infer(attn_registry_find(r2, "demo", NULL), &req,
                                    NULL, NULL, &b, &d),
                   ATTN_OK);
  ck_assert(a.outputs[0].binary && a.outputs[1].binary);
  ck_assert_mem_eq(a.outputs[0].tensor.data, b.outputs[0].tensor.data,
                   2 * 6 * 16 * sizeof(float));
  /* not all zero: the weights exist */
  const float *o = a.outputs[0].tensor.data;
  bool nonzero = false;
  for (int i = 0; i < 2 * 6 * 16; i++) nonzero |= o[i] != 0.0f;
  ck_assert(nonzero);
  attn_infer_response_free(&a);
  attn_infer_response_free(&b);
  ck_assert_int_eq(attn_model_infer(attn_registry_find(r1, "demo2", NULL), &req,
                                    NULL, NULL, &a, &d),
                   ATTN_OK);
  attn_infer_response_free(&a);
  attn_infer_request_free(&req);
  free(x);
  attn_registry_destroy(r1);
  attn_registry_destroy(r2);
  rm_tmpdir();
}
END_TEST

/* Registry creation failures: each names the file (and the key/tensor). */
static void expect_reg_err(const char *json, attn_status s, const char *sub) {
  mk_tmpdir();
  write_text("m.json", json);
  float w[3 * 4 * 4 + 4 * 4 + 3 * 4 + 4];
  for (size_t i = 0; i < sizeof w / sizeof w[0]; i++) w[i] = 0.01f * (float)i;
  st_tensor ok[] = {{"in_proj_weight", 2, {12, 4}, w},
                    {"out_proj.weight", 2, {4, 4}, w + 48},
                    {"in_proj_bias", 1, {12, 0}, w + 64},
                    {"out_proj.bias", 1, {4, 0}, w + 76}};
  write_st("ok.safetensors", ok, 4);
  write_st("nobias.safetensors", ok, 2);
  st_tensor badshape[] = {{"in_proj_weight", 2, {4, 12}, w},
                          {"out_proj.weight", 2, {4, 4}, w + 48}};
  write_st("badshape.safetensors", badshape, 2);
  st_tensor extra[] = {{"in_proj_weight", 2, {12, 4}, w},
                       {"out_proj.weight", 2, {4, 4}, w + 48},
                       {"bias_k", 1, {4, 0}, w + 64}};
  write_st("extra.safetensors", extra, 3);
  w[5] = NAN;
  write_st("nan.safetensors", ok, 2);
  write_file("trunc.safetensors", "\x40\0\0\0\0\0\0\0{\"a\":", 13);

  attn_registry *reg = (attn_registry *)1;
  attn_diag d = {{0}};
  attn_status got = attn_registry_create(tmpdir, &reg, &d);
  ck_assert_msg(got == s, "status %s, want %s (%s) for %s",
                attn_status_name(got), attn_status_name(s), d.msg, json);
  ck_assert_ptr_null(reg);
  ck_assert_msg(strstr(d.msg, sub) != NULL, "'%s' not in '%s'", sub, d.msg);
  ck_assert_msg(strstr(d.msg, ".json") || strstr(d.msg, ".safetensors"),
                "no file named in '%s'", d.msg);
  rm_tmpdir();
}

#define HDR "{\"name\": \"m\", \"embed_dim\": 4, \"num_heads\": 2, "
/* A model file's variant settings are checked at load like a request's,
 * in the file's own words (HDR: embed_dim 4, 2 heads: head dim 2). */
START_TEST(resident_variant_errors) {
  expect_reg_err(HDR "\"seed\": 1, \"causal\": true, \"window\": [1, 2]}",
                 ATTN_EINVAL, "m.json: 'window[1]' is 2 with 'causal' true");
  expect_reg_err(HDR "\"seed\": 1, \"window\": [1]}", ATTN_EINVAL,
                 "m.json: \"window\" must be [left, right]");
  expect_reg_err(HDR "\"seed\": 1, \"causal\": \"top\"}", ATTN_EINVAL,
                 "m.json: 'causal' must be true, false");
  expect_reg_err(HDR "\"seed\": 1, \"softcap\": 0}", ATTN_EINVAL,
                 "m.json: 'softcap' is 0: it must be > 0");
  expect_reg_err(HDR "\"seed\": 1, \"rotary\": {\"dims\": 4}}", ATTN_EINVAL,
                 "m.json: 'rotary.dims' is 4");
  expect_reg_err(HDR "\"seed\": 1, \"rotary\": {\"bass\": 4}}", ATTN_EINVAL,
                 "m.json: unknown key 'rotary.bass'");
  expect_reg_err(HDR "\"seed\": 1, \"alibi_slopes\": [1]}", ATTN_EINVAL,
                 "m.json: \"alibi_slopes\" must be a list of num_heads = 2");
  expect_reg_err(HDR
                 "\"seed\": 1, \"alibi\": true, \"alibi_slopes\": "
                 "[1, 2]}",
                 ATTN_EINVAL, "not both");
}
END_TEST

START_TEST(registry_errors) {
  expect_reg_err("{\"name\": \"m\", ", ATTN_EPARSE, "m.json: invalid JSON");
  expect_reg_err("[1]", ATTN_EPARSE, "not a JSON object");
  expect_reg_err(HDR "\"seed\": 1, \"colour\": 3}", ATTN_EINVAL,
                 "m.json: unknown key 'colour'");
  expect_reg_err(HDR "\"seed\": 1, \"seed\": 2}", ATTN_EINVAL, "twice");
  expect_reg_err("{\"embed_dim\": 4, \"num_heads\": 2, \"seed\": 1}",
                 ATTN_EINVAL, "missing required key 'name'");
  expect_reg_err(HDR "\"weights\": \"missing.safetensors\"}", ATTN_EIO,
                 "missing.safetensors");
  expect_reg_err(HDR "\"weights\": \"trunc.safetensors\"}", ATTN_EPARSE,
                 "trunc.safetensors");
  expect_reg_err(HDR "\"weights\": \"\"}", ATTN_EINVAL,
                 "m.json: \"weights\" is empty");
  char longw[ATTN_MODEL_MAX_WEIGHTS_PATH + 64];
  snprintf(longw, sizeof longw, HDR "\"weights\": \"%0*d\"}",
           ATTN_MODEL_MAX_WEIGHTS_PATH + 1, 0);
  char want[64];
  snprintf(want, sizeof want, "m.json: \"weights\" is a path of %d bytes",
           ATTN_MODEL_MAX_WEIGHTS_PATH + 1);
  expect_reg_err(longw, ATTN_EINVAL, want);
  expect_reg_err(HDR "\"seed\": 1, \"weights\": \"ok.safetensors\"}",
                 ATTN_EINVAL, "exactly one");
  expect_reg_err(HDR "\"bias\": true}", ATTN_EINVAL, "exactly one");
  expect_reg_err(
      "{\"name\": \"m\", \"embed_dim\": 5, \"num_heads\": 2, "
      "\"seed\": 1}",
      ATTN_EINVAL, "not divisible");
  expect_reg_err(HDR "\"num_kv_heads\": 3, \"seed\": 1}", ATTN_EINVAL,
                 "num_kv_heads 3");
  expect_reg_err(HDR "\"kdim\": 0, \"seed\": 1}", ATTN_EINVAL, "\"kdim\"");
  expect_reg_err(HDR "\"kdim\": \"4\", \"seed\": 1}", ATTN_EINVAL, "\"kdim\"");
  expect_reg_err(HDR "\"bias\": 1, \"seed\": 1}", ATTN_EINVAL, "\"bias\"");
  expect_reg_err(
      "{\"name\": \"a/b\", \"embed_dim\": 4, \"num_heads\": 2, "
      "\"seed\": 1}",
      ATTN_EINVAL, "\"name\"");
  expect_reg_err(
      "{\"name\": \"sdpa\", \"embed_dim\": 4, \"num_heads\": 2, "
      "\"seed\": 1}",
      ATTN_EINVAL, "built-in");
  expect_reg_err(
      "{\"name\": \"m\", \"embed_dim\": 16777216, \"num_heads\": "
      "2, \"seed\": 1}",
      ATTN_ETOOBIG, "parameters");
  expect_reg_err(HDR "\"weights\": \"nobias.safetensors\"}", ATTN_EINVAL,
                 "missing tensor 'in_proj_bias'");
  expect_reg_err(HDR "\"bias\": false, \"weights\": \"ok.safetensors\"}",
                 ATTN_EINVAL, "\"bias\": false");
  expect_reg_err(HDR "\"bias\": false, \"weights\": \"badshape.safetensors\"}",
                 ATTN_ESHAPE, "'in_proj_weight' has shape [4, 12]");
  expect_reg_err(HDR "\"bias\": false, \"weights\": \"extra.safetensors\"}",
                 ATTN_EINVAL, "unexpected tensor 'bias_k'");
  expect_reg_err(HDR "\"bias\": false, \"weights\": \"nan.safetensors\"}",
                 ATTN_ENONFINITE, "'in_proj_weight' element 5");
  expect_reg_err(HDR "\"num_kv_heads\": 1, \"weights\": \"ok.safetensors\"}",
                 ATTN_EINVAL, "'in_proj_weight' needs");
}
END_TEST

/* One [1, 2, 4] query through model m: its first output value. */
static float first_output(const attn_model *m) {
  float q[8] = {0.5f, -1, 0.25f, 2, -0.75f, 1, 0, 0.5f};
  attn_infer_request req;
  rq_init(&req);
  add_in(&req, "query", ATTN_DT_FP32, 3, (int64_t[]){1, 2, 4}, q);
  attn_infer_response resp;
  attn_diag d = {{0}};
  ck_assert_msg(attn_model_infer(m, &req, NULL, NULL, &resp, &d) == ATTN_OK,
                "%s", d.msg);
  float v = ((const float *)resp.outputs[0].tensor.data)[0];
  attn_infer_response_free(&resp);
  attn_infer_request_free(&req);
  return v;
}

static int reports;
static void count_report(void *arg, const char *name, const char *path,
                         attn_status s, const char *msg) {
  (void)arg, (void)name, (void)path, (void)msg;
  reports += s != ATTN_OK;
}

/* Load, unload, reload and the index: slots keep their names; a model
 * held (attn_registry_get) stays whole while a load replaces it and an
 * unload removes it; a failed load leaves the old model. */
/* model_name: NEW renames the only model, FROM=NEW the one named, for
 * loads and the index too; ambiguous, taken or unknown names refused.
 * The folder's stamp changes with a file added or rewritten. */
START_TEST(registry_model_name) {
  mk_tmpdir();
  write_text("a.json", HDR "\"seed\": 1}");
  attn_registry *r;
  attn_diag d = {{0}};
  const char *from, *to;
  ck_assert_int_eq(attn_registry_create_named(tmpdir, "isvc-a", &r, &d),
                   ATTN_OK);
  ck_assert_str_eq(attn_registry_slot_name(r, N_BUILTIN), "isvc-a");
  ck_assert_ptr_nonnull(attn_registry_find(r, "isvc-a", NULL));
  ck_assert_ptr_null(attn_registry_find(r, "m", NULL));
  attn_registry_renamed(r, &from, &to);
  ck_assert_str_eq(from, "m");
  ck_assert_str_eq(to, "isvc-a");
  ck_assert_int_eq(attn_registry_load(r, "isvc-a", &d, NULL), ATTN_OK);
  ck_assert_int_eq(attn_registry_load(r, "m", &d, NULL), ATTN_ENOTFOUND);
  ck_assert_msg(strstr(d.msg, "served as 'isvc-a'"), "%s", d.msg);
  attn_registry_entry *v;
  size_t n;
  ck_assert_int_eq(attn_registry_index(r, &v, &n, &d), ATTN_OK);
  ck_assert_uint_eq(n, N_BUILTIN + 1);
  ck_assert_str_eq(v[N_BUILTIN].name, "isvc-a");
  free(v);
  uint64_t s1 = attn_registry_dir_stamp(r);
  ck_assert_uint_ne(s1, 0);
  ck_assert_uint_eq(attn_registry_dir_stamp(r), s1);
  write_text("b.json",
             "{\"name\": \"other\", \"embed_dim\": 4, "
             "\"num_heads\": 2, \"seed\": 3}");
  ck_assert_uint_ne(attn_registry_dir_stamp(r), s1);
  attn_registry_destroy(r);

  static const struct {
    const char *value, *needle;
  } bad[] = {{"isvc", "which holds 2 (m, other)"},
             {"m=sdpa", "built-in"},
             {"m=other", "already names a model 'other'"},
             {"x=y", "has \"name\": \"x\""},
             {"=y", "write NEW or FROM=NEW"},
             {"m=.y", "write NEW or FROM=NEW"}};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    ck_assert_int_eq(attn_registry_create_named(tmpdir, bad[i].value, &r, &d),
                     ATTN_EINVAL);
    ck_assert_ptr_null(r);
    ck_assert_msg(strstr(d.msg, bad[i].needle), "%s: %s", bad[i].value, d.msg);
  }
  ck_assert_int_eq(attn_registry_create_named(tmpdir, "m=isvc", &r, &d),
                   ATTN_OK);
  ck_assert_ptr_nonnull(attn_registry_find(r, "isvc", NULL));
  ck_assert_ptr_nonnull(attn_registry_find(r, "other", NULL));
  attn_registry_destroy(r);
  rm_tmpdir();
}
END_TEST

START_TEST(registry_repository) {
  mk_tmpdir();
  write_text("a.json", HDR "\"seed\": 1}");
  attn_registry *r;
  attn_diag d = {{0}};
  ck_assert_int_eq(attn_registry_create(tmpdir, &r, &d), ATTN_OK);
  ck_assert_uint_eq(attn_registry_count(r), N_BUILTIN + 1);
  ck_assert_str_eq(attn_registry_slot_name(r, N_BUILTIN), "m");
  ck_assert_int_eq(attn_registry_slot(r, "m/ready", 1), N_BUILTIN);
  int slot;
  const attn_model *held = attn_registry_get(r, "m", NULL, &slot);
  ck_assert_ptr_nonnull(held);
  ck_assert_int_eq(slot, N_BUILTIN);
  float v1 = first_output(held);

  write_text("a.json", HDR "\"seed\": 2}");
  ck_assert_int_eq(attn_registry_load(r, "m", &d, NULL), ATTN_OK);
  const attn_model *now = attn_registry_get(r, "m", NULL, NULL);
  ck_assert_ptr_ne(now, held);
  ck_assert(first_output(now) != v1);
  ck_assert(first_output(held) == v1); /* still whole */
  attn_model_put(held);

  ck_assert_int_eq(attn_registry_unload(r, "m", &d), ATTN_OK);
  ck_assert_ptr_null(attn_registry_get(r, "m", NULL, &slot));
  ck_assert_int_eq(slot, N_BUILTIN); /* the name keeps its slot */
  ck_assert_ptr_null(attn_registry_get_at(r, N_BUILTIN));
  (void)first_output(now); /* held across the unload */
  attn_model_put(now);
  ck_assert_int_eq(attn_registry_unload(r, "m", &d), ATTN_OK);
  ck_assert_int_eq(attn_registry_unload(r, "sdpa", &d), ATTN_EINVAL);
  ck_assert_int_eq(attn_registry_unload(r, "zz", &d), ATTN_ENOTFOUND);
  ck_assert_int_eq(attn_registry_load(r, "zz", &d, NULL), ATTN_ENOTFOUND);
  ck_assert_int_eq(attn_registry_load(r, "sdpa", &d, NULL), ATTN_OK);

  /* a failed load: the model stays as it was (unloaded here) */
  write_text("a.json", HDR "\"seed\": 1, \"colour\": 1}");
  ck_assert_int_eq(attn_registry_load(r, "m", &d, NULL), ATTN_EINVAL);
  ck_assert_ptr_nonnull(strstr(d.msg, "unknown key 'colour'"));
  attn_registry_entry *v;
  size_t n;
  ck_assert_int_eq(attn_registry_index(r, &v, &n, &d), ATTN_OK);
  ck_assert_uint_eq(n, N_BUILTIN + 1);
  ck_assert(!v[N_BUILTIN].ready);
  ck_assert_ptr_nonnull(strstr(v[N_BUILTIN].reason, "colour"));
  free(v);

  /* reload: the fixed file, a new one; a second file naming m fails */
  write_text("a.json", HDR "\"seed\": 1}");
  write_text("b.json",
             "{\"name\": \"n\", \"embed_dim\": 4, "
             "\"num_heads\": 1, \"seed\": 3}");
  write_text("c.json", HDR "\"seed\": 9}");
  reports = 0;
  ck_assert_int_eq(attn_registry_reload(r, count_report, NULL, &d), ATTN_OK);
  ck_assert_int_eq(reports, 1); /* c.json: 'm' already used */
  const attn_model *m = attn_registry_get(r, "m", NULL, NULL);
  ck_assert(first_output(m) == v1);
  attn_model_put(m);
  ck_assert_uint_eq(attn_registry_count(r), N_BUILTIN + 2);
  ck_assert_str_eq(attn_registry_slot_name(r, N_BUILTIN + 1), "n");
  ck_assert_int_eq(attn_registry_index(r, &v, &n, &d), ATTN_OK);
  ck_assert_uint_eq(n, N_BUILTIN + 2);
  for (size_t i = 0; i < n; i++) ck_assert(v[i].ready);
  free(v);
  attn_registry_destroy(r);
  rm_tmpdir();
}
END_TEST

/* A *.json or a weights file that is a FIFO or a device: the start passes
 * the FIFO over, the index lists it with the reason, loads are refused at
 * once; what a client reads names files relative to the models folder,
 * the detail for the log by their paths. */
START_TEST(registry_not_regular) {
  mk_tmpdir();
  char path[512];
  write_text("a.json", HDR "\"seed\": 1}");
  snprintf(path, sizeof path, "%s/p.json", tmpdir);
  ck_assert_int_eq(mkfifo(path, 0600), 0);
  attn_registry *r;
  attn_diag d = {{0}}, detail = {{0}};
  ck_assert_msg(attn_registry_create(tmpdir, &r, &d) == ATTN_OK, "%s", d.msg);
  ck_assert_uint_eq(attn_registry_count(r), N_BUILTIN + 1);
  attn_registry_entry *v;
  size_t n;
  ck_assert_int_eq(attn_registry_index(r, &v, &n, &d), ATTN_OK);
  ck_assert_uint_eq(n, N_BUILTIN + 2);
  ck_assert_str_eq(v[N_BUILTIN + 1].name, "p");
  ck_assert_str_eq(v[N_BUILTIN + 1].reason,
                   "models/p.json: not a regular file (a FIFO)");
  free(v);
  ck_assert_int_eq(attn_registry_load(r, "p", &d, &detail), ATTN_EIO);
  ck_assert_str_eq(d.msg, "models/p.json: not a regular file (a FIFO)");
  ck_assert_ptr_nonnull(strstr(detail.msg, path));

  /* weights: a FIFO beside the file, /dev/zero elsewhere */
  snprintf(path, sizeof path, "%s/w.fifo", tmpdir);
  ck_assert_int_eq(mkfifo(path, 0600), 0);
  write_text("f.json",
             "{\"name\": \"f\", \"embed_dim\": 4, "
             "\"num_heads\": 1, \"weights\": \"w.fifo\"}");
  ck_assert_int_eq(attn_registry_load(r, "f", &d, &detail), ATTN_EIO);
  ck_assert_str_eq(d.msg, "models/w.fifo: not a regular file (a FIFO)");
  ck_assert_ptr_nonnull(strstr(detail.msg, path));
  write_text("z.json",
             "{\"name\": \"z\", \"embed_dim\": 4, "
             "\"num_heads\": 1, \"weights\": \"/dev/zero\"}");
  ck_assert_int_eq(attn_registry_load(r, "z", &d, &detail), ATTN_EIO);
  ck_assert_str_eq(d.msg,
                   "models/z.json's weights: not a regular file (a character "
                   "device)");
  ck_assert_str_eq(detail.msg,
                   "/dev/zero: not a regular file (a character device)");
  reports = 0;
  ck_assert_int_eq(attn_registry_reload(r, count_report, NULL, &d), ATTN_OK);
  ck_assert_int_eq(reports, 3); /* p.json, f.json, z.json */
  attn_registry_destroy(r);
  rm_tmpdir();
}
END_TEST

START_TEST(registry_dirs) {
  attn_registry *reg = NULL;
  attn_diag d = {{0}};
  ck_assert_int_eq(attn_registry_create("/nonexistent/models", &reg, &d),
                   ATTN_OK);
  ck_assert_uint_eq(attn_registry_count(reg), N_BUILTIN);
  ck_assert_ptr_null(attn_registry_at(reg, N_BUILTIN));
  size_t n;
  const attn_model *sdpa = attn_registry_find(reg, "sdpa", "1");
  ck_assert_uint_eq((attn_model_inputs(sdpa, &n), n), 7);
  ck_assert_uint_eq(
      (attn_model_inputs(attn_registry_find(reg, "mha", NULL), &n), n), 15);
  attn_model_info info;
  attn_model_info_get(sdpa, &info);
  ck_assert_str_eq(info.kind, "sdpa");
  ck_assert_ptr_null(info.source);
  attn_registry_destroy(reg);
  attn_registry_destroy(NULL);

  /* a file where a directory should be */
  mk_tmpdir();
  write_text("f", "x");
  char path[512];
  snprintf(path, sizeof path, "%s/f", tmpdir);
  reg = (attn_registry *)1;
  ck_assert_int_eq(attn_registry_create(path, &reg, &d), ATTN_EIO);
  ck_assert_ptr_null(reg);
  ck_assert_ptr_nonnull(strstr(d.msg, path));
  /* duplicate resident names name both files */
  write_text("a.json",
             "{\"name\":\"x\",\"embed_dim\":4,\"num_heads\":1,\"seed\":1}");
  write_text("b.json",
             "{\"name\":\"x\",\"embed_dim\":4,\"num_heads\":1,\"seed\":2}");
  ck_assert_int_eq(attn_registry_create(tmpdir, &reg, &d), ATTN_EINVAL);
  ck_assert_ptr_nonnull(strstr(d.msg, "b.json"));
  ck_assert_ptr_nonnull(strstr(d.msg, "a.json"));
  rm_tmpdir();
}
END_TEST

/* ---- client mistakes
 * ---------------------------------------------------------- */

/* A valid sdpa request [B=2,H=2,L=3,D=4] to break in one way. */
static float qkv[2 * 2 * 3 * 4];

static void sdpa_req(attn_infer_request *r) {
  for (size_t i = 0; i < sizeof qkv / sizeof qkv[0]; i++)
    qkv[i] = (float)((i * 7) % 11) * 0.1f - 0.5f;
  rq_init(r);
  const int64_t s[4] = {2, 2, 3, 4};
  add_in(r, "query", ATTN_DT_FP32, 4, s, qkv);
  add_in(r, "key", ATTN_DT_FP32, 4, s, qkv);
  add_in(r, "value", ATTN_DT_FP32, 4, s, qkv);
}

static void rename_input(attn_infer_request *r, size_t i, const char *name) {
  free(r->inputs[i].name);
  r->inputs[i].name = strdup(name);
}

/* A valid-but-for-num_heads mha request: query [1,3,4], zero weights. */
static void mha_req(attn_infer_request *m) {
  static const float w[16] = {0};
  sdpa_req(m); /* fills qkv */
  attn_infer_request_free(m);
  rq_init(m);
  add_in(m, "query", ATTN_DT_FP32, 3, (int64_t[]){1, 3, 4}, qkv);
  add_in(m, "w_q", ATTN_DT_FP32, 2, (int64_t[]){4, 4}, w);
  add_in(m, "w_k", ATTN_DT_FP32, 2, (int64_t[]){4, 4}, w);
  add_in(m, "w_v", ATTN_DT_FP32, 2, (int64_t[]){4, 4}, w);
  add_in(m, "w_o", ATTN_DT_FP32, 2, (int64_t[]){4, 4}, w);
}

START_TEST(input_errors) {
  attn_registry *reg = builtins();
  attn_infer_request r;

  sdpa_req(&r);
  rename_input(&r, 0, "qeury");
  expect_err(reg, "sdpa", &r, NULL, ATTN_EINVAL,
             "unknown input 'qeury' for model 'sdpa' (expected query, key, "
             "value, attn_mask, key_padding_mask, key_lengths, alibi_slopes)");
  attn_infer_request_free(&r);

  sdpa_req(&r);
  rename_input(&r, 1, "value");
  expect_err(reg, "sdpa", &r, NULL, ATTN_EINVAL, "input 'value' given twice");
  attn_infer_request_free(&r);

  sdpa_req(&r);
  r.n_inputs = 2; /* drop value (freed by hand below) */
  expect_err(reg, "sdpa", &r, NULL, ATTN_EINVAL,
             "missing required input 'value' for model 'sdpa'");
  r.n_inputs = 3;
  attn_infer_request_free(&r);

  sdpa_req(&r);
  r.inputs[0].tensor.dtype = ATTN_DT_INT32;
  expect_err(reg, "sdpa", &r, NULL, ATTN_EINVAL,
             "input 'query': datatype INT32");
  attn_infer_request_free(&r);

  /* BYTES (a v2 client may send one): refused by name and type */
  sdpa_req(&r);
  attn_tensor_free(&r.inputs[0].tensor);
  ck_assert_int_eq(
      attn_tensor_bytes_alloc(&r.inputs[0].tensor, 1, (int64_t[]){1}, 1),
      ATTN_OK);
  ck_assert_int_eq(attn_tensor_bytes_put(&r.inputs[0].tensor, 0, "x", 1),
                   ATTN_OK);
  expect_err(reg, "sdpa", &r, NULL, ATTN_EINVAL,
             "input 'query': datatype BYTES, expected a float type");
  attn_infer_request_free(&r);
  for (int k = 0; k < 2; k++) {
    sdpa_req(&r);
    add_in(&r, k ? "key_lengths" : "attn_mask", ATTN_DT_INT32, 1,
           (int64_t[]){1}, qkv);
    attn_tensor *t = &r.inputs[3].tensor;
    attn_tensor_free(t);
    ck_assert_int_eq(attn_tensor_bytes_alloc(t, 1, (int64_t[]){1}, 0), ATTN_OK);
    ck_assert_int_eq(attn_tensor_bytes_put(t, 0, "", 0), ATTN_OK);
    expect_err(reg, "sdpa", &r, NULL, ATTN_EINVAL,
               k ? "input 'key_lengths': datatype BYTES, expected INT32"
                 : "input 'attn_mask': datatype BYTES, expected BOOL");
    attn_infer_request_free(&r);
  }

  sdpa_req(&r);
  add_in(&r, "attn_mask", ATTN_DT_INT32, 2, (int64_t[]){3, 3}, qkv);
  expect_err(reg, "sdpa", &r, NULL, ATTN_EINVAL,
             "input 'attn_mask': datatype INT32, expected BOOL");
  attn_infer_request_free(&r);

  sdpa_req(&r);
  add_in(&r, "key_padding_mask", ATTN_DT_FP32, 2, (int64_t[]){2, 3}, qkv);
  expect_err(reg, "sdpa", &r, NULL, ATTN_EINVAL,
             "input 'key_padding_mask': datatype FP32");
  attn_infer_request_free(&r);

  sdpa_req(&r);
  add_in(&r, "key_lengths", ATTN_DT_FP32, 1, (int64_t[]){2}, qkv);
  expect_err(reg, "sdpa", &r, NULL, ATTN_EINVAL,
             "input 'key_lengths': datatype FP32, expected INT32 or INT64");
  attn_infer_request_free(&r);

  sdpa_req(&r);
  add_in(&r, "key_lengths", ATTN_DT_INT32, 1, (int64_t[]){2},
         (int32_t[]){1, 4});
  expect_err(reg, "sdpa", &r, NULL, ATTN_EINVAL,
             "'key_lengths': element 1 is 4, expected 0..Lk=3");
  attn_infer_request_free(&r);

  sdpa_req(&r);
  add_in(&r, "key_lengths", ATTN_DT_INT64, 1, (int64_t[]){2},
         (int64_t[]){-1, 1});
  expect_err(reg, "sdpa", &r, NULL, ATTN_EINVAL, "element 0 is -1");
  attn_infer_request_free(&r);

  sdpa_req(&r);
  add_in(&r, "key_lengths", ATTN_DT_INT64, 1, (int64_t[]){3},
         (int64_t[]){1, 1, 1});
  expect_err(reg, "sdpa", &r, NULL, ATTN_ESHAPE,
             "input 'key_lengths': shape [3], expected [B] = [2]");
  attn_infer_request_free(&r);

  sdpa_req(&r);
  add_in(&r, "key_lengths", ATTN_DT_INT64, 1, (int64_t[]){2},
         (int64_t[]){1, 1});
  add_in(&r, "key_padding_mask", ATTN_DT_BOOL, 2, (int64_t[]){2, 3},
         (uint8_t[]){0, 0, 0, 0, 0, 0});
  expect_err(reg, "sdpa", &r, NULL, ATTN_EINVAL, "give one");
  attn_infer_request_free(&r);

  sdpa_req(&r);
  add_in(&r, "key_padding_mask", ATTN_DT_BOOL, 1, (int64_t[]){3},
         (uint8_t[]){0, 0, 0});
  expect_err(reg, "sdpa", &r, NULL, ATTN_ESHAPE,
             "input 'key_padding_mask': shape [3], expected [B,Lk] = [2,3]");
  attn_infer_request_free(&r);

  sdpa_req(&r);
  add_in(&r, "attn_mask", ATTN_DT_BOOL, 2, (int64_t[]){3, 4}, qkv);
  expect_err(reg, "sdpa", &r, NULL, ATTN_ESHAPE,
             "input 'attn_mask': shape [3,4], expected [Lq,Lk]");
  attn_infer_request_free(&r);

  sdpa_req(&r);
  add_in(&r, "attn_mask", ATTN_DT_BOOL, 4, (int64_t[]){2, 3, 3, 3}, qkv);
  expect_err(reg, "sdpa", &r, NULL, ATTN_ESHAPE, "H=2");
  attn_infer_request_free(&r);

  sdpa_req(&r);
  float bad[9] = {0, 0, 0, 0, NAN, 0, 0, 0, 0};
  add_in(&r, "attn_mask", ATTN_DT_FP32, 2, (int64_t[]){3, 3}, bad);
  expect_err(reg, "sdpa", &r, NULL, ATTN_ENONFINITE, "attn_mask");
  attn_infer_request_free(&r);

  sdpa_req(&r);
  r.inputs[0].tensor.data = realloc(r.inputs[0].tensor.data, sizeof qkv);
  ((float *)r.inputs[0].tensor.data)[3] = INFINITY;
  expect_err(reg, "sdpa", &r, NULL, ATTN_ENONFINITE, "query");
  attn_infer_request_free(&r);

  attn_registry_destroy(reg);
}
END_TEST

START_TEST(shape_errors) {
  attn_registry *reg = builtins();
  attn_infer_request r;

  sdpa_req(&r);
  r.inputs[1].tensor.shape[3] = 2, r.inputs[1].tensor.shape[2] = 6;
  expect_err(reg, "sdpa", &r, NULL, ATTN_ESHAPE,
             "input 'key' has 2 values per position (dim 3, Dk) where "
             "'query' has 4");
  attn_infer_request_free(&r);

  sdpa_req(&r);
  r.inputs[2].tensor.rank = 3;
  r.inputs[2].tensor.shape[2] = 12;
  expect_err(reg, "sdpa", &r, NULL, ATTN_ESHAPE,
             "input 'value': rank 3, query has rank 4");
  attn_infer_request_free(&r);

  sdpa_req(&r);
  r.inputs[2].tensor.shape[2] = 2, r.inputs[2].tensor.shape[3] = 6;
  expect_err(reg, "sdpa", &r, NULL, ATTN_ESHAPE,
             "input 'value' has 2 positions (dim 2, Lk) where 'key' has 3");
  attn_infer_request_free(&r);

  sdpa_req(&r);
  r.inputs[0].tensor.shape[0] = 1, r.inputs[0].tensor.shape[2] = 6;
  expect_err(reg, "sdpa", &r, NULL, ATTN_ESHAPE,
             "input 'key' has a batch of 2 (dim 0) where 'query' has 1");
  attn_infer_request_free(&r);

  sdpa_req(&r); /* H=2 query heads, key and value with 4 */
  for (size_t i = 1; i <= 2; i++) {
    r.inputs[i].tensor.shape[1] = 4;
    r.inputs[i].tensor.data = realloc(r.inputs[i].tensor.data, 2 * sizeof qkv);
    memcpy((char *)r.inputs[i].tensor.data + sizeof qkv, qkv, sizeof qkv);
  }
  expect_err(reg, "sdpa", &r, NULL, ATTN_ESHAPE,
             "input 'key' has 4 heads (dim 1), which do not divide");
  attn_infer_request_free(&r);

  sdpa_req(&r);
  r.inputs[0].tensor.rank = 1, r.inputs[0].tensor.shape[0] = 48;
  expect_err(reg, "sdpa", &r, NULL, ATTN_ESHAPE,
             "input 'query': shape [48], expected rank 2");
  attn_infer_request_free(&r);

  sdpa_req(&r);
  r.inputs[0].tensor.shape[2] = 0;
  expect_err(reg, "sdpa", &r, NULL, ATTN_ESHAPE, "input 'query': dim 2 is 0");
  attn_infer_request_free(&r);

  /* mha: weights of the wrong shape, value without key, num_heads */
  attn_infer_request m;
  mha_req(&m);
  expect_err(reg, "mha", &m, NULL, ATTN_EINVAL,
             "missing required parameter 'num_heads' for model 'mha'");
  add_pi(&m, "num_heads", 3);
  expect_err(reg, "mha", &m, NULL, ATTN_ESHAPE,
             "has 4 columns (dim 2, E), not a multiple of num_heads 3");
  m.params[0].i = 2;
  add_pi(&m, "num_kv_heads", 2);
  m.inputs[2].tensor.shape[1] = 2; /* w_k [4,2] but Hkv*E/H = 4 */
  expect_err(reg, "mha", &m, NULL, ATTN_ESHAPE,
             "input 'w_k': shape [4,2], expected [kdim,Hkv*E/H] = [4,4]");
  m.inputs[2].tensor.shape[1] = 4;
  m.params[1].i = 1; /* now w_k should be [4,2] */
  expect_err(reg, "mha", &m, NULL, ATTN_ESHAPE, "= [4,2]");
  m.params[1].i = 2;
  add_in(&m, "b_o", ATTN_DT_FP32, 1, (int64_t[]){3}, qkv);
  expect_err(reg, "mha", &m, NULL, ATTN_ESHAPE,
             "input 'b_o': shape [3], expected [E] = [4]");
  rename_input(&m, m.n_inputs - 1, "value");
  m.inputs[m.n_inputs - 1].tensor.rank = 3;
  m.inputs[m.n_inputs - 1].tensor.shape[0] = 1;
  m.inputs[m.n_inputs - 1].tensor.shape[1] = 1;
  m.inputs[m.n_inputs - 1].tensor.shape[2] = 3;
  expect_err(reg, "mha", &m, NULL, ATTN_EINVAL, "'value' given without 'key'");
  rename_input(&m, m.n_inputs - 1, "key");
  m.inputs[m.n_inputs - 1].tensor.shape[0] = 2;
  expect_err(reg, "mha", &m, NULL, ATTN_ESHAPE,
             "input 'key' has a batch of 2 (dim 0) where 'query' has 1");
  attn_infer_request_free(&m);
  attn_registry_destroy(reg);
}
END_TEST

START_TEST(param_errors) {
  attn_registry *reg = builtins();
  attn_infer_request r;

  sdpa_req(&r);
  add_pb(&r, "casual", true);
  expect_err(reg, "sdpa", &r, NULL, ATTN_EINVAL,
             "unknown parameter 'casual' for model 'sdpa' (expected scale, "
             "need_weights, average_attn_weights, precision, causal, "
             "window_left");
  attn_infer_request_free(&r);

  sdpa_req(&r);
  add_pi(&r, "num_heads", 2); /* an mha parameter */
  expect_err(reg, "sdpa", &r, NULL, ATTN_EINVAL,
             "unknown parameter 'num_heads'");
  attn_infer_request_free(&r);

  sdpa_req(&r);
  add_pi(&r, "causal", 1);
  expect_err(reg, "sdpa", &r, NULL, ATTN_EINVAL,
             "'causal' must be true, false, \"bottom_right\" or \"top_left\", "
             "got a number");
  attn_infer_request_free(&r);

  sdpa_req(&r);
  add_ps(&r, "scale", "0.5");
  expect_err(reg, "sdpa", &r, NULL, ATTN_EINVAL,
             "parameter 'scale' must be a number, got a string");
  attn_infer_request_free(&r);

  sdpa_req(&r);
  add_pd(&r, "scale", INFINITY);
  expect_err(reg, "sdpa", &r, NULL, ATTN_EINVAL, "'scale' must be a finite");
  attn_infer_request_free(&r);

  sdpa_req(&r);
  add_pb(&r, "causal", true);
  add_pb(&r, "causal", false);
  expect_err(reg, "sdpa", &r, NULL, ATTN_EINVAL,
             "parameter 'causal' given twice");
  attn_infer_request_free(&r);

  sdpa_req(&r);
  add_pb(&r, "need_weights", false);
  add_out(&r, "attn_weights", -1);
  expect_err(reg, "sdpa", &r, NULL, ATTN_EINVAL, "they conflict");
  attn_infer_request_free(&r);

  sdpa_req(&r);
  add_out(&r, "attn_output", -1);
  add_out(&r, "attn_wieghts", -1);
  expect_err(reg, "sdpa", &r, NULL, ATTN_EINVAL,
             "unknown output 'attn_wieghts' for model 'sdpa'");
  attn_infer_request_free(&r);

  sdpa_req(&r);
  add_out(&r, "attn_output", -1);
  add_out(&r, "attn_output", 1);
  expect_err(reg, "sdpa", &r, NULL, ATTN_EINVAL,
             "'attn_output' requested twice");
  attn_infer_request_free(&r);

  /* mha: num_heads type and range */
  attn_infer_request m;
  mha_req(&m);
  add_ps(&m, "num_heads", "2");
  expect_err(reg, "mha", &m, NULL, ATTN_EINVAL,
             "parameter 'num_heads' must be an integer, got a string");
  m.params[0].type = ATTN_PARAM_INT;
  m.params[0].i = 0;
  expect_err(reg, "mha", &m, NULL, ATTN_EINVAL,
             "parameter 'num_heads' is 0, expected a positive integer");
  m.params[0].type = ATTN_PARAM_DOUBLE;
  m.params[0].d = 1.5;
  expect_err(reg, "mha", &m, NULL, ATTN_EINVAL,
             "parameter 'num_heads' must be an integer, got 1.5");
  attn_infer_request_free(&m);
  attn_registry_destroy(reg);
}
END_TEST

START_TEST(outputs_and_binary) {
  attn_registry *reg = builtins();
  const attn_model *m = attn_registry_find(reg, "sdpa", NULL);
  attn_infer_request r;
  attn_infer_response resp;
  attn_diag d = {{0}};

  /* need_weights false, no outputs list: attn_output only */
  sdpa_req(&r);
  add_pb(&r, "need_weights", false);
  ck_assert_int_eq(attn_model_infer(m, &r, NULL, NULL, &resp, &d), ATTN_OK);
  ck_assert_uint_eq(resp.n_outputs, 1);
  ck_assert_str_eq(resp.outputs[0].name, "attn_output");
  attn_infer_response_free(&resp);
  attn_infer_request_free(&r);

  /* only attn_weights, binary by request; binary_data_output irrelevant */
  sdpa_req(&r);
  r.binary_data_output = 0;
  add_out(&r, "attn_weights", 1);
  ck_assert_int_eq(attn_model_infer(m, &r, NULL, NULL, &resp, &d), ATTN_OK);
  ck_assert_uint_eq(resp.n_outputs, 1);
  ck_assert_str_eq(resp.outputs[0].name, "attn_weights");
  ck_assert(resp.outputs[0].binary);
  check_shape(&resp.outputs[0].tensor, 4, (int64_t[]){2, 2, 3, 3});
  attn_infer_response_free(&resp);
  attn_infer_request_free(&r);

  /* order follows the request; per-output flag wins over the default */
  sdpa_req(&r);
  r.binary_data_output = 1;
  add_out(&r, "attn_weights", -1);
  add_out(&r, "attn_output", 0);
  ck_assert_int_eq(attn_model_infer(m, &r, NULL, NULL, &resp, &d), ATTN_OK);
  ck_assert_uint_eq(resp.n_outputs, 2);
  ck_assert_str_eq(resp.outputs[0].name, "attn_weights");
  ck_assert(resp.outputs[0].binary);
  ck_assert_str_eq(resp.outputs[1].name, "attn_output");
  ck_assert(!resp.outputs[1].binary);
  attn_infer_response_free(&resp);
  attn_infer_request_free(&r);

  /* outputs list without attn_weights: not computed even with need_weights */
  sdpa_req(&r);
  add_pb(&r, "need_weights", true);
  add_out(&r, "attn_output", -1);
  ck_assert_int_eq(attn_model_infer(m, &r, NULL, NULL, &resp, &d), ATTN_OK);
  ck_assert_uint_eq(resp.n_outputs, 1);
  attn_infer_response_free(&resp);
  attn_infer_request_free(&r);

  /* an empty outputs list counts as none */
  sdpa_req(&r);
  r.outputs_given = true;
  ck_assert_int_eq(attn_model_infer(m, &r, NULL, NULL, &resp, &d), ATTN_OK);
  ck_assert_uint_eq(resp.n_outputs, 2);
  attn_infer_response_free(&resp);
  attn_infer_request_free(&r);
  attn_registry_destroy(reg);
}
END_TEST

/* r (an sdpa request whose attn_weights lim refuses as JSON) succeeds with
 * each remedy the error names: binary output, then need_weights false.
 * Frees r. */
static void weights_remedies_work(const attn_model *m, attn_infer_request *r,
                                  const attn_model_limits *lim) {
  attn_infer_response resp;
  attn_diag d = {{0}};
  r->binary_data_output = 1;
  ck_assert_int_eq(attn_model_infer(m, r, lim, NULL, &resp, &d), ATTN_OK);
  attn_infer_response_free(&resp);
  r->binary_data_output = -1;
  add_pb(r, "need_weights", false);
  ck_assert_int_eq(attn_model_infer(m, r, lim, NULL, &resp, &d), ATTN_OK);
  attn_infer_response_free(&resp);
  attn_infer_request_free(r);
}

START_TEST(limits) {
  attn_registry *reg = builtins();
  const attn_model *m = attn_registry_find(reg, "sdpa", NULL);
  attn_infer_request r;
  attn_infer_response resp;
  attn_diag d = {{0}};
  /* query/key/value [2,2,3,4]: attn_output 48 elements, attn_weights 36 */
  attn_model_limits lim = {3, 48, 36, false};
  sdpa_req(&r);
  ck_assert_msg(attn_model_infer(m, &r, &lim, NULL, &resp, &d) == ATTN_OK, "%s",
                d.msg);
  attn_infer_response_free(&resp);

  lim = (attn_model_limits){2, 0, 0, false};
  expect_err(reg, "sdpa", &r, &lim, ATTN_ETOOBIG,
             "query length Lq=3 exceeds max_seq_len 2");
  attn_infer_request_free(&r);

  sdpa_req(&r); /* Lq = 1, Lk = 3 */
  r.inputs[0].tensor.shape[2] = 1;
  lim = (attn_model_limits){2, 0, 0, false};
  expect_err(reg, "sdpa", &r, &lim, ATTN_ETOOBIG,
             "key length Lk=3 exceeds max_seq_len 2");
  attn_infer_request_free(&r);

  sdpa_req(&r);
  lim = (attn_model_limits){0, 47, 0, false};
  expect_err(reg, "sdpa", &r, &lim, ATTN_ETOOBIG,
             "attn_output would have 48 elements (limit 47)");
  lim = (attn_model_limits){0, 48, 35, false};
  expect_err(reg, "sdpa", &r, &lim, ATTN_EINVAL,
             "attn_weights would have 36 elements (limit 35): drop "
             "attn_weights from the outputs, set need_weights false, or "
             "request binary output");
  weights_remedies_work(m, &r, &lim); /* frees r */
  sdpa_req(&r);
  add_out(&r, "attn_output", -1);
  ck_assert_int_eq(attn_model_infer(m, &r, &lim, NULL, &resp, &d), ATTN_OK);
  attn_infer_response_free(&resp);
  attn_infer_request_free(&r);
  /* no weights as JSON at all (max_weights_elements = 0 in the server);
   * binary weights and no weights still work */
  sdpa_req(&r);
  lim = (attn_model_limits){.no_weights_json = true};
  expect_err(reg, "sdpa", &r, &lim, ATTN_EINVAL,
             "attn_weights are not returned as JSON by this server "
             "(max_weights_elements = 0): drop attn_weights from the outputs, "
             "set need_weights false, or request binary output");
  weights_remedies_work(m, &r, &lim);
  /* averaged weights are smaller: 2*3*3 = 18 */
  sdpa_req(&r);
  add_pb(&r, "average_attn_weights", true);
  lim = (attn_model_limits){0, 48, 18, false};
  ck_assert_int_eq(attn_model_infer(m, &r, &lim, NULL, &resp, &d), ATTN_OK);
  attn_infer_response_free(&resp);
  attn_infer_request_free(&r);
  /* binary attn_weights over max_tensor_elements are still too big:
   * q [3,1], k, v [5,1]: attn_output 3 elements, attn_weights 15 */
  rq_init(&r);
  add_in(&r, "query", ATTN_DT_FP32, 2, (int64_t[]){3, 1}, qkv);
  add_in(&r, "key", ATTN_DT_FP32, 2, (int64_t[]){5, 1}, qkv);
  add_in(&r, "value", ATTN_DT_FP32, 2, (int64_t[]){5, 1}, qkv);
  r.binary_data_output = 1;
  lim = (attn_model_limits){0, 10, 0, false};
  expect_err(reg, "sdpa", &r, &lim, ATTN_ETOOBIG,
             "attn_weights would have 15 elements (limit 10)");
  add_pb(&r, "need_weights", false);
  ck_assert_int_eq(attn_model_infer(m, &r, &lim, NULL, &resp, &d), ATTN_OK);
  check_shape(&resp.outputs[0].tensor, 2, (int64_t[]){3, 1});
  attn_infer_response_free(&resp);
  attn_infer_request_free(&r);
  attn_registry_destroy(reg);
}
END_TEST

Suite *model_suite(void) {
  Suite *s = suite_create("model");
  TCase *tc = tcase_create("model");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, sdpa_rank4_gqa);
  tcase_add_test(tc, sdpa_rank3_rank2);
  tcase_add_test(tc, sdpa_masks);
  tcase_add_test(tc, mha_self_and_cross);
  tcase_add_test(tc, mha_gqa);
  tcase_add_test(tc, resident_packed);
  tcase_add_test(tc, resident_split_gqa);
  tcase_add_test(tc, resident_seeded);
  tcase_add_test(tc, registry_errors);
  tcase_add_test(tc, resident_variant_errors);
  tcase_add_test(tc, registry_dirs);
  tcase_add_test(tc, registry_repository);
  tcase_add_test(tc, registry_model_name);
  tcase_add_test(tc, registry_not_regular);
  tcase_add_test(tc, input_errors);
  tcase_add_test(tc, shape_errors);
  tcase_add_test(tc, param_errors);
  tcase_add_test(tc, outputs_and_binary);
  tcase_add_test(tc, limits);
  suite_add_tcase(s, tc);
  return s;
}
