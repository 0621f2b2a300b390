/* test_healthcheck.c - attnd --healthcheck without a server: the URL it
 * parses, the default URL it derives from host and port, and what it says
 * when nothing listens or the URL is wrong.  The exchange with a real
 * attnd (200, 503 while draining, a silent listener) is in
 * tests/integration/run.py (healthcheck_*). */
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "attn/healthcheck.h"
#include "attn/reload.h"
#include "unit.h"

#define ASSERT_DIAG_HAS(d, s) \
  ck_assert_msg(strstr((d).msg, s) != NULL, "diag '%s' lacks '%s'", (d).msg, s)

START_TEST(test_url_parse_good) {
  static const struct {
    const char *text, *host, *port, *path;
  } cases[] = {
      {"http://127.0.0.1:8080/v2/health/ready", "127.0.0.1", "8080",
       "/v2/health/ready"},
      {"http://127.0.0.1:8080", "127.0.0.1", "8080", ATTN_READY_PATH},
      {"http://127.0.0.1:8080/", "127.0.0.1", "8080", ATTN_READY_PATH},
      {"HTTP://localhost", "localhost", "80", ATTN_READY_PATH},
      {"http://[::1]:9000/v2/health/live", "::1", "9000", "/v2/health/live"},
      {"http://[fe80::1%eth0]", "fe80::1%eth0", "80", ATTN_READY_PATH},
      {"http://h:08/x?y=1#frag", "h", "8", "/x?y=1"},
      {"http://h:65535?q", "h", "65535", "/?q"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    attn_url u;
    attn_diag d = {{0}};
    ck_assert_msg(attn_url_parse(cases[i].text, &u, &d) == ATTN_OK, "%s: %s",
                  cases[i].text, d.msg);
    ck_assert_str_eq(u.host, cases[i].host);
    ck_assert_str_eq(u.port, cases[i].port);
    ck_assert_str_eq(u.path, cases[i].path);
  }
}
END_TEST

START_TEST(test_url_parse_bad) {
  static const struct {
    const char *text, *msg;
  } cases[] = {
      {"127.0.0.1:8080", "is not a URL: write http://HOST[:PORT][/PATH]"},
      {"https://h:1", "only http:// is supported"},
      {"ftp://h", "only http:// is supported"},
      {"http://", "has no host"},
      {"http://:8080/", "has no host"},
      {"http://h:0", "the port must be 1..65535"},
      {"http://h:65536", "the port must be 1..65535"},
      {"http://h:80x", "the port must be 1..65535"},
      {"http://h:", "the port must be 1..65535"},
      {"http://[::1", "'[' without ']'"},
      {"http://[::1]x", "after ']' comes ':PORT'"},
      {"http://u:p@h:1/", "user information"},
      {"http://h/a b", "a space or a control character"},
      {"http://h/\r\nX: y", "a space or a control character"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    attn_url u;
    memset(&u, 0x5a, sizeof u);
    attn_url before = u;
    attn_diag d = {{0}};
    ck_assert_msg(attn_url_parse(cases[i].text, &u, &d) == ATTN_EINVAL,
                  "'%s' accepted", cases[i].text);
    ck_assert_msg(memcmp(&u, &before, sizeof u) == 0, "'%s' changed *out",
                  cases[i].text);
    ASSERT_DIAG_HAS(d, cases[i].msg);
  }
}
END_TEST

START_TEST(test_default_url) {
  static const struct {
    const char *host;
    int port;
    const char *want;
  } cases[] = {
      {"0.0.0.0", 8080, "http://127.0.0.1:8080/v2/health/ready"},
      {"::", 9, "http://[::1]:9/v2/health/ready"},
      {"10.1.2.3", 1, "http://10.1.2.3:1/v2/health/ready"},
      {"fd00::7", 80, "http://[fd00::7]:80/v2/health/ready"},
  };
  char buf[300];
  attn_diag d = {{0}};
  attn_url u;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    ck_assert_int_eq(
        attn_healthcheck_url(cases[i].host, cases[i].port, buf, sizeof buf, &d),
        ATTN_OK);
    ck_assert_str_eq(buf, cases[i].want);
    /* what it makes, it parses back */
    ck_assert_int_eq(attn_url_parse(buf, &u, &d), ATTN_OK);
  }
  ck_assert_str_eq(u.host, "fd00::7");
  ck_assert_int_eq(attn_healthcheck_url("0.0.0.0", 0, buf, sizeof buf, &d),
                   ATTN_EINVAL);
  ASSERT_DIAG_HAS(d, "port is 0 (ephemeral");
  ck_assert_int_eq(attn_healthcheck_url("0.0.0.0", 8080, buf, 10, &d),
                   ATTN_EINVAL);
}
END_TEST

/* A port nobody listens on (bound, never listening): refused, at once. */
START_TEST(test_refused_and_bad_url) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  ck_assert_int_ge(fd, 0);
  struct sockaddr_in a = {.sin_family = AF_INET,
                          .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof a;
  ck_assert_int_eq(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
  ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&a, &len), 0);
  char url[64];
  snprintf(url, sizeof url, "http://127.0.0.1:%d", ntohs(a.sin_port));
  attn_diag d = {{0}};
  int status = -1;
  ck_assert_int_eq(attn_healthcheck(url, 3000, &status, &d), ATTN_EIO);
  close(fd);
  ck_assert_int_eq(status, 0);
  ck_assert_msg(strncmp(d.msg, url, strlen(url)) == 0, "diag '%s'", d.msg);
  ASSERT_DIAG_HAS(d, "connection refused");
  ck_assert_int_eq(attn_healthcheck("localhost:80", 3000, &status, &d),
                   ATTN_EINVAL);
  ASSERT_DIAG_HAS(d, "is not a URL");
}
END_TEST

