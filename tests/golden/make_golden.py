#!/usr/bin/python3
"""make_golden.py - golden vectors for the attention engine, from PyTorch.

Run with Debian's interpreter (python3-torch 1.13, python3-numpy):

    /usr/bin/python3 tests/golden/make_golden.py

It rewrites tests/golden/<case>.json for a fixed list of small cases.  The
files are committed, so CI needs no torch: tests/test_golden.c reads them with
cJSON and compares the engine with them.

Design
  - Every case seeds torch with its own fixed seed, so adding a case never
    changes another case's file.
  - Inputs and parameters are drawn in float32 and stored as the exact float32
    values (repr of the double equal to the float32).  The golden outputs are
    computed in float64 (module.double()) from those float32 values, so a test
    tolerance measures only the engine's own fp32 error.
  - Every torch result is checked here against a plain textbook computation in
    float64 (softmax(Q K^T * scale + mask) V per head); a mismatch aborts, so a
    misread torch convention cannot slip into the golden files.
  - PyTorch 1.13 returns NaN for a query row whose keys are all blocked.  Our
    engine's contract is output 0 and weights 0 for such a row (so an MHA
    output row is out_proj.bias).  Cases with such rows record the contract,
    computed by the textbook code, and say so in their "note"; all other rows
    are still checked against torch.
  - -inf (in float masks) is written as the JSON string "-inf"; JSON has no
    infinity literal.

See tests/golden/README.md for the file format.
"""

import json
import math
import os
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
TOL = 1e-12  # torch float64 vs textbook float64


# ---- JSON helpers ----------------------------------------------------------

def f32_list(t):
    """Flat list of Python floats equal to the float32 values of t."""
    a = t.detach().to(torch.float32).contiguous().view(-1).numpy()
    out = []
    for x in a:
        x = np.float32(x)
        if np.isinf(x) and x < 0:
            out.append("-inf")
        elif not np.isfinite(x):
            raise ValueError("non-finite value other than -inf")
        else:
            out.append(float(x))
    return out


def f64_list(t):
    a = t.detach().to(torch.float64).contiguous().view(-1).numpy()
    if not np.all(np.isfinite(a)):
        raise ValueError("non-finite golden output")
    return [float(x) for x in a]


def bool_list(t):
    return [bool(x) for x in t.contiguous().view(-1).tolist()]


def tensor32(t):
    return {"shape": list(t.shape), "data": f32_list(t)}


def tensor64(t):
    return {"shape": list(t.shape), "data": f64_list(t)}


def mask_json(m, **extra):
    d = {"dtype": "bool" if m.dtype == torch.bool else "float",
         "shape": list(m.shape),
         "data": bool_list(m) if m.dtype == torch.bool else f32_list(m)}
    d.update(extra)
    return d


def write_case(obj):
    """One top-level key per line, each value on one line: small diffs."""
    path = os.path.join(HERE, obj["name"] + ".json")
    lines = []
    for k, v in obj.items():
        lines.append("  %s: %s" % (json.dumps(k), json.dumps(
            v, separators=(",", ":"), allow_nan=False)))
    with open(path, "w") as f:
        f.write("{\n" + ",\n".join(lines) + "\n}\n")
    return path


# ---- textbook float64 attention (the contract, including empty rows) ---------

def attend(q, k, v, scale, blocked, addmask, softcap=None):
    """q [B,H,Lq,Dk], k [B,H,Lk,Dk], v [B,H,Lk,Dv] float64.
    blocked: bool broadcastable to [B,H,Lq,Lk] (True = blocked) or None.
    addmask: float broadcastable, added to the scaled scores, or None.
    softcap: c > 0 makes each scaled score s into c * tanh(s / c), before
    addmask and blocked; None leaves the scores as they are.
    Returns (out [B,H,Lq,Dv], weights [B,H,Lq,Lk]); a row whose keys are all
    blocked gets weights 0 and output 0."""
    s = torch.matmul(q, k.transpose(-1, -2)) * scale
    if softcap is not None:
        s = softcap * torch.tanh(s / softcap)
    if addmask is not None:
        s = s + addmask
    if blocked is not None:
        s = s.masked_fill(blocked, float("-inf"))
    empty = torch.isinf(s).all(dim=-1, keepdim=True) & (s < 0).all(
        dim=-1, keepdim=True)
    s = s.masked_fill(empty, 0.0)
    w = torch.softmax(s, dim=-1)
    w = w.masked_fill(empty, 0.0)
    return torch.matmul(w, v), w, empty.squeeze(-1)


