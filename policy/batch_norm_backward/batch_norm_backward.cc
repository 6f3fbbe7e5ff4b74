#include "batch_norm_backward/batch_norm_backward.h"

#include "src/codegen.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

namespace kjit::policy {
namespace {

using codegen::CeilDiv;
using codegen::CudaType;

// The ABI (daemon/worker_protocol.h): one pointer per tensor argument (None as null), then the outputs (an
// output the mask leaves out as null):
//   native: (dy, x, weight|null, running_mean|null, running_var|null, save_mean, save_invstd, dx|null, dw|null,
//            db|null)
//   cudnn:  (x, dy, weight, running_mean|null, running_var|null, save_mean, save_var, reserve, dx, dw, db)
// The running statistics and cudnn's reserve are never read (training mode). The mask and the weight's presence
// are part of the key, so the source is specialised on them and never touches a null pointer.
//
// What PyTorch 2.11 does (aten/src/ATen/native/cuda/Normalization.cu, batch_norm_backward_cuda): with train and
// grad_input asked for, on an input that batch_norm_use_channels_last_kernels does not claim (channels_last
// contiguous, or contiguous with stride 1 along C) and that 32-bit indexing covers, the fused
// batch_norm_backward_kernel (a block per channel; stat type float when the parameters are float32 and the input
// is not, else the input's: weight and gradients in the weight's dtype, save_mean/save_invstd float32); otherwise
// batch_norm_backward_reduce (grad_weight = s2 * invstd, grad_bias = s1) and batch_norm_backward_elemt, whose
// grad_input rounds in another order (batch_norm_backward.h). grad_weight and grad_bias are empty_like(weight) (or
// the weight's options): asked for without a weight, the call fails in PyTorch.
// cudnn_batch_norm_backward (aten/src/ATen/native/cudnn/BatchNorm.cpp) returns all three, grad_weight and
// grad_bias shaped and typed like its (required, float32) weight; autograd calls it only for training-mode
// cudnn_batch_norm (eval-mode backward goes to native_batch_norm_backward with train=False).

constexpr const char* kNative = "aten::native_batch_norm_backward";
constexpr const char* kCudnn = "aten::cudnn_batch_norm_backward";

struct BatchNormBackwardProblem : Problem {
  bool cudnn = false;
  DType dtype = DType::kFloat32;        // input, gradient and grad_input
  DType param_dtype = DType::kFloat32;  // weight, grad_weight and grad_bias (float32 without a weight)
  int64_t n = 1, channels = 1, hxw = 1;
  bool has_weight = false;
  bool dx = true, dw = true, db = true;  // the output mask (cudnn: all three)
  bool fused = true;                     // grad_input in batch_norm_backward_kernel's order (else elemt's)
  float norm = 1.f;                      // 1 / M as the chosen PyTorch kernel rounds it
  int alignment = 16;                    // the least of the gradient's and the input's
  int64_t channel_len() const { return n * hxw; }
  bool columns() const { return dw || db; }
};

bool ServedFloat(DType t) { return t == DType::kFloat32 || t == DType::kFloat16 || t == DType::kBFloat16; }

// As torch's is_contiguous(ChannelsLast), which batch_norm_use_channels_last_kernels asks (4-D only).
bool ChannelsLast4d(const TensorDesc& t) { return t.sizes.size() == 4 && codegen::IsChannelsLast(t); }

// The kernel's CUDA, from batch_norm_backward.cuh (kjit_embed_cuda): kKernel.
#include "kjit/cuda/batch_norm_backward.cuh.inc"
class BatchNormBackward final : public Family {
 public:
  std::string_view name() const override { return "batch_norm_backward"; }
  int codegen_version() const override { return 1; }
  std::vector<std::string> ops() const override { return {kNative, kCudnn}; }

