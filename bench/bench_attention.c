/* bench_attention.c - time attn_mha against the machine's own sgemm rate.
 *
 * DESIGN
 *  Purpose.  For a grid of self-attention problems (n tokens, d_model, h
 *  heads, engine threads, causal or not, per-head weights or not) report the
 *  median milliseconds per attn_mha call, the GFLOP/s that implies (FLOPs as
 *  counted by attn_mha_flops, causal not discounted) and the percentage of
 *  the "sgemm bound": the time the same FLOPs would take at the cblas_sgemm
 *  rate measured in the same process, on the same thread count.  Nothing is
 *  asserted about time; the program only reports.
 *
 *  The sgemm rate.  Two shapes, both row-major NoTrans/NoTrans, fp32:
 *  M x N x K = 2048x2048x512 (the shape of one head's score block, widened)
 *  and 4096x512x512 (a projection).  Both are timed with OpenBLAS at 1
 *  thread and at 2 threads at start-up and again at the end of the run, and
 *  the first shape again, briefly, just before every row at that row's
 *  thread count (on a shared machine a rate taken once can be halved by a
 *  neighbour's compile).  The bound for a thread count is the fastest rate
 *  seen in the run, so "% of bound" is conservative.  OpenBLAS is set to 2
 *  threads only for a 2-thread sgemm measurement and reset to 1 right
 *  after, followed by a 0.3 s pause so its spinning workers go to sleep.
 *
 *  Threads.  The engine owns parallelism: attn_engine_set_blas_threads(1) is
 *  called once and each row passes attn_exec.threads = 1 or 2.  The program
 *  itself is single-threaded.
 *
 *  Timing.  One warm-up call (which also faults in the output pages), then k
 *  timed calls with CLOCK_MONOTONIC; k = --reps, or adapted so that a row
 *  takes about one and a half seconds (3 <= k <= 25).  The median and the
 *  minimum are printed.  --runs R repeats the whole grid R times and the
 *  summary keeps each row's best median and the range of its medians: on
 *  a shared 2-core machine 2-thread rows fluctuate from run to run.
 *
 *  Other modes.
 *   --rss N        one call at n = N, d_model = 512, h = 8, no weights,
 *                  1 thread; prints peak RSS (getrusage ru_maxrss).
 *   --emit-json    the same grid, one JSON object per line (bench/compare).
 *   --load F --save G
 *                  read a problem and its inputs from F (format below), run
 *                  attn_mha once and write the output (and per-head weights)
 *                  to G.  bench/compare uses it to feed attnd, numpy and
 *                  PyTorch the same inputs.
 *
 *  File format of --load (little-endian, packed):
 *    "ATTNIN01", int64 n, d, h, causal, weights (0 none, 1 per-head), threads,
 *    float X[n*d], Wq[d*d], Wk[d*d], Wv[d*d], Wo[d*d]   (all [in, out]),
 *    float bq[d], bk[d], bv[d], bo[d].
 *  File format of --save:
 *    "ATTNOUT1", int64 status, float out[n*d], then float w[h*n*n] when
 *    per-head weights were asked for.
 *
 *  Invariants.  Buffers are allocated per row and freed before the next one;
 *  a failed engine call prints the status and diagnostic and exits 1.
 */
#include <cblas.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "attn/engine.h"
#include "attn/status.h"

#define MAX_LIST 8

/* A comma-separated option value such as "--n 512,2048". */
typedef struct int_list {
  int n;
  long v[MAX_LIST];
} int_list;

typedef struct bench_opts {
  int_list ns, ds, hs, threads, causal, weights;
  int reps;   /* 0 = adaptive */
  int runs;   /* times the whole grid is run (best and range kept) */
  int json;   /* --emit-json */
  long rss_n; /* --rss N; 0 = off */
  const char *load, *save;
} bench_opts;

/* One measured row. */
typedef struct row {
  long n, d, h;
  int threads, causal, weights;
  int k;
  double ms_median, ms_min, flops;
  double sgemm_now; /* sgemm GFLOP/s measured just before, same threads */
  double flops_eff; /* causal: only the attended (i, j) pairs counted */
} row;

/* sgemm rates in GFLOP/s, index [shape][threads-1]. */
#define N_SHAPES 2
static const int sgemm_shape[N_SHAPES][3] = {{2048, 2048, 512},
                                             {4096, 512, 512}};

/* ---- small utilities ---------------------------------------------------- */

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Median of t[0..k); sorts t in place. */
static double median(double *t, int k) {
  qsort(t, (size_t)k, sizeof *t, cmp_double);
  return k % 2 ? t[k / 2] : 0.5 * (t[k / 2 - 1] + t[k / 2]);
}

