#!/usr/bin/env python3
"""Integration tests: what attnd decides from a request's headers alone
(issue 39, items 1, 2, 3 and 8).  The API key, the route and the body a
route takes are checked before any of the body budget is taken or a body
invited with 100 Continue; the repository's routes take small bodies only;
the header section is refused when libmicrohttpd 0.9.75 would have read it
otherwise than a strict proxy in front (request smuggling).

Run alone: python3 tests/integration/test_admission.py --attnd PATH
(the options of run.py; see harness.py and README.md).
"""

import json
import socket
import sys
import time

from harness import (HOST, Server, check, expect_error, expect_status, main,
                     raw_exchange, shared, test)

KEY = "admission-key-1"


def _head(method, path, extra=b""):
    return (method + b" " + path + b" HTTP/1.1\r\nHost: t\r\n" + extra +
            b"\r\n")


def _v1_body(n_keys=1):
    """One query row against n_keys keys and values (a body of about 24
    bytes a key, an answer of about 10 bytes a key)."""
    rows = [[1.0, 0.5]] * n_keys
    return json.dumps({"query": [[1.0, 0.5]], "key": rows,
                       "value": rows}).encode()


def _read_answer(s, timeout):
    """Bytes sent back on socket s within timeout, up to the end of one
    head (or the close): b"" when nothing came."""
    s.settimeout(0.2)
    buf = b""
    end = time.monotonic() + timeout
    while time.monotonic() < end and b"\r\n\r\n" not in buf:
        try:
            part = s.recv(4096)
        except socket.timeout:
            continue
        if not part:
            break
        buf += part
    return buf


def _status_of(buf):
    try:
        return int(buf.split(b"\r\n", 1)[0].split()[1])
    except (IndexError, ValueError):
        return None


@test
def keyless_bodies_take_no_budget():
    """With API keys on, keyless requests that announce bodies they never
    send are refused from their headers (401 on a keyed route, 413 on a
    route that takes no body) and hold nothing of max_total_body_bytes:
    a keyed inference still gets its 200.  Before, each one's whole
    Content-Length was counted against the budget as soon as its headers
    came, so 12 of them left the keyed request a 503."""
    with Server("--max-total-body-bytes", "1000000", "--max-body-bytes",
                "500000",
                env={"ATTND_API_KEY": KEY}, name="admit-budget") as srv:
        socks = []
        try:
            for i in range(12):
                s = socket.create_connection((HOST, srv.port), timeout=5)
                socks.append(s)
                if i % 2:
                    s.sendall(_head(b"POST", b"/v1/attention",
                                    b"Content-Type: application/json\r\n"
                                    b"Content-Length: 200000\r\n"))
                else:
                    s.sendall(_head(b"GET", b"/v2/health/live",
                                    b"Content-Length: 200000\r\n"))
            for i, s in enumerate(socks):
                got = _read_answer(s, 5.0)
                want = 401 if i % 2 else 413
                check(_status_of(got) == want,
                      "keyless request %d: wanted %d from its headers, got %r"
                      % (i, want, got[:120]))
            # the refused sockets are still open on our side: nothing of
            # theirs may be held
            body = _v1_body(4000)
            r = raw_exchange(srv.port, [_head(
                b"POST", b"/v1/attention",
                b"Authorization: Bearer " + KEY.encode() + b"\r\n"
                b"Content-Type: application/json\r\nConnection: close\r\n"
                b"Content-Length: " + str(len(body)).encode() + b"\r\n") +
                body])
            expect_status(r, 200, "the keyed inference beside them")
        finally:
            for s in socks:
                s.close()


