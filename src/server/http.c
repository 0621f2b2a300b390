/* http.c - the only file that includes microhttpd.h.
 *
 * DESIGN
 * libmicrohttpd runs its own I/O threads (a pool of http_threads, epoll).
 * On those threads we only gather the body (refusing more than
 * max_body_bytes with 413, and a body that would take all bodies held past
 * the budget, max_total_body_bytes, with 503; from Content-Length before
 * reading it when the client sends one), build a plain attn__http_req and
 * ask routes.c.  The access handler, on_request, is its stages:
 * on_headers (the context, the request id, the checks that need no body:
 * the header section read strictly, the framing, then what the route
 * says from the headers alone, attn__route_admit: the key, the method,
 * the body it takes; only then is any of the body budget taken or a
 * 100 Continue sent; Inference-Header-Content-Length read once and the
 * body's pad from it),
 * on_body (each piece), on_end (route), and the answer once a worker has
 * resumed the connection.  An immediate answer is queued at once; for an
 * inference the connection is suspended (MHD_suspend_connection) and then
 * attn__job_submit (jobs.c) makes and queues the job, so a worker can
 * never resume a connection that is not yet suspended.  The worker's
 * completion stores the response in the connection's context and resumes
 * it; the access handler runs again and queues that response.  A full
 * queue is answered with 503 right away.  The worker that takes the job
 * first asks client_gone() whether the client has left (peers.c peeks
 * the socket, which libmicrohttpd neither reads nor closes while the
 * connection is suspended); if so the job is dropped (jobs.c) and the
 * resumed connection answered 499 (to nobody) and closed, logged
 * "dropped_queued".
 * Threads: on_request and on_completed run on MHD threads; complete() runs
 * on a worker and touches only its own connection's context before
 * MHD_resume_connection (a release point for libmicrohttpd's ITC).
 * Invariants: a context lives from the first callback to on_completed; it is
 * never freed while its connection is suspended, so the borrowed body stays
 * valid for the job.  `body_held` is the sum of every context's
 * `reserved`: its body buffer's size (or the Content-Length before the
 * buffer exists) until a worker has answered, then the answer's length
 * (hold_answer frees the body then); a context gives its share back when
 * it stops keeping its body or ends.
 * `inflight` counts the requests being answered (routed, queued, running or
 * being sent: see answering()) for draining.  `arriving` counts the
 * requests whose headers came before the drain began and that are not
 * routed yet (their body is still arriving; settle()):
 * attn_server_wait_arrivals waits for them, within drain_timeout_ms,
 * before main closes the queue, and routes.c serves them while draining
 * (attn__http_req.before_drain); one that stalls past it is cut at exit.
 * The same requests are on
 * the `live` list (under `mu`) until on_completed, so that when
 * drain_timeout_ms passes attn_server_abandon() can write the access line
 * of each one the exit cuts off; `abandoned` then keeps on_completed from
 * writing a second one.  Each request's line is written exactly once:
 * whoever unlinks it (on_completed, or abandon, which unlinks none but
 * stops every later on_completed from logging) writes it.
 * metrics_port, when set, is a second daemon (one thread, plain HTTP) for
 * the scrapes and the health probes: GET /metrics, /v2/health/live and
 * /v2/health/ready, answered by routes.c's table; it reads no body, and
 * its connections have their own registry in peers.c (header_timeout_s,
 * admission), so that no client of port, nor a flood of its own, keeps a
 * probe out (start_metrics_port).
 */
#include <gnutls/gnutls.h>
#include <gnutls/x509.h>
#include <microhttpd.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "attn/log.h"
#include "attn/server.h"
#include "internal.h"
#include "routes.h"
#include "jobs.h"
#include "respond.h"
#include "http.h"
#include "observe.h"
#include "auth.h"
#include "cors.h"
#include "peers.h"

/* Are keys on (either kind)?  Then the key headers are read. */
#define KEYS_ON(s) ((s)->ctx.auth || (s)->ctx.admin_auth)

#define BODY_INITIAL (64 * 1024)
/* How often peers.c looks at connections between requests (a client that
 * left is closed after two to three of these). */
#define PEER_SWEEP_MS 500

struct attn_server {
  attn__srv_ctx ctx;
  struct MHD_Daemon *daemon;
  struct MHD_Daemon *metrics_daemon; /* metrics_port's; NULL: none */
  int metrics_port;
  int port;
  atomic_int inflight;
  /* requests whose headers came before the drain began and that are not
   * routed yet (their body is arriving): attn_server_wait_arrivals waits
   * for them before the queue is closed */
  atomic_int arriving;
  /* while draining: when the latest request's headers came (attn_now_ns),
   * for attn_server_wait_idle's quiet period */
  atomic_uint_fast64_t drain_begun_ns;
  size_t body_budget;      /* deps->body_budget */
  atomic_size_t body_held; /* bytes reserved by all contexts (reserve()) */
  pthread_mutex_t mu;      /* live, abandoned; request_id after answering */
  struct conn_ctx *live;   /* the contexts counted in inflight */
  int abandoned;           /* attn_server_abandon() has logged them */
  attn__peers *peers;      /* every open connection (peers.c) */
  char id_prefix[9];       /* of the request ids made up: 8 random hex */
  char *tls_cert, *tls_key, *tls_ca; /* PEM, for the daemon's life */
  /* metrics_port's open connections, as peers; NULL: no metrics_port */
  attn__peers *metrics_peers;
};

/* Why a body is being discarded instead of kept. */
typedef enum { KEEP, TOO_BIG, OVER_BUDGET } body_fate;

typedef struct conn_ctx {
  attn_server *srv;
  struct MHD_Connection *conn;
  char method[16];
  char path[ATTN_MAX_URL_LEN + 1];
  char *mem;  /* the body buffer; body = mem + pad */
  char *body; /* NULL until the first byte */
  size_t pad; /* puts the binary blobs on a 64-byte boundary (see below) */
  const char *ihcl;  /* Inference-Header-Content-Length; NULL: absent */
  int ihcl_ok;       /* ihcl is a number (attn__header_number), ... */
  uint64_t ihcl_val; /* ... this one */
  size_t len, cap;
  size_t reserved;     /* bytes of body_held that are this request's */
  body_fate fate;      /* KEEP, or why the rest of the body is discarded */
  size_t drained;      /* bytes discarded since fate != KEEP */
  size_t received;     /* body bytes read, kept or not (the access log's) */
  size_t expect;       /* the Content-Length; SIZE_MAX when chunked (or none) */
  attn__admission adm; /* what routes.c said of it (attn__route_admit) */
  int admitted;        /* adm is filled */
  int fd;              /* the client's socket, for peer_gone(); -1 unknown */
  int peer_closed;     /* peer_gone() saw the client leave */
  int peer_eof;        /* a chunked body's socket is at its end (see below) */
  int suspended;
  int answering;      /* counted in inflight (see answering()) */
  int must_close;     /* answer with Connection: close (see check_framing()) */
  int before_drain;   /* its headers came before the drain began */
  int arriving;       /* counted in srv->arriving (see settle()) */
  const char *closed; /* the access log's "closed" when attnd cut it */
  int dropped;        /* its client left while it was queued: not run */
  atomic_int done;    /* a worker stored resp */
  struct conn_ctx *prev, *next; /* on srv->live while answering */
  attn__peer *peer;             /* the connection's, in srv->peers */
  attn__http_resp resp;
  uint64_t start_ns;
  int status;
  size_t bytes_out;
  int id_given;           /* request_id is the request's X-Request-Id */
  int cors;               /* the Origin is allowed: answers get CORS headers */
  const char *origin;     /* Origin, when CORS is on */
  const char *user_agent; /* User-Agent, when the access log is on */
  char request_id[ATTN_MAX_REQUEST_ID_LEN + 1];
  char trace_id[33]; /* of a valid traceparent; "" for none */
} conn_ctx;

/* Make this request's share of body_held `want` bytes: 1, or 0 when that
 * would take body_held past body_budget (nothing changes then).  Any MHD
 * thread; the budget is shared by all. */
static int reserve(conn_ctx *cx, size_t want) {
  attn_server *s = cx->srv;
  if (want == cx->reserved) return 1; /* no body: no shared write */
  size_t held = atomic_load(&s->body_held);
  for (;;) {
    size_t next = held - cx->reserved + want;
    if (want > cx->reserved && next > s->body_budget) return 0;
    if (atomic_compare_exchange_weak(&s->body_held, &held, next)) break;
  }
  cx->reserved = want;
  return 1;
}

/* Has the client closed (or reset) its side?  Asked when a body with a
 * Content-Length is still incomplete after the bytes just read.
 * libmicrohttpd 0.9.75 (epoll) can miss a FIN that arrives together with a
 * client's last bytes and would keep such a connection, its body and its
 * share of the budget until connection_timeout_s.  libmicrohttpd hands
 * over every body byte it has read at once, so when the socket is at its
 * end the rest of the body will never come, and the connection may be
 * closed.  Not so for a chunked body, handed over one chunk at a time: its
 * later chunks may wait in libmicrohttpd's buffer while the socket is at
 * its end already (a client that half-closes after sending), so a chunked
 * body is not cut: see chunked_peer_check().  Nor would a TLS one be, whose
 * library buffers bytes of its own.  Peeks one byte, reads nothing; a body
 * arriving in one piece (every small request) never asks. */
static int peer_gone(conn_ctx *cx) {
  char c;
  if (cx->fd < 0) return 0;
  ssize_t r = recv(cx->fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
  if (r > 0 ||
      (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)))
    return 0;
  cx->peer_closed = 1;
  return 1;
}

static const char *header(struct MHD_Connection *c, const char *name) {
  return MHD_lookup_connection_value(c, MHD_HEADER_KIND, name);
}

/* From here on the request is answered: count it in inflight (once), so
 * that draining waits for its answer to be sent.  MHD thread. */
static void answering(conn_ctx *cx) {
  attn_server *s = cx->srv;
  if (cx->answering) return;
  cx->answering = 1;
  atomic_fetch_add(&s->inflight, 1);
  pthread_mutex_lock(&s->mu);
  cx->prev = NULL;
  cx->next = s->live;
  if (s->live) s->live->prev = cx;
  s->live = cx;
  pthread_mutex_unlock(&s->mu);
}

/* cx is routed (its job queued, or an answer chosen) or ended: it no
 * longer counts in arriving.  After answering(), so that the drain never
 * sees both at 0 in between.  MHD thread. */
static void settle(conn_ctx *cx) {
  if (!cx->arriving) return;
  cx->arriving = 0;
  atomic_fetch_sub(&cx->srv->arriving, 1);
}

/* Take cx off the live list; 1 when its access line is still to be
 * written (attn_server_abandon has not written it).  MHD thread. */
