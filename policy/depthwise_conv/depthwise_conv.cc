#include "depthwise_conv/depthwise_conv.h"

#include "src/codegen.h"

#include <algorithm>
#include <limits>
#include <numeric>
#include <sstream>

namespace kjit::policy {
namespace {

using codegen::CeilDiv;
using codegen::CudaType;
using codegen::DenseDepthwiseWeight;
using codegen::IsChannelsLast;
using codegen::StridesLikeChannelsLast;

// The ABI (daemon/worker_protocol.h): _conv_depthwise2d: (x, weight, bias or null, out);
// cudnn_convolution: (x, weight, out).

enum Strategy : int64_t { kDirect = 0, kBlocked = 1, kStaged = 2, kSlide = 3 };

constexpr int64_t kMaxStagedBytes = 64 * 1024;  // keeps three blocks per SM, as the pool family
constexpr int64_t kMaxUnrolledFmas = 2048;      // fully unrolled multiply-adds per thread (twice: edge and interior)
constexpr int64_t kMaxHeldFloats = 128;         // accumulators and input segments a thread holds
constexpr int64_t kMaxKernelTaps = 2048;        // larger windows are left to PyTorch
constexpr int64_t kMaxRowsUnder = 64;           // input rows a blocked or sliding thread's unrolled loop walks
constexpr int64_t kMaxBlockedRows = 8;          // rows 16 and 32 are for the sliding strategy

constexpr const char* kDepthwise2d = "aten::_conv_depthwise2d";
constexpr const char* kCudnn = "aten::cudnn_convolution";

struct ConvProblem : Problem {
  bool cudnn = false;          // aten::cudnn_convolution (no bias); else aten::_conv_depthwise2d
  bool has_bias = false;
  bool channels_last = false;  // input and output NHWC
  DType dtype = DType::kFloat32;
  int64_t n = 1, c = 1, ih = 1, iw = 1, oh = 1, ow = 1;
  int64_t kh = 1, kw = 1, sh = 1, sw = 1, ph = 0, pw = 0, dh = 1, dw = 1;
  int alignment = 16;  // the input's
  int64_t numel_in() const { return n * c * ih * iw; }
  int64_t numel_out() const { return n * c * oh * ow; }
  int64_t elem() const { return static_cast<int64_t>(DTypeSize(dtype)); }
};

bool Float(DType t) { return t == DType::kFloat32 || t == DType::kFloat16 || t == DType::kBFloat16; }

// The kernels' CUDA, from depthwise_conv.cuh (kjit_embed_cuda): kPrelude, kRowsKernel, kChannelsLastKernel,
// kStagedKernel, kSlideKernel, kSlideEntry.
#include "kjit/cuda/depthwise_conv.cuh.inc"
class DepthwiseConv final : public Family {
 public:
  std::string_view name() const override { return "depthwise_conv"; }
  int codegen_version() const override { return 2; }
  std::vector<std::string> ops() const override { return {kDepthwise2d, kCudnn}; }

  OpTraits traits(std::string_view op) const override {
    OpTraits t;
    // _conv_depthwise2d: PyTorch's sums in PyTorch's order, padding taps skipped as its kernel skips
    // them: NaN and Inf inputs mean the same to both. cuDNN's treatment of a padding tap against a
    // NaN/Inf weight, and its order, are its algorithm's (unspecified): not fed special values.
    if (op == kCudnn) t.special_values = t.nan_values = false;
    return t;
  }

