/* bench_f32fmt.c - speed of attn_f32_shortest and attn_f32_shortest_list,
 * and exhaustive checks of both.
 *
 * DESIGN
 *  Purpose.  Default mode: report millions of floats per second for three
 *  float -> text methods, all measured in this run on the same inputs:
 *    shortest   attn_f32_shortest (src/fmt/f32fmt.c);
 *    %.9g       snprintf("%.9g"): always round-trips, often not shortest;
 *    search     snprintf("%.6g".."%.9g") until strtof gives the float back.
 *  Then attn_f32_shortest_list (include/attn/f32fmt.h) with each
 *  implementation this CPU has ("portable": the per-element loop;
 *  "avx512": src/fmt/f32fmt_avx512.c; "avx2": src/fmt/f32fmt_avx2.c),
 *  called on lists of 1280 floats as the server prints a response row;
 *  its "x" columns are its cpu rates over attn_f32_shortest's.
 *  Two input sets of 2^20 floats from a fixed-seed xorshift: random bit
 *  patterns (finite only, so mostly huge or tiny magnitudes) and uniform
 *  values in [-1, 1] (what attention outputs look like).  Each method runs
 *  over a set repeatedly for at least --secs seconds (default 0.5) of
 *  thread CPU time; the best of three such runs is printed, both per
 *  second of thread CPU time (CLOCK_THREAD_CPUTIME_ID: not skewed by other
 *  processes sharing the cores) and per second of wall time.  The call
 *  goes through a function pointer, as a caller in another translation
 *  unit would make it.  Nothing is asserted.
 *
 *  --exhaustive [threads] [every]
 *    Checks all 2^32 bit patterns (with every = E > 1, only the chunks
 *    0, E, 2E, ... of 2^24 patterns each: a 1/E slice).  NaN and Inf must
 *    give "null" and +-0 must give "0"/"-0".  Every other float v must
 *    produce text T that
 *      (a) is a JSON number in the documented format (plain for decimal
 *          exponents -5..8, else d[.ddd]e[+-]XX), at most 16 bytes, with
 *          nothing stored past ATTN_F32_MAX_CHARS;
 *      (b) reads back with strtof to the same bits (libc as the oracle);
 *      (c) is shortest.  Write T = d * 10^e, d with n digits and no
 *          trailing zero.  A decimal x in v's rounding interval R_v with
 *          fewer digits is a multiple of 10^(e+1) if x >= 10^(e+n-1);
 *          otherwise 10^(e+n-1), such a multiple, lies between x and T,
 *          so in R_v (an interval).  So a shorter decimal exists iff a
 *          multiple of 10^(e+1) lies in R_v, iff (convexity again) one of
 *          the two around T does: lo = floor(d/10) * 10^(e+1) or
 *          lo + 10^(e+1).  Both must be outside R_v;
 *      (d) is nearest among n-digit candidates: if (d-1)*10^e or
 *          (d+1)*10^e lies in R_v it must not be strictly closer to v than
 *          T, and on an exact tie d must be even.  (Given (c), every
 *          n-digit candidate is a multiple of 10^e, and one closer than T
 *          would make the neighbour of T on its side in R_v and closer.)
 *    (c) and (d) use exact comparisons of decimals with binary fractions
 *    in 256-bit integers (below), not strtof; and the exact test "T in R_v"
 *    must agree with (b), which cross-checks that arithmetic against libc
 *    on every input.  This replaces the brute force "%.{1..9}e until it
 *    round-trips" (up to nine snprintf + strtof per input) with a proof of
 *    the same property.
 *    Prints progress about every 10 s, the first 20 failures, and finally
 *    "exhaustive: N checked, M failures"; exit status 1 on any failure.
 *
 *  --exhaustive-batch [threads] [every] [impl]
 *    Compares attn_f32_shortest_list (the default implementation, or impl:
 *    "avx512", "avx2" or "portable")
 *    with attn_f32_shortest per element joined by ',' on all 2^32 bit
 *    patterns (or the same 1/every slice), in lists of 4000..4095 floats,
 *    and checks that nothing is stored past ATTN_F32_LIST_MAX_CHARS(n).
 *    With --exhaustive (the scalar function is right) this shows that the
 *    implementation tested is right on every input.  Prints the first 20
 *    differing lists and "exhaustive-batch: N checked, M failing lists";
 *    exit status 1 on any failure.
 *
 *  Threads.  Default mode: single thread.  Both exhaustive modes: `threads`
 *  pthreads take 2^24-pattern chunks from an atomic counter; failures are
 *  counted atomically and printed under a mutex; the main thread only
 *  reports progress and joins.
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "attn/f32fmt.h"
#include "../src/fmt/internal.h"

__extension__ typedef unsigned __int128 u128;

/* ---- timing ------------------------------------------------------------ */

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* CPU time of the calling thread: rates stay meaningful when other
 * processes share the cores (wall time would charge us their slices). */
