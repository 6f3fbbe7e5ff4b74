// The shim's keys of the pre-filtered ops (scan, pool, reduce, depthwise_conv, matmul) are the keys
// their families match, on CPU: for every sample key of those families, a call with tensors of exactly
// its layouts (CPU tensors over a small buffer: the key reads metadata and the data address only)
// is keyed through the schema the adapter overrides (kInterceptedOps, split into name and
// overload) by the key writer the adapter uses (kjit_torch::WriteCallKey), and must give the
// sample key byte for byte; the family must match it; and the op's pre-filter must let it through.
#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "kjit/policy/design_space.h"
#include "kjit/op_limits.h"
#include "chain_recorder.h"
#include "kjit/torch/call_key.h"
#include "shim_core.h"

namespace kjit::shim {
namespace {

// The families whose ops have a pre-filter (PreFilterFor is not kNone).
constexpr std::string_view kPreFilteredFamilies[] = {"scan", "pool", "reduce", "depthwise_conv", "matmul", "pool_backward",
                                                      "depthwise_conv_backward"};

// What the adapter's pre-filter of mm/bmm (PassesPreFilter, SmallMatmulArgsPass) computes from
// the call's tensors.
bool MatmulPreFilterPasses(bool batched, const at::Tensor& a, const at::Tensor& b) {
  if (a.layout() != c10::kStrided || b.layout() != c10::kStrided || a.scalar_type() != b.scalar_type()) return false;
  const c10::ScalarType type = a.scalar_type();
  if (type != at::kFloat && type != at::kHalf && type != at::kBFloat16) return false;
  const auto dtype = kjit::torch::DTypeOf(type);
  if (!dtype.ok()) return false;
  const auto as = a.sizes(), ast = a.strides(), bs = b.sizes(), bst = b.strides();
  return SmallMatmulMayBeServed(batched, *dtype, {{as.data(), as.size()}, {ast.data(), ast.size()}},
                                {{bs.data(), bs.size()}, {bst.data(), bst.size()}});
}

// The kInterceptedOps entry for an OpCall's (op, overload), or "" if the shim does not intercept it.
std::string InterceptedEntry(const OpCall& call) {
  if (!call.op.starts_with("aten::")) return "";
  const std::string_view name = std::string_view(call.op).substr(6);
  for (std::string_view entry : kInterceptedOps) {
    const OpName op = SplitOpName(entry);
    if (op.name == name && op.overload == call.overload) return std::string(entry);
  }
  return "";
}

c10::ScalarType ScalarTypeOf(DType dtype) {
  for (int i = 0; i < static_cast<int>(c10::ScalarType::NumOptions); ++i) {
    const auto type = static_cast<c10::ScalarType>(i);
    auto d = kjit::torch::DTypeOf(type);
    if (d.ok() && *d == dtype) return type;
  }
  ADD_FAILURE() << "no scalar type for " << DTypeName(dtype);
  return c10::ScalarType::Undefined;
}

// Tensors over this buffer: 256-byte aligned, never read (keys need metadata and the address).
alignas(256) unsigned char g_buffer[512];

at::Tensor TensorOf(const TensorDesc& d) {
  // The address gives the key's alignment (16 means 16 or more; the buffer is 256-aligned).
  void* data = g_buffer + (d.alignment < 16 ? d.alignment : 0);
  at::Tensor t = at::from_blob(data, d.sizes, d.strides, at::TensorOptions().dtype(ScalarTypeOf(d.dtype)));
  if (d.storage_offset != 0) t = t.as_strided(d.sizes, d.strides, d.storage_offset);
  return t;
}

c10::IValue IValueOf(const Arg& arg) {
  struct Visitor {
    c10::IValue operator()(NoneArg) const { return c10::IValue(); }
    c10::IValue operator()(bool v) const { return c10::IValue(v); }
    c10::IValue operator()(int64_t v) const { return c10::IValue(v); }
    c10::IValue operator()(double v) const { return c10::IValue(v); }
    c10::IValue operator()(const std::string& v) const { return c10::IValue(v); }
    c10::IValue operator()(DType v) const { return c10::IValue(static_cast<int64_t>(ScalarTypeOf(v))); }
    c10::IValue operator()(const IntList& v) const { return c10::IValue(v); }
    c10::IValue operator()(const DoubleList& v) const { return c10::IValue(v); }
    c10::IValue operator()(const TensorDesc& v) const { return c10::IValue(TensorOf(v)); }
    c10::IValue operator()(const TensorList& v) const {
      std::vector<at::Tensor> list;
      for (const TensorDesc& t : v) list.push_back(TensorOf(t));
      return c10::IValue(list);
    }
    c10::IValue operator()(const ValueRef&) const {
      ADD_FAILURE() << "a value reference in a single-call key";
      return c10::IValue();
    }
  };
  return std::visit(Visitor{}, arg);
}

TEST(ShimKeys, EveryInterceptedOpHasASchemaInThisPyTorch) {
  for (std::string_view entry : kInterceptedOps) {
    const OpName op = SplitOpName(entry);
    auto handle = c10::Dispatcher::singleton().findSchema(
        c10::OperatorName("aten::" + std::string(op.name), std::string(op.overload)));
    ASSERT_TRUE(handle.has_value()) << entry;
    EXPECT_EQ(handle->schema().name(), "aten::" + std::string(op.name));
    EXPECT_EQ(handle->schema().overload_name(), op.overload);
  }
}

TEST(ShimKeys, SampleKeysOfThePreFilteredFamiliesAreTheShimsKeys) {
  std::set<std::string> covered;
  size_t keys = 0;
  for (const policy::Family* family : policy::Families()) {
    if (std::find(std::begin(kPreFilteredFamilies), std::end(kPreFilteredFamilies), family->name()) ==
        std::end(kPreFilteredFamilies)) {
      continue;
    }
    for (const OpKey& sample : family->SampleKeys()) {
      ASSERT_EQ(sample.calls.size(), 1u);
      const OpCall& call = sample.calls[0];
      const std::string text = sample.ToString();
      const std::string entry = InterceptedEntry(call);
      ASSERT_FALSE(entry.empty()) << "the shim does not intercept " << call.op << "." << call.overload << ": " << text;
      covered.insert(entry);
      const c10::OperatorHandle handle = c10::Dispatcher::singleton().findSchemaOrThrow(call.op.c_str(), call.overload.c_str());
      const auto& schema = handle.schema();
      std::vector<c10::IValue> args;
      for (const Arg& a : call.args) args.push_back(IValueOf(a));
      // What TryServe computes for the call (its arch and numerics taken from the sample).
      std::string bytes;
      ASSERT_TRUE(kjit::torch::WriteCallKey(schema, std::span<const c10::IValue>(args.data(), args.size()), sample.arch,
                                            sample.numerics, &bytes)
                      .ok())
          << text;
      auto key = OpKey::Decode(bytes);
      ASSERT_TRUE(key.ok()) << key.status().ToString();
      EXPECT_EQ(key->ToString(), text);
      EXPECT_EQ(bytes, sample.Encode()) << text;
      EXPECT_EQ(HashBytes(bytes), sample.Hash()) << text;
      auto match = policy::FindFamily(*key);
      ASSERT_TRUE(match.ok()) << text << ": " << match.status().ToString();
      EXPECT_EQ(match->family->name(), family->name()) << text;
      // The pre-filter's view of the call lets it through.
      const PreFilter filter = PreFilterFor(entry);
      EXPECT_NE(filter, PreFilter::kNone) << entry;
      const at::Tensor& x = args[0].toTensor();
      EXPECT_TRUE(x.scalar_type() == at::kFloat || x.scalar_type() == at::kHalf || x.scalar_type() == at::kBFloat16);
      EXPECT_GT(x.numel(), 0);
      if (filter == PreFilter::kDepthwiseConv) {
        const auto xs = x.sizes();
        const auto ws = args[1].toTensor().sizes();
        EXPECT_TRUE(CudnnConvMayBeDepthwise(std::span<const int64_t>(xs.data(), xs.size()),
                                            std::span<const int64_t>(ws.data(), ws.size()), args[5].toInt()))
            << text;
      }
      if (filter == PreFilter::kDepthwiseConvBackward) {
        const auto xs = args[1].toTensor().sizes();
        const auto ws = args[2].toTensor().sizes();
        EXPECT_TRUE(ConvBackwardMayBeDepthwise(std::span<const int64_t>(xs.data(), xs.size()),
                                               std::span<const int64_t>(ws.data(), ws.size()), args[9].toInt(),
                                               args[7].toBool()))
            << text;
      }
      if (filter == PreFilter::kSmallMatmul || filter == PreFilter::kSmallBatchedMatmul) {
        EXPECT_TRUE(MatmulPreFilterPasses(filter == PreFilter::kSmallBatchedMatmul, x, args[1].toTensor())) << text;
      }
      ++keys;
    }
  }
  EXPECT_GE(keys, 50u);
  // Every pre-filtered op the shim intercepts has a sample key: each is checked above.
  for (std::string_view entry : kInterceptedOps) {
    // (kChainMember ops are never keyed alone: ChainMembersRecordedFromEagerCallsAreChainKeys has them.)
    if (PreFilterFor(entry) == PreFilter::kNone || PreFilterFor(entry) == PreFilter::kChainMember) continue;
    EXPECT_TRUE(covered.contains(std::string(entry))) << entry << " has no sample key in its family";
  }
}

// The fusible ops' calls as the adapter records them under KJIT_FUSION=record (kjit::torch::ChainMemberCall,
// TensorId and PinTensorIds on the call's arguments and output, ThreadChains grouping and reporting them):
// minGPT's tanh-GELU run eagerly on CPU tensors twenty times, each temporary dropped when Python drops it (so the
// allocator hands its memory to the next one), is one chain, reported once, whose key reads x once
// (kjit::input), holds the Python floats as values, and is the elementwise_chain family's; its ops are exactly
// what the shim intercepts for the family.
// A thread's calls recorded as the adapter records them (ChainMemberCall, TensorId, PinTensorIds, ThreadChains).
struct EagerRecorder {
  ThreadChains chains;
  std::vector<RecordedChain> reported;

