#!/usr/bin/env python3
"""Integration tests: logs operators can use (issue 44): journald priority
prefixes, the access line's client, model and user agent,
access_log_exclude, and systemd's readiness notifications (NOTIFY_SOCKET).

Run alone: python3 tests/integration/test_logs.py --attnd PATH
(the options of run.py; see harness.py and README.md).
"""

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time

from harness import (HOST, Server, cfg, check, expect_status, main,
                     raw_exchange, request, run_attnd, small_v2_body, test, v1,
                     wait_log)

# journald's reading of a stream line (SyslogLevelPrefix=): a "<N>" at its
# start is the line's priority, and is stripped
_PRIO = re.compile(r"^<([0-7])>(.*)$")
_LEVEL_PRIO = {"error": 3, "warn": 4, "info": 6, "debug": 7}


def journal_lines(s):
    """Each line of s's log as journald reads it: (priority or None, the
    rest)."""
    out = []
    for line in s.log_text().splitlines():
        m = _PRIO.match(line)
        out.append((int(m.group(1)), m.group(2)) if m else (None, line))
    return out


def keys_file(d, text):
    path = os.path.join(d, "keys")
    with open(path, "w") as f:
        f.write(text)
    return path


def provoke_every_level(s, keys):
    """An access line, an info line (SIGHUP), an error (SIGHUP with a keys
    file that no longer reads); the caller's NOTIFY_SOCKET gives the
    warning.  (attnd writes no debug line yet: test_log.c checks <7>.)"""
    r = request(s.port, "GET", "/v2/health/live")
    expect_status(r, 200, "live")
    with open(keys, "w") as f:
        f.write("bad key with spaces\n")
    s.signal(signal.SIGHUP)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if "the keys in force stay" in s.log_text():
            break
        time.sleep(0.05)
    check("the keys in force stay" in s.log_text(),
          "no error line after SIGHUP: %s" % s.log_tail())


@test
def journal_priority_prefix_matches_each_level():
    """With JOURNAL_STREAM naming its stderr, every line (JSON and text)
    begins with its level's syslog priority as journald reads it: error
    3, warn 4, info 6, debug 7, access lines 6."""
    with tempfile.TemporaryDirectory(prefix="logs-it-") as d:
        keys = keys_file(d, "key-one\n")
        for fmt in ("json", "text"):
            with open(keys, "w") as f:
                f.write("key-one\n")
            # a NOTIFY_SOCKET that cannot be used: one warning
            with Server("--log-level", "debug", "--log-format", fmt,
                        "--api-keys-file", keys, name="journal-" + fmt,
                        journal_stream=True,
                        env={"NOTIFY_SOCKET": "relative/path"}) as s:
                provoke_every_level(s, keys)
                lines = journal_lines(s)
                seen = set()
                for prio, rest in lines:
                    check(prio is not None, "%s: line without a priority: %r"
                          % (fmt, rest))
                    if fmt == "json":
                        e = json.loads(rest)
                        want = 6 if e.get("type") == "access" else \
                            _LEVEL_PRIO[e["level"]]
                        kind = "access" if e.get("type") == "access" else \
                            e["level"]
                    else:
                        word = rest.split()[1]
                        want = 6 if word == "access" else _LEVEL_PRIO[word]
                        kind = word
                    check(prio == want, "%s: priority %d for %r" %
                          (fmt, prio, rest))
                    seen.add(kind)
                check(seen >= {"error", "warn", "info", "access"},
                      "%s: levels seen %r" % (fmt, sorted(seen)))


