#!/usr/bin/env python3
"""Integration tests: the attention variants of issue 34 on both protocols
(causal alignment, window, ALiBi, softcap, rotary; num_kv_heads and
key_lengths on /v1), the resident model that fixes some of them
(config/models/mistral_tiny.json), every meaningless combination answered
400 with its reason, shape errors in the user's own terms, and the
variants as tritonclient sends them.  The
numbers themselves are checked against PyTorch by test_numerics.py's
golden tests.

Run alone: python3 tests/integration/test_variants.py --attnd PATH
(the options of run.py; see harness.py and README.md).
"""

import random
import sys

from harness import (assert_close, cfg, check, decode_v2, expect_error,
                     expect_status, flatten, main, rand_f32, request, shared,
                     test, v1, v1_ok, v2_binary, v2_in, v2_infer)
from tritonclient_imitation import (TcClient, tc_expect_error, tc_input)

Q4 = [[1, 0, 1, 0], [0, 1, 0, 1], [1, 1, 0, 0]]


def _v2_sdpa(params=None, extra=(), q=Q4):
    ins = [v2_in(n, [len(q), len(q[0])], flatten(q))
           for n in ("query", "key", "value")]
    return v2_infer(shared().port, "sdpa", ins + list(extra), params=params)


# (what, /v1 fields, v2 parameters, v2 extra inputs, needles of the message)
COMBINATIONS = [
    ("window right > 0 with causal", {"causal": True, "window": [1, 2]},
     {"causal": True, "window_right": 2}, [],
     ["causal already hides", "use 0 or -1"]),
    ("window right > 0 with top-left causal",
     {"causal": "top_left", "window": [-1, 1]},
     {"causal": "top_left", "window_right": 1}, [], ["\"top_left\""]),
    ("window bound below -1", {"window": [-2, 0]}, {"window_left": -2}, [],
     ["-1: unbounded"]),
    ("window bound not an integer", {"window": [1.5, 0]},
     {"window_left": 1.5}, [], ["integer"]),
    ("softcap 0", {"softcap": 0}, {"softcap": 0}, [], ["must be > 0"]),
    ("softcap negative", {"softcap": -3}, {"softcap": -3}, [],
     ["must be > 0"]),
    ("rotary dims odd", {"rotary": {"dims": 3}}, {"rotary_dims": 3}, [],
     ["even"]),
    ("rotary dims above the head dim", {"rotary": {"dims": 6}},
     {"rotary_dims": 6}, [], ["at most the head dim 4"]),
    ("rotary base 1", {"rotary": {"base": 1}}, {"rotary_base": 1}, [],
     ["must be > 1"]),
    ("rotary query_offset beyond 2^31",
     {"rotary": {"query_offset": 2 ** 31}}, {"rotary_query_offset": 2 ** 31},
     [], ["within +-2^31"]),
    ("rotary settings with rotary off (v2 only)", None,
     {"rotary": False, "rotary_dims": 2}, [], ["rotary_dims", "false"]),
    ("causal not a known alignment", {"causal": "top_right"},
     {"causal": "top_right"}, [], ["\"bottom_right\"", "\"top_left\""]),
    ("alibi_slopes count not the heads", {"alibi_slopes": [0.5, 0.25]},
     {}, [v2_in("alibi_slopes", [2], [0.5, 0.25])],
     ["alibi_slopes", "2 values", "one slope per query head"]),
    ("alibi true with alibi_slopes", {"alibi": True, "alibi_slopes": [0.5]},
     {"alibi": True}, [v2_in("alibi_slopes", [1], [0.5])],
     ["alibi_slopes", "alibi"]),
]


@test
def variant_combinations_refused_on_both():
    """Every meaningless combination is a 400 saying why, on /v1 (in its
    own field names) and on v2 (in the parameter names)."""
    p = shared().port
    for what, f1, p2, extra, needles in COMBINATIONS:
        expect_error(_v2_sdpa(p2, extra), 400, *needles, what="v2 " + what)
        if f1 is None:
            continue
        body = {"query": Q4}
        body.update(f1)
        e = expect_error(v1(p, body), 400, *needles, what="/v1 " + what)
        if "window" in f1 and "window_right" in p2:
            check("window[1]" in e, "/v1 %s names window[1]: %r" % (what, e))
        if "rotary" in f1 and isinstance(f1["rotary"], dict) and \
                "dims" in f1["rotary"]:
            check("rotary.dims" in e, "/v1 %s names rotary.dims: %r" %
                  (what, e))


