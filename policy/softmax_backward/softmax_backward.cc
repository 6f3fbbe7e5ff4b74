#include "softmax_backward/softmax_backward.h"

#include "src/codegen.h"

#include <algorithm>
#include <sstream>

namespace kjit::policy {
namespace {

using codegen::CeilDiv;
using codegen::CudaType;

enum Strategy : int64_t {
  kWarp = 0,
  kBlock = 1,
  kColumns = 2,
};

// Floats a lane of the warp strategy holds: its vectors of the gradient and of the output, 32 each at most.
constexpr int64_t kMaxHeldFloats = 32;

constexpr const char* kSoftmaxBackward = "aten::_softmax_backward_data";
constexpr const char* kLogSoftmaxBackward = "aten::_log_softmax_backward_data";

struct SoftmaxBackwardProblem : Problem {
  bool log = false;
  DType in = DType::kFloat32;   // the gradient's and the output's
  DType out = DType::kFloat32;  // the input's (input_dtype): grad_input's
  int64_t outer = 1, len = 1, inner = 1;
  int alignment = 16;  // the least of the two tensors' data pointers'
  int64_t rows() const { return outer * inner; }
};

bool IsServedFloat(DType t) { return t == DType::kFloat32 || t == DType::kFloat16 || t == DType::kBFloat16; }

// The kernels' CUDA, from softmax_backward.cuh (kjit_embed_cuda): kPrelude, kWarpKernel, kBlockKernel,
// kColumnsKernel.
#include "kjit/cuda/softmax_backward.cuh.inc"
class SoftmaxBackward final : public Family {
 public:
  std::string_view name() const override { return "softmax_backward"; }
  int codegen_version() const override { return 1; }
  std::vector<std::string> ops() const override { return {kSoftmaxBackward, kLogSoftmaxBackward}; }

  OpTraits traits(std::string_view) const override {
    OpTraits t;
    // A row's dot is a sum of len terms in another order than PyTorch's: float32 results differ by ulps of the
    // dot, not of the (smaller) gradient where the two nearly cancel (the GPU run at a717c4e: 0 of 10 verified
    // on normal inputs). The float64 second chance judges those: its call names float64 as input_dtype.
    t.tolerance_by_dtype[DType::kFloat32] = {1e-5, 1e-5};
    // Large inputs (2^13 and up) make dots whose partial sums cancel or overflow differently in every order.
    t.no_large_inputs = {DType::kFloat32, DType::kFloat16, DType::kBFloat16};
    return t;
  }

  std::vector<OpKey> SampleKeys() const override {
    auto key = [](const char* op, DType grad, DType input, std::vector<int64_t> sizes, int64_t dim) {
      return OpKey::Single(op, "",
                           {TensorDesc::Contiguous(grad, sizes), TensorDesc::Contiguous(grad, sizes), dim, input}, 90);
    };
    constexpr DType f32 = DType::kFloat32, f16 = DType::kFloat16, bf16 = DType::kBFloat16;
    return {
        key(kSoftmaxBackward, f32, f32, {4096, 1024}, -1),
        key(kSoftmaxBackward, f32, f32, {2048, 16384}, -1),
        key(kLogSoftmaxBackward, bf16, bf16, {8192, 32000}, -1),
        // Attention probabilities: [batch, heads, queries, keys].
        key(kSoftmaxBackward, f16, f16, {16, 12, 128, 128}, -1),
        key(kSoftmaxBackward, f32, f32, {32, 1000, 64}, 1),
        // A prime length: scalar vectors only.
        key(kLogSoftmaxBackward, f32, f32, {48, 100003}, -1),
        // half_to_float's backward: a float32 gradient for a float16 input.
        key(kSoftmaxBackward, f32, f16, {1000, 1000}, -1),
    };
  }

