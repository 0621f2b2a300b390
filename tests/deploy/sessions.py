#!/usr/bin/env python3
"""Sessions through the balancer, and a replica lost under them.

  sessions.py PORT --kill-replica NAME --kill-cmd CMD [options]

Run by deploy/compose/test.sh against HAProxy (deploy/haproxy/haproxy.cfg)
in front of three attnd replicas.  GROUPS x PER_GROUP sessions, ids
"g<N>:s<M>" (affinity group "g<N>": the id's text before its first ':'),
each prefilled with PREFILL tokens and then decoded STEPS steps, one token
a step; every answer's output and lse are checked against a float64
reference computed here (causal attention over the session's tokens).
The groups take the three ways a session's requests reach the balancer:

  group N % 3 == 0: the v2 model kv_attention, the group's sessions in one
                    batch a step, with the header X-Attnd-Affinity (as
                    attnd's Python client sends it);
  group N % 3 == 1: /v1/sessions/{id}/... with the header;
  group N % 3 == 2: /v1/sessions/{id}/... without it (the balancer takes
                    the group from the path, as for a curl user).

Every request of a group must be answered by the same replica (HAProxy's
X-Served-By).  After KILL_AFTER steps, CMD is run (it kills the replica
NAME, which must hold at least one group).  Then the sessions of the
groups NAME held answer 404 with "not found" (checked, once per session,
or once per batch): they are created again and prefilled with every token
they had, as a client does, and go on; every other session's steps must
succeed, answered by the replica they had.  At the end every session is
deleted (204, from its group's replica).  Prints the counts as one JSON
line and exits 1 on any failure (listed).  Python standard library only;
every request goes to 127.0.0.1 and the run is bounded in time (--deadline).
"""

import argparse
import http.client
import json
import math
import random
import subprocess
import sys
import threading
import time

HOST = "127.0.0.1"
H, HKV, D = 2, 1, 4  # query heads, kv heads (GQA), head_dim
TOL = 1e-5           # docs/api.md: fp32 sessions within 1e-5 (1 + |ref|)
HEADER = "X-Attnd-Affinity"


def group_of(sid):
    return sid.split(":", 1)[0]


def val(rng):
    # multiples of 1/64 in [-2, 2]: exact in fp32, so the float64
    # reference sees what the server stores
    return rng.randint(-128, 128) / 64.0


class Session:
    def __init__(self, sid, seed):
        self.id = sid
        self.rng = random.Random(seed)
        self.queries = []  # [n][H][D], kept for a prefill again
        self.keys = []     # [n][D] (one kv head)
        self.values = []   # [n][D]

    def token(self):
        """q [H][D], k [D], v [D] of a new token."""
        q = [[val(self.rng) for _ in range(D)] for _ in range(H)]
        k = [val(self.rng) for _ in range(D)]
        v = [val(self.rng) for _ in range(D)]
        return q, k, v

    def reference(self, qs, first):
        """output [t][H][D] and lse [t][H] of query rows qs, row i at
        absolute position first + i, over self.keys/values (causal)."""
        scale = 1.0 / math.sqrt(D)
        outs, lses = [], []
        for i, q in enumerate(qs):
            p = first + i
            orow, lrow = [], []
            for h in range(H):
                s = [sum(a * b for a, b in zip(q[h], self.keys[j])) * scale
                     for j in range(p + 1)]
                m = max(s)
                e = [math.exp(x - m) for x in s]
                z = sum(e)
                orow.append([sum(e[j] * self.values[j][d]
                                 for j in range(p + 1)) / z
                             for d in range(D)])
                lrow.append(m + math.log(z))
            outs.append(orow)
            lses.append(lrow)
        return outs, lses


def flat(x):
    if isinstance(x, list):
        return [y for e in x for y in flat(e)]
    return [x]


def mismatch(got, ref):
    """None, or where got (flat list) differs from ref (nested)."""
    r = flat(ref)
    if len(got) != len(r):
        return "%d values, expected %d" % (len(got), len(r))
    for i, (g, w) in enumerate(zip(got, r)):
        if g is None or abs(g - w) > TOL * (1 + abs(w)):
            return "value %d is %r, expected %r" % (i, g, w)
    return None


