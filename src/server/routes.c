/* routes.c - which handler answers which request, without sockets.
 *
 * DESIGN
 * attn__route maps a plain attn__http_req to a plain attn__http_resp.  Health,
 * metadata and every refusal (404, 405, 413, 415, 503 while draining, for
 * a request begun after the drain: req->before_drain) are
 * answered here, on the HTTP thread, from read-only state; an inference
 * comes back as an attn__infer_target (ATTN_ROUTE_DEFER) for http.c to hand
 * to infer.c, which makes the job.  Nothing here blocks, allocates a job
 * or touches the engine.  The routes are one table (`routes` below), tried
 * in order, and a row is the only place an endpoint is declared: its
 * path template ("{model}" for a segment) is its metrics route label
 * (attn__route_templates) and its line in GET /'s list, its role tells
 * observe.c an inference from the rest, and its methods are checked before
 * its handler runs (405 with Allow otherwise; HEAD is answered as GET,
 * libmicrohttpd leaves the body out).  A unit test (test_route_rows)
 * checks that every row has what those need.
 * A row also says which body its route takes (route_body): none, a small
 * one (the repository's) or tensors.  attn__route_admit asks the key, the
 * methods and that from the headers alone, so that http.c refuses before
 * a byte of body is read or budgeted; attn__route then skips what was
 * admitted.
 * Each route says who may call it when API keys are set (route_access:
 * health, the page and its files are public, /metrics is unless
 * metrics_require_key, the rest and every unknown path need a key: 401
 * with WWW-Authenticate); a CORS preflight is answered before any of it.
 * An admin key (s->admin_auth) is accepted wherever an API key is; the
 * repository's load and unload (ADMIN) need one: a valid API key that is
 * not an admin key gets 403.  Before that, model_control "none" refuses
 * them with a 403 for every client (refused(), from the headers alone,
 * so before the body is read or a job queued).
 * Answers are written with respond.c's helpers.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn/buf.h"
#include "attn/codec.h"
#include "attn_version.h"
#include "internal.h"
#include "routes.h"
#include "respond.h"
#include "stats.h"
#include "inflate.h"
#include "auth.h"
#include "cors.h"
#include "web.h"

/* Every handler in the table (`routes` below) answers (fills *resp,
 * returns ATTN_ROUTE_DONE) or names an inference (fills *t, returns
 * ATTN_ROUTE_DEFER). */
typedef attn__route_kind handler(attn__srv_ctx *s, const attn__http_req *req,
                                 attn__http_resp *resp, attn__infer_target *t);

static int method_is(const attn__http_req *r, const char *m) {
  return strcmp(r->method, m) == 0;
}

/* GET, or HEAD (answered like GET; libmicrohttpd leaves the body out). */
static int is_get(const attn__http_req *r) {
  return method_is(r, "GET") || method_is(r, "HEAD");
}

static attn__route_kind wrong_method(attn__http_resp *resp,
                                     const attn__http_req *req,
                                     const char *allow) {
  attn__resp_error(resp, 405, "method %s is not allowed on %s (allowed: %s)",
                   req->method, req->path, allow);
  resp->allow = allow;
  return ATTN_ROUTE_DONE;
}

/* Accept JSON (or no content type: curl -d sends form-urlencoded, which we
 * read as JSON too) and, for v2 binary requests, octet-stream. */
