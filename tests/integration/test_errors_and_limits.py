#!/usr/bin/env python3
"""Integration tests: errors and limits (bad JSON, shapes, 404, 405,
415, 413 and max_body_bytes, max_total_body_bytes for bodies and answers,
max_seq_len, max_tensor_elements, max_weights_elements).

Run alone: python3 tests/integration/test_errors_and_limits.py --attnd PATH
(the options of run.py; see harness.py and README.md).
"""

import gzip
import os
import json
import random
import socket
import subprocess
import sys
import time

from harness import (HOST, Server, cfg, check, decode_v2, expect_error,
                     expect_status, main, rand_f32, raw_exchange, request,
                     shared, small_v2_body, test, until_not_503, v1, v1_ok,
                     v2_binary, v2_in, v2_infer)


@test
def deep_json_is_400():
    """Nesting past the parser's 64 levels is a malformed request (400)
    that says so, on both protocols; not a 413."""
    p = shared().port
    deep = "[" * 70 + "1" + "]" * 70
    r = request(p, "POST", "/v1/attention", '{"query":%s}' % deep)
    expect_error(r, 400, "nested deeper than 64 levels", what="v1 deep")
    body = ('{"inputs":[{"name":"query","datatype":"FP32","shape":[1],'
            '"data":%s}]}' % deep)
    r = request(p, "POST", "/v2/models/sdpa/infer", body)
    expect_error(r, 400, "nested deeper than 64 levels", what="v2 deep")


@test
def error_400_bad_json():
    p = shared().port
    expect_error(v1(p, b'{"query": [[1, 2]'), 400, what="/v1 truncated JSON")
    expect_error(request(p, "POST", "/v2/models/sdpa/infer",
                         b'{"inputs": [}'), 400, what="/v2 bad JSON")
    expect_error(v1(p, b"[1, 2]"), 400, "object", what="/v1 non-object")
    expect_error(request(p, "POST", "/v2/models/sdpa/infer", b""), 400,
                 "empty", what="/v2 empty body")
    expect_error(v1(p, {"query": [[1e39, 0]]}), 400, "query",
                 what="/v1 number outside FP32")


@test
def fp32_max_round_trips():
    """FLT_MAX written as its shortest decimal, 3.4028235e38 (as attnd's
    answers, numpy and PyTorch print it), is FLT_MAX, not out of range:
    above FLT_MAX as a double, it rounds to it.  It comes back as it went,
    on /v1, v2 JSON and a session's step, and is taken as scale and
    softcap; the next float up is a 400 naming it (with the digits that
    tell it apart, for a tensor's value)."""
    p = shared().port
    big = 3.4028235e38
    r = v1(p, {"query": [[1, 0]], "key": [[1, 0]], "value": [[big, -big]]})
    expect_status(r, 200, "/v1 FLT_MAX")
    check(r.json()["output"] == [[big, -big]], "/v1: %r" % r.json())
    check(b"3.4028235e+38" in r.body, "/v1 answer %r" % r.body[:200])
    ins = [v2_in("query", [1, 2], [1, 0]), v2_in("key", [1, 2], [1, 0]),
           v2_in("value", [1, 2], [big, -big])]
    r = v2_infer(p, "sdpa", ins)
    expect_status(r, 200, "v2 FLT_MAX")
    out = [o for o in r.json()["outputs"] if o["name"] == "attn_output"][0]
    check(out["data"] == [big, -big], "v2: %r" % out)
    sid = "fltmax-%d" % os.getpid()
    expect_status(request(p, "PUT", "/v1/sessions/" + sid,
                          {"num_heads": 1, "head_dim": 2}), 201, "session")
    r = request(p, "POST", "/v1/sessions/%s/attend" % sid,
                {"position": 0, "query": [[1, 0]], "key": [[1, 0]],
                 "value": [[big, -big]]})
    expect_status(r, 200, "session step FLT_MAX")
    check(r.json()["output"] == [[[big, -big]]], "step: %r" % r.json())
    request(p, "DELETE", "/v1/sessions/" + sid)
    expect_error(v1(p, {"query": [[1, 0]], "key": [[1, 0]],
                        "value": [[3.4028236e38, 0]]}), 400,
                 "value[0][0]: 3.4028236e+38 is outside the FP32 range",
                 what="/v1 the next float up")
    # parameters alike: scale and softcap at the maximum are taken (the
    # scores overflow: rows of null, as documented), the next float up not
    q = {"query": [[1, 0]], "key": [[1, 0]], "value": [[1, 2]]}
    for field in ("scale", "softcap"):
        expect_status(v1(p, dict(q, **{field: big})), 200, "/v1 %s FLT_MAX"
                      % field)
        expect_error(v1(p, dict(q, **{field: 3.4028236e38})), 400, field,
                     "float", what="/v1 %s the next float up" % field)


