#!/usr/bin/env python3
"""Hand-edited variants of matmul's odd-bmm default (stage 4, span 2: f32 4095 x 63^3), written from the
emitted source (kjit_tune_spaces --emit-sources) by text replacement, so they follow the generator's code.

  variants.py SRC.cu OUTDIR [NAMES...]   writes OUTDIR/odd-tTMxTN-NAME.cu for each NAME, and -default.cu (SRC) (default: s i si x xi)

Variants (combinable, named by their letters):
  s  the output's per-warp scratch in its own 2 KB past the landing buffers, so the store needs no block
     barrier before it (the tiles it used to overwrite may still be read by other warps' multiplies)
  i  the span copies' issue without a test a piece where the item's whole run of pieces lies inside the view
     (every item but the batch's ends): a 64-bit address, a copy and a count test a piece
  w  (implies s) warp-specialised, one block an SM (384 threads, 206 KB): a producer group of 128 threads copies
     and repacks every item into padded slots; two consumer groups of 128 take items alternately (two slots
     each) and only multiply and store; named barriers (bar.arrive / bar.sync) pass the slots
  m  (implies s) a warp covers 4 x 8 threads (rows x columns of the thread grid) instead of 2 x 16: half the
     shared-memory wavefronts of B's fragment reads
  t  (codegen 6 sources) the landing buffer filled by TMA bulk copies awaited on an mbarrier, not cp.async
     (68.8 against 76.1 us: the generator's span 3 since the twentieth session)
  r  the repack by rows: warp w copies rows w, w + WARPS, ... of each tile, lane l its columns l and l + 32, so
     every load and store is a base address and an immediate offset (no division by the row length an element):
     67.4 against 69.3-69.7 us; the generator's own since codegen 7 (a no-op on its sources)
  d  (codegen 7 sources) outputs stored straight from registers (store_tile3: a thread's 4-byte stores), not
     through the warps' scratch
  z  (diagnostic, codegen 7 span 3 sources; outputs differ) no multiply: the items land, are repacked and
     their zero accumulators stored, so it times the memory side of the pipeline alone
  l  (diagnostic, as z) no copies: each mbarrier phase is armed for 0 bytes, the multiply reads the stale
     landing buffers, so it times the repack, multiply and stores alone
  n  (diagnostic, as z) no stores (an accumulator that is never 12345 guards them): the loads, repack and
     multiply alone
  y  (span 3 sources) lanes 2j and 2j + 1 take one column of threads and two rows of them, so
     lanes pair on every fragment read (B's LDS.128 2 wavefronts, not 4: a quarter fewer in the multiply):
     8x4 69.5 against 67.6 us (lost), 4x8 68.1 against 70.9
  u  the repack's batches of 8 rows' loads before their stores, not 4 (v: 16)
  k  the stores through the warp's scratch two rows a round, not one: 66.8 against 67.7 us on codegen 7's default;
     the generator's own since codegen 8 (its text removed here: a no-op). j (codegen 8 span 3 sources): four
     rows a round (the scratch 4 KB larger a block, still three blocks an SM; 67.9 on codegen 7)
  e  (codegen 7+ sources) the repack's loads as selects (a zero where the row or column is past the tile), not
     conditional: the loaded registers are no longer carried from one item to the next (102 -> 96 registers
     for the codegen-8 default; g's staging spilled 56 bytes without it)
  g  the landing buffer (at the end) and the padded tiles (from the start) in one region, the repack through
     registers in place, the next copies after the multiply: 38.6 KB a block, five blocks an SM. The generator's
     span 4 since the twenty-second session (its text removed here: a no-op on span 4 sources, which
     `--point-list benchmarks/policy/bmm63-span4.tsv` emits). h (span 4 sources): four blocks an SM (MINB 4,
     grid 528, or the batch where smaller)
  f  (span 3 sources, f32 63^3) the multiply on the FP64 tensor cores (mma.sync m8n8k4 f64): tiles repacked
     into doubles, sums in double rounded to float once (outputs differ from FP32 FMAs: launch.cu --against),
     two blocks an SM (103 KB of shared memory), grid 264: 103.7 against 67.7 us (lost)
  p  as w with a producer group of 256 threads (512 in all)
  q  as p, the copies issued by the span copies' own code (the first 128 producers; with i: unchecked)
  o  as q with 128 producers
  x  (implies s) two padded tile buffers: the next item's repack from the landing buffer is interleaved
     with the first k chunks of this item's multiply (8 loads and 8 stores a chunk), then a barrier, the
     copies of the item after next into the landing buffer, the rest of the multiply; two blocks an SM
     (103 KB of shared memory), grid 264
"""
import os
import re
import sys

STORE_S = r'''// Variant s: store_warp3 without its block barrier (the scratch is the warp's own, past the landing buffers).
__device__ __forceinline__ void store_warp3s(out_t* c, long long m0, long long n0, float* S, int ty, int tx, const float (&acc)[TM][TN]) {
  const int lane = threadIdx.x % 32, warp = (int)(threadIdx.x % THREADS) / 32;
'''


ISSUE_I = r'''    // Variant i: every piece inside the view: no test a piece.
    if (g >= lo && g + (unsigned long long)n * 16 <= hi) {
#pragma unroll
      for (int i = 0; i < PER; ++i) {
        const int q = (int)(threadIdx.x % THREADS) + i * THREADS;
        if (q >= n) break;
        kjit_cp_async<16>(S + q * Q4, reinterpret_cast<const void*>(g + (unsigned long long)q * 16));
      }
      return;
    }
'''


