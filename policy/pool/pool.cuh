// The CUDA of the pool family's kernels, in sections that pool.cc embeds (kjit_embed_cuda, at
// build time) and writes after policy/src/cuda/common.cuh's pieces, with the problem's sizes and the
// design point's knobs defined ahead of them as macros and constants. Each section is embedded byte for
// byte (a blank line after a marker is part of it); lines starting "//@" document it and are not embedded.
//@section kPrelude
//@ Device code every strategy shares, after codegen::kElementAccess, codegen::kRawAccess and the key's
//@ constants.
__device__ __forceinline__ void store_index(long long* p, long long v) {
  if (HINT) __stcs(p, v);
  else *p = v;
}
// Two indices at p, 16-byte aligned.
__device__ __forceinline__ void store_index2(long long* p, long long a, long long b) {
  longlong2 v;
  v.x = a;
  v.y = b;
  if (HINT) __stcs(reinterpret_cast<longlong2*>(p), v);
  else *reinterpret_cast<longlong2*>(p) = v;
}

// The first position of a window at or past 0, as PyTorch's `while (start < 0) start += dilation`.
__device__ __forceinline__ idx_t first_in(idx_t start, idx_t dilation) {
  return start >= 0 ? start : start + (-start + dilation - 1) / dilation * dilation;
}

// Pools the window of output (od, oh, ow) over CV lanes (channels). load(i, t, h, w, v) fetches
// the CV raw elements at input (t, h, w), i being the window frame (t = t0 + i * DT). Results: the
// raw output bits and, for max, the flat index within the input plane.
template <typename Load>
__device__ __forceinline__ void pool_window(idx_t od, idx_t oh, idx_t ow, const Load& load, raw_t (&res)[CV],
                                            long long (&ind)[CV]) {
  const idx_t t0 = od * ST - PT, h0 = oh * SH - PH, w0 = ow * SW - PW;
#if IS_MAX
  float best[CV];
  const long long start = EMPTY_INDEX_ZERO ? 0LL
      : ((long long)first_in(t0, DT) * IH + first_in(h0, DH)) * IW + first_in(w0, DW);
#pragma unroll
  for (int k = 0; k < CV; ++k) {
    best[k] = -KJIT_INF;
    res[k] = Bits<in_t>::from_f(-KJIT_INF);
    ind[k] = start;
  }
  // Window order (t, h, w): PyTorch's; clipping by index keeps it.
#pragma unroll
  for (int i = 0; i < KT; ++i) {
    const idx_t t = t0 + i * DT;
    if (t < 0 || t >= ID) continue;
#pragma unroll
    for (int j = 0; j < KH; ++j) {
      const idx_t h = h0 + j * DH;
      if (h < 0 || h >= IH) continue;
#pragma unroll
      for (int l = 0; l < KW; ++l) {
        const idx_t w = w0 + l * DW;
        if (w < 0 || w >= IW) continue;
        raw_t v[CV];
        load(i, t, h, w, v);
#pragma unroll
        for (int k = 0; k < CV; ++k) {
          const float f = Bits<in_t>::to_f(v[k]);
          if (f > best[k] || f != f) {
            best[k] = f;
            res[k] = v[k];
            ind[k] = ((long long)t * IH + h) * IW + w;
          }
        }
      }
    }
  }
#else
  const idx_t te = min(t0 + KT, ID + PT), he = min(h0 + KH, IH + PH), we = min(w0 + KW, IW + PW);
  const int pool_size = (int)((te - t0) * (he - h0) * (we - w0));
  const idx_t ts = max(t0, (idx_t)0), hs = max(h0, (idx_t)0), ws = max(w0, (idx_t)0);
  const idx_t tc = min(te, ID), hc = min(he, IH), wc = min(we, IW);
  float sum[CV];
#pragma unroll
  for (int k = 0; k < CV; ++k) sum[k] = 0.f;
#pragma unroll
  for (int i = 0; i < KT; ++i) {
    const idx_t t = t0 + i;
    if (t < 0 || t >= ID) continue;
#pragma unroll
    for (int j = 0; j < KH; ++j) {
      const idx_t h = h0 + j;
      if (h < 0 || h >= IH) continue;
#pragma unroll
      for (int l = 0; l < KW; ++l) {
        const idx_t w = w0 + l;
        if (w < 0 || w >= IW) continue;
        raw_t v[CV];
        load(i, t, h, w, v);
#pragma unroll
        for (int k = 0; k < CV; ++k) sum[k] += Bits<in_t>::to_f(v[k]);
      }
    }
  }
  const bool empty = ts >= tc || hs >= hc || ws >= wc;
  const int divide = DIVISOR != 0 ? DIVISOR : COUNT_INCLUDE_PAD ? pool_size : (int)((tc - ts) * (hc - hs) * (wc - ws));
#pragma unroll
  for (int k = 0; k < CV; ++k) {
    res[k] = Bits<in_t>::from_f(empty ? 0.f : sum[k] / (float)divide);
    ind[k] = 0;
  }
#endif
}
//@section kDirectKernel
//@ Strategy 0 (direct), contiguous layout, after KJIT_ENTRY and KJIT_INDEX_STORE.