/* Zeroed, 64-byte aligned floats; exits on failure (a benchmark has nothing
 * to recover).  Free with free(). */
static float *alloc_floats(size_t count) {
  size_t bytes = count * sizeof(float);
  if (count != 0 && bytes / sizeof(float) != count) {
    fprintf(stderr, "bench: size overflow\n");
    exit(1);
  }
  bytes = (bytes + 63) / 64 * 64;
  if (bytes == 0) bytes = 64;
  float *p = aligned_alloc(64, bytes);
  if (!p) {
    fprintf(stderr, "bench: out of memory (%zu bytes)\n", bytes);
    exit(1);
  }
  memset(p, 0, bytes);
  return p;
}

/* splitmix64: deterministic inputs, identical on every run. */
static uint64_t rng_next(uint64_t *s) {
  uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* Fill x[0..count) uniformly in [-amp, amp). */
static void fill_uniform(float *x, size_t count, float amp, uint64_t *s) {
  for (size_t i = 0; i < count; i++) {
    double u = (double)(rng_next(s) >> 11) * (1.0 / 9007199254740992.0);
    x[i] = (float)((2.0 * u - 1.0) * amp);
  }
}

/* Parse a base-10 long in [lo, hi]; returns 0 on success. */
static int parse_long(const char *s, long lo, long hi, long *out) {
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno || end == s || *end || v < lo || v > hi) return -1;
  *out = v;
  return 0;
}

/* Parse "a,b,c" where each item is a number or one of the words in
 * names[] (mapped to its index).  Returns 0 on success. */
static int parse_list(const char *s, long lo, long hi, const char *const *names,
                      int_list *l) {
  char buf[256];
  size_t len = strlen(s);
  if (len >= sizeof buf) return -1;
  memcpy(buf, s, len + 1);
  l->n = 0;
  char *p = buf;
  while (p) {
    char *comma = strchr(p, ',');
    if (comma) *comma = '\0';
    long v = -1;
    int matched = 0;
    for (int i = 0; names && names[i]; i++)
      if (strcmp(p, names[i]) == 0) {
        v = i % 2; /* names come in synonym pairs: even = 0, odd = 1 */
        matched = 1;
        break;
      }
    if (!matched && parse_long(p, lo, hi, &v)) return -1;
    if (l->n == MAX_LIST) return -1;
    l->v[l->n++] = v;
    p = comma ? comma + 1 : NULL;
  }
  return 0;
}

static void set_list(int_list *l, int count, const long *v) {
  l->n = count;
  for (int i = 0; i < count; i++) l->v[i] = v[i];
}

/* ---- sgemm rate --------------------------------------------------------- */

/* After OpenBLAS ran with several threads its workers spin for a while
 * before sleeping; wait that out so they do not steal the next row's CPU. */
static void settle(void) {
  struct timespec ts = {0, 300 * 1000 * 1000};
  nanosleep(&ts, NULL);
}

/* GFLOP/s of C = A B for the given shape at the current OpenBLAS thread
 * count: median of enough calls to fill ~budget seconds (at least 3) after
 * one warm-up. */
static double sgemm_rate(int M, int N, int K, double budget) {
  float *a = alloc_floats((size_t)M * K), *b = alloc_floats((size_t)K * N),
        *c = alloc_floats((size_t)M * N);
  uint64_t s = 7;
  fill_uniform(a, (size_t)M * K, 1.0f, &s);
  fill_uniform(b, (size_t)K * N, 1.0f, &s);
  double t0 = now_s();
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, N, K, 1.0f, a, K, b,
              N, 0.0f, c, N);
  double warm = now_s() - t0;
  int k = warm > 0 ? (int)(budget / warm) : 25;
  if (k < 3) k = 3;
  if (k > 25) k = 25;
  double t[25];
  for (int i = 0; i < k; i++) {
    t0 = now_s();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, N, K, 1.0f, a, K,
                b, N, 0.0f, c, N);
    t[i] = now_s() - t0;
  }
  free(a);
  free(b);
  free(c);
  return 2.0 * M * N * K / median(t, k) * 1e-9;
}

/* The best sgemm rate seen so far per OpenBLAS thread count: the bound. */
#define MAX_THREADS 64
typedef struct rate_book {
  double best[MAX_THREADS + 1];
} rate_book;

static void book_note(rate_book *b, int threads, double gflops) {
  if (gflops > b->best[threads]) b->best[threads] = gflops;
}

