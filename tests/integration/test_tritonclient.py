#!/usr/bin/env python3
"""Integration tests: NVIDIA's tritonclient on the wire (health,
metadata, inference with binary and JSON inputs, datatypes, parameters,
errors, compression, the asyncio client), as tritonclient_imitation.py
sends and reads them.

Run alone: python3 tests/integration/test_tritonclient.py --attnd PATH
(the options of run.py; see harness.py and README.md).
"""

import json
import math
import os
import random
import ssl
import sys
import tempfile

from harness import (Server, assert_bits, assert_close, cfg, check, decode_v2,
                     flatten, main, make_pki, ref_head, rows,
                     sdpa_json_vs_binary_data, shared, test, v2_in, v2_infer)
from tritonclient_imitation import (TcClient, tc_expect_error, tc_input,
                                    tc_output, tc_request)


def _tc_sdpa_case(seed):
    """Random FP32 sdpa inputs with a few exact float32 values whose
    rapidjson text has forms Python's json never writes: 2^-20 is
    9.5367431640625e-7, 2^-17 is 0.00000762939453125, 2^73 is
    9.44473296573929e21."""
    (sq, q), (sk, k), (sv, v) = sdpa_json_vs_binary_data(seed)
    q[:4] = [2.0 ** -20, -2.0 ** -17, 0.0, -0.0]
    v[0] = 2.0 ** 73
    return (sq, q), (sk, k), (sv, v)


def _tc_reference(p, case, params=None):
    """attnd's own JSON path (plain v2 JSON in and out) for the same case."""
    (sq, q), (sk, k), (sv, v) = case
    _, ref = decode_v2(v2_infer(p, "sdpa", [
        v2_in("query", sq, q), v2_in("key", sk, k), v2_in("value", sv, v)],
        params=params), "attnd JSON reference")
    return ref


def _tc_same(res, ref, what, binary=None):
    """Every reference output is in res, same shape, same float32 bits."""
    check(sorted(res.outputs) == sorted(ref), "%s: outputs %r, expected %r" %
          (what, sorted(res.outputs), sorted(ref)))
    for n in ref:
        dt, shape, vals, is_bin = res.outputs[n]
        check(dt == "FP32" and shape == ref[n]["shape"], "%s: %s is %s %r, "
              "expected FP32 %r" % (what, n, dt, shape, ref[n]["shape"]))
        if binary is not None:
            want = binary[n] if isinstance(binary, dict) else binary
            check(is_bin == want, "%s: %s binary=%s, expected %s" %
                  (what, n, is_bin, want))
        assert_bits(vals, ref[n]["data"], "%s: %s" % (what, n))


@test
def tritonclient_health_and_metadata():
    """is_server_live/ready, is_model_ready, get_server_metadata,
    get_model_metadata (with and without a version) and their errors, all on
    one kept-alive connection as a tritonclient session does."""
    p = shared().port
    with TcClient(p) as c:
        check(c.is_server_live() is True, "is_server_live")
        sock = c.conn.sock
        check(c.is_server_ready() is True, "is_server_ready")
        for m in ("sdpa", "mha", "demo"):
            check(c.is_model_ready(m), "is_model_ready(%r)" % m)
            check(c.is_model_ready(m, "1"), "is_model_ready(%r, '1')" % m)
        check(c.is_model_ready("nosuchmodel") is False,
              "is_model_ready of an unknown model")
        check(c.is_model_ready("sdpa", "2") is False,
              "is_model_ready of an unknown version")
        meta = c.get_server_metadata()
        check(meta.get("name") == "attnd" and
              isinstance(meta.get("version"), str) and
              "binary_tensor_data" in meta.get("extensions", []),
              "get_server_metadata: %r" % meta)
        for m in ("sdpa", "demo"):
            mm = c.get_model_metadata(m)
            check(mm == c.get_model_metadata(m, "1"),
                  "get_model_metadata(%r) differs with version '1'" % m)
            check(mm.get("name") == m and "1" in mm.get("versions", []) and
                  isinstance(mm.get("platform"), str),
                  "get_model_metadata(%r): %r" % (m, mm))
            for sec in ("inputs", "outputs"):
                for t in mm.get(sec) or [None]:
                    check(isinstance(t, dict) and
                          isinstance(t.get("name"), str) and
                          isinstance(t.get("datatype"), str) and
                          isinstance(t.get("shape"), list),
                          "get_model_metadata(%r) %s entry %r" % (m, sec, t))
        tc_expect_error(lambda: c.get_model_metadata("nosuchmodel"), 404,
                        "nosuchmodel", what="get_model_metadata(unknown)")
        tc_expect_error(lambda: c.get_model_metadata("sdpa", "2"), 404,
                        "version", what="get_model_metadata(sdpa, '2')")
        # attnd has no model configuration endpoint: a clean 404 error
        tc_expect_error(lambda: c.get_model_config("sdpa"), 404,
                        what="get_model_config")
        check(c.is_server_live(), "is_server_live after errors")
        check(c.conn.sock is sock, "the connection was not kept alive")


