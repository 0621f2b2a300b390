"""The harness of attnd's integration tests: servers, HTTP, the reference
maths, the test registry and the runner.  Imported by every test_*.py of
this folder and by run.py, which runs them all; importing it does nothing
else (no server, no signal handler, no thread until main() runs).

DESIGN
Each test is a function registered with @test in a topic file (test_v1.py,
test_lifecycle.py, ...).  Most share one server with default settings;
tests that need other flags (small limits, one worker, SIGTERM) start their
own with `with Server(...) as s:`.  Every server runs on an ephemeral port
(--port 0); the port is read from the JSON log line "listening on
127.0.0.1:PORT" on its stderr, which goes to a temporary file (never a
pipe, so a chatty server can never block on a full pipe).

Safety: every socket call has a timeout, every loop is bounded, and every
server started here is killed when the run ends, however it ends: the
`with` block kills it on a failure, an atexit hook and SIGINT/SIGTERM
handlers kill what is left, and a watchdog thread ends the whole run after
TOTAL_TIMEOUT_S.  A server that a test stops on purpose must exit 0 after
SIGTERM with no sanitizer report on stderr; that is checked too, so the same
runner catches leaks and UB when pointed at an ASan build.

Only the Python 3 standard library is used (CI has no pip packages).  The
numerical reference is a plain float64 softmax(Q K^T * scale + mask) V; the
PyTorch golden vectors come from tests/golden/.

main() is the command line of run.py and of each topic file:
  [--attnd PATH] [--source-dir DIR] [--file TOPIC]... [-k SUBSTRING]...
  [--seed N] [--keep-logs] [--list]
It prints one line per test ("ok NAME" or "FAIL NAME: reason"), then
"N passed, M failed" alone on the last line; exits 1 if any test failed.
"""

import argparse
import array
import atexit
import http.client
import json
import math
import os
import random
import re
import select
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import traceback

HOST = "127.0.0.1"
START_TIMEOUT_S = 15.0   # server start-up (an ASan build is slower)
STOP_TIMEOUT_S = 30.0    # SIGTERM to exit
HTTP_TIMEOUT_S = 30.0    # any single HTTP exchange
TOTAL_TIMEOUT_S = 300.0  # the whole run, watchdog
SLOW_TARGET_S = 1.5      # a "slow" request computes at least this long
TOL = 1e-5               # |got - ref| <= TOL * (1 + |ref|)


class _Config:
    """The run's settings, filled in by main() from the command line."""
    attnd = None       # the server binary
    src = None         # the repository's root
    models_dir = None  # SRC/config/models
    golden_dir = None  # SRC/tests/golden
    seed = 12345       # of the random test data
    keep_logs = False  # keep each server's stderr file


cfg = _Config()


class Failure(Exception):
    """A failed check; the message is the one-line reason printed."""


def check(cond, msg):
    if not cond:
        raise Failure(msg)


# ---- servers -------------------------------------------------------------

_SERVERS = []          # every Server ever started, for the exit hooks
_SERVERS_LOCK = threading.RLock()  # RLock: the exit hooks may interrupt


def _kill_all():
    """Kill every server still running and remove its log (exit paths)."""
    with _SERVERS_LOCK:
        servers = list(_SERVERS)
    for s in servers:
        try:
            s.cleanup()
        except Exception:  # exit path: best effort, keep killing the rest
            pass


