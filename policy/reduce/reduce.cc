#include "reduce/reduce.h"

#include "src/codegen.h"

#include <algorithm>
#include <limits>
#include <sstream>

namespace kjit::policy {
namespace {

using codegen::CeilDiv;
using codegen::Align16;
using codegen::CudaType;

// The ABI (daemon/worker_protocol.h): (x, y); y contiguous, of the output dtype (int64 for
// argmax/argmin). The split strategy takes a workspace too: (x, y, ws) (kernel ABI v2).

enum Kind : int { kSum = 0, kMean = 1, kProd = 2, kMax = 3, kMin = 4, kArgMax = 5, kArgMin = 6 };

enum Strategy : int64_t { kWarp = 0, kBlock = 1, kColumns = 2, kTile = 3, kSplit = 4 };

constexpr int64_t kMaxRegisterFloats = 64;          // values and accumulators a thread holds
constexpr int64_t kStaticSharedBytes = 48 * 1024;  // the tile strategy's partials, static shared memory

struct ReduceProblem : Problem {
  Kind kind = kSum;
  DType in_dtype = DType::kFloat32;
  DType out_dtype = DType::kFloat32;  // kInt64 for argmax/argmin
  int64_t outer = 1, len = 1, inner = 1;
  // Reduced dims in two runs around the kept ones ([segs, outer, len] in memory, inner == 1: e.g. dims
  // 0, 2, 3 of NCHW): output o reduces segs segments of len, segment s at (s * outer + o) * len.
  int64_t segs = 1;
  int alignment = 16;  // of the input's data pointer
  float mean_factor = 1.f;
  bool arg() const { return kind == kArgMax || kind == kArgMin; }
  int64_t outputs() const { return outer * inner; }
  int64_t numel() const { return segs * outer * len * inner; }
  int64_t reduced() const { return segs * len; }  // elements per output
  // Bytes of one accumulator (value, and index for argmax/argmin) in shared memory.
  int64_t acc_bytes() const { return arg() ? 16 : 4; }
};

// The kernels' CUDA, from reduce.cuh (kjit_embed_cuda): kPrelude, kRowPartial, kWarpKernel, kBlockKernelBody,
// kSplitKernel, kColumnsKernel, kTileHead, kTileKernelBody.
#include "kjit/cuda/reduce.cuh.inc"
// The split strategy's blocks per row; 1 for points recorded before the knob existed.
int64_t Chunks(const Point& pt) {
  auto it = pt.find("chunks");
  return it == pt.end() ? 1 : it->second;
}
bool WideIndex(const ReduceProblem& p) { return p.len >= (int64_t{1} << 31) - 1; }
// The split strategy's workspace: a counter per row, then a partial per block (values, then, for
// argmax/argmin, indices), each array 16-byte aligned.
uint64_t WorkspaceBytes(const ReduceProblem& p, int64_t chunks) {
  const int64_t blocks = p.outer * chunks;
  const int64_t idx_bytes = p.arg() ? (WideIndex(p) ? 8 : 4) : 0;
  return static_cast<uint64_t>(Align16(p.outer * 4) + Align16(blocks * 4) + Align16(blocks * idx_bytes));
}

class Reduce final : public Family {
 public:
  std::string_view name() const override { return "reduce"; }
  int codegen_version() const override { return 2; }
  std::vector<std::string> ops() const override {
    return {"aten::sum", "aten::mean", "aten::amax", "aten::amin", "aten::prod", "aten::argmax", "aten::argmin"};
  }

