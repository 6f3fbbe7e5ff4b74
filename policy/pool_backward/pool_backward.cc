#include "pool_backward/pool_backward.h"

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

// The ABI (daemon/worker_protocol.h): one pointer per tensor argument, then the output:
//   avg: (grad_output, self, grad_input)   max: (grad_output, self, indices, grad_input)
// self's pointer is passed but never read: only its shape (the key's) matters.
//
// avg_pool3d_backward takes the same arguments with three values a list. PyTorch 2.11's CUDA kernel scatters
// where windows overlap (AvgPool3d.cu: each grad_output element added to its window's inputs with atomics in
// the gradient's dtype), so its sums have no fixed order; this family gathers each element's sum in float in a
// fixed order (pd, ph, pw) and rounds once, which verification judges with the dtype's tolerance like any other.
// max_pool3d_with_indices_backward likewise, though PyTorch scatters each gradient to its index wherever that is
// (DilatedMaxPool3d.cu) while this gather reads only the windows that hold an element: the two agree on the
// indices a forward max pool makes, so the evaluator makes them so (OpTraits::derived_inputs: the key's
// max_pool3d_with_indices on the generated self), not at random as for 2-D (whose PyTorch kernel gathers too).

constexpr const char* kAvgBackward = "aten::avg_pool2d_backward";
constexpr const char* kMaxBackward = "aten::max_pool2d_with_indices_backward";
constexpr const char* kAvg3dBackward = "aten::avg_pool3d_backward";
constexpr const char* kMax3dBackward = "aten::max_pool3d_with_indices_backward";
constexpr int64_t kMaxOutputsPerThread = 8;  // rows x outs accumulators a thread holds

struct PoolBackwardProblem : Problem {
  bool max = true;
  bool three_d = false;  // the depth fields below are 1 (padding 0) for 2-D pooling
  DType dtype = DType::kFloat32;
  int64_t n = 1, c = 1;
  int64_t d = 1, h = 1, w = 1, od = 1, oh = 1, ow = 1;
  int64_t kd = 1, kh = 1, kw = 1, sd = 1, sh = 1, sw = 1, pd = 0, ph = 0, pw = 0, dd = 1, dh = 1, dw = 1;
  bool ceil_mode = false;
  bool count_include_pad = true;
  int64_t divisor = 0;  // 0: none
  int64_t planes() const { return n * c; }
  int64_t in_numel() const { return n * c * d * h * w; }
  int64_t out_numel() const { return n * c * od * oh * ow; }
  // The extent of a window along D, H and W: (k - 1) * dilation + 1.
  int64_t ext_d() const { return (kd - 1) * dd + 1; }
  int64_t ext_h() const { return (kh - 1) * dh + 1; }
  int64_t ext_w() const { return (kw - 1) * dw + 1; }
};


// Whether every index the kernel forms fits a 32-bit int: thread items and plane offsets (at most the tensors'
// elements plus a block), rows and columns past the plane's (a thread's last rows and columns: up to 4 each),
// and the window arithmetic along H and W (positions plus padding, a window's extent and a stride). A margin of
// 2^20 stands over the small terms.
bool Wide(const PoolBackwardProblem& p) {
  const int64_t limit = int64_t{std::numeric_limits<int32_t>::max()} - (int64_t{1} << 20);
  const int64_t tensors = std::max(p.in_numel(), p.out_numel()) + 4 * (p.w + p.h + p.ow) + 1024 * 4;
  const int64_t along_h = p.h + 4 + 2 * p.ph + p.ext_h() + p.kh + p.sh + p.oh * p.sh;
  const int64_t along_w = p.w + 4 + 2 * p.pw + p.ext_w() + p.kw + p.sw + p.ow * p.sw;
  const int64_t along_d = p.d + 2 * p.pd + p.ext_d() + p.kd + p.sd + p.od * p.sd;
  return tensors >= limit || along_h >= limit || along_w >= limit || along_d >= limit ||
         p.kd * p.kh * p.kw >= limit;
}

