// The CUDA of the softmax family's kernels, in sections that softmax.cc embeds (kjit_embed_cuda, at
// build time) and writes after policy/src/cuda/common.cuh's pieces, with the problem's sizes and the
// design point's knobs defined ahead of them as macros and constants. Each section is embedded byte for
// byte (a blank line after a marker is part of it); lines starting "//@" document it and are not embedded.
//@section kPrelude
//@ Device code every strategy shares, after codegen::kElementAccess: the
//@ running max and sum of exp, and their warp and block reductions.

// Running max m and sum s of exp(x - m). Matches PyTorch on special values:
// NaN anywhere, or +Inf (exp(inf - inf)), makes the sum NaN; -Inf adds nothing.
struct MS { float m; float s; };
__device__ __forceinline__ void ms_add(MS& a, float x) {
  if (x > a.m) {
    a.s = (a.m == -KJIT_INF ? 0.f : a.s * expf(a.m - x)) + 1.f;
    a.m = x;
  } else if (x != x) {
    // NaN is sticky in m too: a later larger x must not reset the sum.
    a.m = KJIT_NAN;
    a.s = KJIT_NAN;
  } else if (x != -KJIT_INF) {
    a.s += expf(x - a.m);
  }
}
__device__ __forceinline__ MS ms_merge(MS a, MS b) {
  MS r;
  r.m = fmaxf(a.m, b.m);
  if (a.m != a.m || b.m != b.m) r.m = KJIT_NAN;
  const float sa = a.m == r.m ? a.s : a.s * expf(a.m - r.m);
  const float sb = b.m == r.m ? b.s : b.s * expf(b.m - r.m);
  r.s = sa + sb;
  return r;
}
__device__ __forceinline__ MS ms_final(MS a) {
  if (a.m == KJIT_INF) a.s = KJIT_NAN;  // PyTorch sums exp(inf - inf)
  return a;
}
__device__ __forceinline__ MS warp_ms(MS v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    MS w;
    w.m = __shfl_xor_sync(0xffffffffu, v.m, o);
    w.s = __shfl_xor_sync(0xffffffffu, v.s, o);
    v = ms_merge(v, w);
  }
  return v;
}
// All threads of the block get the merged value. `red` holds 2 * 32 floats.
__device__ __forceinline__ MS block_ms(MS v, float* red) {
  v = warp_ms(v);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) { red[warp] = v.m; red[32 + warp] = v.s; }
  __syncthreads();
  if (warp == 0) {
    MS w;
    w.m = lane < (int)(blockDim.x / 32) ? red[lane] : -KJIT_INF;
    w.s = lane < (int)(blockDim.x / 32) ? red[32 + lane] : 0.f;
    w = warp_ms(w);
    if (lane == 0) { red[0] = w.m; red[32] = w.s; }
  }
  __syncthreads();
  MS r;
  r.m = red[0];
  r.s = red[32];
  __syncthreads();
  return r;
}
__device__ __forceinline__ float out_value(float x, MS ms) {
  if (LOG) return x - ms.m - logf(ms.s);
  return expf(x - ms.m) / ms.s;
}

