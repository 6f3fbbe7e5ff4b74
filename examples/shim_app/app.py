#!/usr/bin/env python3
"""An ordinary PyTorch inference program: nothing in it knows about kjit.

It runs the normalization and softmax layers of a few familiar models, and
scans, reductions, pooling, depthwise convolutions and small-K matrix products, at realistic sizes, in a loop, and prints the time per call of each (CUDA events)
and a checksum of each one's output. Run it as it is, then under kjit:

    python3 examples/shim_app/app.py
    build/bin/kjit run -- python3 examples/shim_app/app.py

and compare: the checksums agree within the verified tolerance (they are sums
of floating-point outputs, so kernels that add in another order differ in the
last digits), the times drop for the ops kjit has a faster kernel for.
examples/shim_app/README.md has the whole procedure.

The ops (what eager PyTorch calls on CUDA, and kjit intercepts):
  softmax        attention scores             aten::_softmax
  log_softmax    language-model logits        aten::_log_softmax
  layer_norm     transformer hidden states    aten::native_layer_norm
  rms_norm       LLaMA-style hidden states    aten::_fused_rms_norm (torch >= 2.4, where it exists)
  group_norm     diffusion U-Net features     aten::native_group_norm
  batch_norm     ResNet block, eval mode      aten::cudnn_batch_norm / native_batch_norm
  instance_norm  style-transfer features      batch_norm in training mode over N*C channels
  cumsum         running sums over sequences  aten::cumsum
  mean           global average pooling       aten::mean.dim
  argmax         greedy decoding over logits  aten::argmax (int64 output)
  max_pool2d     ResNet stem                  aten::max_pool2d_with_indices (indices written, dropped)
  depthwise_conv MobileNet block, NCHW fp32   aten::_conv_depthwise2d
  depthwise_conv_cl  the same, channels_last fp16  aten::cudnn_convolution (depthwise calls only)
  bmm            per-head 64x64 products, fp32 aten::bmm (K <= 256 in fp32, <= 64 in fp16/bf16 only)
  mm_skinny      a rank-64 factor product, fp32  aten::mm (idem)

Everything runs under torch.inference_mode(), as inference programs do (kjit
serves calls that autograd records too: examples/training trains a model).
"""
import argparse
import json
import os
import sys
import time