  OpTraits traits(std::string_view op) const override {
    OpTraits t;
    if (op == "aten::argmax" || op == "aten::argmin") {
      // The index is fixed by PyTorch's total order on (value, index): compared bitwise.
      t.compare = ComparePolicy::kBitwise;
    } else if (op == "aten::amax" || op == "aten::amin") {
      // The result is one of the elements: exactly equal (NaN to NaN; -0.0 and 0.0, which the
      // order of comparisons picks between, compare equal).
      t.atol = 0;
      t.rtol = 0;
    } else {
      // Sums in another order than PyTorch's differ by ulps of the partial sums, not of the result
      // (a sum that cancels): rtol 1e-5 for float32, and the evaluator's float64 rule (no less
      // accurate than PyTorch) where the two differ by more. float16/bfloat16 outputs are one
      // rounding of a float32 result: assert_close's defaults.
      t.tolerance_by_dtype[DType::kFloat32] = {1e-5, 1e-5};
    }
    if (op == "aten::prod") {
      // Products of wide-ranging values: a partial product that underflows to 0 and then meets an
      // Inf is NaN in one order and Inf in another; no order but PyTorch's can match it.
      t.no_special_inputs = {DType::kFloat32, DType::kFloat16, DType::kBFloat16};
    }
    return t;
  }

  std::vector<OpKey> SampleKeys() const override {
    constexpr DType f32 = DType::kFloat32, f16 = DType::kFloat16, bf16 = DType::kBFloat16;
    auto x = [](DType dt, std::vector<int64_t> s) { return TensorDesc::Contiguous(dt, std::move(s)); };
    auto channels_last = [](DType dt, std::vector<int64_t> s) {  // [N, C, H, W] stored as N, H, W, C
      TensorDesc t = TensorDesc::Contiguous(dt, s);
      t.strides = {s[1] * s[2] * s[3], 1, s[3] * s[1], s[1]};
      return t;
    };
    auto sum = [](TensorDesc t, Arg dims, bool keep, Arg dtype) {
      return OpKey::Single("aten::sum", "dim_IntList", {std::move(t), std::move(dims), keep, std::move(dtype)}, 90);
    };
    auto mean = [](TensorDesc t, Arg dims, bool keep, Arg dtype) {
      return OpKey::Single("aten::mean", "dim", {std::move(t), std::move(dims), keep, std::move(dtype)}, 90);
    };
    auto minmax = [](const char* op, TensorDesc t, IntList dims, bool keep) {
      return OpKey::Single(op, "", {std::move(t), std::move(dims), keep}, 90);
    };
    auto arg = [](const char* op, TensorDesc t, Arg dim, bool keep) {
      return OpKey::Single(op, "", {std::move(t), std::move(dim), keep}, 90);
    };
    return {
        // The headroom cases (h200-headroom.md): dims 1, 2 and 0 of 128x4096x512.
        arg("aten::argmax", x(f32, {128, 4096, 512}), int64_t{1}, false),
        sum(x(f32, {128, 4096, 512}), IntList{1}, false, NoneArg{}),
        sum(x(f32, {128, 4096, 512}), IntList{2}, false, NoneArg{}),
        minmax("aten::amax", x(f32, {128, 4096, 512}), {0}, false),
        // Two trailing dims (global average pooling), keepdim, bfloat16.
        mean(x(bf16, {32, 64, 56, 56}), IntList{-1, -2}, true, NoneArg{}),
        // Odd rows, float16.
        minmax("aten::amin", x(f16, {4095, 1023}), {1}, false),
        // A short odd middle dim, keepdim, bfloat16.
        arg("aten::argmin", x(bf16, {33, 7, 65}), int64_t{1}, true),
        OpKey::Single("aten::prod", "dim_int", {x(f32, {64, 1000}), int64_t{1}, false, NoneArg{}}, 90),
        // prod of everything (its own overload), tiny.
        OpKey::Single("aten::prod", "", {x(f16, {3, 5, 7}), NoneArg{}}, 90),
        // Few long rows, float16 read into a float32 result: clusters.
        sum(x(f16, {4, 262144}), IntList{-1}, false, f32),
        // argmax of the flattened tensor.
        arg("aten::argmax", x(f32, {1000, 37}), NoneArg{}, false),
        // Few columns over a long first dim: the tile split over a cluster.
        mean(x(f16, {8192, 96}), IntList{0}, false, NoneArg{}),
        // adaptive_avg_pool2d(x, 1) on a channels_last input: mean over H and W, columns of C in memory.
        mean(channels_last(f16, {32, 256, 14, 14}), IntList{-1, -2}, true, NoneArg{}),
        // Per-channel statistics of NCHW (dims 0, 2, 3): segments around the kept channels.
        sum(x(bf16, {16, 64, 32, 32}), IntList{0, 2, 3}, false, f32),
        // Long reductions to few outputs: the split strategy (blocks' partials through the workspace).
        sum(x(f32, {4096, 4096}), IntList{}, false, NoneArg{}),
        arg("aten::argmax", x(f16, {2, 8388608}), int64_t{1}, false),
        mean(x(bf16, {128, 3, 256, 256}), IntList{0, 2, 3}, false, f32),
    };
  }

