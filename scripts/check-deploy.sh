#!/bin/bash
# Offline validation of attnd's deployment files: deploy/k8s (and its
# overlays), deploy/kserve, deploy/systemd, deploy/haproxy and deploy/nginx
# when present, and the Kubernetes objects shown in docs/deploy.md.
# No cluster, no network but the package registries.
#
#   scripts/check-deploy.sh
#
# Installs what it needs on a fresh Debian 12 (as root, or with sudo):
# yamllint, systemd-analyze, strace, curl, Node.js and npm from Debian's
# packages, haproxy and nginx only when there is a config of theirs to
# check, and the npm packages pinned in scripts/deploy-check/package-lock.json
# into build/deploy-check (not committed).  Then:
#
#  1. yamllint --strict (.yamllint) on every YAML file under deploy/;
#  2. the kustomizations deploy/k8s and deploy/k8s-overlays/* (models-pvc,
#     ingress-nginx: the Ingresses that keep each session on its pod,
#     network-policy: ingress-nginx's and a NetworkPolicy),
#     rendered and validated against the Kubernetes schemas
#     (kubernetes-models; unknown kinds and unknown fields are errors) and
#     attnd's rules (scripts/deploy-check/validate.cjs says which: for the
#     Ingresses, backends that exist, upstream-hash-by on the affinity
#     header, the session paths hashed, no Service both hashed and not);
#  3. deploy/kserve/*.yaml against deploy/kserve/schema/*.json (ajv) and
#     the Kubernetes schemas of their core parts, and Knative's field rules
#     for a Serverless InferenceService (the default mode) and its
#     ServingRuntime: no terminationGracePeriodSeconds, restartPolicy,
#     activeDeadlineSeconds, nodeName, hostname, subdomain, priority,
#     readinessGates, preemptionPolicy, overhead, ephemeralContainers in
#     the pod; none of the fields behind a feature flag that is off by
#     default (securityContext, initContainers, hostNetwork, hostPID,
#     hostIPC, shareProcessNamespace, dnsPolicy, dnsConfig, schedulerName,
#     priorityClassName, runtimeClassName, hostAliases,
#     topologySpreadConstraints); no lifecycle, stdin, stdinOnce, tty,
#     volumeDevices, resizePolicy in a container; one container port, on
#     one container, named http1 or h2c if named, without hostPort or
#     hostIP; and Knative's grace period (the predictor's timeout, 300 s
#     by default) longer than the runtime's shutdown delay + drain;
#  4. the Kubernetes objects in docs/deploy.md's yaml blocks;
#  5. attnd --check-config on the ConfigMap's and the systemd attnd.json;
#  6. systemd-analyze verify on deploy/systemd/attnd.service, its exposure
#     (systemd-analyze security, at most 2.0), and its stop timeout
#     against shutdown_delay_ms + drain_timeout_ms;
#  7. the sandbox against a running attnd: every system call it makes
#     (under strace: start, requests on both protocols, a /metrics scrape
#     and the statistics, the unit's ExecReload `attnd --reload=PID` and
#     attnd's reload, SIGTERM) must pass the unit's SystemCallFilter,
#     RestrictAddressFamilies,
#     MemoryDenyWriteExecute, RestrictNamespaces, PrivateDevices and
#     ProtectSystem=strict;
#  8. haproxy -c on deploy/haproxy/haproxy.cfg, nginx -t on deploy/nginx;
#  9. deploy/monitoring (scripts/deploy-check/monitoring.mjs): its
#     manifests against the Prometheus Operator's and KEDA's CRD schemas
#     (@kubernetes-models) and deploy/k8s's labels and ports; the
#     PrometheusRule's groups through `promtool check rules` and the unit
#     tests of deploy/monitoring/tests (`promtool test rules`); every
#     PromQL expression (rules, the Grafana dashboard, the autoscalers'
#     queries) parsed by promtool, and its metric names found in a running
#     attnd's /metrics;
# 10. self-tests: broken copies of the files (a wrong type, misspelt
#     fields, an unknown kind, a broken rule, a misspelt unit directive, a
#     forbidden system call, an Ingress that loses session affinity, a
#     HAProxy config that does not parse) must each be rejected, for the
#     reason meant.
#
# Checks 5, 6 (verify with the real binary) and 7 use an attnd binary:
# $CHECK_DEPLOY_ATTND, else build/src/attnd (`make` builds it); without
# one, 5 and 7 are skipped and 6 points the unit at /bin/true
# (systemd-analyze verify insists that ExecStart's and ExecReload's binary exist).
#
# Output: PASS/FAIL/SKIP lines, then "check-deploy: N passed, M failed,
# K skipped"; the exit status is 1 when anything failed.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
ROOT=$PWD
DEPS=$ROOT/build/deploy-check
VALIDATE=(node "$ROOT/scripts/deploy-check/validate.cjs" --deps "$DEPS")
export DEBIAN_FRONTEND=noninteractive

PASSED=0
FAILED=0
SKIPPED=0
FAILURES=()
pass() { PASSED=$((PASSED + 1)); echo "PASS: $1"; }
fail() {
  FAILED=$((FAILED + 1)); FAILURES+=("$1"); echo "FAIL: $1"
  if [ -n "${2:-}" ]; then printf '%s\n' "$2" | sed 's/^/    /'; fi
}
skip() { SKIPPED=$((SKIPPED + 1)); echo "SKIP: $1"; }

TMP=$(mktemp -d /tmp/check-deploy.XXXXXX)
trap 'rm -rf "$TMP"' EXIT

