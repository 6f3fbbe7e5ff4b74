// The CUDA of the reduce family's kernels, in sections that reduce.cc embeds (kjit_embed_cuda, at
// build time) and writes after policy/src/cuda/common.cuh's pieces, with the problem's sizes and the
// design point's knobs defined ahead of them as macros and constants. Each section is embedded byte for
// byte (a blank line after a marker is part of it); lines starting "//@" document it and are not embedded.
//@section kPrelude
//@ Device code every strategy shares, after codegen::kElementAccess and the key's constants.

// An accumulator: a float (sum, mean, prod, amax, amin), with the index of the value (argmax, argmin).
struct Acc {
  float v;
#if IS_ARG
  idx_t i;
#endif
};
__device__ __forceinline__ Acc acc_ident() {
  Acc a;
#if KIND == 0 || KIND == 1
  a.v = 0.f;
#elif KIND == 2
  a.v = 1.f;
#elif KIND == 3 || KIND == 5
  a.v = -KJIT_INF;
#else
  a.v = KJIT_INF;
#endif
#if IS_ARG
  // Past every real index: a real element equal to the identity (an infinity) beats it on the
  // index tie rule, so the identity never survives a row with at least one element.
  a.i = IDX_NONE;
#endif
  return a;
}
#if IS_ARG
// Whether (av, ai) beats (bv, bi): PyTorch's GreaterOrNan / LessOrNan. NaN beats every number, the
// lower index wins between two NaNs and between equal values. A strict total order on (value,
// index) pairs, so the result does not depend on the order of combination.
__device__ __forceinline__ bool beats(float av, idx_t ai, float bv, idx_t bi) {
  if (av != av) return bv != bv ? ai < bi : true;
  if (bv != bv) return false;
  return av == bv ? ai < bi : (KIND == 5 ? av > bv : av < bv);
}
__device__ __forceinline__ Acc comb(const Acc& a, const Acc& b) { return beats(a.v, a.i, b.v, b.i) ? a : b; }
__device__ __forceinline__ void acc_add(Acc& a, float x, idx_t j) {
  if (beats(x, j, a.v, a.i)) { a.v = x; a.i = j; }
}
#else
__device__ __forceinline__ float comb_f(float a, float b) {
#if KIND == 0 || KIND == 1
  return a + b;
#elif KIND == 2
  return a * b;
#elif KIND == 3
  return (a != a || a > b) ? a : b;  // MaxNanFunctor: NaN propagates
#else
  return (a != a || a < b) ? a : b;  // MinNanFunctor
#endif
}
__device__ __forceinline__ Acc comb(const Acc& a, const Acc& b) { Acc r; r.v = comb_f(a.v, b.v); return r; }
__device__ __forceinline__ void acc_add(Acc& a, float x, idx_t) { a.v = comb_f(a.v, x); }
#endif

__device__ __forceinline__ Acc shfl_xor_acc(const Acc& a, int o) {
  Acc b;
  b.v = __shfl_xor_sync(0xffffffffu, a.v, o);
#if IS_ARG
  b.i = __shfl_xor_sync(0xffffffffu, a.i, o);
#endif
  return b;
}
// Lane 0 ends with the warp's combination (the others with one of the same value).
__device__ __forceinline__ Acc warp_reduce(Acc a) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) a = comb(a, shfl_xor_acc(a, o));
  return a;
}
// Thread 0 ends with the block's combination. `red` holds 32 accumulators.
__device__ __forceinline__ Acc block_reduce(Acc a, Acc* red) {
  a = warp_reduce(a);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (THREADS > 32) {
    if (lane == 0) red[warp] = a;
    __syncthreads();
    if (warp == 0) a = warp_reduce(lane < THREADS / 32 ? red[lane] : acc_ident());
  }
  return a;
}

// The output element: the value (mean: times PyTorch's factor) in the output dtype, or the index.
__device__ __forceinline__ void store_out(y_t* p, const Acc& a) {
#if IS_ARG
  *p = (long long)a.i;
#else
  const float v = KIND == 1 ? a.v * MEAN_FACTOR : a.v;
  *reinterpret_cast<typename Bits<y_t>::U*>(p) = Bits<y_t>::from_f(v);
#endif
}
//@section kRowPartial
//@ Rows (inner == 1): the LANES threads of a row's group read its vectors LANES apart, UNROLL at once.

