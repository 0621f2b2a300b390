/* bench_bf16.c - what attn_precision ATTN_PRECISION_BF16 buys (engine.h):
 * attn_mha self-attention in fp32 and in bf16 on the same inputs, without
 * weights and with per-head weights.
 *
 * DESIGN
 * The machine is shared and its speed drifts, so the comparison is a
 * ratio measured in one run: the two precisions' calls alternate (fp32
 * then bf16, bf16 then fp32, ...), and the speed-up is the median over
 * the rounds of each round's own ratio (the ratio of the medians beside
 * it).  One warm-up call of each first.  With one thread the times are
 * the process's CPU time (the calls run in this thread), so that other
 * work on a shared machine does not count; with more, wall time.  Inputs U(-1,
 * 1), weights of PyTorch's scale U(+-sqrt(3 / d_model)), [out, in] layout (a
 * state_dict's in_proj_weight), biases.  The bf16 kernel is the engine's choice
 * (attn_engine_bf16_kernel_name(); "portable" on a CPU without
 * AVX512-BF16, where no speed-up is expected).
 * Usage:
 *   bench_bf16 [n] [d_model] [heads] [reps] [threads] [weights] [held]
 *   bench_bf16 io n heads d_head dir
 * weights: 0 none (default), 1 per head, 2 mean.  held 1: the bf16 calls
 * read the projection weights held in bfloat16 (attn_weight.bf16, as a
 * bf16 resident model of a BF16 file), the fp32 calls the fp32 ones.  Defaults
 * n = 2048, d_model = 512, heads = 8, 7 rounds, 1 thread.  Reports only. io:
 * attn_sdpa on dir/q.f32, k.f32, v.f32 (raw fp32 [heads][n][d_head]), per-head
 * weights, in bf16 and fp32, into dir/out_bf16.f32, w_bf16.f32, out_fp32.f32,
 * w_fp32.f32 (bench/compare_bf16.py, against PyTorch). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "attn/engine.h"

#define BENCH_NAME "bench_bf16"
#include "bench_util.h"

/* The clock of the timings: the process's CPU time with one thread (the
 * engine runs in this thread: a shared machine's other work then does not
 * count), the wall clock with more. */
static clockid_t clock_id = CLOCK_MONOTONIC;

/* x rounded to bfloat16, to nearest even (finite x). */
static uint16_t to_bf16(float x) {
  uint32_t u;
  memcpy(&u, &x, sizeof u);
  return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

static double run(attn_mha_problem *p, const attn_exec *x, float *out, float *w,
                  attn_precision prec) {
  attn_diag d = {{0}};
  p->o.precision = prec;
  double t0 = bench_now(clock_id);
  if (attn_mha(p, x, out, w, &d) != ATTN_OK) {
    fprintf(stderr, "bench_bf16: %s\n", d.msg);
    exit(1);
  }
  return bench_now(clock_id) - t0;
}

static float *load(const char *dir, const char *name, size_t n) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "rb");
  float *p = malloc(n * sizeof *p);
  if (!f || !p || fread(p, sizeof *p, n, f) != n) {
    fprintf(stderr, "bench_bf16: cannot read %zu floats from %s\n", n, path);
    exit(1);
  }
  fclose(f);
  return p;
}

static void save(const char *dir, const char *name, const float *p, size_t n) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(p, sizeof *p, n, f) != n || fclose(f)) {
    fprintf(stderr, "bench_bf16: cannot write %s\n", path);
    exit(1);
  }
}