@test
def error_400_shape_mismatch():
    p = shared().port
    ins = [v2_in("query", [1, 2, 3, 4], [0.5] * 24),
           v2_in("key", [1, 2, 5, 3], [0.5] * 30),
           v2_in("value", [1, 2, 5, 4], [0.5] * 40)]
    expect_error(v2_infer(p, "sdpa", ins), 400, "key", "dim",
                 what="key Dk differs from query Dk")
    ins = [v2_in("query", [2, 4], [0.5] * 6), v2_in("key", [2, 4], [0.5] * 8),
           v2_in("value", [2, 4], [0.5] * 8)]
    expect_error(v2_infer(p, "sdpa", ins), 400, "query", "[2,4]",
                 what="data count vs shape")
    ins = [v2_in("query", [2, 4], [0.5] * 8), v2_in("key", [3, 4], [0.5] * 12),
           v2_in("value", [2, 4], [0.5] * 8)]
    expect_error(v2_infer(p, "sdpa", ins), 400, "value", "Lk",
                 what="value Lk differs from key Lk")
    expect_error(v1(p, {"query": [[1, 2], [3]]}), 400, "query[1]",
                 what="/v1 ragged query")
    expect_error(v1(p, {"query": [[1, 2], [3, 4]], "key": [[1, 2, 3]]}), 400,
                 "key", what="/v1 key width differs")
    expect_error(v1(p, {"query": [[1, 2], [3, 4]],
                        "attn_mask": [[True, False, True]]}), 400,
                 "attn_mask", what="/v1 attn_mask shape")


@test
def error_404():
    p = shared().port
    for path in ("/v3/nothing", "/v2/health", "/v2/models", "/nope",
                 "/v2/models/sdpa/infer/extra"):
        r = request(p, "GET", path)
        expect_error(r, 404, what="GET " + path)
    expect_error(request(p, "GET", "/v2/models/nosuchmodel"), 404,
                 "nosuchmodel", what="GET unknown model")
    expect_error(request(p, "POST", "/v2/models/nosuchmodel/infer",
                         small_v2_body()), 404, "nosuchmodel",
                 what="infer on unknown model")


@test
def error_405_with_allow():
    p = shared().port
    cases = [("GET", "/v1/attention", "POST"),
             ("POST", "/v2/health/live", "GET"),
             ("DELETE", "/v2/health/ready", "GET"),
             ("GET", "/v2/models/sdpa/infer", "POST"),
             ("POST", "/v2/models/sdpa", "GET"),
             ("PUT", "/v1/models", "GET")]
    for method, path, allowed in cases:
        r = request(p, method, path, b"{}" if method in ("POST", "PUT")
                    else None)
        expect_error(r, 405, what="%s %s" % (method, path))
        allow = r.header("allow") or ""
        check(allowed in [a.strip() for a in allow.split(",")],
              "%s %s: Allow %r lacks %s" % (method, path, allow, allowed))
        check(method not in [a.strip() for a in allow.split(",")],
              "%s %s: Allow %r lists the refused method" %
              (method, path, allow))


