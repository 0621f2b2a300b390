#!/usr/bin/env python3
"""Integration tests: the numbers (random cases on both protocols
against the float64 reference, the PyTorch golden vectors of tests/golden/
on v2 and /v1, the same request giving the same bytes).

Run alone: python3 tests/integration/test_numerics.py --attnd PATH
(the options of run.py; see harness.py and README.md).
"""

import json
import math
import os
import random
import re
import sys

from harness import (assert_close, cfg, check, decode_v2, expect_error,
                     expect_status, f32, flatten, main, nested, ref_head,
                     request, rows, sdpa_inputs, shared, test, transpose, v1,
                     v1_case, v1_check, v1_ok, v2_binary, v2_in, v2_infer,
                     v2_sdpa_case)


@test
def numerics_v2_random():
    p = shared().port
    rng = random.Random(cfg.seed + 30)
    cases = [
        dict(B=1, H=1, Hkv=1, Lq=3, Lk=3, Dk=4, Dv=4),
        dict(B=2, H=2, Hkv=2, Lq=4, Lk=6, Dk=8, Dv=5, causal=True),
        dict(B=2, H=4, Hkv=2, Lq=5, Lk=3, Dk=4, Dv=4, causal=True),
        dict(B=1, H=2, Hkv=1, Lq=4, Lk=7, Dk=6, Dv=3, mask="bool",
             scale=0.3),
        dict(B=2, H=2, Hkv=2, Lq=3, Lk=5, Dk=4, Dv=4, mask="float", kpm=True),
        dict(B=2, H=2, Hkv=1, Lq=3, Lk=5, Dk=4, Dv=2, klen=True),
        dict(B=1, H=3, Hkv=3, Lq=6, Lk=6, Dk=5, Dv=5, mask="bool",
             causal=True, avg=True),
    ]
    for ci, c in enumerate(cases):
        B, H, Hkv, Lq, Lk, Dk, Dv = (c[x] for x in
                                     ("B", "H", "Hkv", "Lq", "Lk", "Dk", "Dv"))
        sq, sk, sv = [B, H, Lq, Dk], [B, Hkv, Lk, Dk], [B, Hkv, Lk, Dv]
        q, k, v = sdpa_inputs(rng, sq, sk, sv)
        scale = c.get("scale")
        params = {"causal": c.get("causal", False),
                  "average_attn_weights": c.get("avg", False)}
        if scale is not None:
            params["scale"] = scale
        else:
            scale = 1 / math.sqrt(Dk)
        ins = [("query", "FP32", sq, q), ("key", "FP32", sk, k),
               ("value", "FP32", sv, v)]
        add = blocked = pad = None
        if c.get("mask") == "bool":
            blocked = [[rng.random() < 0.3 for _ in range(Lk)]
                       for _ in range(Lq)]
            ins.append(("attn_mask", "BOOL", [Lq, Lk], flatten(blocked)))
        elif c.get("mask") == "float":
            add = [[f32(rng.uniform(-2, 2)) for _ in range(Lk)]
                   for _ in range(Lq)]
            ins.append(("attn_mask", "FP32", [Lq, Lk], flatten(add)))
        if c.get("kpm") or c.get("klen"):
            lens = [rng.randint(1, Lk) for _ in range(B)]
            pad = [[j >= lens[b] for j in range(Lk)] for b in range(B)]
            if c.get("kpm"):
                ins.append(("key_padding_mask", "BOOL", [B, Lk],
                            flatten(pad)))
            else:
                ins.append(("key_lengths", "INT64", [B], lens))
        out = [0.0] * (B * H * Lq * Dv)
        wts = [0.0] * (B * H * Lq * Lk)
        for b in range(B):
            for h in range(H):
                g = h // (H // Hkv)
                o, w = ref_head(rows(q, (b * H + h) * Lq * Dk, Lq, Dk),
                                rows(k, (b * Hkv + g) * Lk * Dk, Lk, Dk),
                                rows(v, (b * Hkv + g) * Lk * Dv, Lk, Dv),
                                scale, c.get("causal", False), add, blocked,
                                pad[b] if pad else None)
                base = (b * H + h) * Lq
                out[base * Dv:(base + Lq) * Dv] = flatten(o)
                wts[base * Lk:(base + Lq) * Lk] = flatten(w)
        wshape = [B, H, Lq, Lk]
        if c.get("avg"):
            wts = [sum(wts[((b * H + h) * Lq + i) * Lk + j]
                       for h in range(H)) / H
                   for b in range(B) for i in range(Lq) for j in range(Lk)]
            wshape = [B, Lq, Lk]
        what = "case %d %r" % (ci, c)
        if ci % 2 == 0:  # JSON
            r = v2_infer(p, "sdpa", [v2_in(n, s, d, t)
                                     for n, t, s, d in ins], params=params)
        else:            # binary in and out
            body, hdrs = v2_binary(
                [{"name": n, "datatype": t, "shape": s, "values": d}
                 for n, t, s, d in ins],
                params=dict(params, binary_data_output=True))
            r = request(p, "POST", "/v2/models/sdpa/infer", body,
                        headers=hdrs)
        _, o = decode_v2(r, what)
        check(o["attn_output"]["shape"] == [B, H, Lq, Dv],
              "%s: output shape %r" % (what, o["attn_output"]["shape"]))
        check(o["attn_weights"]["shape"] == wshape,
              "%s: weights shape %r" % (what, o["attn_weights"]["shape"]))
        assert_close(o["attn_output"]["data"], out, what + " attn_output")
        assert_close(o["attn_weights"]["data"], wts, what + " attn_weights")


