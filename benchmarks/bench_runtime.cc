// Runtime micro-benchmarks (Google Benchmark):
//   OpKey       encode / hash / decode of a typical key, in ns
//   NVRTC       compile latency of a small and a large kernel (memory cache bypassed)
//   Launch      host cost of Function::Launch (checked) against a plain cuLaunchKernel
// GPU benchmarks report an error row, with the reason, where there is no GPU.
//   kjit_bench_runtime --benchmark_filter=OpKey --benchmark_format=json
#include <benchmark/benchmark.h>

#include <optional>
#include <string>

#include "kjit/runtime/compiler.h"
#include "kjit/runtime/gpu.h"
#include "kjit/runtime/op_key.h"

namespace {

using namespace kjit;

// A layer_norm call: the shape of key the shim computes on every call.
OpKey LayerNormKey() {
  return OpKey::Single("aten::native_layer_norm", "",
                       {TensorDesc::Contiguous(DType::kBFloat16, {65536, 1024}), IntList{1024},
                        TensorDesc::Contiguous(DType::kBFloat16, {1024}),
                        TensorDesc::Contiguous(DType::kBFloat16, {1024}), 1e-5},
                       90);
}

void BM_OpKeyEncode(benchmark::State& state) {
  const OpKey key = LayerNormKey();
  for (auto _ : state) benchmark::DoNotOptimize(key.Encode());
}
BENCHMARK(BM_OpKeyEncode);

void BM_OpKeyEncodeAndHash(benchmark::State& state) {
  const OpKey key = LayerNormKey();
  for (auto _ : state) benchmark::DoNotOptimize(key.Hash());
}
BENCHMARK(BM_OpKeyEncodeAndHash);

// The shim's path: write the key straight from the call's arguments into a
// reused buffer, then hash; no OpKey is built.
void BM_OpKeyWriterAndHash(benchmark::State& state) {
  const int64_t x_sizes[] = {65536, 1024}, x_strides[] = {1024, 1};
  const int64_t w_sizes[] = {1024}, w_strides[] = {1};
  const int64_t normalized[] = {1024};
  std::string buffer;
  buffer.reserve(256);
  for (auto _ : state) {
    KeyWriter w(&buffer);
    w.BeginKey(90, 0, 1);
    w.BeginCall("aten::native_layer_norm", "", 5);
    w.Tensor(DType::kBFloat16, x_sizes, x_strides, 0, 16);
    w.IntList(normalized);
    w.Tensor(DType::kBFloat16, w_sizes, w_strides, 0, 16);
    w.Tensor(DType::kBFloat16, w_sizes, w_strides, 0, 16);
    w.Double(1e-5);
    benchmark::DoNotOptimize(HashBytes(buffer));
  }
}
BENCHMARK(BM_OpKeyWriterAndHash);

void BM_OpKeyDecode(benchmark::State& state) {
  const std::string bytes = LayerNormKey().Encode();
  for (auto _ : state) benchmark::DoNotOptimize(OpKey::Decode(bytes));
}
BENCHMARK(BM_OpKeyDecode);

constexpr char kSmallKernel[] = R"(
extern "C" __global__ void axpy(float a, const float* x, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] += a * x[i] + KJIT_SALT;
})";

// A realistic generated kernel: fp16/bf16 headers, templates, several
// instantiations of a row-reduction with unrolled vector loads.
std::string LargeKernel() {
  std::string s = R"(
#include <cuda_fp16.h>
#include <cuda_bf16.h>
template <typename T> __device__ float to_f(T v);
template <> __device__ float to_f<float>(float v) { return v; }
template <> __device__ float to_f<__half>(__half v) { return __half2float(v); }
template <> __device__ float to_f<__nv_bfloat16>(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename T, int THREADS, int VEC>
__global__ void __launch_bounds__(THREADS) row_softmax(const T* __restrict__ x, T* __restrict__ y, int cols) {
  __shared__ float red[THREADS / 32];
  const T* row = x + (long)blockIdx.x * cols;
  float m = -__int_as_float(0x7f800000);
  for (int c = threadIdx.x * VEC; c < cols; c += THREADS * VEC) {
#pragma unroll
    for (int v = 0; v < VEC; ++v) if (c + v < cols) m = fmaxf(m, to_f(row[c + v]));
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffff, m, o));
  if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = m;
  __syncthreads();
  m = red[0];
  for (int i = 1; i < THREADS / 32; ++i) m = fmaxf(m, red[i]);
  __syncthreads();
  float sum = 0;
  for (int c = threadIdx.x * VEC; c < cols; c += THREADS * VEC) {
#pragma unroll
    for (int v = 0; v < VEC; ++v) if (c + v < cols) sum += __expf(to_f(row[c + v]) - m);
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffff, sum, o);
  if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = sum;
  __syncthreads();
  sum = 0;
  for (int i = 0; i < THREADS / 32; ++i) sum += red[i];
  for (int c = threadIdx.x * VEC; c < cols; c += THREADS * VEC) {
#pragma unroll
    for (int v = 0; v < VEC; ++v) if (c + v < cols) y[(long)blockIdx.x * cols + c + v] = T(__expf(to_f(row[c + v]) - m) / (sum + KJIT_SALT));
  }
}
)";
  return s;
}

std::vector<std::string> LargeKernelInstances() {
  std::vector<std::string> names;
  for (const char* t : {"float", "__half", "__nv_bfloat16"}) {
    for (int threads : {128, 256, 512, 1024}) {
      for (int vec : {1, 2, 4, 8}) {
        names.push_back(std::string("row_softmax<") + t + ", " + std::to_string(threads) + ", " + std::to_string(vec) +
                        ">");
      }
    }
  }
  return names;
}