@test
def error_415():
    p = shared().port
    body = b'{"query": [[1, 2]]}'
    expect_error(request(p, "POST", "/v1/attention", body,
                         ctype="text/html"), 415, "text/html",
                 what="/v1 text/html")
    expect_error(request(p, "POST", "/v2/models/sdpa/infer", small_v2_body(),
                         ctype="text/html; charset=utf-8"), 415, "text/html",
                 what="/v2 text/html")
    expect_error(request(p, "POST", "/v1/attention", body,
                         headers={"Content-Encoding": "br"}), 415, "br",
                 what="/v1 br")
    expect_error(request(p, "POST", "/v2/models/sdpa/infer",
                         gzip.compress(gzip.compress(small_v2_body())),
                         headers={"Content-Encoding": "gzip, gzip"}), 415,
                 "gzip, gzip", what="/v2 stacked encodings")
    expect_error(request(p, "POST", "/v1/attention", body,
                         ctype="application/octet-stream"), 415,
                 what="/v1 octet-stream")
    # what is accepted
    v1_ok(request(p, "POST", "/v1/attention", body,
                  ctype="application/json; charset=utf-8"), "json charset")
    v1_ok(request(p, "POST", "/v1/attention", body, ctype=None),
          "no Content-Type")
    v1_ok(request(p, "POST", "/v1/attention", body,
                  headers={"Content-Encoding": "identity"}),
          "Content-Encoding identity")


@test
def error_413_body_too_large():
    limit = 4096
    with Server("--max-body-bytes", str(limit), name="413") as s:
        p = s.port
        big = b'{"query": [[1, 2]]}' + b" " * (limit + 100)
        expect_error(v1(p, big), 413, "max_body_bytes", what="large body")
        # The refusal must come from the Content-Length header alone: send
        # the head of a 10 MB request and no body at all.
        r = raw_exchange(p, [("POST /v1/attention HTTP/1.1\r\nHost: x\r\n"
                              "Content-Type: application/json\r\n"
                              "Content-Length: 10000000\r\n\r\n").encode()],
                         timeout=10)
        check(r.status == 413, "head-only 10 MB request: %r" % r)
        check(b"max_body_bytes" in r.body, "413 body: %r" % r.body)
        # chunked (no Content-Length): counted while reading
        chunk = b"400\r\n" + b" " * 1024 + b"\r\n"
        r = raw_exchange(p, [("POST /v2/models/sdpa/infer HTTP/1.1\r\n"
                              "Host: x\r\nContent-Type: application/json\r\n"
                              "Transfer-Encoding: chunked\r\n\r\n").encode()]
                         + [chunk] * 6 + [b"0\r\n\r\n"], timeout=10)
        check(r.status == 413, "chunked oversize body: %r" % r)
        # refused at once (issue 32): its access line counts the bytes read
        # until the limit was passed, not the whole 6 KiB, and says why
        deadline = time.monotonic() + 5
        lines = []
        while time.monotonic() < deadline:
            lines = [json.loads(l) for l in s.log_text().splitlines()
                     if '"type":"access"' in l and '"status":413' in l and
                     "/v2/models/sdpa/infer" in l]
            if lines:
                break
            time.sleep(0.05)
        check(lines and limit < lines[-1]["bytes_in"] < 6 * 1024 and
              lines[-1].get("closed") == "body_too_big",
              "chunked 413 access line: %r" % lines[-1:])
        # ... and not drained: once past the limit the server writes its
        # 413 and closes the connection
        sock = socket.create_connection((HOST, p), timeout=10)
        try:
            sock.sendall(("POST /v1/attention HTTP/1.1\r\nHost: x\r\n"
                          "Content-Type: application/json\r\n"
                          "Transfer-Encoding: chunked\r\n\r\n").encode())
            sent, closed = 0, False
            deadline = time.monotonic() + 10
            while sent < 100 * limit and time.monotonic() < deadline:
                try:
                    sock.sendall(chunk)
                    sent += 1024
                except OSError:  # reset or broken pipe: closed by attnd
                    closed = True
                    break
            got = b""
            if not closed:
                sock.settimeout(5)
                try:
                    while len(got) < 65536:
                        part = sock.recv(65536)
                        if not part:
                            closed = True
                            break
                        got += part
                except socket.timeout:  # still open, waiting for more
                    closed = False
                except OSError:  # reset: closed
                    closed = True
            check(not got or got.startswith(b"HTTP/1.1 413 "),
                  "endless chunked body: answered %r" % got[:60])
            check(closed, "endless chunked body: connection still open "
                  "after %d bytes" % sent)
        finally:
            sock.close()
        # exactly the limit is fine, one byte more is not
        body = b'{"query": [[1, 2]]}'
        exact = body + b" " * (limit - len(body))
        j = v1_ok(v1(p, exact), "body of exactly max_body_bytes")
        check(j["shape"]["output"] == [1, 2], "exact-limit answer %r" % j)
        expect_error(v1(p, exact + b" "), 413, what="max_body_bytes + 1")
        # still serving
        expect_status(request(p, "GET", "/v2/health/ready"), 200,
                      "ready after 413s")
        decode_v2(request(p, "POST", "/v2/models/sdpa/infer",
                          small_v2_body()), "infer after 413s")


