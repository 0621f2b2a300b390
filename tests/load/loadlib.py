"""What the load scripts of tests/load/ share: an attnd of their own on
127.0.0.1 (port 0), a small asyncio HTTP/1.1 client, request bodies, the
server's RSS, percentiles, and the verdict line.

Only the Python 3 standard library.  Every wait has a timeout, every loop a
bound; the server is killed when the script ends, however it ends.
"""

import asyncio
import atexit
import json
import os
import re
import signal
import struct
import subprocess
import sys
import tempfile
import time

HOST = "127.0.0.1"
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
_PROCS = []


def _kill_all():
    for p in _PROCS:
        if p.poll() is None:
            p.kill()
            p.wait(timeout=10)


atexit.register(_kill_all)
signal.signal(signal.SIGTERM, lambda *a: sys.exit(143))


class Server:
    """attnd with --port 0 and the given flags; its stderr in a file."""

    def __init__(self, attnd, *flags, start_timeout=20.0):
        fd, self.log_path = tempfile.mkstemp(prefix="attnd-load-",
                                             suffix=".log")
        self._log = os.fdopen(fd, "wb")
        cmd = [attnd, "--host", HOST, "--port", "0", "--models-dir",
               os.path.join(ROOT, "config/models"), "--log-format", "json"]
        self.proc = subprocess.Popen(cmd + list(flags),
                                     stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL,
                                     stderr=self._log, close_fds=True)
        _PROCS.append(self.proc)
        self.pid = self.proc.pid
        self.port = None
        deadline = time.monotonic() + start_timeout
        while time.monotonic() < deadline and self.proc.poll() is None:
            m = re.search(r"listening on 127\.0\.0\.1:(\d+)", self.log())
            if m:
                self.port = int(m.group(1))
                return
            time.sleep(0.05)
        why = self.log()[-500:]
        self.stop()
        raise SystemExit("attnd did not start: " + why)

    def log(self):
        with open(self.log_path, "rb") as f:
            return f.read().decode("utf-8", "replace")

    def rss_kb(self):
        with open("/proc/%d/status" % self.pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        return 0

    def terminate(self, timeout=60.0):
        """SIGTERM and the exit code (None when it had to be killed)."""
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)
            return None

    def stop(self):
        if self.proc.poll() is None:
            self.terminate(30.0)
        self._log.close()
        try:
            os.unlink(self.log_path)
        except OSError:
            pass


def default_attnd():
    return os.path.join(ROOT, "build/src/attnd")


# ---- bodies ----------------------------------------------------------------

def sdpa_json(L, D, seed=1):
    """A v2 JSON body: sdpa with query = key = value [1, 1, L, D]."""
    vals = [((i * 7919 + seed) % 200) / 100.0 - 1.0 for i in range(L * D)]
    inp = [{"name": n, "shape": [1, 1, L, D], "datatype": "FP32",
            "data": vals} for n in ("query", "key", "value")]
    return json.dumps({"inputs": inp,
                       "parameters": {"need_weights": False}}).encode()


def sdpa_binary(L, D, seed=1):
    """A v2 binary body (the header, then three FP32 blobs): (body,
    header length)."""
    n = L * D
    blob = struct.pack("<%df" % n,
                       *[((i * 104729 + seed) % 200) / 100.0 - 1.0
                         for i in range(n)])
    inp = [{"name": nm, "shape": [1, 1, L, D], "datatype": "FP32",
            "parameters": {"binary_data_size": len(blob)}}
           for nm in ("query", "key", "value")]
    hdr = json.dumps({"inputs": inp, "parameters": {"need_weights": False},
                      "outputs": [{"name": "attn_output", "parameters":
                                   {"binary_data": True}}]}).encode()
    return hdr + blob * 3, len(hdr)


# ---- HTTP ------------------------------------------------------------------

