// The CUDA of the batch_norm family's kernels, in sections that batch_norm.cc embeds (kjit_embed_cuda, at
// build time) and writes after policy/src/cuda/common.cuh's pieces, with the problem's sizes and the
// design point's knobs defined ahead of them as macros and constants. Each section is embedded byte for
// byte (a blank line after a marker is part of it); lines starting "//@" document it and are not embedded.
//@section kCommon
//@ Device code every strategy shares, after codegen::kElementAccess.

// One element of a parameter, through its bit pattern (no punning of the half classes).
template <typename T>
__device__ __forceinline__ float load1(const T* p, long long i) {
  return Bits<T>::to_f(reinterpret_cast<const typename Bits<T>::U*>(p)[i]);
}
//@section kEvalPrelude
//@ Inference: the per-channel affine map from the running statistics.

// out = (x - mean) * scale + shift, scale = weight * invstd: the subtraction first, as PyTorch, so
// that x close to a large mean loses nothing to cancellation.
struct Affine { float mean; float scale; float shift; };
__device__ __forceinline__ Affine channel_affine(const p_t* __restrict__ w, const p_t* __restrict__ b,
                                                 const p_t* __restrict__ rm, const p_t* __restrict__ rv, long long c) {
  const float invstd = rsqrtf(load1(rv, c) + EPS);
  Affine a;
  a.mean = load1(rm, c);
  a.scale = HAS_W ? load1(w, c) * invstd : invstd;
  a.shift = HAS_B ? load1(b, c) : 0.f;
  return a;
}
// native_batch_norm in inference returns running_mean (as float) and rsqrt(running_var + eps).
__device__ __forceinline__ void write_save(const p_t* __restrict__ rm, const p_t* __restrict__ rv,
                                           float* __restrict__ save_mean, float* __restrict__ save_invstd,
                                           long long c) {
  save_mean[c] = load1(rm, c);
  save_invstd[c] = rsqrtf(load1(rv, c) + EPS);
}
//@section kTrainPrelude
//@ Training: per-channel statistics. Element j (0 <= j < LEN) of channel c lies at
//@ c * HW + off(j): the channel is BATCH runs of HW contiguous elements, CHW apart. After
//@ codegen::kReductions.

__device__ __forceinline__ long long off(long long j) {
  return BATCH == 1 ? j : (j / HW) * CHW + j % HW;
}
// VEC elements as their raw bits, for staging in shared memory in the input's dtype.
typedef RawOf<sizeof(in_t) * VEC>::T Raw;
__device__ __forceinline__ Raw load_raw(const in_t* p) { return *reinterpret_cast<const Raw*>(p); }
__device__ __forceinline__ void unpack(Raw r, float (&f)[VEC]) {
  union { Raw raw; typename Bits<in_t>::U u[VEC]; } v;
  v.raw = r;
#pragma unroll
  for (int k = 0; k < VEC; ++k) f[k] = Bits<in_t>::to_f(v.u[k]);
}

// A channel's reductions: by a warp (BY_WARP) or by the whole block.
__device__ __forceinline__ float group_sum(float v, float* red) { return BY_WARP ? warp_sum(v) : block_sum(v, red); }
__device__ __forceinline__ W group_w(W v, float* red) { return BY_WARP ? warp_w(v) : block_w(v, red); }

// What a thread adds up over the values it streams through (shared memory or global memory).
// (Functors, not lambdas: an unannotated lambda in a kernel is a host function to NVRTC.)
struct AddSum { float s; __device__ __forceinline__ void operator()(float x) { s += x; } };
struct AddDev { float m; float q; __device__ __forceinline__ void operator()(float x) { q += (x - m) * (x - m); } };
struct AddW { WRun w; __device__ __forceinline__ void operator()(float x) { w_add(w, x); } };

// The statistics of the `count` values a warp or block holds (registers, or each thread's own
// shared-memory slots, or a read of global memory). Each thread's part comes from the visitor:
// local_sum(), local_dev(m) (the sum of squared deviations from m) and local_w() (its Welford
// state). Two-pass: the mean, then squared deviations from it (visits twice); Welford: one merge
// of the threads' states (visits once). Either way the result's s is the channel part's sum and
// w_mean(result) its mean.
template <typename Visit>
__device__ __forceinline__ W group_stats(const Visit& visit, float* red, float count) {
  if (WELFORD) return group_w(visit.local_w(), red);
  const float sum = group_sum(visit.local_sum(), red);
  const float m = sum / count;
  W r = {sum, group_sum(visit.local_dev(m), red), count};
  return r;
}

