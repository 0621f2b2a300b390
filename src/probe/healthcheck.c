/* healthcheck.c - `attnd --healthcheck`: GET /v2/health/ready of a running
 * attnd and say whether it answered 200.
 *
 * DESIGN
 *  - Plain POSIX sockets, no libmicrohttpd (only src/server/http.c speaks
 *    it) and no curl: the probe is the attnd binary itself, so an image, a
 *    systemd unit or a pod needs nothing else.  It writes no file, so it
 *    runs as any uid on a read-only root file system.
 *  - Bounded: every step after the name's resolution (connecting, sending,
 *    reading) waits with poll() for what is left of one deadline.
 *    getaddrinfo cannot be bounded from here; main.c arms an alarm that
 *    ends the process past the deadline whatever it is doing.  Numeric
 *    hosts (what the default URL uses) are not looked up at all.
 *  - One request, "Connection: close", at most RESP_MAX bytes read: the
 *    status line decides; for a status other than 200 the body's "error"
 *    (attnd answers {"ready":false,"error":"..."}) or its first line is the
 *    reason given.
 *  - Every failure is one diagnostic line that begins with the URL and
 *    says what happened: refused, reset, timed out (at which step), the
 *    status and error, or what is wrong with the URL.
 *
 * THREADS: reentrant; no global state.  SIGPIPE is avoided with
 * MSG_NOSIGNAL.
 */
#include "attn/healthcheck.h"

#include "attn/clock.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* Bytes of the answer read: the head and the start of the body. */
#define RESP_MAX 16384
/* Characters of a URL or of a body's text repeated in a diagnostic. */
#define SHOW 96

/* ---- URL ---------------------------------------------------------------- */

/* The authority of `text`, the auth_len bytes at h: u->host, and u->port
 * ("80" when it gives none). */
static attn_status url_authority(const char *text, const char *h,
                                 size_t auth_len, attn_url *u, attn_diag *d) {
  if (memchr(h, '@', auth_len))
    return attn_diag_set(d, ATTN_EINVAL,
                         "URL '%.*s': user information (user@) is not "
                         "supported",
                         SHOW, text);
  const char *host = h, *host_end, *port = NULL;
  if (*h == '[') { /* [IPv6] */
    host = h + 1;
    host_end = memchr(host, ']', auth_len);
    if (!host_end)
      return attn_diag_set(d, ATTN_EINVAL, "URL '%.*s': '[' without ']'", SHOW,
                           text);
    const char *after = host_end + 1;
    if (after < h + auth_len && *after != ':')
      return attn_diag_set(d, ATTN_EINVAL,
                           "URL '%.*s': after ']' comes ':PORT' or the path",
                           SHOW, text);
    if (*after == ':' && after < h + auth_len) port = after + 1;
  } else {
    const char *colon = memchr(h, ':', auth_len);
    host_end = colon ? colon : h + auth_len;
    if (colon) port = colon + 1;
  }
  size_t host_len = (size_t)(host_end - host);
  if (host_len == 0)
    return attn_diag_set(d, ATTN_EINVAL, "URL '%.*s' has no host", SHOW, text);
  if (host_len > ATTN_MAX_HOST_LEN)
    return attn_diag_set(d, ATTN_EINVAL,
                         "URL '%.*s': host longer than %d "
                         "bytes",
                         SHOW, text, ATTN_MAX_HOST_LEN);
  memcpy(u->host, host, host_len);
  u->host[host_len] = '\0';
  snprintf(u->port, sizeof u->port, "80");
  if (port) {
    size_t n = (size_t)(h + auth_len - port);
    long v = 0;
    bool ok = n > 0 && n <= 5;
    for (size_t i = 0; ok && i < n; i++) {
      ok = port[i] >= '0' && port[i] <= '9';
      v = v * 10 + (port[i] - '0');
    }
    if (!ok || v < 1 || v > 65535)
      return attn_diag_set(d, ATTN_EINVAL,
                           "URL '%.*s': the port must be 1..65535", SHOW, text);
    snprintf(u->port, sizeof u->port, "%ld", v);
  }
  return ATTN_OK;
}

/* The text as a whole, the scheme, the authority (url_authority), then the
 * path (the readiness path when there is none). */