@test
def total_body_budget():
    """max_total_body_bytes bounds the bodies held at once, all connections
    together: a body that would pass it is a 503 with Retry-After, from its
    Content-Length before it is read, or at its end when chunked; smaller
    ones still fit, and room comes back when a held body is released."""
    limit, budget = 65536, 163840  # two 64 KiB bodies fit, a third does not
    # --check-config refuses a budget below max_body_bytes, naming both
    r = subprocess.run([cfg.attnd, "--check-config", "--max-total-body-bytes",
                        "2048"], capture_output=True, timeout=10)
    check(r.returncode == 2 and b"max_total_body_bytes=2048" in r.stderr and
          b"max_body_bytes=268435456" in r.stderr,
          "--check-config with a budget below max_body_bytes: rc %d %r" %
          (r.returncode, r.stderr[-300:]))

    def padded(n):  # a valid /v1 body of exactly n bytes
        b = b'{"query": [[1, 0], [0, 1]]}'
        return b + b" " * (n - len(b))

    with Server("--max-body-bytes", str(limit), "--max-total-body-bytes",
                str(budget), name="budget") as s:
        p = s.port
        check("max_total_body_bytes=%d," % budget in s.log_text(),
              "start-up line: %s" % s.log_tail(5))
        head = ("POST /v1/attention HTTP/1.1\r\nHost: x\r\n"
                "Content-Type: application/json\r\n"
                "Content-Length: %d\r\n\r\n" % limit).encode()
        full = padded(limit)
        holders = []
        try:
            for i in range(2):  # 2 x 64 KiB held, their bodies unfinished
                h = socket.create_connection((HOST, p), timeout=10)
                holders.append(h)
                h.sendall(head + full[:1000])
            time.sleep(0.3)  # both bodies have reached attnd
            r = v1(p, full)
            expect_error(r, 503, "max_total_body_bytes=%d" % budget,
                         "request and response bodies it holds (%d bytes)" %
                         (2 * limit), "retry", what="third 64 KiB body")
            check(r.headers.get("retry-after") == "1",
                  "503 Retry-After: %r" % r.headers)
            # the refusal comes from the header alone: no body sent
            r = raw_exchange(p, [head], timeout=10)
            check(r.status == 503, "head-only 64 KiB request: %r" % r)
            # a small body still fits beside the two held ones
            v1_ok(v1(p, padded(100)), "small body beside the held ones")
            # chunked: counted as its buffer grows (64 KiB at once), so
            # refused at its end
            chunk = b"400\r\n" + b" " * 1024 + b"\r\n"
            r = raw_exchange(p, [("POST /v1/attention HTTP/1.1\r\nHost: x\r"
                                  "\nContent-Type: application/json\r\n"
                                  "Transfer-Encoding: chunked\r\n\r\n")
                                 .encode(), chunk, chunk, b"0\r\n\r\n"])
            check(r.status == 503 and b"max_total_body_bytes" in r.body,
                  "chunked body past the budget: %r" % r)
            # a held request finishes normally: nothing of it was lost
            holders[1].sendall(full[1000:])
            holders[1].settimeout(10)
            got = b""
            while b"\r\n\r\n" not in got:
                part = holders[1].recv(65536)
                check(part, "held request: closed without an answer")
                got += part
            check(got.startswith(b"HTTP/1.1 200"), "held request answered "
                  "%r" % got[:200])
            holders[1].close()
            # ... and its room comes back (the close is seen by attnd and
            # the context freed: poll, bounded)
            r = until_not_503(lambda: v1(p, full), 10)
            v1_ok(r, "64 KiB body once a held one is done")
        finally:
            for h in holders:
                h.close()
        access = [l for l in s.log_json() if l.get("type") == "access"]
        refused = [l for l in access if l["status"] == 503]
        check(len(refused) >= 3 and refused[0]["bytes_in"] == 0,
              "access lines of the 503s: %r" % refused[:3])


