#!/usr/bin/env python3
"""check-calls.py - no two source files call each other.

Usage: scripts/check-calls.py BUILD_DIR [SOURCE ...]
       (default SOURCE: src/server/*.c and src/main.c)

For each source file, the object file the build made of it (found through
BUILD_DIR/compile_commands.json, so it works for any meson or CMake build
directory) is read with `nm`: the functions it defines (T) and the symbols
it uses but does not define (U).  A pair of files A, B where A uses a
function B defines and B uses one A defines is a loop: each needs the
other, so neither can be read, tested or replaced alone (issue 33).  Calls
through function pointers (a job's completion) are not symbols and are
not counted, which is what makes such a callback the way out of a loop.

Prints each loop with the functions on both sides and exits 1, or prints
"check-calls: no loop between N files" and exits 0.  Exits 2 when the build
directory has no object for a source (build it first).  A SOURCE may be a
folder (its .c files, subfolders included): `check-calls.py build src`
checks every pair of src/.
"""
import glob
import json
import os
import subprocess
import sys

DEFAULT = ["src/server", "src/main.c"]


def objects(build_dir):
    """{absolute source path: absolute object path} from the compile database."""
    db = os.path.join(build_dir, "compile_commands.json")
    with open(db, encoding="utf-8") as f:
        entries = json.load(f)
    out = {}
    for e in entries:
        d = e.get("directory", build_dir)
        src = os.path.realpath(os.path.join(d, e["file"]))
        obj = e.get("output")
        if not obj:  # older databases: the -o argument
            args = e.get("arguments") or e.get("command", "").split()
            obj = args[args.index("-o") + 1] if "-o" in args else None
        if obj:
            out[src] = os.path.realpath(os.path.join(d, obj))
    return out


def symbols(obj):
    """(functions defined, symbols used and not defined) of an object file."""
    res = subprocess.run(["nm", "--defined-only", obj], check=True,
                         capture_output=True, text=True).stdout
    defined = {l.split()[2] for l in res.splitlines()
               if len(l.split()) == 3 and l.split()[1] == "T"}
    res = subprocess.run(["nm", "--undefined-only", obj], check=True,
                         capture_output=True, text=True).stdout
    used = {l.split()[-1] for l in res.splitlines() if l.split()}
    return defined, used


def main():
    if len(sys.argv) < 2 or sys.argv[1] in ("-h", "--help"):
        print(__doc__.strip())
        return 0 if len(sys.argv) > 1 else 2
    build_dir = sys.argv[1]
    root = os.path.realpath(os.path.join(os.path.dirname(__file__), ".."))
    sources = []
    for s in sys.argv[2:] or DEFAULT:
        p = os.path.join(root, s) if not os.path.isabs(s) else s
        sources += sorted(glob.glob(os.path.join(p, "**", "*.c"),
                                    recursive=True)) \
            if os.path.isdir(p) else [p]
    sources = [os.path.realpath(s) for s in sources]
    objs = objects(build_dir)
    missing = [s for s in sources if s not in objs or not os.path.exists(objs[s])]
    if missing:
        for s in missing:
            print(f"check-calls: no object for {os.path.relpath(s, root)} in "
                  f"{build_dir} (build it first)", file=sys.stderr)
        return 2
    syms = {s: symbols(objs[s]) for s in sources}
    loops = 0
    for i, a in enumerate(sources):
        for b in sources[i + 1:]:
            a_uses_b = sorted(syms[a][1] & syms[b][0])
            b_uses_a = sorted(syms[b][1] & syms[a][0])
            if a_uses_b and b_uses_a:
                loops += 1
                ra, rb = os.path.relpath(a, root), os.path.relpath(b, root)
                print(f"check-calls: loop: {ra} calls {rb} "
                      f"({', '.join(a_uses_b)}) and {rb} calls {ra} "
                      f"({', '.join(b_uses_a)})")
    if loops:
        print(f"check-calls: {loops} loop(s) between {len(sources)} files",
              file=sys.stderr)
        return 1
    print(f"check-calls: no loop between {len(sources)} files")
    return 0


if __name__ == "__main__":
    sys.exit(main())