  std::vector<OpKey> SampleKeys() const override {
    constexpr DType f32 = DType::kFloat32, f16 = DType::kFloat16, bf16 = DType::kBFloat16;
    auto contiguous = [](DType dt, std::vector<int64_t> s) { return TensorDesc::Contiguous(dt, std::move(s)); };
    auto channels_last = [](DType dt, std::vector<int64_t> s) {
      TensorDesc t = TensorDesc::Contiguous(dt, s);
      t.strides = {s[1] * s[2] * s[3], 1, s[3] * s[1], s[1]};
      return t;
    };
    auto weight = [](DType dt, int64_t c, int64_t kh, int64_t kw) { return TensorDesc::Contiguous(dt, {c, 1, kh, kw}); };
    // F.conv2d(x, w, b, stride, padding, dilation, groups=C) as _convolution calls the backends.
    auto native = [&](TensorDesc x, IntList k, bool bias, IntList s, IntList p, IntList d) {
      const DType dt = x.dtype;
      const int64_t c = x.sizes[1];
      Arg b = bias ? Arg(contiguous(dt, {c})) : Arg(NoneArg{});
      return OpKey::Single(kDepthwise2d, "", {std::move(x), weight(dt, c, k[0], k[1]), k, std::move(b), s, p, d}, 90);
    };
    auto cudnn = [&](TensorDesc x, TensorDesc w, IntList s, IntList p, IntList d) {
      const int64_t c = x.sizes[1];
      return OpKey::Single(kCudnn, "", {std::move(x), std::move(w), p, s, d, c, false, false, true}, 90);
    };
    return {
        // The headroom case: float32 NCHW, 3x3, bias.
        native(contiguous(f32, {32, 128, 128, 128}), {3, 3}, true, {1, 1}, {1, 1}, {1, 1}),
        // bfloat16 NCHW (always _conv_depthwise2d), 5x5 stride 2, no bias.
        native(contiguous(bf16, {8, 64, 56, 56}), {5, 5}, false, {2, 2}, {2, 2}, {1, 1}),
        // float16 NCHW with dilation (cuDNN's depthwise path takes none): odd sizes, a 3x5 kernel.
        native(contiguous(f16, {4, 24, 17, 19}), {3, 5}, true, {1, 2}, {2, 2}, {2, 1}),
        // A large kernel over odd rows; a 1x1 kernel with stride 2; rows of one element.
        native(contiguous(f32, {2, 16, 9, 300}), {7, 7}, true, {1, 1}, {3, 3}, {1, 1}),
        native(contiguous(f32, {2, 8, 9, 9}), {1, 1}, false, {2, 2}, {0, 0}, {1, 1}),
        native(contiguous(bf16, {3, 6, 40, 1}), {3, 1}, true, {1, 1}, {1, 0}, {1, 1}),
        // cuDNN: channels_last in each dtype (dilation too), and the fp16 NCHW headroom shape.
        cudnn(channels_last(f32, {8, 64, 56, 56}), weight(f32, 64, 3, 3), {1, 1}, {1, 1}, {1, 1}),
        cudnn(channels_last(bf16, {4, 24, 15, 15}), weight(bf16, 24, 5, 5), {2, 2}, {2, 2}, {1, 1}),
        cudnn(channels_last(f16, {2, 40, 9, 11}), channels_last(f16, {40, 1, 3, 3}), {1, 1}, {2, 2}, {2, 2}),
        cudnn(contiguous(f16, {32, 128, 128, 128}), weight(f16, 128, 3, 3), {1, 1}, {1, 1}, {1, 1}),
    };
  }

