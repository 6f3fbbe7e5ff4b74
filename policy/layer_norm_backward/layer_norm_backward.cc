#include "layer_norm_backward/layer_norm_backward.h"

#include "kjit/cache/record.h"
#include "src/codegen.h"

#include <algorithm>
#include <sstream>
#include <string>
#include <vector>

namespace kjit::policy {
namespace {

using codegen::CeilDiv;
using codegen::Align16;
using codegen::CudaType;

// The ABI (daemon/worker_protocol.h): one pointer per tensor argument (None as null), then the outputs (an
// output the mask leaves out as null), then the workspace when the point has one:
//   layer_norm: (dy, x, mean, rstd, weight|null, bias|null, dx|null, dweight|null, dbias|null[, ws])
//   rms_norm:   (dy, x, rstd, weight|null, dx|null, dweight|null[, ws])
// The mask and the weight's presence are part of the key, so the source is specialised on them and never
// touches a null pointer.

enum Strategy : int64_t {
  kWarp = 0,        // a warp per row, held in registers
  kBlockHeld = 1,   // a block per row, held in registers
  kBlockTwice = 2,  // a block per row, read twice
};

constexpr const char* kLayerNormBackward = "aten::native_layer_norm_backward";
constexpr const char* kRmsNormBackward = "aten::_fused_rms_norm_backward";
// Floats of each of the two held tensors (gradient, input) a thread keeps.
constexpr int64_t kMaxHeldFloats = 32;
// Static shared memory the column blocks' warp sums may take (of the 48 KiB a block gets without opting in).
constexpr int64_t kMaxColumnSharedBytes = 32 * 1024;

struct NormBackwardProblem : Problem {
  bool rms = false;
  DType dtype = DType::kFloat32;
  int64_t rows = 1, len = 1;  // M, N
  bool has_weight = false, has_bias = false;
  bool dx = false, dw = false, db = false;  // the output mask
  int alignment = 16;                       // the least of the gradient's, input's and weight's
  bool columns() const { return dw || db; }
};

bool IsServedFloat(DType t) { return t == DType::kFloat32 || t == DType::kFloat16 || t == DType::kBFloat16; }

int64_t RowBlocks(const NormBackwardProblem& p, int64_t strategy, int64_t threads) {
  if (!p.dx) return 0;
  return strategy == kWarp ? CeilDiv(p.rows, threads / 32) : p.rows;
}
int64_t ColumnTiles(const NormBackwardProblem& p, int64_t col_vec) { return CeilDiv(p.len, 32 * col_vec); }
int64_t ColumnBlocks(const NormBackwardProblem& p, int64_t col_vec, int64_t chunks) {
  return p.columns() ? ColumnTiles(p, col_vec) * chunks : 0;
}
uint64_t WorkspaceBytes(const NormBackwardProblem& p, int64_t col_vec, int64_t chunks) {
  if (!p.columns() || chunks == 1) return 0;
  const int64_t gradients = (p.dw ? 1 : 0) + (p.db ? 1 : 0);
  return static_cast<uint64_t>(Align16(ColumnTiles(p, col_vec) * 4) + gradients * chunks * p.len * 4);
}

// The kernels' CUDA, from layer_norm_backward.cuh (kjit_embed_cuda): kPrelude, kRowsHeld, kRowsTwice, kColumns,
// kEntry.
#include "kjit/cuda/layer_norm_backward.cuh.inc"
class LayerNormBackward final : public Family {
 public:
  std::string_view name() const override { return "layer_norm_backward"; }
  int codegen_version() const override { return 1; }
  std::vector<std::string> ops() const override { return {kLayerNormBackward, kRmsNormBackward}; }

  OpTraits traits(std::string_view) const override {
    // Default assert_close tolerances per dtype. grad_input's row sums and the columns' sums over the rows
    // run in another order than PyTorch's: where they nearly cancel (random mean and rstd make rows that
    // do) the float64 second chance judges them (compare.h: no less accurate than PyTorch).
    return OpTraits{};
  }

