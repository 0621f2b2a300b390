#!/usr/bin/env python3
"""Integration tests: sessions (issue 41): attnd keeps a decoder's KV
cache, on /v1/sessions and on KServe v2's kv_attention (batched, and
Triton's sequence extension, raw and as tritonclient sends it); every
answer against a float64 reference of causal bottom-right attention over
the whole sequence (every variant, GQA, MQA, prefill steps, fp32, bf16
and fp16 storage), the same bits however the work is split (alone or in a
batch, any batch position, workers, blas_threads_per_worker, repeats),
the statuses (201, 200, 204, 400, 404, 409, 507), retries, truncate,
fork, need_weights, the limits (max_tokens, kv_cache_bytes, max_sessions,
session_idle_timeout_s, max_total_body_bytes), API keys, the metrics, and
16 clients at once.

The reference is plain Python floats (float64), as harness.py's: no numpy
(CI's Python has none).  Rotary, ALiBi and softcap follow docs/api.md
"Attention variants" and tests/golden/make_golden.py (which needs torch,
so its helpers are rebuilt here in plain Python).

Run alone: python3 tests/integration/test_sessions.py --attnd PATH
(the options of run.py; see harness.py and README.md).
"""

import json
import math
import os
import random
import re
import socket
import struct
import sys
import tempfile
import threading
import time

from harness import (HOST, Failure, Pending, Server, TOL, assert_bits,
                     assert_close, cfg, check, decode_v2, expect_error,
                     expect_status, f32, flatten, main, request, shared,
                     slow_request, test, v1, v1_ok, v2_binary, v2_in,
                     v2_infer, wait_log)
from tritonclient_imitation import TcClient, tc_expect_error, tc_input

HALF_TOL = 2e-2     # bf16 and fp16 storage: |got - ref| <= 2e-2 (1 + |ref|)
SPLIT_TOL = 1e-6    # one prefill step vs the same tokens in smaller steps
BLOCK = 16          # ATTN_KV_BLOCK_TOKENS (include/attn/kv.h)
MODEL = "kv_attention"


# ---- the float64 reference --------------------------------------------------

def alibi_standard_slopes(n):
    """get_slopes of the ALiBi paper's code (tests/golden/make_golden.py's
    alibi_standard_slopes, which imports torch)."""
    def p2(n):
        start = 2 ** (-2 ** -(math.log2(n) - 3))
        return [start * start ** i for i in range(n)]
    if math.log2(n).is_integer():
        return p2(n)
    c = 2 ** math.floor(math.log2(n))
    return p2(c) + alibi_standard_slopes(2 * c)[0::2][:n - c]


def rope(x, pos, dims, base, interleaved):
    """x (one head's D values) turned at position pos: pairs (t, t + R/2)
    (NeoX) or (2t, 2t + 1) (GPT-J) of the first R = dims values by
    pos * base^(-2t/R) (docs/api.md, make_golden.py's rope)."""
    y = list(x)
    half = dims // 2
    for t in range(half):
        th = pos * base ** (-2.0 * t / dims)
        c, s = math.cos(th), math.sin(th)
        a, b = (2 * t, 2 * t + 1) if interleaved else (t, t + half)
        y[a] = x[a] * c - x[b] * s
        y[b] = x[b] * c + x[a] * s
    return y


class Ref:
    """One session as a float64 reference: its spec and, per layer, the
    keys (turned at their positions) and values it holds.

    step() is causal bottom-right over the whole sequence: row i of a step
    of t tokens stands at p = length + i and sees keys j <= p (and
    j >= p - left with a window); queries only: every row at p = length,
    seeing every cached key (within the window).  Score: scale * q.k
    (q, k turned), softcap, ALiBi -m_h |j - p|; lse = log sum exp."""

    def __init__(self, sid, H, D, Hkv=None, layers=1, kv_dtype=None,
                 max_tokens=None, scale=None, window=None, alibi=None,
                 softcap=None, rotary=None):
        self.id, self.H, self.D = sid, H, D
        self.Hkv = Hkv or H
        self.layers = layers
        self.kv_dtype = kv_dtype
        self.max_tokens = max_tokens
        self.scale_given, self.window, self.alibi = scale, window, alibi
        self.softcap, self.rotary = softcap, rotary
        self.scale = f32(scale) if scale is not None else 1 / math.sqrt(D)
        self.left = window[0] if window is not None else -1
        if alibi is True:
            self.slopes = [f32(x) for x in alibi_standard_slopes(H)]
        elif alibi:
            self.slopes = [f32(x) for x in alibi]
        else:
            self.slopes = None
        self.rot = None
        if rotary:
            r = rotary if isinstance(rotary, dict) else {}
            self.rot = (r.get("dims", D), r.get("base", 10000.0),
                        r.get("interleaved", False))
        self.k = [[] for _ in range(layers)]  # [j] -> Hkv lists of D, turned
        self.v = [[] for _ in range(layers)]
        self.raw = [[] for _ in range(layers)]  # [j] -> (k row, v row) sent

    def spec(self):
        s = {"num_heads": self.H, "head_dim": self.D}
        if self.Hkv != self.H:
            s["num_kv_heads"] = self.Hkv
        if self.layers != 1:
            s["layers"] = self.layers
        for name, val in (("kv_dtype", self.kv_dtype),
                          ("max_tokens", self.max_tokens),
                          ("scale", self.scale_given),
                          ("window", self.window), ("alibi", self.alibi),
                          ("softcap", self.softcap),
                          ("rotary", self.rotary)):
            if val is not None:
                s[name] = val
        return s

    def tol(self):
        return HALF_TOL if self.kv_dtype in ("bf16", "fp16") else TOL

    def length(self, layer=0):
        return len(self.k[layer])

    def copy(self, sid):
        c = Ref.__new__(Ref)
        c.__dict__.update(self.__dict__)
        c.id = sid
        c.k = [list(x) for x in self.k]
        c.v = [list(x) for x in self.v]
        c.raw = [list(x) for x in self.raw]
        return c

    def truncate(self, n):
        for L in range(self.layers):
            del self.k[L][n:]
            del self.v[L][n:]
            del self.raw[L][n:]

    def _heads(self, row, n):
        D = self.D
        return [row[h * D:(h + 1) * D] for h in range(n)]

    def step(self, layer, q, k=None, v=None):
        """q: t rows of H*D floats, k, v: t rows of Hkv*D or None.
        Appends k, v; returns (out [t][H*D], lse [t][H],
        weights [H][t][length])."""
        H, D = self.H, self.D
        L0 = self.length(layer)
        if k is not None:
            for i, (kr, vr) in enumerate(zip(k, v)):
                kh = self._heads(kr, self.Hkv)
                if self.rot:
                    kh = [rope(x, L0 + i, *self.rot) for x in kh]
                self.k[layer].append(kh)
                self.v[layer].append(self._heads(vr, self.Hkv))
                self.raw[layer].append((list(kr), list(vr)))
        n = self.length(layer)
        keys, vals = self.k[layer], self.v[layer]
        group = H // self.Hkv
        out, lse = [], []
        w = [[[0.0] * n for _ in range(len(q))] for _ in range(H)]
        for i, row in enumerate(q):
            p = L0 + i if k is not None else L0
            orow, lrow = [], []
            for h in range(H):
                g = h // group
                qh = row[h * D:(h + 1) * D]
                if self.rot:
                    qh = rope(qh, p, *self.rot)
                idx, s = [], []
                for j in range(n):
                    if k is not None and j > p:
                        continue
                    if self.left >= 0 and j < p - self.left:
                        continue
                    x = self.scale * sum(a * b for a, b in zip(qh, keys[j][g]))
                    if self.softcap:
                        x = self.softcap * math.tanh(x / self.softcap)
                    if self.slopes:
                        x -= self.slopes[h] * abs(j - p)
                    idx.append(j)
                    s.append(x)
                if not s:
                    orow.extend([0.0] * D)
                    lrow.append(-math.inf)
                    continue
                m = max(s)
                e = [math.exp(x - m) for x in s]
                z = sum(e)
                lrow.append(m + math.log(z))
                o = [0.0] * D
                for jj, j in enumerate(idx):
                    pj = e[jj] / z
                    w[h][i][j] = pj
                    vj = vals[j][g]
                    for d in range(D):
                        o[d] += pj * vj[d]
                orow.extend(o)
            out.append(orow)
            lse.append(lrow)
        return out, lse, w


def rows_f32(rng, t, width, lo=-1.0, hi=1.0):
    return [[f32(rng.uniform(lo, hi)) for _ in range(width)]
            for _ in range(t)]


def rows_grid(rng, t, width):
    """Values k/64 in [-1, 1]: exact in fp16 and bf16 alike."""
    return [[rng.randint(-64, 64) / 64.0 for _ in range(width)]
            for _ in range(t)]


def tokens(ref, rng, t, grid=False):
    """(q, k, v) rows for t new tokens of ref's shape."""
    make = rows_grid if grid else rows_f32
    return (make(rng, t, ref.H * ref.D), make(rng, t, ref.Hkv * ref.D),
            make(rng, t, ref.Hkv * ref.D))


# ---- /v1/sessions -----------------------------------------------------------

def path(sid, tail=""):
    return "/v1/sessions/" + sid + tail


def s_put(p, sid, spec, headers=None):
    return request(p, "PUT", path(sid), spec, headers=headers)


def s_get(p, sid, headers=None):
    return request(p, "GET", path(sid), headers=headers)


def s_del(p, sid, headers=None):
    return request(p, "DELETE", path(sid), headers=headers)


def s_list(p, headers=None):
    r = request(p, "GET", "/v1/sessions", headers=headers)
    expect_status(r, 200, "GET /v1/sessions")
    j = r.json()
    check(isinstance(j.get("sessions"), list), "list: %r" % j)
    return j["sessions"]


def s_post(p, sid, tail, body, headers=None):
    return request(p, "POST", path(sid, tail), body, headers=headers)


def create(p, ref, headers=None, status=201):
    r = s_put(p, ref.id, ref.spec(), headers=headers)
    expect_status(r, status, "PUT %s %r" % (ref.id, ref.spec()))
    return r.json()


def step_body(ref, layer, q, k=None, v=None, position=None, flat=False,
              **extra):
    def shape(rows, n):
        return rows if flat else [ref._heads(r, n) for r in rows]
    b = {"layer": layer, "query": shape(q, ref.H)}
    if k is not None:
        b["position"] = ref.length(layer) if position is None else position
        b["key"] = shape(k, ref.Hkv)
        b["value"] = shape(v, ref.Hkv)
    b.update(extra)
    return b


class Failures:
    """Checks of a table run to its end: done() fails with every row that
    failed, so that one row does not hide the next."""

    def __init__(self):
        self.msgs = []

    def run(self, fn):
        try:
            fn()
        except Failure as e:
            self.msgs.append(str(e))

    def done(self):
        msgs, self.msgs = self.msgs, []
        check(not msgs, "; ".join(msgs))


