// The per-call cost of keying a real PyTorch call: what the shim pays on every
// intercepted launch before its cache lookup. CPU tensors: the key reads
// metadata only, so the figure is the same for CUDA tensors.
#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <benchmark/benchmark.h>

#include <vector>

#include "kjit/torch/call_key.h"

namespace {

// Keys and hashes one boxed call per iteration, as the shim will.
void KeyAndHashLoop(benchmark::State& state, const char* name, const char* overload,
                    const std::vector<c10::IValue>& args) {
  const c10::OperatorHandle op = c10::Dispatcher::singleton().findSchemaOrThrow(name, overload);
  const c10::FunctionSchema& schema = op.schema();
  std::string buffer;
  buffer.reserve(256);
  for (auto _ : state) {
    if (!kjit::torch::WriteCallKey(schema, args, 90, 0, &buffer).ok()) state.SkipWithError("key failed");
    benchmark::DoNotOptimize(kjit::HashBytes(buffer));
  }
}

void BM_TorchLayerNormCallKeyAndHash(benchmark::State& state) {
  at::Tensor x = at::empty({65536, 1024}, at::kBFloat16);
  at::Tensor w = at::empty({1024}, at::kBFloat16);
  KeyAndHashLoop(state, "aten::native_layer_norm", "", {x, c10::IValue(std::vector<int64_t>{1024}), w, w, 1e-5});
}
BENCHMARK(BM_TorchLayerNormCallKeyAndHash);

void BM_TorchSoftmaxCallKeyAndHash(benchmark::State& state) {
  KeyAndHashLoop(state, "aten::_softmax", "", {at::empty({64, 1048576}), int64_t{-1}, false});
}
BENCHMARK(BM_TorchSoftmaxCallKeyAndHash);

void BM_TorchCurrentNumerics(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(kjit::torch::CurrentNumerics());
}
BENCHMARK(BM_TorchCurrentNumerics);

}  // namespace

BENCHMARK_MAIN();
