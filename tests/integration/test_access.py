#!/usr/bin/env python3
"""Integration tests: access (issue 30): API keys (api_keys_file,
ATTND_API_KEY, SIGHUP), X-Request-Id and traceparent, CORS, and TLS with a
CA, server and client certificates made here with openssl.

Run alone: python3 tests/integration/test_access.py --attnd PATH
(the options of run.py; see harness.py and README.md).
"""

import http.client
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time

from harness import (HOST, Server, check, expect_status, free_port, main,
                     make_pki, request, run_attnd, shared, test,
                     to_json_bytes, wait_log)

SMALL = {"query": [[1.0, 0.0], [0.0, 1.0]]}
V2_INPUTS = [{"name": n, "shape": [1, 2], "datatype": "FP32",
              "data": [1.0, 2.0]} for n in ("query", "key", "value")]


def keys_file(d, text):
    path = os.path.join(d, "keys")
    with open(path, "w") as f:
        f.write(text)
    return path


# ---- API keys ----------------------------------------------------------------

@test
def api_keys_guard_every_route_but_the_public_ones():
    """With api_keys_file, every route needs 'Authorization: Bearer KEY' or
    'X-Api-Key: KEY' (401 with WWW-Authenticate and a JSON error otherwise,
    unknown paths too); health, the page, its files stay public; the key
    never appears in the log."""
    with tempfile.TemporaryDirectory() as d:
        path = keys_file(d, "# team a\n\n  secret-key-one  \nsecret-key-two\r\n")
        with Server("--api-keys-file", path, name="keys") as s:
            p = s.port
            for path_ in ("/v2/health/live", "/v2/health/ready", "/ui/app.js"):
                expect_status(request(p, "GET", path_), 200, path_)
            r = request(p, "GET", "/", headers={"Accept": "text/html"})
            expect_status(r, 200, "the page")
            for method, path_, body in (
                    ("GET", "/v2", None), ("GET", "/v1/models", None),
                    ("GET", "/v2/models/sdpa", None),
                    ("GET", "/v2/models/sdpa/ready", None),
                    ("POST", "/v1/attention", SMALL),
                    ("GET", "/no/such/path", None)):
                r = request(p, method, path_, body=body)
                expect_status(r, 401, "%s %s without a key" % (method, path_))
                check(r.header("www-authenticate") == "Bearer",
                      "WWW-Authenticate %r" % r.header("www-authenticate"))
                check("needs an API key" in r.json()["error"], repr(r))
            good = [{"Authorization": "Bearer secret-key-one"},
                    {"Authorization": "bearer  secret-key-two"},
                    {"X-Api-Key": "secret-key-two"}]
            for h in good:
                r = request(p, "POST", "/v1/attention", body=SMALL, headers=h)
                expect_status(r, 200, "with %r" % list(h))
            r = request(p, "GET", "/v1/models",
                        headers={"X-Api-Key": "secret-key-thre"})
            expect_status(r, 401, "a wrong key")
            check(r.header("www-authenticate").startswith("Bearer error="),
                  "WWW-Authenticate %r" % r.header("www-authenticate"))
            check("secret" not in r.body.decode(), "key echoed: %r" % r)
            r = request(p, "GET", "/v1/models",
                        headers={"Authorization": "Basic c2VjcmV0"})
            expect_status(r, 401, "Basic")
            check("Bearer" in r.json()["error"], repr(r))
            line = wait_log(s, lambda l: l.get("status") == 401 and
                            l.get("path") == "/v1/models", "for the 401s")
            check(line.get("client") == "127.0.0.1", "401 line %r" % line)
            check("secret-key" not in s.log_text(), "a key is in the log")


@test
def api_key_from_the_environment_and_v2():
    """ATTND_API_KEY alone turns keys on; a v2 inference with the key is
    answered; --check-config does not print the key."""
    env = {"ATTND_API_KEY": "env-key-123"}
    with Server(env=env, name="envkey") as s:
        body = {"inputs": V2_INPUTS}
        r = request(s.port, "POST", "/v2/models/sdpa/infer", body=body)
        expect_status(r, 401, "v2 without a key")
        r = request(s.port, "POST", "/v2/models/sdpa/infer", body=body,
                    headers={"Authorization": "Bearer env-key-123"})
        expect_status(r, 200, "v2 with the key")
    rc, out, err = run_attnd("--check-config", env=env)
    check(rc == 0 and "env-key-123" not in out + err,
          "--check-config: rc %d, printed the key: %r" % (rc, out))


