#include "row_chain/row_chain.h"

#include "src/chain_ops.h"
#include "src/codegen.h"

#include <algorithm>
#include <cmath>
#include <ios>
#include <optional>
#include <utility>
#include <sstream>

namespace kjit::policy {
namespace {

using chain::FloatLiteral;
using chain::IsServedFloat;
using chain::kChainOp;
using chain::Node;
using chain::Op;
using chain::Operand;
using chain::Short;
using codegen::CeilDiv;
using codegen::CudaType;

// Where a value lies: one per element of a row ([.., LEN]), one per row ([.., 1]), one per column ([LEN],
// broadcast over the rows).
enum class Shape { kFull, kRow, kCol };

// Input elements a thread may hold (items x vec of each tensor it loads).
constexpr int64_t kMaxHeldValues = 64;
// The longest row: 1024 threads holding 64 values of one tensor each.
constexpr int64_t kMaxLen = 1024 * kMaxHeldValues;

struct RowProblem : Problem {
  std::vector<DType> inputs;  // the external tensors' dtypes, in parameter order
  std::vector<Shape> input_shape;
  std::vector<int> input_alignment;
  std::vector<Node> nodes;  // per call; the reduction's is an Op::kInput of its operand
  std::vector<Shape> shape;  // per node
  std::vector<bool> post;    // per node: computed from the reduction's result
  int reduction = -1;  // the sum's, mean's or cumsum's node
  bool mean = false;
  bool scan = false;  // the reduction is a cumsum: a [.., LEN] value, each element the row's sum up to it
  float mean_factor = 1.f;
  std::vector<int> live;  // node indices whose outputs are written, in order
  std::vector<int64_t> sizes;  // the [.., LEN] tensors'
  int64_t rows = 0, len = 0;
  int64_t widest = 1;  // the widest element of any tensor, in bytes
  int64_t held_tensors = 0;  // tensors a thread holds a row's pieces of
};

Shape Combine(Shape a, Shape b) {
  if (a == b) return a;
  return Shape::kFull;  // a row's value with anything per element or per column: per element
}

#include "kjit/cuda/row_chain.cuh.inc"

class RowChain final : public Family {
 public:
  std::string_view name() const override { return "row_chain"; }
  int codegen_version() const override { return 1; }
  std::vector<std::string> ops() const override { return {}; }
  // The reductions it fuses with elementwise_chain's ops (whose calls the shim records into chains); the
  // reductions' calls are keyed alone too (the reduce family serves them), and join chains where they are
  // recorded (intercept.inc: KJIT_JOINS_CHAINS).
  std::vector<std::string> chain_ops() const override {
    return {"aten::mean", "aten::sum", "aten::cumsum", "aten::mul", "aten::add", "aten::sub", "aten::div",
            "aten::pow", "aten::tanh", "aten::exp", "aten::neg", "aten::sqrt", "aten::rsqrt", "aten::reciprocal",
            "aten::sigmoid"};
  }

  OpTraits traits(std::string_view) const override {
    // As the scan family's cumsum (scan.cc): two correct float32 scans or sums in different orders differ by a
    // few ulps of the largest running value, not of the element; float16 partial sums of large inputs overflow
    // to Inf wherever PyTorch's tree puts them, which no other order can match.
    OpTraits t;
    t.tolerance_by_dtype[DType::kFloat32] = {1e-5, 1e-5};
    t.no_large_inputs.insert(DType::kFloat16);
    return t;
  }

