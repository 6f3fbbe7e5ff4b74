// The adapter inside a LibTorch process on a GPU, without Python: the process
// loads PyTorch's CUDA library, computes eager references, then loads
// libkjit_torch_adapter.so (as libkjit_preload.so would) and calls
// at::_softmax on CUDA tensors. A key without a record runs PyTorch's kernel;
// a key with a verified record in a temporary cache (a softmax kernel from the
// policy's generator, compiled here) is served by it from its second call; so is
// a key whose record takes a workspace (kernel ABI v2: a hand-written softmax
// that counts its blocks in the workspace and restores its zeros). mm and bmm with
// records of the matmul family: hits allocate PyTorch's contiguous outputs; the TF32 setting is
// part of the key; products the family does not serve are never keyed.
// Skipped, with the reason, where there is no CUDA PyTorch or no GPU.
#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <torch/version.h>
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <string>

#include "kjit/cache/kernel_cache.h"
#include "kjit/policy/design_space.h"
#include "kjit/runtime/compiler.h"
#include "kjit/runtime/gpu.h"
#include "kjit/torch/call_key.h"
#include "shim_adapter.h"
#include "shim_core.h"

namespace kjit::shim {
namespace {

std::string LoadTorchCuda() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&at::globalContext), &info) == 0 || info.dli_fname == nullptr) {
    return "cannot find libtorch_cpu.so";
  }
  std::string dir = info.dli_fname;
  dir = dir.substr(0, dir.rfind('/') + 1);
  if (dlopen((dir + "libtorch_cuda.so").c_str(), RTLD_NOW | RTLD_GLOBAL) == nullptr) {
    const char* e = dlerror();
    return std::string("PyTorch's CUDA backend could not be loaded: ") + (e ? e : "?");
  }
  return "";
}

const AdapterStats& Stats(void* adapter) {
  auto fn = reinterpret_cast<const void* (*)()>(dlsym(adapter, "kjit_adapter_stats"));
  return *static_cast<const AdapterStats*>(fn());
}

// Stores the family's expert-default kernel for the call (op, overload, args) in the open cache,
// built the way kjitd would; the shim serves it from the key's second call.
void StoreExpertDefault(const char* op, const char* overload, const std::vector<c10::IValue>& args, int arch,
                        int sm_count) {
  auto handle = c10::Dispatcher::singleton().findSchemaOrThrow(op, overload);
  auto key = kjit::torch::CallKey(handle.schema(), args, static_cast<uint16_t>(arch), kjit::torch::CurrentNumerics());
  ASSERT_TRUE(key.ok()) << key.status().ToString();
  auto match = policy::FindFamily(*key);
  ASSERT_TRUE(match.ok()) << match.status().ToString();
  policy::DeviceFacts facts = policy::DeviceFacts::H200();
  facts.arch = arch;
  facts.sm_count = sm_count;
  const policy::Point point = match->family->ExpertDefault(*match->problem, facts);
  auto candidate = match->family->Generate(*match->problem, point, facts);
  ASSERT_TRUE(candidate.ok()) << candidate.status().ToString();
  Compiler compiler;
  CompileRequest request;
  request.source = candidate->source;
  request.program_name = "shim_kernel.cu";
  request.arch = arch;
  request.options = candidate->options;
  auto compiled = compiler.Compile(request);
  ASSERT_TRUE(compiled.ok()) << compiled.status().ToString();
  auto cache = cache::KernelCache::Open();
  ASSERT_TRUE(cache.ok()) << cache.status().ToString();
  cache::KernelRecord record;
  record.key_bytes = key->Encode();
  record.source = candidate->source;
  record.compile_options = candidate->options;
  record.entry_point = candidate->entry_point;
  record.cubin = (*compiled)->cubin;
  record.launch = candidate->launch;
  record.design = candidate->design;
  record.toolchain = cache::RunningToolchain();
  record.torch_version = TORCH_VERSION;  // the adapter is served only its own PyTorch's records
  record.status = cache::RecordStatus::kVerified;
  auto id = (*cache)->Insert(std::move(record));
  ASSERT_TRUE(id.ok()) << id.status().ToString();
}

