/* bench_pipeline.c - what a worker does for one request, without HTTP.
 *
 * DESIGN
 *  Purpose.  Report the CPU time of the work a worker does for a request
 *  after the hand-off, as src/server/infer.c (job_run) does it: decode the
 *  body (KServe v2 or /v1/attention JSON), find the model, run it, encode
 *  the answer, free everything.  bench/load.sh runs it on the same small
 *  bodies it sends with wrk, so that a run shows how a request's CPU splits
 *  into HTTP threads, hand-off and this work (docs/performance.md).
 *  Stages.  Three loops over the same body: decode + free; decode + infer +
 *  free; decode + infer + encode + free.  Infer and encode are the
 *  differences between them, so no clock is read inside an iteration
 *  (a CLOCK_THREAD_CPUTIME_ID read is a system call, 0.45-0.49 us here).
 *  Each loop runs for at least --secs seconds (default 0.5) of thread CPU
 *  time, not skewed by other processes on the cores; the three alternate,
 *  --runs times (default 3), and each stage's best run is printed.  Limits
 *  and the engine's threads (1) are what attnd's defaults give a small
 *  request.
 *  Nothing is asserted; a failing request is printed and ends the run.
 *  Output: one line per body, or with --emit-json one JSON object per line.
 *
 *  Threads.  Single thread.
 *
 * Usage: bench_pipeline [--secs S] [--runs N] [--emit-json]
 *          (--v1 FILE | --v2 MODEL FILE)...
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "attn/buf.h"
#include "attn/codec.h"
#include "attn/config.h"
#include "attn/infer_request.h"
#include "attn/limits.h"
#include "attn/model.h"

typedef enum { STAGE_DECODE, STAGE_INFER, STAGE_ALL } stage;

typedef struct body {
  int v1;
  const char *model; /* v2: the model of the URL; v1: from the body */
  const char *path;
  char *text;
  size_t len;
} body;

typedef struct ctx {
  const attn_registry *reg;
  attn_codec_limits lim;
  attn_model_limits ml;
  attn_exec x;
} ctx;

static double cpu_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void die(const char *what, const char *detail) {
  fprintf(stderr, "bench_pipeline: %s%s%s\n", what, detail ? ": " : "",
          detail ? detail : "");
  exit(1);
}

/* Read b->path into b->text (64-byte aligned, as http.c's body buffers
 * are) and b->len; exits on failure. */
static void load(body *b) {
  FILE *f = fopen(b->path, "rb");
  if (!f) die("cannot open", b->path);
  if (fseek(f, 0, SEEK_END) != 0) die("cannot seek", b->path);
  long n = ftell(f);
  if (n < 0) die("cannot size", b->path);
  rewind(f);
  b->text = aligned_alloc(64, ((size_t)n / 64 + 1) * 64); /* never 0 bytes */
  if (!b->text) die("out of memory", NULL);
  if (fread(b->text, 1, (size_t)n, f) != (size_t)n) die("cannot read", b->path);
  fclose(f);
  b->len = (size_t)n;
}

/* One request through `upto`; returns the answer's size (0 before encode). */
static size_t one(ctx *c, const body *b, stage upto) {
  size_t len = 0; /* the answer's bytes */
  attn_diag d = {{0}};
  attn_infer_request req = {0};
  attn_v1_info info = {0};
  attn_infer_response out = {0};
  attn_buf buf;
  attn_buf_init(&buf, 0);
  attn_status st =
      b->v1 ? attn_v1_decode(b->text, b->len, &c->lim, &req, &info, &d)
            : attn_v2_decode(b->text, b->len, 0, &c->lim, &req, &d);
  if (st) die("decode", d.msg[0] ? d.msg : attn_strerror(st));
  if (upto >= STAGE_INFER) {
    const char *name = b->v1 ? (req.model ? req.model : "sdpa") : b->model;
    const attn_model *m = attn_registry_find(c->reg, name, NULL);
    if (!m) die("unknown model", name);
    st = attn_model_infer(m, &req, &c->ml, &c->x, &out, &d);
    if (st) die("infer", d.msg[0] ? d.msg : attn_strerror(st));
  }
  if (upto == STAGE_ALL) {
    size_t hl = 0;
    if (b->v1) {
      attn_v1_timing t = {0.01, 0.02, 0.05};
      st = attn_v1_encode(&out, &req, &info, &t, &buf, &d);
    } else {
      st = attn_v2_encode(&out, &buf, &hl, &d);
    }
    if (st) die("encode", d.msg[0] ? d.msg : attn_strerror(st));
    len = buf.len;
  }
  attn_buf_free(&buf);
  attn_infer_request_free(&req);
  attn_infer_response_free(&out);
  return len;
}

