// The CUDA of the depthwise_conv_backward family's kernel, in a section that depthwise_conv_backward.cc embeds
// (kjit_embed_cuda, at build time) and writes after policy/src/cuda/common.cuh's kElementAccess, with the
// problem's sizes and the design point's knobs defined ahead of it: in_t and out_t (the tensors' type), idx_t
// (int where every index provably fits, else long long), VEC (= OUTS, for store_vec), HINT, WANT_DX, WANT_DW, WANT_DB,
// WSTRATEGY, VEC_STORE (macros), N_, C_, IH, IW, OH, OW, SH, SW, PH, PW, DIL_H, DIL_W (idx_t constants), KH, KW,
// THREADS, OUTS, VW (PyTorch's warps in its weight-gradient block: min(N, 8)), WEIGHT_BLOCKS, BIAS_BLOCKS (int
// constants), KJIT_PARAMS (the kernel ABI's parameters) and KJIT_ABSENT (casts of the pointers a key never
// reads). Each section is embedded byte for byte (a blank line after a marker is part of it); lines starting
// "//@" document it and are not embedded.
//@section kKernel
//@ One launch: blocks [0, WEIGHT_BLOCKS) compute grad_weight (and with WSTRATEGY 1 grad_bias), the next
//@ BIAS_BLOCKS grad_bias, the rest grad_input. Every sum has one fixed order: no atomics, the same bits each run.

constexpr int TAPS = KH * KW;
constexpr int WARPS = THREADS / 32;
constexpr idx_t PLANE_OUT = OH * OW;
constexpr idx_t GROUPS_W = (IW + OUTS - 1) / OUTS;  // thread positions along an input row
constexpr idx_t INPUT_ITEMS = N_ * C_ * IH * GROUPS_W;
// Virtual warps (PyTorch's) a real warp of this block plays, for the weight gradient in PyTorch's order.
constexpr int VPW = (VW + WARPS - 1) / WARPS;
// Shared floats: PyTorch's warps' sums (VW), or each warp's per-tap sums and bias (a channel's block), or each
// warp's bias sum.
constexpr int RED_FLOATS = WSTRATEGY == 1 ? WARPS * (TAPS + 1) : (WARPS > 8 ? WARPS : 8);

__device__ __forceinline__ float load_one(const in_t* p) {
  return Bits<in_t>::to_f(__ldg(reinterpret_cast<const typename Bits<in_t>::U*>(p)));
}
__device__ __forceinline__ void store_one(out_t* p, float f) {
  const typename Bits<out_t>::U u = Bits<out_t>::from_f(f);
  if (HINT) __stcs(reinterpret_cast<typename Bits<out_t>::U*>(p), u);
  else *reinterpret_cast<typename Bits<out_t>::U*>(p) = u;
}
__device__ __forceinline__ void store_plain(out_t* p, float f) {
  *reinterpret_cast<typename Bits<out_t>::U*>(p) = Bits<out_t>::from_f(f);
}
// PyTorch's WarpReduceSum: a shuffle-down tree, lane 0 holding the warp's sum.
__device__ __forceinline__ float tree_sum(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_down_sync(0xffffffffu, v, offset);
  return v;
}

