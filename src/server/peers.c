/* peers.c - closes connections whose clients left without being seen to.
 *
 * Design
 *   libmicrohttpd 0.9.75 watches its sockets with edge-triggered epoll and
 *   takes a short read to mean "nothing more for now".  A FIN that arrives
 *   together with a client's last bytes then raises no further event: a
 *   client that sends part of its headers (or any garbage) and closes is
 *   kept until connection_timeout_s (forever when that is 0), holding one
 *   of max_connections.  Measured with 200 such clients: 195-198 kept
 *   (partial headers), 68-94 (200 random bytes); none 3 s later with the
 *   sweeps of this file (http.c sweeps every PEER_SWEEP_MS = 500 ms).
 *   While a request is being handled http.c looks after its socket itself
 *   (peer_gone(), chunked_peer_check()); this file covers the time between
 *   requests, which is where libmicrohttpd reads headers.  It also tells
 *   a worker whether the client of a request that waited in the queue
 *   has left (attn__peer_left), peeking under the registry's lock.
 *
 *   Each listener has its own registry (an attn__peers, its limits and its
 *   sweeper): port, and metrics_port when set, whose scrapes and health
 *   probes thus keep their own room (http.c gives it at most
 *   ATTN_METRICS_PORT_CONNECTIONS; attn__peer_limits.name names it in the
 *   warning).
 *
 *   Every connection is registered here when it opens (an attn__peer with
 *   its fd) and unregistered before its socket is closed.  A sweeper thread
 *   looks at each connection that is not handling a request every
 *   interval_ms: recv(MSG_PEEK | MSG_DONTWAIT) tells whether the socket is
 *   at its end (0: the client closed and every byte it sent has been read)
 *   or was reset.  Seen so twice in a row with no request begun in between,
 *   the socket is shut down (SHUT_RDWR), which libmicrohttpd's epoll does
 *   see: it reads the end and closes the connection as it would have.
 *   Twice, because a client that pipelines requests and then half-closes
 *   has its next request in libmicrohttpd's buffer while the socket is
 *   already at its end: that request begins within microseconds of the
 *   previous one ending, long before the second look, and is answered.
 *   shutdown() drops nothing already queued for sending.
 *
 *   The same sweeps keep the time limits (attn__peers_set_limits): a
 *   request whose line and headers are not complete header_timeout_s after
 *   they began, and a body slower than body_min_rate_bytes_s for longer
 *   than header_timeout_s, are cut with a 408 written on the socket
 *   (libmicrohttpd 0.9.75 cannot time a request's headers, and each byte
 *   resets its idle timer), then shut down (a header timeout is also
 *   counted in the metrics: attnd_http_requests_total, code 408, route
 *   "other").  When headers begin: for a
 *   new connection, when it opened; for a kept-alive one, the first sweep
 *   that sees the socket's received-bytes counter (TCP_INFO) pass where it
 *   stood when the previous request ended (an idle keep-alive connection
 *   is connection_timeout_s's, not this limit's).  A stage per connection
 *   (idle, busy, body, cut; compare-and-swap) makes sure that the sweeper
 *   writes only on a socket libmicrohttpd is not answering on: once cut,
 *   http.c's next step (attn__peer_begin, _body_end) fails and it gives
 *   the connection up.
 *
 *   Admission (attn__peers_admit, as each connection opens): past
 *   max_connections_per_ip connections from one address, 429; past
 *   max_connections, room is made by closing the connection that has
 *   waited longest without a complete request (idle keep-alive ones
 *   first), and when none waits, the new one gets a 503 with Retry-After.
 *   libmicrohttpd's own limit is max_connections + ATTN_ADMIT_HEADROOM, so
 *   that it keeps accepting (at its limit it stops and clients wait in the
 *   backlog, unanswered) and these refusals are prompt.  A warning line, at
 *   most once a second, counts what was closed and refused.
 *
 * Threads
 *   MHD threads: attn__peer_open, attn__peer_close, attn__peer_begin,
 *   attn__peer_end, attn__peers_admit, the body steps.  The sweeper thread
 *   (or a test): attn__peers_sweep.  main: attn__peers_create,
 *   attn__peers_destroy, attn__peers_set_limits (before connections).
 *   Workers: attn__peer_left, on a connection suspended for their job
 *   (libmicrohttpd neither reads nor closes it then).
 *
 * Invariants
 *   - Under mu: the list holds exactly the open peers; a peer's fd is open
 *     while it is on the list (attn__peer_close runs before the socket is
 *     closed), so the sweeper never touches a reused descriptor.
 *   - stage goes IDLE -> BUSY (-> BODY -> BUSY) -> IDLE on the
 *     connection's MHD thread, and IDLE or BODY -> CUT on the sweeper or
 *     in admit; CUT is final.  begun and the body counters are written by
 *     the MHD thread; eof_sweeps, begun_seen, shut and the header clock
 *     are the sweeper's, under mu (admit reads them under mu too).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <linux/tcp.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "attn/log.h"
#include "attn/metrics.h"
#include "internal.h"
#include "peers.h"

enum { PEER_IDLE, PEER_BUSY, PEER_BODY, PEER_CUT };

struct attn__peer {
  int fd;
  atomic_int stage;  /* PEER_*; see Invariants */
  atomic_int cut;    /* why it was cut: ATTN_PEER_CUT_* */
  atomic_uint begun; /* requests begun on this connection */
  atomic_uint_fast64_t body_start_ns, body_bytes; /* in PEER_BODY */
  uint64_t open_ns;
  unsigned char ip[16]; /* the client's address (ip_len bytes) */
  int ip_len;
  /* ip as text for the access lines, made once when it opens (with the
   * access log on): "" when not */
  char ip_text[INET6_ADDRSTRLEN];
  /* the sweeper's */
  int eof_sweeps;      /* consecutive sweeps that saw the socket's end */
  unsigned begun_seen; /* begun at the first of those sweeps */
  int shut;            /* shut down already */
  unsigned hdr_begun;  /* begun when the header clock was last set */
  int hdr_seen;        /* the header clock has been set once */
  uint64_t rx_mark;    /* bytes received when the last request ended */
  uint64_t hdr_since;  /* when this request's headers began; 0: not yet */
  /* mutual TLS: the client certificate verified on this connection (its
   * DER bytes, malloc'd) and the verdict; the connection's MHD thread */
  unsigned char *cert;
  size_t cert_len;
  int cert_ok;         /* the verdict (>= 0; http.c's meaning) */
  uint64_t cert_ns;    /* when it was verified */
  uint64_t idle_since; /* when the last request ended (or it opened) */
  attn__peer *prev, *next;
};