class Run:
    def __init__(self, a):
        self.a = a
        self.lock = threading.Lock()
        self.c = {"requests": 0, "ok": 0, "checked_rows": 0,
                  "not_found": 0, "recreated": 0, "failed": 0,
                  "replica_of_group": {}, "groups_by_replica": {},
                  "moved_to": {}, "failures": []}
        self.deadline = time.monotonic() + a.deadline
        self.replica = {}  # group -> replica name (current)
        self.last_404_by = "?"  # (for a failure's message only)

    def failure(self, msg):
        with self.lock:
            self.c["failed"] += 1
            if len(self.c["failures"]) < 30:
                self.c["failures"].append(msg)

    # one HTTP request on a thread's connection
    def request(self, t, method, path, body, group, header):
        if time.monotonic() > self.deadline:
            raise TimeoutError("past the deadline (%d s)" % self.a.deadline)
        hdrs = {"Content-Type": "application/json"}
        if header:
            hdrs[HEADER] = group
        for attempt in range(2):
            try:
                if t.get("conn") is None:
                    t["conn"] = http.client.HTTPConnection(HOST, self.a.port,
                                                           timeout=30)
                t["conn"].request(
                    method, path, headers=hdrs,
                    body=None if body is None else json.dumps(body))
                r = t["conn"].getresponse()
                data = r.read()
                if (r.getheader("Connection") or "").lower() == "close":
                    t["conn"].close()
                    t["conn"] = None
                break
            except (OSError, http.client.HTTPException):
                # a keep-alive connection HAProxy closed between requests:
                # open another once; a second error is a failure
                if t.get("conn") is not None:
                    t["conn"].close()
                t["conn"] = None
                if attempt == 1:
                    raise
        with self.lock:
            self.c["requests"] += 1
        return r.status, r.getheader("X-Served-By") or "?", data

    def served(self, group, by, what):
        """Check that group's requests keep to one replica."""
        want = self.replica.get(group)
        if want is None:
            self.replica[group] = by
        elif by != want:
            self.failure("%s: answered by %s, the group %s is on %s"
                         % (what, by, group, want))

    # a step of t tokens for every session of a group, at each one's length
    def step(self, t, group, sessions, rows, mode):
        """rows: per session, the step's [(q, k, v)] tokens (already
        appended to sessions' keys/values).  Returns "ok", "not_found" or
        "failed"."""
        header = mode != "path"
        if mode == "v2":
            n = len(rows[0])
            first = len(sessions[0].keys) - n
            body = {"parameters": {"layer": 0}, "inputs": [
                {"name": "session_id", "datatype": "BYTES",
                 "shape": [len(sessions)], "data": [s.id for s in sessions]},
                {"name": "position", "datatype": "INT64",
                 "shape": [len(sessions)], "data": [first] * len(sessions)},
                {"name": "query", "datatype": "FP32",
                 "shape": [len(sessions), n, H, D],
                 "data": flat([[tk[0] for tk in r] for r in rows])},
                {"name": "key", "datatype": "FP32",
                 "shape": [len(sessions), n, HKV, D],
                 "data": flat([[tk[1] for tk in r] for r in rows])},
                {"name": "value", "datatype": "FP32",
                 "shape": [len(sessions), n, HKV, D],
                 "data": flat([[tk[2] for tk in r] for r in rows])}]}
            what = "kv_attention %s x%d at %d" % (group, len(sessions), first)
            st, by, data = self.request(t, "POST",
                                        "/v2/models/kv_attention/infer",
                                        body, group, header)
            if st == 404:
                return self.not_found(data, what, by)
            if st != 200:
                self.failure("%s: HTTP %d %s" % (what, st, data[:200]))
                return "failed"
            self.served(group, by, what)
            outs = {o["name"]: o["data"]
                    for o in json.loads(data)["outputs"]}
            ro, rl = [], []
            for s, r in zip(sessions, rows):
                o, lse = s.reference([tk[0] for tk in r], first)
                ro.append(o)
                rl.append(lse)
            for name, got, ref in (("output", outs.get("output"), ro),
                                   ("lse", outs.get("lse"), rl)):
                bad = mismatch(got or [], ref)
                if bad:
                    self.failure("%s: %s %s" % (what, name, bad))
                    return "failed"
            with self.lock:
                self.c["ok"] += 1
                self.c["checked_rows"] += len(sessions) * n
            return "ok"
        for s, r in zip(sessions, rows):
            n = len(r)
            first = len(s.keys) - n
            what = "/v1 %s attend at %d%s" % (
                s.id, first, "" if header else " (no header)")
            st, by, data = self.request(
                t, "POST", "/v1/sessions/%s/attend" % s.id,
                {"layer": 0, "position": first,
                 "query": [flat(tk[0]) for tk in r],
                 "key": [tk[1] for tk in r],
                 "value": [tk[2] for tk in r]}, group, header)
            if st == 404:
                return self.not_found(data, what, by)
            if st != 200:
                self.failure("%s: HTTP %d %s" % (what, st, data[:200]))
                return "failed"
            self.served(group, by, what)
            j = json.loads(data)
            o, lse = s.reference([tk[0] for tk in r], first)
            for name, got, ref in (("output", flat(j.get("output", [])), o),
                                   ("lse", flat(j.get("lse", [])), lse)):
                bad = mismatch(got, ref)
                if bad:
                    self.failure("%s: %s %s" % (what, name, bad))
                    return "failed"
            if j.get("length") != len(s.keys):
                self.failure("%s: length %r, expected %d"
                             % (what, j.get("length"), len(s.keys)))
                return "failed"
            with self.lock:
                self.c["ok"] += 1
                self.c["checked_rows"] += n
        return "ok"

    def not_found(self, data, what, by):
        try:
            msg = json.loads(data).get("error", "")
        except ValueError:
            msg = data[:200]
        if "not found" not in str(msg):
            self.failure("%s: 404 without 'not found': %r" % (what, msg))
            return "failed"
        if by == self.a.kill_replica:
            self.failure("%s: the 404 came from the killed replica" % what)
            return "failed"
        with self.lock:
            self.c["not_found"] += 1
        self.last_404_by = by
        return "not_found"

    def create(self, t, group, sessions, mode):
        for s in sessions:
            st, by, data = self.request(
                t, "PUT", "/v1/sessions/%s" % s.id,
                {"layers": 1, "num_heads": H, "num_kv_heads": HKV,
                 "head_dim": D,
                 "max_tokens": getattr(self.a, "max_tokens", 256),
                 "kv_dtype": "fp32"},
                group, mode != "path")
            if st != 201:
                self.failure("PUT %s: HTTP %d %s (expected 201)"
                             % (s.id, st, data[:200]))
                return False
            self.served(group, by, "PUT " + s.id)
        return True

    def new_tokens(self, sessions, n):
        rows = []
        for s in sessions:
            r = [s.token() for _ in range(n)]
            for q, k, v in r:
                s.queries.append(q)
                s.keys.append(k)
                s.values.append(v)
            rows.append(r)
        return rows

    def group_run(self, t, group, sessions, mode, steps, phase):
        """phase 1: create, prefill, steps; phase 2: steps, recovering
        from a lost replica once.  Returns False on a failure."""
        if phase == 1:
            if not self.create(t, group, sessions, mode):
                return False
            rows = self.new_tokens(sessions, self.a.prefill)
            if self.step(t, group, sessions, rows, mode) != "ok":
                return False
        lost = False
        for _ in range(steps):
            rows = self.new_tokens(sessions, 1)
            r = self.step(t, group, sessions, rows, mode)
            if r == "ok":
                continue
            if r == "failed":
                return False
            if phase == 1 or lost:
                self.failure("%s: 404 %s (from %s; the group was on %s)" % (
                    group, "again after re-creating" if lost
                    else "before the kill", self.last_404_by,
                    self.replica.get(group)))
                return False
            # the replica of this group is gone: its sessions are not
            # found wherever the group went; re-create them and prefill
            # them with every token they had (the step's token included)
            lost = True
            old = self.replica.pop(group, None)
            if old != self.a.kill_replica:
                self.failure("%s: 404 though its replica %s was not killed"
                             % (group, old))
                return False
            if mode != "v2":
                # /v1 steps go one session at a time: the first 404 has
                # been counted; the others are checked one by one too
                for s in sessions[1:]:
                    st, by, data = self.request(
                        t, "GET", "/v1/sessions/%s" % s.id, None, group,
                        mode != "path")
                    if st != 404 or self.not_found(data, "GET " + s.id,
                                                   by) != "not_found":
                        self.failure("GET %s after the kill: HTTP %d %s"
                                     % (s.id, st, data[:200]))
                        return False
            if not self.create(t, group, sessions, mode):
                return False
            with self.lock:
                self.c["recreated"] += len(sessions)
            full = [[(s.queries[i], s.keys[i], s.values[i])
                     for i in range(len(s.keys))] for s in sessions]
            if self.step(t, group, sessions, full, mode) != "ok":
                return False
            with self.lock:
                self.c["moved_to"][group] = self.replica.get(group)
        return True


