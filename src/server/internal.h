/* internal.h - what the files of src/server/ share.  Not a public header.
 * docs/architecture.md is the map of every file; this is the server's.
 *
 * A request's way through them, and who calls whom (no two files call
 * each other; scripts/check-calls.py checks it):
 *   http.c    libmicrohttpd: reads the headers (Inference-Header-Content-
 *             Length once, into attn_http_req) and the body, builds an
 *             attn_http_req, asks routes.c, sends the attn_http_resp.
 *   routes.c  the route table: answers at once (health, metadata, the
 *             page via web.c, every refusal) or says which inference to
 *             run (ATTN_ROUTE_DEFER and an attn_infer_target).
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
 * Plain data crosses between them (attn_http_req, attn_http_resp,
 * attn_infer_target), so that routes.c and infer.c run in unit tests
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

typedef struct attn_http_req {
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
  /* attn__route_admit let it in with its headers: key and method are
   * checked already, and route is its row */
  bool admitted;
  int route;
} attn_http_req;

/* What the stages measured of an inference request, for the metrics and
 * statistics (observe.c); zero for every other answer. */
typedef struct attn_resp_trace {
  uint8_t hint;  /* attn_outcome + 1; 0: from the status (observe.c) */
  bool queued;   /* a worker took it, or it expired queued */
  bool computed; /* the model ran */
  int model;     /* index in the registry + 1; 0: not known here */
  uint64_t queue_ns, input_ns, compute_ns, output_ns, flops;
  int64_t query_tokens; /* of a request computed */
} attn_resp_trace;

typedef struct attn_http_resp {
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
  attn_resp_trace trace;
} attn_http_resp;

/* State shared by the HTTP threads and the workers. */
typedef struct attn_srv_ctx {
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
  struct attn_auth *auth;  /* API keys (auth.c); NULL: none, all open */
} attn_srv_ctx;

typedef enum { ATTN_ROUTE_DONE, ATTN_ROUTE_DEFER } attn_route_kind;

/* The kind of work a route is (its row in routes.c says): answered on the
 * HTTP thread, an inference of either protocol (the metrics count these
 * apart), or an operation of the model repository (a job). */
typedef enum {
  ATTN_ROLE_ANSWER,
  ATTN_ROLE_INFER_V1,
  ATTN_ROLE_INFER_V2,
  ATTN_ROLE_REPOSITORY
} attn_route_role;

/* What routes.c tells of a request from its path and headers
 * (attn__route_admit, attn__route_resolve). */
typedef struct attn_admission {
  int route;       /* its row: the index of its route template */
  int model;       /* v2 inference: the URL's model, registry slot + 1 (0:
                      none of that name) */
  size_t max_body; /* the most body its route takes (0: none) */
} attn_admission;

/* What a job does: an inference of either protocol, or one of the model
 * repository's operations (repo.c). */
typedef enum {
  ATTN_JOB_V2,
  ATTN_JOB_V1,
  ATTN_JOB_REPO_INDEX,
  ATTN_JOB_REPO_LOAD,
  ATTN_JOB_REPO_UNLOAD
} attn_job_proto;

/* Content-Encoding of a request body. */
typedef enum {
  ATTN_ENC_IDENTITY,
  ATTN_ENC_GZIP,
  ATTN_ENC_DEFLATE
} attn_encoding;

/* Which inference a request asks for, as routes.c found it (plain data:
 * infer.c makes the job from it and the request). */
typedef struct attn_infer_target {
  attn_job_proto proto;
  attn_encoding encoding; /* of the body; the worker inflates it first */
  size_t header_len; /* v2 binary: the JSON header's length, checked against
                        the body (a compressed body's against the limit:
                        the worker checks it once inflated); 0: all JSON */
  char model[ATTN_MAX_NAME_LEN + 1];   /* v2: from the URL; /v1: "" */
  char version[ATTN_MAX_NAME_LEN + 1]; /* v2: from the URL; "" for none */
} attn_infer_target;

/* routes.c: answer req now (DONE, *resp filled) or name the inference to
 * run (DEFER, *t filled, *resp untouched).  HTTP thread; never blocks. */
attn_route_kind attn__route(attn_srv_ctx *s, const attn_http_req *req,
                            attn_http_resp *resp, attn_infer_target *t);

