#!/usr/bin/python3
"""soak.py - a long mixed load, watching attnd's memory.

CLIENTS keep-alive clients send, in turn, small JSON requests (sdpa
[1,1,8,16], /v1 and v2), large binary ones (sdpa [1,1,768,64], 590 KB) and
malformed ones (cut JSON, a wrong Inference-Header-Content-Length, an
unknown model, a wrong Content-Type) for --duration seconds (600).  RSS is
sampled every 5 s.  Bounds: every answer has the status its kind expects
(200 or 503 for the good ones; 400, 404 or 415 for the bad ones, as
listed below), no exchange breaks, RSS at the end (the median of the last
three samples) is within 5% of RSS after the warm-up (the median of the
three samples after --warmup seconds, default 60), and attnd exits 0 on
SIGTERM.  Prints its figures; exits 1 when a bound fails.

Usage: tests/load/soak.py [--attnd PATH] [--duration S] [--warmup S]
"""
import argparse
import asyncio
import collections
import json
import statistics
import time

import loadlib as L

CLIENTS = 6


def kinds():
    small_v2 = L.sdpa_json(8, 16)
    small_v1 = json.dumps({"query": [[0.5 * ((i + j) % 5) for j in range(16)]
                                     for i in range(8)]}).encode()
    big, hl = L.sdpa_binary(768, 64)
    js = {"Content-Type": "application/json"}
    return [
        ("small v2", "/v2/models/sdpa/infer", small_v2, js, (200, 503)),
        ("small v1", "/v1/attention", small_v1, js, (200, 503)),
        ("large binary", "/v2/models/sdpa/infer", big,
         {"Inference-Header-Content-Length": str(hl),
          "Content-Type": "application/octet-stream"}, (200, 503)),
        ("cut JSON", "/v2/models/sdpa/infer", small_v2[:-40], js, (400,)),
        ("bad header length", "/v2/models/sdpa/infer", big,
         {"Inference-Header-Content-Length": str(len(big) + 1)}, (400,)),
        ("unknown model", "/v2/models/nope/infer", small_v2, js, (404,)),
        ("wrong Content-Type", "/v1/attention", small_v1,
         {"Content-Type": "image/png"}, (415,)),
    ]


async def soak(srv, secs, warmup):
    ks = kinds()
    counts = collections.Counter()
    bad = collections.Counter()
    rss = []
    end = time.monotonic() + secs
    t0 = time.monotonic()

    async def client(i):
        c = L.Conn(srv.port)
        n = i
        while time.monotonic() < end:
            name, path, body, hdrs, want = ks[n % len(ks)]
            n += 1
            try:
                st, _, _ = await c.request("POST", path, body, hdrs,
                                           timeout=60)
            except (OSError, asyncio.TimeoutError, ValueError) as e:
                st = "error " + type(e).__name__
            counts[(name, st)] += 1
            if st not in want:
                bad[(name, st)] += 1
        c.close()

    async def sampler():
        while time.monotonic() < end:
            rss.append((time.monotonic() - t0, srv.rss_kb()))
            await asyncio.sleep(5)

    await asyncio.gather(sampler(), *[client(i) for i in range(CLIENTS)])
    return counts, bad, rss


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--attnd", default=L.default_attnd())
    ap.add_argument("--duration", type=float, default=600.0)
    ap.add_argument("--warmup", type=float, default=60.0)
    a = ap.parse_args()
    srv = L.Server(a.attnd, "--access-log", "false")
    try:
        print("soak: %d clients for %.0f s (warm-up %.0f s)" %
              (CLIENTS, a.duration, a.warmup))
        counts, bad, rss = asyncio.run(soak(srv, a.duration, a.warmup))
        rc = srv.terminate()
    finally:
        srv.stop()
    for (name, st), n in sorted(counts.items(), key=str):
        print("  %-20s %-12s %d" % (name, st, n))
    print("  RSS (s, MB): " + " ".join("%.0f:%.1f" % (t, kb / 1024.0)
                                      for t, kb in rss))
    after = [kb for t, kb in rss if t >= a.warmup][:3]
    last = [kb for t, kb in rss][-3:]
    base = statistics.median(after) if after else float("nan")
    final = statistics.median(last) if last else float("nan")
    growth = (final - base) / base * 100.0 if after else float("nan")
    print("  RSS after warm-up %.1f MB, at the end %.1f MB: %+.2f%%" %
          (base / 1024.0, final / 1024.0, growth))
    L.verdict("soak", [
        ("no unexpected status (%s)" % (dict(bad) or "none"), not bad),
        ("RSS growth %+.2f%% < 5%%" % growth, growth < 5.0),
        ("exit 0 after SIGTERM (rc=%s)" % rc, rc == 0)])


if __name__ == "__main__":
    main()
