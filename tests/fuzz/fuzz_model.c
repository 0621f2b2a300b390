/* fuzz_model.c - libFuzzer target: a models folder as attnd reads it at
 * start-up (src/model/: registry.c's folder scan, resident.c's model JSON,
 * safetensors.c's weights), then one inference on the model it made.
 *
 * The first input byte is the framing, the rest is two files:
 *   bit 0      0: the bytes are m.json; 1: m.json, a NUL, then the
 *              weights file w.safetensors, written as its header JSON, a
 *              NUL, then its data (the 8-byte header length is written in
 *              front, so that most inputs get past it)
 *   bit 1      a second copy of m.json is written as n.json (two models:
 *              the name clash must be refused)
 * Both are written into a folder of this process's own under $TMPDIR
 * (run.sh sets TMPDIR=/dev/shm), removed at exit, and the folder is given
 * to attn_registry_create.  A description that asks for seeded weights
 * with a dimension over 256 is skipped: its size is legal (up to
 * ATTN_MODEL_MAX_PARAMS, 4 GiB) and would only time out.
 * Every input checks, besides the sanitizers:
 *   - a failure is a start-up error (EPARSE, EINVAL, EIO, ETOOBIG,
 *     EUNSUPPORTED, ENONFINITE or ESHAPE) whose message names the file
 *     (m.json, n.json, or the weights file as "weights" names it), and
 *     *out is NULL;
 *   - a success has the built-ins and the one model, whose name and
 *     dimensions are those of the JSON; it answers a [1, 2, E] query (E at
 *     most 256) with attn_output [1, 2, E], or refuses it with a client
 *     error.
 * Any violation aborts (a crash for libFuzzer).
 *
 * Build and run: tests/fuzz/run.sh model [seconds]
 */
#include <cjson/cJSON.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "attn/engine.h"
#include "attn/infer_request.h"
#include "attn/model.h"

static char dir[PATH_MAX - 32];

static void fail(const char *what, const char *detail) {
  fprintf(stderr, "fuzz_model: %s: %s\n", what, detail);
  abort();
}

static void put(const char *name, const void *p, size_t n) {
  char path[PATH_MAX];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(p, 1, n, f) != n || fclose(f) != 0) fail("write", path);
}

static void clean(void) {
  static const char *const names[] = {"m.json", "n.json", "w.safetensors"};
  char path[PATH_MAX];
  for (size_t i = 0; i < 3; i++) {
    snprintf(path, sizeof path, "%s/%s", dir, names[i]);
    unlink(path);
  }
}

static void remove_dir(void) {
  clean();
  rmdir(dir);
}

/* The weights file from "header JSON \0 data". */
static void put_weights(const uint8_t *p, size_t n) {
  const uint8_t *nul = memchr(p, 0, n);
  uint64_t hn = nul ? (uint64_t)(nul - p) : n;
  unsigned char *f = malloc(n + 8);
  if (!f) fail("out of memory", "");
  for (int i = 0; i < 8; i++) f[i] = (unsigned char)(hn >> (8 * i));
  memcpy(f + 8, p, n);
  if (nul) memmove(f + 8 + hn, f + 9 + hn, n - hn - 1);
  put("w.safetensors", f, n + 8 - (nul ? 1 : 0));
  free(f);
}

static double num(const cJSON *j, const char *key, double dflt) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
  return cJSON_IsNumber(v) ? v->valuedouble : dflt;
}

/* Seeded weights with a large dimension: legal, but only slow. */
static int too_slow(const cJSON *j) {
  if (!cJSON_GetObjectItemCaseSensitive(j, "seed")) return 0;
  double e = num(j, "embed_dim", 0);
  return e > 256 || num(j, "kdim", e) > 256 || num(j, "vdim", e) > 256;
}

/* The message names the weights file as the JSON gives it. */
static int names_weights(const char *msg, const cJSON *j) {
  const cJSON *w = cJSON_GetObjectItemCaseSensitive(j, "weights");
  return cJSON_IsString(w) && w->valuestring[0] && strstr(msg, w->valuestring);
}

static int start_error(attn_status s) {
  return s == ATTN_EPARSE || s == ATTN_EINVAL || s == ATTN_EIO ||
         s == ATTN_ETOOBIG || s == ATTN_EUNSUPPORTED || s == ATTN_ENONFINITE ||
         s == ATTN_ESHAPE;
}

