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

// PyTorch's pooling_output_shape_pad_lr with equal padding (div_rtn: floor division).
int64_t OutputSize(int64_t in, int64_t k, int64_t pad, int64_t stride, int64_t dilation, bool ceil_mode) {
  const int64_t num = in + 2 * pad - dilation * (k - 1) - 1 + (ceil_mode ? stride - 1 : 0);
  int64_t q = num / stride;
  if ((num % stride != 0) && ((num < 0) != (stride < 0))) --q;
  int64_t out = q + 1;
  if (ceil_mode && (out - 1) * stride >= in + pad) --out;
  return out;
}

// The kernels' CUDA, from pool.cuh (kjit_embed_cuda): kPrelude.
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
      p->out[off + i] = OutputSize(p->in[off + i], k[i], pad[i], s[i], dil[i], p->ceil_mode);
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
    Candidate c;
    c.entry_point = "kjit_pool";
    c.launch.block[0] = static_cast<uint32_t>(threads);
    const int64_t groups = CeilDiv(p.out[2], outs);
    if (strategy == kDirect && !p.channels_last) {
      src << R"(
// A thread per OUTS consecutive outputs of a row; threads in a warp take consecutive groups of a
// row, so their windows are neighbours and L1 serves the overlap.
constexpr idx_t G = (OW + OUTS - 1) / OUTS;
)" << entry << R"(
  const long long item = (long long)blockIdx.x * THREADS + threadIdx.x;
  if (item >= (long long)N_ * C_ * OD * OH * G) return;
  const idx_t g = (idx_t)(item % G);
  long long r = item / G;
  const idx_t oh = (idx_t)(r % OH);
  r /= OH;
  const idx_t od = (idx_t)(r % OD);
  const long long plane = r / OD;
  const in_t* xp = x + plane * ((long long)ID * IH * IW);
  const long long row_at = ((plane * OD + od) * OH + oh) * (long long)OW;
  auto load = [&](int, idx_t t, idx_t h, idx_t w, raw_t (&v)[CV]) { load_raw<1, false>(xp + ((t * IH) + h) * IW + w, v); };
#pragma unroll
  for (int o = 0; o < OUTS; ++o) {
    const idx_t ow = g * OUTS + o;
    if (ow >= OW) break;
    raw_t r_raw[CV];
    long long r_ind[CV];
    pool_window(od, oh, ow, load, r_raw, r_ind);
    const long long o_at = row_at + ow;
    store_raw<1>(y + o_at, r_raw);
#pragma unroll
    for (int k = 0; k < CV; ++k) { )" << index_store << R"( }
  }
}
)";
      c.launch.grid[0] = static_cast<uint32_t>(CeilDiv(p.n * p.c * p.out[0] * p.out[1] * groups, threads));
    } else if (strategy == kDirect) {
      src << R"(
// channels_last: a thread per CV channels x OUTS consecutive outputs of a row; consecutive threads
// take consecutive channel vectors, so each window position is one coalesced read per warp.
constexpr idx_t G = (OW + OUTS - 1) / OUTS;
constexpr idx_t CVS = C_ / CV;
)" << entry << R"(
  const long long item = (long long)blockIdx.x * THREADS + threadIdx.x;
  if (item >= (long long)N_ * OD * OH * G * CVS) return;
  const idx_t cvi = (idx_t)(item % CVS);
  long long r = item / CVS;
  const idx_t g = (idx_t)(r % G);
  r /= G;
  const idx_t oh = (idx_t)(r % OH);
  r /= OH;
  const idx_t od = (idx_t)(r % OD);
  const long long n = r / OD;
  const in_t* xn = x + n * ((long long)ID * IH * IW * C_) + cvi * CV;
  auto load = [&](int, idx_t t, idx_t h, idx_t w, raw_t (&v)[CV]) {
    load_raw<CV, false>(xn + ((long long)((t * IH) + h) * IW + w) * C_, v);
  };
#pragma unroll
  for (int o = 0; o < OUTS; ++o) {
    const idx_t ow = g * OUTS + o;
    if (ow >= OW) break;
    raw_t r_raw[CV];
    long long r_ind[CV];
    pool_window(od, oh, ow, load, r_raw, r_ind);
    const long long o_at = (((n * OD + od) * OH + oh) * (long long)OW + ow) * C_ + cvi * CV;
    store_raw<CV>(y + o_at, r_raw);
#pragma unroll
    for (int k = 0; k < CV; ++k) { )" << index_store << R"( }
  }
}
)";
      c.launch.grid[0] = static_cast<uint32_t>(CeilDiv(p.n * (p.c / vec) * p.out[0] * p.out[1] * groups, threads));
    } else if (strategy == kSliding || strategy == kWarpRows) {
      const bool warp = strategy == kWarpRows;
      src << "constexpr int FR = " << Frames(pt) << ";\n";
      // codegen 4: float32 maxima are stored from the best value itself, as floats (its bits are the
      // element's, NaN payloads included); 16-bit types keep the element's raw bits beside the float they
      // compare as. Odd-row max_pool3d, 2 x 2 outputs a thread: 1024 SASS instructions against codegen 3's
      // 1120 (its raw copy and the bit cast at the store each made the compiler carry the fold's selects twice).
      src << "#define RES_IS_BEST " << (p.dtype == DType::kFloat32 ? 1 : 0) << "\n";
      if (p.max && p.dtype == DType::kFloat32) {
        src << R"(// N consecutive floats at p (aligned to their total size), as a float vector type.
template <int N> struct FloatsOf;
template <> struct FloatsOf<1> { typedef float T; };
template <> struct FloatsOf<2> { typedef float2 T; };
template <> struct FloatsOf<4> { typedef float4 T; };
template <int N>
__device__ __forceinline__ void store_floats(float* p, const float (&v)[N]) {
  typedef typename FloatsOf<N>::T F;
  union { F f; float e[N]; } w;
#pragma unroll
  for (int k = 0; k < N; ++k) w.e[k] = v[k];
  if (HINT) __stcs(reinterpret_cast<F*>(p), w.f);
  else *reinterpret_cast<F*>(p) = w.f;
}
)";
      }
      if (!warp) {
        src << "#define SEG_FIXED " << (SegmentFixed(p, outs, vec) ? 1 : 0) << "\n#define X_ALIGNED "
            << (vec * static_cast<int64_t>(DTypeSize(p.dtype)) <= p.alignment ? 1 : 0) << "\n";
      }
      // The sliding kernel's parts; warp rows replace its thread mapping and segment loads.
      if (!warp) {
        src << R"(
// A thread per FR x ROWS x OUTS outputs of one plane (FR consecutive output frames, ROWS rows, OUTS
// consecutive outputs along W); threads in a warp take consecutive groups along W. The thread walks
// the IT x IR input rows under its outputs once each (frames outer, rows inner), loading each row's
// segment of SPAN columns once, and folds every element into each output whose window holds it. The
// segment: SEG_FIXED, HEAD scalars up to a VEC boundary, MID aligned vectors, TAIL scalars (VEC divides
// IW and OUTS * SW and x is aligned, so the segment's offset from the boundary is a constant); else NV
// aligned vectors from the boundary at or before it (rows of odd width start anywhere), its elements
// picked out by the offset computed per row. Each output sees its window in (t, h, w)
// order, as PyTorch's loops: the same maxima, ties, NaN and indices, the same float sums.
constexpr idx_t G = (OW + OUTS - 1) / OUTS, RT = (OH + ROWS - 1) / ROWS, FT = (OD + FR - 1) / FR;
constexpr int IT = (int)((FR - 1) * ST + (KT - 1) * DT + 1);
constexpr int IR = (int)((ROWS - 1) * SH + (KH - 1) * DH + 1);
constexpr int SPAN = (int)((OUTS - 1) * SW + (KW - 1) * DW + 1);
constexpr int HEAD = (int)(PW % VEC) < SPAN ? (int)(PW % VEC) : SPAN;
constexpr int MID = (SPAN - HEAD) / VEC, TAIL = (SPAN - HEAD) % VEC;
// SEG_FIXED 0 (codegen 3: VEC not dividing IW or OUTS x SW, or an input not aligned to VEC elements):
// the segment's offset from a VEC boundary changes from row to row, known at run time only; NV aligned
// vectors cover a segment at any offset.
constexpr int NV = (SPAN + 2 * (VEC - 1)) / VEC;
constexpr long long NUMEL = (long long)N_ * C_ * ID * IH * IW;
// Whether input position i of a thread's extent is window position j of its output o (compile time).
__device__ __forceinline__ constexpr bool in_window(int i, int o, int s, int d, int k) {
  return i - o * s >= 0 && (i - o * s) % d == 0 && (i - o * s) / d < k;
}
)" << entry << R"(
  const long long item = (long long)blockIdx.x * THREADS + threadIdx.x;
  if (item >= (long long)N_ * C_ * FT * RT * G) return;
  const idx_t g = (idx_t)(item % G);
  long long r_ = item / G;
  const idx_t rt = (idx_t)(r_ % RT);
  r_ /= RT;
  const idx_t ft = (idx_t)(r_ % FT);
  const long long plane = r_ / FT;
  const in_t* xp = x + plane * ((long long)ID * IH * IW);
  const idx_t od0 = ft * FR, oh0 = rt * ROWS, ow0 = g * OUTS;
  const idx_t tb = od0 * ST - PT, hb = oh0 * SH - PH, wb = ow0 * SW - PW;
  // x's address past the VEC boundary at or before it, in elements (x is aligned to its element).
  const long long mis = X_ALIGNED ? 0 : (long long)((reinterpret_cast<unsigned long long>(x) / sizeof(in_t)) % VEC);
)";
      } else {
        src << R"(
// Warp rows: as the sliding strategy (2), a thread per FR x ROWS x OUTS outputs of one plane
// walking the input rows under them once and folding each element into the outputs whose windows
// hold it, in window order; but a warp's 32 lanes take 32 consecutive groups of one output row (the
// row's groups padded to whole warps: lanes past its end compute nothing but take part in the
// exchanges) and read each input row's segment under their groups together: lane l loads columns
// WB + 32 j + l (j < NL), each load instruction one contiguous run (128 bytes of f32), each element
// once. A lane's SPAN columns then come from the lanes that loaded them by shuffles. Scalar loads,
// rows of any width and alignment: the odd rows where a thread's own vectors do not fit, and where
// its scalar loads, STEP elements apart across the warp, take STEP times the sectors per load.
constexpr idx_t G = (OW + OUTS - 1) / OUTS, RT = (OH + ROWS - 1) / ROWS, FT = (OD + FR - 1) / FR;
constexpr idx_t GW = (G + 31) / 32 * 32;  // groups per output row, whole warps
constexpr int IT = (int)((FR - 1) * ST + (KT - 1) * DT + 1);
constexpr int IR = (int)((ROWS - 1) * SH + (KH - 1) * DH + 1);
constexpr int SPAN = (int)((OUTS - 1) * SW + (KW - 1) * DW + 1);
constexpr int STEP = (int)(OUTS * SW);     // columns from a lane's segment to the next lane's
constexpr int WSPAN = 31 * STEP + SPAN;    // the warp's segment
constexpr int NL = (WSPAN + 31) / 32;      // its loads per lane
// Whether input position i of a thread's extent is window position j of its output o (compile time).
__device__ __forceinline__ constexpr bool in_window(int i, int o, int s, int d, int k) {
  return i - o * s >= 0 && (i - o * s) % d == 0 && (i - o * s) / d < k;
}
__device__ __forceinline__ raw_t lane_value(raw_t v, int src) {
  return (raw_t)__shfl_sync(0xffffffffu, (unsigned)v, src);
}
)" << entry << R"(
  const long long item = (long long)blockIdx.x * THREADS + threadIdx.x;
  // Whole warps leave together (GW and THREADS are multiples of 32): the shuffles below see all lanes.
  if (item >= (long long)N_ * C_ * FT * RT * GW) return;
  const idx_t g = (idx_t)(item % GW);
  long long r_ = item / GW;
  const idx_t rt = (idx_t)(r_ % RT);
  r_ /= RT;
  const idx_t ft = (idx_t)(r_ % FT);
  const long long plane = r_ / FT;
  const in_t* xp = x + plane * ((long long)ID * IH * IW);
  const int lane = (int)(threadIdx.x % 32);
  const bool active = g < G;
  const idx_t od0 = ft * FR, oh0 = rt * ROWS, ow0 = g * OUTS;
  const idx_t tb = od0 * ST - PT, hb = oh0 * SH - PH, wb = ow0 * SW - PW;
  const idx_t wwb = wb - (idx_t)lane * STEP;  // the warp's first column (lane 0's wb)
)";
      }
      src << R"(#if IS_MAX
  float best[FR][ROWS][OUTS];
