/* internal.h - the plain types the files of src/server/ share.  Not a
 * public header.  Each file's private interface is in a header of its
 * own (routes.h, jobs.h, respond.h, http.h, stats.h, observe.h,
 * inflate.h, auth.h, cors.h, peers.h, web.h).  docs/architecture.md is
 * the map of every file; this is the server's.
 *
 * A request's way through them, and who calls whom (no two files call
 * each other; scripts/check-calls.py checks it):
 *   http.c    libmicrohttpd: reads the headers (Inference-Header-Content-
 *             Length once, into attn__http_req) and the body, builds an
 *             attn__http_req, asks routes.c, sends the attn__http_resp.
 *   routes.c  the route table: answers at once (health, metadata, the
 *             page via web.c, every refusal) or says which inference to
 *             run (ATTN_ROUTE_DEFER and an attn__infer_target).
 *   jobs.c    queues a job of each kind: http.c suspends the connection
 *             and calls attn__job_submit, which asks the kind's maker for
 *             the job and pushes it; a worker runs it and calls the
 *             completion, which hands the answer to http.c and resumes
 *             the connection.
 *   infer.c   the inference kind of job: decode, model, encode.
 *   repo.c    the model repository's kind of job (index, load, unload).
 *   respond.c how an answer is written (JSON, errors, status mapping):
 *             used by all of the above, calls none of them.
 *   inflate.c, peers.c, web.c: Content-Encoding, idle connections whose
 *             client left, the page's files.
 *   observe.c each answered request into the metrics (http.c calls it
 *             when a request ends).
 *   stats.c   GET /metrics and Triton's statistics (routes.c's rows).
 * Plain data crosses between them (attn__http_req, attn__http_resp,
 * attn__infer_target), so that routes.c and infer.c run in unit tests
 * without sockets. */
#ifndef ATTN_SERVER_INTERNAL_H
#define ATTN_SERVER_INTERNAL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "attn/config.h"
#include "attn/metrics.h"
#include "attn/limits.h"
#include "attn/model.h"
#include "attn/queue.h"
#include "attn/session.h"
#include "attn/status.h"

/* src as a C string into dst[cap] (cap >= 1), truncated when longer: what
 * snprintf(dst, cap, "%s", src) does, without printf on every request. */
static inline void attn__copy_str(char *dst, size_t cap, const char *src) {
  size_t n = strnlen(src, cap - 1);
  memcpy(dst, src, n);
  dst[n] = '\0';
}

/* The models loaded now (only `only` when it is not NULL), at most
 * ATTN_MAX_MODELS, each with a reference (give them back with
 * attn_model_put) so that their names stay while an answer is written,
 * into held[], and their slots into slot[] (may be NULL).  Returns how
 * many.  Any thread. */
static inline size_t attn__hold_models(attn_registry *r, const attn_model *only,
                                       const attn_model **held, size_t *slot) {
  size_t n = attn_registry_count(r), k = 0;
  for (size_t i = 0; i < n && k < ATTN_MAX_MODELS; i++) {
    const attn_model *m = attn_registry_get_at(r, i);
    if (!m || (only && m != only)) {
      attn_model_put(m);
      continue;
    }
    if (slot) slot[k] = i;
    held[k++] = m;
  }
  return k;
}

typedef struct attn__http_req {
  const char *method;
  const char *path;             /* without the query string */
  const char *content_type;     /* NULL when absent */
  const char *content_encoding; /* NULL when absent */
  /* Inference-Header-Content-Length as sent (NULL when absent; messages
   * quote it), and as http.c read it, once, with attn__header_number:
   * header_len_ok when it is a number, header_len its value. */
  const char *header_len_text;
  bool header_len_ok;
  uint64_t header_len;
  /* The body starts pad (< 64) bytes past a 64-byte boundary, so that the
   * binary blobs after a header_len-byte JSON header lie on cache lines;
   * an inflated body is laid out the same way. */
  size_t pad;
  const char *request_id;    /* X-Request-Id, or one made up (http.c) */
  const char *authorization; /* Authorization (NULL when absent or when
                                no key is set: not read then) */
  const char *api_key;       /* X-Api-Key (likewise) */
  const char *origin;        /* Origin (NULL when absent or CORS is off) */
  const char *cors_method;   /* Access-Control-Request-Method (likewise) */
  const char *accept;        /* Accept (web.c: GET / negotiates) */
  const char *if_none_match; /* If-None-Match (web.c: 304) */
  const char *body;          /* borrowed; freed when the job completes */
  size_t body_len;
  uint64_t start_ns;
  /* its headers came before the drain began (http.c): still served
   * while draining, its body read to its end; false: refused 503 then */
  bool before_drain;
  /* attn__route_admit let it in with its headers: key and method are
   * checked already, and route is its row */
  bool admitted;
  int route;
} attn__http_req;