  Result<std::unique_ptr<Problem>> Match(const OpKey& key) const override {
    if (key.calls.size() != 1) return InvalidArgument("a single call is needed");
    const OpCall& c = key.calls[0];
    auto p = std::make_unique<ReduceProblem>();
    // Per overload: where dims, keepdim and dtype are, and what "no dims" means.
    enum DimForm { kList, kOptionalList, kInt, kOptionalInt, kAll };
    DimForm form;
    size_t nargs;
    int dtype_at = -1;
    if (c.op == "aten::sum" && c.overload == "dim_IntList") {
      p->kind = kSum, form = kOptionalList, nargs = 4, dtype_at = 3;
    } else if (c.op == "aten::mean" && c.overload == "dim") {
      p->kind = kMean, form = kOptionalList, nargs = 4, dtype_at = 3;
    } else if ((c.op == "aten::amax" || c.op == "aten::amin") && c.overload.empty()) {
      p->kind = c.op == "aten::amax" ? kMax : kMin, form = kList, nargs = 3;
    } else if (c.op == "aten::prod" && c.overload == "dim_int") {
      p->kind = kProd, form = kInt, nargs = 4, dtype_at = 3;
    } else if (c.op == "aten::prod" && c.overload.empty()) {
      p->kind = kProd, form = kAll, nargs = 2, dtype_at = 1;
    } else if ((c.op == "aten::argmax" || c.op == "aten::argmin") && c.overload.empty()) {
      p->kind = c.op == "aten::argmax" ? kArgMax : kArgMin, form = kOptionalInt, nargs = 3;
    } else {
      return InvalidArgument("not a reduction overload with a CUDA kernel (sum.dim_IntList, mean.dim, amax, amin, "
                             "prod, prod.dim_int, argmax, argmin)");
    }
    if (c.args.size() != nargs) return InvalidArgument("unexpected arguments");
    const auto* x = std::get_if<TensorDesc>(&c.args[0]);
    if (!x) return InvalidArgument("the input is not a tensor");
    if (x->dtype != DType::kFloat32 && x->dtype != DType::kFloat16 && x->dtype != DType::kBFloat16) {
      return InvalidArgument("dtype " + std::string(DTypeName(x->dtype)) + " is not served");
    }
    const int64_t nd = static_cast<int64_t>(x->sizes.size());
    if (nd == 0) return InvalidArgument("0-d inputs are left to PyTorch");
    if (x->numel() == 0) return codegen::DeclineEmpty();
    if (form != kAll && !std::holds_alternative<bool>(c.args[2])) return InvalidArgument("keepdim is not a bool");

    // The reduced dims; none listed means all of them.
    std::vector<bool> reduced(nd, false);
    auto mark = [&](int64_t d) -> Status {
      const int64_t w = d < 0 ? d + nd : d;
      if (w < 0 || w >= nd) return InvalidArgument("dim out of range");
      if (reduced[w]) return InvalidArgument("a dim appears twice: PyTorch rejects it");
      reduced[w] = true;
      return Status::Ok();
    };
    const Arg* dims = form == kAll ? nullptr : &c.args[1];
    if (dims && std::holds_alternative<IntList>(*dims) && (form == kList || form == kOptionalList)) {
      for (int64_t d : std::get<IntList>(*dims)) KJIT_RETURN_IF_ERROR(mark(d));
    } else if (dims && std::holds_alternative<int64_t>(*dims) && (form == kInt || form == kOptionalInt)) {
      KJIT_RETURN_IF_ERROR(mark(std::get<int64_t>(*dims)));
    } else if (dims && !(std::holds_alternative<NoneArg>(*dims) && (form == kOptionalList || form == kOptionalInt))) {
      return InvalidArgument("dim is not of the overload's type");
    }
    if (std::none_of(reduced.begin(), reduced.end(), [](bool r) { return r; })) reduced.assign(nd, true);

    // Output dtype.
    p->in_dtype = x->dtype;
    p->out_dtype = p->arg() ? DType::kInt64 : x->dtype;
    if (dtype_at >= 0) {
      const Arg& dt = c.args[dtype_at];
      if (const auto* d = std::get_if<DType>(&dt)) {
        if (*d == DType::kFloat32 && x->dtype != DType::kFloat32) {
          p->out_dtype = DType::kFloat32;  // PyTorch's gpu_lowp_to_f32: the input read as it is
        } else if (*d != x->dtype) {
          return InvalidArgument("dtype " + std::string(DTypeName(*d)) + " on a " + std::string(DTypeName(x->dtype)) +
                                 " input is left to PyTorch");
        }
      } else if (!std::holds_alternative<NoneArg>(dt)) {
        return InvalidArgument("dtype is neither a ScalarType nor None");
      }
    }

    // The dims in memory order (strides descending; size-1 dims dropped: they move no element). The
    // input must be dense (a permutation of a contiguous tensor: channels_last is one).
    std::vector<int64_t> order;
    for (int64_t d = 0; d < nd; ++d) {
      if (x->sizes[d] > 1) order.push_back(d);
    }
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return x->strides[a] > x->strides[b]; });
    int64_t dense = 1;
    for (auto it = order.rbegin(); it != order.rend(); ++it) {
      if (x->strides[*it] != dense) return InvalidArgument("input not dense (gaps, overlaps or broadcasts): declined");
      dense *= x->sizes[*it];
    }
    // The output is contiguous in logical order: the kept dims must lie in memory in that order too.
    int64_t last_kept = -1;
    for (int64_t d : order) {
      if (reduced[d]) continue;
      if (d < last_kept) return InvalidArgument("kept dims out of logical order in memory: declined");
      last_kept = d;
    }
    // argmax/argmin of the flattened tensor count positions in logical order.
    const bool flat = form == kOptionalInt && std::holds_alternative<NoneArg>(c.args[1]);
    if (flat && !x->is_contiguous()) return InvalidArgument("argmax/argmin of a non-contiguous flattened input: declined");
    // Runs of adjacent reduced or kept dims in memory order, each merged into one extent.
    std::vector<std::pair<bool, int64_t>> runs;  // (reduced, elements)
    for (int64_t d : order) {
      if (runs.empty() || runs.back().first != reduced[d]) runs.push_back({reduced[d], 1});
      runs.back().second *= x->sizes[d];
    }
    if (runs.size() == 3 && runs[0].first && runs[2].first) {
      // [segs, outer, len]: reduced, kept, reduced (per-channel statistics of NCHW: dims 0, 2, 3).
      p->segs = runs[0].second, p->outer = runs[1].second, p->len = runs[2].second;
    } else {
      // [outer, len, inner]: the reduced dims must be one run.
      int reduced_runs = 0;
      for (const auto& [r, n] : runs) {
        if (r) {
          ++reduced_runs;
          p->len = n;
        } else {
          (reduced_runs == 0 ? p->outer : p->inner) = n;
        }
      }
      if (reduced_runs > 1) {
        return InvalidArgument("reduced dims in more than one run in memory, other than around one kept run: declined");
      }
    }
    if (p->numel() > (int64_t{1} << 40)) return InvalidArgument("too large");
    // Columns: the most blocks a strategy gives (a cluster of 8 per column tile): fewer than a quarter
    // of an H200's SMs on a long reduction cannot approach the floor, where PyTorch's grid-wide split is
    // (rows have the split strategy; columns do not yet).
    if (p->inner > 1 && 8 * p->outer * CeilDiv(p->inner, 32) < 33 && p->numel() >= (int64_t{1} << 24)) {
      return InvalidArgument("a long reduction to too few column outputs to fill the GPU without a grid-wide "
                             "split (the split strategy covers rows only): left to PyTorch");
    }
    p->alignment = x->alignment;
    // MeanOps' factor: static_cast<float>(outputs) / numel, in float.
    p->mean_factor = static_cast<float>(p->outputs()) / static_cast<float>(p->numel());
    p->op = c.op;
    static const char* const kNames[] = {"sum", "mean", "prod", "amax", "amin", "argmax", "argmin"};
    std::ostringstream desc;
    desc << kNames[p->kind] << " " << DTypeName(p->in_dtype);
    if (p->out_dtype != p->in_dtype && !p->arg()) desc << "->" << DTypeName(p->out_dtype);
    if (p->segs > 1) desc << " segs=" << p->segs;
    desc << " outer=" << p->outer << " len=" << p->len << " inner=" << p->inner;
    if (!x->is_contiguous()) desc << " (memory order)";
    p->description = desc.str();
    return std::unique_ptr<Problem>(std::move(p));
  }