  std::vector<OpKey> SampleKeys() const override {
    constexpr DType f32 = DType::kFloat32, f16 = DType::kFloat16, bf16 = DType::kBFloat16;
    auto stats_desc = [](std::vector<int64_t> sizes, size_t normalized) {
      for (size_t i = sizes.size() - normalized; i < sizes.size(); ++i) sizes[i] = 1;
      return TensorDesc::Contiguous(DType::kFloat32, sizes);
    };
    auto ln = [&](DType dt, std::vector<int64_t> sizes, std::vector<int64_t> shape, bool weight, bool bias,
                  IntList mask) {
      std::vector<Arg> args;
      args.push_back(TensorDesc::Contiguous(dt, sizes));
      args.push_back(TensorDesc::Contiguous(dt, sizes));
      args.push_back(IntList(shape));
      args.push_back(stats_desc(sizes, shape.size()));
      args.push_back(stats_desc(sizes, shape.size()));
      args.push_back(weight ? Arg(TensorDesc::Contiguous(dt, shape)) : Arg(NoneArg{}));
      args.push_back(bias ? Arg(TensorDesc::Contiguous(dt, shape)) : Arg(NoneArg{}));
      args.push_back(std::move(mask));
      return OpKey::Single(kLayerNormBackward, "", std::move(args), 90);
    };
    auto rms = [&](DType dt, std::vector<int64_t> sizes, std::vector<int64_t> shape, bool weight, IntList mask) {
      std::vector<Arg> args;
      args.push_back(TensorDesc::Contiguous(dt, sizes));
      args.push_back(TensorDesc::Contiguous(dt, sizes));
      args.push_back(IntList(shape));
      args.push_back(stats_desc(sizes, shape.size()));
      args.push_back(weight ? Arg(TensorDesc::Contiguous(dt, shape)) : Arg(NoneArg{}));
      args.push_back(std::move(mask));
      return OpKey::Single(kRmsNormBackward, "", std::move(args), 90);
    };
    return {
        // A transformer's: [batch * tokens, hidden], every gradient.
        ln(f32, {8192, 768}, {768}, true, true, {1, 1, 1}),
        ln(bf16, {16, 512, 1024}, {1024}, true, true, {1, 1, 1}),
        ln(f16, {4096, 4096}, {4096}, true, true, {1, 1, 1}),
        // The input's gradient only (frozen weights), and no affine parameters at all.
        ln(f32, {2048, 1024}, {1024}, true, true, {1, 0, 0}),
        ln(f32, {512, 33}, {33}, false, false, {1, 0, 0}),
        // The parameters' gradients only, over a long row and over many short rows.
        ln(f32, {128, 50000}, {50000}, true, true, {0, 1, 1}),
        ln(bf16, {65536, 64}, {64}, true, false, {1, 1, 0}),
        rms(bf16, {8192, 4096}, {4096}, true, {1, 1}),
        rms(f32, {8, 128, 96}, {128, 96}, false, {1, 0}),
    };
  }

