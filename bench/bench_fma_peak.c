/* bench_fma_peak.c - the measured fp32 FMA peak of this machine, per core
 * and on 2 threads: the denominator of bench/prefill_peers's "% of peak".
 *
 * DESIGN
 *  A loop of fused multiply-adds with ACC (12) independent accumulators, no
 *  loads or stores, so that neither latency (4 cycles on Zen 4 and Sapphire
 *  Rapids) nor memory limits it: 12 chains cover 4 cycles x 2 FMA ports
 *  with room to spare.  Two widths, each where the CPU has it:
 *  512-bit (vfmadd231ps zmm, 16 lanes; AVX-512F) and 256-bit (ymm, 8 lanes;
 *  AVX2 + FMA).  Each kernel is compiled for its ISA by a target
 *  attribute and called only when __builtin_cpu_supports says the CPU has
 *  it, so the program runs anywhere (no FMA at all: it says so).
 *  A rate is 2 flops x lanes x ACC x iterations / seconds.  Per core: one
 *  thread, timed on its own CPU-time clock (CLOCK_THREAD_CPUTIME_ID), so
 *  that time the shared machine gives to others does not count; 2 threads:
 *  each thread's CPU-time rate summed, and also the wall-clock aggregate.
 *  Every measurement is repeated ROUNDS times and the best kept (a peak is
 *  the fastest the core was seen to go).  The accumulators are summed and
 *  printed so that the compiler cannot drop the loop.
 *  The peak of the run is the 512-bit rate where AVX-512 exists (Zen 4
 *  executes it double-pumped on 256-bit units: the same flops per cycle as
 *  two ymm FMAs, which the 256-bit line shows), else the 256-bit one.
 *
 * Usage: bench_fma_peak [--json] [seconds per measurement, default 0.25]
 *  --json: one line {"isa", "per_core", "two_threads", "two_threads_wall",
 *  "avx512_per_core", "avx2_per_core"} (GFLOP/s; 0 where not measured).
 * Reports only; asserts nothing. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define FMA_X86 1
#endif

#define BENCH_NAME "bench_fma_peak"
#include "bench_util.h"

#define ACC 12
#define ROUNDS 5

typedef float (*fma_kernel)(long iters);

#ifdef FMA_X86
/* The loop of both widths: ACC (12) named accumulators (an array would be
 * kept in memory by the compiler, one load per FMA), an empty asm so that
 * nothing is folded across iterations, then the sum of the accumulators.
 * T: the vector type, F: the FMA intrinsic, C: the asm constraint. */
#define FMA_LOOP(T, F, SET1, ADD, C)                                          \
  T a0 = SET1(0), a1 = SET1(1), a2 = SET1(2), a3 = SET1(3), a4 = SET1(4),     \
    a5 = SET1(5), a6 = SET1(6), a7 = SET1(7), a8 = SET1(8), a9 = SET1(9),     \
    a10 = SET1(10), a11 = SET1(11);                                           \
  const T m = SET1(0.999999f), c = SET1(1e-7f);                               \
  for (long it = 0; it < iters; it++) {                                       \
    a0 = F(a0, m, c), a1 = F(a1, m, c), a2 = F(a2, m, c);                     \
    a3 = F(a3, m, c), a4 = F(a4, m, c), a5 = F(a5, m, c);                     \
    a6 = F(a6, m, c), a7 = F(a7, m, c), a8 = F(a8, m, c);                     \
    a9 = F(a9, m, c), a10 = F(a10, m, c), a11 = F(a11, m, c);                 \
    __asm__ volatile(""                                                       \
                     : "+" C(a0), "+" C(a1), "+" C(a2), "+" C(a3), "+" C(a4), \
                       "+" C(a5), "+" C(a6), "+" C(a7), "+" C(a8), "+" C(a9), \
                       "+" C(a10), "+" C(a11));                               \
  }                                                                           \
  T s = ADD(ADD(ADD(a0, a1), ADD(a2, a3)), ADD(ADD(a4, a5), ADD(a6, a7)));    \
  s = ADD(s, ADD(ADD(a8, a9), ADD(a10, a11)))

/* iters x ACC dependent-free 512-bit FMAs; returns a sum of the lanes. */
__attribute__((target("avx512f"))) static float fma512(long iters) {
  FMA_LOOP(__m512, _mm512_fmadd_ps, _mm512_set1_ps, _mm512_add_ps, "v");
  return _mm512_reduce_add_ps(s);
}

/* The same with 256-bit FMAs (AVX2 + FMA). */
__attribute__((target("avx2,fma"))) static float fma256(long iters) {
  FMA_LOOP(__m256, _mm256_fmadd_ps, _mm256_set1_ps, _mm256_add_ps, "x");
  float l[8];
  _mm256_storeu_ps(l, s);
  return l[0] + l[1] + l[2] + l[3] + l[4] + l[5] + l[6] + l[7];
}
#endif

typedef struct job {
  fma_kernel k;
  long iters;
  double secs; /* this thread's CPU time */
  float sink;
} job;