// A thread per OUTS consecutive outputs of a row; threads in a warp take consecutive groups of a
// row, so their windows are neighbours and L1 serves the overlap.
constexpr idx_t G = (OW + OUTS - 1) / OUTS;
KJIT_ENTRY
  const long long item = (long long)blockIdx.x * THREADS + threadIdx.x;
  if (item >= (long long)N_ * C_ * OD * OH * G) return;
  const idx_t g = (idx_t)(item % G);
  long long r = item / G;
  const idx_t oh = (idx_t)(r % OH);
  r /= OH;
  const idx_t od = (idx_t)(r % OD);
  const long long plane = r / OD;
  const in_t* xp = x + plane * ((long long)ID * IH * IW);
  const long long row_at = ((plane * OD + od) * OH + oh) * (long long)OW;
  auto load = [&](int, idx_t t, idx_t h, idx_t w, raw_t (&v)[CV]) { load_raw<1, false>(xp + ((t * IH) + h) * IW + w, v); };
#pragma unroll
  for (int o = 0; o < OUTS; ++o) {
    const idx_t ow = g * OUTS + o;
    if (ow >= OW) break;
    raw_t r_raw[CV];
    long long r_ind[CV];
    pool_window(od, oh, ow, load, r_raw, r_ind);
    const long long o_at = row_at + ow;
    store_raw<1>(y + o_at, r_raw);
#pragma unroll
    for (int k = 0; k < CV; ++k) { KJIT_INDEX_STORE }
  }
}
//@section kChannelsLastKernel
//@ Strategy 0 (direct), channels_last, after KJIT_ENTRY and KJIT_INDEX_STORE.

// channels_last: a thread per CV channels x OUTS consecutive outputs of a row; consecutive threads
// take consecutive channel vectors, so each window position is one coalesced read per warp.
constexpr idx_t G = (OW + OUTS - 1) / OUTS;
constexpr idx_t CVS = C_ / CV;
KJIT_ENTRY
  const long long item = (long long)blockIdx.x * THREADS + threadIdx.x;
  if (item >= (long long)N_ * OD * OH * G * CVS) return;
  const idx_t cvi = (idx_t)(item % CVS);
  long long r = item / CVS;
  const idx_t g = (idx_t)(r % G);
  r /= G;
  const idx_t oh = (idx_t)(r % OH);
  r /= OH;
  const idx_t od = (idx_t)(r % OD);
  const long long n = r / OD;
  const in_t* xn = x + n * ((long long)ID * IH * IW * C_) + cvi * CV;
  auto load = [&](int, idx_t t, idx_t h, idx_t w, raw_t (&v)[CV]) {
    load_raw<CV, false>(xn + ((long long)((t * IH) + h) * IW + w) * C_, v);
  };
