#include "group_norm_backward/group_norm_backward.h"

#include "kjit/cache/record.h"
#include "src/codegen.h"

#include <algorithm>
#include <sstream>
#include <string>
#include <vector>

namespace kjit::policy {
namespace {

using codegen::Align16;
using codegen::CudaType;

// The ABI (daemon/worker_protocol.h): one pointer per tensor argument (None as null), then the outputs (an
// output the mask leaves out as null), then the workspace when the key has one:
//   (dy, x, mean, rstd, weight|null, dx|null, dweight|null, dbias|null[, ws])
// The mask and the weight's presence are part of the key, so the source is specialised on them and never
// touches a null pointer.

constexpr const char* kGroupNormBackward = "aten::native_group_norm_backward";
// Channels a group may have: their ds and db stay in shared memory (2 x 4096 floats).
constexpr int64_t kMaxGroupChannels = 4096;

struct GroupNormBackwardProblem : Problem {
  DType dtype = DType::kFloat32;
  int64_t n = 1, channels = 1, hxw = 1, groups = 1;
  bool has_weight = false;
  bool dx = false, dw = false, db = false;  // the output mask
  int alignment = 16;                       // the least of the gradient's and the input's
  int64_t channels_per_group() const { return channels / groups; }
  bool columns() const { return dw || db; }
};

// Per-sample weight and bias terms meet in the workspace when there is more than one sample.
uint64_t WorkspaceBytes(const GroupNormBackwardProblem& p) {
  if (!p.columns() || p.n == 1) return 0;
  const int64_t gradients = (p.dw ? 1 : 0) + (p.db ? 1 : 0);
  return static_cast<uint64_t>(Align16(p.groups * 4) + gradients * p.n * p.channels * 4);
}

// The kernel's CUDA, from group_norm_backward.cuh (kjit_embed_cuda): kKernel.
#include "kjit/cuda/group_norm_backward.cuh.inc"
class GroupNormBackward final : public Family {
 public:
  std::string_view name() const override { return "group_norm_backward"; }
  int codegen_version() const override { return 1; }
  std::vector<std::string> ops() const override { return {kGroupNormBackward}; }

  OpTraits traits(std::string_view) const override {
    // Default assert_close tolerances per dtype; the channel and sample sums run in another order than
    // PyTorch's, and where they nearly cancel (random mean and rstd make slices that do) the float64 second
    // chance judges them (compare.h).
    return OpTraits{};
  }

  std::vector<OpKey> SampleKeys() const override {
    constexpr DType f32 = DType::kFloat32, f16 = DType::kFloat16, bf16 = DType::kBFloat16;
    auto gn = [](DType dt, std::vector<int64_t> sizes, int64_t groups, bool weight, IntList mask) {
      int64_t hxw = 1;
      for (size_t i = 2; i < sizes.size(); ++i) hxw *= sizes[i];
      const int64_t n = sizes[0], c = sizes[1];
      std::vector<Arg> args;
      args.push_back(TensorDesc::Contiguous(dt, sizes));
      args.push_back(TensorDesc::Contiguous(dt, sizes));
      args.push_back(TensorDesc::Contiguous(dt, {n, groups}));
      args.push_back(TensorDesc::Contiguous(dt, {n, groups}));
      args.push_back(weight ? Arg(TensorDesc::Contiguous(dt, {c})) : Arg(NoneArg{}));
      args.push_back(n);
      args.push_back(c);
      args.push_back(hxw);
      args.push_back(groups);
      args.push_back(std::move(mask));
      return OpKey::Single(kGroupNormBackward, "", std::move(args), 90);
    };
    return {
        // A diffusion U-Net's: 32 groups, every gradient.
        gn(f32, {16, 128, 64, 64}, 32, true, {1, 1, 1}),
        gn(f16, {8, 320, 32, 32}, 32, true, {1, 1, 1}),
        gn(bf16, {4, 64, 96, 96}, 8, true, {1, 1, 1}),
        // The input's gradient only, without a weight; odd spatial sizes (scalar vectors).
        gn(f32, {3, 30, 17, 19}, 5, false, {1, 0, 0}),
        // One sample (no workspace), instance-norm-like groups of one channel.
        gn(f32, {1, 64, 16, 16}, 64, true, {1, 1, 1}),
        // The parameters' gradients only.
        gn(bf16, {32, 64, 8, 8}, 4, true, {0, 1, 1}),
    };
  }

