#include "scan/scan.h"

#include "src/codegen.h"

#include <algorithm>
#include <limits>
#include <sstream>

namespace kjit::policy {
namespace {

using codegen::CeilDiv;
using codegen::CudaType;

// What PyTorch 2.11 does on CUDA (aten/src/ATen/native/cuda/CumsumKernel.cu, CumprodKernel.cu,
// ScanUtils.cuh): cumsum/cumprod are structured kernels; with dtype=None the output has the input's
// dtype (integers and bool would scan into int64, which this family declines). The scan runs in
// scalar_t: init 0 (sum) or 1 (prod) combined with std::plus/std::multiplies<scalar_t>, so float16
// and bfloat16 partial results are rounded to the input's dtype at every step. Rows (dim last) go
// through a Sklansky scan in shared memory in tiles of 2 x num_threads_x with the previous tile's
// last value added to the tile's first; a dim that is not last through one thread per column in
// sequence; a 1-D tensor through cub::DeviceScan.
//
// The ABI (daemon/worker_protocol.h): (x, y), y laid out like the contiguous x.

enum Strategy : int64_t {
  kWarp = 0,
  kBlock = 1,
  kCluster = 2,
  kColumns = 3,
  kColumnsBlock = 4,
};

constexpr int64_t kMaxRegisterFloats = 64;          // values a thread holds (prefetch included)
constexpr int64_t kStaticSharedBytes = 48 * 1024;  // columns_block keeps its totals in static shared memory

struct ScanProblem : Problem {
  bool prod = false;
  DType dtype = DType::kFloat32;
  int64_t outer = 1, len = 1, inner = 1;
  int alignment = 16;  // of the input's data pointer
  int64_t rows() const { return outer * inner; }
};

// The kernels' CUDA, from scan.cuh (kjit_embed_cuda): kPrelude, kRowTiles, kRaggedRowTiles, kRowScans,
// kWarpBody, kBlockBody, kClusterBody, kColumnsKernel, kColumnsBlockKernel.
#include "kjit/cuda/scan.cuh.inc"
// A row strategy's kernel text; for a ragged row, its tile count spans the row shifted by up to VEC - 1
// elements (kRaggedRowTiles). The count is rewritten in the text, so a body whose count no longer reads as
// expected is an error, not a kernel that silently misses the row's last elements.
Result<std::string> Spanned(std::string body, bool ragged) {
  if (!ragged) return body;
  int rewritten = 0;
  for (const char* unit : {"TILE", "CHUNK"}) {
    const std::string from = std::string("(LEN + ") + unit + " - 1) / " + unit;
    const size_t at = body.find(from);
    if (at == std::string::npos) continue;
    body.replace(at, from.size(), std::string("(LEN + VEC - 1 + ") + unit + " - 1) / " + unit);
    ++rewritten;
  }
  if (rewritten != 1) {
    return Internal("scan: a ragged row kernel must count its tiles once as (LEN + TILE - 1) / TILE or "
                    "(LEN + CHUNK - 1) / CHUNK; found " + std::to_string(rewritten) + " such counts");
  }
  return body;
}

class Scan final : public Family {
 public:
  std::string_view name() const override { return "scan"; }
  int codegen_version() const override { return 1; }
  std::vector<std::string> ops() const override { return {"aten::cumsum", "aten::cumprod"}; }

  OpTraits traits(std::string_view op) const override {
    OpTraits t;
    // float32: two correct scans in different orders differ by a few ulps of
    // the largest running value on the path, not of the element (a running
    // sum that crosses zero): rtol 1e-5 for the common case, and the
    // evaluator's float64 rule (no less accurate than PyTorch) for elements
    // near a crossing. float16/bfloat16 keep assert_close's defaults: PyTorch
    // rounds every partial result to the dtype, so on long rows its own error
    // exceeds any elementwise tolerance and the float64 rule judges.
    t.tolerance_by_dtype[DType::kFloat32] = {1e-5, 1e-5};
    if (op == "aten::cumsum") {
      // float16 partial sums of large inputs (2^10..2^14) overflow to Inf in
      // PyTorch wherever its tree puts them; no other order can match it.
      t.no_large_inputs.insert(DType::kFloat16);
    } else {
      // bfloat16 partial products of large inputs cross the overflow threshold
      // within PyTorch's own rounding error (2^-9 per step) in some row of
      // any large key: Inf or not depends on the order.
      t.no_large_inputs.insert(DType::kBFloat16);
      // float16 partial products underflow to 0 after ~25 normal values; then
      // a following Inf gives NaN (0 * Inf) where PyTorch's tree has such a
      // partial product and Inf where another order does not.
      t.no_special_inputs.insert(DType::kFloat16);
    }
    return t;
  }