# run NAME CMD...: one check, passed when CMD exits 0; its output is shown.
run() {
  local name=$1 out rc
  shift
  out=$("$@" 2>&1)
  rc=$?
  if [ "$rc" -eq 0 ]; then
    [ -n "$out" ] && printf '%s\n' "$out" | sed 's/^/    /'
    pass "$name"
  else
    fail "$name (exit $rc)" "$out"
  fi
}

# expect_fail NAME TEXT CMD...: a self-test, passed when CMD fails and its
# output says TEXT (so it failed for the reason meant).
expect_fail() {
  local name=$1 text=$2 out rc
  shift 2
  out=$("$@" 2>&1)
  rc=$?
  if [ "$rc" -eq 0 ]; then
    fail "self-test: $name: the check accepted it" "$out"
  elif ! grep -qF -- "$text" <<<"$out"; then
    fail "self-test: $name: rejected, but without '$text'" "$out"
  else
    pass "self-test: $name (rejected: $(grep -F -m1 -- "$text" <<<"$out" | sed 's/^ *//'))"
  fi
}

# mutate FILE SED-EXPR: edit a copy in place; an expression that changes
# nothing means the self-test no longer matches the file: fail loudly.
mutate() {
  local file=$1 expr=$2
  cp "$file" "$file.orig"
  sed -i "$expr" "$file"
  if cmp -s "$file" "$file.orig"; then
    echo "self-test mutation '$expr' changed nothing in $file: update scripts/check-deploy.sh" >&2
    rm -f "$file.orig"
    return 1
  fi
  rm -f "$file.orig"
}

# ------------------------------------------------------------- installs

SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
pkgs=()
command -v yamllint >/dev/null || pkgs+=(yamllint)
command -v systemd-analyze >/dev/null || pkgs+=(systemd)
command -v strace >/dev/null || pkgs+=(strace)
command -v curl >/dev/null || pkgs+=(curl)
if [ -d deploy/monitoring ] && ! command -v promtool >/dev/null; then pkgs+=(prometheus); fi
command -v node >/dev/null || pkgs+=(nodejs)
command -v npm >/dev/null || pkgs+=(npm)
if [ -f deploy/haproxy/haproxy.cfg ] && ! command -v haproxy >/dev/null; then pkgs+=(haproxy); fi
if [ -d deploy/nginx ] && ! command -v nginx >/dev/null; then pkgs+=(nginx); fi
if [ "${#pkgs[@]}" -gt 0 ]; then
  echo "check-deploy: installing ${pkgs[*]}"
  if ! { $SUDO apt-get update -qq && $SUDO apt-get install -y -qq --no-install-recommends "${pkgs[@]}" >/dev/null; }; then
    echo "check-deploy: apt-get install ${pkgs[*]} failed" >&2
    exit 1
  fi
fi
if ! cmp -s scripts/deploy-check/package-lock.json "$DEPS/package-lock.json" || [ ! -d "$DEPS/node_modules" ]; then
  echo "check-deploy: installing the npm packages of scripts/deploy-check into build/deploy-check"
  if ! { rm -rf "$DEPS" && mkdir -p "$DEPS" &&
    cp scripts/deploy-check/package.json scripts/deploy-check/package-lock.json "$DEPS/" &&
    (cd "$DEPS" && npm ci --no-audit --no-fund --ignore-scripts --loglevel=error); }; then
    rm -rf "$DEPS"
    echo "check-deploy: npm ci failed" >&2
    exit 1
  fi
fi

# (not ATTND_*: attnd warns about every ATTND_* variable it does not read)
ATTND=${CHECK_DEPLOY_ATTND:-$ROOT/build/src/attnd}
if [ ! -x "$ATTND" ]; then
  echo "check-deploy: no attnd binary at $ATTND (run make, or set CHECK_DEPLOY_ATTND): checks that run attnd are skipped"
  ATTND=""
fi

# --------------------------------------------------------------- checks

mapfile -t YAMLS < <(find deploy -type f \( -name '*.yaml' -o -name '*.yml' \) | sort)
run "yamllint --strict: ${#YAMLS[@]} files under deploy/" yamllint --strict -c .yamllint "${YAMLS[@]}"

KUSTOMIZATIONS=(deploy/k8s)
for d in deploy/k8s-overlays/*/; do [ -f "$d/kustomization.yaml" ] && KUSTOMIZATIONS+=("${d%/}"); done
run "Kubernetes: ${KUSTOMIZATIONS[*]}" "${VALIDATE[@]}" kustomize "${KUSTOMIZATIONS[@]}"
run "KServe: deploy/kserve/*.yaml" "${VALIDATE[@]}" files deploy/kserve/*.yaml
if [ -f docs/deploy.md ]; then
  run "docs/deploy.md: its Kubernetes objects" "${VALIDATE[@]}" markdown docs/deploy.md
else
  skip "docs/deploy.md: not there"
fi

# attnd --check-config on FILE: keys this attnd build does not know yet
# (settings still being added) are left out, and named.
check_config() {
  local file=$1 keys dropped
  keys=$("$ATTND" --help | sed -n 's/^  --\([a-z][a-z-]*\) .*/\1/p' | tr - _ | paste -sd, -)
  node -e '
    const fs = require("fs");
    const c = JSON.parse(fs.readFileSync(process.argv[1], "utf8"));
    const known = new Set(process.argv[2].split(","));
    const drop = Object.keys(c).filter((k) => !known.has(k));
    for (const k of drop) delete c[k];
    fs.writeFileSync(process.argv[3], JSON.stringify(c));
    fs.writeFileSync(process.argv[4], drop.join(" "));
  ' "$file" "$keys" "$TMP/check.json" "$TMP/dropped" || return 1
  dropped=$(cat "$TMP/dropped")
  [ -z "$dropped" ] || echo "not checked (this attnd build does not know them): $dropped"
  # models_dir: the image bakes config/models into /models
  "$ATTND" --check-config --config "$TMP/check.json" --models-dir config/models >/dev/null
}
if [ -n "$ATTND" ]; then
  "${VALIDATE[@]}" config deploy/k8s/configmap.yaml >"$TMP/configmap.json" 2>"$TMP/err" \
    || fail "attnd --check-config: deploy/k8s/configmap.yaml" "$(cat "$TMP/err")"
  [ -s "$TMP/configmap.json" ] && run "attnd --check-config: the ConfigMap's attnd.json" check_config "$TMP/configmap.json"
  run "attnd --check-config: deploy/systemd/attnd.json" check_config deploy/systemd/attnd.json
