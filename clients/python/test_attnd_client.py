#!/usr/bin/python3
"""Tests of attnd_client.py against a real attnd (build/src/attnd by
default), started here on 127.0.0.1 with an ephemeral port and stopped at
the end (SIGTERM: it must exit 0 without a sanitizer report).  Every
answer is checked against a numpy float64 reference: causal attention over
the session's whole history, and its log-sum-exp.

Usage: /usr/bin/python3 clients/python/test_attnd_client.py [--attnd PATH]
       [-k SUBSTRING]
Prints "ok NAME" or "FAIL NAME: reason" a test, then "N passed, M failed"
alone on the last line (as tests/integration/run.py; scripts/test-summary.py
counts it); exits 1 if any failed.  Needs numpy; without it, exits 77 (a
skip for meson test).  The whole run
is bounded (WATCHDOG_S): past it every server is killed and the run fails.
"""

import argparse
import os
import re
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback

try:
    import numpy as np
except ImportError:
    print("SKIP: numpy is not installed for %s" % sys.executable)
    sys.exit(77)

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import attnd_client  # noqa: E402
from attnd_client import AttndError, Client  # noqa: E402

WATCHDOG_S = 120.0
START_S = 15.0
TOL32 = 1e-5      # fp32 storage: |got - ref| <= TOL (1 + |ref|)
TOL16 = 2e-2      # bf16/fp16 storage

_servers = []


class Server:
    """One attnd on 127.0.0.1, port read from its log."""

    def __init__(self, attnd, *flags):
        self.dir = tempfile.mkdtemp(prefix="attnd-client-test-")
        os.mkdir(os.path.join(self.dir, "models"))
        self.log_path = os.path.join(self.dir, "log")
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            [attnd, "--host", "127.0.0.1", "--port", "0", "--models-dir",
             os.path.join(self.dir, "models"), "--log-format", "json"] +
            list(flags), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=self._log, close_fds=True)
        _servers.append(self)
        self.port = None
        deadline = time.monotonic() + START_S
        while time.monotonic() < deadline and self.proc.poll() is None:
            m = re.search(r"listening on 127\.0\.0\.1:(\d+)", self.log())
            if m:
                self.port = int(m.group(1))
                break
            time.sleep(0.02)
        if self.port is None:
            self.kill()
            raise RuntimeError("attnd did not start: %s" % self.log()[-500:])
        self.url = "http://127.0.0.1:%d" % self.port

    def log(self):
        with open(self.log_path, "rb") as f:
            return f.read().decode("utf-8", "replace")

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def stop(self):
        """SIGTERM: exit 0, no sanitizer report."""
        self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError("attnd still running 30 s after SIGTERM")
        text = self.log()
        for pat in ("AddressSanitizer", "LeakSanitizer", "runtime error:"):
            assert pat not in text, "sanitizer report: %s" % text[
                text.find(pat):][:400]
        assert rc == 0, "attnd exited %d: %s" % (rc, text[-300:])


# ---- the reference ---------------------------------------------------------

def ref_attn(q, K, V, pos, scale, left=-1, softcap=None):
    """float64 attention of rows q [t, H, D] at absolute positions pos
    [t] over keys K, V [n, Hkv, D] (positions 0..n-1): key j is seen when
    j <= p (and j >= p - left with a window).  (out [t, H, D], lse [t, H])."""
    q, K, V = (np.asarray(x, dtype=np.float64) for x in (q, K, V))
    t, H, D = q.shape
    n, Hkv, _ = K.shape
    g = H // Hkv
    Kh, Vh = np.repeat(K, g, axis=1), np.repeat(V, g, axis=1)  # [n, H, D]
    s = np.einsum("thd,nhd->thn", q, Kh) * scale
    if softcap is not None:
        s = softcap * np.tanh(s / softcap)
    j = np.arange(n)[None, None, :]
    p = np.asarray(pos)[:, None, None]
    seen = j <= p
    if left >= 0:
        seen &= j >= p - left
    s = np.where(seen, s, -np.inf)
    m = s.max(axis=2, keepdims=True)
    e = np.exp(s - m)
    z = e.sum(axis=2, keepdims=True)
    out = np.einsum("thn,nhd->thd", e / z, Vh)
    return out, (m + np.log(z))[..., 0]