  Result<std::unique_ptr<Problem>> Match(const OpKey& key) const override {
    if (key.calls.size() != 1) return InvalidArgument("a single call is needed");
    const OpCall& call = key.calls[0];
    auto p = std::make_unique<ConvProblem>();
    if (call.op == kDepthwise2d) {
      p->cudnn = false;
    } else if (call.op == kCudnn) {
      p->cudnn = true;
    } else {
      return InvalidArgument("not a depthwise convolution backend op");
    }
    if (!call.overload.empty() || call.args.size() != (p->cudnn ? 9u : 7u)) {
      return InvalidArgument("unexpected overload or arguments");
    }
    const auto* x = std::get_if<TensorDesc>(&call.args[0]);
    const auto* w = std::get_if<TensorDesc>(&call.args[1]);
    if (!x || !w) return InvalidArgument("self and weight must be tensors");
    if (!Float(x->dtype)) return InvalidArgument("dtype " + std::string(DTypeName(x->dtype)) + " is not served");
    if (w->dtype != x->dtype) return InvalidArgument("weight dtype differs from the input's: PyTorch rejects it");
    if (x->sizes.size() != 4 || w->sizes.size() != 4) return InvalidArgument("only 4-D input and weight (2-D convolution)");
    if (x->numel() == 0) return codegen::DeclineEmpty();
    p->n = x->sizes[0];
    p->c = x->sizes[1];
    p->ih = x->sizes[2];
    p->iw = x->sizes[3];
    if (w->sizes[0] != p->c || w->sizes[1] != 1) {
      return InvalidArgument("not depthwise with channel multiplier 1 (weight must be [C, 1, kH, kW])");
    }
    if (!DenseDepthwiseWeight(*w)) return InvalidArgument("weight not dense as [C, kH, kW]: declined");
    if (w->alignment < static_cast<int64_t>(DTypeSize(w->dtype))) return InvalidArgument("weight not aligned to its element");
    p->kh = w->sizes[2];
    p->kw = w->sizes[3];
    std::vector<int64_t> stride, padding, dilation;
    if (!p->cudnn) {
      KJIT_ASSIGN_OR_RETURN(std::vector<int64_t> k, codegen::ExpandIntList(call.args[2], 2, "kernel_size", nullptr));
      if (k[0] != p->kh || k[1] != p->kw) return InvalidArgument("kernel_size differs from the weight's: declined");
      const Arg& bias = call.args[3];
      if (const auto* b = std::get_if<TensorDesc>(&bias)) {
        if (b->dtype != x->dtype) return InvalidArgument("bias dtype differs from the input's: PyTorch rejects it");
        if (b->sizes.size() != 1 || b->sizes[0] != p->c) return InvalidArgument("bias must be [C]");
        if (p->c > 1 && b->strides[0] != 1) return InvalidArgument("bias not contiguous: declined");
        if (b->alignment < static_cast<int64_t>(DTypeSize(b->dtype))) return InvalidArgument("bias not aligned to its element");
        p->has_bias = true;
      } else if (!std::holds_alternative<NoneArg>(bias)) {
        return InvalidArgument("bias is neither a tensor nor None");
      }
      KJIT_ASSIGN_OR_RETURN(stride, codegen::ExpandIntList(call.args[4], 2, "stride", nullptr));
      KJIT_ASSIGN_OR_RETURN(padding, codegen::ExpandIntList(call.args[5], 2, "padding", nullptr));
      KJIT_ASSIGN_OR_RETURN(dilation, codegen::ExpandIntList(call.args[6], 2, "dilation", nullptr));
      // conv_depthwise2d_cuda makes the input contiguous first and writes a contiguous output.
      if (!x->is_contiguous()) return InvalidArgument("input not contiguous: PyTorch copies it first; declined");
      p->channels_last = false;
    } else {
      KJIT_ASSIGN_OR_RETURN(padding, codegen::ExpandIntList(call.args[2], 2, "padding", nullptr));
      KJIT_ASSIGN_OR_RETURN(stride, codegen::ExpandIntList(call.args[3], 2, "stride", nullptr));
      KJIT_ASSIGN_OR_RETURN(dilation, codegen::ExpandIntList(call.args[4], 2, "dilation", nullptr));
      const auto* groups = std::get_if<int64_t>(&call.args[5]);
      if (!groups || *groups != p->c || p->c < 2) return InvalidArgument("groups is not the channel count: not depthwise");
      for (size_t i = 6; i < 9; ++i) {
        if (!std::holds_alternative<bool>(call.args[i])) return InvalidArgument("benchmark/deterministic/allow_tf32 not bools");
      }
      // cudnn_conv_suggest_memory_format: channels_last if the input or the weight suggests it.
      const bool out_cl = StridesLikeChannelsLast(*x) || StridesLikeChannelsLast(*w);
      if (out_cl) {
        if (!IsChannelsLast(*x)) {
          return InvalidArgument("output channels_last but the input is not: cuDNN copies it first; declined");
        }
      } else if (!x->is_contiguous()) {
        return InvalidArgument("input neither contiguous nor channels_last: declined");
      }
      // A tensor dense both ways (one pixel, or one channel) whose output layout the heuristics decide.
      if (x->is_contiguous() && IsChannelsLast(*x) && (p->ih * p->iw == 1 || p->c == 1)) {
        return InvalidArgument("ambiguous layout: declined");
      }
      p->channels_last = out_cl;
    }
    p->sh = stride[0];
    p->sw = stride[1];
    p->ph = padding[0];
    p->pw = padding[1];
    p->dh = dilation[0];
    p->dw = dilation[1];
    KJIT_RETURN_IF_ERROR(codegen::CheckConvolutionWindow(p->sh, p->sw, p->ph, p->pw, p->dh, p->dw));
    if (p->kh * p->kw > kMaxKernelTaps) return InvalidArgument("kernels over 2048 taps are left to PyTorch");
    p->oh = (p->ih + 2 * p->ph - p->dh * (p->kh - 1) - 1) / p->sh + 1;
    p->ow = (p->iw + 2 * p->pw - p->dw * (p->kw - 1) - 1) / p->sw + 1;
    if (p->ih + 2 * p->ph < p->dh * (p->kh - 1) + 1 || p->iw + 2 * p->pw < p->dw * (p->kw - 1) + 1 || p->oh < 1 ||
        p->ow < 1) {
      return InvalidArgument("output size below 1: the kernel is larger than the padded input; PyTorch rejects it");
    }
    const int64_t int_max = std::numeric_limits<int32_t>::max();
    if (!p->cudnn && (x->numel() > int_max || p->numel_out() > int_max)) {
      return InvalidArgument("over 2^31 elements: _conv_depthwise2d needs 32-bit indexing; PyTorch rejects it");
    }
    if (p->numel_in() > (int64_t{1} << 40) || p->numel_out() > (int64_t{1} << 40)) return InvalidArgument("too large");
    p->dtype = x->dtype;
    if (x->alignment < p->elem()) return InvalidArgument("input not aligned to its element");
    p->alignment = x->alignment;
    p->op = call.op;
    std::ostringstream desc;
    desc << "depthwise_conv " << DTypeName(p->dtype) << (p->channels_last ? " channels_last" : " nchw") << " N=" << p->n
         << " C=" << p->c << " in=" << p->ih << "x" << p->iw << " out=" << p->oh << "x" << p->ow << " k=" << p->kh << "x"
         << p->kw << " s=" << p->sh << "x" << p->sw << " p=" << p->ph << "x" << p->pw << " d=" << p->dh << "x" << p->dw
         << (p->has_bias ? " bias" : "") << (p->cudnn ? " (cudnn_convolution)" : " (_conv_depthwise2d)");
    p->description = desc.str();
    return std::unique_ptr<Problem>(std::move(p));
  }

