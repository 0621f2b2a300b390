#!/usr/bin/env python3
"""Integration tests: GET /metrics (Prometheus text), metrics_port and
Triton's statistics extension (GET /v2/models[/{m}]/stats).

The outcome test sends requests of each outcome attnd can be made to give
from outside (success, invalid, too_large, rejected, timeout, draining)
and checks that every series moves by exactly what those requests
explain, and that the histograms' sums are the access log's times.
"internal" cannot be provoked from outside: attnd answers 500 only for an
inconsistency between its own layers, and its other "internal" cause is
an allocation failing inside a worker.

Scrapes go to metrics_port, whose requests are not counted, so that a
scrape does not move what it reads.

Run alone: python3 tests/integration/test_metrics.py --attnd PATH
(the options of run.py; see harness.py and README.md).
"""

import json
import re
import shutil
import signal
import socket
import subprocess
import time

from harness import (HOST, Pending, Server, check, free_port, main,
                     raw_exchange, request, shared, slow_running,
                     small_v2_body, test, to_json_bytes, v2_in)
import harness
from tritonclient_imitation import TcClient, TcError

SETTLE_S = 10.0  # longest wait for a request's on_completed to be counted

_SERIES = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)$')
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse(text):
    """{(name, ((label, value), ...)): float} of a text exposition."""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = _SERIES.match(line)
        check(m, "not a series line: %r" % line)
        labels = tuple(sorted(_LABEL.findall(m.group(3) or "")))
        key = (m.group(1), labels)
        check(key not in out, "series twice: %r" % line)
        out[key] = float(m.group(4))
    return out


def scrape(port):
    r = request(port, "GET", "/metrics")
    check(r.status == 200, "GET /metrics: %r" % r)
    ct = r.header("content-type") or ""
    check(ct.startswith("text/plain; version=0.0.4"),
          "Content-Type %r" % ct)
    return parse(r.body.decode())


def key(name, **labels):
    return (name, tuple(sorted(labels.items())))


def moved(before, after):
    """The series whose value changed, and by how much; gauges, build_info
    and process_* left out."""
    skip = ("attnd_queue_depth", "attnd_workers_busy", "attnd_connections",
            "attnd_body_bytes_in_use", "attnd_ready", "process_")
    out = {}
    for k, v in after.items():
        if k[0].startswith(skip):
            continue
        d = v - before.get(k, 0.0)
        if d:
            out[k] = d
    return out


class Expect:
    """What a set of requests must move: counts exactly, sums (seconds)
    from the access log's times."""

    def __init__(self):
        self.counts = {}
        self.sums = {}
        self.n = 0  # requests

    def add(self, k, v):
        self.counts[k] = self.counts.get(k, 0) + v

    def add_sum(self, k, ms):
        self.sums[k] = self.sums.get(k, 0.0) + ms / 1000.0

    def request(self, route, method, code, bytes_in, bytes_out):
        self.n += 1
        self.add(key("attnd_http_requests_total", route=route, method=method,
                     code=str(code)), 1)
        self.add(key("attnd_request_bytes_total"), bytes_in)
        self.add(key("attnd_response_bytes_total"), bytes_out)

    def inference(self, line, model, proto, outcome, queued, computed,
                  tokens=None, flops=0):
        self.add(key("attnd_inference_requests_total", model=model,
                     protocol=proto, outcome=outcome), 1)
        hist = [("attnd_request_duration_seconds",
                 {"model": model, "protocol": proto}, line["total_ms"])]
        if queued:
            hist.append(("attnd_queue_duration_seconds", {"model": model},
                         line["queue_ms"]))
        if computed:
            hist.append(("attnd_compute_duration_seconds", {"model": model},
                         line["compute_ms"]))
        for name, labels, ms in hist:
            self.add(key(name + "_count", **labels), 1)
            self.add(key(name + "_bucket", le="+Inf", **labels), 1)
            self.add_sum(key(name + "_sum", **labels), ms)
        if tokens is not None:
            self.add(key("attnd_query_tokens_count", model=model), 1)
            self.add(key("attnd_query_tokens_bucket", model=model, le="+Inf"),
                     1)
            self.add(key("attnd_query_tokens_sum", model=model), tokens)
        if flops:
            self.add(key("attnd_attention_flops_total", model=model), flops)


