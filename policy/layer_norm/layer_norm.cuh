// The CUDA of the layer_norm family's kernels, in sections that layer_norm.cc embeds (kjit_embed_cuda, at
// build time) and writes after policy/src/cuda/common.cuh's pieces, with the problem's sizes and the
// design point's knobs defined ahead of them as macros and constants. Each section is embedded byte for
// byte (a blank line after a marker is part of it); lines starting "//@" document it and are not embedded.
//@section kPrelude
//@ Device code every strategy shares, after codegen::kElementAccess and
//@ codegen::kReductions: reductions over a row and the normalization.

// Row reductions, by a warp (ROW_BY_WARP) or by the whole block.
__device__ __forceinline__ float row_sum(float v, float* red) {
  return ROW_BY_WARP ? warp_sum(v) : block_sum(v, red);
}
__device__ __forceinline__ W row_w(W v, float* red) {
  return ROW_BY_WARP ? warp_w(v) : block_w(v, red);
}

// y for VEC elements at column col of a row, given the row's mean (0 for rms) and rstd.
__device__ __forceinline__ void normalize(const float (&v)[VEC], float mean, float rstd,
                                          const in_t* __restrict__ w, const in_t* __restrict__ b,
                                          long long col, float (&o)[VEC]) {
  float wv[VEC], bv[VEC];
  if (HAS_W) load_vec<false>(w + col, wv);
  if (HAS_B) load_vec<false>(b + col, bv);
#pragma unroll
  for (int k = 0; k < VEC; ++k) {
    float y = rstd * (RMS ? v[k] : v[k] - mean);
    if (HAS_W) y = wv[k] * y;
    if (HAS_B) y = y + bv[k];
    o[k] = y;
  }
}

// What a thread adds up over the values it streams through (shared memory or global memory).
// (Functors, not lambdas: an unannotated lambda in a kernel is a host function to NVRTC.)
struct AddSq { float q; __device__ __forceinline__ void operator()(float x) { q += x * x; } };
struct AddSum { float s; __device__ __forceinline__ void operator()(float x) { s += x; } };
struct AddDev { float m; float q; __device__ __forceinline__ void operator()(float x) { q += (x - m) * (x - m); } };
struct AddW { WRun w; __device__ __forceinline__ void operator()(float x) { w_add(w, x); } };
// A streaming visitor's part of row_stats: its values one by one through the functors.
#define KJIT_LOCAL_STATS \
  __device__ __forceinline__ float local_sq() const { AddSq a = {0.f}; (*this)(a); return a.q; } \
  __device__ __forceinline__ float local_sum() const { AddSum a = {0.f}; (*this)(a); return a.s; } \
  __device__ __forceinline__ float local_dev(float m) const { AddDev a = {m, 0.f}; (*this)(a); return a.q; } \
  __device__ __forceinline__ W local_w() const { AddW a = {{0.f, 0.f, 0.f, 0.f}}; (*this)(a); return w_state(a.w); }

// The row's statistics from the values each thread holds (registers or its own shared-memory
// slots, or a read of global memory), its part given by the visitor: local_sq() (rms),
// local_sum(), local_dev(m) and local_w() (see batch_norm.cc). Two-pass layer_norm visits
// twice; the rest once. Welford's mean is the merged sum over LEN (w_mean).
template <typename Visit>
__device__ __forceinline__ void row_stats(const Visit& visit, float* red, float& mean, float& rstd) {
  if (RMS) {
    mean = 0.f;
    rstd = rsqrtf(row_sum(visit.local_sq(), red) / (float)LEN + EPS);
  } else if (WELFORD) {
    const W w = row_w(visit.local_w(), red);
    mean = w_mean(w);
    rstd = rsqrtf(w.m2 / (float)LEN + EPS);
  } else {
    const float m = row_sum(visit.local_sum(), red) / (float)LEN;
    mean = m;
    rstd = rsqrtf(row_sum(visit.local_dev(m), red) / (float)LEN + EPS);
  }
}
//@section kHeldKernel

