// The C++ types of the intercepted ops and PyTorch's unboxed CUDA kernels of them.
//
// The adapter registers a typed (unboxed) wrapper per op, so that the dispatcher calls it with
// the op's C++ arguments instead of boxing them into a Stack, and so that a call kjit leaves to
// PyTorch (a known miss, a declined call) reaches PyTorch's kernel without boxing either.
// PyTorch's kernel is captured boxed (SafeKernelFunction offers only callBoxed); its unboxed
// form is at::cuda::<op> (RegisterCUDA's wrapper, the function the dispatcher's CUDA entry
// calls), exported by libtorch_cuda. The adapter does not link libtorch_cuda
// (link.adapter_no_torch_cuda), so it finds each by its mangled name with dlsym, as it finds
// at::detail::empty_strided_cuda. The mangled name encodes the parameter types: a PyTorch whose
// kernel has another signature has no such symbol, and that op keeps the boxed wrapper.
//
// What ties the three together:
// - OpTypes<I> is at::_ops::<kInterceptedOps[I]> (static_assert on its name and overload);
// - the static_assert in KJIT_CUDA_KERNEL compiles only if at::cuda::<fn> has an overload of
//   exactly at::_ops::<op>::schema's type (no call, no reference to the symbol);
// - tests/shim/shim_unboxed_test.cc checks that each mangled name is defined by the
//   libtorch_cuda built against and demangles to that signature.
#pragma once

#include <ATen/core/ATen_fwd.h>
#include <ATen/ops/_conv_depthwise2d_cuda_dispatch.h>
#include <ATen/ops/_conv_depthwise2d_ops.h>
#include <ATen/ops/_fused_rms_norm_cuda_dispatch.h>
#include <ATen/ops/_fused_rms_norm_ops.h>
#include <ATen/ops/_log_softmax_cuda_dispatch.h>
#include <ATen/ops/_log_softmax_ops.h>
#include <ATen/ops/_softmax_cuda_dispatch.h>
#include <ATen/ops/_softmax_ops.h>
#include <ATen/ops/amax_cuda_dispatch.h>
#include <ATen/ops/amax_ops.h>
#include <ATen/ops/amin_cuda_dispatch.h>
#include <ATen/ops/amin_ops.h>
#include <ATen/ops/argmax_cuda_dispatch.h>
#include <ATen/ops/argmax_ops.h>
#include <ATen/ops/argmin_cuda_dispatch.h>
#include <ATen/ops/argmin_ops.h>
#include <ATen/ops/avg_pool2d_cuda_dispatch.h>
#include <ATen/ops/avg_pool2d_ops.h>
#include <ATen/ops/avg_pool3d_cuda_dispatch.h>
#include <ATen/ops/avg_pool3d_ops.h>
#include <ATen/ops/bmm_cuda_dispatch.h>
#include <ATen/ops/bmm_ops.h>
#include <ATen/ops/cudnn_batch_norm_cuda_dispatch.h>
#include <ATen/ops/cudnn_batch_norm_ops.h>
#include <ATen/ops/cudnn_convolution_cuda_dispatch.h>
#include <ATen/ops/cudnn_convolution_ops.h>
#include <ATen/ops/cumprod_cuda_dispatch.h>
#include <ATen/ops/cumprod_ops.h>
#include <ATen/ops/cumsum_cuda_dispatch.h>
#include <ATen/ops/cumsum_ops.h>
#include <ATen/ops/max_pool2d_with_indices_cuda_dispatch.h>
#include <ATen/ops/max_pool2d_with_indices_ops.h>
#include <ATen/ops/max_pool3d_with_indices_cuda_dispatch.h>
#include <ATen/ops/max_pool3d_with_indices_ops.h>
#include <ATen/ops/mean_cuda_dispatch.h>
#include <ATen/ops/mean_ops.h>
#include <ATen/ops/mm_cuda_dispatch.h>
#include <ATen/ops/mm_ops.h>
#include <ATen/ops/native_batch_norm_cuda_dispatch.h>
#include <ATen/ops/native_batch_norm_ops.h>
#include <ATen/ops/native_group_norm_cuda_dispatch.h>
#include <ATen/ops/native_group_norm_ops.h>
#include <ATen/ops/native_layer_norm_cuda_dispatch.h>
#include <ATen/ops/native_layer_norm_ops.h>
#include <ATen/ops/prod_cuda_dispatch.h>
#include <ATen/ops/prod_ops.h>
#include <ATen/ops/sum_cuda_dispatch.h>
#include <ATen/ops/sum_ops.h>