@test
def api_keys_file_reread_on_sighup():
    """SIGHUP re-reads api_keys_file: a rotated key works at once, the old
    one is refused; a file that no longer reads keeps the keys in force."""
    with tempfile.TemporaryDirectory() as d:
        path = keys_file(d, "old-key\n")
        with Server("--api-keys-file", path, name="sighup") as s:
            hdr = {"X-Api-Key": "old-key"}
            expect_status(request(s.port, "GET", "/v2", headers=hdr), 200,
                          "old key")
            keys_file(d, "# rotated\nnew-key\n")
            s.signal(signal.SIGHUP)
            wait_log(s, lambda l: "1 API keys in force" in l.get("msg", ""),
                     "after SIGHUP")
            expect_status(request(s.port, "GET", "/v2", headers=hdr), 401,
                          "old key after the rotation")
            expect_status(request(s.port, "GET", "/v2",
                                  headers={"X-Api-Key": "new-key"}), 200,
                          "new key")
            keys_file(d, "two words\n")
            s.signal(signal.SIGHUP)
            line = wait_log(s, lambda l: "keys in force stay" in
                            l.get("msg", ""), "for the bad file")
            check("line 1" in line["msg"] and "two" not in line["msg"],
                  "message %r" % line["msg"])
            expect_status(request(s.port, "GET", "/v2",
                                  headers={"X-Api-Key": "new-key"}), 200,
                          "new key after a bad reload")


@test
def api_keys_file_fifo_on_sighup_never_blocks():
    """An api_keys_file replaced by a FIFO is refused on SIGHUP ("not a
    regular file"), the keys in force stay, and SIGTERM still ends attnd
    (before, the main thread waited for a writer in open() for ever)."""
    with tempfile.TemporaryDirectory() as d:
        path = keys_file(d, "old-key\n")
        with Server("--api-keys-file", path, name="keys-fifo") as s:
            os.unlink(path)
            os.mkfifo(path)
            s.signal(signal.SIGHUP)
            line = wait_log(s, lambda l: "keys in force stay" in
                            l.get("msg", ""), "for the FIFO", timeout=5.0)
            check("not a regular file" in line["msg"],
                  "message %r" % line["msg"])
            expect_status(request(s.port, "GET", "/v2",
                                  headers={"X-Api-Key": "old-key"}), 200,
                          "the key in force after the refused reload")


@test
def api_keys_file_that_cannot_be_read_stops_the_start():
    with tempfile.TemporaryDirectory() as d:
        rc, _, err = run_attnd("--port", "0", "--api-keys-file",
                               os.path.join(d, "missing"))
        check(rc != 0 and "api_keys_file" in err and "cannot open" in err,
              "rc %d: %s" % (rc, err[-300:]))
        path = keys_file(d, "# nothing but a comment\n")
        rc, _, err = run_attnd("--port", "0", "--api-keys-file", path)
        check(rc != 0 and "holds no key" in err, "rc %d: %s" % (rc, err[-300:]))


def auth_failures(port, headers=None):
    r = request(port, "GET", "/metrics", headers=headers)
    expect_status(r, 200, "GET /metrics")
    for line in r.body.decode().splitlines():
        if line.startswith("attnd_auth_failures_total "):
            return float(line.split()[1])
    check(False, "no attnd_auth_failures_total in %r" % r.body[:300])


@test
def metrics_public_unless_metrics_require_key():
    """GET /metrics needs no key by default (scrapers keep working when keys
    are turned on); with metrics_require_key it does, on the main port and
    on metrics_port alike, while health stays public on both.
    attnd_auth_failures_total counts each 401."""
    env = {"ATTND_API_KEY": "scrape-key"}
    with Server(env=env, name="metrics-open") as s:
        before = auth_failures(s.port)
        for h in ({}, {"X-Api-Key": "wrong"}, {"Authorization": "Basic eA=="}):
            expect_status(request(s.port, "GET", "/v1/models", headers=h), 401,
                          "refused with %r" % h)
        check(auth_failures(s.port) - before == 3, "auth failures moved by "
              "%r, not 3" % (auth_failures(s.port) - before))
    mport = free_port()
    with Server("--metrics-require-key", "true", "--metrics-port", str(mport),
                env=env, name="metrics-keyed") as s:
        for port in (s.port, mport):
            r = request(port, "GET", "/metrics")
            expect_status(r, 401, "/metrics without a key on %d" % port)
            check(r.header("www-authenticate") == "Bearer", repr(r))
            auth_failures(port, headers={"Authorization": "Bearer scrape-key"})
            for path in ("/v2/health/live", "/v2/health/ready"):
                expect_status(request(port, "GET", path), 200,
                              "%s without a key on %d" % (path, port))


