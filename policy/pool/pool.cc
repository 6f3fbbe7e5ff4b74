#include "pool/pool.h"

#include "src/codegen.h"

#include <algorithm>
#include <limits>
#include <sstream>

namespace kjit::policy {
namespace {

using codegen::CeilDiv;
using codegen::CudaType;
using codegen::IsChannelsLast;

// What PyTorch 2.11 does on CUDA (aten/src/ATen/native/cuda/DilatedMaxPool2d.cu, DilatedMaxPool3d.cu,
// AvgPool2d.cu, AvgPool3d.cu, native/Pool.h):
//   - max_pool2d contiguous (max_pool_forward_nchw): maxval in scalar_t from -inf, maxidx starting at
//     the first window position at or past 0 (`while (hstart < 0) hstart += dilation`), update when
//     `val > maxval || isnan(val)`; channels_last (max_pool_forward_nhwc): the same test, but the
//     cached index starts at 0; max_pool3d (both layouts): as the contiguous 2-D kernel.
//   - avg_pool2d/3d: accscalar_t (float) sum over the window clipped to the input, divided by
//     divisor_override, or (count_include_pad) the window clipped to input + padding, or the
//     clipped window's size; an empty clipped window writes 0.
//   - outputs: max pooling 2-D and avg_pool2d in the input's suggested memory format (channels_last
//     stays channels_last); max_pool3d channels_last 3-D too; avg_pool3d always contiguous (the input
//     is made contiguous first); indices int64 laid out like the values.
//   - argument checks (pool2d_shape_check, pool3d_shape_check, pooling_output_shape): kernel, stride,
//     dilation > 0, 0 <= pad <= kernel / 2, every output size >= 1, non-batch input dims > 0.
//
// The ABI (daemon/worker_protocol.h): max: (x, out, indices); avg: (x, out).

enum Strategy : int64_t { kDirect = 0, kStaged = 1, kSliding = 2, kWarpRows = 3 };

constexpr int64_t kMaxStagedBytes = 64 * 1024;  // keeps three blocks per SM
constexpr int64_t kMaxLanes = 32;               // accumulators a thread holds (outs x vec)
constexpr int64_t kMaxSlidingOutputs = 16;      // sliding: outputs a thread holds (frames x rows x outs)
constexpr int64_t kMaxSlidingRows = 81;         // sliding: input rows a thread walks (unrolled)
constexpr int64_t kMaxSlidingSpan = 64;         // sliding: input columns a thread holds per row
constexpr int64_t kMaxWarpLoads = 9;            // warp rows: loads per lane per input row

// The sliding strategy's output frames per thread; 1 for points recorded before the knob existed.
int64_t Frames(const Point& pt) {
  auto it = pt.find("frames");
  return it == pt.end() ? 1 : it->second;
}
// The launch bounds' blocks an SM; 0 (none) for points recorded before the knob existed.
int64_t MinBlocks(const Point& pt) {
  auto it = pt.find("minb");
  return it == pt.end() ? 0 : it->second;
}

struct PoolProblem : Problem {
  bool max = true;
  bool three_d = false;
  bool channels_last = false;
  DType dtype = DType::kFloat32;
  int64_t n = 1, c = 1;
  int64_t in[3] = {1, 1, 1};   // D, H, W
  int64_t out[3] = {1, 1, 1};  // OD, OH, OW
  int64_t k[3] = {1, 1, 1}, s[3] = {1, 1, 1}, pad[3] = {0, 0, 0}, dil[3] = {1, 1, 1};
  bool ceil_mode = false;
  bool count_include_pad = true;
  int64_t divisor = 0;  // 0: none
  int alignment = 16;
  int64_t in_numel() const { return n * c * in[0] * in[1] * in[2]; }
  int64_t out_numel() const { return n * c * out[0] * out[1] * out[2]; }
};


// The kernels' CUDA, from pool.cuh (kjit_embed_cuda): kPrelude, kDirectKernel, kChannelsLastKernel,
// kSlidingKernel, kStagedKernel.
#include "kjit/cuda/pool.cuh.inc"
class Pool final : public Family {
 public:
  std::string_view name() const override { return "pool"; }
  int codegen_version() const override { return 4; }
  std::vector<std::string> ops() const override {
    return {"aten::max_pool2d_with_indices", "aten::max_pool3d_with_indices", "aten::avg_pool2d", "aten::avg_pool3d"};
  }