struct attn__peers {
  pthread_mutex_t mu;
  pthread_cond_t cv; /* stop */
  attn__peer *head;
  int open; /* peers not shut down, under mu */
  int interval_ms;
  int stop;
  int have_thread;
  pthread_t thread;
  attn__peer_limits lim;
  atomic_ullong closed; /* connections shut down by a sweep, ever */
  /* the limit's warning: counts since the last one, when it was written */
  atomic_ullong evicted, refused;
  atomic_uint_fast64_t warned_ns;
};

/* 1: the socket is at its end or broken, 0: open (or bytes waiting). */
static int socket_ended(int fd) {
  char c;
  ssize_t r = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
  if (r > 0) return 0;
  if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
    return 0;
  return 1;
}

/* e is shut down (by this file): it no longer counts as open.  Under mu. */
static void mark_shut(attn__peers *p, attn__peer *e) {
  if (e->shut) return;
  e->shut = 1;
  p->open--;
}

/* See internal.h. */
void attn__raw_answer(int fd, int status, const char *request_id,
                      int retry_after_s, const char *msg) {
  char body[384], head[320], ra[32] = "";
  const char *reason = status == 408   ? "Request Timeout"
                       : status == 413 ? "Content Too Large"
                       : status == 429 ? "Too Many Requests"
                                       : "Service Unavailable";
  int bn = snprintf(body, sizeof body, "{\"error\":\"%s\"}", msg);
  if (bn < 0 || (size_t)bn >= sizeof body) return;
  if (retry_after_s > 0)
    snprintf(ra, sizeof ra, "Retry-After: %d\r\n", retry_after_s);
  int hn =
      snprintf(head, sizeof head,
               "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\n"
               "Content-Length: %d\r\n%s%s%.72s%sConnection: close\r\n\r\n",
               status, reason, bn, ra, request_id ? "X-Request-Id: " : "",
               request_id ? request_id : "", request_id ? "\r\n" : "");
  if (hn < 0 || (size_t)hn >= sizeof head) return;
  char all[sizeof head + sizeof body];
  memcpy(all, head, (size_t)hn);
  memcpy(all + hn, body, (size_t)bn);
  /* small, on a socket with room: one try, never waits */
  ssize_t w = send(fd, all, (size_t)(hn + bn), MSG_NOSIGNAL | MSG_DONTWAIT);
  (void)w;
}

