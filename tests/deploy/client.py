#!/usr/bin/env python3
"""A client for the deployment tests (scripts/test-container.sh,
deploy/compose/test.sh): attnd as a user reaches it, from outside.

Subcommands (every one talks to 127.0.0.1 only, is bounded in time and
count, and exits non-zero with a one-line reason on the first failure):

  wait-ready PORT [SECONDS]   poll /v2/health/ready until 200
  infer PORT                  one /v1/attention, one v2 JSON and one v2
                              binary inference, checked against a float64
                              reference; the demo model from /models
  slow PORT                   send a request that computes for a second or
                              more; print "sent" when it is on its way, then
                              check its full answer
  load PORT SECONDS THREADS   small v1 and v2 requests through a balancer
                              for SECONDS (or until a file named by --stop
                              exists); print one JSON line of counts: ok,
                              failed, by status, and by replica (HAProxy's
                              X-Served-By header); failures are listed

Python 3 standard library only.
"""

import argparse
import http.client
import json
import math
import os
import struct
import sys
import threading
import time

# The slow request of the integration tests (importing the harness starts
# nothing).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                os.pardir, "integration"))
from harness import slow_request_body  # noqa: E402

HOST = "127.0.0.1"
TOL = 1e-5


def fail(msg):
    print("client: FAIL: %s" % msg, file=sys.stderr)
    sys.exit(1)


def post(conn, path, body, headers):
    conn.request("POST", path, body=body, headers=headers)
    r = conn.getresponse()
    return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()


def post_once(port, path, body, headers, timeout=60):
    conn = http.client.HTTPConnection(HOST, port, timeout=timeout)
    try:
        return post(conn, path, body, headers)
    finally:
        conn.close()


def get_status(port, path, timeout=5):
    conn = http.client.HTTPConnection(HOST, port, timeout=timeout)
    try:
        conn.request("GET", path)
        r = conn.getresponse()
        return r.status, r.read()
    finally:
        conn.close()


# ---- reference -------------------------------------------------------------

def attention(q, k, v, causal=False):
    """float64 softmax(q k^T / sqrt(d)) v for one head; rows are lists.
    causal: key j visible to query i iff j <= i + Lk - Lq."""
    lq, lk = len(q), len(k)
    scale = 1.0 / math.sqrt(len(q[0]))
    out = []
    for i in range(lq):
        s = [sum(a * b for a, b in zip(q[i], k[j])) * scale
             if not (causal and j > i + lk - lq) else None
             for j in range(lk)]
        m = max(x for x in s if x is not None)
        e = [math.exp(x - m) if x is not None else 0.0 for x in s]
        z = sum(e)
        out.append([sum(e[j] / z * v[j][t] for j in range(lk))
                    for t in range(len(v[0]))])
    return out


def close(got, ref, what):
    flat_g = [x for row in got for x in row] if isinstance(got[0], list) \
        else list(got)
    flat_r = [x for row in ref for x in row]
    if len(flat_g) != len(flat_r):
        fail("%s: %d values, expected %d" % (what, len(flat_g), len(flat_r)))
    for i, (g, r) in enumerate(zip(flat_g, flat_r)):
        if abs(g - r) > TOL * (1 + abs(r)):
            fail("%s: value %d is %r, expected %r" % (what, i, g, r))


def f32(x):
    return struct.unpack("f", struct.pack("f", x))[0]


# ---- infer -----------------------------------------------------------------

