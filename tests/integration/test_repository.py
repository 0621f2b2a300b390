#!/usr/bin/env python3
"""Integration tests: Triton's model repository extension
(POST /v2/repository/index, /v2/repository/models/{m}/load and /unload)
and SIGHUP's reload of every model file: a new or changed file is loaded
without a restart, requests in flight finish on the weights they started
with, a file that fails leaves the old model serving, built-ins cannot be
unloaded.  Load and unload need model_control "explicit" (CONTROL; the
default, "none", answers 403) and, with API keys on, an admin key.

Run alone: python3 tests/integration/test_repository.py --attnd PATH
"""

import array
import json
import os
import signal
import sys
import tempfile
import time

from harness import (Pending, Server, check, decode_v2, expect_error,
                     expect_status, main, request, test, v2_binary, wait_log)

E, H = 64, 4  # the resident model of these tests
CONTROL = ("--model-control", "explicit")  # load and unload over HTTP


def model_file(d, name="rep", seed=1, fname=None, **extra):
    m = {"name": name, "embed_dim": E, "num_heads": H, "seed": seed}
    m.update(extra)
    m = {k: v for k, v in m.items() if v is not None}
    with open(os.path.join(d, fname or name + ".json"), "w") as f:
        json.dump(m, f)


def query_body(L, e=E):
    """A v2 binary request of a [1, L, e] query (self-attention), its answer
    binary, without the weights."""
    a = array.array("f", [((i * 37) % 101 - 50) / 500.0 for i in range(L * e)])
    if sys.byteorder != "little":
        a.byteswap()
    return v2_binary([{"name": "query", "datatype": "FP32",
                       "shape": [1, L, e], "raw": a.tobytes()}],
                     params={"need_weights": False,
                             "binary_data_output": True})


def infer(port, model, body, hdrs, what):
    r = request(port, "POST", "/v2/models/%s/infer" % model, body,
                headers=hdrs, timeout=120)
    return decode_v2(r, what)[1]["attn_output"]["data"]


def index(port, body=b""):
    r = request(port, "POST", "/v2/repository/index", body)
    expect_status(r, 200, "index")
    rows = json.loads(r.body)
    check(isinstance(rows, list), "index is not a list: %r" % rows)
    return {row["name"]: row for row in rows}


def post(port, path, body=b""):
    return request(port, "POST", path, body)


