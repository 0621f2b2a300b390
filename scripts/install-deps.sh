#!/bin/sh
# Install the Debian 12 packages attnd needs to build, run and test, if any
# is missing.  Needs root (or sudo) for apt-get; does nothing when all are
# present.  --test adds what the tests need, --fuzz what the libFuzzer
# targets need (clang with its sanitizer runtimes: tests/fuzz/run.sh).
# Usage: scripts/install-deps.sh [--test|--fuzz]
set -eu
# python3-yaml: the build converts docs/openapi.yaml to JSON (scripts/openapi_json.py)
PKGS="build-essential meson ninja-build pkg-config libopenblas-dev libcjson-dev libmicrohttpd-dev libgnutls28-dev zlib1g-dev python3-yaml"
if [ "${1:-}" = "--test" ]; then
  # python3-jsonschema: tests/integration/test_openapi.py; python3-numpy:
  # tests/integration/test_precision.py and the Python client's test
  # (clients/python/test_attnd_client.py, run with /usr/bin/python3); python3-torch
  # (large: libtorch and its dependencies, some hundreds of MB): the decoder
  # example's test (examples/decode/test_generate.py); clang-format-14: scripts/check-format.sh
  # (the lint suite skips it where it is missing)
  PKGS="$PKGS check libsubunit-dev curl python3 prometheus python3-numpy python3-torch openssl python3-jsonschema clang-format-14"
fi
if [ "${1:-}" = "--fuzz" ]; then
  PKGS="$PKGS clang libclang-rt-14-dev python3"
fi
missing=""
for p in $PKGS; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
echo "install-deps: installing$missing"
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
$SUDO apt-get -o DPkg::Lock::Timeout=600 update
DEBIAN_FRONTEND=noninteractive $SUDO apt-get -o DPkg::Lock::Timeout=600 install -y --no-install-recommends $missing
