#!/usr/bin/env python3
"""Integration tests: the opt-in BF16 arithmetic of issue 35 over HTTP
(`precision` on /v1 and v2, resident models' "precision", the precision
and kernel named in the answer, FP16 and BF16 binary outputs, BF16 and
F16 weights in .safetensors) against numpy's float64 reference and
numpy's float16 rounding.

Run alone: python3 tests/integration/test_precision.py --attnd PATH
(the options of run.py; see harness.py and README.md).
"""

import functools
import json
import os
import re
import shutil
import sys
import tempfile

try:
    import numpy as np
except ImportError:  # python3-numpy: scripts/install-deps.sh --test
    np = None

from harness import (Server, cfg, check, expect_error, expect_status, main,
                     request, shared, test, v1, v2_binary, v2_in, v2_infer)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                os.pardir, os.pardir, "scripts"))
import safetensors_write  # noqa: E402  (scripts/safetensors_write.py)

# the fp32 kernel names: one kernel for every product, or the engine's own
# with OpenBLAS for the products it fell through to (docs/api.md)
FP32_KERNELS = {"avx512", "avx2", "blas", "avx512+blas", "avx2+blas"}


def with_numpy(fn):
    """Run fn where numpy is installed (Debian's python3-numpy, which
    scripts/install-deps.sh --test installs); elsewhere say it was skipped."""
    @functools.wraps(fn)
    def run():
        if np is None:
            print("skip %s: numpy is not installed for %s (apt-get install "
                  "python3-numpy)" % (fn.__name__, sys.executable),
                  flush=True)
            return
        with np.errstate(over="ignore"):
            fn()
    return run
BF16_KERNELS = {"avx512bf16", "portable"}


# ---- references ------------------------------------------------------------

def softmax(s):
    s = s - s.max(axis=-1, keepdims=True)
    e = np.exp(s)
    return e / e.sum(axis=-1, keepdims=True)


def sdpa_ref(q, k, v):
    """float64 attention of [H, L, D] heads: (out, weights)."""
    q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
    w = softmax(q @ k.transpose(0, 2, 1) / np.sqrt(q.shape[-1]))
    return w @ v, w


def mha_ref(x, sd, H):
    """float64 nn.MultiheadAttention self-attention of x [L, E] with the
    state_dict sd (numpy float64 arrays)."""
    x = np.asarray(x, np.float64)
    L, E = x.shape
    D = E // H
    qkv = x @ sd["in_proj_weight"].T + sd["in_proj_bias"]
    heads = [qkv[:, i * E:(i + 1) * E].reshape(L, H, D).transpose(1, 0, 2)
             for i in range(3)]
    o, _ = sdpa_ref(*heads)
    o = o.transpose(1, 0, 2).reshape(L, E)
    return o @ sd["out_proj.weight"].T + sd["out_proj.bias"]


def bf16_bits(a):
    """float32 values to bfloat16 bits, nearest value, ties to the even
    one: chosen among the two bfloat16 neighbours by their float64
    distance (not the bit trick attnd uses).  Finite inputs only."""
    u = np.asarray(a, np.float32).view(np.uint32).astype(np.uint64)
    lo = (u >> 16).astype(np.uint32)          # toward zero
    hi = lo + 1                               # away from zero
    val = lambda b: (b.astype(np.uint32) << 16).view(np.float32).astype(
        np.float64)
    x = np.asarray(a, np.float32).astype(np.float64)
    dlo, dhi = np.abs(x - val(lo)), np.abs(val(hi) - x)
    pick_hi = (dhi < dlo) | ((dhi == dlo) & (lo % 2 == 1))
    return np.where(pick_hi, hi, lo).astype(np.uint16)


def bf16_round(a):
    return (bf16_bits(a).astype(np.uint32) << 16).view(np.float32)


def within_bf16_bound(got, ref, what):
    """The documented bound of bf16 outputs: |got - ref| <= 1e-2 (1 +
    |ref|)."""
    got, ref = np.asarray(got, np.float64), np.asarray(ref, np.float64)
    check(got.shape == ref.shape, "%s: shape %r, expected %r" %
          (what, got.shape, ref.shape))
    check(np.all(np.isfinite(got)), "%s: not finite" % what)
    err = np.abs(got - ref) / (1 + np.abs(ref))
    check(err.max() <= 1e-2, "%s: relative error %.3g over the bound 1e-2" %
          (what, err.max()))


