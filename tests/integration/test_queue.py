#!/usr/bin/env python3
"""Integration tests: the queue and the workers (health while the
workers are busy, a full queue, queue_timeout_ms, concurrent requests,
clients gone while their request waits or runs).

Run alone: python3 tests/integration/test_queue.py --attnd PATH
(the options of run.py; see harness.py and README.md).
"""

import http.client
import json
import random
import re
import socket
import sys
import threading
import time

from harness import (HOST, HTTP_TIMEOUT_S, Pending, Server, cfg, check,
                     check_slow_answer, decode_v2, expect_error, expect_status,
                     main, metric, request, shared, slow_request,
                     small_v2_body, test, v2_in, v2_infer, v2_sdpa_case,
                     wait_metric)


@test
def health_while_workers_busy():
    with Server("--workers", "1", name="busy") as s:
        body, hdrs, shape = slow_request(s.port)
        slow = Pending(s.port, "/v2/models/sdpa/infer", body, hdrs)
        try:
            time.sleep(0.2)  # read and handed to the only worker
            check(not slow.answered(), "the slow request finished too soon "
                  "for this test")
            for path in ("/v2/health/ready", "/v2/health/live",
                         "/v2/models/sdpa", "/v2/models/demo/ready", "/v2"):
                r = request(s.port, "GET", path, timeout=5)
                expect_status(r, 200, "GET %s while busy" % path)
            check(not slow.answered(), "health and metadata did not answer "
                  "before the slow request completed")
            check_slow_answer(slow.response(), shape, "slow request")
        finally:
            slow.close()


@test
def error_503_queue_full():
    with Server("--workers", "1", "--queue-capacity", "1",
                name="queue-full") as s:
        body, hdrs, shape = slow_request(s.port)
        pend = []
        try:
            pend.append(Pending(s.port, "/v2/models/sdpa/infer", body, hdrs))
            time.sleep(0.3)  # the first is (normally) running by now
            for _ in range(4):
                pend.append(Pending(s.port, "/v2/models/sdpa/infer", body,
                                    hdrs))
            resps = [x.response() for x in pend]
        finally:
            for x in pend:
                x.close()
        # The first found an empty server, so it must get 200.  Of the four
        # sent while it runs, normally one is queued (200) and three are
        # refused; which one depends on which HTTP thread reads its body
        # first, and on a loaded machine the worker may not even have taken
        # the first yet, so only "some 503, the rest 200" is certain.
        codes = [r.status for r in resps]
        detail = [(r.status, r.body[:80]) for r in resps]
        check(codes.count(503) >= 1, "no 503 from a full queue: %r" % detail)
        check(all(c in (200, 503) for c in codes), "codes %r" % detail)
        check(codes[0] == 200, "the first request must get 200: %r" % detail)
        for r in resps:
            if r.status == 503:
                expect_error(r, 503, "queue", what="queue full")
                ra = r.header("retry-after")
                check(ra is not None and ra.isdigit() and int(ra) > 0,
                      "503 Retry-After %r" % ra)
            else:
                check_slow_answer(r, shape, "request beside a full queue")
        expect_status(request(s.port, "GET", "/v2/health/ready"), 200,
                      "ready after 503s")


@test
def error_503_queue_timeout_while_busy():
    """queue_timeout_ms: a request that waits longer is answered 503 when its
    time is up, while the only worker is still busy with a slow one (the
    slow one's answer comes after), and its log line says 503."""
    # one engine thread: the slow request is as slow as it gets here
    with Server("--workers", "1", "--queue-capacity", "4",
                "--blas-threads-per-worker", "1",
                "--queue-timeout-ms", "100", name="queue-timeout") as s:
        body, hdrs, shape = slow_request(s.port)
        slow = Pending(s.port, "/v2/models/sdpa/infer", body, hdrs)
        late = None
        try:
            time.sleep(0.2)  # the slow one is (normally) running by now
            late = Pending(s.port, "/v1/attention",
                           json.dumps({"query": [[1, 0]]}).encode(),
                           {"Content-Type": "application/json"})
            r = late.response()
            # Order, not time: the timed-out request was answered while the
            # slow request still computes.
            check(not slow.answered(), "the 503 came only after the slow "
                  "request finished")
            expect_error(r, 503, "queue_timeout_ms=100", what="queue timeout")
            check_slow_answer(slow.response(), shape, "slow request")
        finally:
            slow.close()
            if late:
                late.close()
        log = s.log_text()
        check(re.search(r'"path":"/v1/attention","status":503', log) or
              re.search(r'"status":503', log), "no 503 access line")


