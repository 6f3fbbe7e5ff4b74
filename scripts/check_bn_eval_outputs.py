#!/usr/bin/env python3
"""Does native_batch_norm in inference write save_mean/save_invstd? Run on the GPU machine.

Fills freed memory of the same size with a marker first: if the marker comes
back, PyTorch leaves these outputs unwritten (unspecified contents).
"""
import torch

x = torch.randn(8, 16, 32, 32, device="cuda", dtype=torch.half)
w, b, rm = (torch.randn(16, device="cuda", dtype=torch.half) for _ in range(3))
rv = torch.rand(16, device="cuda", dtype=torch.half) + 0.5
for marker in (1.5, -7.25):
    for _ in range(4):
        t = torch.full((16,), marker, device="cuda")
        del t
    out, save_mean, save_invstd = torch.ops.aten.native_batch_norm(x, w, b, rm, rv, False, 0.1, 1e-5)
    print(f"marker {marker}: save_mean[:4] = {save_mean[:4].tolist()}, save_invstd[:4] = {save_invstd[:4].tolist()}")
