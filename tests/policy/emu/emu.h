// CPU emulation of the CUDA features the scan, pool and reduce kernels use (tests/policy/emu/run.sh): one std::thread
// per CUDA thread, shuffles and barriers through std::barrier, __shared__ arrays as per-block slabs,
// distributed shared memory by block rank. Enough for those kernels, not a general CUDA emulator.
#pragma once
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <cmath>
#include <atomic>
#include <barrier>
#include <chrono>
#include <condition_variable>
#include <thread>
#include <map>
#include <mutex>
#include <optional>
#include <cstring>
#include <cstdint>
#include <cstdlib>
#include <type_traits>
#include <cstdio>
#include <string_view>
#include <vector>
#ifndef __device__
#define __device__
#endif
#ifndef __global__
#define __global__
#endif
#ifndef __forceinline__
#define __forceinline__ inline
#endif
#undef __launch_bounds__
#define __launch_bounds__(...)
#undef __cluster_dims__
#define __cluster_dims__(...)
struct emu_dim3 { unsigned x = 0, y = 0, z = 0; };
extern thread_local emu_dim3 threadIdx, blockIdx;
extern emu_dim3 blockDim, gridDim;
struct EmuBlock {
  std::barrier<>* block_bar; std::barrier<>* warp_bar[32]; float warp_slot[32][32]; char* shared;
  long long warp_slot64[32][32];  // for exchanges of other types than float (the reduce family's indices)
};
extern thread_local EmuBlock* emu_block;
extern std::barrier<>* emu_cluster_bar;
extern thread_local std::optional<std::barrier<>::arrival_token> emu_token;
extern int emu_cluster;
constexpr long long EMU_SLAB = 1 << 16, EMU_VARS = 8;
inline void* emu_shared(int id) { return emu_block->shared + id * EMU_SLAB; }
// The dynamic shared array (extern __shared__ T name[]) as emu_gen.h rewrites it: the block's slabs after
// its __shared__ variables, N elements (the launch's dynamic_shared_bytes); an index outside them is counted
// in emu_bad_shared and lands in a scratch element.
inline std::atomic<long long> emu_bad_shared{0};
template <typename T> struct EmuDynShared {
  T* p; long long n;
  T& operator[](long long i) const {
    if (i >= 0 && i < n) return p[i];
    ++emu_bad_shared;
    thread_local T scratch;
    return scratch;
  }
};
inline void __syncthreads() { emu_block->block_bar->arrive_and_wait(); }
// A warp's barrier (all 32 lanes; the runner sets warp_bar, as for shuffles).
inline void __syncwarp(unsigned = 0xffffffffu) { emu_block->warp_bar[threadIdx.x / 32]->arrive_and_wait(); }
inline float emu_exchange(float v, int src_lane) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  emu_block->warp_slot[warp][lane] = v;
  emu_block->warp_bar[warp]->arrive_and_wait();
  const float r = emu_block->warp_slot[warp][src_lane];
  emu_block->warp_bar[warp]->arrive_and_wait();
  return r;
}
inline float __shfl_up_sync(unsigned, float v, int d) {
  const int lane = threadIdx.x % 32;
  return emu_exchange(v, lane >= d ? lane - d : lane);
}
inline float __shfl_sync(unsigned, float v, int src) { return emu_exchange(v, src); }
// As the hardware's: a lane whose source lane + d lies past the warp keeps its own value.
inline float __shfl_down_sync(unsigned, float v, int d) {
  const int lane = threadIdx.x % 32;
  return emu_exchange(v, lane + d < 32 ? lane + d : lane);
}
// Raw bits (the depthwise_conv family's slide strategy shuffles elements as unsigned): exactly unsigned,
// so calls with other types still take the float overload above.
template <typename T> requires std::is_same_v<T, unsigned>
inline T __shfl_sync(unsigned, T v, int src) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  emu_block->warp_slot64[warp][lane] = v;
  emu_block->warp_bar[warp]->arrive_and_wait();
  const T r = (T)emu_block->warp_slot64[warp][src];
  emu_block->warp_bar[warp]->arrive_and_wait();
  return r;
}
// Butterfly exchanges of up to 8-byte values (float, int, long long).
template <typename T> inline T __shfl_xor_sync(unsigned, T v, int mask) {
  static_assert(sizeof(T) <= 8);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  std::memcpy(&emu_block->warp_slot64[warp][lane], &v, sizeof(T));
  emu_block->warp_bar[warp]->arrive_and_wait();
  T r;
  std::memcpy(&r, &emu_block->warp_slot64[warp][lane ^ mask], sizeof(T));
  emu_block->warp_bar[warp]->arrive_and_wait();
  return r;
}
inline unsigned __clusterRelativeBlockRank() { return blockIdx.x % emu_cluster; }
inline void __cluster_barrier_arrive() { emu_token.emplace(emu_cluster_bar->arrive()); }
inline void __cluster_barrier_wait() { emu_cluster_bar->wait(std::move(*emu_token)); emu_token.reset(); }
inline void* __cluster_map_shared_rank(void* p, int r) {
  const long long per_block = EMU_SLAB * EMU_VARS;
  const int rank = blockIdx.x % emu_cluster;
  return static_cast<char*>(p) + (long long)(r - rank) * per_block;
}
// Read checks, off unless a harness sets the range (pool_run: the input tensor's bytes; matmul_run: the
// two operands' views, the second range): a load through __ldg/__ldcs or a cp.async source reaching
// outside [emu_read_lo, emu_read_hi) and [emu_read_lo2, emu_read_hi2), or not aligned to its size (a
// fault on the GPU), is counted in emu_bad_reads.
inline const char* emu_read_lo = nullptr;
inline const char* emu_read_hi = nullptr;
inline const char* emu_read_lo2 = nullptr;
inline const char* emu_read_hi2 = nullptr;
inline std::atomic<long long> emu_bad_reads{0};
inline void emu_check_bytes(const void* p, size_t bytes) {
  if (!emu_read_lo) return;
  const char* c = static_cast<const char*>(p);
  const bool in1 = c >= emu_read_lo && c + bytes <= emu_read_hi;
  const bool in2 = emu_read_lo2 && c >= emu_read_lo2 && c + bytes <= emu_read_hi2;
  if ((!in1 && !in2) || reinterpret_cast<uintptr_t>(p) % bytes != 0) ++emu_bad_reads;
}
template <typename T> inline void emu_check_read(const T* p) { emu_check_bytes(p, sizeof(T)); }
// (Through memcpy: a misaligned load is counted, not a crash of the host's aligned vector moves.)
template <typename T> inline T emu_load(const T* p) {
  emu_check_read(p);
  T v;
  std::memcpy(&v, static_cast<const void*>(p), sizeof(T));
  return v;
}
template <typename T> inline T __ldcs(const T* p) { return emu_load(p); }
template <typename T> inline T __ldg(const T* p) { return emu_load(p); }
// Stores: one not aligned to its size (a fault on the GPU) is counted in emu_bad_stores.
inline std::atomic<long long> emu_bad_stores{0};
template <typename T> inline void emu_store(T* p, T v) {
  if (reinterpret_cast<uintptr_t>(p) % sizeof(T) != 0) ++emu_bad_stores;
  std::memcpy(static_cast<void*>(p), &v, sizeof(T));
}
template <typename T> inline void __stcs(T* p, T v) { emu_store(p, v); }
template <typename T> inline void __stwb(T* p, T v) { emu_store(p, v); }
// Global memory shared by blocks (the reduce family's workspace): .cg loads and stores, device-wide
// fences and atomics. Blocks of different clusters run one after another here, so the last block's
// logic runs as on a GPU whose blocks finish in grid order.
template <typename T> inline T __ldcg(const T* p) { return __atomic_load_n(p, __ATOMIC_SEQ_CST); }
template <typename T> inline void __stcg(T* p, T v) { __atomic_store_n(p, v, __ATOMIC_SEQ_CST); }
inline float __ldcg(const float* p) { float v; __atomic_load(p, &v, __ATOMIC_SEQ_CST); return v; }
inline void __stcg(float* p, float v) { __atomic_store(p, &v, __ATOMIC_SEQ_CST); }
inline unsigned atomicAdd(unsigned* p, unsigned v) { return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); }
inline void __threadfence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
inline float __int_as_float(int i) { float f; std::memcpy(&f, &i, 4); return f; }
inline float __uint_as_float(unsigned i) { float f; std::memcpy(&f, &i, 4); return f; }
inline unsigned __float_as_uint(float f) { unsigned i; std::memcpy(&i, &f, 4); return i; }
// cp.async (the matmul family's pipelined strategy: kjit_cp_async / kjit_cp_commit / kjit_cp_wait, whose
// PTX the emulation cannot run). A copy is recorded in the thread's open group and made when a wait lets
// its group complete, as late as the hardware may make it: a read of a buffer before its wait (or
// before the barrier after it, in another thread) sees stale bytes. KJIT_EMU_CP_ASYNC=sync copies at
// issue instead, as early as the hardware may: a copy issued into a buffer other threads still read
// (a missing barrier) then overwrites it under them.
struct EmuCopy { void* dst; const void* src; int bytes; };
inline thread_local std::vector<std::vector<EmuCopy>> emu_cp_groups;  // committed, oldest first
inline thread_local std::vector<EmuCopy> emu_cp_open;
inline bool emu_cp_sync() {
  static const bool sync = [] { const char* v = std::getenv("KJIT_EMU_CP_ASYNC"); return v && std::string_view(v) == "sync"; }();
  return sync;
}
inline void emu_cp_async(void* dst, const void* src, int bytes) {
  if (reinterpret_cast<uintptr_t>(dst) % bytes != 0 || reinterpret_cast<uintptr_t>(src) % bytes != 0) {
    std::fprintf(stderr, "cp.async of %d bytes misaligned\n", bytes);
    std::abort();
  }
  emu_check_bytes(src, bytes);
  if (emu_cp_sync()) std::memcpy(dst, src, bytes);
  else emu_cp_open.push_back({dst, src, bytes});
}
inline void emu_cp_commit() {
  emu_cp_groups.push_back(std::move(emu_cp_open));
  emu_cp_open.clear();
}
inline void emu_cp_wait(int newest_pending) {
  while ((int)emu_cp_groups.size() > newest_pending) {
    for (const EmuCopy& c : emu_cp_groups.front()) std::memcpy(c.dst, c.src, c.bytes);
    emu_cp_groups.erase(emu_cp_groups.begin());
  }
}
// The bulk strategy's mbarriers and TMA bulk copies (the matmul family's stages 5 and 6: kjit_mbar_init,
// kjit_mbar_expect, kjit_bulk_copy, kjit_mbar_wait, kjit_mbar_arrive). A barrier's state lives here, keyed by its address in
// the block's shared slab (blocks run one after another; init resets it): arrivals pending in the current
// phase, the transaction count (bytes expected less bytes landed), the completed phases. A bulk copy is
// recorded with its barrier and made when a thread waits for the phase, as late as the hardware may
// (reading a buffer before waiting for it sees stale bytes); KJIT_EMU_CP_ASYNC=sync copies at issue, as
// early as it may (a copy issued into a buffer other threads still read overwrites it under them). A phase
// completes when its arrivals are all in and its bytes all landed; a wait for the phase of parity P returns
// once the phase of that parity completed (the current phase's parity differs from P). A transaction count
// that cannot reach zero (the bytes expected and copied differ) is reported and aborts.
struct EmuMbar { int count = 0, pending = 0; long long tx = 0; unsigned long long phases = 0; std::vector<EmuCopy> copies; };
inline std::mutex emu_mbar_mu;
inline std::condition_variable emu_mbar_cv;
inline std::map<const void*, EmuMbar> emu_mbars;
inline void emu_mbar_complete(EmuMbar& m) {
  if (m.pending == 0 && m.tx == 0 && m.copies.empty()) {
    ++m.phases;
    m.pending = m.count;
    emu_mbar_cv.notify_all();
  }
}
inline void emu_mbar_init(void* bar, unsigned count) {
  if (reinterpret_cast<uintptr_t>(bar) % 8 != 0) { std::fprintf(stderr, "mbarrier misaligned\n"); std::abort(); }
  std::lock_guard<std::mutex> lock(emu_mbar_mu);
  EmuMbar& m = emu_mbars[bar];
  m = EmuMbar{};
  m.count = m.pending = (int)count;
  std::memset(bar, 0, 8);
}
inline EmuMbar& emu_mbar_of(const void* bar) {
  auto it = emu_mbars.find(bar);
  if (it == emu_mbars.end()) { std::fprintf(stderr, "mbarrier used before its init\n"); std::abort(); }
  return it->second;
}
// An arrival expecting BYTES more to land in this phase (0: a plain arrival, the ring strategy's `empty`
// barriers: a warp done reading a buffer).
inline void emu_mbar_expect(void* bar, unsigned bytes) {
  std::lock_guard<std::mutex> lock(emu_mbar_mu);
  EmuMbar& m = emu_mbar_of(bar);
  if (m.pending == 0) { std::fprintf(stderr, "mbarrier: more arrivals than its count\n"); std::abort(); }
  m.tx += bytes;
  --m.pending;
  emu_mbar_complete(m);
}
inline void emu_mbar_arrive(void* bar) { emu_mbar_expect(bar, 0); }
inline void emu_bulk_copy(void* dst, const void* src, unsigned bytes, void* bar) {
  if (bytes == 0 || bytes % 16 != 0 || reinterpret_cast<uintptr_t>(dst) % 16 != 0 || reinterpret_cast<uintptr_t>(src) % 16 != 0) {
    std::fprintf(stderr, "cp.async.bulk of %u bytes misaligned or not a multiple of 16\n", bytes);
    std::abort();
  }
  if (emu_read_lo) {  // the source range within one of the views
    const char* c = static_cast<const char*>(src);
    const bool in1 = c >= emu_read_lo && c + bytes <= emu_read_hi;
    const bool in2 = emu_read_lo2 && c >= emu_read_lo2 && c + bytes <= emu_read_hi2;
    if (!in1 && !in2) ++emu_bad_reads;
  }
  std::lock_guard<std::mutex> lock(emu_mbar_mu);
  EmuMbar& m = emu_mbar_of(bar);
  if (emu_cp_sync()) {
    std::memcpy(dst, src, bytes);
    m.tx -= bytes;
    emu_mbar_complete(m);
  } else {
    m.copies.push_back({dst, src, (int)bytes});
    emu_mbar_cv.notify_all();
  }
}
inline void emu_mbar_wait(void* bar, unsigned parity) {
  std::unique_lock<std::mutex> lock(emu_mbar_mu);
  EmuMbar& m = emu_mbar_of(bar);
  for (;;) {
    if ((m.phases & 1u) != (parity & 1u)) {  // the phase of this parity completed
      // With copies at issue, every thread but the first lags after its waits: thread 0 (the one that copies,
      // in the matmul family) runs ahead, so a copy issued into a buffer before a barrier that would keep the
      // other threads' reads of it first lands under them.
      if (emu_cp_sync() && threadIdx.x != 0) {
        lock.unlock();
        std::this_thread::sleep_for(std::chrono::microseconds(200));
      }
      return;
    }
    long long recorded = 0;
    for (const EmuCopy& c : m.copies) recorded += c.bytes;
    if (recorded > m.tx) { std::fprintf(stderr, "mbarrier: copies of more bytes than expected\n"); std::abort(); }
    if (m.pending == 0 && recorded == m.tx && recorded > 0) {
      // Every arrival is in and every expected byte has its copy: they land now.
      for (const EmuCopy& c : m.copies) std::memcpy(c.dst, c.src, c.bytes);
      m.tx = 0;
      m.copies.clear();
      emu_mbar_complete(m);
      continue;
    }
    // (Bytes expected that no copy brings would wait here for ever: the harness's timeout.)
    emu_mbar_cv.wait(lock);
  }
}
