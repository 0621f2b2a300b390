#!/bin/bash
# Lint the API description, docs/openapi.yaml, with Redocly's CLI
# (@redocly/cli, pinned in scripts/openapi-lint/package-lock.json and
# installed into build/openapi-lint, not committed), its recommended rules
# plus the ones .redocly.yaml adds; any error fails.  The warnings allowed
# are in .redocly.yaml, each with its reason.  Then a self-test: a broken
# copy of the document (a $ref to nothing) must fail the lint, so that a
# lint that checks nothing cannot pass.
#
#   scripts/check-openapi.sh
#
# Installs Node.js and npm from Debian's packages when missing (as root, or
# with sudo).  npm and the lint are bounded (10 and 5 minutes).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
DEPS=$ROOT/build/openapi-lint
say() { echo "check-openapi: $*"; }
die() { echo "check-openapi: $*" >&2; exit 1; }

SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
pkgs=()
command -v node >/dev/null || pkgs+=(nodejs)
command -v npm >/dev/null || pkgs+=(npm)
if [ "${#pkgs[@]}" -gt 0 ]; then
  say "installing ${pkgs[*]}"
  APT=($SUDO apt-get -o DPkg::Lock::Timeout=600 -q)
  if ! { "${APT[@]}" update -qq && DEBIAN_FRONTEND=noninteractive "${APT[@]}" install -y -qq --no-install-recommends "${pkgs[@]}" >/dev/null; }; then
    die "apt-get install ${pkgs[*]} failed"
  fi
fi
if ! cmp -s scripts/openapi-lint/package-lock.json "$DEPS/package-lock.json" || [ ! -x "$DEPS/node_modules/.bin/redocly" ]; then
  say "installing the npm packages of scripts/openapi-lint into build/openapi-lint"
  rm -rf "$DEPS"
  mkdir -p "$DEPS"
  if ! { cp scripts/openapi-lint/package.json scripts/openapi-lint/package-lock.json "$DEPS/" &&
    (cd "$DEPS" && timeout 600 npm ci --no-audit --no-fund --ignore-scripts --loglevel=error); }; then
    rm -rf "$DEPS"
    die "npm ci failed"
  fi
fi
REDOCLY=("$DEPS/node_modules/.bin/redocly")
export REDOCLY_TELEMETRY=off REDOCLY_SUPPRESS_UPDATE_NOTICE=true

say "redocly lint docs/openapi.yaml (.redocly.yaml)"
timeout 300 "${REDOCLY[@]}" lint --config .redocly.yaml --format stylish docs/openapi.yaml ||
  die "docs/openapi.yaml: the lint found errors (above)"

# The self-test: the same document with a dangling $ref must fail.
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
sed 's|#/components/schemas/Error|#/components/schemas/NoSuchSchema|' docs/openapi.yaml >"$TMP/openapi.yaml"
cmp -s docs/openapi.yaml "$TMP/openapi.yaml" && die "self-test: could not break the document"
cp .redocly.yaml "$TMP/"
if timeout 300 "${REDOCLY[@]}" lint --config "$TMP/.redocly.yaml" --format stylish "$TMP/openapi.yaml" >"$TMP/out" 2>&1; then
  cat "$TMP/out" >&2
  die "self-test: a dangling \$ref passed the lint"
fi
grep -q "no-unresolved-refs" "$TMP/out" || { cat "$TMP/out" >&2; die "self-test: the lint failed for another reason"; }
say "ok (and a dangling \$ref fails it)"
