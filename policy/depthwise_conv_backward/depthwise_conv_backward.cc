#include "depthwise_conv_backward/depthwise_conv_backward.h"

#include "src/codegen.h"

#include <algorithm>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

namespace kjit::policy {
namespace {

using codegen::CeilDiv;
using codegen::CudaType;

// The ABI (daemon/worker_protocol.h): one pointer per tensor argument, then the outputs (an output the mask
// leaves out as null): (grad_output, input, weight, grad_input|null, grad_weight|null, grad_bias|null). The mask
// is part of the key, so the source is specialised on it and never touches a null pointer.

constexpr const char* kConvolutionBackward = "aten::convolution_backward";
constexpr int64_t kMaxKernelTaps = 2048;      // larger windows are left to PyTorch, as the forward family does
constexpr int64_t kMaxChannelBlockTaps = 64;  // wstrategy 1: a thread's per-tap floats
constexpr int64_t kPyTorchWarps = 8;          // conv_depthwise2d_grad_weight_kernel's block: min(N * 32, 256)

enum WeightStrategy : int64_t { kPerTap = 0, kPerChannel = 1 };

struct ConvBackwardProblem : Problem {
  DType dtype = DType::kFloat32;
  bool one_d = false;  // conv1d's 3-D tensors, viewed as [N, C, 1, L] as PyTorch views them
  int64_t n = 1, c = 1, ih = 1, iw = 1, oh = 1, ow = 1;
  int64_t kh = 1, kw = 1, sh = 1, sw = 1, ph = 0, pw = 0, dh = 1, dw = 1;
  bool want_input = true, want_weight = true, want_bias = true;  // the output mask
  int64_t elem() const { return static_cast<int64_t>(DTypeSize(dtype)); }
  int64_t taps() const { return kh * kw; }
  int64_t numel_in() const { return n * c * ih * iw; }
  int64_t numel_out() const { return n * c * oh * ow; }
  int64_t pytorch_warps() const { return std::min(n, kPyTorchWarps); }
};

bool ServedFloat(DType t) { return t == DType::kFloat32 || t == DType::kFloat16 || t == DType::kBFloat16; }

// Whether every index the kernel forms fits a 32-bit int: the tensors' elements plus a block's stride past
// them, and the window arithmetic (positions plus padding and a window's extent), with 2^24 of margin.
bool Wide(const ConvBackwardProblem& p) {
  const int64_t limit = int64_t{std::numeric_limits<int32_t>::max()} - (int64_t{1} << 24);
  const int64_t tensors = std::max(p.numel_in(), p.numel_out()) + 4096;
  const int64_t along_h = p.ih + p.oh * p.sh + 2 * p.ph + p.kh * p.dh;
  const int64_t along_w = p.iw + p.ow * p.sw + 2 * p.pw + p.kw * p.dw + 4;
  return tensors >= limit || along_h >= limit || along_w >= limit;
}

// grad_input's thread items: a thread per `outs` elements of a row.
int64_t InputItems(const ConvBackwardProblem& p, int64_t outs) { return p.n * p.c * p.ih * CeilDiv(p.iw, outs); }
int64_t WeightBlocks(const ConvBackwardProblem& p, int64_t wstrategy) {
  if (!p.want_weight) return 0;
  return wstrategy == kPerTap ? p.c * p.taps() : p.c;
}
int64_t BiasBlocks(const ConvBackwardProblem& p, int64_t wstrategy) {
  return p.want_bias && !(p.want_weight && wstrategy == kPerChannel) ? p.c : 0;
}
int64_t InputBlocks(const ConvBackwardProblem& p, int64_t threads, int64_t outs) {
  return p.want_input ? CeilDiv(InputItems(p, outs), threads) : 0;
}

// The kernel's CUDA, from depthwise_conv_backward.cuh (kjit_embed_cuda): kKernel.
#include "kjit/cuda/depthwise_conv_backward.cuh.inc"
class DepthwiseConvBackward final : public Family {
 public:
  std::string_view name() const override { return "depthwise_conv_backward"; }
  int codegen_version() const override { return 1; }
  std::vector<std::string> ops() const override { return {kConvolutionBackward}; }