#pragma unroll
  for (int o = 0; o < OUTS; ++o) {
    const idx_t ow = g * OUTS + o;
    if (ow >= OW) break;
    raw_t r_raw[CV];
    long long r_ind[CV];
    pool_window(od, oh, ow, load, r_raw, r_ind);
    const long long o_at = (((n * OD + od) * OH + oh) * (long long)OW + ow) * C_ + cvi * CV;
    store_raw<CV>(y + o_at, r_raw);
#pragma unroll
    for (int k = 0; k < CV; ++k) { KJIT_INDEX_STORE }
  }
}
//@section kSlidingKernel
//@ Strategies 2 (sliding) and 3 (warp rows), after FR, RES_IS_BEST, FLOAT_STORE (max pooling of floats:
//@ stores from the best value itself), WARP_ROWS, STEP_DIVIDES_32 and, for sliding, SEG_FIXED and X_ALIGNED.
#if FLOAT_STORE
// N consecutive floats at p (aligned to their total size), as a float vector type.
template <int N> struct FloatsOf;
template <> struct FloatsOf<1> { typedef float T; };
template <> struct FloatsOf<2> { typedef float2 T; };
template <> struct FloatsOf<4> { typedef float4 T; };
template <int N>
__device__ __forceinline__ void store_floats(float* p, const float (&v)[N]) {
  typedef typename FloatsOf<N>::T F;
  union { F f; float e[N]; } w;
#pragma unroll
  for (int k = 0; k < N; ++k) w.e[k] = v[k];
  if (HINT) __stcs(reinterpret_cast<F*>(p), w.f);
  else *reinterpret_cast<F*>(p) = w.f;
}
#endif
#if !WARP_ROWS

// A thread per FR x ROWS x OUTS outputs of one plane (FR consecutive output frames, ROWS rows, OUTS
// consecutive outputs along W); threads in a warp take consecutive groups along W. The thread walks
// the IT x IR input rows under its outputs once each (frames outer, rows inner), loading each row's
// segment of SPAN columns once, and folds every element into each output whose window holds it. The
// segment: SEG_FIXED, HEAD scalars up to a VEC boundary, MID aligned vectors, TAIL scalars (VEC divides
// IW and OUTS * SW and x is aligned, so the segment's offset from the boundary is a constant); else NV
// aligned vectors from the boundary at or before it (rows of odd width start anywhere), its elements
// picked out by the offset computed per row. Each output sees its window in (t, h, w)
// order, as PyTorch's loops: the same maxima, ties, NaN and indices, the same float sums.
constexpr idx_t G = (OW + OUTS - 1) / OUTS, RT = (OH + ROWS - 1) / ROWS, FT = (OD + FR - 1) / FR;
constexpr int IT = (int)((FR - 1) * ST + (KT - 1) * DT + 1);
constexpr int IR = (int)((ROWS - 1) * SH + (KH - 1) * DH + 1);
constexpr int SPAN = (int)((OUTS - 1) * SW + (KW - 1) * DW + 1);
constexpr int HEAD = (int)(PW % VEC) < SPAN ? (int)(PW % VEC) : SPAN;
constexpr int MID = (SPAN - HEAD) / VEC, TAIL = (SPAN - HEAD) % VEC;
// SEG_FIXED 0 (codegen 3: VEC not dividing IW or OUTS x SW, or an input not aligned to VEC elements):
// the segment's offset from a VEC boundary changes from row to row, known at run time only; NV aligned
// vectors cover a segment at any offset.
constexpr int NV = (SPAN + 2 * (VEC - 1)) / VEC;
constexpr long long NUMEL = (long long)N_ * C_ * ID * IH * IW;
// Whether input position i of a thread's extent is window position j of its output o (compile time).
__device__ __forceinline__ constexpr bool in_window(int i, int o, int s, int d, int k) {
  return i - o * s >= 0 && (i - o * s) % d == 0 && (i - o * s) / d < k;
}
KJIT_ENTRY
  const long long item = (long long)blockIdx.x * THREADS + threadIdx.x;
  if (item >= (long long)N_ * C_ * FT * RT * G) return;
  const idx_t g = (idx_t)(item % G);
  long long r_ = item / G;
  const idx_t rt = (idx_t)(r_ % RT);
  r_ /= RT;
  const idx_t ft = (idx_t)(r_ % FT);
  const long long plane = r_ / FT;
  const in_t* xp = x + plane * ((long long)ID * IH * IW);
  const idx_t od0 = ft * FR, oh0 = rt * ROWS, ow0 = g * OUTS;
  const idx_t tb = od0 * ST - PT, hb = oh0 * SH - PH, wb = ow0 * SW - PW;
  // x's address past the VEC boundary at or before it, in elements (x is aligned to its element).
  const long long mis = X_ALIGNED ? 0 : (long long)((reinterpret_cast<unsigned long long>(x) / sizeof(in_t)) % VEC);
