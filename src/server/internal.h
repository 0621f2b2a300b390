/* internal.h - what http.c, routes.c and infer.c share.  Not a public
 * header.
 *
 * http.c turns a libmicrohttpd request into an attn_http_req (plain data:
 * method, path, a few headers, the body) and an attn_http_resp back into a
 * libmicrohttpd response.  routes.c maps one to the other without sockets:
 * it answers at once (health, metadata, errors) or hands back a job that
 * http.c queues after suspending the connection; infer.c runs that job on a
 * worker thread and calls the completion, which resumes the connection. */
#ifndef ATTN_SERVER_INTERNAL_H
#define ATTN_SERVER_INTERNAL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "attn/config.h"
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

typedef struct attn_http_req {
  const char *method;
  const char *path; /* without the query string */
  const char *content_type;     /* NULL when absent */
  const char *content_encoding; /* NULL when absent */
  const char *header_len;       /* Inference-Header-Content-Length */
  const char *request_id;       /* X-Request-Id */
  const char *accept;           /* Accept (web.c: GET / negotiates) */
  const char *if_none_match;    /* If-None-Match (web.c: 304) */
  const char *body;             /* borrowed; freed when the job completes */
  size_t body_len;
  uint64_t start_ns;
} attn_http_req;

typedef struct attn_http_resp {
  int status;
  const char *content_type; /* static string */
  char *body;               /* malloc'd; ownership passes to http.c */
  size_t len;
  size_t header_len;        /* >0: Inference-Header-Content-Length */
  const char *allow;        /* 405: Allow header */
  int retry_after_s;        /* >0: Retry-After header */
  /* More headers as name, value pairs of static strings, up to the first
   * NULL name (web.c: ETag, Cache-Control, Content-Security-Policy...). */
  const char *headers[16];
  double queue_ms, compute_ms;
  char request_id[72];
} attn_http_resp;

/* State shared by the HTTP threads and the workers. */
typedef struct attn_srv_ctx {
  const attn_config *cfg;
  const attn_registry *models;
  attn_queue *queue;
  attn_pool *pool;
  int ncpu; /* CPUs attnd may use (auto engine threads) */
  atomic_bool unready;  /* readiness 503, all else served */
  atomic_bool draining; /* readiness 503, new inference refused */
  atomic_uint_fast64_t next_id;
} attn_srv_ctx;

typedef enum { ATTN_ROUTE_DONE, ATTN_ROUTE_DEFER } attn_route_kind;

typedef enum { ATTN_JOB_V2, ATTN_JOB_V1 } attn_job_proto;

/* Content-Encoding of a request body. */
typedef enum {
  ATTN_ENC_IDENTITY,
  ATTN_ENC_GZIP,
  ATTN_ENC_DEFLATE
} attn_encoding;

/* One inference request on its way through the queue.  Created by routes.c,
 * completed exactly once through `complete` (on a worker thread, or on the
 * HTTP thread when the queue refuses it), then freed by the completer. */
typedef struct attn_infer_job {
  attn_job job; /* queue link; first member */
  attn_srv_ctx *srv;
  attn_job_proto proto;
  char *model, *version; /* v2: from the URL */
  const char *body;      /* borrowed from the connection; freed by complete */
  size_t body_len;
  attn_encoding encoding; /* of body; the worker inflates it first */
  size_t header_len;     /* v2 binary: Inference-Header-Content-Length (of
                            the body once inflated) */
  char request_id[72];
  uint64_t start_ns;
  void (*complete)(void *arg, attn_http_resp *resp); /* takes resp's body */
  void *complete_arg;
} attn_infer_job;

/* routes.c: answer req now (DONE, *resp filled) or return a job to queue
 * (DEFER, *job set, *resp untouched).  HTTP thread; never blocks. */
attn_route_kind attn__route(attn_srv_ctx *s, const attn_http_req *req,
                            attn_http_resp *resp, attn_infer_job **job);

/* infer.c: queue the job (deadline from queue_timeout_ms).  On a full or
 * closed queue, fills *resp with 503 and frees the job: returns false. */
bool attn__infer_submit(attn_infer_job *job, attn_http_resp *resp);
void attn__infer_job_free(attn_infer_job *job);

/* Fill resp with {"error": msg} and status. */
void attn__resp_error(attn_http_resp *resp, int status, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
/* Fill resp with a JSON body taken from buf (buf is emptied). */
struct attn_buf;
void attn__resp_json(attn_http_resp *resp, int status, struct attn_buf *buf);

/* inflate.c: *out from a Content-Encoding header (NULL: identity); 0 when
 * it is not one of identity, gzip, x-gzip, deflate (case-insensitive). */
int attn__encoding_parse(const char *ce, attn_encoding *out);
const char *attn__encoding_name(attn_encoding e);
/* Inflate in[0, n) (gzip, or deflate: zlib or raw) into a new 64-byte
 * aligned block *mem (free() it) holding the body from byte pad (< 64) on,
 * *len bytes.  Errors: ATTN_ETOOBIG (more than max bytes), ATTN_EPARSE
 * (corrupt or truncated stream, bytes after it), ATTN_ENOMEM; nothing is
 * left allocated then.  Any thread; meant for workers. */
attn_status attn__inflate(const char *in, size_t n, attn_encoding e,
                          size_t max, size_t pad, char **mem, size_t *len,
                          attn_diag *d);

/* HTTP status for an engine/codec/model status. */
int attn__http_status(attn_status s);

/* peers.c: closes connections whose client left between requests without
 * libmicrohttpd seeing it (see the file's DESIGN).  One attn_peers per
 * server; one attn_peer per open connection. */
typedef struct attn_peers attn_peers;
typedef struct attn_peer attn_peer;
/* A registry, with a sweeper thread that calls attn__peers_sweep every
 * interval_ms (none when interval_ms <= 0: tests sweep by hand).  On
 * error *out is NULL and nothing is left.  Main thread. */
attn_status attn__peers_create(int interval_ms, attn_peers **out,
                               attn_diag *d);
/* Stops the sweeper and frees all; NULL is a no-op.  After the daemon
 * has stopped.  Main thread. */
void attn__peers_destroy(attn_peers *p);
/* One look at every peer not handling a request: shuts down the sockets
 * seen at their end twice in a row with no request begun in between.
 * Returns how many this call shut down.  Sweeper (or a test). */
int attn__peers_sweep(attn_peers *p);
/* Connections shut down by sweeps so far.  Any thread. */
unsigned long long attn__peers_closed(attn_peers *p);
/* Register the connection on socket fd; NULL when out of memory (the
 * connection is then not watched).  MHD thread, when it opens. */
attn_peer *attn__peer_open(attn_peers *p, int fd);
/* Unregister (NULL is a no-op), before the socket is closed. */
void attn__peer_close(attn_peers *p, attn_peer *e);
/* A request begins (its headers are read) / has ended (completed or cut):
 * the sweeper leaves a peer alone in between.  NULL is a no-op.  The
 * connection's MHD thread. */
void attn__peer_begin(attn_peer *e);
void attn__peer_end(attn_peer *e);

#endif
