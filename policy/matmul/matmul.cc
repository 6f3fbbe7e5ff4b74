#include "matmul/matmul.h"

#include "src/codegen.h"

#include <algorithm>
#include <limits>
#include <sstream>

#include "kjit/runtime/matmul_limits.h"

namespace kjit::policy {
namespace {

using codegen::CeilDiv;
using codegen::CudaType;

// The ABI (daemon/worker_protocol.h): (self, mat2, out) for both ops.

enum Stage : int64_t { kDirect = 0, kStaged = 1, kDouble = 2, kResident = 3, kPipelined = 4, kBulk = 5, kRing = 6 };

constexpr const char* kMm = "aten::mm";
constexpr const char* kBmm = "aten::bmm";

constexpr int64_t kMaxSharedBytes = 64 * 1024;
constexpr int64_t kMaxAccumulators = 64;  // tm x tn floats a thread holds
constexpr int64_t kMaxFetchRegs = 32;     // elements a thread fetches per operand per slice

struct MatmulProblem : Problem {
  bool batched = false;
  DType dtype = DType::kFloat32;
  int64_t batch = 1, m = 1, n = 1, k = 1;
  // Element strides; those of size-1 dims (and mm's batch) are 0.
  int64_t sab = 0, sam = 0, sak = 0, sbb = 0, sbk = 0, sbn = 0;
  int a_align = 16, b_align = 16;
  bool tf32_allowed = false;  // the key's numerics allow TF32 (not used: FP32 FMA only)
  int64_t elem() const { return static_cast<int64_t>(DTypeSize(dtype)); }
  // Which dim each operand is read along in vectors: A along k (true) or m; B along n (true) or k.
  // Where neither dim has unit stride, the one with the smaller stride (scalar reads only).
  bool a_kcont() const { return sak == 1 || (sam != 1 && sak <= sam); }
  bool b_ncont() const { return sbn == 1 || (sbk != 1 && sbn <= sbk); }
};

int64_t NextPow2(int64_t v) {
  int64_t p = 1;
  while (p < v) p *= 2;
  return p;
}

bool Float(DType t) { return t == DType::kFloat32 || t == DType::kFloat16 || t == DType::kBFloat16; }

constexpr const char* kBody = R"(
constexpr int TX = BN / TN;  // threads along n; THREADS / TX along m
constexpr long long TILES_M = (M_ + BM - 1) / BM, TILES_N = (N_ + BN - 1) / BN;
constexpr int PAD = 4;  // keeps rows 16-byte aligned and spreads transposed stores over banks
constexpr int LDA = BM + PAD, LDB = BN + PAD;  // shared slices: As[BK][LDA], Bs[BK][LDB], as float
constexpr int KT = (int)((K_ + BK - 1) / BK);  // slices
constexpr int KLAST = (int)(K_ - (long long)(KT - 1) * BK);  // k values of the last slice
constexpr int A_VECS = BM * BK / VEC, A_PER = (A_VECS + THREADS - 1) / THREADS;
constexpr int B_VECS = BK * BN / VEC, B_PER = (B_VECS + THREADS - 1) / THREADS;

// One slice's elements a thread fetches, as raw bits (zeros outside the matrices).
struct Frag { raw_t a[A_PER][VEC]; raw_t b[B_PER][VEC]; };

// Vector e of the A slice: VEC elements along k (A_KCONT) or along m; of the B slice: along n
// (B_NCONT) or along k. Consecutive threads take consecutive vectors along the contiguous dim.
__device__ __forceinline__ void a_coords(int e, int& m, int& k) {
  if (A_KCONT) { m = e / (BK / VEC); k = (e % (BK / VEC)) * VEC; }
  else { k = e / (BM / VEC); m = (e % (BM / VEC)) * VEC; }
}
__device__ __forceinline__ void b_coords(int e, int& k, int& n) {
  if (B_NCONT) { k = e / (BN / VEC); n = (e % (BN / VEC)) * VEC; }
  else { n = e / (BK / VEC); k = (e % (BK / VEC)) * VEC; }
}
// A vector lies wholly inside or wholly outside its matrix (VEC divides the contiguous extent).
__device__ __forceinline__ void fetch(const in_t* a, const in_t* b, long long m0, long long n0, long long k0, Frag& f) {
#pragma unroll
  for (int i = 0; i < A_PER; ++i) {
    const int e = threadIdx.x + i * THREADS;
    int m = 0, k = 0;
    a_coords(e, m, k);
    const long long gm = m0 + m, gk = k0 + k;
    if ((A_VECS % THREADS == 0 || e < A_VECS) && gm < M_ && gk < K_) {
      load_raw<VEC, false>(a + gm * SAM + gk * SAK, f.a[i]);
    } else {
#pragma unroll
      for (int j = 0; j < VEC; ++j) f.a[i][j] = 0;
    }
  }
#pragma unroll
  for (int i = 0; i < B_PER; ++i) {
    const int e = threadIdx.x + i * THREADS;
    int k = 0, n = 0;
    b_coords(e, k, n);
    const long long gk = k0 + k, gn = n0 + n;
    if ((B_VECS % THREADS == 0 || e < B_VECS) && gk < K_ && gn < N_) {
      load_raw<VEC, false>(b + gk * SBK + gn * SBN, f.b[i]);
    } else {
#pragma unroll
      for (int j = 0; j < VEC; ++j) f.b[i][j] = 0;
    }
  }
}
__device__ __forceinline__ void stash(const Frag& f, float* As, float* Bs) {
#pragma unroll
  for (int i = 0; i < A_PER; ++i) {
    const int e = threadIdx.x + i * THREADS;
    if (A_VECS % THREADS != 0 && e >= A_VECS) break;
    int m = 0, k = 0;
    a_coords(e, m, k);
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
      if (A_KCONT) As[(k + j) * LDA + m] = Bits<in_t>::to_f(f.a[i][j]);
      else As[k * LDA + m + j] = Bits<in_t>::to_f(f.a[i][j]);
    }
  }
#pragma unroll
  for (int i = 0; i < B_PER; ++i) {
    const int e = threadIdx.x + i * THREADS;
    if (B_VECS % THREADS != 0 && e >= B_VECS) break;
    int k = 0, n = 0;
    b_coords(e, k, n);
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
      if (B_NCONT) Bs[k * LDB + n + j] = Bits<in_t>::to_f(f.b[i][j]);
      else Bs[(k + j) * LDB + n] = Bits<in_t>::to_f(f.b[i][j]);
    }
  }
}
// KN k values of a staged slice (the last slice stops at K: no padded terms enter a sum).
template <int KN>
__device__ __forceinline__ void multiply(const float* As, const float* Bs, int ty, int tx, float (&acc)[TM][TN]) {
#pragma unroll
  for (int k = 0; k < KN; ++k) {
    float av[TM], bv[TN];
#pragma unroll
    for (int i = 0; i < TM; ++i) av[i] = As[k * LDA + ty * TM + i];
#pragma unroll
    for (int j = 0; j < TN; ++j) bv[j] = Bs[k * LDB + tx * TN + j];
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
      for (int j = 0; j < TN; ++j) acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);
  }
}
// The thread's tm x tn outputs of one matrix, rounded once; rows and columns past the output are not
// written. Stores of SW elements (SW divides TN and N).
__device__ __forceinline__ void store_tile(out_t* c, long long m0, long long n0, int ty, int tx, const float (&acc)[TM][TN]) {
#pragma unroll
  for (int i = 0; i < TM; ++i) {
    const long long gm = m0 + ty * TM + i;
    if (gm >= M_) break;
#pragma unroll
    for (int j = 0; j < TN; j += SW) {
      const long long gn = n0 + tx * TN + j;
      if (gn >= N_) break;
      raw_t r[SW];
#pragma unroll
      for (int q = 0; q < SW; ++q) r[q] = Bits<out_t>::from_f(acc[i][j + q]);
      store_raw<SW>(c + gm * N_ + gn, r);
    }
  }
}

#if STAGE >= 3  // (stage 4 shares the fragment layout and the output stores)
// The resident strategy: a tile's whole K staged once, k-major (As[k * LDA3 + m], Bs[k * LDB3 + n], as
// float), then K outer products from registers. A thread's TM rows are GM groups of RV consecutive rows,
// SPM apart (likewise its TN columns: GN groups of CV), so fragments are float4 reads of shared memory
// that a warp's lanes spread over all banks, and a warp's stores cover whole rows of the tile.
constexpr int LDA3 = BM + 4, LDB3 = BN + 4;
constexpr int RV = TM < 4 ? TM : 4, CV = TN < 4 ? TN : 4;
constexpr int GM = TM / RV, GN = TN / CV, SPM = BM / GM, SPN = BN / GN;
__device__ __forceinline__ int row_of(int ty, int i) { return (i / RV) * SPM + ty * RV + i % RV; }
__device__ __forceinline__ int col_of(int tx, int j) { return (j / CV) * SPN + tx * CV + j % CV; }
template <int W> struct FVec;
template <> struct FVec<1> { typedef float T; };
template <> struct FVec<2> { typedef float2 T; };
template <> struct FVec<4> { typedef float4 T; };
// W floats at p (aligned to their size) from / to shared memory; 8 as two float4.
template <int W>
__device__ __forceinline__ void lds(const float* p, float* v) {
  typedef typename FVec<W>::T T;
  union { T t; float f[W]; } u;
  u.t = *reinterpret_cast<const T*>(p);
#pragma unroll
  for (int q = 0; q < W; ++q) v[q] = u.f[q];
}
template <int W>
__device__ __forceinline__ void sts(float* p, const float* v) {
  if (W == 8) {
    sts<4>(p, v);
    sts<4>(p + 4, v + 4);
  } else {
    typedef typename FVec<(W > 4 ? 4 : W)>::T T;
    union { T t; float f[(W > 4 ? 4 : W)]; } u;
#pragma unroll
    for (int q = 0; q < (W > 4 ? 4 : W); ++q) u.f[q] = v[q];
    *reinterpret_cast<T*>(p) = u.t;
  }
}
// One operand's R x K_ tile (rows: m of A, n of B) staged into S[k * LD + r]: element (r, k) at
// x + r * SR + k * SK, rows at or past RLIM zeros. KC: vectors run along k, P lanes sharing a row take
// consecutive vectors (a 32-byte sector of f32, 8 elements at most: with LD = 4 mod 32 banks the
// transposed stores of a warp's 32/P rows x P*VEC k stay free of conflicts), k past K_ (VK not a multiple
// of P: odd K with scalar reads) neither read nor stored; else vectors run along r (RLIM and R divisible
// by VEC). The shared layout is the same whatever VEC is (rows of LD floats, LD a multiple of 4), so the
// fragments stay float4 with scalar global reads. Up to 32 elements a thread per round: a round's loads
// are all issued before its stores.
template <bool KC, int R, int LD, long long RLIM, long long SR, long long SK>
struct Operand {
  static constexpr int VK = (int)(K_ / VEC), VR = R / VEC;
  static constexpr int PS = (int)(32 / (VEC * sizeof(raw_t)));
  static constexpr int PW = PS < 8 / VEC ? PS : 8 / VEC;
  static constexpr int P = !KC || PS < 2 ? 1 : PW >= 2 ? PW : 2;
  static constexpr int VKP = (VK + P - 1) / P * P;  // vectors along k a row, rounded up to P lanes
  static constexpr int TOTAL = KC ? R * VKP : (int)K_ * VR;
  static constexpr int PER = (TOTAL + THREADS - 1) / THREADS;
  static constexpr int CB = PER < 32 / VEC ? PER : 32 / VEC;
  static constexpr int ROUNDS = (PER + CB - 1) / CB;
  __device__ static __forceinline__ void coords(int e, int& r, int& k) {
    if (KC) {
      const int rest = e / P;
      r = rest % R;
      k = ((rest / R) * P + e % P) * VEC;
    } else {
      k = e / VR;
      r = (e % VR) * VEC;
    }
  }
  __device__ static __forceinline__ bool live(int rd, int i, int e) {
    return rd * CB + i < PER && (TOTAL % THREADS == 0 || e < TOTAL);
  }
  __device__ static __forceinline__ void load(const in_t* x, long long r0, int rd, raw_t (&v)[CB][VEC]) {
#pragma unroll
    for (int i = 0; i < CB; ++i) {
      const int e = (int)(threadIdx.x % THREADS) + (rd * CB + i) * THREADS;  // the range lets coords fold
      int r = 0, k = 0;
      coords(e, r, k);
      if (live(rd, i, e) && r0 + r < RLIM && (VKP == VK || k < K_)) {
        load_raw<VEC, false>(x + (r0 + r) * SR + (long long)k * SK, v[i]);
      } else {
#pragma unroll
        for (int j = 0; j < VEC; ++j) v[i][j] = 0;
      }
    }
  }
  __device__ static __forceinline__ void store(float* S, int rd, const raw_t (&v)[CB][VEC]) {
#pragma unroll
    for (int i = 0; i < CB; ++i) {
      const int e = (int)(threadIdx.x % THREADS) + (rd * CB + i) * THREADS;  // the range lets coords fold
      if (!live(rd, i, e)) break;
      int r = 0, k = 0;
      coords(e, r, k);
      if (VKP != VK && k >= K_) continue;  // past K: never read by the multiply
      float f[VEC];
#pragma unroll
      for (int j = 0; j < VEC; ++j) f[j] = Bits<in_t>::to_f(v[i][j]);
      if (KC) {
#pragma unroll
        for (int j = 0; j < VEC; ++j) S[(k + j) * LD + r] = f[j];
      } else {
        sts<VEC>(S + k * LD + r, f);
      }
    }
  }
};
typedef Operand<A_KCONT, BM, LDA3, M_, SAM, SAK> OpA;
typedef Operand<!B_NCONT, BN, LDB3, N_, SBN, SBK> OpB;
constexpr int ROUNDS3 = OpA::ROUNDS > OpB::ROUNDS ? OpA::ROUNDS : OpB::ROUNDS;
// Several matrices a block whose tiles a thread fetches in one round: the next matrix's tiles are fetched
// into registers while this one is multiplied and stored (one shared buffer, stored to after a barrier).
constexpr bool PREFETCH3 = BPB > 1 && ROUNDS3 == 1;
// One tile a matrix whose rows take scalar stores (N_ odd: a thread's 4 columns would be 4 stores 16 bytes
// apart): the matrix goes through shared memory (dense, over the staged tiles) and out as one contiguous
// span, consecutive threads writing consecutive elements.
constexpr bool FLAT3 = TILES_M == 1 && TILES_N == 1 && SW == 1 && M_ * N_ <= K_ * (LDA3 + LDB3);
__device__ __forceinline__ void store_flat3(out_t* c, float* Cs, int ty, int tx, const float (&acc)[TM][TN]) {
  __syncthreads();  // every thread is done reading the staged tiles
#pragma unroll
  for (int i = 0; i < TM; ++i) {
    const int m = row_of(ty, i);
    if (m >= M_) break;
#pragma unroll
    for (int j = 0; j < TN; ++j) {
      const int n = col_of(tx, j);
      if (n < N_) Cs[m * N_ + n] = acc[i][j];
    }
  }
  __syncthreads();
  for (int f = (int)(threadIdx.x % THREADS); f < M_ * N_; f += THREADS) {
    const raw_t r = Bits<out_t>::from_f(Cs[f]);
    if (HINT) __stcs(reinterpret_cast<raw_t*>(c) + f, r);
    else reinterpret_cast<raw_t*>(c)[f] = r;
  }
}
__device__ __forceinline__ void stage_all(const in_t* a, const in_t* b, long long m0, long long n0, float* As, float* Bs) {
#pragma unroll
  for (int rd = 0; rd < ROUNDS3; ++rd) {
    raw_t va[OpA::CB][VEC], vb[OpB::CB][VEC];
    if (rd < OpA::ROUNDS) OpA::load(a, m0, rd, va);
    if (rd < OpB::ROUNDS) OpB::load(b, n0, rd, vb);
    if (rd < OpA::ROUNDS) OpA::store(As, rd, va);
    if (rd < OpB::ROUNDS) OpB::store(Bs, rd, vb);
  }
}
__device__ __forceinline__ void frag(const float* As, const float* Bs, int k, int ty, int tx, float (&av)[TM], float (&bv)[TN]) {
#pragma unroll
  for (int g = 0; g < GM; ++g) lds<RV>(As + k * LDA3 + g * SPM + ty * RV, av + g * RV);
#pragma unroll
  for (int g = 0; g < GN; ++g) lds<CV>(Bs + k * LDB3 + g * SPN + tx * CV, bv + g * CV);
}
__device__ __forceinline__ void outer(const float (&av)[TM], const float (&bv)[TN], float (&acc)[TM][TN]) {
#pragma unroll
  for (int i = 0; i < TM; ++i)
#pragma unroll
    for (int j = 0; j < TN; ++j) acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);
}
// The thread's outputs (rows row_of, columns col_of), SW columns a store (SW divides CV and N).
__device__ __forceinline__ void store_tile3(out_t* c, long long m0, long long n0, int ty, int tx, const float (&acc)[TM][TN]) {
#pragma unroll
  for (int i = 0; i < TM; ++i) {
    const long long gm = m0 + row_of(ty, i);
    if (gm >= M_) break;  // rows grow with i
#pragma unroll
    for (int j = 0; j < TN; j += SW) {
      const long long gn = n0 + col_of(tx, j);
      if (gn >= N_) continue;
      // One explicit vector store (write-back, or evict-first with HINT): a plain store of the union
      // was split into scalar ones for some rows.
      typedef typename RawOf<sizeof(raw_t) * SW>::T R;
      union { R r; raw_t u[SW]; } w;
#pragma unroll
      for (int q = 0; q < SW; ++q) w.u[q] = Bits<out_t>::from_f(acc[i][j + q]);
      R* dst = reinterpret_cast<R*>(c + gm * N_ + gn);
      if (HINT) __stcs(dst, w.r);
      else __stwb(dst, w.r);
    }
  }
}
// Tiled outputs whose rows take narrower stores than a thread's CV columns (N not a multiple of 4: a
// thread's stores 16 bytes apart, a warp's store touching twice or four times the sectors it fills): each
// warp passes its rows through shared memory (over the staged tiles, after a barrier), one thread row at a
// time, and writes them with consecutive lanes on consecutive columns (whole 128-byte lines).
constexpr int WT3 = TX < 32 ? TX : 32, WR3 = 32 / WT3, WC3 = WT3 * TN;  // a warp: WR3 rows x WC3 columns
constexpr bool WSTORE3 = !FLAT3 && SW < CV && (long long)THREADS * TN <= K_ * (LDA3 + LDB3);
__device__ __forceinline__ void store_warp3(out_t* c, long long m0, long long n0, float* S, int ty, int tx, const float (&acc)[TM][TN]) {
  __syncthreads();  // every thread is done reading the staged tiles
  const int lane = threadIdx.x % 32, warp = (int)(threadIdx.x % THREADS) / 32;
  float* buf = S + warp * (32 * TN);
  const int ty0 = warp * 32 / TX, tx0 = warp * 32 % TX;
#pragma unroll
  for (int i = 0; i < TM; ++i) {
#pragma unroll
    for (int g = 0; g < GN; ++g) sts<CV>(buf + (ty - ty0) * WC3 + g * (WT3 * CV) + (tx - tx0) * CV, &acc[i][g * CV]);
    __syncwarp();
#pragma unroll
    for (int q = 0; q < TN; ++q) {
      const int idx = q * 32 + lane, r = idx / WC3, lc = idx % WC3;
      const long long gm = m0 + row_of(ty0 + r, i);
      const long long gn = n0 + (lc / (WT3 * CV)) * SPN + tx0 * CV + lc % (WT3 * CV);
      if (gm < M_ && gn < N_) {
        const raw_t v = Bits<out_t>::from_f(buf[idx]);
        raw_t* dst = reinterpret_cast<raw_t*>(c + gm * N_ + gn);
        if (HINT) __stcs(dst, v);
        else *dst = v;
      }
    }
    __syncwarp();  // read before the next row is written
  }
}
#endif
#if STAGE == 4
// The pipelined strategy (codegen 4), for many small matrices: a block walks its work items (a tile of a
// matrix; items blockIdx.x, + GRID, ...) and copies the tiles of the item AHEAD steps on from global to
// shared memory with cp.async while it multiplies the current one, so a block's DRAM reads never wait for
// its FMAs and its FMAs wait for DRAM only at the start. cp.async copies bytes as they are: the tiles keep
// their global layout (raw elements, rows of the operand's contiguous dim, Q4 elements of padding keeping
// rows 16-byte aligned) and the fragments convert to float on the way out of shared memory. An operand
// contiguous along k gives a thread 4 k values of one row a read (TM + TN reads of 4 per 4 k, as stage 3).
constexpr int Q4 = (int)(16 / sizeof(raw_t));              // elements of 16 bytes
constexpr long long KQ4 = (K_ + Q4 - 1) / Q4 * Q4;         // K rounded up to 16 bytes
constexpr long long TILES4 = TILES_M * TILES_N, ITEMS4 = BATCH * TILES4;
// cp.async of W bytes (4, 8 or 16) from global to shared memory, in the thread's open group; groups are
// closed by kjit_cp_commit and awaited by kjit_cp_wait<N> (all but the newest N of this thread's groups
// landed). .cg (L2 only) for 16 bytes, .ca (the only form of 4 and 8) otherwise. The CPU emulation
// (tests/policy/emu/emu.h) has no PTX: it copies when the group is awaited.
template <int W>
__device__ __forceinline__ void kjit_cp_async(void* dst, const void* src) {
#ifdef __CUDA_ARCH__
  const unsigned s = (unsigned)__cvta_generic_to_shared(dst);
  if (W == 16) asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(src) : "memory");
  else asm volatile("cp.async.ca.shared.global [%0], [%1], %2;\n" ::"r"(s), "l"(src), "n"(W) : "memory");
