// The CUDA of the group_norm family's kernels, in sections that group_norm.cc embeds (kjit_embed_cuda, at
// build time) and writes after policy/src/cuda/common.cuh's pieces, with the problem's sizes and the
// design point's knobs defined ahead of them as macros and constants. Each section is embedded byte for
// byte (a blank line after a marker is part of it); lines starting "//@" document it and are not embedded.
//@section kPrelude
//@ Device code every strategy shares, after codegen::kElementAccess and codegen::kReductions.

// One vector's VEC values as a batch (their exact mean: VEC is a power of two), merged into a:
// one division per vector instead of one per element keeps the streaming loops memory-bound.
__device__ __forceinline__ void w_add_vec(WRun& a, const float (&v)[VEC]) {
  float s = 0.f;
#pragma unroll
  for (int k = 0; k < VEC; ++k) s += v[k];
  const float m = s * (1.f / VEC);
  float q = 0.f;
#pragma unroll
  for (int k = 0; k < VEC; ++k) q += (v[k] - m) * (v[k] - m);
  w_add_batch(a, s, m, q, (float)VEC);
}
// One element between memory and a float (weight, bias, mean, rstd).
__device__ __forceinline__ float load_one(const in_t* p) {
  return Bits<in_t>::to_f(*reinterpret_cast<const typename Bits<in_t>::U*>(p));
}
__device__ __forceinline__ void store_one(out_t* p, float v) {
  *reinterpret_cast<typename Bits<out_t>::U*>(p) = Bits<out_t>::from_f(v);
}
// x as the output dtype holds it (round to nearest even), back in float.
__device__ __forceinline__ float round_to_out(float x) { return Bits<out_t>::to_f(Bits<out_t>::from_f(x)); }

// A slice's mean and rstd as PyTorch stores them (in the output dtype) and normalises with.
struct Stats { float mean; float rstd; };
__device__ __forceinline__ Stats finish(float mean, float m2) {
  const float eps = round_to_out(EPS);  // PyTorch casts eps to the input dtype, then to float
  Stats s;
  s.mean = round_to_out(mean);
  s.rstd = round_to_out(rsqrtf(m2 / (float)LEN + eps));
  return s;
}
__device__ __forceinline__ void write_stats(out_t* mean_out, out_t* rstd_out, long long slice, Stats s) {
  store_one(mean_out + slice, s.mean);
  store_one(rstd_out + slice, s.rstd);
}

// y for the VEC elements at offset col of a slice whose first channel is ch0. They share one
// channel: VEC divides HXW. PyTorch's formulas, term by term (see group_norm.cc).
__device__ __forceinline__ void normalize(const float (&v)[VEC], Stats s, const in_t* __restrict__ w,
                                          const in_t* __restrict__ b, int ch0, int col, float (&o)[VEC]) {
  const int c = ch0 + col / HXW;
  if (HXW == 1) {
    const float gamma = HAS_W ? load_one(w + c) : 1.f, beta = HAS_B ? load_one(b + c) : 0.f;
#pragma unroll
    for (int k = 0; k < VEC; ++k) {
      const float t = (v[k] - s.mean) * s.rstd;
      o[k] = HAS_W && HAS_B ? fmaf(t, gamma, beta) : HAS_W ? t * gamma : HAS_B ? fmaf(v[k] - s.mean, s.rstd, beta) : t;
    }
  } else if (HAS_W || HAS_B) {
    const float a = HAS_W ? s.rstd * load_one(w + c) : s.rstd;
    const float bb = HAS_B ? fmaf(-a, s.mean, load_one(b + c)) : -a * s.mean;
#pragma unroll
    for (int k = 0; k < VEC; ++k) o[k] = fmaf(a, v[k], bb);
  } else {
#pragma unroll
    for (int k = 0; k < VEC; ++k) o[k] = (v[k] - s.mean) * s.rstd;
  }
}
//@section kHeldKernel

