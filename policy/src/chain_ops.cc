#include "src/chain_ops.h"

#include <bit>
#include <cstdio>
#include <map>

#include "src/codegen.h"

namespace kjit::policy::chain {

#include "kjit/cuda/chain.cuh.inc"

bool IsServedFloat(DType t) { return t == DType::kFloat32 || t == DType::kFloat16 || t == DType::kBFloat16; }

namespace {

DType Promote(DType a, DType b) { return a == b ? a : DType::kFloat32; }

}  // namespace

const char* Short(Op op) {
  switch (op) {
    case Op::kInput: return "input";
    case Op::kMul: return "mul";
    case Op::kAdd: return "add";
    case Op::kSub: return "sub";
    case Op::kDiv: return "div";
    case Op::kPow2: return "pow2";
    case Op::kPow3: return "pow3";
    case Op::kSqrt: return "sqrt";
    case Op::kRsqrt: return "rsqrt";
    case Op::kReciprocal: return "reciprocal";
    case Op::kTanh: return "tanh";
    case Op::kExp: return "exp";
    case Op::kNeg: return "neg";
    case Op::kAbs: return "abs";
    case Op::kSigmoid: return "sigmoid";
    case Op::kCast: return "cast";
  }
  return "?";
}

std::optional<double> NumberOf(const Arg& a) {
  if (const auto* d = std::get_if<double>(&a)) return *d;
  if (const auto* i = std::get_if<int64_t>(&a)) return static_cast<double>(*i);
  return std::nullopt;
}

std::string FloatLiteral(float f) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "__int_as_float(0x%08x)", std::bit_cast<uint32_t>(f));
  return buf;
}

Status ResolveOperand(const Arg& a, size_t call, bool scalar_allowed, Node& node,
                      const std::function<Status(const TensorDesc&, Node&)>& tensor) {
  if (const auto* t = std::get_if<TensorDesc>(&a)) return tensor(*t, node);
  if (const auto* r = std::get_if<ValueRef>(&a)) {
    if (r->call >= call || r->output != 0) return InvalidArgument("a reference to no earlier call's output");
    node.in.push_back(Operand{Operand::kValue, static_cast<int64_t>(r->call), 0});
    return Status::Ok();
  }
  if (auto v = NumberOf(a); v && scalar_allowed) {
    node.in.push_back(Operand{Operand::kScalar, 0, *v});
    return Status::Ok();
  }
  return InvalidArgument("an operand that is no tensor, earlier output or number");
}

std::optional<DType> DTypeOfOperand(const Operand& o, const std::vector<DType>& inputs, const std::vector<Node>& nodes) {
  if (o.kind == Operand::kInput) return inputs[static_cast<size_t>(o.index)];
  if (o.kind == Operand::kValue) return nodes[static_cast<size_t>(o.index)].out;
  return std::nullopt;
}

