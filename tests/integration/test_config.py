#!/usr/bin/env python3
"""Integration tests: configuration and start-up (OpenBLAS kernels,
the open-files limit, --check-config, models_dir, workers = auto, unknown
ATTND_* variables, the CPU scheduling policy).

Run alone: python3 tests/integration/test_config.py --attnd PATH
(the options of run.py; see harness.py and README.md).
"""

import json
import math
import os
import re
import subprocess
import sys
import tempfile
import time

from harness import (Failure, HOST, Server, cfg, check, expect_status, main,
                     request, run_attnd, test, v1)


def _cpu_flags():
    for line in open("/proc/cpuinfo"):
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return set()


def _better_blas_core():
    """The OPENBLAS_CORETYPE attnd should want on this CPU, or None."""
    f = _cpu_flags()
    if {"avx512f", "avx512cd", "avx512bw", "avx512dq", "avx512vl"} <= f:
        return "SkylakeX"
    if {"avx2", "fma"} <= f:
        return "Haswell"
    return None


@test
def blas_kernels_fit_the_cpu():
    """OpenBLAS 0.3.21 gives CPUs newer than itself its Prescott (SSE3)
    kernels; attnd then restarts itself once with OPENBLAS_CORETYPE set
    (and says so), so that the start-up line never shows kernels below an
    AVX2 CPU.  An OPENBLAS_CORETYPE the operator set is kept, with a
    warning when it is far below the CPU."""
    good = {"Haswell", "Zen", "SkylakeX", "Cooperlake", "SapphireRapids"}
    better = _better_blas_core()
    with Server(name="blas-auto", unset=("OPENBLAS_CORETYPE",)) as s:
        start = [e["msg"] for e in s.log_json() if "listening on" in
                 e.get("msg", "")]
        m = re.search(r"blas=(\w+)\)$", start[0] if start else "")
        check(m, "no blas= in the start-up line: %r" % start)
        core = m.group(1)
        if better:
            check(core in good, "OpenBLAS kernels %s on a CPU for %s" %
                  (core, better))
        restarted = [e["msg"] for e in s.log_json() if "restarted itself"
                     in e.get("msg", "")]
        if restarted:  # OpenBLAS did not know this CPU
            check(len(restarted) == 1 and
                  "OPENBLAS_CORETYPE=%s" % core in restarted[0] and
                  core == better, "restart line %r, kernels %s" %
                  (restarted, core))
        check("not a setting of attnd" not in s.log_text(),
              "the restart's own variable was warned about: %s" %
              s.log_tail())
        expect_status(v1(s.port, {"query": [[1, 0], [0, 1]]}), 200,
                      "v1 after the kernel check")
    with Server(name="blas-set", env={"OPENBLAS_CORETYPE": "Prescott"}) as s:
        log = s.log_json()
        check(any("blas=Prescott)" in e.get("msg", "") for e in log),
              "the operator's OPENBLAS_CORETYPE kept: %s" % s.log_tail())
        warn = [e["msg"] for e in log if e.get("level") == "warn" and
                "OpenBLAS" in e.get("msg", "")]
        if better:
            check(len(warn) == 1 and "OPENBLAS_CORETYPE=%s" % better in
                  warn[0], "warning for Prescott kernels: %r" % warn)
        else:
            check(not warn, "a warning on a CPU without AVX2: %r" % warn)


def _nofile(pid):
    """(soft, hard) open-files limit of a process."""
    for line in open("/proc/%d/limits" % pid):
        if line.startswith("Max open files"):
            f = line.split()
            return int(f[3]), int(f[4])
    raise Failure("no open-files line in /proc/%d/limits" % pid)