def check_answer(j, out, lse, t, ref, what, tol=None):
    tol = ref.tol() if tol is None else tol
    check(isinstance(j.get("output"), list) and len(j["output"]) == t and
          all(isinstance(r, list) and len(r) == ref.H and
              all(isinstance(x, list) and len(x) == ref.D for x in r)
              for r in j["output"]),
          "%s: output is not [t=%d][H=%d][D=%d]: %r" %
          (what, t, ref.H, ref.D, str(j.get("output"))[:200]))
    check(isinstance(j.get("lse"), list) and len(j["lse"]) == t and
          all(isinstance(r, list) and len(r) == ref.H for r in j["lse"]),
          "%s: lse is not [t=%d][H=%d]: %r" %
          (what, t, ref.H, str(j.get("lse"))[:200]))
    assert_close(flatten(j["output"]), flatten(out), what + " output", tol)
    assert_close(flatten(j["lse"]), flatten(lse), what + " lse", tol)


def step(p, ref, layer, q, k=None, v=None, what="", flat=False, headers=None,
         tol=None):
    """One /v1 step, checked against the reference (which then holds the
    new tokens); the answer's JSON."""
    what = "%s %s layer %d at %d (t=%d%s)" % (
        what, ref.id, layer, ref.length(layer), len(q),
        "" if k is not None else ", queries only")
    r = s_post(p, ref.id, "/attend", step_body(ref, layer, q, k, v,
                                                flat=flat), headers=headers)
    expect_status(r, 200, what)
    j = r.json()
    out, lse, _ = ref.step(layer, q, k, v)
    check(j.get("length") == ref.length(layer), "%s: length %r, expected %d"
          % (what, j.get("length"), ref.length(layer)))
    check_answer(j, out, lse, len(q), ref, what, tol)
    return j


def get_obj(p, sid, headers=None):
    r = s_get(p, sid, headers=headers)
    expect_status(r, 200, "GET " + sid)
    return r.json()


def lengths(p, sid, headers=None):
    return get_obj(p, sid, headers)["length"]


def cleanup(p, ids, headers=None):
    for sid in ids:
        try:
            request(p, "DELETE", path(sid), headers=headers)
        except Exception:  # best effort: the test's own failure matters
            pass


def block_bytes(Hkv, D, e):
    kd = D + (D & 1) if e == "bf16" else D
    size = 4 if e in (None, "fp32") else 2
    return Hkv * (BLOCK * kd * size + BLOCK * D * size)


# ---- KServe v2: kv_attention ------------------------------------------------

def bf16_bytes(vals):
    return b"".join(struct.pack("<f", x)[2:4] for x in vals)


def bytes_blob(strings):
    """Triton's binary BYTES: each element a little-endian uint32 length,
    then its bytes."""
    return b"".join(struct.pack("<I", len(s.encode())) + s.encode()
                    for s in strings)


def kv_v2(p, items, t, H, Hkv, D, layer=0, dtype="FP32", binary=False,
          bytes_binary=False, queries_only=False, headers=None,
          params=None, binary_out=None):
    """The batched kv_attention request of items [(session id, position,
    q rows, k rows, v rows)], JSON or binary, with its tensors in dtype
    (FP16 and BF16 only binary).  Returns the Resp."""
    B = len(items)
    q = [x for it in items for r in it[2] for x in r]
    ins = [("session_id", "BYTES", [B], [it[0] for it in items]),
           ("position", "INT64", [B], [it[1] for it in items]),
           ("query", dtype, [B, t, H, D], q)]
    if not queries_only:
        ins.append(("key", dtype, [B, t, Hkv, D],
                    [x for it in items for r in it[3] for x in r]))
        ins.append(("value", dtype, [B, t, Hkv, D],
                    [x for it in items for r in it[4] for x in r]))
    prm = {"layer": layer}
    prm.update(params or {})
    if binary_out is not None:
        prm["binary_data_output"] = binary_out
    if not binary:
        return v2_infer(p, MODEL, [v2_in(n, s, d, dt) for n, dt, s, d in ins],
                        params=prm, headers=headers)
    bins = []
    for n, dt, s, d in ins:
        if dt == "BYTES":
            if bytes_binary:
                bins.append({"name": n, "datatype": dt, "shape": s,
                             "raw": bytes_blob(d)})
            else:
                bins.append({"name": n, "datatype": dt, "shape": s,
                             "data": d})
        elif dt == "BF16":
            bins.append({"name": n, "datatype": dt, "shape": s,
                         "raw": bf16_bytes(d)})
        else:
            bins.append({"name": n, "datatype": dt, "shape": s, "values": d})
    body, hdrs = v2_binary(bins, params=prm)
    hdrs.update(headers or {})
    return request(p, "POST", "/v2/models/%s/infer" % MODEL, body,
                   headers=hdrs)


def kv_outs(r, B, t, H, D, what):
    """[(output flat t*H*D, lse flat t*H)] per session of a 200 answer."""
    _, o = decode_v2(r, what)
    check(set(o) == {"output", "lse"}, "%s: outputs %r" % (what, sorted(o)))
    check(o["output"]["shape"] == [B, t, H, D], "%s: output shape %r" %
          (what, o["output"]["shape"]))
    check(o["lse"]["shape"] == [B, t, H], "%s: lse shape %r" %
          (what, o["lse"]["shape"]))
    no, nl = t * H * D, t * H
    return [(o["output"]["data"][b * no:(b + 1) * no],
             o["lse"]["data"][b * nl:(b + 1) * nl]) for b in range(B)]


def kv_step(p, refs, layer, toks, what, **kw):
    """A batched kv_attention step of refs (same H, Hkv, D) with toks[b] =
    (q, k, v), each checked against its reference; [(out, lse)]."""
    r0 = refs[0]
    t = len(toks[0][0])
    items = [(ref.id, ref.length(layer)) + tuple(tk)
             for ref, tk in zip(refs, toks)]
    r = kv_v2(p, items, t, r0.H, r0.Hkv, r0.D, layer=layer, **kw)
    got = kv_outs(r, len(refs), t, r0.H, r0.D, what)
    for b, (ref, (q, k, v)) in enumerate(zip(refs, toks)):
        out, lse, _ = ref.step(layer, q, k, v)
        assert_close(got[b][0], flatten(out), "%s [%d] %s output" %
                     (what, b, ref.id), ref.tol())
        assert_close(got[b][1], flatten(lse), "%s [%d] %s lse" %
                     (what, b, ref.id), ref.tol())
    return got


# ---- results: the float64 reference -----------------------------------------

VARIANTS = [
    ("mha", dict(H=2, D=8)),
    ("gqa", dict(H=4, Hkv=2, D=8)),
    ("mqa", dict(H=4, Hkv=1, D=8)),
    ("scale", dict(H=2, D=8, scale=0.7)),
    ("window", dict(H=2, D=8, window=[3, 0])),
    ("window-unbounded", dict(H=2, D=8, window=[-1, 0])),
    ("alibi", dict(H=4, D=8, alibi=True)),
    ("alibi-3", dict(H=3, D=4, alibi=True)),
    ("slopes", dict(H=2, Hkv=1, D=8, alibi=[0.5, 0.0625])),
    ("softcap", dict(H=2, D=8, softcap=1.5, scale=2.0)),
    ("rotary", dict(H=2, D=8, rotary=True)),
    ("rotary-gptj", dict(H=2, D=8, rotary={"base": 500.0, "dims": 4,
                                           "interleaved": True})),
    ("rotary-neox", dict(H=4, Hkv=2, D=8,
                         rotary={"base": 100.0, "dims": 6,
                                 "interleaved": False})),
    ("all", dict(H=4, Hkv=2, D=8, layers=2, scale=0.5, window=[5, 0],
                 alibi=True, softcap=3.0,
                 rotary={"base": 1000.0, "dims": 8, "interleaved": True})),
]

PREFILL = [5, 1, 3, 1, 17, 1, 2]  # steps; 30 tokens: across a block boundary


def variant_run(p, name, kw, rng, kv_dtype=None, grid=False):
    kw = dict(kw)
    layers = kw.pop("layers", 2)
    ref = Ref("it-ref-%s-%s" % (name, kv_dtype or "fp32"), layers=layers,
              kv_dtype=kv_dtype, **kw)
    try:
        create(p, ref)
        for i, t in enumerate(PREFILL):
            for L in range(layers):
                q, k, v = tokens(ref, rng, t, grid)
                step(p, ref, L, q, k, v, what=name, flat=(i % 2 == 1))
        for L in range(layers):  # queries only: at the length, every key
            step(p, ref, L, tokens(ref, rng, 2, grid)[0], what=name)
        check(lengths(p, ref.id) == [sum(PREFILL)] * layers,
              "%s: lengths %r" % (name, lengths(p, ref.id)))
    finally:
        cleanup(p, [ref.id])


@test
def session_reference_fp32_every_variant():
    """fp32 storage: every step of every variant (GQA, MQA, scale, window,
    ALiBi standard and slopes, softcap, rotary NeoX and GPT-J, all at
    once), prefill steps of 1 to 17 tokens, rows nested and flat, two
    layers, queries-only steps: within 1e-5 (1 + |ref|) of float64, output
    and lse."""
    rng = random.Random(cfg.seed + 4100)
    for name, kw in VARIANTS:
        variant_run(shared().port, name, kw, rng)


@test
def session_reference_bf16_fp16():
    """bf16 and fp16 storage: within 2e-2 (1 + |ref|) of the float64
    reference of the values as sent."""
    rng = random.Random(cfg.seed + 4101)
    for dt in ("bf16", "fp16"):
        for name, kw in VARIANTS:
            if name in ("mha", "gqa", "mqa", "all", "rotary", "softcap"):
                variant_run(shared().port, name, kw, rng, kv_dtype=dt)


@test
def session_prefill_one_step_vs_smaller_steps():
    """The same 20 tokens in one step, in steps of 7, 6, 5, 2, and one at
    a time: the rows agree within 1e-6 (1 + |ref|), and each within 1e-5
    of the reference."""
    p = shared().port
    rng = random.Random(cfg.seed + 4102)
    kw = dict(H=4, Hkv=2, D=8, window=[9, 0], alibi=True, softcap=4.0,
              rotary=True)
    q, k, v = tokens(Ref("x", **kw), rng, 20)
    got = {}
    ids = []
    try:
        for splits in ([20], [7, 6, 5, 2], [1] * 20):
            ref = Ref("it-split-%d" % len(splits), **kw)
            ids.append(ref.id)
            create(p, ref)
            outs, lses, at = [], [], 0
            for t in splits:
                j = step(p, ref, 0, q[at:at + t], k[at:at + t], v[at:at + t],
                         what="split %r" % splits)
                outs += flatten(j["output"])
                lses += flatten(j["lse"])
                at += t
            got[len(splits)] = (outs, lses)
        for n in (4, 20):
            assert_close(got[n][0], got[1][0], "steps of %d vs one: output"
                         % n, SPLIT_TOL)
            assert_close(got[n][1], got[1][1], "steps of %d vs one: lse" % n,
                         SPLIT_TOL)
    finally:
        cleanup(p, ids)


# ---- results: the same bits however the work is split -----------------------