// Rows held on chip (registers, shared memory) take two cheap passes instead of
// the online update: the max, then the sum of exp(x - max): one exp per element
// and no data-dependent branch. NaN anywhere makes the max NaN (fmaxf would drop
// it), hence every exp and the row NaN, as in PyTorch; so does +Inf (inf - inf).
__device__ __forceinline__ float nan_max(float a, float b) { return a != a ? a : (b != b ? b : fmaxf(a, b)); }
// The xor butterfly gives every lane the same value.
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = nan_max(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
// Every thread of the block gets the result. `red` holds 32 floats.
template <bool MAX>
__device__ __forceinline__ float block_reduce(float v, float* red) {
  v = MAX ? warp_max(v) : warp_sum(v);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) red[warp] = v;
  __syncthreads();
  if (warp == 0) {
    float w = lane < (int)(THREADS / 32) ? red[lane] : (MAX ? -KJIT_INF : 0.f);
    w = MAX ? warp_max(w) : warp_sum(w);
    if (lane == 0) red[0] = w;
  }
  __syncthreads();
  const float r = red[0];
  __syncthreads();  // red is reused by the next reduction
  return r;
}
// A row whose length VEC does not divide (RAGGED; block-per-row strategies only):
// its vectors start at the row's first element whose address is a multiple of
// VEC elements (the tensor's base is), and the head before that and the tail
// after the last whole vector, at most 2 * (VEC - 1) elements, are taken one
// per thread. Without this an odd row length could only use VEC = 1.
struct RowSplit { int head; long long body_end; int edges; };
__device__ __forceinline__ RowSplit row_split(long long row) {
  RowSplit s;
  s.head = RAGGED ? (int)((VEC - (row * LEN) % VEC) % VEC) : 0;
  s.body_end = RAGGED ? s.head + (LEN - s.head) / VEC * VEC : LEN;
  s.edges = RAGGED ? s.head + (int)(LEN - s.body_end) : 0;
  return s;
}
// The row index of edge element t (0 <= t < edges): the head first, then the tail.
__device__ __forceinline__ long long edge_col(const RowSplit& s, int t) {
  return t < s.head ? (long long)t : s.body_end + (t - s.head);
}
__device__ __forceinline__ float load_one(const in_t* p) {
  return Bits<in_t>::to_f(*reinterpret_cast<const typename Bits<in_t>::U*>(p));
}
__device__ __forceinline__ void store_one(out_t* p, float v) {
  *reinterpret_cast<typename Bits<out_t>::U*>(p) = Bits<out_t>::from_f(v);
}

// Per row, computed once: softmax multiplies exp(x - m) by k = 1 / sum;
// log_softmax subtracts k = log(sum) from x - m.
struct RowScale { float m; float k; };
__device__ __forceinline__ RowScale row_scale(float m, float sum) {
  RowScale r;
  r.m = m;
  r.k = LOG ? logf(sum) : 1.f / sum;
  return r;
}
__device__ __forceinline__ float scaled(float x, RowScale c) {
  if (LOG) return x - c.m - c.k;
  return expf(x - c.m) * c.k;
}
// Calls f(col, v) for the vectors at col = first, first + THREADS * VEC, ... below end, v the VEC elements at
// p + col as floats. UNROLL vectors are loaded before any is used: a loop unrolled by the compiler keeps
// its exit test between the loads, so only these batches put more than one load of a thread in flight.
template <bool STREAM, typename F>
__device__ __forceinline__ void for_vectors(const in_t* p, long long first, long long end, F f) {
  constexpr long long STEP = (long long)THREADS * VEC;
  long long col = first;
  for (; col + (UNROLL - 1) * STEP < end; col += UNROLL * STEP) {
    float v[UNROLL][VEC];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) load_vec<STREAM>(p + col + u * STEP, v[u]);
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) f(col + u * STEP, v[u]);
  }
  for (; col < end; col += STEP) {
    float v[VEC];
    load_vec<STREAM>(p + col, v);
    f(col, v);
  }
}
//@section kBackwards
//@ for_vectors' vectors in the opposite order, the last first (strategy 4's second pass with reverse = 1).

template <bool STREAM, typename F>
__device__ __forceinline__ void for_vectors_back(const in_t* p, long long first, long long end, F f) {
  constexpr long long STEP = (long long)THREADS * VEC;
  if (first >= end) return;
  long long col = first + (end - 1 - first) / STEP * STEP;  // the last vector's column
  for (; col - (UNROLL - 1) * STEP >= first; col -= UNROLL * STEP) {
    float v[UNROLL][VEC];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) load_vec<STREAM>(p + col - u * STEP, v[u]);
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) f(col - u * STEP, v[u]);
  }
  for (; col >= first; col -= STEP) {
    float v[VEC];
    load_vec<STREAM>(p + col, v);
    f(col, v);
  }
}
//@section kClusterHelpers
//@ The cluster strategies' device code (4, 5 and 9), after the cluster constants and codegen::kBulkCopy.

