/* jobs.c - every kind of job queued the same way.
 *
 * DESIGN
 * http.c hands over what routes.c found (attn__infer_target) and the
 * request; attn__job_submit asks the kind's maker for its job (infer.c
 * for an inference, repo.c for an operation of the model repository,
 * session.c for a /v1 session's), fills in whom to
 * answer, and pushes it on the queue.  Each kind runs, expires and
 * finishes its own job (attn__job_finish); this file only queues, and the
 * refusals of a queue that takes no more (full, closed, no memory) are
 * written here once.  No kind calls this file, nor another kind.
 * Work nobody waits for: the queue runs run_or_drop, which first asks
 * http.c whether the client is still there (attn__client_gone: peers.c
 * peeks the socket, which libmicrohttpd cannot close while the connection
 * is suspended for the job).  When it has left, the job is dropped for
 * every kind alike, before the kind sees it: nothing is decoded,
 * computed, loaded, appended to a session or deleted, and the
 * completion gets a 499 with no body.  A job already running is not
 * asked again: it finishes and its answer goes nowhere, as before.
 * Threads: an HTTP thread (submit); a worker (run_or_drop).
 */
#include "internal.h"
#include "jobs.h"
#include "respond.h"

typedef attn__job_base *maker(attn__srv_ctx *s, const attn__http_req *req,
                              const attn__infer_target *t);

/* The maker of each kind of work, by attn__job_proto. */
static maker *const makers[] = {
    [ATTN_JOB_V2] = attn__infer_job,
    [ATTN_JOB_V1] = attn__infer_job,
    [ATTN_JOB_REPO_INDEX] = attn__repo_job,
    [ATTN_JOB_REPO_LOAD] = attn__repo_job,
    [ATTN_JOB_REPO_UNLOAD] = attn__repo_job,
    [ATTN_JOB_SESSION] = attn__session_job,
};

/* Worker: the kind's run, unless the client has left: then the job is
 * dropped, and its completion gets ATTN_DROPPED_STATUS with what it
 * waited in the queue (the access log's queue_ms). */
static void run_or_drop(attn_job *j, int worker, uint64_t waited_ns) {
  attn__job_base *b = (attn__job_base *)j;
  if (!b->gone || !b->gone(b->done_arg)) {
    b->run(j, worker, waited_ns);
    return;
  }
  attn__http_resp resp = {.status = ATTN_DROPPED_STATUS,
                          .queue_ms = (double)waited_ns / 1e6};
  resp.trace.queued = true;
  resp.trace.queue_ns = waited_ns;
  attn__job_finish(b, &resp);
}

bool attn__job_submit(attn__srv_ctx *s, const attn__http_req *req,
                      const attn__infer_target *t, attn__infer_done done,
                      attn__client_gone gone, void *arg,
                      attn__http_resp *resp) {
  attn__job_base *job = (size_t)t->proto < sizeof makers / sizeof makers[0]
                            ? makers[t->proto](s, req, t)
                            : NULL;
  if (!job) {
    attn__resp_error(resp, 503, "out of memory");
    resp->trace.hint = ATTN_OUTCOME_INTERNAL + 1;
    return false;
  }
  job->done = done;
  job->done_arg = arg;
  job->gone = gone;
  job->run = job->job.run;
  job->job.run = run_or_drop;
  job->start_ns = req->start_ns;
  attn_status st = attn_queue_push(s->queue, &job->job);
  if (st == ATTN_OK) return true; /* the job is the worker's now */
  if (st == ATTN_EBUSY) {
    attn__resp_error(resp, 503,
                     "queue full (%d requests waiting); retry after a moment",
                     s->cfg->queue_capacity);
  } else {
    attn__resp_error(resp, 503, "server is shutting down; retry elsewhere");
    resp->trace.hint = ATTN_OUTCOME_DRAINING + 1;
  }
  resp->retry_after_s = 1;
  free(job);
  return false;
}