@test
def repository_index_load_unload():
    """The index lists every model (READY, or UNAVAILABLE with a reason);
    an unload stops a model being found anywhere, a load brings it back;
    refusals say why: a built-in (400), no file names the model (404),
    Triton's config override (400), a wrong body (400), GET (405)."""
    with tempfile.TemporaryDirectory() as d:
        model_file(d)
        body, hdrs = query_body(8)
        with Server("--models-dir", d, *CONTROL, name="repo") as s:
            rows = index(s.port)
            check(sorted(rows) == ["kv_attention", "mha", "rep", "sdpa"],
                  "index %r" % rows)
            check(all(r["state"] == "READY" and r["version"] == "1"
                      for r in rows.values()), "index %r" % rows)
            before = infer(s.port, "rep", body, hdrs, "before the unload")

            r = post(s.port, "/v2/repository/models/rep/unload")
            expect_status(r, 200, "unload")
            check(json.loads(r.body) == {"name": "rep", "state": "UNAVAILABLE",
                                         "reason": "unloaded"},
                  "unload answer %r" % r.body)
            r = request(s.port, "POST", "/v2/models/rep/infer", body,
                        headers=hdrs)
            expect_error(r, 404, "'rep' is not loaded", "/load")
            expect_error(request(s.port, "GET", "/v2/models/rep"), 404,
                         "not loaded")
            names = [m["name"] for m in json.loads(
                request(s.port, "GET", "/v1/models").body)["models"]]
            check("rep" not in names, "/v1/models after unload: %r" % names)
            stats = json.loads(request(s.port, "GET", "/v2/models/stats").body)
            check("rep" not in [m["name"] for m in stats["model_stats"]],
                  "stats after unload: %r" % stats)
            rows = index(s.port)
            check(rows["rep"] == {"name": "rep", "state": "UNAVAILABLE",
                                  "reason": "unloaded"}, "index %r" % rows)
            check(sorted(index(s.port, b'{"ready": true}')) ==
                  ["kv_attention", "mha", "sdpa"],
                  "ready index")
            expect_status(post(s.port, "/v2/repository/models/rep/unload"),
                          200, "unload again")

            r = post(s.port, "/v2/repository/models/rep/load", b"{}")
            expect_status(r, 200, "load")
            check(json.loads(r.body) == {"name": "rep", "version": "1",
                                         "state": "READY"},
                  "load answer %r" % r.body)
            check(infer(s.port, "rep", body, hdrs, "after the load") == before,
                  "the reloaded model answers differently")

            expect_error(post(s.port, "/v2/repository/models/sdpa/unload"),
                         400, "'sdpa' is built in")
            expect_status(post(s.port, "/v2/repository/models/mha/load"), 200,
                          "load of a built-in: nothing to do")
            expect_error(post(s.port, "/v2/repository/models/nope/load"), 404,
                         "no model file", '"name": "nope"')
            expect_error(post(s.port, "/v2/repository/models/nope/unload"),
                         404, "unknown model 'nope'")
            expect_error(post(s.port, "/v2/repository/models/rep/load",
                              b'{"parameters": {"config": "{}"}}'), 400,
                         "'config' is not supported")
            expect_error(post(s.port, "/v2/repository/models/rep/unload",
                              b'{"parameters": {"cascade": true}}'), 400,
                         "unknown key 'cascade'")
            expect_error(post(s.port, "/v2/repository/index", b"[1]"), 400,
                         "must be a JSON object")
            expect_error(post(s.port, "/v2/repository/index",
                              b'{"ready": "yes"}'), 400,
                         "'ready' must be true or false")
            expect_error(post(s.port, "/v2/repository/models/rep/reload"),
                         404, "no route")
            expect_error(request(s.port, "GET", "/v2/repository/index"), 405,
                         "POST")


@test
def repository_load_new_and_changed():
    """A file added while serving is listed as not loaded, then loaded
    with its own metrics and statistics; a changed file's load swaps the
    weights; a file that fails to load leaves the old model serving."""
    with tempfile.TemporaryDirectory() as d:
        model_file(d)
        body, hdrs = query_body(8)
        with Server("--models-dir", d, *CONTROL, name="repo-new") as s:
            one = infer(s.port, "rep", body, hdrs, "seed 1")
            model_file(d, name="fresh", seed=1)
            check(index(s.port)["fresh"] == {"name": "fresh",
                                            "state": "UNAVAILABLE",
                                            "reason": "not loaded"},
                  "index before the load")
            expect_status(post(s.port, "/v2/repository/models/fresh/load"),
                          200, "load of a new file")
            check(infer(s.port, "fresh", body, hdrs, "fresh") == one,
                  "same seed, different answer")
            stats = json.loads(request(s.port, "GET",
                                       "/v2/models/fresh/stats").body)
            st = stats["model_stats"][0]
            check(st["name"] == "fresh" and st["inference_count"] == 1,
                  "fresh's statistics %r" % st)
            metrics = request(s.port, "GET", "/metrics").body.decode()
            want = ('attnd_inference_requests_total{model="fresh",'
                    'protocol="v2",outcome="success"} 1')
            check(want in metrics, "no %r in /metrics" % want)

            model_file(d, seed=2)
            expect_status(post(s.port, "/v2/repository/models/rep/load"), 200,
                          "load of a changed file")
            two = infer(s.port, "rep", body, hdrs, "seed 2")
            check(two != one, "seed 2 answers as seed 1 did")

            with open(os.path.join(d, "rep.json"), "w") as f:
                f.write('{"name": "rep", "embed_dim": 64, "num_heads": 3, '
                        '"seed": 1}')
            expect_error(post(s.port, "/v2/repository/models/rep/load"), 400,
                         "rep.json", "divisible")
            check(infer(s.port, "rep", body, hdrs, "after a failed load") ==
                  two, "a failed load changed the model")
            check(index(s.port)["rep"]["state"] == "READY", "index after a "
                  "failed load")
            model_file(d, name="rep", fname="twin.json")
            expect_error(post(s.port, "/v2/repository/models/rep/load"), 400,
                         "named by two files")


