#include "elementwise_chain/elementwise_chain.h"

#include "src/chain_ops.h"
#include "src/codegen.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <sstream>

namespace kjit::policy {
namespace {

using codegen::CeilDiv;
using codegen::CudaType;

using chain::FloatLiteral;
using chain::kChainOp;
using chain::IsServedFloat;
using chain::Node;
using chain::Op;
using chain::Operand;
using chain::Short;

struct ChainProblem : Problem {
  std::vector<DType> inputs;  // the external tensors' dtypes, in parameter order
  std::vector<int> input_alignment;
  std::vector<Node> nodes;
  std::vector<int> live;  // node indices whose outputs are written, in order
  std::vector<int64_t> sizes;
  int64_t numel = 0;
  int64_t widest = 1;  // the widest element of any tensor, in bytes
};

// Input elements and output values a thread may hold (items x vec of each).
constexpr int64_t kMaxHeldValues = 64;

#include "kjit/cuda/elementwise_chain.cuh.inc"

class ElementwiseChain final : public Family {
 public:
  std::string_view name() const override { return "elementwise_chain"; }
  int codegen_version() const override { return 1; }
  // A single call of an elementwise op is PyTorch's: the family serves chains only, of these ops (intercept.inc:
  // the shim records their calls into chains) and of the casts and abs, which chains written by hand hold.
  std::vector<std::string> ops() const override { return {}; }
  std::vector<std::string> chain_ops() const override {
    return {"aten::mul", "aten::add", "aten::sub", "aten::div", "aten::pow", "aten::tanh",
            "aten::exp", "aten::neg", "aten::sqrt", "aten::rsqrt", "aten::reciprocal", "aten::sigmoid"};
  }

  OpTraits traits(std::string_view) const override { return OpTraits{}; }

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
    // minGPT's tanh-GELU: 0.5 * x * (1.0 + tanh(sqrt(2 / pi) * (x + 0.044715 * pow(x, 3.0)))). `shared`: x is one
    // tensor (kjit::input, read once) as the shim records it; else each use is an argument of its own.
    auto gelu = [&](const TensorDesc& x, bool live_tanh, bool shared = true) {
      const uint32_t s = shared ? 1 : 0;  // the calls' offset
      const Arg in = shared ? Arg(ValueRef{0, 0}) : Arg(x);
      std::vector<OpCall> calls;
      if (shared) calls.push_back(call(kChainInputOp, "", {x}));
      for (OpCall c : {call("aten::mul", "Tensor", {in, 0.5}),
                       call("aten::pow", "Tensor_Scalar", {in, 3.0}),
                       call("aten::mul", "Tensor", {ValueRef{s + 1, 0}, 0.044715}),
                       call("aten::add", "Tensor", {in, ValueRef{s + 2, 0}, int64_t{1}}),
                       call("aten::mul", "Tensor", {ValueRef{s + 3, 0}, std::sqrt(2.0 / M_PI)}),
                       call("aten::tanh", "", {ValueRef{s + 4, 0}}),
                       call("aten::add", "Tensor", {ValueRef{s + 5, 0}, 1.0, int64_t{1}}),
                       call("aten::mul", "Tensor", {ValueRef{s + 0, 0}, ValueRef{s + 6, 0}})}) {
        calls.push_back(std::move(c));
      }
      if (live_tanh) calls.push_back(call(kChainLiveOp, "", {IntList{s + 5, s + 7}}));
      return key(std::move(calls));
    };
    auto cast = [&](const Arg& x, DType to) {
      return call("aten::_to_copy", "", {x, to, NoneArg{}, NoneArg{}, NoneArg{}, false, NoneArg{}});
    };
    TensorDesc unaligned = TensorDesc::Contiguous(f32, {4097, 1001});
    unaligned.storage_offset = 1;
    unaligned.alignment = 4;
    const TensorDesc wide = TensorDesc::Contiguous(bf16, {8192, 4096});
    return {
        gelu(TensorDesc::Contiguous(f32, {8192, 3072}), false),
        gelu(TensorDesc::Contiguous(bf16, {8192, 3072}), false),
        gelu(TensorDesc::Contiguous(f16, {64, 1024, 768}), true),
        // An odd size off a 16-byte boundary: scalar accesses and the tail.
        gelu(unaligned, false, /*shared=*/false),
        // SiLU as x * torch.sigmoid(x), bfloat16.
        key({call(kChainInputOp, "", {wide}), call("aten::sigmoid", "", {ValueRef{0, 0}}),
             call("aten::mul", "Tensor", {ValueRef{0, 0}, ValueRef{1, 0}})}),
        // The tail of Llama's RMS norm, per element: weight * (h.to(f32) * r).to(bf16), r a float32 tensor.
        key({cast(wide, f32), call("aten::mul", "Tensor", {ValueRef{0, 0}, TensorDesc::Contiguous(f32, {8192, 4096})}),
             cast(ValueRef{1, 0}, bf16), call("aten::mul", "Tensor", {wide, ValueRef{2, 0}})}),
        // A scaled residual with alpha: x - 0.5 * y, then / 3 (a division by a wrapped number).
        key({call("aten::sub", "Tensor", {TensorDesc::Contiguous(f32, {1 << 24}), TensorDesc::Contiguous(f32, {1 << 24}), 0.5}),
             call("aten::div", "Tensor", {ValueRef{0, 0}, int64_t{3}})}),
    };
  }

