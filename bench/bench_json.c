/* bench_json.c - request-body JSON parsing: cJSON against attn_json_parse,
 * and the full v2/v1 decoders on the same bodies.
 *
 * DESIGN
 *  Purpose.  Report, for four request bodies, MB/s of body and ns per JSON
 *  number for
 *    cJSON   cJSON_ParseWithLengthOpts + cJSON_Delete (what the codecs used);
 *    attn    attn_json_parse + attn_json_free (src/json/json_parse.c);
 *    decode  attn_v2_decode / attn_v1_decode + attn_infer_request_free
 *            (parse, validate, convert to FP32 tensors, free).
 *  Bodies: a KServe v2 request with query/key/value of 1024 numbers each
 *  ([16,64], flat "data"), the same with 32768 each (~1 MB), and the v1
 *  equivalents with the tensors as nested arrays.  Numbers are the shortest
 *  texts of floats uniform in [-1, 1] from a fixed-seed xorshift, as
 *  attention inputs look; the two "py" bodies write the same floats as
 *  Python's json.dumps does after numpy's tolist() (16-17 digits).  Each
 *  method runs for at least --secs seconds (default 0.5) of thread CPU
 *  time (CLOCK_THREAD_CPUTIME_ID: not skewed by other processes on the
 *  cores); the best of three runs is printed.
 *  Nothing is asserted; a parse failure is printed and ends the run.
 *  --impl NAME reads packed arrays with that path (avx512, avx2, sse2, scalar:
 *  attn__json_set_impl) instead of the fastest one the CPU has.
 *
 *  Linked against the codec and JSON libraries, so building it against an
 *  older src/json and src/codec gives the "before" numbers for attn and
 *  decode.
 *
 *  Threads.  Single thread.
 */
#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "attn/buf.h"
#include "attn/codec.h"
#include "attn/f32fmt.h"
#include "attn/infer_request.h"
#include "attn/json.h"
#include "../src/json/internal.h"

static double secs_min = 0.5;

static double cpu_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static uint64_t rng = 0x2545F4914F6CDD1Dull;

static float rand_unit(void) { /* uniform in [-1, 1] */
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return (float)((double)(rng >> 11) / 4503599627370496.0 - 1.0);
}

static void die(const char *what) {
  fprintf(stderr, "bench_json: %s\n", what);
  exit(1);
}

static void put(attn_buf *b, const char *s) {
  if (attn_buf_puts(b, s) != ATTN_OK) die("out of memory");
}

/* How numbers are written: the shortest text of the float (what attnd
 * and most C/JS clients print), or what Python's json.dumps writes for a
 * float32 value turned into a Python float (numpy's tolist(), tritonclient's
 * JSON mode): the shortest text that reads back to the same *double*,
 * 16 or 17 significant digits as a rule. */
static int python_texts;

static void put_f32(attn_buf *b) {
  char t[40];
  float f = rand_unit();
  size_t n;
  if (!python_texts) {
    n = attn_f32_shortest(f, t);
  } else {
    for (int p = 1;; p++) { /* repr(): the first precision that round-trips */
      n = (size_t)snprintf(t, sizeof t, "%.*g", p, (double)f);
      if (strtod(t, NULL) == (double)f || p == 17) break;
    }
    if (!strchr(t, '.') && !strchr(t, 'e')) {
      memcpy(t + n, ".0", 3); /* repr(1.0) is "1.0" */
      n += 2;
    }
  }
  if (attn_buf_append(b, t, n) != ATTN_OK) die("out of memory");
}

/* v2: {"inputs":[{"name":"query","datatype":"FP32","shape":[L,64],
 * "data":[..]},..key..,..value..]}; v1: {"query":[[..64..],..L..],..}. */
static char *make_body(int v1, size_t rows, size_t *len) {
  static const char *const names[] = {"query", "key", "value"};
  char hdr[160];
  attn_buf b;
  attn_buf_init(&b, 0);
  put(&b, v1 ? "{" : "{\"inputs\":[");
  for (int t = 0; t < 3; t++) {
    if (t) put(&b, ",");
    if (v1) {
      snprintf(hdr, sizeof hdr, "\"%s\":[", names[t]);
    } else {
      snprintf(hdr, sizeof hdr,
               "{\"name\":\"%s\",\"datatype\":\"FP32\",\"shape\":[%zu,64],"
               "\"data\":[",
               names[t], rows);
    }
    put(&b, hdr);
    for (size_t r = 0; r < rows; r++) {
      if (v1) put(&b, r ? ",[" : "[");
      for (size_t c = 0; c < 64; c++) {
        if (c || (!v1 && r)) put(&b, ",");
        put_f32(&b);
      }
      if (v1) put(&b, "]");
    }
    put(&b, v1 ? "]" : "]}");
  }
  put(&b, v1 ? "}" : "]}");
  return attn_buf_steal(&b, len);
}