  OpTraits traits(std::string_view) const override {
    OpTraits t;
    // CudaDepthwise2d (float32, bfloat16, and float16 where cuDNN's heuristic declines) skips the taps that
    // reach no output, as kjit does: NaN and Inf inputs mean the same to both. float16 may take cuDNN, whose
    // order and treatment of a padding tap against a NaN/Inf weight are its algorithm's: not fed special values,
    // nor NaN alone (a NaN weight at a padding tap may reach cuDNN's edge outputs and not PyTorch's kernel's).
    t.no_special_inputs = {DType::kFloat16};
    t.nan_values = false;
    // float16's large inputs (2^10 to 2^14) make products past its range, whose sums reach +-Inf, or meet as
    // inf - inf, in the order of whichever kernel sums them: on the H100 (commit a717c4e) PyTorch's gradients
    // were NaN where kjit's were -Inf, and finite sums differed by a float16 ulp of the rounding.
    t.no_large_inputs = {DType::kFloat16};
    return t;
  }

  std::vector<OpKey> SampleKeys() const override {
    constexpr DType f32 = DType::kFloat32, f16 = DType::kFloat16, bf16 = DType::kBFloat16;
    // convolution_backward as autograd calls it for F.conv2d(x, w, b, stride, padding, dilation, groups=C):
    // bias_sizes [C] (None without a bias), output_padding 0, the mask of the gradients wanted.
    auto conv = [](DType dt, std::vector<int64_t> x, std::vector<int64_t> k, IntList s, IntList p, IntList d,
                   bool bias, IntList mask) {
      const size_t spatial = x.size() - 2;
      const int64_t c = x[1];
      std::vector<int64_t> out = x, w = {c, 1};
      for (size_t i = 0; i < spatial; ++i) {
        out[2 + i] = (x[2 + i] + 2 * p[i] - d[i] * (k[i] - 1) - 1) / s[i] + 1;
        w.push_back(k[i]);
      }
      std::vector<Arg> args;
      args.push_back(TensorDesc::Contiguous(dt, out));
      args.push_back(TensorDesc::Contiguous(dt, x));
      args.push_back(TensorDesc::Contiguous(dt, w));
      if (bias) {
        args.push_back(IntList{c});
      } else {
        args.push_back(NoneArg{});
      }
      for (IntList* list : {&s, &p, &d}) args.push_back(std::move(*list));
      args.push_back(false);
      args.push_back(IntList(spatial, 0));
      args.push_back(c);
      args.push_back(std::move(mask));
      return OpKey::Single(kConvolutionBackward, "", std::move(args), 90);
    };
    return {
        // MobileNet's headroom shape, float32 3x3, every gradient.
        conv(f32, {32, 128, 128, 128}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, true, {1, 1, 1}),
        // bfloat16 5x5 stride 2 without a bias.
        conv(bf16, {8, 64, 56, 56}, {5, 5}, {2, 2}, {2, 2}, {1, 1}, false, {1, 1, 0}),
        // float16 with dilation (CudaDepthwise2d's: cuDNN's depthwise path takes none), odd sizes, a 3x5 kernel.
        conv(f16, {4, 24, 17, 19}, {3, 5}, {1, 2}, {2, 2}, {2, 1}, true, {1, 1, 1}),
        // A frozen input (the first layer): the parameters' gradients only, a 7x7 kernel over long rows.
        conv(f32, {2, 16, 9, 300}, {7, 7}, {1, 1}, {3, 3}, {1, 1}, true, {0, 1, 1}),
        // A 1x1 kernel with stride 2, the input's gradient only.
        conv(f32, {2, 8, 9, 9}, {1, 1}, {2, 2}, {0, 0}, {1, 1}, false, {1, 0, 0}),
        // float16 3x3 with 128 channels (where cuDNN's heuristic may take it).
        conv(f16, {32, 128, 56, 56}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, true, {1, 1, 1}),
        // conv1d with groups=C, a Mamba-style causal 4-tap kernel (padding 3) over 3-D tensors.
        conv(f32, {8, 256, 1024}, {4}, {1}, {3}, {1}, true, {1, 1, 1}),
        // Rows of one element, bfloat16, a 3x1 kernel.
        conv(bf16, {3, 6, 40, 1}, {3, 1}, {1, 1}, {1, 0}, {1, 1}, true, {1, 1, 1}),
    };
  }