@test
def rotary_on_an_odd_head_dim():
    """rotary dims default to the head dim, which must then be even."""
    p = shared().port
    q = [[1, 0, 1], [0, 1, 0]]
    expect_error(v1(p, {"query": q, "rotary": True}), 400, "head dim 3",
                 "odd", what="/v1 rotary on head dim 3")
    ins = [v2_in(n, [2, 3], flatten(q)) for n in ("query", "key", "value")]
    expect_error(v2_infer(p, "sdpa", ins, params={"rotary": True}), 400,
                 "head dim 3", "odd", what="v2 rotary on head dim 3")
    v1_ok(v1(p, {"query": q, "rotary": {"dims": 2}}), "rotary dims 2 of 3")


@test
def is_causal_names_causal_and_the_alignment():
    p = shared().port
    for r, what in ((v1(p, {"query": Q4, "is_causal": True}), "/v1"),
                    (_v2_sdpa({"is_causal": True}), "v2")):
        expect_error(r, 400, "is_causal", "causal", "top_left",
                     "j <= i + Lk - Lq", what=what + " is_causal")


@test
def causal_alignments_differ_when_lq_ne_lk():
    """Lq = 1 query against 3 keys: bottom-right sees every key, top-left
    only key 0 - on /v1 and v2 alike."""
    p = shared().port
    q, k = [[1, 0]], [[1, 0], [0, 1], [1, 1]]
    got = {}
    for c in (True, "bottom_right", "top_left"):
        j = v1_ok(v1(p, {"query": q, "key": k, "causal": c}), "causal %r" % c)
        got[c] = flatten(j["attn_weights"])
        r = v2_infer(p, "sdpa", [v2_in("query", [1, 2], [1, 0]),
                                 v2_in("key", [3, 2], flatten(k)),
                                 v2_in("value", [3, 2], flatten(k))],
                     params={"causal": c})
        _, o = decode_v2(r, "v2 causal %r" % c)
        assert_close(o["attn_weights"]["data"], got[c], "v2 = v1, %r" % c)
    check(got[True] == got["bottom_right"] and min(got[True]) > 0,
          "bottom_right sees every key: %r" % got[True])
    check(got["top_left"] == [1, 0, 0], "top_left: %r" % got["top_left"])


@test
def v2_alibi_slopes_binary_equals_json_and_standard():
    """alibi_slopes as an FP32 input, JSON or binary, and "alibi": true with
    the standard slopes of one head (2^-8) give the same answer."""
    p = shared().port
    q = [1, 0, 1, 0, 0, 1, 0, 1, 1, 1, 0, 0]
    ins = [{"name": n, "datatype": "FP32", "shape": [3, 4], "values": q}
           for n in ("query", "key", "value")]
    body, hdrs = v2_binary(ins + [{"name": "alibi_slopes", "datatype": "FP32",
                                   "shape": [1], "values": [2.0 ** -8]}])
    _, ob = decode_v2(request(p, "POST", "/v2/models/sdpa/infer", body,
                              headers=hdrs), "binary slopes")
    _, oj = decode_v2(_v2_sdpa(None, [v2_in("alibi_slopes", [1],
                                            [2.0 ** -8])]), "JSON slopes")
    _, os_ = decode_v2(_v2_sdpa({"alibi": True}), "standard slopes")
    _, o0 = decode_v2(_v2_sdpa(None), "no alibi")
    for o, what in ((oj, "JSON"), (os_, "standard")):
        assert_close(o["attn_weights"]["data"], ob["attn_weights"]["data"],
                     what + " slopes = binary slopes")
    check(o0["attn_weights"]["data"] != ob["attn_weights"]["data"],
          "alibi changes nothing")


