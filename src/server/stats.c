/* stats.c - GET /metrics and Triton's statistics extension.
 *
 * DESIGN
 * Both read the server's metrics (attn_metrics, src/metrics/: per-thread
 * shards added up at each read) and answer on the HTTP thread; nothing
 * here is on the way of an inference.
 *   GET /metrics  Prometheus text format 0.0.4: the counters and
 *                 histograms, the gauges read now from the queue, the
 *                 pool and http.c's counters, attnd_build_info and the
 *                 process_* metrics.
 *   GET /v2/models/stats, /v2/models/{m}[/versions/{v}]/stats
 *                 Triton's statistics, per model: success and fail
 *                 (count, total ns from the first byte to the answer),
 *                 queue, compute_input (inflate and decode), compute_infer
 *                 (the model), compute_output (encode), the successes'
 *                 each, and when the last inference ended.  The v2 codec
 *                 writes Triton's JSON (attn_v2_encode_statistics) from
 *                 these sums.
 */
#include "attn/buf.h"
#include "attn/codec.h"
#include "attn/engine.h"
#include "attn_version.h"
#include "attn/session.h"
#include "internal.h"
#include "respond.h"
#include "stats.h"

/* The metrics learn the names of slots that loads added since. */
static void name_models(attn__srv_ctx *s) {
  size_t n = attn_registry_count(s->models);
  for (size_t i = 0; i < n; i++)
    attn_metrics_name_model(s->metrics, i,
                            attn_registry_slot_name(s->models, i));
}

void attn__metrics_answer(attn__srv_ctx *s, attn__http_resp *resp) {
  name_models(s);
  attn_queue_stats qs = {0};
  if (s->pool)
    attn_pool_get_stats(s->pool, &qs);
  else if (s->queue)
    attn_queue_get_stats(s->queue, &qs);
  attn_metrics_gauges g = {
      .queue_depth = qs.depth,
      .queue_capacity = qs.capacity,
      .workers = (uint64_t)(s->workers > 0 ? s->workers : 0),
      .workers_busy = qs.running,
      .body_bytes_in_use = s->body_held ? atomic_load(s->body_held) : 0,
      .body_bytes_limit = s->body_budget,
      .connections_open = (uint64_t)(atomic_load(&s->connections) > 0
                                         ? atomic_load(&s->connections)
                                         : 0),
      .ready = !atomic_load(&s->unready) && !atomic_load(&s->draining),
      .version = ATTN_VERSION,
      .engine_kernels = attn_engine_kernel_name(),
      .blas = attn_engine_blas_core()};
  if (s->sessions) {
    attn_session_stats ss;
    attn_session_store_stats(s->sessions, &ss);
    g.sessions = ss.sessions;
    g.kv_cache_used = ss.used_bytes;
    g.kv_cache_limit = ss.limit_bytes;
    g.session_tokens_total = ss.tokens_total;
    g.sessions_expired_total = ss.expired_total;
  }
  attn_buf b;
  attn_buf_init(&b, 0);
  if (!s->metrics || attn_metrics_render(s->metrics, &g, &b) != ATTN_OK) {
    attn_buf_free(&b);
    attn__resp_error(resp, 503, "out of memory for the metrics");
    return;
  }
  attn__resp_json(resp, 200, &b);
  resp->content_type = "text/plain; version=0.0.4; charset=utf-8";
}

void attn__stats_answer(attn__srv_ctx *s, const attn_model *m,
                        attn__http_resp *resp) {
  const attn_model *held[ATTN_MAX_MODELS];
  size_t slot[ATTN_MAX_MODELS];
  attn_v2_model_stats rows[ATTN_MAX_MODELS];
  size_t n = attn__hold_models(s->models, m, held, slot);
  for (size_t i = 0; i < n; i++) {
    attn_model_stats st;
    attn_metrics_model_stats(s->metrics, slot[i], &st);
    rows[i] = (attn_v2_model_stats){.name = attn_model_name(held[i]),
                                    .version = attn_model_version(held[i]),
                                    .last_inference_ms = st.last_inference_ms,
                                    .success_count = st.success_count,
                                    .success_ns = st.success_ns,
                                    .fail_count = st.fail_count,
                                    .fail_ns = st.fail_ns,
                                    .queue_ns = st.queue_ns,
                                    .input_ns = st.input_ns,
                                    .infer_ns = st.infer_ns,
                                    .output_ns = st.output_ns};
  }
  attn_buf b;
  attn_buf_init(&b, 0);
  attn_status st = attn_v2_encode_statistics(&b, rows, n);
  for (size_t i = 0; i < n; i++) attn_model_put(held[i]);
  attn__resp_encoded(resp, st, &b);
}
