#include "kjit/evaluator/chain.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/Tensor.h>

#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <variant>

#include "kjit/evaluator/inputs.h"

namespace kjit::eval {
namespace {

// Where a chain call's argument comes from: the boxed op's external argument `external`, or an earlier call's
// output (`ref`).
struct Source {
  bool is_ref = false;
  size_t external = 0;
  ValueRef ref;
};

struct Step {
  std::optional<c10::OperatorHandle> handle;  // none for kjit::input: its output is its one argument
  std::vector<Source> sources;
};

struct ChainPlan {
  std::vector<Step> steps;
  std::vector<uint32_t> live;  // increasing call indices
};

void CollectOutputs(const std::vector<c10::IValue>& stack, std::vector<at::Tensor>& outs) {
  for (const c10::IValue& v : stack) {
    if (!v.isTensor()) throw std::runtime_error("a chain call returned a " + v.tagKind() + ", not a tensor");
    outs.push_back(v.toTensor());
  }
}

void RunChain(const ChainPlan& plan, std::vector<c10::IValue>* stack) {
  std::vector<std::vector<at::Tensor>> results(plan.steps.size());
  for (size_t i = 0; i < plan.steps.size(); ++i) {
    const Step& step = plan.steps[i];
    std::vector<c10::IValue> call_stack;
    call_stack.reserve(step.sources.size());
    for (const Source& s : step.sources) {
      if (s.is_ref) {
        call_stack.emplace_back(results[s.ref.call][s.ref.output]);
      } else {
        call_stack.push_back((*stack)[s.external]);
      }
    }
    if (!step.handle) {
      results[i].push_back(call_stack.at(0).toTensor());
      continue;
    }
    step.handle->callBoxed(&call_stack);
    CollectOutputs(call_stack, results[i]);
  }
  stack->clear();
  for (uint32_t c : plan.live) {
    for (const at::Tensor& t : results[c]) stack->emplace_back(t);
  }
}

std::string CallName(const OpCall& call) { return call.op + (call.overload.empty() ? "" : "." + call.overload); }

}  // namespace

bool IsWrappedNumber(const c10::IValue& v) {
  return v.isTensor() && v.toTensor().defined() && v.toTensor().unsafeGetTensorImpl()->is_wrapped_number();
}

Result<BoxedOp> BoxedOpOf(const OpKey& key) {
  KJIT_ASSIGN_OR_RETURN(ChainLive chain, ChainLiveOf(key));
  const size_t real_calls = chain.calls;
  const bool has_live = real_calls < key.calls.size();
  std::vector<uint32_t> live = std::move(chain.live);
  if (real_calls == 1 && !has_live) {
    const OpCall& call = key.calls[0];
    KJIT_ASSIGN_OR_RETURN(c10::FunctionSchema schema, FindSchema(call));
    auto handle = c10::Dispatcher::singleton().findSchema({call.op, call.overload});
    if (!handle) return NotFound("no operator " + CallName(call));
    BoxedOp op{std::move(schema), call, [h = *handle](std::vector<c10::IValue>* s) { h.callBoxed(s); }, false,
               std::vector<uint32_t>(call.args.size(), 0)};
    return op;
  }
  auto plan = std::make_shared<ChainPlan>();
  plan->live = live;
  BoxedOp op{c10::FunctionSchema(std::string(kChainOp), "", {}, {}), OpCall{std::string(kChainOp), "", {}}, nullptr,
             true, {}};
  std::vector<c10::Argument> arguments, returns;
  std::vector<size_t> outputs_of(real_calls, 0);
  for (size_t i = 0; i < real_calls; ++i) {
    const OpCall& call = key.calls[i];
    if (call.op == kChainInputOp) {  // (its rules checked by ChainLiveOf)
      outputs_of[i] = 1;
      plan->steps.push_back(Step{std::nullopt, {Source{false, op.call.args.size(), {}}}});
      op.call.args.push_back(call.args[0]);
      op.call_of_argument.push_back(static_cast<uint32_t>(i));
      arguments.emplace_back("c" + std::to_string(i) + "_input", c10::TensorType::get());
      continue;
    }
    auto handle = c10::Dispatcher::singleton().findSchema({call.op, call.overload});
    if (!handle) return NotFound("no operator " + CallName(call) + " (call " + std::to_string(i) + " of the chain)");
    const c10::FunctionSchema& schema = handle->schema();
    if (schema.is_mutable()) return InvalidArgument(CallName(call) + " writes to its arguments; a chain may not");
    for (const c10::Argument& r : schema.returns()) {
      if (r.type()->kind() != c10::TypeKind::TensorType) {
        return InvalidArgument(CallName(call) + " returns " + r.type()->str() + "; a chain's calls return tensors");
      }
    }
    outputs_of[i] = schema.returns().size();
    if (schema.arguments().size() != call.args.size()) {
      return InvalidArgument(CallName(call) + " takes " + std::to_string(schema.arguments().size()) +
                             " arguments, call " + std::to_string(i) + " has " + std::to_string(call.args.size()));
    }
    Step step{*handle, {}};
    for (size_t a = 0; a < call.args.size(); ++a) {
      const c10::Argument& formal = schema.arguments()[a];
      if (const auto* ref = std::get_if<ValueRef>(&call.args[a])) {
        if (ref->call >= i || ref->output >= outputs_of[ref->call]) {
          return InvalidArgument("call " + std::to_string(i) + " argument " + std::to_string(a) +
                                 " refers to output " + std::to_string(ref->output) + " of call " +
                                 std::to_string(ref->call) + ", which is not an earlier call's");
        }
        step.sources.push_back(Source{true, 0, *ref});
        continue;
      }
      step.sources.push_back(Source{false, op.call.args.size(), {}});
      op.call.args.push_back(call.args[a]);
      op.call_of_argument.push_back(static_cast<uint32_t>(i));
      // No default values: the key gives every argument (and a schema allows no positional one after them).
      arguments.emplace_back("c" + std::to_string(i) + "_" + formal.name(), formal.type(), formal.real_type(),
                             formal.N());
    }
    plan->steps.push_back(std::move(step));
  }
  for (uint32_t c : live) {
    for (size_t r = 0; r < outputs_of[c]; ++r) {
      returns.emplace_back("c" + std::to_string(c) + "_out" + std::to_string(r), c10::TensorType::get());
    }
  }
  try {
    op.schema = c10::FunctionSchema(std::string(kChainOp), "", std::move(arguments), std::move(returns));
  } catch (const c10::Error& e) {
    return Internal(std::string("the chain's schema: ") + e.what_without_backtrace());
  }
  op.run = [plan](std::vector<c10::IValue>* stack) { RunChain(*plan, stack); };
  return op;
}

}  // namespace kjit::eval
