#!/usr/bin/env python3
"""PyTorch eager and torch.compile times for the design-space cases, on a GPU.

Run on the GPU machine (its python3 has torch):

    python3 scripts/torch_baselines.py --family softmax --json $OUT/torch-baselines.json

Each case is timed the way kjit's evaluator times kernels: CUDA events around
one call, the L2 cache flushed (a write of twice its size) before every run,
warm-up first, median and interquartile range of --runs runs. Eager and
compiled alternate within one loop so their ratio is taken in the same
conditions. Prints a markdown table; --json writes the figures for
benchmarks/RESULTS.md and for joining with kjit_tune_spaces' dataset (by key text).
"""
import argparse
import json
import statistics
import sys


def cases(torch, family):
    F = torch.nn.functional
    f32, f16, bf16 = torch.float32, torch.float16, torch.bfloat16
    out = []

    def add(fam, name, key_text, make, fn):
        if family in (None, fam):
            out.append((fam, name, key_text, make, fn))

    # The headroom cases and their neighbours, as benchmarks/tune_spaces.cc's HeadroomKeys lists them.
    for shape in [(4096, 16384), (2048, 16384), (8192, 16384), (4095, 16383),
                  (262144, 256), (131072, 256), (524288, 256), (262143, 255),
                  (64, 1048576), (32, 1048576), (128, 1048576), (64, 1000003)]:
        rows, cols = shape
        add("softmax", f"softmax f32 {rows}x{cols}", f"aten::_softmax(f32[{rows},{cols}], -1, False) sm_90",
            lambda r=rows, c=cols: (torch.randn(r, c, device="cuda"),), lambda x: torch.softmax(x, -1))
    for shape in [(65536, 1024), (32768, 1024), (131072, 1024), (65535, 1023)]:
        rows, cols = shape
        add("layer_norm", f"layer_norm f32 {rows}x{cols} affine", f"native_layer_norm f32[{rows},{cols}]",
            lambda r=rows, c=cols: (torch.randn(r, c, device="cuda"), torch.randn(c, device="cuda"),
                                    torch.randn(c, device="cuda")),
            lambda x, w, b: F.layer_norm(x, (x.shape[-1],), w, b))
    for shape in [(32, 64, 256, 256), (16, 64, 256, 256), (32, 64, 128, 128), (31, 64, 255, 255)]:
        add("group_norm", f"group_norm f32 {'x'.join(map(str, shape))} g8", f"native_group_norm f32{list(shape)} 8",
            lambda s=shape: (torch.randn(*s, device="cuda"),), lambda x: F.group_norm(x, 8))
        add("instance_norm", f"instance_norm f32 {'x'.join(map(str, shape))}", f"instance_norm f32{list(shape)}",
            lambda s=shape: (torch.randn(*s, device="cuda"),), lambda x: F.instance_norm(x))
    for op in ("cumsum", "cumprod"):
        for shape in [(4096, 32768), (2048, 32768), (8192, 32768), (4095, 32767)]:
            rows, cols = shape
            add("scan", f"{op} f32 {rows}x{cols} dim 1", f"aten::{op}(f32[{rows},{cols}], 1, None) sm_90",
                lambda r=rows, c=cols: (torch.randn(r, c, device="cuda"),),
                lambda x, f=getattr(torch, op): f(x, 1))
    # Pooling: kernel 3, stride 2, padding 1. kjit serves the ops with indices (max_pool2d/3d without
    # them reach the same CUDA op, which computes them anyway), so eager and torch.compile are asked for
    # the indices too: otherwise Inductor would skip them and the comparison would not be like for like.
    def pool_text(op, shape, rest):  # as OpKey::ToString writes the key
        return f"aten::{op}(f32[{','.join(map(str, shape))}], {rest}) sm_90"
    for shape in [(32, 64, 256, 256), (16, 64, 256, 256), (64, 64, 256, 256), (31, 64, 255, 255)]:
        add("pool", f"max_pool2d f32 {'x'.join(map(str, shape))} k3 s2 p1",
            pool_text("max_pool2d_with_indices", shape, "[3, 3], [2, 2], [1, 1], [1, 1], False"),
            lambda s=shape: (torch.randn(*s, device="cuda"),),
            lambda x: F.max_pool2d(x, 3, 2, 1, return_indices=True))
    volumes = [(16, 32, 64, 128, 128), (8, 32, 64, 128, 128), (32, 32, 64, 128, 128), (15, 32, 63, 127, 127)]
    for shape in volumes:
        add("pool", f"max_pool3d f32 {'x'.join(map(str, shape))} k3 s2 p1",
            pool_text("max_pool3d_with_indices", shape, "[3, 3, 3], [2, 2, 2], [1, 1, 1], [1, 1, 1], False"),
            lambda s=shape: (torch.randn(*s, device="cuda"),),
            lambda x: F.max_pool3d(x, 3, 2, 1, return_indices=True))
    for shape in volumes:
        add("pool", f"avg_pool3d f32 {'x'.join(map(str, shape))} k3 s2 p1",
            pool_text("avg_pool3d", shape, "[3, 3, 3], [2, 2, 2], [1, 1, 1], False, True, None"),
            lambda s=shape: (torch.randn(*s, device="cuda"),), lambda x: F.avg_pool3d(x, 3, 2, 1))
    # Reductions of 128x4096x512 and neighbours: sum over dims 1 and 2, argmax over dim 1, amax over dim 0.
    shapes = [(128, 4096, 512), (64, 4096, 512), (256, 4096, 512), (127, 4095, 511)]
    def reduce_text(op, shape, rest):  # as OpKey::ToString writes the key
        return f"aten::{op}(f32[{','.join(map(str, shape))}], {rest}) sm_90"
    for dim in (1, 2):
        for shape in shapes:
            add("reduce", f"sum f32 {'x'.join(map(str, shape))} dim {dim}",
                reduce_text("sum.dim_IntList", shape, f"[{dim}], False, None"),
                lambda s=shape: (torch.randn(*s, device="cuda"),), lambda x, d=dim: torch.sum(x, d))
    for shape in shapes:
        add("reduce", f"argmax f32 {'x'.join(map(str, shape))} dim 1", reduce_text("argmax", shape, "1, False"),
            lambda s=shape: (torch.randn(*s, device="cuda"),), lambda x: torch.argmax(x, 1))
    for shape in shapes:
        add("reduce", f"amax f32 {'x'.join(map(str, shape))} dim 0", reduce_text("amax", shape, "[0], False"),
            lambda s=shape: (torch.randn(*s, device="cuda"),), lambda x: torch.amax(x, 0))
    # Depthwise convolution 3x3, padding 1, with bias (nn.Conv2d's default): float32 NCHW reaches
    # aten::_conv_depthwise2d (channels_last and most float16 NCHW calls reach cudnn_convolution instead).
    for shape in [(32, 128, 128, 128), (16, 128, 128, 128), (64, 128, 128, 128), (31, 128, 127, 127)]:
        n, c, h, w = shape
        add("depthwise_conv", f"depthwise conv 3x3 f32 {'x'.join(map(str, shape))} bias",
            f"aten::_conv_depthwise2d(f32[{n},{c},{h},{w}], f32[{c},1,3,3], [3, 3], f32[{c}], [1, 1], [1, 1], [1, 1]) sm_90",
            lambda s=shape: (torch.randn(*s, device="cuda"), torch.randn(s[1], 1, 3, 3, device="cuda"),
                             torch.randn(s[1], device="cuda")),
            lambda x, wt, b: F.conv2d(x, wt, b, 1, 1, 1, x.shape[1]))
    # Small and skinny float32 matrix products, TF32 off (PyTorch's default; main() sets it).
    for shape in [(4096, 64, 64, 64), (2048, 64, 64, 64), (8192, 64, 64, 64), (4095, 63, 63, 63)]:
        b, m, k, n = shape
        add("matmul", f"bmm f32 {b}x({m}x{k} @ {k}x{n})",
            f"aten::bmm(f32[{b},{m},{k}], f32[{b},{k},{n}]) sm_90",
            lambda b=b, m=m, k=k, n=n: (torch.randn(b, m, k, device="cuda"), torch.randn(b, k, n, device="cuda")),
            lambda x, y: torch.bmm(x, y))
    for shape in [(32768, 64, 32768), (16384, 64, 16384), (32768, 128, 32768), (32767, 63, 32767)]:
        m, k, n = shape
        add("matmul", f"mm f32 {m}x{k} @ {k}x{n}", f"aten::mm(f32[{m},{k}], f32[{k},{n}]) sm_90",
            lambda m=m, k=k, n=n: (torch.randn(m, k, device="cuda"), torch.randn(k, n, device="cuda")),
            lambda x, y: torch.mm(x, y))
    # Backward ops, as the backward families' sample keys (policy/<family>/<family>.cc SampleKeys) call them:
    # eager is the aten op itself; torch.compile compiles the same call (Inductor decomposes it and fuses the
    # pieces). Gradients and saved outputs are made as autograd would hand them over.
    aten = torch.ops.aten
    for dt, shape, log, dim in [(f32, (4096, 1024), False, -1), (f32, (2048, 16384), False, -1),
                                (bf16, (8192, 32000), True, -1), (f16, (16, 12, 128, 128), False, -1),
                                (f32, (32, 1000, 64), False, 1)]:
        op = aten._log_softmax_backward_data if log else aten._softmax_backward_data
        name = "log_softmax" if log else "softmax"
        add("softmax_backward", f"{name}_backward {str(dt)[6:]} {'x'.join(map(str, shape))} dim {dim}",
            f"aten::_{name}_backward_data {str(dt)[6:]}{list(shape)} dim {dim}",
            lambda s=shape, t=dt, d=dim, lg=log: (
                torch.randn(*s, device="cuda", dtype=t),
                (torch.log_softmax if lg else torch.softmax)(torch.randn(*s, device="cuda", dtype=t), d)),
            lambda g, y, o=op, d=dim, t=dt: o(g, y, d, t))

    def norm_stats(x, n, rms):
        xf = x.float().reshape(-1, n)
        rstd = torch.rsqrt(((xf * xf).mean(1) if rms else xf.var(1, unbiased=False)) + 1e-5)
        shape = list(x.shape[:-1]) + [1]
        return xf.mean(1).reshape(shape), rstd.reshape(shape)

    for dt, shape, mask in [(f32, (8192, 768), (True, True, True)), (bf16, (16, 512, 1024), (True, True, True)),
                            (f16, (4096, 4096), (True, True, True)), (f32, (2048, 1024), (True, False, False))]:
        n = shape[-1]

        def make_ln(s=shape, t=dt, n=n):
            x = torch.randn(*s, device="cuda", dtype=t)
            mean, rstd = norm_stats(x, n, False)
            return (torch.randn(*s, device="cuda", dtype=t), x, mean, rstd, torch.randn(n, device="cuda", dtype=t),
                    torch.randn(n, device="cuda", dtype=t))
        add("layer_norm_backward",
            f"layer_norm_backward {str(dt)[6:]} {'x'.join(map(str, shape))} grads {''.join('xwb'[i] for i in range(3) if mask[i])}",
            f"aten::native_layer_norm_backward {str(dt)[6:]}{list(shape)} {list(map(int, mask))}", make_ln,
            lambda g, x, mean, rstd, w, b, n=n, m=mask: aten.native_layer_norm_backward(g, x, [n], mean, rstd, w, b,
                                                                                       list(m)))
    for dt, shape in [(bf16, (8192, 4096))]:
        n = shape[-1]

        def make_rms(s=shape, t=dt, n=n):
            x = torch.randn(*s, device="cuda", dtype=t)
            _, rstd = norm_stats(x, n, True)
            return (torch.randn(*s, device="cuda", dtype=t), x, rstd, torch.randn(n, device="cuda", dtype=t))
        add("layer_norm_backward", f"rms_norm_backward {str(dt)[6:]} {'x'.join(map(str, shape))} grads xw",
            f"aten::_fused_rms_norm_backward {str(dt)[6:]}{list(shape)} [1, 1]", make_rms,
            lambda g, x, rstd, w, n=n: aten._fused_rms_norm_backward(g, x, [n], rstd, w, [True, True]))
    for dt, shape, groups in [(f32, (16, 128, 64, 64), 32), (f16, (8, 320, 32, 32), 32), (bf16, (4, 64, 96, 96), 8)]:
        n, c = shape[0], shape[1]
        hxw = 1
        for d in shape[2:]:
            hxw *= d

        def make_gn(s=shape, t=dt, g=groups):
            x = torch.randn(*s, device="cuda", dtype=t)
            xf = x.float().reshape(s[0], g, -1)
            mean = xf.mean(2)
            rstd = torch.rsqrt(xf.var(2, unbiased=False) + 1e-5)
            return (torch.randn(*s, device="cuda", dtype=t), x, mean.to(t), rstd.to(t),
                    torch.randn(s[1], device="cuda", dtype=t))
        add("group_norm_backward", f"group_norm_backward {str(dt)[6:]} {'x'.join(map(str, shape))} g{groups} grads xwb",
            f"aten::native_group_norm_backward {str(dt)[6:]}{list(shape)} {groups}", make_gn,
            lambda g, x, mean, rstd, w, n=n, c=c, hw=hxw, gr=groups: aten.native_group_norm_backward(
                g, x, mean, rstd, w, n, c, hw, gr, [True, True, True]))
    # Pooling's backward (pool_backward): a ResNet stem's max pool, a video network's 3-D max pool (k3 s2 p1 over
    # 16 x 56 x 56), a DenseNet transition's average pool.
    for dt, shape in [(f32, (32, 64, 112, 112)), (f16, (32, 64, 112, 112)), (f32, (8, 32, 16, 56, 56)),
                      (f16, (8, 32, 16, 56, 56))]:
        nd = len(shape) - 2
        pool, backward = (F.max_pool3d, aten.max_pool3d_with_indices_backward) if nd == 3 else \
            (F.max_pool2d, aten.max_pool2d_with_indices_backward)

        def make_mp(s=shape, t=dt, pool=pool):
            x = torch.randn(*s, device="cuda", dtype=t)
            y, idx = pool(x, 3, 2, 1, return_indices=True)
            return torch.randn_like(y), x, idx
        add("pool_backward", f"max_pool{nd}d_backward {str(dt)[6:]} {'x'.join(map(str, shape))} k3 s2 p1",
            f"aten::max_pool{nd}d_with_indices_backward {str(dt)[6:]}{list(shape)} k3 s2 p1", make_mp,
            lambda g, x, idx, b=backward, nd=nd: b(g, x, [3] * nd, [2] * nd, [1] * nd, [1] * nd, False, idx))
    for dt, shape in [(f32, (32, 256, 56, 56)), (bf16, (32, 256, 56, 56))]:
        def make_ap(s=shape, t=dt):
            x = torch.randn(*s, device="cuda", dtype=t)
            return torch.randn(s[0], s[1], s[2] // 2, s[3] // 2, device="cuda", dtype=t), x
        add("pool_backward", f"avg_pool2d_backward {str(dt)[6:]} {'x'.join(map(str, shape))} k2 s2",
            f"aten::avg_pool2d_backward {str(dt)[6:]}{list(shape)} k2 s2", make_ap,
            lambda g, x: aten.avg_pool2d_backward(g, x, [2, 2], [2, 2], [0, 0], False, True, None))
    # 3-D average pooling's backward: a video network's k2 s2 (no overlap) and an overlapping k3 s2 p1.
    for dt, shape, k, st, pad in [(f32, (4, 64, 8, 28, 28), 2, 2, 0), (f16, (4, 64, 8, 28, 28), 3, 2, 1)]:
        def make_ap3(s=shape, t=dt, k=k, st=st, pad=pad):
            x = torch.randn(*s, device="cuda", dtype=t)
            return torch.randn_like(F.avg_pool3d(x, k, st, pad)), x
        add("pool_backward", f"avg_pool3d_backward {str(dt)[6:]} {'x'.join(map(str, shape))} k{k} s{st} p{pad}",
            f"aten::avg_pool3d_backward {str(dt)[6:]}{list(shape)} k{k} s{st} p{pad}", make_ap3,
            lambda g, x, k=k, st=st, pad=pad: aten.avg_pool3d_backward(g, x, [k] * 3, [st] * 3, [pad] * 3, False, True,
                                                                       None))
    # A depthwise convolution's backward (depthwise_conv_backward): MobileNet's 3x3 (padding 1, every gradient) and a
    # conv1d's causal 4-tap kernel (padding 3), through aten::convolution_backward as autograd calls it.
    for dt, shape, k, pad in [(f32, (32, 128, 128, 128), (3, 3), (1, 1)), (bf16, (32, 128, 128, 128), (3, 3), (1, 1)),
                              (f32, (8, 256, 1024), (4,), (3,))]:
        c = shape[1]
        out_shape = shape[:2] + tuple(s + 2 * p - kk + 1 for s, p, kk in zip(shape[2:], pad, k))

        def make_dw(s=shape, t=dt, c=c, k=k, o=out_shape):
            return (torch.randn(*o, device="cuda", dtype=t), torch.randn(*s, device="cuda", dtype=t),
                    torch.randn(c, 1, *k, device="cuda", dtype=t))
        ones, zeros = [1] * len(k), [0] * len(k)
        add("depthwise_conv_backward",
            f"depthwise_conv_backward {str(dt)[6:]} {'x'.join(map(str, shape))} k{'x'.join(map(str, k))} grads xwb",
            f"aten::convolution_backward {str(dt)[6:]}{list(shape)} k{list(k)}", make_dw,
            lambda g, x, wt, c=c, p=list(pad), o=ones, z=zeros: aten.convolution_backward(
                g, x, wt, [c], o, p, o, False, z, c, [True, True, True]))
    # Elementwise chains (elementwise_chain's sample keys): eager runs each op as a kernel, torch.compile fuses.
    import math
    def gelu(x):  # minGPT's NewGELU
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))
    for dt, shape in [(f32, (8192, 3072)), (bf16, (8192, 3072)), (f16, (64, 1024, 768))]:
        add("elementwise_chain", f"tanh-GELU (minGPT) {str(dt)[6:]} {'x'.join(map(str, shape))}",
            f"gelu {str(dt)[6:]}{list(shape)}", lambda s=shape, t=dt: (torch.randn(*s, device="cuda", dtype=t),), gelu)
    add("elementwise_chain", "SiLU as x * sigmoid(x) bf16 8192x4096", "silu bf16[8192, 4096]",
        lambda: (torch.randn(8192, 4096, device="cuda", dtype=bf16),), lambda x: x * torch.sigmoid(x))
    add("elementwise_chain", "RMS norm's tail w * (h.float() * r).to(bf16) 8192x4096", "rms tail bf16[8192, 4096]",
        lambda: (torch.randn(8192, 4096, device="cuda", dtype=bf16), torch.randn(8192, 4096, device="cuda"),
                 torch.randn(8192, 4096, device="cuda", dtype=bf16)),
        lambda h, r, w: w * (h.to(torch.float32) * r).to(bf16))
    add("elementwise_chain", "(x - 0.5 * y) / 3 f32 16777216", "axpy-div f32[16777216]",
        lambda: (torch.randn(1 << 24, device="cuda"), torch.randn(1 << 24, device="cuda")),
        lambda x, y: torch.sub(x, y, alpha=0.5) / 3)
    return out