  std::vector<OpKey> SampleKeys() const override {
    auto key = [](const char* op, DType dt, std::vector<int64_t> sizes, int64_t dim) {
      return OpKey::Single(op, "", {TensorDesc::Contiguous(dt, std::move(sizes)), dim, NoneArg{}}, 90);
    };
    const char* sum = "aten::cumsum";
    const char* prod = "aten::cumprod";
    return {
        key(sum, DType::kFloat32, {4096, 32768}, 1),      // the headroom case: many long rows
        key(sum, DType::kFloat32, {16, 262144}, -1),      // few long rows: cluster
        key(sum, DType::kFloat16, {65536, 100}, -1),      // many short rows
        key(sum, DType::kBFloat16, {3, 1000003}, 0 + 1),  // odd, very long rows
        key(sum, DType::kFloat32, {128, 4096, 512}, 1),   // a middle dim
        key(prod, DType::kFloat32, {8, 33, 7}, -2),       // a short odd middle dim
        key(prod, DType::kBFloat16, {1024, 4095}, -1),    // odd rows
        key(prod, DType::kFloat16, {64, 512, 24}, 1),     // few columns
    };
  }

  Result<std::unique_ptr<Problem>> Match(const OpKey& key) const override {
    if (key.calls.size() != 1) return InvalidArgument("a single call is needed");
    const OpCall& c = key.calls[0];
    auto p = std::make_unique<ScanProblem>();
    if (c.op == "aten::cumprod") {
      p->prod = true;
    } else if (c.op != "aten::cumsum") {
      return InvalidArgument("not a cumsum or cumprod");
    }
    if (!c.overload.empty() || c.args.size() != 3) return InvalidArgument("unexpected overload or arguments");
    const auto* x = std::get_if<TensorDesc>(&c.args[0]);
    const auto* dim = std::get_if<int64_t>(&c.args[1]);
    if (!x || !dim) return InvalidArgument("arguments are not (Tensor, int, ScalarType?)");
    // dtype=T scans x.to(T) in T. Declined for now: the evaluator's float64
    // reference keeps the dtype argument, so it would not be a float64 result.
    if (!std::holds_alternative<NoneArg>(c.args[2])) return InvalidArgument("an explicit dtype is left to PyTorch");
    if (x->dtype != DType::kFloat32 && x->dtype != DType::kFloat16 && x->dtype != DType::kBFloat16) {
      return InvalidArgument("dtype " + std::string(DTypeName(x->dtype)) + " is not served");
    }
    if (x->sizes.empty()) return InvalidArgument("0-d inputs are left to PyTorch");
    if (!x->is_contiguous()) return InvalidArgument("non-contiguous inputs are declined");
    if (x->numel() == 0) return codegen::DeclineEmpty();
    KJIT_ASSIGN_OR_RETURN(const codegen::AroundDim around, codegen::SplitAroundDim(x->sizes, *dim));
    p->outer = around.outer;
    p->len = around.len;
    p->inner = around.inner;
    p->dtype = x->dtype;
    p->alignment = x->alignment;
    p->op = c.op;
    std::ostringstream desc;
    desc << (p->prod ? "cumprod " : "cumsum ") << DTypeName(p->dtype) << " outer=" << p->outer << " len=" << p->len
         << " inner=" << p->inner;
    p->description = desc.str();
    return std::unique_ptr<Problem>(std::move(p));
  }

  Space MakeSpace(const Problem&, const DeviceFacts&) const override {
    Space s;
    s.family = "scan";
    s.knobs = {
        {"strategy", {kWarp, kBlock, kCluster, kColumns, kColumnsBlock},
         "0 warp per row, 1 block per row, 2 row split over a cluster (totals through distributed shared "
         "memory), 3 a thread per columns, 4 column tiles with the dim split over a block's warps"},
        {"threads", {32, 64, 128, 256, 512, 1024}, "threads per block"},
        {"vec", {1, 2, 4, 8}, "elements per vector load and store (along the contiguous dim)"},
        {"items", {1, 2, 4, 8, 16},
         "vectors a thread holds per tile (rows), rows a warp scans per chunk (columns_block), rows read "
         "ahead (columns)"},
        {"cluster", {1, 2, 4, 8}, "blocks per row (cluster strategy)"},
        {"prefetch", {0, 1}, "1: the next tile is loaded before this one is scanned (row strategies)"},
        {"hint", {0, 1}, "1: streaming cache hints (evict-first) on loads and stores"},
    };
    return s;
  }