def settle(mport, before, n):
    """Scrape until the HTTP counters have moved by n requests (each is
    counted when libmicrohttpd is done with it, just after the client has
    its answer); bounded by SETTLE_S."""
    deadline = time.monotonic() + SETTLE_S
    while True:
        after = scrape(mport)
        got = sum(v for k, v in moved(before, after).items()
                  if k[0] == "attnd_http_requests_total")
        if got >= n or time.monotonic() > deadline:
            check(got == n, "requests counted: %d, expected %d" % (got, n))
            return after


def verify(before, after, exp, log_lines):
    """Every moved series is explained by exp and every one of exp moved
    as it says; sums agree with the access log to its precision (3
    decimals of ms: 0.5 us per line, and the metrics' ns)."""
    d = moved(before, after)
    for k, v in d.items():
        name = k[0]
        if name.endswith("_bucket") and dict(k[1]).get("le") != "+Inf":
            continue  # a finite bucket moves by at most its +Inf's
        if name.endswith("_sum") and k in exp.sums:
            continue
        check(k in exp.counts, "series moved unexplained: %r by %r" % (k, v))
    for k, v in exp.counts.items():
        check(d.get(k, 0) == v, "%r moved by %r, expected %r" %
              (k, d.get(k, 0), v))
    for k, s in exp.sums.items():
        tol = 0.5e-6 * len(log_lines) + 1e-9
        check(abs(d.get(k, 0.0) - s) <= tol,
              "%r moved by %.9f s, the access log says %.9f s" %
              (k, d.get(k, 0.0), s))
    # the finite buckets: cumulative, never above the +Inf one
    for k, v in after.items():
        if k[0].endswith("_bucket"):
            labels = dict(k[1])
            le = labels.pop("le")
            inf = after[key(k[0], le="+Inf", **labels)]
            check(v <= inf, "%r = %r above +Inf %r" % (k, v, inf))


def access_lines(s, ids):
    """The access lines of the requests with these X-Request-Ids."""
    got = {}
    for l in s.log_json():
        if l.get("type") == "access" and l.get("request_id") in ids:
            got[l["request_id"]] = l
    return got


def sdpa_flops(B, H, Lq, Lk, Dk, Dv):
    return 2 * B * H * Lq * Lk * (Dk + Dv)


def post(port, path, body, rid, ctype="application/json", headers=None):
    h = {"X-Request-Id": rid}
    h.update(headers or {})
    return request(port, "POST", path, body, headers=h, ctype=ctype)


@test
def metrics_promtool_clean():
    """`promtool check metrics` (Debian's prometheus package; installed by
    scripts/install-deps.sh --test) finds nothing, on a server that has
    served every kind of request."""
    promtool = shutil.which("promtool")
    if not promtool:
        print("skipped: metrics_promtool_clean: promtool is not installed "
              "(apt-get install prometheus)")
        return
    p = shared().port
    request(p, "POST", "/v1/attention", {"query": [[1, 0], [0, 1]]})
    request(p, "POST", "/v1/attention", b"{")
    request(p, "POST", "/v2/models/sdpa/infer", small_v2_body())
    request(p, "GET", "/v2/models/nosuch/stats")
    request(p, "GET", "/no/such/path")
    r = request(p, "GET", "/metrics")
    check(r.status == 200, "GET /metrics: %r" % r)
    run = subprocess.run([promtool, "check", "metrics"], input=r.body,
                         capture_output=True, timeout=60)
    check(run.returncode == 0 and not run.stdout.strip() and
          not run.stderr.strip(),
          "promtool check metrics: rc=%d %r %r" %
          (run.returncode, run.stdout[-500:], run.stderr[-500:]))
    names = set(k[0] for k in parse(r.body.decode()))
    for n in ("attnd_auth_failures_total", "attnd_queue_capacity",
              "attnd_workers", "attnd_body_bytes_limit",
              "attnd_connections_open", "attnd_ready", "attnd_build_info",
              "attnd_request_bytes_total", "attnd_response_bytes_total",
              "attnd_queue_depth", "attnd_workers_busy",
              "attnd_body_bytes_in_use",
              "process_cpu_seconds_total", "process_resident_memory_bytes",
              "process_virtual_memory_bytes", "process_open_fds",
              "process_max_fds", "process_start_time_seconds"):
        check(n in names, "no %s in /metrics" % n)