/* Bytes received on the socket so far (TCP_INFO); 0 when unknown. */
static int rx_bytes(int fd, uint64_t *out) {
  struct tcp_info ti;
  socklen_t len = sizeof ti;
  memset(&ti, 0, sizeof ti);
  if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) != 0 ||
      len < offsetof(struct tcp_info, tcpi_bytes_received) +
                sizeof ti.tcpi_bytes_received)
    return 0;
  *out = ti.tcpi_bytes_received;
  return 1;
}

/* See peers.h.  The FIN's time: a closed socket receives nothing after
 * it but acknowledgements of what attnd sends, and nothing is sent to
 * the client while its request waits; so, when attnd has sent no data
 * since the client's last byte, the last segment with an ACK is the FIN.
 * The last data before it is the request's end (or a later pipelined
 * request's, which makes the gap smaller: answered).  When attnd has
 * sent data since (the answer to an earlier pipelined request, whose
 * acknowledgements come after a FIN sent with the requests), the FIN's
 * time is not known: not left, the request is answered. */
int attn__peer_left(attn__peers *p, attn__peer *e) {
  int left = 0;
  char c;
  if (!e || p->lim.tls) return 0;
  pthread_mutex_lock(&p->mu); /* e->fd is open while e is registered */
  ssize_t r = e->shut ? 1 : recv(e->fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
  if (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
    left = 1; /* reset */
  } else if (r == 0) {
    struct tcp_info ti;
    socklen_t len = sizeof ti;
    memset(&ti, 0, sizeof ti);
    if (getsockopt(e->fd, IPPROTO_TCP, TCP_INFO, &ti, &len) == 0 &&
        len >= offsetof(struct tcp_info, tcpi_last_ack_recv) +
                   sizeof ti.tcpi_last_ack_recv)
      left = ti.tcpi_last_data_sent >= ti.tcpi_last_data_recv &&
             ti.tcpi_last_data_recv >=
                 ti.tcpi_last_ack_recv + (uint32_t)ATTN_PEER_LEFT_GAP_MS;
  }
  pthread_mutex_unlock(&p->mu);
  return left;
}

/* Cut e (IDLE or BODY) with a 408: 1 when this call did.  Under mu. */
static int cut_slow(attn__peers *p, attn__peer *e, int from, int why,
                    uint64_t now) {
  int expect = from;
  if (!atomic_compare_exchange_strong(&e->stage, &expect, PEER_CUT)) return 0;
  atomic_store(&e->cut, why);
  char msg[200];
  if (why == ATTN_PEER_CUT_HEADERS)
    snprintf(msg, sizeof msg,
             "the request line and headers did not arrive within "
             "header_timeout_s=%d",
             p->lim.header_timeout_s);
  else
    snprintf(msg, sizeof msg,
             "the request body arrived slower than body_min_rate_bytes_s=%lld "
             "for longer than header_timeout_s=%d",
             (long long)p->lim.body_min_rate, p->lim.header_timeout_s);
  if (!p->lim.tls) attn__raw_answer(e->fd, 408, NULL, 0, msg);
  shutdown(e->fd, SHUT_RDWR);
  mark_shut(p, e);
  if (why == ATTN_PEER_CUT_HEADERS && p->lim.access_log) {
    /* no request began: the access line is written here */
    attn_access a = {.client = attn__peer_address(e),
                     .method = "-",
                     .path = "-",
                     .request_id = "-",
                     .status = 408,
                     .total_ms = (double)(now - e->hdr_since) / 1e6,
                     .closed = "header_timeout"};
    attn_log_access(&a);
  }
  if (why == ATTN_PEER_CUT_HEADERS && p->lim.metrics)
    attn_metrics_http(p->lim.metrics, p->lim.metrics_route,
                      attn_metrics_method("-"), 408, 0, 0);
  return 1;
}

/* The time limits, for one peer: headers (IDLE) and body rate (BODY).
 * 1 when it was cut.  Under mu. */
static int sweep_limits(attn__peers *p, attn__peer *e, uint64_t now) {
  uint64_t limit = (uint64_t)p->lim.header_timeout_s * 1000000000u;
  if (!limit) return 0;
  int stage = atomic_load(&e->stage);
  if (stage == PEER_BODY && p->lim.body_min_rate > 0) {
    uint64_t t0 = atomic_load(&e->body_start_ns);
    uint64_t got = atomic_load(&e->body_bytes);
    if (now > t0 + limit &&
        (double)got < (double)p->lim.body_min_rate * (double)(now - t0) / 1e9)
      return cut_slow(p, e, PEER_BODY, ATTN_PEER_CUT_BODY, now);
    return 0;
  }
  if (stage != PEER_IDLE) return 0;
  unsigned begun = atomic_load(&e->begun);
  if (!e->hdr_seen || begun != e->hdr_begun) { /* a request since: reset */
    e->hdr_seen = 1;
    e->hdr_begun = begun;
    e->hdr_since = begun ? 0 : e->open_ns;
    e->idle_since = begun ? now : e->open_ns;
    if (!rx_bytes(e->fd, &e->rx_mark)) e->rx_mark = UINT64_MAX;
  } else if (!e->hdr_since && e->rx_mark != UINT64_MAX) {
    uint64_t rx;
    if (rx_bytes(e->fd, &rx) && rx > e->rx_mark) e->hdr_since = now;
  }
  if (e->hdr_since && now > e->hdr_since + limit)
    return cut_slow(p, e, PEER_IDLE, ATTN_PEER_CUT_HEADERS, now);
  return 0;
}

int attn__peers_sweep(attn__peers *p, uint64_t now) {
  int n = 0, slow = 0;
  pthread_mutex_lock(&p->mu);
  for (attn__peer *e = p->head; e; e = e->next) {
    unsigned begun = atomic_load(&e->begun);
    if (!e->shut && sweep_limits(p, e, now)) {
      slow++;
      continue;
    }
    if (e->shut || atomic_load(&e->stage) != PEER_IDLE ||
        !socket_ended(e->fd)) {
      e->eof_sweeps = 0;
      continue;
    }
    if (e->eof_sweeps == 0 || begun != e->begun_seen) {
      e->eof_sweeps = 1;
      e->begun_seen = begun;
      continue;
    }
    shutdown(e->fd, SHUT_RDWR);
    mark_shut(p, e);
    n++;
  }
  pthread_mutex_unlock(&p->mu);
  if (n) atomic_fetch_add(&p->closed, (unsigned long long)n);
  return n + slow;
}

static void *sweeper_main(void *arg) {
  attn__peers *p = arg;
  pthread_mutex_lock(&p->mu);
  while (!p->stop) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_sec += p->interval_ms / 1000;
    ts.tv_nsec += (long)(p->interval_ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
      ts.tv_sec++;
      ts.tv_nsec -= 1000000000L;
    }
    while (!p->stop && pthread_cond_timedwait(&p->cv, &p->mu, &ts) == 0) {
    }
    if (p->stop) break;
    pthread_mutex_unlock(&p->mu);
    int n = attn__peers_sweep(p, attn_now_ns());
    if (n)
      attn_log(ATTN_LOG_INFO,
               "closed %d connection%s whose client had closed it between "
               "requests (libmicrohttpd had not seen the close)",
               n, n == 1 ? "" : "s");
    pthread_mutex_lock(&p->mu);
  }
  pthread_mutex_unlock(&p->mu);
  return NULL;
}