attn_status attn_url_parse(const char *text, attn_url *out, attn_diag *d) {
  attn_url u;
  attn_status s;
  if (!text || !out)
    return attn_diag_set(d, ATTN_EINVAL, "attn_url_parse: NULL argument");
  for (const char *p = text; *p; p++)
    if ((unsigned char)*p <= 0x20 || *p == 0x7f)
      return attn_diag_set(d, ATTN_EINVAL,
                           "URL '%.*s' contains a space or a control "
                           "character",
                           SHOW, text);
  if (strlen(text) > ATTN_MAX_URL_LEN)
    return attn_diag_set(d, ATTN_EINVAL,
                         "URL '%.*s...' is longer than %d "
                         "bytes",
                         SHOW, text, ATTN_MAX_URL_LEN);
  const char *sep = strstr(text, "://");
  if (!sep)
    return attn_diag_set(d, ATTN_EINVAL,
                         "'%.*s' is not a URL: write http://HOST[:PORT][/PATH]",
                         SHOW, text);
  if ((size_t)(sep - text) != 4 || strncasecmp(text, "http", 4) != 0)
    return attn_diag_set(d, ATTN_EINVAL,
                         "URL '%.*s': only http:// is supported "
                         "(--healthcheck speaks plain HTTP; probe an attnd "
                         "with tls_cert_file with an HTTPS client such as "
                         "curl)",
                         SHOW, text);
  const char *h = sep + 3;
  size_t auth_len = strcspn(h, "/?#");
  if ((s = url_authority(text, h, auth_len, &u, d)) != ATTN_OK) return s;
  const char *path = h + auth_len;
  if (*path == '#') path = "";
  if (*path == '?') /* "http://h:1?x": the query of the root */
    snprintf(u.path, sizeof u.path, "/%.*s", (int)strcspn(path, "#"), path);
  else if (*path == '\0' || strcmp(path, "/") == 0)
    snprintf(u.path, sizeof u.path, "%s", ATTN_READY_PATH);
  else
    snprintf(u.path, sizeof u.path, "%.*s", (int)strcspn(path, "#"), path);
  *out = u;
  return ATTN_OK;
}

attn_status attn_healthcheck_url(const char *host, int port, char *buf,
                                 size_t size, attn_diag *d) {
  if (port <= 0 || port > 65535)
    return attn_diag_set(d, ATTN_EINVAL,
                         "port is %d (ephemeral: the kernel picks it), so "
                         "the healthcheck cannot know it: give the URL "
                         "(attnd --healthcheck http://127.0.0.1:PORT)",
                         port);
  if (strcmp(host, "0.0.0.0") == 0 || !*host)
    host = "127.0.0.1";
  else if (strcmp(host, "::") == 0)
    host = "::1";
  bool v6 = strchr(host, ':') != NULL;
  int n = snprintf(buf, size, "http://%s%s%s:%d%s", v6 ? "[" : "", host,
                   v6 ? "]" : "", port, ATTN_READY_PATH);
  if (n < 0 || (size_t)n >= size)
    return attn_diag_set(d, ATTN_EINVAL,
                         "the healthcheck URL for host '%s' "
                         "is too long",
                         host);
  return ATTN_OK;
}

/* ---- The exchange -------------------------------------------------------- */

static int64_t now_ms(void) {
  return (int64_t)(attn_now_ns() / 1000000u);
}

/* Wait until fd is ready for events or the deadline passes: 1 ready, 0
 * time is up, -1 poll failed. */
static int wait_fd(int fd, short events, int64_t deadline) {
  for (;;) {
    int64_t left = deadline - now_ms();
    if (left <= 0) return 0;
    struct pollfd p = {.fd = fd, .events = events};
    int r = poll(&p, 1, left > 60000 ? 60000 : (int)left);
    if (r > 0) return 1;
    if (r < 0 && errno != EINTR) return -1;
  }
}

/* Connect to one address before the deadline.  Returns the socket, or -1
 * with *err the errno (ETIMEDOUT when the time ran out). */
static int connect_one(const struct addrinfo *ai, int64_t deadline, int *err) {
  int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    *err = errno;
    return -1;
  }
  int fl = fcntl(fd, F_GETFL);
  if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0) {
    *err = errno;
    close(fd);
    return -1;
  }
  if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) return fd;
  if (errno != EINPROGRESS) {
    *err = errno;
    close(fd);
    return -1;
  }
  int r = wait_fd(fd, POLLOUT, deadline);
  int so = 0;
  socklen_t len = sizeof so;
  if (r == 1 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &so, &len) == 0 && so == 0)
    return fd;
  *err = r == 0 ? ETIMEDOUT : r < 0 ? errno : so ? so : EIO;
  close(fd);
  return -1;
}