class Server:
    """One attnd process.  Extra flags come after the defaults set here, so
    they win (attnd reads flags left to right).  models_dir=None leaves
    --models-dir out (the config file's or the default then counts); cwd is
    its working directory (default: ours).  journal_stream: JOURNAL_STREAM
    names its log file (device:inode), as systemd names the journal's
    stream, so attnd takes its stderr for the journal.  NOTIFY_SOCKET and
    JOURNAL_STREAM of our own environment are never passed on (a run
    under systemd would tell its manager, or prefix every line)."""

    def __init__(self, *flags, name="attnd", wrap=(), env=None, unset=(),
                 models_dir=True, cwd=None, journal_stream=False):
        self.name = name
        fd, self.log_path = tempfile.mkstemp(prefix="attnd-it-%s-" % name,
                                             suffix=".log")
        st = os.fstat(fd)
        self._log = os.fdopen(fd, "wb")
        # read through our own handle: works even if the file is unlinked
        self._log_r = open(self.log_path, "rb")
        md = ["--models-dir", cfg.models_dir] if models_dir else []
        cmd = list(wrap) + [cfg.attnd, "--host", HOST, "--port", "0"] + md + [
            "--log-format", "json", "--access-log", "true"] + list(flags)
        self.cmd = cmd
        environ = dict(os.environ)
        for k in ("NOTIFY_SOCKET", "JOURNAL_STREAM"):
            environ.pop(k, None)
        if journal_stream:
            environ["JOURNAL_STREAM"] = "%d:%d" % (st.st_dev, st.st_ino)
        environ.update(env or {})
        for k in unset:
            environ.pop(k, None)
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL,
                                     stderr=self._log, close_fds=True,
                                     env=environ, cwd=cwd)
        with _SERVERS_LOCK:
            _SERVERS.append(self)
        self.port = None
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            m = re.search(r"listening on 127\.0\.0\.1:(\d+)", self.log_text())
            if m:
                self.port = int(m.group(1))
                break
            if self.proc.poll() is not None:
                break
            time.sleep(0.02)
        if self.port is None:
            rc = self.proc.poll()
            self.kill()
            tail = self.log_tail()
            self.cleanup()
            raise Failure("%s did not start (rc=%s): %s" % (name, rc, tail))

    def log_text(self):
        try:
            self._log_r.seek(0)
            return self._log_r.read().decode("utf-8", "replace")
        except (OSError, ValueError):
            return ""

    def log_tail(self, n=3):
        lines = [l for l in self.log_text().splitlines() if l.strip()]
        return " | ".join(lines[-n:])

    def log_json(self):
        out = []
        for line in self.log_text().splitlines():
            line = line.strip()
            if line.startswith("{"):
                try:
                    out.append(json.loads(line))
                except ValueError:
                    pass
        return out

    def sanitizer_report(self):
        text = self.log_text()
        for pat in ("AddressSanitizer", "LeakSanitizer", "runtime error:",
                    "ThreadSanitizer"):
            i = text.find(pat)
            if i >= 0:
                return text[max(0, i - 100):i + 300].replace("\n", " | ")
        return None

    def alive(self):
        return self.proc.poll() is None

    def signal(self, sig):
        if self.alive():
            self.proc.send_signal(sig)

    def wait(self, timeout):
        """Exit code, or raise Failure if it is still running after
        timeout seconds (it is then killed)."""
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise Failure("%s still running %.0fs after SIGTERM" %
                          (self.name, timeout))

    def stop_checked(self):
        """SIGTERM; the server must exit 0 without a sanitizer report."""
        self.signal(signal.SIGTERM)
        rc = self.wait(STOP_TIMEOUT_S)
        check(rc == 0, "%s exited with %d after SIGTERM: %s" %
              (self.name, rc, self.log_tail()))
        rep = self.sanitizer_report()
        check(rep is None, "%s: sanitizer report: %s" % (self.name, rep))

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass

    def cleanup(self):
        self.kill()
        for f in (self._log, self._log_r):
            try:
                f.close()
            except OSError:
                pass
        if not cfg.keep_logs:
            try:
                os.unlink(self.log_path)
            except OSError:
                pass
        with _SERVERS_LOCK:
            if self in _SERVERS:
                _SERVERS.remove(self)

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        try:
            if exc_type is None:
                self.stop_checked()
        finally:
            self.cleanup()
        return False


_shared = None
_shared_deaths = []


def shared():
    """The server with default settings that most tests use.  If it died,
    that is remembered (the last test reports it) and a new one starts."""
    global _shared
    if _shared is not None and not _shared.alive():
        _shared_deaths.append("rc=%s: %s" % (_shared.proc.returncode,
                                             _shared.log_tail()))
        _shared.cleanup()
        _shared = None
    if _shared is None:
        _shared = Server(name="shared")
    return _shared


def run_attnd(*args, env=None, cwd=None, timeout=30):
    """attnd run to its end with args: (rc, stdout, stderr as text)."""
    r = subprocess.run([cfg.attnd] + list(args), capture_output=True,
                       timeout=timeout, cwd=cwd,
                       env=dict(os.environ, **(env or {})),
                       stdin=subprocess.DEVNULL)
    return (r.returncode, r.stdout.decode("utf-8", "replace"),
            r.stderr.decode("utf-8", "replace"))


def exits_cleanly(s, what):
    """s, already told to stop, exits 0 without a sanitizer report."""
    rc = s.wait(STOP_TIMEOUT_S)
    check(rc == 0, "%s: exit code %d: %s" % (what, rc, s.log_tail()))
    rep = s.sanitizer_report()
    check(rep is None, "%s: sanitizer report: %s" % (what, rep))


# ---- HTTP ----------------------------------------------------------------

class Resp:
    def __init__(self, status, headers, body):
        self.status = status
        self.headers = headers  # lower-case names
        self.body = body

    def header(self, name):
        return self.headers.get(name.lower())

    def json(self):
        try:
            return json.loads(self.body)
        except ValueError:
            raise Failure("HTTP %d body is not JSON: %r" %
                          (self.status, self.body[:200]))

    def __repr__(self):
        return "HTTP %d %r" % (self.status, self.body[:300])


_JSON = object()


def to_json_bytes(obj):
    return json.dumps(obj, separators=(",", ":"), allow_nan=False).encode()


def request(port, method, path, body=None, headers=None, ctype=_JSON,
            timeout=HTTP_TIMEOUT_S):
    """One HTTP exchange on a fresh connection.  body: bytes, str, or an
    object sent as JSON.  ctype: Content-Type for a body (None = none)."""
    hdrs = {}
    if body is not None:
        if isinstance(body, str):
            body = body.encode()
        elif not isinstance(body, (bytes, bytearray)):
            body = to_json_bytes(body)
        if ctype is _JSON:
            hdrs["Content-Type"] = "application/json"
    if ctype not in (_JSON, None):
        hdrs["Content-Type"] = ctype
    hdrs.update(headers or {})
    conn = http.client.HTTPConnection(HOST, port, timeout=timeout)
    try:
        conn.request(method, path, body=body, headers=hdrs)
        r = conn.getresponse()
        data = r.read()
        return Resp(r.status, {k.lower(): v for k, v in r.getheaders()}, data)
    finally:
        conn.close()


