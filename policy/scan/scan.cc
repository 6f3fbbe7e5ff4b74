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

// Device code every strategy shares, after codegen::kElementAccess.
constexpr const char* kPrelude = R"(
// The scan's operator in float; `a` holds the earlier elements. Sums and
// products of special values do not depend on the order: a prefix holding
// NaN, or +Inf and -Inf (sum), or 0 and Inf (product) is NaN in any order.
__device__ __forceinline__ float comb(float a, float b) { return PROD ? a * b : a + b; }
#define IDENT (PROD ? 1.f : 0.f)

// Inclusive scan over the lanes of a full warp (Kogge-Stone).
__device__ __forceinline__ float warp_incl(float v, int lane) {
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const float u = __shfl_up_sync(0xffffffffu, v, o);
    if (lane >= o) v = comb(u, v);
  }
  return v;
}
// The exclusive value of each lane from the inclusive ones.
__device__ __forceinline__ float warp_excl(float incl, int lane) {
  const float u = __shfl_up_sync(0xffffffffu, incl, 1);
  return lane == 0 ? IDENT : u;
}
// Scans a thread's VEC values in place; returns their total.
__device__ __forceinline__ float vec_scan(float (&v)[VEC]) {
#pragma unroll
  for (int k = 1; k < VEC; ++k) v[k] = comb(v[k - 1], v[k]);
  return v[VEC - 1];
}
__device__ __forceinline__ void vec_apply(float (&v)[VEC], float prefix) {
#pragma unroll
  for (int k = 0; k < VEC; ++k) v[k] = comb(prefix, v[k]);
}
// A vector, or identities past the end (VEC divides the contiguous extent:
// a vector is wholly in or wholly out).
__device__ __forceinline__ void load_or_ident(const in_t* p, bool in, float (&v)[VEC]) {
  if (in) {
    load_vec<HINT>(p, v);
  } else {
#pragma unroll
    for (int k = 0; k < VEC; ++k) v[k] = IDENT;
  }
}
)";

// Rows: the tile loads (kRowTiles, or kRaggedRowTiles where VEC does not divide the row), then the
// block-wide scan of the warps' totals (kRowScans). Split in two so that the rows VEC divides keep their
// sources byte for byte (the scans measured before ragged rows were served stay valid).
constexpr const char* kRowTiles = R"(
// Tile `base` of a row: vector i of thread `t` at base + (i * LANES + t) * VEC.
__device__ __forceinline__ void load_tile(const in_t* xr, long long base, int t, float (&v)[ITEMS][VEC]) {
#pragma unroll
  for (int i = 0; i < ITEMS; ++i) {
    const long long col = base + ((long long)i * LANES + t) * VEC;
    load_or_ident(xr + col, col < LEN, v[i]);
  }
}
__device__ __forceinline__ void store_tile(out_t* yr, long long base, int t, float (&v)[ITEMS][VEC]) {
#pragma unroll
  for (int i = 0; i < ITEMS; ++i) {
    const long long col = base + ((long long)i * LANES + t) * VEC;
    if (col < LEN) store_vec(yr + col, v[i]);
  }
}
)";

