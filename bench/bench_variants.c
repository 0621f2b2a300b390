/* bench_variants.c - what the attention variants cost (engine.h,
 * attn_attend_opts): the sliding window's speed-up on the attention core,
 * and the cost of ALiBi, softcap and rotary positions over plain attention.
 *
 * DESIGN
 * The machine's speed drifts by a third from minute to minute and other
 * builds share it, so every comparison is a ratio measured in one run:
 * the calls of the configurations being compared are interleaved (A B C,
 * B C A, C A B, ...), and a ratio is the median over the rounds of each
 * round's own ratio (the ratio of the medians is printed beside it).  One
 * warm-up call per configuration first.
 *  window  attn_sdpa on [n, H*D] head views (no projections), no weights:
 *          window [W, 0] with bottom-right causal against full causal
 *          attention at the same n.  Default n = 16384, H = 8, D = 64,
 *          W = 256.
 *  costs   attn_mha self-attention, n tokens, d_model, h heads, no weights:
 *          plain, ALiBi (the standard slopes), softcap 50, rotary (NeoX,
 *          head dim, base 10000), and all three; each's time over plain.
 *          Default n = 2048, d_model = 512, h = 8.
 * Usage:
 *   bench_variants window [n] [heads] [d_head] [W] [reps] [threads]
 *   bench_variants costs [n] [d_model] [heads] [reps] [threads] [causal]
 * Reports only; asserts nothing. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "attn/engine.h"

#define BENCH_NAME "bench_variants"
#include "bench_util.h"

#define MAX_CONF 5

/* One configuration: a call to time. */
typedef struct conf {
  const char *name;
  attn_status (*run)(const struct conf *c, attn_diag *d);
  attn_sdpa_problem sp;
  attn_mha_problem mp;
  attn_exec x;
  attn_mview out;
  float *mout;
  double t[64];
} conf;

static attn_status run_sdpa(const conf *c, attn_diag *d) {
  return attn_sdpa(&c->sp, &c->x, c->out, NULL, d);
}

static attn_status run_mha(const conf *c, attn_diag *d) {
  return attn_mha(&c->mp, &c->x, c->mout, NULL, d);
}

/* Warm up each configuration, then reps rounds of one call each, in turn;
 * prints each median and its ratio to configuration 0's. */
static int interleave(conf *cs, int n, int reps, const char *ratio_word) {
  double med0 = 1.0;
  for (int i = 0; i < n; i++) {
    attn_diag d = {{0}};
    if (cs[i].run(&cs[i], &d) != ATTN_OK) {
      fprintf(stderr, "bench_variants: %s: %s\n", cs[i].name, d.msg);
      return 1;
    }
  }
  /* round r starts at configuration r % n: none is always first */
  for (int r = 0; r < reps; r++)
    for (int k = 0; k < n; k++) {
      int i = (r + k) % n;
      double t0 = bench_now(CLOCK_MONOTONIC);
      cs[i].run(&cs[i], NULL);
      cs[i].t[r] = bench_now(CLOCK_MONOTONIC) - t0;
    }
  /* per round, each time over configuration 0's of the same round: the
   * median of these paired ratios drifts least with the machine's load */
  double pr[MAX_CONF][64];
  for (int i = 0; i < n; i++)
    for (int r = 0; r < reps; r++) pr[i][r] = cs[i].t[r] / cs[0].t[r];
  for (int i = 0; i < n; i++) {
    double lo = cs[i].t[0], hi = cs[i].t[0];
    for (int r = 1; r < reps; r++) {
      if (cs[i].t[r] < lo) lo = cs[i].t[r];
      if (cs[i].t[r] > hi) hi = cs[i].t[r];
    }
    double m = bench_median(cs[i].t, reps);
    printf("  %-26s median %9.2f ms (min %9.2f, max %9.2f)", cs[i].name,
           m * 1e3, lo * 1e3, hi * 1e3);
    if (i == 0) {
      med0 = m;
      printf("\n");
    } else {
      printf("  %s %.3f (of medians %.3f)\n", ratio_word,
             bench_median(pr[i], reps), m / med0);
    }
  }
  return 0;
}