X_FUNCS = r'''// Variant x: the repack of elements I0 .. I0 + 7 of this thread's share (as repack4).
template <typename T, bool KC, int R, long long RLIM>
__device__ __forceinline__ void repack_part(const raw_t* s, long long r0, raw_t* D, int i0) {
  constexpr int W = KC ? (int)K_ : (int)RLIM;
  constexpr int MAXE = KC ? R * (int)K_ : (int)(K_ * RLIM), PER = (MAXE + THREADS - 1) / THREADS;
  const int n = KC ? (int)(RLIM - r0 < R ? RLIM - r0 : R) * W : MAXE;
  const int t = (int)(threadIdx.x % THREADS);
  raw_t v[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const int e = t + (i0 + j) * THREADS;
    if (i0 + j < PER && e < n) v[j] = s[e];
  }
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const int e = t + (i0 + j) * THREADS;
    if (i0 + j < PER && e < n) D[(e / W) * T::LD + e % W] = v[j];
  }
}
constexpr int XPA = ((BM * (int)K_ + THREADS - 1) / THREADS + 7) / 8;  // A's repack steps (KC: BM rows of K)
constexpr int XPB = (((int)(K_ * N_) + THREADS - 1) / THREADS + 7) / 8;
constexpr int XSTEPS = XPA + XPB;
static_assert(A_KCONT && B_NCONT && XSTEPS <= (int)(K_ / 4), "variant x: this key's layout only");
__device__ __forceinline__ void pipelined4x(const in_t* a, const in_t* b, out_t* c, raw_t* smem4) {
  const int tx = (int)(threadIdx.x % THREADS) % TX, ty = (int)(threadIdx.x % THREADS) / TX;
  raw_t* const P0 = smem4;
  raw_t* const P1 = smem4 + BUF4;
  raw_t* const land = smem4 + 2 * BUF4;
  float* const scratch = reinterpret_cast<float*>(land + SBUF4);
  long long item = blockIdx.x;
  {
    issue4s(a, b, item, land);
    kjit_cp_commit();
    kjit_cp_wait<0>();
    __syncthreads();
    const long long bt = item / TILES4, tile = item % TILES4;
    const long long m0 = tile / TILES_N * BM, n0 = tile % TILES_N * BN;
    repack4<TA4, A_KCONT, BM, M_>(land + SA4::offset(a + bt * SAB + SA4::first(m0)), m0, P0);
    repack4<TB4, !B_NCONT, BN, N_>(land + SA4::ELEMS + SB4::offset(b + bt * SBB + SB4::first(n0)), n0, P0 + TA4::ELEMS);
    __syncthreads();
    if (item + GRID < ITEMS4) issue4s(a, b, item + GRID, land);
    kjit_cp_commit();
  }
  for (int j = 0; item < ITEMS4; ++j, item += GRID) {
    const raw_t* P = (j & 1) ? P1 : P0;
    raw_t* Q = (j & 1) ? P0 : P1;
    const long long nxt = item + GRID;
    kjit_cp_wait<0>();
    // The landing buffer holds item nxt; P holds this item, whole; every thread is done with Q (item - GRID).
    __syncthreads();
    const long long bt1 = nxt / TILES4, tile1 = nxt % TILES4;
    const long long m1 = tile1 / TILES_N * BM, n1 = tile1 % TILES_N * BN;
    const raw_t* la = land + SA4::offset(a + bt1 * SAB + SA4::first(m1));
    const raw_t* lb = land + SA4::ELEMS + SB4::offset(b + bt1 * SBB + SB4::first(n1));
    float acc[TM][TN];
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
      for (int q = 0; q < TN; ++q) acc[i][q] = 0.f;
    const raw_t* As = P;
    const raw_t* Bs = P + TA4::ELEMS;
    const bool more = nxt < ITEMS4;
#pragma unroll
    for (int st = 0; st < XSTEPS; ++st) {
      if (more) {
        if (st < XPA) repack_part<TA4, A_KCONT, BM, M_>(la, m1, Q, st * 8);
        else repack_part<TB4, !B_NCONT, BN, N_>(lb, n1, Q + TA4::ELEMS, (st - XPA) * 8);
      }
      chunk4<4>(As, Bs, 4 * st, ty, tx, acc);
    }
    // Every thread is done reading the landing buffer (and writing Q): it takes the item after next.
    __syncthreads();
    if (nxt + GRID < ITEMS4) issue4s(a, b, nxt + GRID, land);
    kjit_cp_commit();
#pragma unroll 4
    for (int k = 4 * XSTEPS; k + 4 <= (int)K_; k += 4) chunk4<4>(As, Bs, k, ty, tx, acc);
    if (K_ % 4 != 0) chunk4<(int)(K_ % 4 == 0 ? 4 : K_ % 4)>(As, Bs, (int)(K_ / 4 * 4), ty, tx, acc);
    const long long bt = item / TILES4, tile = item % TILES4;
    const long long m0 = tile / TILES_N * BM, n0 = tile % TILES_N * BN;
    store_warp3s(c + bt * (M_ * N_), m0, n0, scratch, ty, tx, acc);
  }
}
'''


