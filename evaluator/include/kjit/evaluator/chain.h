// Keys of several calls (fusion graphs, op_key.h) as one boxed op, so that the evaluator's single-call machinery
// (inputs, the kernel's parameters, the working set, PyTorch's reference and baseline) serves them unchanged.
//
// A chain's calls run in order, each through the dispatcher as eager PyTorch runs it; an argument that is a
// ValueRef takes an earlier call's output. The chain's *external* arguments are every argument that is not a
// ValueRef, in call order, then argument order: they are the boxed op's arguments, each typed by the schema
// argument it fills (named "c<call>_<name>"). The boxed op's outputs are those of the calls the key names live:
// a trailing pseudo-call kjit::live(IntList) lists, in increasing order, the calls whose outputs a fused kernel
// writes (every output of each, in order; shim/FUSION.md "Liveness"); without one, the last call's.
//
// One tensor used by several calls (x in minGPT's GELU: by mul, pow and add) is a leading pseudo-call
// kjit::input(Tensor) that the calls refer to by ValueRef: its output is its argument, one external argument, so
// that a fused kernel reads it once. kjit::live may not name it (it is no result).
//
// A Python scalar operand (`0.5 * x`) reaches an op's Tensor argument as a wrapped-number tensor, and a key holds
// its value (a Double, Int or Bool), so that every constant has its own key. MakeArguments (inputs.h) gives such
// an argument as the 0-d CPU wrapped-number tensor PyTorch makes of it, and a kernel's parameters leave it out
// (PassedToKernel): its value is in the kernel's source.
#pragma once

#include <ATen/core/function_schema.h>
#include <ATen/core/ivalue.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string_view>
#include <vector>

#include "kjit/runtime/op_key.h"
#include "kjit/runtime/status.h"

namespace kjit::eval {

// (The pseudo-calls kjit::live and kjit::input, and their rules: kjit/runtime/op_key.h, ChainLiveOf.)
// The op name a chain's traits are declared and looked up under (its family's traits(kChainOp)).
inline constexpr std::string_view kChainOp = "kjit::chain";

// Runs an op, or a chain, on a stack that holds its arguments, leaving its outputs there (as
// c10::OperatorHandle::callBoxed does).
using BoxedCall = std::function<void(std::vector<c10::IValue>* stack)>;

struct BoxedOp {
  c10::FunctionSchema schema;  // one call: the op's own; a chain: its external arguments, its live outputs
  OpCall call;                 // one call: the key's; a chain: "kjit::chain" with the external arguments
  BoxedCall run;
  bool chain = false;
  // Per external argument: the call it belongs to (0 for a single call).
  std::vector<uint32_t> call_of_argument;
};

// The boxed op of a key of one or several calls. kInvalidArgument where a chain is malformed (a ValueRef forward
// or to an output the call does not have, kjit::live not last, out of order or out of range, a call that writes
// its arguments or returns something other than tensors); kNotFound for an op not registered.
Result<BoxedOp> BoxedOpOf(const OpKey& key);

// Whether a boxed argument reaches a kernel as a pointer parameter (kernel ABI v2): tensors, except wrapped
// numbers, whose value the kernel's source holds.
bool IsWrappedNumber(const c10::IValue& v);

}  // namespace kjit::eval
