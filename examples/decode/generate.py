#!/usr/bin/python3
"""Greedy generation with a small decoder whose attention runs in attnd.

  python3 examples/decode/generate.py --prompt "attnd is"       # attnd on :8080
  python3 examples/decode/generate.py --prompt "a" --prompt "b" --check
  python3 examples/decode/generate.py --batch 8 --kv-dtype bf16 --check
  python3 examples/decode/generate.py --demo-speculative --demo-fork --check

The model (model.py: 3 layers, d_model 64, 4 query heads over 2 key/value
heads, rotary, byte tokens) is trained here for --train-seconds on the
repository's README.md and docs/*.md (0: its seeded random weights).
Embeddings, projections and the MLP run in PyTorch; attention in every
layer and step runs in attnd sessions, one a prompt: the prompt's prefill
in one attend a layer, then one token a step, every prompt of the batch in
one kv_attention call a layer (Client.decode).

--check runs the same generation entirely in PyTorch (model.TorchBackend:
float64 attention over a cache held here) and compares the tokens: with
fp32 sessions they must be identical (exit 1 otherwise, naming the first
difference and the reference's logit margin there); with bf16 or fp16
sessions it says how many agree.

--demo-speculative: speculative decoding with a cheap draft (prompt
lookup, then a bigram model of the repository's Markdown: --draft tokens):
each step sends the pending token and the draft in one attend, keeps the
longest prefix the model agrees with plus its own next token, and rolls
the session back with truncate.  The tokens are plain greedy's.
--demo-fork: prefill a prompt once, fork the session, and continue the
two branches (the top two next tokens) together, batched; each branch
checked against PyTorch run from scratch.

Needs numpy and torch (Debian: python3-numpy, python3-torch), and
clients/python/attnd_client.py (found relative to this file).
"""

import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "clients", "python"))
sys.path.insert(0, HERE)

import numpy as np  # noqa: E402
import torch  # noqa: E402

import attnd_client  # noqa: E402
import model as M  # noqa: E402

DEFAULT_PROMPTS = [
    "attnd is ",
    "The session ",
    "## Sessions\n\nA decoder ",
    "curl -s localhost:8080/v1/",
    "Keys and values live in ",
    "The engine ",
    "A step that ",
    "Rotary positions ",
]


def printable(b):
    s = bytes(b).decode("utf-8", "replace")
    return "".join(ch if ch == "\n" or ch.isprintable() else "\ufffd" for ch in s)


def margin(row):
    """top-1 logit minus top-2 of a [V] row."""
    top = torch.topk(row, 2).values
    return (top[0] - top[1]).item()


class Run:
    """One generation's tokens, per-token logit margins and timings."""

    def __init__(self, name):
        self.name = name
        self.tokens = []     # per prompt: generated token ids
        self.margins = []    # per prompt: top-1 minus top-2 logit at each token
        self.prefill_s = 0.0
        self.decode_s = 0.0
        self.prefill_tokens = 0
        self.decode_tokens = 0
        self.steps = 0       # model calls after the prefill
        self.recovered = 0   # sessions re-created after a 404


def recover(model, backend, seqs, ctxs):
    """After a 404 (attnd no longer holds a session: its replica restarted
    or died, or it expired): re-create each lost session with the same id
    and shape and prefill it again with the tokens it had; truncate the
    others back to their tokens (a failed step may have appended to the
    layers before the one that failed).  Returns the lost ones."""
    lost = []
    for s, ctx in zip(seqs, ctxs):
        if backend.exists(s):
            backend.truncate(s, len(ctx))
        else:
            backend.new(s)
            model(torch.tensor([ctx]), [s], backend)
            lost.append(s)
    return lost