// The row's whole vectors (between RowSplit's scalar head and tail) dealt out to the cluster's blocks
// in rank order, the first `rem` blocks one vector more; rank 0 also takes the head and the tail.
struct ClusterPart { long long begin, len; };
__device__ __forceinline__ ClusterPart cluster_part(const RowSplit& rs, int rank) {
  const long long vectors = (rs.body_end - rs.head) / VEC, per = vectors / CLUSTER, rem = vectors % CLUSTER;
  ClusterPart p;
  p.begin = rs.head + (rank * per + (rank < rem ? rank : rem)) * VEC;
  p.len = (per + (rank < rem ? 1 : 0)) * VEC;
  return p;
}
// VEC staged elements at s (aligned to their total size) as floats.
__device__ __forceinline__ void load_staged(const stage_t* s, float (&f)[VEC]) {
  typedef typename RawOf<sizeof(stage_t) * VEC>::T Raw;
  union { Raw raw; typename Bits<stage_t>::U u[VEC]; } v;
  v.raw = *reinterpret_cast<const Raw*>(s);
#pragma unroll
  for (int k = 0; k < VEC; ++k) f[k] = Bits<stage_t>::to_f(v.u[k]);
}
//@section kClusterKernel
//@ Strategies 4 and 5.
// Each block's part: its first STAGE elements (all of them where the part fits) staged in shared memory
// (strategy 5), the rest read from global memory twice. BULK: the staged elements land by TMA bulk copies
// (one thread issues them, an mbarrier counts the bytes) as they are in memory, while the block reads the
// rest; otherwise each thread stages the vectors it reads, as floats.
constexpr long long BULK_CHUNK = 32768 / sizeof(in_t);  // elements a bulk copy
extern "C" __global__ void __cluster_dims__(CLUSTER, 1, 1) __launch_bounds__(THREADS)
kjit_softmax(const in_t* __restrict__ x, out_t* __restrict__ y) {
  __shared__ float red[64];
  __shared__ float part_ms[2];
  __shared__ unsigned long long stage_bar;
  extern __shared__ __align__(16) stage_t stage[];
  const long long row = blockIdx.x / CLUSTER;
  const int rank = (int)__clusterRelativeBlockRank();
  const RowSplit rs = row_split(row);
  const ClusterPart part = cluster_part(rs, rank);
  const in_t* xr = x + row * LEN + part.begin;
  out_t* yr = y + row * LEN + part.begin;
  const long long staged = part.len < STAGE ? part.len : STAGE;
  const bool edge = RAGGED && rank == 0 && (int)threadIdx.x < rs.edges;
  const long long ecol = edge ? edge_col(rs, threadIdx.x) : 0;
  float ev = 0.f;  // the edge element, held in a register
  if (BULK && staged > 0) {
    if (threadIdx.x == 0) {
      kjit_mbar_init(&stage_bar, 1);
      kjit_fence_init();
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      kjit_mbar_expect(&stage_bar, (unsigned)(staged * (long long)sizeof(in_t)));
      for (long long off = 0; off < staged; off += BULK_CHUNK) {
        const long long n = staged - off < BULK_CHUNK ? staged - off : BULK_CHUNK;
        kjit_bulk_copy(&stage[off], xr + off, (unsigned)(n * (long long)sizeof(in_t)), &stage_bar);
      }
    }
  }
  MS ms = {-KJIT_INF, 0.f};
  const long long first = staged + (long long)threadIdx.x * VEC;
  for_vectors<false>(xr, first, part.len, [&](long long, const float (&v)[VEC]) {
#pragma unroll
    for (int k = 0; k < VEC; ++k) ms_add(ms, v[k]);
  });
  if (!BULK) {
    // Each thread reads back only what it staged: no barrier needed for stage.
    for (long long col = (long long)threadIdx.x * VEC; col < staged; col += (long long)THREADS * VEC) {
      float v[VEC];
      load_vec<false>(xr + col, v);
#pragma unroll
      for (int k = 0; k < VEC; ++k) {
        ms_add(ms, v[k]);
        stage[col + k] = v[k];
      }
    }
  }
  if (edge) {
    ev = load_one(x + row * LEN + ecol);
    ms_add(ms, ev);
  }
  if (BULK && staged > 0) {
    kjit_mbar_wait(&stage_bar, 0);
    for (long long col = (long long)threadIdx.x * VEC; col < staged; col += (long long)THREADS * VEC) {
      float v[VEC];
      load_staged(&stage[col], v);
#pragma unroll
      for (int k = 0; k < VEC; ++k) ms_add(ms, v[k]);
    }
  }
  ms = block_ms(ms, red);
  if (threadIdx.x == 0) { part_ms[0] = ms.m; part_ms[1] = ms.s; }
  // Cluster barrier (release/acquire): every block's part_ms is written.
  __cluster_barrier_arrive();
  __cluster_barrier_wait();
  MS all = {-KJIT_INF, 0.f};
  for (int r = 0; r < CLUSTER; ++r) {
    const float* other = (const float*)__cluster_map_shared_rank((void*)part_ms, r);
    MS o = {other[0], other[1]};
    all = ms_merge(all, o);
  }
  all = ms_final(all);
  const RowScale c = row_scale(all.m, all.s);
  // No block leaves while others still read its part_ms.
  __cluster_barrier_arrive();
  __cluster_barrier_wait();
  for (long long col = (long long)threadIdx.x * VEC; col < staged; col += (long long)THREADS * VEC) {
    float v[VEC];
    load_staged(&stage[col], v);
#pragma unroll
    for (int k = 0; k < VEC; ++k) v[k] = scaled(v[k], c);
    store_vec(yr + col, v);
  }
  for_vectors<HINT>(xr, first, part.len, [&](long long col, const float (&v)[VEC]) {
    float o[VEC];
#pragma unroll
    for (int k = 0; k < VEC; ++k) o[k] = scaled(v[k], c);
    store_vec(yr + col, o);
  });
  if (edge) store_one(y + row * LEN + ecol, scaled(ev, c));
}
//@section kClusterHoldKernel
//@ Strategy 9: each block's part held on chip, so the row is read once. Its first STAGE elements are staged
//@ in shared memory (BULK: by TMA bulk copies, one thread issuing them, an mbarrier counting the bytes; else
//@ each thread stages the vectors it reads, as floats), the rest is held in registers, HOLD vectors a thread,
//@ loaded while the copies land. Each thread takes the max of its elements, then their sum of exp(x - max),
//@ with no branch per element; the blocks' (max, sum) merge as strategy 4's.
//@ The prologue (part, edge, bulk copies) and the cluster merge repeat kClusterKernel's on purpose: sharing them
//@ through helpers would change strategies 4 and 5's sources, whose dataset rows describe codegen 7 as it is.
constexpr long long BULK_CHUNK = 32768 / sizeof(in_t);  // elements a bulk copy
extern "C" __global__ void __cluster_dims__(CLUSTER, 1, 1) __launch_bounds__(THREADS)
kjit_softmax(const in_t* __restrict__ x, out_t* __restrict__ y) {
  __shared__ float red[64];
  __shared__ float part_ms[2];
  __shared__ unsigned long long stage_bar;
  extern __shared__ __align__(16) stage_t stage[];
  const long long row = blockIdx.x / CLUSTER;
  const int rank = (int)__clusterRelativeBlockRank();
  const RowSplit rs = row_split(row);
  const ClusterPart part = cluster_part(rs, rank);
  const in_t* xr = x + row * LEN + part.begin;
  out_t* yr = y + row * LEN + part.begin;
  const long long staged = part.len < STAGE ? part.len : STAGE;
  const bool edge = RAGGED && rank == 0 && (int)threadIdx.x < rs.edges;
  const long long ecol = edge ? edge_col(rs, threadIdx.x) : 0;
  if (BULK && staged > 0) {
    if (threadIdx.x == 0) {
      kjit_mbar_init(&stage_bar, 1);
      kjit_fence_init();
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      kjit_mbar_expect(&stage_bar, (unsigned)(staged * (long long)sizeof(in_t)));
      for (long long off = 0; off < staged; off += BULK_CHUNK) {
        const long long n = staged - off < BULK_CHUNK ? staged - off : BULK_CHUNK;
        kjit_bulk_copy(&stage[off], xr + off, (unsigned)(n * (long long)sizeof(in_t)), &stage_bar);
      }
    }
  }
  // The held vectors, every load issued before any is used; past the part's end, -Inf (adds nothing).
  float h[HOLD][VEC];
#pragma unroll
  for (int i = 0; i < HOLD; ++i) {
    const long long col = staged + ((long long)i * THREADS + threadIdx.x) * VEC;
    if (col < part.len) {
      load_vec<false>(xr + col, h[i]);
    } else {
#pragma unroll
      for (int k = 0; k < VEC; ++k) h[i][k] = -KJIT_INF;
    }
  }
  float m = -KJIT_INF;
#pragma unroll
  for (int i = 0; i < HOLD; ++i) {
#pragma unroll
    for (int k = 0; k < VEC; ++k) m = nan_max(m, h[i][k]);
  }
  if (!BULK) {
    // Each thread stages, and later reads back, only its own vectors: no barrier needed for stage.
    for (long long col = (long long)threadIdx.x * VEC; col < staged; col += (long long)THREADS * VEC) {
      float v[VEC];
      load_vec<false>(xr + col, v);
#pragma unroll
      for (int k = 0; k < VEC; ++k) {
        m = nan_max(m, v[k]);
        stage[col + k] = v[k];
      }
    }
  }
  const float ev = edge ? load_one(x + row * LEN + ecol) : -KJIT_INF;  // the edge element, held too
  m = nan_max(m, ev);
  if (BULK && staged > 0) {
    kjit_mbar_wait(&stage_bar, 0);
    for (long long col = (long long)threadIdx.x * VEC; col < staged; col += (long long)THREADS * VEC) {
      float v[VEC];
      load_staged(&stage[col], v);
#pragma unroll
      for (int k = 0; k < VEC; ++k) m = nan_max(m, v[k]);
    }
  }
  // A thread whose elements are all -Inf adds nothing (exp(-inf - -inf) would be NaN); a NaN or +Inf max
  // makes its sum NaN, as PyTorch's row.
  float s = 0.f;
  if (m != -KJIT_INF) {
#pragma unroll
    for (int i = 0; i < HOLD; ++i) {
#pragma unroll
      for (int k = 0; k < VEC; ++k) s += expf(h[i][k] - m);
    }
    for (long long col = (long long)threadIdx.x * VEC; col < staged; col += (long long)THREADS * VEC) {
      float v[VEC];
      load_staged(&stage[col], v);
#pragma unroll
      for (int k = 0; k < VEC; ++k) s += expf(v[k] - m);
    }
    s += expf(ev - m);
  }
  MS ms = block_ms(MS{m, s}, red);
  if (threadIdx.x == 0) { part_ms[0] = ms.m; part_ms[1] = ms.s; }
  // Cluster barrier (release/acquire): every block's part_ms is written.
  __cluster_barrier_arrive();
  __cluster_barrier_wait();
  MS all = {-KJIT_INF, 0.f};
  for (int r = 0; r < CLUSTER; ++r) {
    const float* other = (const float*)__cluster_map_shared_rank((void*)part_ms, r);
    MS o = {other[0], other[1]};
    all = ms_merge(all, o);
  }
  all = ms_final(all);
  const RowScale c = row_scale(all.m, all.s);
  // No block leaves while others still read its part_ms.
  __cluster_barrier_arrive();
  __cluster_barrier_wait();
  for (long long col = (long long)threadIdx.x * VEC; col < staged; col += (long long)THREADS * VEC) {
    float v[VEC];
    load_staged(&stage[col], v);
#pragma unroll
    for (int k = 0; k < VEC; ++k) v[k] = scaled(v[k], c);
    store_vec(yr + col, v);
  }
#pragma unroll
  for (int i = 0; i < HOLD; ++i) {
    const long long col = staged + ((long long)i * THREADS + threadIdx.x) * VEC;
    if (col < part.len) {
      float o[VEC];
#pragma unroll
      for (int k = 0; k < VEC; ++k) o[k] = scaled(h[i][k], c);
      store_vec(yr + col, o);
    }
  }
  if (edge) store_one(y + row * LEN + ecol, scaled(ev, c));
}
//@section kWarpKernel