static int unlink_live(conn_ctx *cx) {
  attn_server *s = cx->srv;
  pthread_mutex_lock(&s->mu);
  if (cx->prev)
    cx->prev->next = cx->next;
  else
    s->live = cx->next;
  if (cx->next) cx->next->prev = cx->prev;
  int log = !s->abandoned;
  pthread_mutex_unlock(&s->mu);
  return log;
}

/* CORS on: an allowed origin may read the answer and the headers a client
 * needs (cors.c).  Vary: Origin whenever the answer depends on it. */
static void cors_headers(conn_ctx *cx, struct MHD_Response *r) {
  const char *list = cx->srv->ctx.cfg->cors_allow_origins;
  int any = list[0] == '*' && list[1] == '\0';
  if (!any) MHD_add_response_header(r, "Vary", "Origin");
  if (!cx->cors) return;
  MHD_add_response_header(r, "Access-Control-Allow-Origin",
                          any ? "*" : cx->origin);
  MHD_add_response_header(r, "Access-Control-Expose-Headers",
                          ATTN_CORS_EXPOSE_HEADERS);
}

/* The headers resp asks for on r: Content-Type (none for a 204),
 * Inference-Header-Content-Length, Allow, Retry-After and resp->headers.
 * Both listeners' answers. */
static void resp_headers(struct MHD_Response *r, const attn__http_resp *resp) {
  char num[32];
  if (resp->status != 204)
    MHD_add_response_header(
        r, MHD_HTTP_HEADER_CONTENT_TYPE,
        resp->content_type ? resp->content_type : "application/json");
  if (resp->header_len) {
    snprintf(num, sizeof num, "%zu", resp->header_len);
    MHD_add_response_header(r, "Inference-Header-Content-Length", num);
  }
  if (resp->allow)
    MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, resp->allow);
  if (resp->retry_after_s > 0) {
    snprintf(num, sizeof num, "%d", resp->retry_after_s);
    MHD_add_response_header(r, MHD_HTTP_HEADER_RETRY_AFTER, num);
  }
  for (size_t i = 0; i + 1 < sizeof resp->headers / sizeof resp->headers[0] &&
                     resp->headers[i];
       i += 2)
    MHD_add_response_header(r, resp->headers[i], resp->headers[i + 1]);
}

/* Queue resp on the connection; takes resp->body.  MHD thread. */
static enum MHD_Result send_resp(conn_ctx *cx, attn__http_resp *resp) {
  struct MHD_Response *r;
  answering(cx);
  settle(cx);
  if (!resp->body) { /* encoding failed for lack of memory */
    static const char oom[] = "{\"error\":\"out of memory\"}";
    resp->status = 503;
    resp->body = strdup(oom);
    resp->len = resp->body ? sizeof oom - 1 : 0;
  }
  r = MHD_create_response_from_buffer(resp->len, resp->body,
                                      MHD_RESPMEM_MUST_FREE);
  if (!r) {
    free(resp->body);
    resp->body = NULL;
    return MHD_NO;
  }
  resp->body = NULL;
  resp_headers(r, resp);
  if (cx->request_id[0])
    MHD_add_response_header(r, "X-Request-Id", cx->request_id);
  if (cx->srv->ctx.cfg->cors_allow_origins[0]) cors_headers(cx, r);
  /* while draining every answer ends its connection: the client's next
   * request goes to a connection of another replica, not into a socket
   * this attnd may no longer read */
  if (cx->must_close || atomic_load(&cx->srv->ctx.draining))
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONNECTION, "close");
  cx->status = resp->status;
  cx->bytes_out = resp->len;
  if (resp != &cx->resp) cx->resp.trace = resp->trace; /* for observe.c */
  enum MHD_Result ret = MHD_queue_response(cx->conn, (unsigned)resp->status, r);
  MHD_destroy_response(r);
  return ret;
}

static enum MHD_Result send_error(conn_ctx *cx, int status, const char *msg) {
  attn__http_resp resp = {0};
  attn__resp_error(&resp, status, "%s", msg);
  return send_resp(cx, &resp);
}

/* 503 for a body of n bytes that the budget has no room for.  Held counts
 * request bodies and answers waiting to be sent, but not the body still
 * arriving (held is read after this request's share is given back). */
static enum MHD_Result send_over_budget(conn_ctx *cx, uint64_t n) {
  char msg[256];
  reserve(cx, 0);
  snprintf(msg, sizeof msg,
           "server busy: the request and response bodies it holds (%zu "
           "bytes) and this request's (%llu bytes) would pass "
           "max_total_body_bytes=%zu; retry after a moment",
           atomic_load(&cx->srv->body_held), (unsigned long long)n,
           cx->srv->body_budget);
  return send_error(cx, 503, msg);
}

/* Free the body buffer; its share of body_held is the caller's to give
 * back or to turn into the answer's. */
static void free_body(conn_ctx *cx) {
  free(cx->mem);
  cx->mem = cx->body = NULL;
  cx->len = 0;
}

/* Stop keeping a body that arrives in pieces (n bytes just now): free what
 * was kept, count the rest as drained, and answer when it ends. */
static enum MHD_Result discard(conn_ctx *cx, body_fate why, size_t n) {
  cx->fate = why;
  cx->drained = n;
  free_body(cx);
  reserve(cx, 0);
  return MHD_YES;
}

/* A request id attnd takes as it is: 1 to ATTN_MAX_REQUEST_ID_LEN bytes of
 * printable ASCII (spaces included), so that it is safe in a header and a
 * log line.  Its length, or 0 when it is not one (or id is NULL). */
static size_t sane_id(const char *id) {
  size_t n = 0;
  if (!id) return 0;
  for (; id[n]; n++)
    if (n == ATTN_MAX_REQUEST_ID_LEN || (unsigned char)id[n] < 0x20 ||
        id[n] == 0x7f || (unsigned char)id[n] > 0x7e)
      return 0;
  return n;
}

/* "PREFIX-N", the id of a request that brought no sane X-Request-Id:
 * PREFIX is 8 random hex digits drawn when the server starts (ids of
 * replicas and restarts differ), N counts requests. */
static void make_id(conn_ctx *cx, uint64_t n) {
  char t[24], *p = t + sizeof t;
  _Static_assert(sizeof cx->request_id >= 9 + sizeof t, "PREFIX-N fits");
  do {
    *--p = (char)('0' + n % 10);
    n /= 10;
  } while (n);
  memcpy(cx->request_id, cx->srv->id_prefix, 8);
  cx->request_id[8] = '-';
  memcpy(cx->request_id + 9, p, (size_t)(t + sizeof t - p));
  cx->request_id[9 + (t + sizeof t - p)] = '\0';
}

static int lower_hex(const char *p, size_t n, int *nonzero) {
  *nonzero = 0;
  for (size_t i = 0; i < n; i++) {
    if (!((p[i] >= '0' && p[i] <= '9') || (p[i] >= 'a' && p[i] <= 'f')))
      return 0;
    *nonzero |= p[i] != '0';
  }
  return 1;
}

/* The trace id of a W3C traceparent ("00-TRACEID-PARENTID-FLAGS": 2, 32,
 * 16 and 2 lower-case hex digits, ids not all zeros, version not ff; a
 * later version may add fields after a '-') into out[33]; "" when v is
 * absent or not one. */
static void trace_id(const char *v, char out[33]) {
  int nz, nz_trace, nz_parent;
  out[0] = '\0';
  if (!v || strnlen(v, 56) < 55 || !lower_hex(v, 2, &nz) ||
      !strncmp(v, "ff", 2) || v[2] != '-' || !lower_hex(v + 3, 32, &nz_trace) ||
      v[35] != '-' || !lower_hex(v + 36, 16, &nz_parent) || v[52] != '-' ||
      !lower_hex(v + 53, 2, &nz) || !nz_trace || !nz_parent)
    return;
  if (v[55] && (!strncmp(v, "00", 2) || v[55] != '-')) return;
  memcpy(out, v + 3, 32);
  out[32] = '\0';
}

/* The request's ids (X-Request-Id, or one made up; traceparent's trace
 * id) and, with CORS on, whether its Origin may read the answer. */
static void request_ids(conn_ctx *cx) {
  attn_server *s = cx->srv;
  const char *rid = header(cx->conn, "X-Request-Id");
  size_t n = sane_id(rid);
  cx->id_given = n > 0;
  if (n)
    memcpy(cx->request_id, rid, n + 1);
  else
    make_id(cx, atomic_fetch_add(&s->ctx.next_id, 1));
  trace_id(header(cx->conn, "traceparent"), cx->trace_id);
  if (s->ctx.cfg->access_log) cx->user_agent = header(cx->conn, "User-Agent");
  if (s->ctx.cfg->cors_allow_origins[0]) {
    cx->origin = header(cx->conn, "Origin");
    cx->cors = attn__cors_allowed(s->ctx.cfg->cors_allow_origins, cx->origin);
  }
}

/* The answer's share of the budget, on the worker that made it (the
 * connection is suspended, so its context is the worker's).  The request
 * body is no longer needed: its memory goes back and its share becomes the
 * answer's.  An answer that does not fit is dropped for a small error (not
 * counted), 400 when it would never fit, 503 when it does not fit now. */
static void hold_answer(conn_ctx *cx, attn__http_resp *resp) {
  attn_server *s = cx->srv;
  free_body(cx);
  /* one exchange: the body's share becomes the answer's */
  if (reserve(cx, resp->body ? resp->len : 0)) return;
  reserve(cx, 0);
  attn__http_resp e = {.queue_ms = resp->queue_ms,
                       .compute_ms = resp->compute_ms,
                       .trace = resp->trace};
  e.trace.hint = 0; /* the new status says what it was */
  memcpy(e.request_id, resp->request_id, sizeof e.request_id);
  if (resp->len > s->body_budget)
    attn__resp_error(&e, 400,
                     "the answer would be %zu bytes, more than "
                     "max_total_body_bytes=%zu (what the server may hold of "
                     "request and response bodies at once); ask for fewer "
                     "outputs (leave out attn_weights)",
                     resp->len, s->body_budget);
  else
    attn__resp_error(&e, 503,
                     "server busy: the answer (%zu bytes) and the bodies it "
                     "holds (%zu bytes) would pass max_total_body_bytes=%zu; "
                     "retry after a moment",
                     resp->len, atomic_load(&s->body_held), s->body_budget);
  free(resp->body);
  *resp = e;
}

/* Worker thread: hand the response over and wake the connection. */
static void complete(void *arg, attn__http_resp *resp) {
  conn_ctx *cx = arg;
  hold_answer(cx, resp);
  pthread_mutex_lock(&cx->srv->mu); /* attn_server_abandon reads these */
  cx->resp = *resp;
  /* a v2 body's "id" names a request that brought no X-Request-Id */
  size_t n = cx->id_given ? 0 : sane_id(resp->request_id);
  if (n) memcpy(cx->request_id, resp->request_id, n + 1);
  atomic_store(&cx->done, 1);
  pthread_mutex_unlock(&cx->srv->mu);
  MHD_resume_connection(cx->conn);
}

