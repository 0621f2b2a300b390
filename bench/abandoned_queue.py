#!/usr/bin/env python3
"""Issue 44's scenario, two builds side by side in one run: what clients
who left cost the requests queued behind them.

Usage: bench/abandoned_queue.py --a PATH --b PATH [--rounds N] [--left N]

For each round and each build (A, then B) it starts attnd with one
worker (tests/integration/harness.py's Server: 127.0.0.1, port 0), sends
the harness's slow request (a v2 sdpa body of about 2.6 MB that computes
for about 1.5 s here), queues --left (6) more copies of it behind it from
clients that then close their connections (0.3 s after their last byte),
queues a small request behind those, and measures how long after the
closes the small request is answered, and with what status; and how many
requests were computed (attnd_compute_duration_seconds_count).  A build
that computes the abandoned requests answers the small one only after
them, or 503 once it has waited queue_timeout_ms (10 s by default).  The
last lines give each build's median.  Wall clock, so compare the two
within one run.  Standard library only; every server is stopped.
"""
import argparse
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))

import harness  # noqa: E402
from harness import (Pending, Server, metric, slow_request,  # noqa: E402
                     small_v2_body, wait_metric)
from test_queue import raw_infer  # noqa: E402


def one(attnd, left):
    """(seconds from the closes to the small answer, its status, requests
    computed) on a fresh server."""
    harness.cfg.attnd = attnd
    with Server("--workers", "1", name="bench-abandoned") as s:
        body, hdrs, _ = slow_request(s.port)
        c0 = metric(s.port, "attnd_compute_duration_seconds_count")
        socks = [raw_infer(s.port, body, hdrs, "running")]
        try:
            wait_metric(s.port, "attnd_workers_busy", 1)
            for i in range(left):
                socks.append(raw_infer(s.port, body, hdrs, "left-%d" % i))
            wait_metric(s.port, "attnd_queue_depth", left)
            live = Pending(s.port, "/v2/models/sdpa/infer", small_v2_body(),
                           {"Content-Type": "application/json"})
            wait_metric(s.port, "attnd_queue_depth", left + 1)
            time.sleep(0.3)
            for c in socks[1:]:
                c.close()
            t0 = time.monotonic()
            r = live.response()
            dt = time.monotonic() - t0
        finally:
            for c in socks:
                c.close()
        time.sleep(0.5)  # the running request's end counted
        n = metric(s.port, "attnd_compute_duration_seconds_count") - c0
        return dt, r.status, int(n)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--a", required=True)
    ap.add_argument("--b", required=True)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--left", type=int, default=6)
    o = ap.parse_args()
    harness.cfg.src = ROOT
    harness.cfg.models_dir = os.path.join(ROOT, "config", "models")
    got = {"A": [], "B": []}
    for r in range(o.rounds):
        for tag, path in (("A", o.a), ("B", o.b)):
            dt, status, n = one(path, o.left)
            got[tag].append(dt)
            print("%s round %d: the small request answered %.2f s after %d "
                  "clients left (status %d); %d requests computed" %
                  (tag, r, dt, o.left, status, n), flush=True)
    med = {k: sorted(v)[len(v) // 2] for k, v in got.items()}
    print("A %s: median %.2f s" % (o.a, med["A"]))
    print("B %s: median %.2f s" % (o.b, med["B"]))
    print("B / A: %.3f" % (med["B"] / med["A"]))


if __name__ == "__main__":
    main()
