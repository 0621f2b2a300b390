/* infer.c - an inference request's job: made, queued, run on a worker.
 *
 * DESIGN
 * The inference kind of job (jobs.c queues each kind; repo.c has the
 * repository's).  http.c suspends the connection and calls
 * attn__job_submit with the request and what routes.c found
 * (attn__infer_target); attn__infer_job makes the job, which takes what it
 * needs (it borrows the body, kept by http.c until the completion), with
 * a deadline: queue_timeout_ms, or a v2 request's own `timeout` when
 * that comes first (read before the job is queued, on the HTTP thread, by
 * attn_v2_peek_timeout in src/codec/kserve_v2.c, which scans only the
 * JSON's ends).  A worker then either expires it (503, nothing computed)
 * or runs it in three stages:
 *   decode   inflate a compressed body, read KServe v2 JSON/binary or
 *            /v1/attention JSON;
 *   model    find the model, honour Triton's `timeout`, run it (the
 *            model checks limits before allocating);
 *   encode   write the answer in the request's protocol;
 * and calls the completion, which hands the answer to http.c and resumes
 * the connection.  Every path completes the job exactly once and frees
 * everything it allocated.  The answer's request_id is set only when a v2
 * body names its own id (http.c then uses it for X-Request-Id and the
 * access log); otherwise http.c keeps the one it read.
 * Threads: made on an HTTP thread; run/expire on a worker (expire also
 * on the pool's reaper).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn/buf.h"
#include "attn/codec.h"
#include "attn/limits.h"
#include "internal.h"
#include "jobs.h"
#include "respond.h"
#include "inflate.h"
#include "auth.h"

/* One inference request on its way through the queue. */
typedef struct attn_infer_job {
  attn__job_base base; /* first member: the queue's link, whom to answer */
  attn__job_proto proto;
  attn__encoding encoding; /* of body */
  const char *body;        /* borrowed from the connection */
  size_t body_len;
  size_t header_len; /* v2 binary: of the body once inflated */
  size_t pad;        /* body's offset past a 64-byte boundary (req->pad) */
  char model[ATTN_MAX_NAME_LEN + 1];   /* v2: from the URL */
  char version[ATTN_MAX_NAME_LEN + 1]; /* v2: from the URL; "" for none */
  int64_t timeout_us; /* Triton's, when it set the deadline; else -1 */
  uint64_t owner;     /* kv_attention: the key's tag (attn__auth_owner) */
} attn_infer_job;

static double ms_since(uint64_t t0) {
  return (double)(attn_now_ns() - t0) / 1e6;
}

static void finish(attn_infer_job *job, attn__http_resp *resp) {
  attn__job_finish(&job->base, resp);
}

static void job_expire(attn_job *j, uint64_t waited_ns) {
  attn_infer_job *job = (attn_infer_job *)j;
  attn__http_resp resp = {0};
  resp.queue_ms = (double)waited_ns / 1e6;
  resp.trace.queued = true;
  resp.trace.queue_ns = waited_ns;
  resp.trace.hint = ATTN_OUTCOME_TIMEOUT + 1;
  attn__resp_waited(&resp, resp.queue_ms, job->timeout_us,
                    job->base.srv->cfg->queue_timeout_ms);
  finish(job, &resp);
}

/* Decode: inflate a compressed body, then read it as the job's protocol
 * into *req (and *info, /v1's options).  *plain is the inflated body (req
 * may point into it: free it after req).  True when it failed: *resp
 * holds the error (every helper here that may fill an answer returns
 * true when it did). */
static bool decode_fails(attn_infer_job *job, attn_infer_request *req,
                         attn_v1_info *info, char **plain, attn_diag *d,
                         attn__http_resp *resp) {
  const attn_config *cfg = job->base.srv->cfg;
  const char *body = job->body;
  size_t body_len = job->body_len;
  attn_status st;
  if (job->encoding != ATTN_ENC_IDENTITY) {
    /* laid out as http.c lays out the body: the blobs on cache lines */
    st = attn__inflate(
        job->body, job->body_len, job->encoding, (size_t)cfg->max_body_bytes,
        (unsigned)cfg->max_inflate_ratio, job->pad, plain, &body_len, d);
    if (st) {
      attn__resp_status(resp, st, d);
      return true;
    }
    body = *plain + job->pad;
    if (job->header_len > body_len) {
      attn__resp_error(resp, 400,
                       "Inference-Header-Content-Length %zu is outside (0, "
                       "%zu] (the body length after Content-Encoding %s)",
                       job->header_len, body_len,
                       attn__encoding_name(job->encoding));
      return true;
    }
  }
  attn_codec_limits lim = {
      .max_tensor_elements = (size_t)cfg->max_tensor_elements,
      .max_inputs = ATTN_MAX_INPUTS,
      .max_depth = ATTN_MAX_JSON_DEPTH};
  if (job->proto == ATTN_JOB_V2)
    st = attn_v2_decode(body, body_len, job->header_len, &lim, req, d);
  else
    st = attn_v1_decode(body, body_len, &lim, req, info, d);
  if (st) {
    attn__resp_status(resp, st, d);
    return true;
  }
  /* a v2 body's own id names the request from here on */
  if (req->id && job->proto == ATTN_JOB_V2)
    attn__copy_str(resp->request_id, sizeof resp->request_id, req->id);
  return false;
}

