// Runs one generated softmax kernel (rewritten by softmax_gen.cc for emu.h, built as a shared object)
// on the CPU and checks it against softmax / log_softmax in float64 of the input as the kernel reads
// it, NaN wherever PyTorch gives NaN (a row with NaN or +Inf, or wholly -Inf), within a relative
// tolerance for the output dtype; that every output element is written (the output starts poisoned)
// and nothing around it; that every load stays inside the input and is aligned to its size, every
// store aligned, every index of the dynamic shared array inside the launch's bytes (emu.h's checks).
// Shared memory starts NaN. Rows (slices along the softmax dim) cycle through five kinds, row r of
// kind r % 5: 0 normals with a -0.0; 1 normals + 100 (exp overflows without the max taken out) with
// -Inf first, last and at one place; 2 a NaN at one place; 3 a +Inf at one place; 4 all -Inf.
// Usage: softmax_run SO LOG IN_DTYPE OUT_DTYPE OUTER LEN INNER GRID BLOCK CLUSTER
//   (dtypes 0 f32 1 f16 2 bf16; row (o, i) of the [OUTER, LEN, INNER] view: elements
//   (o * LEN + j) * INNER + i, o * INNER + i = r)
#include "emu_harness.h"
#include <dlfcn.h>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
int main(int argc, char** argv) {
  if (argc < 11) { std::printf("usage\n"); return 2; }
  void* so = dlopen(argv[1], RTLD_NOW);
  if (!so) { std::printf("dlopen: %s\n", dlerror()); return 2; }
  auto kernel = reinterpret_cast<void (*)(const void*, void*)>(dlsym(so, "kjit_softmax"));
  const int log = atoi(argv[2]), dt = atoi(argv[3]), odt = atoi(argv[4]);
  const long long outer = atoll(argv[5]), len = atoll(argv[6]), inner = atoll(argv[7]);
  const long long rows = outer * inner, n = rows * len;
  gridDim.x = atoi(argv[8]); blockDim.x = atoi(argv[9]); emu_cluster = atoi(argv[10]);
  const int es = esize(dt), os = esize(odt);
  // Both 16-byte aligned with 64 guard bytes either side: NaN bytes around the input, the output and
  // its guards poisoned (0x5a: a large positive value in every dtype, never a softmax or log_softmax).
  std::vector<char> xs(n * es + 160, (char)0xff), ys(n * os + 160, 0x5a);
  char* x = xs.data() + (-reinterpret_cast<uintptr_t>(xs.data()) & 15) + 64;
  char* y = ys.data() + (-reinterpret_cast<uintptr_t>(ys.data()) & 15) + 64;
  auto at = [&](long long r, long long j) { return (r / inner * len + j) * inner + r % inner; };
  std::vector<float> xv(n);  // the input's values as the kernel reads them
  std::mt19937 gen(5);
  std::normal_distribution<float> nd;
  const float nan = __int_as_float(0x7fc00000), inf = __int_as_float(0x7f800000);
  for (long long r = 0; r < rows; ++r) {
    const long long p1 = gen() % len, p2 = gen() % len;
    for (long long j = 0; j < len; ++j) {
      float f = nd(gen);
      switch (r % 5) {
        case 0: f = j == p2 ? -0.f : f; break;
        case 1: f = (j == 0 || j == len - 1 || j == p1) ? -inf : f + 100; break;
        case 2: f = j == p1 ? nan : f; break;
        case 3: f = j == p1 ? inf : f; break;
        default: f = -inf;
      }
      const uint32_t u = from_f(f, dt);
      std::memcpy(&x[at(r, j) * es], &u, es);
      xv[at(r, j)] = to_f(u, dt);
    }
  }
  emu_read_lo = x;
  emu_read_hi = x + n * es;
  emu_run_grid([&] { kernel(x, y); }, 0xff);
  // float64, NaN rows as PyTorch's: max NaN, or exp(inf - inf), or every exp(-inf - -inf).
  const double rtol = odt == 0 ? 1e-5 : odt == 1 ? 1e-3 : 8e-3, atol = odt == 1 ? 1e-7 : 1e-38;
  long long bad = 0, nan_rows = 0;
  char first[200] = "";
  double worst = 0;
  for (long long r = 0; r < rows; ++r) {
    double m = -INFINITY, s = 0;
    bool has_nan = false;
    for (long long j = 0; j < len; ++j) { has_nan |= std::isnan(xv[at(r, j)]); m = std::max(m, (double)xv[at(r, j)]); }
    for (long long j = 0; j < len; ++j) s += std::exp(xv[at(r, j)] - m);
    const bool nan_row = has_nan || std::isinf(m);
    nan_rows += nan_row;
    for (long long j = 0; j < len; ++j) {
      const double v = xv[at(r, j)], want = nan_row ? NAN : log ? v - m - std::log(s) : std::exp(v - m) / s;
      uint32_t gu = 0;
      std::memcpy(&gu, &y[at(r, j) * os], os);
      const double got = to_f(gu, odt), tol = log ? rtol * (std::fabs(want) + 1) : rtol * std::fabs(want) + atol;
      const bool ok = std::isnan(want) ? std::isnan(got) : got == want || std::fabs(got - want) <= tol;
      if (std::isfinite(want)) worst = std::max(worst, std::fabs(got - want) / tol);
      if (!ok && bad++ == 0) {
        std::snprintf(first, sizeof first, "; first at row %lld (o=%lld i=%lld) j=%lld: got %.9g want %.9g (tol %.3g)", r,
                      r / inner, r % inner, j, got, want, tol);
      }
    }
  }
  long long outside = 0;
  for (int k = 0; k < 64; ++k) outside += y[-1 - k] != 0x5a || y[n * os + k] != 0x5a;
  const long long reads = emu_bad_reads, stores = emu_bad_stores, shared = emu_bad_shared;
  const bool fail = bad || outside || reads || stores || shared;
  std::printf("%s bad=%lld of %lld (rows %lld, NaN rows %lld, worst error/tolerance %.3g; guard bytes hit %lld, bad "
              "loads %lld, misaligned stores %lld, shared indices out of range %lld)%s\n", fail ? "FAIL" : "ok", bad, n,
              rows, nan_rows, worst, outside, reads, stores, shared, first);
  return fail ? 1 : 0;
}
