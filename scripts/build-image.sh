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
#
# The classic builder leaves the build stage's image behind, untagged
# (about 750 MB: compilers, -dev packages, the build tree).  The Dockerfile
# labels that stage org.attnd.stage=build; after the build the untagged
# images with that label, and only those, are removed (so the next build
# runs the build stage again).  ATTND_KEEP_BUILD_STAGE=1 keeps them, as a
# cache for builds one after another.  The attnd:latest a build replaces
# is removed too once untagged, unless a container still uses it.
set -eu
cd "$(dirname "$0")/.."

version=$(sed -n "s/^ *version *: *'\([^']*\)'.*/\1/p" meson.build | head -1)
revision=$(git rev-parse HEAD 2>/dev/null || echo unknown)
source=$(git remote get-url origin 2>/dev/null || echo unknown)

scripts/base-image.sh
# the image attnd:latest was before, if any: replaced by this build
before=$(docker image inspect -f '{{.Id}}' attnd:latest 2>/dev/null || true)
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
if [ -z "${ATTND_KEEP_BUILD_STAGE:-}" ]; then
  # dangling (untagged, unused) images of the build stage only: an image
  # of the user's is never dangling with this label
  left=$(docker images -q --filter dangling=true --filter label=org.attnd.stage=build)
  if [ -n "$left" ]; then
    # shellcheck disable=SC2086 # a list of ids
    docker rmi $left >/dev/null
    echo "build-image: removed the build stage's image ($(echo "$left" | wc -w) untagged; ATTND_KEEP_BUILD_STAGE=1 keeps it)" >&2
  fi
fi
# the attnd:latest this build replaced, now untagged: removed unless a
# container still uses it (then docker refuses and it stays)
if [ -n "$before" ] && [ "$before" != "$(docker image inspect -f '{{.Id}}' attnd:latest)" ] &&
  [ "$(docker image inspect -f '{{len .RepoTags}}' "$before" 2>/dev/null)" = 0 ] &&
  docker rmi "$before" >/dev/null 2>&1; then
  echo "build-image: removed the attnd:latest it replaced (${before#sha256:})" >&2
fi
bytes=$(docker image inspect -f '{{.Size}}' attnd:latest)
echo "build-image: attnd:$version (attnd:latest), $((bytes / 1000000)) MB ($bytes bytes)"