// Thread items: a thread per rows x outs elements of a plane's depth slice.
int64_t Items(const PoolBackwardProblem& p, int64_t rows, int64_t outs) {
  return p.planes() * p.d * CeilDiv(p.h, rows) * CeilDiv(p.w, outs);
}

// The kernel's CUDA, from pool_backward.cuh (kjit_embed_cuda): kKernel.
#include "kjit/cuda/pool_backward.cuh.inc"
class PoolBackward final : public Family {
 public:
  std::string_view name() const override { return "pool_backward"; }
  int codegen_version() const override { return 1; }
  std::vector<std::string> ops() const override { return {kAvgBackward, kMaxBackward, kAvg3dBackward, kMax3dBackward}; }

  OpTraits traits(std::string_view op) const override {
    OpTraits t;
    // Each element's float sum runs in PyTorch's order (ph outer, pw inner) and is rounded once, as PyTorch's;
    // assert_close's defaults judge it.
    if (op == kMaxBackward) {
      // indices (argument 7) are flat positions within self's plane: [0, H x W) of self's last two dims.
      t.int_domains[7] = IntDomain{0, 0, 1, -2, 2};
    } else if (op == kMax3dBackward) {
      // indices as the forward op makes them from self: max_pool3d_with_indices(self, kernel_size, stride,
      // padding, dilation, ceil_mode)'s second output.
      t.derived_inputs[7] = DerivedInput{"aten::max_pool3d_with_indices", {1, 2, 3, 4, 5, 6}, 1};
    }
    return t;
  }