  Result<std::unique_ptr<Problem>> Match(const OpKey& key) const override {
    if (key.calls.size() != 1) return InvalidArgument("a single call is needed");
    const OpCall& c = key.calls[0];
    auto p = std::make_unique<NormBackwardProblem>();
    if (c.op == kRmsNormBackward) {
      p->rms = true;
    } else if (c.op != kLayerNormBackward) {
      return InvalidArgument("not a layer_norm or rms_norm backward");
    }
    // layer_norm: (grad_out, input, normalized_shape, mean, rstd, weight?, bias?, output_mask[3])
    // rms_norm:   (grad_out, input, normalized_shape, rstd, weight?, output_mask[2])
    const size_t arity = p->rms ? 6 : 8;
    if (!c.overload.empty() || c.args.size() != arity) return InvalidArgument("unexpected overload or arguments");
    const size_t rstd_at = p->rms ? 3 : 4, weight_at = p->rms ? 4 : 5, mask_at = arity - 1;
    const auto* dy = std::get_if<TensorDesc>(&c.args[0]);
    const auto* x = std::get_if<TensorDesc>(&c.args[1]);
    const auto* shape = std::get_if<IntList>(&c.args[2]);
    const auto* mask = std::get_if<IntList>(&c.args[mask_at]);
    if (!dy || !x || !shape || !mask) return InvalidArgument("arguments are not (Tensor, Tensor, int[], ..., bool[])");
    if (mask->size() != (p->rms ? 2u : 3u)) return InvalidArgument("output_mask has the wrong length");
    for (int64_t m : *mask) {
      if (m != 0 && m != 1) return InvalidArgument("output_mask is not a bool list");
    }
    p->dx = (*mask)[0] == 1;
    p->dw = (*mask)[1] == 1;
    p->db = !p->rms && (*mask)[2] == 1;
    if (!p->dx && !p->columns()) return InvalidArgument("no gradient asked for");
    if (!IsServedFloat(x->dtype)) return InvalidArgument("dtype " + std::string(DTypeName(x->dtype)) + " is not served");
    if (dy->dtype != x->dtype || dy->sizes != x->sizes) {
      return InvalidArgument("the gradient and the input differ in dtype or sizes");
    }
    if (!dy->is_contiguous() || !x->is_contiguous()) return InvalidArgument("non-contiguous tensors are declined");
    if (x->numel() == 0) return codegen::DeclineEmpty();
    const size_t nd = x->sizes.size(), nn = shape->size();
    if (nn == 0 || nn > nd) return InvalidArgument("normalized_shape must be 1..ndim dims");
    for (size_t i = 0; i < nn; ++i) {
      if ((*shape)[i] != x->sizes[nd - nn + i]) return InvalidArgument("normalized_shape is not the input's trailing shape");
    }
    int64_t n = 1;
    for (int64_t s : *shape) n *= s;
    p->len = n;
    p->rows = x->numel() / n;
    if (x->numel() > (int64_t{1} << 40)) return InvalidArgument("too large");
    if (p->len >= (int64_t{1} << 24)) return InvalidArgument("rows past 2^24 elements: N would be inexact in float");
    // mean and rstd: M contiguous float32 values (acc_type of the three served dtypes).
    auto statistic = [&](size_t index, const char* what) -> Status {
      const auto* t = std::get_if<TensorDesc>(&c.args[index]);
      if (!t) return InvalidArgument(std::string(what) + " is not a tensor");
      if (t->dtype != DType::kFloat32) return InvalidArgument(std::string(what) + " is not float32");
      if (t->numel() != p->rows || !t->is_contiguous()) {
        return InvalidArgument(std::string(what) + " is not one contiguous value a row");
      }
      if (t->alignment < 4) return InvalidArgument(std::string(what) + " is not float-aligned");
      return Status::Ok();
    };
    if (!p->rms) KJIT_RETURN_IF_ERROR(statistic(3, "mean"));
    KJIT_RETURN_IF_ERROR(statistic(rstd_at, "rstd"));
    int alignment = std::min(dy->alignment, x->alignment);
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
      *present = true;
      return Status::Ok();
    };
    KJIT_RETURN_IF_ERROR(param(weight_at, "weight", &p->has_weight));
    if (p->has_weight) alignment = std::min<int>(alignment, std::get<TensorDesc>(c.args[weight_at]).alignment);
    if (!p->rms) KJIT_RETURN_IF_ERROR(param(6, "bias", &p->has_bias));
    // PyTorch allocates grad_weight like the weight and grad_bias like the bias: without them it fails.
    if (p->dw && !p->has_weight) return InvalidArgument("grad_weight asked for without a weight");
    if (p->db && !p->has_bias) return InvalidArgument("grad_bias asked for without a bias");
    p->dtype = x->dtype;
    p->alignment = alignment;
    p->op = c.op;
    std::ostringstream desc;
    desc << (p->rms ? "rms_norm_backward " : "layer_norm_backward ") << DTypeName(p->dtype) << " rows=" << p->rows
         << " len=" << p->len << (p->has_weight ? " weight" : "") << (p->has_bias ? " bias" : "") << " grads="
         << (p->dx ? "x" : "") << (p->dw ? "w" : "") << (p->db ? "b" : "");
    p->description = desc.str();
    return std::unique_ptr<Problem>(std::move(p));
  }

  Space MakeSpace(const Problem&, const DeviceFacts&) const override {
    Space s;
    s.family = "layer_norm_backward";
    s.knobs = {
        {"strategy", {kWarp, kBlockHeld, kBlockTwice},
         "grad_input: 0 warp/row held in registers, 1 block/row held, 2 block/row read twice"},
        {"threads", {64, 128, 256, 512, 1024}, "threads per block (both kinds)"},
        {"vec", {1, 2, 4, 8}, "grad_input: elements per vector load and store"},
        {"col_vec", {1, 2, 4, 8}, "grad_weight/bias: adjacent columns a lane sums (a tile is 32 lanes)"},
        {"chunks", {1, 2, 4, 8, 16, 32, 64, 128}, "grad_weight/bias: row chunks a column tile is split into"},
        {"unroll", {1, 2, 4}, "grad_weight/bias: rows a warp has in flight"},
    };
    return s;
  }