else
  skip "attnd --check-config: no attnd binary"
fi

# systemd-analyze verify: it insists that ExecStart's and ExecReload's
# binary exist, so a copy of the unit runs the attnd binary at hand (else
# /bin/true) instead of /usr/local/bin/attnd; the rest of the unit is
# verified as it is.
# Unknown directives are only warnings to it (exit 0): any line it prints
# about the unit fails the check.
UNIT=deploy/systemd/attnd.service
verify_unit() {
  local unit=$1 bin=${ATTND:-/bin/true} dir out
  dir=$(mktemp -d "$TMP/unit.XXXXXX")
  sed -e "s#^ExecStart=/usr/local/bin/attnd #ExecStart=$bin #" \
    -e "s#^ExecReload=/usr/local/bin/attnd #ExecReload=$bin #" "$unit" >"$dir/attnd.service"
  if cmp -s "$unit" "$dir/attnd.service"; then
    echo "ExecStart is not /usr/local/bin/attnd ...: update verify_unit"
    return 1
  fi
  echo "ExecStart's and ExecReload's binary for the check: $bin"
  out=$(cd "$dir" && systemd-analyze verify ./attnd.service 2>&1) || { echo "$out"; return 1; }
  if grep -q 'attnd\.service' <<<"$out"; then echo "$out"; return 1; fi
  [ -z "$out" ] || echo "(about other units: $out)"
}
run "systemd-analyze verify $UNIT" verify_unit "$UNIT"

security_unit() {
  local out
  out=$(systemd-analyze security --offline=yes --threshold=20 "$1" 2>&1)
  local rc=$?
  grep 'Overall exposure' <<<"$out"
  [ "$rc" -eq 0 ] || { grep '✗' <<<"$out"; return 1; }
}
run "systemd-analyze security $UNIT: exposure at most 2.0" security_unit "$UNIT"