  Result<std::unique_ptr<Problem>> Match(const OpKey& key) const override {
    if (key.calls.size() != 1) return InvalidArgument("a single call is needed");
    const OpCall& call = key.calls[0];
    if (call.op != kConvolutionBackward) return InvalidArgument("not a convolution backward");
    if (!call.overload.empty() || call.args.size() != 11) return InvalidArgument("unexpected overload or arguments");
    auto p = std::make_unique<ConvBackwardProblem>();
    const auto* dy = std::get_if<TensorDesc>(&call.args[0]);
    const auto* x = std::get_if<TensorDesc>(&call.args[1]);
    const auto* w = std::get_if<TensorDesc>(&call.args[2]);
    const auto* transposed = std::get_if<bool>(&call.args[7]);
    const auto* groups = std::get_if<int64_t>(&call.args[9]);
    const auto* mask = std::get_if<IntList>(&call.args[10]);
    if (!dy || !x || !w || !transposed || !groups || !mask) {
      return InvalidArgument("arguments are not (Tensor, Tensor, Tensor, SymInt[]?, SymInt[], SymInt[], SymInt[], bool, "
                             "SymInt[], SymInt, bool[3])");
    }
    if (*transposed) return InvalidArgument("transposed convolutions are left to PyTorch");
    const size_t nd = x->sizes.size();
    if ((nd != 3 && nd != 4) || w->sizes.size() != nd || dy->sizes.size() != nd) {
      return InvalidArgument("only 1-D and 2-D convolutions (3-D or 4-D input, weight and grad_output)");
    }
    if (!ServedFloat(x->dtype)) return InvalidArgument("dtype " + std::string(DTypeName(x->dtype)) + " is not served");
    if (dy->dtype != x->dtype || w->dtype != x->dtype) {
      return InvalidArgument("grad_output, input and weight differ in dtype: left to PyTorch");
    }
    p->one_d = nd == 3;
    p->n = x->sizes[0];
    p->c = x->sizes[1];
    if (p->c < 2 || *groups != p->c) return InvalidArgument("groups is not the channel count: not depthwise");
    if (w->sizes[0] != p->c || w->sizes[1] != 1) {
      return InvalidArgument("not depthwise with channel multiplier 1 (weight must be [C, 1, kH, kW])");
    }
    if (x->numel() == 0) return codegen::DeclineEmpty();
    if (mask->size() != 3) return InvalidArgument("output_mask has the wrong length");
    for (int64_t m : *mask) {
      if (m != 0 && m != 1) return InvalidArgument("output_mask is not a bool list");
    }
    p->want_input = (*mask)[0] == 1;
    p->want_weight = (*mask)[1] == 1;
    p->want_bias = (*mask)[2] == 1;
    if (!p->want_input && !p->want_weight && !p->want_bias) return InvalidArgument("no gradient asked for");
    const size_t spatial = nd - 2;
    KJIT_ASSIGN_OR_RETURN(std::vector<int64_t> stride, codegen::ExpandIntList(call.args[4], spatial, "stride", nullptr));
    KJIT_ASSIGN_OR_RETURN(std::vector<int64_t> padding,
                          codegen::ExpandIntList(call.args[5], spatial, "padding", nullptr));
    KJIT_ASSIGN_OR_RETURN(std::vector<int64_t> dilation,
                          codegen::ExpandIntList(call.args[6], spatial, "dilation", nullptr));
    KJIT_ASSIGN_OR_RETURN(std::vector<int64_t> output_padding,
                          codegen::ExpandIntList(call.args[8], spatial, "output_padding", nullptr));
    for (int64_t op : output_padding) {
      if (op != 0) return InvalidArgument("output_padding of a non-transposed convolution: PyTorch rejects it");
    }
    // bias_sizes only shapes grad_bias: None, or [C] as autograd passes it with a bias. Without a bias autograd
    // passes [0] (seen on the GPU, PyTorch 2.11) and asks for no grad_bias: any list is then unread.
    if (const auto* b = std::get_if<IntList>(&call.args[3])) {
      if (p->want_bias && *b != IntList{p->c}) return InvalidArgument("bias_sizes is not [C]");
    } else if (!std::holds_alternative<NoneArg>(call.args[3])) {
      return InvalidArgument("bias_sizes is neither an int list nor None");
    }
    // A 1-D convolution as PyTorch's view1d_as_2d sees it: H of 1, a 1-row kernel, stride/padding/dilation 1/0/1.
    if (p->one_d) {
      p->ih = 1;
      p->iw = x->sizes[2];
      p->kh = 1;
      p->kw = w->sizes[2];
      p->sw = stride[0];
      p->pw = padding[0];
      p->dw = dilation[0];
    } else {
      p->ih = x->sizes[2];
      p->iw = x->sizes[3];
      p->kh = w->sizes[2];
      p->kw = w->sizes[3];
      p->sh = stride[0];
      p->sw = stride[1];
      p->ph = padding[0];
      p->pw = padding[1];
      p->dh = dilation[0];
      p->dw = dilation[1];
    }
    KJIT_RETURN_IF_ERROR(codegen::CheckConvolutionWindow(p->sh, p->sw, p->ph, p->pw, p->dh, p->dw));
    if (p->kh <= 0 || p->kw <= 0) return InvalidArgument("empty kernel: PyTorch rejects it");
    if (p->taps() > kMaxKernelTaps) return InvalidArgument("kernels over 2048 taps are left to PyTorch");
    if (p->ih + 2 * p->ph < p->dh * (p->kh - 1) + 1 || p->iw + 2 * p->pw < p->dw * (p->kw - 1) + 1) {
      return InvalidArgument("output size below 1: the kernel is larger than the padded input; PyTorch rejects it");
    }
    p->oh = (p->ih + 2 * p->ph - p->dh * (p->kh - 1) - 1) / p->sh + 1;
    p->ow = (p->iw + 2 * p->pw - p->dw * (p->kw - 1) - 1) / p->sw + 1;
    const std::vector<int64_t> out =
        p->one_d ? std::vector<int64_t>{p->n, p->c, p->ow} : std::vector<int64_t>{p->n, p->c, p->oh, p->ow};
    if (dy->sizes != out) return InvalidArgument("grad_output is not the convolution's output shape");
    // Layouts. cuDNN's backward takes every call whose input or weight suggests channels_last
    // (use_cudnn_depthwise): left to PyTorch here. CudaDepthwise2d makes grad_output and the input contiguous
    // first (expect_contiguous; a 1-D convolution's input always): other layouts are declined rather than copied.
    if (!p->one_d && (codegen::StridesLikeChannelsLast(*x) || codegen::StridesLikeChannelsLast(*w))) {
      return InvalidArgument("channels_last input or weight: cuDNN's backward, left to PyTorch: declined");
    }
    if (!x->is_contiguous()) return InvalidArgument("input not contiguous: PyTorch copies it first; declined");
    if (!dy->is_contiguous()) return InvalidArgument("grad_output not contiguous: PyTorch copies it first; declined");
    if (!codegen::DenseDepthwiseWeight(*w)) return InvalidArgument("weight not dense as [C, kH, kW]: declined");
    const int64_t int_max = std::numeric_limits<int32_t>::max();
    if (x->numel() > int_max || dy->numel() > int_max) {
      return InvalidArgument("over 2^31 elements: PyTorch's depthwise kernels need 32-bit indexing; left to PyTorch");
    }
    p->dtype = x->dtype;
    for (const TensorDesc* t : {dy, x, w}) {
      if (t->alignment < p->elem()) return InvalidArgument("a tensor is not aligned to its element");
    }
    p->op = call.op;
    std::ostringstream desc;
    desc << "depthwise_conv_backward " << DTypeName(p->dtype) << (p->one_d ? " 1d" : "") << " N=" << p->n
         << " C=" << p->c << " in=" << p->ih << "x" << p->iw << " out=" << p->oh << "x" << p->ow << " k=" << p->kh
         << "x" << p->kw << " s=" << p->sh << "x" << p->sw << " p=" << p->ph << "x" << p->pw << " d=" << p->dh << "x"
         << p->dw << " grads=" << (p->want_input ? "x" : "") << (p->want_weight ? "w" : "") << (p->want_bias ? "b" : "");
    p->description = desc.str();
    return std::unique_ptr<Problem>(std::move(p));
  }