class Hist:
    """A session's tokens, per layer, as the reference sees them."""

    def __init__(self, layers, H, Hkv, D, scale=None, left=-1, softcap=None):
        self.H, self.Hkv, self.D = H, Hkv, D
        self.scale = D ** -0.5 if scale is None else scale
        self.left, self.softcap = left, softcap
        self.K = [np.zeros((0, Hkv, D)) for _ in range(layers)]
        self.V = [np.zeros((0, Hkv, D)) for _ in range(layers)]

    def copy(self):
        h = Hist(len(self.K), self.H, self.Hkv, self.D, self.scale,
                 self.left, self.softcap)
        h.K, h.V = list(self.K), list(self.V)
        return h

    def truncate(self, n):
        self.K = [k[:n] for k in self.K]
        self.V = [v[:n] for v in self.V]

    def step(self, layer, q, k=None, v=None):
        """Append k, v (if any) and give the reference answer of q."""
        n = len(self.K[layer])
        t = q.shape[0]
        if k is None:
            pos = np.full(t, n - 1)
        else:
            self.K[layer] = np.concatenate([self.K[layer], k], axis=0)
            self.V[layer] = np.concatenate([self.V[layer], v], axis=0)
            pos = n + np.arange(t)
        return ref_attn(q, self.K[layer], self.V[layer], pos, self.scale,
                        self.left, self.softcap)


def close(got, ref, tol, what):
    got = np.asarray(got, dtype=np.float64)
    assert got.shape == ref.shape, "%s: shape %s, expected %s" % (
        what, got.shape, ref.shape)
    err = np.abs(got - ref) / (1 + np.abs(ref))
    assert err.max() <= tol, "%s: relative error %.3g > %g" % (
        what, err.max(), tol)


def toks(rng, t, heads, D, dtype=np.float32):
    return rng.standard_normal((t, heads, D)).astype(dtype)


def expect_error(fn, status, *words):
    try:
        fn()
    except AttndError as e:
        assert e.status == status, "HTTP %d, expected %d: %s" % (
            e.status, status, e.message)
        for w in words:
            assert w in e.message, "%r not in %r" % (w, e.message)
        return e
    raise AssertionError("no error, expected HTTP %d" % status)


# ---- the tests -------------------------------------------------------------

TESTS = []


def test(fn):
    TESTS.append(fn)
    return fn


@test
def stateless_attention(srv, rng):
    c = Client(srv.url)
    q = rng.standard_normal((2, 3, 8)).astype(np.float32)
    k = rng.standard_normal((2, 5, 4)).astype(np.float32)
    v = rng.standard_normal((2, 5, 4)).astype(np.float32)
    r = c.attention(q, k, v, num_heads=2, num_kv_heads=1, causal=True,
                    need_weights=True)
    assert set(r) >= {"output", "attn_weights", "timing"}, sorted(r)
    assert r["timing"]["total_ms"] >= 0
    for b in range(2):
        # bottom-right causal: query i sees keys j <= i + Lk - Lq
        out, _ = ref_attn(q[b].reshape(3, 2, 4), k[b].reshape(5, 1, 4),
                          v[b].reshape(5, 1, 4), np.arange(3) + 2, 0.5)
        close(r["output"][b], out.reshape(3, 8), TOL32, "output[%d]" % b)
    assert r["attn_weights"].shape == (2, 2, 3, 5)
    close(r["attn_weights"].sum(axis=-1), np.ones((2, 2, 3)), TOL32,
          "weights sum")
    r = c.attention(q[0])  # self-attention, no weights unless asked
    assert "attn_weights" not in r and r["output"].dtype == np.float32
    out, _ = ref_attn(q[0][:, None], q[0][:, None], q[0][:, None],
                      np.full(3, 2), 8 ** -0.5)
    close(r["output"], out[:, 0], TOL32, "self-attention")
    e = expect_error(lambda: c.attention(q[0], causl=True), 400,
                     "causl", "did you mean 'causal'")
    assert e.body == {"error": e.message} and e.length is None