def replicas(p, seqs, R, rng_seed, prefix):
    """For each sequence (kw, prefill length): R sessions holding the same
    tokens (one prefill step each).  Returns [[Ref] * R] and the tokens of
    a decode step per sequence."""
    rng = random.Random(rng_seed)
    out, dec = [], []
    for si, (kw, n) in enumerate(seqs):
        base = Ref("x", **kw)
        pre = tokens(base, rng, n)
        dec.append(tokens(base, rng, 2))
        row = []
        for r in range(R):
            ref = Ref("%s-%d-%d" % (prefix, si, r), **kw)
            create(p, ref)
            step(p, ref, 0, *pre, what="prefill")
            row.append(ref)
        out.append(row)
    return out, dec


BITS_SEQS = [
    (dict(H=4, Hkv=2, D=16), 3),
    (dict(H=4, Hkv=2, D=16, rotary=True, window=[6, 0]), 17),
    (dict(H=4, Hkv=2, D=16, kv_dtype="bf16", alibi=True), 1),
    (dict(H=4, Hkv=2, D=16, kv_dtype="fp16", softcap=5.0), 33),
    (dict(H=4, Hkv=2, D=16, scale=0.3), 8),
]


@test
def session_same_bits_alone_and_in_batches():
    """Five sequences (different lengths, variants and dtypes), six
    sessions of each holding the same tokens; the same decode step of each
    alone on /v1, alone on v2, in a batch of 5 in order, reversed, and in
    batches of 2 and 3 at other positions, and as a retry: bitwise the
    same answer every time."""
    p = shared().port
    seqs = BITS_SEQS
    S, R = len(seqs), 6
    reps, dec = [], []
    try:
        reps, dec = replicas(p, seqs, R, cfg.seed + 4103, "it-bits")
        H, Hkv, D = 4, 2, 16
        got = [[None] * R for _ in range(S)]
        for s in range(S):  # replica 0: /v1, alone
            j = step(p, reps[s][0], 0, *dec[s], what="alone /v1")
            got[s][0] = (flatten(j["output"]), flatten(j["lse"]))
        for s in range(S):  # replica 1: v2, B = 1
            got[s][1] = kv_step(p, [reps[s][1]], 0, [dec[s]], "alone v2")[0]
        for r, order in ((2, list(range(S))), (3, list(range(S))[::-1])):
            g = kv_step(p, [reps[s][r] for s in order], 0,
                        [dec[s] for s in order], "batch %r" % order,
                        binary=(r == 3))
            for b, s in enumerate(order):
                got[s][r] = g[b]
        for part in ([4, 2], [0, 3, 1]):
            g = kv_step(p, [reps[s][4] for s in part], 0,
                        [dec[s] for s in part], "batch %r" % part)
            for b, s in enumerate(part):
                got[s][4] = g[b]
        # replica 5: alone, then the same step again (a retry), in a batch
        g = kv_step(p, [reps[s][5] for s in range(S)], 0, dec, "batch")
        for s in range(S):
            got[s][5] = g[s]
        items = [(reps[s][5].id, reps[s][5].length() - 2) + tuple(dec[s])
                 for s in (3, 0)]
        again = kv_outs(kv_v2(p, items, 2, H, Hkv, D), 2, 2, H, D,
                        "batch retried")
        for s in range(S):
            for r in range(1, R):
                assert_bits(got[s][r][0], got[s][0][0], "sequence %d: "
                            "replica %d vs alone: output" % (s, r))
                assert_bits(got[s][r][1], got[s][0][1], "sequence %d: "
                            "replica %d vs alone: lse" % (s, r))
        for b, s in enumerate((3, 0)):
            assert_bits(again[b][0], got[s][0][0], "retry of %d: output" % s)
            assert_bits(again[b][1], got[s][0][1], "retry of %d: lse" % s)
    finally:
        cleanup(p, [r.id for row in reps for r in row])


def bits_script(p, concurrent):
    """A fixed script of sessions and steps (prefills and a batched decode
    big enough to be split), run by `concurrent` threads at once: every
    answer's bits, by step name."""
    H, Hkv, D = 8, 4, 32
    seqs = [(dict(H=H, Hkv=Hkv, D=D), 40),
            (dict(H=H, Hkv=Hkv, D=D, rotary=True, alibi=True), 57),
            (dict(H=H, Hkv=Hkv, D=D, kv_dtype="bf16", window=[20, 0]), 33),
            (dict(H=H, Hkv=Hkv, D=D, kv_dtype="fp16"), 64)]
    rng = random.Random(cfg.seed + 4104)
    toks = [(tokens(Ref("x", **kw), rng, n), tokens(Ref("x", **kw), rng, 1))
            for kw, n in seqs]
    res, errors = {}, []

    def run(w):
        try:
            refs = []
            for s_, (kw, _) in enumerate(seqs):
                ref = Ref("it-wb-%d-%d" % (w, s_), **kw)
                create(p, ref)
                r = s_post(p, ref.id, "/attend",
                           step_body(ref, 0, *toks[s_][0], position=0))
                expect_status(r, 200, "prefill")
                j = r.json()
                res[(w, "prefill", s_)] = (flatten(j["output"]) +
                                           flatten(j["lse"]))
                refs.append(ref)
            items = [(ref.id, seqs[s_][1]) + toks[s_][1]
                     for s_, ref in enumerate(refs)]
            g = kv_outs(kv_v2(p, items, 1, H, Hkv, D, binary=True),
                        len(seqs), 1, H, D, "decode batch")
            for s_ in range(len(seqs)):
                res[(w, "decode", s_)] = g[s_][0] + g[s_][1]
            cleanup(p, [r_.id for r_ in refs])
        except Exception as e:  # reported by the caller
            errors.append("thread %d: %s" % (w, e))

    ths = [threading.Thread(target=run, args=(w,)) for w in range(concurrent)]
    for th in ths:
        th.start()
    for th in ths:
        th.join(120)
    check(not any(th.is_alive() for th in ths), "a client thread hangs")
    check(not errors, "; ".join(errors))
    return {(k[1], k[2]): v for k, v in res.items() if k[0] == 0}, res


@test
def session_same_bits_across_workers_and_threads():
    """The same script on a server of 3 workers with 3 clients at once
    (blas_threads_per_worker 1), on one of 1 worker with
    blas_threads_per_worker 2, and again: bitwise the same answers."""
    with Server("--workers", "3", "--blas-threads-per-worker", "1",
                name="sess-w3") as s:
        one, every = bits_script(s.port, 3)
        for (w, name, si), vals in every.items():
            assert_bits(vals, one[(name, si)], "workers 3: client %d vs 0: "
                        "%s of sequence %d" % (w, name, si))
    with Server("--workers", "1", "--blas-threads-per-worker", "2",
                name="sess-t2") as s:
        two, _ = bits_script(s.port, 1)
        again, _ = bits_script(s.port, 1)
    for k in one:
        assert_bits(two[k], one[k], "blas_threads 2 vs 1: %s of sequence %d"
                    % k)
        assert_bits(again[k], two[k], "a repeat: %s of sequence %d" % k)


# ---- /v1: create, read, list, delete, errors --------------------------------

@test
def session_create_get_list_delete():
    """PUT 201 then 200 (same shape) or 409 (another, naming the field);
    the object's fields; GET, the list; DELETE 204, then 404 naming it."""
    p = shared().port
    sid = "it-crud.A:b_c-9"
    ref = Ref(sid, H=4, Hkv=2, D=6, layers=3, kv_dtype="fp32",
              max_tokens=100, scale=0.25, window=[7, 0], softcap=20.0,
              rotary={"base": 10000.0, "dims": 4, "interleaved": True})
    other = "it-crud-other"
    try:
        o = create(p, ref)
        want = {"id": sid, "layers": 3, "num_heads": 4, "num_kv_heads": 2,
                "head_dim": 6, "max_tokens": 100, "kv_dtype": "fp32",
                "length": [0, 0, 0], "scale": 0.25, "window": [7, 0],
                "softcap": 20.0,
                "rotary": {"base": 10000, "dims": 4, "interleaved": True}}
        for k_, v_ in want.items():
            check(o.get(k_) == v_, "PUT object: %s is %r, expected %r (%r)"
                  % (k_, o.get(k_), v_, o))
        check(o.get("bytes") == 0, "new session holds bytes: %r" % o)
        check(isinstance(o.get("idle_s"), (int, float)) and o["idle_s"] >= 0,
              "idle_s: %r" % o)
        r = s_put(p, sid, ref.spec())
        expect_status(r, 200, "PUT again, same shape")
        check(r.json().get("id") == sid, "200 answer: %r" % r)
        for f, val in (("num_heads", 8), ("head_dim", 8), ("layers", 2),
                       ("kv_dtype", "bf16"), ("max_tokens", 99),
                       ("softcap", 21.0)):
            spec = dict(ref.spec(), **{f: val})
            expect_error(s_put(p, sid, spec), 409, f,
                         what="PUT with another %s" % f)
        rng = random.Random(cfg.seed + 4105)
        step(p, ref, 1, *tokens(ref, rng, 3), what="crud")
        o = get_obj(p, sid)
        check(o["length"] == [0, 3, 0], "length after a step: %r" % o)
        check(o["bytes"] == block_bytes(2, 6, "fp32"),
              "bytes of one block of Hkv 2, D 6, fp32: %r, expected %d" %
              (o["bytes"], block_bytes(2, 6, "fp32")))
        step(p, ref, 1, *tokens(ref, rng, 14), what="crud")
        o = get_obj(p, sid)
        check(o["bytes"] == 2 * block_bytes(2, 6, "fp32"),
              "bytes of two blocks: %r" % o)
        create(p, Ref(other, H=1, D=2))
        ls = {x["id"]: x for x in s_list(p)}
        check(sid in ls and other in ls, "list: %r" % sorted(ls))
        check(ls[sid]["length"] == [0, 17, 0] and
              ls[sid]["num_kv_heads"] == 2, "listed object: %r" % ls[sid])
        r = s_del(p, sid)
        expect_status(r, 204, "DELETE")
        check(r.body == b"", "204 with a body: %r" % r)
        expect_error(s_get(p, sid), 404, sid, what="GET after DELETE")
        expect_error(s_del(p, sid), 404, sid, what="DELETE again")
        expect_error(s_post(p, sid, "/attend", {"query": [[0] * 24]}), 404,
                     sid, what="attend after DELETE")
        check(sid not in {x["id"] for x in s_list(p)}, "deleted but listed")
        for tail, body in (("/truncate", {"length": 0}),
                           ("/fork", {"id": "it-crud-f"})):
            expect_error(s_post(p, "it-never", tail, body), 404, "it-never",
                         what="%s of an unknown session" % tail)
        expect_error(s_get(p, "it-never"), 404, "it-never",
                     what="an unknown session")
        # created again after DELETE: new and empty
        o = create(p, ref)
        check(o["length"] == [0, 0, 0], "created again: %r" % o)
    finally:
        cleanup(p, [sid, other])


