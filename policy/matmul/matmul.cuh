// The CUDA of the matmul family's kernels, in sections that matmul.cc embeds (kjit_embed_cuda, at
// build time) and writes after policy/src/cuda/common.cuh's pieces, with the problem's sizes and the
// design point's knobs defined ahead of them as macros and constants. Each section is embedded byte for
// byte (a blank line after a marker is part of it); lines starting "//@" document it and are not embedded.
// Every point's source is the same sections in the same order (kBody, kSpanRepack, codegen::kBulkCopy,
// kBulkBody, kEntry): the knobs select a strategy's and a span variant's parts with #if. STAGE: 0 direct,
// 1 staged, 2 double-buffered, 3 resident, 4 pipelined, 5 bulk, 6 ring (matmul.cc's Stage). SPAN: 0, or
// the pipelined stage's span copies 1 to 4, or the ring's 1 (so SPAN >= 2 is the pipelined stage's).
// NVRTC's PTX holds every namespace-scope constant (and every static constant member of an instantiated
// template) as a global, in the order of the source: a variant's constants stay in the order its sources had
// before the variants were selected by #if (when Generate replaced text), which is why some are declared in
// two places, one for some variants and one for the others.
//@section kBody

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
#if SPAN >= 2
//@ Span 2 to 4's output store (the pipelined stage's; stage 3's store_warp3, below, is another stage's): no
//@ barrier (the warps' scratch is their own, codegen 6), and SR4 of a thread's rows a round through a scratch
//@ SR4 times as large (codegen 8), so a round's shared loads and global stores overlap and a warp syncs TM / SR4
//@ times, not TM: at 4095 x 63^3 f32 (span 3) 66.8 against 67.7 us, four rows a round 67.9 (H200,
//@ benchmarks/experiments/bmm63 variants k and j).
constexpr int SR4 = TM % 2 == 0 ? 2 : 1;  // a thread's rows a store round
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
#else
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
#endif  // SPAN >= 2
#endif  // STAGE >= 3
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
#if SPAN != 1
// The tiles as cp.async lands them (span 0), or as spans 2 to 4 repack them from their span copies' buffers.
typedef Tile4<A_KCONT, BM, M_, SAM, SAK> TA4;
typedef Tile4<!B_NCONT, BN, N_, SBN, SBK> TB4;
constexpr int BUF4 = TA4::ELEMS + TB4::ELEMS;  // raw elements a buffer: A's tile, then B's
constexpr int NBUF4 = AHEAD + 1;
// Outputs of one tile a matrix with N odd leave through the current buffer as one contiguous span (as
// FLAT3); tiled outputs with narrower stores than CV through a warp's part of it (as WSTORE3). With span
// copies, always through a warp's rows: on the H200, 4095 x 63^3 f32 with span copies took 82 us so and 87 us
// through FLAT4's two barriers.
#if SPAN == 0
constexpr bool FLAT4 = TILES4 == 1 && SW == 1 && M_ * N_ * 4 <= (long long)BUF4 * sizeof(raw_t);
#else
constexpr bool FLAT4 = false;  // span copies: WSTORE4
#endif
constexpr bool WSTORE4 = !FLAT4 && SW < CV && (long long)THREADS * TN * 4 <= (long long)BUF4 * sizeof(raw_t);
#endif  // SPAN != 1
#if SPAN != 0
//@ Codegen 5's span copies (knob span = 1 to 4) for the pipelined strategy: an operand whose tile is one
//@ contiguous span of memory (a batch item of a contiguous 63x63 matrix is 3969 floats in a row) is copied as
//@ the 16-byte pieces that enclose the span, from the aligned address at or below its start. Span 1 reads the
//@ tile at the span's offset in the first piece (Span4 in place of Tile4 as TA4 and TB4); spans 2 to 4 repack
//@ it into Tile4's layout (kSpanRepack). With rows of an odd number of floats, Tile4 could copy only 4 bytes
//@ a cp.async (a copy an element, and the registers of their addresses); here every copy is 16 bytes but those
//@ of pieces reaching outside the view (the first and last items' ends), which are copied element by element
//@ with plain loads (a piece is never read past the view: the kernel does not know the allocation around it).
//@ Fragment reads are scalar unless the offset is 0 for every item and rows are 16-byte aligned (ALIGNED: then
//@ as Tile4's, without its padding).
constexpr long long EXT_A = A_VIEW, EXT_B = B_VIEW;  // elements of the views
constexpr bool ALIGNED_A = A_ALIGNED, ALIGNED_B = B_ALIGNED;
constexpr int K4R = (int)((K_ + 3) / 4 * 4);  // k a fragment read of 4 reaches
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
#endif  // SPAN != 0
#if SPAN == 1
// Span 1: the tiles read where they landed, in the span copies' buffers (Span4); the same buffer and output
// constants as above, after the span copies' (the PTX's order of its globals).
typedef Span4<A_KCONT, BM, M_, EXT_A, ALIGNED_A> TA4;
typedef Span4<!B_NCONT, BN, N_, EXT_B, ALIGNED_B> TB4;
constexpr int BUF4 = TA4::ELEMS + TB4::ELEMS;  // raw elements a buffer: A's tile, then B's
constexpr int NBUF4 = AHEAD + 1;
constexpr bool FLAT4 = false;  // span copies: WSTORE4
constexpr bool WSTORE4 = !FLAT4 && SW < CV && (long long)THREADS * TN * 4 <= (long long)BUF4 * sizeof(raw_t);
#endif  // SPAN == 1
// The item's tiles into buffer S (this thread's share; no commit).
__device__ __forceinline__ void issue4(const in_t* a, const in_t* b, long long item, raw_t* S) {
  const long long bt = item / TILES4, tile = item % TILES4;
#if SPAN == 1  // the span copies take the view, whose ends they read up to and no further
  TA4::issue(a, a + bt * SAB, tile / TILES_N * BM, S);
  TB4::issue(b, b + bt * SBB, tile % TILES_N * BN, S + TA4::ELEMS);
#else
  TA4::issue(a + bt * SAB, tile / TILES_N * BM, S);
  TB4::issue(b + bt * SBB, tile % TILES_N * BN, S + TA4::ELEMS);
#endif
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
#if SPAN == 1  // the tiles read where they landed, at their spans' offsets
    const long long sbt = item / TILES4, stile = item % TILES4;
    const in_t* sa = a + sbt * SAB + TA4::first(stile / TILES_N * BM);
    const in_t* sb = b + sbt * SBB + TB4::first(stile % TILES_N * BN);
    const raw_t* As = cur + TA4::offset(sa);
    const raw_t* Bs = cur + TA4::ELEMS + TB4::offset(sb);
#else
    const raw_t* As = cur;
    const raw_t* Bs = cur + TA4::ELEMS;
#endif
    #pragma unroll kUnrollQuarter
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
#endif  // STAGE == 4
//@section kSpanRepack
//@ Span 2 to 4 (the pipelined stage's): the span copies land in AHEAD buffers, and each item's tiles are
//@ repacked from there into one buffer of kBody's padded Tile4 layout (rows 16-byte aligned, float4 fragment
//@ reads without bank conflicts, the multiply and stores of span 0), which also serves the output stores as
//@ scratch. A barrier more an item; in exchange a thread reads (TM + TN) / 4 vectors a k instead of TM + TN
//@ scalars (span 1). The warps' output scratch (WSTORE4) is their own, past the landing buffers (codegen 6;
//@ before, the padded tiles, which cost a barrier an item before the stores: other warps may still be
//@ multiplying from them). This section holds what spans 2 to 4 share (the landing buffers' layout, the
//@ repack, an item's work) and span 2's cp.async walk; kBulkBody holds span 3 and 4's (TMA bulk copies). It ends
//@ by opening the bulk copies' #if, which codegen::kBulkCopy and kBulkBody, after it, are inside of.
#if SPAN >= 2
typedef Span4<A_KCONT, BM, M_, EXT_A, ALIGNED_A> SA4;
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
#if SPAN == 4
//@ Span 4 (sm_90 and newer, ahead 1): span 3 with the landing buffer and the padded tiles in one region, so
//@ a block needs about half the shared memory (the odd bmm f32 63^3: 38.6 KB against 70.7, five blocks an SM
//@ against three). The spans land at the region's end; the repack goes through registers, A's span into A's tile
//@ (which ends before B's span begins: Check), a block barrier between its loads and its stores, then B's. The
//@ next item's copies into the region wait for the end of the multiply: a block no longer overlaps its own
//@ copies with its multiply, the other blocks of its SM do: Staged4, the repack and the refill in item4s,
//@ pipelined4b's layout (benchmarks/experiments/bmm63 variant g).
// A thread's share of one operand's span (rows to warps, columns to lanes, as repack4), held in registers
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
__device__ __forceinline__ void kjit_fence_async();  // (codegen::kBulkCopy's, after this section)
#endif  // SPAN == 4
// One item of span 2, 3 or 4 whose spans landed in cur (every thread done with the padded tiles): its tiles
// repacked into them, REFILL (the caller's issue of item + AHEAD into cur, once no thread reads cur), the
// multiply and the stores (through the warps' own scratch).
template <typename Refill>
__device__ __forceinline__ void item4s(const in_t* a, const in_t* b, out_t* c, long long item, const raw_t* cur,
                                       raw_t* tiles, float* scratch, int ty, int tx, Refill refill) {
  const long long bt = item / TILES4, tile = item % TILES4;
  const long long m0 = tile / TILES_N * BM, n0 = tile % TILES_N * BN;
  const in_t* sa = a + bt * SAB + SA4::first(m0);
  const in_t* sb = b + bt * SBB + SB4::first(n0);
#if SPAN == 4
  {  // span 4: A's span into registers, a barrier, A's tile over it; then B's
    Staged4<TA4, A_KCONT, BM, M_> r;
    r.load(cur + SA4::offset(sa), m0);
    __syncthreads();
    r.store(tiles);
  }
  {
    Staged4<TB4, !B_NCONT, BN, N_> r;
    r.load(cur + SA4::ELEMS + SB4::offset(sb), n0);
    __syncthreads();
    r.store(tiles + TA4::ELEMS);
  }
  __syncthreads();  // the tiles are whole
#else
  repack4<TA4, A_KCONT, BM, M_>(cur + SA4::offset(sa), m0, tiles);
  repack4<TB4, !B_NCONT, BN, N_>(cur + SA4::ELEMS + SB4::offset(sb), n0, tiles + TA4::ELEMS);
  // The tiles are whole, and every thread is done reading this landing buffer: it takes item + AHEAD's.
  __syncthreads();
  refill();
#endif
  float acc[TM][TN];
#pragma unroll
  for (int i = 0; i < TM; ++i)
#pragma unroll
    for (int q = 0; q < TN; ++q) acc[i][q] = 0.f;
  const raw_t* As = tiles;
  const raw_t* Bs = tiles + TA4::ELEMS;
  #pragma unroll kUnrollQuarter
  for (int k = 0; k + 4 <= (int)K_; k += 4) chunk4<4>(As, Bs, k, ty, tx, acc);
  if (K_ % 4 != 0) chunk4<(int)(K_ % 4 == 0 ? 4 : K_ % 4)>(As, Bs, (int)(K_ / 4 * 4), ty, tx, acc);
#if SPAN == 4
  // Span 4: every thread done with the tiles (its accesses of the region ordered before the async
  // proxy's writes), the region takes item + AHEAD's spans during the stores.
  kjit_fence_async();
  __syncthreads();
  refill();
#endif
  if (WSTORE4) store_warp3(c + bt * (M_ * N_), m0, n0, scratch, ty, tx, acc);
  else store_tile3(c + bt * (M_ * N_), m0, n0, ty, tx, acc);
}
#endif  // SPAN >= 2
#if SPAN == 2
//@ Span 2: the span copies' cp.async issue and the item walk that waits on them.
__device__ __forceinline__ void issue4s(const in_t* a, const in_t* b, long long item, raw_t* S) {
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
#endif  // SPAN == 2
#if STAGE >= 5 || SPAN >= 3  // the bulk copies: codegen::kBulkCopy, then kBulkBody
//@section kBulkBody
//@ The bulk copies' users (sm_90 and newer), after codegen::kBulkCopy and inside the #if that ends kSpanRepack:
//@ stage 5 (bulk), stage 6 (ring, and its span 1) and the pipelined stage's spans 3 and 4.
//@ Stage 5, bulk copies: as the pipelined strategy (a block walks its items, AHEAD in flight ahead of the one
//@ multiplied, one buffer more than that), but each operand's tile of an item is one contiguous, 16-byte aligned
//@ run of memory of whole 16-byte rows, which ONE thread copies with one TMA bulk copy (cp.async.bulk) an
//@ operand; an mbarrier a buffer counts the bytes landing (the copying thread arrives once with the item's byte
//@ count; the phase completes when they all landed), and every thread waits on it (phase parity: the buffer's
//@ use count, mod 2). The tiles land as they are in memory, unpadded: KC, R rows of K_ elements; else K_ rows of
//@ RLIM (the whole matrix). The CPU emulation (tests/policy/emu/emu.h) has no PTX: emu_bulk_copy etc.
constexpr int Q5 = (int)(16 / sizeof(raw_t));  // elements of 16 bytes
#if STAGE < 5
constexpr long long TILES5 = TILES4;  // (spans 3 and 4 walk stage 4's items: ITEMS4)
#else
constexpr long long TILES5 = TILES_M * TILES_N, ITEMS5 = BATCH * TILES5;
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
#endif  // STAGE < 5
#if SPAN != 0
//@ Span copies with bulk copies (stage 6's span 1, the pipelined stage's spans 3 and 4): an operand's tile is
//@ one contiguous run of memory whose rows are not 16-byte aligned (odd sizes; a batch item of a contiguous
//@ 63x63 matrix is 3969 floats in a row), and one thread copies the 16-byte pieces that enclose it with one
//@ bulk copy, so the tile lands at its offset (0 .. 15 bytes) in the buffer and the fragments read it there,
//@ element by element (spans 3 and 4 repack it first: kSpanRepack). A piece reaching out of the view (the first
//@ and the last item's ends; the kernel does not know the allocation around the view) is copied element by
//@ element by the copying thread before its arrival, which releases those stores to the threads that wait on
//@ the phase.
#if STAGE == 6  // (the pipelined stage's spans declared them with ALIGNED_A and ALIGNED_B, in kBody)
constexpr long long EXT_A = A_VIEW, EXT_B = B_VIEW;  // elements of the views
#endif
constexpr int K4R6 = (int)((K_ + 3) / 4 * 4);  // k a fragment read of 4 reaches
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
#else
typedef Tile5<A_KCONT, BM, M_> TA5;
typedef Tile5<!B_NCONT, BN, N_> TB5;
#endif  // SPAN != 0
#if STAGE >= 5
constexpr int BUF5 = TA5::ELEMS + TB5::ELEMS;  // raw elements a buffer: A's tile, then B's
constexpr int NBUF5 = AHEAD + 1;
#endif  // STAGE >= 5
// The item's two bulk copies into buffer S, counted by BAR (the calling thread only). Span copies: of the
// pieces enclosing each tile's span, those reaching out of the view stored element by element first.
#if SPAN != 0
__device__ __forceinline__ void issue5(const in_t* a, const in_t* b, long long item, raw_t* S, unsigned long long* bar) {
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
#else
__device__ __forceinline__ void issue5(const in_t* a, const in_t* b, long long item, raw_t* S, unsigned long long* bar) {
  const long long bt = item / TILES5, tile = item % TILES5;
  const long long m0 = tile / TILES_N * BM, n0 = tile % TILES_N * BN;
  const unsigned ba = TA5::bytes(m0), bb = TB5::bytes(n0);
  kjit_mbar_expect(bar, ba + bb);
  kjit_bulk_copy(S, a + bt * SAB + TA5::first(m0), ba, bar);
  kjit_bulk_copy(S + TA5::ELEMS, b + bt * SBB + TB5::first(n0), bb, bar);
}
#endif  // SPAN != 0
#if STAGE >= 5
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
// Stage 5's item walk (stage 6's sources compile it too, as they always did: their PTX keeps FLAT5 and WSTORE5).
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
    #pragma unroll kUnrollQuarter
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
#endif  // STAGE >= 5
//@ Stage 6, ring (sm_90 and newer), with stage 5's tiles, copies and fragments (Tile5, issue5, chunk5): a
//@ persistent block of BPB consumer groups of THREADS threads and one producer warp. The producer's first lane
//@ copies the block's items (blockIdx.x + j * GRID) in order into a ring of BPB + AHEAD buffers, each with a
//@ `full` mbarrier (the copies' bytes) and an `empty` one (one arrival from each warp of the group that read it);
//@ group g multiplies items j = g, g + BPB, ..., frees the buffer as soon as its fragments are read and stores
//@ its outputs from registers. No block-wide barrier after the start: a group's stores, a slow group and the
//@ copies all overlap. Measured outside the evaluator on the H200 (benchmarks/experiments/bmm64, 4 groups of
//@ 8x8 a thread on whole 64x64 matrices, 6 buffers): 57.1 / 106.4 us at 4096 / 8192 x 64^3 f32 against stage
//@ 5's default at 61.2 / 115.8 in the same run.
#if STAGE == 6
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
#if SPAN == 1  // the tiles read where they landed, at their spans' offsets
    const long long sitem = (long long)blockIdx.x + j * GRID, sbt = sitem / TILES5, stile = sitem % TILES5;
    const raw_t* As = bufs + s * BUF5 + TA5::offset(a + sbt * SAB + TA5::first(stile / TILES_N * BM));
    const raw_t* Bs = bufs + s * BUF5 + TA5::ELEMS + TB5::offset(b + sbt * SBB + TB5::first(stile % TILES_N * BN));
#else
    const raw_t* As = bufs + s * BUF5;
    const raw_t* Bs = As + TA5::ELEMS;
#endif
    float acc[TM][TN];
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
      for (int q = 0; q < TN; ++q) acc[i][q] = 0.f;
    #pragma unroll kUnrollQuarter
    for (int k = 0; k + 4 <= (int)K_; k += 4) chunk5<4>(As, Bs, k, ty, tx, acc);
    if (K_ % 4 != 0) chunk5<(int)(K_ % 4 == 0 ? 4 : K_ % 4)>(As, Bs, (int)(K_ / 4 * 4), ty, tx, acc);
    __syncwarp();  // the warp's reads of the buffer are done
    if (t % 32 == 0) kjit_mbar_arrive(empty + s);
    const long long item = (long long)blockIdx.x + j * GRID, bt = item / TILES5, tile = item % TILES5;
    store_tile3(c + bt * (M_ * N_), tile / TILES_N * BM, tile % TILES_N * BN, ty, tx, acc);
  }
}
#endif  // STAGE == 6
#if SPAN >= 3
//@ Span 3 (sm_90 and newer): span 2 with the pieces landed by TMA bulk copies, as the ring's span copies do it
//@ (Span6 and issue5, above), one thread issuing an item's two copies and an mbarrier a landing buffer counting
//@ their bytes: cp.async's 16-byte copies took ~660 of the ~3600 shared-memory wavefronts a matrix of the odd
//@ bmm (f32 4095 x 63^3), which that pipe bounds; with bulk copies 68.8 us against 76.1 (H200,
//@ benchmarks/experiments/bmm63, variant t). kSpanRepack's SA4, SB4, SBUF4, repack4 and item4s, with span 4's
//@ layout (the landing buffer inside the padded tiles' region).
static_assert(TA5::ELEMS == SA4::ELEMS && TB5::ELEMS == SB4::ELEMS, "span 3: Span6 and Span4 buffers differ");
static_assert(((long long)BUF4 * sizeof(raw_t) + (long long)AHEAD * SBUF4 * sizeof(raw_t) + SR4 * THREADS * TN * 4) % 16 == 0,
              "span 3: the mbarriers' offset is not 16-byte aligned");
__device__ __forceinline__ void pipelined4b(const in_t* a, const in_t* b, out_t* c, raw_t* smem4) {
  const int tx = (int)(threadIdx.x % THREADS) % TX, ty = (int)(threadIdx.x % THREADS) / TX;
#if SPAN == 4
  raw_t* tiles = smem4;          // span 4: LBUF4, the current item's tiles, padded, over its landing buffer
  raw_t* land = smem4 + LOFF4;   // the landing buffer; after LBUF4, SR4 * THREADS * TN floats of output
                                 // scratch, then the mbarrier
  float* scratch = reinterpret_cast<float*>(smem4 + LBUF4);
#else
  raw_t* tiles = smem4;          // BUF4: the current item's tiles, padded
  raw_t* land = smem4 + BUF4;    // AHEAD landing buffers of SBUF4, SR4 * THREADS * TN floats of output scratch, then
                                 // AHEAD mbarriers
  float* scratch = reinterpret_cast<float*>(land + AHEAD * SBUF4);
#endif
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
#endif  // SPAN >= 3
#endif  // STAGE >= 5 || SPAN >= 3
//@section kEntry
//@ The entry point: its launch bounds (the ring's block is its groups and the producer warp, one block an SM) and
//@ the strategy it runs.

#if STAGE == 6
extern "C" __global__ void __launch_bounds__(BLOCK6, 1) kjit_matmul(const in_t* __restrict__ a,
#else
extern "C" __global__ void __launch_bounds__(THREADS, MINB) kjit_matmul(const in_t* __restrict__ a,
#endif
                                                                  const in_t* __restrict__ b,
                                                                  out_t* __restrict__ c) {
#if STAGE > 0
  extern __shared__ __align__(16) unsigned char smem[];
#endif
#if STAGE == 4 && SPAN >= 3
  pipelined4b(a, b, c, reinterpret_cast<raw_t*>(smem));
#elif STAGE == 4 && SPAN == 2
  pipelined4s(a, b, c, reinterpret_cast<raw_t*>(smem));
#elif STAGE == 4
  pipelined4(a, b, c, reinterpret_cast<raw_t*>(smem));
#elif STAGE == 5
  bulk5(a, b, c, smem);
#elif STAGE == 6
  ring6(a, b, c, smem);
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
    #pragma unroll kUnrollBk
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
      #pragma unroll kUnrollHalf
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
#endif  // STAGE >= 4
}
