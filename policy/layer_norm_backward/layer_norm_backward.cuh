// The CUDA of the layer_norm_backward family's kernels, in sections that layer_norm_backward.cc embeds
// (kjit_embed_cuda, at build time) and writes after policy/src/cuda/common.cuh's pieces (kElementAccess,
// kReductions), with the problem's sizes and the design point's knobs defined ahead of them as macros and
// constants: in_t and out_t (the input's type: every tensor but mean and rstd), VEC, HINT (0), RMS, HAS_W,
// DX, DW, DB, CHUNKS (macros), ROWS, LEN, THREADS, COL_VEC, UNROLL, ROW_BLOCKS and, for the held
// strategies, ITEMS, STRIDE and ROW_BY_WARP; KJIT_PARAMS (the kernel ABI's parameters) and KJIT_ABSENT (the
// names of the ones this op lacks, as null pointers). Each section is embedded byte for byte (a blank line after a marker is part of it);
// lines starting "//@" document it and are not embedded.
//@section kPrelude
//@ What both kinds of blocks share: single-element and CV-element loads and stores, the weight (or ones),
//@ and grad_input's epilogue in PyTorch's order of operations.

template <int CV_>
__device__ __forceinline__ void load_n(const in_t* p, float (&f)[CV_]) {
  typedef typename RawOf<sizeof(in_t) * CV_>::T Raw;
  union { Raw raw; typename Bits<in_t>::U u[CV_]; } v;
  v.raw = *reinterpret_cast<const Raw*>(p);
#pragma unroll
  for (int k = 0; k < CV_; ++k) f[k] = Bits<in_t>::to_f(v.u[k]);
}
__device__ __forceinline__ void store_one(out_t* p, float f) {
  *reinterpret_cast<typename Bits<out_t>::U*>(p) = Bits<out_t>::from_f(f);
}
// The weight's VEC values at col, or ones without a weight.
__device__ __forceinline__ void load_weight(const in_t* __restrict__ w, long long col, float (&f)[VEC]) {
  if (HAS_W) {
    load_vec<false>(w + col, f);
  } else {
#pragma unroll
    for (int k = 0; k < VEC; ++k) f[k] = 1.f;
  }
}
// grad_input of one element: f = N * g * dy; f -= (x - m) * rstd * s2; f -= s1 (layer_norm only);
// f *= 1 / N * rstd, each step rounded as PyTorch's compute_gI rounds it.
__device__ __forceinline__ float grad_in(float dy, float x, float g, float m, float r, float s1, float s2,
                                         float fh, float term1) {
  float f = fh * g * dy;
  f -= (x - m) * r * s2;
  if (!RMS) f -= s1;
  return f * term1;
}
//@section kRowsHeld
//@ Strategies 0 and 1: a row's gradient and input held in registers, ITEMS vectors a thread, the
//@ thread's vectors STRIDE apart (a warp per row: 32; a block per row: THREADS); one read of each.

__device__ __forceinline__ void dx_role(const in_t* __restrict__ dy, const in_t* __restrict__ x,
                                        const float* __restrict__ mean, const float* __restrict__ rstd,
                                        const in_t* __restrict__ w, out_t* __restrict__ dx, long long block) {
#if ROW_BY_WARP
  const long long row = block * (THREADS / 32) + threadIdx.x / 32;
  if (row >= ROWS) return;  // the warp's lanes leave together
  const int lane = threadIdx.x % 32;
#else
  __shared__ float red[32];
  const long long row = block;
  const int lane = threadIdx.x;
#endif
  const float m = RMS ? 0.f : mean[row], r = rstd[row];
  const in_t* dyr = dy + row * LEN;
  const in_t* xr = x + row * LEN;
  out_t* out = dx + row * LEN;
  float dv[ITEMS][VEC], xv[ITEMS][VEC];
  float s1 = 0.f, s2 = 0.f;
#pragma unroll
  for (int i = 0; i < ITEMS; ++i) {
    const long long col = ((long long)i * STRIDE + lane) * VEC;
    if (col < LEN) {
      float g[VEC];
      load_vec<false>(dyr + col, dv[i]);
      load_vec<false>(xr + col, xv[i]);
      load_weight(w, col, g);
#pragma unroll
      for (int k = 0; k < VEC; ++k) {
        const float gd = dv[i][k] * g[k];
        s1 += gd;
        s2 += gd * (xv[i][k] - m) * r;
      }
    }
  }
#if ROW_BY_WARP
  s1 = warp_sum(s1);
  s2 = warp_sum(s2);
#else
  s1 = block_sum(s1, red);
  s2 = block_sum(s2, red);
#endif
  const float fh = (float)LEN, term1 = (1.f / fh) * r;
#pragma unroll
  for (int i = 0; i < ITEMS; ++i) {
    const long long col = ((long long)i * STRIDE + lane) * VEC;
    if (col < LEN) {
      float g[VEC], o[VEC];
      load_weight(w, col, g);
#pragma unroll
      for (int k = 0; k < VEC; ++k) o[k] = grad_in(dv[i][k], xv[i][k], g[k], m, r, s1, s2, fh, term1);
      store_vec(out + col, o);
    }
  }
}
//@section kRowsTwice
//@ Strategy 2: a block per row, read twice: the two sums, then grad_input.

