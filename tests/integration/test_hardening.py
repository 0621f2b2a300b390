#!/usr/bin/env python3
"""Integration tests: hostile clients (issue 32, "Found, to fix").  Raw
sockets for the requests no HTTP library would send: control bytes in the
path, NULs in header values, bare-LF line endings, absolute-form targets,
huge chunks, slow and idle connection floods, Triton's timeout parameter
while queued, memory given back after a burst (also the workers' malloc
arenas), the work of a compressed body, junk TLS handshakes in the log.

Run alone: python3 tests/integration/test_hardening.py --attnd PATH
(the options of run.py; see harness.py and README.md).
"""

import json
import socket
import sys
import time

from harness import (HOST, Pending, Server, check, check_slow_answer,
                     expect_error, expect_status, free_port, main,
                     raw_exchange, request, shared, slow_running,
                     small_v2_body, test, v2_binary, wait_log)


def _get(path, extra=b""):
    return (b"GET " + path + b" HTTP/1.1\r\nHost: t\r\n" + extra +
            b"Connection: close\r\n\r\n")


@test
def control_bytes_in_path_refused():
    """A path holding %00 (or any byte below 0x20, or DEL, once decoded) is
    a 400 that names the problem; it is never routed as its prefix (before
    the fix, /v2/health/ready%00xyz answered 200 and a %00 after
    /v1/attention computed)."""
    p = shared().port
    cases = [b"GET /v2/health/ready%00xyz", b"GET /v2/models/sdpa%00x",
             b"GET /v2/health/live%0a", b"GET /v2/health/ready%1F",
             b"GET /v2/health/ready%7f"]
    for line in cases:
        r = raw_exchange(p, [line + b" HTTP/1.1\r\nHost: t\r\n\r\n"])
        expect_error(r, 400, "control character", what=line.decode())
    body = b'{"query": [[1.0]], "key": [[1.0]], "value": [[1.0]]}'
    head = (b"POST /v1/attention%00junk HTTP/1.1\r\nHost: t\r\n"
            b"Content-Type: application/json\r\nContent-Length: ")
    r = raw_exchange(p, [head + str(len(body)).encode() + b"\r\n\r\n" + body])
    expect_error(r, 400, "control character", what="POST %00")
    # the same paths without the byte still work (the test can fail)
    expect_status(raw_exchange(p, [_get(b"/v2/models/sdpa")]), 200)


@test
def nul_in_header_value_refused():
    """A NUL inside a header value is a 400 naming the header (RFC 9110
    5.5), wherever the header stands; libmicrohttpd alone kept the value
    up to the NUL and answered 200."""
    p = shared().port
    for extra in (b"X-A: a\x00b\r\n", b"X-A: a\x00 b c\r\nX-B: 1\r\n",
                  b"Accept: */*\r\nX-Last: v\x00tail\r\n"):
        r = raw_exchange(p, [_get(b"/v2/health/ready", extra)])
        expect_error(r, 400, "NUL", what=repr(extra))
    r = raw_exchange(p, [_get(b"/v2/health/ready", b"X-A: a b\t\r\n")])
    expect_status(r, 200, "blanks in a value")


@test
def bare_lf_line_endings_handled_consistently():
    """RFC 9112 2.2 lets a recipient take a bare LF as a line end:
    libmicrohttpd does, in the request line, the headers and chunk lines
    alike, so a request with bare LFs (or mixed) is read as with CR LF; a
    bare CR is refused (400)."""
    p = shared().port
    for req in (b"GET /v2/health/ready HTTP/1.1\nHost: t\n\n",
                b"GET /v2/health/ready HTTP/1.1\r\nHost: t\n\r\n"):
        expect_status(raw_exchange(p, [req]), 200, repr(req))
    body = b'{"query": [[1.0, 2.0]]}'
    req = (b"POST /v1/attention HTTP/1.1\nHost: t\nContent-Type: "
           b"application/json\nTransfer-Encoding: chunked\n\n" +
           b"%x\n" % len(body) + body + b"\n0\n\n")
    r = raw_exchange(p, [req])
    expect_status(r, 200, "chunked with bare LFs")
    s = socket.create_connection((HOST, p), timeout=10)
    try:
        s.sendall(b"GET /v2/health/ready HTTP/1.1\rHost: t\r\n\r\n")
        got = s.recv(4096)
        check(got.startswith(b"HTTP/1.1 400"), "bare CR: %r" % got[:80])
    finally:
        s.close()