W_FUNCS = r'''// Variant w (PT = 128) / p (PT = 256): warp-specialised. Threads 0..PT-1 (the producer group) copy each
// item's spans into one of two landing buffers and repack them into a padded slot; two consumer groups of
// THREADS take items alternately, each with two slots of its own, and only multiply and store. Named barriers:
// 1 the producer group; 2 + 2g + s slot (g, s) full (producers arrive, group g waits); 6 + 2g + s slot (g, s)
// free (group g arrives after its multiply, producers wait before refilling it). One tile a matrix (63^3).
constexpr int PT = PT_VALUE;
constexpr bool ISSUE_SPAN4 = ISSUE_VALUE;  // the span copies' own issue (Span4::issue), by the first THREADS producers
__device__ __forceinline__ void named_sync(int id, int n) { asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(n) : "memory"); }
__device__ __forceinline__ void named_arrive(int id, int n) { asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(n) : "memory"); }
// The span of E elements at s (view [x, x + EXT)) as 16-byte pieces into S, PT threads (as Span4::issue).
template <long long E, long long EXT>
__device__ __forceinline__ void issue_pt(const in_t* x, const in_t* s, raw_t* S, int tp) {
  const int o = (int)(((unsigned long long)s % 16) / sizeof(raw_t));
  const int n = (int)((o + E + Q4 - 1) / Q4);
  const unsigned long long lo = (unsigned long long)x, hi = lo + (unsigned long long)EXT * sizeof(raw_t);
  const unsigned long long g = (unsigned long long)s - (unsigned long long)o * sizeof(raw_t);
  constexpr int PER = (int)((E + 2 * Q4 - 2) / Q4 + PT - 1) / PT;
  const bool inside = g >= lo && g + (unsigned long long)n * 16 <= hi;
#pragma unroll
  for (int i = 0; i < PER; ++i) {
    const int q = tp + i * PT;
    if (q >= n) break;
    const unsigned long long p = g + (unsigned long long)q * 16;
    if (inside || (p >= lo && p + 16 <= hi)) {
      kjit_cp_async<16>(S + q * Q4, reinterpret_cast<const void*>(p));
    } else {
      for (int e = 0; e < Q4; ++e) {
        const unsigned long long pe = p + (unsigned long long)e * sizeof(raw_t);
        if (pe >= lo && pe < hi) S[q * Q4 + e] = __ldg(reinterpret_cast<const raw_t*>(pe));
      }
    }
  }
}
// E elements (rows of W) from s into D, rows LD apart (as repack4), PT threads.
template <int E, int W, int LD>
__device__ __forceinline__ void repack_pt(const raw_t* s, raw_t* D, int tp) {
  constexpr int PER = (E + PT - 1) / PT;
#pragma unroll
  for (int i0 = 0; i0 < PER; i0 += 8) {
    raw_t v[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const int e = tp + (i0 + j) * PT;
      if (i0 + j < PER && e < E) v[j] = s[e];
    }
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const int e = tp + (i0 + j) * PT;
      if (i0 + j < PER && e < E) D[(e / W) * LD + e % W] = v[j];
    }
  }
}
__device__ __forceinline__ void pipelined4w(const in_t* a, const in_t* b, out_t* c, raw_t* smem4) {
  raw_t* const land = smem4;                  // 2 x SBUF4
  raw_t* const pads = smem4 + 2 * SBUF4;      // slot (g, s) at (2g + s) x BUF4
  float* const scratch = reinterpret_cast<float*>(pads + 4 * BUF4);  // THREADS x TN floats a group
  const int role = threadIdx.x < PT ? 0 : 1 + (int)(threadIdx.x - PT) / THREADS;
  const long long first = blockIdx.x;
  const int n = first < ITEMS4 ? (int)((ITEMS4 - first + GRID - 1) / GRID) : 0;
  constexpr int EA = (int)(M_ * K_), EB = (int)(K_ * N_);
  if (role == 0) {
    const int tp = (int)threadIdx.x;
    if (n > 0) {
      if (ISSUE_SPAN4) {
        if (tp < THREADS) issue4s(a, b, first, land);
      } else {
        issue_pt<EA, EXT_A>(a, a + first * SAB, land, tp);
        issue_pt<EB, EXT_B>(b, b + first * SBB, land + SA4::ELEMS, tp);
      }
    }
    kjit_cp_commit();
    for (int t = 0; t < n + 4; ++t) {
      const int g = t & 1, s = (t >> 1) & 1;
      if (t >= n) {  // the consumers' last releases, matched
        if (t >= 4) named_sync(6 + 2 * g + s, PT + THREADS);
        continue;
      }
      const long long item = first + (long long)t * GRID;
      if (t + 1 < n) {
        raw_t* L1 = land + ((t + 1) & 1) * SBUF4;
        if (ISSUE_SPAN4) {
          if (tp < THREADS) issue4s(a, b, item + GRID, L1);
        } else {
          issue_pt<EA, EXT_A>(a, a + (item + GRID) * SAB, L1, tp);
          issue_pt<EB, EXT_B>(b, b + (item + GRID) * SBB, L1 + SA4::ELEMS, tp);
        }
      }
      kjit_cp_commit();
      kjit_cp_wait<1>();
      named_sync(1, PT);  // every producer's copies of item t landed
      if (t >= 4) named_sync(6 + 2 * g + s, PT + THREADS);
      raw_t* P = pads + (2 * g + s) * BUF4;
      const raw_t* L = land + (t & 1) * SBUF4;
      repack_pt<EA, (int)K_, TA4::LD>(L + SA4::offset(a + item * SAB), P, tp);
      repack_pt<EB, (int)N_, TB4::LD>(L + SA4::ELEMS + SB4::offset(b + item * SBB), P + TA4::ELEMS, tp);
      named_arrive(2 + 2 * g + s, PT + THREADS);
      named_sync(1, PT);  // every producer is done reading landing buffer t & 1 (item t + 2's next)
    }
  } else {
    const int g = role - 1;
    const int tx = (int)((threadIdx.x - PT) % THREADS) % TX, ty = (int)((threadIdx.x - PT) % THREADS) / TX;
    float* sc = scratch + g * (THREADS * TN);
    for (int t = g; t < n; t += 2) {
      const int s = (t >> 1) & 1;
      const long long item = first + (long long)t * GRID;
      named_sync(2 + 2 * g + s, PT + THREADS);
      const raw_t* As = pads + (2 * g + s) * BUF4;
      const raw_t* Bs = As + TA4::ELEMS;
      float acc[TM][TN];
#pragma unroll
      for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int q = 0; q < TN; ++q) acc[i][q] = 0.f;
#pragma unroll 4
      for (int k = 0; k + 4 <= (int)K_; k += 4) chunk4<4>(As, Bs, k, ty, tx, acc);
      if (K_ % 4 != 0) chunk4<(int)(K_ % 4 == 0 ? 4 : K_ % 4)>(As, Bs, (int)(K_ / 4 * 4), ty, tx, acc);
      named_arrive(6 + 2 * g + s, PT + THREADS);  // the slot is read: the producers may refill it
      store_warp3s(c + item * (M_ * N_), 0, 0, sc, ty, tx, acc);
    }
  }
}
'''


