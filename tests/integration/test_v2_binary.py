#!/usr/bin/env python3
"""Integration tests: KServe v2 with Triton's binary tensor data
extension (binary and JSON answers bit for bit the same, output flags,
FP16/FP64/BOOL/INT32 blobs, malformed blobs and header lengths).

Run alone: python3 tests/integration/test_v2_binary.py --attnd PATH
(the options of run.py; see harness.py and README.md).
"""

import json
import math
import random
import sys

from harness import (assert_bits, assert_close, cfg, check, decode_v2,
                     expect_error, flatten, main, numel, ref_head, request,
                     rows, sdpa_json_vs_binary_data, shared, test,
                     to_json_bytes, v2_binary, v2_in, v2_infer)


@test
def v2_binary_matches_json_bitwise():
    p = shared().port
    (sq, q), (sk, k), (sv, v) = sdpa_json_vs_binary_data(cfg.seed + 10)
    params = {"causal": True}
    rj = v2_infer(p, "sdpa", [v2_in("query", sq, q), v2_in("key", sk, k),
                              v2_in("value", sv, v)], params=params)
    jj, oj = decode_v2(rj, "JSON request")
    check(rj.header("inference-header-content-length") is None,
          "JSON answer carries Inference-Header-Content-Length")
    check(not any(o["binary"] for o in oj.values()), "JSON answer has blobs")
    body, hdrs = v2_binary(
        [{"name": "query", "datatype": "FP32", "shape": sq, "values": q},
         {"name": "key", "datatype": "FP32", "shape": sk, "values": k},
         {"name": "value", "datatype": "FP32", "shape": sv, "values": v}],
        params=dict(params, binary_data_output=True))
    rb = request(p, "POST", "/v2/models/sdpa/infer", body, headers=hdrs)
    check(rb.header("inference-header-content-length") is not None,
          "binary answer lacks Inference-Header-Content-Length: %r" % rb)
    jb, ob = decode_v2(rb, "binary request")
    check([o["name"] for o in jb["outputs"]] ==
          [o["name"] for o in jj["outputs"]], "output lists differ")
    for n in oj:
        check(ob[n]["binary"], "%s not binary with binary_data_output" % n)
        check(ob[n]["shape"] == oj[n]["shape"], "%s shapes differ" % n)
        assert_bits(ob[n]["data"], oj[n]["data"], "binary vs JSON " + n)
    # binary inputs, JSON outputs: same floats again
    body, hdrs = v2_binary(
        [{"name": "query", "datatype": "FP32", "shape": sq, "values": q},
         {"name": "key", "datatype": "FP32", "shape": sk, "values": k},
         {"name": "value", "datatype": "FP32", "shape": sv, "values": v}],
        params=params)
    r = request(p, "POST", "/v2/models/sdpa/infer", body, headers=hdrs)
    check(r.body == rj.body, "binary inputs with JSON outputs: answer "
          "differs from the all-JSON answer")
    # mixed: one input binary, the others JSON
    body, hdrs = v2_binary(
        [{"name": "query", "datatype": "FP32", "shape": sq, "data": q},
         {"name": "key", "datatype": "FP32", "shape": sk, "values": k},
         {"name": "value", "datatype": "FP32", "shape": sv, "data": v}],
        params=params)
    r = request(p, "POST", "/v2/models/sdpa/infer", body, headers=hdrs)
    check(r.body == rj.body, "mixed JSON/binary inputs: answer differs")


