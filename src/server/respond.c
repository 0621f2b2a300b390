/* respond.c - filling an attn__http_resp: JSON bodies, {"error": ...}
 * answers, and the HTTP status of every attn_status.
 *
 * DESIGN
 * The one place that decides what an answer looks like, so that routes.c
 * (answers on the HTTP thread), infer.c (answers on a worker) and http.c
 * (refusals before routing) write them alike and call no one but this
 * file for it.  It calls nothing of the server's: any file may use it and
 * no loop can go through it.  Every function only fills the attn__http_resp
 * it is given (its body malloc'd, for http.c to send and free); any
 * thread.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "attn/buf.h"
#include "attn/codec.h"
#include "internal.h"
#include "respond.h"

int attn__http_status(attn_status s) {
  switch (s) {
    case ATTN_OK:
      return 200;
    case ATTN_EINVAL:
    case ATTN_ESHAPE:
    case ATTN_ENONFINITE:
    case ATTN_EPARSE:
    case ATTN_EUNSUPPORTED:
      return 400;
    case ATTN_ENOTFOUND:
      return 404;
    case ATTN_ETOOBIG:
      return 413;
    case ATTN_ECONFLICT:
      return 409;
    case ATTN_ENOSPACE:
      return 507;
    case ATTN_EBUSY:
    case ATTN_ESHUTDOWN:
    case ATTN_ETIMEDOUT:
    case ATTN_ENOMEM:
      return 503;
    case ATTN_EIO:
    case ATTN_EINTERNAL:
      break;
  }
  return 500;
}

void attn__resp_json(attn__http_resp *resp, int status, attn_buf *buf) {
  resp->status = status;
  resp->content_type = "application/json";
  resp->body = attn_buf_steal(buf, &resp->len);
}

void attn__resp_encoded(attn__http_resp *resp, attn_status st, attn_buf *buf) {
  attn_diag d = {{0}};
  if (st == ATTN_OK) {
    attn__resp_json(resp, 200, buf);
    return;
  }
  attn_buf_free(buf);
  attn__resp_status(resp, st, &d);
}

void attn__resp_static(attn__http_resp *resp, int status, const char *json) {
  attn_buf b;
  attn_buf_init(&b, 0);
  attn_buf_puts(&b, json);
  attn__resp_json(resp, status, &b);
}

void attn__resp_error(attn__http_resp *resp, int status, const char *fmt, ...) {
  char msg[1024];
  va_list ap;
  attn_buf b;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  attn_buf_init(&b, 0);
  if (attn_error_json(&b, msg) != ATTN_OK) {
    attn_buf_free(&b);
    resp->status = status;
    resp->content_type = "application/json";
    resp->body = NULL;
    resp->len = 0;
    return;
  }
  attn__resp_json(resp, status, &b);
  if (status == 503 && resp->retry_after_s == 0) resp->retry_after_s = 1;
}

void attn__resp_status(attn__http_resp *resp, attn_status s,
                       const attn_diag *d) {
  attn__resp_error(resp, attn__http_status(s), "%s",
                   d->msg[0] ? d->msg : attn_strerror(s));
}

void attn__resp_no_model(attn__http_resp *resp, attn_registry *models,
                         const char *field, const char *name,
                         const char *version) {
  const attn_model *any =
      version ? attn_registry_get(models, name, NULL, NULL) : NULL;
  attn_model_put(any);
  if (any)
    attn__resp_error(resp, 404, "%smodel '%.256s' has no version '%.256s'",
                     field, name, version);
  else if (attn_registry_slot(models, name, strlen(name)) >= 0)
    attn__resp_error(resp, 404,
                     "%smodel '%.256s' is not loaded (POST "
                     "/v2/repository/models/%.256s/load loads it)",
                     field, name, name);
  else
    attn__resp_error(resp, 404,
                     "%sunknown model '%.256s' (GET /v1/models lists them)",
                     field, name);
}

void attn__resp_waited(attn__http_resp *resp, double waited_ms,
                       int64_t timeout_us, int64_t queue_timeout_ms) {
  if (timeout_us > 0)
    attn__resp_error(resp, 503,
                     "request waited %.3f ms in the queue, longer than its "
                     "timeout parameter (%lld us)",
                     waited_ms, (long long)timeout_us);
  else
    attn__resp_error(resp, 503,
                     "request waited %.0f ms in the queue, longer than "
                     "queue_timeout_ms=%lld; the server is overloaded, "
                     "retry later",
                     waited_ms, (long long)queue_timeout_ms);
}