class ShimGpu : public ::testing::Test {
 protected:
  static inline std::string skip_reason_;
  static inline void* adapter_ = nullptr;
  static inline at::Tensor miss_input_, miss_reference_, hit_input_, hit_reference_, ws_input_, ws_reference_;
  // Part-2 ops with a record: argmax (an int64 output), max_pool2d_with_indices (two outputs).
  static inline at::Tensor argmax_input_, argmax_reference_, pool_input_, pool_values_, pool_indices_;
  // matmul records (TF32 off): a skinny f32 mm with A transposed, a f16 bmm of 64x64 matrices with
  // B transposed; their products in float64.
  static inline at::Tensor mm_a_, mm_b_, mm_exact_, bmm_a_, bmm_b_, bmm_exact_;

  // softmax of ROWS x 1024 floats, a block of 256 threads per row, 4 elements a thread; ws[0]
  // counts the blocks (the last resets it), ws[1..63] must be zero on entry (else NaN out).
  static std::string WorkspaceSoftmax(int rows) {
    return "constexpr int ROWS = " + std::to_string(rows) + R"(;
__device__ float block_max(float v, float* red) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = v;
  __syncthreads();
  float r = red[0];
  for (int w = 1; w < 8; ++w) r = fmaxf(r, red[w]);
  __syncthreads();
  return r;
}
__device__ float block_sum(float v, float* red) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = v;
  __syncthreads();
  float r = red[0];
  for (int w = 1; w < 8; ++w) r += red[w];
  __syncthreads();
  return r;
}
extern "C" __global__ void __launch_bounds__(256)
ws_softmax(const float* __restrict__ x, float* __restrict__ y, unsigned int* ws) {
  __shared__ float red[8];
  const float* xr = x + (long long)blockIdx.x * 1024;
  float v[4];
  float m = __int_as_float(0xff800000);
  for (int k = 0; k < 4; ++k) { v[k] = xr[threadIdx.x + 256 * k]; m = fmaxf(m, v[k]); }
  m = block_max(m, red);
  float s = 0.f;
  for (int k = 0; k < 4; ++k) { v[k] = __expf(v[k] - m); s += v[k]; }
  s = block_sum(s, red);
  const bool dirty = ws[1 + threadIdx.x % 63] != 0u;
  for (int k = 0; k < 4; ++k) y[(long long)blockIdx.x * 1024 + threadIdx.x + 256 * k] = dirty ? __int_as_float(0x7fffffff) : v[k] / s;
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    if (atomicAdd(ws, 1u) == ROWS - 1) ws[0] = 0u;
  }
}
)";
  }

  static void SetUpTestSuite() {
    const auto dir = std::filesystem::temp_directory_path() / ("kjit-shim-gpu-" + std::to_string(getpid()));
    std::filesystem::create_directories(dir / "run");
    setenv("KJIT_CACHE", (dir / "cache.db").c_str(), 1);
    setenv("KJIT_RUNTIME_DIR", (dir / "run").c_str(), 1);  // no kjitd there: misses are queued and dropped
    setenv("KJIT_LOG", "1", 1);
    skip_reason_ = LoadTorchCuda();
    if (!skip_reason_.empty()) return;
    try {
      c10::impl::VirtualGuardImpl guard(c10::DeviceType::CUDA);
      if (guard.deviceCount() <= 0) {
        skip_reason_ = "PyTorch sees no CUDA device";
        return;
      }
    } catch (const std::exception& e) {
      skip_reason_ = std::string("no CUDA in PyTorch: ") + e.what();
      return;
    }
    const auto cuda = at::TensorOptions().device(at::kCUDA).dtype(at::kFloat);
    miss_input_ = at::randn({32, 1000}, cuda);
    hit_input_ = at::randn({64, 1024}, cuda);
    miss_reference_ = at::_softmax(miss_input_, -1, false);
    hit_reference_ = at::_softmax(hit_input_, -1, false);
    ws_input_ = at::randn({48, 1024}, cuda);
    ws_reference_ = at::_softmax(ws_input_, -1, false);
    auto context = PrimaryContext::Retain(0);
    ASSERT_TRUE(context.ok()) << context.status().ToString();
    const int arch = context->info().arch();

    // A verified record for the hit key, built the way kjitd would.
    StoreExpertDefault("aten::_softmax", "", {hit_input_, int64_t{-1}, false}, arch, context->info().sm_count);
    if (HasFatalFailure()) return;

    argmax_input_ = at::randn({300, 517}, cuda);
    argmax_reference_ = at::argmax(argmax_input_, 1, false);
    StoreExpertDefault("aten::argmax", "", {argmax_input_, int64_t{1}, false}, arch, context->info().sm_count);
    pool_input_ = at::randn({4, 16, 33, 35}, cuda.dtype(at::kHalf));
    const std::vector<int64_t> k3{3, 3}, s2{2, 2}, p1{1, 1}, d1{1, 1};
    std::tie(pool_values_, pool_indices_) = at::max_pool2d_with_indices(pool_input_, k3, s2, p1, d1, false);
    StoreExpertDefault("aten::max_pool2d_with_indices", "", {pool_input_, k3, s2, p1, d1, false}, arch,
                       context->info().sm_count);
    if (HasFatalFailure()) return;
    at::globalContext().setAllowTF32CuBLAS(false);  // the keys of the records below carry it
    mm_a_ = at::randn({64, 1000}, cuda).t();
    mm_b_ = at::randn({64, 300}, cuda);
    mm_exact_ = at::mm(mm_a_.cpu().to(at::kDouble), mm_b_.cpu().to(at::kDouble));
    StoreExpertDefault("aten::mm", "", {mm_a_, mm_b_}, arch, context->info().sm_count);
    bmm_a_ = at::randn({96, 64, 64}, cuda.dtype(at::kHalf));
    bmm_b_ = at::randn({96, 64, 64}, cuda.dtype(at::kHalf)).transpose(1, 2);
    bmm_exact_ = at::bmm(bmm_a_.cpu().to(at::kDouble), bmm_b_.cpu().to(at::kDouble));
    StoreExpertDefault("aten::bmm", "", {bmm_a_, bmm_b_}, arch, context->info().sm_count);
    if (HasFatalFailure()) return;
    // A record with a workspace for the [48, 1024] key.
    auto handle = c10::Dispatcher::singleton().findSchemaOrThrow("aten::_softmax", "");
    std::vector<c10::IValue> ws_args{ws_input_, int64_t{-1}, false};
    auto ws_key = kjit::torch::CallKey(handle.schema(), ws_args, static_cast<uint16_t>(arch), kjit::torch::CurrentNumerics());
    ASSERT_TRUE(ws_key.ok()) << ws_key.status().ToString();
    Compiler compiler;
    CompileRequest request;
    request.source = WorkspaceSoftmax(48);
    request.program_name = "shim_ws_softmax.cu";
    request.arch = arch;
    auto ws_compiled = compiler.Compile(request);
    ASSERT_TRUE(ws_compiled.ok()) << ws_compiled.status().ToString();
    cache::KernelRecord ws_record;
    ws_record.key_bytes = ws_key->Encode();
    ws_record.source = request.source;
    ws_record.entry_point = "ws_softmax";
    ws_record.cubin = (*ws_compiled)->cubin;
    ws_record.launch.grid[0] = 48;
    ws_record.launch.block[0] = 256;
    ws_record.launch.workspace_bytes = 256;
    ws_record.design.family = "test";
    ws_record.toolchain = cache::RunningToolchain();
    ws_record.torch_version = TORCH_VERSION;
    ws_record.status = cache::RecordStatus::kVerified;
    auto cache = cache::KernelCache::Open();
    ASSERT_TRUE(cache.ok()) << cache.status().ToString();
    auto ws_id = (*cache)->Insert(std::move(ws_record));
    ASSERT_TRUE(ws_id.ok()) << ws_id.status().ToString();

    adapter_ = dlopen(KJIT_TORCH_ADAPTER, RTLD_NOW | RTLD_LOCAL);
    ASSERT_NE(adapter_, nullptr) << dlerror();
  }

  // Tensors must be freed while PyTorch's CUDA allocator still exists: left to
  // static destruction at exit they abort the process ("invalid device pointer").
  static void TearDownTestSuite() {
    miss_input_.reset();
    miss_reference_.reset();
    hit_input_.reset();
    hit_reference_.reset();
    argmax_input_.reset();
    argmax_reference_.reset();
    pool_input_.reset();
    pool_values_.reset();
    pool_indices_.reset();
    ws_input_.reset();
    ws_reference_.reset();
    for (at::Tensor* t : {&mm_a_, &mm_b_, &mm_exact_, &bmm_a_, &bmm_b_, &bmm_exact_}) t->reset();
  }

  void SetUp() override {
    if (!skip_reason_.empty()) GTEST_SKIP() << skip_reason_;
    ASSERT_NE(adapter_, nullptr);
    ASSERT_TRUE(Stats(adapter_).attached);
  }
};

