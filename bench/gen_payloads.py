#!/usr/bin/env python3
"""Write the request bodies bench/load.sh sends with wrk (stdlib only).

Files written into OUTDIR (default /tmp/attn_load):
  v1_small.json      POST /v1/attention: {"query": [[16 x 64]]}, self-attention
  v2_small.json      POST /v2/models/sdpa/infer, KServe v2 JSON: query, key and
                     value are the same [16, 64] FP32 tensor
  mha_large.bin      POST /v2/models/mha/infer, binary tensor extension: JSON
                     header then FP32 little-endian query [n, d] and w_q, w_k,
                     w_v, w_o [d, d], b_q, b_k, b_v, b_o [d]; num_heads h,
                     need_weights false, attn_output returned as binary
  mha_large.hdrlen   the JSON header's length in bytes (the value of
                     Inference-Header-Content-Length)

Values are uniform in [-1, 1) (weights scaled by 1/sqrt(d), biases by 0.1,
as bench/bench_attention.c does), written in JSON with 6 significant digits.
Seeded, so the files are the same on every run.
"""
import argparse
import array
import json
import os
import random
import sys


def floats(rng, count, scale=1.0):
    return [rng.uniform(-1.0, 1.0) * scale for _ in range(count)]


def fmt(v):
    return float("%.6g" % v)


def rows(flat, ncols):
    return [[fmt(x) for x in flat[i:i + ncols]]
            for i in range(0, len(flat), ncols)]


def write(path, data):
    with open(path, "wb") as f:
        f.write(data)


def small(outdir, n, d, rng):
    q = floats(rng, n * d)
    v1 = {"query": rows(q, d)}
    write(os.path.join(outdir, "v1_small.json"),
          json.dumps(v1, separators=(",", ":")).encode())
    flat = [fmt(x) for x in q]
    t = lambda name: {"name": name, "datatype": "FP32", "shape": [n, d],
                      "data": flat}
    v2 = {"inputs": [t("query"), t("key"), t("value")]}
    write(os.path.join(outdir, "v2_small.json"),
          json.dumps(v2, separators=(",", ":")).encode())


def large(outdir, n, d, h, rng):
    tensors = [("query", [n, d], floats(rng, n * d))]
    for w in ("w_q", "w_k", "w_v", "w_o"):
        tensors.append((w, [d, d], floats(rng, d * d, d ** -0.5)))
    for b in ("b_q", "b_k", "b_v", "b_o"):
        tensors.append((b, [d], floats(rng, d, 0.1)))
    blobs = []
    inputs = []
    for name, shape, vals in tensors:
        a = array.array("f", vals)
        if sys.byteorder != "little":
            a.byteswap()
        blob = a.tobytes()
        blobs.append(blob)
        inputs.append({"name": name, "datatype": "FP32", "shape": shape,
                       "parameters": {"binary_data_size": len(blob)}})
    header = {"inputs": inputs,
              "parameters": {"num_heads": h, "need_weights": False},
              "outputs": [{"name": "attn_output",
                           "parameters": {"binary_data": True}}]}
    hj = json.dumps(header, separators=(",", ":")).encode()
    write(os.path.join(outdir, "mha_large.bin"), hj + b"".join(blobs))
    write(os.path.join(outdir, "mha_large.hdrlen"), b"%d\n" % len(hj))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("outdir", nargs="?", default="/tmp/attn_load")
    ap.add_argument("--small-n", type=int, default=16)
    ap.add_argument("--small-d", type=int, default=64)
    ap.add_argument("--large-n", type=int, default=2048)
    ap.add_argument("--large-d", type=int, default=512)
    ap.add_argument("--large-h", type=int, default=8)
    a = ap.parse_args()
    os.makedirs(a.outdir, exist_ok=True)
    rng = random.Random(42)
    small(a.outdir, a.small_n, a.small_d, rng)
    large(a.outdir, a.large_n, a.large_d, a.large_h, rng)
    for f in sorted(os.listdir(a.outdir)):
        if f.startswith(("v1_", "v2_", "mha_")):
            p = os.path.join(a.outdir, f)
            print("%-18s %10d bytes" % (f, os.path.getsize(p)))


if __name__ == "__main__":
    main()