#if !RES_IS_BEST
  raw_t res[FR][ROWS][OUTS];
#endif
  idx_t at[FR][ROWS][OUTS];
#pragma unroll
  for (int f = 0; f < FR; ++f)
#pragma unroll
    for (int r = 0; r < ROWS; ++r)
#pragma unroll
      for (int o = 0; o < OUTS; ++o) {
        best[f][r][o] = -KJIT_INF;
#if !RES_IS_BEST
        res[f][r][o] = Bits<in_t>::from_f(-KJIT_INF);
#endif
        at[f][r][o] = (first_in(tb + f * ST, DT) * IH + first_in(hb + r * SH, DH)) * IW + first_in(wb + o * SW, DW);
      }
#else
  float sum[FR][ROWS][OUTS];
#pragma unroll
  for (int f = 0; f < FR; ++f)
#pragma unroll
    for (int r = 0; r < ROWS; ++r)
#pragma unroll
      for (int o = 0; o < OUTS; ++o) sum[f][r][o] = 0.f;
#endif
#pragma unroll
  for (int it = 0; it < IT; ++it) {
    const idx_t t = tb + it;
    if (t < 0 || t >= ID) continue;
#pragma unroll
    for (int ir = 0; ir < IR; ++ir) {
      const idx_t h = hb + ir;
      if (h < 0 || h >= IH) continue;
      const in_t* rp = xp + (t * IH + h) * IW;
      raw_t seg[SPAN];
#pragma unroll
      for (int e = 0; e < SPAN; ++e) seg[e] = 0;
)";
      if (warp) {
        src << R"(      {
        // Row and frame tests above are the same for the whole warp (one plane, frame and row tile).
        raw_t ld[NL];
#pragma unroll
        for (int j = 0; j < NL; ++j) {
          const idx_t w = wwb + j * 32 + lane;
          ld[j] = 0;
          if (j * 32 + lane < WSPAN && w >= 0 && w < IW) { raw_t v[1]; load_raw<1, false>(rp + w, v); ld[j] = v[0]; }
        }
        // seg[e] is the warp's column c = lane * STEP + e: lane c % 32's ld[c / 32].
)";
        if (32 % (outs * p.s[2]) == 0) {
          src << R"(        // STEP divides 32: seg[STEP a + b] of lane l is column STEP (l + a) + b, in load
        // j = STEP (l + a) / 32 of lane STEP (l + a) % 32 + b. Round (a, r) hands each lane the column
        // b = (r + j) % STEP of its group l + a: the STEP lanes whose groups sit at the same source lane
        // (their loads j apart) take different b, so each source serves one lane, sending the load that
        // lane needs. STEP rounds give every lane the STEP columns of group l + a: STEP x ceil(SPAN / STEP)
        // shuffles a row (a shuffle per column and load it may be in would take about STEP^2 more).
        const int b_src = lane % STEP, base = lane - b_src;
#pragma unroll
        for (int a = 0; a * STEP < SPAN; ++a) {
          const int jd = (STEP * (lane + a)) / 32;          // the load holding this lane's group l + a
          const int jlo = (STEP * a - base + 63) / 32 - 1;  // the first load of the groups this lane serves
#pragma unroll
          for (int r = 0; r < STEP; ++r) {
            const int js = jlo + ((b_src - r - jlo) & (STEP - 1));  // the one its reader wants
            raw_t send = 0;
#pragma unroll
            for (int j = max((STEP * a + 32) / 32 - 1, 0); j <= min((STEP * a + 31) / 32 + STEP - 1, NL - 1); ++j)
              if (j == js) send = ld[j];
            const int bd = (r + jd) & (STEP - 1);
            const raw_t got = lane_value(send, (STEP * (lane + a)) % 32 + bd);
#pragma unroll
            for (int b = 0; b < STEP; ++b)
              if (b == bd && a * STEP + b < SPAN) seg[a * STEP + b] = got;
          }
        }
      }
)";
        } else {
          src << R"(#pragma unroll
        for (int e = 0; e < SPAN; ++e) {
          if (e >= STEP) {
            // The next lane's seg[e - STEP], but for lane 31, whose column (known at compile time)
            // no lane's segment has yet.
            const raw_t next = lane_value(seg[e - STEP], (lane + 1) & 31);
            const raw_t last = lane_value(ld[(31 * STEP + e) / 32], (31 * STEP + e) % 32);
            seg[e] = lane == 31 ? last : next;
          } else {
            // c / 32 varies over the warp: a shuffle from each load it can be in, the lane's kept
            // (a register indexed at run time would go to local memory).
            const int c = lane * STEP + e;
            raw_t v = 0;
#pragma unroll
            for (int j = e / 32; j <= (31 * STEP + e) / 32; ++j) {
              const raw_t s = lane_value(ld[j], c % 32);
              if (c / 32 == j) v = s;
            }
            seg[e] = v;
          }
        }
      }
)";
        }
      } else {
        src << R"(#if SEG_FIXED
#pragma unroll
      for (int e = 0; e < HEAD; ++e) {
        const idx_t w = wb + e;
        if (w >= 0 && w < IW) { raw_t v[1]; load_raw<1, false>(rp + w, v); seg[e] = v[0]; }
      }
#pragma unroll
      for (int m = 0; m < MID; ++m) {
        const idx_t w = wb + HEAD + m * VEC;  // a multiple of VEC, and IW is: wholly inside or outside
        if (w >= 0 && w < IW) {
          raw_t v[VEC];
          load_raw<VEC, false>(rp + w, v);
#pragma unroll
          for (int k = 0; k < VEC; ++k) seg[HEAD + m * VEC + k] = v[k];
        }
      }
#pragma unroll
      for (int e = SPAN - TAIL; e < SPAN; ++e) {
        const idx_t w = wb + e;
        if (w >= 0 && w < IW) { raw_t v[1]; load_raw<1, false>(rp + w, v); seg[e] = v[0]; }
      }
#else
      {
        // The segment's columns inside the row, [lo, hi) as element offsets from x, and the VEC
        // boundary (in memory, not in the row) at or before its first column: NV aligned vectors from
        // there hold it whatever the row's alignment. A vector holding none of [lo, hi) is not loaded;
        // one reaching outside the tensor (its first or last vector) is read element by element, only
        // its elements in [lo, hi). Columns outside the row (the neighbouring rows' elements) are
        // never folded (the w test below).
        const long long row0 = plane * ((long long)ID * IH * IW) + (long long)(t * IH + h) * IW;
        const long long lo = row0 + max(wb, (idx_t)0), hi = row0 + min(wb + (idx_t)SPAN, IW);
        const long long first = row0 + wb + mis;                     // from the VEC boundary at or before x
        const long long v0 = (first & ~(long long)(VEC - 1)) - mis;  // floored to VEC (first may be < 0)
        const int off = (int)(first & (VEC - 1));                  // the segment's start within the vectors
        raw_t buf[NV * VEC];
#pragma unroll
        for (int m = 0; m < NV; ++m) {
          const long long vs = v0 + m * VEC;
#pragma unroll
          for (int k = 0; k < VEC; ++k) buf[m * VEC + k] = 0;
          if (vs + VEC <= lo || vs >= hi) continue;
          if (vs >= 0 && vs + VEC <= NUMEL) {
            raw_t v[VEC];
            load_raw<VEC, false>(x + vs, v);
#pragma unroll
            for (int k = 0; k < VEC; ++k) buf[m * VEC + k] = v[k];
          } else {
#pragma unroll
            for (int k = 0; k < VEC; ++k)
              if (vs + k >= lo && vs + k < hi) { raw_t v[1]; load_raw<1, false>(x + vs + k, v); buf[m * VEC + k] = v[0]; }
          }
        }
        // seg[e] = buf[off + e], by selects (off is known at run time only: indexing would put buf in
        // local memory).
#pragma unroll
        for (int e = 0; e < SPAN; ++e) {
          raw_t v = buf[e];
#pragma unroll
          for (int q = 1; q < VEC; ++q)
            if (off == q) v = buf[e + q];
          seg[e] = v;
        }
      }
#endif
)";
      }
      src << R"(      const idx_t row_at = (t * IH + h) * IW;
