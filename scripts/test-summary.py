#!/usr/bin/env python3
"""test-summary.py - what `meson test` ran, in counts: `make test`'s last line.

Usage: scripts/test-summary.py BUILD_DIR

Reads BUILD_DIR/meson-logs/testlog.json (the last `meson test` run) and
counts what the tests themselves count, suite by suite: Check's closing
line ("100%: Checks: 534, Failures: 0, Errors: 0") for the unit tests,
the closing "N passed, M failed" of the integration and README runners;
a meson test that prints neither (lint, fuzz replays) counts as one.  A
meson test that failed but whose own counts show no failure (it crashed,
timed out, or failed after its tests) adds one failure.  Prints a line
per suite, the skipped and failed meson tests, then, alone on the last
line, `N passed, M failed`.  Exits 1 when M > 0 or nothing ran.
"""
import json
import os
import re
import sys

CHECK = re.compile(r"^\d+%: Checks: (\d+), Failures: (\d+), Errors: (\d+)$")
RUNNER = re.compile(r"^(\d+) passed, (\d+) failed$")
BAD = {"FAIL", "TIMEOUT", "ERROR", "UNEXPECTEDPASS", "INTERRUPT"}


def counts(stdout):
    """(passed, failed) from a test's own closing line, or None."""
    for line in reversed(stdout.splitlines()):
        m = CHECK.match(line.strip())
        if m:
            checks, failures, errors = map(int, m.groups())
            return checks - failures - errors, failures + errors
        m = RUNNER.match(line.strip())
        if m:
            return int(m.group(1)), int(m.group(2))
    return None


def main():
    if len(sys.argv) != 2:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    path = os.path.join(sys.argv[1], "meson-logs", "testlog.json")
    try:
        with open(path, encoding="utf-8") as f:
            results = [json.loads(line) for line in f if line.strip()]
    except OSError as e:
        print(f"test-summary: no test ran ({path}: {e.strerror})")
        print("0 passed, 1 failed")
        return 1
    suites, skipped, failed_tests = {}, [], []
    for r in results:
        # "project:suite / name"
        head, _, name = r["name"].rpartition(" / ")
        suite = head.split(":")[-1] if head else "?"
        got = counts(r.get("stdout") or "")
        if r["result"] == "SKIP":
            skipped.append(f"{suite}/{name}")
            continue
        bad = r["result"] in BAD
        p, f = got if got else (0 if bad else 1, 1 if bad else 0)
        if bad:
            failed_tests.append(f"{suite}/{name} ({r['result']})")
            f = max(f, 1)
        s = suites.setdefault(suite, [0, 0, 0])
        s[0], s[1], s[2] = s[0] + p, s[1] + f, s[2] + 1
    for suite, (p, f, n) in suites.items():
        print(f"{suite}: {p} passed, {f} failed ({n} meson test"
              f"{'' if n == 1 else 's'})")
    if skipped:
        print("skipped: " + ", ".join(skipped))
    if failed_tests:
        print("failed: " + ", ".join(failed_tests))
    passed = sum(s[0] for s in suites.values())
    failed = sum(s[1] for s in suites.values())
    if not results:
        failed = 1
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
