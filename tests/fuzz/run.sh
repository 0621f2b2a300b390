#!/bin/sh
# Build tests/fuzz/fuzz_json.c with clang's libFuzzer, AddressSanitizer and
# UndefinedBehaviorSanitizer, and run it for SECONDS (default 60) on both
# cores, starting from the seeds in tests/fuzz/seeds/json.  Not part of
# `make test` (it has no end of its own); any finding stops it with the
# crashing input in build-fuzz/.
# Usage: tests/fuzz/run.sh [SECONDS]
set -eu
cd "$(dirname "$0")/../.."
SECS=${1:-60}
OUT=build-fuzz
mkdir -p "$OUT/corpus"
# shellcheck disable=SC2046
clang -g -O1 -std=c11 -D_DEFAULT_SOURCE -fsanitize=fuzzer,address,undefined \
  -fno-sanitize-recover=all -Iinclude \
  tests/fuzz/fuzz_json.c src/codec/json_fast.c src/codec/json_avx512.c \
  src/common/status.c -o "$OUT/fuzz_json" $(pkg-config --cflags --libs libcjson) -lm
cd "$OUT"
./fuzz_json -max_total_time="$SECS" -jobs=2 -workers=2 -max_len=4096 \
  corpus ../tests/fuzz/seeds/json
