#!/usr/bin/env python3
"""Integration tests: sessions that outlive a request's server (issue 43,
"Restarts that lose no session"): GET /v1/sessions/{id}/kv gives a session
as a safetensors file and PUT /v1/sessions/{id} of that file
(application/octet-stream) makes it again, here or on another server; with
session_dir, SIGTERM writes every session to the folder and the next
start reads them back.  Each moved or restored session's next step is
bitwise the step its original would have taken (one taken on a fork made
before, with the same rows).  Damaged, truncated and foreign files are a
400 naming the fault, or at start-up skipped with a warning naming the
file, never stopping it.

Run alone: python3 tests/integration/test_session_dir.py --attnd PATH
"""

import json
import os
import random
import struct
import sys
import tempfile

from harness import (STOP_TIMEOUT_S, Server, cfg, check, expect_error,
                     expect_status, main, request, shared, slow_running, test)

OCTET = "application/octet-stream"

# Sessions of every storage dtype and variant (the spec PUT takes).
SPECS = {
    "sd-fp32": {"num_heads": 4, "num_kv_heads": 2, "head_dim": 8,
                "layers": 2, "rotary": True, "window": [20, 0]},
    "sd-bf16": {"num_heads": 2, "head_dim": 5, "kv_dtype": "bf16",
                "alibi": True, "softcap": 20},
    "sd-fp16": {"num_heads": 2, "num_kv_heads": 1, "head_dim": 4,
                "kv_dtype": "fp16", "max_tokens": 64, "scale": 0.25,
                "alibi": [0.5, 0.125],
                "rotary": {"base": 500, "dims": 2, "interleaved": True}},
    "sd-empty": {"num_heads": 1, "head_dim": 2},
}


def rows(rng, t, n):
    return [[round(rng.uniform(-1, 1), 6) for _ in range(n)]
            for _ in range(t)]


def s_path(sid, tail=""):
    return "/v1/sessions/%s%s" % (sid, tail)


def put_spec(p, sid, spec, headers=None):
    r = request(p, "PUT", s_path(sid), spec, headers=headers)
    expect_status(r, 201, "create " + sid)
    return r.json()


def step(p, sid, spec, rng, t, layer=0, headers=None, body=None):
    """A step of t tokens at the layer's length: (its body, the answer's
    text).  body: the body to send again instead of new rows."""
    H, D = spec["num_heads"], spec["head_dim"]
    Hkv = spec.get("num_kv_heads", H)
    if body is None:
        info = request(p, "GET", s_path(sid), headers=headers).json()
        body = {"layer": layer, "position": info["length"][layer],
                "query": rows(rng, t, H * D), "key": rows(rng, t, Hkv * D),
                "value": rows(rng, t, Hkv * D)}
    r = request(p, "POST", s_path(sid, "/attend"), body, headers=headers)
    expect_status(r, 200, "step of " + sid)
    j = r.json()
    return body, json.dumps([j["output"], j["lse"], j["length"]])


def reference(p, sid, spec, rng, headers=None):
    """The next step sid would take, taken on a fork (then deleted): its
    body and answer."""
    f = sid + "-ref"
    r = request(p, "POST", s_path(sid, "/fork"), {"id": f}, headers=headers)
    expect_status(r, 201, "fork " + sid)
    body, ans = step(p, f, spec, rng, 2, headers=headers)
    expect_status(request(p, "DELETE", s_path(f), headers=headers), 204,
                  "delete " + f)
    return body, ans


def history(p, sid, spec, rng, headers=None):
    """Some tokens on every layer but the last of a 1-layer-or-more
    session (sd-empty keeps none)."""
    if sid == "sd-empty":
        return
    for layer in range(spec.get("layers", 1)):
        step(p, sid, spec, rng, 19 - 6 * layer, layer, headers=headers)
    step(p, sid, spec, rng, 1, 0, headers=headers)


def keys_file(d):
    """A keys file of two keys in folder d: its path."""
    kf = os.path.join(d, "keys")
    with open(kf, "w") as f:
        f.write("key-alice\nkey-bob\n")
    return kf


ALICE, BOB = {"X-Api-Key": "key-alice"}, {"X-Api-Key": "key-bob"}


def header_of(blob):
    n = struct.unpack("<Q", blob[:8])[0]
    return n, json.loads(blob[8:8 + n])


