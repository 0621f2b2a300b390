#!/bin/bash
# test-container.sh - build the attnd image and check it as an operator runs
# it.  Run by .ci/run; needs root (it may install and start a Docker engine,
# scripts/docker-engine.sh, and stops only what it started).
#
#  1. The image: built by scripts/build-image.sh; its size (under 200 MB),
#     user 10001, port 8080, exec-form entrypoint, SIGTERM, a healthcheck,
#     the OCI labels.
#  2. Read-only root filesystem, uid 10001, --memory 512m, --cpus 1:
#     Docker's HEALTHCHECK (attnd --healthcheck) turns healthy; attnd chose
#     one worker (the CPU quota) and half of 512 MiB for bodies (the memory
#     limit); one inference through /v1/attention, one through v2 JSON, one
#     v2 binary, and the demo model baked into /models.
#  3. Another uid (--user 4242:4242) with a models folder of its own mounted
#     at /models, read-only: that model is served.
#  4. SIGTERM while a request is running: the request gets its full answer
#     and the container exits 0 within the drain timeout.
#  5. A port given as a flag after the image name (docker run IMAGE --port
#     P, which only PID 1 sees), read-only, another uid: the HEALTHCHECK
#     (attnd --healthcheck alone, which takes PID 1's settings) turns
#     healthy; `docker exec C attnd --reload` (no shell, no kill in the
#     image) reloads it and exits 0 once attnd confirmed.
# And the build: no image of the build stage left behind (no new dangling
# image), the revision label is the git revision.
# Containers run with --network host on 127.0.0.1 ports; every wait is
# bounded.  Prints "N passed, M failed" last.
set -euo pipefail
cd "$(dirname "$0")/.."

PORT=${ATTND_TEST_PORT:-18180}
PORT2=$((PORT + 1))
PORT3=$((PORT + 2))
CLIENT="python3 tests/deploy/client.py"
NAME=attnd-test-$$
passed=0
failed=0
work=$(mktemp -d /tmp/attnd-ct.XXXXXX)
chmod 755 "$work"

ok() { echo "ok $1"; passed=$((passed + 1)); }
# $health: the Docker health of container $1 once healthy, gone or
# stopped, or after 60 s
wait_health() {
  health=""
  for _ in $(seq 120); do
    health=$(docker inspect -f '{{.State.Health.Status}}' "$1" 2>/dev/null || echo gone)
    [ "$health" = healthy ] || [ "$health" = gone ] && break
    [ "$(docker inspect -f '{{.State.Running}}' "$1")" = true ] || break
    sleep 0.5
  done
}
bad() { echo "FAIL $1: $2"; failed=$((failed + 1)); }

eval "$(scripts/docker-engine.sh start)"
cleanup() {
  docker rm -f "$NAME-1" "$NAME-2" "$NAME-3" >/dev/null 2>&1 || true
  rm -rf "$work"
  [ -z "${ATTND_DOCKER_STARTED:-}" ] || scripts/docker-engine.sh stop
}
trap cleanup EXIT

for p in "$PORT" "$PORT2" "$PORT3"; do
  if python3 -c "import socket,sys; s=socket.socket(); sys.exit(s.connect_ex(('127.0.0.1', $p)) != 0)"; then
    echo "test-container: port $p is in use; set ATTND_TEST_PORT" >&2
    exit 1
  fi
done

# ---- 1. the image ----------------------------------------------------------
dangling_before=$(docker images -q --filter dangling=true | sort)
scripts/build-image.sh | tee "$work/build.out"
new_dangling=$(comm -13 <(echo "$dangling_before") <(docker images -q --filter dangling=true | sort) | grep . || true)
stage=$(docker images -q --filter label=org.attnd.stage=build)
if [ -z "$new_dangling" ] && [ -z "$stage" ]; then
  ok "no build-stage image left behind (no new dangling image)"
else
  bad "images left behind" "new dangling: $(echo "$new_dangling" | tr '\n' ' '); build stage: $(echo "$stage" | tr '\n' ' ')"
fi
rev=$(docker image inspect -f '{{index .Config.Labels "org.opencontainers.image.revision"}}' attnd:latest)
want_rev=$(git rev-parse HEAD 2>/dev/null || echo unknown)
if [ "$rev" = "$want_rev" ]; then
  ok "revision label $rev"
else
  bad "revision label" "'$rev', not '$want_rev'"
fi
bytes=$(docker image inspect -f '{{.Size}}' attnd:latest)
if [ "$bytes" -lt 200000000 ]; then
  ok "image size $((bytes / 1000000)) MB (under 200 MB)"
else
  bad "image size" "$bytes bytes, over 200 MB"
fi
cfg=$(docker image inspect -f '{{.Config.User}}|{{json .Config.ExposedPorts}}|{{json .Config.Entrypoint}}|{{.Config.StopSignal}}|{{json .Config.Healthcheck.Test}}|{{index .Config.Labels "org.opencontainers.image.title"}}|{{index .Config.Labels "org.opencontainers.image.version"}}|{{index .Config.Labels "org.opencontainers.image.licenses"}}' attnd:latest)
want='10001|{"8080/tcp":{}}|["/usr/local/bin/attnd"]|SIGTERM|["CMD","/usr/local/bin/attnd","--healthcheck"]|attnd|'
case "$cfg" in
  "$want"*"|MIT") ok "image config: $cfg" ;;
  *) bad "image config" "$cfg" ;;