  at::Tensor Record(const char* op, const char* overload, std::vector<c10::IValue> args) {
    const c10::OperatorHandle handle = c10::Dispatcher::singleton().findSchemaOrThrow(op, overload);
    const std::string entry = std::string(op).substr(6) + (*overload != '\0' ? "." + std::string(overload) : "");
    EXPECT_TRUE(PreFilterFor(entry) == PreFilter::kChainMember || JoinsChains(entry)) << entry;
    EXPECT_TRUE(chains.ShouldRecord());
    std::vector<c10::IValue> stack = args;
    handle.callBoxed(stack);
    at::Tensor out = stack.back().toTensor();
    const std::span<const c10::IValue> view(args.data(), args.size());
    auto call = kjit::torch::ChainMemberCall(handle.schema(), view);
    EXPECT_TRUE(call.ok()) << call.status().ToString();
    CallRecord r;
    r.call = *call;
    for (const c10::IValue& v : args) r.input_ids.push_back(v.isTensor() ? kjit::torch::TensorId(v.toTensor()) : 0);
    r.output_id = kjit::torch::TensorId(out);
    r.pins = kjit::torch::PinTensorIds(view, out);
    r.arch = 90;
    for (RecordedChain& c : chains.Add(std::move(r))) reported.push_back(std::move(c));
    return out;
  }
};

TEST(ShimKeys, ChainMembersRecordedFromEagerCallsAreChainKeys) {
  EagerRecorder recorder;
  auto record = [&](const char* op, const char* overload, std::vector<c10::IValue> args) {
    return recorder.Record(op, overload, std::move(args));
  };
  ThreadChains& chains = recorder.chains;
  std::vector<RecordedChain>& reported = recorder.reported;
  // What Python makes of `0.5 * x`: a wrapped-number tensor for the float.
  auto number = [](double v) {
    at::Tensor t = at::scalar_tensor(v, at::kDouble);
    t.unsafeGetTensorImpl()->set_wrapped_number(true);
    return t;
  };
  const at::Tensor x = at::randn({4, 64});
  at::Tensor y;
  for (int round = 0; round < 20; ++round) {
    // out = 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0)))),
    // with Python's lifetimes: each temporary dies once its reader ran, the last round's output at the assignment.
    at::Tensor half = record("aten::mul", "Tensor", {x, number(0.5)});
    at::Tensor t = record("aten::pow", "Tensor_Scalar", {x, 3.0});
    t = record("aten::mul", "Tensor", {t, number(0.044715)});
    t = record("aten::add", "Tensor", {x, t, 1});
    t = record("aten::mul", "Tensor", {t, number(0.7978845608028654)});
    t = record("aten::tanh", "", {t});
    t = record("aten::add", "Tensor", {t, number(1.0), 1});
    at::Tensor out = record("aten::mul", "Tensor", {half, t});
    half.reset();
    t.reset();
    y = std::move(out);
  }
  // Every closed GELU is that one chain (ids reused across rounds used to join two rounds into one longer chain).
  const std::vector<RecordedChain> seen = chains.recorder().Chains();
  ASSERT_EQ(seen.size(), 1u) << seen.back().key.ToString();
  EXPECT_GE(seen[0].count, 17u);  // the last rounds' chains may still be open
  ASSERT_EQ(reported.size(), 1u) << "the twenty GELUs are not one repeated chain";
  const OpKey& key = reported[0].key;
  EXPECT_GE(reported[0].count, 3u);
  EXPECT_EQ(key.OpName(), "chain(mul,pow,mul,add,mul,tanh,add,mul)");
  ASSERT_EQ(key.calls.front().op, kChainInputOp) << key.ToString();  // x, which four arguments read
  // The Python floats are the key's values, not 0-d tensors.
  EXPECT_EQ(std::get<double>(key.calls[1].args[1]), 0.5) << key.ToString();
  auto match = policy::FindFamily(key);
  ASSERT_TRUE(match.ok()) << key.ToString() << ": " << match.status().ToString();
  EXPECT_EQ(match->family->name(), "elementwise_chain");
  const std::vector<std::string> ops = match->family->chain_ops();
  for (const OpCall& c : key.calls) {
    if (c.op == kChainInputOp || c.op == kChainLiveOp) continue;
    EXPECT_NE(std::find(ops.begin(), ops.end(), c.op), ops.end()) << c.op;
  }
}

// A chain with a reduction: Hugging Face's LlamaRMSNorm on a float32 tensor (`x.pow(2).mean(-1, keepdim=True)`,
// `x * torch.rsqrt(variance + eps)`, `weight * h`) run eagerly on CPU tensors with Python's lifetimes. The mean
// (served alone by the reduce family, KJIT_JOINS_CHAINS) joins the chain with its dims as an int list; the key is
// the row_chain family's and reads x once. A masked cumsum likewise (the scan family's cumsum joins).
TEST(ShimKeys, AReductionJoinsItsChainAsTheRowChainFamilysKey) {
  EagerRecorder recorder;
  auto number = [](double v) {
    at::Tensor t = at::scalar_tensor(v, at::kDouble);
    t.unsafeGetTensorImpl()->set_wrapped_number(true);
    return t;
  };
  const at::Tensor x = at::randn({8, 256});
  const at::Tensor weight = at::rand({256});
  at::Tensor y;
  for (int round = 0; round < 20; ++round) {
    at::Tensor variance = recorder.Record("aten::pow", "Tensor_Scalar", {x, int64_t{2}});
    variance = recorder.Record("aten::mean", "dim", {variance, c10::IValue(std::vector<int64_t>{-1}), true, c10::IValue()});
    at::Tensor h = recorder.Record("aten::add", "Tensor", {variance, number(1e-6), 1});
    h = recorder.Record("aten::rsqrt", "", {h});
    h = recorder.Record("aten::mul", "Tensor", {x, h});
    at::Tensor out = recorder.Record("aten::mul", "Tensor", {weight, h});
    variance.reset();
    h.reset();
    y = std::move(out);
  }
  ASSERT_EQ(recorder.reported.size(), 1u) << "the twenty RMS norms are not one repeated chain";
  const OpKey& key = recorder.reported[0].key;
  EXPECT_EQ(key.OpName(), "chain(pow,mean,add,rsqrt,mul,mul)");
  ASSERT_EQ(key.calls.front().op, kChainInputOp) << key.ToString();  // x, read by pow and the first mul
  EXPECT_EQ(std::get<IntList>(key.calls[2].args[1]), IntList{-1}) << key.ToString();
  auto match = policy::FindFamily(key);
  ASSERT_TRUE(match.ok()) << key.ToString() << ": " << match.status().ToString();
  EXPECT_EQ(match->family->name(), "row_chain");

  // A masked cumsum, torch.cumsum(x * mask, -1): the scan joins its chain with its dim as an int.
  EagerRecorder scans;
  const at::Tensor mask = at::rand({8, 256}).round();
  for (int round = 0; round < 40; ++round) {  // two records a round: past ThreadChains' first check, at 64
    at::Tensor masked = scans.Record("aten::mul", "Tensor", {x, mask});
    at::Tensor out = scans.Record("aten::cumsum", "", {masked, int64_t{-1}, c10::IValue()});
    masked.reset();
    y = std::move(out);
  }
  ASSERT_EQ(scans.reported.size(), 1u) << "the forty masked cumsums are not one repeated chain";
  EXPECT_EQ(scans.reported[0].key.OpName(), "chain(mul,cumsum)");
  auto scan_match = policy::FindFamily(scans.reported[0].key);
  ASSERT_TRUE(scan_match.ok()) << scans.reported[0].key.ToString() << ": " << scan_match.status().ToString();
  EXPECT_EQ(scan_match->family->name(), "row_chain");
}

// Calls as PyTorch makes them, keyed from real CPU tensors (not from sample keys): the families
// match the functional overloads the shim overrides.
TEST(ShimKeys, EagerStyleCallsMatchTheirFamilies) {
  auto key = [](const char* op, const char* overload, std::vector<c10::IValue> args) {
    const c10::OperatorHandle handle = c10::Dispatcher::singleton().findSchemaOrThrow(op, overload);
    const auto& schema = handle.schema();
    return kjit::torch::CallKey(schema, args, 90, kNumericsDefault);
  };
  auto family_of = [](const Result<OpKey>& k) -> std::string {
    if (!k.ok()) return "unkeyed: " + k.status().ToString();
    auto m = policy::FindFamily(*k);
    return m.ok() ? std::string(m->family->name()) : "declined: " + m.status().ToString();
  };
  const at::Tensor x = at::randn({8, 64, 14, 14});
  const c10::IValue none;
  EXPECT_EQ(family_of(key("aten::cumsum", "", {x, int64_t{1}, none})), "scan");
  EXPECT_EQ(family_of(key("aten::cumprod", "", {x.to(at::kHalf), int64_t{-1}, none})), "scan");
  // x.sum((2, 3)), x.mean(-1, keepdim=True), x.sum() (which PyTorch runs as sum.dim_IntList over []).
  EXPECT_EQ(family_of(key("aten::sum", "dim_IntList", {x, std::vector<int64_t>{2, 3}, false, none})), "reduce");
  EXPECT_EQ(family_of(key("aten::mean", "dim", {x, std::vector<int64_t>{-1}, true, none})), "reduce");
  EXPECT_EQ(family_of(key("aten::sum", "dim_IntList", {x, std::vector<int64_t>{}, false, none})), "reduce");
  EXPECT_EQ(family_of(key("aten::amax", "", {x, std::vector<int64_t>{1}, false})), "reduce");
  EXPECT_EQ(family_of(key("aten::argmax", "", {x, int64_t{1}, false})), "reduce");
  EXPECT_EQ(family_of(key("aten::argmin", "", {x, none, false})), "reduce");
  EXPECT_EQ(family_of(key("aten::prod", "dim_int", {x, int64_t{0}, false, none})), "reduce");
  EXPECT_EQ(family_of(key("aten::prod", "", {x, none})), "reduce");
  // F.max_pool2d(x, 3, 2, 1) and F.avg_pool2d(x, 2), channels_last too.
  const std::vector<int64_t> k3{3, 3}, s2{2, 2}, p1{1, 1}, d1{1, 1}, k2{2, 2}, p0{0, 0};
  EXPECT_EQ(family_of(key("aten::max_pool2d_with_indices", "", {x, k3, s2, p1, d1, false})), "pool");
  EXPECT_EQ(family_of(key("aten::max_pool2d_with_indices", "",
                          {x.contiguous(at::MemoryFormat::ChannelsLast), k3, s2, p1, d1, false})),
            "pool");
  EXPECT_EQ(family_of(key("aten::avg_pool2d", "", {x, k2, k2, p0, false, true, none})), "pool");
  // F.conv2d(x, w, b, groups=64) through each backend op.
  const at::Tensor w = at::randn({64, 1, 3, 3}), b = at::randn({64});
  EXPECT_EQ(family_of(key("aten::_conv_depthwise2d", "", {x, w, k3, b, d1, p1, d1})), "depthwise_conv");
  EXPECT_EQ(family_of(key("aten::cudnn_convolution", "",
                          {x.contiguous(at::MemoryFormat::ChannelsLast), w, p1, d1, d1, int64_t{64}, false, false,
                           true})),
            "depthwise_conv");
  // A training-mode batch norm's gradients as autograd calls them (running statistics passed, float32 saved mean
  // and inverse std; output_mask a bool[3]), and cuDNN's with its zero-byte reserve; eval mode stays PyTorch's.
  const at::Tensor c = at::randn({64}), stats = at::rand({64}) + 0.5;
  const at::Tensor reserve = at::empty({0}, at::TensorOptions().dtype(at::kByte));
  const c10::List<bool> all({true, true, true});
  EXPECT_EQ(family_of(key("aten::native_batch_norm_backward", "", {x, x, c, c, stats, c, stats, true, 1e-5, all})),
            "batch_norm_backward");
  EXPECT_EQ(family_of(key("aten::native_batch_norm_backward", "",
                          {x, x, none, none, none, c, stats, true, 1e-5, c10::List<bool>({true, false, false})})),
            "batch_norm_backward");
  EXPECT_EQ(family_of(key("aten::cudnn_batch_norm_backward", "", {x, x, c, c, stats, c, stats, 1e-5, reserve})),
            "batch_norm_backward");
  EXPECT_NE(family_of(key("aten::native_batch_norm_backward", "", {x, x, c, c, stats, c, stats, false, 1e-5, all}))
                .find("eval-mode"),
            std::string::npos);
  // F.conv2d(x, w, b, padding=1, groups=64)'s and F.conv1d(..., padding=3, groups=64)'s backward as autograd calls
  // it (bias_sizes [C] or None, output_padding 0, output_mask a bool[3]); an ordinary convolution's stays PyTorch's.
  const std::vector<int64_t> one_d{1}, p3{3}, p0_1d{0};
  EXPECT_EQ(family_of(key("aten::convolution_backward", "",
                          {x, x, w, std::vector<int64_t>{64}, d1, p1, d1, false, p0, int64_t{64}, all})),
            "depthwise_conv_backward");
  EXPECT_EQ(family_of(key("aten::convolution_backward", "",
                          {at::randn({4, 64, 103}), at::randn({4, 64, 100}), at::randn({64, 1, 4}), none, one_d, p3,
                           one_d, false, p0_1d, int64_t{64}, c10::List<bool>({true, true, false})})),
            "depthwise_conv_backward");
  EXPECT_NE(family_of(key("aten::convolution_backward", "",
                          {at::randn({8, 32, 14, 14}), x, at::randn({32, 64, 3, 3}), none, d1, p1, d1, false, p0,
                           int64_t{1}, all}))
                .find("not depthwise"),
            std::string::npos);
}

// mm and bmm as PyTorch calls them (x @ w, torch.matmul folding a 3-D input, attention's scores),
// keyed from real CPU tensors: the matmul family matches them, transposed and expanded operands too.
TEST(ShimKeys, EagerStyleMatmulCallsMatchTheMatmulFamily) {
  auto family_of = [](const char* op, const at::Tensor& a, const at::Tensor& b) -> std::string {
    const c10::OperatorHandle handle = c10::Dispatcher::singleton().findSchemaOrThrow(op, "");
    const auto& schema = handle.schema();
    const std::vector<c10::IValue> args{a, b};
    auto k = kjit::torch::CallKey(schema, args, 90, kNumericsDefault);
    if (!k.ok()) return "unkeyed: " + k.status().ToString();
    auto m = policy::FindFamily(*k);
    return m.ok() ? std::string(m->family->name()) : "declined: " + m.status().ToString();
  };
  const at::Tensor a = at::randn({512, 64}), w = at::randn({64, 256});
  EXPECT_EQ(family_of("aten::mm", a, w), "matmul");
  EXPECT_EQ(family_of("aten::mm", a, at::randn({256, 64}).t()), "matmul");  // x @ weight.t()
  EXPECT_EQ(family_of("aten::mm", at::randn({64, 512}).t(), w), "matmul");
  EXPECT_EQ(family_of("aten::mm", a.to(at::kHalf), w.to(at::kHalf)), "matmul");
  // [B*H, L, 64] @ [B*H, 64, L] (k transposed), and a batch of one matrix expanded (stride 0).
  const at::Tensor q = at::randn({16, 128, 64}), k = at::randn({16, 128, 64});
  EXPECT_EQ(family_of("aten::bmm", q, k.transpose(1, 2)), "matmul");
  EXPECT_EQ(family_of("aten::bmm", q.to(at::kBFloat16), k.to(at::kBFloat16).transpose(1, 2)), "matmul");
  EXPECT_EQ(family_of("aten::bmm", q, at::randn({64, 32}).expand({16, 64, 32})), "matmul");
}

// The pre-filter of mm/bmm and the family's Match agree on every call, whatever the rest of the
// key: passed by one exactly when matched by the other (the tensors here are 16-byte aligned, the
// one thing only the family checks). Around K's limits, and on what each declines.
TEST(ShimKeys, MatmulPreFilterAgreesWithTheFamily) {
  struct Call {
    bool batched;
    at::Tensor a, b;
    std::string what;
  };
  std::vector<Call> calls;
  for (at::ScalarType type : {at::kFloat, at::kHalf, at::kBFloat16, at::kDouble, at::kLong, at::kInt}) {
    const auto o = at::TensorOptions().dtype(type);
    const std::string t(c10::toString(type));
    for (int64_t k : {int64_t{1}, kMatmulMaxKHalf - 1, kMatmulMaxKHalf, kMatmulMaxKHalf + 1, kMatmulMaxKFloat32,
                      kMatmulMaxKFloat32 + 1, int64_t{1024}}) {
      const std::string ks = " K=" + std::to_string(k);
      calls.push_back({false, at::zeros({8, k}, o), at::zeros({k, 24}, o), "mm " + t + ks});
      calls.push_back({false, at::zeros({k, 8}, o).t(), at::zeros({24, k}, o).t(), "mm transposed " + t + ks});
      calls.push_back({true, at::zeros({3, 8, k}, o), at::zeros({3, k, 24}, o), "bmm " + t + ks});
      calls.push_back({true, at::zeros({8, k}, o).expand({3, 8, k}), at::zeros({3, 24, k}, o).transpose(1, 2),
                       "bmm expanded " + t + ks});
    }
    // Empty products.
    calls.push_back({false, at::zeros({0, 16}, o), at::zeros({16, 8}, o), "mm M=0 " + t});
    calls.push_back({false, at::zeros({8, 0}, o), at::zeros({0, 8}, o), "mm K=0 " + t});
    calls.push_back({false, at::zeros({8, 16}, o), at::zeros({16, 0}, o), "mm N=0 " + t});
    calls.push_back({true, at::zeros({0, 8, 16}, o), at::zeros({0, 16, 8}, o), "bmm B=0 " + t});
    // Ranks the op does not take (PyTorch rejects them; the family declines them).
    calls.push_back({false, at::zeros({16}, o), at::zeros({16, 8}, o), "mm 1-D " + t});
    calls.push_back({false, at::zeros({2, 8, 16}, o), at::zeros({2, 16, 8}, o), "mm 3-D " + t});
    calls.push_back({true, at::zeros({8, 16}, o), at::zeros({16, 8}, o), "bmm 2-D " + t});
    // Dimensions that disagree (PyTorch rejects them).
    calls.push_back({false, at::zeros({8, 16}, o), at::zeros({32, 8}, o), "mm inner " + t});
    calls.push_back({true, at::zeros({2, 8, 16}, o), at::zeros({3, 16, 8}, o), "bmm batch " + t});
  }
  // Mixed dtypes (PyTorch rejects them).
  calls.push_back({false, at::zeros({8, 16}), at::zeros({16, 8}, at::kHalf), "mm f32 @ f16"});
  calls.push_back({true, at::zeros({2, 8, 16}, at::kBFloat16), at::zeros({2, 16, 8}, at::kHalf), "bmm bf16 @ f16"});
  size_t served = 0;
  for (const Call& c : calls) {
    const char* op = c.batched ? "aten::bmm" : "aten::mm";
    const c10::OperatorHandle handle = c10::Dispatcher::singleton().findSchemaOrThrow(op, "");
    const auto& schema = handle.schema();
    ASSERT_EQ(reinterpret_cast<uintptr_t>(c.a.data_ptr()) % 16, 0u) << c.what;
    const std::vector<c10::IValue> args{c.a, c.b};
    auto key = kjit::torch::CallKey(schema, args, 90, kNumericsDefault);
    ASSERT_TRUE(key.ok()) << c.what << ": " << key.status().ToString();
    auto match = policy::FindFamily(*key);
    const bool matched = match.ok() && match->family->name() == "matmul";
    EXPECT_EQ(PreFilterFor(c.batched ? "bmm" : "mm"),
              c.batched ? PreFilter::kSmallBatchedMatmul : PreFilter::kSmallMatmul);
    EXPECT_EQ(MatmulPreFilterPasses(c.batched, c.a, c.b), matched)
        << c.what << ": the family says " << (match.ok() ? "matched" : match.status().ToString());
    served += matched ? 1 : 0;
  }
  // Both sides of every limit were met: f32 at K = 1, 63, 64, 65, 256; f16/bf16 at K = 1, 63, 64;
  // four layouts each.
  EXPECT_EQ(served, 4u * (5 + 3 + 3));
}

// The key carries torch.backends.cuda.matmul.allow_tf32 (OpKey::numerics through CurrentNumerics,
// as the adapter keys every call): a kernel stored for a TF32-off call is never served to a
// TF32-on one, or the other way round.
TEST(ShimKeys, Tf32OnAndOffMatmulCallsHaveDifferentKeys) {
  auto& ctx = at::globalContext();
  const bool was = ctx.allowTF32CuBLAS();
  const c10::OperatorHandle handle = c10::Dispatcher::singleton().findSchemaOrThrow("aten::mm", "");
  const auto& schema = handle.schema();
  const std::vector<c10::IValue> args{at::zeros({256, 64}), at::zeros({64, 256})};
  auto key_now = [&] {
    std::string bytes;
    EXPECT_TRUE(kjit::torch::WriteCallKey(schema, std::span<const c10::IValue>(args.data(), args.size()), 90,
                                          kjit::torch::CurrentNumerics(), &bytes)
                    .ok());
    return bytes;
  };
  ctx.setAllowTF32CuBLAS(false);
  const uint32_t off_numerics = kjit::torch::CurrentNumerics();
  const std::string off = key_now();
  ctx.setAllowTF32CuBLAS(true);
  const uint32_t on_numerics = kjit::torch::CurrentNumerics();
  const std::string on = key_now();
  ctx.setAllowTF32CuBLAS(was);
  EXPECT_EQ(off_numerics & kAllowTF32Matmul, 0u);
  EXPECT_NE(on_numerics & kAllowTF32Matmul, 0u);
  EXPECT_NE(off, on);
  EXPECT_NE(HashBytes(off), HashBytes(on));
  for (const std::string* bytes : {&off, &on}) {
    auto key = OpKey::Decode(*bytes);
    ASSERT_TRUE(key.ok()) << key.status().ToString();
    auto match = policy::FindFamily(*key);
    ASSERT_TRUE(match.ok()) << key->ToString() << ": " << match.status().ToString();
    EXPECT_EQ(match->family->name(), "matmul");
  }
}

// What the pre-filters decline, the families decline: a cuDNN convolution that is not depthwise,
// and inputs of a dtype or emptiness no part-2 family serves.
TEST(ShimKeys, WhatThePreFiltersDeclineTheFamiliesDecline) {
  auto declined = [](const char* op, const char* overload, std::vector<c10::IValue> args) {
    const c10::OperatorHandle handle = c10::Dispatcher::singleton().findSchemaOrThrow(op, overload);
    const auto& schema = handle.schema();
    auto k = kjit::torch::CallKey(schema, args, 90, kNumericsDefault);
    return !k.ok() || !policy::FindFamily(*k).ok();
  };
  const c10::IValue none;
  const std::vector<int64_t> one{1, 1};
  // An ordinary and a grouped convolution.
  const at::Tensor x = at::randn({2, 16, 10, 10});
  EXPECT_FALSE(CudnnConvMayBeDepthwise(std::vector<int64_t>{2, 16, 10, 10}, std::vector<int64_t>{32, 16, 3, 3}, 1));
  EXPECT_TRUE(declined("aten::cudnn_convolution", "", {x, at::randn({32, 16, 3, 3}), one, one, one, int64_t{1}, false,
                                                       false, true}));
  EXPECT_FALSE(CudnnConvMayBeDepthwise(std::vector<int64_t>{2, 16, 10, 10}, std::vector<int64_t>{16, 4, 3, 3}, 4));
  EXPECT_TRUE(declined("aten::cudnn_convolution", "", {x, at::randn({16, 4, 3, 3}), one, one, one, int64_t{4}, false,
                                                       false, true}));
  // An ordinary convolution's backward (every convolution's goes through convolution_backward).
  const c10::List<bool> all({true, true, true});
  EXPECT_FALSE(ConvBackwardMayBeDepthwise(std::vector<int64_t>{2, 16, 10, 10}, std::vector<int64_t>{32, 16, 3, 3}, 1,
                                          false));
  EXPECT_TRUE(declined("aten::convolution_backward", "",
                       {at::randn({2, 32, 8, 8}), x, at::randn({32, 16, 3, 3}), none, one, std::vector<int64_t>{0, 0},
                        one, false, std::vector<int64_t>{0, 0}, int64_t{1}, all}));
  // Other dtypes, empty and 0-d inputs (PreFilter::kServedFloat).
  EXPECT_TRUE(declined("aten::cumsum", "", {at::ones({4, 8}, at::kLong), int64_t{1}, none}));
  EXPECT_TRUE(declined("aten::sum", "dim_IntList", {at::ones({4, 8}, at::kBool), std::vector<int64_t>{1}, false, none}));
  EXPECT_TRUE(declined("aten::argmax", "", {at::ones({4, 8}, at::kDouble), int64_t{1}, false}));
  EXPECT_TRUE(declined("aten::amax", "", {at::ones({0, 8}), std::vector<int64_t>{1}, false}));
  // 0-d inputs.
  EXPECT_TRUE(declined("aten::sum", "dim_IntList", {at::ones({}), std::vector<int64_t>{}, false, none}));
  EXPECT_TRUE(declined("aten::cumsum", "", {at::ones({}), int64_t{0}, none}));
  EXPECT_TRUE(declined("aten::argmax", "", {at::ones({}), none, false}));
  EXPECT_TRUE(declined("aten::max_pool2d_with_indices", "",
                       {at::ones({2, 3, 8, 8}, at::kDouble), std::vector<int64_t>{2, 2}, std::vector<int64_t>{2, 2},
                        std::vector<int64_t>{0, 0}, one, false}));
}

}  // namespace
}  // namespace kjit::shim
