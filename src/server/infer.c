/* infer.c - an inference request's life on a worker thread.
 *
 * DESIGN
 * routes.c creates an attn_infer_job that borrows the request body; http.c
 * suspends the connection and calls attn__infer_submit, which pushes the
 * job with a deadline of queue_timeout_ms.  A worker then either expires it
 * (503, nothing computed) or runs it: decode (KServe v2 JSON/binary or
 * /v1/attention JSON), find the model, honour Triton's `timeout`, run the
 * model (which checks limits before allocating), encode, and call
 * job->complete, which hands the response to http.c and resumes the
 * connection.  Every path completes the job exactly once and frees
 * everything it allocated.
 * Threads: submit on an HTTP thread; run/expire on a worker.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn/buf.h"
#include "attn/codec.h"
#include "attn/limits.h"
#include "internal.h"

void attn__infer_job_free(attn_infer_job *job) {
  if (!job) return;
  free(job->model);
  free(job->version);
  free(job);
}

static double ms_since(uint64_t t0) {
  return (double)(attn_now_ns() - t0) / 1e6;
}

static void finish(attn_infer_job *job, attn_http_resp *resp) {
  attn__copy_str(resp->request_id, sizeof resp->request_id, job->request_id);
  job->complete(job->complete_arg, resp);
  attn__infer_job_free(job);
}

static void job_expire(attn_job *j, uint64_t waited_ns) {
  attn_infer_job *job = (attn_infer_job *)j;
  attn_http_resp resp = {0};
  resp.queue_ms = (double)waited_ns / 1e6;
  attn__resp_error(&resp, 503,
                   "request waited %.0f ms in the queue, longer than "
                   "queue_timeout_ms=%lld; the server is overloaded, "
                   "retry later",
                   resp.queue_ms, (long long)job->srv->cfg->queue_timeout_ms);
  finish(job, &resp);
}

static void error_from(attn_http_resp *resp, attn_status s,
                       const attn_diag *d) {
  attn__resp_error(resp, attn__http_status(s), "%s",
                   d->msg[0] ? d->msg : attn_strerror(s));
}

/* Threads this request may use in the engine.  A fixed
 * blas_threads_per_worker pins it; 0 (auto) gives it the cores that the
 * other workers are not busy with right now, so a lone large request gets
 * the machine and concurrent ones a core each.  (The engine itself keeps
 * small calls on one thread.) */
static int request_threads(const attn_srv_ctx *s) {
  if (s->cfg->blas_threads_per_worker > 0)
    return s->cfg->blas_threads_per_worker;
  long others = s->pool ? (long)attn_pool_busy(s->pool) - 1 : 0;
  long t = (s->ncpu > 0 ? s->ncpu : 1) - (others > 0 ? others : 0);
  if (t > ATTN_MAX_BLAS_THREADS) t = ATTN_MAX_BLAS_THREADS;
  return t < 1 ? 1 : (int)t;
}

