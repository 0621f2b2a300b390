#!/usr/bin/env python3
"""Integration tests: signals, drain and shutdown (SIGTERM drains,
a second signal, SIGTERM at start-up, uploads in progress at SIGTERM,
drain_timeout_ms, shutdown_delay_ms).

Run alone: python3 tests/integration/test_lifecycle.py --attnd PATH
(the options of run.py; see harness.py and README.md).
"""

import http.client
import random
import signal
import socket
import subprocess
import sys
import time

from harness import (Failure, HOST, Pending, START_TIMEOUT_S, STOP_TIMEOUT_S,
                     Server, cfg, check, check_slow_answer, decode_v2,
                     exits_cleanly, expect_error, expect_status, half_body,
                     main, rand_f32, request, slow_request, slow_running,
                     small_v2_body, test, v1, v2_binary, wait_metric)


@test
def second_signal_during_drain():
    """A second SIGTERM or SIGINT while draining is ignored: the running
    request is still answered and attnd exits 0.  OpenBLAS starts its
    threads before main() blocks the signals for them; such a signal used
    to land in one of them and kill attnd (exit -15) with the request
    unanswered."""
    for second in (signal.SIGTERM, signal.SIGINT):
        s = Server("--workers", "1", name="twice")
        slow = None
        try:
            body, hdrs, shape = slow_request(s.port)
            slow = Pending(s.port, "/v2/models/sdpa/infer", body, hdrs)
            time.sleep(0.15)
            check(not slow.answered(), "the slow request finished before "
                  "SIGTERM")
            s.signal(signal.SIGTERM)
            time.sleep(0.1)
            s.signal(second)
            check_slow_answer(slow.response(), shape,
                              "running request after a second signal")
            rc = s.wait(STOP_TIMEOUT_S)
            check(rc == 0, "exit code %d after SIGTERM and %s: %s" %
                  (rc, second.name, s.log_tail()))
            check(s.log_text().count("draining") == 1,
                  "one drain logged: %s" % s.log_tail())
            rep = s.sanitizer_report()
            check(rep is None, "sanitizer report: %s" % rep)
        finally:
            if slow:
                slow.close()
            s.kill()
            s.cleanup()


@test
def sigterm_right_after_start():
    """SIGTERM sent the moment the start-up line appears, before main()
    reaches sigwait, is still a clean drain and exit 0.  It used to land in
    an OpenBLAS thread and kill attnd (11 of 40 starts on a 2-CPU machine,
    exit -15)."""
    for i in range(12):
        p = subprocess.Popen([cfg.attnd, "--host", HOST, "--port", "0",
                              "--models-dir", cfg.models_dir],
                             stdin=subprocess.DEVNULL,
                             stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE)
        try:
            err = b""
            deadline = time.monotonic() + START_TIMEOUT_S
            while b"listening on" not in err and time.monotonic() < deadline:
                line = p.stderr.readline()
                if not line:
                    break
                err += line
            check(b"listening on" in err, "start %d: %r" % (i, err[-300:]))
            p.send_signal(signal.SIGTERM)
            err += p.stderr.read()
            rc = p.wait(STOP_TIMEOUT_S)
            check(rc == 0 and b"bye" in err,
                  "start %d: exit code %d after an early SIGTERM: %r" %
                  (i, rc, err[-300:]))
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
            p.stderr.close()


def slow_and_queued(s, slow_id=None, queued_id=None):
    """On a server with one worker: a slow request running and a small one
    queued behind it (id "queued"), neither answered yet.  Returns the two
    Pending requests and the slow one's output shape."""
    body, hdrs, shape = slow_request(s.port)
    if slow_id:
        hdrs = dict(hdrs, **{"X-Request-Id": slow_id})
    slow = Pending(s.port, "/v2/models/sdpa/infer", body, hdrs)
    _wait_gauge(s, "attnd_workers_busy", 1)  # the slow one is running
    hdrs = {"Content-Type": "application/json"}
    if queued_id:
        hdrs["X-Request-Id"] = queued_id
    queued = Pending(s.port, "/v2/models/sdpa/infer",
                     small_v2_body(id_="queued"), hdrs)
    _wait_gauge(s, "attnd_queue_depth", 1)  # and the small one queued
    check(not slow.answered(), "the slow request finished before SIGTERM")
    return slow, queued, shape


