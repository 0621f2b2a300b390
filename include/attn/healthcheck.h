/* healthcheck.h - `attnd --healthcheck`: is a running attnd ready?
 *
 * One HTTP/1.1 GET over a plain POSIX socket, so that Docker HEALTHCHECK,
 * systemd and Kubernetes exec probes need no curl in the image.  Not part
 * of the server (no libmicrohttpd): it is attnd acting as a client of
 * another attnd, usually the one in the same container.  Nothing is
 * written anywhere but the caller's diagnostic; no global state. */
#ifndef ATTN_HEALTHCHECK_H
#define ATTN_HEALTHCHECK_H

#include <stddef.h>
#include <stdint.h>

#include "attn/limits.h"
#include "attn/status.h"

/* What a URL without a path probes. */
#define ATTN_READY_PATH "/v2/health/ready"

/* A URL the healthcheck can probe, in parts. */
typedef struct attn_url {
  char host[ATTN_MAX_HOST_LEN + 1]; /* an IPv6 address without brackets */
  char port[8];                     /* decimal, 1..65535; "80" by default */
  char path[ATTN_MAX_URL_LEN + 1];  /* from the first '/'; ATTN_READY_PATH
                                       when the URL has none */
} attn_url;

/* Parse "http://HOST[:PORT][/PATH]": only http (attnd speaks plain HTTP),
 * an IPv6 HOST in brackets, no user info, no spaces or control characters.
 * Returns ATTN_OK with *out filled, or ATTN_EINVAL with d saying what is
 * wrong and what is expected (*out unchanged). */
attn_status attn_url_parse(const char *text, attn_url *out, attn_diag *d);

/* The URL that probes, on this machine, an attnd listening on host:port,
 * into buf: http://127.0.0.1:PORT/v2/health/ready for host 0.0.0.0 (every
 * IPv4 address), http://[::1]:PORT/... for ::, the host itself otherwise
 * (an IPv6 address in brackets).  ATTN_EINVAL when port is 0 (ephemeral:
 * nobody can know it) or the URL does not fit size. */
attn_status attn_healthcheck_url(const char *host, int port, char *buf,
                                 size_t size, attn_diag *d);

/* GET url and wait for the answer, all within timeout_ms (the name's
 * resolution excepted: the caller bounds that, see main.c).  *http_status
 * is the answer's status, or 0 when there was none.  Returns
 *   ATTN_OK        answered 200;
 *   ATTN_EBUSY     answered another status (not ready: d has the status
 *                  and the body's "error", e.g. "HTTP 503: server is
 *                  draining");
 *   ATTN_ETIMEDOUT no answer within timeout_ms (d says at which step);
 *   ATTN_EIO       no answer: connection refused or reset, unknown host,
 *                  not HTTP;
 *   ATTN_EINVAL    a bad URL (attn_url_parse).
 * Every diagnostic begins with the URL. */
attn_status attn_healthcheck(const char *url, int64_t timeout_ms,
                             int *http_status, attn_diag *d);

#endif /* ATTN_HEALTHCHECK_H */
