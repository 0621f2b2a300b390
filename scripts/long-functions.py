#!/usr/bin/env python3
"""long-functions.py - list the C functions longer than N lines (default 80).

Usage: scripts/long-functions.py [--max N] [PATH ...]   (default PATH: src)

A function's length counts the lines from the one naming it to its closing
brace, both included.  The parse is the small one C in this repository
needs: comments, strings and character literals are blanked, preprocessor
lines skipped, and a top-level '{' that follows a ')' opens a function
body (a struct or an initialiser's '{' follows no ')').  Prints one line
per function, longest first: "LINES path:line name"; exits 0 either way
(a report: issue 33 asks for no function above ~80 lines without a reason
in its comment, which no script can judge).
"""
import argparse
import os
import re
import sys


def blank(text):
    """text with comments, strings and char literals turned into spaces
    (newlines kept, so line numbers hold) and preprocessor lines dropped."""
    out = []
    i, n = 0, len(text)
    line_start = True
    while i < n:
        c = text[i]
        if line_start and c == "#":
            # a directive, with its continuation lines
            while i < n and text[i] != "\n":
                if text[i] == "\\" and i + 1 < n and text[i + 1] == "\n":
                    out.append(" \n")
                    i += 2
                    continue
                out.append(" ")
                i += 1
            continue
        if c == "/" and text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
            continue
        if c == "/" and text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
            continue
        if c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
            out.append(c + re.sub(r"[^\n]", " ", text[i + 1:j - 1]) + c)
            i = j
            continue
        out.append(c)
        if c == "\n":
            line_start = True
        elif not c.isspace():
            line_start = False
        i += 1
    return "".join(out)


def functions(path):
    """(name, first line, last line) of each function defined in path."""
    with open(path, encoding="utf-8", errors="replace") as f:
        text = blank(f.read())
    found = []
    depth = 0
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == "{":
            if depth == 0:
                head = text[:i].rstrip()
                if head.endswith(")"):
                    # the '(' matching that ')' follows the function's name
                    k, paren = len(head) - 1, 0
                    while k >= 0:
                        if head[k] == ")":
                            paren += 1
                        elif head[k] == "(":
                            paren -= 1
                            if paren == 0:
                                break
                        k -= 1
                    m = re.search(r"([A-Za-z_]\w*)\s*$", head[:k])
                    if m:
                        start = text.count("\n", 0, m.start(1)) + 1
                        found.append([m.group(1), start, None, i])
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0 and found and found[-1][2] is None:
                found[-1][2] = text.count("\n", 0, i) + 1
        i += 1
    return [(name, a, b) for name, a, b, _ in found if b is not None]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max", type=int, default=80)
    ap.add_argument("paths", nargs="*", default=["src"])
    args = ap.parse_args()
    rows = []
    for root in args.paths:
        files = [root] if os.path.isfile(root) else sorted(
            os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs
            if f.endswith(".c"))
        for path in files:
            for name, a, b in functions(path):
                if b - a + 1 > args.max:
                    rows.append((b - a + 1, path, a, name))
    rows.sort(key=lambda r: (-r[0], r[1], r[2]))
    for lines, path, line, name in rows:
        print(f"{lines:5d} {path}:{line} {name}")
    print(f"{len(rows)} function(s) over {args.max} lines", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
