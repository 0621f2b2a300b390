/* bench_decode.c - a decode step of sessions (engine.h attn_kv_attend over
 * kv.h's blocks) against the machine's streaming read, in one run (issue
 * 42).
 *
 * DESIGN
 * Decode is bound by memory: a step reads every cached key and value
 * once.  So the measure is the bytes of keys and values read per second,
 * and its ratio to a STREAM-style read (a sum of every 64-byte line of a
 * buffer far larger than the last-level cache, on huge pages as the
 * pool's chunks are, by the same number of threads, each its share)
 * measured in the same run: the kernel's calls and the streaming reads
 * alternate, and each line gives the median of each and the median of the
 * rounds' own ratios (the machine is shared and drifts); then "hot": the
 * median of as many calls back to back, the cache warm when it fits (a
 * small step's case).  Shape: Llama-3-8B's layer (32 query heads, 8 kv
 * heads, head dim 128), one query row per sequence (t = 1), B sequences of
 * T cached tokens each, storage fp32, bf16, fp16, 1 and 2 threads.  One
 * thread is timed in the process's CPU time (the engine runs in this
 * thread: other work on the machine does not count), more in wall time.
 * The caches are filled by attn_kv_encode and attn_kv_seq_append (random
 * U(-1, 1) rows, the same for every sequence), as a session would.
 * Shapes whose cache exceeds the memory cap are skipped, with a line.
 *
 * Usage:
 *   bench_decode [rounds] [cap_mib] [B] [T] [dtype] [threads]
 *
 * Defaults: 7 rounds; 1536 MiB; B in {1, 8, 32} and T in {1024, 4096,
 * 16384, 32768}, or only the given B (and T), any B >= 1 and T >= 1 (T
 * 256: the cache-resident small step); fp32, bf16 and fp16, or only the
 * dtype given (0 for B or T: all of them); 1 and 2 threads, or only the
 * count given (bench/sessions runs one line at a time between its
 * server's steps).  Reports only. */
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "attn/engine.h"
#include "attn/kv.h"

#define BENCH_NAME "bench_decode"
#include "bench_util.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

#define H 32
#define HKV 8
#define D 128
#define STREAM_BYTES ((size_t)1 << 30) /* 32x the L3 of the machines here */
#define MAX_THREADS 8

/* The streaming reads' sums end here, so that they are computed. */
static volatile uint64_t bench_sink;

static clockid_t clock_of(int threads) {
  return threads == 1 ? CLOCK_PROCESS_CPUTIME_ID : CLOCK_MONOTONIC;
}

/* ---- the streaming read -------------------------------------------------- */

typedef struct stream_part {
  const unsigned char *p;
  size_t n;
  uint64_t sum;
} stream_part;

#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("avx512f"))) static uint64_t sum_avx512(
    const unsigned char *p, size_t n) {
  __m512i a = _mm512_setzero_si512(), b = a, c = a, d = a;
  for (size_t i = 0; i + 256 <= n; i += 256) {
    a = _mm512_add_epi64(a, _mm512_load_si512(p + i));
    b = _mm512_add_epi64(b, _mm512_load_si512(p + i + 64));
    c = _mm512_add_epi64(c, _mm512_load_si512(p + i + 128));
    d = _mm512_add_epi64(d, _mm512_load_si512(p + i + 192));
  }
  a = _mm512_add_epi64(_mm512_add_epi64(a, b), _mm512_add_epi64(c, d));
  return (uint64_t)_mm512_reduce_add_epi64(a);
}
#endif

static uint64_t sum_plain(const unsigned char *p, size_t n) {
  const uint64_t *w = (const uint64_t *)p;
  uint64_t a[8] = {0};
  for (size_t i = 0; i + 8 <= n / 8; i += 8)
    for (int k = 0; k < 8; k++) a[k] += w[i + k];
  return a[0] + a[1] + a[2] + a[3] + a[4] + a[5] + a[6] + a[7];
}

static void *stream_run(void *arg) {
  stream_part *s = arg;
#if defined(__x86_64__) && defined(__GNUC__)
  if (__builtin_cpu_supports("avx512f")) {
    s->sum = sum_avx512(s->p, s->n);
    return NULL;
  }
#endif
  s->sum = sum_plain(s->p, s->n);
  return NULL;
}

/* Seconds to read buf (STREAM_BYTES) once with `threads` threads, each a
 * contiguous share; threads are started per read, as the engine does. */