@test
def tritonclient_variants():
    """The variants as tritonclient sends them: parameters= and an FP32
    alibi_slopes InferInput, binary; the same answer as plain v2 JSON, and
    attnd's refusal as the client's exception."""
    p = shared().port
    rng = random.Random(cfg.seed + 341)
    q, k, v = (rand_f32(rng, 2 * 5 * 4) for _ in range(3))
    params = {"causal": "top_left", "window_left": 2, "window_right": 0,
              "softcap": 20.0, "rotary_dims": 4, "rotary_interleaved": True}
    ins = [tc_input(n, [2, 5, 4], "FP32", x) for n, x in
           (("query", q), ("key", k), ("value", v))]
    ins.append(tc_input("alibi_slopes", [2], "FP32", [0.5, 0.125]))
    with TcClient(p) as c:
        res = c.infer("sdpa", ins, parameters=params)
        r = v2_infer(p, "sdpa", [v2_in("query", [2, 5, 4], q),
                                 v2_in("key", [2, 5, 4], k),
                                 v2_in("value", [2, 5, 4], v),
                                 v2_in("alibi_slopes", [2], [0.5, 0.125])],
                     params=params)
        _, o = decode_v2(r, "v2 JSON with variants")
        assert_close(res.as_values("attn_output"), o["attn_output"]["data"],
                     "tritonclient = v2 JSON, variants")
        bad = dict(params, window_right=3)
        tc_expect_error(lambda: c.infer("sdpa", ins, parameters=bad), 400,
                        "window_right", "causal", what="tritonclient window")


@test
def v1_gqa_and_key_lengths_match_v2():
    """/v1 num_kv_heads and key_lengths against the same request on v2."""
    rng = random.Random(cfg.seed + 340)
    p = shared().port
    B, H, Hkv, Lq, Lk, D = 2, 4, 2, 3, 5, 2
    q = rand_f32(rng, B * Lq * H * D)
    k = rand_f32(rng, B * Lk * Hkv * D)
    v = rand_f32(rng, B * Lk * Hkv * D)

    def nest(x, L, C):
        return [[x[(b * L + i) * C:(b * L + i + 1) * C] for i in range(L)]
                for b in range(B)]

    def heads(x, L, h):  # [B, L, h*D] -> [B, h, L, D] flat
        return [x[(b * L + i) * h * D + hh * D + d] for b in range(B)
                for hh in range(h) for i in range(L) for d in range(D)]

    j = v1_ok(v1(p, {"query": nest(q, Lq, H * D), "key": nest(k, Lk, Hkv * D),
                     "value": nest(v, Lk, Hkv * D), "num_heads": H,
                     "num_kv_heads": Hkv, "key_lengths": [5, 2]}), "/v1 GQA")
    r = v2_infer(p, "sdpa", [v2_in("query", [B, H, Lq, D], heads(q, Lq, H)),
                             v2_in("key", [B, Hkv, Lk, D], heads(k, Lk, Hkv)),
                             v2_in("value", [B, Hkv, Lk, D],
                                   heads(v, Lk, Hkv)),
                             v2_in("key_lengths", [B], [5, 2], "INT64")])
    _, o = decode_v2(r, "v2 GQA")
    assert_close(flatten(j["attn_weights"]), o["attn_weights"]["data"],
                 "/v1 = v2 weights with num_kv_heads and key_lengths")
    w = flatten(j["attn_weights"])
    check(all(w[((1 * H + h) * Lq + i) * Lk + jj] == 0 for h in range(H)
              for i in range(Lq) for jj in range(2, Lk)),
          "key_lengths 2 left keys 2.. visible in batch 1")


MISTRAL_Q = [[(i + c) % 3 - 1 for c in range(32)] for i in range(6)]