def time_pair(torch, fns, args, runs, flush):
    start = [torch.cuda.Event(enable_timing=True) for _ in range(2 * runs)]
    end = [torch.cuda.Event(enable_timing=True) for _ in range(2 * runs)]
    for fn in fns:  # warm-up (and compile)
        for _ in range(3):
            fn(*args)
    torch.cuda.synchronize()
    for i in range(runs):
        order = [0, 1] if i % 2 == 0 else [1, 0]
        for which in order:
            flush.zero_()
            k = 2 * i + which
            start[k].record()
            fns[which](*args)
            end[k].record()
    torch.cuda.synchronize()
    times = [[start[2 * i + w].elapsed_time(end[2 * i + w]) * 1000 for i in range(runs)] for w in (0, 1)]

    def summary(t):
        q = statistics.quantiles(t, n=4)
        return {"median_us": statistics.median(t), "iqr_us": q[2] - q[0], "runs": len(t)}

    return summary(times[0]), summary(times[1])


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--family", help="only this family (softmax, layer_norm, group_norm, instance_norm, scan, pool, "
                   "reduce, depthwise_conv, matmul, softmax_backward, layer_norm_backward, group_norm_backward, pool_backward, "
                   "depthwise_conv_backward, elementwise_chain)")
    p.add_argument("--runs", type=int, default=100)
    p.add_argument("--cases-only", action="store_true",
                   help="only the headroom table's cases, not their neighbours (the first of each group of four)")
    p.add_argument("--json", help="write the results here")
    a = p.parse_args()
    import torch
    if not torch.cuda.is_available():
        print("torch_baselines: no CUDA device", file=sys.stderr)
        return 2
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    flush = torch.empty(2 * l2 // 4, dtype=torch.float32, device="cuda")
    results = []
    print("| case | eager us | IQR | compile us | IQR | compile/eager |\n|---|---:|---:|---:|---:|---:|")
    chosen = cases(torch, a.family)
    if a.cases_only:
        firsts = {}
        for c in chosen:
            firsts.setdefault(c[0], []).append(c)
        chosen = [c for group in firsts.values() for i, c in enumerate(group) if i % 4 == 0]
    for fam, name, key_text, make, fn in chosen:
        args = make()
        # A fresh Dynamo state and static shapes per case: the cases share code
        # objects, and Dynamo would otherwise recompile them with dynamic shapes
        # (or fall back to eager past its recompile limit).
        torch._dynamo.reset()
        compiled = torch.compile(fn, dynamic=False)
        with torch.no_grad():
            eager, comp = time_pair(torch, [fn, compiled], args, a.runs, flush)
        results.append({"family": fam, "case": name, "key_text": key_text, "eager": eager, "compile": comp})
        print(f"| {name} | {eager['median_us']:.1f} | {eager['iqr_us']:.1f} | {comp['median_us']:.1f} | "
              f"{comp['iqr_us']:.1f} | {comp['median_us'] / eager['median_us']:.2f} |", flush=True)
        del args
        torch.cuda.empty_cache()
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"torch": torch.__version__, "device": torch.cuda.get_device_name(0), "results": results}, f,
                      indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
