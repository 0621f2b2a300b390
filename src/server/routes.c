/* routes.c - which handler answers which request, without sockets.
 *
 * DESIGN
 * attn__route maps a plain attn_http_req to a plain attn_http_resp.  Health,
 * metadata and every refusal (404, 405, 413, 415, 503 while draining) are
 * answered here, on the HTTP thread, from read-only state; inference is
 * handed back as a job for http.c to queue.  Nothing here blocks or touches
 * the engine.  Routes:
 *   GET  /v2/health/live, /v2/health/ready, /v2
 *   GET  /v2/models/{m}[/versions/{v}], .../ready
 *   POST /v2/models/{m}[/versions/{v}]/infer
 *   POST /v1/attention
 *   GET  /v1/models  (a list, for people with curl)
 *   GET  /           (a short index of the above; the page, web.c, for a
 *                     client whose Accept names text/html)
 *   GET  /ui/{file}   (the page's files, web.c)
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn/buf.h"
#include "attn/codec.h"
#include "attn_version.h"
#include "internal.h"
#include "web.h"

int attn__http_status(attn_status s) {
  switch (s) {
    case ATTN_OK:
      return 200;
    case ATTN_EINVAL:
    case ATTN_ESHAPE:
    case ATTN_ENONFINITE:
    case ATTN_EPARSE:
    case ATTN_EUNSUPPORTED:
      return 400;
    case ATTN_ENOTFOUND:
      return 404;
    case ATTN_ETOOBIG:
      return 413;
    case ATTN_EBUSY:
    case ATTN_ESHUTDOWN:
    case ATTN_ETIMEDOUT:
    case ATTN_ENOMEM:
      return 503;
    case ATTN_EIO:
    case ATTN_EINTERNAL:
      break;
  }
  return 500;
}

void attn__resp_json(attn_http_resp *resp, int status, attn_buf *buf) {
  resp->status = status;
  resp->content_type = "application/json";
  resp->body = attn_buf_steal(buf, &resp->len);
}

void attn__resp_error(attn_http_resp *resp, int status, const char *fmt, ...) {
  char msg[1024];
  va_list ap;
  attn_buf b;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  attn_buf_init(&b, 0);
  if (attn_error_json(&b, msg) != ATTN_OK) {
    attn_buf_free(&b);
    resp->status = status;
    resp->content_type = "application/json";
    resp->body = NULL;
    resp->len = 0;
    return;
  }
  attn__resp_json(resp, status, &b);
  if (status == 503 && resp->retry_after_s == 0) resp->retry_after_s = 1;
}

static void resp_static(attn_http_resp *resp, int status, const char *json) {
  attn_buf b;
  attn_buf_init(&b, 0);
  attn_buf_puts(&b, json);
  attn__resp_json(resp, status, &b);
}

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

static void live(attn_srv_ctx *s, attn_http_resp *resp) {
  (void)s;
  resp_static(resp, 200, "{\"live\":true}");
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

static void ready(attn_srv_ctx *s, attn_http_resp *resp) {
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
    resp_static(resp, 200, "{\"ready\":true}");
  }
}

static void server_metadata(attn_http_resp *resp) {
  static const char *const ext[] = {"binary_tensor_data"};
  attn_buf b;
  attn_buf_init(&b, 0);
  attn_v2_encode_server_metadata(&b, "attnd", ATTN_VERSION, ext, 1);
  attn__resp_json(resp, 200, &b);
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
    mi[i] = (attn_tensor_meta){in[i].name, attn_dtype_name(in[i].datatype),
                               in[i].rank, {0}, in[i].optional};
    memcpy(mi[i].shape, in[i].shape, sizeof mi[i].shape);
  }
  for (size_t i = 0; i < no; i++) {
    mo[i] = (attn_tensor_meta){out[i].name, attn_dtype_name(out[i].datatype),
                               out[i].rank, {0}, out[i].optional};
    memcpy(mo[i].shape, out[i].shape, sizeof mo[i].shape);
  }
  attn_model_meta meta = {attn_model_name(m), &ver, 1, "attnd_attention",
                          mi, ni, mo, no};
  attn_buf b;
  attn_buf_init(&b, 0);
  if (attn_v2_encode_model_metadata(&b, &meta) != ATTN_OK) {
    attn_buf_free(&b);
    attn__resp_error(resp, 500, "cannot encode metadata");
    return;
  }
  attn__resp_json(resp, 200, &b);
}

static void model_list(attn_srv_ctx *s, attn_http_resp *resp) {
  attn_buf b;
  attn_buf_init(&b, 0);
  attn_buf_puts(&b, "{\"models\":[");
  for (size_t i = 0; i < attn_registry_count(s->models); i++) {
    const attn_model *m = attn_registry_at(s->models, i);
    attn_model_info info;
    attn_model_info_get(m, &info);
    if (i) attn_buf_puts(&b, ",");
    attn_buf_puts(&b, "{\"name\":");
    attn_buf_json_string(&b, info.name);
    attn_buf_puts(&b, ",\"version\":");
    attn_buf_json_string(&b, info.version ? info.version : "1");
    attn_buf_puts(&b, ",\"kind\":");
    attn_buf_json_string(&b, info.kind ? info.kind : "");
    if (info.embed_dim > 0)
      attn_buf_printf(&b,
                      ",\"embed_dim\":%lld,\"num_heads\":%lld,"
                      "\"num_kv_heads\":%lld,\"kdim\":%lld,\"vdim\":%lld",
                      (long long)info.embed_dim, (long long)info.num_heads,
                      (long long)info.num_kv_heads, (long long)info.kdim,
                      (long long)info.vdim);
    if (info.description) {
      attn_buf_puts(&b, ",\"description\":");
      attn_buf_json_string(&b, info.description);
    }
    attn_buf_puts(&b, "}");
  }
  attn_buf_puts(&b, "]}");
  attn__resp_json(resp, 200, &b);
}

static void index_page(attn_http_resp *resp) {
  attn_buf b;
  attn_buf_init(&b, 0);
  attn_buf_printf(&b,
                  "{\"name\":\"attnd\",\"version\":\"%s\",\"endpoints\":["
                  "\"POST /v1/attention\",\"GET /v1/models\","
                  "\"GET /v2\",\"GET /v2/health/live\","
                  "\"GET /v2/health/ready\","
                  "\"GET /v2/models/{model}\",\"GET /v2/models/{model}/ready\","
                  "\"POST /v2/models/{model}/infer\",\"GET /ui/\"]}",
                  ATTN_VERSION);
  attn__resp_json(resp, 200, &b);
}

/* Split "/v2/models/{m}[/versions/{v}][/tail]" in place-free fashion.
 * Returns 0 when the path does not have that form. */
