/* test_routes.c - routes and the infer job without sockets.
 *
 * attn__route maps a plain request to a plain response; inference comes back
 * as a target, which the test hands to attn__job_submit (as http.c does),
 * pops the job from the queue itself and runs it on this thread, catching
 * the completion. */
#include <stdlib.h>
#include <string.h>

#include "../src/server/internal.h"
#include "../src/server/routes.h"
#include "../src/server/jobs.h"
#include "../src/server/http.h"
#include "../src/server/auth.h"
#include "attn/config.h"
#include "attn/model.h"
#include "attn/queue.h"
#include "unit.h"

static attn_config cfg;
static attn_registry *reg;
static attn_queue *q;
static attn__srv_ctx srv;

/* The completion of every job the tests queue: keeps the last answer. */
static attn__http_resp got;
static int completions;

static void capture(void *arg, attn__http_resp *resp) {
  (void)arg;
  got = *resp;
  completions++;
}

static void setup(void) {
  attn_config_defaults(&cfg);
  cfg.queue_capacity = 2;
  ck_assert_int_eq(attn_registry_create(NULL, &reg, NULL), ATTN_OK);
  ck_assert_int_eq(attn_queue_create(2, &q), ATTN_OK);
  memset(&srv, 0, sizeof srv);
  srv.cfg = &cfg;
  srv.models = reg;
  srv.queue = q;
  atomic_init(&srv.unready, false);
  atomic_init(&srv.draining, false);
  atomic_init(&srv.next_id, 1);
}

static void teardown(void) {
  attn_job *j;
  attn_queue_close(q);
  while (attn_queue_pop(q, &j) == ATTN_OK) { /* answered 503, and freed */
    j->expire(j, 0);
    free(got.body);
  }
  attn_queue_destroy(q);
  attn_registry_destroy(reg);
}

static attn__http_resp route(const char *method, const char *path,
                             const char *ctype, const char *body,
                             attn__route_kind want) {
  attn__http_req req = {.method = method,
                        .path = path,
                        .content_type = ctype,
                        .body = body ? body : "",
                        .body_len = body ? strlen(body) : 0};
  attn__http_resp resp = {0};
  attn__infer_target t;
  attn__route_kind k = attn__route(&srv, &req, &resp, &t);
  ck_assert_int_eq(k, want);
  return resp;
}

#define EXPECT_BODY(resp, substr)                            \
  do {                                                       \
    ck_assert_msg((resp).body &&strstr((resp).body, substr), \
                  "body '%.*s' lacks '%s'", (int)(resp).len, \
                  (resp).body ? (resp).body : "", substr);   \
    free((resp).body);                                       \
  } while (0)

START_TEST(test_health_and_metadata) {
  attn__http_resp r =
      route("GET", "/v2/health/live", NULL, NULL, ATTN_ROUTE_DONE);
  ck_assert_int_eq(r.status, 200);
  EXPECT_BODY(r, "\"live\":true");
  r = route("GET", "/v2/health/ready", NULL, NULL, ATTN_ROUTE_DONE);
  ck_assert_int_eq(r.status, 200);
  EXPECT_BODY(r, "\"ready\":true");
  r = route("GET", "/v2", NULL, NULL, ATTN_ROUTE_DONE);
  EXPECT_BODY(r, "binary_tensor_data");
  r = route("GET", "/v2/models/sdpa", NULL, NULL, ATTN_ROUTE_DONE);
  ck_assert_int_eq(r.status, 200);
  EXPECT_BODY(r, "\"name\":\"query\"");
  r = route("GET", "/v2/models/mha/versions/1", NULL, NULL, ATTN_ROUTE_DONE);
  ck_assert_int_eq(r.status, 200);
  EXPECT_BODY(r, "\"w_q\"");
  r = route("GET", "/v2/models/sdpa/ready", NULL, NULL, ATTN_ROUTE_DONE);
  ck_assert_int_eq(r.status, 200);
  EXPECT_BODY(r, "\"ready\":true");
  r = route("GET", "/v1/models", NULL, NULL, ATTN_ROUTE_DONE);
  EXPECT_BODY(r, "\"mha\"");
}
END_TEST

START_TEST(test_errors) {
  attn__http_resp r = route("GET", "/nope", NULL, NULL, ATTN_ROUTE_DONE);
  ck_assert_int_eq(r.status, 404);
  EXPECT_BODY(r, "no route for GET /nope");
  r = route("GET", "/v2/models/nope", NULL, NULL, ATTN_ROUTE_DONE);
  ck_assert_int_eq(r.status, 404);
  EXPECT_BODY(r, "unknown model 'nope'");
  r = route("GET", "/v2/models/sdpa/versions/7", NULL, NULL, ATTN_ROUTE_DONE);
  ck_assert_int_eq(r.status, 404);
  EXPECT_BODY(r, "no version '7'");
  r = route("POST", "/v2/health/live", NULL, "{}", ATTN_ROUTE_DONE);
  ck_assert_int_eq(r.status, 405);
  ck_assert_str_eq(r.allow, "GET, HEAD");
  EXPECT_BODY(r, "not allowed");
  r = route("GET", "/v1/attention", NULL, NULL, ATTN_ROUTE_DONE);
  ck_assert_int_eq(r.status, 405);
  ck_assert_str_eq(r.allow, "POST");
  free(r.body);
  r = route("POST", "/v1/attention", "text/html", "{}", ATTN_ROUTE_DONE);
  ck_assert_int_eq(r.status, 415);
  EXPECT_BODY(r, "text/html");
  r = route("POST", "/v1/attention", "application/octet-stream", "{}",
            ATTN_ROUTE_DONE);
  ck_assert_int_eq(r.status, 415);
  free(r.body);
  r = route("POST", "/v1/attention", "application/json", "", ATTN_ROUTE_DONE);
  ck_assert_int_eq(r.status, 400);
  EXPECT_BODY(r, "empty");
  r = route("POST", "/v2/models/nope/infer", "application/json", "{}",
            ATTN_ROUTE_DONE);
  ck_assert_int_eq(r.status, 404);
  free(r.body);
}
END_TEST

