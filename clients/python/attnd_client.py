"""attnd_client: a small Python client of attnd (standard library + numpy).

One module, no tritonclient: copy this file next to your code, or put
``clients/python`` on ``PYTHONPATH``.  It follows attnd's API
(docs/api.md) exactly:

- ``Client.attention(query, key, value, **variants)``: the stateless
  ``POST /v1/attention`` (JSON).
- Sessions (attnd keeps a decoder's keys and values): ``Client.session``
  creates one (``PUT /v1/sessions/{id}``: 201, or 200 for an existing one
  of the same shape), ``Client.get_session`` / ``list_sessions`` read them,
  and a ``Session`` has ``attend`` (one step of one session), ``fork``,
  ``truncate``, ``refresh``, ``delete`` and is a context manager that
  deletes it on exit.
- ``Client.decode(sessions, layer, q, k, v)``: one step of many sessions
  in one request to the v2 model ``kv_attention``.

Steps (``Session.attend``, ``Client.decode``) go over KServe v2 with
Triton's binary tensor extension: a JSON header followed by the raw
little-endian tensors, so a decode step costs a few KiB on the wire.
Queries, keys and values are float32 numpy arrays (float64 and other
numbers are sent as float32); a float16 array is sent as FP16 and a
bfloat16 one (``ml_dtypes.bfloat16``, if you use it) as BF16.  Outputs
come back as float32.

Example::

    import numpy as np
    from attnd_client import Client, AttndError

    c = Client("http://127.0.0.1:8080")            # api_key="..." if keys are on
    with c.session("chat:1", num_heads=8, head_dim=64, num_kv_heads=2,
                   layers=2) as s:
        q = np.random.randn(5, 8, 64).astype(np.float32)   # prefill 5 tokens
        k = np.random.randn(5, 2, 64).astype(np.float32)
        out, lse = s.attend(q, k, k, layer=0)       # out [5,8,64], lse [5,8]
        print(s.length)                             # [5, 0]

Positions.  attnd appends a step's tokens at an explicit ``position`` that
must equal the layer's length (else 409 with the length).  The client
tracks each session's length per layer (``Session.length``): it is set
from every session object attnd returns (create, get, truncate, fork,
refresh) and advanced by ``t`` after every successful step with keys and
values, and steps are sent at the tracked length.  A 409 does not change
it: call ``refresh()`` to read the server's, or use ``AttndError.length``.

Retries.  A step (and every idempotent call: GET, PUT, truncate, a
stateless attention) that fails with a connection error (no HTTP answer:
a reset, a closed kept-alive connection, a timeout) is sent once more, on
a new connection, with the same position and the same bytes.  That is
safe because attnd answers a repeated step bitwise the same without
appending it: when ``position + t`` equals the layer's length and the
keys and values stored there are bitwise the ones sent, the step is
answered again and nothing changes.  So whether or not the first attempt
reached the server, the session ends with the step applied exactly once.
A fork and a delete are retried only when the connection failed before
the request was sent in full (a repeated fork would be a 409, a repeated
delete a 404).  A second failure raises ``AttndError`` with status 0.

Errors.  Every non-2xx answer raises ``AttndError``: ``.status`` (the
HTTP status; 0 for a connection error), ``.message`` (attnd's ``"error"``
text), ``.body`` (the parsed JSON body, or None) and ``.length`` (the
layer's length from a 409's body, or None).  A 404 for a session means
attnd does not hold it: it was deleted, it expired
(``session_idle_timeout_s``), or its replica restarted or died (sessions
live in one attnd's memory).  The caller then re-creates it
(``Client.session``, same id and shape) and prefills it again with the
tokens it had (``examples/decode/`` shows it).

Affinity (replicas behind a load balancer).  A session lives in one
replica, so every request of a session must reach the replica that holds
it.  Every session request carries the header::

    X-Attnd-Affinity: <group>

where ``group`` is the session id's text before its first ``:`` (the
whole id when it has none): ``chat:7`` and ``chat:8`` are in group
``chat``, ``doc-1`` is its own group.  The load balancer hashes on that
header (deploy/ has the balancers' configuration), which puts a
group on one replica.  A batched ``decode`` sends its sessions' common
group; when its sessions belong to several groups, the client sends one
request per group and puts the answers back in the order given.  So
sessions you want to decode in one request get ids ``group:name``, and a
fork should keep its origin's group (the copy is made on the origin's
replica).  ``list_sessions`` carries no affinity: behind a balancer it
lists the sessions of whichever replica answers.

Threads.  A ``Client`` may be shared by threads: each thread keeps its own
kept-alive HTTP connection.  A ``Session``'s tracked lengths are not
locked: step one session from one thread at a time (attnd applies a
session's steps in the order they arrive anyway).
"""