@test
def session_file_get_and_put():
    """GET .../kv is the session as a safetensors file (its metadata and
    shapes as documented); PUT of it into another id is 201 with the same
    object, and the next step of both is bitwise the same; the id of the
    URL wins; 409 when taken; a file larger than the 64 KiB of a JSON PUT
    passes; damaged files are 400s that say what is wrong."""
    p = shared().port
    rng = random.Random(cfg.seed + 4301)
    spec = dict(SPECS["sd-fp32"], head_dim=64, num_heads=4, num_kv_heads=4)
    put_spec(p, "mv-a", spec)
    history(p, "mv-a", spec, rng)
    r = request(p, "GET", s_path("mv-a", "/kv"))
    expect_status(r, 200, "GET kv")
    check(r.header("content-type") == OCTET, "content type %r" %
          r.header("content-type"))
    blob = r.body
    check(len(blob) > 64 * 1024, "the file is only %d bytes" % len(blob))
    n, h = header_of(blob)
    check((8 + n) % 8 == 0, "the data does not start on 8 bytes")
    meta = h["__metadata__"]
    check(meta["format"] == "attnd-session" and meta["id"] == "mv-a" and
          meta["format_version"] == "1" and meta["owner"] == "0" * 16,
          "metadata %r" % meta)
    check(json.loads(meta["spec"])["head_dim"] == 64, "spec %r" % meta)
    check(h["layers.0.key"]["shape"] == [20, 4, 64] and
          h["layers.1.value"]["shape"] == [13, 4, 64] and
          h["layers.0.key"]["dtype"] == "F32", "tensors %r" % sorted(h))
    r = request(p, "PUT", s_path("mv-b"), blob, ctype=OCTET)
    expect_status(r, 201, "PUT file")
    a = request(p, "GET", s_path("mv-a")).json()
    b = r.json()
    check(b["id"] == "mv-b" and b["length"] == a["length"] == [20, 13],
          "PUT's object %r" % b)
    for k in ("num_heads", "head_dim", "layers", "rotary", "window"):
        check(a[k] == b[k], "%s: %r, %r" % (k, a[k], b[k]))
    body, ans_a = step(p, "mv-a", spec, rng, 3)
    _, ans_b = step(p, "mv-b", spec, rng, 3, body=body)
    check(ans_a == ans_b, "the moved session answers otherwise")
    expect_error(request(p, "PUT", s_path("mv-b"), blob, ctype=OCTET), 409,
                 "exists already", what="PUT over a session")
    # damaged: cut short, a trailing byte, a foreign file, empty
    for what, bad, needle in (
            ("cut", blob[:-5], "reach past the data section"),
            ("trailing", blob + b"\0", "1 trailing bytes"),
            ("header", blob[:8], "cut short"),
            ("empty", b"", "too short for the 8-byte header length"),
            ("foreign", struct.pack("<Q", 2) + b"{}",
             "no __metadata__ (not a session file)")):
        expect_error(request(p, "PUT", s_path("mv-bad"), bad, ctype=OCTET),
                     400, "session file: ", needle, what=what)
    expect_status(request(p, "GET", s_path("mv-bad")), 404, "nothing made")
    # GET of what does not exist; a wrong method
    expect_status(request(p, "GET", s_path("mv-none", "/kv")), 404, "no kv")
    expect_status(request(p, "POST", s_path("mv-a", "/kv"), {}), 405, "POST")
    for sid in ("mv-a", "mv-b"):
        request(p, "DELETE", s_path(sid))


@test
def session_file_keys():
    """With API keys, another key's session is a 404 on .../kv, and a PUT of
    a file makes the session the sender's."""
    rng = random.Random(cfg.seed + 4302)
    A, B = ALICE, BOB
    with tempfile.TemporaryDirectory() as d:
        with Server("--api-keys-file", keys_file(d), name="file-keys") as s:
            p = s.port
            spec = SPECS["sd-bf16"]
            put_spec(p, "own", spec, headers=A)
            history(p, "own", spec, rng, headers=A)
            expect_error(request(p, "GET", s_path("own", "/kv"), headers=B),
                         404, "own", what="bob's GET kv")
            blob = request(p, "GET", s_path("own", "/kv"), headers=A).body
            r = request(p, "PUT", s_path("own"), blob, ctype=OCTET, headers=B)
            expect_status(r, 201, "bob's PUT of alice's file")
            check(r.json()["length"] == [20], "bob's copy %r" % r.json())
            body, ans_a = step(p, "own", spec, rng, 1, headers=A)
            _, ans_b = step(p, "own", spec, rng, 1, headers=B, body=body)
            check(ans_a == ans_b, "bob's copy answers otherwise")


