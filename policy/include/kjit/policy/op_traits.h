// What the evaluator must know about an op beyond its schema: which argument
// values are valid, whether special floating-point values are meaningful, how
// results are compared, and how many bytes and FLOPs its floor is made of.
//
// Op families (policy/) declare traits for the ops they serve; any aten op
// without a declaration gets DefaultOpTraits(), which is right for ops whose
// tensor arguments may hold any value.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "kjit/runtime/op_key.h"

namespace kjit::policy {

// Integer tensor arguments with a restricted domain (class indices, gather
// indices, masks) hold values in [low, high). `high` may refer to a size of
// another argument: if size_of_arg >= 0, high = sizes of that argument at dim
// size_of_dim (negative dims count from the end), or with size_of_dims > 1 the
// product of that many consecutive sizes from size_of_dim on (flat indices into
// a plane: {0, 0, arg, -2, 2} is [0, H x W) of a [..., H, W] argument).
struct IntDomain {
  int64_t low = 0;
  int64_t high = 2;
  int size_of_arg = -1;
  int size_of_dim = 0;
  int size_of_dims = 1;
};

// How candidate outputs are compared with the reference's.
enum class ComparePolicy {
  kClose,    // torch.testing.assert_close's rule and default tolerances per dtype
  kBitwise,  // every byte equal
};

// An input argument that only another op makes as a program would have it: the evaluator makes it by calling
// `op` (an aten op, "aten::max_pool3d_with_indices") boxed on the call's own arguments `args` (indices into the
// call, in the op's order) and taking its output `output`, then copies it into the argument's tensor (the key's
// sizes, strides and alignment). For instance a max pooling backward's indices, which PyTorch's 3-D kernel adds
// at wherever they point: random ones would test what no program does.
struct DerivedInput {
  std::string op;
  std::vector<int> args;
  int output = 0;
};

struct OpTraits {
  // Per argument index of the (first) call.
  std::map<int, IntDomain> int_domains;
  std::map<int, DerivedInput> derived_inputs;  // made after the others, from them
  // NaN, +-Inf and -0.0 are meaningful inputs (false for ops whose PyTorch
  // kernel's result on them is unspecified).
  bool special_values = true;
  // NaN and -0.0 alone (no Inf) are meaningful inputs: fed where special_values is false or the dtype is in
  // no_special_inputs. True for ops whose result on an Inf depends on PyTorch's own order (a Welford merge,
  // a product that underflowed) while a NaN propagates the same in any order; false where PyTorch's result
  // on a NaN is unspecified too.
  bool nan_values = true;
  ComparePolicy compare = ComparePolicy::kClose;
  // Overrides of the assert_close tolerances, for ops whose reference itself
  // is only that accurate (long fp32 reductions in a different order).
  std::optional<double> atol;
  std::optional<double> rtol;
  // Per output dtype, instead of the above: for ops where one pair cannot fit
  // every dtype (softmax holds float16 to 1e-3 relative and float32 to 1e-5).
  struct Tolerance {
    double atol = 0;
    double rtol = 0;
  };
  std::map<DType, Tolerance> tolerance_by_dtype;
  // Input dtypes on which PyTorch's result for a kind of inputs depends on
  // PyTorch's own evaluation order, so that no kernel evaluating in another
  // order can match it: the evaluator feeds such keys normal values instead of
  // large ones, and no special-value set. For example a float16 cumsum of
  // values up to 2^14, whose partial sums overflow to Inf wherever PyTorch's
  // tree forms them (the evaluator's other sets still cover the dtype).
  std::set<DType> no_large_inputs;
  std::set<DType> no_special_inputs;
  // Results may differ bitwise between two runs on the same inputs (atomics).
  bool nondeterministic = false;
  // Each float output element is a sum of SummedTermsOf(key) products of the float inputs' elements (matrix
  // products). Any float32 order of those additions is as right as PyTorch's, and near cancellation none is
  // close to the output: the float64 second chance (the evaluator's compare.h) also allows the error any
  // float32 order may make, Higham's bound gamma_K * sum |a||b| (the op on the inputs' absolute values).
  bool sum_of_products = false;
  // FLOPs of one call, for the compute floor; 0 if the op is memory-bound.
  double flops = 0;
};

OpTraits DefaultOpTraits();

// The traits for an op ("aten::_softmax"): a declared one, else DefaultOpTraits().
// Thread-safe.
OpTraits TraitsFor(std::string_view op);
// FLOPs of one keyed call, for the compute floor: for matrix products (aten::mm, aten::bmm), whose work
// depends on the shapes, 2 x batch x M x N x K; otherwise the op's traits' `flops`.
double FlopsOf(const OpKey& key);
// Terms summed into each output of a keyed call of a sum_of_products op: K of a matrix product; 0 for other ops.
int64_t SummedTermsOf(const OpKey& key);
// Declares (or replaces) the traits of an op. Thread-safe.
void DeclareOpTraits(std::string op, OpTraits traits);

}  // namespace kjit::policy
