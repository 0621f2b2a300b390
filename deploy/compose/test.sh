#!/bin/bash
# deploy/compose/test.sh - three attnd replicas behind HAProxy
# (compose.yaml), under a steady load, lose a replica and are restarted one
# at a time, and no client request fails.  Run by .ci/run; needs root (it
# may install and start a Docker engine and docker-compose,
# scripts/docker-engine.sh, and stops only what it started).
#
#  1. Every replica answers through the balancer (HAProxy's X-Served-By).
#  2. Replica loss: under load, attnd-2 is killed (SIGKILL) and started
#     again; no request fails, and attnd-2 serves again afterwards.
#  3. Rolling restart: under load, each replica in turn gets SIGTERM (exit
#     code 0), is started again and is ready before the next; no request
#     fails.
#  4. Sessions: 60 sessions in 20 affinity groups decode 50 steps each
#     through HAProxy (tests/deploy/sessions.py: v2 kv_attention batches
#     with the X-Attnd-Affinity header, /v1 steps with it and without it),
#     every answer checked against a float64 reference and every group
#     kept to one replica; attnd-3 is killed halfway: its groups' sessions
#     answer 404 "not found" and are created and prefilled again, every
#     other session's steps succeed on the replica they had.
#  5. Sessions across a rolling restart (each replica's session_dir is a
#     volume of its own): 30 sessions in 10 groups decode through HAProxy
#     (tests/deploy/sessions_restart.py) while each replica in turn gets
#     SIGTERM (it drains and saves its sessions; exit code 0) and is
#     started again (it loads them).  A group's steps are held while its
#     replica is away (HAProxy sends them elsewhere: 404, sent again with
#     a backoff) and resume on it when it is back: no step fails, no
#     session is lost, every answer after the restarts matches the
#     float64 reference, and the replicas' logs count 30 sessions saved
#     and 30 loaded.
# The load is tests/deploy/client.py: 4 threads of small /v1 and v2
# requests to 127.0.0.1:8080, bounded in time.  Prints the counts, then
# "N passed, M failed" last.
set -euo pipefail
cd "$(dirname "$0")/../.."

export COMPOSE_PROJECT_NAME=attnd-compose-test
export COMPOSE_DOCKER_CLI_BUILD=0 DOCKER_BUILDKIT=0
COMPOSE="docker-compose -f deploy/compose/compose.yaml"
CLIENT="python3 tests/deploy/client.py"
LB=8080
THREADS=4
passed=0
failed=0
work=$(mktemp -d /tmp/attnd-compose.XXXXXX)

ok() { echo "ok $1"; passed=$((passed + 1)); }
bad() { echo "FAIL $1: $2"; failed=$((failed + 1)); }

eval "$(scripts/docker-engine.sh start)"
cleanup() {
  $COMPOSE logs --no-color >"$work/compose.log" 2>&1 || true
  if [ "$failed" -gt 0 ] || [ -n "${KEEP_LOGS:-}" ]; then
    echo "compose logs (last 40 lines of $(wc -l <"$work/compose.log")):"
    tail -40 "$work/compose.log"
  fi
  $COMPOSE down -v --timeout 5 >/dev/null 2>&1 || true
  rm -rf "$work"
  [ -z "${ATTND_DOCKER_STARTED:-}" ] || scripts/docker-engine.sh stop
}
trap cleanup EXIT

for p in 8080 8081 8082 8083; do
  if python3 -c "import socket,sys; s=socket.socket(); sys.exit(s.connect_ex(('127.0.0.1', $p)) != 0)"; then
    echo "compose test: port $p is in use (the stack needs 8080-8083)" >&2
    exit 1
  fi
done

# `up --build` labels the image with ATTND_REVISION (compose.yaml's build
# args), as build-image.sh labels it with the git revision
rev=$(git rev-parse HEAD 2>/dev/null || echo unknown)
if ATTND_REVISION=$rev $COMPOSE config | grep -q "REVISION: $rev"; then
  ok "compose --build passes ATTND_REVISION=$rev as the revision label"
else
  bad "compose revision" "$($COMPOSE config | grep -m1 REVISION)"
fi
scripts/build-image.sh
$COMPOSE build lb >/dev/null
# no session_dir volume left by an earlier run (its sessions would load)
$COMPOSE down -v --timeout 5 >/dev/null 2>&1 || true
$COMPOSE up -d --no-build
for p in 8081 8082 8083 $LB; do $CLIENT wait-ready $p 60; done