@test
def session_bad_ids_fields_and_shapes():
    """Bad ids, unknown fields (did you mean), shape mistakes of a session
    and of a step: 400s in the user's terms; nothing is created or
    appended."""
    p = shared().port
    for bad in ("bad!id", "a" * 129, "sp%20ace", "%C3%A9t%C3%A9", "a%00b"):
        expect_error(s_put(p, bad, {"num_heads": 1, "head_dim": 2}), 400,
                     what="PUT id %r" % bad[:20])
        expect_status(s_get(p, bad), 400, "GET id %r" % bad[:20])
    ok = "a" * 128
    try:
        create(p, Ref(ok, H=1, D=2))
    finally:
        cleanup(p, [ok])
    base = {"num_heads": 4, "head_dim": 4}
    fails = Failures()
    for what, spec, needles in (
            ("unknown field", dict(base, num_head=4),
             ["num_head", "did you mean", "num_heads"]),
            ("unknown field 2", dict(base, kv_dtpye="fp16"),
             ["kv_dtpye", "did you mean", "kv_dtype"]),
            ("unknown rotary member", dict(base, rotary={"bass": 10}),
             ["bass", "did you mean", "base"]),
            ("no num_heads", {"head_dim": 4}, ["num_heads"]),
            ("no head_dim", {"num_heads": 4}, ["head_dim"]),
            ("num_heads 0", dict(base, num_heads=0), ["num_heads"]),
            ("head_dim a string", dict(base, head_dim="4"), ["head_dim"]),
            ("num_kv_heads 3", dict(base, num_kv_heads=3),
             ["num_kv_heads", "3", "4"]),
            ("layers 0", dict(base, layers=0), ["layers"]),
            ("kv_dtype fp8", dict(base, kv_dtype="fp8"),
             ["kv_dtype", "fp8"]),
            ("max_tokens over max_seq_len", dict(base, max_tokens=16385),
             ["max_tokens", "max_seq_len"]),
            ("max_tokens 0", dict(base, max_tokens=0), ["max_tokens"]),
            ("window right side", dict(base, window=[2, 1]), ["window"]),
            ("window not a pair", dict(base, window=[2]), ["window"]),
            ("softcap 0", dict(base, softcap=0), ["softcap"]),
            ("alibi of 2 slopes for 4 heads", dict(base, alibi=[0.5, 0.25]),
             ["alibi"]),
            ("alibi of 1 slope for 4 heads", dict(base, alibi=[0.5]),
             ["alibi"]),
            ("alibi of 6 slopes for 4 heads",
             dict(base, alibi=[0.5, 0.25, 0.125, 0.0625, 1, 2]), ["alibi"]),
            ("rotary dims odd", dict(base, rotary={"dims": 3}), ["dims"]),
            ("rotary dims over head_dim", dict(base, rotary={"dims": 6}),
             ["dims"]),
            ("rotary base 1", dict(base, rotary={"base": 1}), ["base"]),
            ("not an object", [1, 2], []),
    ):
        fails.run(lambda: expect_error(s_put(p, "it-bad-spec", spec), 400,
                                       *needles, what="PUT " + what))
        cleanup(p, ["it-bad-spec"])
    expect_error(request(p, "PUT", path("it-bad-spec"), b"{\"num_heads\": "),
                 400, what="PUT of broken JSON")
    expect_status(s_get(p, "it-bad-spec"), 404, "bad specs created nothing")
    ref = Ref("it-bad-step", H=4, Hkv=2, D=4, layers=2)
    rng = random.Random(cfg.seed + 4106)
    q, k, v = tokens(ref, rng, 2)
    good = step_body(ref, 0, q, k, v)
    try:
        create(p, ref)
        for what, body, needles in (
                ("query row size", dict(good, query=[[[1, 2, 3]] * 4] * 2),
                 ["query"]),
                ("query heads", dict(good, query=[[[1, 2, 3, 4]] * 3] * 2),
                 ["query"]),
                ("flat query size", dict(good, query=[[0.5] * 15] * 2),
                 ["query", "16"]),
                ("key heads", dict(good, key=[[[1, 2, 3, 4]] * 4] * 2),
                 ["key"]),
                ("key rows", dict(good, key=good["key"][:1]), ["key"]),
                ("value rows", dict(good, value=good["value"] * 2),
                 ["value"]),
                ("key without value", {k_: v_ for k_, v_ in good.items()
                                       if k_ != "value"}, ["value"]),
                ("value without key", {k_: v_ for k_, v_ in good.items()
                                       if k_ != "key"}, ["key"]),
                ("keys without position", {k_: v_ for k_, v_ in good.items()
                                           if k_ != "position"},
                 ["position"]),
                ("layer 2 of 2", dict(good, layer=2), ["layer"]),
                ("layer -1", dict(good, layer=-1), ["layer"]),
                ("no query", {k_: v_ for k_, v_ in good.items()
                              if k_ != "query"}, ["query"]),
                ("empty query", dict(good, query=[], key=[], value=[]),
                 ["query"]),
                ("unknown field", dict(good, postion=0),
                 ["postion", "did you mean", "position"]),
                ("need_weights a string", dict(good, need_weights="yes"),
                 ["need_weights"])):
            fails.run(lambda: expect_error(
                s_post(p, ref.id, "/attend", body), 400, *needles,
                what="step " + what))
        r = s_post(p, ref.id, "/attend", dict(good, position=-1))
        check(r.status in (400, 409) and "position" in r.body.decode(),
              "position -1: %r" % r)
        check(lengths(p, ref.id) == [0, 0], "bad steps appended: %r" %
              lengths(p, ref.id))
        for what, tail, body, needles in (
                ("truncate -1", "/truncate", {"length": -1}, ["length"]),
                ("truncate unknown field", "/truncate", {"lenght": 1},
                 ["lenght", "did you mean", "length"]),
                ("fork bad id", "/fork", {"id": "no way"}, ["id"]),
                ("fork no id", "/fork", {}, ["id"])):
            fails.run(lambda: expect_error(s_post(p, ref.id, tail, body),
                                           400, *needles, what=what))
        step(p, ref, 0, q, k, v, what="after the bad ones")
        fails.done()
    finally:
        cleanup(p, [ref.id])


# ---- /v1: positions, retries, queries only ----------------------------------

@test
def session_positions_and_retries():
    """A step at another position: 409 with "length", nothing changes.  A
    retry of the last step: the same bits, nothing appended; with other
    values: 409; of an older step: 409.  Queries only on an empty layer:
    409; on a full one: the reference at the length, nothing appended."""
    p = shared().port
    rng = random.Random(cfg.seed + 4107)
    ids = []
    try:
        for dt in ("fp32", "bf16", "fp16"):
            ref = Ref("it-retry-" + dt, H=4, Hkv=2, D=8, layers=2,
                      kv_dtype=dt, rotary=True, alibi=True)
            ids.append(ref.id)
            create(p, ref)
            qo = step_body(ref, 0, tokens(ref, rng, 1)[0])
            expect_error(s_post(p, ref.id, "/attend", qo), 409,
                         what="%s queries only on an empty layer" % dt)
            step(p, ref, 0, *tokens(ref, rng, 4, grid=True), what=dt)
            q, k, v = tokens(ref, rng, 3, grid=True)
            j1 = step(p, ref, 0, q, k, v, what=dt)
            for pos in (0, 3, 8, 100):
                r = s_post(p, ref.id, "/attend",
                           step_body(ref, 0, q, k, v, position=pos))
                expect_error(r, 409, "length", what="%s at position %d" %
                             (dt, pos))
                check(r.json().get("length") == 7, "409 at %d: length %r" %
                      (pos, r.json()))
            r = s_post(p, ref.id, "/attend", step_body(ref, 1, q, k, v,
                                                       position=1))
            expect_error(r, 409, "length", what=dt + " layer 1 at 1")
            check(r.json().get("length") == 0, "layer 1 length: %r" %
                  r.json())
            # the retry: position 4 + t 3 = the length 7
            body = step_body(ref, 0, q, k, v, position=4)
            for i in range(2):
                r = s_post(p, ref.id, "/attend", body)
                expect_status(r, 200, "%s retry %d" % (dt, i))
                j2 = r.json()
                check(j2.get("length") == 7, "retry length: %r" %
                      j2.get("length"))
                assert_bits(flatten(j2["output"]), flatten(j1["output"]),
                            "%s retry %d output" % (dt, i))
                assert_bits(flatten(j2["lse"]), flatten(j1["lse"]),
                            "%s retry %d lse" % (dt, i))
            check(lengths(p, ref.id) == [7, 0], "after the retries: %r" %
                  lengths(p, ref.id))
            # a retry with another value, and a retry of the older step
            k2 = [list(r_) for r_ in k]
            k2[2][5] += 0.5
            for what, bd in (("another key", step_body(ref, 0, q, k2, v,
                                                       position=4)),
                             ("another value", step_body(
                                 ref, 0, q, k, [r_[::-1] for r_ in v],
                                 position=4)),
                             ("the older step", step_body(
                                 ref, 0, q, k, v, position=3))):
                expect_error(s_post(p, ref.id, "/attend", bd), 409,
                             what="%s retry with %s" % (dt, what))
            # a retry with other queries is a retry (keys and values are
            # what is compared): answered for those queries; so is one of
            # the step's last rows
            q3 = tokens(ref, rng, 3, grid=True)[0]
            for what, qq, kk, vv, pos in (("other queries", q3, k, v, 4),
                                          ("its last two rows", q[1:],
                                           k[1:], v[1:], 5)):
                r = s_post(p, ref.id, "/attend", step_body(ref, 0, qq, kk,
                                                           vv, position=pos))
                expect_status(r, 200, "%s retry with %s" % (dt, what))
                tmp = ref.copy("tmp")
                tmp.truncate(pos)
                out, lse, _ = tmp.step(0, qq, kk, vv)
                check_answer(r.json(), out, lse, len(qq), ref,
                             "%s retry with %s" % (dt, what))
            check(lengths(p, ref.id) == [7, 0], "after the retries: %r" %
                  lengths(p, ref.id))
            # queries only: at the length, every key; nothing appended
            step(p, ref, 0, tokens(ref, rng, 3)[0], what=dt)
            check(lengths(p, ref.id) == [7, 0], "queries only appended")
            step(p, ref, 0, *tokens(ref, rng, 1, grid=True), what=dt)
    finally:
        cleanup(p, ids)