/* Inference-Header-Content-Length as http.c hands it over: the text, read
 * once with attn__header_number. */
static void set_header_len(attn__http_req *req, const char *text) {
  req->header_len_text = text;
  req->header_len = 0;
  req->header_len_ok = attn__header_number(text, &req->header_len) != 0;
}

START_TEST(test_encoding_and_header_len) {
  attn__http_req req = {.method = "POST",
                        .path = "/v2/models/sdpa/infer",
                        .content_encoding = "br",
                        .body = "{}",
                        .body_len = 2};
  attn__http_resp r = {0};
  attn__infer_target t;
  ck_assert_int_eq(attn__route(&srv, &req, &r, &t), ATTN_ROUTE_DONE);
  ck_assert_int_eq(r.status, 415);
  EXPECT_BODY(r, "'br'");
  /* compressed: queued with its encoding; the header length is checked
   * against the inflated body by the worker, here only against the limit */
  static const struct {
    const char *ce;
    attn__encoding e;
  } ok[] = {{"gzip", ATTN_ENC_GZIP},
            {" X-GZIP\t", ATTN_ENC_GZIP},
            {"deflate", ATTN_ENC_DEFLATE},
            {"identity", ATTN_ENC_IDENTITY}};
  for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
    memset(&r, 0, sizeof r);
    req.content_encoding = ok[i].ce;
    set_header_len(&req, ok[i].e == ATTN_ENC_IDENTITY ? "2" : "3");
    ck_assert_int_eq(attn__route(&srv, &req, &r, &t), ATTN_ROUTE_DEFER);
    ck_assert_int_eq(t.proto, ATTN_JOB_V2);
    ck_assert_str_eq(t.model, "sdpa");
    ck_assert_str_eq(t.version, "");
    ck_assert_int_eq(t.encoding, ok[i].e);
    ck_assert_uint_eq(t.header_len, ok[i].e == ATTN_ENC_IDENTITY ? 2 : 3);
  }
  memset(&r, 0, sizeof r);
  req.content_encoding = "gzip";
  set_header_len(&req, "99999999999");
  ck_assert_int_eq(attn__route(&srv, &req, &r, &t), ATTN_ROUTE_DONE);
  ck_assert_int_eq(r.status, 400);
  EXPECT_BODY(r, "Inference-Header-Content-Length");
  const char *bad[] = {
      "0", "3", "x1", "-1", "", " ", "1 2", "2\n", "99999999999999999999999"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    memset(&r, 0, sizeof r);
    req.content_encoding = NULL;
    set_header_len(&req, bad[i]);
    ck_assert_int_eq(attn__route(&srv, &req, &r, &t), ATTN_ROUTE_DONE);
    ck_assert_int_eq(r.status, 400);
    EXPECT_BODY(r, "Inference-Header-Content-Length");
  }
  /* optional whitespace around the value is HTTP's, not the number's */
  const char *ok_hl[] = {"2", "2 ", " 2", "\t2\t "};
  for (size_t i = 0; i < sizeof ok_hl / sizeof ok_hl[0]; i++) {
    memset(&r, 0, sizeof r);
    set_header_len(&req, ok_hl[i]);
    ck_assert_int_eq(attn__route(&srv, &req, &r, &t), ATTN_ROUTE_DEFER);
    ck_assert_uint_eq(t.header_len, 2);
  }
  /* a version in the URL comes with the target */
  memset(&r, 0, sizeof r);
  req.path = "/v2/models/sdpa/versions/1/infer";
  set_header_len(&req, NULL);
  ck_assert_int_eq(attn__route(&srv, &req, &r, &t), ATTN_ROUTE_DEFER);
  ck_assert_str_eq(t.version, "1");
  ck_assert_uint_eq(t.header_len, 0);
}
END_TEST

START_TEST(test_draining) {
  atomic_store(&srv.draining, true);
  attn__http_resp r =
      route("GET", "/v2/health/ready", NULL, NULL, ATTN_ROUTE_DONE);
  ck_assert_int_eq(r.status, 503);
  ck_assert_int_gt(r.retry_after_s, 0);
  free(r.body);
  r = route("GET", "/v2/health/live", NULL, NULL, ATTN_ROUTE_DONE);
  ck_assert_int_eq(r.status, 200);
  free(r.body);
  r = route("POST", "/v1/attention", NULL, "{\"query\": [[1]]}",
            ATTN_ROUTE_DONE);
  ck_assert_int_eq(r.status, 503);
  EXPECT_BODY(r, "shutting down");
}
END_TEST

/* shutdown_delay_ms: readiness (the server's and each model's) says 503
 * and why; liveness, metadata and inference go on as before. */