@test
def tritonclient_infer_binary_inputs():
    """infer() with set_data_from_numpy(a) (binary_data=True, the default):
    no outputs (so binary_data_output), binary and JSON InferRequestedOutput,
    a request_id, a version in the URL; bitwise equal to attnd's JSON path."""
    p = shared().port
    case = _tc_sdpa_case(cfg.seed + 60)
    ref = _tc_reference(p, case)
    ins = [tc_input(n, s, "FP32", x)
           for n, (s, x) in zip(("query", "key", "value"), case)]
    with TcClient(p) as c:
        res = c.infer("sdpa", ins)
        _, hdrs, body = c.last_sent[1:]
        names = [h[0].lower() for h in hdrs]
        check("content-type" not in names, "tritonclient sends no "
              "Content-Type: %r" % names)
        ihcl = dict((h[0].lower(), h[1]) for h in hdrs)[
            "inference-header-content-length"]
        head = json.loads(body[:int(ihcl)])
        check(head["parameters"] == {"binary_data_output": True} and
              "outputs" not in head and "id" not in head,
              "request JSON as tritonclient builds it: %r" % head)
        check(res.header_length is not None, "binary answer without "
              "Inference-Header-Content-Length")
        check(res.response.get("model_name") == "sdpa" and
              "id" not in res.response, "answer header %r" % res.response)
        _tc_same(res, ref, "binary in, no outputs", binary=True)
        res = c.infer("sdpa", ins, model_version="1", request_id="tc-7",
                      outputs=[tc_output("attn_output", binary_data=False),
                               tc_output("attn_weights")])
        check(res.response.get("id") == "tc-7" and
              res.response.get("model_version") == "1",
              "id / model_version: %r" % res.response)
        check([o["name"] for o in res.response["outputs"]] ==
              ["attn_output", "attn_weights"], "output order %r" %
              res.response["outputs"])
        _tc_same(res, ref, "binary in, mixed outputs",
                 binary={"attn_output": False, "attn_weights": True})
        res = c.infer("sdpa", ins, outputs=[tc_output("attn_weights", False)])
        check(res.header_length is None, "all-JSON answer carries "
              "Inference-Header-Content-Length")
        check(list(res.outputs) == ["attn_weights"], "asked attn_weights, "
              "got %r" % list(res.outputs))
        assert_bits(res.as_values("attn_weights"),
                    ref["attn_weights"]["data"], "binary in, JSON weights")