static int content_type_ok(const attn__http_req *req, int binary) {
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

static attn__route_kind live(attn__srv_ctx *s, const attn__http_req *req,
                             attn__http_resp *resp, attn__infer_target *t) {
  attn__resp_static(resp, 200, "{\"live\":true}");
  return ATTN_ROUTE_DONE;
}

/* Why readiness is 503, or NULL when ready.  Unready alone is the
 * shutdown delay: requests are still served, but no more should come. */
static const char *not_ready(const attn__srv_ctx *s) {
  if (atomic_load(&s->draining)) return "server is draining";
  if (atomic_load(&s->unready))
    return "server is shutting down (still serving during "
           "shutdown_delay_ms; send new requests elsewhere)";
  return NULL;
}

static attn__route_kind ready(attn__srv_ctx *s, const attn__http_req *req,
                              attn__http_resp *resp, attn__infer_target *t) {
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

static attn__route_kind server_metadata(attn__srv_ctx *s,
                                        const attn__http_req *req,
                                        attn__http_resp *resp,
                                        attn__infer_target *t) {
  static const char *const ext[] = {"binary_tensor_data", "sequence",
                                    "sequence(string_id)"};
  attn_buf b;
  attn_buf_init(&b, 0);
  attn_v2_encode_server_metadata(&b, "attnd", ATTN_VERSION, ext,
                                 sizeof ext / sizeof *ext);
  attn__resp_json(resp, 200, &b);
  return ATTN_ROUTE_DONE;
}

/* Model metadata in KServe form, from the registry's io tables. */
static void model_metadata(const attn_model *m, attn__http_resp *resp) {
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
static void model_ready(const attn__srv_ctx *s, const attn_model *m,
                        attn__http_resp *resp) {
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

static attn__route_kind model_list(attn__srv_ctx *s, const attn__http_req *req,
                                   attn__http_resp *resp,
                                   attn__infer_target *t) {
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

/* GET / (defined after the table, which it lists). */
static handler root;

/* GET /ui, /ui/{file}: the page's files (web.c). */
static attn__route_kind web_file(attn__srv_ctx *s, const attn__http_req *req,
                                 attn__http_resp *resp, attn__infer_target *t) {
  if (!attn__web_file(req, resp))
    attn__resp_error(resp, 404, "no file %s (the page is at / and /ui/)",
                     req->path);
  return ATTN_ROUTE_DONE;
}

/* GET /openapi.json: the API description (web.c). */
static attn__route_kind openapi(attn__srv_ctx *s, const attn__http_req *req,
                                attn__http_resp *resp, attn__infer_target *t) {
  attn__web_openapi(req, resp);
  return ATTN_ROUTE_DONE;
}

/* ---- inference ---------------------------------------------------------- */

/* Checks shared by both infer endpoints: true when it answered (*resp
 * the refusal), else false with *enc the body's Content-Encoding.  Every
 * helper here that may fill an answer says so by returning true. */
static bool refuse_infer(attn__srv_ctx *s, const attn__http_req *req,
                         attn__http_resp *resp, int binary_ok,
                         attn__encoding *enc) {
  if (!attn__encoding_parse(req->content_encoding, enc)) {
    attn__resp_error(resp, 415,
                     "Content-Encoding '%s' is not supported (use gzip, "
                     "deflate or none)",
                     req->content_encoding);
    return true;
  }
  if (!content_type_ok(req, binary_ok)) {
    attn__resp_error(resp, 415,
                     "Content-Type '%s' is not supported (use "
                     "application/json%s)",
                     req->content_type,
                     binary_ok ? ", or application/octet-stream with "
                                 "Inference-Header-Content-Length"
                               : "");
    return true;
  }
  if (atomic_load(&s->draining) && !req->before_drain) {
    attn__resp_error(resp, 503, "server is shutting down; retry elsewhere");
    resp->trace.hint = ATTN_OUTCOME_DRAINING + 1;
    return true;
  }
  if (req->body_len == 0) {
    attn__resp_error(resp, 400, "request body is empty");
    return true;
  }
  return false;
}

/* Inference-Header-Content-Length (read by http.c) against the body:
 * false and *out (0 when absent), or true when it answered (*resp).  A
 * compressed body's header length counts inflated bytes: only the limit is
 * known here (max); the worker checks it against the body. */
static bool refuse_header_len(const attn__http_req *req, size_t max,
                              size_t *out, attn__http_resp *resp) {
  *out = 0;
  if (!req->header_len_text) return false;
  if (!req->header_len_ok) {
    attn__resp_error(resp, 400,
                     "Inference-Header-Content-Length '%s' is not a number",
                     req->header_len_text);
    return true;
  }
  if (req->header_len == 0 || req->header_len > max) {
    attn__resp_error(resp, 400,
                     "Inference-Header-Content-Length %s is outside (0, %zu] "
                     "(the body length)",
                     req->header_len_text, max);
    return true;
  }
  *out = (size_t)req->header_len;
  return false;
}

static attn__route_kind infer_v1(attn__srv_ctx *s, const attn__http_req *req,
                                 attn__http_resp *resp, attn__infer_target *t) {
  if (refuse_infer(s, req, resp, 0, &t->encoding)) return ATTN_ROUTE_DONE;
  t->proto = ATTN_JOB_V1;
  t->header_len = 0;
  t->model[0] = t->version[0] = '\0';
  return ATTN_ROUTE_DEFER;
}

/* POST /v2/models/{m}[/versions/{v}]/infer, t->model and t->version
 * filled in. */
static attn__route_kind infer_v2(attn__srv_ctx *s, const attn__http_req *req,
                                 attn__http_resp *resp, attn__infer_target *t) {
  if (refuse_infer(s, req, resp, 1, &t->encoding) ||
      refuse_header_len(req,
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
static int parse_model_path(const char *path, attn__infer_target *t,
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

/* The model a /v2/models/{m}[/versions/{v}]/... path names, taken
 * (attn_model_put when done), with t->model and t->version filled; NULL
 * with *resp its 404 (a name too long for one is no model either). */
static const attn_model *path_model(attn__srv_ctx *s, const attn__http_req *req,
                                    attn__http_resp *resp,
                                    attn__infer_target *t) {
  const char *tail;
  const attn_model *m = NULL;
  if (!parse_model_path(req->path, t, &tail)) { /* a name too long */
    attn__resp_no_model(resp, s->models, "", req->path + strlen("/v2/models/"),
                        NULL);
    return NULL;
  }
  const char *version = t->version[0] ? t->version : NULL;
  m = attn_registry_get(s->models, t->model, version, NULL);
  if (!m) attn__resp_no_model(resp, s->models, "", t->model, version);
  return m;
}

static attn__route_kind model_meta(attn__srv_ctx *s, const attn__http_req *req,
                                   attn__http_resp *resp,
                                   attn__infer_target *t) {
  const attn_model *m = path_model(s, req, resp, t);
  if (m) model_metadata(m, resp);
  attn_model_put(m);
  return ATTN_ROUTE_DONE;
}

static attn__route_kind model_readiness(attn__srv_ctx *s,
                                        const attn__http_req *req,
                                        attn__http_resp *resp,
                                        attn__infer_target *t) {
  const attn_model *m = path_model(s, req, resp, t);
  if (m) model_ready(s, m, resp);
  attn_model_put(m);
  return ATTN_ROUTE_DONE;
}

static attn__route_kind model_stats(attn__srv_ctx *s, const attn__http_req *req,
                                    attn__http_resp *resp,
                                    attn__infer_target *t) {
  const attn_model *m = path_model(s, req, resp, t);
  if (m) attn__stats_answer(s, m, resp);
  attn_model_put(m);
  return ATTN_ROUTE_DONE;
}

/* POST /v2/models/{m}[/versions/{v}]/infer: the model is checked here, so
 * that an unknown one is a 404 before its body is queued. */
static attn__route_kind model_infer(attn__srv_ctx *s, const attn__http_req *req,
                                    attn__http_resp *resp,
                                    attn__infer_target *t) {
  const attn_model *m = path_model(s, req, resp, t);
  attn__route_kind k = m ? infer_v2(s, req, resp, t) : ATTN_ROUTE_DONE;
  attn_model_put(m);
  return k;
}

/* ---- the model repository (repo.c runs it on a worker) ------------------ */

/* Content-Type: application/octet-stream (parameters aside): a session
 * file's PUT. */
static bool is_octet_stream(const attn__http_req *req) {
  const char *ct = req->content_type;
  size_t n = ct ? strcspn(ct, ";") : 0;
  while (n > 0 && (ct[n - 1] == ' ' || ct[n - 1] == '\t')) n--;
  return n == 24 && strncasecmp(ct, "application/octet-stream", n) == 0;
}

/* Checks shared by the routes of a few keys of JSON run as a job (the
 * repository's, the sessions'; file: a session file's PUT, octet-stream
 * instead of JSON): true when it answered. */
static bool refuse_job(attn__srv_ctx *s, const attn__http_req *req,
                       attn__http_resp *resp, bool file) {
  if (req->content_encoding && *req->content_encoding &&
      strcasecmp(req->content_encoding, "identity") != 0) {
    attn__resp_error(resp, 415,
                     "Content-Encoding '%s' is not supported on %s (send "
                     "the %s as it is)",
                     req->content_encoding, req->path, file ? "file" : "JSON");
    return true;
  }
  if (!file && !content_type_ok(req, 0)) {
    attn__resp_error(resp, 415,
                     "Content-Type '%s' is not supported (use "
                     "application/json)",
                     req->content_type);
    return true;
  }
  if (atomic_load(&s->draining) && !req->before_drain) {
    attn__resp_error(resp, 503, "server is shutting down; retry elsewhere");
    return true;
  }
  return false;
}

/* POST /v2/repository/index */
static attn__route_kind repo_index(attn__srv_ctx *s, const attn__http_req *req,
                                   attn__http_resp *resp,
                                   attn__infer_target *t) {
  if (refuse_job(s, req, resp, false)) return ATTN_ROUTE_DONE;
  memset(t, 0, sizeof *t);
  t->proto = ATTN_JOB_REPO_INDEX;
  return ATTN_ROUTE_DEFER;
}

/* POST /v2/repository/models/{m}/load and .../unload */
static attn__route_kind repo_model(attn__srv_ctx *s, const attn__http_req *req,
                                   attn__http_resp *resp, attn__infer_target *t,
                                   attn__job_proto op) {
  const char *p = req->path + strlen("/v2/repository/models/");
  memset(t, 0, sizeof *t);
  if (!copy_segment(p, strcspn(p, "/"), t->model, sizeof t->model)) {
    attn__resp_error(resp, 404, "unknown model '%.256s'", p);
    return ATTN_ROUTE_DONE;
  }
  if (refuse_job(s, req, resp, false)) return ATTN_ROUTE_DONE;
  t->proto = op;
  return ATTN_ROUTE_DEFER;
}

static attn__route_kind repo_load(attn__srv_ctx *s, const attn__http_req *req,
                                  attn__http_resp *resp,
                                  attn__infer_target *t) {
  return repo_model(s, req, resp, t, ATTN_JOB_REPO_LOAD);
}

static attn__route_kind repo_unload(attn__srv_ctx *s, const attn__http_req *req,
                                    attn__http_resp *resp,
                                    attn__infer_target *t) {
  return repo_model(s, req, resp, t, ATTN_JOB_REPO_UNLOAD);
}

/* ---- metrics and statistics (stats.c) ---------------------------------- */

static attn__route_kind metrics(attn__srv_ctx *s, const attn__http_req *req,
                                attn__http_resp *resp, attn__infer_target *t) {
  attn__metrics_answer(s, resp);
  return ATTN_ROUTE_DONE;
}

static attn__route_kind all_stats(attn__srv_ctx *s, const attn__http_req *req,
                                  attn__http_resp *resp,
                                  attn__infer_target *t) {
  attn__stats_answer(s, NULL, resp);
  return ATTN_ROUTE_DONE;
}

/* ---- sessions (session.c runs them on a worker) ------------------------- */

/* /v1/sessions[/{id}[/attend | /truncate | /fork | /kv]]: the id checked
 * and the operation named here (a PUT of application/octet-stream is a
 * session file's import); the store is the job's. */
static attn__route_kind session_route(attn__srv_ctx *s,
                                      const attn__http_req *req,
                                      attn__http_resp *resp,
                                      attn__infer_target *t) {
  const char *p = req->path + strlen("/v1/sessions");
  memset(t, 0, sizeof *t);
  t->proto = ATTN_JOB_SESSION;
  t->session_op = ATTN_SESSION_LIST;
  if (*p == '/') {
    size_t n = strcspn(++p, "/");
    if (!attn_session_id_ok(p, n)) {
      attn__resp_error(resp, 400,
                       "'%.*s' in %s is not a session id: 1 to %d bytes of "
                       "A-Z a-z 0-9 . _ : -",
                       (int)(n < 200 ? n : 200), p, req->path,
                       ATTN_SESSION_ID_MAX);
      return ATTN_ROUTE_DONE;
    }
    memcpy(t->session, p, n);
    t->session[n] = '\0';
    const char *rest = p + n;
    t->session_op =
        strcmp(rest, "/attend") == 0     ? ATTN_SESSION_ATTEND
        : strcmp(rest, "/truncate") == 0 ? ATTN_SESSION_TRUNCATE
        : strcmp(rest, "/fork") == 0     ? ATTN_SESSION_FORK
        : strcmp(rest, "/kv") == 0       ? ATTN_SESSION_KV
        : method_is(req, "PUT")
            ? is_octet_stream(req) ? ATTN_SESSION_IMPORT : ATTN_SESSION_CREATE
        : method_is(req, "DELETE") ? ATTN_SESSION_DELETE
                                   : ATTN_SESSION_GET;
  }
  if (!s->sessions) {
    attn__resp_error(resp, 503, "sessions are not available on this server");
    return ATTN_ROUTE_DONE;
  }
  if (refuse_job(s, req, resp, t->session_op == ATTN_SESSION_IMPORT))
    return ATTN_ROUTE_DONE;
  return ATTN_ROUTE_DEFER;
}

/* ---- the table ---------------------------------------------------------- */

typedef enum {
  EXACT,  /* the path itself; "{name}" stands for one non-empty segment */
  SLASH,  /* likewise, or followed by one "/" */
  FOLDER, /* the path, or the path followed by "/" and anything */
} match_kind;

/* The methods of a row, as bits: one row may take several (a session's
 * GET, PUT and DELETE). */
typedef enum {
  GET = 1,  /* GET and HEAD */
  POST = 2, /* POST */
  PUT = 4,
  DELETE = 8,
} route_methods;

/* Who may call a route when API keys are set (none set: everyone). */
typedef enum {
  KEYED,   /* a key is needed (any path not in the table too) */
  PUBLIC,  /* health and the page's files: probes and browsers */
  METRICS, /* GET /metrics: public unless metrics_require_key */
  ADMIN,   /* changes the repository: model_control explicit and, when
              keys are set, an admin key */
} route_access;

/* The body a route's POST or PUT takes (checked with the headers:
 * attn__route_admit); GET, HEAD and DELETE never take one. */
typedef enum {
  NO_BODY,      /* none: a GET, HEAD or preflight */
  SMALL_BODY,   /* a few keys of JSON: ATTN_MAX_REPO_BODY_BYTES */
  BODY,         /* tensors: max_body_bytes */
  SPEC_OR_FILE, /* a session's PUT: SMALL_BODY, or with Content-Type
                   application/octet-stream a session file: BODY */
} route_body;

/* One endpoint, the only place it is declared: its path (the metrics'
 * route template, and the line of GET /'s list, unless `label` names
 * another), methods, handler, who may call it, the body it takes, and
 * the kind of work it is (the metrics count inference apart).  A row
 * without `listed` is left out of GET /'s list (aliases, the page). */
typedef struct route {
  const char *path;
  match_kind match;
  unsigned methods; /* route_methods */
  handler *handle;
  route_access access;
  route_body body;
  attn__route_role role;
  bool listed;
  const char *label; /* the template when not path; NULL: path */
} route;

#define ANSWER ATTN_ROLE_ANSWER
#define INFER_V1 ATTN_ROLE_INFER_V1
#define INFER_V2 ATTN_ROLE_INFER_V2
#define REPO ATTN_ROLE_REPOSITORY
#define SESSION ATTN_ROLE_SESSION

/* Tried in order; the first whose path matches answers.  Inference
 * first: every such request walks the rows before its own (no other row
 * matches what these match). */
static const route routes[] = {
    {"/v1/attention", EXACT, POST, infer_v1, KEYED, BODY, INFER_V1, 1, 0},
    {"/v2/models/{model}/infer", EXACT, POST, model_infer, KEYED, BODY,
     INFER_V2, 1, 0},
    {"/v2/models/{model}/versions/{version}/infer", EXACT, POST, model_infer,
     KEYED, BODY, INFER_V2, 0, 0},
    {"/v1/sessions/{id}/attend", EXACT, POST, session_route, KEYED, BODY,
     SESSION, 1, 0},
    {"/v2/health/live", EXACT, GET, live, PUBLIC, NO_BODY, ANSWER, 1, 0},
    {"/v2/health/ready", EXACT, GET, ready, PUBLIC, NO_BODY, ANSWER, 1, 0},
    {"/v2", SLASH, GET, server_metadata, KEYED, NO_BODY, ANSWER, 1, 0},
    {"/", EXACT, GET, root, PUBLIC, NO_BODY, ANSWER, 0, 0},
    {"/ui", FOLDER, GET, web_file, PUBLIC, NO_BODY, ANSWER, 1, "/ui/{file}"},
    {"/v1/models", EXACT, GET, model_list, KEYED, NO_BODY, ANSWER, 1, 0},
    {"/metrics", EXACT, GET, metrics, METRICS, NO_BODY, ANSWER, 1, 0},
    {"/openapi.json", EXACT, GET, openapi, PUBLIC, NO_BODY, ANSWER, 1, 0},
    {"/v2/models/stats", EXACT, GET, all_stats, KEYED, NO_BODY, ANSWER, 1, 0},
    {"/v2/models/{model}", SLASH, GET, model_meta, KEYED, NO_BODY, ANSWER, 1,
     0},
    {"/v2/models/{model}/ready", EXACT, GET, model_readiness, KEYED, NO_BODY,
     ANSWER, 1, 0},
    {"/v2/models/{model}/stats", EXACT, GET, model_stats, KEYED, NO_BODY,
     ANSWER, 1, 0},
    {"/v2/models/{model}/versions/{version}", SLASH, GET, model_meta, KEYED,
     NO_BODY, ANSWER, 0, 0},
    {"/v2/models/{model}/versions/{version}/ready", EXACT, GET, model_readiness,
     KEYED, NO_BODY, ANSWER, 0, 0},
    {"/v2/models/{model}/versions/{version}/stats", EXACT, GET, model_stats,
     KEYED, NO_BODY, ANSWER, 0, 0},
    {"/v2/repository/index", EXACT, POST, repo_index, KEYED, SMALL_BODY, REPO,
     1, 0},
    {"/v2/repository/models/{model}/load", EXACT, POST, repo_load, ADMIN,
     SMALL_BODY, REPO, 1, 0},
    {"/v2/repository/models/{model}/unload", EXACT, POST, repo_unload, ADMIN,
     SMALL_BODY, REPO, 1, 0},
    {"/v1/sessions", EXACT, GET, session_route, KEYED, NO_BODY, SESSION, 1, 0},
    {"/v1/sessions/{id}", EXACT, GET | PUT | DELETE, session_route, KEYED,
     SPEC_OR_FILE, SESSION, 1, 0},
    {"/v1/sessions/{id}/kv", EXACT, GET, session_route, KEYED, NO_BODY, SESSION,
     1, 0},
    {"/v1/sessions/{id}/truncate", EXACT, POST, session_route, KEYED,
     SMALL_BODY, SESSION, 1, 0},
    {"/v1/sessions/{id}/fork", EXACT, POST, session_route, KEYED, SMALL_BODY,
     SESSION, 1, 0},
};

#undef ANSWER
#undef INFER_V1
#undef INFER_V2
#undef REPO
#undef SESSION

enum { N_ROUTES = sizeof routes / sizeof routes[0] };

/* GET /: the page (web.c) for a browser, else a short JSON index: every
 * listed row of the table (below), as "METHOD PATH". */
static attn__route_kind root(attn__srv_ctx *s, const attn__http_req *req,
                             attn__http_resp *resp, attn__infer_target *t) {
  if (attn__web_root(req, resp)) return ATTN_ROUTE_DONE;
  attn_buf b;
  attn_buf_init(&b, 0);
  attn_buf_printf(&b, "{\"name\":\"attnd\",\"version\":\"%s\",\"endpoints\":[",
                  ATTN_VERSION);
  static const char *const names[] = {"GET", "POST", "PUT", "DELETE"};
  for (int i = 0, shown = 0; i < attn__route_count(); i++)
    for (unsigned m = 0; m < 4 && routes[i].listed; m++)
      if (routes[i].methods & (1u << m))
        attn_buf_printf(&b, "%s\"%s %s%s\"", shown++ ? "," : "", names[m],
                        routes[i].path, routes[i].match == FOLDER ? "/" : "");
  attn_buf_puts(&b, "]}");
  attn__resp_json(resp, 200, &b);
  return ATTN_ROUTE_DONE;
}

/* Does path match the pattern p ("{name}": one non-empty segment)?  The
 * rest of path after it: "" when it all matched. */
static const char *match_pattern(const char *p, const char *path) {
  while (*p) {
    if (*p == '{') {
      size_t n = strcspn(path, "/");
      if (n == 0) return NULL;
      path += n;
      p = strchr(p, '}') + 1;
    } else if (*p++ != *path++) {
      return NULL;
    }
  }
  return path;
}

static int matches(const route *r, const char *path) {
  const char *rest = match_pattern(r->path, path);
  if (!rest) return 0;
  switch (r->match) {
    case EXACT:
      return *rest == '\0';
    case SLASH:
      return *rest == '\0' || (rest[0] == '/' && rest[1] == '\0');
    case FOLDER:
      return *rest == '\0' || *rest == '/';
  }
  return 0;
}

/* The row a path matches, as its index; N_ROUTES when none. */
static int route_of(const char *path) {
  int i = 0;
  while (i < N_ROUTES && !matches(&routes[i], path)) i++;
  return i;
}

/* attnd_http_requests_total's route label: each row's template, in the
 * table's order, then "other" (index N_ROUTES), made once. */
static const char *templates[N_ROUTES + 1];
static pthread_once_t templates_once = PTHREAD_ONCE_INIT;

static void make_templates(void) {
  for (int i = 0; i < N_ROUTES; i++)
    templates[i] = routes[i].label ? routes[i].label : routes[i].path;
  templates[N_ROUTES] = "other";
}

const char *const *attn__route_templates(size_t *n) {
  pthread_once(&templates_once, make_templates);
  *n = N_ROUTES + 1;
  return templates;
}

int attn__route_template(const char *path) {
  return route_of(path);
}

attn__route_role attn__route_role_of(int row) {
  return row >= 0 && row < N_ROUTES ? routes[row].role : ATTN_ROLE_ANSWER;
}

const char *attn__route_model(const char *path, int row, char *buf,
                              size_t cap) {
  if (row < 0 || row >= N_ROUTES || !path || cap == 0) return NULL;
  if (routes[row].role == ATTN_ROLE_INFER_V1) return "attention";
  const char *tpl = routes[row].path, *at = strstr(tpl, "{model}");
  /* the template's text before {model} is plain, so the path's is the
   * same length (it matched the row) */
  if (!at || strncmp(path, tpl, (size_t)(at - tpl)) != 0) return NULL;
  const char *seg = path + (at - tpl);
  size_t n = strcspn(seg, "/");
  if (!copy_segment(seg, n < cap ? n : cap - 1, buf, cap)) return NULL;
  return buf;
}

bool attn__route_row_ok(int i, char *why, size_t cap) {
  const route *r = &routes[i];
  const char *p = r->path;
  int open = 0;
  for (; *p; p++) { /* braces in pairs, not nested, never empty */
    if (*p == '{' && (open || p[1] == '}')) break;
    if (*p == '}' && !open) break;
    open = *p == '{' ? 1 : *p == '}' ? 0 : open;
  }
  const char *bad =
      !r->handle                        ? "no handler"
      : r->path[0] != '/' || *p || open ? "not a path template"
      : !r->methods || r->methods & ~(unsigned)(GET | POST | PUT | DELETE)
          ? "no methods, or one not known"
      : !(r->methods & (POST | PUT)) && r->body != NO_BODY
          ? "a route that takes a body without POST or PUT"
      : r->methods & (POST | PUT) && r->body == NO_BODY
          ? "a POST or PUT route without a body"
      : (r->role == ATTN_ROLE_INFER_V1 || r->role == ATTN_ROLE_INFER_V2) &&
              r->body != BODY
          ? "an inference route that takes no tensors"
      : r->label && r->label[0] != '/' ? "a label that is not a path"
                                       : NULL;
  if (bad) snprintf(why, cap, "row %d (%s): %s", i, r->path, bad);
  return bad == NULL;
}

int attn__route_count(void) {
  return N_ROUTES;
}

/* ---- access: API keys, CORS preflights ---------------------------------- */

/* Does a request to a route of this access need a key it did not bring?
 * Then *resp is the 401 (counted: attn__auth_refused).  *admin: the
 * request may change the repository as far as keys go (keys off, or an
 * admin key matched). */
static bool unauthorized(attn__srv_ctx *s, const attn__http_req *req,
                         route_access access, attn__http_resp *resp,
                         bool *admin) {
  *admin = true;
  if ((!s->auth && !s->admin_auth) || access == PUBLIC ||
      (access == METRICS && !s->cfg->metrics_require_key))
    return 0;
  /* both sets are asked, whatever the first answers (constant time) */
  attn__auth_result ra =
      s->admin_auth
          ? attn__auth_check(s->admin_auth, req->authorization, req->api_key)
          : ATTN_AUTH_WRONG;
  attn__auth_result r =
      s->auth ? attn__auth_check(s->auth, req->authorization, req->api_key)
              : ra;
  *admin = s->admin_auth && ra == ATTN_AUTH_OK;
  if (r == ATTN_AUTH_OK || *admin) return 0;
  attn__auth_refused(s->auth ? s->auth : s->admin_auth);
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

/* A route that changes the repository, asked by a client with a valid
 * key: 403 when model_control is "none", or when keys are on and the key
 * is not an admin key (counted as a refused key). */
static bool not_allowed(attn__srv_ctx *s, const attn__http_req *req, bool admin,
                        attn__http_resp *resp) {
  if (s->cfg->model_control == ATTN_MODEL_CONTROL_NONE) {
    attn__resp_error(resp, 403,
                     "model_control is \"none\": this server does not load "
                     "or unload models over HTTP (start it with "
                     "--model-control explicit; SIGHUP reloads the model "
                     "files)");
    return 1;
  }
  if (admin) return 0;
  attn__auth_refused(s->auth);
  attn_metrics_auth_failure(s->metrics);
  attn__resp_error(resp, 403,
                   "%s %s changes the model repository: it needs an admin "
                   "key (admin_api_keys_file / ATTND_ADMIN_API_KEY), not an "
                   "API key",
                   req->method, req->path);
  return 1;
}

/* A CORS preflight (OPTIONS with Origin and Access-Control-Request-Method)
 * when CORS is on: 204 for an allowed origin (http.c adds the origin's
 * headers), 403 for another.  0 when the request is not one. */
static int is_preflight(const attn__srv_ctx *s, const attn__http_req *req) {
  return req->origin && req->cors_method && method_is(req, "OPTIONS") &&
         *s->cfg->cors_allow_origins;
}

static bool preflight(attn__srv_ctx *s, const attn__http_req *req,
                      attn__http_resp *resp) {
  if (!is_preflight(s, req)) return 0;
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

/* The request's method as a route_methods bit (0: none of them). */
static unsigned method_bit(const attn__http_req *req) {
  return is_get(req)                ? GET
         : method_is(req, "POST")   ? POST
         : method_is(req, "PUT")    ? PUT
         : method_is(req, "DELETE") ? DELETE
                                    : 0;
}

/* The Allow header of a row's methods. */
static const char *allow_of(unsigned methods) {
  switch (methods) {
    case GET:
      return "GET, HEAD";
    case POST:
      return "POST";
    case GET | PUT | DELETE:
      return "GET, HEAD, PUT, DELETE";
  }
  return "GET, HEAD, POST, PUT, DELETE"; /* a row of another mix */
}

/* The key, then the route's methods, then (load, unload) model_control
 * and the admin key: 0, or 1 with *resp the 401, 405 or 403.
 * The 404 of a path that no row matches (r NULL) is the caller's; such a
 * path needs a key as the keyed routes do. */
static bool refused(attn__srv_ctx *s, const attn__http_req *req, const route *r,
                    attn__http_resp *resp) {
  bool admin;
  if (unauthorized(s, req, r ? r->access : KEYED, resp, &admin)) return 1;
  if (!r) return 0;
  if (!(method_bit(req) & r->methods)) {
    wrong_method(resp, req, allow_of(r->methods));
    return 1;
  }
  return r->access == ADMIN && not_allowed(s, req, admin, resp);
}

static void no_route(const attn__http_req *req, attn__http_resp *resp) {
  attn__resp_error(resp, 404, "no route for %s %s (GET / lists the endpoints)",
                   req->method, req->path);
}

/* The most body bytes a route takes. */
static size_t body_limit(const attn__srv_ctx *s, route_body b) {
  size_t most = (size_t)s->cfg->max_body_bytes;
  return b == BODY ? most
         : b == SMALL_BODY
             ? (most < ATTN_MAX_REPO_BODY_BYTES ? most
                                                : ATTN_MAX_REPO_BODY_BYTES)
             : 0;
}

void attn__route_resolve(const attn__srv_ctx *s, const char *path,
                         attn__admission *a) {
  a->route = route_of(path);
  a->model = 0;
  a->max_body = 0;
  if (a->route < N_ROUTES && routes[a->route].role == ATTN_ROLE_INFER_V2) {
    const char *m = path + strlen("/v2/models/");
    a->model = attn_registry_slot(s->models, m, strcspn(m, "/")) + 1;
  }
}

attn__route_kind attn__route_admit(attn__srv_ctx *s, const attn__http_req *req,
                                   uint64_t body, attn__http_resp *resp,
                                   attn__admission *a) {
  attn__route_resolve(s, req->path, a);
  const route *r = a->route < N_ROUTES ? &routes[a->route] : NULL;
  route_body kind = r && method_bit(req) & (POST | PUT) ? r->body : NO_BODY;
  if (kind == SPEC_OR_FILE) kind = is_octet_stream(req) ? BODY : SMALL_BODY;
  if (is_preflight(s, req)) /* answered at the end; never a body */
    kind = NO_BODY;
  else if (refused(s, req, r, resp))
    return ATTN_ROUTE_DONE;
  a->max_body = body_limit(s, kind);
  if (body == 0) return ATTN_ROUTE_DEFER; /* the rest can wait for the end */
  if (!r) {
    no_route(req, resp);
    return ATTN_ROUTE_DONE;
  }
  if (kind == NO_BODY) {
    attn__resp_error(resp, 413, "%s %s takes no request body (this one %s)",
                     req->method, req->path,
                     body == UINT64_MAX ? "is sent chunked" : "has one");
    return ATTN_ROUTE_DONE;
  }
  if (kind == SMALL_BODY && body != UINT64_MAX &&
      body > ATTN_MAX_REPO_BODY_BYTES) {
    attn__resp_error(resp, 413,
                     "the body of %s is %llu bytes; this route takes at most "
                     "%zu (Triton's few keys of JSON)",
                     req->path, (unsigned long long)body,
                     ATTN_MAX_REPO_BODY_BYTES);
    return ATTN_ROUTE_DONE;
  }
  return ATTN_ROUTE_DEFER;
}

attn__route_kind attn__route(attn__srv_ctx *s, const attn__http_req *req,
                             attn__http_resp *resp, attn__infer_target *t) {
  if (preflight(s, req, resp)) return ATTN_ROUTE_DONE;
  int i = req->admitted ? req->route : route_of(req->path);
  const route *r = i >= 0 && i < N_ROUTES ? &routes[i] : NULL;
  if (!req->admitted && refused(s, req, r, resp)) return ATTN_ROUTE_DONE;
  if (r) return r->handle(s, req, resp, t);
  no_route(req, resp);
  return ATTN_ROUTE_DONE;
}
