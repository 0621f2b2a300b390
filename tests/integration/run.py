#!/usr/bin/env python3
"""Integration tests for attnd: the real server, over HTTP, on 127.0.0.1.

Runs every test file of this folder (test_*.py, in name order) in one
process with one shared server: the harness (harness.py) has the servers,
the HTTP helpers, the reference maths, the registry and the runner; each
test file holds the tests of one topic and also runs alone.

Usage: tests/integration/run.py [--attnd PATH] [--source-dir DIR]
                                [--file TOPIC]... [-k SUBSTRING]...
                                [--seed N] [--keep-logs] [--list]
--file v1 runs only test_v1.py's tests (repeatable), and imports only
that file.  Prints one line per test ("ok NAME" or "FAIL NAME: reason"),
then "N passed, M failed" alone on the last line; exits 1 if any test
failed.  `meson test -C build --suite integration` runs them all so.
"""

import glob
import importlib
import os
import sys
import traceback

import harness


def chosen(paths, argv):
    """The test files to import: those the --file options name, or every
    one (also when a --file names none of them, so that the error lists
    the topics there are)."""
    names = [a.split("=", 1)[1] for a in argv if a.startswith("--file=")]
    names += [b for a, b in zip(argv, argv[1:]) if a == "--file"]
    topics = {harness.topic_of(n) for n in names}
    picked = [p for p in paths if harness.topic_of(p) in topics]
    if not names or len(picked) < len(topics):
        return paths
    return picked


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    failures = []
    paths = sorted(glob.glob(os.path.join(here, "test_*.py")))
    for path in chosen(paths, sys.argv[1:]):
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
