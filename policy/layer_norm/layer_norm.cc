#include "layer_norm/layer_norm.h"

#include "src/codegen.h"

#include <algorithm>
#include <cstring>
#include <sstream>

namespace kjit::policy {
namespace {

using codegen::CeilDiv;
using codegen::CudaType;

// What PyTorch 2.11's CUDA kernels return (aten/src/ATen/native/cuda/layer_norm_kernel.cu):
//   native_layer_norm(Tensor input, SymInt[] normalized_shape, Tensor? weight, Tensor? bias, float eps)
//     -> (Tensor out, Tensor mean, Tensor rstd)
//   _fused_rms_norm(Tensor input, int[] normalized_shape, Tensor? weight, float? eps) -> (Tensor out, Tensor rstd)
// layer_norm_cuda allocates mean and rstd as at::empty({M}, dtype = acc_type(input, is_cuda=true)),
// which is float32 for float32, float16 and bfloat16, and returns them viewed as
// input.sizes()[:axis] + [1] * len(normalized_shape): M contiguous floats either way, which is all
// a kernel sees. Statistics are the biased variance (M2 / N) and rstd = rsqrt(var + eps) with eps
// cast to float; y = gamma * (rstd * (x - mean)) + beta in float, rounded once to the input dtype.
// _fused_rms_norm_cuda does the same with rstd = rsqrt(mean(x^2) + eps) and y = gamma * (rstd * x).
//
// The ABI (daemon/worker_protocol.h): one pointer per tensor argument, a None weight or bias
// passed as a null pointer, then the outputs:
//   layer_norm: (x, weight|null, bias|null, y, mean, rstd)
//   rms_norm:   (x, weight|null, y, rstd)
// Weight and bias presence is part of the key, so the source is specialised on it and never
// reads a null pointer.

enum Strategy : int64_t {
  kWarp = 0,
  kRegs = 1,
  kSmem = 2,
  kOnline = 3,
};

enum Stats : int64_t {
  kTwoPass = 0,
  kWelford = 1,
};

constexpr int64_t kMaxRegisterFloats = 64;   // per thread, for the row-in-registers strategies
constexpr int64_t kReductionScratch = 1024;  // shared bytes kept for block reductions

struct NormProblem : Problem {
  bool rms = false;
  DType dtype = DType::kFloat32;
  int64_t rows = 1, len = 1;  // M, N
  bool has_weight = false, has_bias = false;
  float eps = 0;
  int alignment = 16;  // the least of the input's, weight's and bias's data pointer alignments
};

// The kernels' CUDA, from layer_norm.cuh (kjit_embed_cuda): kPrelude, kHeldKernel, kStreamedKernel.
#include "kjit/cuda/layer_norm.cuh.inc"
class LayerNorm final : public Family {
 public:
  std::string_view name() const override { return "layer_norm"; }
  // 2: Welford states carry the sum (the mean is s / n), held values' statistics
  // in up to four partial sums (codegen.cc), no division per element.
  int codegen_version() const override { return 2; }
  std::vector<std::string> ops() const override { return {"aten::native_layer_norm", "aten::_fused_rms_norm"}; }

  OpTraits traits(std::string_view op) const override {
    OpTraits t;
    if (op == "aten::native_layer_norm") {
      // The mean of a row holding +-Inf (and no NaN) is Inf or NaN in PyTorch
      // depending on where the Inf falls in its Welford merge order (inf - inf
      // when a finite value follows it in one thread's sequence); no kernel can
      // match that, so special values are not fed to this op. y and rstd are
      // NaN for such rows either way.
      t.special_values = false;
    }
    // Default assert_close tolerances per dtype: y is rounded once from float;
    // mean and rstd are float32 reductions in a different order.
    return t;
  }

  std::vector<OpKey> SampleKeys() const override {
    auto ln = [](DType dt, std::vector<int64_t> sizes, std::vector<int64_t> shape, bool weight, bool bias) {
      std::vector<Arg> args;
      args.push_back(TensorDesc::Contiguous(dt, sizes));
      args.push_back(IntList(shape));
      args.push_back(weight ? Arg(TensorDesc::Contiguous(dt, shape)) : Arg(NoneArg{}));
      args.push_back(bias ? Arg(TensorDesc::Contiguous(dt, shape)) : Arg(NoneArg{}));
      args.push_back(1e-5);
      return OpKey::Single("aten::native_layer_norm", "", std::move(args), 90);
    };
    auto rms = [](DType dt, std::vector<int64_t> sizes, std::vector<int64_t> shape, bool weight) {
      std::vector<Arg> args;
      args.push_back(TensorDesc::Contiguous(dt, sizes));
      args.push_back(IntList(shape));
      args.push_back(weight ? Arg(TensorDesc::Contiguous(dt, shape)) : Arg(NoneArg{}));
      args.push_back(1e-6);
      return OpKey::Single("aten::_fused_rms_norm", "", std::move(args), 90);
    };
    return {
        ln(DType::kFloat32, {65536, 1024}, {1024}, true, true),
        ln(DType::kFloat16, {4096, 4096}, {4096}, true, true),
        ln(DType::kBFloat16, {8192, 768}, {768}, false, false),
        ln(DType::kFloat32, {128, 50000}, {50000}, true, false),
        ln(DType::kFloat32, {32, 7, 33}, {33}, true, true),
        rms(DType::kBFloat16, {16384, 4096}, {4096}, true),
        rms(DType::kFloat32, {8, 128, 96}, {128, 96}, false),
    };
  }

