/* web.c - the page's files (web/, embedded by scripts/embed_web.py): GET /
 * for browsers, GET /ui/{name}; and the API description, GET /openapi.json
 * (docs/openapi.yaml, converted by scripts/openapi_json.py).
 *
 * DESIGN
 * The bytes are in the binary (web_assets.c, generated at build time), so
 * the page works offline and with no files next to attnd.  Each answer
 * carries:
 *   ETag: "<hash>"                 strong, computed at build time; a
 *                                  matching If-None-Match gets 304
 *   Cache-Control: no-cache        a browser keeps the file but asks again
 *                                  (a 304, no body) before using it, so a
 *                                  new attnd's page is seen at once
 *   Content-Security-Policy: ...   scripts, styles and images from attnd
 *                                  itself only: no inline script or style,
 *                                  no other origin, no framing
 *   X-Content-Type-Options: nosniff, Referrer-Policy: no-referrer
 * GET / is negotiated: Accept naming text/html (browsers) gets the page,
 * anything else (curl's "*\/\*", none, application/json) the JSON index
 * routes.c writes; both carry Vary: Accept.  /ui/ always gets the page.
 * GET /openapi.json carries the same headers (ETag, no-cache, ...).
 * Nothing here is secret and nothing needs a key.
 */
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "web.h"

#define CSP                                                           \
  "default-src 'none'; script-src 'self'; style-src 'self'; "         \
  "img-src 'self' data: blob:; connect-src 'self'; base-uri 'none'; " \
  "form-action 'none'; frame-ancestors 'none'"

static void add_header(attn__http_resp *resp, const char *name,
                       const char *value) {
  size_t n = sizeof resp->headers / sizeof resp->headers[0];
  for (size_t i = 0; i + 1 < n; i += 2)
    if (!resp->headers[i]) {
      resp->headers[i] = name;
      resp->headers[i + 1] = value;
      return;
    }
}

const attn_web_asset *attn__web_find(const char *name) {
  for (size_t i = 0; i < attn__web_count; i++)
    if (strcmp(attn__web_assets[i].name, name) == 0)
      return &attn__web_assets[i];
  return NULL;
}

static int is_ows(char c) {
  return c == ' ' || c == '\t';
}

/* [*p, end) trimmed of optional whitespace on both sides. */
static void trim(const char **p, const char **end) {
  while (*p < *end && is_ows(**p)) (*p)++;
  while (*end > *p && is_ows((*end)[-1])) (*end)--;
}

/* A q value of 0 ("0", "0.", "0.000"), which means "not acceptable". */
static int q_is_zero(const char *p, const char *end) {
  if (p >= end || *p != '0') return 0;
  p++;
  if (p < end && *p == '.') p++;
  while (p < end && *p == '0') p++;
  return p == end;
}

int attn__web_wants_html(const char *accept) {
  if (!accept) return 0;
  const char *p = accept;
  while (*p) {
    const char *item_end = p + strcspn(p, ",");
    const char *type_end = p + strcspn(p, ";,");
    const char *t = p, *te = type_end;
    trim(&t, &te);
    if (te - t == 9 && strncasecmp(t, "text/html", 9) == 0) {
      int zero = 0;
      const char *q = type_end; /* the parameters: ;name=value... */
      while (q < item_end && *q == ';') {
        const char *pe = q + 1 + strcspn(q + 1, ";,");
        const char *n = q + 1, *ne = memchr(n, '=', (size_t)(pe - n));
        if (ne) {
          const char *v = ne + 1, *ve = pe;
          trim(&n, &ne);
          trim(&v, &ve);
          if (ne - n == 1 && (*n == 'q' || *n == 'Q')) zero = q_is_zero(v, ve);
        }
        q = pe;
      }
      if (!zero) return 1;
    }
    p = *item_end ? item_end + 1 : item_end;
  }
  return 0;
}

int attn__web_etag_match(const char *inm, const char *etag) {
  if (!inm) return 0;
  size_t elen = strlen(etag);
  const char *p = inm;
  while (*p) {
    const char *e = p + strcspn(p, ",");
    const char *t = p, *te = e;
    trim(&t, &te);
    if (te - t == 1 && *t == '*') return 1;
    if (te - t > 2 && t[0] == 'W' && t[1] == '/') t += 2;
    if ((size_t)(te - t) == elen && memcmp(t, etag, elen) == 0) return 1;
    p = *e ? e + 1 : e;
  }
  return 0;
}

static void serve(const attn__http_req *req, const attn_web_asset *a,
                  attn__http_resp *resp) {
  int fresh = attn__web_etag_match(req->if_none_match, a->etag);
  size_t n = fresh ? 0 : a->len;
  resp->status = fresh ? 304 : 200;
  resp->content_type = a->content_type;
  resp->body = malloc(n ? n : 1); /* NULL: http.c answers 503 */
  resp->len = resp->body ? n : 0;
  if (resp->body && n) memcpy(resp->body, a->data, n);
  add_header(resp, "ETag", a->etag);
  add_header(resp, "Cache-Control", "no-cache");
  add_header(resp, "Content-Security-Policy", CSP);
  add_header(resp, "X-Content-Type-Options", "nosniff");
  add_header(resp, "Referrer-Policy", "no-referrer");
}

int attn__web_root(const attn__http_req *req, attn__http_resp *resp) {
  add_header(resp, "Vary", "Accept");
  const attn_web_asset *a = attn__web_find("index.html");
  if (!a || !attn__web_wants_html(req->accept)) return 0;
  serve(req, a, resp);
  return 1;
}

int attn__web_file(const attn__http_req *req, attn__http_resp *resp) {
  const char *p = req->path;
  if (strncmp(p, "/ui", 3) != 0 || (p[3] != '\0' && p[3] != '/')) return 0;
  p += p[3] ? 4 : 3;
  const attn_web_asset *a = attn__web_find(*p ? p : "index.html");
  if (!a) return 0;
  serve(req, a, resp);
  return 1;
}

void attn__web_openapi(const attn__http_req *req, attn__http_resp *resp) {
  serve(req, &attn__openapi_doc, resp);
}