attn_status attn__peers_create(int interval_ms, attn__peers **out,
                               attn_diag *d) {
  *out = NULL;
  attn__peers *p = calloc(1, sizeof *p);
  if (!p) return attn_diag_set(d, ATTN_ENOMEM, "out of memory");
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_mutex_init(&p->mu, NULL);
  pthread_cond_init(&p->cv, &ca);
  pthread_condattr_destroy(&ca);
  atomic_init(&p->closed, 0);
  p->interval_ms = interval_ms;
  if (interval_ms > 0) {
    int rc = pthread_create(&p->thread, NULL, sweeper_main, p);
    if (rc) {
      pthread_cond_destroy(&p->cv);
      pthread_mutex_destroy(&p->mu);
      free(p);
      return attn_diag_set(d, ATTN_ENOMEM,
                           "cannot start the connection sweeper thread");
    }
    p->have_thread = 1;
  }
  *out = p;
  return ATTN_OK;
}

void attn__peers_destroy(attn__peers *p) {
  if (!p) return;
  if (p->have_thread) {
    pthread_mutex_lock(&p->mu);
    p->stop = 1;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    pthread_join(p->thread, NULL);
  }
  while (p->head) { /* none when libmicrohttpd closed every connection */
    attn__peer *e = p->head;
    p->head = e->next;
    free(e->cert);
    free(e);
  }
  pthread_cond_destroy(&p->cv);
  pthread_mutex_destroy(&p->mu);
  free(p);
}