typedef struct model_path {
  char model[ATTN_MAX_NAME_LEN + 1];
  char version[ATTN_MAX_NAME_LEN + 1];
  int has_version;
  const char *tail; /* "", "/ready", "/infer", or anything else */
} model_path;

static int copy_segment(const char *p, size_t n, char *out, size_t cap) {
  if (n == 0 || n >= cap) return 0;
  memcpy(out, p, n);
  out[n] = '\0';
  return 1;
}

static int parse_model_path(const char *path, model_path *mp) {
  const char *p = path + strlen("/v2/models/");
  size_t n = strcspn(p, "/");
  memset(mp, 0, sizeof *mp);
  if (!copy_segment(p, n, mp->model, sizeof mp->model)) return 0;
  p += n;
  if (strncmp(p, "/versions/", 10) == 0) {
    p += 10;
    n = strcspn(p, "/");
    if (!copy_segment(p, n, mp->version, sizeof mp->version)) return 0;
    mp->has_version = 1;
    p += n;
  }
  mp->tail = p;
  return 1;
}

static attn_infer_job *new_job(attn_srv_ctx *s, const attn_http_req *req,
                               attn_job_proto proto, attn_encoding enc,
                               const model_path *mp) {
  attn_infer_job *j = calloc(1, sizeof *j);
  if (!j) return NULL;
  j->srv = s;
  j->proto = proto;
  j->body = req->body;
  j->body_len = req->body_len;
  j->encoding = enc;
  j->start_ns = req->start_ns;
  if (mp) {
    j->model = strdup(mp->model);
    j->version = mp->has_version ? strdup(mp->version) : NULL;
    if (!j->model || (mp->has_version && !j->version)) {
      attn__infer_job_free(j);
      return NULL;
    }
  }
  return j;
}

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
    return 0;
  }
  if (req->body_len == 0) {
    attn__resp_error(resp, 400, "request body is empty");
    return 0;
  }
  return 1;
}

/* Inference-Header-Content-Length: digits, with the optional whitespace
 * (space, tab) that HTTP allows around a field value (RFC 9110 5.5). */
static int parse_header_len(const char *s, size_t body_len, size_t *out,
                            attn_http_resp *resp) {
  char *end;
  unsigned long long v;
  *out = 0;
  if (!s) return 1;
  const char *p = s;
  while (*p == ' ' || *p == '\t') p++;
  if (*p < '0' || *p > '9') goto bad;
  v = strtoull(p, &end, 10);
  while (*end == ' ' || *end == '\t') end++;
  if (*end != '\0') goto bad;
  if (v == 0 || v > body_len) {
    attn__resp_error(resp, 400,
                     "Inference-Header-Content-Length %s is outside (0, %zu] "
                     "(the body length)",
                     s, body_len);
    return 0;
  }
  *out = (size_t)v;
  return 1;
bad:
  attn__resp_error(resp, 400,
                   "Inference-Header-Content-Length '%s' is not a number", s);
  return 0;
}

