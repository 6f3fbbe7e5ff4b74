#!/usr/bin/env python3
"""What seeing chains of ops would cost the shim per op, measured from Python (issue 44, step 1).

Run on the GPU machine (its python3 has a CUDA torch; kjit built against that torch):

    python3 benchmarks/fusion_probe/fusion_probe.py --build build --out fusion-probe.md

It loads build/benchmarks/fusion_probe/libkjit_fusion_probe.so (fusion_probe.cc) into this process after
`import torch` and times a few op mixes, small tensors (host-bound, as the shim's overhead is measured in
benchmarks/shim_overhead.py --ab), in interleaved modes within this one process:

  eager      nothing of the probe in the dispatcher
  catch-all  a boxed fallback on a mode key in this thread's included keys: every dispatcher call passes it
             (design (a)'s detector of "anything else", always on)
  window     the catch-all plus design (a)'s deferral-window bookkeeping (classify, hash the call, hold its
             tensors, check other ops' tensors against the window's storages, flush)
  wrappers   design (b) with no known chain: unboxed wrappers on the CUDA key of 16 elementwise/reduction ops,
             each a pre-filter, a chain-start key hashed and probed, a record appended to a ring
  chains     design (b) with the chains learned from that ring: a known chain's first op opens a window and
             turns the catch-all on until the chain completes or diverges
  observer   a global RecordFunction callback (the profiler's hook) that counts ops

Every mode runs PyTorch's kernels at once (no deferral, no fused kernel): what a mode adds to eager is the
interception and bookkeeping alone. Each loop times --calls iterations of a mix per mode, the modes in an
order rotated every loop, --settle untimed iterations after each switch, the GPU drained between loops
(untimed). Per mode the table gives the added host time per dispatcher call: the median over loops of the
paired difference (mode - eager in the same loop) divided by the dispatcher calls per iteration (counted by
the catch-all). Outputs are compared with eager's bit for bit. Nothing here is a pass/fail threshold; issue
9's budgets are 0.5 us a miss and 1 us a hit per intercepted call. shim/FUSION.md says what each number
decides.
"""
import argparse
import ctypes
import gc
import math
import os
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODES = ("eager", "catch-all", "window", "wrappers", "chains", "observer")
COUNTERS = ("caught", "fusible", "flushes", "flushed_calls", "wrapper_calls", "start_probes", "windows",
            "completed", "diverged", "observed")


def make_mixes(torch, rows, cols, dev):
    F = torch.nn.functional
    g = torch.Generator(device=dev).manual_seed(0)
    x = torch.randn(rows, cols, device=dev, generator=g)
    xb = x.to(torch.bfloat16)
    wb = torch.randn(cols, device=dev, generator=g).to(torch.bfloat16)
    w = torch.randn(cols, cols, device=dev, generator=g) / math.sqrt(cols)
    w2 = torch.randn(cols, cols, device=dev, generator=g) / math.sqrt(cols)
    idx = torch.randint(0, rows, (rows,), device=dev, generator=g)
    target = torch.randint(0, cols, (rows,), device=dev, generator=g)
    mask = (torch.rand(rows, cols, device=dev, generator=g) > 0.5).to(torch.float32)

    def rms_norm(h, weight, eps=1e-6):  # Hugging Face's LlamaRMSNorm.forward
        input_dtype = h.dtype
        h = h.to(torch.float32)
        variance = h.pow(2).mean(-1, keepdim=True)
        h = h * torch.rsqrt(variance + eps)
        return weight * h.to(input_dtype)

    def new_gelu(h):  # minGPT's NewGELU
        return 0.5 * h * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (h + 0.044715 * torch.pow(h, 3.0))))

    def no_fusible():  # no elementwise or reduction op at all
        h = torch.mm(x, w)
        h = torch.cat([h, x], -1)
        h = h.index_select(0, idx)
        h = h.t().contiguous()
        return F.layer_norm(h[:cols], (rows,))

    def isolated():  # elementwise ops, each alone between non-fusible ops: no chain
        h = torch.relu(torch.mm(x, w))
        h = F.layer_norm(torch.mm(h, w2) + x, (cols,))
        return torch.softmax(torch.mm(h, h.t()) * 0.125, -1)

    def mlp():  # chains between products: RMS norm, mm, GELU, mm
        h = rms_norm(xb, wb).to(torch.float32)
        return torch.mm(new_gelu(torch.mm(h, w)), w2)

    return [
        ("no fusible op (mm, cat, index_select, t, contiguous, layer_norm)", no_fusible),
        ("isolated elementwise (mm, relu, mm, add, layer_norm, mm, mul, softmax)", isolated),
        ("RMS norm, HF Llama, bf16", lambda: rms_norm(xb, wb)),
        ("tanh-GELU, minGPT, f32", lambda: new_gelu(x)),
        ("cross-entropy (log_softmax + nll_loss)", lambda: F.cross_entropy(x, target)),
        ("L2 normalisation (F.normalize)", lambda: F.normalize(x, dim=-1)),
        ("masked cumsum (cumsum(x * mask))", lambda: torch.cumsum(x * mask, dim=-1)),
        ("MLP: RMS norm, mm, GELU, mm", mlp),
    ]


