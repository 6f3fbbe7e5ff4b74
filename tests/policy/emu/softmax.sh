#!/bin/bash
# A CPU check of the softmax family's generated kernels (as reduce.sh, with emu.h): each kernel is
# compiled with the host compiler and run one std::thread per CUDA thread, and its output compared
# with softmax / log_softmax in float64 (softmax_run.cc), NaN where PyTorch gives NaN, with normal
# rows, rows shifted by +100, and rows with NaN, +-Inf, -0.0 or wholly -Inf.
# It checks every strategy's indexing (warp, registers, staged in dynamic shared memory, online,
# cluster online and staged, uneven splits too, the column strategies), the scalar head and tail of
# rows VEC does not divide, unroll, vectors, hints, half_to_float; that every output element is written
# and nothing around the output, loads inside the input, loads and stores aligned, dynamic shared
# indices inside the launch's bytes; not NVRTC or timing. Not part of CI (host compiler, CUDA headers).
#
#   tests/policy/emu/softmax.sh [BUILD_DIR]     (BUILD_DIR: a configured build with kjit_policy built)
set -euo pipefail
source "$(dirname "$0")/emu_lib.sh"
emu_setup softmax_run.cc softmax_gen.cc "${1:-}"
# r NAME OP(softmax|log_softmax) DTYPE SIZES DIM HALF_TO_FLOAT KNOB=VALUE...   (row r of kind r % 5)
# warp per row: vectors, blocks of several warps past the last row, rows of one element
r w1 softmax f32 7,300 -1 0 strategy=0 threads=128 vec=4 hint=0 unroll=1 cluster=1
r w2 log_softmax f16 5,1000 -1 0 strategy=0 threads=64 vec=8 hint=1 unroll=1 cluster=1
r w3 softmax bf16 6,33 -1 1 strategy=0 threads=32 vec=1 hint=0 unroll=1 cluster=1
r w4 log_softmax f32 5,2048 1 0 strategy=0 threads=256 vec=4 hint=1 unroll=1 cluster=1
r w5 softmax f32 9,1 -1 0 strategy=0 threads=32 vec=1 hint=0 unroll=1 cluster=1
# block per row in registers
r g1 softmax f32 5,1000 -1 0 strategy=1 threads=128 vec=2 hint=0 unroll=1 cluster=1
r g2 log_softmax bf16 6,3000 -1 0 strategy=1 threads=256 vec=8 hint=1 unroll=1 cluster=1
r g3 softmax f16 5,4096 -1 1 strategy=1 threads=64 vec=4 hint=0 unroll=1 cluster=1
r g4 log_softmax f32 3,8000 1 0 strategy=1 threads=1024 vec=1 hint=0 unroll=1 cluster=1
# block per row staged in dynamic shared memory (s2: 80000 bytes)
r s1 softmax f32 5,5000 -1 0 strategy=2 threads=128 vec=4 hint=0 unroll=1 cluster=1
r s2 log_softmax f16 5,20000 -1 0 strategy=2 threads=256 vec=8 hint=1 unroll=1 cluster=1
r s3 softmax bf16 5,1000 -1 1 strategy=2 threads=64 vec=4 hint=0 unroll=1 cluster=1
# block per row online
r o1 softmax f32 5,4096 -1 0 strategy=3 threads=256 vec=4 unroll=4 hint=1 cluster=1
r o2 log_softmax f32 5,20000 -1 0 strategy=3 threads=1024 vec=2 unroll=2 hint=0 cluster=1
r o3 softmax bf16 6,777 -1 0 strategy=3 threads=64 vec=1 unroll=4 hint=0 cluster=1
r o4 log_softmax f16 5,3000 -1 1 strategy=3 threads=128 vec=4 unroll=1 hint=1 cluster=1
r o5 log_softmax f32 5000 0 0 strategy=3 threads=256 vec=4 unroll=2 hint=0 cluster=1
# rows whose length VEC does not divide (RAGGED): a scalar head and tail around whole vectors
r h1 softmax f32 7,1001 -1 0 strategy=2 threads=64 vec=4 hint=0 unroll=1 cluster=1
r h2 log_softmax f16 6,4099 -1 0 strategy=2 threads=128 vec=8 hint=1 unroll=1 cluster=1
r h3 softmax bf16 5,2051 -1 1 strategy=2 threads=256 vec=4 hint=1 unroll=1 cluster=1
r h4 softmax f32 6,3003 -1 0 strategy=3 threads=128 vec=4 unroll=2 hint=0 cluster=1
r h5 log_softmax bf16 5,1027 -1 0 strategy=3 threads=64 vec=8 unroll=4 hint=1 cluster=1
r h6 softmax f16 5,19999 -1 0 strategy=3 threads=512 vec=2 unroll=1 hint=1 cluster=1
# cluster per row, online (4) and staged in dynamic shared memory (5)
r c1 softmax f32 5,4096 -1 0 strategy=4 threads=128 vec=4 cluster=2 unroll=2 hint=1
r c2 log_softmax f16 3,16384 -1 0 strategy=4 threads=256 vec=8 cluster=8 unroll=4 hint=0
r c3 softmax bf16 5,6000 -1 1 strategy=4 threads=128 vec=2 cluster=4 unroll=1 hint=0
r c4 log_softmax f32 2,20000 -1 0 strategy=4 threads=512 vec=1 cluster=8 unroll=1 hint=1
r c5 softmax f32 5,8192 -1 0 strategy=5 threads=128 vec=4 cluster=4 unroll=1 hint=0
r c6 log_softmax bf16 3,20000 -1 0 strategy=5 threads=128 vec=8 cluster=2 unroll=1 hint=1
r c7 softmax f16 5,3072 -1 1 strategy=5 threads=128 vec=2 cluster=8 unroll=1 hint=1
# cluster rows that do not split evenly (whole vectors dealt out, the first blocks one more) and
# ragged ones (rank 0 takes the head and tail)
r u1 softmax f32 5,4100 -1 0 strategy=4 threads=128 vec=4 cluster=8 unroll=1 hint=0
r u2 log_softmax f16 5,9001 -1 0 strategy=4 threads=128 vec=8 cluster=4 unroll=2 hint=1
r u3 softmax f16 7,2055 -1 0 strategy=4 threads=128 vec=2 cluster=8 unroll=4 hint=0
r u4 softmax bf16 5,5003 -1 1 strategy=5 threads=128 vec=4 cluster=2 unroll=1 hint=0
r u5 log_softmax f32 3,20001 -1 0 strategy=5 threads=256 vec=2 cluster=8 unroll=1 hint=1
# strategy 4 with the second pass backwards (reverse=1): batches of UNROLL from the part's last vector, the
# rest one by one; even, uneven and ragged parts; per_sm reserves dynamic shared memory only
r b1 softmax f32 5,4096 -1 0 strategy=4 threads=128 vec=4 cluster=2 unroll=2 hint=1 reverse=1 per_sm=0
r b2 log_softmax f16 3,16384 -1 0 strategy=4 threads=256 vec=8 cluster=8 unroll=4 hint=0 reverse=1 per_sm=1
r b3 softmax bf16 5,6003 -1 1 strategy=4 threads=128 vec=2 cluster=4 unroll=4 hint=0 reverse=1 per_sm=2
r b4 log_softmax f32 3,20001 -1 0 strategy=4 threads=128 vec=4 cluster=16 unroll=1 hint=1 reverse=1 per_sm=0
r b5 softmax f32 4,9001 -1 0 strategy=4 threads=128 vec=1 cluster=8 unroll=4 hint=0 reverse=0 per_sm=1
# parts larger than a block's shared memory (EMU_MAX_SHARED bytes here, 227 KB on the H200): a block stages
# its part's first vectors (by bulk copies where a vector is 16 bytes: p1, p2, p5, p6 in two copies; blocks
# of 512 threads or fewer half an SM's worth) and reads the rest twice; uneven and ragged rows among them
EMU_MAX_SHARED=9216 r p1 softmax f32 3,20000 -1 0 strategy=5 threads=128 vec=4 cluster=2 unroll=2 hint=1
EMU_MAX_SHARED=9216 r p2 log_softmax bf16 3,40003 -1 0 strategy=5 threads=256 vec=8 cluster=4 unroll=1 hint=0
EMU_MAX_SHARED=9216 r p3 softmax f16 5,30001 -1 1 strategy=5 threads=128 vec=4 cluster=2 unroll=4 hint=1
EMU_MAX_SHARED=9216 r p4 log_softmax f32 3,50001 -1 0 strategy=5 threads=128 vec=2 cluster=8 unroll=1 hint=0
EMU_MAX_SHARED=9216 r p5 softmax f32 4,24004 -1 0 strategy=5 threads=512 vec=4 cluster=8 unroll=1 hint=0
EMU_MAX_SHARED=66560 r p6 log_softmax f32 3,70001 -1 0 strategy=5 threads=256 vec=4 cluster=2 unroll=4 hint=1
# parts held on chip (9): staged as far as a block's shared memory goes, the rest in registers (HOLD
# vectors a thread, the last ones partly past the part); bulk copies (q1, q2, q5), floats staged by the
# threads (q3, q4), clusters of 16 (q4, q5), ragged and uneven rows
EMU_MAX_SHARED=9216 r q1 softmax f32 3,20000 -1 0 strategy=9 threads=128 vec=4 cluster=2 unroll=1 hint=1
EMU_MAX_SHARED=9216 r q2 log_softmax bf16 3,40003 -1 0 strategy=9 threads=256 vec=8 cluster=4 unroll=1 hint=0
EMU_MAX_SHARED=9216 r q3 softmax f16 5,30001 -1 1 strategy=9 threads=128 vec=4 cluster=8 unroll=1 hint=0
EMU_MAX_SHARED=9216 r q4 log_softmax f32 3,50001 -1 0 strategy=9 threads=128 vec=2 cluster=16 unroll=1 hint=1
EMU_MAX_SHARED=3072 r q5 softmax f32 4,24004 -1 0 strategy=9 threads=128 vec=4 cluster=16 unroll=1 hint=0
# a thread per VEC columns, online (6) and in registers (7); column tiles over a block's warps (8)
r k1 softmax f32 3,100,40 1 0 strategy=6 threads=32 vec=4 unroll=4 hint=1 cluster=1
r k2 log_softmax f16 4,37,24 1 0 strategy=6 threads=64 vec=8 unroll=2 hint=0 cluster=1
r k3 softmax bf16 500,6 0 1 strategy=6 threads=128 vec=2 unroll=1 hint=0 cluster=1
r k4 softmax f32 5,10,33 1 0 strategy=7 threads=32 vec=1 unroll=1 hint=0 cluster=1
r k5 log_softmax bf16 3,16,64 1 0 strategy=7 threads=64 vec=4 unroll=1 hint=1 cluster=1
r k6 softmax f16 7,8,40 1 1 strategy=7 threads=32 vec=4 unroll=1 hint=0 cluster=1
r k7 softmax f32 4,300,64 1 0 strategy=8 threads=128 vec=4 unroll=2 hint=0 cluster=1
r k8 log_softmax f16 2,129,160 1 0 strategy=8 threads=256 vec=2 unroll=4 hint=1 cluster=1
r k9 softmax bf16 3,50,33 1 1 strategy=8 threads=64 vec=1 unroll=1 hint=0 cluster=1
r k10 softmax f32 2,40,50 1 0 strategy=8 threads=1024 vec=1 unroll=2 hint=0 cluster=1
exit $failed