#if WANT_DX
// OUTS consecutive elements of row h of plane (n, c), from w0; each gathers over its taps, kh outer and kw
// inner, the grad_output positions whose window holds it (exact quotients inside the output), as PyTorch's
// conv_depthwise2d_backward_kernel: fused multiply-adds from 0, rounded once.
__device__ __forceinline__ void input_gradient(idx_t item, const in_t* __restrict__ dy, const in_t* __restrict__ wt,
                                               out_t* __restrict__ dx) {
  const idx_t group = item % GROUPS_W;
  const idx_t rest = item / GROUPS_W;
  const idx_t h = rest % IH;
  const idx_t plane = rest / IH;
  const idx_t c = plane % C_;
  const idx_t w0 = group * OUTS;
  const in_t* __restrict__ dyp = dy + plane * PLANE_OUT;
  const in_t* __restrict__ wp = wt + c * TAPS;
  float acc[OUTS];
#pragma unroll
  for (int o = 0; o < OUTS; ++o) acc[o] = 0.f;
  for (int kh = 0; kh < KH; ++kh) {
    const idx_t hs = h + PH - kh * DIL_H;
    if (hs < 0 || hs % SH != 0) continue;
    const idx_t ho = hs / SH;
    if (ho >= OH) continue;
    for (int kw = 0; kw < KW; ++kw) {
      const float wv = load_one(wp + kh * KW + kw);
#pragma unroll
      for (int o = 0; o < OUTS; ++o) {
        const idx_t ws = w0 + o + PW - kw * DIL_W;
        if (w0 + o < IW && ws >= 0 && ws % SW == 0 && ws / SW < OW) {
          acc[o] = fmaf(wv, load_one(dyp + ho * OW + ws / SW), acc[o]);
        }
      }
    }
  }
  out_t* __restrict__ row = dx + (plane * IH + h) * IW;
#if VEC_STORE
  store_vec(row + w0, acc);  // OUTS divides W: the thread's columns are whole and aligned
#else
#pragma unroll
  for (int o = 0; o < OUTS; ++o) {
    if (w0 + o < IW) store_one(row + w0 + o, acc[o]);
  }
#endif
}
#endif

#if WANT_DW && WSTRATEGY == 0
// grad_weight[ch, kh, kw] in conv_depthwise2d_grad_weight_kernel's order: PyTorch's block has VW warps; its
// warp v sums samples v, v + VW, ... and within each, lane l the positions l, l + 32, ... (fused multiply-adds
// into one float); each warp's sum is a shuffle-down tree, then warp 0 adds the VW sums (zeros past them) by
// another. Here a real warp plays virtual warps warp, warp + WARPS, ..., each with its own float.
__device__ __forceinline__ void weight_gradient_tap(int block, const in_t* __restrict__ dy,
                                                    const in_t* __restrict__ x, out_t* __restrict__ dw, float* red) {
  const int kw = block % KW, kh = (block / KW) % KH;
  const idx_t ch = block / TAPS;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int k = 0; k < VPW; ++k) {
    const int v = warp + k * WARPS;
    float grad = 0.f;
    if (v < VW) {
      for (idx_t n = v; n < N_; n += VW) {
        const in_t* __restrict__ xp = x + (n * C_ + ch) * (IH * IW);
        const in_t* __restrict__ dyp = dy + (n * C_ + ch) * PLANE_OUT;
        // One dependent chain of fused multiply-adds: unrolling it buys little, and nvcc 13's automatic
        // unrolling made ptxas spill here (sm_90, 32 registers).
#pragma unroll 1
        for (idx_t idx = lane; idx < PLANE_OUT; idx += 32) {
          const idx_t ow = idx % OW, oh = idx / OW;
          const idx_t iw = ow * SW + kw * DIL_W - PW, ih = oh * SH + kh * DIL_H - PH;
          if (iw >= 0 && ih >= 0 && iw < IW && ih < IH) grad = fmaf(load_one(xp + ih * IW + iw), load_one(dyp + idx), grad);
        }
      }
    }
    const float sum = tree_sum(grad);  // every lane of the warp takes part in the shuffles
    if (lane == 0 && v < VW) red[v] = sum;
  }
  __syncthreads();
  if (warp == 0) {
    const float total = tree_sum(lane < VW ? red[lane] : 0.f);
    if (lane == 0) store_plain(dw + block, total);
  }
}
#endif

#if WANT_DW && WSTRATEGY == 1
// A channel's every tap (and its bias): thread t sums positions t, t + THREADS, ... of the channel's N planes,
// each tap into its own float; per-tap shuffle-down trees, then the warps' sums added in warp order.
__device__ __forceinline__ void weight_gradient_channel(idx_t ch, const in_t* __restrict__ dy,
                                                        const in_t* __restrict__ x, out_t* __restrict__ dw,
                                                        out_t* __restrict__ db, float* red) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  float acc[TAPS];
