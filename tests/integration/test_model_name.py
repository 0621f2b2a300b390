#!/usr/bin/env python3
"""Integration tests: model_name (--model-name, ATTND_MODEL_NAME; issue
44), a model of models_dir served under another name, as KServe's
runtimes take --model_name={{.Name}}: metadata, readiness, inference, the
repository index, load, reload and the metrics' labels all say the new
name; the old one is unknown; a name that is ambiguous or taken stops the
start.

Run alone: python3 tests/integration/test_model_name.py --attnd PATH
(the options of run.py; see harness.py and README.md).
"""

import os
import random
import shutil
import sys
import tempfile

from harness import (Server, cfg, check, expect_error, expect_status, main,
                     rand_f32, request, run_attnd, shared, test, v2_in,
                     v2_infer)

NEW = "attnd-demo-isvc"  # an InferenceService's name: dashes


def _models(d, *names):
    """A models folder in d with the files of config/models named."""
    m = os.path.join(d, "models")
    os.mkdir(m)
    for f in names:
        shutil.copy(os.path.join(cfg.models_dir, f), m)
    return m


def _series(port, model):
    """The /metrics lines labelled model=MODEL."""
    r = request(port, "GET", "/metrics")
    expect_status(r, 200, "GET /metrics")
    return [l for l in r.body.decode().splitlines()
            if 'model="%s"' % model in l]


@test
def model_name_renames_the_only_model():
    """--model-name NEW with one model in models_dir: NEW answers its
    metadata, readiness and inference (the same bytes as the demo model
    under its own name, model_name NEW), the index and the metrics say
    NEW, 'demo' is unknown (404; its load says what it is served as), a
    load of NEW and a reload keep it."""
    rng = random.Random(cfg.seed + 44)
    q = rand_f32(rng, 3 * 16)
    ins = [v2_in("query", [1, 3, 16], q)]
    ref = v2_infer(shared().port, "demo", ins)
    expect_status(ref, 200, "demo on the shared server")
    with tempfile.TemporaryDirectory() as d:
        models = _models(d, "demo.json", "demo.safetensors")
        with Server("--models-dir", models, "--model-name", NEW,
                    "--model-control", "explicit", name="model-name") as s:
            p = s.port
            meta = request(p, "GET", "/v2/models/%s" % NEW)
            expect_status(meta, 200, "metadata")
            check(meta.json()["name"] == NEW, "metadata %r" % meta.json())
            r = request(p, "GET", "/v2/models/%s/ready" % NEW)
            expect_status(r, 200, "ready")
            expect_error(request(p, "GET", "/v2/models/demo/ready"), 404,
                         "demo", what="the old name")
            expect_error(v2_infer(p, "demo", ins), 404, "demo",
                         what="inference under the old name")
            got = v2_infer(p, NEW, ins)
            expect_status(got, 200, "inference")
            check(got.json()["model_name"] == NEW, "model_name %r" %
                  got.json().get("model_name"))
            check(got.json()["outputs"] == ref.json()["outputs"],
                  "outputs differ from demo's under its own name")
            idx = request(p, "POST", "/v2/repository/index", b"{}")
            expect_status(idx, 200, "index")
            names = [e["name"] for e in idx.json()]
            check(NEW in names and "demo" not in names, "index %r" % names)
            lines = _series(p, NEW)
            check(any("attnd_inference_requests_total" in l and
                      'outcome="success"' in l and l.endswith(" 1")
                      for l in lines),
                  "no success counted for %s: %r" % (NEW, lines[:5]))
            check(not _series(p, "demo"), "a series labelled demo")
            expect_error(request(p, "POST",
                                 "/v2/repository/models/demo/load", b"{}"),
                         404, "served as '%s'" % NEW, what="load demo")
            expect_status(request(p, "POST", "/v2/repository/models/%s/load"
                                  % NEW, b"{}"), 200, "load NEW")
            rc, out, err = run_attnd("--reload=%d" % s.proc.pid)
            check(rc == 0, "--reload: rc %d err %r" % (rc, err))
            expect_status(request(p, "GET", "/v2/models/%s/ready" % NEW),
                          200, "ready after the reload")
            check("served as '%s'" % NEW in s.log_text(),
                  "no start-up line: %s" % s.log_tail())


@test
def model_name_from_to_with_several_models():
    """ATTND_MODEL_NAME=demo=NEW with two models in models_dir: demo is
    served as NEW, the other under its own name."""
    with tempfile.TemporaryDirectory() as d:
        models = _models(d, "demo.json", "demo.safetensors",
                         "mistral_tiny.json")
        with Server("--models-dir", models, name="model-name-from",
                    env={"ATTND_MODEL_NAME": "demo=" + NEW}) as s:
            for m, st in ((NEW, 200), ("mistral_tiny", 200), ("demo", 404)):
                r = request(s.port, "GET", "/v2/models/%s/ready" % m)
                expect_status(r, st, m)


@test
def model_name_refused_at_start():
    """A model_name that is ambiguous (NEW with two models), a built-in's
    name, another model's name, a FROM no file names or not a name stops
    the start: exit 1, one message naming the setting and why."""
    with tempfile.TemporaryDirectory() as d:
        models = _models(d, "demo.json", "demo.safetensors",
                         "mistral_tiny.json")
        cases = [
            (NEW, "holds 2 (demo, mistral_tiny)"),
            ("demo=sdpa", "'sdpa' is a built-in model"),
            ("kv_attention", "built-in model"),
            ("demo=mistral_tiny", "already names a model 'mistral_tiny'"),
            ("nope=" + NEW, "has \"name\": \"nope\""),
            ("a b", "write NEW or FROM=NEW"),
        ]
        for value, needle in cases:
            rc, out, err = run_attnd("--host", "127.0.0.1", "--port", "0",
                                     "--models-dir", models,
                                     "--model-name", value,
                                     "--log-format", "text")
            check(rc == 1 and "model_name '%s'" % value in err and
                  needle in err,
                  "%r: rc %d err %r" % (value, rc, err[-300:]))
            rc, out, err = run_attnd("--check-config", "--models-dir",
                                     models, "--model-name", value)
            check(rc == 1 and needle in err,
                  "--check-config %r: rc %d err %r" % (value, rc, err[-300:]))


if __name__ == "__main__":
    sys.exit(main())
