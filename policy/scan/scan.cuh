// The CUDA of the scan family's kernels, in sections that scan.cc embeds (kjit_embed_cuda, at
// build time) and writes after policy/src/cuda/common.cuh's pieces, with the problem's sizes and the
// design point's knobs defined ahead of them as macros and constants. Each section is embedded byte for
// byte (a blank line after a marker is part of it); lines starting "//@" document it and are not embedded.
//@section kPrelude
//@ Device code every strategy shares, after codegen::kElementAccess.

// The scan's operator in float; `a` holds the earlier elements. Sums and
// products of special values do not depend on the order: a prefix holding
// NaN, or +Inf and -Inf (sum), or 0 and Inf (product) is NaN in any order.
__device__ __forceinline__ float comb(float a, float b) { return PROD ? a * b : a + b; }
#define IDENT (PROD ? 1.f : 0.f)

// Inclusive scan over the lanes of a full warp (Kogge-Stone).
__device__ __forceinline__ float warp_incl(float v, int lane) {
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const float u = __shfl_up_sync(0xffffffffu, v, o);
    if (lane >= o) v = comb(u, v);
  }
  return v;
}
// The exclusive value of each lane from the inclusive ones.
__device__ __forceinline__ float warp_excl(float incl, int lane) {
  const float u = __shfl_up_sync(0xffffffffu, incl, 1);
  return lane == 0 ? IDENT : u;
}
// Scans a thread's VEC values in place; returns their total.
__device__ __forceinline__ float vec_scan(float (&v)[VEC]) {
#pragma unroll
  for (int k = 1; k < VEC; ++k) v[k] = comb(v[k - 1], v[k]);
  return v[VEC - 1];
}
__device__ __forceinline__ void vec_apply(float (&v)[VEC], float prefix) {
#pragma unroll
  for (int k = 0; k < VEC; ++k) v[k] = comb(prefix, v[k]);
}
// A vector, or identities past the end (VEC divides the contiguous extent:
// a vector is wholly in or wholly out).
__device__ __forceinline__ void load_or_ident(const in_t* p, bool in, float (&v)[VEC]) {
  if (in) {
    load_vec<HINT>(p, v);
  } else {
#pragma unroll
    for (int k = 0; k < VEC; ++k) v[k] = IDENT;
  }
}
//@section kRowTiles
//@ Rows: the tile loads (kRowTiles, or kRaggedRowTiles where VEC does not divide the row), then the
//@ block-wide scan of the warps' totals (kRowScans). Split in two so that the rows VEC divides keep their
//@ sources byte for byte (the scans measured before ragged rows were served stay valid).

// Tile `base` of a row: vector i of thread `t` at base + (i * LANES + t) * VEC.
__device__ __forceinline__ void load_tile(const in_t* xr, long long base, int t, float (&v)[ITEMS][VEC]) {
#pragma unroll
  for (int i = 0; i < ITEMS; ++i) {
    const long long col = base + ((long long)i * LANES + t) * VEC;
    load_or_ident(xr + col, col < LEN, v[i]);
  }
}
__device__ __forceinline__ void store_tile(out_t* yr, long long base, int t, float (&v)[ITEMS][VEC]) {
#pragma unroll
  for (int i = 0; i < ITEMS; ++i) {
    const long long col = base + ((long long)i * LANES + t) * VEC;
    if (col < LEN) store_vec(yr + col, v[i]);
  }
}
//@section kRaggedRowTiles
//@ A row whose length VEC does not divide starts at any element of a vector. Its tiles run over it as
//@ seen from the VEC-aligned element at or before its first (row_shift elements earlier; the tensors'
//@ bases are VEC-aligned: Check, and outputs as PyTorch allocates them), so that every vector but the
//@ row's first and last is whole and aligned and keeps its 16-byte access. Of those two, only the
//@ elements inside the row are read (one at a time) and stored; those outside hold identities, which
//@ leave every prefix as it is. A tile past the last is all identities and stores nothing. Without this
//@ an odd row length could only use VEC = 1 (H200, cumsum f32 4095x32767: 1.16x the memory floor).