#include <string_view>
#include <tuple>
#include <type_traits>

#include "shim_core.h"

namespace kjit::shim {

// at::_ops::<op> of kInterceptedOps, in its order.
using InterceptedOpTypes =
    std::tuple<at::_ops::_softmax, at::_ops::_log_softmax, at::_ops::native_layer_norm, at::_ops::_fused_rms_norm,
               at::_ops::native_group_norm, at::_ops::native_batch_norm, at::_ops::cudnn_batch_norm,
               at::_ops::cumsum, at::_ops::cumprod, at::_ops::max_pool2d_with_indices,
               at::_ops::max_pool3d_with_indices, at::_ops::avg_pool2d, at::_ops::avg_pool3d,
               at::_ops::sum_dim_IntList, at::_ops::mean_dim, at::_ops::amax, at::_ops::amin, at::_ops::prod,
               at::_ops::prod_dim_int, at::_ops::argmax, at::_ops::argmin, at::_ops::_conv_depthwise2d,
               at::_ops::cudnn_convolution, at::_ops::mm, at::_ops::bmm>;
static_assert(std::tuple_size_v<InterceptedOpTypes> == std::size(kInterceptedOps));

template <size_t I>
using OpType = std::tuple_element_t<I, InterceptedOpTypes>;

template <size_t I>
constexpr bool OpTypeMatches() {
  using Op = OpType<I>;
  const OpName parts = SplitOpName(kInterceptedOps[I]);
  const std::string_view name(Op::name);
  return name.substr(0, 6) == "aten::" && name.substr(6) == parts.name &&
         std::string_view(Op::overload_name) == parts.overload;
}
template <size_t... I>
constexpr bool AllOpTypesMatch(std::index_sequence<I...>) {
  return (OpTypeMatches<I>() && ...);
}
static_assert(AllOpTypesMatch(std::make_index_sequence<std::size(kInterceptedOps)>{}),
              "InterceptedOpTypes must list at::_ops::<op> in kInterceptedOps' order");

// PyTorch's unboxed CUDA kernel of an op: at::cuda::<fn>'s mangled name (its _symint form where
// the schema has SymInts, as at::_ops::<op>::schema has) and the readable signature it
// demangles to (checked by the test).
template <class Op>
struct CudaKernel;

#define KJIT_CUDA_KERNEL(OP, FN, SYMBOL, SIGNATURE)                                                          \
  template <>                                                                                                \
  struct CudaKernel<at::_ops::OP> {                                                                          \
    static constexpr const char* kSymbol = SYMBOL;                                                          \
    static constexpr const char* kSignature = SIGNATURE;                                                    \
  };                                                                                                         \
  static_assert(std::is_same_v<decltype(static_cast<at::_ops::OP::ptr_schema>(&at::cuda::FN)),               \
                               at::_ops::OP::ptr_schema>,                                                    \
                "at::cuda::" #FN " must have the type of at::_ops::" #OP "::schema");

KJIT_CUDA_KERNEL(_softmax, _softmax, "_ZN2at4cuda8_softmaxERKNS_6TensorElb",
                 "at::cuda::_softmax(at::Tensor const&, long, bool)")
KJIT_CUDA_KERNEL(_log_softmax, _log_softmax, "_ZN2at4cuda12_log_softmaxERKNS_6TensorElb",
                 "at::cuda::_log_softmax(at::Tensor const&, long, bool)")
KJIT_CUDA_KERNEL(native_layer_norm, native_layer_norm_symint,
                 "_ZN2at4cuda24native_layer_norm_symintERKNS_6TensorEN3c108ArrayRefINS4_6SymIntEEERKSt8optionalIS1_"
                 "ESB_d",
                 "at::cuda::native_layer_norm_symint(at::Tensor const&, c10::ArrayRef<c10::SymInt>, "
                 "std::optional<at::Tensor> const&, std::optional<at::Tensor> const&, double)")
KJIT_CUDA_KERNEL(_fused_rms_norm, _fused_rms_norm,
                 "_ZN2at4cuda15_fused_rms_normERKNS_6TensorEN3c108ArrayRefIlEERKSt8optionalIS1_ES7_IdE",
                 "at::cuda::_fused_rms_norm(at::Tensor const&, c10::ArrayRef<long>, std::optional<at::Tensor> "
                 "const&, std::optional<double>)")
KJIT_CUDA_KERNEL(native_group_norm, native_group_norm_symint,
                 "_ZN2at4cuda24native_group_norm_symintERKNS_6TensorERKSt8optionalIS1_ES7_N3c106SymIntES9_S9_ld",
                 "at::cuda::native_group_norm_symint(at::Tensor const&, std::optional<at::Tensor> const&, "
                 "std::optional<at::Tensor> const&, c10::SymInt, c10::SymInt, c10::SymInt, long, double)")
KJIT_CUDA_KERNEL(native_batch_norm, native_batch_norm,
                 "_ZN2at4cuda17native_batch_normERKNS_6TensorERKSt8optionalIS1_ES7_S7_S7_bdd",
                 "at::cuda::native_batch_norm(at::Tensor const&, std::optional<at::Tensor> const&, "
                 "std::optional<at::Tensor> const&, std::optional<at::Tensor> const&, std::optional<at::Tensor> "
                 "const&, bool, double, double)")
KJIT_CUDA_KERNEL(cudnn_batch_norm, cudnn_batch_norm,
                 "_ZN2at4cuda16cudnn_batch_normERKNS_6TensorES3_RKSt8optionalIS1_ES7_S7_bdd",
                 "at::cuda::cudnn_batch_norm(at::Tensor const&, at::Tensor const&, std::optional<at::Tensor> "
                 "const&, std::optional<at::Tensor> const&, std::optional<at::Tensor> const&, bool, double, double)")
KJIT_CUDA_KERNEL(cumsum, cumsum, "_ZN2at4cuda6cumsumERKNS_6TensorElSt8optionalIN3c1010ScalarTypeEE",
                 "at::cuda::cumsum(at::Tensor const&, long, std::optional<c10::ScalarType>)")
KJIT_CUDA_KERNEL(cumprod, cumprod, "_ZN2at4cuda7cumprodERKNS_6TensorElSt8optionalIN3c1010ScalarTypeEE",
                 "at::cuda::cumprod(at::Tensor const&, long, std::optional<c10::ScalarType>)")
KJIT_CUDA_KERNEL(max_pool2d_with_indices, max_pool2d_with_indices,
                 "_ZN2at4cuda23max_pool2d_with_indicesERKNS_6TensorEN3c108ArrayRefIlEES6_S6_S6_b",
                 "at::cuda::max_pool2d_with_indices(at::Tensor const&, c10::ArrayRef<long>, c10::ArrayRef<long>, "
                 "c10::ArrayRef<long>, c10::ArrayRef<long>, bool)")
KJIT_CUDA_KERNEL(max_pool3d_with_indices, max_pool3d_with_indices,
                 "_ZN2at4cuda23max_pool3d_with_indicesERKNS_6TensorEN3c108ArrayRefIlEES6_S6_S6_b",
                 "at::cuda::max_pool3d_with_indices(at::Tensor const&, c10::ArrayRef<long>, c10::ArrayRef<long>, "
                 "c10::ArrayRef<long>, c10::ArrayRef<long>, bool)")
KJIT_CUDA_KERNEL(avg_pool2d, avg_pool2d, "_ZN2at4cuda10avg_pool2dERKNS_6TensorEN3c108ArrayRefIlEES6_S6_bbSt8optionalIlE",
                 "at::cuda::avg_pool2d(at::Tensor const&, c10::ArrayRef<long>, c10::ArrayRef<long>, "
                 "c10::ArrayRef<long>, bool, bool, std::optional<long>)")
KJIT_CUDA_KERNEL(avg_pool3d, avg_pool3d, "_ZN2at4cuda10avg_pool3dERKNS_6TensorEN3c108ArrayRefIlEES6_S6_bbSt8optionalIlE",
                 "at::cuda::avg_pool3d(at::Tensor const&, c10::ArrayRef<long>, c10::ArrayRef<long>, "
                 "c10::ArrayRef<long>, bool, bool, std::optional<long>)")
KJIT_CUDA_KERNEL(sum_dim_IntList, sum,
                 "_ZN2at4cuda3sumERKNS_6TensorEN3c1016OptionalArrayRefIlEEbSt8optionalINS4_10ScalarTypeEE",
                 "at::cuda::sum(at::Tensor const&, c10::OptionalArrayRef<long>, bool, "
                 "std::optional<c10::ScalarType>)")
KJIT_CUDA_KERNEL(mean_dim, mean,
                 "_ZN2at4cuda4meanERKNS_6TensorEN3c1016OptionalArrayRefIlEEbSt8optionalINS4_10ScalarTypeEE",
                 "at::cuda::mean(at::Tensor const&, c10::OptionalArrayRef<long>, bool, "
                 "std::optional<c10::ScalarType>)")
KJIT_CUDA_KERNEL(amax, amax, "_ZN2at4cuda4amaxERKNS_6TensorEN3c108ArrayRefIlEEb",
                 "at::cuda::amax(at::Tensor const&, c10::ArrayRef<long>, bool)")
KJIT_CUDA_KERNEL(amin, amin, "_ZN2at4cuda4aminERKNS_6TensorEN3c108ArrayRefIlEEb",
                 "at::cuda::amin(at::Tensor const&, c10::ArrayRef<long>, bool)")
KJIT_CUDA_KERNEL(prod, prod, "_ZN2at4cuda4prodERKNS_6TensorESt8optionalIN3c1010ScalarTypeEE",
                 "at::cuda::prod(at::Tensor const&, std::optional<c10::ScalarType>)")
KJIT_CUDA_KERNEL(prod_dim_int, prod, "_ZN2at4cuda4prodERKNS_6TensorElbSt8optionalIN3c1010ScalarTypeEE",
                 "at::cuda::prod(at::Tensor const&, long, bool, std::optional<c10::ScalarType>)")
KJIT_CUDA_KERNEL(argmax, argmax, "_ZN2at4cuda6argmaxERKNS_6TensorESt8optionalIlEb",
                 "at::cuda::argmax(at::Tensor const&, std::optional<long>, bool)")
KJIT_CUDA_KERNEL(argmin, argmin, "_ZN2at4cuda6argminERKNS_6TensorESt8optionalIlEb",
                 "at::cuda::argmin(at::Tensor const&, std::optional<long>, bool)")
KJIT_CUDA_KERNEL(_conv_depthwise2d, _conv_depthwise2d_symint,
                 "_ZN2at4cuda24_conv_depthwise2d_symintERKNS_6TensorES3_N3c108ArrayRefINS4_6SymIntEEERKSt8optionalIS1_"
                 "ES7_S7_S7_",
                 "at::cuda::_conv_depthwise2d_symint(at::Tensor const&, at::Tensor const&, "
                 "c10::ArrayRef<c10::SymInt>, std::optional<at::Tensor> const&, c10::ArrayRef<c10::SymInt>, "
                 "c10::ArrayRef<c10::SymInt>, c10::ArrayRef<c10::SymInt>)")
KJIT_CUDA_KERNEL(cudnn_convolution, cudnn_convolution_symint,
                 "_ZN2at4cuda24cudnn_convolution_symintERKNS_6TensorES3_N3c108ArrayRefINS4_6SymIntEEES7_S7_S6_bbb",
                 "at::cuda::cudnn_convolution_symint(at::Tensor const&, at::Tensor const&, "
                 "c10::ArrayRef<c10::SymInt>, c10::ArrayRef<c10::SymInt>, c10::ArrayRef<c10::SymInt>, c10::SymInt, "
                 "bool, bool, bool)")
KJIT_CUDA_KERNEL(mm, mm, "_ZN2at4cuda2mmERKNS_6TensorES3_", "at::cuda::mm(at::Tensor const&, at::Tensor const&)")
KJIT_CUDA_KERNEL(bmm, bmm, "_ZN2at4cuda3bmmERKNS_6TensorES3_", "at::cuda::bmm(at::Tensor const&, at::Tensor const&)")

#undef KJIT_CUDA_KERNEL

}  // namespace kjit::shim