@test
def tritonclient_infer_json_inputs():
    """set_data_from_numpy(a, binary_data=False): the whole body is JSON
    (rapidjson number text), no Inference-Header-Content-Length."""
    p = shared().port
    case = _tc_sdpa_case(cfg.seed + 61)
    ref = _tc_reference(p, case)
    ins = [tc_input(n, s, "FP32", x, binary_data=False)
           for n, (s, x) in zip(("query", "key", "value"), case)]
    body, size = tc_request(ins)
    check(size is None, "JSON-only request has a header length")
    for text in (b"9.5367431640625e-7", b"-0.00000762939453125",
                 b"9.44473296573929e21", b"-0.0,"):
        check(text in body, "request lacks rapidjson number text %r" % text)
    check(b"e+" not in body and b"e-0" not in body,
          "request has Python-style exponents")
    with TcClient(p) as c:
        res = c.infer("sdpa", ins)
        sent = dict((h[0].lower(), h[1]) for h in c.last_sent[2])
        check("inference-header-content-length" not in sent,
              "JSON-only request sent Inference-Header-Content-Length")
        _tc_same(res, ref, "JSON in, no outputs", binary=True)
        res = c.infer("sdpa", ins,
                      outputs=[tc_output("attn_output", False),
                               tc_output("attn_weights", False)])
        check(res.header_length is None, "JSON in, JSON out: answer has "
              "Inference-Header-Content-Length")
        _tc_same(res, ref, "JSON in, JSON out", binary=False)
        res = c.infer("sdpa", ins, outputs=[tc_output("attn_output", True)])
        check(list(res.outputs) == ["attn_output"], "outputs %r" %
              list(res.outputs))
        # Not bitwise: without weights the engine may take its streaming path.
        assert_close(res.as_values("attn_output"), ref["attn_output"]["data"],
                     "JSON in, binary attn_output alone")


@test
def tritonclient_infer_datatypes():
    """FP16, BF16, FP64, BOOL, INT32 and INT64 inputs as tritonclient
    serialises them, binary and (where it can) JSON."""
    p = shared().port
    rng = random.Random(cfg.seed + 62)
    shape = [1, 1, 4, 8]
    # multiples of 1/64 in [-1, 1]: exact in FP16, BF16, FP32 and FP64
    q, k, v = ([rng.randint(-64, 64) / 64.0 for _ in range(32)]
               for _ in range(3))
    qkv = (("query", q), ("key", k), ("value", v))
    _, ref = decode_v2(v2_infer(p, "sdpa", [v2_in(n, shape, x)
                                            for n, x in qkv]), "FP32 JSON")
    with TcClient(p) as c:
        for dt, binary in (("FP16", True), ("BF16", True), ("FP64", True),
                           ("FP64", False)):
            res = c.infer("sdpa", [tc_input(n, shape, dt, x, binary)
                                   for n, x in qkv])
            _tc_same(res, ref, "%s %s inputs" %
                     (dt, "binary" if binary else "JSON"), binary=True)
        # Triton refuses FP16 in JSON too ("use the binary data format")
        tc_expect_error(lambda: c.infer("sdpa", [
            tc_input(n, shape, "FP16", x, False) for n, x in qkv]), 400,
            "query", "binary", what="FP16 JSON input")
        qr, kr, vr = rows(q, 0, 4, 8), rows(k, 0, 4, 8), rows(v, 0, 4, 8)
        out, w = ref_head(qr, kr, vr, 1 / math.sqrt(8), pad=[0, 0, 0, 1])
        blocked = [[False, False, False, True]] * 4
        extras = [("BOOL mask", tc_input, ("attn_mask", [4, 4], "BOOL",
                                           flatten(blocked)))]
        for dt in ("INT32", "INT64"):
            extras.append((dt + " key_lengths", tc_input,
                           ("key_lengths", [1], dt, [3])))
        for what, mk, args in extras:
            for binary in (True, False):
                ins = [tc_input(n, shape, "FP32", x, binary) for n, x in qkv]
                res = c.infer("sdpa", ins + [mk(*args, binary_data=binary)])
                tag = "%s %s" % (what, "binary" if binary else "JSON")
                assert_close(res.as_values("attn_output"), flatten(out),
                             tag + " attn_output")
                assert_close(res.as_values("attn_weights"), flatten(w),
                             tag + " attn_weights")


