#!/usr/bin/env python3
"""Run the README's curl examples verbatim against a real attnd.

Starts attnd on an ephemeral 127.0.0.1 port, takes the ```sh block under
"Try it with curl" and "Sessions" of README.md, and the ones under
"Attention variants", "Sessions" and "Model repository" of docs/api.md
(each section against an attnd of its own, its commands in order), points `localhost:8080` at that port and runs every
command with bash; then the same for the block under "Calling with a key"
of README.md, against an attnd started with ATTND_API_KEY=change-me as
that section says ("Model repository": with ATTND_MODEL_CONTROL=explicit,
as its block's first comment says).  Each must print JSON (a command that reads /metrics:
Prometheus text lines instead); the examples marked as mistakes must
answer {"error": ...}, all others must not.  Then every ```python block
under README.md's "From Python: numpy and tritonclient", against an attnd
of its own, localhost:8080 pointed there too: each must exit 0.  They
need numpy: run by /usr/bin/python3 (Debian's python3-numpy) when it has
numpy, else by this interpreter; where neither has it they are skipped
(said, not failed).  Where tritonclient is not installed, its block
imports tests/tritonclient_shim (tritonclient.http's API over
tests/integration/tritonclient_imitation.py, which sends what the real
client sends).  Ends with the line `N passed, M failed`.  Standard
library only."""
import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time


# Each section of the README whose first ```sh block is run, and the
# environment of the attnd it runs against.
# (file, heading, environment, fewest examples expected)
SECTIONS = (("README.md", "## Try it with curl", {}, 5),
            ("README.md", "## Sessions", {}, 6),
            ("docs/api.md", "## Attention variants", {}, 10),
            ("docs/api.md", "## Sessions", {}, 25),
            ("docs/api.md", "### Model repository",
             {"ATTND_MODEL_CONTROL": "explicit"}, 5),
            ("README.md", "## Calling with a key",
             {"ATTND_API_KEY": "change-me"}, 2))


# The section of README.md whose ```python blocks are run, and how many.
PY_SECTION = ("README.md", "## From Python: numpy and tritonclient", 2)


def start(attnd, source_dir, env):
    proc = subprocess.Popen(
        [attnd, "--host", "127.0.0.1", "--port", "0", "--access-log", "false"],
        cwd=source_dir, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL,
        text=True, env=dict(os.environ, **env))
    deadline = time.time() + 20
    while time.time() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        m = re.search(r"listening on 127\.0\.0\.1:(\d+)", line)
        if m:
            return proc, int(m.group(1))
    proc.kill()
    raise SystemExit("attnd did not start")


def stop(proc):
    """SIGTERM, and SIGKILL if attnd has not exited 20 s later."""
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()


def commands(readme, heading):
    text = open(readme, encoding="utf-8").read()
    if heading not in text:
        return []
    section = text.split(heading, 1)[1]
    block = section.split("```sh", 1)[1].split("```", 1)[0]
    cmds, cur, comment = [], "", ""
    for line in block.splitlines():
        if not cur and line.startswith("#"):
            comment = line
            continue
        if not line.strip():
            continue
        cur += line + "\n"
        if not line.rstrip().endswith("\\") and cur.count("'") % 2 == 0:
            cmds.append((comment, cur))
            cur = ""
    return cmds


_SERIES = re.compile(r'^[a-zA-Z_:][a-zA-Z0-9_:]*(\{.*\})? -?[0-9.e+-]+$')


def exposition(out):
    """True when out is one or more Prometheus text lines (comments or
    series with a number)."""
    lines = [l for l in out.splitlines() if l]
    return bool(lines) and all(l.startswith("#") or _SERIES.match(l)
                               for l in lines)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--attnd", default="build/src/attnd")
    ap.add_argument("--source-dir", default=".")
    a = ap.parse_args()
    attnd = os.path.abspath(a.attnd)
    passed = failed = 0
    for path, heading, env, fewest in SECTIONS:
        cmds = commands(os.path.join(a.source_dir, path), heading)
        if len(cmds) < fewest:
            print("FAIL found only %d curl examples under %r" %
                  (len(cmds), heading))
            failed += 1
        p, f = run_section(attnd, a.source_dir, env, cmds)
        passed += p
        failed += f
    p, f = run_python_blocks(attnd, a.source_dir)
    passed += p
    failed += f
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


def python_blocks(path, heading):
    text = open(path, encoding="utf-8").read()
    if heading not in text:
        return []
    section = text.split(heading, 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^```python\n(.*?)^```$", section, re.S | re.M)


def has_module(python, module):
    return subprocess.run([python, "-c", "import " + module],
                          capture_output=True).returncode == 0


def run_python_blocks(attnd, source_dir):
    """README.md's Python snippets, each must exit 0: (passed, failed)."""
    path, heading, fewest = PY_SECTION
    blocks = python_blocks(os.path.join(source_dir, path), heading)
    if len(blocks) < fewest:
        print("FAIL found only %d python blocks under %r" %
              (len(blocks), heading))
        return 0, 1
    python = next((p for p in ("/usr/bin/python3", sys.executable)
                   if os.path.exists(p) and has_module(p, "numpy")), None)
    if python is None:
        print("skip the %d python blocks under %r: no Python with numpy "
              "(python3-numpy)" % (len(blocks), heading))
        return 0, 0
    env = dict(os.environ)
    if not has_module(python, "tritonclient.http"):
        shim = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                            "tritonclient_shim")
        env["PYTHONPATH"] = os.pathsep.join(
            [shim] + [x for x in [env.get("PYTHONPATH")] if x])
        print("(tritonclient is not installed: its block runs on "
              "tests/tritonclient_shim)")
    proc, port = start(attnd, source_dir, {})
    passed = failed = 0
    try:
        for b in blocks:
            code = b.replace("localhost:8080", "127.0.0.1:%d" % port)
            name = "python: " + next(
                (l for l in b.splitlines() if "import" in l and
                 ("tritonclient" in l or "urllib" in l)), b.splitlines()[0])
            r = subprocess.run([python, "-c", code], capture_output=True,
                               text=True, timeout=60, env=env)
            if r.returncode == 0:
                print("ok   %s: %s" % (name, r.stdout.strip().replace(
                    "\n", " | ")[:150]))
                passed += 1
            else:
                print("FAIL %s: exit %d\n%s" % (name, r.returncode,
                                                r.stderr[-1500:]))
                failed += 1
    finally:
        stop(proc)
    return passed, failed


def run_section(attnd, source_dir, env, cmds):
    """Run cmds against an attnd with env: (passed, failed)."""
    proc, port = start(attnd, source_dir, env)
    passed = failed = 0
    try:
        for comment, cmd in cmds:
            run = cmd.replace("localhost:8080", "127.0.0.1:%d" % port)
            out = subprocess.run(["bash", "-c", run], capture_output=True,
                                 text=True, timeout=30).stdout
            name = cmd.split("\n")[0][:70]
            if "/metrics" in cmd:
                ok = exposition(out)
                print("%s %s" % ("ok  " if ok else "FAIL", name))
                passed, failed = passed + ok, failed + (not ok)
                continue
            try:
                body = json.loads(out)
            except ValueError:
                print("FAIL %s: not JSON: %r" % (name, out[:200]))
                failed += 1
                continue
            want_error = "Mistake" in comment
            if want_error != ("error" in body):
                print("FAIL %s: %r" % (name, out[:200]))
                failed += 1
            else:
                print("ok   %s" % name)
                passed += 1
    finally:
        stop(proc)
    return passed, failed


if __name__ == "__main__":
    sys.exit(main())
