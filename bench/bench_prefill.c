/* bench_prefill.c - attnd's side of bench/prefill_peers (issue 45): one
 * prefill shape through the public engine API, timed or run once on given
 * inputs.
 *
 * DESIGN
 *  Two problems, as a client of include/attn/engine.h calls them:
 *   sdpa  attn_sdpa without projections: q, k, v [n, H*D] row-major, head h
 *         at column block h (sh = D, ld = H*D, as after a projection; the
 *         layout of ORT's MultiHeadAttention / GroupQueryAttention inputs
 *         [1, n, H*D]); out the same layout.
 *   mha   attn_mha self-attention with projection weights: x [n, E]
 *         (E = H*D), wq, wk, wv, wo [E, E] stored [in, out]
 *         (ATTN_W_IN_OUT, X @ W as ORT's MatMul nodes), no biases; out
 *         [n, E].
 *  Causal: ATTN_CAUSAL_BOTTOM_RIGHT (Lq = Lk, so the same as top-left).
 *  Precision: fp32, or bf16 (attn_precision: bf16 operands, fp32
 *  accumulation).  OpenBLAS is set to 1 thread (attn_engine_set_blas_threads):
 *  the engine's own threads, attn_exec.threads, are the parallelism.
 *
 * Usage:
 *   bench_prefill time KIND n H D threads causal PREC [reps]
 *     KIND sdpa | mha, PREC fp32 | bf16, reps 0 = adaptive (about 1.5 s,
 *     3..25 calls).  Random inputs U(-1, 1), weights U(+-1/sqrt(E)).  One
 *     warm-up call, then timed calls: with 1 thread the process's CPU time
 *     (the engine runs in this thread, so a shared machine's other work
 *     does not count), with more the wall clock.  Prints one JSON line:
 *     {"ms": median, "ms_min", "k", "flops": attn_*_flops (causal not
 *     discounted), "kernel": attn_exec.kernel}.
 *   bench_prefill check KIND n H D threads causal PREC IN OUT
 *     reads raw little-endian fp32 from IN: q, k, v (sdpa) or x, wq, wk,
 *     wv, wo (mha), in this order; runs once; writes out (fp32) to OUT.
 *  Exit status 0, 1 when the engine refuses or memory runs out (the
 *  diagnostic on stderr), 2 on a usage error.  Reports only. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "attn/engine.h"

#define BENCH_NAME "bench_prefill"
#include "bench_util.h"

typedef struct shape {
  int mha;
  long n, H, D, threads, causal;
  attn_precision prec;
} shape;

typedef struct bufs {
  float *a[5]; /* sdpa: q k v; mha: x wq wk wv wo */
  float *out;
} bufs;

static int usage(void) {
  fprintf(stderr,
          "usage: bench_prefill time KIND n H D threads causal PREC [reps]\n"
          "       bench_prefill check KIND n H D threads causal PREC IN OUT\n"
          "       KIND sdpa|mha, PREC fp32|bf16, causal 0|1\n");
  return 2;
}

/* Element counts of the inputs, in file order. */
static int inputs(const shape *s, size_t len[5]) {
  size_t nx = (size_t)s->n * (size_t)(s->H * s->D), ww = (size_t)(s->H * s->D);
  if (s->mha) {
    len[0] = nx;
    for (int i = 1; i < 5; i++) len[i] = ww * ww;
    return 5;
  }
  len[0] = len[1] = len[2] = nx;
  return 3;
}

/* One engine call; returns its status, the diagnostic printed on failure. */
static attn_status call(const shape *s, const bufs *b, const attn_exec *x,
                        double *flops) {
  attn_diag d = {{0}};
  attn_status st;
  int64_t E = s->H * s->D;
  attn_attend_opts o = {.causal = s->causal ? ATTN_CAUSAL_BOTTOM_RIGHT : 0,
                        .precision = s->prec};
  if (s->mha) {
    attn_mha_problem p = {.B = 1,
                          .Lq = s->n,
                          .Lk = s->n,
                          .E = E,
                          .H = s->H,
                          .Hkv = s->H,
                          .kdim = E,
                          .vdim = E,
                          .xq = b->a[0],
                          .wq = {b->a[1], ATTN_W_IN_OUT, 0, NULL},
                          .wk = {b->a[2], ATTN_W_IN_OUT, 0, NULL},
                          .wv = {b->a[3], ATTN_W_IN_OUT, 0, NULL},
                          .wo = {b->a[4], ATTN_W_IN_OUT, 0, NULL},
                          .o = o};
    st = attn_mha(&p, x, b->out, NULL, &d);
    if (flops) *flops = attn_mha_flops(&p);
  } else {
    attn_sdpa_problem p = {.B = 1,
                           .H = s->H,
                           .Hkv = s->H,
                           .Lq = s->n,
                           .Lk = s->n,
                           .Dk = s->D,
                           .Dv = s->D,
                           .q = {b->a[0], 0, s->D, E},
                           .k = {b->a[1], 0, s->D, E},
                           .v = {b->a[2], 0, s->D, E},
                           .o = o};
    attn_mview out = {b->out, 0, s->D, E};
    st = attn_sdpa(&p, x, out, NULL, &d);
    if (flops) *flops = attn_sdpa_flops(&p);
  }
  if (st != ATTN_OK)
    fprintf(stderr, BENCH_NAME ": %s: %s\n", attn_strerror(st), d.msg);
  return st;
}