@test
def open_files_limit_fitted():
    """Each connection is a descriptor: attnd raises its soft open-files
    limit to max_connections + 64 when the hard limit allows (systemd's
    default soft limit is 1024), and warns when it does not."""
    nofile = lambda lim: ("prlimit", "--nofile=" + lim, "--")
    with Server(name="nofile-raised", wrap=nofile("256:4096")) as s:
        check(_nofile(s.proc.pid) == (1024 + 64, 4096),
              "limits after start: %r" % (_nofile(s.proc.pid),))
        check("raised the open-files limit from 256 to 1088 for "
              "max_connections=1024" in s.log_text(), s.log_tail(3))
    with Server(name="nofile-short", wrap=nofile("256:256")) as s:
        warn = [l["msg"] for l in s.log_json() if l.get("level") == "warn"
                and "open-files" in l.get("msg", "")]
        check(len(warn) == 1 and "limit is 256 (hard limit 256)" in warn[0]
              and "max_connections=1024" in warn[0],
              "warning for a hard limit too low: %r" % warn)
        expect_status(request(s.port, "GET", "/v2/health/ready"), 200,
                      "ready with a short open-files limit")
    with Server("--max-connections", "100", name="nofile-fits",
                wrap=nofile("256:256")) as s:
        check("open-files" not in s.log_text(),
              "limit 256 fits max_connections=100: %s" % s.log_tail(3))
        check(_nofile(s.proc.pid) == (256, 256), "limits unchanged: %r" %
              (_nofile(s.proc.pid),))


@test
def check_config_loads_models():
    """--check-config loads models_dir as a start would: a model that
    would stop the start fails the check, naming the file and the reason.
    A models_dir that was set and does not exist stops both (see
    models_dir_must_exist)."""
    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(cfg.models_dir, "demo.json")) as f:
            demo = f.read()
        with open(os.path.join(d, "demo.json"), "w") as f:
            f.write(demo.replace('"demo.safetensors"', '"%s"' % os.path.join(
                cfg.models_dir, "demo.safetensors")))
        r = subprocess.run([cfg.attnd, "--check-config", "--models-dir", d],
                           capture_output=True, timeout=30)
        check(r.returncode == 0 and
              json.loads(r.stdout)["models_dir"] == d and not r.stderr,
              "--check-config with the demo model: rc %d %r" %
              (r.returncode, r.stderr[-300:]))
        bad = os.path.join(d, "bad.json")
        with open(bad, "w") as f:
            f.write('{"name": "sdpa", "embed_dim": 4, "num_heads": 1, '
                    '"seed": 1}')
        r = subprocess.run([cfg.attnd, "--check-config", "--models-dir", d],
                           capture_output=True, timeout=30)
        check(r.returncode == 1 and r.stdout == b"" and
              ("%s: model name 'sdpa' is a built-in model" % bad).encode()
              in r.stderr,
              "--check-config with a model named sdpa: rc %d %r" %
              (r.returncode, r.stderr[-300:]))


def _demo_models(d):
    """A models folder d holding the demo model (its weights named by
    absolute path, so that the folder can be anywhere)."""
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(cfg.models_dir, "demo.json")) as f:
        demo = f.read()
    with open(os.path.join(d, "demo.json"), "w") as f:
        f.write(demo.replace('"demo.safetensors"', '"%s"' % os.path.join(
            cfg.models_dir, "demo.safetensors")))


@test
def models_dir_relative_to_config_file():
    """A relative models_dir in a config file is the file's folder's, from
    any working directory: --check-config prints the resolved path, and a
    server started elsewhere serves the folder's models.  From the
    environment or a flag it stays the working directory's."""
    with tempfile.TemporaryDirectory() as d:
        _demo_models(os.path.join(d, "etc", "models"))
        conf = os.path.join(d, "etc", "attnd.json")
        with open(conf, "w") as f:
            f.write('{"models_dir": "models"}')
        want = os.path.join(d, "etc", "models")
        for cwd, name in (("/", conf), (d, "etc/attnd.json"),
                          (os.path.join(d, "etc"), "./attnd.json")):
            rc, out, err = run_attnd("--check-config", "--config", name,
                                     cwd=cwd)
            check(rc == 0 and not err, "--check-config --config %s in %s: "
                  "rc %d %r" % (name, cwd, rc, err[-300:]))
            got = json.loads(out)["models_dir"]
            check(os.path.realpath(got) == os.path.realpath(want),
                  "models_dir from %s in %s: %r, not %r" %
                  (name, cwd, got, want))
        with Server("--config", conf, name="models-from-file",
                    models_dir=None, cwd="/") as s:
            r = request(s.port, "GET", "/v2/models/demo")
            expect_status(r, 200, "demo from the file's models folder")
        # the environment: relative to the working directory
        rc, out, err = run_attnd("--check-config", "--config", conf,
                                 env={"ATTND_MODELS_DIR": "etc/models"}, cwd=d)
        check(rc == 0 and json.loads(out)["models_dir"] == "etc/models",
              "ATTND_MODELS_DIR=etc/models in %s: rc %d %r %r" %
              (d, rc, out[-200:], err[-300:]))


