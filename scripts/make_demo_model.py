#!/usr/bin/python3
"""make_demo_model.py - the "demo" model shipped in config/models/, and its
golden input/output pair for HTTP tests.

Run with Debian's interpreter (python3-torch 1.13, python3-numpy):

    /usr/bin/python3 scripts/make_demo_model.py

Writes, relative to the repository root:
  config/models/demo.safetensors  nn.MultiheadAttention(16, 4, bias=True)
                                  state_dict, F32, PyTorch's names
  config/models/demo.json         model description read by attnd
  tests/golden/demo_model_io.json fixed query [1, 5, 16] (self-attention),
                                  without and with a key_padding_mask, and
                                  the float64 torch outputs

Deterministic: fixed seed, fixed inputs.  The safetensors file is written by
scripts/safetensors_write.py (compact header), so the script needs no
safetensors package.  Outputs are computed with module.double() from the
float32 parameters and inputs, so they carry no float32 rounding of torch's.
"""

import json
import os

import numpy as np
import torch

import safetensors_write

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NAME = "demo"
E, H, SEED = 16, 4, 20240601
ORDER = ["in_proj_weight", "in_proj_bias", "out_proj.weight", "out_proj.bias"]


def f32_list(t):
    return [float(np.float32(x)) for x in t.detach().float().reshape(-1).numpy()]


def f64_list(t):
    a = t.detach().double().reshape(-1).numpy()
    assert np.all(np.isfinite(a))
    return [float(x) for x in a]


def main():
    torch.manual_seed(SEED)
    mha = torch.nn.MultiheadAttention(E, H, bias=True, batch_first=True)
    with torch.no_grad():  # torch initialises biases to 0; make them count
        mha.in_proj_bias.uniform_(-0.5, 0.5)
        mha.out_proj.bias.uniform_(-0.5, 0.5)
    sd = mha.state_dict()
    assert sorted(sd.keys()) == sorted(ORDER), sorted(sd.keys())

    models = os.path.join(ROOT, "config", "models")
    os.makedirs(models, exist_ok=True)
    st_path = os.path.join(models, NAME + ".safetensors")
    weights = [(k, "F32", sd[k].detach().float().contiguous().numpy()
                .astype("<f4")) for k in ORDER]
    safetensors_write.write(st_path, weights, compact=True)
    cfg = {"name": NAME, "embed_dim": E, "num_heads": H, "bias": True,
           "weights": NAME + ".safetensors",
           "description": "demo nn.MultiheadAttention(embed_dim=16, "
                          "num_heads=4, bias=True), random weights (seed %d), "
                          "made by scripts/make_demo_model.py" % SEED}
    with open(os.path.join(models, NAME + ".json"), "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")

    # golden I/O, float64 torch from the float32 values
    x = torch.randn(1, 5, E)
    kpm = torch.tensor([[False, False, False, True, True]])
    mha64 = mha.double()  # training mode, dropout 0: no fused fast path
    cases = []
    with torch.no_grad():
        for name, m in (("self", None), ("key_padding_mask", kpm)):
            x64 = x.double()
            out, w = mha64(x64, x64, x64, key_padding_mask=m,
                           need_weights=True, average_attn_weights=True)
            c = {"name": name,
                 "query": {"shape": list(x.shape), "data": f32_list(x)}}
            if m is not None:
                c["key_padding_mask"] = {"dtype": "bool",
                                         "shape": list(m.shape),
                                         "data": [bool(v) for v in
                                                  m.reshape(-1).tolist()]}
            c["need_weights"] = True
            c["average_attn_weights"] = True
            c["attn_output"] = {"shape": list(out.shape),
                                "data": f64_list(out)}
            c["attn_weights"] = {"shape": list(w.shape), "data": f64_list(w)}
            cases.append(c)
    io = {"name": "demo_model_io", "kind": "model_io", "model": NAME,
          "weights": "config/models/" + NAME + ".safetensors",
          "torch_version": torch.__version__,
          "note": "self-attention (key = value = query) with the demo model; "
                  "outputs are torch float64 from the float32 weights and "
                  "inputs; key_padding_mask True = padding (ignored key)",
          "cases": cases}
    io_path = os.path.join(ROOT, "tests", "golden", "demo_model_io.json")
    with open(io_path, "w") as f:
        lines = ["  %s: %s" % (json.dumps(k), json.dumps(
            v, separators=(",", ":"), allow_nan=False)) for k, v in io.items()]
        f.write("{\n" + ",\n".join(lines) + "\n}\n")
    for p in (st_path, os.path.join(models, NAME + ".json"), io_path):
        print("%s (%d bytes)" % (os.path.relpath(p, ROOT), os.path.getsize(p)))


if __name__ == "__main__":
    main()
