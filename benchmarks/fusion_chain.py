#!/usr/bin/env python3
"""Times a chain of PyTorch calls that kjit fuses, per call, round after round, in one long-running process:
minGPT's tanh-GELU (eight elementwise calls; --chain gelu), Hugging Face's LlamaRMSNorm on a float32 tensor (pow,
mean, add, rsqrt, mul, mul; --chain rms_norm) or a masked cumsum (torch.cumsum(x * mask, -1); --chain masked_cumsum). kjit (the shim, with KJIT_FUSION=serve) against PyTorch eager (the
shim's kernels unregistered in the same process: kjit_adapter_set_registered(0)) and torch.compile, with the
memory floor (read x (and the mask) once, write the result once, at this process's measured copy bandwidth).

Started against a cold cache, the first rounds run eagerly while the shim records the chain and reports it to
kjitd; in the pauses between rounds (the GPU idle) kjitd tunes the chain key by itself, the shim is told of the
kernel (hot swap), and later rounds run the chain's calls as one fused kernel. No other command is needed:

    KJIT_FUSION=serve build/bin/kjit run -- python3 benchmarks/fusion_chain.py --chain rms_norm --rounds 12 --pause 10 --kjit build/bin/kjit

Without the shim loaded it times eager and torch.compile only. Each sample: L2 flushed (a 256 MiB write), CUDA
events around one chain and a view of its result (a dispatcher call: the shim launches a complete chain at the
thread's next PyTorch call, and a CUDA event is none), median over --samples. Prints a markdown table, one row a
round; --json writes the rows.
"""
import argparse
import ctypes
import json
import math
import os
import statistics
import sys
import time


def gelu(torch, x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


def rms_norm(torch, x, weight, eps=1e-6):
    """LlamaRMSNorm.forward as Hugging Face writes it (on a float32 x its casts return x itself)."""
    input_dtype = x.dtype
    hidden_states = x.to(torch.float32)
    variance = hidden_states.pow(2).mean(-1, keepdim=True)
    hidden_states = hidden_states * torch.rsqrt(variance + eps)
    return weight * hidden_states.to(input_dtype)


# Per chain: its title, the shape of x by default, and the tensors of x's size its floor moves (read or written).
CHAINS = {"gelu": ("tanh-GELU (minGPT)", [8192, 3072], 2), "rms_norm": ("RMS norm (Hugging Face's Llama)", [8192, 4096], 2),
          "masked_cumsum": ("masked cumsum, torch.cumsum(x * mask, -1)", [4096, 8192], 3)}


COUNTERS = ["attached", "hits", "first_sights", "misses", "failures", "intercepted_ops", "unboxed_ops",
            "chain_records", "chains_reported", "chains_fused", "chains_replayed"]


def adapter():
    try:
        return ctypes.CDLL("libkjit_torch_adapter.so", mode=os.RTLD_NOLOAD | os.RTLD_LOCAL)
    except OSError:
        return None


def counters(lib):
    if lib is None:
        return {}
    values = (ctypes.c_uint64 * len(COUNTERS))()
    lib.kjit_adapter_counters.restype = ctypes.c_int
    n = lib.kjit_adapter_counters(values, len(COUNTERS))
    return dict(zip(COUNTERS, list(values)[:max(n, 0)]))


def timed_median_us(torch, fn, x, flush, samples, warmup):
    """fn(x)'s median time in us over `samples` calls after `warmup`: each with L2 flushed (`flush` zeroed), CUDA
    events around the call and a view of its result (a dispatcher call: the shim launches a complete chain at the
    thread's next PyTorch call, and a CUDA event is none)."""
    for _ in range(warmup):
        fn(x).view(-1)
    times = []
    for _ in range(samples):
        flush.zero_()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn(x).view(-1)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1000.0)
    return statistics.median(times)


