#!/bin/sh
# Build libFuzzer targets with clang, AddressSanitizer and
# UndefinedBehaviorSanitizer, and run each for SECONDS (default 60) on
# JOBS processes (default 2), starting from its seeds in
# tests/fuzz/seeds/TARGET.  Not part of `make test` (a fuzzer has no end of
# its own); any finding stops the run with the crashing input in
# build-fuzz/ and a non-zero exit.
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
#   all          every target in turn (CI's smoke run: all 30)
# Usage: tests/fuzz/run.sh TARGET [SECONDS [JOBS]]
#        tests/fuzz/run.sh build TARGET   (build only)
# Needs clang (Debian 12: clang-14 with libclang-rt-14-dev;
# scripts/install-deps.sh --fuzz installs them).
set -eu
cd "$(dirname "$0")/../.."
TARGETS="json codec safetensors model config routes http"
OUT=build-fuzz
CFLAGS="-g -O1 -std=c11 -D_DEFAULT_SOURCE -fsanitize=fuzzer,address,undefined
  -fno-sanitize-recover=all -Iinclude -Isrc -I$OUT"
ALL_SRC="src/codec/*.c src/json/*.c src/fmt/*.c src/common/*.c src/model/*.c
  src/engine/*.c src/config/*.c src/queue/*.c src/metrics/*.c"
# Every file of src/server/ but http.c (fuzz_http includes it; routes adds
# it), so that a new server file needs no edit here (a list by hand missed
# two, and CI's smoke run failed to link).
SERVER_SRC=""
for f in src/server/*.c; do
  [ "$f" = src/server/http.c ] || SERVER_SRC="$SERVER_SRC $f"
done
SERVER_SRC="$SERVER_SRC $OUT/web_assets.c $OUT/openapi_doc.c"

# The generated files the server's sources include: attn_version.h (as
# meson writes it), the page's bytes (web_assets.c) and the API description
# served at GET /openapi.json (openapi_doc.c, from docs/openapi.yaml).
generated() {
  ver=$(sed -n "s/^ *version *: *'\([^']*\)'.*/\1/p" meson.build | head -1)
  printf '#define ATTN_VERSION "%s"\n' "${ver:-0}" >"$OUT/attn_version.h.new"
  if cmp -s "$OUT/attn_version.h.new" "$OUT/attn_version.h"; then
    rm "$OUT/attn_version.h.new"
  else
    mv "$OUT/attn_version.h.new" "$OUT/attn_version.h"
  fi
  python3 scripts/embed_web.py -o "$OUT/web_assets.c" web/index.html \
    web/style.css web/app.js web/favicon.svg
  python3 scripts/openapi_json.py -o "$OUT/openapi.json" docs/openapi.yaml
  python3 scripts/embed_web.py -o "$OUT/openapi_doc.c" \
    --symbol attn__openapi_doc "$OUT/openapi.json"
}

build() {
  t=$1
  LIBS="$(pkg-config --cflags --libs libcjson openblas zlib) -lpthread -lm"
  case $t in
    json)
      SRC="src/json/json_parse.c src/json/json_avx512.c src/json/json_avx2.c
        src/common/status.c"
      LIBS="$(pkg-config --cflags --libs libcjson) -lm" ;;
    codec)
      SRC="src/codec/*.c src/json/*.c src/fmt/*.c src/common/*.c
        src/model/*.c src/engine/*.c src/config/config.c
        src/server/inflate.c" ;;
    safetensors)
      SRC="src/model/safetensors.c src/common/*.c src/config/config.c"
      LIBS="$(pkg-config --cflags --libs libcjson) -lpthread -lm" ;;
    model | config)
      SRC=$ALL_SRC ;;
    routes)
      generated
      SRC="$ALL_SRC $SERVER_SRC src/server/http.c"
      LIBS="$LIBS $(pkg-config --libs libmicrohttpd gnutls)" ;;
    http)
      # fuzz_http.c includes http.c itself (its checks are static)
      generated
      SRC="$ALL_SRC $SERVER_SRC"
      LIBS="$LIBS $(pkg-config --cflags --libs libmicrohttpd gnutls)" ;;
    *)
      echo "run.sh: unknown target '$t' (one of: $TARGETS, all)" >&2
      exit 2 ;;
  esac
  objects
  # shellcheck disable=SC2086
  clang $CFLAGS "tests/fuzz/fuzz_$t.c" $OBJS -o "$OUT/fuzz_$t" $LIBS
}

# Each source of $SRC compiled once into $OUT/obj/ and shared by the
# targets: again only when it, or any header, is newer than its object.
objects() {
  mkdir -p "$OUT/obj"
  CF="$(pkg-config --cflags libcjson openblas zlib libmicrohttpd)"
  # shellcheck disable=SC2012,SC2086
  newest_h=$(ls -t include/attn/*.h src/*/*.h $OUT/attn_version.h \
    2>/dev/null | head -1)
  OBJS=""
  for f in $SRC; do
    o="$OUT/obj/$(echo "$f" | tr / _).o"
    if [ ! "$o" -nt "$f" ] || [ ! "$o" -nt "$newest_h" ]; then
      # shellcheck disable=SC2086
      clang $CFLAGS $CF -c "$f" -o "$o"
    fi
    OBJS="$OBJS $o"
  done
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
  build "$t"
  echo "== fuzz_$t: $SECS s on $JOBS job(s)"
  # one job runs in this process (its report on stderr, its exit status
  # ours); more run as libFuzzer's children, each logging to fuzz-N.log
  par=""
  [ "$JOBS" -le 1 ] || par="-jobs=$JOBS -workers=$JOBS"
  # shellcheck disable=SC2086
  (cd "$OUT" && ./"fuzz_$t" -max_total_time="$SECS" $par \
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

mkdir -p "$OUT"
if [ "${1:-}" = build ]; then
  build "${2:?usage: run.sh build TARGET}"
  exit 0
fi
TARGET=${1:-json}
SECS=${2:-60}
JOBS=${3:-2}
if [ "$TARGET" = all ]; then
  for t in $TARGETS; do run "$t"; done
else
  run "$TARGET"
fi