@test
def repository_reload_in_flight():
    """A request running when its model is reloaded finishes on the
    weights it started with, bit for bit; the next one gets the new ones.
    Two workers: the load runs beside the request."""
    with tempfile.TemporaryDirectory() as d:
        model_file(d, seed=1, embed_dim=256)
        with Server("--models-dir", d, *CONTROL, "--workers", "2",
                    "--blas-threads-per-worker", "1", name="repo-flight") as s:
            L = 1024
            while True:  # long enough to be running while the load runs
                body, hdrs = query_body(L, 256)
                t0 = time.monotonic()
                old = infer(s.port, "rep", body, hdrs, "seed 1, L %d" % L)
                dt = time.monotonic() - t0
                if dt >= 0.6 or L >= 8192:
                    break
                L *= 2
            slow = Pending(s.port, "/v2/models/rep/infer", body, hdrs)
            try:
                time.sleep(min(0.2, dt / 4))
                model_file(d, seed=2, embed_dim=256)
                expect_status(post(s.port, "/v2/repository/models/rep/load"),
                              200, "load while a request runs")
                check(not slow.answered(), "the request (%.2f s alone) ended "
                      "before the load did" % dt)
                got = decode_v2(slow.response(), "in flight")[1]
            finally:
                slow.close()
            check(got["attn_output"]["data"] == old, "the request in flight "
                  "did not finish on the weights it started with")
            new = infer(s.port, "rep", body, hdrs, "seed 2")
            check(new != old, "the load did not change the weights")


@test
def repository_loads_under_traffic():
    """Loads and unloads back to back while requests run on two other
    connections: every request answers 200 with the output of one of the
    two weight sets, or 404 'not loaded' while unloaded; nothing else
    (run under ASan, a freed model in use would be caught)."""
    import threading
    with tempfile.TemporaryDirectory() as d:
        model_file(d, seed=1)
        body, hdrs = query_body(16)
        with Server("--models-dir", d, *CONTROL, "--workers", "2",
                    name="repo-traffic") as s:
            outs = [infer(s.port, "rep", body, hdrs, "seed 1")]
            model_file(d, seed=2)
            expect_status(post(s.port, "/v2/repository/models/rep/load"), 200,
                          "seed 2")
            outs.append(infer(s.port, "rep", body, hdrs, "seed 2"))
            bad, counts = [], {"ok": 0, "404": 0}
            stop = time.monotonic() + 1.5

            def traffic():
                while time.monotonic() < stop and len(bad) < 5:
                    r = request(s.port, "POST", "/v2/models/rep/infer", body,
                                headers=hdrs)
                    if r.status == 404 and b"not loaded" in r.body:
                        counts["404"] += 1
                    elif r.status != 200:
                        bad.append((r.status, r.body[:200]))
                    elif decode_v2(r)[1]["attn_output"]["data"] in outs:
                        counts["ok"] += 1
                    else:
                        bad.append("an output of neither weight set")

            threads = [threading.Thread(target=traffic) for _ in range(2)]
            for t in threads:
                t.start()
            ops = 0
            while time.monotonic() < stop and ops < 2000:
                model_file(d, seed=1 + ops % 2)
                op = "unload" if ops % 5 == 4 else "load"
                r = post(s.port, "/v2/repository/models/rep/" + op)
                if r.status != 200:
                    bad.append((op, r.status, r.body[:200]))
                ops += 1
            for t in threads:
                t.join(30)
            check(not bad, "under traffic: %r" % bad[:5])
            check(counts["ok"] > 0 and ops > 10, "too little happened: %d "
                  "loads, %r" % (ops, counts))