def bf16_kernel_of(server):
    """The bf16 kernel the start-up line names."""
    m = re.search(r"bf16=(\w+)", server.log_text())
    check(m, "no bf16= in the start-up line: %s" % server.log_tail())
    return m.group(1)


def rand(rng, *shape):
    return rng.uniform(-1, 1, shape).astype(np.float32)


def v1_body(q, k, v, H, **extra):
    """/v1 body of [H, L, D] heads laid side by side ([L, H*D])."""
    cat = lambda t: t.transpose(1, 0, 2).reshape(t.shape[1], -1).tolist()
    body = {"query": cat(q), "key": cat(k), "value": cat(v), "num_heads": H}
    body.update(extra)
    return body


def v1_heads(out, H):
    o = np.asarray(out, np.float32)
    return o.reshape(o.shape[0], H, -1).transpose(1, 0, 2)


# ---- /v1 and v2 requests -----------------------------------------------------

@test
@with_numpy
def precision_fp32_default_is_unchanged():
    """No precision and "fp32" give the same bits, and the answer says
    fp32 with an fp32 kernel."""
    p = shared().port
    rng = np.random.default_rng(cfg.seed + 350)
    q, k, v = rand(rng, 2, 5, 8), rand(rng, 2, 7, 8), rand(rng, 2, 7, 8)
    a = v1(p, v1_body(q, k, v, 2))
    b = v1(p, v1_body(q, k, v, 2, precision="fp32"))
    expect_status(a, 200, "no precision")
    expect_status(b, 200, "precision fp32")
    ja, jb = a.json(), b.json()
    check(np.array_equal(np.float32(ja["output"]), np.float32(jb["output"])),
          "fp32 output differs from the default")
    for j in (ja, jb):
        check(j["timing"].get("precision") == "fp32" and
              j["timing"].get("kernel") in FP32_KERNELS,
              "timing %r" % j["timing"])


@test
@with_numpy
def fp32_kernel_names_what_ran():
    """The fp32 kernel of an answer is what that request's products ran
    on: 4 queries over 8 keys run on the engine's own kernel (or all on
    OpenBLAS, "blas"); 4 queries over 40 keys put their scores on
    OpenBLAS (more than 16 keys, too few queries to pack them), which the
    name says ("avx512+blas"), on /v1 and v2 alike."""
    p = shared().port
    rng = np.random.default_rng(cfg.seed + 355)
    names = {}
    for Lk in (8, 40):
        q, k, v = rand(rng, 1, 4, 8), rand(rng, 1, Lk, 8), rand(rng, 1, Lk, 8)
        r = v1(p, v1_body(q, k, v, 1))
        expect_status(r, 200, "v1, %d keys" % Lk)
        ins = [v2_in(n, t.shape, t.ravel().tolist())
               for n, t in (("query", q), ("key", k), ("value", v))]
        r2 = v2_infer(p, "sdpa", ins)
        expect_status(r2, 200, "v2, %d keys" % Lk)
        names[Lk] = (r.json()["timing"].get("kernel"),
                     (r2.json().get("parameters") or {}).get("kernel"))
        check(names[Lk][0] == names[Lk][1] and names[Lk][0] in FP32_KERNELS,
              "%d keys: v1 and v2 kernels %r" % (Lk, names[Lk]))
    own, mixed = names[8][0], names[40][0]
    check("+" not in own and mixed == (own if own == "blas" else
                                       own + "+blas"),
          "kernels %r over 8 keys, %r over 40: expected avx512 and "
          "avx512+blas, avx2 and avx2+blas, or blas and blas" % (own, mixed))


@test
@with_numpy
def precision_bf16_v1_within_bound():
    """bf16 on /v1: outputs and weights within the bound of float64, not
    the fp32 answer, timing names bf16 and the start-up line's kernel."""
    s = shared()
    rng = np.random.default_rng(cfg.seed + 351)
    H, Lq, Lk, D = 2, 9, 33, 64
    q, k, v = rand(rng, H, Lq, D), rand(rng, H, Lk, D), rand(rng, H, Lk, D)
    ro, rw = sdpa_ref(q, k, v)
    r = v1(s.port, v1_body(q, k, v, H, precision="bf16"))
    expect_status(r, 200, "bf16")
    j = r.json()
    out = v1_heads(j["output"], H)
    within_bf16_bound(out, ro, "bf16 output")
    w = np.asarray(j["attn_weights"], np.float64)
    check(np.abs(w - rw).max() <= 4e-3, "bf16 weights error %.3g > 4e-3" %
          np.abs(w - rw).max())
    f = v1_heads(v1(s.port, v1_body(q, k, v, H)).json()["output"], H)
    check(not np.array_equal(out, f), "bf16 output equals the fp32 one")
    check(j["timing"].get("precision") == "bf16", "timing %r" % j["timing"])
    check(j["timing"].get("kernel") == bf16_kernel_of(s),
          "timing kernel %r, start-up line %r" %
          (j["timing"].get("kernel"), bf16_kernel_of(s)))