  std::vector<OpKey> SampleKeys() const override {
    constexpr DType f32 = DType::kFloat32, f16 = DType::kFloat16, bf16 = DType::kBFloat16;
    auto call = [](std::string_view op, const char* overload, std::vector<Arg> args) {
      return OpCall{std::string(op), overload, std::move(args)};
    };
    auto key = [](std::vector<OpCall> calls) {
      OpKey k;
      k.calls = std::move(calls);
      k.arch = 90;
      return k;
    };
    auto reduce = [&](const char* op, const char* overload, Arg x) {
      return call(op, overload, {std::move(x), IntList{-1}, true, NoneArg{}});
    };
    // Hugging Face's LlamaRMSNorm on a tensor already of the weight's dtype (its casts are no calls then):
    // v = x.pow(2).mean(-1, keepdim=True); h = x * torch.rsqrt(v + eps); weight * h. x is one tensor (kjit::input).
    auto rms = [&](const TensorDesc& x, double eps) {
      const TensorDesc w = TensorDesc::Contiguous(x.dtype, {x.sizes.back()});
      return key({call(kChainInputOp, "", {x}), call("aten::pow", "Tensor_Scalar", {ValueRef{0, 0}, 2.0}),
                  reduce("aten::mean", "dim", ValueRef{1, 0}), call("aten::add", "Tensor", {ValueRef{2, 0}, eps, int64_t{1}}),
                  call("aten::rsqrt", "", {ValueRef{3, 0}}), call("aten::mul", "Tensor", {ValueRef{0, 0}, ValueRef{4, 0}}),
                  call("aten::mul", "Tensor", {w, ValueRef{5, 0}})});
    };
    TensorDesc odd = TensorDesc::Contiguous(f32, {4095, 999});
    odd.storage_offset = 1;
    odd.alignment = 4;
    const TensorDesc centred = TensorDesc::Contiguous(f16, {8192, 2048});
    const TensorDesc summed = TensorDesc::Contiguous(bf16, {16384, 256});
    return {
        rms(TensorDesc::Contiguous(f32, {8192, 4096}), 1e-6),
        rms(TensorDesc::Contiguous(bf16, {4, 1024, 768}), 1e-5),
        // An odd row length off a 16-byte boundary: scalar accesses, a row's last piece partly past its end.
        rms(odd, 1e-6),
        // A row's centring: x - x.mean(-1, keepdim=True).
        key({call(kChainInputOp, "", {centred}), reduce("aten::mean", "dim", ValueRef{0, 0}),
             call("aten::sub", "Tensor", {ValueRef{0, 0}, ValueRef{1, 0}, int64_t{1}})}),
        // x * torch.rsqrt((x * x).sum(-1, keepdim=True)), short rows (several a block).
        key({call(kChainInputOp, "", {summed}), call("aten::mul", "Tensor", {ValueRef{0, 0}, ValueRef{0, 0}}),
             reduce("aten::sum", "dim_IntList", ValueRef{1, 0}), call("aten::rsqrt", "", {ValueRef{2, 0}}),
             call("aten::mul", "Tensor", {ValueRef{0, 0}, ValueRef{3, 0}})}),
        // A masked cumsum, torch.cumsum(x * mask, -1), float32 and float16.
        key({call("aten::mul", "Tensor", {TensorDesc::Contiguous(f32, {4096, 8192}), TensorDesc::Contiguous(f32, {4096, 8192})}),
             call("aten::cumsum", "", {ValueRef{0, 0}, int64_t{-1}, NoneArg{}})}),
        key({call("aten::mul", "Tensor", {TensorDesc::Contiguous(f16, {8192, 2048}), TensorDesc::Contiguous(f16, {8192, 2048})}),
             call("aten::cumsum", "", {ValueRef{0, 0}, int64_t{1}, NoneArg{}})}),
    };
  }