START_TEST(test_unready_still_serves) {
  atomic_store(&srv.unready, true);
  attn__http_resp r =
      route("GET", "/v2/health/ready", NULL, NULL, ATTN_ROUTE_DONE);
  ck_assert_int_eq(r.status, 503);
  ck_assert_int_gt(r.retry_after_s, 0);
  EXPECT_BODY(r, "\"ready\":false,\"error\":\"server is shutting down");
  r = route("GET", "/v2/models/sdpa/ready", NULL, NULL, ATTN_ROUTE_DONE);
  ck_assert_int_eq(r.status, 503);
  ck_assert_int_gt(r.retry_after_s, 0); /* fuzz_routes found it missing */
  EXPECT_BODY(r, "{\"name\":\"sdpa\",\"ready\":false,\"error\":");
  r = route("GET", "/v2/health/live", NULL, NULL, ATTN_ROUTE_DONE);
  ck_assert_int_eq(r.status, 200);
  free(r.body);
  r = route("GET", "/v2/models/sdpa", NULL, NULL, ATTN_ROUTE_DONE);
  ck_assert_int_eq(r.status, 200);
  free(r.body);
  route("POST", "/v1/attention", NULL, "{\"query\": [[1]]}", ATTN_ROUTE_DEFER);
  /* then the drain: readiness says so */
  atomic_store(&srv.draining, true);
  r = route("GET", "/v2/health/ready", NULL, NULL, ATTN_ROUTE_DONE);
  ck_assert_int_eq(r.status, 503);
  EXPECT_BODY(r, "server is draining");
}
END_TEST

/* ---- the job, run on this thread ---------------------------------------- */

static attn__http_resp run_one(const char *path, const char *body,
                               size_t body_len, const char *header_len) {
  attn__http_req req = {.method = "POST",
                        .path = path,
                        .content_type = "application/json",
                        .body = body,
                        .body_len = body_len};
  attn__http_resp r = {0};
  attn__infer_target t;
  attn_job *j;
  set_header_len(&req, header_len);
  ck_assert_int_eq(attn__route(&srv, &req, &r, &t), ATTN_ROUTE_DEFER);
  completions = 0;
  ck_assert(attn__job_submit(&srv, &req, &t, capture, NULL, NULL, &r));
  ck_assert_int_eq(attn_queue_pop(q, &j), ATTN_OK);
  j->run(j, 0, 1000);
  ck_assert_int_eq(completions, 1);
  return got;
}

START_TEST(test_infer_v1_and_v2) {
  const char *v1 = "{\"query\": [[1, 0], [0, 1]], \"causal\": true}";
  attn__http_resp r = run_one("/v1/attention", v1, strlen(v1), NULL);
  ck_assert_int_eq(r.status, 200);
  ck_assert_ptr_nonnull(strstr(r.body, "\"output\":[[1,0],"));
  ck_assert_ptr_nonnull(strstr(r.body, "\"attn_weights\""));
  free(r.body);
  const char *v2 =
      "{\"id\":\"x7\",\"inputs\":["
      "{\"name\":\"query\",\"shape\":[1,2],\"datatype\":\"FP32\",\"data\":[1,0]"
      "},"
      "{\"name\":\"key\",\"shape\":[1,2],\"datatype\":\"FP32\",\"data\":[0,1]},"
      "{\"name\":\"value\",\"shape\":[1,2],\"datatype\":\"FP32\",\"data\":[3,4]"
      "}],"
      "\"outputs\":[{\"name\":\"attn_output\"}]}";
  r = run_one("/v2/models/sdpa/infer", v2, strlen(v2), NULL);
  ck_assert_int_eq(r.status, 200);
  ck_assert_ptr_nonnull(strstr(r.body, "\"id\":\"x7\""));
  ck_assert_ptr_nonnull(strstr(r.body, "\"data\":[3,4]"));
  ck_assert_ptr_null(strstr(r.body, "attn_weights"));
  ck_assert_str_eq(r.request_id, "x7");
  free(r.body);
  /* a mistake comes back as a 400 naming it */
  const char *bad = "{\"query\": [[1, 0]], \"causl\": true}";
  r = run_one("/v1/attention", bad, strlen(bad), NULL);
  ck_assert_int_eq(r.status, 400);
  ck_assert_ptr_nonnull(strstr(r.body, "causl"));
  free(r.body);
  /* model_name in the body must agree with the URL */
  const char *mis =
      "{\"model_name\":\"mha\",\"inputs\":["
      "{\"name\":\"query\",\"shape\":[1,2],\"datatype\":\"FP32\",\"data\":[1,0]"
      "}]}";
  r = run_one("/v2/models/sdpa/infer", mis, strlen(mis), NULL);
  ck_assert_int_eq(r.status, 400);
  ck_assert_ptr_nonnull(strstr(r.body, "does not match"));
  free(r.body);
}
END_TEST

/* A POST /v1/attention of body. */
static attn__http_req v1_post(const char *body) {
  return (attn__http_req){.method = "POST",
                          .path = "/v1/attention",
                          .body = body,
                          .body_len = strlen(body)};
}

START_TEST(test_queue_full_and_expiry) {
  attn__http_req req = v1_post("{\"query\": [[1]]}");
  attn__infer_target t;
  attn__http_resp r = {0};
  for (int i = 0; i < 2; i++) {
    ck_assert_int_eq(attn__route(&srv, &req, &r, &t), ATTN_ROUTE_DEFER);
    ck_assert(attn__job_submit(&srv, &req, &t, capture, NULL, NULL, &r));
  }
  ck_assert_int_eq(attn__route(&srv, &req, &r, &t), ATTN_ROUTE_DEFER);
  ck_assert(!attn__job_submit(&srv, &req, &t, capture, NULL, NULL, &r));
  /* capacity 2: full */
  ck_assert_int_eq(r.status, 503);
  ck_assert_int_eq(r.retry_after_s, 1);
  EXPECT_BODY(r, "queue full");
  attn_job *j;
  ck_assert_int_eq(attn_queue_pop(q, &j), ATTN_OK);
  completions = 0;
  j->expire(j, 20u * 1000 * 1000 * 1000);
  ck_assert_int_eq(completions, 1);
  ck_assert_int_eq(got.status, 503);
  EXPECT_BODY(got, "waited");
}
END_TEST

static int asked_gone;
static bool client_left(void *arg) {
  asked_gone++;
  return *(const bool *)arg;
}