@test
def repository_sighup_reloads_all():
    """SIGHUP loads every model file again: a changed one, a new one; a
    removed file's model is unloaded; a broken file keeps its model
    serving and is logged."""
    with tempfile.TemporaryDirectory() as d:
        model_file(d, seed=1)
        model_file(d, name="gone", seed=3)
        body, hdrs = query_body(8)
        with Server("--models-dir", d, name="repo-hup") as s:
            one = infer(s.port, "rep", body, hdrs, "seed 1")
            model_file(d, seed=2)
            model_file(d, name="added", seed=1)
            os.unlink(os.path.join(d, "gone.json"))
            s.signal(signal.SIGHUP)
            wait_log(s, lambda l: "model 'gone' file removed" in
                     l.get("msg", ""), "for the removed file", 10)
            two = infer(s.port, "rep", body, hdrs, "after SIGHUP")
            check(two != one, "SIGHUP did not reload the changed file")
            check(infer(s.port, "added", body, hdrs, "added") == one,
                  "the added file's model")
            rows = index(s.port)
            check(rows["gone"]["state"] == "UNAVAILABLE" and
                  "removed" in rows["gone"]["reason"], "index %r" % rows)

            with open(os.path.join(d, "rep.json"), "w") as f:
                f.write('{"name": "rep", "embed_dim": 64, "num_heads": 4, '
                        '"seed": 1, "colour": 1}')
            s.signal(signal.SIGHUP)
            line = wait_log(s, lambda l: "keeps what it served" in
                            l.get("msg", ""), "for the broken file")
            check("unknown key 'colour'" in line["msg"] and
                  line.get("level") == "error", "log line %r" % line)
            check(infer(s.port, "rep", body, hdrs, "after a broken file") ==
                  two, "a broken file changed the model")


def _no_path(msg, what, *paths):
    """msg names none of the server's paths."""
    for p in paths:
        check(p not in msg, "%s shows the server path %r: %r" % (what, p, msg))


@test
def repository_files_not_regular_at_start():
    """A *.json that is no regular file (a FIFO, a symlink to one, a
    folder) in models_dir: attnd starts and serves anyway (it waited for a
    FIFO's writer for ever); the index lists each, named after its file,
    as UNAVAILABLE with the reason naming it relative to the models
    folder; a load of it is a prompt 400 saying the same; the start-up log
    warns with the folder's path."""
    with tempfile.TemporaryDirectory() as d:
        model_file(d)
        os.mkfifo(os.path.join(d, "pipe.json"))
        os.symlink(os.path.join(d, "pipe.json"), os.path.join(d, "link.json"))
        os.mkdir(os.path.join(d, "folder.json"))
        body, hdrs = query_body(8)
        with Server("--models-dir", d, *CONTROL,
                    name="repo-fifo-start") as s:
            infer(s.port, "rep", body, hdrs, "beside a FIFO")
            rows = index(s.port)
            want = {"pipe": "models/pipe.json: not a regular file (a FIFO)",
                    "link": "models/link.json: not a regular file (a FIFO)",
                    "folder": "models/folder.json: not a regular file (a "
                              "directory)"}
            for name, reason in want.items():
                check(rows.get(name) == {"name": name, "state": "UNAVAILABLE",
                                         "reason": reason},
                      "index row %s: %r" % (name, rows.get(name)))
            check(rows["rep"]["state"] == "READY", "index %r" % rows)
            r = request(s.port, "POST", "/v2/repository/models/pipe/load",
                        timeout=10)
            msg = expect_error(r, 400, want["pipe"], what="load of the FIFO")
            _no_path(msg, "load of the FIFO", d)
            warn = [l["msg"] for l in s.log_json()
                    if l.get("level") == "warn" and "skipped" in
                    l.get("msg", "") and "pipe.json" in l["msg"]]
            check(len(warn) == 1 and d in warn[0] and "FIFO" in warn[0],
                  "start-up warning for the FIFO: %r" % warn)