static int read_inputs(const char *path, bufs *b, const size_t *len, int k) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    perror(path);
    return 1;
  }
  for (int i = 0; i < k; i++) {
    b->a[i] = malloc(len[i] * sizeof(float));
    if (!b->a[i] || fread(b->a[i], sizeof(float), len[i], f) != len[i]) {
      fprintf(stderr, BENCH_NAME ": %s: short or unreadable\n", path);
      fclose(f);
      return 1;
    }
  }
  fclose(f);
  return 0;
}

int main(int argc, char **argv) {
  if (argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
    usage();
    return 0;
  }
  if (argc < 9) return usage();
  int check = !strcmp(argv[1], "check");
  if (!check && strcmp(argv[1], "time")) return usage();
  shape s = {.mha = !strcmp(argv[2], "mha")};
  if (!s.mha && strcmp(argv[2], "sdpa")) return usage();
  s.n = bench_arg(argc, argv, 3, 0, 1);
  s.H = bench_arg(argc, argv, 4, 0, 1);
  s.D = bench_arg(argc, argv, 5, 0, 1);
  s.threads = bench_arg(argc, argv, 6, 1, 1);
  s.causal = bench_arg(argc, argv, 7, 0, 0);
  if (!attn_precision_parse(argv[8], &s.prec)) return usage();
  if (check && argc != 11) return usage();
  long reps = check ? 0 : bench_arg(argc, argv, 9, 0, 0);

  attn_engine_set_blas_threads(1);
  size_t len[5];
  int k = inputs(&s, len);
  bufs b = {{NULL}, NULL};
  b.out = malloc((size_t)s.n * (size_t)(s.H * s.D) * sizeof(float));
  if (!b.out) return 1;
  const char *kernel = "";
  attn_exec x = {.threads = (int)s.threads, .kernel = &kernel};
  if (check) {
    if (read_inputs(argv[9], &b, len, k)) return 1;
    if (call(&s, &b, &x, NULL) != ATTN_OK) return 1;
    FILE *f = fopen(argv[10], "wb");
    size_t no = (size_t)s.n * (size_t)(s.H * s.D);
    if (!f || fwrite(b.out, sizeof(float), no, f) != no || fclose(f)) {
      perror(argv[10]);
      return 1;
    }
    printf("{\"ok\": true, \"kernel\": \"%s\"}\n", kernel);
  } else {
    unsigned seed = 1;
    float ws = 1.0f / sqrtf((float)(s.H * s.D));
    for (int i = 0; i < k; i++) {
      int w = s.mha && i > 0;
      b.a[i] = bench_random(len[i], &seed, w ? -ws : -1.0f, w ? ws : 1.0f);
    }
    clockid_t clk = s.threads == 1 ? CLOCK_PROCESS_CPUTIME_ID : CLOCK_MONOTONIC;
    double flops = 0, t0 = bench_now(clk);
    if (call(&s, &b, &x, &flops) != ATTN_OK) return 1;
    double warm = bench_now(clk) - t0;
    int reps_n = reps ? (int)reps : (int)(1.5 / (warm > 1e-9 ? warm : 1e-9));
    if (!reps) reps_n = reps_n < 3 ? 3 : reps_n > 25 ? 25 : reps_n;
    double *t = malloc((size_t)reps_n * sizeof *t);
    if (!t) return 1;
    for (int r = 0; r < reps_n; r++) {
      t0 = bench_now(clk);
      call(&s, &b, &x, NULL);
      t[r] = bench_now(clk) - t0;
    }
    double med = bench_median(t, reps_n);
    printf(
        "{\"ms\": %.4f, \"ms_min\": %.4f, \"k\": %d, \"flops\": %.6g, "
        "\"kernel\": \"%s\"}\n",
        med * 1e3, t[0] * 1e3, reps_n, flops, kernel);
    free(t);
  }
  for (int i = 0; i < k; i++) free(b.a[i]);
  free(b.out);
  return 0;
}