def causal_blocked(lq, lk):
    """Bottom-right aligned: query i may attend key j iff j <= i + (lk - lq)."""
    i = torch.arange(lq).view(lq, 1)
    j = torch.arange(lk).view(1, lk)
    return j > i + (lk - lq)


# ---- the attention variants, built explicitly (engine.h, attn_attend_opts) ---

def top_left_blocked(lq, lk):
    """PyTorch's is_causal: query i may attend key j iff j <= i."""
    i = torch.arange(lq).view(lq, 1)
    j = torch.arange(lk).view(1, lk)
    return j > i


def window_blocked(lq, lk, left, right):
    """FlashAttention's window_size: key j is visible from query i iff
    i + (lk - lq) - left <= j <= i + (lk - lq) + right; -1 = unbounded."""
    i = torch.arange(lq).view(lq, 1) + (lk - lq)
    j = torch.arange(lk).view(1, lk)
    b = torch.zeros(lq, lk, dtype=torch.bool)
    if left >= 0:
        b |= j < i - left
    if right >= 0:
        b |= j > i + right
    return b


def alibi_standard_slopes(n):
    """get_slopes from the ALiBi paper's code (Press et al.), verbatim."""
    def get_slopes_power_of_2(n):
        start = (2 ** (-2 ** -(math.log2(n) - 3)))
        ratio = start
        return [start * ratio ** i for i in range(n)]
    if math.log2(n).is_integer():
        return get_slopes_power_of_2(n)
    closest_power_of_2 = 2 ** math.floor(math.log2(n))
    return (get_slopes_power_of_2(closest_power_of_2) +
            alibi_standard_slopes(2 * closest_power_of_2)[0::2]
            [:n - closest_power_of_2])


def alibi_bias(slopes, lq, lk):
    """[1, H, lq, lk] float64: -slope_h * |j - (i + lk - lq)|."""
    i = torch.arange(lq, dtype=torch.float64).view(lq, 1) + (lk - lq)
    j = torch.arange(lk, dtype=torch.float64).view(1, lk)
    sl = torch.tensor(slopes, dtype=torch.float64).view(1, -1, 1, 1)
    return -sl * (j - i).abs().view(1, 1, lq, lk)


def rope(x, pos0, dims, base, interleaved):
    """Rotary positions on x [..., L, D] float64, row l at position pos0 + l:
    pairs (t, t + dims/2) (NeoX) or (2t, 2t + 1) (GPT-J) of the first dims
    values rotated by (pos0 + l) * base^(-2t / dims)."""
    L = x.shape[-2]
    half = dims // 2
    t = torch.arange(half, dtype=torch.float64)
    theta = base ** (-2.0 * t / dims)
    ang = (torch.arange(L, dtype=torch.float64) + pos0).view(L, 1) * theta
    c, s = torch.cos(ang), torch.sin(ang)
    y = x.clone()
    if interleaved:
        a, b = x[..., 0:dims:2], x[..., 1:dims:2]
        y[..., 0:dims:2] = a * c - b * s
        y[..., 1:dims:2] = b * c + a * s
    else:
        a, b = x[..., :half], x[..., half:dims]
        y[..., :half] = a * c - b * s
        y[..., half:dims] = b * c + a * s
    return y


def variant_masks(H, lq, lk, causal, causal_align, window, slopes):
    """The variants that are masks and biases: (blocked [lq, lk] or None,
    additive [1, H, lq, lk] or None)."""
    blocked = None
    if causal:
        blocked = (top_left_blocked(lq, lk) if causal_align == "top_left"
                   else causal_blocked(lq, lk))
    if window is not None:
        wb = window_blocked(lq, lk, window[0], window[1])
        blocked = wb if blocked is None else blocked | wb
    add = alibi_bias(slopes, lq, lk) if slopes is not None else None
    return blocked, add