  Status Check(const Problem& problem, const Point& pt, const DeviceFacts& dev) const override {
    const auto& p = static_cast<const ScanProblem&>(problem);
    const int64_t strategy = pt.at("strategy"), threads = pt.at("threads"), vec = pt.at("vec"),
                  items = pt.at("items"), cluster = pt.at("cluster"), prefetch = pt.at("prefetch");
    const int64_t size = static_cast<int64_t>(DTypeSize(p.dtype));
    const bool columns = strategy == kColumns || strategy == kColumnsBlock;
    if (strategy < kWarp || strategy > kColumnsBlock) return InvalidArgument("unknown strategy");
    if (columns != (p.inner > 1)) return InvalidArgument(columns ? "columns need dim not last" : "rows need dim last");
    if ((strategy == kCluster) != (cluster > 1)) return InvalidArgument("cluster > 1 exactly for the cluster strategy");
    if (strategy == kCluster && (dev.arch < 90 || cluster > dev.max_cluster_size)) {
      return InvalidArgument("no such cluster here");
    }
    KJIT_RETURN_IF_ERROR(codegen::CheckThreadsAndVector(threads, vec, size, dev));
    KJIT_RETURN_IF_ERROR(codegen::CheckVectorAligned(vec, size, p.alignment));
    // Rows take a length VEC does not divide (kRaggedRowTiles); columns need whole vectors across them.
    if (columns && p.inner % vec != 0) return InvalidArgument("vector does not divide the contiguous extent");
    if (prefetch && columns) return InvalidArgument("prefetch applies to the row strategies (items reads ahead)");
    if (items * vec * (prefetch ? 2 : 1) > kMaxRegisterFloats) return InvalidArgument("too many values per thread");
    const int64_t max_grid = std::numeric_limits<int32_t>::max();
    switch (strategy) {
      case kWarp:
      case kBlock:
      case kCluster: {
        const int64_t lanes = strategy == kWarp ? 32 : threads;  // threads sharing one tile
        const int64_t tile = lanes * vec * items;
        const int64_t blocks = strategy == kWarp ? CeilDiv(p.rows(), threads / 32) : p.rows() * cluster;
        if (strategy == kBlock && threads < 64) return InvalidArgument("a block of one warp is the warp strategy");
        if (strategy == kCluster && threads < 128) return InvalidArgument("cluster blocks need at least 128 threads");
        if (strategy != kWarp && p.len <= lanes * vec / 2) return InvalidArgument("most threads would idle");
        if (items > 1 && p.len <= lanes * vec * (items / 2)) return InvalidArgument("fewer items cover the row");
        if (strategy == kCluster && p.len <= (cluster - 1) * tile) {
          return InvalidArgument("some block of the cluster would get nothing");
        }
        if (prefetch && p.len <= tile * cluster) return InvalidArgument("one tile per row: nothing to prefetch");
        if (blocks > max_grid) return InvalidArgument("grid too large");
        break;
      }
      case kColumns:
        if (items > p.len) return InvalidArgument("read-ahead longer than the dim");
        if (threads > 32 && p.outer * (p.inner / vec) <= threads / 2) return InvalidArgument("most threads would idle");
        if (CeilDiv(p.outer * (p.inner / vec), threads) > max_grid) return InvalidArgument("grid too large");
        break;
      case kColumnsBlock: {
        const int64_t warps = threads / 32;
        if (threads < 64) return InvalidArgument("a single warp is the columns strategy");
        if (p.len <= (warps - 1) * items) return InvalidArgument("some warp would get no row");
        if (2 * warps * 32 * vec * 4 > kStaticSharedBytes) return InvalidArgument("totals exceed static shared memory");
        if (p.outer * CeilDiv(p.inner, 32 * vec) > max_grid) return InvalidArgument("grid too large");
        break;
      }
    }
    return Status::Ok();
  }