  Result<std::unique_ptr<Problem>> Match(const OpKey& key) const override {
    if (key.calls.size() != 1) return InvalidArgument("a single call is needed");
    const OpCall& c = key.calls[0];
    auto p = std::make_unique<NormProblem>();
    if (c.op == "aten::_fused_rms_norm") {
      p->rms = true;
    } else if (c.op != "aten::native_layer_norm") {
      return InvalidArgument("not a layer_norm or rms_norm");
    }
    if (!c.overload.empty() || c.args.size() != (p->rms ? 4u : 5u)) {
      return InvalidArgument("unexpected overload or arguments");
    }
    const auto* x = std::get_if<TensorDesc>(&c.args[0]);
    const auto* shape = std::get_if<IntList>(&c.args[1]);
    if (!x || !shape) return InvalidArgument("arguments are not (Tensor, int[], ...)");
    double eps = 0;
    if (p->rms) {
      const auto* e = std::get_if<double>(&c.args[3]);
      // eps=None: PyTorch substitutes a default epsilon inside the fused CUDA
      // op; until that value is pinned against PyTorch 2.11 on the GPU, such
      // calls stay with PyTorch rather than risk a wrong default.
      if (!e) return InvalidArgument("rms_norm with eps None is left to PyTorch");
      eps = *e;
    } else {
      const auto* e = std::get_if<double>(&c.args[4]);
      if (!e) return InvalidArgument("eps is not a float");
      eps = *e;
    }
    if (x->dtype != DType::kFloat32 && x->dtype != DType::kFloat16 && x->dtype != DType::kBFloat16) {
      return InvalidArgument("dtype " + std::string(DTypeName(x->dtype)) + " is not served");
    }
    if (!x->is_contiguous()) return InvalidArgument("non-contiguous inputs are declined");
    if (x->numel() == 0) return codegen::DeclineEmpty();
    const size_t nd = x->sizes.size(), nn = shape->size();
    if (nn == 0 || nn > nd) return InvalidArgument("normalized_shape must be 1..ndim dims");
    for (size_t i = 0; i < nn; ++i) {
      if ((*shape)[i] != x->sizes[nd - nn + i]) return InvalidArgument("normalized_shape is not the input's trailing shape");
    }
    int alignment = x->alignment;
    auto param = [&](size_t index, const char* what, bool* present) -> Status {
      if (std::holds_alternative<NoneArg>(c.args[index])) {
        *present = false;
        return Status::Ok();
      }
      const auto* t = std::get_if<TensorDesc>(&c.args[index]);
      if (!t) return InvalidArgument(std::string(what) + " is not a tensor or None");
      if (t->dtype != x->dtype) return InvalidArgument(std::string(what) + " dtype differs from the input's");
      if (t->sizes != *shape) return InvalidArgument(std::string(what) + " shape is not normalized_shape");
      if (!t->is_contiguous()) return InvalidArgument(std::string("non-contiguous ") + what + " is declined");
      alignment = std::min<int>(alignment, t->alignment);
      *present = true;
      return Status::Ok();
    };
    KJIT_RETURN_IF_ERROR(param(2, "weight", &p->has_weight));
    if (!p->rms) KJIT_RETURN_IF_ERROR(param(3, "bias", &p->has_bias));
    int64_t n = 1;
    for (int64_t s : *shape) n *= s;
    p->len = n;
    p->rows = x->numel() / n;
    if (x->numel() > (int64_t{1} << 40)) return InvalidArgument("too large");
    if (p->len >= (int64_t{1} << 24)) return InvalidArgument("rows past 2^24 elements: float counts would be inexact");
    p->dtype = x->dtype;
    p->eps = static_cast<float>(eps);  // PyTorch casts eps to the accumulation type
    p->alignment = alignment;
    p->op = c.op;
    std::ostringstream desc;
    desc << (p->rms ? "rms_norm " : "layer_norm ") << DTypeName(p->dtype) << " rows=" << p->rows << " len=" << p->len
         << (p->has_weight ? " weight" : "") << (p->has_bias ? " bias" : "") << " eps=" << eps;
    p->description = desc.str();
    return std::unique_ptr<Problem>(std::move(p));
  }