template <typename T> __device__ __forceinline__ long long row_shift(const T* r) {
  return (long long)((reinterpret_cast<unsigned long long>(r) / sizeof(T)) % VEC);
}
__device__ __forceinline__ float load_one(const in_t* p) {
  return Bits<in_t>::to_f(*reinterpret_cast<const typename Bits<in_t>::U*>(p));
}
__device__ __forceinline__ void store_one(out_t* p, float v) {
  *reinterpret_cast<typename Bits<out_t>::U*>(p) = Bits<out_t>::from_f(v);
}
// Tile `base` of the shifted row: vector i of thread `t` at base + (i * LANES + t) * VEC, row element
// that minus the shift.
__device__ __forceinline__ void load_tile(const in_t* xr, long long base, int t, float (&v)[ITEMS][VEC]) {
  const long long shift = row_shift(xr);
#pragma unroll
  for (int i = 0; i < ITEMS; ++i) {
    const long long e = base + ((long long)i * LANES + t) * VEC - shift;
    if (e >= 0 && e + VEC <= LEN) {
      load_vec<HINT>(xr + e, v[i]);
    } else {
#pragma unroll
      for (int k = 0; k < VEC; ++k) v[i][k] = e + k >= 0 && e + k < LEN ? load_one(xr + e + k) : IDENT;
    }
  }
}
__device__ __forceinline__ void store_tile(out_t* yr, long long base, int t, float (&v)[ITEMS][VEC]) {
  const long long shift = row_shift(yr);
#pragma unroll
  for (int i = 0; i < ITEMS; ++i) {
    const long long e = base + ((long long)i * LANES + t) * VEC - shift;
    if (e >= 0 && e + VEC <= LEN) {
      store_vec(yr + e, v[i]);
    } else {
#pragma unroll
      for (int k = 0; k < VEC; ++k) {
        if (e + k >= 0 && e + k < LEN) store_one(yr + e + k, v[i][k]);
      }
    }
  }
}
//@section kRowScans
// Warp 0 turns a tile's table of warp totals (chunk-major: entry i * WARPS + w
// is warp w's total of vector chunk i) into exclusive prefixes starting from
// `start`, in place, and returns start combined with the whole tile (every
// lane). Each lane scans PER_LANE consecutive entries, then the lanes' totals.
constexpr int WARPS = THREADS / 32;
constexpr int ENTRIES = ITEMS * WARPS;
constexpr int PER_LANE = (ENTRIES + 31) / 32;
__device__ __forceinline__ float table_scan(float* table, float start, int lane) {
  float before[PER_LANE];
  float run = IDENT;
#pragma unroll
  for (int j = 0; j < PER_LANE; ++j) {
    const int e = lane * PER_LANE + j;
    before[j] = run;
    if (e < ENTRIES) run = comb(run, table[e]);
  }
  const float incl = warp_incl(run, lane);
  const float base = comb(start, warp_excl(incl, lane));
#pragma unroll
  for (int j = 0; j < PER_LANE; ++j) {
    const int e = lane * PER_LANE + j;
    if (e < ENTRIES) table[e] = comb(base, before[j]);
  }
  return comb(start, __shfl_sync(0xffffffffu, incl, 31));
}
// One tile held by the block: each vector chunk scanned by its warps, the
// warps' inclusive totals into `table` (lane 31), each lane's exclusive
// prefix within its warp into `lane_excl`.
__device__ __forceinline__ void warp_scans(float (&v)[ITEMS][VEC], float (&lane_excl)[ITEMS], float* table,
                                           int warp, int lane) {
#pragma unroll
  for (int i = 0; i < ITEMS; ++i) {
    const float incl = warp_incl(vec_scan(v[i]), lane);
    lane_excl[i] = warp_excl(incl, lane);
    if (lane == 31) table[i * WARPS + warp] = incl;
  }
}
//@section kWarpBody

constexpr long long TILE = 32LL * VEC * ITEMS;
constexpr long long TILES = (LEN + TILE - 1) / TILE;
extern "C" __global__ void __launch_bounds__(THREADS) kjit_scan(const in_t* __restrict__ x, out_t* __restrict__ y) {
  const long long row = (long long)blockIdx.x * (THREADS / 32) + threadIdx.x / 32;
  if (row >= ROWS) return;  // whole warps leave: the shuffles below see full warps
  const int lane = threadIdx.x % 32;
  const in_t* xr = x + row * LEN;
  out_t* yr = y + row * LEN;
  float cur[ITEMS][VEC], nxt[ITEMS][VEC];
  float carry = IDENT;  // the row up to this tile, the same in every lane
  load_tile(xr, 0, lane, cur);
  for (long long t = 0; t < TILES; ++t) {
    const long long base = t * TILE;
    if (PREFETCH && t + 1 < TILES) load_tile(xr, base + TILE, lane, nxt);
#pragma unroll
    for (int i = 0; i < ITEMS; ++i) {
      const float incl = warp_incl(vec_scan(cur[i]), lane);
      vec_apply(cur[i], comb(carry, warp_excl(incl, lane)));
      carry = comb(carry, __shfl_sync(0xffffffffu, incl, 31));
    }
    store_tile(yr, base, lane, cur);
    if (t + 1 < TILES) {
      if (PREFETCH) {
#pragma unroll
        for (int i = 0; i < ITEMS; ++i)
#pragma unroll
          for (int k = 0; k < VEC; ++k) cur[i][k] = nxt[i][k];
      } else {
        load_tile(xr, base + TILE, lane, cur);
      }
    }
  }
}
//@section kBlockBody