@test
def models_dir_must_exist():
    """A models_dir that was set (file, environment, flag) and does not
    exist, or is no directory, stops the start and --check-config with a
    message naming the path and where it was set.  Only the built-in
    default (config/models of the working directory) may be absent: a
    warning, and the built-in models."""
    with tempfile.TemporaryDirectory() as d:
        missing = os.path.join(d, "no-such-dir")
        conf = os.path.join(d, "attnd.json")
        with open(conf, "w") as f:
            f.write('{"models_dir": "modls"}')
        cases = [
            (["--models-dir", missing], {}, None,
             "models_dir '%s' (set by --models-dir) does not exist" % missing),
            ([], {"ATTND_MODELS_DIR": "no-such-dir"}, d,
             "models_dir 'no-such-dir' (set by ATTND_MODELS_DIR, relative to "
             "the working directory %s) does not exist" % d),
            (["--config", conf], {}, "/",
             "models_dir '%s' (set by %s: models_dir 'modls', relative to "
             "the file's folder) does not exist" %
             (os.path.join(d, "modls"), conf)),
            (["--models-dir", conf], {}, None,
             "models_dir '%s' (set by --models-dir) is not a directory" %
             conf),
        ]
        for flags, env, cwd, msg in cases:
            rc, out, err = run_attnd("--check-config", *flags, env=env,
                                     cwd=cwd)
            check(rc == 1 and out == "" and msg in err and
                  len(err.strip().splitlines()) == 1,
                  "--check-config %r %r: rc %d %r" % (flags, env, rc, err))
            # a start: exits at once, the same message in its error line
            rc, out, err = run_attnd("--host", HOST, "--port", "0", *flags,
                                     env=env, cwd=cwd)
            errors = [json.loads(l)["msg"] for l in err.splitlines()
                      if l.startswith("{") and '"error"' in l]
            check(rc == 1 and len(errors) == 1 and msg in errors[0] and
                  "listening" not in err,
                  "start with %r %r: rc %d %r" % (flags, env, rc, err[-400:]))
        # the default, absent from this working directory: a warning
        rc, out, err = run_attnd("--check-config", cwd=d)
        check(rc == 0 and json.loads(out)["models_dir"] == "config/models" and
              "models_dir 'config/models' (the built-in default, relative to "
              "the working directory %s) does not exist: only the built-in "
              "models are served" % d in err,
              "--check-config without config/models: rc %d %r" % (rc, err))
        with Server(name="default-models-absent", models_dir=None,
                    cwd=d) as s:
            expect_status(request(s.port, "GET", "/v2/models/sdpa"), 200,
                          "a built-in model without config/models")
            expect_status(request(s.port, "GET", "/v2/models/demo"), 404,
                          "demo without config/models")
            check("(the built-in default, relative to the working directory "
                  "%s) does not exist" % d in s.log_text(),
                  "start-up warning: %s" % s.log_tail(4))


def _cpu_quota():
    """The smallest cgroup CPU quota of this process in CPUs, or None:
    v2 cpu.max and v1 cfs quota/period of our cgroup, its ancestors and
    the mount's top (as attnd reads them, so a test run in a container with
    a quota expects what attnd finds)."""
    best = None
    try:
        lines = open("/proc/self/cgroup").read().splitlines()
    except OSError:
        return None
    for line in lines:
        hid, ctrl, path = line.split(":", 2)
        if hid == "0" and ctrl == "":
            base, names = "/sys/fs/cgroup", [("cpu.max", None)]
        elif "cpu" in ctrl.split(","):
            base = "/sys/fs/cgroup/cpu"
            names = [("cpu.cfs_quota_us", "cpu.cfs_period_us")]
        else:
            continue
        parts = [p for p in path.split("/") if p]
        for i in range(len(parts), -1, -1):
            dirp = os.path.join(base, *parts[:i])
            for qf, pf in names:
                try:
                    if pf is None:
                        q, p = open(os.path.join(dirp, qf)).read().split()
                    else:
                        q = open(os.path.join(dirp, qf)).read().strip()
                        p = open(os.path.join(dirp, pf)).read().strip()
                    if q == "max" or int(q) <= 0 or int(p) <= 0:
                        continue
                    v = int(q) / int(p)
                    best = v if best is None else min(best, v)
                except (OSError, ValueError):
                    pass
    return best


