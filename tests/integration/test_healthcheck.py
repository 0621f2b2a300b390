#!/usr/bin/env python3
"""Integration tests: attnd --healthcheck, the client mode for
container probes (a ready server, failures that say why, a silent server,
a draining one).

Run alone: python3 tests/integration/test_healthcheck.py --attnd PATH
(the options of run.py; see harness.py and README.md).
"""

import os
import signal
import socket
import sys
import tempfile
import time

import shutil
import subprocess

from harness import (HOST, Server, cfg, check, check_slow_answer,
                     exits_cleanly, free_port, main, run_attnd, shared,
                     slow_running, test)


@test
def healthcheck_ready_server():
    """attnd --healthcheck exits 0 for a ready server: with its URL, and
    with the URL made from the settings (--port, ATTND_PORT, a config
    file; the listen host 0.0.0.0 probed on 127.0.0.1).  It ignores
    settings a start would refuse that do not concern it (models_dir)."""
    p = shared().port
    url = "http://127.0.0.1:%d/v2/health/ready" % p
    runs = [
        (["--healthcheck", url], {}),
        (["--healthcheck=http://127.0.0.1:%d" % p], {}),
        (["--healthcheck", "--port", str(p)], {}),
        (["--port", str(p), "--host", "0.0.0.0", "--healthcheck"], {}),
        (["--healthcheck"], {"ATTND_PORT": str(p),
                             "ATTND_MODELS_DIR": "/nonexistent"}),
        (["--healthcheck", "http://127.0.0.1:%d/v2/health/live" % p], {}),
    ]
    with tempfile.TemporaryDirectory() as d:
        conf = os.path.join(d, "attnd.json")
        with open(conf, "w") as f:
            f.write('{"port": %d, "host": "127.0.0.1"}' % p)
        runs.append((["--healthcheck"], {"ATTND_CONFIG": conf}))
        for args, env in runs:
            rc, out, err = run_attnd(*args, env=env)
            check(rc == 0 and err == "" and "ready (HTTP 200)" in out,
                  "%r %r: rc %d out %r err %r" % (args, env, rc, out, err))
        rc, out, _ = run_attnd("--healthcheck", "--port", str(p))
        check(url in out, "the default URL %s: %r" % (url, out))


def _one_line_failure(args, *needles, env=None):
    rc, out, err = run_attnd(*args, env=env)
    lines = err.strip().splitlines()
    check(rc == 1 and out == "" and len(lines) == 1 and
          lines[0].startswith("attnd: healthcheck: ") and
          all(n in lines[0] for n in needles),
          "%r: rc %d, stderr %r (wanted %r)" % (args, rc, err, needles))
    return lines[0]


@test
def healthcheck_failures_say_why():
    """attnd --healthcheck exits 1 with one line on stderr naming what
    went wrong: nothing listening, a bad URL, a port that cannot be
    probed, a status other than 200 (with the body's error), a bad
    setting (1, not 2: Docker reserves 2)."""
    # a port nobody listens on: bound, never listening
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.bind((HOST, 0))
        port = s.getsockname()[1]
        _one_line_failure(["--healthcheck", "--port", str(port)],
                          "http://127.0.0.1:%d/v2/health/ready" % port,
                          "connection refused")
        _one_line_failure(["--healthcheck",
                           "http://127.0.0.1:%d/x" % port],
                          "connection refused")
    finally:
        s.close()
    _one_line_failure(["--healthcheck", "https://127.0.0.1:1"],
                      "only http:// is supported")
    _one_line_failure(["--healthcheck", "127.0.0.1:8080"], "is not a URL")
    _one_line_failure(["--healthcheck", "http://[::1:80"], "without ']'")
    _one_line_failure(["--healthcheck", "--port", "0"], "port is 0")
    _one_line_failure(["--healthcheck", "--port", "80x"],
                      "--port: '80x' is not an integer")
    _one_line_failure(["--healthcheck"], "ATTND_WORKERS", env={
        "ATTND_WORKERS": "many"})
    p = shared().port
    _one_line_failure(["--healthcheck", "http://127.0.0.1:%d/nope" % p],
                      "not ready: HTTP 404: ", "no route")