static double cpu_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint64_t rng_state = 0x9e3779b97f4a7c15u;

/* xorshift64*: fixed sequence, good enough for test inputs. */
static uint64_t rng_next(void) {
  uint64_t x = rng_state;
  x ^= x >> 12;
  x ^= x << 25;
  x ^= x >> 27;
  rng_state = x;
  return x * 0x2545f4914f6cdd1du;
}

static float bits_to_f(uint32_t b) {
  float f;
  memcpy(&f, &b, sizeof f);
  return f;
}

static uint32_t f_to_bits(float f) {
  uint32_t b;
  memcpy(&b, &f, sizeof b);
  return b;
}

#define NSET (1u << 20)

typedef size_t (*fmt_fn)(float v, char *out);

static size_t m_shortest(float v, char *out) {
  return attn_f32_shortest(v, out);
}

static size_t m_g9(float v, char *out) {
  return (size_t)snprintf(out, 32, "%.9g", (double)v);
}

static size_t m_search(float v, char *out) {
  int len = 0;
  for (int p = 6; p <= 9; p++) {
    len = snprintf(out, 32, "%.*g", p, (double)v);
    if (p == 9 || strtof(out, NULL) == v) break;
  }
  return (size_t)len;
}

/* Best-of-3 rates in M floats/s of fn over set[0..NSET), by thread CPU
 * time (*cpu) and by wall time (*wall), each run lasting at least secs of
 * CPU time.  Text goes to a scratch ring; the length sum defeats DCE. */
static void rate(fmt_fn fn, const float *set, double secs, size_t *sink,
                 double *cpu, double *wall) {
  static char buf[4096 * 32];
  *cpu = *wall = 0;
  for (int run = 0; run < 3; run++) {
    size_t done = 0, sum = 0;
    double w0 = now_s(), t0 = cpu_s(), t;
    do {
      for (size_t i = 0; i < NSET; i++)
        sum += fn(set[i], buf + (i & 4095) * 32);
      done += NSET;
      t = cpu_s() - t0;
    } while (t < secs);
    double w = now_s() - w0;
    *sink += sum;
    if ((double)done / t / 1e6 > *cpu) *cpu = (double)done / t / 1e6;
    if ((double)done / w / 1e6 > *wall) *wall = (double)done / w / 1e6;
  }
}

/* The same, for a list function: calls of LIST_N floats (one response
 * row of 1280, as attn_f32_append_list prints them) into one buffer.  With
 * rows, each 1280 are the two matrices of a small /v1 answer, [16, 64]
 * output and [16, 16] weights, printed as nested rows: rows == 1 by one
 * attn_f32_shortest_list call per row (32 calls), rows == 2 by one
 * attn_f32_shortest_rows call per matrix. */
#define LIST_N 1280

/* The /v1 answer's rows from set[0, LIST_N) into buf; returns the length. */
static size_t v1_rows(const float *set, int how, char *buf) {
  static const size_t mats[2][2] = {{16, 64}, {16, 16}};
  char *p = buf;
  for (int k = 0; k < 2; k++) {
    size_t rows = mats[k][0], cols = mats[k][1];
    if (how == 2) {
      p += attn_f32_shortest_rows(set, rows, cols, cols, p);
    } else {
      for (size_t r = 0; r < rows; r++) {
        if (r) *p++ = ',';
        *p++ = '[';
        p += attn_f32_shortest_list(set + r * cols, cols, p);
        *p++ = ']';
      }
    }
    set += rows * cols;
    *p++ = ',';
  }
  return (size_t)(p - buf);
}