  OpTraits traits(std::string_view) const override {
    // Default assert_close tolerances per dtype; the channel sums run in another order than PyTorch's, and where
    // they nearly cancel the float64 second chance judges them (compare.h).
    OpTraits t;
    // float16 and bfloat16 inputs of 2^13 and up make channel sums that overflow to +-Inf in one order and meet
    // as inf - inf (NaN) in another: on the H200 (commit 8a7c03b) PyTorch's gradients were NaN where kjit's
    // were -Inf on every element of such channels. No kernel summing in another order can match that.
    t.no_large_inputs = {DType::kFloat16, DType::kBFloat16};
    return t;
  }

  std::vector<OpKey> SampleKeys() const override {
    constexpr DType f32 = DType::kFloat32, f16 = DType::kFloat16, bf16 = DType::kBFloat16;
    using T = TensorDesc;
    // native: (grad_out, input, weight?, running_mean?, running_var?, save_mean, save_invstd, train, eps, mask).
    auto native = [](DType dt, std::vector<int64_t> sizes, Arg weight, bool running, IntList mask) {
      const int64_t c = sizes[1];
      const Arg stats = T::Contiguous(DType::kFloat32, {c});
      Arg run = NoneArg{};
      if (running) run = T::Contiguous(std::holds_alternative<T>(weight) ? std::get<T>(weight).dtype : dt, {c});
      std::vector<Arg> args = {T::Contiguous(dt, sizes), T::Contiguous(dt, sizes), std::move(weight), run, run,
                               stats, stats, true, 1e-5, std::move(mask)};
      return OpKey::Single(kNative, "", std::move(args), 90);
    };
    // cudnn: (input, grad_output, weight, running_mean?, running_var?, save_mean, save_var, epsilon, reserve).
    auto cudnn = [](DType dt, std::vector<int64_t> sizes) {
      const int64_t c = sizes[1];
      const Arg p = T::Contiguous(DType::kFloat32, {c});
      std::vector<Arg> args = {T::Contiguous(dt, sizes), T::Contiguous(dt, sizes), p, p, p, p, p, 1e-5,
                               T::Contiguous(DType::kUInt8, {0})};
      return OpKey::Single(kCudnn, "", std::move(args), 90);
    };
    auto w = [](DType dt, int64_t c) { return Arg(T::Contiguous(dt, {c})); };
    return {
        // ResNet's first stage, every gradient: float32, and float16 / bfloat16 under autocast (float32
        // parameters: PyTorch's mixed-type kernel).
        native(f32, {32, 64, 56, 56}, w(f32, 64), true, {1, 1, 1}),
        native(f16, {32, 64, 56, 56}, w(f32, 64), true, {1, 1, 1}),
        native(bf16, {16, 256, 14, 14}, w(bf16, 256), true, {1, 1, 1}),
        // BatchNorm1d over features: [N, C] (PyTorch's reduce-then-elementwise order).
        native(f32, {256, 512}, w(f32, 512), true, {1, 1, 1}),
        // Odd spatial sizes (scalar vectors), no affine parameters: the input's gradient only.
        native(f32, {3, 7, 17, 19}, NoneArg{}, false, {1, 0, 0}),
        // The parameters' gradients only (a frozen input), 3-D volumes.
        native(f16, {2, 32, 8, 12, 12}, w(f16, 32), true, {0, 1, 1}),
        // cuDNN's backward (every gradient, float32 parameters).
        cudnn(f32, {32, 64, 56, 56}),
        cudnn(f16, {8, 128, 28, 28}),
    };
  }

