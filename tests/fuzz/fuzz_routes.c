/* fuzz_routes.c - libFuzzer target: the URL router (src/server/routes.c,
 * and web.c behind GET / and /ui/), with Inference-Header-Content-Length
 * read as http.c reads it (attn__header_number), on the HTTP thread's
 * plain attn__http_req: no sockets, no libmicrohttpd.
 *
 * The first input byte is the framing, the rest NUL-separated pieces:
 *   bits 0-2   the method: GET, HEAD, POST, PUT, DELETE, OPTIONS, PATCH,
 *              or (7) the first piece
 *   bit 3      the server is draining; bit 4: unready (shutdown delay)
 *   pieces     path, Content-Type, Content-Encoding,
 *              Inference-Header-Content-Length, Accept, If-None-Match,
 *              then the body (a piece that is absent is a header that is)
 * The registry has the built-ins and, when run from build-fuzz/ as run.sh
 * does, config/models (the resident model "demo").
 * Every input checks, besides the sanitizers:
 *   - an answer has a status routes.c may give (200, 304, 400, 404, 405,
 *     413, 415, 503: never a 500), a JSON body that parses for every JSON
 *     answer, with "error" for every 4xx and 5xx; a 405 says Allow, a 503
 *     says Retry-After;
 *   - an inference is deferred only for POST, not while draining, with a
 *     body, to the route the path names exactly (/v1/attention, or
 *     /v2/models/{m}[/versions/{v}]/infer of a model the registry has),
 *     with a header length that is the header's number, within the body
 *     when it is not compressed, and 0 without the header; a repository
 *     operation only for POST, not while draining, uncompressed, to
 *     /v2/repository/index or /v2/repository/models/{m}/load|unload
 *     exactly (a body may be empty).
 * Any violation aborts (a crash for libFuzzer).
 *
 * Build and run: tests/fuzz/run.sh routes [seconds]
 */
#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "attn/config.h"
#include "attn/metrics.h"
#include "attn/model.h"
#include "server/http.h"
#include "server/internal.h"
#include "server/routes.h"

#define N_PIECES 7

static attn_registry *reg;
static attn_config cfg;
static attn_metrics *metrics;

static void fail(const char *what, const char *detail) {
  fprintf(stderr, "fuzz_routes: %s: %s\n", what, detail);
  abort();
}

static int known_status(int s) {
  static const int ok[] = {200, 304, 400, 404, 405, 413, 415, 503};
  for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++)
    if (s == ok[i]) return 1;
  return 0;
}

static void check_answer(const attn__http_resp *r, const char *path) {
  if (!known_status(r->status)) {
    fprintf(stderr, "status %d\n", r->status);
    fail("status", path);
  }
  if (r->status == 405 && !r->allow) fail("405 without Allow", path);
  if (r->status == 503 && r->retry_after_s <= 0)
    fail("503 without Retry-After", path);
  int json = r->content_type && strstr(r->content_type, "json");
  if (r->status >= 400 && !json) fail("an error that is not JSON", path);
  if (!json && r->status == 200 && !r->body) fail("200 without a body", path);
  if (!json || r->status == 304) return;
  cJSON *j = cJSON_ParseWithLength(r->body, r->len);
  if (!j) fail("answer is not JSON", path);
  if (r->status >= 400 &&
      !cJSON_IsString(cJSON_GetObjectItemCaseSensitive(j, "error")))
    fail("error answer without \"error\"", path);
  cJSON_Delete(j);
}

/* A repository operation deferred (repo.c runs it). */
static void check_repo(const attn__http_req *q, const attn__infer_target *t,
                       int draining) {
  char want[ATTN_MAX_NAME_LEN + 64];
  if (strcmp(q->method, "POST") || draining)
    fail("repository deferred", "not POST, or draining");
  if (q->content_encoding && *q->content_encoding &&
      strcasecmp(q->content_encoding, "identity"))
    fail("repository deferred", "compressed");
  if (t->proto == ATTN_JOB_REPO_INDEX)
    snprintf(want, sizeof want, "/v2/repository/index");
  else if (t->proto == ATTN_JOB_REPO_LOAD || t->proto == ATTN_JOB_REPO_UNLOAD)
    snprintf(want, sizeof want, "/v2/repository/models/%s/%s", t->model,
             t->proto == ATTN_JOB_REPO_LOAD ? "load" : "unload");
  else
    fail("deferred", "an unknown job");
  if (strcmp(q->path, want)) fail("repository path", q->path);
}

