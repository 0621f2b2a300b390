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
 *                 Triton's JSON (ModelStatisticsResponse of its HTTP/REST
 *                 extension, what tritonclient's get_inference_statistics
 *                 returns): per model its name, version, last_inference
 *                 (ms since the epoch), inference_count and
 *                 execution_count (attnd runs one request per execution:
 *                 both are the successes), and inference_stats: success
 *                 and fail (count, total ns from the first byte to the
 *                 answer), queue, compute_input (inflate and decode),
 *                 compute_infer (the model), compute_output (encode),
 *                 each the successful requests' count and ns, as Triton
 *                 counts them; batch_stats is empty (no batching).
 */
#include "attn/buf.h"
#include "attn/engine.h"
#include "attn_version.h"
#include "internal.h"

/* The metrics learn the names of slots that loads added since. */
static void name_models(attn_srv_ctx *s) {
  size_t n = attn_registry_count(s->models);
  for (size_t i = 0; i < n; i++)
    attn_metrics_name_model(s->metrics, i,
                            attn_registry_slot_name(s->models, i));
}

void attn__metrics_answer(attn_srv_ctx *s, attn_http_resp *resp) {
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

static void count_ns(attn_buf *b, const char *name, uint64_t count,
                     uint64_t ns) {
  attn_buf_printf(b, "\"%s\":{\"count\":", name);
  attn_buf_u64(b, count);
  attn_buf_puts(b, ",\"ns\":");
  attn_buf_u64(b, ns);
  attn_buf_puts(b, "}");
}

static void model_stats(attn_srv_ctx *s, size_t i, const attn_model *m,
                        attn_buf *b) {
  attn_model_stats st;
  attn_metrics_model_stats(s->metrics, i, &st);
  attn_buf_puts(b, "{\"name\":");
  attn_buf_json_string(b, attn_model_name(m));
  attn_buf_puts(b, ",\"version\":");
  attn_buf_json_string(b, attn_model_version(m));
  attn_buf_puts(b, ",\"last_inference\":");
  attn_buf_u64(b, st.last_inference_ms);
  attn_buf_puts(b, ",\"inference_count\":");
  attn_buf_u64(b, st.success_count);
  attn_buf_puts(b, ",\"execution_count\":");
  attn_buf_u64(b, st.success_count);
  const struct {
    const char *name;
    uint64_t count, ns;
  } rows[] = {{"success", st.success_count, st.success_ns},
              {"fail", st.fail_count, st.fail_ns},
              {"queue", st.success_count, st.queue_ns},
              {"compute_input", st.success_count, st.input_ns},
              {"compute_infer", st.success_count, st.infer_ns},
              {"compute_output", st.success_count, st.output_ns},
              {"cache_hit", 0, 0},
              {"cache_miss", 0, 0}};
  attn_buf_puts(b, ",\"inference_stats\":{");
  for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++) {
    if (r) attn_buf_puts(b, ",");
    count_ns(b, rows[r].name, rows[r].count, rows[r].ns);
  }
  attn_buf_puts(b, "},\"batch_stats\":[]}");
}

void attn__stats_answer(attn_srv_ctx *s, const attn_model *m,
                        attn_http_resp *resp) {
  attn_buf b;
  attn_buf_init(&b, 0);
  attn_buf_puts(&b, "{\"model_stats\":[");
  size_t n = attn_registry_count(s->models), shown = 0;
  for (size_t i = 0; i < n; i++) { /* the models loaded now */
    const attn_model *mi = attn_registry_get_at(s->models, i);
    if (mi && (!m || mi == m)) {
      if (shown++) attn_buf_puts(&b, ",");
      model_stats(s, i, mi, &b);
    }
    attn_model_put(mi);
  }
  attn_buf_puts(&b, "]}");
  attn__resp_json(resp, 200, &b);
}