/* A job whose client has left when a worker takes it is dropped before
 * its kind runs it: a 499 with no body, nothing computed; one whose
 * client is there runs as ever. */
START_TEST(test_gone_client_dropped) {
  attn__http_req req = v1_post("{\"query\": [[1, 0]]}");
  for (int left = 0; left < 2; left++) {
    bool gone = left;
    attn__infer_target t;
    attn__http_resp r = {0};
    attn_job *j;
    ck_assert_int_eq(attn__route(&srv, &req, &r, &t), ATTN_ROUTE_DEFER);
    ck_assert(
        attn__job_submit(&srv, &req, &t, capture, client_left, &gone, &r));
    ck_assert_int_eq(attn_queue_pop(q, &j), ATTN_OK);
    completions = asked_gone = 0;
    j->run(j, 0, 7000000);
    ck_assert_int_eq(asked_gone, 1);
    ck_assert_int_eq(completions, 1);
    if (left) {
      ck_assert_int_eq(got.status, ATTN_DROPPED_STATUS);
      ck_assert_ptr_null(got.body);
      ck_assert(got.trace.queued && !got.trace.computed);
      ck_assert(got.queue_ms == 7.0);
    } else {
      ck_assert_int_eq(got.status, 200);
      ck_assert(got.trace.computed);
      free(got.body);
    }
  }
}
END_TEST

/* attnd_http_requests_total's route label: a template, never the path. */
START_TEST(test_route_templates) {
  size_t n;
  const char *const *t = attn__route_templates(&n);
  static const char *const cases[][2] = {
      {"/", "/"},
      {"/ui/app.js", "/ui/{file}"},
      {"/ui", "/ui/{file}"},
      {"/v2/", "/v2"},
      {"/metrics", "/metrics"},
      {"/openapi.json", "/openapi.json"},
      {"/v2/models/stats", "/v2/models/stats"},
      {"/v2/models/anything", "/v2/models/{model}"},
      {"/v2/models/x/", "/v2/models/{model}"},
      {"/v2/models/x/infer", "/v2/models/{model}/infer"},
      {"/v2/models/x/versions/9/ready",
       "/v2/models/{model}/versions/{version}/ready"},
      {"/v2/models/x/versions/9/stats",
       "/v2/models/{model}/versions/{version}/stats"},
      {"/v2/models/x/other", "other"},
      {"/v2/models/", "other"},
      {"/v1/attentionx", "other"},
      {"/nope", "other"}};
  ck_assert_str_eq(t[n - 1], "other");
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    int r = attn__route_template(cases[i][0]);
    ck_assert_int_ge(r, 0);
    ck_assert_int_lt(r, (int)n);
    ck_assert_msg(strcmp(t[r], cases[i][1]) == 0, "%s: %s, expected %s",
                  cases[i][0], t[r], cases[i][1]);
  }
}
END_TEST

/* Every row of the route table has what the metrics and GET /'s list
 * derive from it; the templates are unique, "other" last; GET / lists
 * exactly the listed rows. */
START_TEST(test_route_rows) {
  size_t n;
  const char *const *t = attn__route_templates(&n);
  ck_assert_int_eq((int)n, attn__route_count() + 1);
  for (int i = 0; i < attn__route_count(); i++) {
    char why[160];
    ck_assert_msg(attn__route_row_ok(i, why, sizeof why), "%s", why);
    ck_assert_msg(t[i] && t[i][0] == '/', "row %d: template %s", i, t[i]);
    for (int j = 0; j < i; j++)
      ck_assert_msg(strcmp(t[i], t[j]) != 0, "template %s twice", t[i]);
    /* a path of the template's shape is counted under it */
    char path[256];
    size_t o = 0;
    for (const char *p = t[i]; *p && o + 2 < sizeof path; p++)
      if (*p == '{') {
        path[o++] = 'x';
        p = strchr(p, '}');
      } else {
        path[o++] = *p;
      }
    path[o] = '\0';
    ck_assert_msg(attn__route_template(path) == i, "%s counted as %s", path,
                  t[attn__route_template(path)]);
  }
  attn__http_resp r = route("GET", "/", NULL, NULL, ATTN_ROUTE_DONE);
  ck_assert_int_eq(r.status, 200);
  static const char *const listed[] = {
      "\"POST /v1/attention\"",
      "\"GET /ui/\"",
      "\"GET /v2\"",
      "\"POST /v2/models/{model}/infer\"",
      "\"GET /v2/models/stats\"",
      "\"POST /v2/repository/models/{model}/unload\"",
      "\"GET /v1/sessions/{id}\"",
      "\"PUT /v1/sessions/{id}\"",
      "\"DELETE /v1/sessions/{id}\"",
      "\"POST /v1/sessions/{id}/attend\"",
      "\"GET /v1/sessions/{id}/kv\""};
  for (size_t i = 0; i < sizeof listed / sizeof listed[0]; i++)
    ck_assert_msg(strstr(r.body, listed[i]), "GET / lacks %s: %s", listed[i],
                  r.body);
  ck_assert_ptr_null(strstr(r.body, "{version}")); /* not listed */
  free(r.body);
}
END_TEST