#else

// Warp rows: as the sliding strategy (2), a thread per FR x ROWS x OUTS outputs of one plane
// walking the input rows under them once and folding each element into the outputs whose windows
// hold it, in window order; but a warp's 32 lanes take 32 consecutive groups of one output row (the
// row's groups padded to whole warps: lanes past its end compute nothing but take part in the
// exchanges) and read each input row's segment under their groups together: lane l loads columns
// WB + 32 j + l (j < NL), each load instruction one contiguous run (128 bytes of f32), each element
// once. A lane's SPAN columns then come from the lanes that loaded them by shuffles. Scalar loads,
// rows of any width and alignment: the odd rows where a thread's own vectors do not fit, and where
// its scalar loads, STEP elements apart across the warp, take STEP times the sectors per load.
constexpr idx_t G = (OW + OUTS - 1) / OUTS, RT = (OH + ROWS - 1) / ROWS, FT = (OD + FR - 1) / FR;
constexpr idx_t GW = (G + 31) / 32 * 32;  // groups per output row, whole warps
constexpr int IT = (int)((FR - 1) * ST + (KT - 1) * DT + 1);
constexpr int IR = (int)((ROWS - 1) * SH + (KH - 1) * DH + 1);
constexpr int SPAN = (int)((OUTS - 1) * SW + (KW - 1) * DW + 1);
constexpr int STEP = (int)(OUTS * SW);     // columns from a lane's segment to the next lane's
constexpr int WSPAN = 31 * STEP + SPAN;    // the warp's segment
constexpr int NL = (WSPAN + 31) / 32;      // its loads per lane
// Whether input position i of a thread's extent is window position j of its output o (compile time).
__device__ __forceinline__ constexpr bool in_window(int i, int o, int s, int d, int k) {
  return i - o * s >= 0 && (i - o * s) % d == 0 && (i - o * s) / d < k;
}
__device__ __forceinline__ raw_t lane_value(raw_t v, int src) {
  return (raw_t)__shfl_sync(0xffffffffu, (unsigned)v, src);
}
KJIT_ENTRY
  const long long item = (long long)blockIdx.x * THREADS + threadIdx.x;
  // Whole warps leave together (GW and THREADS are multiples of 32): the shuffles below see all lanes.
  if (item >= (long long)N_ * C_ * FT * RT * GW) return;
  const idx_t g = (idx_t)(item % GW);
  long long r_ = item / GW;
  const idx_t rt = (idx_t)(r_ % RT);
  r_ /= RT;
  const idx_t ft = (idx_t)(r_ % FT);
  const long long plane = r_ / FT;
  const in_t* xp = x + plane * ((long long)ID * IH * IW);
  const int lane = (int)(threadIdx.x % 32);
  const bool active = g < G;
  const idx_t od0 = ft * FR, oh0 = rt * ROWS, ow0 = g * OUTS;
  const idx_t tb = od0 * ST - PT, hb = oh0 * SH - PH, wb = ow0 * SW - PW;
  const idx_t wwb = wb - (idx_t)lane * STEP;  // the warp's first column (lane 0's wb)
