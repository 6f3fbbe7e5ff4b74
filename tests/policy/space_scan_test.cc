// The cumsum and cumprod design space, on CPU: what it declines, the checks that follow the
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

OpKey ScanKey(const char* op, TensorDesc x, int64_t dim, Arg dtype = NoneArg{}) {
  return OpKey::Single(op, "", {std::move(x), dim, std::move(dtype)}, 90);
}

TEST(ScanSpace, DeclinesWhatItCannotServe) {
  auto reason = [](const OpKey& key) {
    auto found = FindFamily(key);
    EXPECT_FALSE(found.ok()) << key.ToString();
    return found.ok() ? std::string() : found.status().message();
  };
  const TensorDesc x = TensorDesc::Contiguous(DType::kFloat32, {64, 128});
  TensorDesc transposed = x;
  transposed.strides = {1, 64};
  EXPECT_NE(reason(ScanKey("aten::cumsum", transposed, 1)).find("non-contiguous"), std::string::npos);
  // Integer inputs scan into int64 in PyTorch.
  EXPECT_NE(reason(ScanKey("aten::cumsum", TensorDesc::Contiguous(DType::kInt32, {4, 4}), 1)).find("not served"),
            std::string::npos);
  EXPECT_NE(reason(ScanKey("aten::cumprod", TensorDesc::Contiguous(DType::kFloat64, {4, 4}), 1)).find("not served"),
            std::string::npos);
  EXPECT_NE(reason(ScanKey("aten::cumsum", x, 1, DType::kFloat32)).find("explicit dtype"), std::string::npos);
  EXPECT_NE(reason(ScanKey("aten::cumsum", TensorDesc::Contiguous(DType::kFloat32, {0, 4}), 1)).find("empty"),
            std::string::npos);
  EXPECT_NE(reason(ScanKey("aten::cumsum", TensorDesc::Contiguous(DType::kFloat32, {}), 0)).find("0-d"),
            std::string::npos);
  EXPECT_NE(reason(ScanKey("aten::cumsum", x, 2)).find("dim out of range"), std::string::npos);
  EXPECT_NE(reason(ScanKey("aten::cumsum", x, -3)).find("dim out of range"), std::string::npos);
  // The out= overload is not the functional call.
  OpKey out = ScanKey("aten::cumsum", x, 1);
  out.calls[0].overload = "out";
  EXPECT_NE(reason(out).find("overload"), std::string::npos);
  OpKey graph = ScanKey("aten::cumsum", x, 1);
  graph.calls.push_back(graph.calls[0]);
  graph.calls[1].args[0] = ValueRef{0, 0};
  EXPECT_FALSE(FindFamily(graph).ok());
  // Served: negative dims, a 1-D tensor, each float dtype, both ops.
  EXPECT_TRUE(FindFamily(ScanKey("aten::cumsum", x, -1)).ok());
  EXPECT_TRUE(FindFamily(ScanKey("aten::cumprod", TensorDesc::Contiguous(DType::kBFloat16, {7}), 0)).ok());
  EXPECT_TRUE(FindFamily(ScanKey("aten::cumsum", TensorDesc::Contiguous(DType::kFloat16, {3, 5, 7}), -2)).ok());
}