def _weights_request(L, rng):
    """v2 sdpa on [L, 1] query, key and value asking for attn_weights
    ([L, L] FP32) as binary: a small body, an answer of 4 L^2 bytes."""
    x = {"datatype": "FP32", "shape": [L, 1]}
    ins = [dict(x, name=n, values=rand_f32(rng, L))
           for n in ("query", "key", "value")]
    return v2_binary(ins, outputs=[{"name": "attn_weights",
                                    "parameters": {"binary_data": True}}])


def _send_unread(port, body, headers):
    """Send a POST on a socket with a tiny receive buffer and read nothing:
    its answer stays in the server (past the kernel's buffers) until read."""
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.settimeout(30)
    s.connect((HOST, port))
    head = "POST /v2/models/sdpa/infer HTTP/1.1\r\nHost: x\r\n"
    for k, v in headers.items():
        head += "%s: %s\r\n" % (k, v)
    s.sendall(head.encode() + b"Content-Length: %d\r\n\r\n" % len(body)
              + body)
    return s


@test
def total_body_budget_counts_answers():
    """Answers waiting to be sent count in max_total_body_bytes too (a small
    request can ask for a large attn_weights): one that does not fit now is
    a 503, one that could never fit a 400 that says what to leave out; room
    comes back once an answer has been read."""
    rng = random.Random(7)
    budget = 40 << 20  # two 16 MiB answers fit, a third does not
    body, headers = _weights_request(2048, rng)
    with Server("--max-body-bytes", str(1 << 20), "--max-total-body-bytes",
                str(budget), name="budget-answers") as s:
        p = s.port
        big, big_h = _weights_request(4096, rng)  # a 64 MiB answer
        expect_error(request(p, "POST", "/v2/models/sdpa/infer", big,
                             headers=big_h, ctype=None), 400,
                     "answer would be", "max_total_body_bytes=%d" % budget,
                     "attn_weights", what="answer larger than the budget")
        unread = []
        try:
            # one at a time, each answer started (a 200 head) and so held:
            # 16 MiB do not fit in the kernel's socket buffers
            for _ in range(2):
                unread.append(_send_unread(p, body, headers))
                got = b""
                while len(got) < 12:
                    got = unread[-1].recv(12, socket.MSG_PEEK)
                    check(got, "unread request: closed without an answer")
                check(got == b"HTTP/1.1 200", "unread request: %r" % got)
            r = request(p, "POST", "/v2/models/sdpa/infer", body,
                        headers=headers, ctype=None)
            expect_error(r, 503, "the answer", "max_total_body_bytes=%d" %
                         budget, what="third 16 MiB answer")
            check(r.headers.get("retry-after") == "1", "503 Retry-After: %r"
                  % r.headers)
            # reading one held answer (all of it) gives its room back
            f = unread[0].makefile("rb")
            line = f.readline()
            check(line.startswith(b"HTTP/1.1 200"), "held answer: %r" % line)
            n = 0
            while True:
                h = f.readline()
                if h in (b"\r\n", b""):
                    break
                if h.lower().startswith(b"content-length:"):
                    n = int(h.split(b":")[1])
            check(n > 4 * 2048 * 2048, "held answer's length %d" % n)
            check(len(f.read(n)) == n, "held answer cut short")
            f.close()
            r = until_not_503(lambda: request(
                p, "POST", "/v2/models/sdpa/infer", body, headers=headers,
                ctype=None), 10)
            expect_status(r, 200, "16 MiB answer once a held one was read")
            check(len(r.body) > 4 * 2048 * 2048, "answer length %d" %
                  len(r.body))
        finally:
            for u in unread:
                u.close()