  Result<std::unique_ptr<Problem>> Match(const OpKey& key) const override {
    auto p = std::make_unique<ChainProblem>();
    KJIT_ASSIGN_OR_RETURN(ChainLive chain, ChainLiveOf(key));
    const size_t calls = chain.calls;
    if (calls < 2) return InvalidArgument("a chain of at least two calls is needed");
    p->live.assign(chain.live.begin(), chain.live.end());
    int alignment = 16;
    for (size_t i = 0; i < calls; ++i) {
      const OpCall& c = key.calls[i];
      // A tensor operand: an external tensor of the chain's shape, an earlier call's output, or a wrapped number.
      auto operand = [&](const Arg& a, bool scalar_allowed, Node& node) -> Status {
        return chain::ResolveOperand(a, i, scalar_allowed, node, [&](const TensorDesc& t, Node& n) -> Status {
          if (!IsServedFloat(t.dtype)) return InvalidArgument("dtype " + std::string(DTypeName(t.dtype)) + " is not served");
          if (!t.is_contiguous()) return InvalidArgument("non-contiguous tensors are declined");
          if (p->inputs.empty()) p->sizes = t.sizes;  // the first tensor's shape is the chain's
          if (t.sizes != p->sizes) return InvalidArgument("tensors of different shapes (broadcasting) are declined");
          n.in.push_back(Operand{Operand::kInput, static_cast<int64_t>(p->inputs.size()), 0});
          p->inputs.push_back(t.dtype);
          p->input_alignment.push_back(t.alignment);
          alignment = std::min<int>(alignment, t.alignment);
          return Status::Ok();
        });
      };
      auto dtype_of = [&](const Operand& o) { return chain::DTypeOfOperand(o, p->inputs, p->nodes); };
      const std::string name = c.op + (c.overload.empty() ? "" : "." + c.overload);
      auto node = chain::ParseElementwise(c, name, operand, dtype_of);
      if (!node.ok()) return InvalidArgument(node.status().message());
      p->nodes.push_back(std::move(*node));
    }
    if (p->inputs.empty()) return InvalidArgument("a chain with no tensor input");
    p->numel = 1;
    for (int64_t s : p->sizes) p->numel *= s;
    if (p->numel == 0) return codegen::DeclineEmpty();
    if (p->numel > (int64_t{1} << 40)) return InvalidArgument("too large");
    p->widest = 1;
    for (DType t : p->inputs) p->widest = std::max<int64_t>(p->widest, static_cast<int64_t>(DTypeSize(t)));
    for (int l : p->live) p->widest = std::max<int64_t>(p->widest, static_cast<int64_t>(DTypeSize(p->nodes[l].out)));
    p->op = kChainOp;
    std::ostringstream desc;
    desc << "elementwise_chain n=" << p->numel << " inputs=" << p->inputs.size() << " [";
    for (size_t i = 0; i < p->nodes.size(); ++i) desc << (i ? " " : "") << Short(p->nodes[i].op) << ":" << DTypeName(p->nodes[i].out);
    desc << "] live=";
    for (size_t i = 0; i < p->live.size(); ++i) desc << (i ? "," : "") << p->live[i];
    desc << " align=" << alignment;
    p->description = desc.str();
    return std::unique_ptr<Problem>(std::move(p));
  }

