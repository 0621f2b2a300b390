#!/usr/bin/env python3
"""Turn bench/load.sh's raw rows into markdown tables (stdlib only).

Usage: load_report.py META.txt RESULTS.tsv

RESULTS.tsv rows: section, target, config, endpoint, rep, load1, then one
field of space-separated key=value pairs (wrk's RESULT line from
bench/lua/post.lua, the server's access-log medians, or bench_attention's
ms).  Nothing is asserted; ratios are printed next to the targets.
"""
import collections
import re
import statistics
import sys


def parse(path):
    rows = []
    with open(path) as f:
        for line in f:
            parts = line.rstrip("\n").split("\t")
            if len(parts) < 7:
                continue
            kv = {}
            for item in parts[6].split():
                k, _, v = item.partition("=")
                try:
                    kv[k] = float(v)
                except ValueError:
                    kv[k] = v
            rows.append({"sec": parts[0], "target": parts[1], "cfg": parts[2],
                         "ep": parts[3], "rep": int(parts[4]),
                         "load": float(parts[5]), **kv})
    return rows


def group(rows, sec):
    g = collections.OrderedDict()
    for r in rows:
        if r["sec"] == sec:
            g.setdefault((r["target"], r["cfg"], r["ep"]), []).append(r)
    return g


def runs(rs, key, fmt):
    return " / ".join(fmt % r[key] for r in rs if key in r)


def mean(rs, key):
    v = [r[key] for r in rs if key in r]
    return statistics.mean(v) if v else float("nan")


def small_tables(rows, ncpu):
    g = group(rows, "small")
    if not g:
        return
    # The ceiling per endpoint: the better echo config with a matched answer.
    ceiling = {}
    for (t, c, ep), rs in g.items():
        if t == "echo" and not c.endswith("300B") and "handoff" not in c:
            ceiling[ep] = max(ceiling.get(ep, 0.0), mean(rs, "rps"))
    print("### Small requests (wrk -t2 --latency; connections and duration above)\n")
    print("Each cell lists the runs in order (run 1 / run 2). "
          "`ratio` = mean attnd req/s / mean req/s of the better echo "
          "config for the same body (targets: >= 0.50 first, >= 0.70 "
          "stretch); for the echo with `--handoff` it is the share of the "
          "ceiling left by attnd's suspend/queue/worker/resume path alone "
          "(`-workU`: with each worker also burning U us of CPU per "
          "request, `--work-us`).\n")
    print("`server CPU` is all the server's threads; `HTTP + workers` splits "
          "out its libmicrohttpd threads and its worker threads (the rest "
          "is start-up and idle threads).\n")
    print("| server | config | endpoint | req/s | p50 ms | p99 ms | "
          "server CPU us/req | HTTP + workers us/req | load (1 min) | "
          "non-2xx | ratio |")
    print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    best = {}
    for (t, c, ep), rs in g.items():
        m = mean(rs, "rps")
        ratio = ""
        if t == "echo" and "handoff" in c and ep in ceiling:
            ratio = "%.2f" % (m / ceiling[ep])
        if t == "attnd" and ep in ceiling:
            ratio = "%.2f" % (m / ceiling[ep])
            if m > best.get(ep, ("", 0.0))[1]:
                best[ep] = (c, m)
        split = " / ".join("%.1f + %.1f" % (r["http_cpu_us"],
                                              r["worker_cpu_us"])
                           for r in rs if "http_cpu_us" in r)
        print("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %d | %s |" % (
            t, c, ep, runs(rs, "rps", "%.0f"), runs(rs, "p50_ms", "%.2f"),
            runs(rs, "p99_ms", "%.2f"), runs(rs, "server_cpu_us", "%.0f"),
            split, runs(rs, "load", "%.2f"),
            sum(int(r.get("non2xx", 0)) for r in rs), ratio))
    print()
    for ep, (c, m) in best.items():
        print("- best attnd config for %s: %s, %.0f req/s mean = %.0f%% of "
              "echo (%.0f req/s)" % (ep, c, m, 100 * m / ceiling[ep],
                                      ceiling[ep]))
    print()
    baseline_lines(g)
    budget_table(rows, g, ncpu)


def baseline_lines(g):
    """load.sh --baseline: attnd / baseline, h2-w2, per endpoint: the
    median of the repeats' ratios (each repeat ran both, one after the
    other), for req/s and for the server's CPU per request."""
    for ep in ("v1", "v2"):
        a, b = g.get(("attnd", "h2-w2", ep)), g.get(("baseline", "h2-w2", ep))
        if not a or not b:
            continue
        pairs = [(x, y) for x in a for y in b if x["rep"] == y["rep"]]
        rps = [x["rps"] / y["rps"] for x, y in pairs if y.get("rps")]
        cpu = [x["server_cpu_us"] / y["server_cpu_us"] for x, y in pairs
               if y.get("server_cpu_us")]
        if rps:
            print("- %s, attnd / baseline (h2-w2, %d interleaved repeats): "
                  "req/s %.3f (median; runs %s), server CPU us/req %.3f "
                  "(runs %s)" % (
                      ep, len(rps), statistics.median(rps),
                      " ".join("%.3f" % r for r in rps),
                      statistics.median(cpu) if cpu else float("nan"),
                      " ".join("%.3f" % r for r in cpu)))
    print()


