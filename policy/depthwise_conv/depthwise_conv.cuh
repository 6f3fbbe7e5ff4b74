// The CUDA of the depthwise_conv family's kernels, in sections that depthwise_conv.cc embeds (kjit_embed_cuda, at
// build time) and writes after policy/src/cuda/common.cuh's pieces, with the problem's sizes and the
// design point's knobs defined ahead of them as macros and constants. Each section is embedded byte for
// byte (a blank line after a marker is part of it); lines starting "//@" document it and are not embedded.
//@section kPrelude
//@ Device code every strategy shares, after codegen::kElementAccess, codegen::kRawAccess and the key's
//@ constants.

// Input rows under ROWS_ output rows, and input columns under OUTS consecutive outputs of a row.
template <int ROWS_> struct Under { static constexpr int R = (ROWS_ - 1) * (int)SH + (KH - 1) * (int)DH + 1; };
constexpr int SEG = (OUTS - 1) * (int)SW + (KW - 1) * (int)DW + 1;
// Whether column m of a segment is a tap of some output of it (dilation leaves gaps).
__device__ __forceinline__ constexpr bool column_used(int m) {
  for (int j = 0; j < OUTS; ++j) {
    const int d = m - j * (int)SW;
    if (d >= 0 && d % (int)DW == 0 && d / (int)DW < KW) return true;
  }
  return false;
}

// Whether input row r under ROWS_ output rows is a kernel row of some of them (stride and dilation
// leave gaps: those rows are not read).
template <int ROWS_>
__device__ __forceinline__ constexpr bool row_used(int r) {
  for (int o = 0; o < ROWS_; ++o) {
    const int d = r - o * (int)SH;
    if (d >= 0 && d % (int)DH == 0 && d / (int)DH < KH) return true;
  }
  return false;
}

// Accumulates ROWS_ x OUTS outputs x CV lanes (channels): output rows oh0.., columns ow0... Every
// input row under them is read once, its SEG columns into registers (load(h, w, v) fetches CV raw
// elements of input (h, w)), and feeds each output row it is a kernel row of. For every output the
// taps arrive in (i, j) order, PyTorch's. EDGE: some columns may lie outside the input; their taps
// are skipped (rows outside the input are skipped either way).
template <int ROWS_, bool EDGE, typename Load, typename Weight>
__device__ __forceinline__ void conv_block(idx_t oh0, idx_t ow0, const Load& load, const Weight& weight,
                                           float (&acc)[ROWS_][OUTS][CV]) {
  const idx_t h0 = oh0 * SH - PH, w0 = ow0 * SW - PW;
#pragma unroll
  for (int r = 0; r < Under<ROWS_>::R; ++r) {
    const idx_t h = h0 + r;
    if (!row_used<ROWS_>(r) || h < 0 || h >= IH) continue;
    raw_t seg[SEG][CV];
#pragma unroll
    for (int m = 0; m < SEG; ++m) {
      if (!column_used(m)) continue;
      if (EDGE && (w0 + m < 0 || w0 + m >= IW)) {
#pragma unroll
        for (int k = 0; k < CV; ++k) seg[m][k] = 0;
      } else {
        load(h, w0 + m, seg[m]);
      }
    }
#pragma unroll
    for (int o = 0; o < ROWS_; ++o) {
      // Kernel row i of output row o reads input row r when r == o * SH + i * DH.
      const int d = r - o * (int)SH;
      if (d < 0 || d % (int)DH != 0 || d / (int)DH >= KH) continue;
      const int i = d / (int)DH;
#pragma unroll
      for (int j = 0; j < OUTS; ++j) {
#pragma unroll
        for (int l = 0; l < KW; ++l) {
          const int m = j * (int)SW + l * (int)DW;
          if (EDGE && (w0 + m < 0 || w0 + m >= IW)) continue;
#pragma unroll
          for (int k = 0; k < CV; ++k) acc[o][j][k] = fmaf(weight(i, l, k), Bits<in_t>::to_f(seg[m][k]), acc[o][j][k]);
        }
      }
    }
  }
}

