#include "kjit/evaluator/memory.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cstdio>
#include <vector>

#include "kjit/evaluator/compare.h"
#include "kjit/evaluator/inputs.h"

namespace kjit::eval {
namespace {

uint64_t StorageBytesOf(const at::Tensor& t) {
  return t.defined() && t.has_storage() ? static_cast<uint64_t>(t.storage().nbytes()) : 0;
}

// The op's outputs for `args` (meta tensors), or nothing where the op has no
// meta kernel or returns something other than tensors.
std::optional<std::vector<at::Tensor>> MetaOutputs(const BoxedCall& op, const std::vector<c10::IValue>& args) {
  try {
    std::vector<c10::IValue> stack(args.begin(), args.end());
    op(&stack);
    std::vector<at::Tensor> outs;
    for (const c10::IValue& v : stack) {
      if (v.isTensor()) {
        outs.push_back(v.toTensor());
      } else if (v.isTensorList()) {
        for (const at::Tensor& t : v.toTensorVector()) outs.push_back(t);
      } else {
        return std::nullopt;
      }
    }
    return outs;
  } catch (const std::exception&) {
    return std::nullopt;  // c10::NotImplementedError and friends: no meta kernel
  }
}

}  // namespace

uint64_t WorkingSet::Peak() const {
  const uint64_t judged_outputs = nondeterministic ? 3 : 2;
  const uint64_t float64 = float64_reference ? float64_inputs + float64_output_copies * float64_outputs : 0;
  return std::max({inputs + value_temporaries, inputs + 2 * outputs, 2 * inputs + 2 * outputs + workspace,
                   inputs + 3 * outputs + workspace,
                   inputs + judged_outputs * outputs + comparison_temporaries + float64 + workspace});
}

std::string WorkingSet::ToString() const {
  std::string s = FormatBytes(Peak()) + " at the peak (inputs " + FormatBytes(inputs) + ", outputs " +
                  FormatBytes(outputs) + (outputs_known ? "" : " guessed") + ", float64 reference " + FormatBytes(float64_reference ? float64_inputs + float64_output_copies * float64_outputs : 0) +
                  ", drawing values " + FormatBytes(value_temporaries) + ", comparing " +
                  FormatBytes(comparison_temporaries);
  if (workspace > 0) s += ", workspace " + FormatBytes(workspace);
  return s + ")";
}

Result<WorkingSet> EstimateWorkingSet(const BoxedCall& op, const c10::FunctionSchema& schema,
                                      const OpCall& call, const policy::OpTraits& traits, bool bitwise) {
  const c10::Device meta(c10::kMeta);
  KJIT_ASSIGN_OR_RETURN(std::vector<c10::IValue> args,
                        MakeArguments(schema, call, traits, meta, InputKind::kNormal, /*seed=*/0));
  WorkingSet w;
  w.nondeterministic = traits.nondeterministic;
  w.float64_output_copies = traits.sum_of_products ? 2 : 1;
  int64_t largest_input = 0;
  uint64_t float_inputs_as_float64 = 0;
  bool any_float_input = false;
  for (const at::Tensor& t : TensorsIn(args)) {
    w.inputs += StorageBytesOf(t);
    largest_input = std::max(largest_input, t.has_storage() ? static_cast<int64_t>(t.storage().nbytes()) /
                                                                  static_cast<int64_t>(t.element_size())
                                                            : int64_t{0});
    any_float_input |= at::isFloatingType(t.scalar_type());
  }
  for (const c10::IValue& v : args) {
    // The evaluator's float64 reference widens tensor arguments (not tensor lists) of a float dtype;
    // .to(kDouble) makes a dense copy of the view's elements.
    if (v.isTensor() && at::isFloatingType(v.toTensor().scalar_type())) {
      float_inputs_as_float64 += static_cast<uint64_t>(v.toTensor().numel()) * 8;
    }
  }
  w.value_temporaries = static_cast<uint64_t>(std::min(largest_input, kValuePieceElements) * kValueBytesPerElement);

  w.float64_inputs = float_inputs_as_float64;
  w.float64_reference = !bitwise && traits.compare != policy::ComparePolicy::kBitwise && any_float_input;
  std::optional<std::vector<at::Tensor>> outs = MetaOutputs(op, args);
  if (outs) {
    UpdateOutputs(w, *outs);
  } else {
    // A guess; the evaluator checks again once PyTorch has made them (UpdateOutputs).
    w.outputs = w.inputs;
    w.float64_outputs = float_inputs_as_float64;
    w.comparison_temporaries =
        static_cast<uint64_t>(std::min(largest_input, kComparePieceElements) * kCompareBytesPerElement);
  }
  if (w.float64_reference && outs) {
    // As the evaluator's float64 reference: tensor arguments of a float dtype in float64.
    std::vector<c10::IValue> wide;
    try {
      for (const c10::IValue& v : args) {
        const bool float_tensor =
            v.isTensor() && !IsWrappedNumber(v) && at::isFloatingType(v.toTensor().scalar_type());
        wide.push_back(float_tensor ? c10::IValue(v.toTensor().to(at::kDouble)) : v);
      }
    } catch (const std::exception&) {
      wide.clear();
    }
    if (auto outs64 = wide.empty() ? std::nullopt : MetaOutputs(op, wide)) {
      w.float64_outputs = 0;
      for (const at::Tensor& t : *outs64) w.float64_outputs += StorageBytesOf(t);
    }
  }
  return w;
}

void UpdateOutputs(WorkingSet& w, const std::vector<at::Tensor>& outputs) {
  w.outputs_known = true;
  w.outputs = 0;
  w.float64_outputs = 0;
  int64_t largest = 0;
  bool any_float = false;
  for (const at::Tensor& t : outputs) {
    w.outputs += StorageBytesOf(t);
    largest = std::max(largest, t.numel());
    const bool is_float = at::isFloatingType(t.scalar_type());
    any_float |= is_float;
    // Where the float64 call's outputs are not known: float outputs in float64, the rest as they are.
    w.float64_outputs += is_float ? static_cast<uint64_t>(t.numel()) * 8 : StorageBytesOf(t);
  }
  if (!any_float) w.float64_reference = false;  // CompareAccuracy judges float outputs only
  w.comparison_temporaries = static_cast<uint64_t>(std::min(largest, kComparePieceElements) * kCompareBytesPerElement);
}

MemoryJudgement JudgeMemory(const WorkingSet& set, uint64_t resident, uint64_t memory_cap, uint64_t device_total) {
  MemoryJudgement j;
  const uint64_t needed = set.Peak();
  const auto usable = static_cast<uint64_t>(kUsableDeviceFraction * static_cast<double>(device_total));
  if (device_total > 0 && needed + resident > usable) {
    j.fit = MemoryFit::kUnfit;
    j.reason = "unfit: one input set needs " + set.ToString() + (resident > 0 ? " beside the evaluator's " + FormatBytes(resident) : "") +
               ", and this GPU has " + FormatBytes(device_total) + " in all, of which kjit uses at most " +
               std::to_string(static_cast<int>(kUsableDeviceFraction * 100 + 0.5)) + "% (" + FormatBytes(usable) + ")";
    return j;
  }
  if (memory_cap > 0 && needed > memory_cap) {
    j.fit = MemoryFit::kNotNow;
    j.reason = "the inputs need more GPU memory than the cap allows now: " + set.ToString() + ", cap " +
               FormatBytes(memory_cap);
  }
  return j;
}

std::string FormatBytes(uint64_t bytes) {
  char buf[64];
  const double gib = static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0);
  if (gib >= 1) {
    std::snprintf(buf, sizeof buf, "%.1f GiB", gib);
  } else {
    std::snprintf(buf, sizeof buf, "%.0f MiB", static_cast<double>(bytes) / (1024.0 * 1024.0));
  }
  return buf;
}

}  // namespace kjit::eval