static void check_deferred(const attn__http_req *q, const attn__infer_target *t,
                           int draining) {
  if (t->proto != ATTN_JOB_V1 && t->proto != ATTN_JOB_V2) {
    check_repo(q, t, draining);
    return;
  }
  if (strcmp(q->method, "POST") || draining || q->body_len == 0)
    fail("deferred", "not POST, draining or no body");
  if (t->proto == ATTN_JOB_V1) {
    if (strcmp(q->path, "/v1/attention")) fail("v1 path", q->path);
    return;
  }
  char want[3 * ATTN_MAX_NAME_LEN + 64];
  snprintf(want, sizeof want, "/v2/models/%s%s%s/infer", t->model,
           t->version[0] ? "/versions/" : "", t->version);
  if (strcmp(q->path, want)) fail("v2 path", q->path);
  if (!attn_registry_find(reg, t->model, t->version[0] ? t->version : NULL))
    fail("deferred to a model the registry lacks", t->model);
  if (!q->header_len_text && t->header_len) fail("header length", "no header");
  if (q->header_len_text &&
      (t->header_len != q->header_len || t->header_len == 0 ||
       (t->encoding == ATTN_ENC_IDENTITY && t->header_len > q->body_len)))
    fail("header length", q->header_len_text);
}

static void route(const uint8_t *data, size_t size) {
  static const char *const methods[] = {"GET",    "HEAD",    "POST", "PUT",
                                        "DELETE", "OPTIONS", "PATCH"};
  char *text = malloc(size + 1);
  if (!text) return;
  memcpy(text, data + 1, size - 1);
  text[size - 1] = '\0';
  const char *piece[N_PIECES + 1] = {NULL};
  char *p = text, *end = text + size - 1;
  const char *method = (data[0] & 7) < 7 ? methods[data[0] & 7] : NULL;
  if (!method) method = p, p += strlen(p) + 1;
  for (int i = 0; i < N_PIECES - 1 && p <= end; i++, p += strlen(p) + 1)
    piece[i] = p;
  attn__http_req q = {.method = method,
                      .path = piece[0] ? piece[0] : "/",
                      .content_type = piece[1],
                      .content_encoding = piece[2],
                      .header_len_text = piece[3],
                      .accept = piece[4],
                      .if_none_match = piece[5],
                      .request_id = "fuzz",
                      .body = p <= end ? p : "",
                      .body_len = p <= end ? (size_t)(end - p) : 0};
  q.header_len_ok = attn__header_number(q.header_len_text, &q.header_len) != 0;
  attn__srv_ctx s = {
      .cfg = &cfg, .models = reg, .ncpu = 1, .metrics = metrics, .workers = 1};
  int draining = data[0] >> 3 & 1;
  atomic_init(&s.draining, draining);
  atomic_init(&s.unready, data[0] >> 4 & 1);
  attn__http_resp r = {0};
  attn__infer_target t;
  memset(&t, 0x5A, sizeof t);
  if (attn__route(&s, &q, &r, &t) == ATTN_ROUTE_DONE)
    check_answer(&r, q.path);
  else
    check_deferred(&q, &t, draining);
  free(r.body);
  free(text);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!reg) {
    attn_diag d = {{0}};
    attn_config_defaults(&cfg);
    cfg.model_control = ATTN_MODEL_CONTROL_EXPLICIT; /* load, unload run */
    if (attn_registry_create("../config/models", &reg, &d))
      fail("registry", d.msg);
    const char *names[64];
    attn_metrics_labels l = {.models = names,
                             .n_models = attn_registry_count(reg)};
    for (size_t i = 0; i < l.n_models && i < 64; i++)
      names[i] = attn_model_name(attn_registry_at(reg, i));
    l.routes = attn__route_templates(&l.n_routes);
    if (attn_metrics_create(&l, &metrics, &d)) fail("metrics", d.msg);
  }
  if (size == 0) return 0;
  route(data, size);
  return 0;
}