TEST_F(ShimGpu, InterceptsSoftmax) {
  const AdapterStats& s = Stats(adapter_);
  EXPECT_NE(std::find(s.intercepted_ops.begin(), s.intercepted_ops.end(), "_softmax"), s.intercepted_ops.end());
}

TEST_F(ShimGpu, InterceptsThePartTwoOps) {
  const AdapterStats& s = Stats(adapter_);
  for (const char* op : {"cumsum", "cumprod", "max_pool2d_with_indices", "max_pool3d_with_indices", "avg_pool2d",
                         "avg_pool3d", "sum.dim_IntList", "mean.dim", "amax", "amin", "prod", "prod.dim_int", "argmax",
                         "argmin", "_conv_depthwise2d", "cudnn_convolution"}) {
    EXPECT_NE(std::find(s.intercepted_ops.begin(), s.intercepted_ops.end(), op), s.intercepted_ops.end()) << op;
  }
}

// An int64 output: allocated like the first call's (PyTorch's) output, written by kjit's kernel.
TEST_F(ShimGpu, ArgmaxHitReturnsInt64Indices) {
  const uint64_t hits = Stats(adapter_).hits;
  EXPECT_TRUE(at::equal(at::argmax(argmax_input_, 1, false), argmax_reference_));  // first sight
  for (int i = 0; i < 3; ++i) {
    at::Tensor out = at::argmax(argmax_input_, 1, false);
    EXPECT_EQ(out.scalar_type(), at::kLong);
    EXPECT_EQ(out.sizes(), argmax_reference_.sizes());
    EXPECT_TRUE(at::equal(out, argmax_reference_)) << "call " << i;
  }
  EXPECT_EQ(Stats(adapter_).hits, hits + 3);
}