/* Measure every shape at 1 and 2 OpenBLAS threads into r (and the book);
 * OpenBLAS is left at 1 thread. */
static void sgemm_rates(double r[N_SHAPES][2], rate_book *b) {
  for (int t = 1; t <= 2; t++) {
    attn_engine_set_blas_threads(t);
    for (int i = 0; i < N_SHAPES; i++) {
      r[i][t - 1] = sgemm_rate(sgemm_shape[i][0], sgemm_shape[i][1],
                               sgemm_shape[i][2], 0.6);
      book_note(b, t, r[i][t - 1]);
    }
  }
  attn_engine_set_blas_threads(1);
  settle();
}

/* The first shape at `threads` OpenBLAS threads, briefly, just before a row
 * runs: the rate under the same machine load as the row.  OpenBLAS is left
 * at 1 thread. */
static double sgemm_rate_now(int threads, rate_book *b) {
  attn_engine_set_blas_threads(threads);
  double r =
      sgemm_rate(sgemm_shape[0][0], sgemm_shape[0][1], sgemm_shape[0][2], 0.3);
  attn_engine_set_blas_threads(1);
  if (threads > 1) settle();
  book_note(b, threads, r);
  return r;
}

/* ---- one attention problem ---------------------------------------------- */

/* Inputs of a self-attention MHA problem; owns every buffer. */
typedef struct mha_inputs {
  long n, d, h;
  float *x, *w[4], *b[4];
} mha_inputs;

static void inputs_alloc(mha_inputs *in, long n, long d, long h) {
  in->n = n;
  in->d = d;
  in->h = h;
  in->x = alloc_floats((size_t)n * d);
  for (int i = 0; i < 4; i++) {
    in->w[i] = alloc_floats((size_t)d * d);
    in->b[i] = alloc_floats((size_t)d);
  }
}

/* Random inputs: X in [-1,1), weights in [-1,1)/sqrt(d), biases in
 * [-0.1,0.1), so scores stay O(1) like a trained layer's. */
static void inputs_random(mha_inputs *in) {
  uint64_t s = 42;
  long n = in->n, d = in->d;
  fill_uniform(in->x, (size_t)n * d, 1.0f, &s);
  for (int i = 0; i < 4; i++) {
    fill_uniform(in->w[i], (size_t)d * d, 1.0f / sqrtf((float)d), &s);
    fill_uniform(in->b[i], (size_t)d, 0.1f, &s);
  }
}

static void inputs_free(mha_inputs *in) {
  free(in->x);
  for (int i = 0; i < 4; i++) {
    free(in->w[i]);
    free(in->b[i]);
  }
  memset(in, 0, sizeof *in);
}

/* The attn_mha problem for in, borrowing its buffers. */
static attn_mha_problem make_problem(const mha_inputs *in, int causal,
                                     int weights) {
  attn_mha_problem p;
  memset(&p, 0, sizeof p);
  p.B = 1;
  p.Lq = p.Lk = in->n;
  p.E = p.kdim = p.vdim = in->d;
  p.H = p.Hkv = in->h;
  p.xq = in->x; /* xk = xv = NULL: self-attention */
  attn_weight *w[4] = {&p.wq, &p.wk, &p.wv, &p.wo};
  for (int i = 0; i < 4; i++) {
    w[i]->data = in->w[i];
    w[i]->layout = ATTN_W_IN_OUT;
    w[i]->ld = 0;
  }
  p.bq = in->b[0];
  p.bk = in->b[1];
  p.bv = in->b[2];
  p.bo = in->b[3];
  p.o.causal = causal;
  p.o.weights = weights ? ATTN_WEIGHTS_PER_HEAD : ATTN_WEIGHTS_NONE;
  return p;
}

/* Run attn_mha; on failure print the status and diagnostic and exit 1. */
static void run_mha(const attn_mha_problem *p, const attn_exec *x, float *out,
                    float *w) {
  attn_diag diag;
  diag.msg[0] = '\0';
  attn_status st = attn_mha(p, x, out, w, &diag);
  if (st != ATTN_OK) {
    fprintf(stderr, "bench: attn_mha failed: %s (%s): %s\n",
            attn_status_name(st), attn_strerror(st), diag.msg);
    exit(1);
  }
}

