#!/bin/bash
# A CPU check of the scan family's generated kernels, for machines without a GPU: each kernel is
# compiled with the host compiler against emu.h (one std::thread per CUDA thread; shuffles, block
# and cluster barriers through std::barrier; __shared__ arrays as per-block slabs, distributed
# shared memory by block rank) and its output compared with a float64 scan. It checks the index
# arithmetic and the carry logic of every strategy, not the CUDA memory model, timing or NVRTC.
# Not part of CI (it needs the host compiler and CUDA headers at run time; ~1 minute).
#
#   tests/policy/emu/run.sh [BUILD_DIR]     (BUILD_DIR: a configured build with kjit_policy built)
set -euo pipefail
source "$(dirname "$0")/emu_lib.sh"
emu_setup emu_run.cc gen.cc "${1:-}"
# r OUTER LEN INNER PROD DTYPE(0 f32, 1 f16, 2 bf16) NAME OP DTYPE DIM NSIZES SIZES... KNOB=VALUE...
r() {
  local outer=$1 len=$2 inner=$3 prod=$4 dt=$5 name=$6
  shift 6
  local line grid block cluster pt res
  line=$("$work/gen" "$work/$name.cc" "$@") || { echo "$name: $line"; failed=1; return; }
  read -r grid block cluster pt <<< "$line"
  emu_compile_kernel "$name"
  if res=$(timeout 300 "$work/run" "$work/$name.so" "$outer" "$len" "$inner" "$prod" "$dt" "$grid" "$block" "$cluster"); then
    echo "$name [$pt]: $res"
  else
    echo "$name [$pt]: $res"; failed=1
  fi
}
# warp per row: odd lengths, vectors, items, prefetch
r 5 1000 1 0 0 a1 aten::cumsum f32 1 2 5 1000 strategy=0 threads=64 vec=4 items=2 prefetch=1 hint=1
r 5 999 1 0 0 a2 aten::cumsum f32 1 2 5 999 strategy=0 threads=128 vec=1 items=4 prefetch=0
r 3 3001 1 1 0 a3 aten::cumprod f32 1 2 3 3001 strategy=0 threads=32 vec=1 items=8 prefetch=1
r 4 1000 1 0 1 a4 aten::cumsum f16 -1 2 4 1000 strategy=0 threads=64 vec=8 items=1 prefetch=1
r 4 4096 1 0 2 a5 aten::cumsum bf16 -1 2 4 4096 strategy=0 threads=64 vec=2 items=16 prefetch=0
r 7 5 1 0 0 a6 aten::cumsum f32 1 2 7 5 strategy=0 threads=128 vec=1 items=1 prefetch=0
r 9 1 1 0 0 a7 aten::cumsum f32 1 2 9 1 strategy=0 threads=64 vec=1 items=1
# block per row
r 2 5000 1 0 0 b1 aten::cumsum f32 1 2 2 5000 strategy=1 threads=128 vec=4 items=2 prefetch=1
r 2 4999 1 1 0 b2 aten::cumprod f32 1 2 2 4999 strategy=1 threads=256 vec=1 items=4 prefetch=0
r 2 3000 1 0 1 b3 aten::cumsum f16 1 2 2 3000 strategy=1 threads=64 vec=8 items=2 prefetch=1
r 2 8192 1 0 2 b4 aten::cumsum bf16 1 2 2 8192 strategy=1 threads=1024 vec=8 items=1 prefetch=0
r 1 700 1 0 0 b5 aten::cumsum f32 0 1 700 strategy=1 threads=512 vec=2 items=1 prefetch=0
r 2 64 1 0 0 b6 aten::cumsum f32 1 2 2 64 strategy=1 threads=64 vec=1 items=1
# a row over a cluster
r 2 9000 1 0 0 c1 aten::cumsum f32 1 2 2 9000 strategy=2 threads=128 vec=4 items=2 cluster=2 prefetch=1
r 1 20001 1 1 0 c2 aten::cumprod f32 0 1 20001 strategy=2 threads=128 vec=1 items=4 cluster=4 prefetch=1
r 2 7000 1 0 1 c3 aten::cumsum f16 1 2 2 7000 strategy=2 threads=256 vec=8 items=1 cluster=2 prefetch=0
r 1 30000 1 0 2 c4 aten::cumsum bf16 0 1 30000 strategy=2 threads=128 vec=2 items=2 cluster=8 prefetch=0
# a thread per columns
r 3 100 40 0 0 d1 aten::cumsum f32 1 3 3 100 40 strategy=3 threads=32 vec=4 items=4
r 2 33 7 1 0 d2 aten::cumprod f32 1 3 2 33 7 strategy=3 threads=32 vec=1 items=8
r 5 17 24 0 1 d3 aten::cumsum f16 1 3 5 17 24 strategy=3 threads=32 vec=8 items=2
r 6 1 5 1 2 d4 aten::cumprod bf16 1 3 6 1 5 strategy=3 threads=32 vec=1 items=1
# column tiles over a block's warps
r 2 100 40 0 0 e1 aten::cumsum f32 1 3 2 100 40 strategy=4 threads=128 vec=4 items=4
r 3 33 7 1 0 e2 aten::cumprod f32 1 3 3 33 7 strategy=4 threads=256 vec=1 items=2
r 2 300 72 0 2 e3 aten::cumsum bf16 1 3 2 300 72 strategy=4 threads=64 vec=2 items=16
r 4 50 3 0 1 e4 aten::cumsum f16 1 3 4 50 3 strategy=4 threads=64 vec=1 items=1
r 3 200 5 0 0 e5 aten::cumsum f32 1 3 3 200 5 strategy=4 threads=1024 vec=1 items=1
# rows whose length the vector does not divide: each row's tiles shifted to the aligned element at or
# before its start (every shift 0..VEC-1 among the rows), the first and last vectors loaded and stored
# one element at a time, an extra tile where the shift spills past the last
r 7 999 1 0 0 g1 aten::cumsum f32 1 2 7 999 strategy=0 threads=64 vec=4 items=2 prefetch=1
r 5 1001 1 1 0 g2 aten::cumprod f32 1 2 5 1001 strategy=0 threads=32 vec=2 items=4 prefetch=0
r 6 1003 1 0 1 g3 aten::cumsum f16 1 2 6 1003 strategy=0 threads=64 vec=8 items=1 prefetch=1 hint=1
r 4 511 1 0 0 g4 aten::cumsum f32 1 2 4 511 strategy=0 threads=32 vec=4 items=2 prefetch=1
r 8 3 1 0 0 g5 aten::cumsum f32 1 2 8 3 strategy=0 threads=64 vec=4 items=1 prefetch=0
r 3 4999 1 0 0 g6 aten::cumsum f32 1 2 3 4999 strategy=1 threads=128 vec=4 items=2 prefetch=1 hint=1
r 9 3001 1 1 2 g7 aten::cumprod bf16 1 2 9 3001 strategy=1 threads=64 vec=8 items=2 prefetch=0
r 4 1023 1 0 0 g8 aten::cumsum f32 1 2 4 1023 strategy=1 threads=64 vec=4 items=4 prefetch=0
r 3 20001 1 0 0 g9 aten::cumsum f32 1 2 3 20001 strategy=2 threads=128 vec=4 items=4 cluster=4 prefetch=1
r 5 9003 1 0 1 g10 aten::cumsum f16 1 2 5 9003 strategy=2 threads=128 vec=8 items=1 cluster=2 prefetch=0
r 4 4095 1 1 0 g11 aten::cumprod f32 1 2 4 4095 strategy=2 threads=128 vec=4 items=4 cluster=2 prefetch=0
r 33 1023 1 1 0 g12 aten::cumprod f32 1 2 33 1023
exit $failed