  Result<std::unique_ptr<Problem>> Match(const OpKey& key) const override {
    if (key.calls.size() != 1) return InvalidArgument("a single call is needed");
    const OpCall& c = key.calls[0];
    auto p = std::make_unique<BatchNormBackwardProblem>();
    if (c.op == kCudnn) {
      p->cudnn = true;
    } else if (c.op != kNative) {
      return InvalidArgument("not a batch_norm backward");
    }
    if (!c.overload.empty() || c.args.size() != (p->cudnn ? 9u : 10u)) {
      return InvalidArgument("unexpected overload or arguments");
    }
    const auto* dy = std::get_if<TensorDesc>(&c.args[p->cudnn ? 1 : 0]);
    const auto* x = std::get_if<TensorDesc>(&c.args[p->cudnn ? 0 : 1]);
    if (!dy || !x || !std::holds_alternative<double>(c.args[p->cudnn ? 7 : 8])) {
      return InvalidArgument(p->cudnn ? "arguments are not (Tensor, Tensor, Tensor, Tensor?, Tensor?, Tensor?, "
                                        "Tensor?, float, Tensor)"
                                      : "arguments are not (Tensor, Tensor, Tensor?, Tensor?, Tensor?, Tensor?, "
                                        "Tensor?, bool, float, bool[3])");
    }
    if (p->cudnn) {
      if (!std::holds_alternative<TensorDesc>(c.args[8])) return InvalidArgument("reserveSpace is not a tensor");
    } else {
      const auto* train = std::get_if<bool>(&c.args[7]);
      const auto* mask = std::get_if<IntList>(&c.args[9]);
      if (!train || !mask) {
        return InvalidArgument("arguments are not (Tensor, Tensor, Tensor?, Tensor?, Tensor?, Tensor?, Tensor?, "
                               "bool, float, bool[3])");
      }
      if (mask->size() != 3) return InvalidArgument("output_mask has the wrong length");
      for (int64_t m : *mask) {
        if (m != 0 && m != 1) return InvalidArgument("output_mask is not a bool list");
      }
      p->dx = (*mask)[0] == 1;
      p->dw = (*mask)[1] == 1;
      p->db = (*mask)[2] == 1;
      if (!*train) {
        return InvalidArgument("eval-mode backward (train=False: running statistics, no reduction) is left to PyTorch");
      }
      if (!p->dx && !p->columns()) return InvalidArgument("no gradient asked for");
    }
    if (!ServedFloat(x->dtype)) return InvalidArgument("dtype " + std::string(DTypeName(x->dtype)) + " is not served");
    if (dy->dtype != x->dtype || dy->sizes != x->sizes) {
      return InvalidArgument("the gradient and the input differ in dtype or sizes");
    }
    if (x->sizes.size() < 2) return InvalidArgument("batch norm needs an input of 2 or more dims");
    if (x->numel() == 0) return codegen::DeclineEmpty();
    if (!x->is_contiguous() || !dy->is_contiguous()) {
      return InvalidArgument("channels_last and other non-contiguous layouts are left to PyTorch");
    }
    if (x->numel() > (int64_t{1} << 40)) return InvalidArgument("too large");
    p->n = x->sizes[0];
    p->channels = x->sizes[1];
    for (size_t d = 2; d < x->sizes.size(); ++d) p->hxw *= x->sizes[d];

    // The weight: absent (native only) or a contiguous [C] tensor of the input's dtype or float32.
    const Arg& weight = c.args[2];
    if (std::holds_alternative<NoneArg>(weight)) {
      if (p->cudnn) return InvalidArgument("cudnn_batch_norm_backward needs a weight");
    } else {
      const auto* t = std::get_if<TensorDesc>(&weight);
      if (!t) return InvalidArgument("weight is not a tensor or None");
      if (t->sizes != std::vector<int64_t>{p->channels}) return InvalidArgument("weight is not [C]");
      if (!t->is_contiguous()) return InvalidArgument("non-contiguous weight is declined");
      if (t->dtype != x->dtype && t->dtype != DType::kFloat32) {
        return InvalidArgument("weight dtype is neither the input's nor float32");
      }
      if (p->cudnn && t->dtype != DType::kFloat32) {
        return InvalidArgument("cudnn_batch_norm_backward with a weight other than float32 is not a call PyTorch makes");
      }
      // PyTorch's cudnn_batch_norm_backward takes a float32 weight only with a float32 or float16 input: with a
      // bfloat16 input it refuses the call (seen on the H200, commit 8a7c03b: "Expected tensor for argument #1
      // 'input' to have the same type as tensor for argument #3 'weight'").
      if (p->cudnn && x->dtype == DType::kBFloat16) {
        return InvalidArgument("cudnn_batch_norm_backward refuses a bfloat16 input with a float32 weight");
      }
      if (t->alignment < static_cast<int>(DTypeSize(t->dtype))) return InvalidArgument("weight unaligned");
      p->has_weight = true;
      p->param_dtype = t->dtype;
    }
    // Running statistics: never read in training, but PyTorch picks its stat type from the first parameter
    // defined; kjit takes them of the weight's dtype (or, without a weight, the input's or float32).
    bool running[2] = {false, false};
    for (int i = 0; i < 2; ++i) {
      const Arg& a = c.args[3 + i];
      if (std::holds_alternative<NoneArg>(a)) continue;
      const auto* t = std::get_if<TensorDesc>(&a);
      if (!t) return InvalidArgument("running statistics are not tensors or None");
      if (t->sizes != std::vector<int64_t>{p->channels}) return InvalidArgument("running statistics are not [C]");
      if (p->has_weight ? t->dtype != p->param_dtype : (t->dtype != x->dtype && t->dtype != DType::kFloat32)) {
        return InvalidArgument("parameters of different dtypes are left to PyTorch");
      }
      running[i] = true;
    }
    if (running[0] != running[1]) return InvalidArgument("running_mean and running_var must both be given or both None");
    // save_mean and save_invstd (cudnn: save_var, cuDNN's saved inverse std): float32 [C], as the forward returns.
    for (int i = 0; i < 2; ++i) {
      const Arg& a = c.args[5 + i];
      const char* what = i == 0 ? "save_mean" : "save_invstd";
      if (std::holds_alternative<NoneArg>(a)) {
        return InvalidArgument(std::string(what) + " is None: training-mode backward needs the saved statistics");
      }
      const auto* t = std::get_if<TensorDesc>(&a);
      if (!t) return InvalidArgument(std::string(what) + " is not a tensor or None");
      if (t->dtype != DType::kFloat32) return InvalidArgument(std::string(what) + " is not float32");
      if (t->sizes != std::vector<int64_t>{p->channels} || !t->is_contiguous()) {
        return InvalidArgument(std::string(what) + " is not a contiguous [C] tensor");
      }
      if (t->alignment < 4) return InvalidArgument(std::string(what) + " is not float-aligned");
    }
    // PyTorch allocates grad_weight and grad_bias like the weight: without one the call fails there.
    if (p->columns() && !p->has_weight) return InvalidArgument("grad_weight or grad_bias asked for without a weight");
    if (p->channels > int64_t{std::numeric_limits<int32_t>::max()} / 8) {
      return InvalidArgument("more channels than the grid holds");
    }
    // Which of PyTorch's kernels computes grad_input (and so its order of operations and 1 / M's rounding).
    const int64_t stride_c = x->strides.size() > 1 ? x->strides[1] : 1;
    const bool claimed_by_channels_last = ChannelsLast4d(*x) || stride_c == 1;
    const bool index32 = x->numel() <= int64_t{std::numeric_limits<int32_t>::max()};
    const int64_t m = p->channel_len();
    if (p->cudnn || (!claimed_by_channels_last && index32)) {
      p->fused = true;
      p->norm = 1.0f / static_cast<float>(static_cast<int32_t>(std::min<int64_t>(m, std::numeric_limits<int32_t>::max())));
    } else {
      p->fused = false;
      p->norm = static_cast<float>(1.0 / static_cast<double>(m));
    }
    p->dtype = x->dtype;
    p->alignment = std::min(dy->alignment, x->alignment);
    p->op = c.op;
    std::ostringstream desc;
    desc << (p->cudnn ? "cudnn_batch_norm_backward " : "batch_norm_backward ") << DTypeName(p->dtype)
         << " N=" << p->n << " C=" << p->channels << " HxW=" << p->hxw;
    if (p->has_weight) desc << " weight " << DTypeName(p->param_dtype);
    desc << " grads=" << (p->dx ? "x" : "") << (p->dw ? "w" : "") << (p->db ? "b" : "")
         << (p->fused ? "" : " (elemt order)");
    p->description = desc.str();
    return std::unique_ptr<Problem>(std::move(p));
  }