esac

# ---- 2. read-only, non-root, memory and CPU limits -------------------------
docker run -d --name "$NAME-1" --network host --read-only --memory 512m \
  --cpus 1 -e ATTND_HOST=127.0.0.1 -e ATTND_PORT="$PORT" attnd:latest >/dev/null
wait_health "$NAME-1"
if [ "$health" = healthy ]; then
  ok "HEALTHCHECK (attnd --healthcheck) healthy"
else
  bad "HEALTHCHECK" "status '$health': $(docker logs "$NAME-1" 2>&1 | tail -3)"
fi
start=$(docker logs "$NAME-1" 2>&1 | grep -m1 'listening on' || true)
uid=$(docker exec "$NAME-1" cat /proc/1/status 2>/dev/null | awk '/^Uid:/ {print $2}' || true)
[ "$uid" = 10001 ] && ok "runs as uid 10001, PID 1" || bad "uid" "PID 1 has uid '$uid'"
case "$start" in
  *"workers=1 "*) ok "workers=1 under --cpus 1 (auto)" ;;
  *) bad "workers from --cpus 1" "$start" ;;
esac
case "$start" in
  *"max_total_body_bytes=268435456 (auto)"*) ok "body budget 256 MiB under --memory 512m (auto)" ;;
  *) bad "body budget from --memory 512m" "$start" ;;
esac
if $CLIENT infer "$PORT"; then
  ok "inference: /v1, v2 JSON, v2 binary, demo model from /models"
else
  bad "inference" "see above"
fi

# ---- 3. any uid, a models folder of one's own --------------------------------
mkdir -p "$work/models"
cp config/models/demo.safetensors "$work/models/"
sed 's/"name": "demo"/"name": "mine"/' config/models/demo.json >"$work/models/mine.json"
chmod -R a+rX "$work/models"
docker run -d --name "$NAME-2" --network host --read-only --user 4242:4242 \
  -v "$work/models:/models:ro" -e ATTND_HOST=127.0.0.1 -e ATTND_PORT="$PORT2" \
  attnd:latest >/dev/null
if $CLIENT wait-ready "$PORT2" 30 &&
  python3 -c "import urllib.request as u; u.urlopen('http://127.0.0.1:$PORT2/v2/models/mine/ready', timeout=5)"; then
  ok "--user 4242:4242 with /models mounted: model 'mine' ready"
else
  bad "--user 4242 with /models mounted" "$(docker logs "$NAME-2" 2>&1 | tail -3)"
fi
docker rm -f "$NAME-2" >/dev/null

# ---- 4. SIGTERM while a request runs ---------------------------------------
$CLIENT slow "$PORT" --seconds 2 >"$work/slow.out" 2>&1 &
slow=$!
for _ in $(seq 100); do
  grep -q '^sent' "$work/slow.out" && break
  sleep 0.1
done
sleep 0.3
docker kill --signal TERM "$NAME-1" >/dev/null
code=$(timeout 40 docker wait "$NAME-1" || echo "none within 40 s")
if wait "$slow"; then
  ok "request running at SIGTERM: $(tail -1 "$work/slow.out")"
else
  bad "request running at SIGTERM" "$(tail -2 "$work/slow.out")"
fi
[ "$code" = 0 ] && ok "exit code 0 after SIGTERM ($(docker logs "$NAME-1" 2>&1 | grep -o 'drained in [0-9]* ms' || true))" ||
  bad "exit after SIGTERM" "exit code $code: $(docker logs "$NAME-1" 2>&1 | tail -2)"

# ---- 5. --port as a flag: HEALTHCHECK, and attnd --reload -------------------
docker run -d --name "$NAME-3" --network host --read-only --user 4242:4242 \
  -e ATTND_HOST=127.0.0.1 attnd:latest --port "$PORT3" >/dev/null
wait_health "$NAME-3"
if [ "$health" = healthy ]; then
  ok "HEALTHCHECK healthy with --port $PORT3 given to PID 1 only"
else
  bad "HEALTHCHECK with --port $PORT3" "status '$health': $(docker inspect -f '{{range .State.Health.Log}}{{.Output}}{{end}}' "$NAME-3" 2>&1 | tail -2)"
fi
rc=0
out=$(docker exec "$NAME-3" /usr/local/bin/attnd --reload 2>&1) || rc=$?
if [ "$rc" = 0 ] && echo "$out" | grep -q "attnd (pid 1, port $PORT3) reloaded" &&
  docker logs "$NAME-3" 2>&1 | grep -q "confirmed to pid"; then
  ok "docker exec attnd --reload: $out"
else
  bad "docker exec attnd --reload" "exit $rc: $out"
fi
docker rm -f "$NAME-3" >/dev/null

echo "test-container: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
