/* observe.h - observe.c's interface: an ended request into the metrics.
 * Private to src/server/ (docs/architecture.md). */
#ifndef ATTN_SERVER_OBSERVE_H
#define ATTN_SERVER_OBSERVE_H

#include "internal.h"

/* observe.c: count one request that ended in the metrics (attnd_http_*,
 * and attnd_inference_* for an inference route).  answered: the server
 * answered it (status is its answer's; else libmicrohttpd's or 499);
 * resp: its answer's trace.  The request's HTTP thread. */
typedef struct attn__ended {
  const char *method, *path;
  int status;
  bool answered;
  uint64_t bytes_in, bytes_out;
  uint64_t total_ns; /* as the access log's total_ms */
  uint64_t end_ns;   /* attn_now_ns() now */
  const attn__resp_trace *trace;
  const attn__admission *route; /* its route, when admitted; NULL: not */
} attn__ended;
void attn__observe(attn__srv_ctx *s, const attn__ended *e);

#endif
