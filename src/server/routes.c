/* routes.c - which handler answers which request, without sockets.
 *
 * DESIGN
 * attn__route maps a plain attn_http_req to a plain attn_http_resp.  Health,
 * metadata and every refusal (404, 405, 413, 415, 503 while draining) are
 * answered here, on the HTTP thread, from read-only state; an inference
 * comes back as an attn_infer_target (ATTN_ROUTE_DEFER) for http.c to hand
 * to infer.c, which makes the job.  Nothing here blocks, allocates a job
 * or touches the engine.  The routes are one table (`routes` below), tried
 * in order; a route's methods are checked before its handler runs (405
 * with Allow otherwise; HEAD is answered as GET, libmicrohttpd leaves the
 * body out):
 *   GET  /v2/health/live, /v2/health/ready, /v2
 *   GET  /v2/models/{m}[/versions/{v}], .../ready
 *   POST /v2/models/{m}[/versions/{v}]/infer
 *   POST /v1/attention
 *   GET  /v1/models  (a list, for people with curl)
 *   GET  /metrics    (Prometheus text, stats.c)
 *   GET  /v2/models/stats, /v2/models/{m}[/versions/{v}]/stats (Triton's
 *        statistics extension, stats.c)
 *   POST /v2/repository/index, /v2/repository/models/{m}/load, .../unload
 *        (Triton's model repository extension: a job, run by repo.c)
 *   GET  /           (a short index of the above; the page, web.c, for a
 *                     client whose Accept names text/html)
 *   GET  /ui/{file}   (the page's files, web.c)
 *   GET  /openapi.json (the API description, docs/openapi.yaml; web.c)
 * Each route says who may call it when API keys are set (route_access:
 * health, the page and its files are public, /metrics is unless
 * metrics_require_key, the rest and every unknown path need a key: 401
 * with WWW-Authenticate); a CORS preflight is answered before any of it.
 * Answers are written with respond.c's helpers.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn/buf.h"
#include "attn/codec.h"
#include "attn_version.h"
#include "internal.h"
#include "web.h"

/* Every handler in the table (`routes` below) answers (fills *resp,
 * returns ATTN_ROUTE_DONE) or names an inference (fills *t, returns
 * ATTN_ROUTE_DEFER). */
typedef attn_route_kind handler(attn_srv_ctx *s, const attn_http_req *req,
                                attn_http_resp *resp, attn_infer_target *t);

static int method_is(const attn_http_req *r, const char *m) {
  return strcmp(r->method, m) == 0;
}

/* GET, or HEAD (answered like GET; libmicrohttpd leaves the body out). */
static int is_get(const attn_http_req *r) {
  return method_is(r, "GET") || method_is(r, "HEAD");
}

static attn_route_kind wrong_method(attn_http_resp *resp,
                                    const attn_http_req *req,
                                    const char *allow) {
  attn__resp_error(resp, 405, "method %s is not allowed on %s (allowed: %s)",
                   req->method, req->path, allow);
  resp->allow = allow;
  return ATTN_ROUTE_DONE;
}

/* Accept JSON (or no content type: curl -d sends form-urlencoded, which we
 * read as JSON too) and, for v2 binary requests, octet-stream. */
static int content_type_ok(const attn_http_req *req, int binary) {
  const char *ct = req->content_type;
  if (!ct || !*ct) return 1;
  size_t n = strcspn(ct, ";");
  while (n > 0 && (ct[n - 1] == ' ' || ct[n - 1] == '\t')) n--;
#define CT_IS(s) (n == strlen(s) && strncasecmp(ct, s, n) == 0)
  if (CT_IS("application/json") || CT_IS("text/json") ||
      CT_IS("application/x-www-form-urlencoded") || CT_IS("text/plain"))
    return 1;
  if (binary && (CT_IS("application/octet-stream") ||
                 CT_IS("application/vnd.triton.binary")))
    return 1;
  if (n > 5 && strncasecmp(ct + n - 5, "+json", 5) == 0) return 1;
  return 0;
#undef CT_IS
}

/* ---- health, metadata, lists -------------------------------------------- */

static attn_route_kind live(attn_srv_ctx *s, const attn_http_req *req,
                            attn_http_resp *resp, attn_infer_target *t) {
  attn__resp_static(resp, 200, "{\"live\":true}");
  return ATTN_ROUTE_DONE;
}