import http.client
import json
import select
import socket
import struct
import threading
import urllib.parse

import numpy as np

__all__ = ["AttndError", "Client", "Session", "affinity_group"]

AFFINITY_HEADER = "X-Attnd-Affinity"

_V2_MODEL = "kv_attention"


def affinity_group(session_id):
    """The affinity group of a session id: its text before the first ':'
    (the whole id when it has none)."""
    return str(session_id).split(":", 1)[0]


class AttndError(Exception):
    """A failed call.  status: the HTTP status (0: no answer, a connection
    error); message: attnd's "error" text (or what went wrong); body: the
    parsed JSON body or None; length: a 409's layer length, or None."""

    def __init__(self, status, message, body=None):
        self.status = int(status)
        self.message = message
        self.body = body
        length = body.get("length") if isinstance(body, dict) else None
        self.length = length if isinstance(length, int) else None
        super().__init__("HTTP %d: %s" % (self.status, message)
                         if self.status else message)


class _Sent(Exception):
    """Internal: a connection error after the request was sent in full."""


# ---- tensors --------------------------------------------------------------

def _wire(a):
    """(KServe datatype, little-endian bytes) of an array-like, float32
    unless it is float16 or a bfloat16 numpy type."""
    a = np.asarray(a)
    if a.dtype == np.float16:
        return "FP16", np.ascontiguousarray(a, dtype="<f2").tobytes()
    if a.dtype.name == "bfloat16" and a.dtype.itemsize == 2:
        return "BF16", np.ascontiguousarray(a).tobytes()
    return "FP32", np.ascontiguousarray(a, dtype="<f4").tobytes()


def _bytes_tensor(strings):
    """Triton's BYTES serialization: each a 4-byte LE length, then bytes."""
    out = bytearray()
    for s in strings:
        b = s.encode("utf-8") if isinstance(s, str) else bytes(s)
        out += struct.pack("<I", len(b)) + b
    return bytes(out)


def _jsonable(v):
    if isinstance(v, np.ndarray):
        return v.tolist()
    if isinstance(v, np.generic):
        return v.item()
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if isinstance(v, dict):
        return {k: _jsonable(x) for k, x in v.items()}
    return v


def _floats(x):
    """A JSON array of numbers (null: NaN) as float32."""
    return np.array(x, dtype=np.float32)


# ---- the client ------------------------------------------------------------