Result<Node> ParseElementwise(const OpCall& c, const std::string& name, const OperandOf& operand,
                              const DTypeOf& dtype_of) {
  Node node;
  static const std::map<std::string, Op> kUnary = {
      {"aten::tanh", Op::kTanh},   {"aten::exp", Op::kExp},         {"aten::neg", Op::kNeg},
      {"aten::abs", Op::kAbs},     {"aten::sqrt", Op::kSqrt},       {"aten::rsqrt", Op::kRsqrt},
      {"aten::sigmoid", Op::kSigmoid}, {"aten::reciprocal", Op::kReciprocal}};
  if (c.op == kChainInputOp) {
    // One tensor several calls use: one parameter, read once (its rules checked by ChainLiveOf).
    node.op = Op::kInput;
    KJIT_RETURN_IF_ERROR(operand(c.args[0], false, node));
    node.out = *dtype_of(node.in[0]);
  } else if (name == "aten::mul.Tensor" || name == "aten::div.Tensor" || name == "aten::add.Tensor" ||
             name == "aten::sub.Tensor") {
    const bool with_alpha = c.op == "aten::add" || c.op == "aten::sub";
    if (c.args.size() != (with_alpha ? 3u : 2u)) return InvalidArgument(name + ": unexpected arguments");
    node.op = c.op == "aten::mul" ? Op::kMul : c.op == "aten::div" ? Op::kDiv : c.op == "aten::add" ? Op::kAdd : Op::kSub;
    KJIT_RETURN_IF_ERROR(operand(c.args[0], node.op != Op::kDiv, node));
    KJIT_RETURN_IF_ERROR(operand(c.args[1], true, node));
    if (with_alpha) {
      auto alpha = NumberOf(c.args[2]);
      if (!alpha) return InvalidArgument(name + ": alpha is not a number");
      node.alpha = *alpha;
    }
    auto a = dtype_of(node.in[0]), b = dtype_of(node.in[1]);
    if (!a && !b) return InvalidArgument(name + " of two numbers");
    node.out = a && b ? Promote(*a, *b) : a ? *a : *b;
  } else if (name == "aten::pow.Tensor_Scalar") {
    if (c.args.size() != 2) return InvalidArgument(name + ": unexpected arguments");
    KJIT_RETURN_IF_ERROR(operand(c.args[0], false, node));
    auto e = NumberOf(c.args[1]);
    if (!e) return InvalidArgument("pow's exponent is not a number");
    if (*e == 2) node.op = Op::kPow2;
    else if (*e == 3) node.op = Op::kPow3;
    else if (*e == 0.5) node.op = Op::kSqrt;
    else if (*e == -0.5) node.op = Op::kRsqrt;
    else if (*e == -1) node.op = Op::kReciprocal;
    else return InvalidArgument("pow's exponent is not 2, 3, 0.5, -0.5 or -1");
    node.out = *dtype_of(node.in[0]);
  } else if (auto u = kUnary.find(name); u != kUnary.end()) {
    if (c.args.size() != 1) return InvalidArgument(name + ": unexpected arguments");
    node.op = u->second;
    KJIT_RETURN_IF_ERROR(operand(c.args[0], false, node));
    node.out = *dtype_of(node.in[0]);
  } else if (name == "aten::_to_copy") {
    if (c.args.size() != 7) return InvalidArgument("_to_copy: unexpected arguments");
    const auto* to = std::get_if<DType>(&c.args[1]);
    const bool plain = std::holds_alternative<NoneArg>(c.args[2]) && std::holds_alternative<NoneArg>(c.args[3]) &&
                       std::holds_alternative<NoneArg>(c.args[4]) && std::holds_alternative<bool>(c.args[5]) &&
                       !std::get<bool>(c.args[5]) && std::holds_alternative<NoneArg>(c.args[6]);
    if (to == nullptr || !plain) return InvalidArgument("_to_copy other than a dtype cast");
    if (!IsServedFloat(*to)) return InvalidArgument("a cast to " + std::string(DTypeName(*to)) + " is not served");
    node.op = Op::kCast;
    KJIT_RETURN_IF_ERROR(operand(c.args[0], false, node));
    node.out = *to;
  } else {
    return NotFound(name + " is not an elementwise op this family fuses");
  }
  return node;
}

std::string Expression(const Node& node, const std::function<std::string(const Operand&)>& text) {
  auto in = [&](size_t k) { return text(node.in[k]); };
  const std::string a = in(0);
  const std::string as = std::string("as_dtype<") + codegen::CudaType(node.out) + ">";
  std::string value;
  switch (node.op) {
    case Op::kMul: value = "op_mul(" + a + ", " + in(1) + ")"; break;
    case Op::kAdd:
    case Op::kSub: {
      const double alpha = node.op == Op::kSub ? -node.alpha : node.alpha;
      if (node.alpha == 1) {
        value = std::string(node.op == Op::kAdd ? "op_add(" : "op_sub(") + a + ", " + in(1) + ")";
      } else {
        value = "op_axpy(" + a + ", " + FloatLiteral(static_cast<float>(alpha)) + ", " + in(1) + ")";
      }
      break;
    }
    case Op::kDiv:
      if (node.in[1].kind == Operand::kScalar) {
        // PyTorch's div_true kernel multiplies by the divisor's reciprocal, computed in float on the host.
        value = "op_mul(" + a + ", " + FloatLiteral(1.0f / static_cast<float>(node.in[1].scalar)) + ")";
      } else {
        value = "op_div(" + a + ", " + in(1) + ")";
      }
      break;
    case Op::kPow2: value = "op_mul(" + a + ", " + a + ")"; break;
    case Op::kPow3: value = "op_mul(" + as + "(op_mul(" + a + ", " + a + ")), " + a + ")"; break;
    case Op::kSqrt: value = "__fsqrt_rn(" + a + ")"; break;
    case Op::kRsqrt: value = "rsqrtf(" + a + ")"; break;
    case Op::kReciprocal: value = "op_div(1.0f, " + a + ")"; break;
    case Op::kTanh: value = "tanhf(" + a + ")"; break;
    case Op::kExp: value = "expf(" + a + ")"; break;
    case Op::kNeg: value = "-(" + a + ")"; break;
    case Op::kAbs: value = "fabsf(" + a + ")"; break;
    case Op::kSigmoid: value = "op_sigmoid(" + a + ")"; break;
    case Op::kCast:
    case Op::kInput: value = a; break;
  }
  return as + "(" + value + ")";
}

}  // namespace kjit::policy::chain