static void rate_list(const char *impl, const float *set, double secs, int rows,
                      size_t *sink, double *cpu, double *wall) {
  static char buf[ATTN_F32_ROWS_MAX_CHARS(32, 64) + 2];
  if (!attn__f32fmt_set_impl(impl)) {
    *cpu = *wall = 0;
    return;
  }
  *cpu = *wall = 0;
  for (int run = 0; run < 3; run++) {
    size_t done = 0, sum = 0;
    double w0 = now_s(), t0 = cpu_s(), t;
    do {
      for (size_t i = 0; i < NSET; i += LIST_N) {
        size_t m = NSET - i < LIST_N ? NSET - i : LIST_N;
        if (rows && m == LIST_N)
          sum += v1_rows(set + i, rows, buf) + (uint8_t)buf[7];
        else
          sum += attn_f32_shortest_list(set + i, m, buf) + (uint8_t)buf[7];
      }
      done += NSET;
      t = cpu_s() - t0;
    } while (t < secs);
    double w = now_s() - w0;
    *sink += sum;
    if ((double)done / t / 1e6 > *cpu) *cpu = (double)done / t / 1e6;
    if ((double)done / w / 1e6 > *wall) *wall = (double)done / w / 1e6;
  }
}

static int run_bench(double secs) {
  float *rnd = malloc(NSET * sizeof *rnd), *unit = malloc(NSET * sizeof *unit);
  if (!rnd || !unit) {
    fprintf(stderr, "out of memory\n");
    return 1;
  }
  for (size_t i = 0; i < NSET; i++) {
    uint32_t b;
    do b = (uint32_t)(rng_next() >> 32);
    while (((b >> 23) & 0xff) == 0xff);
    rnd[i] = bits_to_f(b);
    unit[i] = (float)((double)(int32_t)(rng_next() >> 32) / 2147483648.0);
  }
  struct {
    const char *name;
    fmt_fn fn;
  } m[] = {{"attn_f32_shortest", m_shortest},
           {"snprintf %.9g", m_g9},
           {"search %.6g..%.9g", m_search}};
  size_t sink = 0;
  printf(
      "M floats/s, 1 thread, best of 3; cpu = per second of thread CPU "
      "time, wall = per second of wall time\n");
  printf("%-20s %14s %14s   %14s %14s\n", "method", "random (cpu)",
         "random (wall)", "[-1,1] (cpu)", "[-1,1] (wall)");
  double base_r = 0, base_u = 0;
  for (size_t j = 0; j < sizeof m / sizeof m[0]; j++) {
    double ac, aw, bc, bw;
    rate(m[j].fn, rnd, secs, &sink, &ac, &aw);
    rate(m[j].fn, unit, secs, &sink, &bc, &bw);
    printf("%-20s %14.1f %14.1f   %14.1f %14.1f\n", m[j].name, ac, aw, bc, bw);
    fflush(stdout);
    if (j == 0) base_r = ac, base_u = bc;
  }
  /* attn_f32_shortest_list, each implementation this CPU has, in calls of
   * LIST_N, then the /v1 answer's rows both ways; the "x" columns are cpu
   * rates over attn_f32_shortest's. */
  const char *was = attn__f32fmt_impl_name();
  static const char *impls[] = {"portable", "avx512", "avx2"};
  static const char *layouts[] = {"list", "v1 row lists", "v1 rows"};
  for (int rows = 0; rows < 3; rows++)
    for (size_t j = 0; j < sizeof impls / sizeof impls[0]; j++) {
      double ac, aw, bc, bw;
      char name[32];
      rate_list(impls[j], rnd, secs, rows, &sink, &ac, &aw);
      if (ac == 0) {
        printf("%s %-15s (not supported on this CPU)\n", layouts[rows],
               impls[j]);
        continue;
      }
      rate_list(impls[j], unit, secs, rows, &sink, &bc, &bw);
      snprintf(name, sizeof name, "%s %s", layouts[rows], impls[j]);
      printf("%-20s %14.1f %14.1f   %14.1f %14.1f   x%.2f x%.2f\n", name, ac,
             aw, bc, bw, ac / base_r, bc / base_u);
      fflush(stdout);
    }
  attn__f32fmt_set_impl(was);
  fprintf(stderr, "(sink %zu)\n", sink);
  free(rnd);
  free(unit);
  return 0;
}