# A real journald, in a mount namespace of its own (tmpfs over
# /run/systemd, /run/log and /var/log/journal: nothing outside sees it),
# and attnd's stderr on its stream through systemd-cat, with
# JOURNAL_STREAM naming that socket as systemd would (systemd-cat does not
# set it).  Prints journalctl's JSON of attnd's lines, then "---", then
# those `journalctl -p err` shows.
_JOURNALD_SCRIPT = r"""
set -eu
attnd=$1 models=$2 keys=$3
mount -t tmpfs tmpfs /run/systemd
mkdir -p /run/log /var/log/journal
mount -t tmpfs tmpfs /run/log
mount -t tmpfs tmpfs /var/log/journal
/lib/systemd/systemd-journald >/dev/null 2>&1 &
jd=$! pid=""
# whatever happens, attnd and journald end with the script
trap 'kill -9 $pid $jd 2>/dev/null; wait 2>/dev/null || true' EXIT
for _ in $(seq 100); do [ -S /run/systemd/journal/stdout ] && break; sleep 0.05; done
NOTIFY_SOCKET=relative/path systemd-cat -t attnd-it-journal sh -c \
  'JOURNAL_STREAM=$(stat -L -c %d:%i /proc/self/fd/2) exec "$@"' sh \
  "$attnd" --host 127.0.0.1 --port 0 --models-dir "$models" \
  --api-keys-file "$keys" --log-format json &
pid=$!
port=""
for _ in $(seq 200); do
  port=$(journalctl -q --no-pager -t attnd-it-journal -o cat |
         sed -n 's/.*listening on 127\.0\.0\.1:\([0-9]*\).*/\1/p' | head -1)
  [ -n "$port" ] && break
  sleep 0.05
done
[ -n "$port" ]
curl -fsS -o /dev/null -H 'Authorization: Bearer key-one' \
  "http://127.0.0.1:$port/v1/models"
echo 'bad key with spaces' >"$keys"
kill -HUP $pid
sleep 0.5
kill -TERM $pid
wait $pid
sleep 0.3
journalctl -q --no-pager -t attnd-it-journal -o json
echo ---
journalctl -q --no-pager -t attnd-it-journal -p err -o cat
"""


@test
def journald_stores_each_line_at_its_priority():
    """Under a real journald (when one can be started here: root, unshare,
    systemd-journald, systemd-cat, curl): each line is stored at its
    level's priority with the <N> stripped, and `journalctl -p err` shows
    the errors alone."""
    need = ["unshare", "systemd-cat", "journalctl", "curl", "stat"]
    if os.geteuid() != 0 or not os.path.exists(
            "/lib/systemd/systemd-journald") or \
            any(shutil.which(n) is None for n in need) or \
            subprocess.run(["unshare", "-m", "--propagation", "private",
                            "true"], capture_output=True).returncode != 0:
        print("    skipped: journald_stores_each_line_at_its_priority: "
              "needs root, unshare -m, systemd-journald, systemd-cat, curl")
        return
    with tempfile.TemporaryDirectory(prefix="logs-it-jd-") as d:
        keys = keys_file(d, "key-one\n")
        script = os.path.join(d, "journald.sh")
        with open(script, "w") as f:
            f.write(_JOURNALD_SCRIPT)
        r = subprocess.run(["unshare", "-m", "--propagation", "private",
                            "bash", script, cfg.attnd, cfg.models_dir, keys],
                           capture_output=True, timeout=90,
                           stdin=subprocess.DEVNULL)
        out = r.stdout.decode("utf-8", "replace")
        check(r.returncode == 0 and "\n---\n" in out,
              "journald script rc %d: %s %s" %
              (r.returncode, out[-300:], r.stderr.decode()[-300:]))
        stored, errors = out.split("\n---\n", 1)
        seen, n_err = set(), 0
        for rec in (json.loads(l) for l in stored.splitlines() if l):
            msg = rec["MESSAGE"]
            check(isinstance(msg, str) and msg.startswith("{"),
                  "stored message %r" % msg)
            e = json.loads(msg)  # the <N> was stripped
            kind = "access" if e.get("type") == "access" else e["level"]
            want = 6 if kind == "access" else _LEVEL_PRIO[kind]
            check(int(rec["PRIORITY"]) == want, "PRIORITY %s for %r" %
                  (rec["PRIORITY"], msg))
            seen.add(kind)
            n_err += kind == "error"
        check(seen >= {"error", "warn", "info", "access"}, "seen %r" %
              sorted(seen))
        err_lines = [l for l in errors.splitlines() if l]
        check(len(err_lines) == n_err and
              all('"level":"error"' in l for l in err_lines),
              "journalctl -p err: %r (%d errors stored)" % (err_lines, n_err))


@test
def journal_prefix_only_on_the_journal():
    """No prefix without JOURNAL_STREAM, nor when it names another file
    (stderr redirected away from the journal), nor with
    log_priority_prefix never; always puts it on any stderr."""
    cases = [({}, (), False, "no JOURNAL_STREAM"),
             ({"JOURNAL_STREAM": "1:1"}, (), False, "another file"),
             ({}, ("--log-priority-prefix", "never"), False, "never"),
             ({}, ("--log-priority-prefix", "always"), True, "always")]
    for env, flags, prefixed, what in cases:
        journal = what == "never"
        with Server(*flags, name="prefix", env=env,
                    journal_stream=journal) as s:
            expect_status(request(s.port, "GET", "/v2/health/live"), 200,
                          what)
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline and \
                    '"type":"access"' not in s.log_text():
                time.sleep(0.05)
            lines = [l for l in s.log_text().splitlines() if l]
            check(len(lines) >= 3 and
                  any('"type":"access"' in l for l in lines),
                  "%s: log %r" % (what, lines))
            for l in lines:
                check(bool(_PRIO.match(l)) == prefixed,
                      "%s: %r" % (what, l[:120]))