class Client:
    """attnd at url ("http://host:port", or https; a path prefix is kept).
    api_key: sent as "Authorization: Bearer KEY".  timeout: seconds for
    each HTTP exchange."""

    def __init__(self, url="http://127.0.0.1:8080", api_key=None,
                 timeout=60.0):
        u = urllib.parse.urlsplit(url if "://" in url else "http://" + url)
        if u.scheme not in ("http", "https"):
            raise ValueError("url must be http:// or https://, not %r" % url)
        self.url = url
        self.api_key = api_key
        self.timeout = timeout
        self._https = u.scheme == "https"
        self._host = u.hostname or "127.0.0.1"
        self._port = u.port or (443 if self._https else 80)
        self._prefix = u.path.rstrip("/")
        self._local = threading.local()

    # -- HTTP --

    def _new_conn(self):
        cls = (http.client.HTTPSConnection if self._https
               else http.client.HTTPConnection)
        return cls(self._host, self._port, timeout=self.timeout)

    def _conn(self):
        """This thread's connection, replaced when the server closed it
        while idle (readable with nothing asked: EOF)."""
        conn = getattr(self._local, "conn", None)
        if conn is not None and conn.sock is not None:
            try:
                r, _, _ = select.select([conn.sock], [], [], 0)
                stale = bool(r)
            except (OSError, ValueError):
                stale = True
            if stale:
                conn.close()
        if conn is None:
            conn = self._local.conn = self._new_conn()
        return conn

    def _drop_conn(self):
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
        self._local.conn = None

    def close(self):
        """Close this thread's connection (others close with their
        threads)."""
        self._drop_conn()

    def _once(self, method, path, body, headers):
        conn = self._conn()
        try:
            conn.request(method, path, body=body, headers=headers)
        except (OSError, http.client.HTTPException) as e:
            self._drop_conn()
            raise ConnectionError("%s %s: %s" % (method, path, e)) from e
        try:
            r = conn.getresponse()
            data = r.read()
        except (OSError, http.client.HTTPException) as e:
            self._drop_conn()
            raise _Sent("%s %s: %s" % (method, path, e)) from e
        return r.status, r, data

    def _request(self, method, path, body=None, headers=None, group=None,
                 retry=True, ctype="application/json"):
        """(status, response, body bytes) of a 2xx answer; AttndError
        otherwise.  retry: resend once on a new connection after a
        connection error (False: only when the request was not sent)."""
        hdrs = {}
        if body is not None:
            hdrs["Content-Type"] = ctype
        if self.api_key is not None:
            hdrs["Authorization"] = "Bearer " + self.api_key
        if group is not None:
            hdrs[AFFINITY_HEADER] = group
        hdrs.update(headers or {})
        path = self._prefix + path
        for attempt in (0, 1):
            try:
                status, r, data = self._once(method, path, body, hdrs)
                break
            except _Sent as e:          # sent in full: maybe applied
                if not retry or attempt:
                    raise AttndError(0, "connection error: %s" % e) from e
            except ConnectionError as e:  # not sent in full
                if attempt:
                    raise AttndError(0, "connection error: %s" % e) from e
        if 200 <= status < 300:
            return status, r, data
        raise self._error(status, r, data)

    @staticmethod
    def _error(status, r, data):
        body = None
        n = r.getheader("Inference-Header-Content-Length")
        text = data[:int(n)] if n and n.isdigit() else data
        try:
            body = json.loads(text.decode("utf-8")) if text else None
        except ValueError:
            body = None
        if isinstance(body, dict) and isinstance(body.get("error"), str):
            msg = body["error"]
        else:
            msg = (data.decode("utf-8", "replace").strip()
                   or r.reason or "HTTP %d" % status)
        return AttndError(status, msg, body if isinstance(body, dict)
                          else None)

    def _json(self, method, path, obj=None, group=None, retry=True):
        body = None if obj is None else json.dumps(
            _jsonable(obj), separators=(",", ":"), allow_nan=False).encode()
        status, _, data = self._request(method, path, body, group=group,
                                        retry=retry)
        return status, (json.loads(data.decode("utf-8")) if data else None)

    # -- stateless --

    def attention(self, query, key=None, value=None, **variants):
        """POST /v1/attention.  query [Lq, D] or [B, Lq, D] (key, value
        alike); variants are /v1/attention's fields (num_heads, causal,
        window, alibi, softcap, rotary, num_kv_heads, scale, attn_mask,
        need_weights, ...; numpy arrays are sent as lists).  need_weights
        defaults to False here (attnd's default is true): pass
        need_weights=True for "attn_weights".  Returns {"output":
        ndarray float32, "attn_weights": ndarray (when asked), "timing":
        dict}, plus "shape" and echoed "tokens"/"key_tokens" as attnd
        sends them."""
        req = {"query": query}
        if key is not None:
            req["key"] = key
        if value is not None:
            req["value"] = value
        variants.setdefault("need_weights", False)
        req.update(variants)
        _, ans = self._json("POST", "/v1/attention", req)
        out = dict(ans)
        out["output"] = _floats(ans["output"])
        if "attn_weights" in ans:
            out["attn_weights"] = _floats(ans["attn_weights"])
        return out

    # -- sessions --

    @staticmethod
    def _sid(id):
        return urllib.parse.quote(str(id), safe=":")

    def session(self, id, num_heads, head_dim, *, layers=1,
                num_kv_heads=None, max_tokens=None, kv_dtype="fp32",
                **variants):
        """PUT /v1/sessions/{id}: creates the session (201), or finds the
        one of that id and the same shape (200, its tokens kept).
        variants: scale, window=[left, 0], alibi, softcap, rotary.  A
        session of that id with another shape is AttndError 409."""
        spec = {"layers": layers, "num_heads": num_heads,
                "head_dim": head_dim, "kv_dtype": kv_dtype}
        if num_kv_heads is not None:
            spec["num_kv_heads"] = num_kv_heads
        if max_tokens is not None:
            spec["max_tokens"] = max_tokens
        spec.update(variants)
        status, info = self._json("PUT", "/v1/sessions/" + self._sid(id),
                                  spec, group=affinity_group(id))
        s = Session(self, info)
        s.created = status == 201
        return s

    def get_session(self, id):
        """GET /v1/sessions/{id}: the Session (AttndError 404 if absent)."""
        _, info = self._json("GET", "/v1/sessions/" + self._sid(id),
                             group=affinity_group(id))
        return Session(self, info)

    def list_sessions(self):
        """GET /v1/sessions: the session objects (dicts) of the caller (its
        API key's), in id order."""
        _, ans = self._json("GET", "/v1/sessions")
        return ans["sessions"]

    def decode(self, sessions, layer, q, k=None, v=None):
        """One step of B sessions on one layer, over v2 kv_attention with
        the binary extension.  q [B, t, H, D] (or [B, t, H*D]); k, v
        [B, t, Hkv, D] (or [B, t, Hkv*D]), both or neither (neither: the
        queries attend the cache, nothing is appended).  Each session's
        step goes at its tracked length of `layer`.  Returns (output
        [B, t, H, D] float32, lse [B, t, H] float32) and advances the
        tracked lengths by t.  Sessions of several affinity groups are sent
        as one request per group, answers in the order given; if one
        fails, AttndError is raised and no tracked length changes (the
        groups already answered are then answered again, bitwise the same
        and without appending, when the same step is sent again)."""
        sessions = list(sessions)
        return self._step(sessions, layer, q, k, v,
                          [s.length[layer] for s in sessions]
                          if k is not None else None)

    def _step(self, sessions, layer, q, k, v, positions):
        B = len(sessions)
        if B == 0:
            raise ValueError("decode: no session")
        if (k is None) != (v is None):
            raise ValueError("key and value come together or not at all")
        if len({s.id for s in sessions}) != B:
            raise ValueError("decode: a session is listed twice")
        if not 0 <= layer < sessions[0].layers:
            raise ValueError("layer %d: the session has %d layers" %
                             (layer, sessions[0].layers))
        H, Hkv, D = (sessions[0].num_heads, sessions[0].num_kv_heads,
                     sessions[0].head_dim)
        q = _shaped(q, "q", B, H, D)
        t = q.shape[1]
        if k is not None:
            k = _shaped(k, "k", B, Hkv, D, t)
            v = _shaped(v, "v", B, Hkv, D, t)
        groups = {}
        for i, s in enumerate(sessions):
            groups.setdefault(s.affinity, []).append(i)
        out = np.empty((B, t, H, D), dtype=np.float32)
        lse = np.empty((B, t, H), dtype=np.float32)
        for group, idx in groups.items():
            sel = idx if len(groups) > 1 else slice(None)
            o, l = self._v2_step(
                [sessions[i].id for i in idx], group, layer, q[sel],
                None if k is None else k[sel],
                None if v is None else v[sel],
                None if positions is None else [positions[i] for i in idx])
            out[sel] = o.reshape(len(idx), t, H, D)
            lse[sel] = l.reshape(len(idx), t, H)
        if k is not None:
            for s, p in zip(sessions, positions):
                s.length[layer] = p + t
        return out, lse

    def _v2_step(self, ids, group, layer, q, k, v, positions):
        B = len(ids)
        inputs, blobs = [], []

        def add(name, datatype, shape, blob):
            inputs.append({"name": name, "datatype": datatype,
                           "shape": list(shape),
                           "parameters": {"binary_data_size": len(blob)}})
            blobs.append(blob)

        add("session_id", "BYTES", [B], _bytes_tensor(ids))
        if positions is not None:
            add("position", "INT64", [B],
                np.asarray(positions, dtype="<i8").tobytes())
        for name, a in (("query", q), ("key", k), ("value", v)):
            if a is not None:
                dt, blob = _wire(a)
                add(name, dt, a.shape, blob)
        header = json.dumps({
            "inputs": inputs,
            "outputs": [{"name": "output",
                         "parameters": {"binary_data": True}},
                        {"name": "lse", "parameters": {"binary_data": True}}],
            "parameters": {"layer": int(layer), "binary_data_output": True},
        }, separators=(",", ":")).encode()
        body = header + b"".join(blobs)
        _, r, data = self._request(
            "POST", "/v2/models/%s/infer" % _V2_MODEL, body, group=group,
            ctype="application/octet-stream",
            headers={"Inference-Header-Content-Length": str(len(header))})
        outs = _parse_v2(r, data)
        return outs["output"], outs["lse"]


