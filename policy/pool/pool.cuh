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