  Status Check(const Problem& problem, const Point& pt, const DeviceFacts& dev) const override {
    const auto& p = static_cast<const NormBackwardProblem&>(problem);
    const int64_t strategy = pt.at("strategy"), threads = pt.at("threads"), vec = pt.at("vec"),
                  col_vec = pt.at("col_vec"), chunks = pt.at("chunks"), unroll = pt.at("unroll");
    const int64_t size = static_cast<int64_t>(DTypeSize(p.dtype));
    if (strategy != kWarp && strategy != kBlockHeld && strategy != kBlockTwice) return InvalidArgument("unknown strategy");
    KJIT_RETURN_IF_ERROR(codegen::CheckThreadsAndVector(threads, vec, size, dev));
    if (p.dx) {
      KJIT_RETURN_IF_ERROR(codegen::CheckVectorAligned(vec, size, p.alignment, "gradient, input and weight"));
      if (p.len % vec != 0) return InvalidArgument("vector does not divide the row");
      switch (strategy) {
        case kWarp:
          if (CeilDiv(p.len, 32 * vec) * vec > kMaxHeldFloats) return InvalidArgument("row too long for a warp");
          break;
        case kBlockHeld:
          if (CeilDiv(p.len, threads * vec) * vec > kMaxHeldFloats) return InvalidArgument("row too long for registers");
          if (p.len * 2 < threads * vec) return InvalidArgument("most threads would idle");
          break;
        default:
          if (p.len < threads * vec) return InvalidArgument("row shorter than one pass");
          break;
      }
    } else if (strategy != kWarp || vec != 1) {
      return InvalidArgument("no grad_input: its knobs stay at strategy 0, vec 1");
    }
    if (p.columns()) {
      KJIT_RETURN_IF_ERROR(codegen::CheckThreadsAndVector(threads, col_vec, size, dev));
      KJIT_RETURN_IF_ERROR(codegen::CheckVectorAligned(col_vec, size, p.alignment, "gradient and input"));
      if (p.len % col_vec != 0) return InvalidArgument("column vector does not divide the row");
      const int64_t gradients = (p.dw ? 1 : 0) + (p.db ? 1 : 0);
      if (gradients * (threads / 32) * 32 * col_vec * 4 > kMaxColumnSharedBytes) {
        return InvalidArgument("the warps' column sums exceed shared memory");
      }
      if (chunks > 1 && CeilDiv(p.rows, chunks) < threads / 32) return InvalidArgument("chunks shorter than the warps");
      if (WorkspaceBytes(p, col_vec, chunks) > cache::kMaxWorkspaceBytes) return InvalidArgument("workspace too large");
    } else if (col_vec != 1 || chunks != 1 || unroll != 1) {
      return InvalidArgument("no grad_weight or grad_bias: their knobs stay at col_vec 1, chunks 1, unroll 1");
    }
    if (RowBlocks(p, strategy, threads) + ColumnBlocks(p, col_vec, chunks) > int64_t{2147483647}) {
      return InvalidArgument("more blocks than the grid holds");
    }
    return Status::Ok();
  }

  Point ExpertDefault(const Problem& problem, const DeviceFacts& dev) const override {
    const auto& p = static_cast<const NormBackwardProblem&>(problem);
    const int64_t size = static_cast<int64_t>(DTypeSize(p.dtype));
    // Columns: 16-byte loads where they fit, 256 threads, and enough chunks that the column blocks fill the
    // GPU about twice over while each still walks 64 rows or more.
    int64_t col_vec = 1, chunks = 1;
    if (p.columns()) {
      for (int64_t v : {8, 4, 2}) {
        if (v * size <= 16 && p.len % v == 0 && p.alignment >= v * size) {
          col_vec = v;
          break;
        }
      }
      const int64_t tiles = ColumnTiles(p, col_vec);
      const int64_t want = std::max<int64_t>(1, 2 * dev.sm_count / std::max<int64_t>(tiles, 1));
      while (chunks * 2 <= 128 && chunks * 2 <= want && CeilDiv(p.rows, chunks * 2) >= 64) chunks *= 2;
    }
    auto point = [&](int64_t strategy, int64_t threads) {
      return Point{{"strategy", strategy}, {"threads", threads}, {"vec", 1},
                   {"col_vec", col_vec},   {"chunks", chunks},   {"unroll", p.columns() ? 4 : 1}};
    };
    auto valid = [&](const Point& pt) { return Check(problem, pt, dev).ok(); };
    if (!p.dx) {
      Point pt = point(kWarp, 256);
      if (valid(pt)) return pt;
      pt["unroll"] = 1;
      return pt;
    }
    // grad_input at the widest vector the row takes (vec is the only knob WidestValid widens): a warp per
    // row while a lane can hold the row's share of both tensors, else a block per row held, else read twice.
    auto widest = [&](Point pt) { return codegen::WidestValid(*this, problem, dev, std::move(pt)); };
    Point warp = widest(point(kWarp, 256));
    if (valid(warp)) return warp;
    for (int64_t threads : {256, 512, 1024}) {
      Point held = widest(point(kBlockHeld, threads));
      if (valid(held)) return held;
    }
    for (int64_t threads : {512, 256, 128, 64}) {
      Point twice = widest(point(kBlockTwice, threads));
      if (valid(twice)) return twice;
    }
    return warp;
  }

