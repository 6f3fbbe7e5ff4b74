#!/usr/bin/env python3
"""Large keys: an unmodified PyTorch program whose tensors are 4-8 GB each.

softmax over rows of 524288 floats, group_norm and batch_norm over multi-GB activations, mean and argmax over
the middle dimension of a 3-D tensor, cumsum over a square matrix of 2^30 elements: the keys kjit must verify and
time with one input set resident at a time. Prints each op's time per call (CUDA events) and a checksum; knows
nothing about kjit. Run it under `kjit run` twice (kjitd tunes between the runs) and compare.

    python3 examples/shim_app/large.py [--iters 5] [--ops softmax,cumsum] [--json FILE]
"""
import argparse
import json
import sys
import time


def make_cases(torch):
    f32 = torch.float32

    def randn(*shape, dtype=f32):
        return torch.randn(*shape, device="cuda", dtype=dtype)

    gib = 1 << 30
    return [
        # 4096 rows of 524288 floats: 8 GiB in, 8 GiB out.
        ("softmax", lambda: (randn(4096, 524288),), lambda x: torch.softmax(x, dim=-1)),
        # 64 x 512 channels at 256x256, 32 groups: 8 GiB.
        ("group_norm", lambda: (randn(64, 512, 256, 256), randn(512), randn(512)),
         lambda x, w, b: torch.nn.functional.group_norm(x, 32, w, b)),
        # Eval-mode batch norm over 64 x 256 channels at 256x256 (4 GiB).
        ("batch_norm", lambda: (randn(64, 256, 256, 256), randn(256), torch.rand(256, device="cuda") + 0.5,
                                randn(256), randn(256)),
         lambda x, m, v, w, b: torch.nn.functional.batch_norm(x, m, v, w, b, training=False)),
        # The middle dimension of a 3-D tensor: 64 x 65536 x 512 (8 GiB).
        ("mean_dim1", lambda: (randn(64, 65536, 512),), lambda x: x.mean(dim=1)),
        ("argmax_dim1", lambda: (randn(64, 65536, 512),), lambda x: x.argmax(dim=1)),
        # cumsum over the rows of a 32768 x 32768 matrix (2^30 elements, 4 GiB).
        ("cumsum", lambda: (randn(32768, 32768),), lambda x: torch.cumsum(x, dim=-1)),
    ], gib


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--iters", type=int, default=5, help="timed calls per op (default 5)")
    parser.add_argument("--ops", default="", help="comma-separated subset of the ops (default: all)")
    parser.add_argument("--json", metavar="FILE", help="also write the results here as JSON")
    args = parser.parse_args()
    try:
        import torch
    except ImportError:
        print("large.py: this example needs PyTorch", file=sys.stderr)
        return 1
    if not torch.cuda.is_available():
        print("large.py: no CUDA device; nothing to do", file=sys.stderr)
        return 0
    cases, gib = make_cases(torch)
    if args.ops:
        wanted = {o.strip() for o in args.ops.split(",") if o.strip()}
        cases = [c for c in cases if c[0] in wanted]
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}")
    results = {}
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    with torch.inference_mode():
        for name, make, fn in cases:
            # One op's tensors at a time: together they would not fit.
            torch.manual_seed(0)
            x = make()
            out = fn(*x)
            torch.cuda.synchronize()
            start.record()
            for _ in range(args.iters):
                out = fn(*x)
            end.record()
            end.synchronize()
            us = start.elapsed_time(end) * 1000.0 / args.iters
            checksum = out.double().sum().item()
            gb = sum(t.numel() * t.element_size() for t in x) / gib
            results[name] = {"us_per_call": us, "checksum": checksum, "input_gib": gb}
            print(f"  {name:<12} {gb:5.1f} GiB in  {us:>12.1f} us/call  {checksum:>22.9e}")
            del x, out
            torch.cuda.empty_cache()
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "iters": args.iters, "ops": results}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
