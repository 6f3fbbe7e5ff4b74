#!/bin/bash
# A CPU check of the depthwise_conv family's generated kernels (as pool.sh, with emu.h): each kernel is
# compiled with the host compiler and run one std::thread per CUDA thread, and its output compared
# bitwise with PyTorch's conv_depthwise2d forward loop transcribed (depthwise_conv_run.cc): taps in
# (kernel row, kernel column) order as fused multiply-adds from the bias, padding taps skipped, NaN/Inf
# in input, weight and bias for _conv_depthwise2d. It checks the index arithmetic, windows, padding,
# stride, dilation, edges, partial tiles, staging and stores of every strategy and layout; not NVRTC,
# the CUDA memory model or timing. Not part of CI (host compiler and CUDA headers at run time).
#
#   tests/policy/emu/depthwise_conv.sh [BUILD_DIR]     (BUILD_DIR: a configured build with kjit_policy built)
set -euo pipefail
source "$(dirname "$0")/emu_lib.sh"
emu_setup depthwise_conv_run.cc depthwise_conv_gen.cc "${1:-}"
# r NAME OP(native|cudnn) DTYPE LAYOUT(c|cl) N,C,H,W KH,KW SH,SW PH,PW DH,DW BIAS KNOB=VALUE...
# _conv_depthwise2d, NCHW: direct, blocked and staged; outs and rows that leave partial tiles; stores of
# several elements; stride, dilation, a 3x5 kernel, a 7x7 kernel over long rows, 1x1, one-column rows,
# windows wholly in the padding (dilation 4 over 6x7: outputs that are the bias alone)
r a1 native f32 c 2,3,13,16 3,3 1,1 1,1 1,1 1 strategy=0 threads=64 outs=2 rows=1 vec=1 hint=0
r a2 native f32 c 2,3,13,16 3,3 1,1 1,1 1,1 1 strategy=1 threads=64 outs=4 rows=4 vec=1 hint=0
r a3 native f32 c 2,3,13,16 3,3 1,1 1,1 1,1 1 strategy=2 threads=64 outs=4 rows=4 vec=4 hint=1
r a4 native bf16 c 2,4,17,19 5,5 2,2 2,2 1,1 0 strategy=1 threads=64 outs=2 rows=2 vec=1 hint=0
r a5 native f16 c 2,3,17,19 3,5 1,2 2,2 2,1 1 strategy=2 threads=64 outs=2 rows=2 vec=1 hint=0
r a6 native f16 c 2,3,17,20 3,5 1,2 2,2 2,1 1 strategy=2 threads=64 outs=8 rows=4 vec=4 hint=0
r a7 native f32 c 1,2,9,300 7,7 1,1 3,3 1,1 1 strategy=1 threads=64 outs=4 rows=2 vec=1 hint=0
r a8 native f32 c 2,4,9,9 1,1 2,2 0,0 1,1 0 strategy=0 threads=64 outs=1 rows=1 vec=1 hint=0
r a9 native bf16 c 3,6,40,1 3,1 1,1 1,0 1,1 1 strategy=1 threads=64 outs=1 rows=8 vec=1 hint=0
r a10 native f32 c 1,2,6,7 3,3 1,1 4,4 4,4 1 strategy=1 threads=64 outs=2 rows=2 vec=1 hint=0
r a11 native f32 c 2,3,13,16 3,3 1,1 1,1 1,1 1 strategy=2 threads=64 outs=8 rows=8 vec=2 hint=0
r a12 native f16 c 2,3,13,16 3,3 2,2 1,1 1,1 0 strategy=0 threads=64 outs=4 rows=1 vec=1 hint=1
# stride 2 with dilation 2 along H under 4 output rows a thread (input rows no output uses are skipped)
r a13 native f32 c 1,2,20,11 3,3 2,1 2,1 2,1 1 strategy=1 threads=64 outs=2 rows=4 vec=1 hint=0
r a14 native bf16 c 1,2,20,16 3,3 2,1 2,1 2,1 1 strategy=2 threads=64 outs=2 rows=4 vec=8 hint=0
# slide (strategy 3): vector loads of each row segment, halo columns by shuffle; warps spanning
# several row tiles and planes (narrow rows), rows longer than a warp (halo loads at the warp edges),
# odd widths (element loads, a partial last group), stride 2, dilation and a 3x5 kernel, no padding,
# windows wholly in the padding, partial row tiles, 16 and 32 rows a thread, a 7x7 kernel, one-column rows
r s1 native f32 c 2,3,13,16 3,3 1,1 1,1 1,1 1 strategy=3 threads=64 outs=4 rows=4 vec=4 hint=0
r s2 native f32 c 1,2,27,27 3,3 1,1 1,1 1,1 1 strategy=3 threads=64 outs=4 rows=8 vec=1 hint=1
r s3 native f32 c 1,2,10,200 3,3 1,1 1,1 1,1 0 strategy=3 threads=64 outs=4 rows=4 vec=4 hint=0
r s4 native f32 c 1,3,20,21 3,3 2,2 1,1 1,1 1 strategy=3 threads=64 outs=4 rows=2 vec=1 hint=0
r s5 native bf16 c 1,3,20,48 3,3 2,2 1,1 1,1 1 strategy=3 threads=64 outs=4 rows=4 vec=8 hint=1
r s6 native f16 c 2,3,17,20 3,5 1,1 2,2 2,1 1 strategy=3 threads=64 outs=8 rows=4 vec=4 hint=0
r s7 native f32 c 1,2,12,12 3,3 1,1 0,0 1,1 1 strategy=3 threads=64 outs=4 rows=2 vec=4 hint=0
r s8 native f32 c 1,2,6,7 3,3 1,1 4,4 4,4 1 strategy=3 threads=64 outs=2 rows=2 vec=1 hint=0
r s9 native bf16 c 2,4,33,64 3,3 1,1 1,1 1,1 0 strategy=3 threads=128 outs=8 rows=16 vec=8 hint=1
r s10 native f32 c 1,3,70,32 3,3 1,1 1,1 1,1 1 strategy=3 threads=64 outs=4 rows=32 vec=4 hint=0
r s11 native f32 c 1,2,9,300 7,7 1,1 3,3 1,1 1 strategy=3 threads=64 outs=4 rows=2 vec=4 hint=0
r s12 native bf16 c 3,6,40,1 3,1 1,1 1,0 1,1 1 strategy=3 threads=64 outs=1 rows=8 vec=1 hint=0
r s13 native f16 c 1,2,20,37 5,5 1,1 2,2 1,1 1 strategy=3 threads=64 outs=2 rows=8 vec=1 hint=0
r s14 cudnn f16 c 2,32,12,12 3,3 1,1 1,1 1,1 0 strategy=3 threads=64 outs=8 rows=4 vec=4 hint=0
# expert defaults: the headroom shape's (slide), a wide kernel's, and with bias absent; an odd width's
r d4 native f32 c 1,2,127,127 3,3 1,1 1,1 1,1 1
r d5 native bf16 c 2,4,56,56 3,3 1,1 1,1 1,1 0
r d1 native f32 c 2,4,16,16 3,3 1,1 1,1 1,1 1
r d2 native bf16 c 1,3,12,33 5,5 1,1 2,2 1,1 0
# cudnn_convolution: channels_last (direct and blocked, channel vectors, dilation, stride), and NCHW fp16
r b1 cudnn f32 cl 2,8,9,10 3,3 1,1 1,1 1,1 0 strategy=1 threads=64 outs=2 rows=2 vec=4 hint=0
r b2 cudnn bf16 cl 2,24,15,15 5,5 2,2 2,2 1,1 0 strategy=0 threads=64 outs=2 rows=1 vec=8 hint=1
r b3 cudnn f16 cl 2,40,9,11 3,3 1,1 2,2 2,2 0 strategy=1 threads=64 outs=4 rows=4 vec=2 hint=0
r b4 cudnn f16 c 2,32,12,12 3,3 1,1 1,1 1,1 0 strategy=2 threads=64 outs=4 rows=2 vec=4 hint=0
r b5 cudnn f32 cl 1,6,7,5 3,3 2,1 1,1 1,1 0 strategy=0 threads=64 outs=1 rows=1 vec=2 hint=0
r d3 cudnn f32 cl 2,16,8,8 3,3 1,1 1,1 1,1 0
exit $failed