# ---- request ids ---------------------------------------------------------------

def raw_get(port, path, extra):
    """GET with header bytes http.client would refuse to send; the status
    and the headers of the answer."""
    with socket.create_connection((HOST, port), timeout=10) as c:
        c.sendall(b"GET " + path.encode() + b" HTTP/1.1\r\nHost: x\r\n" +
                  extra + b"Connection: close\r\n\r\n")
        data = b""
        while True:
            b = c.recv(65536)
            if not b:
                break
            data += b
    head = data.split(b"\r\n\r\n", 1)[0].decode("latin-1").split("\r\n")
    hdrs = {}
    for h in head[1:]:
        k, _, v = h.partition(":")
        hdrs[k.strip().lower()] = v.strip()
    return int(head[0].split()[1]), hdrs


@test
def request_ids_taken_when_sane_else_made():
    """X-Request-Id is echoed when it is printable ASCII of at most 128
    bytes; otherwise (and when absent) attnd makes a unique one.  Every
    answer has one, errors included, and the access line has the same."""
    s = shared()
    p = s.port
    rid = "itest-rid-%d with spaces/and:punct" % os.getpid()
    r = request(p, "GET", "/v2/models/nosuch", headers={"X-Request-Id": rid})
    expect_status(r, 404, "404")
    check(r.header("x-request-id") == rid, "echoed %r" %
          r.header("x-request-id"))
    long_ok = "L" * 128
    r = request(p, "GET", "/v2", headers={"X-Request-Id": long_ok})
    check(r.header("x-request-id") == long_ok, "128 bytes not taken")
    made = set()
    for bad in ("M" * 129, ""):
        r = request(p, "GET", "/v2", headers={"X-Request-Id": bad})
        got = r.header("x-request-id")
        check(got and got != bad and got not in made, "made %r for %r" %
              (got, bad[:10]))
        made.add(got)
    for extra in (b"X-Request-Id: caf\xc3\xa9\r\n", b"X-Request-Id: a\x7fb\r\n"):
        status, hdrs = raw_get(p, "/v2", extra)
        got = hdrs.get("x-request-id")
        check(status == 200 and got and got.isascii() and "caf" not in got
              and "\x7f" not in got and got not in made,
              "made %r for %r" % (got, extra))
        made.add(got)
    r = request(p, "POST", "/v1/attention", body=b"{bad json")
    expect_status(r, 400, "bad JSON")
    check(r.header("x-request-id") and r.header("x-request-id") not in made,
          "error answer's id %r" % r.header("x-request-id"))
    made.add(r.header("x-request-id"))
    for m in made:
        wait_log(s, lambda l, m=m: l.get("type") == "access" and
                 l.get("request_id") == m, "with request_id %r" % m)


@test
def traceparent_trace_id_in_the_access_line():
    s = shared()
    trace = "4bf92f3577b34da6a3ce929d0e0e%04x" % (os.getpid() % 65536)
    tp = "00-%s-00f067aa0ba902b7-01" % trace
    r = request(s.port, "GET", "/v2", headers={"traceparent": tp,
                                              "X-Request-Id": "tp-good"})
    expect_status(r, 200, "with traceparent")
    line = wait_log(s, lambda l: l.get("request_id") == "tp-good",
                    "for tp-good")
    check(line.get("trace_id") == trace, "trace_id %r" % line.get("trace_id"))
    # then the client fields (issue 44), then request_id; /v2 names no model
    fields = list(line)
    check(fields[-3:] == ["trace_id", "client", "request_id"] and
          line["client"] == "127.0.0.1", "access line %r" % line)
    for i, bad in enumerate(("00-%s-0000000000000000-01" % trace,
                             "00-%s-00f067aa0ba902b7-01" % ("0" * 32),
                             "ff-%s-00f067aa0ba902b7-01" % trace,
                             "00-%s-00f067aa0ba902b7-01" % trace.upper(),
                             "garbage")):
        rid = "tp-bad-%d" % i
        request(s.port, "GET", "/v2", headers={"traceparent": bad,
                                              "X-Request-Id": rid})
        line = wait_log(s, lambda l: l.get("request_id") == rid, rid)
        check("trace_id" not in line, "%r logged as %r" % (bad, line))


