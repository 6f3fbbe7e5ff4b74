// Experiment (issue 7): bmm of many 64x64 @ 64x64 float32 matrices, FP32 FMA only.
// A persistent block a multiprocessor: one producer warp copies whole matrices (A and B) with TMA bulk copies
// into a ring of NST slots; NG consumer groups of TPM threads each take every NG-th matrix of the block, wait on
// the slot's full barrier, multiply from shared memory, store C from registers, and free the slot through its
// empty barrier (no block-wide barrier). PADA pads A's rows (one bulk copy a row) so that the fragment reads of
// adjacent rows fall in different banks. Compiled into bench.cc's binary with -DVARIANT=<name> macros.
#include <cuda_runtime.h>
#include <stdint.h>

#ifndef WS_TN
#define WS_TN 8
#endif
namespace ws {

__device__ __forceinline__ unsigned saddr(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }
__device__ __forceinline__ void mbar_init(unsigned long long* b, unsigned n) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(saddr(b)), "r"(n) : "memory");
}
__device__ __forceinline__ void mbar_expect(unsigned long long* b, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(saddr(b)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(unsigned long long* b) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(saddr(b)) : "memory");
}
__device__ __forceinline__ void mbar_wait(unsigned long long* b, unsigned parity) {
  unsigned done = 0;
  do {
    asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }\n"
                 : "=r"(done) : "r"(saddr(b)), "r"(parity) : "memory");
  } while (!done);
}
__device__ __forceinline__ void bulk(void* dst, const void* src, unsigned bytes, unsigned long long* b) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n"
               ::"r"(saddr(dst)), "l"(src), "r"(bytes), "r"(saddr(b)) : "memory");
}

// TM = 8 rows a thread (ty + 8 i), TN columns (tx * 4 + 32 h + q).
template <int NG, int NST, int PADA, int TN>
struct Cfg {
  static constexpr int TXN = (TN == 8) ? 8 : 16;                     // tx values (4 columns each, TN/4 groups)
  static constexpr int TPM = 8 * TXN;                                  // threads a matrix: 8 ty x TXN tx
  static constexpr int LDA = 64 + PADA;
  static constexpr int SLOT = 64 * LDA + 64 * 64;                      // floats
  static constexpr int THREADS = NG * TPM + 32;
  static constexpr int SMEM = NST * SLOT * 4 + 2 * NST * 8;
};