  Result<std::unique_ptr<Problem>> Match(const OpKey& key) const override {
    if (key.calls.size() != 1) return InvalidArgument("a single call is needed");
    const OpCall& c = key.calls[0];
    auto p = std::make_unique<SoftmaxBackwardProblem>();
    if (c.op == kLogSoftmaxBackward) {
      p->log = true;
    } else if (c.op != kSoftmaxBackward) {
      return InvalidArgument("not a softmax backward");
    }
    if (!c.overload.empty() || c.args.size() != 4) return InvalidArgument("unexpected overload or arguments");
    const auto* grad = std::get_if<TensorDesc>(&c.args[0]);
    const auto* output = std::get_if<TensorDesc>(&c.args[1]);
    const auto* dim = std::get_if<int64_t>(&c.args[2]);
    const auto* input_dtype = std::get_if<DType>(&c.args[3]);
    if (!grad || !output || !dim || !input_dtype) return InvalidArgument("arguments are not (Tensor, Tensor, int, dtype)");
    if (grad->dtype != output->dtype || grad->sizes != output->sizes) {
      return InvalidArgument("the gradient and the output differ in dtype or sizes");
    }
    if (!IsServedFloat(grad->dtype) || !IsServedFloat(*input_dtype)) {
      return InvalidArgument("dtype " + std::string(DTypeName(grad->dtype)) + " -> " +
                             std::string(DTypeName(*input_dtype)) + " is not served");
    }
    // PyTorch's rule: the same dtype, or a float32 gradient for a half input (half_to_float's backward).
    if (*input_dtype != grad->dtype && !(grad->dtype == DType::kFloat32 && *input_dtype == DType::kFloat16)) {
      return InvalidArgument("input_dtype must be the gradient's, or float16 for a float32 gradient");
    }
    if (!grad->is_contiguous() || !output->is_contiguous()) return InvalidArgument("non-contiguous tensors are declined");
    if (grad->numel() == 0) return codegen::DeclineEmpty();
    KJIT_ASSIGN_OR_RETURN(const codegen::AroundDim around, codegen::SplitAroundDim(grad->sizes, *dim));
    p->outer = around.outer;
    p->len = around.len;
    p->inner = around.inner;
    p->in = grad->dtype;
    p->out = *input_dtype;
    p->alignment = std::min(grad->alignment, output->alignment);
    p->op = c.op;
    std::ostringstream desc;
    desc << (p->log ? "log_softmax_backward " : "softmax_backward ") << DTypeName(p->in) << "->" << DTypeName(p->out)
         << " outer=" << p->outer << " len=" << p->len << " inner=" << p->inner;
    p->description = desc.str();
    return std::unique_ptr<Problem>(std::move(p));
  }

  Space MakeSpace(const Problem&, const DeviceFacts&) const override {
    Space s;
    s.family = "softmax_backward";
    s.knobs = {
        {"strategy", {kWarp, kBlock, kColumns},
         "0 warp/row held in registers, 1 block/row read twice, 2 a thread per VEC columns (dim not last)"},
        {"threads", {32, 64, 128, 256, 512, 1024}, "threads per block"},
        {"vec", {1, 2, 4, 8}, "elements per vector load and store"},
        {"hint", {0, 1}, "1: evict-first hints on the second read and on stores"},
    };
    return s;
  }

  Status Check(const Problem& problem, const Point& pt, const DeviceFacts& dev) const override {
    const auto& p = static_cast<const SoftmaxBackwardProblem&>(problem);
    const int64_t strategy = pt.at("strategy"), threads = pt.at("threads"), vec = pt.at("vec"), hint = pt.at("hint");
    const int64_t in_size = static_cast<int64_t>(DTypeSize(p.in)), out_size = static_cast<int64_t>(DTypeSize(p.out));
    if (strategy != kWarp && strategy != kBlock && strategy != kColumns) return InvalidArgument("unknown strategy");
    if ((strategy == kColumns) != (p.inner > 1)) {
      return InvalidArgument(strategy == kColumns ? "columns need dim not last" : "rows need dim last");
    }
    KJIT_RETURN_IF_ERROR(codegen::CheckThreadsAndVector(threads, vec, std::max(in_size, out_size), dev));
    KJIT_RETURN_IF_ERROR(codegen::CheckVectorAligned(vec, in_size, p.alignment, "gradient and output"));
    if ((strategy == kColumns ? p.inner : p.len) % vec != 0) {
      return InvalidArgument("vector does not divide the contiguous extent");
    }
    switch (strategy) {
      case kWarp:
        if (hint != 0) return InvalidArgument("the warp strategy reads once: no second read to hint");
        if (CeilDiv(p.len, 32 * vec) * vec > kMaxHeldFloats) return InvalidArgument("row too long for a warp");
        if (CeilDiv(p.rows(), threads / 32) > int64_t{2147483647}) return InvalidArgument("grid");
        break;
      case kBlock:
        if (threads < 64) return InvalidArgument("use the warp strategy");
        if (p.len < threads * vec) return InvalidArgument("row shorter than one pass");
        if (p.rows() > int64_t{2147483647}) return InvalidArgument("grid");
        break;
      case kColumns:
        if (CeilDiv(p.outer * (p.inner / vec), threads) > int64_t{2147483647}) return InvalidArgument("grid");
        break;
    }
    return Status::Ok();
  }

