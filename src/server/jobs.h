/* jobs.h - jobs.c's interface, and the makers of each kind of job it queues.
 * Private to src/server/ (docs/architecture.md). */
#ifndef ATTN_SERVER_JOBS_H
#define ATTN_SERVER_JOBS_H

#include "internal.h"

/* The makers of each kind of job, for jobs.c: a new job for req (what t
 * names; it borrows req->body, which must live until the answer), with
 * its run, expire and deadline set; NULL when out of memory.  HTTP
 * thread. */
attn__job_base *attn__infer_job(attn__srv_ctx *s, const attn__http_req *req,
                                const attn__infer_target *t);
attn__job_base *attn__session_job(attn__srv_ctx *s, const attn__http_req *req,
                                  const attn__infer_target *t);
attn__job_base *attn__repo_job(attn__srv_ctx *s, const attn__http_req *req,
                               const attn__infer_target *t);

/* session.c: the step of the model kv_attention for infer.c (KServe v2:
 * a batched decode, or Triton's sequence extension), for owner (the key's
 * tag), on threads.  On success *r holds the outputs (output, lse) and
 * *resp the trace; true when it failed: *resp holds the error.  Worker. */
bool attn__session_v2(attn__srv_ctx *s, uint64_t owner,
                      const attn_infer_request *req, int threads,
                      attn_infer_response *r, attn__http_resp *resp);

/* jobs.c: make the job of the kind t names (attn__infer_job,
 * attn__repo_job) and queue it; done(arg, ...) gets the answer.  gone
 * (NULL: never asked) is asked with arg when a worker takes the job: when
 * it says the client has left, the job is dropped without running (no
 * side effect of any kind) and done gets a 499 with no body
 * (ATTN_DROPPED_STATUS).  When it cannot be queued (queue full or closed,
 * or no memory for the job) *resp is a 503, done is never called, and
 * false is returned.  HTTP thread. */
bool attn__job_submit(attn__srv_ctx *s, const attn__http_req *req,
                      const attn__infer_target *t, attn__infer_done done,
                      attn__client_gone gone, void *arg, attn__http_resp *resp);

/* The status of a job dropped because its client had left: written to
 * the closed connection (nobody reads it), and what the access log and
 * the metrics count it as, as nginx does. */
#define ATTN_DROPPED_STATUS 499

#endif