  Space MakeSpace(const Problem&, const DeviceFacts&) const override {
    Space s;
    s.family = "layer_norm";
    s.knobs = {
        {"strategy", {kWarp, kRegs, kSmem, kOnline},
         "0 warp/row in registers, 1 block/row in registers, 2 block/row in shared memory, 3 block/row from global "
         "memory (two reads)"},
        {"threads", {32, 64, 128, 256, 512, 1024}, "threads per block"},
        {"vec", {1, 2, 4, 8}, "elements per vector load and store"},
        {"stats", {kTwoPass, kWelford},
         "0 two-pass mean then squared deviations (rms: sum of squares), 1 Welford with Chan merges"},
        {"hint", {0, 1}, "1: streaming cache hints (evict-first) on stores and on the last read"},
    };
    return s;
  }

  Status Check(const Problem& problem, const Point& pt, const DeviceFacts& dev) const override {
    const auto& p = static_cast<const NormProblem&>(problem);
    const int64_t strategy = pt.at("strategy"), threads = pt.at("threads"), vec = pt.at("vec"),
                  stats = pt.at("stats");
    const int64_t size = static_cast<int64_t>(DTypeSize(p.dtype));
    KJIT_RETURN_IF_ERROR(codegen::CheckThreadsAndVector(threads, vec, size, dev));
    KJIT_RETURN_IF_ERROR(codegen::CheckVectorAligned(vec, size, p.alignment, "input, weight or bias"));
    if (p.len % vec != 0) return InvalidArgument("vector does not divide the row");
    if (p.rms && stats != kTwoPass) return InvalidArgument("rms_norm has no mean: its statistic is one sum of squares");
    const int64_t smem_cap = dev.max_shared_bytes_per_block - kReductionScratch;
    switch (strategy) {
      case kWarp:
        if (CeilDiv(p.len, 32 * vec) * vec > kMaxRegisterFloats) return InvalidArgument("row too long for a warp");
        break;
      case kRegs:
        if (threads < 64) return InvalidArgument("use the warp strategy");
        if (CeilDiv(p.len, threads * vec) * vec > kMaxRegisterFloats) return InvalidArgument("row too long for registers");
        if (p.len * 2 < threads * vec) return InvalidArgument("most threads would idle");
        break;
      case kSmem:
        if (threads < 64) return InvalidArgument("use the warp strategy");
        if (p.len * 4 > smem_cap) return InvalidArgument("row larger than shared memory");
        if (p.len < threads * vec) return InvalidArgument("row shorter than one pass");
        break;
      case kOnline:
        if (threads < 64) return InvalidArgument("use the warp strategy");
        if (p.len < threads * vec) return InvalidArgument("row shorter than one pass");
        if (!p.rms && stats != kWelford) {
          return InvalidArgument("two-pass statistics need the row held (registers or shared memory)");
        }
        break;
      default:
        return InvalidArgument("unknown strategy");
    }
    const int64_t grid = strategy == kWarp ? CeilDiv(p.rows, threads / 32) : p.rows;
    if (grid > int64_t{2147483647}) return InvalidArgument("more blocks than the grid holds");
    return Status::Ok();
  }

  Point ExpertDefault(const Problem& problem, const DeviceFacts& dev) const override {
    auto widest = [&](Point pt) { return codegen::WidestValid(*this, problem, dev, std::move(pt)); };
    auto point = [](int64_t strategy, int64_t threads, int64_t stats, int64_t hint) {
      return Point{{"strategy", strategy}, {"threads", threads}, {"vec", 1}, {"stats", stats}, {"hint", hint}};
    };
    // Rows held in registers, two-pass statistics (as exact as Welford, fewer
    // divisions); a warp per row while a lane holds at most 32 elements.
    const std::vector<Point> tries = {
        point(kWarp, 128, kTwoPass, 0),
        point(kRegs, 256, kTwoPass, 0),
        point(kRegs, 512, kTwoPass, 0),
        point(kRegs, 1024, kTwoPass, 0),
        point(kSmem, 1024, kTwoPass, 0),
        point(kSmem, 512, kTwoPass, 0),
    };
    for (const Point& t : tries) {
      if (t.at("strategy") == kWarp) {
        Point w = widest(t);
        // Past 32 floats a lane, a block per row keeps fewer values live per thread.
        const auto& p = static_cast<const NormProblem&>(problem);
        if (Check(problem, w, dev).ok() && CeilDiv(p.len, 32 * w.at("vec")) * w.at("vec") <= 32) return w;
        continue;
      }
      Point w = widest(t);
      if (Check(problem, w, dev).ok()) return w;
    }
    const auto& p = static_cast<const NormProblem&>(problem);
    return widest(point(kOnline, 512, p.rms ? kTwoPass : kWelford, 1));
  }