#else
  emu_cp_async(dst, src, W);
#endif
}
__device__ __forceinline__ void kjit_cp_commit() {
#ifdef __CUDA_ARCH__
  asm volatile("cp.async.commit_group;\n" ::: "memory");
#else
  emu_cp_commit();
#endif
}
template <int N>
__device__ __forceinline__ void kjit_cp_wait() {
#ifdef __CUDA_ARCH__
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
#else
  emu_cp_wait(N);
#endif
}
// One operand's tile in shared memory, as in global memory: KC (contiguous along k): R rows (m of A, n of
// B) of K_ elements, pitch KQ4 + Q4; else K_ rows of R elements, pitch R + Q4. Element (r, k) of the
// matrix at x + r * SR + k * SK; rows or columns at or past RLIM are not copied (their garbage reaches
// only outputs that are not stored).
template <bool KC, int R, long long RLIM, long long SR, long long SK>
struct Tile4 {
  static constexpr int LD = KC ? (int)(KQ4 + Q4) : R + Q4;
  static constexpr int ROWS = KC ? R : (int)K_;
  static constexpr int ELEMS = ROWS * LD;
  static constexpr int VPR = KC ? (int)(K_ / VEC) : R / VEC;  // vectors a row (VEC divides the row)
  // A row's vectors rounded up to a power of two (63 -> 64; the lanes past VPR copy nothing): THREADS is one
  // too, so a thread's copies are one row and column plus constant offsets (row (tid >> lg) + i * THREADS /
  // VPRP). With 63 vectors a row the per-copy division left 64 loop-invariant addresses (199 registers).
  static constexpr int VPRP = VPR <= 1 ? 1 : VPR <= 2 ? 2 : VPR <= 4 ? 4 : VPR <= 8 ? 8 : VPR <= 16 ? 16 : VPR <= 32 ? 32
                              : VPR <= 64 ? 64 : VPR <= 128 ? 128 : 256;
  static constexpr int TOTAL = ROWS * VPRP, PER = (TOTAL + THREADS - 1) / THREADS;
  // This thread's copies of the tile whose first row (KC) or column is r0; consecutive threads take
  // consecutive vectors of a row (coalesced).
  __device__ static __forceinline__ void issue(const in_t* x, long long r0, raw_t* S) {
#pragma unroll
    for (int i = 0; i < PER; ++i) {
      const int e = (int)(threadIdx.x % THREADS) + i * THREADS;
      if (TOTAL % THREADS != 0 && e >= TOTAL) break;
      const int row = e / VPRP, v = (e % VPRP) * VEC;
      if (VPRP != VPR && v >= VPR * VEC) continue;
      const int r = KC ? row : v, k = KC ? v : row;
      if (r0 + r < RLIM) kjit_cp_async<VEC * sizeof(raw_t)>(S + row * LD + v, x + (r0 + r) * SR + (long long)k * SK);
    }
  }
  // W elements as floats: k .. k + W - 1 of row r (KC) or r .. r + W - 1 of row k (aligned to W elements).
  template <int W>
  __device__ static __forceinline__ void get(const raw_t* S, int r, int k, float* f) {
    typedef typename RawOf<sizeof(raw_t) * W>::T RT;
    union { RT t; raw_t u[W]; } w;
    w.t = *reinterpret_cast<const RT*>(KC ? S + r * LD + k : S + k * LD + r);
#pragma unroll
    for (int q = 0; q < W; ++q) f[q] = Bits<in_t>::to_f(w.u[q]);
  }
};
typedef Tile4<A_KCONT, BM, M_, SAM, SAK> TA4;
typedef Tile4<!B_NCONT, BN, N_, SBN, SBK> TB4;
constexpr int BUF4 = TA4::ELEMS + TB4::ELEMS;  // raw elements a buffer: A's tile, then B's
constexpr int NBUF4 = AHEAD + 1;
// The item's tiles into buffer S (this thread's share; no commit).
__device__ __forceinline__ void issue4(const in_t* a, const in_t* b, long long item, raw_t* S) {
  const long long bt = item / TILES4, tile = item % TILES4;
  TA4::issue(a + bt * SAB, tile / TILES_N * BM, S);
  TB4::issue(b + bt * SBB, tile % TILES_N * BN, S + TA4::ELEMS);
}
// KN (1..4) k values from k on: the thread's fragments (rows row_of, columns col_of), then KN outer
// products in ascending k.
template <int KN>
__device__ __forceinline__ void chunk4(const raw_t* As, const raw_t* Bs, int k, int ty, int tx, float (&acc)[TM][TN]) {
  float av[4][TM], bv[4][TN];
  if (A_KCONT) {
#pragma unroll
    for (int i = 0; i < TM; ++i) {
      float f[4];
      TA4::template get<4>(As, row_of(ty, i), k, f);  // past K (KN < 4): padding, not used
#pragma unroll
      for (int q = 0; q < KN; ++q) av[q][i] = f[q];
    }
  } else {
#pragma unroll
    for (int q = 0; q < KN; ++q)
#pragma unroll
      for (int g = 0; g < GM; ++g) TA4::template get<RV>(As, g * SPM + ty * RV, k + q, &av[q][g * RV]);
  }
  if (!B_NCONT) {
#pragma unroll
    for (int j = 0; j < TN; ++j) {
      float f[4];
      TB4::template get<4>(Bs, col_of(tx, j), k, f);
#pragma unroll
      for (int q = 0; q < KN; ++q) bv[q][j] = f[q];
    }
  } else {
#pragma unroll
    for (int q = 0; q < KN; ++q)
#pragma unroll
      for (int g = 0; g < GN; ++g) TB4::template get<CV>(Bs, g * SPN + tx * CV, k + q, &bv[q][g * CV]);
  }
#pragma unroll
  for (int q = 0; q < KN; ++q) outer(av[q], bv[q], acc);
}
// Outputs of one tile a matrix with N odd leave through the current buffer as one contiguous span (as
// FLAT3); tiled outputs with narrower stores than CV through a warp's part of it (as WSTORE3).
constexpr bool FLAT4 = TILES4 == 1 && SW == 1 && M_ * N_ * 4 <= (long long)BUF4 * sizeof(raw_t);
constexpr bool WSTORE4 = !FLAT4 && SW < CV && (long long)THREADS * TN * 4 <= (long long)BUF4 * sizeof(raw_t);
__device__ __forceinline__ void pipelined4(const in_t* a, const in_t* b, out_t* c, raw_t* smem4) {
  const int tx = (int)(threadIdx.x % THREADS) % TX, ty = (int)(threadIdx.x % THREADS) / TX;
  long long item = blockIdx.x;  // < ITEMS4: the grid has no empty block
  // The first AHEAD items in flight (one group each, empty past the end: the wait counts stay uniform).
#pragma unroll
  for (int s = 0; s < AHEAD; ++s) {
    if (item + s * GRID < ITEMS4) issue4(a, b, item + s * GRID, smem4 + s * BUF4);
    kjit_cp_commit();
  }
  for (int j = 0; item < ITEMS4; ++j, item += GRID) {
    raw_t* cur = smem4 + (j % NBUF4) * BUF4;
    kjit_cp_wait<AHEAD - 1>();  // this thread's copies of item landed (groups j + 1 .. j + AHEAD - 1 may not)
    // Every thread's copies landed, and every thread is done with item j - 1 (its buffer is the one
    // refilled next: (j + AHEAD) % NBUF4).
    __syncthreads();
    const long long ahead = item + (long long)AHEAD * GRID;
    if (ahead < ITEMS4) issue4(a, b, ahead, smem4 + ((j + AHEAD) % NBUF4) * BUF4);
    kjit_cp_commit();
    float acc[TM][TN];
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
      for (int q = 0; q < TN; ++q) acc[i][q] = 0.f;
    const raw_t* As = cur;
    const raw_t* Bs = cur + TA4::ELEMS;
    K4UNROLL
    for (int k = 0; k + 4 <= (int)K_; k += 4) chunk4<4>(As, Bs, k, ty, tx, acc);
    if (K_ % 4 != 0) chunk4<(int)(K_ % 4 == 0 ? 4 : K_ % 4)>(As, Bs, (int)(K_ / 4 * 4), ty, tx, acc);
    const long long bt = item / TILES4, tile = item % TILES4;
    const long long m0 = tile / TILES_N * BM, n0 = tile % TILES_N * BN;
    // The output stores' barriers (FLAT4, WSTORE4) come after every thread's multiply; the buffer they
    // write is refilled only after the next iteration's barrier.
    if (FLAT4) store_flat3(c + bt * (M_ * N_), reinterpret_cast<float*>(cur), ty, tx, acc);
    else if (WSTORE4) store_warp3(c + bt * (M_ * N_), m0, n0, reinterpret_cast<float*>(cur), ty, tx, acc);
    else store_tile3(c + bt * (M_ * N_), m0, n0, ty, tx, acc);
  }
}
#endif

extern "C" __global__ void __launch_bounds__(THREADS, MINB) kjit_matmul(const in_t* __restrict__ a,
                                                                  const in_t* __restrict__ b,
                                                                  out_t* __restrict__ c) {
#if STAGE > 0
  extern __shared__ __align__(16) unsigned char smem[];
#endif
#if STAGE == 4
  pipelined4(a, b, c, reinterpret_cast<raw_t*>(smem));
#else
#if STAGE == 3
  float* As3 = reinterpret_cast<float*>(smem);
  float* Bs3 = As3 + K_ * LDA3;
#elif STAGE > 0
  float* As0 = reinterpret_cast<float*>(smem);
  float* Bs0 = As0 + BK * LDA;
#if STAGE == 2
  float* As1 = Bs0 + BK * LDB;
  float* Bs1 = As1 + BK * LDA;
#endif
#endif
  const long long tile = blockIdx.x % (TILES_M * TILES_N), group = blockIdx.x / (TILES_M * TILES_N);
  const long long m0 = tile / TILES_N * BM, n0 = tile % TILES_N * BN;
  const int tx = threadIdx.x % TX, ty = threadIdx.x / TX;
#if STAGE == 3
  raw_t pa[OpA::CB][VEC], pb[OpB::CB][VEC];  // PREFETCH3: the next matrix's tiles
  if (PREFETCH3) {
    OpA::load(a + group * BPB * SAB, m0, 0, pa);  // group * BPB < BATCH: the grid has no empty block
    OpB::load(b + group * BPB * SBB, n0, 0, pb);
  }
#endif
  for (int bb = 0; bb < BPB; ++bb) {
    const long long batch = group * BPB + bb;
    if (batch >= BATCH) break;  // the same for every thread of the block
    const in_t* ab = a + batch * SAB;
    const in_t* bp = b + batch * SBB;
    float acc[TM][TN];
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
      for (int j = 0; j < TN; ++j) acc[i][j] = 0.f;
#if STAGE == 0
    // Rows and columns past the matrix read its last one (never stored).
    const raw_t* ar = reinterpret_cast<const raw_t*>(ab);
    const raw_t* br = reinterpret_cast<const raw_t*>(bp);
    long long arow[TM], bcol[TN];
#pragma unroll
    for (int i = 0; i < TM; ++i) arow[i] = min(m0 + ty * TM + i, M_ - 1) * SAM;
#pragma unroll
    for (int j = 0; j < TN; ++j) bcol[j] = min(n0 + tx * TN + j, N_ - 1) * SBN;
    KUNROLL
    for (long long k = 0; k < K_; ++k) {
      float av[TM], bv[TN];
#pragma unroll
      for (int i = 0; i < TM; ++i) av[i] = Bits<in_t>::to_f(__ldg(ar + arow[i] + k * SAK));
#pragma unroll
      for (int j = 0; j < TN; ++j) bv[j] = Bits<in_t>::to_f(__ldg(br + k * SBK + bcol[j]));
#pragma unroll
      for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);
    }
#elif STAGE == 1
    for (int t = 0; t < KT; ++t) {
      Frag f;
      fetch(ab, bp, m0, n0, (long long)t * BK, f);
      stash(f, As0, Bs0);
      __syncthreads();
      if (KLAST != BK && t == KT - 1) multiply<KLAST>(As0, Bs0, ty, tx, acc);
      else multiply<BK>(As0, Bs0, ty, tx, acc);
      __syncthreads();
    }
#elif STAGE == 3
    if (PREFETCH3) {
      if (bb > 0) __syncthreads();  // every thread is done with the previous matrix's tiles
      OpA::store(As3, 0, pa);
      OpB::store(Bs3, 0, pb);
      __syncthreads();
      if (bb + 1 < BPB && batch + 1 < BATCH) {  // in flight during this matrix's multiply and stores
        OpA::load(ab + SAB, m0, 0, pa);
        OpB::load(bp + SBB, n0, 0, pb);
      }
    } else {
      stage_all(ab, bp, m0, n0, As3, Bs3);
      __syncthreads();
    }
    {
      // Fragments double-buffered in registers: k + 1's are read while k's are multiplied.
      float a0[TM], b0[TN], a1[TM], b1[TN];
      frag(As3, Bs3, 0, ty, tx, a0, b0);
      K3UNROLL
      for (int k = 0; k + 2 <= (int)K_; k += 2) {
        frag(As3, Bs3, k + 1, ty, tx, a1, b1);
        outer(a0, b0, acc);
        if (k + 2 < (int)K_) frag(As3, Bs3, k + 2, ty, tx, a0, b0);
        outer(a1, b1, acc);
      }
      if (K_ % 2 == 1) outer(a0, b0, acc);
    }
    if (BPB > 1 && !PREFETCH3 && !FLAT3 && !WSTORE3) __syncthreads();  // the next matrix is staged over this one
    if (FLAT3) {
      store_flat3(c + batch * (M_ * N_), As3, ty, tx, acc);
      if (BPB > 1 && !PREFETCH3) __syncthreads();  // read out before the next matrix is staged over it
    } else if (WSTORE3) {
      store_warp3(c + batch * (M_ * N_), m0, n0, As3, ty, tx, acc);
      if (BPB > 1 && !PREFETCH3) __syncthreads();  // read out before the next matrix is staged over it
    } else {
      store_tile3(c + batch * (M_ * N_), m0, n0, ty, tx, acc);
    }
#else
    Frag f;
    fetch(ab, bp, m0, n0, 0, f);
    stash(f, As0, Bs0);
    __syncthreads();
    for (int t = 0; t < KT; ++t) {
      // The buffer written here was last read before the previous iteration's barrier.
      if (t + 1 < KT) fetch(ab, bp, m0, n0, (long long)(t + 1) * BK, f);
      const float* As = (t & 1) ? As1 : As0;
      const float* Bs = (t & 1) ? Bs1 : Bs0;
      if (KLAST != BK && t == KT - 1) multiply<KLAST>(As, Bs, ty, tx, acc);
      else multiply<BK>(As, Bs, ty, tx, acc);
      if (t + 1 < KT) stash(f, (t & 1) ? As0 : As1, (t & 1) ? Bs0 : Bs1);
      __syncthreads();
    }
#endif
#if STAGE != 3
    store_tile(c + batch * (M_ * N_), m0, n0, ty, tx, acc);
#endif
  }