/* Worker thread, as it takes the job: has the client left?  The
 * connection is suspended until this worker's complete(), so
 * libmicrohttpd cannot have closed its socket; peers.c peeks it under
 * the registry's lock all the same (attn__peer_left: FIN well after the
 * request's last byte, or a reset; a client that half-closed after its
 * request is still answered).  Under TLS never (cx->fd is -1). */
static bool client_gone(void *arg) {
  conn_ctx *cx = arg;
  return cx->fd >= 0 && attn__peer_left(cx->srv->peers, cx->peer);
}

/* Content-Length, Inference-Header-Content-Length (see internal.h). */
int attn__header_number(const char *v, uint64_t *out) {
  char *end;
  if (!v) return 0;
  while (*v == ' ' || *v == '\t') v++;
  if (*v < '0' || *v > '9') return 0;
  errno = 0;
  unsigned long long n = strtoull(v, &end, 10);
  int range = errno == ERANGE;
  while (*end == ' ' || *end == '\t') end++;
  if (*end) return 0;
  *out = n;
  return range ? 2 : 1;
}

/* What check_framing() saw of the Content-Length and Transfer-Encoding
 * headers, every one of them. */
typedef struct framing {
  int n_cl, cl_differ, n_te, n_ihcl, ihcl_differ;
  const char *cl;   /* the first Content-Length */
  const char *ihcl; /* the first Inference-Header-Content-Length */
  int last_chunked; /* the last transfer coding named is chunked */
  char te[96];      /* the Transfer-Encoding values, joined (truncated) */
} framing;

static enum MHD_Result framing_header(void *cls, enum MHD_ValueKind kind,
                                      const char *key, const char *value) {
  framing *f = cls;
  (void)kind;
  if (!value) return MHD_YES;
  if (!strcasecmp(key, MHD_HTTP_HEADER_CONTENT_LENGTH)) {
    if (f->n_cl++ == 0)
      f->cl = value;
    else if (strcmp(value, f->cl))
      f->cl_differ = 1;
  } else if (!strcasecmp(key, "Inference-Header-Content-Length")) {
    if (f->n_ihcl++ == 0)
      f->ihcl = value;
    else if (strcmp(value, f->ihcl))
      f->ihcl_differ = 1;
  } else if (!strcasecmp(key, MHD_HTTP_HEADER_TRANSFER_ENCODING)) {
    size_t n = strlen(f->te);
    snprintf(f->te + n, sizeof f->te - n, "%s%s", f->n_te++ ? ", " : "", value);
    /* the last non-empty element of the comma-separated list */
    const char *end = value + strlen(value);
    while (end > value && strchr(" \t,", end[-1])) end--;
    const char *beg = end;
    while (beg > value && !strchr(" \t,", beg[-1])) beg--;
    if (end > beg)
      f->last_chunked = end - beg == 7 && !strncasecmp(beg, "chunked", 7);
  }
  return MHD_YES;
}

/* A chunked body whose socket is at its end: the rest of the body is
 * either in libmicrohttpd's buffer already (a client that half-closed
 * after sending it all, to be answered) or will never come, and
 * libmicrohttpd may not see the close until connection_timeout_s (60 s
 * by default: enough such clients would hold every connection of
 * max_connections).  The connection gets a 1-second timeout instead,
 * which a buffered rest beats at once; the daemon's comes back when the
 * body is whole (on_request).  A syscall per chunk callback, for chunked
 * bodies only. */
static void chunked_peer_check(conn_ctx *cx) {
  char c;
  if (cx->peer_eof || cx->fd < 0) return;
  if (recv(cx->fd, &c, 1, MSG_PEEK | MSG_DONTWAIT) != 0) return;
  cx->peer_eof = 1;
  MHD_set_connection_option(cx->conn, MHD_CONNECTION_OPTION_TIMEOUT, 1u);
}

/* Refuse framing that libmicrohttpd 0.9.75 would read wrongly (RFC 9112,
 * 6.1 and 6.3).  It takes the first Content-Length and the first
 * Transfer-Encoding only, and reads a body whose Transfer-Encoding is
 * anything but exactly "chunked" until the client closes (a request then
 * hung until connection_timeout_s).  Conflicting Content-Lengths, or a
 * Transfer-Encoding whose last coding is not chunked, leave the body's
 * length unknown: 400 (so do Inference-Header-Content-Lengths that
 * differ); other transfer codings before chunked: 501.  The
 * connection is closed after such an answer, and after any request that
 * sends both headers (the RFC's MUST against request smuggling).  Returns
 * 0, or the status with msg filled in. */
static int check_framing(conn_ctx *cx, char *msg, size_t cap) {
  framing f = {0};
  MHD_get_connection_values(cx->conn, MHD_HEADER_KIND, framing_header, &f);
  if (f.n_te && f.n_cl) cx->must_close = 1;
  if (f.cl_differ) {
    cx->must_close = 1;
    snprintf(msg, cap,
             "the request has Content-Length headers that differ "
             "(the first is '%.32s'); send one",
             f.cl);
    return 400;
  }
  if (f.ihcl_differ) { /* which part is JSON cannot be known either */
    cx->must_close = 1;
    snprintf(msg, cap,
             "the request has Inference-Header-Content-Length "
             "headers that differ (the first is '%.32s'); send "
             "one",
             f.ihcl);
    return 400;
  }
  if (!f.n_te || (f.n_te == 1 && !strcasecmp(f.te, "chunked"))) return 0;
  cx->must_close = 1;
  if (!f.last_chunked) {
    snprintf(msg, cap,
             "Transfer-Encoding '%s' does not end in 'chunked', so "
             "the body's length is unknown; send Content-Length "
             "or Transfer-Encoding: chunked",
             f.te);
    return 400;
  }
  snprintf(msg, cap,
           "Transfer-Encoding '%s' is not supported: only "
           "'chunked' is (a compressed body is sent with "
           "Content-Encoding)",
           f.te);
  return 501;
}

/* The path of a request target (RFC 9112 3.2): an origin-form target as
 * it is; an absolute-form one ("http://host:port/path", which a server
 * must accept, 3.2.2) by its path, "/" when it has none.  libmicrohttpd
 * has cut the query off already.  See internal.h. */
const char *attn__target_path(const char *url) {
  const char *p;
  if (!strncasecmp(url, "http://", 7))
    p = url + 7;
  else if (!strncasecmp(url, "https://", 8))
    p = url + 8;
  else
    return url;
  p += strcspn(p, "/");
  return *p ? p : "/";
}

/* See internal.h. */
long attn__path_control(const char *path) {
  for (const unsigned char *p = (const unsigned char *)path; *p; p++)
    if (*p < 0x20 || *p == 0x7f) return (long)(p - (const unsigned char *)path);
  return -1;
}

/* The URL's percent-decoding (MHD_OPTION_UNESCAPE_CALLBACK), for the path
 * and the query's arguments.  libmicrohttpd hands the access handler the
 * decoded path as a C string, so "%00" would end it there and
 * "/v2/health/ready%00xyz" be routed as "/v2/health/ready": a decoded NUL
 * becomes 0x01 instead, which on_headers refuses (400) like every other
 * control byte.  The length never grows, as libmicrohttpd requires. */
static size_t unescape_url(void *cls, struct MHD_Connection *c, char *s) {
  (void)cls;
  (void)c;
  size_t n = MHD_http_unescape(s);
  for (size_t i = 0; i < n; i++)
    if (!s[i]) s[i] = 0x01;
  return n;
}

/* The header section, checked as libmicrohttpd 0.9.75 left it.  It parses
 * the request line and the headers in place in its read buffer, in the
 * order received: each line's end (CR LF, or a bare LF) becomes NULs, and
 * so does the colon after each name.  It is lenient where a proxy in
 * front may read the same bytes otherwise (request smuggling, RFC 9112
 * 11.2): it takes "Name : v" (blank before the colon; RFC 9112 5.1 says
 * 400) under the name "Name ", ends the section at a line ": v" (an empty
 * name) and reads the lines after it as the body, glues a folded line
 * (obs-fold) onto the previous header's name, keeps a value up to a NUL
 * and drops the rest, and keeps a bare CR in a value.  So each header
 * must tile the buffer from the first header's name to the section's end
 * (MHD_CONNECTION_INFO_REQUEST_HEADER_SIZE from the request line's
 * start): its name a token (RFC 9110 5.6.2) where the walk stands, one
 * NUL (its colon), blanks, its value, then 1 or 2 NULs (its line end) and
 * the next name, or, after the last, 2 to 4 NULs (its line end and the
 * empty line) and the end.  Bytes left over are a line cut short or moved
 * (a NUL in a value, a folded line, an empty name).  A value may hold no
 * control byte below 0x20 but HTAB (RFC 9110 5.5; DEL is let through, as
 * before: an X-Request-Id holding one is replaced).  One case cannot be told: a
 * NUL right before a bare LF leaves what CR LF leaves (and cuts nothing). */
typedef struct hdr_walk {
  const char *start, *end; /* the section: the request line's start, end */
  const char *at;          /* the previous header's end; NULL: none yet */
  const char *name;        /* the header found wrong (or the previous) */
  size_t name_len;
  const char *why; /* what is wrong; NULL: nothing */
} hdr_walk;

/* RFC 9110 5.6.2's tchar, as a bit per byte: ALPHA, DIGIT and
 * !#$%&'*+-.^_`|~ (a table: every byte of every name is asked). */
static const uint32_t tchar_bits[8] = {0, 0x03ff6cfa, 0xc7fffffe, 0x57ffffff,
                                       0, 0,          0,          0};

static int tchar(unsigned char c) {
  return (int)(tchar_bits[c >> 5] >> (c & 31)) & 1;
}

/* The first byte below 0x20 other than a tab in v[0, n), or NULL: eight
 * bytes at a time (a word with no byte below 0x20 passes in a few
 * instructions), every value of every request passes here. */
static const char *value_control(const char *v, size_t n) {
  const uint64_t ones = 0x0101010101010101u, highs = ones * 0x80;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t x;
    memcpy(&x, v + i, 8);
    if (((x - ones * 0x20) & ~x & highs) == 0) continue; /* none < 0x20 */
    for (size_t j = i; j < i + 8; j++)
      if ((unsigned char)v[j] < 0x20 && v[j] != '\t') return v + j;
  }
  for (; i < n; i++)
    if ((unsigned char)v[i] < 0x20 && v[i] != '\t') return v + i;
  return NULL;
}

/* Is the line end after the header that ends at w->at 1 or 2 NULs up to
 * next (the next name), or, next NULL, 2 to 4 up to the section's end
 * (its own line end and the empty line)? */