#pragma unroll
      for (int f = 0; f < FR; ++f) {
        if (!in_window(it, f, (int)ST, (int)DT, KT)) continue;
#pragma unroll
        for (int r = 0; r < ROWS; ++r) {
          if (!in_window(ir, r, (int)SH, (int)DH, KH)) continue;
#pragma unroll
          for (int o = 0; o < OUTS; ++o) {
#pragma unroll
            for (int l = 0; l < KW; ++l) {
              const int e = o * (int)SW + l * (int)DW;
              const idx_t w = wb + e;
              if (w < 0 || w >= IW) continue;
#if IS_MAX
              const float v = Bits<in_t>::to_f(seg[e]);
              if (v > best[f][r][o] || v != v) {
                best[f][r][o] = v;
#if !RES_IS_BEST
                res[f][r][o] = seg[e];
#endif
                at[f][r][o] = row_at + w;
              }
#else
              sum[f][r][o] += Bits<in_t>::to_f(seg[e]);
#endif
            }
          }
        }
      }
    }
  }
)";
      if (warp) src << "  if (!active) return;\n";
      src << R"(#pragma unroll
  for (int f = 0; f < FR; ++f) {
    const idx_t od = od0 + f;
    if (od >= OD) break;
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
      const idx_t oh = oh0 + r;
      if (oh >= OH) break;
#if IS_MAX && RES_IS_BEST
      // float32 maxima leave as floats: a bit cast to raw bits here would make the compiler carry the
      // fold's selects as integers beside the float compares (5% more instructions, odd max_pool3d).
      float out[OUTS];
#pragma unroll
      for (int o = 0; o < OUTS; ++o) out[o] = best[f][r][o];
#else
      raw_t out[OUTS];
#endif
#if IS_MAX
#if !RES_IS_BEST
#pragma unroll
      for (int o = 0; o < OUTS; ++o) out[o] = res[f][r][o];
#endif
#else
#pragma unroll
      for (int o = 0; o < OUTS; ++o) {
        // As pool_window: the divisor from the window clipped to input + padding, or to the input.
        const idx_t t0 = tb + f * ST, h0 = hb + r * SH, w0 = wb + o * SW;
        const idx_t te = min(t0 + KT, ID + PT), he = min(h0 + KH, IH + PH), we = min(w0 + KW, IW + PW);
        const int pool_size = (int)((te - t0) * (he - h0) * (we - w0));
        const idx_t ts = max(t0, (idx_t)0), hs = max(h0, (idx_t)0), ws = max(w0, (idx_t)0);
        const idx_t tc = min(te, ID), hc = min(he, IH), wc = min(we, IW);
        const bool empty = ts >= tc || hs >= hc || ws >= wc;
        const int divide = DIVISOR != 0 ? DIVISOR : COUNT_INCLUDE_PAD ? pool_size : (int)((tc - ts) * (hc - hs) * (wc - ws));
        out[o] = Bits<in_t>::from_f(empty ? 0.f : sum[f][r][o] / (float)divide);
      }
#endif
      const long long o_at = ((plane * OD + od) * OH + oh) * (long long)OW + ow0;
      if (OW % OUTS == 0) {
        // Whole groups: OUTS-element stores, and the indices in pairs (16 bytes).
#if IS_MAX && RES_IS_BEST
        store_floats<OUTS>(y + o_at, out);
#else
        store_raw<OUTS>(y + o_at, out);
#endif
#if IS_MAX
        if (OUTS == 1) {
          store_index(ind + o_at, at[f][r][0]);
        } else {
#pragma unroll
          for (int o = 0; o + 1 < OUTS; o += 2) store_index2(ind + o_at + o, at[f][r][o], at[f][r][o + 1]);
        }
#endif
      } else {
#pragma unroll
        for (int o = 0; o < OUTS; ++o) {
          if (ow0 + o >= OW) break;
#if IS_MAX && RES_IS_BEST
          const float one[1] = {out[o]};
          store_floats<1>(y + o_at + o, one);
#else
          raw_t one[1] = {out[o]};
          store_raw<1>(y + o_at + o, one);
#endif
#if IS_MAX
          store_index(ind + o_at + o, at[f][r][o]);
#endif
        }
      }
    }
  }
}
)";
      const int64_t row_groups = warp ? CeilDiv(groups, 32) * 32 : groups;
      c.launch.grid[0] = static_cast<uint32_t>(
          CeilDiv(p.n * p.c * CeilDiv(p.out[0], Frames(pt)) * CeilDiv(p.out[1], rows) * row_groups, threads));
    } else {
      src << "constexpr int IR = " << StagedRows(p, rows) << ";\n";
      src << R"(
// A block per ROWS output rows of one (plane, output frame): the KT input frames of the window and
// the IR input rows under the tile, whole rows, staged in shared memory (rows and frames outside the
// input are not loaded and never read), then each thread computes OUTS consecutive outputs of a row.
constexpr idx_t G = (OW + OUTS - 1) / OUTS;
constexpr idx_t RT = (OH + ROWS - 1) / ROWS;
constexpr int SEGS = (int)(IW / VEC);
)" << entry << R"(
  extern __shared__ __align__(16) unsigned char smem[];
  raw_t* tile = reinterpret_cast<raw_t*>(smem);  // [KT][IR][IW]
  const long long b = blockIdx.x;
  const idx_t rt = (idx_t)(b % RT);
  long long r = b / RT;
  const idx_t od = (idx_t)(r % OD);
  const long long plane = r / OD;
  const in_t* xp = x + plane * ((long long)ID * IH * IW);
  const idx_t oh0 = rt * ROWS, hbase = oh0 * SH - PH, t0 = od * ST - PT;
  for (int e = threadIdx.x; e < KT * IR * SEGS; e += THREADS) {
    const int seg = e % SEGS, fr = e / SEGS;
    const int ir = fr % IR, i = fr / IR;
    const idx_t t = t0 + i * DT, h = hbase + ir;
    if (t < 0 || t >= ID || h < 0 || h >= IH) continue;
    raw_t v[VEC];
    load_raw<VEC, HINT>(xp + (t * IH + h) * IW + (idx_t)seg * VEC, v);
    typedef typename RawOf<sizeof(raw_t) * VEC>::T R;
    union { R rr; raw_t u[VEC]; } w;
#pragma unroll
    for (int k = 0; k < VEC; ++k) w.u[k] = v[k];
    *reinterpret_cast<R*>(tile + ((long long)i * IR + ir) * IW + seg * VEC) = w.rr;
  }
  __syncthreads();
  auto load = [&](int i, idx_t, idx_t h, idx_t w, raw_t (&v)[CV]) { v[0] = tile[((long long)i * IR + (h - hbase)) * IW + w]; };
  for (int it = threadIdx.x; it < ROWS * G; it += THREADS) {
    const idx_t oh = oh0 + it / G, g = it % G;
    if (oh >= OH) break;
    const long long row_at = ((plane * OD + od) * OH + oh) * (long long)OW;
#pragma unroll
    for (int o = 0; o < OUTS; ++o) {
      const idx_t ow = g * OUTS + o;
      if (ow >= OW) break;
      raw_t r_raw[CV];
      long long r_ind[CV];
      pool_window(od, oh, ow, load, r_raw, r_ind);
      const long long o_at = row_at + ow;
      store_raw<1>(y + o_at, r_raw);
#pragma unroll
      for (int k = 0; k < CV; ++k) { )" << index_store << R"( }
    }
  }
}
)";
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