@test
def metrics_every_outcome_moves_exactly():
    mport = free_port()
    with Server("--workers", "1", "--queue-capacity", "1",
                "--blas-threads-per-worker", "1", "--queue-timeout-ms", "300",
                "--metrics-port", str(mport), name="metrics") as s:
        p = s.port
        # the slow request is measured once per run, with a request here
        made = 1 if harness._slow_dims is None else 0
        slow, _ = slow_running(s)
        slow.response()
        before = settle(mport, {}, made + 1)
        exp = Expect()
        ids = {}

        def done(rid, r, route, method, bytes_in, *inf, **kw):
            ids[rid] = (r, route, method, bytes_in, inf, kw)

        # success: /v1 (sdpa, Lq 2), v2 JSON (sdpa, Lq 2)
        b = to_json_bytes({"query": [[1, 0], [0, 1]]})
        done("ok-v1", post(p, "/v1/attention", b, "ok-v1"), "/v1/attention",
             "POST", len(b), "sdpa", "v1", "success", True, True, tokens=2,
             flops=sdpa_flops(1, 1, 2, 2, 2, 2))
        b = small_v2_body()
        done("ok-v2", post(p, "/v2/models/sdpa/infer", b, "ok-v2"),
             "/v2/models/{model}/infer", "POST", len(b), "sdpa", "v2",
             "success", True, True, tokens=2,
             flops=sdpa_flops(1, 1, 2, 2, 2, 2))
        # invalid: malformed /v1 (model not known), a v2 shape the model
        # refuses (it ran), an unknown model in the URL (refused at once)
        done("bad-v1", post(p, "/v1/attention", b"{", "bad-v1"),
             "/v1/attention", "POST", 1, "", "v1", "invalid", True, False)
        b = to_json_bytes({"inputs": [v2_in("query", [2, 2], [1, 0, 0, 1]),
                                      v2_in("key", [3, 3], [0] * 9),
                                      v2_in("value", [2, 2], [1, 2, 3, 4])]})
        done("bad-v2", post(p, "/v2/models/sdpa/infer", b, "bad-v2"),
             "/v2/models/{model}/infer", "POST", len(b), "sdpa", "v2",
             "invalid", True, True)
        b = small_v2_body()
        done("bad-model", post(p, "/v2/models/nosuch/infer", b, "bad-model"),
             "/v2/models/{model}/infer", "POST", len(b), "", "v2", "invalid",
             False, False)
        # too_large: a Content-Length past max_body_bytes, refused unread
        r = raw_exchange(p, [b"POST /v2/models/demo/infer HTTP/1.1\r\n"
                             b"Host: t\r\nX-Request-Id: big\r\n"
                             b"Content-Type: application/json\r\n"
                             b"Content-Length: 99999999999\r\n\r\n"])
        done("big", r, "/v2/models/{model}/infer", "POST", 0, "demo", "v2",
             "too_large", False, False)
        # not inference: a GET, a 404 path, the statistics
        done("get", request(p, "GET", "/v2/models/mha",
                            headers={"X-Request-Id": "get"}),
             "/v2/models/{model}", "GET", 0)
        done("nope", request(p, "GET", "/x/y",
                             headers={"X-Request-Id": "nope"}),
             "other", "GET", 0)
        # rejected and timeout: behind a slow request on the only worker,
        # one waits in the queue (capacity 1) until queue_timeout_ms, the
        # next finds the queue full.  Which is which is the server's to
        # say (a loaded machine may reorder them): each answer tells.
        slow, _ = slow_running(s)
        b = small_v2_body()
        waits = Pending(p, "/v2/models/mha/infer", b,
                        {"Content-Type": "application/json",
                         "X-Request-Id": "wait"})
        time.sleep(0.05)
        full = post(p, "/v2/models/mha/infer", b, "full")
        for rid, r in (("full", full), ("wait", waits.response())):
            check(r.status == 503, "%s: %r" % (rid, r))
            if b"queue_timeout_ms" in r.body:
                done(rid, r, "/v2/models/{model}/infer", "POST", len(b),
                     "mha", "v2", "timeout", True, False)
            else:
                check(b"queue full" in r.body, "%s: %r" % (rid, r))
                done(rid, r, "/v2/models/{model}/infer", "POST", len(b),
                     "mha", "v2", "rejected", False, False)
        slow_r = slow.response()
        check(slow_r.status == 200, "slow: %r" % slow_r)
        # (the slow requests are counted too; their X-Request-Ids are
        # PREFIX-N, made up by attnd: read from the log below)
        expect(s, mport, before, exp, ids)