static double stream_read(const unsigned char *buf, int threads,
                          uint64_t *sink) {
  pthread_t t[MAX_THREADS];
  stream_part part[MAX_THREADS];
  size_t share = STREAM_BYTES / (size_t)threads / 256 * 256;
  double t0 = bench_now(clock_of(threads));
  for (int i = 0; i < threads; i++) {
    part[i] = (stream_part){buf + (size_t)i * share, share, 0};
    if (i > 0) pthread_create(&t[i], NULL, stream_run, &part[i]);
  }
  stream_run(&part[0]);
  for (int i = 1; i < threads; i++) pthread_join(t[i], NULL);
  double dt = bench_now(clock_of(threads)) - t0;
  for (int i = 0; i < threads; i++) *sink += part[i].sum;
  return dt;
}

/* The buffer of the streaming read, filled: 2 MiB-aligned and asked for
 * huge pages as the pool's chunks are (kv.c), so that both reads have the
 * same pages (with 4 KiB pages a single thread's read is a third slower
 * here). */
static unsigned char *stream_buffer(void) {
  size_t span = STREAM_BYTES + ((size_t)2 << 20);
  unsigned char *m = mmap(NULL, span, PROT_READ | PROT_WRITE,
                          MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) {
    fprintf(stderr, "bench_decode: out of memory\n");
    exit(1);
  }
  size_t head = (((size_t)2 << 20) - (uintptr_t)m % ((size_t)2 << 20)) %
                ((size_t)2 << 20);
  if (head) munmap(m, head);
  munmap(m + head + STREAM_BYTES, span - head - STREAM_BYTES);
#ifdef MADV_HUGEPAGE
  madvise(m + head, STREAM_BYTES, MADV_HUGEPAGE);
#endif
  memset(m + head, 1, STREAM_BYTES);
  return m + head;
}

/* ---- the caches ---------------------------------------------------------- */

typedef struct batch {
  attn_kv_pool *pool;
  attn_kv_seq **seq;
  attn_kv_view *views;
  int64_t B, T;
} batch;

static void die(const char *what, const attn_diag *d) {
  fprintf(stderr, "bench_decode: %s: %s\n", what, d->msg);
  exit(1);
}

/* B sequences of T tokens of dtype dt, the same random rows in each. */
static void batch_fill(batch *bt, int64_t B, int64_t T, attn_kv_dtype dt,
                       unsigned *seed) {
  attn_diag d;
  attn_kv_shape sh = {HKV, D, dt};
  size_t bytes = (size_t)B * (size_t)((T + 15) / 16) * attn_kv_block_bytes(&sh);
  size_t row = HKV * D, e = attn_kv_dtype_size(dt);
  bt->B = B;
  bt->T = T;
  if (attn_kv_pool_create(bytes + ((size_t)64 << 20), &bt->pool, &d))
    die("pool", &d);
  bt->seq = calloc((size_t)B, sizeof *bt->seq);
  bt->views = calloc((size_t)B, sizeof *bt->views);
  float *k = bench_random((size_t)T * row, seed, -1.0f, 1.0f);
  float *v = bench_random((size_t)T * row, seed, -1.0f, 1.0f);
  void *ke = malloc((size_t)T * row * e), *ve = malloc((size_t)T * row * e);
  attn_attend_opts o = {0};
  attn_kv_rows r = {T, HKV, D, dt, 0, k, v};
  if (!bt->seq || !bt->views || !ke || !ve) {
    fprintf(stderr, "bench_decode: out of memory\n");
    exit(1);
  }
  if (attn_kv_encode(&r, &o, ke, ve, &d)) die("encode", &d);
  for (int64_t b = 0; b < B; b++) {
    if (attn_kv_seq_create(bt->pool, &sh, &bt->seq[b], &d) ||
        attn_kv_seq_append(bt->seq[b], T, ke, ve, &d))
      die("append", &d);
    bt->views[b] = attn_kv_seq_view(bt->seq[b]);
  }
  free(k);
  free(v);
  free(ke);
  free(ve);
}

static void batch_free(batch *bt) {
  for (int64_t b = 0; b < bt->B; b++) attn_kv_seq_free(bt->seq[b]);
  attn_kv_pool_destroy(bt->pool);
  free(bt->seq);
  free(bt->views);
}

/* ---- one line ------------------------------------------------------------ */

static double decode(const attn_kv_problem *p, int threads, float *out,
                     float *lse) {
  attn_exec x = {.threads = threads};
  attn_diag d;
  double t0 = bench_now(clock_of(threads));
  if (attn_kv_attend(p, &x, out, lse, &d)) die("attend", &d);
  return bench_now(clock_of(threads)) - t0;
}