@test
def resident_fixed_settings():
    """mistral_tiny fixes causal, window [4, 0] and rotary: a request may
    restate them, leave them out or set what is free (rotary query_offset,
    softcap); contradicting one is a 400 naming both."""
    p = shared().port
    base = {"model": "mistral_tiny", "query": MISTRAL_Q}
    j0 = v1_ok(v1(p, base), "mistral_tiny as fixed")
    w = j0["attn_weights"]  # [H, Lq, Lk]: causal window [4, 0]
    check(all(w[h][i][jj] == 0 for h in range(4) for i in range(6)
              for jj in range(6) if jj > i or jj < i - 4),
          "mistral_tiny: weights outside the causal window [4, 0]")
    same = dict(base, causal=True, window=[4, 0],
                rotary={"base": 10000, "dims": 8, "interleaved": False})
    j1 = v1_ok(v1(p, same), "mistral_tiny restated")
    check(j1["output"] == j0["output"], "restating the settings changed it")
    v1_ok(v1(p, dict(base, rotary={"query_offset": 2}, softcap=30)),
          "mistral_tiny with free settings")
    for f, needles in (({"window": [8, 0]}, ["window[0]", "8",
                                             "window_left = 4"]),
                       ({"causal": False}, ["causal", "\"bottom_right\""]),
                       ({"rotary": {"dims": 4}}, ["rotary.dims",
                                                  "rotary_dims = 8"]),
                       ({"rotary": False}, ["rotary", "fixes rotary"])):
        expect_error(v1(p, dict(base, **f)), 400, "mistral_tiny", *needles,
                     what="/v1 mistral_tiny %r" % f)
    r = v2_infer(p, "mistral_tiny", [v2_in("query", [1, 32],
                                           MISTRAL_Q[0])],
                 params={"window_left": 2})
    expect_error(r, 400, "window_left", "mistral_tiny", "window_left = 4",
                 what="v2 mistral_tiny window_left 2")
    r = request(p, "GET", "/v1/models")
    ms = {m["name"]: m for m in r.json()["models"]}
    want = {"causal": "bottom_right", "window": [4, 0],
            "rotary": {"base": 10000, "dims": 8, "interleaved": False}}
    check(ms["mistral_tiny"].get("fixed") == want,
          "/v1/models mistral_tiny fixed: %r" % ms["mistral_tiny"])
    check("fixed" not in ms["demo"], "demo fixes nothing: %r" % ms["demo"])
    r = request(p, "GET", "/v2/models/mistral_tiny")
    expect_status(r, 200, "mistral_tiny metadata")
    ins = {x["name"]: x for x in r.json()["inputs"]}
    check(ins.get("alibi_slopes", {}).get("shape") == [4],
          "metadata alibi_slopes: %r" % ins.get("alibi_slopes"))


@test
def metadata_lists_alibi_slopes():
    p = shared().port
    for m in ("sdpa", "mha", "demo"):
        r = request(p, "GET", "/v2/models/" + m)
        ins = {x["name"]: x for x in r.json()["inputs"]}
        check(ins.get("alibi_slopes", {}).get("datatype") == "FP32",
              "%s metadata lacks alibi_slopes: %r" % (m, sorted(ins)))


# Shape errors in the user's own rank and words: (what, /v1 body,
# needles).  The v2 ones are in V2_SHAPES below.
V1_SHAPES = [
    ("key columns", {"query": [[1, 0]], "key": [[1, 0, 1], [0, 1, 1]]},
     ["'key' has 3 columns where 'query' has 2"]),
    ("value rows", {"query": [[1, 0]], "key": [[1, 0], [0, 1]],
                    "value": [[1, 0]]},
     ["'value' has 1 rows where 'key' has 2"]),
    ("batch", {"query": [[[1, 0]], [[0, 1]]], "key": [[[1, 0]]]},
     ["'key' has a batch of 1 where 'query' has 2"]),
    ("query columns and heads", {"query": [[1, 0, 1]], "num_heads": 2},
     ["'query' has 3 columns, not a multiple of num_heads 2"]),
    ("heads and kv heads", {"query": [[1, 0, 1]], "num_heads": 3,
                            "num_kv_heads": 2},
     ["num_heads 3 is not a multiple of num_kv_heads 2"]),
    ("key columns with GQA", {"query": [[1, 0, 1, 0]], "num_heads": 2,
                              "num_kv_heads": 1, "key": [[1, 0, 1, 0]]},
     ["'key' has 4 columns", "num_kv_heads 1", "head size 2 make 2"]),
    ("value columns with GQA", {"query": [[1, 0, 1, 0]], "num_heads": 4,
                                "num_kv_heads": 2, "key": [[1, 0]],
                                "value": [[1, 0, 1]]},
     ["'value' has 3 columns, not a multiple of num_kv_heads 2"]),
    ("attn_mask", {"query": [[1, 0], [0, 1]], "attn_mask": [[True, False]]},
     ["'attn_mask' is [1,2]", "[Lq, Lk] = [2, 2]"]),
    ("key_padding_mask", {"query": [[1, 0], [0, 1]],
                          "key_padding_mask": [True, False, True]},
     ["'key_padding_mask' has 3 columns", "[Lk] = [2]"]),
    ("key_lengths", {"query": [[1, 0]], "key_lengths": [1, 1]},
     ["'key_lengths' has 2 entries", "no batch"]),
    ("alibi_slopes", {"query": [[1, 0]], "alibi_slopes": [1, 2]},
     ["'alibi_slopes' has 2 values, but num_heads is 1"]),
]


def _eye(n, m=None):
    m = m or n
    return [[1 if i == j else 0 for j in range(m)] for i in range(n)]