@test
def tritonclient_infer_parameters():
    """priority, timeout (0 is Triton's "no timeout"), custom parameters,
    sequence_id and a non-ASCII request_id, as infer() puts them in the
    request's "parameters"."""
    p = shared().port
    case = _tc_sdpa_case(cfg.seed + 63)
    ins = [tc_input(n, s, "FP32", x)
           for n, (s, x) in zip(("query", "key", "value"), case)]
    with TcClient(p) as c:
        ref = _tc_reference(p, case)
        for kw in ({"priority": 1}, {"timeout": 0},
                   {"timeout": 60000000, "priority": 2}):
            res = c.infer("sdpa", ins, **kw)
            _tc_same(res, ref, "infer(%r)" % kw)
        for tmo in (0, 0, 0):  # a 0 us limit would fail after any queueing
            _tc_same(c.infer("sdpa", ins, timeout=tmo), ref, "timeout=0")
        params = {"causal": True, "scale": 0.25}
        ref = _tc_reference(p, case, params=params)
        _tc_same(c.infer("sdpa", ins, parameters=params), ref,
                 "parameters=%r" % params)
        rid = "r\u00e9q-\"1\""
        res = c.infer("sdpa", ins, request_id=rid)
        check(b"r\\u00e9q-\\\"1\\\"" in c.last_sent[3],
              "request_id not escaped as rapidjson does")
        check(res.response.get("id") == rid, "id echoed as %r" %
              res.response.get("id"))
        # attnd has no sequence batcher: a clean 400 naming the parameter
        tc_expect_error(lambda: c.infer("sdpa", ins, sequence_id=7,
                                        sequence_start=True), 400,
                        "sequence_id", what="sequence_id")


@test
def tritonclient_errors_and_compression():
    """What a tritonclient user sees for attnd's refusals (an exception with
    attnd's message, never a decoding failure), and compression options."""
    p = shared().port
    case = _tc_sdpa_case(cfg.seed + 64)
    ins = [tc_input(n, s, "FP32", x)
           for n, (s, x) in zip(("query", "key", "value"), case)]
    ref = _tc_reference(p, case)
    with TcClient(p) as c:
        tc_expect_error(lambda: c.infer("nosuchmodel", ins), 404,
                        "nosuchmodel", what="unknown model")
        tc_expect_error(lambda: c.infer("sdpa", ins, model_version="2"), 404,
                        "2", what="unknown version")
        tc_expect_error(lambda: c.infer("sdpa", ins[:2]), 400, "value",
                        what="missing input")
        bad = [tc_input("qeury", case[0][0], "FP32", case[0][1])] + ins[1:]
        tc_expect_error(lambda: c.infer("sdpa", bad), 400, "qeury",
                        what="unknown input")
        tc_expect_error(lambda: c.infer(
            "sdpa", ins, outputs=[tc_output("attn_output", class_count=3)]),
            400, "classification", what="class_count (no classification "
            "extension)")
        # Accept-Encoding is a wish: attnd answers uncompressed, which
        # InferResult reads as is.
        for alg in ("gzip", "deflate"):
            res = c.infer("sdpa", ins, response_compression_algorithm=alg)
            _tc_same(res, ref, "response_compression_algorithm=" + alg)
        # Compressed request bodies (binary inputs: the header length
        # counts the JSON before compression) give the same answer.
        for alg in ("gzip", "deflate"):
            res = c.infer("sdpa", ins, request_compression_algorithm=alg)
            _tc_same(res, ref, "request_compression_algorithm=" + alg)
        check(c.is_server_ready(), "ready after the errors")


@test
def tritonclient_aio_client():
    """tritonclient.http.aio: aiohttp sends every body as
    application/octet-stream, JSON-only ones included, plus Accept-Encoding:
    gzip, deflate."""
    p = shared().port
    case = _tc_sdpa_case(cfg.seed + 65)
    ref = _tc_reference(p, case)
    with TcClient(p, aio=True) as c:
        check(c.is_server_live() and c.is_server_ready() and
              c.is_model_ready("sdpa"), "aio health")
        check(c.get_model_metadata("sdpa").get("name") == "sdpa",
              "aio get_model_metadata")
        for binary in (True, False):
            ins = [tc_input(n, s, "FP32", x, binary)
                   for n, (s, x) in zip(("query", "key", "value"), case)]
            res = c.infer("sdpa", ins)
            _tc_same(res, ref, "aio, %s inputs" %
                     ("binary" if binary else "JSON"), binary=True)
            res = c.infer("sdpa", ins,
                          outputs=[tc_output("attn_output", False),
                                   tc_output("attn_weights", False)])
            _tc_same(res, ref, "aio, %s inputs, JSON outputs" %
                     ("binary" if binary else "JSON"), binary=False)


