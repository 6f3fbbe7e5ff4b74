// Runs one generated scan kernel (rewritten by gen.cc for emu.h, built as a shared object) on the CPU
// and checks it against a float64 scan, relative to the running magnitude; and that nothing is written
// past the output. Usage: emu_run SO OUTER LEN INNER PROD DTYPE(0 f32, 1 f16, 2 bf16) GRID BLOCK CLUSTER
#include "emu.h"
#include <dlfcn.h>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <thread>
#include <vector>
thread_local emu_dim3 threadIdx, blockIdx;
emu_dim3 blockDim, gridDim;
thread_local EmuBlock* emu_block;
std::barrier<>* emu_cluster_bar;
thread_local std::optional<std::barrier<>::arrival_token> emu_token;
int emu_cluster = 1;
static float to_f(uint16_t u, int dt) {
  if (dt == 1) return __half2float(__ushort_as_half(u));
  return __bfloat162float(__ushort_as_bfloat16(u));
}
static uint16_t from_f(float f, int dt) {
  if (dt == 1) return __half_as_ushort(__float2half_rn(f));
  return __bfloat16_as_ushort(__float2bfloat16_rn(f));
}
int main(int argc, char** argv) {
  void* so = dlopen(argv[1], RTLD_NOW);
  if (!so) { std::printf("dlopen: %s\n", dlerror()); return 2; }
  auto kernel = reinterpret_cast<void (*)(const void*, void*)>(dlsym(so, "kjit_scan"));
  const long long outer = atoll(argv[2]), len = atoll(argv[3]), inner = atoll(argv[4]);
  const int prod = atoi(argv[5]), dt = atoi(argv[6]);
  gridDim.x = atoi(argv[7]); blockDim.x = atoi(argv[8]); emu_cluster = atoi(argv[9]);
  const long long n = outer * len * inner;
  const int esize = dt == 0 ? 4 : 2;
  std::vector<char> x(n * esize), y(n * esize + 64, 0x5a);
  std::vector<double> xv(n);
  std::mt19937 gen(42);
  std::normal_distribution<float> nd(prod ? 1.f : 0.f, prod ? 0.02f : 1.f);  // products near 1 stay finite
  for (long long i = 0; i < n; ++i) {
    float v = nd(gen);
    if (dt == 0) { std::memcpy(&x[i * 4], &v, 4); xv[i] = v; }
    else { uint16_t u = from_f(v, dt); std::memcpy(&x[i * 2], &u, 2); xv[i] = to_f(u, dt); }
  }
  // Blocks of one cluster run together; clusters one after another.
  const int nthreads = blockDim.x * emu_cluster;
  std::vector<char> shared((size_t)emu_cluster * EMU_SLAB * EMU_VARS);
  for (unsigned c0 = 0; c0 < gridDim.x; c0 += emu_cluster) {
    std::barrier<> cluster_bar(nthreads);
    emu_cluster_bar = &cluster_bar;
    std::vector<EmuBlock> blocks(emu_cluster);
    std::vector<std::unique_ptr<std::barrier<>>> bars;
    for (int b = 0; b < emu_cluster; ++b) {
      bars.emplace_back(new std::barrier<>(blockDim.x));
      blocks[b].block_bar = bars.back().get();
      for (unsigned w = 0; w < (blockDim.x + 31) / 32; ++w) {
        bars.emplace_back(new std::barrier<>(32));
        blocks[b].warp_bar[w] = bars.back().get();
      }
      blocks[b].shared = shared.data() + (size_t)b * EMU_SLAB * EMU_VARS;
    }
    std::vector<std::thread> ts;
    for (int b = 0; b < emu_cluster; ++b) {
      for (unsigned t = 0; t < blockDim.x; ++t) {
        ts.emplace_back([&, b, t] {
          threadIdx.x = t; blockIdx.x = c0 + b; emu_block = &blocks[b];
          if (blockIdx.x < gridDim.x) kernel(x.data(), y.data());
        });
      }
    }
    for (auto& t : ts) t.join();
  }
  // Check: float64 scan, relative to the running magnitude.
  long long bad = 0, first = -1; double worst = 0;
  for (long long o = 0; o < outer; ++o)
    for (long long i = 0; i < inner; ++i) {
      double acc = prod ? 1 : 0, mag = 0;
      for (long long j = 0; j < len; ++j) {
        const long long e = (o * len + j) * inner + i;
        acc = prod ? acc * xv[e] : acc + xv[e];
        mag = std::max(mag, std::fabs(acc));
        float got;
        if (dt == 0) std::memcpy(&got, &y[e * 4], 4);
        else { uint16_t u; std::memcpy(&u, &y[e * 2], 2); got = to_f(u, dt); }
        const double tol = (dt == 0 ? 1e-5 : dt == 1 ? 2e-3 : 1e-2) * std::max(mag, 1.0) + 1e-6;
        const double err = std::fabs(got - acc);
        if (!(err <= tol)) { if (first < 0) first = e; ++bad; }
        if (err > worst) worst = err;
      }
    }
  // Guard: nothing written past the end.
  for (int k = 0; k < 64; ++k) if (y[n * esize + k] != 0x5a) { std::printf("WROTE PAST END\n"); return 1; }
  std::printf("%s bad=%lld first=%lld worst_abs=%.3g\n", bad ? "FAIL" : "ok", bad, first, worst);
  return bad ? 1 : 0;
}