// scale = weight * invstd and shift = bias of channel c.
__device__ __forceinline__ void channel_affine(const p_t* __restrict__ w, const p_t* __restrict__ b, long long c,
                                               float invstd, float& scale, float& shift) {
  scale = HAS_W ? load1(w, c) * invstd : invstd;
  shift = HAS_B ? load1(b, c) : 0.f;
}
__device__ __forceinline__ void apply(float (&v)[VEC], float mean, float scale, float shift) {
#pragma unroll
  for (int k = 0; k < VEC; ++k) v[k] = (v[k] - mean) * scale + shift;
}
//@section kEvalFlatBody

  // The block's tile: ITEMS rows of THREADS vectors, each row read by consecutive threads.
  const long long base = (long long)blockIdx.x * (THREADS * ITEMS * VEC);
#pragma unroll
  for (int u = 0; u < ITEMS; ++u) {
    const long long i = base + ((long long)u * THREADS + threadIdx.x) * VEC;
    if (i < NUMEL) {  // NUMEL is a multiple of VEC: the whole vector is inside
      float v[VEC];
      load_vec<HINT>(x + i, v);
      if (CHANNEL_INNER) {
        // VEC consecutive channels (CHANNELS is a multiple of VEC).
        const long long c0 = i % CHANNELS;
#pragma unroll
        for (int k = 0; k < VEC; ++k) {
          const Affine a = channel_affine(w, b, rm, rv, c0 + k);
          v[k] = (v[k] - a.mean) * a.scale + a.shift;
        }
      } else {
        // One channel's plane (HW is a multiple of VEC).
        const Affine a = channel_affine(w, b, rm, rv, (i / HW) % CHANNELS);
#pragma unroll
        for (int k = 0; k < VEC; ++k) v[k] = (v[k] - a.mean) * a.scale + a.shift;
      }
      store_vec(y + i, v);
    }
  }
  if (WRITE_SAVE) {
    for (long long ch = (long long)blockIdx.x * THREADS + threadIdx.x; ch < CHANNELS; ch += (long long)gridDim.x * THREADS) {
      write_save(rm, rv, save_mean, save_invstd, ch);
    }
  }
}
//@section kEvalPlaneBody

  constexpr int kUnroll = UNROLL;  // nvcc takes no macro in #pragma unroll (NVRTC does)
  const long long plane = blockIdx.x;  // n * CHANNELS + c
  const long long ch = plane % CHANNELS;
  const Affine a = channel_affine(w, b, rm, rv, ch);
  const in_t* xp = x + plane * HW;
  out_t* yp = y + plane * HW;
#pragma unroll kUnroll
  for (long long s = (long long)threadIdx.x * VEC; s < HW; s += (long long)THREADS * VEC) {
    float v[VEC];
    load_vec<HINT>(xp + s, v);
#pragma unroll
    for (int k = 0; k < VEC; ++k) v[k] = (v[k] - a.mean) * a.scale + a.shift;
    store_vec(yp + s, v);
  }
  // The planes of n == 0 write their channel's saved statistics: each channel once.
  if (WRITE_SAVE && plane < CHANNELS && threadIdx.x == 0) write_save(rm, rv, save_mean, save_invstd, ch);
}
//@section kTrainHeldBody

  __shared__ float red[96];
  const long long ch = BY_WARP ? (long long)blockIdx.x * (THREADS / 32) + threadIdx.x / 32 : (long long)blockIdx.x;
  if (BY_WARP && ch >= CHANNELS) return;  // whole warps leave: the shuffles below stay full
  const int t = BY_WARP ? threadIdx.x % 32 : threadIdx.x;
  const in_t* xc = x + ch * HW;
  out_t* yc = y + ch * HW;
  float v[ITEMS][VEC];
#pragma unroll
  for (int i = 0; i < ITEMS; ++i) {
    const long long j = ((long long)i * STRIDE + t) * VEC;
    if (j < LEN) {
      load_vec<false>(xc + off(j), v[i]);
    } else {
#pragma unroll
      for (int k = 0; k < VEC; ++k) v[i][k] = 0.f;
    }
  }
  const W s = group_stats(InRegisters{v, t}, red, (float)LEN);
  const float mean = w_mean(s);
  const float invstd = rsqrtf(s.m2 / (float)LEN + EPS);
  float scale, shift;
  channel_affine(w, b, ch, invstd, scale, shift);