  Space MakeSpace(const Problem&, const DeviceFacts&) const override {
    Space s;
    s.family = "reduce";
    s.knobs = {
        {"strategy", {kWarp, kBlock, kColumns, kTile, kSplit},
         "0 warp per row, 1 block (or cluster) per row, 2 a thread per columns walking the reduced dim, 3 a block "
         "per tile of columns with the reduced dim split over its warps (and a cluster), 4 `chunks` blocks per row, "
         "partials combined by the last block through the workspace"},
        {"threads", {32, 64, 128, 256, 512, 1024}, "threads per block"},
        {"vec", {1, 2, 4, 8}, "elements per vector load (along the row, or adjacent columns)"},
        {"unroll", {1, 2, 4, 8}, "vectors (rows) in flight per thread, each into its own accumulator"},
        {"cluster", {1, 2, 4, 8}, "blocks per row or column tile (block and tile strategies)"},
        {"hint", {0, 1}, "1: streaming (evict-first) loads"},
        {"chunks", {1, 4, 8, 16, 32, 64, 128, 256, 512, 1024}, "blocks per row (split strategy; 1 otherwise)"},
    };
    s.absent_as = {{"chunks", 1}};  // added with codegen 2: the rows measured before had one block per row
    return s;
  }

  Status Check(const Problem& problem, const Point& pt, const DeviceFacts& dev) const override {
    const auto& p = static_cast<const ReduceProblem&>(problem);
    const int64_t strategy = pt.at("strategy"), threads = pt.at("threads"), vec = pt.at("vec"),
                  unroll = pt.at("unroll"), cluster = pt.at("cluster");
    const int64_t chunks = Chunks(pt);
    const int64_t size = static_cast<int64_t>(DTypeSize(p.in_dtype));
    const bool columns = strategy == kColumns || strategy == kTile;
    const int64_t per_value = p.arg() ? 2 : 1;  // registers per accumulator
    const int64_t max_grid = std::numeric_limits<int32_t>::max();
    if (strategy < kWarp || strategy > kSplit) return InvalidArgument("unknown strategy");
    if (strategy != kSplit && chunks != 1) return InvalidArgument("chunks are for the split strategy");
    if (strategy == kSplit && chunks < 2) return InvalidArgument("a single chunk per row is the block strategy");
    if (strategy == kSplit && WorkspaceBytes(p, chunks) > cache::kMaxWorkspaceBytes) {
      return InvalidArgument("workspace too large");
    }
    if (columns != (p.inner > 1)) {
      return InvalidArgument(columns ? "columns need kept dims after the reduced ones" : "rows need the reduced dims last");
    }
    if (cluster > 1 && strategy != kBlock && strategy != kTile) {
      return InvalidArgument("clusters are for the block and tile strategies");
    }
    if (cluster > 1 && (dev.arch < 90 || cluster > dev.max_cluster_size)) return InvalidArgument("no such cluster here");
    KJIT_RETURN_IF_ERROR(codegen::CheckThreadsAndVector(threads, vec, size, dev));
    KJIT_RETURN_IF_ERROR(codegen::CheckVectorAligned(vec, size, p.alignment));
    switch (strategy) {
      case kWarp:
      case kBlock:
      case kSplit: {
        // (A vector that does not divide the row: each row a scalar head and tail around whole vectors.)
        if (vec > 1 && p.len < 4 * vec) return InvalidArgument("rows shorter than four vectors");
        // Segments are walked as whole vectors only.
        if (p.segs > 1 && p.len % vec != 0) return InvalidArgument("vector does not divide the segments");
        if (unroll * vec + unroll * per_value > kMaxRegisterFloats) return InvalidArgument("too many values in flight");
        const int64_t lanes = strategy == kWarp ? 32 : strategy == kSplit ? threads * chunks : threads * cluster;
        const int64_t vecs = p.reduced() / vec;
        if (unroll > 1 && (unroll - 1) * lanes >= vecs) return InvalidArgument("unroll longer than the row");
        if (strategy == kWarp) {
          if (threads > 32 && p.outer <= threads / 64) return InvalidArgument("most warps would idle");
          if (CeilDiv(p.outer, threads / 32) > max_grid) return InvalidArgument("grid too large");
        } else if (strategy == kBlock) {
          if (threads == 32 && cluster == 1) return InvalidArgument("a single warp per row is the warp strategy");
          if (vecs <= lanes / 2) return InvalidArgument("most threads would idle");
          if (p.outer * cluster > max_grid) return InvalidArgument("grid too large");
        } else {
          if (vecs <= lanes / 2) return InvalidArgument("most threads would idle");
          if (p.outer * chunks > max_grid) return InvalidArgument("grid too large");
        }
        break;
      }
      case kColumns:
        if (p.inner % vec != 0) return InvalidArgument("vector does not divide the columns");
        if (unroll * vec * (1 + per_value) > kMaxRegisterFloats) return InvalidArgument("too many values in flight");
        if (unroll > p.len) return InvalidArgument("unroll longer than the reduced dim");
        if (threads > 32 && p.outer * (p.inner / vec) <= threads / 2) return InvalidArgument("most threads would idle");
        if (CeilDiv(p.outer * (p.inner / vec), threads) > max_grid) return InvalidArgument("grid too large");
        break;
      case kTile: {
        const int64_t warps = threads / 32;
        if (p.inner % vec != 0) return InvalidArgument("vector does not divide the columns");
        if (threads < 64 && cluster == 1) return InvalidArgument("a single warp per tile is the columns strategy");
        if (unroll * vec * (1 + per_value) > kMaxRegisterFloats) return InvalidArgument("too many values in flight");
        if (p.len < warps * cluster) return InvalidArgument("some warp would get no row");
        if (unroll > 1 && (unroll - 1) * warps * cluster >= p.len) return InvalidArgument("unroll longer than a warp's rows");
        if (warps * 32 * vec * p.acc_bytes() > kStaticSharedBytes) {
          return InvalidArgument("partials exceed static shared memory");
        }
        if (p.inner < 32 * vec / 2 && vec > 1) return InvalidArgument("most lanes of a tile would idle");
        if (p.outer * CeilDiv(p.inner, 32 * vec) * cluster > max_grid) return InvalidArgument("grid too large");
        break;
      }
    }
    return Status::Ok();
  }

