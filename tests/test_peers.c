/* test_peers.c - the connections attnd watches for clients that left
 * (src/server/peers.c). */
#include <sys/socket.h>
#include <unistd.h>

#include "../src/server/internal.h"
#include "unit.h"

/* peers.c without libmicrohttpd: socketpairs stand for connections; the
 * test sweeps by hand (no sweeper thread). */
START_TEST(test_peer_sweeps) {
  attn_peers *p = NULL;
  attn_diag d;
  ck_assert_int_eq(attn__peers_create(0, &p, &d), ATTN_OK);
  int gone[2], alive[2], busy[2], again[2];
  ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, gone), 0);
  ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, alive), 0);
  ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, busy), 0);
  ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, again), 0);
  attn_peer *g = attn__peer_open(p, gone[0]);
  attn_peer *a = attn__peer_open(p, alive[0]);
  attn_peer *b = attn__peer_open(p, busy[0]);
  attn_peer *r = attn__peer_open(p, again[0]);
  ck_assert(g && a && b && r);
  attn__peer_begin(b);
  close(gone[1]); /* the clients of gone, busy and again leave */
  close(busy[1]);
  close(again[1]);
  ck_assert_int_eq(write(alive[1], "x", 1), 1); /* bytes waiting: alive */
  ck_assert_int_eq(attn__peers_sweep(p), 0);    /* first look: none */
  attn__peer_begin(r); /* a request begins between the looks (pipelined) */
  attn__peer_end(r);
  ck_assert_int_eq(attn__peers_sweep(p), 1); /* gone only */
  ck_assert_int_eq(attn__peers_closed(p), 1);
  char c;
  ck_assert_int_eq(send(gone[0], "y", 1, MSG_NOSIGNAL), -1); /* shut down */
  ck_assert_int_eq(attn__peers_sweep(p), 1); /* again, seen twice now */
  ck_assert_int_eq(attn__peers_sweep(p), 0); /* busy is never touched */
  attn__peer_end(b);
  ck_assert_int_eq(attn__peers_sweep(p), 0); /* once idle: first look */
  ck_assert_int_eq(attn__peers_sweep(p), 1);
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

Suite *peers_suite(void) {
  Suite *s = suite_create("peers");
  TCase *tc = tcase_create("peers");
  tcase_add_test(tc, test_peer_sweeps);
  suite_add_tcase(s, tc);
  return s;
}
