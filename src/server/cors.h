/* cors.h - cors.c's interface: the allowed origins.
 * Private to src/server/ (docs/architecture.md). */
#ifndef ATTN_SERVER_CORS_H
#define ATTN_SERVER_CORS_H

#include "internal.h"

/* cors.c: is origin (the Origin header, NULL when absent) one of list
 * (cors_allow_origins: origins separated by commas or spaces, or "*";
 * checked by the config)?  0 for an empty list.  Pure. */
int attn__cors_allowed(const char *list, const char *origin);
/* The headers a browser may send and read, for the preflight's answer and
 * every answer's Access-Control-Expose-Headers. */
#define ATTN_CORS_ALLOW_HEADERS                                \
  "Authorization, X-Api-Key, Content-Type, Content-Encoding, " \
  "Inference-Header-Content-Length, X-Request-Id, traceparent, Accept"
#define ATTN_CORS_EXPOSE_HEADERS                                 \
  "Inference-Header-Content-Length, X-Request-Id, Retry-After, " \
  "WWW-Authenticate"
#define ATTN_CORS_ALLOW_METHODS "GET, HEAD, POST, PUT, DELETE, OPTIONS"

#endif
