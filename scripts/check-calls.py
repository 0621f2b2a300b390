#!/usr/bin/env python3
"""check-calls.py - the layers point one way, and no two files call each other.

Usage: scripts/check-calls.py BUILD_DIR [SOURCE ...]
       scripts/check-calls.py --self-test
       (default SOURCE: src/server/*.c and src/main.c)

Two checks, on what the build made (object files read with `nm`: the
symbols each defines, and those it uses but does not define):

1. The layers.  docs/architecture.md ("The layers") holds the table of
   which library may use which, as a ```layers block; this script reads
   it from there (it is the only copy).  A library may use those its row
   names and, through them, whatever those may use.  Every target of
   src/meson.build (the libraries, and attnd for main.c) is found through
   BUILD_DIR/meson-info/intro-targets.json, and every symbol it uses that
   another of them defines must belong to a library it may use: a call
   upward (model/ calling codec/), sideways (queue/ calling metrics/) or
   round a loop of any length (a -> b -> c -> a) fails, naming the file
   that calls, the function and the file that defines it.  A target of
   src/meson.build the table does not name fails too (a new library gets
   its row), and so does a table that loops.

2. No two source files call each other.  For each SOURCE (through
   BUILD_DIR/compile_commands.json) the functions it defines (T) and the
   symbols it uses: a pair of files A, B where A uses a function B
   defines and B uses one A defines is a loop: each needs the other, so
   neither can be read, tested or replaced alone (issue 33).  A SOURCE may
   be a folder (its .c files, subfolders included): `check-calls.py build
   src` checks every pair of src/ (of the files the build compiles).

Calls through function pointers (a job's completion) are not symbols and
are not counted, which is what makes such a callback the way out of a
loop.  Symbols no target of src/ defines (libc, cJSON, libmicrohttpd) are
not the layers' business.

Prints each violation and exits 1, or prints one line per check and exits
0.  Exits 2 when the build directory lacks an object (build it first) or
the table cannot be read.  --self-test runs the layer check on made-up
libraries (an upward call, a loop of three, a table that loops) and exits
1 unless each fails as it should.
"""
import glob
import json
import os
import subprocess
import sys

DEFAULT = ["src/server", "src/main.c"]
ROOT = os.path.realpath(os.path.join(os.path.dirname(__file__), ".."))
TABLE_DOC = "docs/architecture.md"
TABLE_FENCE = "```layers"


class Unusable(Exception):
    """The build or the table cannot be read: exit 2."""


# ---- what the build made ------------------------------------------------

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


def read_symbols(objs):
    """{object: (functions defined, every global symbol defined, every
    symbol used and not defined)}, from one run of nm on them all."""
    out = {o: (set(), set(), set()) for o in objs}
    if not objs:
        return out
    res = subprocess.run(["nm", "-A", "-P", *sorted(set(objs))], check=True,
                         capture_output=True, text=True).stdout
    for line in res.splitlines():
        obj, _, rest = line.rpartition(": ")
        f = rest.split()
        if obj not in out or len(f) < 2:
            continue
        name, kind = f[0], f[1]
        if kind in "Uwv":  # undefined (w, v: weak)
            out[obj][2].add(name)
        elif kind.isupper():  # global: text, data, bss, read-only, weak
            out[obj][1].add(name)
            if kind == "T":
                out[obj][0].add(name)
    return out


def src_targets(build_dir):
    """{target name: [its sources]} for the libraries and executables of
    src/meson.build, from meson's introspection files."""
    path = os.path.join(build_dir, "meson-info", "intro-targets.json")
    try:
        with open(path, encoding="utf-8") as f:
            targets = json.load(f)
    except OSError as e:
        raise Unusable(f"{path}: {e.strerror} (a meson build directory, "
                       "configured: meson setup BUILD_DIR)")
    where = os.path.join(ROOT, "src", "meson.build")
    out = {}
    for t in targets:
        if (os.path.realpath(t["defined_in"]) != where or
                t["type"] not in ("static library", "shared library",
                                  "executable")):
            continue
        srcs = []
        for ts in t["target_sources"]:
            srcs += ts.get("sources", []) + ts.get("generated_sources", [])
        out[t["name"]] = [os.path.realpath(s) for s in srcs
                          if s.endswith(".c")]
    return out


def libraries(build_dir, objs):
    """{target: {"defined": {symbol: file}, "used": {symbol: [files]}}}:
    what each target of src/ defines, and what its files use that it does
    not define itself."""
    targets = src_targets(build_dir)
    for srcs in targets.values():
        for s in srcs:
            if s not in objs or not os.path.exists(objs[s]):
                raise Unusable(f"no object for {rel(s)} in {build_dir} "
                               "(build it first)")
    syms = read_symbols([objs[s] for srcs in targets.values() for s in srcs])
    libs = {}
    for name, srcs in targets.items():
        defined, used = {}, {}
        for s in srcs:
            _, d, u = syms[objs[s]]
            for sym in d:
                defined[sym] = rel(s)
            for sym in u:
                used.setdefault(sym, []).append(rel(s))
        libs[name] = {"defined": defined,
                      "used": {s: f for s, f in used.items()
                               if s not in defined}}
    return libs