/* ---- exact decimal vs binary comparison -------------------------------- */

/* 256-bit unsigned, little-endian 64-bit limbs.  Values here stay below
 * 2^150; an overflow would abort rather than give a wrong answer. */
typedef struct {
  uint64_t w[4];
} big;

static big POW5[64]; /* 5^i, filled by pow5_init */

static void big_mul(big *r, const big *a, uint64_t m) {
  u128 carry = 0;
  for (int i = 0; i < 4; i++) {
    carry += (u128)a->w[i] * m;
    r->w[i] = (uint64_t)carry;
    carry >>= 64;
  }
  if (carry) abort();
}

static void big_shl(big *b, int s) {
  int limbs = s / 64, bitsh = s % 64;
  for (int i = 3; i >= 0; i--) {
    uint64_t x = i - limbs >= 0 ? b->w[i - limbs] : 0;
    uint64_t y = i - limbs - 1 >= 0 ? b->w[i - limbs - 1] : 0;
    uint64_t v = bitsh ? x << bitsh | y >> (64 - bitsh) : x;
    if (i + limbs > 3 && b->w[i]) abort(); /* would shift out */
    b->w[i] = v;
  }
}

static int big_cmp(const big *a, const big *b) {
  for (int i = 3; i >= 0; i--)
    if (a->w[i] != b->w[i]) return a->w[i] < b->w[i] ? -1 : 1;
  return 0;
}

static void pow5_init(void) {
  memset(&POW5[0], 0, sizeof POW5[0]);
  POW5[0].w[0] = 1;
  for (int i = 1; i < 64; i++) big_mul(&POW5[i], &POW5[i - 1], 5);
}

/* The rounding interval of v = c * 2^q in units 2^(q-2) is [xl, xr]
 * (closed iff c even), compared against integers K * 10^f through the
 * common scale: K * sl  vs  X * sr.  Filled by rv_init. */
typedef struct {
  big sl, xl, xr, xv; /* xv: v itself */
  int closed;
} rv_ctx;

static void rv_init(rv_ctx *r, uint32_t bits, int f) {
  uint32_t be = (bits >> 23) & 0xff, t = bits & 0x7fffff;
  uint64_t c = be ? t | 0x800000u : t;
  int q2 = (be ? (int)be - 150 : -149) - 2;
  big sr;
  r->sl = POW5[f > 0 ? f : 0];
  if (f > q2) big_shl(&r->sl, f - q2);
  sr = POW5[f < 0 ? -f : 0];
  if (q2 > f) big_shl(&sr, q2 - f);
  big_mul(&r->xl, &sr, 4 * c - (t == 0 && be > 1 ? 1 : 2));
  big_mul(&r->xr, &sr, 4 * c + 2);
  big_mul(&r->xv, &sr, 4 * c);
  r->closed = (c & 1) == 0;
}

/* sign of K * 10^f - v */
static int rv_cmp_v(const rv_ctx *r, uint64_t K) {
  big x;
  big_mul(&x, &r->sl, K);
  return big_cmp(&x, &r->xv);
}

/* Is K * 10^f inside R_v, i.e. does strtof map it to v? */
static int rv_in(const rv_ctx *r, uint64_t K) {
  big x;
  big_mul(&x, &r->sl, K);
  int a = big_cmp(&x, &r->xl), b = big_cmp(&x, &r->xr);
  return r->closed ? a >= 0 && b <= 0 : a > 0 && b < 0;
}

/* ---- one float --------------------------------------------------------- */

/* JSON number grammar (RFC 8259) plus our format rules; returns 0 if ok and
 * sets *d, *e (value d * 10^e, d without trailing zeros, d > 0 unless the
 * text is 0) and *sci. */