/* Why readiness is 503, or NULL when ready.  Unready alone is the
 * shutdown delay: requests are still served, but no more should come. */
static const char *not_ready(const attn_srv_ctx *s) {
  if (atomic_load(&s->draining)) return "server is draining";
  if (atomic_load(&s->unready))
    return "server is shutting down (still serving during "
           "shutdown_delay_ms; send new requests elsewhere)";
  return NULL;
}

static attn_route_kind ready(attn_srv_ctx *s, const attn_http_req *req,
                             attn_http_resp *resp, attn_infer_target *t) {
  const char *why = not_ready(s);
  if (why) {
    attn_buf b;
    attn_buf_init(&b, 0);
    attn_buf_puts(&b, "{\"ready\":false,\"error\":");
    attn_buf_json_string(&b, why);
    attn_buf_puts(&b, "}");
    attn__resp_json(resp, 503, &b);
    resp->retry_after_s = 1;
  } else {
    attn__resp_static(resp, 200, "{\"ready\":true}");
  }
  return ATTN_ROUTE_DONE;
}

static attn_route_kind server_metadata(attn_srv_ctx *s,
                                       const attn_http_req *req,
                                       attn_http_resp *resp,
                                       attn_infer_target *t) {
  static const char *const ext[] = {"binary_tensor_data"};
  attn_buf b;
  attn_buf_init(&b, 0);
  attn_v2_encode_server_metadata(&b, "attnd", ATTN_VERSION, ext, 1);
  attn__resp_json(resp, 200, &b);
  return ATTN_ROUTE_DONE;
}

/* Model metadata in KServe form, from the registry's io tables. */
static void model_metadata(const attn_model *m, attn_http_resp *resp) {
  size_t ni, no;
  const attn_model_io *in = attn_model_inputs(m, &ni);
  const attn_model_io *out = attn_model_outputs(m, &no);
  attn_tensor_meta mi[ATTN_MAX_INPUTS], mo[ATTN_MAX_OUTPUTS];
  const char *ver = attn_model_version(m);
  if (ni > ATTN_MAX_INPUTS) ni = ATTN_MAX_INPUTS;
  if (no > ATTN_MAX_OUTPUTS) no = ATTN_MAX_OUTPUTS;
  for (size_t i = 0; i < ni; i++) {
    mi[i] = (attn_tensor_meta){in[i].name,
                               attn_dtype_name(in[i].datatype),
                               in[i].rank,
                               {0},
                               in[i].optional};
    memcpy(mi[i].shape, in[i].shape, sizeof mi[i].shape);
  }
  for (size_t i = 0; i < no; i++) {
    mo[i] = (attn_tensor_meta){out[i].name,
                               attn_dtype_name(out[i].datatype),
                               out[i].rank,
                               {0},
                               out[i].optional};
    memcpy(mo[i].shape, out[i].shape, sizeof mo[i].shape);
  }
  attn_model_info info;
  attn_model_info_get(m, &info);
  attn_model_meta meta = {
      attn_model_name(m), &ver, 1, "attnd_attention", mi, ni, mo, no,
      info.parameters};
  attn_buf b;
  attn_buf_init(&b, 0);
  if (attn_v2_encode_model_metadata(&b, &meta) != ATTN_OK) {
    attn_buf_free(&b);
    attn__resp_error(resp, 500, "cannot encode metadata");
    return;
  }
  attn__resp_json(resp, 200, &b);
}

/* A model's readiness: the server's, under the model's name. */
static void model_ready(const attn_srv_ctx *s, const attn_model *m,
                        attn_http_resp *resp) {
  attn_buf b;
  attn_buf_init(&b, 0);
  attn_buf_puts(&b, "{\"name\":");
  attn_buf_json_string(&b, attn_model_name(m));
  const char *why = not_ready(s);
  attn_buf_printf(&b, ",\"ready\":%s", why ? "false" : "true");
  if (why) {
    attn_buf_puts(&b, ",\"error\":");
    attn_buf_json_string(&b, why);
  }
  attn_buf_puts(&b, "}");
  attn__resp_json(resp, why ? 503 : 200, &b);
  if (why) resp->retry_after_s = 1; /* as every 503 */
}