// Thread t's combination of `vecs` vectors (at(k): vector k, aligned to VEC elements; element indices
// from `first`): vectors t, t + LANES, ..., each of the UNROLL loads in flight into its own accumulator,
// combined in a fixed order at the end.
template <typename At>
__device__ __forceinline__ Acc walk_vectors(const At& at, long long vecs, long long first, long long t) {
  Acc acc[UNROLL];
#pragma unroll
  for (int u = 0; u < UNROLL; ++u) acc[u] = acc_ident();
  long long k = t;
  for (; k + (long long)(UNROLL - 1) * LANES < vecs; k += (long long)UNROLL * LANES) {
    float v[UNROLL][VEC];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) load_vec<HINT>(at(k + (long long)u * LANES), v[u]);
#pragma unroll
    for (int u = 0; u < UNROLL; ++u)
#pragma unroll
      for (int e = 0; e < VEC; ++e) acc_add(acc[u], v[u][e], (idx_t)(first + (k + (long long)u * LANES) * VEC + e));
  }
#pragma unroll
  for (int u = 0; u < UNROLL; ++u) {
    const long long kk = k + (long long)u * LANES;
    if (kk < vecs) {
      float v[VEC];
      load_vec<HINT>(at(kk), v);
#pragma unroll
      for (int e = 0; e < VEC; ++e) acc_add(acc[u], v[e], (idx_t)(first + kk * VEC + e));
    }
  }
#pragma unroll
  for (int u = 1; u < UNROLL; ++u) acc[0] = comb(acc[0], acc[u]);
  return acc[0];
}
// The VECS vectors at xv, in order.
__device__ __forceinline__ Acc row_vectors(const in_t* __restrict__ xv, long long vecs, long long first, long long t) {
  return walk_vectors([=](long long k) { return xv + k * VEC; }, vecs, first, t);
}
#if SEGS > 1
// Output `row` reduces SEGS segments of LEN elements (VEC divides LEN), segment s at
// (s * OUTER + row) * LEN: vector k is vector k % VPS of segment k / VPS. (Indices are not needed:
// argmax/argmin reduce one dim.)
__device__ __forceinline__ Acc row_partial(const in_t* __restrict__ x, long long row, long long t) {
  constexpr long long VPS = LEN / VEC;
  return walk_vectors(
      [=](long long k) {
        const long long s = k / VPS;
        return x + (s * OUTER + row) * LEN + (k - s * VPS) * VEC;
      },
      SEGS * VPS, 0, t);
}
#elif ROW_SPLIT
// VEC does not divide LEN: rows start anywhere relative to VEC. Each row is a scalar head up to its
// first VEC-aligned element (x itself is aligned), whole vectors, and a scalar tail; the head and
// tail (at most 2 * (VEC - 1) elements) are one element each for the row's first threads.
__device__ __forceinline__ Acc row_partial(const in_t* __restrict__ x, long long row, long long t) {
  const long long start = row * LEN;
  const long long head = min((long long)((VEC - start % VEC) % VEC), LEN);
  const long long vecs = (LEN - head) / VEC;
  const long long tail = head + vecs * VEC;  // the first element after the vectors
  Acc a = row_vectors(x + start + head, vecs, head, t);
  if (t < head + (LEN - tail)) {
    const long long j = t < head ? t : tail + (t - head);
    typedef typename Bits<in_t>::U raw_t;
    const raw_t r = *reinterpret_cast<const raw_t*>(x + start + j);
    acc_add(a, Bits<in_t>::to_f(r), (idx_t)j);
  }
  return a;
}
#else
__device__ __forceinline__ Acc row_partial(const in_t* __restrict__ x, long long row, long long t) {
  return row_vectors(x + row * LEN, LEN / VEC, 0, t);
}
#endif
//@section kWarpKernel

extern "C" __global__ void __launch_bounds__(THREADS) kjit_reduce(const in_t* __restrict__ x, y_t* __restrict__ y) {
  const long long row = (long long)blockIdx.x * (THREADS / 32) + threadIdx.x / 32;
  if (row >= OUTER) return;  // whole warps leave: the shuffles below see full warps
  const Acc a = warp_reduce(row_partial(x, row, threadIdx.x % 32));
  if (threadIdx.x % 32 == 0) store_out(y + row, a);
}
//@section kBlockKernelBody
__launch_bounds__(THREADS)
kjit_reduce(const in_t* __restrict__ x, y_t* __restrict__ y) {
  __shared__ Acc red[32];
  const long long row = blockIdx.x / CLUSTER;
  const int rank = CLUSTER > 1 ? (int)__clusterRelativeBlockRank() : 0;
  Acc a = block_reduce(row_partial(x, row, (long long)rank * THREADS + threadIdx.x), red);
#if CLUSTER_SPLIT
  // Rank 0 combines the blocks' results in rank order through distributed shared memory.
  __shared__ Acc mine;
  if (threadIdx.x == 0) mine = a;
  __cluster_barrier_arrive();
  __cluster_barrier_wait();
  if (rank == 0 && threadIdx.x == 0) {
    for (int r = 1; r < CLUSTER; ++r) a = comb(a, *(const Acc*)__cluster_map_shared_rank((void*)&mine, r));
    store_out(y + row, a);
  }
  // No block leaves while rank 0 may still read its result.
  __cluster_barrier_arrive();
  __cluster_barrier_wait();
#else
  if (threadIdx.x == 0) store_out(y + row, a);
#endif
}
//@section kSplitKernel