/* What the stages measured of an inference request, for the metrics and
 * statistics (observe.c); zero for every other answer. */
typedef struct attn__resp_trace {
  uint8_t hint;  /* attn_outcome + 1; 0: from the status (observe.c) */
  bool queued;   /* a worker took it, or it expired queued */
  bool computed; /* the model ran */
  int model;     /* index in the registry + 1; 0: not known here */
  uint64_t queue_ns, input_ns, compute_ns, output_ns, flops;
  int64_t query_tokens; /* of a request computed */
} attn__resp_trace;

typedef struct attn__http_resp {
  int status;
  const char *content_type; /* static string */
  char *body;               /* malloc'd; ownership passes to http.c */
  size_t len;
  size_t header_len; /* >0: Inference-Header-Content-Length */
  const char *allow; /* 405: Allow header */
  int retry_after_s; /* >0: Retry-After header */
  /* More headers as name, value pairs of static strings, up to the first
   * NULL name (web.c: ETag, Cache-Control, Content-Security-Policy...). */
  const char *headers[16];
  double queue_ms, compute_ms;
  /* a v2 body's "id" (infer.c), cut one byte past the longest id http.c
   * takes, so that it can tell a longer one */
  char request_id[ATTN_MAX_REQUEST_ID_LEN + 2];
  attn__resp_trace trace;
} attn__http_resp;

/* State shared by the HTTP threads and the workers. */
typedef struct attn__srv_ctx {
  const attn_config *cfg;
  attn_registry *models;
  attn_queue *queue;
  attn_pool *pool;
  int ncpu;             /* CPUs attnd may use (auto engine threads) */
  atomic_bool unready;  /* readiness 503, all else served */
  atomic_bool draining; /* readiness 503, new inference refused */
  atomic_uint_fast64_t next_id;
  attn_metrics *metrics;          /* owned by the server */
  int workers;                    /* the pool's threads */
  const atomic_size_t *body_held; /* http.c's, for attnd_body_bytes_in_use */
  size_t body_budget;
  atomic_long connections; /* open now (http.c counts them) */
  struct attn__auth *auth; /* API keys (auth.c); NULL: none */
  /* Admin keys (admin_api_keys_file, ATTND_ADMIN_API_KEY): also accepted
   * wherever auth's are, and the only ones that may load and unload.
   * auth and admin_auth both NULL: keys off, every route open. */
  struct attn__auth *admin_auth;
  struct attn_session_store *sessions; /* main's (session.h); NULL: none */
} attn__srv_ctx;

/* Threads this request may use in the engine.  A fixed
 * blas_threads_per_worker pins it; 0 (auto) gives it the cores that the
 * other workers are not busy with right now, so a lone large request gets
 * the machine and concurrent ones a core each.  (The engine itself keeps
 * small calls on one thread.) */
static inline int attn__request_threads(const attn__srv_ctx *s) {
  if (s->cfg->blas_threads_per_worker > 0)
    return s->cfg->blas_threads_per_worker;
  long others = s->pool ? (long)attn_pool_busy(s->pool) - 1 : 0;
  long t = (s->ncpu > 0 ? s->ncpu : 1) - (others > 0 ? others : 0);
  if (t > ATTN_MAX_BLAS_THREADS) t = ATTN_MAX_BLAS_THREADS;
  return t < 1 ? 1 : (int)t;
}

typedef enum { ATTN_ROUTE_DONE, ATTN_ROUTE_DEFER } attn__route_kind;

/* The kind of work a route is (its row in routes.c says): answered on the
 * HTTP thread, an inference of either protocol (the metrics count these
 * apart), or an operation of the model repository (a job). */
typedef enum {
  ATTN_ROLE_ANSWER,
  ATTN_ROLE_INFER_V1,
  ATTN_ROLE_INFER_V2,
  ATTN_ROLE_REPOSITORY,
  ATTN_ROLE_SESSION /* /v1/sessions: a session's job (session.c) */
} attn__route_role;

/* What routes.c tells of a request from its path and headers
 * (attn__route_admit, attn__route_resolve). */
typedef struct attn__admission {
  int route;       /* its row: the index of its route template */
  int model;       /* v2 inference: the URL's model, registry slot + 1 (0:
                      none of that name) */
  size_t max_body; /* the most body its route takes (0: none) */
} attn__admission;

