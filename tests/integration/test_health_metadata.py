#!/usr/bin/env python3
"""Integration tests: health and metadata (KServe v2 health, server and
model metadata and readiness, /v1/models, HEAD on every GET route).

Run alone: python3 tests/integration/test_health_metadata.py --attnd PATH
(the options of run.py; see harness.py and README.md).
"""

import sys

from harness import (check, expect_error, expect_status, main, request, shared,
                     test, v2_infer)


@test
def health_live():
    p = shared().port
    r = request(p, "GET", "/v2/health/live")
    expect_status(r, 200, "GET /v2/health/live")
    check(r.json().get("live") is True, "live: %r" % r)
    r = request(p, "HEAD", "/v2/health/live")
    expect_status(r, 200, "HEAD /v2/health/live")


@test
def head_on_every_get_route():
    """HEAD is answered wherever GET is: same status and headers, the
    GET body's length in Content-Length, no body."""
    p = shared().port
    for path in ["/", "/v2", "/v2/health/live", "/v2/health/ready",
                 "/v1/models", "/v2/models/sdpa", "/v2/models/sdpa/ready",
                 "/v2/models/mha/versions/1"]:
        g = request(p, "GET", path)
        h = request(p, "HEAD", path)
        expect_status(g, 200, "GET " + path)
        expect_status(h, 200, "HEAD " + path)
        check(h.body == b"", "HEAD %s sent a body: %r" % (path, h.body[:80]))
        check(h.header("content-length") == str(len(g.body)),
              "HEAD %s: Content-Length %r, GET body %d bytes" %
              (path, h.header("content-length"), len(g.body)))
        check(h.header("content-type") == g.header("content-type"),
              "HEAD %s: Content-Type %r vs GET's %r" %
              (path, h.header("content-type"), g.header("content-type")))
    r = request(p, "PUT", "/v2/models/sdpa")
    expect_error(r, 405, "PUT", what="PUT /v2/models/sdpa")
    check(r.header("allow") == "GET, HEAD", "Allow: %r" % r.header("allow"))


@test
def health_ready():
    r = request(shared().port, "GET", "/v2/health/ready")
    expect_status(r, 200, "GET /v2/health/ready")
    check(r.json().get("ready") is True, "ready: %r" % r)


@test
def server_metadata():
    r = request(shared().port, "GET", "/v2")
    expect_status(r, 200, "GET /v2")
    j = r.json()
    check(j.get("name") == "attnd", "name: %r" % j)
    check(isinstance(j.get("version"), str) and j["version"],
          "version: %r" % j)
    check(isinstance(j.get("extensions"), list) and
          "binary_tensor_data" in j["extensions"], "extensions: %r" % j)


def _check_io(meta, model, section, want):
    """want: {name: rank or None}; every entry must exist, be described
    with a datatype and a shape of -1 or positive ints."""
    ios = meta.get(section)
    check(isinstance(ios, list) and ios, "%s %s: %r" % (model, section, ios))
    by_name = {}
    for t in ios:
        check(set(t) == {"name", "datatype", "shape"},
              "%s %s entry keys %r" % (model, section, sorted(t)))
        check(t["datatype"] in ("FP32", "BOOL", "INT32", "INT64", "FP16"),
              "%s %s %s datatype %r" % (model, section, t["name"],
                                        t["datatype"]))
        check(all(isinstance(d, int) and (d == -1 or d > 0)
                  for d in t["shape"]),
              "%s %s %s shape %r" % (model, section, t["name"], t["shape"]))
        by_name[t["name"]] = t
    for name, rank in want.items():
        check(name in by_name, "%s %s lacks %s: %r" %
              (model, section, name, sorted(by_name)))
        if rank is not None:
            check(len(by_name[name]["shape"]) == rank,
                  "%s %s %s shape %r, expected rank %d" %
                  (model, section, name, by_name[name]["shape"], rank))
    return by_name


@test
def model_metadata():
    p = shared().port
    for m in ("sdpa", "mha", "demo"):
        r = request(p, "GET", "/v2/models/%s" % m)
        expect_status(r, 200, "GET /v2/models/%s" % m)
        meta = r.json()
        r1 = request(p, "GET", "/v2/models/%s/versions/1" % m)
        expect_status(r1, 200, "GET /v2/models/%s/versions/1" % m)
        check(r1.json() == meta, "%s: versions/1 metadata differs" % m)
        check(meta.get("name") == m, "%s: name %r" % (m, meta.get("name")))
        check("1" in (meta.get("versions") or []), "%s: versions %r" %
              (m, meta.get("versions")))
        check(isinstance(meta.get("platform"), str), "%s: platform" % m)
        want_in = {"query": None, "key": None, "value": None,
                   "attn_mask": None, "key_padding_mask": None}
        if m == "mha":
            want_in.update({w: 2 for w in ("w_q", "w_k", "w_v", "w_o")})
            want_in.update({b: 1 for b in ("b_q", "b_k", "b_v", "b_o")})
        ins = _check_io(meta, m, "inputs", want_in)
        outs = _check_io(meta, m, "outputs",
                         {"attn_output": None, "attn_weights": None})
        for n in ("query", "key", "value"):
            check(ins[n]["datatype"] == "FP32", "%s %s datatype %r" %
                  (m, n, ins[n]["datatype"]))
        for n in ("attn_output", "attn_weights"):
            check(outs[n]["datatype"] == "FP32", "%s %s datatype %r" %
                  (m, n, outs[n]["datatype"]))
        qs = ins["query"]["shape"]
        if m == "sdpa":
            check(qs == [-1, -1, -1, -1], "sdpa query shape %r" % qs)
        elif m == "mha":
            check(qs == [-1, -1, -1], "mha query shape %r" % qs)
            check(ins["w_q"]["shape"] == [-1, -1], "mha w_q shape %r" %
                  ins["w_q"]["shape"])
        else:  # demo: embed_dim 16 is fixed, batch and length are not
            check(qs == [-1, -1, 16], "demo query shape %r" % qs)
            check(outs["attn_output"]["shape"] == [-1, -1, 16],
                  "demo attn_output shape %r" % outs["attn_output"]["shape"])
    r = request(p, "GET", "/v2/models/sdpa/versions/2")
    expect_error(r, 404, "version", what="GET /v2/models/sdpa/versions/2")