  Result<std::unique_ptr<Problem>> Match(const OpKey& key) const override {
    auto p = std::make_unique<RowProblem>();
    KJIT_ASSIGN_OR_RETURN(ChainLive chain, ChainLiveOf(key));
    const size_t calls = chain.calls;
    if (calls < 2) return InvalidArgument("a chain of at least two calls is needed");
    p->live.assign(chain.live.begin(), chain.live.end());
    // The [.., LEN] shape is the chain's tensor of the most dims (of those, the most elements).
    std::pair<size_t, int64_t> most = {0, -1};
    for (size_t i = 0; i < calls; ++i) {
      for (const Arg& a : key.calls[i].args) {
        const auto* t = std::get_if<TensorDesc>(&a);
        if (t != nullptr && std::make_pair(t->sizes.size(), t->numel()) > most) {
          most = {t->sizes.size(), t->numel()};
          p->sizes = t->sizes;
        }
      }
    }
    if (p->sizes.empty()) return InvalidArgument("a chain with no tensor of one dim or more");
    p->len = p->sizes.back();
    p->rows = p->len == 0 ? 0 : most.second / p->len;
    const int64_t rank = static_cast<int64_t>(p->sizes.size());
    int alignment = 16;
    for (size_t i = 0; i < calls; ++i) {
      const OpCall& c = key.calls[i];
      auto operand = [&](const Arg& a, bool scalar_allowed, Node& node) -> Status {
        return chain::ResolveOperand(a, i, scalar_allowed, node, [&](const TensorDesc& t, Node& n) -> Status {
          if (!IsServedFloat(t.dtype)) return InvalidArgument("dtype " + std::string(DTypeName(t.dtype)) + " is not served");
          if (!t.is_contiguous()) return InvalidArgument("non-contiguous tensors are declined");
          Shape s;
          if (t.sizes == p->sizes) {
            s = Shape::kFull;
          } else if (t.sizes == std::vector<int64_t>{p->len}) {
            s = Shape::kCol;
          } else {
            return InvalidArgument("a tensor that is neither [.., LEN] nor [LEN] (other broadcasts are declined)");
          }
          n.in.push_back(Operand{Operand::kInput, static_cast<int64_t>(p->inputs.size()), 0});
          p->inputs.push_back(t.dtype);
          p->input_shape.push_back(s);
          p->input_alignment.push_back(t.alignment);
          alignment = std::min<int>(alignment, t.alignment);
          return Status::Ok();
        });
      };
      auto dtype_of = [&](const Operand& o) { return chain::DTypeOfOperand(o, p->inputs, p->nodes); };
      auto shape_of = [&](const Operand& o) -> std::optional<Shape> {
        if (o.kind == Operand::kInput) return p->input_shape[static_cast<size_t>(o.index)];
        if (o.kind == Operand::kValue) return p->shape[static_cast<size_t>(o.index)];
        return std::nullopt;
      };
      const std::string name = c.op + (c.overload.empty() ? "" : "." + c.overload);
      // The chain's one reduction or scan, of a [.., LEN] value: a node passing its operand on, whose value the
      // kernel makes (a per-row sum, or per element the running sum: `out`).
      auto reduction = [&](Shape out) -> Status {
        Node node;
        node.op = Op::kInput;
        KJIT_RETURN_IF_ERROR(operand(c.args[0], false, node));
        if (shape_of(node.in[0]) != Shape::kFull) return InvalidArgument(name + " of a value that is not [.., LEN]");
        node.out = *dtype_of(node.in[0]);
        p->reduction = static_cast<int>(i);
        p->nodes.push_back(std::move(node));
        p->shape.push_back(out);
        p->post.push_back(true);
        return Status::Ok();
      };
      if (name == "aten::mean.dim" || name == "aten::sum.dim_IntList") {
        if (p->reduction >= 0) return InvalidArgument("a second reduction (one a chain)");
        if (c.args.size() != 4) return InvalidArgument(name + ": unexpected arguments");
        const auto* dims = std::get_if<IntList>(&c.args[1]);
        if (dims == nullptr || dims->size() != 1 || ((*dims)[0] != -1 && (*dims)[0] != rank - 1)) {
          return InvalidArgument(name + " over other dims than the last alone");
        }
        if (!std::holds_alternative<bool>(c.args[2]) || !std::get<bool>(c.args[2])) {
          return InvalidArgument(name + " without keepdim");
        }
        if (!std::holds_alternative<NoneArg>(c.args[3])) return InvalidArgument(name + " with a dtype");
        KJIT_RETURN_IF_ERROR(reduction(Shape::kRow));
        p->mean = c.op == "aten::mean";
        continue;
      }
      if (name == "aten::cumsum") {
        if (p->reduction >= 0) return InvalidArgument("a second reduction (one a chain)");
        if (c.args.size() != 3) return InvalidArgument(name + ": unexpected arguments");
        const auto* dim = std::get_if<int64_t>(&c.args[1]);
        if (dim == nullptr || (*dim != -1 && *dim != rank - 1)) return InvalidArgument(name + " over another dim than the last");
        if (!std::holds_alternative<NoneArg>(c.args[2])) return InvalidArgument(name + " with a dtype");
        KJIT_RETURN_IF_ERROR(reduction(Shape::kFull));
        p->scan = true;
        continue;
      }
      auto node = chain::ParseElementwise(c, name, operand, dtype_of);
      if (!node.ok()) {
        if (node.status().code() == StatusCode::kNotFound) {
          return InvalidArgument(name + " is neither a sum or mean over the last dim nor an elementwise op");
        }
        return InvalidArgument(node.status().message());
      }
      Shape s = *shape_of(node->in[0]);
      bool post = node->in[0].kind == Operand::kValue && p->post[static_cast<size_t>(node->in[0].index)];
      for (size_t k = 1; k < node->in.size(); ++k) {
        if (auto t = shape_of(node->in[k])) s = Combine(s, *t);
        post |= node->in[k].kind == Operand::kValue && p->post[static_cast<size_t>(node->in[k].index)];
      }
      p->nodes.push_back(std::move(*node));
      p->shape.push_back(s);
      p->post.push_back(post);
    }
    if (p->reduction < 0) return InvalidArgument("no sum, mean or cumsum over the last dim (elementwise_chain's, if any)");
    bool reaches = false;
    for (int l : p->live) {
      if (p->shape[static_cast<size_t>(l)] != Shape::kFull) {
        return InvalidArgument("a written value that is not [.., LEN] (per-row or per-column results are declined)");
      }
      reaches |= p->post[static_cast<size_t>(l)];
    }
    if (!reaches) return InvalidArgument("the reduction reaches no written value");
    if (p->rows == 0 || p->len == 0) return codegen::DeclineEmpty();
    if (p->len > kMaxLen) {
      return InvalidArgument("rows of " + std::to_string(p->len) + " elements, over the " + std::to_string(kMaxLen) +
                             " a block holds");
    }
    if (p->rows > (int64_t{1} << 40) / p->len) return InvalidArgument("too large");
    // MeanOps' factor: static_cast<float>(outputs) / numel, in float.
    p->mean_factor = static_cast<float>(p->rows) / static_cast<float>(p->rows * p->len);
    p->widest = 1;
    for (DType t : p->inputs) p->widest = std::max<int64_t>(p->widest, static_cast<int64_t>(DTypeSize(t)));
    for (int l : p->live) p->widest = std::max<int64_t>(p->widest, static_cast<int64_t>(DTypeSize(p->nodes[l].out)));
    // A scan holds its running sums too.
    p->held_tensors = static_cast<int64_t>(p->inputs.size()) + (p->scan ? 1 : 0);
    p->op = kChainOp;
    std::ostringstream desc;
    desc << "row_chain rows=" << p->rows << " len=" << p->len << " inputs=" << p->inputs.size() << " [";
    for (size_t i = 0; i < p->nodes.size(); ++i) {
      desc << (i ? " " : "")
           << (static_cast<int>(i) == p->reduction ? (p->scan ? "cumsum" : p->mean ? "mean" : "sum") : Short(p->nodes[i].op))
           << ":" << DTypeName(p->nodes[i].out);
    }
    desc << "] live=";
    for (size_t i = 0; i < p->live.size(); ++i) desc << (i ? "," : "") << p->live[i];
    desc << " align=" << alignment;
    p->description = desc.str();
    return std::unique_ptr<Problem>(std::move(p));
  }

