// Runs one generated depthwise_conv_backward kernel (rewritten by depthwise_conv_backward_gen.cc for emu.h, built
// as a shared object) on the CPU and checks it against PyTorch's loops transcribed (DepthwiseConv2d.cu):
//   grad_input, conv_depthwise2d_backward_kernel: per element, kernel rows then columns, the taps whose output
//     position divides exactly and lies inside the output, value += w * dy (nvcc's fused multiply-add), rounded
//     once: compared bitwise (NaN matching NaN).
//   grad_weight, conv_depthwise2d_grad_weight_kernel: a block of min(N, 8) warps per (channel, tap), warp v summing
//     samples v, v + 8, ..., lane l positions l, l + 32, ... as fused multiply-adds, then BlockReduceSum's
//     shuffle-down trees: compared bitwise for wstrategy 0 (PyTorch's order); for wstrategy 1 (another order)
//     against the sum in double, within float32 summation's error bound over N x OH x OW terms.
//   grad_bias (PyTorch's at::sum, an order of its own): against the sum in double, within the same bound.
// Specials (NaN, +-Inf, -0.0 in 1/256 of the elements of grad_output, input and weight) where SPECIALS is 1.
// Every output starts as a 0x5a fill with 64 guard bytes after it: unwritten elements fail the comparison, and a
// write past an output's end fails the run.
// Usage: depthwise_conv_backward_run SO DTYPE DX DW DB N C H W KH KW SH SW PH PW DH DW GRID BLOCK WSTRATEGY SPECIALS
#include "emu_harness.h"
#include <dlfcn.h>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
int main(int argc, char** argv) {
  void* so = dlopen(argv[1], RTLD_NOW);
  if (!so) { std::printf("dlopen: %s\n", dlerror()); return 2; }
  long long v[32] = {};
  for (int i = 2; i < argc && i < 34; ++i) v[i - 2] = atoll(argv[i]);
  const int dt = (int)v[0];
  const bool want_dx = v[1], want_dw = v[2], want_db = v[3];
  const long long N = v[4], C = v[5], H = v[6], W = v[7], KH = v[8], KW = v[9], SH = v[10], SW = v[11], PH = v[12],
                  PW = v[13], DH = v[14], DW = v[15];
  gridDim.x = (unsigned)v[16]; blockDim.x = (unsigned)v[17];
  const long long wstrategy = v[18];
  const bool specials_on = v[19];
  const long long OH = (H + 2 * PH - DH * (KH - 1) - 1) / SH + 1, OW = (W + 2 * PW - DW * (KW - 1) - 1) / SW + 1;
  const int es = esize(dt);
  const long long n_in = N * C * H * W, n_out = N * C * OH * OW, taps = KH * KW, n_w = C * taps;
  std::vector<char> x(n_in * es), w(n_w * es), dy(n_out * es);
  std::vector<char> dx(n_in * es + 64, 0x5a), dw(n_w * es + 64, 0x5a), db(C * es + 64, 0x5a);
  std::mt19937 gen(17);
  std::normal_distribution<float> nd;
  std::uniform_int_distribution<int> pick(0, 1023);
  const float specials[4] = {__int_as_float(0x7fc00000), __int_as_float(0x7f800000), -__int_as_float(0x7f800000), -0.f};
  auto fill = [&](std::vector<char>& t, long long count) {
    for (long long i = 0; i < count; ++i) {
      const int r = pick(gen);
      const float f = specials_on && r < 4 ? specials[r] : nd(gen);
      const uint32_t u = from_f(f, dt);
      std::memcpy(&t[i * es], &u, es);
    }
  };
  fill(x, n_in);
  fill(w, n_w);
  fill(dy, n_out);
  void* fn = dlsym(so, "kjit_depthwise_conv_backward");
  if (!fn) { std::printf("no kjit_depthwise_conv_backward\n"); return 2; }
  emu_run_grid([&] {
    reinterpret_cast<void (*)(const void*, const void*, const void*, void*, void*, void*)>(fn)(
        dy.data(), x.data(), w.data(), want_dx ? dx.data() : nullptr, want_dw ? dw.data() : nullptr,
        want_db ? db.data() : nullptr);
  });
  auto raw = [&](const std::vector<char>& t, long long e) { uint32_t u = 0; std::memcpy(&u, &t[e * es], es); return u; };
  auto val = [&](const std::vector<char>& t, long long e) { return to_f(raw(t, e), dt); };
  long long bad = 0, checked = 0, nonfinite = 0;
  auto same_bits = [&](uint32_t got, uint32_t want) {
    return got == want || (std::isnan(to_f(got, dt)) && std::isnan(to_f(want, dt)));
  };
  auto report = [&](const char* what, long long i, float got, double want) {
    if (bad == 0) std::printf("first bad %s[%lld]: got %.9g want %.9g\n", what, i, got, want);
    ++bad;
  };
  // Float32 summation's error over `terms` terms (Higham's gamma) on the terms' absolute sum, and the rounding to
  // the dtype.
  const double dtype_eps = dt == 0 ? 0x1p-24 : dt == 1 ? 0x1p-11 : 0x1p-8;
  auto close = [&](float got, double exact, double abs_sum, long long terms) {
    if (!std::isfinite(exact)) return std::isnan(exact) ? std::isnan(got) : (double)got == exact;
    const double gamma = terms * 0x1p-24 / (1 - terms * 0x1p-24);
    return std::fabs(got - exact) <= 1.01 * (gamma * abs_sum + std::fabs(exact) * dtype_eps) + 1e-300;
  };
  if (want_dx) {
    for (long long n = 0; n < N; ++n)
      for (long long c = 0; c < C; ++c)
        for (long long h = 0; h < H; ++h)
          for (long long ww = 0; ww < W; ++ww) {
            float value = 0.f;
            for (long long kh = 0; kh < KH; ++kh)
              for (long long kw = 0; kw < KW; ++kw) {
                long long h_out = h + PH - kh * DH, w_out = ww + PW - kw * DW;
                if (h_out % SH == 0 && w_out % SW == 0) {
                  h_out /= SH;
                  w_out /= SW;
                  if (h_out >= 0 && h_out < OH && w_out >= 0 && w_out < OW) {
                    value = std::fmaf(val(w, c * taps + kh * KW + kw), val(dy, ((n * C + c) * OH + h_out) * OW + w_out),
                                      value);
                  }
                }
              }
            const long long e = ((n * C + c) * H + h) * W + ww;
            ++checked;
            nonfinite += !std::isfinite(value);
            if (!same_bits(raw(dx, e), from_f(value, dt))) report("grad_input", e, val(dx, e), value);
          }
  }
  if (want_dw) {
    const int vw = (int)std::min<long long>(N, 8);
    for (long long c = 0; c < C; ++c)
      for (long long kh = 0; kh < KH; ++kh)
        for (long long kw = 0; kw < KW; ++kw) {
          // PyTorch's block: per warp and lane a float, then shuffle-down trees.
          auto tree = [](float (&lanes)[32]) {
            for (int off = 16; off > 0; off >>= 1) {
              float next[32];
              for (int l = 0; l < 32; ++l) next[l] = lanes[l] + (l + off < 32 ? lanes[l + off] : lanes[l]);
              std::memcpy(lanes, next, sizeof next);
            }
            return lanes[0];
          };
          float warp_sums[32] = {};
          double exact = 0, abs_sum = 0;
          for (int wv = 0; wv < vw; ++wv) {
            float lanes[32];
            for (int lane = 0; lane < 32; ++lane) {
              float g = 0.f;
              for (long long n = wv; n < N; n += vw)
                for (long long idx = lane; idx < OH * OW; idx += 32) {
                  const long long ow = idx % OW, oh = idx / OW;
                  const long long iw = ow * SW + kw * DW - PW, ih = oh * SH + kh * DH - PH;
                  if (iw >= 0 && ih >= 0 && iw < W && ih < H) {
                    const float a = val(x, ((n * C + c) * H + ih) * W + iw), b = val(dy, (n * C + c) * OH * OW + idx);
                    g = std::fmaf(a, b, g);
                    exact += (double)a * b;
                    abs_sum += std::fabs((double)a * b);
                  }
                }
              lanes[lane] = g;
            }
            warp_sums[wv] = tree(lanes);
          }
          const float pytorch = tree(warp_sums);
          const long long e = c * taps + kh * KW + kw;
          ++checked;
          nonfinite += !std::isfinite(pytorch);
          const bool ok = wstrategy == 0 ? same_bits(raw(dw, e), from_f(pytorch, dt))
                                         : close(val(dw, e), exact, abs_sum, N * OH * OW);
          if (!ok) report("grad_weight", e, val(dw, e), wstrategy == 0 ? (double)pytorch : exact);
        }
  }
  if (want_db) {
    for (long long c = 0; c < C; ++c) {
      double exact = 0, abs_sum = 0;
      for (long long n = 0; n < N; ++n)
        for (long long i = 0; i < OH * OW; ++i) {
          const double g = val(dy, (n * C + c) * OH * OW + i);
          exact += g;
          abs_sum += std::fabs(g);
        }
      ++checked;
      nonfinite += !std::isfinite(exact);
      if (!close(val(db, c), exact, abs_sum, N * OH * OW)) report("grad_bias", c, val(db, c), exact);
    }
  }
  // Outputs the mask leaves out are null: nothing may have been written to the buffers at all.
  auto untouched = [](const std::vector<char>& t, size_t from) {
    for (size_t i = from; i < t.size(); ++i) {
      if (t[i] != 0x5a) return false;
    }
    return true;
  };
  if (!untouched(dx, want_dx ? n_in * es : 0) || !untouched(dw, want_dw ? n_w * es : 0) ||
      !untouched(db, want_db ? C * es : 0)) {
    std::printf("WROTE PAST AN OUTPUT\n");
    return 1;
  }
  std::printf("%s bad=%lld of %lld (non-finite %lld)\n", bad ? "FAIL" : "ok", bad, checked, nonfinite);
  return bad ? 1 : 0;
}