class Pending:
    """A request sent in full whose answer is read later."""

    def __init__(self, port, path, body, headers, timeout=60.0):
        self.conn = http.client.HTTPConnection(HOST, port, timeout=timeout)
        self.conn.request("POST", path, body=body, headers=headers)

    def answered(self):
        """True when response bytes are waiting (does not block)."""
        r, _, _ = select.select([self.conn.sock], [], [], 0)
        return bool(r)

    def response(self):
        try:
            r = self.conn.getresponse()
            data = r.read()
            return Resp(r.status, {k.lower(): v for k, v in r.getheaders()},
                        data)
        finally:
            self.conn.close()

    def close(self):
        self.conn.close()


def free_port():
    """A TCP port of 127.0.0.1 that was free a moment ago (for flags such
    as --metrics-port, which take a number)."""
    s = socket.socket()
    try:
        s.bind((HOST, 0))
        return s.getsockname()[1]
    finally:
        s.close()


def raw_exchange(port, chunks, timeout=10.0, half_close=False):
    """Send raw bytes (a list of chunks), with half_close then shut down
    the sending side, and read one HTTP/1.1 response with a
    Content-Length.  Returns Resp.  Bounded in bytes and time.  A server
    may answer and close before the request is all sent (a 413 at the
    byte that passes the limit): the sending stops there (EPIPE, reset)
    and the answer is read."""
    s = socket.create_connection((HOST, port), timeout=timeout)
    try:
        try:
            for c in chunks:
                s.sendall(c)
            if half_close:
                s.shutdown(socket.SHUT_WR)
        except (BrokenPipeError, ConnectionResetError):
            pass  # answered early: read what it said
        buf = b""
        deadline = time.monotonic() + timeout
        while b"\r\n\r\n" not in buf:
            check(time.monotonic() < deadline and len(buf) < 65536,
                  "no complete response head: %r" % buf[:200])
            part = s.recv(65536)
            check(part, "connection closed before a response: %r" % buf[:200])
            buf += part
        head, body = buf.split(b"\r\n\r\n", 1)
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        headers = {}
        for l in lines[1:]:
            k, _, v = l.partition(":")
            headers[k.strip().lower()] = v.strip()
        n = int(headers.get("content-length", "0"))
        while len(body) < n:
            check(time.monotonic() < deadline, "response body cut short")
            part = s.recv(65536)
            check(part, "connection closed inside the body")
            body += part
        return Resp(status, headers, body[:n])
    finally:
        s.close()


def half_body(port, request_id, chunked=False):
    """A /v1/attention POST whose body stops after 13 of its 1000 bytes
    (chunked: after a first chunk of 13): the open socket (the caller
    closes it)."""
    s = socket.create_connection((HOST, port), timeout=5)
    framing = (b"Transfer-Encoding: chunked\r\n\r\nd\r\n" if chunked else
               b"Content-Length: 1000\r\n\r\n")
    s.sendall(b"POST /v1/attention HTTP/1.1\r\nHost: t\r\n"
              b"Content-Type: application/json\r\n"
              b"X-Request-Id: " + request_id.encode() + b"\r\n" + framing +
              b'{"query": [[1' + (b"\r\n" if chunked else b""))
    return s


def metric(port, name, **labels):
    """The sum of the samples of metric `name` on /metrics whose labels
    include `labels` (0 when there is none)."""
    r = request(port, "GET", "/metrics", timeout=10)
    expect_status(r, 200, "/metrics")
    total = 0.0
    for line in r.body.decode("utf-8", "replace").splitlines():
        m = re.match(r"([a-z_]+)(?:\{(.*)\})? (\S+)$", line)
        if not m or m.group(1) != name:
            continue
        have = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2) or ""))
        if all(have.get(k) == str(v) for k, v in labels.items()):
            total += float(m.group(3))
    return total


def wait_metric(port, name, want, secs=20, **labels):
    """Until metric(name, labels) == want, polled (bounded)."""
    deadline = time.monotonic() + secs
    while True:
        got = metric(port, name, **labels)
        if got == want:
            return
        check(time.monotonic() < deadline, "%s%r stayed %s, not %s" %
              (name, labels, got, want))
        time.sleep(0.02)