extern "C" __global__ void __launch_bounds__(THREADS) kjit_softmax(const in_t* __restrict__ x, out_t* __restrict__ y) {
  const long long row = (long long)blockIdx.x * (THREADS / 32) + threadIdx.x / 32;
  if (row >= OUTER) return;
  const int lane = threadIdx.x % 32;
  const in_t* xr = x + row * LEN;
  out_t* yr = y + row * LEN;
  float v[ITEMS][VEC];
  float m = -KJIT_INF;
#pragma unroll
  for (int i = 0; i < ITEMS; ++i) {
    const long long col = ((long long)i * 32 + lane) * VEC;
    if (col < LEN) {
      load_vec<false>(xr + col, v[i]);
#pragma unroll
      for (int k = 0; k < VEC; ++k) m = nan_max(m, v[i][k]);
    }
  }
  m = warp_max(m);
  float sum = 0.f;
#pragma unroll
  for (int i = 0; i < ITEMS; ++i) {
    if (((long long)i * 32 + lane) * VEC < LEN) {
#pragma unroll
      for (int k = 0; k < VEC; ++k) sum += expf(v[i][k] - m);
    }
  }
  const RowScale c = row_scale(m, warp_sum(sum));
#pragma unroll
  for (int i = 0; i < ITEMS; ++i) {
    const long long col = ((long long)i * 32 + lane) * VEC;
    if (col < LEN) {
      float o[VEC];
#pragma unroll
      for (int k = 0; k < VEC; ++k) o[k] = scaled(v[i][k], c);
      store_vec(yr + col, o);
    }
  }
}
//@section kRegsKernel