/* The model the request asks for: the URL's (v2; a Triton client may
 * repeat it in the body, which must agree) or the body's (/v1, "sdpa" when
 * it names none).  NULL when *resp holds the error. */
static const attn_model *find_model(const attn_infer_job *job,
                                    const attn_infer_request *req,
                                    attn__http_resp *resp) {
  attn_registry *models = job->base.srv->models;
  int slot = -1;
  const attn_model *m;
  const char *name = req->model ? req->model : "sdpa", *ver = NULL;
  if (job->proto == ATTN_JOB_V2) {
    const char *version = job->version[0] ? job->version : NULL;
    if ((req->model && strcmp(req->model, job->model) != 0) ||
        (req->version && version && strcmp(req->version, version))) {
      attn__resp_error(resp, 400,
                       "model_name '%s' (version '%s') in the body does not "
                       "match the URL's '%s' (version '%s')",
                       req->model ? req->model : job->model,
                       req->version ? req->version : "-", job->model,
                       version ? version : "-");
      return NULL;
    }
    name = job->model;
    ver = version ? version : req->version;
  }
  m = attn_registry_get(models, name, ver, &slot);
  /* unknown, unloaded since it was routed, or without that version */
  if (!m)
    attn__resp_no_model(resp, models,
                        job->proto == ATTN_JOB_V2 ? "" : "model: ", name, ver);
  resp->trace.model = slot + 1;
  return m;
}

/* Model: run m on req into *out within the configured limits, unless the
 * request waited longer than its own timeout.  Sets resp->compute_ms;
 * true when it failed (*resp holds the error). */
static bool compute_fails(const attn_infer_job *job, const attn_model *m,
                          const attn_infer_request *req, uint64_t waited_ns,
                          attn_infer_response *out, attn_diag *d,
                          attn__http_resp *resp) {
  const attn_config *cfg = job->base.srv->cfg;
  /* Triton's `timeout`: 0 means no timeout (tritonserver.h,
   * TRITONSERVER_InferenceRequestSetTimeoutMicroseconds), and tritonclient
   * sends "timeout": 0 whenever a caller passes timeout=0. */
  if (req->timeout_us > 0 && waited_ns / 1000 > (uint64_t)req->timeout_us) {
    attn__resp_waited(resp, resp->queue_ms, req->timeout_us, 0);
    resp->trace.hint = ATTN_OUTCOME_TIMEOUT + 1;
    return true;
  }
  attn_model_limits ml = {
      .max_seq_len = cfg->max_seq_len,
      .max_tensor_elements = (size_t)cfg->max_tensor_elements,
      .max_weights_elements = (size_t)cfg->max_weights_elements,
      .no_weights_json = cfg->max_weights_elements == 0};
  attn_exec x = {.threads = attn__request_threads(job->base.srv)};
  if (strcmp(attn_model_name(m), ATTN_KV_MODEL_NAME) == 0) {
    /* a session's step: session.c runs it, with its own trace */
    bool failed =
        attn__session_v2(job->base.srv, job->owner, req, x.threads, out, resp);
    return failed;
  }
  uint64_t c0 = attn_now_ns();
  attn_status st = attn_model_infer(m, req, &ml, &x, out, d);
  uint64_t c1 = attn_now_ns();
  resp->compute_ms = (double)(c1 - c0) / 1e6;
  resp->trace.computed = true;
  resp->trace.compute_ns = c1 - c0;
  if (st) {
    attn__resp_status(resp, st, d);
    return true;
  }
  return false;
}