def expect(s, mport, before, exp, ids):
    """Add the slow requests (found in the log) to exp, then check."""
    after = settle(mport, before, len(ids) + 1)
    lines = access_lines(s, set(ids))
    check(len(lines) == len(ids), "access lines %d of %d" %
          (len(lines), len(ids)))
    for rid, (r, route, method, bytes_in, inf, kw) in ids.items():
        line = lines[rid]
        check(line["status"] == r.status, "%s: status %r vs %r" %
              (rid, line["status"], r.status))
        exp.request(route, method, r.status, bytes_in, len(r.body))
        if inf:
            exp.inference(line, *inf, **kw)
    slow = [l for l in s.log_json() if l.get("type") == "access" and
            l.get("path") == "/v2/models/sdpa/infer" and
            re.match(r"[0-9a-f]{8}-[0-9]+$", l.get("request_id", ""))][-1:]
    check(len(slow) == 1, "the slow request's access line")
    n_slow = slow[0]
    exp.request("/v2/models/{model}/infer", "POST", 200, n_slow["bytes_in"],
                n_slow["bytes_out"])
    shape_tokens = None
    exp.inference(n_slow, "sdpa", "v2", "success", True, True,
                  tokens=shape_tokens)
    d = moved(before, after)
    # the slow request's tokens and flops: its shape is the harness's
    tk = key("attnd_query_tokens_sum", model="sdpa")
    fk = key("attnd_attention_flops_total", model="sdpa")
    exp.add(key("attnd_query_tokens_count", model="sdpa"), 1)
    exp.add(key("attnd_query_tokens_bucket", model="sdpa", le="+Inf"), 1)
    n, heads = harness._slow_dims
    SLOW_D = harness.SLOW_D
    exp.add(tk, n)
    exp.add(fk, sdpa_flops(1, heads, n, n, SLOW_D, SLOW_D))
    verify(before, after, exp, list(lines.values()) + slow)
    check(d.get(tk, 0) > 0, "tokens moved")


