/* test_peers.c - the connections attnd watches for clients that left
 * (src/server/peers.c). */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "../src/server/internal.h"
#include "../src/server/peers.h"
#include "unit.h"

/* peers.c without libmicrohttpd: socketpairs stand for connections; the
 * test sweeps by hand (no sweeper thread). */
START_TEST(test_peer_sweeps) {
  attn__peers *p = NULL;
  attn_diag d;
  ck_assert_int_eq(attn__peers_create(0, &p, &d), ATTN_OK);
  int gone[2], alive[2], busy[2], again[2];
  ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, gone), 0);
  ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, alive), 0);
  ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, busy), 0);
  ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, again), 0);
  attn__peer *g = attn__peer_open(p, gone[0], NULL);
  attn__peer *a = attn__peer_open(p, alive[0], NULL);
  attn__peer *b = attn__peer_open(p, busy[0], NULL);
  attn__peer *r = attn__peer_open(p, again[0], NULL);
  ck_assert(g && a && b && r);
  attn__peer_begin(b);
  close(gone[1]); /* the clients of gone, busy and again leave */
  close(busy[1]);
  close(again[1]);
  ck_assert_int_eq(write(alive[1], "x", 1), 1); /* bytes waiting: alive */
  ck_assert_int_eq(attn__peers_sweep(p, attn_now_ns()),
                   0); /* first look: none */
  attn__peer_begin(r); /* a request begins between the looks (pipelined) */
  attn__peer_end(r);
  ck_assert_int_eq(attn__peers_sweep(p, attn_now_ns()), 1); /* gone only */
  ck_assert_int_eq(attn__peers_closed(p), 1);
  char c;
  ck_assert_int_eq(send(gone[0], "y", 1, MSG_NOSIGNAL), -1); /* shut down */
  ck_assert_int_eq(attn__peers_sweep(p, attn_now_ns()),
                   1); /* again, seen twice now */
  ck_assert_int_eq(attn__peers_sweep(p, attn_now_ns()),
                   0); /* busy is never touched */
  attn__peer_end(b);
  ck_assert_int_eq(attn__peers_sweep(p, attn_now_ns()),
                   0); /* once idle: first look */
  ck_assert_int_eq(attn__peers_sweep(p, attn_now_ns()), 1);
  ck_assert_int_eq(attn__peers_closed(p), 3);
  ck_assert_int_eq(recv(alive[0], &c, 1, MSG_DONTWAIT), 1); /* untouched */
  ck_assert_int_eq(send(alive[0], "z", 1, MSG_NOSIGNAL), 1);
  attn__peer_close(p, g);
  attn__peer_close(p, a);
  attn__peer_close(p, NULL);
  attn__peers_destroy(p); /* frees b and r still registered */
  close(gone[0]);
  close(alive[0]);
  close(alive[1]);
  close(busy[0]);
  close(again[0]);
  attn__peers_destroy(NULL);
}
END_TEST

/* Admission at the limits: past max_connections the idle connection that
 * waited longest is shut down to make room, kept-alive ones first; when
 * every other one is handling a request the new one gets a 503; past
 * max_per_ip, a 429.  Socketpairs stand for connections. */
static int recv_status(int fd) {
  char buf[256] = {0};
  ssize_t n = recv(fd, buf, sizeof buf - 1, MSG_DONTWAIT);
  int st = 0;
  if (n > 12 && sscanf(buf, "HTTP/1.1 %d", &st) == 1) return st;
  return n == 0 ? -1 : 0; /* -1: closed without an answer */
}