// A row whose length VEC does not divide starts at any element of a vector. Its tiles run over it as
// seen from the VEC-aligned element at or before its first (row_shift elements earlier; the tensors'
// bases are VEC-aligned: Check, and outputs as PyTorch allocates them), so that every vector but the
// row's first and last is whole and aligned and keeps its 16-byte access. Of those two, only the
// elements inside the row are read (one at a time) and stored; those outside hold identities, which
// leave every prefix as it is. A tile past the last is all identities and stores nothing. Without this
// an odd row length could only use VEC = 1 (H200, cumsum f32 4095x32767: 1.16x the memory floor).
constexpr const char* kRaggedRowTiles = R"(
template <typename T> __device__ __forceinline__ long long row_shift(const T* r) {
  return (long long)((reinterpret_cast<unsigned long long>(r) / sizeof(T)) % VEC);
}
__device__ __forceinline__ float load_one(const in_t* p) {
  return Bits<in_t>::to_f(*reinterpret_cast<const typename Bits<in_t>::U*>(p));
}
__device__ __forceinline__ void store_one(out_t* p, float v) {
  *reinterpret_cast<typename Bits<out_t>::U*>(p) = Bits<out_t>::from_f(v);
}
// Tile `base` of the shifted row: vector i of thread `t` at base + (i * LANES + t) * VEC, row element
// that minus the shift.
__device__ __forceinline__ void load_tile(const in_t* xr, long long base, int t, float (&v)[ITEMS][VEC]) {
  const long long shift = row_shift(xr);
#pragma unroll
  for (int i = 0; i < ITEMS; ++i) {
    const long long e = base + ((long long)i * LANES + t) * VEC - shift;
    if (e >= 0 && e + VEC <= LEN) {
      load_vec<HINT>(xr + e, v[i]);
    } else {
#pragma unroll
      for (int k = 0; k < VEC; ++k) v[i][k] = e + k >= 0 && e + k < LEN ? load_one(xr + e + k) : IDENT;
    }
  }
}
__device__ __forceinline__ void store_tile(out_t* yr, long long base, int t, float (&v)[ITEMS][VEC]) {
  const long long shift = row_shift(yr);
#pragma unroll
  for (int i = 0; i < ITEMS; ++i) {
    const long long e = base + ((long long)i * LANES + t) * VEC - shift;
    if (e >= 0 && e + VEC <= LEN) {
      store_vec(yr + e, v[i]);
    } else {
#pragma unroll
      for (int k = 0; k < VEC; ++k) {
        if (e + k >= 0 && e + k < LEN) store_one(yr + e + k, v[i][k]);
      }
    }
  }
}
)";