#endif
#if IS_MAX
  float best[FR][ROWS][OUTS];
#if !RES_IS_BEST
  raw_t res[FR][ROWS][OUTS];
#endif
  idx_t at[FR][ROWS][OUTS];
#pragma unroll
  for (int f = 0; f < FR; ++f)
#pragma unroll
    for (int r = 0; r < ROWS; ++r)
#pragma unroll
      for (int o = 0; o < OUTS; ++o) {
        best[f][r][o] = -KJIT_INF;
#if !RES_IS_BEST
        res[f][r][o] = Bits<in_t>::from_f(-KJIT_INF);
#endif
        at[f][r][o] = (first_in(tb + f * ST, DT) * IH + first_in(hb + r * SH, DH)) * IW + first_in(wb + o * SW, DW);
      }
#else
  float sum[FR][ROWS][OUTS];
#pragma unroll
  for (int f = 0; f < FR; ++f)
#pragma unroll
    for (int r = 0; r < ROWS; ++r)
#pragma unroll
      for (int o = 0; o < OUTS; ++o) sum[f][r][o] = 0.f;
#endif
#pragma unroll
  for (int it = 0; it < IT; ++it) {
    const idx_t t = tb + it;
    if (t < 0 || t >= ID) continue;
#pragma unroll
    for (int ir = 0; ir < IR; ++ir) {
      const idx_t h = hb + ir;
      if (h < 0 || h >= IH) continue;
      const in_t* rp = xp + (t * IH + h) * IW;
      raw_t seg[SPAN];
#pragma unroll
      for (int e = 0; e < SPAN; ++e) seg[e] = 0;
#if WARP_ROWS
      {
        // Row and frame tests above are the same for the whole warp (one plane, frame and row tile).
        raw_t ld[NL];
#pragma unroll
        for (int j = 0; j < NL; ++j) {
          const idx_t w = wwb + j * 32 + lane;
          ld[j] = 0;
          if (j * 32 + lane < WSPAN && w >= 0 && w < IW) { raw_t v[1]; load_raw<1, false>(rp + w, v); ld[j] = v[0]; }
        }
        // seg[e] is the warp's column c = lane * STEP + e: lane c % 32's ld[c / 32].
#if STEP_DIVIDES_32
        // STEP divides 32: seg[STEP a + b] of lane l is column STEP (l + a) + b, in load
        // j = STEP (l + a) / 32 of lane STEP (l + a) % 32 + b. Round (a, r) hands each lane the column
        // b = (r + j) % STEP of its group l + a: the STEP lanes whose groups sit at the same source lane
        // (their loads j apart) take different b, so each source serves one lane, sending the load that
        // lane needs. STEP rounds give every lane the STEP columns of group l + a: STEP x ceil(SPAN / STEP)
        // shuffles a row (a shuffle per column and load it may be in would take about STEP^2 more).
        const int b_src = lane % STEP, base = lane - b_src;
#pragma unroll
        for (int a = 0; a * STEP < SPAN; ++a) {
          const int jd = (STEP * (lane + a)) / 32;          // the load holding this lane's group l + a
          const int jlo = (STEP * a - base + 63) / 32 - 1;  // the first load of the groups this lane serves
#pragma unroll
          for (int r = 0; r < STEP; ++r) {
            const int js = jlo + ((b_src - r - jlo) & (STEP - 1));  // the one its reader wants
            raw_t send = 0;
#pragma unroll
            for (int j = max((STEP * a + 32) / 32 - 1, 0); j <= min((STEP * a + 31) / 32 + STEP - 1, NL - 1); ++j)
              if (j == js) send = ld[j];
            const int bd = (r + jd) & (STEP - 1);
            const raw_t got = lane_value(send, (STEP * (lane + a)) % 32 + bd);
#pragma unroll
            for (int b = 0; b < STEP; ++b)
              if (b == bd && a * STEP + b < SPAN) seg[a * STEP + b] = got;
          }
        }
      }
#else
#pragma unroll
        for (int e = 0; e < SPAN; ++e) {
          if (e >= STEP) {
            // The next lane's seg[e - STEP], but for lane 31, whose column (known at compile time)
            // no lane's segment has yet.
            const raw_t next = lane_value(seg[e - STEP], (lane + 1) & 31);
            const raw_t last = lane_value(ld[(31 * STEP + e) / 32], (31 * STEP + e) % 32);
            seg[e] = lane == 31 ? last : next;
          } else {
            // c / 32 varies over the warp: a shuffle from each load it can be in, the lane's kept
            // (a register indexed at run time would go to local memory).
            const int c = lane * STEP + e;
            raw_t v = 0;
#pragma unroll
            for (int j = e / 32; j <= (31 * STEP + e) / 32; ++j) {
              const raw_t s = lane_value(ld[j], c % 32);
              if (c / 32 == j) v = s;
            }
            seg[e] = v;
          }
        }
      }
#endif
#else
#if SEG_FIXED
#pragma unroll
      for (int e = 0; e < HEAD; ++e) {
        const idx_t w = wb + e;
        if (w >= 0 && w < IW) { raw_t v[1]; load_raw<1, false>(rp + w, v); seg[e] = v[0]; }
      }
#pragma unroll
      for (int m = 0; m < MID; ++m) {
        const idx_t w = wb + HEAD + m * VEC;  // a multiple of VEC, and IW is: wholly inside or outside
        if (w >= 0 && w < IW) {
          raw_t v[VEC];
          load_raw<VEC, false>(rp + w, v);
#pragma unroll
          for (int k = 0; k < VEC; ++k) seg[HEAD + m * VEC + k] = v[k];
        }
      }
#pragma unroll
      for (int e = SPAN - TAIL; e < SPAN; ++e) {
        const idx_t w = wb + e;
        if (w >= 0 && w < IW) { raw_t v[1]; load_raw<1, false>(rp + w, v); seg[e] = v[0]; }
      }
#else
      {
        // The segment's columns inside the row, [lo, hi) as element offsets from x, and the VEC
        // boundary (in memory, not in the row) at or before its first column: NV aligned vectors from
        // there hold it whatever the row's alignment. A vector holding none of [lo, hi) is not loaded;
        // one reaching outside the tensor (its first or last vector) is read element by element, only
        // its elements in [lo, hi). Columns outside the row (the neighbouring rows' elements) are
        // never folded (the w test below).
        const long long row0 = plane * ((long long)ID * IH * IW) + (long long)(t * IH + h) * IW;
        const long long lo = row0 + max(wb, (idx_t)0), hi = row0 + min(wb + (idx_t)SPAN, IW);
        const long long first = row0 + wb + mis;                     // from the VEC boundary at or before x
        const long long v0 = (first & ~(long long)(VEC - 1)) - mis;  // floored to VEC (first may be < 0)
        const int off = (int)(first & (VEC - 1));                  // the segment's start within the vectors
        raw_t buf[NV * VEC];
#pragma unroll
        for (int m = 0; m < NV; ++m) {
          const long long vs = v0 + m * VEC;
#pragma unroll
          for (int k = 0; k < VEC; ++k) buf[m * VEC + k] = 0;
          if (vs + VEC <= lo || vs >= hi) continue;
          if (vs >= 0 && vs + VEC <= NUMEL) {
            raw_t v[VEC];
            load_raw<VEC, false>(x + vs, v);
#pragma unroll
            for (int k = 0; k < VEC; ++k) buf[m * VEC + k] = v[k];
          } else {
#pragma unroll
            for (int k = 0; k < VEC; ++k)
              if (vs + k >= lo && vs + k < hi) { raw_t v[1]; load_raw<1, false>(x + vs + k, v); buf[m * VEC + k] = v[0]; }
          }
        }
        // seg[e] = buf[off + e], by selects (off is known at run time only: indexing would put buf in
        // local memory).
#pragma unroll
        for (int e = 0; e < SPAN; ++e) {
          raw_t v = buf[e];
#pragma unroll
          for (int q = 1; q < VEC; ++q)
            if (off == q) v = buf[e + q];
          seg[e] = v;
        }
      }
#endif
#endif
      const idx_t row_at = (t * IH + h) * IW;
#pragma unroll
      for (int f = 0; f < FR; ++f) {
        if (!in_window(it, f, (int)ST, (int)DT, KT)) continue;
#pragma unroll
        for (int r = 0; r < ROWS; ++r) {
          if (!in_window(ir, r, (int)SH, (int)DH, KH)) continue;
#pragma unroll
          for (int o = 0; o < OUTS; ++o) {
#pragma unroll
            for (int l = 0; l < KW; ++l) {
              const int e = o * (int)SW + l * (int)DW;
              const idx_t w = wb + e;
              if (w < 0 || w >= IW) continue;
#if IS_MAX
              const float v = Bits<in_t>::to_f(seg[e]);
              if (v > best[f][r][o] || v != v) {
                best[f][r][o] = v;
#if !RES_IS_BEST
                res[f][r][o] = seg[e];
#endif
                at[f][r][o] = row_at + w;
              }
#else
              sum[f][r][o] += Bits<in_t>::to_f(seg[e]);
#endif
            }
          }
        }
      }
    }
  }