/* The value of header name (case-insensitive) in head, or NULL. */
static const char *header(const char *head, const char *name) {
  size_t n = strlen(name);
  for (const char *l = strstr(head, "\r\n"); l; l = strstr(l + 2, "\r\n")) {
    if (strncasecmp(l + 2, name, n) == 0 && l[2 + n] == ':') {
      const char *v = l + 3 + n;
      while (*v == ' ' || *v == '\t') v++;
      return v;
    }
  }
  return NULL;
}

/* Read the answer into buf[RESP_MAX + 1] (NUL-terminated) until the peer
 * closes, the body of Content-Length is in, or buf is full.  Returns the
 * bytes read, or -1 with *err (ETIMEDOUT when the time ran out). */
static long read_answer(int fd, char *buf, int64_t deadline, int *err) {
  size_t n = 0;
  buf[0] = '\0';
  while (n < RESP_MAX) {
    int r = wait_fd(fd, POLLIN, deadline);
    if (r <= 0) {
      *err = r == 0 ? ETIMEDOUT : errno;
      return -1;
    }
    ssize_t got = recv(fd, buf + n, RESP_MAX - n, 0);
    if (got < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (got < 0) {
      *err = errno;
      return n ? (long)n : -1; /* a reset after the answer still counts */
    }
    if (got == 0) break;
    n += (size_t)got;
    buf[n] = '\0';
    const char *end = strstr(buf, "\r\n\r\n");
    const char *cl = end ? header(buf, "Content-Length") : NULL;
    if (cl && n >= (size_t)(end + 4 - buf) + strtoull(cl, NULL, 10)) break;
  }
  return (long)n;
}

/* The reason a non-200 answer gives: the "error" of a JSON body, else its
 * first line, into why ("" when the body is empty). */
static void body_reason(const char *body, char *why, size_t size) {
  why[0] = '\0';
  const char *brace = strchr(body, '{');
  if (brace) {
    cJSON *j = cJSON_ParseWithOpts(brace, NULL, 0);
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(j, "error");
    if (cJSON_IsString(e) && e->valuestring)
      snprintf(why, size, ": %.*s", SHOW * 2, e->valuestring);
    cJSON_Delete(j);
    if (why[0]) return;
  }
  size_t n = strcspn(body, "\r\n");
  if (n > SHOW) n = SHOW;
  size_t k = 0;
  for (size_t i = 0; i < n && k + 4 < size; i++)
    if ((unsigned char)body[i] >= 0x20 && body[i] != 0x7f) {
      if (k == 0) why[k++] = ':', why[k++] = ' ';
      why[k++] = body[i];
    }
  why[k] = '\0';
}

/* "connection refused (is attnd running, listening on port 8080?)" */
static const char *errno_reason(int err) {
  switch (err) {
    case ECONNREFUSED:
      return "connection refused (nothing listens there: is attnd running, "
             "on that address and port?)";
    case ECONNRESET:
    case EPIPE:
      return "connection reset before an answer";
    case ENETUNREACH:
    case EHOSTUNREACH:
      return "host unreachable";
    default:
      return strerror(err);
  }
}

/* The connected socket to u (resolved, then its addresses tried in turn
 * before the deadline) into *fd. */
static attn_status dial(const char *url, const attn_url *u, int64_t deadline,
                        int64_t timeout_ms, int *fd, attn_diag *d) {
  struct addrinfo hints = {0}, *ai = NULL;
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  int gai = getaddrinfo(u->host, u->port, &hints, &ai);
  if (gai != 0)
    return attn_diag_set(
        d, ATTN_EIO, "%.*s: host '%.*s': %s", SHOW, url, SHOW, u->host,
        gai == EAI_SYSTEM ? strerror(errno) : gai_strerror(gai));
  int err = ECONNREFUSED;
  *fd = -1;
  for (const struct addrinfo *a = ai; a && *fd < 0; a = a->ai_next)
    *fd = connect_one(a, deadline, &err);
  freeaddrinfo(ai);
  if (*fd < 0 && err == ETIMEDOUT)
    return attn_diag_set(d, ATTN_ETIMEDOUT,
                         "%.*s: no connection within %lld ms", SHOW, url,
                         (long long)timeout_ms);
  if (*fd < 0)
    return attn_diag_set(d, ATTN_EIO, "%.*s: %s", SHOW, url, errno_reason(err));
  return ATTN_OK;
}

/* Send the GET for u and read the answer into buf[RESP_MAX + 1] (see
 * read_answer).  Returns the bytes read, or -1 with *err. */
static long exchange(int fd, const attn_url *u, int64_t deadline, char *buf,
                     int *err) {
  bool v6 = strchr(u->host, ':') != NULL;
  char req[ATTN_MAX_URL_LEN + ATTN_MAX_HOST_LEN + 160];
  int len = snprintf(req, sizeof req,
                     "GET %s HTTP/1.1\r\nHost: %s%s%s:%s\r\n"
                     "User-Agent: attnd-healthcheck\r\nAccept: */*\r\n"
                     "Connection: close\r\n\r\n",
                     u->path, v6 ? "[" : "", u->host, v6 ? "]" : "", u->port);
  for (int sent = 0; sent < len;) {
    int r = wait_fd(fd, POLLOUT, deadline);
    ssize_t w =
        r == 1 ? send(fd, req + sent, (size_t)(len - sent), MSG_NOSIGNAL) : -1;
    if (w < 0 && r == 1 && (errno == EINTR || errno == EAGAIN)) continue;
    if (w < 0) {
      *err = r == 0 ? ETIMEDOUT : errno;
      return -1;
    }
    sent += (int)w;
  }
  return read_answer(fd, buf, deadline, err);
}

/* What the n bytes of answer in buf (or the failure err, n <= 0) say:
 * ATTN_OK for HTTP 200, else why not.  *http_status gets the status. */
static attn_status judge(const char *url, const char *buf, long n, int err,
                         int64_t timeout_ms, int *http_status, attn_diag *d) {
  if (n < 0 && err == ETIMEDOUT)
    return attn_diag_set(d, ATTN_ETIMEDOUT,
                         "%.*s: connected, but no answer within %lld ms", SHOW,
                         url, (long long)timeout_ms);
  if (n <= 0)
    return attn_diag_set(d, ATTN_EIO, "%.*s: %s", SHOW, url,
                         n == 0 ? "the connection was closed without an answer"
                                : errno_reason(err));
  int code = 0;
  if (strncmp(buf, "HTTP/1.", 7) != 0 || !buf[7] || buf[8] != ' ' ||
      sscanf(buf + 9, "%3d", &code) != 1 || code < 100 || code > 999) {
    char first[SHOW + 1];
    size_t k = 0;
    for (size_t i = 0; buf[i] && buf[i] != '\r' && buf[i] != '\n' && k < SHOW;
         i++)
      first[k++] = (unsigned char)buf[i] >= 0x20 ? buf[i] : '?';
    first[k] = '\0';
    return attn_diag_set(d, ATTN_EIO, "%.*s: not an HTTP answer: '%s'", SHOW,
                         url, first);
  }
  *http_status = code;
  if (code == 200) return ATTN_OK;
  char why[SHOW * 2 + 8] = "";
  const char *body = strstr(buf, "\r\n\r\n");
  if (body) body_reason(body + 4, why, sizeof why);
  return attn_diag_set(d, ATTN_EBUSY, "%.*s: not ready: HTTP %d%s", SHOW, url,
                       code, why);
}

/* The URL parsed, the connection (dial), the request and its answer
 * (exchange), then what the answer says (judge); one deadline for all. */
attn_status attn_healthcheck(const char *url, int64_t timeout_ms,
                             int *http_status, attn_diag *d) {
  attn_url u;
  attn_status st;
  int dummy, fd, err = 0;
  if (!http_status) http_status = &dummy;
  *http_status = 0;
  if ((st = attn_url_parse(url, &u, d)) != ATTN_OK) return st;
  int64_t deadline = now_ms() + (timeout_ms > 0 ? timeout_ms : 0);
  if ((st = dial(url, &u, deadline, timeout_ms, &fd, d)) != ATTN_OK) return st;
  char *buf = malloc(RESP_MAX + 1);
  if (!buf) {
    close(fd);
    return attn_diag_set(d, ATTN_ENOMEM, "%.*s: out of memory", SHOW, url);
  }
  long n = exchange(fd, &u, deadline, buf, &err);
  close(fd);
  st = judge(url, buf, n, err, timeout_ms, http_status, d);
  free(buf);
  return st;
}