@test
def concurrent_requests_all_answered():
    p = shared().port
    rng = random.Random(cfg.seed + 40)
    q, k, v = v2_sdpa_case(rng)
    ins = [v2_in("query", [2, 3, 4], q), v2_in("key", [2, 5, 4], k),
           v2_in("value", [2, 5, 3], v)]
    ref = v2_infer(p, "sdpa", ins)
    decode_v2(ref, "reference")
    results = [None] * 16
    errors = []

    def worker(i):
        try:
            results[i] = v2_infer(p, "sdpa", ins)
        except Exception as e:  # reported below
            errors.append("%d: %r" % (i, e))

    th = [threading.Thread(target=worker, args=(i,), daemon=True)
          for i in range(len(results))]
    for t in th:
        t.start()
    for t in th:
        t.join(HTTP_TIMEOUT_S)
    check(not errors, "errors: %s" % errors)
    for i, r in enumerate(results):
        check(r is not None, "request %d did not finish" % i)
        check(r.status == 200 and r.body == ref.body,
              "request %d: %r differs from the sequential answer" % (i, r))


@test
def client_gone_while_queued_or_running():
    """Clients that hang up while their request waits or runs must not
    disturb the server (an ASan build checks the memory side)."""
    with Server("--workers", "1", name="gone") as s:
        body, hdrs, shape = slow_request(s.port)
        head = ("POST /v2/models/sdpa/infer HTTP/1.1\r\nHost: x\r\n"
                "Content-Type: application/octet-stream\r\n"
                "Inference-Header-Content-Length: %s\r\n"
                "Content-Length: %d\r\n\r\n" %
                (hdrs["Inference-Header-Content-Length"], len(body))).encode()
        gone = []
        keep = None
        try:
            for _ in range(2):  # the first runs, the second waits
                c = socket.create_connection((HOST, s.port), timeout=10)
                c.sendall(head + body)
                gone.append(c)
                time.sleep(0.1)
            keep = Pending(s.port, "/v2/models/sdpa/infer", small_v2_body(),
                           {"Content-Type": "application/json"})
            for c in gone:
                c.close()
            gone = []
            r = keep.response()
            decode_v2(r, "request queued behind abandoned ones")
        finally:
            for c in gone:
                c.close()
            if keep is not None:
                keep.close()
        expect_status(request(s.port, "GET", "/v2/health/ready"), 200,
                      "ready after abandoned requests")
        decode_v2(request(s.port, "POST", "/v2/models/sdpa/infer",
                          small_v2_body()), "infer after abandoned requests")


def raw_head(body, hdrs, request_id):
    """The request line and headers of a v2 infer request of body."""
    return ("POST /v2/models/sdpa/infer HTTP/1.1\r\nHost: x\r\n"
            "X-Request-Id: %s\r\n" % request_id +
            "".join("%s: %s\r\n" % kv for kv in hdrs.items()) +
            "Content-Length: %d\r\n\r\n" % len(body)).encode()


def raw_infer(port, body, hdrs, request_id):
    """A socket that sent a whole v2 infer request (with X-Request-Id);
    the caller reads or closes it."""
    c = socket.create_connection((HOST, port), timeout=HTTP_TIMEOUT_S)
    c.sendall(raw_head(body, hdrs, request_id) + body)
    return c