def gkey(group):
    return int(group.rsplit("g", 1)[1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("port", type=int)
    ap.add_argument("--groups", type=int, default=20)
    ap.add_argument("--per-group", type=int, default=3)
    ap.add_argument("--prefill", type=int, default=4)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--kill-after", type=int, default=25)
    ap.add_argument("--kill-replica", required=True)
    ap.add_argument("--kill-cmd", required=True)
    ap.add_argument("--threads", type=int, default=6)
    ap.add_argument("--prefix", default="",
                    help="before each group's name (for runs on a stack "
                    "that already holds sessions of an earlier run)")
    ap.add_argument("--deadline", type=float, default=150)
    a = ap.parse_args()
    run = Run(a)
    modes = ("v2", "header", "path")
    groups = []
    for g in range(a.groups):
        name = "%sg%d" % (a.prefix, g)
        ss = [Session("%s:s%d" % (name, m), g * 1000 + m)
              for m in range(a.per_group)]
        groups.append((name, ss, modes[g % 3]))

    def phase(n, steps):
        todo = list(groups)
        ok = [True]

        def worker():
            t = {}
            while True:
                with run.lock:
                    if not todo:
                        break
                    group, ss, mode = todo.pop(0)
                try:
                    if not run.group_run(t, group, ss, mode, steps, n):
                        ok[0] = False
                except (OSError, http.client.HTTPException, ValueError,
                        KeyError, TimeoutError) as e:
                    run.failure("%s: %s: %s" % (group, type(e).__name__, e))
                    ok[0] = False
            if t.get("conn") is not None:
                t["conn"].close()

        ts = [threading.Thread(target=worker, daemon=True)
              for _ in range(max(1, a.threads))]
        for th in ts:
            th.start()
        for th in ts:
            th.join(max(1, run.deadline - time.monotonic()) + 5)
        if any(th.is_alive() for th in ts):
            run.failure("phase %d did not end by the deadline" % n)
            ok[0] = False
        return ok[0]

    t0 = time.monotonic()
    ok = phase(1, a.kill_after)
    c = run.c
    c["replica_of_group"] = dict(sorted(run.replica.items(),
                                        key=lambda x: gkey(x[0])))
    for g, r in run.replica.items():
        c["groups_by_replica"][r] = c["groups_by_replica"].get(r, 0) + 1
    c["phase1_s"] = round(time.monotonic() - t0, 2)
    held = [g for g, r in run.replica.items() if r == a.kill_replica]
    c["groups_on_killed"] = len(held)
    if ok and not held:
        run.failure("%s holds no group: the kill would test nothing"
                    % a.kill_replica)
        ok = False
    if ok:
        t1 = time.monotonic()
        p = subprocess.run(a.kill_cmd, shell=True, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, timeout=60)
        if p.returncode != 0:
            run.failure("kill command failed: %s" % p.stdout[-300:])
            ok = False
        else:
            ok = phase(2, a.steps - a.kill_after)
            c["phase2_s"] = round(time.monotonic() - t1, 2)
            lost = sorted(held, key=lambda g: gkey(g))
            moved = sorted(c["moved_to"], key=lambda g: gkey(g))
            if ok and moved != lost:
                run.failure("re-created groups %s, but %s held %s"
                            % (moved, a.kill_replica, lost))
            if any(r == a.kill_replica for r in c["moved_to"].values()):
                run.failure("a group moved to the killed replica")
        if ok:
            # every session is where its group is: DELETE answers 204
            t = {}
            deleted = 0
            for group, ss, mode in groups:
                for sess in ss:
                    st, by, data = run.request(
                        t, "DELETE", "/v1/sessions/%s" % sess.id, None,
                        group, mode != "path")
                    if st != 204:
                        run.failure("DELETE %s: HTTP %d %s"
                                    % (sess.id, st, data[:200]))
                    else:
                        deleted += 1
                        run.served(group, by, "DELETE " + sess.id)
            if t.get("conn") is not None:
                t["conn"].close()
            c["deleted"] = deleted
    c["sessions"] = a.groups * a.per_group
    c["steps_per_session"] = a.steps
    print(json.dumps(c, sort_keys=True), flush=True)
    return 0 if c["failed"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