def cmd_infer(port):
    q = [[f32((i * 7 + j * 3) % 11 / 10 - 0.5) for j in range(4)]
         for i in range(3)]
    kv = [[f32((i * 5 + j) % 7 / 7 - 0.3) for j in range(4)]
          for i in range(5)]
    ref = attention(q, kv, kv, causal=True)
    hj = {"Content-Type": "application/json"}

    st, _, body = post_once(port, "/v1/attention", json.dumps(
        {"query": q, "key": kv, "value": kv, "causal": True}), hj)
    if st != 200:
        fail("/v1/attention: HTTP %d %s" % (st, body[:200]))
    close(json.loads(body)["output"], ref, "/v1/attention output")
    print("client: /v1/attention ok")

    flat = lambda m: [x for row in m for x in row]  # noqa: E731
    inputs = [{"name": n, "datatype": "FP32", "shape": [len(m), 4],
               "data": flat(m)} for n, m in (("query", q), ("key", kv),
                                              ("value", kv))]
    st, _, body = post_once(port, "/v2/models/sdpa/infer", json.dumps(
        {"id": "ct-1", "inputs": inputs, "parameters": {"causal": True}}), hj)
    if st != 200:
        fail("v2 JSON: HTTP %d %s" % (st, body[:200]))
    j = json.loads(body)
    out = [o for o in j["outputs"] if o["name"] == "attn_output"][0]
    if j.get("id") != "ct-1":
        fail("v2 JSON: id %r" % j.get("id"))
    close(out["data"], ref, "v2 JSON attn_output")
    print("client: v2 JSON ok")

    hdr, blobs = [], b""
    for x in inputs:
        raw = struct.pack("<%df" % len(x["data"]), *x["data"])
        hdr.append({"name": x["name"], "datatype": "FP32",
                    "shape": x["shape"],
                    "parameters": {"binary_data_size": len(raw)}})
        blobs += raw
    head = json.dumps({"inputs": hdr, "parameters": {
        "causal": True, "need_weights": False, "binary_data_output": True}
    }).encode()
    st, h, body = post_once(port, "/v2/models/sdpa/infer", head + blobs, {
        "Content-Type": "application/octet-stream",
        "Inference-Header-Content-Length": str(len(head))})
    if st != 200:
        fail("v2 binary: HTTP %d %s" % (st, body[:200]))
    n = int(h["inference-header-content-length"])
    o = json.loads(body[:n])["outputs"][0]
    size = o["parameters"]["binary_data_size"]
    vals = struct.unpack("<%df" % (size // 4), body[n:n + size])
    close(list(vals), ref, "v2 binary attn_output")
    print("client: v2 binary ok")

    st, meta = get_status(port, "/v2/models/demo")
    if st != 200:
        fail("/v2/models/demo: HTTP %d %s (the demo model from /models)"
             % (st, meta[:200]))
    x = [[f32(((i + 1) * (j + 2)) % 13 / 13) for j in range(16)]
         for i in range(2)]
    st, _, body = post_once(port, "/v1/attention", json.dumps(
        {"model": "demo", "query": x, "tokens": ["a", "b"]}), hj)
    if st != 200:
        fail("demo model: HTTP %d %s" % (st, body[:200]))
    j = json.loads(body)
    if j["shape"]["output"] != [2, 16] or j.get("tokens") != ["a", "b"]:
        fail("demo model: shape %r tokens %r" % (j["shape"]["output"],
                                                  j.get("tokens")))
    print("client: demo model (from /models) ok")


# ---- slow ------------------------------------------------------------------

def cmd_slow(port, seconds):
    # calibrate on the idle server, then size the request to `seconds`
    n0 = 4096
    body, hdrs, _ = slow_request_body(n0, 1)
    t0 = time.monotonic()
    st, _, _ = post_once(port, "/v2/models/sdpa/infer", body, hdrs)
    per = max(time.monotonic() - t0, 1e-3) / (n0 * n0)
    if st != 200:
        fail("calibration: HTTP %d" % st)
    heads = max(1, min(64, int(math.ceil(seconds / (per * 16384 * 16384)))))
    body, hdrs, shape = slow_request_body(16384, heads)
    conn = http.client.HTTPConnection(HOST, port, timeout=120)
    conn.request("POST", "/v2/models/sdpa/infer", body=body, headers=hdrs)
    print("sent", flush=True)
    t0 = time.monotonic()
    r = conn.getresponse()
    data = r.read()
    took = time.monotonic() - t0
    if r.status != 200:
        fail("slow request: HTTP %d %s" % (r.status, data[:200]))
    n = int(r.getheader("Inference-Header-Content-Length"))
    o = json.loads(data[:n])["outputs"][0]
    want = 4 * shape[0] * shape[1] * shape[2] * shape[3]
    if o["shape"] != shape or o["parameters"]["binary_data_size"] != want \
            or len(data) != n + want:
        fail("slow request: shape %r, %d bytes" % (o["shape"], len(data)))
    print("client: slow request answered in full after %.2f s (shape %r)"
          % (took, shape))


# ---- load ------------------------------------------------------------------

def cmd_load(port, seconds, threads, stop_file):
    hj = {"Content-Type": "application/json"}
    bodies = [
        ("/v1/attention", json.dumps({"query": [[1, 0], [0, 1], [1, 1]],
                                      "causal": True})),
        ("/v2/models/sdpa/infer", json.dumps({"inputs": [
            {"name": "query", "datatype": "FP32", "shape": [2, 2],
             "data": [1, 0, 0, 1]},
            {"name": "key", "datatype": "FP32", "shape": [2, 2],
             "data": [1, 0, 0, 1]},
            {"name": "value", "datatype": "FP32", "shape": [2, 2],
             "data": [1, 2, 3, 4]}]})),
    ]
    lock = threading.Lock()
    counts = {"ok": 0, "failed": 0, "status": {}, "replica": {},
              "failures": []}
    end = time.monotonic() + seconds
    max_requests = 200000  # a bound whatever the speed

    def stopped():
        return time.monotonic() >= end or (stop_file and
                                           os.path.exists(stop_file))

    def worker(t):
        conn = None
        i = 0
        while not stopped():
            with lock:
                if counts["ok"] + counts["failed"] >= max_requests:
                    return
            path, body = bodies[(i + t) % 2]
            i += 1
            try:
                if conn is None:
                    conn = http.client.HTTPConnection(HOST, port, timeout=30)
                st, h, data = post(conn, path, body, hj)
                err = None if st == 200 else "HTTP %d %s" % (st, data[:120])
                if st == 200 and b"output" not in data:
                    err = "200 without an output"
                replica = h.get("x-served-by", "?")
                if h.get("connection", "").lower() == "close":
                    conn.close()
                    conn = None
            except (OSError, http.client.HTTPException) as e:
                st, err, replica = 0, "%s: %s" % (type(e).__name__, e), "?"
                if conn is not None:
                    conn.close()
                conn = None
            with lock:
                key = str(st)
                counts["status"][key] = counts["status"].get(key, 0) + 1
                if err is None:
                    counts["ok"] += 1
                    counts["replica"][replica] = \
                        counts["replica"].get(replica, 0) + 1
                else:
                    counts["failed"] += 1
                    if len(counts["failures"]) < 20:
                        counts["failures"].append("%s %s" % (path, err))
        if conn is not None:
            conn.close()

    ts = [threading.Thread(target=worker, args=(t,), daemon=True)
          for t in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(seconds + 120)
    print(json.dumps(counts, sort_keys=True), flush=True)


def cmd_wait_ready(port, seconds):
    end = time.monotonic() + seconds
    last = "no answer"
    while time.monotonic() < end:
        try:
            st, body = get_status(port, "/v2/health/ready", timeout=2)
            if st == 200:
                return
            last = "HTTP %d %s" % (st, body[:100])
        except OSError as e:
            last = str(e)
        time.sleep(0.2)
    fail("not ready on port %d after %.0f s: %s" % (port, seconds, last))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("wait-ready")
    w.add_argument("port", type=int)
    w.add_argument("seconds", type=float, nargs="?", default=60)
    sub.add_parser("infer").add_argument("port", type=int)
    s = sub.add_parser("slow")
    s.add_argument("port", type=int)
    s.add_argument("--seconds", type=float, default=2.0)
    ld = sub.add_parser("load")
    ld.add_argument("port", type=int)
    ld.add_argument("seconds", type=float)
    ld.add_argument("threads", type=int)
    ld.add_argument("--stop", default=None,
                    help="stop early once this file exists")
    a = ap.parse_args()
    if a.cmd == "wait-ready":
        cmd_wait_ready(a.port, a.seconds)
    elif a.cmd == "infer":
        cmd_infer(a.port)
    elif a.cmd == "slow":
        cmd_slow(a.port, a.seconds)
    else:
        cmd_load(a.port, min(a.seconds, 600), max(1, min(a.threads, 64)),
                 a.stop)


if __name__ == "__main__":
    try:
        main()
    except (OSError, http.client.HTTPException, ValueError, KeyError) as e:
        fail("%s: %s" % (type(e).__name__, e))