#endif  // STAGE == 4
}
)";

// Codegen 5's span copies (knob span = 1) for the pipelined strategy, in place of kBody's Tile4 typedefs:
// an operand whose tile is one contiguous span of memory (a batch item of a contiguous 63x63 matrix is
// 3969 floats in a row) is copied as the 16-byte pieces that enclose the span, from the aligned address at
// or below its start, and the tile is read at the span's offset in the first piece. With rows of an odd
// number of floats, Tile4 could copy only 4 bytes a cp.async (a copy an element, and the registers of
// their addresses); here every copy is 16 bytes but those of pieces reaching outside the view (the first
// and last items' ends), which are copied element by element with plain loads (a piece is never read past
// the view: the kernel does not know the allocation around it). Fragment reads are scalar unless the
// offset is 0 for every item and rows are 16-byte aligned (ALIGNED: then as Tile4's, without its padding).
constexpr const char* kSpanTiles = R"(constexpr int K4R = (int)((K_ + 3) / 4 * 4);  // k a fragment read of 4 reaches
// Element (r, k) of the tile at S[r * LD + k] (KC; rows of the whole K) or S[k * LD + r] (K rows of the
// whole RLIM), S the span's first element in shared memory. The view x[0, EXT) is what may be read.
template <bool KC, int R, long long RLIM, long long EXT, bool ALIGNED>
struct Span4 {
  static constexpr int LD = KC ? (int)K_ : (int)RLIM;
  static constexpr long long LEN = KC ? (long long)R * K_ : K_ * RLIM;
  static constexpr long long READ = KC ? (long long)(R - 1) * K_ + K4R : (K_ - 1) * RLIM + R;
  static constexpr int PIECES = (int)((Q4 - 1 + (LEN > READ ? LEN : READ) + Q4 - 1) / Q4);
  static constexpr int ELEMS = PIECES * Q4;
  static constexpr int PER = (PIECES + THREADS - 1) / THREADS;
  // The span of the tile whose first row (KC) is r0 starts this many elements into the matrix.
  __device__ static __forceinline__ long long first(long long r0) { return KC ? r0 * K_ : 0; }
  // Elements of the span past its aligned piece start (0 .. Q4 - 1).
  __device__ static __forceinline__ int offset(const in_t* s) {
    return ALIGNED ? 0 : (int)(((unsigned long long)s % 16) / sizeof(raw_t));
  }
  // This thread's copies of the tile of matrix xm (x: the view) whose first row (KC) is r0; consecutive
  // threads take consecutive pieces.
  __device__ static __forceinline__ void issue(const in_t* x, const in_t* xm, long long r0, raw_t* S) {
    const in_t* s = xm + first(r0);
    const int o = offset(s);
    const long long rows = KC ? (RLIM - r0 < R ? RLIM - r0 : R) : RLIM;
    const int n = (int)((o + (KC ? rows * K_ : LEN) + Q4 - 1) / Q4);  // pieces of this item
    const unsigned long long lo = (unsigned long long)x, hi = lo + (unsigned long long)EXT * sizeof(raw_t);
    const unsigned long long g = (unsigned long long)s - (unsigned long long)o * sizeof(raw_t);  // 16-byte aligned
    // Codegen 6: every item but those at the view's ends has all its pieces inside it, and copies them with
    // no test a piece (the test's 64-bit compares were ~14 instructions a piece; 1.3% of the odd bmm's time).
    if (g >= lo && g + (unsigned long long)n * 16 <= hi) {
#pragma unroll
      for (int i = 0; i < PER; ++i) {
        const int q = (int)(threadIdx.x % THREADS) + i * THREADS;
        if (q >= n) break;
        kjit_cp_async<16>(S + q * Q4, reinterpret_cast<const void*>(g + (unsigned long long)q * 16));
      }
      return;
    }
#pragma unroll
    for (int i = 0; i < PER; ++i) {
      const int q = (int)(threadIdx.x % THREADS) + i * THREADS;
      if (q >= n) break;  // n <= PIECES
      const unsigned long long p = g + (unsigned long long)q * 16;
      if (p >= lo && p + 16 <= hi) {
        kjit_cp_async<16>(S + q * Q4, reinterpret_cast<const void*>(p));
      } else {
        // An end of the view inside the piece: its elements in the view, plain (this buffer is not read
        // before the barrier after the wait for its group, and no copy of the group writes these elements).
#pragma unroll
        for (int e = 0; e < Q4; ++e) {
          const unsigned long long pe = p + (unsigned long long)e * sizeof(raw_t);
          if (pe >= lo && pe < hi) S[q * Q4 + e] = __ldg(reinterpret_cast<const raw_t*>(pe));
        }
      }
    }
  }
  // W elements as floats: k .. k + W - 1 of row r (KC) or r .. r + W - 1 of row k.
  template <int W>
  __device__ static __forceinline__ void get(const raw_t* S, int r, int k, float* f) {
    const raw_t* p = KC ? S + r * LD + k : S + k * LD + r;
    if (ALIGNED) {
      typedef typename RawOf<sizeof(raw_t) * W>::T RT;
      union { RT t; raw_t u[W]; } w;
      w.t = *reinterpret_cast<const RT*>(p);
#pragma unroll
      for (int q = 0; q < W; ++q) f[q] = Bits<in_t>::to_f(w.u[q]);
    } else {
#pragma unroll
      for (int q = 0; q < W; ++q) f[q] = Bits<in_t>::to_f(p[q]);
    }
  }
};
)";
// Span 2: the span copies land in AHEAD buffers, and each item's tiles are repacked from there into one
// buffer of kBody's padded Tile4 layout (rows 16-byte aligned, float4 fragment reads without bank conflicts,
// the multiply and stores of span 0), which also serves the output stores as scratch. A barrier more an
// item; in exchange a thread reads (TM + TN) / 4 vectors a k instead of TM + TN scalars (span 1). The warps'
// output scratch (WSTORE4) is their own, past the landing buffers (codegen 6; before, the padded tiles, which
// cost a barrier an item before the stores: other warps may still be multiplying from them). kSpanRepack is
// what span 2 and 3 share (the landing buffers' layout, the repack, an item's work); kSpanAsync (span 2) and
// kSpanBulk (span 3) each add how the spans land and the item walk.
constexpr const char* kSpanRepack = R"(typedef Span4<A_KCONT, BM, M_, EXT_A, ALIGNED_A> SA4;
typedef Span4<!B_NCONT, BN, N_, EXT_B, ALIGNED_B> SB4;
constexpr int SBUF4 = SA4::ELEMS + SB4::ELEMS;  // raw elements a landing buffer: A's span, then B's
// One operand's tile from its span (s: the span's first element) into T's layout, rows of W elements (K of
// KC rows, RLIM of K rows); rows past RLIM are not written (they reach only outputs that are not stored).
// Codegen 7: warp w copies rows w, w + WARPS, ..., lane l a row's columns l, l + 32, ..., four rows' loads
// before their stores, so every access is a base address and an immediate offset. Before, thread t took
// elements t, t + THREADS, ... and divided each by the row length: at 4095 x 63^3 f32 (span 3) 67.4 against
// 69.3-69.7 us and 100 registers against 128 (H200, benchmarks/experiments/bmm63 variant r).
template <typename T, bool KC, int R, long long RLIM>
__device__ __forceinline__ void repack4(const raw_t* s, long long r0, raw_t* D) {
  constexpr int W = KC ? (int)K_ : (int)RLIM, ROWS = KC ? R : (int)K_;
  constexpr int WARPS = THREADS / 32, CPL = (W + 31) / 32, RPW = (ROWS + WARPS - 1) / WARPS;
  const int rows = KC ? (int)(RLIM - r0 < R ? RLIM - r0 : R) : ROWS;
  const int lane = (int)(threadIdx.x % 32), warp = (int)(threadIdx.x % THREADS) / 32;
  const raw_t* sw = s + warp * W + lane;
  raw_t* dw = D + warp * T::LD + lane;
#pragma unroll
  for (int i0 = 0; i0 < RPW; i0 += 4) {
    raw_t v[4][CPL];
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int c = 0; c < CPL; ++c) {
        if (i0 + i < RPW && warp + (i0 + i) * WARPS < rows && lane + c * 32 < W) v[i][c] = sw[(i0 + i) * WARPS * W + c * 32];
      }
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int c = 0; c < CPL; ++c) {
        if (i0 + i < RPW && warp + (i0 + i) * WARPS < rows && lane + c * 32 < W) dw[(i0 + i) * WARPS * T::LD + c * 32] = v[i][c];
      }
  }
}
// One item of span 2 or 3 whose spans landed in cur (every thread done with the padded tiles): its tiles
// repacked into them, REFILL (the caller's issue of item + AHEAD into cur, once no thread reads cur), the
// multiply and the stores (through the warps' own scratch).
template <typename Refill>
__device__ __forceinline__ void item4s(const in_t* a, const in_t* b, out_t* c, long long item, const raw_t* cur,
                                       raw_t* tiles, float* scratch, int ty, int tx, Refill refill) {
  const long long bt = item / TILES4, tile = item % TILES4;
  const long long m0 = tile / TILES_N * BM, n0 = tile % TILES_N * BN;
  const in_t* sa = a + bt * SAB + SA4::first(m0);
  const in_t* sb = b + bt * SBB + SB4::first(n0);
  repack4<TA4, A_KCONT, BM, M_>(cur + SA4::offset(sa), m0, tiles);
  repack4<TB4, !B_NCONT, BN, N_>(cur + SA4::ELEMS + SB4::offset(sb), n0, tiles + TA4::ELEMS);
  // The tiles are whole, and every thread is done reading this landing buffer: it takes item + AHEAD's.
  __syncthreads();
  refill();
  float acc[TM][TN];
#pragma unroll
  for (int i = 0; i < TM; ++i)
#pragma unroll
    for (int q = 0; q < TN; ++q) acc[i][q] = 0.f;
  const raw_t* As = tiles;
  const raw_t* Bs = tiles + TA4::ELEMS;
  K4UNROLL
  for (int k = 0; k + 4 <= (int)K_; k += 4) chunk4<4>(As, Bs, k, ty, tx, acc);
  if (K_ % 4 != 0) chunk4<(int)(K_ % 4 == 0 ? 4 : K_ % 4)>(As, Bs, (int)(K_ / 4 * 4), ty, tx, acc);
  if (WSTORE4) store_warp3(c + bt * (M_ * N_), m0, n0, scratch, ty, tx, acc);
  else store_tile3(c + bt * (M_ * N_), m0, n0, ty, tx, acc);
}
)";
// Span 2 and 3's output store, in place of kBody's store_warp3 (whose other callers, stage 3's, are compiled out
// of a stage-4 source): no barrier (the warps' scratch is their own, codegen 6), and SR4 of a thread's rows a
// round through a scratch SR4 times as large (codegen 8), so a round's shared loads and global stores overlap
// and a warp syncs TM / SR4 times, not TM: at 4095 x 63^3 f32 (span 3) 66.8 against 67.7 us, four rows a round
// 67.9 (H200, benchmarks/experiments/bmm63 variants k and j).
constexpr const char* kSpanStore = R"(constexpr int SR4 = TM % 2 == 0 ? 2 : 1;  // a thread's rows a store round
__device__ __forceinline__ void store_warp3(out_t* c, long long m0, long long n0, float* S, int ty, int tx, const float (&acc)[TM][TN]) {
  const int lane = threadIdx.x % 32, warp = (int)(threadIdx.x % THREADS) / 32;
  float* buf = S + warp * (SR4 * 32 * TN);
  const int ty0 = warp * 32 / TX, tx0 = warp * 32 % TX;
#pragma unroll
  for (int i = 0; i < TM; i += SR4) {
#pragma unroll
    for (int h = 0; h < SR4; ++h)
#pragma unroll
      for (int g = 0; g < GN; ++g) sts<CV>(buf + h * (32 * TN) + (ty - ty0) * WC3 + g * (WT3 * CV) + (tx - tx0) * CV, &acc[i + h][g * CV]);
    __syncwarp();
#pragma unroll
    for (int h = 0; h < SR4; ++h)
#pragma unroll
      for (int q = 0; q < TN; ++q) {
        const int idx = q * 32 + lane, r = idx / WC3, lc = idx % WC3;
        const long long gm = m0 + row_of(ty0 + r, i + h);
        const long long gn = n0 + (lc / (WT3 * CV)) * SPN + tx0 * CV + lc % (WT3 * CV);
        if (gm < M_ && gn < N_) {
          const raw_t v = Bits<out_t>::from_f(buf[h * (32 * TN) + idx]);
          raw_t* dst = reinterpret_cast<raw_t*>(c + gm * N_ + gn);
          if (HINT) __stcs(dst, v);
          else *dst = v;
        }
      }
    __syncwarp();  // read before the next round's rows are written
  }
}
)";

// Span 2's own part, after kSpanRepack: the span copies' cp.async issue and the item walk that waits on them.
constexpr const char* kSpanAsync = R"(__device__ __forceinline__ void issue4s(const in_t* a, const in_t* b, long long item, raw_t* S) {
  const long long bt = item / TILES4, tile = item % TILES4;
  SA4::issue(a, a + bt * SAB, tile / TILES_N * BM, S);
  SB4::issue(b, b + bt * SBB, tile % TILES_N * BN, S + SA4::ELEMS);
}
__device__ __forceinline__ void pipelined4s(const in_t* a, const in_t* b, out_t* c, raw_t* smem4) {
  const int tx = (int)(threadIdx.x % THREADS) % TX, ty = (int)(threadIdx.x % THREADS) / TX;
  raw_t* tiles = smem4;          // BUF4: the current item's tiles, padded
  raw_t* land = smem4 + BUF4;    // AHEAD landing buffers of SBUF4, then SR4 * THREADS * TN floats of output scratch
  float* scratch = reinterpret_cast<float*>(land + AHEAD * SBUF4);
  long long item = blockIdx.x;   // < ITEMS4: the grid has no empty block
#pragma unroll
  for (int s = 0; s < AHEAD; ++s) {
    if (item + s * GRID < ITEMS4) issue4s(a, b, item + s * GRID, land + s * SBUF4);
    kjit_cp_commit();
  }
  for (int j = 0; item < ITEMS4; ++j, item += GRID) {
    raw_t* cur = land + (j % AHEAD) * SBUF4;
    kjit_cp_wait<AHEAD - 1>();
    // Every thread's copies of the item landed, and every thread is done with the padded tiles.
    __syncthreads();
    item4s(a, b, c, item, cur, tiles, scratch, ty, tx, [&] {
      const long long ahead = item + (long long)AHEAD * GRID;
      if (ahead < ITEMS4) issue4s(a, b, ahead, cur);
      kjit_cp_commit();
    });
  }
}
)";

// Stage 5, bulk copies (sm_90 and newer), appended to kBody for that stage only (older points' sources do not
// change): as the pipelined strategy (a block walks its items, AHEAD in flight ahead of the one multiplied, one
// buffer more than that), but each operand's tile of an item is one contiguous, 16-byte aligned run of memory
// of whole 16-byte rows, which ONE thread copies with one TMA bulk copy (cp.async.bulk) an operand; an mbarrier
// a buffer counts the bytes landing (the copying thread arrives once with the item's byte count; the phase
// completes when they all landed), and every thread waits on it (phase parity: the buffer's use count, mod 2).
// The tiles land as they are in memory, unpadded: KC, R rows of K_ elements; else K_ rows of RLIM (the whole
// matrix). kBulkHead, codegen::kBulkCopy (the copies and mbarriers), kBulkTail. The CPU emulation
// (tests/policy/emu/emu.h) has no PTX: emu_bulk_copy etc.
constexpr const char* kBulkHead = R"(#if STAGE == 5
constexpr int Q5 = (int)(16 / sizeof(raw_t));  // elements of 16 bytes
constexpr long long TILES5 = TILES_M * TILES_N, ITEMS5 = BATCH * TILES5;
)";