@test
def v2_binary_output_flags():
    p = shared().port
    (sq, q), (sk, k), (sv, v) = sdpa_json_vs_binary_data(cfg.seed + 11)
    ins = [{"name": "query", "datatype": "FP32", "shape": sq, "values": q},
           {"name": "key", "datatype": "FP32", "shape": sk, "values": k},
           {"name": "value", "datatype": "FP32", "shape": sv, "values": v}]
    _, ref = decode_v2(v2_infer(p, "sdpa", [
        v2_in("query", sq, q), v2_in("key", sk, k), v2_in("value", sv, v)]),
        "JSON reference")
    cases = [
        # (request-level, outputs, expected binary flags)
        ("request true, weights false", True,
         [{"name": "attn_output"},
          {"name": "attn_weights", "parameters": {"binary_data": False}}],
         {"attn_output": True, "attn_weights": False}),
        ("request unset, weights true", None,
         [{"name": "attn_output"},
          {"name": "attn_weights", "parameters": {"binary_data": True}}],
         {"attn_output": False, "attn_weights": True}),
        ("request false, output true", False,
         [{"name": "attn_output", "parameters": {"binary_data": True}},
          {"name": "attn_weights"}],
         {"attn_output": True, "attn_weights": False}),
        ("request true, both false", True,
         [{"name": "attn_output", "parameters": {"binary_data": False}},
          {"name": "attn_weights", "parameters": {"binary_data": False}}],
         {"attn_output": False, "attn_weights": False}),
    ]
    for what, level, outputs, want in cases:
        params = {} if level is None else {"binary_data_output": level}
        body, hdrs = v2_binary(ins, params=params, outputs=outputs)
        r = request(p, "POST", "/v2/models/sdpa/infer", body, headers=hdrs)
        _, o = decode_v2(r, what)
        for n, b in want.items():
            check(o[n]["binary"] == b, "%s: %s binary=%s, expected %s" %
                  (what, n, o[n]["binary"], b))
            assert_bits(o[n]["data"], ref[n]["data"], "%s: %s" % (what, n))
        any_bin = any(want.values())
        check((r.header("inference-header-content-length") is not None) ==
              any_bin, "%s: Inference-Header-Content-Length present=%s" %
              (what, not any_bin))
    # binary outputs requested by a plain JSON request
    r = v2_infer(p, "sdpa", [v2_in("query", sq, q), v2_in("key", sk, k),
                             v2_in("value", sv, v)],
                 params={"binary_data_output": True})
    _, o = decode_v2(r, "JSON request, binary_data_output")
    for n in ref:
        check(o[n]["binary"], "JSON request: %s not binary" % n)
        assert_bits(o[n]["data"], ref[n]["data"], "JSON->binary " + n)


@test
def v2_binary_fp16_and_fp64_inputs():
    p = shared().port
    rng = random.Random(cfg.seed + 12)
    shape = [1, 1, 4, 8]
    # multiples of 1/64 in [-1, 1]: exact in FP16, FP32 and FP64
    q, k, v = ([rng.randint(-64, 64) / 64.0 for _ in range(numel(shape))]
               for _ in range(3))
    ref = v2_infer(p, "sdpa", [v2_in("query", shape, q),
                               v2_in("key", shape, k),
                               v2_in("value", shape, v)])
    _, ro = decode_v2(ref, "FP32 JSON")
    for dt in ("FP16", "FP64"):
        body, hdrs = v2_binary(
            [{"name": n, "datatype": dt, "shape": shape, "values": x}
             for n, x in (("query", q), ("key", k), ("value", v))])
        r = request(p, "POST", "/v2/models/sdpa/infer", body, headers=hdrs)
        _, o = decode_v2(r, dt + " binary")
        for n in ro:
            assert_bits(o[n]["data"], ro[n]["data"], "%s vs FP32 %s" % (dt, n))
    # BOOL and INT32 blobs: a bool mask and key_lengths
    body, hdrs = v2_binary(
        [{"name": "query", "datatype": "FP32", "shape": shape, "values": q},
         {"name": "key", "datatype": "FP32", "shape": shape, "values": k},
         {"name": "value", "datatype": "FP32", "shape": shape, "values": v},
         {"name": "key_lengths", "datatype": "INT32", "shape": [1],
          "values": [3]}])
    r = request(p, "POST", "/v2/models/sdpa/infer", body, headers=hdrs)
    _, ol = decode_v2(r, "key_lengths INT32 blob")
    body, hdrs = v2_binary(
        [{"name": "query", "datatype": "FP32", "shape": shape, "values": q},
         {"name": "key", "datatype": "FP32", "shape": shape, "values": k},
         {"name": "value", "datatype": "FP32", "shape": shape, "values": v},
         {"name": "key_padding_mask", "datatype": "BOOL", "shape": [1, 4],
          "values": [False, False, False, True]}])
    r = request(p, "POST", "/v2/models/sdpa/infer", body, headers=hdrs)
    _, ok_ = decode_v2(r, "key_padding_mask BOOL blob")
    qr, kr, vr = rows(q, 0, 4, 8), rows(k, 0, 4, 8), rows(v, 0, 4, 8)
    out, w = ref_head(qr, kr, vr, 1 / math.sqrt(8), pad=[0, 0, 0, 1])
    for name, o in (("key_lengths", ol), ("key_padding_mask", ok_)):
        assert_close(o["attn_output"]["data"], flatten(out),
                     name + " attn_output")
        assert_close(o["attn_weights"]["data"], flatten(w),
                     name + " attn_weights")


