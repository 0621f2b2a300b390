"""What NVIDIA's tritonclient.http (and .http.aio) sends and how it reads
the answers, rebuilt with the standard library: TcClient (health,
metadata, infer), tc_input / tc_output / tc_request (the request body,
byte for byte), TcResult (InferResult) and TcError
(InferenceServerException).  Used by test_tritonclient.py; the comment
below says what was read and what it found."""

import base64
import gzip
import http.client
import json
import struct
import zlib
from decimal import Decimal
from urllib.parse import quote

from harness import (Failure, HOST, HTTP_TIMEOUT_S, Resp, check, flatten,
                     numel, pack)


# The promise: NVIDIA's tritonclient.http works against attnd unchanged.
# tritonclient needs numpy, gevent and python-rapidjson, which CI does not
# have, so these tests build its requests byte for byte and decode the
# answers the way it does.  Written from a reading of (nothing copied)
# github.com/triton-inference-server/client, src/python/library/tritonclient/
#   http/_utils.py @03a0aac9            _get_inference_request, _get_error
#   http/_client.py @06344cae           InferenceServerClient (infer, health,
#                                       metadata, compression headers)
#   http/_infer_input.py @06344cae      InferInput.set_data_from_numpy,
#                                       _get_tensor
#   http/_requested_output.py @36d6b34e InferRequestedOutput._get_tensor
#   http/_infer_result.py @2a25fb3b     InferResult, as_numpy
#   http/aio/__init__.py @03a9633a      the asyncio client (aiohttp)
#   utils/__init__.py @01581baf         dtype maps, serialize_bf16_tensor
# and geventhttpclient src/geventhttpclient/client.py @02f7ad10 (the
# headers its HTTPClient adds).  What they send and expect:
# - Health: GET /v2/health/live, /v2/health/ready and
#   /v2/models/{m}[/versions/{v}]/ready; only "status == 200" is read.
#   Metadata: GET /v2 and /v2/models/{m}[/versions/{v}]; the body is JSON.
#   Statistics (get_inference_statistics): GET /v2/models/stats, or
#   /v2/models/{m}[/versions/{v}]/stats when a model is named; JSON.
# - Errors: any non-200 body is read as UTF-8 JSON and its "error" string
#   becomes InferenceServerException(msg, status).
# - Infer: POST /v2/models/{m}[/versions/{v}]/infer with User-Agent, the
#   caller's headers, Host and Content-Length; no Content-Type (aiohttp, in
#   the asyncio client, adds application/octet-stream to every body).
#   Inference-Header-Content-Length (the JSON's length) only when some input
#   is binary; Content-Encoding gzip|deflate and Accept-Encoding only when
#   compression is asked for.
# - The JSON is compact (rapidjson: 1e-7, 1.5e22, 0.00001, 100.0, \uXXXX),
#   keys in this order: "id" (when request_id != ""), "inputs", "outputs"
#   (when outputs are given), "parameters": sequence_id/_start/_end (when
#   sequence_id != 0), "priority" (when != 0), "timeout" (when not None, even
#   0), "binary_data_output": true (when no outputs are given), then the
#   caller's parameters.  An input is {"name", "shape", "datatype"} plus
#   "parameters": {"binary_data_size": N} and a blob after the JSON
#   (binary_data=True, the default; BF16 = the float32's high two bytes), or
#   plus "data": the flat list of ndarray.item() values (FP16 too, which
#   Triton refuses; the client itself refuses BF16 there).  An output is
#   {"name", "parameters": {["classification": n,] "binary_data": b}}.
# - Answers: Inference-Header-Content-Length, when present, ends the JSON;
#   blobs follow in output order for the outputs whose parameters carry
#   binary_data_size; JSON data goes through np.array(data, dtype) and
#   reshape(shape).  Content-Encoding gzip/deflate is undone first.

TC_UA = "python/gevent-http-client-2.3.1"


def _rj_float(x):
    """A finite float as python-rapidjson writes it (shortest digits laid out
    like RapidJSON's Prettify): 1e-07 -> 1e-7, 1e-05 -> 0.00001,
    1.5e+22 -> 1.5e22, 100.0 -> 100.0, -0.0 -> -0.0."""
    sign, digits, exp = Decimal(repr(x)).as_tuple()
    ds = "".join(map(str, digits)).rstrip("0") or "0"
    exp += len("".join(map(str, digits))) - len(ds)
    if ds == "0":
        exp = 0
    n, kk = len(ds), len(ds) + exp
    if exp >= 0 and kk <= 21:
        s = ds + "0" * exp + ".0"
    elif 0 < kk <= 21:
        s = ds[:kk] + "." + ds[kk:]
    elif -6 < kk <= 0:
        s = "0." + "0" * -kk + ds
    elif n == 1:
        s = ds + "e" + str(kk - 1)
    else:
        s = ds[0] + "." + ds[1:] + "e" + str(kk - 1)
    return ("-" if sign else "") + s