/* Time one row of the grid into r. */
static void bench_row(long n, long d, long h, int threads, int causal,
                      int weights, int reps, row *r) {
  mha_inputs in;
  inputs_alloc(&in, n, d, h);
  inputs_random(&in);
  attn_mha_problem p = make_problem(&in, causal, weights);
  attn_exec x;
  memset(&x, 0, sizeof x);
  x.threads = threads;
  float *out = alloc_floats((size_t)n * d);
  float *w = weights ? alloc_floats((size_t)h * n * n) : NULL;

  double t0 = now_s();
  run_mha(&p, &x, out, w);
  double warm = now_s() - t0;
  int k = reps;
  if (k <= 0) {
    k = warm > 0 ? (int)(1.5 / warm) : 25;
    if (k < 3) k = 3;
    if (k > 25) k = 25;
  }
  double *t = malloc((size_t)k * sizeof *t);
  if (!t) {
    fprintf(stderr, "bench: out of memory\n");
    exit(1);
  }
  for (int i = 0; i < k; i++) {
    t0 = now_s();
    run_mha(&p, &x, out, w);
    t[i] = now_s() - t0;
  }
  r->n = n;
  r->d = d;
  r->h = h;
  r->threads = threads;
  r->causal = causal;
  r->weights = weights;
  r->k = k;
  r->ms_median = 1e3 * median(t, k);
  r->ms_min = 1e3 * t[0];
  r->flops = attn_mha_flops(&p);
  /* Self-attention: projections are 4 n d^2 multiply-adds; the rest is
   * attention, of which causal attends n(n+1)/2 of the n^2 pairs. */
  double proj = 8.0 * (double)n * (double)d * (double)d;
  r->flops_eff =
      causal ? proj + (r->flops - proj) * (double)(n + 1) / (2.0 * (double)n)
             : r->flops;
  free(t);
  free(out);
  free(w);
  inputs_free(&in);
}

/* ---- modes -------------------------------------------------------------- */

/* "AMD EPYC" etc. from /proc/cpuinfo into buf; "unknown" if absent. */
static void cpu_model(char *buf, size_t size) {
  snprintf(buf, size, "unknown");
  FILE *f = fopen("/proc/cpuinfo", "r");
  if (!f) return;
  char line[512];
  while (fgets(line, sizeof line, f)) {
    if (strncmp(line, "model name", 10) == 0) {
      char *c = strchr(line, ':');
      if (c) {
        c++;
        while (*c == ' ' || *c == '\t') c++;
        c[strcspn(c, "\n")] = '\0';
        snprintf(buf, size, "%s", c);
      }
      break;
    }
  }
  fclose(f);
}

static void date_utc(char *buf, size_t size) {
  time_t t = time(NULL);
  struct tm tm;
  gmtime_r(&t, &tm);
  strftime(buf, size, "%Y-%m-%d %H:%M UTC", &tm);
}

static const char *env_or(const char *name, const char *dflt) {
  const char *v = getenv(name);
  return v ? v : dflt;
}

static long online_cpus(void) {
  return sysconf(_SC_NPROCESSORS_ONLN);
}

static double peak_rss_mb(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return (double)ru.ru_maxrss / 1024.0; /* Linux: kilobytes */
}

/* --rss N: one 1-thread call, no weights; prints the peak RSS. */
static int mode_rss(long n) {
  const long d = 512, h = 8;
  double before_alloc = peak_rss_mb();
  mha_inputs in;
  inputs_alloc(&in, n, d, h);
  inputs_random(&in);
  float *out = alloc_floats((size_t)n * d);
  attn_mha_problem p = make_problem(&in, 0, 0);
  attn_exec x;
  memset(&x, 0, sizeof x);
  x.threads = 1;
  attn_bytes b;
  attn_diag diag;
  diag.msg[0] = '\0';
  attn_status st = attn_mha_bytes(&p, &x, &b, &diag);
  double before_call = peak_rss_mb();
  double t0 = now_s();
  run_mha(&p, &x, out, NULL);
  double ms = 1e3 * (now_s() - t0);
  double after = peak_rss_mb();
  printf("rss: n=%ld d_model=%ld h=%ld threads=1 weights=none\n", n, d, h);
  if (st == ATTN_OK)
    printf("rss: attn_mha_bytes workspace %.1f MB, out %.1f MB\n",
           b.workspace / 1048576.0, b.out / 1048576.0);
  else
    printf("rss: attn_mha_bytes failed: %s: %s\n", attn_status_name(st),
           diag.msg);
  printf("rss: inputs+output %.1f MB (X, 4 weights, 4 biases, out)\n",
         ((double)n * d * 2 + 4.0 * d * d + 4.0 * d) * 4 / 1048576.0);
  printf(
      "rss: peak RSS at start %.1f MB, before the call %.1f MB, "
      "after the call %.1f MB\n",
      before_alloc, before_call, after);
  printf("rss: call took %.1f ms\n", ms);
  printf("peak_rss_mb %.1f\n", after);
  free(out);
  inputs_free(&in);
  return 0;
}