static attn_route_kind model_list(attn_srv_ctx *s, const attn_http_req *req,
                                  attn_http_resp *resp, attn_infer_target *t) {
  const attn_model *held[ATTN_MAX_MODELS];
  attn_v1_model_entry rows[ATTN_MAX_MODELS];
  size_t n = attn__hold_models(s->models, NULL, held, NULL);
  for (size_t i = 0; i < n; i++) {
    attn_model_info info;
    attn_model_info_get(held[i], &info);
    rows[i] = (attn_v1_model_entry){.name = info.name,
                                    .version = info.version,
                                    .kind = info.kind,
                                    .embed_dim = info.embed_dim,
                                    .num_heads = info.num_heads,
                                    .num_kv_heads = info.num_kv_heads,
                                    .kdim = info.kdim,
                                    .vdim = info.vdim,
                                    .precision = info.precision,
                                    .weight_bytes = info.weight_bytes,
                                    .description = info.description,
                                    .fixed = info.fixed};
  }
  attn_buf b;
  attn_buf_init(&b, 0);
  attn_status st = attn_v1_encode_models(&b, rows, n);
  for (size_t i = 0; i < n; i++) attn_model_put(held[i]);
  attn__resp_encoded(resp, st, &b);
  return ATTN_ROUTE_DONE;
}

/* GET /: the page (web.c) for a browser, else a short JSON index. */
static attn_route_kind root(attn_srv_ctx *s, const attn_http_req *req,
                            attn_http_resp *resp, attn_infer_target *t) {
  if (attn__web_root(req, resp)) return ATTN_ROUTE_DONE;
  attn_buf b;
  attn_buf_init(&b, 0);
  attn_buf_printf(&b,
                  "{\"name\":\"attnd\",\"version\":\"%s\",\"endpoints\":["
                  "\"POST /v1/attention\",\"GET /v1/models\","
                  "\"GET /v2\",\"GET /v2/health/live\","
                  "\"GET /v2/health/ready\","
                  "\"GET /v2/models/{model}\",\"GET /v2/models/{model}/ready\","
                  "\"POST /v2/models/{model}/infer\",\"GET /v2/models/stats\","
                  "\"GET /v2/models/{model}/stats\",\"GET /metrics\","
                  "\"POST /v2/repository/index\","
                  "\"POST /v2/repository/models/{model}/load\","
                  "\"POST /v2/repository/models/{model}/unload\","
                  "\"GET /ui/\",\"GET /openapi.json\"]}",
                  ATTN_VERSION);
  attn__resp_json(resp, 200, &b);
  return ATTN_ROUTE_DONE;
}

/* GET /ui, /ui/{file}: the page's files (web.c). */
static attn_route_kind web_file(attn_srv_ctx *s, const attn_http_req *req,
                                attn_http_resp *resp, attn_infer_target *t) {
  if (!attn__web_file(req, resp))
    attn__resp_error(resp, 404, "no file %s (the page is at / and /ui/)",
                     req->path);
  return ATTN_ROUTE_DONE;
}

/* GET /openapi.json: the API description (web.c). */
static attn_route_kind openapi(attn_srv_ctx *s, const attn_http_req *req,
                               attn_http_resp *resp, attn_infer_target *t) {
  attn__web_openapi(req, resp);
  return ATTN_ROUTE_DONE;
}

/* ---- inference ---------------------------------------------------------- */

/* Checks shared by both infer endpoints; 0 when resp was filled, else 1
 * with *enc the body's Content-Encoding. */
static int infer_preconditions(attn_srv_ctx *s, const attn_http_req *req,
                               attn_http_resp *resp, int binary_ok,
                               attn_encoding *enc) {
  if (!attn__encoding_parse(req->content_encoding, enc)) {
    attn__resp_error(resp, 415,
                     "Content-Encoding '%s' is not supported (use gzip, "
                     "deflate or none)",
                     req->content_encoding);
    return 0;
  }
  if (!content_type_ok(req, binary_ok)) {
    attn__resp_error(resp, 415,
                     "Content-Type '%s' is not supported (use "
                     "application/json%s)",
                     req->content_type,
                     binary_ok ? ", or application/octet-stream with "
                                 "Inference-Header-Content-Length"
                               : "");
    return 0;
  }
  if (atomic_load(&s->draining)) {
    attn__resp_error(resp, 503, "server is shutting down; retry elsewhere");
    resp->trace.hint = ATTN_OUTCOME_DRAINING + 1;
    return 0;
  }
  if (req->body_len == 0) {
    attn__resp_error(resp, 400, "request body is empty");
    return 0;
  }
  return 1;
}