  Space MakeSpace(const Problem&, const DeviceFacts&) const override {
    Space s;
    s.family = "row_chain";
    s.knobs = {
        {"row_threads", {32, 64, 128, 256, 512, 1024}, "threads a row"},
        {"block_rows", {1, 2, 4, 8}, "rows a block"},
        {"vec", {1, 2, 4, 8}, "consecutive elements a thread loads, computes and stores as one vector"},
        {"hint", {0, 1}, "1: evict-first loads of the rows and stores (data used once)"},
    };
    return s;
  }

  Status Check(const Problem& problem, const Point& pt, const DeviceFacts& dev) const override {
    const auto& p = static_cast<const RowProblem&>(problem);
    const int64_t row_threads = pt.at("row_threads"), block_rows = pt.at("block_rows"), vec = pt.at("vec"),
                  hint = pt.at("hint");
    if (hint != 0 && hint != 1) return InvalidArgument("hint is 0 or 1");
    if (row_threads < 32 || row_threads % 32 != 0 || row_threads > 1024) {
      return InvalidArgument("row_threads is a multiple of 32 up to 1024");
    }
    if (block_rows < 1) return InvalidArgument("block_rows is at least 1");
    KJIT_RETURN_IF_ERROR(codegen::CheckThreadsAndVector(row_threads * block_rows, vec, p.widest, dev));
    if (vec > 1 && p.len % vec != 0) return InvalidArgument("rows are not a multiple of the vector");
    for (size_t i = 0; i < p.inputs.size(); ++i) {
      KJIT_RETURN_IF_ERROR(codegen::CheckVectorAligned(vec, static_cast<int64_t>(DTypeSize(p.inputs[i])),
                                                       p.input_alignment[i], "an input"));
    }
    if (row_threads > 32 && (row_threads / 2) * vec >= p.len) {
      return InvalidArgument("half of a row's threads would hold none of it");
    }
    // A thread holds its pieces of every tensor it loads in registers from the loads to the stores.
    const int64_t items = CeilDiv(p.len, row_threads * vec);
    const int64_t held = items * vec * p.held_tensors;
    if (held > kMaxHeldValues) {
      return InvalidArgument("holds " + std::to_string(held) + " values a thread, over " + std::to_string(kMaxHeldValues));
    }
    if (row_threads * block_rows * (held + 32) > dev.registers_per_sm) {
      return InvalidArgument(std::to_string(row_threads * block_rows) + " threads holding " + std::to_string(held) +
                             " values each need more registers than an SM has");
    }
    if (block_rows > 1 && (block_rows / 2) >= p.rows) return InvalidArgument("more rows a block than the key has");
    if (CeilDiv(p.rows, block_rows) > int64_t{2147483647}) return InvalidArgument("grid");
    return Status::Ok();
  }

