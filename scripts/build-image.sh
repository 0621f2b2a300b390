#!/bin/sh
# build-image.sh - build the attnd image: attnd:<version> and attnd:latest.
#
#   scripts/build-image.sh
#
# Uses the engine DOCKER_HOST (or the default socket) names; run
# `eval "$(scripts/docker-engine.sh start)"` first on a machine without one.
# Makes debian:bookworm-slim available first (scripts/base-image.sh: pulled,
# or built from Debian's archive where no registry answers), then builds
# with the classic builder and host networking (the build stage installs
# Debian packages; no bridge network is needed).  Prints the image size.
set -eu
cd "$(dirname "$0")/.."

version=$(sed -n "s/^ *version *: *'\([^']*\)'.*/\1/p" meson.build | head -1)
revision=$(git rev-parse HEAD 2>/dev/null || echo unknown)
source=$(git remote get-url origin 2>/dev/null || echo unknown)

scripts/base-image.sh
log=$(mktemp /tmp/attnd-build.XXXXXX)
echo "build-image: building attnd:$version (log: $log)" >&2
if ! DOCKER_BUILDKIT=0 docker build --network host --pull=false \
  --build-arg VERSION="$version" --build-arg REVISION="$revision" \
  --build-arg SOURCE="$source" \
  -t "attnd:$version" -t attnd:latest . >"$log" 2>&1; then
  tail -40 "$log" >&2
  echo "build-image: the build failed (whole log: $log)" >&2
  exit 1
fi
grep -E '^[0-9]+%: Checks' "$log" | sed 's/^/build-image: unit tests in the build stage: /' >&2 || true
rm -f "$log"
bytes=$(docker image inspect -f '{{.Size}}' attnd:latest)
echo "build-image: attnd:$version (attnd:latest), $((bytes / 1000000)) MB ($bytes bytes)"