@test
def keyless_expect_continue_gets_401_not_100():
    """A keyless request with Expect: 100-continue is answered 401 from its
    headers; it is never invited to send its body (before: 100 Continue,
    then the 401 once the body had come).  With the key, 100 Continue."""
    with Server(env={"ATTND_API_KEY": KEY}, name="admit-expect") as srv:
        body = _v1_body()
        head = (b"Content-Type: application/json\r\nExpect: 100-continue\r\n"
                b"Content-Length: " + str(len(body)).encode() + b"\r\n")
        s = socket.create_connection((HOST, srv.port), timeout=5)
        try:
            s.sendall(_head(b"POST", b"/v1/attention", head))
            got = _read_answer(s, 5.0)
            check(_status_of(got) == 401,
                  "keyless Expect: 100-continue got %r" % got[:120])
        finally:
            s.close()
        s = socket.create_connection((HOST, srv.port), timeout=5)
        try:
            s.sendall(_head(b"POST", b"/v1/attention", head +
                            b"X-Api-Key: " + KEY.encode() + b"\r\n"))
            got = _read_answer(s, 5.0)
            check(_status_of(got) == 100,
                  "keyed Expect: 100-continue got %r" % got[:120])
        finally:
            s.close()


@test
def body_refused_where_the_route_takes_none():
    """A body announced to a route that takes none is a 413 from the
    headers, naming the route; a body to no route is a 404, and to a
    route of another method a 405, likewise before the body.  Without a
    body those routes answer as before (200, 404, 405)."""
    p = shared().port
    for method, path, want, needle in (
            (b"GET", b"/v2/health/ready", 413, "takes no request body"),
            (b"GET", b"/v2/models/sdpa", 413, "takes no request body"),
            (b"POST", b"/v2/nowhere", 404, "no route"),
            (b"POST", b"/v2/models/sdpa/bogus", 404, "no route"),
            (b"PUT", b"/v1/attention", 405, "not allowed"),
            (b"POST", b"/v2/models/sdpa/ready", 405, "not allowed")):
        s = socket.create_connection((HOST, p), timeout=5)
        try:
            s.sendall(_head(method, path, b"Content-Length: 50000000\r\n"))
            got = _read_answer(s, 5.0)
            check(_status_of(got) == want and needle.encode() in got,
                  "%s %s with a body: %r" % (method, path, got[:200]))
        finally:
            s.close()
    expect_status(raw_exchange(p, [_head(b"GET", b"/v2/health/ready")]), 200)
    expect_status(raw_exchange(p, [_head(b"POST", b"/v2/nowhere")]), 404)
    expect_status(raw_exchange(p, [_head(b"POST", b"/v2/models/sdpa/ready")]),
                  405)


@test
def repository_bodies_capped():
    """The repository's routes take at most 64 KiB: a larger
    Content-Length is a 413 from the headers (48 MiB once took 2 GB to
    parse); a chunked body is cut at the limit.  A small body works.  A
    load under model_control "none" (the shared server's) is refused from
    the headers too: 403, before its size is looked at."""
    p = shared().port
    for path, code, says in ((b"/v2/repository/index", 413, b"65536"),
                             (b"/v2/repository/models/demo/load", 403,
                              b"model_control")):
        s = socket.create_connection((HOST, p), timeout=5)
        try:
            s.sendall(_head(b"POST", path, b"Content-Type: application/json"
                            b"\r\nContent-Length: 50331648\r\n"))
            got = _read_answer(s, 5.0)
            check(_status_of(got) == code and says in got,
                  "%s with 48 MiB announced: %r" % (path, got[:200]))
        finally:
            s.close()
    chunk = b"[" + b"0," * 40000 + b"0]"
    r = raw_exchange(p, [_head(b"POST", b"/v2/repository/index",
                               b"Transfer-Encoding: chunked\r\n") +
                         b"%x\r\n" % len(chunk) + chunk])
    expect_error(r, 413, "65536", what="chunked repository body")
    body = b'{"ready": true}'
    r = raw_exchange(p, [_head(b"POST", b"/v2/repository/index",
                               b"Content-Length: %d\r\n" % len(body)) + body])
    expect_status(r, 200, "a small index body")


SMUGGLED = (b"GET /v2/health/live HTTP/1.1\r\nHost: t\r\n"
            b"X-Request-Id: smuggled\r\n\r\n")


