#!/usr/bin/env python3
"""Instructions attnd executes per small request, two builds side by side
(callgrind: counts do not depend on the machine's load, unlike req/s).

Usage: bench/callgrind_requests.py --a PATH --b PATH [--n1 N] [--n2 N]
                                   [--endpoint v1|v2|both|step] [--b-key KEY]
                                   [--b-tls tls|mtls] [--access-log]
                                   [--step-tokens T] [--step-batch B]
                                   [--step-dtype fp32|bf16]

--b-key KEY starts B with ATTND_API_KEY=KEY and sends every request to it
with Authorization: Bearer KEY (--a and --b may then be the same build:
what checking a key costs).  --b-tls serves B over HTTPS (tls_cert_file,
an EC P-256 certificate of a CA made here with openssl), and with mtls
also asks for a client certificate of that CA (tls_client_ca_file), which
the client presents: what TLS, and a client certificate, cost a request
on a kept-alive connection (the handshake, once per connection, is left
out with start-up).  --access-log runs both builds with the access log on
(to a file) and sends a User-Agent: what writing the line costs.

--endpoint step sends session steps instead (issue 42's small step, as
bench/sessions section 2 sends them): B sessions (--step-batch, default 1)
of H 32, Hkv 8, D 128 (--step-dtype, default fp32; BF16 inputs for bf16)
are made and filled with T tokens (--step-tokens, default 1: the step
with next to no attention) by one v2 kv_attention request, then each of
the N requests is a binary v2 step of one token per session at the next
position (blas_threads_per_worker 1); every 64 steps the sessions are
truncated back to T (one /v1 truncate each, counted in N's total), so T
stays within T..T+63.  The
set-up is the same for n1 and n2 and cancels out of the difference.

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
import ssl
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ACCESS_LOG = False  # --access-log


def make_pki(work):
    """A CA, a server certificate for 127.0.0.1 and a client certificate,
    both signed by it, in work/."""
    f = lambda n: os.path.join(work, n)
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"]
    run = lambda *a: subprocess.run(["openssl"] + list(a), check=True,
                                    stdout=subprocess.DEVNULL,
                                    stderr=subprocess.DEVNULL, timeout=60)
    run("req", "-x509", *ec, "-keyout", f("ca.key"), "-out", f("ca.crt"),
        "-days", "2", "-subj", "/CN=bench ca")
    with open(f("ext"), "w") as e:
        e.write("subjectAltName=IP:127.0.0.1\n")
    for name, ext in (("server", ["-extfile", f("ext")]), ("client", [])):
        run("req", *ec, "-keyout", f(name + ".key"), "-out", f(name + ".csr"),
            "-subj", "/CN=" + name)
        run("x509", "-req", "-in", f(name + ".csr"), "-CA", f("ca.crt"),
            "-CAkey", f("ca.key"), "-CAcreateserial", "-out",
            f(name + ".crt"), "-days", "2", *ext)
    return f


def tls_setup(mode, work):
    """(attnd flags, client SSL context) of mode: None, "tls", "mtls"."""
    if not mode:
        return [], None
    f = make_pki(work)
    flags = ["--tls-cert-file", f("server.crt"), "--tls-key-file",
             f("server.key")]
    ctx = ssl.create_default_context(cafile=f("ca.crt"))
    if mode == "mtls":
        flags += ["--tls-client-ca-file", f("ca.crt")]
        ctx.load_cert_chain(f("client.crt"), f("client.key"))
    return flags, ctx


def start(attnd, work, tag, key=None, flags=()):
    out = os.path.join(work, "cg.%s.out" % tag)
    logf = open(os.path.join(work, "log.%s" % tag), "wb")
    env = dict(os.environ, OPENBLAS_CORETYPE=os.environ.get(
        "OPENBLAS_CORETYPE", "Haswell"))
    if key:
        env["ATTND_API_KEY"] = key
    p = subprocess.Popen(
        ["valgrind", "--tool=callgrind", "--callgrind-out-file=" + out,
         attnd, "--host", "127.0.0.1", "--port", "0", "--workers", "1",
         "--http-threads", "1", "--access-log",
         "true" if ACCESS_LOG else "false",
         "--drain-timeout-ms", "60000"] + list(flags),
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


def send(port, n, bodies, key=None, ctx=None):
    c = (http.client.HTTPSConnection("127.0.0.1", port, timeout=60,
                                     context=ctx) if ctx else
         http.client.HTTPConnection("127.0.0.1", port, timeout=60))
    headers = {"Content-Type": "application/json"}
    if ACCESS_LOG:
        headers["User-Agent"] = "callgrind-requests/1.0 (bench)"
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


H, HKV, D = 32, 8, 128


def step_body(ids, pos, t, dtype, seed):
    """A binary v2 kv_attention request: (body, headers).  Values are a
    repeatable sequence in [-1, 1) (stdlib only)."""
    import array
    import json
    import random
    import struct
    r = random.Random(seed)
    ins, blobs = [], []

    def add(name, dt, shape, raw):
        ins.append({"name": name, "datatype": dt, "shape": shape,
                    "parameters": {"binary_data_size": len(raw)}})
        blobs.append(raw)

    def floats(n):
        a = array.array("f", [r.uniform(-1, 1) for _ in range(n)])
        if dtype != "BF16":
            return a.tobytes()
        u = array.array("I", a.tobytes())  # truncated to bf16: exact
        return array.array("H", [x >> 16 for x in u]).tobytes()

    B = len(ids)
    add("session_id", "BYTES", [B],
        b"".join(struct.pack("<I", len(s)) + s.encode() for s in ids))
    add("position", "INT64", [B], struct.pack("<%dq" % B, *([pos] * B)))
    add("query", dtype, [B, t, H, D], floats(B * t * H * D))
    add("key", dtype, [B, t, HKV, D], floats(B * t * HKV * D))
    add("value", dtype, [B, t, HKV, D], floats(B * t * HKV * D))
    hdr = json.dumps({"inputs": ins, "parameters": {
        "layer": 0, "binary_data_output": True}}).encode()
    return hdr + b"".join(blobs), {
        "Content-Type": "application/octet-stream",
        "Inference-Header-Content-Length": str(len(hdr))}


def send_steps(port, n, cfg):
    """The sessions made and filled, then n requests of steps (and the
    truncates every 64 steps)."""
    import json
    T, B, dtype = cfg
    ids = ["cg%d" % b for b in range(B)]
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)

    def req(method, path, body, headers, want=(200, 201)):
        c.request(method, path, body=body, headers=headers)
        r = c.getresponse()
        data = r.read()
        if r.status not in want:
            raise SystemExit("%s: HTTP %d %s" % (path, r.status, data[:300]))

    js = {"Content-Type": "application/json"}
    wire = "BF16" if dtype == "bf16" else "FP32"
    try:
        for s in ids:
            req("PUT", "/v1/sessions/" + s, json.dumps(
                {"num_heads": H, "num_kv_heads": HKV, "head_dim": D,
                 "kv_dtype": dtype, "max_tokens": T + 64}), js)
        body, hd = step_body(ids, 0, T, wire, 1)
        req("POST", "/v2/models/kv_attention/infer", body, hd)
        steps = [step_body(ids, T + i, 1, wire, 2) for i in range(64)]
        for i in range(n):
            if i and i % 64 == 0:
                for s in ids:
                    req("POST", "/v1/sessions/%s/truncate" % s,
                        json.dumps({"length": T}), js)
            body, hd = steps[i % 64]
            req("POST", "/v2/models/kv_attention/infer", body, hd)
    finally:
        c.close()


def total(out):
    with open(out) as f:
        for line in f:
            if line.startswith("totals:") or line.startswith("summary:"):
                return int(line.split()[1])
    raise SystemExit("no totals in " + out)


def measure(attnd, n, bodies, work, tag, key=None, tls=([], None),
            steps=None):
    # a step's engine on one thread, as bench/sessions runs it (auto
    # threads would start a thread a step)
    flags = list(tls[0]) + (["--blas-threads-per-worker", "1"] if steps else [])
    p, port, out = start(attnd, work, tag, key, flags)
    try:
        if steps:
            send_steps(port, n, steps)
        else:
            send(port, n, bodies, key, tls[1])
    finally:
        stop(p)
    return sum(total(f) for f in glob.glob(out + "*"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--a", required=True, help="the baseline attnd")
    ap.add_argument("--b", required=True, help="the attnd compared")
    ap.add_argument("--n1", type=int, default=200)
    ap.add_argument("--n2", type=int, default=1200)
    ap.add_argument("--endpoint", default="both",
                    choices=("v1", "v2", "both", "step"))
    ap.add_argument("--step-tokens", type=int, default=1)
    ap.add_argument("--step-batch", type=int, default=1)
    ap.add_argument("--step-dtype", default="fp32", choices=("fp32", "bf16"))
    ap.add_argument("--b-key", help="API key of B (ATTND_API_KEY, and sent)")
    ap.add_argument("--b-tls", choices=("tls", "mtls"),
                    help="B over HTTPS; mtls: with a client certificate")
    ap.add_argument("--access-log", action="store_true",
                    help="both with the access log on, and a User-Agent")
    a = ap.parse_args()
    global ACCESS_LOG
    ACCESS_LOG = a.access_log
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
        steps = ((a.step_tokens, a.step_batch, a.step_dtype)
                 if a.endpoint == "step" else None)
        per = {}
        tls = tls_setup(a.b_tls, work)
        for name, attnd, key, t in (("A", a.a, None, ([], None)),
                                    ("B", a.b, a.b_key, tls)):
            i1 = measure(attnd, a.n1, bodies, work, name + "1", key, t, steps)
            i2 = measure(attnd, a.n2, bodies, work, name + "2", key, t, steps)
            per[name] = (i2 - i1) / (a.n2 - a.n1)
            print("%s %s: %d instructions for %d requests, %d for %d: "
                  "%.0f per request" % (name, attnd, i1, a.n1, i2, a.n2,
                                        per[name]))
        print("B / A: %.4f (%+.0f instructions per request, endpoint %s)" %
              (per["B"] / per["A"], per["B"] - per["A"], a.endpoint))


if __name__ == "__main__":
    main()