def access_line(s, rid, timeout=5.0):
    return wait_log(s, lambda l: l.get("type") == "access" and
                    l.get("request_id") == rid, "access line " + rid,
                    timeout=timeout)


@test
def access_line_has_client_model_user_agent():
    """The peer's address, the model (v2: the URL's; /v1: the one run, or
    "attention" when none was; none for routes without one) and the
    User-Agent (none when the request sent none)."""
    with Server(name="access-fields") as s:
        ua = {"User-Agent": "itest/1.0"}
        r = request(s.port, "POST", "/v2/models/sdpa/infer",
                    small_v2_body(), headers=dict(ua, **{"X-Request-Id":
                                                         "v2"}))
        expect_status(r, 200, "v2")
        r = v1(s.port, {"query": [[1, 0]]}, headers=dict(ua, **{
            "X-Request-Id": "v1"}))
        expect_status(r, 200, "v1")
        r = v1(s.port, "not json", headers={"X-Request-Id": "v1-bad"})
        expect_status(r, 400, "v1 junk")
        r = request(s.port, "GET", "/v2/models/nosuch/ready",
                    headers={"X-Request-Id": "unknown"})
        expect_status(r, 404, "unknown model")
        r = raw_exchange(s.port, [b"GET /v2/health/live HTTP/1.1\r\n"
                                  b"Host: t\r\nX-Request-Id: no-ua\r\n\r\n"])
        expect_status(r, 200, "live, no User-Agent")
        # http.client sends no User-Agent of its own
        want = {"v2": ("sdpa", "itest/1.0"), "v1": ("sdpa", "itest/1.0"),
                "v1-bad": ("attention", None), "unknown": ("nosuch", None),
                "no-ua": (None, None)}
        for rid, (model, agent) in want.items():
            e = access_line(s, rid)
            check(e.get("client") == "127.0.0.1", "%s: client %r" %
                  (rid, e.get("client")))
            check(e.get("model") == model, "%s: model %r, expected %r" %
                  (rid, e.get("model"), model))
            check(e.get("user_agent") == agent and
                  (agent is not None or "user_agent" not in e),
                  "%s: user_agent %r, expected %r" %
                  (rid, e.get("user_agent"), agent))
            check(list(e)[-1] == "request_id", "%s: order %r" % (rid, e))


def hostile_agents():
    """User-Agent values a client may send: quotes, backslashes, control
    bytes, bytes that are not UTF-8, and a long one."""
    return [b'a"b\\c', b"esc\x1b[31mred\x01\x7f", b"x\xff\xfey",
            b'"}{"level":"error"', b"A" * 5000]


