#!/bin/bash
# A CPU check of the reduce family's generated kernels (as pool.sh, with emu.h): each kernel is
# compiled with the host compiler and run one std::thread per CUDA thread, and its outputs compared
# with PyTorch's reductions transcribed (reduce_run.cc): argmax/argmin indices and amax/amin values
# exactly, with ties, NaN, +-Inf, -0.0 and all-infinite slices; sums, means (PyTorch's factor) and
# products against float64. It checks every strategy's indexing, tails, unroll, vectors, the warp,
# block and cluster combinations, and the split strategy's workspace (zero again after each run, a
# second run on it the same); not NVRTC or timing. Not part of CI (host compiler and CUDA
# headers at run time).
#
#   tests/policy/emu/reduce.sh [BUILD_DIR]     (BUILD_DIR: a configured build with kjit_policy built)
set -euo pipefail
source "$(dirname "$0")/emu_lib.sh"
emu_setup reduce_run.cc reduce_gen.cc "${1:-}"
# r NAME OP DTYPE SIZES DIMS KEEPDIM DTYPE_ARG KNOB=VALUE...
# warp per row: vectors, unroll with tails, every op and dtype
r w1 argmax f32 37,301 1 0 none strategy=0 threads=128 vec=1 unroll=4 hint=1 cluster=1
r w2 amax f16 9,1000 -1 0 none strategy=0 threads=64 vec=8 unroll=2 cluster=1
r w3 sum bf16 5,4,96 2 1 none strategy=0 threads=32 vec=4 unroll=1 cluster=1
r w4 mean f32 6,3,50 1,2 0 none strategy=0 threads=64 vec=2 unroll=2 cluster=1
r w5 argmin bf16 11,64 1 1 none strategy=0 threads=128 vec=8 unroll=1 cluster=1
r w6 prod f32 7,333 1 0 none strategy=0 threads=64 vec=1 unroll=8 cluster=1
r w7 amin f32 20,1 1 0 none strategy=0 threads=32 vec=1 unroll=1 cluster=1
r w8 sum f16 3,700 1 0 f32 strategy=0 threads=64 vec=4 unroll=2 cluster=1
# rows whose length the vector does not divide: a scalar head and tail around whole vectors
r s1 argmax f32 37,301 1 0 none strategy=0 threads=128 vec=4 unroll=2 cluster=1
r s2 amin f16 9,1023 -1 0 none strategy=0 threads=64 vec=8 unroll=4 cluster=1
r s3 sum bf16 5,7,45 2 1 none strategy=0 threads=32 vec=8 unroll=1 cluster=1
r s4 argmin bf16 13,37 1 1 none strategy=0 threads=64 vec=8 unroll=1 cluster=1
r s5 mean f32 3,4001 1 0 none strategy=1 threads=128 vec=4 unroll=2 cluster=1
r s6 argmax f16 2,5003 1 0 none strategy=1 threads=64 vec=8 unroll=1 cluster=4
r s7 prod f32 5,99 1 0 none strategy=0 threads=64 vec=2 unroll=1 cluster=1
# block (and cluster) per row
r b1 argmax f32 3,5000 1 0 none strategy=1 threads=128 vec=4 unroll=2 cluster=1
r b2 argmin f16 2,4001 -1 0 none strategy=1 threads=64 vec=1 unroll=4 cluster=4
r b3 amax bf16 4,3000 1 0 none strategy=1 threads=256 vec=8 unroll=1 cluster=1
r b4 mean bf16 2,3,40,30 2,3 1 none strategy=1 threads=128 vec=4 unroll=2 cluster=2
r b5 sum f32 2,9000 1 0 none strategy=1 threads=64 vec=4 unroll=4 cluster=8
r b6 prod_all f16 3,5,70 none 0 none strategy=1 threads=64 vec=2 unroll=1 cluster=2
r b7 argmax f32 33,111 none 0 none strategy=1 threads=128 vec=1 unroll=2 cluster=8
# reduced dims around a kept run (per-channel statistics of NCHW: dims 0, 2, 3): segments
r g1 sum f32 3,5,7,8 0,2,3 0 none strategy=0 threads=64 vec=4 unroll=2 cluster=1
r g2 mean bf16 4,6,400 0,2 1 none strategy=1 threads=64 vec=8 unroll=2 cluster=2
r g3 amax f16 5,3,4,64 0,2,3 0 none strategy=1 threads=128 vec=2 unroll=4 cluster=1
r g4 amin f32 2,9,33 0,2 0 none strategy=0 threads=32 vec=1 unroll=2 cluster=1
r g5 sum f16 2,4,1,50 0,3 1 f32 strategy=1 threads=32 vec=2 unroll=1 cluster=2
# a thread per columns
r c1 argmax f32 3,100,40 1 0 none strategy=2 threads=32 vec=4 unroll=4 cluster=1
r c2 amin f16 5,17,24 1 1 none strategy=2 threads=32 vec=8 unroll=2 cluster=1
r c3 mean bf16 100,6 0 0 none strategy=2 threads=32 vec=2 unroll=4 cluster=1
r c4 prod f32 4,9,7 1 0 none strategy=2 threads=32 vec=1 unroll=2 cluster=1
r c5 argmin bf16 6,1,5,3 0,1 0 none strategy=2 threads=32 vec=1 unroll=1 cluster=1
# column tiles over warps and clusters (the headroom shape, small)
r t1 argmax f32 4,300,64 1 0 none strategy=3 threads=128 vec=4 unroll=2 cluster=1
r t2 sum f32 2,129,160 1 0 none strategy=3 threads=256 vec=4 unroll=4 cluster=1 hint=1
r t3 amax f16 2,77,40 1 1 none strategy=3 threads=64 vec=1 unroll=1 cluster=2
r t4 argmin bf16 3,50,33 1 0 none strategy=3 threads=64 vec=1 unroll=2 cluster=4
r t5 mean f16 600,24 0 0 f32 strategy=3 threads=128 vec=1 unroll=4 cluster=8
r t6 prod f32 2,40,100 1 0 none strategy=3 threads=64 vec=2 unroll=1 cluster=1
r t7 sum bf16 3,7,9,50 1,2 0 f32 strategy=3 threads=128 vec=2 unroll=2 cluster=2
# split rows over blocks (strategy 4): partials in the workspace, combined by the last block, which
# restores the workspace's zeros; each case runs twice on one workspace (reduce_run.cc)
r p1 sum f32 2,5000 1 0 none strategy=4 threads=64 vec=4 unroll=2 cluster=1 chunks=8
r p2 argmax f32 3,3001 none 0 none strategy=4 threads=64 vec=1 unroll=2 cluster=1 chunks=16
r p3 argmin f16 2,4001 -1 0 none strategy=4 threads=32 vec=8 unroll=1 cluster=1 chunks=4
r p4 amax bf16 3,3000 1 0 none strategy=4 threads=128 vec=8 unroll=1 cluster=1 chunks=4
r p5 mean bf16 4,6,400 0,2 1 none strategy=4 threads=64 vec=8 unroll=1 cluster=1 chunks=4
r p6 prod f32 2,999 1 0 none strategy=4 threads=32 vec=1 unroll=4 cluster=1 chunks=8
r p7 sum f16 3,5,70 none 0 f32 strategy=4 threads=32 vec=2 unroll=1 cluster=1 chunks=4
r p8 amin f32 2,3,1000 1,2 0 none strategy=4 threads=256 vec=4 unroll=1 cluster=1 chunks=4
exit $failed