def variant_fields(case, H, causal_align, window, slopes, alibi_standard,
                   softcap, rotary):
    """The variants' JSON fields (tests/golden/README.md)."""
    if causal_align is not None:
        case["causal_alignment"] = causal_align
    if window is not None:
        case["window"] = list(window)
    if slopes is not None:
        case["alibi_slopes"] = tensor32(torch.tensor(slopes,
                                                     dtype=torch.float32))
        case["alibi_standard"] = alibi_standard
    if softcap is not None:
        case["softcap"] = softcap
    if rotary is not None:
        case["rotary"] = dict(rotary)


def f32(x):
    return float(np.float32(x))


def float32_variants(H, alibi, softcap):
    """The float32 values the engine gets: ALiBi slopes ("standard" or a
    list; None) and softcap (None)."""
    slopes = None
    if alibi is not None:
        slopes = [f32(x) for x in (alibi_standard_slopes(H)
                                   if alibi == "standard" else alibi)]
    return slopes, (f32(softcap) if softcap is not None else None)


# ---- nn.MultiheadAttention cases ---------------------------------------------

def randomize_biases(mha):
    """torch initialises the biases to 0; golden tests want them non-zero."""
    with torch.no_grad():
        if mha.in_proj_bias is not None:
            mha.in_proj_bias.uniform_(-0.5, 0.5)
        if mha.out_proj.bias is not None:
            mha.out_proj.bias.uniform_(-0.5, 0.5)


def textbook_mha(sd, E, H, xq, xk, xv, blocked, addmask, bias, softcap=None,
                 rotary=None):
    """Float64 MHA from a float64 state_dict; returns (out, per-head w, empty).
    softcap and rotary (a dict as in the JSON, query_offset resolved) as in
    the engine: rotary on the projected heads of q and k."""
    if "in_proj_weight" in sd:
        wq, wk, wv = sd["in_proj_weight"].chunk(3, dim=0)
    else:
        wq, wk, wv = (sd["q_proj_weight"], sd["k_proj_weight"],
                      sd["v_proj_weight"])
    if bias:
        bq, bk, bv = sd["in_proj_bias"].chunk(3)
        bo = sd["out_proj.bias"]
    else:
        bq = bk = bv = bo = None
    B, Lq, _ = xq.shape
    Lk = xk.shape[1]
    Dh = E // H

    def proj(x, w, b, L):
        y = x @ w.t()
        if b is not None:
            y = y + b
        return y.view(B, L, H, Dh).transpose(1, 2)
    q, k, v = proj(xq, wq, bq, Lq), proj(xk, wk, bk, Lk), proj(xv, wv, bv, Lk)
    if rotary is not None:
        q = rope(q, rotary["query_offset"], rotary["dims"], rotary["base"],
                 rotary["interleaved"])
        k = rope(k, 0, rotary["dims"], rotary["base"], rotary["interleaved"])
    o, w, empty = attend(q, k, v, 1.0 / math.sqrt(Dh), blocked, addmask,
                         softcap)
    o = o.transpose(1, 2).reshape(B, Lq, E)
    out = o @ sd["out_proj.weight"].t()
    if bo is not None:
        out = out + bo
    return out, w, empty