__device__ __forceinline__ void dx_role(const in_t* __restrict__ dy, const in_t* __restrict__ x,
                                        const float* __restrict__ mean, const float* __restrict__ rstd,
                                        const in_t* __restrict__ w, out_t* __restrict__ dx, long long block) {
  __shared__ float red[32];
  const long long row = block;
  const float m = RMS ? 0.f : mean[row], r = rstd[row];
  const in_t* dyr = dy + row * LEN;
  const in_t* xr = x + row * LEN;
  out_t* out = dx + row * LEN;
  float s1 = 0.f, s2 = 0.f;
  for (long long col = (long long)threadIdx.x * VEC; col < LEN; col += (long long)THREADS * VEC) {
    float d[VEC], xs[VEC], g[VEC];
    load_vec<false>(dyr + col, d);
    load_vec<false>(xr + col, xs);
    load_weight(w, col, g);
#pragma unroll
    for (int k = 0; k < VEC; ++k) {
      const float gd = d[k] * g[k];
      s1 += gd;
      s2 += gd * (xs[k] - m) * r;
    }
  }
  s1 = block_sum(s1, red);
  s2 = block_sum(s2, red);
  const float fh = (float)LEN, term1 = (1.f / fh) * r;
  for (long long col = (long long)threadIdx.x * VEC; col < LEN; col += (long long)THREADS * VEC) {
    float d[VEC], xs[VEC], g[VEC], o[VEC];
    load_vec<false>(dyr + col, d);
    load_vec<false>(xr + col, xs);
    load_weight(w, col, g);
#pragma unroll
    for (int k = 0; k < VEC; ++k) o[k] = grad_in(d[k], xs[k], g[k], m, r, s1, s2, fh, term1);
    store_vec(out + col, o);
  }
}
//@section kColumns
//@ grad_weight and grad_bias: block b (after the ROW_BLOCKS) takes column tile b % COL_TILES (32 lanes of
//@ COL_VEC adjacent columns) over row chunk b / COL_TILES, its warps THREADS / 32 rows apart, UNROLL rows in
//@ flight; the warps' sums meet in shared memory and are added in warp order. With CHUNKS > 1 each block
//@ writes its sums to the workspace and the tile's last block to finish (a counter per tile) adds the
//@ chunks' in chunk order, writes the gradients, and restores the workspace's zeros (the counter and the
//@ sums it read) as the kernel ABI requires.
//@ Workspace: counters[COL_TILES] | grad_weight sums[CHUNKS * LEN] (DW) | grad_bias sums[CHUNKS * LEN] (DB).

