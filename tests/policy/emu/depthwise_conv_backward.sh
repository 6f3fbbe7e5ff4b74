#!/bin/bash
# A CPU check of the depthwise_conv_backward family's generated kernels (as depthwise_conv.sh, with emu.h): each
# kernel is compiled with the host compiler and run one std::thread per CUDA thread, and its outputs compared with
# PyTorch's loops transcribed (depthwise_conv_backward_run.cc): grad_input and PyTorch-order grad_weight bit for
# bit, the channel-block grad_weight and grad_bias against double sums within float32 summation's bound; NaN,
# +-Inf and -0.0 in every input but float16's. It checks the index arithmetic, the taps' exact-quotient rule,
# padding, stride, dilation, edges, partial vectors, the emulation of PyTorch's block at every thread count, the
# output mask and the block layout of the grid; not NVRTC, the CUDA memory model or timing. Not part of CI (host
# compiler and CUDA headers at run time).
#
#   tests/policy/emu/depthwise_conv_backward.sh [BUILD_DIR]     (BUILD_DIR: a configured build with kjit_policy built)
set -euo pipefail
source "$(dirname "$0")/emu_lib.sh"
emu_setup depthwise_conv_backward_run.cc depthwise_conv_backward_gen.cc "${1:-}"
# r NAME DTYPE SIZES KERNEL STRIDE PADDING DILATION MASK KNOB=VALUE...
# Every gradient, PyTorch's order: 3x3 padding 1 at each thread count (PyTorch's 2 warps played by 2 to 8 warps:
# idle ones; 9 samples: 8 warps, one with two samples), outs with a partial last vector.
r a1 f32 2,3,9,10 3,3 1,1 1,1 1,1 111 threads=64 outs=2 wstrategy=0 hint=0
r a2 f32 9,2,6,7 3,3 1,1 1,1 1,1 111 threads=256 outs=4 wstrategy=0 hint=1
r a3 f32 9,2,6,7 3,3 1,1 1,1 1,1 111 threads=64 outs=1 wstrategy=0 hint=0
# Stride 2 (taps whose quotient is not exact), dilation, a 3x5 kernel, odd sizes; bfloat16 and float16.
r b1 bf16 2,4,17,19 5,5 2,2 2,2 1,1 111 threads=64 outs=2 wstrategy=0 hint=0
r b2 f16 3,3,17,19 3,5 1,2 2,2 2,1 111 threads=64 outs=4 wstrategy=0 hint=0
r b3 f32 1,2,20,11 3,3 2,1 2,1 2,1 111 threads=64 outs=1 wstrategy=1 hint=0
# A block per channel (wstrategy 1) with and without the bias, and threads past the channel's positions.
r c1 f32 4,3,12,12 3,3 1,1 1,1 1,1 111 threads=128 outs=2 wstrategy=1 hint=0
r c2 bf16 2,5,9,9 7,7 1,1 3,3 1,1 110 threads=512 outs=1 wstrategy=1 hint=0
r c3 f32 2,3,5,5 3,3 1,1 1,1 1,1 011 threads=256 outs=1 wstrategy=1 hint=0
# Parts of the mask: the input's gradient only, the bias alone, weight and bias in PyTorch's order.
r d1 f32 2,8,9,9 1,1 2,2 0,0 1,1 100 threads=64 outs=2 wstrategy=0 hint=0
r d2 f16 2,4,6,8 3,3 1,1 1,1 1,1 001 threads=64 outs=1 wstrategy=0 hint=0
r d3 bf16 3,6,40,1 3,1 1,1 1,0 1,1 011 threads=64 outs=1 wstrategy=0 hint=0
# Windows wholly in the padding (dilation 4 over 6x7), a kernel larger than 64 taps (PyTorch's order only).
r e1 f32 1,2,6,7 3,3 1,1 4,4 4,4 111 threads=64 outs=2 wstrategy=1 hint=0
r e2 f32 2,2,12,12 9,9 1,1 4,4 1,1 111 threads=64 outs=4 wstrategy=0 hint=0
# conv1d: a causal 4-tap kernel (padding 3) and a strided one, as PyTorch views them ([N, C, 1, L]).
r f1 f32 3,4,50 4 1 3 1 111 threads=64 outs=4 wstrategy=0 hint=0
r f2 bf16 2,3,33 5 2 2 2 111 threads=128 outs=2 wstrategy=1 hint=0
# Expert defaults.
r g1 f32 4,8,16,16 3,3 1,1 1,1 1,1 111
r g2 bf16 2,16,14,14 5,5 2,2 2,2 1,1 110
r g3 f16 8,4,10,33 3,3 1,1 1,1 1,1 011
exit $failed
