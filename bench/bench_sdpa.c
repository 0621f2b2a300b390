/* bench_sdpa.c - the attention core alone (attn_sdpa, no projections):
 * time per call, GFLOP/s, share of the cblas_sgemm rate measured in the
 * same run, and the causal / non-causal time ratio.  Beside the wall
 * clock, the process's CPU time per call and its rate against the FMA
 * peak of one core measured in the same run (a loop of 12 independent
 * 512-bit FMA chains, 256-bit without AVX-512): on a shared machine a
 * thread's CPU time is far less disturbed than wall time, and with
 * threads > 1 it is the sum of the threads' (so "% of peak" is per core).
 *
 * Usage: bench_sdpa [n] [heads] [d_head] [threads]   (default 2048 8 64 1)
 * Reports only; asserts nothing.  Best of 5 calls after one warm-up. */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "attn/engine.h"

#define BENCH_NAME "bench_sdpa"
#include "bench_util.h"

/* Single-thread sgemm rate on 2048x2048x512 (the bound's reference). */
static double sgemm_rate(void) {
  unsigned seed = 7;
  float *a = bench_random(2048 * 512, &seed, -0.5f, 0.5f),
        *b = bench_random(512 * 2048, &seed, -0.5f, 0.5f);
  float *c = bench_random(2048 * 2048, &seed, -0.5f, 0.5f);
  double best = 0;
  for (int r = 0; r < 5; r++) {
    double t0 = bench_now(CLOCK_MONOTONIC);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, 2048, 2048, 512,
                1.0f, a, 512, b, 2048, 0.0f, c, 2048);
    double g =
        2.0 * 2048 * 2048 * 512 / (bench_now(CLOCK_MONOTONIC) - t0) / 1e9;
    if (g > best) best = g;
  }
  free(a);
  free(b);
  free(c);
  return best;
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define FMA_CHAINS 12
#define FMA_STEPS 20000000L

/* Flops per CPU second of FMA_CHAINS independent FMA chains. */
__attribute__((target("avx512f"))) static double fma_peak512(void) {
  __m512 a[FMA_CHAINS], x = _mm512_set1_ps(0.999999f),
                        y = _mm512_set1_ps(1e-7f);
  for (int i = 0; i < FMA_CHAINS; i++) a[i] = _mm512_set1_ps((float)i);
  double t0 = bench_now(CLOCK_PROCESS_CPUTIME_ID);
  for (long s = 0; s < FMA_STEPS; s++)
    for (int i = 0; i < FMA_CHAINS; i++) a[i] = _mm512_fmadd_ps(a[i], x, y);
  double t = bench_now(CLOCK_PROCESS_CPUTIME_ID) - t0;
  float sink = 0;
  for (int i = 0; i < FMA_CHAINS; i++) sink += _mm512_reduce_add_ps(a[i]);
  if (sink == 12345.0f) printf(" ");
  return 2.0 * 16 * FMA_CHAINS * (double)FMA_STEPS / t;
}

__attribute__((target("avx2,fma"))) static double fma_peak256(void) {
  __m256 a[FMA_CHAINS], x = _mm256_set1_ps(0.999999f),
                        y = _mm256_set1_ps(1e-7f);
  float lane[8], sink = 0;
  for (int i = 0; i < FMA_CHAINS; i++) a[i] = _mm256_set1_ps((float)i);
  double t0 = bench_now(CLOCK_PROCESS_CPUTIME_ID);
  for (long s = 0; s < FMA_STEPS; s++)
    for (int i = 0; i < FMA_CHAINS; i++) a[i] = _mm256_fmadd_ps(a[i], x, y);
  double t = bench_now(CLOCK_PROCESS_CPUTIME_ID) - t0;
  for (int i = 0; i < FMA_CHAINS; i++) {
    _mm256_storeu_ps(lane, a[i]);
    sink += lane[0];
  }
  if (sink == 12345.0f) printf(" ");
  return 2.0 * 8 * FMA_CHAINS * (double)FMA_STEPS / t;
}