static int bench_window(int argc, char **argv) {
  long n = bench_arg(argc, argv, 2, 16384, 0),
       H = bench_arg(argc, argv, 3, 8, 0);
  long D = bench_arg(argc, argv, 4, 64, 0),
       W = bench_arg(argc, argv, 5, 256, 0);
  int reps = (int)bench_arg(argc, argv, 6, 7, 0),
      threads = (int)bench_arg(argc, argv, 7, 1, 0);
  unsigned seed = 1;
  size_t elems = (size_t)n * (size_t)H * (size_t)D;
  if (reps < 1 || reps > 64 || n < 1 || H < 1 || D < 1) return 2;
  float *q = bench_random(elems, &seed, -0.5f, 0.5f),
        *k = bench_random(elems, &seed, -0.5f, 0.5f);
  float *v = bench_random(elems, &seed, -0.5f, 0.5f),
        *o = bench_random(elems, &seed, -0.5f, 0.5f);
  conf cs[2];
  memset(cs, 0, sizeof cs);
  for (int i = 0; i < 2; i++) {
    cs[i].run = run_sdpa;
    cs[i].sp = (attn_sdpa_problem){.B = 1,
                                   .H = H,
                                   .Hkv = H,
                                   .Lq = n,
                                   .Lk = n,
                                   .Dk = D,
                                   .Dv = D,
                                   .q = {q, 0, D, H * D},
                                   .k = {k, 0, D, H * D},
                                   .v = {v, 0, D, H * D}};
    cs[i].sp.o.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
    cs[i].x.threads = threads;
    cs[i].out = (attn_mview){o, 0, D, H * D};
  }
  cs[0].name = "full causal";
  cs[1].name = "causal, window [W, 0]";
  cs[1].sp.o.has_window = 1;
  cs[1].sp.o.window_left = W;
  cs[1].sp.o.window_right = 0;
  printf(
      "attention core (attn_sdpa, no projections, no weights), n=%ld "
      "heads=%ld d_head=%ld W=%ld threads=%d, %d interleaved rounds, "
      "kernel %s\n",
      n, H, D, W, threads, reps, attn_engine_kernel_name());
  int rc = interleave(cs, 2, reps, "time / full causal:");
  if (!rc) {
    double r[64];
    for (int i = 0; i < reps; i++) r[i] = cs[0].t[i] / cs[1].t[i];
    printf(
        "  window speed-up over full causal: %.1fx (median of the "
        "rounds' ratios; of the medians %.1fx)\n",
        bench_median(r, reps),
        bench_median(cs[0].t, reps) / bench_median(cs[1].t, reps));
  }
  free(q);
  free(k);
  free(v);
  free(o);
  return rc;
}

static int bench_costs(int argc, char **argv) {
  long n = bench_arg(argc, argv, 2, 2048, 0),
       E = bench_arg(argc, argv, 3, 512, 0);
  long H = bench_arg(argc, argv, 4, 8, 0);
  int reps = (int)bench_arg(argc, argv, 5, 15, 0),
      threads = (int)bench_arg(argc, argv, 6, 1, 0);
  int causal = (int)bench_arg(argc, argv, 7, 0, 0);
  unsigned seed = 3;
  if (reps < 1 || reps > 64 || n < 1 || E < 1 || H < 1 || E % H) return 2;
  float *xq = bench_random((size_t)(n * E), &seed, -1.0f, 1.0f);
  float *w = bench_random((size_t)(4 * E * E), &seed, -0.125f, 0.125f);
  float *bias = bench_random((size_t)(4 * E), &seed, -0.25f, 0.25f);
  float *out = bench_random((size_t)(n * E), &seed, -0.5f, 0.5f);
  float *slopes = malloc((size_t)H * sizeof *slopes);
  if (!slopes || attn_alibi_slopes(H, slopes, NULL) != ATTN_OK) return 1;
  static const char *const names[MAX_CONF] = {
      "plain", "alibi", "softcap 50", "rotary", "alibi + softcap + rotary"};
  conf cs[MAX_CONF];
  memset(cs, 0, sizeof cs);
  for (int i = 0; i < MAX_CONF; i++) {
    conf *c = &cs[i];
    c->name = names[i];
    c->run = run_mha;
    c->mout = out;
    c->x.threads = threads;
    c->mp = (attn_mha_problem){.B = 1,
                               .Lq = n,
                               .E = E,
                               .H = H,
                               .Hkv = H,
                               .xq = xq,
                               .wq = {w, ATTN_W_IN_OUT, 0},
                               .wk = {w + E * E, ATTN_W_IN_OUT, 0},
                               .wv = {w + 2 * E * E, ATTN_W_IN_OUT, 0},
                               .wo = {w + 3 * E * E, ATTN_W_IN_OUT, 0},
                               .bq = bias,
                               .bk = bias + E,
                               .bv = bias + 2 * E,
                               .bo = bias + 3 * E};
    c->mp.o.causal = causal;
    if (i == 1 || i == 4) c->mp.o.alibi_slopes = slopes;
    if (i == 2 || i == 4) c->mp.o.softcap = 50.0f;
    if (i == 3 || i == 4) c->mp.o.rotary.on = 1;
  }
  printf(
      "attn_mha self-attention, n=%ld d_model=%ld heads=%ld causal=%d "
      "threads=%d, no weights, %d interleaved rounds, kernel %s\n",
      n, E, H, causal, threads, reps, attn_engine_kernel_name());
  int rc = interleave(cs, MAX_CONF, reps, "time / plain:");
  free(xq);
  free(w);
  free(bias);
  free(out);
  free(slopes);
  return rc;
}

int main(int argc, char **argv) {
  attn_engine_set_blas_threads(1);
  if (argc >= 2 && strcmp(argv[1], "window") == 0)
    return bench_window(argc, argv);
  if (argc >= 2 && strcmp(argv[1], "costs") == 0)
    return bench_costs(argc, argv);
  fprintf(stderr,
          "usage: bench_variants window [n] [heads] [d_head] [W] [reps] "
          "[threads]\n"
          "       bench_variants costs [n] [d_model] [heads] [reps] "
          "[threads] [causal]\n");
  return 2;
}