  Point ExpertDefault(const Problem& problem, const DeviceFacts& dev) const override {
    // The widest vector the alignments allow; threads enough that each holds at most 8 vectors of a row (so that
    // many rows are in flight), at least 256 threads a block.
    const auto& p = static_cast<const RowProblem&>(problem);
    Point last;
    for (int64_t vec : {8, 4, 2, 1}) {
      int64_t row_threads = 32;
      while (row_threads < 1024 && CeilDiv(p.len, row_threads * vec) > 8) row_threads *= 2;
      const int64_t block_rows = std::max<int64_t>(1, std::min<int64_t>(8, 256 / row_threads));
      for (int64_t b = block_rows; b >= 1; b /= 2) {
        last = Point{{"row_threads", row_threads}, {"block_rows", b}, {"vec", vec}, {"hint", 0}};
        if (Check(problem, last, dev).ok()) return last;
      }
    }
    return last;
  }

  Result<Candidate> Generate(const Problem& problem, const Point& pt, const DeviceFacts& dev) const override {
    KJIT_RETURN_IF_ERROR(Check(problem, pt, dev));
    const auto& p = static_cast<const RowProblem&>(problem);
    const int64_t row_threads = pt.at("row_threads"), block_rows = pt.at("block_rows"), vec = pt.at("vec"),
                  hint = pt.at("hint");
    const int64_t items = CeilDiv(p.len, row_threads * vec);
    std::ostringstream src;
    src << codegen::SourceHead(*this, p, pt, dev);
    src << "typedef __half in_t;\ntypedef __half out_t;\n";
    src << "#define VEC " << vec << "\n#define HINT " << hint << "\n#define ITEMS " << items << "\n#define ROW_THREADS "
        << row_threads << "\n#define BLOCK_ROWS " << block_rows << "\n";
    src << "constexpr long long ROWS = " << p.rows << "LL;\nconstexpr long long LEN = " << p.len << "LL;\n";
    if (p.mean) src << "#define MEAN_FACTOR " << std::hexfloat << p.mean_factor << std::defaultfloat << "f\n";
    src << "#define CHAIN_PARAMS ";
    for (size_t i = 0; i < p.inputs.size(); ++i) src << "const " << CudaType(p.inputs[i]) << "* __restrict__ in" << i << ", ";
    for (size_t o = 0; o < p.live.size(); ++o) {
      src << (o ? ", " : "") << CudaType(p.nodes[static_cast<size_t>(p.live[o])].out) << "* __restrict__ out" << o;
    }
    src << "\n" << codegen::kElementAccess << chain::kChainAccess << kRowAccess << (p.scan ? kRowScan : kRowSum) << kHead;
    // A thread's pieces of each input: x<i> of a [.., LEN] tensor (its row), c<i> of a [LEN] one.
    auto held = [&](size_t i) { return std::string(p.input_shape[i] == Shape::kFull ? "x" : "c") + std::to_string(i); };
    for (size_t i = 0; i < p.inputs.size(); ++i) src << "  float " << held(i) << "[ITEMS][VEC];\n";
    src << "#pragma unroll\n  for (int k = 0; k < ITEMS; ++k) {\n    const int col = (k * ROW_THREADS + lane) * VEC;\n"
        << "    if (active && col + VEC <= LEN) {\n";
    for (size_t i = 0; i < p.inputs.size(); ++i) {
      if (p.input_shape[i] == Shape::kFull) {
        src << "      load_any(in" << i << " + base + col, " << held(i) << "[k]);\n";
      } else {
        src << "      load_cached(in" << i << " + col, " << held(i) << "[k]);\n";
      }
    }
    src << "    } else {\n#pragma unroll\n      for (int e = 0; e < VEC; ++e) {\n        const bool in = active && col + e < LEN;\n";
    for (size_t i = 0; i < p.inputs.size(); ++i) {
      src << "        " << held(i) << "[k][e] = in ? load_one(in" << i << (p.input_shape[i] == Shape::kFull ? " + base" : "")
          << " + col + e) : 0.f;\n";
    }
    src << "      }\n    }\n  }\n";
    auto text = [&](const Operand& o) -> std::string {
      if (o.kind == Operand::kInput) return held(static_cast<size_t>(o.index)) + "[k][e]";
      if (o.kind == Operand::kValue) return "v" + std::to_string(o.index);
      return FloatLiteral(static_cast<float>(o.scalar));
    };
    auto element_nodes = [&](bool with_post) {
      for (size_t n = 0; n < p.nodes.size(); ++n) {
        if (p.shape[n] == Shape::kRow || (p.post[n] && !with_post)) continue;
        if (static_cast<int>(n) == p.reduction) {  // a scan's element: its running sum, rounded to its dtype
          src << "        const float v" << n << " = as_dtype<" << CudaType(p.nodes[n].out) << ">(s[k][e]);\n";
          continue;
        }
        src << "        const float v" << n << " = " << chain::Expression(p.nodes[n], text) << ";\n";
      }
    };
    const Node& reduced = p.nodes[static_cast<size_t>(p.reduction)];
    if (p.scan) {
      // 1. The scan's operand per element, held; then the row's running sums in float, a piece of ROW_THREADS x
      // VEC elements at a time: a thread's own in order, the threads before it, the pieces before.
      src << "  float s[ITEMS][VEC];\n#pragma unroll\n  for (int k = 0; k < ITEMS; ++k) {\n#pragma unroll\n"
          << "    for (int e = 0; e < VEC; ++e) {\n      s[k][e] = 0.f;\n"
          << "      if (active && (k * ROW_THREADS + lane) * VEC + e < LEN) {\n";
      element_nodes(false);
      src << "        s[k][e] = " << text(reduced.in[0]) << ";\n      }\n    }\n  }\n";
      src << "  float carry = 0.f;\n#pragma unroll\n  for (int k = 0; k < ITEMS; ++k) {\n    float run = 0.f;\n"
          << "#pragma unroll\n    for (int e = 0; e < VEC; ++e) {\n      run += s[k][e];\n      s[k][e] = run;\n    }\n"
          << "    float total;\n    const float before = carry + row_exclusive_scan(run, red, &total);\n"
          << "#pragma unroll\n    for (int e = 0; e < VEC; ++e) s[k][e] += before;\n    carry += total;\n  }\n";
    } else {
      // 1. The row's sum of the reduction's operand, in float: a thread's own terms in order, then row_sum.
      src << "  float acc = 0.f;\n#pragma unroll\n  for (int k = 0; k < ITEMS; ++k) {\n#pragma unroll\n"
          << "    for (int e = 0; e < VEC; ++e) {\n      if (active && (k * ROW_THREADS + lane) * VEC + e < LEN) {\n";
      element_nodes(false);
      src << "        acc += " << text(reduced.in[0]) << ";\n      }\n    }\n  }\n  acc = row_sum(acc, red);\n";
    }
    // 2. The per-row values: the reduction's, rounded to its dtype, and the ops of per-row values.
    for (size_t n = 0; n < p.nodes.size(); ++n) {
      if (p.shape[n] != Shape::kRow) continue;
      const std::string as = std::string("as_dtype<") + CudaType(p.nodes[n].out) + ">";
      if (static_cast<int>(n) == p.reduction) {
        src << "  const float v" << n << " = " << as << (p.mean ? "(acc * MEAN_FACTOR)" : "(acc)") << ";\n";
      } else {
        src << "  const float v" << n << " = " << chain::Expression(p.nodes[n], text) << ";\n";
      }
    }
    // 3. Per element again, from the held pieces: every value, the written ones stored.
    src << "#pragma unroll\n  for (int k = 0; k < ITEMS; ++k) {\n    const int col = (k * ROW_THREADS + lane) * VEC;\n";
    for (size_t o = 0; o < p.live.size(); ++o) src << "    float y" << o << "[VEC];\n";
    src << "#pragma unroll\n    for (int e = 0; e < VEC; ++e) {\n      {\n";
    element_nodes(true);
    for (size_t o = 0; o < p.live.size(); ++o) src << "        y" << o << "[e] = v" << p.live[o] << ";\n";
    src << "      }\n    }\n    if (active && col + VEC <= LEN) {\n";
    for (size_t o = 0; o < p.live.size(); ++o) src << "      store_any(out" << o << " + base + col, y" << o << ");\n";
    src << "    } else {\n#pragma unroll\n      for (int e = 0; e < VEC; ++e) {\n        if (active && col + e < LEN) {\n";
    for (size_t o = 0; o < p.live.size(); ++o) src << "          store_one(out" << o << " + base + col + e, y" << o << "[e]);\n";
    src << "        }\n      }\n    }\n  }\n" << kTail;
    Candidate c;
    c.entry_point = "kjit_row_chain";
    c.launch.block[0] = static_cast<uint32_t>(row_threads * block_rows);
    c.launch.grid[0] = static_cast<uint32_t>(CeilDiv(p.rows, block_rows));
    c.source = src.str();
    codegen::FinishCandidate(*this, pt, c);
    return c;
  }
};

}  // namespace

const Family* RowChainFamily() {
  static const RowChain family;
  return &family;
}

}  // namespace kjit::policy