static int read_all(FILE *f, void *p, size_t bytes) {
  return fread(p, 1, bytes, f) == bytes ? 0 : -1;
}

/* --load F --save G: see the file formats in the design comment. */
static int mode_load(const char *inpath, const char *outpath) {
  FILE *f = fopen(inpath, "rb");
  if (!f) {
    fprintf(stderr, "bench: cannot open %s: %s\n", inpath, strerror(errno));
    return 1;
  }
  char magic[8];
  int64_t hdr[6];
  if (read_all(f, magic, 8) || memcmp(magic, "ATTNIN01", 8) ||
      read_all(f, hdr, sizeof hdr)) {
    fprintf(stderr, "bench: %s: bad header\n", inpath);
    fclose(f);
    return 1;
  }
  long n = (long)hdr[0], d = (long)hdr[1], h = (long)hdr[2];
  int causal = (int)hdr[3], weights = (int)hdr[4], threads = (int)hdr[5];
  if (n < 1 || d < 1 || h < 1 || n > 65536 || d > 16384 || h > d) {
    fprintf(stderr, "bench: %s: bad sizes\n", inpath);
    fclose(f);
    return 1;
  }
  mha_inputs in;
  inputs_alloc(&in, n, d, h);
  int bad = read_all(f, in.x, (size_t)n * d * 4);
  for (int i = 0; i < 4; i++) bad |= read_all(f, in.w[i], (size_t)d * d * 4);
  for (int i = 0; i < 4; i++) bad |= read_all(f, in.b[i], (size_t)d * 4);
  fclose(f);
  if (bad) {
    fprintf(stderr, "bench: %s: short file\n", inpath);
    inputs_free(&in);
    return 1;
  }
  attn_mha_problem p = make_problem(&in, causal, weights);
  attn_exec x;
  memset(&x, 0, sizeof x);
  x.threads = threads;
  size_t nw = weights ? (size_t)h * n * n : 0;
  float *out = alloc_floats((size_t)n * d);
  float *w = weights ? alloc_floats(nw) : NULL;
  attn_diag diag;
  diag.msg[0] = '\0';
  attn_status st = attn_mha(&p, &x, out, w, &diag);
  if (st != ATTN_OK)
    fprintf(stderr, "bench: attn_mha failed: %s: %s\n", attn_status_name(st),
            diag.msg);
  FILE *g = fopen(outpath, "wb");
  int rc = 0;
  if (!g) {
    fprintf(stderr, "bench: cannot create %s: %s\n", outpath, strerror(errno));
    rc = 1;
  } else {
    int64_t s64 = st;
    int wbad = fwrite("ATTNOUT1", 1, 8, g) != 8 ||
               fwrite(&s64, sizeof s64, 1, g) != 1 ||
               fwrite(out, 4, (size_t)n * d, g) != (size_t)n * d ||
               (nw && fwrite(w, 4, nw, g) != nw);
    if (fclose(g) || wbad) {
      fprintf(stderr, "bench: write %s failed\n", outpath);
      rc = 1;
    }
  }
  free(out);
  free(w);
  inputs_free(&in);
  return rc || st != ATTN_OK;
}

/* One line of /proc/loadavg into buf ("?" if unreadable). */
static void load_avg(char *buf, size_t size) {
  snprintf(buf, size, "?");
  FILE *f = fopen("/proc/loadavg", "r");
  if (!f) return;
  if (fgets(buf, (int)size, f)) buf[strcspn(buf, "\n")] = '\0';
  fclose(f);
}

static void print_rates(const char *when, double r[N_SHAPES][2], int json) {
  for (int i = 0; i < N_SHAPES; i++) {
    const int *s = sgemm_shape[i];
    if (json)
      printf(
          "{\"sgemm\":\"%dx%dx%d\",\"when\":\"%s\",\"gflops_1t\":%.2f,"
          "\"gflops_2t\":%.2f}\n",
          s[0], s[1], s[2], when, r[i][0], r[i][1]);
    else
      printf(
          "sgemm %s, M x N x K = %dx%dx%d: %.1f GFLOP/s at 1 thread, "
          "%.1f at 2 threads\n",
          when, s[0], s[1], s[2], r[i][0], r[i][1]);
  }
}

/* One row of the grid: what to run. */
typedef struct grid_cfg {
  long n, d, h;
  int threads, causal, weights;
} grid_cfg;

