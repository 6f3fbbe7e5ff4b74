#!/usr/bin/env python3
"""Which aten ops PyTorch eager calls on CUDA for the normalization layers (or, with --conv, depthwise
convolution), and what they return.

Run on the GPU machine:  python3 scripts/which_aten_ops.py [--conv]
Prints, per case, every op that reaches the backend (below autograd and the
CompositeImplicit decompositions, i.e. what a CUDA-kernel override sees), with
argument and output dtypes, shapes and strides. Design-space families must
serve these ops, with these output dtypes.
"""
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_map


def desc(x):
    if isinstance(x, torch.Tensor):
        return f"{str(x.dtype).replace('torch.', '')}{list(x.shape)}s{list(x.stride())}"
    return repr(x)


class Log(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        a = ", ".join(str(tree_map(desc, v)) for v in args)
        o = tree_map(desc, out)
        print(f"    {func}({a}) -> {o}")
        return out


def depthwise_conv():
    """conv2d with groups == channels under no_grad: which op (_conv_depthwise2d or cudnn_convolution) each
    dtype, layout, kernel, stride and dilation reaches, and what cuDNN's float32 result is made of."""
    F = torch.nn.functional
    dev = "cuda"
    print("torch", torch.__version__, "cudnn", torch.backends.cudnn.version(), torch.cuda.get_device_name())
    print("cudnn.allow_tf32", torch.backends.cudnn.allow_tf32, "matmul.allow_tf32", torch.backends.cuda.matmul.allow_tf32)
    cl = torch.channels_last
    for dt in (torch.float32, torch.float16, torch.bfloat16):
        for name, n, c, h, w, k, s, p, d, fmt, wfmt, bias in [
            ("headroom 3x3", 32, 128, 128, 128, 3, 1, 1, 1, None, None, True),
            ("3x3 no bias", 4, 64, 56, 56, 3, 1, 1, 1, None, None, False),
            ("5x5 stride 2", 4, 256, 56, 56, 5, 2, 2, 1, None, None, True),
            ("5x5 stride 2, 64 channels", 4, 64, 56, 56, 5, 2, 2, 1, None, None, True),
            ("7x7", 4, 64, 28, 28, 7, 1, 3, 1, None, None, True),
            ("3x3 dilation 2", 4, 64, 56, 56, 3, 1, 2, 2, None, None, True),
            ("3x3 16 channels", 4, 16, 56, 56, 3, 1, 1, 1, None, None, True),
            ("3x5 kernel", 4, 64, 56, 56, (3, 5), 1, (1, 2), 1, None, None, True),
            ("channels_last 3x3", 4, 64, 56, 56, 3, 1, 1, 1, cl, cl, True),
            ("channels_last input only", 4, 64, 56, 56, 3, 1, 1, 1, cl, None, False),
            ("channels_last weight only", 4, 64, 56, 56, 3, 1, 1, 1, None, cl, False),
            ("channels_last dilation 2", 4, 64, 56, 56, 3, 1, 2, 2, cl, cl, False),
        ]:
            kh, kw = (k, k) if isinstance(k, int) else k
            x = torch.randn(n, c, h, w, device=dev, dtype=dt)
            wt = torch.randn(c, 1, kh, kw, device=dev, dtype=dt)
            b = torch.randn(c, device=dev, dtype=dt) if bias else None
            if fmt is not None:
                x = x.to(memory_format=fmt)
            if wfmt is not None:
                wt = wt.to(memory_format=wfmt)
            # A TorchDispatchMode sees aten::convolution (CompositeExplicitAutograd, above the backend
            # choice); the profiler sees the ops _convolution calls below it, which are what the shim overrides.
            try:
                with torch.no_grad(), torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
                    y = F.conv2d(x, wt, b, s, p, d, c)
                skip = {"aten::conv2d", "aten::convolution", "aten::_convolution", "aten::empty", "aten::empty_strided",
                        "aten::resize_", "aten::view", "aten::reshape", "aten::as_strided", "aten::expect_contiguous"}
                ops = dict.fromkeys(e.name for e in prof.events() if e.name.startswith("aten::") and e.name not in skip)
                print(f"F.conv2d depthwise {name} [{dt}] x{list(x.stride())} w{list(wt.stride())}: "
                      f"{', '.join(ops)} -> out{list(y.stride())}")
            except Exception as e:  # noqa
                print(f"F.conv2d depthwise {name} [{dt}]: error:", str(e).splitlines()[0])
    # Does cuDNN's float32 depthwise result change with allow_tf32 (TF32 arithmetic)? Error against float64.
    x = torch.randn(8, 64, 56, 56, device=dev).to(memory_format=cl)
    wt = torch.randn(64, 1, 3, 3, device=dev).to(memory_format=cl)
    exact = F.conv2d(x.double(), wt.double(), None, 1, 1, 1, 64)
    for tf32 in (False, True):
        torch.backends.cudnn.allow_tf32 = tf32
        with torch.no_grad():
            y = torch.ops.aten.cudnn_convolution(x, wt, [1, 1], [1, 1], [1, 1], 64, False, False, tf32)
        err = (y.double() - exact).abs().max().item()
        print(f"cudnn_convolution f32 channels_last allow_tf32={tf32}: max |err| vs float64 {err:.3e}")
    torch.backends.cudnn.allow_tf32 = True
    # Padding taps: skipped (as _conv_depthwise2d does) or multiplied as zeros (then an Inf weight makes the
    # border outputs NaN)? Decides whether NaN/Inf inputs are meaningful for each op.
    for dt in (torch.float32, torch.float16):
        x = torch.ones(1, 32, 8, 8, device=dev, dtype=dt)
        wt = torch.ones(32, 1, 3, 3, device=dev, dtype=dt)
        wt[:, :, 0, 0] = float("inf")
        with torch.no_grad():
            a = torch.ops.aten._conv_depthwise2d(x, wt, [3, 3], None, [1, 1], [1, 1], [1, 1])
            b = torch.ops.aten.cudnn_convolution(x, wt, [1, 1], [1, 1], [1, 1], 32, False, False, False)
            c = torch.ops.aten.cudnn_convolution(x.to(memory_format=cl), wt.to(memory_format=cl), [1, 1], [1, 1],
                                                 [1, 1], 32, False, False, False)
        print(f"Inf weight at a padding tap [{dt}]: _conv_depthwise2d corner {a[0, 0, 0, 0].item()}, "
              f"cudnn nchw {b[0, 0, 0, 0].item()}, cudnn channels_last {c[0, 0, 0, 0].item()}, "
              f"interior {a[0, 0, 4, 4].item()} {b[0, 0, 4, 4].item()}")
        # Bitwise agreement of _conv_depthwise2d with an FMA chain in (kh, kw) order from the bias.
        x = torch.randn(2, 32, 16, 16, device=dev, dtype=dt)
        wt = torch.randn(32, 1, 3, 3, device=dev, dtype=dt)
        bias = torch.randn(32, device=dev, dtype=dt)
        with torch.no_grad():
            a = torch.ops.aten._conv_depthwise2d(x, wt, [3, 3], bias, [1, 1], [1, 1], [1, 1])
            xp = torch.nn.functional.pad(x.float(), (1, 1, 1, 1))
            acc = bias.float().view(1, -1, 1, 1).expand(2, 32, 16, 16).clone()
            for i in range(3):
                for j in range(3):
                    acc = torch.addcmul(acc, xp[:, :, i:i + 16, j:j + 16], wt.float()[:, :, i, j].view(1, -1, 1, 1))
        print(f"  _conv_depthwise2d vs an unfused multiply-add chain in (kh, kw) order [{dt}]: "
              f"{(a.float() != acc.to(dt).float()).sum().item()} of {a.numel()} differ, max |d| "
              f"{(a.float() - acc.to(dt).float()).abs().max().item():.3e}")


def main():
    F = torch.nn.functional
    dev = "cuda"
    print("torch", torch.__version__, "cudnn", torch.backends.cudnn.version(), torch.cuda.get_device_name())
    for dt in (torch.float32, torch.float16, torch.bfloat16):
        x = torch.randn(8, 16, 32, 32, device=dev, dtype=dt)
        w = torch.randn(16, device=dev, dtype=dt)
        b = torch.randn(16, device=dev, dtype=dt)
        rm = torch.randn(16, device=dev, dtype=dt)
        rv = torch.rand(16, device=dev, dtype=dt) + 0.5
        wf, bf, rmf, rvf = (t.float() for t in (w, b, rm, rv))
        cases = [
            ("F.batch_norm eval, params same dtype", lambda: F.batch_norm(x, rm, rv, w, b, False)),
            ("F.batch_norm eval, params f32", lambda: F.batch_norm(x, rmf, rvf, wf, bf, False)),
            ("F.batch_norm eval, no affine", lambda: F.batch_norm(x, rm, rv, None, None, False)),
            ("F.batch_norm eval, channels_last", lambda: F.batch_norm(x.to(memory_format=torch.channels_last), rm, rv, w, b, False)),
            ("F.batch_norm eval, 2-D input", lambda: F.batch_norm(x[:, :, 0, 0], rm, rv, w, b, False)),
            ("F.batch_norm train (no running stats)", lambda: F.batch_norm(x, None, None, w, b, True)),
            ("F.instance_norm", lambda: F.instance_norm(x)),
            ("F.instance_norm affine", lambda: F.instance_norm(x, weight=w, bias=b)),
            ("F.instance_norm affine f32 params", lambda: F.instance_norm(x, weight=wf, bias=bf)),
            ("F.group_norm", lambda: F.group_norm(x, 4)),
            ("F.group_norm affine", lambda: F.group_norm(x, 4, w, b)),
            ("F.group_norm affine f32 params", lambda: F.group_norm(x, 4, wf, bf)),
            ("F.group_norm channels_last", lambda: F.group_norm(x.to(memory_format=torch.channels_last), 4, w, b)),
            ("F.layer_norm", lambda: F.layer_norm(x, (32,), w.repeat(2), b.repeat(2))),
            ("F.rms_norm", lambda: F.rms_norm(x, (32,), w.repeat(2))),
            ("F.rms_norm eps", lambda: F.rms_norm(x, (32,), w.repeat(2), 1e-6)),
        ]
        for name, fn in cases:
            for grad in (False,):
                print(f"{name} [{dt}]")
                try:
                    with torch.no_grad(), Log():
                        fn()
                except Exception as e:  # noqa
                    print("    error:", str(e).splitlines()[0])
    bn = torch.nn.BatchNorm2d(16).cuda().eval()
    print("nn.BatchNorm2d eval [float32]")
    with torch.no_grad(), Log():
        bn(torch.randn(8, 16, 32, 32, device=dev))
    bn = bn.half()
    print("nn.BatchNorm2d eval .half()")
    with torch.no_grad(), Log():
        bn(torch.randn(8, 16, 32, 32, device=dev, dtype=torch.half))
    print("nn.InstanceNorm2d(16) [float32]")
    with torch.no_grad(), Log():
        torch.nn.InstanceNorm2d(16).cuda()(torch.randn(8, 16, 32, 32, device=dev))
    print("nn.InstanceNorm2d(16, affine=True) [float32]")
    with torch.no_grad(), Log():
        torch.nn.InstanceNorm2d(16, affine=True).cuda()(torch.randn(8, 16, 32, 32, device=dev))
    print("batch_norm eval, batch 70000 (above cuDNN's eval limit)")
    with torch.no_grad(), Log():
        F.batch_norm(torch.randn(70000, 4, 2, 2, device=dev), torch.zeros(4, device=dev), torch.ones(4, device=dev),
                     torch.ones(4, device=dev), torch.zeros(4, device=dev), False)
    print("profiler view of nn.BatchNorm2d eval (to see the kernels)")
    with torch.no_grad(), torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA,
                                                            torch.profiler.ProfilerActivity.CPU]) as prof:
        bn.float()(torch.randn(8, 16, 32, 32, device=dev))
        torch.cuda.synchronize()
    for e in prof.key_averages():
        print("   ", e.key)


if __name__ == "__main__":
    import sys
    depthwise_conv() if "--conv" in sys.argv[1:] else main()
