#!/usr/bin/env python3
"""docs/architecture.md is the one file-by-file map of the sources: every
src/**/*.c (and every header of src/ that a folder shares) must be named
there, in backticks, by its file name (`http.c`) or its path
(`src/server/http.c`).  Prints the ones it lacks and exits 1; exit 0 and
one line when every file is named.

Usage: scripts/check-map.py [SOURCE_DIR]
"""

import os
import re
import sys


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else
                           os.path.join(os.path.dirname(__file__), ".."))
    with open(os.path.join(root, "docs", "architecture.md"),
              encoding="utf-8") as f:
        named = set(re.findall(r"`([^`\s]+)`", f.read()))
    missing, n = [], 0
    for base, _, files in os.walk(os.path.join(root, "src")):
        for name in sorted(files):
            if not name.endswith(".c") and not (
                    name.endswith(".h") and name != "internal.h"):
                continue
            n += 1
            rel = os.path.relpath(os.path.join(base, name), root)
            if name not in named and rel not in named:
                missing.append(rel)
    for rel in missing:
        print("check-map: %s is not named in docs/architecture.md" % rel)
    if missing:
        print("check-map: %d of %d source files missing from the map "
              "(name each in the table of its folder)" % (len(missing), n))
        return 1
    print("check-map: all %d source files are in docs/architecture.md" % n)
    return 0


if __name__ == "__main__":
    sys.exit(main())
