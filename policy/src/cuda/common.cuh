// The CUDA every family's generated kernels share, cut into sections that policy/src/codegen.cc embeds
// (kjit_embed_cuda, at build time) and codegen.h documents: what each provides and what it needs defined
// before it. A family's source is its own sections after these, with its problem's sizes and its design
// point's knobs as macros and constants ahead of them. Each section is embedded byte for byte (a blank
// line after a marker is part of the section).
//@section kIncludes

#include <cuda_fp16.h>
#include <cuda_bf16.h>
// (Cluster intrinsics are built in for sm_90: no <cooperative_groups.h>, which costs 1.5 s to compile.)
// NVRTC has no <cmath>: the special values by their bits.
#define KJIT_INF __int_as_float(0x7f800000)
#define KJIT_NAN __int_as_float(0x7fc00000)
//@section kNoClusters
// No clusters before sm_90: each block is a cluster of one (rank 0, its own shared memory, a cluster barrier
// is the block's barrier).
__device__ __forceinline__ unsigned __clusterRelativeBlockRank() { return 0; }
__device__ __forceinline__ void __cluster_barrier_arrive() {}
__device__ __forceinline__ void __cluster_barrier_wait() { __syncthreads(); }
template <typename T> __device__ __forceinline__ T* __cluster_map_shared_rank(T* p, unsigned) { return p; }
//@section kElementAccess

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
//@section kRawAccess

typedef Bits<in_t>::U raw_t;
// CV elements at p (aligned to their total size) as raw bits; STREAM: evict-first.
template <int CV_, bool STREAM>
__device__ __forceinline__ void load_raw(const in_t* p, raw_t (&v)[CV_]) {
  typedef typename RawOf<sizeof(raw_t) * CV_>::T R;
  union { R r; raw_t u[CV_]; } w;
  if (STREAM) w.r = __ldcs(reinterpret_cast<const R*>(p));
  else w.r = __ldg(reinterpret_cast<const R*>(p));
#pragma unroll
  for (int k = 0; k < CV_; ++k) v[k] = w.u[k];
}
template <int CV_>
__device__ __forceinline__ void store_raw(out_t* p, const raw_t (&v)[CV_]) {
  typedef typename RawOf<sizeof(raw_t) * CV_>::T R;
  union { R r; raw_t u[CV_]; } w;
#pragma unroll
  for (int k = 0; k < CV_; ++k) w.u[k] = v[k];
  if (HINT) __stcs(reinterpret_cast<R*>(p), w.r);
  else *reinterpret_cast<R*>(p) = w.r;
}
//@section kReductions

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