extern "C" __global__ void __launch_bounds__(THREADS) kjit_softmax(const in_t* __restrict__ x, out_t* __restrict__ y) {
  __shared__ float red[64];
  const long long row = blockIdx.x;
  const in_t* xr = x + row * LEN;
  out_t* yr = y + row * LEN;
  float v[ITEMS][VEC];
  float m = -KJIT_INF;
#pragma unroll
  for (int i = 0; i < ITEMS; ++i) {
    const long long col = ((long long)i * THREADS + threadIdx.x) * VEC;
    if (col < LEN) {
      load_vec<false>(xr + col, v[i]);
#pragma unroll
      for (int k = 0; k < VEC; ++k) m = nan_max(m, v[i][k]);
    }
  }
  m = block_reduce<true>(m, red);
  float sum = 0.f;
#pragma unroll
  for (int i = 0; i < ITEMS; ++i) {
    if (((long long)i * THREADS + threadIdx.x) * VEC < LEN) {
#pragma unroll
      for (int k = 0; k < VEC; ++k) sum += expf(v[i][k] - m);
    }
  }
  const RowScale c = row_scale(m, block_reduce<false>(sum, red));
#pragma unroll
  for (int i = 0; i < ITEMS; ++i) {
    const long long col = ((long long)i * THREADS + threadIdx.x) * VEC;
    if (col < LEN) {
      float o[VEC];
#pragma unroll
      for (int k = 0; k < VEC; ++k) o[k] = scaled(v[i][k], c);
      store_vec(yr + col, o);
    }
  }
}
//@section kSmemKernel