W4 = {"w_q": _eye(4), "w_k": _eye(4), "w_v": _eye(4), "w_o": _eye(4)}

# /v1 with weights or a resident model: the tensors go to the model as
# sent, so its messages are in the request's own rank.
V1_SHAPES += [
    ("mha query columns and heads", {"query": [[1, 0, 1, 0]], "num_heads": 3,
                                     "weights": W4},
     ["'query' has 4 columns (dim 1, E), not a multiple of num_heads 3"]),
    ("mha key batch", {"query": [[[1, 0, 1, 0]]], "num_heads": 2,
                       "key": [[[1, 0, 1, 0]], [[0, 1, 0, 1]]],
                       "value": [[[1, 0, 1, 0]], [[0, 1, 0, 1]]],
                       "weights": W4},
     ["'key' has a batch of 2 (dim 0) where 'query' has 1"]),
    ("mha value rows", {"query": [[1, 0, 1, 0]], "num_heads": 2,
                        "key": [[1, 0, 1, 0], [0, 1, 0, 1]],
                        "value": [[1, 0, 1, 0]], "weights": W4},
     ["'value' has 1 rows (dim 0, Lk) where 'key' has 2"]),
    ("resident embed_dim", {"model": "demo", "query": [[1, 0, 1, 0]]},
     ["'query' has 4 columns (dim 1, E) where model 'demo' has embed_dim 16"]),
    ("resident alibi_slopes", {"model": "demo", "query": [[0.5] * 16],
                               "alibi_slopes": [1, 2]},
     ["'alibi_slopes' has 2 values, but the query has 4 heads"]),
]

# /v1 fields of the wrong kind: (what, body, needles).
V1_FIELDS = [
    ("window not a pair", {"window": [1]}, ["'window' must be [left, right]"]),
    ("window of strings", {"window": ["a", 0]},
     ["'window' must be [left, right]"]),
    ("rotary unknown member", {"rotary": {"bass": 10}},
     ["rotary: unknown field 'bass' (did you mean 'base'?)"]),
    ("rotary a number", {"rotary": 3}, ["'rotary' must be an object"]),
    ("rotary.interleaved a number", {"rotary": {"interleaved": 1}},
     ["'rotary.interleaved' must be true or false"]),
    ("rotary.query_offset a fraction", {"rotary": {"query_offset": 0.5}},
     ["'rotary.query_offset' must be an integer"]),
    ("softcap a string", {"softcap": "50"}, ["'softcap' must be a number"]),
    ("alibi a number", {"alibi": 1}, ["'alibi' must be true or false"]),
    ("causal a number", {"causal": 1}, ["'causal' must be true, false"]),
    ("num_kv_heads 0", {"num_kv_heads": 0},
     ["'num_kv_heads' must be an integer in 1..65536"]),
    ("key_lengths an object", {"key_lengths": {"a": 1}},
     ["'key_lengths' must be an array"]),
    ("key_lengths of fractions", {"key_lengths": [0.5]},
     ["key_lengths[0]: expected a key count"]),
    ("key_lengths over the keys", {"key_lengths": [5]},
     ["'key_lengths': element 0 is 5", "Lk=3"]),
    ("key_lengths with key_padding_mask",
     {"key_lengths": [1], "key_padding_mask": [False, False, True]},
     ["'key_padding_mask' and 'key_lengths' both given"]),
]


@test
def v1_variant_fields_of_the_wrong_kind():
    p = shared().port
    for what, f, needles in V1_FIELDS:
        body = {"query": Q4}
        body.update(f)
        expect_error(v1(p, body), 400, *needles, what="/v1 " + what)


@test
def v1_shape_errors_in_the_users_terms():
    p = shared().port
    for what, body, needles in V1_SHAPES:
        e = expect_error(v1(p, body), 400, *needles, what="/v1 " + what)
        # sdpa: the model sees the heads cut, the user must not
        check("dim " not in e or "weights" in body or "model" in body,
              "/v1 %s speaks of internal dims: %r" % (what, e))


def _t(name, shape, dt="FP32"):
    n = 1
    for x in shape:
        n *= x
    if dt == "BOOL":
        return v2_in(name, shape, [False] * n, dt)
    if dt == "INT64":
        return v2_in(name, shape, [1] * n, dt)
    return v2_in(name, shape, [0.5] * n)