def rel(path):
    """path relative to the repository when inside it (a generated source
    stays under the build directory)."""
    r = os.path.relpath(path, ROOT)
    return path if r.startswith("..") else r


# ---- the table ----------------------------------------------------------

def read_table(path):
    """{library: [libraries it may use]} from the ```layers block of path:
    one row a line, the library then those it may use ("-": none); # starts
    a comment."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError as e:
        raise Unusable(f"{path}: {e.strerror}")
    starts = [i for i, line in enumerate(lines) if line.strip() == TABLE_FENCE]
    if len(starts) != 1:
        raise Unusable(f"{path}: {len(starts)} {TABLE_FENCE} blocks (one "
                       "holds the layers)")
    table = {}
    for i in range(starts[0] + 1, len(lines)):
        row = lines[i].split("#", 1)[0].split()
        if lines[i].strip() == "```":
            return table
        if not row:
            continue
        if row[0] in table:
            raise Unusable(f"{path}:{i + 1}: {row[0]} has two rows")
        table[row[0]] = [d for d in row[1:] if d != "-"]
    raise Unusable(f"{path}: the {TABLE_FENCE} block does not end")


def table_problems(table):
    """What is wrong with the table itself: a library used but without a
    row of its own, or a loop."""
    out = [f"{lib} may use {d}, which has no row"
           for lib, deps in table.items() for d in deps if d not in table]
    state = {}

    def visit(lib, path):
        state[lib] = 1
        for d in table.get(lib, []):
            if state.get(d) == 1:
                loop = path[path.index(d):] + [d]
                out.append("the table loops: " + " -> ".join(loop))
            elif d not in state:
                visit(d, path + [d])
        state[lib] = 2

    for lib in table:
        if lib not in state:
            visit(lib, [lib])
    return out


def allowed(table):
    """{library: every library it may use, directly or through others}."""
    out = {}

    def below(lib, seen):
        for d in table.get(lib, []):
            if d not in seen:
                seen.add(d)
                below(d, seen)
        return seen

    for lib in table:
        out[lib] = below(lib, set())
    return out


# ---- the layer check ----------------------------------------------------

def uses(libs):
    """{(user, owner): [(symbol, file using it, file defining it)]}: every
    use of one target's symbol by another."""
    owner = {}
    for name, lib in libs.items():
        for sym, f in lib["defined"].items():
            owner.setdefault(sym, []).append((name, f))
    out = {}
    for name, lib in libs.items():
        for sym, files in lib["used"].items():
            for o, where in owner.get(sym, []):
                if o != name:
                    for f in files:
                        out.setdefault((name, o), []).append((sym, f, where))
    return out


def loops(edges):
    """The loops of the graph of targets (strongly connected components of
    two or more), each as a path that closes: [a, b, c, a]."""
    graph = {}
    for a, b in edges:
        graph.setdefault(a, set()).add(b)
        graph.setdefault(b, set())
    index, low, stack, on, comps = {}, {}, [], set(), []

    def strong(v):  # Tarjan
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                comps.append(set(comp))

    for v in sorted(graph):
        if v not in index:
            strong(v)
    out = []
    for comp in comps:  # the shortest cycle through the first node
        start = min(comp)
        prev, queue = {start: None}, [start]
        for v in queue:
            if start in graph[v]:
                path = [v]
                while prev[path[-1]] is not None:
                    path.append(prev[path[-1]])
                out.append(path[::-1] + [start])
                break
            for w in sorted(graph[v]):
                if w in comp and w not in prev:
                    prev[w] = v
                    queue.append(w)
    return out


def layer_problems(table, libs):
    """The lines that say what breaks the layers: targets without a row,
    uses the table does not allow, loops between targets."""
    out = [f"{name}: not in the {TABLE_FENCE} table of {TABLE_DOC} (give "
           "it a row: the libraries it may use)"
           for name in sorted(libs) if name not in table]
    may = allowed(table)
    found = uses(libs)
    for (user, owner), what in sorted(found.items()):
        if user not in table or owner in may[user]:
            continue
        out.append(f"{user} may not use {owner} ({TABLE_DOC}, \"The "
                   f"layers\"):")
        for sym, f, where in sorted(what, key=lambda w: (w[1], w[0])):
            out.append(f"    {f} uses {sym} ({where})")
    for loop in loops(found):
        out.append("loop between libraries: " + " -> ".join(loop))
    return out


def check_layers(build_dir, objs):
    table = read_table(os.path.join(ROOT, TABLE_DOC))
    bad = table_problems(table)
    if bad:
        for line in bad:
            print(f"check-calls: {TABLE_DOC}: {line}")
        return 1
    libs = libraries(build_dir, objs)
    bad = layer_problems(table, libs)
    for line in bad:
        print(f"check-calls: {line}")
    if bad:
        return 1
    n = sum(len(w) for w in uses(libs).values())
    print(f"check-calls: {len(libs)} targets of src/ keep the layers of "
          f"{TABLE_DOC} ({n} uses across them)")
    return 0