static int line_end(const hdr_walk *w, const char *next) {
  size_t n = 0;
  while (w->at + n < w->end && !w->at[n]) n++;
  return next ? n >= 1 && n <= 2 && w->at + n == next
              : n >= 2 && n <= 4 && w->at + n == w->end;
}

static const char cut_short[] =
    "is cut short or followed by bytes that are not a header line: a NUL "
    "in a value, a folded line (obs-fold, RFC 9112 5.2), or a line with "
    "no name before its colon";

static enum MHD_Result walk_header(void *cls, enum MHD_ValueKind kind,
                                   const char *key, size_t klen,
                                   const char *value, size_t vlen) {
  hdr_walk *w = cls;
  (void)kind;
  int inside = key > w->start && key < w->end;
  int placed = w->at ? line_end(w, key) : inside;
  if (w->name && !placed) {
    w->why = cut_short; /* w->name: the previous header */
    return MHD_NO;
  }
  w->name = key;
  w->name_len = klen;
  if (!klen) /* its colon's NUL is where its name would start */
    w->why = "has an empty name";
  else if (!placed) /* the first: moved out (a folded line glued onto
                       it), or after bytes that end the request line */
    w->why = inside ? "comes after bytes that are not a header line (a "
                      "line that starts with a NUL)"
                    : "is folded over lines (obs-fold, RFC 9112 5.2)";
  for (size_t i = 0; i < klen && !w->why; i++)
    if (!tchar((unsigned char)key[i]))
      w->why = key[i] == ' ' || key[i] == '\t'
                   ? "has blanks before its colon (RFC 9112 5.1)"
                   : "has a name that is not a token (RFC 9110 5.6.2)";
  const char *p = key + klen + 1; /* past the colon */
  while (!w->why && p < w->end && (*p == ' ' || *p == '\t')) p++;
  if (!w->why && vlen && value != p)
    w->why = "is folded over lines (obs-fold, RFC 9112 5.2)";
  const char *c = w->why ? NULL : value_control(value, vlen);
  if (c) /* DEL passes: X-Request-Id copes */
    w->why = *c == '\r' ? "holds a CR that does not end a line"
                        : "holds a control byte (RFC 9110 5.5)";
  w->at = vlen ? value + vlen : p;
  return w->why ? MHD_NO : MHD_YES;
}

/* The header section walked (see above) from the request line's end (its
 * version's, which libmicrohttpd leaves in place): NULL when sound, else
 * why not, with w->name the header it concerns (NULL: the request line,
 * a section with no header).  A line that starts with a NUL right after
 * the request line ends the section for libmicrohttpd with no header, and
 * what follows is read as another request: the walk from the version
 * sees it. */
static const char *check_headers(struct MHD_Connection *conn,
                                 const char *method, const char *version,
                                 hdr_walk *w) {
  const union MHD_ConnectionInfo *ci =
      MHD_get_connection_info(conn, MHD_CONNECTION_INFO_REQUEST_HEADER_SIZE);
  if (!ci) return NULL;
  *w = (hdr_walk){.start = method, .end = method + ci->header_size};
  if (version && version > w->start && version < w->end)
    w->at = version + strlen(version);
  MHD_get_connection_values_n(conn, MHD_HEADER_KIND, walk_header, w);
  if (!w->why && w->at && !line_end(w, NULL)) w->why = cut_short;
  return w->why;
}

/* What the request line and the headers hold that no request may: a
 * control byte in the path (once percent-decoded), a header section that
 * libmicrohttpd read leniently (check_headers).  0, or 400 with msg
 * filled in. */
static int check_request_bytes(conn_ctx *cx, const char *method,
                               const char *version, const char *path, char *msg,
                               size_t cap) {
  long at = attn__path_control(path);
  if (at >= 0) {
    snprintf(msg, cap,
             "the request path holds a control character (byte %ld of the "
             "decoded path '%.*s...'): a path may not hold %%00-%%1F or %%7F",
             at, (int)(at < 64 ? at : 64), path);
    return 400;
  }
  hdr_walk w;
  const char *why = check_headers(cx->conn, method, version, &w);
  if (why) {
    cx->must_close = 1; /* where this request ends is not known */
    if (cx->id_given) { /* nor is its X-Request-Id to be trusted */
      cx->id_given = 0;
      make_id(cx, atomic_fetch_add(&cx->srv->ctx.next_id, 1));
    }
    char name[52];
    size_t n = w.name_len < 48 ? w.name_len : 48;
    for (size_t i = 0; i < n; i++) /* printable, for the message */
      name[i] = w.name[i] >= 0x20 && w.name[i] < 0x7f ? w.name[i] : '?';
    name[n] = '\0';
    if (w.name)
      snprintf(msg, cap, "the request header '%s%s' %s", name,
               w.name_len > n ? "..." : "", why);
    else
      snprintf(msg, cap, "the request line %s", why);
    return 400;
  }
  return 0;
}

static enum MHD_Result dispatch(conn_ctx *cx) {
  attn_server *s = cx->srv;
  attn__http_req req = {
      .method = cx->method,
      .path = cx->path,
      .content_type = header(cx->conn, MHD_HTTP_HEADER_CONTENT_TYPE),
      .content_encoding = header(cx->conn, MHD_HTTP_HEADER_CONTENT_ENCODING),
      .header_len_text = cx->ihcl,
      .header_len_ok = cx->ihcl_ok,
      .header_len = cx->ihcl_val,
      .pad = cx->pad,
      .request_id = cx->request_id,
      .authorization = KEYS_ON(s) ? header(cx->conn, "Authorization") : NULL,
      .api_key = KEYS_ON(s) ? header(cx->conn, "X-Api-Key") : NULL,
      .origin = cx->origin,
      .cors_method =
          cx->origin ? header(cx->conn, "Access-Control-Request-Method") : NULL,
      .accept = header(cx->conn, MHD_HTTP_HEADER_ACCEPT),
      .if_none_match = header(cx->conn, MHD_HTTP_HEADER_IF_NONE_MATCH),
      .body = cx->body ? cx->body : "",
      .body_len = cx->len,
      .start_ns = cx->start_ns,
      .before_drain = cx->before_drain,
      .admitted = true,
      .route = cx->adm.route};
  attn__http_resp resp = {0};
  attn__infer_target target;
  answering(cx);
  if (attn__route(&s->ctx, &req, &resp, &target) == ATTN_ROUTE_DONE)
    return send_resp(cx, &resp);
  /* A timeout other than the daemon's puts the connection on the list of
   * connections that libmicrohttpd 0.9.75 visits on every turn of its
   * loop, so that once resumed it is offered its answer before its socket
   * is read.  On the other list only the oldest connection is visited, and
   * a resumed one that is not the oldest is read first: if its client has
   * half-closed (sent its request, then FIN), that read ends the connection
   * with the answer unsent.  on_request() restores the timeout. */
  MHD_set_connection_option(cx->conn, MHD_CONNECTION_OPTION_TIMEOUT,
                            (unsigned)s->ctx.cfg->connection_timeout_s + 1);
  MHD_suspend_connection(cx->conn);
  cx->suspended = 1;
  if (!attn__job_submit(&s->ctx, &req, &target, complete, client_gone, cx,
                        &resp)) {
    cx->resp = resp; /* a 503: answered now */
    atomic_store(&cx->done, 1);
    MHD_resume_connection(cx->conn);
  }
  settle(cx); /* queued (or answered): the drain may close the queue */
  return MHD_YES;
}

/* client_cert_ok's verdicts, and the 403's message for each refusal. */
enum { CERT_INVALID, CERT_OK, CERT_NOT_CLIENT };
static const char *const cert_refusal[] = {
    [CERT_INVALID] =
        "this server needs a client certificate signed by a CA of its "
        "tls_client_ca_file (mutual TLS): none was presented, or it is not "
        "valid",
    [CERT_NOT_CLIENT] =
        "the client certificate is not for client authentication: its "
        "extendedKeyUsage does not list clientAuth (1.3.6.1.5.5.7.3.2); it "
        "is for other uses (a server's, say)"};

/* Mutual TLS: did the client present a certificate that the CAs of
 * tls_client_ca_file sign, valid now and for client authentication?
 * libmicrohttpd only asks for one (GNUTLS_CERT_REQUEST) and leaves the
 * verdict to us.  A certificate with an extendedKeyUsage extension must
 * list clientAuth (GnuTLS checks the purpose along the chain); one
 * without it may serve any purpose (RFC 5280 4.2.1.12) and is accepted.
 * Asked on every request, so a connection cannot change that; the
 * verification itself (signatures: many times a small request's work;
 * docs/performance.md, "Design choices") is done once per connection and
 * certificate, again after
 * ATTN_PEER_CERT_TTL_NS (peers.c remembers the certificate's bytes and
 * the verdict).  CERT_OK or why not. */
static int client_cert_ok(struct MHD_Connection *conn, attn__peer *peer) {
  const union MHD_ConnectionInfo *ci =
      MHD_get_connection_info(conn, MHD_CONNECTION_INFO_GNUTLS_SESSION);
  unsigned status = 0, n = 0;
  if (!ci || !ci->tls_session) return CERT_INVALID;
  gnutls_session_t tls = (gnutls_session_t)ci->tls_session;
  const gnutls_datum_t *certs = gnutls_certificate_get_peers(tls, &n);
  if (!certs || n == 0) return CERT_INVALID;
  uint64_t now = attn_now_ns();
  int ok = attn__peer_cert_known(peer, certs[0].data, certs[0].size, now);
  if (ok >= 0) return ok;
  gnutls_typed_vdata_st purpose = {
      GNUTLS_DT_KEY_PURPOSE_OID, (unsigned char *)GNUTLS_KP_TLS_WWW_CLIENT, 0};
  const unsigned use = GNUTLS_CERT_PURPOSE_MISMATCH;
  if (gnutls_certificate_verify_peers(tls, &purpose, 1, &status) !=
      GNUTLS_E_SUCCESS)
    ok = CERT_INVALID;
  else if (status == 0)
    ok = CERT_OK;
  else /* the purpose is its only fault, or not */
    ok = (status & use) && !(status & ~(use | GNUTLS_CERT_INVALID))
             ? CERT_NOT_CLIENT
             : CERT_INVALID;
  attn__peer_cert_remember(peer, certs[0].data, certs[0].size, ok, now);
  return ok;
}

/* What the route says of the request before its body (routes.c): 1 with
 * cx->resp the refusal (a wrong or missing key, a wrong method, a body
 * the route does not take), or 0 with cx->adm.max_body set.  Nothing of the
 * body budget is taken before this, and no 100 Continue sent, so keyless
 * clients cannot hold the budget (issue 39). */