  OpTraits traits(std::string_view op) const override {
    OpTraits t;
    if (op.find("max_pool") != std::string_view::npos) {
      // The output is one of the inputs' elements (or -inf) and the index is chosen by PyTorch's
      // order, which is followed exactly: bitwise, NaN payloads and -0.0 included.
      t.compare = ComparePolicy::kBitwise;
    }
    // Average pooling sums in float32 in PyTorch's window order: assert_close's defaults.
    return t;
  }

  std::vector<OpKey> SampleKeys() const override {
    constexpr DType f32 = DType::kFloat32, f16 = DType::kFloat16, bf16 = DType::kBFloat16;
    auto contiguous = [](DType dt, std::vector<int64_t> s) { return TensorDesc::Contiguous(dt, std::move(s)); };
    auto channels_last = [](DType dt, std::vector<int64_t> s) {
      TensorDesc t = TensorDesc::Contiguous(dt, s);
      t.strides[1] = 1;
      int64_t stride = s[1];
      for (size_t d = s.size() - 1; d >= 2; --d) {
        t.strides[d] = stride;
        stride *= s[d];
      }
      t.strides[0] = stride;
      return t;
    };
    // The 1-D ops' view: [N, C, L] unsqueezed at -2 keeps L's stride for the new dim.
    auto one_d = [](DType dt, int64_t n, int64_t c, int64_t l) {
      TensorDesc t = TensorDesc::Contiguous(dt, {n, c, 1, l});
      t.strides = {c * l, l, l, 1};
      return t;
    };
    auto max = [](const char* op, TensorDesc x, IntList k, IntList s, IntList p, IntList d, bool ceil) {
      return OpKey::Single(op, "", {std::move(x), k, s, p, d, ceil}, 90);
    };
    auto avg = [](const char* op, TensorDesc x, IntList k, IntList s, IntList p, bool ceil, bool include, Arg div) {
      return OpKey::Single(op, "", {std::move(x), k, s, p, ceil, include, std::move(div)}, 90);
    };
    const char* max2 = "aten::max_pool2d_with_indices";
    const char* max3 = "aten::max_pool3d_with_indices";
    const char* avg2 = "aten::avg_pool2d";
    const char* avg3 = "aten::avg_pool3d";
    return {
        // The headroom cases.
        max(max2, contiguous(f32, {32, 64, 256, 256}), {3, 3}, {2, 2}, {1, 1}, {1, 1}, false),
        max(max3, contiguous(f32, {16, 32, 64, 128, 128}), {3, 3, 3}, {2, 2, 2}, {1, 1, 1}, {1, 1, 1}, false),
        avg(avg3, contiguous(f32, {16, 32, 64, 128, 128}), {3, 3, 3}, {2, 2, 2}, {1, 1, 1}, false, true, NoneArg{}),
        // channels_last, odd sizes, dilation, ceil_mode, each dtype.
        max(max2, channels_last(f16, {8, 64, 56, 56}), {3}, {2}, {1}, {1}, false),
        max(max2, contiguous(bf16, {3, 5, 17, 19}), {3, 2}, {2, 1}, {1, 0}, {2, 1}, true),
        max(max2, one_d(f32, 4, 7, 1001), {1, 4}, {1, 3}, {0, 2}, {1, 1}, true),
        // Unbatched, a window wholly outside the input (dilation 6 over a row of 5): -inf.
        max(max2, contiguous(f32, {3, 1, 5}), {1, 2}, {1, 1}, {0, 1}, {1, 6}, false),
        max(max3, channels_last(bf16, {2, 16, 9, 10, 11}), {2, 3, 3}, {2, 2, 1}, {1, 1, 1}, {1, 2, 1}, true),
        max(max3, contiguous(f16, {8, 5, 7, 9}), {2}, {}, {0}, {1}, true),
        avg(avg2, contiguous(f32, {8, 32, 63, 65}), {3, 3}, {2, 2}, {1, 1}, true, false, NoneArg{}),
        avg(avg2, channels_last(bf16, {4, 24, 15, 15}), {2, 3}, {2, 2}, {1, 1}, false, true, int64_t{5}),
        avg(avg2, one_d(f16, 16, 32, 4097), {1, 3}, {1, 2}, {0, 1}, true, true, NoneArg{}),
        avg(avg3, contiguous(f16, {2, 6, 9, 10, 11}), {3}, {1, 2, 2}, {1}, false, false, NoneArg{}),
        avg(avg3, contiguous(bf16, {4, 5, 6, 7}), {2, 2, 3}, {2}, {1, 0, 1}, true, true, int64_t{7}),
    };
  }