  Point ExpertDefault(const Problem& problem, const DeviceFacts& dev) const override {
    const auto& p = static_cast<const ScanProblem&>(problem);
    // The widest vector the key allows, then as many items as fit; the first valid point of a list.
    auto first_valid = [&](const std::vector<Point>& tries) -> Point {
      for (Point t : tries) {
        for (int64_t vec : {8, 4, 2, 1}) {
          t["vec"] = vec;
          const int64_t want_items = t["items"];
          for (int64_t items = want_items; items >= 1; items /= 2) {
            t["items"] = items;
            if (Check(problem, t, dev).ok()) return t;
            if (t["prefetch"] == 1) {
              Point np = t;
              np["prefetch"] = 0;
              if (Check(problem, np, dev).ok()) return np;
            }
          }
          t["items"] = want_items;
        }
      }
      return tries.back();
    };
    // Streaming hints where the tensor is larger than L2 (50 MB on the H200): nothing read is read again.
    const int64_t hint = p.outer * p.len * p.inner * static_cast<int64_t>(DTypeSize(p.dtype)) > (int64_t{64} << 20);
    auto point = [&](int64_t strategy, int64_t threads, int64_t items, int64_t cluster, int64_t prefetch) {
      return Point{{"strategy", strategy}, {"threads", threads}, {"vec", 1}, {"items", items},
                   {"cluster", cluster}, {"prefetch", prefetch}, {"hint", hint}};
    };
    if (p.inner > 1) {
      // Enough columns to fill the GPU with a thread each (16 warps per SM): read-ahead hides the latency
      // of the sequential walk; otherwise the dim is split over a block's warps.
      if (p.outer * p.inner >= dev.sm_count * 512 * 4) {
        return first_valid({point(kColumns, 256, 4, 1, 0)});
      }
      // (A warp of threads reading one row at a time is valid for every column layout.)
      return first_valid(
          {point(kColumnsBlock, 256, 4, 1, 0), point(kColumns, 128, 4, 1, 0), point(kColumns, 32, 1, 1, 0)});
    }
    // Rows. With at least 16 rows per SM a warp per row keeps the GPU busy with no block barrier and
    // the carry in a register; 4 vectors per lane plus the prefetched tile keep ~64 KB in flight per SM.
    if (p.rows() >= dev.sm_count * 16 || p.len <= 1024) {
      return first_valid({point(kWarp, 128, 4, 1, 1), point(kWarp, 32, 1, 1, 0)});
    }
    // Too few rows to fill the GPU one block each, and long: split each over a cluster.
    if (p.rows() < 2 * dev.sm_count && p.len >= 65536) {
      return first_valid({point(kCluster, 512, 4, 8, 1), point(kBlock, 512, 4, 1, 1), point(kWarp, 32, 1, 1, 0)});
    }
    return first_valid({point(kBlock, 512, 4, 1, 1), point(kBlock, 256, 4, 1, 1), point(kWarp, 32, 1, 1, 0)});
  }

  Result<Candidate> Generate(const Problem& problem, const Point& pt, const DeviceFacts& dev) const override {
    KJIT_RETURN_IF_ERROR(Check(problem, pt, dev));
    const auto& p = static_cast<const ScanProblem&>(problem);
    const int64_t strategy = pt.at("strategy"), threads = pt.at("threads"), vec = pt.at("vec"),
                  items = pt.at("items"), cluster = pt.at("cluster"), prefetch = pt.at("prefetch"),
                  hint = pt.at("hint");
    std::ostringstream src;
    src << codegen::SourceHead(*this, p, pt, dev);
    src << "typedef " << CudaType(p.dtype) << " in_t;\ntypedef in_t out_t;\n";
    src << "#define VEC " << vec << "\n#define HINT " << hint << "\n#define PROD " << (p.prod ? 1 : 0) << "\n";
    src << "constexpr long long OUTER = " << p.outer << "LL, LEN = " << p.len << "LL, INNER = " << p.inner
        << "LL, ROWS = " << p.rows() << "LL;\n";
    src << "constexpr int THREADS = " << threads << ", ITEMS = " << items << ", CLUSTER = " << cluster << ";\n";
    src << "constexpr bool PREFETCH = " << (prefetch ? "true" : "false") << ";\n";
    src << codegen::kElementAccess << kPrelude;
    // Rows whose length VEC does not divide (kRaggedRowTiles) span one vector more than the row.
    const bool ragged = strategy <= kCluster && p.len % vec != 0;
    const char* row_tiles = ragged ? kRaggedRowTiles : kRowTiles;
    Candidate c;
    c.entry_point = "kjit_scan";
    c.launch.block[0] = static_cast<uint32_t>(threads);
    switch (strategy) {
      case kWarp: {
          KJIT_ASSIGN_OR_RETURN(const std::string body, Spanned(kWarpBody, ragged));
          src << "constexpr int LANES = 32;\n" << row_tiles << kRowScans << body;
        }
        c.launch.grid[0] = static_cast<uint32_t>(CeilDiv(p.rows(), threads / 32));
        break;
      case kBlock: {
          KJIT_ASSIGN_OR_RETURN(const std::string body, Spanned(kBlockBody, ragged));
          src << "constexpr int LANES = THREADS;\n" << row_tiles << kRowScans << body;
        }
        c.launch.grid[0] = static_cast<uint32_t>(p.rows());
        break;
      case kCluster: {
          KJIT_ASSIGN_OR_RETURN(const std::string body, Spanned(kClusterBody, ragged));
          src << "constexpr int LANES = THREADS;\n" << row_tiles << kRowScans << body;
        }
        c.launch.grid[0] = static_cast<uint32_t>(p.rows() * cluster);
        break;
      case kColumns:
        src << kColumnsKernel;
        c.launch.grid[0] = static_cast<uint32_t>(CeilDiv(p.outer * (p.inner / vec), threads));
        break;
      case kColumnsBlock:
        src << kColumnsBlockKernel;
        c.launch.grid[0] = static_cast<uint32_t>(p.outer * CeilDiv(p.inner, 32 * vec));
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

const Family* ScanFamily() {
  static const Scan family;
  return &family;
}

}  // namespace kjit::policy