def wait_log(s, pred, what, timeout=5.0):
    """The first JSON log line for which pred is true, within timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for line in s.log_json():
            if pred(line):
                return line
        time.sleep(0.05)
    check(False, "no log line %s: %s" % (what, s.log_tail()))


def openssl(*args):
    subprocess.run(["openssl"] + list(args), check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   timeout=60)


def make_pki(d):
    """A CA, a server certificate for 127.0.0.1 it signs (extendedKeyUsage
    serverAuth), client certificates it signs (client: no extendedKeyUsage,
    client-eku: clientAuth, dual: serverAuth and clientAuth), and a client
    certificate of another CA."""
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"]
    f = lambda n: os.path.join(d, n)
    for ca in ("ca", "other-ca"):
        openssl("req", "-x509", *ec, "-keyout", f(ca + ".key"), "-out",
                f(ca + ".crt"), "-days", "2", "-subj", "/CN=attnd test " + ca)
    exts = {"ext": "subjectAltName=IP:127.0.0.1,DNS:localhost\n"
                   "extendedKeyUsage=serverAuth\n",
            "ext-client": "extendedKeyUsage=clientAuth\n",
            "ext-dual": "extendedKeyUsage=serverAuth,clientAuth\n"}
    for name, text in exts.items():
        with open(f(name), "w") as e:
            e.write(text)
    for name, ca, ext in (("server", "ca", ["-extfile", f("ext")]),
                          ("client", "ca", []), ("stranger", "other-ca", []),
                          ("client-eku", "ca", ["-extfile", f("ext-client")]),
                          ("dual", "ca", ["-extfile", f("ext-dual")])):
        openssl("req", *ec, "-keyout", f(name + ".key"), "-out",
                f(name + ".csr"), "-subj", "/CN=" + name)
        openssl("x509", "-req", "-in", f(name + ".csr"), "-CA", f(ca + ".crt"),
                "-CAkey", f(ca + ".key"), "-CAcreateserial", "-out",
                f(name + ".crt"), "-days", "2", *ext)
    return f


def until_not_503(send, secs):
    """send() again, for at most secs, while it answers 503: room in
    max_total_body_bytes comes back once attnd has let go of a body or an
    answer, which a client cannot see.  Returns the last Resp."""
    deadline = time.monotonic() + secs
    while True:
        r = send()
        if r.status != 503 or time.monotonic() > deadline:
            return r
        time.sleep(0.05)


def expect_status(r, status, what=""):
    check(r.status == status, "%s: expected HTTP %d, got %r" %
          (what or "request", status, r))


def expect_error(r, status, *needles, what=""):
    """status, a JSON {"error": "..."} body, and each needle (any case) in
    the message."""
    expect_status(r, status, what)
    ct = r.header("content-type") or ""
    check(ct.startswith("application/json"),
          "%s: error Content-Type is %r" % (what, ct))
    j = r.json()
    check(isinstance(j, dict) and isinstance(j.get("error"), str)
          and j["error"], "%s: body is not {\"error\": msg}: %r" % (what, j))
    for n in needles:
        check(n.lower() in j["error"].lower(),
              "%s: error message does not mention %r: %r" %
              (what, n, j["error"]))
    return j["error"]


# ---- tensors and floats --------------------------------------------------

def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def f32bits(x):
    return struct.pack("<f", x)


def numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def pack(fmt, vals):
    """Little-endian bytes: fmt 'f' FP32, 'e' FP16, 'd' FP64, 'i' INT32,
    'q' INT64, '?' BOOL."""
    return struct.pack("<%d%s" % (len(vals), fmt), *vals)


def nested(flat, shape):
    if not shape:
        return flat[0]
    if len(shape) == 1:
        return list(flat[:shape[0]])
    step = numel(shape[1:])
    return [nested(flat[i * step:(i + 1) * step], shape[1:])
            for i in range(shape[0])]


def flatten(x):
    if isinstance(x, list):
        out = []
        for e in x:
            out.extend(flatten(e))
        return out
    return [x]


def rand_f32(rng, n, lo=-1.0, hi=1.0):
    return [f32(rng.uniform(lo, hi)) for _ in range(n)]


def rows(flat, off, n, d):
    return [flat[off + i * d: off + (i + 1) * d] for i in range(n)]


def transpose(flat, r, c):
    """[r,c] row-major -> [c,r] row-major."""
    return [flat[i * c + j] for j in range(c) for i in range(r)]


def assert_close(got, ref, what, tol=TOL):
    check(len(got) == len(ref), "%s: %d values, expected %d" %
          (what, len(got), len(ref)))
    for i, (g, r) in enumerate(zip(got, ref)):
        ok = isinstance(g, (int, float)) and abs(g - r) <= tol * (1 + abs(r))
        check(ok, "%s[%d]: got %r, expected %r (tol %g*(1+|ref|))" %
              (what, i, g, r, tol))


def assert_bits(a, b, what):
    check(len(a) == len(b), "%s: %d vs %d values" % (what, len(a), len(b)))
    for i, (x, y) in enumerate(zip(a, b)):
        check(x is not None and y is not None and f32bits(x) == f32bits(y),
              "%s[%d]: %r vs %r are not the same float32" % (what, i, x, y))


def ref_head(q, k, v, scale, causal=False, add=None, blocked=None, pad=None):
    """float64 softmax(q k^T * scale + add) v for one head.
    q: Lq rows, k: Lk rows, v: Lk rows.  add: Lq x Lk floats (-inf blocks);
    blocked: Lq x Lk, True = blocked; pad: Lk, True = padding; causal is
    bottom-right aligned: key j is visible to query i iff j <= i + Lk - Lq.
    A row with every key blocked gives output 0 and weights 0 (the engine's
    contract).  Returns (out rows, weight rows)."""
    lq, lk, dv = len(q), len(k), len(v[0])
    out, wts = [], []
    for i in range(lq):
        s = []
        for j in range(lk):
            x = None
            if not ((causal and j > i + lk - lq) or
                    (blocked is not None and blocked[i][j]) or
                    (pad is not None and pad[j])):
                x = sum(a * b for a, b in zip(q[i], k[j])) * scale
                if add is not None:
                    x += add[i][j]
                if x == -math.inf:
                    x = None
            s.append(x)
        live = [x for x in s if x is not None]
        if not live:
            out.append([0.0] * dv)
            wts.append([0.0] * lk)
            continue
        m = max(live)
        e = [math.exp(x - m) if x is not None else 0.0 for x in s]
        z = sum(e)
        p = [x / z for x in e]
        out.append([sum(p[j] * v[j][t] for j in range(lk)) for t in range(dv)])
        wts.append(p)
    return out, wts


def decode_v2(r, what="v2 response"):
    """(header JSON, {name: {"shape", "data", "binary", "datatype"}}) of a
    200 v2 response, JSON or binary (Inference-Header-Content-Length)."""
    expect_status(r, 200, what)
    hl = r.header("inference-header-content-length")
    if hl is None:
        j = json.loads(r.body)
        off = len(r.body)
    else:
        n = int(hl)
        check(0 < n <= len(r.body), "%s: header length %d, body %d" %
              (what, n, len(r.body)))
        j = json.loads(r.body[:n])
        off = n
    outs = {}
    for o in j.get("outputs", []):
        size = (o.get("parameters") or {}).get("binary_data_size")
        check(o.get("datatype") == "FP32", "%s: output %s datatype %r" %
              (what, o.get("name"), o.get("datatype")))
        if size is not None:
            check("data" not in o, "%s: binary output %s also has data" %
                  (what, o["name"]))
            check(size == 4 * numel(o["shape"]),
                  "%s: %s binary_data_size %d for shape %r" %
                  (what, o["name"], size, o["shape"]))
            blob = r.body[off:off + size]
            check(len(blob) == size, "%s: %s blob cut short" %
                  (what, o["name"]))
            off += size
            data = list(struct.unpack("<%df" % (size // 4), blob))
            outs[o["name"]] = dict(shape=o["shape"], data=data, binary=True)
        else:
            data = flatten(o["data"])
            check(len(data) == numel(o["shape"]), "%s: %s has %d values for "
                  "shape %r" % (what, o["name"], len(data), o["shape"]))
            outs[o["name"]] = dict(shape=o["shape"], data=data, binary=False)
    check(off == len(r.body), "%s: %d bytes after the last blob" %
          (what, len(r.body) - off))
    return j, outs


def v2_in(name, shape, data, dtype="FP32"):
    return {"name": name, "datatype": dtype, "shape": list(shape),
            "data": data}


_PACK_FMT = {"FP32": "f", "FP16": "e", "FP64": "d", "INT32": "i",
             "INT64": "q", "BOOL": "?"}


def v2_binary(inputs, params=None, outputs=None, extra=None):
    """A binary-extension body.  inputs: dicts with name, datatype, shape and
    either "raw" (bytes sent as a blob), "values" (packed here by datatype)
    or "data" (sent as JSON).  Returns (body, headers)."""
    hdr_inputs, blobs = [], []
    for x in inputs:
        d = {"name": x["name"], "datatype": x["datatype"],
             "shape": list(x["shape"])}
        if "data" in x:
            d["data"] = x["data"]
        else:
            raw = x.get("raw")
            if raw is None:
                raw = pack(_PACK_FMT[x["datatype"]], x["values"])
            d["parameters"] = {"binary_data_size": x.get("size", len(raw))}
            blobs.append(raw)
        hdr_inputs.append(d)
    header = {"inputs": hdr_inputs}
    if params is not None:
        header["parameters"] = params
    if outputs is not None:
        header["outputs"] = outputs
    header.update(extra or {})
    hdr = to_json_bytes(header)
    return hdr + b"".join(blobs), {
        "Content-Type": "application/octet-stream",
        "Inference-Header-Content-Length": str(len(hdr))}


def v2_infer(port, model, inputs, params=None, outputs=None, extra=None,
             headers=None):
    body = {"inputs": inputs}
    if params is not None:
        body["parameters"] = params
    if outputs is not None:
        body["outputs"] = outputs
    body.update(extra or {})
    return request(port, "POST", "/v2/models/%s/infer" % model, body,
                   headers=headers)


def sdpa_inputs(rng, shape_q, shape_k, shape_v):
    q = rand_f32(rng, numel(shape_q))
    k = rand_f32(rng, numel(shape_k))
    v = rand_f32(rng, numel(shape_v))
    return q, k, v


def v2_sdpa_case(rng):
    q, k, v = sdpa_inputs(rng, [2, 3, 4], [2, 5, 4], [2, 5, 3])
    return q, k, v


def sdpa_json_vs_binary_data(seed):
    rng = random.Random(seed)
    shp_q, shp_k, shp_v = [1, 2, 3, 8], [1, 2, 6, 8], [1, 2, 6, 4]
    q, k, v = sdpa_inputs(rng, shp_q, shp_k, shp_v)
    return (shp_q, q), (shp_k, k), (shp_v, v)


# ---- /v1 ------------------------------------------------------------------

def v1(port, body, headers=None):
    return request(port, "POST", "/v1/attention", body, headers=headers)


def v1_ok(r, what):
    expect_status(r, 200, what)
    j = r.json()
    check("output" in j and "shape" in j, "%s: answer keys %r" %
          (what, sorted(j)))
    got = flatten(j["output"])
    check(len(got) == numel(j["shape"]["output"]),
          "%s: output has %d values for shape %r" %
          (what, len(got), j["shape"]["output"]))
    return j


def v1_reference(q, k, v, B, H, Lq, Lk, Dk, Dv, scale=None, causal=False,
                 add=None, blocked=None, pad=None, avg=False):
    """The /v1 sdpa mapping: columns h*Dk.. of [B,L,H*Dk] are head h.
    q, k, v flat; returns (output flat [B,Lq,H*Dv],
    weights flat [B,H,Lq,Lk] or [B,Lq,Lk] when avg)."""
    if scale is None:
        scale = 1 / math.sqrt(Dk)
    out = [0.0] * (B * Lq * H * Dv)
    wts = [0.0] * (B * H * Lq * Lk)
    for b in range(B):
        for h in range(H):
            qh = [q[(b * Lq + i) * H * Dk + h * Dk:
                    (b * Lq + i) * H * Dk + (h + 1) * Dk] for i in range(Lq)]
            kh = [k[(b * Lk + j) * H * Dk + h * Dk:
                    (b * Lk + j) * H * Dk + (h + 1) * Dk] for j in range(Lk)]
            vh = [v[(b * Lk + j) * H * Dv + h * Dv:
                    (b * Lk + j) * H * Dv + (h + 1) * Dv] for j in range(Lk)]
            o, w = ref_head(qh, kh, vh, scale, causal, add, blocked,
                            pad[b] if pad else None)
            for i in range(Lq):
                for t in range(Dv):
                    out[(b * Lq + i) * H * Dv + h * Dv + t] = o[i][t]
                for j in range(Lk):
                    wts[((b * H + h) * Lq + i) * Lk + j] = w[i][j]
    if avg:
        wts = [sum(wts[((b * H + h) * Lq + i) * Lk + j] for h in range(H)) / H
               for b in range(B) for i in range(Lq) for j in range(Lk)]
    return out, wts


def v1_case(rng, B, H, Lq, Lk, Dk, Dv, cross=True, mask=None, kpm=False,
            causal=False, scale=None, avg=None, need=None):
    """(request body, expected output, expected weights or None, shapes)."""
    lead = [B] if B else []
    bb = B or 1
    q = rand_f32(rng, bb * Lq * H * Dk)
    if cross:
        k = rand_f32(rng, bb * Lk * H * Dk)
        v = rand_f32(rng, bb * Lk * H * Dv)
    else:
        check(Lk == Lq and Dv == Dk, "self-attention case needs Lk=Lq")
        k, v = q, q
    body = {"query": nested(q, lead + [Lq, H * Dk])}
    if cross:
        body["key"] = nested(k, lead + [Lk, H * Dk])
        body["value"] = nested(v, lead + [Lk, H * Dv])
    if H != 1 or rng.random() < 0.5:
        body["num_heads"] = H
    add = blocked = pad = None
    if mask == "bool":
        blocked = [[rng.random() < 0.3 for _ in range(Lk)] for _ in range(Lq)]
        body["attn_mask"] = blocked
    elif mask == "float":
        add = [[f32(rng.uniform(-2, 2)) for _ in range(Lk)]
               for _ in range(Lq)]
        body["attn_mask"] = add
    if kpm:
        pad = []
        for _ in range(bb):
            n = rng.randint(0, Lk - 1)
            pad.append([j >= Lk - n for j in range(Lk)])
        body["key_padding_mask"] = pad if B else pad[0]
    if causal:
        body["causal"] = True
    if scale is not None:
        body["scale"] = scale
    if avg is not None:
        body["average_attn_weights"] = avg
    if need is not None:
        body["need_weights"] = need
    out, w = v1_reference(q, k, v, bb, H, Lq, Lk, Dk, Dv, scale, causal, add,
                          blocked, pad, bool(avg))
    wshape = lead + ([Lq, Lk] if avg else [H, Lq, Lk])
    return body, out, (None if need is False else w), \
        lead + [Lq, H * Dv], wshape


def v1_check(port, case, what):
    body, out, w, oshape, wshape = case
    j = v1_ok(v1(port, body), what)
    check(j["shape"]["output"] == oshape, "%s: output shape %r, expected %r"
          % (what, j["shape"]["output"], oshape))
    assert_close(flatten(j["output"]), out, what + " output")
    if w is None:
        check("attn_weights" not in j, "%s: attn_weights present with "
              "need_weights false" % what)
        check("attn_weights" not in j["shape"], "%s: shape.attn_weights "
              "present with need_weights false" % what)
    else:
        check("attn_weights" in j, "%s: no attn_weights" % what)
        check(j["shape"].get("attn_weights") == wshape,
              "%s: attn_weights shape %r, expected %r" %
              (what, j["shape"].get("attn_weights"), wshape))
        assert_close(flatten(j["attn_weights"]), w, what + " attn_weights")
    return j


# ---- slow requests -------------------------------------------------------
#
# A "slow" request is v2 sdpa with a long sequence and a tiny head size:
# compute grows with L^2 while the body grows with L, so the body is small
# (read by the server at once) and the work is long.  Key and value have one
# head (GQA) so that extra query heads add little to the body.

SLOW_D = 8
_slow_cache = {}
_slow_dims = None  # (L, heads) after calibration


def slow_request_body(n, heads):
    """(body, headers, out_shape) of v2 sdpa on a query of `heads` heads
    and key and value of one, all of sequence length n and head size
    SLOW_D, sent as binary; its answer is attn_output alone, binary.
    tests/deploy/client.py uses it too."""
    if (n, heads) in _slow_cache:
        return _slow_cache[(n, heads)]
    base = array.array("f", [((i * 37) % 101 - 50) / 500.0
                             for i in range(1009)])

    def blob(count):
        a = (base * (count // len(base) + 1))[:count]
        if sys.byteorder != "little":
            a.byteswap()
        return a.tobytes()

    body, hdrs = v2_binary(
        [{"name": "query", "datatype": "FP32", "shape": [1, heads, n, SLOW_D],
          "raw": blob(heads * n * SLOW_D)},
         {"name": "key", "datatype": "FP32", "shape": [1, 1, n, SLOW_D],
          "raw": blob(n * SLOW_D)},
         {"name": "value", "datatype": "FP32", "shape": [1, 1, n, SLOW_D],
          "raw": blob(n * SLOW_D)}],
        params={"need_weights": False, "binary_data_output": True})
    _slow_cache[(n, heads)] = (body, hdrs, [1, heads, n, SLOW_D])
    return _slow_cache[(n, heads)]


def slow_request(port):
    """(body, headers, out_shape) of a v2 sdpa request that computes for
    about SLOW_TARGET_S or more on this machine and build (an ASan build is
    several times slower).  Measured once on `port`, a server with an idle
    worker, then L and the head count are scaled."""
    global _slow_dims
    if _slow_dims is None:
        n0 = 8192  # big enough to leave the caches, as the real one will
        body, hdrs, _ = slow_request_body(n0, 1)
        t0 = time.monotonic()
        r = request(port, "POST", "/v2/models/sdpa/infer", body, headers=hdrs,
                    timeout=120)
        dt = max(time.monotonic() - t0, 1e-3)
        expect_status(r, 200, "calibrating the slow request")
        per = dt / (n0 * n0)  # seconds per query-key pair and head
        n = int(math.sqrt(SLOW_TARGET_S / per)) // 256 * 256 + 256
        n = max(n0, min(16384, n))
        heads = max(1, min(8, int(math.ceil(SLOW_TARGET_S / (per * n * n)))))
        _slow_dims = (n, heads)
    return slow_request_body(*_slow_dims)


def check_slow_answer(r, shape, what):
    _, outs = decode_v2(r, what)
    check(list(outs) == ["attn_output"], "%s: outputs %r" % (what, list(outs)))
    check(outs["attn_output"]["shape"] == shape, "%s: shape %r" %
          (what, outs["attn_output"]["shape"]))


def small_v2_body(timeout_us=None, id_=None):
    body = {"inputs": [v2_in("query", [2, 2], [1, 0, 0, 1]),
                       v2_in("key", [2, 2], [1, 0, 0, 1]),
                       v2_in("value", [2, 2], [1, 2, 3, 4])]}
    if timeout_us is not None:
        body["parameters"] = {"timeout": timeout_us}
    if id_ is not None:
        body["id"] = id_
    return to_json_bytes(body)


def slow_running(s):
    """A slow request sent to s, running, not answered yet: (Pending,
    its output shape)."""
    body, hdrs, shape = slow_request(s.port)
    slow = Pending(s.port, "/v2/models/sdpa/infer", body, hdrs)
    time.sleep(0.15)
    check(not slow.answered(), "the slow request finished too soon for "
          "this test")
    return slow, shape


# ---- the test registry ---------------------------------------------------

TESTS = []  # (topic, function), in the order the topic files define them


def topic_of(path):
    """The topic of a test file: "v1" for tests/integration/test_v1.py
    (also accepts "test_v1", "test_v1.py" and "v1")."""
    name = os.path.basename(path)
    if name.endswith(".py"):
        name = name[:-3]
    return name[5:] if name.startswith("test_") else name


def test(fn):
    """Register fn as a test of the file that defines it.  It passes unless
    it raises; test names are unique across all the files."""
    mod = sys.modules.get(fn.__module__)
    topic = topic_of(getattr(mod, "__file__", None) or fn.__module__)
    for t, f in TESTS:
        if f.__name__ == fn.__name__:
            raise RuntimeError("two tests named %s: in test_%s.py and in "
                               "test_%s.py" % (fn.__name__, t, topic))
    TESTS.append((topic, fn))
    return fn


def shared_server_exits_cleanly():
    """Run last: the shared server never died and exits 0 on SIGTERM."""
    global _shared
    check(not _shared_deaths, "the shared server died during the run: %s" %
          "; ".join(_shared_deaths))
    if _shared is None:
        return
    s, _shared = _shared, None
    try:
        check(s.alive(), "the shared server died: rc=%s: %s" %
              (s.proc.returncode, s.log_tail()))
        s.stop_checked()
    finally:
        s.cleanup()


# ---- runner --------------------------------------------------------------

_results = {"passed": 0, "failed": 0}
_print_lock = threading.Lock()


def _summary_and_exit(code):
    with _print_lock:
        print("%d passed, %d failed" % (_results["passed"],
                                        _results["failed"]), flush=True)
    os._exit(code)


def _watchdog(remaining):
    with _print_lock:
        print("FAIL watchdog: the run took more than %.0fs; killing the "
              "servers" % TOTAL_TIMEOUT_S, flush=True)
    _results["failed"] += 1 + remaining()
    _kill_all()
    _summary_and_exit(1)


def _on_signal(sig, frame):
    _kill_all()
    with _print_lock:
        print("FAIL interrupted: signal %d" % sig, flush=True)
    _results["failed"] += 1
    _summary_and_exit(130)


def _one_line(e):
    if isinstance(e, Failure):
        msg = str(e)
    else:
        tb = traceback.extract_tb(e.__traceback__)
        where = ("%s:%d" % (os.path.basename(tb[-1].filename), tb[-1].lineno)
                 if tb else "?")
        msg = "%s: %s (at %s)" % (type(e).__name__, e, where)
    msg = " ".join(msg.split())
    return msg if len(msg) <= 600 else msg[:600] + "..."


def run_one(name, fn):
    t0 = time.monotonic()
    try:
        fn()
    except Exception as e:  # any error is this test's failure
        _results["failed"] += 1
        line = "FAIL %s: %s" % (name, _one_line(e))
    else:
        _results["passed"] += 1
        line = "ok   %s (%.2fs)" % (name, time.monotonic() - t0)
    with _print_lock:
        print(line, flush=True)


def main(import_failures=()):
    """The command line of run.py and of each test file alone: run the
    tests registered so far (those the options select), the shared
    server's clean exit last.  import_failures: (file, reason) of the test
    files run.py could not import, each reported as a failure."""
    here = os.path.dirname(os.path.abspath(__file__))
    doc = getattr(sys.modules["__main__"], "__doc__", None) or __doc__
    ap = argparse.ArgumentParser(description=" ".join(
        doc.split("\n\n")[0].split()))
    ap.add_argument("--source-dir", default=os.path.dirname(
        os.path.dirname(here)), help="repository root (default: ../..)")
    ap.add_argument("--attnd", help="server binary (default: "
                    "SOURCE/build/src/attnd)")
    ap.add_argument("--file", action="append", default=[], metavar="TOPIC",
                    help="run only the tests of test_TOPIC.py (repeatable)")
    ap.add_argument("-k", action="append", default=[], metavar="SUBSTRING",
                    help="run only tests whose name contains SUBSTRING")
    ap.add_argument("--seed", type=int, default=cfg.seed,
                    help="seed of the random test data")
    ap.add_argument("--keep-logs", action="store_true",
                    help="keep the servers' stderr files in $TMPDIR")
    ap.add_argument("--list", action="store_true", help="list the tests")
    a = ap.parse_args()
    cfg.src = os.path.abspath(a.source_dir)
    cfg.attnd = os.path.abspath(a.attnd or os.path.join(cfg.src, "build",
                                                        "src", "attnd"))
    cfg.models_dir = os.path.join(cfg.src, "config", "models")
    cfg.golden_dir = os.path.join(cfg.src, "tests", "golden")
    cfg.seed = a.seed
    cfg.keep_logs = a.keep_logs

    topics = [topic_of(f) for f in a.file]
    unknown = [t for t in topics if t not in {t for t, _ in TESTS}]
    if unknown:
        ap.error("--file %s: no such test file (there are: %s)" %
                 (", ".join(unknown),
                  ", ".join(sorted({t for t, _ in TESTS}))))
    tests = [(fn.__name__, fn) for t, fn in TESTS
             if (not topics or t in topics) and
             (not a.k or any(k in fn.__name__ for k in a.k))]
    for path, why in import_failures:
        _results["failed"] += 1
        print("FAIL import %s: %s" % (os.path.basename(path), why),
              flush=True)
    if a.list:
        for n, _ in tests:
            print(n)
        return 0 if not import_failures else 1
    for path, what in ((cfg.attnd, "attnd binary"),
                       (cfg.models_dir, "models dir"),
                       (cfg.golden_dir, "golden dir")):
        if not os.path.exists(path):
            print("FAIL setup: %s not found: %s" % (what, path), flush=True)
            print("%d passed, %d failed" % (0, _results["failed"] + 1),
                  flush=True)
            return 1

    atexit.register(_kill_all)
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _on_signal)
    done = [0]
    dog = threading.Timer(TOTAL_TIMEOUT_S, _watchdog,
                          args=(lambda: len(tests) - done[0],))
    dog.daemon = True
    dog.start()
    t0 = time.monotonic()
    try:
        for name, fn in tests:
            run_one(name, fn)
            done[0] += 1
        if _shared is not None or _shared_deaths:
            run_one("shared_server_exits_cleanly", shared_server_exits_cleanly)
    finally:
        dog.cancel()
        _kill_all()
    with _print_lock:
        print("# %.1fs, seed %d, attnd %s" % (time.monotonic() - t0,
                                              cfg.seed, cfg.attnd),
              flush=True)
        print("%d passed, %d failed" % (_results["passed"],
                                        _results["failed"]), flush=True)
    return 0 if _results["failed"] == 0 else 1
