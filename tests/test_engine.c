/* test_engine.c - the engine's fast paths against the double reference.
 *
 * Table-driven: each case is a shape plus options; every case runs on the
 * materialised and (when no weights are wanted) streaming paths, with tiles
 * small enough to cross tile boundaries, on 1 and 3 threads, and is compared
 * with attn_ref_* at |err| <= 1e-5 * (1 + |ref|).  Weights rows must sum to
 * 1 within 1e-5, or be all zero where every key is blocked. */
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "attn/engine.h"
#include "unit.h"

#define TOL 1e-5

/* Internals of src/engine used here: the scalar exp, the choice of row
 * kernels (avx512, avx2, scalar) and of matrix products (avx512, blas), so
 * every set is checked, and gemm.c's products themselves. */
#include "../src/engine/internal.h"

static uint64_t rng_state;
static void rng_seed(uint64_t s) {
  rng_state = s * 0x9E3779B97F4A7C15ull + 1;
}
static uint64_t rng_next(void) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return rng_state;
}
static float rnd(void) { /* uniform in [-1, 1) */
  return (float)((rng_next() >> 40) / (double)(1ull << 24) * 2.0 - 1.0);
}
static int chance(double p) {
  return (rng_next() >> 11) / (double)(1ull << 53) < p;
}
static float *rnd_buf(size_t n) {
  float *p = malloc((n ? n : 1) * sizeof *p);
  for (size_t i = 0; i < n; i++) p[i] = rnd();
  return p;
}

typedef enum { M_NONE, M_BOOL2, M_BOOL4, M_BOOLB, M_ADD2, M_ADD4 } mask_case;
typedef enum { K_NONE, K_BOOL, K_LEN } kpm_case;

typedef struct sdpa_case {
  int B, H, Hkv, Lq, Lk, Dk, Dv;
  int causal;
  mask_case mask;
  kpm_case kpm;
  attn_weights_mode weights;
  int scale;    /* override the scale */
  int full_row; /* force a fully blocked row */
} sdpa_case;

/* Build masks for a case; caller frees the returned buffers. */
typedef struct masks {
  uint8_t *bm, *pad;
  float *am;
  int64_t *len;
} masks;

static void make_masks(const sdpa_case *c, attn_attend_opts *o, masks *m) {
  memset(m, 0, sizeof *m);
  int64_t mb = 1, mh = 1;
  if (c->mask == M_BOOL4 || c->mask == M_ADD4) {
    mb = c->B;
    mh = c->H;
  } else if (c->mask == M_BOOLB) {
    mb = c->B; /* [B,1,Lq,Lk]: broadcast over heads */
  }
  size_t n = (size_t)(mb * mh * c->Lq * c->Lk);
  if (c->mask == M_BOOL2 || c->mask == M_BOOL4 || c->mask == M_BOOLB) {
    m->bm = malloc(n);
    for (size_t i = 0; i < n; i++) m->bm[i] = chance(0.3);
    if (c->full_row) memset(m->bm, 1, (size_t)c->Lk); /* row 0 of b=0,h=0 */
    o->mask = (attn_mask){ATTN_MASK_BOOL, m->bm, mb, mh};
  } else if (c->mask == M_ADD2 || c->mask == M_ADD4) {
    m->am = malloc(n * sizeof *m->am);
    for (size_t i = 0; i < n; i++)
      m->am[i] = chance(0.2) ? -INFINITY : 2.0f * rnd();
    if (c->full_row)
      for (int j = 0; j < c->Lk; j++) m->am[j] = -INFINITY;
    o->mask = (attn_mask){ATTN_MASK_ADD, m->am, mb, mh};
  }
  if (c->kpm == K_BOOL) {
    m->pad = malloc((size_t)(c->B * c->Lk));
    for (int i = 0; i < c->B * c->Lk; i++) m->pad[i] = chance(0.25);
    o->kpm = (attn_key_padding){ATTN_KPM_BOOL, m->pad, NULL};
  } else if (c->kpm == K_LEN) {
    m->len = malloc((size_t)c->B * sizeof *m->len);
    for (int b = 0; b < c->B; b++)
      m->len[b] = (int64_t)(rng_next() % (uint64_t)(c->Lk + 1));
    if (c->full_row) m->len[0] = 0;
    o->kpm = (attn_key_padding){ATTN_KPM_LENGTHS, NULL, m->len};
  }
}

static void free_masks(masks *m) {
  free(m->bm);
  free(m->pad);
  free(m->am);
  free(m->len);
}

/* bf16 runs of the tables (attn_precision): set by the bf16 tests; the
 * cases then ask for ATTN_PRECISION_BF16 and are compared with the bf16
 * reference and with the double reference of the unrounded problem.  The
 * worst errors seen are kept for the report. */
static int bf16_run;
static double bf16_worst_out64, bf16_worst_w64, bf16_worst_outref,
    bf16_worst_wref;
static long bf16_bits_differ, bf16_bits_compared;

/* |got - ref| <= abs + rel |ref| for each element; returns the number of
 * mismatches (reporting the first); *worst (if given) keeps the largest
 * |got - ref| / (abs + rel |ref|) * abs, the error in the bound's units. */
static int compare_tol(const char *what, const float *got, const double *ref,
                       size_t n, const char *ctx, double abs, double rel,
                       double *worst) {
  int bad = 0;
  for (size_t i = 0; i < n; i++) {
    double e = fabs((double)got[i] - ref[i]);
    double lim = abs + rel * fabs(ref[i]);
    if (worst && e / lim * abs > *worst) *worst = e / lim * abs;
    if (!(e <= lim)) {
      if (!bad)
        fprintf(stderr, "%s: %s[%zu] = %.9g, reference %.9g (err %.3g)\n", ctx,
                what, i, got[i], ref[i], e);
      bad++;
    }
  }
  return bad;
}

/* Compare; returns the number of mismatches (reporting the first). */
static int compare(const char *what, const float *got, const double *ref,
                   size_t n, const char *ctx) {
  int bad = 0;
  for (size_t i = 0; i < n; i++) {
    double e = fabs((double)got[i] - ref[i]);
    if (!(e <= TOL * (1.0 + fabs(ref[i])))) {
      if (!bad)
        fprintf(stderr, "%s: %s[%zu] = %.9g, reference %.9g (err %.3g)\n", ctx,
                what, i, got[i], ref[i], e);
      bad++;
    }
  }
  return bad;
}

/* Every row of weights sums to what the reference's does: 1, 0 where every
 * key is blocked, and for the mean the share of heads not fully blocked. */
static int check_rows(const float *w, const double *ref, size_t rows,
                      size_t cols, const char *ctx) {
  int bad = 0;
  for (size_t r = 0; r < rows; r++) {
    double s = 0, sr = 0;
    for (size_t j = 0; j < cols; j++) {
      s += w[r * cols + j];
      sr += ref[r * cols + j];
    }
    /* per head: 1, or 0 for a fully blocked row; the mean over heads: the
     * fraction of heads whose row is not fully blocked */
    double want = sr;
    if (fabs(s - want) > TOL) {
      if (!bad)
        fprintf(stderr, "%s: weights row %zu sums to %.9g, want %g\n", ctx, r,
                s, want);
      bad++;
    }
  }
  return bad;
}

static void case_name(const sdpa_case *c, char *buf, size_t n) {
  snprintf(buf, n,
           "B=%d H=%d Hkv=%d Lq=%d Lk=%d Dk=%d Dv=%d causal=%d mask=%d kpm=%d "
           "w=%d scale=%d full=%d",
           c->B, c->H, c->Hkv, c->Lq, c->Lk, c->Dk, c->Dv, c->causal, c->mask,
           c->kpm, c->weights, c->scale, c->full_row);
}

/* The attention variants of attn_attend_opts (engine.h) on top of a case:
 * causal alignment, sliding window, ALiBi, softcap, rotary positions. */
typedef struct variant_opts {
  int causal; /* attn_causal; overrides the case's */
  int window; /* has_window, with left, right below */
  int64_t left, right;
  int alibi; /* 1: standard slopes; 2: random ones, some < 0 */
  float softcap;
  int rope;       /* rotary on */
  int rope_inter; /* GPT-J pairs */
  int rope_short; /* dims = the largest even value < head dim - 1 */
  int rope_qoff;  /* has_query_offset, query_offset = 5 */
  double rope_base;
} variant_opts;

/* Set the variant's options in o for H heads of Dh values; slopes holds
 * H floats. */
static void apply_variant(const variant_opts *vo, attn_attend_opts *o,
                          int64_t H, int64_t Dh, float *slopes) {
  if (!vo) return;
  o->causal = vo->causal;
  o->has_window = vo->window;
  o->window_left = vo->left;
  o->window_right = vo->right;
  if (vo->alibi == 1) {
    ck_assert_int_eq(attn_alibi_slopes(H, slopes, NULL), ATTN_OK);
  } else if (vo->alibi == 2) {
    for (int64_t h = 0; h < H; h++) slopes[h] = 0.6f * rnd() + 0.2f;
  }
  o->alibi_slopes = vo->alibi ? slopes : NULL;
  o->softcap = vo->softcap;
  o->rotary.on = vo->rope;
  o->rotary.interleaved = vo->rope_inter;
  /* an odd head dim needs explicit (even) dims */
  o->rotary.dims = vo->rope_short ? (Dh - 2 >= 2 ? (Dh - 2) & ~1 : 2)
                                  : (Dh % 2 ? Dh - 1 : 0);
  o->rotary.base = vo->rope_base;
  o->rotary.has_query_offset = vo->rope_qoff;
  o->rotary.query_offset = vo->rope_qoff ? 5 : 0;
}

static void variant_name(const variant_opts *vo, char *buf, size_t n) {
  if (!vo) {
    snprintf(buf, n, "plain");
    return;
  }
  snprintf(buf, n,
           "causal=%d window=%d[%lld,%lld] alibi=%d softcap=%g rope=%d "
           "inter=%d short=%d qoff=%d base=%g",
           vo->causal, vo->window, (long long)vo->left, (long long)vo->right,
           vo->alibi, (double)vo->softcap, vo->rope, vo->rope_inter,
           vo->rope_short, vo->rope_qoff, vo->rope_base);
}

/* Weights the reference gives as exactly 0 (keys outside the band, blocked
 * or padded) must be exactly 0. */
static int exact_zeros(const float *w, const double *ref, size_t n,
                       const char *ctx) {
  int bad = 0;
  for (size_t i = 0; i < n; i++)
    if (ref[i] == 0.0 && w[i] != 0.0f) {
      if (!bad)
        fprintf(stderr, "%s: weights[%zu] = %.9g where the reference is 0\n",
                ctx, i, w[i]);
      bad++;
    }
  return bad;
}

static int run_sdpa_case_v(const sdpa_case *c, const variant_opts *vo,
                           uint64_t seed);

/* bf16 bounds (engine.h, attn_precision): against the double reference of
 * the unrounded problem, outputs within 1e-2 (1 + |ref|) and weights
 * within 4e-3; against the bf16 reference (the same roundings, sums in
 * double), the differences that fp32 sums and the paths' roundings of the
 * probabilities leave (a probability whose fp32 value straddles a bf16
 * rounding boundary moves by one bf16 step). */
#define BF16_OUT_TOL 1e-2
#define BF16_W_TOL 4e-3
/* Outputs: the paths round different probabilities (engine.h), each
 * rounding moving p_j v_j by at most 2^-9 of it: at most 2^-8 sum p|v|,
 * 2^-8 max |v| (+ 2^-8 of |ref| for mha's W_O).  Weights: fp32 sums. */
#define BF16_REF_TOL 4e-3
#define BF16_REF_W_TOL 1e-4
/* With rotary positions the engine rotates q and k in fp32 (from its
 * tables) and the reference in double: an element that straddles a bf16
 * rounding boundary rounds to neighbouring values, moving its score by a
 * 2^-9 step of one product and the weights by a fraction of that (1.5e-4
 * seen in an ASan build, whose fp32 rotation rounds otherwise than the
 * release build's). */
#define BF16_REF_W_TOL_ROPE 1e-3
/* mha: fp32 and double projections round to bf16 differently wherever a
 * value straddles a rounding boundary (Q, K, V, the heads' output: each a
 * 2^-9 step), and W_O sums those: four steps' worth, 2^-6. */
#define BF16_REF_TOL_MHA 0x1p-6

static int bf16_compare(const float *out, const float *w, const double *ro,
                        const double *rw, const double *ro64,
                        const double *rw64, size_t no, size_t nw, size_t lk,
                        double ref_tol, double ref_w_tol, const char *ctx) {
  int bad = compare_tol("out vs double", out, ro64, no, ctx, BF16_OUT_TOL,
                        BF16_OUT_TOL, &bf16_worst_out64) +
            compare_tol("out vs bf16 ref", out, ro, no, ctx, ref_tol, ref_tol,
                        &bf16_worst_outref) +
            exact_zeros(out, ro64, no, ctx); /* fully blocked rows: 0 */
  if (w) {
    bad += compare_tol("weights vs double", w, rw64, nw, ctx, BF16_W_TOL, 0,
                       &bf16_worst_w64) +
           compare_tol("weights vs bf16 ref", w, rw, nw, ctx, ref_w_tol, 0,
                       &bf16_worst_wref);
    bad += check_rows(w, rw64, nw / lk, lk, ctx);
    bad += exact_zeros(w, rw64, nw, ctx);
  }
  return bad;
}

/* Elements of a and b (n floats) whose bits differ. */
static long bits_differ(const float *a, const float *b, size_t n) {
  long d = 0;
  for (size_t i = 0; i < n; i++) d += memcmp(a + i, b + i, sizeof *a) != 0;
  return d;
}

/* Counts for the report: values of the fast kernel's outputs (out, w)
 * whose bits differ from the portable one's (out2, w2); w NULL: none. */
static void bf16_count_bits(const float *out, const float *out2, size_t no,
                            const float *w, const float *w2, size_t nw) {
  bf16_bits_differ += bits_differ(out, out2, no);
  bf16_bits_compared += (long)no;
  if (w) {
    bf16_bits_differ += bits_differ(w, w2, nw);
    bf16_bits_compared += (long)nw;
  }
}

/* 1 when the fast bf16 kernel is in use (then the bf16 cases run again
 * with the portable one and compare bits). */
static int bf16_fast_in_use(void) {
  return strcmp(attn__bf16_name(), "avx512bf16") == 0;
}

/* Run one sdpa case on every path; q is laid out [B, Lq, H*Dk] (heads as
 * column blocks) to exercise strided views, k and v [B, Hkv, Lk, D]. */
static int run_sdpa_case(const sdpa_case *c, uint64_t seed) {
  return run_sdpa_case_v(c, NULL, seed);
}