// Welford statistics as threads exchange and merge them: the sum s of the values, the sum of
// squared deviations from their mean m2, and the count n (exact in float up to 2^24; a thread
// that saw nothing has n == 0). NaN anywhere makes s and m2 NaN, as in PyTorch. The mean is
// w_mean: s / n, rounded once at the end.
// Why the sum and not the mean (codegen 1 carried the mean): a merge rounds its result at the
// scale of what it carries. A lane's mean of 18 values of +-1e6 is ~1e5, rounded to ~0.004 at every
// merge, and a tree of such merges left a channel mean ~0.002 off where the values nearly cancel
// (the bf16 batch_norm rejection, 2026-11-30: 177 tolerance units, PyTorch 7). Sums round far
// less: bf16 values of 2^13..2^20 are multiples of 64, so their sums are exact in float up to
// 2^30, and f32 sums round at the scale of the sum, as a two-pass mean does.
struct W { float s; float m2; float n; };
__device__ __forceinline__ float w_mean(const W& a) { return a.s / a.n; }
// x / n for a count n (1 <= n <= 2^24), where the quotient only steers (a running mean, the
// means a merge compares, a merge's weight): the hardware reciprocal and one correction on the
// quotient, within about half an ulp of x / n. IEEE division's slow path is a call, and at the
// register cap (1024 threads holding 52 floats each) the calls of a block merge spilled 232
// bytes where this spills 36. The statistic itself (w_mean) is divided exactly.
__device__ __forceinline__ float div_count(float x, float n) {
  const float r = __fdividef(1.f, n);
  const float q = x * r;
  return fmaf(fmaf(-q, n, x), r, q);
}
// Chan et al.'s merge, in sums: the difference of the two means (each rounded once from its sum)
// weighs the squared deviations between the parts. Not symmetric in rounding: callers merge in a
// fixed order or broadcast one lane's result.
__device__ __forceinline__ W w_merge(W a, W b) {
  if (a.n == 0.f) return b;
  if (b.n == 0.f) return a;
  W r;
  r.n = a.n + b.n;
  r.s = a.s + b.s;
  const float d = div_count(b.s, b.n) - div_count(a.s, a.n);
  r.m2 = a.m2 + b.m2 + d * d * div_count(a.n * b.n, r.n);
  return r;
}
// A thread's running Welford state over values it streams through. Here the mean is carried: it
// steers m2's updates (x - mean), which need it at every step; the statistic's sum is kept beside
// it, and w_state hands both on as a W. Its division is div_count's: the mean only steers, and
// an IEEE division per element was most of an update's instructions.
struct WRun { float mean; float m2; float n; float s; };
__device__ __forceinline__ void w_add(WRun& a, float x) {
  a.n += 1.f;
  a.s += x;
  const float d = x - a.mean;
  a.mean += div_count(d, a.n);
  a.m2 += d * (x - a.mean);
}
// `cnt` values whose sum is bs, whose mean is bm and whose squared deviations from it sum to bq,
// added to a at once: one division per batch instead of one per value. (An IEEE division: with
// div_count, group_norm's streaming loop (256 threads, 2 x 4 values in flight) took 48 registers
// instead of 40, one block less per SM.)
__device__ __forceinline__ void w_add_batch(WRun& a, float bs, float bm, float bq, float cnt) {
  const float n = a.n + cnt;
  const float d = bm - a.mean;
  const float fb = cnt / n;
  a.m2 += bq + d * d * a.n * fb;
  a.mean += d * fb;
  a.n = n;
  a.s += bs;
}
__device__ __forceinline__ W w_state(const WRun& a) { W r = {a.s, a.m2, a.n}; return r; }
// The sum of N held values given by term(q), q = 0 .. N-1 (N known when generated; term is
// inlined and the loop unrolled, so q is a constant and held arrays stay in registers), into K
// (1 to 4) partial sums round-robin, added pairwise at the end: each running sum sees 1/K of the
// values (its rounding errors grow with its length), the K chains are independent (latency
// hidden), and only K partials are live. A full pairwise tree was no more accurate in a host
// emulation of 32 lanes x 18 f32 values (mean RMS error 0.00127 against 0.00128 with K = 4, 0.00151
// with one running sum) and keeps more partials live. Generators pick K = 1 where
// the held values leave little room under the per-thread register cap (HeldPartials in
// codegen.h): there even three more live floats spill.
template <int N, int K, typename Term> __device__ __forceinline__ float held_sum(const Term& term) {
  constexpr int P = N < K ? N : K;
  float p[P];
#pragma unroll
  for (int k = 0; k < P; ++k) p[k] = term(k);
#pragma unroll
  for (int q = P; q < N; ++q) p[q % P] += term(q);
  if constexpr (P == 4) return (p[0] + p[1]) + (p[2] + p[3]);
  else if constexpr (P == 3) return (p[0] + p[1]) + p[2];
  else if constexpr (P == 2) return p[0] + p[1];
  else return p[0];
}
// Every lane gets lane 0's merge of the warp.
__device__ __forceinline__ W warp_w(W v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    W w;
    w.s = __shfl_xor_sync(0xffffffffu, v.s, o);
    w.m2 = __shfl_xor_sync(0xffffffffu, v.m2, o);
    w.n = __shfl_xor_sync(0xffffffffu, v.n, o);
    v = w_merge(v, w);
  }
  v.s = __shfl_sync(0xffffffffu, v.s, 0);
  v.m2 = __shfl_sync(0xffffffffu, v.m2, 0);
  v.n = __shfl_sync(0xffffffffu, v.n, 0);
  return v;
}
// Every thread of the block gets the merge. `red` holds 3 * 32 floats.
__device__ __forceinline__ W block_w(W v, float* red) {
  v = warp_w(v);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) { red[warp] = v.s; red[32 + warp] = v.m2; red[64 + warp] = v.n; }
  __syncthreads();
  if (warp == 0) {
    W w = {0.f, 0.f, 0.f};
    if (lane < (int)(THREADS / 32)) { w.s = red[lane]; w.m2 = red[32 + lane]; w.n = red[64 + lane]; }
    w = warp_w(w);
    if (lane == 0) { red[0] = w.s; red[32] = w.m2; red[64] = w.n; }
  }
  __syncthreads();
  W r = {red[0], red[32], red[64]};
  __syncthreads();
  return r;
}
//@section kBulkCopy
__device__ __forceinline__ unsigned kjit_smem_addr(const void* p) {
#ifdef __CUDA_ARCH__
  return (unsigned)__cvta_generic_to_shared(p);
#else
  return 0;
#endif
}
// mbarrier of COUNT arrivals a phase (one: the copying thread's).
__device__ __forceinline__ void kjit_mbar_init(unsigned long long* bar, unsigned count) {
#ifdef __CUDA_ARCH__
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(kjit_smem_addr(bar)), "r"(count) : "memory");
#else
  emu_mbar_init(bar, count);