  Space MakeSpace(const Problem&, const DeviceFacts&) const override {
    Space s;
    s.family = "elementwise_chain";
    s.knobs = {
        {"threads", {64, 128, 256, 512, 1024}, "threads per block"},
        {"vec", {1, 2, 4, 8}, "consecutive elements a thread loads, computes and stores as one vector"},
        {"items", {1, 2, 4}, "vectors a thread has in flight, THREADS x VEC elements apart"},
        {"hint", {0, 1}, "1: evict-first loads and stores (data used once)"},
    };
    return s;
  }

  Status Check(const Problem& problem, const Point& pt, const DeviceFacts& dev) const override {
    const auto& p = static_cast<const ChainProblem&>(problem);
    const int64_t threads = pt.at("threads"), vec = pt.at("vec"), items = pt.at("items"), hint = pt.at("hint");
    if (hint != 0 && hint != 1) return InvalidArgument("hint is 0 or 1");
    if (items < 1) return InvalidArgument("items is at least 1");
    // Every input element and output value a thread holds is a register across the loads, the chain and the
    // stores: past 64 of them, fewer threads fit an SM (or they spill) with no more bytes in flight.
    const int64_t held = items * vec * static_cast<int64_t>(p.inputs.size() + p.live.size());
    if (held > kMaxHeldValues) {
      return InvalidArgument("holds " + std::to_string(held) + " values a thread (inputs and outputs), over " +
                             std::to_string(kMaxHeldValues));
    }
    KJIT_RETURN_IF_ERROR(codegen::CheckThreadsAndVector(threads, vec, p.widest, dev));
    for (size_t i = 0; i < p.inputs.size(); ++i) {
      KJIT_RETURN_IF_ERROR(codegen::CheckVectorAligned(vec, static_cast<int64_t>(DTypeSize(p.inputs[i])),
                                                       p.input_alignment[i], "an input"));
    }
    if (vec > 1 && p.numel < vec) return InvalidArgument("fewer elements than one vector");
    // A block's registers: the held values and about 32 more a thread (addresses, indices, the chain's
    // temporaries) must fit the register file, or the launch fails.
    if (threads * (held + 32) > dev.registers_per_sm) {
      return InvalidArgument(std::to_string(threads) + " threads holding " + std::to_string(held) +
                             " values each need more registers than an SM has");
    }
    if (CeilDiv(p.numel, threads * vec * items) > int64_t{2147483647}) return InvalidArgument("grid");
    return Status::Ok();
  }

  Point ExpertDefault(const Problem& problem, const DeviceFacts& dev) const override {
    // The widest vector every tensor's alignment allows (16-byte accesses where it can), 256 threads, plain
    // caching: a memory-bound stream whose every byte is read or written once.
    return codegen::WidestValid(*this, problem, dev, {{"threads", 256}, {"vec", 1}, {"items", 1}, {"hint", 0}});
  }