@test
def metrics_draining_outcome():
    """A request refused because attnd is draining counts as draining; a
    scrape on metrics_port still answers while the drain waits."""
    mport = free_port()
    with Server("--workers", "1", "--metrics-port", str(mport),
                name="metrics-drain") as s:
        p = s.port
        slow, _ = slow_running(s)
        slow.response()
        slow, _ = slow_running(s)
        before = scrape(mport)
        s.signal(signal.SIGTERM)
        time.sleep(0.2)  # main has taken the signal and begun the drain
        deadline = time.monotonic() + 5
        while True:
            r = request(p, "POST", "/v1/attention", {"query": [[1.0]]},
                        headers={"X-Request-Id": "late"})
            if r.status == 503 or time.monotonic() > deadline:
                break
            time.sleep(0.02)
        check(r.status == 503 and b"shutting down" in r.body,
              "while draining: %r" % r)
        after = scrape(mport)
        deadline = time.monotonic() + SETTLE_S
        k = key("attnd_inference_requests_total", model="", protocol="v1",
                outcome="draining")
        while after.get(k, 0) - before.get(k, 0) < 1 and \
                time.monotonic() < deadline:
            time.sleep(0.02)
            after = scrape(mport)
        d = moved(before, after)
        check(d.get(k) == 1, "draining moved by %r: %r" % (d.get(k), d))
        check(after[key("attnd_ready")] == 0, "attnd_ready while draining")
        slow.response()
        rc = s.wait(30)
        check(rc == 0, "exit code %r" % rc)


@test
def metrics_port_serves_metrics_and_health():
    """metrics_port serves GET /metrics and the health routes, with the
    main port's answers (readiness 503 from SIGTERM on, see
    metrics_port_readiness_follows_shutdown), and a 404 or 405 for the
    rest; a request with a body is answered before it and closed."""
    mport = free_port()
    with Server("--metrics-port", str(mport), name="metrics-port") as s:
        check(("metrics on 127.0.0.1:%d" % mport) in s.log_text(),
              "start-up line for metrics_port")
        for path in ("/v2/health/live", "/v2/health/ready"):
            a, b = request(mport, "GET", path), request(s.port, "GET", path)
            check(a.status == b.status == 200 and a.json() == b.json(),
                  "%s: metrics_port %r, port %r" % (path, a, b))
            h = request(mport, "HEAD", path)
            check(h.status == 200 and h.body == b"", "HEAD %s: %r" % (path, h))
        for path in ("/v2/models/sdpa", "/v2/health", "/"):
            r = request(mport, "GET", path)
            check(r.status == 404 and b"only GET /metrics" in r.body and
                  b"/v2/health/live" in r.body, "%s: %r" % (path, r))
        for path in ("/metrics", "/v2/health/live"):
            r = request(mport, "POST", path, b"x")
            check(r.status == 405 and r.header("allow") == "GET, HEAD",
                  "POST %s: %r" % (path, r))
            check(r.header("connection") == "close", "POST %s kept the "
                  "connection with its body unread: %r" % (path, r.headers))
        a = scrape(mport)
        b = scrape(s.port)  # the main port serves it too
        check(key("attnd_ready") in a and key("attnd_ready") in b,
              "both ports")
        # scrapes on metrics_port are not counted, on port they are
        c = scrape(mport)
        k = key("attnd_http_requests_total", route="/metrics", method="GET",
                code="200")
        check(c.get(k, 0) <= 1, "metrics_port scrapes counted: %r" % c.get(k))


@test
def metrics_port_readiness_follows_shutdown():
    """Readiness on metrics_port turns 503 (with Retry-After) from the
    first moment of SIGTERM, as on port, while liveness stays 200."""
    mport = free_port()
    with Server("--metrics-port", str(mport), "--shutdown-delay-ms", "3000",
                name="metrics-port-ready") as s:
        check(request(mport, "GET", "/v2/health/ready").status == 200,
              "ready before SIGTERM")
        s.signal(signal.SIGTERM)
        deadline = time.monotonic() + 5
        while True:
            r = request(mport, "GET", "/v2/health/ready")
            if r.status != 200 or time.monotonic() > deadline:
                break
            time.sleep(0.02)
        check(r.status == 503 and r.header("retry-after") == "1" and
              r.json()["ready"] is False, "after SIGTERM: %r" % r)
        check(request(mport, "GET", "/v2/health/live").status == 200,
              "liveness during the shutdown delay")
        rc = s.wait(30)
        check(rc == 0, "exit code %r" % rc)