@test
def hostile_user_agent_never_breaks_a_line():
    """A hostile User-Agent stays inside its field in both formats: each
    request gives exactly one line, with no control byte in it; JSON lines
    parse with no forged field; text lines keep it quoted (a JSON string);
    it is cut to 256 bytes."""
    agents = hostile_agents()
    for fmt in ("json", "text"):
        with Server("--log-format", fmt, name="ua-" + fmt) as s:
            for i, ua in enumerate(agents):
                r = raw_exchange(s.port, [
                    b"GET /v2/health/live HTTP/1.1\r\nHost: t\r\n"
                    b"X-Request-Id: ua-%d\r\nUser-Agent: " % i + ua +
                    b"\r\n\r\n"])
                # attnd refuses control bytes in a header value (400,
                # test_admission.py); either way the line is written
                check(r.status in (200, 400), "ua %d: %r" % (i, r))
            marker = '"type":"access"' if fmt == "json" else " access "
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline and \
                    s.log_text().count(marker) < len(agents):
                time.sleep(0.05)
            lines = [l for l in s.log_text().splitlines() if marker in l]
            check(len(lines) == len(agents), "%s: %d lines for %d requests:"
                  " %r" % (fmt, len(lines), len(agents), lines))
            # each request's line by its id (two HTTP threads may write
            # them out of order); the one refused for its control byte
            # has an id of attnd's own
            by_id = {}
            for l in lines:
                m = re.search(r'ua-(\d)"?\}?$', l)
                by_id[int(m.group(1)) if m else None] = l
            check(len(by_id) == len(agents), "%s: ids %r" % (fmt, by_id))
            for i in range(len(agents)):
                l = by_id.get(i, by_id.get(None))
                check(not any(ord(c) < 0x20 for c in l),
                      "%s: control byte in %r" % (fmt, l))
                if fmt == "json":
                    e = json.loads(l)
                    check(e["type"] == "access" and "level" not in e,
                          "forged field: %r" % l)
                    got = e.get("user_agent")
                else:
                    m = re.search(r' user_agent=("(?:[^"\\]|\\.)*") id=\S+$',
                                  l)
                    got = json.loads(m.group(1)) if m else None
                want = agents[i][:256].decode("utf-8", "replace")
                check(got == want, "%s: user_agent %r, sent %r" %
                      (fmt, got, agents[i][:40]))
            # a newline and a quote in the path, once decoded: the path
            # and the model stay in their fields too
            r = request(s.port, "GET", "/v2/models/a%0Ab%22c/ready")
            check(r.status in (400, 404), "path with %%0A: %r" % r)
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline and \
                    s.log_text().count(marker) < len(agents) + 1:
                time.sleep(0.05)
            lines = [l for l in s.log_text().splitlines() if marker in l]
            check(len(lines) == len(agents) + 1, "%s: %r" % (fmt, lines[-2:]))
            l = lines[-1]
            if fmt == "json":
                e = json.loads(l)
                path, model = e["path"], e["model"]
            else:
                m = re.match(r'\S+ access GET ("(?:[^"\\]|\\.)*") .* '
                             r'model=("(?:[^"\\]|\\.)*") ', l)
                check(m, "text line %r" % l)
                path, model = json.loads(m.group(1)), json.loads(m.group(2))
            check(path == '/v2/models/a\nb"c/ready' and model == 'a\nb"c',
                  "%s: path %r, model %r" % (fmt, path, model))


def counter(port, route, code="200"):
    r = request(port, "GET", "/metrics")
    expect_status(r, 200, "metrics")
    total = 0.0
    for line in r.body.decode().splitlines():
        if line.startswith("attnd_http_requests_total{") and \
                ('route="%s"' % route) in line and ('code="%s"' % code) in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


@test
def access_log_exclude_keeps_probes_out_but_counted():
    """access_log_exclude /v2/health/,/metrics: probes and scrapes get no
    access line, the rest do, and the metrics count them all."""
    with Server("--access-log-exclude", "/v2/health/,/metrics",
                name="exclude") as s:
        before = counter(s.port, "/v2/health/ready")
        for i in range(3):
            expect_status(request(s.port, "GET", "/v2/health/ready",
                                  headers={"X-Request-Id": "probe-%d" % i}),
                          200, "ready")
        expect_status(request(s.port, "GET", "/v2",
                              headers={"X-Request-Id": "kept"}), 200, "v2")
        access_line(s, "kept")
        after = counter(s.port, "/v2/health/ready")
        check(after - before == 3, "ready counted %s" % (after - before))
        paths = [l["path"] for l in s.log_json() if l.get("type") == "access"]
        check(paths == ["/v2"], "access lines of %r" % paths)


@test
def access_log_exclude_must_be_paths():
    """An item that does not begin with '/' stops the start, naming the
    setting and the item (flag and environment alike)."""
    rc, _, err = run_attnd("--access-log-exclude", "/metrics,v2/health",
                           "--check-config")
    check(rc == 2 and "access_log_exclude" in err and "'v2/health'" in err,
          "rc %d: %r" % (rc, err))
    rc, _, err = run_attnd("--check-config",
                           env={"ATTND_ACCESS_LOG_EXCLUDE": "health"})
    check(rc == 2 and "access_log_exclude" in err, "rc %d: %r" % (rc, err))