  Result<Candidate> Generate(const Problem& problem, const Point& pt, const DeviceFacts& dev) const override {
    KJIT_RETURN_IF_ERROR(Check(problem, pt, dev));
    const auto& p = static_cast<const ChainProblem&>(problem);
    const int64_t threads = pt.at("threads"), vec = pt.at("vec"), items = pt.at("items"), hint = pt.at("hint");
    std::ostringstream src;
    src << codegen::SourceHead(*this, p, pt, dev);
    src << "typedef __half in_t;\ntypedef __half out_t;\n";
    src << "#define VEC " << vec << "\n#define ITEMS " << items << "\n#define HINT " << hint << "\n";
    src << "constexpr int THREADS = " << threads << ";\nconstexpr long long N = " << p.numel << "LL;\n";
    src << "#define CHAIN_PARAMS ";
    for (size_t i = 0; i < p.inputs.size(); ++i) {
      src << "const " << CudaType(p.inputs[i]) << "* __restrict__ in" << i << ", ";
    }
    for (size_t o = 0; o < p.live.size(); ++o) {
      src << (o ? ", " : "") << CudaType(p.nodes[static_cast<size_t>(p.live[o])].out) << "* __restrict__ out" << o;
    }
    src << "\n" << codegen::kElementAccess << chain::kChainAccess << kHead;
    for (size_t i = 0; i < p.inputs.size(); ++i) src << "  float x" << i << "[ITEMS][VEC];\n";
    src << "#pragma unroll\n  for (int k = 0; k < ITEMS; ++k) {\n"
        << "    const long long base = tile + (long long)k * THREADS * VEC;\n    if (base + VEC <= N) {\n";
    for (size_t i = 0; i < p.inputs.size(); ++i) src << "      load_any(in" << i << " + base, x" << i << "[k]);\n";
    src << "    } else {\n#pragma unroll\n      for (int e = 0; e < VEC; ++e) {\n";
    for (size_t i = 0; i < p.inputs.size(); ++i) {
      src << "        x" << i << "[k][e] = base + e < N ? load_one(in" << i << " + base + e) : 0.f;\n";
    }
    src << "      }\n    }\n  }\n";
    for (size_t o = 0; o < p.live.size(); ++o) src << "  float y" << o << "[ITEMS][VEC];\n";
    src << "#pragma unroll\n  for (int k = 0; k < ITEMS; ++k) {\n#pragma unroll\n    for (int e = 0; e < VEC; ++e) {\n";
    for (size_t n = 0; n < p.nodes.size(); ++n) {
      src << "      const float v" << n << " = " << Expression(p.nodes[n]) << ";\n";
    }
    for (size_t o = 0; o < p.live.size(); ++o) src << "      y" << o << "[k][e] = v" << p.live[o] << ";\n";
    src << "    }\n  }\n";
    src << "#pragma unroll\n  for (int k = 0; k < ITEMS; ++k) {\n"
        << "    const long long base = tile + (long long)k * THREADS * VEC;\n    if (base + VEC <= N) {\n";
    for (size_t o = 0; o < p.live.size(); ++o) src << "      store_any(out" << o << " + base, y" << o << "[k]);\n";
    src << "    } else {\n#pragma unroll\n      for (int e = 0; e < VEC; ++e) {\n        if (base + e < N) {\n";
    for (size_t o = 0; o < p.live.size(); ++o) src << "          store_one(out" << o << " + base + e, y" << o << "[k][e]);\n";
    src << "        }\n      }\n    }\n  }\n" << kTail;
    Candidate c;
    c.entry_point = "kjit_elementwise_chain";
    c.launch.block[0] = static_cast<uint32_t>(threads);
    c.launch.grid[0] = static_cast<uint32_t>(CeilDiv(p.numel, threads * vec * items));
    c.source = src.str();
    codegen::FinishCandidate(*this, pt, c);
    return c;
  }

 private:
  // One node's value for element e, in float, rounded to its dtype.
  static std::string Expression(const Node& node) {
    return chain::Expression(node, [](const Operand& o) -> std::string {
      if (o.kind == Operand::kInput) return "x" + std::to_string(o.index) + "[k][e]";
      if (o.kind == Operand::kValue) return "v" + std::to_string(o.index);
      return FloatLiteral(static_cast<float>(o.scalar));
    });
  }
};

}  // namespace

const Family* ElementwiseChainFamily() {
  static const ElementwiseChain family;
  return &family;
}

}  // namespace kjit::policy
