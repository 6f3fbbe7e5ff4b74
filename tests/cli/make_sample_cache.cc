// Writes a small kernel cache with fixed contents, for the `kjit cache` golden tests.
//
//   kjit_make_sample_cache PATH
//
// Everything printed about the records is fixed, times and use counts included
// (Insert keeps the ones a record brings), so the goldens need not mask them.
// Only the file's own size and path vary; the golden test masks those.
#include <cstdio>
#include <filesystem>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include "kjit/cache/kernel_cache.h"
#include "kjit/runtime/op_key.h"

namespace {

using kjit::DType;
using kjit::OpKey;
using kjit::TensorDesc;
using kjit::cache::KernelRecord;
using kjit::cache::RecordStatus;

// Stands in for a CUBIN: the cache only checksums these bytes, it never loads them.
std::string FakeCubin(size_t size, unsigned char salt) {
  std::string bytes = "\x7f" "ELF";
  while (bytes.size() < size) bytes.push_back(static_cast<char>((bytes.size() * 31 + salt) & 0xff));
  return bytes;
}

kjit::cache::Timing Timed(double median_us, double spread_us, int runs) {
  kjit::cache::Timing t;
  t.median_us = median_us;
  t.spread_us = spread_us;
  t.runs = runs;
  t.device = "NVIDIA H200 GPU-00000000-0000-0000-0000-000000000000";
  t.sm_clock_khz = 1980000;
  t.memory_clock_khz = 2619000;
  return t;
}

kjit::cache::Toolchain Cuda13() { return {13000, 13, 0, 1}; }

KernelRecord Softmax() {
  KernelRecord r;
  r.key_bytes = OpKey::Single("aten::_softmax", "",
                              {TensorDesc::Contiguous(DType::kFloat32, {64, 1048576}), int64_t{-1}, false}, 90)
                    .Encode();
  r.source =
      "#include <cuda_fp16.h>\n"
      "\n"
      "extern \"C\" __global__ void __launch_bounds__(256)\n"
      "kjit_softmax_f32(const float* __restrict__ x, float* __restrict__ y, int cols) {\n"
      "  const float* row = x + static_cast<size_t>(blockIdx.x) * cols;\n"
      "  float* out = y + static_cast<size_t>(blockIdx.x) * cols;\n"
      "  float m = -INFINITY;\n"
      "  for (int i = threadIdx.x * 4; i < cols; i += blockDim.x * 4) {\n"
      "    float4 v = *reinterpret_cast<const float4*>(row + i);\n"
      "    m = fmaxf(m, fmaxf(fmaxf(v.x, v.y), fmaxf(v.z, v.w)));\n"
      "  }\n"
      "  // (block reduction, exponentials and the normalising pass elided in this sample)\n"
      "  if (threadIdx.x == 0) out[0] = m;\n"
      "}\n";
  r.compile_options = {"--std=c++17", "-default-device"};
  r.entry_point = "kjit_softmax_f32";
  r.cubin = FakeCubin(3000, 1);
  r.launch.grid[0] = 64;
  r.launch.block[0] = 256;
  r.launch.dynamic_shared_bytes = 2048;
  r.design = {"softmax", {{"threads_per_row", "256"}, {"vector_width", "4"}}, "expert-default"};
  r.timing = Timed(50.0, 0.4, 100);
  r.baseline = Timed(120.5, 1.1, 100);
  r.verification.seeds = {1, 2, 3};
  r.verification.input_kinds = {"normal", "uniform", "large"};
  r.verification.edge_cases_passed = {"nan", "inf", "neg_zero"};
  r.verification.max_abs_error = 1.2e-7;
  r.verification.max_rel_error = 3.4e-6;
  r.verification.atol = 1e-5;
  r.verification.rtol = 1e-5;
  r.verification.outputs = {{true, 6, {64, 1048576}, {1048576, 1}}};  // f32, as PyTorch returned it
  r.toolchain = Cuda13();
  r.torch_version = "2.11.0";
  r.status = RecordStatus::kVerified;
  return r;
}

KernelRecord Add() {
  KernelRecord r;
  const auto t = TensorDesc::Contiguous(DType::kBFloat16, {4096, 4096});
  r.key_bytes = OpKey::Single("aten::add", "Tensor", {t, t, int64_t{1}}, 90).Encode();
  r.source =
      "extern \"C\" __global__ void kjit_add_bf16(const __nv_bfloat162* a, const __nv_bfloat162* b,\n"
      "                                           __nv_bfloat162* c, long n) {\n"
      "  for (long i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) c[i] = a[i] + b[i];\n"
      "}\n";
  r.compile_options = {"--std=c++17"};
  r.entry_point = "kjit_add_bf16";
  r.cubin = FakeCubin(5200, 2);
  r.launch.grid[0] = 1056;
  r.launch.block[0] = 512;
  r.design = {"elementwise", {{"items_per_thread", "2"}, {"grid", "8_per_sm"}}, "ppo-17"};
  r.timing = Timed(41.25, 0.3, 200);
  r.baseline = Timed(48.75, 0.5, 200);
  r.verification.seeds = {7, 8};
  r.verification.input_kinds = {"normal", "small"};
  r.verification.edge_cases_passed = {"nan", "inf", "neg_zero", "unaligned"};
  r.verification.atol = 1e-2;
  r.verification.rtol = 1.6e-2;
  r.toolchain = Cuda13();
  r.status = RecordStatus::kVerified;
  return r;
}

KernelRecord Mean() {
  KernelRecord r;
  r.key_bytes = OpKey::Single("aten::mean", "dim",
                              {TensorDesc::Contiguous(DType::kFloat32, {32, 4096}), kjit::IntList{-1}, true,
                               kjit::NoneArg{}},
                              90)
                    .Encode();
  r.source = "extern \"C\" __global__ void kjit_mean_rows(const float* x, float* y, int cols) {}\n";
  r.entry_point = "kjit_mean_rows";
  r.cubin = FakeCubin(1800, 3);
  r.launch.grid[0] = 32;
  r.launch.block[0] = 128;
  r.design = {"reduction", {{"threads_per_row", "128"}}, "ppo-17"};
  r.timing = Timed(9.2, 0.2, 100);
  r.baseline = Timed(8.0, 0.1, 100);
  r.verification.seeds = {11};
  r.verification.input_kinds = {"normal"};
  r.verification.max_abs_error = 2.5e-7;
  r.verification.max_rel_error = 1e-6;
  r.verification.atol = 1e-5;
  r.verification.rtol = 1.3e-6;
  r.toolchain = Cuda13();
  r.status = RecordStatus::kRejected;
  r.status_reason = "slower than PyTorch's kernel (0.87x)";
  return r;
}

KernelRecord LayerNorm() {
  KernelRecord r;
  r.key_bytes = OpKey::Single("aten::native_layer_norm", "",
                              {TensorDesc::Contiguous(DType::kFloat16, {8, 1024}), kjit::IntList{1024},
                               TensorDesc::Contiguous(DType::kFloat16, {1024}),
                               TensorDesc::Contiguous(DType::kFloat16, {1024}), 1e-5},
                              80)
                    .Encode();
  r.source = "extern \"C\" __global__ void kjit_layer_norm_f16() {}\n";
  r.entry_point = "kjit_layer_norm_f16";
  r.cubin = FakeCubin(900, 4);
  r.design = {"layer_norm", {}, "expert-default"};
  r.toolchain = {12080, 12, 8, 1};
  r.status = RecordStatus::kCandidate;
  return r;
}

// A softmax whose key hash starts with the same four hex digits as Softmax()'s,
// so that the tests can show how an ambiguous hash prefix is reported. Found by
// trying row counts; the encoding and hash are fixed, so this is too.
KernelRecord SoftmaxSharingPrefix(const std::string& prefix) {
  KernelRecord r = Softmax();
  for (int64_t rows = 1;; ++rows) {
    const OpKey key = OpKey::Single(
        "aten::_softmax", "", {TensorDesc::Contiguous(DType::kFloat32, {rows, 1024}), int64_t{-1}, false}, 90);
    if (key.Hash().ToHex().compare(0, prefix.size(), prefix) == 0) {
      r.key_bytes = key.Encode();
      break;
    }
  }
  r.cubin = FakeCubin(2500, 5);
  r.launch.grid[0] = 1;
  r.design.knobs["threads_per_row"] = "128";
  r.timing = Timed(3.5, 0.05, 500);
  r.baseline = Timed(3.7, 0.05, 500);
  return r;
}

int Fail(const kjit::Status& s) {
  std::fprintf(stderr, "kjit_make_sample_cache: %s\n", s.ToString().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: kjit_make_sample_cache PATH\n");
    return 2;
  }
  const std::string path = argv[1];
  std::error_code error;
  if (std::filesystem::exists(path, error)) {
    std::fprintf(stderr, "kjit_make_sample_cache: %s exists; give a new path\n", path.c_str());
    return 2;
  }
  kjit::cache::OpenOptions options;
  options.path = path;
  auto cache = kjit::cache::KernelCache::Open(options);
  if (!cache.ok()) return Fail(cache.status());
  if (auto s = (*cache)->SetSizeLimit(1 << 20); !s.ok()) return Fail(s);

  const KernelRecord softmax = Softmax();
  const std::string softmax_prefix = OpKey::Decode(softmax.key_bytes)->Hash().ToHex().substr(0, 4);
  std::vector<KernelRecord> records = {softmax, Add(), Mean(), LayerNorm(), SoftmaxSharingPrefix(softmax_prefix)};
  // 2025-01-15T10:00:00Z, then a minute apart; used a day later, in an order of their own.
  constexpr int64_t kFirstCreatedMs = 1736935200000;
  const int64_t used_after_minutes[] = {1440 + 50, 1440 + 5, 0, 0, 1440 + 20};
  const uint64_t use_counts[] = {40, 7, 0, 0, 3};
  std::vector<int64_t> ids;
  for (size_t i = 0; i < records.size(); ++i) {
    KernelRecord& record = records[i];
    record.created_unix_ms = kFirstCreatedMs + static_cast<int64_t>(i) * 60000;
    record.last_used_unix_ms = used_after_minutes[i] ? kFirstCreatedMs + used_after_minutes[i] * 60000 : 0;
    record.use_count = use_counts[i];
    auto id = (*cache)->Insert(record);
    if (!id.ok()) return Fail(id.status());
    ids.push_back(*id);
  }

  // Per-key lookup counters: hits and misses on two cached keys, misses on one
  // nothing has been cached for. No record ids, which would stamp the records'
  // last-use times with the clock.
  const OpKey uncached = OpKey::Single("aten::gelu", "", {TensorDesc::Contiguous(DType::kFloat32, {1024}), std::string("tanh")}, 90);
  std::vector<kjit::cache::UseReport> uses(3);
  uses[0].key_hash = OpKey::Decode(softmax.key_bytes)->Hash();
  uses[0].hits = 40;
  uses[0].misses = 2;
  uses[1].key_hash = OpKey::Decode(Add().key_bytes)->Hash();
  uses[1].hits = 7;
  uses[2].key_hash = uncached.Hash();
  uses[2].misses = 5;
  uses[2].key_text = uncached.ToString();
  if (auto s = (*cache)->RecordUses(uses); !s.ok()) return Fail(s);

  // Measurement history (what `kjit cache measurements` lists): two trials of
  // the softmax key, one verified and one rejected, and one of layer_norm.
  struct Trial {
    const KernelRecord* record;
    const char* family;
    std::map<std::string, std::string> knobs;
    const char* outcome;
    double median_us, baseline_us, reward;
    const char* detail;
  };
  const KernelRecord layer_norm = LayerNorm();
  const Trial trials[] = {
      {&softmax, "softmax", {{"strategy", "4"}, {"threads", "512"}, {"vec", "4"}}, "verified", 279.712, 457.808,
       0.4927, R"({"floor_us":132.3,"registers":40,"spill_bytes":0})"},
      {&softmax, "softmax", {{"strategy", "6"}, {"threads", "64"}, {"vec", "2"}}, "wrong_result", 0, 457.808, -5,
       R"({"reason":"output 0 on special inputs: 2135 of 294912 elements differ"})"},
      {&layer_norm, "layer_norm", {{"stats", "0"}, {"strategy", "1"}}, "screened", 133.6, 200.9, 0.408, "not json"},
  };
  for (size_t i = 0; i < std::size(trials); ++i) {
    kjit::cache::Measurement m;
    m.key_bytes = trials[i].record->key_bytes;
    m.key_hash = OpKey::Decode(m.key_bytes)->Hash();
    m.design.family = trials[i].family;
    m.design.knobs = trials[i].knobs;
    m.design.policy_version = "expert-default";
    m.outcome = trials[i].outcome;
    m.median_us = trials[i].median_us;
    m.baseline_us = trials[i].baseline_us;
    m.reward = trials[i].reward;
    m.detail = trials[i].detail;
    m.created_unix_ms = kFirstCreatedMs + 3600000 + static_cast<int64_t>(i) * 1000;
    if (auto id = (*cache)->measurements().AddMeasurement(m); !id.ok()) return Fail(id.status());
  }

  std::printf("wrote %zu records to %s\n", ids.size(), path.c_str());
  return 0;
}