def _shaped(a, name, B, heads, D, t=None):
    """a as [B, t, heads, D] (from [B, t, heads, D] or [B, t, heads*D]),
    its dtype kept for float16/bfloat16, else float32."""
    a = np.asarray(a)
    if a.dtype != np.float16 and a.dtype.name != "bfloat16":
        a = a.astype(np.float32, copy=False)
    if a.ndim == 3 and a.shape[2] == heads * D:
        a = a.reshape(a.shape[0], a.shape[1], heads, D)
    if a.ndim != 4 or a.shape[0] != B or a.shape[2:] != (heads, D) or (
            t is not None and a.shape[1] != t):
        raise ValueError(
            "%s has shape %s; the sessions take [%d, %s, %d, %d]" %
            (name, list(a.shape), B, "t" if t is None else t, heads, D))
    return a


def _parse_v2(r, data):
    """The outputs of a v2 answer (binary or JSON), name -> float32
    ndarray of its shape."""
    n = r.getheader("Inference-Header-Content-Length")
    hlen = int(n) if n is not None else len(data)
    ans = json.loads(data[:hlen].decode("utf-8"))
    outs, off = {}, hlen
    for o in ans.get("outputs", []):
        shape = o["shape"]
        size = (o.get("parameters") or {}).get("binary_data_size")
        if size is None:
            outs[o["name"]] = _floats(o["data"]).reshape(shape)
            continue
        blob = data[off:off + size]
        off += size
        dt = {"FP32": "<f4", "FP16": "<f2"}.get(o["datatype"])
        if dt is None:
            raise AttndError(0, "unexpected output datatype %s" %
                             o["datatype"])
        outs[o["name"]] = np.frombuffer(blob, dtype=dt).astype(
            np.float32).reshape(shape)
    return outs


