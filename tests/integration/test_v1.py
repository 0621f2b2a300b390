#!/usr/bin/env python3
"""Integration tests: /v1/attention (self- and cross-attention, heads,
causal, scale, masks, weights, tokens, typos, multi-head weights), against
the float64 reference.

Run alone: python3 tests/integration/test_v1.py --attnd PATH
(the options of run.py; see harness.py and README.md).
"""

import random
import sys

from harness import (assert_close, cfg, check, expect_error, flatten, main,
                     nested, numel, rand_f32, shared, test, v1, v1_case,
                     v1_check, v1_ok, v1_reference)


@test
def v1_self_attention_default():
    rng = random.Random(cfg.seed + 20)
    v1_check(shared().port,
             v1_case(rng, 0, 1, 4, 4, 6, 6, cross=False), "self-attention")


@test
def v1_key_value():
    rng = random.Random(cfg.seed + 21)
    v1_check(shared().port, v1_case(rng, 0, 1, 3, 5, 4, 2), "key/value")


@test
def v1_num_heads():
    p = shared().port
    rng = random.Random(cfg.seed + 22)
    v1_check(p, v1_case(rng, 0, 2, 3, 5, 4, 3), "num_heads 2")
    v1_check(p, v1_case(rng, 2, 3, 2, 4, 2, 2), "batched num_heads 3")
    r = v1(p, {"query": [[1, 2, 3]], "num_heads": 2})
    expect_error(r, 400, "num_heads", what="D not divisible by num_heads")


@test
def v1_causal():
    p = shared().port
    rng = random.Random(cfg.seed + 23)
    v1_check(p, v1_case(rng, 0, 1, 4, 4, 4, 4, cross=False, causal=True),
             "causal self")
    v1_check(p, v1_case(rng, 0, 2, 3, 6, 4, 4, causal=True),
             "causal Lq<Lk (bottom-right)")
    v1_check(p, v1_case(rng, 0, 1, 5, 3, 4, 4, causal=True),
             "causal Lq>Lk (first rows see nothing)")
    # the README example, checked by hand: row 0 sees only key 0
    j = v1_ok(v1(p, {"query": [[1, 0], [0, 1], [1, 1]], "causal": True}),
              "README causal")
    assert_close(flatten(j["output"])[:2], [1.0, 0.0], "causal row 0")


@test
def v1_scale():
    rng = random.Random(cfg.seed + 24)
    v1_check(shared().port, v1_case(rng, 0, 2, 3, 4, 4, 4, scale=0.25),
             "scale 0.25")


@test
def v1_attn_mask_bool_and_float():
    p = shared().port
    rng = random.Random(cfg.seed + 25)
    v1_check(p, v1_case(rng, 0, 2, 4, 5, 3, 3, mask="bool"), "bool mask")
    v1_check(p, v1_case(rng, 0, 2, 4, 5, 3, 3, mask="float"),
             "float mask")
    # polarity, by hand: true = blocked
    j = v1_ok(v1(p, {"query": [[1.0, 0.0]], "key": [[1, 0], [0, 1]],
                     "value": [[10, 0], [0, 10]],
                     "attn_mask": [[False, True]]}), "mask polarity")
    assert_close(flatten(j["output"]), [10.0, 0.0], "true blocks the key")


@test
def v1_key_padding_mask():
    p = shared().port
    rng = random.Random(cfg.seed + 26)
    v1_check(p, v1_case(rng, 0, 1, 3, 5, 4, 4, kpm=True), "kpm [Lk]")
    v1_check(p, v1_case(rng, 2, 2, 3, 5, 2, 2, kpm=True), "kpm [B,Lk]")


@test
def v1_need_weights_false():
    rng = random.Random(cfg.seed + 27)
    v1_check(shared().port, v1_case(rng, 0, 2, 3, 4, 4, 4, need=False),
             "need_weights false")


@test
def v1_average_attn_weights():
    p = shared().port
    rng = random.Random(cfg.seed + 28)
    v1_check(p, v1_case(rng, 0, 2, 3, 4, 4, 4, avg=True), "average true")
    v1_check(p, v1_case(rng, 2, 2, 3, 4, 4, 4, avg=True),
             "batched average true")
    v1_check(p, v1_case(rng, 0, 2, 3, 4, 4, 4, avg=False), "average false")


