// The adapter's unboxed path (shim/unboxed_kernels.h, call_path.h): for every intercepted
// op, a call given by its C++ arguments is keyed to the same bytes as the same call boxed as the
// dispatcher boxes it, and passes or fails the same checks; and PyTorch's unboxed CUDA kernels
// that the adapter finds by mangled name are the ones this PyTorch's libtorch_cuda exports.
// CPU tensors (the checks take the device type as a parameter; the adapter's is CUDA).
#include <ATen/ATen.h>
#include <ATen/core/boxing/impl/boxing.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <cxxabi.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "call_path.h"
#include "unboxed_kernels.h"

namespace kjit::shim {
namespace {

constexpr size_t kOps = std::size(kInterceptedOps);

const c10::FunctionSchema& SchemaOf(size_t i) {
  const OpName parts = SplitOpName(kInterceptedOps[i]);
  auto handle = c10::Dispatcher::singleton().findSchema(
      c10::OperatorName("aten::" + std::string(parts.name), std::string(parts.overload)));
  if (!handle.has_value()) throw std::runtime_error("no schema for " + std::string(kInterceptedOps[i]));
  return handle->schema();
}

// Keys one call of op I both ways and runs both checks both ways; records that op I was checked.
std::set<size_t>& Checked() {
  static std::set<size_t> checked;
  return checked;
}

template <size_t I, class Fn = typename OpType<I>::schema>
struct Both;
template <size_t I, class R, class... P>
struct Both<I, R(P...)> {
  // `expect_pass`: what the checks should answer (the samples say which they chose).
  static void Check(bool expect_pass, P... args) {
    SCOPED_TRACE(std::string(kInterceptedOps[I]));
    Checked().insert(I);
    const kjit::torch::CallKeyPlan plan(SchemaOf(I));
    const uint32_t numerics = kjit::torch::CurrentNumerics();
    ::torch::jit::Stack stack = c10::impl::boxArgs<P...>(args...);
    ASSERT_EQ(stack.size(), plan.arg_count());
    std::string boxed, typed;
    const Status boxed_status = kjit::torch::WriteCallKey(plan, stack, 90, numerics, &boxed);
    const Status typed_status = kjit::torch::WriteTypedCallKey(plan, 90, numerics, &typed, args...);
    EXPECT_EQ(boxed_status.ok(), typed_status.ok()) << boxed_status.ToString() << " / " << typed_status.ToString();
    if (boxed_status.ok() && typed_status.ok()) {
      EXPECT_EQ(boxed, typed);
      EXPECT_FALSE(boxed.empty());
    }
    // The hash the unboxed path looks keys up by: HashBytes of the same bytes, or the same refusal.
    std::string scratch;
    Hash128 hash;
    const Status hash_status = kjit::torch::HashTypedCallKey(plan, 90, numerics, &scratch, &hash, args...);
    EXPECT_EQ(hash_status.ok(), boxed_status.ok()) << hash_status.ToString();
    if (hash_status.ok() && boxed_status.ok()) {
      EXPECT_EQ(hash, HashBytes(boxed));
    }
    constexpr PreFilter kFilter = PreFilterFor(kInterceptedOps[I]);
    EXPECT_EQ(PassesPreFilter(kFilter, stack), (PassesPreFilterTyped<kFilter>(args...)));
    int boxed_device = -7, typed_device = -7;
    constexpr bool kRecorded = ServesRecordedCalls(kInterceptedOps[I]);
    const bool boxed_ok = CheckCall<c10::DeviceType::CPU>(kFilter, stack, &boxed_device, kRecorded);
    const bool typed_ok = CheckTypedCall<kFilter, c10::DeviceType::CPU, kRecorded>(&typed_device, args...);
    EXPECT_EQ(boxed_ok, typed_ok);
    EXPECT_EQ(typed_ok, expect_pass);
    if (boxed_ok && typed_ok) {
      EXPECT_EQ(boxed_device, typed_device);
    }
  }
};

template <class Op>
constexpr size_t IndexOf() {
  return []<size_t... I>(std::index_sequence<I...>) {
    size_t index = kOps;
    ((std::is_same_v<Op, OpType<I>> ? (index = I) : 0), ...);
    return index;
  }(std::make_index_sequence<kOps>{});
}
template <class Op>
using For = Both<IndexOf<Op>()>;

std::vector<c10::SymInt> Sym(std::initializer_list<int64_t> values) {
  std::vector<c10::SymInt> out;
  for (int64_t v : values) out.emplace_back(v);
  return out;
}

at::Tensor F(std::initializer_list<int64_t> sizes, at::ScalarType type = at::kFloat) {
  return at::randn(sizes, at::TensorOptions().dtype(type));
}

TEST(ShimUnboxed, TypedKeysAndChecksEqualTheBoxedOnesForEveryOp) {
  namespace ops = at::_ops;
  const at::Tensor x = F({4, 6, 8});
  const at::Tensor xt = x.transpose(1, 2);  // non-contiguous
  const at::Tensor x_offset = F({40}).narrow(0, 3, 24).view({4, 6});  // storage offset, unaligned
  const at::Tensor h = F({4, 6, 8}, at::kHalf);
  const at::Tensor i32 = at::ones({4, 6}, at::TensorOptions().dtype(at::kInt));
  const at::Tensor empty = F({0, 6});
  const at::Tensor w = F({8}), b = F({8});
  const std::optional<at::Tensor> none;
  const at::Tensor grad = F({4, 6}).requires_grad_();

  For<ops::_softmax>::Check(true, x, 1, false);
  For<ops::_softmax>::Check(true, h, -1, true);
  For<ops::_softmax>::Check(true, xt, 2, false);
  // Autograd would record it: served, as the softmax family declares (KJIT_SERVES_RECORDED).
  For<ops::_softmax>::Check(true, grad, 0, false);
  For<ops::_log_softmax>::Check(true, x_offset, 0, false);
  {
    const auto shape = Sym({8});
    For<ops::native_layer_norm>::Check(true, x, shape, w, b, 1e-5);
    For<ops::native_layer_norm>::Check(true, x, shape, none, none, 1e-6);
    For<ops::native_layer_norm>::Check(true, xt, Sym({6}), none, F({6}), 1e-5);
    // A value below -2^62 is a heap-allocated SymInt: the dispatcher boxes such a list as a
    // SymInt list, which is not keyed, and neither is the typed call.
    For<ops::native_layer_norm>::Check(true, x, Sym({8, INT64_MIN + 1}), none, none, 1e-5);
  }
  {
    // A key longer than the key writer's buffer, three tensors of rank 11 with long strides
    // (HashTypedCallKey hashes it in its scratch string).
    const at::Tensor deep = at::empty_strided({1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2},
                                              {int64_t{1} << 60, int64_t{1} << 59, int64_t{1} << 58,
                                               int64_t{1} << 57, int64_t{1} << 56, int64_t{1} << 55,
                                               int64_t{1} << 54, int64_t{1} << 53, int64_t{1} << 52,
                                               int64_t{1} << 51, 1});
    For<ops::native_layer_norm>::Check(true, deep, Sym({2}), deep, deep, 1e-5);
  }
  For<ops::_fused_rms_norm>::Check(true, x, std::vector<int64_t>{8}, w, 1e-6);
  For<ops::_fused_rms_norm>::Check(true, x, std::vector<int64_t>{6, 8}, none, std::nullopt);
  {
    const at::Tensor g = F({2, 6, 5});
    For<ops::native_group_norm>::Check(true, g, F({6}), F({6}), c10::SymInt(2), c10::SymInt(6), c10::SymInt(5), 3,
                                       1e-5);
    For<ops::native_group_norm>::Check(true, g, none, none, c10::SymInt(2), c10::SymInt(6), c10::SymInt(5), 2, 1e-5);
  }
  {
    const at::Tensor bn = F({2, 6, 5, 5});
    For<ops::native_batch_norm>::Check(true, bn, F({6}), F({6}), F({6}), F({6}), false, 0.1, 1e-5);
    For<ops::native_batch_norm>::Check(true, bn, none, none, none, none, true, 0.1, 1e-5);
    For<ops::cudnn_batch_norm>::Check(true, bn, F({6}), F({6}), F({6}), F({6}), true, 0.1, 1e-5);
    // Calls autograd records: left to PyTorch for batch_norm, which does not declare them.
    const at::Tensor weight = F({6}).requires_grad_();
    For<ops::native_batch_norm>::Check(false, bn, weight, F({6}), F({6}), F({6}), false, 0.1, 1e-5);
    For<ops::cudnn_batch_norm>::Check(false, bn, weight, F({6}), F({6}), F({6}), true, 0.1, 1e-5);
    // ... unless grad mode is off.
    const c10::NoGradGuard no_grad;
    For<ops::native_batch_norm>::Check(true, bn, weight, F({6}), F({6}), F({6}), false, 0.1, 1e-5);
  }
  For<ops::cumsum>::Check(true, x, 2, std::nullopt);
  For<ops::cumsum>::Check(true, x, 1, at::kDouble);
  For<ops::cumsum>::Check(false, i32, 1, std::nullopt);  // not a float dtype: pre-filter
  For<ops::cumsum>::Check(false, empty, 1, std::nullopt);  // empty: pre-filter
  For<ops::cumprod>::Check(true, h, 0, at::kHalf);
  {
    const at::Tensor img = F({2, 3, 9, 9});
    const std::vector<int64_t> k{3, 3}, s{2, 2}, p{1, 1}, d{1, 1}, none_list{};
    For<ops::max_pool2d_with_indices>::Check(true, img, k, s, p, d, false);
    For<ops::max_pool2d_with_indices>::Check(true, img, k, none_list, p, d, true);
    For<ops::avg_pool2d>::Check(true, img, k, s, p, false, true, std::nullopt);
    For<ops::avg_pool2d>::Check(true, img, k, s, p, true, false, 4);
    const at::Tensor vol = F({1, 2, 5, 6, 7});
    const std::vector<int64_t> k3{2, 2, 2}, s3{1, 2, 2}, p3{0, 1, 1}, d3{1, 1, 1};
    For<ops::max_pool3d_with_indices>::Check(true, vol, k3, s3, p3, d3, false);
    For<ops::avg_pool3d>::Check(true, vol, k3, s3, p3, false, true, std::nullopt);
  }
  {
    const std::vector<int64_t> dims{1}, two{0, 2}, no_dims{};
    For<ops::sum_dim_IntList>::Check(true, x, c10::OptionalIntArrayRef(dims), false, std::nullopt);
    For<ops::sum_dim_IntList>::Check(true, x, c10::OptionalIntArrayRef(two), true, at::kFloat);
    For<ops::sum_dim_IntList>::Check(true, x, c10::OptionalIntArrayRef(), false, std::nullopt);
    For<ops::sum_dim_IntList>::Check(true, x, c10::OptionalIntArrayRef(no_dims), false, std::nullopt);
    For<ops::mean_dim>::Check(true, xt, c10::OptionalIntArrayRef(dims), true, std::nullopt);
    For<ops::amax>::Check(true, x, dims, false);
    For<ops::amin>::Check(true, h, two, true);
    For<ops::prod>::Check(true, x, std::nullopt);
    For<ops::prod_dim_int>::Check(true, x, 2, false, at::kFloat);
    For<ops::argmax>::Check(true, x, 1, false);
    For<ops::argmax>::Check(true, x, std::nullopt, false);
    For<ops::argmin>::Check(true, xt, -1, true);
  }
  {
    const at::Tensor in = F({2, 4, 9, 9});
    const at::Tensor dw = F({4, 1, 3, 3});
    const auto k = Sym({3, 3}), s = Sym({1, 1}), p = Sym({1, 1}), d = Sym({1, 1});
    For<ops::_conv_depthwise2d>::Check(true, in, dw, k, none, s, p, d);
    For<ops::_conv_depthwise2d>::Check(true, in, dw, k, F({4}), s, p, d);
    For<ops::cudnn_convolution>::Check(true, in, dw, p, s, d, c10::SymInt(4), false, false, true);
    // Not depthwise (groups 1, a dense weight): the pre-filter declines it both ways.
    For<ops::cudnn_convolution>::Check(false, in, F({8, 4, 3, 3}), p, s, d, c10::SymInt(1), false, false, true);
  }
  {
    For<ops::mm>::Check(true, F({16, 8}), F({8, 12}));
    For<ops::mm>::Check(true, F({16, 8}).t(), F({16, 12}));
    For<ops::mm>::Check(false, F({4, 100000}), F({100000, 2}));  // K past the family's limit
    For<ops::mm>::Check(false, F({16, 8}), F({8, 12}, at::kDouble));  // dtypes differ
    For<ops::bmm>::Check(true, F({3, 16, 8}), F({3, 8, 12}));
    For<ops::bmm>::Check(false, F({3, 16, 8}), F({2, 8, 12}));  // batch sizes differ
  }
  {
    const at::Tensor g = F({4, 6}), y = at::softmax(F({4, 6}), 1);
    For<ops::_softmax_backward_data>::Check(true, g, y, 1, at::kFloat);
    For<ops::_softmax_backward_data>::Check(true, g.t(), y.t(), 0, at::kFloat);
    For<ops::_log_softmax_backward_data>::Check(true, g, y, -1, at::kFloat);
    // In a double backward (create_graph) autograd records the backward op: left to PyTorch.
    For<ops::_softmax_backward_data>::Check(false, F({4, 6}).requires_grad_(), y, 1, at::kFloat);
  }
  {
    // output_mask, a std::array<bool, N>, is keyed as the int list the boxed bool list becomes.
    const at::Tensor g = F({4, 8}), input = F({4, 8}), mean = F({4, 1}), rstd = F({4, 1});
    const std::optional<at::Tensor> weight = F({8}), bias = F({8});
    For<ops::native_layer_norm_backward>::Check(true, g, input, Sym({8}), mean, rstd, weight, bias,
                                                std::array<bool, 3>{true, true, true});
    For<ops::native_layer_norm_backward>::Check(true, g, input, Sym({8}), mean, rstd, none, none,
                                                std::array<bool, 3>{true, false, false});
    For<ops::_fused_rms_norm_backward>::Check(true, g, input, std::vector<int64_t>{8}, rstd, weight,
                                              std::array<bool, 2>{true, true});
    For<ops::_fused_rms_norm_backward>::Check(true, g, input, std::vector<int64_t>{8}, rstd, none,
                                              std::array<bool, 2>{false, false});
  }
  {
    const at::Tensor g = F({2, 6, 5}), input = F({2, 6, 5}), mean = F({2, 3}), rstd = F({2, 3});
    const std::optional<at::Tensor> weight = F({6});
    For<ops::native_group_norm_backward>::Check(true, g, input, mean, rstd, weight, c10::SymInt(2), c10::SymInt(6),
                                                c10::SymInt(5), 3, std::array<bool, 3>{true, true, true});
    For<ops::native_group_norm_backward>::Check(true, g, input, mean, rstd, none, c10::SymInt(2), c10::SymInt(6),
                                                c10::SymInt(5), 3, std::array<bool, 3>{true, false, false});
  }
  {
    // Pooling's gradients: grad_output [2, 3, 5, 5] of self [2, 3, 9, 9] (k3 s2 p1), the indices int64.
    const at::Tensor img = F({2, 3, 9, 9}), g = F({2, 3, 5, 5});
    const at::Tensor indices = at::zeros({2, 3, 5, 5}, at::TensorOptions().dtype(at::kLong));
    const std::vector<int64_t> k{3, 3}, s{2, 2}, p{1, 1}, d{1, 1}, none_list{};
    For<ops::avg_pool2d_backward>::Check(true, g, img, k, s, p, false, true, std::nullopt);
    For<ops::avg_pool2d_backward>::Check(true, g, img, k, none_list, p, true, false, 4);
    For<ops::max_pool2d_with_indices_backward>::Check(true, g, img, k, s, p, d, false, indices);
    For<ops::max_pool2d_with_indices_backward>::Check(false, F({0, 3, 5, 5}), F({0, 3, 9, 9}), k, s, p, d, false,
                                                      indices);  // empty: pre-filter
    // 3-D pooling's: grad_output [2, 3, 3, 5, 5] of self [2, 3, 5, 9, 9] (k3 s2 p1).
    const std::vector<int64_t> k3{3, 3, 3}, s3{2, 2, 2}, p3{1, 1, 1};
    For<ops::avg_pool3d_backward>::Check(true, F({2, 3, 3, 5, 5}), F({2, 3, 5, 9, 9}), k3, s3, p3, false, true,
                                         std::nullopt);
    const std::vector<int64_t> d3{1, 1, 1};
    For<ops::max_pool3d_with_indices_backward>::Check(true, F({2, 3, 3, 5, 5}), F({2, 3, 5, 9, 9}), k3, s3, p3, d3,
                                                      false, at::zeros({2, 3, 3, 5, 5}, at::TensorOptions().dtype(at::kLong)));
  }
  {
    // Batch norm's gradients: [2, 4, 3, 3], float32 [C] saved statistics; cudnn's reserve is a uint8 tensor.
    const at::Tensor g = F({2, 4, 3, 3}), input = F({2, 4, 3, 3}), weight = F({4}), mean = F({4}), invstd = F({4});
    const at::Tensor reserve = at::empty({0}, at::TensorOptions().dtype(at::kByte));
    const std::optional<at::Tensor> bn_weight = weight, bn_mean = mean, bn_invstd = invstd;
    For<ops::native_batch_norm_backward>::Check(true, g, input, bn_weight, bn_mean, bn_invstd, bn_mean, bn_invstd,
                                                true, 1e-5, std::array<bool, 3>{true, true, true});
    For<ops::native_batch_norm_backward>::Check(true, g, input, none, none, none, bn_mean, bn_invstd, true, 1e-5,
                                                std::array<bool, 3>{true, false, false});
    For<ops::cudnn_batch_norm_backward>::Check(true, input, g, weight, bn_mean, bn_invstd, bn_mean, bn_invstd, 1e-5,
                                               reserve);
  }
  {
    // A depthwise convolution's backward (2-D with a bias, 1-D without), and an ordinary one's, which the
    // pre-filter declines both ways, as it does a transposed depthwise one.
    const auto one = Sym({1, 1}), zero = Sym({0, 0}), pad = Sym({1, 1});
    const auto bias_sizes = Sym({4});
    const std::array<bool, 3> all{true, true, true};
    const at::Tensor in = F({2, 4, 9, 9}), g = F({2, 4, 9, 9});
    For<ops::convolution_backward>::Check(true, g, in, F({4, 1, 3, 3}), at::OptionalSymIntArrayRef(bias_sizes), one,
                                          pad, one, false, zero, c10::SymInt(4), all);
    For<ops::convolution_backward>::Check(true, F({2, 4, 12}), F({2, 4, 9}), F({4, 1, 4}), std::nullopt, Sym({1}),
                                          Sym({3}), Sym({1}), false, Sym({0}), c10::SymInt(4),
                                          std::array<bool, 3>{true, true, false});
    For<ops::convolution_backward>::Check(false, F({2, 8, 9, 9}), in, F({8, 4, 3, 3}), std::nullopt, one, pad, one,
                                          false, zero, c10::SymInt(1), all);
    For<ops::convolution_backward>::Check(false, g, in, F({4, 1, 3, 3}), std::nullopt, one, pad, one, true, zero,
                                          c10::SymInt(4), all);
  }
  {
    // The fusible elementwise ops (kChainMember): keyed alike both ways, and never served alone (the checks
    // decline them both ways; under KJIT_FUSION their calls are recorded into chains instead).
    const at::Tensor u = F({4, 8}), v = F({4, 8});
    const c10::Scalar half(0.5), one(int64_t{1}), three(3.0);
    For<ops::mul_Tensor>::Check(false, u, v);
    For<ops::add_Tensor>::Check(false, u, v, one);
    For<ops::sub_Tensor>::Check(false, u, v, half);
    For<ops::div_Tensor>::Check(false, u, v);
    For<ops::pow_Tensor_Scalar>::Check(false, u, three);
    For<ops::tanh>::Check(false, u);
    For<ops::exp>::Check(false, u);
    For<ops::neg>::Check(false, u);
    For<ops::sqrt>::Check(false, u);
    For<ops::rsqrt>::Check(false, u);
    For<ops::reciprocal>::Check(false, u);
    For<ops::sigmoid>::Check(false, u);
  }
  EXPECT_EQ(Checked().size(), kOps) << "every intercepted op must have a sample above";
}

// What `nm -D --defined-only` lists of a library, or empty if it cannot run.
std::set<std::string> DefinedSymbols(const std::string& library) {
  std::set<std::string> out;
  const std::string command = "nm -D --defined-only '" + library + "' 2>/dev/null";
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(command.c_str(), "r"), pclose);
  if (pipe == nullptr) return out;
  char line[4096];
  while (std::fgets(line, sizeof line, pipe.get()) != nullptr) {
    std::string s(line);
    while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.pop_back();
    const size_t space = s.rfind(' ');
    if (space != std::string::npos) out.insert(s.substr(space + 1));
  }
  return out;
}

template <size_t... I>
std::vector<std::pair<const char*, const char*>> KernelNames(std::index_sequence<I...>) {
  return {{CudaKernel<OpType<I>>::kSymbol, CudaKernel<OpType<I>>::kSignature}...};
}

TEST(ShimUnboxed, UnboxedKernelNamesDemangleToTheirSignatures) {
  for (const auto& [symbol, signature] : KernelNames(std::make_index_sequence<kOps>{})) {
    int status = 0;
    std::unique_ptr<char, void (*)(void*)> demangled(abi::__cxa_demangle(symbol, nullptr, nullptr, &status),
                                                      std::free);
    ASSERT_EQ(status, 0) << symbol;
    EXPECT_EQ(std::string(demangled.get()), signature);
  }
}

TEST(ShimUnboxed, TheLibtorchCudaBuiltAgainstExportsEveryUnboxedKernel) {
#ifndef KJIT_TORCH_CUDA_LIBRARY
  GTEST_SKIP() << "this LibTorch has no libtorch_cuda.so: nothing to check the adapter's kernel names against";
#else
  const std::set<std::string> defined = DefinedSymbols(KJIT_TORCH_CUDA_LIBRARY);
  if (defined.empty()) GTEST_SKIP() << "`nm -D` listed nothing for " << KJIT_TORCH_CUDA_LIBRARY << " (is binutils installed?)";
  for (const auto& [symbol, signature] : KernelNames(std::make_index_sequence<kOps>{})) {
    EXPECT_TRUE(defined.count(symbol)) << signature << " (" << symbol << ") is not exported by "
                                       << KJIT_TORCH_CUDA_LIBRARY << ": that op would keep the boxed wrapper";
  }
#endif
}

}  // namespace
}  // namespace kjit::shim