@test
def healthcheck_gives_up_on_a_silent_server():
    """A server that accepts the connection and never answers: exit 1
    after the fixed time limit (3 s), saying so."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.bind((HOST, 0))
        s.listen(8)  # the kernel accepts; nobody reads or answers
        port = s.getsockname()[1]
        _one_line_failure(["--healthcheck", "http://127.0.0.1:%d" % port],
                          "connected, but no answer within 3000 ms")
    finally:
        s.close()


@test
def healthcheck_while_draining():
    """While a server drains (SIGTERM, a slow request still running),
    attnd --healthcheck exits 1 naming the 503 and the reason."""
    s = Server("--workers", "1", name="hc-drain")
    slow = None
    try:
        slow, shape = slow_running(s)
        s.signal(signal.SIGTERM)
        deadline = time.monotonic() + 10
        while "draining" not in s.log_text() and time.monotonic() < deadline:
            time.sleep(0.02)
        check(not slow.answered(), "the slow request finished too soon for "
              "this test")
        _one_line_failure(["--healthcheck", "--port", str(s.port)],
                          "not ready: HTTP 503: server is draining")
        check_slow_answer(slow.response(), shape, "running request at "
                          "SIGTERM")
        exits_cleanly(s, "after SIGTERM")
    finally:
        if slow:
            slow.close()
        s.cleanup()



def _in_ns(pid, *args, env=None):
    """attnd run in the PID and mount namespaces of pid: (rc, out, err)."""
    r = subprocess.run(["nsenter", "-t", str(pid), "-p", "-m",
                        os.path.abspath(cfg.attnd)] + list(args),
                       capture_output=True, timeout=30,
                       env=dict(os.environ, **(env or {})),
                       stdin=subprocess.DEVNULL)
    return (r.returncode, r.stdout.decode("utf-8", "replace"),
            r.stderr.decode("utf-8", "replace"))


@test
def healthcheck_and_reload_as_in_a_container():
    """attnd as PID 1 of a PID namespace of its own, as in its image,
    started with a --port flag that its environment does not have (docker
    run IMAGE --port P): `attnd --healthcheck` alone in that namespace,
    with ATTND_PORT saying another port, probes PID 1's own settings
    (port P: healthy); with a flag of its own it keeps its own settings;
    `attnd --reload` alone reloads PID 1.  Needs unshare and nsenter
    (root): without them there is nothing to run, and it says so."""
    if os.geteuid() != 0 or not shutil.which("unshare") or \
            not shutil.which("nsenter"):
        print("# healthcheck_and_reload_as_in_a_container: not run "
              "(needs root, unshare and nsenter)")
        return
    port, other = free_port(), free_port()
    log = tempfile.TemporaryFile()
    outer = subprocess.Popen(
        ["unshare", "--pid", "--fork", "--mount-proc",
         os.path.abspath(cfg.attnd), "--host", HOST, "--port", str(port),
         "--models-dir", cfg.models_dir],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log,
        env=dict(os.environ, ATTND_PORT=str(other)))
    inner = None
    try:
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and outer.poll() is None:
            log.seek(0)
            if b"listening on" in log.read():
                break
            time.sleep(0.05)
        with open("/proc/%d/task/%d/children" % (outer.pid, outer.pid)) as f:
            kids = f.read().split()
        check(len(kids) == 1, "attnd under unshare: children %r" % kids)
        inner = int(kids[0])
        env = {"ATTND_PORT": str(other)}
        rc, out, err = _in_ns(inner, "--healthcheck", env=env)
        check(rc == 0 and ":%d/v2/health/ready: ready" % port in out,
              "--healthcheck alone: rc %d out %r err %r" % (rc, out, err))
        rc, out, err = _in_ns(inner, "--healthcheck", "--port", str(other),
                              env=env)
        check(rc == 1 and ":%d/" % other in err,
              "--healthcheck --port OTHER: rc %d out %r err %r" %
              (rc, out, err))
        rc, out, err = _in_ns(inner, "--reload", env=env)
        check(rc == 0 and "attnd (pid 1, port %d) reloaded" % port in out,
              "--reload: rc %d out %r err %r" % (rc, out, err))
    finally:
        if inner:
            os.kill(inner, signal.SIGTERM)
        try:
            outer.wait(timeout=30)
        except subprocess.TimeoutExpired:
            outer.kill()
            outer.wait(timeout=10)
        log.close()
    check(outer.returncode == 0, "exit code %s after SIGTERM" %
          outer.returncode)


if __name__ == "__main__":
    sys.exit(main())