M_FUNCS = r'''// Variant m: a warp covers 4 thread rows x 8 thread columns (not 2 x 16), so a k step's fragment reads of B
// are 128 bytes a warp (were 256) and A's 4 rows; the outputs leave through the warp's own scratch likewise.
constexpr int WXM = 8, WYM = 32 / WXM, WCM = WXM * TN;
static_assert(TX % WXM == 0 && TN == CV, "variant m: 8 thread columns a warp, one column group");
__device__ __forceinline__ void warp_tile_m(int& ty, int& tx) {
  const int tt = (int)(threadIdx.x % THREADS), lane = tt % 32, wp = tt / 32;
  tx = (wp % (TX / WXM)) * WXM + lane % WXM;
  ty = (wp / (TX / WXM)) * WYM + lane / WXM;
}
__device__ __forceinline__ void store_warp3m(out_t* c, float* S, int ty, int tx, const float (&acc)[TM][TN]) {
  const int lane = threadIdx.x % 32, wp = (int)(threadIdx.x % THREADS) / 32;
  float* buf = S + wp * (32 * TN);
  const int ty0 = (wp / (TX / WXM)) * WYM, tx0 = (wp % (TX / WXM)) * WXM;
#pragma unroll
  for (int i = 0; i < TM; ++i) {
    sts<CV>(buf + (ty - ty0) * WCM + (tx - tx0) * CV, &acc[i][0]);
    __syncwarp();
#pragma unroll
    for (int q = 0; q < TN; ++q) {
      const int idx = q * 32 + lane, r = idx / WCM, lc = idx % WCM;
      const long long gm = row_of(ty0 + r, i), gn = tx0 * CV + lc;
      if (gm < M_ && gn < N_) {
        const raw_t v = Bits<out_t>::from_f(buf[idx]);
        raw_t* dst = reinterpret_cast<raw_t*>(c + gm * N_ + gn);
        if (HINT) __stcs(dst, v);
        else *dst = v;
      }
    }
    __syncwarp();
  }
}
'''


T_FUNCS = r'''// Variant t: the landing buffer filled by TMA bulk copies (one thread, one copy an operand for the pieces inside
// the view, the partial ones at its ends element by element first), awaited on an mbarrier: the copies' writes
// take no LSU wavefronts (cp.async's took ~660 a matrix of the ~3600).
template <long long E>
__device__ __forceinline__ unsigned plain_t(const in_t* x, long long ext, const in_t* s, raw_t* S, unsigned long long* from) {
  const unsigned long long lo = (unsigned long long)x, hi = lo + (unsigned long long)ext * sizeof(raw_t);
  const unsigned long long p = (unsigned long long)s, n = (unsigned long long)E * sizeof(raw_t);
  const unsigned long long g = p & ~15ull, e = (p + n + 15) & ~15ull;
  const unsigned long long g0 = g < lo ? (lo + 15) & ~15ull : g;
  unsigned long long g1 = e > hi ? hi & ~15ull : e;
  if (g1 < g0) g1 = g0;
  for (unsigned long long q = p; q < p + n && q < g0; q += sizeof(raw_t)) S[(q - g) / sizeof(raw_t)] = __ldg(reinterpret_cast<const raw_t*>(q));
  for (unsigned long long q = g1 > p ? g1 : p; q < p + n; q += sizeof(raw_t)) S[(q - g) / sizeof(raw_t)] = __ldg(reinterpret_cast<const raw_t*>(q));
  *from = g0;
  return (unsigned)(g1 - g0);
}
__device__ __forceinline__ void issue_t(const in_t* a, const in_t* b, long long item, raw_t* S, unsigned long long* bar) {
  const long long bt = item / TILES4;
  const in_t* sa = a + bt * SAB;
  const in_t* sb = b + bt * SBB;
  raw_t* Sb = S + SA4::ELEMS;
  unsigned long long fa, fb;
  const unsigned na = plain_t<M_ * K_>(a, EXT_A, sa, S, &fa), nb = plain_t<K_ * N_>(b, EXT_B, sb, Sb, &fb);
  kjit_mbar_expect(bar, na + nb);  // after the plain stores: the arrival releases them
  if (na) kjit_bulk_copy(S + (fa - ((unsigned long long)sa & ~15ull)) / sizeof(raw_t), reinterpret_cast<const void*>(fa), na, bar);
  if (nb) kjit_bulk_copy(Sb + (fb - ((unsigned long long)sb & ~15ull)) / sizeof(raw_t), reinterpret_cast<const void*>(fb), nb, bar);
}
__device__ __forceinline__ void pipelined4t(const in_t* a, const in_t* b, out_t* c, raw_t* smem4) {
  const int tx = (int)(threadIdx.x % THREADS) % TX, ty = (int)(threadIdx.x % THREADS) / TX;
  raw_t* tiles = smem4;
  raw_t* land = smem4 + BUF4;
  float* scratch = reinterpret_cast<float*>(land + SBUF4);
  unsigned long long* bar = reinterpret_cast<unsigned long long*>(scratch + THREADS * TN);
  if (threadIdx.x == 0) {
    kjit_mbar_init(bar, 1);
    kjit_fence_init();
  }
  __syncthreads();
  long long item = blockIdx.x;
  if (threadIdx.x == 0 && item < ITEMS4) issue_t(a, b, item, land, bar);
  for (int j = 0; item < ITEMS4; ++j, item += GRID) {
    kjit_mbar_wait(bar, (unsigned)(j & 1));
    __syncthreads();  // every thread is done with the padded tiles
    const long long bt = item / TILES4;
    repack4<TA4, A_KCONT, BM, M_>(land + SA4::offset(a + bt * SAB), 0, tiles);
    repack4<TB4, !B_NCONT, BN, N_>(land + SA4::ELEMS + SB4::offset(b + bt * SBB), 0, tiles + TA4::ELEMS);
    __syncthreads();  // the tiles are whole; every thread is done reading the landing buffer
    const long long ahead = item + GRID;
    if (threadIdx.x == 0 && ahead < ITEMS4) {
      kjit_fence_async();
      issue_t(a, b, ahead, land, bar);
    }
    float acc[TM][TN];
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
      for (int q = 0; q < TN; ++q) acc[i][q] = 0.f;
    const raw_t* As = tiles;
    const raw_t* Bs = tiles + TA4::ELEMS;
#pragma unroll 4
    for (int k = 0; k + 4 <= (int)K_; k += 4) chunk4<4>(As, Bs, k, ty, tx, acc);
    if (K_ % 4 != 0) chunk4<(int)(K_ % 4 == 0 ? 4 : K_ % 4)>(As, Bs, (int)(K_ / 4 * 4), ty, tx, acc);
    store_warp3(c + bt * (M_ * N_), 0, 0, scratch, ty, tx, acc);
  }
}
'''


