// Shared helpers for the kernel-cache tests.
#pragma once

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "kjit/cache/kernel_cache.h"
#include "kjit/runtime/op_key.h"

namespace kjit::cache::testing {

inline const Toolchain kToolchain{13000, 13, 0, 1};
inline const ReaderContext kReader{90, kToolchain, "", ""};  // no model preference

// A fresh directory, removed with the object.
class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/kjit-cache-test-XXXXXX";
    path_ = mkdtemp(tmpl);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

inline std::string KeyBytes(int64_t cols, int arch = 90) {
  return OpKey::Single("aten::_softmax", "", {TensorDesc::Contiguous(DType::kFloat32, {64, cols}), int64_t{-1}, false},
                       static_cast<uint16_t>(arch))
      .Encode();
}

// Deterministic bytes that identify (seed, size): a reader can tell a whole
// CUBIN from a torn or mixed one.
inline std::string Pattern(uint64_t seed, size_t size) {
  std::string s(size, '\0');
  uint64_t x = seed * 0x9e3779b97f4a7c15ULL + 1;
  for (size_t i = 0; i < size; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    s[i] = static_cast<char>(x);
  }
  return s;
}

inline KernelRecord MakeRecord(int64_t cols, size_t cubin_bytes = 4096, double median_us = 10.0) {
  KernelRecord r;
  r.key_bytes = KeyBytes(cols);
  r.source = "extern \"C\" __global__ void softmax_" + std::to_string(cols) + "(float* x) {}\n";
  r.compile_options = {"-use_fast_math"};
  r.entry_point = "softmax_" + std::to_string(cols);
  r.cubin = Pattern(static_cast<uint64_t>(cols), cubin_bytes);
  r.launch.grid[0] = 64;
  r.launch.block[0] = 256;
  r.launch.dynamic_shared_bytes = 1024;
  r.design.family = "softmax";
  r.design.knobs = {{"threads_per_row", "256"}, {"vector_width", "4"}};
  r.design.policy_version = "expert-default";
  r.timing = {median_us, 0.2, 50, "NVIDIA H200", 1980000, 3201000};
  r.baseline = {median_us * 2, 0.3, 50, "NVIDIA H200", 1980000, 3201000};
  r.verification.seeds = {1, 2, 3};
  r.verification.input_kinds = {"normal", "uniform", "large"};
  r.verification.edge_cases_passed = {"nan", "inf", "neg_zero", "empty"};
  r.verification.max_abs_error = 1e-7;
  r.verification.max_rel_error = 2e-6;
  r.verification.atol = 1e-5;
  r.verification.rtol = 1.3e-6;
  r.toolchain = kToolchain;
  r.status = RecordStatus::kVerified;
  return r;
}

inline std::unique_ptr<KernelCache> OpenOrDie(const std::string& path, bool read_only = false) {
  OpenOptions o;
  o.path = path;
  o.read_only = read_only;
  auto c = KernelCache::Open(o);
  if (!c.ok()) {
    fprintf(stderr, "open %s: %s\n", path.c_str(), c.status().ToString().c_str());
    std::abort();
  }
  return std::move(*c);
}

}  // namespace kjit::cache::testing
