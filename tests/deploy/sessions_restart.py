#!/usr/bin/env python3
"""Sessions through the balancer across a rolling restart: none lost.

  sessions_restart.py PORT --ready-file FILE --stop-file FILE [options]

Run by deploy/compose/test.sh (phase 5) against HAProxy in front of three
attnd replicas that each have a session_dir volume.  GROUPS x PER_GROUP
sessions ("<prefix>g<N>:s<M>", affinity group "<prefix>g<N>"), created and
prefilled with PREFILL tokens, then each group decodes one token a step
(every PACE seconds) until STOP_FILE exists and it has made AFTER steps
since; every answer is checked against the float64 reference of
tests/deploy/sessions.py, in the same three ways (v2 kv_attention batches
with X-Attnd-Affinity, /v1 steps with it, /v1 steps without it).  When the
sessions are made and every group's replica is known, READY_FILE is
written (the groups by replica, JSON), and the caller restarts the
replicas one at a time (SIGTERM: drain, sessions saved; start: loaded).

A step may be held while its group's replica is away, as a client of a
rolling restart does: answers that say "not here now" are sent again with
a backoff (0.1 s doubling to 1 s) for up to HOLD seconds -- a 502, 503 or
504, a connection error, and a 404 from a replica other than the group's
(HAProxy's ring sends the group elsewhere while its replica is down, and
that replica has no such session).  A 404 from the group's own replica is
a lost session: a failure.  So is any other status, an answer that does
not match the reference (a session restored short or wrong), a group
answered by another replica, or a step held longer than HOLD.  At the end
every session is deleted (204, from its replica).  Prints the counts as
one JSON line, and exits 1 on any failure (listed).
"""

import argparse
import http.client
import json
import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sessions  # noqa: E402  (tests/deploy/sessions.py)

HELD = (502, 503, 504)