  Space MakeSpace(const Problem&, const DeviceFacts&) const override {
    Space s;
    s.family = "batch_norm_backward";
    s.knobs = {
        {"threads", {64, 128, 256, 512, 1024}, "threads per block"},
        {"vec", {1, 2, 4, 8}, "elements per vector load and store along HxW"},
        {"cluster", {1, 2, 4, 8}, "blocks a channel (a thread-block cluster, sm_90), sums merged in rank order"},
        {"hint", {0, 1}, "1: evict-first loads on grad_input's second read and streaming stores"},
    };
    return s;
  }

  Status Check(const Problem& problem, const Point& pt, const DeviceFacts& dev) const override {
    const auto& p = static_cast<const BatchNormBackwardProblem&>(problem);
    const int64_t threads = pt.at("threads"), vec = pt.at("vec"), cluster = pt.at("cluster"), hint = pt.at("hint");
    const int64_t size = static_cast<int64_t>(DTypeSize(p.dtype));
    KJIT_RETURN_IF_ERROR(codegen::CheckThreadsAndVector(threads, vec, size, dev));
    KJIT_RETURN_IF_ERROR(codegen::CheckVectorAligned(vec, size, p.alignment, "gradient and input"));
    if (p.hxw % vec != 0) return InvalidArgument("vector does not divide HxW");
    if (!p.dx && hint != 0) return InvalidArgument("no grad_input: no second read to hint");
    if (cluster > 1 && (dev.arch < 90 || cluster > dev.max_cluster_size)) return InvalidArgument("no such cluster here");
    // As batch_norm's cluster strategies: blocks of two warps spend more on the cluster's barriers than they sum.
    if (cluster > 1 && threads < 128) return InvalidArgument("cluster blocks need at least 128 threads");
    const int64_t vectors = p.channel_len() / vec;
    const int64_t part = CeilDiv(vectors, cluster);
    // A cluster whose blocks would not each have a whole pass of vectors only adds barriers.
    if (cluster > 1 && part < threads) return InvalidArgument("channel shorter than a pass of the cluster's blocks");
    // Threads past the block's vectors idle (128 stays valid for the shortest channels).
    if (threads > 128 && threads > part) return InvalidArgument("more threads than the block has vectors");
    if (p.channels * cluster > int64_t{std::numeric_limits<int32_t>::max()}) {
      return InvalidArgument("more blocks than the grid holds");
    }
    return Status::Ok();
  }