  Space MakeSpace(const Problem&, const DeviceFacts&) const override {
    Space s;
    s.family = "depthwise_conv";
    s.knobs = {
        {"strategy", {kDirect, kBlocked, kStaged, kSlide},
         "0 taps read from global memory per output, 1 input rows read once into registers for rows x outs "
         "outputs, 2 (NCHW) a block's input rows staged whole in shared memory, 3 (NCHW) a thread walks down "
         "rows x outs outputs, each input row loaded once in vec-element loads, halo columns from the "
         "neighbouring lanes by shuffle"},
        {"threads", {64, 128, 256, 512}, "threads per block"},
        {"outs", {1, 2, 4, 8}, "consecutive outputs along W per thread"},
        {"rows", {1, 2, 4, 8, 16, 32}, "output rows per thread (blocked, slide; over 8: slide only) or per block (staged)"},
        {"vec", {1, 2, 4, 8},
         "channels per thread (channels_last), or elements per load along W (staged: staging; slide: the row segment)"},
        {"hint", {0, 1}, "1: streaming (evict-first) stores, and staging loads"},
    };
    return s;
  }

  // Input rows under `rows` output rows; input columns under `outs` consecutive outputs.
  static int64_t RowsUnder(const ConvProblem& p, int64_t rows) { return (rows - 1) * p.sh + (p.kh - 1) * p.dh + 1; }
  static int64_t ColumnsUnder(const ConvProblem& p, int64_t outs) { return (outs - 1) * p.sw + (p.kw - 1) * p.dw + 1; }
  static int64_t StagedBytes(const ConvProblem& p, int64_t rows) { return RowsUnder(p, rows) * p.iw * p.elem(); }
  // Outputs along W stored together: the widest power of two dividing `outs` and the output rows, within
  // 16 bytes (rows starting at multiples of it keep the stores aligned).
  static int64_t StoreWidth(const ConvProblem& p, int64_t outs) {
    for (int64_t v : {8, 4, 2}) {
      if (outs % v == 0 && p.ow % v == 0 && v * p.elem() <= 16) return v;
    }
    return 1;
  }

