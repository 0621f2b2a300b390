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
 *   requests, which is where libmicrohttpd reads headers.
 *
 *   Every connection is registered here when it opens (an attn_peer with
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
 * Threads
 *   MHD threads: attn__peer_open, attn__peer_close, attn__peer_begin,
 *   attn__peer_end.  The sweeper thread (or a test): attn__peers_sweep.
 *   main: attn__peers_create, attn__peers_destroy.
 *
 * Invariants
 *   - Under mu: the list holds exactly the open peers; a peer's fd is open
 *     while it is on the list (attn__peer_close runs before the socket is
 *     closed), so the sweeper never touches a reused descriptor.
 *   - busy and begun are written by the connection's MHD thread only and
 *     read by the sweeper; eof_sweeps, begun_seen and shut are the
 *     sweeper's, under mu.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <time.h>

#include "attn/log.h"
#include "internal.h"

struct attn_peer {
  int fd;
  atomic_int busy;   /* a request is being handled (begin .. end) */
  atomic_uint begun; /* requests begun on this connection */
  /* the sweeper's */
  int eof_sweeps;      /* consecutive sweeps that saw the socket's end */
  unsigned begun_seen; /* begun at the first of those sweeps */
  int shut;            /* shut down already */
  attn_peer *prev, *next;
};

struct attn_peers {
  pthread_mutex_t mu;
  pthread_cond_t cv; /* stop */
  attn_peer *head;
  int interval_ms;
  int stop;
  int have_thread;
  pthread_t thread;
  atomic_ullong closed; /* connections shut down by a sweep, ever */
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

int attn__peers_sweep(attn_peers *p) {
  int n = 0;
  pthread_mutex_lock(&p->mu);
  for (attn_peer *e = p->head; e; e = e->next) {
    unsigned begun = atomic_load(&e->begun);
    if (e->shut || atomic_load(&e->busy) || !socket_ended(e->fd)) {
      e->eof_sweeps = 0;
      continue;
    }
    if (e->eof_sweeps == 0 || begun != e->begun_seen) {
      e->eof_sweeps = 1;
      e->begun_seen = begun;
      continue;
    }
    shutdown(e->fd, SHUT_RDWR);
    e->shut = 1;
    n++;
  }
  pthread_mutex_unlock(&p->mu);
  if (n) atomic_fetch_add(&p->closed, (unsigned long long)n);
  return n;
}

static void *sweeper_main(void *arg) {
  attn_peers *p = arg;
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
    int n = attn__peers_sweep(p);
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

attn_status attn__peers_create(int interval_ms, attn_peers **out,
                               attn_diag *d) {
  *out = NULL;
  attn_peers *p = calloc(1, sizeof *p);
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

void attn__peers_destroy(attn_peers *p) {
  if (!p) return;
  if (p->have_thread) {
    pthread_mutex_lock(&p->mu);
    p->stop = 1;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    pthread_join(p->thread, NULL);
  }
  while (p->head) { /* none when libmicrohttpd closed every connection */
    attn_peer *e = p->head;
    p->head = e->next;
    free(e);
  }
  pthread_cond_destroy(&p->cv);
  pthread_mutex_destroy(&p->mu);
  free(p);
}

unsigned long long attn__peers_closed(attn_peers *p) {
  return atomic_load(&p->closed);
}

attn_peer *attn__peer_open(attn_peers *p, int fd) {
  attn_peer *e = calloc(1, sizeof *e);
  if (!e) return NULL; /* untracked: libmicrohttpd's timeout still holds */
  e->fd = fd;
  atomic_init(&e->busy, 0);
  atomic_init(&e->begun, 0);
  pthread_mutex_lock(&p->mu);
  e->next = p->head;
  if (p->head) p->head->prev = e;
  p->head = e;
  pthread_mutex_unlock(&p->mu);
  return e;
}

void attn__peer_close(attn_peers *p, attn_peer *e) {
  if (!e) return;
  pthread_mutex_lock(&p->mu);
  if (e->prev)
    e->prev->next = e->next;
  else
    p->head = e->next;
  if (e->next) e->next->prev = e->prev;
  pthread_mutex_unlock(&p->mu);
  free(e);
}

void attn__peer_begin(attn_peer *e) {
  if (!e) return;
  atomic_fetch_add(&e->begun, 1u);
  atomic_store(&e->busy, 1);
}

void attn__peer_end(attn_peer *e) {
  if (e) atomic_store(&e->busy, 0);
}