@test
def numerics_v1_random():
    p = shared().port
    rng = random.Random(cfg.seed + 31)
    cases = [
        dict(B=0, H=1, Lq=4, Lk=4, Dk=6, Dv=6, cross=False),
        dict(B=0, H=2, Lq=3, Lk=5, Dk=4, Dv=2, causal=True),
        dict(B=2, H=2, Lq=3, Lk=4, Dk=2, Dv=3, mask="bool", kpm=True),
        dict(B=0, H=3, Lq=5, Lk=5, Dk=2, Dv=2, mask="float", scale=0.5,
             avg=True),
        dict(B=2, H=1, Lq=2, Lk=3, Dk=4, Dv=4, causal=True),
        dict(B=1, H=4, Lq=6, Lk=2, Dk=1, Dv=3, causal=True, kpm=True),
    ]
    for ci, c in enumerate(cases):
        c = dict(c)
        args = [c.pop(x) for x in ("B", "H", "Lq", "Lk", "Dk", "Dv")]
        v1_check(p, v1_case(rng, *args, **c), "v1 case %d" % ci)


def load_golden(name):
    with open(os.path.join(cfg.golden_dir, name), "r", encoding="utf-8") as f:
        return json.load(f)


# Fields of the golden cases for the attention variants (issue 34): each
# protocol carries them (golden_variants_v2, golden_variants_v1).
GOLDEN_VARIANT_KEYS = ("causal_alignment", "window", "alibi_slopes",
                       "alibi_standard", "softcap", "rotary")


def golden_names(kind):
    return [n for n in sorted(os.listdir(cfg.golden_dir))
            if n.endswith(".json") and n.startswith(kind + "_")]


def golden_causal(g):
    """The case's causal setting as both protocols take it."""
    if not g["causal"]:
        return False
    return g.get("causal_alignment", "bottom_right")


def golden_variants_v2(g):
    """(parameters, extra inputs) of the case's variants on KServe v2."""
    p, t = {}, []
    if "window" in g:
        p["window_left"], p["window_right"] = g["window"]
    if "softcap" in g:
        p["softcap"] = g["softcap"]
    if g.get("alibi_standard"):
        p["alibi"] = True
    elif "alibi_slopes" in g:
        a = g["alibi_slopes"]
        t.append(("alibi_slopes", "FP32", a["shape"], gvals(a)))
    for k, v in g.get("rotary", {}).items():
        p["rotary_" + k] = v
    return p, t


def golden_variants_v1(g):
    """The /v1 fields of the case's variants."""
    f = {}
    for k in ("window", "softcap", "rotary"):
        if k in g:
            f[k] = g[k]
    if g.get("alibi_standard"):
        f["alibi"] = True
    elif "alibi_slopes" in g:
        f["alibi_slopes"] = gvals(g["alibi_slopes"])
    return f


def both_paths(g):
    """The case as given, and (when it returns weights) again without them:
    the engine's other path (streaming instead of materialised)."""
    yield g
    if g["need_weights"]:
        h = dict(g)
        h["need_weights"] = False
        yield h


def gvals(t):
    """Golden data with the string spellings of infinities decoded."""
    m = {"-inf": -math.inf, "inf": math.inf}
    return [m[x] if isinstance(x, str) else x for x in t["data"]]