// The slice's values a thread holds: v[i] at offsets (i * STRIDE + t) * VEC.
extern "C" __global__ void __launch_bounds__(THREADS) kjit_group_norm(KJIT_PARAMS) {
  __shared__ float red[96];
  const long long slice = SLICE_BY_WARP ? (long long)blockIdx.x * (THREADS / 32) + threadIdx.x / 32 : (long long)blockIdx.x;
  if (SLICE_BY_WARP && slice >= SLICES) return;  // whole warps leave: the shuffles below stay full
  const int t = SLICE_BY_WARP ? threadIdx.x % 32 : threadIdx.x;
  const in_t* xs = x + slice * LEN;
  out_t* ys = y + slice * LEN;
  float v[ITEMS][VEC];
#pragma unroll
  for (int i = 0; i < ITEMS; ++i) {
    const int col = (i * STRIDE + t) * VEC;
    if (col < LEN) {
      load_vec<false>(xs + col, v[i]);
    } else {
#pragma unroll
      for (int k = 0; k < VEC; ++k) v[i][k] = 0.f;
    }
  }
  // Each thread's values, summed in PARTIALS partials (held_sum, codegen.cc); the zeros past the end add
  // nothing to the sum, and are left out of the squared deviations.
  struct Value {
    const float (&v)[ITEMS][VEC];
    __device__ __forceinline__ float operator()(int q) const { return v[q / VEC][q % VEC]; }
  };
  struct Dev {
    const float (&v)[ITEMS][VEC];
    int t;
    float m;
    __device__ __forceinline__ float operator()(int q) const {
      const float d = v[q / VEC][q % VEC] - m;
      return ((q / VEC) * STRIDE + t) * VEC < LEN ? d * d : 0.f;
    }
  };
  const float local_sum = held_sum<ITEMS * VEC, PARTIALS>(Value{v});
  float mean, m2;
  if (WELFORD) {
    // The thread's own two-pass statistics, merged across threads (Chan): no division per vector,
    // and the mean is the merged sum over LEN, rounded once (see W in codegen.cc).
    int items = 0;
#pragma unroll
    for (int i = 0; i < ITEMS; ++i) items += (i * STRIDE + t) * VEC < LEN ? 1 : 0;
    W a = {0.f, 0.f, 0.f};
    if (items > 0) {
      a.n = (float)(items * VEC);
      a.s = local_sum;
      a.m2 = held_sum<ITEMS * VEC, PARTIALS>(Dev{v, t, div_count(a.s, a.n)});
    }
    a = SLICE_BY_WARP ? warp_w(a) : block_w(a, red);
    mean = w_mean(a);
    m2 = a.m2;
  } else {
    mean = (SLICE_BY_WARP ? warp_sum(local_sum) : block_sum(local_sum, red)) / (float)LEN;
    const float q = held_sum<ITEMS * VEC, PARTIALS>(Dev{v, t, mean});
    m2 = SLICE_BY_WARP ? warp_sum(q) : block_sum(q, red);
  }
  const Stats st = finish(mean, m2);
  const int ch0 = (int)(slice % G) * D;
#pragma unroll
  for (int i = 0; i < ITEMS; ++i) {
    const int col = (i * STRIDE + t) * VEC;
    if (col < LEN) {
      float o[VEC];
      normalize(v[i], st, w, b, ch0, col, o);
      store_vec(ys + col, o);
    }
  }
  if (t == 0) write_stats(mean_out, rstd_out, slice, st);
}
//@section kStreamedKernel

// Shared-memory staging, VEC floats at a time (16-byte aligned: col is a multiple of VEC).
__device__ __forceinline__ void stage_store(float* p, const float (&v)[VEC]) {
  if constexpr (VEC % 4 == 0) {
#pragma unroll
    for (int k = 0; k < VEC; k += 4) *reinterpret_cast<float4*>(p + k) = make_float4(v[k], v[k + 1], v[k + 2], v[k + 3]);
  } else if constexpr (VEC == 2) {
    *reinterpret_cast<float2*>(p) = make_float2(v[0], v[1]);
  } else {
    p[0] = v[0];
  }
}
__device__ __forceinline__ void stage_load(const float* p, float (&v)[VEC]) {
  if constexpr (VEC % 4 == 0) {
#pragma unroll
    for (int k = 0; k < VEC; k += 4) {
      const float4 f = *reinterpret_cast<const float4*>(p + k);
      v[k] = f.x; v[k + 1] = f.y; v[k + 2] = f.z; v[k + 3] = f.w;
    }
  } else if constexpr (VEC == 2) {
    const float2 f = *reinterpret_cast<const float2*>(p);
    v[0] = f.x; v[1] = f.y;
  } else {
    v[0] = p[0];
  }
}

