/* ref.c - plain double-precision reference kernels.
 *
 * DESIGN
 * The slowest, most obvious code for the contracts in engine.h: every score
 * is a double dot product, softmax uses exp() in double, nothing is tiled or
 * threaded.  Tests and benchmarks compare the fast paths against it.  It
 * shares validation with the fast path (attn_*_check) so that both accept
 * exactly the same problems.  Thread-safe; allocates only temporaries.
 * With o.precision = ATTN_PRECISION_BF16 it is the scalar reference of the
 * bf16 kernels: every operand of a product rounded to bfloat16 where the
 * engine rounds it (attn__bf16, internal.h: q and k after rotary, v, the
 * normalised probabilities for P V; for mha also the inputs, the weights
 * and the heads' output before W_O), products summed in double.
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
  int64_t at = i + (r->Lk - r->Lq); /* the query's aligned key position */
  if (o->causal == ATTN_CAUSAL_BOTTOM_RIGHT && j > at) return 1;
  if (o->causal == ATTN_CAUSAL_TOP_LEFT && j > i) return 1;
  if (o->has_window && o->window_left >= 0 && j < at - o->window_left) return 1;
  if (o->has_window && o->window_right >= 0 && j > at + o->window_right)
    return 1;
  if (o->kpm.kind == ATTN_KPM_BOOL && o->kpm.pad[b * r->Lk + j]) return 1;
  if (o->kpm.kind == ATTN_KPM_LENGTHS && j >= o->kpm.lengths[b]) return 1;
  if (o->mask.kind == ATTN_MASK_BOOL) {
    int64_t bm = o->mask.mb == 1 ? 0 : b, hm = o->mask.mh == 1 ? 0 : h;
    const uint8_t *m = o->mask.data;
    if (m[((bm * o->mask.mh + hm) * r->Lq + i) * r->Lk + j]) return 1;
  }
  return 0;
}

/* ALiBi's bias plus the additive mask. */
static double additive(const ref_in *r, int64_t b, int64_t h, int64_t i,
                       int64_t j) {
  const attn_attend_opts *o = r->o;
  double a = 0.0;
  if (o->alibi_slopes)
    a = -(double)o->alibi_slopes[h] * fabs((double)(j - (i + r->Lk - r->Lq)));
  if (o->mask.kind != ATTN_MASK_ADD) return a;
  int64_t bm = o->mask.mb == 1 ? 0 : b, hm = o->mask.mh == 1 ? 0 : h;
  const float *m = o->mask.data;
  return a + m[((bm * o->mask.mh + hm) * r->Lq + i) * r->Lk + j];
}

/* Rotary positions (engine.h, attn_rotary) on dense [n0][L][D] doubles,
 * row i at position p0 + i: cos and sin of each angle straight from libm. */
static void rotate(double *x, int64_t n0, int64_t L, int64_t D, int64_t p0,
                   const attn_rotary *rot) {
  int64_t R = rot->dims ? rot->dims : D, half = R / 2;
  double base = rot->base != 0.0 ? rot->base : 10000.0;
  for (int64_t a = 0; a < n0; a++)
    for (int64_t i = 0; i < L; i++) {
      double *v = x + (a * L + i) * D;
      for (int64_t t = 0; t < half; t++) {
        double th = pow(base, -2.0 * (double)t / (double)R);
        double ang = (double)(p0 + i) * th, c = cos(ang), sn = sin(ang);
        int64_t ia = rot->interleaved ? 2 * t : t;
        int64_t ib = rot->interleaved ? 2 * t + 1 : t + half;
        double xa = v[ia], xb = v[ib];
        v[ia] = xa * c - xb * sn;
        v[ib] = xb * c + xa * sn;
      }
    }
}

