#!/bin/bash
# A CPU check of the pool family's generated kernels (as run.sh for the scan family, with emu.h):
# each kernel is compiled with the host compiler and run one std::thread per CUDA thread, and its
# outputs compared with PyTorch's CUDA pooling loops transcribed (pool_run.cc): max pooling bitwise
# on values and indices, average pooling to 1e-6. It checks the index arithmetic, windows, padding,
# dilation, ceil_mode, NaN and tie rules, staging and sliding of every strategy; not NVRTC or timing.
# Not part of CI (host compiler and CUDA headers at run time).
#
#   tests/policy/emu/pool.sh [BUILD_DIR]     (BUILD_DIR: a configured build with kjit_policy built)
set -euo pipefail
source "$(dirname "$0")/emu_lib.sh"
emu_setup pool_run.cc pool_gen.cc "${1:-}"
# r NAME OP DTYPE LAYOUT SIZES K S P D CEIL CIP DIV KNOB=VALUE...
m2=aten::max_pool2d_with_indices m3=aten::max_pool3d_with_indices a2=aten::avg_pool2d a3=aten::avg_pool3d
# max 2-D contiguous: direct and staged, outs, rows, vectors along W, dilation, ceil_mode, odd sizes
r m1 $m2 f32 c 2,3,13,16 3,3 2,2 1,1 1,1 0 1 -1 strategy=0 threads=64 outs=2 vec=1 rows=1 hint=1
r m2 $m2 f32 c 2,3,13,16 3,3 2,2 1,1 1,1 0 1 -1 strategy=1 threads=64 outs=1 vec=4 rows=2 hint=0
r m3 $m2 bf16 c 3,2,17,19 3,2 2,1 1,0 2,1 1 1 -1 strategy=1 threads=64 outs=4 vec=1 rows=4 hint=1
r m4 $m2 f16 c 2,2,11,24 2,3 1,2 1,1 3,2 1 1 -1 strategy=1 threads=64 outs=2 vec=8 rows=1 hint=0
r m5 $m2 f32 c 3,1,5 1,2 1,1 0,1 1,6 0 1 -1 strategy=0 threads=64 outs=1 vec=1 rows=1 hint=0
r m6 $m2 f32 c 2,3,1,301 1,4 1,3 0,2 1,1 1 1 -1 strategy=0 threads=64 outs=4 vec=1 rows=1 hint=0
r m7 $m2 f16 c 2,3,1,300 1,2 1,2 0,1 1,301 0 1 -1 strategy=1 threads=64 outs=1 vec=4 rows=1 hint=0
# max 2-D channels_last
r n1 $m2 f16 cl 2,16,9,10 3,3 2,2 1,1 1,1 0 1 -1 strategy=0 threads=64 outs=1 vec=8 rows=1 hint=0
r n2 $m2 f32 cl 2,12,9,10 2,3 1,2 1,1 2,1 1 1 -1 strategy=0 threads=64 outs=2 vec=4 rows=1 hint=1
r n3 $m2 bf16 cl 1,6,4,300 1,2 1,2 0,1 1,301 0 1 -1 strategy=0 threads=64 outs=1 vec=2 rows=1 hint=0
# max 3-D
r t1 $m3 f32 c 2,3,7,8,9 3,3,3 2,2,2 1,1,1 1,1,1 0 1 -1 strategy=1 threads=64 outs=1 vec=1 rows=2 hint=0 frames=1
r t2 $m3 f16 c 5,7,9,8 2 2 0 1 1 1 -1 strategy=0 threads=64 outs=2 vec=1 rows=1 hint=1 frames=1
r t3 $m3 bf16 cl 2,16,9,10,11 2,3,3 2,2,1 1,1,1 1,2,1 1 1 -1 strategy=0 threads=64 outs=1 vec=4 rows=1 hint=0 frames=1
r t4 $m3 f32 c 1,2,6,7,8 3,2,3 1,2,2 1,1,1 2,1,2 1 1 -1 strategy=1 threads=64 outs=2 vec=4 rows=1 hint=0 frames=1
# avg 2-D: padding counted or not, divisor_override, ceil_mode, channels_last, 1-D
r v1 $a2 f32 c 2,3,13,15 3,3 2,2 1,1 - 1 0 -1 strategy=1 threads=64 outs=1 vec=1 rows=4 hint=0
r v2 $a2 f32 c 2,3,13,15 3,3 2,2 1,1 - 1 1 -1 strategy=0 threads=64 outs=2 vec=1 rows=1 hint=0
r v3 $a2 bf16 cl 2,24,7,7 2,3 2,2 1,1 - 0 1 5 strategy=0 threads=64 outs=1 vec=8 rows=1 hint=0
r v4 $a2 f16 c 2,4,1,301 1,3 1,2 0,1 - 1 1 -1 strategy=1 threads=64 outs=4 vec=1 rows=1 hint=1
# avg 3-D
r w1 $a3 f16 c 2,3,9,10,11 3 1,2,2 1 - 0 0 -1 strategy=1 threads=64 outs=2 vec=1 rows=2 hint=0 frames=1
r w2 $a3 bf16 c 4,5,6,7 2,2,3 2 1,0,1 - 1 1 7 strategy=0 threads=64 outs=1 vec=1 rows=1 hint=0 frames=1
r w3 $a3 f32 c 1,2,7,8,12 3,3,3 2,2,2 1,1,1 - 1 1 -1 strategy=1 threads=64 outs=1 vec=4 rows=1 hint=0 frames=1
# sliding (strategy 2): segments of rows read once, vectors along W with scalar head and tail, row and
# frame tiles, partial groups (scalar stores) and whole ones (vector stores, paired indices), odd sizes
# (vec 1), dilation, ceil_mode, empty windows, each dtype; and the expert default of a 3-D key
r s1 $m2 f32 c 2,3,13,16 3,3 2,2 1,1 1,1 0 1 -1 strategy=2 threads=64 outs=2 vec=4 rows=2 hint=1 frames=1
r s2 $m2 f32 c 2,3,15,15 3,3 2,2 1,1 1,1 0 1 -1 strategy=2 threads=64 outs=2 vec=1 rows=4 hint=1 frames=1
r s3 $m2 f32 c 2,2,14,16 3,3 2,2 1,1 1,1 1 1 -1 strategy=2 threads=64 outs=4 vec=4 rows=4 hint=0 frames=1
r s4 $m2 bf16 c 3,2,17,24 3,2 2,1 1,0 2,1 1 1 -1 strategy=2 threads=64 outs=4 vec=4 rows=2 hint=0 frames=1
r s5 $m2 f16 c 2,2,11,24 2,3 1,2 1,1 3,2 1 1 -1 strategy=2 threads=64 outs=2 vec=4 rows=2 hint=0 frames=1
r s6 $m2 f32 c 2,3,1,301 1,4 1,3 0,2 1,1 1 1 -1 strategy=2 threads=64 outs=4 vec=1 rows=1 hint=0 frames=1
r s7 $m2 f32 c 3,1,5 1,2 1,1 0,1 1,6 0 1 -1 strategy=2 threads=64 outs=1 vec=1 rows=1 hint=0 frames=1
r s8 $m3 f32 c 1,2,7,15,15 3,3,3 2,2,2 1,1,1 1,1,1 0 1 -1 strategy=2 threads=64 outs=2 vec=1 rows=2 hint=1 frames=2
r s9 $m3 f32 c 2,3,7,8,12 3,3,3 2,2,2 1,1,1 1,1,1 0 1 -1 strategy=2 threads=64 outs=2 vec=4 rows=2 hint=0 frames=2
r s10 $m3 f16 c 5,7,9,8 2 2 0 1 1 1 -1 strategy=2 threads=64 outs=2 vec=2 rows=2 hint=0 frames=2
r s11 $m3 bf16 c 1,2,6,7,8 3,2,3 1,2,2 1,1,1 2,1,2 1 1 -1 strategy=2 threads=64 outs=2 vec=4 rows=2 hint=0 frames=4
r s12 $m3 f32 c 1,2,9,16,16 3,3,3 2,2,2 1,1,1 1,1,1 0 1 -1
r s13 $m2 f32 c 2,3,18,32 3,3 2,2 1,1 1,1 0 1 -1
r s14 $m2 f32 c 2,3,17,17 3,3 2,2 1,1 1,1 0 1 -1
r a1 $a2 f32 c 2,3,13,15 3,3 2,2 1,1 - 1 0 -1 strategy=2 threads=64 outs=2 vec=1 rows=4 hint=0 frames=1
r a2 $a2 f16 c 2,3,14,16 3,3 2,2 1,1 - 1 1 5 strategy=2 threads=64 outs=2 vec=4 rows=2 hint=1 frames=1
r a3 $a3 f32 c 1,2,7,8,12 3,3,3 2,2,2 1,1,1 - 1 1 -1 strategy=2 threads=64 outs=2 vec=4 rows=2 hint=0 frames=2
r a4 $a3 bf16 c 4,5,6,8 2,2,3 2 1,0,1 - 1 1 7 strategy=2 threads=64 outs=2 vec=4 rows=2 hint=0 frames=2
r a5 $a3 f16 c 2,3,9,10,12 3 1,2,2 1 - 0 0 -1 strategy=2 threads=64 outs=4 vec=4 rows=1 hint=0 frames=4
r a6 $a3 f32 c 1,2,9,15,15 3,3,3 2,2,2 1,1,1 - 0 1 -1
# sliding with aligned vectors whatever the row alignment (codegen 3): odd widths (127, 255, 63, 5, 1)
# and inputs starting off a 16-byte boundary (offset=K elements), so each row's segment sits at its
# own offset from a vector boundary; the first and last vectors of the tensor clipped (the harness
# fails any load outside the input's bytes or misaligned); stride 1 and 2, padding, dilation,
# ceil_mode, NaN (max inputs mix in NaN, +-Inf, -0.0 and ties), each dtype; and the expert defaults
# of odd 3-D keys
r o1 $m2 f32 c 2,3,13,127 3,3 2,2 1,1 1,1 0 1 -1 strategy=2 threads=64 outs=2 vec=4 rows=2 hint=0 frames=1
r o2 $m2 f32 c 2,3,9,255 3,3 2,2 1,1 1,1 0 1 -1 strategy=2 threads=64 outs=2 vec=4 rows=4 hint=1 frames=1 offset=1
r o3 $m2 f32 c 2,3,11,63 3,3 1,1 1,1 1,1 0 1 -1 strategy=2 threads=64 outs=2 vec=4 rows=2 hint=0 frames=1 offset=3
r o4 $m2 f32 c 3,2,9,5 3,3 2,2 1,1 1,1 1 1 -1 strategy=2 threads=64 outs=1 vec=4 rows=1 hint=0 frames=1 offset=2
r o5 $m2 f32 c 2,3,7,1 3,1 1,1 1,0 1,1 0 1 -1 strategy=2 threads=64 outs=1 vec=4 rows=2 hint=0 frames=1 offset=1
r o6 $m2 f32 c 2,3,13,127 3,3 2,2 1,1 2,2 1 1 -1 strategy=2 threads=64 outs=4 vec=4 rows=1 hint=1 frames=1 offset=3
r o7 $m2 f16 c 2,3,11,63 3,3 2,2 1,1 1,1 0 1 -1 strategy=2 threads=64 outs=2 vec=8 rows=2 hint=0 frames=1 offset=3
r o8 $m2 bf16 c 2,3,9,127 2,3 1,2 1,1 2,1 1 1 -1 strategy=2 threads=64 outs=4 vec=4 rows=2 hint=0 frames=1 offset=5
r o9 $m2 f32 c 2,3,9,127 3,3 1,1 1,1 1,1 0 1 -1 strategy=2 threads=64 outs=1 vec=2 rows=1 hint=0 frames=1 offset=1
r o10 $m3 f32 c 1,2,7,15,127 3,3,3 2,2,2 1,1,1 1,1,1 0 1 -1 strategy=2 threads=128 outs=2 vec=4 rows=1 hint=1 frames=2
r o11 $m3 f32 c 2,2,5,9,63 3,3,3 2,2,2 1,1,1 1,1,1 0 1 -1 strategy=2 threads=64 outs=2 vec=4 rows=2 hint=0 frames=2 offset=1
r o12 $m3 f32 c 1,3,6,7,5 3,3,3 1,1,1 1,1,1 1,2,1 1 1 -1 strategy=2 threads=64 outs=1 vec=4 rows=1 hint=0 frames=4 offset=2
r o13 $m3 f32 c 1,2,5,5,1 3,3,1 1,1,1 1,1,0 1,1,1 0 1 -1 strategy=2 threads=64 outs=1 vec=4 rows=1 hint=0 frames=2 offset=3
r o14 $m3 f16 c 1,2,5,9,63 3,3,3 2,2,2 1,1,1 1,1,1 1 1 -1 strategy=2 threads=64 outs=2 vec=8 rows=2 hint=0 frames=2 offset=1
r o15 $m3 f32 c 1,2,7,15,127 3,3,3 2,2,2 1,1,1 1,1,1 0 1 -1
r o16 $m3 f32 c 1,2,7,15,127 3,3,3 2,2,2 1,1,1 1,1,1 0 1 -1 offset=1
r q1 $a2 f32 c 2,3,13,127 3,3 2,2 1,1 - 1 0 -1 strategy=2 threads=64 outs=2 vec=4 rows=2 hint=0 frames=1 offset=1
r q2 $a2 f32 c 2,3,9,63 3,3 1,1 1,1 - 0 1 -1 strategy=2 threads=64 outs=4 vec=4 rows=1 hint=0 frames=1 offset=3
r q3 $a2 f16 c 2,2,7,255 2,3 2,2 1,1 - 1 1 5 strategy=2 threads=64 outs=2 vec=8 rows=2 hint=1 frames=1 offset=7
r q4 $a3 f32 c 1,2,7,15,127 3,3,3 2,2,2 1,1,1 - 0 1 -1 strategy=2 threads=128 outs=2 vec=4 rows=2 hint=0 frames=4
r q5 $a3 f32 c 2,2,5,9,63 3,3,3 2,2,2 1,1,1 - 1 0 -1 strategy=2 threads=64 outs=2 vec=4 rows=2 hint=0 frames=2 offset=2
r q6 $a3 bf16 c 1,2,5,7,5 3,3,3 1,1,1 1,1,1 - 0 1 -1 strategy=2 threads=64 outs=1 vec=4 rows=1 hint=0 frames=2 offset=1
r q7 $a3 f32 c 1,2,5,5,1 3,3,1 1,1,1 1,1,0 - 0 0 -1 strategy=2 threads=64 outs=1 vec=4 rows=2 hint=0 frames=2 offset=3
r q8 $a3 f32 c 1,2,7,15,127 3,3,3 2,2,2 1,1,1 - 0 1 -1
# even widths through the same loads: an input off a 16-byte boundary, a step (outs x stride) no vector
# divides; and the codegen-2 loads (SEG_FIXED) from a storage offset that keeps the alignment
r e1 $m2 f32 c 2,3,13,16 3,3 2,2 1,1 1,1 0 1 -1 strategy=2 threads=64 outs=2 vec=4 rows=2 hint=1 frames=1 offset=1
r e2 $m3 f32 c 2,3,7,8,12 3,3,3 2,2,2 1,1,1 1,1,1 0 1 -1 strategy=2 threads=64 outs=2 vec=4 rows=2 hint=0 frames=2 offset=2
r e3 $m2 f32 c 2,3,13,16 3,3 2,2 1,1 1,1 0 1 -1 strategy=2 threads=64 outs=1 vec=4 rows=2 hint=0 frames=1
r e4 $a3 f32 c 1,2,7,8,12 3,3,3 2,2,2 1,1,1 - 1 1 -1 strategy=2 threads=64 outs=2 vec=4 rows=2 hint=0 frames=2 offset=3
r e5 $m2 f32 c 2,3,13,16 3,3 2,2 1,1 1,1 0 1 -1 strategy=2 threads=64 outs=2 vec=4 rows=2 hint=1 frames=1 offset=4
# warp rows (strategy 3): a warp's 32 lanes read each input row's segment under their groups in
# coalesced scalar loads and exchange columns by shuffles (emu.h runs a warp's shuffles in lock step);
# odd widths (127, 63, 17, 5, 1, 301), groups padded to whole warps (idle lanes), storage offsets, stride
# 1 and 2 (steps dividing 32: the exchange's rounds of one shuffle a column group), padding, dilation,
# ceil_mode, NaN and ties, each dtype, 2-D and 3-D, max and avg
r u1 $m2 f32 c 2,3,13,127 3,3 2,2 1,1 1,1 0 1 -1 strategy=3 threads=64 outs=2 vec=1 rows=2 hint=0 frames=1
r u2 $m2 f32 c 2,3,9,63 3,3 2,2 1,1 1,1 0 1 -1 strategy=3 threads=128 outs=1 vec=1 rows=4 hint=1 frames=1 offset=1
r u3 $m2 f32 c 3,2,9,17 3,3 2,2 1,1 1,1 1 1 -1 strategy=3 threads=64 outs=2 vec=1 rows=1 hint=0 frames=1 offset=3
r u4 $m2 f32 c 3,2,7,5 3,3 1,1 1,1 1,1 0 1 -1 strategy=3 threads=64 outs=4 vec=1 rows=2 hint=0 frames=1 offset=2
r u5 $m2 f32 c 2,3,7,1 3,1 1,1 1,0 1,1 0 1 -1 strategy=3 threads=64 outs=1 vec=1 rows=2 hint=0 frames=1 offset=1
r u6 $m2 f32 c 2,3,13,127 3,3 2,2 1,1 2,2 1 1 -1 strategy=3 threads=64 outs=2 vec=1 rows=1 hint=1 frames=1 offset=3
r u7 $m2 f16 c 2,3,11,63 3,3 2,2 1,1 1,1 0 1 -1 strategy=3 threads=64 outs=2 vec=1 rows=2 hint=0 frames=1 offset=3
r u8 $m2 bf16 c 2,3,9,127 2,3 1,2 1,1 2,1 1 1 -1 strategy=3 threads=64 outs=4 vec=1 rows=2 hint=0 frames=1 offset=5
r u9 $m2 f32 c 2,3,1,301 1,4 1,3 0,2 1,1 1 1 -1 strategy=3 threads=64 outs=2 vec=1 rows=1 hint=0 frames=1
r u10 $m2 f32 c 2,3,5,301 3,3 2,2 1,1 1,1 1 1 -1 strategy=3 threads=64 outs=1 vec=1 rows=1 hint=0 frames=1 offset=1
r u11 $m3 f32 c 1,2,7,15,127 3,3,3 2,2,2 1,1,1 1,1,1 0 1 -1 strategy=3 threads=128 outs=2 vec=1 rows=2 hint=1 frames=2
r u12 $m3 f32 c 1,2,7,15,127 3,3,3 2,2,2 1,1,1 1,1,1 0 1 -1 strategy=3 threads=128 outs=2 vec=1 rows=2 hint=0 frames=1
r u13 $m3 f32 c 2,2,5,9,63 3,3,3 2,2,2 1,1,1 1,1,1 0 1 -1 strategy=3 threads=64 outs=1 vec=1 rows=2 hint=0 frames=1 offset=1
r u14 $m3 f32 c 1,3,6,7,5 3,3,3 1,1,1 1,1,1 1,2,1 1 1 -1 strategy=3 threads=64 outs=1 vec=1 rows=1 hint=0 frames=4 offset=2
r u15 $m3 f32 c 1,2,5,5,1 3,3,1 1,1,1 1,1,0 1,1,1 0 1 -1 strategy=3 threads=64 outs=1 vec=1 rows=1 hint=0 frames=2 offset=3
r u16 $m3 f16 c 1,2,5,9,63 3,3,3 2,2,2 1,1,1 1,1,1 1 1 -1 strategy=3 threads=64 outs=2 vec=1 rows=2 hint=0 frames=2 offset=1
r y1 $a2 f32 c 2,3,13,127 3,3 2,2 1,1 - 1 0 -1 strategy=3 threads=64 outs=2 vec=1 rows=2 hint=0 frames=1 offset=1
r y2 $a2 f32 c 2,3,9,63 3,3 1,1 1,1 - 0 1 -1 strategy=3 threads=64 outs=4 vec=1 rows=1 hint=0 frames=1 offset=3
r y3 $a2 f16 c 2,2,7,255 2,3 2,2 1,1 - 1 1 5 strategy=3 threads=64 outs=2 vec=1 rows=2 hint=1 frames=1 offset=7
r y4 $a3 f32 c 1,2,7,15,127 3,3,3 2,2,2 1,1,1 - 0 1 -1 strategy=3 threads=128 outs=2 vec=1 rows=2 hint=0 frames=4
r y5 $a3 f32 c 2,2,5,9,63 3,3,3 2,2,2 1,1,1 - 1 0 -1 strategy=3 threads=64 outs=2 vec=1 rows=2 hint=0 frames=2 offset=2
r y6 $a3 bf16 c 1,2,5,7,5 3,3,3 1,1,1 1,1,1 - 0 1 -1 strategy=3 threads=64 outs=1 vec=1 rows=1 hint=0 frames=2 offset=1
r y7 $a3 f32 c 1,2,5,5,1 3,3,1 1,1,1 1,1,0 - 0 0 -1 strategy=3 threads=64 outs=1 vec=1 rows=2 hint=0 frames=2 offset=3
# a step (outs x stride) that does not divide 32 (u9 too): the exchange's general path
r y8 $a2 f32 c 2,3,9,100 3,3 2,3 1,1 - 1 0 -1 strategy=3 threads=64 outs=1 vec=1 rows=2 hint=0 frames=1 offset=1
r u17 $m3 f32 c 1,2,5,7,50 3,3,3 1,1,3 1,1,1 1,1,1 1 1 -1 strategy=3 threads=64 outs=2 vec=1 rows=1 hint=0 frames=2 offset=2
exit $failed
