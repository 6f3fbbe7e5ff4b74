#!/usr/bin/env python3
"""Which aten ops PyTorch eager calls on CUDA for the normalization layers, and what they return.

Run on the GPU machine:  python3 scripts/which_aten_ops.py
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
    main()