// Block `chunk` of a row's CHUNKS takes the row's vectors chunk * THREADS + t, then LANES apart, and
// writes its partial to the workspace; the row's last block to finish (a counter per row) combines
// the CHUNKS partials in chunk order, writes the output, and restores the workspace's zeros (the
// counter and the partials it read) as the kernel ABI requires. The combination's order is fixed
// whichever block comes last: the result is deterministic.
// Workspace: counters[OUTER] | values[OUTER * CHUNKS] | (argmax/argmin) indices[OUTER * CHUNKS].
constexpr long long COUNTERS_BYTES = (OUTER * 4 + 15) / 16 * 16;
constexpr long long VALUES_BYTES = (OUTER * CHUNKS * 4 + 15) / 16 * 16;
extern "C" __global__ void __launch_bounds__(THREADS)
kjit_reduce(const in_t* __restrict__ x, y_t* __restrict__ y, unsigned char* __restrict__ ws) {
  __shared__ Acc red[32];
  __shared__ int last;
  unsigned int* counters = reinterpret_cast<unsigned int*>(ws);
  float* values = reinterpret_cast<float*>(ws + COUNTERS_BYTES);
#if IS_ARG
  idx_t* indices = reinterpret_cast<idx_t*>(ws + COUNTERS_BYTES + VALUES_BYTES);
#endif
  const long long row = blockIdx.x / CHUNKS;
  const int chunk = (int)(blockIdx.x % CHUNKS);
  Acc a = block_reduce(row_partial(x, row, (long long)chunk * THREADS + threadIdx.x), red);
  if (threadIdx.x == 0) {
    // The partial goes to L2 (.cg: other SMs read it), made visible device-wide before the count.
    __stcg(values + row * CHUNKS + chunk, a.v);
#if IS_ARG
    __stcg(indices + row * CHUNKS + chunk, a.i);
#endif
    __threadfence();
    last = atomicAdd(counters + row, 1u) == (unsigned int)(CHUNKS - 1);
  }
  __syncthreads();
  if (!last) return;
  __threadfence();  // every other block's partial is visible now
  // Thread t combines chunks t, t + THREADS, ... in order, zeroing each as it reads it; then the
  // block reduction: a fixed tree over the chunks.
  Acc b = acc_ident();
  for (int c = threadIdx.x; c < CHUNKS; c += THREADS) {
    Acc part;
    part.v = __ldcg(values + row * CHUNKS + c);
    __stcg(values + row * CHUNKS + c, 0.f);
#if IS_ARG
    part.i = __ldcg(indices + row * CHUNKS + c);
    __stcg(indices + row * CHUNKS + c, (idx_t)0);
#endif
    b = comb(b, part);
  }
  b = block_reduce(b, red);
  if (threadIdx.x == 0) {
    store_out(y + row, b);
    counters[row] = 0u;  // every block of the row has counted: no one else touches it in this launch
  }
}
//@section kColumnsKernel

// A thread owns VEC adjacent columns (o, i .. i + VEC) of the [OUTER, LEN, INNER] view and walks down
// them, UNROLL rows in flight, row u of each batch into accumulators acc[u].
extern "C" __global__ void __launch_bounds__(THREADS) kjit_reduce(const in_t* __restrict__ x, y_t* __restrict__ y) {
  const long long t = (long long)blockIdx.x * THREADS + threadIdx.x;
  constexpr long long GROUPS = INNER / VEC;
  if (t >= OUTER * GROUPS) return;
  const long long o = t / GROUPS, i = (t % GROUPS) * VEC;
  const in_t* xc = x + o * LEN * INNER + i;
  Acc acc[UNROLL][VEC];
#pragma unroll
  for (int u = 0; u < UNROLL; ++u)
#pragma unroll
    for (int e = 0; e < VEC; ++e) acc[u][e] = acc_ident();
  for (long long j = 0; j < LEN; j += UNROLL) {
    float v[UNROLL][VEC];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u)
      if (j + u < LEN) load_vec<HINT>(xc + (j + u) * INNER, v[u]);
#pragma unroll
    for (int u = 0; u < UNROLL; ++u)
      if (j + u < LEN) {
#pragma unroll
        for (int e = 0; e < VEC; ++e) acc_add(acc[u][e], v[u][e], (idx_t)(j + u));
      }
  }
