// The softmax_backward design space, on CPU: what it declines, its checks and its expert defaults
// (space_test.cc compiles every family's points and pins their sources).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kjit/policy/design_space.h"
#include "space_test_util.h"

namespace kjit::policy {
namespace {

OpKey Backward(const char* op, DType grad, DType input, std::vector<int64_t> sizes, int64_t dim) {
  return OpKey::Single(op, "", {TensorDesc::Contiguous(grad, sizes), TensorDesc::Contiguous(grad, sizes), dim, input},
                       90);
}

TEST(SoftmaxBackwardSpace, DeclinesWhatItCannotServe) {
  auto reason = [](const OpKey& key) { return FindFamily(key).status().message(); };
  constexpr DType f32 = DType::kFloat32, f16 = DType::kFloat16, bf16 = DType::kBFloat16;
  EXPECT_NE(reason(Backward("aten::_softmax_backward_data", DType::kFloat64, DType::kFloat64, {4, 4}, -1))
                .find("not served"),
            std::string::npos);
  // Only a float32 gradient for a float16 input may differ in dtype (half_to_float's backward).
  EXPECT_NE(reason(Backward("aten::_softmax_backward_data", f16, f32, {4, 4}, -1)).find("input_dtype"),
            std::string::npos);
  EXPECT_NE(reason(Backward("aten::_softmax_backward_data", f32, bf16, {4, 4}, -1)).find("input_dtype"),
            std::string::npos);
  EXPECT_TRUE(FindFamily(Backward("aten::_softmax_backward_data", f32, f16, {4, 4}, -1)).ok());
  EXPECT_EQ(FindFamily(Backward("aten::_log_softmax_backward_data", f32, f32, {0, 4}, -1)).status().code(),
            StatusCode::kNotFound);
  TensorDesc transposed = TensorDesc::Contiguous(f32, {64, 128});
  transposed.strides = {1, 64};
  const OpKey strided = OpKey::Single("aten::_softmax_backward_data", "",
                                      {transposed, TensorDesc::Contiguous(f32, {64, 128}), int64_t{-1}, f32}, 90);
  EXPECT_NE(reason(strided).find("non-contiguous"), std::string::npos) << reason(strided);
  const OpKey mixed = OpKey::Single("aten::_softmax_backward_data", "",
                                    {TensorDesc::Contiguous(f32, {64, 128}), TensorDesc::Contiguous(f16, {64, 128}),
                                     int64_t{-1}, f32},
                                    90);
  EXPECT_NE(reason(mixed).find("differ"), std::string::npos) << reason(mixed);
  EXPECT_NE(reason(Backward("aten::_softmax_backward_data", f32, f32, {4, 4}, 2)).find("dim"), std::string::npos);
}

// The expert default on the H200 for a key.
Point DefaultOf(const OpKey& key) {
  auto found = FindFamily(key);
  EXPECT_TRUE(found.ok()) << found.status().ToString();
  if (!found.ok()) return {};
  EXPECT_EQ(found->family->name(), "softmax_backward");
  const Point p = found->family->ExpertDefault(*found->problem, DeviceFacts::H200());
  EXPECT_TRUE(found->family->Check(*found->problem, p, DeviceFacts::H200()).ok()) << PointToString(p);
  return p;
}

TEST(SoftmaxBackwardSpace, ExpertDefaultsFollowTheRowLength) {
  constexpr DType f32 = DType::kFloat32, f16 = DType::kFloat16;
  // Attention rows of 128 halves: a warp a row, 16-byte vectors.
  Point p = DefaultOf(Backward("aten::_softmax_backward_data", f16, f16, {16, 12, 128, 128}, -1));
  EXPECT_EQ(p.at("strategy"), 0) << PointToString(p);
  EXPECT_EQ(p.at("vec"), 8) << PointToString(p);
  // Long rows: a block a row, read twice.
  p = DefaultOf(Backward("aten::_softmax_backward_data", f32, f32, {2048, 16384}, -1));
  EXPECT_EQ(p.at("strategy"), 1) << PointToString(p);
  EXPECT_EQ(p.at("vec"), 4) << PointToString(p);
  // A prime length: scalar vectors.
  p = DefaultOf(Backward("aten::_log_softmax_backward_data", f32, f32, {48, 100003}, -1));
  EXPECT_EQ(p.at("strategy"), 1) << PointToString(p);
  EXPECT_EQ(p.at("vec"), 1) << PointToString(p);
  // dim not last: columns.
  p = DefaultOf(Backward("aten::_softmax_backward_data", f32, f32, {32, 1000, 64}, 1));
  EXPECT_EQ(p.at("strategy"), 2) << PointToString(p);
  EXPECT_EQ(p.at("vec"), 4) << PointToString(p);
  // A short odd row: a block of 64 where a warp cannot hold it.
  p = DefaultOf(Backward("aten::_softmax_backward_data", f32, f32, {100, 1023}, -1));
  EXPECT_EQ(p.at("strategy"), 1) << PointToString(p);
}

TEST(SoftmaxBackwardSpace, ChecksFollowTheLayout) {
  auto found = FindFamily(Backward("aten::_softmax_backward_data", DType::kFloat32, DType::kFloat32, {64, 1000}, -1));
  ASSERT_TRUE(found.ok());
  const Family& f = *found->family;
  const DeviceFacts dev = DeviceFacts::H200();
  auto check = [&](int64_t strategy, int64_t threads, int64_t vec, int64_t hint) {
    return f.Check(*found->problem, {{"strategy", strategy}, {"threads", threads}, {"vec", vec}, {"hint", hint}}, dev);
  };
  EXPECT_TRUE(check(0, 128, 4, 0).ok());   // 250 vectors: 8 a lane, 32 floats of each tensor
  EXPECT_FALSE(check(0, 128, 8, 0).ok());  // 32-byte vectors
  EXPECT_FALSE(check(0, 128, 4, 1).ok());  // one read: no hint
  EXPECT_FALSE(check(2, 128, 4, 0).ok());  // columns need dim not last
  EXPECT_TRUE(check(1, 64, 4, 1).ok());
  EXPECT_FALSE(check(1, 256, 4, 0).ok());  // 1024 elements a pass, 1000 in the row
  EXPECT_FALSE(check(1, 32, 4, 0).ok());   // a block of one warp is the warp strategy
  auto longer = FindFamily(Backward("aten::_softmax_backward_data", DType::kFloat32, DType::kFloat32, {64, 2000}, -1));
  ASSERT_TRUE(longer.ok());
  EXPECT_FALSE(f.Check(*longer->problem, {{"strategy", 0}, {"threads", 128}, {"vec", 4}, {"hint", 0}}, dev).ok());
  // A row of 1002 elements: vectors of 2, not of 4.
  auto odd = FindFamily(Backward("aten::_softmax_backward_data", DType::kFloat32, DType::kFloat32, {64, 1002}, -1));
  ASSERT_TRUE(odd.ok());
  EXPECT_FALSE(f.Check(*odd->problem, {{"strategy", 1}, {"threads", 64}, {"vec", 4}, {"hint", 0}}, dev).ok());
  EXPECT_TRUE(f.Check(*odd->problem, {{"strategy", 1}, {"threads", 64}, {"vec", 2}, {"hint", 0}}, dev).ok());
}

TEST(SoftmaxBackwardSpace, SourcesCarryTheFormulaOfTheirOp) {
  for (const char* op : {"aten::_softmax_backward_data", "aten::_log_softmax_backward_data"}) {
    auto found = FindFamily(Backward(op, DType::kBFloat16, DType::kBFloat16, {256, 4096}, -1));
    ASSERT_TRUE(found.ok());
    const DeviceFacts dev = DeviceFacts::H200();
    auto c = found->family->Generate(*found->problem, found->family->ExpertDefault(*found->problem, dev), dev);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    const bool log = std::string(op).find("log") != std::string::npos;
    EXPECT_NE(c->source.find(log ? "#define LOG 1" : "#define LOG 0"), std::string::npos);
    EXPECT_NE(c->source.find("typedef __nv_bfloat16 in_t"), std::string::npos);
    EXPECT_EQ(c->entry_point, "kjit_softmax_backward");
  }
}

}  // namespace
}  // namespace kjit::policy