extern "C" __global__ void __launch_bounds__(THREADS) kjit_layer_norm(KJIT_PARAMS) {
  KJIT_NO_BIAS_MEAN
  __shared__ float red[96];
  const long long row = ROW_BY_WARP ? (long long)blockIdx.x * (THREADS / 32) + threadIdx.x / 32 : (long long)blockIdx.x;
  if (ROW_BY_WARP && row >= ROWS) return;  // whole warps leave: the shuffles below stay full
  const int t = ROW_BY_WARP ? threadIdx.x % 32 : threadIdx.x;
  const in_t* xr = x + row * LEN;
  in_t* yr = y + row * LEN;
  float v[ITEMS][VEC];
#pragma unroll
  for (int i = 0; i < ITEMS; ++i) {
    const long long col = ((long long)i * STRIDE + t) * VEC;
    if (col < LEN) {
      load_vec<false>(xr + col, v[i]);
    } else {
#pragma unroll
      for (int k = 0; k < VEC; ++k) v[i][k] = 0.f;
    }
  }
  float mean, rstd;
  row_stats(InRegisters{v, t}, red, mean, rstd);
#pragma unroll
  for (int i = 0; i < ITEMS; ++i) {
    const long long col = ((long long)i * STRIDE + t) * VEC;
    if (col < LEN) {
      float o[VEC];
      normalize(v[i], mean, rstd, w, b, col, o);
      store_vec(yr + col, o);
    }
  }
  if (t == 0) KJIT_WRITE_STATS(row);
}
//@section kStreamedKernel

// A thread's columns of the row: threadIdx.x * VEC + j * THREADS * VEC, staged in shared memory ...
struct InShared {
  const float* buf;
  template <typename Acc> __device__ __forceinline__ void operator()(Acc& acc) const {
    for (long long col = (long long)threadIdx.x * VEC; col < LEN; col += (long long)THREADS * VEC) {
#pragma unroll
      for (int k = 0; k < VEC; ++k) acc(buf[col + k]);
    }
  }
  KJIT_LOCAL_STATS
};
// ... or read from global memory.
struct InGlobal {
  const in_t* xr;
  template <typename Acc> __device__ __forceinline__ void operator()(Acc& acc) const {
    for (long long col = (long long)threadIdx.x * VEC; col < LEN; col += (long long)THREADS * VEC) {
      float v[VEC];
      load_vec<false>(xr + col, v);
#pragma unroll
      for (int k = 0; k < VEC; ++k) acc(v[k]);
    }
  }
  KJIT_LOCAL_STATS
};
extern "C" __global__ void __launch_bounds__(THREADS) kjit_layer_norm(KJIT_PARAMS) {
  KJIT_NO_BIAS_MEAN
  __shared__ float red[96];
  extern __shared__ float row_buf[];
  const long long row = blockIdx.x;
  const in_t* xr = x + row * LEN;
  in_t* yr = y + row * LEN;
  float mean, rstd;
  if (STAGED) {
    // Each thread stages, and later reads back, only its own columns: no barrier needed for row_buf.
    for (long long col = (long long)threadIdx.x * VEC; col < LEN; col += (long long)THREADS * VEC) {
      float v[VEC];
      load_vec<false>(xr + col, v);
#pragma unroll
      for (int k = 0; k < VEC; ++k) row_buf[col + k] = v[k];
    }
    row_stats(InShared{row_buf}, red, mean, rstd);
  } else {
    // One read for the statistics (Welford, or rms's sum of squares): row_stats visits once.
    row_stats(InGlobal{xr}, red, mean, rstd);
  }
  for (long long col = (long long)threadIdx.x * VEC; col < LEN; col += (long long)THREADS * VEC) {
    float v[VEC];
    if (STAGED) {
#pragma unroll
      for (int k = 0; k < VEC; ++k) v[k] = row_buf[col + k];
    } else {
      load_vec<HINT>(xr + col, v);
    }
    float o[VEC];
    normalize(v, mean, rstd, w, b, col, o);
    store_vec(yr + col, o);
  }
  if (threadIdx.x == 0) KJIT_WRITE_STATS(row);
}