TEST(ScanSpace, ChecksFollowTheLayout) {
  const DeviceFacts device = DeviceFacts::H200();
  auto problem_of = [](const OpKey& key) {
    auto found = FindFamily(key);
    EXPECT_TRUE(found.ok()) << found.status().ToString();
    return std::move(*found);
  };
  auto point = [](int64_t strategy, int64_t threads, int64_t vec, int64_t items, int64_t cluster, int64_t prefetch) {
    return Point{{"strategy", strategy}, {"threads", threads}, {"vec", vec},           {"items", items},
                 {"cluster", cluster},   {"prefetch", prefetch}, {"hint", 0}};
  };
  auto why = [&](const Match& m, const Point& p) { return m.family->Check(*m.problem, p, device).message(); };
  const Match rows = problem_of(ScanKey("aten::cumsum", TensorDesc::Contiguous(DType::kFloat32, {4096, 32768}), 1));
  EXPECT_TRUE(rows.family->Check(*rows.problem, point(0, 128, 4, 4, 1, 1), device).ok());
  EXPECT_TRUE(rows.family->Check(*rows.problem, point(1, 512, 4, 4, 1, 1), device).ok());
  EXPECT_TRUE(rows.family->Check(*rows.problem, point(2, 512, 4, 2, 4, 0), device).ok());
  EXPECT_NE(why(rows, point(3, 128, 4, 4, 1, 0)).find("dim not last"), std::string::npos);
  EXPECT_NE(why(rows, point(1, 512, 4, 4, 2, 0)).find("cluster"), std::string::npos);
  EXPECT_NE(why(rows, point(2, 512, 4, 4, 1, 0)).find("cluster"), std::string::npos);
  EXPECT_NE(why(rows, point(2, 512, 4, 4, 16, 0)).find("no such cluster"), std::string::npos);
  EXPECT_NE(why(rows, point(0, 128, 8, 4, 1, 0)).find("16 bytes"), std::string::npos);
  EXPECT_NE(why(rows, point(0, 128, 4, 16, 1, 1)).find("values per thread"), std::string::npos);
  EXPECT_NE(why(rows, point(1, 32, 4, 4, 1, 0)).find("warp strategy"), std::string::npos);
  // One tile covers a short row: nothing to prefetch; a large tile: fewer items do.
  const Match short_rows =
      problem_of(ScanKey("aten::cumsum", TensorDesc::Contiguous(DType::kFloat16, {65536, 100}), 1));
  EXPECT_NE(why(short_rows, point(0, 128, 4, 1, 1, 1)).find("nothing to prefetch"), std::string::npos);
  EXPECT_NE(why(short_rows, point(0, 128, 4, 4, 1, 0)).find("fewer items"), std::string::npos);
  // Odd rows take vectors (each row's tiles shifted to an aligned start); odd columns and misaligned
  // inputs refuse them.
  const Match odd = problem_of(ScanKey("aten::cumprod", TensorDesc::Contiguous(DType::kBFloat16, {1024, 4095}), 1));
  EXPECT_TRUE(odd.family->Check(*odd.problem, point(0, 128, 8, 2, 1, 1), device).ok());
  EXPECT_TRUE(odd.family->Check(*odd.problem, point(1, 256, 8, 1, 1, 1), device).ok());
  const Match odd_long = problem_of(ScanKey("aten::cumsum", TensorDesc::Contiguous(DType::kFloat32, {16, 262143}), 1));
  EXPECT_TRUE(odd_long.family->Check(*odd_long.problem, point(2, 512, 4, 2, 4, 1), device).ok());
  TensorDesc misaligned = TensorDesc::Contiguous(DType::kFloat32, {64, 4096});
  misaligned.alignment = 8;
  const Match narrow = problem_of(ScanKey("aten::cumsum", misaligned, 1));
  for (const Point& v : ValidPoints(*narrow.family, *narrow.problem, device)) EXPECT_LE(v.at("vec"), 2);
  // A middle dim: the columns strategies only; vectors along the inner extent.
  const Match middle =
      problem_of(ScanKey("aten::cumsum", TensorDesc::Contiguous(DType::kFloat32, {128, 4096, 512}), 1));
  EXPECT_NE(why(middle, point(0, 128, 4, 4, 1, 0)).find("dim last"), std::string::npos);
  EXPECT_NE(why(middle, point(3, 128, 4, 4, 1, 1)).find("prefetch"), std::string::npos);
  const Match halves =
      problem_of(ScanKey("aten::cumprod", TensorDesc::Contiguous(DType::kFloat16, {64, 512, 24}), 1));
  EXPECT_TRUE(halves.family->Check(*halves.problem, point(4, 512, 8, 4, 1, 0), device).ok());
  EXPECT_NE(why(halves, point(4, 1024, 8, 4, 1, 0)).find("shared memory"), std::string::npos);
  const Match odd_inner = problem_of(ScanKey("aten::cumprod", TensorDesc::Contiguous(DType::kFloat32, {8, 33, 7}), 1));
  for (const Point& v : ValidPoints(*odd_inner.family, *odd_inner.problem, device)) {
    EXPECT_EQ(v.at("vec"), 1) << PointToString(v);
    EXPECT_GE(v.at("strategy"), 3) << PointToString(v);
  }
}