/* The statistics routes answer Triton's shape; an unknown model is 404. */
START_TEST(test_stats_routes) {
  attn__http_resp r =
      route("GET", "/v2/models/stats", NULL, NULL, ATTN_ROUTE_DONE);
  ck_assert_int_eq(r.status, 200);
  ck_assert_ptr_nonnull(strstr(r.body, "{\"model_stats\":[{\"name\":\"sdpa\""));
  free(r.body);
  r = route("GET", "/v2/models/mha/versions/1/stats", NULL, NULL,
            ATTN_ROUTE_DONE);
  ck_assert_int_eq(r.status, 200);
  ck_assert_ptr_nonnull(strstr(r.body, "\"inference_stats\":{\"success\""));
  ck_assert_ptr_null(strstr(r.body, "\"sdpa\""));
  free(r.body);
  r = route("GET", "/v2/models/nosuch/stats", NULL, NULL, ATTN_ROUTE_DONE);
  ck_assert_int_eq(r.status, 404);
  free(r.body);
  r = route("POST", "/v2/models/stats", NULL, NULL, ATTN_ROUTE_DONE);
  ck_assert_int_eq(r.status, 405);
  free(r.body);
}
END_TEST

/* req (no body) answered at once. */
static attn__http_resp answer(attn__http_req req) {
  attn__http_resp resp = {0};
  attn__infer_target t;
  req.body = "";
  ck_assert_int_eq(attn__route(&srv, &req, &resp, &t), ATTN_ROUTE_DONE);
  return resp;
}

static attn__http_resp route_with(const char *method, const char *path,
                                  const char *authorization,
                                  const char *api_key) {
  return answer((attn__http_req){.method = method,
                                 .path = path,
                                 .authorization = authorization,
                                 .api_key = api_key});
}

static const char *resp_header(const attn__http_resp *r, const char *name) {
  for (size_t i = 0; i + 1 < 16 && r->headers[i]; i += 2)
    if (!strcmp(r->headers[i], name)) return r->headers[i + 1];
  return NULL;
}

START_TEST(test_api_keys) {
  attn_diag d = {{0}};
  ck_assert_int_eq(attn__auth_create("", "sesame", &srv.auth, &d), ATTN_OK);
  /* public whatever the keys */
  static const char *const open[] = {"/v2/health/live", "/v2/health/ready", "/",
                                     "/ui/app.js"};
  for (size_t i = 0; i < sizeof open / sizeof open[0]; i++) {
    attn__http_resp r = route_with("GET", open[i], NULL, NULL);
    ck_assert_msg(r.status == 200, "%s: %d", open[i], r.status);
    free(r.body);
  }
  /* every other route, and paths no route has */
  static const char *const closed[] = {"/v2",
                                       "/v1/models",
                                       "/v2/models/sdpa",
                                       "/v2/models/sdpa/ready",
                                       "/nowhere",
                                       "/v2/models/nosuch"};
  for (size_t i = 0; i < sizeof closed / sizeof closed[0]; i++) {
    attn__http_resp r = route_with("GET", closed[i], NULL, NULL);
    ck_assert_msg(r.status == 401, "%s: %d", closed[i], r.status);
    ck_assert_str_eq(resp_header(&r, "WWW-Authenticate"), "Bearer");
    EXPECT_BODY(r, "needs an API key");
    r = route_with("GET", closed[i], "Bearer sesame", NULL);
    ck_assert_msg(r.status != 401, "%s with a key: %d", closed[i], r.status);
    free(r.body);
    r = route_with("GET", closed[i], NULL, "sesame");
    ck_assert_msg(r.status != 401, "%s with X-Api-Key: %d", closed[i],
                  r.status);
    free(r.body);
  }
  attn__http_resp r = route_with("POST", "/v1/attention", NULL, "open");
  ck_assert_int_eq(r.status, 401);
  ck_assert_str_eq(resp_header(&r, "WWW-Authenticate"),
                   "Bearer error=\"invalid_token\"");
  ck_assert_ptr_null(strstr(r.body, "open")); /* the key is not echoed */
  EXPECT_BODY(r, "X-Api-Key is not valid");
  r = route_with("GET", "/v2", "Basic c2VzYW1l", NULL);
  ck_assert_int_eq(r.status, 401);
  EXPECT_BODY(r, "only Bearer");
  /* the refusals above: 6 without a key, a wrong key, a Basic */
  ck_assert_uint_eq(attn__auth_failures(srv.auth), 8);
  attn__auth_destroy(srv.auth);
  srv.auth = NULL;
}
END_TEST

/* attn__route_admit on the headers alone: *max_body, or the refusal. */
static attn__route_kind admit(const char *method, const char *path,
                              const char *key, uint64_t body, size_t *max,
                              attn__http_resp *r) {
  attn__http_req req = {.method = method, .path = path, .api_key = key};
  attn__admission a;
  memset(r, 0, sizeof *r);
  attn__route_kind k = attn__route_admit(&srv, &req, body, r, &a);
  *max = a.max_body;
  return k;
}

/* The session routes: the id checked, the operation named (routes.c
 * never touches the store: a stand-in pointer is enough). */
