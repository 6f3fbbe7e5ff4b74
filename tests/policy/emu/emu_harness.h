// The harnesses' side of emu.h (emu_run.cc, pool_run.cc, reduce_run.cc, softmax_run.cc,
// depthwise_conv_run.cc, matmul_run.cc; include once, in the program that loads the kernel): the
// variables emu.h declares, elements by dtype code (0 f32, 1 f16, 2 bf16, 3 i64) as float, and the
// grid runner.
#pragma once
#include "emu.h"
#include <algorithm>
#include <memory>
#include <thread>
#include <vector>
thread_local emu_dim3 threadIdx, blockIdx;
emu_dim3 blockDim, gridDim;
thread_local EmuBlock* emu_block;
std::barrier<>* emu_cluster_bar;
thread_local std::optional<std::barrier<>::arrival_token> emu_token;
int emu_cluster = 1;
inline float to_f(uint32_t u, int dt) {
  if (dt == 0) return __uint_as_float(u);
  if (dt == 1) return __half2float(__ushort_as_half((uint16_t)u));
  return __bfloat162float(__ushort_as_bfloat16((uint16_t)u));
}
inline uint32_t from_f(float f, int dt) {
  if (dt == 0) return __float_as_uint(f);
  if (dt == 1) return __half_as_ushort(__float2half_rn(f));
  return __bfloat16_as_ushort(__float2bfloat16_rn(f));
}
inline int esize(int dt) { return dt == 0 ? 4 : dt == 3 ? 8 : 2; }
// Writes past a block's shared memory: a harness whose kernels' only shared array is the dynamic one (at the
// slabs' start; matmul) sets emu_shared_limit to the launch's dynamic shared bytes, and after each cluster ran,
// every byte of its blocks' slabs from there on that no longer holds the fill is counted in emu_shared_overrun
// (on the GPU, a store past the block's allocation faults or lands in another block's memory).
inline long long emu_shared_limit = -1;
inline long long emu_shared_overrun = 0;
// Runs body() in every thread of the grid (gridDim.x blocks of blockDim.x threads, clusters of
// emu_cluster): the blocks of a cluster together, clusters one after another, each cluster's shared
// slabs set to `fill` first (0xff: floats NaN, so a read of shared memory nothing wrote shows). A
// block's last warp, when blockDim.x is not a multiple of 32, has a barrier of its lanes only.
template <typename F> void emu_run_grid(F body, unsigned char fill = 0) {
  const int nthreads = blockDim.x * emu_cluster;
  std::vector<char> shared((size_t)emu_cluster * EMU_SLAB * EMU_VARS);
  for (unsigned c0 = 0; c0 < gridDim.x; c0 += emu_cluster) {
    std::fill(shared.begin(), shared.end(), (char)fill);
    std::barrier<> cluster_bar(nthreads);
    emu_cluster_bar = &cluster_bar;
    std::vector<EmuBlock> blocks(emu_cluster);
    std::vector<std::unique_ptr<std::barrier<>>> bars;
    for (int b = 0; b < emu_cluster; ++b) {
      bars.emplace_back(new std::barrier<>(blockDim.x));
      blocks[b].block_bar = bars.back().get();
      for (unsigned w = 0; w < (blockDim.x + 31) / 32; ++w) {
        bars.emplace_back(new std::barrier<>(std::min(32u, blockDim.x - 32 * w)));
        blocks[b].warp_bar[w] = bars.back().get();
      }
      blocks[b].shared = shared.data() + (size_t)b * EMU_SLAB * EMU_VARS;
    }
    std::vector<std::thread> ts;
    for (int b = 0; b < emu_cluster; ++b) {
      for (unsigned t = 0; t < blockDim.x; ++t) {
        ts.emplace_back([&, b, t] {
          threadIdx.x = t; blockIdx.x = c0 + b; emu_block = &blocks[b];
          if (blockIdx.x < gridDim.x) body();
        });
      }
    }
    for (auto& t : ts) t.join();
    if (emu_shared_limit >= 0) {
      for (int b = 0; b < emu_cluster; ++b) {
        for (long long i = emu_shared_limit; i < EMU_SLAB * EMU_VARS; ++i) emu_shared_overrun += blocks[b].shared[i] != (char)fill;
      }
    }
  }
}