  Result<Candidate> Generate(const Problem& problem, const Point& pt, const DeviceFacts& dev) const override {
    KJIT_RETURN_IF_ERROR(Check(problem, pt, dev));
    const auto& p = static_cast<const NormBackwardProblem&>(problem);
    const int64_t strategy = pt.at("strategy"), threads = pt.at("threads"), vec = pt.at("vec"),
                  col_vec = pt.at("col_vec"), chunks = pt.at("chunks"), unroll = pt.at("unroll");
    const uint64_t workspace = WorkspaceBytes(p, col_vec, chunks);
    const int64_t row_blocks = RowBlocks(p, strategy, threads);
    std::ostringstream src;
    src << codegen::SourceHead(*this, p, pt, dev);
    src << "typedef " << CudaType(p.dtype) << " in_t;\ntypedef in_t out_t;\n";
    src << "#define VEC " << vec << "\n#define HINT 0\n#define RMS " << (p.rms ? 1 : 0) << "\n#define HAS_W "
        << (p.has_weight ? 1 : 0) << "\n#define DX " << (p.dx ? 1 : 0) << "\n#define DW " << (p.dw ? 1 : 0)
        << "\n#define DB " << (p.db ? 1 : 0) << "\n#define CHUNKS " << chunks << "\n";
    src << "constexpr long long ROWS = " << p.rows << "LL, LEN = " << p.len << "LL, ROW_BLOCKS = " << row_blocks
        << "LL;\n";
    src << "constexpr int THREADS = " << threads << ", COL_VEC = " << col_vec << ", UNROLL = " << unroll << ";\n";
    // The same parameter list for every point of a key but the workspace: the kernel ABI.
    std::vector<std::string> params = {"const in_t* __restrict__ dy", "const in_t* __restrict__ x"};
    if (!p.rms) params.push_back("const float* __restrict__ mean");
    params.push_back("const float* __restrict__ rstd");
    params.push_back("const in_t* __restrict__ w");
    if (!p.rms) params.push_back("const in_t* __restrict__ b");
    params.push_back("out_t* __restrict__ dx");
    params.push_back("out_t* __restrict__ dw");
    if (!p.rms) params.push_back("out_t* __restrict__ db");
    if (workspace > 0) params.push_back("unsigned char* __restrict__ ws");
    src << "#define KJIT_PARAMS";
    for (size_t i = 0; i < params.size(); ++i) src << (i == 0 ? " " : ", ") << params[i];
    src << "\n";
    src << "#define KJIT_ABSENT " << (p.rms ? "const float* mean = nullptr; out_t* db = nullptr; " : "(void)b; ")
        << (workspace > 0 ? "" : "unsigned char* ws = nullptr; ") << "(void)mean; (void)db; (void)ws;\n";
    src << codegen::kElementAccess << codegen::kReductions << kPrelude;
    if (p.dx) {
      if (strategy == kBlockTwice) {
        src << kRowsTwice;
      } else {
        const bool warp = strategy == kWarp;
        src << "#define ROW_BY_WARP " << (warp ? 1 : 0) << "\n";
        src << "constexpr int ITEMS = " << CeilDiv(p.len, (warp ? 32 : threads) * vec)
            << ", STRIDE = " << (warp ? 32 : threads) << ";\n";
        src << kRowsHeld;
      }
    }
    if (p.columns()) src << kColumns;
    src << kEntry;
    Candidate c;
    c.entry_point = "kjit_layer_norm_backward";
    c.launch.block[0] = static_cast<uint32_t>(threads);
    c.launch.grid[0] = static_cast<uint32_t>(row_blocks + ColumnBlocks(p, col_vec, chunks));
    c.launch.workspace_bytes = workspace;
    c.source = src.str();
    codegen::FinishCandidate(*this, pt, c);
    return c;
  }
};

}  // namespace

const Family* LayerNormBackwardFamily() {
  static const LayerNormBackward family;
  return &family;
}

}  // namespace kjit::policy