/* What a job does: an inference of either protocol, or one of the model
 * repository's operations (repo.c). */
typedef enum {
  ATTN_JOB_V2,
  ATTN_JOB_V1,
  ATTN_JOB_REPO_INDEX,
  ATTN_JOB_REPO_LOAD,
  ATTN_JOB_REPO_UNLOAD,
  ATTN_JOB_SESSION /* /v1/sessions (session.c; the op in the target) */
} attn__job_proto;

/* What a /v1/sessions request asks (routes.c finds it, session.c runs
 * it). */
typedef enum {
  ATTN_SESSION_LIST,     /* GET /v1/sessions */
  ATTN_SESSION_GET,      /* GET /v1/sessions/{id} */
  ATTN_SESSION_CREATE,   /* PUT /v1/sessions/{id} */
  ATTN_SESSION_DELETE,   /* DELETE /v1/sessions/{id} */
  ATTN_SESSION_ATTEND,   /* POST /v1/sessions/{id}/attend */
  ATTN_SESSION_TRUNCATE, /* POST /v1/sessions/{id}/truncate */
  ATTN_SESSION_FORK,     /* POST /v1/sessions/{id}/fork */
  ATTN_SESSION_KV,       /* GET /v1/sessions/{id}/kv: the session file */
  ATTN_SESSION_IMPORT    /* PUT /v1/sessions/{id}, application/octet-stream:
                            a session file */
} attn__session_op;

/* Content-Encoding of a request body. */
typedef enum {
  ATTN_ENC_IDENTITY,
  ATTN_ENC_GZIP,
  ATTN_ENC_DEFLATE
} attn__encoding;

/* Which inference a request asks for, as routes.c found it (plain data:
 * infer.c makes the job from it and the request). */
typedef struct attn__infer_target {
  attn__job_proto proto;
  attn__encoding encoding; /* of the body; the worker inflates it first */
  size_t header_len; /* v2 binary: the JSON header's length, checked against
                        the body (a compressed body's against the limit:
                        the worker checks it once inflated); 0: all JSON */
  char model[ATTN_MAX_NAME_LEN + 1];     /* v2: from the URL; /v1: "" */
  char version[ATTN_MAX_NAME_LEN + 1];   /* v2: from the URL; "" for none */
  attn__session_op session_op;           /* ATTN_JOB_SESSION */
  char session[ATTN_SESSION_ID_MAX + 1]; /* ATTN_JOB_SESSION: the URL's id */
} attn__infer_target;

/* The job's answer: takes resp's body.  Called exactly once per queued
 * job, by the worker that ran or expired it, or by the pool's reaper when
 * it expired waiting. */
typedef void (*attn__infer_done)(void *arg, attn__http_resp *resp);

/* Has the client of the request whose completion gets arg left (closed
 * or reset its connection)?  http.c's answer, asked by the worker that
 * takes the job, once, before it runs (jobs.c); must not block. */
typedef bool (*attn__client_gone)(void *arg);

/* What every kind of job shares: the queue's link (first member, so that
 * the pool's attn_job is the job), the server, and whom to answer.  Each
 * kind (an inference: infer.c; an operation of the model repository:
 * repo.c; later a session's step) embeds it first, makes it with its own
 * run and expire, and ends it with attn__job_finish. */
typedef struct attn__job_base {
  attn_job job;
  attn__srv_ctx *srv;
  attn__infer_done done;
  void *done_arg;
  /* asked (with done_arg) when a worker takes the job; NULL: never */
  attn__client_gone gone;
  /* the kind's run: jobs.c's run_or_drop calls it unless the client has
   * gone (the queue's job.run is run_or_drop) */
  void (*run)(attn_job *job, int worker, uint64_t waited_ns);
  uint64_t start_ns; /* when the request's headers came */
} attn__job_base;

/* A job's deadline in the queue from now: now + queue_timeout_ms, or 0
 * (none) when that is 0.  Every kind of job starts from it. */
static inline uint64_t attn__queue_deadline(const attn_config *cfg,
                                            uint64_t now) {
  return cfg->queue_timeout_ms > 0
             ? now + (uint64_t)cfg->queue_timeout_ms * 1000000u
             : 0;
}

/* Hand the answer over (the completion takes resp's body) and free the
 * job.  Exactly once per job, by the worker that ran or expired it, or
 * the reaper. */
static inline void attn__job_finish(attn__job_base *b, attn__http_resp *resp) {
  b->done(b->done_arg, resp);
  free(b); /* the base is first: the whole job */
}

#endif