F_FUNCS = r'''// Variant f: the multiply on the FP64 tensor cores (mma.sync m8n8k4 f64). A product of two floats is exact in a
// double; the sums are in double and rounded to float once, at the store. The tiles are repacked into doubles
// (k contiguous for both operands: A's rows, B transposed), a warp takes a 32 x 32 quarter of the output (4 x 4
// tiles of 8 x 8), and the outputs are staged as floats over A's tile, then stored a row a warp.
constexpr int LDF = 68;  // doubles a tile row: a half warp's fragment reads (rows g, k t; g, t < 4) hit distinct banks
constexpr int LDC = 72;  // floats an output staging row: a half warp's float2 stores at (g, 2t) hit distinct banks
__device__ __forceinline__ void dmma884(double (&d)[2], double x, double y) {
  asm("mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64 {%0,%1}, {%2}, {%3}, {%0,%1};\n"
      : "+d"(d[0]), "+d"(d[1]) : "d"(x), "d"(y));
}
// dst[r * LDF + j] = src[r * RS + j * ES] as a double for r, j < 63; column 63 and row 63 zero.
template <int RS, int ES>
__device__ __forceinline__ void repack_f(const raw_t* src, double* dst) {
  const int lane = (int)(threadIdx.x % 32), warp = (int)(threadIdx.x % THREADS) / 32;
#pragma unroll
  for (int i0 = 0; i0 < 16; i0 += 4) {
    float v[4][2];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int r = warp + (i0 + i) * 4;
      v[i][0] = r < 63 ? Bits<in_t>::to_f(src[r * RS + lane * ES]) : 0.f;
      v[i][1] = r < 63 && lane + 32 < 63 ? Bits<in_t>::to_f(src[r * RS + (lane + 32) * ES]) : 0.f;
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int r = warp + (i0 + i) * 4;
      dst[r * LDF + lane] = (double)v[i][0];
      dst[r * LDF + lane + 32] = (double)v[i][1];
    }
  }
}
template <typename Refill>
__device__ __forceinline__ void item4f(const in_t* a, const in_t* b, out_t* c, long long item, const raw_t* cur,
                                       double* At, Refill refill) {
  const long long bt = item;  // one tile a matrix
  const in_t* sa = a + bt * SAB + SA4::first(0);
  const in_t* sb = b + bt * SBB + SB4::first(0);
  double* Bt = At + 64 * LDF;
  repack_f<(int)K_, 1>(cur + SA4::offset(sa), At);
  repack_f<1, (int)N_>(cur + SA4::ELEMS + SB4::offset(sb), Bt);
  __syncthreads();
  refill();
  const int lane = (int)(threadIdx.x % 32), warp = (int)(threadIdx.x % THREADS) / 32, g = lane >> 2, t = lane & 3;
  const int wm = warp >> 1, wn = warp & 1;
  double acc[4][4][2];
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) acc[i][j][0] = acc[i][j][1] = 0.0;
  const double* Ap = At + (wm * 32 + g) * LDF + t;
  const double* Bp = Bt + (wn * 32 + g) * LDF + t;
#pragma unroll 4
  for (int k0 = 0; k0 < 64; k0 += 4) {
    double fa[4], fb[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) fa[i] = Ap[i * 8 * LDF + k0];
#pragma unroll
    for (int j = 0; j < 4; ++j) fb[j] = Bp[j * 8 * LDF + k0];
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j) dmma884(acc[i][j], fa[i], fb[j]);
  }
  __syncthreads();  // every warp done with the tiles: the outputs are staged over A's
  float* Cs = reinterpret_cast<float*>(At);
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      *reinterpret_cast<float2*>(Cs + (wm * 32 + i * 8 + g) * LDC + wn * 32 + j * 8 + 2 * t) =
          make_float2((float)acc[i][j][0], (float)acc[i][j][1]);
    }
  __syncthreads();
  out_t* cb = c + bt * (M_ * N_);
#pragma unroll
  for (int i = 0; i < 16; ++i) {
    const int r = warp + 4 * i;
    if (r < (int)M_) {
      cb[r * N_ + lane] = Cs[r * LDC + lane];
      if (lane + 32 < (int)N_) cb[r * N_ + lane + 32] = Cs[r * LDC + lane + 32];
    }
  }
}
'''


def bulk_copy_helpers():
    # The generator's own bulk-copy and mbarrier helpers (codegen::kBulkCopy), as stage 5 and 6 sources hold them.
    text = open(os.path.join(os.path.dirname(os.path.abspath(__file__)), '../../../policy/src/codegen.cc')).read()
    m = re.search(r'const char\* const kBulkCopy = R"\((.*?)\)";', text, re.S)
    return m.group(1)


def one_tile(src):
    # The output tile covers the whole matrix (BM >= M, BN >= N): the item is the matrix.
    m = re.search(r'constexpr long long M_ = (\d+), N_ = (\d+),', src)
    t = re.search(r'constexpr int BM = (\d+), BN = (\d+),', src)
    return bool(m and t) and int(t.group(1)) >= int(m.group(1)) and int(t.group(2)) >= int(m.group(2))