/* Inference-Header-Content-Length (read by http.c) against the body: 1
 * and *out (0 when absent), or 0 when resp was filled.  A compressed
 * body's header length counts inflated bytes: only the limit is known
 * here (max); the worker checks it against the body. */
static int check_header_len(const attn_http_req *req, size_t max, size_t *out,
                            attn_http_resp *resp) {
  *out = 0;
  if (!req->header_len_text) return 1;
  if (!req->header_len_ok) {
    attn__resp_error(resp, 400,
                     "Inference-Header-Content-Length '%s' is not a number",
                     req->header_len_text);
    return 0;
  }
  if (req->header_len == 0 || req->header_len > max) {
    attn__resp_error(resp, 400,
                     "Inference-Header-Content-Length %s is outside (0, %zu] "
                     "(the body length)",
                     req->header_len_text, max);
    return 0;
  }
  *out = (size_t)req->header_len;
  return 1;
}

static attn_route_kind infer_v1(attn_srv_ctx *s, const attn_http_req *req,
                                attn_http_resp *resp, attn_infer_target *t) {
  if (!infer_preconditions(s, req, resp, 0, &t->encoding))
    return ATTN_ROUTE_DONE;
  t->proto = ATTN_JOB_V1;
  t->header_len = 0;
  t->model[0] = t->version[0] = '\0';
  return ATTN_ROUTE_DEFER;
}

/* POST /v2/models/{m}[/versions/{v}]/infer, t->model and t->version
 * filled in. */
static attn_route_kind infer_v2(attn_srv_ctx *s, const attn_http_req *req,
                                attn_http_resp *resp, attn_infer_target *t) {
  if (!infer_preconditions(s, req, resp, 1, &t->encoding) ||
      !check_header_len(req,
                        t->encoding == ATTN_ENC_IDENTITY
                            ? req->body_len
                            : (size_t)s->cfg->max_body_bytes,
                        &t->header_len, resp))
    return ATTN_ROUTE_DONE;
  t->proto = ATTN_JOB_V2;
  return ATTN_ROUTE_DEFER;
}

/* ---- /v2/models/{m}[/versions/{v}][/ready|/infer] ----------------------- */

static int copy_segment(const char *p, size_t n, char *out, size_t cap) {
  if (n == 0 || n >= cap) return 0;
  memcpy(out, p, n);
  out[n] = '\0';
  return 1;
}

/* Split "/v2/models/{m}[/versions/{v}][/tail]" into t->model, t->version
 * ("" when absent) and *tail ("", "/ready", "/infer" or anything else).
 * Returns 0 when the path does not have that form. */
static int parse_model_path(const char *path, attn_infer_target *t,
                            const char **tail) {
  const char *p = path + strlen("/v2/models/");
  size_t n = strcspn(p, "/");
  t->version[0] = '\0';
  if (!copy_segment(p, n, t->model, sizeof t->model)) return 0;
  p += n;
  if (strncmp(p, "/versions/", 10) == 0) {
    p += 10;
    n = strcspn(p, "/");
    if (!copy_segment(p, n, t->version, sizeof t->version)) return 0;
    p += n;
  }
  *tail = p;
  return 1;
}

static attn_route_kind model_routes(attn_srv_ctx *s, const attn_http_req *req,
                                    attn_http_resp *resp,
                                    attn_infer_target *t) {
  const char *tail;
  if (!parse_model_path(req->path, t, &tail)) {
    attn__resp_error(resp, 404, "no route for %s", req->path);
    return ATTN_ROUTE_DONE;
  }
  int is_infer = strcmp(tail, "/infer") == 0;
  int is_ready = strcmp(tail, "/ready") == 0;
  int is_stats = strcmp(tail, "/stats") == 0;
  if (!is_infer && !is_ready && !is_stats && strcmp(tail, "") != 0 &&
      strcmp(tail, "/") != 0) {
    attn__resp_error(resp, 404, "no route for %s", req->path);
    return ATTN_ROUTE_DONE;
  }
  if (is_infer && !method_is(req, "POST"))
    return wrong_method(resp, req, "POST");
  if (!is_infer && !is_get(req)) return wrong_method(resp, req, "GET, HEAD");
  const char *version = t->version[0] ? t->version : NULL;
  int slot;
  const attn_model *m = attn_registry_get(s->models, t->model, version, &slot);
  if (!m) {
    const attn_model *any =
        version ? attn_registry_get(s->models, t->model, NULL, NULL) : NULL;
    if (any)
      attn__resp_error(resp, 404, "model '%s' has no version '%s'", t->model,
                       version);
    else if (slot >= 0)
      attn__resp_error(resp, 404,
                       "model '%s' is not loaded (POST "
                       "/v2/repository/models/%s/load loads it)",
                       t->model, t->model);
    else
      attn__resp_error(resp, 404,
                       "unknown model '%s' (GET /v1/models lists them)",
                       t->model);
    attn_model_put(any);
    return ATTN_ROUTE_DONE;
  }
  attn_route_kind k = ATTN_ROUTE_DONE;
  if (is_infer)
    k = infer_v2(s, req, resp, t);
  else if (is_stats)
    attn__stats_answer(s, m, resp);
  else if (is_ready)
    model_ready(s, m, resp);
  else
    model_metadata(m, resp);
  attn_model_put(m);
  return k;
}

