#!/usr/bin/python3
"""overload.py - attnd offered 4x what it can serve.

First the capacity: CONC keep-alive clients send the same binary sdpa
request back to back for --measure seconds (req/s answered with 200).  Then
an open loop offers --factor (4) times that rate for --duration seconds,
through POOL keep-alive connections (more than queue_capacity + workers,
so that the queue overflows), while a health probe (GET
/v2/health/ready, a new connection each time) is timed every 20 ms from a
separate process.
Bounds: every answer is a 200 or a 503 (no other status, no broken
exchange), and the probe's p99 is under 50 ms.  Prints its figures; exits
1 when a bound fails.

Usage: tests/load/overload.py [--attnd PATH] [--duration S] [--measure S]
       [--factor F] [--seq L]
"""
import argparse
import asyncio
import collections
import time

import loadlib as L

CONC = 8
POOL = 128


async def capacity(port, body, hl, secs):
    done = 0
    end = time.monotonic() + secs

    async def client():
        nonlocal done
        c = L.Conn(port)
        while time.monotonic() < end:
            st, _, _ = await c.request("POST", "/v2/models/sdpa/infer", body,
                                       {"Inference-Header-Content-Length":
                                        str(hl)}, timeout=60)
            done += st == 200
        c.close()
    t0 = time.monotonic()
    await asyncio.gather(*[client() for _ in range(CONC)])
    return done / (time.monotonic() - t0)


async def overload(port, body, hl, rate, secs):
    """POOL keep-alive clients take tickets issued at `rate`."""
    statuses = collections.Counter()
    health = []
    tickets = asyncio.Queue()
    end = time.monotonic() + secs

    async def client():
        c = L.Conn(port)
        while True:
            t = await tickets.get()
            if t is None:
                break
            try:
                st, _, _ = await c.request(
                    "POST", "/v2/models/sdpa/infer", body,
                    {"Inference-Header-Content-Length": str(hl)}, timeout=60)
                statuses[st] += 1
            except (OSError, asyncio.TimeoutError, ValueError) as e:
                statuses["error: " + type(e).__name__] += 1
        c.close()

    workers = [asyncio.ensure_future(client()) for _ in range(POOL)]
    pr = L.Probe(port, secs)
    n = 0
    t0 = time.monotonic()
    while time.monotonic() < end:
        due = t0 + n / rate
        now = time.monotonic()
        if due > now:
            await asyncio.sleep(due - now)
        tickets.put_nowait(n)
        n += 1
    late = tickets.qsize()  # issued, not yet taken: the clients' backlog
    for _ in workers:
        tickets.put_nowait(None)
    await asyncio.gather(*workers)
    for st, ms in pr.result():
        health.append(ms)
        if st != 200:
            statuses["health status %s" % st] += 1
    return statuses, health, n, late


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--attnd", default=L.default_attnd())
    ap.add_argument("--duration", type=float, default=30.0)
    ap.add_argument("--measure", type=float, default=10.0)
    ap.add_argument("--factor", type=float, default=4.0)
    ap.add_argument("--seq", type=int, default=512)
    a = ap.parse_args()
    srv = L.Server(a.attnd, "--access-log", "false")
    try:
        body, hl = L.sdpa_binary(a.seq, 64)
        cap = asyncio.run(capacity(srv.port, body, hl, a.measure))
        rate = cap * a.factor
        print("overload: capacity %.1f req/s (sdpa [1,1,%d,64] binary, %d "
              "clients); offering %.1f req/s for %.0f s" %
              (cap, a.seq, CONC, rate, a.duration))
        st, health, n, late = asyncio.run(
            overload(srv.port, body, hl, rate, a.duration))
        rc = srv.terminate()
    finally:
        srv.stop()
    answered = {k: v for k, v in st.items() if v}
    print("  offered %d requests (%d still waiting for a client at the "
          "end): %s" % (n, late, dict(answered)))
    print("  health probes %d: p50 %.1f ms, p99 %.1f ms, max %.1f ms" %
          (len(health), L.pct(health, 50), L.pct(health, 99),
           max(health) if health else float("nan")))
    others = {k: v for k, v in answered.items() if k not in (200, 503)}
    L.verdict("overload", [
        ("only 200 and 503 (others: %s)" % (others or "none"), not others),
        ("some 200 and some 503 (the queue overflowed)",
         st[200] > 0 and st[503] > 0),
        ("health p99 %.1f ms < 50 ms" % L.pct(health, 99),
         L.pct(health, 99) < 50.0),
        ("exit 0 after SIGTERM (rc=%s)" % rc, rc == 0)])


if __name__ == "__main__":
    main()