constexpr long long TILE = (long long)THREADS * VEC * ITEMS;
constexpr long long TILES = (LEN + TILE - 1) / TILE;
extern "C" __global__ void __launch_bounds__(THREADS) kjit_scan(const in_t* __restrict__ x, out_t* __restrict__ y) {
  // Double-buffered by tile parity: a tile's table is written only after every
  // thread has passed the barriers of the tile between, so its last readers are done.
  __shared__ float table[2][ENTRIES];
  const long long row = blockIdx.x;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const in_t* xr = x + row * LEN;
  out_t* yr = y + row * LEN;
  float cur[ITEMS][VEC], nxt[ITEMS][VEC], lane_excl[ITEMS];
  float carry = IDENT;  // the row up to this tile (kept by warp 0)
  load_tile(xr, 0, threadIdx.x, cur);
  for (long long t = 0; t < TILES; ++t) {
    const long long base = t * TILE;
    float* tab = table[t & 1];
    if (PREFETCH && t + 1 < TILES) load_tile(xr, base + TILE, threadIdx.x, nxt);
    warp_scans(cur, lane_excl, tab, warp, lane);
    __syncthreads();
    if (warp == 0) carry = table_scan(tab, carry, lane);
    __syncthreads();
#pragma unroll
    for (int i = 0; i < ITEMS; ++i) vec_apply(cur[i], comb(tab[i * WARPS + warp], lane_excl[i]));
    store_tile(yr, base, threadIdx.x, cur);
    if (t + 1 < TILES) {
      if (PREFETCH) {
#pragma unroll
        for (int i = 0; i < ITEMS; ++i)
#pragma unroll
          for (int k = 0; k < VEC; ++k) cur[i][k] = nxt[i][k];
      } else {
        load_tile(xr, base + TILE, threadIdx.x, cur);
      }
    }
  }
}
//@section kClusterBody

// The row in chunks of CLUSTER tiles; block `rank` of the cluster scans tile
// `rank` of each chunk. Every block folds the blocks' totals in rank order, so
// all agree on the carry.
constexpr long long TILE = (long long)THREADS * VEC * ITEMS;
constexpr long long CHUNK = TILE * CLUSTER;
constexpr long long CHUNKS = (LEN + CHUNK - 1) / CHUNK;
extern "C" __global__ void __cluster_dims__(CLUSTER, 1, 1) __launch_bounds__(THREADS)
kjit_scan(const in_t* __restrict__ x, out_t* __restrict__ y) {
  // Double-buffered by chunk parity (see the block strategy); a block's total
  // is rewritten two chunks later, after a cluster barrier every reader of the
  // old value has passed.
  __shared__ float table[2][ENTRIES];
  __shared__ float block_total[2];
  const int rank = (int)__clusterRelativeBlockRank();
  const long long row = blockIdx.x / CLUSTER;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const in_t* xr = x + row * LEN;
  out_t* yr = y + row * LEN;
  float cur[ITEMS][VEC], nxt[ITEMS][VEC], lane_excl[ITEMS];
  float carry = IDENT;  // the row up to this chunk, the same in every thread of the cluster
  load_tile(xr, (long long)rank * TILE, threadIdx.x, cur);
  for (long long t = 0; t < CHUNKS; ++t) {
    const long long base = t * CHUNK + (long long)rank * TILE;
    float* tab = table[t & 1];
    if (PREFETCH && t + 1 < CHUNKS) load_tile(xr, base + CHUNK, threadIdx.x, nxt);
    warp_scans(cur, lane_excl, tab, warp, lane);
    __syncthreads();
    if (warp == 0) {
      const float total = table_scan(tab, IDENT, lane);
      if (lane == 0) block_total[t & 1] = total;
    }
    // Release/acquire across the cluster: every block's table and total are written.
    __cluster_barrier_arrive();
    __cluster_barrier_wait();
    float run = carry, mine = carry;
    for (int r = 0; r < CLUSTER; ++r) {
      if (r == rank) mine = run;
      run = comb(run, *(const float*)__cluster_map_shared_rank((void*)&block_total[t & 1], r));
    }
    carry = run;
#pragma unroll
    for (int i = 0; i < ITEMS; ++i) vec_apply(cur[i], comb(mine, comb(tab[i * WARPS + warp], lane_excl[i])));
    store_tile(yr, base, threadIdx.x, cur);
    if (t + 1 < CHUNKS) {
      if (PREFETCH) {
#pragma unroll
        for (int i = 0; i < ITEMS; ++i)
#pragma unroll
          for (int k = 0; k < VEC; ++k) cur[i][k] = nxt[i][k];
      } else {
        load_tile(xr, base + CHUNK, threadIdx.x, cur);
      }
    }
  }
  // No block leaves while another may still read its total.
  __cluster_barrier_arrive();
  __cluster_barrier_wait();
}
//@section kColumnsKernel