# TimeoutStopSec must outlast shutdown_delay_ms + drain_timeout_ms of the
# config it runs with (attnd's defaults: 0 and 30000).
stop_timeout() {
  local unit=$1 cfg=$2 t delay drain
  t=$(sed -n 's/^TimeoutStopSec=\([0-9]*\)s\{0,1\}$/\1/p' "$unit" | tail -1)
  [ -n "$t" ] || { echo "no TimeoutStopSec=<seconds> in $unit"; return 1; }
  read -r delay drain < <(node -e '
    const c = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"));
    console.log(c.shutdown_delay_ms || 0, c.drain_timeout_ms === undefined ? 30000 : c.drain_timeout_ms)' "$cfg")
  echo "TimeoutStopSec=${t}s, shutdown_delay_ms=$delay, drain_timeout_ms=$drain"
  [ $((t * 1000)) -gt $((delay + drain)) ]
}
run "$UNIT: TimeoutStopSec outlasts shutdown delay + drain" stop_timeout "$UNIT" deploy/systemd/attnd.json

# attnd sends READY=1 (src/main.c, notify): the unit must wait for it, and
# take it from attnd's own process; journald must read the <N> prefixes.
notify_unit() {
  local unit=$1 k
  for k in Type=notify NotifyAccess=main SyslogLevelPrefix=yes \
    'ExecReload=/usr/local/bin/attnd --reload=$MAINPID'; do
    grep -qxF "$k" "$unit" || { echo "$unit lacks $k"; return 1; }
  done
  echo "Type=notify, NotifyAccess=main, SyslogLevelPrefix=yes, ExecReload waits for attnd --reload"
}
run "$UNIT: Type=notify (attnd tells READY=1)" notify_unit "$UNIT"

# The sandbox against what attnd really does.  allowed_syscalls expands a
# SystemCallFilter group; check_trace reads an strace -f log.
expand_group() {
  systemd-analyze syscall-filter "$1" 2>/dev/null | awk 'NR > 1 && NF && $1 !~ /^#/ { print $1 }' |
    while read -r s; do
      if [[ $s == @* ]]; then expand_group "$s"; else echo "$s"; fi
    done
}
allowed_syscalls() {
  local allow deny
  allow=$(sed -n 's/^SystemCallFilter=\([^~].*\)$/\1/p' "$UNIT")
  deny=$(sed -n 's/^SystemCallFilter=~\(.*\)$/\1/p' "$UNIT")
  comm -23 <(for g in $allow; do if [[ $g == @* ]]; then expand_group "$g"; else echo "$g"; fi; done | sort -u) \
           <(for g in $deny; do if [[ $g == @* ]]; then expand_group "$g"; else echo "$g"; fi; done | sort -u)
}
check_trace() {
  local trace=$1 allowed bad=0 used x
  allowed=$(allowed_syscalls)
  [ -n "$allowed" ] || { echo "could not expand the unit's SystemCallFilter"; return 1; }
  used=$(grep -oE '^[0-9]+ +[a-z0-9_]+\(' "$trace" | sed -E 's/^[0-9]+ +//; s/\($//' | sort -u)
  echo "system calls made: $(wc -w <<<"$used")"
  x=$(comm -23 <(echo "$used") <(echo "$allowed") | paste -sd' ' -)
  [ -z "$x" ] || { echo "SystemCallFilter refuses: $x"; bad=1; }
  x=$(grep -oE 'socket\(AF_[A-Z0-9]+' "$trace" | sed 's/socket(//' | sort -u | grep -vxE 'AF_INET|AF_INET6|AF_UNIX' | paste -sd' ' -)
  [ -z "$x" ] || { echo "RestrictAddressFamilies refuses: $x"; bad=1; }
  x=$(grep -E ' mmap\([^)]*(PROT_WRITE\|PROT_EXEC|PROT_EXEC\|PROT_WRITE)| (pkey_)?mprotect\([^)]*PROT_EXEC' "$trace" | head -3)
  [ -z "$x" ] || { echo "MemoryDenyWriteExecute refuses: $x"; bad=1; }
  x=$(grep -E ' (unshare|clone3?|setns)\(.*CLONE_NEW' "$trace" | head -3)
  [ -z "$x" ] || { echo "RestrictNamespaces refuses: $x"; bad=1; }
  x=$(grep -oE ' open(at)?\([^"]*"/dev/[^"]+"' "$trace" | grep -oE '"/dev/[^"]+"' | sort -u |
      grep -vxE '"/dev/(null|zero|full|random|urandom|tty|pts/[0-9]+|shm/.*)"' | paste -sd' ' -)
  [ -z "$x" ] || { echo "PrivateDevices hides: $x"; bad=1; }
  # (a thread's name is written to /proc/self/task/<tid>/comm: not a file
  # that ProtectSystem covers)
  x=$(grep -E ' open(at)?\(.*"[^"]*".*O_(WRONLY|RDWR|CREAT)' "$trace" |
      grep -vE '"(/tmp/|/dev/(null|tty|pts/)|/proc/(self|thread-self|[0-9]+)/(task/[0-9]+/)?comm")' | head -3)
  [ -z "$x" ] || { echo "ProtectSystem=strict makes these read-only: $x"; bad=1; }
  return "$bad"
}
sandbox_fit() {
  local trace=$TMP/trace log=$TMP/attnd.log spid apid port base
  # --workers 2: the system calls do not depend on it, and it keeps this
  # check independent of the automatic count.
  # NOTIFY_SOCKET as under Type=notify (no one listens there: attnd's
  # socket and sendto are traced all the same, then it warns once)
  NOTIFY_SOCKET=$TMP/notify.sock strace -f -qq -o "$trace" "$ATTND" --config deploy/systemd/attnd.json --models-dir config/models \
    --host 127.0.0.1 --port 0 --workers 2 --log-format json >"$log" 2>&1 &
  spid=$!
  port=""
  for _ in $(seq 1 100); do
    port=$(sed -n 's/.*listening on [^ ]*:\([0-9][0-9]*\).*/\1/p' "$log" | head -1)
    [ -n "$port" ] && break
    kill -0 "$spid" 2>/dev/null || break
    sleep 0.1
  done
  # strace's log starts with attnd's first system call: its PID
  apid=$(awk 'NR == 1 { print $1 }' "$trace")
  if [ -z "$port" ] || [ -z "$apid" ]; then
    echo "attnd did not start under strace:"; cat "$log"
    kill "$spid" 2>/dev/null; wait "$spid" 2>/dev/null
    return 1
  fi
  base=http://127.0.0.1:$port
  if ! { curl -fsS --max-time 10 "$base/v2/health/ready" >/dev/null &&
    curl -fsS --max-time 10 "$base/v2/health/live" >/dev/null &&
    curl -fsS --max-time 10 "$base/v1/attention" -H 'Content-Type: application/json' \
      -d '{"query": [[1, 0], [0, 1], [1, 1]], "causal": true}' >/dev/null &&
    curl -fsS --max-time 10 "$base/v2/models/demo/infer" -H 'Content-Type: application/json' \
      -d '{"inputs": [{"name": "query", "shape": [1, 16], "datatype": "FP32",
           "data": [1,0,0,0,0,0,0,0,0,0,0,0,0,0,0,1]}]}' >/dev/null &&
    curl -fsS --max-time 10 "$base/v2/models/demo" >/dev/null &&
    curl -fsS --max-time 10 "$base/metrics" >/dev/null &&
    curl -fsS --max-time 10 "$base/v2/models/stats" >/dev/null; }; then
    echo "a request to attnd failed:"; cat "$log"
    kill -TERM "$apid"; wait "$spid"
    return 1
  fi
  # ExecReload: `attnd --reload=$MAINPID` under the same filter, and
  # attnd's side of it (in its own trace)
  if ! strace -f -qq -o "$TMP/trace-reload" "$ATTND" --reload="$apid" >"$TMP/reload.out" 2>&1; then
    echo "attnd --reload=$apid failed:"; cat "$TMP/reload.out"
    kill -TERM "$apid"; wait "$spid"
    return 1
  fi
  echo "ExecReload: $(cat "$TMP/reload.out")"
  check_trace "$TMP/trace-reload" || { kill -TERM "$apid"; wait "$spid"; return 1; }
  kill -TERM "$apid"
  wait "$spid" || { echo "attnd did not exit 0 on SIGTERM:"; cat "$log"; return 1; }
  grep -q 'sched_setscheduler(0, SCHED_BATCH' "$trace" && echo "SCHED_BATCH set (allowed by the filter)"
  check_trace "$trace"
}
if [ -n "$ATTND" ] && command -v strace >/dev/null; then
  run "$UNIT sandbox: a running attnd's system calls" sandbox_fit