  Result<std::unique_ptr<Problem>> Match(const OpKey& key) const override {
    if (key.calls.size() != 1) return InvalidArgument("a single call is needed");
    const OpCall& call = key.calls[0];
    auto p = std::make_unique<PoolProblem>();
    if (call.op == "aten::max_pool2d_with_indices" || call.op == "aten::max_pool3d_with_indices") {
      p->max = true;
    } else if (call.op == "aten::avg_pool2d" || call.op == "aten::avg_pool3d") {
      p->max = false;
    } else {
      return InvalidArgument("not a pooling op with a CUDA kernel");
    }
    p->three_d = call.op.find("3d") != std::string::npos;
    if (!call.overload.empty() || call.args.size() != (p->max ? 6u : 7u)) {
      return InvalidArgument("unexpected overload or arguments");
    }
    const auto* x = std::get_if<TensorDesc>(&call.args[0]);
    if (!x) return InvalidArgument("self is not a tensor");
    if (x->dtype != DType::kFloat32 && x->dtype != DType::kFloat16 && x->dtype != DType::kBFloat16) {
      return InvalidArgument("dtype " + std::string(DTypeName(x->dtype)) + " is not served");
    }
    const size_t dims = p->three_d ? 3 : 2;
    const size_t nd = x->sizes.size();
    if (nd != dims + 1 && nd != dims + 2) return InvalidArgument("input rank does not fit the op");
    const bool batched = nd == dims + 2;
    for (size_t i = batched ? 1 : 0; i < nd; ++i) {
      if (x->sizes[i] <= 0) return InvalidArgument("empty non-batch dims: PyTorch rejects them");
    }
    if (x->numel() == 0) return codegen::DeclineEmpty();
    KJIT_ASSIGN_OR_RETURN(std::vector<int64_t> k, codegen::ExpandIntList(call.args[1], dims, "kernel_size", nullptr));
    KJIT_ASSIGN_OR_RETURN(std::vector<int64_t> s, codegen::ExpandIntList(call.args[2], dims, "stride", &k));
    KJIT_ASSIGN_OR_RETURN(std::vector<int64_t> pad, codegen::ExpandIntList(call.args[3], dims, "padding", nullptr));
    std::vector<int64_t> dil(dims, 1);
    size_t next = 4;
    if (p->max) {
      KJIT_ASSIGN_OR_RETURN(dil, codegen::ExpandIntList(call.args[next++], dims, "dilation", nullptr));
    }
    const auto* ceil = std::get_if<bool>(&call.args[next++]);
    if (!ceil) return InvalidArgument("ceil_mode is not a bool");
    p->ceil_mode = *ceil;
    if (!p->max) {
      const auto* include = std::get_if<bool>(&call.args[next++]);
      if (!include) return InvalidArgument("count_include_pad is not a bool");
      p->count_include_pad = *include;
      const Arg& div = call.args[next++];
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
    // Spatial dims into the last places of (D, H, W).
    const size_t off = 3 - dims;
    for (size_t i = 0; i < dims; ++i) {
      if (k[i] <= 0 || s[i] <= 0 || dil[i] <= 0) return InvalidArgument("kernel, stride and dilation must be positive");
      if (pad[i] < 0 || pad[i] > k[i] / 2) return InvalidArgument("padding must be within half the kernel: PyTorch rejects it");
      if (k[i] > 1024 || s[i] > (1 << 20) || dil[i] > (1 << 20)) return InvalidArgument("kernel, stride or dilation too large");
      p->k[off + i] = k[i];
      p->s[off + i] = s[i];
      p->pad[off + i] = pad[i];
      p->dil[off + i] = dil[i];
      p->in[off + i] = x->sizes[nd - dims + i];
      p->out[off + i] = codegen::PoolOutputSize(p->in[off + i], k[i], pad[i], s[i], dil[i], p->ceil_mode);
      if (p->out[off + i] < 1) return InvalidArgument("output size below 1: PyTorch rejects it");
    }
    if (p->k[0] * p->k[1] * p->k[2] > 4096) return InvalidArgument("windows over 4096 elements are left to PyTorch");
    p->n = batched ? x->sizes[0] : 1;
    p->c = x->sizes[batched ? 1 : 0];
    // Layout, as PyTorch picks it (suggest_memory_format; avg_pool3d always contiguous).
    const bool contiguous = x->is_contiguous();
    const bool cl = batched && IsChannelsLast(*x);
    if (contiguous) {
      // A tensor dense both ways (one element per plane, several channels) whose output has more:
      // which layout PyTorch gives the output depends on its stride heuristics; not pinned.
      const int64_t in_plane = p->in[0] * p->in[1] * p->in[2], out_plane = p->out[0] * p->out[1] * p->out[2];
      if (cl && p->c > 1 && in_plane == 1 && out_plane > 1) return InvalidArgument("ambiguous layout: declined");
    } else if (cl) {
      if (!p->max && p->three_d) return InvalidArgument("avg_pool3d makes channels_last inputs contiguous: declined");
      p->channels_last = true;
    } else {
      return InvalidArgument("input neither contiguous nor channels_last: declined");
    }
    if (p->in_numel() > (int64_t{1} << 40) || p->out_numel() > (int64_t{1} << 40)) return InvalidArgument("too large");
    p->dtype = x->dtype;
    p->alignment = x->alignment;
    p->op = call.op;
    std::ostringstream desc;
    desc << (p->max ? "max_pool" : "avg_pool") << (p->three_d ? "3d " : "2d ") << DTypeName(p->dtype)
         << (p->channels_last ? " channels_last" : "") << " N=" << p->n << " C=" << p->c << " in=" << p->in[0] << "x"
         << p->in[1] << "x" << p->in[2] << " out=" << p->out[0] << "x" << p->out[1] << "x" << p->out[2] << " k=" << p->k[0]
         << "x" << p->k[1] << "x" << p->k[2] << " s=" << p->s[0] << "x" << p->s[1] << "x" << p->s[2] << " p=" << p->pad[0]
         << "x" << p->pad[1] << "x" << p->pad[2];
    if (p->max) desc << " d=" << p->dil[0] << "x" << p->dil[1] << "x" << p->dil[2];
    if (p->ceil_mode) desc << " ceil";
    if (!p->max) desc << (p->count_include_pad ? " include_pad" : " exclude_pad");
    if (p->divisor) desc << " divisor=" << p->divisor;
    p->description = desc.str();
    return std::unique_ptr<Problem>(std::move(p));
  }

  Space MakeSpace(const Problem&, const DeviceFacts&) const override {
    Space s;
    s.family = "pool";
    s.knobs = {
        {"strategy", {kDirect, kStaged, kSliding, kWarpRows},
         "0 windows read from global memory, 1 (contiguous) a block's input rows staged in shared memory, 2 "
         "(contiguous) a thread per frames x rows x outs outputs reading each input row segment under them once, "
         "with vectors along W, 3 (contiguous, scalar) as 2, a warp reading its 32 threads' segments of a row "
         "together in coalesced loads and exchanging them by shuffles"},
        {"threads", {64, 128, 256, 512}, "threads per block"},
        {"outs", {1, 2, 4}, "consecutive outputs along W per thread"},
        {"vec", {1, 2, 4, 8},
         "elements per vector: channels per thread (channels_last), the staging loads along W (staged)"},
        {"rows", {1, 2, 4}, "output rows per block (staged), per thread (sliding)"},
        {"hint", {0, 1}, "1: streaming (evict-first) stores, and staging loads"},
        {"frames", {1, 2, 4}, "output frames (D) per thread (sliding; 1 otherwise)"},
        {"minb", {0, 1},
         "0: __launch_bounds__(threads), where the compiler keeps registers few for occupancy; 1: "
         "__launch_bounds__(threads, 1), registers up to one block an SM: more loads in flight a thread"},
    };
    // frames: added with codegen 2 (the sliding strategy); minb with codegen 4 (0: the launch bounds every
    // earlier point had).
    s.absent_as = {{"frames", 1}, {"minb", 0}};
    return s;
  }

  // Input rows a staged block of `rows` output rows needs, and the shared memory they take.
  static int64_t StagedRows(const PoolProblem& p, int64_t rows) { return (rows - 1) * p.s[1] + (p.k[1] - 1) * p.dil[1] + 1; }
  static int64_t StagedBytes(const PoolProblem& p, int64_t rows) {
    return p.k[0] * StagedRows(p, rows) * p.in[2] * static_cast<int64_t>(DTypeSize(p.dtype));
  }

  // Input positions along dim d (0 D, 1 H, 2 W) under `outs` consecutive outputs: a sliding thread's extent.
  static int64_t SlidingInput(const PoolProblem& p, int d, int64_t outs) {
    return (outs - 1) * p.s[d] + (p.k[d] - 1) * p.dil[d] + 1;
  }

  // Whether a sliding thread's row segment sits at the same offset from a vec boundary in every row
  // (vec divides the rows and the thread's step along W, the input aligned to vec elements): the
  // codegen-2 loads, scalar head, aligned middle, scalar tail, their offset a compile-time constant.
  // Otherwise (codegen 3) the offset is computed per row and the segment read in aligned vectors
  // from the boundary at or before it.
  static bool SegmentFixed(const PoolProblem& p, int64_t outs, int64_t vec) {
    return vec == 1 || (p.in[2] % vec == 0 && (outs * p.s[2]) % vec == 0 &&
                        vec * static_cast<int64_t>(DTypeSize(p.dtype)) <= p.alignment);
  }

  Status Check(const Problem& problem, const Point& pt, const DeviceFacts& dev) const override {
    const auto& p = static_cast<const PoolProblem&>(problem);
    const int64_t strategy = pt.at("strategy"), threads = pt.at("threads"), outs = pt.at("outs"), vec = pt.at("vec"),
                  rows = pt.at("rows");
    const int64_t size = static_cast<int64_t>(DTypeSize(p.dtype));
    const int64_t frames = Frames(pt);
    const bool sliding = strategy == kSliding || strategy == kWarpRows;
    if (strategy != kDirect && strategy != kStaged && !sliding) return InvalidArgument("unknown strategy");
    if (MinBlocks(pt) != 0 && MinBlocks(pt) != 1) return InvalidArgument("minb is 0 or 1");
    if (!sliding && frames != 1) return InvalidArgument("frames apply to the sliding strategy");
    KJIT_RETURN_IF_ERROR(codegen::CheckThreadsAndVector(threads, vec, size, dev));
    if (outs > p.out[2]) return InvalidArgument("more outputs per thread than the output row has");
    const int64_t groups = CeilDiv(p.out[2], outs);  // thread positions along an output row
    const int64_t max_grid = std::numeric_limits<int32_t>::max();
    if (strategy == kDirect) {
      if (rows != 1) return InvalidArgument("rows apply to the staged strategy");
      if (p.channels_last) {
        if (p.c % vec != 0) return InvalidArgument("vector does not divide the channels");
        KJIT_RETURN_IF_ERROR(codegen::CheckVectorAligned(vec, size, p.alignment));
      } else if (vec != 1) {
        return InvalidArgument("contiguous direct reads are one element (vectors: staged)");
      }
      if (outs * vec > kMaxLanes) return InvalidArgument("too many accumulators per thread");
      const int64_t items = p.n * (p.channels_last ? p.c / vec : p.c) * p.out[0] * p.out[1] * groups;
      if (threads > 64 && items <= threads / 2) return InvalidArgument("most threads would idle");
      if (CeilDiv(items, threads) > max_grid) return InvalidArgument("grid too large");
      return Status::Ok();
    }
    if (sliding) {
      if (p.channels_last) return InvalidArgument("sliding is for the contiguous layout");
      // Warp rows: the rows where vectors do not serve; a warp's loads are coalesced scalars already.
      if (strategy == kWarpRows && vec != 1) return InvalidArgument("warp rows load scalars (vectors: sliding)");
      if (strategy == kWarpRows) {
        if (threads % 32 != 0) return InvalidArgument("warp rows need whole warps");
        // Every column of a warp's segment is loaded: windows along W must leave no gaps between them.
        if (p.s[2] > SlidingInput(p, 2, 1)) return InvalidArgument("warp rows need windows that meet along W");
        // A lane's loads per row are registers, and the exchange's shuffles grow with their square.
        if (CeilDiv(31 * outs * p.s[2] + SlidingInput(p, 2, outs), 32) > kMaxWarpLoads) {
          return InvalidArgument("warp's row segment too long");
        }
      }
      // Any vector: where it does not divide the rows or the step, or the input is less aligned, the
      // segment's vectors start from the aligned boundary before it (SegmentFixed); the addresses
      // must be whole elements for that.
      if (vec > 1 && size > p.alignment) return InvalidArgument("input not aligned to its element");
      if (rows > p.out[1]) return InvalidArgument("more rows per thread than the output has");
      if (frames > p.out[0]) return InvalidArgument("more frames per thread than the output has");
      if (frames * rows * outs > kMaxSlidingOutputs) return InvalidArgument("too many outputs per thread");
      if (SlidingInput(p, 0, frames) * SlidingInput(p, 1, rows) > kMaxSlidingRows) {
        return InvalidArgument("too many input rows per thread");
      }
      if (SlidingInput(p, 2, outs) > kMaxSlidingSpan) return InvalidArgument("row segment too long for registers");
      // Warp rows pad each output row's groups to whole warps.
      const int64_t row_groups = strategy == kWarpRows ? CeilDiv(groups, 32) * 32 : groups;
      const int64_t items = p.n * p.c * CeilDiv(p.out[0], frames) * CeilDiv(p.out[1], rows) * row_groups;
      if (threads > 64 && items <= threads / 2) return InvalidArgument("most threads would idle");
      if (CeilDiv(items, threads) > max_grid) return InvalidArgument("grid too large");
      return Status::Ok();
    }
    if (p.channels_last) return InvalidArgument("staging is for the contiguous layout");
    if (p.in[2] % vec != 0) return InvalidArgument("vector does not divide the input rows");
    KJIT_RETURN_IF_ERROR(codegen::CheckVectorAligned(vec, size, p.alignment));
    if (rows > p.out[1]) return InvalidArgument("more rows per block than the output has");
    if (StagedBytes(p, rows) > std::min<int64_t>(kMaxStagedBytes, dev.max_shared_bytes_per_block)) {
      return InvalidArgument("staged rows exceed the shared memory budget");
    }
    if (threads > 64 && rows * groups <= threads / 2) return InvalidArgument("most threads would idle");
    if (p.n * p.c * p.out[0] * CeilDiv(p.out[1], rows) > max_grid) return InvalidArgument("grid too large");
    return Status::Ok();
  }

  Point ExpertDefault(const Problem& problem, const DeviceFacts& dev) const override {
    const auto& p = static_cast<const PoolProblem&>(problem);
    const int64_t size = static_cast<int64_t>(DTypeSize(p.dtype));
    // Streaming stores where the tensors outgrow L2 (50 MB on the H200): the outputs are not read again here.
    const int64_t hint = (p.in_numel() + p.out_numel()) * size > (int64_t{64} << 20);
    auto widest = [&](int64_t extent) {
      for (int64_t v : {8, 4, 2}) {
        if (v * size <= 16 && v * size <= p.alignment && extent % v == 0) return v;
      }
      return int64_t{1};
    };
    auto point = [&](int64_t strategy, int64_t threads, int64_t outs, int64_t vec, int64_t rows, int64_t frames = 1) {
      return Point{{"strategy", strategy}, {"threads", threads}, {"outs", outs},     {"vec", vec},
                   {"rows", rows},         {"hint", hint},       {"frames", frames}, {"minb", 0}};
    };
    std::vector<Point> tries;
    if (p.channels_last) {
      // Whole vectors of channels per thread: coalesced 16-byte reads of each window position.
      const int64_t v = widest(p.c);
      tries = {point(kDirect, 256, 1, v, 1), point(kDirect, 128, 1, v, 1), point(kDirect, 64, 1, 1, 1)};
    } else {
      // Overlapping windows (stride < extent) read most elements several times. Sliding: a thread
      // holds 8 outputs, 2 along W (or 1 where the output row is 1 wide) times 2 frames x 2 rows (3-D,
      // D overlapping) or 4 rows, and reads the input rows under them once, a segment each with the
      // widest vector along W its step allows (staging whole rows in shared memory measured no gain).
      // Windows that do not overlap read each element once anyway: direct.
      auto overlaps = [&](int d) { return p.s[d] < (p.k[d] - 1) * p.dil[d] + 1; };
      const bool overlap = overlaps(0) || overlaps(1) || overlaps(2);
      if (overlap) {
        const int64_t outs = p.out[2] >= 2 ? 2 : 1;
        auto sliding_vec = [&](int64_t o) {
          for (int64_t sv : {8, 4, 2, 1}) {
            if (sv * size <= 16 && sv * size <= p.alignment && p.in[2] % sv == 0 && (o * p.s[2]) % sv == 0) return sv;
          }
          return int64_t{1};
        };
        const int64_t sv = sliding_vec(outs);
        if (p.three_d && overlaps(0)) {
          // A thread walks 5 x 3 input rows here (k3 s2 over 2 frames x 1 row). Even rows: 16-byte
          // vectors over 2 frames x 1 row, 256 threads: searched on the H200 at codegen 4 (2026-12-04,
          // f32 8 and 16 x32x64x128x128, max and avg; 1 row beat 2 at every setting of the other knobs
          // screened) 1.02-1.03x the memory floor for max (735.6 and 373.4 us against 797.6 and 404.2
          // over 2 frames x 2 rows, 128 threads) and 0.99-1.02x for avg (587.0 against 625.8; 300.7
          // screened against 321.0). Odd rows (f32 15x32x63x127x127 on the H200 at codegen 3,
          // 2026-12-01; max: all 602 points screened, avg: 64 searched): codegen 3's aligned vectors
          // over odd rows lose to scalar loads (max at best 1.65x the floor with vec 2, 1.82x with
          // vec 4). Scalar loads, plain stores (streaming ones measured 3-5% slower): max is best over
          // 1 frame x 2 rows (1.22x; 2 frames 1.32x), avg over 4 frames x 2 rows (1.14x). Max with launch
          // bounds of one block an SM (minb 1): ptxas then takes 64 registers instead of 40 and keeps the
          // 15 rows' loads in flight (on the H200, 2026-12-04: 786.3 us against 814.5 at codegen 3, 748.4
          // against 756.6 at codegen 4, 1.13x the floor; avg over 4 frames lost with it, 824.2 against 613.8,
          // and over 1 or 2 frames, 653-659). Aligned keys: minb 1 slower or a tie on 10 of 11.
          if (sv > 1) {
            tries.push_back(point(kSliding, 256, outs, sv, 1, 2));
          } else {
            Point odd = point(kSliding, 128, outs, 1, 2, p.max ? 1 : 4);
            odd["hint"] = 0;
            odd["minb"] = p.max ? 1 : 0;
            tries.push_back(odd);
          }
          tries.push_back(point(kSliding, 128, outs, sv, 2, 1));
        }
        tries.push_back(point(kSliding, 128, outs, sv, 4, 1));
        tries.push_back(point(kSliding, 128, outs, sv, 2, 1));
        tries.push_back(point(kSliding, 128, outs, sv, 1, 1));
        tries.push_back(point(kSliding, 64, 1, 1, 1, 1));
      }
      tries.push_back(point(kDirect, 256, 2, 1, 1));
      tries.push_back(point(kDirect, 256, 1, 1, 1));
      tries.push_back(point(kDirect, 64, 1, 1, 1));
    }
    for (const Point& t : tries) {
      if (Check(problem, t, dev).ok()) return t;
    }
    return tries.back();
  }

  Result<Candidate> Generate(const Problem& problem, const Point& pt, const DeviceFacts& dev) const override {
    KJIT_RETURN_IF_ERROR(Check(problem, pt, dev));
    const auto& p = static_cast<const PoolProblem&>(problem);
    const int64_t strategy = pt.at("strategy"), threads = pt.at("threads"), outs = pt.at("outs"), vec = pt.at("vec"),
                  rows = pt.at("rows"), hint = pt.at("hint");
    const bool wide = std::max(p.in_numel(), p.out_numel()) >= (int64_t{1} << 31) - 4096;
    const int64_t cv = strategy == kDirect && p.channels_last ? vec : 1;  // channels per thread
    std::ostringstream src;
    src << codegen::SourceHead(*this, p, pt, dev);
    src << "typedef " << CudaType(p.dtype) << " in_t;\ntypedef in_t out_t;\n";
    // Sizes fit int unless the tensors are near 2^31 elements: 32-bit index arithmetic is cheaper.
    src << "typedef " << (wide ? "long long" : "int") << " idx_t;\n";
    src << "#define VEC " << vec << "\n#define HINT " << hint << "\n#define IS_MAX " << (p.max ? 1 : 0) << "\n";
    src << "#define EMPTY_INDEX_ZERO " << (p.max && p.channels_last && !p.three_d ? 1 : 0) << "\n";
    src << "#define COUNT_INCLUDE_PAD " << (p.count_include_pad ? 1 : 0) << "\n#define DIVISOR " << p.divisor << "\n";
    src << "constexpr idx_t N_ = " << p.n << ", C_ = " << p.c << ", ID = " << p.in[0] << ", IH = " << p.in[1]
        << ", IW = " << p.in[2] << ", OD = " << p.out[0] << ", OH = " << p.out[1] << ", OW = " << p.out[2] << ";\n";
    src << "constexpr int KT = " << p.k[0] << ", KH = " << p.k[1] << ", KW = " << p.k[2] << ";\n";
    src << "constexpr idx_t ST = " << p.s[0] << ", SH = " << p.s[1] << ", SW = " << p.s[2] << ", PT = " << p.pad[0]
        << ", PH = " << p.pad[1] << ", PW = " << p.pad[2] << ", DT = " << p.dil[0] << ", DH = " << p.dil[1]
        << ", DW = " << p.dil[2] << ";\n";
    src << "constexpr int THREADS = " << threads << ", OUTS = " << outs << ", CV = " << cv << ", ROWS = " << rows
        << ";\n";
    src << codegen::kElementAccess << codegen::kRawAccess << kPrelude;
    const std::string params = p.max ? "const in_t* __restrict__ x, out_t* __restrict__ y, long long* __restrict__ ind"
                                     : "const in_t* __restrict__ x, out_t* __restrict__ y";
    // Every strategy's kernel declaration. minb 1 gives the launch bounds one block an SM: without a count ptxas
    // keeps registers few for occupancy (odd-row max_pool3d: 40 registers a thread, its 75 row loads issued in
    // small batches); with one, it takes 64 and the loads overlap.
    const std::string entry = std::string("extern \"C\" __global__ void __launch_bounds__(THREADS") +
                              (MinBlocks(pt) == 1 ? ", 1" : "") + ") kjit_pool(" + params + ") {";
    // Avg pooling has no index output: a sink the compiler drops.
    const char* index_store = p.max ? "store_index(ind + o_at + k, r_ind[k]);" : "(void)r_ind[k];";
    // The kernel's declaration and its index store as macros, so that each strategy's CUDA is one section.
    src << "#define KJIT_ENTRY " << entry << "\n#define KJIT_INDEX_STORE " << index_store << "\n";
    Candidate c;
    c.entry_point = "kjit_pool";
    c.launch.block[0] = static_cast<uint32_t>(threads);
    const int64_t groups = CeilDiv(p.out[2], outs);
    if (strategy == kDirect && !p.channels_last) {
      src << kDirectKernel;
      c.launch.grid[0] = static_cast<uint32_t>(CeilDiv(p.n * p.c * p.out[0] * p.out[1] * groups, threads));
    } else if (strategy == kDirect) {
      src << kChannelsLastKernel;
      c.launch.grid[0] = static_cast<uint32_t>(CeilDiv(p.n * (p.c / vec) * p.out[0] * p.out[1] * groups, threads));
    } else if (strategy == kSliding || strategy == kWarpRows) {
      const bool warp = strategy == kWarpRows;
      src << "constexpr int FR = " << Frames(pt) << ";\n";
      // codegen 4: float32 maxima are stored from the best value itself, as floats (its bits are the
      // element's, NaN payloads included); 16-bit types keep the element's raw bits beside the float they
      // compare as. Odd-row max_pool3d, 2 x 2 outputs a thread: 1024 SASS instructions against codegen 3's
      // 1120 (its raw copy and the bit cast at the store each made the compiler carry the fold's selects twice).
      src << "#define RES_IS_BEST " << (p.dtype == DType::kFloat32 ? 1 : 0) << "\n";
      src << "#define FLOAT_STORE " << (p.max && p.dtype == DType::kFloat32 ? 1 : 0) << "\n";
      if (!warp) {
        src << "#define SEG_FIXED " << (SegmentFixed(p, outs, vec) ? 1 : 0) << "\n#define X_ALIGNED "
            << (vec * static_cast<int64_t>(DTypeSize(p.dtype)) <= p.alignment ? 1 : 0) << "\n";
      }
      // The sliding kernel; warp rows replace its thread mapping and segment loads (STEP_DIVIDES_32: each
      // lane's groups sit at whole loads of the others, so a round of shuffles serves every lane).
      src << "#define WARP_ROWS " << (warp ? 1 : 0) << "\n#define STEP_DIVIDES_32 "
          << (32 % (outs * p.s[2]) == 0 ? 1 : 0) << "\n" << kSlidingKernel;
      const int64_t row_groups = warp ? CeilDiv(groups, 32) * 32 : groups;
      c.launch.grid[0] = static_cast<uint32_t>(
          CeilDiv(p.n * p.c * CeilDiv(p.out[0], Frames(pt)) * CeilDiv(p.out[1], rows) * row_groups, threads));
    } else {
      src << "constexpr int IR = " << StagedRows(p, rows) << ";\n";
      src << kStagedKernel;
      c.launch.grid[0] = static_cast<uint32_t>(p.n * p.c * p.out[0] * CeilDiv(p.out[1], rows));
      c.launch.dynamic_shared_bytes = static_cast<uint32_t>(StagedBytes(p, rows));
    }
    c.source = src.str();
    codegen::FinishCandidate(*this, pt, c);
    return c;
  }
};

}  // namespace

const Family* PoolFamily() {
  static const Pool family;
  return &family;
}

}  // namespace kjit::policy
