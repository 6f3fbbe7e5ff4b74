// The per-call cost of keying a real PyTorch call: what the shim pays on every
// intercepted launch before its cache lookup. CPU tensors: the key reads
// metadata only, so the figure is the same for CUDA tensors.
#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <benchmark/benchmark.h>

#include <vector>

#include "kjit/torch/call_key.h"

namespace {

void BM_TorchLayerNormCallKeyAndHash(benchmark::State& state) {
  const c10::OperatorHandle op = c10::Dispatcher::singleton().findSchemaOrThrow("aten::native_layer_norm", "");
  const c10::FunctionSchema& schema = op.schema();
  at::Tensor x = at::empty({65536, 1024}, at::kBFloat16);
  at::Tensor w = at::empty({1024}, at::kBFloat16);
  std::vector<c10::IValue> args{x, c10::IValue(std::vector<int64_t>{1024}), w, w, 1e-5};
  std::string buffer;
  buffer.reserve(256);
  for (auto _ : state) {
    if (!kjit::torch::WriteCallKey(schema, args, 90, 0, &buffer).ok()) state.SkipWithError("key failed");
    benchmark::DoNotOptimize(kjit::HashBytes(buffer));
  }
}
BENCHMARK(BM_TorchLayerNormCallKeyAndHash);

void BM_TorchSoftmaxCallKeyAndHash(benchmark::State& state) {
  const c10::OperatorHandle op = c10::Dispatcher::singleton().findSchemaOrThrow("aten::_softmax", "");
  const c10::FunctionSchema& schema = op.schema();
  std::vector<c10::IValue> args{at::empty({64, 1048576}), int64_t{-1}, false};
  std::string buffer;
  buffer.reserve(256);
  for (auto _ : state) {
    if (!kjit::torch::WriteCallKey(schema, args, 90, 0, &buffer).ok()) state.SkipWithError("key failed");
    benchmark::DoNotOptimize(kjit::HashBytes(buffer));
  }
}
BENCHMARK(BM_TorchSoftmaxCallKeyAndHash);

void BM_TorchCurrentNumerics(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(kjit::torch::CurrentNumerics());
}
BENCHMARK(BM_TorchCurrentNumerics);

}  // namespace

BENCHMARK_MAIN();
