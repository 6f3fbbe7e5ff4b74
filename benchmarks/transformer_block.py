#!/usr/bin/env python3
"""Times an eager GPT-2-style transformer block written in plain torch (random weights, batched inference under
torch.no_grad()), round after round in one long-running process: kjit (the shim, with KJIT_FUSION=serve: its layer
norms, softmax and the tanh-GELU's eight calls served by kjit's kernels once kjitd has tuned them) against PyTorch
eager (the shim's kernels unregistered in the same process: kjit_adapter_set_registered(0)) and torch.compile of the
same block.

Started against a cold cache, the first rounds run eagerly while the shim reports the block's keys and chains; in
the pauses between rounds (the GPU idle) kjitd tunes them by itself and the shim swaps the kernels in. No other
command is needed:

    KJIT_FUSION=serve build/bin/kjit run -- python3 benchmarks/transformer_block.py --rounds 12 --pause 10 --kjit build/bin/kjit

Each sample: L2 flushed (a 256 MiB write), CUDA events around one block and a view of its output (a dispatcher
call: the shim launches a complete chain at the thread's next PyTorch call), median over --samples. Prints a
markdown table, one row a round (with the largest difference from eager's output); --json writes the rows.
"""
import argparse
import json
import math
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fusion_chain import adapter, chain_tasks, counters, timed_median_us  # noqa: E402


def gelu(torch, x):
    """minGPT's NewGELU, as its MLP writes it: eight elementwise calls."""
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


class Block:
    """minGPT's Block (CausalSelfAttention and MLP) in plain torch, with random weights."""

    def __init__(self, torch, width, heads, context, dtype, gen):
        def weight(*shape, scale):
            return (torch.randn(*shape, device="cuda", generator=gen) * scale).to(dtype)

        def bias(n):
            return (torch.randn(n, device="cuda", generator=gen) * 0.02).to(dtype)

        self.torch, self.width, self.heads = torch, width, heads
        self.ln1 = (1.0 + weight(width, scale=0.1), bias(width))
        self.ln2 = (1.0 + weight(width, scale=0.1), bias(width))
        self.attn = (weight(3 * width, width, scale=width ** -0.5), bias(3 * width))
        self.proj = (weight(width, width, scale=width ** -0.5), bias(width))
        self.fc = (weight(4 * width, width, scale=width ** -0.5), bias(4 * width))
        self.fc_proj = (weight(width, 4 * width, scale=(4 * width) ** -0.5), bias(width))
        self.mask = torch.tril(torch.ones(context, context, device="cuda")).view(1, 1, context, context)

    def __call__(self, x):
        torch = self.torch
        F = torch.nn.functional
        B, T, C = x.size()
        h = F.layer_norm(x, (C,), *self.ln1)
        q, k, v = F.linear(h, *self.attn).split(self.width, dim=2)
        k = k.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        q = q.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        v = v.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.mask[:, :, :T, :T] == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        x = x + F.linear(y, *self.proj)
        h = F.linear(F.layer_norm(x, (C,), *self.ln2), *self.fc)
        return x + F.linear(gelu(torch, h), *self.fc_proj)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batch", type=int, default=8, help="sequences a call (default 8)")
    ap.add_argument("--context", type=int, default=1024, help="tokens a sequence (default 1024)")
    ap.add_argument("--width", type=int, default=768, help="model width (default 768, GPT-2 small)")
    ap.add_argument("--heads", type=int, default=12, help="attention heads (default 12)")
    ap.add_argument("--dtype", default="float32", choices=["float32", "float16", "bfloat16"])
    ap.add_argument("--rounds", type=int, default=12, help="rounds of timing (default 12)")
    ap.add_argument("--samples", type=int, default=30, help="timed calls per mode and round (default 30)")
    ap.add_argument("--pause", type=float, default=10.0,
                    help="seconds between rounds, the GPU left idle (kjitd tunes on idle GPU time; default 10)")
    ap.add_argument("--no-compile", action="store_true", help="leave torch.compile out")
    ap.add_argument("--json", help="write the rows here")
    ap.add_argument("--kjit", help="the kjit CLI (e.g. build/bin/kjit): after each round, print kjitd's tasks of "
                    "chain keys (state, trials, best speedup, detail)")
    args = ap.parse_args()

    import torch
    if not torch.cuda.is_available():
        print("transformer_block: no CUDA device: nothing to time", file=sys.stderr)
        return 1
    dtype = getattr(torch, args.dtype)
    gen = torch.Generator(device="cuda").manual_seed(7)
    block = Block(torch, args.width, args.heads, args.context, dtype, gen)
    x = torch.randn(args.batch, args.context, args.width, device="cuda", generator=gen).to(dtype)
    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    lib = adapter()
    compiled = None if args.no_compile else torch.compile(lambda t: block(t))  # a function: block is no nn.Module

    def median_us(fn):
        return timed_median_us(torch, fn, x, flush, args.samples, warmup=3)

    with torch.no_grad():
        if lib is not None:
            lib.kjit_adapter_set_registered(0)
        reference = block(x).float()
        if lib is not None:
            lib.kjit_adapter_set_registered(1)
    rows = []
    print(f"GPT-2-style block, batch {args.batch} x {args.context} tokens, width {args.width}, {args.heads} heads, "
          f"{args.dtype}; shim {'loaded' if lib is not None else 'not loaded'}")
    print("| round | t (s) | eager (us) | kjit (us) | torch.compile (us) | kjit vs eager | kjit vs torch.compile "
          "| kjit hits | chains fused | max abs diff |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    t0 = time.monotonic()
    for r in range(args.rounds):
        row = {"round": r, "t_s": round(time.monotonic() - t0, 1)}
        with torch.no_grad():
            if lib is not None:
                lib.kjit_adapter_set_registered(0)
            row["eager_us"] = median_us(block)
            if lib is not None:
                lib.kjit_adapter_set_registered(1)
                before = counters(lib)
                row["kjit_us"] = median_us(block)
                after = counters(lib)
                row["hits"] = after.get("hits", 0) - before.get("hits", 0)
                row["chains_fused"] = after.get("chains_fused", 0) - before.get("chains_fused", 0)
                out = block(x)
                out.view(-1)
                row["max_abs_diff"] = (out.float() - reference).abs().max().item()
            if compiled is not None:
                row["compile_us"] = median_us(compiled)
        time.sleep(args.pause)
        rows.append(row)

        def fmt(key, digits=1):
            return f"{row[key]:.{digits}f}" if key in row else "-"
        vs_eager = f"{row['eager_us'] / row['kjit_us']:.2f}x" if "kjit_us" in row else "-"
        vs_compile = f"{row['compile_us'] / row['kjit_us']:.2f}x" if "kjit_us" in row and "compile_us" in row else "-"
        diff = f"{row['max_abs_diff']:.2e}" if "max_abs_diff" in row else "-"
        print(f"| {r} | {row['t_s']} | {fmt('eager_us')} | {fmt('kjit_us')} | {fmt('compile_us')} | {vs_eager} "
              f"| {vs_compile} | {row.get('hits', '-')} | {row.get('chains_fused', '-')} | {diff} |", flush=True)
        if args.kjit:
            for line in chain_tasks(args.kjit):
                print(f"  {line}", flush=True)
    final = counters(lib)
    if final:
        print(f"shim counters: {final}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"batch": args.batch, "context": args.context, "width": args.width, "heads": args.heads,
                       "dtype": args.dtype, "counters": final, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