  Space MakeSpace(const Problem&, const DeviceFacts&) const override {
    Space s;
    s.family = "depthwise_conv_backward";
    s.knobs = {
        {"threads", {64, 128, 256, 512}, "threads per block (every block of the launch)"},
        {"outs", {1, 2, 4}, "consecutive grad_input elements along W per thread (one vector store where outs divides W)"},
        {"wstrategy", {kPerTap, kPerChannel},
         "grad_weight: 0 PyTorch's order (a block per channel and tap), 1 a block per channel summing every tap and "
         "the bias from one read of grad_output"},
        {"hint", {0, 1}, "1: streaming (evict-first) stores of grad_input"},
    };
    return s;
  }

  Status Check(const Problem& problem, const Point& pt, const DeviceFacts& dev) const override {
    const auto& p = static_cast<const ConvBackwardProblem&>(problem);
    const int64_t threads = pt.at("threads"), outs = pt.at("outs"), wstrategy = pt.at("wstrategy"),
                  hint = pt.at("hint");
    KJIT_RETURN_IF_ERROR(codegen::CheckThreadsAndVector(threads, outs, p.elem(), dev));
    if (threads % 32 != 0) return InvalidArgument("whole warps are needed (shuffle trees)");
    if (wstrategy != kPerTap && wstrategy != kPerChannel) return InvalidArgument("unknown wstrategy");
    if (hint != 0 && hint != 1) return InvalidArgument("hint is 0 or 1");
    if (!p.want_input && (outs != 1 || hint != 0)) return InvalidArgument("no grad_input: outs and hint do not apply");
    if (!p.want_weight && wstrategy != kPerTap) return InvalidArgument("no grad_weight: wstrategy does not apply");
    if (outs > p.iw) return InvalidArgument("more elements per thread than the input row has");
    if (p.want_weight && wstrategy == kPerChannel && p.taps() > kMaxChannelBlockTaps) {
      return InvalidArgument("a channel's block holds at most 64 taps' sums per thread");
    }
    // PyTorch's order sums on PyTorch's min(N, 8) warps: a weight block's other warps idle through it.
    if (p.want_weight && wstrategy == kPerTap && threads / 32 > std::max<int64_t>(2, p.pytorch_warps())) {
      return InvalidArgument("PyTorch's order uses min(N, 8) warps of a weight block: the others would idle");
    }
    // Blocks without weight or bias work are all grad_input's: most of their threads should have an item.
    if (p.want_input && !p.want_weight && !p.want_bias && threads > 64 && InputItems(p, outs) <= threads / 2) {
      return InvalidArgument("most threads would idle");
    }
    const int64_t blocks = WeightBlocks(p, wstrategy) + BiasBlocks(p, wstrategy) + InputBlocks(p, threads, outs);
    if (blocks > std::numeric_limits<int32_t>::max()) return InvalidArgument("grid too large");
    return Status::Ok();
  }