@test
def client_gone_while_queued_is_not_computed():
    """Issue 44: three large requests queued behind a running one whose
    clients close before a worker takes them are dropped, not computed:
    the compute counter grows by the two requests whose clients stayed
    (the running one, which finishes although its own client left too,
    and a small one queued behind the dropped ones, answered as a fresh
    copy of it is; and one that half-closed, shutdown(SHUT_WR), right
    after sending its request: still waiting for its answer, which it
    gets), attnd_http_requests_total counts three 499s, each has
    an access line 499 "closed":"dropped_queued" with no compute time,
    and the queue gauges come back to 0."""
    with Server("--workers", "1", name="dropped") as s:
        body, hdrs, _ = slow_request(s.port)
        count = "attnd_compute_duration_seconds_count"
        c0 = metric(s.port, count)
        gone0 = metric(s.port, "attnd_http_requests_total", code=499)
        socks, live, half = [], None, None
        try:
            socks.append(raw_infer(s.port, body, hdrs, "running-left"))
            wait_metric(s.port, "attnd_workers_busy", 1)
            for i in range(3):
                socks.append(raw_infer(s.port, body, hdrs, "left-%d" % i))
            wait_metric(s.port, "attnd_queue_depth", 3)
            half = raw_infer(s.port, small_v2_body(id_="half"),
                             {"Content-Type": "application/json"}, "half")
            half.shutdown(socket.SHUT_WR)
            wait_metric(s.port, "attnd_queue_depth", 4)
            live = Pending(s.port, "/v2/models/sdpa/infer",
                           small_v2_body(id_="live"),
                           {"Content-Type": "application/json",
                            "X-Request-Id": "live"})
            wait_metric(s.port, "attnd_queue_depth", 5)
            # the clients leave well after their last byte (a FIN right
            # after it is a half-close, still answered: test_http.py)
            time.sleep(0.3)
            for c in socks:
                c.close()
            socks = []
            check(metric(s.port, count) == c0 and
                  metric(s.port, "attnd_queue_depth") == 5,
                  "the running request finished before the queued clients "
                  "left: this test needs it to run longer")
            r = live.response()
            j, outs = decode_v2(r, "request queued behind dropped ones")
            check(j.get("id") == "live", "answer id %r" % j.get("id"))
            again = request(s.port, "POST", "/v2/models/sdpa/infer",
                            small_v2_body(id_="live"))
            check(again.status == 200 and again.body == r.body,
                  "the live answer %r differs from a fresh one %r" %
                  (r.body, again.body))
            hr = http.client.HTTPResponse(half)
            hr.begin()
            check(hr.status == 200 and hr.read() == r.body.replace(
                b'"live"', b'"half"'), "the half-closed client's answer")
            wait_metric(s.port, "attnd_http_requests_total", gone0 + 3,
                        code=499)
            # running-left, half, live, again: none of the three dropped
            wait_metric(s.port, count, c0 + 4)
            wait_metric(s.port, "attnd_queue_depth", 0)
            wait_metric(s.port, "attnd_workers_busy", 0)
            log = s.log_json()
            acc = {e.get("request_id"): e for e in log
                   if e.get("type") == "access"}
            for i in range(3):
                e = acc.get("left-%d" % i, {})
                check(e.get("status") == 499 and
                      e.get("closed") == "dropped_queued" and
                      not e.get("compute_ms") and e.get("queue_ms", 0) > 0,
                      "access line of a dropped request: %r" % e)
            e = acc.get("running-left", {})
            check(e.get("status") == 200 and e.get("compute_ms", 0) > 0,
                  "a running request whose client left finishes as before: "
                  "%r" % e)
            for rid in ("live", "half"):
                check(acc.get(rid, {}).get("status") == 200 and
                      "closed" not in acc[rid], "%s: %r" % (rid, acc.get(rid)))
            check(metric(s.port, count) == c0 + 4,
                  "a dropped request was computed after all")
        finally:
            for c in socks:
                c.close()
            for x in (live, half):
                if x is not None:
                    x.close()


def _responses(data):
    """The HTTP/1.1 responses, each with a Content-Length, in data: a list
    of (status, headers lower-cased, body)."""
    out = []
    while data:
        head, _, rest = data.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        hdrs = dict((k.strip().lower(), v.strip()) for k, v in
                    (x.split(":", 1) for x in lines[1:]))
        n = int(hdrs.get("content-length", 0))
        out.append((int(lines[0].split()[1]), hdrs, rest[:n]))
        data = rest[n:]
    return out


@test
def pipelined_then_half_closed_is_answered():
    """A client that pipelines a slow request and a small one on one
    connection and half-closes right after sending both is still
    waiting for both answers: the second is queued only once the first's
    answer is sent, whose acknowledgements come after the client's FIN,
    so the FIN's time is unknown and the client is not taken for gone.
    Both answers arrive (the second as a fresh copy of it is), neither
    is a 499."""
    with Server("--workers", "1", name="pipelined") as s:
        body, hdrs, shape = slow_request(s.port)
        small = small_v2_body(id_="second")
        ref = request(s.port, "POST", "/v2/models/sdpa/infer", small)
        expect_status(ref, 200, "the small request alone")
        c = socket.create_connection((HOST, s.port), timeout=120)
        try:
            c.sendall(raw_head(body, hdrs, "first") + body +
                      raw_head(small, {"Content-Type": "application/json"},
                               "second") + small)
            c.shutdown(socket.SHUT_WR)
            data = b""
            while True:
                chunk = c.recv(1 << 20)
                if not chunk:
                    break
                data += chunk
        finally:
            c.close()
        got = _responses(data)
        check([g[0] for g in got] == [200, 200],
              "statuses of the two pipelined requests: %r" %
              [(g[0], g[2][:120]) for g in got])
        check(got[1][2] == ref.body, "the second answer %r, alone %r" %
              (got[1][2], ref.body))
        acc = {e.get("request_id"): e.get("status") for e in s.log_json()
               if e.get("type") == "access"}
        check(acc.get("first") == 200 and acc.get("second") == 200,
              "access lines: %r" % acc)


if __name__ == "__main__":
    sys.exit(main())