  Point ExpertDefault(const Problem& problem, const DeviceFacts& dev) const override {
    const auto& p = static_cast<const BatchNormBackwardProblem&>(problem);
    // Enough blocks to fill the GPU twice: a channel over a cluster where channels are few and long (each block
    // keeping 1024 vectors or more: 4 a thread at 256 threads; shorter ones are the launch's and the barriers').
    int64_t cluster = 1;
    while (cluster < 8 && p.channels * cluster < 2 * dev.sm_count) {
      Point next = codegen::WidestValid(*this, problem, dev,
                                        {{"threads", 256}, {"vec", 1}, {"cluster", cluster * 2}, {"hint", 0}});
      if (!Check(problem, next, dev).ok()) break;
      if (CeilDiv(p.channel_len() / next.at("vec"), cluster * 2) < 1024) break;
      cluster *= 2;
    }
    // Threads up to 512 while each has 4 vectors or more of its block's range.
    Point pt = codegen::WidestValid(*this, problem, dev,
                                    {{"threads", 128}, {"vec", 1}, {"cluster", cluster}, {"hint", 0}});
    const int64_t part = CeilDiv(p.channel_len() / pt.at("vec"), cluster);
    for (int64_t threads : {512, 256}) {
      Point t = pt;
      t["threads"] = threads;
      if (part >= threads * 4 && Check(problem, t, dev).ok()) return t;
    }
    return pt;
  }