#pragma unroll
  for (int e = 0; e < VEC; ++e) {
#pragma unroll
    for (int u = 1; u < UNROLL; ++u) acc[0][e] = comb(acc[0][e], acc[u][e]);
    store_out(y + o * INNER + i + e, acc[0][e]);
  }
}
//@section kTileHead

// A block (a cluster's block `rank`) owns a tile of 32 * VEC adjacent columns of one outer index:
// lane l the VEC columns at l * VEC. Warp w of block rank takes rows s, s + STEP, ... with
// s = rank * WARPS + w and STEP = WARPS * CLUSTER, UNROLL rows in flight into their own accumulators.
// The warps' partials are combined column by column in warp order through shared memory, and the
// cluster's in rank order by rank 0 through distributed shared memory.
constexpr int WARPS = THREADS / 32;
constexpr long long TILE_COLS = 32LL * VEC;
constexpr long long COL_TILES = (INNER + TILE_COLS - 1) / TILE_COLS;
constexpr long long STEP = (long long)WARPS * CLUSTER;
//@section kTileKernelBody
__launch_bounds__(THREADS)
kjit_reduce(const in_t* __restrict__ x, y_t* __restrict__ y) {
  __shared__ Acc part[WARPS][TILE_COLS];
  const long long b = blockIdx.x / CLUSTER;
  const int rank = CLUSTER > 1 ? (int)__clusterRelativeBlockRank() : 0;
  const long long o = b / COL_TILES, tile = b % COL_TILES;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const long long i = tile * TILE_COLS + (long long)lane * VEC;
  const bool active = i < INNER;  // VEC divides INNER: a vector is wholly in or out
  const in_t* xc = x + o * LEN * INNER + i;
  Acc acc[UNROLL][VEC];
#pragma unroll
  for (int u = 0; u < UNROLL; ++u)
#pragma unroll
    for (int e = 0; e < VEC; ++e) acc[u][e] = acc_ident();
  if (active) {
    long long j = (long long)rank * WARPS + warp;
    for (; j + (UNROLL - 1) * STEP < LEN; j += UNROLL * STEP) {
      float v[UNROLL][VEC];
#pragma unroll
      for (int u = 0; u < UNROLL; ++u) load_vec<HINT>(xc + (j + u * STEP) * INNER, v[u]);
#pragma unroll
      for (int u = 0; u < UNROLL; ++u)
#pragma unroll
        for (int e = 0; e < VEC; ++e) acc_add(acc[u][e], v[u][e], (idx_t)(j + u * STEP));
    }
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      const long long jj = j + u * STEP;
      if (jj < LEN) {
        float v[VEC];
        load_vec<HINT>(xc + jj * INNER, v);
#pragma unroll
        for (int e = 0; e < VEC; ++e) acc_add(acc[u][e], v[e], (idx_t)jj);
      }
    }
  }
#pragma unroll
  for (int e = 0; e < VEC; ++e) {
#pragma unroll
    for (int u = 1; u < UNROLL; ++u) acc[0][e] = comb(acc[0][e], acc[u][e]);
    part[warp][lane * VEC + e] = acc[0][e];
  }
  __syncthreads();
  // Thread c < TILE_COLS combines column c over the warps; the result goes to part[0][c].
  for (int col = threadIdx.x; col < TILE_COLS; col += THREADS) {
    Acc a = part[0][col];
    for (int w = 1; w < WARPS; ++w) a = comb(a, part[w][col]);
    if (CLUSTER > 1) {
      part[0][col] = a;
    } else if (tile * TILE_COLS + col < INNER) {
      store_out(y + o * INNER + tile * TILE_COLS + col, a);
    }
  }
#if CLUSTER_SPLIT
  __cluster_barrier_arrive();
  __cluster_barrier_wait();
  if (rank == 0) {
    for (int col = threadIdx.x; col < TILE_COLS; col += THREADS) {
      if (tile * TILE_COLS + col >= INNER) continue;
      Acc a = part[0][col];
      for (int r = 1; r < CLUSTER; ++r) a = comb(a, ((const Acc*)__cluster_map_shared_rank((void*)&part[0][0], r))[col]);
      store_out(y + o * INNER + tile * TILE_COLS + col, a);
    }
  }
  // No block leaves while rank 0 may still read its partials.
  __cluster_barrier_arrive();
  __cluster_barrier_wait();
#endif
}