class Probe:
    def __init__(self, path):
        self.lib = ctypes.CDLL(path)
        self.lib.kjit_fp_init.restype = ctypes.c_int
        self.lib.kjit_fp_error.restype = ctypes.c_char_p
        self.lib.kjit_fp_set_mode.restype = ctypes.c_int
        self.lib.kjit_fp_set_mode.argtypes = [ctypes.c_int]
        self.lib.kjit_fp_counters.restype = ctypes.c_int
        self.lib.kjit_fp_learn.restype = ctypes.c_int
        self.lib.kjit_fp_learn.argtypes = [ctypes.POINTER(ctypes.c_int)]
        self.lib.kjit_fp_reset.argtypes = [ctypes.c_int]
        self.lib.kjit_fp_wrapped_ops.restype = ctypes.c_char_p
        self.init = self.lib.kjit_fp_init()
        self.error = self.lib.kjit_fp_error().decode()

    def mode(self, m):
        if self.lib.kjit_fp_set_mode(MODES.index(m)) != 0:
            raise RuntimeError(f"mode {m} refused: {self.error}")

    def counters(self):
        values = (ctypes.c_uint64 * len(COUNTERS))()
        self.lib.kjit_fp_counters(values, len(COUNTERS))
        return dict(zip(COUNTERS, values))

    def learn(self):
        calls = ctypes.c_int(0)
        return self.lib.kjit_fp_learn(ctypes.byref(calls)), calls.value


def delta(after, before):
    return {k: after[k] - before[k] for k in after}