class RestartRun(sessions.Run):
    def __init__(self, a):
        a.kill_replica = None
        super().__init__(a)
        self.c.update({"held_steps": 0, "held_requests": 0,
                       "held_by_status": {}, "held_groups": {},
                       "max_hold_s": 0.0, "steps": 0,
                       "steps_after_stop": {}, "lost": 0})

    def request(self, t, method, path, body, group, header):
        t0 = None
        delay = 0.1
        while True:
            try:
                st, by, data = super().request(t, method, path, body,
                                               group, header)
            except (OSError, http.client.HTTPException) as e:
                st, by, data = None, "?", str(e).encode()
            own = self.replica.get(group)
            if not (st is None or st in HELD
                    or (st == 404 and own is not None and by != own)):
                break
            now = time.monotonic()
            with self.lock:
                self.c["held_requests"] += 1
                k = "error" if st is None else "%d from %s" % (st, by)
                self.c["held_by_status"][k] = \
                    self.c["held_by_status"].get(k, 0) + 1
            if t0 is None:
                t0 = now
                with self.lock:
                    self.c["held_steps"] += 1
                    self.c["held_groups"][group] = \
                        self.c["held_groups"].get(group, 0) + 1
            if now - t0 > self.a.hold:
                self.failure("%s %s: still %s after %.1f s held (group %s "
                             "on %s)" % (method, path, st, now - t0, group,
                                         own))
                return st or 599, by, data
            time.sleep(delay)
            delay = min(delay * 2, 1.0)
        if t0 is not None:
            with self.lock:
                self.c["max_hold_s"] = max(self.c["max_hold_s"],
                                           round(time.monotonic() - t0, 2))
        return st, by, data

    def not_found(self, data, what, by):
        # only the group's own replica gets here (request() holds the rest)
        with self.lock:
            self.c["lost"] += 1
        self.failure("%s: 404 from %s, the group's replica: the session was "
                     "lost (%s)" % (what, by, data[:200]))
        return "failed"

    def setup(self, t, group, ss, mode):
        if not self.create(t, group, ss, mode):
            return False
        rows = self.new_tokens(ss, self.a.prefill)
        return self.step(t, group, ss, rows, mode) == "ok"

    def decode(self, t, group, ss, mode):
        after = 0
        while True:
            stopped = os.path.exists(self.a.stop_file)
            if stopped and after >= self.a.after:
                break
            rows = self.new_tokens(ss, 1)
            if self.step(t, group, ss, rows, mode) != "ok":
                return False
            with self.lock:
                self.c["steps"] += 1
            if stopped:
                after += 1
                with self.lock:
                    self.c["steps_after_stop"][group] = after
            time.sleep(self.a.pace)
        return True


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("port", type=int)
    ap.add_argument("--ready-file", required=True)
    ap.add_argument("--stop-file", required=True)
    ap.add_argument("--groups", type=int, default=10)
    ap.add_argument("--per-group", type=int, default=3)
    ap.add_argument("--prefill", type=int, default=4)
    ap.add_argument("--pace", type=float, default=0.2)
    ap.add_argument("--after", type=int, default=3,
                    help="steps each group makes after STOP_FILE appears")
    ap.add_argument("--hold", type=float, default=45,
                    help="longest a step may be held, seconds")
    ap.add_argument("--replicas", default="attnd-1,attnd-2,attnd-3",
                    help="each must hold a group")
    ap.add_argument("--max-tokens", type=int, default=1024)
    ap.add_argument("--prefix", default="p5-",
                    help="before each group's name (\"p5-\": 4, 3 and 3 "
                    "groups on the replicas of deploy/haproxy/haproxy.cfg)")
    ap.add_argument("--deadline", type=float, default=150)
    a = ap.parse_args()
    run = RestartRun(a)
    modes = ("v2", "header", "path")
    groups = []
    for g in range(a.groups):
        name = "%sg%d" % (a.prefix, g)
        ss = [sessions.Session("%s:s%d" % (name, m), 7000 + g * 1000 + m)
              for m in range(a.per_group)]
        groups.append((name, ss, modes[g % 3]))

    c = run.c
    ok = [True]
    conns = {}

    def each(fn):
        """fn(t, group, ss, mode) on a thread per group."""
        def go(g):
            t = conns.setdefault(g[0], {})
            try:
                if not fn(t, *g):
                    ok[0] = False
            except (OSError, http.client.HTTPException, ValueError,
                    KeyError, TimeoutError) as e:
                run.failure("%s: %s: %s" % (g[0], type(e).__name__, e))
                ok[0] = False
        ts = [threading.Thread(target=go, args=(g,), daemon=True)
              for g in groups]
        for th in ts:
            th.start()
        for th in ts:
            th.join(max(1, run.deadline - time.monotonic()) + 5)
        if any(th.is_alive() for th in ts):
            run.failure("%s did not end by the deadline" % fn.__name__)
            ok[0] = False

    t0 = time.monotonic()
    each(run.setup)
    by_replica = {}
    for g, r in run.replica.items():
        by_replica.setdefault(r, []).append(g)
    c["groups_by_replica"] = {r: len(v) for r, v in sorted(by_replica.items())}
    c["setup_s"] = round(time.monotonic() - t0, 2)
    empty = [r for r in a.replicas.split(",") if r not in by_replica]
    if ok[0] and empty:
        run.failure("%s hold no group: their restart would test nothing"
                    % ", ".join(empty))
        ok[0] = False
    with open(a.ready_file + ".tmp", "w") as f:
        json.dump({"ok": ok[0], "groups": by_replica}, f)
    os.rename(a.ready_file + ".tmp", a.ready_file)
    if ok[0]:
        t1 = time.monotonic()
        each(run.decode)
        c["decode_s"] = round(time.monotonic() - t1, 2)
        short = [g for g, _, _ in groups
                 if c["steps_after_stop"].get(g, 0) < a.after]
        if ok[0] and short:
            run.failure("groups without %d steps after the restarts: %s"
                        % (a.after, short))
    if ok[0]:
        t = {}
        deleted = 0
        for group, ss, mode in groups:
            for s in ss:
                st, by, data = run.request(t, "DELETE",
                                           "/v1/sessions/%s" % s.id, None,
                                           group, mode != "path")
                if st != 204:
                    run.failure("DELETE %s: HTTP %s %s"
                                % (s.id, st, data[:200]))
                else:
                    deleted += 1
                    run.served(group, by, "DELETE " + s.id)
        c["deleted"] = deleted
    for t in conns.values():
        if t.get("conn") is not None:
            t["conn"].close()
    c["sessions"] = a.groups * a.per_group
    c["groups"] = a.groups
    c["held_groups_n"] = len(c["held_groups"])
    c["min_length"] = min(len(s.keys) for _, ss, _ in groups for s in ss)
    c["max_length"] = max(len(s.keys) for _, ss, _ in groups for s in ss)
    print(json.dumps(c, sort_keys=True), flush=True)
    return 0 if c["failed"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
