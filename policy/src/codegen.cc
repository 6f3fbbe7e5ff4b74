#include "src/codegen.h"

namespace kjit::policy::codegen {

const char* CudaType(DType t) {
  switch (t) {
    case DType::kFloat16: return "__half";
    case DType::kBFloat16: return "__nv_bfloat16";
    default: return "float";
  }
}

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

const char* const kIncludes = R"(
#include <cuda_fp16.h>
#include <cuda_bf16.h>
// (Cluster intrinsics are built in for sm_90: no <cooperative_groups.h>, which costs 1.5 s to compile.)
// NVRTC has no <cmath>: the special values by their bits.
#define KJIT_INF __int_as_float(0x7f800000)
#define KJIT_NAN __int_as_float(0x7fc00000)
)";

const char* const kElementAccess = R"(
template <int BYTES> struct RawOf;
template <> struct RawOf<2> { typedef unsigned short T; };
template <> struct RawOf<4> { typedef unsigned int T; };
template <> struct RawOf<8> { typedef uint2 T; };
template <> struct RawOf<16> { typedef uint4 T; };

// Elements travel as their bit patterns (integers) between memory and
// registers, through unions of integers: punning the half and bfloat16
// classes through pointers is undefined behaviour (and the suspect for wrong
// f16 log_softmax results seen with codegen 1).
template <typename T> struct Bits;
template <> struct Bits<float> {
  typedef unsigned int U;
  static __device__ __forceinline__ float to_f(U u) { return __uint_as_float(u); }
  static __device__ __forceinline__ U from_f(float x) { return __float_as_uint(x); }
};
template <> struct Bits<__half> {
  typedef unsigned short U;
  static __device__ __forceinline__ float to_f(U u) { return __half2float(__ushort_as_half(u)); }
  static __device__ __forceinline__ U from_f(float x) { return __half_as_ushort(__float2half_rn(x)); }
};
template <> struct Bits<__nv_bfloat16> {
  typedef unsigned short U;
  static __device__ __forceinline__ float to_f(U u) { return __bfloat162float(__ushort_as_bfloat16(u)); }
  static __device__ __forceinline__ U from_f(float x) { return __bfloat16_as_ushort(__float2bfloat16_rn(x)); }
};

// VEC consecutive elements at p (aligned to their total size), as floats.
template <bool STREAM>
__device__ __forceinline__ void load_vec(const in_t* p, float (&f)[VEC]) {
  typedef typename RawOf<sizeof(in_t) * VEC>::T Raw;
  union { Raw raw; typename Bits<in_t>::U u[VEC]; } v;
  if (STREAM) v.raw = __ldcs(reinterpret_cast<const Raw*>(p));
  else v.raw = *reinterpret_cast<const Raw*>(p);
#pragma unroll
  for (int i = 0; i < VEC; ++i) f[i] = Bits<in_t>::to_f(v.u[i]);
}
__device__ __forceinline__ void store_vec(out_t* p, const float (&f)[VEC]) {
  typedef typename RawOf<sizeof(out_t) * VEC>::T Raw;
  union { Raw raw; typename Bits<out_t>::U u[VEC]; } v;
#pragma unroll
  for (int i = 0; i < VEC; ++i) v.u[i] = Bits<out_t>::from_f(f[i]);
  if (HINT) __stcs(reinterpret_cast<Raw*>(p), v.raw);
  else *reinterpret_cast<Raw*>(p) = v.raw;
}
)";

const char* const kReductions = R"(
// Sums: the xor butterfly gives every lane the same value (a + b == b + a).
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
// Every thread of the block gets the sum. `red` holds 32 floats.
__device__ __forceinline__ float block_sum(float v, float* red) {
  v = warp_sum(v);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) red[warp] = v;
  __syncthreads();
  if (warp == 0) {
    float w = lane < (int)(THREADS / 32) ? red[lane] : 0.f;
    w = warp_sum(w);
    if (lane == 0) red[0] = w;
  }
  __syncthreads();
  const float r = red[0];
  __syncthreads();  // red is reused by the next reduction
  return r;
}

