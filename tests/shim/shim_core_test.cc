// The shim's torch-free logic: settings, the entry state machine, the table,
// and announcement handling against a fake kernel source.
#include <gtest/gtest.h>

#include <fstream>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "activity.h"
#include "announcements.h"
#include "shim_core.h"

namespace kjit::shim {
namespace {

Settings FromEnv(std::map<std::string, std::string> env) {
  return ReadSettings([&](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  });
}

size_t ChainMemberOps() {
  size_t n = 0;
  for (std::string_view op : kInterceptedOps) n += PreFilterFor(op) == PreFilter::kChainMember ? 1 : 0;
  return n;
}

TEST(ShimSettings, DefaultsInterceptEveryOpButTheChainsOps) {
  Settings s = FromEnv({});
  EXPECT_FALSE(s.disabled);
  EXPECT_FALSE(s.log);
  EXPECT_FALSE(s.fusion_record);
  ASSERT_GT(ChainMemberOps(), 0u);
  EXPECT_EQ(s.ops.size(), std::size(kInterceptedOps) - ChainMemberOps());
  for (const std::string& op : s.ops) EXPECT_NE(PreFilterFor(op), PreFilter::kChainMember) << op;
}

// KJIT_FUSION=record wraps the fusible ops too (their calls are sampled into chains); other values leave them
// alone, and a value that means nothing is kept for the adapter's log line.
TEST(ShimSettings, FusionRecordInterceptsTheChainsOps) {
  for (const char* on : {"record", "1"}) {
    const Settings s = FromEnv({{"KJIT_FUSION", on}});
    EXPECT_TRUE(s.fusion_record) << on;
    EXPECT_EQ(s.ops.size(), std::size(kInterceptedOps)) << on;
  }
  for (const char* off : {"0", "off", ""}) {
    const Settings s = FromEnv({{"KJIT_FUSION", off}});
    EXPECT_FALSE(s.fusion_record) << off;
    EXPECT_TRUE(s.unknown_fusion.empty()) << off;
  }
  const Settings serve = FromEnv({{"KJIT_FUSION", "serve"}});
  EXPECT_TRUE(serve.fusion_record);
  EXPECT_TRUE(serve.fusion_serve);
  EXPECT_FALSE(FromEnv({{"KJIT_FUSION", "record"}}).fusion_serve);
  const Settings odd = FromEnv({{"KJIT_FUSION", "fuse"}});
  EXPECT_FALSE(odd.fusion_record);
  EXPECT_EQ(odd.unknown_fusion, "fuse");
  EXPECT_EQ(odd.ops.size(), std::size(kInterceptedOps) - ChainMemberOps());
  // KJIT_OPS names a fusible op: still not intercepted without KJIT_FUSION.
  EXPECT_TRUE(FromEnv({{"KJIT_OPS", "mul.Tensor"}}).ops.empty());
  EXPECT_EQ(FromEnv({{"KJIT_OPS", "mul.Tensor"}, {"KJIT_FUSION", "record"}}).ops, std::vector<std::string>{"mul.Tensor"});
}

TEST(ShimSettings, DisableAndLog) {
  EXPECT_TRUE(FromEnv({{"KJIT_DISABLE", "1"}}).disabled);
  EXPECT_FALSE(FromEnv({{"KJIT_DISABLE", "0"}}).disabled);
  EXPECT_FALSE(FromEnv({{"KJIT_DISABLE", ""}}).disabled);
  EXPECT_TRUE(FromEnv({{"KJIT_LOG", "1"}}).log);
  EXPECT_FALSE(FromEnv({{"KJIT_LOG", "0"}}).log);
}

TEST(ShimSettings, Profile) {
  EXPECT_FALSE(FromEnv({}).profile);
  EXPECT_FALSE(FromEnv({{"KJIT_PROFILE", "0"}}).profile);
  EXPECT_FALSE(FromEnv({{"KJIT_PROFILE", ""}}).profile);
  const Settings stderr_table = FromEnv({{"KJIT_PROFILE", "1"}});
  EXPECT_TRUE(stderr_table.profile);
  EXPECT_EQ(stderr_table.profile_path, "");
  const Settings to_file = FromEnv({{"KJIT_PROFILE", "/tmp/kjit-profile.txt"}});
  EXPECT_TRUE(to_file.profile);
  EXPECT_EQ(to_file.profile_path, "/tmp/kjit-profile.txt");
}

TEST(ShimSettings, Passthrough) {
  EXPECT_FALSE(FromEnv({}).passthrough);
  EXPECT_FALSE(FromEnv({{"KJIT_PASSTHROUGH", "0"}}).passthrough);
  EXPECT_TRUE(FromEnv({{"KJIT_PASSTHROUGH", "1"}}).passthrough);
}

TEST(ShimProfile, TableAndJsonListTheStagesSeen) {
  StageProfile p;
  p.clock_ns = 18.5;
  EXPECT_EQ(p.Json(), "{\"clock_ns\": 18.50, \"stages\": []}");
  p.Add(Stage::kKey, 100);
  p.Add(Stage::kKey, 300);
  p.Add(Stage::kWrapper, 5000);
  p.Add(Stage::kLookup, -5);  // a clock that stepped back counts as 0
  EXPECT_EQ(p.calls(Stage::kKey), 2u);
  EXPECT_EQ(p.ns(Stage::kKey), 400u);
  EXPECT_EQ(p.ns(Stage::kLookup), 0u);
  EXPECT_EQ(p.calls(Stage::kLaunch), 0u);
  EXPECT_EQ(p.Json(),
            "{\"clock_ns\": 18.50, \"stages\": [{\"stage\": \"key\", \"calls\": 2, \"mean_ns\": 200.00, "
            "\"total_ns\": 400}, {\"stage\": \"lookup\", \"calls\": 1, \"mean_ns\": 0.00, \"total_ns\": 0}, "
            "{\"stage\": \"wrapper total\", \"calls\": 1, \"mean_ns\": 5000.00, \"total_ns\": 5000}]}");
  const std::string table = p.Table();
  EXPECT_NE(table.find("18.5 ns"), std::string::npos) << table;
  EXPECT_NE(table.find("key"), std::string::npos) << table;
  EXPECT_NE(table.find("200.0"), std::string::npos) << table;
  EXPECT_EQ(table.find("launch"), std::string::npos) << "stages no call reached are left out:\n" << table;
  for (size_t i = 0; i < static_cast<size_t>(Stage::kCount); ++i) {
    EXPECT_NE(StageName(static_cast<Stage>(i)), "?");
  }
}

TEST(ShimSettings, OpListRestrictsInInterceptOrder) {
  std::vector<std::string> unknown;
  // The intercept order is the op registry's: families by folder name, each family's ops as it lists them.
  EXPECT_EQ(ParseOpList(" _softmax, aten::native_layer_norm ,native_layer_norm,,gelu", &unknown),
            (std::vector<std::string>{"native_layer_norm", "_softmax"}));
  EXPECT_EQ(unknown, std::vector<std::string>{"gelu"});
  Settings s = FromEnv({{"KJIT_OPS", "_softmax,native_layer_norm"}});
  EXPECT_EQ(s.ops, (std::vector<std::string>{"native_layer_norm", "_softmax"}));
  // Only unknown names: nothing is intercepted (not everything).
  EXPECT_TRUE(FromEnv({{"KJIT_OPS", "gelu"}}).ops.empty());
}

TEST(ShimSettings, OpListOverloads) {
  std::vector<std::string> unknown;
  // An overload named exactly; the default overload as torch.ops spells it; "aten::" optional.
  EXPECT_EQ(ParseOpList("aten::sum.dim_IntList, prod.default, mean.dim", &unknown),
            (std::vector<std::string>{"sum.dim_IntList", "mean.dim", "prod"}));
  EXPECT_TRUE(unknown.empty());
  // A bare name selects every intercepted overload of the op.
  EXPECT_EQ(ParseOpList("prod", &unknown), (std::vector<std::string>{"prod", "prod.dim_int"}));
  EXPECT_EQ(ParseOpList("sum,argmax", &unknown), (std::vector<std::string>{"sum.dim_IntList", "argmax"}));
  EXPECT_EQ(ParseOpList("cudnn_convolution,_conv_depthwise2d,max_pool2d_with_indices,cumsum", &unknown),
            (std::vector<std::string>{"_conv_depthwise2d", "cudnn_convolution", "max_pool2d_with_indices", "cumsum"}));
  EXPECT_TRUE(unknown.empty());
  // Overloads kjit does not intercept, and dots in odd places, are unknown.
  EXPECT_TRUE(ParseOpList("sum.IntList_out,sum.default,cumsum.out,amax.,.dim", &unknown).empty());
  EXPECT_EQ(unknown, (std::vector<std::string>{"sum.IntList_out", "sum.default", "cumsum.out", "amax.", ".dim"}));
  // The softmax ops select their only (default) overload, with or without ".default".
  unknown.clear();
  EXPECT_EQ(ParseOpList("_softmax.default,_log_softmax", &unknown),
            (std::vector<std::string>{"_softmax", "_log_softmax"}));
  EXPECT_TRUE(unknown.empty());
  Settings s = FromEnv({{"KJIT_OPS", "aten::mean.dim,amax"}});
  EXPECT_EQ(s.ops, (std::vector<std::string>{"mean.dim", "amax"}));
}

TEST(ShimOps, InterceptedOpsSplitIntoNameAndOverload) {
  EXPECT_EQ(SplitOpName("sum.dim_IntList").name, "sum");
  EXPECT_EQ(SplitOpName("sum.dim_IntList").overload, "dim_IntList");
  EXPECT_EQ(SplitOpName("amax").name, "amax");
  EXPECT_EQ(SplitOpName("amax").overload, "");
  // Every entry is unique, has a name, and an overload only after a dot.
  for (size_t i = 0; i < std::size(kInterceptedOps); ++i) {
    const OpName op = SplitOpName(kInterceptedOps[i]);
    EXPECT_FALSE(op.name.empty()) << kInterceptedOps[i];
    EXPECT_FALSE(kInterceptedOps[i].starts_with("aten::")) << kInterceptedOps[i];
    EXPECT_EQ(op.overload.empty(), kInterceptedOps[i].find('.') == std::string_view::npos) << kInterceptedOps[i];
    for (size_t j = 0; j < i; ++j) EXPECT_NE(kInterceptedOps[i], kInterceptedOps[j]);
  }
}

TEST(ShimOps, TheFamiliesOpsAreIntercepted) {
  auto listed = [](std::string_view op) {
    return std::find(std::begin(kInterceptedOps), std::end(kInterceptedOps), op) != std::end(kInterceptedOps);
  };
  for (std::string_view op : {"_softmax", "_log_softmax", "native_layer_norm", "_fused_rms_norm", "native_group_norm",
                              "native_batch_norm", "cudnn_batch_norm", "cumsum", "cumprod", "max_pool2d_with_indices",
                              "max_pool3d_with_indices", "avg_pool2d", "avg_pool3d", "sum.dim_IntList", "mean.dim",
                              "amax", "amin", "prod", "prod.dim_int", "argmax", "argmin", "_conv_depthwise2d",
                              "cudnn_convolution", "mm", "bmm", "_softmax_backward_data",
                              "_log_softmax_backward_data", "native_layer_norm_backward", "_fused_rms_norm_backward",
                              "native_group_norm_backward", "avg_pool2d_backward",
                              "max_pool2d_with_indices_backward", "avg_pool3d_backward",
                              "max_pool3d_with_indices_backward", "native_batch_norm_backward",
                              "cudnn_batch_norm_backward", "convolution_backward"}) {
    EXPECT_TRUE(listed(op)) << op;
    EXPECT_NE(PreFilterFor(op), PreFilter::kChainMember) << op;
  }
  // The chains' ops (elementwise_chain), wrapped only under KJIT_FUSION.
  for (std::string_view op : {"mul.Tensor", "add.Tensor", "sub.Tensor", "div.Tensor", "pow.Tensor_Scalar", "tanh",
                              "exp", "neg", "sqrt", "rsqrt", "reciprocal", "sigmoid"}) {
    EXPECT_TRUE(listed(op)) << op;
    EXPECT_EQ(PreFilterFor(op), PreFilter::kChainMember) << op;
  }
  EXPECT_EQ(std::size(kInterceptedOps), 37u + 12u);
  // Overloads without CUDA kernels of their own, or that the families do not serve, are not listed.
  for (std::string_view op : {"sum", "mean", "max_pool2d", "cumsum_", "cumsum.out", "sum.IntList_out", "mm.out",
                              "bmm.out", "addmm", "matmul"}) {
    EXPECT_FALSE(listed(op)) << op;
  }
}

// The ops whose recorded calls (autograd) kjit serves are intercepted ops, and batch_norm's are not among them.
TEST(ShimOps, RecordedCallsServedWhereTheFamiliesDeclareThem) {
  size_t declared = 0;
  for (std::string_view op : kServesRecordedOps) {
    if (op.empty()) continue;
    ++declared;
    EXPECT_NE(std::find(std::begin(kInterceptedOps), std::end(kInterceptedOps), op), std::end(kInterceptedOps)) << op;
  }
  EXPECT_GT(declared, 0u);
  static_assert(ServesRecordedCalls("_softmax"));
  static_assert(ServesRecordedCalls("native_layer_norm"));
  static_assert(ServesRecordedCalls("mm"));
  static_assert(!ServesRecordedCalls("native_batch_norm"));
  static_assert(!ServesRecordedCalls("cudnn_batch_norm"));
  static_assert(!ServesRecordedCalls("gelu"));
  static_assert(!ServesRecordedCalls("native_layer_norm_backward"));  // a double backward's: left to PyTorch
  static_assert(!ServesRecordedCalls("convolution_backward"));
  static_assert(!ServesRecordedCalls(""));
}

TEST(ShimOps, PreFilters) {
  // The softmax and norm ops key every call, as before; the part-2 ops check dtype and emptiness
  // first; cudnn_convolution also that it is depthwise.
  for (std::string_view op : {"_softmax", "_log_softmax", "native_layer_norm", "_fused_rms_norm", "native_group_norm",
                              "native_batch_norm", "cudnn_batch_norm", "native_batch_norm_backward",
                              "cudnn_batch_norm_backward"}) {
    EXPECT_EQ(PreFilterFor(op), PreFilter::kNone) << op;
  }
  for (std::string_view op : {"cumsum", "cumprod", "max_pool2d_with_indices", "max_pool3d_with_indices", "avg_pool2d",
                              "avg_pool3d", "sum.dim_IntList", "mean.dim", "amax", "amin", "prod", "prod.dim_int",
                              "argmax", "argmin", "_conv_depthwise2d", "avg_pool2d_backward",
                              "max_pool2d_with_indices_backward", "avg_pool3d_backward",
                              "max_pool3d_with_indices_backward"}) {
    EXPECT_EQ(PreFilterFor(op), PreFilter::kServedFloat) << op;
  }
  EXPECT_EQ(PreFilterFor("cudnn_convolution"), PreFilter::kDepthwiseConv);
  EXPECT_EQ(PreFilterFor("convolution_backward"), PreFilter::kDepthwiseConvBackward);
  EXPECT_EQ(PreFilterFor("mm"), PreFilter::kSmallMatmul);
  EXPECT_EQ(PreFilterFor("bmm"), PreFilter::kSmallBatchedMatmul);
  EXPECT_EQ(PreFilterFor("gelu"), PreFilter::kNone);
  EXPECT_EQ(PreFilterFor("addmm"), PreFilter::kNone);
  // Usable at compile time (the adapter's wrappers take theirs as a constant).
  static_assert(PreFilterFor("cudnn_convolution") == PreFilter::kDepthwiseConv);
  static_assert(PreFilterFor("bmm") == PreFilter::kSmallBatchedMatmul);
  static_assert(SplitOpName("prod.dim_int").overload == "dim_int");
}

TEST(ShimOps, CudnnPreFilterPassesDepthwiseConvolutionsOnly) {
  using V = std::vector<int64_t>;
  auto depthwise = [](V x, V w, int64_t groups) { return CudnnConvMayBeDepthwise(x, w, groups); };
  // F.conv2d(x[N, C, H, W], w[C, 1, kH, kW], groups=C): depthwise, whatever the kernel's size.
  EXPECT_TRUE(depthwise({32, 128, 56, 56}, {128, 1, 3, 3}, 128));
  EXPECT_TRUE(depthwise({1, 2, 7, 9}, {2, 1, 5, 1}, 2));
  // An ordinary convolution (groups 1), a grouped one (groups < C), a channel multiplier of 2
  // (out_channels = 2C), a single channel (groups == C == 1: a plain convolution).
  EXPECT_FALSE(depthwise({32, 128, 56, 56}, {256, 128, 3, 3}, 1));
  EXPECT_FALSE(depthwise({32, 128, 56, 56}, {128, 4, 3, 3}, 32));
  EXPECT_FALSE(depthwise({32, 128, 56, 56}, {256, 1, 3, 3}, 128));
  EXPECT_FALSE(depthwise({32, 1, 56, 56}, {1, 1, 3, 3}, 1));
  // groups == C but the weight's in-channels per group is not 1 (PyTorch would reject it anyway).
  EXPECT_FALSE(depthwise({8, 16, 10, 10}, {16, 2, 3, 3}, 16));
  // 1-D and 3-D convolutions (cuDNN's 3-D and unsqueezed 1-D calls), and mismatched ranks.
  EXPECT_FALSE(depthwise({8, 16, 100}, {16, 1, 3}, 16));
  EXPECT_FALSE(depthwise({8, 16, 4, 10, 10}, {16, 1, 3, 3, 3}, 16));
  EXPECT_FALSE(depthwise({8, 16, 10, 10}, {16, 1, 3}, 16));
  // Empty inputs are left to PyTorch.
  EXPECT_FALSE(depthwise({0, 16, 10, 10}, {16, 1, 3, 3}, 16));
  EXPECT_FALSE(depthwise({4, 16, 0, 10}, {16, 1, 3, 3}, 16));
}

// convolution_backward is every convolution's backward: only a depthwise one's (1-D or 2-D) is keyed.
TEST(ShimOps, ConvolutionBackwardPreFilterPassesDepthwiseConvolutionsOnly) {
  using V = std::vector<int64_t>;
  auto depthwise = [](V x, V w, int64_t groups, bool transposed = false) {
    return ConvBackwardMayBeDepthwise(x, w, groups, transposed);
  };
  // F.conv2d and F.conv1d with groups=C: [C, 1, kH, kW] and [C, 1, k] weights.
  EXPECT_TRUE(depthwise({32, 128, 56, 56}, {128, 1, 3, 3}, 128));
  EXPECT_TRUE(depthwise({8, 256, 1024}, {256, 1, 4}, 256));
  // Transposed, ordinary, grouped, channel-multiplier and single-channel convolutions.
  EXPECT_FALSE(depthwise({32, 128, 56, 56}, {128, 1, 3, 3}, 128, true));
  EXPECT_FALSE(depthwise({32, 128, 56, 56}, {256, 128, 3, 3}, 1));
  EXPECT_FALSE(depthwise({32, 128, 56, 56}, {128, 4, 3, 3}, 32));
  EXPECT_FALSE(depthwise({32, 128, 56, 56}, {256, 1, 3, 3}, 128));
  EXPECT_FALSE(depthwise({32, 1, 56, 56}, {1, 1, 3, 3}, 1));
  // 3-D convolutions, mismatched ranks, empty inputs.
  EXPECT_FALSE(depthwise({8, 16, 4, 10, 10}, {16, 1, 3, 3, 3}, 16));
  EXPECT_FALSE(depthwise({8, 16, 10, 10}, {16, 1, 3}, 16));
  EXPECT_FALSE(depthwise({0, 16, 10, 10}, {16, 1, 3, 3}, 16));
  EXPECT_FALSE(depthwise({4, 16, 0}, {16, 1, 3}, 16));
}

TEST(ShimOps, MatmulPreFilterPassesSmallInnerDimensionsOnly) {
  using V = std::vector<int64_t>;
  // Contiguous strides of `sizes`.
  auto dense = [](const V& sizes) {
    V strides(sizes.size(), 1);
    for (size_t i = sizes.size(); i-- > 1;) strides[i - 1] = strides[i] * sizes[i];
    return strides;
  };
  auto mm = [&](DType dtype, V a, V b) {
    const V sa = dense(a), sb = dense(b);
    return SmallMatmulMayBeServed(false, dtype, {a, sa}, {b, sb});
  };
  auto bmm = [&](DType dtype, V a, V b) {
    const V sa = dense(a), sb = dense(b);
    return SmallMatmulMayBeServed(true, dtype, {a, sa}, {b, sb});
  };
  // The headroom shapes: the skinny float32 product, batches of 64x64 matrices.
  EXPECT_TRUE(mm(DType::kFloat32, {32768, 64}, {64, 32768}));
  EXPECT_TRUE(bmm(DType::kFloat32, {4096, 64, 64}, {4096, 64, 64}));
  EXPECT_TRUE(bmm(DType::kBFloat16, {256, 64, 64}, {256, 64, 64}));
  EXPECT_TRUE(mm(DType::kFloat16, {1, 64}, {64, 4096}));
  // K at the family's limits and one past them (policy/matmul/limits.h).
  EXPECT_TRUE(mm(DType::kFloat32, {8, 256}, {256, 8}));
  EXPECT_FALSE(mm(DType::kFloat32, {8, 257}, {257, 8}));
  EXPECT_TRUE(bmm(DType::kFloat16, {2, 8, 64}, {2, 64, 8}));
  EXPECT_FALSE(bmm(DType::kFloat16, {2, 8, 65}, {2, 65, 8}));
  EXPECT_FALSE(mm(DType::kBFloat16, {8, 65}, {65, 8}));
  // Large products, the common case in models: a transformer's projection, attention's scores.
  EXPECT_FALSE(mm(DType::kFloat32, {4096, 4096}, {4096, 4096}));
  EXPECT_FALSE(bmm(DType::kBFloat16, {32, 128, 1024}, {32, 1024, 128}));
  // Large M and N do not matter, K does.
  EXPECT_TRUE(mm(DType::kFloat32, {1 << 20, 16}, {16, 1 << 16}));
  // dtypes the family does not serve, at any K.
  for (DType t : {DType::kFloat64, DType::kInt64, DType::kInt32, DType::kBool, DType::kFloat8E4M3FN}) {
    EXPECT_FALSE(mm(t, {8, 4}, {4, 8})) << DTypeName(t);
  }
  // Ranks: mm is 2-D, bmm 3-D.
  EXPECT_FALSE(mm(DType::kFloat32, {64}, {64, 8}));
  EXPECT_FALSE(mm(DType::kFloat32, {2, 8, 64}, {2, 64, 8}));
  EXPECT_FALSE(bmm(DType::kFloat32, {8, 64}, {64, 8}));
  EXPECT_FALSE(bmm(DType::kFloat32, {1, 2, 8, 64}, {1, 2, 64, 8}));
  // Empty products.
  EXPECT_FALSE(mm(DType::kFloat32, {0, 64}, {64, 8}));
  EXPECT_FALSE(mm(DType::kFloat32, {8, 0}, {0, 8}));
  EXPECT_FALSE(mm(DType::kFloat32, {8, 64}, {64, 0}));
  EXPECT_FALSE(bmm(DType::kFloat32, {0, 8, 64}, {0, 64, 8}));
  // Operands PyTorch rejects: inner or batch dimensions that differ.
  EXPECT_FALSE(mm(DType::kFloat32, {8, 64}, {32, 8}));
  EXPECT_FALSE(bmm(DType::kFloat32, {2, 8, 64}, {3, 64, 8}));
  // Transposed and expanded operands pass; negative strides (never PyTorch's) do not.
  const V a{8, 64}, a_t{1, 8}, b{64, 8}, bt{1, 64};
  EXPECT_TRUE(SmallMatmulMayBeServed(false, DType::kFloat32, {a, a_t}, {b, bt}));
  const V ea{4, 8, 64}, es{0, 64, 1}, eb{4, 64, 8}, ebs{512, 8, 1};
  EXPECT_TRUE(SmallMatmulMayBeServed(true, DType::kFloat32, {ea, es}, {eb, ebs}));
  const V neg{-64, 1};
  EXPECT_FALSE(SmallMatmulMayBeServed(false, DType::kFloat32, {a, neg}, {b, bt}));
  // Sizes and strides of different ranks (not a tensor's, but declined rather than read past).
  const V short_strides{1};
  EXPECT_FALSE(SmallMatmulMayBeServed(false, DType::kFloat32, {a, short_strides}, {b, bt}));
}

std::vector<OutputLayout> OneOutput() { return {OutputLayout{true, 6, {4, 8}, {8, 1}}}; }

std::unique_ptr<LoadedKernel> FakeKernel(int64_t id) {
  auto k = std::make_unique<LoadedKernel>();
  k->record_id = id;
  return k;
}

TEST(ShimEntry, NegativeThenHotSwapThenFail) {
  Entry e("key", 0);
  EXPECT_EQ(e.state(), EntryState::kUnknown);
  EXPECT_EQ(e.kernel(), nullptr);
  EXPECT_FALSE(e.Swap(FakeKernel(1))) << "no swap before the first call recorded the outputs";
  EXPECT_TRUE(e.ResolveNegative(OneOutput()));
  EXPECT_FALSE(e.ResolveNegative(OneOutput())) << "resolved once";
  EXPECT_EQ(e.state(), EntryState::kNegative);
  EXPECT_EQ(e.outputs(), OneOutput());
  EXPECT_TRUE(e.Swap(FakeKernel(7)));
  EXPECT_EQ(e.state(), EntryState::kLoaded);
  const LoadedKernel* first = e.kernel();
  ASSERT_NE(first, nullptr);
  EXPECT_EQ(first->record_id, 7);
  EXPECT_TRUE(e.Swap(FakeKernel(9)));
  EXPECT_EQ(e.kernel()->record_id, 9);
  EXPECT_EQ(first->record_id, 7) << "a replaced kernel stays alive (launches may be queued)";
  EXPECT_TRUE(e.Fail("launch failed")) << "the call that blacklists the key reports it";
  EXPECT_FALSE(e.Fail("second reason")) << "a failure is reported once per key and process";
  EXPECT_EQ(e.state(), EntryState::kFailed);
  EXPECT_EQ(e.kernel(), nullptr);
  EXPECT_EQ(e.failure(), "launch failed");
  EXPECT_FALSE(e.Swap(FakeKernel(10))) << "blacklisted for the process";
}

TEST(ShimEntry, LoadedOnFirstSight) {
  Entry e("key", 1);
  EXPECT_FALSE(e.ResolveLoaded(OneOutput(), nullptr));
  EXPECT_TRUE(e.ResolveLoaded(OneOutput(), FakeKernel(3)));
  EXPECT_EQ(e.state(), EntryState::kLoaded);
  EXPECT_EQ(e.kernel()->record_id, 3);
  EXPECT_FALSE(e.ResolveNegative(OneOutput()));
}

TEST(ShimEntry, OnlyOneThreadReportsAFailure) {
  Entry e("key", 0);
  ASSERT_TRUE(e.ResolveNegative(OneOutput()));
  std::atomic<int> reporters{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      if (e.Fail("thread " + std::to_string(t))) reporters.fetch_add(1);
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(reporters.load(), 1);
}

// A hot loop: one report at once, then at most one per interval, each with
// every call since the last and their mean host time.
TEST(ShimEntry, MissesReportedFirstThenOncePerInterval) {
  Entry e("key", 0);
  constexpr int64_t kSecond = Entry::kMissReportIntervalNs;
  const int64_t t0 = 5 * kSecond;
  Entry::MissReport first = e.CountMiss(/*host_ns=*/9000, t0);
  EXPECT_EQ(first.calls, 1u);
  EXPECT_DOUBLE_EQ(first.mean_host_us, 9.0);
  // 100,000 calls within the interval (2 us and 4 us alternately): no message.
  uint64_t reported = 1;
  int reports = 1;
  for (int i = 0; i < 100'000; ++i) {
    const Entry::MissReport r = e.CountMiss(i % 2 == 0 ? 2000 : 4000, t0 + i * (kSecond / 100'001));
    reported += r.calls;
    reports += r.calls > 0;
  }
  EXPECT_EQ(reports, 1) << "a hot key must not send a message per batch of calls";
  // The first call past the interval reports them all, itself included.
  const Entry::MissReport second = e.CountMiss(3000, t0 + kSecond);
  EXPECT_EQ(second.calls, 100'001u);
  EXPECT_NEAR(second.mean_host_us, 3.0, 1e-9);
  EXPECT_EQ(e.CountMiss(1000, t0 + kSecond + 1).calls, 0u);
  const Entry::MissReport third = e.CountMiss(1000, t0 + 2 * kSecond + 1);
  EXPECT_EQ(third.calls, 2u);
  EXPECT_DOUBLE_EQ(third.mean_host_us, 1.0);
  EXPECT_EQ(e.misses(), 100'004u);
}

// A key's first call is counted but not timed (its time is PyTorch's first-use work): its report says one call
// and no time; the misses a process made since a key's last report are taken at exit (TakeMissReport), due or
// not, with their timed calls' mean, once.
TEST(ShimEntry, TheFirstCallIsNotTimedAndTheLastCallsAreTakenAtExit) {
  Entry e("key", 0);
  constexpr int64_t kSecond = Entry::kMissReportIntervalNs;
  const Entry::MissReport first = e.CountMiss(/*host_ns=*/900'000'000, kSecond, /*timed=*/false);
  EXPECT_EQ(first.calls, 1u);
  EXPECT_EQ(first.mean_host_us, 0.0) << "the first call's time is not the key's";
  for (int i = 0; i < 20; ++i) {
    if (e.TimeThisMiss()) {
      EXPECT_EQ(e.CountMiss(3000, kSecond + 1 + i).calls, 0u) << "within the interval";
    } else {
      e.CountUntimedMiss();
    }
  }
  const Entry::MissReport last = e.TakeMissReport(kSecond + 100);
  EXPECT_EQ(last.calls, 20u) << "every call since the first report";
  EXPECT_DOUBLE_EQ(last.mean_host_us, 3.0);
  EXPECT_EQ(e.TakeMissReport(kSecond + 200).calls, 0u) << "taken once";
}

// The adapter times one miss in kMissTimingStride (and a key's first): the untimed ones
// are counted and reported with the next timed one that is due, and do not enter the mean.
TEST(ShimEntry, UntimedMissesAreCountedAndReportedWithTheNextTimedOne) {
  Entry e("key", 0);
  constexpr int64_t kSecond = Entry::kMissReportIntervalNs;
  EXPECT_TRUE(e.TimeThisMiss()) << "a key's first miss is timed";
  EXPECT_EQ(e.CountMiss(8000, kSecond).calls, 1u);
  uint64_t timed = 0, untimed = 0;
  for (int i = 0; i < 1000; ++i) {
    if (e.TimeThisMiss()) {
      ++timed;
      EXPECT_EQ(e.CountMiss(2000, kSecond + 1 + i).calls, 0u) << "within the interval";
    } else {
      ++untimed;
      e.CountUntimedMiss();
    }
  }
  EXPECT_GT(untimed, 0u);
  EXPECT_EQ(timed, (1000 + 1 + Entry::kMissTimingStride - 1) / Entry::kMissTimingStride - 1)
      << "one miss in kMissTimingStride is timed";
  // Untimed misses never report, however late.
  e.CountUntimedMiss();
  EXPECT_EQ(e.misses(), 1002u);
  const Entry::MissReport r = e.CountMiss(4000, 3 * kSecond);
  EXPECT_EQ(r.calls, 1002u) << "every miss since the first report, untimed ones included";
  EXPECT_DOUBLE_EQ(r.mean_host_us, (2.0 * static_cast<double>(timed) + 4.0) / static_cast<double>(timed + 1))
      << "the mean of the timed misses only";
}

TEST(ShimEntry, ConcurrentMissesAreEachReportedOnce) {
  Entry e("key", 0);
  constexpr int kThreads = 4, kCalls = 20000;
  std::atomic<uint64_t> reported{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < kCalls; ++i) {
        // Every call is a new interval: reports race with each other and with counting.
        reported.fetch_add(e.CountMiss(1000, static_cast<int64_t>(i) * Entry::kMissReportIntervalNs).calls);
      }
    });
  }
  for (auto& t : threads) t.join();
  reported += e.CountMiss(1000, INT64_MAX).calls;  // whatever the last race left pending
  EXPECT_EQ(reported.load(), static_cast<uint64_t>(kThreads * kCalls + 1));
}

TEST(ShimEntry, ArgumentProblemsAreNotTheKernels) {
  EXPECT_EQ(LaunchFailureStage(InvalidArgument("argument 0 is on another device")), "argument");
  EXPECT_EQ(LaunchFailureStage(Status(StatusCode::kLaunchConfig, "block of 2048 threads")), "launch");
  EXPECT_EQ(LaunchFailureStage(Status(StatusCode::kCudaError, "cuLaunchKernel: CUDA_ERROR_INVALID_VALUE")), "launch");
}

TEST(ShimTable, OneCreatorPerKeyAndDevice) {
  EntryTable table;
  const Hash128 h = HashBytes("a key");
  constexpr int kThreads = 8;
  std::atomic<int> creators{0};
  std::vector<std::thread> threads;
  std::vector<Entry*> seen(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      bool created = false;
      seen[static_cast<size_t>(t)] = table.FindOrCreate(h, 0, "a key", &created);
      if (created) creators.fetch_add(1);
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(creators.load(), 1);
  for (Entry* e : seen) EXPECT_EQ(e, seen[0]);
  EXPECT_EQ(seen[0]->key_bytes(), "a key");
  bool created = false;
  Entry* other_device = table.FindOrCreate(h, 1, "a key", &created);
  EXPECT_TRUE(created);
  EXPECT_NE(other_device, seen[0]) << "a module of one device's context cannot run on another";
  EXPECT_EQ(table.Find(h, 1), other_device);
  EXPECT_EQ(table.Find(HashBytes("other"), 0), nullptr);
  EXPECT_EQ(table.size(), 2u);
}

// The process's misses (the adapter's counter) are its entries' misses summed, counted from
// several threads while others create entries.
TEST(ShimTable, MissesSumEveryEntrysMisses) {
  EntryTable table;
  EXPECT_EQ(table.misses(), 0u);
  constexpr int kThreads = 4, kKeys = 50, kCalls = 100;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&table, t] {
      for (int k = 0; k < kKeys; ++k) {
        const std::string key = "key " + std::to_string((k + t) % kKeys);
        bool created = false;
        Entry* e = table.FindOrCreate(HashBytes(key), 0, key, &created);
        for (int i = 0; i < kCalls; ++i) {
          if (e->TimeThisMiss()) {
            (void)e->CountMiss(1000, i);
          } else {
            e->CountUntimedMiss();
          }
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(table.size(), static_cast<size_t>(kKeys));
  EXPECT_EQ(table.misses(), static_cast<uint64_t>(kThreads * kKeys * kCalls));
}

// The activity reporter (activity.h) against a fake sink: the first look reports every device with calls, later
// looks only the devices whose calls moved, a quiet table nothing, a device without a UUID is left out, and a
// refusing kjitd ends the reports.
class FakeActivitySink : public ActivitySink {
 public:
  bool SendActivity(ipc::ReportActivity report) override {
    std::lock_guard lock(mu);
    sent.push_back(std::move(report));
    return !refuse;
  }
  std::string DeviceUuid(int device) override { return device == 7 ? "" : "GPU-" + std::to_string(device); }
  void SendUses(ipc::ReportUses report) override {
    std::lock_guard lock(mu);
    uses.push_back(std::move(report));
  }
  std::mutex mu;
  std::vector<ipc::ReportActivity> sent;
  std::vector<ipc::ReportUses> uses;
  bool refuse = false;
};

TEST(ShimActivity, ReportsTheDevicesWhoseCallsMoved) {
  EntryTable table;
  FakeActivitySink sink;
  ActivityReporter reporter(table, &sink, 4242);
  EXPECT_FALSE(reporter.Tick().has_value());  // nothing run yet
  bool created = false;
  Entry* a0 = table.FindOrCreate(HashBytes("a"), 0, "a", &created);
  Entry* b0 = table.FindOrCreate(HashBytes("b"), 0, "b", &created);
  Entry* a1 = table.FindOrCreate(HashBytes("a"), 1, "a", &created);
  Entry* a7 = table.FindOrCreate(HashBytes("a"), 7, "a", &created);
  a0->CountUntimedMiss();
  b0->CountHit();
  b0->CountHit();
  a1->CountHit();
  a7->CountHit();
  EXPECT_EQ(table.CallsByDevice(), (std::vector<std::pair<int, uint64_t>>{{0, 3}, {1, 1}, {7, 1}}));
  auto first = reporter.Tick();
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(first->pid, 4242u);
  EXPECT_EQ(first->devices, (std::vector<std::string>{"GPU-0", "GPU-1"}));
  EXPECT_EQ(first->calls, 4u);  // device 7's call is not reported: it has no UUID
  EXPECT_FALSE(reporter.Tick().has_value());  // quiet since
  a1->CountUntimedMiss();
  auto second = reporter.Tick();
  ASSERT_TRUE(second.has_value());
  EXPECT_EQ(second->devices, (std::vector<std::string>{"GPU-1"}));
  EXPECT_EQ(second->calls, 1u);
  EXPECT_EQ(reporter.reports(), 2u);

  sink.refuse = true;
  a0->CountHit();
  EXPECT_FALSE(reporter.Tick().has_value());
  EXPECT_TRUE(reporter.refused());
  a0->CountHit();
  EXPECT_FALSE(reporter.Tick().has_value());  // no more reports to a kjitd that refused one
  EXPECT_EQ(sink.sent.size(), 3u);
}

// Per-key calls (report_uses): each key that ran since the last report, its hits with the record served
// and its misses, counted once; nothing when nothing ran.
TEST(ShimActivity, UsesReportEachKeysCallsOnce) {
  EntryTable table;
  FakeActivitySink sink;
  ActivityReporter reporter(table, &sink, 99);
  EXPECT_FALSE(reporter.FlushUses().has_value());
  bool created = false;
  Entry* hit = table.FindOrCreate(HashBytes("hit"), 0, "hit", &created);
  Entry* miss = table.FindOrCreate(HashBytes("miss"), 0, "miss", &created);
  ASSERT_TRUE(hit->ResolveLoaded({}, FakeKernel(17)));
  ASSERT_TRUE(miss->ResolveNegative({}));
  for (int i = 0; i < 3; ++i) hit->CountHit();
  miss->CountUntimedMiss();
  auto first = reporter.FlushUses();
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(first->pid, 99u);
  ASSERT_EQ(first->uses.size(), 2u);
  EXPECT_EQ(first->uses[0].key_hash, HashBytes("hit").ToHex());
  EXPECT_EQ(first->uses[0].record_id, 17);
  EXPECT_EQ(first->uses[0].hits, 3u);
  EXPECT_EQ(first->uses[0].misses, 0u);
  EXPECT_EQ(first->uses[1].key_hash, HashBytes("miss").ToHex());
  EXPECT_EQ(first->uses[1].record_id, 0);
  EXPECT_EQ(first->uses[1].misses, 1u);
  EXPECT_FALSE(reporter.FlushUses().has_value());  // nothing since
  hit->CountHit();
  auto second = reporter.FlushUses();
  ASSERT_TRUE(second.has_value());
  ASSERT_EQ(second->uses.size(), 1u);
  EXPECT_EQ(second->uses[0].hits, 1u);
  EXPECT_EQ(sink.uses.size(), 2u);
  EXPECT_FALSE(second->run_id.has_value()) << "a reporter without a run sends none";
}

// The PyTorch a process loaded, read beside libtorch_cpu.so: pip's version.py, else a LibTorch archive's
// build-version; the adapter stays off when it was built against another.
TEST(ShimTorchVersion, ReadBesideTheLibraryAndComparedWithTheBuiltOne) {
  char tmpl[] = "/tmp/kjit-torch-version-XXXXXX";
  const std::string root = mkdtemp(tmpl);
  const std::string lib = root + "/torch/lib";
  ASSERT_EQ(system(("mkdir -p " + lib).c_str()), 0);
  EXPECT_EQ(LoadedTorchVersion(lib), "") << "neither file";
  { std::ofstream(root + "/torch/build-version") << "2.10.1+cpu\n"; }
  EXPECT_EQ(LoadedTorchVersion(lib), "2.10.1");
  { std::ofstream(root + "/torch/version.py") << "from typing import Optional\n__version__ = '2.11.0+cu130'\ndebug = False\n"; }
  EXPECT_EQ(LoadedTorchVersion(lib), "2.11.0") << "version.py first";
  EXPECT_EQ(TorchVersionMismatch("2.11.0", "2.11.0"), "");
  EXPECT_EQ(TorchVersionMismatch("2.11.0", ""), "") << "unknown: the adapter trusts its build";
  const std::string line = TorchVersionMismatch("2.11.0", "2.10.1");
  EXPECT_NE(line.find("built against PyTorch 2.11.0 and this process runs PyTorch 2.10.1"), std::string::npos) << line;
  EXPECT_NE(line.find("kjit stays off"), std::string::npos) << line;
  EXPECT_EQ(ReaderFor(90, "NVIDIA H200", "2.11.0").torch_version, "2.11.0");
  ASSERT_EQ(system(("rm -rf " + root).c_str()), 0);
}

// A record is served only where the process's first call laid its outputs out as the evaluator verified them.
TEST(ShimOutputs, TheFirstCallsLayoutsMustBeTheVerifiedOnes) {
  const std::vector<OutputLayout> first = {{true, 6, {4, 5}, {5, 1}}, {false, 0, {}, {}}};
  EXPECT_EQ(OutputsMismatch(first, {}), "") << "a record that does not say";
  EXPECT_EQ(OutputsMismatch(first, {{true, 6, {4, 5}, {5, 1}}, {false, 0, {}, {}}}), "");
  EXPECT_NE(OutputsMismatch(first, {{true, 6, {4, 5}, {1, 4}}, {false, 0, {}, {}}}), "") << "other strides";
  EXPECT_NE(OutputsMismatch(first, {{true, 5, {4, 5}, {5, 1}}, {false, 0, {}, {}}}), "") << "another dtype";
  EXPECT_NE(OutputsMismatch(first, {{true, 6, {4, 5}, {5, 1}}}), "") << "fewer outputs";
  EXPECT_NE(OutputsMismatch(first, {{true, 6, {4, 5}, {5, 1}}, {true, 6, {1}, {1}}}), "") << "defined vs not";
}

// The run a process's calls are reported under: `kjit run`'s KJIT_RUN_ID when set, else the process's own.
TEST(ShimActivity, UsesCarryTheProgramsRun) {
  setenv("KJIT_RUN_ID", "20261206-120000-77", 1);
  const ProgramRun run = CurrentProgramRun(77);
  setenv("KJIT_RUN_ID", "", 1);
  const ProgramRun own = CurrentProgramRun(78);
  unsetenv("KJIT_RUN_ID");
  EXPECT_EQ(run.id, "20261206-120000-77");
  EXPECT_NE(run.program.find("kjit_shim"), std::string::npos) << run.program;  // this test binary's command line
  EXPECT_GT(run.started_unix_ms, 0);
  EXPECT_EQ(own.id.rfind("78-", 0), 0u) << own.id;
  EntryTable table;
  FakeActivitySink sink;
  ActivityReporter reporter(table, &sink, 5, ActivityReporter::kDefaultInterval, ActivityReporter::kDefaultUsesEvery,
                            ProgramRun{"run-x", "python3 app.py", 1234});
  bool created = false;
  table.FindOrCreate(HashBytes("k"), 0, "k", &created)->CountUntimedMiss();
  auto sent = reporter.FlushUses();
  ASSERT_TRUE(sent.has_value());
  EXPECT_EQ(sent->run_id, "run-x");
  EXPECT_EQ(sent->program, "python3 app.py");
  EXPECT_EQ(sent->started_unix_ms, 1234);
}

TEST(ShimActivity, TheThreadReportsWhileCallsComeAndStopsWhenAsked) {
  EntryTable table;
  FakeActivitySink sink;
  ActivityReporter reporter(table, &sink, 1, std::chrono::milliseconds(5));
  reporter.Start();
  bool created = false;
  Entry* e = table.FindOrCreate(HashBytes("k"), 2, "k", &created);
  for (int i = 0; i < 200 && reporter.reports() < 3; ++i) {
    e->CountHit();
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  reporter.Stop();
  EXPECT_GE(reporter.reports(), 3u);
  const uint64_t after_stop = reporter.reports();
  e->CountHit();
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  EXPECT_EQ(reporter.reports(), after_stop);
  std::lock_guard lock(sink.mu);
  for (const auto& r : sink.sent) EXPECT_EQ(r.devices, (std::vector<std::string>{"GPU-2"}));
}

// Find's per-thread cache of found entries: many keys (more than its slots) found again and
// again, a table made after another is destroyed (perhaps at its address) never returning the
// old one's entries, and other threads finding the same entries.
TEST(ShimTable, FoundEntriesStayFoundAcrossTables) {
  std::vector<Hash128> hashes;
  for (int i = 0; i < 100; ++i) hashes.push_back(HashBytes("key " + std::to_string(i)));
  for (int round = 0; round < 3; ++round) {
    auto table = std::make_unique<EntryTable>();
    std::vector<Entry*> entries;
    for (const Hash128& h : hashes) {
      EXPECT_EQ(table->Find(h, 0), nullptr) << "round " << round << ": an entry of a destroyed table";
      bool created = false;
      entries.push_back(table->FindOrCreate(h, 0, "k", &created));
      EXPECT_TRUE(created);
    }
    for (int pass = 0; pass < 3; ++pass) {
      for (size_t i = 0; i < hashes.size(); ++i) {
        bool created = true;
        EXPECT_EQ(table->FindOrCreate(hashes[i], 0, "k", &created), entries[i]);
        EXPECT_FALSE(created);
        EXPECT_EQ(table->Find(hashes[i], 1), nullptr) << "another device's entry";
      }
    }
    std::thread other([&] {
      for (size_t i = 0; i < hashes.size(); ++i) EXPECT_EQ(table->Find(hashes[i], 0), entries[i]);
    });
    other.join();
  }
}

class FakeSource : public KernelSource {
 public:
  EntryTable table;
  std::map<std::string, int64_t> records;  // key hash hex -> record id served
  // (device, key hash hex) -> record id served to that device instead (another model's choice)
  std::map<std::pair<int, std::string>, int64_t> records_for_device;
  std::vector<int> looked_up_on;
  bool fail_load = false;
  int fail_on_device = -1;  // a load on this device fails
  int loads = 0;
  std::vector<int> loaded_on;
  std::vector<std::pair<int, int>> devices = {{0, 90}};
  struct Failure {
    std::string key_bytes;
    int64_t record_id;
    std::string stage, reason;
  };
  std::vector<Failure> failures;
  std::string timed_on_other_model;  // what every lookup says of the record it serves
  std::vector<std::pair<int, std::string>> retimes;  // (device, timed_on) of each RequestRetime
  Result<cache::ServedKernel> LookupRecord(const Hash128& hash, int device, int) override {
    looked_up_on.push_back(device);
    cache::ServedKernel k;
    k.timed_on_other_model = timed_on_other_model;
    if (auto own = records_for_device.find({device, hash.ToHex()}); own != records_for_device.end()) {
      k.id = own->second;
      return k;
    }
    auto it = records.find(hash.ToHex());
    if (it == records.end()) return NotFound("no record");
    k.id = it->second;
    return k;
  }
  Result<std::unique_ptr<LoadedKernel>> Load(int device, const cache::ServedKernel& served) override {
    ++loads;
    loaded_on.push_back(device);
    if (fail_load || device == fail_on_device) return Status(StatusCode::kCudaError, "cuModuleLoadData: CUDA_ERROR_INVALID_IMAGE");
    return FakeKernel(served.id);
  }
  EntryTable& Table() override { return table; }
  std::vector<std::pair<int, int>> DevicesInUse() override { return devices; }
  void LogLine(const std::string&) override {}
  void ReportFailure(const Entry& entry, int64_t record_id, std::string_view stage,
                     const std::string& reason) override {
    failures.push_back({entry.key_bytes(), record_id, std::string(stage), reason});
  }
  void RequestRetime(const Entry&, int device, const std::string& timed_on) override {
    retimes.emplace_back(device, timed_on);
  }
};

// A kernel timed on another GPU model is served (the reader's model has none) and swapped in; the
// process asks kjitd once per key and device's entry to time the key on its own model, and a later
// record timed on its model is swapped in without another request.
TEST(ShimAnnouncements, AKernelTimedOnAnotherModelAsksForARetimingOnce) {
  FakeSource source;
  source.devices = {{0, 90}, {1, 90}};
  AnnouncementListener listener(&source, "ipc:///nonexistent/kjit-test.sock");  // never started
  const Hash128 h = HashBytes("timed elsewhere");
  std::vector<Entry*> e;
  for (int device : {0, 1}) {
    bool created = false;
    e.push_back(source.table.FindOrCreate(h, device, "timed elsewhere", &created));
    ASSERT_TRUE(e.back()->ResolveNegative(OneOutput()));
  }
  source.records[h.ToHex()] = 5;
  source.timed_on_other_model = "NVIDIA H100 80GB HBM3";
  EXPECT_EQ(listener.Handle(90, h.ToHex(), 5),
            "device 0: swapped in record 5 (timed on NVIDIA H100 80GB HBM3); device 1: swapped in record 5 (timed on "
            "NVIDIA H100 80GB HBM3)");
  EXPECT_EQ(source.retimes, (std::vector<std::pair<int, std::string>>{{0, "NVIDIA H100 80GB HBM3"},
                                                                      {1, "NVIDIA H100 80GB HBM3"}}));
  source.records[h.ToHex()] = 6;  // a faster one, still another model's
  EXPECT_NE(listener.Handle(90, h.ToHex(), 6).find("swapped in record 6"), std::string::npos);
  EXPECT_EQ(source.retimes.size(), 2u) << "asked once per entry";
  source.records[h.ToHex()] = 7;  // timed on this model
  source.timed_on_other_model.clear();
  EXPECT_EQ(listener.Handle(90, h.ToHex(), 7), "device 0: swapped in record 7; device 1: swapped in record 7");
  EXPECT_EQ(source.retimes.size(), 2u);
  EXPECT_EQ(RetimeDetail("NVIDIA H200", "NVIDIA H100 80GB HBM3"),
            "retime on NVIDIA H200: served a kernel timed on NVIDIA H100 80GB HBM3");
  EXPECT_EQ(RetimeDetail("NVIDIA H200", "?"), "retime on NVIDIA H200: served a kernel timed on an unnamed GPU");
}

TEST(ShimAnnouncements, SwapsSeenNegativeKeysOnly) {
  FakeSource source;
  AnnouncementListener listener(&source, "ipc:///nonexistent/kjit-test.sock");  // never started
  const Hash128 h = HashBytes("seen");
  bool created = false;
  Entry* e = source.table.FindOrCreate(h, 0, "seen", &created);
  EXPECT_EQ(listener.Handle(90, h.ToHex(), 5), "ignored: entry unknown");
  ASSERT_TRUE(e->ResolveNegative(OneOutput()));
  EXPECT_EQ(listener.Handle(80, h.ToHex(), 5), "ignored: key not seen here") << "other arch";
  EXPECT_EQ(listener.Handle(90, HashBytes("unseen").ToHex(), 5), "ignored: key not seen here");
  EXPECT_EQ(listener.Handle(90, "zz", 5), "ignored: bad key hash");
  EXPECT_EQ(listener.Handle(90, h.ToHex(), 5).substr(0, 11), "not served:") << "announced but not servable here";
  source.records[h.ToHex()] = 5;
  EXPECT_EQ(listener.Handle(90, h.ToHex(), 5), "swapped in record 5");
  EXPECT_EQ(e->kernel()->record_id, 5);
  EXPECT_EQ(listener.Handle(90, h.ToHex(), 5), "ignored: already loaded");
  source.fail_load = true;
  source.records[h.ToHex()] = 6;
  EXPECT_TRUE(source.failures.empty());
  EXPECT_EQ(listener.Handle(90, h.ToHex(), 6).substr(0, 11), "load failed");
  EXPECT_EQ(e->state(), EntryState::kFailed);
  EXPECT_EQ(listener.swaps(), 1u);
  // Reported to kjitd once, naming the record that failed and why.
  ASSERT_EQ(source.failures.size(), 1u);
  EXPECT_EQ(source.failures[0].key_bytes, "seen");
  EXPECT_EQ(source.failures[0].record_id, 6);
  EXPECT_EQ(source.failures[0].stage, "load");
  EXPECT_NE(source.failures[0].reason.find("CUDA_ERROR_INVALID_IMAGE"), std::string::npos);
  EXPECT_EQ(listener.Handle(90, h.ToHex(), 7), "ignored: entry failed");
  EXPECT_EQ(source.failures.size(), 1u);
}

// A process on several GPUs (issue 10): a kernel verified for sm_90 is loaded into
// each sm_90 device's own context where the process has seen the key, never into
// another arch's; a load failing on one device blacklists the key there only.
TEST(ShimAnnouncements, EachDeviceOfTheArchGetsItsOwnModule) {
  FakeSource source;
  source.devices = {{0, 90}, {1, 90}, {2, 80}, {3, 90}};
  AnnouncementListener listener(&source, "ipc:///nonexistent/kjit-test.sock");  // never started
  const Hash128 h = HashBytes("seen on several");
  std::vector<Entry*> e;
  for (int device : {0, 1, 2}) {  // device 3 has not called the op yet
    bool created = false;
    e.push_back(source.table.FindOrCreate(h, device, "seen on several", &created));
    ASSERT_TRUE(e.back()->ResolveNegative(OneOutput()));
  }
  source.records[h.ToHex()] = 5;
  EXPECT_EQ(listener.Handle(90, h.ToHex(), 5), "device 0: swapped in record 5; device 1: swapped in record 5");
  EXPECT_EQ(source.loaded_on, (std::vector<int>{0, 1}));
  ASSERT_NE(e[0]->kernel(), nullptr);
  ASSERT_NE(e[1]->kernel(), nullptr);
  EXPECT_NE(e[0]->kernel(), e[1]->kernel()) << "one module per device context";
  EXPECT_EQ(e[2]->state(), EntryState::kNegative) << "sm_80 is another arch";
  EXPECT_EQ(source.table.Find(h, 3), nullptr);

  source.records[h.ToHex()] = 6;
  source.fail_on_device = 1;
  EXPECT_EQ(listener.Handle(90, h.ToHex(), 6).substr(0, 53), "device 0: swapped in record 6; device 1: load failed ");
  EXPECT_EQ(e[0]->kernel()->record_id, 6);
  EXPECT_EQ(e[1]->state(), EntryState::kFailed);
  ASSERT_EQ(source.failures.size(), 1u);
  EXPECT_EQ(source.failures[0].record_id, 6);
  EXPECT_EQ(listener.swaps(), 3u);
}

// Two GPUs of one arch but different models (an H100 and an H200 are both sm_90): the
// cache is asked for each device, so each may be served the record timed on its model.
TEST(ShimAnnouncements, EachDeviceIsServedTheRecordTheCacheChoosesForIt) {
  FakeSource source;
  source.devices = {{0, 90}, {1, 90}};
  AnnouncementListener listener(&source, "ipc:///nonexistent/kjit-test.sock");  // never started
  const Hash128 h = HashBytes("two models");
  std::vector<Entry*> e;
  for (int device : {0, 1}) {
    bool created = false;
    e.push_back(source.table.FindOrCreate(h, device, "two models", &created));
    ASSERT_TRUE(e.back()->ResolveNegative(OneOutput()));
  }
  source.records[h.ToHex()] = 5;
  source.records_for_device[{1, h.ToHex()}] = 8;
  EXPECT_EQ(listener.Handle(90, h.ToHex(), 8), "device 0: swapped in record 5; device 1: swapped in record 8");
  EXPECT_EQ(source.looked_up_on, (std::vector<int>{0, 1}));
  EXPECT_EQ(e[0]->kernel()->record_id, 5);
  EXPECT_EQ(e[1]->kernel()->record_id, 8);
  // Announcing record 5 again changes nothing on device 1: its model is served record 8.
  EXPECT_EQ(listener.Handle(90, h.ToHex(), 5),
            "device 0: ignored: already loaded; device 1: ignored: the cache still serves the loaded record");
  EXPECT_EQ(listener.swaps(), 2u);
}

TEST(ShimAnnouncements, StartsAndStopsWithoutKjitd) {
  FakeSource source;
  AnnouncementListener listener(&source, "ipc:///tmp/kjit-shim-test-no-daemon.sock");
  ASSERT_TRUE(listener.Start().ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  listener.Stop();  // within the receive timeout
}

}  // namespace
}  // namespace kjit::shim