/* q [B*H][Lq][D] and k [B*Hkv][Lk][D] rotated as the options say. */
static void rotate_qk(const attn_attend_opts *o, double *q, double *k,
                      int64_t B, int64_t H, int64_t Hkv, int64_t Lq, int64_t Lk,
                      int64_t D) {
  const attn_rotary *rot = &o->rotary;
  if (!rot->on) return;
  int64_t qoff = rot->has_query_offset ? rot->query_offset : Lk - Lq;
  rotate(q, B * H, Lq, D, qoff, rot);
  rotate(k, B * Hkv, Lk, D, 0, rot);
}

/* x rounded to bfloat16 (through float, as the engine holds it). */
static double bf(double x) {
  return (double)attn__bf16_round((float)x);
}

static void bf_all(double *x, size_t n) {
  for (size_t i = 0; i < n; i++) x[i] = bf(x[i]);
}

static int is_bf16(const attn_attend_opts *o) {
  return o->precision == ATTN_PRECISION_BF16;
}

static attn_status ref_core(const ref_in *r, double *out, double *weights) {
  int64_t Lk = r->Lk, group = r->H / r->Hkv;
  double scale =
      r->o->has_scale ? (double)r->o->scale : 1.0 / sqrt((double)r->Dk);
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
          s *= scale;
          if (r->o->softcap > 0.0f) {
            double cap = (double)r->o->softcap;
            s = cap * tanh(s / cap);
          }
          s += additive(r, b, h, i, j);
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
            acc += (is_bf16(r->o) ? bf(p[j]) : p[j]) *
                   r->v[((b * r->Hkv + hk) * Lk + j) * r->Dv + t];
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
static double *densify(const attn_view *v, int64_t n0, int64_t n1, int64_t rows,
                       int64_t cols) {
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
    rotate_qk(&p->o, q, k, p->B, p->H, p->Hkv, p->Lq, p->Lk, p->Dk);
    if (is_bf16(&p->o)) {
      bf_all(q, (size_t)(p->B * p->H * p->Lq * p->Dk));
      bf_all(k, (size_t)(p->B * p->Hkv * p->Lk * p->Dk));
      bf_all(v, (size_t)(p->B * p->Hkv * p->Lk * p->Dv));
    }
    ref_in r = {p->B, p->H, p->Hkv, p->Lq, p->Lk, p->Dk, p->Dv, q, k, v, &p->o};
    s = ref_core(&r, out, weights);
  }
  free(q);
  free(k);
  free(v);
  return s;
}

/* Element (t, o) of W, from its bfloat16 values when it is held in
 * bfloat16 and the call is bf16 (or it has no fp32 values). */
static double w_at(const attn_weight *w, int64_t ld, int64_t t, int64_t o,
                   int bf16) {
  int64_t at = w->layout == ATTN_W_IN_OUT ? t * ld + o : o * ld + t;
  if (w->bf16 && (bf16 || !w->data)) return attn__bf16_f32(w->bf16[at]);
  return w->data[at];
}

/* y[rows, out] = x[rows, in] * W + bias, W as stored by attn_weight; x
 * and W rounded to bf16 when bf16. */
static void ref_project(const float *x, int64_t rows, int64_t in, int64_t outc,
                        const attn_weight *w, const float *bias, double *y,
                        int bf16) {
  int64_t ld = attn__weight_ld(w, in, outc);
  for (int64_t r = 0; r < rows; r++)
    for (int64_t o = 0; o < outc; o++) {
      double acc = bias ? bias[o] : 0.0;
      for (int64_t t = 0; t < in; t++) {
        double wt = w_at(w, ld, t, o, bf16);
        double xt = x[r * in + t];
        if (bf16) {
          wt = bf(wt);
          xt = bf(xt);
        }
        acc += xt * wt;
      }
      y[r * outc + o] = acc;
    }
}