@test
def session_create_get_list_errors(srv, rng):
    c = Client(srv.url)
    s = c.session("t-create", 4, 8, layers=2, num_kv_heads=2,
                  max_tokens=64)
    assert s.created and s.id == "t-create" and s.affinity == "t-create"
    assert s.length == [0, 0] and s.info["max_tokens"] == 64
    assert abs(s.info["scale"] - 8 ** -0.5) < 1e-7
    s2 = c.session("t-create", 4, 8, layers=2, num_kv_heads=2,
                   max_tokens=64)
    assert not s2.created and s2.info["id"] == "t-create"  # 200
    e = expect_error(lambda: c.session("t-create", 8, 8), 409)
    assert e.length is None and "error" in e.body
    expect_error(lambda: c.session("t-typo", 2, 4, windw=[2, 0]), 400,
                 "windw", "did you mean")
    expect_error(lambda: c.session("bad@id", 2, 4), 400,
                 "is not a session id")
    expect_error(lambda: c.session("t-w", 2, 4, window=[2, 1]), 400)
    g = c.get_session("t-create")
    assert g.info["num_kv_heads"] == 2 and g.length == [0, 0]
    assert "t-create" in [x["id"] for x in c.list_sessions()]
    expect_error(lambda: c.get_session("t-never"), 404, "t-never")
    s.delete()
    e = expect_error(lambda: c.get_session("t-create"), 404, "t-create")
    expect_error(s.delete, 404)


@test
def attend_steps_against_reference(srv, rng):
    c = Client(srv.url)
    H, Hkv, D = 4, 2, 8
    with c.session("t-attend", H, D, layers=2, num_kv_heads=Hkv) as s:
        h = Hist(2, H, Hkv, D)
        for layer in (0, 1):
            for t in (5, 1, 1, 3, 1):   # a prefill, then decode steps
                q, k, v = (toks(rng, t, x, D) for x in (H, Hkv, Hkv))
                if t == 3:  # rows flat: [t, heads * D]
                    out, lse = s.attend(q.reshape(t, H * D),
                                        k.reshape(t, Hkv * D),
                                        v.reshape(t, Hkv * D), layer=layer)
                else:
                    out, lse = s.attend(q, k, v, layer=layer)
                ro, rl = h.step(layer, q, k, v)
                assert out.shape == (t, H, D) and lse.shape == (t, H)
                assert out.dtype == np.float32 and lse.dtype == np.float32
                close(out, ro, TOL32, "layer %d output" % layer)
                close(lse, rl, TOL32, "layer %d lse" % layer)
        assert s.length == [11, 11], s.length
        assert s.refresh()["length"] == [11, 11] and s.info["bytes"] > 0
        # queries only: every cached token, nothing appended
        q = toks(rng, 2, H, D)
        out, lse = s.attend(q, layer=1)
        ro, rl = h.step(1, q)
        close(out, ro, TOL32, "queries only")
        close(lse, rl, TOL32, "queries-only lse")
        assert s.length == [11, 11]
        # an explicit position: a repeat of the last step is answered again
        q, k, v = (toks(rng, 1, x, D) for x in (H, Hkv, Hkv))
        a = s.attend(q, k, v)
        b = s.attend(q, k, v, position=11)
        assert all(np.array_equal(x, y) for x, y in zip(a, b)), "repeat"
        close(a[0], h.step(0, q, k, v)[0], TOL32, "repeated step")
        assert s.refresh()["length"] == [12, 11]
        # a step at another position: 409 with the length, nothing changes
        e = expect_error(lambda: s.attend(q, k * 2, v, position=3), 409,
                         "has length 12")
        assert e.length == 12 and e.body["length"] == 12
        assert s.length == [12, 11]
        # wrong shapes are caught here, before sending
        try:
            s.attend(toks(rng, 1, H + 1, D), k, v)
        except ValueError as e:
            assert "[1, t, 4, 8]" in str(e), e
        else:
            raise AssertionError("no ValueError")
        # fp16 inputs go as FP16 (values exactly representable as sent)
        q, k, v = (toks(rng, 2, x, D, np.float16) for x in (H, Hkv, Hkv))
        out, lse = s.attend(q, k, v)
        ro, rl = h.step(0, q.astype(np.float64), k.astype(np.float64),
                        v.astype(np.float64))
        close(out, ro, TOL32, "fp16 inputs")
        close(lse, rl, TOL32, "fp16 inputs lse")
    expect_error(lambda: c.get_session("t-attend"), 404)  # exit deleted it