def mha_golden_weights(g):
    """Our mha inputs from the torch state_dict: w_* are [in,out] (torch
    stores [out,in]: transpose); in_proj rows split into q, k, v."""
    E, kd, vd = g["embed_dim"], g["kdim"], g["vdim"]
    sd = g["state_dict"]
    w = {}
    if "in_proj_weight" in sd:
        ipw = gvals(sd["in_proj_weight"])
        wq, wk, wv = ipw[:E * E], ipw[E * E:2 * E * E], ipw[2 * E * E:]
    else:
        wq = gvals(sd["q_proj_weight"])
        wk = gvals(sd["k_proj_weight"])
        wv = gvals(sd["v_proj_weight"])
    w["w_q"] = ([E, E], transpose(wq, E, E))
    w["w_k"] = ([kd, E], transpose(wk, E, kd))
    w["w_v"] = ([vd, E], transpose(wv, E, vd))
    w["w_o"] = ([E, E], transpose(gvals(sd["out_proj.weight"]), E, E))
    if g["bias"]:
        b = gvals(sd["in_proj_bias"])
        w["b_q"] = ([E], b[:E])
        w["b_k"] = ([E], b[E:2 * E])
        w["b_v"] = ([E], b[2 * E:])
        w["b_o"] = ([E], gvals(sd["out_proj.bias"]))
    return w


def golden_compare(g, o_shape, o_data, w_shape, w_data, what):
    check(o_shape == g["attn_output"]["shape"], "%s: output shape %r, "
          "golden %r" % (what, o_shape, g["attn_output"]["shape"]))
    assert_close(o_data, gvals(g["attn_output"]), what + " attn_output")
    if g["need_weights"]:
        check(w_shape == g["attn_weights"]["shape"], "%s: weights shape %r, "
              "golden %r" % (what, w_shape, g["attn_weights"]["shape"]))
        assert_close(w_data, gvals(g["attn_weights"]), what + " attn_weights")
    else:
        check(w_shape is None, "%s: weights returned with need_weights "
              "false" % what)


def _v2_golden_request(port, model, tensors, params):
    """tensors: [(name, datatype, shape, values)].  A float tensor holding
    an infinity goes as a binary blob (JSON cannot carry it); the rest as
    JSON."""
    ins, any_bin = [], False
    for n, dt, shape, vals in tensors:
        if dt == "FP32" and any(math.isinf(x) for x in vals):
            ins.append({"name": n, "datatype": dt, "shape": shape,
                        "values": vals})
            any_bin = True
        else:
            ins.append({"name": n, "datatype": dt, "shape": shape,
                        "data": vals})
    if any_bin:
        body, hdrs = v2_binary(ins, params=params)
        return request(port, "POST", "/v2/models/%s/infer" % model, body,
                       headers=hdrs)
    return v2_infer(port, model, [v2_in(x["name"], x["shape"], x["data"],
                                        x["datatype"]) for x in ins],
                    params=params)


def _golden_masks(g):
    out = []
    if "attn_mask" in g:
        m = g["attn_mask"]
        dt = "BOOL" if m["dtype"] == "bool" else "FP32"
        out.append(("attn_mask", dt, m["shape"], gvals(m)))
    if "key_padding_mask" in g:
        m = g["key_padding_mask"]
        out.append(("key_padding_mask", "BOOL", m["shape"], gvals(m)))
    return out


def _v2_golden_outputs(r, g, what):
    _, o = decode_v2(r, what)
    w = o.get("attn_weights")
    golden_compare(g, o["attn_output"]["shape"], o["attn_output"]["data"],
                   w and w["shape"], w and w["data"], what)


@test
def golden_mha_v2():
    p = shared().port
    names = golden_names("mha")
    check(len(names) >= 8, "only %d mha golden files" % len(names))
    for n in names:
      for g in both_paths(load_golden(n)):
        t = [("query", "FP32", g["query"]["shape"], gvals(g["query"]))]
        if not g["self_attention"]:
            t.append(("key", "FP32", g["key"]["shape"], gvals(g["key"])))
            t.append(("value", "FP32", g["value"]["shape"],
                      gvals(g["value"])))
        for wn, (shape, vals) in sorted(mha_golden_weights(g).items()):
            t.append((wn, "FP32", shape, vals))
        t += _golden_masks(g)
        params = {"num_heads": g["num_heads"], "causal": golden_causal(g),
                  "need_weights": g["need_weights"],
                  "average_attn_weights": g["average_attn_weights"]}
        vp, vt = golden_variants_v2(g)
        params.update(vp)
        r = _v2_golden_request(p, "mha", t + vt, params)
        _v2_golden_outputs(r, g, "v2 mha %s (need_weights %s)" %
                           (n, g["need_weights"]))


