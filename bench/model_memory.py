#!/usr/bin/env python3
"""model_memory.py - the memory of a resident model held in bfloat16
against the same model in float32 (issue 35).

Writes one nn.MultiheadAttention state_dict (embed_dim E, random) as a
BF16 .safetensors file, and two model folders using it: "precision":
"fp32" (widened to float32 at load) and "precision": "bf16" (kept in
bfloat16).  Starts attnd on each (127.0.0.1, an ephemeral port), and
reports the model's weight_bytes (GET /v1/models) and attnd's resident
set (VmRSS, /proc) 3 s after it is ready (attnd trims its heap after an
idle second), beside attnd with no model.
Reports only; stops its servers and removes its files.

Usage: model_memory.py [--attnd build/src/attnd] [--E 2048] [--heads 16]
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                os.pardir, "scripts"))
import safetensors_write  # noqa: E402  (scripts/safetensors_write.py)


def write_bf16(path, tensors):
    """tensors: {name: array}, rounded to bfloat16 (nearest, ties to even,
    by the bit trick attnd uses) and written as BF16."""
    bits = []
    for name, a in tensors.items():
        u = a.astype(np.float32).view(np.uint32).astype(np.uint64)
        bits.append((name, "BF16", ((u + 0x7fff + ((u >> 16) & 1)) >> 16)
                     .astype("<u2")))
    safetensors_write.write(path, bits)


def measure(attnd, models):
    log = tempfile.NamedTemporaryFile(prefix="model-mem-", delete=False)
    p = subprocess.Popen([attnd, "--host", "127.0.0.1", "--port", "0",
                          "--models-dir", models, "--workers", "1"],
                         stdout=subprocess.DEVNULL, stderr=log)
    try:
        port = None
        for _ in range(600):
            m = re.search(r"listening on 127\.0\.0\.1:(\d+)",
                          open(log.name).read())
            if m:
                port = int(m.group(1))
                break
            if p.poll() is not None:
                sys.exit("attnd exited: " + open(log.name).read()[-300:])
            time.sleep(0.05)
        ms = json.load(urllib.request.urlopen(
            "http://127.0.0.1:%d/v1/models" % port, timeout=30))["models"]
        time.sleep(3)  # attnd gives freed memory back after an idle second
        rss = 0
        for line in open("/proc/%d/status" % p.pid):
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1]) * 1024
        res = [m for m in ms if m.get("weight_bytes")]
        return rss, res[0] if res else None
    finally:
        p.terminate()
        p.wait(timeout=30)
        os.unlink(log.name)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--attnd", default="build/src/attnd")
    ap.add_argument("--E", type=int, default=2048)
    ap.add_argument("--heads", type=int, default=16)
    a = ap.parse_args()
    E = a.E
    rng = np.random.default_rng(35)
    sd = {"in_proj_weight": rng.uniform(-0.02, 0.02, (3 * E, E)),
          "in_proj_bias": rng.uniform(-0.1, 0.1, 3 * E),
          "out_proj.weight": rng.uniform(-0.02, 0.02, (E, E)),
          "out_proj.bias": rng.uniform(-0.1, 0.1, E)}
    root = tempfile.mkdtemp(prefix="model-mem-")
    try:
        write_bf16(os.path.join(root, "w.safetensors"), sd)
        dirs = {}
        for prec in ("none", "fp32", "bf16"):
            d = os.path.join(root, prec)
            os.mkdir(d)
            dirs[prec] = d
            if prec == "none":
                continue
            with open(os.path.join(d, "m.json"), "w") as f:
                json.dump({"name": "m", "embed_dim": E, "num_heads": a.heads,
                           "weights": "../w.safetensors",
                           "precision": prec}, f)
        base, _ = measure(a.attnd, dirs["none"])
        print("E %d, %d heads, %.1f M parameters (BF16 file %.1f MB); "
              "attnd without a model: RSS %.1f MB" %
              (E, a.heads, (4 * E * E + 4 * E) / 1e6,
               os.path.getsize(os.path.join(root, "w.safetensors")) / 1e6,
               base / 1e6))
        for prec in ("fp32", "bf16"):
            rss, m = measure(a.attnd, dirs[prec])
            print("precision %s: weight_bytes %.1f MB, RSS %.1f MB "
                  "(+%.1f MB over no model)" %
                  (prec, m["weight_bytes"] / 1e6, rss / 1e6,
                   (rss - base) / 1e6))
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
