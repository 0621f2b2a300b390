#!/usr/bin/env python3
"""compare_bf16.py - attnd's bf16 attention against PyTorch's torch.bfloat16
on the same inputs, both measured against float64 (issue 35).

For each shape: q, k, v ~ U(-1, 1) * sqrt(3) (unit variance) [heads, n, d],
attn_sdpa through bench_bf16's io mode (fp32 and bf16, per-head weights),
PyTorch computing the same attention in torch.bfloat16 (q k^T * scale,
softmax, P v: bf16 tensors, as a bf16 model runs it), and numpy in float64.
Prints the max and mean absolute errors of outputs and weights against
float64.  Usage: compare_bf16.py [path/to/bench_bf16] (default
build-b/bench/bench_bf16).  Reports only."""
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch

SHAPES = [(256, 8, 64), (1024, 8, 64), (512, 4, 128), (2048, 8, 64)]


def f64_attention(q, k, v):
    s = q @ k.transpose(0, 2, 1) / np.sqrt(q.shape[-1])
    s -= s.max(-1, keepdims=True)
    p = np.exp(s)
    p /= p.sum(-1, keepdims=True)
    return p @ v, p


def torch_bf16(q, k, v):
    qt, kt, vt = (torch.from_numpy(x).to(torch.bfloat16) for x in (q, k, v))
    s = (qt @ kt.transpose(1, 2)) * (1.0 / float(np.sqrt(q.shape[-1])))
    p = torch.softmax(s, dim=-1)
    return (p @ vt).float().numpy(), p.float().numpy()


def errs(got, ref):
    e = np.abs(got.astype(np.float64) - ref)
    return e.max(), e.mean()


def main():
    exe = sys.argv[1] if len(sys.argv) > 1 else "build-b/bench/bench_bf16"
    print("torch", torch.__version__, "threads", torch.get_num_threads())
    print("%-16s %-12s %10s %10s %10s %10s" %
          ("n heads d", "what", "out max", "out mean", "w max", "w mean"))
    rng = np.random.default_rng(35)
    for n, h, d in SHAPES:
        q, k, v = (rng.uniform(-1, 1, (h, n, d)) * np.sqrt(3.0)
                   for _ in range(3))
        q, k, v = (x.astype(np.float32) for x in (q, k, v))
        ro, rw = f64_attention(q.astype(np.float64), k.astype(np.float64),
                               v.astype(np.float64))
        with tempfile.TemporaryDirectory() as tmp:
            for name, x in (("q", q), ("k", k), ("v", v)):
                x.tofile(os.path.join(tmp, name + ".f32"))
            subprocess.run([exe, "io", str(n), str(h), str(d), tmp],
                           check=True, stdout=subprocess.DEVNULL)

            def load(name, shape):
                return np.fromfile(os.path.join(tmp, name),
                                   dtype=np.float32).reshape(shape)
            res = {
                "attnd fp32": (load("out_fp32.f32", q.shape),
                               load("w_fp32.f32", (h, n, n))),
                "attnd bf16": (load("out_bf16.f32", q.shape),
                               load("w_bf16.f32", (h, n, n))),
            }
        res["torch bf16"] = torch_bf16(q, k, v)
        for what, (o, w) in res.items():
            om, oa = errs(o, ro)
            wm, wa = errs(w, rw)
            print("%-16s %-12s %10.3g %10.3g %10.3g %10.3g" %
                  ("%d %d %d" % (n, h, d), what, om, oa, wm, wa))


if __name__ == "__main__":
    main()