@test
def repository_sighup_fifo_then_sigterm():
    """SIGHUP with a FIFO named *.json in models_dir: the reload logs it as
    not a regular file (with its path) and goes on; SIGTERM then ends
    attnd (exit 0) promptly (it hung in the FIFO's open, and SIGTERM was
    never taken)."""
    with tempfile.TemporaryDirectory() as d:
        model_file(d)
        body, hdrs = query_body(8)
        with Server("--models-dir", d, name="repo-fifo-hup") as s:
            fifo = os.path.join(d, "pipe.json")
            os.mkfifo(fifo)
            s.signal(signal.SIGHUP)
            line = wait_log(s, lambda l: "pipe.json" in l.get("msg", ""),
                            "for the FIFO", 10)
            check(fifo + ": not a regular file (a FIFO)" in line["msg"] and
                  line.get("level") == "error", "log line %r" % line)
            infer(s.port, "rep", body, hdrs, "after SIGHUP")
            s.signal(signal.SIGTERM)
            rc = s.wait(10)
            check(rc == 0, "exit code %d after SIGTERM: %s" %
                  (rc, s.log_tail()))


@test
def repository_weights_not_regular_files():
    """A model whose "weights" is a FIFO, a symlink to one, a folder or
    /dev/zero (unbounded reads): its load answers 400 at once naming the
    file (relative to the models folder; /dev/zero only through the model
    file), and the server goes on serving.  A FIFO's load never answered
    and held a worker for good."""
    with tempfile.TemporaryDirectory() as d:
        model_file(d)
        body, hdrs = query_body(8)
        with Server("--models-dir", d, *CONTROL,
                    name="repo-fifo-weights") as s:
            os.mkfifo(os.path.join(d, "w.fifo"))
            os.symlink("w.fifo", os.path.join(d, "link.safetensors"))
            os.mkdir(os.path.join(d, "sub"))
            cases = [("wfifo", "w.fifo", "models/w.fifo: not a regular file "
                      "(a FIFO)"),
                     ("wlink", "link.safetensors", "models/link.safetensors: "
                      "not a regular file (a FIFO)"),
                     ("wdir", "sub", "models/sub: not a regular file (a "
                      "directory)"),
                     ("wdev", "/dev/zero", "models/wdev.json's weights: not "
                      "a regular file (a character device)")]
            for name, weights, reason in cases:
                with open(os.path.join(d, name + ".json"), "w") as f:
                    json.dump({"name": name, "embed_dim": E, "num_heads": H,
                               "weights": weights}, f)
                r = request(s.port, "POST",
                            "/v2/repository/models/%s/load" % name,
                            timeout=10)
                msg = expect_error(r, 400, reason, what="load of " + name)
                _no_path(msg, "load of " + name, d)
            infer(s.port, "rep", body, hdrs, "after the refused loads")