@test
def variants_and_bf16_storage(srv, rng):
    c = Client(srv.url)
    H, D = 2, 8
    with c.session("t-var", H, D, window=[3, 0], softcap=5.0, scale=0.3) as s:
        assert s.info["window"] == [3, 0] and s.info["softcap"] == 5
        h = Hist(1, H, H, D, scale=0.3, left=3, softcap=5.0)
        for t in (6, 1, 2):
            q, k, v = (toks(rng, t, H, D) for _ in range(3))
            out, lse = s.attend(q, k, v)
            ro, rl = h.step(0, q, k, v)
            close(out, ro, TOL32, "window/softcap output")
            close(lse, rl, TOL32, "window/softcap lse")
    with c.session("t-bf16", H, D, kv_dtype="bf16") as s:
        h = Hist(1, H, H, D)
        for t in (4, 1):
            q, k, v = (toks(rng, t, H, D) for _ in range(3))
            out, lse = s.attend(q, k, v)
            ro, rl = h.step(0, q, k, v)
            close(out, ro, TOL16, "bf16 output")
            close(lse, rl, TOL16, "bf16 lse")


@test
def fork_truncate_context_manager(srv, rng):
    c = Client(srv.url)
    H, D = 2, 4
    a = c.session("t-fork:a", H, D)
    h = Hist(1, H, H, D)
    q, k, v = (toks(rng, 6, H, D) for _ in range(3))
    a.attend(q, k, v)
    h.step(0, q, k, v)
    with a.fork("t-fork:b") as b:
        assert b.created and b.length == [6] and b.affinity == "t-fork"
        hb = h.copy()
        for sess, hist in ((a, h), (b, hb), (b, hb), (a, h)):
            q, k, v = (toks(rng, 1, H, D) for _ in range(3))
            out, lse = sess.attend(q, k, v)
            ro, rl = hist.step(0, q, k, v)
            close(out, ro, TOL32, "fork %s" % sess.id)
            close(lse, rl, TOL32, "fork %s lse" % sess.id)
        assert a.length == [8] and b.length == [8]
        info = b.truncate(3)
        hb.truncate(3)
        assert info["length"] == [3] and b.length == [3] and b.info is info
        q, k, v = (toks(rng, 2, H, D) for _ in range(3))
        out, lse = b.attend(q, k, v)
        ro, rl = hb.step(0, q, k, v)
        close(out, ro, TOL32, "after truncate")
        assert b.refresh()["length"] == [5]
        assert a.refresh()["length"] == [8]  # the origin is untouched
        expect_error(lambda: a.fork("t-fork:b"), 409)
        b.delete()  # __exit__ then ignores the 404
    expect_error(lambda: c.get_session("t-fork:b"), 404)
    # __exit__ deletes on an exception too, and lets it through
    try:
        with c.session("t-exc", H, D):
            raise KeyError("boom")
    except KeyError:
        pass
    expect_error(lambda: c.get_session("t-exc"), 404)
    a.delete()


def _record(client):
    """Wrap client._once to record (method, path, affinity header)."""
    seen, real = [], client._once

    def once(method, path, body, headers):
        seen.append((method, path, headers.get("X-Attnd-Affinity")))
        return real(method, path, body, headers)
    client._once = once
    return seen


