#!/bin/sh
# Banned calls: C library functions that are unbounded or keep hidden state
# and have a safer spelling -- sprintf/vsprintf (snprintf), strcpy/strcat
# (memcpy with a length), strtok (strtok_r or a hand loop), atoi/atol/atof
# (strtol/strtod with checks), gets (fgets).  Exits non-zero naming each use.
set -eu
cd "$(dirname "$0")/.."
pattern='(^|[^a-z_])(sprintf|vsprintf|strcpy|strcat|strtok|atoi|atol|atof|gets)[[:space:]]*\('
if grep -rnE "$pattern" src include tests bench --include='*.c' --include='*.h'; then
  echo "lint: banned call(s) above: use snprintf, memcpy with a length, strtol with checks" >&2
  exit 1
fi
echo "lint: no banned calls"
