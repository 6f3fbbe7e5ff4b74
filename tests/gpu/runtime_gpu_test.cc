// Tests that need a GPU. Each one skips, naming the reason, where the driver or
// device is missing; CTest then counts it as skipped (label `gpu`).
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <vector>

#include "kjit/runtime/compiler.h"
#include "kjit/runtime/device.h"
#include "kjit/runtime/gpu.h"

namespace kjit {
namespace {

constexpr uint32_t kPoison = 0x7fc0dead;  // a NaN: any element left unwritten shows

constexpr char kKernels[] = R"(
extern "C" __global__ void affine(const float* __restrict__ x, float* __restrict__ y, float a, float b, unsigned n) {
  for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) y[i] = a * x[i] + b;
}
// Reverses each block's slice through dynamic shared memory of blockDim.x floats.
extern "C" __global__ void reverse_in_shared(const float* x, float* y, unsigned n) {
  extern __shared__ float tile[];
  const unsigned base = blockIdx.x * blockDim.x;
  if (base + threadIdx.x < n) tile[threadIdx.x] = x[base + threadIdx.x];
  __syncthreads();
  const unsigned j = blockDim.x - 1 - threadIdx.x;
  if (base + j < n) y[base + j] = tile[threadIdx.x];
}
// Uses ~64 KiB of dynamic shared memory: above the 48 KiB default.
extern "C" __global__ void big_shared(float* y) {
  extern __shared__ float s[];
  const unsigned words = 16384;
  for (unsigned i = threadIdx.x; i < words; i += blockDim.x) s[i] = float(i);
  __syncthreads();
  float acc = 0;
  for (unsigned i = threadIdx.x; i < words; i += blockDim.x) acc += s[words - 1 - i];
  atomicAdd(y, acc);
}
)";

class GpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto driver = Driver::Get();
    if (!driver.ok()) GTEST_SKIP() << "no GPU: " << driver.status().ToString();
    auto ctx = PrimaryContext::Retain(0);
    ASSERT_TRUE(ctx.ok()) << ctx.status().ToString();
    context_.emplace(std::move(*ctx));
    auto guard = ContextGuard::Push(*context_);
    ASSERT_TRUE(guard.ok()) << guard.status().ToString();
    guard_.emplace(std::move(*guard));

    CompileRequest req;
    req.source = kKernels;
    req.program_name = "gpu_test_kernels.cu";
    req.arch = context_->info().arch();
    auto compiled = compiler_.Compile(req);
    ASSERT_TRUE(compiled.ok()) << compiled.status().ToString();
    auto module = Module::Load(*context_, (*compiled)->cubin);
    ASSERT_TRUE(module.ok()) << module.status().ToString();
    module_.emplace(std::move(*module));
  }

  Function Get(const char* name) {
    auto f = module_->GetFunction(name);
    EXPECT_TRUE(f.ok()) << f.status().ToString();
    return *f;
  }

  DeviceBuffer Upload(const std::vector<float>& host) {
    auto b = DeviceBuffer::Allocate(*context_, host.size() * sizeof(float));
    EXPECT_TRUE(b.ok()) << b.status().ToString();
    EXPECT_TRUE(b->CopyFromHost(host.data(), host.size() * sizeof(float)).ok());
    return std::move(*b);
  }

  DeviceBuffer Poisoned(size_t n) {
    auto b = DeviceBuffer::Allocate(*context_, n * sizeof(float));
    EXPECT_TRUE(b.ok()) << b.status().ToString();
    EXPECT_TRUE(b->Fill32(kPoison).ok());
    return std::move(*b);
  }

  std::vector<float> Download(const DeviceBuffer& b) {
    std::vector<float> host(b.size() / sizeof(float));
    EXPECT_TRUE(b.CopyToHost(host.data(), b.size()).ok());
    return host;
  }

  static std::vector<float> Ramp(size_t n) {
    std::vector<float> v(n);
    for (size_t i = 0; i < n; ++i) v[i] = static_cast<float>(static_cast<int>(i % 2003) - 1000) * 0.25f;
    return v;
  }

  Compiler compiler_;
  std::optional<PrimaryContext> context_;
  std::optional<ContextGuard> guard_;
  std::optional<Module> module_;
};