# counts of one load run: "ok failed replicas", the JSON line kept in $work
load() { # seconds name [--stop FILE]
  local secs=$1 name=$2
  shift 2
  $CLIENT load $LB "$secs" $THREADS "$@" >"$work/$name.json"
}
# SIGTERM replica r (compose stop), add its exit code to $codes, start it
# again and wait until it is ready
restart() { # attnd-N
  local id
  id=$($COMPOSE ps -q "$1")
  $COMPOSE stop --timeout 45 "$1" >/dev/null 2>&1
  code=$(docker inspect -f '{{.State.ExitCode}}' "$id")
  codes="$codes $1=$code"
  $COMPOSE start "$1" >/dev/null 2>&1
  $CLIENT wait-ready "808${1#attnd-}" 60
}
field() { # name python-expression-of-c
  python3 -c "import json,sys; c=json.load(open('$work/$1.json')); print($2)"
}
report() { # name what
  echo "  $2: $(field "$1" "c['ok']") ok, $(field "$1" "c['failed']") failed, by replica $(field "$1" "c['replica']"), by status $(field "$1" "c['status']")"
  [ "$(field "$1" "c['failed']")" = 0 ] || field "$1" "'\n'.join(c['failures'])"
}
replicas() { field "$1" "' '.join(sorted(k for k in c['replica'] if c['replica'][k] > 0))"; }

# HAProxy marks a replica up after two good checks a second apart
all3=""
for _ in $(seq 20); do
  load 1 warm
  all3=$(replicas warm)
  [ "$all3" = "attnd-1 attnd-2 attnd-3" ] && break
done

# ---- 1. every replica answers ----------------------------------------------
load 4 every
report every "steady load, 4 s"
if [ "$(replicas every)" = "attnd-1 attnd-2 attnd-3" ] && [ "$(field every "c['failed']")" = 0 ]; then
  ok "every replica answers through the balancer"
else
  bad "every replica answers" "replicas '$(replicas every)'"
fi

# ---- 2. a replica killed, then started again ---------------------------------
id2=$($COMPOSE ps -q attnd-2)
load 60 loss --stop "$work/stop-loss" &
pid=$!
sleep 3
docker kill --signal KILL "$id2" >/dev/null
echo "  attnd-2 killed (SIGKILL)"
sleep 4
$COMPOSE start attnd-2 >/dev/null 2>&1
$CLIENT wait-ready 8082 60
echo "  attnd-2 started again and ready"
sleep 4
touch "$work/stop-loss"
wait "$pid"
report loss "load across the kill and the restart"
[ "$(field loss "c['failed']")" = 0 ] && [ "$(field loss "c['ok']")" -gt 0 ] &&
  ok "replica loss: no failed request" || bad "replica loss" "requests failed"
load 4 rejoin
report rejoin "after the restart, 4 s"
case " $(replicas rejoin) " in
  *" attnd-2 "*) ok "attnd-2 rejoined ($(field rejoin "c['replica'].get('attnd-2', 0)") requests)" ;;
  *) bad "attnd-2 rejoins" "replicas '$(replicas rejoin)'" ;;
esac

# ---- 3. rolling restart: SIGTERM one at a time ---------------------------------
load 180 rolling --stop "$work/stop-rolling" &
pid=$!
sleep 2
codes=""
for r in attnd-1 attnd-2 attnd-3; do
  restart $r
  sleep 3 # two checks by HAProxy: back in rotation
  echo "  $r: SIGTERM, exit code $code, started again, ready"
done
touch "$work/stop-rolling"
wait "$pid"
report rolling "load across the rolling restart"
[ "$(field rolling "c['failed']")" = 0 ] && [ "$(field rolling "c['ok']")" -gt 0 ] &&
  ok "rolling restart: no failed request" || bad "rolling restart" "requests failed"
[ "$codes" = " attnd-1=0 attnd-2=0 attnd-3=0" ] &&
  ok "rolling restart: every replica exited 0 on SIGTERM" || bad "exit codes" "$codes"

# ---- 4. sessions: affinity, and a replica lost under them ----------------------
# (the replicas are all back and in rotation after phase 3)
id3=$($COMPOSE ps -q attnd-3)
start=$(date +%s)
rc=0
timeout 180 python3 tests/deploy/sessions.py $LB --kill-replica attnd-3 \
  --kill-cmd "docker kill --signal KILL $id3" --deadline 150 >"$work/sessions.json" || rc=$?
s() { field sessions "c.get($1)"; }
if [ ! -s "$work/sessions.json" ]; then
  bad "sessions" "tests/deploy/sessions.py printed nothing (exit $rc)"