class Notifications:
    """A unix datagram socket in the role of systemd's notification socket
    (abstract: an @name; else a path in a temporary folder)."""

    def __init__(self, abstract=False):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.dir = None
        if abstract:
            name = "logs-it-notify-%d-%d" % (os.getpid(), time.monotonic_ns())
            self.sock.bind("\0" + name)
            self.name = "@" + name
        else:
            self.dir = tempfile.mkdtemp(prefix="logs-it-notify-")
            self.name = os.path.join(self.dir, "notify")
            self.sock.bind(self.name)
        self.got = []

    def next(self, timeout=15.0):
        """The next message as {key: value}; Failure after timeout."""
        self.sock.settimeout(timeout)
        try:
            data = self.sock.recv(4096)
        except socket.timeout:
            check(False, "no notification within %.0f s (got %r)" %
                  (timeout, self.got))
        msg = dict(l.split("=", 1) for l in data.decode().split("\n") if l)
        self.got.append(msg)
        return msg

    def none_within(self, secs):
        self.sock.settimeout(secs)
        try:
            data = self.sock.recv(4096)
        except socket.timeout:
            return True
        self.got.append(data)
        return False

    def close(self):
        self.sock.close()
        if self.dir:
            os.unlink(self.name)
            os.rmdir(self.dir)


def notify_cycle(abstract):
    n = Notifications(abstract)
    try:
        s = Server(name="notify", env={"NOTIFY_SOCKET": n.name})
        try:
            m = n.next()
            # READY=1 only once it serves: readiness answers 200 now
            check(m.get("READY") == "1", "first message %r" % m)
            expect_status(request(s.port, "GET", "/v2/health/ready"), 200,
                          "ready at READY=1")
            check("STATUS" in m and str(s.port) in m["STATUS"], repr(m))
            s.signal(signal.SIGHUP)
            m = n.next()
            check(m.get("RELOADING") == "1" and "MONOTONIC_USEC" in m,
                  "after SIGHUP: %r" % m)
            m = n.next()
            check(m.get("READY") == "1", "after the reload: %r" % m)
            s.signal(signal.SIGTERM)
            m = n.next()
            check(m.get("STOPPING") == "1", "after SIGTERM: %r" % m)
            rc = s.wait(30)
            check(rc == 0, "exit %d" % rc)
            check(n.none_within(0.2), "more: %r" % n.got)
        finally:
            s.cleanup()
    finally:
        n.close()


@test
def notify_socket_ready_reload_stopping():
    """NOTIFY_SOCKET (a path): READY=1 once /v2/health/ready answers 200,
    RELOADING=1 then READY=1 around SIGHUP, STOPPING=1 on SIGTERM."""
    notify_cycle(abstract=False)


@test
def notify_socket_abstract():
    """NOTIFY_SOCKET as systemd gives it for an abstract socket (@name)."""
    notify_cycle(abstract=True)


@test
def notify_stopping_at_the_shutdown_delay():
    """With shutdown_delay_ms, STOPPING=1 comes as the delay begins (the
    readiness answers 503 from then on), before the drain."""
    n = Notifications()
    try:
        with Server("--shutdown-delay-ms", "3000", name="notify-delay",
                    env={"NOTIFY_SOCKET": n.name}) as s:
            check(n.next().get("READY") == "1", "READY first: %r" % n.got)
            s.signal(signal.SIGTERM)
            m = n.next()
            check(m.get("STOPPING") == "1", "after SIGTERM: %r" % m)
            r = request(s.port, "GET", "/v2/health/ready")
            expect_status(r, 503, "readiness in the delay")
            expect_status(request(s.port, "GET", "/v2/health/live"), 200,
                          "still serving in the delay")
            s.signal(signal.SIGTERM)  # ends the delay now
            m = n.next()
            check(m == {"STATUS": "draining"}, "at the drain: %r" % m)
    finally:
        n.close()


@test
def notify_socket_unusable_is_one_warning():
    """A NOTIFY_SOCKET nobody listens on: one warning, attnd serves on and
    stops cleanly."""
    d = tempfile.mkdtemp(prefix="logs-it-nosock-")
    try:
        with Server(name="notify-gone",
                    env={"NOTIFY_SOCKET": os.path.join(d, "none")}) as s:
            s.signal(signal.SIGHUP)
            wait_log(s, lambda l: "API keys" in l.get("msg", "") or
                     "SIGHUP" in l.get("msg", ""), "SIGHUP line")
            expect_status(request(s.port, "GET", "/v2/health/ready"), 200,
                          "ready")
            warns = [l for l in s.log_json()
                     if "systemd notification" in l.get("msg", "")]
            check(len(warns) == 1 and warns[0]["level"] == "warn",
                  "warnings: %r" % warns)
    finally:
        os.rmdir(d)


if __name__ == "__main__":
    main()