#if WARP_ROWS
  if (!active) return;
#endif
#pragma unroll
  for (int f = 0; f < FR; ++f) {
    const idx_t od = od0 + f;
    if (od >= OD) break;
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
      const idx_t oh = oh0 + r;
      if (oh >= OH) break;
#if IS_MAX && RES_IS_BEST
      // float32 maxima leave as floats: a bit cast to raw bits here would make the compiler carry the
      // fold's selects as integers beside the float compares (5% more instructions, odd max_pool3d).
      float out[OUTS];
#pragma unroll
      for (int o = 0; o < OUTS; ++o) out[o] = best[f][r][o];
#else
      raw_t out[OUTS];
#endif
#if IS_MAX
#if !RES_IS_BEST
#pragma unroll
      for (int o = 0; o < OUTS; ++o) out[o] = res[f][r][o];
#endif
#else
#pragma unroll
      for (int o = 0; o < OUTS; ++o) {
        // As pool_window: the divisor from the window clipped to input + padding, or to the input.
        const idx_t t0 = tb + f * ST, h0 = hb + r * SH, w0 = wb + o * SW;
        const idx_t te = min(t0 + KT, ID + PT), he = min(h0 + KH, IH + PH), we = min(w0 + KW, IW + PW);
        const int pool_size = (int)((te - t0) * (he - h0) * (we - w0));
        const idx_t ts = max(t0, (idx_t)0), hs = max(h0, (idx_t)0), ws = max(w0, (idx_t)0);
        const idx_t tc = min(te, ID), hc = min(he, IH), wc = min(we, IW);
        const bool empty = ts >= tc || hs >= hc || ws >= wc;
        const int divide = DIVISOR != 0 ? DIVISOR : COUNT_INCLUDE_PAD ? pool_size : (int)((tc - ts) * (hc - hs) * (wc - ws));
        out[o] = Bits<in_t>::from_f(empty ? 0.f : sum[f][r][o] / (float)divide);
      }
#endif
      const long long o_at = ((plane * OD + od) * OH + oh) * (long long)OW + ow0;
      if (OW % OUTS == 0) {
        // Whole groups: OUTS-element stores, and the indices in pairs (16 bytes).
#if IS_MAX && RES_IS_BEST
        store_floats<OUTS>(y + o_at, out);
#else
        store_raw<OUTS>(y + o_at, out);
#endif
#if IS_MAX
        if (OUTS == 1) {
          store_index(ind + o_at, at[f][r][0]);
        } else {
#pragma unroll
          for (int o = 0; o + 1 < OUTS; o += 2) store_index2(ind + o_at + o, at[f][r][o], at[f][r][o + 1]);
        }
#endif
      } else {
#pragma unroll
        for (int o = 0; o < OUTS; ++o) {
          if (ow0 + o >= OW) break;
#if IS_MAX && RES_IS_BEST
          const float one[1] = {out[o]};
          store_floats<1>(y + o_at + o, one);
#else
          raw_t one[1] = {out[o]};
          store_raw<1>(y + o_at + o, one);
#endif
#if IS_MAX
          store_index(ind + o_at + o, at[f][r][o]);
#endif
        }
      }
    }
  }
}
//@section kStagedKernel
//@ Strategy 1 (staged), after IR, KJIT_ENTRY and KJIT_INDEX_STORE.