@test
def v2_body_id_names_a_request_without_x_request_id():
    """A v2 body's "id" is echoed in the body; it names the request (the
    X-Request-Id answered, the access line) only when no X-Request-Id was
    sent: the header wins."""
    s = shared()
    body = {"id": "body-id-%d" % os.getpid(),
            "inputs": V2_INPUTS}
    r = request(s.port, "POST", "/v2/models/sdpa/infer", body=body)
    expect_status(r, 200, "v2")
    check(r.json()["id"] == body["id"], "body id %r" % r.json().get("id"))
    check(r.header("x-request-id") == body["id"], "X-Request-Id %r" %
          r.header("x-request-id"))
    r = request(s.port, "POST", "/v2/models/sdpa/infer", body=body,
                headers={"X-Request-Id": "hdr-wins"})
    check(r.json()["id"] == body["id"] and
          r.header("x-request-id") == "hdr-wins",
          "%r / %r" % (r.json().get("id"), r.header("x-request-id")))


# ---- CORS ------------------------------------------------------------------------

@test
def cors_off_by_default():
    s = shared()
    r = request(s.port, "GET", "/v2", headers={"Origin": "https://a.example"})
    check(r.header("access-control-allow-origin") is None, "ACAO %r" %
          r.header("access-control-allow-origin"))
    r = request(s.port, "OPTIONS", "/v1/attention",
                headers={"Origin": "https://a.example",
                         "Access-Control-Request-Method": "POST"})
    check(r.status == 405 and r.header("access-control-allow-origin") is None,
          "preflight without CORS: %r" % r)


@test
def cors_preflight_and_answers():
    """cors_allow_origins: a preflight from a listed origin is 204 with the
    methods and headers a client needs (no key asked, even with keys);
    answers to it, errors included, carry Access-Control-Allow-Origin and
    expose Inference-Header-Content-Length and X-Request-Id; another origin
    gets a 403 preflight and no CORS headers."""
    origin = "http://localhost:3000"
    with Server("--cors-allow-origins", "https://app.example, " + origin,
                env={"ATTND_API_KEY": "k"}, name="cors") as s:
        p = s.port
        r = request(p, "OPTIONS", "/v2/models/sdpa/infer",
                    headers={"Origin": origin,
                             "Access-Control-Request-Method": "POST",
                             "Access-Control-Request-Headers":
                             "authorization,content-type"})
        expect_status(r, 204, "preflight")
        allow_h = r.header("access-control-allow-headers").lower()
        for h in ("authorization", "x-api-key", "content-type",
                  "inference-header-content-length", "content-encoding"):
            check(h in allow_h, "%s not in %r" % (h, allow_h))
        check("POST" in r.header("access-control-allow-methods"), repr(r))
        check(r.header("access-control-allow-origin") == origin, "ACAO %r" %
              r.header("access-control-allow-origin"))
        for hdrs, want in (({"X-Api-Key": "k"}, 200), ({}, 401)):
            r = request(p, "POST", "/v1/attention", body=SMALL,
                        headers=dict(hdrs, Origin=origin))
            expect_status(r, want, "from the origin")
            check(r.header("access-control-allow-origin") == origin,
                  "ACAO %r" % r.header("access-control-allow-origin"))
            expose = r.header("access-control-expose-headers").lower()
            check("inference-header-content-length" in expose and
                  "x-request-id" in expose, "expose %r" % expose)
            check("origin" in (r.header("vary") or "").lower(), "Vary")
        r = request(p, "OPTIONS", "/v1/attention",
                    headers={"Origin": "https://evil.example",
                             "Access-Control-Request-Method": "POST"})
        expect_status(r, 403, "preflight from another origin")
        check("cors_allow_origins" in r.json()["error"], repr(r))
        r = request(p, "GET", "/v2/health/live",
                    headers={"Origin": "https://evil.example"})
        check(r.status == 200 and
              r.header("access-control-allow-origin") is None, repr(r))
    with Server("--cors-allow-origins", "*", name="cors-any") as s:
        r = request(s.port, "GET", "/v2",
                    headers={"Origin": "https://any.example"})
        check(r.header("access-control-allow-origin") == "*", "ACAO %r" %
              r.header("access-control-allow-origin"))
    rc, _, err = run_attnd("--cors-allow-origins", "https://a.example/")
    check(rc == 2 and "has a path" in err, "rc %d: %s" % (rc, err))