# ---- the pair check -----------------------------------------------------

def check_pairs(sources, objs):
    # a source this build does not compile (the server's, with
    # -Dserver=disabled) is not checked; one it has not compiled yet is
    sources = [s for s in sources if s in objs]
    missing = [s for s in sources if not os.path.exists(objs[s])]
    if missing:
        raise Unusable("no object for " + ", ".join(rel(s) for s in missing)
                       + " (build it first)")
    by_obj = read_symbols([objs[s] for s in sources])
    syms = {s: (by_obj[objs[s]][0], by_obj[objs[s]][2]) for s in sources}
    n_loops = 0
    for i, a in enumerate(sources):
        for b in sources[i + 1:]:
            a_uses_b = sorted(syms[a][1] & syms[b][0])
            b_uses_a = sorted(syms[b][1] & syms[a][0])
            if a_uses_b and b_uses_a:
                n_loops += 1
                ra, rb = rel(a), rel(b)
                print(f"check-calls: loop: {ra} calls {rb} "
                      f"({', '.join(a_uses_b)}) and {rb} calls {ra} "
                      f"({', '.join(b_uses_a)})")
    if n_loops:
        print(f"check-calls: {n_loops} loop(s) between {len(sources)} files",
              file=sys.stderr)
        return 1
    print(f"check-calls: no loop between {len(sources)} files")
    return 0


# ---- the self-test ------------------------------------------------------

def self_test():
    """The layer check on made-up libraries: each case must give the
    problems it names (a substring of one line each), and no others."""
    def lib(defines, uses_):
        return {"defined": {s: "x.c" for s in defines},
                "used": {s: ["y.c"] for s in uses_}}

    table = {"common": [], "engine": ["common"], "json": ["common"],
             "codec": ["json"], "model": ["engine"],
             "server": ["codec", "model"]}
    base = {"common": lib(["c"], []), "engine": lib(["e"], ["c"]),
            "json": lib(["j"], ["c"]), "codec": lib(["k"], ["j", "c"]),
            "model": lib(["m"], ["e"]), "server": lib(["s"], ["k", "m", "c"])}
    cases = [
        ("allowed, transitively too", {}, table, []),
        ("upward: model calls codec", {"model": lib(["m"], ["e", "k"])},
         table, ["model may not use codec", "uses k"]),
        ("sideways: json calls engine", {"json": lib(["j"], ["e"])}, table,
         ["json may not use engine"]),
        ("a loop of three: common -> codec -> json -> common",
         {"common": lib(["c"], ["k"]), "codec": lib(["k"], ["j"])}, table,
         ["common may not use codec",
          "loop between libraries: codec -> json -> common -> codec"]),
        ("not in the table", {"probe": lib(["p"], ["c"])}, table,
         ["probe: not in the"]),
        ("libc is not a layer", {"engine": lib(["e"], ["c", "malloc"])},
         table, []),
    ]
    failed = 0
    for what, change, tab, want in cases:
        got = layer_problems(tab, dict(base, **change))
        heads = [g for g in got if not g.startswith(" ")]
        details = [g for g in got if g.startswith(" ")]
        want_heads = [w for w in want if not w.startswith("uses ")]
        want_details = [w for w in want if w.startswith("uses ")]
        ok = (len(heads) == len(want_heads) and
              all(any(w in g for g in heads) for w in want_heads) and
              all(any(w in g for g in details) for w in want_details))
        print(f"check-calls self-test: {'ok  ' if ok else 'FAIL'} {what}"
              + ("" if ok else f": got {got}"))
        failed += not ok
    looped = table_problems(dict(table, common=["server"]))
    ok = any("the table loops" in p for p in looped)
    print(f"check-calls self-test: {'ok  ' if ok else 'FAIL'} a table that "
          "loops" + ("" if ok else f": got {looped}"))
    failed += not ok
    print(f"check-calls self-test: {len(cases) + 1 - failed} passed, "
          f"{failed} failed")
    return 1 if failed else 0


def main():
    if len(sys.argv) < 2 or sys.argv[1] in ("-h", "--help"):
        print(__doc__.strip())
        return 0 if len(sys.argv) > 1 else 2
    if sys.argv[1] == "--self-test":
        return self_test()
    build_dir = sys.argv[1]
    sources = []
    for s in sys.argv[2:] or DEFAULT:
        p = os.path.join(ROOT, s) if not os.path.isabs(s) else s
        sources += sorted(glob.glob(os.path.join(p, "**", "*.c"),
                                    recursive=True)) \
            if os.path.isdir(p) else [p]
    sources = [os.path.realpath(s) for s in sources]
    try:
        objs = objects(build_dir)
        layers = check_layers(build_dir, objs)
        pairs = check_pairs(sources, objs)
    except (Unusable, OSError, subprocess.CalledProcessError) as e:
        print(f"check-calls: {e}", file=sys.stderr)
        return 2
    return 1 if layers or pairs else 0


if __name__ == "__main__":
    sys.exit(main())
