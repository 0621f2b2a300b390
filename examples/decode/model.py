"""A small GPT-style decoder whose attention runs in a pluggable backend.

The model: byte-level tokens (vocabulary 256), token embeddings, an output
head, N pre-norm blocks of RMSNorm -> grouped-query attention with
rotary positions -> RMSNorm -> GELU MLP, a final RMSNorm.  Defaults: 3
layers, d_model 64, 4 query heads over 2 key/value heads of 16 dims.

Rotary positions follow attnd's convention (docs/api.md, "Attention
variants"): NeoX halves, pairs (x_t, x_{t+D/2}) turned by
pos * base^(-2t/D), base 10000, over the whole head, at each token's
absolute position.  attnd applies rotary itself, so the model hands the
backends unrotated queries and keys.

Everything except attention (embeddings, projections, norms, MLP, head)
runs here in PyTorch fp32.  Attention goes through a backend:

  TorchBackend  the reference: the cache kept here, causal attention over
                it computed in float64 (rounded to fp32 at the end), with
                rotary at the absolute positions.
  AttndBackend  attnd sessions (clients/python/attnd_client.py): one
                session a sequence, prefill in one attend a layer, decode
                steps of many sequences in one batched kv_attention call.

Both backends take the same calls: new(name), fork(seq, name),
truncate(seq, length), attend(seqs, layer, q, k, v) with q [B, t, H, D] and
k, v [B, t, Hkv, D] (unrotated), returning [B, t, H, D]; length(seq);
exists(seq); and free(seq).  model.forward(tokens [B, t], seqs, backend)
appends the t tokens to every layer of each sequence and returns the
logits [B, t, 256].

Training (train(), a few seconds on the repository's own Markdown) uses a
plain differentiable causal attention in fp32 over whole windows.
"""

import math
import os
import time

import numpy as np
import torch
import torch.nn.functional as F

try:  # only AttndBackend needs it (generate.py puts clients/python on the path)
    import attnd_client
except ImportError:  # pragma: no cover
    attnd_client = None

VOCAB = 256
ROTARY_BASE = 10000.0


class Config:
    def __init__(self, layers=3, d_model=64, num_heads=4, num_kv_heads=2,
                 mlp=4, seed=0):
        assert d_model % num_heads == 0 and num_heads % num_kv_heads == 0
        self.layers = layers
        self.d_model = d_model
        self.num_heads = num_heads
        self.num_kv_heads = num_kv_heads
        self.head_dim = d_model // num_heads
        self.mlp = mlp
        self.seed = seed