# ---- TLS ---------------------------------------------------------------------------

def https(port, f, path="/v2/health/ready", cert=None, method="GET",
          body=None):
    ctx = ssl.create_default_context(cafile=f("ca.crt"))
    if cert:
        ctx.load_cert_chain(f(cert + ".crt"), f(cert + ".key"))
    c = http.client.HTTPSConnection(HOST, port, timeout=10, context=ctx)
    try:
        c.request(method, path, body=body,
                  headers={"Content-Type": "application/json"} if body else {})
        r = c.getresponse()
        return r.status, r.read()
    finally:
        c.close()


def curl(*args):
    return subprocess.run(["curl", "-sS", "--max-time", "10"] + list(args),
                          capture_output=True, text=True, timeout=30)


@test
def tls_serves_https_only():
    """tls_cert_file and tls_key_file: curl over HTTPS works (an inference
    too); plain HTTP to the port fails at once and the server goes on;
    --healthcheck says what it needs."""
    if not shutil.which("openssl") or not shutil.which("curl"):
        check(False, "openssl and curl are needed (make test-deps)")
    with tempfile.TemporaryDirectory() as d:
        f = make_pki(d)
        with Server("--tls-cert-file", f("server.crt"), "--tls-key-file",
                    f("server.key"), name="tls") as s:
            url = "https://127.0.0.1:%d" % s.port
            r = curl("--cacert", f("ca.crt"), url + "/v2/health/ready")
            check(r.returncode == 0 and '"ready":true' in r.stdout,
                  "curl: %d %s %s" % (r.returncode, r.stdout, r.stderr))
            r = curl("--cacert", f("ca.crt"), "-H",
                     "Content-Type: application/json", "-d",
                     to_json_bytes(SMALL).decode(), url + "/v1/attention")
            check(r.returncode == 0 and '"output"' in r.stdout,
                  "curl infer: %d %s" % (r.returncode, r.stdout[:200]))
            t0 = time.monotonic()
            r = curl("http://127.0.0.1:%d/v2/health/ready" % s.port)
            check(r.returncode != 0 and time.monotonic() - t0 < 5,
                  "plain HTTP: %d %r" % (r.returncode, r.stdout))
            check(https(s.port, f)[0] == 200, "HTTPS after the plain try")
            rc, out, err = run_attnd("--healthcheck", "--port", str(s.port),
                                     "--tls-cert-file", f("server.crt"),
                                     "--tls-key-file", f("server.key"))
            check(rc == 1 and "HTTPS" in err and "curl" in err,
                  "healthcheck: %d %s" % (rc, err))


@test
def tls_slow_client_cut_without_plain_bytes():
    """Over TLS, a request whose headers do not arrive within
    header_timeout_s is cut by shutting the socket down: no plain-HTTP 408
    is written into the TLS stream (the client sees the end of the
    connection, never a record it cannot read)."""
    if not shutil.which("openssl"):
        check(False, "openssl is needed (make test-deps)")
    with tempfile.TemporaryDirectory() as d:
        f = make_pki(d)
        with Server("--tls-cert-file", f("server.crt"), "--tls-key-file",
                    f("server.key"), "--header-timeout-s", "1",
                    name="tls-slow") as s:
            ctx = ssl.create_default_context(cafile=f("ca.crt"))
            raw = socket.create_connection((HOST, s.port), timeout=10)
            with ctx.wrap_socket(raw, server_hostname=HOST) as c:
                c.sendall(b"GET /v2/health/ready HTTP/1.1\r\nHost: a\r\n")
                got, err = b"", None
                try:
                    while True:
                        b = c.recv(4096)
                        if not b:
                            break
                        got += b
                except (ssl.SSLEOFError, ConnectionResetError):
                    pass
                except ssl.SSLError as e:
                    err = e
                check(err is None and got == b"",
                      "TLS stream after the cut: data %r, error %r" %
                      (got[:80], err))
            check(https(s.port, f)[0] == 200, "HTTPS after the cut")


