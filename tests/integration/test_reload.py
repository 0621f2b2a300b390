#!/usr/bin/env python3
"""Integration tests: attnd --reload, the way to reload where there is no
shell or kill (issue 44): it finds the running attnd of this binary, sends
it SIGHUP and waits for its confirmation; one that is not there, several,
a reload that partly fails, a bad argument.

Run alone: python3 tests/integration/test_reload.py --attnd PATH
(the options of run.py; see harness.py and README.md).
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

from harness import (Server, cfg, check, expect_status, free_port, main,
                     request, run_attnd, test)


def _confirmed(s, n, what, pids=()):
    """Wait (bounded) until s's log confirms n reloads, to each of pids:
    attnd logs a confirmation just after sending it, so the asker may
    have exited before the line is written."""
    deadline = time.monotonic() + 10
    while True:
        log = s.log_text()
        missing = [p for p in pids if "confirmed to pid %d " % p not in log]
        got = log.count("confirmed to pid")
        if (got >= n and not missing) or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    check(got >= n and not missing,
          "%s: %d confirmations logged (wanted %d), none for %r: %s" %
          (what, got, n, missing, s.log_tail()))


def _models(d):
    """A models folder of its own in d: the demo model."""
    m = os.path.join(d, "models")
    os.mkdir(m)
    for f in ("demo.json", "demo.safetensors"):
        shutil.copy(os.path.join(cfg.models_dir, f), m)
    return m


@test
def reload_finds_attnd_and_waits_for_it():
    """attnd --reload with the settings of a running attnd (its port as a
    flag, or as ATTND_PORT) makes it reload and exits 0 only once it has
    confirmed: a model file added before is served right after, and the
    server's log names the pid it confirmed to.  --reload=PID names it."""
    with tempfile.TemporaryDirectory() as d:
        models = _models(d)
        port = free_port()
        with Server("--models-dir", models, "--port", str(port),
                    name="reload") as s:
            expect_status(request(s.port, "GET", "/v2/models/mine/ready"),
                          404, "before the file is there")
            with open(os.path.join(models, "demo.json")) as f:
                spec = json.load(f)
            spec["name"] = "mine"
            with open(os.path.join(models, "mine.json"), "w") as f:
                json.dump(spec, f)
            rc, out, err = run_attnd("--reload", "--port", str(port))
            check(rc == 0 and err == "" and
                  "attnd (pid %d, port %d) reloaded" % (s.proc.pid, port)
                  in out, "rc %d out %r err %r" % (rc, out, err))
            # no wait: the reload was done when --reload returned
            expect_status(request(s.port, "GET", "/v2/models/mine/ready"),
                          200, "the model added, right after --reload")
            _confirmed(s, 1, "the first reload", [])
            for args, env in ((["--reload"], {"ATTND_PORT": str(port)}),
                              (["--reload=%d" % s.proc.pid], {})):
                rc, out, err = run_attnd(*args, env=env)
                check(rc == 0 and "reloaded its keys and models" in out,
                      "%r %r: rc %d out %r err %r" % (args, env, rc, out, err))
            _confirmed(s, 3, "three reloads")


@test
def reload_many_at_once_each_confirmed():
    """Twelve attnd --reload started together: every one exits 0 (the
    kernel merges SIGHUPs pending at once; each asker is still answered,
    by a reload that began after it asked), and the log confirms to
    each of their pids."""
    port = free_port()
    with Server("--port", str(port), name="reload-many") as s:
        procs = [subprocess.Popen([cfg.attnd, "--reload", "--port",
                                   str(port)], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE,
                                  stdin=subprocess.DEVNULL)
                 for _ in range(12)]
        bad = []
        for p in procs:
            out, err = p.communicate(timeout=90)
            if p.returncode != 0:
                bad.append((p.pid, p.returncode, err.decode()[-200:]))
        check(not bad, "%d of 12 failed: %r" % (len(bad), bad[:3]))
        _confirmed(s, 12, "twelve at once", [p.pid for p in procs])


@test
def reload_partial_failure_exits_1():
    """A reload whose api_keys_file no longer reads still reloads the rest
    and keeps the keys in force; --reload says how many files failed and
    exits 1."""
    with tempfile.TemporaryDirectory() as d:
        keys = os.path.join(d, "keys")
        with open(keys, "w") as f:
            f.write("good-key\n")
        port = free_port()
        with Server("--api-keys-file", keys, "--port", str(port),
                    name="reload-keys") as s:
            with open(keys, "w") as f:
                f.write("two words\n")
            rc, out, err = run_attnd("--reload", "--port", str(port))
            check(rc == 1 and out == "" and
                  "reloaded, but 1 of its files failed" in err,
                  "rc %d out %r err %r" % (rc, out, err))
            expect_status(request(s.port, "GET", "/v2",
                                  headers={"X-Api-Key": "good-key"}), 200,
                          "the key in force after the failed reload")