def _small_inputs(info):
    """The smallest valid v2 inputs for a model of /v1/models (info)."""
    def t(name, shape):
        n = 1
        for d in shape:
            n *= d
        return {"name": name, "datatype": "FP32", "shape": shape,
                "data": [0.25 * ((i % 7) - 3) for i in range(n)]}
    if info["kind"] == "sdpa":
        return [t(n, [1, 1, 2, 4]) for n in ("query", "key", "value")]
    e = info.get("embed_dim") or 4
    ins = [t(n, [1, 2, e]) for n in ("query", "key", "value")]
    if info["kind"] == "mha":
        ins += [t(w, [e, e]) for w in ("w_q", "w_k", "w_v", "w_o")]
    return ins


def _v2_fixed(fixed):
    """/v1/models' "fixed" object, as v2 parameters spell the settings."""
    want = {}
    for k, v in (fixed or {}).items():
        if k == "window":
            want["window_left"], want["window_right"] = v
        elif k == "rotary" and isinstance(v, dict):
            want["rotary"] = True
            want.update({"rotary_" + rk: rv for rk, rv in v.items()})
        elif k == "alibi_slopes":
            want["alibi"] = True
        else:
            want[k] = v
    return want


@test
def model_metadata_parameters():
    """Each model's v2 metadata "parameters" (the protocol's $parameters,
    scalars only) lists the request parameters the model takes, and the
    settings a resident model fixes as v2 spells them: every listed name is
    recognised by an infer request (a wrong value is refused for its value,
    not as unknown), an unlisted one is refused as unknown, and the fixed
    settings agree with /v1/models."""
    p = shared().port
    r = request(p, "GET", "/v1/models")
    expect_status(r, 200, "GET /v1/models")
    for info in r.json()["models"]:
        m = info["name"]
        if info["kind"] == "kv_attention":
            continue  # sessions' steps: test_sessions.py
        r = request(p, "GET", "/v2/models/%s" % m)
        expect_status(r, 200, "GET /v2/models/%s" % m)
        params = r.json().get("parameters")
        check(isinstance(params, dict), "%s: no metadata parameters" % m)
        for k, v in params.items():
            check(isinstance(v, (str, int, float, bool)),
                  "%s: parameter %s is not a scalar: %r" % (m, k, v))
        names = params["request_parameters"].split(", ")
        check(("num_heads" in names) == (info["kind"] != "sdpa"),
              "%s (%s): num_heads listed %s" % (m, info["kind"], names))
        ins = _small_inputs(info)
        base = {"num_heads": 1} if info["kind"] == "mha" else {}
        expect_status(v2_infer(p, m, ins, params=base), 200,
                      "%s: small inputs" % m)
        for n in names:
            r = v2_infer(p, m, ins, params=dict(base, **{n: "not-a-value"}))
            expect_status(r, 400, "%s: parameter %s = a string" % (m, n))
            check("unknown parameter" not in r.json()["error"],
                  "%s lists %s but refuses it as unknown: %s" %
                  (m, n, r.json()["error"]))
        expect_error(v2_infer(p, m, ins, params=dict(base, no_such_one=1)), 400,
                     "unknown parameter", what="%s: an unlisted name" % m)
        check(params.get("precision") == info.get("precision"),
              "%s: metadata precision %r, /v1/models %r" %
              (m, params.get("precision"), info.get("precision")))
        fixed = {k: v for k, v in params.items()
                 if k not in ("request_parameters", "precision")}
        check(fixed == _v2_fixed(info.get("fixed")),
              "%s: metadata fixes %r, /v1/models %r" %
              (m, fixed, info.get("fixed")))


@test
def model_ready():
    p = shared().port
    for m in ("sdpa", "mha", "demo"):
        r = request(p, "GET", "/v2/models/%s/ready" % m)
        expect_status(r, 200, "GET /v2/models/%s/ready" % m)
        j = r.json()
        check(j.get("ready") is True and j.get("name") == m,
              "%s ready: %r" % (m, j))
        r = request(p, "GET", "/v2/models/%s/versions/1/ready" % m)
        expect_status(r, 200, "GET /v2/models/%s/versions/1/ready" % m)
    r = request(p, "GET", "/v2/models/nosuchmodel/ready")
    expect_error(r, 404, "nosuchmodel", what="ready of an unknown model")


@test
def v1_models_list():
    r = request(shared().port, "GET", "/v1/models")
    expect_status(r, 200, "GET /v1/models")
    models = {m["name"]: m for m in r.json().get("models", [])}
    for m in ("sdpa", "mha", "demo"):
        check(m in models, "/v1/models lacks %s: %r" % (m, sorted(models)))
    d = models["demo"]
    check(d.get("kind") == "resident" and d.get("embed_dim") == 16 and
          d.get("num_heads") == 4, "demo entry: %r" % d)
    check(models["sdpa"].get("kind") == "sdpa" and
          models["mha"].get("kind") == "mha", "kinds: %r" % models)


if __name__ == "__main__":
    sys.exit(main())