  Status Check(const Problem& problem, const Point& pt, const DeviceFacts& dev) const override {
    const auto& p = static_cast<const ConvProblem&>(problem);
    const int64_t strategy = pt.at("strategy"), threads = pt.at("threads"), outs = pt.at("outs"), rows = pt.at("rows"),
                  vec = pt.at("vec");
    if (strategy != kDirect && strategy != kBlocked && strategy != kStaged && strategy != kSlide) {
      return InvalidArgument("unknown strategy");
    }
    KJIT_RETURN_IF_ERROR(codegen::CheckThreadsAndVector(threads, vec, p.elem(), dev));
    if (outs > p.ow) return InvalidArgument("more outputs per thread than the output row has");
    if (rows > p.oh) return InvalidArgument("more rows than the output has");
    const int64_t cv = p.channels_last ? vec : 1;  // channels per thread
    if (p.channels_last) {
      if (strategy == kStaged || strategy == kSlide) return InvalidArgument("staging and sliding are for the NCHW layout");
      if (p.c % vec != 0) return InvalidArgument("vector does not divide the channels");
      KJIT_RETURN_IF_ERROR(codegen::CheckVectorAligned(vec, p.elem(), p.alignment));
    } else if (strategy == kStaged) {
      if (p.iw % vec != 0) return InvalidArgument("vector does not divide the input rows");
      KJIT_RETURN_IF_ERROR(codegen::CheckVectorAligned(vec, p.elem(), p.alignment));
      if (StagedBytes(p, rows) > std::min<int64_t>(kMaxStagedBytes, dev.max_shared_bytes_per_block)) {
        return InvalidArgument("staged rows exceed the shared memory budget");
      }
    } else if (strategy == kSlide) {
      // A thread's segment: the outs * SW input columns starting at its first output's (its lanes'
      // neighbours hold the columns around it), in loads of vec elements that never straddle the row end.
      if ((outs * p.sw) % vec != 0) return InvalidArgument("vector does not divide the thread's outs x stride columns");
      if (p.iw % vec != 0) return InvalidArgument("vector does not divide the input rows");
      KJIT_RETURN_IF_ERROR(codegen::CheckVectorAligned(vec, p.elem(), p.alignment));
      if (threads % 32 != 0) return InvalidArgument("sliding needs whole warps (shuffles)");
    } else if (vec != 1) {
      return InvalidArgument("NCHW direct and blocked reads are one element (vectors: staged, slide, channels_last)");
    }
    if (strategy == kDirect && rows != 1) return InvalidArgument("rows apply to the blocked, staged and slide strategies");
    if (strategy != kSlide && rows > kMaxBlockedRows) return InvalidArgument("rows over 8 are for the slide strategy");
    // The loops over the input rows under a thread's (blocked) or a block's (staged) output rows are
    // unrolled or staged whole: rows a stride skips would cost code or shared memory for nothing.
    const bool overlap_rows = p.sh < (p.kh - 1) * p.dh + 1;
    if (strategy != kDirect && rows > 1 && !overlap_rows) {
      return InvalidArgument("windows do not overlap vertically: output rows share no input row");
    }
    if ((strategy == kBlocked || strategy == kSlide) && RowsUnder(p, rows) > kMaxRowsUnder) {
      return InvalidArgument("too many input rows under a thread's outputs");
    }
    const int64_t thread_rows = strategy == kBlocked || strategy == kSlide ? rows : 1;  // output rows one thread computes
    // Blocked and direct unroll their taps twice (edge and interior copies); slide once (predicated taps).
    if (thread_rows * outs * cv * p.kh * p.kw > kMaxUnrolledFmas) {
      return InvalidArgument("too many unrolled multiply-adds per thread");
    }
    // Slide: the output rows whose sums are open at once (a window's height over the stride), the segment,
    // the loaded columns and the weights, hoisted.
    const int64_t open_rows = std::min<int64_t>(rows, CeilDiv((p.kh - 1) * p.dh + 1, p.sh));
    const int64_t held = strategy == kDirect  ? outs * cv
                         : strategy == kSlide ? open_rows * outs + ColumnsUnder(p, outs) + outs * p.sw + p.kh * p.kw
                                              : (thread_rows * outs + ColumnsUnder(p, outs)) * cv;
    if (held > kMaxHeldFloats) return InvalidArgument("too many values held per thread");
    const int64_t groups = CeilDiv(p.ow, outs);
    const int64_t max_grid = std::numeric_limits<int32_t>::max();
    if (strategy == kStaged) {
      if (threads > 64 && rows * groups <= threads / 2) return InvalidArgument("most threads would idle");
      if (p.n * p.c * CeilDiv(p.oh, rows) > max_grid) return InvalidArgument("grid too large");
      return Status::Ok();
    }
    const int64_t items = p.n * (p.c / cv) * CeilDiv(p.oh, thread_rows) * groups;
    if (threads > 64 && items <= threads / 2) return InvalidArgument("most threads would idle");
    if (CeilDiv(items, threads) > max_grid) return InvalidArgument("grid too large");
    return Status::Ok();
  }

