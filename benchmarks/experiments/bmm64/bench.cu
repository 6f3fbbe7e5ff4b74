// Experiment harness (issue 7): times bmm kernels for [B,64,64] @ [B,64,64] float32 on the GPU with CUDA events,
// the L2 flushed before each run, median of RUNS; checks every written element against a float64 reference
// (sampled matrices) with C poisoned (NaN) before the checked run. `bench profile` runs each kernel once on
// B=4096 only, for ncu.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "ws.cu"

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { std::printf("CUDA %s at %s:%d\n", cudaGetErrorString(e_), __FILE__, __LINE__); std::exit(1); } } while (0)

extern "C" __global__ void gen_2048(const float*, const float*, float*);
extern "C" __global__ void gen_4096(const float*, const float*, float*);
extern "C" __global__ void gen_8192(const float*, const float*, float*);

struct Variant {
  std::string name;
  std::function<void(const float*, const float*, float*, int)> launch;
  std::function<bool(int)> supports;
};

template <int NG, int NST, int PADA, int TN, int UNR = 4>
Variant Ws(int sms) {
  typedef ws::Cfg<NG, NST, PADA, TN> C;
  char name[96];
  std::snprintf(name, sizeof name, "ws ng=%d nst=%d pada=%d tn=%d unr=%d (thr %d, smem %d)", NG, NST, PADA, TN, UNR, C::THREADS, C::SMEM);
  auto k = ws::bmm64_ws<NG, NST, PADA, TN, UNR>;
  CK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, C::SMEM));
  return {name, [=](const float* a, const float* b, float* c, int batch) {
            k<<<std::min(sms, batch), C::THREADS, C::SMEM>>>(a, b, c, batch);
          }, [](int) { return true; }};
}

template <int NG, int NST, int UNR>
Variant Wst(int sms) {
  const int smem = NST * 2 * 4096 * 4 + 2 * NST * 8, threads = NG * 64 + 32;
  char name[96];
  std::snprintf(name, sizeof name, "wst (A^T) ng=%d nst=%d unr=%d (thr %d, smem %d)", NG, NST, UNR, threads, smem);
  auto k = ws::bmm64_wst<NG, NST, UNR>;
  CK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  return {name, [=](const float* a, const float* b, float* c, int batch) {
            k<<<std::min(sms, batch), threads, smem>>>(a, b, c, batch);
          }, [](int) { return true; }};
}

Variant Gen(int batch, void (*k)(const float*, const float*, float*), int grid, int block, int smem) {
  CK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  return {"generated default " + std::to_string(batch), [=](const float* a, const float* b, float* c, int) {
            k<<<grid, block, smem>>>(a, b, c);
          }, [=](int bt) { return bt == batch; }};
}

