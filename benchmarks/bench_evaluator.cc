// How steady and how costly the evaluator's verdicts are, on a GPU.
//
// Evaluates one correct candidate (relu, f32 4096x1027) `--repeats` times in
// one worker, exactly as kjitd would, and measures PyTorch's own kernels for a
// few keys. Prints markdown: per evaluation the candidate's and the baseline's
// median, spread and confidence interval, and how long the evaluation took;
// then the spread of the medians across evaluations (the timing-noise figure
// issue 5 asks for) and baselines as a fraction of the copy-bandwidth floor.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>

#include "kjit/evaluator/evaluator.h"
#include "kjit/runtime/op_key.h"

using namespace kjit;

namespace {

constexpr int64_t kRows = 4096, kCols = 1027, kN = kRows * kCols;

std::string ReluSource() {
  return "extern \"C\" __global__ void relu(const float* __restrict__ x, float* __restrict__ out) {\n"
         "  const long long n = " + std::to_string(kN) + "LL;\n"
         "  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {\n"
         "    float v = x[i];\n"
         "    out[i] = (v > 0.f || v != v) ? v : 0.f;\n"
         "  }\n"
         "}\n";
}

double Spread(const std::vector<double>& v) {
  const auto [lo, hi] = std::minmax_element(v.begin(), v.end());
  return *lo > 0 ? (*hi / *lo - 1) * 100 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Timing noise and cost of the kjit evaluator (needs a GPU)."};
  int repeats = 5;
  int device = 0;
  app.add_option("--repeats", repeats, "evaluations of the same candidate")->capture_default_str();
  app.add_option("--device", device, "CUDA device")->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  eval::EvaluatorOptions options;
  options.device = device;
  auto evaluator = eval::Evaluator::Create(options);
  if (!evaluator.ok()) {
    std::fprintf(stderr, "bench_evaluator: %s\n", evaluator.status().ToString().c_str());
    return 2;
  }
  const daemon::WorkerDevice& d = (*evaluator)->device();
  std::printf("Evaluator on %s (sm_%d, copy bandwidth %.0f GB/s)\n\n", d.name.c_str(), d.arch,
              d.copy_bandwidth_bytes_per_s / 1e9);
  auto progress = [](const std::string&, std::chrono::milliseconds) {};

  daemon::EvaluateRequest request;
  request.key_bytes = OpKey::Single("aten::relu", "", {TensorDesc::Contiguous(DType::kFloat32, {kRows, kCols})}, 90).Encode();
  request.candidate.source = ReluSource();
  request.candidate.entry_point = "relu";
  request.candidate.launch.grid[0] = static_cast<uint32_t>(d.sm_count * 8);
  request.candidate.launch.block[0] = 256;

  std::printf("| eval | outcome | kjit median us | IQR us | CI | runs | eager median us | IQR us | CI | speedup | "
              "floor fraction | compile ms | total ms |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  std::vector<double> candidate_medians, baseline_medians, totals;
  for (int i = 0; i < repeats; ++i) {
    request.id = static_cast<uint64_t>(i + 1);
    const daemon::Verdict v = (*evaluator)->Evaluate(request, progress);
    std::printf("| %d | %s | %.2f | %.2f | %.2f%% | %d | %.2f | %.2f | %.2f%% | %.3f | %.3f | %.1f | %.0f |\n", i + 1,
                v.outcome.c_str(), v.timing.median_us, v.timing.spread_us, v.timing.ci_rel * 100, v.timing.runs,
                v.baseline.median_us, v.baseline.spread_us, v.baseline.ci_rel * 100,
                v.timing.median_us > 0 ? v.baseline.median_us / v.timing.median_us : 0,
                v.roofline.floor_us > 0 && v.timing.median_us > 0 ? v.roofline.floor_us / v.timing.median_us : 0,
                v.compile_ms, v.total_ms);
    if (v.outcome != "verified") {
      std::printf("\nverdict: %s\n", v.reason.c_str());
      return 1;
    }
    candidate_medians.push_back(v.timing.median_us);
    baseline_medians.push_back(v.baseline.median_us);
    totals.push_back(v.total_ms);
  }
  std::printf("\nSpread of medians across %d evaluations (max/min - 1): kjit %.2f%%, eager %.2f%%. "
              "One evaluation (compile, 5 verification sets, timing): %.0f-%.0f ms.\n\n",
              repeats, Spread(candidate_medians), Spread(baseline_medians),
              *std::min_element(totals.begin(), totals.end()), *std::max_element(totals.begin(), totals.end()));

  struct Case {
    const char* name;
    OpKey key;
  };
  const Case cases[] = {
      {"softmax f32[64,1048576] dim -1",
       OpKey::Single("aten::_softmax", "", {TensorDesc::Contiguous(DType::kFloat32, {64, 1048576}), int64_t{-1}, false}, 90)},
      {"layer_norm f32[4096,4096]",
       OpKey::Single("aten::native_layer_norm", "",
                     {TensorDesc::Contiguous(DType::kFloat32, {4096, 4096}), IntList{4096},
                      TensorDesc::Contiguous(DType::kFloat32, {4096}), TensorDesc::Contiguous(DType::kFloat32, {4096}), 1e-5},
                     90)},
      {"relu f32[4096,1027]", OpKey::Single("aten::relu", "", {TensorDesc::Contiguous(DType::kFloat32, {kRows, kCols})}, 90)},
  };
  std::printf("| PyTorch kernel | median us | IQR us | CI | runs | floor us | floor fraction |\n|---|---|---|---|---|---|---|\n");
  for (const Case& c : cases) {
    for (int i = 0; i < 2; ++i) {
      daemon::BaselineRequest b;
      b.key_bytes = c.key.Encode();
      const daemon::BaselineResult r = (*evaluator)->Baseline(b, progress);
      if (!r.error_code.empty()) {
        std::printf("| %s | %s: %s |\n", c.name, r.error_code.c_str(), r.error.c_str());
        continue;
      }
      std::printf("| %s | %.2f | %.2f | %.2f%% | %d | %.2f | %.3f |\n", c.name, r.timing.median_us, r.timing.spread_us,
                  r.timing.ci_rel * 100, r.timing.runs, r.roofline.floor_us,
                  r.timing.median_us > 0 ? r.roofline.floor_us / r.timing.median_us : 0);
    }
  }
  return 0;
}