/* routes.c: what can be told of req from its headers alone, before any
 * of the body budget is taken or a body invited (100 Continue): the API
 * key (401), the route's methods (405), and whether the route takes the
 * body announced, body bytes (UINT64_MAX: chunked, length unknown; 0:
 * none): 413 for a body on a route that takes none, or past a small
 * route's limit, 404 for a body to no route.  DONE with *resp filled, or
 * DEFER; *a is filled either way (a->max_body: the most the route takes,
 * which the caller holds a chunked body to).  A request without a body to
 * a route that refuses it for another reason is answered by attn__route.
 * HTTP thread; never blocks. */
attn_route_kind attn__route_admit(attn_srv_ctx *s, const attn_http_req *req,
                                  uint64_t body, attn_http_resp *resp,
                                  attn_admission *a);
/* routes.c: the row of a path, and for a v2 inference its model, into *a
 * (max_body 0), for a request that was never admitted (refused before:
 * observe.c).  Any thread. */
void attn__route_resolve(const attn_srv_ctx *s, const char *path,
                         attn_admission *a);

/* The job's answer: takes resp's body.  Called exactly once per queued
 * job, by the worker that ran or expired it, or by the pool's reaper when
 * it expired waiting. */
typedef void (*attn_infer_done)(void *arg, attn_http_resp *resp);

/* What every kind of job shares: the queue's link (first member, so that
 * the pool's attn_job is the job), the server, and whom to answer.  Each
 * kind (an inference: infer.c; an operation of the model repository:
 * repo.c; later a session's step) embeds it first, makes it with its own
 * run and expire, and ends it with attn__job_finish. */
typedef struct attn__job_base {
  attn_job job;
  attn_srv_ctx *srv;
  attn_infer_done done;
  void *done_arg;
  uint64_t start_ns; /* when the request's headers came */
} attn__job_base;

/* Hand the answer over (the completion takes resp's body) and free the
 * job.  Exactly once per job, by the worker that ran or expired it, or
 * the reaper. */
static inline void attn__job_finish(attn__job_base *b, attn_http_resp *resp) {
  b->done(b->done_arg, resp);
  free(b); /* the base is first: the whole job */
}

/* The makers of each kind of job, for jobs.c: a new job for req (what t
 * names; it borrows req->body, which must live until the answer), with
 * its run, expire and deadline set; NULL when out of memory.  HTTP
 * thread. */
attn__job_base *attn__infer_job(attn_srv_ctx *s, const attn_http_req *req,
                                const attn_infer_target *t);
attn__job_base *attn__repo_job(attn_srv_ctx *s, const attn_http_req *req,
                               const attn_infer_target *t);

/* jobs.c: make the job of the kind t names (attn__infer_job,
 * attn__repo_job) and queue it; done(arg, ...) gets the answer.  When it
 * cannot be queued (queue full or closed, or no memory for the job)
 * *resp is a 503, done is never called, and false is returned.  HTTP
 * thread. */
bool attn__job_submit(attn_srv_ctx *s, const attn_http_req *req,
                      const attn_infer_target *t, attn_infer_done done,
                      void *arg, attn_http_resp *resp);

/* respond.c: fill an attn_http_resp.  Any thread. */
struct attn_buf;
/* A JSON body taken from buf (buf is emptied), with status. */
void attn__resp_json(attn_http_resp *resp, int status, struct attn_buf *buf);
/* What a codec's encoder wrote into buf (200, buf emptied), or, when it
 * returned st (out of memory, say), that error (buf freed). */
void attn__resp_encoded(attn_http_resp *resp, attn_status st,
                        struct attn_buf *buf);
