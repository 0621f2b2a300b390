#!/usr/bin/env bash
# access.sh - what API keys and TLS cost: attnd with and without them, in
# one run, interleaved.
#
# DESIGN
#  Three attnd servers run side by side on 127.0.0.1 (port 0), same
#  settings (http_threads 2, workers auto, access_log false):
#    plain  no keys, plain HTTP (the reference)
#    keys   ATTND_API_KEY set; every request sends Authorization: Bearer
#    tls    tls_cert_file / tls_key_file (an EC P-256 certificate made here
#           with openssl); wrk speaks HTTPS
#    before with --before PATH: another attnd binary (say, the commit before
#           the access work, built in a worktree), plain like the first: what
#           the request-id and header handling cost with keys and TLS off
#  Small: POST /v1/attention with a 16x64 query (bench/gen_payloads.py's
#  v1_small.json), wrk -t2 -c C, D seconds a run.  Large: POST
#  /v2/models/mha/infer with the binary [n, 512] body of gen_payloads.py
#  (mha_large.bin, n = LARGE_N), wrk -t1 -c1, LARGE_D seconds.  Only one
#  server is under load at a time; the configurations take turns, round
#  after round (REPEATS rounds), so that the machine's drift falls on all
#  of them alike.  The report gives each configuration's median req/s and
#  p50 latency and its ratio to plain's median (req/s of keys / plain,
#  tls / plain).  wrk keeps its connections open (keep-alive): the TLS
#  handshake is paid once per connection, as any pooled client pays it.
#  Nothing is asserted.  Every server is stopped (SIGTERM) on exit; wrk
#  runs under timeout.
#
# Usage: bench/access.sh [--attnd PATH] [--before PATH] [--duration S]
#          [--connections C] [--large-n N] [--large-duration S]
#          [--repeats R] [--no-large]
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
ATTND=$ROOT/build/src/attnd
DURATION=5
CONNECTIONS=32
LARGE_N=1024
LARGE_D=8
REPEATS=5
LARGE=1
BEFORE=""
while [ $# -gt 0 ]; do
  case $1 in
    --attnd) ATTND=$2; shift 2 ;;
    --before) BEFORE=$2; shift 2 ;;
    --duration) DURATION=$2; shift 2 ;;
    --connections) CONNECTIONS=$2; shift 2 ;;
    --large-n) LARGE_N=$2; shift 2 ;;
    --large-duration) LARGE_D=$2; shift 2 ;;
    --repeats) REPEATS=$2; shift 2 ;;
    --no-large) LARGE=0; shift ;;
    *) echo "access.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
for c in wrk openssl python3; do
  command -v $c >/dev/null || { echo "access.sh: $c not found" >&2; exit 1; }
done

WORK=$(mktemp -d /tmp/attnd-access-bench.XXXXXX)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do
    for _ in $(seq 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$p" 2>/dev/null || true
  done
  rm -rf "$WORK"
}
trap cleanup EXIT

python3 "$ROOT/bench/gen_payloads.py" --large-n "$LARGE_N" "$WORK" >/dev/null
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
  -keyout "$WORK/tls.key" -out "$WORK/tls.crt" -days 2 -subj /CN=127.0.0.1 \
  2>/dev/null

# start NAME ARGS...: an attnd; sets PORT_<NAME>.
start() {
  local name=$1 log=$WORK/$1.log port=""
  shift
  "$@" >/dev/null 2>"$log" &
  PIDS+=($!)
  for _ in $(seq 200); do
    port=$(grep -o 'listening on 127.0.0.1:[0-9]*' "$log" | head -1 | cut -d: -f2 || true)
    [ -n "$port" ] && break
    sleep 0.05
  done
  [ -n "$port" ] || { echo "access.sh: $name did not start" >&2; cat "$log" >&2; exit 1; }
  eval "PORT_$name=$port"
}
COMMON=(--host 127.0.0.1 --port 0 --access-log false --models-dir "$ROOT/config/models")
start plain "$ATTND" "${COMMON[@]}"
start keys env ATTND_API_KEY=bench-key-0123456789abcdef "$ATTND" "${COMMON[@]}"
start tls "$ATTND" "${COMMON[@]}" --tls-cert-file "$WORK/tls.crt" \
  --tls-key-file "$WORK/tls.key"