@test
def tls_client_certificates():
    """tls_client_ca_file (mutual TLS): a client certificate the CA signed
    is served; none, or one of another CA, is refused (health too)."""
    with tempfile.TemporaryDirectory() as d:
        f = make_pki(d)
        with Server("--tls-cert-file", f("server.crt"), "--tls-key-file",
                    f("server.key"), "--tls-client-ca-file", f("ca.crt"),
                    name="mtls") as s:
            status, body = https(s.port, f, cert="client")
            check(status == 200, "client certificate: %d %r" % (status, body))
            status, body = https(s.port, f, "/v1/attention", cert="client",
                                 method="POST", body=to_json_bytes(SMALL))
            check(status == 200, "inference: %d %r" % (status, body[:200]))
            # one connection, many requests (the verdict is kept with the
            # connection's certificate)
            ctx = ssl.create_default_context(cafile=f("ca.crt"))
            ctx.load_cert_chain(f("client.crt"), f("client.key"))
            c = http.client.HTTPSConnection(HOST, s.port, timeout=10,
                                            context=ctx)
            try:
                for i in range(5):
                    c.request("POST", "/v1/attention", to_json_bytes(SMALL),
                              {"Content-Type": "application/json"})
                    r = c.getresponse()
                    r.read()
                    check(r.status == 200, "request %d on one connection: "
                          "%d" % (i, r.status))
            finally:
                c.close()
            for cert in (None, "stranger"):
                try:
                    status, body = https(s.port, f, cert=cert)
                except (ssl.SSLError, OSError) as e:  # refused in the handshake
                    status, body = 0, str(e).encode()
                check(status == 403, "%s: %d %r" % (cert, status, body))
                check(b"client certificate" in body, repr(body))


@test
def tls_client_certificate_must_be_for_client_auth():
    """Mutual TLS honours extendedKeyUsage: a certificate of the CA that
    lists only serverAuth (the server's own) is refused with a 403 that
    says it is not for client authentication; one that lists clientAuth
    (alone or with serverAuth), or has no extendedKeyUsage, is served.
    Before, the server's certificate was accepted as a client's."""
    with tempfile.TemporaryDirectory() as d:
        f = make_pki(d)
        with Server("--tls-cert-file", f("server.crt"), "--tls-key-file",
                    f("server.key"), "--tls-client-ca-file", f("ca.crt"),
                    name="mtls-eku") as s:
            for cert in ("client", "client-eku", "dual"):
                status, body = https(s.port, f, cert=cert)
                check(status == 200, "%s: %d %r" % (cert, status, body))
            status, body = https(s.port, f, cert="server")
            check(status == 403, "the server's certificate as a client's: "
                  "%d %r" % (status, body))
            check(b"not for client authentication" in body and
                  b"clientAuth" in body, repr(body))
            # a valid client on a new connection is still served after it
            status, body = https(s.port, f, "/v1/attention", cert="client-eku",
                                 method="POST", body=to_json_bytes(SMALL))
            check(status == 200, "inference: %d %r" % (status, body[:200]))


@test
def tls_files_that_cannot_be_read_stop_the_start():
    with tempfile.TemporaryDirectory() as d:
        f = make_pki(d)
        cases = (
            (["--tls-cert-file", f("missing.crt"), "--tls-key-file",
              f("server.key")], "tls_cert_file", "cannot open"),
            (["--tls-cert-file", f("ext"), "--tls-key-file", f("server.key")],
             "tls_cert_file", "not PEM"),
            (["--tls-cert-file", f("server.crt"), "--tls-key-file",
              f("client.key")], "tls_key_file", "do not match"),
            (["--tls-cert-file", f("server.crt"), "--tls-key-file",
              f("server.key"), "--tls-client-ca-file", f("server.key")],
             "tls_client_ca_file", "no PEM certificate"),
            (["--tls-cert-file", f("server.crt")], "tls_key_file", "both"),
        )
        for args, key, says in cases:
            rc, _, err = run_attnd("--port", "0", *args)
            check(rc != 0 and key in err and says in err,
                  "%s: rc %d: %s" % (says, rc, err[-300:]))


if __name__ == "__main__":
    sys.exit(main())
