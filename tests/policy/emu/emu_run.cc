// Runs one generated scan kernel (rewritten by gen.cc for emu.h, built as a shared object) on the CPU
// and checks it against a float64 scan, relative to the running magnitude; that nothing is written
// before or past the output (64 guard bytes either side), every load stays inside the input and is
// aligned to its size, and every store is aligned (emu.h's checks; both tensors 16-byte aligned). Usage: emu_run SO OUTER LEN INNER PROD DTYPE(0 f32, 1 f16, 2 bf16) GRID BLOCK CLUSTER
#include "emu_harness.h"
#include <dlfcn.h>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
int main(int argc, char** argv) {
  void* so = dlopen(argv[1], RTLD_NOW);
  if (!so) { std::printf("dlopen: %s\n", dlerror()); return 2; }
  auto kernel = reinterpret_cast<void (*)(const void*, void*)>(dlsym(so, "kjit_scan"));
  const long long outer = atoll(argv[2]), len = atoll(argv[3]), inner = atoll(argv[4]);
  const int prod = atoi(argv[5]), dt = atoi(argv[6]);
  gridDim.x = atoi(argv[7]); blockDim.x = atoi(argv[8]); emu_cluster = atoi(argv[9]);
  const long long n = outer * len * inner;
  const int es = esize(dt);
  std::vector<char> xs(n * es + 160), ys(n * es + 160, 0x5a);
  char* xp = xs.data() + (-reinterpret_cast<uintptr_t>(xs.data()) & 15) + 64;
  char* yp = ys.data() + (-reinterpret_cast<uintptr_t>(ys.data()) & 15) + 64;
  auto x = [&](long long i) { return xp + i; };
  std::vector<double> xv(n);
  std::mt19937 gen(42);
  std::normal_distribution<float> nd(prod ? 1.f : 0.f, prod ? 0.02f : 1.f);  // products near 1 stay finite
  for (long long i = 0; i < n; ++i) {
    const uint32_t u = from_f(nd(gen), dt);
    std::memcpy(x(i * es), &u, es);
    xv[i] = to_f(u, dt);
  }
  emu_read_lo = xp;
  emu_read_hi = xp + n * es;
  emu_run_grid([&] { kernel(xp, yp); });
  // Check: float64 scan, relative to the running magnitude.
  long long bad = 0, first = -1; double worst = 0;
  for (long long o = 0; o < outer; ++o)
    for (long long i = 0; i < inner; ++i) {
      double acc = prod ? 1 : 0, mag = 0;
      for (long long j = 0; j < len; ++j) {
        const long long e = (o * len + j) * inner + i;
        acc = prod ? acc * xv[e] : acc + xv[e];
        mag = std::max(mag, std::fabs(acc));
        uint32_t gu = 0;
        std::memcpy(&gu, yp + e * es, es);
        const float got = to_f(gu, dt);
        const double tol = (dt == 0 ? 1e-5 : dt == 1 ? 2e-3 : 1e-2) * std::max(mag, 1.0) + 1e-6;
        const double err = std::fabs(got - acc);
        if (!(err <= tol)) { if (first < 0) first = e; ++bad; }
        if (err > worst) worst = err;
      }
    }
  long long outside = 0;
  for (int k = 0; k < 64; ++k) outside += yp[-1 - k] != 0x5a || yp[n * es + k] != 0x5a;
  const long long reads = emu_bad_reads, stores = emu_bad_stores;
  const bool fail = bad || outside || reads || stores;
  std::printf("%s bad=%lld first=%lld worst_abs=%.3g (guard bytes hit %lld, bad loads %lld, misaligned stores %lld)\n",
              fail ? "FAIL" : "ok", bad, first, worst, outside, reads, stores);
  return fail ? 1 : 0;
}
