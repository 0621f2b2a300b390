#!/usr/bin/env python3
"""Integration tests for attnd: the real server, over HTTP, on 127.0.0.1.

Runs every test file of this folder (test_*.py, in name order) in one
process with one shared server: the harness (harness.py) has the servers,
the HTTP helpers, the reference maths, the registry and the runner; each
test file holds the tests of one topic and also runs alone.

Usage: tests/integration/run.py [--attnd PATH] [--source-dir DIR]
                                [--file TOPIC]... [-k SUBSTRING]...
                                [--seed N] [--keep-logs] [--list]
--file v1 runs only test_v1.py's tests (repeatable).  Prints one line per
test ("ok NAME" or "FAIL NAME: reason"), then "N passed, M failed" alone
on the last line; exits 1 if any test failed.
"""

import glob
import importlib
import os
import sys
import traceback

import harness


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    failures = []
    for path in sorted(glob.glob(os.path.join(here, "test_*.py"))):
        try:
            importlib.import_module(os.path.basename(path)[:-3])
        except Exception as e:  # reported as a failure, the rest still run
            tb = traceback.extract_tb(e.__traceback__)
            where = " (at %s:%d)" % (os.path.basename(tb[-1].filename),
                                     tb[-1].lineno) if tb else ""
            failures.append((path, "%s: %s%s" % (type(e).__name__, e,
                                                 where)))
    return harness.main(import_failures=failures)


if __name__ == "__main__":
    sys.exit(main())