@test
def decode_batches_across_affinity_groups(srv, rng):
    c = Client(srv.url)
    H, Hkv, D = 4, 1, 8
    ids = ["ga:1", "gb:1", "ga:2", "gb:2", "gc"]
    ss = [c.session(i, H, D, num_kv_heads=Hkv, layers=2) for i in ids]
    hs = [Hist(2, H, Hkv, D) for _ in ids]
    assert [s.affinity for s in ss] == ["ga", "gb", "ga", "gb", "gc"]
    for layer in (0, 1):   # prefills of different lengths
        for i, (s, h) in enumerate(zip(ss, hs)):
            q, k, v = (toks(rng, 2 + i, x, D) for x in (H, Hkv, Hkv))
            s.attend(q, k, v, layer=layer)
            h.step(layer, q, k, v)
    seen = _record(c)
    B = len(ss)
    for step in range(3):
        for layer in (0, 1):
            q = rng.standard_normal((B, 1, H, D)).astype(np.float32)
            k = rng.standard_normal((B, 1, Hkv, D)).astype(np.float32)
            v = rng.standard_normal((B, 1, Hkv, D)).astype(np.float32)
            if step == 1:  # flat rows [B, t, heads * D]
                out, lse = c.decode(ss, layer, q.reshape(B, 1, H * D),
                                    k.reshape(B, 1, Hkv * D),
                                    v.reshape(B, 1, Hkv * D))
            else:
                out, lse = c.decode(ss, layer, q, k, v)
            assert out.shape == (B, 1, H, D) and lse.shape == (B, 1, H)
            for b in range(B):
                ro, rl = hs[b].step(layer, q[b], k[b], v[b])
                close(out[b], ro, TOL32, "decode %s" % ids[b])
                close(lse[b], rl, TOL32, "decode %s lse" % ids[b])
    groups = [g for m, p, g in seen if p.startswith("/v2/")]
    assert groups == ["ga", "gb", "gc"] * 6, groups
    assert [s.length for s in ss] == [[5 + i, 5 + i] for i in range(B)]
    # queries only, batched: nothing appended
    q = rng.standard_normal((B, 2, H, D)).astype(np.float32)
    out, lse = c.decode(ss, 0, q)
    for b in range(B):
        close(out[b], hs[b].step(0, q[b])[0], TOL32, "decode queries only")
    # every session request carries its group
    del seen[:]
    ss[1].refresh()
    ss[2].truncate(100)
    assert seen == [("GET", "/v1/sessions/gb:1", "gb"),
                    ("POST", "/v1/sessions/ga:2/truncate", "ga")], seen

    # a replica that lost gb:1: the decode fails with its 404 and no
    # tracked length moves (ga's request was applied: sent again, it is
    # answered again without appending); the caller re-creates and
    # re-prefills gb:1 and sends the same step again.
    Client(srv.url).get_session("gb:1").delete()
    q = rng.standard_normal((B, 1, H, D)).astype(np.float32)
    k = rng.standard_normal((B, 1, Hkv, D)).astype(np.float32)
    v = rng.standard_normal((B, 1, Hkv, D)).astype(np.float32)
    before = [list(s.length) for s in ss]
    expect_error(lambda: c.decode(ss, 0, q, k, v), 404, "gb:1")
    assert [s.length for s in ss] == before
    assert c.get_session("ga:1").length[0] == before[0][0] + 1  # applied
    fresh = c.session("gb:1", H, D, num_kv_heads=Hkv, layers=2)
    for layer in (0, 1):
        n = len(hs[1].K[layer])
        qq = rng.standard_normal((n, H, D)).astype(np.float32)
        fresh.attend(qq, hs[1].K[layer].astype(np.float32),
                     hs[1].V[layer].astype(np.float32), layer=layer)
    ss[1] = fresh
    out, lse = c.decode(ss, 0, q, k, v)
    for b in range(B):
        ro, rl = hs[b].step(0, q[b], k[b], v[b])
        close(out[b], ro, TOL32, "decode after re-prefill %s" % ids[b])
        close(lse[b], rl, TOL32, "decode after re-prefill %s lse" % ids[b])
    for s in ss:
        assert s.refresh()["length"][0] == s.length[0], (s.id, s.length)
    try:
        c.decode([ss[0], ss[0]], 0, q[:2])
    except ValueError:
        pass
    else:
        raise AssertionError("a session twice: no ValueError")
    for s in ss:
        s.delete()