@test
def v1_tokens_echoed():
    p = shared().port
    toks = ["le", "chat", "\u00e9t\u00e9", "\"q\""]
    ktoks = ["a", 1, None]
    body = {"query": [[1, 0], [0, 1], [1, 1], [0, 0]],
            "key": [[1, 0], [0, 1], [1, 1]], "value": [[1, 2], [3, 4], [5, 6]],
            "tokens": toks, "key_tokens": ktoks}
    j = v1_ok(v1(p, body), "tokens")
    check(j.get("tokens") == toks, "tokens echoed as %r" % j.get("tokens"))
    check(j.get("key_tokens") == ktoks, "key_tokens echoed as %r" %
          j.get("key_tokens"))
    j = v1_ok(v1(p, {"query": [[1, 0]]}), "no tokens")
    check("tokens" not in j and "key_tokens" not in j,
          "tokens present although none were sent")
    expect_error(v1(p, {"query": [[1, 0]], "tokens": "abc"}), 400, "tokens",
                 what="tokens not an array")
    # one label per position: a miscount is the client's mistake
    expect_error(v1(p, dict(body, tokens=toks[:3])), 400,
                 "'tokens' has 3 labels, but 'query' has 4 positions",
                 what="one token short")
    expect_error(v1(p, dict(body, key_tokens=ktoks + ["b"])), 400,
                 "'key_tokens' has 4 labels, but 'key' has 3 positions",
                 what="one key token too many")
    # a batch: one list for all, or one list per batch
    batch = {"query": [[[1, 0], [0, 1]], [[1, 1], [0, 0]]]}
    for t in (["x", "y"], [["a", "b"], ["c", "d"]]):
        j = v1_ok(v1(p, dict(batch, tokens=t)), "batched tokens %r" % (t,))
        check(j.get("tokens") == t, "batched tokens echoed as %r" %
              j.get("tokens"))
    expect_error(v1(p, dict(batch, tokens=[["a", "b"], ["c"]])), 400,
                 "'tokens'[1] has 1 label, but 'query' has 2 positions",
                 what="a short list in a batch")


@test
def v1_typo_is_400():
    p = shared().port
    expect_error(v1(p, {"query": [[1, 2]], "causl": True}), 400, "causl",
                 "causal", what="typo causl")
    expect_error(v1(p, {"query": [[1, 2]], "weights": {
        "w_q": [[1, 0], [0, 1]], "w_k": [[1, 0], [0, 1]],
        "w_v": [[1, 0], [0, 1]], "w_0": [[1, 0], [0, 1]]}}), 400, "w_0",
        what="typo in weights")
    expect_error(v1(p, {"query": [[1, 2]], "model": "nosuchmodel"}), 404,
                 "nosuchmodel", what="unknown v1 model")
    expect_error(v1(p, {"key": [[1, 2]]}), 400, "query",
                 what="missing query")


@test
def v1_weights_multi_head():
    """Identity projections: multi-head attention equals the sliced sdpa."""
    p = shared().port
    rng = random.Random(cfg.seed + 29)
    E, H, Lq = 4, 2, 3
    q = rand_f32(rng, Lq * E)
    eye = [[1.0 if i == j else 0.0 for j in range(E)] for i in range(E)]
    j = v1_ok(v1(p, {"query": nested(q, [Lq, E]), "num_heads": H,
                     "weights": {"w_q": eye, "w_k": eye, "w_v": eye,
                                 "w_o": eye}}), "identity weights")
    out, w = v1_reference(q, q, q, 1, H, Lq, Lq, E // H, E // H)
    assert_close(flatten(j["output"]), out, "identity mha output")
    check(j["shape"]["output"] == [Lq, E], "mha output shape %r" %
          j["shape"]["output"])
    check(numel(j["shape"]["attn_weights"]) == len(w),
          "mha weights shape %r" % j["shape"]["attn_weights"])
    assert_close(flatten(j["attn_weights"]), w, "identity mha weights")
    expect_error(v1(p, {"query": nested(q, [Lq, E]), "num_heads": H,
                        "weights": {"w_q": eye, "w_k": eye, "w_v": eye}}),
                 400, "w_o", what="missing w_o")


if __name__ == "__main__":
    sys.exit(main())