@test
def tritonclient_model_repository():
    """get_model_repository_index, load_model and unload_model as
    tritonclient sends them (an empty index body, {} to load, the
    unload_dependents parameter to unload), and the exceptions a user
    sees: a built-in, a config override, a model no file names."""
    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, "tc.json"), "w") as f:
            json.dump({"name": "tc", "embed_dim": 8, "num_heads": 2,
                       "seed": 5}, f)
        with Server("--models-dir", d, "--model-control", "explicit",
                    name="tc-repo") as s, \
                TcClient(s.port) as c:
            idx = c.get_model_repository_index()
            check({"name": "tc", "version": "1", "state": "READY"} in idx and
                  len(idx) == 4, "get_model_repository_index: %r" % idx)
            c.unload_model("tc")
            check(c.is_model_ready("tc") is False, "ready after unload")
            check({"name": "tc", "state": "UNAVAILABLE", "reason": "unloaded"}
                  in c.get_model_repository_index(), "index after unload")
            c.load_model("tc")
            check(c.is_model_ready("tc") is True, "ready after load")
            tc_expect_error(lambda: c.unload_model("sdpa"), 400, "built in",
                            what="unload_model(sdpa)")
            tc_expect_error(lambda: c.load_model("tc", config="{}"), 400,
                            "'config' is not supported",
                            what="load_model(config=...)")
            tc_expect_error(lambda: c.load_model(
                "tc", files={"file:1/model.bin": b"x"}), 400,
                "'file:1/model.bin' is not supported",
                what="load_model(files=...)")
            tc_expect_error(lambda: c.load_model("nosuch"), 404,
                            "no model file", what="load_model(nosuch)")
            check(c.is_model_ready("tc") is True, "ready after the errors")


@test
def tritonclient_with_key_and_mutual_tls():
    """tritonclient over HTTPS with a client certificate (ssl=True and an
    SSL context) and an API key in each call's headers: health, metadata,
    a binary inference, statistics and the repository index work; without
    the key a call is a 401 exception, health stays open."""
    import shutil
    if not shutil.which("openssl"):
        check(False, "openssl is needed (make test-deps)")
    with tempfile.TemporaryDirectory() as d:
        f = make_pki(d)
        key = "tc-key-123"
        env = dict(os.environ, ATTND_API_KEY=key)
        with Server("--tls-cert-file", f("server.crt"), "--tls-key-file",
                    f("server.key"), "--tls-client-ca-file", f("ca.crt"),
                    env=env, name="tc-tls") as s:
            ctx = ssl.create_default_context(cafile=f("ca.crt"))
            ctx.load_cert_chain(f("client.crt"), f("client.key"))
            with TcClient(s.port, ssl_context=ctx,
                          headers={"Authorization": "Bearer " + key}) as c:
                check(c.is_server_live() and c.is_server_ready(), "health")
                check(c.get_model_metadata("sdpa")["name"] == "sdpa",
                      "get_model_metadata")
                case = _tc_sdpa_case(cfg.seed + 90)
                ins = [tc_input(n, sh, "FP32", x) for n, (sh, x) in
                       zip(("query", "key", "value"), case)]
                _tc_same(c.infer("sdpa", ins),
                         _tc_reference(shared().port, case),
                         "over mutual TLS with a key", binary=True)
                st = c.get_inference_statistics("sdpa")["model_stats"][0]
                check(st["inference_count"] >= 1, "statistics %r" % st)
                check(len(c.get_model_repository_index()) >= 2, "index")
            with TcClient(s.port, ssl_context=ctx) as c:
                check(c.is_server_live(), "health without a key")
                tc_expect_error(lambda: c.get_model_metadata("sdpa"), 401,
                                "needs an API key",
                                what="get_model_metadata without a key")


if __name__ == "__main__":
    sys.exit(main())