  std::vector<OpKey> SampleKeys() const override {
    constexpr DType f32 = DType::kFloat32, f16 = DType::kFloat16, bf16 = DType::kBFloat16;
    // The pooled shape of self (batched or not) for these arguments, as the keys' grad_output and indices.
    auto pooled_dims = [](size_t dims, const std::vector<int64_t>& self, IntList k, IntList s, IntList pad, IntList d,
                          bool ceil) {
      std::vector<int64_t> out = self;
      const size_t nd = self.size();
      for (size_t i = 0; i < dims; ++i) {
        const int64_t kk = k.size() == 1 ? k[0] : k[i];
        const int64_t ss = s.empty() ? kk : s.size() == 1 ? s[0] : s[i];
        const int64_t pp = pad.size() == 1 ? pad[0] : pad[i];
        const int64_t dd = d.size() == 1 ? d[0] : d[i];
        out[nd - dims + i] = codegen::PoolOutputSize(self[nd - dims + i], kk, pp, ss, dd, ceil);
      }
      return out;
    };
    // Keys of 2-D (dims 2) or 3-D (dims 3) pooling's backward.
    auto max_of = [&](size_t dims, DType dt, std::vector<int64_t> self, IntList k, IntList s, IntList pad, IntList d,
                      bool ceil) {
      const std::vector<int64_t> out = pooled_dims(dims, self, k, s, pad, d, ceil);
      return OpKey::Single(dims == 3 ? kMax3dBackward : kMaxBackward, "",
                           {TensorDesc::Contiguous(dt, out), TensorDesc::Contiguous(dt, self), k, s, pad, d, ceil,
                            TensorDesc::Contiguous(DType::kInt64, out)},
                           90);
    };
    auto avg_of = [&](size_t dims, DType dt, TensorDesc self, IntList k, IntList s, IntList pad, bool ceil,
                      bool include, Arg div) {
      const std::vector<int64_t> out = pooled_dims(dims, self.sizes, k, s, pad, {1}, ceil);
      return OpKey::Single(dims == 3 ? kAvg3dBackward : kAvgBackward, "",
                           {TensorDesc::Contiguous(dt, out), std::move(self), k, s, pad, ceil, include, std::move(div)},
                           90);
    };
    auto max = [&](DType dt, std::vector<int64_t> self, IntList k, IntList s, IntList pad, IntList d, bool ceil) {
      return max_of(2, dt, std::move(self), k, s, pad, d, ceil);
    };
    auto max3 = [&](DType dt, std::vector<int64_t> self, IntList k, IntList s, IntList pad, IntList d, bool ceil) {
      return max_of(3, dt, std::move(self), k, s, pad, d, ceil);
    };
    auto avg = [&](DType dt, TensorDesc self, IntList k, IntList s, IntList pad, bool ceil, bool include, Arg div) {
      return avg_of(2, dt, std::move(self), k, s, pad, ceil, include, std::move(div));
    };
    auto avg3 = [&](DType dt, std::vector<int64_t> self, IntList k, IntList s, IntList pad, bool ceil, bool include,
                    Arg div) {
      return avg_of(3, dt, TensorDesc::Contiguous(dt, std::move(self)), k, s, pad, ceil, include, std::move(div));
    };
    // avg_pool1d's view: [N, C, L] unsqueezed at -2 keeps L's stride for the new dim (contiguous all the same).
    auto one_d = [](DType dt, int64_t n, int64_t c, int64_t l) {
      TensorDesc t = TensorDesc::Contiguous(dt, {n, c, 1, l});
      t.strides = {c * l, l, l, 1};
      return t;
    };
    auto contiguous = [](DType dt, std::vector<int64_t> s) { return TensorDesc::Contiguous(dt, std::move(s)); };
    return {
        // The ResNet stem's max pool (k3 s2 p1 over 112 x 112), float32 and float16.
        max(f32, {32, 64, 112, 112}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, false),
        max(f16, {16, 64, 112, 112}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, false),
        // Odd sizes, dilation, ceil_mode, bfloat16; dilation 2 with stride 1.
        max(bf16, {3, 5, 17, 19}, {3, 2}, {2, 1}, {1, 0}, {2, 1}, true),
        max(f32, {8, 32, 33, 33}, {3}, {1}, {1}, {2}, false),
        // Unbatched, non-overlapping windows (stride omitted: the kernel's).
        max(f32, {64, 28, 28}, {2, 2}, {}, {0, 0}, {1, 1}, false),
        // A DenseNet transition's average pool (k2 s2).
        avg(f32, contiguous(f32, {32, 256, 56, 56}), {2, 2}, {2, 2}, {0, 0}, false, true, NoneArg{}),
        // ceil_mode with padding left out of the count; float16.
        avg(f16, contiguous(f16, {8, 32, 63, 65}), {3, 3}, {2, 2}, {1, 1}, true, false, NoneArg{}),
        // divisor_override, bfloat16.
        avg(bf16, contiguous(bf16, {4, 24, 15, 15}), {2, 3}, {2, 2}, {1, 1}, false, true, int64_t{5}),
        // A large window in bfloat16: 289 elements, a divisor bfloat16 rounds to 288.
        avg(bf16, contiguous(bf16, {2, 8, 40, 40}), {17, 17}, {8, 8}, {8, 8}, false, true, NoneArg{}),
        // avg_pool1d's unsqueezed view, odd length; unbatched float32 with overlapping windows.
        avg(f16, one_d(f16, 16, 32, 4097), {1, 3}, {1, 2}, {0, 1}, true, true, NoneArg{}),
        avg(f32, contiguous(f32, {16, 9, 11}), {3, 3}, {1, 1}, {1, 1}, false, false, NoneArg{}),
        // 3-D average pooling: non-overlapping (k2 s2) over a video network's 8 x 28 x 28, float32; a window of
        // three overlapping along every dim, ceil_mode; stride 1 with padding left out of the count, bfloat16;
        // unbatched with a divisor, float16.
        avg3(f32, {4, 64, 8, 28, 28}, {2}, {2}, {0}, false, true, NoneArg{}),
        avg3(f32, {2, 16, 9, 17, 19}, {3, 3, 2}, {2, 2, 1}, {1, 1, 0}, true, true, NoneArg{}),
        avg3(bf16, {2, 8, 7, 9, 11}, {3}, {1}, {1}, false, false, NoneArg{}),
        avg3(f16, {4, 6, 10, 10}, {2, 3, 3}, {2, 2, 2}, {1, 1, 1}, true, true, int64_t{7}),
        // 3-D max pooling: a video network's k3 s2 p1 over 16 x 56 x 56, float32; odd sizes, dilation along W,
        // ceil_mode, float16.
        max3(f32, {8, 32, 16, 56, 56}, {3}, {2}, {1}, {1}, false),
        max3(f16, {2, 16, 9, 17, 19}, {3, 2, 3}, {2, 1, 2}, {1, 0, 1}, {1, 1, 2}, true),
    };
  }

