#!/usr/bin/env python3
"""Integration tests: KServe v2 inference in JSON (flat and nested data,
id, model name and version, output selection, unknown names, parameters).

Run alone: python3 tests/integration/test_v2_json.py --attnd PATH
(the options of run.py; see harness.py and README.md).
"""

import json
import random
import sys
import time

from harness import (Pending, Server, assert_bits, assert_close, cfg, check,
                     check_slow_answer, decode_v2, expect_error, main, nested,
                     request, shared, slow_request, small_v2_body, test, v2_in,
                     v2_infer, v2_sdpa_case)


@test
def v2_flat_and_nested_data_agree():
    p = shared().port
    q, k, v = v2_sdpa_case(random.Random(cfg.seed + 1))
    flat = [v2_in("query", [2, 3, 4], q), v2_in("key", [2, 5, 4], k),
            v2_in("value", [2, 5, 3], v)]
    nest = [v2_in("query", [2, 3, 4], nested(q, [2, 3, 4])),
            v2_in("key", [2, 5, 4], nested(k, [2, 5, 4])),
            v2_in("value", [2, 5, 3], nested(v, [2, 5, 3]))]
    r1 = v2_infer(p, "sdpa", flat)
    r2 = v2_infer(p, "sdpa", nest)
    _, o1 = decode_v2(r1, "flat")
    _, o2 = decode_v2(r2, "nested")
    check(sorted(o1) == ["attn_output", "attn_weights"],
          "default outputs: %r" % sorted(o1))
    check(o1["attn_output"]["shape"] == [2, 3, 3], "output shape %r" %
          o1["attn_output"]["shape"])
    check(o1["attn_weights"]["shape"] == [2, 3, 5], "weights shape %r" %
          o1["attn_weights"]["shape"])
    for n in o1:
        assert_bits(o1[n]["data"], o2[n]["data"], "flat vs nested " + n)
    check(r1.body == r2.body, "flat and nested answers differ in bytes")
    # Ragged nesting is an error naming the input.
    bad = nest[:1] + [v2_in("key", [2, 5, 4],
                            [nested(k, [2, 5, 4])[0], [[1, 2, 3, 4]]])] + \
        nest[2:]
    expect_error(v2_infer(p, "sdpa", bad), 400, "key", what="ragged key")


@test
def v2_id_echoed_and_model_named():
    p = shared().port
    q, k, v = v2_sdpa_case(random.Random(cfg.seed + 2))
    ins = [v2_in("query", [2, 3, 4], q), v2_in("key", [2, 5, 4], k),
           v2_in("value", [2, 5, 3], v)]
    r = v2_infer(p, "sdpa", ins, extra={"id": "itest-id-42"})
    j, _ = decode_v2(r, "with id")
    check(j.get("id") == "itest-id-42", "id not echoed: %r" % j.get("id"))
    check(j.get("model_name") == "sdpa", "model_name %r" %
          j.get("model_name"))
    check(j.get("model_version") == "1", "model_version %r" %
          j.get("model_version"))
    r = v2_infer(p, "sdpa", ins)
    j, _ = decode_v2(r, "without id")
    check("id" not in j, "id present although none was sent: %r" %
          j.get("id"))
    r = request(p, "POST", "/v2/models/sdpa/versions/1/infer",
                {"inputs": ins})
    decode_v2(r, "POST /v2/models/sdpa/versions/1/infer")


@test
def v2_model_name_in_body_must_match_url():
    """Triton clients may repeat model_name / model_version in the body;
    codec.h says the server must check them against the URL."""
    p = shared().port
    q, k, v = v2_sdpa_case(random.Random(cfg.seed + 3))
    ins = [v2_in("query", [2, 3, 4], q), v2_in("key", [2, 5, 4], k),
           v2_in("value", [2, 5, 3], v)]
    r = v2_infer(p, "sdpa", ins, extra={"model_name": "sdpa",
                                        "model_version": "1"})
    decode_v2(r, "model_name matching the URL")
    r = v2_infer(p, "sdpa", ins, extra={"model_name": "mha"})
    expect_error(r, 400, "model_name",
                 what="body model_name 'mha' posted to /v2/models/sdpa/infer")
    r = request(p, "POST", "/v2/models/sdpa/versions/1/infer",
                {"inputs": ins, "model_version": "7"})
    expect_error(r, 400, "version",
                 what="body model_version '7' posted to "
                      "/v2/models/sdpa/versions/1/infer")
    # sdpa has only version 1: a body naming version 7 cannot be served,
    # whether or not the URL names a version.
    r = v2_infer(p, "sdpa", ins, extra={"model_version": "7"})
    check(r.status in (400, 404),
          "body model_version '7' posted to /v2/models/sdpa/infer (sdpa has "
          "only version 1): expected 400 or 404, got %r" % r)
    check("7" in r.json().get("error", ""), "error does not name version 7: "
          "%r" % r)