def _v1_mask_value(x):
    """/v1 is JSON only: -inf is sent as -1e30, which softmax turns into
    exactly the same 0 weight as long as the row keeps a finite score."""
    return -1e30 if x == -math.inf else x


def _v1_float_mask_ok(g):
    """True when every query row keeps a key that is neither -inf in the
    float mask nor padding, so the -1e30 stand-in changes nothing."""
    m = g.get("attn_mask")
    if not m or m["dtype"] == "bool":
        return True
    vals, shape = gvals(m), m["shape"]
    lq, lk = shape[-2], shape[-1]
    pads = [gvals(g["key_padding_mask"])[b * lk:(b + 1) * lk]
            for b in range(g["batch"])] if "key_padding_mask" in g else \
        [[False] * lk] * g["batch"]
    for mi in range(len(vals) // (lq * lk)):
        for b in range(g["batch"]):
            for i in range(lq):
                row = vals[(mi * lq + i) * lk:(mi * lq + i + 1) * lk]
                if not any(x != -math.inf and not pads[b][j]
                           for j, x in enumerate(row)):
                    return False
    return True


@test
def golden_mha_v1():
    p = shared().port
    done = 0
    for n in golden_names("mha"):
      for g in both_paths(load_golden(n)):
        if not _v1_float_mask_ok(g):
            continue
        body = {"query": nested(gvals(g["query"]), g["query"]["shape"]),
                "num_heads": g["num_heads"], "causal": golden_causal(g),
                "need_weights": g["need_weights"],
                "average_attn_weights": g["average_attn_weights"],
                "weights": {wn: nested(vals, shape) for wn, (shape, vals)
                            in mha_golden_weights(g).items()}}
        if not g["self_attention"]:
            body["key"] = nested(gvals(g["key"]), g["key"]["shape"])
            body["value"] = nested(gvals(g["value"]), g["value"]["shape"])
        for mn, _, shape, vals in _golden_masks(g):
            body[mn] = nested([_v1_mask_value(x) for x in vals], shape)
        body.update(golden_variants_v1(g))
        what = "v1 mha %s (need_weights %s)" % (n, g["need_weights"])
        j = v1_ok(v1(p, body), what)
        golden_compare(g, j["shape"]["output"], flatten(j["output"]),
                       j["shape"].get("attn_weights"),
                       flatten(j["attn_weights"]) if "attn_weights" in j
                       else None, what)
        done += 1
    check(done >= 16, "only %d mha golden cases ran on /v1" % done)


@test
def golden_sdpa_v2():
    p = shared().port
    names = golden_names("sdpa")
    check(len(names) >= 3, "only %d sdpa golden files" % len(names))
    for n in names:
      for g in both_paths(load_golden(n)):
        t = [(x, "FP32", g[s]["shape"], gvals(g[s]))
             for x, s in (("query", "q"), ("key", "k"), ("value", "v"))]
        t += _golden_masks(g)
        params = {"causal": golden_causal(g),
                  "need_weights": g["need_weights"],
                  "average_attn_weights": g["average_attn_weights"]}
        if g.get("scale") is not None:
            params["scale"] = g["scale"]
        vp, vt = golden_variants_v2(g)
        params.update(vp)
        r = _v2_golden_request(p, "sdpa", t + vt, params)
        _v2_golden_outputs(r, g, "v2 sdpa %s (need_weights %s)" %
                           (n, g["need_weights"]))


def _heads_side_by_side(vals, shape):
    """[B, H, L, D] (flat) as /v1's [B, L, H*D] nested lists."""
    B, H, L, D = shape
    out = [[[vals[((b * H + h) * L + i) * D + x] for h in range(H)
             for x in range(D)] for i in range(L)] for b in range(B)]
    return out


@test
def golden_sdpa_v1():
    """The sdpa golden cases on /v1: the heads side by side in columns
    (num_heads, num_kv_heads), the variants as /v1 fields, both paths."""
    p = shared().port
    done = 0
    for n in golden_names("sdpa"):
      for g in both_paths(load_golden(n)):
        if not _v1_float_mask_ok(g):
            continue
        body = {"query": _heads_side_by_side(gvals(g["q"]), g["q"]["shape"]),
                "key": _heads_side_by_side(gvals(g["k"]), g["k"]["shape"]),
                "value": _heads_side_by_side(gvals(g["v"]), g["v"]["shape"]),
                "num_heads": g["num_heads"],
                "num_kv_heads": g["num_kv_heads"],
                "causal": golden_causal(g),
                "need_weights": g["need_weights"],
                "average_attn_weights": g["average_attn_weights"]}
        if g.get("scale") is not None:
            body["scale"] = g["scale"]
        for mn, _, shape, vals in _golden_masks(g):
            body[mn] = nested([_v1_mask_value(x) for x in vals], shape)
        body.update(golden_variants_v1(g))
        what = "v1 sdpa %s (need_weights %s)" % (n, g["need_weights"])
        j = v1_ok(v1(p, body), what)
        B, H, Lq, Dv = g["attn_output"]["shape"]
        o = flatten(j["output"])  # [B, Lq, H*Dv] back to [B, H, Lq, Dv]
        o = [o[(b * Lq + i) * H * Dv + h * Dv + x] for b in range(B)
             for h in range(H) for i in range(Lq) for x in range(Dv)]
        golden_compare(g, [B, H, Lq, Dv], o, j["shape"].get("attn_weights"),
                       flatten(j["attn_weights"]) if "attn_weights" in j
                       else None, what)
        done += 1
    check(done >= 20, "only %d sdpa golden cases ran on /v1" % done)


@test
def golden_demo_model_v2_and_v1():
    p = shared().port
    d = load_golden("demo_model_io.json")
    check(d.get("model") == "demo" and d.get("cases"), "demo golden file")
    for c in d["cases"]:
        g = c
        t = [("query", "FP32", c["query"]["shape"], gvals(c["query"]))]
        t += _golden_masks(c)
        params = {"need_weights": c["need_weights"],
                  "average_attn_weights": c["average_attn_weights"]}
        r = _v2_golden_request(p, "demo", t, params)
        _v2_golden_outputs(r, g, "v2 demo " + c["name"])
        body = {"model": "demo",
                "query": nested(gvals(c["query"]), c["query"]["shape"]),
                "need_weights": c["need_weights"],
                "average_attn_weights": c["average_attn_weights"]}
        for mn, _, shape, vals in _golden_masks(c):
            body[mn] = nested(vals, shape)
        j = v1_ok(v1(p, body), "v1 demo " + c["name"])
        golden_compare(g, j["shape"]["output"], flatten(j["output"]),
                       j["shape"].get("attn_weights"),
                       flatten(j["attn_weights"]) if "attn_weights" in j
                       else None, "v1 demo " + c["name"])
    expect_error(v1(p, {"model": "demo", "query": [[1.0, 2.0]]}), 400,
                 "query", "16", what="demo with the wrong embed_dim")


@test
def determinism_same_bytes():
    p = shared().port
    q, k, v = v2_sdpa_case(random.Random(cfg.seed + 41))
    ins = [v2_in("query", [2, 3, 4], q), v2_in("key", [2, 5, 4], k),
           v2_in("value", [2, 5, 3], v)]
    a = v2_infer(p, "sdpa", ins, params={"causal": True})
    b = v2_infer(p, "sdpa", ins, params={"causal": True})
    expect_status(a, 200, "v2 first")
    check(a.body == b.body, "v2 JSON: two answers differ")
    body, hdrs = v2_binary(
        [{"name": x["name"], "datatype": "FP32", "shape": x["shape"],
          "values": x["data"]} for x in ins],
        params={"binary_data_output": True})
    a = request(p, "POST", "/v2/models/sdpa/infer", body, headers=hdrs)
    b = request(p, "POST", "/v2/models/sdpa/infer", body, headers=hdrs)
    expect_status(a, 200, "v2 binary first")
    check(a.body == b.body, "v2 binary: two answers differ")
    g = load_golden("mha_self_bias.json")
    body = {"query": nested(gvals(g["query"]), g["query"]["shape"]),
            "num_heads": g["num_heads"],
            "weights": {wn: nested(vals, shape) for wn, (shape, vals)
                        in mha_golden_weights(g).items()}}
    strip = re.compile(rb',"timing":\{[^}]*\}')
    a = v1(p, body)
    b = v1(p, body)
    expect_status(a, 200, "v1 first")
    check(strip.search(a.body), "v1 answer has no timing object")
    check(strip.sub(b"", a.body) == strip.sub(b"", b.body),
          "v1: two answers differ (timing aside)")


if __name__ == "__main__":
    sys.exit(main())
