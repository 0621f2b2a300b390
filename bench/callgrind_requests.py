#!/usr/bin/env python3
"""Instructions attnd executes per small request, two builds side by side
(callgrind: counts do not depend on the machine's load, unlike req/s).

Usage: bench/callgrind_requests.py --a PATH --b PATH [--n1 N] [--n2 N]
                                   [--endpoint v1|v2|both] [--b-key KEY]

--b-key KEY starts B with ATTND_API_KEY=KEY and sends every request to it
with Authorization: Bearer KEY (--a and --b may then be the same build:
what checking a key costs).

For each build and each count N (n1, then n2) it starts
`valgrind --tool=callgrind attnd` (one HTTP thread, one worker, access log
off, OPENBLAS_CORETYPE set so that attnd does not execute itself again) on
127.0.0.1 port 0, sends N small requests (bench/gen_payloads.py's
v1_small.json and v2_small.json, as bench/load.sh sends them) one after the
other on one keep-alive connection, stops it with SIGTERM and reads the
instruction total.  (I(n2) - I(n1)) / (n2 - n1) is the cost of one request
without start-up and shutdown; the last line gives B / A.  Every server
is stopped (SIGKILL after 60 s) and every file removed, however it ends.
Standard library only.
"""
import argparse
import glob
import http.client
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def start(attnd, work, tag, key=None):
    out = os.path.join(work, "cg.%s.out" % tag)
    logf = open(os.path.join(work, "log.%s" % tag), "wb")
    env = dict(os.environ, OPENBLAS_CORETYPE=os.environ.get(
        "OPENBLAS_CORETYPE", "Haswell"))
    if key:
        env["ATTND_API_KEY"] = key
    p = subprocess.Popen(
        ["valgrind", "--tool=callgrind", "--callgrind-out-file=" + out,
         attnd, "--host", "127.0.0.1", "--port", "0", "--workers", "1",
         "--http-threads", "1", "--access-log", "false",
         "--drain-timeout-ms", "60000"],
        stdout=subprocess.DEVNULL, stderr=logf, env=env)
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        text = open(logf.name, "rb").read().decode("utf-8", "replace")
        m = re.search(r"listening on 127\.0\.0\.1:(\d+)", text)
        if m:
            return p, int(m.group(1)), out
        if p.poll() is not None:
            break
        time.sleep(0.2)
    p.kill()
    p.wait()
    raise SystemExit("attnd under callgrind did not start: %s" % text[-500:])


def stop(p):
    p.send_signal(signal.SIGTERM)
    try:
        p.wait(timeout=60)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()


def send(port, n, bodies, key=None):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = "Bearer " + key
    try:
        for i in range(n):
            path, body = bodies[i % len(bodies)]
            c.request("POST", path, body=body, headers=headers)
            r = c.getresponse()
            r.read()
            if r.status != 200:
                raise SystemExit("%s: HTTP %d" % (path, r.status))
    finally:
        c.close()


def total(out):
    with open(out) as f:
        for line in f:
            if line.startswith("totals:") or line.startswith("summary:"):
                return int(line.split()[1])
    raise SystemExit("no totals in " + out)


def measure(attnd, n, bodies, work, tag, key=None):
    p, port, out = start(attnd, work, tag, key)
    try:
        send(port, n, bodies, key)
    finally:
        stop(p)
    return sum(total(f) for f in glob.glob(out + "*"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--a", required=True, help="the baseline attnd")
    ap.add_argument("--b", required=True, help="the attnd compared")
    ap.add_argument("--n1", type=int, default=200)
    ap.add_argument("--n2", type=int, default=1200)
    ap.add_argument("--endpoint", default="both", choices=("v1", "v2", "both"))
    ap.add_argument("--b-key", help="API key of B (ATTND_API_KEY, and sent)")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="attn_cg.") as work:
        subprocess.run([sys.executable, os.path.join(ROOT, "bench",
                                                     "gen_payloads.py"), work],
                       check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
        bodies = []
        if a.endpoint in ("v1", "both"):
            bodies.append(("/v1/attention",
                           open(os.path.join(work, "v1_small.json"),
                                "rb").read()))
        if a.endpoint in ("v2", "both"):
            bodies.append(("/v2/models/sdpa/infer",
                           open(os.path.join(work, "v2_small.json"),
                                "rb").read()))
        per = {}
        for name, attnd, key in (("A", a.a, None), ("B", a.b, a.b_key)):
            i1 = measure(attnd, a.n1, bodies, work, name + "1", key)
            i2 = measure(attnd, a.n2, bodies, work, name + "2", key)
            per[name] = (i2 - i1) / (a.n2 - a.n1)
            print("%s %s: %d instructions for %d requests, %d for %d: "
                  "%.0f per request" % (name, attnd, i1, a.n1, i2, a.n2,
                                        per[name]))
        print("B / A: %.4f (%+.0f instructions per request, endpoint %s)" %
              (per["B"] / per["A"], per["B"] - per["A"], a.endpoint))


if __name__ == "__main__":
    main()