@test
def repository_messages_name_no_server_path():
    """What a client reads of a failed load or in the index names files
    relative to the models folder ("models/x.json") and shows neither
    the folder's path nor a file's bytes: weights that name some text file
    outside (here a copy of the start of /etc/passwd) were answered with
    its path and its first 8 bytes as a header length.  The log line of
    the failed load has the file's path."""
    text = b"root:x:0:0:root:/root:/bin/bash\ndaemon:x:1:1::/:/bin/sh\n"
    with tempfile.TemporaryDirectory() as d, \
            tempfile.TemporaryDirectory() as outside:
        passwd = os.path.join(outside, "passwd")
        with open(passwd, "wb") as f:
            f.write(text)
        model_file(d)
        with Server("--models-dir", d, *CONTROL, name="repo-paths") as s:
            with open(os.path.join(d, "leak.json"), "w") as f:
                json.dump({"name": "leak", "embed_dim": E, "num_heads": H,
                           "weights": passwd}, f)
            r = post(s.port, "/v2/repository/models/leak/load")
            msg = expect_error(r, 400, "models/leak.json's weights",
                               "not a safetensors file", what="leak")
            _no_path(msg, "load of leak", d, outside)
            for b in (b"root:x:0", b"root"):
                check(b.decode() not in msg, "the file's bytes: %r" % msg)
            n = int.from_bytes(text[:8], "little")
            for v in (str(n), "%x" % n):
                check(v not in msg, "the bytes as a number: %r" % msg)
            line = wait_log(s, lambda l: "load of model 'leak' failed" in
                            l.get("msg", ""), "for the failed load")
            check(passwd + ": not a safetensors file" in line["msg"],
                  "the log line has no path: %r" % line)
            check("root" not in line["msg"] and str(n) not in line["msg"],
                  "the log line shows the bytes: %r" % line)
            # a loaded model's failed load is its index row's reason
            expect_status(post(s.port, "/v2/repository/models/rep/unload"),
                          200, "unload")
            model_file(d, weights=passwd, seed=None)
            msg = expect_error(post(s.port, "/v2/repository/models/rep/load"),
                               400, "models/rep.json's weights", what="rep")
            row = index(s.port)["rep"]
            check(row["reason"] == msg, "index row %r, load %r" % (row, msg))

            with open(os.path.join(d, "bad.json"), "w") as f:
                f.write('{"name": "bad", "embed_dim": 64, "num_heads": 3, '
                        '"seed": 1}')
            msg = expect_error(post(s.port, "/v2/repository/models/bad/load"),
                               400, "models/bad.json: embed_dim 64 is not "
                               "divisible", what="bad")
            _no_path(msg, "load of bad", d)
            with open(os.path.join(d, "gone.json"), "w") as f:
                json.dump({"name": "gone", "embed_dim": E, "num_heads": H,
                           "weights": "gone.safetensors"}, f)
            msg = expect_error(post(s.port,
                                    "/v2/repository/models/gone/load"), 400,
                               "models/gone.safetensors: cannot open",
                               what="gone")
            _no_path(msg, "load of gone", d)
            msg = expect_error(post(s.port, "/v2/repository/models/nope/load"),
                               404, "no model file", what="nope")
            _no_path(msg, "load of nope", d)
            with open(os.path.join(d, "broken.json"), "w") as f:
                f.write('{"name": ')
            rows = index(s.port)
            for name, row in rows.items():
                _no_path(row.get("reason", ""), "index row " + name, d,
                         outside)
            check(rows["broken"]["reason"] == "models/broken.json: invalid "
                  "JSON", "index %r" % rows)


@test
def repository_model_control_none():
    """model_control "none" (the default): load and unload answer 403
    naming the setting, and change nothing; the index answers; SIGHUP
    still reloads the files."""
    with tempfile.TemporaryDirectory() as d:
        model_file(d, seed=1)
        body, hdrs = query_body(8)
        with Server("--models-dir", d, name="repo-none") as s:
            one = infer(s.port, "rep", body, hdrs, "seed 1")
            for op in ("load", "unload"):
                expect_error(post(s.port, "/v2/repository/models/rep/" + op,
                                  b"{}"), 403,
                             'model_control is "none": this server does not '
                             "load or unload models over HTTP",
                             "--model-control explicit", what=op)
            check(index(s.port)["rep"]["state"] == "READY",
                  "rep after the refused unload")
            check(infer(s.port, "rep", body, hdrs, "after the 403s") == one,
                  "a refused load changed the model")
            model_file(d, seed=2)
            s.signal(signal.SIGHUP)
            wait_log(s, lambda l: "model 'rep'" in l.get("msg", "") and
                     "SIGHUP" in l.get("msg", ""), "the reload of rep", 10)
            check(infer(s.port, "rep", body, hdrs, "after SIGHUP") != one,
                  "SIGHUP did not reload under model_control none")


def _keyed(port, op, key, body=b"{}"):
    return request(port, "POST", "/v2/repository/models/rep/" + op, body,
                   headers={"X-Api-Key": key} if key else None)


