// The CUDA of the pool_backward family's kernel, in a section that pool_backward.cc embeds (kjit_embed_cuda, at
// build time) and writes after policy/src/cuda/common.cuh's kElementAccess, with the problem's sizes and the
// design point's knobs defined ahead of it: in_t and out_t (the gradient's type), idx_t (int where every index
// provably fits, else long long), VEC (= OUTS, for store_vec), HINT, IS_MAX, VEC_STORE, COUNT_INCLUDE_PAD,
// USE_DIVISOR, ROUND_QUOTIENT, DIMS3 (macros), PLANES, H, W, OH, OW, KH, KW, SH, SW, PH, PW, EXT_H, EXT_W, DIVISOR,
// and with DIMS3 also D, OD, KD, SD, PD, EXT_D (constants), THREADS, OUTS, ROWS, KJIT_PARAMS (the kernel ABI's
// parameters). DIMS3 (3-D pooling's backward) adds the depth: a thread's elements lie in one depth slice, and the
// windows are walked pd outer, ph, pw inner (a max index is then a flat position in the plane's volume); without
// it the source is 2-D pooling's. Each section is embedded byte for
// byte (a blank line after a marker is part of it); lines starting "//@" document it and are not embedded.
//@section kKernel
//@ A thread per ROWS x OUTS grad_input elements of one plane (ROWS consecutive rows, OUTS consecutive columns; of
//@ one depth slice under DIMS3).
//@ Each element gathers, ph outer and pw inner, over the outputs whose windows can hold it, into a float from 0,
//@ rounded once. The thread walks the union of its elements' output ranges in that order, loading each
//@ grad_output (and index) once, and adds it to every element whose own range holds it: each element still sees
//@ its windows in PyTorch's order.

constexpr idx_t GROUPS = (W + OUTS - 1) / OUTS;   // thread positions along a row
constexpr idx_t ROW_BLOCKS = (H + ROWS - 1) / ROWS;
#if DIMS3
constexpr idx_t ITEMS = PLANES * D * ROW_BLOCKS * GROUPS;
#else
constexpr idx_t ITEMS = PLANES * ROW_BLOCKS * GROUPS;
#endif

__device__ __forceinline__ float load_one(const in_t* p) {
  return Bits<in_t>::to_f(*reinterpret_cast<const typename Bits<in_t>::U*>(p));
}
__device__ __forceinline__ void store_one(out_t* p, float f) {
  const typename Bits<out_t>::U u = Bits<out_t>::from_f(f);
  if (HINT) __stcs(reinterpret_cast<typename Bits<out_t>::U*>(p), u);
  else *reinterpret_cast<typename Bits<out_t>::U*>(p) = u;
}
// As a value of the gradient's dtype: c10's Half and BFloat16 round their quotients and int operands.
__device__ __forceinline__ float as_dtype(float f) { return ROUND_QUOTIENT ? Bits<in_t>::to_f(Bits<in_t>::from_f(f)) : f; }
// The first and one past the last output whose window (EXT elements from o * S - P) can hold position i.
__device__ __forceinline__ idx_t first_window(idx_t i, idx_t pad, idx_t ext, idx_t stride) {
  return i + pad < ext ? 0 : (i + pad - ext) / stride + 1;
}
__device__ __forceinline__ idx_t end_window(idx_t i, idx_t pad, idx_t pooled, idx_t stride) {
  const idx_t e = (i + pad) / stride + 1;
  return e < pooled ? e : pooled;
}

// Output o's window along a dim of n inputs (an average pool's: no dilation): [*start, *end) clipped to the
// input; returns its size within input + padding (count_include_pad's count along the dim).
__device__ __forceinline__ idx_t window_of(idx_t o, idx_t stride, idx_t pad, idx_t k, idx_t n, idx_t* start,
                                           idx_t* end) {
  const idx_t s = o * stride - pad;
  const idx_t e = s + k < n + pad ? s + k : n + pad;
  const idx_t size = e - s;
  *start = s > 0 ? s : 0;
  *end = e < n ? e : n;
  return size;
}