START_TEST(test_peer_admit) {
  attn__peers *p = NULL;
  attn_diag d;
  ck_assert_int_eq(attn__peers_create(0, &p, &d), ATTN_OK);
  attn__peer_limits lim = {.max_connections = 2, .max_per_ip = 2};
  attn__peers_set_limits(p, &lim);
  int fd[5][2];
  attn__peer *e[5];
  struct sockaddr_in one = {.sin_family = AF_INET};
  one.sin_addr.s_addr = htonl(0x7f000001);
  for (int i = 0; i < 5; i++)
    ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, fd[i]), 0);
  e[0] = attn__peer_open(p, fd[0][0], NULL);
  ck_assert_int_eq(attn__peers_admit(p, e[0]), 0);
  e[1] = attn__peer_open(p, fd[1][0], NULL);
  ck_assert_int_eq(attn__peers_admit(p, e[1]), 0);
  ck_assert(attn__peer_begin(e[0]) && attn__peer_begin(e[1]));
  /* both handling requests: the third is refused */
  e[2] = attn__peer_open(p, fd[2][0], NULL);
  ck_assert_int_eq(attn__peers_admit(p, e[2]), 503);
  ck_assert_int_eq(recv_status(fd[2][1]), 503);
  ck_assert_int_eq(attn__peer_cut(e[2]), ATTN_PEER_CUT_REFUSED);
  ck_assert(!attn__peer_begin(e[2]));
  /* e[1] kept alive and idle: it makes room for the fourth */
  attn__peer_end(e[1]);
  e[3] = attn__peer_open(p, fd[3][0], NULL);
  ck_assert_int_eq(attn__peers_admit(p, e[3]), 0);
  ck_assert_int_eq(attn__peer_cut(e[1]), ATTN_PEER_CUT_EVICTED);
  ck_assert_int_eq(recv_status(fd[1][1]), -1); /* shut down, no answer */
  ck_assert(!attn__peer_begin(e[1]));          /* never begins again */
  ck_assert_int_eq(attn__peer_cut(e[0]), 0);   /* busy: untouched */
  ck_assert_int_eq(attn__peer_cut(e[3]), 0);
  /* per address: two from 127.0.0.1 pass the limit of 2 with the third */
  attn__peer_close(p, e[1]);
  attn__peer_close(p, e[2]);
  attn__peer_close(p, e[3]);
  lim.max_connections = 100;
  attn__peers_set_limits(p, &lim);
  attn__peer *ip[3];
  int ipfd[3][2];
  for (int i = 0; i < 3; i++) {
    ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, ipfd[i]), 0);
    ip[i] = attn__peer_open(p, ipfd[i][0], (struct sockaddr *)&one);
    ck_assert_int_eq(attn__peers_admit(p, ip[i]), i < 2 ? 0 : 429);
  }
  ck_assert_int_eq(recv_status(ipfd[2][1]), 429);
  attn__peers_destroy(p);
  for (int i = 0; i < 5; i++) close(fd[i][0]), close(fd[i][1]);
  for (int i = 0; i < 3; i++) close(ipfd[i][0]), close(ipfd[i][1]);
}
END_TEST

/* The client's address as the access lines give it, made when the
 * connection opens with the access log on (IPv4 digits by hand, against
 * inet_ntop's); "" with it off, for no address, or for no peer. */
START_TEST(test_peer_address) {
  attn__peers *p;
  attn_diag d = {{0}};
  ck_assert_int_eq(attn__peers_create(0, &p, &d), ATTN_OK);
  attn__peer_limits lim = {.max_connections = 100, .access_log = 1};
  attn__peers_set_limits(p, &lim);
  static const char *const v4[] = {"0.0.0.0", "10.0.255.1", "127.0.0.1",
                                   "192.168.100.9", "255.255.255.255"};
  for (size_t i = 0; i < sizeof v4 / sizeof v4[0]; i++) {
    struct sockaddr_in sa = {.sin_family = AF_INET};
    ck_assert_int_eq(inet_pton(AF_INET, v4[i], &sa.sin_addr), 1);
    attn__peer *e = attn__peer_open(p, -1, (struct sockaddr *)&sa);
    ck_assert_str_eq(attn__peer_address(e), v4[i]);
    attn__peer_close(p, e);
  }
  struct sockaddr_in6 sa6 = {.sin6_family = AF_INET6};
  ck_assert_int_eq(inet_pton(AF_INET6, "2001:db8::7", &sa6.sin6_addr), 1);
  attn__peer *e = attn__peer_open(p, -1, (struct sockaddr *)&sa6);
  ck_assert_str_eq(attn__peer_address(e), "2001:db8::7");
  attn__peer_close(p, e);
  e = attn__peer_open(p, -1, NULL);
  ck_assert_str_eq(attn__peer_address(e), "");
  attn__peer_close(p, e);
  lim.access_log = 0;
  attn__peers_set_limits(p, &lim);
  struct sockaddr_in one = {.sin_family = AF_INET};
  one.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  e = attn__peer_open(p, -1, (struct sockaddr *)&one);
  ck_assert_str_eq(attn__peer_address(e), "");
  attn__peer_close(p, e);
  ck_assert_str_eq(attn__peer_address(NULL), "");
  attn__peers_destroy(p);
}
END_TEST

/* The time limits: a new connection whose headers do not come within
 * header_timeout_s, and a body slower than body_min_rate_bytes_s for
 * longer than that, get a 408; a request being handled is left alone.
 * header_timeout_s is 1: the sweep is told it is 1.1 s later. */