@test
def session_truncate_and_fork():
    """Truncate keeps the first n tokens of every layer; fork is 201 and a
    copy; after either steps on its own, neither sees the other's tokens;
    a fork to a taken id is 409; forks of forks and truncated forks."""
    p = shared().port
    rng = random.Random(cfg.seed + 4108)
    kw = dict(H=4, Hkv=1, D=8, layers=2, rotary=True, window=[12, 0])
    a = Ref("it-tf-a", **kw)
    ids = [a.id, "it-tf-b", "it-tf-c", "it-tf-d"]
    try:
        create(p, a)
        for t in (5, 14):  # 19 tokens: a partly filled second block
            for L in (0, 1):
                step(p, a, L, *tokens(a, rng, t), what="a")
        step(p, a, 1, *tokens(a, rng, 3), what="a")  # layer 1: 22
        r = s_post(p, a.id, "/fork", {"id": "it-tf-b"})
        expect_status(r, 201, "fork")
        o = r.json()
        check(o.get("id") == "it-tf-b" and o.get("length") == [19, 22] and
              o.get("num_kv_heads") == 1, "fork object: %r" % o)
        b = a.copy("it-tf-b")
        expect_error(s_post(p, a.id, "/fork", {"id": "it-tf-b"}), 409,
                     "it-tf-b", what="fork to a taken id")
        expect_error(s_post(p, b.id, "/fork", {"id": a.id}), 409, a.id,
                     what="fork to the parent's id")
        # both go on, each with its own tokens, in the shared block
        for L in (0, 1):
            step(p, a, L, *tokens(a, rng, 2), what="a after fork")
            step(p, b, L, *tokens(b, rng, 1), what="b after fork")
            step(p, b, L, *tokens(b, rng, 16), what="b after fork")
            step(p, a, L, *tokens(a, rng, 1), what="a after fork")
        for ref in (a, b):
            for L in (0, 1):
                step(p, ref, L, tokens(ref, rng, 2)[0], what="isolation")
        # truncate: every layer keeps at most its first n
        r = s_post(p, a.id, "/truncate", {"length": 20})
        expect_status(r, 200, "truncate")
        check(r.json().get("length") == [20, 20], "truncated: %r" % r.json())
        a.truncate(20)
        for L in (0, 1):
            step(p, a, L, *tokens(a, rng, 3), what="a after truncate")
        check(lengths(p, b.id) == [36, 39], "b after a's truncate: %r" %
              lengths(p, b.id))
        r = s_post(p, a.id, "/truncate", {"length": 1000})
        check(r.status == 200 and r.json()["length"] == [23, 23],
              "truncate beyond the length: %r" % r)
        # a fork of the fork, truncated inside the shared first block
        r = s_post(p, b.id, "/fork", {"id": "it-tf-c"})
        expect_status(r, 201, "fork of a fork")
        c = b.copy("it-tf-c")
        r = s_post(p, c.id, "/truncate", {"length": 4})
        expect_status(r, 200, "truncate the fork")
        c.truncate(4)
        for L in (0, 1):
            step(p, c, L, *tokens(c, rng, 6), what="c")
            step(p, b, L, *tokens(b, rng, 2), what="b")
        for ref in (a, b, c):
            for L in (0, 1):
                step(p, ref, L, tokens(ref, rng, 1)[0], what="isolation 2")
        # truncate to 0, the layers start again
        r = s_post(p, c.id, "/truncate", {"length": 0})
        check(r.status == 200 and r.json()["length"] == [0, 0],
              "truncate to 0: %r" % r)
        c.truncate(0)
        step(p, c, 1, *tokens(c, rng, 2), what="c from 0")
        # deleting the parent leaves the fork whole
        r = s_post(p, a.id, "/fork", {"id": "it-tf-d"})
        expect_status(r, 201, "fork d")
        d = a.copy("it-tf-d")
        expect_status(s_del(p, a.id), 204, "delete the parent")
        for L in (0, 1):
            step(p, d, L, *tokens(d, rng, 2), what="d after the parent")
    finally:
        cleanup(p, ids)


@test
def session_need_weights():
    """need_weights: attn_weights [H][t][length], the reference's
    probabilities; beyond max_weights_elements 413, nothing appended."""
    p = shared().port
    rng = random.Random(cfg.seed + 4109)
    ref = Ref("it-weights", H=4, Hkv=2, D=8, window=[3, 0], alibi=True)
    try:
        create(p, ref)
        step(p, ref, 0, *tokens(ref, rng, 3))
        for t in (4, 1):
            q, k, v = tokens(ref, rng, t)
            r = s_post(p, ref.id, "/attend",
                       step_body(ref, 0, q, k, v, need_weights=True))
            expect_status(r, 200, "need_weights")
            j = r.json()
            out, lse, w = ref.step(0, q, k, v)
            check_answer(j, out, lse, t, ref, "need_weights")
            n = ref.length()
            aw = j.get("attn_weights")
            check(isinstance(aw, list) and len(aw) == 4 and
                  all(len(x) == t and all(len(y) == n for y in x)
                      for x in aw),
                  "attn_weights not [H=4][t=%d][length=%d]: %r" %
                  (t, n, str(aw)[:200]))
            assert_close(flatten(aw), flatten(w), "attn_weights")
        r = s_post(p, ref.id, "/attend",
                   step_body(ref, 0, *tokens(ref, rng, 1),
                             need_weights=False))
        check(r.status == 200 and "attn_weights" not in r.json(),
              "need_weights false: %r" % r)
    finally:
        cleanup(p, [ref.id])
    with Server("--max-weights-elements", "20", name="sess-weights") as s:
        ref = Ref("it-weights-small", H=2, D=4)
        create(s.port, ref)
        step(s.port, ref, 0, *tokens(ref, rng, 3))
        r = s_post(s.port, ref.id, "/attend",
                   step_body(ref, 0, *tokens(ref, rng, 2),
                             need_weights=True))  # 2 x 2 x 5 = 20: fits
        expect_status(r, 200, "20 weights")
        r = s_post(s.port, ref.id, "/attend",
                   step_body(ref, 0, *tokens(ref, rng, 2), position=5,
                             need_weights=True))  # 2 x 2 x 7 = 28
        expect_error(r, 413, "max_weights_elements",
                     what="28 weights over 20")
        check(lengths(s.port, ref.id) == [5], "413 appended: %r" %
              lengths(s.port, ref.id))


# ---- limits, memory, lifetime -----------------------------------------------

@test
def session_max_tokens():
    """A step past max_tokens is a 4xx naming it, and appends nothing."""
    p = shared().port
    rng = random.Random(cfg.seed + 4110)
    ref = Ref("it-maxtok", H=2, D=4, layers=2, max_tokens=6)
    try:
        create(p, ref)
        step(p, ref, 0, *tokens(ref, rng, 5))
        for t in (2, 7):
            r = s_post(p, ref.id, "/attend",
                       step_body(ref, 0, *tokens(ref, rng, t)))
            check(400 <= r.status < 500, "step of %d at 5 of 6: %r" % (t, r))
            expect_error(r, r.status, "max_tokens", what="past max_tokens")
        check(lengths(p, ref.id) == [5, 0], "past max_tokens appended: %r" %
              lengths(p, ref.id))
        r = s_post(p, ref.id, "/attend",
                   step_body(ref, 1, *tokens(ref, rng, 7)))
        check(400 <= r.status < 500 and "max_tokens" in r.body.decode(),
              "7 tokens on an empty layer of max 6: %r" % r)
        step(p, ref, 0, *tokens(ref, rng, 1))
        step(p, ref, 1, *tokens(ref, rng, 6))
        r = s_post(p, ref.id, "/attend",
                   step_body(ref, 1, *tokens(ref, rng, 1)))
        check(400 <= r.status < 500 and "max_tokens" in r.body.decode(),
              "a 7th token: %r" % r)
        check(lengths(p, ref.id) == [6, 6], "lengths %r" %
              lengths(p, ref.id))
        step(p, ref, 1, tokens(ref, rng, 2)[0])  # queries only still work
    finally:
        cleanup(p, [ref.id])


def metric(port, name, **labels):
    """The value of one series of GET /metrics (None when absent)."""
    r = request(port, "GET", "/metrics")
    expect_status(r, 200, "GET /metrics")
    want = sorted(labels.items())
    for line in r.body.decode().splitlines():
        if not line.startswith(name):
            continue
        m = re.match(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)$', line)
        if not m or m.group(1) != name:
            continue
        got = sorted(re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)="([^"]*)"',
                                m.group(3) or ""))
        if got == want:
            return float(m.group(4))
    return None


def wait_metric(port, name, pred, what, timeout=10.0, **labels):
    deadline = time.monotonic() + timeout
    while True:
        v = metric(port, name, **labels)
        if v is not None and pred(v):
            return v
        check(time.monotonic() < deadline, "%s: %s%r is %r" %
              (what, name, labels, v))
        time.sleep(0.05)