  Point ExpertDefault(const Problem& problem, const DeviceFacts& dev) const override {
    const auto& p = static_cast<const ConvBackwardProblem&>(problem);
    // Not yet measured. Streaming stores where the tensors outgrow L2 (50 MB on the H200): grad_input is not read
    // again here. Two elements a thread along even rows (a neighbour's grad_output reads shared through L1).
    const int64_t hint = p.want_input && (p.numel_in() + p.numel_out()) * p.elem() > (int64_t{64} << 20);
    const int64_t outs = p.want_input && p.iw % 2 == 0 ? 2 : 1;
    // grad_weight: PyTorch's block per (c, tap) reads the channel's grad_output and input once per tap; a block
    // per channel reads them once (input taps through L1) but makes taps-times fewer blocks. Per block of 256
    // threads (8 resident an SM), the waves of blocks times what each reads: the smaller, in units of a
    // channel's grad_output.
    int64_t wstrategy = kPerTap;
    if (p.want_weight && p.taps() <= kMaxChannelBlockTaps) {
      const int64_t slots = std::max<int64_t>(1, dev.sm_count) * 8;
      const int64_t per_tap = CeilDiv(p.c * p.taps(), slots) * 2;
      const int64_t per_channel = CeilDiv(p.c, slots) * (1 + p.taps());
      if (per_channel < per_tap) wstrategy = kPerChannel;
    }
    std::vector<Point> tries;
    for (int64_t threads : {256, 128, 64}) {
      tries.push_back({{"threads", threads}, {"outs", outs}, {"wstrategy", wstrategy}, {"hint", hint}});
    }
    tries.push_back({{"threads", 64}, {"outs", 1}, {"wstrategy", kPerTap}, {"hint", hint}});
    for (const Point& t : tries) {
      if (Check(problem, t, dev).ok()) return t;
    }
    return tries.back();
  }