constexpr int WARPS = THREADS / 32;
constexpr long long COL_TILE = 32LL * COL_VEC;
constexpr long long COL_TILES = (LEN + COL_TILE - 1) / COL_TILE;
constexpr long long CHUNK_ROWS = (ROWS + CHUNKS - 1) / CHUNKS;
constexpr long long COUNTERS_BYTES = (COL_TILES * 4 + 15) / 16 * 16;
__device__ __forceinline__ void dgb_role(const in_t* __restrict__ dy, const in_t* __restrict__ x,
                                         const float* __restrict__ mean, const float* __restrict__ rstd,
                                         out_t* __restrict__ dw, out_t* __restrict__ db, unsigned char* ws,
                                         long long block) {
  __shared__ float sums[(DW ? 1 : 0) + (DB ? 1 : 0)][WARPS][COL_TILE];
  const long long tile = block % COL_TILES, chunk = block / COL_TILES;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const long long col = tile * COL_TILE + (long long)lane * COL_VEC;
  float ag[COL_VEC], ab[COL_VEC];
#pragma unroll
  for (int k = 0; k < COL_VEC; ++k) ag[k] = ab[k] = 0.f;
  if (col < LEN) {
    const long long r0 = chunk * CHUNK_ROWS;
    const long long r1 = r0 + CHUNK_ROWS < ROWS ? r0 + CHUNK_ROWS : ROWS;
#pragma unroll UNROLL
    for (long long row = r0 + warp; row < r1; row += WARPS) {
      float d[COL_VEC], xs[COL_VEC];
      load_n<COL_VEC>(dy + row * LEN + col, d);
      if (DW) {
        load_n<COL_VEC>(x + row * LEN + col, xs);
        const float m = RMS ? 0.f : mean[row], r = rstd[row];
#pragma unroll
        for (int k = 0; k < COL_VEC; ++k) ag[k] += d[k] * (xs[k] - m) * r;
      }
      if (DB) {
#pragma unroll
        for (int k = 0; k < COL_VEC; ++k) ab[k] += d[k];
      }
    }
  }
#pragma unroll
  for (int k = 0; k < COL_VEC; ++k) {
    if (DW) sums[0][warp][lane * COL_VEC + k] = ag[k];
    if (DB) sums[DW ? 1 : 0][warp][lane * COL_VEC + k] = ab[k];
  }
  __syncthreads();
#if CHUNKS > 1
  float* partial_w = reinterpret_cast<float*>(ws + COUNTERS_BYTES);
  float* partial_b = partial_w + (DW ? CHUNKS * LEN : 0);
#endif
  for (int c = threadIdx.x; c < COL_TILE; c += THREADS) {
    const long long j = tile * COL_TILE + c;
    if (j >= LEN) continue;
    float g = 0.f, b = 0.f;
    for (int q = 0; q < WARPS; ++q) {
      if (DW) g += sums[0][q][c];
      if (DB) b += sums[DW ? 1 : 0][q][c];
    }
#if CHUNKS == 1
    if (DW) store_one(dw + j, g);
    if (DB) store_one(db + j, b);
#else
    // To L2 (.cg): the tile's last block, on another SM, reads them.
    if (DW) __stcg(partial_w + chunk * LEN + j, g);
    if (DB) __stcg(partial_b + chunk * LEN + j, b);
#endif
  }
#if CHUNKS > 1
  __shared__ int last;
  __threadfence();  // this thread's sums are visible device-wide before the block counts
  __syncthreads();
  if (threadIdx.x == 0) {
    last = atomicAdd(reinterpret_cast<unsigned int*>(ws) + tile, 1u) == (unsigned int)(CHUNKS - 1);
  }
  __syncthreads();
  if (!last) return;
  __threadfence();  // every other chunk's sums are visible now
  for (int c = threadIdx.x; c < COL_TILE; c += THREADS) {
    const long long j = tile * COL_TILE + c;
    if (j >= LEN) continue;
    float g = 0.f, b = 0.f;
    for (int q = 0; q < CHUNKS; ++q) {
      if (DW) {
        g += __ldcg(partial_w + q * LEN + j);
        __stcg(partial_w + q * LEN + j, 0.f);
      }
      if (DB) {
        b += __ldcg(partial_b + q * LEN + j);
        __stcg(partial_b + q * LEN + j, 0.f);
      }
    }
    if (DW) store_one(dw + j, g);
    if (DB) store_one(db + j, b);
  }
  // Every block of the tile has counted: no one else touches the counter in this launch.
  if (threadIdx.x == 0) reinterpret_cast<unsigned int*>(ws)[tile] = 0u;
#endif
}
//@section kEntry
//@ The entry: the first ROW_BLOCKS blocks compute grad_input, the rest grad_weight and grad_bias.

extern "C" __global__ void __launch_bounds__(THREADS) kjit_layer_norm_backward(KJIT_PARAMS) {
  KJIT_ABSENT
  const long long block = blockIdx.x;
#if DX
  if (block < ROW_BLOCKS) {
    dx_role(dy, x, mean, rstd, w, dx, block);
    return;
  }
#endif
#if DW || DB
  dgb_role(dy, x, mean, rstd, dw, db, ws, block - ROW_BLOCKS);
#endif
}