// Each iteration compiles a kernel no cache has seen: KJIT_SALT is a constant
// the kernels compute with, so each iteration's PTX and SASS differ too. (A
// comment alone would not do: it is gone after preprocessing, and an earlier
// run on the H200 showed later compiles of comment-only variants far faster
// than the first.)
void RunCompile(benchmark::State& state, const CompileRequest& base) {
  Compiler compiler;
  static int unique = 0;
  CompileRequest req = base;
  for (auto _ : state) {
    state.PauseTiming();
    req.options = base.options;
    req.options.push_back("-DKJIT_SALT=" + std::to_string(++unique) + ".0f");
    state.ResumeTiming();
    auto r = compiler.Compile(req);
    if (!r.ok()) {
      state.SkipWithError(r.status().ToString().c_str());
      return;
    }
    state.counters["cubin_bytes"] = static_cast<double>((*r)->cubin.size());
  }
}

void BM_NvrtcCompileSmall(benchmark::State& state) {
  CompileRequest req;
  req.source = kSmallKernel;
  RunCompile(state, req);
}
BENCHMARK(BM_NvrtcCompileSmall)->Unit(benchmark::kMillisecond)->Iterations(10);

void BM_NvrtcCompileLarge(benchmark::State& state) {
  CompileRequest req;
  req.source = LargeKernel();
  req.name_expressions = LargeKernelInstances();  // 48 instantiations
  RunCompile(state, req);
}
BENCHMARK(BM_NvrtcCompileLarge)->Unit(benchmark::kMillisecond)->Iterations(3);

// ---- launch overhead

// The checks Function::Launch adds before cuLaunchKernel, alone (no GPU needed).
void BM_CheckLaunchConfig(benchmark::State& state) {
  LaunchLimits limits;
  limits.max_threads_per_block = 1024;
  limits.max_block_dim[0] = limits.max_block_dim[1] = 1024;
  limits.max_block_dim[2] = 64;
  limits.max_grid_dim[0] = 2147483647;
  limits.max_grid_dim[1] = limits.max_grid_dim[2] = 65535;
  limits.max_shared_bytes_optin = 232448;
  LaunchConfig cfg{{4096, 1, 1}, {256, 1, 1}, 1024};
  for (auto _ : state) {
    benchmark::DoNotOptimize(&cfg);
    benchmark::DoNotOptimize(CheckLaunchConfig(cfg, limits));
  }
}
BENCHMARK(BM_CheckLaunchConfig);

struct LaunchFixture {
  std::optional<PrimaryContext> context;
  std::optional<ContextGuard> guard;
  std::optional<Module> module;
  std::optional<Function> function;
  std::optional<Stream> stream;
  std::string error;
};

LaunchFixture& Fixture() {
  static LaunchFixture f = [] {
    LaunchFixture x;
    auto ctx = PrimaryContext::Retain(0);
    if (!ctx.ok()) {
      x.error = "no GPU: " + ctx.status().ToString();
      return x;
    }
    x.context.emplace(std::move(*ctx));
    Compiler compiler;
    CompileRequest req;
    req.source = "extern \"C\" __global__ void empty(int* p) { if (p) *p = 1; }";
    req.arch = x.context->info().arch();
    auto compiled = compiler.Compile(req);
    if (!compiled.ok()) {
      x.error = compiled.status().ToString();
      return x;
    }
    auto module = Module::Load(*x.context, (*compiled)->cubin);
    if (!module.ok()) {
      x.error = module.status().ToString();
      return x;
    }
    x.module.emplace(std::move(*module));
    x.function.emplace(*x.module->GetFunction("empty"));
    auto stream = Stream::Create(*x.context);
    if (!stream.ok()) {
      x.error = stream.status().ToString();
      return x;
    }
    x.stream.emplace(std::move(*stream));
    return x;
  }();
  return f;
}

template <bool kChecked>
void LaunchLoop(benchmark::State& state) {
  LaunchFixture& f = Fixture();
  if (!f.error.empty()) {
    state.SkipWithError(f.error.c_str());
    return;
  }
  auto guard = ContextGuard::Push(*f.context);
  const auto& api = f.context->driver().api();
  CUdeviceptr null_ptr = 0;
  void* args[] = {&null_ptr};
  const LaunchConfig cfg{{1, 1, 1}, {32, 1, 1}, 0};
  int64_t n = 0;
  for (auto _ : state) {
    if constexpr (kChecked) {
      if (!f.function->Launch(cfg, f.stream->get(), args).ok()) state.SkipWithError("launch failed");
    } else {
      api.cuLaunchKernel(f.function->get(), 1, 1, 1, 32, 1, 1, 0, f.stream->get(), args, nullptr);
    }
    // Drain now and then so the launch queue never fills and blocks the host.
    if (++n % 512 == 0) {
      state.PauseTiming();
      api.cuStreamSynchronize(f.stream->get());
      state.ResumeTiming();
    }
  }
  api.cuStreamSynchronize(f.stream->get());
}

void BM_LaunchPlainCuLaunchKernel(benchmark::State& state) { LaunchLoop<false>(state); }
void BM_LaunchKjitChecked(benchmark::State& state) { LaunchLoop<true>(state); }
BENCHMARK(BM_LaunchPlainCuLaunchKernel);
BENCHMARK(BM_LaunchKjitChecked);

}  // namespace

BENCHMARK_MAIN();