@test
@with_numpy
def precision_errors_list_the_values():
    p = shared().port
    body = {"query": [[1, 0], [0, 1]]}
    for bad, needles in (("fp16", ("'precision'", "fp16", "fp32", "bf16")),
                         ("BF16", ("BF16", "fp32", "bf16")),
                         (16, ("'precision'", "fp32", "bf16"))):
        expect_error(v1(p, dict(body, precision=bad)), 400, *needles,
                     what="v1 precision %r" % bad)
    x = [v2_in(n, [1, 2, 2], [1, 0, 0, 1]) for n in ("query", "key", "value")]
    expect_error(v2_infer(p, "sdpa", x, params={"precision": "half"}), 400,
                 "precision", "half", "fp32", "bf16", what="v2 'half'")
    expect_error(v2_infer(p, "sdpa", x, params={"precision": True}), 400,
                 "precision", "string", what="v2 precision true")


@test
@with_numpy
def precision_v2_parameter_and_response():
    """v2: the request parameter, the response's parameters naming the
    precision and kernel, the bound."""
    s = shared()
    rng = np.random.default_rng(cfg.seed + 352)
    q, k, v = rand(rng, 1, 2, 6, 32), rand(rng, 1, 2, 10, 32), \
        rand(rng, 1, 2, 10, 32)
    ins = [v2_in("query", q.shape, q.ravel().tolist()),
           v2_in("key", k.shape, k.ravel().tolist()),
           v2_in("value", v.shape, v.ravel().tolist())]
    for prec in ("bf16", "fp32", None):
        r = v2_infer(s.port, "sdpa", ins,
                     params={"precision": prec} if prec else None)
        expect_status(r, 200, "v2 precision %r" % prec)
        j = r.json()
        want = prec or "fp32"
        kern = bf16_kernel_of(s) if want == "bf16" else None
        pr = j.get("parameters") or {}
        check(pr.get("precision") == want and
              (pr.get("kernel") == kern if kern else
               pr.get("kernel") in FP32_KERNELS),
              "v2 %r: response parameters %r" % (prec, pr))
        outs = {o["name"]: o for o in j["outputs"]}
        out = np.asarray(outs["attn_output"]["data"]).reshape(q.shape)
        ro, _ = sdpa_ref(q[0], k[0], v[0])
        if want == "bf16":
            within_bf16_bound(out[0], ro, "v2 bf16 output")
        else:
            check(np.abs(out[0] - ro).max() < 1e-5, "v2 fp32 output")


# ---- binary outputs in FP16 and BF16 --------------------------------------

def binary_outputs(r, what):
    """{name: (datatype, shape, raw bytes)} of a binary v2 answer."""
    expect_status(r, 200, what)
    n = int(r.header("inference-header-content-length"))
    j, off, outs = json.loads(r.body[:n]), n, {}
    for o in j["outputs"]:
        size = o["parameters"]["binary_data_size"]
        outs[o["name"]] = (o["datatype"], o["shape"], r.body[off:off + size])
        off += size
    check(off == len(r.body), "%s: %d bytes after the blobs" %
          (what, len(r.body) - off))
    return outs


