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
answer {"error": ...}, all others must not.  Ends with the line
`N passed, M failed`.  Standard library only."""
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
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


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
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
    return passed, failed


if __name__ == "__main__":
    sys.exit(main())
