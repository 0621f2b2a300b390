#!/usr/bin/python3
"""sigterm.py - SIGTERM while attnd is busy.

CLIENTS keep-alive connections (each opened, and answered once, before the
load: attnd has accepted them) send binary sdpa requests ([1,1,512,64])
back to back; after --before seconds attnd gets SIGTERM.  Every request
attnd accepted before the signal must get its full answer (a 200 whose body
is as long as its Content-Length says).  The client cannot see which
requests attnd had read when the signal came: one written just before it
may still be in the socket when the drain begins, and attnd then refuses
it, unread, with its drain 503 ("server is shutting down").  So a request
written before the signal must get its full 200 or that 503, nothing else
(no other status, no cut body, no broken connection), and at most one per
connection may get the 503 (a connection has one request in flight);
requests written after it may get a 503 or a closed connection.  attnd must exit 0 within
drain_timeout_ms (30 s by default) plus a margin.  Prints its figures;
exits 1 when a bound fails.

Usage: tests/load/sigterm.py [--attnd PATH] [--before S] [--rounds N]
"""
import argparse
import asyncio
import collections
import signal
import time

import loadlib as L

CLIENTS = 32


async def run(srv, before):
    body, hl = L.sdpa_binary(512, 64)
    hdrs = {"Inference-Header-Content-Length": str(hl)}
    t_sig = [None]
    before_sig = collections.Counter()
    after_sig = collections.Counter()
    conns = [L.Conn(srv.port) for _ in range(CLIENTS)]
    for c in conns:
        st, _, _ = await c.request("GET", "/v2/health/live", timeout=30)
        assert st == 200

    async def client(c):
        while t_sig[0] is None or time.monotonic() < t_sig[0] + 5:
            t_written = time.monotonic()
            try:
                st, h, b = await c.request("POST", "/v2/models/sdpa/infer",
                                           body, hdrs, timeout=60)
                full = st == 200 and len(b) == int(h["content-length"])
                res = "200 full" if full else str(st)
                if st == 503 and b"server is shutting down" in b:
                    res = "503 drain"
            except (OSError, asyncio.TimeoutError, ValueError) as e:
                res = "broken: " + type(e).__name__
            sent_before = t_sig[0] is None or t_written < t_sig[0]
            (before_sig if sent_before else after_sig)[res] += 1
            if not sent_before and res != "200 full":
                break

    async def killer():
        await asyncio.sleep(before)
        # the written time of a request is taken before its write: any
        # request counted "before" was written before the signal
        t_sig[0] = time.monotonic()
        srv.proc.send_signal(signal.SIGTERM)

    await asyncio.gather(killer(), *[client(c) for c in conns])
    for c in conns:
        c.close()
    return before_sig, after_sig


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--attnd", default=L.default_attnd())
    ap.add_argument("--before", type=float, default=3.0)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    checks = []
    for r in range(a.rounds):
        srv = L.Server(a.attnd, "--access-log", "false")
        try:
            b, af = asyncio.run(run(srv, a.before))
            t0 = time.monotonic()
            try:
                rc = srv.proc.wait(timeout=60)
            except Exception:
                rc = None
            took = time.monotonic() - t0
        finally:
            srv.stop()
        print("sigterm round %d: written before the signal: %s; after: %s;"
              " exit %s %.1f s after the last answer" %
              (r + 1, dict(b), dict(af), rc, took))
        lost = {k: v for k, v in b.items() if k not in ("200 full",
                                                         "503 drain")}
        unread = b.get("503 drain", 0)
        checks += [
            ("round %d: every request written before SIGTERM answered in "
             "full or refused unread (lost: %s)" % (r + 1, lost or "none"),
             not lost),
            ("round %d: refused unread at most one per connection (%d <= "
             "%d)" % (r + 1, unread, CLIENTS), unread <= CLIENTS),
            ("round %d: exit 0 (rc=%s)" % (r + 1, rc), rc == 0)]
    L.verdict("sigterm", checks)


if __name__ == "__main__":
    main()