START_TEST(test_session_routes) {
  static const struct {
    const char *method, *path;
    attn__session_op op;
  } ops[] = {{"GET", "/v1/sessions", ATTN_SESSION_LIST},
             {"GET", "/v1/sessions/a.b_c:d-9", ATTN_SESSION_GET},
             {"PUT", "/v1/sessions/a.b_c:d-9", ATTN_SESSION_CREATE},
             {"DELETE", "/v1/sessions/a.b_c:d-9", ATTN_SESSION_DELETE},
             {"POST", "/v1/sessions/x/attend", ATTN_SESSION_ATTEND},
             {"POST", "/v1/sessions/x/truncate", ATTN_SESSION_TRUNCATE},
             {"POST", "/v1/sessions/x/fork", ATTN_SESSION_FORK},
             {"GET", "/v1/sessions/x/kv", ATTN_SESSION_KV}};
  attn__http_resp r =
      route("GET", "/v1/sessions/x", NULL, NULL, ATTN_ROUTE_DONE);
  ck_assert_int_eq(r.status, 503); /* no store */
  EXPECT_BODY(r, "sessions are not available");
  srv.sessions = (struct attn_session_store *)&srv;
  for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
    attn__http_req req = {.method = ops[i].method,
                          .path = ops[i].path,
                          .body = "{}",
                          .body_len = 2};
    attn__http_resp resp = {0};
    attn__infer_target t;
    ck_assert_int_eq(attn__route(&srv, &req, &resp, &t), ATTN_ROUTE_DEFER);
    ck_assert_int_eq(t.proto, ATTN_JOB_SESSION);
    ck_assert_int_eq(t.session_op, ops[i].op);
    const char *id = strchr(ops[i].path + 4, '/');
    ck_assert(id == NULL || strncmp(t.session, id + 1, strlen(t.session)) == 0);
  }
  char longid[200];
  memset(longid, 'a', sizeof longid);
  memcpy(longid, "/v1/sessions/", 13);
  longid[13 + ATTN_SESSION_ID_MAX + 1] = '\0'; /* 129 bytes of id */
  r = route("GET", longid, NULL, NULL, ATTN_ROUTE_DONE);
  ck_assert_int_eq(r.status, 400);
  EXPECT_BODY(r, "is not a session id: 1 to 128 bytes");
  r = route("GET", "/v1/sessions/a%20b", NULL, NULL, ATTN_ROUTE_DONE);
  ck_assert_int_eq(r.status, 400);
  EXPECT_BODY(r, "'a%20b' in /v1/sessions/a%20b is not a session id");
  r = route("PUT", "/v1/sessions", NULL, "{}", ATTN_ROUTE_DONE);
  ck_assert_int_eq(r.status, 405); /* the list takes GET only */
  free(r.body);
  r = route("POST", "/v1/sessions/ok/attend", "text/html", "{}",
            ATTN_ROUTE_DONE);
  ck_assert_int_eq(r.status, 415);
  free(r.body);
  /* a PUT of application/octet-stream is a session file's import; the
   * other routes take no file */
  attn__http_req file = {.method = "PUT",
                         .path = "/v1/sessions/ok",
                         .content_type = "Application/Octet-Stream; x=1",
                         .body = "{}",
                         .body_len = 2};
  attn__infer_target t;
  ck_assert_int_eq(attn__route(&srv, &file, &r, &t), ATTN_ROUTE_DEFER);
  ck_assert_int_eq(t.session_op, ATTN_SESSION_IMPORT);
  r = route("POST", "/v1/sessions/ok/fork", "application/octet-stream", "{}",
            ATTN_ROUTE_DONE);
  ck_assert_int_eq(r.status, 415);
  free(r.body);
  r = route("PUT", "/v1/sessions/ok/kv", NULL, "{}", ATTN_ROUTE_DONE);
  ck_assert_int_eq(r.status, 405);
  free(r.body);
  srv.sessions = NULL;
}
END_TEST