  Result<std::unique_ptr<Problem>> Match(const OpKey& key) const override {
    if (key.calls.size() != 1) return InvalidArgument("a single call is needed");
    const OpCall& c = key.calls[0];
    if (c.op != kGroupNormBackward) return InvalidArgument("not a group_norm backward");
    // (grad_out, input, mean, rstd, weight?, N, C, HxW, group, output_mask[3])
    if (!c.overload.empty() || c.args.size() != 10) return InvalidArgument("unexpected overload or arguments");
    const auto* dy = std::get_if<TensorDesc>(&c.args[0]);
    const auto* x = std::get_if<TensorDesc>(&c.args[1]);
    const auto* mean = std::get_if<TensorDesc>(&c.args[2]);
    const auto* rstd = std::get_if<TensorDesc>(&c.args[3]);
    const auto* n = std::get_if<int64_t>(&c.args[5]);
    const auto* channels = std::get_if<int64_t>(&c.args[6]);
    const auto* hxw = std::get_if<int64_t>(&c.args[7]);
    const auto* groups = std::get_if<int64_t>(&c.args[8]);
    const auto* mask = std::get_if<IntList>(&c.args[9]);
    if (!dy || !x || !mean || !rstd || !n || !channels || !hxw || !groups || !mask) {
      return InvalidArgument("arguments are not (Tensor, Tensor, Tensor, Tensor, Tensor?, int, int, int, int, bool[3])");
    }
    auto p = std::make_unique<GroupNormBackwardProblem>();
    if (mask->size() != 3) return InvalidArgument("output_mask has the wrong length");
    for (int64_t m : *mask) {
      if (m != 0 && m != 1) return InvalidArgument("output_mask is not a bool list");
    }
    p->dx = (*mask)[0] == 1;
    p->dw = (*mask)[1] == 1;
    p->db = (*mask)[2] == 1;
    if (!p->dx && !p->columns()) return InvalidArgument("no gradient asked for");
    if (x->dtype != DType::kFloat32 && x->dtype != DType::kFloat16 && x->dtype != DType::kBFloat16) {
      return InvalidArgument("dtype " + std::string(DTypeName(x->dtype)) + " is not served");
    }
    if (dy->dtype != x->dtype || dy->sizes != x->sizes) {
      return InvalidArgument("the gradient and the input differ in dtype or sizes");
    }
    if (!dy->is_contiguous() || !x->is_contiguous()) return InvalidArgument("non-contiguous tensors are declined");
    if (x->numel() == 0) return codegen::DeclineEmpty();
    if (x->sizes.size() < 2) return InvalidArgument("input needs at least 2 dims");
    int64_t spatial = 1;
    for (size_t i = 2; i < x->sizes.size(); ++i) spatial *= x->sizes[i];
    if (*n != x->sizes[0] || *channels != x->sizes[1] || *hxw != spatial) {
      return InvalidArgument("N, C, HxW are not the input's [N, C, *spatial] sizes");
    }
    if (*groups <= 0 || *channels % *groups != 0) return InvalidArgument("group does not divide C");
    if (*hxw == 1) return InvalidArgument("HxW == 1 takes PyTorch's 1-d formulas: left to PyTorch");
    if (*channels / *groups > kMaxGroupChannels) return InvalidArgument("more channels a group than shared memory holds");
    for (const TensorDesc* t : {mean, rstd}) {
      if (t->dtype != x->dtype) return InvalidArgument("mean and rstd are not in the input's dtype");
      if (t->numel() != *n * *groups || !t->is_contiguous()) {
        return InvalidArgument("mean and rstd are not [N, G] contiguous");
      }
      if (t->alignment < static_cast<int>(DTypeSize(x->dtype))) return InvalidArgument("mean or rstd unaligned");
    }
    if (std::holds_alternative<NoneArg>(c.args[4])) {
      p->has_weight = false;
    } else {
      const auto* w = std::get_if<TensorDesc>(&c.args[4]);
      if (!w) return InvalidArgument("weight is not a tensor or None");
      if (w->dtype != x->dtype) return InvalidArgument("weight dtype differs from the input's");
      if (w->numel() != *channels || w->sizes.size() != 1) return InvalidArgument("weight shape is not [C]");
      if (!w->is_contiguous()) return InvalidArgument("non-contiguous weight is declined");
      if (w->alignment < static_cast<int>(DTypeSize(x->dtype))) return InvalidArgument("weight unaligned");
      p->has_weight = true;
    }
    // PyTorch allocates grad_weight and grad_bias like the weight: without one the call fails there.
    if (p->columns() && !p->has_weight) return InvalidArgument("grad_weight or grad_bias asked for without a weight");
    if (x->numel() > (int64_t{1} << 40)) return InvalidArgument("too large");
    if (*n * *groups > int64_t{2147483647}) return InvalidArgument("more slices than the grid holds");
    p->dtype = x->dtype;
    p->n = *n;
    p->channels = *channels;
    p->hxw = *hxw;
    p->groups = *groups;
    p->alignment = std::min(dy->alignment, x->alignment);
    p->op = c.op;
    std::ostringstream desc;
    desc << "group_norm_backward " << DTypeName(p->dtype) << " N=" << p->n << " C=" << p->channels
         << " HxW=" << p->hxw << " G=" << p->groups << (p->has_weight ? " weight" : "") << " grads="
         << (p->dx ? "x" : "") << (p->dw ? "w" : "") << (p->db ? "b" : "");
    p->description = desc.str();
    return std::unique_ptr<Problem>(std::move(p));
  }