def generate(model, backend, prompts, n_tokens, tag, lose_at=None):
    """Greedy: prefill each prompt alone (one attend a layer), then decode
    all of them together, one token a step.  lose_at: before that step,
    delete the first session behind the model's back (a replica lost) to
    show the recovery.  Returns a Run."""
    run = Run(backend.name)
    seqs, ctxs = [], []
    try:
        nxt = []
        t0 = time.perf_counter()
        for i, p in enumerate(prompts):
            s = backend.new("%s-%d" % (tag, i))
            seqs.append(s)
            ctxs.append(list(p))
            logits = model(torch.tensor([list(p)]), [s], backend)[0, -1]
            nxt.append(int(torch.argmax(logits)))
            run.tokens.append([nxt[-1]])
            run.margins.append([margin(logits)])
            run.prefill_tokens += len(p)
        run.prefill_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        for step in range(n_tokens - 1):
            if step == lose_at:
                backend.sessions[seqs[0]].delete()
            try:
                logits = model(torch.tensor(nxt)[:, None], seqs, backend)[:, -1]
            except attnd_client.AttndError as e:
                if e.status != 404:
                    raise
                lost = recover(model, backend, seqs, ctxs)
                print("step %d: %s; re-created and re-prefilled %s"
                      % (step, e.message, ", ".join("%s (%d tokens)" % (
                          s, len(ctxs[seqs.index(s)])) for s in lost)))
                run.recovered += len(lost)
                logits = model(torch.tensor(nxt)[:, None], seqs, backend)[:, -1]
            for b, x in enumerate(nxt):
                ctxs[b].append(x)
            nxt = [int(x) for x in torch.argmax(logits, -1)]
            for b, x in enumerate(nxt):
                run.tokens[b].append(x)
                run.margins[b].append(margin(logits[b]))
            run.steps += 1
            run.decode_tokens += len(seqs)
        run.decode_s = time.perf_counter() - t0
    finally:
        for s in seqs:
            backend.free(s)
    return run


class Drafter:
    """The draft for speculative decoding, k tokens greedily: prompt lookup
    (the tokens that followed the latest earlier occurrence of the
    context's last 3, 2 or 1 tokens), continued by a bigram model of the
    repository's Markdown (the most frequent next byte).  Cheap and often
    wrong, which is the point: the rollback then happens."""

    def __init__(self):
        data = M.corpus(ROOT).numpy()
        pairs = np.bincount(data[:-1] * M.VOCAB + data[1:], minlength=M.VOCAB ** 2)
        self.next = pairs.reshape(M.VOCAB, M.VOCAB).argmax(1).tolist()

    def draft(self, context, k, ngram=3):
        out = []
        for n in range(min(ngram, len(context) - 1), 0, -1):
            tail = context[-n:]
            for start in range(len(context) - n - 1, -1, -1):
                if context[start:start + n] == tail:
                    out = context[start + n:start + n + k]
                    break
            if out:
                break
        while len(out) < k:
            out.append(self.next[(out or context)[-1]])
        return out


def speculative(model, backend, prompt, n_tokens, k, tag):
    """Greedy tokens by speculative decoding: each step appends the pending
    token and up to k drafted ones in one call, accepts the longest agreeing
    prefix, and truncates the rest away.  Returns (tokens, steps, drafted,
    accepted, truncates)."""
    drafter = Drafter()
    s = backend.new(tag)
    try:
        ctx = list(prompt)
        logits = model(torch.tensor([ctx]), [s], backend)[0, -1]
        pending = int(torch.argmax(logits))
        out = []
        steps = drafted = accepted = truncates = 0
        while len(out) < n_tokens:
            out.append(pending)
            if len(out) == n_tokens:
                break
            draft = drafter.draft(ctx + [pending], k)[:n_tokens - len(out)]
            n = backend.length(s)
            logits = model(torch.tensor([[pending] + draft]), [s], backend)[0]
            preds = [int(x) for x in torch.argmax(logits, -1)]
            m = 0
            while m < len(draft) and preds[m] == draft[m]:
                m += 1
            steps += 1
            drafted += len(draft)
            accepted += m
            ctx += [pending] + draft[:m]
            out += draft[:m]
            if m < len(draft):
                backend.truncate(s, n + 1 + m)   # the rollback
                truncates += 1
            assert backend.length(s) == len(ctx)
            pending = preds[m]
        return out[:n_tokens], steps, drafted, accepted, truncates
    finally:
        backend.free(s)


