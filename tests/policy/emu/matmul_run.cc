// Runs one generated matmul kernel (rewritten by matmul_gen.cc for emu.h, built as a shared object) on
// the CPU and checks it bitwise against the product the family promises: per output, float32 fused
// multiply-adds of A[b, m, k] * B[b, k, n] in ascending k from +0, rounded once to the dtype (NaN
// matching NaN). Inputs are laid out by the given strides in storages sized for them (transposed,
// padded and broadcast operands); 1/256 of the elements are NaN, +-Inf or -0.0, so NaN and Inf results
// appear and are checked. Also checks that nothing past the output is written. The reference is also
// compared with a float64 product (finite outputs): a kernel that matched a wrong reference would show.
// Reads (loads and cp.async sources) are checked against the operands' views: nothing outside them is
// read (the kernel does not know the allocation around a view), nothing misaligned. AOFF, BOFF: the
// views start so many elements into their 16-byte aligned storages (a storage offset).
// Usage: matmul_run SO DTYPE B M K N SAB SAM SAK SBB SBK SBN GRID BLOCK SHARED AOFF BOFF
#include "emu_harness.h"
#include <dlfcn.h>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
int main(int argc, char** argv) {
  void* so = dlopen(argv[1], RTLD_NOW);
  if (!so) { std::printf("dlopen: %s\n", dlerror()); return 2; }
  long long v[16] = {};
  for (int i = 2; i < argc && i < 18; ++i) v[i - 2] = atoll(argv[i]);
  const int dt = (int)v[0];
  const long long B = v[1], M = v[2], K = v[3], N = v[4], SAB = v[5], SAM = v[6], SAK = v[7], SBB = v[8], SBK = v[9],
                  SBN = v[10];
  gridDim.x = (unsigned)v[11]; blockDim.x = (unsigned)v[12];
  if (v[13] > EMU_SLAB * EMU_VARS) { std::printf("shared memory over the emulator's slab\n"); return 2; }
  const int es = esize(dt);
  const long long na = (B - 1) * SAB + (M - 1) * SAM + (K - 1) * SAK + 1;
  const long long nb = (B - 1) * SBB + (K - 1) * SBK + (N - 1) * SBN + 1;
  const long long nc = B * M * N;
  const long long aoff = v[14], boff = v[15];
  std::vector<char> as((aoff + na) * es + 64), bs((boff + nb) * es + 64), c(nc * es + 64, 0x5a);
  // Views into the storages (vector<char>'s new[] is 16-byte aligned); `a` and `b` below are the views.
  struct View { char* p; char& operator[](long long i) const { return p[i]; } char* data() const { return p; } };
  const View a{as.data() + aoff * es}, b{bs.data() + boff * es};
  emu_read_lo = a.data(); emu_read_hi = a.data() + na * es;
  emu_read_lo2 = b.data(); emu_read_hi2 = b.data() + nb * es;
  std::mt19937 gen(7);
  std::normal_distribution<float> nd;
  std::uniform_int_distribution<int> pick(0, 1023);
  const float specials[4] = {__int_as_float(0x7fc00000), __int_as_float(0x7f800000), -__int_as_float(0x7f800000), -0.f};
  auto fill = [&](const View& t, long long count) {
    for (long long i = 0; i < count; ++i) {
      const int r = pick(gen);
      const float f = r < 4 ? specials[r] : nd(gen);
      const uint32_t u = from_f(f, dt);
      std::memcpy(&t[i * es], &u, es);
    }
  };
  fill(a, na);
  fill(b, nb);
  emu_shared_limit = v[13];  // the launch's dynamic shared bytes: the kernel's only shared array
  void* fn = dlsym(so, "kjit_matmul");
  // Shared memory starts as NaN bytes (0xff): a read of what nothing wrote shows, and so does a store past the
  // launch's bytes (emu_shared_overrun).
  emu_run_grid([&] { reinterpret_cast<void (*)(const void*, const void*, void*)>(fn)(a.data(), b.data(), c.data()); }, 0xff);
  auto raw = [&](const auto& t, long long e) { uint32_t u = 0; std::memcpy(&u, &t[e * es], es); return u; };
  long long bad = 0, nans = 0, infs = 0, far = 0;
  for (long long bi = 0; bi < B; ++bi)
    for (long long m = 0; m < M; ++m)
      for (long long n = 0; n < N; ++n) {
        float acc = 0.f;
        double exact = 0, mag = 0;
        for (long long k = 0; k < K; ++k) {
          const float x = to_f(raw(a, bi * SAB + m * SAM + k * SAK), dt);
          const float y = to_f(raw(b, bi * SBB + k * SBK + n * SBN), dt);
          acc = std::fmaf(x, y, acc);
          exact += (double)x * y;
          mag += std::fabs((double)x * y);
        }
        const uint32_t want = from_f(acc, dt);
        const uint32_t got = raw(c, (bi * M + m) * N + n);
        const bool ok = got == want || (std::isnan(to_f(got, dt)) && std::isnan(to_f(want, dt)));
        nans += std::isnan(to_f(want, dt));
        infs += std::isinf(to_f(want, dt));
        // The reference itself: within float32 rounding of the float64 sum, then the dtype's rounding.
        if (std::isfinite(exact) && std::isfinite(to_f(want, dt))) {
          const double ulp = dt == 0 ? 0x1p-23 : dt == 1 ? 0x1p-10 : 0x1p-7;
          if (std::fabs(to_f(want, dt) - exact) > K * 0x1p-24 * mag + ulp * std::fabs(exact) + 1e-30) ++far;
        }
        if (!ok) {
          if (bad == 0) {
            std::printf("first bad at b=%lld m=%lld n=%lld: got %x (%g) want %x (%g)\n", bi, m, n, got, to_f(got, dt), want,
                        to_f(want, dt));
          }
          ++bad;
        }
      }
  for (int k = 0; k < 64; ++k) {
    if (c[nc * es + k] != 0x5a) { std::printf("WROTE PAST END\n"); return 1; }
  }
  if (far) { std::printf("REFERENCE off the float64 product at %lld outputs\n", far); return 1; }
  const long long bad_reads = emu_bad_reads.load();
  const bool fail = bad || bad_reads || emu_shared_overrun;
  std::printf("%s bad=%lld of %lld (NaN results %lld, Inf results %lld) bad_reads=%lld shared_overrun=%lld\n",
              fail ? "FAIL" : "ok", bad, nc, nans, infs, bad_reads, emu_shared_overrun);
  return fail ? 1 : 0;
}