constexpr const char* kRowScans = R"(// Warp 0 turns a tile's table of warp totals (chunk-major: entry i * WARPS + w
// is warp w's total of vector chunk i) into exclusive prefixes starting from
// `start`, in place, and returns start combined with the whole tile (every
// lane). Each lane scans PER_LANE consecutive entries, then the lanes' totals.
constexpr int WARPS = THREADS / 32;
constexpr int ENTRIES = ITEMS * WARPS;
constexpr int PER_LANE = (ENTRIES + 31) / 32;
__device__ __forceinline__ float table_scan(float* table, float start, int lane) {
  float before[PER_LANE];
  float run = IDENT;
#pragma unroll
  for (int j = 0; j < PER_LANE; ++j) {
    const int e = lane * PER_LANE + j;
    before[j] = run;
    if (e < ENTRIES) run = comb(run, table[e]);
  }
  const float incl = warp_incl(run, lane);
  const float base = comb(start, warp_excl(incl, lane));
#pragma unroll
  for (int j = 0; j < PER_LANE; ++j) {
    const int e = lane * PER_LANE + j;
    if (e < ENTRIES) table[e] = comb(base, before[j]);
  }
  return comb(start, __shfl_sync(0xffffffffu, incl, 31));
}
// One tile held by the block: each vector chunk scanned by its warps, the
// warps' inclusive totals into `table` (lane 31), each lane's exclusive
// prefix within its warp into `lane_excl`.
__device__ __forceinline__ void warp_scans(float (&v)[ITEMS][VEC], float (&lane_excl)[ITEMS], float* table,
                                           int warp, int lane) {
#pragma unroll
  for (int i = 0; i < ITEMS; ++i) {
    const float incl = warp_incl(vec_scan(v[i]), lane);
    lane_excl[i] = warp_excl(incl, lane);
    if (lane == 31) table[i * WARPS + warp] = incl;
  }
}
)";

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
    const int64_t nd = static_cast<int64_t>(x->sizes.size());
    if (nd == 0) return InvalidArgument("0-d inputs are left to PyTorch");
    if (!x->is_contiguous()) return InvalidArgument("non-contiguous inputs are declined");
    if (x->numel() == 0) return codegen::DeclineEmpty();
    const int64_t d = *dim < 0 ? *dim + nd : *dim;
    if (d < 0 || d >= nd) return InvalidArgument("dim out of range");
    for (int64_t i = 0; i < nd; ++i) {
      if (i < d) p->outer *= x->sizes[i];
      if (i == d) p->len = x->sizes[i];
      if (i > d) p->inner *= x->sizes[i];
    }
    if (p->outer * p->len * p->inner > (int64_t{1} << 40)) return InvalidArgument("too large");
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
    src << codegen::SourceHead(*this, p, pt);
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
          KJIT_ASSIGN_OR_RETURN(const std::string body, Spanned(R"(
constexpr long long TILE = 32LL * VEC * ITEMS;
constexpr long long TILES = (LEN + TILE - 1) / TILE;
extern "C" __global__ void __launch_bounds__(THREADS) kjit_scan(const in_t* __restrict__ x, out_t* __restrict__ y) {
  const long long row = (long long)blockIdx.x * (THREADS / 32) + threadIdx.x / 32;
  if (row >= ROWS) return;  // whole warps leave: the shuffles below see full warps
  const int lane = threadIdx.x % 32;
  const in_t* xr = x + row * LEN;
  out_t* yr = y + row * LEN;
  float cur[ITEMS][VEC], nxt[ITEMS][VEC];
  float carry = IDENT;  // the row up to this tile, the same in every lane
  load_tile(xr, 0, lane, cur);
  for (long long t = 0; t < TILES; ++t) {
    const long long base = t * TILE;
    if (PREFETCH && t + 1 < TILES) load_tile(xr, base + TILE, lane, nxt);
#pragma unroll
    for (int i = 0; i < ITEMS; ++i) {
      const float incl = warp_incl(vec_scan(cur[i]), lane);
      vec_apply(cur[i], comb(carry, warp_excl(incl, lane)));
      carry = comb(carry, __shfl_sync(0xffffffffu, incl, 31));
    }
    store_tile(yr, base, lane, cur);
    if (t + 1 < TILES) {
      if (PREFETCH) {
#pragma unroll
        for (int i = 0; i < ITEMS; ++i)
#pragma unroll
          for (int k = 0; k < VEC; ++k) cur[i][k] = nxt[i][k];
      } else {
        load_tile(xr, base + TILE, lane, cur);
      }
    }
  }
}
)", ragged));
          src << "constexpr int LANES = 32;\n" << row_tiles << kRowScans << body;
        }
        c.launch.grid[0] = static_cast<uint32_t>(CeilDiv(p.rows(), threads / 32));
        break;
      case kBlock: {
          KJIT_ASSIGN_OR_RETURN(const std::string body, Spanned(R"(
constexpr long long TILE = (long long)THREADS * VEC * ITEMS;
constexpr long long TILES = (LEN + TILE - 1) / TILE;
extern "C" __global__ void __launch_bounds__(THREADS) kjit_scan(const in_t* __restrict__ x, out_t* __restrict__ y) {
  // Double-buffered by tile parity: a tile's table is written only after every
  // thread has passed the barriers of the tile between, so its last readers are done.
  __shared__ float table[2][ENTRIES];
  const long long row = blockIdx.x;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const in_t* xr = x + row * LEN;
  out_t* yr = y + row * LEN;
  float cur[ITEMS][VEC], nxt[ITEMS][VEC], lane_excl[ITEMS];
  float carry = IDENT;  // the row up to this tile (kept by warp 0)
  load_tile(xr, 0, threadIdx.x, cur);
  for (long long t = 0; t < TILES; ++t) {
    const long long base = t * TILE;
    float* tab = table[t & 1];
    if (PREFETCH && t + 1 < TILES) load_tile(xr, base + TILE, threadIdx.x, nxt);
    warp_scans(cur, lane_excl, tab, warp, lane);
    __syncthreads();
    if (warp == 0) carry = table_scan(tab, carry, lane);
    __syncthreads();
#pragma unroll
    for (int i = 0; i < ITEMS; ++i) vec_apply(cur[i], comb(tab[i * WARPS + warp], lane_excl[i]));
    store_tile(yr, base, threadIdx.x, cur);
    if (t + 1 < TILES) {
      if (PREFETCH) {
#pragma unroll
        for (int i = 0; i < ITEMS; ++i)
#pragma unroll
          for (int k = 0; k < VEC; ++k) cur[i][k] = nxt[i][k];
      } else {
        load_tile(xr, base + TILE, threadIdx.x, cur);
      }
    }
  }
}
)", ragged));
          src << "constexpr int LANES = THREADS;\n" << row_tiles << kRowScans << body;
        }
        c.launch.grid[0] = static_cast<uint32_t>(p.rows());
        break;
      case kCluster: {
          KJIT_ASSIGN_OR_RETURN(const std::string body, Spanned(R"(
// The row in chunks of CLUSTER tiles; block `rank` of the cluster scans tile
// `rank` of each chunk. Every block folds the blocks' totals in rank order, so
// all agree on the carry.
constexpr long long TILE = (long long)THREADS * VEC * ITEMS;
constexpr long long CHUNK = TILE * CLUSTER;
constexpr long long CHUNKS = (LEN + CHUNK - 1) / CHUNK;
extern "C" __global__ void __cluster_dims__(CLUSTER, 1, 1) __launch_bounds__(THREADS)
kjit_scan(const in_t* __restrict__ x, out_t* __restrict__ y) {
  // Double-buffered by chunk parity (see the block strategy); a block's total
  // is rewritten two chunks later, after a cluster barrier every reader of the
  // old value has passed.
  __shared__ float table[2][ENTRIES];
  __shared__ float block_total[2];
  const int rank = (int)__clusterRelativeBlockRank();
  const long long row = blockIdx.x / CLUSTER;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const in_t* xr = x + row * LEN;
  out_t* yr = y + row * LEN;
  float cur[ITEMS][VEC], nxt[ITEMS][VEC], lane_excl[ITEMS];
  float carry = IDENT;  // the row up to this chunk, the same in every thread of the cluster
  load_tile(xr, (long long)rank * TILE, threadIdx.x, cur);
  for (long long t = 0; t < CHUNKS; ++t) {
    const long long base = t * CHUNK + (long long)rank * TILE;
    float* tab = table[t & 1];
    if (PREFETCH && t + 1 < CHUNKS) load_tile(xr, base + CHUNK, threadIdx.x, nxt);
    warp_scans(cur, lane_excl, tab, warp, lane);
    __syncthreads();
    if (warp == 0) {
      const float total = table_scan(tab, IDENT, lane);
      if (lane == 0) block_total[t & 1] = total;
    }
    // Release/acquire across the cluster: every block's table and total are written.
    __cluster_barrier_arrive();
    __cluster_barrier_wait();
    float run = carry, mine = carry;
    for (int r = 0; r < CLUSTER; ++r) {
      if (r == rank) mine = run;
      run = comb(run, *(const float*)__cluster_map_shared_rank((void*)&block_total[t & 1], r));
    }
    carry = run;
#pragma unroll
    for (int i = 0; i < ITEMS; ++i) vec_apply(cur[i], comb(mine, comb(tab[i * WARPS + warp], lane_excl[i])));
    store_tile(yr, base, threadIdx.x, cur);
    if (t + 1 < CHUNKS) {
      if (PREFETCH) {
#pragma unroll
        for (int i = 0; i < ITEMS; ++i)
#pragma unroll
          for (int k = 0; k < VEC; ++k) cur[i][k] = nxt[i][k];
      } else {
        load_tile(xr, base + CHUNK, threadIdx.x, cur);
      }
    }
  }
  // No block leaves while another may still read its total.
  __cluster_barrier_arrive();
  __cluster_barrier_wait();
}
)", ragged));
          src << "constexpr int LANES = THREADS;\n" << row_tiles << kRowScans << body;
        }
        c.launch.grid[0] = static_cast<uint32_t>(p.rows() * cluster);
        break;
      case kColumns:
        src << R"(
// A thread owns VEC adjacent columns (o, i..i+VEC) of the [OUTER, LEN, INNER]
// view and walks down them in order, ITEMS rows loaded ahead.
extern "C" __global__ void __launch_bounds__(THREADS) kjit_scan(const in_t* __restrict__ x, out_t* __restrict__ y) {
  const long long t = (long long)blockIdx.x * THREADS + threadIdx.x;
  const long long groups = INNER / VEC;
  if (t >= OUTER * groups) return;
  const long long o = t / groups, i = (t % groups) * VEC;
  const in_t* xc = x + o * LEN * INNER + i;
  out_t* yc = y + o * LEN * INNER + i;
  float acc[VEC];
#pragma unroll
  for (int k = 0; k < VEC; ++k) acc[k] = IDENT;
  for (long long j = 0; j < LEN; j += ITEMS) {
    float v[ITEMS][VEC];
#pragma unroll
    for (int u = 0; u < ITEMS; ++u) {
      if (j + u < LEN) load_vec<HINT>(xc + (j + u) * INNER, v[u]);
    }
#pragma unroll
    for (int u = 0; u < ITEMS; ++u) {
      if (j + u < LEN) {
#pragma unroll
        for (int k = 0; k < VEC; ++k) {
          acc[k] = comb(acc[k], v[u][k]);
          v[u][k] = acc[k];
        }
        store_vec(yc + (j + u) * INNER, v[u]);
      }
    }
  }
}
)";
        c.launch.grid[0] = static_cast<uint32_t>(CeilDiv(p.outer * (p.inner / vec), threads));
        break;
      case kColumnsBlock:
        src << R"(
// A block owns a tile of 32 * VEC adjacent columns of one outer index (lane l
// the VEC columns at l * VEC). The dim goes in chunks of WARPS * ITEMS rows;
// warp w scans rows w * ITEMS .. + ITEMS of a chunk, then every warp folds the
// warps' totals in warp order: all agree on the carry.
constexpr int WARPS = THREADS / 32;
constexpr long long COL_TILES = (INNER + 32 * VEC - 1) / (32 * VEC);
constexpr long long CHUNK = (long long)WARPS * ITEMS;
constexpr long long CHUNKS = (LEN + CHUNK - 1) / CHUNK;
extern "C" __global__ void __launch_bounds__(THREADS) kjit_scan(const in_t* __restrict__ x, out_t* __restrict__ y) {
  // Double-buffered by chunk parity: rewritten only after a barrier every reader has passed.
  __shared__ float totals[2][WARPS][32 * VEC];
  const long long o = blockIdx.x / COL_TILES, tile = blockIdx.x % COL_TILES;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const long long i = tile * 32 * VEC + (long long)lane * VEC;
  const bool active = i < INNER;  // VEC divides INNER: a vector is wholly in or out
  const in_t* xc = x + o * LEN * INNER + i;
  out_t* yc = y + o * LEN * INNER + i;
  float carry[VEC];
#pragma unroll
  for (int k = 0; k < VEC; ++k) carry[k] = IDENT;
  for (long long c = 0; c < CHUNKS; ++c) {
    const long long j0 = c * CHUNK + (long long)warp * ITEMS;
    float v[ITEMS][VEC];
#pragma unroll
    for (int u = 0; u < ITEMS; ++u) load_or_ident(xc + (j0 + u) * INNER, active && j0 + u < LEN, v[u]);
#pragma unroll
    for (int u = 1; u < ITEMS; ++u)
#pragma unroll
      for (int k = 0; k < VEC; ++k) v[u][k] = comb(v[u - 1][k], v[u][k]);
#pragma unroll
    for (int k = 0; k < VEC; ++k) totals[c & 1][warp][lane * VEC + k] = v[ITEMS - 1][k];
    __syncthreads();
    float mine[VEC];
#pragma unroll
    for (int k = 0; k < VEC; ++k) {
      float run = carry[k];
      mine[k] = carry[k];
      for (int w = 0; w < WARPS; ++w) {
        if (w == warp) mine[k] = run;
        run = comb(run, totals[c & 1][w][lane * VEC + k]);
      }
      carry[k] = run;
    }
#pragma unroll
    for (int u = 0; u < ITEMS; ++u) {
      if (active && j0 + u < LEN) {
#pragma unroll
        for (int k = 0; k < VEC; ++k) v[u][k] = comb(mine[k], v[u][k]);
        store_vec(yc + (j0 + u) * INNER, v[u]);
      }
    }
  }
}
)";
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