/* A JSON body copied from a static string. */
void attn__resp_static(attn_http_resp *resp, int status, const char *json);
/* {"error": msg} and status; a 503 also gets Retry-After: 1. */
void attn__resp_error(attn_http_resp *resp, int status, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
/* The 404 of a model the registry cannot give: it has no version
 * `version` (when given and the name has another), is not loaded (the
 * registry has its name), or is unknown.  field: where the request named
 * it ("model: " for /v1's field; "" for the URL). */
void attn__resp_no_model(attn_http_resp *resp, attn_registry *models,
                         const char *field, const char *name,
                         const char *version);
/* The 503 of a job that waited waited_ms in the queue: longer than its
 * own timeout parameter (timeout_us > 0, Triton's), else than
 * queue_timeout_ms. */
void attn__resp_waited(attn_http_resp *resp, double waited_ms,
                       int64_t timeout_us, int64_t queue_timeout_ms);
/* The error s (d's message, else attn_strerror) with its HTTP status. */
void attn__resp_status(attn_http_resp *resp, attn_status s, const attn_diag *d);
/* HTTP status for an engine/codec/model status. */
int attn__http_status(attn_status s);

/* http.c: a header value of digits, with the optional whitespace (space,
 * tab) HTTP allows around a field value (RFC 9110 5.5): 1 and *out, 2 when
 * the number is past UINT64_MAX (*out = UINT64_MAX), 0 when the value is
 * not one (or v is NULL).  Any thread. */
int attn__header_number(const char *v, uint64_t *out);

/* routes.c: the route templates, the label of attnd_http_requests_total
 * (*n of them, one per row of the table; the last is "other"), which one
 * a path is, and the kind of work a template's route is. */
const char *const *attn__route_templates(size_t *n);
int attn__route_template(const char *path);
attn_route_role attn__route_role(int route);
/* routes.c, for its unit test: the rows, and whether row i (< count) has
 * what the metrics and GET /'s list need (why, when not). */
int attn__route_count(void);
bool attn__route_row_ok(int i, char *why, size_t cap);

/* stats.c: GET /metrics (Prometheus text), and Triton's statistics of m
 * (version: the URL's, or NULL), or of every model when m is NULL. */
void attn__metrics_answer(attn_srv_ctx *s, attn_http_resp *resp);
void attn__stats_answer(attn_srv_ctx *s, const attn_model *m,
                        attn_http_resp *resp);

/* observe.c: count one request that ended in the metrics (attnd_http_*,
 * and attnd_inference_* for an inference route).  answered: the server
 * answered it (status is its answer's; else libmicrohttpd's or 499);
 * resp: its answer's trace.  The request's HTTP thread. */
typedef struct attn_ended {
  const char *method, *path;
  int status;
  bool answered;
  uint64_t bytes_in, bytes_out;
  uint64_t total_ns; /* as the access log's total_ms */
  uint64_t end_ns;   /* attn_now_ns() now */
  const attn_resp_trace *trace;
  const attn_admission *route; /* its route, when admitted; NULL: not */
} attn_ended;
void attn__observe(attn_srv_ctx *s, const attn_ended *e);

/* http.c: the path of a request target: origin-form as it is, absolute-
 * form ("http://host/path", RFC 9112 3.2.2) by its path ("/" when it has
 * none).  Points into url.  Any thread. */
const char *attn__target_path(const char *url);
/* http.c: the offset of the first control byte (below 0x20, or DEL) in a
 * decoded path, -1 when there is none.  Any thread. */
long attn__path_control(const char *path);

/* inflate.c: *out from a Content-Encoding header (NULL: identity); 0 when
 * it is not one of identity, gzip, x-gzip, deflate (case-insensitive). */
int attn__encoding_parse(const char *ce, attn_encoding *out);
const char *attn__encoding_name(attn_encoding e);
/* Inflate in[0, n) (gzip, or deflate: zlib or raw) into a new 64-byte
 * aligned block *mem (free() it) holding the body from byte pad (< 64) on,
 * *len bytes.  Errors: ATTN_ETOOBIG (more than max bytes, or, when ratio
 * is not 0, more than ratio x n and ATTN_INFLATE_FLOOR_BYTES), ATTN_EPARSE
 * (corrupt or truncated stream, bytes after it), ATTN_ENOMEM; nothing is
 * left allocated then.  Any thread; meant for workers. */
attn_status attn__inflate(const char *in, size_t n, attn_encoding e, size_t max,
                          unsigned ratio, size_t pad, char **mem, size_t *len,
                          attn_diag *d);

/* auth.c: API keys (see its DESIGN).  A key set is immutable; an
 * attn_auth holds the one in force and swaps it on reload. */
typedef struct attn__keyset attn__keyset;
typedef struct attn_auth attn_auth;
/* Keys from text[0, len) (the lines of a keys file; text may be NULL) and
 * env_key (ATTND_API_KEY; NULL or "" for none).  where names the text in
 * messages ("api_keys_file '/etc/attnd/keys'").  ATTN_EINVAL for a line
 * that is not a key or no key at all, ATTN_ETOOBIG past ATTN_MAX_API_KEYS;
 * messages give the line, never a key.  Pure. */
attn_status attn__keys_parse(const char *text, size_t len, const char *where,
                             const char *env_key, attn__keyset **out,
                             attn_diag *d);
void attn__keys_free(attn__keyset *set);
size_t attn__keys_count(const attn__keyset *set);
/* Is tok[0, n) one of the keys?  Constant time in the keys' bytes. */
int attn__keys_match(const attn__keyset *set, const char *tok, size_t n);
/* *out holds the keys of api_keys_file path and env_key, or is NULL when
 * both are unset (or ""): no key, every route open.  Errors: the file
 * cannot be read, or see attn__keys_parse.  Main thread. */
attn_status attn__auth_create(const char *path, const char *env_key,
                              attn_auth **out, attn_diag *d);
/* Re-read the file: on success the new keys are in force and *count says
 * how many; on error the old ones stay.  Main thread, while serving. */
attn_status attn__auth_reload(attn_auth *a, size_t *count, attn_diag *d);
size_t attn__auth_count(attn_auth *a);
void attn__auth_destroy(attn_auth *a);
typedef enum {
  ATTN_AUTH_OK,      /* a key matched (or a is NULL: no keys) */
  ATTN_AUTH_MISSING, /* neither header was sent */
  ATTN_AUTH_SCHEME,  /* Authorization of another scheme than Bearer */
  ATTN_AUTH_WRONG    /* a key was sent and is not one of them */
} attn_auth_result;
/* The request's Authorization and X-Api-Key values (NULL when absent)
 * against the keys.  Any thread. */
attn_auth_result attn__auth_check(attn_auth *a, const char *authorization,
                                  const char *api_key);
/* Count one refused request / read the count (0 for NULL).  Any thread. */
void attn__auth_refused(attn_auth *a);
uint64_t attn__auth_failures(attn_auth *a);

/* cors.c: is origin (the Origin header, NULL when absent) one of list
 * (cors_allow_origins: origins separated by commas or spaces, or "*";
 * checked by the config)?  0 for an empty list.  Pure. */
int attn__cors_allowed(const char *list, const char *origin);
/* The headers a browser may send and read, for the preflight's answer and
 * every answer's Access-Control-Expose-Headers. */
#define ATTN_CORS_ALLOW_HEADERS                                \
  "Authorization, X-Api-Key, Content-Type, Content-Encoding, " \
  "Inference-Header-Content-Length, X-Request-Id, traceparent, Accept"
#define ATTN_CORS_EXPOSE_HEADERS                                 \
  "Inference-Header-Content-Length, X-Request-Id, Retry-After, " \
  "WWW-Authenticate"
#define ATTN_CORS_ALLOW_METHODS "GET, HEAD, POST, OPTIONS"

/* peers.c: closes connections whose client left between requests without
 * libmicrohttpd seeing it (see the file's DESIGN).  One attn_peers per
 * listener (port, and metrics_port when set); one attn_peer per open
 * connection. */
typedef struct attn_peers attn_peers;
typedef struct attn_peer attn_peer;
/* A registry, with a sweeper thread that calls attn__peers_sweep every
 * interval_ms (none when interval_ms <= 0: tests sweep by hand).  On
 * error *out is NULL and nothing is left.  Main thread. */
attn_status attn__peers_create(int interval_ms, attn_peers **out, attn_diag *d);
/* Stops the sweeper and frees all; NULL is a no-op.  After the daemon
 * has stopped.  Main thread. */
void attn__peers_destroy(attn_peers *p);
/* One look at every peer not handling a request: shuts down the sockets
 * seen at their end twice in a row with no request begun in between, and
 * cuts (408) the requests past the time limits (attn_peer_limits) as of
 * now (attn_now_ns's clock; a test hands a later one instead of
 * sleeping).  Returns how many this call shut down.  Sweeper (or a
 * test). */
int attn__peers_sweep(attn_peers *p, uint64_t now);
/* Connections shut down by sweeps so far.  Any thread. */
unsigned long long attn__peers_closed(attn_peers *p);
/* The limits the sweeps and admission keep (see peers.c's DESIGN). */
typedef struct attn_peer_limits {
  int header_timeout_s;  /* 0: headers and bodies not timed */
  int64_t body_min_rate; /* bytes/s; 0: bodies not timed */
  int max_connections;   /* past it, room is made or the client refused */
  int max_per_ip;        /* 0: no limit per address */
  int access_log;        /* write access lines for header timeouts */
  int tls; /* the listener speaks TLS: refusals only shut the socket down
              (plain HTTP written there would break the TLS stream) */
  /* header timeouts are counted here (no request began, so http.c never
   * sees them), under the route template metrics_route; NULL: not */
  attn_metrics *metrics;
  int metrics_route;
  /* the listener, named in the limit's warning and 503 (NULL: port's) */
  const char *name;
} attn_peer_limits;
/* libmicrohttpd's connection limit is max_connections plus this, so that
 * it accepts the connections that attn__peers_admit refuses. */
#define ATTN_ADMIT_HEADROOM 32
/* Why a connection was cut (attn__peer_cut). */
enum {
  ATTN_PEER_CUT_HEADERS = 1, /* header_timeout_s */
  ATTN_PEER_CUT_BODY,        /* body_min_rate_bytes_s */
  ATTN_PEER_CUT_EVICTED,     /* closed to make room at max_connections */
  ATTN_PEER_CUT_REFUSED      /* refused at the limit (503 or 429) */
};
/* Set the limits, before the first connection.  Main thread. */
void attn__peers_set_limits(attn_peers *p, const attn_peer_limits *lim);
/* Register the connection on socket fd from address sa (NULL: unknown);
 * NULL when out of memory (the connection is then not watched).  MHD
 * thread, when it opens. */
struct sockaddr;
attn_peer *attn__peer_open(attn_peers *p, int fd, const struct sockaddr *sa);
/* Admit the connection e just opened: 0, or the status (429 past
 * max_per_ip, 503 when max_connections are all handling requests) already
 * written on its socket, which is shut down.  Makes room at the limit by
 * shutting down the idle connection that waited longest (kept-alive ones
 * first).  NULL is admitted.  MHD thread, right after attn__peer_open. */
int attn__peers_admit(attn_peers *p, attn_peer *e);
/* A small JSON answer ({"error": msg}; msg holds no quote or backslash)
 * written straight on a socket, with Connection: close, for the moments
 * libmicrohttpd cannot answer (a body being read, a connection it has not
 * begun to read).  One non-blocking send; errors ignored.  Any thread.
 * Plain TCP only: on a TLS connection these bytes would break the stream,
 * so when the listener speaks TLS the callers only shut the socket
 * down (peers.c's cut_slow and attn__peers_admit: attn_peer_limits.tls;
 * http.c's refuse_too_big: no fd under TLS). */
void attn__raw_answer(int fd, int status, const char *request_id,
                      int retry_after_s, const char *msg);
/* Unregister (NULL is a no-op), before the socket is closed. */
void attn__peer_close(attn_peers *p, attn_peer *e);
/* A request begins (its headers are read) / has ended (completed or cut):
 * the sweeper leaves a peer alone in between, but for the body's rate.
 * begin returns 0 when the connection was cut already (give it up).  NULL
 * is a no-op (1).  The connection's MHD thread. */
int attn__peer_begin(attn_peer *e);
void attn__peer_end(attn_peer *e);
/* The request's body: it begins (after the headers), received bytes so
 * far (0: the connection was cut, give it up), it is whole or answered
 * (0: cut).  NULL is a no-op (1).  The connection's MHD thread. */
void attn__peer_body_begin(attn_peer *e);
int attn__peer_body_bytes(attn_peer *e, uint64_t received);
int attn__peer_body_end(attn_peer *e);
/* Why the connection was cut (ATTN_PEER_CUT_*), 0 when it was not. */
int attn__peer_cut(const attn_peer *e);
/* Mutual TLS: the verdict on the client certificate der[0, n) when this
 * connection verified that very certificate within the last
 * ATTN_PEER_CERT_TTL_NS (the ok, >= 0, given to remember: http.c's
 * meaning), else -1 (NULL: -1).  remember keeps der (up to
 * ATTN_PEER_CERT_MAX bytes), its verdict and when, for the connection's
 * life.  Times on attn_now_ns's clock.  The connection's
 * MHD thread. */
#define ATTN_PEER_CERT_MAX 16384
#define ATTN_PEER_CERT_TTL_NS (60ull * 1000000000ull)
int attn__peer_cert_known(const attn_peer *e, const void *der, size_t n,
                          uint64_t now_ns);
void attn__peer_cert_remember(attn_peer *e, const void *der, size_t n, int ok,
                              uint64_t now_ns);

#endif