@test
def session_kv_cache_bytes_507():
    """kv_cache_bytes of 1 MiB: sessions that need blocks past it get a
    507 saying what is in use and by how many sessions, and append
    nothing (a step of many tokens neither); a block freed by DELETE
    serves again, showing none of its old data."""
    limit = 1 << 20
    H, D = 8, 64
    bb = block_bytes(H, D, "fp32")  # 64 KiB: at most 16 blocks
    rng = random.Random(cfg.seed + 4111)
    with Server("--kv-cache-bytes", str(limit), name="sess-kv") as s:
        p = s.port
        check(metric(p, "attnd_kv_cache_bytes", state="limit") == limit,
              "limit series: %r" % metric(p, "attnd_kv_cache_bytes",
                                          state="limit"))
        refs, full = [], None
        for i in range(limit // bb + 2):
            ref = Ref("it-kv-%d" % i, H=H, D=D)
            create(p, ref)
            q, k, v = tokens(ref, rng, 1)
            r = s_post(p, ref.id, "/attend", step_body(ref, 0, q, k, v))
            if r.status == 507:
                full = (ref, r)
                break
            expect_status(r, 200, "step of session %d" % i)
            ref.step(0, q, k, v)
            refs.append(ref)
        check(full is not None, "no 507 after %d blocks of %d bytes in %d" %
              (len(refs), bb, limit))
        check(len(refs) >= 2, "507 at the first block of %d bytes in %d" %
              (bb, limit))
        ref, r = full
        msg = expect_error(r, 507, "use", "session", what="507")
        check(str(len(refs) + 1) in msg or str(len(refs)) in msg,
              "507 does not say how many sessions: %r" % msg)
        check(lengths(p, ref.id) == [0], "507 appended: %r" %
              lengths(p, ref.id))
        used = metric(p, "attnd_kv_cache_bytes", state="used")
        check(used is not None and len(refs) * bb <= used <= limit,
              "used %r, limit %d, %d blocks of %d" %
              (used, limit, len(refs), bb))
        # a step of 40 tokens on a session that has blocks: 507, nothing
        tok0 = metric(p, "attnd_session_tokens_total")
        r = s_post(p, refs[0].id, "/attend",
                   step_body(refs[0], 0, *tokens(refs[0], rng, 40)))
        expect_error(r, 507, what="40 tokens")
        check(lengths(p, refs[0].id) == [1], "507 appended: %r" %
              lengths(p, refs[0].id))
        check(metric(p, "attnd_session_tokens_total") == tok0,
              "tokens counted for a 507")
        # the slots left in refs[0]'s block still take tokens
        step(p, refs[0], 0, *tokens(refs[0], rng, 15))
        # room again after a DELETE; the block comes back clean
        expect_status(s_del(p, refs[1].id), 204, "delete")
        step(p, ref, 0, *tokens(ref, rng, 3), what="after a DELETE")
        step(p, ref, 0, tokens(ref, rng, 2)[0], what="after a DELETE")
        for x in refs[2:5]:
            step(p, x, 0, tokens(x, rng, 1)[0], what="the others")


@test
def session_max_sessions_507():
    """max_sessions 3: a 4th session (PUT, fork, sequence_start) is a 507;
    PUT of an existing one is still 200; a DELETE makes room."""
    with Server("--max-sessions", "3", name="sess-max") as s:
        p = s.port
        refs = [Ref("it-max-%d" % i, H=2, D=4) for i in range(4)]
        for ref in refs[:3]:
            create(p, ref)
        expect_error(s_put(p, refs[3].id, refs[3].spec()), 507,
                     "max_sessions", what="a 4th session")
        expect_error(s_post(p, refs[0].id, "/fork", {"id": "it-max-f"}),
                     507, "max_sessions", what="a fork as the 4th")
        r = v2_infer(p, MODEL, [v2_in("query", [1, 2, 4], [0.5] * 8),
                                v2_in("key", [1, 2, 4], [0.5] * 8),
                                v2_in("value", [1, 2, 4], [0.5] * 8)],
                     params={"sequence_id": "it-max-seq",
                             "sequence_start": True})
        expect_error(r, 507, "max_sessions", what="sequence_start as 4th")
        expect_status(s_put(p, refs[0].id, refs[0].spec()), 200,
                      "PUT of an existing one at the limit")
        check(len(s_list(p)) == 3, "list at the limit")
        expect_status(s_del(p, refs[0].id), 204, "delete")
        create(p, refs[3])
        expect_status(s_get(p, "it-max-f"), 404, "the refused fork")


@test
def session_idle_timeout_expires():
    """session_idle_timeout_s 1: an unused session is freed (the expired
    counter moves); then GET, a step, a fork and v2 are 404s saying it
    expired, and an id that never existed is a plain 404."""
    with Server("--session-idle-timeout-s", "1", name="sess-idle") as s:
        p = s.port
        rng = random.Random(cfg.seed + 4112)
        ref = Ref("it-idle", H=2, D=4)
        create(p, ref)
        step(p, ref, 0, *tokens(ref, rng, 2))
        check(metric(p, "attnd_sessions") == 1, "attnd_sessions %r" %
              metric(p, "attnd_sessions"))
        # /metrics does not touch the session
        wait_metric(p, "attnd_sessions_expired_total", lambda v: v >= 1,
                    "session expired", timeout=15)
        check(metric(p, "attnd_sessions") == 0, "attnd_sessions after "
              "expiry: %r" % metric(p, "attnd_sessions"))
        check(metric(p, "attnd_kv_cache_bytes", state="used") == 0,
              "bytes used after expiry")
        expect_error(s_get(p, ref.id), 404, ref.id, "expired",
                     what="GET an expired session")
        expect_error(s_post(p, ref.id, "/attend",
                            step_body(ref, 0, *tokens(ref, rng, 1))), 404,
                     ref.id, "expired", what="step of an expired session")
        expect_error(s_post(p, ref.id, "/fork", {"id": "it-idle-f"}), 404,
                     "expired", what="fork of an expired session")
        r = kv_v2(p, [(ref.id, 2) + tokens(ref, rng, 1)], 1, 2, 2, 4)
        expect_error(r, 404, ref.id, "expired", what="v2 expired")
        e = expect_error(s_get(p, "it-never-was"), 404, "it-never-was",
                         what="GET a session that never was")
        check("expired" not in e.lower(), "never-was says expired: %r" % e)
        check(ref.id not in {x["id"] for x in s_list(p)}, "expired listed")
        create(p, Ref("it-idle", H=2, D=4))  # the id is free again


@test
def session_api_keys_own_sessions():
    """With API keys, a session belongs to the key that made it: another
    key gets 404 for every route (not 403), its own list, its own
    namespace (the same id is another session), on /v1 and v2."""
    rng = random.Random(cfg.seed + 4113)
    with tempfile.TemporaryDirectory() as d:
        kf = os.path.join(d, "keys")
        with open(kf, "w") as f:
            f.write("key-alice\nkey-bob\n")
        with Server("--api-keys-file", kf, name="sess-keys") as s:
            p = s.port
            A, B = {"X-Api-Key": "key-alice"}, \
                {"Authorization": "Bearer key-bob"}
            ra = Ref("it-own", H=2, D=4)
            create(p, ra, headers=A)
            step(p, ra, 0, *tokens(ra, rng, 3), headers=A)
            create(p, Ref("it-alice-2", H=1, D=2), headers=A)
            expect_status(s_get(p, ra.id), 401, "no key")
            for what, r in (
                    ("GET", s_get(p, ra.id, headers=B)),
                    ("DELETE", s_del(p, ra.id, headers=B)),
                    ("attend", s_post(p, ra.id, "/attend", step_body(
                        ra, 0, *tokens(ra, rng, 1)), headers=B)),
                    ("truncate", s_post(p, ra.id, "/truncate",
                                        {"length": 0}, headers=B)),
                    ("fork", s_post(p, ra.id, "/fork", {"id": "it-bob-f"},
                                    headers=B)),
                    ("v2", kv_v2(p, [(ra.id, 3) + tokens(ra, rng, 1)], 1, 2,
                                 2, 4, headers=B)),
                    ("v2 sequence", v2_infer(
                        p, MODEL, [v2_in("query", [1, 2, 4], [0.5] * 8)],
                        params={"sequence_id": ra.id}, headers=B))):
                expect_error(r, 404, ra.id, what="bob's " + what)
            check(s_list(p, headers=B) == [], "bob's list: %r" %
                  s_list(p, headers=B))
            check(sorted(x["id"] for x in s_list(p, headers=A)) ==
                  ["it-alice-2", "it-own"], "alice's list")
            # the same id for bob: his own session, another shape
            rb = Ref("it-own", H=4, Hkv=2, D=8)
            create(p, rb, headers=B)
            step(p, rb, 0, *tokens(rb, rng, 2), headers=B)
            check([x["id"] for x in s_list(p, headers=B)] == ["it-own"],
                  "bob's list")
            step(p, ra, 0, *tokens(ra, rng, 1), headers=A)
            check(lengths(p, ra.id, headers=A) == [4] and
                  lengths(p, rb.id, headers=B) == [2], "the two it-own")
            expect_status(s_del(p, ra.id, headers=A), 204, "alice's delete")
            step(p, rb, 0, tokens(rb, rng, 1)[0], headers=B)


@test
def session_metrics_series_move():
    """attnd_sessions, attnd_kv_cache_bytes{state=used|limit},
    attnd_session_tokens_total (appended tokens: not retries, not
    refusals) and the step latency in the per-model series."""
    rng = random.Random(cfg.seed + 4114)
    limit = 64 << 20
    with Server("--kv-cache-bytes", str(limit), name="sess-metrics") as s:
        p = s.port
        for name, labels, val in (
                ("attnd_sessions", {}, 0),
                ("attnd_kv_cache_bytes", {"state": "used"}, 0),
                ("attnd_kv_cache_bytes", {"state": "limit"}, limit),
                ("attnd_session_tokens_total", {}, 0),
                ("attnd_sessions_expired_total", {}, 0)):
            got = metric(p, name, **labels)
            check(got == val, "%s%r at start: %r, expected %r" %
                  (name, labels, got, val))
        ref = Ref("it-met", H=2, Hkv=1, D=8)
        create(p, ref)
        check(metric(p, "attnd_sessions") == 1, "attnd_sessions 1")
        q, k, v = tokens(ref, rng, 3)
        step(p, ref, 0, q, k, v)
        check(metric(p, "attnd_session_tokens_total") == 3, "tokens 3")
        bb = block_bytes(1, 8, "fp32")
        check(metric(p, "attnd_kv_cache_bytes", state="used") == bb,
              "used: one block of %d: %r" % (bb, metric(
                  p, "attnd_kv_cache_bytes", state="used")))
        r = s_post(p, ref.id, "/attend", step_body(ref, 0, q, k, v,
                                                   position=0))
        expect_status(r, 200, "retry")
        r = s_post(p, ref.id, "/attend", step_body(ref, 0, q, k, v,
                                                   position=1))
        expect_status(r, 409, "conflict")
        check(metric(p, "attnd_session_tokens_total") == 3,
              "retries and conflicts count no token: %r" %
              metric(p, "attnd_session_tokens_total"))
        expect_status(s_post(p, ref.id, "/fork", {"id": "it-met-f"}), 201,
                      "fork")
        check(metric(p, "attnd_sessions") == 2, "attnd_sessions 2")
        check(metric(p, "attnd_kv_cache_bytes", state="used") == bb,
              "a fork shares its block")
        f = ref.copy("it-met-f")
        step(p, f, 0, *tokens(f, rng, 1))
        check(metric(p, "attnd_kv_cache_bytes", state="used") == 2 * bb,
              "the fork's step copies the shared block")
        dur0 = metric(p, "attnd_request_duration_seconds_count",
                      model=MODEL, protocol="v2") or 0
        kv_step(p, [ref], 0, [tokens(ref, rng, 2)], "v2 step")
        check(metric(p, "attnd_session_tokens_total") == 6, "tokens 6")
        wait_metric(p, "attnd_request_duration_seconds_count",
                    lambda x: x >= dur0 + 1, "v2 step latency",
                    model=MODEL, protocol="v2")
        wait_metric(p, "attnd_inference_requests_total", lambda x: x >= 1,
                    "v2 step counted", model=MODEL, protocol="v2",
                    outcome="success")
        # the /v1 steps (3 answered 200 above) in the same per-model series
        wait_metric(p, "attnd_request_duration_seconds_count",
                    lambda x: x >= 3, "/v1 step latency", model=MODEL,
                    protocol="v1")
        for sid in (ref.id, f.id):
            expect_status(s_del(p, sid), 204, "delete")
        check(metric(p, "attnd_sessions") == 0, "attnd_sessions 0")
        check(metric(p, "attnd_kv_cache_bytes", state="used") == 0,
              "used 0 after the deletes")


@test
def session_bytes_count_against_nothing_else():
    """Sessions holding more than max_total_body_bytes: stateless
    requests and session steps still get 200."""
    rng = random.Random(cfg.seed + 4115)
    budget = 131072
    with Server("--max-body-bytes", "65536", "--max-total-body-bytes",
                str(budget), name="sess-budget") as s:
        p = s.port
        refs = [Ref("it-budget-%d" % i, H=4, D=64, layers=8)
                for i in range(2)]
        for ref in refs:
            create(p, ref)
            for L in range(8):
                step(p, ref, L, *tokens(ref, rng, 1))
        used = metric(p, "attnd_kv_cache_bytes", state="used")
        check(used >= 4 * budget, "used %r" % used)
        for _ in range(3):
            v1_ok(v1(p, {"query": [[1, 0], [0, 1]]}), "/v1/attention")
            for ref in refs:
                step(p, ref, 3, *tokens(ref, rng, 1))


# ---- KServe v2: kv_attention ------------------------------------------------

@test
def session_v2_batched_json_and_binary():
    """kv_attention batched: JSON and binary, FP32, FP16 and BF16 inputs,
    session_id as JSON or as Triton's binary BYTES, layers, queries only,
    prefill steps; against the reference; binary and JSON answers the same
    bits."""
    p = shared().port
    rng = random.Random(cfg.seed + 4116)
    H, Hkv, D = 4, 2, 8
    refs = [Ref("it-v2-%d" % i, H=H, Hkv=Hkv, D=D, layers=2, **kw)
            for i, kw in enumerate([{}, {"rotary": True},
                                    {"kv_dtype": "bf16", "alibi": True},
                                    {"window": [4, 0], "softcap": 5.0}])]
    try:
        for ref in refs:
            create(p, ref)
        for i, (t, dt, binary, bb) in enumerate((
                (5, "FP32", False, False), (1, "FP32", True, False),
                (3, "FP16", True, False), (1, "BF16", True, True),
                (2, "FP32", True, True), (1, "BF16", True, False))):
            for L in (0, 1):
                toks = [tokens(ref, rng, t, grid=True) for ref in refs]
                kv_step(p, refs, L, toks, "v2 %s %s t=%d" %
                        (dt, "binary" if binary else "JSON", t),
                        dtype=dt, binary=binary, bytes_binary=bb)
        # a sub-batch, out of order
        sub = [refs[2], refs[0]]
        kv_step(p, sub, 1, [tokens(r, rng, 1) for r in sub], "sub-batch")
        # queries only (position ignored)
        items = [(ref.id, 0, tokens(ref, rng, 1)[0], None, None)
                 for ref in refs]
        r = kv_v2(p, items, 1, H, Hkv, D, queries_only=True)
        got = kv_outs(r, 4, 1, H, D, "queries only")
        for b, ref in enumerate(refs):
            out, lse, _ = ref.step(0, items[b][2])
            assert_close(got[b][0], flatten(out), "queries only output",
                         ref.tol())
            assert_close(got[b][1], flatten(lse), "queries only lse",
                         ref.tol())
        for ref in refs:
            check(lengths(p, ref.id) == [ref.length(0), ref.length(1)],
                  "%s lengths %r, expected %r" % (ref.id, lengths(p, ref.id),
                                                  [ref.length(0),
                                                   ref.length(1)]))
        # the same retry as JSON and as binary: the same bits
        toks = [tokens(ref, rng, 2) for ref in refs]
        j = kv_step(p, refs, 0, toks, "before the retries")
        items = [(ref.id, ref.length(0) - 2) + tuple(tk)
                 for ref, tk in zip(refs, toks)]
        rj = kv_outs(kv_v2(p, items, 2, H, Hkv, D, binary_out=False), 4, 2,
                     H, D, "retry JSON")
        rb = kv_outs(kv_v2(p, items, 2, H, Hkv, D, binary=True,
                           binary_out=True), 4, 2, H, D, "retry binary")
        for b in range(4):
            for x, what in ((rj, "JSON"), (rb, "binary")):
                assert_bits(x[b][0], j[b][0], "retry %s output %d" %
                            (what, b))
                assert_bits(x[b][1], j[b][1], "retry %s lse %d" % (what, b))
        # metadata: both forms
        r = request(p, "GET", "/v2/models/" + MODEL)
        expect_status(r, 200, "kv_attention metadata")
        names = {x["name"] for x in r.json().get("inputs", [])}
        check({"session_id", "position", "query", "key", "value"} <= names,
              "metadata inputs: %r" % names)
        names = {x["name"] for x in r.json().get("outputs", [])}
        check({"output", "lse"} <= names, "metadata outputs: %r" % names)
        check("sequence_id" in json.dumps(r.json()),
              "metadata does not describe the sequence form: %r" % r.json())
    finally:
        cleanup(p, [r.id for r in refs])


@test
def session_v2_batch_all_or_nothing():
    """A batch with one session unknown, at another position, past its
    max_tokens, or named twice: the 4xx of the first such session, naming
    it and its index; no session changes.  Sessions of another shape:
    400."""
    p = shared().port
    rng = random.Random(cfg.seed + 4117)
    H, Hkv, D = 2, 1, 4
    refs = [Ref("it-aon-%d" % i, H=H, Hkv=Hkv, D=D, max_tokens=8)
            for i in range(3)]
    odd = Ref("it-aon-odd", H=2, Hkv=2, D=4)
    try:
        for ref in refs + [odd]:
            create(p, ref)
        kv_step(p, refs, 0, [tokens(r, rng, 2) for r in refs], "first")

        def items(pos=None, ids=None, t=1):
            return [((ids or {}).get(b, ref.id),
                     (pos or {}).get(b, ref.length()))
                    + tokens(ref, rng, t) for b, ref in enumerate(refs)]
        for what, its, status, needles in (
                ("unknown at 1", items(ids={1: "it-aon-nope"}), 404,
                 ["it-aon-nope", "1"]),
                ("position at 2", items(pos={2: 0}), 409,
                 ["it-aon-2", "2", "length"]),
                ("positions at 1 and 2", items(pos={1: 5, 2: 0}), 409,
                 ["it-aon-1", "1"]),
                ("twice", items(ids={2: "it-aon-0"}), 400, ["it-aon-0"]),
                ("another shape at 1", items(ids={1: odd.id}), 400,
                 [odd.id])):
            r = kv_v2(p, its, 1, H, Hkv, D)
            expect_error(r, status, *needles, what=what)
        # max_tokens: 2 + 7 > 8 for all; the first is index 0
        r = kv_v2(p, items(t=7), 7, H, Hkv, D)
        check(400 <= r.status < 500, "past max_tokens: %r" % r)
        expect_error(r, r.status, "it-aon-0", "max_tokens",
                     what="past max_tokens")
        check([lengths(p, ref.id) for ref in refs] == [[2]] * 3,
              "a refused batch changed a session: %r" %
              [lengths(p, ref.id) for ref in refs])
        # index 1 full: 2 + 6 = 8 of 8; then a batch of 1 more token each
        kv_step(p, [refs[1]], 0, [tokens(refs[1], rng, 6)], "fill 1")
        r = kv_v2(p, [(refs[0].id, 2) + tokens(refs[0], rng, 1),
                      (refs[1].id, 8) + tokens(refs[1], rng, 1),
                      (refs[2].id, 2) + tokens(refs[2], rng, 1)],
                  1, H, Hkv, D)
        check(400 <= r.status < 500, "index 1 full: %r" % r)
        expect_error(r, r.status, "it-aon-1", "max_tokens",
                     what="index 1 full")
        check([lengths(p, ref.id) for ref in refs] == [[2], [8], [2]],
              "a refused batch changed a session: %r" %
              [lengths(p, ref.id) for ref in refs])
        # the others go on
        kv_step(p, [refs[2], refs[0]], 0,
                [tokens(refs[2], rng, 1), tokens(refs[0], rng, 1)], "after")
    finally:
        cleanup(p, [r.id for r in refs + [odd]])


# ---- KServe v2: Triton's sequence extension ---------------------------------

def seq_inputs(ref, q, k=None, v=None):
    t = len(q)
    ins = [v2_in("query", [t, ref.H, ref.D], flatten(q))]
    if k is not None:
        ins += [v2_in("key", [t, ref.Hkv, ref.D], flatten(k)),
                v2_in("value", [t, ref.Hkv, ref.D], flatten(v))]
    return ins


def seq_step(p, ref, sid, layer, q, k, v, what, params=None, tol=None):
    prm = {"sequence_id": sid, "layer": layer}
    prm.update(params or {})
    r = v2_infer(p, MODEL, seq_inputs(ref, q, k, v), params=prm)
    _, o = decode_v2(r, what)
    t = len(q)
    check(o.get("output", {}).get("shape") == [t, ref.H, ref.D] and
          o.get("lse", {}).get("shape") == [t, ref.H],
          "%s: shapes %r" % (what, {n: x["shape"] for n, x in o.items()}))
    out, lse, _ = ref.step(layer, q, k, v)
    tol = ref.tol() if tol is None else tol
    assert_close(o["output"]["data"], flatten(out), what + " output", tol)
    assert_close(o["lse"]["data"], flatten(lse), what + " lse", tol)
    return o


@test
def session_v2_sequence_extension():
    """sequence_id (string and uint64), sequence_start creating from the
    tensors and parameters, steps at the length, sequence_end deleting
    after the answer; an unknown sequence_id is a 404; server metadata
    lists sequence and sequence(string_id)."""
    p = shared().port
    rng = random.Random(cfg.seed + 4118)
    j = request(p, "GET", "/v2").json()
    for ext in ("sequence", "sequence(string_id)"):
        check(ext in j.get("extensions", []), "server metadata lacks %r: %r"
              % (ext, j.get("extensions")))
    sid = "it-seq-raw"
    ref = Ref(sid, H=4, Hkv=2, D=8, layers=2, max_tokens=64,
              kv_dtype="fp16", window=[5, 0], softcap=6.0, alibi=True,
              rotary={"base": 1000.0, "dims": 4, "interleaved": True})
    start = {"sequence_start": True, "layers": 2, "max_tokens": 64,
             "kv_dtype": "fp16", "window_left": 5, "softcap": 6.0,
             "alibi": True, "rotary": True, "rotary_base": 1000.0,
             "rotary_dims": 4, "rotary_interleaved": True}
    try:
        expect_error(v2_infer(p, MODEL, seq_inputs(ref, *tokens(ref, rng, 1)),
                              params={"sequence_id": sid}), 404, sid,
                     what="a sequence_id that names no session")
        seq_step(p, ref, sid, 0, *tokens(ref, rng, 4), what="start",
                 params=start)
        o = get_obj(p, sid)
        for f, val in (("layers", 2), ("num_heads", 4), ("num_kv_heads", 2),
                       ("head_dim", 8), ("max_tokens", 64),
                       ("kv_dtype", "fp16"), ("length", [4, 0])):
            check(o.get(f) == val, "sequence_start made %s %r, expected %r"
                  % (f, o.get(f), val))
        for i, t in enumerate((1, 3, 1)):
            for L in (1, 0):
                seq_step(p, ref, sid, L, *tokens(ref, rng, t),
                         what="step %d layer %d" % (i, L),
                         params={"sequence_start": False,
                                 "sequence_end": False})
        seq_step(p, ref, sid, 1, tokens(ref, rng, 2)[0], None, None,
                 what="queries only")
        seq_step(p, ref, sid, 0, *tokens(ref, rng, 1), what="end",
                 params={"sequence_end": True})
        expect_status(s_get(p, sid), 404, "after sequence_end")
        expect_error(v2_infer(p, MODEL, seq_inputs(ref, *tokens(ref, rng, 1)),
                              params={"sequence_id": sid}), 404, sid,
                     what="a step after sequence_end")
        # uint64 ids, start and end in one request
        for n in (42, 2 ** 64 - 1):
            r2 = Ref(str(n), H=2, D=4)
            seq_step(p, r2, n, 0, *tokens(r2, rng, 3), what="uint64 start",
                     params={"sequence_start": True})
            seq_step(p, r2, n, 0, *tokens(r2, rng, 1), what="uint64 step")
            seq_step(p, r2, n, 0, *tokens(r2, rng, 1), what="uint64 end",
                     params={"sequence_end": True})
            expect_status(v2_infer(p, MODEL, seq_inputs(r2, *tokens(
                r2, rng, 1)), params={"sequence_id": n}), 404,
                "uint64 %d after its end" % n)
        r3 = Ref("it-seq-once", H=2, D=4)
        seq_step(p, r3, r3.id, 0, *tokens(r3, rng, 2), what="start and end",
                 params={"sequence_start": True, "sequence_end": True})
        expect_status(s_get(p, r3.id), 404, "start and end in one")
        for what, prm in (("bad id", {"sequence_id": "no way",
                                      "sequence_start": True}),
                          ("sequence_id a fraction", {"sequence_id": 1.5}),
                          ("kv_dtype", {"sequence_id": "it-seq-bad",
                                        "sequence_start": True,
                                        "kv_dtype": "fp8"}),
                          ("window_right", {"sequence_id": "it-seq-bad",
                                            "sequence_start": True,
                                            "window_left": 2,
                                            "window_right": 1})):
            r = v2_infer(p, MODEL, seq_inputs(r3, *tokens(r3, rng, 1)),
                         params=prm)
            expect_error(r, 400, what="sequence " + what)
    finally:
        cleanup(p, [sid, "42", str(2 ** 64 - 1), "it-seq-once"])


@test
def session_tritonclient_sequence():
    """tritonclient's sequence_id=, sequence_start=, sequence_end= work
    unchanged: binary inputs and outputs, string and int ids, its 404."""
    p = shared().port
    rng = random.Random(cfg.seed + 4119)
    ref = Ref("it-tc-seq", H=4, Hkv=1, D=8, rotary=True)

    def ins(q, k, v, dt="FP32"):
        t = len(q)
        return [tc_input("query", [t, 4, 8], dt, flatten(q)),
                tc_input("key", [t, 1, 8], dt, flatten(k)),
                tc_input("value", [t, 1, 8], dt, flatten(v))]

    def check_res(res, out, lse, what):
        check(res.outputs["output"][1] == [len(out), 4, 8],
              "%s: output shape %r" % (what, res.outputs["output"][1]))
        assert_close(res.as_values("output"), flatten(out), what + " output")
        assert_close(res.as_values("lse"), flatten(lse), what + " lse")

    try:
        with TcClient(p) as c:
            tc_expect_error(lambda: c.infer(MODEL, ins(*tokens(ref, rng, 1)),
                                            sequence_id=ref.id), 404,
                            ref.id, what="tritonclient unknown sequence")
            for i, (t, dt) in enumerate(((6, "FP32"), (1, "FP16"),
                                         (2, "BF16"), (1, "FP32"))):
                q, k, v = tokens(ref, rng, t, grid=True)
                res = c.infer(MODEL, ins(q, k, v, dt), sequence_id=ref.id,
                              sequence_start=(i == 0),
                              parameters={"rotary": True} if i == 0 else
                              None)
                out, lse, _ = ref.step(0, q, k, v)
                check_res(res, out, lse, "tritonclient step %d %s" % (i, dt))
            q, k, v = tokens(ref, rng, 1)
            res = c.infer(MODEL, ins(q, k, v), sequence_id=ref.id,
                          sequence_end=True)
            out, lse, _ = ref.step(0, q, k, v)
            check_res(res, out, lse, "tritonclient end")
            tc_expect_error(lambda: c.infer(MODEL, ins(*tokens(ref, rng, 1)),
                                            sequence_id=ref.id), 404,
                            ref.id, what="tritonclient after the end")
            r2 = Ref("7", H=4, Hkv=1, D=8)
            q, k, v = tokens(r2, rng, 2)
            res = c.infer(MODEL, ins(q, k, v), sequence_id=7,
                          sequence_start=True, sequence_end=True)
            out, lse, _ = r2.step(0, q, k, v)
            check_res(res, out, lse, "tritonclient int id")
    finally:
        cleanup(p, [ref.id, "7"])


# ---- 16 clients at once -----------------------------------------------------

@test
def session_sixteen_clients_at_once():
    """16 clients step their own sessions (every answer against the
    reference) while 4 others create, fork (their own and the 16's),
    truncate and delete, and 2 race for the same position of one session
    (one wins, the other gets 409): no token ever mixes."""
    p = shared().port
    errors, lock = [], threading.Lock()
    logs = {}       # stepper session id -> {length: Ref snapshot}
    made = {"it-16-%d" % n: threading.Event() for n in range(16)}
    forks = []      # forks of the clients' sessions made while they step
    ids = set()

    def fail(who, e):
        with lock:
            errors.append("%s: %s" % (who, e))

    def stepper(n):
        rng = random.Random(cfg.seed + 4200 + n)
        kw = VARIANTS[n % len(VARIANTS)][1]
        kw = dict(kw, layers=1)
        ref = Ref("it-16-%d" % n, **kw)
        snaps = {0: ref.copy(ref.id)}
        with lock:
            ids.add(ref.id)
            logs[ref.id] = snaps
        try:
            create(p, ref)
            made[ref.id].set()
            for i in range(8):
                t = rng.choice((1, 1, 2, 3))
                step(p, ref, 0, *tokens(ref, rng, t), what="client %d" % n)
                with lock:
                    snaps[ref.length()] = ref.copy(ref.id)
        except Exception as e:  # collected, the others go on
            fail("client %d" % n, e)

    def other(n):
        rng = random.Random(cfg.seed + 4300 + n)
        try:
            for i in range(3):
                ref = Ref("it-16-o%d-%d" % (n, i), H=2, Hkv=1, D=8,
                          rotary=True)
                with lock:
                    ids.add(ref.id)
                create(p, ref)
                step(p, ref, 0, *tokens(ref, rng, 5))
                fid = ref.id + "-f"
                with lock:
                    ids.add(fid)
                expect_status(s_post(p, ref.id, "/fork", {"id": fid}), 201,
                              "fork")
                f = ref.copy(fid)
                step(p, ref, 0, *tokens(ref, rng, 2))
                step(p, f, 0, *tokens(f, rng, 1))
                expect_status(s_post(p, ref.id, "/truncate", {"length": 3}),
                              200, "truncate")
                ref.truncate(3)
                step(p, ref, 0, *tokens(ref, rng, 2))
                step(p, f, 0, tokens(f, rng, 1)[0])
                expect_status(s_del(p, ref.id), 204, "delete")
                step(p, f, 0, tokens(f, rng, 1)[0])
                # fork a client's session while it steps: the copy holds a
                # prefix of its tokens, nothing else
                src = "it-16-%d" % ((n * 3 + i) % 16)
                gid = "it-16-o%d-%d-g" % (n, i)
                with lock:
                    ids.add(gid)
                check(made[src].wait(30), "%s was never made" % src)
                r = s_post(p, src, "/fork", {"id": gid})
                expect_status(r, 201, "fork of " + src)
                n_len = r.json()["length"][0]
                deadline = time.monotonic() + 30
                while True:
                    with lock:
                        snap = logs[src].get(n_len)
                    if snap is not None or time.monotonic() > deadline:
                        break
                    time.sleep(0.01)
                check(snap is not None, "%s forked at length %d, which its "
                      "client never saw" % (src, n_len))
                g = snap.copy(gid)
                if n_len:
                    step(p, g, 0, tokens(g, rng, 2)[0], what="fork of " + src)
                step(p, g, 0, *tokens(g, rng, 1), what="fork of " + src)
                expect_status(s_del(p, gid), 204, "delete " + gid)
                with lock:
                    forks.append((src, n_len))
        except Exception as e:  # collected
            fail("other %d" % n, e)

    race = Ref("it-16-race", H=2, D=4)
    rrng = random.Random(cfg.seed + 4400)
    won = []

    def racer(n, body):
        try:
            r = s_post(p, race.id, "/attend", body)
            with lock:
                won.append((n, r.status))
        except Exception as e:  # collected
            fail("racer %d" % n, e)

    ths = [threading.Thread(target=stepper, args=(n,)) for n in range(16)]
    ths += [threading.Thread(target=other, args=(n,)) for n in range(4)]
    try:
        create(p, race)
        for th in ths:
            th.start()
        for rnd in range(4):
            toks = [tokens(race, rrng, 1) for _ in range(2)]
            won.clear()
            rs = [threading.Thread(target=racer, args=(n, step_body(
                race, 0, *toks[n]))) for n in range(2)]
            for th in rs:
                th.start()
            for th in rs:
                th.join(60)
            check(sorted(s for _, s in won) == [200, 409],
                  "race %d: %r %s" % (rnd, won, errors[-1:]))
            winner = [n for n, s in won if s == 200][0]
            race.step(0, *toks[winner])
            step(p, race, 0, tokens(race, rrng, 1)[0], what="after race")
        for th in ths:
            th.join(120)
        check(not any(th.is_alive() for th in ths), "a client hangs")
        check(not errors, "; ".join(errors[:5]))
        check(len(forks) == 12, "forks of the clients' sessions: %r" % forks)
        for n in range(16):  # each client's whole sequence, once more
            sid = "it-16-%d" % n
            last = logs[sid][max(logs[sid])]
            step(p, last, 0, tokens(last, random.Random(n), 1)[0],
                 what="final")
    finally:
        cleanup(p, sorted(ids) + [race.id])


@test
def session_step_dropped_while_queued_is_not_appended():
    """Issue 44: a step whose client left while it waited in the queue
    (behind a slow request on the only worker) is dropped: nothing is
    appended (the session's length stays), its access line is 499
    "dropped_queued"; the decoder's retry of the same step, at the same
    position, is then appended and answered as the reference says."""
    with Server("--workers", "1", name="session-dropped") as s:
        p = s.port
        rng = random.Random(4401)
        ref = Ref("dropped-step", H=2, D=4)
        create(p, ref)
        step(p, ref, 0, *tokens(ref, rng, 3), what="first")
        body, hdrs, _ = slow_request(p)
        # two slow requests ahead of the step, one running and one queued,
        # so that the step still waits when its client leaves however
        # short a slow request came out on this machine
        slow = Pending(p, "/v2/models/sdpa/infer", body, hdrs)
        slow2 = None
        c = None
        try:
            wait_metric(p, "attnd_workers_busy", lambda x: x == 1,
                        "the slow request running")
            slow2 = Pending(p, "/v2/models/sdpa/infer", body, hdrs)
            wait_metric(p, "attnd_queue_depth", lambda x: x == 1,
                        "the second slow request queued")
            q, k, v = tokens(ref, rng, 2)
            data = json.dumps(step_body(ref, 0, q, k, v)).encode()
            c = socket.create_connection((HOST, p), timeout=30)
            c.sendall(("POST %s HTTP/1.1\r\nHost: t\r\n"
                       "Content-Type: application/json\r\n"
                       "X-Request-Id: dropped-step\r\n"
                       "Content-Length: %d\r\n\r\n" %
                       (path(ref.id, "/attend"), len(data))).encode() + data)
            wait_metric(p, "attnd_queue_depth", lambda x: x == 2,
                        "the step queued")
            time.sleep(0.3)  # leaves well after its last byte: not a half-close
            c.close()
            c = None
            check(not slow2.answered(), "the slow requests finished before "
                  "the step's client left: this test needs them to run longer")
            expect_status(slow.response(), 200, "the slow request")
            expect_status(slow2.response(), 200, "the second slow request")
            wait_log(s, lambda e: e.get("request_id") == "dropped-step",
                     "for the dropped step")
            e = [e for e in s.log_json() if e.get("request_id") ==
                 "dropped-step"][0]
            check(e.get("status") == 499 and
                  e.get("closed") == "dropped_queued",
                  "access line of the dropped step: %r" % e)
            check(lengths(p, ref.id) == [3], "a dropped step was appended: "
                  "%r" % lengths(p, ref.id))
            step(p, ref, 0, q, k, v, what="the retry of the dropped step")
            check(lengths(p, ref.id) == [5], "after the retry: %r" %
                  lengths(p, ref.id))
        finally:
            if c is not None:
                c.close()
            slow.close()
            if slow2 is not None:
                slow2.close()


if __name__ == "__main__":
    sys.exit(main())