#pragma unroll
  for (int i = 0; i < ITEMS; ++i) {
    const long long j = ((long long)i * STRIDE + t) * VEC;
    if (j < LEN) {
      apply(v[i], mean, scale, shift);
      store_vec(yc + off(j), v[i]);
    }
  }
  if (t == 0) { save_mean[ch] = mean; save_invstd[ch] = invstd; }
}
//@section kTrainStreamedVisitors

// A thread's elements of the block's part: j = threadIdx.x * VEC + k * THREADS * VEC, staged in
// shared memory (each thread stages and reads back only its own slots: no barrier needed) ...
struct InStage {
  const Raw* stage;
  template <typename Acc> __device__ __forceinline__ void operator()(Acc& acc) const {
    for (long long j = (long long)threadIdx.x * VEC; j < PART; j += (long long)THREADS * VEC) {
      float f[VEC];
      unpack(stage[j / VEC], f);
#pragma unroll
      for (int k = 0; k < VEC; ++k) acc(f[k]);
    }
  }
  KJIT_LOCAL_STATS
};
// ... or read from global memory (the part begins at element `begin` of the channel).
struct InGlobal {
  const in_t* xc;
  long long begin;
  template <typename Acc> __device__ __forceinline__ void operator()(Acc& acc) const {
    for (long long j = (long long)threadIdx.x * VEC; j < PART; j += (long long)THREADS * VEC) {
      float f[VEC];
      load_vec<false>(xc + off(begin + j), f);
#pragma unroll
      for (int k = 0; k < VEC; ++k) acc(f[k]);
    }
  }
  KJIT_LOCAL_STATS
};
//@section kTrainStreamedBody

  __shared__ float red[96];
  __shared__ float part_w[3];  // this block's (s, m2, n), read by the whole cluster
  extern __shared__ __align__(16) unsigned char stage_bytes[];
  Raw* stage = reinterpret_cast<Raw*>(stage_bytes);
  const long long ch = blockIdx.x / CLUSTER;
  const int rank = CLUSTER > 1 ? (int)__clusterRelativeBlockRank() : 0;
  const long long begin = (long long)rank * PART;
  const in_t* xc = x + ch * HW;
  out_t* yc = y + ch * HW;
  W s;
  if (STAGED) {
    for (long long j = (long long)threadIdx.x * VEC; j < PART; j += (long long)THREADS * VEC) {
      stage[j / VEC] = load_raw(xc + off(begin + j));
    }
    s = group_stats(InStage{stage}, red, (float)PART);
  } else {
    // Welford (Check allows only it here): group_stats visits once.
    s = group_stats(InGlobal{xc, begin}, red, (float)PART);
  }
  if (CLUSTER > 1) {
    if (threadIdx.x == 0) { part_w[0] = s.s; part_w[1] = s.m2; part_w[2] = s.n; }
    // Cluster barrier (release/acquire): every block's part_w is written.
    __cluster_barrier_arrive();
    __cluster_barrier_wait();
    // Every block merges the parts in rank order: the same statistics in every block.
    W all = {0.f, 0.f, 0.f};
    for (int r = 0; r < CLUSTER; ++r) {
      const float* o = (const float*)__cluster_map_shared_rank((void*)part_w, r);
      const W other = {o[0], o[1], o[2]};
      all = w_merge(all, other);
    }
    s = all;
    // No block leaves (or overwrites part_w) while others still read it.
    __cluster_barrier_arrive();
    __cluster_barrier_wait();
  }
  const float mean = w_mean(s);
  const float invstd = rsqrtf(s.m2 / (float)LEN + EPS);
  float scale, shift;
  channel_affine(w, b, ch, invstd, scale, shift);
  for (long long j = (long long)threadIdx.x * VEC; j < PART; j += (long long)THREADS * VEC) {
    float v[VEC];
    if (STAGED) {
      unpack(stage[j / VEC], v);
    } else {
      load_vec<HINT>(xc + off(begin + j), v);
    }
    apply(v, mean, scale, shift);
    store_vec(yc + off(begin + j), v);
  }
  if (rank == 0 && threadIdx.x == 0) { save_mean[ch] = mean; save_invstd[ch] = invstd; }
}