def fork_branches(model, backend, prompt, n_tokens, tag):
    """Prefill once, fork, continue the top-2 next tokens as two branches
    decoded together.  Returns ([tokens_a, tokens_b])."""
    a = backend.new(tag + "-a")
    seqs = [a]
    try:
        logits = model(torch.tensor([list(prompt)]), [a], backend)[0, -1]
        top2 = [int(x) for x in torch.topk(logits, 2).indices]
        seqs.append(backend.fork(a, tag + "-b"))
        toks = [[top2[0]], [top2[1]]]
        nxt = top2
        for _ in range(n_tokens - 1):
            logits = model(torch.tensor(nxt)[:, None], seqs, backend)[:, -1]
            nxt = [int(x) for x in torch.argmax(logits, -1)]
            for b in range(2):
                toks[b].append(nxt[b])
        return toks
    finally:
        for s in seqs:
            backend.free(s)


def compare(label, got, ref, ref_margins=None, got_margins=None):
    """Prints the agreement; returns True when identical."""
    same = sum(1 for x, y in zip(got, ref) if x == y)
    prefix = 0
    while prefix < min(len(got), len(ref)) and got[prefix] == ref[prefix]:
        prefix += 1
    if got == ref:
        print("  %s: all %d tokens identical to PyTorch" % (label, len(ref)))
        return True
    msg = "  %s: %d of %d tokens agree with PyTorch (first %d identical)" % (
        label, same, len(ref), prefix)
    if prefix < min(len(got), len(ref)):
        msg += "; first difference at token %d: %r here, %r in PyTorch" % (
            prefix, bytes([got[prefix]]), bytes([ref[prefix]]))
        if ref_margins:
            msg += ", PyTorch's top-1 minus top-2 logit there %.3g" % ref_margins[prefix]
        if got_margins:
            msg += " (here %.3g)" % got_margins[prefix]
    print(msg)
    return False


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--prompt", action="append", default=[],
                    help="a prompt (repeat for a batch)")
    ap.add_argument("--batch", type=int, default=0,
                    help="decode this many prompts together (the --prompt ones, "
                         "then built-in ones)")
    ap.add_argument("--url", default="http://127.0.0.1:8080")
    ap.add_argument("--api-key", default=os.environ.get("ATTND_API_KEY"))
    ap.add_argument("--tokens", type=int, default=64, help="tokens to generate")
    ap.add_argument("--kv-dtype", choices=["fp32", "bf16", "fp16"], default="fp32")
    ap.add_argument("--check", action="store_true",
                    help="also run in PyTorch alone; fp32: exit 1 unless identical")
    ap.add_argument("--train-seconds", type=float, default=10.0,
                    help="train on README.md and docs/*.md this long (0: seeded "
                         "random weights)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--layers", type=int, default=3)
    ap.add_argument("--demo-speculative", action="store_true")
    ap.add_argument("--draft", type=int, default=4, help="speculative draft length")
    ap.add_argument("--demo-fork", action="store_true")
    ap.add_argument("--demo-lost", action="store_true",
                    help="delete the first session halfway (as a lost replica "
                         "would) and show the re-create and re-prefill")
    ap.add_argument("--threads", type=int, default=1,
                    help="PyTorch threads while generating (attnd wants the rest)")
    ap.add_argument("--session-prefix", default="decode-%d" % os.getpid(),
                    help="session ids are PREFIX:NAME")
    args = ap.parse_args(argv)

    prompts = list(args.prompt)
    for p in DEFAULT_PROMPTS:
        if len(prompts) >= max(args.batch, 1):
            break
        prompts.append(p)
    while len(prompts) < args.batch:
        prompts.append(DEFAULT_PROMPTS[len(prompts) % len(DEFAULT_PROMPTS)])
    prompts = [p.encode("utf-8") for p in prompts]
    if any(len(p) == 0 for p in prompts):
        ap.error("a prompt may not be empty")
    if args.tokens < 2:
        ap.error("--tokens must be at least 2")

    torch.manual_seed(args.seed)
    cfg = M.Config(layers=args.layers, seed=args.seed)
    model = M.Decoder(cfg)
    if args.train_seconds > 0:
        t0 = time.perf_counter()
        steps, loss = M.train(model, ROOT, args.train_seconds, seed=args.seed)
        print("trained %d steps in %.1f s on README.md and docs/*.md, loss %.3f nats/byte"
              % (steps, time.perf_counter() - t0, loss))
    else:
        print("seeded random weights (seed %d)" % args.seed)
    model.eval()
    torch.set_num_threads(max(args.threads, 1))

    client = attnd_client.Client(args.url, api_key=args.api_key)
    attnd = M.AttndBackend(cfg, client, args.kv_dtype, args.session_prefix)
    ref = M.TorchBackend(cfg)
    exact = args.kv_dtype == "fp32"
    ok = True

    print("model: %d layers, d_model %d, %d query heads over %d kv heads of %d, "
          "rotary base %g; sessions kv_dtype %s at %s"
          % (cfg.layers, cfg.d_model, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim,
             M.ROTARY_BASE, args.kv_dtype, args.url))
    run = generate(model, attnd, prompts, args.tokens, "gen",
                   lose_at=args.tokens // 2 if args.demo_lost else None)
    for p, toks in zip(prompts, run.tokens):
        print("--- %s%s" % (printable(p), printable(toks)))
    total_s = run.prefill_s + run.decode_s
    print("attnd: %d prompt(s), prefill %d tokens in %.3f s; decode %d tokens in "
          "%d steps, %.3f s: %.1f tokens/s (%.2f ms a step of %d layers); "
          "%.1f generated tokens/s overall"
          % (len(prompts), run.prefill_tokens, run.prefill_s, run.decode_tokens,
             run.steps, run.decode_s, run.decode_tokens / max(run.decode_s, 1e-9),
             1000 * run.decode_s / max(run.steps, 1), cfg.layers,
             len(prompts) * args.tokens / max(total_s, 1e-9)))

    refrun = None
    if args.check or args.demo_speculative or args.demo_fork:
        refrun = generate(model, ref, prompts, args.tokens, "gen")
    if args.check:
        print("PyTorch alone: decode %.1f tokens/s" %
              (refrun.decode_tokens / max(refrun.decode_s, 1e-9)))
        same = total = 0
        for i in range(len(prompts)):
            ident = compare("prompt %d" % i, run.tokens[i], refrun.tokens[i],
                            refrun.margins[i], run.margins[i])
            ok &= ident
            same += sum(1 for x, y in zip(run.tokens[i], refrun.tokens[i]) if x == y)
            total += len(refrun.tokens[i])
        print("check (%s): %d of %d tokens agree with PyTorch; PyTorch's smallest "
              "top-1 minus top-2 logit margin %.3g" % (
                  args.kv_dtype, same, total, min(min(m) for m in refrun.margins)))

    if args.demo_speculative:
        t0 = time.perf_counter()
        toks, steps, drafted, accepted, truncs = speculative(
            model, attnd, prompts[0], args.tokens, args.draft, "spec")
        dt = time.perf_counter() - t0
        print("speculative (drafts of %d): %d tokens in %d steps "
              "(%.2f a step), %d of %d drafted tokens accepted, %d truncates, %.3f s"
              % (args.draft, len(toks), steps + 1, len(toks) / (steps + 1),
                 accepted, drafted, truncs, dt))
        ident = compare("speculative", toks, refrun.tokens[0], refrun.margins[0])
        if args.check or exact:
            ok &= ident or not exact

    if args.demo_fork:
        p = prompts[0]
        branches = fork_branches(model, attnd, p, args.tokens, "fork")
        # the reference: each branch from scratch, no fork
        logits = model(torch.tensor([list(p)]), [ref.new("f")], ref)[0, -1]
        ref.free("f")
        top2 = [int(x) for x in torch.topk(logits, 2).indices]
        for b, (name, toks) in enumerate(zip("ab", branches)):
            print("--- fork %s: %s[%s]%s" % (name, printable(p), printable(toks[:1]),
                                             printable(toks[1:])))
            r = generate(model, ref, [p + bytes([top2[b]])], args.tokens - 1, "fb")
            want = ([top2[b]] + r.tokens[0])[:args.tokens]
            ident = compare("fork %s" % name, toks, want, None)
            ok &= ident or not exact

    if not ok:
        print("FAILED: fp32 sessions must give PyTorch's tokens exactly")
        return 1
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except attnd_client.AttndError as e:
        # attnd not running (status 0), a key missing (401), ...
        print("generate.py: %s" % e, file=sys.stderr)
        sys.exit(2)