#endif
}
// The barriers' initialisation visible to the async proxy (the bulk copies' completions), and this thread's
// earlier accesses of shared memory ordered before its later bulk copies (fence.proxy.async).
__device__ __forceinline__ void kjit_fence_init() {
#ifdef __CUDA_ARCH__
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void kjit_fence_async() {
#ifdef __CUDA_ARCH__
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}
// The calling thread's arrival, expecting BYTES more to land in this phase.
__device__ __forceinline__ void kjit_mbar_expect(unsigned long long* bar, unsigned bytes) {
#ifdef __CUDA_ARCH__
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(kjit_smem_addr(bar)), "r"(bytes) : "memory");
#else
  emu_mbar_expect(bar, bytes);
#endif
}
// BYTES (a multiple of 16; both addresses 16-byte aligned) from global to shared memory, completing as
// many bytes of BAR's transaction count when they landed.
__device__ __forceinline__ void kjit_bulk_copy(void* dst, const void* src, unsigned bytes, unsigned long long* bar) {
#ifdef __CUDA_ARCH__
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n"
               ::"r"(kjit_smem_addr(dst)), "l"(src), "r"(bytes), "r"(kjit_smem_addr(bar)) : "memory");
#else
  emu_bulk_copy(dst, src, bytes, bar);
#endif
}
// Until the phase of parity PARITY completed (its bytes landed and are visible to this thread).
__device__ __forceinline__ void kjit_mbar_wait(unsigned long long* bar, unsigned parity) {
#ifdef __CUDA_ARCH__
  unsigned done = 0;
  do {
    asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }\n"
                 : "=r"(done) : "r"(kjit_smem_addr(bar)), "r"(parity) : "memory");
  } while (!done);
#else
  emu_mbar_wait(bar, parity);
#endif
}
//@section kHeldValues

// The values a thread holds of a row or channel of LEN: v[i] at elements (i * STRIDE + t) * VEC;
// those past the end (only in the last items) are zeros. Sums over them in PARTIALS partials (held_sum).
struct InRegisters {
  const float (&v)[ITEMS][VEC];
  int t;
  __device__ __forceinline__ bool inside(int i) const { return ((long long)i * STRIDE + t) * VEC < LEN; }
  // The zeros past the end add nothing to sums and sums of squares.
  struct Value {
    const InRegisters& r;
    __device__ __forceinline__ float operator()(int q) const { return r.v[q / VEC][q % VEC]; }
  };
  struct Sq {
    const InRegisters& r;
    __device__ __forceinline__ float operator()(int q) const { return r.v[q / VEC][q % VEC] * r.v[q / VEC][q % VEC]; }
  };
  struct Dev {
    const InRegisters& r;
    float m;
    __device__ __forceinline__ float operator()(int q) const {
      const float d = r.v[q / VEC][q % VEC] - m;
      return r.inside(q / VEC) ? d * d : 0.f;
    }
  };
  __device__ __forceinline__ float local_sq() const { return held_sum<ITEMS * VEC, PARTIALS>(Sq{*this}); }
  __device__ __forceinline__ float local_sum() const { return held_sum<ITEMS * VEC, PARTIALS>(Value{*this}); }
  __device__ __forceinline__ float local_dev(float m) const { return held_sum<ITEMS * VEC, PARTIALS>(Dev{*this, m}); }
  // The held values' own two-pass statistics, for merging across threads (warp_w, block_w): exact
  // sums and no division per element (w_add's sequential updates round at the scale of the running mean).
  __device__ __forceinline__ W local_w() const {
    int items = 0;
#pragma unroll
    for (int i = 0; i < ITEMS; ++i) items += inside(i) ? 1 : 0;
    W r = {0.f, 0.f, 0.f};
    if (items == 0) return r;
    r.n = (float)(items * VEC);
    r.s = local_sum();
    r.m2 = local_dev(div_count(r.s, r.n));
    return r;
  }
};
