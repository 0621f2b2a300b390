#!/usr/bin/env bash
# load.sh - HTTP load benchmark: attnd against a bare libmicrohttpd server.
#
# DESIGN
#  Purpose.  Report (never assert) how much HTTP throughput attnd keeps for
#  small requests, and how close a large binary request comes to the
#  engine-only time of the same problem.
#   (a) Small: wrk -t2 -c C --latency for D seconds, POST /v1/attention with
#       a 16x64 query (self-attention) and POST /v2/models/sdpa/infer with
#       query = key = value [16,64] (KServe v2 JSON).  attnd runs with each
#       http_threads x workers in CONFIGS (access_log false), then the default
#       config twice more: with cpu_scheduling_policy other (the other rows
#       run the default, batch) and with access_log true.  bench/echo.c is
#       the ceiling: same request bodies, an answer of the same size as
#       attnd's, MHD thread pool of 2 and of 1, and of 2 under SCHED_BATCH
#       (chrt -b).  The echo with --handoff 2 (suspend, FIFO, two workers,
#       resume, as attnd does, but no decoding or computing) shows what that
#       architecture alone leaves of the ceiling (also under SCHED_BATCH:
#       t2-handoff2-batch); with
#       --work-sweep "U1 U2 ..." that echo also runs on the v1 body with
#       each worker burning U us of its CPU per request (--work-us U): what
#       a server whose decoding, computing and encoding cost U us would get.
#       Each row also splits the server's CPU per request between its
#       libmicrohttpd threads and its workers (/proc/PID/task/*/stat by
#       thread name), and bench_pipeline (build/bench/bench_pipeline, if
#       built) times the workers' part alone on the same bodies: decode,
#       model and encode in one thread, no HTTP.  Together they show where a
#       small request's CPU goes (the report's last small-request table).
#   (b) Large: POST /v2/models/mha/infer, n=2048, d_model=512, h=8, binary
#       FP32 inputs with biases, need_weights false, attn_output as binary;
#       wrk -t1 -c1 (sequential) for LARGE_D seconds; workers=1 with
#       blas_threads_per_worker 1 and 2; access_log true so the server's own
#       compute_ms / total_ms can be split out.  Engine-only time of the same
#       problem: bench_attention (build/bench/bench_attention, else compiled
#       from bench/bench_attention.c into the work directory), run right
#       before each server measurement.  Two floors: the echo answering the
#       same body back to back (transport alone), and the echo with
#       --handoff 1 --delay-ms <that engine-only time> (transport plus a
#       pause as long as the computation: what a server that added nothing
#       would measure on this machine).
#  (c) With --baseline PATH, another attnd build (say, main before a change)
#      runs the default config (h2-w2) beside ATTND's in each repeat, the
#      order of the two swapped from one repeat to the next (target
#      "baseline"): the report gives attnd / baseline per endpoint, the
#      median of the repeats' ratios.  --no-echo leaves the echo rows out,
#      for such an A/B alone.
#  Every measurement is repeated REPEATS times (default 2): the second core
#  of these machines is noisy.  The 1-minute load average is recorded before
#  each one.
#  Processes.  Servers listen on 127.0.0.1 port 0 (the kernel picks a free
#  port; the script reads it from the "listening on" log line).  Each server
#  is stopped with SIGTERM (SIGKILL after 10 s) before the next starts; every
#  wrk and bench call runs under `timeout`.  An EXIT trap stops whatever this
#  script started and removes the work directory (unless --keep).
#  Output.  Raw rows in WORK/results.tsv; markdown tables (bench/load_report.py)
#  on stdout and in --out FILE when given.
#
# Usage: bench/load.sh [--duration S] [--connections C] [--attnd PATH]
#          [--echo PATH] [--large-duration S] [--repeats R]
#          [--configs "H:W H:W ..."] [--work-sweep "U ..."] [--no-small]
#          [--no-large] [--baseline PATH] [--no-echo] [--out FILE] [--keep]
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
DURATION=10
CONNECTIONS=64
ATTND=$ROOT/build/src/attnd
ECHO=
LARGE_D=20
REPEATS=2
CONFIGS="1:1 1:2 2:1 2:2"   # http_threads:workers
WORK_SWEEP=                 # worker CPU us per request for the hand-off echo
DO_SMALL=1
DO_LARGE=1
BASELINE=   # another attnd, run beside ATTND's default config (A/B)
DO_ECHO=1
OUT=
KEEP=0

