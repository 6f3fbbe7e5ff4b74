// The CUDA of the batch_norm_backward family's kernel, in a section that batch_norm_backward.cc embeds
// (kjit_embed_cuda, at build time) and writes after policy/src/cuda/common.cuh's pieces (kElementAccess,
// kReductions; before sm_90 kNoClusters), with the problem's sizes and the design point's knobs defined ahead of
// it: in_t and out_t (the input's type: x, dy, grad_input), p_t (the weight's type: weight, grad_weight,
// grad_bias), VEC, HINT, HAS_W, DX, DW, DB, FUSED (macros), NORM (1 / M in float, by its bits), N, C, HW, HWV
// (HW / VEC), CHV (a channel's vectors), CLUSTER, PART (vectors a block), THREADS (constants), KJIT_CLUSTER (the
// kernel's cluster attribute, or nothing), KJIT_PARAMS (the kernel ABI's parameters) and KJIT_ABSENT (the names
// of the ones this key lacks, as null pointers; all named pointers voided). Each section is embedded byte for
// byte (a blank line after a marker is part of it); lines starting "//@" document it and are not embedded.
//@section kKernel
//@ Block b: channel b / CLUSTER, rank b % CLUSTER (the cluster's rank), vectors [rank * PART, min(CHV, (rank +
//@ 1) * PART)) of the channel (vector v: plane n = v / HWV, element (n * C + c) * HW + (v % HWV) * VEC).
//@ Pass 1: s1 = sum dy, s2 = sum dy * (x - mean), a block sum, then the cluster's parts added in rank order
//@ (every block the same sums). Rank 0 writes grad_weight and grad_bias. Pass 2: grad_input over the range.

__device__ __forceinline__ long long elem_of(long long ch, long long v) {
  const long long n = v / HWV;
  return (n * C + ch) * HW + (v - n * HWV) * VEC;
}
__device__ __forceinline__ float param_of(const p_t* __restrict__ p, long long ch) {
  return Bits<p_t>::to_f(*reinterpret_cast<const typename Bits<p_t>::U*>(p + ch));
}
__device__ __forceinline__ void store_param(p_t* p, long long ch, float f) {
  *reinterpret_cast<typename Bits<p_t>::U*>(p + ch) = Bits<p_t>::from_f(f);
}

extern "C" __global__ void KJIT_CLUSTER __launch_bounds__(THREADS) kjit_batch_norm_backward(KJIT_PARAMS) {
  KJIT_ABSENT
  __shared__ float red[32];
  __shared__ float part[2];  // this block's (s1, s2), read by the whole cluster
  const long long ch = blockIdx.x / CLUSTER;
  const int rank = CLUSTER > 1 ? (int)__clusterRelativeBlockRank() : 0;
  const long long begin = (long long)rank * PART;
  const long long end = begin + PART < CHV ? begin + PART : CHV;
  const float m = save_mean[ch], r = save_invstd[ch];
  float s1 = 0.f, s2 = 0.f;
  for (long long v = begin + threadIdx.x; v < end; v += THREADS) {
    const long long e = elem_of(ch, v);
    float d[VEC], xv[VEC];
    load_vec<false>(dy + e, d);
    load_vec<false>(x + e, xv);
#pragma unroll
    for (int k = 0; k < VEC; ++k) {
      s1 += d[k];
      s2 += d[k] * (xv[k] - m);
    }
  }
  s1 = block_sum(s1, red);
  s2 = block_sum(s2, red);
  if (CLUSTER > 1) {
    if (threadIdx.x == 0) {
      part[0] = s1;
      part[1] = s2;
    }
    // Cluster barrier (release/acquire): every block's part is written.
    __cluster_barrier_arrive();
    __cluster_barrier_wait();
    float a1 = 0.f, a2 = 0.f;
    for (int q = 0; q < CLUSTER; ++q) {
      const float* o = (const float*)__cluster_map_shared_rank((void*)part, q);
      a1 += o[0];
      a2 += o[1];
    }
    s1 = a1;
    s2 = a2;
    // No block leaves while others still read its part.
    __cluster_barrier_arrive();
    __cluster_barrier_wait();
  }
  if (rank == 0 && threadIdx.x == 0) {
    if (DW) store_param(dw, ch, s2 * r);
    if (DB) store_param(db, ch, s1);
  }
#if DX
  const float g = HAS_W ? param_of(w, ch) : 1.f;
#if FUSED
  // batch_norm_backward_kernel's order.
  const float grad_mean = s1 * NORM;
  const float proj_scale = s2 * NORM * r * r;
  const float grad_scale = r * g;
#else
  // batch_norm_backward_elemt's order.
  const float m_dy = s1 * NORM;
  const float f1 = r * r * s2 * NORM;
  const float f2 = g * r;
#endif
  for (long long v = begin + threadIdx.x; v < end; v += THREADS) {
    const long long e = elem_of(ch, v);
    float d[VEC], xv[VEC], o[VEC];
    load_vec<HINT>(dy + e, d);
    load_vec<HINT>(x + e, xv);
#pragma unroll
    for (int k = 0; k < VEC; ++k) {
#if FUSED
      o[k] = (d[k] - (xv[k] - m) * proj_scale - grad_mean) * grad_scale;
#else
      o[k] = (d[k] - m_dy - (xv[k] - m) * f1) * f2;
#endif
    }
    store_vec(dx + e, o);
  }
#endif
}