/* Encode: out as the job's protocol into *resp (200), or the error. */
static void encode(const attn_infer_job *job, const attn_infer_response *out,
                   const attn_infer_request *req, const attn_v1_info *info,
                   attn_diag *d, attn__http_resp *resp) {
  attn_buf b;
  attn_status st;
  size_t hl = 0;
  attn_buf_init(&b, 0);
  if (job->proto == ATTN_JOB_V2) {
    st = attn_v2_encode(out, &b, &hl, d);
  } else {
    attn_v1_timing t = {resp->queue_ms, resp->compute_ms,
                        ms_since(job->base.start_ns)};
    st = attn_v1_encode(out, req, info, &t, &b, d);
  }
  if (st) {
    attn__resp_status(resp, st, d);
  } else {
    attn__resp_json(resp, 200, &b);
    if (hl) {
      resp->header_len = hl;
      resp->content_type = "application/octet-stream";
    }
  }
  attn_buf_free(&b);
}

/* The answer's share of the metrics that only the worker knows. */
static void trace_run(attn__http_resp *resp, uint64_t waited_ns, uint64_t t0,
                      uint64_t t1, uint64_t t2,
                      const attn_infer_response *out) {
  attn__resp_trace *t = &resp->trace;
  t->queued = true;
  t->queue_ns = waited_ns;
  t->input_ns = t1 - t0;
  if (resp->status == 200) {
    t->output_ns = t2 > t1 + t->compute_ns ? t2 - t1 - t->compute_ns : 0;
    t->flops = out->flops > 0 && out->flops < 1.8e19 ? (uint64_t)out->flops : 0;
    t->query_tokens = out->query_tokens;
  }
  /* a worker's 503 without a reason of its own is out of memory */
  if (resp->status == 503 && !t->hint) t->hint = ATTN_OUTCOME_INTERNAL + 1;
}

static void job_run(attn_job *j, int worker, uint64_t waited_ns) {
  attn_infer_job *job = (attn_infer_job *)j;
  attn__http_resp resp = {0};
  attn_infer_request req = {0};
  attn_infer_response out = {0};
  attn_v1_info info = {0};
  attn_diag d = {{0}};
  const attn_model *m = NULL;
  char *plain = NULL; /* the inflated body, when it came compressed */
  (void)worker;

  resp.queue_ms = (double)waited_ns / 1e6;
  uint64_t t0 = attn_now_ns(), t1 = t0;
  if (!decode_fails(job, &req, &info, &plain, &d, &resp) &&
      (t1 = attn_now_ns(), m = find_model(job, &req, &resp)) != NULL &&
      !compute_fails(job, m, &req, waited_ns, &out, &d, &resp))
    encode(job, &out, &req, &info, &d, &resp);
  attn_model_put(m); /* the answer owns copies of what it needs */
  if (t1 == t0) t1 = attn_now_ns(); /* decode failed */
  trace_run(&resp, waited_ns, t0, t1, attn_now_ns(), &out);
  free(plain);
  attn_infer_request_free(&req);
  attn_infer_response_free(&out);
  finish(job, &resp);
}

/* The job's deadline: the earlier of queue_timeout_ms and the request's
 * own timeout (v2 only; an uncompressed body), from now.  0: none. */
static void set_deadline(attn_infer_job *job, const attn__http_req *req,
                         const attn__infer_target *t) {
  const attn_config *cfg = job->base.srv->cfg;
  uint64_t now = attn_now_ns(), dl = attn__queue_deadline(cfg, now);
  job->timeout_us = -1;
  if (t->proto == ATTN_JOB_V2 && t->encoding == ATTN_ENC_IDENTITY)
    job->timeout_us =
        attn_v2_peek_timeout(req->body, req->body_len, t->header_len);
  if (job->timeout_us > 0 &&
      (uint64_t)job->timeout_us < (UINT64_MAX - now) / 1000u) {
    uint64_t own = now + (uint64_t)job->timeout_us * 1000u;
    if (!dl || own < dl)
      dl = own;
    else
      job->timeout_us = -1; /* queue_timeout_ms comes first */
  } else {
    job->timeout_us = -1;
  }
  job->base.job.deadline_ns = dl;
}

attn__job_base *attn__infer_job(attn__srv_ctx *s, const attn__http_req *req,
                                const attn__infer_target *t) {
  attn_infer_job *job = malloc(sizeof *job);
  if (!job) return NULL;
  job->base.job = (attn_job){.run = job_run, .expire = job_expire};
  job->base.srv = s;
  set_deadline(job, req, t);
  job->proto = t->proto;
  job->encoding = t->encoding;
  job->body = req->body;
  job->body_len = req->body_len;
  job->header_len = t->header_len;
  job->pad = req->pad;
  attn__copy_str(job->model, sizeof job->model, t->model);
  attn__copy_str(job->version, sizeof job->version, t->version);
  job->owner = strcmp(t->model, ATTN_KV_MODEL_NAME) == 0
                   ? attn__auth_owner_of(s->auth, s->admin_auth,
                                         req->authorization, req->api_key)
                   : 0;
  return &job->base;
}
