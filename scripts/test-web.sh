#!/bin/bash
# The browser test of attnd's page (GET /, web/): tests/web/run.mjs in
# Debian's chromium, headless, against an attnd of its own on 127.0.0.1.
#
#   scripts/test-web.sh [--attnd PATH] [run.mjs options: -k NAME, --readme-shot PNG]
#
# Installs what it needs on a fresh Debian 12 (as root, or with sudo):
# chromium, a font, Node.js, npm and curl from Debian's packages, and the
# npm packages pinned in tests/web/package-lock.json (playwright-core only;
# it drives /usr/bin/chromium, no browser is downloaded) into build/web-test
# (not committed).  Then starts attnd (--attnd, else $TEST_WEB_ATTND, else
# build/src/attnd, which `make` builds) on an ephemeral port of 127.0.0.1
# with the models of config/models, and a second one with an API key, runs
# the test, and stops both with SIGTERM (each must exit 0).  Screenshots go to build/web-test/*.png.
#
# Output: the test's "ok"/"FAIL" lines, its measurements ("# draw ...")
# and "N passed, M failed"; the exit status is 1 when anything failed.
# Bounded: apt waits at most 10 minutes for another apt, npm and the test
# at most 10 minutes each, attnd 15 s to start and 30 s to stop.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
ROOT=$PWD
DEPS=$ROOT/build/web-test
export DEBIAN_FRONTEND=noninteractive

ATTND=${TEST_WEB_ATTND:-$ROOT/build/src/attnd}
PASS=()
while [ $# -gt 0 ]; do
  case "$1" in
    --attnd) ATTND=$2; shift 2 ;;
    *) PASS+=("$1"); shift ;;
  esac
done

say() { echo "test-web: $*"; }
die() { echo "test-web: $*" >&2; exit 1; }

# ------------------------------------------------------------- installs

SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
pkgs=()
[ -x /usr/bin/chromium ] || pkgs+=(chromium)
fc-list 2>/dev/null | grep -q . || pkgs+=(fonts-dejavu-core)
command -v node >/dev/null || pkgs+=(nodejs)
command -v npm >/dev/null || pkgs+=(npm)
command -v curl >/dev/null || pkgs+=(curl)
if [ "${#pkgs[@]}" -gt 0 ]; then
  say "installing ${pkgs[*]}"
  APT=($SUDO apt-get -o DPkg::Lock::Timeout=600 -q)
  if ! { "${APT[@]}" update -qq && "${APT[@]}" install -y -qq --no-install-recommends "${pkgs[@]}" >/dev/null; }; then
    die "apt-get install ${pkgs[*]} failed"
  fi
fi
if ! cmp -s tests/web/package-lock.json "$DEPS/package-lock.json" || [ ! -d "$DEPS/node_modules/playwright-core" ]; then
  say "installing the npm packages of tests/web into build/web-test"
  mkdir -p "$DEPS"
  rm -rf "$DEPS/node_modules" "$DEPS/package.json" "$DEPS/package-lock.json"
  if ! { cp tests/web/package.json tests/web/package-lock.json "$DEPS/" &&
    (cd "$DEPS" && PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 timeout 600 npm ci --no-audit --no-fund --ignore-scripts --loglevel=error); }; then
    rm -rf "$DEPS/node_modules" "$DEPS/package-lock.json"
    die "npm ci failed"
  fi
fi
[ -x "$ATTND" ] || die "no attnd binary at $ATTND (run make, or pass --attnd PATH)"

# ----------------------------------------------------------- the servers
# Two: one as `make run` starts it, and one with an API key (KEYED_KEY),
# for the test of the page with keys on (run.mjs --keyed-base).

KEYED_KEY=web-test-key
PIDS=()
LOGS=()
start() { # start NAME [VAR=VALUE]: PORT of the new attnd, or exit 1
  local log
  log=$(mktemp /tmp/attnd-web-test.XXXXXX.log)
  LOGS+=("$log")
  env "${@:2}" "$ATTND" --host 127.0.0.1 --port 0 --models-dir config/models \
    --log-format json --access-log false </dev/null >/dev/null 2>"$log" &
  local pid=$!
  PIDS+=("$pid")
  PORT=""
  for _ in $(seq 150); do
    PORT=$(grep -o 'listening on 127\.0\.0\.1:[0-9]*' "$log" | head -1 | sed 's/.*://')
    [ -n "$PORT" ] && return 0
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  say "attnd ($1) did not start; its log:"
  cat "$log"
  exit 1
}
stop() { # every attnd started: SIGTERM, exit 0 within 30 s
  local rc=0 pid log n i
  for i in "${!PIDS[@]}"; do
    pid=${PIDS[$i]}
    log=${LOGS[$i]}
    kill -TERM "$pid" 2>/dev/null
    n=0
    while kill -0 "$pid" 2>/dev/null && [ $n -lt 300 ]; do sleep 0.1; n=$((n + 1)); done
    if kill -0 "$pid" 2>/dev/null; then
      kill -KILL "$pid" 2>/dev/null
      wait "$pid" 2>/dev/null
      say "attnd did not stop within 30 s of SIGTERM (killed)"
      rc=1
      continue
    fi
    wait "$pid"
    local st=$?
    [ $st -eq 0 ] || { say "attnd exited $st after SIGTERM; its log:"; tail -20 "$log"; rc=1; }
  done
  PIDS=()
  return $rc
}
trap 'stop; rm -f "${LOGS[@]}"' EXIT

start plain
BASE=http://127.0.0.1:$PORT
start keyed ATTND_API_KEY=$KEYED_KEY
KEYED=http://127.0.0.1:$PORT
say "attnd $("$ATTND" --version 2>/dev/null | head -1) on ${BASE#http://} (and with an API key on ${KEYED#http://}), chromium $(/usr/bin/chromium --version 2>/dev/null | awk '{print $2}'), node $(node --version)"

timeout 600 node tests/web/run.mjs --base "$BASE" --keyed-base "$KEYED" \
  --keyed-key "$KEYED_KEY" --deps "$DEPS" --out "$DEPS" "${PASS[@]}"
rc=$?
stop || rc=1
exit $rc
