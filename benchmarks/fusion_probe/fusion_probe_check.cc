// kjit_fusion_probe_check: the probe's modes that run on a CPU (0 eager, 1 catch-all, 2 window, 5 observer)
// over a few of the mixes' ops on CPU tensors. Checks that each mode gives eager's results bit for bit and
// that its counters moved; prints one line per mode and exits 1 on any mismatch. No timing.
#include <ATen/TensorOperators.h>
#include <ATen/ops/_to_copy.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/cumsum.h>
#include <ATen/ops/equal.h>
#include <ATen/ops/linalg_vector_norm.h>
#include <ATen/ops/log_softmax.h>
#include <ATen/ops/mean.h>
#include <ATen/ops/mm.h>
#include <ATen/ops/nll_loss.h>
#include <ATen/ops/pow.h>
#include <ATen/ops/randint.h>
#include <ATen/ops/randn.h>
#include <ATen/ops/rsqrt.h>
#include <ATen/ops/tanh.h>
#include <c10/core/InferenceMode.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "fusion_probe.h"

namespace {

std::vector<at::Tensor> RunMixes(const at::Tensor& x, const at::Tensor& w, const at::Tensor& m,
                                 const at::Tensor& target) {
  std::vector<at::Tensor> out;
  // RMS norm as Hugging Face's Llama writes it, on a bfloat16 input.
  at::Tensor xb = x.to(at::kBFloat16);
  at::Tensor h = xb.to(at::kFloat);
  at::Tensor v = h.pow(2).mean({-1}, true);
  h = h * at::rsqrt(v + 1e-6);
  out.push_back(w.to(at::kBFloat16) * h.to(at::kBFloat16));
  // minGPT's tanh-GELU.
  out.push_back(0.5 * x * (1.0 + at::tanh(0.7978845608 * (x + 0.044715 * at::pow(x, 3.0)))));
  // Cross-entropy, L2 normalisation, masked cumsum.
  out.push_back(at::nll_loss(at::log_softmax(x, -1), target));
  out.push_back(x / at::linalg_vector_norm(x, 2, {-1}, true).clamp_min(1e-12));
  out.push_back(at::cumsum(x * m, -1));
  // Something else: a product and a concatenation of window values.
  out.push_back(at::cat({at::mm(x, x.t()), h}, -1));
  return out;
}

}  // namespace

int main() {
  const int init = kjit_fp_init();
  std::printf("kjit_fp_init: %d%s%s\n", init, init != 0 ? ": " : "", init != 0 ? kjit_fp_error() : "");
  if (init < 0) return 1;
  c10::InferenceMode guard;
  at::Tensor x = at::randn({8, 64});
  at::Tensor w = at::randn({64});
  at::Tensor m = (at::randn({8, 64}) > 0).to(at::kFloat);
  at::Tensor target = at::randint(0, 64, {8}, at::kLong);
  const std::vector<at::Tensor> eager = RunMixes(x, w, m, target);
  int failures = 0;
  const char* names[] = {"eager", "catch-all", "window", "wrappers", "chains", "observer"};
  for (int mode : {1, 2, 5, 0}) {
    uint64_t before[10] = {}, after[10] = {};
    kjit_fp_counters(before, 10);
    if (kjit_fp_set_mode(mode) != 0) {
      std::printf("mode %d (%s): refused\n", mode, names[mode]);
      ++failures;
      continue;
    }
    const std::vector<at::Tensor> got = RunMixes(x, w, m, target);
    kjit_fp_set_mode(0);
    kjit_fp_counters(after, 10);
    bool same = got.size() == eager.size();
    for (size_t i = 0; same && i < got.size(); ++i) same = at::equal(got[i], eager[i]);
    const uint64_t caught = after[0] - before[0], fusible = after[1] - before[1], flushes = after[2] - before[2],
                   observed = after[9] - before[9];
    const bool moved = mode == 0 ? caught == 0 && observed == 0
                       : mode == 1 ? caught > 0
                       : mode == 2 ? caught > 0 && fusible > 0 && flushes > 0
                                   : observed > 0;
    std::printf("mode %d (%s): results %s eager's; caught %llu, fusible %llu, flushes %llu, observed %llu%s\n", mode,
                names[mode], same ? "equal" : "DIFFER FROM", static_cast<unsigned long long>(caught),
                static_cast<unsigned long long>(fusible), static_cast<unsigned long long>(flushes),
                static_cast<unsigned long long>(observed), moved ? "" : " (UNEXPECTED COUNTERS)");
    failures += (same && moved) ? 0 : 1;
  }
  // The CUDA-key modes need libtorch_cuda in the process: refused here, not crashed.
  std::printf("modes 3, 4 without libtorch_cuda: %s\n",
              kjit_fp_set_mode(3) == -1 && kjit_fp_set_mode(4) == -1 ? "refused" : "NOT REFUSED");
  std::printf("%s\n", failures == 0 ? "ok" : "FAILED");
  return failures == 0 ? 0 : 1;
}