def chain_tasks(kjit):
    """kjitd's tasks whose keys are chains, as `kjit tasks --json` lists them: one line each."""
    import subprocess
    try:
        r = subprocess.run([kjit, "tasks", "--json"], capture_output=True, text=True, timeout=30)
        tasks = json.loads(r.stdout or "[]")
    except (OSError, ValueError, subprocess.TimeoutExpired) as e:
        return [f"kjit tasks: {e}"]
    lines = []
    for t in tasks:
        text = t.get("key_text", "")
        if "kjit::live" not in text:
            continue
        ops = [c.split("(")[0].split("= ")[-1] for c in text.split("; ")]
        speedup = f"{t['speedup']:.2f}x" if "speedup" in t else "-"
        lines.append(f"task {t.get('id')} {t.get('state')}: trials {t.get('trials', 0)}, best {speedup}, "
                     f"{len(ops) - 1} calls from {ops[0]}..{ops[-2] if len(ops) > 1 else ''}; {t.get('detail', '')}")
    return lines or ["no task of a chain key"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--chain", default="gelu", choices=sorted(CHAINS), help="the chain timed (default gelu)")
    ap.add_argument("--shape", type=int, nargs="+",
                    help="x's shape (default 8192 3072 for gelu, 8192 4096 for rms_norm, 4096 8192 for masked_cumsum: "
                    "rows of the last dim)")
    ap.add_argument("--dtype", default="float32", choices=["float32", "float16", "bfloat16"])
    ap.add_argument("--rounds", type=int, default=12, help="rounds of timing (default 12)")
    ap.add_argument("--samples", type=int, default=50, help="timed calls per mode and round (default 50)")
    ap.add_argument("--pause", type=float, default=10.0,
                    help="seconds between rounds, the GPU left idle (kjitd tunes on idle GPU time; default 10)")
    ap.add_argument("--busy", action="store_true",
                    help="call the chain during the pauses instead: a program that never leaves the GPU idle")
    ap.add_argument("--no-compile", action="store_true", help="leave torch.compile out")
    ap.add_argument("--json", help="write the rows here")
    ap.add_argument("--kjit", help="the kjit CLI (e.g. build/bin/kjit): after each round, print kjitd's tasks of "
                    "chain keys (state, trials, best speedup, detail)")
    args = ap.parse_args()

    import torch
    if not torch.cuda.is_available():
        print("fusion_chain: no CUDA device: nothing to time", file=sys.stderr)
        return 1
    dtype = getattr(torch, args.dtype)
    title, default_shape, moved = CHAINS[args.chain]
    shape = args.shape or default_shape
    x = torch.randn(*shape, device="cuda", dtype=dtype)
    if args.chain == "gelu":
        chain = lambda t: gelu(torch, t)  # noqa: E731
    elif args.chain == "masked_cumsum":
        mask = (torch.rand(*shape, device="cuda") < 0.5).to(dtype)
        chain = lambda t: torch.cumsum(t * mask, -1)  # noqa: E731
    else:
        weight = torch.rand(shape[-1], device="cuda", dtype=dtype) + 0.5
        chain = lambda t: rms_norm(torch, t, weight)  # noqa: E731
    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    lib = adapter()
    compiled = None if args.no_compile else torch.compile(chain)

    def median_us(fn):
        return timed_median_us(torch, fn, x, flush, args.samples, warmup=5)

    # The floor: x (and the mask) read once, the result written once, at a 256 MiB device-to-device copy's bandwidth.
    src = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    copies = []
    for _ in range(11):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        dst.copy_(src)
        end.record()
        end.synchronize()
        copies.append(start.elapsed_time(end) / 1000.0)
    bandwidth = 2 * src.numel() / statistics.median(copies)  # bytes/s, read + write
    floor_us = moved * x.numel() * x.element_size() / bandwidth * 1e6
    del src, dst

    eager_fn = chain
    reference = chain(x).float()
    rows = []
    print(f"{title} on {args.dtype}{list(shape)}; floor {floor_us:.1f} us "
          f"({bandwidth / 1e12:.2f} TB/s); shim {'loaded' if lib is not None else 'not loaded'}")
    print("| round | t (s) | eager (us) | kjit (us) | torch.compile (us) | floor (us) | speedup | kjit/floor "
          "| chains fused | max abs err |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    t0 = time.monotonic()
    for r in range(args.rounds):
        row = {"round": r, "t_s": round(time.monotonic() - t0, 1), "floor_us": floor_us}
        with torch.no_grad():
            if lib is not None:
                lib.kjit_adapter_set_registered(0)
            row["eager_us"] = median_us(eager_fn)
            if lib is not None:
                lib.kjit_adapter_set_registered(1)
                before = counters(lib).get("chains_fused", 0)
                row["kjit_us"] = median_us(eager_fn)
                row["chains_fused"] = counters(lib).get("chains_fused", 0) - before
                out = chain(x)
                out.view(-1)
                row["max_abs_err"] = (out.float() - reference).abs().max().item()
            if compiled is not None:
                row["compile_us"] = median_us(compiled)
            until = time.monotonic() + args.pause
            if not args.busy:
                time.sleep(args.pause)
            while args.busy and time.monotonic() < until:
                for _ in range(20):
                    chain(x).view(-1)
                torch.cuda.synchronize()
        rows.append(row)

        def fmt(key, digits=1):
            return f"{row[key]:.{digits}f}" if key in row else "-"
        kjit_eager = f"{row['eager_us'] / row['kjit_us']:.2f}x" if "kjit_us" in row else "-"
        kjit_floor = f"{row['kjit_us'] / floor_us:.2f}" if "kjit_us" in row else "-"
        err = f"{row['max_abs_err']:.2e}" if "max_abs_err" in row else "-"
        print(f"| {r} | {row['t_s']} | {fmt('eager_us')} | {fmt('kjit_us')} | {fmt('compile_us')} | {floor_us:.1f} "
              f"| {kjit_eager} | {kjit_floor} | {row.get('chains_fused', '-')} | {err} |", flush=True)
        if args.kjit:
            for line in chain_tasks(args.kjit):
                print(f"  {line}", flush=True)
    final = counters(lib)
    if final:
        print(f"shim counters: {final}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"chain": args.chain, "shape": shape, "dtype": args.dtype, "counters": final, "rows": rows}, f,
                      indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
