#!/bin/sh
# Build the libFuzzer targets (clang, AddressSanitizer and
# UndefinedBehaviorSanitizer) in build-fuzz/, a meson build with -Dfuzz=true
# (tests/fuzz/meson.build: each target links the libraries of src/ it
# fuzzes, so no source is listed here), and run each for SECONDS (default
# 60) on JOBS processes (default 2), starting from its seeds in
# tests/fuzz/seeds/TARGET.  Not part of `make test` (a fuzzer has no end of
# its own; `meson test -C build-fuzz` replays every seed once); any finding
# stops the run with the crashing input in build-fuzz/ and a non-zero exit.
#   json         fuzz_json.c: the JSON parser, plain against packed
#   codec        fuzz_codec.c: decode, model, encode, both protocols
#   safetensors  fuzz_safetensors.c: the .safetensors reader
#   model        fuzz_model.c: a models folder (resident-model JSON and its
#                weights) through the registry, then one inference
#   config       fuzz_config.c: config file, ATTND_* variables and flags
#   routes       fuzz_routes.c: the URL router (routes.c, web.c) with
#                Inference-Header-Content-Length read as http.c reads it
#   http         fuzz_http.c: http.c's pure checks (framing headers,
#                header numbers, the header section as libmicrohttpd
#                0.9.75 leaves it) against a reference model of RFC 9112
#   all          every tests/fuzz/fuzz_*.c in turn (CI's smoke run: all 30)
# Usage: tests/fuzz/run.sh TARGET [SECONDS [JOBS]]
#        tests/fuzz/run.sh build TARGET|all   (build only)
# Needs clang (Debian 12: clang-14 with libclang-rt-14-dev;
# scripts/install-deps.sh --fuzz installs them).
set -eu
cd "$(dirname "$0")/../.."
OUT=build-fuzz
# every fuzz_TARGET.c here is a target (tests/fuzz/meson.build builds it)
TARGETS=$(for f in tests/fuzz/fuzz_*.c; do
  t=${f#tests/fuzz/fuzz_}; printf '%s ' "${t%.c}"; done)

# build-fuzz/ set up once (ninja sets it up again when a meson.build
# changes): clang, -O1 -g, asserts on, no Check unit tests.  meson warns
# that -fsanitize is better given as b_sanitize: its b_sanitize has no
# fuzzer-no-link, so meson.build adds them all itself.
setup() {
  [ -f "$OUT/build.ninja" ] && return
  CC=clang meson setup "$OUT" -Dfuzz=true -Dtests=disabled \
    -Doptimization=1 -Ddebug=true -Db_ndebug=false
}

build() {
  case " $TARGETS all " in
    *" $1 "*) ;;
    *) echo "run.sh: unknown target '$1' (one of: ${TARGETS}all)" >&2
       exit 2 ;;
  esac
  setup
  if [ "$1" = all ]; then
    # shellcheck disable=SC2086
    ninja -C "$OUT" $(for t in $TARGETS; do printf 'tests/fuzz/fuzz_%s ' "$t"; done)
  else
    ninja -C "$OUT" "tests/fuzz/fuzz_$1"
  fi
}

maxlen() {
  case $1 in
    json) echo 4096 ;;
    codec) echo 16384 ;;
    safetensors | model) echo 8192 ;;
    *) echo 2048 ;;
  esac
}

run() {
  t=$1
  mkdir -p "$OUT/corpus-$t"
  echo "== fuzz_$t: $SECS s on $JOBS job(s)"
  # one job runs in this process (its report on stderr, its exit status
  # ours); more run as libFuzzer's children, each logging to fuzz-N.log
  par=""
  [ "$JOBS" -le 1 ] || par="-jobs=$JOBS -workers=$JOBS"
  # shellcheck disable=SC2086
  (cd "$OUT" && "tests/fuzz/fuzz_$t" -max_total_time="$SECS" $par \
    -max_len="$(maxlen "$t")" -rss_limit_mb=2048 -print_final_stats=1 \
    "corpus-$t" "../tests/fuzz/seeds/$t")
}

# fuzz_config and fuzz_model write their inputs as files under $TMPDIR:
# in memory by default (on this project's machine a disk-backed /tmp cost
# fuzz_config about 90 us an input)
if [ -z "${TMPDIR:-}" ] && [ -d /dev/shm ] && [ -w /dev/shm ]; then
  TMPDIR=/dev/shm
  export TMPDIR
fi

if [ "${1:-}" = build ]; then
  build "${2:?usage: run.sh build TARGET|all}"
  exit 0
fi
TARGET=${1:-json}
SECS=${2:-60}
JOBS=${3:-2}
build "$TARGET"
if [ "$TARGET" = all ]; then
  for t in $TARGETS; do run "$t"; done
else
  run "$TARGET"
fi