static const char *parse(const char *s, size_t len, uint64_t *d, int *e,
                         int *sci) {
  size_t i = 0;
  uint64_t m = 0;
  int ex = 0, nd = 0;
  if (i < len && s[i] == '-') i++;
  if (i >= len || s[i] < '0' || s[i] > '9') return "no digit";
  if (s[i] == '0' && i + 1 < len && s[i + 1] >= '0' && s[i + 1] <= '9')
    return "leading zero";
  for (; i < len && s[i] >= '0' && s[i] <= '9'; i++, nd++)
    m = m * 10 + (uint64_t)(s[i] - '0');
  if (i < len && s[i] == '.') {
    i++;
    if (i >= len || s[i] < '0' || s[i] > '9') return "empty fraction";
    for (; i < len && s[i] >= '0' && s[i] <= '9'; i++, nd++, ex--)
      m = m * 10 + (uint64_t)(s[i] - '0');
  }
  *sci = 0;
  if (i < len && (s[i] == 'e' || s[i] == 'E')) {
    int sg = 1, x = 0, xd = 0;
    i++;
    *sci = 1;
    if (i < len && (s[i] == '+' || s[i] == '-')) sg = s[i++] == '-' ? -1 : 1;
    for (; i < len && s[i] >= '0' && s[i] <= '9'; i++, xd++)
      x = x * 10 + (s[i] - '0');
    if (xd == 0) return "empty exponent";
    ex += sg * x;
  }
  if (i != len) return "trailing junk";
  if (nd > 17) return "too many digits";
  while (m && m % 10 == 0) m /= 10, ex++;
  *d = m;
  *e = ex;
  return NULL;
}

static int ndig(uint64_t d) {
  int n = 1;
  while (d >= 10) d /= 10, n++;
  return n;
}

/* Checks one bit pattern; on failure returns a reason and fills txt. */
static const char *check_one(uint32_t bits, char *txt) {
  char buf[ATTN_F32_MAX_CHARS + 16];
  memset(buf, '#', sizeof buf);
  size_t len = attn_f32_shortest(bits_to_f(bits), buf);
  if (len == 0 || len > ATTN_F32_MAX_CHARS) {
    memcpy(txt, "(bad length)", 13);
    return "length";
  }
  for (size_t i = ATTN_F32_MAX_CHARS; i < sizeof buf; i++)
    if (buf[i] != '#') {
      memcpy(txt, "(overrun)", 10);
      return "wrote past ATTN_F32_MAX_CHARS";
    }
  memcpy(txt, buf, len);
  txt[len] = 0;
  uint32_t be = (bits >> 23) & 0xff;
  if (be == 0xff) return strcmp(txt, "null") ? "NaN/Inf not null" : NULL;
  if ((bits << 1) == 0) return strcmp(txt, bits ? "-0" : "0") ? "zero" : NULL;

  uint64_t d;
  int e, sci;
  const char *why = parse(txt, len, &d, &e, &sci);
  if (why) return why;
  if ((txt[0] == '-') != (bits >> 31)) return "sign";
  int n = ndig(d), e10 = e + n - 1;
  if (sci != (e10 < -5 || e10 >= 9)) return "plain/scientific choice";
  if (sci) {
    const char *x = strchr(txt, 'e');
    if (strlen(x) != 4 || (x[1] != '+' && x[1] != '-')) return "exp form";
  }
  int rt = f_to_bits(strtof(txt, NULL)) == bits;

  rv_ctx r;
  rv_init(&r, bits, e - 1); /* candidates in units of 10^(e-1) */
  int in = rv_in(&r, 10 * d);
  if (!rt) return "strtof round trip";
  if (!in) return "exact check disagrees with strtof";
  if (n >= 2) {
    uint64_t lo = d / 10 * 100;
    if (rv_in(&r, lo) || rv_in(&r, lo + 100)) return "not shortest";
  }
  if (d > 1 && rv_in(&r, 10 * d - 10)) {
    int c = rv_cmp_v(&r, 10 * d - 5); /* midpoint of d-1 and d vs v */
    if (c > 0 || (c == 0 && (d & 1))) return "d-1 is nearer";
  }
  if (rv_in(&r, 10 * d + 10)) {
    int c = rv_cmp_v(&r, 10 * d + 5);
    if (c < 0 || (c == 0 && (d & 1))) return "d+1 is nearer";
  }
  return NULL;
}

/* ---- exhaustive driver ------------------------------------------------- */

#define CHUNK_BITS 24
#define NCHUNK (1u << (32 - CHUNK_BITS))