/* The rows selected by o (and --quick) into *out (malloc'd, caller frees);
 * returns the count, or -1 when out of memory. */
static long grid_configs(const bench_opts *o, int quick, grid_cfg **out) {
  static const long q_n[] = {2048, 4096}, q_d[] = {512, 1024}, q_h[] = {8, 16};
  size_t cap = (size_t)o->ns.n * o->ds.n * o->hs.n * o->threads.n *
               o->causal.n * o->weights.n;
  grid_cfg *c = malloc((cap ? cap : 1) * sizeof *c);
  if (!c) return -1;
  long k = 0;
  for (int a = 0; a < o->ns.n; a++)
    for (int b = 0; b < o->ds.n; b++)
      for (int e = 0; e < o->hs.n; e++) {
        long n = o->ns.v[a], d = o->ds.v[b], h = o->hs.v[e];
        if (quick) { /* only the two listed (n, d, h) triples */
          int keep = 0;
          for (int i = 0; i < 2; i++)
            keep |= n == q_n[i] && d == q_d[i] && h == q_h[i];
          if (!keep) continue;
        }
        if (d % h) {
          fprintf(stderr, "bench: skipping d_model=%ld h=%ld (not divisible)\n",
                  d, h);
          continue;
        }
        for (int t = 0; t < o->threads.n; t++)
          for (int cz = 0; cz < o->causal.n; cz++)
            for (int w = 0; w < o->weights.n; w++) {
              grid_cfg g = {n,
                            d,
                            h,
                            (int)o->threads.v[t],
                            (int)o->causal.v[cz],
                            (int)o->weights.v[w]};
              c[k++] = g;
            }
      }
  *out = c;
  return k;
}

static double row_gflops(const row *r) {
  return r->flops / (r->ms_median * 1e-3) * 1e-9;
}