def _all_answers(port, data, timeout=3.0):
    """Everything attnd writes back for data until it closes (bounded)."""
    s = socket.create_connection((HOST, port), timeout=timeout)
    out = b""
    try:
        s.sendall(data)
        end = time.monotonic() + timeout
        s.settimeout(0.2)
        while time.monotonic() < end and len(out) < 65536:
            try:
                part = s.recv(65536)
            except socket.timeout:
                continue
            if not part:
                break
            out += part
    finally:
        s.close()
    return out


@test
def header_smuggling_refused():
    """Header sections libmicrohttpd 0.9.75 reads otherwise than RFC 9112
    (each let a second request hidden in the body be answered): a line
    with an empty name (it ended the headers there), blanks before a colon
    (Transfer-Encoding : chunked), a folded line (glued onto the header's
    name), and a first line that starts with a NUL (the section ended
    there, with no header).  Each is one 400 that says what is wrong, and
    nothing after it is answered."""
    p = shared().port
    te = b"0\r\n\r\n" + SMUGGLED
    cases = (
        (b"POST /v2/health/ready HTTP/1.1\r\nHost: t\r\n: x\r\n"
         b"Content-Length: 5\r\n\r\n" + SMUGGLED, "not a header line"),
        (b"POST /v1/attention HTTP/1.1\r\nHost: t\r\n"
         b"Transfer-Encoding : chunked\r\nContent-Length: %d\r\n\r\n"
         % len(te) + te, "blanks before its colon"),
        (b"GET /v2/health/ready HTTP/1.1\r\nHost: t\r\nX-A: a\r\n b\r\n\r\n"
         + SMUGGLED, "folded line"),
        (b"GET /v2/health/ready HTTP/1.1\r\nX-A: a\r\n b\r\nHost: t\r\n\r\n"
         + SMUGGLED, "folded over lines"),
        (b"GET /v2/health/ready HTTP/1.1\r\n: x\r\nHost: t\r\n\r\n" +
         SMUGGLED, "empty name"),
        # a first line that starts with a NUL: libmicrohttpd ended the
        # section there, with no header (found by fuzz_http)
        (b"GET /v2/health/ready HTTP/1.1\r\n\x00X: y\r\n" + SMUGGLED,
         "request line"),
    )
    for data, needle in cases:
        got = _all_answers(p, data)
        check(got.count(b"HTTP/1.1 ") == 1 and got.startswith(
            b"HTTP/1.1 400") and needle.encode() in got and
            b"smuggled" not in got, "%r: %r" % (data[:70], got[:300]))
    # the same requests, well formed, are answered (the test can fail)
    got = _all_answers(p, b"GET /v2/health/ready HTTP/1.1\r\nHost: t\r\n"
                       b"X-A: a b\r\n\r\n" + SMUGGLED)
    check(got.count(b"HTTP/1.1 200") == 2 and b"smuggled" in got,
          "two well-formed requests: %r" % got[:300])


@test
def header_value_bytes_refused():
    """docs/api.md's promise: a NUL anywhere in a header value (right
    before the CR LF too, which libmicrohttpd dropped silently:
    X-Request-Id: abc<NUL> became abc) and a bare CR inside a value are
    400s naming the header.  Blanks, tabs and empty values are fine."""
    p = shared().port
    for extra, needle in ((b"X-Request-Id: abc\x00\r\n", "X-Request-Id"),
                          (b"X-A: 1\x00\r\nX-B: 2\r\n", "X-A"),
                          (b"X-A: a\rb\r\n", "CR"),
                          (b"X-A: a\x01b\r\n", "control byte")):
        r = raw_exchange(p, [_head(b"GET", b"/v2/health/ready", extra)])
        expect_error(r, 400, needle, what=repr(extra))
        check(r.headers.get("x-request-id") != "abc",
              "the cut id was taken: %r" % r.headers)
    r = raw_exchange(p, [_head(b"GET", b"/v2/health/ready",
                               b"X-A: a b\t\r\nX-E:\r\nX-F:  \t\r\n")])
    expect_status(r, 200, "blanks, tabs, empty values")


if __name__ == "__main__":
    sys.exit(main())