// A thread owns VEC adjacent columns (o, i..i+VEC) of the [OUTER, LEN, INNER]
// view and walks down them in order, ITEMS rows loaded ahead.
extern "C" __global__ void __launch_bounds__(THREADS) kjit_scan(const in_t* __restrict__ x, out_t* __restrict__ y) {
  const long long t = (long long)blockIdx.x * THREADS + threadIdx.x;
  const long long groups = INNER / VEC;
  if (t >= OUTER * groups) return;
  const long long o = t / groups, i = (t % groups) * VEC;
  const in_t* xc = x + o * LEN * INNER + i;
  out_t* yc = y + o * LEN * INNER + i;
  float acc[VEC];
#pragma unroll
  for (int k = 0; k < VEC; ++k) acc[k] = IDENT;
  for (long long j = 0; j < LEN; j += ITEMS) {
    float v[ITEMS][VEC];
#pragma unroll
    for (int u = 0; u < ITEMS; ++u) {
      if (j + u < LEN) load_vec<HINT>(xc + (j + u) * INNER, v[u]);
    }
#pragma unroll
    for (int u = 0; u < ITEMS; ++u) {
      if (j + u < LEN) {
#pragma unroll
        for (int k = 0; k < VEC; ++k) {
          acc[k] = comb(acc[k], v[u][k]);
          v[u][k] = acc[k];
        }
        store_vec(yc + (j + u) * INNER, v[u]);
      }
    }
  }
}
//@section kColumnsBlockKernel

// A block owns a tile of 32 * VEC adjacent columns of one outer index (lane l
// the VEC columns at l * VEC). The dim goes in chunks of WARPS * ITEMS rows;
// warp w scans rows w * ITEMS .. + ITEMS of a chunk, then every warp folds the
// warps' totals in warp order: all agree on the carry.
constexpr int WARPS = THREADS / 32;
constexpr long long COL_TILES = (INNER + 32 * VEC - 1) / (32 * VEC);
constexpr long long CHUNK = (long long)WARPS * ITEMS;
constexpr long long CHUNKS = (LEN + CHUNK - 1) / CHUNK;
extern "C" __global__ void __launch_bounds__(THREADS) kjit_scan(const in_t* __restrict__ x, out_t* __restrict__ y) {
  // Double-buffered by chunk parity: rewritten only after a barrier every reader has passed.
  __shared__ float totals[2][WARPS][32 * VEC];
  const long long o = blockIdx.x / COL_TILES, tile = blockIdx.x % COL_TILES;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const long long i = tile * 32 * VEC + (long long)lane * VEC;
  const bool active = i < INNER;  // VEC divides INNER: a vector is wholly in or out
  const in_t* xc = x + o * LEN * INNER + i;
  out_t* yc = y + o * LEN * INNER + i;
  float carry[VEC];
#pragma unroll
  for (int k = 0; k < VEC; ++k) carry[k] = IDENT;
  for (long long c = 0; c < CHUNKS; ++c) {
    const long long j0 = c * CHUNK + (long long)warp * ITEMS;
    float v[ITEMS][VEC];
#pragma unroll
    for (int u = 0; u < ITEMS; ++u) load_or_ident(xc + (j0 + u) * INNER, active && j0 + u < LEN, v[u]);
#pragma unroll
    for (int u = 1; u < ITEMS; ++u)
#pragma unroll
      for (int k = 0; k < VEC; ++k) v[u][k] = comb(v[u - 1][k], v[u][k]);
#pragma unroll
    for (int k = 0; k < VEC; ++k) totals[c & 1][warp][lane * VEC + k] = v[ITEMS - 1][k];
    __syncthreads();
    float mine[VEC];
#pragma unroll
    for (int k = 0; k < VEC; ++k) {
      float run = carry[k];
      mine[k] = carry[k];
      for (int w = 0; w < WARPS; ++w) {
        if (w == warp) mine[k] = run;
        run = comb(run, totals[c & 1][w][lane * VEC + k]);
      }
      carry[k] = run;
    }
#pragma unroll
    for (int u = 0; u < ITEMS; ++u) {
      if (active && j0 + u < LEN) {
#pragma unroll
        for (int k = 0; k < VEC; ++k) v[u][k] = comb(mine[k], v[u][k]);
        store_vec(yc + (j0 + u) * INNER, v[u]);
      }
    }
  }
}
