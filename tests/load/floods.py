#!/usr/bin/python3
"""floods.py - idle and slow clients held open while health is probed.

--idle (2000) connections are opened and send nothing; --slow (500)
slowloris connections send a request's header one byte a second, never
ending it.  While they are held (--duration seconds, 30), a health probe
(GET /v2/health/ready on a new connection every 100 ms, from a separate
process) is timed.  attnd runs with its defaults (max_connections 1024),
so the flood is larger than the connection limit: attnd must make room
or refuse promptly, never leave the probe waiting.  Bounds: every probe
gets a 200 within 100 ms, and attnd exits 0 on SIGTERM afterwards.
Prints its figures; exits 1 when a bound fails.

Usage: tests/load/floods.py [--attnd PATH] [--idle N] [--slow N]
       [--duration S]
"""
import argparse
import resource
import socket
import time

import loadlib as L


def open_many(port, n):
    out = []
    for _ in range(n):
        s = socket.socket()
        s.setblocking(False)
        try:
            s.connect_ex((L.HOST, port))
        except OSError:
            s.close()
            continue
        out.append(s)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--attnd", default=L.default_attnd())
    ap.add_argument("--idle", type=int, default=2000)
    ap.add_argument("--slow", type=int, default=500)
    ap.add_argument("--duration", type=float, default=30.0)
    a = ap.parse_args()
    want = a.idle + a.slow + 256
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(want, hard), hard))
    srv = L.Server(a.attnd, "--access-log", "false")
    idle = slow = []
    try:
        idle = open_many(srv.port, a.idle)
        slow = open_many(srv.port, a.slow)
        time.sleep(1.0)
        probe = L.Probe(srv.port, a.duration, interval=0.1)
        head = b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\nX-Slow: " + \
            b"a" * 4096
        sent = 0
        t_end = time.monotonic() + a.duration
        while time.monotonic() < t_end:
            for s in slow:
                try:
                    s.send(head[sent % len(head):][:1])
                except OSError:
                    pass
            sent += 1
            time.sleep(1.0)
        res = probe.result()
        closed = 0
        for s in idle + slow:
            try:
                closed += s.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) \
                    == b""
            except (BlockingIOError, OSError):
                pass
    finally:
        for s in idle + slow:
            s.close()
        rc = srv.terminate() if srv.proc.poll() is None else srv.proc.poll()
        srv.stop()
    ms = [m for st, m in res]
    fails = [(st, round(m)) for st, m in res if st != 200 or m >= 100.0]
    print("floods: %d idle + %d slowloris connections for %.0f s; %d of "
          "them closed by attnd by the end" %
          (len(idle), len(slow), a.duration, closed))
    print("  health probes %d: p50 %.1f ms, p99 %.1f ms, max %.1f ms; "
          "%d slower than 100 ms or not 200" %
          (len(ms), L.pct(ms, 50), L.pct(ms, 99),
           max(ms) if ms else float("nan"), len(fails)))
    L.verdict("floods", [
        ("probes made (%d)" % len(ms), len(ms) > 0),
        ("every probe a 200 within 100 ms (misses: %s)" %
         (fails[:5] or "none"), not fails),
        ("exit 0 after SIGTERM (rc=%s)" % rc, rc == 0)])


if __name__ == "__main__":
    main()