START_TEST(test_admit_before_body) {
  attn__http_resp r;
  size_t max = 1;
  cfg.max_body_bytes = 1 << 20;
  cfg.model_control = ATTN_MODEL_CONTROL_EXPLICIT; /* load takes its body */
  /* what each route takes */
  static const struct {
    const char *method, *path;
    size_t max;
  } takes[] = {
      {"POST", "/v1/attention", 1 << 20},
      {"POST", "/v2/models/sdpa/infer", 1 << 20},
      {"POST", "/v2/models/sdpa/versions/1/infer", 1 << 20},
      {"POST", "/v2/repository/index", ATTN_MAX_REPO_BODY_BYTES},
      {"POST", "/v2/repository/models/x/load", ATTN_MAX_REPO_BODY_BYTES},
      {"GET", "/v2/health/live", 0},
      {"GET", "/v2/models/sdpa/ready", 0},
      {"HEAD", "/metrics", 0},
      {"POST", "/v1/sessions/s-1/attend", 1 << 20},
      {"PUT", "/v1/sessions/s-1", ATTN_MAX_REPO_BODY_BYTES},
      {"POST", "/v1/sessions/s-1/fork", ATTN_MAX_REPO_BODY_BYTES},
      {"POST", "/v1/sessions/s-1/truncate", ATTN_MAX_REPO_BODY_BYTES},
      {"GET", "/v1/sessions/s-1", 0},
      {"DELETE", "/v1/sessions/s-1", 0},
      {"GET", "/v1/sessions", 0}};
  for (size_t i = 0; i < sizeof takes / sizeof takes[0]; i++) {
    ck_assert_int_eq(admit(takes[i].method, takes[i].path, NULL, 0, &max, &r),
                     ATTN_ROUTE_DEFER);
    ck_assert_msg(max == takes[i].max, "%s: %zu", takes[i].path, max);
  }
  /* a body where none is taken, past a small route's limit, to no route */
  ck_assert_int_eq(admit("GET", "/v2/health/live", NULL, 5, &max, &r),
                   ATTN_ROUTE_DONE);
  ck_assert_int_eq(r.status, 413);
  EXPECT_BODY(r, "takes no request body");
  ck_assert_int_eq(admit("GET", "/v2", NULL, UINT64_MAX, &max, &r),
                   ATTN_ROUTE_DONE);
  EXPECT_BODY(r, "sent chunked");
  ck_assert_int_eq(admit("POST", "/v2/repository/index", NULL,
                         ATTN_MAX_REPO_BODY_BYTES + 1, &max, &r),
                   ATTN_ROUTE_DONE);
  ck_assert_int_eq(r.status, 413);
  free(r.body);
  ck_assert_int_eq(admit("POST", "/v2/repository/index", NULL,
                         ATTN_MAX_REPO_BODY_BYTES, &max, &r),
                   ATTN_ROUTE_DEFER);
  /* a session's PUT: 64 KiB of JSON, or a session file up to
   * max_body_bytes */
  ck_assert_int_eq(admit("PUT", "/v1/sessions/s-1", NULL,
                         ATTN_MAX_REPO_BODY_BYTES + 1, &max, &r),
                   ATTN_ROUTE_DONE);
  ck_assert_int_eq(r.status, 413);
  free(r.body);
  attn__http_req put = {.method = "PUT",
                        .path = "/v1/sessions/s-1",
                        .content_type = "application/octet-stream"};
  attn__admission adm;
  ck_assert_int_eq(
      attn__route_admit(&srv, &put, ATTN_MAX_REPO_BODY_BYTES + 1, &r, &adm),
      ATTN_ROUTE_DEFER);
  ck_assert_uint_eq(adm.max_body, 1 << 20);
  ck_assert_int_eq(admit("POST", "/nowhere", NULL, 5, &max, &r),
                   ATTN_ROUTE_DONE);
  ck_assert_int_eq(r.status, 404);
  free(r.body);
  ck_assert_int_eq(admit("POST", "/v2/models/sdpa/bogus", NULL, 5, &max, &r),
                   ATTN_ROUTE_DONE);
  ck_assert_int_eq(r.status, 404);
  free(r.body);
  ck_assert_int_eq(admit("POST", "/v2/models/sdpa", NULL, 5, &max, &r),
                   ATTN_ROUTE_DONE);
  ck_assert_int_eq(r.status, 405);
  free(r.body);
  /* one row, three methods: each its own body rule, the rest 405 */
  ck_assert_int_eq(admit("DELETE", "/v1/sessions/a", NULL, 5, &max, &r),
                   ATTN_ROUTE_DONE);
  ck_assert_int_eq(r.status, 413);
  free(r.body);
  ck_assert_int_eq(admit("PUT", "/v1/sessions/a", NULL,
                         ATTN_MAX_REPO_BODY_BYTES + 1, &max, &r),
                   ATTN_ROUTE_DONE);
  ck_assert_int_eq(r.status, 413);
  free(r.body);
  ck_assert_int_eq(admit("POST", "/v1/sessions/a", NULL, 5, &max, &r),
                   ATTN_ROUTE_DONE);
  ck_assert_int_eq(r.status, 405);
  ck_assert_str_eq(r.allow, "GET, HEAD, PUT, DELETE");
  free(r.body);
  ck_assert_int_eq(admit("PUT", "/v1/sessions", NULL, 5, &max, &r),
                   ATTN_ROUTE_DONE);
  ck_assert_int_eq(r.status, 405);
  ck_assert_str_eq(r.allow, "GET, HEAD");
  free(r.body);
  /* without a body, 404 waits for attn__route as before */
  ck_assert_int_eq(admit("POST", "/nowhere", NULL, 0, &max, &r),
                   ATTN_ROUTE_DEFER);
  /* the repository's limit stays under max_body_bytes */
  cfg.max_body_bytes = 4096;
  admit("POST", "/v2/repository/index", NULL, 0, &max, &r);
  ck_assert_uint_eq(max, 4096);
  /* keys: refused before any body, a body or not; public routes open */
  attn_diag d = {{0}};
  ck_assert_int_eq(attn__auth_create("", "sesame", &srv.auth, &d), ATTN_OK);
  ck_assert_int_eq(admit("POST", "/v1/attention", NULL, 100, &max, &r),
                   ATTN_ROUTE_DONE);
  ck_assert_int_eq(r.status, 401);
  EXPECT_BODY(r, "needs an API key");
  ck_assert_int_eq(admit("POST", "/nowhere", NULL, 0, &max, &r),
                   ATTN_ROUTE_DONE);
  ck_assert_int_eq(r.status, 401);
  free(r.body);
  ck_assert_int_eq(admit("POST", "/v1/attention", "sesame", 100, &max, &r),
                   ATTN_ROUTE_DEFER);
  ck_assert_int_eq(admit("GET", "/v2/health/live", NULL, 0, &max, &r),
                   ATTN_ROUTE_DEFER);
  attn__auth_destroy(srv.auth);
  srv.auth = NULL;
}
END_TEST

/* attn__route_admit with X-Api-Key key (NULL: none) refuses with status. */
static void admit_refused(const char *path, const char *key, int status,
                          const char *says) {
  attn__http_resp r;
  size_t max;
  ck_assert_int_eq(admit("POST", path, key, 10, &max, &r), ATTN_ROUTE_DONE);
  ck_assert_int_eq(r.status, status);
  EXPECT_BODY(r, says);
}

