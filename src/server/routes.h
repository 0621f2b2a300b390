/* routes.h - routes.c's interface: the route table asked by http.c and
 * observe.c. Private to src/server/ (docs/architecture.md). */
#ifndef ATTN_SERVER_ROUTES_H
#define ATTN_SERVER_ROUTES_H

#include "internal.h"

/* routes.c: answer req now (DONE, *resp filled) or name the inference to
 * run (DEFER, *t filled, *resp untouched).  HTTP thread; never blocks. */
attn__route_kind attn__route(attn__srv_ctx *s, const attn__http_req *req,
                             attn__http_resp *resp, attn__infer_target *t);

/* routes.c: what can be told of req from its headers alone, before any
 * of the body budget is taken or a body invited (100 Continue): the API
 * key (401), the route's methods (405), and whether the route takes the
 * body announced, body bytes (UINT64_MAX: chunked, length unknown; 0:
 * none): 413 for a body on a route that takes none, or past a small
 * route's limit, 404 for a body to no route.  DONE with *resp filled, or
 * DEFER; *a is filled either way (a->max_body: the most the route takes,
 * which the caller holds a chunked body to).  A request without a body to
 * a route that refuses it for another reason is answered by attn__route.
 * HTTP thread; never blocks. */
attn__route_kind attn__route_admit(attn__srv_ctx *s, const attn__http_req *req,
                                   uint64_t body, attn__http_resp *resp,
                                   attn__admission *a);
/* routes.c: the row of a path, and for a v2 inference its model, into *a
 * (max_body 0), for a request that was never admitted (refused before:
 * observe.c).  Any thread. */
void attn__route_resolve(const attn__srv_ctx *s, const char *path,
                         attn__admission *a);

/* routes.c: the route templates, the label of attnd_http_requests_total
 * (*n of them, one per row of the table; the last is "other"), which one
 * a path is, and the kind of work a template's route is. */
const char *const *attn__route_templates(size_t *n);
int attn__route_template(const char *path);
attn__route_role attn__route_role_of(int route);
/* routes.c: the model a request to path names, for the access log: on a
 * row whose template has {model} (v2's model routes, the repository's
 * load and unload) the path's segment there, copied into buf (cap bytes;
 * a longer one is cut); "attention" on /v1/attention; NULL on other
 * rows (route: the row path matched, attn__route_template).  Any
 * thread. */
const char *attn__route_model(const char *path, int route, char *buf,
                              size_t cap);
/* routes.c, for its unit test: the rows, and whether row i (< count) has
 * what the metrics and GET /'s list need (why, when not). */
int attn__route_count(void);
bool attn__route_row_ok(int i, char *why, size_t cap);

#endif
