#!/usr/bin/env python3
"""e2e_bf16.py - a bf16 request against the same fp32 request, end to end
through attnd (issue 35): KServe v2 binary, the built-in mha model, n query
rows, d_model, heads, need_weights false, attn_output as binary.

Starts attnd (127.0.0.1, an ephemeral port, --workers 1, one engine thread
by default, access log on), builds one body (x, the four weights [in, out]
and biases, random, FP32 blobs), then sends it rounds times with
"precision": "fp32" and with "bf16", alternating which goes first, one
request at a time on one connection.  For each request: the client's wall
time (send to last byte received) and the access line's total_ms (first
byte of the body to the answer queued), compute_ms (decode, model and
encode on the worker), and the CPU time all attnd's threads spent
meanwhile (/proc/PID/task/*/schedstat: what a loaded, shared machine
does not inflate, unlike the wall times).  Prints the median of each, and the median over the
rounds of each round's fp32 / bf16 ratio (the machine's speed drifts, a
round's two requests see the same machine).  A third request kind,
"bf16-out", is bf16 with attn_output asked for as a BF16 blob (half the
answer's bytes).  Reports only; stops its server.

Usage: e2e_bf16.py [--attnd build/src/attnd] [--n 2048] [--d 512]
         [--heads 8] [--rounds 9] [--threads 1]
"""
import argparse
import http.client
import json
import os
import re
import statistics
import struct
import subprocess
import sys
import tempfile
import time

import numpy as np


def body(n, d, heads, precision, out_dtype=None):
    rng = np.random.default_rng(35)
    x = rng.uniform(-1, 1, (n, d)).astype("<f4")
    a = 1 / np.sqrt(d)
    tensors = [("query", x)]
    for w in ("w_q", "w_k", "w_v", "w_o"):
        tensors.append((w, rng.uniform(-a, a, (d, d)).astype("<f4")))
    for b in ("b_q", "b_k", "b_v", "b_o"):
        tensors.append((b, rng.uniform(-0.1, 0.1, d).astype("<f4")))
    ins, blobs = [], []
    for name, t in tensors:
        raw = t.tobytes()
        ins.append({"name": name, "datatype": "FP32", "shape": list(t.shape),
                    "parameters": {"binary_data_size": len(raw)}})
        blobs.append(raw)
    out = {"name": "attn_output", "parameters": {"binary_data": True}}
    if out_dtype:
        out["parameters"]["datatype"] = out_dtype
    hdr = json.dumps({"inputs": ins, "outputs": [out], "parameters": {
        "num_heads": heads, "need_weights": False,
        "precision": precision}}).encode()
    return hdr + b"".join(blobs), len(hdr)


def start(attnd, threads, models):
    log = tempfile.NamedTemporaryFile(prefix="e2e-bf16-", suffix=".log",
                                      delete=False)
    p = subprocess.Popen([attnd, "--host", "127.0.0.1", "--port", "0",
                          "--workers", "1", "--blas-threads-per-worker",
                          str(threads), "--log-format", "json",
                          "--access-log", "true", "--models-dir", models],
                         stdout=subprocess.DEVNULL, stderr=log)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        text = open(log.name).read()
        m = re.search(r"listening on 127\.0\.0\.1:(\d+)", text)
        if m:
            return p, int(m.group(1)), log.name
        if p.poll() is not None:
            break
        time.sleep(0.05)
    p.kill()
    sys.exit("attnd did not start: " + open(log.name).read()[-400:])


def send(conn, b, hl, rid):
    t0 = time.perf_counter()
    conn.request("POST", "/v2/models/mha/infer", body=b, headers={
        "Content-Type": "application/octet-stream",
        "Inference-Header-Content-Length": str(hl), "X-Request-Id": rid})
    r = conn.getresponse()
    data = r.read()
    wall = (time.perf_counter() - t0) * 1e3
    if r.status != 200:
        sys.exit("HTTP %d: %s" % (r.status, data[:300]))
    hdr = json.loads(data[:int(r.getheader(
        "Inference-Header-Content-Length"))])
    return wall, hdr.get("parameters", {})


def server_cpu_ms(pid):
    """CPU time of all of attnd's threads so far, ms (schedstat: ns)."""
    t = 0
    for tid in os.listdir("/proc/%d/task" % pid):
        try:
            t += int(open("/proc/%d/task/%s/schedstat" % (pid, tid)).read()
                     .split()[0])
        except (OSError, ValueError, IndexError):
            pass
    return t / 1e6


def access(log, rid):
    for _ in range(100):
        for line in open(log):
            if '"type":"access"' in line and rid in line:
                j = json.loads(line)
                if j.get("request_id") == rid:
                    return j["total_ms"], j["compute_ms"]
        time.sleep(0.01)
    sys.exit("no access line for " + rid)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--attnd", default="build/src/attnd")
    ap.add_argument("--n", type=int, default=2048)
    ap.add_argument("--d", type=int, default=512)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    kinds = {"fp32": body(a.n, a.d, a.heads, "fp32"),
             "bf16": body(a.n, a.d, a.heads, "bf16"),
             "bf16-out": body(a.n, a.d, a.heads, "bf16", "BF16")}
    models = tempfile.mkdtemp(prefix="e2e-bf16-models-")  # built-ins only
    p, port, log = start(a.attnd, a.threads, models)
    res = {k: [] for k in kinds}
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
        for k, (b, hl) in kinds.items():  # warm-up, and the kernels used
            _, prm = send(conn, b, hl, "warm-" + k)
            print("%-8s precision %s, kernel %s" %
                  (k, prm.get("precision"), prm.get("kernel")))
        for r in range(a.rounds):
            order = list(kinds) if r % 2 == 0 else list(kinds)[::-1]
            for k in order:
                rid = "r%d-%s" % (r, k)
                c0 = server_cpu_ms(p.pid)
                wall, _ = send(conn, *kinds[k], rid)
                total, compute = access(log, rid)
                res[k].append((wall, total, compute,
                               server_cpu_ms(p.pid) - c0))
        conn.close()
    finally:
        p.terminate()
        p.wait(timeout=30)
        os.unlink(log)
        os.rmdir(models)
    print("n %d, d_model %d, %d heads, %d rounds, %d engine thread(s), "
          "body %.1f MB" % (a.n, a.d, a.heads, a.rounds, a.threads,
                            len(kinds["fp32"][0]) / 1e6))
    print("%-8s %10s %10s %10s %10s" % ("request", "wall ms", "total_ms",
                                        "compute_ms", "cpu ms"))
    for k in kinds:
        cols = list(zip(*res[k]))
        print("%-8s %10.1f %10.1f %10.1f %10.1f" %
              tuple([k] + [statistics.median(c) for c in cols]))
    for k in ("bf16", "bf16-out"):
        ratios = [[f / b for f, b in zip(rf, rb)]
                  for rf, rb in zip(res["fp32"], res[k])]
        cols = list(zip(*ratios))
        print("fp32/%-8s speed-up: wall %.2fx (%.2f-%.2f), total_ms %.2fx "
              "(%.2f-%.2f), compute_ms %.2fx, server cpu %.2fx (%.2f-%.2f)" %
              (k, statistics.median(cols[0]), min(cols[0]), max(cols[0]),
               statistics.median(cols[1]), min(cols[1]), max(cols[1]),
               statistics.median(cols[2]), statistics.median(cols[3]),
               min(cols[3]), max(cols[3])))


if __name__ == "__main__":
    main()