// Two outputs (values, int64 indices), both allocated and written for a hit; compared bitwise.
TEST_F(ShimGpu, MaxPoolHitReturnsValuesAndIndices) {
  const std::vector<int64_t> k3{3, 3}, s2{2, 2}, p1{1, 1}, d1{1, 1};
  const uint64_t hits = Stats(adapter_).hits;
  at::max_pool2d_with_indices(pool_input_, k3, s2, p1, d1, false);  // first sight
  for (int i = 0; i < 3; ++i) {
    auto [values, indices] = at::max_pool2d_with_indices(pool_input_, k3, s2, p1, d1, false);
    EXPECT_EQ(values.strides(), pool_values_.strides());
    EXPECT_EQ(indices.scalar_type(), at::kLong);
    EXPECT_TRUE(at::equal(values, pool_values_)) << "call " << i;
    EXPECT_TRUE(at::equal(indices, pool_indices_)) << "call " << i;
  }
  EXPECT_EQ(Stats(adapter_).hits, hits + 3);
}

// cudnn_convolution's pre-filter: ordinary and grouped convolutions are never keyed; a depthwise one is.
TEST_F(ShimGpu, OnlyDepthwiseCudnnConvolutionsAreKeyed) {
  const auto cuda = at::TensorOptions().device(at::kCUDA).dtype(at::kHalf);
  const at::Tensor x = at::randn({2, 32, 20, 20}, cuda).contiguous(at::MemoryFormat::ChannelsLast);
  const std::vector<int64_t> one{1, 1};
  const size_t entries = Stats(adapter_).entries;
  const uint64_t first_sights = Stats(adapter_).first_sights, misses = Stats(adapter_).misses;
  for (int i = 0; i < 2; ++i) {
    at::cudnn_convolution(x, at::randn({64, 32, 3, 3}, cuda), one, one, one, 1, false, false, true);
    at::cudnn_convolution(x, at::randn({32, 8, 3, 3}, cuda), one, one, one, 4, false, false, true);
  }
  EXPECT_EQ(Stats(adapter_).entries, entries);
  EXPECT_EQ(Stats(adapter_).first_sights, first_sights);
  EXPECT_EQ(Stats(adapter_).misses, misses);
  // int64 inputs never reach a part-2 family: not keyed either.
  at::cumsum(at::ones({4, 8}, cuda.dtype(at::kLong)), 1);
  EXPECT_EQ(Stats(adapter_).entries, entries);
  at::cudnn_convolution(x, at::randn({32, 1, 3, 3}, cuda), one, one, one, 32, false, false, true);
  EXPECT_EQ(Stats(adapter_).entries, entries + 1);
  EXPECT_EQ(Stats(adapter_).first_sights, first_sights + 1);
}

