/* respond.h - respond.c's interface: how every answer is written.
 * Private to src/server/ (docs/architecture.md). */
#ifndef ATTN_SERVER_RESPOND_H
#define ATTN_SERVER_RESPOND_H

#include "internal.h"

/* respond.c: fill an attn__http_resp.  Any thread. */
struct attn_buf;
/* A JSON body taken from buf (buf is emptied), with status. */
void attn__resp_json(attn__http_resp *resp, int status, struct attn_buf *buf);
/* What a codec's encoder wrote into buf (200, buf emptied), or, when it
 * returned st (out of memory, say), that error (buf freed). */
void attn__resp_encoded(attn__http_resp *resp, attn_status st,
                        struct attn_buf *buf);
/* A JSON body copied from a static string. */
void attn__resp_static(attn__http_resp *resp, int status, const char *json);
/* {"error": msg} and status; a 503 also gets Retry-After: 1. */
void attn__resp_error(attn__http_resp *resp, int status, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
/* The 404 of a model the registry cannot give: it has no version
 * `version` (when given and the name has another), is not loaded (the
 * registry has its name), or is unknown.  field: where the request named
 * it ("model: " for /v1's field; "" for the URL). */
void attn__resp_no_model(attn__http_resp *resp, attn_registry *models,
                         const char *field, const char *name,
                         const char *version);
/* The 503 of a job that waited waited_ms in the queue: longer than its
 * own timeout parameter (timeout_us > 0, Triton's), else than
 * queue_timeout_ms. */
void attn__resp_waited(attn__http_resp *resp, double waited_ms,
                       int64_t timeout_us, int64_t queue_timeout_ms);
/* The error s (d's message, else attn_strerror) with its HTTP status. */
void attn__resp_status(attn__http_resp *resp, attn_status s,
                       const attn_diag *d);
/* HTTP status for an engine/codec/model status. */
int attn__http_status(attn_status s);

#endif