constexpr const char* kBulkTail = R"(// One operand's tile in shared memory as in global memory: element (r, k) at S[r * LD + k] (KC) or
// S[k * LD + r]; rows (KC) or columns at or past RLIM hold what an earlier item left (they reach only outputs
// that are not stored). READ: what the fragments reach (r up to R past RLIM in the last k row).
template <bool KC, int R, long long RLIM>
struct Tile5 {
  static constexpr int LD = KC ? (int)K_ : (int)RLIM;
  static constexpr long long LEN = KC ? (long long)R * K_ : K_ * RLIM;
  static constexpr long long READ = KC ? (long long)R * K_ : (K_ - 1) * RLIM + R;
  static constexpr int ELEMS = (int)(((LEN > READ ? LEN : READ) + Q5 - 1) / Q5 * Q5);
  // The tile whose first row (KC) or column is r0: its first element in the matrix, its bytes (whole rows).
  __device__ static __forceinline__ long long first(long long r0) { return KC ? r0 * K_ : 0; }
  __device__ static __forceinline__ unsigned bytes(long long r0) {
    return (unsigned)((KC ? (RLIM - r0 < R ? RLIM - r0 : R) * K_ : K_ * RLIM) * (long long)sizeof(raw_t));
  }
  // W elements as floats: k .. k + W - 1 of row r (KC) or r .. r + W - 1 of row k (aligned to W elements:
  // LD is a multiple of 16 bytes).
  template <int W>
  __device__ static __forceinline__ void get(const raw_t* S, int r, int k, float* f) {
    typedef typename RawOf<sizeof(raw_t) * W>::T RT;
    union { RT t; raw_t u[W]; } w;
    w.t = *reinterpret_cast<const RT*>(KC ? S + r * LD + k : S + k * LD + r);
#pragma unroll
    for (int q = 0; q < W; ++q) f[q] = Bits<in_t>::to_f(w.u[q]);
  }
};
typedef Tile5<A_KCONT, BM, M_> TA5;
typedef Tile5<!B_NCONT, BN, N_> TB5;
constexpr int BUF5 = TA5::ELEMS + TB5::ELEMS;  // raw elements a buffer: A's tile, then B's
constexpr int NBUF5 = AHEAD + 1;
// The item's two bulk copies into buffer S, counted by BAR (the calling thread only).
__device__ __forceinline__ void issue5(const in_t* a, const in_t* b, long long item, raw_t* S, unsigned long long* bar) {
  const long long bt = item / TILES5, tile = item % TILES5;
  const long long m0 = tile / TILES_N * BM, n0 = tile % TILES_N * BN;
  const unsigned ba = TA5::bytes(m0), bb = TB5::bytes(n0);
  kjit_mbar_expect(bar, ba + bb);
  kjit_bulk_copy(S, a + bt * SAB + TA5::first(m0), ba, bar);
  kjit_bulk_copy(S + TA5::ELEMS, b + bt * SBB + TB5::first(n0), bb, bar);
}
// As chunk4, from the unpadded tiles.
template <int KN>
__device__ __forceinline__ void chunk5(const raw_t* As, const raw_t* Bs, int k, int ty, int tx, float (&acc)[TM][TN]) {
  float av[4][TM], bv[4][TN];
  if (A_KCONT) {
#pragma unroll
    for (int i = 0; i < TM; ++i) {
      float f[4];
      TA5::template get<4>(As, row_of(ty, i), k, f);  // K_ % 4 == 0 (rows of 16 bytes)
#pragma unroll
      for (int q = 0; q < KN; ++q) av[q][i] = f[q];
    }
  } else {
#pragma unroll
    for (int q = 0; q < KN; ++q)
#pragma unroll
      for (int g = 0; g < GM; ++g) TA5::template get<RV>(As, g * SPM + ty * RV, k + q, &av[q][g * RV]);
  }
  if (!B_NCONT) {
#pragma unroll
    for (int j = 0; j < TN; ++j) {
      float f[4];
      TB5::template get<4>(Bs, col_of(tx, j), k, f);
#pragma unroll
      for (int q = 0; q < KN; ++q) bv[q][j] = f[q];
    }
  } else {
#pragma unroll
    for (int q = 0; q < KN; ++q)
#pragma unroll
      for (int g = 0; g < GN; ++g) TB5::template get<CV>(Bs, g * SPN + tx * CV, k + q, &bv[q][g * CV]);
  }
#pragma unroll
  for (int q = 0; q < KN; ++q) outer(av[q], bv[q], acc);
}
// Outputs through the current buffer as FLAT3 / WSTORE3 (their barriers after every thread's multiply; the
// buffer is refilled only after the next iteration's barrier).
constexpr bool FLAT5 = TILES5 == 1 && SW == 1 && M_ * N_ * 4 <= (long long)BUF5 * sizeof(raw_t);
constexpr bool WSTORE5 = !FLAT5 && SW < CV && (long long)THREADS * TN * 4 <= (long long)BUF5 * sizeof(raw_t);
__device__ __forceinline__ void bulk5(const in_t* a, const in_t* b, out_t* c, unsigned char* smem5) {
  const int tx = (int)(threadIdx.x % THREADS) % TX, ty = (int)(threadIdx.x % THREADS) / TX;
  raw_t* bufs = reinterpret_cast<raw_t*>(smem5);
  unsigned long long* bars = reinterpret_cast<unsigned long long*>(smem5 + (long long)NBUF5 * BUF5 * sizeof(raw_t));
  const bool lead = threadIdx.x == 0;  // the thread that copies
  long long item = blockIdx.x;  // < ITEMS5: the grid has no empty block
  if (lead) {
#pragma unroll
    for (int s = 0; s < NBUF5; ++s) kjit_mbar_init(bars + s, 1);
    kjit_fence_init();
#pragma unroll
    for (int s = 0; s < AHEAD; ++s) {
      if (item + s * GRID < ITEMS5) issue5(a, b, item + s * GRID, bufs + s * BUF5, bars + s);
    }
  }
  __syncthreads();  // the barriers initialised before any thread waits on them
  for (int j = 0; item < ITEMS5; ++j, item += GRID) {
    const int cb = j % NBUF5;
    const raw_t* cur = bufs + cb * BUF5;
    // Every thread is done with item j - 1 (its buffer, (j + AHEAD) % NBUF5, takes item j + AHEAD's tiles).
    if (j > 0) __syncthreads();
    const long long ahead = item + (long long)AHEAD * GRID;
    if (lead && ahead < ITEMS5) {
      const int nb = (j + AHEAD) % NBUF5;
      kjit_fence_async();  // the block's reads and stores of that buffer before the copies overwrite it
      issue5(a, b, ahead, bufs + nb * BUF5, bars + nb);
    }
    kjit_mbar_wait(bars + cb, (unsigned)(j / NBUF5) & 1u);  // item j's tiles landed
    float acc[TM][TN];
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
      for (int q = 0; q < TN; ++q) acc[i][q] = 0.f;
    const raw_t* As = cur;
    const raw_t* Bs = cur + TA5::ELEMS;
    K5UNROLL
    for (int k = 0; k + 4 <= (int)K_; k += 4) chunk5<4>(As, Bs, k, ty, tx, acc);
    if (K_ % 4 != 0) chunk5<(int)(K_ % 4 == 0 ? 4 : K_ % 4)>(As, Bs, (int)(K_ / 4 * 4), ty, tx, acc);
    const long long bt = item / TILES5, tile = item % TILES5;
    const long long m0 = tile / TILES_N * BM, n0 = tile % TILES_N * BN;
    float* scratch = reinterpret_cast<float*>(bufs + cb * BUF5);
    if (FLAT5) store_flat3(c + bt * (M_ * N_), scratch, ty, tx, acc);
    else if (WSTORE5) store_warp3(c + bt * (M_ * N_), m0, n0, scratch, ty, tx, acc);
    else store_tile3(c + bt * (M_ * N_), m0, n0, ty, tx, acc);
  }
}
#endif  // STAGE == 5
)";

// Stage 6, ring (sm_90 and newer), appended after kBulkHead, kBulkCopy and kBulkTail (whose tiles, copies,
// fragments and stores it uses; their `#if STAGE == 5` reads `STAGE >= 5` in this stage's sources only): a
// persistent block of BPB consumer groups of THREADS threads and one producer warp. The producer's first lane
// copies the block's items (blockIdx.x + j * GRID) in order into a ring of BPB + AHEAD buffers, each with a
// `full` mbarrier (the copies' bytes) and an `empty` one (one arrival from each warp of the group that read it);
// group g multiplies items j = g, g + BPB, ..., frees the buffer as soon as its fragments are read and stores
// its outputs from registers. No block-wide barrier after the start: a group's stores, a slow group and the
// copies all overlap. Measured outside the evaluator on the H200 (benchmarks/experiments/bmm64, 4 groups of
// 8x8 a thread on whole 64x64 matrices, 6 buffers): 57.1 / 106.4 us at 4096 / 8192 x 64^3 f32 against stage
// 5's default at 61.2 / 115.8 in the same run.
constexpr const char* kRingTail = R"(#if STAGE == 6
constexpr int NST6 = BPB + AHEAD, WARPS6 = THREADS / 32, BLOCK6 = BPB * THREADS + 32;
__device__ __forceinline__ void kjit_mbar_arrive(unsigned long long* bar) {
#ifdef __CUDA_ARCH__
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(kjit_smem_addr(bar)) : "memory");
#else
  emu_mbar_arrive(bar);
#endif
}
__device__ __forceinline__ void ring6(const in_t* a, const in_t* b, out_t* c, unsigned char* smem6) {
  raw_t* bufs = reinterpret_cast<raw_t*>(smem6);
  unsigned long long* full = reinterpret_cast<unsigned long long*>(smem6 + (long long)NST6 * BUF5 * sizeof(raw_t));
  unsigned long long* empty = full + NST6;
  if (threadIdx.x == 0) {
#pragma unroll
    for (int s = 0; s < NST6; ++s) {
      kjit_mbar_init(full + s, 1);
      kjit_mbar_init(empty + s, WARPS6);
    }
    kjit_fence_init();
  }
  __syncthreads();  // the barriers initialised before any thread uses them; none after this
  const long long mine = (long long)blockIdx.x < ITEMS5 ? (ITEMS5 - 1 - (long long)blockIdx.x) / GRID + 1 : 0;
  if ((int)threadIdx.x >= BPB * THREADS) {
    // The producer: buffer j % NST6 takes item j once the group that read it before has freed it.
    if (threadIdx.x == BPB * THREADS) {
      for (long long j = 0; j < mine; ++j) {
        const int s = (int)(j % NST6);
        if (j >= NST6) kjit_mbar_wait(empty + s, (unsigned)((j / NST6 - 1) & 1));
        issue5(a, b, (long long)blockIdx.x + j * GRID, bufs + s * BUF5, full + s);
      }
    }
    return;
  }
  const int t = (int)threadIdx.x % THREADS, tx = t % TX, ty = t / TX;
  for (long long j = (int)threadIdx.x / THREADS; j < mine; j += BPB) {
    const int s = (int)(j % NST6);
    // A phase's parity names it only among the two latest. A group that finished its previous item early (the
    // copies land out of order) could reach fill f of this buffer while fill f - 1, another group's item, has
    // not landed, and would take that pending phase for its own (wrong outputs, then faults on the H200). So it
    // first waits until fill f - 1 was freed: `empty` phase f - 1, which cannot alias (phase f - 2 completed
    // before fill f - 1 was issued, and phase f needs this group's own arrivals); then `full` phase f is the
    // pending one or the latest completed. (Waiting on `full` phase f - 1 instead deadlocks once fill f has
    // landed: its parity then names the pending phase f + 1.)
    if (j >= NST6) kjit_mbar_wait(empty + s, (unsigned)((j / NST6 - 1) & 1));
    kjit_mbar_wait(full + s, (unsigned)((j / NST6) & 1));
    const raw_t* As = bufs + s * BUF5;
    const raw_t* Bs = As + TA5::ELEMS;
    float acc[TM][TN];
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
      for (int q = 0; q < TN; ++q) acc[i][q] = 0.f;
    K6UNROLL
    for (int k = 0; k + 4 <= (int)K_; k += 4) chunk5<4>(As, Bs, k, ty, tx, acc);
    if (K_ % 4 != 0) chunk5<(int)(K_ % 4 == 0 ? 4 : K_ % 4)>(As, Bs, (int)(K_ / 4 * 4), ty, tx, acc);
    __syncwarp();  // the warp's reads of the buffer are done
    if (t % 32 == 0) kjit_mbar_arrive(empty + s);
    const long long item = (long long)blockIdx.x + j * GRID, bt = item / TILES5, tile = item % TILES5;
    store_tile3(c + bt * (M_ * N_), tile / TILES_N * BM, tile % TILES_N * BN, ty, tx, acc);
  }
}
#endif  // STAGE == 6
)";

// Stage 6's span copies (span 1), swapped into the ring's sources for Tile5 and issue5: an operand's tile is
// one contiguous run of memory whose rows are not 16-byte aligned (odd sizes; a batch item of a contiguous
// 63x63 matrix is 3969 floats in a row), and the producer copies the 16-byte pieces that enclose it with one
// bulk copy, so the tile lands at its offset (0 .. 15 bytes) in the buffer and the fragments read it there,
// element by element. A piece reaching out of the view (the first and the last item's ends; the kernel does
// not know the allocation around the view) is copied element by element by the producer before its arrival,
// which releases those stores to the groups that wait on the phase.
constexpr const char* kRingSpan = R"(constexpr int K4R6 = (int)((K_ + 3) / 4 * 4);  // k a fragment read of 4 reaches
// As Tile5, but the tile's first element at S[offset] of a buffer S that starts at the piece holding it.
template <bool KC, int R, long long RLIM, long long EXT>
struct Span6 {
  static constexpr int LD = KC ? (int)K_ : (int)RLIM;
  static constexpr long long LEN = KC ? (long long)R * K_ : K_ * RLIM;
  static constexpr long long READ = KC ? (long long)(R - 1) * K_ + K4R6 : (K_ - 1) * RLIM + R;
  static constexpr int ELEMS = (int)((Q5 - 1 + (LEN > READ ? LEN : READ) + Q5 - 1) / Q5 * Q5);
  __device__ static __forceinline__ long long first(long long r0) { return KC ? r0 * K_ : 0; }
  __device__ static __forceinline__ unsigned bytes(long long r0) {
    return (unsigned)((KC ? (RLIM - r0 < R ? RLIM - r0 : R) * K_ : K_ * RLIM) * (long long)sizeof(raw_t));
  }
  __device__ static __forceinline__ int offset(const in_t* s) {
    return (int)(((unsigned long long)s % 16) / sizeof(raw_t));
  }
  // The N bytes from s into S: the element-wise part (a piece reaching out of the view x[0, EXT)) now; returns
  // the bytes of the bulk copy of the pieces inside, from *from.
  __device__ static __forceinline__ unsigned plain(const in_t* x, const in_t* s, unsigned n, raw_t* S,
                                                   unsigned long long* from) {
    const unsigned long long lo = (unsigned long long)x, hi = lo + (unsigned long long)EXT * sizeof(raw_t);
    const unsigned long long p = (unsigned long long)s, g = p & ~15ull, e = (p + n + 15) & ~15ull;
    const unsigned long long g0 = g < lo ? (lo + 15) & ~15ull : g;
    unsigned long long g1 = e > hi ? hi & ~15ull : e;
    if (g1 < g0) g1 = g0;
    for (unsigned long long q = p; q < p + n && q < g0; q += sizeof(raw_t)) {
      S[(q - g) / sizeof(raw_t)] = __ldg(reinterpret_cast<const raw_t*>(q));
    }
    for (unsigned long long q = g1 > p ? g1 : p; q < p + n; q += sizeof(raw_t)) {
      S[(q - g) / sizeof(raw_t)] = __ldg(reinterpret_cast<const raw_t*>(q));
    }
    *from = g0;
    return (unsigned)(g1 - g0);
  }
  // W elements as floats: k .. k + W - 1 of row r (KC) or r .. r + W - 1 of row k, one at a time.
  template <int W>
  __device__ static __forceinline__ void get(const raw_t* S, int r, int k, float* f) {
    const raw_t* p = KC ? S + r * LD + k : S + k * LD + r;
#pragma unroll
    for (int q = 0; q < W; ++q) f[q] = Bits<in_t>::to_f(p[q]);
  }
};
typedef Span6<A_KCONT, BM, M_, EXT_A> TA5;
typedef Span6<!B_NCONT, BN, N_, EXT_B> TB5;
)";
constexpr const char* kRingSpanIssue = R"(__device__ __forceinline__ void issue5(const in_t* a, const in_t* b, long long item, raw_t* S, unsigned long long* bar) {
  const long long bt = item / TILES5, tile = item % TILES5;
  const long long m0 = tile / TILES_N * BM, n0 = tile % TILES_N * BN;
  const in_t* sa = a + bt * SAB + TA5::first(m0);
  const in_t* sb = b + bt * SBB + TB5::first(n0);
  raw_t* Sb = S + TA5::ELEMS;
  unsigned long long fa, fb;
  const unsigned na = TA5::plain(a, sa, TA5::bytes(m0), S, &fa), nb = TB5::plain(b, sb, TB5::bytes(n0), Sb, &fb);
  kjit_mbar_expect(bar, na + nb);  // after the plain stores: the arrival releases them
  if (na) kjit_bulk_copy(S + (fa - ((unsigned long long)sa & ~15ull)) / sizeof(raw_t), reinterpret_cast<const void*>(fa), na, bar);
  if (nb) kjit_bulk_copy(Sb + (fb - ((unsigned long long)sb & ~15ull)) / sizeof(raw_t), reinterpret_cast<const void*>(fb), nb, bar);
}
)";

// Span 3 (sm_90 and newer): span 2 with the pieces landed by TMA bulk copies, as the ring's span copies do it
// (Span6 and issue5, above, their names given stage 4's meanings), one thread issuing an item's two copies and
// an mbarrier a landing buffer counting their bytes: cp.async's 16-byte copies took ~660 of the ~3600
// shared-memory wavefronts a matrix of the odd bmm (f32 4095 x 63^3), which that pipe bounds; with bulk copies
// 68.8 us against 76.1 (H200, benchmarks/experiments/bmm63, variant t). After kSpanRepack (its SA4, SB4,
// SBUF4, repack4, item4s) in place of kSpanAsync, with codegen::kBulkCopy before this.
constexpr const char* kSpanBulkHead = R"(constexpr int Q5 = Q4;
constexpr long long TILES5 = TILES4;
)";
constexpr const char* kSpanBulk = R"(static_assert(TA5::ELEMS == SA4::ELEMS && TB5::ELEMS == SB4::ELEMS, "span 3: Span6 and Span4 buffers differ");
static_assert(((long long)BUF4 * sizeof(raw_t) + (long long)AHEAD * SBUF4 * sizeof(raw_t) + SR4 * THREADS * TN * 4) % 16 == 0,
              "span 3: the mbarriers' offset is not 16-byte aligned");