attn_route_kind attn__route(attn_srv_ctx *s, const attn_http_req *req,
                            attn_http_resp *resp, attn_infer_job **job) {
  const char *path = req->path;
  *job = NULL;
  if (strcmp(path, "/v2/health/live") == 0) {
    if (!is_get(req)) return wrong_method(resp, req, "GET, HEAD");
    live(s, resp);
    return ATTN_ROUTE_DONE;
  }
  if (strcmp(path, "/v2/health/ready") == 0) {
    if (!is_get(req)) return wrong_method(resp, req, "GET, HEAD");
    ready(s, resp);
    return ATTN_ROUTE_DONE;
  }
  if (strcmp(path, "/v2") == 0 || strcmp(path, "/v2/") == 0) {
    if (!is_get(req)) return wrong_method(resp, req, "GET, HEAD");
    server_metadata(resp);
    return ATTN_ROUTE_DONE;
  }
  if (strcmp(path, "/") == 0) {
    if (!is_get(req)) return wrong_method(resp, req, "GET, HEAD");
    if (!attn__web_root(req, resp)) index_page(resp);
    return ATTN_ROUTE_DONE;
  }
  if (strncmp(path, "/ui", 3) == 0 && (path[3] == '\0' || path[3] == '/')) {
    if (!is_get(req)) return wrong_method(resp, req, "GET, HEAD");
    if (!attn__web_file(req, resp))
      attn__resp_error(resp, 404, "no file %s (the page is at / and /ui/)",
                       path);
    return ATTN_ROUTE_DONE;
  }
  if (strcmp(path, "/v1/models") == 0) {
    if (!is_get(req)) return wrong_method(resp, req, "GET, HEAD");
    model_list(s, resp);
    return ATTN_ROUTE_DONE;
  }
  if (strcmp(path, "/v1/attention") == 0) {
    if (!method_is(req, "POST")) return wrong_method(resp, req, "POST");
    attn_encoding enc;
    if (!infer_preconditions(s, req, resp, 0, &enc)) return ATTN_ROUTE_DONE;
    *job = new_job(s, req, ATTN_JOB_V1, enc, NULL);
    if (!*job) {
      attn__resp_error(resp, 503, "out of memory");
      return ATTN_ROUTE_DONE;
    }
    return ATTN_ROUTE_DEFER;
  }
  if (strncmp(path, "/v2/models/", 11) == 0) {
    model_path mp;
    if (!parse_model_path(path, &mp)) {
      attn__resp_error(resp, 404, "no route for %s", path);
      return ATTN_ROUTE_DONE;
    }
    const char *tail = mp.tail;
    int is_infer = strcmp(tail, "/infer") == 0;
    if (!is_infer && strcmp(tail, "/ready") != 0 && strcmp(tail, "") != 0 &&
        strcmp(tail, "/") != 0) {
      attn__resp_error(resp, 404, "no route for %s", path);
      return ATTN_ROUTE_DONE;
    }
    if (is_infer && !method_is(req, "POST"))
      return wrong_method(resp, req, "POST");
    if (!is_infer && !is_get(req))
      return wrong_method(resp, req, "GET, HEAD");
    const attn_model *m = attn_registry_find(
        s->models, mp.model, mp.has_version ? mp.version : NULL);
    if (!m) {
      if (mp.has_version && attn_registry_find(s->models, mp.model, NULL))
        attn__resp_error(resp, 404, "model '%s' has no version '%s'",
                         mp.model, mp.version);
      else
        attn__resp_error(resp, 404,
                         "unknown model '%s' (GET /v1/models lists them)",
                         mp.model);
      return ATTN_ROUTE_DONE;
    }
    if (strcmp(tail, "/ready") == 0) {
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
      return ATTN_ROUTE_DONE;
    }
    if (!is_infer) {
      model_metadata(m, resp);
      return ATTN_ROUTE_DONE;
    }
    /* A compressed body's header length counts inflated bytes: only the
     * limit is known here; the worker checks it against the body. */
    attn_encoding enc;
    size_t hl;
    if (!infer_preconditions(s, req, resp, 1, &enc) ||
        !parse_header_len(req->header_len,
                          enc == ATTN_ENC_IDENTITY
                              ? req->body_len
                              : (size_t)s->cfg->max_body_bytes,
                          &hl, resp))
      return ATTN_ROUTE_DONE;
    *job = new_job(s, req, ATTN_JOB_V2, enc, &mp);
    if (!*job) {
      attn__resp_error(resp, 503, "out of memory");
      return ATTN_ROUTE_DONE;
    }
    (*job)->header_len = hl;
    return ATTN_ROUTE_DEFER;
  }
  attn__resp_error(resp, 404, "no route for %s %s (GET / lists the endpoints)",
                   req->method, path);
  return ATTN_ROUTE_DONE;
}