def _wait_gauge(s, name, want, secs=10):
    """Until GET /metrics shows the gauge at want (bounded): a loaded
    machine may take longer than a fixed sleep to read a body and queue
    it."""
    wait_metric(s.port, name, want, secs)


@test
def sigterm_drains():
    s = Server("--workers", "1", name="drain")
    slow = queued = None
    try:
        slow, queued, shape = slow_and_queued(s)
        s.signal(signal.SIGTERM)
        # While draining: readiness 503, new work 503 (the slow request
        # keeps the process alive, so the server must still answer).  The
        # signal is handled on attnd's main thread, which a loaded machine
        # may run late: wait (bounded) for readiness to turn.
        try:
            deadline = time.monotonic() + 10
            while True:
                r = request(s.port, "GET", "/v2/health/ready", timeout=5)
                if r.status != 200 or time.monotonic() > deadline:
                    break
                time.sleep(0.02)
            expect_status(r, 503, "readiness during drain")
            check(r.json().get("ready") is False, "ready body %r" % r)
            r = request(s.port, "GET", "/v2/models/sdpa/ready", timeout=5)
            expect_status(r, 503, "model readiness during drain")
            r = request(s.port, "POST", "/v2/models/sdpa/infer",
                        small_v2_body(), timeout=5)
            expect_error(r, 503, what="new request during drain")
            check((r.header("Connection") or "").lower() == "close",
                  "a drain answer keeps its connection open: Connection %r"
                  % r.header("Connection"))
            r = v1(s.port, {"query": [[1, 0]]})
            expect_error(r, 503, what="new /v1 request during drain")
            live = request(s.port, "GET", "/v2/health/live", timeout=5)
            expect_status(live, 200, "liveness during drain")
        except (ConnectionRefusedError, ConnectionResetError,
                http.client.RemoteDisconnected):
            check(not s.alive(), "connection refused while the server is "
                  "still running")
        check_slow_answer(slow.response(), shape, "running request at "
                          "SIGTERM")
        j, _ = decode_v2(queued.response(), "queued request at SIGTERM")
        check(j.get("id") == "queued", "queued answer id %r" % j.get("id"))
        rc = s.wait(STOP_TIMEOUT_S)
        check(rc == 0, "exit code %d after SIGTERM: %s" % (rc, s.log_tail()))
        rep = s.sanitizer_report()
        check(rep is None, "sanitizer report: %s" % rep)
        # after exit: refused
        try:
            r = request(s.port, "GET", "/v2/health/live", timeout=5)
            check(r.status == 503, "after exit the port answered %r" % r)
        except (ConnectionRefusedError, ConnectionResetError,
                http.client.RemoteDisconnected):
            pass
    finally:
        for x in (slow, queued):
            if x is not None:
                x.close()
        s.cleanup()


def _upload(i):
    """(body, headers) of the i-th upload: a v2 sdpa request in binary,
    its numbers its own (each answer differs), about 200 KB."""
    rng = random.Random(4400 + i)
    n, d = 512, 32
    q, k, v = (rand_f32(rng, n * d) for _ in range(3))
    return v2_binary([{"name": x, "datatype": "FP32", "shape": [1, n, d],
                       "values": vals} for x, vals in
                      (("query", q), ("key", k), ("value", v))],
                     params={"binary_data_output": True})