SMALL_CFGS="plain keys tls"
if [ -n "$BEFORE" ]; then
  start before "$BEFORE" "${COMMON[@]}"
  SMALL_CFGS="plain before keys tls"
fi

url() {
  case $1 in
    tls) echo "https://127.0.0.1:$PORT_tls" ;;
    keys) echo "http://127.0.0.1:$PORT_keys" ;;
    before) echo "http://127.0.0.1:$PORT_before" ;;
    *) echo "http://127.0.0.1:$PORT_plain" ;;
  esac
}

# run KIND CFG: one wrk run; prints "KIND CFG rps p50_ms non2xx".
run() {
  local kind=$1 cfg=$2 body ctype hl="" t c d path key=""
  if [ "$kind" = small ]; then
    body=$WORK/v1_small.json ctype=application/json t=2 c=$CONNECTIONS
    d=$DURATION path=/v1/attention
  else
    body=$WORK/mha_large.bin ctype=application/octet-stream t=1 c=1
    d=$LARGE_D path=/v2/models/mha/infer hl=$(cat "$WORK/mha_large.hdrlen")
  fi
  [ "$cfg" = keys ] && key=bench-key-0123456789abcdef
  BODY_FILE=$body CONTENT_TYPE=$ctype HEADER_LEN=$hl API_KEY=$key \
    timeout $((d + 60)) wrk -t$t -c$c -d"${d}s" --timeout 30s --latency \
    -s "$ROOT/bench/lua/post.lua" "$(url "$cfg")$path" |
    awk -v k="$kind" -v g="$cfg" '/^RESULT/ {
      for (i = 2; i <= NF; i++) { split($i, kv, "="); r[kv[1]] = kv[2] }
      print k, g, r["rps"], r["p50_ms"], r["non2xx"] + r["socket_errors"] }'
}

echo "# bench/access.sh: $(nproc) CPUs, $(wrk -v 2>&1 | head -1 | cut -d' ' -f1-2)," \
  "small ${DURATION}s x $REPEATS, connections $CONNECTIONS;" \
  "large n=$LARGE_N ${LARGE_D}s x $REPEATS; load $(cut -d' ' -f1 /proc/loadavg)"
ROWS=$WORK/rows
for r in $(seq "$REPEATS"); do
  for cfg in $SMALL_CFGS; do run small $cfg >>"$ROWS"; done
  if [ "$LARGE" = 1 ]; then
    for cfg in plain tls; do run large $cfg >>"$ROWS"; done
  fi
done
python3 - "$ROWS" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
by = {}
for kind, cfg, rps, p50, errs in rows:
    by.setdefault((kind, cfg), []).append((float(rps), float(p50), int(errs)))
print("| request | config | runs | req/s median (min..max) | p50 ms median | "
      "errors | req/s vs plain |")
print("|---|---|---|---|---|---|---|")
for kind in ("small", "large"):
    base = by.get((kind, "plain"))
    for cfg in ("plain", "before", "keys", "tls"):
        v = by.get((kind, cfg))
        if not v:
            continue
        rps = [x[0] for x in v]
        med = statistics.median(rps)
        # the ratio of each round's run to that round's plain run, median
        ratios = [a[0] / b[0] for a, b in zip(v, base)] if base else []
        print("| %s | %s | %d | %.1f (%.1f..%.1f) | %.3f | %d | %s |" % (
            kind, cfg, len(v), med, min(rps), max(rps),
            statistics.median(x[1] for x in v), sum(x[2] for x in v),
            "%.3f (%.3f..%.3f)" % (statistics.median(ratios), min(ratios),
                                   max(ratios)) if ratios else ""))
PY
