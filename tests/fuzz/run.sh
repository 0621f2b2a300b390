#!/bin/sh
# Build a libFuzzer target with clang, AddressSanitizer and
# UndefinedBehaviorSanitizer, and run it for SECONDS (default 60) on both
# cores, starting from its seeds in tests/fuzz/seeds/TARGET.  Not part of
# `make test` (a fuzzer has no end of its own); any finding stops it with
# the crashing input in build-fuzz/.
#   json   tests/fuzz/fuzz_json.c: the JSON parser, plain against packed
#   codec  tests/fuzz/fuzz_codec.c: decode, model, encode, both protocols
# Usage: tests/fuzz/run.sh [json|codec] [SECONDS]
set -eu
cd "$(dirname "$0")/../.."
TARGET=json
case ${1:-} in json|codec) TARGET=$1; shift ;; esac
SECS=${1:-60}
OUT=build-fuzz
mkdir -p "$OUT/corpus-$TARGET"
CFLAGS="-g -O1 -std=c11 -D_DEFAULT_SOURCE -fsanitize=fuzzer,address,undefined
  -fno-sanitize-recover=all -Iinclude"
case $TARGET in
  json)
    SRC="tests/fuzz/fuzz_json.c src/json/json_parse.c src/json/json_avx512.c
      src/json/json_avx2.c
      src/common/status.c"
    LIBS="$(pkg-config --cflags --libs libcjson) -lm"
    MAXLEN=4096 ;;
  codec)
    SRC="tests/fuzz/fuzz_codec.c src/codec/*.c src/json/*.c src/fmt/*.c
      src/common/*.c src/model/*.c src/engine/*.c src/config/config.c
      src/server/inflate.c"
    LIBS="$(pkg-config --cflags --libs libcjson openblas zlib) -lpthread -lm"
    MAXLEN=16384 ;;
esac
# shellcheck disable=SC2086
clang $CFLAGS $SRC -o "$OUT/fuzz_$TARGET" $LIBS
cd "$OUT"
./"fuzz_$TARGET" -max_total_time="$SECS" -jobs=2 -workers=2 \
  -max_len=$MAXLEN "corpus-$TARGET" "../tests/fuzz/seeds/$TARGET"