def measure_mix(torch, probe, modes, fn, args):
    """One mix: chains learned, counters per iteration and mode, timed loops; returns a dict."""
    result = {}
    with torch.inference_mode():
        probe.mode("eager")
        for _ in range(args.warmup):
            reference = fn()
        torch.cuda.synchronize()
        reference = fn().clone()
        chains = (0, 0)
        if "chains" in modes:  # record with the wrappers, then learn what repeats
            probe.lib.kjit_fp_reset(0)
            probe.mode("wrappers")
            for _ in range(args.learn_iters):
                fn()
            chains = probe.learn()
        result["chains_learned"], result["chain_calls"] = chains
        per_iter, same = {}, {}
        n = args.count_iters
        for m in modes:
            probe.mode(m)
            for _ in range(args.settle):
                fn()
            before = probe.counters()
            for _ in range(n):
                out = fn()
            per_iter[m] = {k: v / n for k, v in delta(probe.counters(), before).items()}
            torch.cuda.synchronize()
            same[m] = bool(torch.equal(out, reference))
        probe.mode("eager")
        result["per_iter"], result["equal"] = per_iter, same
        samples = {m: [] for m in modes}
        gc_was = gc.isenabled()
        gc.disable()
        try:
            for i in range(args.loops):
                for k in range(len(modes)):
                    m = modes[(i + k) % len(modes)]
                    probe.mode(m)
                    for _ in range(args.settle):
                        fn()
                    torch.cuda.synchronize()
                    start = time.perf_counter_ns()
                    for _ in range(args.calls):
                        fn()
                    end = time.perf_counter_ns()
                    torch.cuda.synchronize()
                    samples[m].append((end - start) / args.calls)
        finally:
            probe.mode("eager")
            if gc_was:
                gc.enable()
    result["iter_ns"] = {m: statistics.median(s) for m, s in samples.items()}
    result["added_iter_ns"] = {}
    result["added_iqr_ns"] = {}
    for m in modes:
        paired = [a - b for a, b in zip(samples[m], samples["eager"])]
        q = statistics.quantiles(paired, n=4) if len(paired) >= 2 else [0, 0, 0]
        result["added_iter_ns"][m] = statistics.median(paired)
        result["added_iqr_ns"][m] = q[2] - q[0]
    return result


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"), help="kjit's build directory (default build/)")
    ap.add_argument("--lib", help="the probe library (default BUILD/benchmarks/fusion_probe/libkjit_fusion_probe.so)")
    ap.add_argument("--out", help="also write the markdown to this file")
    ap.add_argument("--rows", type=int, default=8, help="rows of the mixes' tensors (default 8)")
    ap.add_argument("--cols", type=int, default=256, help="columns (default 256)")
    ap.add_argument("--loops", type=int, default=60, help="timed loops per mode and mix (default 60)")
    ap.add_argument("--calls", type=int, default=40, help="iterations of a mix per timed loop (default 40)")
    ap.add_argument("--warmup", type=int, default=20, help="untimed iterations first (default 20)")
    ap.add_argument("--settle", type=int, default=3, help="untimed iterations after each mode switch (default 3)")
    ap.add_argument("--learn-iters", type=int, default=8, help="iterations recorded before learning chains")
    ap.add_argument("--count-iters", type=int, default=4, help="iterations over which counters are read")
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"),
                    help="cpu: a smoke test of this driver where there is no GPU (the CUDA-key wrappers are never "
                         "reached; its numbers say nothing about the CUDA path)")
    ap.add_argument("--mixes", help="only the mixes whose name contains one of these comma-separated words")
    args = ap.parse_args()

    import torch
    if args.device == "cpu":
        torch.cuda.synchronize = lambda: None
        torch.cuda.get_device_name = lambda: "CPU (smoke test)"
    elif not torch.cuda.is_available():
        print("fusion_probe: no CUDA device: the probe measures the CUDA dispatch path (the CPU check is "
              "kjit_fusion_probe_check)", file=sys.stderr)
        return 2
    lib = args.lib or os.path.join(args.build, "benchmarks", "fusion_probe", "libkjit_fusion_probe.so")
    if not os.path.exists(lib):
        print(f"fusion_probe: {lib} is missing: cmake --build {args.build} --target kjit_fusion_probe",
              file=sys.stderr)
        return 2
    probe = Probe(lib)
    if probe.init < 0:
        print(f"fusion_probe: {probe.error}", file=sys.stderr)
        return 1
    modes = [m for m in MODES if probe.init == 0 or m not in ("wrappers", "chains")]
    mixes = make_mixes(torch, args.rows, args.cols, args.device)
    if args.mixes:
        words = [w.strip().lower() for w in args.mixes.split(",") if w.strip()]
        mixes = [(n, f) for n, f in mixes if any(w in n.lower() for w in words)]
    results = []
    t0 = time.time()
    for name, fn in mixes:
        r = measure_mix(torch, probe, modes, fn, args)
        results.append((name, r))
        print(f"[fusion_probe] {name}: done ({time.time() - t0:.1f} s)", file=sys.stderr)

    lines = []
    say = lines.append
    say(f"Fusion probe (issue 44, step 1): torch {torch.__version__}, {torch.cuda.get_device_name()}, "
        f"tensors [{args.rows}, {args.cols}]; {args.loops} loops of {args.calls} iterations per mode and mix, "
        f"modes interleaved (order rotated per loop). Host time only.")
    if probe.init != 0:
        say(f"\nWrappers unavailable here: {probe.error}")
    say("")
    say("Added host time per dispatcher call, ns (median over loops of the paired difference mode - eager, "
        "divided by the dispatcher calls per iteration; IQR of the per-iteration difference in brackets, us):")
    say("")
    head = "| mix | calls/iter: dispatcher / CUDA-key wrapped | eager ns/call |"
    rule = "|---|---:|---:|"
    for m in modes[1:]:
        head += f" {m} +ns/call |"
        rule += "---:|"
    say(head)
    say(rule)
    for name, r in results:
        calls = r["per_iter"]["catch-all"]["caught"] or 1
        wrapped = r["per_iter"].get("wrappers", {}).get("wrapper_calls", float("nan"))
        row = f"| {name} | {calls:.0f} / {wrapped:.0f} | {r['iter_ns']['eager'] / calls:.0f} |"
        for m in modes[1:]:
            row += f" {r['added_iter_ns'][m] / calls:.0f} ({r['added_iqr_ns'][m] / 1000:.2f}) |"
        say(row)
    say("")
    say("Per iteration: host time per mode (us), chains learned, what the windows did, outputs against eager's:")
    say("")
    say("| mix | " + " | ".join(f"{m} us" for m in modes) + " | chains learned (calls) | design (a) windows "
        "flushed / fusible calls | design (b) windows opened / completed / diverged | outputs equal |")
    say("|---|" + "---:|" * len(modes) + "---|---|---|---|")
    for name, r in results:
        pi = r["per_iter"]
        a = pi.get("window", {})
        b = pi.get("chains", {})
        row = f"| {name} | " + " | ".join(f"{r['iter_ns'][m] / 1000:.2f}" for m in modes)
        row += f" | {r['chains_learned']} ({r['chain_calls']})"
        row += f" | {a.get('flushes', 0):.1f} / {a.get('fusible', 0):.1f}"
        row += (f" | {b.get('windows', 0):.1f} / {b.get('completed', 0):.1f} / {b.get('diverged', 0):.1f}"
                if b else " | n/a")
        row += " | " + ("all" if all(r["equal"].values()) else
                        "NOT " + ",".join(m for m, ok in r["equal"].items() if not ok)) + " |"
        say(row)
    say("")
    say(f"CUDA-key wrapped ops: {probe.lib.kjit_fp_wrapped_ops().decode()}. Mode key: TESTING_ONLY_GenericMode. "
        f"Took {time.time() - t0:.0f} s.")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
