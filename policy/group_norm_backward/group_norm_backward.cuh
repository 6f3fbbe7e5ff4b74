// The CUDA of the group_norm_backward family's kernel, in a section that group_norm_backward.cc embeds
// (kjit_embed_cuda, at build time) and writes after policy/src/cuda/common.cuh's pieces (kElementAccess,
// kReductions), with the problem's sizes and the design point's knobs defined ahead of it: in_t and out_t (the
// input's type: every tensor), VEC, HINT, HAS_W, DX, DW, DB, ONE_SAMPLE (macros), N, C, HXW, GROUPS, D_CH,
// THREADS (constants), KJIT_PARAMS (the kernel ABI's parameters) and KJIT_ABSENT (the names of the ones this
// point lacks, as null pointers). Each section is embedded byte for byte (a blank line after a marker is part of
// it); lines starting "//@" document it and are not embedded.
//@section kKernel
//@ Block `slice` = n * GROUPS + g: ds and db of the group's D_CH channels (a warp a channel) into shared
//@ memory, then the group's coefficients (a block reduction over the channels), then grad_input from a second
//@ read of the slice; grad_weight and grad_bias from the per-sample terms, through the workspace when N > 1.
//@ Workspace: counters[GROUPS] | grad_weight terms[N * C] (DW) | grad_bias terms[N * C] (DB).

constexpr int WARPS = THREADS / 32;
constexpr long long COUNTERS_BYTES = (GROUPS * 4 + 15) / 16 * 16;
__device__ __forceinline__ float load_one(const in_t* p) {
  return Bits<in_t>::to_f(*reinterpret_cast<const typename Bits<in_t>::U*>(p));
}
__device__ __forceinline__ void store_one(out_t* p, float f) {
  *reinterpret_cast<typename Bits<out_t>::U*>(p) = Bits<out_t>::from_f(f);
}
__device__ __forceinline__ float gamma_of(const in_t* __restrict__ w, long long c) {
  return HAS_W ? load_one(w + c) : 1.f;
}

extern "C" __global__ void __launch_bounds__(THREADS) kjit_group_norm_backward(KJIT_PARAMS) {
  KJIT_ABSENT
  __shared__ float red[32];
  __shared__ float sds[D_CH], sdb[D_CH];
  const long long slice = blockIdx.x;
  const long long n = slice / GROUPS, g = slice % GROUPS;
  const in_t* dys = dy + slice * D_CH * HXW;
  const in_t* xs = x + slice * D_CH * HXW;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int c = warp; c < D_CH; c += WARPS) {
    float s1 = 0.f, s2 = 0.f;
    for (long long i = (long long)lane * VEC; i < HXW; i += 32LL * VEC) {
      float d[VEC], v[VEC];
      load_vec<false>(dys + c * HXW + i, d);
      load_vec<false>(xs + c * HXW + i, v);
#pragma unroll
      for (int k = 0; k < VEC; ++k) {
        s1 += d[k] * v[k];
        s2 += d[k];
      }
    }
    s1 = warp_sum(s1);
    s2 = warp_sum(s2);
    if (lane == 0) {
      sds[c] = s1;
      sdb[c] = s2;
    }
  }
  __syncthreads();
  const float m = load_one(mean + slice), r = load_one(rstd + slice);
#if DX
  {
    float sum1 = 0.f, sum2 = 0.f;
    for (int c = threadIdx.x; c < D_CH; c += THREADS) {
      const float gm = gamma_of(w, g * D_CH + c);
      sum1 += sds[c] * gm;
      sum2 += sdb[c] * gm;
    }
    sum1 = block_sum(sum1, red);
    sum2 = block_sum(sum2, red);
    const float s = 1.f / (float)(D_CH * HXW);
    const float c2 = (sum2 * m - sum1) * r * r * r * s;
    const float c3 = -c2 * m - sum2 * r * s;
    out_t* dxs = dx + slice * D_CH * HXW;
    for (long long i = (long long)threadIdx.x * VEC; i < D_CH * HXW; i += (long long)THREADS * VEC) {
      float d[VEC], v[VEC], o[VEC];
      load_vec<HINT>(dys + i, d);
      load_vec<HINT>(xs + i, v);
      const float c1 = r * gamma_of(w, g * D_CH + i / HXW);  // VEC divides HXW: one channel a vector
#pragma unroll
      for (int k = 0; k < VEC; ++k) o[k] = c1 * d[k] + c2 * v[k] + c3;
      store_vec(dxs + i, o);
    }
  }
#endif
#if DW || DB
#if ONE_SAMPLE
  for (int c = threadIdx.x; c < D_CH; c += THREADS) {
    if (DW) store_one(dw + g * D_CH + c, (sds[c] - sdb[c] * m) * r);
    if (DB) store_one(db + g * D_CH + c, sdb[c]);
  }
#else
  float* terms_w = reinterpret_cast<float*>(ws + COUNTERS_BYTES);
  float* terms_b = terms_w + (DW ? N * C : 0);
  for (int c = threadIdx.x; c < D_CH; c += THREADS) {
    // To L2 (.cg): the group's last block, on another SM, reads them.
    if (DW) __stcg(terms_w + n * C + g * D_CH + c, (sds[c] - sdb[c] * m) * r);
    if (DB) __stcg(terms_b + n * C + g * D_CH + c, sdb[c]);
  }
  __shared__ int last;
  __threadfence();  // this thread's terms are visible device-wide before the block counts
  __syncthreads();
  if (threadIdx.x == 0) {
    last = atomicAdd(reinterpret_cast<unsigned int*>(ws) + g, 1u) == (unsigned int)(N - 1);
  }
  __syncthreads();
  if (!last) return;
  __threadfence();  // every other sample's terms are visible now
  for (int c = threadIdx.x; c < D_CH; c += THREADS) {
    const long long ch = g * D_CH + c;
    float sw = 0.f, sb = 0.f;
    for (long long q = 0; q < N; ++q) {
      if (DW) {
        sw += __ldcg(terms_w + q * C + ch);
        __stcg(terms_w + q * C + ch, 0.f);
      }
      if (DB) {
        sb += __ldcg(terms_b + q * C + ch);
        __stcg(terms_b + q * C + ch, 0.f);
      }
    }
    if (DW) store_one(dw + ch, sw);
    if (DB) store_one(db + ch, sb);
  }
  // Every block of the group has counted: no one else touches the counter in this launch.
  if (threadIdx.x == 0) reinterpret_cast<unsigned int*>(ws)[g] = 0u;
#endif
#endif
}
