/* web.h - the page at GET / (the files of web/, embedded at build time).
 * Not a public header.
 *
 * scripts/embed_web.py writes web_assets.c (in the build tree) with one
 * attn_web_asset per file of web/: its bytes, Content-Type and a strong
 * ETag computed at build time.  web.c answers GET and HEAD for them from
 * that table, on the HTTP thread, without touching anything else: the
 * page's files are public (no API key is asked for them). */
#ifndef ATTN_SERVER_WEB_H
#define ATTN_SERVER_WEB_H

#include <stddef.h>

#include "internal.h"

typedef struct attn_web_asset {
  const char *name;         /* "app.js": served at /ui/app.js */
  const char *content_type; /* "text/javascript; charset=utf-8" */
  const char *etag;         /* "\"<32 hex digits>\"", quotes included */
  const unsigned char *data;
  size_t len;
} attn_web_asset;

/* web_assets.c (generated): sorted by name. */
extern const attn_web_asset attn__web_assets[];
extern const size_t attn__web_count;

/* openapi_doc.c (generated from docs/openapi.yaml): the API description
 * as JSON, served at GET /openapi.json. */
extern const attn_web_asset attn__openapi_doc;

/* The file named name, or NULL. */
const attn_web_asset *attn__web_find(const char *name);

/* 1 when an Accept header asks for HTML: one of its media ranges is
 * text/html (any case, any parameters) with a q other than 0.  NULL (no
 * Accept), "*\/\*" and "application/json" are 0. */
int attn__web_wants_html(const char *accept);

/* 1 when an If-None-Match header matches etag: "*", or one of its
 * comma-separated entity tags equals etag (weak comparison: a W/ prefix
 * is ignored, as RFC 9110 13.1.2 says for If-None-Match). */
int attn__web_etag_match(const char *if_none_match, const char *etag);

/* GET / : the page (index.html) when the client asks for HTML, and 1;
 * else 0 and the caller answers (routes.c: the JSON index).  Either way
 * resp carries Vary: Accept. */
int attn__web_root(const attn__http_req *req, attn__http_resp *resp);

/* GET /ui, /ui/ (the page) and /ui/{name} (a file of web/): 200 with the
 * file, or 304 when If-None-Match matches its ETag; 0 when there is no
 * such file (resp untouched). */
int attn__web_file(const attn__http_req *req, attn__http_resp *resp);

/* GET /openapi.json: the API description, 200 (or 304 when If-None-Match
 * matches its ETag), with the page's headers. */
void attn__web_openapi(const attn__http_req *req, attn__http_resp *resp);

#endif
