// Runs one generated depthwise_conv kernel (rewritten by depthwise_conv_gen.cc for emu.h, built as a
// shared object) on the CPU and checks it against PyTorch's conv_depthwise2d_forward_kernel loop
// transcribed (DepthwiseConv2d.cu): the bias (or 0) in float, then for each kernel row and column in
// order, taps inside the input only, value += w * x, which nvcc contracts to a fused multiply-add,
// rounded once. Compared bitwise (NaN matching NaN): the kernels promise PyTorch's order. The
// _conv_depthwise2d op is fed NaN, +-Inf and -0.0 in input, weight and bias (an Inf weight at a
// padding tap must not turn into NaN); cudnn_convolution is not (its traits). Also checks that every
// output is written and nothing past the output.
// Usage: depthwise_conv_run SO DTYPE NATIVE CL BIAS N C H W KH KW SH SW PH PW DH DW GRID BLOCK SHARED
#include "emu_harness.h"
#include <dlfcn.h>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
int main(int argc, char** argv) {
  void* so = dlopen(argv[1], RTLD_NOW);
  if (!so) { std::printf("dlopen: %s\n", dlerror()); return 2; }
  long long v[32];
  for (int i = 2; i < argc && i < 34; ++i) v[i - 2] = atoll(argv[i]);
  const int dt = (int)v[0];
  const bool native = v[1], cl = v[2], has_bias = v[3];
  const long long N = v[4], C = v[5], H = v[6], W = v[7], KH = v[8], KW = v[9], SH = v[10], SW = v[11], PH = v[12],
                  PW = v[13], DH = v[14], DW = v[15];
  gridDim.x = (unsigned)v[16]; blockDim.x = (unsigned)v[17];
  if (v[18] > EMU_SLAB * EMU_VARS) { std::printf("shared memory over the emulator's slab\n"); return 2; }
  const long long OH = (H + 2 * PH - DH * (KH - 1) - 1) / SH + 1, OW = (W + 2 * PW - DW * (KW - 1) - 1) / SW + 1;
  const int es = esize(dt);
  const long long n_in = N * C * H * W, n_out = N * C * OH * OW, n_w = C * KH * KW;
  std::vector<char> x(n_in * es), w(n_w * es), b(C * es), y(n_out * es + 64, 0x5a);
  std::mt19937 gen(11);
  std::normal_distribution<float> nd;
  // Specials in 1/256 of the elements: a 3x3 window meets one in ~7% of outputs, so most outputs stay
  // finite and are compared bit for bit.
  std::uniform_int_distribution<int> pick(0, 1023);
  const float specials[4] = {__int_as_float(0x7fc00000), __int_as_float(0x7f800000), -__int_as_float(0x7f800000), -0.f};
  auto fill = [&](std::vector<char>& t, long long count) {
    for (long long i = 0; i < count; ++i) {
      const int r = pick(gen);
      const float f = native && r < 4 ? specials[r] : nd(gen);
      const uint32_t u = from_f(f, dt);
      std::memcpy(&t[i * es], &u, es);
    }
  };
  fill(x, n_in);
  fill(w, n_w);
  fill(b, C);
  void* fn = dlsym(so, "kjit_depthwise_conv");
  emu_run_grid([&] {
    if (native) {
      reinterpret_cast<void (*)(const void*, const void*, const void*, void*)>(fn)(
          x.data(), w.data(), has_bias ? b.data() : nullptr, y.data());
    } else {
      reinterpret_cast<void (*)(const void*, const void*, void*)>(fn)(x.data(), w.data(), y.data());
    }
  });
  auto raw = [&](const std::vector<char>& t, long long e) { uint32_t u = 0; std::memcpy(&u, &t[e * es], es); return u; };
  auto at = [&](long long n, long long c, long long h, long long ww, long long h_, long long w_) {
    return cl ? ((n * h_ + h) * w_ + ww) * C + c : ((n * C + c) * h_ + h) * w_ + ww;
  };
  long long bad = 0, nans = 0, infs = 0;
  for (long long n = 0; n < N; ++n)
    for (long long c = 0; c < C; ++c)
      for (long long oh = 0; oh < OH; ++oh)
        for (long long ow = 0; ow < OW; ++ow) {
          float value = has_bias ? to_f(raw(b, c), dt) : 0.f;
          for (long long i = 0; i < KH; ++i)
            for (long long j = 0; j < KW; ++j) {
              const long long h = oh * SH - PH + i * DH, ww = ow * SW - PW + j * DW;
              if (h >= 0 && h < H && ww >= 0 && ww < W) {
                value = std::fmaf(to_f(raw(w, c * KH * KW + i * KW + j), dt), to_f(raw(x, at(n, c, h, ww, H, W)), dt), value);
              }
            }
          const uint32_t want = from_f(value, dt);
          const long long e = at(n, c, oh, ow, OH, OW);
          const uint32_t got = raw(y, e);
          const bool ok = got == want || (std::isnan(to_f(got, dt)) && std::isnan(to_f(want, dt)));
          nans += std::isnan(to_f(want, dt));
          infs += std::isinf(to_f(want, dt));
          if (!ok) {
            if (bad == 0) {
              std::printf("first bad at n=%lld c=%lld oh=%lld ow=%lld: got %x (%g) want %x (%g)\n", n, c, oh, ow, got,
                          to_f(got, dt), want, to_f(want, dt));
            }
            ++bad;
          }
        }
  for (int k = 0; k < 64; ++k) {
    if (y[n_out * es + k] != 0x5a) { std::printf("WROTE PAST END\n"); return 1; }
  }
  std::printf("%s bad=%lld of %lld (NaN results %lld, Inf results %lld)\n", bad ? "FAIL" : "ok", bad, n_out, nans, infs);
  return bad ? 1 : 0;
}