static int admit(conn_ctx *cx, uint64_t body) {
  attn_server *s = cx->srv;
  attn__http_req req = {
      .method = cx->method,
      .path = cx->path,
      /* a session's PUT: JSON (64 KiB) or a session file (max_body_bytes) */
      .content_type = header(cx->conn, MHD_HTTP_HEADER_CONTENT_TYPE),
      .authorization = KEYS_ON(s) ? header(cx->conn, "Authorization") : NULL,
      .api_key = KEYS_ON(s) ? header(cx->conn, "X-Api-Key") : NULL,
      .origin = cx->origin,
      .cors_method =
          cx->origin ? header(cx->conn, "Access-Control-Request-Method") : NULL,
      .request_id = cx->request_id,
      .start_ns = cx->start_ns};
  attn__route_kind k =
      attn__route_admit(&s->ctx, &req, body, &cx->resp, &cx->adm);
  cx->admitted = 1;
  if (k == ATTN_ROUTE_DEFER) return 0;
  if (body) cx->must_close = 1; /* its body is not read */
  return 1;
}

/* The request's headers, on the first call: a context for it, its id,
 * the checks that need no body (URL length, framing, a Content-Length
 * past max_body_bytes or the budget), and where its body will go. */
static enum MHD_Result on_headers(attn_server *s, struct MHD_Connection *conn,
                                  const char *url, const char *method,
                                  const char *version, void **con_cls) {
  conn_ctx *cx = calloc(1, sizeof *cx);
  if (!cx) return MHD_NO;
  *con_cls = cx;
  cx->srv = s;
  cx->conn = conn;
  cx->start_ns = attn_now_ns();
  /* counted first, then the drain looked at (both sequentially
   * consistent, as attn_server_begin_drain's store and
   * attn_server_wait_arrivals' load): either the drain waits for this
   * request, or this request sees the drain and is refused */
  atomic_fetch_add(&s->arriving, 1);
  cx->arriving = 1;
  if (atomic_load(&s->ctx.draining)) {
    atomic_store(&s->drain_begun_ns, cx->start_ns);
    settle(cx);
  } else {
    cx->before_drain = 1;
  }
  cx->expect = SIZE_MAX;
  const union MHD_ConnectionInfo *ci =
      MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
  /* TLS: GnuTLS buffers bytes of its own, so the socket's end says
   * nothing of the body's (peer_gone, chunked_peer_check: not asked) */
  cx->fd = ci && !s->tls_cert ? (int)ci->connect_fd : -1;
  ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
  cx->peer = ci ? ci->socket_context : NULL;
  if (!attn__peer_begin(cx->peer)) { /* cut (and logged) by peers.c */
    settle(cx);
    free(cx);
    *con_cls = NULL;
    return MHD_NO;
  }
  attn__copy_str(cx->method, sizeof cx->method, method);
  request_ids(cx);
  if (strlen(url) > ATTN_MAX_URL_LEN) {
    snprintf(cx->path, sizeof cx->path, "%.64s...", url);
    return send_error(cx, 414, "request URL is too long");
  }
  const char *path = attn__target_path(url);
  attn__copy_str(cx->path, sizeof cx->path, path);
  int cert = s->tls_ca ? client_cert_ok(conn, cx->peer) : CERT_OK;
  if (cert != CERT_OK) {
    cx->must_close = 1;
    return send_error(cx, 403, cert_refusal[cert]);
  }
  char fmsg[320];
  int fstatus =
      check_request_bytes(cx, method, version, path, fmsg, sizeof fmsg);
  if (!fstatus) fstatus = check_framing(cx, fmsg, sizeof fmsg);
  if (fstatus) return send_error(cx, fstatus, fmsg);
  uint64_t cl = 0;
  const char *cls_h = header(conn, MHD_HTTP_HEADER_CONTENT_LENGTH);
  int chunked = header(conn, MHD_HTTP_HEADER_TRANSFER_ENCODING) != NULL;
  /* with Transfer-Encoding (chunked), the Content-Length is ignored */
  int has_cl = cls_h && !chunked && attn__header_number(cls_h, &cl) == 1;
  if (admit(cx, chunked ? UINT64_MAX : cl)) return send_resp(cx, &cx->resp);
  if (has_cl) {
    if (cl > (uint64_t)cx->adm.max_body) {
      char msg[160];
      snprintf(msg, sizeof msg,
               "request body of %llu bytes exceeds max_body_bytes=%lld",
               (unsigned long long)cl, (long long)s->ctx.cfg->max_body_bytes);
      return send_error(cx, 413, msg);
    }
    cx->cap = cx->expect = (size_t)cl;
    if (!reserve(cx, (size_t)cl)) return send_over_budget(cx, cl);
  }
  /* Binary tensor data starts right after the JSON header: start the body
   * pad bytes into a 64-byte aligned block so that the first blob (and
   * every blob after sizes that are multiples of 64) starts on a cache
   * line.  The codec then uses FP32/INT32/INT64 blobs where they lie
   * instead of copying them, and the engine's vector loads of them never
   * straddle two lines (docs/performance.md, "Design choices").  The
   * header is read here, once: routes.c checks the number against the
   * body, infer.c lays an inflated body out with the same pad. */
  cx->ihcl = header(conn, "Inference-Header-Content-Length");
  cx->ihcl_ok = attn__header_number(cx->ihcl, &cx->ihcl_val) != 0;
  if (cx->ihcl_ok) cx->pad = (size_t)((64 - cx->ihcl_val % 64) % 64);
  /* a body follows: its rate is watched (body_min_rate_bytes_s) */
  int has_body = cx->expect == SIZE_MAX ? chunked : cx->expect > 0;
  if (has_body) attn__peer_body_begin(cx->peer);
  return MHD_YES;
}

/* A chunked body past max_body_bytes (a Content-Length past it was
 * refused with the headers): 413 now, written on the socket since
 * libmicrohttpd 0.9.75 takes no answer before the body's end, and the
 * connection closed.  Before, the rest was read and discarded, up to
 * another max_body_bytes, for a 413 at the end; a chunk announced as
 * ffffffffffffffff then held the connection for that long.  (Its size
 * itself is libmicrohttpd's, not shown to attnd: the bytes count.) */
static enum MHD_Result refuse_too_big(conn_ctx *cx) {
  char msg[200];
  if (cx->adm.max_body < (size_t)cx->srv->ctx.cfg->max_body_bytes)
    snprintf(msg, sizeof msg,
             "the body of %.64s passes %zu bytes, the most this route takes "
             "(read so far: %zu bytes)",
             cx->path, cx->adm.max_body, cx->received);
  else
    snprintf(msg, sizeof msg,
             "request body exceeds max_body_bytes=%lld (read so far: %zu "
             "bytes)",
             (long long)cx->srv->ctx.cfg->max_body_bytes, cx->received);
  attn__raw_answer(cx->fd, 413, cx->request_id, 0, msg);
  shutdown(cx->fd, SHUT_WR); /* the answer, then the end: no more is read */
  free_body(cx);
  reserve(cx, 0);
  cx->status = 413;
  cx->closed = "body_too_big";
  return MHD_NO;
}

/* n more bytes of the body: kept (the buffer grows as needed), or counted
 * and dropped once the body is found too large or past the budget. */
static enum MHD_Result on_body(conn_ctx *cx, const char *upload, size_t n) {
  const attn_config *cfg = cx->srv->ctx.cfg;
  cx->received += n;
  if (!attn__peer_body_bytes(cx->peer, cx->received)) return MHD_NO; /* cut */
  if (cx->expect == SIZE_MAX) chunked_peer_check(cx);
  /* A chunked body (no Content-Length) can only be found past the budget
   * while it arrives, and libmicrohttpd 0.9.75 takes no response before
   * the upload ends: discard the rest and answer 503 then, but read at
   * most max_body_bytes more; past that close the connection (a body
   * without end must not hold it forever).  One found too large is
   * refused at once: refuse_too_big(). */
  if (cx->fate != KEEP) {
    cx->drained += n;
    return cx->drained > (size_t)cfg->max_body_bytes ? MHD_NO : MHD_YES;
  }
  if (cx->len + n > cx->adm.max_body) return refuse_too_big(cx);
  if (cx->len + n > cx->cap || !cx->body) {
    /* the Content-Length when it was sent, else BODY_INITIAL, doubled as
     * a chunked body grows */
    size_t cap = cx->cap >= cx->len + n ? cx->cap : BODY_INITIAL;
    while (cap < cx->len + n) cap *= 2;
    if (cap > cx->adm.max_body) cap = cx->adm.max_body;
    if (!reserve(cx, cap)) return discard(cx, OVER_BUDGET, n);
    /* pad + cap <= 63 + max_body_bytes: no overflow */
    char *nb = aligned_alloc(64, (cx->pad + cap + 63) / 64 * 64);
    if (!nb) return MHD_NO;
    if (cx->len) memcpy(nb + cx->pad, cx->body, cx->len);
    free(cx->mem);
    cx->mem = nb;
    cx->body = nb + cx->pad;
    cx->cap = cap;
  }
  memcpy(cx->body + cx->len, upload, n);
  cx->len += n;
  return cx->expect != SIZE_MAX && cx->received < cx->expect && peer_gone(cx)
             ? MHD_NO
             : MHD_YES;
}

/* The body is whole: answer the refusal decided while it arrived, or
 * route the request. */
static enum MHD_Result on_end(conn_ctx *cx) {
  const attn_config *cfg = cx->srv->ctx.cfg;
  if (cx->suspended) return MHD_YES; /* spurious call while queued */
  if (!attn__peer_body_end(cx->peer)) return MHD_NO; /* cut: too slow */
  if (cx->peer_eof) /* the body is whole: the daemon's timeout again */
    MHD_set_connection_option(cx->conn, MHD_CONNECTION_OPTION_TIMEOUT,
                              (unsigned)cfg->connection_timeout_s);
  if (cx->fate == TOO_BIG) {
    char msg[160];
    snprintf(msg, sizeof msg, "request body exceeds max_body_bytes=%lld",
             (long long)cfg->max_body_bytes);
    return send_error(cx, 413, msg);
  }
  if (cx->fate == OVER_BUDGET) return send_over_budget(cx, cx->received);
  return dispatch(cx);
}

/* libmicrohttpd's access handler: called with the headers, then with each
 * piece of the body, then once more at its end; and again when a worker
 * has resumed the connection with its answer. */
static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn,
                                  const char *url, const char *method,
                                  const char *version, const char *upload,
                                  size_t *upload_size, void **con_cls) {
  conn_ctx *cx = *con_cls;
  if (!cx) return on_headers(cls, conn, url, method, version, con_cls);
  if (atomic_load(&cx->done)) { /* resumed by a worker */
    atomic_store(&cx->done, 0);
    cx->suspended = 0;
    /* the daemon's timeout again (see dispatch()) */
    MHD_set_connection_option(conn, MHD_CONNECTION_OPTION_TIMEOUT,
                              (unsigned)cx->srv->ctx.cfg->connection_timeout_s);
    if (cx->resp.status != ATTN_DROPPED_STATUS) return send_resp(cx, &cx->resp);
    /* Its client had left: the 499 goes to a closed socket, the
     * connection then ends.  Answered rather than refused (MHD_NO), which
     * libmicrohttpd would log as an internal error each time. */
    cx->dropped = 1;
    cx->must_close = 1;
    enum MHD_Result r = send_error(
        cx, ATTN_DROPPED_STATUS,
        "the client closed the connection while the request waited in the "
        "queue: it was dropped, not computed");
    cx->closed = "dropped_queued";
    return r;
  }
  if (*upload_size > 0) {
    size_t n = *upload_size;
    *upload_size = 0;
    return on_body(cx, upload, n);
  }
  return on_end(cx);
}