static void job_run(attn_job *j, int worker, uint64_t waited_ns) {
  attn_infer_job *job = (attn_infer_job *)j;
  attn_srv_ctx *s = job->srv;
  const attn_config *cfg = s->cfg;
  attn_http_resp resp = {0};
  attn_infer_request req = {0};
  attn_infer_response out = {0};
  attn_v1_info info = {0};
  attn_diag d = {{0}};
  attn_buf b;
  attn_status st;
  const attn_model *m;
  const char *body = job->body;
  size_t body_len = job->body_len;
  char *plain = NULL; /* the inflated body, when it came compressed */
  (void)worker;

  attn_buf_init(&b, 0);
  resp.queue_ms = (double)waited_ns / 1e6;
  if (job->encoding != ATTN_ENC_IDENTITY) {
    size_t pad = (64 - job->header_len % 64) % 64; /* blobs on a line */
    st = attn__inflate(job->body, job->body_len, job->encoding,
                       (size_t)cfg->max_body_bytes, pad, &plain, &body_len,
                       &d);
    if (st) {
      error_from(&resp, st, &d);
      goto done;
    }
    body = plain + pad;
    if (job->header_len > body_len) {
      attn__resp_error(&resp, 400,
                       "Inference-Header-Content-Length %zu is outside (0, "
                       "%zu] (the body length after Content-Encoding %s)",
                       job->header_len, body_len,
                       attn__encoding_name(job->encoding));
      goto done;
    }
  }
  attn_codec_limits lim = {.max_tensor_elements =
                               (size_t)cfg->max_tensor_elements,
                           .max_inputs = ATTN_MAX_INPUTS,
                           .max_depth = ATTN_MAX_JSON_DEPTH};
  if (job->proto == ATTN_JOB_V2)
    st = attn_v2_decode(body, body_len, job->header_len, &lim, &req, &d);
  else
    st = attn_v1_decode(body, body_len, &lim, &req, &info, &d);
  if (st) {
    error_from(&resp, st, &d);
    goto done;
  }
  if (req.id && job->proto == ATTN_JOB_V2)
    attn__copy_str(job->request_id, sizeof job->request_id, req.id);
  if (job->proto == ATTN_JOB_V2) {
    /* Triton clients may repeat model_name / model_version in the body */
    if ((req.model && strcmp(req.model, job->model) != 0) ||
        (req.version && job->version && strcmp(req.version, job->version))) {
      attn__resp_error(&resp, 400,
                       "model_name '%s' (version '%s') in the body does not "
                       "match the URL's '%s' (version '%s')",
                       req.model ? req.model : job->model,
                       req.version ? req.version : "-", job->model,
                       job->version ? job->version : "-");
      goto done;
    }
    const char *ver = job->version ? job->version : req.version;
    m = attn_registry_find(s->models, job->model, ver);
    if (!m && ver) {
      attn__resp_error(&resp, 404, "model '%s' has no version '%s'",
                       job->model, ver);
      goto done;
    }
  } else {
    m = attn_registry_find(s->models, req.model ? req.model : "sdpa", NULL);
    if (!m) {
      attn__resp_error(&resp, 404,
                       "model: unknown model '%s' (GET /v1/models lists them)",
                       req.model ? req.model : "");
      goto done;
    }
  }
  if (!m) { /* unloaded between routing and now: cannot happen today */
    attn__resp_error(&resp, 404, "unknown model '%s'", job->model);
    goto done;
  }
  /* Triton's `timeout`: 0 means no timeout (tritonserver.h,
   * TRITONSERVER_InferenceRequestSetTimeoutMicroseconds), and tritonclient
   * sends "timeout": 0 whenever a caller passes timeout=0. */
  if (req.timeout_us > 0 && waited_ns / 1000 > (uint64_t)req.timeout_us) {
    attn__resp_error(&resp, 503,
                     "request waited %.3f ms in the queue, longer than its "
                     "timeout parameter (%lld us)",
                     resp.queue_ms, (long long)req.timeout_us);
    goto done;
  }
  attn_model_limits ml = {
      .max_seq_len = cfg->max_seq_len,
      .max_tensor_elements = (size_t)cfg->max_tensor_elements,
      .max_weights_elements = (size_t)cfg->max_weights_elements,
      .no_weights_json = cfg->max_weights_elements == 0};
  attn_exec x = {.threads = request_threads(s)};
  uint64_t c0 = attn_now_ns();
  st = attn_model_infer(m, &req, &ml, &x, &out, &d);
  resp.compute_ms = ms_since(c0);
  if (st) {
    error_from(&resp, st, &d);
    goto done;
  }
  if (job->proto == ATTN_JOB_V2) {
    size_t hl = 0;
    st = attn_v2_encode(&out, &b, &hl, &d);
    if (st) {
      error_from(&resp, st, &d);
      goto done;
    }
    attn__resp_json(&resp, 200, &b);
    if (hl) {
      resp.header_len = hl;
      resp.content_type = "application/octet-stream";
    }
  } else {
    attn_v1_timing t = {resp.queue_ms, resp.compute_ms,
                        (double)(attn_now_ns() - job->start_ns) / 1e6};
    st = attn_v1_encode(&out, &req, &info, &t, &b, &d);
    if (st) {
      error_from(&resp, st, &d);
      goto done;
    }
    attn__resp_json(&resp, 200, &b);
  }
done:
  free(plain);
  attn_buf_free(&b);
  attn_infer_request_free(&req);
  attn_infer_response_free(&out);
  finish(job, &resp);
}

bool attn__infer_submit(attn_infer_job *job, attn_http_resp *resp) {
  attn_srv_ctx *s = job->srv;
  job->job.run = job_run;
  job->job.expire = job_expire;
  if (s->cfg->queue_timeout_ms > 0)
    job->job.deadline_ns =
        attn_now_ns() + (uint64_t)s->cfg->queue_timeout_ms * 1000000u;
  attn_status st = attn_queue_push(s->queue, &job->job);
  if (st == ATTN_OK) return true;
  if (st == ATTN_EBUSY)
    attn__resp_error(resp, 503,
                     "queue full (%d requests waiting); retry after a moment",
                     s->cfg->queue_capacity);
  else
    attn__resp_error(resp, 503, "server is shutting down; retry elsewhere");
  resp->retry_after_s = 1;
  attn__copy_str(resp->request_id, sizeof resp->request_id, job->request_id);
  attn__infer_job_free(job);
  return false;
}