static atomic_uint next_chunk;
static atomic_ullong checked, failures;
static unsigned every = 1;
static pthread_mutex_t print_mu = PTHREAD_MUTEX_INITIALIZER;

static void *worker(void *arg) {
  (void)arg;
  char txt[64];
  for (;;) {
    unsigned ch = atomic_fetch_add(&next_chunk, 1);
    if (ch >= NCHUNK) break;
    if (ch % every) continue;
    uint32_t base = ch << CHUNK_BITS;
    for (uint32_t i = 0; i < (1u << CHUNK_BITS); i++) {
      const char *why = check_one(base + i, txt);
      if (why && atomic_fetch_add(&failures, 1) < 20) {
        pthread_mutex_lock(&print_mu);
        printf("FAIL 0x%08" PRIx32 " (%.9g) -> \"%s\": %s\n", base + i,
               (double)bits_to_f(base + i), txt, why);
        fflush(stdout);
        pthread_mutex_unlock(&print_mu);
      }
    }
    atomic_fetch_add(&checked, 1u << CHUNK_BITS);
  }
  return NULL;
}

/* Start nthreads (clamped to 1..64) of fn over the chunks, print progress
 * every 10 s, join them.  Returns the failure count; *secs the time taken;
 * -1 when a thread cannot start. */
static long long run_workers(void *(*fn)(void *), int nthreads, uint64_t total,
                             double *secs) {
  pthread_t th[64];
  double t0 = now_s(), last = t0;
  if (nthreads < 1) nthreads = 1;
  if (nthreads > 64) nthreads = 64;
  for (int i = 0; i < nthreads; i++)
    if (pthread_create(&th[i], NULL, fn, NULL)) {
      fprintf(stderr, "pthread_create failed\n");
      return -1;
    }
  while (atomic_load(&checked) < total) {
    usleep(200000);
    double t = now_s();
    if (t - last >= 10) {
      uint64_t c = atomic_load(&checked);
      printf("  %" PRIu64 "/%" PRIu64
             " (%.1f%%) %llu failures, %.0f s, "
             "eta %.0f s\n",
             c, total, 100.0 * (double)c / (double)total,
             (unsigned long long)atomic_load(&failures), t - t0,
             c ? (t - t0) * (double)(total - c) / (double)c : 0.0);
      fflush(stdout);
      last = t;
    }
  }
  for (int i = 0; i < nthreads; i++) pthread_join(th[i], NULL);
  *secs = now_s() - t0;
  return (long long)atomic_load(&failures);
}

static int run_exhaustive(int nthreads) {
  uint64_t total = (uint64_t)((NCHUNK + every - 1) / every) << CHUNK_BITS;
  double secs;
  pow5_init();
  printf("exhaustive: %" PRIu64 " patterns, %d threads\n", total, nthreads);
  fflush(stdout);
  long long f = run_workers(worker, nthreads, total, &secs);
  if (f < 0) return 1;
  printf("exhaustive: %" PRIu64 " checked, %lld failures (%.0f s)\n",
         (uint64_t)atomic_load(&checked), f, secs);
  return f ? 1 : 0;
}

/* ---- exhaustive: batch vs scalar --------------------------------------- */

/* Scalar reference: what attn_f32_append_list did per element. */
static size_t join_scalar(const float *v, size_t n, char *out) {
  char *p = out;
  for (size_t i = 0; i < n; i++) {
    if (i) *p++ = ',';
    p += attn_f32_shortest(v[i], p);
  }
  return (size_t)(p - out);
}

#define BATCH_MAX 4096
#define GUARD 64

/* Compares attn_f32_shortest_list with join_scalar on the 2^24 patterns of
 * chunk base, in lists of 4000..4095 (so the vector loop ends at every
 * tail length); also checks nothing is stored past the documented room.
 * Each differing list counts as one failure. */
