/* observe.c - one ended request into the metrics.
 *
 * DESIGN
 * http.c calls attn__observe once per request, where it writes the access
 * line (on_completed), with the same numbers: the status, the body bytes,
 * the total time.  Every request counts in attnd_http_requests_total under
 * its route template (routes.c: bounded, never the raw path; the row
 * http.c recorded when it admitted the request, else routed here), its method
 * (a fixed set) and its code.  A POST to an inference route also counts
 * in attnd_inference_requests_total and the histograms, unless nothing
 * answered it (the client left before any answer: code 499 only): its
 * model is the one the worker ran, else the URL's when the registry has
 * a slot of that name (v2, looked up once by routes.c), else "" (not known: a
 * /v1 body never read, an unknown model); its outcome is what the stage that
 * answered said (trace.hint: timeout, draining...), else follows from the
 * status: 200 success, 413 too_large, other 4xx invalid, 503 rejected, other
 * 5xx internal. Runs on the request's HTTP thread, after the answer was sent;
 * the metrics module writes only that thread's shard.
 */
#include "internal.h"
#include "routes.h"
#include "observe.h"

static attn_outcome outcome_of(int status, const attn__resp_trace *t) {
  if (t->hint) return (attn_outcome)(t->hint - 1);
  if (status >= 200 && status < 300) return ATTN_OUTCOME_SUCCESS;
  if (status == 413) return ATTN_OUTCOME_TOO_LARGE;
  if (status >= 400 && status < 500) return ATTN_OUTCOME_INVALID;
  if (status == 503) return ATTN_OUTCOME_REJECTED;
  return ATTN_OUTCOME_INTERNAL;
}

void attn__observe(attn__srv_ctx *s, const attn__ended *e) {
  if (!s->metrics) return;
  attn__admission a; /* a request refused before routing: routed now */
  if (!e->route) attn__route_resolve(s, e->path, &a);
  const attn__admission *r = e->route ? e->route : &a;
  attn_metrics_http(s->metrics, r->route, attn_metrics_method(e->method),
                    e->status, e->bytes_in, e->bytes_out);
  attn__route_role role = attn__route_role_of(r->route);
  const attn__resp_trace *t = e->trace;
  /* a /v1 session's step counts under kv_attention (session.c sets it) */
  int v1 =
      role == ATTN_ROLE_INFER_V1 || (role == ATTN_ROLE_SESSION && t->model);
  if (!e->answered || strcmp(e->method, "POST") != 0 ||
      (!v1 && role != ATTN_ROLE_INFER_V2))
    return;
  int model = t->model ? t->model : r->model;
  attn_infer_obs o = {.model = model - 1,
                      .proto = v1 ? ATTN_PROTO_V1 : ATTN_PROTO_V2,
                      .outcome = outcome_of(e->status, t),
                      .total_ns = e->total_ns,
                      .queued = t->queued,
                      .queue_ns = t->queue_ns,
                      .computed = t->computed,
                      .input_ns = t->input_ns,
                      .compute_ns = t->compute_ns,
                      .output_ns = t->output_ns,
                      .flops = t->flops,
                      .query_tokens = -1,
                      .end_mono_ns = e->end_ns};
  if (o.computed && o.outcome == ATTN_OUTCOME_SUCCESS)
    o.query_tokens = t->query_tokens;
  attn_metrics_infer(s->metrics, &o);
}