class Session:
    """A session attnd holds.  id; info: the last session object attnd
    returned; length: per layer, tracked here (see the module's
    docstring); affinity: its group (the id before the first ':')."""

    def __init__(self, client, info):
        self.client = client
        self.id = info["id"]
        self.affinity = affinity_group(self.id)
        self.created = False
        self._set(info)

    def _set(self, info):
        self.info = info
        self.length = list(info["length"])

    layers = property(lambda self: self.info["layers"])
    num_heads = property(lambda self: self.info["num_heads"])
    num_kv_heads = property(lambda self: self.info["num_kv_heads"])
    head_dim = property(lambda self: self.info["head_dim"])

    def __repr__(self):
        return "Session(%r, length=%r)" % (self.id, self.length)

    def _path(self, tail=""):
        return "/v1/sessions/" + Client._sid(self.id) + tail

    def attend(self, q, k=None, v=None, layer=0, position=None):
        """One step of this session on `layer` (v2 kv_attention, B = 1, at
        `position`, by default the tracked length).  q [t, H, D] or
        [t, H*D]; k, v [t, Hkv, D] or [t, Hkv*D], both or neither (neither:
        attend the cache, append nothing).  Returns (output [t, H, D],
        lse [t, H]), float32."""
        q = np.asarray(q)[None]
        if k is not None:
            k, v = np.asarray(k)[None], np.asarray(v)[None]
        pos = None
        if k is not None:
            pos = [self.length[layer] if position is None else int(position)]
        out, lse = self.client._step([self], layer, q, k, v, pos)
        return out[0], lse[0]

    def fork(self, new_id):
        """POST /fork: a new session starting as a copy of this one (201).
        Keep the origin's affinity group in new_id behind a balancer."""
        _, info = self.client._json("POST", self._path("/fork"),
                                    {"id": str(new_id)}, group=self.affinity,
                                    retry=False)
        s = Session(self.client, info)
        s.created = True
        return s

    def truncate(self, length):
        """POST /truncate: every layer keeps at most its first `length`
        tokens.  Returns the session object; updates info and length."""
        _, info = self.client._json("POST", self._path("/truncate"),
                                    {"length": int(length)},
                                    group=self.affinity)
        self._set(info)
        return info

    def refresh(self):
        """GET: the session object; updates info and length."""
        _, info = self.client._json("GET", self._path(),
                                    group=self.affinity)
        self._set(info)
        return info

    def delete(self):
        """DELETE (204).  AttndError 404 if attnd does not hold it."""
        self.client._request("DELETE", self._path(), group=self.affinity,
                             retry=False)

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        try:
            self.delete()
        except AttndError as e:
            if e.status != 404:
                raise
        return False