def _rj_dumps(obj):
    """Compact JSON as python-rapidjson's dumps() writes it by default."""
    if isinstance(obj, dict):
        return "{" + ",".join(json.dumps(str(k)) + ":" + _rj_dumps(v)
                              for k, v in obj.items()) + "}"
    if isinstance(obj, (list, tuple)):
        return "[" + ",".join(_rj_dumps(v) for v in obj) + "]"
    if obj is True or obj is False or obj is None:
        return json.dumps(obj)
    if isinstance(obj, int):
        return str(obj)
    if isinstance(obj, float):
        return _rj_float(obj)
    return json.dumps(obj)  # str, ensure_ascii like rapidjson's default


_TC_FMT = {"FP32": "f", "FP16": "e", "FP64": "d", "INT32": "i",
           "INT64": "q", "BOOL": "?", "BF16": "f"}


def tc_input(name, shape, datatype, values, binary_data=True):
    """InferInput(name, shape, datatype).set_data_from_numpy(a, binary_data)
    for an array a of that dtype holding `values` (row-major).  Returns
    (tensor dict, blob or None)."""
    t = {"name": name, "shape": list(shape), "datatype": datatype}
    if binary_data:
        if datatype == "BF16":  # the float32's high half, little-endian
            raw = b"".join(struct.pack("<f", x)[2:4] for x in values)
        else:  # ndarray.tobytes(): little-endian on every machine CI has
            raw = pack(_TC_FMT[datatype], values)
        t["parameters"] = {"binary_data_size": len(raw)}
        return t, raw
    fmt = "<" + _TC_FMT[datatype]
    # ndarray.item(): the element's exact value as a Python scalar
    t["data"] = [struct.unpack(fmt, struct.pack(fmt, x))[0] for x in values]
    return t, None


def tc_output(name, binary_data=True, class_count=0):
    """InferRequestedOutput(name, binary_data, class_count)._get_tensor()."""
    params = {}
    if class_count != 0:
        params["classification"] = class_count
    params["binary_data"] = binary_data
    return {"name": name, "parameters": params}


def tc_request(inputs, outputs=None, request_id="", sequence_id=0,
               sequence_start=False, sequence_end=False, priority=0,
               timeout=None, parameters=None):
    """(body, json_size or None) as _get_inference_request builds them."""
    req, params = {}, {}
    if request_id != "":
        req["id"] = request_id
    if sequence_id != 0 and sequence_id != "":
        params["sequence_id"] = sequence_id
        params["sequence_start"] = sequence_start
        params["sequence_end"] = sequence_end
    if priority != 0:
        params["priority"] = priority
    if timeout is not None:
        params["timeout"] = timeout
    req["inputs"] = [t for t, _ in inputs]
    if outputs:
        req["outputs"] = outputs
    else:
        params["binary_data_output"] = True
    params.update(parameters or {})
    if params:
        req["parameters"] = params
    text = _rj_dumps(req)
    blobs = [raw for _, raw in inputs if raw is not None]
    if not blobs:
        return text.encode(), None
    return text.encode() + b"".join(blobs), len(text)


class TcError(Exception):
    """InferenceServerException as _get_error makes it from a non-200."""

    def __init__(self, status, msg):
        super().__init__("[%d] %s" % (status, msg))
        self.status = status
        self.msg = msg


def _tc_error(r, what):
    """The TcError tritonclient would raise for r; a Failure when it could
    not decode the body (the user would get a garbled exception)."""
    try:
        body = r.body.decode("utf-8")
        msg = json.loads(body)["error"] if body else None
    except (UnicodeDecodeError, ValueError, KeyError, TypeError) as e:
        raise Failure("%s: HTTP %d body tritonclient cannot decode (%s): %r"
                      % (what, r.status, e, r.body[:200]))
    check(isinstance(msg, str) and msg, "%s: HTTP %d error is %r" %
          (what, r.status, msg))
    return TcError(r.status, msg)


