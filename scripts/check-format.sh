#!/bin/sh
# Check that the C sources (every .c and .h of src/, include/, tests/ and
# bench/, tracked or new, but for generated ones) are formatted as
# .clang-format says, with clang-format 14: Debian 12's, pinned because
# clang-format's versions lay the same code out differently.  Installs
# clang-format-14 when it is missing (apt-get, as root or with sudo); with
# --skip-missing (the lint suite of meson test) it installs nothing and
# skips instead (exit 77, meson's "skipped"): scripts/install-deps.sh
# --test, which `make test` and CI run, installs it.
#
# Usage: scripts/check-format.sh [--skip-missing]
# Exits 1 naming each file that is not formatted, 0 when all are, 2 when
# clang-format 14 cannot be had, 77 when --skip-missing skipped.
set -eu
cd "$(dirname "$0")/.."
CF=clang-format-14
# Written by a program, not by hand: not checked.
GENERATED="src/json/pow5_128.h"

skip_missing=0
case "${1:-}" in
  --skip-missing) skip_missing=1 ;;
  "") ;;
  *) echo "usage: $0 [--skip-missing]" >&2; exit 2 ;;
esac

if ! command -v "$CF" >/dev/null 2>&1; then
  if [ "$skip_missing" -eq 1 ]; then
    echo "check-format: skipped: $CF is not installed" \
         "(scripts/install-deps.sh --test installs it)"
    exit 77
  fi
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

if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  git ls-files --cached --others --exclude-standard -- \
    'src/*.[ch]' 'include/*.[ch]' 'tests/*.[ch]' 'bench/*.[ch]'
else
  find src include tests bench -name '*.[ch]'
fi | sort -u | {
  bad=0 checked=0
  while IFS= read -r f; do
    [ -f "$f" ] || continue # deleted, not yet committed
    case " $GENERATED " in *" $f "*) continue ;; esac
    checked=$((checked + 1))
    if ! "$CF" --dry-run --Werror "$f" >/dev/null 2>&1; then
      echo "$f"
      bad=1
    fi
  done
  if [ "$bad" -ne 0 ]; then
    echo "check-format: the files above are not as .clang-format says" \
         "($CF --dry-run --Werror FILE shows where; $CF -i FILE fixes)" >&2
    exit 1
  fi
  echo "check-format: $checked files formatted ($CF)"
}