/* Why libmicrohttpd ended a request before its answer was sent, for the
 * access log; NULL when it was sent. */
static const char *closed_reason(enum MHD_RequestTerminationCode toe) {
  switch (toe) {
    case MHD_REQUEST_TERMINATED_COMPLETED_OK:
      return NULL;
    case MHD_REQUEST_TERMINATED_TIMEOUT_REACHED:
      return "timeout";
    case MHD_REQUEST_TERMINATED_DAEMON_SHUTDOWN:
      return "shutdown";
    case MHD_REQUEST_TERMINATED_READ_ERROR:
    case MHD_REQUEST_TERMINATED_CLIENT_ABORT:
      return "client";
    default:
      return "error";
  }
}

/* The request's status for the access log and the metrics: its answer's,
 * or the one libmicrohttpd queued itself (a bad chunk), or 499. */
static int ended_status(conn_ctx *cx, enum MHD_RequestTerminationCode toe) {
  if (cx->status) return cx->status;
  const union MHD_ConnectionInfo *ci =
      MHD_get_connection_info(cx->conn, MHD_CONNECTION_INFO_HTTP_STATUS);
  return ci && ci->http_status                        ? (int)ci->http_status
         : toe == MHD_REQUEST_TERMINATED_COMPLETED_OK ? 200
                                                      : 499;
}

/* Does access_log_exclude (prefixes split as cors_allow_origins is, by
 * commas or spaces; config.c checked each begins with '/') name a prefix
 * of path?  Any thread. */
static int access_excluded(const char *list, const char *path) {
  for (const char *p = list; *p;) {
    p += strspn(p, " \t,");
    size_t n = strcspn(p, " \t,");
    if (!n) break;
    if (strncmp(path, p, n) == 0) return 1;
    p += n;
  }
  return 0;
}

/* Of cx's request, the access line's client (peers.c made it), its model
 * (the one the worker ran, when resp is its answer's, else the one its
 * path names: routes.c; into model, cap bytes) and its User-Agent, into
 * *a.  The request's MHD thread, or attn_server_abandon's (under mu,
 * while cx lives). */
static void access_client(const conn_ctx *cx, const attn__http_resp *resp,
                          attn_access *a, char *model, size_t cap) {
  const attn__srv_ctx *s = &cx->srv->ctx;
  a->client = attn__peer_address(cx->peer);
  a->user_agent = cx->user_agent;
  if (resp && resp->trace.model > 0) {
    a->model =
        attn_registry_slot_name(s->models, (size_t)(resp->trace.model - 1));
    return;
  }
  int row = cx->admitted ? cx->adm.route : attn__route_template(cx->path);
  a->model = attn__route_model(cx->path, row, model, cap);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe) {
  attn_server *s = cls;
  conn_ctx *cx = *con_cls;
  (void)conn;
  if (!cx) return;
  int log = cx->answering ? unlink_live(cx) : 1;
  if (attn__peer_cut(cx->peer) == ATTN_PEER_CUT_BODY) {
    cx->status = 408;
    cx->closed = "body_too_slow";
  }
  uint64_t end_ns = attn_now_ns();
  int status = ended_status(cx, toe);
  attn__ended e = {.method = cx->method,
                   .path = cx->path,
                   .status = status,
                   .answered = cx->status != 0 && !cx->dropped,
                   .bytes_in = cx->received,
                   .bytes_out = cx->bytes_out,
                   .total_ns = end_ns - cx->start_ns,
                   .end_ns = end_ns,
                   .trace = &cx->resp.trace,
                   .route = cx->admitted ? &cx->adm : NULL};
  if (log) attn__observe(&s->ctx, &e);
  if (log && s->ctx.cfg->access_log &&
      !access_excluded(s->ctx.cfg->access_log_exclude, cx->path)) {
    char model[ATTN_MAX_NAME_LEN + 1];
    attn_access a = {
        .method = cx->method,
        .path = cx->path,
        .request_id = cx->request_id,
        .trace_id = cx->trace_id[0] ? cx->trace_id : NULL,
        .status = status,
        .bytes_in = cx->received,
        .bytes_out = cx->bytes_out,
        .queue_ms = cx->resp.queue_ms,
        .compute_ms = cx->resp.compute_ms,
        .total_ms = (double)e.total_ns / 1e6,
        .closed =
            cx->closed ? cx->closed
            : cx->peer_closed || (cx->peer_eof &&
                                  toe == MHD_REQUEST_TERMINATED_TIMEOUT_REACHED)
                ? "client"
                : closed_reason(toe)};
    access_client(cx, &cx->resp, &a, model, sizeof model);
    attn_log_access(&a);
  }
  free(cx->resp.body);
  free_body(cx);
  reserve(cx, 0);
  if (cx->answering) atomic_fetch_sub(&s->inflight, 1);
  settle(cx);
  attn__peer_end(cx->peer);
  free(cx);
  *con_cls = NULL;
}

/* A connection of the listener whose attn__peers is cls opens or closes
 * (before its socket is closed): register it with peers.c and admit it,
 * or not any more.  metrics_port's callback; port's through
 * on_connection.  MHD thread. */
static void on_peer_connection(void *cls, struct MHD_Connection *conn,
                               void **socket_context,
                               enum MHD_ConnectionNotificationCode code) {
  attn__peers *peers = cls;
  if (code == MHD_CONNECTION_NOTIFY_STARTED) {
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    const union MHD_ConnectionInfo *ai =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    *socket_context =
        ci ? attn__peer_open(peers, ci->connect_fd, ai ? ai->client_addr : NULL)
           : NULL;
    /* past the limits: answered and shut down there; libmicrohttpd then
     * reads the end and closes it */
    attn__peers_admit(peers, *socket_context);
  } else if (code == MHD_CONNECTION_NOTIFY_CLOSED) {
    attn__peer_close(peers, *socket_context);
    *socket_context = NULL;
  }
}

/* port's: counted (attnd_connections_open), then on_peer_connection. */
static void on_connection(void *cls, struct MHD_Connection *conn,
                          void **socket_context,
                          enum MHD_ConnectionNotificationCode code) {
  attn_server *s = cls;
  if (code == MHD_CONNECTION_NOTIFY_STARTED)
    atomic_fetch_add(&s->ctx.connections, 1);
  else if (code == MHD_CONNECTION_NOTIFY_CLOSED)
    atomic_fetch_sub(&s->ctx.connections, 1);
  on_peer_connection(s->peers, conn, socket_context, code);
}

static void mhd_log(void *cls, const char *fmt, va_list ap) {
  char msg[512];
  (void)cls;
  vsnprintf(msg, sizeof msg, fmt, ap);
  size_t n = strlen(msg);
  while (n && (msg[n - 1] == '\n' || msg[n - 1] == '\r')) msg[--n] = '\0';
  /* one kind per format string: a client can cause one message per
   * connection (a junk TLS handshake each), so repeats are counted */
  attn_log_repeated(ATTN_LOG_WARN, fmt, "libmicrohttpd: %s", msg);
}

/* The metrics, labelled with the registry's model names (room for every
 * slot it may have; stats.c names the ones loads add) and routes.c's
 * route templates; the gauges' sources. */
static attn_status make_metrics(attn_server *s, const attn_server_deps *deps,
                                attn_diag *d) {
  size_t n = attn_registry_count(deps->models);
  const char **names = calloc(n ? n : 1, sizeof *names);
  if (!names) return attn_diag_set(d, ATTN_ENOMEM, "out of memory");
  for (size_t i = 0; i < n; i++)
    names[i] = attn_registry_slot_name(deps->models, i);
  attn_metrics_labels l = {
      .models = names, .n_models = n, .max_models = ATTN_MAX_MODELS};
  l.routes = attn__route_templates(&l.n_routes);
  attn_status st = attn_metrics_create(&l, &s->ctx.metrics, d);
  free(names);
  s->ctx.workers = deps->workers;
  atomic_init(&s->ctx.connections, 0);
  return st;
}

/* The paths metrics_port serves, answered by routes.c's table as on port
 * (a key for /metrics with metrics_require_key; 405 for another method):
 * the scrapes, and the health probes, which the load that holds port's
 * connections (slow uploads, say) cannot keep out there. */
static const char *const metrics_port_paths[] = {"/metrics", "/v2/health/live",
                                                 "/v2/health/ready"};

/* The connection's attn__peer (on_peer_connection's); NULL: untracked. */
static attn__peer *conn_peer(struct MHD_Connection *conn) {
  const union MHD_ConnectionInfo *ci =
      MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
  return ci ? ci->socket_context : NULL;
}

/* metrics_port's answer to method url (a path of metrics_port_paths, else
 * a JSON 404).  HTTP thread. */
static void metrics_port_answer(attn_server *s, struct MHD_Connection *conn,
                                const char *method, const char *url,
                                attn__http_resp *resp) {
  const char *path = attn__target_path(url);
  for (size_t i = 0; i < sizeof metrics_port_paths / sizeof *metrics_port_paths;
       i++) {
    if (strcmp(path, metrics_port_paths[i]) != 0) continue;
    attn__http_req req = {
        .method = method,
        .path = path,
        .request_id = "",
        .authorization = KEYS_ON(s) ? header(conn, "Authorization") : NULL,
        .api_key = KEYS_ON(s) ? header(conn, "X-Api-Key") : NULL,
        .body = "",
        .start_ns = attn_now_ns()};
    attn__infer_target t; /* never: these routes answer at once */
    attn__route(&s->ctx, &req, resp, &t);
    return;
  }
  attn__resp_error(resp, 404,
                   "no route for %s %.200s: metrics_port serves only GET "
                   "/metrics, /v2/health/live and /v2/health/ready",
                   method, url);
}

/* Does the request announce a body (a Content-Length other than 0, or
 * Transfer-Encoding)? */
static int announces_body(struct MHD_Connection *conn) {
  uint64_t n = 0;
  const char *cl = header(conn, MHD_HTTP_HEADER_CONTENT_LENGTH);
  return header(conn, MHD_HTTP_HEADER_TRANSFER_ENCODING) ||
         (cl && (attn__header_number(cl, &n) != 1 || n > 0));
}