def make_cases(torch, scale):
    """(name, make_inputs, fn) per op; sizes divided by `scale` along the batch."""
    F = torch.nn.functional
    f32, f16, bf16 = torch.float32, torch.float16, torch.bfloat16

    def b(n):
        return max(1, n // scale)

    def randn(*shape, dtype=f32):
        return torch.randn(*shape, device="cuda", dtype=dtype)

    cases = [
        # 16 sequences x 16 heads of 512x512 attention scores, half precision.
        ("softmax", lambda: (randn(b(16), 16, 512, 512, dtype=f16),),
         lambda x: torch.softmax(x, dim=-1)),
        # 2048 tokens over a 32000-word vocabulary.
        ("log_softmax", lambda: (randn(b(2048), 32000),),
         lambda x: F.log_softmax(x, dim=-1)),
        # 8 x 1024 tokens of width 4096, half precision, affine.
        ("layer_norm", lambda: (randn(b(8), 1024, 4096, dtype=f16), randn(4096, dtype=f16),
                                randn(4096, dtype=f16)),
         lambda x, w, bias: F.layer_norm(x, (4096,), w, bias)),
    ]
    if hasattr(F, "rms_norm"):
        cases.append(
            # bfloat16, as LLaMA-style models run.
            ("rms_norm", lambda: (randn(b(8), 1024, 4096, dtype=bf16), randn(4096, dtype=bf16)),
             lambda x, w: F.rms_norm(x, (4096,), w, 1e-6)))
    cases += [
        # A diffusion U-Net block: 320 channels at 64x64, 32 groups.
        ("group_norm", lambda: (randn(b(8), 320, 64, 64, dtype=f16), randn(320, dtype=f16), randn(320, dtype=f16)),
         lambda x, w, bias: F.group_norm(x, 32, w, bias)),
        # A ResNet-50 stage-2 batch norm in eval mode (running statistics).
        ("batch_norm", lambda: (randn(b(32), 256, 56, 56), randn(256), torch.rand(256, device="cuda") + 0.5,
                                randn(256), randn(256)),
         lambda x, mean, var, w, bias: F.batch_norm(x, mean, var, w, bias, training=False)),
        # Style transfer: instance norm over 64 channels at 256x256.
        ("instance_norm", lambda: (randn(b(8), 64, 256, 256), randn(64), randn(64)),
         lambda x, w, bias: F.instance_norm(x, weight=w, bias=bias)),
        # Running sums over 256 sequences of 32768 positions.
        ("cumsum", lambda: (randn(b(256), 32768),),
         lambda x: torch.cumsum(x, dim=-1)),
        # ResNet-50's global average pooling: 2048 channels at 7x7, half precision.
        ("mean", lambda: (randn(b(256), 2048, 7, 7, dtype=f16),),
         lambda x: x.mean(dim=(-2, -1))),
        # Greedy decoding: the most likely of 32000 words for 2048 positions (int64 indices).
        ("argmax", lambda: (randn(b(2048), 32000),),
         lambda x: x.argmax(dim=-1)),
        # ResNet's stem pooling: 3x3, stride 2, over 64 channels at 112x112, half precision.
        ("max_pool2d", lambda: (randn(b(32), 64, 112, 112, dtype=f16),),
         lambda x: F.max_pool2d(x, 3, 2, 1)),
        # A MobileNetV2 depthwise 3x3 over 144 channels at 56x56 with bias (PyTorch's own depthwise kernel).
        ("depthwise_conv", lambda: (randn(b(32), 144, 56, 56), randn(144, 1, 3, 3), randn(144)),
         lambda x, w, bias: F.conv2d(x, w, bias, padding=1, groups=144)),
        # The same block in half precision and channels_last, as mixed-precision training exports run it (cuDNN).
        ("depthwise_conv_cl", lambda: (randn(b(32), 144, 56, 56, dtype=f16).to(memory_format=torch.channels_last),
                                       randn(144, 1, 3, 3, dtype=f16)),
         lambda x, w: F.conv2d(x, w, None, padding=1, groups=144)),
        # Per-head products of 64x64 matrices in float32 (4096 = 64 sequences x 64 heads), e.g. linear
        # attention's k^T v; float32 matmuls run without TF32 unless the program allows it (the default).
        ("bmm", lambda: (randn(b(4096), 64, 64), randn(b(4096), 64, 64)),
         lambda x, y: torch.bmm(x, y)),
        # A tall-skinny product of rank-64 factors, as in a low-rank (LoRA-style) expansion: 32768 x 64 @ 64 x 4096.
        ("mm_skinny", lambda: (randn(b(32768), 64), randn(64, 4096)),
         lambda x, y: x @ y),
    ]
    return cases


def kjit_state():
    """Whether kjit's PyTorch adapter is in this process (it is loaded with torch's CUDA library)."""
    try:
        with open("/proc/self/maps") as maps:
            if "libkjit_torch_adapter.so" in maps.read():
                return "attached (libkjit_torch_adapter.so is loaded)"
    except OSError:
        pass
    if "libkjit_preload.so" in os.environ.get("LD_PRELOAD", ""):
        return "preloaded, but the PyTorch adapter is not loaded (KJIT_DISABLE, or KJIT_LOG=1 says why)"
    return "not in this process (run it under `kjit run -- python3 ...` to use kjit)"


def device_uuid(torch):
    """The UUID of the GPU the program ran on (torch >= 2.1), so that runs on several GPUs can be told apart."""
    try:
        return "GPU-" + str(torch.cuda.get_device_properties(torch.cuda.current_device()).uuid)
    except Exception:  # older torch, or no such property
        return ""


def main():
    parser = argparse.ArgumentParser(
        description="An unmodified PyTorch program using the ops kjit intercepts; prints time per call and "
                    "output checksums.",
        epilog="Run it twice under `kjit run -- python3 app.py`: see examples/shim_app/README.md.")
    parser.add_argument("--iters", type=int, default=100, help="timed calls per op and round (default 100)")
    parser.add_argument("--warmup", type=int, default=10, help="untimed calls per op first (default 10)")
    parser.add_argument("--rounds", type=int, default=1,
                        help="repeat the timed loop this many times, printing each round: a long run shows "
                             "kernels being hot-swapped in (default 1)")
    parser.add_argument("--pause-s", type=float, default=0,
                        help="sleep this long between rounds (default 0): a program that lives long enough for "
                             "kernels to be tuned and swapped in while it runs")
    parser.add_argument("--ops", default="", help="comma-separated subset of the ops (default: all)")
    parser.add_argument("--scale", type=int, default=1, help="divide batch sizes by this (smaller, faster runs)")
    parser.add_argument("--seed", type=int, default=0, help="input seed (default 0): same inputs, same checksums")
    parser.add_argument("--json", metavar="FILE", help="also write the results here as JSON")
    args = parser.parse_args()
    if args.iters < 1 or args.rounds < 1 or args.warmup < 0 or args.scale < 1 or args.pause_s < 0:
        parser.error("--iters, --rounds and --scale must be at least 1, --warmup and --pause-s at least 0")

    try:
        import torch
    except ImportError:
        print("app.py: this example needs PyTorch (`pip install torch`, a CUDA build)", file=sys.stderr)
        return 1
    if not torch.cuda.is_available():
        print(f"app.py: no CUDA device is available to PyTorch {torch.__version__}; this example needs an "
              "NVIDIA GPU. Nothing to do.", file=sys.stderr)
        return 0

    cases = make_cases(torch, args.scale)
    if args.ops:
        wanted = [o.strip() for o in args.ops.split(",") if o.strip()]
        unknown = sorted(set(wanted) - {name for name, _, _ in cases})
        if unknown:
            parser.error(f"unknown op(s) {', '.join(unknown)}; known: {', '.join(n for n, _, _ in cases)}")
        cases = [c for c in cases if c[0] in wanted]

    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}")
    print(f"kjit: {kjit_state()}")
    torch.manual_seed(args.seed)
    results = {}
    round_times = []
    started = time.perf_counter()
    with torch.inference_mode():
        inputs = {name: make() for name, make, _ in cases}
        torch.cuda.synchronize()
        first_calls = {}
        for name, _, fn in cases:
            # The first three warm-up calls one at a time, host wall time to completion: under kjit with a
            # kernel cached, the first is PyTorch's (the key's first sight), the second kjit's first launch
            # in this process (guarded: two stream synchronizations and a journal entry), the third a plain hit.
            for i in range(args.warmup):
                t0 = time.perf_counter() if i < 3 else 0
                fn(*inputs[name])
                if i < 3:
                    torch.cuda.synchronize()
                    first_calls.setdefault(name, []).append((time.perf_counter() - t0) * 1000.0)
        torch.cuda.synchronize()
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        for round_index in range(args.rounds):
            if round_index > 0 and args.pause_s > 0:
                time.sleep(args.pause_s)
            round_start = time.time()
            if args.rounds > 1:
                print(f"round {round_index + 1} of {args.rounds}")
            print(f"  {'op':<17} {'us/call':>10} {'checksum':>22}")
            for name, _, fn in cases:
                x = inputs[name]
                start.record()
                for _ in range(args.iters):
                    out = fn(*x)
                end.record()
                end.synchronize()
                us = start.elapsed_time(end) * 1000.0 / args.iters
                # float64 sum of the last call's output: a fingerprint to compare between runs.
                checksum = out.double().sum().item()
                nonfinite = (~torch.isfinite(out)).sum().item()
                results.setdefault(name, []).append({"us_per_call": us, "checksum": checksum,
                                                     "nonfinite": nonfinite, "dtype": str(out.dtype),
                                                     "shape": list(out.shape)})
                note = f"  ({nonfinite} non-finite)" if nonfinite else ""
                print(f"  {name:<17} {us:>10.1f} {checksum:>22.9e}{note}")
            # When each round ran (wall clock): whether kjitd's trials overlapped the program's work.
            round_times.append({"start_unix": round_start, "end_unix": time.time()})
    total = time.perf_counter() - started
    print(f"total {total:.2f} s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"torch": torch.__version__, "device": torch.cuda.get_device_name(),
                       "device_uuid": device_uuid(torch), "kjit": kjit_state(),
                       "iters": args.iters, "rounds": args.rounds, "scale": args.scale, "seed": args.seed,
                       "total_s": total, "round_times": round_times, "first_calls_ms": first_calls,
                       "ops": results}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