/* ---- the model repository (repo.c runs it on a worker) ------------------ */

/* Checks shared by the repository's routes: 0 when resp was filled. */
static int repo_preconditions(attn_srv_ctx *s, const attn_http_req *req,
                              attn_http_resp *resp) {
  if (req->content_encoding && *req->content_encoding &&
      strcasecmp(req->content_encoding, "identity") != 0) {
    attn__resp_error(resp, 415,
                     "Content-Encoding '%s' is not supported on %s (send "
                     "the JSON as it is)",
                     req->content_encoding, req->path);
    return 0;
  }
  if (!content_type_ok(req, 0)) {
    attn__resp_error(resp, 415,
                     "Content-Type '%s' is not supported (use "
                     "application/json)",
                     req->content_type);
    return 0;
  }
  if (atomic_load(&s->draining)) {
    attn__resp_error(resp, 503, "server is shutting down; retry elsewhere");
    return 0;
  }
  return 1;
}

/* POST /v2/repository/index */
static attn_route_kind repo_index(attn_srv_ctx *s, const attn_http_req *req,
                                  attn_http_resp *resp, attn_infer_target *t) {
  if (!repo_preconditions(s, req, resp)) return ATTN_ROUTE_DONE;
  memset(t, 0, sizeof *t);
  t->proto = ATTN_JOB_REPO_INDEX;
  return ATTN_ROUTE_DEFER;
}

/* POST /v2/repository/models/{m}/load and .../unload */
static attn_route_kind repo_model(attn_srv_ctx *s, const attn_http_req *req,
                                  attn_http_resp *resp, attn_infer_target *t) {
  const char *p = req->path + strlen("/v2/repository/models/");
  size_t n = strcspn(p, "/");
  memset(t, 0, sizeof *t);
  int load = strcmp(p + n, "/load") == 0;
  if ((!load && strcmp(p + n, "/unload") != 0) ||
      !copy_segment(p, n, t->model, sizeof t->model)) {
    attn__resp_error(resp, 404,
                     "no route for %s (POST /v2/repository/models/{model}/"
                     "load or /unload)",
                     req->path);
    return ATTN_ROUTE_DONE;
  }
  if (!repo_preconditions(s, req, resp)) return ATTN_ROUTE_DONE;
  t->proto = load ? ATTN_JOB_REPO_LOAD : ATTN_JOB_REPO_UNLOAD;
  return ATTN_ROUTE_DEFER;
}

/* ---- metrics and statistics (stats.c) ---------------------------------- */

static attn_route_kind metrics(attn_srv_ctx *s, const attn_http_req *req,
                               attn_http_resp *resp, attn_infer_target *t) {
  attn__metrics_answer(s, resp);
  return ATTN_ROUTE_DONE;
}

static attn_route_kind all_stats(attn_srv_ctx *s, const attn_http_req *req,
                                 attn_http_resp *resp, attn_infer_target *t) {
  attn__stats_answer(s, NULL, resp);
  return ATTN_ROUTE_DONE;
}

/* attnd_http_requests_total's route label: the templates of the table
 * below, the model routes spelt out (with and without a version). */