/* The best of 3 runs of the widest FMA loop the CPU has; 0 without FMA. */
static double fma_peak(void) {
  double best = 0;
  __builtin_cpu_init();
  for (int r = 0; r < 3; r++) {
    double g = __builtin_cpu_supports("avx512f") ? fma_peak512()
               : __builtin_cpu_supports("fma")   ? fma_peak256()
                                                 : 0;
    if (g > best) best = g;
  }
  return best / 1e9;
}
#else
static double fma_peak(void) {
  return 0;
}
#endif

int main(int argc, char **argv) {
  long n = bench_arg(argc, argv, 1, 2048, 1),
       H = bench_arg(argc, argv, 2, 8, 1);
  long D = bench_arg(argc, argv, 3, 64, 1),
       threads = bench_arg(argc, argv, 4, 1, 1);
  unsigned seed = 1;
  size_t elems = (size_t)n * (size_t)H * (size_t)D;
  attn_engine_set_blas_threads(1);
  float *q = bench_random(elems, &seed, -0.5f, 0.5f),
        *k = bench_random(elems, &seed, -0.5f, 0.5f);
  float *v = bench_random(elems, &seed, -0.5f, 0.5f),
        *o = malloc(elems * sizeof *o);
  if (!q || !k || !v || !o) return 1;
  double bound = sgemm_rate(), peak = fma_peak(), ms[2];
  /* heads as column blocks of [n, H*D], as after a projection */
  attn_sdpa_problem p = {.B = 1,
                         .H = H,
                         .Hkv = H,
                         .Lq = n,
                         .Lk = n,
                         .Dk = D,
                         .Dv = D,
                         .q = {q, 0, D, H * D},
                         .k = {k, 0, D, H * D},
                         .v = {v, 0, D, H * D}};
  attn_exec x = {.threads = (int)threads};
  attn_mview out = {o, 0, D, H * D};
  printf(
      "attention core, n=%ld heads=%ld d_head=%ld threads=%ld, kernel %s, "
      "sgemm %.1f GFLOP/s (1 thread), FMA peak %.1f GFLOP/s a core (CPU "
      "time)\n",
      n, H, D, threads, attn_engine_kernel_name(), bound, peak);
  for (int causal = 0; causal < 2; causal++) {
    attn_diag d = {{0}};
    p.o.causal = causal;
    if (attn_sdpa(&p, &x, out, NULL, &d) != ATTN_OK) {
      fprintf(stderr, "bench_sdpa: %s\n", d.msg);
      return 1;
    }
    double best = 1e30, cbest = 1e30;
    for (int r = 0; r < 5; r++) {
      double t0 = bench_now(CLOCK_MONOTONIC),
             c0 = bench_now(CLOCK_PROCESS_CPUTIME_ID);
      attn_sdpa(&p, &x, out, NULL, NULL);
      double t = bench_now(CLOCK_MONOTONIC) - t0,
             ct = bench_now(CLOCK_PROCESS_CPUTIME_ID) - c0;
      if (t < best) best = t;
      if (ct < cbest) cbest = ct;
    }
    ms[causal] = best * 1e3;
    double gf = attn_sdpa_flops(&p) / best / 1e9;
    printf(
        "  causal=%s  %8.2f ms  %6.1f GFLOP/s (full n^2)  %5.1f%% of "
        "sgemm x threads\n",
        causal ? "yes" : "no ", ms[causal], gf,
        100.0 * gf / (bound * (double)threads));
    double cg = attn_sdpa_flops(&p) / cbest / 1e9;
    printf(
        "             %8.2f ms CPU  %6.1f GFLOP/s a core, %5.1f%% of the FMA "
        "peak\n",
        cbest * 1e3, cg, peak > 0 ? 100.0 * cg / peak : 0.0);
  }
  printf("  causal / non-causal time: %.2f\n", ms[1] / ms[0]);
  free(q);
  free(k);
  free(v);
  free(o);
  return 0;
}