  Point ExpertDefault(const Problem& problem, const DeviceFacts& dev) const override {
    const auto& p = static_cast<const ReduceProblem&>(problem);
    const int64_t size = static_cast<int64_t>(DTypeSize(p.in_dtype));
    // Streaming loads where the input outgrows L2 (50 MB on the H200): nothing is read twice.
    const int64_t hint = p.numel() * size > (int64_t{64} << 20);
    // The widest vector the extent and alignment allow; for column tiles, also one that leaves at most
    // half of a tile's lanes idle (a tile is 32 vectors wide).
    auto widest = [&](int64_t extent, bool tile) {
      for (int64_t v : {8, 4, 2}) {
        if (v * size <= 16 && v * size <= p.alignment && extent % v == 0 && (!tile || extent >= 16 * v)) return v;
      }
      return int64_t{1};
    };
    auto point = [&](int64_t strategy, int64_t threads, int64_t vec, int64_t unroll, int64_t cluster,
                     int64_t chunks) {
      return Point{{"strategy", strategy}, {"threads", threads}, {"vec", vec}, {"unroll", unroll},
                   {"cluster", cluster},   {"hint", hint},       {"chunks", chunks}};
    };
    std::vector<Point> tries;
    // Each try with as much unroll as the shape allows (4 loads in flight per thread keep ~32 KB in
    // flight per SM at 16 warps), then less.
    auto add = [&](int64_t strategy, int64_t threads, int64_t vec, int64_t cluster, int64_t chunks = 1) {
      for (int64_t u : {4, 2, 1}) tries.push_back(point(strategy, threads, vec, u, cluster, chunks));
    };
    if (p.inner == 1) {
      // Rows take the widest vector whatever their length (a scalar head and tail cover the rest)
      // where they hold at least four.
      int64_t v = 1;
      for (int64_t w : {8, 4, 2}) {
        if (w * size <= 16 && w * size <= p.alignment && p.len >= 4 * w && (p.segs == 1 || p.len % w == 0)) {
          v = w;
          break;
        }
      }
      if (p.reduced() <= 32 * 8 * v || p.outer >= dev.sm_count * 16) {
        // Short rows, or enough of them to fill the GPU a warp each: no block barrier.
        add(kWarp, 256, v, 1);
      } else if (p.outer >= dev.sm_count * 2) {
        add(kBlock, 256, v, 1);
      } else if (p.outer * 8 < dev.sm_count * 2 && p.numel() >= (int64_t{1} << 22)) {
        // Long rows too few for clusters to fill the GPU: split each row over enough blocks of 512
        // threads for 4 per SM (a full SM), combined through the workspace; fewer where the rows are
        // too short for that many.
        int64_t ch = 2;
        while (ch < 1024 && p.outer * ch < dev.sm_count * 4) ch *= 2;
        for (int64_t c = ch; c >= 4; c /= 2) add(kSplit, 512, v, 1, c);
        int64_t cl = 1;
        while (cl < 8 && p.outer * cl < dev.sm_count * 2) cl *= 2;
        add(kBlock, 512, v, cl);
      } else {
        // Few long rows: a cluster per row, enough blocks for every SM where there are enough rows.
        int64_t cl = 1;
        while (cl < 8 && p.outer * cl < dev.sm_count * 2) cl *= 2;
        add(kBlock, 512, v, cl);
        add(kBlock, 256, v, 1);
      }
      add(kWarp, 32, v, 1);
      add(kWarp, 32, 1, 1);
    } else {
      const int64_t v = widest(p.inner, p.len >= 16);
      const int64_t tiles = p.outer * CeilDiv(p.inner, 32 * v);
      if (p.len < 16) {
        // Short reductions: every thread has little to walk; one per column group.
        add(kColumns, 256, v, 1);
        add(kColumns, 128, v, 1);
      } else if (tiles >= dev.sm_count * 16) {
        // Many tiles: blocks of 8 warps in many waves (the last wave's imbalance is small).
        add(kTile, 256, v, 1);
        add(kTile, 128, v, 1);
      } else {
        // Fewer: blocks of 4 warps, so that 2 to 16 per SM are all resident at once (a second, partial
        // wave of long blocks would leave SMs idle for a block's whole time: 512 tiles of 8 warps at 3
        // resident per SM are 1.3 waves), and a cluster per tile where tiles alone give fewer than 2
        // blocks per SM.
        int64_t cl = 1;
        while (cl < 8 && tiles * cl < dev.sm_count * 2) cl *= 2;
        for (int64_t c = cl; c >= 1; c /= 2) add(kTile, 128, v, c);
        add(kTile, 64, v, 1);
        add(kTile, 64, 1, 1);
      }
      add(kColumns, 32, 1, 1);
    }
    for (const Point& t : tries) {
      if (Check(problem, t, dev).ok()) return t;
    }
    return tries.back();
  }

