#!/usr/bin/env python3
"""An ordinary PyTorch training program: nothing in it knows about kjit.

A small GPT-style language model (token and position embeddings, pre-norm transformer blocks with
layer_norm, softmax attention over 64-wide heads and a GELU MLP, a final layer_norm and a vocabulary
head, cross-entropy loss) trained with AdamW on synthetic sequences drawn from a fixed random Markov
chain, in float32 on one GPU, from one seed. It prints the loss of every step and the time of each
(CUDA events), and with --json writes both:

    python3 examples/training/train.py --steps 200 --json eager.json
    build/bin/kjit run -- python3 examples/training/train.py --steps 200 --json kjit.json
    python3 examples/training/train.py --steps 200 --compile --json compile.json

Under kjit, the calls the shim serves (layer_norm, softmax, log_softmax and their backward, the attention's
small-K batched products) run kjit's verified kernels, forward and backward. examples/training/compare.py
runs all of it and compares the loss curves step by step and the steps per second.
"""
import argparse
import json
import math
import sys
import time


def build(torch, args):
    nn = torch.nn
    F = nn.functional

    class Block(nn.Module):
        def __init__(self, width, heads):
            super().__init__()
            self.heads = heads
            self.ln1 = nn.LayerNorm(width)
            self.qkv = nn.Linear(width, 3 * width)
            self.proj = nn.Linear(width, width)
            self.ln2 = nn.LayerNorm(width)
            self.up = nn.Linear(width, 4 * width)
            self.down = nn.Linear(4 * width, width)

        def forward(self, x):
            b, t, c = x.shape
            h = self.heads
            q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
            # [b * h, t, c / h]: the attention as batched products (aten::bmm) and a softmax (aten::_softmax).
            q = q.view(b, t, h, c // h).transpose(1, 2).reshape(b * h, t, c // h)
            k = k.view(b, t, h, c // h).transpose(1, 2).reshape(b * h, t, c // h)
            v = v.view(b, t, h, c // h).transpose(1, 2).reshape(b * h, t, c // h)
            scores = torch.bmm(q, k.transpose(1, 2)) / math.sqrt(c // h)
            mask = torch.ones(t, t, device=x.device, dtype=torch.bool).tril()
            scores = scores.masked_fill(~mask, float("-inf"))
            att = torch.bmm(torch.softmax(scores, dim=-1), v)
            att = att.view(b, h, t, c // h).transpose(1, 2).reshape(b, t, c)
            x = x + self.proj(att)
            return x + self.down(F.gelu(self.up(self.ln2(x))))

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok = nn.Embedding(args.vocab, args.width)
            self.pos = nn.Embedding(args.context, args.width)
            self.blocks = nn.ModuleList(Block(args.width, args.width // 64) for _ in range(args.layers))
            self.ln = nn.LayerNorm(args.width)
            self.head = nn.Linear(args.width, args.vocab)

        def forward(self, idx):
            x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
            for blk in self.blocks:
                x = blk(x)
            return self.head(self.ln(x))

    return Model()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--context", type=int, default=128)
    parser.add_argument("--width", type=int, default=256, help="model width (a multiple of 64: heads of 64)")
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--vocab", type=int, default=4096)
    parser.add_argument("--lr", type=float, default=3e-4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--warmup", type=int, default=10, help="steps left out of the steps-per-second figure")
    parser.add_argument("--compile", action="store_true", help="torch.compile the model (the comparison)")
    parser.add_argument("--json", help="write the losses and step times here")
    parser.add_argument("--quiet", action="store_true", help="print only the summary")
    args = parser.parse_args()
    try:
        import torch
    except ImportError:
        print("train.py: the torch Python package is not installed", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("train.py: no CUDA device: this example trains on a GPU", file=sys.stderr)
        return 2
    if args.width % 64:
        parser.error("--width must be a multiple of 64")
    torch.manual_seed(args.seed)
    # PyTorch's defaults, written down: float32 products without TF32, so that the runs compare.
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    model = build(torch, args).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.1)
    step_fn = model
    if args.compile:
        step_fn = torch.compile(model)
    # Synthetic data: sequences of a fixed random Markov chain over the vocabulary (each token has 8
    # likely successors), drawn on the CPU from the seed, so every run sees the same batches.
    gen = torch.Generator().manual_seed(args.seed + 1)
    successors = torch.randint(args.vocab, (args.vocab, 8), generator=gen)

    def batch():
        seq = torch.empty(args.batch, args.context + 1, dtype=torch.long)
        seq[:, 0] = torch.randint(args.vocab, (args.batch,), generator=gen)
        choice = torch.randint(8, (args.batch, args.context), generator=gen)
        for t in range(args.context):
            seq[:, t + 1] = successors[seq[:, t], choice[:, t]]
        return seq[:, :-1].cuda(), seq[:, 1:].cuda()

    data = [batch() for _ in range(args.steps)]
    losses, times = [], []
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    wall = time.perf_counter()
    for step, (x, y) in enumerate(data):
        start.record()
        logits = step_fn(x)
        loss = torch.nn.functional.cross_entropy(logits.view(-1, args.vocab), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        end.record()
        end.synchronize()
        losses.append(loss.item())
        times.append(start.elapsed_time(end))
        if not args.quiet:
            print(f"step {step:4d}  loss {losses[-1]:.6f}  {times[-1]:.2f} ms", flush=True)
    timed = sorted(times[args.warmup:]) or sorted(times)
    median_ms = timed[len(timed) // 2]
    mode = "torch.compile" if args.compile else "eager"
    print(f"{mode}: {args.steps} steps, final loss {losses[-1]:.6f}, median step {median_ms:.2f} ms "
          f"({1000.0 / median_ms:.1f} steps/s), {time.perf_counter() - wall:.1f} s in all")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"mode": mode, "losses": losses, "step_ms": times, "median_step_ms": median_ms,
                       "args": vars(args)}, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
