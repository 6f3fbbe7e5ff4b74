// Experiment harness: compiles a source written by `kjit_tune_spaces --emit-sources` with NVRTC (the options in
// its header), launches it with the header's launch shape on buffers of the given sizes (filled with seeded
// uniform floats), and prints the median of RUNS timed launches (CUDA events, L2 flushed before each). For ncu:
//   launch FILE.cu BYTES... [--runs N] [--outputs K]   e.g. launch pool.cu 1951108128 251658240 503316480 --runs 5
// Buffers are passed in order as the kernel's pointer parameters (the family's ABI: inputs, then outputs).
// --outputs K: the last K buffers are outputs, poisoned (all bytes 0xff) before the runs and hashed after them,
// so two kernels of one function can be compared bit for bit (same inputs: the fill is seeded).
// --save PATH writes the outputs' floats to PATH; --against PATH compares them with a file --save wrote (a kernel
// that rounds differently: the largest difference relative to max(1, |reference|), and NaNs that differ).
#include <cuda.h>
#include <nvrtc.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include <sstream>
#include <string>
#include <vector>

#define CU(x) do { CUresult r_ = (x); if (r_ != CUDA_SUCCESS) { const char* s_; cuGetErrorString(r_, &s_); std::printf("CUDA %s at line %d\n", s_, __LINE__); std::exit(1); } } while (0)