  Result<Candidate> Generate(const Problem& problem, const Point& pt, const DeviceFacts& dev) const override {
    KJIT_RETURN_IF_ERROR(Check(problem, pt, dev));
    const auto& p = static_cast<const ReduceProblem&>(problem);
    const int64_t strategy = pt.at("strategy"), threads = pt.at("threads"), vec = pt.at("vec"),
                  unroll = pt.at("unroll"), cluster = pt.at("cluster"), hint = pt.at("hint");
    const int64_t chunks = Chunks(pt);
    const bool wide_index = WideIndex(p);
    std::ostringstream src;
    src << codegen::SourceHead(*this, p, pt, dev);
    src << "typedef " << CudaType(p.in_dtype) << " in_t;\ntypedef in_t out_t;  // (kElementAccess's store_vec, unused)\n";
    src << "typedef " << (p.arg() ? "long long" : CudaType(p.out_dtype)) << " y_t;\n";
    src << "typedef " << (wide_index ? "long long" : "int") << " idx_t;\n";
    src << "#define IDX_NONE " << (wide_index ? "0x7fffffffffffffffLL" : "0x7fffffff") << "\n";
    src << "#define VEC " << vec << "\n#define HINT " << hint << "\n#define KIND " << p.kind << "\n#define IS_ARG "
        << (p.arg() ? 1 : 0) << "\n#define CLUSTER_SPLIT " << (cluster > 1 ? 1 : 0) << "\n#define ROW_SPLIT "
        << (p.inner == 1 && p.len % vec != 0 ? 1 : 0) << "\n#define SEGS " << p.segs << "LL\n";
    // The factor exactly as the host rounded it (hexadecimal: no decimal round trip).
    src << "#define MEAN_FACTOR " << std::hexfloat << p.mean_factor << std::defaultfloat << "f\n";
    src << "constexpr long long OUTER = " << p.outer << "LL, LEN = " << p.len << "LL, INNER = " << p.inner << "LL;\n";
    src << "constexpr int THREADS = " << threads << ", UNROLL = " << unroll << ", CLUSTER = " << cluster
        << ", CHUNKS = " << chunks << ";\n";
    src << codegen::kElementAccess << kPrelude;
    Candidate c;
    c.entry_point = "kjit_reduce";
    c.launch.block[0] = static_cast<uint32_t>(threads);
    const char* cluster_attr = cluster > 1 ? "__cluster_dims__(CLUSTER, 1, 1) " : "";
    switch (strategy) {
      case kWarp:
        src << "constexpr long long LANES = 32;\n" << kRowPartial << kWarpKernel;
        c.launch.grid[0] = static_cast<uint32_t>(CeilDiv(p.outer, threads / 32));
        break;
      case kBlock:
        src << "constexpr long long LANES = (long long)THREADS * CLUSTER;\n" << kRowPartial << R"(
// Block `rank` of a row's cluster takes the row's vectors rank * THREADS + t, then LANES apart.
extern "C" __global__ void )" << cluster_attr << kBlockKernelBody;
        c.launch.grid[0] = static_cast<uint32_t>(p.outer * cluster);
        break;
      case kSplit:
        src << "constexpr long long LANES = (long long)THREADS * CHUNKS;\n" << kRowPartial << kSplitKernel;
        c.launch.grid[0] = static_cast<uint32_t>(p.outer * chunks);
        c.launch.workspace_bytes = WorkspaceBytes(p, chunks);
        break;
      case kColumns:
        src << kColumnsKernel;
        c.launch.grid[0] = static_cast<uint32_t>(CeilDiv(p.outer * (p.inner / vec), threads));
        break;
      case kTile:
        src << kTileHead << R"(extern "C" __global__ void )" << cluster_attr << kTileKernelBody;
        c.launch.grid[0] = static_cast<uint32_t>(p.outer * CeilDiv(p.inner, 32 * vec) * cluster);
        break;
      default:
        return InvalidArgument("unknown strategy");
    }
    c.source = src.str();
    codegen::FinishCandidate(*this, pt, c);
    return c;
  }
};

}  // namespace

const Family* ReduceFamily() {
  static const Reduce family;
  return &family;
}

}  // namespace kjit::policy
