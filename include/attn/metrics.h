/* metrics.h - attnd's counters and histograms, and their Prometheus text.
 *
 * One attn_metrics per server.  The hot path writes only into a shard of
 * its own thread (plain loads and stores; no lock, no shared atomic), made
 * the first time a thread records something; a scrape
 * (attn_metrics_render, attn_metrics_model_stats) adds the shards up.  So
 * a value read while requests complete is a moment's sum, never torn per
 * counter; a histogram's _count is its +Inf bucket.
 *
 * Labels are bounded by construction: models are the registry's names
 * given at create (plus "" for a request whose model is not known),
 * routes are the caller's templates given at create, methods and codes
 * come from fixed sets (attn_metrics_method, attn_metrics_code).
 *
 * Recording never fails the request: when a thread's shard cannot be
 * allocated (out of memory), that thread's observations are dropped.
 *
 * For src/server/ (the access engineer): attn_metrics_auth_failure counts
 * one refused credential in attnd_auth_failures_total; call it once per
 * request answered 401 (or 403) for a missing or wrong key.  Any thread.
 */
#ifndef ATTN_METRICS_H
#define ATTN_METRICS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "attn/buf.h"
#include "attn/status.h"

typedef struct attn_metrics attn_metrics;

/* attnd_inference_requests_total's outcome label. */
typedef enum {
  ATTN_OUTCOME_SUCCESS,
  ATTN_OUTCOME_INVALID,   /* a 4xx other than 413: the client's mistake */
  ATTN_OUTCOME_TOO_LARGE, /* 413: past a size limit */
  ATTN_OUTCOME_REJECTED,  /* 503: queue full, body budget */
  ATTN_OUTCOME_TIMEOUT,   /* 503: queue_timeout_ms or Triton's timeout */
  ATTN_OUTCOME_DRAINING,  /* 503: the server is shutting down */
  ATTN_OUTCOME_INTERNAL,  /* 500, or out of memory while running */
  ATTN_OUTCOME_N
} attn_outcome;

/* attnd_inference_requests_total's protocol label. */
typedef enum { ATTN_PROTO_V2, ATTN_PROTO_V1, ATTN_PROTO_N } attn_metrics_proto;

/* The labels at create; the arrays are copied.  Model i is the registry's
 * slot i: n_models named now, room for max_models (more named later with
 * attn_metrics_name_model). */
typedef struct attn_metrics_labels {
  const char *const *models; /* the registry's names, in its order */
  size_t n_models;
  size_t max_models;         /* 0: n_models */
  const char *const *routes; /* route templates ("/v2/models/{model}") */
  size_t n_routes;
} attn_metrics_labels;

attn_status attn_metrics_create(const attn_metrics_labels *l,
                                attn_metrics **out, attn_diag *d);
/* Names model i (i < max_models) once; a name given before stays.  false
 * only when out of memory.  Any thread; a model counted before it is
 * named is shown from then on. */
bool attn_metrics_name_model(attn_metrics *m, size_t i, const char *name);

/* Frees every shard.  No thread may record any more; NULL is a no-op. */
void attn_metrics_destroy(attn_metrics *m);

/* The method label's index: GET, HEAD, POST, PUT, DELETE, OPTIONS, PATCH,
 * or "other". */
int attn_metrics_method(const char *method);

/* ---- recording (any thread, its own shard) ------------------------------ */

/* One HTTP request answered: route (index in labels.routes), method
 * (attn_metrics_method), code (HTTP status; one outside the standard
 * ones is counted as "other"), body bytes read and answer bytes. */
void attn_metrics_http(attn_metrics *m, int route, int method, int code,
                       uint64_t bytes_in, uint64_t bytes_out);

/* One inference request answered (or refused).  Times in ns, on the
 * attn_now_ns() clock; queue, input/infer/output only when their flag
 * says the stage ran. */
typedef struct attn_infer_obs {
  int model; /* index in labels.models; -1: not known (label "") */
  attn_metrics_proto proto;
  attn_outcome outcome;
  uint64_t total_ns;    /* as the access log's total_ms */
  int queued;           /* it reached a worker or expired queued */
  uint64_t queue_ns;    /* as the access log's queue_ms */
  int computed;         /* the model ran (compute_ns is its time) */
  uint64_t input_ns;    /* decode (inflate, parse) */
  uint64_t compute_ns;  /* as the access log's compute_ms */
  uint64_t output_ns;   /* encode */
  uint64_t flops;       /* of the attention computed (success only) */
  int64_t query_tokens; /* query sequence length; < 0: none */
  uint64_t end_mono_ns; /* attn_now_ns() when answered (last_inference) */
} attn_infer_obs;
void attn_metrics_infer(attn_metrics *m, const attn_infer_obs *o);

/* One request refused for a missing or wrong API key. */
void attn_metrics_auth_failure(attn_metrics *m);

/* ---- reading (any thread) ------------------------------------------------ */

/* The gauges a scrape reads from the server at that moment. */
typedef struct attn_metrics_gauges {
  uint64_t queue_depth, queue_capacity, workers, workers_busy;
  uint64_t body_bytes_in_use, body_bytes_limit, connections_open;
  /* sessions (docs/api.md "Sessions"): open now, KV cache bytes in use
   * and its limit, tokens appended and sessions expired since start */
  uint64_t sessions, kv_cache_used, kv_cache_limit, session_tokens_total,
      sessions_expired_total;
  int ready;
  const char *version, *engine_kernels, *blas;
} attn_metrics_gauges;

/* The whole exposition (Prometheus text format 0.0.4) appended to out:
 * attnd_* from the shards and g, then process_* from /proc/self. */
attn_status attn_metrics_render(attn_metrics *m, const attn_metrics_gauges *g,
                                attn_buf *out);

/* Triton's statistics of one model (index in labels.models), the sums of
 * every shard; all 0 when m is NULL or out of memory.  Durations in ns. */
typedef struct attn_model_stats {
  uint64_t success_count, success_ns, fail_count, fail_ns;
  uint64_t queue_ns, input_ns, infer_ns, output_ns; /* successes' */
  uint64_t last_inference_ms; /* ms since the epoch; 0: none yet */
} attn_model_stats;
void attn_metrics_model_stats(attn_metrics *m, size_t model,
                              attn_model_stats *out);

/* The process_* metrics (Prometheus' standard names) from /proc/self,
 * appended to out; what cannot be read is left out.  process.c. */
attn_status attn_metrics_process(attn_buf *out);

#endif /* ATTN_METRICS_H */