@test
def reload_with_no_attnd_running():
    """With no attnd of the binary running, --reload exits 1 with one line
    saying so (the binary is copied: no process runs the copy).  A pid that
    is not an attnd, and a bad --reload= value, are refused the same way
    (1, not 2)."""
    with tempfile.TemporaryDirectory() as d:
        copy = os.path.join(d, "attnd")
        shutil.copy(cfg.attnd, copy)
        r = subprocess.run([copy, "--reload"], capture_output=True,
                           timeout=30, stdin=subprocess.DEVNULL)
        err = r.stderr.decode()
        check(r.returncode == 1 and len(err.strip().splitlines()) == 1 and
              "attnd: reload: no running attnd found" in err and
              copy in err, "rc %d err %r" % (r.returncode, err))
    rc, out, err = run_attnd("--reload=%d" % os.getpid())
    check(rc == 1 and "process %d is not a running attnd" % os.getpid() in err,
          "a pid that is not attnd: rc %d err %r" % (rc, err))
    for bad in ("--reload=abc", "--reload=0", "--reload="):
        rc, out, err = run_attnd(bad)
        check(rc == 1 and err.startswith("attnd: reload: option '--reload="),
              "%s: rc %d err %r" % (bad, rc, err))
    rc, out, err = run_attnd("--reload", "--healthcheck")
    check(rc == 1 and "cannot be used together" in err,
          "--reload --healthcheck: rc %d err %r" % (rc, err))


@test
def reload_chooses_by_port():
    """Of two attnd of the binary, --reload takes the one on the port of
    its settings; with a port neither has it reloads neither and names
    both (pid and port)."""
    p1, p2 = free_port(), free_port()
    with Server("--port", str(p1), name="reload-a") as a, \
            Server("--port", str(p2), name="reload-b") as b:
        rc, out, err = run_attnd("--reload", "--port", str(p2))
        check(rc == 0 and "pid %d, port %d" % (b.proc.pid, p2) in out,
              "rc %d out %r err %r" % (rc, out, err))
        _confirmed(b, 1, "the one on the port")
        check("received SIGHUP" not in a.log_text(),
              "the other one reloaded too: %s" % a.log_tail())
        free = free_port()
        rc, out, err = run_attnd("--reload", "--port", str(free))
        check(rc == 1 and "none listens on port %d" % free in err and
              "pid %d on port %d" % (a.proc.pid, p1) in err and
              "pid %d on port %d" % (b.proc.pid, p2) in err,
              "rc %d err %r" % (rc, err))
        check("received SIGHUP" not in a.log_text(), "a reloaded")


@test
def reload_reads_a_relative_config_from_attnd_folder():
    """An attnd started in its own folder with --config attnd.json (a
    relative path) is found by the port of that file, also by a --reload
    run elsewhere: its settings are read from its working directory."""
    with tempfile.TemporaryDirectory() as d:
        p1, p2 = free_port(), free_port()
        with open(os.path.join(d, "attnd.json"), "w") as f:
            json.dump({"port": p1}, f)
        # the harness's --port 0 first; the file's port comes after it
        # only through the file, so leave the flag out of this one
        with Server("--port", str(p2), name="reload-other") as b:
            a = subprocess.Popen(
                [os.path.abspath(cfg.attnd), "--config", "attnd.json",
                 "--host", "127.0.0.1", "--models-dir", cfg.models_dir],
                cwd=d, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL)
            try:
                deadline = time.monotonic() + 15
                while time.monotonic() < deadline:
                    try:
                        if request(p1, "GET", "/v2/health/ready").status \
                                == 200:
                            break
                    except OSError:
                        pass
                    time.sleep(0.05)
                rc, out, err = run_attnd("--reload", "--port", str(p1))
                check(rc == 0 and "pid %d, port %d" % (a.pid, p1) in out,
                      "rc %d out %r err %r" % (rc, out, err))
                check("received SIGHUP" not in b.log_text(),
                      "the other one reloaded")
            finally:
                a.terminate()
                a.wait(timeout=30)
            check(a.returncode == 0, "exit code %s" % a.returncode)



def _ready_status(port, model):
    return request(port, "GET", "/v2/models/%s/ready" % model).status


@test
def models_poll_reloads_a_changed_folder():
    """models_poll_s 1: a model file added to models_dir is served without
    a signal (within a bounded wait), and its removal unloads it; the log
    says the poll reloaded."""
    with tempfile.TemporaryDirectory() as d:
        models = _models(d)
        with Server("--models-dir", models, "--models-poll-s", "1",
                    name="models-poll") as s:
            check(_ready_status(s.port, "mine") == 404, "mine before")
            with open(os.path.join(models, "demo.json")) as f:
                spec = json.load(f)
            spec["name"] = "mine"
            with open(os.path.join(models, "mine.json"), "w") as f:
                json.dump(spec, f)
            deadline = time.monotonic() + 20
            while (_ready_status(s.port, "mine") != 200 and
                   time.monotonic() < deadline):
                time.sleep(0.2)
            check(_ready_status(s.port, "mine") == 200,
                  "mine not served 20 s after its file: %s" % s.log_tail())
            check("models_poll_s: models_dir changed" in s.log_text(),
                  "no poll line: %s" % s.log_tail())
            os.unlink(os.path.join(models, "mine.json"))
            deadline = time.monotonic() + 20
            while (_ready_status(s.port, "mine") == 200 and
                   time.monotonic() < deadline):
                time.sleep(0.2)
            check(_ready_status(s.port, "mine") != 200,
                  "mine still ready 20 s after its file went: %s" %
                  s.log_tail())
            check(_ready_status(s.port, "demo") == 200, "demo after")


if __name__ == "__main__":
    sys.exit(main())