/* Thread CPU seconds per request of `upto`: one run of at least `secs`. */
static double time_stage(ctx *c, const body *b, stage upto, double secs) {
  long n = 0, batch = 16;
  double t0 = cpu_now(), t;
  do {
    for (long i = 0; i < batch; i++) one(c, b, upto);
    n += batch;
    batch *= 2;
  } while ((t = cpu_now() - t0) < secs);
  return t / (double)n;
}

static void usage(const char *argv0) {
  fprintf(stderr,
          "usage: %s [--secs S] [--runs N] [--emit-json] "
          "(--v1 FILE | --v2 MODEL FILE)...\n",
          argv0);
  exit(2);
}

int main(int argc, char **argv) {
  body bodies[16];
  int nb = 0, json = 0, runs = 3;
  double secs = 0.5;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--secs") == 0 && i + 1 < argc) {
      secs = strtod(argv[++i], NULL);
    } else if (strcmp(argv[i], "--runs") == 0 && i + 1 < argc) {
      char *end;
      long v = strtol(argv[++i], &end, 10);
      runs = *end || v < 1 || v > 1000 ? 0 : (int)v; /* 0: usage below */
    } else if (strcmp(argv[i], "--emit-json") == 0) {
      json = 1;
    } else if (strcmp(argv[i], "--v1") == 0 && i + 1 < argc &&
               nb < (int)(sizeof bodies / sizeof *bodies)) {
      bodies[nb++] = (body){.v1 = 1, .path = argv[++i]};
    } else if (strcmp(argv[i], "--v2") == 0 && i + 2 < argc &&
               nb < (int)(sizeof bodies / sizeof *bodies)) {
      bodies[nb].v1 = 0;
      bodies[nb].model = argv[++i];
      bodies[nb++].path = argv[++i];
    } else {
      usage(argv[0]);
    }
  }
  if (nb == 0 || runs < 1 || !(secs > 0)) usage(argv[0]);

  /* attnd's defaults, as src/server/infer.c turns them into limits */
  attn_config cfg;
  attn_config_defaults(&cfg);
  attn_registry *reg;
  attn_diag d = {{0}};
  if (attn_registry_create(NULL, &reg, &d)) die("registry", d.msg);
  ctx c = {.reg = reg,
           .lim = {.max_tensor_elements = (size_t)cfg.max_tensor_elements,
                   .max_inputs = ATTN_MAX_INPUTS,
                   .max_depth = ATTN_MAX_JSON_DEPTH},
           .ml = {.max_seq_len = cfg.max_seq_len,
                  .max_tensor_elements = (size_t)cfg.max_tensor_elements,
                  .max_weights_elements = (size_t)cfg.max_weights_elements,
                  .no_weights_json = cfg.max_weights_elements == 0},
           .x = {.threads = 1}};

  if (!json)
    printf("%-8s %-24s %8s %8s | %9s %9s %9s %9s\n", "protocol", "body",
           "bytes in", "out", "decode us", "infer us", "encode us", "all us");
  for (int i = 0; i < nb; i++) {
    body *b = &bodies[i];
    load(b);
    size_t out_bytes = one(&c, b, STAGE_ALL); /* warm up; dies on a bad body */
    /* the three loops alternate, so that a slower stretch of the machine
     * falls on all of them; each keeps its best run */
    double td = 1e30, ti = 1e30, ta = 1e30;
    for (int r = 0; r < runs; r++) {
      double t = time_stage(&c, b, STAGE_DECODE, secs);
      if (t < td) td = t;
      if ((t = time_stage(&c, b, STAGE_INFER, secs)) < ti) ti = t;
      if ((t = time_stage(&c, b, STAGE_ALL, secs)) < ta) ta = t;
    }
    const char *name =
        strrchr(b->path, '/') ? strrchr(b->path, '/') + 1 : b->path;
    if (json)
      printf(
          "{\"protocol\":\"%s\",\"body\":\"%s\",\"bytes_in\":%zu,"
          "\"bytes_out\":%zu,\"decode_us\":%.3f,\"infer_us\":%.3f,"
          "\"encode_us\":%.3f,\"all_us\":%.3f}\n",
          b->v1 ? "v1" : "v2", name, b->len, out_bytes, td * 1e6,
          (ti - td) * 1e6, (ta - ti) * 1e6, ta * 1e6);
    else
      printf("%-8s %-24s %8zu %8zu | %9.2f %9.2f %9.2f %9.2f\n",
             b->v1 ? "v1" : "v2", name, b->len, out_bytes, td * 1e6,
             (ti - td) * 1e6, (ta - ti) * 1e6, ta * 1e6);
    free(b->text);
  }
  attn_registry_destroy(reg);
  return 0;
}