@test
def error_limits_seq_len_and_elements():
    with Server("--max-seq-len", "8", "--max-tensor-elements", "1000",
                name="limits") as s:
        p = s.port

        def sdpa(B, H, Lq, Lk, D, params=None):
            return v2_infer(p, "sdpa", [
                v2_in("query", [B, H, Lq, D], [0.5] * (B * H * Lq * D)),
                v2_in("key", [B, H, Lk, D], [0.25] * (B * H * Lk * D)),
                v2_in("value", [B, H, Lk, D], [1.0] * (B * H * Lk * D))],
                params=params)

        decode_v2(sdpa(1, 2, 8, 8, 4), "at the limits")
        for what, r, needles in (
                ("Lq 9 > max_seq_len 8", sdpa(1, 1, 9, 4, 2),
                 ("Lq", "max_seq_len")),
                ("Lk 9 > max_seq_len 8", sdpa(1, 1, 4, 9, 2),
                 ("Lk", "max_seq_len")),
                ("query of 1024 elements", sdpa(1, 1, 8, 8, 128),
                 ("query", "1000")),
                ("1024 attn_weights", sdpa(1, 16, 8, 8, 1),
                 ("attn_weights", "1000")),
                ("/v1 Lq 9", v1(p, {"query": [[1.0, 2.0]] * 9}),
                 ("max_seq_len",))):
            check(r.status in (400, 413), "%s: expected 400 or 413, got %r" %
                  (what, r))
            expect_error(r, r.status, *needles, what=what)
        _, o = decode_v2(sdpa(1, 16, 8, 8, 1, {"need_weights": False}),
                         "weights not computed")
        check(list(o) == ["attn_output"], "outputs %r" % list(o))


@test
def error_400_max_weights_elements():
    with Server("--max-weights-elements", "10", name="max-weights") as s:
        p = s.port
        ins = [v2_in("query", [4, 2], [0.5] * 8),
               v2_in("key", [4, 2], [0.25] * 8),
               v2_in("value", [4, 2], [1.0] * 8)]
        expect_error(v2_infer(p, "sdpa", ins), 400, "attn_weights", "binary",
                     what="16 weights as JSON over a limit of 10")
        msg = expect_error(v2_infer(p, "sdpa", ins), 400, "drop",
                           what="max_weights_elements message")
        check("need_weights" in msg, "message does not mention "
              "need_weights: %r" % msg)
        _, o = decode_v2(v2_infer(p, "sdpa", ins,
                                  params={"binary_data_output": True}),
                         "weights as binary")
        check(o["attn_weights"]["binary"] and
              len(o["attn_weights"]["data"]) == 16, "binary weights")
        _, o = decode_v2(v2_infer(p, "sdpa", ins,
                                  outputs=[{"name": "attn_output"}]),
                         "weights dropped")
        check(list(o) == ["attn_output"], "outputs %r" % list(o))
        _, o = decode_v2(v2_infer(p, "sdpa", ins,
                                  params={"need_weights": False}),
                         "need_weights false")
        expect_error(v1(p, {"query": [[1, 0]] * 4}), 400, "attn_weights",
                     what="/v1 weights over the limit")
        v1_ok(v1(p, {"query": [[1, 0]] * 4, "need_weights": False}),
              "/v1 need_weights false")
        v1_ok(v1(p, {"query": [[1, 0]] * 3}), "/v1 9 weights")
    # 0 = never as JSON (docs/configuration.md), not "no limit"
    with Server("--max-weights-elements", "0", name="no-weights") as s:
        p = s.port
        ins = [v2_in("query", [1, 2], [0.5] * 2),
               v2_in("key", [1, 2], [0.25] * 2),
               v2_in("value", [1, 2], [1.0] * 2)]
        expect_error(v2_infer(p, "sdpa", ins), 400, "max_weights_elements = 0",
                     what="one weight as JSON with max_weights_elements 0")
        expect_error(v1(p, {"query": [[1, 0]]}), 400, "attn_weights",
                     "need_weights", what="/v1 with max_weights_elements 0")
        _, o = decode_v2(v2_infer(p, "sdpa", ins,
                                  params={"binary_data_output": True}),
                         "binary weights with max_weights_elements 0")
        check(o["attn_weights"]["binary"], "binary weights")
        v1_ok(v1(p, {"query": [[1, 0]], "need_weights": False}),
              "/v1 need_weights false with max_weights_elements 0")


if __name__ == "__main__":
    sys.exit(main())