def make(src, letters):
    out = src
    # Codegen 6 (ae983db) made `s` and `i` the generator's own: from its sources they add nothing (`s` only names
    # store_warp3, which has no barrier there, store_warp3s for the variants built on it).
    version = re.search(r'kjit matmul family, codegen (\d+)', src)
    cg6 = version is not None and int(version.group(1)) >= 6
    if cg6 and 'i' in letters:
        letters = letters.replace('i', '')
    if 'i' in letters:
        anchor = '(unsigned long long)o * sizeof(raw_t);  // 16-byte aligned\n'
        assert out.count(anchor) == 1, 'variant i: Span4::issue not found'
        i = out.index(anchor) + len(anchor)
        out = out[:i] + ISSUE_I + out[i:]
    pt = 256 if 'p' in letters or 'q' in letters else 128
    if 'p' in letters or 'q' in letters or 'o' in letters:
        letters += 'w'
    if 'w' in letters:
        m = re.search(r'grid (\d+),1,1 block (\d+),1,1 shared (\d+)', out)
        threads = int(m.group(2))
        assert threads in (64, 128) and ' ahead=1 ' in out, 'variant w: written for 64 or 128 threads, ahead 1'
        tn = int(re.search(r' tn=(\d+)', out).group(1))
        # The default's shared: BUF4 + SBUF4 floats (codegen 6: and THREADS x TN of output scratch).
        sbuf4 = int(m.group(3)) // 4 - 8636 - (threads * tn if cg6 else 0)
        w_shared = (2 * sbuf4 + 4 * 8636 + 2 * threads * int(re.search(r' tn=(\d+)', out).group(1))) * 4
        if 's' not in letters:
            letters += 's'
    if 'm' in letters and 's' not in letters:
        letters += 's'
    if 'x' in letters and 's' not in letters:
        letters += 's'
    if 's' in letters and cg6:
        anchor = '__device__ __forceinline__ void pipelined4s('
        out = out.replace(anchor, '#define store_warp3s store_warp3  // codegen 6: no barrier in it\n' + anchor, 1)
    elif 's' in letters:
        # The body of store_warp3 after its barrier, reused under a new name.
        m = re.search(r'__device__ __forceinline__ void store_warp3\(.*?\n  __syncthreads\(\);[^\n]*\n(.*?\n)\}\n', out, re.S)
        assert m, 'variant s: store_warp3 not found'
        body = m.group(1).split('\n', 1)[1]  # drop the lane/warp line, restated in STORE_S
        anchor = '#if STAGE == 4\n'
        i = out.index(anchor, m.end())
        out = out[:i + len(anchor)] + STORE_S + body + '}\n' + out[i + len(anchor):]
        old = 'if (WSTORE4) store_warp3(c + bt * (M_ * N_), m0, n0, reinterpret_cast<float*>(tiles), ty, tx, acc);'
        assert old in out, 'variant s: call site not found'
        out = out.replace(old, 'if (WSTORE4) store_warp3s(c + bt * (M_ * N_), m0, n0, reinterpret_cast<float*>(land + AHEAD * SBUF4), ty, tx, acc);')
        m = re.search(r'(// launch: entry \S+ grid \S+ block \S+ shared )(\d+)', out)
        # THREADS / 32 warps of 32 x TN floats.
        threads, tn = int(re.search(r'block (\d+),', out).group(1)), int(re.search(r' tn=(\d+)', out).group(1))
        out = out[:m.start(2)] + str(int(m.group(2)) + threads * tn * 4) + out[m.end(2):]
    if 'x' in letters:
        anchor = '#endif\n\nextern "C" __global__'
        assert out.count(anchor) == 1, 'variant x: kernel entry not found'
        out = out.replace(anchor, X_FUNCS + anchor)
        old = '  pipelined4s(a, b, c, reinterpret_cast<raw_t*>(smem));'
        assert old in out, 'variant x: call not found'
        out = out.replace(old, '  pipelined4x(a, b, c, reinterpret_cast<raw_t*>(smem));')
        m = re.search(r'(// launch: entry \S+ grid )(\d+)(,\S+ block \S+ shared )(\d+)', out)
        assert ' bm=64 bn=64 ' in out and 'M_ = 63, N_ = 63, K_ = 63' in out, 'variant x: written for 63^3, 64 x 64 tiles'
        # A second padded buffer (BUF4 = 64 x 68 + 63 x 68 floats); two blocks an SM of the H200's 132.
        out = out[:m.start(2)] + '264' + m.group(3) + str(int(m.group(4)) + 8636 * 4) + out[m.end(4):]
        out = re.sub(r'constexpr long long GRID = \d+;', 'constexpr long long GRID = 264;', out)
    if 'w' in letters:
        assert ' bm=64 bn=64 ' in out and 'M_ = 63, N_ = 63, K_ = 63' in out, 'variant w: written for 63^3, 64 x 64 tiles'
        anchor = '#endif\n\nextern "C" __global__'
        out = out.replace(anchor, W_FUNCS.replace('PT_VALUE', str(pt)).replace('ISSUE_VALUE', 'true' if 'q' in letters or 'o' in letters else 'false') + anchor)
        old = '  pipelined4s(a, b, c, reinterpret_cast<raw_t*>(smem));'
        assert old in out, 'variant w: call not found'
        out = out.replace(old, '  pipelined4w(a, b, c, reinterpret_cast<raw_t*>(smem));')
        assert '__launch_bounds__(THREADS, MINB)' in out
        out = out.replace('__launch_bounds__(THREADS, MINB)', '__launch_bounds__(PT + 2 * THREADS, 1)')
        out = re.sub(r'grid \d+,1,1 block \d+,1,1 shared \d+', f'grid 132,1,1 block {pt + 2 * threads},1,1 shared {w_shared}', out)
        out = re.sub(r'constexpr long long GRID = \d+;', 'constexpr long long GRID = 132;', out)
    if 'm' in letters:
        assert one_tile(out) and ' bm=64 bn=64 ' in out, 'variant m: one tile a matrix'
        assert '  pipelined4b(a, b, c,' not in out, 'variant m: span 2 sources (it edits pipelined4s)'
        anchor = '__device__ __forceinline__ void pipelined4s('
        # Codegen 7: before item4s, whose store it changes.
        at = '// One item of span 2 or 3 whose spans landed in cur'
        out = out.replace(at if at in out else anchor, M_FUNCS + (at if at in out else anchor), 1)
        i = out.index(anchor)
        old = '  const int tx = (int)(threadIdx.x % THREADS) % TX, ty = (int)(threadIdx.x % THREADS) / TX;\n'
        j = out.index(old, i)
        out = out[:j] + '  int tx, ty;\n  warp_tile_m(ty, tx);\n' + out[j + len(old):]
        old = 'if (WSTORE4) store_warp3%s(c + bt * (M_ * N_), m0, n0, reinterpret_cast<float*>(land + AHEAD * SBUF4), ty, tx, acc);' % ('' if cg6 else 's')
        old7 = 'if (WSTORE4) store_warp3(c + bt * (M_ * N_), m0, n0, scratch, ty, tx, acc);'  # codegen 7: item4s
        assert old in out or old7 in out, 'variant m: the store not found'
        out = out.replace(old, 'if (WSTORE4) store_warp3m(c + bt * (M_ * N_), reinterpret_cast<float*>(land + AHEAD * SBUF4), ty, tx, acc);')
        out = out.replace(old7, 'if (WSTORE4) store_warp3m(c + bt * (M_ * N_), scratch, ty, tx, acc);')
    if 'd' in letters:
        old = '  if (WSTORE4) store_warp3(c + bt * (M_ * N_), m0, n0, scratch, ty, tx, acc);'
        assert old in out, 'variant d: codegen 7 sources (item4s)'
        out = out.replace(old, '  if (false) store_warp3(c + bt * (M_ * N_), m0, n0, scratch, ty, tx, acc);  // variant d')
    if 'r' in letters:
        # Codegen 7 made it the generator's repack4 (f6825e9); the variant's text went with it.
        assert version is not None and int(version.group(1)) >= 7, 'variant r: the generator\'s own since codegen 7'
    if any(ch in letters for ch in 'zln'):
        assert 'pipelined4b(a, b, c,' in out, 'variants z, l, n: span 3 sources'
    if 'z' in letters:
        # (item4s's lines, indented by two: pipelined4's own are by four)
        old = '\n  for (int k = 0; k + 4 <= (int)K_; k += 4) chunk4<4>(As, Bs, k, ty, tx, acc);\n'
        assert out.count(old) == 1, 'variant z: the multiply not found'
        out = out.replace(old, '\n  (void)As; (void)Bs;  // variant z: no multiply\n')
        old = '\n  if (K_ % 4 != 0) chunk4<'
        assert out.count(old) == 1
        out = out.replace(old, '\n  if (false) chunk4<')
    if 'l' in letters:
        old = '  kjit_mbar_expect(bar, na + nb);  // after the plain stores: the arrival releases them\n'
        assert out.count(old) == 1, 'variant l: issue5 not found'
        out = out.replace(old, '  kjit_mbar_expect(bar, 0u); return; (void)na; (void)nb; (void)fa; (void)fb;  // variant l: no copies\n')
    if 'n' in letters:
        old = '  if (WSTORE4) store_warp3(c + bt * (M_ * N_), m0, n0, scratch, ty, tx, acc);'
        assert old in out, 'variant n: the store not found'
        out = out.replace(old, '  if (WSTORE4 && acc[0][0] == 12345.f) store_warp3(c + bt * (M_ * N_), m0, n0, scratch, ty, tx, acc);  // variant n')
    if 'y' in letters:
        assert 'pipelined4b(a, b, c,' in out, 'variant y: span 3 sources'
        i = out.index('__device__ __forceinline__ void pipelined4b(')
        old = '  const int tx = (int)(threadIdx.x % THREADS) % TX, ty = (int)(threadIdx.x % THREADS) / TX;\n'
        j = out.index(old, i)
        new = ('  // Variant y: lanes 2j and 2j + 1 share a column of threads (tx), lanes j and j ^ 2 a row (ty), so every\n'
               '  // fragment read (LDS.128) packs its 4 registers a lane into 2 wavefronts, not 4 (B) or 2 (A).\n'
               '  static_assert(TX >= 2 && 32 % TX == 0, "variant y: a warp holds whole rows of threads");\n'
               '  const int pl = (int)(threadIdx.x % 32) >> 1;\n'
               '  const int tx = pl % TX, ty = (int)(threadIdx.x % THREADS) / 32 * (32 / TX) + pl / TX * 2 + (int)(threadIdx.x & 1);\n')
        out = out[:j] + new + out[j + len(old):]
    if 'u' in letters or 'v' in letters:
        # The repack's batch: 8 (u) or 16 (v) rows' loads before their stores, not 4.
        rb = 16 if 'v' in letters else 8
        i = out.index('__device__ __forceinline__ void repack4(')
        j = out.index('\n}\n', i)
        body = out[i:j]
        for old, new in (('i0 += 4) {', 'i0 += %d) {' % rb), ('raw_t v[4][CPL];', 'raw_t v[%d][CPL];' % rb),
                         ('for (int i = 0; i < 4; ++i)', 'for (int i = 0; i < %d; ++i)' % rb)):
            assert old in body, 'variants u, v: ' + old
            body = body.replace(old, new)
        out = out[:i] + body + out[j:]
    if 'j' in letters:
        # k (two rows a round) is the generator's own since codegen 8 (a no-op here); j takes four.
        assert 'pipelined4b(a, b, c,' in out and int(version.group(1)) >= 8, 'variant j: span 3 sources of codegen 8'
        old = 'constexpr int SR4 = TM % 2 == 0 ? 2 : 1;'
        assert out.count(old) == 1, 'variant j: ' + old
        out = out.replace(old, 'constexpr int SR4 = TM % 4 == 0 ? 4 : TM % 2 == 0 ? 2 : 1;  // variant j')
        m = re.search(r'(// launch: entry \S+ grid \S+ block (\d+),\S+ shared )(\d+)', out)
        tm, tn = (int(re.search(r' %s=(\d+)' % k, out).group(1)) for k in ('tm', 'tn'))
        old_sr = 2 if tm % 2 == 0 else 1
        new_sr = 4 if tm % 4 == 0 else old_sr
        out = out[:m.start(3)] + str(int(m.group(3)) + (new_sr - old_sr) * int(m.group(2)) * tn * 4) + out[m.end(3):]
    if 'e' in letters:
        old = '        if (i0 + i < RPW && warp + (i0 + i) * WARPS < rows && lane + c * 32 < W) v[i][c] = sw[(i0 + i) * WARPS * W + c * 32];'
        assert out.count(old) == 1, 'variant e: codegen 7+ sources (repack4 by rows)'
        out = out.replace(old, '        v[i][c] = i0 + i < RPW && warp + (i0 + i) * WARPS < rows && lane + c * 32 < W ? sw[(i0 + i) * WARPS * W + c * 32] : raw_t(0);  // variant e')
    if 'g' in letters or 'h' in letters:
        # g became matmul's span 4 (the twenty-second session): emit its sources with --point-list
        # benchmarks/policy/bmm63-span4.tsv; g is a no-op on them, h asks for four blocks an SM, not five.
        assert 'constexpr int LOFF4 = ' in out, 'variants g, h: span 4 sources (the generator\'s own since the twenty-second session)'
        if 'h' in letters:
            # Four blocks an SM of the H200's 132 (as f assumes), no more blocks than matrices (span 4's own grid
            # at bmm 600 x 63^3 is the batch, not its blocks an SM: scaling it by 4/5 would leave SMs short).
            m = re.search(r'(// launch: entry \S+ grid )(\d+)(,)', out)
            minb = int(re.search(r'MINB = (\d+),', out).group(1))
            grid = min(4 * 132, int(re.search(r'BATCH = (\d+);', out).group(1))) if minb > 4 else int(m.group(2))
            out = out[:m.start(2)] + str(grid) + out[m.end(2):]
            out = re.sub(r'constexpr long long GRID = \d+;', 'constexpr long long GRID = %d;' % grid, out)
            out = re.sub(r'MINB = \d+,', 'MINB = %d,' % min(minb, 4), out, count=1)
    if 'f' in letters:
        assert 'pipelined4b(a, b, c,' in out and ' bm=64 bn=64 ' in out and 'M_ = 63, N_ = 63, K_ = 63' in out \
            and 'typedef float in_t;' in out and 'THREADS = 128' in out, 'variant f: span 3, f32 63^3, 64 x 64 tiles, 128 threads'
        anchor = '__device__ __forceinline__ void pipelined4b('
        out = out.replace(anchor, F_FUNCS + anchor, 1)
        for old, new in (('  raw_t* land = smem4 + BUF4;', '  raw_t* land = smem4 + 4 * 64 * LDF;  // variant f: two tiles of 64 x LDF doubles'),
                         ('    item4s(a, b, c, item, cur, tiles, scratch, ty, tx, [&] {',
                          '    (void)tx; (void)ty;\n    item4f(a, b, c, item, cur, reinterpret_cast<double*>(tiles), [&] {')):
            assert out.count(old) == 1, 'variant f: ' + old
            out = out.replace(old, new)
        m = re.search(r'(// launch: entry \S+ grid )(\d+)(,\S+ block \S+ shared )(\d+)', out)
        # BUF4 (8636 floats: 64 x 68 + 63 x 68) becomes 2 x 64 x 68 doubles; two blocks an SM of the H200's 132.
        out = out[:m.start(2)] + '264' + m.group(3) + str(int(m.group(4)) + (4 * 64 * 68 - 8636) * 4) + out[m.end(4):]
        out = re.sub(r'constexpr long long GRID = \d+;', 'constexpr long long GRID = 264;', out)
    if 't' in letters:
        assert cg6 and ' ahead=1 ' in out and one_tile(out), 'variant t: codegen 6 sources, ahead 1, one tile a matrix'
        anchor = '__device__ __forceinline__ void pipelined4s('
        t_funcs = T_FUNCS
        if 'm' in letters:  # the warp tiles of m here too
            t_funcs = t_funcs.replace(
                '  const int tx = (int)(threadIdx.x % THREADS) % TX, ty = (int)(threadIdx.x % THREADS) / TX;\n',
                '  int tx, ty;\n  warp_tile_m(ty, tx);\n', 1)
            t_funcs = t_funcs.replace('store_warp3(c + bt * (M_ * N_), 0, 0, scratch, ty, tx, acc);',
                                      'store_warp3m(c + bt * (M_ * N_), scratch, ty, tx, acc);')
            assert 'warp_tile_m' in t_funcs and 'store_warp3m' in t_funcs
        out = out.replace(anchor, bulk_copy_helpers() + t_funcs + anchor, 1)
        old = '  pipelined4s(a, b, c, reinterpret_cast<raw_t*>(smem));'
        assert old in out, 'variant t: call not found'
        out = out.replace(old, '  pipelined4t(a, b, c, reinterpret_cast<raw_t*>(smem));')
        m = re.search(r'(// launch: entry \S+ grid \S+ block \S+ shared )(\d+)', out)
        if m:  # an emitted source (the CPU emulation's has no launch line: its harness takes the shape)
            out = out[:m.start(2)] + str(int(m.group(2)) + 16) + out[m.end(2):]
    return out


def main():
    if len(sys.argv) < 3 or sys.argv[1] in ('-h', '--help'):
        print(__doc__)
        return 0 if len(sys.argv) > 1 and sys.argv[1] in ('-h', '--help') else 2
    src = open(sys.argv[1]).read()
    os.makedirs(sys.argv[2], exist_ok=True)
    tm, tn = (re.search(r' %s=(\d+)' % k, src).group(1) for k in ('tm', 'tn'))
    span = re.search(r' span=(\d+)', src)
    stem = os.path.join(sys.argv[2], f'odd-t{tm}x{tn}' + ('s4' if span and span.group(1) == '4' else ''))
    with open(stem + '-default.cu', 'w') as f:
        f.write(src)
    for letters in sys.argv[3:] or ('s', 'i', 'si', 'x', 'xi', 'w', 'p'):
        out = make(src, letters)  # (a variant that does not apply writes no file)
        with open(f'{stem}-{letters}.cu', 'w') as f:
            f.write(out)
    return 0


if __name__ == '__main__':
    sys.exit(main())
