/* ref.c - plain double-precision reference kernels.
 *
 * DESIGN
 * The slowest, most obvious code for the contracts in engine.h: every score
 * is a double dot product, softmax uses exp() in double, nothing is tiled or
 * threaded.  Tests and benchmarks compare the fast paths against it.  It
 * shares validation with the fast path (attn_*_check) so that both accept
 * exactly the same problems.  Thread-safe; allocates only temporaries.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "attn/engine.h"
#include "internal.h"

/* Dense double tensors of one problem. */
typedef struct ref_in {
  int64_t B, H, Hkv, Lq, Lk, Dk, Dv;
  const double *q, *k, *v; /* [B,H,Lq,Dk], [B,Hkv,Lk,Dk], [B,Hkv,Lk,Dv] */
  const attn_attend_opts *o;
} ref_in;

static int blocked(const ref_in *r, int64_t b, int64_t h, int64_t i,
                   int64_t j) {
  const attn_attend_opts *o = r->o;
  if (o->causal && j > i + (r->Lk - r->Lq)) return 1;
  if (o->kpm.kind == ATTN_KPM_BOOL && o->kpm.pad[b * r->Lk + j]) return 1;
  if (o->kpm.kind == ATTN_KPM_LENGTHS && j >= o->kpm.lengths[b]) return 1;
  if (o->mask.kind == ATTN_MASK_BOOL) {
    int64_t bm = o->mask.mb == 1 ? 0 : b, hm = o->mask.mh == 1 ? 0 : h;
    const uint8_t *m = o->mask.data;
    if (m[((bm * o->mask.mh + hm) * r->Lq + i) * r->Lk + j]) return 1;
  }
  return 0;
}

static double additive(const ref_in *r, int64_t b, int64_t h, int64_t i,
                       int64_t j) {
  const attn_attend_opts *o = r->o;
  if (o->mask.kind != ATTN_MASK_ADD) return 0.0;
  int64_t bm = o->mask.mb == 1 ? 0 : b, hm = o->mask.mh == 1 ? 0 : h;
  const float *m = o->mask.data;
  return m[((bm * o->mask.mh + hm) * r->Lq + i) * r->Lk + j];
}

static attn_status ref_core(const ref_in *r, double *out, double *weights) {
  int64_t Lk = r->Lk, group = r->H / r->Hkv;
  double scale = r->o->has_scale ? (double)r->o->scale : 1.0 / sqrt((double)r->Dk);
  double *p = malloc((size_t)Lk * sizeof *p);
  if (!p) return ATTN_ENOMEM;
  if (weights && r->o->weights == ATTN_WEIGHTS_MEAN)
    memset(weights, 0, (size_t)(r->B * r->Lq * Lk) * sizeof *weights);
  for (int64_t b = 0; b < r->B; b++)
    for (int64_t h = 0; h < r->H; h++)
      for (int64_t i = 0; i < r->Lq; i++) {
        const double *qi = r->q + ((b * r->H + h) * r->Lq + i) * r->Dk;
        int64_t hk = h / group;
        double mx = -INFINITY, sum = 0.0;
        for (int64_t j = 0; j < Lk; j++) {
          const double *kj = r->k + ((b * r->Hkv + hk) * Lk + j) * r->Dk;
          double s = 0.0;
          for (int64_t t = 0; t < r->Dk; t++) s += qi[t] * kj[t];
          s = s * scale + additive(r, b, h, i, j);
          if (blocked(r, b, h, i, j)) s = -INFINITY;
          p[j] = s;
          if (s > mx) mx = s;
        }
        for (int64_t j = 0; j < Lk; j++) {
          p[j] = mx == -INFINITY ? 0.0 : exp(p[j] - mx);
          sum += p[j];
        }
        for (int64_t j = 0; j < Lk; j++) p[j] = sum > 0 ? p[j] / sum : 0.0;
        double *oi = out + ((b * r->H + h) * r->Lq + i) * r->Dv;
        for (int64_t t = 0; t < r->Dv; t++) {
          double acc = 0.0;
          for (int64_t j = 0; j < Lk; j++)
            acc += p[j] * r->v[((b * r->Hkv + hk) * Lk + j) * r->Dv + t];
          oi[t] = acc;
        }
        if (weights && r->o->weights == ATTN_WEIGHTS_PER_HEAD)
          memcpy(weights + ((b * r->H + h) * r->Lq + i) * Lk, p,
                 (size_t)Lk * sizeof *p);
        else if (weights && r->o->weights == ATTN_WEIGHTS_MEAN)
          for (int64_t j = 0; j < Lk; j++)
            weights[(b * r->Lq + i) * Lk + j] += p[j] / (double)r->H;
      }
  free(p);
  return ATTN_OK;
}

/* Copy a float view [n0][n1][rows][cols] to a dense double array. */
static double *densify(const attn_view *v, int64_t n0, int64_t n1,
                       int64_t rows, int64_t cols) {
  double *d = malloc((size_t)(n0 * n1 * rows * cols) * sizeof *d);
  if (!d) return NULL;
  for (int64_t a = 0; a < n0; a++)
    for (int64_t b = 0; b < n1; b++)
      for (int64_t i = 0; i < rows; i++)
        for (int64_t t = 0; t < cols; t++)
          d[((a * n1 + b) * rows + i) * cols + t] =
              v->data[a * v->sb + b * v->sh + i * v->ld + t];
  return d;
}