static const char *const templates[] = {
    "/",
    "/ui/{file}",
    "/v1/attention",
    "/v1/models",
    "/v2",
    "/v2/health/live",
    "/v2/health/ready",
    "/metrics",
    "/openapi.json",
    "/v2/models/stats",
    "/v2/models/{model}",
    "/v2/models/{model}/ready",
    "/v2/models/{model}/infer",
    "/v2/models/{model}/stats",
    "/v2/models/{model}/versions/{version}",
    "/v2/models/{model}/versions/{version}/ready",
    "/v2/models/{model}/versions/{version}/infer",
    "/v2/models/{model}/versions/{version}/stats",
    "/v2/repository/index",
    "/v2/repository/models/{model}/load",
    "/v2/repository/models/{model}/unload",
    "other"};
enum { T_MODEL = 10, T_VERSIONED = 14, T_REPO = 18, T_OTHER = 21 };

const char *const *attn__route_templates(size_t *n) {
  *n = sizeof templates / sizeof templates[0];
  return templates;
}

int attn__route_template(const char *path) {
  static const char *const tails[] = {"", "/ready", "/infer", "/stats"};
  if (strcmp(path, "/v2/") == 0) return 4;
  if (strcmp(path, "/ui") == 0 || strncmp(path, "/ui/", 4) == 0) return 1;
  for (int i = 0; i < T_MODEL; i++)
    if (i != 1 && strcmp(path, templates[i]) == 0) return i;
  if (strcmp(path, templates[T_REPO]) == 0) return T_REPO;
  if (strncmp(path, "/v2/repository/models/", 22) == 0) {
    const char *p = path + 22 + strcspn(path + 22, "/");
    if (p > path + 22 && strcmp(p, "/load") == 0) return T_REPO + 1;
    if (p > path + 22 && strcmp(p, "/unload") == 0) return T_REPO + 2;
  }
  attn_infer_target t;
  const char *tail;
  if (strncmp(path, "/v2/models/", 11) != 0 ||
      !parse_model_path(path, &t, &tail))
    return T_OTHER;
  if (strcmp(tail, "/") == 0) tail = "";
  for (int i = 0; i < 4; i++)
    if (strcmp(tail, tails[i]) == 0)
      return (t.version[0] ? T_VERSIONED : T_MODEL) + i;
  return T_OTHER;
}

/* ---- the table ---------------------------------------------------------- */

typedef enum {
  EXACT,  /* the path itself */
  FOLDER, /* the path, or the path followed by "/" and anything */
  PREFIX  /* any path that begins with it */
} match_kind;

typedef enum {
  GET,        /* GET and HEAD */
  POST,       /* POST */
  BY_HANDLER, /* the handler checks (methods differ below the path) */
} route_methods;

/* Who may call a route when API keys are set (none set: everyone). */
typedef enum {
  KEYED,   /* a key is needed (any path not in the table too) */
  PUBLIC,  /* health and the page's files: probes and browsers */
  METRICS, /* GET /metrics: public unless metrics_require_key */
} route_access;

typedef struct route {
  const char *path;
  match_kind match;
  route_methods methods;
  handler *handle;
  route_access access;
} route;

/* Tried in order; the first whose path matches answers. */
static const route routes[] = {
    {"/v2/health/live", EXACT, GET, live, PUBLIC},
    {"/v2/health/ready", EXACT, GET, ready, PUBLIC},
    {"/v2", EXACT, GET, server_metadata, KEYED},
    {"/v2/", EXACT, GET, server_metadata, KEYED},
    {"/", EXACT, GET, root, PUBLIC},
    {"/ui", FOLDER, GET, web_file, PUBLIC},
    {"/v1/models", EXACT, GET, model_list, KEYED},
    {"/v1/attention", EXACT, POST, infer_v1, KEYED},
    {"/metrics", EXACT, GET, metrics, METRICS},
    {"/openapi.json", EXACT, GET, openapi, PUBLIC},
    {"/v2/models/stats", EXACT, GET, all_stats, KEYED},
    {"/v2/models/", PREFIX, BY_HANDLER, model_routes, KEYED},
    {"/v2/repository/index", EXACT, POST, repo_index, KEYED},
    {"/v2/repository/models/", PREFIX, POST, repo_model, KEYED},
};

static int matches(const route *r, const char *path) {
  size_t n;
  switch (r->match) {
    case EXACT:
      return strcmp(path, r->path) == 0;
    case FOLDER:
      n = strlen(r->path);
      return strncmp(path, r->path, n) == 0 &&
             (path[n] == '\0' || path[n] == '/');
    case PREFIX:
      return strncmp(path, r->path, strlen(r->path)) == 0;
  }
  return 0;
}