class Conn:
    """One keep-alive HTTP/1.1 connection."""

    def __init__(self, port):
        self.port = port
        self.r = self.w = None

    async def open(self, timeout=10.0):
        self.r, self.w = await asyncio.wait_for(
            asyncio.open_connection(HOST, self.port), timeout)

    def close(self):
        if self.w:
            self.w.close()
        self.r = self.w = None

    async def request(self, method, path, body=b"", headers=None,
                      timeout=30.0):
        """(status, headers dict, body); reconnects when needed.  Raises
        OSError / asyncio.TimeoutError / ValueError on a broken exchange."""
        if self.w is None:
            await self.open(timeout)
        h = {"Host": "%s:%d" % (HOST, self.port),
             "Content-Length": str(len(body))}
        h.update(headers or {})
        head = "%s %s HTTP/1.1\r\n%s\r\n" % (
            method, path, "".join("%s: %s\r\n" % kv for kv in h.items()))
        self.w.write(head.encode() + body)
        try:
            return await asyncio.wait_for(self._read(), timeout)
        except BaseException:
            self.close()
            raise

    async def _read(self):
        line = await self.r.readline()
        if not line:
            raise ConnectionError("closed before the status line")
        status = int(line.split()[1])
        hdrs = {}
        while True:
            line = await self.r.readline()
            if line in (b"\r\n", b"\n", b""):
                break
            k, _, v = line.decode("latin-1").partition(":")
            hdrs[k.strip().lower()] = v.strip()
        n = int(hdrs.get("content-length", "0"))
        body = await self.r.readexactly(n) if n else b""
        if hdrs.get("connection", "").lower() == "close":
            self.close()
        return status, hdrs, body


async def timed_get(port, path, timeout=10.0):
    """One GET on a new connection: (status or None, seconds)."""
    c = Conn(port)
    t0 = time.monotonic()
    try:
        st, _, _ = await c.request("GET", path, timeout=timeout)
    except (OSError, asyncio.TimeoutError, ValueError):
        st = None
    finally:
        c.close()
    return st, time.monotonic() - t0


# ---- figures ---------------------------------------------------------------

def pct(values, p):
    if not values:
        return float("nan")
    v = sorted(values)
    return v[min(len(v) - 1, int(round(p / 100.0 * (len(v) - 1))))]


def verdict(name, checks):
    """Print each bound and the result; exit 1 when one failed."""
    ok = True
    for what, good in checks:
        print("  %-60s %s" % (what, "ok" if good else "FAILED"))
        ok &= bool(good)
    print("%s: %s" % (name, "PASS" if ok else "FAIL"))
    sys.exit(0 if ok else 1)


# ---- the health probe, in a process of its own -----------------------------

def _probe_loop(port, path, secs, interval, conn):
    import socket
    out = []
    end = time.monotonic() + secs
    req = ("GET %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n" %
           path).encode()
    while time.monotonic() < end:
        t0 = time.monotonic()
        st = None
        try:
            with socket.create_connection((HOST, port), timeout=10) as s:
                s.sendall(req)
                data = b""
                while b"\r\n" not in data:
                    chunk = s.recv(4096)
                    if not chunk:
                        break
                    data += chunk
                st = int(data.split()[1]) if data else None
        except (OSError, ValueError, IndexError):
            st = None
        out.append((st, (time.monotonic() - t0) * 1000.0))
        time.sleep(interval)
    conn.send(out)
    conn.close()


class Probe:
    """GET path every interval seconds for secs seconds, each on a new
    connection, timed from a separate process (so that the load this
    script makes cannot delay it): result() is [(status, ms)]."""

    def __init__(self, port, secs, path="/v2/health/ready", interval=0.02):
        import multiprocessing as mp
        ctx = mp.get_context("fork")
        self._r, w = ctx.Pipe(duplex=False)
        self._p = ctx.Process(target=_probe_loop,
                              args=(port, path, secs, interval, w),
                              daemon=True)
        self._p.start()
        self._secs = secs

    def result(self):
        out = self._r.recv() if self._r.poll(self._secs + 60) else []
        self._p.join(10)
        return out