extern "C" __global__ void __launch_bounds__(THREADS) kjit_softmax(const in_t* __restrict__ x, out_t* __restrict__ y) {
  constexpr int kUnroll = UNROLL;  // nvcc takes no macro in #pragma unroll (NVRTC does)
  __shared__ float red[64];
  extern __shared__ float row_buf[];
  const long long row = blockIdx.x;
  const in_t* xr = x + row * LEN;
  out_t* yr = y + row * LEN;
  const RowSplit rs = row_split(row);
  const bool edge = RAGGED && (int)threadIdx.x < rs.edges;
  const long long ecol = edge ? edge_col(rs, threadIdx.x) : 0;
  float m = -KJIT_INF;
#pragma unroll kUnroll
  for (long long col = rs.head + (long long)threadIdx.x * VEC; col < rs.body_end; col += (long long)THREADS * VEC) {
    float v[VEC];
    load_vec<false>(xr + col, v);
#pragma unroll
    for (int k = 0; k < VEC; ++k) {
      m = nan_max(m, v[k]);
      row_buf[col + k] = v[k];
    }
  }
  if (edge) {
    const float v = load_one(xr + ecol);
    m = nan_max(m, v);
    row_buf[ecol] = v;
  }
  m = block_reduce<true>(m, red);
  // Each thread reads back only what it staged: no barrier needed for row_buf.
  float sum = 0.f;
#pragma unroll kUnroll
  for (long long col = rs.head + (long long)threadIdx.x * VEC; col < rs.body_end; col += (long long)THREADS * VEC) {
#pragma unroll
    for (int k = 0; k < VEC; ++k) sum += expf(row_buf[col + k] - m);
  }
  if (edge) sum += expf(row_buf[ecol] - m);
  const RowScale c = row_scale(m, block_reduce<false>(sum, red));
#pragma unroll kUnroll
  for (long long col = rs.head + (long long)threadIdx.x * VEC; col < rs.body_end; col += (long long)THREADS * VEC) {
    float v[VEC];
#pragma unroll
    for (int k = 0; k < VEC; ++k) v[k] = scaled(row_buf[col + k], c);
    store_vec(yr + col, v);
  }
  if (edge) store_one(yr + ecol, scaled(row_buf[ecol], c));
}
//@section kOnlineKernel