// The same sums, every tap of every output read from memory where it is used (L1 serves repeats).
template <bool EDGE, typename Load, typename Weight>
__device__ __forceinline__ void conv_direct(idx_t oh, idx_t ow0, const Load& load, const Weight& weight,
                                            float (&acc)[1][OUTS][CV]) {
#pragma unroll
  for (int j = 0; j < OUTS; ++j) {
    const idx_t w0 = (ow0 + j) * SW - PW;
#pragma unroll
    for (int i = 0; i < KH; ++i) {
      const idx_t h = oh * SH - PH + i * DH;
      if (h < 0 || h >= IH) continue;
#pragma unroll
      for (int l = 0; l < KW; ++l) {
        const idx_t w = w0 + l * DW;
        if (EDGE && (w < 0 || w >= IW)) continue;
        raw_t v[CV];
        load(h, w, v);
#pragma unroll
        for (int k = 0; k < CV; ++k) acc[0][j][k] = fmaf(weight(i, l, k), Bits<in_t>::to_f(v[k]), acc[0][j][k]);
      }
    }
  }
}

// Whether the columns under outputs ow0 .. ow0 + OUTS - 1 all lie inside the input.
__device__ __forceinline__ bool columns_inside(idx_t ow0) {
  const idx_t w0 = ow0 * SW - PW;
  return w0 >= 0 && w0 + SEG <= IW;
}

// Output rows [oh0, oh0 + ROWS_) x columns [ow0, ow0 + OUTS) of one NCHW plane, rounded once; those
// past the output are not written. Stores of STORE_W elements where the row allows.
template <int ROWS_>
__device__ __forceinline__ void store_plane(out_t* yp, idx_t oh0, idx_t ow0, const float (&acc)[ROWS_][OUTS][1]) {
#pragma unroll
  for (int o = 0; o < ROWS_; ++o) {
    const idx_t oh = oh0 + o;
    if (oh >= OH) break;
    out_t* row = yp + (long long)oh * OW + ow0;
#pragma unroll
    for (int j = 0; j < OUTS; j += STORE_W) {
      if (ow0 + j >= OW) break;
      raw_t r[STORE_W];
#pragma unroll
      for (int k = 0; k < STORE_W; ++k) r[k] = Bits<out_t>::from_f(acc[o][j + k][0]);
      store_raw<STORE_W>(row + j, r);
    }
  }
}
//@section kRowsKernel
//@ Strategies 0 (direct) and 1 (blocked), contiguous layout, after KJIT_PARAMS and KJIT_COMPUTE.

// A thread per ROWS x OUTS outputs of one plane; consecutive threads take consecutive groups along a
// row, so their windows are neighbours and L1 serves the overlap.
constexpr idx_t G = (OW + OUTS - 1) / OUTS;
constexpr idx_t RT = (OH + ROWS - 1) / ROWS;
template <bool EDGE>
__device__ __forceinline__ void run(const in_t* xp, const raw_t* wc, idx_t oh0, idx_t ow0, float (&acc)[ROWS][OUTS][1]) {
  auto load = [&](idx_t h, idx_t w, raw_t (&v)[1]) { load_raw<1, false>(xp + (long long)h * IW + w, v); };
  auto weight = [&](int i, int l, int) { return Bits<in_t>::to_f(__ldg(wc + i * KW + l)); };
  KJIT_COMPUTE;
}
extern "C" __global__ void __launch_bounds__(THREADS) kjit_depthwise_conv(KJIT_PARAMS) {
  const long long item = (long long)blockIdx.x * THREADS + threadIdx.x;
  if (item >= (long long)N_ * C_ * RT * G) return;
  const idx_t g = (idx_t)(item % G);
  long long r = item / G;
  const idx_t rt = (idx_t)(r % RT);
  const long long plane = r / RT;
  const idx_t ch = (idx_t)(plane % C_);
  const idx_t oh0 = rt * ROWS, ow0 = g * OUTS;
  const in_t* xp = x + plane * ((long long)IH * IW);
  const raw_t* wc = reinterpret_cast<const raw_t*>(wt) + (long long)ch * (KH * KW);
  float acc[ROWS][OUTS][1];
  const float b0 = BIAS_OF(ch);
#pragma unroll
  for (int o = 0; o < ROWS; ++o)
#pragma unroll
    for (int j = 0; j < OUTS; ++j) acc[o][j][0] = b0;
  if (columns_inside(ow0)) run<false>(xp, wc, oh0, ow0, acc);
  else run<true>(xp, wc, oh0, ow0, acc);
  store_plane<ROWS>(y + plane * ((long long)OH * OW), oh0, ow0, acc);
}
//@section kChannelsLastKernel
//@ Strategies 0 and 1, channels_last, after KJIT_PARAMS and KJIT_COMPUTE.