START_TEST(test_peer_time_limits) {
  attn__peers *p = NULL;
  attn_diag d;
  ck_assert_int_eq(attn__peers_create(0, &p, &d), ATTN_OK);
  attn__peer_limits lim = {.header_timeout_s = 1, .body_min_rate = 1000};
  attn__peers_set_limits(p, &lim);
  int hs[2], bd[2], bz[2];
  ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, hs), 0);
  ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, bd), 0);
  ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, bz), 0);
  attn__peer *h = attn__peer_open(p, hs[0], NULL);
  attn__peer *b = attn__peer_open(p, bd[0], NULL);
  attn__peer *z = attn__peer_open(p, bz[0], NULL);
  ck_assert(attn__peer_begin(b) && attn__peer_begin(z));
  attn__peer_body_begin(b);
  ck_assert(attn__peer_body_bytes(b, 10));
  uint64_t now = attn_now_ns();
  ck_assert_int_eq(attn__peers_sweep(p, now), 0); /* in time */
  /* 1.1 s later, by the clock handed over: no sleep */
  ck_assert_int_eq(attn__peers_sweep(p, now + 1100000000u), 2); /* h, b */
  ck_assert_int_eq(recv_status(hs[1]), 408);
  ck_assert_int_eq(recv_status(bd[1]), 408);
  ck_assert_int_eq(attn__peer_cut(h), ATTN_PEER_CUT_HEADERS);
  ck_assert_int_eq(attn__peer_cut(b), ATTN_PEER_CUT_BODY);
  ck_assert(!attn__peer_body_bytes(b, 20));
  ck_assert(!attn__peer_body_end(b));
  ck_assert(!attn__peer_begin(h));
  ck_assert_int_eq(attn__peer_cut(z), 0);
  ck_assert_int_eq(recv_status(bz[1]), 0); /* nothing written */
  attn__peers_destroy(p);
  close(hs[0]), close(hs[1]), close(bd[0]), close(bd[1]);
  close(bz[0]), close(bz[1]);
}
END_TEST

/* A TCP connection on 127.0.0.1: fds[0] attnd's end, fds[1] the
 * client's. */
static void tcp_pair(int fds[2]) {
  struct sockaddr_in a = {.sin_family = AF_INET};
  socklen_t n = sizeof a;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  int l = socket(AF_INET, SOCK_STREAM, 0);
  ck_assert_int_ge(l, 0);
  ck_assert_int_eq(bind(l, (struct sockaddr *)&a, sizeof a), 0);
  ck_assert_int_eq(listen(l, 4), 0);
  ck_assert_int_eq(getsockname(l, (struct sockaddr *)&a, &n), 0);
  fds[1] = socket(AF_INET, SOCK_STREAM, 0);
  ck_assert_int_eq(connect(fds[1], (struct sockaddr *)&a, sizeof a), 0);
  fds[0] = accept(l, NULL, NULL);
  ck_assert_int_ge(fds[0], 0);
  close(l);
}

/* Reads what the client sent (the request, read whole by attnd). */
static void read_request(int fd, size_t n) {
  char buf[64];
  while (n) {
    ssize_t r = recv(fd, buf, n < sizeof buf ? n : sizeof buf, 0);
    ck_assert_int_gt(r, 0);
    n -= (size_t)r;
  }
}

static void sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0) {
  }
}

/* attn__peer_left, a request read whole and waiting: a client that is
 * still there, or half-closed right after its request, or has a
 * pipelined request unread, has not left; one that closed well after
 * its last byte, or reset, has. */
START_TEST(test_peer_left) {
  attn__peers *p = NULL;
  attn_diag d;
  ck_assert_int_eq(attn__peers_create(0, &p, &d), ATTN_OK);
  enum { OPEN, HALF, PIPELINED, CLOSED, RESET, N };
  int fd[N][2];
  attn__peer *e[N];
  for (int i = 0; i < N; i++) {
    tcp_pair(fd[i]);
    e[i] = attn__peer_open(p, fd[i][0], NULL);
    ck_assert_int_eq(send(fd[i][1], "request", 7, 0), 7);
    read_request(fd[i][0], 7);
  }
  shutdown(fd[HALF][1], SHUT_WR); /* right after its request */
  ck_assert_int_eq(send(fd[PIPELINED][1], "next", 4, 0), 4);
  shutdown(fd[PIPELINED][1], SHUT_WR);
  sleep_ms(ATTN_PEER_LEFT_GAP_MS + 50); /* then the others leave */
  close(fd[CLOSED][1]);
  struct linger lg = {1, 0}; /* close with a reset */
  setsockopt(fd[RESET][1], SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
  close(fd[RESET][1]);
  sleep_ms(20); /* the FIN and the RST cross the loopback */
  ck_assert(!attn__peer_left(p, e[OPEN]));
  ck_assert(!attn__peer_left(p, e[HALF]));
  ck_assert(!attn__peer_left(p, e[PIPELINED]));
  ck_assert(attn__peer_left(p, e[CLOSED]));
  ck_assert(attn__peer_left(p, e[RESET]));
  ck_assert(!attn__peer_left(p, NULL));
  attn__peers_destroy(p); /* frees the peers still registered */
  for (int i = 0; i < N; i++) {
    close(fd[i][0]);
    if (i != CLOSED && i != RESET) close(fd[i][1]);
  }
}
END_TEST

Suite *peers_suite(void) {
  Suite *s = suite_create("peers");
  TCase *tc = tcase_create("peers");
  tcase_add_test(tc, test_peer_sweeps);
  tcase_add_test(tc, test_peer_admit);
  tcase_add_test(tc, test_peer_time_limits);
  tcase_add_test(tc, test_peer_address);
  tcase_add_test(tc, test_peer_left);
  suite_add_tcase(s, tc);
  return s;
}