#pragma unroll
  for (int t = 0; t < TAPS; ++t) acc[t] = 0.f;
  float bias = 0.f;
  for (idx_t p = threadIdx.x; p < N_ * PLANE_OUT; p += THREADS) {
    const idx_t n = p / PLANE_OUT, idx = p % PLANE_OUT;
    const idx_t ow = idx % OW, oh = idx / OW;
    const float g = load_one(dy + (n * C_ + ch) * PLANE_OUT + idx);
    bias += g;
    const in_t* __restrict__ xp = x + (n * C_ + ch) * (IH * IW);
#pragma unroll
    for (int kh = 0; kh < KH; ++kh) {
      const idx_t ih = oh * SH + kh * DIL_H - PH;
#pragma unroll
      for (int kw = 0; kw < KW; ++kw) {
        const idx_t iw = ow * SW + kw * DIL_W - PW;
        if (iw >= 0 && ih >= 0 && iw < IW && ih < IH) acc[kh * KW + kw] = fmaf(load_one(xp + ih * IW + iw), g, acc[kh * KW + kw]);
      }
    }
  }
#pragma unroll
  for (int t = 0; t < TAPS; ++t) {
    const float s = tree_sum(acc[t]);
    if (lane == 0) red[warp * (TAPS + 1) + t] = s;
  }
  {
    const float s = tree_sum(bias);
    if (lane == 0) red[warp * (TAPS + 1) + TAPS] = s;
  }
  __syncthreads();
  for (int t = threadIdx.x; t < TAPS + (WANT_DB ? 1 : 0); t += THREADS) {
    float total = 0.f;
    for (int w = 0; w < WARPS; ++w) total += red[w * (TAPS + 1) + t];
    if (t < TAPS) store_plain(dw + ch * TAPS + t, total);
#if WANT_DB
    else store_plain(db + ch, total);
#endif
  }
}
#endif

#if WANT_DB
// grad_bias[ch]: thread t sums positions t, t + THREADS, ... of the channel's N planes; a shuffle-down tree
// per warp, then the warps' sums added in warp order.
__device__ __forceinline__ void bias_gradient(idx_t ch, const in_t* __restrict__ dy, out_t* __restrict__ db,
                                              float* red) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  float bias = 0.f;
  for (idx_t p = threadIdx.x; p < N_ * PLANE_OUT; p += THREADS) {
    const idx_t n = p / PLANE_OUT, idx = p % PLANE_OUT;
    bias += load_one(dy + (n * C_ + ch) * PLANE_OUT + idx);
  }
  bias = tree_sum(bias);
  if (lane == 0) red[warp] = bias;
  __syncthreads();
  if (threadIdx.x == 0) {
    float total = 0.f;
    for (int w = 0; w < WARPS; ++w) total += red[w];
    store_plain(db + ch, total);
  }
}
#endif

extern "C" __global__ void __launch_bounds__(THREADS) kjit_depthwise_conv_backward(KJIT_PARAMS) {
  KJIT_ABSENT
  __shared__ float red[RED_FLOATS];
  (void)red;
  idx_t block = blockIdx.x;
#if WANT_DW
  if (block < WEIGHT_BLOCKS) {
#if WSTRATEGY == 0
    weight_gradient_tap((int)block, dy, x, dw, red);
#else
    weight_gradient_channel(block, dy, x, dw, db, red);
#endif
    return;
  }
  block -= WEIGHT_BLOCKS;
#endif
#if WANT_DB
  if (block < BIAS_BLOCKS) {
    bias_gradient(block, dy, db, red);
    return;
  }
  block -= BIAS_BLOCKS;
#endif
#if WANT_DX
  const idx_t item = block * THREADS + (idx_t)threadIdx.x;
  if (item < INPUT_ITEMS) input_gradient(item, dy, wt, dx);
#endif
}