def budget_table(rows, g, ncpu):
    """Where a small request's CPU goes: the echo, the hand-off echo, attnd's
    default config and bench_pipeline side by side (means over runs)."""
    pipe = group(rows, "pipeline")
    eps = [ep for ep in ("v1", "v2")
           if ("attnd", "h2-w2", ep) in g and ("echo", "t2", ep) in g]
    if not eps:
        return
    print("### Where a small request's CPU goes (us per request, mean of "
          "runs)\n")
    print("`the rest` = the %d CPUs' time per request (%d s / req/s) minus the "
          "server's CPU: the client (wrk), softirqs charged elsewhere, and "
          "idle time.  `bench_pipeline` is the worker's work without HTTP "
          "(decode, model, encode in one thread, best of 3).\n" % (ncpu, ncpu))
    print("| endpoint | server | HTTP threads | workers | server | the rest |")
    print("|---|---|---:|---:|---:|---:|")
    for ep in eps:
        for key, label in ((("echo", "t2", ep), "echo t2"),
                           (("echo", "t2-batch", ep), "echo t2-batch"),
                           (("echo", "t2-handoff2", ep), "echo t2-handoff2"),
                           (("attnd", "h2-w2", ep), "attnd h2-w2")):
            rs = g.get(key)
            if not rs or "http_cpu_us" not in rs[0]:
                continue
            rps = mean(rs, "rps")
            rest = ncpu * 1e6 / rps - mean(rs, "server_cpu_us") if rps else 0
            print("| %s | %s | %.1f | %.1f | %.1f | %.1f |" % (
                ep, label, mean(rs, "http_cpu_us"), mean(rs, "worker_cpu_us"),
                mean(rs, "server_cpu_us"), rest))
        pr = pipe.get(("bench_pipeline", "none", ep))
        if pr:
            print("| %s | bench_pipeline | - | %.1f (decode %.1f, infer %.1f, "
                  "encode %.1f) | - | - |" % (
                      ep, mean(pr, "all_us"), mean(pr, "decode_us"),
                      mean(pr, "infer_us"), mean(pr, "encode_us")))
    print()


def opt(fmt, v):
    """fmt % v, or "-" when v is missing (NaN)."""
    return "-" if v != v else fmt % v


def large_table(rows):
    g = group(rows, "large")
    eng = group(rows, "engine")
    if not g:
        return
    print("### Large binary requests (v2 mha n=2048 d_model=512 h=8, "
          "wrk -t1 -c1)\n")
    print("One row per run.  `e2e` = wrk latency per request (p50, min); "
          "`server total` / `compute` = access-log total_ms / compute_ms "
          "(median, min); `engine-only` = bench_attention (median, min of 9 "
          "calls), run just before the server run.  Ratios: p50 / median, "
          "and min / min (the least disturbed calls).  A `-notrim` row "
          "reuses the engine-only time of the same run's b1 row.  "
          "`paused echo` = p50 of bench/echo.c answering the same body "
          "through one worker that sleeps the engine-only median before it "
          "answers (`--handoff 1 --delay-ms`), and that p50 / the delay: "
          "the ratio of a server that added nothing, on this machine.  "
          "Targets: e2e / engine-only <= 1.10 stretch, <= 1.15.\n")
    for (t, c, ep), rs in g.items():
        if t == "echo" and c == "t2":
            print("Transport floor (bench/echo.c, same body, answer of the "
                  "same size, wrk -t1 -c1, 5 s): p50 %s ms, min %s ms "
                  "(runs in order).\n" % (runs(rs, "p50_ms", "%.1f"),
                                         runs(rs, "min_ms", "%.1f")))
    print("| config | run | load (1 min) | requests | e2e p50 | e2e min | "
          "server total | compute | engine-only | e2e/engine p50 | "
          "e2e/engine min | e2e/compute p50 | e2e/compute min | "
          "paused echo p50 | paused echo / delay |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
          "---:|---:|")
    nan = float("nan")
    for (t, c, ep), rs in g.items():
        if t == "echo":
            continue
        b = c.split("-")[1]  # w1-b2[-variant] -> b2
        by_rep = {r["rep"]: r for r in eng.get(("bench_attention", b, "mha"), [])}
        plain = len(c.split("-")) == 2  # not a -notrim style variant
        paused = {r["rep"]: r for r in g.get(("echo", "pause-" + b, "mha"), [])
                  if plain}
        for r in rs:
            e = by_rep.get(r["rep"], {})
            pe = paused.get(r["rep"], {})
            pp, pd = pe.get("p50_ms", nan), pe.get("delay_ms", nan)
            em, emin = e.get("ms", nan), e.get("ms_min", nan)
            cm, cmin = r.get("compute_ms", nan), r.get("compute_ms_min", nan)
            print("| %s | %d | %.2f | %d | %.1f | %.1f | %.1f / %.1f | "
                  "%.1f / %.1f | %.1f / %.1f | %.2f | %.2f | %.2f | %.2f | "
                  "%s | %s |" % (
                      c, r["rep"], r["load"], r["requests"], r["p50_ms"],
                      r["min_ms"], r.get("total_ms", nan),
                      r.get("total_ms_min", nan), cm, cmin, em, emin,
                      r["p50_ms"] / em, r["min_ms"] / emin,
                      r["p50_ms"] / cm, r["min_ms"] / cmin,
                      opt("%.1f", pp), opt("%.2f", pp / pd)))
    print()


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    with open(sys.argv[1]) as f:
        meta = [l.rstrip("\n").lstrip("# ") for l in f if l.strip()]
    rows = parse(sys.argv[2])
    print("## Server load\n")
    for m in meta:
        print("- " + m)
    print()
    cpus = [int(m.group(1)) for m in map(re.compile(r"(\d+) CPUs").search,
                                         meta) if m]
    small_tables(rows, cpus[0] if cpus else 2)
    large_table(rows)


if __name__ == "__main__":
    main()