// channels_last: a thread per CV channels x ROWS x OUTS outputs; consecutive threads take consecutive
// channel vectors, so every input position is one coalesced read per warp.
constexpr idx_t G = (OW + OUTS - 1) / OUTS;
constexpr idx_t RT = (OH + ROWS - 1) / ROWS;
constexpr idx_t CVS = C_ / CV;
template <bool EDGE>
__device__ __forceinline__ void run(const in_t* xn, const raw_t* wc, idx_t oh0, idx_t ow0, float (&acc)[ROWS][OUTS][CV]) {
  auto load = [&](idx_t h, idx_t w, raw_t (&v)[CV]) { load_raw<CV, false>(xn + ((long long)h * IW + w) * C_, v); };
  // Weights [C][KH][KW]: lane k's channel is KH * KW elements further on.
  auto weight = [&](int i, int l, int k) { return Bits<in_t>::to_f(__ldg(wc + k * (KH * KW) + i * KW + l)); };
  KJIT_COMPUTE;
}
extern "C" __global__ void __launch_bounds__(THREADS) kjit_depthwise_conv(KJIT_PARAMS) {
  const long long item = (long long)blockIdx.x * THREADS + threadIdx.x;
  if (item >= (long long)N_ * RT * G * CVS) return;
  const idx_t cvi = (idx_t)(item % CVS);
  long long r = item / CVS;
  const idx_t g = (idx_t)(r % G);
  r /= G;
  const idx_t rt = (idx_t)(r % RT);
  const long long n = r / RT;
  const idx_t oh0 = rt * ROWS, ow0 = g * OUTS;
  const in_t* xn = x + n * ((long long)IH * IW * C_) + (long long)cvi * CV;
  const raw_t* wc = reinterpret_cast<const raw_t*>(wt) + (long long)cvi * CV * (KH * KW);
  float acc[ROWS][OUTS][CV];
#pragma unroll
  for (int k = 0; k < CV; ++k) {
    const float b0 = BIAS_OF(cvi * CV + k);
#pragma unroll
    for (int o = 0; o < ROWS; ++o)
#pragma unroll
      for (int j = 0; j < OUTS; ++j) acc[o][j][k] = b0;
  }
  if (columns_inside(ow0)) run<false>(xn, wc, oh0, ow0, acc);
  else run<true>(xn, wc, oh0, ow0, acc);
#pragma unroll
  for (int o = 0; o < ROWS; ++o) {
    const idx_t oh = oh0 + o;
    if (oh >= OH) break;
#pragma unroll
    for (int j = 0; j < OUTS; ++j) {
      const idx_t ow = ow0 + j;
      if (ow >= OW) break;
      raw_t v[CV];
#pragma unroll
      for (int k = 0; k < CV; ++k) v[k] = Bits<out_t>::from_f(acc[o][j][k]);
      store_raw<CV>(y + ((n * OH + oh) * (long long)OW + ow) * C_ + (long long)cvi * CV, v);
    }
  }
}
//@section kStagedKernel
//@ Strategy 2 (staged), after TILE_ROWS and KJIT_PARAMS.