extern "C" __global__ void __launch_bounds__(THREADS) kjit_pool_backward(KJIT_PARAMS) {
  (void)x;  // only its shape matters: the key's
  const idx_t item = (idx_t)blockIdx.x * THREADS + (idx_t)threadIdx.x;
  if (item >= ITEMS) return;
  const idx_t group = item % GROUPS;
  const idx_t rest = item / GROUPS;
  const idx_t h0 = (rest % ROW_BLOCKS) * ROWS, w0 = group * OUTS;
#if DIMS3
  const idx_t d = (rest / ROW_BLOCKS) % D;
  const idx_t plane = rest / ROW_BLOCKS / D;
  const in_t* __restrict__ dyp = dy + plane * (OD * OH * OW);
#if IS_MAX
  const long long* __restrict__ indp = ind + plane * (OD * OH * OW);
#endif
#else
  const idx_t plane = rest / ROW_BLOCKS;
  const in_t* __restrict__ dyp = dy + plane * (OH * OW);
#if IS_MAX
  const long long* __restrict__ indp = ind + plane * (OH * OW);
#endif
#endif
  // Each element's range of outputs; rows and columns past the plane's have none.
  idx_t phs[ROWS], phe[ROWS], pws[OUTS], pwe[OUTS];
  idx_t ph_hi = 0, pw_hi = 0;
#pragma unroll
  for (int r = 0; r < ROWS; ++r) {
    const idx_t h = h0 + r;
    phs[r] = h < H ? first_window(h, PH, EXT_H, SH) : 0;
    phe[r] = h < H ? end_window(h, PH, OH, SH) : 0;
    ph_hi = phe[r] > ph_hi ? phe[r] : ph_hi;
  }
#pragma unroll
  for (int o = 0; o < OUTS; ++o) {
    const idx_t w = w0 + o;
    pws[o] = w < W ? first_window(w, PW, EXT_W, SW) : 0;
    pwe[o] = w < W ? end_window(w, PW, OW, SW) : 0;
    pw_hi = pwe[o] > pw_hi ? pwe[o] : pw_hi;
  }
  float acc[ROWS][OUTS];
#pragma unroll
  for (int r = 0; r < ROWS; ++r) {
#pragma unroll
    for (int o = 0; o < OUTS; ++o) acc[r][o] = 0.f;
  }
#if DIMS3
  const idx_t pd_end = end_window(d, PD, OD, SD);
  for (idx_t pd = first_window(d, PD, EXT_D, SD); pd < pd_end; ++pd) {
#if !IS_MAX
  idx_t dstart, dend;
  const idx_t pool_d = window_of(pd, SD, PD, KD, D, &dstart, &dend);
#endif
#endif
  for (idx_t ph = phs[0]; ph < ph_hi; ++ph) {
#if !IS_MAX
    idx_t hstart, hend;
    const idx_t pool_h = window_of(ph, SH, PH, KH, H, &hstart, &hend);
#endif
    for (idx_t pw = pws[0]; pw < pw_hi; ++pw) {
#if DIMS3
      const idx_t at = (pd * OH + ph) * OW + pw;
#else
      const idx_t at = ph * OW + pw;
#endif
#if IS_MAX
      const float g = load_one(dyp + at);
      const long long target = indp[at];
#pragma unroll
      for (int r = 0; r < ROWS; ++r) {
#pragma unroll
        for (int o = 0; o < OUTS; ++o) {
#if DIMS3
          if (ph >= phs[r] && ph < phe[r] && pw >= pws[o] && pw < pwe[o] &&
              target == (long long)((d * H + h0 + r) * W + (w0 + o))) {
#else
          if (ph >= phs[r] && ph < phe[r] && pw >= pws[o] && pw < pwe[o] &&
              target == (long long)((h0 + r) * W + (w0 + o))) {
#endif
            acc[r][o] += g;
          }
        }
      }
#else
      idx_t wstart, wend;
#if DIMS3
      const idx_t pool_size = pool_d * pool_h * window_of(pw, SW, PW, KW, W, &wstart, &wend);
#else
      const idx_t pool_size = pool_h * window_of(pw, SW, PW, KW, W, &wstart, &wend);
#endif
#if DIMS3
      if (dstart >= dend || hstart >= hend || wstart >= wend) continue;
      const idx_t factor = USE_DIVISOR ? (idx_t)DIVISOR
                           : COUNT_INCLUDE_PAD ? pool_size
                                               : (dend - dstart) * (hend - hstart) * (wend - wstart);
#else
      if (hstart >= hend || wstart >= wend) continue;
      const idx_t factor = USE_DIVISOR ? (idx_t)DIVISOR : COUNT_INCLUDE_PAD ? pool_size : (hend - hstart) * (wend - wstart);
#endif
      // float / int, as PyTorch's scalar_t / int: the int converted to the dtype (c10's Half and BFloat16
      // operators), the quotient rounded to it before the float accumulator takes it.
      const float q = as_dtype(load_one(dyp + at) / as_dtype((float)factor));
#pragma unroll
      for (int r = 0; r < ROWS; ++r) {
#pragma unroll
        for (int o = 0; o < OUTS; ++o) {
          if (ph >= phs[r] && ph < phe[r] && pw >= pws[o] && pw < pwe[o]) acc[r][o] += q;
        }
      }
#endif
    }
  }
#if DIMS3
  }
#endif
#pragma unroll
  for (int r = 0; r < ROWS; ++r) {
    const idx_t h = h0 + r;
    if (h >= H) break;
#if DIMS3
    out_t* __restrict__ row = dx + ((plane * D + d) * H + h) * W;
#else
    out_t* __restrict__ row = dx + (plane * H + h) * W;
#endif
#if VEC_STORE
    store_vec(row + w0, acc[r]);  // OUTS divides W: the thread's columns are whole and aligned
#else
#pragma unroll
    for (int o = 0; o < OUTS; ++o) {
      if (w0 + o < W) store_one(row + w0 + o, acc[r][o]);
    }
#endif
  }
}
