/* stats.h - stats.c's interface: GET /metrics and Triton's statistics.
 * Private to src/server/ (docs/architecture.md). */
#ifndef ATTN_SERVER_STATS_H
#define ATTN_SERVER_STATS_H

#include "internal.h"

/* stats.c: GET /metrics (Prometheus text), and Triton's statistics of m
 * (version: the URL's, or NULL), or of every model when m is NULL. */
void attn__metrics_answer(attn__srv_ctx *s, attn__http_resp *resp);
void attn__stats_answer(attn__srv_ctx *s, const attn_model *m,
                        attn__http_resp *resp);

#endif