def _mha_w(E, kw=None):
    kw = kw or E
    return [_t("w_q", [E, E]), _t("w_k", [E, kw]), _t("w_v", [E, kw]),
            _t("w_o", [E, E])]


QKV = [_t("query", [1, 2, 3, 4]), _t("key", [1, 2, 5, 4]),
       _t("value", [1, 2, 5, 4])]

# Shape errors on v2, each in the request's own rank and words: (what,
# model, inputs, parameters, needles).
V2_SHAPES = [
    ("sdpa key Dk", "sdpa", [_t("query", [1, 2]), _t("key", [2, 3]),
                             _t("value", [2, 3])], None,
     ["'key' has 3 values per position (dim 1, Dk) where 'query' has 2"]),
    ("sdpa key batch", "sdpa", [QKV[0], _t("key", [2, 2, 5, 4]),
                                _t("value", [2, 2, 5, 4])], None,
     ["'key' has a batch of 2 (dim 0) where 'query' has 1"]),
    ("sdpa value positions", "sdpa", QKV[:2] + [_t("value", [1, 2, 4, 4])],
     None, ["'value' has 4 positions (dim 2, Lk) where 'key' has 5"]),
    ("sdpa value heads", "sdpa", QKV[:2] + [_t("value", [1, 1, 5, 4])], None,
     ["'value' has 1 heads (dim 1) where 'key' has 2"]),
    ("sdpa kv heads", "sdpa",
     [_t("query", [3, 3, 4]), _t("key", [2, 5, 4]), _t("value", [2, 5, 4])],
     None, ["'key' has 2 heads (dim 0), which do not divide the 3 heads"]),
    ("sdpa rank", "sdpa", [_t("query", [4]), _t("key", [4]),
                           _t("value", [4])], None,
     ["'query': shape [4]", "rank 2 [Lq,Dk]"]),
    ("sdpa attn_mask", "sdpa", QKV + [_t("attn_mask", [3, 4], "BOOL")], None,
     ["'attn_mask': shape [3,4]", "Lq=3 Lk=5"]),
    ("sdpa key_padding_mask", "sdpa",
     QKV + [_t("key_padding_mask", [1, 4], "BOOL")], None,
     ["'key_padding_mask': shape [1,4]", "[B,Lk] = [1,5]"]),
    ("sdpa key_lengths", "sdpa", QKV + [_t("key_lengths", [2], "INT64")],
     None, ["'key_lengths': shape [2]", "[B] = [1]"]),
    ("sdpa alibi_slopes", "sdpa", QKV + [_t("alibi_slopes", [3])], None,
     ["'alibi_slopes' has 3 values, but the query has 2 heads"]),
    ("mha E and heads", "mha", [_t("query", [2, 4])] + _mha_w(4),
     {"num_heads": 3}, ["'query' has 4 columns (dim 1, E), not a multiple "
                        "of num_heads 3"]),
    ("mha key batch", "mha", [_t("query", [1, 2, 4]), _t("key", [2, 3, 4]),
                              _t("value", [2, 3, 4])] + _mha_w(4),
     {"num_heads": 2}, ["'key' has a batch of 2 (dim 0) where 'query' has 1"]),
    ("mha value rows", "mha", [_t("query", [2, 4]), _t("key", [3, 4]),
                               _t("value", [2, 4])] + _mha_w(4),
     {"num_heads": 2}, ["'value' has 2 rows (dim 0, Lk) where 'key' has 3"]),
    ("mha w_k", "mha", [_t("query", [2, 4])] + _mha_w(4)[:1] +
     [_t("w_k", [4, 3])] + _mha_w(4)[2:], {"num_heads": 2},
     ["'w_k': shape [4,3]", "[kdim,Hkv*E/H] = [4,4]"]),
    ("resident E", "demo", [_t("query", [2, 8])], None,
     ["'query' has 8 columns (dim 1, E) where model 'demo' has embed_dim 16"]),
    ("resident kdim", "demo", [_t("query", [2, 16]), _t("key", [2, 8]),
                               _t("value", [2, 16])], None,
     ["'key' has 8 columns (dim 1) where model 'demo' takes kdim 16"]),
]


@test
def v2_shape_errors_in_the_users_terms():
    p = shared().port
    for what, model, ins, params, needles in V2_SHAPES:
        expect_error(v2_infer(p, model, ins, params=params), 400, *needles,
                     what="v2 " + what)


if __name__ == "__main__":
    sys.exit(main())