def mha_case(name, seed, E, H, B, Lq, Lk=None, kdim=None, vdim=None,
             bias=True, self_attn=False, kpm=None, mask=None, mask_kind=None,
             causal=False, need_weights=True, average=True, note=None,
             causal_align=None, window=None, alibi=None, softcap=None,
             rotary=None):
    """Build, run and record one nn.MultiheadAttention case.

    kpm: function(B, Lk) -> bool [B, Lk] (True = padding) or None.
    mask: function(B, H, Lq, Lk) -> mask tensor in torch's format or None.
    mask_kind: "2d" ([Lq,Lk]) or "3d" ([B*H,Lq,Lk], stored as [B,H,Lq,Lk]).
    causal: torch gets the bottom-right causal bool mask; our side the flag.
    causal_align, window, alibi: as in sdpa_case; torch gets them as one
    explicit mask (bool [Lq,Lk], or float [B*H,Lq,Lk] with -inf and the ALiBi
    bias).  softcap, rotary: as in sdpa_case; the module cannot apply them,
    so the golden output is the textbook float64 computation in torch from
    the module's own state_dict (projections, explicit RoPE on the heads,
    tanh on the scaled scores)."""
    torch.manual_seed(seed)
    if self_attn:
        Lk = Lq
    kdim = kdim or E
    vdim = vdim or E
    mha = torch.nn.MultiheadAttention(E, H, bias=bias, kdim=kdim, vdim=vdim,
                                      batch_first=True)
    randomize_biases(mha)
    sd32 = {k: v.detach().clone() for k, v in mha.state_dict().items()}
    xq = torch.randn(B, Lq, E)
    if self_attn:
        xk = xv = xq
    else:
        xk = torch.randn(B, Lk, kdim)
        xv = torch.randn(B, Lk, vdim)
    kpm_t = kpm(B, Lk) if kpm else None
    mask_t = mask(B, H, Lq, Lk) if mask else None
    slopes, softcap = float32_variants(H, alibi, softcap)
    if rotary is not None:
        rotary = dict(rotary)
        rot = dict(rotary)
        rot.setdefault("query_offset", Lk - Lq)
    else:
        rot = None
    if causal or window is not None or slopes is not None:
        assert mask_t is None
        vb, va = variant_masks(H, Lq, Lk, causal, causal_align, window,
                               slopes)
        if va is None:
            torch_mask = vb
        else:
            va = va.expand(B, H, Lq, Lk)
            if vb is not None:
                va = va.masked_fill(vb, float("-inf"))
            torch_mask = va.reshape(B * H, Lq, Lk).to(torch.float32)
    else:
        torch_mask = mask_t
    textbook_only = softcap is not None or rotary is not None

    # torch, float64 from the float32 values.  The module stays in training
    # mode (dropout 0) so 1.13's fused inference fast path is never taken.
    mha64 = mha.double()
    q64, k64, v64 = xq.double(), xk.double(), xv.double()
    if self_attn:
        k64 = v64 = q64
    tm = torch_mask
    if tm is not None and tm.dtype != torch.bool:
        tm = tm.double()
    with torch.no_grad():
        out, w = mha64(q64, k64, v64, key_padding_mask=kpm_t, attn_mask=tm,
                       need_weights=need_weights, average_attn_weights=average)

    # textbook check
    sd64 = {k: v.double() for k, v in sd32.items()}
    blocked = None
    addmask = None
    if torch_mask is not None:
        m4 = torch_mask
        if m4.dim() == 3:
            m4 = m4.view(B, H, Lq, Lk)
        if m4.dtype == torch.bool:
            blocked = m4
        else:
            addmask = m4.double()
    if kpm_t is not None:
        kb = kpm_t.view(B, 1, 1, Lk)
        blocked = kb if blocked is None else (blocked | kb)
    tout, tw, empty = textbook_mha(sd64, E, H, q64, k64, v64, blocked,
                                   addmask, bias, softcap, rot)
    if textbook_only:  # torch's module has no softcap or RoPE
        out, w = tout, (tw.mean(dim=1) if average else tw)
    row_ok = ~empty.any(dim=1)  # [B, Lq]: rows valid in every head
    has_empty = bool(empty.any())
    torch_out_ok = out[row_ok]
    if not torch.allclose(torch_out_ok, tout[row_ok], rtol=TOL, atol=TOL):
        sys.exit("%s: torch and textbook outputs differ" % name)
    if need_weights:
        tw_mode = tw.mean(dim=1) if average else tw
        if average:
            wm = row_ok
            ok = torch.allclose(w[wm], tw_mode[wm], rtol=TOL, atol=TOL)
        else:
            full = ~empty
            ok = torch.allclose(w[full], tw_mode[full], rtol=TOL, atol=TOL)
        if not ok:
            sys.exit("%s: torch and textbook weights differ" % name)
    if has_empty:
        if not textbook_only and not torch.isnan(out[~row_ok]).all():
            sys.exit("%s: expected torch 1.13 NaN rows" % name)
        out = tout
        if need_weights:
            w = tw.mean(dim=1) if average else tw
    elif torch.isnan(out).any():
        sys.exit("%s: unexpected NaN" % name)

    case = {"name": name, "kind": "mha", "torch_version": torch.__version__,
            "embed_dim": E, "num_heads": H, "kdim": kdim, "vdim": vdim,
            "bias": bias, "batch": B, "lq": Lq, "lk": Lk,
            "self_attention": self_attn, "causal": causal,
            "need_weights": need_weights,
            "average_attn_weights": average}
    notes = []
    if note:
        notes.append(note)
    case["query"] = tensor32(xq)
    if not self_attn:
        case["key"] = tensor32(xk)
        case["value"] = tensor32(xv)
    case["state_dict"] = {k: tensor32(v) for k, v in sd32.items()}
    if kpm_t is not None:
        case["key_padding_mask"] = mask_json(kpm_t)
    if mask_t is not None:
        if mask_kind == "3d":
            case["attn_mask"] = mask_json(
                mask_t.view(B, H, Lq, Lk), torch_shape=list(mask_t.shape))
            notes.append("attn_mask was given to torch as [B*H, Lq, Lk] "
                         "(batch-major: index b*H + h) and is stored "
                         "reshaped to [B, H, Lq, Lk], the engine's layout")
        else:
            case["attn_mask"] = mask_json(mask_t)
    plain_causal = causal and window is None and slopes is None and \
        causal_align is None
    if plain_causal:
        case["torch_attn_mask"] = mask_json(torch_mask)
        notes.append("torch got torch_attn_mask (bool, True = blocked, "
                     "j > i + (Lk - Lq)); the engine gets causal = true and "
                     "no attn_mask")
    elif causal or window is not None or slopes is not None:
        if torch_mask.dim() == 3:
            case["torch_attn_mask"] = mask_json(
                torch_mask.view(B, H, Lq, Lk),
                torch_shape=list(torch_mask.shape))
        else:
            case["torch_attn_mask"] = mask_json(torch_mask)
        notes.append("torch got torch_attn_mask (stored as [B, H, Lq, Lk] "
                     "when torch had [B*H, Lq, Lk]), the explicit mask of "
                     "the case's causal alignment, window and ALiBi bias; "
                     "the engine gets those settings and no attn_mask")
    variant_fields(case, H, causal_align, window, slopes, alibi == "standard",
                   softcap, rotary)
    if textbook_only:
        notes.append("softcap / rotary: nn.MultiheadAttention has neither, so "
                     "the golden output is the textbook float64 computation "
                     "in torch from the module's state_dict (explicit RoPE "
                     "on the projected heads, tanh on the scaled scores)")
    if has_empty:
        notes.append("query rows with every key blocked: torch 1.13 gives "
                     "NaN; recorded here is the engine contract (attention "
                     "output 0, so the MHA output row is out_proj.bias, and "
                     "weights 0), computed by the textbook float64 code; "
                     "other rows match torch")
    if notes:
        case["note"] = "; ".join(notes)
    case["attn_output"] = tensor64(out)
    if need_weights:
        case["attn_weights"] = tensor64(w)
    return case


