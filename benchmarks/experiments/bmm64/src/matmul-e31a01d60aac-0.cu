// matmul f32 bmm 4096x(64x64 @ 64x64) A B tf32-off (expert default)
// key aten::bmm(f32[4096,64,64], f32[4096,64,64]) sm_90
// point ahead=1 bk=16 bm=32 bn=64 bpb=4 hint=0 minb=1 span=0 stage=5 tm=8 tn=4 vec=1
// launch: entry kjit_matmul grid 528,1,1 block 64,1,1 shared 49168 workspace 0
// nvrtc options: --std=c++17 --diag-suppress=177
// kjit matmul family, codegen 5: matmul f32 bmm 4096x(64x64 @ 64x64) A B tf32-off
// point ahead=1 bk=16 bm=32 bn=64 bpb=4 hint=0 minb=1 span=0 stage=5 tm=8 tn=4 vec=1
// FP32 fused multiply-adds only (no TF32), ascending k from +0, rounded once.

#include <cuda_fp16.h>
#include <cuda_bf16.h>
// (Cluster intrinsics are built in for sm_90: no <cooperative_groups.h>, which costs 1.5 s to compile.)
// NVRTC has no <cmath>: the special values by their bits.
#define KJIT_INF __int_as_float(0x7f800000)
#define KJIT_NAN __int_as_float(0x7fc00000)
typedef float in_t;
typedef in_t out_t;
#define VEC 1
#define HINT 0
#define STAGE 5
constexpr long long M_ = 64, N_ = 64, K_ = 64, BATCH = 4096;
constexpr long long SAB = 4096, SAM = 64, SAK = 1, SBB = 4096, SBK = 64, SBN = 1;
constexpr int BM = 32, BN = 64, BK = 16, TM = 8, TN = 4, BPB = 4, MINB = 1, THREADS = 64, SW = 4, AHEAD = 1;
constexpr long long GRID = 528;
constexpr bool A_KCONT = true, B_NCONT = true;

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
    #pragma unroll 4
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

#if STAGE == 5
constexpr int Q5 = (int)(16 / sizeof(raw_t));  // elements of 16 bytes
constexpr long long TILES5 = TILES_M * TILES_N, ITEMS5 = BATCH * TILES5;
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
// One operand's tile in shared memory as in global memory: element (r, k) at S[r * LD + k] (KC) or
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
    #pragma unroll 4
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

extern "C" __global__ void __launch_bounds__(THREADS, MINB) kjit_matmul(const in_t* __restrict__ a,
                                                                  const in_t* __restrict__ b,
                                                                  out_t* __restrict__ c) {
#if STAGE > 0
  extern __shared__ __align__(16) unsigned char smem[];
#endif
#if STAGE == 4
  pipelined4(a, b, c, reinterpret_cast<raw_t*>(smem));
#elif STAGE == 5
  bulk5(a, b, c, smem);
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
    #pragma unroll 16
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
      #pragma unroll 8
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
