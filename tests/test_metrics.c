/* test_metrics.c - src/metrics/: the per-thread counters, their sums and
 * the text exposition, without a server. */
#include <pthread.h>
#include <stdio.h>

#include "attn/metrics.h"
#include "unit.h"

static const char *const models[] = {"sdpa", "we\"ird\\name"};
static const char *const routes[] = {"/v1/attention", "other"};

static attn_metrics *make(void) {
  attn_metrics_labels l = {
      .models = models, .n_models = 2, .routes = routes, .n_routes = 2};
  attn_metrics *m = NULL;
  attn_diag d = {{0}};
  ck_assert_int_eq(attn_metrics_create(&l, &m, &d), ATTN_OK);
  return m;
}

/* The exposition as a NUL-terminated string (free it). */
static char *render(attn_metrics *m) {
  attn_metrics_gauges g = {.queue_depth = 3,
                           .queue_capacity = 64,
                           .workers = 2,
                           .ready = 1,
                           .version = "1.2",
                           .engine_kernels = "avx2",
                           .blas = "Haswell"};
  attn_buf b;
  attn_buf_init(&b, 0);
  ck_assert_int_eq(attn_metrics_render(m, &g, &b), ATTN_OK);
  attn_buf_append(&b, "", 1);
  return b.data;
}

/* The value of the series line that begins with `series ` (NAN: none). */
static double value(const char *text, const char *series) {
  size_t n = strlen(series);
  for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : p)
    if (strncmp(p, series, n) == 0 && p[n] == ' ') return strtod(p + n, NULL);
  return -1;
}

START_TEST(test_fresh_exposition) {
  attn_metrics *m = make();
  char *t = render(m);
  ck_assert_ptr_nonnull(strstr(t, "# TYPE attnd_http_requests_total counter"));
  ck_assert_ptr_nonnull(
      strstr(t, "# TYPE attnd_request_duration_seconds histogram"));
  ck_assert(value(t, "attnd_auth_failures_total") == 0);
  ck_assert(value(t, "attnd_queue_depth") == 3);
  ck_assert(value(t, "attnd_ready") == 1);
  ck_assert(value(t,
                  "attnd_build_info{version=\"1.2\",engine_kernels="
                  "\"avx2\",blas=\"Haswell\"}") == 1);
  /* registry models are shown at zero; the unknown model is not */
  ck_assert(value(t,
                  "attnd_inference_requests_total{model=\"sdpa\","
                  "protocol=\"v1\",outcome=\"timeout\"}") == 0);
  ck_assert(value(t,
                  "attnd_inference_requests_total{model=\"we\\\"ird\\\\"
                  "name\",protocol=\"v2\",outcome=\"success\"}") == 0);
  ck_assert_ptr_null(strstr(t, "model=\"\""));
  ck_assert_ptr_nonnull(strstr(t, "process_open_fds "));
  free(t);
  attn_metrics_destroy(m);
}
END_TEST

START_TEST(test_counts_and_histograms) {
  attn_metrics *m = make();
  attn_metrics_http(m, 0, attn_metrics_method("POST"), 200, 10, 20);
  attn_metrics_http(m, 0, attn_metrics_method("POST"), 200, 1, 2);
  attn_metrics_http(m, 1, attn_metrics_method("BREW"), 418, 0, 5);
  attn_metrics_auth_failure(m);
  attn_infer_obs o = {.model = 0,
                      .proto = ATTN_PROTO_V1,
                      .outcome = ATTN_OUTCOME_SUCCESS,
                      .total_ns = 60000, /* 60 us: above 50 us */
                      .queued = 1,
                      .queue_ns = 50000, /* exactly the first bound */
                      .computed = 1,
                      .compute_ns = 1500000000,
                      .flops = 96,
                      .query_tokens = 3};
  attn_metrics_infer(m, &o);
  o.model = -1;
  o.outcome = ATTN_OUTCOME_INVALID;
  o.total_ns = 31000000000u; /* past the last bound */
  o.query_tokens = -1;       /* none */
  attn_metrics_infer(m, &o);
  char *t = render(m);
  ck_assert(value(t,
                  "attnd_http_requests_total{route=\"/v1/attention\","
                  "method=\"POST\",code=\"200\"}") == 2);
  ck_assert(value(t,
                  "attnd_http_requests_total{route=\"other\","
                  "method=\"other\",code=\"other\"}") == 1);
  ck_assert(value(t, "attnd_request_bytes_total") == 11);
  ck_assert(value(t, "attnd_response_bytes_total") == 27);
  ck_assert(value(t, "attnd_auth_failures_total") == 1);
  const char *rd = "attnd_request_duration_seconds";
  char s[256];
  snprintf(s, sizeof s,
           "%s_bucket{model=\"sdpa\",protocol=\"v1\",le=\"5e-05\"}", rd);
  ck_assert(value(t, s) == 0);
  snprintf(s, sizeof s,
           "%s_bucket{model=\"sdpa\",protocol=\"v1\",le=\"0.0001\"}", rd);
  ck_assert(value(t, s) == 1);
  snprintf(s, sizeof s, "%s_sum{model=\"sdpa\",protocol=\"v1\"}", rd);
  ck_assert_ptr_nonnull(strstr(t,
                               "_sum{model=\"sdpa\",protocol=\"v1\"} "
                               "0.000060000\n"));
  snprintf(s, sizeof s, "%s_bucket{model=\"\",protocol=\"v1\",le=\"30\"}", rd);
  ck_assert(value(t, s) == 0);
  snprintf(s, sizeof s, "%s_count{model=\"\",protocol=\"v1\"}", rd);
  ck_assert(value(t, s) == 1);
  ck_assert(value(t,
                  "attnd_queue_duration_seconds_bucket{model=\"sdpa\","
                  "le=\"5e-05\"}") == 1);
  ck_assert(value(t,
                  "attnd_compute_duration_seconds_bucket{model=\"sdpa\","
                  "le=\"1\"}") == 0);
  ck_assert(value(t,
                  "attnd_compute_duration_seconds_bucket{model=\"sdpa\","
                  "le=\"2.5\"}") == 1);
  ck_assert(value(t, "attnd_query_tokens_bucket{model=\"sdpa\",le=\"2\"}") ==
            0);
  ck_assert(value(t, "attnd_query_tokens_bucket{model=\"sdpa\",le=\"4\"}") ==
            1);
  /* a failure has no flops; no tokens when none are given */
  ck_assert(value(t, "attnd_attention_flops_total{model=\"sdpa\"}") == 96);
  ck_assert(value(t, "attnd_query_tokens_count{model=\"\"}") == 0);
  ck_assert(value(t,
                  "attnd_inference_requests_total{model=\"\","
                  "protocol=\"v1\",outcome=\"invalid\"}") == 1);
  free(t);
  attn_model_stats st;
  attn_metrics_model_stats(m, 0, &st);
  ck_assert_uint_eq(st.success_count, 1);
  ck_assert_uint_eq(st.success_ns, 60000);
  ck_assert_uint_eq(st.infer_ns, 1500000000u);
  ck_assert_uint_eq(st.fail_count, 0); /* the failure had no model */
  attn_metrics_destroy(m);
}
END_TEST

