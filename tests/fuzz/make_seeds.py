#!/usr/bin/python3
"""Write the seed inputs of the fuzz targets safetensors, session_file,
model, config, routes and http into tests/fuzz/seeds/TARGET/ (the json and
codec seeds are kept as they are).  Each seed is framed as its target's design comment
says (tests/fuzz/fuzz_TARGET.c).  Run it after changing a framing:
    python3 tests/fuzz/make_seeds.py
"""
import json
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def put(target, name, data):
    d = os.path.join(HERE, "seeds", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def st_parts(tensors, meta=None):
    """(header JSON, data) of a .safetensors file; tensors: name -> (dtype,
    shape, raw bytes)."""
    hdr, data = {}, b""
    for name, (dt, shape, raw) in tensors.items():
        hdr[name] = {"dtype": dt, "shape": shape,
                     "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    if meta is not None:
        hdr["__metadata__"] = meta
    return json.dumps(hdr, separators=(",", ":")).encode(), data


def st_file(tensors, meta=None):
    h, data = st_parts(tensors, meta)
    return struct.pack("<Q", len(h)) + h + data


def f32(*v):
    return struct.pack("<%df" % len(v), *v)


def safetensors():
    small = {"a": ("F32", [2], f32(1.5, -2.0)),
             "b": ("F16", [1, 2], struct.pack("<2e", 0.5, 65504.0)),
             "c": ("BF16", [2], bytes([0x80, 0x3f, 0x00, 0xc0])),
             "d": ("F64", [1], struct.pack("<d", 3.25)),
             "e": ("F32", [0, 3], b"")}
    put("safetensors", "raw_small", b"\x00" + st_file(small, {"k": "v"}))
    h, data = st_parts(small)
    put("safetensors", "auto_small", b"\x01" + h + b"\x00" + data)
    h, data = st_parts({"x": ("I32", [1], b"\x01\x00\x00\x00")})
    put("safetensors", "auto_i32", b"\x03" + h + b"\x00" + data)
    h, data = st_parts({"x": ("F32", [2, 2], f32(1, 2, 3, 4))})
    put("safetensors", "auto_bound1", b"\x03" + h + b"\x00" + data)
    with open(os.path.join(ROOT, "config/models/demo.safetensors"), "rb") as f:
        put("safetensors", "raw_demo", b"\x00" + f.read())


def session_file_bytes(layers, dtype="F32", kv="fp32", hkv=1, dim=2,
                       extra_spec=None, owner="0000000000000000"):
    """A session file (codec.h "session files"); layers: token counts."""
    size = {"F32": 4, "BF16": 2, "F16": 2}[dtype]
    spec = {"layers": len(layers), "num_heads": 2 * hkv, "num_kv_heads": hkv,
            "head_dim": dim, "max_tokens": 16, "kv_dtype": kv}
    spec.update(extra_spec or {})
    tensors = {}
    for i, n in enumerate(layers):
        raw = bytes((j * 7 + i) & 0xff for j in range(n * hkv * dim * size))
        tensors["layers.%d.key" % i] = (dtype, [n, hkv, dim], raw)
        tensors["layers.%d.value" % i] = (dtype, [n, hkv, dim], raw[::-1])
    meta = {"format": "attnd-session", "format_version": "1", "id": "s-1",
            "owner": owner, "spec": json.dumps(spec, separators=(",", ":"))}
    return st_parts(tensors, meta)


def session_file():
    for name, args in [
            ("fp32", ([3, 0],)),
            ("bf16_rotary", ([5], "BF16", "bf16", 2, 3,
                             {"rotary": {"base": 500, "dims": 2,
                                         "interleaved": True}})),
            ("fp16_alibi", ([1, 2, 16], "F16", "fp16", 1, 4,
                            {"alibi": [0.5, 0.25], "window": [3, 0],
                             "softcap": 20, "scale": 0.5})),
            ("owner", ([2], "F32", "fp32", 1, 2, None, "00000000deadbeef"))]:
        h, data = session_file_bytes(*args)
        put("session_file", "raw_" + name,
            b"\x00" + struct.pack("<Q", len(h)) + h + data)
        put("session_file", "auto_" + name, b"\x01" + h + b"\x00" + data)
    h, data = session_file_bytes([17])  # past max_tokens
    put("session_file", "auto_too_long", b"\x01" + h + b"\x00" + data)


def model():
    seeded = {"name": "m", "embed_dim": 8, "num_heads": 2, "seed": 7,
              "description": "seeded", "version": "2"}
    put("model", "seeded", b"\x00" + json.dumps(seeded).encode())
    gqa = {"name": "g", "embed_dim": 8, "num_heads": 4, "num_kv_heads": 2,
           "kdim": 6, "vdim": 4, "bias": False, "seed": 1}
    put("model", "seeded_gqa", b"\x00" + json.dumps(gqa).encode())
    put("model", "twice", b"\x02" + json.dumps(seeded).encode())
    E = 4
    w = {n: ("F32", [E, E], f32(*[0.125 * (i % 5) for i in range(E * E)]))
         for n in ("q_proj_weight", "k_proj_weight", "v_proj_weight")}
    w["out_proj.weight"] = ("F32", [E, E], f32(*[0.1] * (E * E)))
    filed = {"name": "f", "embed_dim": E, "num_heads": 2, "bias": False,
             "weights": "w.safetensors"}
    h, data = st_parts(w)
    put("model", "file_separate", b"\x01" + json.dumps(filed).encode() +
        b"\x00" + h + b"\x00" + data)
    packed = {"in_proj_weight": ("F32", [3 * E, E], f32(*[0.05] * (3 * E * E))),
              "in_proj_bias": ("F32", [3 * E], f32(*[0.0] * (3 * E))),
              "out_proj.weight": ("F32", [E, E], f32(*[0.1] * (E * E))),
              "out_proj.bias": ("F32", [E], f32(*[0.0] * E))}
    filed["bias"] = True
    h, data = st_parts(packed)
    put("model", "file_packed", b"\x01" + json.dumps(filed).encode() +
        b"\x00" + h + b"\x00" + data)
    with open(os.path.join(ROOT, "config/models/demo.json"), "rb") as f:
        demo = json.load(f)
    demo["weights"] = "w.safetensors"
    with open(os.path.join(ROOT, "config/models/demo.safetensors"), "rb") as f:
        raw = f.read()
    n = struct.unpack("<Q", raw[:8])[0]
    put("model", "demo", b"\x01" + json.dumps(demo).encode() + b"\x00" +
        raw[8:8 + n] + b"\x00" + raw[8 + n:])


def config():
    with open(os.path.join(ROOT, "config/attnd.json"), "rb") as f:
        full = f.read()
    put("config", "file_full", b"\x01" + full + b"\x00")
    put("config", "file_env", b"\x02" + b'{"workers": 2, "port": 0}\x00')
    put("config", "flags", b"\x00\x00--workers\x003\x00--port=0\x00"
        b"--log-level\x00debug\x00--access-log=no\x00--check-config")
    put("config", "env", b"\x00\x00ATTND_WORKERS=4\x00ATTND_HOST=::1\x00"
        b"ATTND_WORKRS=1\x00ATTND_MAX_BODY_BYTES=1048576\x00"
        b"--max-total-body-bytes\x00524288")
    put("config", "layers", b"\x01" + b'{"host": "127.0.0.1", "models_dir":'
        b' "models", "cpu_scheduling_policy": "other"}\x00'
        b"ATTND_QUEUE_CAPACITY=7\x00--queue-timeout-ms\x00250")
    put("config", "healthcheck", b"\x00\x00--healthcheck\x00"
        b"http://127.0.0.1:8080/v2/health/ready\x00--port\x008080")
    put("config", "help", b"\x00\x00--workers\x00x\x00--help")
    put("config", "access", b"\x01" + b'{"cors_allow_origins": '
        b'["https://app.example", "http://localhost:3000"], '
        b'"api_keys_file": "keys", "tls_cert_file": "c.pem", '
        b'"tls_key_file": "k.pem"}\x00ATTND_TLS_CLIENT_CA_FILE=ca.pem\x00'
        b"--metrics-require-key=yes")


def routes():
    def seed(name, flags, method_piece, *pieces):
        parts = ([method_piece] if method_piece is not None else []) + \
            list(pieces)
        put("routes", name, bytes([flags]) + b"\x00".join(parts))
    body = b'{"inputs":[{"name":"query","shape":[1,2],"datatype":"FP32",' \
        b'"data":[1,2]}]}'
    seed("v2_infer", 2, None, b"/v2/models/sdpa/infer", b"application/json",
         b"", b"", b"", b"", body)
    seed("v2_binary", 2, None, b"/v2/models/mha/versions/1/infer",
         b"application/octet-stream", b"gzip", b" 12 ", b"", b"", body)
    seed("v1", 2, None, b"/v1/attention", b"text/plain", b"deflate", b"",
         b"", b"", body)
    seed("ready", 0, None, b"/v2/health/ready")
    seed("ready_draining", 8, None, b"/v2/models/demo/ready")
    seed("metadata", 1, None, b"/v2/models/demo/versions/1")
    seed("root_html", 0, None, b"/", b"", b"", b"", b"text/html;q=0.9",
         b"W/\"x\", *")
    seed("ui", 0, None, b"/ui/app.js", b"", b"", b"", b"", b'"abc"')
    seed("custom_method", 7, b"BREW", b"/v1/models")
    seed("list", 3, None, b"/v1/models")
    seed("repo_index", 2, None, b"/v2/repository/index", b"", b"", b"", b"",
         b"", b'{"ready": true}')
    seed("repo_load", 2, None, b"/v2/repository/models/demo/load",
         b"application/json", b"identity", b"", b"", b"", b"{}")
    seed("repo_unload", 2, None, b"/v2/repository/models/sdpa/unload")


def http():
    # mode '0': check_framing on header lines
    def framing(name, text):
        put("http", name, "0" + text)
    framing("plain", "Host: a\nContent-Length: 12\n"
            "Inference-Header-Content-Length: 8\n"
            "Content-Type: application/json")
    framing("te_cl", "Content-Length: 5\nTransfer-Encoding: chunked")
    framing("two_cl", "Content-Length: 5\ncontent-length: 6")
    framing("te_list", "Transfer-Encoding: gzip, chunked\n"
            "Transfer-Encoding: chunked")
    framing("te_last", "Transfer-Encoding: chunked, gzip")
    framing("ihcl", "Inference-Header-Content-Length: 18446744073709551616"
            "\nInference-Header-Content-Length: 18446744073709551616")
    framing("numbers", "Content-Length: \t42 \nX: -1\nY: 0x10\nZ: 1 2")

    # mode '1': check_headers on the raw header section after
    # "GET / HTTP/1.1\r\n", as libmicrohttpd 0.9.75 leaves it
    def section(name, raw):
        put("http", "section_" + name, b"1" + raw)
    # well formed
    section("crlf", b"Host: a\r\nContent-Length: 5\r\n"
            b"Content-Type: application/json\r\n\r\nhello")
    section("lf", b"Host: a\nAccept: */*\nX-Request-Id: r1\n\n")
    section("mixed", b"Host: a\nX-A: 1\r\nX-B: 2\n\r\n")
    section("mixed_end", b"Host: a\r\n\n")
    section("empty_values", b"A:\r\nB: \r\nC:\t\r\nD:  \t \r\n\r\n")
    section("tabs", b"X-T:\tv\tw \t\r\nX-U: a\x7f\xff\x80 b\r\n\r\n")
    section("none", b"\r\n")
    section("te_cl", b"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n"
            b"\r\n5\r\nhello\r\n0\r\n\r\n")
    section("two_cl", b"Content-Length: 5\r\nContent-Length: 6\r\n\r\n")
    # the smuggling forms libmicrohttpd reads leniently
    section("empty_name_mid", b"Host: a\r\n: x\r\nContent-Length: 5\r\n"
            b"\r\nhello")
    section("empty_name_first", b": x\r\nHost: a\r\n\r\n")
    section("blank_before_colon", b"Host: a\r\nContent-Length : 5\r\n\r\n")
    section("tab_before_colon", b"Host: a\r\nContent-Length\t: 5\r\n\r\n")
    section("fold_mid", b"Host: a\r\nX-A: 1\r\n 2\r\nX-B: 3\r\n\r\n")
    section("fold_last", b"Host: a\r\nX-A: 1\r\n\t2\r\n \r\n\r\n")
    section("fold_first", b"X-A: 1\r\n 2\r\nHost: a\r\n\r\n")
    section("blank_first_line", b" Host: a\r\nX: 1\r\n\r\n")
    section("nul_mid_value", b"X-A: a\0b\r\nHost: a\r\n\r\n")
    section("nul_before_crlf", b"X-A: a\0\r\nHost: a\r\n\r\n")
    section("nul_before_lf", b"X-A: a\0\nHost: a\r\n\r\n")
    section("nul_line_mid", b"Host: a\r\n\0X: 1\r\n\r\n")
    section("bare_cr", b"X-A: a\rb\r\nHost: a\r\n\r\n")
    section("bare_cr_end", b"Host: a\r\nX-A: a\r\r\n\r\n")
    section("control", b"Host: a\x01b\r\n\r\n")

if __name__ == "__main__":
    safetensors()
    session_file()
    model()
    config()
    routes()
    http()
