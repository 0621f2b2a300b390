#!/bin/sh
# Banned calls (see ../shared/STYLE.md): unbounded or stateful C library
# functions that have a safer spelling.  Exits non-zero naming each use.
set -eu
cd "$(dirname "$0")/.."
pattern='(^|[^a-z_])(sprintf|vsprintf|strcpy|strcat|strtok|atoi|atol|atof|gets)[[:space:]]*\('
if grep -rnE "$pattern" src include tests bench --include='*.c' --include='*.h'; then
  echo "lint: banned call(s) above: use snprintf, memcpy with a length, strtol with checks" >&2
  exit 1
fi
echo "lint: no banned calls"