/* [B, L, heads*D] -> [B, heads, L, D] */
static double *split_heads(const double *x, int64_t B, int64_t L, int64_t heads,
                           int64_t D) {
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
  int bf16 = is_bf16(&p.o);
  ref_project(p.xq, p.B * p.Lq, p.E, p.E, &p.wq, p.bq, Q, bf16);
  ref_project(p.xk, p.B * p.Lk, p.kdim, kw, &p.wk, p.bk, K, bf16);
  ref_project(p.xv, p.B * p.Lk, p.vdim, kw, &p.wv, p.bv, V, bf16);
  q4 = split_heads(Q, p.B, p.Lq, p.H, Dh);
  k4 = split_heads(K, p.B, p.Lk, p.Hkv, Dh);
  v4 = split_heads(V, p.B, p.Lk, p.Hkv, Dh);
  o4 = malloc((size_t)(p.B * p.H * p.Lq * Dh) * sizeof *o4);
  if (!q4 || !k4 || !v4 || !o4) goto done;
  rotate_qk(&p.o, q4, k4, p.B, p.H, p.Hkv, p.Lq, p.Lk, Dh);
  if (bf16) {
    bf_all(q4, (size_t)(p.B * p.H * p.Lq * Dh));
    bf_all(k4, (size_t)(p.B * p.Hkv * p.Lk * Dh));
    bf_all(v4, (size_t)(p.B * p.Hkv * p.Lk * Dh));
  }
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
        for (int64_t t = 0; t < p.E; t++) {
          double wt = w_at(&p.wo, ld, t, o, bf16);
          acc += bf16 ? bf(Q[r0 * p.E + t]) * bf(wt) : Q[r0 * p.E + t] * wt;
        }
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

/* ---- sessions: attn_kv_attend's reference -------------------------------- */

/* Key (value when v) c of token j, kv head hk, of a view, as stored. */
static double kv_at(const attn_kv_view *w, int64_t j, int64_t hk, int64_t c,
                    int v) {
  return attn__kv_view_elem(w, j, hk, c, v);
}

/* One query row q (D doubles, turned) at position pos of view w, kv head
 * hk, query head h: out (D) and the lse. */
static void ref_kv_row(const attn_kv_problem *p, const attn_kv_view *w,
                       int64_t hk, int64_t h, int64_t pos, const double *q,
                       double *sc, double *out, double *lse) {
  int64_t D = p->D, lo, hi;
  double scale = p->o.has_scale ? (double)p->o.scale : 1.0 / sqrt((double)D);
  double mx = attn__kv_row_logits(p, w, h, pos, q, scale, sc, &lo, &hi);
  double sum = 0.0;
  for (int64_t c = 0; c < D; c++) out[c] = 0.0;
  for (int64_t j = lo; j <= hi; j++) {
    double e = exp(sc[j - lo] - mx);
    sum += e;
    for (int64_t c = 0; c < D; c++) out[c] += e * kv_at(w, j, hk, c, 1);
  }
  for (int64_t c = 0; c < D && sum > 0.0; c++) out[c] /= sum;
  *lse = sum > 0.0 ? mx + log(sum) : -INFINITY;
}

attn_status attn_ref_kv_attend(const attn_kv_problem *p, double *out,
                               double *lse, attn_diag *d) {
  attn_status s = attn_kv_check(p, d);
  if (s) return s;
  int64_t D = p->D, G = p->H / p->Hkv, most = 1;
  for (int64_t b = 0; b < p->B; b++)
    most = p->kv[b].len > most ? p->kv[b].len : most;
  double *q = malloc((size_t)D * sizeof *q);
  double *sc = malloc((size_t)most * sizeof *sc);
  if (!q || !sc) {
    free(q);
    free(sc);
    return ATTN_ENOMEM;
  }
  for (int64_t b = 0; b < p->B; b++)
    for (int64_t i = 0; i < p->t; i++)
      for (int64_t h = 0; h < p->H; h++) {
        const attn_kv_view *w = &p->kv[b];
        int64_t pos = p->queries_only ? w->len : w->len - p->t + i;
        int64_t at = (b * p->t + i) * p->H + h;
        for (int64_t c = 0; c < D; c++) q[c] = p->q[at * D + c];
        if (p->o.rotary.on) rotate(q, 1, 1, D, pos, &p->o.rotary);
        ref_kv_row(p, w, h / G, h, pos, q, sc, out + at * D, lse + at);
      }
  free(q);
  free(sc);
  return ATTN_OK;
}