@test
def repository_admin_keys():
    """With keys on, load and unload need an admin key: none or a wrong
    one is a 401, an inference key a 403 naming the admin settings; an
    admin key (from admin_api_keys_file or ATTND_ADMIN_API_KEY) loads and
    is accepted where an inference key is.  SIGHUP re-reads
    admin_api_keys_file: a removed admin key is refused at once, a new one
    works."""
    with tempfile.TemporaryDirectory() as d:
        model_file(d, seed=1)
        keys, admins = os.path.join(d, "keys"), os.path.join(d, "admins")
        with open(keys, "w") as f:
            f.write("user-key\n")
        with open(admins, "w") as f:
            f.write("# admins\nboss-1\n")
        body, hdrs = query_body(8)
        env = dict(os.environ, ATTND_ADMIN_API_KEY="boss-env")
        with Server("--models-dir", d, *CONTROL, "--api-keys-file", keys,
                    "--admin-api-keys-file", admins, env=env,
                    name="repo-admin") as s:
            wait_log(s, lambda l: "1 API keys (from api_keys_file), 2 admin "
                     "keys" in l.get("msg", ""), "the access line")
            for op in ("load", "unload"):
                expect_error(_keyed(s.port, op, None), 401,
                             "needs an API key", what=op + " without a key")
                expect_error(_keyed(s.port, op, "nope"), 401, "not valid",
                             what=op + " with a wrong key")
                expect_error(_keyed(s.port, op, "user-key"), 403,
                             "needs an admin key (admin_api_keys_file / "
                             "ATTND_ADMIN_API_KEY)",
                             what=op + " with an inference key")
            r = request(s.port, "POST", "/v2/repository/index", b"",
                        headers={"X-Api-Key": "user-key"})
            expect_status(r, 200, "the index with an inference key")
            expect_status(_keyed(s.port, "unload", "boss-1"), 200,
                          "unload with an admin key")
            expect_status(_keyed(s.port, "load", "boss-env"), 200,
                          "load with ATTND_ADMIN_API_KEY")
            for key in ("user-key", "boss-1", "boss-env"):
                r = request(s.port, "POST", "/v2/models/rep/infer", body,
                            headers=dict(hdrs, Authorization="Bearer " + key))
                expect_status(r, 200, "infer with %s" % key)
            # SIGHUP: boss-1 out, boss-2 in (the variable's key stays)
            with open(admins, "w") as f:
                f.write("boss-2\n")
            s.signal(signal.SIGHUP)
            wait_log(s, lambda l: "2 admin keys in force" in
                     l.get("msg", ""), "the admin keys' reload", 10)
            expect_error(_keyed(s.port, "load", "boss-1"), 401, "not valid",
                         what="load with a removed admin key")
            expect_status(_keyed(s.port, "load", "boss-2"), 200,
                          "load with the new admin key")
            # a file that no longer reads keeps the admin keys in force
            with open(admins, "w") as f:
                f.write("two words\n")
            s.signal(signal.SIGHUP)
            line = wait_log(s, lambda l: "admin keys in force stay" in
                            l.get("msg", ""), "the failed reload", 10)
            check("admin_api_keys_file" in line["msg"] and
                  "boss" not in line["msg"], "log line %r" % line)
            expect_status(_keyed(s.port, "unload", "boss-2"), 200,
                          "unload after a failed reload")


@test
def repository_admin_keys_alone_or_none():
    """Admin keys alone turn keys on: every keyed route needs one.
    Inference keys alone: nobody may load or unload over HTTP."""
    with tempfile.TemporaryDirectory() as d:
        model_file(d, seed=1)
        with Server("--models-dir", d, *CONTROL,
                    env=dict(os.environ, ATTND_ADMIN_API_KEY="boss"),
                    name="repo-admin-only") as s:
            expect_status(request(s.port, "GET", "/v1/models"), 401,
                          "/v1/models without a key")
            expect_status(request(s.port, "GET", "/v1/models",
                                  headers={"X-Api-Key": "boss"}), 200,
                          "/v1/models with the admin key")
            expect_status(request(s.port, "GET", "/v2/health/ready"), 200,
                          "health stays open")
            expect_status(_keyed(s.port, "load", "boss"), 200, "load")
        with Server("--models-dir", d, *CONTROL,
                    env=dict(os.environ, ATTND_API_KEY="user"),
                    name="repo-user-only") as s:
            expect_error(_keyed(s.port, "load", "user"), 403,
                         "needs an admin key", what="load, no admin keys")


if __name__ == "__main__":
    main()