usage() { sed -n '/^# Usage:/,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
  case $1 in
    --duration) DURATION=$2; shift ;;
    --connections) CONNECTIONS=$2; shift ;;
    --attnd) ATTND=$2; shift ;;
    --echo) ECHO=$2; shift ;;
    --large-duration) LARGE_D=$2; shift ;;
    --repeats) REPEATS=$2; shift ;;
    --configs) CONFIGS=$2; shift ;;
    --work-sweep) WORK_SWEEP=$2; shift ;;
    --no-small) DO_SMALL=0 ;;
    --no-large) DO_LARGE=0 ;;
    --baseline) BASELINE=$2; shift ;;
    --no-echo) DO_ECHO=0 ;;
    --out) OUT=$2; shift ;;
    --keep) KEEP=1 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "load.sh: unknown option '$1'" >&2; usage >&2; exit 2 ;;
  esac
  shift
done

command -v wrk >/dev/null || { echo "load.sh: wrk not found" >&2; exit 1; }
[ -x "$ATTND" ] || { echo "load.sh: $ATTND not executable (ninja -C build)" >&2; exit 1; }

WORK=$(mktemp -d /tmp/attn_load.XXXXXX)
LUA=$ROOT/bench/lua/post.lua
TSV=$WORK/results.tsv
SERVER_PID=