/* metrics_port's access handler.  A body is never read (none of its
 * routes takes one): a request that announces one is answered with its
 * headers, before the body, and its connection closed (libmicrohttpd
 * closes after an answer queued that early), so that no upload holds a
 * connection and peers.c can always make room at the limit.  Any other
 * is answered on the next call, which keeps the connection alive.  Not
 * counted in the metrics nor written to the access log: it is the
 * scrapers' and the probes' port. */
static enum MHD_Result on_metrics_port(void *cls, struct MHD_Connection *conn,
                                       const char *url, const char *method,
                                       const char *version, const char *upload,
                                       size_t *upload_size, void **con_cls) {
  attn_server *s = cls;
  static int waiting, answered; /* *con_cls: headers seen, answer queued */
  (void)version;
  (void)upload;
  if (*con_cls == &answered) { /* nothing more is read: dropped */
    *upload_size = 0;
    return MHD_YES;
  }
  int early = !*con_cls;
  if (early) {
    if (!attn__peer_begin(conn_peer(conn))) return MHD_NO; /* cut: peers.c */
    if (!announces_body(conn)) {
      *con_cls = &waiting;
      return MHD_YES;
    }
  }
  *con_cls = &answered;
  attn__http_resp resp = {0};
  metrics_port_answer(s, conn, method, url, &resp);
  struct MHD_Response *r = MHD_create_response_from_buffer(
      resp.body ? resp.len : 0, resp.body, MHD_RESPMEM_MUST_FREE);
  if (!r) {
    free(resp.body);
    return MHD_NO;
  }
  resp_headers(r, &resp);
  if (early) MHD_add_response_header(r, MHD_HTTP_HEADER_CONNECTION, "close");
  enum MHD_Result ret =
      MHD_queue_response(conn, (unsigned)(resp.body ? resp.status : 503), r);
  MHD_destroy_response(r);
  return ret;
}

/* A metrics_port request ended: its connection is between requests again
 * (peers.c times the next one's headers).  MHD thread. */
static void on_metrics_completed(void *cls, struct MHD_Connection *conn,
                                 void **con_cls,
                                 enum MHD_RequestTerminationCode toe) {
  (void)cls;
  (void)toe;
  if (*con_cls) attn__peer_end(conn_peer(conn));
  *con_cls = NULL;
}

/* The limits (peers.c) that port and metrics_port share: how long headers
 * and bodies may take, the connections open at once and per address. */
static attn__peer_limits peer_limits(const attn_config *cfg) {
  return (attn__peer_limits){.header_timeout_s = cfg->header_timeout_s,
                             .body_min_rate = cfg->body_min_rate_bytes_s,
                             .max_connections = cfg->max_connections,
                             .max_per_ip = cfg->max_connections_per_ip};
}

/* A listener's registry of connections (peers.c), with its sweeper, under
 * lim.  On error *out is NULL. */
static attn_status start_peers(const attn__peer_limits *lim, attn__peers **out,
                               attn_diag *d) {
  attn_status st = attn__peers_create(PEER_SWEEP_MS, out, d);
  if (st == ATTN_OK) attn__peers_set_limits(*out, lim);
  return st;
}

/* The daemon of metrics_port (when set): one thread, on host, plain HTTP.
 * Without port's SO_REUSEPORT (MHD_OPTION_LISTENING_ADDRESS_REUSE): a port
 * another process holds is refused, not shared with it.  Its connections
 * are watched by a registry of their own, with port's header_timeout_s,
 * body_min_rate_bytes_s and max_connections_per_ip, and at most
 * ATTN_METRICS_PORT_CONNECTIONS of max_connections (its 408s are neither
 * logged nor counted, like its requests). */
static attn_status start_metrics_port(attn_server *s, attn_diag *d) {
  const attn_config *cfg = s->ctx.cfg;
  struct addrinfo hints = {0}, *ai = NULL;
  char port[16];
  if (cfg->metrics_port <= 0) return ATTN_OK;
  if (cfg->metrics_port == s->port)
    return attn_diag_set(d, ATTN_EINVAL,
                         "metrics_port=%d is port: /metrics is served on "
                         "port anyway; set metrics_port to another port, or "
                         "to 0 for none",
                         cfg->metrics_port);
  attn__peer_limits lim = peer_limits(cfg);
  if (lim.max_connections > ATTN_METRICS_PORT_CONNECTIONS)
    lim.max_connections = ATTN_METRICS_PORT_CONNECTIONS;
  lim.name = "metrics_port";
  attn_status st = start_peers(&lim, &s->metrics_peers, d);
  if (st != ATTN_OK) return st;
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  snprintf(port, sizeof port, "%d", cfg->metrics_port);
  if (getaddrinfo(cfg->host, port, &hints, &ai) != 0)
    return attn_diag_set(d, ATTN_EINVAL, "metrics_port: host '%s' unknown",
                         cfg->host);
  unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_AUTO |
                   MHD_USE_ERROR_LOG |
                   (ai->ai_family == AF_INET6 ? MHD_USE_IPv6 : 0);
  s->metrics_daemon = MHD_start_daemon(
      flags, 0, NULL, NULL, on_metrics_port, s, MHD_OPTION_EXTERNAL_LOGGER,
      mhd_log, NULL, MHD_OPTION_SOCK_ADDR, ai->ai_addr,
      MHD_OPTION_CONNECTION_LIMIT,
      (unsigned)(lim.max_connections + ATTN_ADMIT_HEADROOM),
      MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)cfg->connection_timeout_s,
      MHD_OPTION_NOTIFY_COMPLETED, on_metrics_completed, s,
      MHD_OPTION_NOTIFY_CONNECTION, on_peer_connection, s->metrics_peers,
      MHD_OPTION_END);
  freeaddrinfo(ai);
  if (!s->metrics_daemon)
    return attn_diag_set(d, ATTN_EIO,
                         "cannot listen on %s:%d for metrics_port (is the "
                         "port in use?)",
                         cfg->host, cfg->metrics_port);
  const union MHD_DaemonInfo *info =
      MHD_get_daemon_info(s->metrics_daemon, MHD_DAEMON_INFO_BIND_PORT);
  s->metrics_port = info ? (int)info->port : cfg->metrics_port;
  return ATTN_OK;
}

/* All of a PEM file (tls_*_file key) into *out, NUL-terminated. */
static attn_status read_pem(const char *key, const char *path, char **out,
                            attn_diag *d) {
  *out = NULL;
  FILE *f = fopen(path, "rb");
  if (!f)
    return attn_diag_set(d, ATTN_EIO, "%s '%s': cannot open: %s", key, path,
                         strerror(errno));
  char *buf = malloc(ATTN_MAX_PEM_FILE_BYTES + 1);
  size_t n = buf ? fread(buf, 1, ATTN_MAX_PEM_FILE_BYTES + 1, f) : 0;
  int err = ferror(f);
  fclose(f);
  const char *why = !buf                          ? "out of memory"
                    : err                         ? "cannot read it"
                    : n > ATTN_MAX_PEM_FILE_BYTES ? "larger than 4 MiB"
                    : n == 0                      ? "empty"
                                                  : NULL;
  if (!why) {
    buf[n] = '\0';
    if (!strstr(buf, "-----BEGIN ")) why = "not PEM (no -----BEGIN line)";
  }
  if (why) {
    free(buf);
    return attn_diag_set(d, ATTN_EIO, "%s '%s': %s", key, path, why);
  }
  *out = buf;
  return ATTN_OK;
}

/* Do the PEM files hold a certificate and its key (and CAs)?  Asked of
 * GnuTLS before libmicrohttpd, whose own message does not say which file
 * is wrong nor why. */
static attn_status check_tls_files(const attn_server *s, const attn_config *cfg,
                                   attn_diag *d) {
  gnutls_certificate_credentials_t cred;
  if (gnutls_certificate_allocate_credentials(&cred) != GNUTLS_E_SUCCESS)
    return attn_diag_set(d, ATTN_ENOMEM, "out of memory for TLS");
  gnutls_datum_t cert = {(unsigned char *)s->tls_cert,
                         (unsigned)strlen(s->tls_cert)};
  gnutls_datum_t key = {(unsigned char *)s->tls_key,
                        (unsigned)strlen(s->tls_key)};
  attn_status st = ATTN_OK;
  int rc = gnutls_certificate_set_x509_key_mem(cred, &cert, &key,
                                               GNUTLS_X509_FMT_PEM);
  if (rc < 0)
    st = attn_diag_set(d, ATTN_EINVAL,
                       "tls_cert_file '%s' and tls_key_file '%s' are not a "
                       "PEM certificate and its unencrypted private key: %s",
                       cfg->tls_cert_file, cfg->tls_key_file,
                       gnutls_strerror(rc));
  if (st == ATTN_OK && s->tls_ca) {
    gnutls_datum_t ca = {(unsigned char *)s->tls_ca,
                         (unsigned)strlen(s->tls_ca)};
    rc = gnutls_certificate_set_x509_trust_mem(cred, &ca, GNUTLS_X509_FMT_PEM);
    if (rc <= 0)
      st = attn_diag_set(d, ATTN_EINVAL,
                         "tls_client_ca_file '%s' holds no PEM certificate: %s",
                         cfg->tls_client_ca_file,
                         rc < 0 ? gnutls_strerror(rc) : "none found");
  }
  gnutls_certificate_free_credentials(cred);
  return st;
}

/* What access needs before the daemon starts: the API keys, the TLS
 * files, the prefix of made-up request ids. */
static attn_status setup_access(attn_server *s, const attn_server_deps *deps,
                                attn_diag *d) {
  const attn_config *cfg = deps->cfg;
  uint32_t r = 0;
  if (getrandom(&r, sizeof r, GRND_NONBLOCK) != sizeof r)
    r = (uint32_t)attn_now_ns() ^ (uint32_t)getpid();
  snprintf(s->id_prefix, sizeof s->id_prefix, "%08x", (unsigned)r);
  attn_status st =
      attn__auth_create(cfg->api_keys_file, deps->api_key, &s->ctx.auth, d);
  if (st == ATTN_OK)
    st = attn__auth_named("admin_api_keys_file", "ATTND_ADMIN_API_KEY",
                          cfg->admin_api_keys_file, deps->admin_api_key,
                          &s->ctx.admin_auth, d);
  if (st == ATTN_OK && *cfg->tls_cert_file) {
    if (!MHD_is_feature_supported(MHD_FEATURE_TLS))
      return attn_diag_set(d, ATTN_EINVAL,
                           "tls_cert_file is set but this libmicrohttpd has "
                           "no TLS support");
    st = read_pem("tls_cert_file", cfg->tls_cert_file, &s->tls_cert, d);
    if (st == ATTN_OK)
      st = read_pem("tls_key_file", cfg->tls_key_file, &s->tls_key, d);
    if (st == ATTN_OK && *cfg->tls_client_ca_file)
      st = read_pem("tls_client_ca_file", cfg->tls_client_ca_file, &s->tls_ca,
                    d);
    if (st == ATTN_OK) st = check_tls_files(s, cfg, d);
  }
  return st;
}