class RMSNorm(torch.nn.Module):
    def __init__(self, d, eps=1e-5):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class Block(torch.nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        d, hd = c.d_model, c.head_dim
        self.norm1 = RMSNorm(d)
        self.wq = torch.nn.Linear(d, c.num_heads * hd, bias=False)
        self.wk = torch.nn.Linear(d, c.num_kv_heads * hd, bias=False)
        self.wv = torch.nn.Linear(d, c.num_kv_heads * hd, bias=False)
        self.wo = torch.nn.Linear(c.num_heads * hd, d, bias=False)
        self.norm2 = RMSNorm(d)
        self.up = torch.nn.Linear(d, c.mlp * d)
        self.down = torch.nn.Linear(c.mlp * d, d)

    def qkv(self, x):
        B, t, _ = x.shape
        c = self.c
        h = self.norm1(x)
        q = self.wq(h).view(B, t, c.num_heads, c.head_dim)
        k = self.wk(h).view(B, t, c.num_kv_heads, c.head_dim)
        v = self.wv(h).view(B, t, c.num_kv_heads, c.head_dim)
        return q, k, v

    def rest(self, x, att):
        B, t = x.shape[:2]
        x = x + self.wo(att.reshape(B, t, -1))
        return x + self.down(F.gelu(self.up(self.norm2(x))))


class Decoder(torch.nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        g = torch.Generator().manual_seed(c.seed)
        self.embed = torch.nn.Embedding(VOCAB, c.d_model)
        self.blocks = torch.nn.ModuleList(Block(c) for _ in range(c.layers))
        self.norm = RMSNorm(c.d_model)
        self.head = torch.nn.Linear(c.d_model, VOCAB, bias=False)
        # seeded initialisation, independent of torch's global generator
        with torch.no_grad():
            for name, p in self.named_parameters():
                if name.endswith("norm1.weight") or name.endswith("norm2.weight") \
                        or name == "norm.weight":
                    continue
                if p.dim() == 1:
                    p.zero_()
                elif name == "embed.weight":
                    p.copy_(torch.randn(p.shape, generator=g))
                else:
                    std = 1.0 / math.sqrt(p.shape[1])
                    p.copy_(torch.randn(p.shape, generator=g) * std)

    def logits(self, x):
        return self.head(self.norm(x))

    @torch.no_grad()
    def forward(self, tokens, seqs, backend):
        """tokens [B, t] (int64): append them to every layer of seqs (one a
        row, each at its own length) and return the logits [B, t, 256]."""
        x = self.embed(tokens)
        for i, blk in enumerate(self.blocks):
            q, k, v = blk.qkv(x)
            att = backend.attend(seqs, i, q, k, v)
            x = blk.rest(x, att)
        return self.logits(x)

    def train_forward(self, tokens):
        """Whole windows, differentiable, fp32: for training only."""
        B, t = tokens.shape
        c = self.c
        x = self.embed(tokens)
        pos = torch.arange(t)
        cos, sin = rotary_cos_sin(pos, c.head_dim, torch.float32)
        mask = torch.ones(t, t, dtype=torch.bool).tril()
        rep = c.num_heads // c.num_kv_heads
        for blk in self.blocks:
            q, k, v = blk.qkv(x)
            q = rotate(q, cos, sin).transpose(1, 2)
            k = rotate(k, cos, sin).repeat_interleave(rep, dim=2).transpose(1, 2)
            v = v.repeat_interleave(rep, dim=2).transpose(1, 2)
            s = q @ k.transpose(-1, -2) / math.sqrt(c.head_dim)
            s = s.masked_fill(~mask, float("-inf"))
            att = (torch.softmax(s, -1) @ v).transpose(1, 2)
            x = blk.rest(x, att)
        return self.logits(x)


def rotary_cos_sin(pos, head_dim, dtype):
    """cos, sin [len(pos), 1, head_dim/2] at the absolute positions pos
    (attnd's: theta = pos * base^(-2t/D), t = 0..D/2-1)."""
    half = head_dim // 2
    inv = ROTARY_BASE ** (-2.0 * torch.arange(half, dtype=torch.float64) / head_dim)
    ang = pos.to(torch.float64)[:, None] * inv[None, :]
    return torch.cos(ang).to(dtype)[:, None, :], torch.sin(ang).to(dtype)[:, None, :]


def rotate(x, cos, sin):
    """NeoX halves: (a, b) = (x[:D/2], x[D/2:]) -> (a cos - b sin, b cos + a sin).
    x [..., t, heads, D]."""
    half = x.shape[-1] // 2
    a, b = x[..., :half], x[..., half:]
    return torch.cat([a * cos - b * sin, b * cos + a * sin], dim=-1)


# ---------------------------------------------------------------- backends

class TorchBackend:
    """The reference: each sequence's unrotated keys and values per layer,
    held here; attend appends and computes causal attention in float64 with
    rotary at the absolute positions, rounded to fp32."""

    name = "pytorch"

    def __init__(self, cfg):
        self.c = cfg
        self.seqs = {}

    def new(self, name):
        self.seqs[name] = [(torch.zeros(0, self.c.num_kv_heads, self.c.head_dim,
                                        dtype=torch.float64),) * 2
                           for _ in range(self.c.layers)]
        return name

    def fork(self, seq, name):
        self.seqs[name] = list(self.seqs[seq])  # tensors are never changed in place
        return name

    def truncate(self, seq, length):
        self.seqs[seq] = [(k[:length], v[:length]) for k, v in self.seqs[seq]]

    def length(self, seq, layer=0):
        return self.seqs[seq][layer][0].shape[0]

    def free(self, seq):
        del self.seqs[seq]

    def exists(self, seq):
        return seq in self.seqs

    def attend(self, seqs, layer, q, k, v):
        c = self.c
        rep = c.num_heads // c.num_kv_heads
        out = torch.empty_like(q)
        for b, s in enumerate(seqs):
            K, V = self.seqs[s][layer]
            n, t = K.shape[0], q.shape[1]
            K = torch.cat([K, k[b].double()])
            V = torch.cat([V, v[b].double()])
            self.seqs[s][layer] = (K, V)
            L = n + t
            cos, sin = rotary_cos_sin(torch.arange(L), c.head_dim, torch.float64)
            kr = rotate(K, cos, sin).repeat_interleave(rep, dim=1)      # [L, H, D]
            qr = rotate(q[b].double(), cos[n:], sin[n:])                # [t, H, D]
            s_ = torch.einsum("thd,lhd->htl", qr, kr) / math.sqrt(c.head_dim)
            # token i at absolute position n + i sees j <= n + i
            mask = torch.arange(L)[None, :] <= (n + torch.arange(t))[:, None]
            s_ = s_.masked_fill(~mask[None], float("-inf"))
            p = torch.softmax(s_, -1)
            o = torch.einsum("htl,lhd->thd", p, V.repeat_interleave(rep, dim=1))
            out[b] = o.to(q.dtype)
        return out


class AttndBackend:
    """attnd sessions: one a sequence, created with the model's shape
    (layers, 4 query heads over 2 kv heads, rotary base 10000 applied by
    attnd).  A batch of one is a Session.attend (a prefill, or a
    speculative verify of several tokens); a larger batch is one
    Client.decode call a layer (kv_attention, binary)."""

    name = "attnd"

    def __init__(self, cfg, client, kv_dtype="fp32", prefix="decode"):
        self.c = cfg
        self.client = client
        self.kv_dtype = kv_dtype
        self.prefix = prefix
        self.sessions = {}

    def _id(self, name):
        return "%s:%s" % (self.prefix, name)

    def new(self, name):
        c = self.c
        s = self.client.session(self._id(name), c.num_heads, c.head_dim,
                                layers=c.layers, num_kv_heads=c.num_kv_heads,
                                kv_dtype=self.kv_dtype,
                                rotary={"base": ROTARY_BASE})
        if any(s.length):  # a leftover of an earlier run with this id
            s.truncate(0)
        self.sessions[name] = s
        return name

    def fork(self, seq, name):
        self.sessions[name] = self.sessions[seq].fork(self._id(name))
        return name

    def truncate(self, seq, length):
        self.sessions[seq].truncate(length)

    def length(self, seq, layer=0):
        return self.sessions[seq].length[layer]

    def free(self, seq):
        self.sessions.pop(seq).delete()

    def exists(self, seq):
        """Whether attnd still holds the session (a restarted or lost
        replica, an idle expiry: 404); refreshes its tracked lengths."""
        try:
            self.sessions[seq].refresh()
            return True
        except attnd_client.AttndError as e:
            if e.status != 404:
                raise
            return False

    def attend(self, seqs, layer, q, k, v):
        qn, kn, vn = (a.numpy() for a in (q, k, v))
        if len(seqs) == 1:
            out, _ = self.sessions[seqs[0]].attend(qn[0], kn[0], vn[0], layer=layer)
            out = np.asarray(out, dtype=np.float32)[None]
        else:
            out, _ = self.client.decode([self.sessions[s] for s in seqs],
                                        layer, qn, kn, vn)
        return torch.from_numpy(np.ascontiguousarray(out, dtype=np.float32))


# ---------------------------------------------------------------- training

def corpus(root):
    """The repository's own Markdown: README.md and docs/*.md, as bytes."""
    names = ["README.md"] + sorted(
        os.path.join("docs", f) for f in os.listdir(os.path.join(root, "docs"))
        if f.endswith(".md"))
    data = b"\n".join(open(os.path.join(root, n), "rb").read() for n in names)
    return torch.tensor(np.frombuffer(data, dtype=np.uint8).astype(np.int64))


def train(model, root, seconds, window=64, batch=16, lr=3e-3, seed=0, log=None):
    """Next-byte prediction on the repository's Markdown for `seconds` of
    wall time (seeded batches; how many steps fit depends on the machine).
    Returns (steps, last loss)."""
    if seconds <= 0:
        return 0, None
    data = corpus(root)
    g = torch.Generator().manual_seed(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    end = time.monotonic() + seconds
    steps, loss = 0, None
    model.train()
    while time.monotonic() < end:
        ix = torch.randint(0, len(data) - window - 1, (batch,), generator=g)
        x = torch.stack([data[i:i + window] for i in ix])
        y = torch.stack([data[i + 1:i + window + 1] for i in ix])
        logits = model.train_forward(x)
        loss = F.cross_entropy(logits.reshape(-1, VOCAB), y.reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        steps += 1
        if log and steps % 100 == 0:
            log("train: step %d, loss %.3f" % (steps, loss.item()))
    model.eval()
    return steps, (loss.item() if loss is not None else None)
