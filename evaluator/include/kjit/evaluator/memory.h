// How much GPU memory evaluating a key takes, and whether a GPU has it.
//
// The evaluator holds one input set at a time (evaluator.h): a set's tensors
// are freed before the next set is built, and the worker returns its cached
// blocks to the driver after each job. So what a key needs is the peak of one
// set's working set, whatever the number of sets, computed here from the key
// before any device memory is touched:
//
//   building the inputs   I + V
//   the reference         I + 2 O          (the first set's two calls: the outputs' layouts, the time)
//   the candidate's runs  2 I + 2 O + W    (a pristine copy of the inputs to catch writes into
//                                           them; the candidate's guarded outputs; a copy of its
//                                           first run's; PyTorch's outputs are made after these runs)
//   timing                I + 3 O + W      (the guarded outputs; two reference calls' outputs, held
//                                           until they are scrubbed outside the timed events)
//   judging the outputs   I + k O + C + F + W
//
// where I is the inputs' storage, O the outputs', V the temporaries of drawing
// values and C those of comparing outputs (both a piece at a time, so bounded
// whatever the tensors' size), W the candidate's workspace, and F the float64
// second chance of a float output that fails assert_close (CompareAccuracy:
// the op run again on float64 copies of the float inputs, whose float64 outputs
// are kept, twice for sums of products: compare.h's magnitudes) where the op has float outputs and is not compared bitwise. k is 3
// for ops declared nondeterministic (both runs' outputs are judged), else 2
// (the runs were found bitwise equal, so one is judged).
//
// The outputs' sizes come from running the op on the meta device (tensors with
// sizes and no memory), which nearly every aten op supports; where it does
// not, they are guessed as large as the inputs (outputs_known false), and the
// evaluator checks again once the first set has shown them.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/function_schema.h>

#include <cstdint>
#include <string>
#include <vector>

#include "kjit/evaluator/chain.h"
#include "kjit/policy/op_traits.h"
#include "kjit/runtime/op_key.h"
#include "kjit/runtime/status.h"

namespace kjit::eval {

struct WorkingSet {
  uint64_t inputs = 0;             // I: the key's input tensors' storage
  uint64_t outputs = 0;            // O: the op's outputs, as PyTorch allocates them
  bool outputs_known = false;      // O from a meta-device call; false: guessed as I
  uint64_t value_temporaries = 0;  // V
  uint64_t comparison_temporaries = 0;  // C; 0 when the outputs are compared bitwise only
  // F = float64_inputs + float64_outputs, or 0 where no float64 reference is ever made (compared bitwise,
  // or no float output).
  bool float64_reference = false;
  uint64_t float64_inputs = 0;     // float64 copies of the float input tensors
  uint64_t float64_outputs = 0;    // the op's outputs on them
  // 2 for sum_of_products ops, whose magnitudes (the op on the inputs' absolute values, compare.h) are kept
  // beside the float64 outputs: F = float64_inputs + 2 x float64_outputs.
  int float64_output_copies = 1;
  uint64_t workspace = 0;          // W: a candidate's workspace and its guard bytes
  bool nondeterministic = false;   // k = 3
  // Peak() of the above.
  uint64_t Peak() const;
  // "56.0 GiB at the peak (inputs 8.0 GiB, outputs 8.0 GiB, float64 32.0 GiB, ...)".
  std::string ToString() const;
};

// The working set of one input set of `call` (run by `op`, of `schema`: an op's callBoxed, or a chain's
// BoxedOp, chain.h), without a candidate's workspace. `bitwise`: every output is compared
// bitwise (no float64 second chance). Needs no GPU: outputs are learnt on the
// meta device. Errors only where the key's own arguments are invalid.
Result<WorkingSet> EstimateWorkingSet(const BoxedCall& op, const c10::FunctionSchema& schema,
                                      const OpCall& call, const policy::OpTraits& traits, bool bitwise);

// The working set once PyTorch's `outputs` for a set are known (where
// EstimateWorkingSet had to guess them): O, C and the float64 outputs from them.
void UpdateOutputs(WorkingSet& set, const std::vector<at::Tensor>& outputs);

// Where a job stands against the memory it may use.
enum class MemoryFit {
  kFits,
  kNotNow,  // more than the cap allows now, but it would fit this GPU: wait and retry
  kUnfit,   // more than kUsableDeviceFraction of this GPU's memory: it never fits here
};

// A working set above this fraction of a GPU's total memory never fits it: the
// CUDA context, PyTorch's allocator rounding and the ops' own scratch need the rest.
inline constexpr double kUsableDeviceFraction = 0.9;

struct MemoryJudgement {
  MemoryFit fit = MemoryFit::kFits;
  std::string reason;  // empty when it fits; kUnfit's starts "unfit: "
};

// Judges `set` on a GPU of `device_total` bytes (0: unknown, never unfit) on
// which the worker already holds `resident` bytes outside any job (the L2
// flush buffer), under `memory_cap` (kjitd's share of the free memory it read
// before the job, which already leaves out what the worker holds; 0: no cap).
MemoryJudgement JudgeMemory(const WorkingSet& set, uint64_t resident, uint64_t memory_cap, uint64_t device_total);

// "8.0 GiB", "96 MiB".
std::string FormatBytes(uint64_t bytes);

}  // namespace kjit::eval