@test
def v2_binary_errors():
    p = shared().port
    (sq, q), (sk, k), (sv, v) = sdpa_json_vs_binary_data(cfg.seed + 13)
    ins = [{"name": "query", "datatype": "FP32", "shape": sq, "values": q},
           {"name": "key", "datatype": "FP32", "shape": sk, "values": k},
           {"name": "value", "datatype": "FP32", "shape": sv, "values": v}]
    path = "/v2/models/sdpa/infer"

    def send(body, hdrs):
        return request(p, "POST", path, body, headers=hdrs)

    # wrong binary_data_size on "key" (the bytes are right)
    bad = [ins[0], dict(ins[1], size=4 * len(k) - 4), ins[2]]
    body, hdrs = v2_binary(bad)
    expect_error(send(body, hdrs), 400, "key", "binary_data_size",
                 what="wrong binary_data_size")
    # blob shorter than declared: runs past the end
    body, hdrs = v2_binary(ins)
    expect_error(send(body[:-4], hdrs), 400, "value",
                 what="last blob cut short")
    # trailing bytes after the last blob
    expect_error(send(body + b"\0" * 8, hdrs), 400, "value", "trailing",
                 what="trailing bytes")
    # header length 0
    h0 = dict(hdrs, **{"Inference-Header-Content-Length": "0"})
    expect_error(send(body, h0), 400, "Inference-Header-Content-Length",
                 what="Inference-Header-Content-Length 0")
    # header length beyond the body
    hb = dict(hdrs, **{"Inference-Header-Content-Length":
                       str(len(body) + 1)})
    expect_error(send(body, hb), 400, "Inference-Header-Content-Length",
                 what="Inference-Header-Content-Length > Content-Length")
    # not a number
    hn = dict(hdrs, **{"Inference-Header-Content-Length": "12abc"})
    expect_error(send(body, hn), 400, "Inference-Header-Content-Length",
                 what="Inference-Header-Content-Length not a number")
    # header length that cuts the JSON short
    hs = dict(hdrs, **{"Inference-Header-Content-Length":
                       str(int(hdrs["Inference-Header-Content-Length"]) - 5)})
    r = send(body, hs)
    check(r.status == 400, "JSON header cut short: %r" % r)
    # binary_data_size without the header
    hdr_only = dict(hdrs)
    del hdr_only["Inference-Header-Content-Length"]
    expect_error(send(body, hdr_only), 400,
                 what="binary_data_size without the header")
    # both data and binary_data_size
    j = json.loads(body[:int(hdrs["Inference-Header-Content-Length"])])
    j["inputs"][0]["data"] = q
    hdr = to_json_bytes(j)
    r = send(hdr + body[int(hdrs["Inference-Header-Content-Length"]):],
             dict(hdrs, **{"Inference-Header-Content-Length": str(len(hdr))}))
    expect_error(r, 400, "query", what="data and binary_data_size")
    # the server still answers normally
    body, hdrs = v2_binary(ins)
    decode_v2(send(body, hdrs), "good binary request after errors")


if __name__ == "__main__":
    sys.exit(main())
