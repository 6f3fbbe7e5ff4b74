#include "kjit/runtime/compiler.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <thread>

namespace kjit {
namespace {

constexpr char kAxpy[] = R"(
extern "C" __global__ void axpy(float a, const float* x, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] += a * x[i];
})";

// Reads the ELF header of a CUBIN: machine must be EM_CUDA (190) and the flags
// carry the SM version.
struct ElfFacts {
  bool is_elf = false;
  uint16_t machine = 0;
  uint32_t flags = 0;
};
ElfFacts ReadElf(const std::string& image) {
  ElfFacts f;
  if (image.size() < 64 || std::memcmp(image.data(), "\x7f" "ELF", 4) != 0) return f;
  f.is_elf = true;
  std::memcpy(&f.machine, image.data() + 18, 2);
  std::memcpy(&f.flags, image.data() + 48, 4);
  return f;
}

CompileRequest Axpy(int arch = 90) {
  CompileRequest r;
  r.source = kAxpy;
  r.program_name = "axpy.cu";
  r.arch = arch;
  return r;
}

TEST(Compiler, CompilesToSm90Cubin) {
  Compiler c;
  auto r = c.Compile(Axpy());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const ElfFacts elf = ReadElf((*r)->cubin);
  ASSERT_TRUE(elf.is_elf);
  EXPECT_EQ(elf.machine, 190);  // EM_CUDA
  // CUDA ELF flags hold the SM number in their low byte(s); 90 must appear.
  EXPECT_TRUE((elf.flags & 0xff) == 90 || ((elf.flags >> 8) & 0xff) == 90) << std::hex << elf.flags;
  EXPECT_TRUE((*r)->ptx.empty());
  EXPECT_FALSE((*r)->from_cache);
  EXPECT_GT((*r)->compile_time.count(), 0);
}

TEST(Compiler, ReturnsPtxOnRequest) {
  Compiler c;
  auto req = Axpy();
  req.want_ptx = true;
  auto r = c.Compile(req);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_NE((*r)->ptx.find(".target sm_90"), std::string::npos);
  EXPECT_NE((*r)->ptx.find(".entry axpy"), std::string::npos);
}

TEST(Compiler, IncludesHalfAndBfloat16Headers) {
  Compiler c;
  CompileRequest req;
  req.source = R"(
#include <cuda_fp16.h>
#include <cuda_bf16.h>
extern "C" __global__ void cvt(const __half* h, __nv_bfloat16* b, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) b[i] = __float2bfloat16(__half2float(h[i]));
})";
  auto r = c.Compile(req);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
}

TEST(Compiler, BrokenKernelErrorHoldsTheLog) {
  Compiler c;
  CompileRequest req;
  req.program_name = "broken.cu";
  req.source = "extern \"C\" __global__ void k(float* x) {\n  x[0] = undeclared_name;\n}\n";
  auto r = c.Compile(req);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kCompileError);
  const std::string& m = r.status().message();
  EXPECT_NE(m.find("broken.cu(2)"), std::string::npos) << m;  // file and line of the error
  EXPECT_NE(m.find("undeclared_name"), std::string::npos) << m;
  EXPECT_NE(m.find("is undefined"), std::string::npos) << m;
  EXPECT_EQ(c.stats().failures, 1u);
  EXPECT_EQ(c.stats().cached_entries, 0u);  // failures are not cached
}

TEST(Compiler, BadOptionIsAnNvrtcError) {
  Compiler c;
  auto req = Axpy();
  req.options = {"--no-such-option"};
  auto r = c.Compile(req);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(r.status().code() == StatusCode::kNvrtcError || r.status().code() == StatusCode::kCompileError)
      << r.status().ToString();
}

TEST(Compiler, RejectsNonsenseArch) {
  Compiler c;
  auto r = c.Compile(Axpy(9));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
}

TEST(Compiler, NameExpressionsGiveLoweredNames) {
  Compiler c;
  CompileRequest req;
  req.source = R"(
template <typename T, int N>
__global__ void fill(T* out, T v) { out[threadIdx.x % N] = v; })";
  req.name_expressions = {"fill<float, 4>", "fill<int, 8>"};
  auto r = c.Compile(req);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ((*r)->lowered_names.size(), 2u);
  EXPECT_EQ((*r)->lowered_names.at("fill<float, 4>"), "_Z4fillIfLi4EEvPT_S0_");
  EXPECT_NE((*r)->lowered_names.at("fill<int, 8>"), (*r)->lowered_names.at("fill<float, 4>"));
}

TEST(Compiler, CachesIdenticalRequests) {
  Compiler c;
  auto first = c.Compile(Axpy());
  auto second = c.Compile(Axpy());
  ASSERT_TRUE(first.ok() && second.ok());
  EXPECT_FALSE((*first)->from_cache);
  EXPECT_TRUE((*second)->from_cache);
  EXPECT_EQ((*first)->cubin, (*second)->cubin);
  EXPECT_EQ(c.stats().compiles, 1u);
  EXPECT_EQ(c.stats().cache_hits, 1u);

  auto other = Axpy();
  other.options = {"-use_fast_math"};
  auto third = c.Compile(other);
  ASSERT_TRUE(third.ok());
  EXPECT_FALSE((*third)->from_cache);
  EXPECT_EQ(c.stats().compiles, 2u);
  EXPECT_NE(Compiler::RequestHash(Axpy()), Compiler::RequestHash(other));
  EXPECT_NE(Compiler::RequestHash(Axpy(90)), Compiler::RequestHash(Axpy(80)));
}

TEST(Compiler, ConcurrentIdenticalRequestsCompileOnce) {
  Compiler c;
  std::atomic<int> ok{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&] {
      if (c.Compile(Axpy()).ok()) ++ok;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(ok.load(), 8);
  EXPECT_EQ(c.stats().compiles, 1u);
  EXPECT_EQ(c.stats().cache_hits, 7u);
}

TEST(Compiler, EvictsLeastRecentlyUsedBeyondCapacity) {
  Compiler::Options opts;
  opts.cache_capacity_bytes = 1;  // every new entry pushes out the last
  Compiler c(opts);
  ASSERT_TRUE(c.Compile(Axpy(90)).ok());
  ASSERT_TRUE(c.Compile(Axpy(80)).ok());
  EXPECT_LE(c.stats().cached_entries, 1u);
  auto again = c.Compile(Axpy(90));
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE((*again)->from_cache);
}

}  // namespace
}  // namespace kjit