@test
def workers_auto_counts_allowed_cpus():
    """workers = 0 (the default) starts one worker per CPU attnd may use:
    the affinity mask and the cgroup CPU quota count, and the log says
    how many and why.  A number given is used as it is."""
    allowed = len(os.sched_getaffinity(0))
    quota = _cpu_quota()
    if quota:
        allowed = min(allowed, max(1, int(math.ceil(quota - 1e-6))))
    with Server(name="workers-auto") as s:
        auto = [e["msg"] for e in s.log_json()
                if e.get("msg", "").startswith("workers=")]
        check(len(auto) == 1 and auto[0].startswith(
            "workers=%d (auto: %d CPU" % (allowed, allowed)),
            "auto workers line (expected %d): %r" % (allowed, auto))
        check("workers=%d (auto), cpus=%d," % (allowed, allowed) in
              s.log_text(), "start-up line: %s" % s.log_tail(2))
    # one CPU in the affinity mask: one worker, and the mask is named
    with Server(name="workers-taskset", wrap=("taskset", "-c", "0")) as s:
        auto = [e["msg"] for e in s.log_json()
                if e.get("msg", "").startswith("workers=")]
        check(len(auto) == 1 and auto[0].startswith(
            "workers=1 (auto: 1 CPU allowed: ") and
            "1 in the affinity mask" in auto[0],
            "auto workers under taskset -c 0: %r" % auto)
        r = v1(s.port, {"query": [[1, 0]]})
        expect_status(r, 200, "a request with one auto worker")
    with Server("--workers", "3", name="workers-3") as s:
        check("workers=3, cpus=" in s.log_text() and
              not [e for e in s.log_json()
                   if e.get("msg", "").startswith("workers=")],
              "fixed workers: %s" % s.log_tail(2))


@test
def unknown_environment_variables_warned():
    """An ATTND_* variable attnd does not read is not silently ignored: a
    typo gets a warning naming the nearest variable.  A Kubernetes service
    link (a Service named attnd: ATTND_PORT=tcp://..., ATTND_SERVICE_HOST,
    ATTND_PORT_8080_TCP_ADDR) does not stop attnd: ATTND_PORT is ignored
    with a warning, the link's other variables without one."""
    links = {"ATTND_PORT": "tcp://10.0.0.1:8080",
             "ATTND_SERVICE_HOST": "10.0.0.1",
             "ATTND_PORT_8080_TCP_ADDR": "10.0.0.1",
             # a Service named attnd-metrics, for metrics_port
             "ATTND_METRICS_PORT": "tcp://10.0.0.2:8002",
             "ATTND_METRICS_SERVICE_HOST": "10.0.0.2",
             "ATTND_METRICS_PORT_8002_TCP_ADDR": "10.0.0.2"}
    env = dict(links, ATTND_WORKRS="3")
    with Server(name="env-warnings", env=env) as s:
        expect_status(request(s.port, "GET", "/v2/health/ready"), 200,
                      "ready with the service link set")
        warns = [e.get("msg", "") for e in s.log_json()
                 if e.get("level") == "warn"]
        typo = [w for w in warns if "ATTND_WORKRS" in w]
        check(len(typo) == 1 and "did you mean ATTND_WORKERS" in typo[0],
              "warning for ATTND_WORKRS: %r" % warns)
        link = [w for w in warns if "ATTND_PORT=tcp://10.0.0.1:8080" in w]
        check(len(link) == 1 and "service link" in link[0],
              "warning for ATTND_PORT: %r" % warns)
        mlink = [w for w in warns
                 if "ATTND_METRICS_PORT=tcp://10.0.0.2:8002" in w]
        check(len(mlink) == 1 and "attnd-metrics" in mlink[0],
              "warning for ATTND_METRICS_PORT: %r" % warns)
        check(not [w for w in warns if "SERVICE_HOST" in w or
                   "_PORT_8080" in w or "_PORT_8002" in w],
              "warned about the link's other variables: %r" % warns)
    # --check-config: the port stays the default, the warning on stderr
    p = subprocess.run([cfg.attnd, "--check-config"], capture_output=True,
                       timeout=30, env=dict(os.environ, **links))
    check(p.returncode == 0, "--check-config rc %d: %r" %
          (p.returncode, p.stderr[-300:]))
    check(json.loads(p.stdout)["port"] == 8080, "port: %r" % p.stdout[:200])
    check(json.loads(p.stdout)["metrics_port"] == 0,
          "metrics_port: %r" % p.stdout[:200])
    check(b"service link" in p.stderr, "stderr: %r" % p.stderr[-300:])