/* The grid (or its --quick subset), --runs times over, with the tables. */
static int mode_grid(const bench_opts *o, int quick) {
  char cpu[256], date[64], load[128];
  cpu_model(cpu, sizeof cpu);
  date_utc(date, sizeof date);
  load_avg(load, sizeof load);
  attn_engine_set_blas_threads(1);
  double r0[N_SHAPES][2], r1[N_SHAPES][2];
  rate_book book;
  memset(&book, 0, sizeof book);
  int runs = o->runs > 0 ? o->runs : 1;
  if (o->json) {
    printf(
        "{\"cpu\":\"%s\",\"kernel\":\"%s\",\"date\":\"%s\","
        "\"openblas_core\":\"%s\",\"OPENBLAS_CORETYPE\":\"%s\","
        "\"OPENBLAS_L2_SIZE\":\"%s\",\"loadavg\":\"%s\"}\n",
        cpu, attn_engine_kernel_name(), date, openblas_get_corename(),
        env_or("OPENBLAS_CORETYPE", ""), env_or("OPENBLAS_L2_SIZE", ""), load);
  } else {
    printf("# bench_attention\n\n");
    printf("- date: %s\n", date);
    printf("- cpu: %s (%ld online)\n", cpu, online_cpus());
    printf("- engine kernel: %s\n", attn_engine_kernel_name());
    printf(
        "- OpenBLAS: %s; core %s; OPENBLAS_CORETYPE=%s "
        "OPENBLAS_L2_SIZE=%s\n",
        openblas_get_config(), openblas_get_corename(),
        env_or("OPENBLAS_CORETYPE", "(unset)"),
        env_or("OPENBLAS_L2_SIZE", "(unset)"));
    printf("- /proc/loadavg at start: %s\n", load);
    printf(
        "- self-attention, B=1, weights [in,out] with biases; "
        "FLOPs from attn_mha_flops (causal not discounted); "
        "%d run(s) of the grid\n\n",
        runs);
  }
  fflush(stdout);
  sgemm_rates(r0, &book);
  print_rates(o->json ? "start" : "at start", r0, o->json);
  fflush(stdout);

  grid_cfg *cfg;
  long ncfg = grid_configs(o, quick, &cfg);
  if (ncfg < 0) {
    fprintf(stderr, "bench: out of memory\n");
    return 1;
  }
  row *rows = calloc((size_t)(ncfg ? ncfg : 1) * (size_t)runs, sizeof *rows);
  if (!rows) {
    fprintf(stderr, "bench: out of memory\n");
    free(cfg);
    return 1;
  }
  if (!o->json) {
    printf(
        "\n| run | n | d_model | h | threads | causal | weights | k | "
        "ms (median) | ms (min) | GFLOP/s | sgemm GFLOP/s just before | "
        "%% of bound so far |\n");
    printf(
        "|---:|---:|---:|---:|---:|---|---|---:|---:|---:|---:|---:|---:|"
        "\n");
    fflush(stdout);
  }
  for (int run = 0; run < runs; run++)
    for (long i = 0; i < ncfg; i++) {
      const grid_cfg *g = &cfg[i];
      row *r = &rows[(size_t)run * (size_t)ncfg + (size_t)i];
      double now = sgemm_rate_now(g->threads, &book);
      bench_row(g->n, g->d, g->h, g->threads, g->causal, g->weights, o->reps,
                r);
      r->sgemm_now = now;
      double gf = row_gflops(r);
      if (o->json)
        printf(
            "{\"run\":%d,\"n\":%ld,\"d\":%ld,\"h\":%ld,\"threads\":%d,"
            "\"causal\":%d,\"weights\":\"%s\",\"k\":%d,"
            "\"ms\":%.4f,\"ms_min\":%.4f,\"gflop\":%.4f,"
            "\"gflop_causal\":%.4f,\"gflops\":%.2f,"
            "\"sgemm_gflops_before\":%.2f}\n",
            run + 1, g->n, g->d, g->h, g->threads, g->causal,
            g->weights ? "per-head" : "none", r->k, r->ms_median, r->ms_min,
            r->flops * 1e-9, r->flops_eff * 1e-9, gf, now);
      else
        printf(
            "| %d | %ld | %ld | %ld | %d | %s | %s | %d | %.2f | %.2f "
            "| %.1f | %.1f | %.0f%% |\n",
            run + 1, g->n, g->d, g->h, g->threads, g->causal ? "yes" : "no",
            g->weights ? "per-head" : "none", r->k, r->ms_median, r->ms_min, gf,
            now, 100.0 * gf / book.best[g->threads]);
      fflush(stdout);
    }
  sgemm_rates(r1, &book);
  load_avg(load, sizeof load);
  if (o->json) {
    print_rates("end", r1, 1);
    printf(
        "{\"bound_gflops_1t\":%.2f,\"bound_gflops_2t\":%.2f,"
        "\"loadavg_end\":\"%s\"}\n",
        book.best[1], book.best[2], load);
  } else {
    printf("\n");
    print_rates("at end", r1, 0);
    printf("- /proc/loadavg at end: %s\n", load);
    printf("\n## Summary\n\n");
    printf(
        "sgemm bound = the best cblas_sgemm rate measured in this run at "
        "the row's OpenBLAS thread count (shapes M x N x K = 2048x2048x512 "
        "and 4096x512x512 at start and end, 2048x2048x512 before every "
        "row): 1 thread %.1f GFLOP/s, 2 threads %.1f GFLOP/s.  %% of "
        "bound = GFLOP/s / that rate.  Below: each row's best median over "
        "%d run(s) and the range of its medians.\n\n",
        book.best[1], book.best[2], runs);
    printf(
        "| n | d_model | h | threads | causal | weights | ms (best "
        "median) | range over runs | GFLOP/s | %% of sgemm bound | "
        "%% of bound, causal FLOPs | %% of sgemm just before |\n"
        "|---:|---:|---:|---:|---|---|---:|---:|---:|---:|---:|---:|\n");
    for (long i = 0; i < ncfg; i++) {
      const row *best = &rows[i];
      double lo = best->ms_median, hi = best->ms_median;
      for (int run = 1; run < runs; run++) {
        const row *r = &rows[(size_t)run * (size_t)ncfg + (size_t)i];
        if (r->ms_median < best->ms_median) best = r;
        if (r->ms_median < lo) lo = r->ms_median;
        if (r->ms_median > hi) hi = r->ms_median;
      }
      double gf = row_gflops(best);
      double pct = 100.0 * gf / book.best[best->threads];
      printf(
          "| %ld | %ld | %ld | %d | %s | %s | %.2f | %.2f-%.2f | %.1f | "
          "%.0f%% | %.0f%% | %.0f%% |\n",
          best->n, best->d, best->h, best->threads, best->causal ? "yes" : "no",
          best->weights ? "per-head" : "none", best->ms_median, lo, hi, gf, pct,
          pct * best->flops_eff / best->flops, 100.0 * gf / best->sgemm_now);
    }
    printf(
        "\nGFLOP/s and %% of bound count causal rows at full n^2 "
        "attention FLOPs (attn_mha_flops); '%% of bound, causal FLOPs' "
        "counts only the n(n+1)/2 attended pairs, so it is the "
        "comparable efficiency.  '%% of sgemm just before' divides by the "
        "sgemm rate measured seconds before that row under the same "
        "machine load (not causal-discounted); on a busy machine it is "
        "the steadier figure, but it can exceed 100%% when the load "
        "eased during the row.\n");
  }
  free(rows);
  free(cfg);
  return 0;
}

