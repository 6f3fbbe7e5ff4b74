// The CUDA of the softmax_backward family's kernels, in sections that softmax_backward.cc embeds
// (kjit_embed_cuda, at build time) and writes after policy/src/cuda/common.cuh's pieces (kElementAccess,
// kReductions), with the problem's sizes and the design point's knobs defined ahead of them as macros and
// constants: in_t (the gradient's and the output's type), out_t (the input's), VEC, HINT, LOG, OUTER, LEN,
// INNER, THREADS and, for the warp strategy, ITEMS. Each section is embedded byte for byte (a blank line
// after a marker is part of it); lines starting "//@" document it and are not embedded.
//@section kPrelude
//@ What every strategy computes: a row's dot (the sum of grad * output, or of grad for
//@ log_softmax) and each element's gradient from it, in float, as PyTorch's epilogues do.

__device__ __forceinline__ float dot_term(float g, float y) { return LOG ? g : g * y; }
__device__ __forceinline__ float grad_in(float g, float y, float dot) {
  return LOG ? g - expf(y) * dot : y * (g - dot);
}
//@section kWarpKernel
//@ Strategy 0: a warp per row, ITEMS vectors of the gradient and of the output a lane, held
//@ between the sum and the gradient (one read of each).

extern "C" __global__ void __launch_bounds__(THREADS)
kjit_softmax_backward(const in_t* __restrict__ g, const in_t* __restrict__ y, out_t* __restrict__ gi) {
  const long long row = (long long)blockIdx.x * (THREADS / 32) + threadIdx.x / 32;
  if (row >= OUTER) return;  // the warp's lanes leave together
  const int lane = threadIdx.x % 32;
  const in_t* gr = g + row * LEN;
  const in_t* yr = y + row * LEN;
  out_t* out = gi + row * LEN;
  float gv[ITEMS][VEC], yv[ITEMS][VEC];
  float dot = 0.f;
#pragma unroll
  for (int i = 0; i < ITEMS; ++i) {
    const long long col = ((long long)i * 32 + lane) * VEC;
    if (col < LEN) {
      load_vec<false>(gr + col, gv[i]);
      load_vec<false>(yr + col, yv[i]);
#pragma unroll
      for (int k = 0; k < VEC; ++k) dot += dot_term(gv[i][k], yv[i][k]);
    }
  }
  dot = warp_sum(dot);
#pragma unroll
  for (int i = 0; i < ITEMS; ++i) {
    const long long col = ((long long)i * 32 + lane) * VEC;
    if (col < LEN) {
      float o[VEC];
#pragma unroll
      for (int k = 0; k < VEC; ++k) o[k] = grad_in(gv[i][k], yv[i][k], dot);
      store_vec(out + col, o);
    }
  }
}
//@section kBlockKernel
//@ Strategy 1: a block per row, read twice: the dot, then the gradient (the second read
//@ evict-first when HINT).

extern "C" __global__ void __launch_bounds__(THREADS)
kjit_softmax_backward(const in_t* __restrict__ g, const in_t* __restrict__ y, out_t* __restrict__ gi) {
  __shared__ float red[32];
  const long long row = blockIdx.x;
  const in_t* gr = g + row * LEN;
  const in_t* yr = y + row * LEN;
  out_t* out = gi + row * LEN;
  float dot = 0.f;
  for (long long col = (long long)threadIdx.x * VEC; col < LEN; col += (long long)THREADS * VEC) {
    float gv[VEC], yv[VEC];
    load_vec<false>(gr + col, gv);
    load_vec<false>(yr + col, yv);
#pragma unroll
    for (int k = 0; k < VEC; ++k) dot += dot_term(gv[k], yv[k]);
  }
  dot = block_sum(dot, red);
  for (long long col = (long long)threadIdx.x * VEC; col < LEN; col += (long long)THREADS * VEC) {
    float gv[VEC], yv[VEC], o[VEC];
    load_vec<HINT>(gr + col, gv);
    load_vec<HINT>(yr + col, yv);
#pragma unroll
    for (int k = 0; k < VEC; ++k) o[k] = grad_in(gv[k], yv[k], dot);
    store_vec(out + col, o);
  }
}
//@section kColumnsKernel
//@ Strategy 2 (dim not last): a thread per VEC adjacent columns of one outer index, each
//@ column of LEN elements INNER apart, read twice.

extern "C" __global__ void __launch_bounds__(THREADS)
kjit_softmax_backward(const in_t* __restrict__ g, const in_t* __restrict__ y, out_t* __restrict__ gi) {
  const long long col = (long long)blockIdx.x * THREADS + threadIdx.x;
  if (col >= OUTER * (INNER / VEC)) return;
  const long long base = col / (INNER / VEC) * LEN * INNER + col % (INNER / VEC) * VEC;
  float dot[VEC];
#pragma unroll
  for (int k = 0; k < VEC; ++k) dot[k] = 0.f;
  for (long long j = 0; j < LEN; ++j) {
    float gv[VEC], yv[VEC];
    load_vec<false>(g + base + j * INNER, gv);
    load_vec<false>(y + base + j * INNER, yv);
#pragma unroll
    for (int k = 0; k < VEC; ++k) dot[k] += dot_term(gv[k], yv[k]);
  }
  for (long long j = 0; j < LEN; ++j) {
    float gv[VEC], yv[VEC], o[VEC];
    load_vec<HINT>(g + base + j * INNER, gv);
    load_vec<HINT>(y + base + j * INNER, yv);
#pragma unroll
    for (int k = 0; k < VEC; ++k) o[k] = grad_in(gv[k], yv[k], dot[k]);
    store_vec(gi + base + j * INNER, o);
  }
}