// A block per TILE_ROWS output rows of one plane: the input rows under them, whole, staged in shared
// memory with VEC-element loads along W (rows outside the input are not loaded and never read); then
// each thread computes OUTS consecutive outputs of a row from there, holding the columns under them
// per kernel row in registers.
constexpr idx_t G = (OW + OUTS - 1) / OUTS;
constexpr idx_t RT = (OH + TILE_ROWS - 1) / TILE_ROWS;
constexpr int IR = Under<TILE_ROWS>::R;
constexpr int SEGS = (int)(IW / VEC);
template <bool EDGE>
__device__ __forceinline__ void run(const raw_t* tile, idx_t hbase, const raw_t* wc, idx_t oh, idx_t ow0,
                                    float (&acc)[1][OUTS][1]) {
  auto load = [&](idx_t h, idx_t w, raw_t (&v)[1]) { v[0] = tile[(long long)(h - hbase) * IW + w]; };
  auto weight = [&](int i, int l, int) { return Bits<in_t>::to_f(__ldg(wc + i * KW + l)); };
  conv_block<1, EDGE>(oh, ow0, load, weight, acc);
}
extern "C" __global__ void __launch_bounds__(THREADS) kjit_depthwise_conv(KJIT_PARAMS) {
  extern __shared__ __align__(16) unsigned char smem[];
  raw_t* tile = reinterpret_cast<raw_t*>(smem);  // [IR][IW]
  const long long b = blockIdx.x;
  const idx_t rt = (idx_t)(b % RT);
  const long long plane = b / RT;
  const idx_t ch = (idx_t)(plane % C_);
  const in_t* xp = x + plane * ((long long)IH * IW);
  const idx_t oh_first = rt * TILE_ROWS, hbase = oh_first * SH - PH;
  for (int e = threadIdx.x; e < IR * SEGS; e += THREADS) {
    const int seg = e % SEGS, ir = e / SEGS;
    const idx_t h = hbase + ir;
    if (h < 0 || h >= IH) continue;
    raw_t v[VEC];
    load_raw<VEC, HINT>(xp + (long long)h * IW + (idx_t)seg * VEC, v);
    typedef typename RawOf<sizeof(raw_t) * VEC>::T R;
    union { R rr; raw_t u[VEC]; } w;
#pragma unroll
    for (int k = 0; k < VEC; ++k) w.u[k] = v[k];
    *reinterpret_cast<R*>(tile + (long long)ir * IW + seg * VEC) = w.rr;
  }
  __syncthreads();
  const raw_t* wc = reinterpret_cast<const raw_t*>(wt) + (long long)ch * (KH * KW);
  const float b0 = BIAS_OF(ch);
  out_t* yp = y + plane * ((long long)OH * OW);
  for (int it = threadIdx.x; it < TILE_ROWS * G; it += THREADS) {
    const idx_t oh = oh_first + it / G, ow0 = (idx_t)(it % G) * OUTS;
    if (oh >= OH) break;
    float acc[1][OUTS][1];
#pragma unroll
    for (int j = 0; j < OUTS; ++j) acc[0][j][0] = b0;
    if (columns_inside(ow0)) run<false>(tile, hbase, wc, oh, ow0, acc);
    else run<true>(tile, hbase, wc, oh, ow0, acc);
    store_plane<1>(yp, oh, ow0, acc);
  }
}
//@section kSlideKernel
//@ Strategy 3, slide (NCHW): a thread per ROWS x OUTS outputs of one plane, consecutive lanes taking
//@ consecutive OUTS-wide groups along a row. It walks down the input rows under its outputs once, in
//@ order: each row's V = OUTS * SW columns starting at its first output's are loaded in VEC-element
//@ loads (aligned: VEC divides W and V), the other columns of its segment (the halo) come from the lanes
//@ holding them by shuffle, or from memory where that lane is in another warp or another row tile; the
//@ row's taps go to every output row it is a kernel row of (at most KH sums are open at once), and an
//@ output row is stored as soon as its last kernel row is in. Weights and bias are read once into
//@ registers. Every lane of a warp runs every shuffle (threads past the end compute on item 0 and store
//@ nothing); taps in the padding are skipped by a predicate, not by a branch.