  Space MakeSpace(const Problem&, const DeviceFacts&) const override {
    Space s;
    s.family = "group_norm_backward";
    s.knobs = {
        {"threads", {64, 128, 256, 512, 1024}, "threads per block (a block per (sample, group) slice)"},
        {"vec", {1, 2, 4, 8}, "elements per vector load and store along HxW"},
        {"hint", {0, 1}, "1: evict-first hints on grad_input's second read and its stores"},
    };
    return s;
  }

  Status Check(const Problem& problem, const Point& pt, const DeviceFacts& dev) const override {
    const auto& p = static_cast<const GroupNormBackwardProblem&>(problem);
    const int64_t threads = pt.at("threads"), vec = pt.at("vec"), hint = pt.at("hint");
    const int64_t size = static_cast<int64_t>(DTypeSize(p.dtype));
    KJIT_RETURN_IF_ERROR(codegen::CheckThreadsAndVector(threads, vec, size, dev));
    KJIT_RETURN_IF_ERROR(codegen::CheckVectorAligned(vec, size, p.alignment, "gradient and input"));
    if (p.hxw % vec != 0) return InvalidArgument("vector does not divide HxW");
    if (!p.dx && hint != 0) return InvalidArgument("no grad_input: no second read to hint");
    // More warps than the group has channels idle through the channel sums.
    if (threads / 32 > std::max<int64_t>(p.channels_per_group(), 2)) return InvalidArgument("more warps than channels");
    if (WorkspaceBytes(p) > cache::kMaxWorkspaceBytes) return InvalidArgument("workspace too large");
    return Status::Ok();
  }

  Point ExpertDefault(const Problem& problem, const DeviceFacts& dev) const override {
    const auto& p = static_cast<const GroupNormBackwardProblem&>(problem);
    // Warps up to the group's channels (at most 8), the widest vector HxW takes.
    int64_t threads = 64;
    while (threads < 256 && threads * 2 / 32 <= p.channels_per_group()) threads *= 2;
    return codegen::WidestValid(*this, problem, dev, {{"threads", threads}, {"vec", 1}, {"hint", 0}});
  }

  Result<Candidate> Generate(const Problem& problem, const Point& pt, const DeviceFacts& dev) const override {
    KJIT_RETURN_IF_ERROR(Check(problem, pt, dev));
    const auto& p = static_cast<const GroupNormBackwardProblem&>(problem);
    const int64_t threads = pt.at("threads"), vec = pt.at("vec"), hint = pt.at("hint");
    const uint64_t workspace = WorkspaceBytes(p);
    std::ostringstream src;
    src << codegen::SourceHead(*this, p, pt, dev);
    src << "typedef " << CudaType(p.dtype) << " in_t;\ntypedef in_t out_t;\n";
    src << "#define VEC " << vec << "\n#define HINT " << hint << "\n#define HAS_W " << (p.has_weight ? 1 : 0)
        << "\n#define DX " << (p.dx ? 1 : 0) << "\n#define DW " << (p.dw ? 1 : 0) << "\n#define DB "
        << (p.db ? 1 : 0) << "\n#define ONE_SAMPLE " << (p.n == 1 ? 1 : 0) << "\n";
    src << "constexpr long long N = " << p.n << "LL, C = " << p.channels << "LL, HXW = " << p.hxw
        << "LL, GROUPS = " << p.groups << "LL;\n";
    src << "constexpr int D_CH = " << p.channels_per_group() << ", THREADS = " << threads << ";\n";
    std::vector<std::string> params = {"const in_t* __restrict__ dy", "const in_t* __restrict__ x",
                                       "const in_t* __restrict__ mean", "const in_t* __restrict__ rstd",
                                       "const in_t* __restrict__ w", "out_t* __restrict__ dx",
                                       "out_t* __restrict__ dw", "out_t* __restrict__ db"};
    if (workspace > 0) params.push_back("unsigned char* __restrict__ ws");
    src << "#define KJIT_PARAMS";
    for (size_t i = 0; i < params.size(); ++i) src << (i == 0 ? " " : ", ") << params[i];
    src << "\n#define KJIT_ABSENT " << (workspace > 0 ? "" : "unsigned char* ws = nullptr; ")
        << "(void)w; (void)dx; (void)dw; (void)db; (void)ws;\n";
    src << codegen::kElementAccess << codegen::kReductions << kKernel;
    Candidate c;
    c.entry_point = "kjit_group_norm_backward";
    c.launch.block[0] = static_cast<uint32_t>(threads);
    c.launch.grid[0] = static_cast<uint32_t>(p.n * p.groups);
    c.launch.workspace_bytes = workspace;
    c.source = src.str();
    codegen::FinishCandidate(*this, pt, c);
    return c;
  }
};

}  // namespace

const Family* GroupNormBackwardFamily() {
  static const GroupNormBackward family;
  return &family;
}

}  // namespace kjit::policy
