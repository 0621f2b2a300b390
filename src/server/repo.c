/* repo.c - Triton's model repository extension, run on a worker.
 *
 * DESIGN
 *   POST /v2/repository/index                  every model: READY or
 *                                              UNAVAILABLE with a reason
 *   POST /v2/repository/models/{m}/load        (re)load m from its file
 *   POST /v2/repository/models/{m}/unload      stop serving m
 * routes.c checks the path and hands the request on as a job (infer.c),
 * because a load reads files and converts weights: an HTTP thread must
 * not wait for that.  The registry does the work (model.h): a load that
 * fails leaves the old model serving, and requests that hold a model
 * finish on it.  The bodies are Triton's (index {"ready": bool}, load
 * and unload {"parameters": {...}}), read and written by the v2 codec
 * (attn_v2_decode_repository and the index's encoders, src/codec/
 * kserve_v2_ext.c), which refuses a long body before parsing it and a
 * load's "config" and "file:" overrides: attnd loads what the models
 * directory holds.  Answers name files relative to the models folder
 * ("models/x.json") and quote none of their bytes; the log line of a
 * failed load has the paths.
 * The job (repo_job) is made on the HTTP thread by attn__repo_job, for
 * jobs.c to queue.
 * Threads: a worker runs it.
 */
#include <stdlib.h>
#include <string.h>

#include "attn/buf.h"
#include "attn/codec.h"
#include "attn/log.h"
#include "internal.h"
#include "jobs.h"
#include "respond.h"

/* The index, all of it or (ready) the READY rows; `only`: one model's
 * row (the answer to its load or unload).  The codec writes it. */
static void answer_index(attn__srv_ctx *s, bool ready, const char *only,
                         attn__http_resp *resp) {
  attn_registry_entry *v;
  size_t n, shown = 0;
  attn_diag d = {{0}};
  attn_status st = attn_registry_index(s->models, &v, &n, &d);
  if (st) {
    attn__resp_status(resp, st, &d);
    return;
  }
  attn_v2_repo_entry *rows = malloc((n ? n : 1) * sizeof *rows);
  if (!rows) {
    free(v);
    attn__resp_status(resp, ATTN_ENOMEM, &d);
    return;
  }
  for (size_t i = 0; i < n; i++)
    if (!(ready && !v[i].ready) && !(only && strcmp(v[i].name, only)))
      rows[shown++] = (attn_v2_repo_entry){v[i].name, v[i].version, v[i].ready,
                                           v[i].reason};
  if (only && !shown) { /* a model just loaded or unloaded keeps its row */
    free(rows);
    free(v);
    attn__resp_error(resp, 500, "model '%s' is not in the index", only);
    return;
  }
  attn_buf b;
  attn_buf_init(&b, 0);
  st = only ? attn_v2_encode_repository_entry(&b, &rows[0])
            : attn_v2_encode_repository_index(&b, rows, shown);
  free(rows);
  free(v);
  attn__resp_encoded(resp, st, &b);
}

/* A load's failure: 404 when no file names the model, 503 out of
 * memory, else 400 (the model file is wrong: the message says how). */
static void load_failed(attn_status st, const attn_diag *d,
                        attn__http_resp *resp) {
  int code = st == ATTN_ENOTFOUND ? 404 : st == ATTN_ENOMEM ? 503 : 400;
  attn__resp_error(resp, code, "%s", d->msg[0] ? d->msg : attn_strerror(st));
}

/* The operation op on model (load, unload) with the request's body
 * (Triton's JSON; empty allowed) into *resp. */
static void repo_run(attn__srv_ctx *s, attn__job_proto op, const char *model,
                     const char *body, size_t len, attn__http_resp *resp) {
  attn_v2_repo_request rq;
  attn_diag d = {{0}};
  attn_status st = attn_v2_decode_repository(
      body, len,
      op == ATTN_JOB_REPO_INDEX  ? ATTN_V2_REPO_INDEX
      : op == ATTN_JOB_REPO_LOAD ? ATTN_V2_REPO_LOAD
                                 : ATTN_V2_REPO_UNLOAD,
      &rq, &d);
  if (st) {
    attn__resp_status(resp, st, &d);
    return;
  }
  if (op == ATTN_JOB_REPO_INDEX) {
    answer_index(s, rq.ready, NULL, resp);
    return;
  }
  if (op == ATTN_JOB_REPO_LOAD) {
    attn_diag detail = {{0}};
    if ((st = attn_registry_load(s->models, model, &d, &detail))) {
      /* the client's answer names files relative to the models folder;
       * the log, with their paths */
      attn_log(ATTN_LOG_WARN, "load of model '%s' failed: %s", model,
               detail.msg);
      load_failed(st, &d, resp);
      return;
    }
    attn_log(ATTN_LOG_INFO, "model '%s' loaded", model);
  } else {
    if ((st = attn_registry_unload(s->models, model, &d))) {
      attn__resp_status(resp, st, &d);
      return;
    }
    attn_log(ATTN_LOG_INFO, "model '%s' unloaded", model);
  }
  answer_index(s, false, model, resp);
}

/* ---- the job ------------------------------------------------------------ */

/* One repository operation on its way through the queue. */
typedef struct repo_job {
  attn__job_base base; /* first member: the queue's link, whom to answer */
  attn__job_proto op;
  const char *body; /* borrowed from the connection */
  size_t body_len;
  char model[ATTN_MAX_NAME_LEN + 1]; /* load, unload: from the URL */
} repo_job;

static void job_run(attn_job *j, int worker, uint64_t waited_ns) {
  repo_job *job = (repo_job *)j;
  attn__http_resp resp = {.queue_ms = (double)waited_ns / 1e6};
  (void)worker;
  repo_run(job->base.srv, job->op, job->model, job->body, job->body_len, &resp);
  attn__job_finish(&job->base, &resp);
}

static void job_expire(attn_job *j, uint64_t waited_ns) {
  repo_job *job = (repo_job *)j;
  attn__http_resp resp = {.queue_ms = (double)waited_ns / 1e6};
  attn__resp_waited(&resp, resp.queue_ms, -1,
                    job->base.srv->cfg->queue_timeout_ms);
  attn__job_finish(&job->base, &resp);
}

attn__job_base *attn__repo_job(attn__srv_ctx *s, const attn__http_req *req,
                               const attn__infer_target *t) {
  repo_job *job = malloc(sizeof *job);
  if (!job) return NULL;
  job->base.job = (attn_job){.run = job_run, .expire = job_expire};
  job->base.job.deadline_ns = attn__queue_deadline(s->cfg, attn_now_ns());
  job->base.srv = s;
  job->op = t->proto;
  job->body = req->body;
  job->body_len = req->body_len;
  attn__copy_str(job->model, sizeof job->model, t->model);
  return &job->base;
}