@test
def absolute_form_target_routed_by_path():
    """GET http://host/path HTTP/1.1 is routed by its path (RFC 9112
    3.2.2), with any scheme case and port; before the fix: 404."""
    p = shared().port
    for target in (b"http://127.0.0.1/v2/health/ready",
                   b"HTTP://127.0.0.1:%d/v2/health/ready" % p,
                   b"https://example.com/v2/health/ready?x=1"):
        r = raw_exchange(p, [_get(target)])
        expect_status(r, 200, target.decode())
        check(json.loads(r.body) == {"ready": True}, "body %r" % r.body)
    r = raw_exchange(p, [_get(b"http://127.0.0.1/v2/models/sdpa")])
    expect_status(r, 200, "metadata")
    check(json.loads(r.body)["name"] == "sdpa", "metadata %r" % r.body)
    r = raw_exchange(p, [_get(b"http://127.0.0.1")])
    expect_status(r, 200, "no path: /")


@test
def library_refusals_keep_their_status():
    """The malformed requests libmicrohttpd 0.9.75 answers itself, with
    HTML it offers no way to replace (docs/api.md): the status is right,
    the connection closed, and the server still answers after them."""
    p = shared().port
    cases = [(b"POST /v1/attention HTTP/1.1\r\nHost: t\r\n"
              b"Content-Length: -1\r\n\r\n", b" 400 "),
             (b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", b" 505 "),
             (_get(b"/v2/health/ready", b"X-Big: " + b"a" * 40000 + b"\r\n"),
              b" 431 ")]
    for req, status in cases:
        s = socket.create_connection((HOST, p), timeout=10)
        try:
            s.sendall(req)
            got = s.recv(4096)
            check(status in got.split(b"\r\n", 1)[0],
                  "%r: %r" % (req[:30], got[:80]))
        finally:
            s.close()
    expect_status(raw_exchange(p, [_get(b"/v2/health/live")]), 200)


@test
def triton_timeout_honoured_while_queued():
    """Triton's `timeout` (microseconds) bounds the wait in the queue like
    queue_timeout_ms: a request queued behind a slow one on the only worker
    gets its 503 when its own time is up, while the slow one still computes
    (before the fix only when a worker took it, 1.28 s for 200 ms), in JSON
    and in the binary format, also when queued behind requests with later
    deadlines.  The time to the 503 is printed, not asserted (no timing
    assertions: the issue's bound is 10% of the timeout)."""
    timeout_us = 200000
    with Server("--workers", "1", "--queue-capacity", "8",
                "--blas-threads-per-worker", "1",
                name="triton-timeout") as s:
        slow, shape = slow_running(s)
        pend = []
        try:
            # queued first, with the server's 10 s deadline: the reaper must
            # still find the shorter one behind it
            pend.append(Pending(s.port, "/v2/models/sdpa/infer",
                                small_v2_body(), {"Content-Type":
                                                  "application/json"}))
            bbody, bhdrs = v2_binary(
                [{"name": n, "datatype": "FP32", "shape": [2, 2],
                  "values": [1, 0, 0, 1]} for n in ("query", "key", "value")],
                params={"timeout": timeout_us})
            for body, hdrs in ((small_v2_body(timeout_us=timeout_us),
                                {"Content-Type": "application/json"}),
                               (bbody, bhdrs)):
                t0 = time.monotonic()
                late = Pending(s.port, "/v2/models/sdpa/infer", body, hdrs)
                pend.append(late)
                r = late.response()
                dt = time.monotonic() - t0
                check(not slow.answered(), "the 503 came only after the "
                      "slow request finished (%.0f ms)" % (dt * 1e3))
                expect_error(r, 503, "timeout parameter (200000 us)")
                print("    timeout 200 ms: 503 after %.0f ms" % (dt * 1e3))
            check_slow_answer(slow.response(), shape, "slow request")
            expect_status(pend[0].response(), 200, "queued without timeout")
        finally:
            slow.close()
            for x in pend:
                x.close()


def _read_until_closed(s, limit_s):
    """What the server sends on s until it closes it, or limit_s passes
    (then None: the connection was kept)."""
    got = b""
    deadline = time.monotonic() + limit_s
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        s.settimeout(left)
        try:
            part = s.recv(65536)
        except socket.timeout:
            return None
        except ConnectionResetError:
            return got
        if not part:
            return got
        got += part


def _status(got):
    line = got.split(b"\r\n", 1)[0] if got else b""
    parts = line.split()
    return int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else None


def _slow_headers(s, path):
    """GET path on s with a header line every 0.3 s, for at most 5 s: what
    the server sent first (None: nothing) and after how many seconds."""
    s.sendall(b"GET " + path + b" HTTP/1.1\r\n")
    t0, got = time.monotonic(), None
    while time.monotonic() - t0 < 5:
        try:
            s.sendall(b"X-Slow: 1\r\n")
        except OSError:
            break
        s.settimeout(0.3)
        try:
            got = s.recv(4096)
            break
        except socket.timeout:
            pass
    return got, time.monotonic() - t0


@test
def slow_headers_cut_with_408():
    """header_timeout_s: a client sending a header line every 0.3 s (each
    byte used to reset the idle timer: held forever) gets a 408 and is
    closed once its headers have taken longer than the limit, with an
    access line; an idle kept-alive connection is not cut by it."""
    with Server("--header-timeout-s", "1", name="header-timeout") as srv:
        ka = socket.create_connection((HOST, srv.port), timeout=10)
        s = socket.create_connection((HOST, srv.port), timeout=10)
        try:
            ka.sendall(_get(b"/v2/health/live").replace(
                b"Connection: close\r\n", b""))
            check(_status(ka.recv(4096)) == 200, "keep-alive request")
            got, dt = _slow_headers(s, b"/v2/health/ready")
            check(got is not None and _status(got) == 408,
                  "no 408 for slow headers after %.1f s: %r" % (dt, got))
            check(b"header_timeout_s=1" in got, "408 body %r" % got[-120:])
            print("    slow headers cut after %.2f s (limit 1 s)" % dt)
            # the kept-alive connection, idle longer than the limit, works
            ka.sendall(_get(b"/v2/health/live"))
            check(_status(ka.recv(4096)) == 200, "kept-alive request cut")
        finally:
            s.close()
            ka.close()
        line = wait_log(srv, lambda l: l.get("status") == 408 and
                        l.get("closed") == "header_timeout",
                        "for the header timeout (408, closed header_timeout)")
        # no request began, but the peer is known (issue 44)
        check(line.get("client") == "127.0.0.1" and "model" not in line,
              "408 line %r" % line)
        m = request(srv.port, "GET", "/metrics").body.decode()
        n408 = [l for l in m.splitlines()
                if l.startswith("attnd_http_requests_total{") and
                'code="408"' in l]
        check(n408 and float(n408[0].split()[-1]) >= 1,
              "header timeout not in the metrics: %r" % n408)


@test
def slow_body_cut_with_408():
    """body_min_rate_bytes_s: a body that stops after its first byte is cut
    with a 408 once header_timeout_s has passed, not held until
    connection_timeout_s (60 s); its access line says body_too_slow."""
    with Server("--header-timeout-s", "1", name="body-rate") as srv:
        s = socket.create_connection((HOST, srv.port), timeout=10)
        try:
            s.sendall(b"POST /v1/attention HTTP/1.1\r\nHost: t\r\n"
                      b"Content-Type: application/json\r\n"
                      b"Content-Length: 1000\r\n\r\n{")
            t0 = time.monotonic()
            got = _read_until_closed(s, 5)
            dt = time.monotonic() - t0
            check(got is not None and _status(got) == 408,
                  "no 408 for a stalled body after %.1f s: %r" % (dt, got))
            check(b"body_min_rate_bytes_s=500" in got, "408 %r" % got[-150:])
        finally:
            s.close()
        wait_log(srv, lambda l: l.get("closed") == "body_too_slow",
                 "for the slow body (closed body_too_slow)")


@test
def huge_chunk_refused_at_once():
    """A chunk announced as ffffffffffffffff whose bytes pass
    max_body_bytes is refused at once: 413 (JSON) and close, instead of
    being read for another max_body_bytes and closed without an answer."""
    with Server("--max-body-bytes", "1048576", name="huge-chunk") as srv:
        s = socket.create_connection((HOST, srv.port), timeout=10)
        try:
            s.sendall(b"POST /v1/attention HTTP/1.1\r\nHost: t\r\n"
                      b"Content-Type: application/json\r\n"
                      b"Transfer-Encoding: chunked\r\n\r\n"
                      b"ffffffffffffffff\r\n")
            sent, piece = 0, b"7" * 65536
            while sent < 4 * 1048576:  # twice what the old drain read
                try:
                    s.sendall(piece)
                except OSError:
                    break
                sent += len(piece)
            got = _read_until_closed(s, 5)
            check(got is not None and _status(got) == 413,
                  "no 413 after %d bytes: %r" % (sent, got and got[:100]))
            check(b"max_body_bytes=1048576" in got, "413 %r" % got[-120:])
        finally:
            s.close()
        expect_status(raw_exchange(srv.port, [_get(b"/v2/health/ready")]),
                      200)


def _raise_fd_limit(want):
    """The soft open-files limit raised toward want: what it is now."""
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = want if hard == resource.RLIM_INFINITY else min(want, hard)
    if soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


@test
def probe_answered_through_connection_flood():
    """At max_connections (1024, the default) held by 2,000 idle and 500
    slow-header clients, a health probe on a new connection is answered:
    the connections that waited longest without a complete request are
    closed to make room, and a warning (at most once a second) says so.
    Before, the probe waited unaccepted (59 s in the issue).  The probe's
    time is printed; the test asserts an answer within 5 s only (the
    issue's 100 ms is measured, not asserted, on a loaded machine)."""
    limit = _raise_fd_limit(4096)
    idle_n, slow_n = 2000, 500
    if limit < idle_n + slow_n + 64:  # scaled down to fit, said so
        idle_n = max(0, (limit - 64) * 4 // 5)
        slow_n = max(0, (limit - 64) - idle_n)
        print("    open-files limit %d: %d idle and %d slow clients" %
              (limit, idle_n, slow_n))
    socks = []
    with Server(name="flood") as srv:
        try:
            for i in range(idle_n + slow_n):
                c = socket.socket()
                c.setblocking(False)
                try:
                    c.connect((HOST, srv.port))
                except BlockingIOError:
                    pass
                socks.append(c)
            time.sleep(0.3)
            for c in socks[idle_n:]:  # the slow ones start their headers
                try:
                    c.send(b"GET /v2/health/ready HTTP/1.1\r\nX-a: 1\r\n")
                except OSError:
                    pass
            times = []
            for _ in range(3):
                t0 = time.monotonic()
                r = raw_exchange(srv.port, [_get(b"/v2/health/ready")],
                                 timeout=5)
                times.append(time.monotonic() - t0)
                expect_status(r, 200, "probe during the flood")
            print("    probe through %d idle + %d slow: %s ms" %
                  (idle_n, slow_n, ", ".join("%.1f" % (t * 1e3)
                                             for t in times)))
        finally:
            for c in socks:
                c.close()
        wait_log(srv, lambda l: "connection limit reached" in l.get("msg", ""),
                 "warning for the connection limit")
        warn = [l for l in srv.log_text().splitlines()
                if "connection limit reached" in l]
        stamps = [json.loads(l)["time"] for l in warn]
        secs = [int(t[11:13]) * 3600 + int(t[14:16]) * 60 + float(t[17:23])
                for t in stamps]
        check(all(b - a >= 0.999 for a, b in zip(secs, secs[1:])),
              "warnings closer than a second apart: %r" % stamps)


def _open_idle(port, n, first_bytes=b""):
    """n connections to port, each sending first_bytes (none: idle)."""
    socks = []
    for _ in range(n):
        c = socket.socket()
        c.setblocking(False)
        try:
            c.connect((HOST, port))
        except BlockingIOError:
            pass
        socks.append(c)
    if first_bytes:
        time.sleep(0.3)  # connected
        for c in socks:
            try:
                c.send(first_bytes)
            except OSError:
                pass
    return socks


@test
def metrics_port_scrape_through_connection_flood():
    """metrics_port has port's admission: with its connections (64) all
    held by 100 idle and 50 slow-header clients, a scrape and a liveness
    probe on new connections are answered (the connections that waited
    longest without a complete request are closed to make room), and the
    warning names metrics_port.  Before, they waited unaccepted until
    connection_timeout_s (60 s) freed a slot.  Times are printed; the test
    asserts answers within 5 s only."""
    _raise_fd_limit(1024)
    mport = free_port()
    socks = []
    with Server("--metrics-port", str(mport), name="metrics-flood") as srv:
        try:
            socks += _open_idle(mport, 100)
            socks += _open_idle(mport, 50, b"GET /metrics HTTP/1.1\r\nX: 1\r\n")
            time.sleep(0.3)
            for path in (b"/metrics", b"/v2/health/live", b"/metrics"):
                t0 = time.monotonic()
                r = raw_exchange(mport, [_get(path)], timeout=5)
                expect_status(r, 200, "%s during the flood" % path.decode())
                print("    %s through 100 idle + 50 slow: %.1f ms" %
                      (path.decode(), (time.monotonic() - t0) * 1e3))
        finally:
            for c in socks:
                c.close()
        wait_log(srv, lambda l: "connection limit reached on metrics_port" in
                 l.get("msg", ""), "warning naming metrics_port")


@test
def metrics_port_slow_clients_cut():
    """metrics_port keeps header_timeout_s: a client sending a header line
    every 0.3 s gets a 408 and is closed once its headers take longer than
    the limit (before: kept until connection_timeout_s).  An upload never
    holds it: a POST whose 1 MB body does not come is answered (405) at
    once and closed, not read."""
    mport = free_port()
    with Server("--metrics-port", str(mport), "--header-timeout-s", "1",
                name="metrics-slow") as srv:
        s = socket.create_connection((HOST, mport), timeout=10)
        try:
            got, dt = _slow_headers(s, b"/metrics")
            check(got is not None and _status(got) == 408 and
                  b"header_timeout_s=1" in got,
                  "no 408 for slow headers after %.1f s: %r" % (dt, got))
        finally:
            s.close()
        s = socket.create_connection((HOST, mport), timeout=10)
        try:
            s.sendall(b"POST /metrics HTTP/1.1\r\nHost: t\r\n"
                      b"Content-Length: 1000000\r\n\r\n{")
            got = _read_until_closed(s, 5)
            check(got is not None and _status(got) == 405,
                  "an upload to metrics_port: %r" % (got and got[:200]))
        finally:
            s.close()
        expect_status(raw_exchange(mport, [_get(b"/metrics")]), 200)


@test
def liveness_on_metrics_port_through_slow_uploads():
    """With every connection of port (max_connections 8) held by a slow
    upload, a new connection to port is refused at once (503), but
    metrics_port answers the health probes: liveness 200, readiness 200
    (nothing is wrong with the server).  Before, metrics_port answered 404
    for them, and a liveness probe on port would have failed."""
    mport = free_port()
    socks = []
    with Server("--metrics-port", str(mport), "--max-connections", "8",
                "--body-min-rate-bytes-s", "0", name="slow-uploads") as srv:
        try:
            for i in range(8):
                c = socket.create_connection((HOST, srv.port), timeout=10)
                socks.append(c)
                c.sendall(b"POST /v1/attention HTTP/1.1\r\nHost: t\r\n"
                          b"Content-Type: application/json\r\n"
                          b"Content-Length: 1000000\r\n\r\n{\"query\": [")
            time.sleep(0.3)  # each upload has begun its body
            r = raw_exchange(srv.port, [_get(b"/v2/health/live")], timeout=5)
            expect_error(r, 503, "max_connections", what="port, full")
            for path, body in ((b"/v2/health/live", {"live": True}),
                               (b"/v2/health/ready", {"ready": True})):
                r = raw_exchange(mport, [_get(path)], timeout=5)
                expect_status(r, 200, "%s on metrics_port" % path.decode())
                check(json.loads(r.body) == body, "%r" % r.body)
        finally:
            for c in socks:
                c.close()


def _rss_mb(pid, field="VmRSS"):
    """The process's resident memory (VmHWM: its peak), in MB."""
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024.0
    return 0.0


def _asan_build():
    """True (and says so) for an ASan build, whose allocator keeps freed
    memory (quarantine) and ignores malloc_trim: the memory tests skip."""
    import harness
    with open(harness.cfg.attnd, "rb") as f:
        if b"__asan_init" in f.read():
            print("    skipped: AddressSanitizer's allocator keeps freed "
                  "memory (quarantine) and ignores malloc_trim")
            return True
    return False


def _burst(port, body, headers, rounds, at_once, timeout):
    """rounds of at_once POST /v1/attention of body at the same time: the
    (status, answer length) of each, and the errors."""
    import threading
    got, errors = [], []

    def one():
        try:
            r = request(port, "POST", "/v1/attention", body, headers=headers,
                        timeout=timeout)
            got.append((r.status, len(r.body)))
        except Exception as e:  # reported by the caller
            errors.append(repr(e))

    for _ in range(rounds):
        ts = [threading.Thread(target=one) for _ in range(at_once)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(timeout + 30)
    return got, errors


def _given_back(pid, base, secs):
    """After a burst: the peak RSS (VmHWM) must be 100 MB over base at
    least (or the burst showed nothing), and RSS must come back within 64
    MB of base, waiting at most secs."""
    peak = _rss_mb(pid, "VmHWM")
    check(peak > base + 100, "the burst raised RSS only from %.0f to "
          "%.0f MB: the test shows nothing" % (base, peak))
    deadline = time.monotonic() + secs
    after = _rss_mb(pid)
    while after > base + 64 and time.monotonic() < deadline:
        time.sleep(0.25)
        after = _rss_mb(pid)
    print("    RSS %.0f MB before, peak %.0f, %.0f after the burst"
          % (base, peak, after))
    check(after <= base + 64, "RSS %.0f MB %d s after the burst, more "
          "than 64 MB over the %.0f MB before it" % (after, secs, base))


@test
def memory_given_back_after_burst():
    """After a burst of large requests (four at a time, 48 MiB bodies, each
    refused by the worker's JSON parser) and a gzip bomb refused with 413,
    RSS is back within 64 MB of its level before the burst within 5 s
    (before: it stayed at the peak, 400-630 MB in the issue, though every
    block was freed).  The burst must raise the peak RSS (VmHWM) by 100 MB
    at least, or the test proves nothing and fails."""
    import gzip
    if _asan_build():
        return
    with Server("--max-body-bytes", str(64 << 20), name="memory") as srv:
        pid = srv.proc.pid
        expect_status(request(srv.port, "GET", "/v2/health/ready"), 200)
        time.sleep(2.5)
        base = _rss_mb(pid)
        junk = b" " * (48 << 20) + b"x"
        got, errors = _burst(srv.port, junk, {}, 2, 4, 60)
        codes = [st for st, _ in got]
        bomb = gzip.compress(b"\0" * (80 << 20), 1)  # inflates past 64 MiB
        r = request(srv.port, "POST", "/v1/attention", bomb,
                    headers={"Content-Encoding": "gzip"}, timeout=60)
        expect_status(r, 413, "gzip bomb")
        check(not errors and codes == [400] * 8, "burst: %r %r" %
              (codes, errors))
        _given_back(pid, base, 5)


@test
def worker_arenas_given_back_after_burst():
    """Issue 39 (6): a burst of gzip bodies that inflate to 3 MB of JSON,
    each answered with 4M attention weights (~58 MB of JSON), eight at a
    time on 4 workers.  Every block is freed, but each worker's malloc
    arena kept its free top mapped (malloc_trim gives back only the main
    arena's): RSS stayed ~130 MB above its level before.  It must come
    back within 64 MB of that level, waiting at most 15 s; the burst must
    raise the peak (VmHWM) by 100 MB at least, or the test shows
    nothing."""
    import gzip
    import random
    if _asan_build():
        return
    rng = random.Random(39)
    q = [[round(rng.uniform(-1, 1), 3) for _ in range(256)]
         for _ in range(1024)]  # self-attention: key = value = query
    body = gzip.compress(json.dumps({"query": q, "num_heads": 4}).encode(), 1)
    with Server("--workers", "4", name="arenas") as srv:
        pid = srv.proc.pid
        expect_status(request(srv.port, "GET", "/v2/health/ready"), 200)
        time.sleep(1.5)
        base = _rss_mb(pid)
        got, errors = _burst(srv.port, body, {"Content-Encoding": "gzip"}, 3,
                             8, 120)
        check(not errors and len(got) == 24 and
              all(st == 200 and n > 40e6 for st, n in got),
              "burst: %r %r" % (sorted(set(st for st, _ in got)), errors))
        _given_back(pid, base, 15)


@test
def inflate_ratio_bounds_a_compressed_body():
    """Issue 39: a gzip body of 50 KB that inflates to 50 MB of JSON
    (1000:1) was inflated and parsed whole: a 249 KB one of 250 MB took 1-2
    s of a worker's CPU, 4-9 s on a busy machine.  It is a 413 naming
    max_inflate_ratio (200 by default) the moment the inflated part passes
    200 times the body's size; a body under the ratio (random floats,
    ~3.6:1, 1.2 MB inflated) is answered, and --max-inflate-ratio 0 lifts
    the ratio (max_body_bytes still holds)."""
    import gzip
    import random
    bomb = gzip.compress(b'{"query": [[1.0]]' + b" " * (50 << 20) + b"}", 9)
    gz = {"Content-Encoding": "gzip"}
    p = shared().port
    r = request(p, "POST", "/v1/attention", bomb, headers=gz, timeout=60)
    expect_error(r, 413, "more than %d bytes, over max_inflate_ratio=200 "
                 "times its %d bytes" % (200 * len(bomb), len(bomb)),
                 what="gzip of 50 MB of blanks")
    rng = random.Random(39)
    q = [[round(rng.uniform(-1, 1), 3) for _ in range(256)]
         for _ in range(640)]
    plain = json.dumps({"query": q, "need_weights": False}).encode()
    check(len(plain) > 1 << 20, "the body under the ratio is only %d bytes"
          % len(plain))
    r = request(p, "POST", "/v1/attention", gzip.compress(plain, 9),
                headers=gz, timeout=60)
    expect_status(r, 200, "random floats, gzip")
    with Server("--max-inflate-ratio", "0", name="no-ratio") as srv:
        r = request(srv.port, "POST", "/v1/attention", bomb, headers=gz,
                    timeout=60)
        expect_status(r, 200, "the same gzip with max_inflate_ratio 0")


@test
def junk_tls_handshakes_logged_once_per_interval():
    """Issue 39: libmicrohttpd reports every failed TLS handshake, and each
    report was a warning line: 200 plain-HTTP requests to the HTTPS port
    wrote 200 lines.  Now the first is written, and the rest are counted:
    one line ATTN_LOG_REPEAT_S (10 s) later says "(N more like this
    suppressed)".  Waits (at most 30 s) until the lines account for all
    200 handshakes, then there must be at most 5."""
    import re
    import tempfile
    import harness
    needle = "received handshake message out of context"
    with tempfile.TemporaryDirectory() as d:
        f = harness.make_pki(d)
        with Server("--tls-cert-file", f("server.crt"), "--tls-key-file",
                    f("server.key"), name="tls-junk") as srv:
            for _ in range(200):
                s = socket.create_connection((HOST, srv.port), timeout=10)
                try:
                    s.sendall(_get(b"/v2/health/ready"))
                    s.recv(100)  # the server closes it
                except OSError:
                    pass
                finally:
                    s.close()
            deadline = time.monotonic() + 30
            while True:
                lines = [l["msg"] for l in srv.log_json()
                         if needle in l.get("msg", "")]
                counted = sum(int(m.group(1)) for m in (
                    re.search(r"\((\d+) more like this suppressed\)$", l)
                    for l in lines) if m)
                if (len(lines) + counted >= 200 or
                        time.monotonic() > deadline):
                    break
                time.sleep(0.25)
            print("    %d lines for 200 junk handshakes (%d counted)" %
                  (len(lines), counted))
            check(len(lines) + counted == 200, "the lines account for %d "
                  "handshakes, not 200: %r" % (len(lines) + counted,
                                               lines[:3]))
            check(len(lines) <= 5, "%d warning lines for 200 junk "
                  "handshakes: %r" % (len(lines), lines[:3]))


if __name__ == "__main__":
    sys.exit(main())