else
  skip "$UNIT sandbox: needs an attnd binary and strace"
fi

if [ -f deploy/haproxy/haproxy.cfg ]; then
  run "haproxy -c -f deploy/haproxy/haproxy.cfg" haproxy -c -f deploy/haproxy/haproxy.cfg
else
  skip "deploy/haproxy/haproxy.cfg: not there"
fi
# nginx: a full config (with an events block) is checked as it is; a
# fragment is checked inside a minimal http block.
nginx_check() {
  local f=$1 main=$TMP/nginx-main.conf
  if grep -qE '^\s*events\s*\{' "$f"; then
    main=$ROOT/$f
  else
    printf 'pid %s/nginx.pid;\nevents {}\nhttp {\n  include %s;\n}\n' "$TMP" "$ROOT/$f" >"$main"
  fi
  nginx -t -q -p "$TMP" -c "$main" -g "error_log stderr;"
}
if [ -d deploy/nginx ]; then
  mapfile -t NGINX < <(find deploy/nginx -type f -name '*.conf' | sort)
  for f in "${NGINX[@]}"; do run "nginx -t: $f" nginx_check "$f"; done
  [ "${#NGINX[@]}" -gt 0 ] || skip "deploy/nginx: no .conf file"
else
  skip "deploy/nginx: not there"
fi