# ---- textbook sdpa cases (1.13 has no F.scaled_dot_product_attention) --------

def sdpa_case(name, seed, B, H, Hkv, Lq, Lk, Dk, Dv, scale=None, causal=False,
              kpm=None, mask=None, need_weights=True, average=False,
              note=None, causal_align=None, window=None, alibi=None,
              softcap=None, rotary=None):
    """mask: function -> tensor [mb, mh, Lq, Lk], bool (True = blocked, the
    engine's polarity) or float (added).
    The variants: causal_align "top_left" (with causal), window (left,
    right), alibi ("standard" or a list of H slopes), softcap c, rotary
    {"base", "dims", "interleaved"[, "query_offset"]}: built here as
    explicit masks, biases, tanh and rotations in float64 torch."""
    torch.manual_seed(seed)
    q = torch.randn(B, H, Lq, Dk)
    k = torch.randn(B, Hkv, Lk, Dk)
    v = torch.randn(B, Hkv, Lk, Dv)
    kpm_t = kpm(B, Lk) if kpm else None
    mask_t = mask() if mask else None
    if scale is not None:
        scale = float(np.float32(scale))
    g = H // Hkv
    q64, k64 = q.double(), k.double()
    if rotary is not None:
        rotary = dict(rotary)
        qoff = rotary.get("query_offset", Lk - Lq)
        q64 = rope(q64, qoff, rotary["dims"], rotary["base"],
                   rotary["interleaved"])
        k64 = rope(k64, 0, rotary["dims"], rotary["base"],
                   rotary["interleaved"])
    k64 = k64.repeat_interleave(g, dim=1)
    v64 = v.double().repeat_interleave(g, dim=1)
    slopes, softcap = float32_variants(H, alibi, softcap)
    blocked, addmask = variant_masks(H, Lq, Lk, causal, causal_align, window,
                                     slopes)
    if mask_t is not None:
        if mask_t.dtype == torch.bool:
            blocked = mask_t if blocked is None else (blocked | mask_t)
        else:
            addmask = (mask_t.double() if addmask is None
                       else addmask + mask_t.double())
    if kpm_t is not None:
        kb = kpm_t.view(B, 1, 1, Lk)
        blocked = kb if blocked is None else (blocked | kb)
    sc = scale if scale is not None else 1.0 / math.sqrt(Dk)
    out, w, empty = attend(q64, k64, v64, sc, blocked, addmask, softcap)

    case = {"name": name, "kind": "sdpa", "batch": B, "num_heads": H,
            "num_kv_heads": Hkv, "lq": Lq, "lk": Lk, "dk": Dk, "dv": Dv,
            "scale": scale, "causal": causal,
            "need_weights": need_weights, "average_attn_weights": average}
    variant_fields(case, H, causal_align, window, slopes, alibi == "standard",
                   softcap, rotary)
    vb, va = variant_masks(H, Lq, Lk, causal, causal_align, window, slopes)
    if (window is not None or slopes is not None or causal_align) and \
            mask_t is None:
        if va is None:
            case["torch_attn_mask"] = mask_json(vb)
        else:
            if vb is not None:
                va = va.masked_fill(vb, float("-inf"))
            case["torch_attn_mask"] = mask_json(va.to(torch.float32))
    notes = ["textbook float64 softmax(Q K^T * scale + mask) V "
             "(torch 1.13 has no scaled_dot_product_attention); query head h "
             "reads key/value head h / (H / Hkv); bool masks are "
             "True = blocked (engine polarity, opposite of "
             "F.scaled_dot_product_attention)"]
    if note:
        notes.append(note)
    if "torch_attn_mask" in case:
        notes.append("torch_attn_mask: the explicit mask of the case's "
                     "causal alignment, window and ALiBi bias (bool True = "
                     "blocked, or float [1, H, Lq, Lk] with -inf), which "
                     "the golden output was computed with")
    if softcap is not None or rotary is not None:
        notes.append("softcap as c * tanh(s / c) on the scaled scores and "
                     "RoPE as explicit rotations of q and k, in float64")
    if bool(empty.any()):
        notes.append("some query rows have every key blocked: output 0 and "
                     "weights 0 (engine contract)")
    case["note"] = "; ".join(notes)
    case["q"] = tensor32(q)
    case["k"] = tensor32(k)
    case["v"] = tensor32(v)
    if kpm_t is not None:
        case["key_padding_mask"] = mask_json(kpm_t)
    if mask_t is not None:
        case["attn_mask"] = mask_json(mask_t)
    case["attn_output"] = tensor64(out)
    if need_weights:
        case["attn_weights"] = tensor64(w.mean(dim=1) if average else w)
    return case