constexpr idx_t G = (OW + OUTS - 1) / OUTS;
constexpr idx_t RT = (OH + ROWS - 1) / ROWS;
constexpr int V = OUTS * (int)SW;        // the columns a thread loads
constexpr int NR = Under<ROWS>::R;       // input rows under a thread's outputs
// Rows whose loads are issued ahead of the row being summed (without it ptxas issued each row's load
// after the previous row's sums: one 16-byte load in flight a thread).
constexpr int PF = NR < 4 ? NR : 4;
__device__ __forceinline__ raw_t shfl_raw(raw_t v, int src) {
  return (raw_t)__shfl_sync(0xffffffffu, (unsigned)v, src);
}
__device__ __forceinline__ constexpr int floor_div(int a, int b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }
__device__ __forceinline__ void slide(const in_t* __restrict__ x, const in_t* __restrict__ wt,
                                      const in_t* __restrict__ bias, out_t* __restrict__ y) {
  const long long item0 = (long long)blockIdx.x * THREADS + threadIdx.x;
  const bool active = item0 < (long long)N_ * C_ * RT * G;
  const long long item = active ? item0 : 0;
  const idx_t g = (idx_t)(item % G);
  const long long r0 = item / G;
  const idx_t rt = (idx_t)(r0 % RT);
  const long long plane = r0 / RT;
  const idx_t ch = (idx_t)(plane % C_);
  const int lane = (int)(threadIdx.x & 31);
  const idx_t oh0 = rt * ROWS, cs = g * OUTS * SW, c0 = cs - PW;  // first loaded column, segment column 0
  const in_t* xp = x + plane * ((long long)IH * IW);
  out_t* yp = y + plane * ((long long)OH * OW);
  const raw_t* wc = reinterpret_cast<const raw_t*>(wt) + (long long)ch * (KH * KW);
  float wr[KH][KW];
#pragma unroll
  for (int i = 0; i < KH; ++i)
#pragma unroll
    for (int l = 0; l < KW; ++l) wr[i][l] = Bits<in_t>::to_f(__ldg(wc + i * KW + l));
  const float b0 = BIAS_OF(ch);
  bool inside[SEG];  // segment column m lies inside the input (else its taps are padding: skipped)
#pragma unroll
  for (int m = 0; m < SEG; ++m) inside[m] = c0 + m >= 0 && c0 + m < IW;
  float acc[ROWS][OUTS];
#pragma unroll
  for (int o = 0; o < ROWS; ++o)
#pragma unroll
    for (int j = 0; j < OUTS; ++j) acc[o][j] = b0;
  // Row rr's V columns, in VEC-element loads (zeros outside the input: never summed).
  auto load_row = [&](int rr, raw_t (&core)[V]) {
    const idx_t h = oh0 * SH - PH + rr;
    const bool hok = h >= 0 && h < IH;
#pragma unroll
    for (int k = 0; k < V; k += VEC) {
      raw_t v[VEC];
      if (hok && cs + k + VEC <= IW) {
        load_raw<VEC, HINT>(xp + (long long)h * IW + cs + k, v);
      } else {
#pragma unroll
        for (int e = 0; e < VEC; ++e) v[e] = 0;
      }
#pragma unroll
      for (int e = 0; e < VEC; ++e) core[k + e] = v[e];
    }
  };
  raw_t ring[PF][V];
#pragma unroll
  for (int rr = 0; rr < PF; ++rr)
    if (row_used<ROWS>(rr)) load_row(rr, ring[rr]);
#pragma unroll
  for (int rr = 0; rr < NR; ++rr) {
    if (!row_used<ROWS>(rr)) continue;
    const idx_t h = oh0 * SH - PH + rr;
    const bool hok = h >= 0 && h < IH;
    const in_t* xr = xp + (long long)h * IW;
    raw_t core[V];
#pragma unroll
    for (int e = 0; e < V; ++e) core[e] = ring[rr % PF][e];
    if (rr + PF < NR && row_used<ROWS>(rr + PF)) load_row(rr + PF, ring[rr % PF]);
    raw_t seg[SEG];
#pragma unroll
    for (int m = 0; m < SEG; ++m) {
      if (!column_used(m)) continue;
      const int rel = m - (int)PW, q = floor_div(rel, V), e = rel - q * V;
      if (q == 0) {
        seg[m] = core[e];
      } else {
        raw_t v = shfl_raw(core[e], (lane + q) & 31);
        const bool ok = lane + q >= 0 && lane + q < 32 && g + q >= 0 && g + q < G;
        if (!ok && hok && inside[m]) v = __ldg(reinterpret_cast<const raw_t*>(xr + c0 + m));
        seg[m] = v;
      }
    }
    if (hok) {
#pragma unroll
      for (int o = 0; o < ROWS; ++o) {
        const int d = rr - o * (int)SH;
        if (d < 0 || d % (int)DH != 0 || d / (int)DH >= KH) continue;
        const int i = d / (int)DH;
#pragma unroll
        for (int j = 0; j < OUTS; ++j)
#pragma unroll
          for (int l = 0; l < KW; ++l) {
            const int m = j * (int)SW + l * (int)DW;
            if (inside[m]) acc[o][j] = fmaf(wr[i][l], Bits<in_t>::to_f(seg[m]), acc[o][j]);
          }
      }
    }
    // Output rows whose last kernel row this was: stored now.
#pragma unroll
    for (int o = 0; o < ROWS; ++o) {
      if (rr != o * (int)SH + (KH - 1) * (int)DH) continue;
      const idx_t oh = oh0 + o;
      if (!active || oh >= OH) continue;
      out_t* row = yp + (long long)oh * OW + g * OUTS;
#pragma unroll
      for (int j = 0; j < OUTS; j += STORE_W) {
        if (g * OUTS + j >= OW) break;
        raw_t st[STORE_W];
#pragma unroll
        for (int k = 0; k < STORE_W; ++k) st[k] = Bits<out_t>::from_f(acc[o][j + k]);
        store_raw<STORE_W>(row + j, st);
      }
    }
  }
}
//@section kSlideEntry
//@ Strategy 3's kernel, after kSlideKernel, KJIT_PARAMS and KJIT_BIAS (the bias pointer, or nullptr where the
//@ op has none: cudnn_convolution).
extern "C" __global__ void __launch_bounds__(THREADS) kjit_depthwise_conv(KJIT_PARAMS) {
  slide(x, wt, KJIT_BIAS, y);
}