class TcResult:
    """InferResult: the JSON header and the outputs as tritonclient reads
    them.  outputs[name] = (datatype, shape, flat values, binary?)."""

    _DT = {"FP32": ("f", 4), "FP16": ("e", 2), "FP64": ("d", 8),
           "INT32": ("i", 4), "INT64": ("q", 8), "BOOL": ("?", 1)}

    def __init__(self, r, what):
        body = r.body
        ce = r.header("content-encoding")
        if ce == "gzip":
            body = gzip.decompress(body)
        elif ce == "deflate":
            body = zlib.decompress(body)
        hl = r.header("inference-header-content-length")
        if hl is None:
            self.response, buf = json.loads(body), b""
        else:
            n = int(hl)
            self.response, buf = json.loads(body[:n]), body[n:]
        self.header_length = hl
        self.outputs = {}
        off = 0
        for o in self.response["outputs"]:
            dt = o["datatype"]
            check(dt in self._DT, "%s: output %s datatype %r" %
                  (what, o["name"], dt))
            fmt, size = self._DT[dt]
            nb = (o.get("parameters") or {}).get("binary_data_size")
            if nb is not None:
                check(hl is not None, "%s: %s is binary but the answer has "
                      "no Inference-Header-Content-Length" % (what, o["name"]))
                blob = buf[off:off + nb]
                off += nb
                check(len(blob) == nb == size * numel(o["shape"]),
                      "%s: %s: %d bytes, binary_data_size %d, shape %r (%s)"
                      % (what, o["name"], len(blob), nb, o["shape"], dt))
                vals = list(struct.unpack("<%d%s" % (nb // size, fmt), blob))
                self.outputs[o["name"]] = (dt, o["shape"], vals, True)
            else:
                vals = flatten(o["data"])
                check(len(vals) == numel(o["shape"]), "%s: %s: %d values for "
                      "shape %r" % (what, o["name"], len(vals), o["shape"]))
                if dt in ("FP32", "FP16"):
                    vals = [struct.unpack("<" + fmt, struct.pack("<" + fmt, x)
                                          )[0] for x in vals]
                self.outputs[o["name"]] = (dt, o["shape"], vals, False)
        # tritonclient ignores bytes past the last blob; a server must not
        # send any.
        check(off == len(buf), "%s: %d bytes after the blobs" %
              (what, len(buf) - off))

    def as_values(self, name):
        return self.outputs[name][2]


class TcClient:
    """tritonclient.http.InferenceServerClient("127.0.0.1:PORT"): one
    persistent connection (geventhttpclient, concurrency 1) and the headers
    it sends.  aio=True: tritonclient.http.aio, whose aiohttp session adds
    Accept, Accept-Encoding and Content-Type: application/octet-stream."""

    def __init__(self, port, aio=False, ssl_context=None, headers=None):
        """ssl_context: InferenceServerClient(..., ssl=True) with that
        context (its CA, a client certificate for mutual TLS); headers: sent
        with every call, as a user passes headers={"Authorization": ...}
        to each method."""
        self.port = port
        self.aio = aio
        self.headers = dict(headers or {})
        if ssl_context is not None:
            self.conn = http.client.HTTPSConnection(
                HOST, port, timeout=HTTP_TIMEOUT_S, context=ssl_context)
        else:
            self.conn = http.client.HTTPConnection(HOST, port,
                                                   timeout=HTTP_TIMEOUT_S)
        self.last_sent = None  # (method, uri, headers, body)

    def close(self):
        self.conn.close()

    def __enter__(self):
        return self

    def __exit__(self, *a):
        self.close()
        return False

    def _send(self, method, uri, body=None, headers=None):
        headers = dict(self.headers, **(headers or {}))
        hdrs = []
        if self.aio:
            hdrs += [("Host", "%s:%d" % (HOST, self.port)), ("Accept", "*/*"),
                     ("Accept-Encoding", "gzip, deflate"),
                     ("User-Agent", "Python/3.11 aiohttp/3.9.1")]
            hdrs += [(k, str(v)) for k, v in (headers or {}).items()]
            if method == "POST":
                hdrs += [("Content-Length", str(len(body or b""))),
                         ("Content-Type", "application/octet-stream")]
        else:
            hdrs.append(("User-Agent", TC_UA))
            hdrs += [(k, str(v)) for k, v in (headers or {}).items()]
            hdrs.append(("Host", "%s:%d" % (HOST, self.port)))
            if method == "POST":
                hdrs.append(("Content-Length", str(len(body or b""))))
        self.last_sent = (method, uri, hdrs, body)
        self.conn.putrequest(method, uri, skip_host=True,
                             skip_accept_encoding=True)
        for k, v in hdrs:
            self.conn.putheader(k, v)
        self.conn.endheaders(body or None)
        r = self.conn.getresponse()
        data = r.read()
        return Resp(r.status, {k.lower(): v for k, v in r.getheaders()}, data)

    @staticmethod
    def _model_uri(model, version, tail=""):
        uri = "/v2/models/" + quote(model)
        if version != "":
            uri += "/versions/" + version
        return uri + tail

    def is_server_live(self):
        return self._send("GET", "/v2/health/live").status == 200

    def is_server_ready(self):
        return self._send("GET", "/v2/health/ready").status == 200

    def is_model_ready(self, model, model_version=""):
        return self._send("GET", self._model_uri(model, model_version,
                                                 "/ready")).status == 200

    def _get_json(self, uri):
        r = self._send("GET", uri)
        if r.status != 200:
            raise _tc_error(r, "GET " + uri)
        return json.loads(r.body)

    def get_server_metadata(self):
        return self._get_json("/v2")

    def get_model_metadata(self, model, model_version=""):
        return self._get_json(self._model_uri(model, model_version))

    def get_inference_statistics(self, model_name="", model_version=""):
        """The statistics extension: GET v2/models/stats (every model), or
        v2/models/{m}[/versions/{v}]/stats; the body as JSON."""
        if model_name != "":
            return self._get_json(self._model_uri(model_name, model_version,
                                                  "/stats"))
        return self._get_json("/v2/models/stats")

    def _post_json(self, uri, body):
        r = self._send("POST", uri, body)
        if r.status != 200:
            raise _tc_error(r, "POST " + uri)
        return r

    def get_model_repository_index(self):
        """POST v2/repository/index with an empty body; the list."""
        return json.loads(self._post_json("/v2/repository/index", b"").body)

    def load_model(self, model_name, config=None, files=None):
        """POST v2/repository/models/{m}/load with json.dumps of the load
        request: {} unless config (a JSON string) or files (path: bytes,
        sent base64 under "file:PATH") are given."""
        req = {}
        if config is not None:
            req.setdefault("parameters", {})["config"] = config
        for path, content in (files or {}).items():
            req.setdefault("parameters", {})[path] = \
                base64.b64encode(content).decode()
        self._post_json("/v2/repository/models/%s/load" % quote(model_name),
                        json.dumps(req).encode())

    def unload_model(self, model_name, unload_dependents=False):
        body = {"parameters": {"unload_dependents": unload_dependents}}
        self._post_json("/v2/repository/models/%s/unload" %
                        quote(model_name), json.dumps(body).encode())

    def get_model_config(self, model, model_version=""):
        return self._get_json(self._model_uri(model, model_version,
                                              "/config"))

    def infer(self, model, inputs, model_version="", outputs=None,
              request_compression_algorithm=None,
              response_compression_algorithm=None, **kw):
        """kw: request_id, sequence_id, priority, timeout, parameters."""
        body, json_size = tc_request(inputs, outputs, **kw)
        headers = {}
        if request_compression_algorithm == "gzip":
            headers["Content-Encoding"] = "gzip"
            body = gzip.compress(body)
        elif request_compression_algorithm == "deflate":
            headers["Content-Encoding"] = "deflate"
            body = zlib.compress(body)
        if response_compression_algorithm in ("gzip", "deflate"):
            headers["Accept-Encoding"] = response_compression_algorithm
        if json_size is not None:
            headers["Inference-Header-Content-Length"] = json_size
        uri = self._model_uri(model, model_version, "/infer")
        r = self._send("POST", uri, body, headers)
        if r.status != 200:
            raise _tc_error(r, "POST " + uri)
        return TcResult(r, "POST " + uri)


def tc_expect_error(fn, status, *needles, what=""):
    """fn() must raise TcError with this status and each needle in the
    message (any case)."""
    try:
        fn()
    except TcError as e:
        check(e.status == status, "%s: HTTP %d (%s), expected %d" %
              (what, e.status, e.msg, status))
        for n in needles:
            check(n.lower() in e.msg.lower(), "%s: error does not mention "
                  "%r: %r" % (what, n, e.msg))
        return e.msg
    raise Failure("%s: succeeded, expected HTTP %d" % (what, status))