  Result<std::unique_ptr<Problem>> Match(const OpKey& key) const override {
    if (key.calls.size() != 1) return InvalidArgument("a single call is needed");
    const OpCall& call = key.calls[0];
    auto p = std::make_unique<PoolBackwardProblem>();
    if (call.op == kMaxBackward || call.op == kMax3dBackward) {
      p->max = true;
    } else if (call.op == kAvgBackward || call.op == kAvg3dBackward) {
      p->max = false;
    } else {
      return InvalidArgument("not a 2-D or 3-D pooling backward");
    }
    p->three_d = call.op == kAvg3dBackward || call.op == kMax3dBackward;
    const size_t dims = p->three_d ? 3 : 2;
    // avg: (grad_output, self, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override)
    // max: (grad_output, self, kernel_size, stride, padding, dilation, ceil_mode, indices)
    if (!call.overload.empty() || call.args.size() != 8) return InvalidArgument("unexpected overload or arguments");
    const auto* dy = std::get_if<TensorDesc>(&call.args[0]);
    const auto* x = std::get_if<TensorDesc>(&call.args[1]);
    if (!dy || !x) return InvalidArgument("grad_output or self is not a tensor");
    if (x->dtype != DType::kFloat32 && x->dtype != DType::kFloat16 && x->dtype != DType::kBFloat16) {
      return InvalidArgument("dtype " + std::string(DTypeName(x->dtype)) + " is not served");
    }
    if (dy->dtype != x->dtype) return InvalidArgument("grad_output's dtype differs from self's");
    const size_t nd = x->sizes.size();
    if (nd != dims + 1 && nd != dims + 2) {
      return InvalidArgument(p->three_d ? "self is neither [N, C, D, H, W] nor [C, D, H, W]"
                                        : "self is neither [N, C, H, W] nor [C, H, W]");
    }
    const bool batched = nd == dims + 2;
    for (size_t i = batched ? 1 : 0; i < nd; ++i) {
      if (x->sizes[i] <= 0) return InvalidArgument("empty non-batch dims: PyTorch rejects them");
    }
    if (x->numel() == 0) return codegen::DeclineEmpty();
    KJIT_ASSIGN_OR_RETURN(std::vector<int64_t> k, codegen::ExpandIntList(call.args[2], dims, "kernel_size", nullptr));
    KJIT_ASSIGN_OR_RETURN(std::vector<int64_t> s, codegen::ExpandIntList(call.args[3], dims, "stride", &k));
    KJIT_ASSIGN_OR_RETURN(std::vector<int64_t> pad, codegen::ExpandIntList(call.args[4], dims, "padding", nullptr));
    std::vector<int64_t> dil(dims, 1);
    if (p->max) {
      KJIT_ASSIGN_OR_RETURN(dil, codegen::ExpandIntList(call.args[5], dims, "dilation", nullptr));
      const auto* ceil = std::get_if<bool>(&call.args[6]);
      if (!ceil) return InvalidArgument("ceil_mode is not a bool");
      p->ceil_mode = *ceil;
    } else {
      const auto* ceil = std::get_if<bool>(&call.args[5]);
      if (!ceil) return InvalidArgument("ceil_mode is not a bool");
      p->ceil_mode = *ceil;
      const auto* include = std::get_if<bool>(&call.args[6]);
      if (!include) return InvalidArgument("count_include_pad is not a bool");
      p->count_include_pad = *include;
      const Arg& div = call.args[7];
      if (const auto* d = std::get_if<int64_t>(&div)) {
        if (*d == 0) return InvalidArgument("divisor_override 0: PyTorch rejects it");
        if (*d < std::numeric_limits<int32_t>::min() || *d > std::numeric_limits<int32_t>::max()) {
          return InvalidArgument("divisor_override out of int range");
        }
        p->divisor = *d;
      } else if (!std::holds_alternative<NoneArg>(div)) {
        return InvalidArgument("divisor_override is neither an int nor None");
      }
    }
    std::vector<int64_t> out(dims);
    int64_t window = 1;
    for (size_t i = 0; i < dims; ++i) {
      if (k[i] <= 0 || s[i] <= 0 || dil[i] <= 0) return InvalidArgument("kernel, stride and dilation must be positive");
      if (pad[i] < 0 || pad[i] > k[i] / 2) return InvalidArgument("padding must be within half the kernel: PyTorch rejects it");
      if (k[i] > 1024 || s[i] > (1 << 20) || dil[i] > (1 << 20)) return InvalidArgument("kernel, stride or dilation too large");
      out[i] = codegen::PoolOutputSize(x->sizes[nd - dims + i], k[i], pad[i], s[i], dil[i], p->ceil_mode);
      if (out[i] < 1) return InvalidArgument("output size below 1: PyTorch rejects it");
      window *= k[i];
    }
    if (window > 4096) return InvalidArgument("windows over 4096 elements are left to PyTorch");
    // Layout, as PyTorch picks its kernel (suggest_memory_format): its NCHW kernels for contiguous tensors.
    if (!x->is_contiguous()) {
      if (batched && !p->three_d && codegen::IsChannelsLast(*x)) {
        return InvalidArgument("channels_last: PyTorch's NHWC kernel, left to PyTorch: declined");
      }
      return InvalidArgument(p->three_d ? "self not contiguous: declined"
                                        : "self neither contiguous nor channels_last: declined");
    }
    std::vector<int64_t> pooled = x->sizes;
    for (size_t i = 0; i < dims; ++i) pooled[nd - dims + i] = out[i];
    if (dy->sizes != pooled) return InvalidArgument("grad_output is not self's pooled shape");
    if (!dy->is_contiguous()) return InvalidArgument("non-contiguous grad_output is declined");
    if (dy->alignment < static_cast<int>(DTypeSize(x->dtype))) return InvalidArgument("grad_output unaligned");
    if (p->max) {
      const auto* ind = std::get_if<TensorDesc>(&call.args[7]);
      if (!ind) return InvalidArgument("indices is not a tensor");
      if (ind->dtype != DType::kInt64) return InvalidArgument("indices are not int64");
      if (ind->sizes != pooled) return InvalidArgument("indices are not self's pooled shape");
      if (!ind->is_contiguous()) return InvalidArgument("non-contiguous indices are declined");
      if (ind->alignment < 8) return InvalidArgument("indices unaligned");
    }
    p->dtype = x->dtype;
    p->n = batched ? x->sizes[0] : 1;
    p->c = x->sizes[batched ? 1 : 0];
    p->h = x->sizes[nd - 2];
    p->w = x->sizes[nd - 1];
    p->oh = out[dims - 2];
    p->ow = out[dims - 1];
    p->kh = k[dims - 2];
    p->kw = k[dims - 1];
    p->sh = s[dims - 2];
    p->sw = s[dims - 1];
    p->ph = pad[dims - 2];
    p->pw = pad[dims - 1];
    p->dh = dil[dims - 2];
    p->dw = dil[dims - 1];
    if (p->three_d) {
      p->d = x->sizes[nd - 3];
      p->od = out[0];
      p->kd = k[0];
      p->sd = s[0];
      p->pd = pad[0];
      p->dd = dil[0];
    }
    if (p->in_numel() > (int64_t{1} << 40) || p->out_numel() > (int64_t{1} << 40)) return InvalidArgument("too large");
    p->op = call.op;
    std::ostringstream desc;
    const char* name = p->three_d ? (p->max ? "max_pool3d_backward " : "avg_pool3d_backward ")
                                  : (p->max ? "max_pool2d_backward " : "avg_pool2d_backward ");
    desc << name << DTypeName(p->dtype) << (batched ? "" : " unbatched") << " N=" << p->n << " C=" << p->c;
    if (p->three_d) {
      desc << " in=" << p->d << "x" << p->h << "x" << p->w << " out=" << p->od << "x" << p->oh << "x" << p->ow
           << " k=" << p->kd << "x" << p->kh << "x" << p->kw << " s=" << p->sd << "x" << p->sh << "x" << p->sw
           << " p=" << p->pd << "x" << p->ph << "x" << p->pw;
      if (p->max) desc << " d=" << p->dd << "x" << p->dh << "x" << p->dw;
    } else {
      desc << " in=" << p->h << "x" << p->w << " out=" << p->oh << "x" << p->ow << " k=" << p->kh << "x" << p->kw
           << " s=" << p->sh << "x" << p->sw << " p=" << p->ph << "x" << p->pw;
      if (p->max) desc << " d=" << p->dh << "x" << p->dw;
    }
    if (p->ceil_mode) desc << " ceil";
    if (!p->max) desc << (p->count_include_pad ? " include_pad" : " exclude_pad");
    if (p->divisor) desc << " divisor=" << p->divisor;
    p->description = desc.str();
    return std::unique_ptr<Problem>(std::move(p));
  }

