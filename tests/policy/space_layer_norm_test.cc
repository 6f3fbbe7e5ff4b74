// The layer_norm and rms_norm design space, on CPU: what it declines, the checks that follow the
// layout, the expert defaults, and the sources of older points (space_test.cc compiles every family's points).
#include <gtest/gtest.h>

#include <functional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "kjit/policy/design_space.h"
#include "space_test_util.h"

namespace kjit::policy {
namespace {

OpKey LayerNormKey(TensorDesc x, std::vector<int64_t> shape, Arg weight, Arg bias, double eps = 1e-5) {
  return OpKey::Single("aten::native_layer_norm", "", {std::move(x), IntList(shape), std::move(weight), std::move(bias), eps},
                       90);
}

TEST(LayerNormSpace, DeclinesWhatItCannotServe) {
  auto reason = [](const OpKey& key) {
    auto found = FindFamily(key);
    EXPECT_FALSE(found.ok()) << key.ToString();
    return found.ok() ? std::string() : found.status().message();
  };
  const TensorDesc x = TensorDesc::Contiguous(DType::kFloat32, {64, 128});
  const TensorDesc w = TensorDesc::Contiguous(DType::kFloat32, {128});
  TensorDesc transposed = TensorDesc::Contiguous(DType::kFloat32, {128, 64});
  transposed.sizes = {64, 128};
  transposed.strides = {1, 64};
  EXPECT_NE(reason(LayerNormKey(transposed, {128}, w, w)).find("non-contiguous"), std::string::npos);
  TensorDesc strided_w = TensorDesc::Contiguous(DType::kFloat32, {256});
  strided_w.sizes = {128};
  strided_w.strides = {2};
  EXPECT_NE(reason(LayerNormKey(x, {128}, strided_w, NoneArg{})).find("non-contiguous weight"), std::string::npos);
  EXPECT_NE(reason(LayerNormKey(x, {128}, TensorDesc::Contiguous(DType::kFloat16, {128}), NoneArg{})).find("dtype"),
            std::string::npos);
  EXPECT_NE(reason(LayerNormKey(x, {128}, NoneArg{}, TensorDesc::Contiguous(DType::kBFloat16, {128}))).find("dtype"),
            std::string::npos);
  EXPECT_NE(reason(LayerNormKey(TensorDesc::Contiguous(DType::kFloat64, {4, 4}), {4}, NoneArg{}, NoneArg{}))
                .find("not served"),
            std::string::npos);
  EXPECT_NE(reason(LayerNormKey(TensorDesc::Contiguous(DType::kFloat32, {0, 4}), {4}, NoneArg{}, NoneArg{}))
                .find("empty"),
            std::string::npos);
  EXPECT_NE(reason(LayerNormKey(x, {64}, NoneArg{}, NoneArg{})).find("trailing"), std::string::npos);
  EXPECT_NE(reason(LayerNormKey(x, {128}, TensorDesc::Contiguous(DType::kFloat32, {64}), NoneArg{})).find("shape"),
            std::string::npos);
  // rms_norm with eps None stays with PyTorch (its default epsilon is not pinned yet).
  EXPECT_NE(reason(OpKey::Single("aten::_fused_rms_norm", "", {x, IntList{128}, w, NoneArg{}}, 90)).find("eps None"),
            std::string::npos);
  // A fusion graph is not a single call.
  OpKey graph = LayerNormKey(x, {128}, w, w);
  graph.calls.push_back(graph.calls[0]);
  graph.calls[1].args[0] = ValueRef{0, 0};
  EXPECT_FALSE(FindFamily(graph).ok());
}

TEST(LayerNormSpace, SpecialisesOnWeightAndBiasAndTheAbi) {
  const DeviceFacts device = DeviceFacts::H200();
  const TensorDesc x = TensorDesc::Contiguous(DType::kFloat16, {32, 7, 96});
  const TensorDesc w = TensorDesc::Contiguous(DType::kFloat16, {96});
  for (int mask = 0; mask < 4; ++mask) {
    const Arg weight = (mask & 1) ? Arg(w) : Arg(NoneArg{});
    const Arg bias = (mask & 2) ? Arg(w) : Arg(NoneArg{});
    auto found = FindFamily(LayerNormKey(x, {96}, weight, bias));
    ASSERT_TRUE(found.ok()) << found.status().ToString();
    EXPECT_EQ(found->family->name(), "layer_norm");
    auto c = found->family->Generate(*found->problem, found->family->ExpertDefault(*found->problem, device), device);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    EXPECT_NE(c->source.find(std::string("HAS_W = ") + ((mask & 1) ? "true" : "false")), std::string::npos);
    EXPECT_NE(c->source.find(std::string("HAS_B = ") + ((mask & 2) ? "true" : "false")), std::string::npos);
    // (x, weight, bias, y, mean, rstd): the pointers are passed whether or not the weight and bias are.
    EXPECT_NE(c->source.find("const in_t* __restrict__ b, in_t* __restrict__ y, float* __restrict__ mean_out"),
              std::string::npos);
  }
  auto rms = FindFamily(OpKey::Single("aten::_fused_rms_norm", "", {x, IntList{96}, NoneArg{}, 1e-6}, 90));
  ASSERT_TRUE(rms.ok()) << rms.status().ToString();
  auto c = rms->family->Generate(*rms->problem, rms->family->ExpertDefault(*rms->problem, device), device);
  ASSERT_TRUE(c.ok());
  // (x, weight, y, rstd).
  EXPECT_NE(c->source.find("const in_t* __restrict__ w, in_t* __restrict__ y, float* __restrict__ rstd_out"),
            std::string::npos);
}

TEST(LayerNormSpace, MisalignedWeightNarrowsTheVector) {
  const DeviceFacts device = DeviceFacts::H200();
  TensorDesc w = TensorDesc::Contiguous(DType::kFloat32, {1024});
  w.alignment = 4;
  auto found = FindFamily(LayerNormKey(TensorDesc::Contiguous(DType::kFloat32, {256, 1024}), {1024}, w, NoneArg{}));
  ASSERT_TRUE(found.ok());
  const Point p = found->family->ExpertDefault(*found->problem, device);
  EXPECT_EQ(p.at("vec"), 1) << PointToString(p);
  for (const Point& v : ValidPoints(*found->family, *found->problem, device)) EXPECT_EQ(v.at("vec"), 1);
}

}  // namespace
}  // namespace kjit::policy
