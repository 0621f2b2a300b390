#!/bin/sh
# Check that the C sources (every .c and .h of src/, include/, tests/ and
# bench/, tracked or new, but for generated ones) are formatted as
# .clang-format says, with clang-format 14: Debian 12's, pinned because
# clang-format's versions lay the same code out differently.  Installs
# clang-format-14 when it is missing (apt-get, as root or with sudo).
#
# The files of scripts/clang-format-pending.txt are not checked yet (they
# were not formatted when the check came); the check says how many.  It
# also fails when one of them is formatted already, so that the list only
# shrinks.  --all checks them too (what is left to do).
#
# Usage: scripts/check-format.sh [--all]
# Exits 1 naming each file that is not formatted, 0 when all are, 2 when
# clang-format 14 cannot be had.
set -eu
cd "$(dirname "$0")/.."
CF=clang-format-14
PENDING=scripts/clang-format-pending.txt
# Written by a program, not by hand: not checked.
GENERATED="src/json/pow5_128.h"

all=0
case "${1:-}" in
  --all) all=1 ;;
  "") ;;
  *) echo "usage: $0 [--all]" >&2; exit 2 ;;
esac

if ! command -v "$CF" >/dev/null 2>&1; then
  echo "check-format: installing $CF"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  if ! { $SUDO apt-get update &&
         DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y \
           --no-install-recommends "$CF"; } >&2; then
    echo "check-format: could not install $CF (Debian 12's package)" >&2
    exit 2
  fi
fi
case "$("$CF" --version)" in
  *"version 14."*) ;;
  *) echo "check-format: $CF is not clang-format 14: $("$CF" --version)" >&2
     exit 2 ;;
esac

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  git ls-files --cached --others --exclude-standard -- \
    'src/*.[ch]' 'include/*.[ch]' 'tests/*.[ch]' 'bench/*.[ch]'
else
  find src include tests bench -name '*.[ch]'
fi | sort -u > "$tmp/all"
grep -v '^#' "$PENDING" | grep . | sort -u > "$tmp/pending" || true

bad=0 checked=0 skipped=0
while IFS= read -r f; do
  [ -f "$f" ] || continue # deleted, not yet committed
  case " $GENERATED " in *" $f "*) continue ;; esac
  if [ "$all" -eq 0 ] && grep -qxF "$f" "$tmp/pending"; then
    skipped=$((skipped + 1))
    if "$CF" --dry-run --Werror "$f" >/dev/null 2>&1; then
      echo "$f is formatted: delete its line from $PENDING"
      bad=1
    fi
    continue
  fi
  checked=$((checked + 1))
  if ! "$CF" --dry-run --Werror "$f" >/dev/null 2>&1; then
    echo "$f"
    bad=1
  fi
done < "$tmp/all"

if [ "$bad" -ne 0 ]; then
  echo "check-format: the files above are not as .clang-format says" \
       "($CF --dry-run --Werror FILE shows where; $CF -i FILE fixes)" >&2
  exit 1
fi
if [ "$skipped" -gt 0 ]; then
  echo "check-format: $checked files formatted ($CF); $skipped not checked" \
       "yet ($PENDING)"
else
  echo "check-format: $checked files formatted ($CF)"
fi