/* model_control and the admin keys: load and unload only. */
START_TEST(test_model_control) {
  static const char *const changes[] = {"/v2/repository/models/x/load",
                                        "/v2/repository/models/x/unload"};
  attn__http_resp r;
  size_t max;
  /* "none" (the default): 403 naming the setting, before the body; the
   * index still answers; a wrong method is still a 405 */
  ck_assert_int_eq(cfg.model_control, ATTN_MODEL_CONTROL_NONE);
  for (size_t i = 0; i < 2; i++) {
    admit_refused(changes[i], NULL, 403,
                  "model_control is \\\"none\\\": this server does not "
                  "load or unload models over HTTP");
    r = route("POST", changes[i], "application/json", "{}", ATTN_ROUTE_DONE);
    ck_assert_int_eq(r.status, 403);
    EXPECT_BODY(r, "--model-control explicit");
    r = route("GET", changes[i], NULL, NULL, ATTN_ROUTE_DONE);
    ck_assert_int_eq(r.status, 405);
    free(r.body);
  }
  route("POST", "/v2/repository/index", "application/json", "{}",
        ATTN_ROUTE_DEFER);
  /* "explicit", keys off: open */
  cfg.model_control = ATTN_MODEL_CONTROL_EXPLICIT;
  for (size_t i = 0; i < 2; i++)
    route("POST", changes[i], "application/json", "{}", ATTN_ROUTE_DEFER);
  /* inference keys and admin keys */
  attn_diag d = {{0}};
  ck_assert_int_eq(attn__auth_create("", "sesame", &srv.auth, &d), ATTN_OK);
  ck_assert_int_eq(
      attn__auth_named("admin_api_keys_file", "ATTND_ADMIN_API_KEY", "", "boss",
                       &srv.admin_auth, &d),
      ATTN_OK);
  for (size_t i = 0; i < 2; i++) {
    admit_refused(changes[i], "sesame", 403,
                  "needs an admin key (admin_api_keys_file / "
                  "ATTND_ADMIN_API_KEY)");
    ck_assert_int_eq(admit("POST", changes[i], "boss", 10, &max, &r),
                     ATTN_ROUTE_DEFER);
    admit_refused(changes[i], NULL, 401, "needs an API key");
    admit_refused(changes[i], "nope", 401, "is not valid");
  }
  /* an admin key is an API key everywhere; the index takes either */
  ck_assert_int_eq(admit("POST", "/v1/attention", "boss", 10, &max, &r),
                   ATTN_ROUTE_DEFER);
  ck_assert_int_eq(
      admit("POST", "/v2/repository/index", "sesame", 10, &max, &r),
      ATTN_ROUTE_DEFER);
  r = route_with("GET", "/v1/models", "Bearer boss", NULL);
  ck_assert_int_eq(r.status, 200);
  free(r.body);
  /* refused: 2 x (an API key, none, a wrong one) */
  ck_assert_uint_eq(attn__auth_failures(srv.auth), 6);
  /* inference keys alone: nobody may load */
  attn__auth_destroy(srv.admin_auth);
  srv.admin_auth = NULL;
  admit_refused(changes[0], "sesame", 403, "needs an admin key");
  /* admin keys alone: they are the only keys */
  attn__auth_destroy(srv.auth);
  srv.auth = NULL;
  ck_assert_int_eq(
      attn__auth_named("admin_api_keys_file", "ATTND_ADMIN_API_KEY", "", "boss",
                       &srv.admin_auth, &d),
      ATTN_OK);
  admit_refused("/v1/attention", NULL, 401, "needs an API key");
  admit_refused("/v1/attention", "sesame", 401, "is not valid");
  ck_assert_int_eq(admit("POST", changes[1], "boss", 10, &max, &r),
                   ATTN_ROUTE_DEFER);
  ck_assert_uint_eq(attn__auth_failures(srv.admin_auth), 2);
  attn__auth_destroy(srv.admin_auth);
  srv.admin_auth = NULL;
}
END_TEST

static attn__http_resp preflight(const char *origin, const char *method) {
  return answer((attn__http_req){.method = "OPTIONS",
                                 .path = "/v1/attention",
                                 .origin = origin,
                                 .cors_method = method});
}

START_TEST(test_cors_preflight) {
  attn_diag d = {{0}};
  /* CORS off: OPTIONS is a method like another (405) */
  attn__http_resp r = preflight("https://app.example", "POST");
  ck_assert_int_eq(r.status, 405);
  free(r.body);
  snprintf(cfg.cors_allow_origins, sizeof cfg.cors_allow_origins,
           "https://app.example");
  /* answered before the keys: a browser sends no key in a preflight */
  ck_assert_int_eq(attn__auth_create("", "sesame", &srv.auth, &d), ATTN_OK);
  r = preflight("https://app.example", "POST");
  ck_assert_int_eq(r.status, 204);
  ck_assert_uint_eq(r.len, 0);
  ck_assert_ptr_nonnull(strstr(resp_header(&r, "Access-Control-Allow-Headers"),
                               "Authorization, X-Api-Key, Content-Type"));
  ck_assert_ptr_nonnull(strstr(resp_header(&r, "Access-Control-Allow-Headers"),
                               "Inference-Header-Content-Length"));
  ck_assert_ptr_nonnull(
      strstr(resp_header(&r, "Access-Control-Allow-Methods"), "POST"));
  free(r.body);
  r = preflight("https://evil.example", "POST");
  ck_assert_int_eq(r.status, 403);
  EXPECT_BODY(r, "cors_allow_origins");
  /* an OPTIONS that is no preflight needs the key like any request */
  r = preflight(NULL, NULL);
  ck_assert_int_eq(r.status, 401);
  free(r.body);
  ck_assert_uint_eq(attn__auth_failures(srv.auth), 1);
  attn__auth_destroy(srv.auth);
  srv.auth = NULL;
}
END_TEST

Suite *routes_suite(void) {
  Suite *s = suite_create("routes");
  TCase *tc = tcase_create("routes");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, test_health_and_metadata);
  tcase_add_test(tc, test_errors);
  tcase_add_test(tc, test_encoding_and_header_len);
  tcase_add_test(tc, test_draining);
  tcase_add_test(tc, test_gone_client_dropped);
  tcase_add_test(tc, test_unready_still_serves);
  tcase_add_test(tc, test_infer_v1_and_v2);
  tcase_add_test(tc, test_queue_full_and_expiry);
  tcase_add_test(tc, test_route_templates);
  tcase_add_test(tc, test_route_rows);
  tcase_add_test(tc, test_stats_routes);
  tcase_add_test(tc, test_api_keys);
  tcase_add_test(tc, test_admit_before_body);
  tcase_add_test(tc, test_model_control);
  tcase_add_test(tc, test_session_routes);
  tcase_add_test(tc, test_cors_preflight);
  suite_add_tcase(s, tc);
  return s;
}