// Welford state: mean, sum of squared deviations, count (exact in float up to 2^24;
// a thread that saw nothing has n == 0), and the plain sum s of the values. NaN anywhere makes
// mean, m2 and s NaN, as in PyTorch.
// The statistic's mean is s / n (w_mean), not `mean`: `mean` only steers m2's updates. Carrying
// the mean through the merges rounds every partial result at the scale of its own mean: a lane's
// mean of 18 values of +-1e6 is ~1e5, rounded to ~0.004 per merge, and a tree of such merges
// left a channel mean ~0.002 off where the values nearly cancel (the bf16 batch_norm rejection,
// 2026-11-30). Sums of bf16/f16 values, and of f32 values of like magnitude, round far less:
// bf16 values of 2^13..2^20 are multiples of 64, so their sums are exact in float up to 2^30, and
// the mean is rounded once, at the end. One add per element and one shuffle per merge level more.
struct W { float mean; float m2; float n; float s; };
__device__ __forceinline__ void w_add(W& a, float x) {
  a.n += 1.f;
  a.s += x;
  const float d = x - a.mean;
  a.mean += d / a.n;
  a.m2 += d * (x - a.mean);
}
__device__ __forceinline__ float w_mean(const W& a) { return a.s / a.n; }
// Chan et al.'s merge. Not symmetric in rounding: callers merge in a fixed order or broadcast one lane's result.
__device__ __forceinline__ W w_merge(W a, W b) {
  if (a.n == 0.f) return b;
  if (b.n == 0.f) return a;
  W r;
  r.n = a.n + b.n;
  const float d = b.mean - a.mean;
  const float fb = b.n / r.n;
  r.mean = a.mean + d * fb;
  r.m2 = a.m2 + b.m2 + d * d * a.n * fb;
  r.s = a.s + b.s;
  return r;
}
// The statistics of N held values given by term(q), q = 0 .. N-1 (N known when generated; term
// is inlined, so q is a constant and held arrays stay in registers), of which the first `count`
// are real (count > 0; a thread's held values past the end come last). The sum is pairwise (the
// same adds as a running sum, but each value passes through about log2(N) of them instead of up to
// N, and the adds of one level are independent); the mean is s / count, m2 the pairwise sum of
// squared deviations from it: no division per element, unlike w_add.
template <int N> struct Pairwise {
  template <typename Term> __device__ __forceinline__ static float sum(const Term& term, int lo) {
    return Pairwise<N / 2>::sum(term, lo) + Pairwise<N - N / 2>::sum(term, lo + N / 2);
  }
};
template <> struct Pairwise<1> {
  template <typename Term> __device__ __forceinline__ static float sum(const Term& term, int lo) { return term(lo); }
};
)";
// Every lane gets lane 0's merge of the warp.
__device__ __forceinline__ W warp_w(W v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    W w;
    w.mean = __shfl_xor_sync(0xffffffffu, v.mean, o);
    w.m2 = __shfl_xor_sync(0xffffffffu, v.m2, o);
    w.n = __shfl_xor_sync(0xffffffffu, v.n, o);
    w.s = __shfl_xor_sync(0xffffffffu, v.s, o);
    v = w_merge(v, w);
  }
  v.mean = __shfl_sync(0xffffffffu, v.mean, 0);
  v.m2 = __shfl_sync(0xffffffffu, v.m2, 0);
  v.n = __shfl_sync(0xffffffffu, v.n, 0);
  v.s = __shfl_sync(0xffffffffu, v.s, 0);
  return v;
}
// Every thread of the block gets the merge. `red` holds 4 * 32 floats.
__device__ __forceinline__ W block_w(W v, float* red) {
  v = warp_w(v);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) { red[warp] = v.mean; red[32 + warp] = v.m2; red[64 + warp] = v.n; red[96 + warp] = v.s; }
  __syncthreads();
  if (warp == 0) {
    W w = {0.f, 0.f, 0.f, 0.f};
    if (lane < (int)(THREADS / 32)) { w.mean = red[lane]; w.m2 = red[32 + lane]; w.n = red[64 + lane]; w.s = red[96 + lane]; }
    w = warp_w(w);
    if (lane == 0) { red[0] = w.mean; red[32] = w.m2; red[64] = w.n; red[96] = w.s; }
  }
  __syncthreads();
  W r = {red[0], red[32], red[64], red[96]};
  __syncthreads();
  return r;
}
)";

}  // namespace kjit::policy::codegen