int main(int argc, char** argv) {
  if (argc < 3) { std::printf("usage: launch FILE.cu BYTES... [--runs N]\n"); return 2; }
  std::ifstream in(argv[1]);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string src = ss.str();
  int runs = 30, outputs = 0;
  const char* save = nullptr;
  const char* against = nullptr;
  std::vector<size_t> sizes;
  for (int i = 2; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--runs") && i + 1 < argc) runs = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--outputs") && i + 1 < argc) outputs = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--save") && i + 1 < argc) save = argv[++i];
    else if (!std::strcmp(argv[i], "--against") && i + 1 < argc) against = argv[++i];
    else sizes.push_back(std::strtoull(argv[i], nullptr, 10));
  }
  unsigned grid[3], block[3], shared = 0;
  char entry[128];
  const char* l = std::strstr(src.c_str(), "// launch: entry ");
  if (!l || std::sscanf(l, "// launch: entry %127s grid %u,%u,%u block %u,%u,%u shared %u", entry, &grid[0], &grid[1],
                        &grid[2], &block[0], &block[1], &block[2], &shared) != 8) {
    std::printf("no launch line in %s\n", argv[1]);
    return 2;
  }
  // The evaluator passes the toolkit's include folder (cuda_fp16.h): here $CUDA_HOME or /usr/local/cuda.
  const char* home = std::getenv("CUDA_HOME");
  std::vector<std::string> opts{"--gpu-architecture=sm_90", std::string("--include-path=") + (home ? home : "/usr/local/cuda") + "/include"};
  if (const char* o = std::strstr(src.c_str(), "// nvrtc options:")) {
    std::istringstream os(std::string(o + 17, std::strchr(o, '\n')));
    for (std::string w; os >> w;) opts.push_back(w);
  }
  nvrtcProgram prog;
  nvrtcCreateProgram(&prog, src.c_str(), argv[1], 0, nullptr, nullptr);
  std::vector<const char*> po;
  for (auto& o : opts) po.push_back(o.c_str());
  const nvrtcResult cr = nvrtcCompileProgram(prog, (int)po.size(), po.data());
  size_t logn = 0;
  nvrtcGetProgramLogSize(prog, &logn);
  std::string log(logn, '\0');
  nvrtcGetProgramLog(prog, log.data());
  if (cr != NVRTC_SUCCESS) { std::printf("nvrtc: %s\n", log.c_str()); return 1; }
  size_t n = 0;
  nvrtcGetCUBINSize(prog, &n);
  std::vector<char> cubin(n);
  nvrtcGetCUBIN(prog, cubin.data());
  CU(cuInit(0));
  CUdevice dev;
  CU(cuDeviceGet(&dev, 0));
  CUcontext ctx;
  CU(cuDevicePrimaryCtxRetain(&ctx, dev));
  CU(cuCtxSetCurrent(ctx));
  CUmodule mod;
  CU(cuModuleLoadData(&mod, cubin.data()));
  CUfunction fn;
  CU(cuModuleGetFunction(&fn, mod, entry));
  CU(cuFuncSetAttribute(fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, (int)shared));
  int regs = 0;
  cuFuncGetAttribute(&regs, CU_FUNC_ATTRIBUTE_NUM_REGS, fn);
  std::vector<CUdeviceptr> bufs(sizes.size());
  size_t total = 0;
  // Uniform floats in [-2, 2) from a seeded 64-bit mix (a normal draw took ~15 s for a 2 GB input).
  unsigned long long state = 1;
  const auto next = [&state] {
    unsigned long long z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  };
  for (size_t i = 0; i < sizes.size(); ++i) {
    CU(cuMemAlloc(&bufs[i], std::max<size_t>(sizes[i], 16)));
    const bool poisoned = i + outputs >= sizes.size();
    std::vector<float> h(sizes[i] / 4);
    if (poisoned) std::memset(h.data(), 0xff, h.size() * 4);
    else for (auto& x : h) x = (float)(next() >> 40) * (4.f / 16777216.f) - 2.f;
    CU(cuMemcpyHtoD(bufs[i], h.data(), h.size() * 4));
    total += sizes[i];
  }
  CUdeviceptr flush;
  const size_t flush_bytes = 512ull << 20;
  CU(cuMemAlloc(&flush, flush_bytes));
  std::vector<void*> args;
  for (auto& b : bufs) args.push_back(&b);
  CUevent e0, e1;
  CU(cuEventCreate(&e0, 0));
  CU(cuEventCreate(&e1, 0));
  std::vector<float> ts;
  for (int r = 0; r < runs + 3; ++r) {
    CU(cuMemsetD8Async(flush, (unsigned char)r, flush_bytes, nullptr));
    CU(cuEventRecord(e0, nullptr));
    CU(cuLaunchKernel(fn, grid[0], grid[1], grid[2], block[0], block[1], block[2], shared, nullptr, args.data(), nullptr));
    CU(cuEventRecord(e1, nullptr));
    CU(cuEventSynchronize(e1));
    float ms;
    CU(cuEventElapsedTime(&ms, e0, e1));
    if (r >= 3) ts.push_back(ms * 1000.f);
  }
  std::sort(ts.begin(), ts.end());
  const float med = ts[ts.size() / 2];
  // FNV-1a over the outputs' 64-bit words: equal hashes, equal bits (every run wrote the same).
  unsigned long long hash = 0xcbf29ce484222325ull;
  std::vector<float> out;
  for (size_t i = sizes.size() - outputs; i < sizes.size(); ++i) {
    std::vector<unsigned long long> h(sizes[i] / 8);
    CU(cuMemcpyDtoH(h.data(), bufs[i], h.size() * 8));
    for (auto w : h) hash = (hash ^ w) * 0x100000001b3ull;
    const float* f = reinterpret_cast<const float*>(h.data());
    out.insert(out.end(), f, f + h.size() * 2);
  }
  if (save) {
    std::ofstream(save, std::ios::binary).write(reinterpret_cast<const char*>(out.data()), (std::streamsize)(out.size() * 4));
  }
  double worst = 0;
  size_t nan_diff = 0, worst_at = 0;
  bool compared = false;
  if (against) {
    std::ifstream ref_in(against, std::ios::binary);
    std::vector<float> ref(out.size());
    compared = (bool)ref_in.read(reinterpret_cast<char*>(ref.data()), (std::streamsize)(ref.size() * 4));
    for (size_t i = 0; compared && i < out.size(); ++i) {
      if (std::isnan(out[i]) != std::isnan(ref[i])) { ++nan_diff; continue; }
      if (std::isnan(out[i])) continue;
      const double d = std::fabs((double)out[i] - ref[i]) / std::max(1.0, std::fabs((double)ref[i]));
      if (d > worst) { worst = d; worst_at = i; }
    }
  }
  std::printf("%s: %s grid %u block %u shared %u regs %d: median %.1f us (p10 %.1f, p90 %.1f) over %d runs, %.0f GB/s of the buffers",
              argv[1], entry, grid[0], block[0], shared, regs, med, ts[ts.size() / 10], ts[ts.size() * 9 / 10], (int)ts.size(),
              total / (med * 1e3));
  if (outputs > 0) std::printf(", outputs hash %016llx", hash);
  if (against && !compared) std::printf(", no reference in %s", against);
  if (compared) std::printf(", against %s: largest relative difference %.3g (element %zu), %zu NaNs differ", against, worst, worst_at, nan_diff);
  std::printf("\n");
  return 0;
}