// The sum of every block's v over the cluster, in rank order (the same value in every block).
// `slot` is this block's exchange cell: one per exchange, so a block writing the next one never
// races a reader of the last.
__device__ __forceinline__ float cluster_total(float v, float* slot) {
  if (CLUSTER == 1) return v;
  if (threadIdx.x == 0) *slot = v;
  __cluster_barrier_arrive();  // release: the slot is written
  __cluster_barrier_wait();
  float total = 0.f;
  for (int r = 0; r < CLUSTER; ++r) total += *(const float*)__cluster_map_shared_rank((void*)slot, r);
  return total;
}

// A block owns PART consecutive elements of a slice (a cluster of CLUSTER blocks one slice). Thread
// t's offsets in the part: t * VEC + j * SWEEP; those below STAGED are kept in shared memory at the
// same offset (only by the thread that loaded them: no barrier), the rest read again.
extern "C" __global__ void KJIT_CLUSTER_DIMS __launch_bounds__(THREADS) kjit_group_norm(KJIT_PARAMS) {
  __shared__ float red[96];
  __shared__ float exchange[4];  // this block's partials for the cluster
  extern __shared__ float4 staged_raw[];
  float* staged = reinterpret_cast<float*>(staged_raw);
  const long long slice = blockIdx.x / CLUSTER;
  const int rank = CLUSTER > 1 ? (int)__clusterRelativeBlockRank() : 0;
  const int begin = rank * PART;
  const in_t* xs = x + slice * LEN + begin;
  out_t* ys = y + slice * LEN + begin;
  // Read the part once: stage what fits, Welford on the way.
  WRun acc = {0.f, 0.f, 0.f, 0.f};
  for (int base = threadIdx.x * VEC; base < PART; base += SWEEP * UNROLL) {
    float v[UNROLL][VEC];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      if (base + u * SWEEP < PART) load_vec<false>(xs + base + u * SWEEP, v[u]);
    }
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      const int col = base + u * SWEEP;
      if (col < PART) {
        if (WELFORD) w_add_vec(acc, v[u]);
        if (col < STAGED) stage_store(staged + col, v[u]);
      }
    }
  }
  float mean, m2;
  if (WELFORD) {
    W all = block_w(w_state(acc), red);
    if (CLUSTER > 1) {
      if (threadIdx.x == 0) { exchange[0] = all.s; exchange[1] = all.m2; exchange[2] = all.n; }
      __cluster_barrier_arrive();  // release: the partials are written
      __cluster_barrier_wait();
      all = W{0.f, 0.f, 0.f};
      for (int r = 0; r < CLUSTER; ++r) {
        const float* o = (const float*)__cluster_map_shared_rank((void*)exchange, r);
        all = w_merge(all, W{o[0], o[1], o[2]});
      }
    }
    mean = w_mean(all);
    m2 = all.m2;
  } else {
    // Two-pass from the staged part (all of it: Check ensures STAGED == PART).
    float s = 0.f;
    for (int col = threadIdx.x * VEC; col < PART; col += SWEEP) {
      float v[VEC];
      stage_load(staged + col, v);
#pragma unroll
      for (int k = 0; k < VEC; ++k) s += v[k];
    }
    mean = cluster_total(block_sum(s, red), &exchange[0]) / (float)LEN;
    float q = 0.f;
    for (int col = threadIdx.x * VEC; col < PART; col += SWEEP) {
      float v[VEC];
      stage_load(staged + col, v);
#pragma unroll
      for (int k = 0; k < VEC; ++k) q += (v[k] - mean) * (v[k] - mean);
    }
    m2 = cluster_total(block_sum(q, red), &exchange[1]);
  }
  // Done reading the other blocks' exchange cells; the matching wait, before leaving, keeps this
  // block's cells alive until every block has read them.
  if (CLUSTER > 1) __cluster_barrier_arrive();
  const Stats st = finish(mean, m2);
  const int ch0 = (int)(slice % G) * D;
  for (int base = threadIdx.x * VEC; base < PART; base += SWEEP * UNROLL) {
    float v[UNROLL][VEC];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      const int col = base + u * SWEEP;
      if (col < PART) {
        if (col < STAGED) stage_load(staged + col, v[u]);
        else load_vec<HINT>(xs + col, v[u]);  // the last read of these elements
      }
    }
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      const int col = base + u * SWEEP;
      if (col < PART) {
        float o[VEC];
        normalize(v[u], st, w, b, ch0, begin + col, o);
        store_vec(ys + col, o);
      }
    }
  }
  if (rank == 0 && threadIdx.x == 0) write_stats(mean_out, rstd_out, slice, st);
  if (CLUSTER > 1) __cluster_barrier_wait();
}