@test
def v2_output_selection():
    p = shared().port
    q, k, v = v2_sdpa_case(random.Random(cfg.seed + 4))
    ins = [v2_in("query", [2, 3, 4], q), v2_in("key", [2, 5, 4], k),
           v2_in("value", [2, 5, 3], v)]
    _, full = decode_v2(v2_infer(p, "sdpa", ins), "all outputs")
    j, o = decode_v2(v2_infer(p, "sdpa", ins,
                              outputs=[{"name": "attn_output"}]),
                     "only attn_output")
    names = [x["name"] for x in j["outputs"]]
    check(names == ["attn_output"], "asked attn_output, got %r" % names)
    # Not bitwise: without weights the engine may take its streaming path.
    assert_close(o["attn_output"]["data"], full["attn_output"]["data"],
                 "attn_output alone vs with weights")
    j, _ = decode_v2(v2_infer(p, "sdpa", ins,
                              outputs=[{"name": "attn_weights"},
                                       {"name": "attn_output"}]),
                     "both, reversed")
    names = [x["name"] for x in j["outputs"]]
    check(names == ["attn_weights", "attn_output"],
          "outputs not in the requested order: %r" % names)
    j, _ = decode_v2(v2_infer(p, "sdpa", ins, params={"need_weights": False}),
                     "need_weights false")
    names = [x["name"] for x in j["outputs"]]
    check(names == ["attn_output"], "need_weights false gave %r" % names)
    expect_error(v2_infer(p, "sdpa", ins, outputs=[{"name": "atn_output"}]),
                 400, "atn_output", what="unknown output")
    expect_error(v2_infer(p, "sdpa", ins, params={"need_weights": False},
                          outputs=[{"name": "attn_weights"}]),
                 400, "need_weights", what="need_weights false + weights")


@test
def v2_unknown_names_are_400():
    p = shared().port
    q, k, v = v2_sdpa_case(random.Random(cfg.seed + 5))
    ins = [v2_in("query", [2, 3, 4], q), v2_in("key", [2, 5, 4], k),
           v2_in("value", [2, 5, 3], v)]
    bad = [v2_in("qeury", [2, 3, 4], q)] + ins[1:]
    expect_error(v2_infer(p, "sdpa", bad), 400, "qeury",
                 what="unknown input")
    expect_error(v2_infer(p, "sdpa", ins, params={"causl": True}), 400,
                 "causl", what="unknown parameter")
    expect_error(v2_infer(p, "sdpa", ins, extra={"inptus": []}), 400,
                 "inptus", what="unknown top-level key")
    bad = [dict(ins[0], dtype="FP32")] + ins[1:]
    expect_error(v2_infer(p, "sdpa", bad), 400, "dtype",
                 what="unknown key in an input")
    expect_error(v2_infer(p, "sdpa", ins,
                          outputs=[{"name": "attn_output",
                                    "parameters": {"binary": True}}]),
                 400, "binary", what="unknown output parameter")
    # mha-only parameter on sdpa
    expect_error(v2_infer(p, "sdpa", ins, params={"num_heads": 2}), 400,
                 "num_heads", what="num_heads on sdpa")
    expect_error(v2_infer(p, "sdpa", ins[:2]), 400, "value",
                 what="missing value")


@test
def v2_fp16_as_json_is_400():
    p = shared().port
    ins = [v2_in("query", [2, 2], [1, 0, 0, 1], "FP16"),
           v2_in("key", [2, 2], [1, 0, 0, 1]),
           v2_in("value", [2, 2], [1, 2, 3, 4])]
    expect_error(v2_infer(p, "sdpa", ins), 400, "query", "binary",
                 what="FP16 as JSON")
    ins[0]["datatype"] = "BF16"
    expect_error(v2_infer(p, "sdpa", ins), 400, "binary", what="BF16 as JSON")


@test
def v2_priority_accepted():
    p = shared().port
    body = json.loads(small_v2_body())
    body["parameters"] = {"priority": 3}
    r = request(p, "POST", "/v2/models/sdpa/infer", body)
    decode_v2(r, "priority 3")
    body["parameters"] = {"priority": -1}
    r = request(p, "POST", "/v2/models/sdpa/infer", body)
    expect_error(r, 400, "priority", what="priority -1")


@test
def v2_timeout_parameter_honoured():
    """1-worker server: a request with a 1 us timeout queued behind a slow
    one gets 503; one with a generous timeout gets 200."""
    with Server("--workers", "1", name="timeout") as s:
        body, hdrs, shape = slow_request(s.port)
        slow = Pending(s.port, "/v2/models/sdpa/infer", body, hdrs)
        try:
            time.sleep(0.15)
            h = {"Content-Type": "application/json"}
            short = Pending(s.port, "/v2/models/sdpa/infer",
                            small_v2_body(timeout_us=1), h)
            long_ = Pending(s.port, "/v2/models/sdpa/infer",
                            small_v2_body(timeout_us=60000000), h)
            r_short = short.response()
            r_long = long_.response()
            check_slow_answer(slow.response(), shape, "slow request")
        finally:
            slow.close()
        expect_error(r_short, 503, "timeout", what="timeout 1 us")
        check(r_short.header("retry-after") is not None,
              "timeout 503 without Retry-After")
        decode_v2(r_long, "timeout 60 s")


if __name__ == "__main__":
    sys.exit(main())