  Point ExpertDefault(const Problem& problem, const DeviceFacts& dev) const override {
    const auto& p = static_cast<const SoftmaxBackwardProblem&>(problem);
    auto widest = [&](Point pt) { return codegen::WidestValid(*this, problem, dev, std::move(pt)); };
    if (p.inner > 1) return widest({{"strategy", kColumns}, {"threads", 256}, {"vec", 1}, {"hint", 0}});
    // Short rows held by a warp (four rows a block of 128) at the widest vector the row takes, with at most
    // 16 floats of each tensor a lane; longer rows a block each, read twice (the second read mostly from L2).
    Point warp = widest({{"strategy", kWarp}, {"threads", 128}, {"vec", 1}, {"hint", 0}});
    if (Check(problem, warp, dev).ok() && CeilDiv(p.len, 32 * warp.at("vec")) * warp.at("vec") <= 16) return warp;
    for (int64_t threads : {512, 256, 128, 64}) {
      Point block = widest({{"strategy", kBlock}, {"threads", threads}, {"vec", 1}, {"hint", 0}});
      if (Check(problem, block, dev).ok() && p.len >= 4 * threads * block.at("vec")) return block;
    }
    for (int64_t threads : {64, 128, 256, 512}) {
      Point block = widest({{"strategy", kBlock}, {"threads", threads}, {"vec", 1}, {"hint", 0}});
      if (Check(problem, block, dev).ok()) return block;
    }
    return warp;
  }

  Result<Candidate> Generate(const Problem& problem, const Point& pt, const DeviceFacts& dev) const override {
    KJIT_RETURN_IF_ERROR(Check(problem, pt, dev));
    const auto& p = static_cast<const SoftmaxBackwardProblem&>(problem);
    const int64_t strategy = pt.at("strategy"), threads = pt.at("threads"), vec = pt.at("vec"), hint = pt.at("hint");
    std::ostringstream src;
    src << codegen::SourceHead(*this, p, pt, dev);
    src << "typedef " << CudaType(p.in) << " in_t;\ntypedef " << CudaType(p.out) << " out_t;\n";
    src << "#define VEC " << vec << "\n#define HINT " << hint << "\n#define LOG " << (p.log ? 1 : 0) << "\n";
    src << "constexpr long long OUTER = " << p.outer << "LL, LEN = " << p.len << "LL, INNER = " << p.inner << "LL;\n";
    src << "constexpr int THREADS = " << threads << ";\n";
    Candidate c;
    c.entry_point = "kjit_softmax_backward";
    c.launch.block[0] = static_cast<uint32_t>(threads);
    switch (strategy) {
      case kWarp:
        src << "constexpr int ITEMS = " << CeilDiv(p.len, 32 * vec) << ";\n";
        src << codegen::kElementAccess << codegen::kReductions << kPrelude << kWarpKernel;
        c.launch.grid[0] = static_cast<uint32_t>(CeilDiv(p.rows(), threads / 32));
        break;
      case kBlock:
        src << codegen::kElementAccess << codegen::kReductions << kPrelude << kBlockKernel;
        c.launch.grid[0] = static_cast<uint32_t>(p.rows());
        break;
      default:
        src << codegen::kElementAccess << codegen::kReductions << kPrelude << kColumnsKernel;
        c.launch.grid[0] = static_cast<uint32_t>(CeilDiv(p.outer * (p.inner / vec), threads));
        break;
    }
    c.source = src.str();
    codegen::FinishCandidate(*this, pt, c);
    return c;
  }
};

}  // namespace

const Family* SoftmaxBackwardFamily() {
  static const SoftmaxBackward family;
  return &family;
}

}  // namespace kjit::policy