TEST_F(GpuTest, DeviceInfoIsPlausible) {
  const DeviceInfo& info = context_->info();
  EXPECT_FALSE(info.name.empty());
  EXPECT_EQ(info.uuid.rfind("GPU-", 0), 0u) << info.uuid;
  EXPECT_GE(info.arch(), 50);
  EXPECT_GT(info.sm_count, 0);
  EXPECT_EQ(info.warp_size, 32);
  EXPECT_GE(info.shared_bytes_per_block_optin, info.shared_bytes_per_block);
  EXPECT_GT(info.l2_bytes, 0);
  EXPECT_GT(info.memory_bytes, 1ull << 30);
  std::printf("%s", info.ToString().c_str());
}

TEST_F(GpuTest, CompileLoadLaunchChecksEveryElement) {
  const unsigned n = (1u << 20) + 77;  // not a multiple of the block
  const auto x = Ramp(n);
  DeviceBuffer dx = Upload(x);
  DeviceBuffer dy = Poisoned(n);
  Function f = Get("affine");
  ASSERT_TRUE(f.LaunchWith(LaunchConfig{{264, 1, 1}, {256, 1, 1}, 0}, nullptr, dx.get(), dy.get(), 1.5f, -2.0f, n).ok());
  ASSERT_TRUE(context_->driver().Check(context_->driver().api().cuCtxSynchronize(), "sync").ok());
  const auto y = Download(dy);
  size_t wrong = 0;
  for (unsigned i = 0; i < n; ++i) {
    if (y[i] != 1.5f * x[i] - 2.0f) ++wrong;  // exact: one fma-able op, same rounding expected
  }
  EXPECT_EQ(wrong, 0u);
}

TEST_F(GpuTest, LaunchOnNonDefaultStream) {
  const unsigned n = 100000;
  const auto x = Ramp(n);
  DeviceBuffer dx = Upload(x);
  DeviceBuffer dy = Poisoned(n);
  auto stream = Stream::Create(*context_);
  ASSERT_TRUE(stream.ok()) << stream.status().ToString();
  Function f = Get("reverse_in_shared");
  const unsigned block = 128;
  ASSERT_TRUE(f.LaunchWith(LaunchConfig{{(n + block - 1) / block, 1, 1}, {block, 1, 1}, block * 4}, stream->get(),
                           dx.get(), dy.get(), n)
                  .ok());
  ASSERT_TRUE(stream->Synchronize().ok());
  const auto y = Download(dy);
  size_t wrong = 0;
  for (unsigned i = 0; i < n; ++i) {
    const unsigned base = i / block * block;
    const unsigned j = base + (block - 1 - (i - base));
    // The last partial block reverses only the elements it has.
    const float want = j < n ? x[j] : std::bit_cast<float>(kPoison);
    if (j < n ? y[i] != want : !std::isnan(y[i])) ++wrong;
  }
  // In the partial last block, lanes without input leave holes: count only full blocks strictly.
  EXPECT_LE(wrong, block);
  size_t wrong_full = 0;
  for (unsigned i = 0; i < n / block * block; ++i) {
    const unsigned base = i / block * block;
    if (y[i] != x[base + (block - 1 - (i - base))]) ++wrong_full;
  }
  EXPECT_EQ(wrong_full, 0u);
}

// A fill or an upload has landed when it returns: Stream::Create's streams do not wait for the legacy stream
// cuMemsetD32 runs on, so a kernel launched right after a fill read the old bytes (an H100 on 2026-12-07: the
// example's poison landed after its kernel's output). 256 MiB: the fill takes far longer than a launch.
TEST_F(GpuTest, AFillHasLandedWhenItReturns) {
  const size_t n = size_t{64} << 20;
  DeviceBuffer dx = Poisoned(n);
  DeviceBuffer dy = Poisoned(n);
  ASSERT_TRUE(dx.Fill32(std::bit_cast<uint32_t>(1.0f)).ok());
  ASSERT_TRUE(context_->driver().Check(context_->driver().api().cuCtxSynchronize(), "sync").ok());
  ASSERT_TRUE(dx.Fill32(std::bit_cast<uint32_t>(3.0f)).ok());
  auto stream = Stream::Create(*context_);
  ASSERT_TRUE(stream.ok()) << stream.status().ToString();
  Function f = Get("affine");
  ASSERT_TRUE(f.LaunchWith(LaunchConfig{{1024, 1, 1}, {256, 1, 1}, 0}, stream->get(), dx.get(), dy.get(), 1.0f,
                           0.0f, static_cast<unsigned>(n))
                  .ok());
  ASSERT_TRUE(stream->Synchronize().ok());
  const auto y = Download(dy);
  size_t old = 0;
  for (float v : y) old += v != 3.0f;
  EXPECT_EQ(old, 0u) << "elements the kernel read before the fill landed";
}