@test
def retry_after_a_lost_answer(srv, rng):
    c = Client(srv.url)
    H, D = 2, 4
    with c.session("t-retry", H, D) as s:
        h = Hist(1, H, H, D)
        q, k, v = (toks(rng, 3, H, D) for _ in range(3))
        s.attend(q, k, v)
        h.step(0, q, k, v)
        # 1. the step reaches attnd and is applied, but its answer is
        # lost (the connection resets while reading it): the client sends
        # it again on a new connection, at the same position, and attnd
        # answers it again without appending.
        real, calls = c._once, []

        def lossy(method, path, body, headers):
            calls.append(path)
            if len(calls) == 1:
                real(method, path, body, headers)  # applied, answer read...
                c._local.conn.sock.close()
                raise attnd_client._Sent("connection reset (simulated)")
            return real(method, path, body, headers)
        c._once = lossy
        q, k, v = (toks(rng, 1, H, D) for _ in range(3))
        out, lse = s.attend(q, k, v)
        c._once = real
        assert len(calls) == 2, calls
        ro, rl = h.step(0, q, k, v)
        close(out, ro, TOL32, "retried step")
        close(lse, rl, TOL32, "retried step lse")
        assert s.length == [4] and s.refresh()["length"] == [4]
        # 2. the client's kept-alive socket closed before a step: a new one
        conn = c._local.conn
        conn.sock.close()
        q, k, v = (toks(rng, 1, H, D) for _ in range(3))
        out, _ = s.attend(q, k, v)
        close(out, h.step(0, q, k, v)[0], TOL32, "after a closed socket")
        # 3. the socket dies while the step is being sent: sent again
        calls.clear()

        def broken(method, path, body, headers):
            calls.append(path)
            if len(calls) == 1:
                c._local.conn.sock.shutdown(socket.SHUT_RDWR)
                raise ConnectionResetError("broken pipe (simulated)")
            return real(method, path, body, headers)
        c._once = broken
        q, k, v = (toks(rng, 1, H, D) for _ in range(3))
        out, _ = s.attend(q, k, v)
        c._once = real
        assert len(calls) == 2
        close(out, h.step(0, q, k, v)[0], TOL32, "after a send failure")
        assert s.refresh()["length"] == [6]
        # 4. a second failure is AttndError with status 0, length kept
        c._once = lambda *a: (_ for _ in ()).throw(
            attnd_client._Sent("reset (simulated)"))
        e = expect_error(lambda: s.attend(q, k, v), 0, "connection error")
        c._once = real
        assert e.body is None and s.length == [6]
        # 5. a fork whose answer is lost is not sent again
        calls.clear()
        c._once = lossy
        expect_error(lambda: s.fork("t-retry-f"), 0)
        c._once = real
        assert len(calls) == 1
        Client(srv.url).get_session("t-retry-f").delete()
    # 6. nothing listening: status 0
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    dead = Client("http://127.0.0.1:%d" % port, timeout=5)
    e = expect_error(dead.list_sessions, 0, "connection error")