TEST(ScanSpace, ExpertDefaultsFitTheShape) {
  const DeviceFacts device = DeviceFacts::H200();
  auto default_of = [&](const OpKey& key) {
    auto found = FindFamily(key);
    EXPECT_TRUE(found.ok()) << found.status().ToString();
    const Point p = found->family->ExpertDefault(*found->problem, device);
    EXPECT_TRUE(found->family->Check(*found->problem, p, device).ok()) << PointToString(p);
    return p;
  };
  // The headroom case (4096 rows of 32768): a warp per row, 16-byte vectors, the next tile prefetched.
  Point p = default_of(ScanKey("aten::cumsum", TensorDesc::Contiguous(DType::kFloat32, {4096, 32768}), 1));
  EXPECT_EQ(p.at("strategy"), 0) << PointToString(p);
  EXPECT_EQ(p.at("vec"), 4) << PointToString(p);
  EXPECT_EQ(p.at("prefetch"), 1) << PointToString(p);
  // Few long rows: split over a cluster.
  p = default_of(ScanKey("aten::cumprod", TensorDesc::Contiguous(DType::kFloat32, {16, 262144}), -1));
  EXPECT_EQ(p.at("strategy"), 2) << PointToString(p);
  EXPECT_EQ(p.at("cluster"), 8) << PointToString(p);
  // A middle dim with few columns: the dim split over a block's warps; with many, a thread per columns.
  p = default_of(ScanKey("aten::cumsum", TensorDesc::Contiguous(DType::kFloat32, {128, 4096, 512}), 1));
  EXPECT_EQ(p.at("strategy"), 4) << PointToString(p);
  EXPECT_EQ(p.at("vec"), 4) << PointToString(p);
  p = default_of(ScanKey("aten::cumsum", TensorDesc::Contiguous(DType::kFloat16, {64, 64, 16384}), 1));
  EXPECT_EQ(p.at("strategy"), 3) << PointToString(p);
  EXPECT_EQ(p.at("vec"), 8) << PointToString(p);
  // Every dtype, odd sizes, 1-D and a length of one have a valid default that generates.
  for (const OpKey& key : {ScanKey("aten::cumsum", TensorDesc::Contiguous(DType::kBFloat16, {1}), 0),
                           ScanKey("aten::cumprod", TensorDesc::Contiguous(DType::kFloat16, {1000003}), 0),
                           ScanKey("aten::cumsum", TensorDesc::Contiguous(DType::kFloat32, {300, 1}), 1),
                           ScanKey("aten::cumsum", TensorDesc::Contiguous(DType::kFloat32, {3, 1, 7}), 1),
                           ScanKey("aten::cumprod", TensorDesc::Contiguous(DType::kBFloat16, {5, 777, 3}), 1)}) {
    auto found = FindFamily(key);
    ASSERT_TRUE(found.ok()) << found.status().ToString();
    const Point d = found->family->ExpertDefault(*found->problem, device);
    auto c = found->family->Generate(*found->problem, d, device);
    EXPECT_TRUE(c.ok()) << key.ToString() << " " << PointToString(d) << ": " << c.status().ToString();
  }
}

// The points that existed before odd rows took vectors (columns, and rows VEC divides) keep their kernels
// byte for byte: their dataset rows stay true of what they measured. Ragged points carry row_shift.
TEST(ScanSpace, OldPointsKeepTheirSources) {
  const std::vector<SourceGolden> golden = {
      {1166u, 0xb37a1661a878ba3dull},  // cumsum f32 4096x32768
      {1328u, 0x324e2aeb1a9aea7dull},  // cumsum f32 16x262144
      {118u, 0x558a1cc9285f73e1ull},  // cumsum f16 65536x100
      {460u, 0x6b6077a274b85aafull},  // cumsum bf16 3x1000003
      {330u, 0x7e74bd4ada313355ull},  // cumsum f32 128x4096x512 dim 1
      {50u, 0xf4704ddb78d67497ull},  // cumprod f32 8x33x7 dim -2
      {300u, 0x6a65176eface294bull},  // cumprod bf16 1024x4095
      {384u, 0x50aef6b5052d817bull},  // cumprod f16 64x512x24 dim 1
  };
  // A point is ragged where a row strategy's vector does not divide the scanned length.
  auto ragged = [](const OpKey& key, const Point& p) {
    const auto& x = std::get<TensorDesc>(key.calls[0].args[0]);
    const int64_t dim = std::get<int64_t>(key.calls[0].args[1]);
    const int64_t len = x.sizes[static_cast<size_t>(dim < 0 ? dim + static_cast<int64_t>(x.sizes.size()) : dim)];
    return p.at("strategy") <= 2 && len % p.at("vec") != 0;
  };
  auto found = FindFamily(ScanKey("aten::cumsum", TensorDesc::Contiguous(DType::kFloat32, {64, 1024}), 1));
  ASSERT_TRUE(found.ok());
  ExpectOldPointsKeepTheirSources(
      *found->family, golden, [&](const OpKey& key, const Point& p) { return !ragged(key, p); },
      [&](const OpKey& key, const Point& p, const Candidate& c) {
        EXPECT_EQ(c.source.find("row_shift") != std::string::npos, ragged(key, p)) << PointToString(p);
      });
}

TEST(ScanSpace, TraitsKeepOrderDependentInputsAway) {
  (void)Families();  // declares the traits
  EXPECT_TRUE(TraitsFor("aten::cumsum").no_large_inputs.count(DType::kFloat16));
  EXPECT_FALSE(TraitsFor("aten::cumsum").no_large_inputs.count(DType::kFloat32));
  EXPECT_TRUE(TraitsFor("aten::cumsum").no_special_inputs.empty());
  EXPECT_TRUE(TraitsFor("aten::cumprod").no_large_inputs.count(DType::kBFloat16));
  EXPECT_TRUE(TraitsFor("aten::cumprod").no_special_inputs.count(DType::kFloat16));
  EXPECT_EQ(TraitsFor("aten::cumsum").tolerance_by_dtype.at(DType::kFloat32).rtol, 1e-5);
}

}  // namespace
}  // namespace kjit::policy