static void line(const batch *bt, attn_kv_dtype dt, int threads, int rounds,
                 const unsigned char *sbuf, const float *q) {
  attn_kv_problem p = {bt->B, 1, H, HKV, D, dt, bt->views, q, 0, {0}};
  p.o.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
  float *out = malloc((size_t)bt->B * H * D * sizeof *out);
  float *lse = malloc((size_t)bt->B * H * sizeof *lse);
  double tk[64], ts[64], ratio[64];
  double bytes = (double)bt->B * (double)bt->T * HKV * D * 2.0 *
                 (double)attn_kv_dtype_size(dt);
  uint64_t sink = 0;
  decode(&p, threads, out, lse); /* warm-up */
  stream_read(sbuf, threads, &sink);
  for (int r = 0; r < rounds; r++) {
    if (r % 2) {
      ts[r] = stream_read(sbuf, threads, &sink);
      tk[r] = decode(&p, threads, out, lse);
    } else {
      tk[r] = decode(&p, threads, out, lse);
      ts[r] = stream_read(sbuf, threads, &sink);
    }
    ratio[r] = (bytes / tk[r]) / ((double)STREAM_BYTES / ts[r]);
  }
  double mk = bench_median(tk, rounds), ms = bench_median(ts, rounds);
  decode(&p, threads, out, lse); /* back to back: warm when it fits */
  decode(&p, threads, out, lse);
  for (int r = 0; r < rounds; r++) tk[r] = decode(&p, threads, out, lse);
  double mh = bench_median(tk, rounds);
  bench_sink += sink;
  printf(
      "B %3lld  T %5lld  %s  %d thread%s  %8.2f ms  K/V %6.2f GB/s  "
      "stream %6.2f GB/s  ratio %.2f  hot %6.2f GB/s\n",
      (long long)bt->B, (long long)bt->T, attn_kv_dtype_name(dt), threads,
      threads > 1 ? "s" : " ", mk * 1e3, bytes / mk * 1e-9,
      (double)STREAM_BYTES / ms * 1e-9, bench_median(ratio, rounds),
      bytes / mh * 1e-9);
  fflush(stdout);
  free(out);
  free(lse);
}

int main(int argc, char **argv) {
  int rounds = (int)bench_arg(argc, argv, 1, 7, 1);
  size_t cap = (size_t)bench_arg(argc, argv, 2, 1536, 1) << 20;
  long onlyB = bench_arg(argc, argv, 3, 0, 0),
       onlyT = bench_arg(argc, argv, 4, 0, 0);
  const char *onlyDt = argc > 5 ? argv[5] : NULL;
  int th0 = 1, th1 = 2;
  if (argc > 6) th0 = th1 = (int)bench_arg(argc, argv, 6, 1, 1);
  if (th1 > MAX_THREADS) {
    fprintf(stderr, BENCH_NAME ": at most %d threads\n", MAX_THREADS);
    return 2;
  }
  int64_t Bs[] = {1, 8, 32}, Ts[] = {1024, 4096, 16384, 32768};
  size_t nB = 3, nT = 4;
  if (onlyB) Bs[0] = onlyB, nB = 1; /* any B and T given */
  if (onlyT) Ts[0] = onlyT, nT = 1;
  static const attn_kv_dtype dts[] = {ATTN_KV_FP32, ATTN_KV_BF16, ATTN_KV_FP16};
  int known = !onlyDt;
  for (size_t di = 0; di < 3; di++)
    known |= onlyDt && strcmp(onlyDt, attn_kv_dtype_name(dts[di])) == 0;
  if (!known) {
    fprintf(stderr, BENCH_NAME ": dtype '%s': fp32, bf16 or fp16\n", onlyDt);
    return 2;
  }
  if (rounds > 64) rounds = 64;
  unsigned char *sbuf = stream_buffer();
  unsigned seed = 42;
  float *q = bench_random((size_t)32 * H * D, &seed, -1.0f, 1.0f);
  printf(
      "bench_decode: H %d, Hkv %d, D %d, t 1; kernel %s; stream buffer "
      "%zu MiB; %d rounds; medians\n",
      H, HKV, D, attn_engine_kv_kernel_name(), STREAM_BYTES >> 20, rounds);
  for (size_t bi = 0; bi < nB; bi++)
    for (size_t ti = 0; ti < nT; ti++)
      for (size_t di = 0; di < 3; di++) {
        int64_t B = Bs[bi], T = Ts[ti];
        if (onlyDt && strcmp(onlyDt, attn_kv_dtype_name(dts[di])) != 0)
          continue;
        double kv = (double)B * (double)T * HKV * D * 2.0 *
                    (double)attn_kv_dtype_size(dts[di]);
        if (kv > (double)cap) {
          printf(
              "B %3lld  T %5lld  %s  skipped: %.0f MiB of cache, above "
              "the cap of %zu MiB\n",
              (long long)B, (long long)T, attn_kv_dtype_name(dts[di]),
              kv / 1048576.0, cap >> 20);
          continue;
        }
        batch bt;
        batch_fill(&bt, B, T, dts[di], &seed);
        for (int th = th0; th <= th1; th++)
          line(&bt, dts[di], th, rounds, sbuf, q);
        batch_free(&bt);
      }
  munmap(sbuf, STREAM_BYTES);
  free(q);
  return 0;
}