@test
def session_dir_restart():
    """session_dir: SIGTERM writes every session (files, no temporary one
    left); the next start reads them back with their lengths, idle clocks
    reset, owners kept, and each one's next step bitwise the one a fork
    took before the restart; the loaded files are removed, a corrupt file
    and a foreign one are skipped with a warning naming them (and left),
    other files ignored."""
    rng = random.Random(cfg.seed + 4303)
    A, B = ALICE, BOB
    with tempfile.TemporaryDirectory() as d:
        sd = os.path.join(d, "sessions")
        flags = ("--api-keys-file", keys_file(d), "--session-dir", sd)
        refs, lengths = {}, {}
        with Server(*flags, name="sdir-1") as s:
            p = s.port
            for sid, spec in SPECS.items():
                put_spec(p, sid, spec, headers=A)
                history(p, sid, spec, rng, headers=A)
                lengths[sid] = request(p, "GET", s_path(sid),
                                       headers=A).json()["length"]
                if sid != "sd-empty":
                    refs[sid] = reference(p, sid, SPECS[sid], rng, headers=A)
            put_spec(p, "sd-fp32", SPECS["sd-bf16"], headers=B)  # bob's
            s.stop_checked()
            log = s.log_text()
        check("session_dir: 5 sessions saved to %s" % sd in log,
              "no save line: %s" % s.log_tail())
        names = sorted(os.listdir(sd))
        check(len(names) == 5 and all(n.endswith(".safetensors")
                                      for n in names), "files %r" % names)
        # a corrupt copy, a foreign file, and a file that is not ours
        with open(os.path.join(sd, names[0]), "rb") as f:
            blob = f.read()
        with open(os.path.join(sd, "corrupt.safetensors"), "wb") as f:
            f.write(blob[:len(blob) // 2])
        foreign = json.dumps({"w": {"dtype": "F32", "shape": [1],
                                    "data_offsets": [0, 4]}}).encode()
        with open(os.path.join(sd, "foreign.safetensors"), "wb") as f:
            f.write(struct.pack("<Q", len(foreign)) + foreign + b"\0" * 4)
        with open(os.path.join(sd, "notes.txt"), "w") as f:
            f.write("not a session")
        with Server(*flags, name="sdir-2") as s:
            p = s.port
            log = s.log_text()
            for bad, why in (("corrupt", "cut short"),
                             ("foreign", "not a session file")):
                line = [l for l in log.splitlines()
                        if "skipped %s/%s.safetensors" % (sd, bad) in l]
                check(line and why in line[0], "%s: %s" % (bad, line))
            check("session_dir: 5 sessions loaded from" in log,
                  "no load line: %s" % s.log_tail())
            left = sorted(os.listdir(sd))
            check(left == ["corrupt.safetensors", "foreign.safetensors",
                           "notes.txt"], "left in the folder: %r" % left)
            got = {x["id"]: x for x in request(p, "GET", "/v1/sessions",
                                               headers=A).json()["sessions"]}
            check(sorted(got) == sorted(SPECS), "alice's %r" % sorted(got))
            for sid in SPECS:
                check(got[sid]["length"] == lengths[sid],
                      "%s: %r, before %r" % (sid, got[sid]["length"],
                                             lengths[sid]))
                check(got[sid]["idle_s"] < 5, "%s idle %r" %
                      (sid, got[sid]["idle_s"]))
            bob = request(p, "GET", "/v1/sessions", headers=B).json()
            check([x["kv_dtype"] for x in bob["sessions"]] == ["bf16"],
                  "bob's %r" % bob)
            for sid, (body, ans) in refs.items():
                _, got_ans = step(p, sid, SPECS[sid], rng, 2, headers=A,
                                  body=body)
                check(got_ans == ans, "%s answers otherwise after the "
                      "restart" % sid)
            s.stop_checked()
        names = sorted(n for n in os.listdir(sd) if n.endswith(
            ".safetensors") and n[:-12] not in ("corrupt", "foreign"))
        check(len(names) == 5, "saved again: %r" % names)



@test
def session_dir_saved_when_the_drain_times_out():
    """A drain that runs out of time (a slow stateless request still
    running at drain_timeout_ms) still writes every session no step holds:
    before, attnd exited without writing any.  The next start reads them
    back, each one's next step bitwise the one a fork took before."""
    import signal
    rng = random.Random(cfg.seed + 4304)
    with tempfile.TemporaryDirectory() as d:
        sd = os.path.join(d, "sessions")
        flags = ("--session-dir", sd)
        refs, lengths = {}, {}
        s = Server("--workers", "1", "--drain-timeout-ms", "200", *flags,
                   name="sdir-timeout")
        slow = None
        try:
            p = s.port
            for sid in ("sd-fp32", "sd-bf16"):
                put_spec(p, sid, SPECS[sid])
                history(p, sid, SPECS[sid], rng)
                lengths[sid] = request(p, "GET", s_path(sid)).json()["length"]
                refs[sid] = reference(p, sid, SPECS[sid], rng)
            slow, _ = slow_running(s)
            s.signal(signal.SIGTERM)
            rc = s.wait(STOP_TIMEOUT_S)
            log = s.log_text()
            check(rc == 0, "exit code %d: %s" % (rc, s.log_tail()))
        finally:
            if slow is not None:
                slow.close()
            s.cleanup()
        check("drain_timeout_ms=200 passed with requests still running" in log,
              "the drain did not run out of time: %s" % log[-600:])
        check("session_dir: 2 sessions saved to %s" % sd in log,
              "no save line after the timeout: %s" % log[-600:])
        check(sorted(os.listdir(sd)) == sorted(
            "%016x-%s.safetensors" % (0, sid) for sid in refs),
            "files %r" % os.listdir(sd))
        with Server(*flags, name="sdir-timeout-2") as s:
            p = s.port
            for sid, (body, ans) in refs.items():
                got = request(p, "GET", s_path(sid)).json()["length"]
                check(got == lengths[sid], "%s: length %r, before %r" %
                      (sid, got, lengths[sid]))
                _, got_ans = step(p, sid, SPECS[sid], rng, 2, body=body)
                check(got_ans == ans, "%s answers otherwise after the "
                      "restart" % sid)
            s.stop_checked()


if __name__ == "__main__":
    sys.exit(main())