__device__ __forceinline__ void pipelined4b(const in_t* a, const in_t* b, out_t* c, raw_t* smem4) {
  const int tx = (int)(threadIdx.x % THREADS) % TX, ty = (int)(threadIdx.x % THREADS) / TX;
  raw_t* tiles = smem4;          // BUF4: the current item's tiles, padded
  raw_t* land = smem4 + BUF4;    // AHEAD landing buffers of SBUF4, SR4 * THREADS * TN floats of output scratch, then
                                 // AHEAD mbarriers
  float* scratch = reinterpret_cast<float*>(land + AHEAD * SBUF4);
  unsigned long long* bar = reinterpret_cast<unsigned long long*>(scratch + SR4 * THREADS * TN);
  long long item = blockIdx.x;   // < ITEMS4: the grid has no empty block
  if (threadIdx.x == 0) {
#pragma unroll
    for (int s = 0; s < AHEAD; ++s) kjit_mbar_init(bar + s, 1);
    kjit_fence_init();
#pragma unroll
    for (int s = 0; s < AHEAD; ++s) {
      if (item + s * GRID < ITEMS4) issue5(a, b, item + s * GRID, land + s * SBUF4, bar + s);
    }
  }
  __syncthreads();  // the barriers initialised before any thread waits on them
  for (int j = 0; item < ITEMS4; ++j, item += GRID) {
    raw_t* cur = land + (j % AHEAD) * SBUF4;
    // Buffer j % AHEAD's (j / AHEAD)-th fill: it is refilled only after every thread passed the barrier in
    // item4s, so no thread waits a phase behind.
    kjit_mbar_wait(bar + j % AHEAD, (unsigned)((j / AHEAD) & 1));
    __syncthreads();  // every thread is done with the padded tiles
    item4s(a, b, c, item, cur, tiles, scratch, ty, tx, [&] {
      // (the generic proxy's reads of cur ordered before the async proxy's writes)
      const long long ahead = item + (long long)AHEAD * GRID;
      if (threadIdx.x == 0 && ahead < ITEMS4) {
        kjit_fence_async();
        issue5(a, b, ahead, cur, bar + j % AHEAD);
      }
    });
  }
}
)";

// Span 4 (sm_90 and newer, ahead 1): span 3 with the landing buffer and the padded tiles in one region, so
// a block needs about half the shared memory (the odd bmm f32 63^3: 38.6 KB against 70.7, five blocks an SM
// against three). The spans land at the region's end; the repack goes through registers, A's span into A's tile
// (which ends before B's span begins: Check), a block barrier between its loads and its stores, then B's. The
// next item's copies into the region wait for the end of the multiply: a block no longer overlaps its own
// copies with its multiply, the other blocks of its SM do. Swapped into span 3's text: this before item4s,
// item4s's repack and refill, pipelined4b's layout (benchmarks/experiments/bmm63 variant g).
constexpr const char* kSpanInPlace = R"(// A thread's share of one operand's span (rows to warps, columns to lanes, as repack4), held in registers
// between load and store. A row or column past the tile loads a zero (a select, not a branch: no register is
// carried from one item to the next).
template <typename T, bool KC, int R, long long RLIM>
struct Staged4 {
  static constexpr int W = KC ? (int)K_ : (int)RLIM, ROWS = KC ? R : (int)K_;
  static constexpr int WARPS = THREADS / 32, CPL = (W + 31) / 32, RPW = (ROWS + WARPS - 1) / WARPS;
  raw_t v[RPW][CPL];
  int rows;
  __device__ __forceinline__ void load(const raw_t* s, long long r0) {
    rows = KC ? (int)(RLIM - r0 < R ? RLIM - r0 : R) : ROWS;
    const int lane = (int)(threadIdx.x % 32), warp = (int)(threadIdx.x % THREADS) / 32;
    const raw_t* sw = s + warp * W + lane;
#pragma unroll
    for (int i = 0; i < RPW; ++i)
#pragma unroll
      for (int c = 0; c < CPL; ++c)
        v[i][c] = warp + i * WARPS < rows && lane + c * 32 < W ? sw[i * WARPS * W + c * 32] : raw_t(0);
  }
  __device__ __forceinline__ void store(raw_t* D) const {
    const int lane = (int)(threadIdx.x % 32), warp = (int)(threadIdx.x % THREADS) / 32;
    raw_t* dw = D + warp * T::LD + lane;
#pragma unroll
    for (int i = 0; i < RPW; ++i)
#pragma unroll
      for (int c = 0; c < CPL; ++c)
        if (warp + i * WARPS < rows && lane + c * 32 < W) dw[i * WARPS * T::LD + c * 32] = v[i][c];
  }
};
constexpr int QP4 = 16 / (int)sizeof(raw_t);
constexpr int LBUF4 = ((BUF4 > SBUF4 ? BUF4 : SBUF4) + QP4 - 1) / QP4 * QP4;  // the region, raw elements
constexpr int LOFF4 = (LBUF4 - SBUF4) / QP4 * QP4;                           // the landing buffer in it
static_assert(AHEAD == 1, "span 4: one landing buffer");
static_assert(LOFF4 + SA4::ELEMS >= TA4::ELEMS, "span 4: A's tile reaches into B's span");
__device__ __forceinline__ void kjit_fence_async();
)";

class Matmul final : public Family {
 public:
  std::string_view name() const override { return "matmul"; }
  int codegen_version() const override { return 8; }
  std::vector<std::string> ops() const override { return {kMm, kBmm}; }

  OpTraits traits(std::string_view) const override {
    OpTraits t;
    // Sums of up to 256 products in another order than cuBLAS's (which may also split K): float32
    // results differ by a few ulps of the largest partial sum, which assert_close's 1.3e-6 does not
    // always allow near cancellation; the float64 rule (compare.h) is the second chance either way.
    // f16/bf16: both round one float32 sum, so they differ by at most one ulp of the output
    // (assert_close's defaults already allow it).
    t.tolerance_by_dtype[DType::kFloat32] = {1e-5, 1e-5};
    // float16's large inputs (2^10..2^14) make sums near float16's overflow threshold, where whether
    // the rounded output is Inf depends on the order of the float32 partial sums: not fed.
    t.no_large_inputs = {DType::kFloat16};
    return t;
  }

  std::vector<OpKey> SampleKeys() const override {
    constexpr DType f32 = DType::kFloat32, f16 = DType::kFloat16, bf16 = DType::kBFloat16;
    auto c = [](DType dt, std::vector<int64_t> s) { return TensorDesc::Contiguous(dt, std::move(s)); };
    // x.transpose(-1, -2) of a contiguous tensor of the transposed sizes.
    auto t = [](DType dt, std::vector<int64_t> s) {
      std::vector<int64_t> ts = s;
      std::swap(ts[ts.size() - 1], ts[ts.size() - 2]);
      TensorDesc d = TensorDesc::Contiguous(dt, ts);
      d.sizes = s;
      std::swap(d.strides[d.strides.size() - 1], d.strides[d.strides.size() - 2]);
      return d;
    };
    auto mm = [](TensorDesc a, TensorDesc b, uint32_t numerics = kNumericsDefault) {
      return OpKey::Single(kMm, "", {std::move(a), std::move(b)}, 90, numerics);
    };
    auto bmm = [](TensorDesc a, TensorDesc b, uint32_t numerics = kNumericsDefault) {
      return OpKey::Single(kBmm, "", {std::move(a), std::move(b)}, 90, numerics);
    };
    TensorDesc expanded = c(f32, {64, 24});  // a [24, 64, 24] view of one matrix (batch stride 0)
    expanded.sizes = {24, 64, 24};
    expanded.strides = {0, 24, 1};
    return {
        // The headroom cases: batches of 64x64 products; the tall-skinny float32 product.
        bmm(c(f32, {4096, 64, 64}), c(f32, {4096, 64, 64})),
        mm(c(f32, {32768, 64}), c(f32, {64, 32768})),
        // TF32 allowed: a different key, served with FP32 FMA all the same.
        mm(c(f32, {8192, 32}), c(f32, {32, 8192}), kAllowTF32Matmul),
        // Half types, odd sizes, transposed operands, tiny matrices, an expanded batch.
        bmm(c(f16, {512, 33, 48}), c(f16, {512, 48, 40})),
        bmm(c(bf16, {256, 64, 64}), t(bf16, {256, 64, 64})),
        mm(t(f32, {1000, 33}), c(f32, {33, 777})),
        mm(c(bf16, {4096, 64}), c(bf16, {64, 4096})),
        bmm(c(f32, {16384, 8, 8}), c(f32, {16384, 8, 8})),
        mm(c(f16, {1, 64}), c(f16, {64, 4096})),
        bmm(c(f32, {24, 100, 64}), expanded),
        // Odd contiguous matrices, rows not 16-byte aligned: the pipelined strategy's span copies (codegen 5).
        bmm(c(f32, {600, 63, 63}), c(f32, {600, 63, 63})),
    };
  }

  Result<std::unique_ptr<Problem>> Match(const OpKey& key) const override {
    if (key.calls.size() != 1) return InvalidArgument("a single call is needed");
    const OpCall& call = key.calls[0];
    auto p = std::make_unique<MatmulProblem>();
    if (call.op == kMm) {
      p->batched = false;
    } else if (call.op == kBmm) {
      p->batched = true;
    } else {
      return InvalidArgument("not aten::mm or aten::bmm");
    }
    if (!call.overload.empty()) return InvalidArgument("only the default overload (no out=)");
    if (call.args.size() != 2) return InvalidArgument("expected (self, mat2)");
    const auto* a = std::get_if<TensorDesc>(&call.args[0]);
    const auto* b = std::get_if<TensorDesc>(&call.args[1]);
    if (!a || !b) return InvalidArgument("self and mat2 must be tensors");
    const size_t rank = p->batched ? 3 : 2;
    if (a->sizes.size() != rank || b->sizes.size() != rank || a->strides.size() != rank || b->strides.size() != rank) {
      return InvalidArgument(p->batched ? "bmm needs 3-D tensors" : "mm needs 2-D tensors");
    }
    if (!Float(a->dtype)) return InvalidArgument("dtype other than f32, f16, bf16");
    if (a->dtype != b->dtype) return InvalidArgument("mixed dtypes: PyTorch rejects them");
    const size_t o = p->batched ? 1 : 0;
    if (p->batched && a->sizes[0] != b->sizes[0]) return InvalidArgument("batch sizes differ: PyTorch rejects it");
    if (a->sizes[o + 1] != b->sizes[o]) return InvalidArgument("inner dimensions differ: PyTorch rejects it");
    p->dtype = a->dtype;
    p->batch = p->batched ? a->sizes[0] : 1;
    p->m = a->sizes[o];
    p->k = a->sizes[o + 1];
    p->n = b->sizes[o + 1];
    if (p->batch == 0 || p->m == 0 || p->n == 0 || p->k == 0) return InvalidArgument("empty product: declined");
    for (const TensorDesc* d : {a, b}) {
      for (int64_t s : d->strides) {
        if (s < 0) return InvalidArgument("negative strides: declined");
      }
    }
    // The shim's pre-filter declines a larger K with the same limit, before keying the call.
    const int64_t max_k = MatmulMaxK(p->dtype);
    if (p->k > max_k) {
      return InvalidArgument("inner dimension " + std::to_string(p->k) + " over " + std::to_string(max_k) +
                             ": cuBLAS's large tiles" + (p->dtype == DType::kFloat32 ? "" : " and tensor cores") +
                             " are the right answer there");
    }
    if (p->batch * p->m * p->n > (int64_t{1} << 40)) return InvalidArgument("output too large");
    auto stride = [](const TensorDesc& d, size_t dim) { return d.sizes[dim] == 1 ? 0 : d.strides[dim]; };
    if (p->batched) {
      p->sab = stride(*a, 0);
      p->sbb = stride(*b, 0);
    }
    p->sam = stride(*a, o);
    p->sak = stride(*a, o + 1);
    p->sbk = stride(*b, o);
    p->sbn = stride(*b, o + 1);
    if (a->alignment < p->elem() || b->alignment < p->elem()) return InvalidArgument("input not aligned to its element");
    p->a_align = a->alignment;
    p->b_align = b->alignment;
    p->tf32_allowed = (key.numerics & kAllowTF32Matmul) != 0;
    p->op = call.op;
    std::ostringstream desc;
    desc << "matmul " << DTypeName(p->dtype) << (p->batched ? " bmm " : " mm ");
    if (p->batched) desc << p->batch << "x";
    desc << "(" << p->m << "x" << p->k << " @ " << p->k << "x" << p->n << ")";
    desc << " A" << (p->sak == 1 ? "" : p->sam == 1 ? "^T" : "(strided)") << " B"
         << (p->sbn == 1 ? "" : p->sbk == 1 ? "^T" : "(strided)");
    if (p->batched && p->sbb == 0 && p->batch > 1) desc << " B broadcast";
    desc << (p->tf32_allowed ? " tf32-allowed (fp32 fma)" : " tf32-off");
    p->description = desc.str();
    return std::unique_ptr<Problem>(std::move(p));
  }

  Space MakeSpace(const Problem&, const DeviceFacts&) const override {
    Space s;
    s.family = "matmul";
    s.knobs = {
        {"stage", {kDirect, kStaged, kDouble, kResident, kPipelined, kBulk, kRing},
         "0 operands read from global memory (L1) at every k, 1 bk-deep slices staged in shared memory, "
         "2 double-buffered slices, the next fetched into registers during the multiply, 3 resident: the "
         "tile's whole K staged once (k-major), float4 fragments double-buffered in registers, 4 pipelined: "
         "a block walks bpb tiles (of matrices) and cp.async copies the whole-K tiles of the one `ahead` "
         "steps on into another shared buffer while it multiplies this one, 5 bulk (sm_90+, operands whose "
         "tiles are each one contiguous 16-byte aligned run of whole 16-byte rows): as 4, but one thread copies "
         "an item's tiles with one TMA bulk copy an operand, completion counted by an mbarrier, 6 ring (as 5's "
         "operands): a persistent block of bpb consumer groups and a producer warp whose bulk copies fill a ring of "
         "bpb + ahead buffers, each freed by its group through an mbarrier (no block-wide barrier)"},
        {"bm", {16, 32, 64, 128, 256}, "block tile rows (of the output)"},
        {"bn", {16, 32, 64, 128, 256}, "block tile columns"},
        {"bk", {8, 16, 32}, "k values per staged slice (direct and resident: the k loop's unroll)"},
        {"tm", {1, 2, 4, 8}, "output rows per thread (threads = bm/tm x bn/tn)"},
        {"tn", {1, 2, 4, 8}, "output columns per thread, stored together"},
        {"vec", {1, 2, 4, 8}, "elements per global load along each operand's contiguous dim (staged)"},
        {"bpb", {1, 2, 4, 8},
         "matrices of the batch per block, one after another (bmm, one tile a matrix); pipelined: at least "
         "so many work items (tiles of matrices) a block, the grid striding over them and never more blocks "
         "than fit the SMs at once; ring: consumer groups a block"},
        {"hint", {0, 1}, "1: streaming (evict-first) output stores"},
        {"minb", {1, 2, 4}, "blocks per SM the registers must allow (__launch_bounds__): 2 caps them at 32768 / threads, 4 at 16384 / threads"},
        {"ahead", {1, 2, 3},
         "pipelined and bulk: items in flight ahead of the one multiplied (shared buffers: ahead + 1); ring: buffers "
         "beyond one a group (bpb + ahead); 3: bulk and ring only"},
        {"span", {0, 1, 2, 3, 4},
         "pipelined and ring (1 only), operands whose tiles are one contiguous span of memory with rows not "
         "16-byte aligned (odd sizes): 1 copies the span's enclosing 16-byte pieces (ring: one bulk copy an "
         "operand) and reads the tiles at the span's offset in them (scalar fragment reads), 2 copies them so and "
         "repacks each item's tiles into one padded buffer (rows 16-byte aligned: vector fragment reads) before "
         "its multiply, 3 (sm_90+) as 2 with the pieces landed by one thread's TMA bulk copy an operand, "
         "counted by an mbarrier a landing buffer, 4 (sm_90+, ahead 1) as 3 with the tiles repacked in place over "
         "the landing buffer (about half the shared memory: more blocks an SM, launch bounds to match; the next "
         "item's copies wait for the multiply)"},
    };
    // Codegen 4 added `ahead`: points before it had no pipelined strategy, whose knob it is. Codegen 5 added
    // `span`; points without it generate the kernels they did.
    // Stage 5 (bulk), stage 6 (ring) and ahead 3 are new values of existing knobs, not new knobs: every point
    // that existed generates the kernel it did (tests: MatmulSpace.OldPointsKeepTheirSources), so the codegen
    // version stayed. Codegen 6 changed the kernels of span points (stage 4, span 1 and 2: the span copies'
    // unchecked issue; span 2's own output scratch), and only theirs. Span 3 came as a new value (codegen 6
    // still); codegen 7 changed span 2 and 3's repack (rows to warps), so span points' kernels only again;
    // codegen 8 their output store (two of a thread's rows a round, kSpanStore), again theirs only. Span 4 came
    // as a new value (codegen 8 still).
    s.absent_as = {{"ahead", 1}, {"span", 0}};
    return s;
  }