static int run_sdpa_case_v(const sdpa_case *c, const variant_opts *vo,
                           uint64_t seed) {
  char name[512], ctx[600], vname[200];
  int bad = 0;
  rng_seed(seed);
  case_name(c, name, sizeof name);
  variant_name(vo, vname, sizeof vname);
  snprintf(name + strlen(name), sizeof name - strlen(name), " %s", vname);
  size_t nq = (size_t)c->B * c->Lq * c->H * c->Dk;
  size_t nk = (size_t)c->B * c->Hkv * c->Lk * c->Dk;
  size_t nv = (size_t)c->B * c->Hkv * c->Lk * c->Dv;
  size_t no = (size_t)c->B * c->H * c->Lq * c->Dv;
  size_t nw = c->weights == ATTN_WEIGHTS_PER_HEAD
                  ? (size_t)c->B * c->H * c->Lq * c->Lk
                  : (size_t)c->B * c->Lq * c->Lk;
  float *q = rnd_buf(nq), *k = rnd_buf(nk), *v = rnd_buf(nv);
  for (size_t i = 0; i < nq; i++) q[i] *= 3.0f; /* peakier softmax */
  attn_sdpa_problem p = {
      .B = c->B,
      .H = c->H,
      .Hkv = c->Hkv,
      .Lq = c->Lq,
      .Lk = c->Lk,
      .Dk = c->Dk,
      .Dv = c->Dv,
      .q = {q, (int64_t)c->Lq * c->H * c->Dk, c->Dk, (int64_t)c->H * c->Dk},
      .k = {k, (int64_t)c->Hkv * c->Lk * c->Dk, (int64_t)c->Lk * c->Dk, c->Dk},
      .v = {v, (int64_t)c->Hkv * c->Lk * c->Dv, (int64_t)c->Lk * c->Dv, c->Dv}};
  p.o.causal = c->causal;
  p.o.weights = c->weights;
  if (c->scale) {
    p.o.has_scale = 1;
    p.o.scale = 0.37f;
    /* bf16: the bound is for logits of unit scale (the default scale on
     * inputs of unit variance); 0.37 at Dk = 64 triples them, and bf16's
     * error in a logit grows with it */
    if (bf16_run) p.o.scale = (float)(0.9 / sqrt((double)c->Dk));
  }
  masks m;
  make_masks(c, &p.o, &m);
  float *slopes = malloc((size_t)c->H * sizeof *slopes);
  apply_variant(vo, &p.o, c->H, c->Dk, slopes);
  double *ro = malloc(no * sizeof *ro), *rw = malloc(nw * sizeof *rw);
  double *ro64 = NULL, *rw64 = NULL;
  if (bf16_run) { /* the double reference of the unrounded problem */
    ro64 = malloc(no * sizeof *ro64);
    rw64 = malloc(nw * sizeof *rw64);
    ck_assert_int_eq(attn_ref_sdpa(&p, ro64, c->weights ? rw64 : NULL, NULL),
                     ATTN_OK);
    p.o.precision = ATTN_PRECISION_BF16;
  }
  ck_assert_int_eq(attn_ref_sdpa(&p, ro, c->weights ? rw : NULL, NULL),
                   ATTN_OK);
  float *out = malloc(no * sizeof *out), *w = malloc(nw * sizeof *w);
  float *out2 = malloc(no * sizeof *out2), *w2 = malloc(nw * sizeof *w2);
  attn_path paths[2] = {ATTN_PATH_MATERIALISED, ATTN_PATH_STREAMING};
  int npaths = c->weights == ATTN_WEIGHTS_NONE ? 2 : 1;
  /* default tiles; tiny ones; tiles whose key blocks start on 32-key
   * panels with row blocks that are not multiples of 12 (gemm.c) */
  int tiles[3][2] = {{0, 0}, {2, 3}, {40, 64}};
  for (int pi = 0; pi < npaths; pi++)
    for (int ti = 0; ti < 3; ti++)
      for (int th = 1; th <= 3; th += 2) {
        attn_exec x = {.threads = th,
                       .path = paths[pi],
                       .tile_q = tiles[ti][0],
                       .tile_k = tiles[ti][1]};
        attn_diag d = {{0}};
        for (size_t i = 0; i < no; i++) out[i] = NAN;
        for (size_t i = 0; i < nw; i++) w[i] = NAN;
        attn_mview ov = {out, (int64_t)c->H * c->Lq * c->Dv,
                         (int64_t)c->Lq * c->Dv, c->Dv};
        attn_status s = attn_sdpa(&p, &x, ov, c->weights ? w : NULL, &d);
        snprintf(ctx, sizeof ctx, "%s path=%d tiles=%d threads=%d", name, pi,
                 ti, th);
        if (s != ATTN_OK) {
          fprintf(stderr, "%s: status %s: %s\n", ctx, attn_status_name(s),
                  d.msg);
          bad++;
          continue;
        }
        if (bf16_run) {
          bad += bf16_compare(
              out, c->weights ? w : NULL, ro, rw, ro64, rw64, no, nw,
              (size_t)c->Lk, BF16_REF_TOL,
              p.o.rotary.on ? BF16_REF_W_TOL_ROPE : BF16_REF_W_TOL, ctx);
          if (bf16_fast_in_use()) { /* the portable kernel: the same bits */
            ck_assert(attn__set_bf16("portable"));
            ck_assert_int_eq(
                attn_sdpa(&p, &x, (attn_mview){out2, ov.sb, ov.sh, ov.ld},
                          c->weights ? w2 : NULL, &d),
                ATTN_OK);
            ck_assert(attn__set_bf16("avx512bf16"));
            bf16_count_bits(out, out2, no, c->weights ? w : NULL, w2, nw);
          }
          continue;
        }
        bad += compare("out", out, ro, no, ctx);
        if (c->weights) {
          bad += compare("weights", w, rw, nw, ctx);
          bad += check_rows(w, rw, nw / c->Lk, c->Lk, ctx);
          bad += exact_zeros(w, rw, nw, ctx);
        }
      }
  free(out2);
  free(w2);
  free(ro64);
  free(rw64);
  free(slopes);
  free(q);
  free(k);
  free(v);
  free(ro);
  free(rw);
  free(out);
  free(w);
  free_masks(&m);
  return bad;
}

/* Shapes: B in {1,3}, H in {1,2,8}, Hkv | H, Lq != Lk both ways, Dk != Dv. */
static const int shapes[][7] = {
    /* B  H Hkv Lq  Lk  Dk Dv */
    {1, 1, 1, 1, 1, 4, 4},
    {1, 1, 1, 5, 9, 8, 3},
    {3, 2, 1, 7, 4, 5, 6},
    {3, 2, 2, 6, 6, 16, 16},
    {1, 8, 2, 9, 13, 4, 7},
    {3, 8, 8, 4, 11, 3, 2},
    {1, 8, 4, 17, 5, 6, 9},
    {3, 2, 1, 12, 12, 7, 5},
    {1, 2, 2, 33, 70, 16, 8},
    /* taller than DIAG_ROWS (attention.c): causal row groups, some of them
     * seeing no key at all (Lq > Lk) */
    {1, 2, 1, 200, 230, 8, 8},
    {1, 1, 1, 230, 150, 4, 5},
    /* packed keys (Lq >= 32) with Dk and Dv across 32-wide column blocks */
    {2, 2, 1, 45, 100, 65, 40},
    {1, 1, 1, 64, 64, 64, 64},
};
#define NSHAPES (int)(sizeof shapes / sizeof shapes[0])

START_TEST(test_sdpa_plain) {
  int bad = 0;
  for (int s = 0; s < NSHAPES; s++)
    for (int causal = 0; causal < 2; causal++)
      for (int w = 0; w < 3; w++) {
        sdpa_case c = {shapes[s][0],
                       shapes[s][1],
                       shapes[s][2],
                       shapes[s][3],
                       shapes[s][4],
                       shapes[s][5],
                       shapes[s][6],
                       causal,
                       M_NONE,
                       K_NONE,
                       (attn_weights_mode)w,
                       0,
                       0};
        bad += run_sdpa_case(&c, (uint64_t)(s * 7 + causal * 3 + w));
      }
  ck_assert_int_eq(bad, 0);
}
END_TEST

START_TEST(test_sdpa_masks) {
  int bad = 0;
  for (int s = 0; s < NSHAPES; s++)
    for (int mk = 0; mk <= M_ADD4; mk++)
      for (int kp = 0; kp <= K_LEN; kp++) {
        sdpa_case c = {shapes[s][0],
                       shapes[s][1],
                       shapes[s][2],
                       shapes[s][3],
                       shapes[s][4],
                       shapes[s][5],
                       shapes[s][6],
                       (s + mk) & 1,
                       (mask_case)mk,
                       (kpm_case)kp,
                       (attn_weights_mode)((s + kp) % 3),
                       s & 1,
                       0};
        bad += run_sdpa_case(&c, (uint64_t)(100 + s * 31 + mk * 5 + kp));
      }
  ck_assert_int_eq(bad, 0);
}
END_TEST

START_TEST(test_sdpa_fully_masked_rows) {
  int bad = 0;
  mask_case mks[3] = {M_BOOL2, M_ADD2, M_NONE};
  for (int s = 0; s < NSHAPES; s++)
    for (int mi = 0; mi < 3; mi++)
      for (int w = 0; w < 3; w++) {
        sdpa_case c = {shapes[s][0],
                       shapes[s][1],
                       shapes[s][2],
                       shapes[s][3],
                       shapes[s][4],
                       shapes[s][5],
                       shapes[s][6],
                       0,
                       mks[mi],
                       mks[mi] == M_NONE ? K_LEN : K_NONE,
                       (attn_weights_mode)w,
                       0,
                       1};
        bad += run_sdpa_case(&c, (uint64_t)(900 + s * 13 + mi * 3 + w));
      }
  ck_assert_int_eq(bad, 0);
}
END_TEST

/* Causal with Lq > Lk: the first Lq-Lk rows see no key at all. */
START_TEST(test_sdpa_causal_alignment) {
  float q[4 * 2], k[2 * 2], v[2 * 1] = {10.0f, 20.0f}, out[4], w[4 * 2];
  for (int i = 0; i < 8; i++) q[i] = 0.1f * (float)i;
  for (int i = 0; i < 4; i++) k[i] = 0.0f; /* equal scores */
  attn_sdpa_problem p = {.B = 1,
                         .H = 1,
                         .Hkv = 1,
                         .Lq = 4,
                         .Lk = 2,
                         .Dk = 2,
                         .Dv = 1,
                         .q = {q, 8, 8, 2},
                         .k = {k, 4, 4, 2},
                         .v = {v, 2, 2, 1}};
  p.o.causal = 1;
  p.o.weights = ATTN_WEIGHTS_PER_HEAD;
  ck_assert_int_eq(attn_sdpa(&p, NULL, (attn_mview){out, 4, 4, 1}, w, NULL),
                   ATTN_OK);
  /* row i sees keys j <= i + (Lk - Lq) = i - 2 */
  ck_assert_float_eq(out[0], 0.0f);
  ck_assert_float_eq(out[1], 0.0f);
  ck_assert_float_eq_tol(out[2], 10.0f, 1e-6);
  ck_assert_float_eq_tol(out[3], 15.0f, 1e-5);
  ck_assert_float_eq(w[0], 0.0f);
  ck_assert_float_eq_tol(w[4], 1.0f, 1e-6);
  ck_assert_float_eq(w[5], 0.0f);
  ck_assert_float_eq_tol(w[6], 0.5f, 1e-6);
  /* Lq < Lk: row 0 of 2 sees keys 0..Lk-Lq */
  p.Lq = 1;
  ck_assert_int_eq(attn_sdpa(&p, NULL, (attn_mview){out, 4, 4, 1}, w, NULL),
                   ATTN_OK);
  ck_assert_float_eq_tol(out[0], 15.0f, 1e-5); /* j <= 0 + 1: both keys */
}
END_TEST

/* ---- the variants: causal alignment, window, ALiBi, softcap, RoPE ------- */

/* Each variant once per shape (the table above and two long ones whose
 * bands cross 64-row groups, 512-key tiles and the 32-key panels), windows
 * scaled up on the long ones; masks, key padding, weights, scale and fully
 * blocked rows rotate with the shape. */