extern "C" __global__ void __launch_bounds__(THREADS) kjit_softmax(const in_t* __restrict__ x, out_t* __restrict__ y) {
  __shared__ float red[64];
  const long long row = blockIdx.x;
  const in_t* xr = x + row * LEN;
  out_t* yr = y + row * LEN;
  const RowSplit rs = row_split(row);
  const bool edge = RAGGED && (int)threadIdx.x < rs.edges;
  const long long ecol = edge ? edge_col(rs, threadIdx.x) : 0;
  const long long first = rs.head + (long long)threadIdx.x * VEC;
  MS ms = {-KJIT_INF, 0.f};
  for_vectors<false>(xr, first, rs.body_end, [&](long long, const float (&v)[VEC]) {
#pragma unroll
    for (int k = 0; k < VEC; ++k) ms_add(ms, v[k]);
  });
  if (edge) ms_add(ms, load_one(xr + ecol));
  ms = ms_final(block_ms(ms, red));
  const RowScale c = row_scale(ms.m, ms.s);
  for_vectors<HINT>(xr, first, rs.body_end, [&](long long col, const float (&v)[VEC]) {
    float o[VEC];
#pragma unroll
    for (int k = 0; k < VEC; ++k) o[k] = scaled(v[k], c);
    store_vec(yr + col, o);
  });
  if (edge) store_one(yr + ecol, scaled(load_one(xr + ecol), c));
}
//@section kColumnsKernel