  static int64_t Threads(int64_t bm, int64_t bn, int64_t tm, int64_t tn) { return (bm / tm) * (bn / tn); }
  static int64_t SharedBytes(int64_t stage, int64_t bm, int64_t bn, int64_t bk, int64_t k) {
    if (stage == kDirect || stage == kPipelined) return 0;  // pipelined: PipelinedBytes
    if (stage == kResident) return k * ((bm + 4) + (bn + 4)) * 4;
    return (stage == kDouble ? 2 : 1) * bk * ((bm + 4) + (bn + 4)) * 4;
  }
  // The pipelined strategy's ahead + 1 buffers of both whole-K tiles in their global layout (the kernel's
  // Tile4): rows along the operand's contiguous dim, padded by 16 bytes past the 16-byte rounded length.
  // Span copies: ahead + 1 span buffers (span 1), or ahead of them, one padded buffer their tiles are
  // repacked into and the warps' output scratch, threads_tn floats (threads x tn x the store's rows a round,
  // kSpanStore's SR4) (span 2); span 3 as 2 and
  // an mbarrier (8 bytes) a landing buffer after the scratch (16-byte aligned there: every part before it is
  // a multiple of 16 bytes); span 4 as 3 with the landing buffer inside the padded tiles' region (the larger
  // of the two).
  // Elements of one operand's padded whole-K tile (the kernel's Tile4::ELEMS): R rows of K rounded up to 16 bytes
  // and padded by 16 more (kc), or K rows of R padded by 16 bytes.
  static int64_t PaddedTileElems(const MatmulProblem& p, int64_t r, bool kc) {
    const int64_t q = 16 / p.elem();
    return kc ? r * (CeilDiv(p.k, q) * q + q) : p.k * (r + q);
  }
  static int64_t PipelinedBytes(const MatmulProblem& p, int64_t bm, int64_t bn, int64_t ahead, int64_t span = 0,
                                int64_t threads_tn = 0) {
    const int64_t a = PaddedTileElems(p, bm, p.a_kcont()), b = PaddedTileElems(p, bn, !p.b_ncont());
    const int64_t spans = (SpanPieces(p, bm, p.a_kcont(), p.m) + SpanPieces(p, bn, !p.b_ncont(), p.n)) * 16;
    if (span == 1) return (ahead + 1) * spans;
    if (span == 2 || span == 3) return ahead * spans + (a + b) * p.elem() + threads_tn * 4 + (span == 3 ? ahead * 8 : 0);
    if (span == 4) return std::max(spans, (a + b) * p.elem()) + threads_tn * 4 + 8;  // (both multiples of 16)
    return (ahead + 1) * (a + b) * p.elem();
  }
  // The pipelined grid: bpb work items a block, but no more blocks than the SMs hold at once by their
  // shared memory and threads (registers are not known before compiling: a block they keep out waits
  // for a second wave), so that a block's items are a whole share of the work, all blocks running.
  static int64_t PipelinedGrid(const MatmulProblem& p, const Point& pt, const DeviceFacts& dev) {
    return WaveGrid(p, pt, dev, Threads(pt.at("bm"), pt.at("bn"), pt.at("tm"), pt.at("tn")));
  }
  // The pipelined grid for blocks of `threads` (the ring's: its groups and the producer warp).
  static int64_t WaveGrid(const MatmulProblem& p, const Point& pt, const DeviceFacts& dev, int64_t threads) {
    const int64_t items = CeilDiv(p.m, pt.at("bm")) * CeilDiv(p.n, pt.at("bn")) * p.batch;
    return std::min(CeilDiv(items, pt.at("bpb")), BlocksPerSm(p, pt, dev, threads) * dev.sm_count);
  }
  // The blocks of `threads` an SM holds at once by their shared memory and threads.
  static int64_t BlocksPerSm(const MatmulProblem& p, const Point& pt, const DeviceFacts& dev, int64_t threads) {
    return std::max<int64_t>(
        1, std::min<int64_t>({dev.shared_bytes_per_sm / (BlockShared(p, pt) + 1024), 2048 / threads, 32}));
  }
  static int64_t Ahead(const Point& pt) { return pt.count("ahead") ? pt.at("ahead") : 1; }
  static int64_t SpanOf(const Point& pt) { return pt.count("span") ? pt.at("span") : 0; }
  // The 16-byte pieces of one operand's span buffer (the kernel's Span4): R rows (kc: of K elements, the
  // tile's first row at most 15 bytes into its first piece) or K rows of rlim, whichever the reads reach
  // further (fragments of 4 k past K in the last row; r up to R past rlim).
  static int64_t SpanPieces(const MatmulProblem& p, int64_t r, bool kc, int64_t rlim) {
    const int64_t q = 16 / p.elem(), kq = CeilDiv(p.k, 4) * 4;
    const int64_t len = kc ? r * p.k : p.k * rlim, read = kc ? (r - 1) * p.k + kq : (p.k - 1) * rlim + r;
    return CeilDiv(q - 1 + std::max(len, read), q);
  }
  // Where an operand's tile is one contiguous span: rows of the whole K one after another (kc), or the
  // whole matrix, k-rows of its rlim elements (a tile of r covers them).
  static bool SpanContiguous(bool kc, int64_t sr, int64_t sk, int64_t r, int64_t rlim, int64_t k) {
    if (kc) return sk == 1 && (sr == k || rlim == 1);
    return sr == 1 && (sk == rlim || k == 1) && r >= rlim;
  }
  // The span's offset in its first piece is 0 for every item and a fragment's reads are aligned vectors:
  // a 16-byte aligned tensor, batch stride and row pitch.
  static bool SpanAligned(const MatmulProblem& p, bool kc, int64_t sb, int64_t rlim, int align) {
    return align >= 16 && sb * p.elem() % 16 == 0 && (kc ? p.k : rlim) * p.elem() % 16 == 0;
  }
  // The bulk strategy's buffers (the kernel's Tile5): ahead + 1 of both tiles as in memory (R rows of K, kc;
  // else K rows of rlim and the last row's reads up to r), then ahead + 1 mbarriers of 8 bytes.
  static int64_t BulkTileElems(const MatmulProblem& p, int64_t r, bool kc, int64_t rlim) {
    const int64_t q = 16 / p.elem();
    const int64_t len = kc ? r * p.k : p.k * rlim, read = kc ? r * p.k : (p.k - 1) * rlim + r;
    return CeilDiv(std::max(len, read), q) * q;
  }
  static int64_t BulkBuffer(const MatmulProblem& p, int64_t bm, int64_t bn) {
    return (BulkTileElems(p, bm, p.a_kcont(), p.m) + BulkTileElems(p, bn, !p.b_ncont(), p.n)) * p.elem();
  }
  static int64_t BulkBytes(const MatmulProblem& p, int64_t bm, int64_t bn, int64_t ahead) {
    return (ahead + 1) * BulkBuffer(p, bm, bn) + CeilDiv((ahead + 1) * 8, 16) * 16;
  }
  // The ring's buffers (the bulk strategy's tiles), then a full and an empty mbarrier each.
  // Span copies (span 1): each buffer holds both operands' spans with their enclosing 16-byte pieces (Span6).
  static int64_t RingBytes(const MatmulProblem& p, int64_t bm, int64_t bn, int64_t buffers, int64_t span = 0) {
    const int64_t buffer = span ? (SpanPieces(p, bm, p.a_kcont(), p.m) + SpanPieces(p, bn, !p.b_ncont(), p.n)) * 16
                                : BulkBuffer(p, bm, bn);
    return buffers * buffer + CeilDiv(2 * buffers * 8, 16) * 16;
  }
  // A ring block's threads: its consumer groups and the producer warp.
  static int64_t RingThreads(const Point& pt) {
    return pt.at("bpb") * Threads(pt.at("bm"), pt.at("bn"), pt.at("tm"), pt.at("tn")) + 32;
  }
  // The ring's persistent grid: as many blocks as the SMs hold at once by shared memory and threads, at most
  // one for every bpb items (each group an item at least).
  static int64_t RingGrid(const MatmulProblem& p, const Point& pt, const DeviceFacts& dev) {
    return WaveGrid(p, pt, dev, RingThreads(pt));
  }
  static int64_t BlockShared(const MatmulProblem& p, const Point& pt) {
    const int64_t stage = pt.at("stage");
    if (stage == kBulk) return BulkBytes(p, pt.at("bm"), pt.at("bn"), Ahead(pt));
    if (stage == kRing) return RingBytes(p, pt.at("bm"), pt.at("bn"), pt.at("bpb") + Ahead(pt), SpanOf(pt));
    if (stage == kPipelined) {
      // (span 2 and 3: the output scratch holds SR4 of a thread's rows, kSpanStore)
      return PipelinedBytes(p, pt.at("bm"), pt.at("bn"), Ahead(pt), SpanOf(pt),
                            Threads(pt.at("bm"), pt.at("bn"), pt.at("tm"), pt.at("tn")) * pt.at("tn") *
                                (pt.at("tm") % 2 == 0 ? 2 : 1));
    }
    return SharedBytes(stage, pt.at("bm"), pt.at("bn"), pt.at("bk"), p.k);
  }
  // Elements of one operand's whole-K tile (rows x K) the resident staging loop covers: read along k
  // (kc), P lanes take a row's consecutive vectors, so a row's vectors round up to P (the kernel's Operand).
  static int64_t ResidentElems(const MatmulProblem& p, int64_t rows, bool kc, int64_t vec) {
    if (!kc) return rows * p.k;
    const int64_t ps = 32 / (vec * p.elem()), pw = std::min<int64_t>(ps, std::max<int64_t>(1, 8 / vec));
    const int64_t lanes = ps < 2 ? 1 : pw >= 2 ? pw : 2;
    return rows * (CeilDiv(p.k / vec, lanes) * lanes) * vec;
  }
  // Output columns stored together: the widest power of two dividing tn and N, within 16 bytes.
  static int64_t StoreWidth(const MatmulProblem& p, int64_t tn) {
    for (int64_t v : {8, 4, 2}) {
      if (tn % v == 0 && p.n % v == 0 && v * p.elem() <= 16) return v;
    }
    return 1;
  }

  Status Check(const Problem& problem, const Point& pt, const DeviceFacts& dev) const override {
    const auto& p = static_cast<const MatmulProblem&>(problem);
    const int64_t stage = pt.at("stage"), bm = pt.at("bm"), bn = pt.at("bn"), bk = pt.at("bk"), tm = pt.at("tm"),
                  tn = pt.at("tn"), vec = pt.at("vec"), bpb = pt.at("bpb");
    if (stage != kDirect && stage != kStaged && stage != kDouble && stage != kResident && stage != kPipelined &&
        stage != kBulk && stage != kRing) {
      return InvalidArgument("unknown stage");
    }
    const int64_t ahead = Ahead(pt);
    if (ahead < 1 || ahead > 3) return InvalidArgument("ahead is 1, 2 or 3");
    if (ahead != 1 && stage != kPipelined && stage != kBulk && stage != kRing) {
      return InvalidArgument("ahead is a knob of the pipelined, bulk and ring strategies");
    }
    if (ahead == 3 && stage != kBulk && stage != kRing) return InvalidArgument("ahead 3: the bulk and ring strategies only");
    if (stage == kBulk || stage == kRing) {
      // TMA bulk copies (cp.async.bulk) and mbarrier transaction counts are sm_90's.
      if (dev.arch < 90) return InvalidArgument("bulk copies (TMA) need sm_90 or newer");
      // The copies are whole tiles whatever vec says: one value of it, not several equal points.
      if (vec != 1) return InvalidArgument("bulk copies whole tiles: vec is 1");
      // Each operand's tile one contiguous run of memory (rows of the whole K one after another, or the whole
      // matrix), starting 16-byte aligned for every item, of whole 16-byte rows (so its size is a multiple of
      // 16 bytes and the fragments' vector reads of the unpadded tile are aligned).
      if (!SpanContiguous(p.a_kcont(), p.sam, p.sak, bm, p.m, p.k) ||
          !SpanContiguous(!p.b_ncont(), p.sbn, p.sbk, bn, p.n, p.k)) {
        return InvalidArgument("bulk: an operand's tile is not one contiguous run of memory");
      }
      // (The ring's span copies take the enclosing 16-byte pieces of runs that are not so: span 1, below.)
      const bool ring_span = stage == kRing && SpanOf(pt) != 0;
      if (!ring_span &&
          (!SpanAligned(p, p.a_kcont(), p.sab, p.m, p.a_align) || !SpanAligned(p, !p.b_ncont(), p.sbb, p.n, p.b_align))) {
        return InvalidArgument("bulk: an operand's tiles are not 16-byte aligned runs of 16-byte rows");
      }
    }
    const int64_t span = SpanOf(pt);
    if (span < 0 || span > 4) return InvalidArgument("span is 0 to 4");
    if (span) {
      if (stage == kRing && span != 1) return InvalidArgument("ring: span is 0 or 1 (fragments read at the span's offset)");
      if (stage != kPipelined && stage != kRing) return InvalidArgument("span is a knob of the pipelined and ring strategies");
      if (span >= 3 && dev.arch < 90) return InvalidArgument("span 3 and 4: bulk copies (TMA) need sm_90 or newer");
      if (span == 4) {
        if (ahead != 1) return InvalidArgument("span 4: the tiles are repacked over the landing buffer: ahead is 1");
        // Its launch bounds take the blocks an SM by shared memory: one value of minb, not several equal points.
        if (pt.at("minb") != 1) return InvalidArgument("span 4: minb is 1 (the launch bounds follow the shared memory)");
        const int64_t q = 16 / p.elem();
        const int64_t sa = SpanPieces(p, bm, p.a_kcont(), p.m) * q, sb = SpanPieces(p, bn, !p.b_ncont(), p.n) * q;
        const int64_t ta = PaddedTileElems(p, bm, p.a_kcont()), tb = PaddedTileElems(p, bn, !p.b_ncont());
        const int64_t region = CeilDiv(std::max(ta + tb, sa + sb), q) * q, loff = (region - sa - sb) / q * q;
        if (loff + sa < ta) return InvalidArgument("span 4: A's padded tile would overwrite B's landed span");
        // A thread holds its share of one operand's span in registers between the repack's loads and stores.
        const int64_t warps = Threads(bm, bn, tm, tn) / 32;
        auto staged = [&](int64_t r, bool kc, int64_t rlim) {
          const int64_t w = kc ? p.k : rlim, rows = kc ? r : p.k;
          return CeilDiv(rows, warps) * CeilDiv(w, 32);
        };
        if (warps < 1 || staged(bm, p.a_kcont(), p.m) > 64 || staged(bn, !p.b_ncont(), p.n) > 64) {
          return InvalidArgument("span 4: over 64 elements of a span a thread held in registers");
        }
      }
      // The copies are 16-byte pieces whatever vec says: one value of it, not several equal points.
      if (vec != 1) return InvalidArgument("span copies 16-byte pieces: vec is 1");
      if (!SpanContiguous(p.a_kcont(), p.sam, p.sak, bm, p.m, p.k) ||
          !SpanContiguous(!p.b_ncont(), p.sbn, p.sbk, bn, p.n, p.k)) {
        return InvalidArgument("span: an operand's tile is not one contiguous span");
      }
      // Both operands' rows 16-byte aligned: the padded tiles of 16-byte copies (vec) do it without the span.
      if (SpanAligned(p, p.a_kcont(), p.sab, p.m, p.a_align) && SpanAligned(p, !p.b_ncont(), p.sbb, p.n, p.b_align)) {
        return InvalidArgument("span: both operands' rows are 16-byte aligned (vector copies)");
      }
    }
    const int64_t block_shared = BlockShared(p, pt);
    const int64_t items = CeilDiv(p.m, bm) * CeilDiv(p.n, bn) * p.batch;  // pipelined: work items
    if (tm > bm || tn > bn) return InvalidArgument("thread tile larger than the block tile");
    if (tm * tn > kMaxAccumulators) return InvalidArgument("too many accumulators per thread");
    const int64_t threads = Threads(bm, bn, tm, tn);
    if (threads < 32 || threads % 32 != 0) return InvalidArgument("threads (bm/tm x bn/tn) not a multiple of 32");
    if (threads > std::min(1024, dev.max_threads_per_block)) return InvalidArgument("too many threads");
    // Tiles beyond the matrix's next power of two compute nothing but padding.
    if (bm > std::max<int64_t>(16, NextPow2(p.m))) return InvalidArgument("block tile taller than the output");
    if (bn > std::max<int64_t>(16, NextPow2(p.n))) return InvalidArgument("block tile wider than the output");
    if (bk > std::max<int64_t>(8, NextPow2(p.k))) return InvalidArgument("k slice deeper than K");
    // Lopsided tiles reuse each loaded value less for the same registers or shared memory: within a factor
    // of 4, unless the matrix caps the smaller side.
    if (std::max(tm, tn) > 4 * std::min(tm, tn)) return InvalidArgument("thread tile more than 4x longer than wide");
    const int64_t cap_m = std::max<int64_t>(16, NextPow2(p.m)), cap_n = std::max<int64_t>(16, NextPow2(p.n));
    if ((bm > 4 * bn && bn < cap_n) || (bn > 4 * bm && bm < cap_m)) {
      return InvalidArgument("block tile more than 4x longer than wide");
    }
    if (stage == kDouble && CeilDiv(p.k, bk) < 2) return InvalidArgument("double buffering needs two k slices");
    if (vec * p.elem() > 16) return InvalidArgument("vector wider than 16 bytes");
    if (vec > 1) {
      if (stage == kDirect) return InvalidArgument("direct reads are one element (vectors: staged slices)");
      // A: along k or m; B: along n or k. The vector's dim must have unit stride, be divided by the
      // vector (vectors lie wholly inside or outside) and by the slice, and every other stride must keep
      // vectors aligned.
      const bool ak = p.a_kcont(), bn_c = p.b_ncont();
      const int64_t a_unit = ak ? p.sak : p.sam, a_ext = ak ? p.k : p.m, a_other = ak ? p.sam : p.sak;
      const int64_t kslice = stage == kResident || stage == kPipelined ? p.k : bk;  // one slice of all K
      const int64_t a_tile = ak ? kslice : bm;
      const int64_t b_unit = bn_c ? p.sbn : p.sbk, b_ext = bn_c ? p.n : p.k, b_other = bn_c ? p.sbk : p.sbn;
      const int64_t b_tile = bn_c ? bn : kslice;
      if (a_unit != 1 || b_unit != 1) return InvalidArgument("an operand has no unit-stride dim: scalar reads");
      if (a_ext % vec != 0 || b_ext % vec != 0) return InvalidArgument("vector does not divide a contiguous dim");
      if (a_tile % vec != 0 || b_tile % vec != 0) return InvalidArgument("vector does not divide the slice");
      if (a_other % vec != 0 || b_other % vec != 0 || p.sab % vec != 0 || p.sbb % vec != 0) {
        return InvalidArgument("strides would misalign vectors");
      }
      if (p.a_align < vec * p.elem() || p.b_align < vec * p.elem()) return InvalidArgument("inputs not aligned for the vector");
    }
    if (stage == kResident) {
      // The whole K of both tiles in shared memory (up to the opt-in limit), staged in rounds of 32
      // elements a thread; at most 128 elements an operand a thread (the unrolled staging code).
      if (CeilDiv(ResidentElems(p, bm, p.a_kcont(), vec), threads) > 128 ||
          CeilDiv(ResidentElems(p, bn, !p.b_ncont(), vec), threads) > 128) {
        return InvalidArgument("too many elements staged per thread");
      }
      if (SharedBytes(stage, bm, bn, bk, p.k) > dev.max_shared_bytes_per_block) {
        return InvalidArgument("the whole-K tiles exceed the shared memory of a block");
      }
    } else if (stage == kPipelined) {
      // cp.async moves 4, 8 or 16 bytes (its own vector rules are the staged ones, above, over all K).
      if (!span && vec * p.elem() < 4) return InvalidArgument("cp.async moves 4 bytes or more: vector narrower");
      // The copy loop is unrolled: at most 64 copies an operand a thread.
      // (A row's vectors round up to a power of two: the kernel's Tile4::VPRP; a span's pieces: Span4.)
      const int64_t a_vecs = span ? SpanPieces(p, bm, p.a_kcont(), p.m)
                                  : (p.a_kcont() ? bm * NextPow2(p.k / vec) : p.k * (bm / vec));
      const int64_t b_vecs = span ? SpanPieces(p, bn, !p.b_ncont(), p.n)
                                  : (!p.b_ncont() ? bn * NextPow2(p.k / vec) : p.k * (bn / vec));
      if (CeilDiv(a_vecs, threads) > 64 || CeilDiv(b_vecs, threads) > 64) {
        return InvalidArgument("too many copies per thread");
      }
      if (block_shared > dev.max_shared_bytes_per_block) {
        return InvalidArgument("the pipeline's whole-K tile buffers exceed the shared memory of a block");
      }
      if (ahead == 2 && CeilDiv(items, PipelinedGrid(p, pt, dev)) < 3) {
        return InvalidArgument("two items in flight ahead need three items a block");
      }
    } else if (stage == kBulk) {
      if (block_shared > dev.max_shared_bytes_per_block) {
        return InvalidArgument("the bulk pipeline's whole-K tile buffers exceed the shared memory of a block");
      }
      if (ahead > 1 && CeilDiv(items, PipelinedGrid(p, pt, dev)) < ahead + 1) {
        return InvalidArgument("items in flight ahead need one more item a block");
      }
    } else if (stage == kRing) {
      if (block_shared > dev.max_shared_bytes_per_block) {
        return InvalidArgument("the ring's whole-K tile buffers exceed the shared memory of a block");
      }
      if (RingThreads(pt) > std::min(1024, dev.max_threads_per_block)) {
        return InvalidArgument("ring: too many threads (bpb groups and the producer warp)");
      }
      // One block an SM by design (__launch_bounds__(block, 1)): one value of minb, not several equal points.
      if (pt.at("minb") != 1) return InvalidArgument("ring: minb is 1");
      // Outputs leave from registers (no block-wide barrier to stage them through shared memory): a thread's
      // column groups stored whole.
      // Span copies serve odd rows, whose outputs cannot be stored but element by element anyway.
      if (!span && StoreWidth(p, std::min<int64_t>(tn, 4)) != std::min<int64_t>(tn, 4)) {
        return InvalidArgument("ring: outputs are stored from registers, whole column groups (N too odd)");
      }
      if (ahead > 1 && CeilDiv(items, RingGrid(p, pt, dev)) < bpb + ahead) {
        return InvalidArgument("ring: buffers beyond one more than a group's need more items a block");
      }
    } else if (stage != kDirect) {
      const int64_t a_per = CeilDiv(bm * bk / vec, threads) * vec, b_per = CeilDiv(bk * bn / vec, threads) * vec;
      if (a_per > kMaxFetchRegs || b_per > kMaxFetchRegs) return InvalidArgument("too many elements fetched per thread");
      if (bm * bk < vec * 1 || bk * bn < vec) return InvalidArgument("slice smaller than a vector");
      if (SharedBytes(stage, bm, bn, bk, p.k) > std::min<int64_t>(kMaxSharedBytes, dev.max_shared_bytes_per_block)) {
        return InvalidArgument("slices exceed the shared memory budget");
      }
    }
    const int64_t minb = pt.at("minb");
    if (minb != 1 && minb != 2 && minb != 4) return InvalidArgument("minb is 1, 2 or 4");
    if (minb == 4) {
      // Four blocks of 128 (cap 128 registers) or 256 threads (cap 64): the cap binds and does not starve 8x8 tiles.
      if (threads < 128 || threads > 256) return InvalidArgument("four blocks a SM cap registers only for 128 or 256 threads");
      if (4 * (block_shared + 1024) > dev.shared_bytes_per_sm) {
        return InvalidArgument("four blocks do not fit an SM");
      }
      if (threads == 256 && tm * tn > 16) return InvalidArgument("64 registers cannot hold the thread's accumulators");
    }
    if (minb == 2) {
      // Two blocks' threads and shared memory must fit an SM; a cap below 64 registers a thread would spill.
      if (2 * threads > 2048 || 2 * (block_shared + 1024) > dev.shared_bytes_per_sm) {
        return InvalidArgument("two blocks do not fit an SM");
      }
      if (threads < 256) return InvalidArgument("two blocks a SM cap registers only for 256 threads or more");
    }
    if (stage == kPipelined || stage == kBulk || stage == kRing) {
      if (bpb > items) return InvalidArgument("more work items per block than tiles of matrices");
    } else if (bpb > 1) {
      if (!p.batched || bpb > p.batch) return InvalidArgument("more matrices per block than the batch has");
      if (bm < p.m || bn < p.n) return InvalidArgument("several matrices per block only where one tile covers a matrix");
    }
    const int64_t blocks = stage == kPipelined || stage == kBulk || stage == kRing ? CeilDiv(items, bpb) : CeilDiv(p.m, bm) * CeilDiv(p.n, bn) * CeilDiv(p.batch, bpb);
    if (blocks > std::numeric_limits<int32_t>::max()) return InvalidArgument("grid too large");
    return Status::Ok();
  }