static const variant_opts variants[] = {
    /* causal window alibi softcap rope inter short qoff base */
    {ATTN_CAUSAL_TOP_LEFT, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
    {ATTN_CAUSAL_BOTTOM_RIGHT, 1, 2, 0, 0, 0, 0, 0, 0, 0, 0},
    {0, 1, 3, 1, 0, 0, 0, 0, 0, 0, 0},
    {0, 1, 0, 2, 0, 0, 0, 0, 0, 0, 0},
    {0, 1, -1, 3, 0, 0, 0, 0, 0, 0, 0},
    {ATTN_CAUSAL_TOP_LEFT, 1, 5, -1, 0, 0, 0, 0, 0, 0, 0},
    {ATTN_CAUSAL_BOTTOM_RIGHT, 1, -1, 0, 0, 0, 0, 0, 0, 0, 0},
    {0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0},
    {ATTN_CAUSAL_BOTTOM_RIGHT, 1, 4, 0, 2, 0, 0, 0, 0, 0, 0},
    {0, 0, 0, 0, 0, 2.0f, 0, 0, 0, 0, 0},
    {0, 1, 6, -1, 1, 0.7f, 0, 0, 0, 0, 0},
    {0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0},
    {ATTN_CAUSAL_BOTTOM_RIGHT, 0, 0, 0, 0, 0, 1, 1, 1, 1, 500.0},
    {ATTN_CAUSAL_TOP_LEFT, 1, 4, 0, 1, 3.0f, 1, 0, 0, 0, 0},
    {0, 1, 2, 2, 2, 5.0f, 1, 1, 0, 1, 0},
};
#define NVARIANTS (int)(sizeof variants / sizeof variants[0])

static const int long_shapes[][7] = {{1, 2, 1, 700, 650, 16, 16},
                                     {2, 2, 2, 300, 600, 8, 12}};
#define NLONG (int)(sizeof long_shapes / sizeof long_shapes[0])

static const int *shape_at(int s) {
  return s < NSHAPES ? shapes[s] : long_shapes[s - NSHAPES];
}

static int run_variant(int s, int v, uint64_t seed) {
  const int *sh = shape_at(s);
  variant_opts vo = variants[v];
  if (s >= NSHAPES) { /* long: windows of tens of keys */
    if (vo.left > 0) vo.left *= 37;
    if (vo.right > 0) vo.right *= 37;
  }
  int k = s + v;
  sdpa_case c = {sh[0],
                 sh[1],
                 sh[2],
                 sh[3],
                 sh[4],
                 sh[5],
                 sh[6],
                 0,
                 k % 2 ? (mask_case)(k % 6) : M_NONE,
                 (kpm_case)(k % 3),
                 (attn_weights_mode)(k % 3),
                 k % 5 == 0,
                 k % 4 == 1};
  return run_sdpa_case_v(&c, &vo, seed);
}

START_TEST(test_sdpa_variants) {
  int bad = 0;
  for (int s = 0; s < NSHAPES + NLONG; s++)
    for (int v = 0; v < NVARIANTS; v++)
      bad += run_variant(s, v, (uint64_t)(20000 + s * 101 + v));
  ck_assert_int_eq(bad, 0);
}
END_TEST

/* Every variant with every weights mode on one shape with GQA and
 * cross-attention (Lq < Lk, and Lq > Lk: rows that see no key). */
START_TEST(test_sdpa_variants_weights) {
  static const int sh[][7] = {{3, 8, 2, 9, 13, 4, 7}, {1, 4, 2, 40, 21, 6, 6}};
  int bad = 0;
  for (int si = 0; si < 2; si++)
    for (int v = 0; v < NVARIANTS; v++)
      for (int w = 0; w < 3; w++) {
        sdpa_case c = {sh[si][0],
                       sh[si][1],
                       sh[si][2],
                       sh[si][3],
                       sh[si][4],
                       sh[si][5],
                       sh[si][6],
                       0,
                       M_NONE,
                       K_NONE,
                       (attn_weights_mode)w,
                       0,
                       0};
        bad += run_sdpa_case_v(&c, &variants[v],
                               (uint64_t)(26000 + si * 500 + v * 3 + w));
      }
  ck_assert_int_eq(bad, 0);
}
END_TEST

/* Row kernels (softcap's tanh) and matrix products: every set the CPU has,
 * each shape with one variant; the sets it lacks are named as skipped. */
static int run_variants_mixed(uint64_t seed0) {
  int bad = 0;
  for (int s = 0; s < NSHAPES + NLONG; s++)
    bad += run_variant(s, (s * 7) % NVARIANTS, seed0 + (uint64_t)s) +
           run_variant(s, (s * 7 + 3) % NVARIANTS, seed0 + 50 + (uint64_t)s);
  return bad;
}

/* The mixed table under each of three kernel sets chosen by set(); the
 * one in use (was) comes back at the end.  A set the CPU lacks is said
 * skipped for the test func. */
static int variants_per_set(const char *func, int (*set)(const char *),
                            const char *const names[3], const char *was,
                            uint64_t seed0) {
  int bad = 0;
  for (int i = 0; i < 3; i++) {
    if (!set(names[i])) {
      unit_skipped(func, names[i]);
      continue;
    }
    bad += run_variants_mixed(seed0 + 1000 * (uint64_t)i);
  }
  ck_assert(set(was));
  return bad;
}

START_TEST(test_variants_kernel_sets) {
  static const char *const rows[] = {"avx512", "avx2", "scalar"};
  static const char *const gemms[] = {"avx512", "avx2", "blas"};
  int bad = variants_per_set(__func__, attn__set_kernel, rows,
                             attn__kernel_name(), 30000) +
            variants_per_set(__func__, attn__set_gemm, gemms, attn__gemm_name(),
                             34000);
  ck_assert_int_eq(bad, 0);
}
END_TEST

/* Each softcap kernel against double tanh: |cap tanh(x / cap) - ref| <=
 * 4e-7 cap, on every row length 0..70 (vector tails) and over the range
 * where tanh saturates; NaN stays NaN, +-inf gives +-cap. */
START_TEST(test_softcap_kernels) {
  static const char *const names[] = {"avx512", "avx2", "scalar"};
  const char *was = attn__kernel_name();
  float a[4096];
  for (int k = 0; k < 3; k++) {
    if (!attn__set_kernel(names[k])) {
      UNIT_SKIPPED(names[k]);
      continue;
    }
    for (int n = 0; n <= 70; n++) {
      for (int j = 0; j < n; j++) a[j] = 30.0f * (float)j / 70.0f - 15.0f;
      attn__row_softcap(a, n, 1.5f);
      for (int j = 0; j < n; j++) {
        double x = 30.0 * (float)j / 70.0f - 15.0;
        double ref = 1.5 * tanh((double)(float)x / 1.5);
        ck_assert_msg(fabs(a[j] - ref) <= 4e-7 * 1.5, "%s n=%d j=%d: %g vs %g",
                      names[k], n, j, a[j], ref);
      }
    }
    for (int j = 0; j < 4096; j++) a[j] = (float)(j - 2048) / 128.0f;
    attn__row_softcap(a, 4096, 1.0f);
    for (int j = 0; j < 4096; j++) {
      double ref = tanh((double)(j - 2048) / 128.0);
      ck_assert_msg(fabs(a[j] - ref) <= 4e-7, "%s x=%g: %.9g vs %.9g", names[k],
                    (j - 2048) / 128.0, a[j], ref);
    }
    float odd[3] = {NAN, INFINITY, -INFINITY};
    attn__row_softcap(odd, 3, 2.0f);
    ck_assert_msg(isnan(odd[0]), "%s: NaN gives %g", names[k], odd[0]);
    ck_assert_float_eq_tol(odd[1], 2.0f, 1e-6);
    ck_assert_float_eq_tol(odd[2], -2.0f, 1e-6);
  }
  ck_assert(attn__set_kernel(was));
  ck_assert_float_eq(attn__tanhf(0.0f), 0.0f);
}
END_TEST

/* attn_alibi_slopes against the reference get_slopes of the ALiBi paper's
 * code, computed in Python (float32 of its double results): powers of 2
 * and the interleaved ones in between. */
START_TEST(test_alibi_slopes) {
  static const struct {
    int H;
    float s[32];
  } want[] = {
      {1, {3.906250000e-03f}},
      {2, {6.250000000e-02f, 3.906250000e-03f}},
      {3, {6.250000000e-02f, 3.906250000e-03f, 2.500000000e-01f}},
      {5,
       {2.500000000e-01f, 6.250000000e-02f, 1.562500000e-02f, 3.906250000e-03f,
        5.000000000e-01f}},
      {6,
       {2.500000000e-01f, 6.250000000e-02f, 1.562500000e-02f, 3.906250000e-03f,
        5.000000000e-01f, 1.250000000e-01f}},
      {8,
       {5.000000000e-01f, 2.500000000e-01f, 1.250000000e-01f, 6.250000000e-02f,
        3.125000000e-02f, 1.562500000e-02f, 7.812500000e-03f,
        3.906250000e-03f}},
      {12,
       {5.000000000e-01f, 2.500000000e-01f, 1.250000000e-01f, 6.250000000e-02f,
        3.125000000e-02f, 1.562500000e-02f, 7.812500000e-03f, 3.906250000e-03f,
        7.071067691e-01f, 3.535533845e-01f, 1.767766923e-01f,
        8.838834614e-02f}},
      {20, {7.071067691e-01f, 5.000000000e-01f, 3.535533845e-01f,
            2.500000000e-01f, 1.767766923e-01f, 1.250000000e-01f,
            8.838834614e-02f, 6.250000000e-02f, 4.419417307e-02f,
            3.125000000e-02f, 2.209708653e-02f, 1.562500000e-02f,
            1.104854327e-02f, 7.812500000e-03f, 5.524271633e-03f,
            3.906250000e-03f, 8.408964276e-01f, 5.946035385e-01f,
            4.204482138e-01f, 2.973017693e-01f}},
      {32, {8.408964276e-01f, 7.071067691e-01f, 5.946035385e-01f,
            5.000000000e-01f, 4.204482138e-01f, 3.535533845e-01f,
            2.973017693e-01f, 2.500000000e-01f, 2.102241069e-01f,
            1.767766923e-01f, 1.486508846e-01f, 1.250000000e-01f,
            1.051120535e-01f, 8.838834614e-02f, 7.432544231e-02f,
            6.250000000e-02f, 5.255602673e-02f, 4.419417307e-02f,
            3.716272116e-02f, 3.125000000e-02f, 2.627801336e-02f,
            2.209708653e-02f, 1.858136058e-02f, 1.562500000e-02f,
            1.313900668e-02f, 1.104854327e-02f, 9.290680289e-03f,
            7.812500000e-03f, 6.569503341e-03f, 5.524271633e-03f,
            4.645340145e-03f, 3.906250000e-03f}},
  };
  float got[32];
  for (size_t c = 0; c < sizeof want / sizeof want[0]; c++) {
    ck_assert_int_eq(attn_alibi_slopes(want[c].H, got, NULL), ATTN_OK);
    for (int h = 0; h < want[c].H; h++)
      ck_assert_msg(fabsf(got[h] - want[c].s[h]) <= 1e-7f * want[c].s[h],
                    "H=%d slope %d: %.9g, want %.9g", want[c].H, h, got[h],
                    want[c].s[h]);
  }
  attn_diag d = {{0}};
  ck_assert_int_eq(attn_alibi_slopes(0, got, &d), ATTN_EINVAL);
  ck_assert_ptr_nonnull(strstr(d.msg, "0 heads"));
}
END_TEST

/* Top-left causal with Lq > Lk: query i sees keys j <= i, all of them from
 * row Lk - 1 on; bottom-right would show none to the first rows. */
START_TEST(test_sdpa_top_left) {
  float q[4 * 2] = {0}, k[2 * 2] = {0}, v[2] = {10.0f, 20.0f}, out[4], w[8];
  attn_sdpa_problem p = {.B = 1,
                         .H = 1,
                         .Hkv = 1,
                         .Lq = 4,
                         .Lk = 2,
                         .Dk = 2,
                         .Dv = 1,
                         .q = {q, 8, 8, 2},
                         .k = {k, 4, 4, 2},
                         .v = {v, 2, 2, 1}};
  p.o.causal = ATTN_CAUSAL_TOP_LEFT;
  p.o.weights = ATTN_WEIGHTS_PER_HEAD;
  ck_assert_int_eq(attn_sdpa(&p, NULL, (attn_mview){out, 4, 4, 1}, w, NULL),
                   ATTN_OK);
  ck_assert_float_eq_tol(out[0], 10.0f, 1e-6);
  for (int i = 1; i < 4; i++) ck_assert_float_eq_tol(out[i], 15.0f, 1e-5);
  ck_assert_float_eq(w[1], 0.0f);
  /* a window [0, 0] with bottom-right alignment: each row its own key
   * i + Lk - Lq, none for the first two rows */
  p.o.causal = ATTN_CAUSAL_NONE;
  p.o.has_window = 1;
  p.o.window_left = p.o.window_right = 0;
  ck_assert_int_eq(attn_sdpa(&p, NULL, (attn_mview){out, 4, 4, 1}, w, NULL),
                   ATTN_OK);
  ck_assert_float_eq(out[0], 0.0f);
  ck_assert_float_eq(out[1], 0.0f);
  ck_assert_float_eq(out[2], 10.0f);
  ck_assert_float_eq(out[3], 20.0f);
  for (int j = 0; j < 4; j++) ck_assert_float_eq(w[j], 0.0f);
}
END_TEST

/* ---- multi-head attention with projections ----------------------------- */

typedef struct mha_case {
  int B, Lq, Lk, E, H, Hkv, kdim, vdim;
  int cross, bias, torch_layout;
  attn_weights_mode weights;
  int causal;
  mask_case mask;
  kpm_case kpm;
} mha_case;

static int run_mha_case_v(const mha_case *c, const variant_opts *vo,
                          uint64_t seed);

static int run_mha_case(const mha_case *c, uint64_t seed) {
  return run_mha_case_v(c, NULL, seed);
}

static int run_mha_case_v(const mha_case *c, const variant_opts *vo,
                          uint64_t seed) {
  char ctx[700], vname[200];
  int bad = 0;
  rng_seed(seed);
  int Lk = c->cross ? c->Lk : c->Lq, kdim = c->cross ? c->kdim : c->E;
  int vdim = c->cross ? c->vdim : c->E, kw = c->Hkv * (c->E / c->H);
  float *xq = rnd_buf((size_t)c->B * c->Lq * c->E);
  float *xk = c->cross ? rnd_buf((size_t)c->B * Lk * kdim) : NULL;
  float *xv = c->cross ? rnd_buf((size_t)c->B * Lk * vdim) : NULL;
  /* torch layout: pack q, k, v weights [out, in] into one block with a
   * common row stride, like in_proj_weight, when the in dims agree */
  /* torch_layout 1: [out, in] blocks of one in_proj_weight (ld = E) and one
   * in_proj_bias; 2: a textbook packed W_qkv [E, 3E] (ld = 3E).  Both take
   * the fused QKV projection when it is self-attention with Hkv == H. */
  int packed = c->torch_layout && kdim == c->E && vdim == c->E;
  float *wpack = packed ? rnd_buf((size_t)(c->E + 2 * kw) * c->E) : NULL;
  float *bpack = packed && c->bias ? rnd_buf((size_t)(c->E + 2 * kw)) : NULL;
  float *wq = packed ? NULL : rnd_buf((size_t)c->E * c->E);
  float *wk = packed ? NULL : rnd_buf((size_t)kdim * kw);
  float *wv = packed ? NULL : rnd_buf((size_t)vdim * kw);
  float *wo = rnd_buf((size_t)c->E * c->E);
  float *bq = c->bias && !bpack ? rnd_buf((size_t)c->E) : NULL;
  float *bk = c->bias && !bpack ? rnd_buf((size_t)kw) : NULL;
  float *bv = c->bias && !bpack ? rnd_buf((size_t)kw) : NULL;
  float *bo = c->bias ? rnd_buf((size_t)c->E) : NULL;
  if (bf16_run) { /* PyTorch's scale of weights, U(+-sqrt(3 / in)):
                    projections of the inputs' magnitude (engine.h's
                    bound is for those) */
    float *ws[] = {wpack, wq, wk, wv, wo};
    size_t wn[] = {packed ? (size_t)(c->E + 2 * kw) * c->E : 0,
                   packed ? 0 : (size_t)c->E * c->E,
                   packed ? 0 : (size_t)kdim * kw,
                   packed ? 0 : (size_t)vdim * kw, (size_t)c->E * c->E};
    int win[] = {c->E, c->E, kdim, vdim, c->E};
    for (int i = 0; i < 5; i++)
      for (size_t j = 0; j < wn[i]; j++) ws[i][j] *= (float)sqrt(3.0 / win[i]);
  }
  attn_wlayout lay = c->torch_layout == 1 ? ATTN_W_OUT_IN : ATTN_W_IN_OUT;
  attn_mha_problem p = {.B = c->B,
                        .Lq = c->Lq,
                        .Lk = Lk,
                        .E = c->E,
                        .H = c->H,
                        .Hkv = c->Hkv,
                        .kdim = kdim,
                        .vdim = vdim,
                        .xq = xq,
                        .xk = xk,
                        .xv = xv,
                        .bq = bq,
                        .bk = bk,
                        .bv = bv,
                        .bo = bo};
  if (bpack) {
    p.bq = bpack;
    p.bk = bpack + c->E;
    p.bv = bpack + c->E + kw;
  }
  if (packed && c->torch_layout == 1) {
    p.wq = (attn_weight){wpack, lay, c->E, NULL};
    p.wk = (attn_weight){wpack + (size_t)c->E * c->E, lay, c->E, NULL};
    p.wv = (attn_weight){wpack + (size_t)(c->E + kw) * c->E, lay, c->E, NULL};
  } else if (packed) { /* [E, E + 2kw] row-major, column blocks */
    int64_t ld = c->E + 2 * kw;
    p.wq = (attn_weight){wpack, lay, ld, NULL};
    p.wk = (attn_weight){wpack + c->E, lay, ld, NULL};
    p.wv = (attn_weight){wpack + c->E + kw, lay, ld, NULL};
  } else {
    p.wq = (attn_weight){wq, lay, 0, NULL};
    p.wk = (attn_weight){wk, lay, 0, NULL};
    p.wv = (attn_weight){wv, lay, 0, NULL};
  }
  p.wo = (attn_weight){wo, lay, 0, NULL};
  p.o.weights = c->weights;
  p.o.causal = c->causal;
  sdpa_case sc = {c->B,      c->H,    c->Hkv, c->Lq,      Lk, 1, 1,
                  c->causal, c->mask, c->kpm, c->weights, 0,  0};
  masks m;
  make_masks(&sc, &p.o, &m);
  float *slopes = malloc((size_t)c->H * sizeof *slopes);
  apply_variant(vo, &p.o, c->H, c->E / c->H, slopes);
  variant_name(vo, vname, sizeof vname);
  size_t no = (size_t)c->B * c->Lq * c->E;
  size_t nw = c->weights == ATTN_WEIGHTS_PER_HEAD
                  ? (size_t)c->B * c->H * c->Lq * Lk
                  : (size_t)c->B * c->Lq * Lk;
  double *ro = malloc(no * sizeof *ro), *rw = malloc(nw * sizeof *rw);
  float *out = malloc(no * sizeof *out), *w = malloc(nw * sizeof *w);
  float *out2 = malloc(no * sizeof *out2), *w2 = malloc(nw * sizeof *w2);
  double *ro64 = NULL, *rw64 = NULL;
  if (bf16_run) { /* the double reference of the unrounded problem */
    ro64 = malloc(no * sizeof *ro64);
    rw64 = malloc(nw * sizeof *rw64);
    ck_assert_int_eq(attn_ref_mha(&p, ro64, c->weights ? rw64 : NULL, NULL),
                     ATTN_OK);
    p.o.precision = ATTN_PRECISION_BF16;
  }
  ck_assert_int_eq(attn_ref_mha(&p, ro, c->weights ? rw : NULL, NULL), ATTN_OK);
  attn_bytes by;
  ck_assert_int_eq(attn_mha_bytes(&p, NULL, &by, NULL), ATTN_OK);
  ck_assert_uint_eq(by.out, no * sizeof(float));
  ck_assert_uint_eq(by.weights, c->weights ? nw * sizeof(float) : 0);
  attn_path paths[2] = {ATTN_PATH_MATERIALISED, ATTN_PATH_STREAMING};
  for (int pi = 0; pi < (c->weights ? 1 : 2); pi++)
    for (int th = 1; th <= 2; th++) {
      attn_exec x = {
          .threads = th, .path = paths[pi], .tile_q = 3, .tile_k = 4};
      attn_diag d = {{0}};
      snprintf(ctx, sizeof ctx,
               "mha B=%d Lq=%d Lk=%d E=%d H=%d Hkv=%d kdim=%d vdim=%d cross=%d "
               "bias=%d torch=%d w=%d causal=%d mask=%d kpm=%d path=%d th=%d "
               "%s",
               c->B, c->Lq, Lk, c->E, c->H, c->Hkv, kdim, vdim, c->cross,
               c->bias, c->torch_layout, c->weights, c->causal, c->mask, c->kpm,
               pi, th, vname);
      attn_status s = attn_mha(&p, &x, out, c->weights ? w : NULL, &d);
      if (s != ATTN_OK) {
        fprintf(stderr, "%s: %s %s\n", ctx, attn_status_name(s), d.msg);
        bad++;
        continue;
      }
      if (bf16_run) {
        bad += bf16_compare(
            out, c->weights ? w : NULL, ro, rw, ro64, rw64, no, nw, (size_t)Lk,
            BF16_REF_TOL_MHA,
            p.o.rotary.on ? BF16_REF_W_TOL_ROPE : BF16_REF_W_TOL, ctx);
        if (bf16_fast_in_use()) { /* the portable kernel: the same bits */
          ck_assert(attn__set_bf16("portable"));
          ck_assert_int_eq(attn_mha(&p, &x, out2, c->weights ? w2 : NULL, &d),
                           ATTN_OK);
          ck_assert(attn__set_bf16("avx512bf16"));
          bf16_count_bits(out, out2, no, c->weights ? w : NULL, w2, nw);
        }
        continue;
      }
      bad += compare("out", out, ro, no, ctx);
      if (c->weights) {
        bad += compare("weights", w, rw, nw, ctx);
        bad += exact_zeros(w, rw, nw, ctx);
      }
    }
  free(out2);
  free(w2);
  free(ro64);
  free(rw64);
  free(slopes);
  free(xq);
  free(xk);
  free(xv);
  free(wpack);
  free(bpack);
  free(wq);
  free(wk);
  free(wv);
  free(wo);
  free(bq);
  free(bk);
  free(bv);
  free(bo);
  free(ro);
  free(rw);
  free(out);
  free(w);
  free_masks(&m);
  return bad;
}

static int run_mha_table(void);

START_TEST(test_mha_table) {
  ck_assert_int_eq(run_mha_table(), 0);
}
END_TEST

static int run_mha_table(void) {
  static const mha_case cases[] = {
      /* B Lq Lk E  H Hkv kd vd cross bias torch weights causal mask kpm */
      {1, 5, 5, 8, 2, 2, 8, 8, 0, 1, 0, ATTN_WEIGHTS_NONE, 0, M_NONE, K_NONE},
      {3, 7, 7, 16, 8, 8, 16, 16, 0, 1, 1, ATTN_WEIGHTS_PER_HEAD, 0, M_NONE,
       K_NONE},
      {3, 7, 7, 16, 8, 2, 16, 16, 0, 0, 1, ATTN_WEIGHTS_MEAN, 1, M_NONE,
       K_BOOL},
      {1, 6, 9, 12, 3, 1, 5, 7, 1, 1, 0, ATTN_WEIGHTS_NONE, 1, M_ADD2, K_NONE},
      {3, 9, 4, 12, 2, 2, 5, 7, 1, 1, 1, ATTN_WEIGHTS_PER_HEAD, 1, M_BOOL4,
       K_LEN},
      {1, 4, 11, 16, 8, 4, 16, 16, 1, 0, 1, ATTN_WEIGHTS_MEAN, 0, M_BOOL2,
       K_BOOL},
      {3, 13, 13, 24, 4, 2, 24, 24, 0, 1, 0, ATTN_WEIGHTS_NONE, 0, M_ADD4,
       K_LEN},
      {1, 1, 1, 4, 1, 1, 4, 4, 0, 1, 1, ATTN_WEIGHTS_PER_HEAD, 1, M_NONE,
       K_NONE},
      {3, 10, 6, 32, 8, 8, 20, 12, 1, 1, 1, ATTN_WEIGHTS_NONE, 0, M_NONE,
       K_BOOL},
      /* packed textbook W_qkv [E, 3E]: fused projection */
      {3, 9, 9, 16, 4, 4, 16, 16, 0, 1, 2, ATTN_WEIGHTS_PER_HEAD, 1, M_NONE,
       K_NONE},
      {1, 600, 600, 16, 2, 2, 16, 16, 0, 0, 2, ATTN_WEIGHTS_NONE, 0, M_BOOL2,
       K_NONE},
      /* packed with GQA: not fusable, separate projections */
      {1, 5, 5, 16, 4, 2, 16, 16, 0, 1, 2, ATTN_WEIGHTS_MEAN, 0, M_NONE,
       K_NONE},
      {3, 7, 7, 16, 4, 4, 16, 16, 0, 1, 1, ATTN_WEIGHTS_NONE, 1, M_NONE, K_LEN},
      /* [out, in] weights over >= 32 rows: packed for the NT kernel */
      {2, 40, 50, 24, 4, 2, 20, 36, 1, 1, 1, ATTN_WEIGHTS_PER_HEAD, 0, M_NONE,
       K_NONE},
      {1, 70, 70, 32, 4, 4, 32, 32, 0, 0, 1, ATTN_WEIGHTS_NONE, 1, M_NONE,
       K_NONE},
  };
  int bad = 0;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    bad += run_mha_case(&cases[i], 7000 + i);
  return bad;
}

/* Inputs whose rows are 4 KiB apart (d_model 1024) are copied for the
 * projections' tiles (attention.c, proj_ctx.xf): the same bits as read in
 * place, for [out, in] weights (packed for the NT kernel) and [in, out]
 * ones, over two chunks of rows, on 1 and 2 threads; and near the double
 * reference. */
START_TEST(test_mha_rows_copied_same_bits) {
  enum { E = 1024, H = 8, L = 136 };
  size_t nx = (size_t)L * E, nw = (size_t)E * E;
  rng_seed(99);
  float *x = rnd_buf(nx), *w[4], *out[2];
  double *ref = malloc(nx * sizeof *ref);
  for (int i = 0; i < 4; i++) { /* U(+-sqrt(3 / E)), as PyTorch's */
    w[i] = rnd_buf(nw);
    for (size_t j = 0; j < nw; j++) w[i][j] *= (float)sqrt(3.0 / E);
  }
  for (int i = 0; i < 2; i++) out[i] = malloc(nx * sizeof *out[i]);
  for (int lay = 0; lay < 2; lay++) {
    attn_wlayout wl = lay ? ATTN_W_OUT_IN : ATTN_W_IN_OUT;
    attn_mha_problem p = {.B = 1,
                          .Lq = L,
                          .Lk = L,
                          .E = E,
                          .H = H,
                          .Hkv = H,
                          .kdim = E,
                          .vdim = E,
                          .xq = x,
                          .xk = x,
                          .xv = x};
    p.wq = (attn_weight){w[0], wl, 0, NULL};
    p.wk = (attn_weight){w[1], wl, 0, NULL};
    p.wv = (attn_weight){w[2], wl, 0, NULL};
    p.wo = (attn_weight){w[3], wl, 0, NULL};
    p.o.causal = lay;
    ck_assert_int_eq(attn_ref_mha(&p, ref, NULL, NULL), ATTN_OK);
    for (int th = 1; th <= 2; th++) {
      attn_exec ex = {.threads = th};
      for (int copy = 0; copy < 2; copy++) {
        int was = attn__set_proj_copy(copy);
        ck_assert_int_eq(attn_mha(&p, &ex, out[copy], NULL, NULL), ATTN_OK);
        attn__set_proj_copy(was);
      }
      ck_assert_msg(memcmp(out[0], out[1], nx * sizeof(float)) == 0,
                    "layout %d, %d threads: copied rows change the bits", lay,
                    th);
      for (size_t i = 0; i < nx; i++)
        ck_assert_msg(fabs(out[1][i] - ref[i]) <= 1e-5 * (1 + fabs(ref[i])),
                      "layout %d, %d threads: out[%zu] %.9g, reference %.9g",
                      lay, th, i, out[1][i], ref[i]);
    }
  }
  for (int i = 0; i < 4; i++) free(w[i]);
  free(out[0]);
  free(out[1]);
  free(x);
  free(ref);
}
END_TEST

/* The variants through attn_mha: rotary positions after the projections
 * (the fused QKV buffer, separate ones with GQA, cross-attention with a
 * query offset), with the other variants, weights and masks. */
START_TEST(test_mha_variants) {
  static const mha_case cases[] = {
      /* B Lq Lk E  H Hkv kd vd cross bias torch weights causal mask kpm */
      {3, 9, 9, 16, 4, 4, 16, 16, 0, 1, 2, ATTN_WEIGHTS_PER_HEAD, 0, M_NONE,
       K_NONE},
      {1, 70, 70, 32, 4, 4, 32, 32, 0, 0, 1, ATTN_WEIGHTS_NONE, 0, M_NONE,
       K_NONE},
      {3, 7, 7, 16, 8, 2, 16, 16, 0, 0, 1, ATTN_WEIGHTS_MEAN, 0, M_NONE,
       K_BOOL},
      {1, 6, 9, 12, 3, 1, 5, 7, 1, 1, 0, ATTN_WEIGHTS_NONE, 0, M_ADD2, K_NONE},
      {3, 9, 4, 12, 2, 2, 5, 7, 1, 1, 1, ATTN_WEIGHTS_PER_HEAD, 0, M_BOOL4,
       K_LEN},
      {2, 40, 50, 24, 4, 2, 20, 36, 1, 1, 1, ATTN_WEIGHTS_PER_HEAD, 0, M_NONE,
       K_NONE},
      {1, 300, 300, 16, 2, 2, 16, 16, 0, 1, 2, ATTN_WEIGHTS_NONE, 0, M_NONE,
       K_LEN},
  };
  int bad = 0;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    for (int v = 0; v < NVARIANTS; v++)
      bad += run_mha_case_v(&cases[i], &variants[v], 40000 + i * 100 + v);
  ck_assert_int_eq(bad, 0);
}
END_TEST

/* ---- misuse: every bad input is a status, with a message --------------- */

typedef struct tiny {
  float q[2 * 4], k[3 * 4], v[3 * 2], out[2 * 2], w[2 * 3];
  attn_sdpa_problem p;
} tiny;

static void tiny_init(tiny *t) {
  for (int i = 0; i < 8; i++) t->q[i] = 0.5f;
  for (int i = 0; i < 12; i++) t->k[i] = 0.25f;
  for (int i = 0; i < 6; i++) t->v[i] = 1.0f;
  t->p = (attn_sdpa_problem){.B = 1,
                             .H = 1,
                             .Hkv = 1,
                             .Lq = 2,
                             .Lk = 3,
                             .Dk = 4,
                             .Dv = 2,
                             .q = {t->q, 8, 8, 4},
                             .k = {t->k, 12, 12, 4},
                             .v = {t->v, 6, 6, 2}};
}

static attn_status tiny_run(tiny *t, attn_diag *d) {
  return attn_sdpa(&t->p, NULL, (attn_mview){t->out, 4, 4, 2},
                   t->p.o.weights ? t->w : NULL, d);
}

#define EXPECT(status, substr)                                               \
  do {                                                                       \
    attn_diag d_ = {{0}};                                                    \
    attn_status s_ = tiny_run(&t, &d_);                                      \
    ck_assert_msg(s_ == (status), "got %s (%s), want %s",                    \
                  attn_status_name(s_), d_.msg, attn_status_name(status));   \
    ck_assert_msg(strstr(d_.msg, substr), "message '%s' lacks '%s'", d_.msg, \
                  substr);                                                   \
  } while (0)

/* One buffer [3][4] read as query, key and value.  The finiteness checks
 * skip a view only when it covers the same elements as one already
 * checked, and aliasing changes no bit of the answer. */
START_TEST(test_sdpa_aliased_inputs) {
  float x[12], xk[12], xv[12], out[12], ref[12];
  attn_diag d = {{0}};
  for (int i = 0; i < 12; i++) x[i] = 0.125f * (float)(i % 5) - 0.25f;
  memcpy(xk, x, sizeof x);
  memcpy(xv, x, sizeof x);
  attn_sdpa_problem p = {.B = 1,
                         .H = 1,
                         .Hkv = 1,
                         .Lq = 3,
                         .Lk = 3,
                         .Dk = 4,
                         .Dv = 4,
                         .q = {x, 12, 12, 4},
                         .k = {xk, 12, 12, 4},
                         .v = {xv, 12, 12, 4}};
  attn_mview o = {out, 12, 12, 4};
  ck_assert_int_eq(attn_sdpa(&p, NULL, (attn_mview){ref, 12, 12, 4}, NULL, &d),
                   ATTN_OK);
  p.k.data = x;
  p.v.data = x;
  ck_assert_int_eq(attn_sdpa(&p, NULL, o, NULL, &d), ATTN_OK);
  ck_assert_mem_eq(out, ref, sizeof out);

  x[9] = NAN; /* row 2: all three views see it; the query is named */
  ck_assert_int_eq(attn_sdpa(&p, NULL, o, NULL, &d), ATTN_ENONFINITE);
  ck_assert_msg(strstr(d.msg, "query contains NaN or Inf (row 2 of"), "%s",
                d.msg);
  p.Lq = 2; /* same pointer and strides, but the key has a row more */
  ck_assert_int_eq(attn_sdpa(&p, NULL, o, NULL, &d), ATTN_ENONFINITE);
  ck_assert_msg(strstr(d.msg, "key contains NaN or Inf (row 2 of"), "%s",
                d.msg);
  x[9] = 0.0f;
  x[11] = INFINITY; /* column 3: the value's (Dv 4), not the key's (Dk 2) */
  p.Lq = 3;
  p.Dk = 2;
  ck_assert_int_eq(attn_sdpa(&p, NULL, o, NULL, &d), ATTN_ENONFINITE);
  ck_assert_msg(strstr(d.msg, "value contains NaN or Inf (row 2 of"), "%s",
                d.msg);
}
END_TEST

/* Inputs of a million floats or more are scanned for NaN and Inf on the
 * call's threads: a value anywhere (the last row of a head in the middle,
 * heads side by side or head by head, the last column of the value only)
 * is found, in the right row, with 1 and 2 threads. */
START_TEST(test_sdpa_nonfinite_threads) {
  enum { H = 4, L = 4096, D = 64 };
  size_t n = (size_t)H * L * D;
  float *q = calloc(n, sizeof *q), *k = calloc(n, sizeof *k),
        *v = calloc(n, sizeof *v), *o = malloc(n * sizeof *o);
  attn_diag d = {{0}};
  char want[96];
  for (int layout = 0; layout < 2; layout++)
    for (int threads = 1; threads <= 2; threads++) {
      /* [L, H * D] (heads side by side) or [H, L, D] */
      int64_t sh = layout ? (int64_t)L * D : D, ld = layout ? D : H * D;
      attn_sdpa_problem p = {
          1,  H, H, L, L, D, D, {q, 0, sh, ld}, {k, 0, sh, ld}, {v, 0, sh, ld},
          {0}};
      attn_exec x = {.threads = threads};
      attn_mview out = {o, 0, sh, ld};
      size_t at = (size_t)2 * sh + (size_t)(L - 1) * ld; /* head 2, last row */
      k[at + 5] = NAN;
      ck_assert_int_eq(attn_sdpa(&p, &x, out, NULL, &d), ATTN_ENONFINITE);
      snprintf(want, sizeof want, "key contains NaN or Inf (row %d of",
               2 * L + L - 1);
      ck_assert_msg(strstr(d.msg, want), "%s (threads %d)", d.msg, threads);
      k[at + 5] = 0.0f;
      v[at + D - 1] = -INFINITY;
      p.Dk = D - 1; /* the key's last column is not read */
      ck_assert_int_eq(attn_sdpa(&p, &x, out, NULL, &d), ATTN_ENONFINITE);
      snprintf(want, sizeof want, "value contains NaN or Inf (row %d of",
               2 * L + L - 1);
      ck_assert_msg(strstr(d.msg, want), "%s (threads %d)", d.msg, threads);
      v[at + D - 1] = 0.0f;
    }
  free(q);
  free(k);
  free(v);
  free(o);
}
END_TEST

START_TEST(test_sdpa_misuse) {
  tiny t;
  uint8_t bm[6] = {0};
  float am[6] = {0};
  int64_t len[1] = {4};
  tiny_init(&t);
  ck_assert_int_eq(tiny_run(&t, NULL), ATTN_OK);
  t.p.H = 3, t.p.Hkv = 2;
  EXPECT(ATTN_ESHAPE, "not a multiple of Hkv");
  tiny_init(&t);
  t.p.Lk = 0;
  EXPECT(ATTN_ESHAPE, "Lk is 0");
  tiny_init(&t);
  t.p.Lq = -1;
  EXPECT(ATTN_ESHAPE, "Lq");
  tiny_init(&t);
  t.p.k.ld = 3;
  EXPECT(ATTN_ESHAPE, "key: row stride 3");
  tiny_init(&t);
  t.p.v.data = NULL;
  EXPECT(ATTN_EINVAL, "value");
  tiny_init(&t);
  t.q[5] = NAN; /* row 1 of 2: the whole-matrix pass, then the rows */
  EXPECT(ATTN_ENONFINITE, "query contains NaN or Inf (row 1 of");
  tiny_init(&t);
  t.k[11] = INFINITY;
  EXPECT(ATTN_ENONFINITE, "key contains NaN or Inf (row 2 of");
  tiny_init(&t);
  t.v[0] = -INFINITY;
  EXPECT(ATTN_ENONFINITE, "value contains NaN or Inf (row 0 of");
  tiny_init(&t);
  t.p.o.mask = (attn_mask){ATTN_MASK_BOOL, bm, 2, 1};
  EXPECT(ATTN_ESHAPE, "attn_mask: dim 0");
  tiny_init(&t);
  t.p.o.mask = (attn_mask){ATTN_MASK_BOOL, bm, 1, 4};
  EXPECT(ATTN_ESHAPE, "attn_mask: dim 1");
  tiny_init(&t);
  am[2] = NAN;
  t.p.o.mask = (attn_mask){ATTN_MASK_ADD, am, 1, 1};
  EXPECT(ATTN_ENONFINITE, "attn_mask: element 2 is NaN");
  am[2] = INFINITY;
  EXPECT(ATTN_ENONFINITE, "+inf");
  am[2] = -INFINITY; /* allowed: blocks */
  ck_assert_int_eq(tiny_run(&t, NULL), ATTN_OK);
  tiny_init(&t);
  t.p.o.kpm = (attn_key_padding){ATTN_KPM_LENGTHS, NULL, len};
  EXPECT(ATTN_EINVAL, "key_lengths[0] is 4");
  tiny_init(&t);
  t.p.o.has_scale = 1;
  t.p.o.scale = NAN;
  EXPECT(ATTN_EINVAL, "scale");
  /* the variants: each invalid setting says why */
  float slopes[1] = {NAN};
  tiny_init(&t);
  t.p.o.causal = 3;
  EXPECT(ATTN_EINVAL, "causal is 3; expected 0 (none), 1 (bottom-right) or 2");
  tiny_init(&t);
  t.p.o.has_window = 1;
  t.p.o.window_left = -2;
  EXPECT(ATTN_EINVAL, "window left is -2; a window bound is -1 (unbounded)");
  t.p.o.window_left = 4;
  t.p.o.window_right = -5;
  EXPECT(ATTN_EINVAL, "window right is -5");
  t.p.o.window_right = 1;
  t.p.o.causal = ATTN_CAUSAL_TOP_LEFT;
  EXPECT(ATTN_EINVAL, "window right is 1 with causal attention");
  t.p.o.window_right = 0;
  ck_assert_int_eq(tiny_run(&t, NULL), ATTN_OK);
  tiny_init(&t);
  t.p.o.softcap = -1.0f;
  EXPECT(ATTN_EINVAL, "softcap is -1; it must be a finite number > 0");
  t.p.o.softcap = INFINITY;
  EXPECT(ATTN_EINVAL, "softcap is inf");
  t.p.o.softcap = NAN;
  EXPECT(ATTN_EINVAL, "softcap is nan");
  tiny_init(&t);
  t.p.o.alibi_slopes = slopes;
  EXPECT(ATTN_EINVAL, "alibi slope 0 (of 1 heads) is nan; slopes must be");
  slopes[0] = -INFINITY;
  EXPECT(ATTN_EINVAL, "is -inf");
  tiny_init(&t);
  t.p.o.rotary.on = 1;
  t.p.o.rotary.dims = 3;
  EXPECT(ATTN_EINVAL,
         "rotary dims is 3; it must be even and at most the head "
         "dim 4");
  t.p.o.rotary.dims = 6;
  EXPECT(ATTN_EINVAL, "rotary dims is 6");
  t.p.o.rotary.dims = -2;
  EXPECT(ATTN_EINVAL, "rotary dims is -2");
  t.p.o.rotary.dims = 2;
  t.p.o.rotary.base = 1.0;
  EXPECT(ATTN_EINVAL, "rotary base is 1; it must be a finite number > 1");
  t.p.o.rotary.base = 0.0;
  t.p.o.rotary.has_query_offset = 1;
  t.p.o.rotary.query_offset = (int64_t)1 << 40;
  EXPECT(ATTN_EINVAL, "rotary query_offset is 1099511627776");
  t.p.o.rotary.query_offset = -7;
  ck_assert_int_eq(tiny_run(&t, NULL), ATTN_OK);
  tiny_init(&t);
  t.p.Dk = 3;
  t.p.o.rotary.on = 1;
  EXPECT(ATTN_EINVAL, "rotary dims defaults to the head dim, 3, which is odd");
  /* the caller's query and key are never rotated in place */
  tiny_init(&t);
  for (int i = 0; i < 8; i++) t.q[i] = 0.1f * (float)i;
  t.p.o.rotary.on = 1;
  ck_assert_int_eq(tiny_run(&t, NULL), ATTN_OK);
  for (int i = 0; i < 8; i++) ck_assert_float_eq(t.q[i], 0.1f * (float)i);
  for (int i = 0; i < 12; i++) ck_assert_float_eq(t.k[i], 0.25f);
  tiny_init(&t);
  t.p.o.weights = ATTN_WEIGHTS_PER_HEAD;
  attn_exec x = {.path = ATTN_PATH_STREAMING};
  attn_diag d = {{0}};
  ck_assert_int_eq(attn_sdpa(&t.p, &x, (attn_mview){t.out, 4, 4, 2}, t.w, &d),
                   ATTN_EINVAL);
  ck_assert_ptr_nonnull(strstr(d.msg, "streaming"));
  ck_assert_int_eq(
      attn_sdpa(&t.p, NULL, (attn_mview){t.out, 4, 4, 2}, NULL, NULL),
      ATTN_EINVAL);
  ck_assert_int_eq(
      attn_sdpa(NULL, NULL, (attn_mview){t.out, 4, 4, 2}, NULL, NULL),
      ATTN_EINVAL);
}
END_TEST

START_TEST(test_mha_misuse) {
  float x[2 * 4], w[4 * 4], b[4], out[8];
  for (int i = 0; i < 16; i++) w[i] = 0.1f;
  for (int i = 0; i < 8; i++) x[i] = 0.2f;
  for (int i = 0; i < 4; i++) b[i] = 0.0f;
  attn_weight W = {w, ATTN_W_IN_OUT, 0, NULL};
  attn_mha_problem p = {.B = 1,
                        .Lq = 2,
                        .E = 4,
                        .H = 2,
                        .Hkv = 2,
                        .xq = x,
                        .wq = W,
                        .wk = W,
                        .wv = W,
                        .wo = W,
                        .bq = b};
  attn_diag d = {{0}};
  ck_assert_int_eq(attn_mha(&p, NULL, out, NULL, &d), ATTN_OK);
  p.H = 3;
  ck_assert_int_eq(attn_mha(&p, NULL, out, NULL, &d), ATTN_ESHAPE);
  ck_assert_ptr_nonnull(strstr(d.msg, "not divisible by num_heads"));
  p.H = 2, p.Hkv = 4;
  ck_assert_int_eq(attn_mha(&p, NULL, out, NULL, &d), ATTN_ESHAPE);
  ck_assert_ptr_nonnull(strstr(d.msg, "num_kv_heads"));
  p.Hkv = 2;
  p.wk.data = NULL;
  ck_assert_int_eq(attn_mha(&p, NULL, out, NULL, &d), ATTN_EINVAL);
  ck_assert_ptr_nonnull(strstr(d.msg, "w_k"));
  p.wk = W;
  b[3] = NAN;
  ck_assert_int_eq(attn_mha(&p, NULL, out, NULL, &d), ATTN_ENONFINITE);
  ck_assert_ptr_nonnull(strstr(d.msg, "b_q"));
  b[3] = 0.0f;
  w[5] = INFINITY;
  ck_assert_int_eq(attn_mha(&p, NULL, out, NULL, &d), ATTN_ENONFINITE);
  ck_assert_ptr_nonnull(strstr(d.msg, "w_q"));
  w[5] = 0.1f;
  p.Lq = 0;
  ck_assert_int_eq(attn_mha(&p, NULL, out, NULL, &d), ATTN_ESHAPE);
  p.Lq = 2;
  p.o.weights = ATTN_WEIGHTS_MEAN;
  ck_assert_int_eq(attn_mha(&p, NULL, out, NULL, &d), ATTN_EINVAL);
  p.o.weights = ATTN_WEIGHTS_NONE;
  p.E = (int64_t)1 << 40;
  ck_assert_int_eq(attn_mha_bytes(&p, NULL, &(attn_bytes){0}, &d),
                   ATTN_ETOOBIG);
}
END_TEST

/* Same inputs, same bits, whatever the thread count (1 or threads). */
static void check_deterministic(attn_precision prec, uint64_t seed,
                                int threads) {
  sdpa_case c = {3, 8, 2, 40, 70, 16, 16, 1, M_ADD2, K_BOOL, ATTN_WEIGHTS_NONE,
                 0, 0};
  rng_seed(seed);
  size_t nq = (size_t)3 * 8 * 40 * 16, nk = (size_t)3 * 2 * 70 * 16;
  float *q = rnd_buf(nq), *k = rnd_buf(nk), *v = rnd_buf(nk);
  float *o1 = malloc(nq * 4), *o2 = malloc(nq * 4);
  attn_sdpa_problem p = {.B = 3,
                         .H = 8,
                         .Hkv = 2,
                         .Lq = 40,
                         .Lk = 70,
                         .Dk = 16,
                         .Dv = 16,
                         .q = {q, 8 * 40 * 16, 40 * 16, 16},
                         .k = {k, 2 * 70 * 16, 70 * 16, 16},
                         .v = {v, 2 * 70 * 16, 70 * 16, 16}};
  masks m;
  p.o.causal = 1;
  p.o.precision = prec;
  make_masks(&c, &p.o, &m);
  attn_mview ov1 = {o1, 8 * 40 * 16, 40 * 16, 16}, ov2 = ov1;
  ov2.data = o2;
  attn_exec x1 = {.threads = 1}, x2 = {.threads = threads};
  ck_assert_int_eq(attn_sdpa(&p, &x1, ov1, NULL, NULL), ATTN_OK);
  ck_assert_int_eq(attn_sdpa(&p, &x2, ov2, NULL, NULL), ATTN_OK);
  ck_assert_int_eq(memcmp(o1, o2, nq * 4), 0);
  free(q);
  free(k);
  free(v);
  free(o1);
  free(o2);
  free_masks(&m);
}

/* The streaming core copies a unit's query rows and packs each key head's
 * values when heads sit side by side ([L, H * D], rows H * D floats
 * apart): the same numbers laid out head by head ([H, L, D]) give the same
 * bits, grouped heads, ragged key tiles, causal or not, 1 and 2 threads. */
START_TEST(test_sdpa_layouts_same_bits) {
  enum { H = 4, HKV = 2, LQ = 300, LK = 700, DK = 64, DV = 48 };
  rng_seed(45);
  float *qa = rnd_buf((size_t)LQ * H * DK),
        *ka = rnd_buf((size_t)LK * HKV * DK);
  float *va = rnd_buf((size_t)LK * HKV * DV);
  float *qb = malloc(sizeof(float) * LQ * H * DK),
        *kb = malloc(sizeof(float) * LK * HKV * DK),
        *vb = malloc(sizeof(float) * LK * HKV * DV);
  float *oa = malloc(sizeof(float) * LQ * H * DV),
        *ob = malloc(sizeof(float) * LQ * H * DV);
  for (int h = 0; h < H; h++)
    for (int i = 0; i < LQ; i++)
      memcpy(qb + ((size_t)h * LQ + i) * DK, qa + ((size_t)i * H + h) * DK,
             DK * sizeof(float));
  for (int h = 0; h < HKV; h++)
    for (int j = 0; j < LK; j++) {
      memcpy(kb + ((size_t)h * LK + j) * DK, ka + ((size_t)j * HKV + h) * DK,
             DK * sizeof(float));
      memcpy(vb + ((size_t)h * LK + j) * DV, va + ((size_t)j * HKV + h) * DV,
             DV * sizeof(float));
    }
  /* B H Hkv Lq Lk Dk Dv, then the views [L, H * D] */
  attn_sdpa_problem pa = {1,
                          H,
                          HKV,
                          LQ,
                          LK,
                          DK,
                          DV,
                          {qa, 0, DK, H * DK},
                          {ka, 0, DK, HKV * DK},
                          {va, 0, DV, HKV * DV},
                          {0}};
  attn_sdpa_problem pb = pa;
  pb.q = (attn_view){qb, 0, LQ * DK, DK};
  pb.k = (attn_view){kb, 0, LK * DK, DK};
  pb.v = (attn_view){vb, 0, LK * DV, DV};
  attn_mview outa = {oa, 0, DV, H * DV}, outb = {ob, 0, LQ * DV, DV};
  for (int causal = 0; causal < 2; causal++)
    for (int threads = 1; threads <= 2; threads++) {
      attn_exec x = {.threads = threads, .path = ATTN_PATH_STREAMING};
      pa.o.causal = pb.o.causal = causal;
      ck_assert_int_eq(attn_sdpa(&pa, &x, outa, NULL, NULL), ATTN_OK);
      ck_assert_int_eq(attn_sdpa(&pb, &x, outb, NULL, NULL), ATTN_OK);
      for (int h = 0; h < H; h++)
        for (int i = 0; i < LQ; i++)
          ck_assert_msg(
              memcmp(oa + ((size_t)i * H + h) * DV,
                     ob + ((size_t)h * LQ + i) * DV, DV * sizeof(float)) == 0,
              "causal %d threads %d head %d row %d", causal, threads, h, i);
    }
  free(qa);
  free(ka);
  free(va);
  free(qb);
  free(kb);
  free(vb);
  free(oa);
  free(ob);
}
END_TEST

START_TEST(test_deterministic) {
  check_deterministic(ATTN_PRECISION_FP32, 42, 2);
}
END_TEST

START_TEST(test_expf) {
  double worst = 0;
  for (float x = -87.0f; x <= 0.0f; x += 0.0137f) {
    double r = exp((double)x), e = fabs(attn__expf(x) - r) / r;
    if (e > worst) worst = e;
  }
  ck_assert_msg(worst < 3e-7, "exp relative error %g", worst);
  ck_assert_float_eq(attn__expf(-INFINITY), 0.0f);
  ck_assert_float_eq(attn__expf(-100.0f), 0.0f);
  ck_assert_float_eq(attn__expf(0.0f), 1.0f);
  ck_assert(isnan(attn__expf(NAN))); /* and no undefined conversion */
}
END_TEST

/* Finite inputs whose scores overflow float32 (3e20 * 3e20 = inf) give NaN
 * rows, as in PyTorch, on every row length (the SIMD kernels' scalar tails
 * included: a fuzzer found (int32_t)NaN there), and a row whose scores are
 * finite stays exact. */
START_TEST(test_sdpa_score_overflow) {
  for (int64_t t = 0; t < 2 * 19; t++) {
    int need = (int)(t / 19);
    int64_t lk = 1 + t % 19;
    float q[2 * 2] = {3e20f, 3e20f, 0.5f, 0.25f}, k[19 * 2], v[19], out[2],
                w[2 * 19];
    for (int64_t j = 0; j < lk; j++) {
      k[2 * j] = j % 2 ? -3e20f : 3e20f; /* row 0: +inf and -inf scores */
      k[2 * j + 1] = 1e-30f;
      v[j] = 1.0f;
    }
    attn_sdpa_problem p = {.B = 1,
                           .H = 1,
                           .Hkv = 1,
                           .Lq = 2,
                           .Lk = lk,
                           .Dk = 2,
                           .Dv = 1,
                           .q = {q, 4, 4, 2},
                           .k = {k, 2 * lk, 2 * lk, 2},
                           .v = {v, lk, lk, 1}};
    p.o.weights = need ? ATTN_WEIGHTS_PER_HEAD : ATTN_WEIGHTS_NONE;
    ck_assert_int_eq(
        attn_sdpa(&p, NULL, (attn_mview){out, 2, 2, 1}, need ? w : NULL, NULL),
        ATTN_OK);
    ck_assert_msg(isnan(out[0]), "need_weights=%d Lk=%lld: %g", need,
                  (long long)lk, out[0]);
    ck_assert_float_eq_tol(out[1], 1.0f, 1e-6); /* all values are 1 */
  }
}
END_TEST

/* Each SIMD row kernel against the scalar one, on every length 0..300
 * and some longer rows (the AVX-512 sum works in blocks of 128). */
START_TEST(test_row_kernels_agree) {
  static const char *names[] = {"avx512", "avx2"};
  static float a[4100], b[4100];
  int checked = 0; /* kernel sets this CPU has, besides scalar */
  const char *was = attn__kernel_name();
  rng_seed(5);
  for (size_t k = 0; k < 2; k++) {
    if (!attn__set_kernel(names[k])) { /* the CPU lacks it */
      UNIT_SKIPPED(names[k]);
      continue;
    }
    checked++;
    for (int n = 0; n <= 4100; n = n < 300 ? n + 1 : n * 2 - 1) {
      for (int j = 0; j < n; j++) a[j] = chance(0.1) ? -INFINITY : 20 * rnd();
      memcpy(b, a, sizeof a);
      attn__set_kernel(names[k]);
      float ma = attn__row_mask_max(a, n, NULL, NULL, NULL);
      attn__set_kernel("scalar");
      float mb = attn__row_mask_max(b, n, NULL, NULL, NULL);
      ck_assert_msg(ma == mb || (isinf(ma) && isinf(mb)), "%s max n=%d",
                    names[k], n);
      if (n == 0 || isinf(ma)) continue;
      attn__set_kernel(names[k]);
      double sa = attn__row_exp_sum(a, n, ma);
      attn__set_kernel("scalar");
      double sb = attn__row_exp_sum(b, n, mb);
      ck_assert_msg(fabs(sa - sb) <= 1e-6 * sb, "%s sum n=%d: %g vs %g",
                    names[k], n, sa, sb);
      for (int j = 0; j < n; j++)
        ck_assert_msg(fabsf(a[j] - b[j]) <= 3e-7f * b[j] + 1e-38f,
                      "%s exp n=%d j=%d: %g vs %g", names[k], n, j, a[j], b[j]);
    }
  }
  ck_assert(attn__set_kernel(was));
  /* an x86-64 CPU without AVX2 would leave only scalar: say so */
  if (!checked) fprintf(stderr, "row kernels: only scalar on this CPU\n");
}
END_TEST

/* The whole sdpa table again with the scalar kernels (the fast ones ran
 * above). */
/* Every shape once, with causal, masks, weights and scale varied across
 * them: the table that the kernel-set tests below run again. */
static int run_sdpa_mixed(uint64_t seed0) {
  int bad = 0;
  for (int s = 0; s < NSHAPES; s++) {
    sdpa_case c = {shapes[s][0],
                   shapes[s][1],
                   shapes[s][2],
                   shapes[s][3],
                   shapes[s][4],
                   shapes[s][5],
                   shapes[s][6],
                   s & 1,
                   (mask_case)(s % 6),
                   (kpm_case)(s % 3),
                   (attn_weights_mode)(s % 3),
                   s & 2,
                   0};
    bad += run_sdpa_case(&c, seed0 + (uint64_t)s);
  }
  return bad;
}

START_TEST(test_sdpa_scalar_kernels) {
  const char *was = attn__kernel_name();
  ck_assert(attn__set_kernel("scalar"));
  int bad = run_sdpa_mixed(4000);
  ck_assert(attn__set_kernel(was));
  ck_assert_int_eq(bad, 0);
}
END_TEST

/* gemm.c's AVX-512 products against cblas_sgemm on every edge: rows 1..14
 * and 25 (blocks of 12), columns across 16- and 32-wide blocks, inner
 * sizes 1..65, strides wider than the data, both accumulate modes; the
 * unpacked NT path for up to 16 keys against the packed one, bit for bit. Error
 * bound: 1e-6 * sum |a_i b_i| per output (two fp32 summation orders). */
static int gemm_close(const float *got, const float *want, const float *a,
                      int64_t lda, const float *b, int64_t bs_row, int64_t bs_k,
                      int64_t m, int64_t n, int64_t k, int64_t ldc, float alpha,
                      const float *c0, const char *what) {
  for (int64_t i = 0; i < m; i++)
    for (int64_t j = 0; j < n; j++) {
      double mag = c0 ? fabs(c0[i * ldc + j]) : 0.0;
      for (int64_t t = 0; t < k; t++)
        mag += fabs((double)a[i * lda + t] * b[j * bs_row + t * bs_k]);
      double e = fabs((double)got[i * ldc + j] - want[i * ldc + j]);
      if (!(e <= 1e-6 * fabs(alpha) * mag + 1e-30)) {
        fprintf(stderr, "%s m=%lld n=%lld k=%lld: [%lld,%lld] %.9g vs %.9g\n",
                what, (long long)m, (long long)n, (long long)k, (long long)i,
                (long long)j, got[i * ldc + j], want[i * ldc + j]);
        return 1;
      }
    }
  return 0;
}

/* The kernels' arithmetic, one element at a time: c = fmaf chain over k in
 * order (from 0, or from nothing and then + c0 when acc), times alpha for
 * NT.  b[j * bs_row + t * bs_k].  Returns how many elements of got (rows
 * of m, stride ldc, n columns) differ in any bit. */
static int gemm_chain_diff(const float *got, const float *a, int64_t lda,
                           const float *b, int64_t bs_row, int64_t bs_k,
                           int64_t m, int64_t n, int64_t k, int64_t ldc,
                           float alpha, int nt, const float *c0) {
  int diff = 0;
  for (int64_t i = 0; i < m; i++)
    for (int64_t j = 0; j < n; j++) {
      float acc = 0.0f;
      for (int64_t t = 0; t < k; t++)
        acc = fmaf(a[i * lda + t], b[j * bs_row + t * bs_k], acc);
      if (nt) acc *= alpha;
      if (c0) acc += c0[i * ldc + j];
      diff += memcmp(&acc, got + i * ldc + j, sizeof acc) != 0;
    }
  return diff;
}

/* One kernel set (kern, in use on entry) against cblas_sgemm on every
 * shape of the table: close to it, columns past n untouched, the unpacked
 * small NT path equal to the packed one where the kernel packs, and every
 * call the kernel takes bit-identical to the scalar FMA chain (so the
 * AVX2 and AVX-512 kernels agree even where no CPU runs both).  Returns
 * the failures; *runs counts the shapes. */
static int gemm_kernel_check(const char *kern, int *runs) {
  static const int ms[] = {1, 2, 5, 6, 7, 11, 12, 13, 14, 25};
  static const int ns[] = {1, 7, 8, 9, 16, 17, 31, 32, 33, 64, 70};
  static const int ks[] = {1, 3, 16, 64, 65};
  int bad = 0;
  for (size_t mi = 0; mi < sizeof ms / sizeof *ms; mi++)
    for (size_t ni = 0; ni < sizeof ns / sizeof *ns; ni++)
      for (size_t ki = 0; ki < sizeof ks / sizeof *ks; ki++) {
        int64_t m = ms[mi], n = ns[ni], k = ks[ki];
        int64_t lda = k + 3, ldb = k + 2, ldc = n + 5, ldv = n + 4;
        float *a = rnd_buf((size_t)(m * lda)), *b = rnd_buf((size_t)(n * ldb));
        float *v = rnd_buf((size_t)(k * ldv)), *c0 = rnd_buf((size_t)(m * ldc));
        float *c1 = malloc((size_t)(m * ldc) * sizeof *c1);
        float *c2 = malloc((size_t)(m * ldc) * sizeof *c2);
        size_t pf = attn__pack_floats(n, k);
        float *pan = aligned_alloc(64, (pf * sizeof(float) + 63) / 64 * 64);
        ck_assert_ptr_nonnull(pan);
        /* NT: c = 0.3 a b^T; columns past n must stay untouched.  c2:
         * cblas_sgemm's, the reference */
        int packs = attn__gemm_packs();
        memcpy(c1, c0, (size_t)(m * ldc) * sizeof *c1);
        memcpy(c2, c0, (size_t)(m * ldc) * sizeof *c2);
        ck_assert(attn__set_gemm("blas"));
        attn__gemm_nt(m, n, k, 0.3f, a, lda, b, ldb, c2, ldc);
        ck_assert(attn__set_gemm(kern));
        if (packs) { /* c1: the packed panels */
          attn__pack_nt(n, k, b, ldb, pan);
          attn__gemm_nt_packed(m, n, k, 0.3f, a, lda, pan, c1, ldc);
          bad += gemm_close(c1, c2, a, lda, b, ldb, 1, m, n, k, ldc, 0.3f, NULL,
                            "nt");
          for (int64_t i = 0; i < m; i++)
            bad += memcmp(c1 + i * ldc + n, c0 + i * ldc + n, 5 * 4) != 0;
        }
        /* unpacked NT: up to 16 keys the kernel's own transposed panel
         * (the packed path's bits exactly, where there is one), else
         * cblas_sgemm */
        float *c3 = malloc((size_t)(m * ldc) * sizeof *c3);
        memcpy(c3, c0, (size_t)(m * ldc) * sizeof *c3);
        attn__gemm_nt(m, n, k, 0.3f, a, lda, b, ldb, c3, ldc);
        bad += gemm_close(c3, c2, a, lda, b, ldb, 1, m, n, k, ldc, 0.3f, NULL,
                          "nt unpacked");
        /* the kernels' own calls: the FMA chain's bits exactly */
        if (n <= 16)
          bad += gemm_chain_diff(c3, a, lda, b, ldb, 1, m, n, k, ldc, 0.3f, 1,
                                 NULL);
        if (packs)
          bad += gemm_chain_diff(c1, a, lda, b, ldb, 1, m, n, k, ldc, 0.3f, 1,
                                 NULL);
        for (int64_t i = 0; i < m; i++) {
          if (packs && n <= 16)
            bad += memcmp(c1 + i * ldc, c3 + i * ldc, (size_t)n * 4) != 0;
          bad += memcmp(c3 + i * ldc + n, c0 + i * ldc + n, 5 * 4) != 0;
        }
        free(c3);
        /* NN, overwrite and accumulate */
        for (int acc = 0; acc <= 1; acc++) {
          memcpy(c1, c0, (size_t)(m * ldc) * sizeof *c1);
          memcpy(c2, c0, (size_t)(m * ldc) * sizeof *c2);
          attn__gemm_nn(m, n, k, a, lda, v, ldv, acc, c1, ldc);
          ck_assert(attn__set_gemm("blas"));
          attn__gemm_nn(m, n, k, a, lda, v, ldv, acc, c2, ldc);
          ck_assert(attn__set_gemm(kern));
          bad += gemm_close(c1, c2, a, lda, v, 1, ldv, m, n, k, ldc, 1.0f,
                            acc ? c0 : NULL, acc ? "nn+=" : "nn");
          if (packs || (double)m * n * k <= ATTN__GEMM_AVX2_MAX_WORK)
            bad += gemm_chain_diff(c1, a, lda, v, 1, ldv, m, n, k, ldc, 1.0f, 0,
                                   acc ? c0 : NULL);
          for (int64_t i = 0; i < m; i++)
            bad += memcmp(c1 + i * ldc + n, c0 + i * ldc + n, 5 * 4) != 0;
        }
        (*runs)++;
        free(a);
        free(b);
        free(v);
        free(c0);
        free(c1);
        free(c2);
        free(pan);
      }
  return bad;
}

START_TEST(test_gemm_kernels) {
  static const char *const kerns[] = {"avx512", "avx2"};
  const char *was = attn__gemm_name();
  int tried = 0;
  for (size_t i = 0; i < sizeof kerns / sizeof *kerns; i++) {
    if (!attn__set_gemm(kerns[i])) {
      UNIT_SKIPPED(kerns[i]);
      continue;
    }
    int runs = 0;
    rng_seed(11);
    int bad = gemm_kernel_check(kerns[i], &runs);
    if (bad) fprintf(stderr, "gemm kernels %s: %d failures\n", kerns[i], bad);
    ck_assert_int_eq(runs, 10 * 11 * 5);
    ck_assert_int_eq(bad, 0);
    tried++;
  }
  ck_assert(attn__set_gemm(was));
  if (!tried) fprintf(stderr, "gemm kernels: cblas_sgemm only here\n");
}
END_TEST

/* Where a CPU has both, the AVX2 and AVX-512 kernels give the same bits
 * (the same FMA chain per output): small NT (up to 16 keys; more go to
 * cblas_sgemm in both), NN with and without accumulation, on shapes that
 * cross both tiles' edges. */
START_TEST(test_gemm_avx2_equals_avx512) {
  const char *was = attn__gemm_name();
  int has512 = attn__set_gemm("avx512"), has2 = attn__set_gemm("avx2");
  if (!has512 || !has2) {
    if (!has512) UNIT_SKIPPED("avx512");
    if (!has2) UNIT_SKIPPED("avx2");
    ck_assert(attn__set_gemm(was));
    return;
  }
  /* every m * n * k below ATTN__GEMM_AVX2_MAX_WORK: all AVX2 calls */
  static const int ms[] = {1, 6, 7, 12, 13, 25};
  static const int ns[] = {1, 9, 16, 17, 33, 70};
  static const int ks[] = {1, 16, 65};
  int bad = 0;
  rng_seed(12);
  for (size_t mi = 0; mi < sizeof ms / sizeof *ms; mi++)
    for (size_t ni = 0; ni < sizeof ns / sizeof *ns; ni++)
      for (size_t ki = 0; ki < sizeof ks / sizeof *ks; ki++) {
        int64_t m = ms[mi], n = ns[ni], k = ks[ki], ldc = n + 3;
        float *a = rnd_buf((size_t)(m * k)), *b = rnd_buf((size_t)(n * k));
        float *v = rnd_buf((size_t)(k * n)), *c0 = rnd_buf((size_t)(m * ldc));
        size_t cbytes = (size_t)(m * ldc) * sizeof(float);
        float *c[2][3];
        ck_assert((double)m * n * k <= ATTN__GEMM_AVX2_MAX_WORK);
        for (int kern = 0; kern < 2; kern++) {
          ck_assert(attn__set_gemm(kern ? "avx2" : "avx512"));
          for (int t = 0; t < 3; t++) {
            c[kern][t] = malloc(cbytes);
            memcpy(c[kern][t], c0, cbytes);
          }
          attn__gemm_nt(m, n, k, 0.7f, a, k, b, k, c[kern][0], ldc);
          attn__gemm_nn(m, n, k, a, k, v, n, 0, c[kern][1], ldc);
          attn__gemm_nn(m, n, k, a, k, v, n, 1, c[kern][2], ldc);
        }
        for (int t = 0; t < 3; t++) {
          bad += memcmp(c[0][t], c[1][t], cbytes) != 0;
          free(c[0][t]);
          free(c[1][t]);
        }
        free(a);
        free(b);
        free(v);
        free(c0);
      }
  ck_assert(attn__set_gemm(was));
  ck_assert_int_eq(bad, 0);
}
END_TEST

/* The sdpa and mha tables again with cblas_sgemm for every product (the
 * AVX-512 kernels, where the CPU has them, ran above). */
START_TEST(test_tables_blas_gemm) {
  const char *was = attn__gemm_name();
  ck_assert(attn__set_gemm("blas"));
  int bad = run_sdpa_mixed(5000) + run_mha_table();
  ck_assert(attn__set_gemm(was));
  ck_assert_int_eq(bad, 0);
}
END_TEST

/* attn_exec.kernel of an sdpa call, 1 batch and 2 heads of Lq queries over
 * Lk keys, head dim D, no weights (the streaming path), in precision p. */
static const char *sdpa_kernel_of(int64_t Lq, int64_t Lk, int64_t D,
                                  int threads, attn_precision p) {
  int64_t H = 2;
  float *q = rnd_buf((size_t)(H * Lq * D)), *k = rnd_buf((size_t)(H * Lk * D));
  float *v = rnd_buf((size_t)(H * Lk * D)), *o = rnd_buf((size_t)(H * Lq * D));
  const char *kernel = NULL;
  attn_exec x = {.threads = threads, .kernel = &kernel};
  attn_sdpa_problem pr = {.B = 1,
                          .H = H,
                          .Hkv = H,
                          .Lq = Lq,
                          .Lk = Lk,
                          .Dk = D,
                          .Dv = D,
                          .q = {q, H * Lq * D, Lq * D, D},
                          .k = {k, H * Lk * D, Lk * D, D},
                          .v = {v, H * Lk * D, Lk * D, D},
                          .o = {.precision = p}};
  attn_diag d = {{0}};
  attn_mview out = {o, H * Lq * D, Lq * D, D};
  ck_assert_int_eq(attn_sdpa(&pr, &x, out, NULL, &d), ATTN_OK);
  free(q), free(k), free(v), free(o);
  ck_assert_ptr_nonnull(kernel);
  return kernel;
}

/* attn_exec.kernel of an mha self-attention call: Lq tokens of E = 32, 2
 * heads, weights stored [out, in] (PyTorch's). */
static const char *mha_kernel_of(int64_t Lq) {
  const int64_t E = 32;
  float *xq = rnd_buf((size_t)(Lq * E)), *w = rnd_buf((size_t)(E * E));
  float *o = rnd_buf((size_t)(Lq * E));
  attn_weight W = {w, ATTN_W_OUT_IN, 0, NULL};
  const char *kernel = NULL;
  attn_exec x = {.threads = 1, .kernel = &kernel};
  attn_mha_problem p = {.B = 1,
                        .Lq = Lq,
                        .E = E,
                        .H = 2,
                        .Hkv = 2,
                        .xq = xq,
                        .wq = W,
                        .wk = W,
                        .wv = W,
                        .wo = W};
  attn_diag d = {{0}};
  ck_assert_int_eq(attn_mha(&p, &x, o, NULL, &d), ATTN_OK);
  free(xq), free(w), free(o);
  ck_assert_ptr_nonnull(kernel);
  return kernel;
}

/* attn_exec.kernel says what a call's products ran, not only the kernel
 * set in use: with AVX-512, 4 queries over 40 keys compute their scores on
 * cblas_sgemm (no packed keys below 32 rows, more than 16 keys) and P V on
 * the kernel, "avx512+blas", as do 4 tokens through mha's [out, in]
 * projections; 4 over 8 keys, 64 over 64 (1 or 2 threads) and 40 mha
 * tokens run every product on it.  With AVX2, 4 over 8 keys run on it,
 * 4 over 40 keys put their scores on cblas_sgemm.  With "blas", all of it
 * is "blas"; bf16 names the bf16 kernel. */
START_TEST(test_kernel_ran_named) {
  const char *was = attn__gemm_name();
  const attn_precision f = ATTN_PRECISION_FP32;
  rng_seed(40);
  if (attn__set_gemm("avx512")) {
    ck_assert_str_eq(sdpa_kernel_of(4, 40, 8, 1, f), "avx512+blas");
    ck_assert_str_eq(mha_kernel_of(4), "avx512+blas");
    ck_assert_str_eq(sdpa_kernel_of(4, 8, 8, 1, f), "avx512");
    ck_assert_str_eq(sdpa_kernel_of(64, 64, 64, 1, f), "avx512");
    ck_assert_str_eq(sdpa_kernel_of(128, 256, 64, 2, f), "avx512");
    ck_assert_str_eq(mha_kernel_of(40), "avx512");
  } else {
    UNIT_SKIPPED("avx512");
  }
  if (attn__set_gemm("avx2")) {
    ck_assert_str_eq(sdpa_kernel_of(4, 8, 8, 1, f), "avx2");
    ck_assert_str_eq(sdpa_kernel_of(4, 40, 8, 1, f), "avx2+blas");
  } else {
    UNIT_SKIPPED("avx2");
  }
  ck_assert(attn__set_gemm("blas"));
  ck_assert_str_eq(sdpa_kernel_of(4, 40, 8, 1, f), "blas");
  ck_assert_str_eq(sdpa_kernel_of(64, 64, 64, 2, f), "blas");
  ck_assert_str_eq(mha_kernel_of(4), "blas");
  ck_assert_str_eq(attn__gemm_ran_name(0), "blas"); /* no product ran */
  ck_assert(attn__set_gemm(was));
  ck_assert_str_eq(sdpa_kernel_of(4, 40, 8, 1, ATTN_PRECISION_BF16),
                   attn_engine_bf16_kernel_name());
}
END_TEST

/* A unit that waits (at most 10 s) until the other thread has run one
 * product: tid 0 (the caller) never computes, tid 1 runs cblas_sgemm. */
static atomic_int other_ran;
static void product_on_other_thread(void *ctx, int64_t u, int tid) {
  (void)ctx, (void)u;
  if (tid == 0) {
    for (int i = 0; i < 10000 && !atomic_load(&other_ran); i++)
      nanosleep(&(struct timespec){0, 1000000}, NULL);
    return;
  }
  float a = 1.0f, b = 2.0f, c = 0.0f;
  attn__gemm_nn(1, 1, 1, &a, 1, &b, 1, 0, &c, 1);
  ck_assert_float_eq(c, 2.0f);
  atomic_store(&other_ran, 1);
}

/* attn__parallel_for hands the kernels its threads ran to the caller. */
START_TEST(test_kernel_ran_threads) {
  const char *was = attn__gemm_name();
  ck_assert(attn__set_gemm("blas"));
  (void)attn__gemm_ran_take();
  atomic_store(&other_ran, 0);
  attn__parallel_for(2, 2, product_on_other_thread, NULL);
  ck_assert(atomic_load(&other_ran));
  unsigned bits = attn__gemm_ran_take();
  ck_assert_uint_ne(bits, 0); /* 0 would name the kernel in use, "blas" */
  ck_assert_str_eq(attn__gemm_ran_name(bits), "blas");
  ck_assert_uint_eq(attn__gemm_ran_take(), 0); /* taken */
  ck_assert(attn__set_gemm(was));
}
END_TEST

/* ---- bf16 (attn_precision ATTN_PRECISION_BF16) -------------------------- */

static void bf16_reset(void) {
  bf16_worst_out64 = bf16_worst_w64 = bf16_worst_outref = bf16_worst_wref = 0;
  bf16_bits_differ = bf16_bits_compared = 0;
}

/* The worst errors of a bf16 table run, in the bounds' units (an error of
 * e at |ref| = r counts as e / (1 + r) for outputs). */
static void bf16_report(const char *what) {
  fprintf(stderr,
          "bf16 %s (%s): worst output error vs double %.3g (bound %g), "
          "weights %.3g (bound %g); vs the bf16 reference %.3g, %.3g "
          "(bounds %g or %g for mha, %g); portable vs fast: %ld of %ld values "
          "differ\n",
          what, attn__bf16_name(), bf16_worst_out64, BF16_OUT_TOL,
          bf16_worst_w64, BF16_W_TOL, bf16_worst_outref, bf16_worst_wref,
          BF16_REF_TOL, BF16_REF_TOL_MHA, BF16_REF_W_TOL, bf16_bits_differ,
          bf16_bits_compared);
}

/* Rounding to nearest even, infinities, NaN, subnormals to signed zero,
 * overflow to infinity; the vector conversion equals the scalar one. */
START_TEST(test_bf16_round) {
  static const struct {
    float x;
    uint16_t want;
  } t[] = {
      {1.0f, 0x3f80},
      {1.0f + 0x1p-8f, 0x3f80},            /* tie: to even */
      {1.0f + 0x1p-7f + 0x1p-8f, 0x3f82},  /* tie: to even (up) */
      {1.0f + 0x1p-8f + 0x1p-20f, 0x3f81}, /* above the tie */
      {-2.5f, 0xc020},
      {INFINITY, 0x7f80},
      {-INFINITY, 0xff80},
      {1e-39f, 0x0000},        /* subnormal: +0 */
      {-1e-39f, 0x8000},       /* subnormal: -0 */
      {0x1p-126f, 0x0080},     /* FLT_MIN stays */
      {3.4028235e38f, 0x7f80}, /* FLT_MAX rounds up: inf */
      {3.3e38f, 0x7f78},
  };
  for (size_t i = 0; i < sizeof t / sizeof *t; i++)
    ck_assert_msg(attn__bf16(t[i].x) == t[i].want, "bf16(%a) = %04x, want %04x",
                  (double)t[i].x, attn__bf16(t[i].x), t[i].want);
  ck_assert(isnan(attn__bf16_f32(attn__bf16(NAN))));
  const char *was = attn__bf16_name();
  static const char *const kern[] = {"portable", "avx512bf16"};
  rng_seed(77);
  for (int k = 0; k < 2; k++) {
    if (!attn__set_bf16(kern[k])) {
      UNIT_SKIPPED(kern[k]);
      continue;
    }
    for (int n = 0; n < 70; n++) {
      float x[70];
      uint16_t h[72];
      for (int j = 0; j < n; j++) {
        uint32_t u = (uint32_t)rng_next();
        memcpy(&x[j], &u, sizeof u);
        if (isnan(x[j])) x[j] = 1.0f; /* NaN payloads may differ */
      }
      h[n] = 0xabcd;
      attn__bf16_convert(x, n, h);
      ck_assert_uint_eq(h[n], 0xabcd);
      for (int j = 0; j < n; j++)
        ck_assert_msg(h[j] == attn__bf16(x[j]), "%s: %a -> %04x, want %04x",
                      kern[k], (double)x[j], h[j], attn__bf16(x[j]));
    }
  }
  ck_assert(attn__set_bf16(was));
}
END_TEST

/* gemm.c's bf16 products on every edge of the fp32 kernels' test (rows
 * 1..14 and 25, columns across 16- and 32-wide blocks, inner sizes 1..65,
 * odd ones padded), from a panel's first column and from inside one
 * (off), overwrite and accumulate, both packings: within 1e-6 sum |a b|
 * of the double sum of the rounded operands, columns past n untouched,
 * and the fast kernel (where the CPU has it) equal to the portable one
 * bit for bit. */
START_TEST(test_bf16_gemm_kernels) {
  static const int ms[] = {1, 2, 5, 6, 7, 11, 12, 13, 14, 25};
  static const int ns[] = {1, 7, 8, 9, 16, 17, 31, 32, 33, 64, 70};
  static const int ks[] = {1, 3, 16, 64, 65};
  const char *was = attn__bf16_name();
  int fast = attn__set_bf16("avx512bf16"), bad = 0, diff = 0;
  if (!fast) UNIT_SKIPPED("avx512bf16"); /* the portable kernel only */
  rng_seed(13);
  for (size_t mi = 0; mi < sizeof ms / sizeof *ms; mi++)
    for (size_t ni = 0; ni < sizeof ns / sizeof *ns; ni++)
      for (size_t ki = 0; ki < sizeof ks / sizeof *ks; ki++)
        for (int off = 0; off <= 5; off += 5)
          for (int form = 0; form < 2; form++) {
            int64_t m = ms[mi], n = ns[ni], k = ks[ki], nt = n + off;
            int64_t k2 = (k + 1) & ~1, ldc = n + 5, ldb = form ? nt + 3 : k + 2;
            float *a = rnd_buf((size_t)(m * k));
            float *b = rnd_buf((size_t)(form ? k * ldb : nt * ldb));
            float *c0 = rnd_buf((size_t)(m * ldc));
            uint16_t *ab = calloc((size_t)(m * k2), sizeof *ab);
            size_t pe = attn__bf16_pack_elems(nt, k);
            uint16_t *pan = aligned_alloc(64, (pe * 2 + 63) / 64 * 64);
            float *c[2][2];
            for (int64_t i = 0; i < m; i++)
              for (int64_t t = 0; t < k; t++)
                ab[i * k2 + t] = attn__bf16(a[i * k + t]);
            if (form)
              attn__bf16_pack_nn(nt, k, b, ldb, pan);
            else
              attn__bf16_pack_nt(nt, k, b, ldb, pan);
            for (int kern = 0; kern < 1 + fast; kern++) {
              ck_assert(attn__set_bf16(kern ? "avx512bf16" : "portable"));
              for (int acc = 0; acc < 2; acc++) {
                c[kern][acc] = malloc((size_t)(m * ldc) * sizeof(float));
                memcpy(c[kern][acc], c0, (size_t)(m * ldc) * sizeof(float));
                attn__bf16_gemm(m, n, k2 / 2, 0.3f, ab, k2, pan,
                                attn__bf16_panel_stride(k), off, acc,
                                c[kern][acc], ldc);
              }
            }
            for (int acc = 0; acc < 2; acc++) {
              const float *got = c[0][acc];
              for (int64_t i = 0; i < m; i++) {
                for (int64_t j = 0; j < n; j++) {
                  double sum = 0, mag = 0;
                  for (int64_t t = 0; t < k; t++) {
                    double bv =
                        form ? b[t * ldb + off + j] : b[(off + j) * ldb + t];
                    double pr = (double)attn__bf16_round(a[i * k + t]) *
                                attn__bf16_round((float)bv);
                    sum += pr;
                    mag += fabs(pr);
                  }
                  double want = 0.3 * sum + (acc ? c0[i * ldc + j] : 0.0);
                  double e = fabs(got[i * ldc + j] - want);
                  if (!(e <= 1e-6 * (0.3 * mag +
                                     (acc ? fabs(c0[i * ldc + j]) : 0.0)) +
                                 1e-30)) {
                    if (!bad)
                      fprintf(stderr,
                              "bf16 gemm m=%lld n=%lld k=%lld off=%d form=%d "
                              "acc=%d [%lld,%lld] %.9g vs %.9g\n",
                              (long long)m, (long long)n, (long long)k, off,
                              form, acc, (long long)i, (long long)j,
                              got[i * ldc + j], want);
                    bad++;
                  }
                }
                bad += memcmp(got + i * ldc + n, c0 + i * ldc + n, 5 * 4) != 0;
              }
              if (fast) {
                long dd = bits_differ(c[0][acc], c[1][acc], (size_t)(m * ldc));
                if (dd && !diff)
                  fprintf(stderr,
                          "bf16 gemm m=%lld n=%lld k=%lld off=%d form=%d "
                          "acc=%d: fast and portable differ in %ld values\n",
                          (long long)m, (long long)n, (long long)k, off, form,
                          acc, dd);
                diff += (int)dd;
                free(c[1][acc]);
              }
              free(c[0][acc]);
            }
            free(a);
            free(b);
            free(c0);
            free(ab);
            free(pan);
          }
  ck_assert(attn__set_bf16(was));
  if (diff)
    fprintf(stderr, "bf16 gemm: fast and portable differ in %d\n", diff);
  ck_assert_int_eq(bad, 0);
  ck_assert_int_eq(diff, 0);
}
END_TEST

/* Every sdpa table (the mixed one, fully blocked rows, the variants on
 * every shape, every variant with every weights mode) in bf16: bounds
 * against double and against the bf16 reference; with the fast kernel,
 * the portable one gives the same bits. */
START_TEST(test_bf16_sdpa_tables) {
  int bad = 0;
  if (!bf16_fast_in_use()) UNIT_SKIPPED("avx512bf16"); /* no bit check */
  bf16_reset();
  bf16_run = 1;
  bad += run_sdpa_mixed(60000);
  for (int s = 0; s < NSHAPES; s++)
    for (int w = 0; w < 3; w++) {
      sdpa_case c = {shapes[s][0],
                     shapes[s][1],
                     shapes[s][2],
                     shapes[s][3],
                     shapes[s][4],
                     shapes[s][5],
                     shapes[s][6],
                     0,
                     w == 1 ? M_ADD2 : M_BOOL2,
                     w == 2 ? K_LEN : K_NONE,
                     (attn_weights_mode)w,
                     0,
                     1};
      bad += run_sdpa_case(&c, (uint64_t)(61000 + s * 3 + w));
    }
  for (int s = 0; s < NSHAPES + NLONG; s++)
    for (int v = 0; v < NVARIANTS; v++)
      bad += run_variant(s, v, (uint64_t)(62000 + s * 101 + v));
  bf16_run = 0;
  bf16_report("sdpa tables");
  ck_assert_int_eq(bad, 0);
  ck_assert_int_eq(bf16_bits_differ, 0);
}
END_TEST

START_TEST(test_bf16_mha_tables) {
  static const mha_case cases[] = {
      {3, 9, 9, 16, 4, 4, 16, 16, 0, 1, 2, ATTN_WEIGHTS_PER_HEAD, 0, M_NONE,
       K_NONE},
      {3, 7, 7, 16, 8, 2, 16, 16, 0, 0, 1, ATTN_WEIGHTS_MEAN, 0, M_NONE,
       K_BOOL},
      {1, 6, 9, 12, 3, 1, 5, 7, 1, 1, 0, ATTN_WEIGHTS_NONE, 0, M_ADD2, K_NONE},
      {2, 40, 50, 24, 4, 2, 20, 36, 1, 1, 1, ATTN_WEIGHTS_PER_HEAD, 0, M_NONE,
       K_NONE},
  };
  int bad = 0;
  if (!bf16_fast_in_use()) UNIT_SKIPPED("avx512bf16"); /* no bit check */
  bf16_reset();
  bf16_run = 1;
  bad += run_mha_table();
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    for (int v = 0; v < NVARIANTS; v++)
      bad += run_mha_case_v(&cases[i], &variants[v], 63000 + i * 100 + v);
  bf16_run = 0;
  bf16_report("mha tables");
  ck_assert_int_eq(bad, 0);
  ck_assert_int_eq(bf16_bits_differ, 0);
}
END_TEST

/* The portable kernel alone (what a CPU without AVX512-BF16 runs) on the
 * mixed tables, against the references. */
START_TEST(test_bf16_portable) {
  const char *was = attn__bf16_name();
  ck_assert(attn__set_bf16("portable"));
  bf16_reset();
  bf16_run = 1;
  int bad = run_sdpa_mixed(64000) + run_mha_table() + run_variants_mixed(65000);
  bf16_run = 0;
  bf16_report("portable kernel, mixed tables");
  ck_assert(attn__set_bf16(was));
  ck_assert_int_eq(bad, 0);
}
END_TEST

/* An unknown precision is refused; bf16 bits do not depend on threads;
 * the kernel names. */
START_TEST(test_bf16_misc) {
  tiny t;
  attn_diag d = {{0}};
  tiny_init(&t);
  t.p.o.precision = (attn_precision)2;
  ck_assert_int_eq(attn_sdpa_check(&t.p, &d), ATTN_EINVAL);
  ck_assert_ptr_nonnull(strstr(d.msg, "precision"));
  t.p.o.precision = ATTN_PRECISION_BF16;
  ck_assert_int_eq(tiny_run(&t, &d), ATTN_OK);
  ck_assert_str_eq(attn_engine_kernel_for(ATTN_PRECISION_BF16),
                   attn_engine_bf16_kernel_name());
  ck_assert_str_eq(attn_engine_kernel_for(ATTN_PRECISION_FP32),
                   attn__gemm_name());
  ck_assert_str_eq(attn_engine_bf16_kernel_name(),
                   attn_engine_bf16_native() ? "avx512bf16" : "portable");
  check_deterministic(ATTN_PRECISION_BF16, 43, 3);
  attn_sdpa_problem p = t.p;
  attn_exec x1 = {.threads = 1};
  attn_bytes b32, b16;
  p.o.precision = ATTN_PRECISION_FP32;
  ck_assert_int_eq(attn_sdpa_bytes(&p, &x1, &b32, NULL), ATTN_OK);
  p.o.precision = ATTN_PRECISION_BF16;
  ck_assert_int_eq(attn_sdpa_bytes(&p, &x1, &b16, NULL), ATTN_OK);
  ck_assert_uint_eq(b16.out, b32.out);
  ck_assert_uint_gt(b16.workspace, b32.workspace); /* the bf16 panels */
}
END_TEST

/* The vector packing of keys, values and weights into bf16 panels gives
 * the scalar packing's bits on every edge: columns not a multiple of the
 * panel (and fewer than 16), odd and short inner lengths, row strides
 * beyond the row, values that round up, ties, fp32 subnormals (0), huge
 * values (inf) and signed zeros. */
START_TEST(test_bf16_pack_vector) {
  if (!attn__set_bf16("avx512bf16")) {
    UNIT_SKIPPED("avx512bf16");
    return;
  }
  static const int64_t ns[] = {1, 5, 16, 17, 31, 32, 33, 64, 70};
  static const int64_t ks[] = {1, 2, 3, 15, 16, 17, 31, 32, 33, 63, 64, 65};
  rng_seed(352);
  size_t checked = 0;
  for (size_t a = 0; a < sizeof ns / sizeof *ns; a++)
    for (size_t c = 0; c < sizeof ks / sizeof *ks; c++)
      for (int pad = 0; pad < 2; pad++)
        for (int nn = 0; nn < 2; nn++) {
          int64_t n = ns[a], k = ks[c];
          int64_t rows = nn ? k : n, cols = nn ? n : k, ld = cols + 3 * pad;
          float *b = rnd_buf((size_t)(rows * ld));
          for (int64_t i = 0; i < rows * ld; i++) {
            uint32_t u = (uint32_t)rng_next();
            if (i % 7 == 0) memcpy(&b[i], &u, 4);     /* any bits */
            if (i % 7 == 0 && b[i] != b[i]) b[i] = 0; /* but not NaN */
            if (i % 11 == 0) b[i] = -0.0f;
            if (i % 13 == 0) b[i] = 1.00390625f; /* a tie: 1 + 2^-8 */
            if (i % 17 == 0) b[i] = 1e-40f;      /* subnormal */
          }
          size_t e = attn__bf16_pack_elems(n, k);
          uint16_t *p1 = malloc(e * 2), *p2 = malloc(e * 2);
          memset(p1, 0xa5, e * 2);
          memset(p2, 0x5a, e * 2);
          if (nn) {
            attn__bf16_pack_nn(n, k, b, ld, p1);
            attn__bf16_pack_nn_scalar(n, k, b, ld, p2);
          } else {
            attn__bf16_pack_nt(n, k, b, ld, p1);
            attn__bf16_pack_nt_scalar(n, k, b, ld, p2);
          }
          ck_assert_msg(memcmp(p1, p2, e * 2) == 0,
                        "pack_%s n %lld k %lld ld %lld differs",
                        nn ? "nn" : "nt", (long long)n, (long long)k,
                        (long long)ld);
          checked += e;
          free(b), free(p1), free(p2);
        }
  fprintf(stderr, "bf16 packing: vector = scalar on %zu packed values\n",
          checked);
}
END_TEST

/* Weights held in bfloat16 (attn_weight.bf16, data NULL) give a bf16 call
 * the same bits as the fp32 weights they round, in both layouts, fused
 * (consecutive blocks) and separate, with and without weights returned;
 * and the double reference reads them alike.  An fp32 call of such a
 * weight is ATTN_EINVAL; a NaN in one is ATTN_ENONFINITE. */
START_TEST(test_bf16_held_weights) {
  const int64_t E = 48, H = 4, L = 37;
  rng_seed(351);
  float *x = rnd_buf((size_t)(L * E)), *w = rnd_buf((size_t)(4 * E * E));
  float *b = rnd_buf((size_t)(4 * E));
  uint16_t *wb = malloc((size_t)(4 * E * E) * sizeof *wb);
  for (int64_t i = 0; i < 4 * E * E; i++) wb[i] = attn__bf16(w[i]);
  size_t n = (size_t)(L * E), nw = (size_t)(H * L * L);
  float *o1 = malloc(n * 4), *o2 = malloc(n * 4), *w1 = malloc(nw * 4),
        *w2 = malloc(nw * 4);
  double *r1 = malloc(n * 8), *r2 = malloc(n * 8);
  attn_diag d;
  for (int lay = 0; lay < 2; lay++)
    for (int fused = 0; fused < 2; fused++)
      for (int need = 0; need < 2; need++) {
        attn_mha_problem p = {.B = 1,
                              .Lq = L,
                              .E = E,
                              .H = H,
                              .Hkv = H,
                              .kdim = E,
                              .vdim = E,
                              .xq = x};
        p.o.precision = ATTN_PRECISION_BF16;
        p.o.weights = need ? ATTN_WEIGHTS_PER_HEAD : ATTN_WEIGHTS_NONE;
        p.bq = b, p.bk = b + E, p.bv = b + 2 * E, p.bo = b + 3 * E;
        attn_weight *ws[4] = {&p.wq, &p.wk, &p.wv, &p.wo};
        for (int k = 0; k < 4; k++) {
          /* fused: the blocks of one [3E, E] / [E, 3E] matrix */
          int64_t off = fused && k < 3 ? (lay ? k * E * E : k * E) : k * E * E;
          int64_t ld = fused && k < 3 && !lay ? 3 * E : E;
          *ws[k] = (attn_weight){w + off, lay ? ATTN_W_OUT_IN : ATTN_W_IN_OUT,
                                 ld, NULL};
        }
        ck_assert_int_eq(attn_mha(&p, NULL, o1, need ? w1 : NULL, &d), 0);
        ck_assert_int_eq(attn_ref_mha(&p, r1, NULL, &d), 0);
        for (int k = 0; k < 4; k++) {
          ws[k]->bf16 = wb + (ws[k]->data - w);
          ws[k]->data = NULL;
        }
        ck_assert_int_eq(attn_mha(&p, NULL, o2, need ? w2 : NULL, &d), 0);
        ck_assert_int_eq(attn_ref_mha(&p, r2, NULL, &d), 0);
        ck_assert(memcmp(o1, o2, n * 4) == 0);
        ck_assert(!need || memcmp(w1, w2, nw * 4) == 0);
        ck_assert(memcmp(r1, r2, n * 8) == 0);
        p.o.precision = ATTN_PRECISION_FP32;
        ck_assert_int_eq(attn_mha(&p, NULL, o2, need ? w2 : NULL, &d),
                         ATTN_EINVAL);
        ck_assert(strstr(d.msg, "w_q") && strstr(d.msg, "bfloat16"));
        p.o.precision = ATTN_PRECISION_BF16;
        uint16_t keep = wb[5];
        wb[5] = 0x7fc0; /* NaN */
        ck_assert_int_eq(attn_mha(&p, NULL, o2, need ? w2 : NULL, &d),
                         ATTN_ENONFINITE);
        wb[5] = keep;
      }
  free(x), free(w), free(b), free(wb), free(o1), free(o2), free(w1);
  free(w2), free(r1), free(r2);
}
END_TEST

Suite *engine_suite(void) {
  Suite *s = suite_create("engine");
  TCase *tc = tcase_create("core");
  tcase_set_timeout(tc, 300);
  tcase_add_test(tc, test_sdpa_plain);
  tcase_add_test(tc, test_sdpa_masks);
  tcase_add_test(tc, test_sdpa_fully_masked_rows);
  tcase_add_test(tc, test_sdpa_causal_alignment);
  tcase_add_test(tc, test_mha_table);
  tcase_add_test(tc, test_sdpa_misuse);
  tcase_add_test(tc, test_sdpa_nonfinite_threads);
  tcase_add_test(tc, test_sdpa_aliased_inputs);
  tcase_add_test(tc, test_mha_misuse);
  tcase_add_test(tc, test_deterministic);
  tcase_add_test(tc, test_sdpa_layouts_same_bits);
  tcase_add_test(tc, test_expf);
  tcase_add_test(tc, test_sdpa_score_overflow);
  tcase_add_test(tc, test_row_kernels_agree);
  tcase_add_test(tc, test_sdpa_scalar_kernels);
  tcase_add_test(tc, test_gemm_kernels);
  tcase_add_test(tc, test_gemm_avx2_equals_avx512);
  tcase_add_test(tc, test_tables_blas_gemm);
  tcase_add_test(tc, test_kernel_ran_named);
  tcase_add_test(tc, test_kernel_ran_threads);
  tcase_add_test(tc, test_sdpa_variants);
  tcase_add_test(tc, test_sdpa_variants_weights);
  tcase_add_test(tc, test_variants_kernel_sets);
  tcase_add_test(tc, test_softcap_kernels);
  tcase_add_test(tc, test_alibi_slopes);
  tcase_add_test(tc, test_sdpa_top_left);
  tcase_add_test(tc, test_mha_variants);
  tcase_add_test(tc, test_mha_rows_copied_same_bits);
  suite_add_tcase(s, tc);
  TCase *tb = tcase_create("bf16");
  tcase_set_timeout(tb, 300);
  tcase_add_test(tb, test_bf16_round);
  tcase_add_test(tb, test_bf16_gemm_kernels);
  tcase_add_test(tb, test_bf16_sdpa_tables);
  tcase_add_test(tb, test_bf16_mha_tables);
  tcase_add_test(tb, test_bf16_portable);
  tcase_add_test(tb, test_bf16_misc);
  tcase_add_test(tb, test_bf16_held_weights);
  tcase_add_test(tb, test_bf16_pack_vector);
  suite_add_tcase(s, tb);
  return s;
}