else
  echo "  $(s "'sessions'") sessions, $(s "'steps_per_session'") steps each, in $(($(date +%s) - start)) s:" \
    "$(s "'requests'") requests, $(s "'checked_rows'") rows checked against the reference;" \
    "groups by replica $(s "'groups_by_replica'")"
  echo "  attnd-3 killed: $(s "'groups_on_killed'") groups, $(s "'not_found'") answers 404 not found," \
    "$(s "'recreated'") sessions created and prefilled again, moved to $(s "'moved_to'")"
  [ "$(s "'failed'")" = 0 ] || field sessions "'\n'.join(c['failures'])"
  [ "$rc" = 0 ] && [ "$(s "'failed'")" = 0 ] && [ "$(s "'ok'")" -gt 0 ] &&
    ok "sessions: every answer matches the reference, every group on one replica" ||
    bad "sessions" "exit $rc, $(s "'failed'") failed"
  [ "$rc" = 0 ] && [ "$(s "'recreated'")" = "$(($(s "'groups_on_killed'") * 3))" ] &&
    [ "$(s "'groups_on_killed'")" -gt 0 ] &&
    ok "sessions: the killed replica's sessions answered 404 not found and were re-created; no other session failed" ||
    bad "sessions: replica loss" "$(s "'groups_on_killed'") groups on attnd-3, $(s "'recreated'") re-created"
fi

# ---- 5. sessions across a rolling restart: none lost --------------------------
# attnd-3 was killed in phase 4: start it again and let HAProxy see it.
$COMPOSE start attnd-3 >/dev/null 2>&1
$CLIENT wait-ready 8083 60
sleep 3
start=$(date +%s)
python3 tests/deploy/sessions_restart.py $LB --ready-file "$work/restart-ready" \
  --stop-file "$work/restart-stop" --deadline 150 >"$work/restart.json" &
pid=$!
for _ in $(seq 600); do
  { [ -e "$work/restart-ready" ] || ! kill -0 "$pid" 2>/dev/null; } && break
  sleep 0.1
done
codes=""
if [ -e "$work/restart-ready" ] &&
  [ "$(python3 -c "import json; print(json.load(open('$work/restart-ready'))['ok'])")" = True ]; then
  for r in attnd-1 attnd-2 attnd-3; do
    t0=$(date +%s%N)
    restart $r
    echo "  $r: SIGTERM, exit code $code, started again, ready after $((($(date +%s%N) - t0) / 1000000)) ms"
    sleep 2 # HAProxy's checks put it back in rotation; its groups resume
  done
fi
touch "$work/restart-stop"
rc=0
wait "$pid" || rc=$?
s() { field restart "c.get($1)"; }
if [ ! -s "$work/restart.json" ]; then
  bad "sessions across a rolling restart" "tests/deploy/sessions_restart.py printed nothing (exit $rc)"
else
  echo "  $(s "'sessions'") sessions in $(s "'groups'") groups (by replica $(s "'groups_by_replica'")), in $(($(date +%s) - start)) s:" \
    "$(s "'steps'") group steps, $(s "'requests'") requests, $(s "'checked_rows'") rows checked against the reference," \
    "lengths $(s "'min_length'")-$(s "'max_length'")"
  echo "  held while their replica was away: $(s "'held_steps'") steps of $(s "'held_groups_n'") groups," \
    "$(s "'held_requests'") answers sent again ($(s "'held_by_status'")), longest hold $(s "'max_hold_s'") s;" \
    "$(s "'lost'") sessions lost, $(s "'deleted'") deleted at the end"
  [ "$(s "'failed'")" = 0 ] || field restart "'\n'.join(c['failures'])"
  [ "$rc" = 0 ] && [ "$(s "'failed'")" = 0 ] && [ "$(s "'lost'")" = 0 ] && [ "$(s "'steps'")" -gt 0 ] &&
    ok "sessions across a rolling restart: no failed step, no session lost, every answer matches the reference" ||
    bad "sessions across a rolling restart" "exit $rc, $(s "'failed'") failed, $(s "'lost'") lost"
  [ "$rc" = 0 ] && [ "$(s "'held_groups_n'")" = "$(s "'groups'")" ] &&
    ok "sessions across a rolling restart: every group was held while its replica restarted, then went on there" ||
    bad "sessions: held groups" "$(s "'held_groups_n'") of $(s "'groups'") groups held"
fi
[ "$codes" = " attnd-1=0 attnd-2=0 attnd-3=0" ] &&
  ok "sessions across a rolling restart: every replica exited 0 on SIGTERM" || bad "exit codes (phase 5)" "'$codes'"
# phases 2-4 save and load no session (their sessions are deleted or killed)
logs=$($COMPOSE logs --no-color attnd-1 attnd-2 attnd-3 2>&1)
count() { echo "$logs" | sed -n "s/.*session_dir: \([0-9]*\) sessions\{0,1\} $1 .*/\1/p" | awk '{n += $1} END {print n + 0}'; }
saved=$(count saved)
loaded=$(count loaded)
echo "  the replicas' logs: $saved sessions saved, $loaded loaded"
[ "$saved" = 30 ] && [ "$loaded" = 30 ] &&
  ok "sessions across a rolling restart: 30 sessions saved and 30 loaded" ||
  bad "session_dir" "$saved saved, $loaded loaded (expected 30 and 30)"

echo "compose test: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
