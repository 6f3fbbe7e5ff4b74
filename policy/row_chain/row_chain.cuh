// The CUDA of the row_chain family, in sections that row_chain.cc embeds (kjit_embed_cuda, at build time) and
// writes after policy/src/cuda/common.cuh's kElementAccess and policy/src/cuda/chain.cuh's kChainAccess, with
// VEC, HINT, ITEMS, ROW_THREADS, BLOCK_ROWS, ROWS and LEN defined ahead of them. The chain itself (the kernel's
// parameters, the loads, the terms summed or scanned, the per-row values and the per-element epilogue with its
// stores) is generated per key between kHead and kTail. Each section is embedded byte for byte (a blank line after a marker
// is part of it); lines starting "//@" document it and are not embedded.
//@section kRowAccess
//@ A column operand's VEC elements ([LEN] tensors broadcast over the rows, such as a norm's weight): every row
//@ reads them, so they are loaded through the read-only cache whatever HINT says.

template <typename T>
__device__ __forceinline__ void load_cached(const T* p, float (&f)[VEC]) {
  typedef typename RawOf<sizeof(T) * VEC>::T Raw;
  union { Raw raw; typename Bits<T>::U u[VEC]; } v;
  v.raw = __ldg(reinterpret_cast<const Raw*>(p));
#pragma unroll
  for (int i = 0; i < VEC; ++i) f[i] = Bits<T>::to_f(v.u[i]);
}
//@section kRowSum
//@ The sum of v over the ROW_THREADS threads of a row (every one of them gets it): a butterfly within each warp,
//@ then, where a row has several warps, their partial sums through `red` (32 floats a row of the block) and a
//@ second butterfly. Every thread of the block calls it (it synchronises the block where a row spans warps).
//@ The order is fixed, so a key's results are the same on every run.

__device__ __forceinline__ float row_sum(float v, float* red) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  if (ROW_THREADS > 32) {
    const int lane = threadIdx.x & 31;
    float* r = red + (threadIdx.x / ROW_THREADS) * 32;
    if (lane == 0) r[(threadIdx.x % ROW_THREADS) >> 5] = v;
    __syncthreads();
    v = lane < ROW_THREADS / 32 ? r[lane] : 0.f;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  }
  return v;
}
//@section kRowScan
//@ The exclusive prefix sum of v over the ROW_THREADS threads of a row, in thread order, and in *total the sum of
//@ all of them: a warp's inclusive scan by shuffles, then, where a row has several warps, the warps' totals
//@ through `red` (32 floats a row of the block). Every thread of the block calls it; the order is fixed.

__device__ __forceinline__ float row_exclusive_scan(float v, float* red, float* total) {
  const int lane = threadIdx.x & 31;
  float inc = v;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const float n = __shfl_up_sync(0xffffffffu, inc, o);
    if (lane >= o) inc += n;
  }
  float excl = __shfl_up_sync(0xffffffffu, inc, 1);
  if (lane == 0) excl = 0.f;
  if (ROW_THREADS == 32) {
    *total = __shfl_sync(0xffffffffu, inc, 31);
    return excl;
  }
  float* r = red + (threadIdx.x / ROW_THREADS) * 32;
  const int warp = (threadIdx.x % ROW_THREADS) >> 5;
  if (lane == 31) r[warp] = inc;
  __syncthreads();
  float before = 0.f, all = 0.f;
#pragma unroll 1
  for (int w = 0; w < ROW_THREADS / 32; ++w) {
    if (w < warp) before += r[w];
    all += r[w];
  }
  __syncthreads();
  *total = all;
  return before + excl;
}
//@section kHead
//@ The kernel's start: a block of BLOCK_ROWS rows, ROW_THREADS threads a row; a thread's ITEMS vectors of a row
//@ lie ROW_THREADS x VEC elements apart (every load and store coalesced), held in registers between the sum and
//@ the epilogue, so that each row is read once. A block's rows past ROWS take part in row_sum's barriers only.
//@ The generated parameter list is CHAIN_PARAMS.

extern "C" __global__ void __launch_bounds__(ROW_THREADS * BLOCK_ROWS) kjit_row_chain(CHAIN_PARAMS) {
  __shared__ float red[BLOCK_ROWS * 32];
  const int lane = threadIdx.x % ROW_THREADS;
  const long long row = (long long)blockIdx.x * BLOCK_ROWS + threadIdx.x / ROW_THREADS;
  const bool active = row < ROWS;
  const long long base = row * LEN;
//@section kTail

}