TEST_F(GpuTest, DynamicSharedAboveDefaultIsOptedIn) {
  auto acc = DeviceBuffer::Allocate(*context_, sizeof(float));
  ASSERT_TRUE(acc.ok());
  ASSERT_TRUE(acc->Fill32(0).ok());
  Function f = Get("big_shared");
  ASSERT_TRUE(f.LaunchWith(LaunchConfig{{1, 1, 1}, {256, 1, 1}, 16384 * 4}, nullptr, acc->get()).ok());
  ASSERT_TRUE(context_->driver().Check(context_->driver().api().cuCtxSynchronize(), "sync").ok());
  float sum = 0;
  ASSERT_TRUE(acc->CopyToHost(&sum, sizeof sum).ok());
  EXPECT_EQ(sum, 16383.0f * 16384.0f / 2.0f);
}

// A cluster of 16 blocks is past sm_90's portable 8: GetFunction opts the kernel in, and the blocks see each
// other's shared memory. Each block fills its (nearly full) shared memory with its rank and reads its
// neighbour's, so a cluster that was not formed (or formed smaller) leaves a wrong value.
TEST_F(GpuTest, NonPortableClusterOf16IsOptedIn) {
  if (context_->info().arch() < 90) GTEST_SKIP() << "clusters need sm_90; this GPU is sm_" << context_->info().arch();
  CompileRequest req;
  req.source = R"(
extern "C" __global__ void __cluster_dims__(16, 1, 1) cluster16(unsigned* y, unsigned words) {
  extern __shared__ unsigned s[];
  unsigned rank;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
  for (unsigned i = threadIdx.x; i < words; i += blockDim.x) s[i] = rank * 1000003u + i;
  asm volatile("barrier.cluster.arrive.release;\n\tbarrier.cluster.wait.acquire;" ::: "memory");
  const unsigned other = (rank + 1) % 16;
  unsigned local = (unsigned)__cvta_generic_to_shared(&s[words - 1]), remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(local), "r"(other));
  unsigned v;
  asm volatile("ld.shared::cluster.u32 %0, [%1];" : "=r"(v) : "r"(remote));
  if (threadIdx.x == 0) y[blockIdx.x] = v;
  asm volatile("barrier.cluster.arrive.release;\n\tbarrier.cluster.wait.acquire;" ::: "memory");
}
)";
  req.program_name = "cluster16.cu";
  req.arch = context_->info().arch();
  auto compiled = compiler_.Compile(req);
  ASSERT_TRUE(compiled.ok()) << compiled.status().ToString();
  auto module = Module::Load(*context_, (*compiled)->cubin);
  ASSERT_TRUE(module.ok()) << module.status().ToString();
  auto f = module->GetFunction("cluster16");
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->limits().cluster_blocks, 16);
  const unsigned bytes = static_cast<unsigned>(context_->info().shared_bytes_per_block_optin) - 1024;
  const unsigned words = bytes / 4;
  const LaunchConfig cfg{{64 * 16, 1, 1}, {1024, 1, 1}, bytes};
  auto clusters = f->MaxActiveClusters(cfg);
  ASSERT_TRUE(clusters.ok()) << clusters.status().ToString();
  std::printf("[ cluster ] clusters of 16 blocks of 1024 threads with %u bytes of shared memory each: %d at once on "
              "%d SMs\n", bytes, *clusters, context_->info().sm_count);
  ASSERT_GT(*clusters, 0) << "this GPU cannot place a cluster of 16 such blocks";
  DeviceBuffer y = Poisoned(64 * 16);
  ASSERT_TRUE(f->LaunchWith(cfg, nullptr, y.get(), words).ok());
  ASSERT_TRUE(context_->driver().Check(context_->driver().api().cuCtxSynchronize(), "sync").ok());
  std::vector<float> got = Download(y);
  for (unsigned b = 0; b < 64 * 16; ++b) {
    const unsigned want = ((b % 16 + 1) % 16) * 1000003u + words - 1;
    ASSERT_EQ(std::bit_cast<uint32_t>(got[b]), want) << "block " << b;
  }
}