static void *run_job(void *arg) {
  job *j = arg;
  double t0 = bench_now(CLOCK_THREAD_CPUTIME_ID);
  j->sink = j->k(j->iters);
  j->secs = bench_now(CLOCK_THREAD_CPUTIME_ID) - t0;
  return NULL;
}

typedef struct rate {
  double cpu, wall; /* GFLOP/s: summed per-thread CPU-time rates; wall */
} rate;

/* The best over ROUNDS of `threads` threads each running k for iters. */
static rate measure(fma_kernel k, int lanes, long iters, int threads,
                    float *sink) {
  rate best = {0, 0};
  double flops = 2.0 * lanes * ACC * (double)iters;
  for (int r = 0; r < ROUNDS; r++) {
    job jobs[2];
    pthread_t tid[2];
    double w0 = bench_now(CLOCK_MONOTONIC);
    for (int t = 0; t < threads; t++) {
      jobs[t] = (job){k, iters, 0, 0};
      if (pthread_create(&tid[t], NULL, run_job, &jobs[t])) {
        fprintf(stderr, BENCH_NAME ": pthread_create failed\n");
        exit(1);
      }
    }
    double cpu = 0;
    for (int t = 0; t < threads; t++) {
      pthread_join(tid[t], NULL);
      cpu += flops / jobs[t].secs / 1e9;
      *sink += jobs[t].sink;
    }
    double wall = flops * threads / (bench_now(CLOCK_MONOTONIC) - w0) / 1e9;
    if (cpu > best.cpu) best.cpu = cpu;
    if (wall > best.wall) best.wall = wall;
  }
  return best;
}

/* Iterations that take about `secs` on one thread (from a short probe). */
static long calibrate(fma_kernel k, double secs) {
  long it = 100000;
  for (;;) {
    double t0 = bench_now(CLOCK_THREAD_CPUTIME_ID);
    volatile float s = k(it);
    (void)s;
    double t = bench_now(CLOCK_THREAD_CPUTIME_ID) - t0;
    if (t > 0.02) return (long)((double)it * secs / t) + 1;
    it *= 4;
  }
}

int main(int argc, char **argv) {
  int json = 0, ai = 1;
  if (argc > 1 && !strcmp(argv[1], "--json")) json = ai = 2;
  if (argc > ai && (!strcmp(argv[ai], "--help") || !strcmp(argv[ai], "-h"))) {
    printf("usage: bench_fma_peak [--json] [seconds per measurement]\n");
    return 0;
  }
  double secs = 0.25;
  if (argc > ai) {
    char *end;
    secs = strtod(argv[ai], &end);
    if (*end || !(secs > 0 && secs < 60)) {
      fprintf(stderr, BENCH_NAME ": bad seconds '%s'\n", argv[ai]);
      return 2;
    }
  }
  rate r512[2] = {{0, 0}, {0, 0}}, r256[2] = {{0, 0}, {0, 0}};
  float sink = 0;
  const char *isa = "none";
#ifdef FMA_X86
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    long it = calibrate(fma256, secs);
    r256[0] = measure(fma256, 8, it, 1, &sink);
    r256[1] = measure(fma256, 8, it, 2, &sink);
    isa = "avx2";
  }
  if (__builtin_cpu_supports("avx512f")) {
    long it = calibrate(fma512, secs);
    r512[0] = measure(fma512, 16, it, 1, &sink);
    r512[1] = measure(fma512, 16, it, 2, &sink);
    isa = "avx512";
  }
#endif
  const rate *pk = r512[0].cpu > 0 ? r512 : r256;
  if (json) {
    printf(
        "{\"isa\": \"%s\", \"per_core\": %.2f, \"two_threads\": %.2f, "
        "\"two_threads_wall\": %.2f, \"avx512_per_core\": %.2f, "
        "\"avx2_per_core\": %.2f, \"sink\": %g}\n",
        isa, pk[0].cpu, pk[1].cpu, pk[1].wall, r512[0].cpu, r256[0].cpu,
        isfinite(sink) ? (double)sink : 0.0);
    return 0;
  }
  printf(
      "fp32 FMA peak, %d independent accumulators, best of %d (GFLOP/s; "
      "per-thread CPU time, and wall for 2 threads)\n",
      ACC, ROUNDS);
  if (r512[0].cpu > 0)
    printf("  512-bit: 1 thread %.1f, 2 threads %.1f (wall %.1f)\n",
           r512[0].cpu, r512[1].cpu, r512[1].wall);
  if (r256[0].cpu > 0)
    printf("  256-bit: 1 thread %.1f, 2 threads %.1f (wall %.1f)\n",
           r256[0].cpu, r256[1].cpu, r256[1].wall);
  if (!strcmp(isa, "none"))
    printf("  no AVX2/FMA or AVX-512 on this CPU: nothing measured\n");
  else
    printf("  peak per core (%s): %.1f GFLOP/s\n", isa, pk[0].cpu);
  printf("  (checksum %g)\n", (double)sink);
  return 0;
}
