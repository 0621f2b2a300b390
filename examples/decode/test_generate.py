#!/usr/bin/python3
"""The decoder example against a real attnd: CI's short version.

Starts attnd (--attnd, default build/src/attnd) on an ephemeral port of
127.0.0.1 and runs examples/decode/generate.py with the model's seeded
random weights (no training):

  1. fp32 sessions, 3 prompts decoded together, 16 tokens, --check (the
     tokens must be PyTorch's exactly), the speculative demo (a rollback
     with truncate at least once) and the fork demo (both branches checked
     against PyTorch run from scratch): as a command, exit 0.
  2. fp32, one session deleted halfway (--demo-lost): re-created,
     re-prefilled, and the tokens still PyTorch's.
  3. bf16 and fp16 sessions with --check: how many tokens agree (printed;
     not a failure unless fewer than half).
  4. a second of training, then --check in fp32 again.

Then no session is left, and attnd exits 0 on SIGTERM.  Prints "ok NAME"
or "FAIL NAME" a check, then "N passed, M failed" alone on the last line
(scripts/test-summary.py counts it); exits 1 if any failed, 77 (meson's
"skipped") when numpy or torch is missing.  Usage:
  /usr/bin/python3 examples/decode/test_generate.py [--attnd build/src/attnd]
"""

import argparse
import contextlib
import io
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))

try:
    import numpy  # noqa: F401
    import torch  # noqa: F401
except ImportError as e:
    print("SKIP: the decoder example needs numpy and torch (Debian: "
          "python3-numpy python3-torch): %s" % e)
    sys.exit(77)

sys.path.insert(0, os.path.join(ROOT, "clients", "python"))
sys.path.insert(0, HERE)
import attnd_client  # noqa: E402
import generate  # noqa: E402

COMMON = ["--train-seconds", "0", "--tokens", "16"]


class Attnd:
    def __init__(self, binary):
        self.log = tempfile.NamedTemporaryFile(prefix="attnd-decode-", suffix=".log")
        self.proc = subprocess.Popen(
            [binary, "--host", "127.0.0.1", "--port", "0",
             "--models-dir", os.path.join(ROOT, "config", "models")],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=self.log)
        deadline = time.monotonic() + 15
        self.url = None
        while time.monotonic() < deadline and self.proc.poll() is None:
            m = re.search(r"listening on 127\.0\.0\.1:(\d+)", self.text())
            if m:
                self.url = "http://127.0.0.1:" + m.group(1)
                break
            time.sleep(0.02)
        if self.url is None:
            self.proc.kill()
            raise SystemExit("FAIL: attnd did not start: " + self.text()[-500:])

    def text(self):
        with open(self.log.name, "rb") as f:
            return f.read().decode("utf-8", "replace")

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            return "killed after 30 s"


def run_inproc(argv):
    """generate.main(argv) in this process (no second torch import);
    (exit code, output)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = generate.main(argv)
    return rc, out.getvalue()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--attnd", default=os.path.join(ROOT, "build", "src", "attnd"))
    args = ap.parse_args()
    torch.set_num_threads(1)
    failures, passes = [], []

    def check(cond, what, output=""):
        print(("ok " if cond else "FAIL ") + what)
        (passes if cond else failures).append(what)
        if not cond:
            sys.stdout.write(output)

    t_start = time.monotonic()
    server = Attnd(args.attnd)
    try:
        url = ["--url", server.url]
        # 1. the command itself: fp32, a batch, --check, both demos
        p = subprocess.run(
            [sys.executable, os.path.join(HERE, "generate.py")] + url + COMMON +
            ["--batch", "3", "--check", "--demo-speculative", "--demo-fork"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120)
        out = p.stdout.decode("utf-8", "replace")
        print("\n".join(l for l in out.splitlines() if not l.startswith("---")))
        check(p.returncode == 0, "fp32 --check --batch 3: exit 0", out)
        check("check (fp32): 48 of 48 tokens agree" in out,
              "fp32: 48 of 48 tokens identical to PyTorch", out)
        m = re.search(r"(\d+) truncates", out)
        check(m is not None and int(m.group(1)) >= 1,
              "speculative: rolled back with truncate at least once", out)
        check("speculative: all 16 tokens identical" in out,
              "speculative: greedy's tokens", out)
        check("fork a: all 16 tokens identical" in out and
              "fork b: all 16 tokens identical" in out,
              "fork: both branches PyTorch's", out)

        # 2. a session lost halfway
        rc, out = run_inproc(url + COMMON + ["--batch", "2", "--check", "--demo-lost"])
        check(rc == 0 and "re-created and re-prefilled" in out and
              "check (fp32): 32 of 32 tokens agree" in out,
              "a lost session re-created and re-prefilled; tokens PyTorch's", out)

        # 3. bf16 and fp16 storage: how many agree
        for dt in ("bf16", "fp16"):
            rc, out = run_inproc(url + COMMON + ["--batch", "3", "--check",
                                                 "--kv-dtype", dt])
            m = re.search(r"check \(%s\): (\d+) of (\d+) tokens agree" % dt, out)
            if m:
                print("%s: %s of %s tokens agree with PyTorch" % (dt, m.group(1), m.group(2)))
            check(rc == 0 and m is not None and 2 * int(m.group(1)) >= int(m.group(2)),
                  "%s sessions: the agreement counted (at least half)" % dt, out)

        # 4. trained a little, fp32 again
        rc, out = run_inproc(url + ["--train-seconds", "1", "--tokens", "16",
                                    "--batch", "2", "--check"])
        check(rc == 0 and "check (fp32): 32 of 32 tokens agree" in out,
              "trained 1 s: fp32 tokens PyTorch's", out)

        left = attnd_client.Client(server.url).list_sessions()
        check(left == [], "no session left behind (%d)" % len(left))
    finally:
        rc = server.stop()
    check(rc == 0, "attnd exits 0 on SIGTERM (%s)" % rc, server.text()[-2000:])
    print("took %.1f s" % (time.monotonic() - t_start))
    # the closing line that scripts/test-summary.py counts
    print("%d passed, %d failed" % (len(passes), len(failures)))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