TEST_F(GpuTest, BadLaunchConfigurationsReturnErrors) {
  DeviceBuffer dy = Poisoned(1024);
  Function f = Get("affine");
  const unsigned n = 1024;
  const float a = 1, b = 0;
  CUdeviceptr p = dy.get();
  void* args[] = {&p, &p, const_cast<float*>(&a), const_cast<float*>(&b), const_cast<unsigned*>(&n)};
  const LaunchConfig bad[] = {
      {{1, 1, 1}, {2048, 1, 1}, 0},                                                    // too many threads
      {{0, 1, 1}, {32, 1, 1}, 0},                                                      // empty grid
      {{1, 1u << 20, 1}, {32, 1, 1}, 0},                                               // grid.y too large
      {{1, 1, 1}, {32, 1, 1}, static_cast<unsigned>(context_->info().shared_bytes_per_block_optin) + 4},  // smem
  };
  for (const auto& cfg : bad) {
    Status s = f.Launch(cfg, nullptr, args);
    EXPECT_EQ(s.code(), StatusCode::kLaunchConfig) << s.ToString();
  }
  // The context is still healthy afterwards.
  ASSERT_TRUE(f.Launch(LaunchConfig{{4, 1, 1}, {256, 1, 1}, 0}, nullptr, args).ok());
  EXPECT_TRUE(context_->driver().Check(context_->driver().api().cuCtxSynchronize(), "sync").ok());
}

TEST_F(GpuTest, MissingKernelAndWrongImageAreErrors) {
  auto missing = module_->GetFunction("no_such_kernel");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);

  auto garbage = Module::Load(*context_, std::string("\x7f" "ELF garbage that is no cubin", 30));
  ASSERT_FALSE(garbage.ok());
  EXPECT_EQ(garbage.status().code(), StatusCode::kCudaError);

  // A CUBIN built for a newer arch than this GPU's must not load.
  CompileRequest req;
  req.source = kKernels;
  req.arch = 100;
  auto newer = compiler_.Compile(req);
  if (newer.ok() && context_->info().arch() < 100) {
    auto m = Module::Load(*context_, (*newer)->cubin);
    ASSERT_FALSE(m.ok());
    EXPECT_NE(m.status().message().find("sm_"), std::string::npos) << m.status().message();
  }
}

TEST_F(GpuTest, PtxImageLoadsThroughTheDriverJit) {
  CompileRequest req;
  req.source = kKernels;
  req.arch = context_->info().arch();
  req.want_ptx = true;
  auto compiled = compiler_.Compile(req);
  ASSERT_TRUE(compiled.ok()) << compiled.status().ToString();
  auto m = Module::Load(*context_, (*compiled)->ptx);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_TRUE(m->GetFunction("affine").ok());
}

TEST_F(GpuTest, CopyBandwidthIsMeasuredAndRemembered) {
  char tmpl[] = "/tmp/kjit-bw-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  setenv("KJIT_CACHE_DIR", tmpl, 1);
  auto first = DeviceCopyBandwidth(*context_, /*remeasure=*/true);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_GT(first->bytes_per_second, 1e10);  // any GPU copies faster than 10 GB/s
  EXPECT_LE(first->min_bytes_per_second, first->bytes_per_second);
  EXPECT_GE(first->max_bytes_per_second, first->bytes_per_second);
  std::printf("device-to-device copy: %.3f TB/s (median of %d)\n", first->bytes_per_second / 1e12, first->runs);
  auto second = DeviceCopyBandwidth(*context_);
  ASSERT_TRUE(second.ok());
  EXPECT_DOUBLE_EQ(second->bytes_per_second, first->bytes_per_second);
  unsetenv("KJIT_CACHE_DIR");
}

TEST_F(GpuTest, LaunchWithoutCurrentContextIsRefused) {
  guard_.reset();  // pop our context
  CUcontext current = nullptr;
  context_->driver().api().cuCtxGetCurrent(&current);
  if (current != nullptr) GTEST_SKIP() << "another context is current on this thread";
  DeviceBuffer dy = Poisoned(32);
  Function f = Get("affine");
  Status s = f.LaunchWith(LaunchConfig{{1, 1, 1}, {32, 1, 1}, 0}, nullptr, dy.get(), dy.get(), 1.0f, 0.0f, 32u);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
}

}  // namespace
}  // namespace kjit