// A thread owns VEC adjacent columns (o, i..i+VEC) of the [OUTER, LEN, INNER] view.
extern "C" __global__ void __launch_bounds__(THREADS) kjit_softmax(const in_t* __restrict__ x, out_t* __restrict__ y) {
  constexpr int kUnroll = UNROLL;  // nvcc takes no macro in #pragma unroll (NVRTC does)
  const long long t = (long long)blockIdx.x * THREADS + threadIdx.x;
  const long long groups = INNER / VEC;
  if (t >= OUTER * groups) return;
  const long long o = t / groups, i = (t % groups) * VEC;
  const in_t* xc = x + o * LEN * INNER + i;
  out_t* yc = y + o * LEN * INNER + i;
  MS ms[VEC];
  float cache[CLEN][VEC];
#pragma unroll
  for (int k = 0; k < VEC; ++k) ms[k] = MS{-KJIT_INF, 0.f};
#pragma unroll kUnroll
  for (long long j = 0; j < LEN; ++j) {
    float v[VEC];
    load_vec<false>(xc + j * INNER, v);
#pragma unroll
    for (int k = 0; k < VEC; ++k) {
      ms_add(ms[k], v[k]);
      if (CACHED) cache[CACHED ? j : 0][k] = v[k];
    }
  }
#pragma unroll
  for (int k = 0; k < VEC; ++k) ms[k] = ms_final(ms[k]);
#pragma unroll kUnroll
  for (long long j = 0; j < LEN; ++j) {
    float v[VEC];
    if (CACHED) {
#pragma unroll
      for (int k = 0; k < VEC; ++k) v[k] = cache[CACHED ? j : 0][k];
    } else {
      load_vec<HINT>(xc + j * INNER, v);
    }
#pragma unroll
    for (int k = 0; k < VEC; ++k) v[k] = out_value(v[k], ms[k]);
    store_vec(yc + j * INNER, v);
  }
}
//@section kColumnsBlockKernel

// A block owns a tile of 32 * VEC adjacent columns of one outer index; lane l
// the VEC columns at l * VEC; warp w the rows w, w + WARPS, ... of the softmax
// dim. Every warp merges the partials in the same order: one result.
extern "C" __global__ void __launch_bounds__(THREADS) kjit_softmax(const in_t* __restrict__ x, out_t* __restrict__ y) {
  constexpr int kUnroll = UNROLL;  // nvcc takes no macro in #pragma unroll (NVRTC does)
  __shared__ float part_m[WARPS][32 * VEC];
  __shared__ float part_s[WARPS][32 * VEC];
  const long long tiles = (INNER + 32 * VEC - 1) / (32 * VEC);
  const long long o = blockIdx.x / tiles, tile = blockIdx.x % tiles;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const long long i = tile * 32 * VEC + (long long)lane * VEC;
  const bool active = i < INNER;
  const in_t* xc = x + o * LEN * INNER + i;
  out_t* yc = y + o * LEN * INNER + i;
  MS ms[VEC];
#pragma unroll
  for (int k = 0; k < VEC; ++k) ms[k] = MS{-KJIT_INF, 0.f};
  if (active) {
#pragma unroll kUnroll
    for (long long j = warp; j < LEN; j += WARPS) {
      float v[VEC];
      load_vec<false>(xc + j * INNER, v);
#pragma unroll
      for (int k = 0; k < VEC; ++k) ms_add(ms[k], v[k]);
    }
  }
#pragma unroll
  for (int k = 0; k < VEC; ++k) {
    part_m[warp][lane * VEC + k] = ms[k].m;
    part_s[warp][lane * VEC + k] = ms[k].s;
  }
  __syncthreads();
  if (!active) return;
#pragma unroll
  for (int k = 0; k < VEC; ++k) {
    MS all = {-KJIT_INF, 0.f};
    for (int w = 0; w < WARPS; ++w) all = ms_merge(all, MS{part_m[w][lane * VEC + k], part_s[w][lane * VEC + k]});
    ms[k] = ms_final(all);
  }
#pragma unroll kUnroll
  for (long long j = warp; j < LEN; j += WARPS) {
    float v[VEC];
    load_vec<HINT>(xc + j * INNER, v);
#pragma unroll
    for (int k = 0; k < VEC; ++k) v[k] = out_value(v[k], ms[k]);
    store_vec(yc + j * INNER, v);
  }
}