template <int NG, int NST, int PADA, int TN, int UNR>
__global__ void __launch_bounds__(Cfg<NG, NST, PADA, TN>::THREADS, 1)
    bmm64_ws(const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ c, int batch) {
  typedef Cfg<NG, NST, PADA, TN> C;
  extern __shared__ __align__(128) float sm[];
  unsigned long long* full = reinterpret_cast<unsigned long long*>(sm + NST * C::SLOT);
  unsigned long long* empty = full + NST;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  constexpr int WPG = C::TPM / 32;
  if (threadIdx.x == 0) {
    for (int s = 0; s < NST; ++s) {
      mbar_init(full + s, 1);
      mbar_init(empty + s, WPG);
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
  // The block's matrices: blockIdx.x + j * gridDim.x.
  const int mine = batch > (int)blockIdx.x ? (batch - 1 - (int)blockIdx.x) / (int)gridDim.x + 1 : 0;
  if (warp == NG * WPG) {
    // Producer.
    for (int j = 0; j < mine; ++j) {
      const int s = j % NST;
      if (j >= NST) mbar_wait(empty + s, (unsigned)((j / NST - 1) & 1));
      const long long mat = (long long)blockIdx.x + (long long)j * gridDim.x;
      float* As = sm + s * C::SLOT;
      float* Bs = As + 64 * C::LDA;
      if (lane == 0) mbar_expect(full + s, 2 * 64 * 64 * 4);
      __syncwarp();
      if (PADA == 0) {
        if (lane == 0) bulk(As, a + mat * 4096, 64 * 64 * 4, full + s);
      } else {
        bulk(As + lane * C::LDA, a + mat * 4096 + lane * 64, 256, full + s);
        bulk(As + (lane + 32) * C::LDA, a + mat * 4096 + (lane + 32) * 64, 256, full + s);
      }
      if (lane == 1) bulk(Bs, b + mat * 4096, 64 * 64 * 4, full + s);
    }
    return;
  }
  const int g = warp / WPG, t = threadIdx.x % C::TPM;
  const int tx = t % C::TXN, ty = t / C::TXN;
  for (int j = g; j < mine; j += NG) {
    const int s = j % NST;
    mbar_wait(full + s, (unsigned)((j / NST) & 1));
    const float* As = sm + s * C::SLOT;
    const float* Bs = As + 64 * C::LDA;
    float acc[8][TN];
#pragma unroll
    for (int i = 0; i < 8; ++i)
#pragma unroll
      for (int q = 0; q < TN; ++q) acc[i][q] = 0.f;
#pragma unroll UNR
    for (int k = 0; k < 64; k += 4) {
      float av[8][4], bv[4][TN];
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        const float4 v = *reinterpret_cast<const float4*>(As + (ty + 8 * i) * C::LDA + k);
        av[i][0] = v.x, av[i][1] = v.y, av[i][2] = v.z, av[i][3] = v.w;
      }
#pragma unroll
      for (int q = 0; q < 4; ++q)
#pragma unroll
        for (int h = 0; h < TN / 4; ++h) {
          const float4 v = *reinterpret_cast<const float4*>(Bs + (k + q) * 64 + 32 * h + tx * 4);
          bv[q][4 * h] = v.x, bv[q][4 * h + 1] = v.y, bv[q][4 * h + 2] = v.z, bv[q][4 * h + 3] = v.w;
        }
#pragma unroll
      for (int q = 0; q < 4; ++q)
#pragma unroll
        for (int i = 0; i < 8; ++i)
#pragma unroll
          for (int n = 0; n < TN; ++n) acc[i][n] = fmaf(av[i][q], bv[q][n], acc[i][n]);
    }
    __syncwarp();
    if (lane == 0) mbar_arrive(empty + s);  // this warp is done reading the slot
    const long long mat = (long long)blockIdx.x + (long long)j * gridDim.x;
    float* cm = c + mat * 4096;
#pragma unroll
    for (int i = 0; i < 8; ++i)
#pragma unroll
      for (int h = 0; h < TN / 4; ++h)
        *reinterpret_cast<float4*>(cm + (ty + 8 * i) * 64 + 32 * h + tx * 4) =
            make_float4(acc[i][4 * h], acc[i][4 * h + 1], acc[i][4 * h + 2], acc[i][4 * h + 3]);
  }
}

// As bmm64_ws (PADA 0), but each consumer group first transposes its A tile in place (k-major, A^T[k][m]):
// every thread holds one row (16 float4 reads, rotated by row so a quarter warp's reads fall in different
// banks), the group meets at a named barrier, then writes its row as a column (a warp's 32 stores hit 32
// banks). The multiply then reads A fragments as rows ty*8..ty*8+7 of A^T[k] (two float4, a warp's 4 ty in
// 128 contiguous bytes: no conflict), B as before.
template <int NG, int NST, int UNR>
__global__ void __launch_bounds__(NG * 64 + 32, 1)
    bmm64_wst(const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ c, int batch) {
  constexpr int SLOT = 2 * 4096, THREADS = NG * 64 + 32;
  extern __shared__ __align__(128) float sm[];
  unsigned long long* full = reinterpret_cast<unsigned long long*>(sm + NST * SLOT);
  unsigned long long* empty = full + NST;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (threadIdx.x == 0) {
    for (int s = 0; s < NST; ++s) {
      mbar_init(full + s, 1);
      mbar_init(empty + s, 2);
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
  const int mine = batch > (int)blockIdx.x ? (batch - 1 - (int)blockIdx.x) / (int)gridDim.x + 1 : 0;
  if (warp == NG * 2) {
    for (int j = 0; j < mine; ++j) {
      const int s = j % NST;
      if (j >= NST) mbar_wait(empty + s, (unsigned)((j / NST - 1) & 1));
      const long long mat = (long long)blockIdx.x + (long long)j * gridDim.x;
      if (lane == 0) {
        mbar_expect(full + s, 2 * 64 * 64 * 4);
        bulk(sm + s * SLOT, a + mat * 4096, 64 * 64 * 4, full + s);
        bulk(sm + s * SLOT + 4096, b + mat * 4096, 64 * 64 * 4, full + s);
      }
    }
    return;
  }
  const int g = warp / 2, t = threadIdx.x % 64;
  const int tx = t % 8, ty = t / 8;
  for (int j = g; j < mine; j += NG) {
    const int s = j % NST;
    mbar_wait(full + s, (unsigned)((j / NST) & 1));
    float* As = sm + s * SLOT;
    const float* Bs = As + 4096;
    {
      float4 v[16];
#pragma unroll
      for (int q = 0; q < 16; ++q) v[q] = *reinterpret_cast<const float4*>(As + t * 64 + 4 * ((q + t) & 15));
      asm volatile("bar.sync %0, 64;\n" ::"r"(1 + g) : "memory");
#pragma unroll
      for (int q = 0; q < 16; ++q) {
        const int k = 4 * ((q + t) & 15);
        As[(k + 0) * 64 + t] = v[q].x;
        As[(k + 1) * 64 + t] = v[q].y;
        As[(k + 2) * 64 + t] = v[q].z;
        As[(k + 3) * 64 + t] = v[q].w;
      }
      // The generic writes before the slot's next bulk copy (async proxy), and visible to the group.
      asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
      asm volatile("bar.sync %0, 64;\n" ::"r"(1 + g) : "memory");
    }
    float acc[8][8];
#pragma unroll
    for (int i = 0; i < 8; ++i)
#pragma unroll
      for (int q = 0; q < 8; ++q) acc[i][q] = 0.f;
#pragma unroll UNR
    for (int k = 0; k < 64; ++k) {
      const float4 a0 = *reinterpret_cast<const float4*>(As + k * 64 + ty * 8);
      const float4 a1 = *reinterpret_cast<const float4*>(As + k * 64 + ty * 8 + 4);
      const float4 b0 = *reinterpret_cast<const float4*>(Bs + k * 64 + tx * 4);
      const float4 b1 = *reinterpret_cast<const float4*>(Bs + k * 64 + 32 + tx * 4);
      const float av[8] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
      const float bv[8] = {b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w};
#pragma unroll
      for (int i = 0; i < 8; ++i)
#pragma unroll
        for (int n = 0; n < 8; ++n) acc[i][n] = fmaf(av[i], bv[n], acc[i][n]);
    }
    __syncwarp();
    if (lane == 0) mbar_arrive(empty + s);
    const long long mat = (long long)blockIdx.x + (long long)j * gridDim.x;
    float* cm = c + mat * 4096;
#pragma unroll
    for (int i = 0; i < 8; ++i)
#pragma unroll
      for (int h = 0; h < 2; ++h)
        *reinterpret_cast<float4*>(cm + (ty * 8 + i) * 64 + 32 * h + tx * 4) =
            make_float4(acc[i][4 * h], acc[i][4 * h + 1], acc[i][4 * h + 2], acc[i][4 * h + 3]);
  }
}

}  // namespace ws