  Point ExpertDefault(const Problem& problem, const DeviceFacts& dev) const override {
    const auto& p = static_cast<const ConvProblem&>(problem);
    // Streaming stores where the tensors outgrow L2 (50 MB on the H200): the output is not read here.
    const int64_t hint = (p.numel_in() + p.numel_out()) * p.elem() > (int64_t{64} << 20);
    auto widest = [&](int64_t extent) {
      for (int64_t v : {8, 4, 2}) {
        if (v * p.elem() <= 16 && v * p.elem() <= p.alignment && extent % v == 0) return v;
      }
      return int64_t{1};
    };
    auto point = [&](int64_t strategy, int64_t threads, int64_t outs, int64_t rows, int64_t vec) {
      return Point{{"strategy", strategy}, {"threads", threads}, {"outs", outs},
                   {"rows", rows},         {"vec", vec},         {"hint", hint}};
    };
    // Windows overlapping vertically read each input row for several output rows: worth holding.
    const bool overlap_rows = p.sh < (p.kh - 1) * p.dh + 1;
    std::vector<Point> tries;
    // Measured on the H200 (3x3, 32x128x128x128, NVRTC through CuPy, median of 30 with L2 flushed,
    // 2026-12-01): blocked beat staged and direct in both layouts. f32 NCHW: blocked 8 rows x 4 outputs,
    // 128 threads 179 us (4 rows x 4: 176-188, 8 outputs: 210), staged 290 us (4 outputs a thread: 330),
    // direct 460 us; eager 622-664, torch.compile 462, floor 129. bf16 NCHW: 4 rows x 8 outputs 132 us,
    // x 4: 150, staged 292 (compile 271, floor 64). channels_last f32: 16-byte vectors, 4 rows x 2 outputs,
    // 64 threads 165 us, 2 x 2 with 8-byte vectors and 256 threads 167; direct 664 (cuDNN 184-204).
    // channels_last bf16: 4 channels (8 bytes) 4 rows x 2 outputs, 64 threads 107 us, 2 channels 104,
    // 8 channels (16 bytes) 152 (cuDNN 114-129, floor 64): 4 channels a thread, whatever the dtype (the
    // registers of the f32 point).
    if (p.channels_last) {
      const int64_t v = std::min<int64_t>(widest(p.c), 4);
      for (int64_t rows : {4, 2, 1}) {
        if (rows > 1 && !overlap_rows) continue;
        for (int64_t threads : {64, 128}) tries.push_back(point(kBlocked, threads, 2, rows, v));
      }
      tries.push_back(point(kDirect, 64, 1, 1, v));
    } else {
      // Slide (codegen 2, not yet measured on the H200): what the blocked point's 1.27x of the floor on the
      // headroom shape left, a thread walking down 16 output rows of 16 bytes along W (4 f32, 8 f16/bf16),
      // each input row loaded once as one aligned vector (the halo columns from the neighbouring lanes),
      // so every input byte is read once plus the two halo rows of each 16-row tile, with 16-byte loads
      // and stores. Where the rows allow no vector (odd W: 127) it loads elements, still each once. Stride 1
      // along W (a neighbour's columns are the halo); rows: the largest of 16, 8, 4 leaving under an
      // eighth of the last tile idle (56 rows: 8).
      if (p.sw == 1 && overlap_rows) {
        const int64_t o = 16 / p.elem();
        const int64_t v = std::min<int64_t>(widest(std::gcd(p.iw, o)), o);
        for (int64_t rows : {16, 8, 4, 2}) {
          if (rows > 2 && (CeilDiv(p.oh, rows) * rows - p.oh) * 8 > p.oh) continue;
          tries.push_back(point(kSlide, 128, o, rows, v));
        }
      }
      // Rows of outputs a thread: each input row is read once for up to KH of them; 16 bytes of
      // outputs along W (4 f32, 8 f16/bf16) share their input columns in registers.
      const int64_t outs = 16 / p.elem() / std::max<int64_t>(1, p.sw);
      // 8 rows measured best for f32, 4 for bf16.
      const std::vector<int64_t> row_choices =
          p.elem() == 4 ? std::vector<int64_t>{8, 4, 2, 1} : std::vector<int64_t>{4, 8, 2, 1};
      for (int64_t o : {outs, outs / 2, int64_t{2}, int64_t{1}}) {
        if (o < 1) continue;
        for (int64_t rows : row_choices) {
          if (rows > 1 && !overlap_rows) continue;
          for (int64_t threads : {128, 64}) tries.push_back(point(kBlocked, threads, o, rows, 1));
        }
      }
    }
    tries.push_back(point(kDirect, 64, 1, 1, 1));
    for (const Point& t : tries) {
      if (Check(problem, t, dev).ok()) return t;
    }
    return tries.back();
  }

