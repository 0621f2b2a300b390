/* peers.h - peers.c's interface: every open connection of a listener.
 * Private to src/server/ (docs/architecture.md). */
#ifndef ATTN_SERVER_PEERS_H
#define ATTN_SERVER_PEERS_H

#include <sys/socket.h>
#include "internal.h"

/* peers.c: closes connections whose client left between requests without
 * libmicrohttpd seeing it (see the file's DESIGN).  One attn__peers per
 * listener (port, and metrics_port when set); one attn__peer per open
 * connection. */
typedef struct attn__peers attn__peers;
typedef struct attn__peer attn__peer;
/* A registry, with a sweeper thread that calls attn__peers_sweep every
 * interval_ms (none when interval_ms <= 0: tests sweep by hand).  On
 * error *out is NULL and nothing is left.  Main thread. */
attn_status attn__peers_create(int interval_ms, attn__peers **out,
                               attn_diag *d);
/* Stops the sweeper and frees all; NULL is a no-op.  After the daemon
 * has stopped.  Main thread. */
void attn__peers_destroy(attn__peers *p);
/* One look at every peer not handling a request: shuts down the sockets
 * seen at their end twice in a row with no request begun in between, and
 * cuts (408) the requests past the time limits (attn__peer_limits) as of
 * now (attn_now_ns's clock; a test hands a later one instead of
 * sleeping).  Returns how many this call shut down.  Sweeper (or a
 * test). */
int attn__peers_sweep(attn__peers *p, uint64_t now);
/* Connections shut down by sweeps so far.  Any thread. */
unsigned long long attn__peers_closed(attn__peers *p);
/* The limits the sweeps and admission keep (see peers.c's DESIGN). */
typedef struct attn__peer_limits {
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
} attn__peer_limits;
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
void attn__peers_set_limits(attn__peers *p, const attn__peer_limits *lim);
/* Register the connection on socket fd from address sa (NULL: unknown);
 * NULL when out of memory (the connection is then not watched).  MHD
 * thread, when it opens. */
struct sockaddr;
attn__peer *attn__peer_open(attn__peers *p, int fd, const struct sockaddr *sa);
/* e's client address as text ("127.0.0.1", "::1"), made when it opened;
 * "" when unknown (e NULL, not IP) or when the limits' access_log is off.
 * Lives as long as e.  Any thread. */
const char *attn__peer_address(const attn__peer *e);
/* Admit the connection e just opened: 0, or the status (429 past
 * max_per_ip, 503 when max_connections are all handling requests) already
 * written on its socket, which is shut down.  Makes room at the limit by
 * shutting down the idle connection that waited longest (kept-alive ones
 * first).  NULL is admitted.  MHD thread, right after attn__peer_open. */
int attn__peers_admit(attn__peers *p, attn__peer *e);
/* A small JSON answer ({"error": msg}; msg holds no quote or backslash)
 * written straight on a socket, with Connection: close, for the moments
 * libmicrohttpd cannot answer (a body being read, a connection it has not
 * begun to read).  One non-blocking send; errors ignored.  Any thread.
 * Plain TCP only: on a TLS connection these bytes would break the stream,
 * so when the listener speaks TLS the callers only shut the socket
 * down (peers.c's cut_slow and attn__peers_admit: attn__peer_limits.tls;
 * http.c's refuse_too_big: no fd under TLS). */
void attn__raw_answer(int fd, int status, const char *request_id,
                      int retry_after_s, const char *msg);
/* Unregister (NULL is a no-op), before the socket is closed. */
void attn__peer_close(attn__peers *p, attn__peer *e);
/* A request begins (its headers are read) / has ended (completed or cut):
 * the sweeper leaves a peer alone in between, but for the body's rate.
 * begin returns 0 when the connection was cut already (give it up).  NULL
 * is a no-op (1).  The connection's MHD thread. */
int attn__peer_begin(attn__peer *e);
void attn__peer_end(attn__peer *e);
/* The request's body: it begins (after the headers), received bytes so
 * far (0: the connection was cut, give it up), it is whole or answered
 * (0: cut).  NULL is a no-op (1).  The connection's MHD thread. */
void attn__peer_body_begin(attn__peer *e);
int attn__peer_body_bytes(attn__peer *e, uint64_t received);
int attn__peer_body_end(attn__peer *e);
/* Has the client of e left while its request waits (the connection
 * suspended, its request and body read whole)?  1 when its socket was
 * reset, or is at its end (FIN, every byte read) and that FIN came
 * ATTN_PEER_LEFT_GAP_MS or more after the last byte of data the client
 * sent (TCP_INFO: tcpi_last_data_recv, tcpi_last_ack_recv): a client
 * that half-closes right after sending its request (shutdown(SHUT_WR))
 * is still waiting for the answer, and such a FIN follows its last bytes
 * at once.  0 when bytes wait unread (a pipelined request), when the
 * socket is open, when that cannot be told (no TCP_INFO; attnd sent data
 * after the client's last byte, an answer to an earlier pipelined
 * request, whose acknowledgements may follow the FIN; a TLS listener:
 * the library's close_notify bytes are data), or e is NULL.  Peeks under
 * the registry's lock, so never a descriptor already closed.  Any thread
 * (a worker, as it takes the job). */
int attn__peer_left(attn__peers *p, attn__peer *e);
#define ATTN_PEER_LEFT_GAP_MS 100
/* Why the connection was cut (ATTN_PEER_CUT_*), 0 when it was not. */
int attn__peer_cut(const attn__peer *e);
/* Mutual TLS: the verdict on the client certificate der[0, n) when this
 * connection verified that very certificate within the last
 * ATTN_PEER_CERT_TTL_NS (the ok, >= 0, given to remember: http.c's
 * meaning), else -1 (NULL: -1).  remember keeps der (up to
 * ATTN_PEER_CERT_MAX bytes), its verdict and when, for the connection's
 * life.  Times on attn_now_ns's clock.  The connection's
 * MHD thread. */
#define ATTN_PEER_CERT_MAX 16384
#define ATTN_PEER_CERT_TTL_NS (60ull * 1000000000ull)
int attn__peer_cert_known(const attn__peer *e, const void *der, size_t n,
                          uint64_t now_ns);
void attn__peer_cert_remember(attn__peer *e, const void *der, size_t n, int ok,
                              uint64_t now_ns);

#endif