static int client_error(attn_status s) {
  return s == ATTN_EPARSE || s == ATTN_EINVAL || s == ATTN_ESHAPE ||
         s == ATTN_ETOOBIG || s == ATTN_EUNSUPPORTED || s == ATTN_ENONFINITE;
}

/* One [1, 2, E] query through the model. */
static void run_once(const attn_model *m, int64_t E) {
  if (E > 256) return;
  float q[2 * 256];
  for (int i = 0; i < 2 * E; i++) q[i] = (float)(i % 7) * 0.25f - 0.5f;
  attn_infer_input in = {.name = "query",
                         .wire_dtype = ATTN_DT_FP32,
                         .tensor = {ATTN_DT_FP32, 3, {1, 2, E}, q, false}};
  attn_infer_request req = {0};
  req.inputs = &in;
  req.n_inputs = 1;
  req.binary_data_output = -1;
  attn_model_limits lim = {.max_seq_len = 64,
                           .max_tensor_elements = 1 << 16,
                           .max_weights_elements = 1 << 16};
  attn_exec x = {.threads = 1};
  attn_infer_response out = {0};
  attn_diag d = {{0}};
  attn_status s = attn_model_infer(m, &req, &lim, &x, &out, &d);
  if (s) {
    if (!client_error(s)) fail(attn_status_name(s), d.msg);
    return;
  }
  const attn_tensor *t = &out.outputs[0].tensor;
  if (t->rank != 3 || t->shape[0] != 1 || t->shape[1] != 2 || t->shape[2] != E)
    fail("attn_output shape", "");
  attn_infer_response_free(&out);
}

/* The built-in models every registry has: sdpa, mha, kv_attention. */
#define N_BUILTIN 3

/* The registry holds the built-ins and the model the JSON describes. */
static void check_registry(const attn_registry *r, const cJSON *j) {
  if (attn_registry_count(r) != N_BUILTIN + 1) fail("model count", "");
  const attn_model *m = attn_registry_at(r, N_BUILTIN);
  attn_model_info info;
  attn_model_info_get(m, &info);
  const cJSON *name = cJSON_GetObjectItemCaseSensitive(j, "name");
  if (!cJSON_IsString(name) || strcmp(name->valuestring, info.name) != 0)
    fail("name", info.name);
  double E = num(j, "embed_dim", -1), H = num(j, "num_heads", -1);
  if (info.embed_dim != E || info.num_heads != H ||
      info.num_kv_heads != num(j, "num_kv_heads", H) ||
      info.kdim != num(j, "kdim", E) || info.vdim != num(j, "vdim", E))
    fail("dimensions differ from the JSON", info.name);
  if (attn_registry_find(r, info.name, NULL) != m) fail("find", info.name);
  run_once(m, info.embed_dim);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!dir[0]) {
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/fuzz_model.XXXXXX", tmp ? tmp : "/tmp");
    if (!mkdtemp(dir)) fail("mkdtemp", dir);
    atexit(remove_dir);
    attn_engine_set_blas_threads(1);
  }
  if (size == 0) return 0;
  const uint8_t *p = data + 1;
  size_t n = size - 1;
  const uint8_t *nul = data[0] & 1 ? memchr(p, 0, n) : NULL;
  size_t jn = nul ? (size_t)(nul - p) : n;
  cJSON *j = cJSON_ParseWithLength((const char *)p, jn);
  if (j && too_slow(j)) {
    cJSON_Delete(j);
    return 0;
  }
  put("m.json", p, jn);
  if (data[0] & 2) put("n.json", p, jn);
  if (nul) put_weights(nul + 1, n - jn - 1);
  attn_registry *r = (attn_registry *)1;
  attn_diag d = {{0}};
  attn_status s = attn_registry_create(dir, &r, &d);
  if (s) {
    if (!start_error(s)) fail(attn_status_name(s), d.msg);
    if (r) fail("*out not NULL on failure", d.msg);
    if (!strstr(d.msg, "m.json") && !strstr(d.msg, "n.json") &&
        !names_weights(d.msg, j))
      fail("message does not name the file", d.msg);
  } else {
    if (!j || (data[0] & 2)) fail("accepted", "invalid JSON or a name twice");
    check_registry(r, j);
    attn_registry_destroy(r);
  }
  cJSON_Delete(j);
  clean();
  return 0;
}