int main(int argc, char** argv) {
  const bool profile = argc > 1 && std::strcmp(argv[1], "profile") == 0;
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  std::vector<Variant> vs;
  // Launch shapes from the emitted sources' headers (grid depends on the batch).
  vs.push_back(Gen(2048, gen_2048, GEN_GRID_2048, 64, 49168));
  vs.push_back(Gen(4096, gen_4096, GEN_GRID_4096, 64, 49168));
  vs.push_back(Gen(8192, gen_8192, GEN_GRID_8192, 64, 49168));
  vs.push_back(Ws<4, 6, 0, 8>(sms));
  vs.push_back(Ws<4, 6, 0, 8, 2>(sms));
  vs.push_back(Ws<4, 6, 0, 8, 8>(sms));
  vs.push_back(Ws<4, 5, 0, 8>(sms));
  vs.push_back(Ws<3, 6, 0, 8>(sms));
  vs.push_back(Ws<5, 6, 0, 8>(sms));
  vs.push_back(Ws<2, 6, 0, 4>(sms));
  vs.push_back(Ws<3, 6, 0, 4>(sms));
  vs.push_back(Ws<4, 6, 0, 4>(sms));
  vs.push_back(Wst<4, 6, 4>(sms));
  vs.push_back(Wst<4, 6, 8>(sms));
  vs.push_back(Wst<4, 6, 16>(sms));
  vs.push_back(Wst<4, 5, 8>(sms));
  vs.push_back(Wst<3, 6, 8>(sms));
  vs.push_back(Wst<5, 6, 8>(sms));
  vs.push_back(Wst<6, 6, 8>(sms));
  const int maxb = 8192;
  const size_t n = (size_t)maxb * 4096;
  std::vector<float> ha(n), hb(n), hc(n);
  std::mt19937 rng(7);
  std::normal_distribution<float> nd;
  for (auto& x : ha) x = nd(rng);
  for (auto& x : hb) x = nd(rng);
  float *a, *b, *c;
  char* flush;
  const size_t flush_bytes = 512ull << 20;
  CK(cudaMalloc(&a, n * 4));
  CK(cudaMalloc(&b, n * 4));
  CK(cudaMalloc(&c, n * 4));
  CK(cudaMalloc(&flush, flush_bytes));
  CK(cudaMemcpy(a, ha.data(), n * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(b, hb.data(), n * 4, cudaMemcpyHostToDevice));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  std::printf("| kernel | batch | median us | p10 us | p90 us | GB/s | check |\n|---|---:|---:|---:|---:|---:|---|\n");
  for (int batch : profile ? std::vector<int>{4096} : std::vector<int>{2048, 4096, 8192}) {
    for (const Variant& v : vs) {
      if (!v.supports(batch)) continue;
      if (profile) {
        v.launch(a, b, c, batch);
        CK(cudaDeviceSynchronize());
        std::printf("| %s | %d | profiled |\n", v.name.c_str(), batch);
        continue;
      }
      // Check: poison, run, compare sampled matrices (and that no element of any matrix stayed NaN).
      CK(cudaMemset(c, 0xff, (size_t)batch * 4096 * 4));
      v.launch(a, b, c, batch);
      CK(cudaGetLastError());
      CK(cudaDeviceSynchronize());
      CK(cudaMemcpy(hc.data(), c, (size_t)batch * 4096 * 4, cudaMemcpyDeviceToHost));
      long bad = 0, unwritten = 0;
      double worst = 0;
      for (size_t i = 0; i < (size_t)batch * 4096; ++i) unwritten += std::isnan(hc[i]);
      for (int m = 0; m < batch; m += (m % 97 == 0 ? 1 : 37)) {
        const float* A = ha.data() + (size_t)m * 4096;
        const float* B = hb.data() + (size_t)m * 4096;
        for (int r = 0; r < 64; ++r)
          for (int col = 0; col < 64; ++col) {
            double s = 0, sa = 0;
            for (int k = 0; k < 64; ++k) s += (double)A[r * 64 + k] * B[k * 64 + col], sa += std::fabs((double)A[r * 64 + k] * B[k * 64 + col]);
            const double d = std::fabs(s - hc[(size_t)m * 4096 + r * 64 + col]) / (sa + 1e-30);
            worst = std::max(worst, d);
            bad += d > 1e-5;
          }
      }
      std::vector<float> ts;
      for (int r = 0; r < 60; ++r) {
        CK(cudaMemsetAsync(flush, r & 0xff, flush_bytes));
        CK(cudaEventRecord(e0));
        v.launch(a, b, c, batch);
        CK(cudaEventRecord(e1));
        CK(cudaEventSynchronize(e1));
        float ms = 0;
        CK(cudaEventElapsedTime(&ms, e0, e1));
        if (r >= 5) ts.push_back(ms * 1000.f);
      }
      std::sort(ts.begin(), ts.end());
      const float med = ts[ts.size() / 2];
      std::printf("| %s | %d | %.1f | %.1f | %.1f | %.0f | %s (worst rel %.1e, unwritten %ld) |\n", v.name.c_str(), batch, med,
                  ts[ts.size() / 10], ts[ts.size() * 9 / 10], 3.0 * batch * 4096 * 4 / (med * 1e3),
                  bad == 0 && unwritten == 0 ? "ok" : "FAIL", worst, unwritten);
    }
  }
  return 0;
}
