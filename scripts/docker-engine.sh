#!/bin/sh
# docker-engine.sh - a Docker engine for the container and compose tests.
#
#   scripts/docker-engine.sh start   print DOCKER_HOST=... for an engine that
#                                    answers, starting one if none does
#   scripts/docker-engine.sh stop    stop the engine `start` started (and only
#                                    that one)
#
# An engine that already answers (DOCKER_HOST, or the default socket) is used
# as it is.  Otherwise this installs Debian's docker.io (dockerd, containerd,
# runc) and docker-compose (v1) when they are missing, and starts dockerd on
# a socket of its own under /tmp/attnd-docker, without a bridge network or
# iptables rules (the tests run every container with --network host, on
# 127.0.0.1), so nothing on the machine's network changes.  Needs root.
#
# Use:  eval "$(scripts/docker-engine.sh start)"; ...
#       [ -z "${ATTND_DOCKER_STARTED:-}" ] || scripts/docker-engine.sh stop
# (ATTND_DOCKER_STARTED is set when `start` started the engine.)
set -eu

DIR=/tmp/attnd-docker
SOCK="unix://$DIR/docker.sock"
PIDFILE="$DIR/dockerd.pid"

say() { echo "docker-engine: $*" >&2; }

answers() { DOCKER_HOST="$1" docker version --format '{{.Server.Version}}' >/dev/null 2>&1; }

# What an engine of ours that did not stop cleanly left behind: its
# exec-root keeps a network namespace mounted (exec/netns/default), which
# makes a plain rm fail with "Device or resource busy".  Unmount what is
# mounted there, deepest first, then remove it.  The images under $DIR/data
# are kept: they are the build cache.
clean_exec() {
  awk -v d="$DIR/exec" 'index($2, d) == 1 { print $2 }' /proc/mounts |
    sort -r | while read -r m; do umount -l "$m" || true; done
  rm -rf "$DIR/exec" "$DIR/docker.sock"
}

install_missing() {
  missing=""
  command -v dockerd >/dev/null 2>&1 || [ -x /usr/sbin/dockerd ] || missing="$missing docker.io"
  command -v docker >/dev/null 2>&1 || missing="$missing docker.io"
  command -v docker-compose >/dev/null 2>&1 || missing="$missing docker-compose"
  [ -z "$missing" ] && return 0
  say "installing$missing"
  export DEBIAN_FRONTEND=noninteractive
  apt-get -o DPkg::Lock::Timeout=600 update -qq >&2
  # shellcheck disable=SC2086 # a list of package names
  apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends $missing >&2
}

start() {
  install_missing
  for h in "${DOCKER_HOST:-}" unix:///var/run/docker.sock "$SOCK"; do
    [ -n "$h" ] || continue
    if answers "$h"; then
      say "using the engine at $h"
      echo "export DOCKER_HOST=$h; unset ATTND_DOCKER_STARTED"
      return 0
    fi
  done
  mkdir -p "$DIR"
  if [ -f "$PIDFILE" ] && ! kill -0 "$(cat "$PIDFILE")" 2>/dev/null; then
    rm -f "$PIDFILE"
  fi
  [ -f "$PIDFILE" ] || clean_exec
  say "starting dockerd on $SOCK (log: $DIR/dockerd.log)"
  # setsid: the engine outlives this shell; `stop` ends it
  PATH="/usr/sbin:$PATH" setsid dockerd --host "$SOCK" --data-root "$DIR/data" \
    --exec-root "$DIR/exec" --pidfile "$PIDFILE" --bridge=none \
    --iptables=false --ip6tables=false >"$DIR/dockerd.log" 2>&1 </dev/null &
  i=0
  while ! answers "$SOCK"; do
    i=$((i + 1))
    if [ "$i" -gt 120 ]; then
      say "dockerd did not answer within 60 s:"
      tail -20 "$DIR/dockerd.log" >&2
      exit 1
    fi
    sleep 0.5
  done
  echo "export DOCKER_HOST=$SOCK ATTND_DOCKER_STARTED=1"
}

stop() {
  [ -f "$PIDFILE" ] || { say "no engine of ours is running"; return 0; }
  pid=$(cat "$PIDFILE")
  if kill -0 "$pid" 2>/dev/null; then
    # stop our containers first, so none is left behind
    ids=$(DOCKER_HOST="$SOCK" docker ps -q 2>/dev/null || true)
    # shellcheck disable=SC2086 # a list of ids
    [ -z "$ids" ] || DOCKER_HOST="$SOCK" docker rm -f $ids >/dev/null 2>&1 || true
    kill -TERM "$pid"
    i=0
    while kill -0 "$pid" 2>/dev/null && [ "$i" -lt 60 ]; do
      sleep 0.5
      i=$((i + 1))
    done
    kill -0 "$pid" 2>/dev/null && kill -KILL "$pid"
    say "stopped dockerd ($pid)"
  fi
  rm -f "$PIDFILE"
  clean_exec
}

case "${1:-}" in
  # `start` runs in a shell of its own so that any failure under set -e ends
  # in `false` for the caller's eval: an empty output would eval to success
  # and leave the caller talking to no engine
  start) out=$(sh "$0" start-here) || { echo false; exit 1; }; echo "$out" ;;
  start-here) start ;;
  stop) stop ;;
  *) echo "usage: $0 start|stop" >&2; exit 2 ;;
esac