@test
@with_numpy
def binary_outputs_fp16_bf16_round_to_nearest_even():
    """The same request answered in FP32, FP16 and BF16 blobs: the FP16
    blob is numpy's astype(float16) of the FP32 one, the BF16 blob the
    nearest-even bfloat16 of it, with datatype and sizes to match."""
    p = shared().port
    rng = np.random.default_rng(cfg.seed + 353)
    q, k, v = rand(rng, 2, 3, 17, 16), rand(rng, 2, 3, 19, 16), \
        rand(rng, 2, 3, 19, 16)
    v[0, 0, :, 0] = 70000.0  # FP16 overflows to inf
    v[0, 1, :, 1] = 1e-6     # FP16 subnormals
    ins = [dict(name=n, datatype="FP32", shape=list(t.shape),
                raw=t.astype("<f4").tobytes())
           for n, t in (("query", q), ("key", k), ("value", v))]

    def ask(dt_o, dt_w):
        outs = [{"name": "attn_output", "parameters": {"binary_data": True}},
                {"name": "attn_weights", "parameters": {"binary_data": True}}]
        if dt_o:
            outs[0]["parameters"]["datatype"] = dt_o
        if dt_w:
            outs[1]["parameters"]["datatype"] = dt_w
        body, hdr = v2_binary(ins, outputs=outs)
        return binary_outputs(request(p, "POST", "/v2/models/sdpa/infer",
                                      body, headers=hdr, ctype=None),
                              "outputs %s/%s" % (dt_o, dt_w))

    ref = ask(None, "FP32")
    o32 = np.frombuffer(ref["attn_output"][2], "<f4")
    w32 = np.frombuffer(ref["attn_weights"][2], "<f4")
    check(ref["attn_output"][0] == "FP32", "default datatype %r" %
          ref["attn_output"][0])
    for dt_o, dt_w in (("FP16", "BF16"), ("BF16", "FP16")):
        got = ask(dt_o, dt_w)
        for name, dt, f in (("attn_output", dt_o, o32),
                            ("attn_weights", dt_w, w32)):
            gdt, shape, raw = got[name]
            check(gdt == dt and shape == ref[name][1] and
                  len(raw) == 2 * f.size, "%s %s: datatype %s shape %r, %d "
                  "bytes" % (name, dt, gdt, shape, len(raw)))
            want = (f.astype(np.float16).view(np.uint16) if dt == "FP16"
                    else bf16_bits(f))
            have = np.frombuffer(raw, "<u2")
            bad = np.flatnonzero(have != want)
            check(bad.size == 0, "%s %s: %d of %d values differ from numpy, "
                  "first at %s: %#06x, expected %#06x" %
                  (name, dt, bad.size, f.size, bad[:1],
                   have[bad[0]] if bad.size else 0,
                   want[bad[0]] if bad.size else 0))
    check(np.isinf(np.float32(o32[:17 * 16].reshape(17, 16)[:, 0]).astype(
        np.float16)).all(), "the FP16 overflow case is not exercised")


@test
@with_numpy
def binary_output_datatype_errors():
    p = shared().port
    x = [v2_in(n, [1, 2, 2], [1, 0, 0, 1]) for n in ("query", "key", "value")]
    out = lambda prm: [{"name": "attn_output", "parameters": prm}]
    expect_error(v2_infer(p, "sdpa", x, outputs=out({"datatype": "FP16"})),
                 400, "attn_output", "FP16", "binary", what="FP16 as JSON")
    expect_error(v2_infer(p, "sdpa", x, outputs=out(
        {"binary_data": False, "datatype": "BF16"})), 400, "BF16", "binary",
        what="BF16 with binary_data false")
    for bad in ("INT8", "fp16", 16):
        expect_error(v2_infer(p, "sdpa", x, outputs=out(
            {"binary_data": True, "datatype": bad})), 400, "outputs[0]",
            "datatype", "FP32", "FP16", "BF16", what="datatype %r" % bad)
    expect_error(v2_infer(p, "sdpa", x, outputs=out(
        {"binary_data": True, "dtype": "FP16"})), 400, "dtype", "datatype",
        what="unknown output parameter")


# ---- resident models ------------------------------------------------------

def write_safetensors(path, tensors):
    """tensors: {name: (dtype "F32"/"F16"/"BF16", float32 array)}; BF16
    values are rounded to nearest even (bf16_bits)."""
    enc = {"F32": lambda a: np.asarray(a, np.float32).astype("<f4"),
           "F16": lambda a: np.asarray(a, np.float32).astype("<f2"),
           "BF16": lambda a: bf16_bits(a).astype("<u2")}
    safetensors_write.write(path, [(name, dt, enc[dt](a))
                                   for name, (dt, a) in tensors.items()])


def state_dict(rng, E):
    a = 1 / np.sqrt(E)
    return {"in_proj_weight": rng.uniform(-a, a, (3 * E, E)).astype(
                np.float32),
            "in_proj_bias": rng.uniform(-0.1, 0.1, 3 * E).astype(np.float32),
            "out_proj.weight": rng.uniform(-a, a, (E, E)).astype(np.float32),
            "out_proj.bias": rng.uniform(-0.1, 0.1, E).astype(np.float32)}