static int io(int argc, char **argv) {
  long n = bench_arg(argc, argv, 2, 0, 0), H = bench_arg(argc, argv, 3, 0, 0);
  long D = bench_arg(argc, argv, 4, 0, 0);
  if (argc != 6 || n < 1 || H < 1 || D < 1) {
    fprintf(stderr, "usage: bench_bf16 io n heads d_head dir\n");
    return 2;
  }
  const char *dir = argv[5];
  size_t nq = (size_t)H * n * D, nw = (size_t)H * n * n;
  float *q = load(dir, "q.f32", nq), *k = load(dir, "k.f32", nq);
  float *v = load(dir, "v.f32", nq);
  float *out = malloc(nq * sizeof *out), *w = malloc(nw * sizeof *w);
  attn_sdpa_problem p = {.B = 1,
                         .H = H,
                         .Hkv = H,
                         .Lq = n,
                         .Lk = n,
                         .Dk = D,
                         .Dv = D,
                         .q = {q, (int64_t)nq, n * D, D},
                         .k = {k, (int64_t)nq, n * D, D},
                         .v = {v, (int64_t)nq, n * D, D}};
  p.o.weights = ATTN_WEIGHTS_PER_HEAD;
  attn_mview ov = {out, (int64_t)nq, n * D, D};
  attn_diag d = {{0}};
  for (int bf = 0; bf < 2; bf++) {
    p.o.precision = bf ? ATTN_PRECISION_BF16 : ATTN_PRECISION_FP32;
    if (attn_sdpa(&p, NULL, ov, w, &d) != ATTN_OK) {
      fprintf(stderr, "bench_bf16: %s\n", d.msg);
      return 1;
    }
    save(dir, bf ? "out_bf16.f32" : "out_fp32.f32", out, nq);
    save(dir, bf ? "w_bf16.f32" : "w_fp32.f32", w, nw);
  }
  printf("bf16 kernel %s\n", attn_engine_bf16_kernel_name());
  free(q);
  free(k);
  free(v);
  free(out);
  free(w);
  return 0;
}

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "io") == 0) return io(argc, argv);
  long n = bench_arg(argc, argv, 1, 2048, 0),
       E = bench_arg(argc, argv, 2, 512, 0);
  long H = bench_arg(argc, argv, 3, 8, 0),
       reps = bench_arg(argc, argv, 4, 7, 0);
  long threads = bench_arg(argc, argv, 5, 1, 0),
       wmode = bench_arg(argc, argv, 6, 0, 0);
  long held = bench_arg(argc, argv, 7, 0, 0);
  if (n < 1 || E < 1 || H < 1 || E % H || reps < 1 || reps > 1000 ||
      wmode > 2 || held > 1) {
    fprintf(stderr,
            "usage: bench_bf16 [n] [d_model] [heads] [reps] "
            "[threads] [weights 0|1|2] [held 0|1]\n");
    return 2;
  }
  unsigned seed = 12345;
  float amp = (float)sqrt(3.0 / (double)E);
  float *x = bench_random((size_t)n * E, &seed, -1.0f, 1.0f);
  float *win = bench_random((size_t)3 * E * E, &seed, -(amp), amp);
  float *wo = bench_random((size_t)E * E, &seed, -(amp), amp);
  float *bin = bench_random((size_t)3 * E, &seed, -0.1f, 0.1f);
  float *bo = bench_random((size_t)E, &seed, -0.1f, 0.1f);
  float *out = malloc((size_t)n * E * sizeof *out);
  size_t nw = wmode == 1 ? (size_t)H * n * n : wmode == 2 ? (size_t)n * n : 0;
  float *w = nw ? malloc(nw * sizeof *w) : NULL;
  if (!out || (nw && !w)) {
    fprintf(stderr, "bench_bf16: out of memory\n");
    return 1;
  }
  attn_mha_problem p = {.B = 1,
                        .Lq = n,
                        .Lk = n,
                        .E = E,
                        .H = H,
                        .Hkv = H,
                        .kdim = E,
                        .vdim = E,
                        .xq = x,
                        .wq = {win, ATTN_W_OUT_IN, E},
                        .wk = {win + (size_t)E * E, ATTN_W_OUT_IN, E},
                        .wv = {win + (size_t)2 * E * E, ATTN_W_OUT_IN, E},
                        .wo = {wo, ATTN_W_OUT_IN, 0},
                        .bq = bin,
                        .bk = bin + E,
                        .bv = bin + 2 * E,
                        .bo = bo};
  p.o.weights = (attn_weights_mode)wmode;
  /* held: the bf16 calls read the weights held in bfloat16, as a bf16
   * resident model of a BF16 file does */
  attn_mha_problem pb = p;
  uint16_t *h16 = held ? malloc((size_t)4 * E * E * sizeof *h16) : NULL;
  if (held && !h16) return 1;
  for (size_t i = 0; held && i < (size_t)4 * E * E; i++)
    h16[i] = to_bf16(i < (size_t)3 * E * E ? win[i] : wo[i - 3 * E * E]);
  if (held) {
    attn_weight *hw[4] = {&pb.wq, &pb.wk, &pb.wv, &pb.wo};
    for (int i = 0; i < 4; i++) {
      hw[i]->bf16 = h16 + (size_t)i * E * E;
      hw[i]->data = NULL;
    }
  }
  attn_exec ex = {.threads = (int)threads};
  if (threads == 1) clock_id = CLOCK_PROCESS_CPUTIME_ID;
  printf(
      "bench_bf16: n=%ld d_model=%ld heads=%ld threads=%ld weights=%s; "
      "bf16 kernel %s, fp32 products %s, OpenBLAS %s\n",
      n, E, H, threads,
      wmode == 1   ? "per-head"
      : wmode == 2 ? "mean"
                   : "none",
      attn_engine_bf16_kernel_name(),
      attn_engine_kernel_for(ATTN_PRECISION_FP32), attn_engine_blas_core());
  run(&p, &ex, out, w, ATTN_PRECISION_FP32); /* warm-up */
  run(&pb, &ex, out, w, ATTN_PRECISION_BF16);
  double *t32 = malloc((size_t)reps * sizeof *t32);
  double *t16 = malloc((size_t)reps * sizeof *t16);
  double *ratio = malloc((size_t)reps * sizeof *ratio);
  for (long r = 0; r < reps; r++) {
    if (r % 2 == 0) {
      t32[r] = run(&p, &ex, out, w, ATTN_PRECISION_FP32);
      t16[r] = run(&pb, &ex, out, w, ATTN_PRECISION_BF16);
    } else {
      t16[r] = run(&pb, &ex, out, w, ATTN_PRECISION_BF16);
      t32[r] = run(&p, &ex, out, w, ATTN_PRECISION_FP32);
    }
    ratio[r] = t32[r] / t16[r];
  }
  double flops = attn_mha_flops(&p);
  double m32 = bench_median(t32, (int)reps), m16 = bench_median(t16, (int)reps);
  printf("fp32 median %.1f ms (%.0f GFLOP/s)\n", m32 * 1e3, flops / m32 * 1e-9);
  printf("bf16 median %.1f ms (%.0f GFLOP/s)\n", m16 * 1e3, flops / m16 * 1e-9);
  printf(
      "speed-up bf16 over fp32: median of round ratios %.2fx (ratio of "
      "medians %.2fx, %ld rounds)\n",
      bench_median(ratio, (int)reps), m32 / m16, reps);
  free(x);
  free(win);
  free(wo);
  free(bin);
  free(bo);
  free(out);
  free(w);
  free(t32);
  free(t16);
  free(ratio);
  free(h16);
  return 0;
}