static void batch_chunk(uint32_t base) {
  static _Thread_local float v[BATCH_MAX];
  static _Thread_local char a[ATTN_F32_LIST_MAX_CHARS(BATCH_MAX)];
  static _Thread_local char b[ATTN_F32_LIST_MAX_CHARS(BATCH_MAX) + GUARD];
  uint64_t i = 0, total = 1u << CHUNK_BITS;
  for (unsigned call = 0; i < total; call++) {
    size_t n = 4000 + call % 96;
    if (n > total - i) n = (size_t)(total - i);
    for (size_t j = 0; j < n; j++) v[j] = bits_to_f(base + (uint32_t)(i + j));
    size_t la = join_scalar(v, n, a);
    size_t room = ATTN_F32_LIST_MAX_CHARS(n);
    memset(b + room, '#', GUARD);
    size_t lb = attn_f32_shortest_list(v, n, b);
    int over = 0;
    for (size_t j = room; j < room + GUARD; j++) over |= b[j] != '#';
    if (la != lb || memcmp(a, b, la) != 0 || over) {
      if (atomic_fetch_add(&failures, 1) < 20) {
        /* first differing element: walk both lists number by number */
        size_t pa = 0, pb = 0, j = 0;
        while (j + 1 < n) {
          size_t ea = pa, eb = pb;
          while (ea < la && a[ea] != ',') ea++;
          while (eb < lb && b[eb] != ',') eb++;
          if (ea - pa != eb - pb || memcmp(a + pa, b + pb, ea - pa)) break;
          pa = ea + 1, pb = eb + 1, j++;
        }
        pthread_mutex_lock(&print_mu);
        printf("FAIL list at 0x%08" PRIx32 " n=%zu: element %zu (0x%08" PRIx32
               ") scalar \"%.16s\" batch \"%.16s\"%s\n",
               base + (uint32_t)i, n, j, base + (uint32_t)(i + j), a + pa,
               b + pb, over ? " (stored past the room)" : "");
        fflush(stdout);
        pthread_mutex_unlock(&print_mu);
      }
    }
    i += n;
  }
}

static void *batch_worker(void *arg) {
  (void)arg;
  for (;;) {
    unsigned ch = atomic_fetch_add(&next_chunk, 1);
    if (ch >= NCHUNK) break;
    if (ch % every) continue;
    batch_chunk(ch << CHUNK_BITS);
    atomic_fetch_add(&checked, 1u << CHUNK_BITS);
  }
  return NULL;
}

static int run_exhaustive_batch(int nthreads) {
  uint64_t total = (uint64_t)((NCHUNK + every - 1) / every) << CHUNK_BITS;
  double secs;
  printf("exhaustive-batch: %" PRIu64
         " patterns, %d threads, list implementation \"%s\" vs "
         "attn_f32_shortest joined by ','\n",
         total, nthreads, attn__f32fmt_impl_name());
  fflush(stdout);
  long long f = run_workers(batch_worker, nthreads, total, &secs);
  if (f < 0) return 1;
  printf("exhaustive-batch: %" PRIu64 " checked, %lld failing lists (%.0f s)\n",
         (uint64_t)atomic_load(&checked), f, secs);
  return f ? 1 : 0;
}

int main(int argc, char **argv) {
  if (argc >= 2 && strcmp(argv[1], "--exhaustive") == 0) {
    int nt = argc >= 3 ? (int)strtol(argv[2], NULL, 10) : 2;
    if (argc >= 4) every = (unsigned)strtoul(argv[3], NULL, 10);
    if (every < 1) every = 1;
    return run_exhaustive(nt);
  }
  if (argc >= 2 && strcmp(argv[1], "--exhaustive-batch") == 0) {
    int nt = argc >= 3 ? (int)strtol(argv[2], NULL, 10) : 2;
    if (argc >= 4) every = (unsigned)strtoul(argv[3], NULL, 10);
    if (every < 1) every = 1;
    if (argc >= 5 && !attn__f32fmt_set_impl(argv[4])) {
      fprintf(stderr, "unknown or unsupported implementation %s\n", argv[4]);
      return 2;
    }
    return run_exhaustive_batch(nt);
  }
  double secs = 0.5;
  if (argc >= 3 && strcmp(argv[1], "--secs") == 0)
    secs = strtod(argv[2], NULL);
  else if (argc >= 2) {
    fprintf(stderr,
            "usage: %s [--secs S] | --exhaustive [threads] [every]\n"
            "       | --exhaustive-batch [threads] [every] [impl]\n",
            argv[0]);
    return 2;
  }
  return run_bench(secs);
}