  Space MakeSpace(const Problem&, const DeviceFacts&) const override {
    Space s;
    s.family = "pool_backward";
    s.knobs = {
        {"threads", {64, 128, 256, 512, 1024}, "threads per block"},
        {"outs", {1, 2, 4}, "consecutive grad_input elements along W per thread (one vector store where outs divides W)"},
        {"rows", {1, 2, 4}, "consecutive grad_input rows per thread (each grad_output read once for all of them)"},
        {"hint", {0, 1}, "1: streaming (evict-first) stores of grad_input"},
    };
    return s;
  }

  Status Check(const Problem& problem, const Point& pt, const DeviceFacts& dev) const override {
    const auto& p = static_cast<const PoolBackwardProblem&>(problem);
    const int64_t threads = pt.at("threads"), outs = pt.at("outs"), rows = pt.at("rows"), hint = pt.at("hint");
    const int64_t size = static_cast<int64_t>(DTypeSize(p.dtype));
    // outs elements are at most one 16-byte store (4 floats).
    KJIT_RETURN_IF_ERROR(codegen::CheckThreadsAndVector(threads, outs, size, dev));
    if (hint != 0 && hint != 1) return InvalidArgument("hint is 0 or 1");
    if (outs > p.w) return InvalidArgument("more outputs per thread than the input row has");
    if (rows > p.h) return InvalidArgument("more rows per thread than the plane has");
    if (rows * outs > kMaxOutputsPerThread) return InvalidArgument("too many outputs per thread");
    const int64_t items = Items(p, rows, outs);
    if (threads > 64 && items <= threads / 2) return InvalidArgument("most threads would idle");
    if (CeilDiv(items, threads) > std::numeric_limits<int32_t>::max()) return InvalidArgument("grid too large");
    return Status::Ok();
  }