cleanup() {
  stop_server
  if [ "$KEEP" = 1 ]; then echo "load.sh: kept $WORK" >&2; else rm -rf "$WORK"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

log() { echo "load.sh: $*" >&2; }
load1() { cut -d' ' -f1 /proc/loadavg; }
CLK_TCK=$(getconf CLK_TCK)
# cpu_ticks PID: user + system clock ticks of the whole process so far.
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat" 2>/dev/null || echo 0; }
# class_ticks PID: "HTTP WORKER" clock ticks so far of the process's
# libmicrohttpd threads (MHD-worker in a pool, MHD-single alone) and of its
# worker threads (attn-worker-N, echo's echo-worker).  A thread that has
# exited is no longer counted, so only compare two calls around a run in
# which no thread exits.  (comm may hold spaces: the fields are counted
# from the ')' that ends it.)
class_ticks() {
  local t http=0 work=0 comm ticks
  for t in /proc/"$1"/task/*; do
    comm=$(cat "$t/comm" 2>/dev/null) || continue
    ticks=$(sed 's/.*) //' "$t/stat" 2>/dev/null | awk '{ print $12 + $13 }') || continue
    case $comm in
      MHD-*) http=$((http + ticks)) ;;
      *worker-*|echo-worker) work=$((work + ticks)) ;;
    esac
  done
  echo "$http $work"
}

# start_server LOGFILE CMD...: start CMD in the background with stderr to
# LOGFILE; sets SERVER_PID and PORT once "listening on 127.0.0.1:PORT" is
# logged (10 s at most).
start_server() {
  local logf=$1; shift
  : >"$logf"   # here, not in the child: the old log must be gone before we look
  "$@" 2>>"$logf" >/dev/null &
  SERVER_PID=$!
  PORT=
  for _ in $(seq 100); do
    PORT=$(grep -o 'listening on 127\.0\.0\.1:[0-9]*' "$logf" 2>/dev/null |
           head -1 | sed 's/.*://') || true
    [ -n "$PORT" ] && return 0
    kill -0 "$SERVER_PID" 2>/dev/null || break
    sleep 0.1
  done
  log "server did not start: $*"; cat "$logf" >&2
  stop_server
  exit 1
}

# stop_server: SIGTERM the server started last, SIGKILL after 10 s.
stop_server() {
  [ -n "${SERVER_PID:-}" ] || return 0
  kill -TERM "$SERVER_PID" 2>/dev/null || true
  for _ in $(seq 100); do
    kill -0 "$SERVER_PID" 2>/dev/null || break
    sleep 0.1
  done
  kill -KILL "$SERVER_PID" 2>/dev/null || true
  wait "$SERVER_PID" 2>/dev/null || true
  SERVER_PID=
}

# check URL BODY CTYPE [HDRLEN]: one request with curl; prints the answer's
# size, fails unless the status is 200.
check() {
  local url=$1 body=$2 ctype=$3 hl=${4:-} code size
  local -a h=(-H "Content-Type: $ctype" -H "Expect:")
  [ -n "$hl" ] && h+=(-H "Inference-Header-Content-Length: $hl")
  read -r code size < <(curl -s --max-time 60 -o "$WORK/check.out" \
    -w '%{http_code} %{size_download}\n' "${h[@]}" --data-binary "@$body" "$url")
  if [ "$code" != 200 ]; then
    log "check failed: $url -> $code: $(head -c 300 "$WORK/check.out")"
    exit 1
  fi
  echo "$size"
}

# wrk_run SECTION TARGET CONFIG ENDPOINT REP URL BODY CTYPE THREADS CONNS DUR [HDRLEN]
# Runs wrk with post.lua and appends one row to $TSV.
wrk_run() {
  local sec=$1 target=$2 cfg=$3 ep=$4 rep=$5 url=$6 body=$7 ctype=$8
  local t=$9 c=${10} d=${11} hl=${12:-} ld res c0 c1 n k0 k1
  ld=$(load1)
  c0=$(cpu_ticks "$SERVER_PID")
  k0=$(class_ticks "$SERVER_PID")
  res=$(BODY_FILE=$body CONTENT_TYPE=$ctype HEADER_LEN=$hl \
        timeout $((d + 60)) wrk -t"$t" -c"$c" -d"${d}s" --timeout 30s \
        --latency -s "$LUA" "$url" | tee -a "$WORK/wrk.log" | grep '^RESULT') || {
    log "wrk failed for $target $cfg $ep"; tail -20 "$WORK/wrk.log" >&2; exit 1; }
  # Server CPU time per request (all its threads, user + system): less
  # sensitive to the machine's other load than req/s.
  c1=$(cpu_ticks "$SERVER_PID")
  k1=$(class_ticks "$SERVER_PID")
  n=${res#*requests=}
  n=${n%% *}
  res="$res $(awk -v a="$c0" -v b="$c1" -v k0="$k0" -v k1="$k1" -v n="$n" \
        -v hz="$CLK_TCK" 'BEGIN {
          split(k0, x, " "); split(k1, y, " "); u = n > 0 ? 1e6 / hz / n : 0
          printf "server_cpu_us=%.1f http_cpu_us=%.1f worker_cpu_us=%.1f",
                 (b - a) * u, (y[1] - x[1]) * u, (y[2] - x[2]) * u }')"
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$sec" "$target" "$cfg" "$ep" "$rep" \
    "$ld" "${res#RESULT }" >>"$TSV"
  log "$sec $target $cfg $ep rep $rep load $ld: ${res#RESULT }"
}

# Access-log medians since line FROM of LOGFILE -> "queue_ms=.. compute_ms=.. total_ms=.. n=.."
access_medians() {
  tail -n +"$2" "$1" | python3 -c '
import json, statistics, sys
v = {"queue_ms": [], "compute_ms": [], "total_ms": []}
for line in sys.stdin:
    try:
        o = json.loads(line)
    except ValueError:
        continue
    if o.get("type") == "access" and o.get("status") == 200:
        for k in v:
            v[k].append(float(o.get(k, 0)))
n = len(v["total_ms"])
print(" ".join("%s=%.3f %s_min=%.3f" % (k, statistics.median(x) if x else 0,
                                       k, min(x) if x else 0)
               for k, x in v.items()), "n=%d" % n)'
}

# ---- inputs and helpers ----------------------------------------------------
log "work directory $WORK; $(nproc) CPUs; load $(load1)"
python3 "$ROOT/bench/gen_payloads.py" "$WORK" >&2
V1=$WORK/v1_small.json
V2=$WORK/v2_small.json
BIG=$WORK/mha_large.bin
BIG_HL=$(cat "$WORK/mha_large.hdrlen")

if [ -z "$ECHO" ]; then
  if [ -x "$ROOT/build/bench/mhd_echo" ]; then
    ECHO=$ROOT/build/bench/mhd_echo
  else
    ECHO=$WORK/echo
    # shellcheck disable=SC2046
    gcc -O2 -std=c11 -D_DEFAULT_SOURCE "$ROOT/bench/echo.c" -o "$ECHO" \
      $(pkg-config --cflags --libs libmicrohttpd)
  fi
fi

PIPELINE=$ROOT/build/bench/bench_pipeline   # optional: no row without it
ATTND_COMMON=(--host 127.0.0.1 --port 0 --drain-timeout-ms 5000
              --queue-capacity 1024)
# attnd restarts itself with OPENBLAS_CORETYPE set when OpenBLAS did not
# know the CPU (its Prescott kernels): give bench_attention, bench_pipeline
# and the echo the kernels attnd runs.
BLAS_CHOSEN=
if [ -z "${OPENBLAS_CORETYPE:-}" ]; then
  start_server "$WORK/attnd-blas.log" "$ATTND" "${ATTND_COMMON[@]}"
  stop_server
  core=$(grep -o 'restarted itself with OPENBLAS_CORETYPE=[A-Za-z0-9]*' \
         "$WORK/attnd-blas.log" | head -1 | cut -d= -f2) || true
  if [ -n "$core" ]; then
    export OPENBLAS_CORETYPE=$core
    BLAS_CHOSEN=" (set by attnd at start: OpenBLAS did not know this CPU)"
  fi
fi
{
  echo "# machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), $(nproc) CPUs"
  echo "# date: $(date -u '+%Y-%m-%d %H:%M UTC'); kernel $(uname -r)"
  echo "# attnd: $ATTND ($("$ATTND" --version 2>&1 | head -1)); echo: $ECHO"
  echo "# wrk: $(wrk -v 2>&1 | head -1 | cut -d' ' -f1-2); duration ${DURATION}s, connections $CONNECTIONS, repeats $REPEATS"
  echo "# OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset}$BLAS_CHOSEN OPENBLAS_L2_SIZE=${OPENBLAS_L2_SIZE:-unset}"
} >"$WORK/meta.txt"

# ---- (a) small requests ----------------------------------------------------
if [ "$DO_SMALL" = 1 ]; then
  # Validate both endpoints and learn the answer sizes the echo must match.
  start_server "$WORK/attnd.log" "$ATTND" "${ATTND_COMMON[@]}" --access-log false
  V1_OUT=$(check "http://127.0.0.1:$PORT/v1/attention" "$V1" application/json)
  V2_OUT=$(check "http://127.0.0.1:$PORT/v2/models/sdpa/infer" "$V2" application/json)
  stop_server
  echo "# small bodies: v1 $(stat -c %s "$V1") B in, $V1_OUT B out; v2 $(stat -c %s "$V2") B in, $V2_OUT B out" >>"$WORK/meta.txt"

  for rep in $(seq "$REPEATS"); do
    # (c) the A/B: the baseline and attnd, h2-w2, in turns
    if [ -n "$BASELINE" ]; then
      pair="baseline:$BASELINE attnd:$ATTND"
      [ $((rep % 2)) = 0 ] && pair="attnd:$ATTND baseline:$BASELINE"
      for tb in $pair; do
        start_server "$WORK/attnd.log" "${tb#*:}" "${ATTND_COMMON[@]}" --access-log false
        wrk_run small "${tb%%:*}" h2-w2 v1 "$rep" "http://127.0.0.1:$PORT/v1/attention" \
          "$V1" application/json 2 "$CONNECTIONS" "$DURATION"
        wrk_run small "${tb%%:*}" h2-w2 v2 "$rep" "http://127.0.0.1:$PORT/v2/models/sdpa/infer" \
          "$V2" application/json 2 "$CONNECTIONS" "$DURATION"
        stop_server
      done
    fi
    # t2-batch: under SCHED_BATCH, as attnd runs by default
    # (cpu_scheduling_policy); it counts for the ceiling too.
    if [ "$DO_ECHO" = 1 ]; then  # the echo rows (not indented further)
    for ec in t2 t1 t2-batch; do
      et=${ec#t} pre=()
      if [ "$ec" = t2-batch ]; then et=2 pre=(chrt -b 0); fi
      start_server "$WORK/echo.log" "${pre[@]}" "$ECHO" --port 0 --threads "$et" --reply-bytes "$V1_OUT"
      wrk_run small echo "$ec" v1 "$rep" "http://127.0.0.1:$PORT/v1/attention" \
        "$V1" application/json 2 "$CONNECTIONS" "$DURATION"
      stop_server
      start_server "$WORK/echo.log" "${pre[@]}" "$ECHO" --port 0 --threads "$et" --reply-bytes "$V2_OUT"
      wrk_run small echo "$ec" v2 "$rep" "http://127.0.0.1:$PORT/v2/models/sdpa/infer" \
        "$V2" application/json 2 "$CONNECTIONS" "$DURATION"
      stop_server
    done
    start_server "$WORK/echo.log" "$ECHO" --port 0 --threads 2 --reply-bytes 300
    wrk_run small echo "t2-300B" v1 "$rep" "http://127.0.0.1:$PORT/v1/attention" \
      "$V1" application/json 2 "$CONNECTIONS" "$DURATION"
    stop_server
    # attnd's hand-off alone (suspend, FIFO, worker, resume): the floor.
    start_server "$WORK/echo.log" "$ECHO" --port 0 --threads 2 --handoff 2 --reply-bytes "$V1_OUT"
    wrk_run small echo "t2-handoff2" v1 "$rep" "http://127.0.0.1:$PORT/v1/attention" \
      "$V1" application/json 2 "$CONNECTIONS" "$DURATION"
    stop_server
    start_server "$WORK/echo.log" "$ECHO" --port 0 --threads 2 --handoff 2 --reply-bytes "$V2_OUT"
    wrk_run small echo "t2-handoff2" v2 "$rep" "http://127.0.0.1:$PORT/v2/models/sdpa/infer" \
      "$V2" application/json 2 "$CONNECTIONS" "$DURATION"
    stop_server
    start_server "$WORK/echo.log" chrt -b 0 "$ECHO" --port 0 --threads 2 --handoff 2 --reply-bytes "$V1_OUT"
    wrk_run small echo "t2-handoff2-batch" v1 "$rep" "http://127.0.0.1:$PORT/v1/attention" \
      "$V1" application/json 2 "$CONNECTIONS" "$DURATION"
    stop_server
    for us in $WORK_SWEEP; do
      start_server "$WORK/echo.log" "$ECHO" --port 0 --threads 2 --handoff 2 \
        --work-us "$us" --reply-bytes "$V1_OUT"
      wrk_run small echo "t2-handoff2-work$us" v1 "$rep" "http://127.0.0.1:$PORT/v1/attention" \
        "$V1" application/json 2 "$CONNECTIONS" "$DURATION"
      stop_server
    done
    fi

    for hw in $CONFIGS; do
      ht=${hw%%:*} wk=${hw##*:}
      start_server "$WORK/attnd.log" "$ATTND" "${ATTND_COMMON[@]}" \
        --http-threads "$ht" --workers "$wk" --access-log false
      wrk_run small attnd "h$ht-w$wk" v1 "$rep" "http://127.0.0.1:$PORT/v1/attention" \
        "$V1" application/json 2 "$CONNECTIONS" "$DURATION"
      wrk_run small attnd "h$ht-w$wk" v2 "$rep" "http://127.0.0.1:$PORT/v2/models/sdpa/infer" \
        "$V2" application/json 2 "$CONNECTIONS" "$DURATION"
      stop_server
    done

    # Default config with the system's default scheduling policy.
    start_server "$WORK/attnd.log" "$ATTND" "${ATTND_COMMON[@]}" \
      --access-log false --cpu-scheduling-policy other
    wrk_run small attnd "h2-w2-other" v1 "$rep" "http://127.0.0.1:$PORT/v1/attention" \
      "$V1" application/json 2 "$CONNECTIONS" "$DURATION"
    wrk_run small attnd "h2-w2-other" v2 "$rep" "http://127.0.0.1:$PORT/v2/models/sdpa/infer" \
      "$V2" application/json 2 "$CONNECTIONS" "$DURATION"
    stop_server

    # Default config (http_threads 2, workers 2) with the access log on,
    # written to a file.
    start_server "$WORK/attnd-log.log" "$ATTND" "${ATTND_COMMON[@]}" \
      --access-log true
    wrk_run small attnd "h2-w2-log" v1 "$rep" "http://127.0.0.1:$PORT/v1/attention" \
      "$V1" application/json 2 "$CONNECTIONS" "$DURATION"
    wrk_run small attnd "h2-w2-log" v2 "$rep" "http://127.0.0.1:$PORT/v2/models/sdpa/infer" \
      "$V2" application/json 2 "$CONNECTIONS" "$DURATION"
    stop_server
    rm -f "$WORK/attnd-log.log"

    # The worker's work alone: the same bodies through decode, model and
    # encode in one thread, no HTTP (bench/bench_pipeline.c).
    if [ -x "$PIPELINE" ]; then
      ld=$(load1)
      timeout 120 "$PIPELINE" --emit-json --v1 "$V1" --v2 sdpa "$V2" |
        python3 -c 'import json, sys
for l in sys.stdin:
    o = json.loads(l)
    print("%s %s" % (o["protocol"], " ".join("%s=%.3f" % (k, o[k])
          for k in ("decode_us", "infer_us", "encode_us", "all_us"))))' |
        while read -r ep kv; do
          printf 'pipeline\tbench_pipeline\tnone\t%s\t%s\t%s\t%s\n' \
            "$ep" "$rep" "$ld" "$kv" >>"$TSV"
          log "pipeline $ep rep $rep load $ld: $kv"
        done
    fi
  done
fi

# ---- (b) large binary requests ---------------------------------------------
if [ "$DO_LARGE" = 1 ]; then
  BENCH=$ROOT/build/bench/bench_attention
  if [ ! -x "$BENCH" ]; then
    BENCH=$WORK/bench_attention
    # shellcheck disable=SC2046
    gcc -O2 -std=c11 -D_DEFAULT_SOURCE -I"$ROOT/include" \
      "$ROOT/bench/bench_attention.c" -o "$BENCH" \
      "$ROOT/build/src/libattn_engine.a" "$ROOT/build/src/libattn_common.a" \
      $(pkg-config --libs openblas) -lm -lpthread ||
      { log "cannot build bench_attention"; BENCH=; }
  fi
  echo "# large body: $(stat -c %s "$BIG") B in (JSON header $BIG_HL B); engine-only: ${BENCH:-none}" >>"$WORK/meta.txt"
  # Diagnostic variant: glibc malloc told never to trim or mmap these sizes,
  # so per-request buffers stop being returned to the kernel and faulted in
  # again (see docs/performance-history.md, "Server load").  attnd itself is
  # unchanged.
  NOTRIM=GLIBC_TUNABLES=glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=2147483647
  BIG_OUT=
  for rep in $(seq "$REPEATS"); do
    for variant in b1 b2 b1-notrim; do
      bt=${variant%%-*}; bt=${bt#b}
      envs=()
      [ "$variant" = b1-notrim ] && envs=("$NOTRIM")
      if [ -n "$BENCH" ] && [ ${#envs[@]} -eq 0 ]; then
        ld=$(load1)
        ms=$(timeout 300 "$BENCH" --n 2048 --d 512 --h 8 --threads "$bt" \
               --causal no --weights none --reps 9 --emit-json |
             python3 -c 'import json,sys
for l in sys.stdin:
    o = json.loads(l)
    if "ms" in o: print("%.3f %.3f" % (o["ms"], o["ms_min"]))')
        printf 'engine\tbench_attention\tb%s\tmha\t%s\t%s\tms=%s ms_min=%s\n' \
          "$bt" "$rep" "$ld" "${ms% *}" "${ms#* }" >>"$TSV"
        log "engine b$bt rep $rep load $ld: ms ${ms% *} (min ${ms#* })"
      fi
      start_server "$WORK/attnd-large.log" env "${envs[@]}" "$ATTND" \
        "${ATTND_COMMON[@]}" --access-log true --workers 1 --http-threads 2 \
        --blas-threads-per-worker "$bt"
      out=$(check "http://127.0.0.1:$PORT/v2/models/mha/infer" "$BIG" \
        application/octet-stream "$BIG_HL")     # also a warm-up
      if [ -z "$BIG_OUT" ]; then
        BIG_OUT=$out
        echo "# large answer: $BIG_OUT B (binary attn_output)" >>"$WORK/meta.txt"
      fi
      sleep 0.3   # let the warm-up's access line reach the log
      from=$(($(wc -l <"$WORK/attnd-large.log") + 1))
      wrk_run large attnd "w1-$variant" mha "$rep" "http://127.0.0.1:$PORT/v2/models/mha/infer" \
        "$BIG" application/octet-stream 1 1 "$LARGE_D" "$BIG_HL"
      stop_server
      med=$(access_medians "$WORK/attnd-large.log" "$from")
      sed -i '$ s/$/ '"$med"'/' "$TSV"
      log "  server medians: $med"
      # The floor after a pause: the echo's worker sleeps as long as the
      # engine-only call took, then answers as many bytes as attnd did.
      if [ -n "$BENCH" ] && [ ${#envs[@]} -eq 0 ]; then
        start_server "$WORK/echo.log" "$ECHO" --port 0 --threads 2 \
          --reply-bytes "$BIG_OUT" --handoff 1 --delay-ms "${ms% *}"
        wrk_run large echo "pause-b$bt" mha "$rep" \
          "http://127.0.0.1:$PORT/v2/models/mha/infer" \
          "$BIG" application/octet-stream 1 1 "$LARGE_D" "$BIG_HL"
        stop_server
        sed -i '$ s/$/ delay_ms='"${ms% *}"'/' "$TSV"
      fi
    done
    # The transport floor: echo takes the same body and answers as many
    # bytes as attnd did.
    start_server "$WORK/echo.log" "$ECHO" --port 0 --threads 2 --reply-bytes "$BIG_OUT"
    wrk_run large echo "t2" mha "$rep" "http://127.0.0.1:$PORT/v2/models/mha/infer" \
      "$BIG" application/octet-stream 1 1 5 "$BIG_HL"
    stop_server
  done
fi

python3 "$ROOT/bench/load_report.py" "$WORK/meta.txt" "$TSV" | tee ${OUT:+"$OUT"}