  Result<Candidate> Generate(const Problem& problem, const Point& pt, const DeviceFacts& dev) const override {
    KJIT_RETURN_IF_ERROR(Check(problem, pt, dev));
    const auto& p = static_cast<const ConvBackwardProblem&>(problem);
    const int64_t threads = pt.at("threads"), outs = pt.at("outs"), wstrategy = pt.at("wstrategy"),
                  hint = pt.at("hint");
    std::ostringstream src;
    src << codegen::SourceHead(*this, p, pt, dev);
    src << "typedef " << CudaType(p.dtype) << " in_t;\ntypedef in_t out_t;\n";
    // 32-bit index arithmetic where every index fits (Wide): cheaper than 64-bit.
    src << "typedef " << (Wide(p) ? "long long" : "int") << " idx_t;\n";
    src << "#define VEC " << outs << "\n#define HINT " << hint << "\n#define WANT_DX " << (p.want_input ? 1 : 0)
        << "\n#define WANT_DW " << (p.want_weight ? 1 : 0) << "\n#define WANT_DB " << (p.want_bias ? 1 : 0)
        << "\n#define WSTRATEGY " << wstrategy << "\n#define VEC_STORE " << (p.iw % outs == 0 ? 1 : 0) << "\n";
    src << "constexpr idx_t N_ = " << p.n << ", C_ = " << p.c << ", IH = " << p.ih << ", IW = " << p.iw
        << ", OH = " << p.oh << ", OW = " << p.ow << ";\n";
    src << "constexpr idx_t SH = " << p.sh << ", SW = " << p.sw << ", PH = " << p.ph << ", PW = " << p.pw
        << ", DIL_H = " << p.dh << ", DIL_W = " << p.dw << ";\n";
    src << "constexpr int KH = " << p.kh << ", KW = " << p.kw << ", THREADS = " << threads << ", OUTS = " << outs
        << ", VW = " << p.pytorch_warps() << ";\n";
    src << "constexpr int WEIGHT_BLOCKS = " << WeightBlocks(p, wstrategy) << ", BIAS_BLOCKS = "
        << BiasBlocks(p, wstrategy) << ";\n";
    src << "#define KJIT_PARAMS const in_t* __restrict__ dy, const in_t* __restrict__ x, const in_t* __restrict__ wt, "
           "out_t* __restrict__ dx, out_t* __restrict__ dw, out_t* __restrict__ db\n";
    src << "#define KJIT_ABSENT (void)dy; (void)x; (void)wt; (void)dx; (void)dw; (void)db;\n";
    src << codegen::kElementAccess << kKernel;
    Candidate c;
    c.entry_point = "kjit_depthwise_conv_backward";
    c.launch.block[0] = static_cast<uint32_t>(threads);
    c.launch.grid[0] = static_cast<uint32_t>(WeightBlocks(p, wstrategy) + BiasBlocks(p, wstrategy) +
                                             InputBlocks(p, threads, outs));
    c.source = src.str();
    codegen::FinishCandidate(*this, pt, c);
    return c;
  }
};

}  // namespace

const Family* DepthwiseConvBackwardFamily() {
  static const DepthwiseConvBackward family;
  return &family;
}

}  // namespace kjit::policy
