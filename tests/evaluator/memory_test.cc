// The evaluator's memory estimate and its verdicts, without a GPU: outputs'
// sizes come from the meta device, so keys of many GB are estimated here too.
#include "kjit/evaluator/memory.h"

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kjit/evaluator/compare.h"
#include "kjit/evaluator/inputs.h"

namespace kjit::eval {
namespace {

constexpr uint64_t kGiB = uint64_t{1} << 30;
constexpr uint64_t kMiB = uint64_t{1} << 20;

bool Has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

WorkingSet Estimate(const OpCall& call, bool bitwise = false, const OpTraits& traits = DefaultOpTraits()) {
  auto schema = FindSchema(call);
  EXPECT_TRUE(schema.ok()) << schema.status().ToString();
  auto op = c10::Dispatcher::singleton().findSchemaOrThrow(call.op.c_str(), call.overload.c_str());
  auto w = EstimateWorkingSet([op](std::vector<c10::IValue>* s) { op.callBoxed(s); }, *schema, call, traits, bitwise);
  EXPECT_TRUE(w.ok()) << w.status().ToString();
  return w.ok() ? *w : WorkingSet{};
}

// The bytes one storage of `desc` takes.
uint64_t StorageOf(DType dtype, int64_t elements) { return static_cast<uint64_t>(elements) * DTypeSize(dtype); }

// Softmax over rows of an 8 GiB float32 matrix: outputs as large as the inputs.
TEST(WorkingSet, SoftmaxOfEightGiB) {
  const OpCall call{"aten::_softmax", "", {TensorDesc::Contiguous(DType::kFloat32, {1 << 16, 1 << 15}), int64_t{-1}, false}};
  const WorkingSet w = Estimate(call);
  EXPECT_EQ(w.inputs, 8 * kGiB);
  EXPECT_TRUE(w.outputs_known);
  EXPECT_EQ(w.outputs, 8 * kGiB);
  EXPECT_TRUE(w.float64_reference);
  EXPECT_EQ(w.float64_inputs, 16 * kGiB);
  EXPECT_EQ(w.float64_outputs, 16 * kGiB);
  EXPECT_EQ(w.comparison_temporaries, static_cast<uint64_t>(kComparePieceElements * kCompareBytesPerElement));
  EXPECT_EQ(w.value_temporaries, static_cast<uint64_t>(kValuePieceElements * kValueBytesPerElement));
  EXPECT_LT(w.comparison_temporaries, kGiB);  // a piece at a time, not float64 copies of 8 GiB
  // Judging with the float64 reference is the peak: inputs, PyTorch's and the candidate's outputs,
  // and the op again in float64. Not 12 x the inputs (96 GiB) as the estimate once assumed.
  EXPECT_EQ(w.Peak(), w.inputs + 2 * w.outputs + w.comparison_temporaries + 32 * kGiB);
  EXPECT_LT(w.Peak(), 58 * kGiB);

  // Compared bitwise (no float64 second chance): inputs, their pristine copy while the candidate
  // runs, the candidate's outputs and one copy of them (PyTorch's are made after the runs); as much
  // while timing: inputs, the candidate's outputs and two reference calls' outputs.
  const WorkingSet bitwise = Estimate(call, /*bitwise=*/true);
  EXPECT_FALSE(bitwise.float64_reference);
  EXPECT_EQ(bitwise.Peak(), 2 * bitwise.inputs + 2 * bitwise.outputs);
  EXPECT_EQ(bitwise.Peak(), bitwise.inputs + 3 * bitwise.outputs);
  EXPECT_EQ(bitwise.Peak(), 32 * kGiB);
  EXPECT_TRUE(Has(bitwise.ToString(), "32.0 GiB at the peak (inputs 8.0 GiB, outputs 8.0 GiB,")) << bitwise.ToString();
}

// A mean over the middle dim of 8 GiB: small outputs, so the inputs, their copy
// and the float64 reference's inputs are what count.
TEST(WorkingSet, MeanOverAMiddleDim) {
  const TensorDesc x = TensorDesc::Contiguous(DType::kFloat32, {1 << 10, 1 << 11, 1 << 10});
  const WorkingSet w = Estimate({"aten::mean", "dim", {x, IntList{1}, false, NoneArg{}}});
  EXPECT_EQ(w.inputs, 8 * kGiB);
  EXPECT_EQ(w.outputs, 4 * kMiB);
  EXPECT_EQ(w.float64_inputs, 16 * kGiB);
  EXPECT_EQ(w.float64_outputs, 8 * kMiB);
  EXPECT_EQ(w.Peak(), w.inputs + 2 * w.outputs + w.comparison_temporaries + w.float64_inputs + w.float64_outputs);
  EXPECT_LT(w.Peak(), 25 * kGiB);
}

// A matrix product's float64 second chance keeps the magnitudes (the product of the absolute values,
// compare.h) beside the float64 outputs: counted twice.
TEST(WorkingSet, SumsOfProductsKeepTheirMagnitudes) {
  const TensorDesc a = TensorDesc::Contiguous(DType::kBFloat16, {1 << 14, 64});
  const TensorDesc b = TensorDesc::Contiguous(DType::kBFloat16, {64, 1 << 14});
  OpTraits traits = DefaultOpTraits();
  const WorkingSet plain = Estimate({"aten::mm", "", {a, b}}, false, traits);
  traits.sum_of_products = true;
  const WorkingSet w = Estimate({"aten::mm", "", {a, b}}, false, traits);
  EXPECT_EQ(w.outputs, 512 * kMiB);
  EXPECT_EQ(w.float64_outputs, 2 * kGiB);
  EXPECT_EQ(w.float64_output_copies, 2);
  EXPECT_EQ(plain.float64_output_copies, 1);
  EXPECT_EQ(w.Peak(), plain.Peak() + w.float64_outputs);
  EXPECT_TRUE(Has(w.ToString(), "float64 reference 4.0 GiB")) << w.ToString();
}

// argmax's outputs are integers: no float64 reference is ever made for them.
TEST(WorkingSet, ArgmaxHasNoFloat64Reference) {
  const TensorDesc x = TensorDesc::Contiguous(DType::kFloat32, {1 << 10, 1 << 11, 1 << 10});
  const WorkingSet w = Estimate({"aten::argmax", "", {x, int64_t{1}, false}});
  EXPECT_EQ(w.outputs, StorageOf(DType::kInt64, 1 << 20));
  EXPECT_FALSE(w.float64_reference);
  EXPECT_EQ(w.Peak(), 2 * w.inputs + 2 * w.outputs);
}

// cumsum over a matrix of 2^30 float32 elements.
TEST(WorkingSet, CumsumOfFourGiB) {
  const TensorDesc x = TensorDesc::Contiguous(DType::kFloat32, {1 << 15, 1 << 15});
  const WorkingSet w = Estimate({"aten::cumsum", "", {x, int64_t{1}, NoneArg{}}});
  EXPECT_EQ(w.inputs, 4 * kGiB);
  EXPECT_EQ(w.outputs, 4 * kGiB);
  // The float64 reference (inputs and outputs in float64, 16 GiB) beside the set dominates.
  EXPECT_EQ(w.Peak(), w.inputs + 2 * w.outputs + w.comparison_temporaries + 16 * kGiB);
  EXPECT_LT(w.Peak(), 8 * w.inputs);
}

// A layout with holes and an offset: the inputs are the storage MakeTensor allocates, not the view's elements.
TEST(WorkingSet, InputsAreTheirStorage) {
  TensorDesc x;
  x.dtype = DType::kFloat16;
  x.sizes = {4, 5};
  x.strides = {1, 8};
  x.storage_offset = 3;
  x.alignment = 2;
  const WorkingSet w = Estimate({"aten::_softmax", "", {x, int64_t{-1}, false}});
  EXPECT_EQ(w.inputs, StorageOf(DType::kFloat16, 3 + 3 + 4 * 8 + 1));
  EXPECT_EQ(w.float64_inputs, uint64_t{20 * 8});  // widened copies are dense
}

TEST(WorkingSet, NondeterministicOpsJudgeBothRuns) {
  const OpCall call{"aten::_softmax", "", {TensorDesc::Contiguous(DType::kFloat32, {1 << 10, 1 << 10}), int64_t{-1}, false}};
  OpTraits traits = DefaultOpTraits();
  traits.nondeterministic = true;
  const WorkingSet w = Estimate(call, false, traits);
  EXPECT_EQ(w.Peak(), w.inputs + 3 * w.outputs + w.comparison_temporaries + w.float64_inputs + w.float64_outputs);
}

// Where the outputs had to be guessed, PyTorch's own outputs replace the guess.
TEST(WorkingSet, OutputsLearntFromAReference) {
  WorkingSet w;
  w.inputs = 8 * kGiB;
  w.outputs = 8 * kGiB;  // guessed
  w.float64_reference = true;
  w.float64_inputs = 16 * kGiB;
  w.float64_outputs = 16 * kGiB;
  UpdateOutputs(w, {at::empty({1024}, at::kFloat), at::empty({1024}, at::kLong)});
  EXPECT_TRUE(w.outputs_known);
  EXPECT_EQ(w.outputs, uint64_t{1024 * 4 + 1024 * 8});
  EXPECT_EQ(w.float64_outputs, uint64_t{1024 * 8 + 1024 * 8});
  EXPECT_EQ(w.comparison_temporaries, static_cast<uint64_t>(1024 * kCompareBytesPerElement));
  UpdateOutputs(w, {at::empty({16}, at::kLong)});
  EXPECT_FALSE(w.float64_reference);  // no float output: CompareAccuracy is never asked
}

TEST(JudgeMemory, FitsNotNowOrUnfit) {
  WorkingSet w;
  w.inputs = 30 * kGiB;  // peak 60 GiB: inputs and their pristine copy
  w.outputs_known = true;
  ASSERT_EQ(w.Peak(), 60 * kGiB);
  const uint64_t h200 = 141 * kGiB;

  EXPECT_EQ(JudgeMemory(w, 0, 100 * kGiB, h200).fit, MemoryFit::kFits);
  EXPECT_EQ(JudgeMemory(w, 0, 0, h200).fit, MemoryFit::kFits);  // no cap
  EXPECT_TRUE(JudgeMemory(w, 0, 100 * kGiB, h200).reason.empty());

  // Over the cap kjitd allows now, but well within the GPU: wait and retry.
  const MemoryJudgement later = JudgeMemory(w, 0, 50 * kGiB, h200);
  EXPECT_EQ(later.fit, MemoryFit::kNotNow);
  EXPECT_TRUE(Has(later.reason, "the inputs need more GPU memory than the cap allows now")) << later.reason;
  EXPECT_TRUE(Has(later.reason, "60.0 GiB")) << later.reason;
  EXPECT_TRUE(Has(later.reason, "cap 50.0 GiB")) << later.reason;

  // More than 90% of an 80 GiB GPU: never, whatever the cap says.
  const uint64_t h100 = 80 * kGiB;
  for (uint64_t cap : {uint64_t{0}, 50 * kGiB, 200 * kGiB}) {
    const MemoryJudgement never = JudgeMemory(w, 0, cap, h100 / 80 * 66);
    EXPECT_EQ(never.fit, MemoryFit::kUnfit);
    EXPECT_EQ(never.reason.rfind("unfit: ", 0), 0u) << never.reason;
    EXPECT_TRUE(Has(never.reason, "60.0 GiB")) << never.reason;  // the bytes needed
    EXPECT_TRUE(Has(never.reason, "66.0 GiB in all")) << never.reason;  // the GPU's total
  }
  // Exactly at 90% still fits; the evaluator's own resident memory counts towards it.
  EXPECT_EQ(JudgeMemory(w, 0, 0, 60 * kGiB * 10 / 9 + 16).fit, MemoryFit::kFits);
  EXPECT_EQ(JudgeMemory(w, 256 * kMiB, 0, 60 * kGiB * 10 / 9 + 16).fit, MemoryFit::kUnfit);
  // A GPU whose size is unknown is never called unfit.
  EXPECT_EQ(JudgeMemory(w, 0, 0, 0).fit, MemoryFit::kFits);
  EXPECT_EQ(JudgeMemory(w, 0, 50 * kGiB, 0).fit, MemoryFit::kNotNow);
}

TEST(FormatBytes, GiBAndMiB) {
  EXPECT_EQ(FormatBytes(8 * kGiB), "8.0 GiB");
  EXPECT_EQ(FormatBytes(kGiB + kGiB / 2), "1.5 GiB");
  EXPECT_EQ(FormatBytes(96 * kMiB), "96 MiB");
  EXPECT_EQ(FormatBytes(0), "0 MiB");
}

}  // namespace
}  // namespace kjit::eval