  Point ExpertDefault(const Problem& problem, const DeviceFacts& dev) const override {
    const auto& p = static_cast<const PoolBackwardProblem&>(problem);
    const int64_t size = static_cast<int64_t>(DTypeSize(p.dtype));
    // Streaming stores where the tensors outgrow L2 (50 MB on the H200): grad_input is not read again here.
    const int64_t hint = (p.in_numel() + p.out_numel()) * size > (int64_t{64} << 20);
    // Two elements a thread along W where W is even (a 4- or 8-byte store; neighbours share a grad_output where
    // windows overlap), one row; 256 threads, fewer where the planes are small.
    const int64_t outs = p.w % 2 == 0 ? 2 : 1;
    std::vector<Point> tries;
    for (int64_t threads : {256, 128, 64}) {
      tries.push_back({{"threads", threads}, {"outs", outs}, {"rows", 1}, {"hint", hint}});
    }
    tries.push_back({{"threads", 64}, {"outs", 1}, {"rows", 1}, {"hint", hint}});
    for (const Point& t : tries) {
      if (Check(problem, t, dev).ok()) return t;
    }
    return tries.back();
  }

  Result<Candidate> Generate(const Problem& problem, const Point& pt, const DeviceFacts& dev) const override {
    KJIT_RETURN_IF_ERROR(Check(problem, pt, dev));
    const auto& p = static_cast<const PoolBackwardProblem&>(problem);
    const int64_t threads = pt.at("threads"), outs = pt.at("outs"), rows = pt.at("rows"), hint = pt.at("hint");
    const bool wide = Wide(p);
    std::ostringstream src;
    src << codegen::SourceHead(*this, p, pt, dev);
    src << "typedef " << CudaType(p.dtype) << " in_t;\ntypedef in_t out_t;\n";
    // 32-bit index arithmetic where every index fits (Wide): cheaper than 64-bit.
    src << "typedef " << (wide ? "long long" : "int") << " idx_t;\n";
    src << "#define VEC " << outs << "\n#define HINT " << hint << "\n#define IS_MAX " << (p.max ? 1 : 0)
        << "\n#define VEC_STORE " << (p.w % outs == 0 ? 1 : 0) << "\n#define COUNT_INCLUDE_PAD "
        << (p.count_include_pad ? 1 : 0) << "\n#define USE_DIVISOR " << (p.divisor != 0 ? 1 : 0)
        << "\n#define ROUND_QUOTIENT " << (p.dtype == DType::kFloat32 ? 0 : 1) << "\n";
    if (p.three_d) {
      src << "#define DIMS3 1\nconstexpr idx_t D = " << p.d << ", OD = " << p.od << ", KD = " << p.kd << ", SD = " << p.sd
          << ", PD = " << p.pd << ", EXT_D = " << p.ext_d() << ";\n";
    } else {
      src << "#define DIMS3 0\n";
    }
    src << "constexpr idx_t PLANES = " << p.planes() << ", H = " << p.h << ", W = " << p.w << ", OH = " << p.oh
        << ", OW = " << p.ow << ";\n";
    src << "constexpr idx_t KH = " << p.kh << ", KW = " << p.kw << ", SH = " << p.sh << ", SW = " << p.sw
        << ", PH = " << p.ph << ", PW = " << p.pw << ", EXT_H = " << p.ext_h() << ", EXT_W = " << p.ext_w()
        << ", DIVISOR = " << p.divisor << ";\n";
    src << "constexpr int THREADS = " << threads << ", OUTS = " << outs << ", ROWS = " << rows << ";\n";
    src << "#define KJIT_PARAMS const in_t* __restrict__ dy, const in_t* __restrict__ x, "
        << (p.max ? "const long long* __restrict__ ind, " : "") << "out_t* __restrict__ dx\n";
    src << codegen::kElementAccess << kKernel;
    Candidate c;
    c.entry_point = "kjit_pool_backward";
    c.launch.block[0] = static_cast<uint32_t>(threads);
    c.launch.grid[0] = static_cast<uint32_t>(CeilDiv(Items(p, rows, outs), threads));
    c.source = src.str();
    codegen::FinishCandidate(*this, pt, c);
    return c;
  }
};

}  // namespace

const Family* PoolBackwardFamily() {
  static const PoolBackward family;
  return &family;
}

}  // namespace kjit::policy