  Result<Candidate> Generate(const Problem& problem, const Point& pt, const DeviceFacts& dev) const override {
    KJIT_RETURN_IF_ERROR(Check(problem, pt, dev));
    const auto& p = static_cast<const NormProblem&>(problem);
    const int64_t strategy = pt.at("strategy"), threads = pt.at("threads"), vec = pt.at("vec"),
                  stats = pt.at("stats"), hint = pt.at("hint");
    uint32_t eps_bits = 0;
    std::memcpy(&eps_bits, &p.eps, sizeof(eps_bits));
    std::ostringstream src;
    src << codegen::SourceHead(*this, p, pt, dev);
    src << "typedef " << CudaType(p.dtype) << " in_t;\ntypedef in_t out_t;\n";
    src << "#define VEC " << vec << "\n#define HINT " << hint << "\n";
    src << "constexpr bool RMS = " << (p.rms ? "true" : "false") << ", WELFORD = " << (stats == kWelford ? "true" : "false")
        << ";\n";
    src << "constexpr bool HAS_W = " << (p.has_weight ? "true" : "false")
        << ", HAS_B = " << (p.has_bias ? "true" : "false") << ";\n";
    src << "constexpr bool ROW_BY_WARP = " << (strategy == kWarp ? "true" : "false") << ";\n";
    src << "constexpr long long ROWS = " << p.rows << "LL, LEN = " << p.len << "LL;\n";
    src << "constexpr int THREADS = " << threads << ";\n";
    // eps by its float bits: exactly PyTorch's static_cast<float>(eps), whatever it is.
    src << "#define EPS __uint_as_float(" << eps_bits << "u)\n";
    src << codegen::kElementAccess << codegen::kReductions << kPrelude;
    // The same parameter list for every strategy: the kernel ABI.
    src << "#define KJIT_PARAMS const in_t* __restrict__ x, const in_t* __restrict__ w, "
        << (p.rms ? "" : "const in_t* __restrict__ b, ")
        << "in_t* __restrict__ y, " << (p.rms ? "" : "float* __restrict__ mean_out, ") << "float* __restrict__ rstd_out\n";
    // rms_norm has neither bias nor mean: name them so the shared bodies compile.
    if (p.rms) src << "#define KJIT_NO_BIAS_MEAN const in_t* b = nullptr; float* mean_out = nullptr; (void)b; (void)mean_out;\n";
    else src << "#define KJIT_NO_BIAS_MEAN\n";
    src << "#define KJIT_WRITE_STATS(row) do { if (!RMS) mean_out[row] = mean; rstd_out[row] = rstd; } while (0)\n";
    Candidate c;
    c.entry_point = "kjit_layer_norm";
    c.launch.block[0] = static_cast<uint32_t>(threads);
    switch (strategy) {
      case kWarp:
      case kRegs: {
        const bool warp = strategy == kWarp;
        const int64_t items = CeilDiv(p.len, (warp ? 32 : threads) * vec);
        src << "constexpr int ITEMS = " << items << ", STRIDE = " << (warp ? 32 : threads)
            << ", PARTIALS = " << codegen::HeldPartials(items * vec, threads) << ";\n" << codegen::kHeldValues << kHeldKernel;
        c.launch.grid[0] = static_cast<uint32_t>(warp ? CeilDiv(p.rows, threads / 32) : p.rows);
        break;
      }
      case kSmem:
      case kOnline: {
        const bool staged = strategy == kSmem;
        src << "#define STAGED " << (staged ? 1 : 0) << "\n" << kStreamedKernel;
        c.launch.grid[0] = static_cast<uint32_t>(p.rows);
        if (staged) c.launch.dynamic_shared_bytes = static_cast<uint32_t>(p.len * 4);
        break;
      }
      default:
        return InvalidArgument("unknown strategy");
    }
    c.source = src.str();
    codegen::FinishCandidate(*this, pt, c);
    return c;
  }
};

}  // namespace

const Family* LayerNormFamily() {
  static const LayerNorm family;
  return &family;
}

}  // namespace kjit::policy
