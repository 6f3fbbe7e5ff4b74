// max_pool3d f32 N=8 C=32 in=64x128x128 out=32x64x64 k=3x3x3 s=2x2x2 p=1x1x1 d=1x1x1 (expert default)
// key aten::max_pool3d_with_indices(f32[8,32,64,128,128], [3, 3, 3], [2, 2, 2], [1, 1, 1], [1, 1, 1], False) sm_90
// point frames=2 hint=1 outs=2 rows=2 strategy=2 threads=128 vec=4
// launch: entry kjit_pool grid 32768,1,1 block 128,1,1 shared 0 workspace 0
// nvrtc options: --std=c++17 --diag-suppress=177
// kjit pool family, codegen 3: max_pool3d f32 N=8 C=32 in=64x128x128 out=32x64x64 k=3x3x3 s=2x2x2 p=1x1x1 d=1x1x1
// point frames=2 hint=1 outs=2 rows=2 strategy=2 threads=128 vec=4

#include <cuda_fp16.h>
#include <cuda_bf16.h>
// (Cluster intrinsics are built in for sm_90: no <cooperative_groups.h>, which costs 1.5 s to compile.)
// NVRTC has no <cmath>: the special values by their bits.
#define KJIT_INF __int_as_float(0x7f800000)
#define KJIT_NAN __int_as_float(0x7fc00000)
typedef float in_t;
typedef in_t out_t;
typedef int idx_t;
#define VEC 4
#define HINT 1
#define IS_MAX 1
#define EMPTY_INDEX_ZERO 0
#define COUNT_INCLUDE_PAD 1
#define DIVISOR 0
constexpr idx_t N_ = 8, C_ = 32, ID = 64, IH = 128, IW = 128, OD = 32, OH = 64, OW = 64;
constexpr int KT = 3, KH = 3, KW = 3;
constexpr idx_t ST = 2, SH = 2, SW = 2, PT = 1, PH = 1, PW = 1, DT = 1, DH = 1, DW = 1;
constexpr int THREADS = 128, OUTS = 2, CV = 1, ROWS = 2;

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
constexpr int FR = 2;
#define SEG_FIXED 1
#define X_ALIGNED 1

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
extern "C" __global__ void __launch_bounds__(THREADS) kjit_pool(const in_t* __restrict__ x, out_t* __restrict__ y, long long* __restrict__ ind) {
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
#if IS_MAX
  float best[FR][ROWS][OUTS];
  raw_t res[FR][ROWS][OUTS];
  idx_t at[FR][ROWS][OUTS];
#pragma unroll
  for (int f = 0; f < FR; ++f)
#pragma unroll
    for (int r = 0; r < ROWS; ++r)
#pragma unroll
      for (int o = 0; o < OUTS; ++o) {
        best[f][r][o] = -KJIT_INF;
        res[f][r][o] = Bits<in_t>::from_f(-KJIT_INF);
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
                res[f][r][o] = seg[e];
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
#pragma unroll
  for (int f = 0; f < FR; ++f) {
    const idx_t od = od0 + f;
    if (od >= OD) break;
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
      const idx_t oh = oh0 + r;
      if (oh >= OH) break;
      raw_t out[OUTS];
#if IS_MAX
#pragma unroll
      for (int o = 0; o < OUTS; ++o) out[o] = res[f][r][o];
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
        store_raw<OUTS>(y + o_at, out);
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
          raw_t one[1] = {out[o]};
          store_raw<1>(y + o_at + o, one);
#if IS_MAX
          store_index(ind + o_at + o, at[f][r][o]);
#endif
        }
      }
    }
  }
}