  Point ExpertDefault(const Problem& problem, const DeviceFacts& dev) const override {
    const auto& p = static_cast<const MatmulProblem&>(problem);
    // Streaming stores where the output outgrows L2 (50 MB on the H200): it is not read again here.
    const int64_t hint = p.batch * p.m * p.n * p.elem() > (int64_t{64} << 20);
    // Not yet measured on the H200: the classic SIMT choices. The largest of these tiles that still gives
    // two blocks per SM (outer products of 8x8 per thread reuse each loaded value 8 times), 16-deep
    // slices double-buffered, the widest vector the layouts allow; a tile per small matrix, several
    // matrices a block while blocks stay plentiful.
    struct Shape { int64_t bm, bn, tm, tn; };
    const Shape shapes[] = {{128, 128, 8, 8}, {128, 64, 8, 4}, {64, 128, 4, 8}, {64, 64, 4, 4},
                            {64, 32, 4, 2},   {32, 64, 2, 4},  {32, 32, 2, 2},  {16, 32, 1, 2},
                            {32, 16, 2, 1},   {16, 16, 1, 1}};
    std::vector<Point> tries;
    // Compute-bound products (issue 7's tall-skinny ones: more FLOPs per byte moved than the H200's
    // FP32-FMA peak per byte of DRAM bandwidth, ~67 TFLOP/s / 4.1 TB/s = 16): resident tiles of 8x8 a
    // thread (64 FMAs per four float4 fragment reads). A resident block loads, then multiplies with no
    // global access, then stores; the overlap of those phases comes only from the other blocks on the SM,
    // and the FMA pipes need enough warps: so the block tile is the one that keeps the most threads resident
    // an SM (the least of the shared-memory limit of its whole-K tiles, the 65536 registers at ~128 a
    // thread, 2048 threads), ties to the most blocks (finer interleaving of load and multiply phases), then
    // to the wider tile (longer output row segments). K = 64: 64x128 (4 blocks of 128 threads, 51 KB each)
    // over 128x128 (2 of 256) and 128x256 (1 of 512), all 512 threads; K = 128: 128x256 (one 196 KB block
    // of 512 threads) over 64x128 and 128x128 (256 threads). The k loop is unrolled for 8 trips (bk =
    // K/8 within 8..32). Measured on the H200 (codegen 2 search): these were the best points of both keys.
    const double flops = 2.0 * p.batch * p.m * p.n * p.k;
    const double bytes = static_cast<double>(p.elem()) * p.batch * (p.m * p.k + p.k * p.n + p.m * p.n);
    if (flops > 16.0 * bytes) {
      struct Big { int64_t bm, bn; };
      const Big bigs[] = {{128, 256}, {256, 128}, {64, 128}, {128, 64}, {128, 128}, {64, 64}};
      int64_t best_threads = 0, best_blocks = 0;
      Point best;
      const int64_t bk = std::clamp<int64_t>(NextPow2(std::max<int64_t>(1, p.k / 8)), 8, 32);
      for (const Big& t : bigs) {
        const int64_t threads = Threads(t.bm, t.bn, 8, 8);
        const int64_t smem = SharedBytes(kResident, t.bm, t.bn, bk, p.k) + 1024;
        const int64_t per_sm = std::min({dev.shared_bytes_per_sm / smem, int64_t{dev.registers_per_sm} / (threads * 128),
                                         2048 / threads, int64_t{32}});
        const int64_t grid = CeilDiv(p.m, t.bm) * CeilDiv(p.n, t.bn) * p.batch;
        if (per_sm < 1 || grid < per_sm * dev.sm_count) continue;
        for (int64_t vec : {8, 4, 2, 1}) {
          // The register cap that lets per_sm blocks in (128 a thread): launch bounds of 4 blocks for 128
          // threads, 2 for 256; 512 threads are capped at 128 by their size alone.
          const int64_t minb = threads == 128 && per_sm >= 4 ? 4 : threads == 256 && per_sm >= 2 ? 2 : 1;
          Point pt{{"stage", kResident}, {"bm", t.bm}, {"bn", t.bn}, {"bk", bk}, {"tm", 8}, {"tn", 8}, {"vec", vec},
                   {"bpb", 1}, {"hint", hint}, {"minb", minb}, {"ahead", 1}, {"span", 0}};
          if (!Check(problem, pt, dev).ok()) continue;
          const int64_t resident = per_sm * threads;
          if (resident > best_threads || (resident == best_threads && per_sm > best_blocks)) {
            best_threads = resident;
            best_blocks = per_sm;
            best = pt;
          }
          break;
        }
      }
      if (best_threads >= 256) return best;
    }
    // Batches of small matrices (codegen 4; NOT yet measured on the H200, the reasoning only): the pipelined
    // strategy, one tile a matrix. Such a batch is memory-bound (a 64^3 f32 product moves 48 KB for 0.5
    // MFLOP: 11 FLOP a byte, under the 16 of the H200's FMA peak per byte of DRAM), and the resident
    // strategy's blocks load, then multiply: DRAM idles during the multiply unless other blocks of the SM
    // happen to be loading (codegen 3's best point: 1.48x the floor at 4096 x 64^3, and slower than cuBLAS
    // at 63^3). The pipelined block copies the next matrix with cp.async while it multiplies this one, its
    // grid one wave of blocks (bpb 1: as many as the SMs hold by shared memory and threads) sharing the
    // batch evenly. 128 threads of 4x8 (codegen 3's best resident thread tile), the widest copies the
    // layout allows (4 bytes a element for odd sizes, still asynchronous), 16 k values an unrolled trip.
    if (p.batched && p.batch >= 4 * dev.sm_count && p.m <= 128 && p.n <= 128 && p.k >= 16) {
      const int64_t bm = std::max<int64_t>(16, NextPow2(p.m)), bn = std::max<int64_t>(16, NextPow2(p.n));
      struct Thread { int64_t tm, tn; };
      // Rows not 16-byte aligned (odd sizes) of contiguous matrices: span copies of 16-byte pieces repacked
      // into padded tiles (codegen 5; Check declines the span where both operands' rows are aligned, so such
      // keys keep codegen 4's point). Timed on the H200 outside the evaluator at 4095 x 63^3 f32 (one
      // launch a CUDA event pair): 81.8 us with 8x4 a thread, 83.3 with 4x8, 85.3 reading the landed spans
      // in place (span 1), against 94.2 for codegen 4's best point (4-byte copies) and 92.5 for cuBLAS's
      // strided batched SGEMM.
      // Hopper's bulk copies (stage 5: one thread copies an item's tiles with one cp.async.bulk an operand)
      // where each operand's tile is one contiguous 16-byte-aligned run: measured on the H200 (sixth
      // session, 300 of the 4224 stage-5 points of 4096 x 64^3 f32 screened, 200 at 2048 and 8192), this
      // point was the best or within 1.5% of it at all three sizes: 35.1 / 60.9 / 114.4 us against stage 4's
      // default at 40.6 / 68.4 / 128.2 (1.42 / 1.23 / 1.17x the memory floor). Half-matrix row tiles (bm 32,
      // B's whole matrix a tile), 8x4 a thread, 4 items a block, plain stores.
      // The ring (stage 6) where measured: float32 64x64 outputs, through the evaluator on the H200 (a2df7d8,
      // benchmarks/RESULTS.md): 4 groups of 8x8 a thread on whole matrices, 5 buffers, 33.6 / 58.5 / 108.4 us
      // at 2048 / 4096 / 8192 matrices against this stage-5 point's 34.6 / 60.8 / 114.4 in the same runs.
      if (p.dtype == DType::kFloat32 && p.m == 64 && p.n == 64) {
        Point pt{{"stage", kRing}, {"bm", 64}, {"bn", 64}, {"bk", 16}, {"tm", 8}, {"tn", 8}, {"vec", 1},
                 {"bpb", 4}, {"hint", 0}, {"minb", 1}, {"ahead", 1}, {"span", 0}};
        if (Check(problem, pt, dev).ok()) return pt;
      }
      {
        Point pt{{"stage", kBulk}, {"bm", std::min<int64_t>(bm, 32)}, {"bn", bn}, {"bk", 16}, {"tm", 8}, {"tn", 4},
                 {"vec", 1}, {"bpb", 4}, {"hint", 0}, {"minb", 1}, {"ahead", 1}, {"span", 0}};
        if (Check(problem, pt, dev).ok()) return pt;
      }
      // Plain stores even where the output outgrows L2: measured on the H200 (batches of 2559 to 8191 63^3 f32
      // matrices, codegen 5), of 49 pairs of span-2 points that differ only in the hint, streaming stores were
      // slower in 48, by 4-10% with this thread tile (8191 matrices: 158.6 vs 146.5 us).
      // Span 3 (sm_90: the pieces landed by bulk copies) where it is allowed: through the evaluator on the H200
      // (a9c9c81, 8x4 a thread, one ahead), 69.5 / 47.8 / 55.8 / 93.2 / 101.7 / 131.1 us at 4095 / 2559 / 3071 /
      // 5631 / 6143 / 8191 x 63^3 f32 against span 2's 77.0 / 52.5 / 61.0 / 102.5 / 111.3 / 144.6 in the same
      // run; at 4095, two ahead 72.2, 4x8 72.9, 4x4 80.7, 8x8 86.8. With codegen 7's repack (f6825e9): 68.2 /
      // 46.6 / 54.2 / 91.7 / 100.2 / 128.8 against span 2's 76.0 / 51.1 / 60.2 / 102.0 / 111.4 / 143.2.
      for (const Thread t : {Thread{8, 4}, Thread{4, 8}, Thread{4, 4}}) {
        for (const int64_t span : {3, 2}) {
          Point pt{{"stage", kPipelined}, {"bm", bm}, {"bn", bn}, {"bk", 16}, {"tm", t.tm}, {"tn", t.tn}, {"vec", 1},
                   {"bpb", 1}, {"hint", 0}, {"minb", 1}, {"ahead", 1}, {"span", span}};
          if (Check(problem, pt, dev).ok() &&
              2 * (PipelinedBytes(p, bm, bn, 1, span, Threads(bm, bn, t.tm, t.tn) * t.tn) + 1024) <= dev.shared_bytes_per_sm) {
            return pt;
          }
        }
      }
      for (const Thread t : {Thread{4, 8}, Thread{8, 4}, Thread{4, 4}, Thread{2, 4}, Thread{4, 2}, Thread{2, 2}}) {
        for (int64_t vec : {8, 4, 2, 1}) {
          Point pt{{"stage", kPipelined}, {"bm", bm}, {"bn", bn}, {"bk", 16}, {"tm", t.tm}, {"tn", t.tn}, {"vec", vec},
                   {"bpb", 1}, {"hint", hint}, {"minb", 1}, {"ahead", 1}, {"span", 0}};
          if (!Check(problem, pt, dev).ok()) continue;
          // Two blocks an SM at least (one's stores and pipeline fill beside the other's multiply).
          if (2 * (PipelinedBytes(p, bm, bn, 1) + 1024) > dev.shared_bytes_per_sm) break;
          return pt;
        }
      }
    }
    for (bool need_blocks : {true, false}) {
      for (const Shape& s : shapes) {
        const int64_t blocks = CeilDiv(p.m, s.bm) * CeilDiv(p.n, s.bn) * p.batch;
        if (need_blocks && blocks < 2 * dev.sm_count) continue;
        int64_t bpb = 1;
        // Matrices of little work (up to 32^3 multiply-adds) several a block, while blocks stay plentiful;
        // so too matrices a resident block fetches in one round (the next matrix's tiles in flight while
        // this one is multiplied and stored: codegen 3's prefetch).
        // (64x64 tiles of 4x4, 256 threads: 117 registers with the prefetch and float4 reads, 116 with
        // scalar reads, no spills under minb=2's cap; 61 and 96 without it.)
        const int64_t threads_s = Threads(s.bm, s.bn, s.tm, s.tn);
        const bool one_round = CeilDiv(ResidentElems(p, s.bm, p.a_kcont(), 1), threads_s) <= 32 &&
                               CeilDiv(ResidentElems(p, s.bn, !p.b_ncont(), 1), threads_s) <= 32;
        if (p.batched && s.bm >= p.m && s.bn >= p.n && (p.m * p.n * p.k <= 32 * 32 * 32 || one_round)) {
          while (bpb < 8 && CeilDiv(p.batch, bpb * 2) >= 8 * dev.sm_count) bpb *= 2;
        }
        // Resident first where two blocks of its whole-K tiles fit an SM (one block loads while the other
        // multiplies): K outer products from shared memory with no barrier between them, the register cap of
        // two 256-thread blocks (128) holding 8x8 accumulators and two fragment buffers without spills.
        const int64_t resident_bytes = SharedBytes(kResident, s.bm, s.bn, 8, p.k);
        if (2 * (resident_bytes + 1024) <= dev.shared_bytes_per_sm) {
          const int64_t threads = Threads(s.bm, s.bn, s.tm, s.tn);
          for (int64_t bk : {32, 16, 8}) {
            for (int64_t vec : {8, 4, 2, 1}) {
              tries.push_back(Point{{"stage", kResident}, {"bm", s.bm}, {"bn", s.bn}, {"bk", bk}, {"tm", s.tm},
                                    {"tn", s.tn}, {"vec", vec}, {"bpb", bpb}, {"hint", hint},
                                    {"minb", threads >= 256 ? 2 : 1}, {"ahead", 1}, {"span", 0}});
            }
          }
        }
        for (int64_t bk : {16, 8, 32}) {
          for (int64_t stage : {kDouble, kStaged}) {
            for (int64_t vec : {8, 4, 2, 1}) {
              tries.push_back(Point{{"stage", stage}, {"bm", s.bm}, {"bn", s.bn}, {"bk", bk}, {"tm", s.tm},
                                    {"tn", s.tn}, {"vec", vec}, {"bpb", bpb}, {"hint", hint}, {"minb", 1}, {"ahead", 1},
                                    {"span", 0}});
            }
          }
        }
      }
    }
    tries.push_back(Point{{"stage", kDirect}, {"bm", 16}, {"bn", 16}, {"bk", 8}, {"tm", 1},
                          {"tn", 2}, {"vec", 1}, {"bpb", 1}, {"hint", hint}, {"minb", 1}, {"ahead", 1}, {"span", 0}});
    for (const Point& t : tries) {
      if (Check(problem, t, dev).ok()) return t;
    }
    return tries.back();
  }