def _thread_policies(pid):
    """{thread name: set of scheduling policies} of process pid."""
    out = {}
    for tid in os.listdir("/proc/%d/task" % pid):
        try:
            with open("/proc/%d/task/%s/comm" % (pid, tid)) as f:
                name = f.read().strip()
            policy = os.sched_getscheduler(int(tid))
        except (OSError, ProcessLookupError):
            continue  # the thread ended meanwhile
        out.setdefault(re.sub(r"-\d+$", "-N", name), set()).add(policy)
    return out


@test
def cpu_scheduling_policy():
    """cpu_scheduling_policy: the main thread, the HTTP threads, the workers
    and the reaper run SCHED_BATCH by default and SCHED_OTHER with "other";
    a policy attnd was started with (here SCHED_IDLE, which needs no
    privilege) is kept; the start-up line says which.  (OpenBLAS's own
    idle threads start before main and keep the policy attnd started
    with.)"""
    if not sys.platform.startswith("linux"):
        return
    want_threads = ("MHD-worker", "attn-worker-N", "attn-reaper")
    idle = (sys.executable, "-c", "import os, sys; os.sched_setscheduler(0, "
            "os.SCHED_IDLE, os.sched_param(0)); os.execv(sys.argv[1], "
            "sys.argv[1:])")
    names = {os.SCHED_OTHER: "other", os.SCHED_BATCH: "batch",
             os.SCHED_IDLE: "idle", os.SCHED_FIFO: "fifo",
             os.SCHED_RR: "rr"}
    mine = os.sched_getscheduler(0)  # what attnd inherits from this run
    batch = os.SCHED_BATCH if mine in (os.SCHED_OTHER, os.SCHED_BATCH) \
        else mine
    for flags, wrap, policy, case in (
            ((), (), batch, "default"),
            (("--cpu-scheduling-policy", "other"), (), mine, "other"),
            ((), idle, os.SCHED_IDLE, "idle")):
        name = names.get(policy, "unknown")
        with Server("--workers", "3", *flags, name="sched-" + case,
                    wrap=wrap) as s:
            # libmicrohttpd's threads name themselves once they first run,
            # which a busy machine (or SCHED_IDLE) may delay
            deadline = time.monotonic() + 20
            got = _thread_policies(s.proc.pid)
            while (not all(t in got for t in want_threads) and
                   time.monotonic() < deadline):
                time.sleep(0.02)
                got = _thread_policies(s.proc.pid)
            check(os.sched_getscheduler(s.proc.pid) == policy,
                  "%s: main thread policy %d" %
                  (name, os.sched_getscheduler(s.proc.pid)))
            for t in want_threads:
                check(got.get(t) == {policy},
                      "%s: threads %r have policies %r (want %d); all: %r" %
                      (name, t, got.get(t), policy, got))
            check("cpu_scheduling_policy=%s" % name in s.log_text(),
                  "%s: start-up line: %s" % (name, s.log_tail()))
            if case == "idle":
                check("keeping the policy attnd was started with (idle)" in
                      s.log_text(), "idle: no note that the policy was "
                      "kept: %s" % s.log_tail())


if __name__ == "__main__":
    sys.exit(main())