# deploy/monitoring: the Prometheus Operator's objects, the alerts and
# their unit tests, the dashboard's and the autoscalers' queries.
MONITOR=(node "$ROOT/scripts/deploy-check/monitoring.mjs" --deps "$DEPS")
MON=deploy/monitoring
# attnd's /metrics text, from a short run of attnd (empty without one)
metrics_text() {
  local log=$TMP/metrics-attnd.log pid port
  "$ATTND" --models-dir config/models --host 127.0.0.1 --port 0 \
    --workers 1 >"$log" 2>&1 &
  pid=$!
  port=""
  for _ in $(seq 1 100); do
    port=$(sed -n 's/.*listening on [^ ]*:\([0-9][0-9]*\).*/\1/p' "$log" | head -1)
    [ -n "$port" ] && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  [ -n "$port" ] && curl -fsS --max-time 10 "http://127.0.0.1:$port/metrics" >"$TMP/metrics.txt"
  kill -TERM "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  [ -s "$TMP/metrics.txt" ] || { echo "attnd did not serve /metrics:"; cat "$log"; return 1; }
}
# promtool check rules and test rules on a PrometheusRule's groups
rules_check() {
  local rule=$1 tests=$2 d
  d=$(mktemp -d "$TMP/rules.XXXXXX")
  "${MONITOR[@]}" rules "$rule" "$d/attnd-rules.yaml" || return 1
  promtool check rules "$d/attnd-rules.yaml" || return 1
  cp "$tests"/*.yaml "$d/"
  promtool test rules "$d"/*.test.yaml
}
# the metric names and the PromQL of the kit's queries
promql_check() {
  local dir=$1
  "${MONITOR[@]}" promql --exposition "$TMP/metrics.txt" --out "$TMP/queries.yaml" \
    "$dir/prometheusrule.yaml" "$dir"/grafana/*.json "$dir"/autoscaling/*.yaml || return 1
  promtool check rules "$TMP/queries.yaml"
}
if [ -d "$MON" ]; then
  mapfile -t MON_MANIFESTS < <(find "$MON" -maxdepth 2 -name '*.yaml' ! -path '*/tests/*' ! -name 'prometheus-adapter-values.yaml' | sort)
  run "monitoring: ${#MON_MANIFESTS[@]} manifests against their schemas and deploy/k8s" "${MONITOR[@]}" manifests "${MON_MANIFESTS[@]}"
  if command -v promtool >/dev/null; then
    run "monitoring: promtool check rules, promtool test rules ($MON/tests)" rules_check "$MON/prometheusrule.yaml" "$MON/tests"
    if [ -n "$ATTND" ] && metrics_text; then
      run "monitoring: the queries' metric names in attnd's /metrics, parsed by promtool" promql_check "$MON"
    else
      skip "monitoring: the queries' metric names: needs an attnd binary that serves /metrics"
    fi
  else
    fail "monitoring: promtool is not installed (Debian's package prometheus)"
  fi
else
  skip "deploy/monitoring: not there"
fi

# ----------------------------------------------------------- self-tests

# yamllint
mkdir -p "$TMP/y"
cp deploy/k8s/service.yaml "$TMP/y/service.yaml"
mutate "$TMP/y/service.yaml" 's/^  type: ClusterIP$/  type: ClusterIP\n  type: NodePort/' &&
  expect_fail "yamllint: a duplicate key" "duplication of key" yamllint --strict -c .yamllint "$TMP/y/service.yaml"
cp deploy/k8s/service.yaml "$TMP/y/service.yaml"
mutate "$TMP/y/service.yaml" 's/^      appProtocol: http$/      appProtocol: http\n      x: yes/' &&
  expect_fail "yamllint: yes for true" "truthy value" yamllint --strict -c .yamllint "$TMP/y/service.yaml"

# k8s_case NAME TEXT FILE SED-EXPR: a broken copy of deploy/k8s
k8s_case() {
  local name=$1 text=$2 file=$3 expr=$4 d
  d=$(mktemp -d "$TMP/k8s.XXXXXX")
  cp -r deploy/k8s "$d/k8s"
  mutate "$d/k8s/$file" "$expr" || { fail "self-test: $name: could not break the copy"; return; }
  expect_fail "Kubernetes: $name" "$text" "${VALIDATE[@]}" kustomize "$d/k8s"
}
k8s_case 'replicas: "three"' '/spec/replicas must be integer' deployment.yaml \
  's/^  revisionHistoryLimit: 5$/  replicas: "three"\n&/'
k8s_case 'replicas beside the autoscaler' 'sets replicas (2) beside this autoscaler' deployment.yaml \
  's/^  revisionHistoryLimit: 5$/  replicas: 2\n&/'
k8s_case 'containerPort misspelt' 'contanerPort: unknown field' deployment.yaml 's/containerPort: 8080/contanerPort: 8080/'
k8s_case 'imagePullPolicy misspelt (an optional field)' 'imagePulPolicy: unknown field' deployment.yaml \
  's/imagePullPolicy:/imagePulPolicy:/'
k8s_case 'a field at the wrong level' '/spec/template/spec/readOnlyRootFilesystem: unknown field' deployment.yaml \
  's/^      enableServiceLinks: false$/      enableServiceLinks: false\n      readOnlyRootFilesystem: true/'
k8s_case 'kind PodDisruptionBudgit' 'unknown apiVersion/kind policy/v1 PodDisruptionBudgit' pdb.yaml \
  's/^kind: PodDisruptionBudget$/kind: PodDisruptionBudgit/'
k8s_case 'HPA autoscaling/v3' 'unknown apiVersion/kind autoscaling/v3' hpa.yaml 's#^apiVersion: autoscaling/v2$#apiVersion: autoscaling/v3#'
k8s_case 'service links on' 'enableServiceLinks must be false' deployment.yaml \
  's/enableServiceLinks: false/enableServiceLinks: true/'
k8s_case 'grace period 30 s' 'terminationGracePeriodSeconds 30 must be longer' deployment.yaml \
  's/terminationGracePeriodSeconds: 45/terminationGracePeriodSeconds: 30/'
k8s_case 'limits above requests' 'must equal resources.limits.cpu' deployment.yaml '0,/cpu: "2"/{s/cpu: "2"/cpu: "1"/}'
k8s_case 'a resource not listed' 'not listed in' kustomization.yaml '/  - pdb.yaml/d'
k8s_case 'liveness on the serving port' 'livenessProbe port http is not metrics_port 8002' deployment.yaml \
  's/^              port: metrics$/              port: http/'
k8s_case 'no metrics_port' 'metrics_port is not set in attnd.json' configmap.yaml '/"metrics_port": 8002,/d'

# overlay_case OVERLAY NAME TEXT FILE SED-EXPR: a broken copy of an overlay
# (beside a copy of the base, as ../../k8s)
overlay_case() {
  local overlay=$1 name=$2 text=$3 file=$4 expr=$5 d
  d=$(mktemp -d "$TMP/overlay.XXXXXX")
  mkdir -p "$d/k8s-overlays"
  cp -r deploy/k8s "$d/k8s"
  # all the overlays: one may stand on another (network-policy on
  # ingress-nginx)
  cp -r deploy/k8s-overlays/. "$d/k8s-overlays/"
  mutate "$d/k8s-overlays/$overlay/$file" "$expr" || { fail "self-test: $name: could not break the copy"; return; }
  expect_fail "Kubernetes $overlay: $name" "$text" "${VALIDATE[@]}" kustomize "$d/k8s-overlays/$overlay"
}
if [ -d deploy/k8s-overlays/ingress-nginx ]; then
  overlay_case ingress-nginx 'the hash on a misspelt header' 'it must be "$http_x_attnd_affinity"' \
    ingress-sessions.yaml 's/\$http_x_attnd_affinity/$http_x_attnd_afinity/'
  overlay_case ingress-nginx 'a backend Service that is not there' 'service attnd-session is not a Service of this set' \
    ingress-sessions.yaml '0,/name: attnd-sessions$/!s/name: attnd-sessions$/name: attnd-session/'
  overlay_case ingress-nginx 'the session path misspelt' '/v1/sessions/chat-1:s0/attend goes to' \
    ingress-sessions.yaml 's#path: /v1/sessions$#path: /v1/session#'
  overlay_case ingress-nginx 'hashed paths on the Service attnd' 'shared by hashed and unhashed Ingress paths' \
    ingress-sessions.yaml '0,/name: attnd-sessions$/!s/name: attnd-sessions$/name: attnd/'
  overlay_case ingress-nginx 'service-upstream on' 'service-upstream "true"' \
    ingress-sessions.yaml 's#^    nginx.ingress.kubernetes.io/proxy-body-size: 256m$#&\n    nginx.ingress.kubernetes.io/service-upstream: "true"#'
fi

if [ -d deploy/k8s-overlays/network-policy ]; then
  overlay_case network-policy 'a port misspelt' 'port htp is not a port of the attnd container' \
    networkpolicy.yaml 's/^        - port: http$/        - port: htp/'
  overlay_case network-policy 'the serving port left out' 'no ingress rule allows port http' \
    networkpolicy.yaml 's/^        - port: http$/        - port: metrics/'
  overlay_case network-policy 'a podSelector that selects nothing' 'podSelector selects no attnd pod' \
    networkpolicy.yaml 's/^      app.kubernetes.io\/instance: attnd$/      app.kubernetes.io\/instance: attnd-v2/'
  overlay_case network-policy 'a misspelt field' 'namespaceSelecter: unknown field' \
    networkpolicy.yaml '0,/namespaceSelector:/s/namespaceSelector:/namespaceSelecter:/'
fi

# kserve_case NAME TEXT FILE SED-EXPR: a broken copy of deploy/kserve
kserve_case() {
  local name=$1 text=$2 file=$3 expr=$4 d
  d=$(mktemp -d "$TMP/kserve.XXXXXX")
  cp deploy/kserve/*.yaml "$d/"
  mutate "$d/$file" "$expr" || { fail "self-test: $name: could not break the copy"; return; }
  expect_fail "KServe: $name" "$text" "${VALIDATE[@]}" files "$d"/*.yaml
}
kserve_case 'first container not kserve-container' "must be equal to constant ('kserve-container')" \
  servingruntime.yaml 's/- name: kserve-container/- name: attnd/'
kserve_case 'protocolVersions v3' 'must be equal to one of the allowed values (v1, v2, grpc-v1, grpc-v2)' \
  servingruntime.yaml 's/^    - v2$/    - v3/'
kserve_case 'protocolVersion (singular) in a ServingRuntime' "must NOT have additional properties 'protocolVersion'" \
  servingruntime.yaml 's/^  protocolVersions:$/  protocolVersion:/'
kserve_case 'multiModel: "no"' '/spec/multiModel: must be boolean' servingruntime.yaml 's/multiModel: false/multiModel: "no"/'
kserve_case 'a misspelt container field' 'imagePulPolicy: unknown field' servingruntime.yaml 's/imagePullPolicy:/imagePulPolicy:/'
kserve_case 'models not read from /mnt/models' 'must read its models from /mnt/models' servingruntime.yaml \
  's#value: /mnt/models#value: /models#'
kserve_case 'modelFormat misspelt' "must have required property 'modelFormat'" inferenceservice-serverless.yaml \
  's/^      modelFormat:$/      modelFormats:/'
kserve_case 'minReplica' "must NOT have additional properties 'minReplica'" inferenceservice-serverless.yaml \
  's/minReplicas: 1/minReplica: 1/'
kserve_case 'RawDeployment: grace period 30 s' 'terminationGracePeriodSeconds 30 must be longer' inferenceservice-raw.yaml \
  's/terminationGracePeriodSeconds: 45/terminationGracePeriodSeconds: 30/'
kserve_case 'a runtime that is not there' 'runtime attnd-v2 is not a ServingRuntime of this set' inferenceservice-raw.yaml \
  's/runtime: attnd$/runtime: attnd-v2/'
kserve_case 'deploymentMode misspelt' '"Rawdeployment" is not one of Serverless, RawDeployment, ModelMesh' \
  inferenceservice-raw.yaml 's/deploymentMode: RawDeployment$/deploymentMode: Rawdeployment/'
# Knative's field rules, on the Serverless InferenceService and its runtime
kserve_case 'Serverless: terminationGracePeriodSeconds' \
  'terminationGracePeriodSeconds: Knative (Serverless mode) refuses this pod spec field' inferenceservice-serverless.yaml \
  's/^    enableServiceLinks: false$/&\n    terminationGracePeriodSeconds: 45/'
kserve_case 'Serverless: the annotation left out (the default mode)' \
  'terminationGracePeriodSeconds: Knative (Serverless mode) refuses this pod spec field' inferenceservice-serverless.yaml \
  '/deploymentMode: Serverless$/d; s/^    enableServiceLinks: false$/&\n    terminationGracePeriodSeconds: 45/'
kserve_case 'Serverless: a pod securityContext (feature flag off)' \
  'securityContext: Knative (Serverless mode) refuses this pod spec field unless its feature flag is on' \
  inferenceservice-serverless.yaml 's/^    enableServiceLinks: false$/&\n    securityContext:\n      runAsNonRoot: true/'
kserve_case 'Serverless: a second port on the runtime' '2 ports: Knative (Serverless mode) allows one container port' \
  servingruntime.yaml 's/^        - containerPort: 8080$/        - containerPort: 8002\n          protocol: TCP\n&/'
kserve_case 'Serverless: a lifecycle hook on the runtime' 'lifecycle: Knative (Serverless mode) refuses this container field' \
  servingruntime.yaml 's/^      imagePullPolicy: IfNotPresent$/&\n      lifecycle:\n        preStop:\n          exec:\n            command: [sleep, "5"]/'
kserve_case 'Serverless: a timeout of 30 s' "timeout (Knative's grace period) 30 must be longer" inferenceservice-serverless.yaml \
  's/^    scaleTarget: 2$/&\n    timeout: 30/'

# haproxy: a config that does not parse (the session backend's hash)
if [ -f deploy/haproxy/haproxy.cfg ]; then
  cp deploy/haproxy/haproxy.cfg "$TMP/haproxy.cfg"
  mutate "$TMP/haproxy.cfg" 's/^    balance hash var(txn.affinity)$/    balance hash var(txn.afinity/' &&
    expect_fail "haproxy: an unclosed sample expression" "ALERT" haproxy -c -f "$TMP/haproxy.cfg"
fi

# docs/deploy.md's objects
if [ -f docs/deploy.md ]; then
  cp docs/deploy.md "$TMP/deploy.md"
  mutate "$TMP/deploy.md" 's/claimName: attnd-models$/claimNme: attnd-models/' &&
    expect_fail "docs/deploy.md: a misspelt field in a yaml block" "claimNme: unknown field" \
      "${VALIDATE[@]}" markdown "$TMP/deploy.md"
fi

# systemd
mkdir -p "$TMP/sd"
cp "$UNIT" "$TMP/sd/attnd.service"
mutate "$TMP/sd/attnd.service" 's/^ProtectSystem=strict$/ProtectSytem=strict/' &&
  expect_fail "systemd: ProtectSytem=strict" "Unknown key" verify_unit "$TMP/sd/attnd.service"
cp "$UNIT" "$TMP/sd/attnd.service"
mutate "$TMP/sd/attnd.service" '/^\(DynamicUser\|NoNewPrivileges\|ProtectSystem\|ProtectHome\|SystemCallFilter\|CapabilityBoundingSet\)=/d' &&
  expect_fail "systemd: hardening removed" "Overall exposure" security_unit "$TMP/sd/attnd.service"
cp "$UNIT" "$TMP/sd/attnd.service"
mutate "$TMP/sd/attnd.service" 's/^TimeoutStopSec=45s$/TimeoutStopSec=30s/' &&
  expect_fail "systemd: TimeoutStopSec=30s" "drain_timeout_ms=30000" stop_timeout "$TMP/sd/attnd.service" deploy/systemd/attnd.json
cp "$UNIT" "$TMP/sd/attnd.service"
mutate "$TMP/sd/attnd.service" 's/^Type=notify$/Type=exec/' &&
  expect_fail "systemd: Type=exec" "lacks Type=notify" notify_unit "$TMP/sd/attnd.service"
cp "$UNIT" "$TMP/sd/attnd.service"
mutate "$TMP/sd/attnd.service" 's#^ExecReload=.*#ExecReload=/bin/kill -HUP $MAINPID#' &&
  expect_fail "systemd: ExecReload=kill -HUP (unconfirmed)" "lacks ExecReload" notify_unit "$TMP/sd/attnd.service"
cat >"$TMP/sd/trace" <<'EOF'
100 openat(AT_FDCWD, "/etc/attnd/attnd.json", O_RDONLY|O_CLOEXEC) = 3
100 mount("none", "/mnt", "tmpfs", 0, NULL) = -1 EPERM (Operation not permitted)
100 socket(AF_NETLINK, SOCK_RAW|SOCK_CLOEXEC, NETLINK_ROUTE) = 4
100 mmap(NULL, 4096, PROT_READ|PROT_WRITE|PROT_EXEC, MAP_PRIVATE|MAP_ANONYMOUS, -1, 0) = 0x7f0000000000
100 openat(AT_FDCWD, "/var/lib/attnd/cache", O_WRONLY|O_CREAT|O_TRUNC, 0600) = 5
EOF
expect_fail "sandbox: a forbidden system call" "SystemCallFilter refuses: mount" check_trace "$TMP/sd/trace"
expect_fail "sandbox: a netlink socket" "RestrictAddressFamilies refuses: AF_NETLINK" check_trace "$TMP/sd/trace"
expect_fail "sandbox: W+X memory" "MemoryDenyWriteExecute refuses" check_trace "$TMP/sd/trace"
expect_fail "sandbox: a file written" "ProtectSystem=strict makes these read-only" check_trace "$TMP/sd/trace"

# deploy/monitoring: a misspelt field, a monitor on a port that is not
# there, an alert whose test no longer holds, a metric attnd does not have
if [ -d "$MON" ]; then
  mon_case() {
    local name=$1 text=$2 file=$3 expr=$4 check=$5 d
    d=$(mktemp -d "$TMP/mon.XXXXXX")
    cp -r "$MON" "$d/monitoring"
    mutate "$d/monitoring/$file" "$expr" || { fail "self-test: $name: could not break the copy"; return; }
    case $check in
      manifests) expect_fail "monitoring: $name" "$text" "${MONITOR[@]}" manifests "$d/monitoring/$file" ;;
      rules) expect_fail "monitoring: $name" "$text" rules_check "$d/monitoring/prometheusrule.yaml" "$d/monitoring/tests" ;;
      promql) expect_fail "monitoring: $name" "$text" promql_check "$d/monitoring" ;;
    esac
  }
  mon_case 'ServiceMonitor scrapeTimeout misspelt' 'scrapeTimout: unknown field' servicemonitor.yaml \
    's/scrapeTimeout:/scrapeTimout:/' manifests
  mon_case 'PodMonitor on the port http' 'port http is not metrics' podmonitor.yaml 's/- port: metrics/- port: http/' manifests
  mon_case 'ScaledObject minReplicaCount: "two"' 'minReplicaCount must be integer' autoscaling/keda-scaledobject.yaml \
    's/minReplicaCount: 2/minReplicaCount: "two"/' manifests
  if command -v promtool >/dev/null; then
    mon_case 'AttndNotReady on attnd_ready == 1' 'FAILED' prometheusrule.yaml 's/expr: attnd_ready == 0/expr: attnd_ready == 1/' rules
    mon_case 'a PromQL syntax error' 'parse error' prometheusrule.yaml 's/> 0.05$/> > 0.05/' rules
    [ -s "$TMP/metrics.txt" ] &&
      mon_case 'a metric attnd does not have' "not in attnd's /metrics: attnd_queue_dept" grafana/attnd-dashboard.json \
        's/sum(attnd_queue_depth{/sum(attnd_queue_dept{/' promql
  fi
fi

# ---------------------------------------------------------------- summary

echo
if [ "$FAILED" -gt 0 ]; then
  echo "Failed:"
  printf '  %s\n' "${FAILURES[@]}"
fi
echo "check-deploy: $PASSED passed, $FAILED failed, $SKIPPED skipped"
[ "$FAILED" -eq 0 ]