  Result<Candidate> Generate(const Problem& problem, const Point& pt, const DeviceFacts& dev) const override {
    KJIT_RETURN_IF_ERROR(Check(problem, pt, dev));
    const auto& p = static_cast<const BatchNormBackwardProblem&>(problem);
    const int64_t threads = pt.at("threads"), vec = pt.at("vec"), cluster = pt.at("cluster"), hint = pt.at("hint");
    const int64_t vectors = p.channel_len() / vec;
    uint32_t norm_bits = 0;
    std::memcpy(&norm_bits, &p.norm, sizeof(norm_bits));
    std::ostringstream src;
    src << codegen::SourceHead(*this, p, pt, dev);
    src << "typedef " << CudaType(p.dtype) << " in_t;\ntypedef in_t out_t;\ntypedef " << CudaType(p.param_dtype)
        << " p_t;\n";
    src << "#define VEC " << vec << "\n#define HINT " << hint << "\n#define HAS_W " << (p.has_weight ? 1 : 0)
        << "\n#define DX " << (p.dx ? 1 : 0) << "\n#define DW " << (p.dw ? 1 : 0) << "\n#define DB "
        << (p.db ? 1 : 0) << "\n#define FUSED " << (p.fused ? 1 : 0) << "\n";
    // 1 / M by its float bits: exactly the chosen PyTorch kernel's rounding.
    src << "#define NORM __uint_as_float(" << norm_bits << "u)\n";
    src << "constexpr long long N = " << p.n << "LL, C = " << p.channels << "LL, HW = " << p.hxw
        << "LL, HWV = HW / VEC, CHV = N * HWV;\n";
    src << "constexpr int CLUSTER = " << cluster << ", THREADS = " << threads << ";\n";
    src << "constexpr long long PART = " << CeilDiv(vectors, cluster) << "LL;\n";
    src << "#define KJIT_CLUSTER " << (cluster > 1 ? "__cluster_dims__(CLUSTER, 1, 1)" : "") << "\n";
    const std::vector<std::string> tensors =
        p.cudnn ? std::vector<std::string>{"const in_t* __restrict__ x", "const in_t* __restrict__ dy",
                                           "const p_t* __restrict__ w", "const void* __restrict__ rm",
                                           "const void* __restrict__ rv", "const float* __restrict__ save_mean",
                                           "const float* __restrict__ save_invstd",
                                           "const unsigned char* __restrict__ reserve"}
                : std::vector<std::string>{"const in_t* __restrict__ dy", "const in_t* __restrict__ x",
                                           "const p_t* __restrict__ w", "const void* __restrict__ rm",
                                           "const void* __restrict__ rv", "const float* __restrict__ save_mean",
                                           "const float* __restrict__ save_invstd"};
    src << "#define KJIT_PARAMS";
    for (size_t i = 0; i < tensors.size(); ++i) src << (i == 0 ? " " : ", ") << tensors[i];
    src << ", out_t* __restrict__ dx, p_t* __restrict__ dw, p_t* __restrict__ db\n";
    src << "#define KJIT_ABSENT (void)w; (void)rm; (void)rv; " << (p.cudnn ? "(void)reserve; " : "")
        << "(void)dx; (void)dw; (void)db;\n";
    src << codegen::kElementAccess << codegen::kReductions << kKernel;
    Candidate c;
    c.entry_point = "kjit_batch_norm_backward";
    c.launch.block[0] = static_cast<uint32_t>(threads);
    c.launch.grid[0] = static_cast<uint32_t>(p.channels * cluster);
    c.source = src.str();
    codegen::FinishCandidate(*this, pt, c);
    return c;
  }
};

}  // namespace

const Family* BatchNormBackwardFamily() {
  static const BatchNormBackward family;
  return &family;
}

}  // namespace kjit::policy