static void usage(FILE *f) {
  fprintf(f,
          "usage: bench_attention [--quick] [--n LIST] [--d LIST] [--h LIST]\n"
          "         [--threads LIST] [--causal no,yes] [--weights "
          "none,per-head]\n"
          "         [--reps K] [--runs R] [--emit-json]\n"
          "       bench_attention --rss N\n"
          "       bench_attention --load IN --save OUT\n"
          "LIST is comma-separated, e.g. --n 512,2048.  Defaults: n "
          "512,2048,4096;\n"
          "d 512,1024; h 8,16; threads 1,2; causal no,yes; weights "
          "none,per-head.\n"
          "--reps K: timed calls per row (default: adapted, 3..25).\n"
          "--runs R: run the whole grid R times; the summary keeps the best "
          "median\n"
          "and the range (2-thread numbers fluctuate on a shared machine).\n"
          "--quick: only n=2048,d=512,h=8 and n=4096,d=1024,h=16.\n");
}

int main(int argc, char **argv) {
  static const char *const yesno[] = {"no",  "yes", "false", "true",
                                      "off", "on",  NULL};
  static const char *const wnames[] = {"none", "per-head", "no", "yes", NULL};
  static const long def_n[] = {512, 2048, 4096}, def_d[] = {512, 1024},
                    def_h[] = {8, 16}, def_t[] = {1, 2}, def_b[] = {0, 1};
  bench_opts o;
  memset(&o, 0, sizeof o);
  set_list(&o.ns, 3, def_n);
  set_list(&o.ds, 2, def_d);
  set_list(&o.hs, 2, def_h);
  set_list(&o.threads, 2, def_t);
  set_list(&o.causal, 2, def_b);
  set_list(&o.weights, 2, def_b);
  int quick = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    int bad = 0;
    if (strcmp(a, "--quick") == 0) {
      quick = 1;
      continue;
    } else if (strcmp(a, "--emit-json") == 0) {
      o.json = 1;
      continue;
    } else if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
      usage(stdout);
      return 0;
    } else if (!v) {
      bad = 1;
    } else if (strcmp(a, "--n") == 0) {
      bad = parse_list(v, 1, 1L << 20, NULL, &o.ns);
    } else if (strcmp(a, "--d") == 0) {
      bad = parse_list(v, 1, 1L << 16, NULL, &o.ds);
    } else if (strcmp(a, "--h") == 0) {
      bad = parse_list(v, 1, 1L << 12, NULL, &o.hs);
    } else if (strcmp(a, "--threads") == 0) {
      bad = parse_list(v, 1, MAX_THREADS, NULL, &o.threads);
    } else if (strcmp(a, "--causal") == 0) {
      bad = parse_list(v, 0, 1, yesno, &o.causal);
    } else if (strcmp(a, "--weights") == 0) {
      bad = parse_list(v, 0, 1, wnames, &o.weights);
    } else if (strcmp(a, "--reps") == 0) {
      long k;
      bad = parse_long(v, 1, 1000, &k);
      o.reps = (int)k;
    } else if (strcmp(a, "--runs") == 0) {
      long k;
      bad = parse_long(v, 1, 100, &k);
      o.runs = (int)k;
    } else if (strcmp(a, "--rss") == 0) {
      bad = parse_long(v, 1, 1L << 20, &o.rss_n);
    } else if (strcmp(a, "--load") == 0) {
      o.load = v;
    } else if (strcmp(a, "--save") == 0) {
      o.save = v;
    } else {
      bad = 1;
    }
    if (bad) {
      fprintf(stderr, "bench_attention: bad argument %s%s%s\n", a, v ? " " : "",
              v ? v : "");
      usage(stderr);
      return 2;
    }
    i++; /* consumed the value */
  }
  if (o.load || o.save) {
    if (!o.load || !o.save) {
      fprintf(stderr, "bench_attention: --load and --save go together\n");
      return 2;
    }
    attn_engine_set_blas_threads(1);
    return mode_load(o.load, o.save);
  }
  if (o.rss_n) {
    attn_engine_set_blas_threads(1);
    return mode_rss(o.rss_n);
  }
  return mode_grid(&o, quick);
}