@test
def threads_share_a_client(srv, rng):
    c = Client(srv.url)
    H, D = 2, 4
    errors, conns = [], set()
    data = [[toks(np.random.default_rng(i * 10 + j), 1, H, D)
             for j in range(3)] for i in range(4)]

    def run(i):
        try:
            with c.session("t-thread:%d" % i, H, D) as s:
                h = Hist(1, H, H, D)
                for _ in range(5):
                    out, lse = s.attend(*data[i])
                    close(out, h.step(0, *data[i])[0], TOL32, "thread")
                conns.add(id(c._local.conn))
        except Exception as e:  # reported by the main thread
            errors.append("%s: %s" % (i, e))
    ts = [threading.Thread(target=run, args=(i,)) for i in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(30)
    assert not errors, errors
    assert len(conns) == 4, "one connection a thread: %d" % len(conns)


def api_keys(attnd, rng):
    """A server with API keys: the key goes as Bearer; without it 401;
    another key's session is a 404."""
    with tempfile.TemporaryDirectory() as d:
        kf = os.path.join(d, "keys")
        with open(kf, "w") as f:
            f.write("key-alice\nkey-bob\n")
        srv = Server(attnd, "--api-keys-file", kf)
        try:
            alice = Client(srv.url, api_key="key-alice")
            bob = Client(srv.url, api_key="key-bob")
            e = expect_error(Client(srv.url).list_sessions, 401)
            assert e.message
            expect_error(Client(srv.url, api_key="nope").list_sessions, 401)
            s = alice.session("t-key", 2, 4)
            q, k, v = (toks(rng, 2, 2, 4) for _ in range(3))
            out, _ = s.attend(q, k, v)
            close(out, Hist(1, 2, 2, 4).step(0, q, k, v)[0], TOL32,
                  "with a key")
            assert [x["id"] for x in alice.list_sessions()] == ["t-key"]
            assert bob.list_sessions() == []
            expect_error(lambda: bob.get_session("t-key"), 404)
            expect_error(lambda: bob.decode([s], 0, q[None], k[None],
                                            v[None]), 404)
            r = alice.attention(q.reshape(2, 8), num_heads=2)
            assert r["output"].shape == (2, 8)
            s.delete()
        finally:
            srv.stop()


def idle_connection_closed_by_server(attnd, rng):
    """attnd closes a kept-alive connection idle past connection_timeout_s:
    the next call sees it closed before sending and opens a new one (one
    attempt, no retry needed)."""
    srv = Server(attnd, "--connection-timeout-s", "1")
    try:
        c = Client(srv.url)
        with c.session("t-idle", 2, 4) as s:
            q, k, v = (toks(rng, 1, 2, 4) for _ in range(3))
            s.attend(q, k, v)
            sock = c._local.conn.sock
            r = select.select([sock], [], [], 10)[0]  # closed: readable
            assert r and sock.recv(1, socket.MSG_PEEK) == b"", "not closed"
            seen = _record(c)
            out, _ = s.attend(q, k, v)
            assert len(seen) == 1 and c._local.conn.sock is not sock, seen
            assert s.refresh()["length"] == [2]
    finally:
        srv.stop()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--attnd", default=os.path.join(
        HERE, "..", "..", "build", "src", "attnd"))
    ap.add_argument("-k", action="append", default=[])
    ap.add_argument("--seed", type=int, default=4242)
    args = ap.parse_args()

    def watchdog():
        print("FAIL: the run took more than %.0f s" % WATCHDOG_S, flush=True)
        for s in _servers:
            s.kill()
        os._exit(1)
    timer = threading.Timer(WATCHDOG_S, watchdog)
    timer.daemon = True
    timer.start()

    t0 = time.monotonic()
    tests = [t for t in TESTS + [api_keys,
                                 idle_connection_closed_by_server]
             if not args.k or any(k in t.__name__ for k in args.k)]
    passed = failed = 0
    srv = Server(args.attnd)
    try:
        for fn in tests:
            rng = np.random.default_rng(args.seed + len(fn.__name__))
            t1 = time.monotonic()
            try:
                fn(srv if fn in TESTS else args.attnd, rng)
                passed += 1
                print("ok %s (%.2f s)" % (fn.__name__,
                                         time.monotonic() - t1), flush=True)
            except Exception as e:
                failed += 1
                print("FAIL %s: %s" % (fn.__name__, e), flush=True)
                traceback.print_exc()
        try:
            srv.stop()
        except AssertionError as e:
            failed += 1
            print("FAIL server stop: %s" % e)
    finally:
        for s in _servers:
            s.kill()
    print("took %.1f s" % (time.monotonic() - t0))
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