unsigned long long attn__peers_closed(attn__peers *p) {
  return atomic_load(&p->closed);
}

/* The idle peer (not e) to close to make room: one between requests,
 * kept alive with nothing sent first, else the one that has waited
 * longest without a complete request.  NULL when every other connection
 * is handling a request.  Under mu. */
static attn__peer *eviction_victim(attn__peers *p, const attn__peer *e) {
  attn__peer *best = NULL;
  int best_ka = 0;
  for (attn__peer *v = p->head; v; v = v->next) {
    if (v == e || v->shut || atomic_load(&v->stage) != PEER_IDLE) continue;
    /* kept alive and quiet: requests before, no header clock running */
    int ka = atomic_load(&v->begun) > 0 && !v->hdr_since;
    uint64_t since = v->hdr_since ? v->hdr_since : v->idle_since;
    uint64_t best_since =
        best ? (best->hdr_since ? best->hdr_since : best->idle_since) : 0;
    if (!best || ka > best_ka || (ka == best_ka && since < best_since))
      best = v, best_ka = ka;
  }
  return best;
}

/* Connections from e's address, e included.  Under mu. */
static int same_address(attn__peers *p, const attn__peer *e) {
  int n = 0;
  for (attn__peer *v = p->head; v; v = v->next)
    n += !v->shut && v->ip_len == e->ip_len &&
         !memcmp(v->ip, e->ip, (size_t)e->ip_len);
  return n;
}