/* The daemon's TLS options into o[4] (an MHD_OPTION_ARRAY; ends with
 * MHD_OPTION_END); the flag to add. */
static unsigned tls_options(const attn_server *s, struct MHD_OptionItem *o) {
  int n = 0;
  if (s->tls_cert) {
    o[n++] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_CERT, 0, s->tls_cert};
    o[n++] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_KEY, 0, s->tls_key};
  }
  if (s->tls_ca)
    o[n++] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_TRUST, 0, s->tls_ca};
  o[n] = (struct MHD_OptionItem){MHD_OPTION_END, 0, NULL};
  return s->tls_cert ? MHD_USE_TLS : 0;
}

/* Free what attn_server_create made before the daemon (or with it). */
static void free_server(attn_server *s) {
  attn__peers_destroy(s->peers);
  attn__peers_destroy(s->metrics_peers);
  attn_metrics_destroy(s->ctx.metrics);
  attn__auth_destroy(s->ctx.auth);
  attn__auth_destroy(s->ctx.admin_auth);
  free(s->tls_cert);
  free(s->tls_key);
  free(s->tls_ca);
  pthread_mutex_destroy(&s->mu);
  free(s);
}

/* The daemon did not start: free s, say why. */
static attn_status listen_failed(attn_server *s, attn_diag *d) {
  const attn_config *cfg = s->ctx.cfg;
  int tls_on = s->tls_cert != NULL;
  free_server(s);
  if (tls_on)
    return attn_diag_set(
        d, ATTN_EIO,
        "cannot listen on %s:%d with TLS: the port is in use, or "
        "tls_cert_file '%s', tls_key_file '%s'%s%s%s are not a certificate "
        "and its key (the libmicrohttpd line above says which)",
        cfg->host, cfg->port, cfg->tls_cert_file, cfg->tls_key_file,
        *cfg->tls_client_ca_file ? " or tls_client_ca_file '" : "",
        cfg->tls_client_ca_file, *cfg->tls_client_ca_file ? "'" : "");
  return attn_diag_set(d, ATTN_EIO,
                       "cannot listen on %s:%d (is the port in use?)",
                       cfg->host, cfg->port);
}

attn_status attn_server_create(const attn_server_deps *deps, attn_server **out,
                               attn_diag *d) {
  const attn_config *cfg = deps->cfg;
  struct addrinfo hints = {0}, *ai = NULL;
  char port[16];
  *out = NULL;
  attn_server *s = calloc(1, sizeof *s);
  if (!s) return attn_diag_set(d, ATTN_ENOMEM, "out of memory");
  s->ctx.cfg = cfg;
  s->ctx.models = deps->models;
  s->ctx.queue = deps->queue;
  s->ctx.pool = deps->pool;
  s->ctx.sessions = deps->sessions;
  long ncpu = deps->cpus > 0 ? deps->cpus : sysconf(_SC_NPROCESSORS_ONLN);
  s->ctx.ncpu = ncpu > 0 ? (int)ncpu : 1;
  atomic_init(&s->ctx.unready, false);
  atomic_init(&s->ctx.draining, false);
  atomic_init(&s->ctx.next_id, 1);
  atomic_init(&s->inflight, 0);
  atomic_init(&s->arriving, 0);
  atomic_init(&s->drain_begun_ns, 0);
  attn_status st = make_metrics(s, deps, d);
  attn__peer_limits lim = peer_limits(cfg);
  lim.access_log = cfg->access_log;
  lim.tls = *cfg->tls_cert_file != '\0';
  lim.metrics = s->ctx.metrics;
  lim.metrics_route = attn__route_template("-");
  if (st == ATTN_OK) st = start_peers(&lim, &s->peers, d);
  if (st != ATTN_OK) {
    attn_metrics_destroy(s->ctx.metrics);
    free(s);
    return st;
  }
  pthread_mutex_init(&s->mu, NULL);
  s->body_budget = deps->body_budget > 0 ? (size_t)deps->body_budget : SIZE_MAX;
  atomic_init(&s->body_held, 0);
  s->ctx.body_held = &s->body_held;
  s->ctx.body_budget = s->body_budget;
  if ((st = setup_access(s, deps, d)) != ATTN_OK) {
    free_server(s);
    return st;
  }

  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  snprintf(port, sizeof port, "%d", cfg->port);
  int gai = getaddrinfo(cfg->host, port, &hints, &ai);
  if (gai != 0) {
    free_server(s);
    return attn_diag_set(d, ATTN_EINVAL, "host '%s': %s", cfg->host,
                         gai_strerror(gai));
  }
  struct MHD_OptionItem tls[4];
  unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_AUTO |
                   MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG |
                   tls_options(s, tls);
  if (ai->ai_family == AF_INET6) flags |= MHD_USE_IPv6;
  unsigned pool = cfg->http_threads > 1 ? (unsigned)cfg->http_threads : 0;
  s->daemon = MHD_start_daemon(
      flags, 0, NULL, NULL, on_request, s, MHD_OPTION_EXTERNAL_LOGGER, mhd_log,
      NULL, MHD_OPTION_SOCK_ADDR, ai->ai_addr, MHD_OPTION_CONNECTION_LIMIT,
      (unsigned)(cfg->max_connections + ATTN_ADMIT_HEADROOM),
      MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)cfg->connection_timeout_s,
      MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
      MHD_OPTION_NOTIFY_CONNECTION, on_connection, s,
      MHD_OPTION_UNESCAPE_CALLBACK, unescape_url, NULL,
      MHD_OPTION_THREAD_POOL_SIZE, pool, MHD_OPTION_LISTENING_ADDRESS_REUSE,
      (unsigned)1, MHD_OPTION_ARRAY, tls, MHD_OPTION_END);
  freeaddrinfo(ai);
  if (!s->daemon) return listen_failed(s, d);
  const union MHD_DaemonInfo *info =
      MHD_get_daemon_info(s->daemon, MHD_DAEMON_INFO_BIND_PORT);
  s->port = info ? (int)info->port : cfg->port;
  st = start_metrics_port(s, d);
  if (st != ATTN_OK) {
    attn_server_destroy(s);
    return st;
  }
  *out = s;
  return ATTN_OK;
}

int attn_server_metrics_port(const attn_server *s) {
  return s->metrics_port;
}

int attn_server_port(const attn_server *s) {
  return s->port;
}

void attn_server_set_unready(attn_server *s) {
  atomic_store(&s->ctx.unready, true);
}

void attn_server_begin_drain(attn_server *s) {
  atomic_store(&s->drain_begun_ns, attn_now_ns());
  atomic_store(&s->ctx.unready, true);
  atomic_store(&s->ctx.draining, true);
}

attn_status attn_server_wait_arrivals(attn_server *s, int64_t timeout_ms,
                                      int *left) {
  uint64_t end =
      attn_now_ns() + (uint64_t)(timeout_ms < 0 ? 0 : timeout_ms) * 1000000u;
  int n;
  while ((n = atomic_load(&s->arriving)) > 0 && attn_now_ns() < end) {
    struct timespec ts = {0, 5 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
  if (left) *left = n > 0 ? n : 0;
  return n > 0 ? ATTN_ETIMEDOUT : ATTN_OK;
}

attn_status attn_server_wait_idle(attn_server *s, int64_t timeout_ms) {
  uint64_t now = attn_now_ns();
  uint64_t end = now + (uint64_t)(timeout_ms < 0 ? 0 : timeout_ms) * 1000000u;
  uint64_t linger = now + (uint64_t)ATTN_DRAIN_LINGER_MS * 1000000u;
  if (linger > end) linger = end;
  for (;; now = attn_now_ns()) {
    int busy = atomic_load(&s->inflight) > 0;
    /* a request a client wrote just before the drain may still be in its
     * socket, unread: it is answered (503, Connection: close) if one
     * comes within ATTN_DRAIN_QUIET_MS, rather than cut by the exit */
    uint64_t last = atomic_load(&s->drain_begun_ns);
    int quiet = now - last >= (uint64_t)ATTN_DRAIN_QUIET_MS * 1000000u;
    if (!busy && (quiet || now >= linger)) return ATTN_OK;
    if (now >= end) return ATTN_ETIMEDOUT;
    struct timespec ts = {0, 5 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
}

int attn_server_abandon(attn_server *s) {
  int n = 0;
  uint64_t now = attn_now_ns();
  pthread_mutex_lock(&s->mu);
  s->abandoned = 1;
  for (conn_ctx *cx = s->live; cx; cx = cx->next, n++) {
    if (!s->ctx.cfg->access_log ||
        access_excluded(s->ctx.cfg->access_log_exclude, cx->path))
      continue;
    int done = atomic_load(&cx->done);
    char model[ATTN_MAX_NAME_LEN + 1];
    attn_access a = {.method = cx->method,
                     .path = cx->path,
                     .request_id = cx->request_id,
                     .status = done ? cx->resp.status : 499,
                     .bytes_in = cx->received,
                     .queue_ms = done ? cx->resp.queue_ms : 0,
                     .compute_ms = done ? cx->resp.compute_ms : 0,
                     .total_ms = (double)(now - cx->start_ns) / 1e6,
                     .closed = "shutdown"};
    access_client(cx, done ? &cx->resp : NULL, &a, model, sizeof model);
    attn_log_access(&a);
  }
  pthread_mutex_unlock(&s->mu);
  return n;
}

void attn_server_destroy(attn_server *s) {
  if (!s) return;
  if (s->metrics_daemon) MHD_stop_daemon(s->metrics_daemon);
  if (s->daemon) MHD_stop_daemon(s->daemon);
  free_server(s);
}

size_t attn_server_key_count(attn_server *s) {
  return attn__auth_count(s->ctx.auth);
}

/* Re-read a's file; none says why there is nothing to re-read. */
static attn_status reload_set(attn__auth *a, const char *none, size_t *count,
                              attn_diag *d) {
  *count = 0;
  if (!a) return attn_diag_set(d, ATTN_ENOTFOUND, "%s", none);
  return attn__auth_reload(a, count, d);
}

attn_status attn_server_reload_keys(attn_server *s, size_t *count,
                                    attn_diag *d) {
  return reload_set(s->ctx.auth, "no api_keys_file to re-read (keys are off)",
                    count, d);
}

size_t attn_server_admin_key_count(attn_server *s) {
  return attn__auth_count(s->ctx.admin_auth);
}

attn_status attn_server_reload_admin_keys(attn_server *s, size_t *count,
                                          attn_diag *d) {
  return reload_set(s->ctx.admin_auth,
                    "no admin_api_keys_file to re-read (no admin keys)", count,
                    d);
}

uint64_t attn_server_auth_failures(attn_server *s) {
  return attn__auth_failures(s->ctx.auth) +
         attn__auth_failures(s->ctx.admin_auth);
}