typedef struct {
  attn_metrics *m;
  int n;
} rec_arg;

static void *record(void *arg) {
  rec_arg *a = arg;
  attn_infer_obs o = {.model = 0,
                      .outcome = ATTN_OUTCOME_SUCCESS,
                      .total_ns = 1000,
                      .end_mono_ns = 1};
  for (int i = 0; i < a->n; i++) {
    attn_metrics_http(a->m, 0, 0, 200, 1, 1);
    attn_metrics_infer(a->m, &o);
  }
  return NULL;
}

/* Threads write their own shards; a read adds them up. */
/* A model named after create (a load's new slot): counted before it is
 * named, it is not shown (its label would be the unknown model's ""),
 * then is, with what it counted; a second name for it is ignored. */
START_TEST(test_model_named_later) {
  attn_metrics_labels l = {.models = models,
                           .n_models = 2,
                           .max_models = 4,
                           .routes = routes,
                           .n_routes = 2};
  attn_metrics *m = NULL;
  attn_diag d = {{0}};
  ck_assert_int_eq(attn_metrics_create(&l, &m, &d), ATTN_OK);
  attn_infer_obs o = {.model = 3,
                      .proto = ATTN_PROTO_V2,
                      .outcome = ATTN_OUTCOME_SUCCESS,
                      .total_ns = 1000};
  attn_metrics_infer(m, &o);
  const char *s =
      "attnd_inference_requests_total{model=\"late\","
      "protocol=\"v2\",outcome=\"success\"}";
  char *t = render(m);
  ck_assert(value(t, s) == -1);
  ck_assert_ptr_null(strstr(t, "model=\"\",protocol=\"v2\""));
  free(t);
  ck_assert(attn_metrics_name_model(m, 3, "late"));
  ck_assert(attn_metrics_name_model(m, 3, "other"));
  ck_assert(attn_metrics_name_model(m, 9, "past the end"));
  t = render(m);
  ck_assert(value(t, s) == 1);
  ck_assert_ptr_null(strstr(t, "other"));
  ck_assert_ptr_null(strstr(t, "past the end"));
  free(t);
  attn_metrics_destroy(m);
}
END_TEST

START_TEST(test_threads_add_up) {
  attn_metrics *m = make();
  pthread_t t[4];
  rec_arg a = {m, 5000};
  for (int i = 0; i < 4; i++)
    ck_assert_int_eq(pthread_create(&t[i], NULL, record, &a), 0);
  for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
  attn_model_stats st;
  attn_metrics_model_stats(m, 0, &st);
  ck_assert_uint_eq(st.success_count, 20000);
  ck_assert_uint_eq(st.success_ns, 20000000);
  ck_assert(st.last_inference_ms > 0);
  char *txt = render(m);
  ck_assert(value(txt,
                  "attnd_http_requests_total{route=\"/v1/attention\","
                  "method=\"GET\",code=\"200\"}") == 20000);
  free(txt);
  attn_metrics_destroy(m);
  /* a second instance on the same thread gets fresh shards */
  m = make();
  record(&(rec_arg){m, 1});
  attn_metrics_model_stats(m, 0, &st);
  ck_assert_uint_eq(st.success_count, 1);
  attn_metrics_destroy(m);
}
END_TEST

Suite *metrics_suite(void) {
  Suite *s = suite_create("metrics");
  TCase *tc = tcase_create("metrics");
  tcase_add_test(tc, test_fresh_exposition);
  tcase_add_test(tc, test_counts_and_histograms);
  tcase_add_test(tc, test_threads_add_up);
  tcase_add_test(tc, test_model_named_later);
  suite_add_tcase(s, tc);
  return s;
}