/* The limit's warning, at most once a second.  Any thread, no lock. */
static void limit_warning(attn__peers *p) {
  uint64_t now = attn_now_ns(), last = atomic_load(&p->warned_ns);
  if (last && now - last < 1000000000u) return;
  if (!atomic_compare_exchange_strong(&p->warned_ns, &last, now)) return;
  unsigned long long ev = atomic_exchange(&p->evicted, 0);
  unsigned long long rf = atomic_exchange(&p->refused, 0);
  attn_log(ATTN_LOG_WARN,
           "connection limit reached%s%s (max_connections=%d, "
           "max_connections_per_ip=%d): closed %llu idle connection%s to make "
           "room and refused %llu since the last warning",
           p->lim.name ? " on " : "", p->lim.name ? p->lim.name : "",
           p->lim.max_connections, p->lim.max_per_ip, ev, ev == 1 ? "" : "s",
           rf);
}

int attn__peers_admit(attn__peers *p, attn__peer *e) {
  if (!e) return 0;
  int status = 0;
  pthread_mutex_lock(&p->mu);
  if (p->lim.max_per_ip > 0 && e->ip_len &&
      same_address(p, e) > p->lim.max_per_ip) {
    status = 429;
  } else if (p->lim.max_connections > 0) {
    while (p->open > p->lim.max_connections) {
      attn__peer *v = eviction_victim(p, e);
      int idle = PEER_IDLE;
      if (!v) {
        status = 503;
        break;
      }
      if (!atomic_compare_exchange_strong(&v->stage, &idle, PEER_CUT))
        continue; /* began a request just now: look again */
      atomic_store(&v->cut, ATTN_PEER_CUT_EVICTED);
      shutdown(v->fd, SHUT_RDWR);
      mark_shut(p, v);
      atomic_fetch_add(&p->evicted, 1);
    }
  }
  if (status) { /* e itself never began a request: nothing races */
    atomic_store(&e->stage, PEER_CUT);
    atomic_store(&e->cut, ATTN_PEER_CUT_REFUSED);
    mark_shut(p, e);
    atomic_fetch_add(&p->refused, 1);
  }
  pthread_mutex_unlock(&p->mu);
  if (status) {
    char msg[160];
    if (status == 429)
      snprintf(msg, sizeof msg,
               "too many connections from your address "
               "(max_connections_per_ip=%d); retry after a moment",
               p->lim.max_per_ip);
    else
      snprintf(msg, sizeof msg,
               "server busy: all %d connections%s%s are handling requests "
               "(max_connections); retry after a moment",
               p->lim.max_connections, p->lim.name ? " of " : "",
               p->lim.name ? p->lim.name : "");
    if (!p->lim.tls) attn__raw_answer(e->fd, status, NULL, 1, msg);
    shutdown(e->fd, SHUT_RDWR);
  }
  if (status || atomic_load(&p->evicted)) limit_warning(p);
  return status;
}

void attn__peers_set_limits(attn__peers *p, const attn__peer_limits *lim) {
  pthread_mutex_lock(&p->mu);
  p->lim = *lim;
  pthread_mutex_unlock(&p->mu);
}

/* e->ip as text into e->ip_text: IPv4 digits by hand (glibc's inet_ntop
 * formats them with sprintf, some 2,000 instructions), IPv6 with
 * inet_ntop; "" for none.  Once per connection, when it opens. */
static void address_text(attn__peer *e) {
  char *o = e->ip_text;
  if (e->ip_len == 4) {
    for (int i = 0; i < 4; i++) {
      unsigned v = e->ip[i];
      if (i) *o++ = '.';
      if (v >= 100) *o++ = (char)('0' + v / 100);
      if (v >= 10) *o++ = (char)('0' + v / 10 % 10);
      *o++ = (char)('0' + v % 10);
    }
    *o = '\0';
  } else if (e->ip_len != 16 ||
             !inet_ntop(AF_INET6, e->ip, o, sizeof e->ip_text)) {
    *o = '\0';
  }
}

