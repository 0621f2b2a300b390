/* bench_util.h - what the engine benchmarks (bench_sdpa.c, bench_variants.c,
 * bench_bf16.c) share: a clock, seeded random data, positional arguments
 * and medians.  Each program defines BENCH_NAME (its name, for messages)
 * before including this.  Header-only: the benchmarks are one file each. */
#ifndef ATTN_BENCH_UTIL_H
#define ATTN_BENCH_UTIL_H

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#ifndef BENCH_NAME
#error "define BENCH_NAME before including bench_util.h"
#endif

/* Seconds on `clock` (CLOCK_MONOTONIC, or CLOCK_PROCESS_CPUTIME_ID for a
 * one-thread run on a shared machine). */
static inline double bench_now(clockid_t clock) {
  struct timespec t;
  clock_gettime(clock, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* n floats uniform in [lo, hi) from a 32-bit LCG (*seed advances); exits
 * when out of memory. */
static inline float *bench_random(size_t n, unsigned *seed, float lo,
                                  float hi) {
  float *p = malloc((n ? n : 1) * sizeof *p);
  if (!p) {
    fprintf(stderr, BENCH_NAME ": out of memory\n");
    exit(1);
  }
  for (size_t i = 0; i < n; i++) {
    *seed = *seed * 1664525u + 1013904223u;
    p[i] = lo + (hi - lo) * ((float)(*seed >> 8) / 16777216.0f);
  }
  return p;
}

/* argv[i] as a number >= min, dflt when absent; exits 2 on anything
 * else. */
static inline long bench_arg(int argc, char **argv, int i, long dflt,
                             long min) {
  if (argc <= i) return dflt;
  char *end;
  long v = strtol(argv[i], &end, 10);
  if (*end || end == argv[i] || v < min) {
    fprintf(stderr, BENCH_NAME ": bad argument '%s'\n", argv[i]);
    exit(2);
  }
  return v;
}

static inline int bench_cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* The median of t[0, k) (k >= 1; t is sorted). */
static inline double bench_median(double *t, int k) {
  qsort(t, (size_t)k, sizeof *t, bench_cmp_double);
  return k % 2 ? t[k / 2] : 0.5 * (t[k / 2 - 1] + t[k / 2]);
}

#endif /* ATTN_BENCH_UTIL_H */