// A block per ROWS output rows of one (plane, output frame): the KT input frames of the window and
// the IR input rows under the tile, whole rows, staged in shared memory (rows and frames outside the
// input are not loaded and never read), then each thread computes OUTS consecutive outputs of a row.
constexpr idx_t G = (OW + OUTS - 1) / OUTS;
constexpr idx_t RT = (OH + ROWS - 1) / ROWS;
constexpr int SEGS = (int)(IW / VEC);
KJIT_ENTRY
  extern __shared__ __align__(16) unsigned char smem[];
  raw_t* tile = reinterpret_cast<raw_t*>(smem);  // [KT][IR][IW]
  const long long b = blockIdx.x;
  const idx_t rt = (idx_t)(b % RT);
  long long r = b / RT;
  const idx_t od = (idx_t)(r % OD);
  const long long plane = r / OD;
  const in_t* xp = x + plane * ((long long)ID * IH * IW);
  const idx_t oh0 = rt * ROWS, hbase = oh0 * SH - PH, t0 = od * ST - PT;
  for (int e = threadIdx.x; e < KT * IR * SEGS; e += THREADS) {
    const int seg = e % SEGS, fr = e / SEGS;
    const int ir = fr % IR, i = fr / IR;
    const idx_t t = t0 + i * DT, h = hbase + ir;
    if (t < 0 || t >= ID || h < 0 || h >= IH) continue;
    raw_t v[VEC];
    load_raw<VEC, HINT>(xp + (t * IH + h) * IW + (idx_t)seg * VEC, v);
    typedef typename RawOf<sizeof(raw_t) * VEC>::T R;
    union { R rr; raw_t u[VEC]; } w;
#pragma unroll
    for (int k = 0; k < VEC; ++k) w.u[k] = v[k];
    *reinterpret_cast<R*>(tile + ((long long)i * IR + ir) * IW + seg * VEC) = w.rr;
  }
  __syncthreads();
  auto load = [&](int i, idx_t, idx_t h, idx_t w, raw_t (&v)[CV]) { v[0] = tile[((long long)i * IR + (h - hbase)) * IW + w]; };
  for (int it = threadIdx.x; it < ROWS * G; it += THREADS) {
    const idx_t oh = oh0 + it / G, g = it % G;
    if (oh >= OH) break;
    const long long row_at = ((plane * OD + od) * OH + oh) * (long long)OW;
#pragma unroll
    for (int o = 0; o < OUTS; ++o) {
      const idx_t ow = g * OUTS + o;
      if (ow >= OW) break;
      raw_t r_raw[CV];
      long long r_ind[CV];
      pool_window(od, oh, ow, load, r_raw, r_ind);
      const long long o_at = row_at + ow;
      store_raw<1>(y + o_at, r_raw);
#pragma unroll
      for (int k = 0; k < CV; ++k) { KJIT_INDEX_STORE }
    }
  }
}