attn_status attn_ref_sdpa(const attn_sdpa_problem *p, double *out,
                          double *weights, attn_diag *d) {
  attn_status s = attn_sdpa_check(p, d);
  if (s) return s;
  double *q = densify(&p->q, p->B, p->H, p->Lq, p->Dk);
  double *k = densify(&p->k, p->B, p->Hkv, p->Lk, p->Dk);
  double *v = densify(&p->v, p->B, p->Hkv, p->Lk, p->Dv);
  if (!q || !k || !v) {
    s = ATTN_ENOMEM;
  } else {
    ref_in r = {p->B, p->H, p->Hkv, p->Lq, p->Lk, p->Dk, p->Dv, q, k, v, &p->o};
    s = ref_core(&r, out, weights);
  }
  free(q);
  free(k);
  free(v);
  return s;
}

/* y[rows, out] = x[rows, in] * W + bias, W as stored by attn_weight. */
static void ref_project(const float *x, int64_t rows, int64_t in, int64_t outc,
                        const attn_weight *w, const float *bias, double *y) {
  int64_t ld = attn__weight_ld(w, in, outc);
  for (int64_t r = 0; r < rows; r++)
    for (int64_t o = 0; o < outc; o++) {
      double acc = bias ? bias[o] : 0.0;
      for (int64_t t = 0; t < in; t++) {
        double wt = w->layout == ATTN_W_IN_OUT ? w->data[t * ld + o]
                                               : w->data[o * ld + t];
        acc += (double)x[r * in + t] * wt;
      }
      y[r * outc + o] = acc;
    }
}

/* [B, L, heads*D] -> [B, heads, L, D] */
static double *split_heads(const double *x, int64_t B, int64_t L,
                           int64_t heads, int64_t D) {
  double *y = malloc((size_t)(B * L * heads * D) * sizeof *y);
  if (!y) return NULL;
  for (int64_t b = 0; b < B; b++)
    for (int64_t i = 0; i < L; i++)
      for (int64_t h = 0; h < heads; h++)
        for (int64_t t = 0; t < D; t++)
          y[((b * heads + h) * L + i) * D + t] =
              x[(b * L + i) * heads * D + h * D + t];
  return y;
}

attn_status attn_ref_mha(const attn_mha_problem *in, double *out,
                         double *weights, attn_diag *d) {
  attn_status s = attn_mha_check(in, d);
  if (s) return s;
  attn_mha_problem p;
  attn__mha_normalise(in, &p);
  int64_t Dh = p.E / p.H, kw = p.Hkv * Dh;
  double *Q = malloc((size_t)(p.B * p.Lq * p.E) * sizeof *Q);
  double *K = malloc((size_t)(p.B * p.Lk * kw) * sizeof *K);
  double *V = malloc((size_t)(p.B * p.Lk * kw) * sizeof *V);
  double *q4 = NULL, *k4 = NULL, *v4 = NULL, *o4 = NULL;
  s = ATTN_ENOMEM;
  if (!Q || !K || !V) goto done;
  ref_project(p.xq, p.B * p.Lq, p.E, p.E, &p.wq, p.bq, Q);
  ref_project(p.xk, p.B * p.Lk, p.kdim, kw, &p.wk, p.bk, K);
  ref_project(p.xv, p.B * p.Lk, p.vdim, kw, &p.wv, p.bv, V);
  q4 = split_heads(Q, p.B, p.Lq, p.H, Dh);
  k4 = split_heads(K, p.B, p.Lk, p.Hkv, Dh);
  v4 = split_heads(V, p.B, p.Lk, p.Hkv, Dh);
  o4 = malloc((size_t)(p.B * p.H * p.Lq * Dh) * sizeof *o4);
  if (!q4 || !k4 || !v4 || !o4) goto done;
  ref_in r = {p.B, p.H, p.Hkv, p.Lq, p.Lk, Dh, Dh, q4, k4, v4, &p.o};
  if ((s = ref_core(&r, o4, weights))) goto done;
  /* concat heads back into Q's layout, then the output projection */
  for (int64_t b = 0; b < p.B; b++)
    for (int64_t h = 0; h < p.H; h++)
      for (int64_t i = 0; i < p.Lq; i++)
        for (int64_t t = 0; t < Dh; t++)
          Q[(b * p.Lq + i) * p.E + h * Dh + t] =
              o4[((b * p.H + h) * p.Lq + i) * Dh + t];
  {
    int64_t ld = attn__weight_ld(&p.wo, p.E, p.E);
    for (int64_t r0 = 0; r0 < p.B * p.Lq; r0++)
      for (int64_t o = 0; o < p.E; o++) {
        double acc = p.bo ? p.bo[o] : 0.0;
        for (int64_t t = 0; t < p.E; t++)
          acc += Q[r0 * p.E + t] * (p.wo.layout == ATTN_W_IN_OUT
                                        ? p.wo.data[t * ld + o]
                                        : p.wo.data[o * ld + t]);
        out[r0 * p.E + o] = acc;
      }
  }
  s = ATTN_OK;
done:
  free(Q);
  free(K);
  free(V);
  free(q4);
  free(k4);
  free(v4);
  free(o4);
  return s;
}