def _start_upload(port, body, hdrs, rid):
    """A socket that sent the request's headers and the first half of its
    body (Content-Length: all of it; X-Request-Id: rid)."""
    head = ("POST /v2/models/sdpa/infer HTTP/1.1\r\nHost: t\r\n"
            "X-Request-Id: %s\r\n" % rid +
            "".join("%s: %s\r\n" % kv for kv in hdrs.items()) +
            "Content-Length: %d\r\n\r\n" % len(body)).encode()
    c = socket.create_connection((HOST, port), timeout=30)
    c.sendall(head + body[:len(body) // 2])
    return c


def _end(s, socks):
    """Close the test's sockets, then stop and remove the server."""
    for c in socks:
        c.close()
    s.kill()
    s.cleanup()


def _wait_drain(s):
    """Until readiness says 503 (the signal is handled on attnd's main
    thread, which a loaded machine may run late); bounded."""
    deadline = time.monotonic() + 10
    while request(s.port, "GET", "/v2/health/ready", timeout=5).status != 503:
        check(time.monotonic() < deadline, "readiness never turned 503")
        time.sleep(0.02)


@test
def sigterm_answers_uploads_in_progress():
    """Issue 44: requests whose body is still arriving at SIGTERM (headers
    and half the body sent, then the signal, then the rest) are read to
    their end and answered in full, each as the same request was before
    the signal, with Connection: close; a request begun after the signal
    is still refused (503); attnd exits 0 with no drain warning.  Before,
    the drain did not wait for them and closed them at exit."""
    s = Server("--drain-timeout-ms", "30000", name="uploads")
    socks = []
    try:
        ups = [_upload(i) for i in range(4)]
        refs = []
        for body, hdrs in ups:
            r = request(s.port, "POST", "/v2/models/sdpa/infer", body,
                        headers=hdrs)
            expect_status(r, 200, "an upload before the signal")
            refs.append(r.body)
        check(len(set(refs)) == len(refs), "the uploads' answers differ")
        socks = [_start_upload(s.port, b, h, "up-%d" % i)
                 for i, (b, h) in enumerate(ups)]
        # each body's Content-Length is held from its headers on: all four
        # were read before the signal
        _wait_gauge(s, "attnd_body_bytes_in_use",
                    sum(len(b) for b, _ in ups))
        s.signal(signal.SIGTERM)
        _wait_drain(s)
        r = request(s.port, "POST", "/v2/models/sdpa/infer", ups[0][0],
                    headers=ups[0][1], timeout=5)
        expect_error(r, 503, what="a request begun during the drain")
        for c, (body, _) in zip(socks, ups):
            c.sendall(body[len(body) // 2:])
        for i, c in enumerate(socks):
            r = http.client.HTTPResponse(c)
            r.begin()
            got = r.read()
            check(r.status == 200 and got == refs[i],
                  "upload %d in progress at SIGTERM: status %d, %d bytes "
                  "(want %d)" % (i, r.status, len(got), len(refs[i])))
            check((r.getheader("Connection") or "").lower() == "close",
                  "upload %d: Connection %r during the drain" %
                  (i, r.getheader("Connection")))
        rc = s.wait(STOP_TIMEOUT_S)
        check(rc == 0, "exit code %d: %s" % (rc, s.log_tail()))
        log = s.log_json()
        warned = [e["msg"] for e in log if e.get("level") == "warn" and
                  ("still" in e["msg"] or "drain_timeout_ms" in e["msg"])]
        check(not warned, "the drain ran out of time: %r" % warned)
        acc = {e.get("request_id"): e.get("status") for e in log
               if e.get("type") == "access"}
        check(all(acc.get("up-%d" % i) == 200 for i in range(4)),
              "access lines of the uploads: %r" % acc)
        rep = s.sanitizer_report()
        check(rep is None, "sanitizer report: %s" % rep)
    finally:
        _end(s, socks)


@test
def sigterm_cuts_a_stalled_upload_at_drain_timeout():
    """A body still arriving at SIGTERM is waited for up to
    drain_timeout_ms: one that completes is answered, one that stalls is
    cut when that passes (a warning counts it; access line 499,
    "closed":"shutdown"), and attnd exits 0.  A client that closed
    halfway before the signal is seen at once (499, "closed":"client";
    see client_gone_mid_body_seen_at_once)."""
    s = Server("--drain-timeout-ms", "1500", name="stalled-upload")
    socks = []
    try:
        body, hdrs = _upload(0)
        ref = request(s.port, "POST", "/v2/models/sdpa/infer", body,
                      headers=hdrs)
        expect_status(ref, 200, "the upload before the signal")
        socks = [half_body(s.port, rid) for rid in ("open", "closed")]
        socks.pop().close()
        socks.append(_start_upload(s.port, body, hdrs, "finished"))
        _wait_gauge(s, "attnd_body_bytes_in_use", 1000 + len(body))
        s.signal(signal.SIGTERM)
        _wait_drain(s)
        socks[1].sendall(body[len(body) // 2:])
        r = http.client.HTTPResponse(socks[1])
        r.begin()
        check(r.status == 200 and r.read() == ref.body,
              "the upload finished during the drain: %d" % r.status)
        rc = s.wait(STOP_TIMEOUT_S)
        check(rc == 0, "exit code %d: %s" % (rc, s.log_tail()))
        log = s.log_json()
        warned = [e["msg"] for e in log if e.get("level") == "warn" and
                  "drain_timeout_ms" in e["msg"]]
        check(len(warned) == 1 and "drain_timeout_ms=1500 passed with 1 "
              "request body still arriving" in warned[0],
              "the warning of the cut: %r" % warned)
        cut = {e.get("request_id"): (e.get("status"), e.get("closed"))
               for e in log if e.get("type") == "access" and
               e.get("request_id") in ("open", "closed", "finished")}
        check(cut == {"open": (499, "shutdown"), "closed": (499, "client"),
                      "finished": (200, None)},
              "access lines (open: cut at the bound, closed: by the "
              "client, finished: answered): %r" % cut)
    finally:
        _end(s, socks)


@test
def drain_timeout_logs_what_it_cuts():
    """When drain_timeout_ms passes before the running and queued requests
    finish, attnd exits 0 without them, and each still has its access line
    (499, "closed":"shutdown"); the warning counts them.  Before, they
    left no access line at all."""
    s = Server("--workers", "1", "--drain-timeout-ms", "200",
               name="drain-timeout")
    slow = queued = None
    try:
        slow, queued, _ = slow_and_queued(s, "cut-running", "cut-queued")
        s.signal(signal.SIGTERM)
        rc = s.wait(STOP_TIMEOUT_S)
        check(rc == 0, "exit code %d after the drain timed out: %s" %
              (rc, s.log_tail()))
        log = s.log_json()
        cut = {e.get("request_id"): (e.get("status"), e.get("closed"))
               for e in log if e.get("type") == "access"}
        want = {"cut-running": (499, "shutdown"),
                "cut-queued": (499, "shutdown")}
        check(all(cut.get(k) == v for k, v in want.items()),
              "access lines of the requests cut off: %r" % cut)
        lines = [e for e in log if e.get("type") == "access" and
                 e.get("request_id", "").startswith("cut-")]
        check(len(lines) == 2, "one line each: %r" % lines)
        warn = [e["msg"] for e in log if e.get("level") == "warn" and
                "drain_timeout_ms=200" in e.get("msg", "")]
        check(len(warn) == 1 and "2 cut off: 1 queued, 1 running" in warn[0],
              "the drain-timeout warning: %r" % warn)
        for p in (slow, queued):
            try:
                r = p.response()
                raise Failure("a request cut off at exit was answered: %r"
                              % r)
            except (ConnectionError, http.client.HTTPException, OSError):
                pass
    finally:
        for x in (slow, queued):
            if x is not None:
                x.close()
        s.cleanup()


def _wait_log(s, text, secs=10):
    deadline = time.monotonic() + secs
    while text not in s.log_text():
        check(time.monotonic() < deadline, "%s: no %r in the log: %s" %
              (s.name, text, s.log_tail()))
        check(s.alive() or text in s.log_text(), "%s exited: %s" %
              (s.name, s.log_tail()))
        time.sleep(0.02)


@test
def shutdown_delay_serves_then_drains():
    """--shutdown-delay-ms: after SIGTERM readiness (server and model) is
    503 and liveness 200, and every request sent during the delay is
    served (none refused); after the delay attnd drains and exits 0."""
    s = Server("--shutdown-delay-ms", "1500", name="shutdown-delay")
    try:
        s.signal(signal.SIGTERM)
        _wait_log(s, "readiness is 503, still serving every request for "
                     "shutdown_delay_ms=1500 ms")
        over = "shutdown delay over after 1500 ms"
        r = request(s.port, "GET", "/v2/health/ready", timeout=5)
        delayed = over not in s.log_text()
        check(not delayed or (r.status == 503 and
                              "shutting down" in r.json().get("error", "")),
              "readiness during the delay: %r" % r)
        served = 0
        while True:
            for path, body in (("/v2/health/live", None),
                               ("/v2/models/sdpa/ready", None),
                               ("/v2/models/sdpa/infer", small_v2_body()),
                               ("/v1/attention", {"query": [[1, 0]]})):
                try:
                    r = request(s.port, "POST" if body else "GET", path, body,
                                timeout=5)
                except (ConnectionRefusedError, ConnectionResetError,
                        BrokenPipeError, http.client.RemoteDisconnected):
                    r = None  # checked below unless the delay was over
                # answered before the delay was over: as it should be then
                if over in s.log_text():
                    break
                want = 503 if path.endswith("/ready") else 200
                check(r is not None and r.status == want,
                      "%s during the shutdown delay: %r" % (path, r))
                served += body is not None
            else:
                continue
            break
        check(served >= 2, "only %d inference requests were served during "
              "the delay" % served)
        exits_cleanly(s, "after the delay")
        msgs = [e.get("msg", "") for e in s.log_json()
                if e.get("type") != "access"]
        order = [i for i, m in enumerate(msgs) for k in
                 ("readiness is 503", over, "draining (up to", "; bye")
                 if k in m]
        check(len(order) == 4 and order == sorted(order),
              "the delay, then the drain, logged in order: %r" % msgs[-5:])
        codes = []  # inference answered before the delay was over
        for e in s.log_json():
            if over in e.get("msg", ""):
                break
            if e.get("path") in ("/v2/models/sdpa/infer", "/v1/attention"):
                codes.append(e.get("status"))
        check(codes and set(codes) == {200},
              "inference during the delay, as logged: %r" % codes)
    finally:
        s.cleanup()


@test
def shutdown_delay_ended_by_a_second_signal():
    """A second signal during the shutdown delay ends it early (here a
    10-minute delay): the drain that follows still answers the request
    that was running, and attnd exits 0."""
    s = Server("--workers", "1", "--shutdown-delay-ms", "600000",
               name="delay-twice")
    slow = None
    try:
        s.signal(signal.SIGTERM)
        _wait_log(s, "readiness is 503")
        # sent during the delay: accepted and computed
        slow, shape = slow_running(s)
        s.signal(signal.SIGINT)
        check_slow_answer(slow.response(), shape,
                          "request running when the delay was cut short")
        exits_cleanly(s, "after SIGTERM and SIGINT")
        log = s.log_text()
        check("received SIGINT during the shutdown delay: ending it" in log
              and "draining (up to" in log and "shutdown delay over" not in
              log, "log: %s" % s.log_tail(4))
    finally:
        if slow:
            slow.close()
        s.cleanup()


if __name__ == "__main__":
    sys.exit(main())