@test
def metrics_port_in_use_stops_startup():
    s = socket.socket()
    s.bind((HOST, 0))
    s.listen(1)
    try:
        port = s.getsockname()[1]
        from harness import run_attnd, cfg
        rc, _, err = run_attnd("--host", HOST, "--port", "0",
                               "--models-dir", cfg.models_dir,
                               "--metrics-port", str(port))
        check(rc != 0 and "metrics_port" in err, "rc=%r %r" % (rc, err[-300:]))
    finally:
        s.close()


@test
def metrics_port_same_as_port_refused():
    from harness import run_attnd, cfg
    port = free_port()
    rc, _, err = run_attnd("--host", HOST, "--port", str(port),
                           "--models-dir", cfg.models_dir,
                           "--metrics-port", str(port))
    check(rc != 0 and "metrics_port=%d is port" % port in err,
          "rc=%r %r" % (rc, err[-300:]))


@test
def statistics_triton_shape():
    """tritonclient's get_inference_statistics: the shape and the counts
    of a fresh server's requests."""
    with Server(name="stats") as s:
        p = s.port
        for _ in range(3):
            r = request(p, "POST", "/v2/models/sdpa/infer", small_v2_body())
            check(r.status == 200, "%r" % r)
        r = request(p, "POST", "/v2/models/sdpa/infer", b"{")
        check(r.status == 400, "%r" % r)
        deadline = time.monotonic() + SETTLE_S
        with TcClient(p) as tc:
            while True:
                st = tc.get_inference_statistics("sdpa")
                one = st["model_stats"][0]["inference_stats"]
                if one["fail"]["count"] == 1 and \
                        one["success"]["count"] == 3 or \
                        time.monotonic() > deadline:
                    break
                time.sleep(0.02)
            check([m["name"] for m in st["model_stats"]] == ["sdpa"],
                  "one model: %r" % st)
            m = st["model_stats"][0]
            check(m["version"] == "1" and m["inference_count"] == 3 and
                  m["execution_count"] == 3, "%r" % m)
            check(m["last_inference"] > (time.time() - 60) * 1000 and
                  m["last_inference"] <= time.time() * 1000 + 1000,
                  "last_inference %r" % m["last_inference"])
            i = m["inference_stats"]
            for k in ("success", "queue", "compute_input", "compute_infer",
                      "compute_output"):
                check(i[k]["count"] == 3 and i[k]["ns"] > 0, "%s %r" % (k, i))
            check(i["fail"]["count"] == 1 and i["fail"]["ns"] > 0, "%r" % i)
            check(i["success"]["ns"] > i["compute_infer"]["ns"], "%r" % i)
            allm = tc.get_inference_statistics()
            names = [m["name"] for m in allm["model_stats"]]
            check(names[:2] == ["sdpa", "mha"] and "demo" in names,
                  "all models: %r" % names)
            check(allm["model_stats"][1]["inference_stats"]["success"] ==
                  {"count": 0, "ns": 0}, "mha untouched")
            v = tc.get_inference_statistics("sdpa", "1")
            check(v["model_stats"][0]["inference_count"] == 3, "%r" % v)
            try:
                tc.get_inference_statistics("nosuch")
                check(False, "unknown model answered")
            except TcError as e:
                check(e.status == 404 and "nosuch" in str(e), "%r" % e)
            try:
                tc.get_inference_statistics("sdpa", "7")
                check(False, "unknown version answered")
            except TcError as e:
                check(e.status == 404 and "version" in str(e), "%r" % e)


if __name__ == "__main__":
    main()