def model_dir(E, H, models):
    """A models folder: models is [(name, file dtype, precision,
    state_dict)]."""
    d = tempfile.mkdtemp(prefix="attnd-it-prec-")
    for name, dt, prec, sd in models:
        write_safetensors(os.path.join(d, name + ".safetensors"),
                          {n: (dt, a) for n, a in sd.items()})
        desc = {"name": name, "embed_dim": E, "num_heads": H,
                "weights": name + ".safetensors"}
        if prec:
            desc["precision"] = prec
        with open(os.path.join(d, name + ".json"), "w") as f:
            json.dump(desc, f)
    return d


@test
@with_numpy
def resident_precision_and_half_weights():
    """Resident models: "precision" in the file, a request's fp32 on a bf16
    model (not the reverse), BF16 and F16 weights, and their bytes."""
    rng = np.random.default_rng(cfg.seed + 354)
    E, H, L = 64, 4, 12
    sd = state_dict(rng, E)
    # bf16 values, so that F32 and BF16 files hold the same numbers (the
    # biases too, which bf16 arithmetic adds unrounded)
    sdb = {n: bf16_round(a) for n, a in sd.items()}
    d = model_dir(E, H, [("f32", "F32", None, sdb),
                         ("b_f32", "F32", "bf16", sdb),
                         ("b_bf16", "BF16", "bf16", sd),
                         ("f_f16", "F16", None, sd),
                         ("f_bf16", "BF16", None, sd)])
    try:
        with Server("--models-dir", d, name="precision-models") as s:
            _resident_checks(s, sd, sdb, E, H, L, rng)
            _weight_bytes(s, E)
    finally:
        shutil.rmtree(d, ignore_errors=True)


def _resident_checks(s, sd, sdb, E, H, L, rng):
    x = rand(rng, L, E)
    sdb64 = {n: a.astype(np.float64) for n, a in sdb.items()}

    def ask(model, prec=None, status=200):
        body = {"model": model, "query": x.tolist(), "need_weights": False}
        if prec:
            body["precision"] = prec
        r = v1(s.port, body)
        if status != 200:
            return r
        expect_status(r, 200, "%s %s" % (model, prec))
        j = r.json()
        return np.asarray(j["output"], np.float32), j["timing"]

    ref = mha_ref(x, sdb64, H)
    o, t = ask("b_f32")
    check(t["precision"] == "bf16", "bf16 model answered %r" % t)
    within_bf16_bound(o, ref, "bf16 model")
    o2, _ = ask("b_bf16")
    check(np.array_equal(o, o2), "bf16 model: BF16 weights give other bits "
          "than F32 weights (max diff %.3g)" % np.abs(o - o2).max())
    o3, t3 = ask("b_f32", "fp32")
    f, _ = ask("f32")
    check(t3["precision"] == "fp32" and np.array_equal(o3, f),
          "fp32 request on a bf16 model: %r, differs from the fp32 model" % t3)
    expect_error(ask("f32", "bf16", status=400), 400, "'f32'", "bf16",
                 "fp32", what="bf16 request on an fp32 model")
    # a bf16-stored model asked fp32: fp32 arithmetic on the bf16 values
    o4, t4 = ask("b_bf16", "fp32")
    o5, _ = ask("f_bf16")
    check(t4["precision"] == "fp32" and np.array_equal(o4, o5),
          "fp32 request on BF16-stored weights differs from an fp32 model of "
          "the same BF16 file")
    check(np.abs(o5 - ref).max() < 1e-4,
          "fp32 model of BF16 weights vs float64 of the bf16 values")
    sdh = {n: a.astype(np.float16).astype(np.float64) for n, a in sd.items()}
    o6, _ = ask("f_f16")
    check(np.abs(o6 - mha_ref(x, sdh, H)).max() < 1e-4,
          "fp32 model of F16 weights vs float64 of the f16 values")


def _weight_bytes(s, E):
    r = request(s.port, "GET", "/v1/models")
    expect_status(r, 200, "GET /v1/models")
    ms = {m["name"]: m for m in r.json()["models"]}
    full = 4 * (4 * E * E + 4 * E)
    # bfloat16 weights and biases, the biases also widened (added in fp32)
    half = 2 * (4 * E * E + 4 * E) + 4 * 4 * E
    for name, prec, size in (("f32", "fp32", full), ("b_f32", "bf16", full),
                             ("b_bf16", "bf16", half),
                             ("f_f16", "fp32", full), ("f_bf16", "fp32", full)):
        m = ms.get(name, {})
        check(m.get("precision") == prec and m.get("weight_bytes") == size,
              "%s: precision %r, weight_bytes %r; expected %s, %d" %
              (name, m.get("precision"), m.get("weight_bytes"), prec, size))


if __name__ == "__main__":
    sys.exit(main())