/* ---- access: API keys, CORS preflights ---------------------------------- */

/* Does a request to a route of this access need a key it did not bring?
 * Then *resp is the 401 (counted: attn__auth_refused). */
static int unauthorized(attn_srv_ctx *s, const attn_http_req *req,
                        route_access access, attn_http_resp *resp) {
  if (!s->auth || access == PUBLIC ||
      (access == METRICS && !s->cfg->metrics_require_key))
    return 0;
  attn_auth_result r =
      attn__auth_check(s->auth, req->authorization, req->api_key);
  if (r == ATTN_AUTH_OK) return 0;
  attn__auth_refused(s->auth);
  attn_metrics_auth_failure(s->metrics); /* attnd_auth_failures_total */
  if (r == ATTN_AUTH_MISSING)
    attn__resp_error(resp, 401,
                     "%s %s needs an API key: send 'Authorization: Bearer "
                     "KEY' or 'X-Api-Key: KEY'",
                     req->method, req->path);
  else if (r == ATTN_AUTH_SCHEME)
    attn__resp_error(resp, 401,
                     "the Authorization header is not 'Bearer KEY' (only "
                     "Bearer is accepted): send 'Authorization: Bearer KEY' "
                     "or 'X-Api-Key: KEY'");
  else
    attn__resp_error(resp, 401, "the API key sent in %s is not valid",
                     req->api_key && req->authorization
                         ? "Authorization and X-Api-Key"
                     : req->api_key ? "X-Api-Key"
                                    : "Authorization");
  resp->headers[0] = "WWW-Authenticate";
  resp->headers[1] =
      r == ATTN_AUTH_WRONG ? "Bearer error=\"invalid_token\"" : "Bearer";
  return 1;
}

bool attn__metrics_refused(attn_srv_ctx *s, const attn_http_req *req,
                           attn_http_resp *resp) {
  return unauthorized(s, req, METRICS, resp);
}

/* A CORS preflight (OPTIONS with Origin and Access-Control-Request-Method)
 * when CORS is on: 204 for an allowed origin (http.c adds the origin's
 * headers), 403 for another.  0 when the request is not one. */
static int preflight(attn_srv_ctx *s, const attn_http_req *req,
                     attn_http_resp *resp) {
  if (!req->origin || !req->cors_method || !method_is(req, "OPTIONS") ||
      !*s->cfg->cors_allow_origins)
    return 0;
  if (!attn__cors_allowed(s->cfg->cors_allow_origins, req->origin)) {
    attn__resp_error(resp, 403,
                     "origin '%.200s' is not in cors_allow_origins (this "
                     "server's list of browser origins it answers)",
                     req->origin);
    return 1;
  }
  resp->status = 204;
  resp->body = calloc(1, 1); /* no body; NULL would mean out of memory */
  resp->len = 0;
  resp->headers[0] = "Access-Control-Allow-Methods";
  resp->headers[1] = ATTN_CORS_ALLOW_METHODS;
  resp->headers[2] = "Access-Control-Allow-Headers";
  resp->headers[3] = ATTN_CORS_ALLOW_HEADERS;
  resp->headers[4] = "Access-Control-Max-Age";
  resp->headers[5] = "600";
  return 1;
}

attn_route_kind attn__route(attn_srv_ctx *s, const attn_http_req *req,
                            attn_http_resp *resp, attn_infer_target *t) {
  if (preflight(s, req, resp)) return ATTN_ROUTE_DONE;
  for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++) {
    const route *r = &routes[i];
    if (!matches(r, req->path)) continue;
    if (unauthorized(s, req, r->access, resp)) return ATTN_ROUTE_DONE;
    if (r->methods == GET && !is_get(req))
      return wrong_method(resp, req, "GET, HEAD");
    if (r->methods == POST && !method_is(req, "POST"))
      return wrong_method(resp, req, "POST");
    return r->handle(s, req, resp, t);
  }
  if (unauthorized(s, req, KEYED, resp)) return ATTN_ROUTE_DONE;
  attn__resp_error(resp, 404, "no route for %s %s (GET / lists the endpoints)",
                   req->method, req->path);
  return ATTN_ROUTE_DONE;
}
