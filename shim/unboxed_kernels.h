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

#include <ATen/CUDAFunctions.h>
#include <ATen/Operators.h>
#include <ATen/core/ATen_fwd.h>

#include <string_view>
#include <tuple>
#include <type_traits>

#include "shim_core.h"

namespace kjit::shim {

// at::_ops::<op> of kInterceptedOps, in its order (the registry's, kjit/intercepted_ops.inc).
template <class... Ts>
struct TypeList {};
template <class... Ts>
std::tuple<Ts...> TupleAfterVoid(TypeList<void, Ts...>);  // never called: its type is the list without the void
using InterceptedOpTypes = decltype(TupleAfterVoid(TypeList<void
#define KJIT_INTERCEPT(FAMILY, OP, NAME, FILTER, ALL_NUMERICS, FN, SYMBOL, SIGNATURE) , at::_ops::OP
#include "kjit/intercepted_ops.inc"
#undef KJIT_INTERCEPT
                                                                    >{}));
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

#define KJIT_INTERCEPT(FAMILY, OP, NAME, FILTER, ALL_NUMERICS, FN, SYMBOL, SIGNATURE) \
  KJIT_CUDA_KERNEL(OP, FN, SYMBOL, SIGNATURE)
#include "kjit/intercepted_ops.inc"
#undef KJIT_INTERCEPT
#undef KJIT_CUDA_KERNEL

}  // namespace kjit::shim