  Result<Candidate> Generate(const Problem& problem, const Point& pt, const DeviceFacts& dev) const override {
    KJIT_RETURN_IF_ERROR(Check(problem, pt, dev));
    const auto& p = static_cast<const ConvProblem&>(problem);
    const int64_t strategy = pt.at("strategy"), threads = pt.at("threads"), outs = pt.at("outs"), rows = pt.at("rows"),
                  vec = pt.at("vec"), hint = pt.at("hint");
    const bool wide = std::max(p.numel_in(), p.numel_out()) >= (int64_t{1} << 31) - 4096;
    const int64_t cv = p.channels_last ? vec : 1;
    const int64_t thread_rows = strategy == kBlocked || strategy == kSlide ? rows : 1;
    std::ostringstream src;
    src << codegen::SourceHead(*this, p, pt, dev);
    src << "typedef " << CudaType(p.dtype) << " in_t;\ntypedef in_t out_t;\n";
    // Sizes fit int unless the tensors are near 2^31 elements: 32-bit index arithmetic is cheaper.
    src << "typedef " << (wide ? "long long" : "int") << " idx_t;\n";
    src << "#define VEC " << vec << "\n#define HINT " << hint << "\n#define HAS_BIAS " << (p.has_bias ? 1 : 0) << "\n";
    src << "constexpr idx_t N_ = " << p.n << ", C_ = " << p.c << ", IH = " << p.ih << ", IW = " << p.iw << ", OH = " << p.oh
        << ", OW = " << p.ow << ";\n";
    src << "constexpr int KH = " << p.kh << ", KW = " << p.kw << ";\n";
    src << "constexpr idx_t SH = " << p.sh << ", SW = " << p.sw << ", PH = " << p.ph << ", PW = " << p.pw
        << ", DH = " << p.dh << ", DW = " << p.dw << ";\n";
    src << "constexpr int THREADS = " << threads << ", OUTS = " << outs << ", ROWS = " << thread_rows
        << ", CV = " << cv << ", STORE_W = " << (p.channels_last ? 1 : StoreWidth(p, outs)) << ";\n";
    src << codegen::kElementAccess << codegen::kRawAccess << kPrelude;
    // ABI: tensors in argument order (an absent bias is a null pointer), then the output.
    const std::string params = p.cudnn ? "const in_t* __restrict__ x, const in_t* __restrict__ wt, out_t* __restrict__ y"
                                       : "const in_t* __restrict__ x, const in_t* __restrict__ wt, "
                                         "const in_t* __restrict__ bias, out_t* __restrict__ y";
    const char* bias_of = p.has_bias ? "Bits<in_t>::to_f(__ldg(reinterpret_cast<const raw_t*>(bias) + (ch)))" : "0.f";
    src << "#define BIAS_OF(ch) (" << bias_of << ")\n";
    Candidate c;
    c.entry_point = "kjit_depthwise_conv";
    c.launch.block[0] = static_cast<uint32_t>(threads);
    const int64_t groups = CeilDiv(p.ow, outs);
    const char* compute = strategy == kDirect ? "conv_direct<EDGE>(oh0, ow0, load, weight, acc)"
                                              : "conv_block<ROWS, EDGE>(oh0, ow0, load, weight, acc)";
    // The kernel's parameters and its window computation as macros, so that each strategy's CUDA is one section.
    src << "#define KJIT_PARAMS " << params << "\n#define KJIT_COMPUTE " << compute << "\n";
    if (strategy == kSlide) {
      src << "#define KJIT_BIAS " << (p.cudnn ? "nullptr" : "bias") << "\n" << kSlideKernel << kSlideEntry;
      c.launch.grid[0] = static_cast<uint32_t>(CeilDiv(p.n * p.c * CeilDiv(p.oh, rows) * groups, threads));
    } else if (!p.channels_last && strategy != kStaged) {
      src << kRowsKernel;
      c.launch.grid[0] = static_cast<uint32_t>(CeilDiv(p.n * p.c * CeilDiv(p.oh, thread_rows) * groups, threads));
    } else if (p.channels_last) {
      src << kChannelsLastKernel;
      c.launch.grid[0] = static_cast<uint32_t>(CeilDiv(p.n * (p.c / cv) * CeilDiv(p.oh, thread_rows) * groups, threads));
    } else {
      src << "constexpr int TILE_ROWS = " << rows << ";\n";
      src << kStagedKernel;
      c.launch.grid[0] = static_cast<uint32_t>(p.n * p.c * CeilDiv(p.oh, rows));
      c.launch.dynamic_shared_bytes = static_cast<uint32_t>(StagedBytes(p, rows));
    }
    c.source = src.str();
    codegen::FinishCandidate(*this, pt, c);
    return c;
  }
};

}  // namespace

const Family* DepthwiseConvFamily() {
  static const DepthwiseConv family;
  return &family;
}

}  // namespace kjit::policy
