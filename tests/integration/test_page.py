#!/usr/bin/env python3
"""Integration tests: GET / and the page (the JSON index for API
clients, the HTML page for browsers, the /ui/ files and their headers;
docs/api.md, "The page").

Run alone: python3 tests/integration/test_page.py --attnd PATH
(the options of run.py; see harness.py and README.md).
"""

import re
import sys

from harness import check, expect_status, main, request, shared, test


@test
def index_page():
    r = request(shared().port, "GET", "/")
    expect_status(r, 200, "GET /")
    eps = r.json().get("endpoints", [])
    for e in ("POST /v1/attention", "POST /v2/models/{model}/infer"):
        check(e in eps, "index lacks %r: %r" % (e, eps))


_BROWSER = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"


def _page_headers(r, what):
    """The headers every file of the page carries."""
    check(re.fullmatch(r'"[0-9a-f]{32}"', r.header("ETag") or ""),
          "%s: ETag %r is not a strong tag of 32 hex digits" %
          (what, r.header("ETag")))
    check(r.header("Cache-Control") == "no-cache",
          "%s: Cache-Control %r" % (what, r.header("Cache-Control")))
    csp = r.header("Content-Security-Policy") or ""
    check("default-src 'none'" in csp and "script-src 'self'" in csp and
          "unsafe" not in csp, "%s: Content-Security-Policy %r" % (what, csp))
    check(r.header("X-Content-Type-Options") == "nosniff",
          "%s: X-Content-Type-Options %r" %
          (what, r.header("X-Content-Type-Options")))


@test
def page_for_browsers():
    p = shared().port
    r = request(p, "GET", "/", headers={"Accept": _BROWSER})
    expect_status(r, 200, "GET / as a browser")
    check(r.header("Content-Type") == "text/html; charset=utf-8",
          "Content-Type %r" % r.header("Content-Type"))
    check(r.header("Vary") == "Accept", "Vary %r" % r.header("Vary"))
    _page_headers(r, "GET /")
    check(r.body.startswith(b"<!doctype html>"), "not the page: %r" %
          r.body[:60])
    for ref in re.findall(rb'(?:src|href)="(/ui/[^"]+)"', r.body):
        f = request(p, "GET", ref.decode())
        expect_status(f, 200, "GET %s (named by the page)" % ref.decode())
    etag = r.header("ETag")
    h = request(p, "HEAD", "/", headers={"Accept": "text/html"})
    expect_status(h, 200, "HEAD /")
    check(h.body == b"" and h.header("Content-Length") == str(len(r.body))
          and h.header("ETag") == etag, "HEAD /: body %d bytes, "
          "Content-Length %r, ETag %r" % (len(h.body),
                                          h.header("Content-Length"),
                                          h.header("ETag")))
    for inm in (etag, 'W/' + etag, '"x", ' + etag, "*"):
        n = request(p, "GET", "/", headers={"Accept": "text/html",
                                            "If-None-Match": inm})
        check(n.status == 304 and n.body == b"" and n.header("ETag") == etag,
              "If-None-Match %s: %d, %d bytes" % (inm, n.status, len(n.body)))
    n = request(p, "GET", "/", headers={"Accept": "text/html",
                                        "If-None-Match": '"0123"'})
    expect_status(n, 200, "GET / with an If-None-Match that does not match")


@test
def index_json_for_api_clients():
    p = shared().port
    for accept in (None, "*/*", "application/json", "text/html;q=0",
                   "text/plain, application/json;q=0.5"):
        r = request(p, "GET", "/", headers={"Accept": accept} if accept
                    else None)
        expect_status(r, 200, "GET / with Accept %r" % accept)
        check(r.header("Content-Type") == "application/json" and
              "endpoints" in r.json(), "GET / with Accept %r is not the "
              "JSON index: %r" % (accept, r.body[:80]))
        check(r.header("Vary") == "Accept", "Vary %r" % r.header("Vary"))


@test
def ui_files():
    p = shared().port
    types = {"/ui/": "text/html; charset=utf-8",
             "/ui": "text/html; charset=utf-8",
             "/ui/index.html": "text/html; charset=utf-8",
             "/ui/app.js": "text/javascript; charset=utf-8",
             "/ui/style.css": "text/css; charset=utf-8",
             "/ui/favicon.svg": "image/svg+xml"}
    tags = {}
    for path, ctype in types.items():
        r = request(p, "GET", path)
        expect_status(r, 200, "GET " + path)
        check(r.header("Content-Type") == ctype,
              "%s: Content-Type %r" % (path, r.header("Content-Type")))
        _page_headers(r, path)
        tags.setdefault(r.header("ETag"), set()).add(path)
        n = request(p, "GET", path, headers={"If-None-Match":
                                             r.header("ETag")})
        expect_status(n, 304, "GET %s with its ETag" % path)
    check(len(tags) == 4, "one ETag per file: %r" % tags)
    r = request(p, "GET", "/ui/nope.js")
    expect_status(r, 404, "GET /ui/nope.js")
    check("error" in r.json(), "404 body %r" % r.body)
    r = request(p, "POST", "/ui/app.js", body=b"{}")
    expect_status(r, 405, "POST /ui/app.js")
    check(r.header("Allow") == "GET, HEAD", "Allow %r" % r.header("Allow"))
    expect_status(request(p, "GET", "/uix"), 404, "GET /uix")


if __name__ == "__main__":
    sys.exit(main())