attn__peer *attn__peer_open(attn__peers *p, int fd, const struct sockaddr *sa) {
  attn__peer *e = calloc(1, sizeof *e);
  if (!e) return NULL; /* untracked: libmicrohttpd's timeout still holds */
  e->fd = fd;
  atomic_init(&e->stage, PEER_IDLE);
  atomic_init(&e->cut, 0);
  atomic_init(&e->begun, 0);
  atomic_init(&e->body_start_ns, 0);
  atomic_init(&e->body_bytes, 0);
  e->open_ns = e->idle_since = attn_now_ns();
  if (sa && sa->sa_family == AF_INET) {
    memcpy(e->ip, &((const struct sockaddr_in *)sa)->sin_addr, 4);
    e->ip_len = 4;
  } else if (sa && sa->sa_family == AF_INET6) {
    memcpy(e->ip, &((const struct sockaddr_in6 *)sa)->sin6_addr, 16);
    e->ip_len = 16;
  }
  if (p->lim.access_log) address_text(e);
  pthread_mutex_lock(&p->mu);
  e->next = p->head;
  if (p->head) p->head->prev = e;
  p->head = e;
  p->open++;
  pthread_mutex_unlock(&p->mu);
  return e;
}

const char *attn__peer_address(const attn__peer *e) {
  return e ? e->ip_text : "";
}

void attn__peer_close(attn__peers *p, attn__peer *e) {
  if (!e) return;
  pthread_mutex_lock(&p->mu);
  if (e->prev)
    e->prev->next = e->next;
  else
    p->head = e->next;
  if (e->next) e->next->prev = e->prev;
  if (!e->shut) p->open--;
  pthread_mutex_unlock(&p->mu);
  free(e->cert);
  free(e);
}

int attn__peer_cert_known(const attn__peer *e, const void *der, size_t n,
                          uint64_t now_ns) {
  if (!e || !e->cert || e->cert_len != n ||
      now_ns - e->cert_ns > ATTN_PEER_CERT_TTL_NS ||
      memcmp(e->cert, der, n) != 0)
    return -1;
  return e->cert_ok;
}

void attn__peer_cert_remember(attn__peer *e, const void *der, size_t n, int ok,
                              uint64_t now_ns) {
  if (!e || n == 0 || n > ATTN_PEER_CERT_MAX) return;
  unsigned char *c = malloc(n);
  if (!c) return; /* not remembered: verified again next time */
  memcpy(c, der, n);
  free(e->cert);
  e->cert = c;
  e->cert_len = n;
  e->cert_ok = ok;
  e->cert_ns = now_ns;
}

int attn__peer_begin(attn__peer *e) {
  if (!e) return 1;
  int idle = PEER_IDLE;
  if (!atomic_compare_exchange_strong(&e->stage, &idle, PEER_BUSY)) return 0;
  atomic_fetch_add(&e->begun, 1u);
  return 1;
}

void attn__peer_end(attn__peer *e) {
  int busy = PEER_BUSY;
  if (e) atomic_compare_exchange_strong(&e->stage, &busy, PEER_IDLE);
}

void attn__peer_body_begin(attn__peer *e) {
  if (!e) return;
  atomic_store(&e->body_bytes, 0);
  atomic_store(&e->body_start_ns, attn_now_ns());
  int busy = PEER_BUSY;
  atomic_compare_exchange_strong(&e->stage, &busy, PEER_BODY);
}

int attn__peer_body_bytes(attn__peer *e, uint64_t received) {
  if (!e) return 1;
  atomic_store_explicit(&e->body_bytes, received, memory_order_relaxed);
  return atomic_load(&e->stage) != PEER_CUT;
}

int attn__peer_body_end(attn__peer *e) {
  if (!e) return 1;
  int body = PEER_BODY;
  if (atomic_compare_exchange_strong(&e->stage, &body, PEER_BUSY)) return 1;
  return body != PEER_CUT;
}

int attn__peer_cut(const attn__peer *e) {
  return e ? atomic_load(&e->cut) : 0;
}