/* attnd --reload's side here (src/probe/reload.c): which command lines
 * are clients, and what /proc holds: never this process, and PID 1 (init
 * here, not this binary) is not found. */
START_TEST(test_reload_find) {
  static const struct {
    const char *argv; /* NUL-separated */
    size_t len;
    int client;
  } cases[] = {
#define CMD(s, c) {s, sizeof s, c}
      CMD("attnd\0--port\0009000", 0),
      CMD("attnd\0--healthcheck", 1),
      CMD("attnd\0--healthcheck=http://h:1", 1),
      CMD("attnd\0--port\0001\0--reload", 1),
      CMD("attnd\0--reload=12", 1),
      CMD("attnd\0--check-config", 1),
      CMD("attnd\0-V", 1),
      CMD("attnd\0--reloading", 0),
      CMD("--reload", 0), /* argv[0] is the program */
#undef CMD
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    attn_reload_proc p = {0};
    p.cmdline = (char *)cases[i].argv;
    p.cmdline_len = cases[i].len;
    ck_assert_msg(attn_reload_is_client(&p) == cases[i].client, "case %zu", i);
  }
  attn_reload_proc *v;
  attn_reload_denied den;
  attn_diag d = {{0}};
  size_t n = 99;
  /* every process but this one that runs this binary: Check's parent
   * process when it forks the tests, which is not a client */
  ck_assert_int_eq(attn_reload_find(0, &v, &n, &den, &d), ATTN_OK);
  for (size_t i = 0; i < n; i++) {
    ck_assert_int_ne(v[i].pid, (int)getpid());
    ck_assert(!attn_reload_is_client(&v[i]));
  }
  attn_reload_procs_free(v, n);
  ck_assert_int_eq(attn_reload_find(1, &v, &n, NULL, &d), ATTN_OK);
  ck_assert_uint_eq(n, 0);
  attn_reload_procs_free(v, n);
  ck_assert_int_eq(attn_reload_find((int)getpid(), &v, &n, NULL, &d), ATTN_OK);
  ck_assert_uint_eq(n, 0); /* never itself */
  attn_reload_procs_free(v, n);
}
END_TEST

Suite *healthcheck_suite(void) {
  Suite *s = suite_create("healthcheck");
  TCase *t = tcase_create("healthcheck");
  tcase_add_test(t, test_url_parse_good);
  tcase_add_test(t, test_url_parse_bad);
  tcase_add_test(t, test_default_url);
  tcase_add_test(t, test_refused_and_bad_url);
  tcase_add_test(t, test_reload_find);
  suite_add_tcase(s, t);
  return s;
}
