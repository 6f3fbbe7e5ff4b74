// Runs one generated pool kernel (rewritten by pool_gen.cc for emu.h, built as a shared object) on
// the CPU and checks it against PyTorch's CUDA kernels' loops transcribed: max pooling bitwise on
// values and indices (ties and NaN from small integer inputs with NaN, +-Inf and -0.0 mixed in),
// average pooling to 1e-6 relative in float; that nothing is written past the outputs; and that every
// load stays inside the input tensor's bytes and is aligned to its size (emu.h's read checks). The
// input starts OFFSET elements past a 16-byte boundary (the key's storage offset and alignment), the
// bytes around it NaN, so a read outside it that escaped the checks would show in the results too.
// Usage: pool_run SO DTYPE MAX CL DIMS BATCHED N C D H W KT KH KW ST SH SW PT PH PW DT DH DW CEIL CIP DIV GRID BLOCK
//        OFFSET
#include "emu_harness.h"
#include <dlfcn.h>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
// pooling_output_shape_pad_lr
static long long out_size(long long in, long long k, long long p, long long s, long long d, bool ceil) {
  long long num = in + 2 * p - d * (k - 1) - 1 + (ceil ? s - 1 : 0);
  long long o = (num >= 0 ? num / s : -((-num + s - 1) / s)) + 1;
  if (ceil && (o - 1) * s >= in + p) --o;
  return o;
}
int main(int argc, char** argv) {
  void* so = dlopen(argv[1], RTLD_NOW);
  if (!so) { std::printf("dlopen: %s\n", dlerror()); return 2; }
  long long v[32];
  for (int i = 2; i < argc && i < 34; ++i) v[i - 2] = atoll(argv[i]);
  const int dt = (int)v[0];
  const bool is_max = v[1], cl = v[2];
  const int dims = (int)v[3];
  const bool batched = v[4];
  const long long N = v[5], C = v[6], D = v[7], H = v[8], W = v[9];
  const long long kT = v[10], kH = v[11], kW = v[12], sT = v[13], sH = v[14], sW = v[15], pT = v[16], pH = v[17],
                  pW = v[18], dT = v[19], dH = v[20], dW = v[21];
  const bool ceil = v[22], cip = v[23];
  const long long div = v[24];
  gridDim.x = (unsigned)v[25]; blockDim.x = (unsigned)v[26];
  const long long offset = argc > 29 ? v[27] : 0;
  const long long OD = out_size(D, kT, pT, sT, dT, ceil), OH = out_size(H, kH, pH, sH, dH, ceil),
                  OW = out_size(W, kW, pW, sW, dW, ceil);
  const int es = esize(dt);
  const long long n_in = N * C * D * H * W, n_out = N * C * OD * OH * OW;
  std::vector<char> storage(n_in * es + offset * es + 256, (char)0xff), y(n_out * es + 64, 0x5a), ind(n_out * 8 + 64, 0x5a);
  char* x = storage.data() + (-reinterpret_cast<uintptr_t>(storage.data()) & 15) + 64 + offset * es;
  std::mt19937 gen(7);
  // Small integers make ties; special values 1/8 of the time (NaN, +Inf, -Inf, -0.0), more where
  // windows are small, so all -inf windows and NaN after NaN occur.
  std::uniform_int_distribution<int> small(-3, 3), pick(0, 31);
  const float specials[4] = {__int_as_float(0x7fc00000), __int_as_float(0x7f800000), -__int_as_float(0x7f800000), -0.f};
  std::normal_distribution<float> nd;
  for (long long i = 0; i < n_in; ++i) {
    const int r = pick(gen);
    float f = is_max ? (r < 4 ? specials[r] : (float)small(gen)) : (r < 1 ? specials[pick(gen) % 4] : nd(gen));
    if (is_max && r == 5) f = -__int_as_float(0x7f800000);
    const uint32_t u = from_f(f, dt);
    std::memcpy(&x[i * es], &u, es);
  }
  // Element (n, c, t, h, w) of a tensor of spatial sizes (d, h, w) in the layout.
  auto at = [&](long long n, long long c, long long t, long long h, long long w, long long d_, long long h_, long long w_) {
    return cl ? (((n * d_ + t) * h_ + h) * w_ + w) * C + c : (((n * C + c) * d_ + t) * h_ + h) * w_ + w;
  };
  auto in_raw = [&](long long e) { uint32_t u = 0; std::memcpy(&u, &x[e * es], es); return u; };
  emu_read_lo = x;
  emu_read_hi = x + n_in * es;
  void* fn = dlsym(so, "kjit_pool");
  emu_run_grid([&] {
    if (is_max) reinterpret_cast<void (*)(const void*, void*, void*)>(fn)(x, y.data(), ind.data());
    else reinterpret_cast<void (*)(const void*, void*)>(fn)(x, y.data());
  });
  long long bad = 0, first = -1, empties = 0, nans = 0;
  for (long long n = 0; n < N; ++n)
    for (long long c = 0; c < C; ++c)
      for (long long od = 0; od < OD; ++od)
        for (long long oh = 0; oh < OH; ++oh)
          for (long long ow = 0; ow < OW; ++ow) {
            const long long e = at(n, c, od, oh, ow, OD, OH, OW);
            uint32_t want = 0, got = 0;
            long long want_i = 0, got_i = 0;
            std::memcpy(&got, &y[e * es], es);
            bool ok;
            if (is_max) {
              long long ts_ = od * sT - pT, hs = oh * sH - pH, ws = ow * sW - pW;
              const long long te = std::min(ts_ + (kT - 1) * dT + 1, D), he = std::min(hs + (kH - 1) * dH + 1, H),
                              we = std::min(ws + (kW - 1) * dW + 1, W);
              while (ts_ < 0) ts_ += dT;
              while (hs < 0) hs += dH;
              while (ws < 0) ws += dW;
              float best = -__int_as_float(0x7f800000);
              want = from_f(best, dt);
              // The channels_last 2-D kernel starts its index at 0; the others at the window's start.
              want_i = (cl && dims == 2) ? 0 : (ts_ * H + hs) * W + ws;
              bool any = false;
              for (long long t = ts_; t < te; t += dT)
                for (long long h = hs; h < he; h += dH)
                  for (long long w = ws; w < we; w += dW) {
                    any = true;
                    const uint32_t u = in_raw(at(n, c, t, h, w, D, H, W));
                    const float f = to_f(u, dt);
                    if (f > best || std::isnan(f)) { best = f; want = u; want_i = (t * H + h) * W + w; }
                  }
              empties += !any;
              nans += std::isnan(best);
              std::memcpy(&got_i, &ind[e * 8], 8);
              ok = got == want && got_i == want_i;
            } else {
              long long ts_ = od * sT - pT, hs = oh * sH - pH, ws = ow * sW - pW;
              long long te = std::min(ts_ + kT, D + pT), he = std::min(hs + kH, H + pH), we = std::min(ws + kW, W + pW);
              const long long pool = (te - ts_) * (he - hs) * (we - ws);
              ts_ = std::max(ts_, 0LL); hs = std::max(hs, 0LL); ws = std::max(ws, 0LL);
              te = std::min(te, D); he = std::min(he, H); we = std::min(we, W);
              float sum = 0;
              for (long long t = ts_; t < te; ++t)
                for (long long h = hs; h < he; ++h)
                  for (long long w = ws; w < we; ++w) sum += to_f(in_raw(at(n, c, t, h, w, D, H, W)), dt);
              const long long dv = div ? div : cip ? pool : (te - ts_) * (he - hs) * (we - ws);
              const float r = (ts_ >= te || hs >= he || ws >= we) ? 0.f : sum / (float)dv;
              want = from_f(r, dt);
              const float g = to_f(got, dt), w_ = to_f(want, dt);
              ok = got == want || (std::isnan(g) && std::isnan(w_)) ||
                   std::fabs(g - w_) <= 1e-6 * std::fabs(w_) + 1e-7;
            }
            if (!ok) {
              if (first < 0) {
                first = e;
                std::printf("first bad at n=%lld c=%lld od=%lld oh=%lld ow=%lld: got %x/%lld want %x/%lld\n", n, c, od, oh, ow,
                            got, got_i, want, want_i);
              }
              ++bad;
            }
          }
  for (int k = 0; k < 64; ++k) {
    if (y[n_out * es + k] != 0x5a || ind[n_out * 8 + k] != 0x5a) { std::printf("WROTE PAST END\n"); return 1; }
  }
  if (emu_bad_reads > 0) { std::printf("FAIL: %lld loads outside the input or misaligned\n", emu_bad_reads.load()); return 1; }
  if (!is_max) {
    for (long long i = 0; i < n_out * 8; ++i) if (ind[i] != 0x5a) { std::printf("avg wrote an index\n"); return 1; }
  }
  std::printf("%s bad=%lld of %lld (empty windows %lld, NaN results %lld)\n", bad ? "FAIL" : "ok", bad, n_out, empties, nans);
  return bad ? 1 : 0;
}