  // Span 4 from span 3's text (kSpanInPlace): false if an anchor is missing.
  static bool SwapInPlace(std::string& body) {
    const std::pair<const char*, const char*> swaps[] = {
        {"// One item of span 2 or 3 whose spans landed in cur", nullptr},  // kSpanInPlace goes before it
        {"  repack4<TA4, A_KCONT, BM, M_>(cur + SA4::offset(sa), m0, tiles);\n"
         "  repack4<TB4, !B_NCONT, BN, N_>(cur + SA4::ELEMS + SB4::offset(sb), n0, tiles + TA4::ELEMS);\n"
         "  // The tiles are whole, and every thread is done reading this landing buffer: it takes item + AHEAD's.\n"
         "  __syncthreads();\n  refill();\n",
         "  {  // span 4: A's span into registers, a barrier, A's tile over it; then B's\n"
         "    Staged4<TA4, A_KCONT, BM, M_> r;\n    r.load(cur + SA4::offset(sa), m0);\n    __syncthreads();\n"
         "    r.store(tiles);\n  }\n  {\n    Staged4<TB4, !B_NCONT, BN, N_> r;\n"
         "    r.load(cur + SA4::ELEMS + SB4::offset(sb), n0);\n    __syncthreads();\n"
         "    r.store(tiles + TA4::ELEMS);\n  }\n  __syncthreads();  // the tiles are whole\n"},
        {"  if (WSTORE4) store_warp3(c + bt * (M_ * N_), m0, n0, scratch, ty, tx, acc);\n",
         "  // Span 4: every thread done with the tiles (its accesses of the region ordered before the async\n"
         "  // proxy's writes), the region takes item + AHEAD's spans during the stores.\n"
         "  kjit_fence_async();\n  __syncthreads();\n  refill();\n"
         "  if (WSTORE4) store_warp3(c + bt * (M_ * N_), m0, n0, scratch, ty, tx, acc);\n"},
        {"  raw_t* tiles = smem4;          // BUF4: the current item's tiles, padded\n"
         "  raw_t* land = smem4 + BUF4;    // AHEAD landing buffers of SBUF4, SR4 * THREADS * TN floats of output scratch, then\n"
         "                                 // AHEAD mbarriers\n"
         "  float* scratch = reinterpret_cast<float*>(land + AHEAD * SBUF4);\n",
         "  raw_t* tiles = smem4;          // span 4: LBUF4, the current item's tiles, padded, over its landing buffer\n"
         "  raw_t* land = smem4 + LOFF4;   // the landing buffer; after LBUF4, SR4 * THREADS * TN floats of output\n"
         "                                 // scratch, then the mbarrier\n"
         "  float* scratch = reinterpret_cast<float*>(smem4 + LBUF4);\n"},
    };
    for (const auto& [from, to] : swaps) {
      const size_t at = body.find(from);
      if (at == std::string::npos || body.find(from, at + 1) != std::string::npos) return false;
      if (to) body.replace(at, std::string_view(from).size(), to);
      else body.insert(at, kSpanInPlace);
    }
    return true;
  }

  Result<Candidate> Generate(const Problem& problem, const Point& pt, const DeviceFacts& dev) const override {
    KJIT_RETURN_IF_ERROR(Check(problem, pt, dev));
    const auto& p = static_cast<const MatmulProblem&>(problem);
    const int64_t stage = pt.at("stage"), bm = pt.at("bm"), bn = pt.at("bn"), bk = pt.at("bk"), tm = pt.at("tm"),
                  tn = pt.at("tn"), vec = pt.at("vec"), bpb = pt.at("bpb"), hint = pt.at("hint");
    const int64_t threads = Threads(bm, bn, tm, tn);
    // Span 4's blocks are small enough for more of them an SM than the registers of unbounded threads allow:
    // its launch bounds ask for as many as its grid assumes.
    const int64_t minb = stage == kPipelined && SpanOf(pt) == 4 ? BlocksPerSm(p, pt, dev, threads) : pt.at("minb");
    std::ostringstream src;
    src << codegen::SourceHead(*this, p, pt, "FP32 fused multiply-adds only (no TF32), ascending k from +0, rounded once.");
    src << "typedef " << CudaType(p.dtype) << " in_t;\ntypedef in_t out_t;\n";
    src << "#define VEC " << vec << "\n#define HINT " << hint << "\n#define STAGE " << stage << "\n";
    // Pipelined: the block's work items are blockIdx.x + j * GRID.
    const int64_t grid = stage == kRing ? RingGrid(p, pt, dev)
                         : stage == kPipelined || stage == kBulk ? PipelinedGrid(p, pt, dev)
                                             : CeilDiv(p.m, bm) * CeilDiv(p.n, bn) * CeilDiv(p.batch, bpb);
    src << "constexpr long long M_ = " << p.m << ", N_ = " << p.n << ", K_ = " << p.k << ", BATCH = " << p.batch << ";\n";
    src << "constexpr long long SAB = " << p.sab << ", SAM = " << p.sam << ", SAK = " << p.sak << ", SBB = " << p.sbb
        << ", SBK = " << p.sbk << ", SBN = " << p.sbn << ";\n";
    src << "constexpr int BM = " << bm << ", BN = " << bn << ", BK = " << bk << ", TM = " << tm << ", TN = " << tn
        << ", BPB = " << bpb << ", MINB = " << minb << ", THREADS = " << threads << ", SW = "
        << StoreWidth(p, stage == kResident || stage == kPipelined || stage == kBulk || stage == kRing ? std::min<int64_t>(tn, 4) : tn) << ", AHEAD = " << Ahead(pt)
        << ";\nconstexpr long long GRID = " << grid << ";\n";
    src << "constexpr bool A_KCONT = " << (p.a_kcont() ? "true" : "false")
        << ", B_NCONT = " << (p.b_ncont() ? "true" : "false") << ";\n";
    src << codegen::kElementAccess << codegen::kRawAccess;
    std::string body = kBody;
    const std::string unroll = "#pragma unroll " + std::to_string(bk);
    body.replace(body.find("KUNROLL"), 7, unroll);
    // Resident: the k loop takes two k values an iteration.
    body.replace(body.find("K3UNROLL"), 8, "#pragma unroll " + std::to_string(std::max<int64_t>(1, bk / 2)));
    // Pipelined: four k values an iteration.
    const std::string k4unroll = "#pragma unroll " + std::to_string(std::max<int64_t>(1, bk / 4));
    body.replace(body.find("K4UNROLL"), 8, k4unroll);
    if (SpanOf(pt) != 0 && stage == kPipelined) {
      // Span copies: Span4 for Tile4, the issue taking the view's start, the tiles read at their offsets.
      auto swap = [&body](const std::string& from, const std::string& to) {
        const size_t at = body.find(from);
        if (at != std::string::npos) body.replace(at, from.size(), to);
        return at != std::string::npos;
      };
      std::ostringstream tiles;
      const int64_t ext_a = (p.batch - 1) * p.sab + (p.m - 1) * p.sam + (p.k - 1) * p.sak + 1;
      const int64_t ext_b = (p.batch - 1) * p.sbb + (p.k - 1) * p.sbk + (p.n - 1) * p.sbn + 1;
      tiles << "constexpr long long EXT_A = " << ext_a << ", EXT_B = " << ext_b << ";  // elements of the views\n"
            << "constexpr bool ALIGNED_A = " << (SpanAligned(p, p.a_kcont(), p.sab, p.m, p.a_align) ? "true" : "false")
            << ", ALIGNED_B = " << (SpanAligned(p, !p.b_ncont(), p.sbb, p.n, p.b_align) ? "true" : "false") << ";\n"
            << kSpanTiles;
      // Outputs leave through a warp's rows (WSTORE4) rather than the whole matrix's contiguous span (FLAT4):
      // on the H200, 4095 x 63^3 f32 with span copies took 82 us so and 87 us through FLAT4's two barriers.
      bool swapped =
          swap("constexpr bool FLAT4 = TILES4 == 1 && SW == 1 && M_ * N_ * 4 <= (long long)BUF4 * sizeof(raw_t);",
               "constexpr bool FLAT4 = false;  // span copies: WSTORE4");
      if (SpanOf(pt) == 1) {
        // Span4 for Tile4: the tiles read where they landed, at their offsets; the issue takes the views.
        swapped = swapped &&
                  swap("typedef Tile4<A_KCONT, BM, M_, SAM, SAK> TA4;\ntypedef Tile4<!B_NCONT, BN, N_, SBN, SBK> TB4;\n",
                       tiles.str() + "typedef Span4<A_KCONT, BM, M_, EXT_A, ALIGNED_A> TA4;\n"
                                     "typedef Span4<!B_NCONT, BN, N_, EXT_B, ALIGNED_B> TB4;\n") &&
                  swap("  TA4::issue(a + bt * SAB, tile / TILES_N * BM, S);\n"
                       "  TB4::issue(b + bt * SBB, tile % TILES_N * BN, S + TA4::ELEMS);",
                       "  TA4::issue(a, a + bt * SAB, tile / TILES_N * BM, S);\n"
                       "  TB4::issue(b, b + bt * SBB, tile % TILES_N * BN, S + TA4::ELEMS);") &&
                  swap("    const raw_t* As = cur;\n    const raw_t* Bs = cur + TA4::ELEMS;",
                       "    const long long sbt = item / TILES4, stile = item % TILES4;\n"
                       "    const in_t* sa = a + sbt * SAB + TA4::first(stile / TILES_N * BM);\n"
                       "    const in_t* sb = b + sbt * SBB + TB4::first(stile % TILES_N * BN);\n"
                       "    const raw_t* As = cur + TA4::offset(sa);\n"
                       "    const raw_t* Bs = cur + TA4::ELEMS + TB4::offset(sb);");
      } else {
        // Span 2: pipelined4s (after pipelined4, whose helpers it uses) in its place. Span 3: pipelined4b
        // instead (the same helpers), with the bulk copies and the ring's span issue.
        const std::string end4 = "    else store_tile3(c + bt * (M_ * N_), m0, n0, ty, tx, acc);\n  }\n}\n";
        std::string spans = tiles.str() + kSpanRepack;
        if (SpanOf(pt) >= 3) {
          spans += std::string(codegen::kBulkCopy) + kSpanBulkHead + kRingSpan + kRingSpanIssue + kSpanBulk;
        } else {
          spans += kSpanAsync;
        }
        // Its output store: kSpanStore in place of store_warp3 (the whole function, which ends at the first
        // closing brace at the start of a line).
        const std::string store_head = "__device__ __forceinline__ void store_warp3(";
        const size_t store_at = body.find(store_head), store_end = body.find("\n}\n", store_at);
        swapped = swapped && store_at != std::string::npos && store_end != std::string::npos &&
                  body.substr(store_at, store_end - store_at).find("// read before the next row is written") !=
                      std::string::npos;
        if (swapped) body.replace(store_at, store_end + 3 - store_at, kSpanStore);
        swapped = swapped && swap(end4 + "#endif\n", end4 + spans + "#endif\n") &&
                  swap("K4UNROLL", k4unroll) &&
                  swap("  pipelined4(a, b, c, reinterpret_cast<raw_t*>(smem));",
                       SpanOf(pt) >= 3 ? "  pipelined4b(a, b, c, reinterpret_cast<raw_t*>(smem));"
                                       : "  pipelined4s(a, b, c, reinterpret_cast<raw_t*>(smem));");
        if (SpanOf(pt) == 4) swapped = swapped && SwapInPlace(body);
      }
      if (!swapped) return Internal("matmul: the span copies' anchors are missing from the kernel body");
    }
    if (stage == kBulk || stage == kRing) {
      // Bulk: kBulkHead, kBulkCopy and kBulkTail before the kernel, which calls it (only this stage's sources
      // change). Ring: the same helpers with their guard widened (in this stage's sources only), kRingTail, and
      // the block's launch bounds (the groups and the producer warp, one block an SM).
      const bool ring = stage == kRing;
      std::string bulk = std::string(kBulkHead) + codegen::kBulkCopy + kBulkTail;
      if (ring) {
        const std::string guard5 = "#if STAGE == 5\n";
        for (size_t at = bulk.find(guard5); at != std::string::npos; at = bulk.find(guard5, at + 1)) {
          bulk.replace(at, guard5.size(), "#if STAGE >= 5\n");
        }
        bulk += kRingTail;
        bulk.replace(bulk.find("K6UNROLL"), 8, k4unroll);
        if (SpanOf(pt) == 1) {
          // Span copies: Span6 for Tile5, its issue5, the tiles read at their offsets.
          auto swap = [&bulk](const std::string& from, const std::string& to) {
            const size_t at = bulk.find(from);
            if (at != std::string::npos) bulk.replace(at, from.size(), to);
            return at != std::string::npos;
          };
          const int64_t ext_a = (p.batch - 1) * p.sab + (p.m - 1) * p.sam + (p.k - 1) * p.sak + 1;
          const int64_t ext_b = (p.batch - 1) * p.sbb + (p.k - 1) * p.sbk + (p.n - 1) * p.sbn + 1;
          std::ostringstream tiles;
          tiles << "constexpr long long EXT_A = " << ext_a << ", EXT_B = " << ext_b << ";  // elements of the views\n"
                << kRingSpan;
          const std::string issue_from = "// The item's two bulk copies into buffer S, counted by BAR (the calling thread only).\n";
          const std::string issue_to = "// As chunk4, from the unpadded tiles.\n";
          const size_t i0 = bulk.find(issue_from), i1 = bulk.find(issue_to);
          bool swapped = i0 != std::string::npos && i1 != std::string::npos && i1 > i0;
          if (swapped) bulk.replace(i0 + issue_from.size(), i1 - i0 - issue_from.size(), kRingSpanIssue);
          swapped = swapped &&
                    swap("typedef Tile5<A_KCONT, BM, M_> TA5;\ntypedef Tile5<!B_NCONT, BN, N_> TB5;\n", tiles.str()) &&
                    swap("    const raw_t* As = bufs + s * BUF5;\n    const raw_t* Bs = As + TA5::ELEMS;\n",
                         "    const long long sitem = (long long)blockIdx.x + j * GRID, sbt = sitem / TILES5, stile = sitem % TILES5;\n"
                         "    const raw_t* As = bufs + s * BUF5 + TA5::offset(a + sbt * SAB + TA5::first(stile / TILES_N * BM));\n"
                         "    const raw_t* Bs = bufs + s * BUF5 + TA5::ELEMS + TB5::offset(b + sbt * SBB + TB5::first(stile % TILES_N * BN));\n");
          if (!swapped) return Internal("matmul: the ring's span anchors are missing from its sources");
        }
      }
      bulk.replace(bulk.find("K5UNROLL"), 8, k4unroll);
      const std::string entry = "extern \"C\" __global__ void __launch_bounds__(THREADS, MINB) kjit_matmul(";
      const std::string call4 = "  pipelined4(a, b, c, reinterpret_cast<raw_t*>(smem));\n";
      const size_t at_entry = body.find(entry), at_call = body.find(call4);
      if (at_entry == std::string::npos || at_call == std::string::npos) {
        return Internal("matmul: the bulk and ring strategies' anchors are missing from the kernel body");
      }
      body.insert(at_call + call4.size(), ring ? "#elif STAGE == 6\n  ring6(a, b, c, smem);\n"
                                               : "#elif STAGE == 5\n  bulk5(a, b, c, smem);\n");
      if (ring) body.replace(at_entry, entry.size(), "extern \"C\" __global__ void __launch_bounds__(BLOCK6, 1) kjit_matmul(");
      body.insert(at_entry, bulk + "\n");
    }
    src << body;
    Candidate c;
    c.source = src.str();
    c.entry_point = "kjit_matmul";
    c.launch.block[0] = static_cast<uint32_t>(stage == kRing ? RingThreads(pt) : threads);
    c.launch.grid[0] = static_cast<uint32_t>(grid);
    c.launch.dynamic_shared_bytes = static_cast<uint32_t>(BlockShared(p, pt));
    codegen::FinishCandidate(*this, pt, c);
    return c;
  }
};

}  // namespace

const Family* MatmulFamily() {
  static const Matmul family;
  return &family;
}

}  // namespace kjit::policy
