// The elementwise ops of fused chains (keys of several calls, op_key.h), as the chain families read them: each
// call parsed into a Node (which op, its operands, the dtype eager rounds its result to) and written as one float
// expression of CUDA with eager PyTorch 2.11's values. Shared by elementwise_chain (a flat stream) and row_chain
// (a row reduction with elementwise ops around it); the ops and the semantics followed are listed in
// elementwise_chain/elementwise_chain.h. Internal to kjit_policy.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "kjit/runtime/op_key.h"
#include "kjit/runtime/status.h"

namespace kjit::policy::chain {

// The name a chain's traits are declared under (evaluator/chain.h kChainOp).
inline constexpr const char* kChainOp = "kjit::chain";

// Loads and stores of VEC elements of any float type as floats (load_any, store_any, load_one, store_one), an
// intermediate rounded to its dtype (as_dtype<T>), and eager's arithmetic with no contraction across ops (op_mul,
// op_add, op_sub, op_div, op_axpy, op_sigmoid): src/cuda/chain.cuh. Written after codegen::kElementAccess; needs
// VEC and HINT defined before it.
extern const char* const kChainAccess;

enum class Op { kInput, kMul, kAdd, kSub, kDiv, kPow2, kPow3, kSqrt, kRsqrt, kReciprocal, kTanh, kExp, kNeg, kAbs, kSigmoid, kCast };

struct Operand {
  enum Kind { kInput, kValue, kScalar } kind = kInput;
  int64_t index = 0;  // kInput: the external tensor's parameter index; kValue: the call
  double scalar = 0;  // kScalar: the wrapped number
};

struct Node {
  Op op = Op::kMul;
  std::vector<Operand> in;
  double alpha = 1;  // add, sub
  DType out = DType::kFloat32;
};

// float32, float16 and bfloat16: the dtypes the chain families compute.
bool IsServedFloat(DType t);
// The short name of an op in a problem's description ("mul", "pow2", "cast").
const char* Short(Op op);
// A Double or Int argument's value.
std::optional<double> NumberOf(const Arg& a);
// A float constant by its bits: exactly the float PyTorch converts the double to.
std::string FloatLiteral(float f);

// How a family resolves a call's tensor argument: appends the operand to `node.in` (an external tensor, an
// earlier call's output, or, where `scalar_allowed`, a wrapped number), or says why it declines the argument.
using OperandOf = std::function<Status(const Arg& arg, bool scalar_allowed, Node& node)>;
// The dtype of an operand already resolved (none for a wrapped number).
using DTypeOf = std::function<std::optional<DType>(const Operand& operand)>;

// The common part of an OperandOf: appends to `node.in` an earlier call's output (a ValueRef to a call before
// `call`, its only output) or, where `scalar_allowed`, a wrapped number; a tensor goes to `tensor`, the family's own
// rules (its shapes, dtypes and layouts); anything else is declined.
Status ResolveOperand(const Arg& a, size_t call, bool scalar_allowed, Node& node,
                      const std::function<Status(const TensorDesc&, Node&)>& tensor);
// An operand's dtype: an external tensor's (`inputs`, by parameter index), an earlier node's, none for a number.
std::optional<DType> DTypeOfOperand(const Operand& o, const std::vector<DType>& inputs, const std::vector<Node>& nodes);

// Call `c` (its name `name`, op.overload) as an elementwise node: kjit::input, mul/add/sub/div.Tensor,
// pow.Tensor_Scalar of exponent 2, 3, 0.5, -0.5 or -1, the unary ops, or a _to_copy dtype cast. kNotFound where
// the op is none of these (a family may read it as something else), kInvalidArgument where it is one of them
// with arguments the families decline.
Result<Node> ParseElementwise(const OpCall& c, const std::string& name, const OperandOf& operand,
                              const DTypeOf& dtype_of);

// The node's value for one element, in float, rounded to its dtype; `text` writes an operand (an external
// tensor's element, an earlier node's value, a literal).
std::string Expression(const Node& node, const std::function<std::string(const Operand&)>& text);

}  // namespace kjit::policy::chain