TEST_F(ShimGpu, InterceptsMatmul) {
  const AdapterStats& s = Stats(adapter_);
  for (const char* op : {"mm", "bmm"}) {
    EXPECT_NE(std::find(s.intercepted_ops.begin(), s.intercepted_ops.end(), op), s.intercepted_ops.end()) << op;
  }
}

// Within `rtol` of the product in float64 (kjit's kernels accumulate in float32 and round once).
void ExpectNearExact(const at::Tensor& got, const at::Tensor& exact, double rtol, double atol, int call) {
  const at::Tensor g = got.cpu().to(at::kDouble);
  const double worst = ((g - exact).abs() - rtol * exact.abs()).max().item<double>();
  EXPECT_LE(worst, atol) << "call " << call;
}

// Hits allocate outputs as PyTorch does for mm and bmm (contiguous [M, N], [B, M, N]) whatever the
// inputs' layouts, and the family's kernels compute the product.
TEST_F(ShimGpu, MatmulHitsReturnContiguousProducts) {
  at::globalContext().setAllowTF32CuBLAS(false);
  at::mm(mm_a_, mm_b_);  // first sight (or a hit, if another test met the key first)
  at::bmm(bmm_a_, bmm_b_);
  const uint64_t before = Stats(adapter_).hits;
  for (int i = 0; i < 3; ++i) {
    const at::Tensor out = at::mm(mm_a_, mm_b_);
    EXPECT_EQ(out.sizes(), (std::vector<int64_t>{1000, 300}));
    EXPECT_TRUE(out.is_contiguous());
    EXPECT_EQ(out.scalar_type(), at::kFloat);
    ExpectNearExact(out, mm_exact_, 1e-5, 1e-4, i);
    const at::Tensor bout = at::bmm(bmm_a_, bmm_b_);
    EXPECT_EQ(bout.sizes(), (std::vector<int64_t>{96, 64, 64}));
    EXPECT_TRUE(bout.is_contiguous());
    EXPECT_EQ(bout.scalar_type(), at::kHalf);
    ExpectNearExact(bout, bmm_exact_, 1e-3, 1e-3, i);  // float16's rounding: 2^-11 relative
  }
  EXPECT_EQ(Stats(adapter_).hits, before + 6);
  EXPECT_EQ(Stats(adapter_).failures, 0u);
}

// A TF32-on call is another key than the TF32-off one whose record exists: PyTorch's kernel runs
// (a first sight, then misses), never the TF32-off key's kernel; TF32 off again, the record serves.
TEST_F(ShimGpu, Tf32OnMatmulIsAnotherKey) {
  auto& ctx = at::globalContext();
  ctx.setAllowTF32CuBLAS(false);
  at::mm(mm_a_, mm_b_);  // the TF32-off key seen (its record loaded)
  const AdapterStats s0 = Stats(adapter_);
  ctx.setAllowTF32CuBLAS(true);
  at::mm(mm_a_, mm_b_);
  at::mm(mm_a_, mm_b_);
  const AdapterStats s1 = Stats(adapter_);
  ctx.setAllowTF32CuBLAS(false);
  EXPECT_EQ(s1.hits, s0.hits);
  EXPECT_EQ(s1.entries, s0.entries + 1);
  EXPECT_EQ(s1.first_sights, s0.first_sights + 1);
  EXPECT_EQ(s1.misses, s0.misses + 2);  // the first sight, found in no record, counts as a miss too
  at::mm(mm_a_, mm_b_);
  EXPECT_EQ(Stats(adapter_).hits, s1.hits + 1);
}