# ---- the case list -----------------------------------------------------------

def pad_suffix(lengths):
    """key_padding_mask builder: batch b keeps its first lengths[b] keys."""
    def f(B, Lk):
        m = torch.zeros(B, Lk, dtype=torch.bool)
        for b in range(B):
            m[b, lengths[b]:] = True
        return m
    return f


def rand_bool_mask(shape, p=0.35):
    """Random True = blocked mask with at least one open key per row."""
    def f(*_):
        m = torch.rand(*shape) < p
        flat = m.view(-1, shape[-1])
        for r in range(flat.shape[0]):
            if flat[r].all():
                flat[r, r % shape[-1]] = False
        return m
    return f


def rand_float_mask(shape):
    """Float additive mask: random values with some -inf, never a full row."""
    def f(*_):
        m = torch.randn(*shape) * 0.75
        blk = torch.rand(*shape) < 0.3
        flat = blk.view(-1, shape[-1])
        for r in range(flat.shape[0]):
            if flat[r].all():
                flat[r, 0] = False
        return m.masked_fill(blk, float("-inf"))
    return f


def full_row_mask(Lq, Lk, row):
    def f(*_):
        m = torch.zeros(Lq, Lk, dtype=torch.bool)
        m[0, Lk - 1] = True
        m[row, :] = True
        return m
    return f