typedef enum { M_CJSON, M_ATTN, M_DECODE } method;

/* One call of method m on body; exits on failure. */
static void run_once(method m, int v1, const char *body, size_t len) {
  attn_diag d;
  if (m == M_CJSON) {
    const char *end;
    cJSON *t = cJSON_ParseWithLengthOpts(body, len, &end, 0);
    if (!t) die("cJSON failed to parse the body");
    cJSON_Delete(t);
  } else if (m == M_ATTN) {
    cJSON *t;
    if (attn_json_parse(body, len, ATTN_MAX_JSON_DEPTH, NULL, &t, &d) !=
        ATTN_OK)
      die(d.msg);
    attn_json_free(t);
  } else {
    attn_infer_request r;
    attn_status s = v1 ? attn_v1_decode(body, len, NULL, &r, NULL, &d)
                       : attn_v2_decode(body, len, 0, NULL, &r, &d);
    if (s != ATTN_OK) die(d.msg);
    attn_infer_request_free(&r);
  }
}

/* Best seconds per call over three runs of >= secs_min each. */
static double time_method(method m, int v1, const char *body, size_t len) {
  double best = 1e30;
  for (int run = 0; run < 3; run++) {
    size_t iters = 0;
    double t0 = cpu_now(), t;
    do {
      run_once(m, v1, body, len);
      iters++;
    } while ((t = cpu_now() - t0) < secs_min);
    if (t / (double)iters < best) best = t / (double)iters;
  }
  return best;
}

int main(int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--secs") == 0 && i + 1 < argc) {
      secs_min = strtod(argv[++i], NULL);
    } else if (strcmp(argv[i], "--impl") == 0 && i + 1 < argc) {
      if (!attn__json_set_impl(argv[++i])) {
        fprintf(stderr, "%s: no packed-array path '%s' on this CPU\n", argv[0],
                argv[i]);
        return 2;
      }
    } else {
      fprintf(stderr, "usage: %s [--secs S] [--impl avx512|avx2|sse2|scalar]\n",
              argv[0]);
      return 2;
    }
  }
  static const struct {
    const char *label;
    int v1;
    size_t rows;
    int python;
  } bodies[] = {
      {"v2 3x1024", 0, 16, 0},    {"v2 ~1MB", 0, 512, 0},
      {"v1 3x1024", 1, 16, 0},    {"v1 ~1MB", 1, 512, 0},
      {"v2 3x1024 py", 0, 16, 1}, {"v1 3x1024 py", 1, 16, 1},
  };
  printf("%-12s %8s %7s | %-17s | %-17s | %7s | %s\n", "body", "bytes",
         "numbers", "cJSON MB/s ns/num", "attn  MB/s ns/num", "speedup",
         "decode MB/s ns/num");
  for (size_t i = 0; i < sizeof bodies / sizeof *bodies; i++) {
    size_t len, nums = 3 * 64 * bodies[i].rows;
    python_texts = bodies[i].python;
    char *body = make_body(bodies[i].v1, bodies[i].rows, &len);
    if (!body) die("out of memory");
    double tc = time_method(M_CJSON, bodies[i].v1, body, len);
    double ta = time_method(M_ATTN, bodies[i].v1, body, len);
    double td = time_method(M_DECODE, bodies[i].v1, body, len);
    printf(
        "%-12s %8zu %7zu | %7.1f %9.1f | %7.1f %9.1f | %6.2fx | %7.1f %9.1f\n",
        bodies[i].label, len, nums, (double)len / tc / 1e6,
        tc / (double)nums * 1e9, (double)len / ta / 1e6,
        ta / (double)nums * 1e9, tc / ta, (double)len / td / 1e6,
        td / (double)nums * 1e9);
    free(body);
  }
  return 0;
}