// mm/bmm's pre-filter: products the matmul family never serves (K over its limit, other dtypes,
// empty, mixed dtypes) are not keyed; a small-K one is.
TEST_F(ShimGpu, OnlySmallMatmulsAreKeyed) {
  const auto cuda = at::TensorOptions().device(at::kCUDA).dtype(at::kFloat);
  const AdapterStats s0 = Stats(adapter_);
  for (int i = 0; i < 2; ++i) {
    at::mm(at::randn({256, 1024}, cuda), at::randn({1024, 256}, cuda));
    at::bmm(at::randn({8, 64, 128}, cuda.dtype(at::kBFloat16)), at::randn({8, 128, 64}, cuda.dtype(at::kBFloat16)));
    at::mm(at::randn({64, 64}, cuda.dtype(at::kDouble)), at::randn({64, 64}, cuda.dtype(at::kDouble)));
    at::mm(at::randn({0, 64}, cuda), at::randn({64, 8}, cuda));
    try {
      at::mm(at::randn({8, 64}, cuda), at::randn({64, 8}, cuda.dtype(at::kHalf)));  // PyTorch may reject it
    } catch (const std::exception&) {
    }
  }
  const AdapterStats s1 = Stats(adapter_);
  EXPECT_EQ(s1.entries, s0.entries);
  EXPECT_EQ(s1.first_sights, s0.first_sights);
  EXPECT_EQ(s1.misses, s0.misses);
  at::mm(at::randn({128, 32}, cuda), at::randn({32, 128}, cuda));
  EXPECT_EQ(Stats(adapter_).entries, s1.entries + 1);
  EXPECT_EQ(Stats(adapter_).first_sights, s1.first_sights + 1);
}

TEST_F(ShimGpu, MissRunsPyTorchsKernel) {
  const uint64_t hits = Stats(adapter_).hits;
  for (int i = 0; i < 3; ++i) {
    at::Tensor out = at::_softmax(miss_input_, -1, false);
    EXPECT_TRUE(at::equal(out, miss_reference_)) << "call " << i;
  }
  EXPECT_EQ(Stats(adapter_).hits, hits);
  EXPECT_GE(Stats(adapter_).misses, 2u);
}

TEST_F(ShimGpu, HitLaunchesTheCachedKernel) {
  const uint64_t hits = Stats(adapter_).hits;
  at::Tensor first = at::_softmax(hit_input_, -1, false);  // first sight: PyTorch's kernel, record loaded
  EXPECT_TRUE(at::equal(first, hit_reference_));
  for (int i = 0; i < 3; ++i) {
    at::Tensor out = at::_softmax(hit_input_, -1, false);
    EXPECT_EQ(out.sizes(), hit_reference_.sizes());
    EXPECT_EQ(out.strides(), hit_reference_.strides());
    EXPECT_TRUE(at::allclose(out, hit_reference_, 1e-5, 1e-6)) << "call " << i;
  }
  EXPECT_EQ(Stats(adapter_).hits, hits + 3);
}

TEST_F(ShimGpu, HitWithAWorkspaceGetsAZeroedOnePerStream) {
  const uint64_t hits = Stats(adapter_).hits;
  at::Tensor first = at::_softmax(ws_input_, -1, false);  // first sight: PyTorch's kernel, record loaded
  EXPECT_TRUE(at::equal(first, ws_reference_));
  // Every call after the first relies on the previous one having restored the zeros.
  for (int i = 0; i < 5; ++i) {
    at::Tensor out = at::_softmax(ws_input_, -1, false);
    EXPECT_TRUE(at::allclose(out, ws_reference_, 1e-5, 1e-6)) << "call " << i;
  }
  EXPECT_EQ(Stats(adapter_).hits, hits + 5);
  EXPECT_EQ(Stats(adapter_).failures, 0u);
}

// A call autograd records (grad mode on, an input that requires grad) is served where the op's family declares
// it (softmax does: KJIT_SERVES_RECORDED), and the backward through kjit's output is PyTorch's formula on it.
TEST_F(ShimGpu, RecordedCallsAreServedAndTheirGradientsArePyTorchs) {
  at::Tensor x = hit_input_.clone().requires_grad_(true);
  // The key's first sight in this process (each test runs in its own): PyTorch's kernel, record loaded.
  (void)at::softmax(x, -1);
  const uint64_t hits = Stats(adapter_).hits;
  at::Tensor out = at::softmax(x, -1);
  EXPECT_TRUE(at::allclose(out, hit_reference_, 1e-5, 1e-6));
  EXPECT_EQ(Stats(adapter_).hits, hits + 1);
  EXPECT_TRUE(out.requires_grad());
  const at::Tensor g = at::randn_like(out);
  out.backward(g);
  // softmax's backward (intercepted, but a miss: no record for its key) on PyTorch's own output.
  const at::Tensor want = at::_softmax_backward_data(g, hit_reference_, -1, hit_reference_.scalar_type());
  ASSERT_TRUE(x.grad().defined());
  EXPECT_TRUE(at::allclose(x.grad(), want, 1e-5, 1e-6));
  EXPECT_EQ(Stats(adapter_).failures, 0u);
}

}  // namespace
}  // namespace kjit::shim