def cases():
    c = []
    c.append(mha_case("mha_self_bias", 101, E=16, H=4, B=2, Lq=5,
                      self_attn=True))
    c.append(mha_case("mha_self_nobias", 102, E=12, H=3, B=1, Lq=6,
                      self_attn=True, bias=False, need_weights=False))
    c.append(mha_case("mha_cross_kdim_vdim", 103, E=16, H=2, B=2, Lq=3, Lk=7,
                      kdim=10, vdim=6, average=False))
    c.append(mha_case("mha_key_padding_mask", 104, E=8, H=2, B=2, Lq=6,
                      self_attn=True, kpm=pad_suffix([6, 4])))
    c.append(mha_case("mha_bool_mask_2d", 105, E=16, H=4, B=2, Lq=4, Lk=6,
                      mask=rand_bool_mask((4, 6)), mask_kind="2d",
                      average=False))
    c.append(mha_case("mha_bool_mask_3d", 106, E=8, H=2, B=2, Lq=5, Lk=5,
                      mask=rand_bool_mask((2 * 2, 5, 5)), mask_kind="3d",
                      average=False))
    c.append(mha_case("mha_float_mask", 107, E=12, H=2, B=2, Lq=4, Lk=6,
                      mask=rand_float_mask((4, 6)), mask_kind="2d"))
    c.append(mha_case("mha_weights_per_head", 108, E=32, H=8, B=1, Lq=7,
                      self_attn=True, average=False))
    c.append(mha_case("mha_no_weights", 109, E=32, H=4, B=2, Lq=5, Lk=3,
                      need_weights=False))
    c.append(mha_case("mha_lq_ne_lk", 110, E=16, H=4, B=2, Lq=2, Lk=7,
                      kdim=12, vdim=12))
    c.append(mha_case("mha_causal_self", 111, E=16, H=4, B=2, Lq=6,
                      self_attn=True, causal=True, average=False))
    c.append(mha_case("mha_causal_cross", 112, E=8, H=2, B=1, Lq=3, Lk=6,
                      causal=True))
    c.append(mha_case("mha_kpm_float_mask", 113, E=16, H=2, B=2, Lq=4, Lk=5,
                      kpm=pad_suffix([3, 5]), mask=rand_float_mask((4, 5)),
                      mask_kind="2d", average=False))
    c.append(mha_case("mha_fully_masked_row", 114, E=8, H=2, B=2, Lq=4, Lk=5,
                      mask=full_row_mask(4, 5, 2), mask_kind="2d"))
    c.append(sdpa_case("sdpa_gqa", 201, B=2, H=4, Hkv=2, Lq=3, Lk=5, Dk=8,
                       Dv=8))
    c.append(sdpa_case("sdpa_dk_ne_dv_scale", 202, B=1, H=4, Hkv=2, Lq=4, Lk=6,
                       Dk=6, Dv=3, scale=0.3,
                       mask=rand_bool_mask((1, 1, 4, 6)), average=True))
    c.append(sdpa_case("sdpa_gqa_float_mask_kpm", 203, B=2, H=4, Hkv=1, Lq=5,
                       Lk=7, Dk=4, Dv=5, mask=rand_float_mask((1, 4, 5, 7)),
                       kpm=pad_suffix([7, 5])))
    c.append(sdpa_case("sdpa_causal_lq_gt_lk", 204, B=2, H=4, Hkv=2, Lq=5,
                       Lk=3, Dk=8, Dv=4, scale=0.5, causal=True,
                       note="bottom-right causal with Lq > Lk: query rows "
                       "0 and 1 see no key"))
    c.append(sdpa_case("sdpa_no_weights", 205, B=1, H=2, Hkv=2, Lq=7, Lk=7,
                       Dk=16, Dv=16, causal=True, need_weights=False))
    # the attention variants (issue 34)
    c.append(sdpa_case("sdpa_top_left_causal", 301, B=2, H=4, Hkv=2, Lq=6,
                       Lk=4, Dk=8, Dv=4, causal=True, causal_align="top_left",
                       note="top-left causal with Lq > Lk: query i sees keys "
                       "j <= i"))
    c.append(sdpa_case("sdpa_window", 302, B=2, H=2, Hkv=1, Lq=9, Lk=12,
                       Dk=8, Dv=8, window=(3, 1), kpm=pad_suffix([12, 10]),
                       average=True))
    c.append(sdpa_case("sdpa_window_causal_alibi", 303, B=2, H=4, Hkv=4,
                       Lq=8, Lk=8, Dk=8, Dv=8, causal=True, window=(3, 0),
                       alibi="standard"))
    c.append(sdpa_case("sdpa_alibi_6_heads", 304, B=1, H=6, Hkv=3, Lq=5,
                       Lk=9, Dk=4, Dv=4, alibi="standard", scale=0.5))
    c.append(sdpa_case("sdpa_softcap", 305, B=1, H=2, Hkv=2, Lq=5, Lk=7,
                       Dk=8, Dv=6, scale=1.0, softcap=1.5,
                       mask=rand_float_mask((1, 1, 5, 7))))
    c.append(sdpa_case("sdpa_rope_neox", 306, B=1, H=2, Hkv=1, Lq=4, Lk=6,
                       Dk=8, Dv=8,
                       rotary={"base": 10000.0, "dims": 8,
                               "interleaved": False}))
    c.append(sdpa_case("sdpa_rope_gptj_partial", 307, B=2, H=2, Hkv=2, Lq=5,
                       Lk=5, Dk=12, Dv=4, causal=True, causal_align="top_left",
                       rotary={"base": 500.0, "dims": 8, "interleaved": True,
                               "query_offset": 3}))
    c.append(sdpa_case("sdpa_all_variants", 308, B=2, H=4, Hkv=2, Lq=7,
                       Lk=10, Dk=8, Dv=8, causal=True, window=(4, 0),
                       alibi=[0.5, 0.25, 0.75, 0.1], softcap=2.0,
                       kpm=pad_suffix([10, 8]),
                       rotary={"base": 10000.0, "dims": 6,
                               "interleaved": False}))
    c.append(sdpa_case("sdpa_window_empty_rows", 309, B=1, H=2, Hkv=2, Lq=6,
                       Lk=3, Dk=4, Dv=4, window=(0, 0),
                       note="window [0, 0] with Lq > Lk: query i sees only "
                       "key i - 3, so rows 0 to 2 see no key"))
    c.append(mha_case("mha_window_alibi", 401, E=16, H=4, B=2, Lq=6,
                      self_attn=True, causal=True, window=(2, 0),
                      alibi="standard", average=False))
    c.append(mha_case("mha_top_left_cross", 402, E=8, H=2, B=1, Lq=5, Lk=3,
                      causal=True, causal_align="top_left"))
    c.append(mha_case("mha_softcap_rope", 403, E=16, H=2, B=2, Lq=5,
                      self_attn=True, softcap=3.0, average=False,
                      rotary={"base": 10000.0, "dims": 8,
                              "interleaved": False}))
    c.append(mha_case("mha_rope_cross_gptj", 404, E=12, H=3, B=1, Lq=3, Lk=6,
                      kdim=10, vdim=10, causal=True, window=(1, 0),
                      rotary={"base": 10000.0, "dims": 2,
                              "interleaved": True}))
    return c


def main():
    torch.set_num_threads(1)
    written = []
    for case in cases():
        written.append(write_case(case))
    for p in written:
        print(os.path.relpath(p))
    print("%d cases" % len(written))


if __name__ == "__main__":
    main()
