#include "kjit/runtime/hash.h"

#include <gtest/gtest.h>

namespace kjit {
namespace {

TEST(Hash128, HexRoundTrip) {
  const Hash128 h = HashBytes("kjit");
  const std::string hex = h.ToHex();
  ASSERT_EQ(hex.size(), 32u);
  auto back = Hash128::FromHex(hex);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, h);
  EXPECT_FALSE(Hash128::FromHex("abc").ok());
  EXPECT_FALSE(Hash128::FromHex(std::string(31, '0') + "g").ok());
}

TEST(Hex, EncodesAndDecodesBytes) {
  EXPECT_EQ(HexEncode(std::string("kj\x00\xff", 4)), "6b6a00ff");
  EXPECT_EQ(*HexDecode("6B6a00ff"), std::string("kj\x00\xff", 4));
  EXPECT_FALSE(HexDecode("abc").ok());
  EXPECT_FALSE(HexDecode("zz").ok());
  EXPECT_EQ(*HexDecode(""), "");
}

TEST(Hash128, KnownValueOfXxh3) {
  // XXH3-128 of the empty input, from the xxHash specification's test vectors.
  EXPECT_EQ(HashBytes("").ToHex(), "99aa06d3014798d86001c324468d497f");
}

TEST(Hasher, StreamingIsLengthPrefixed) {
  Hasher a, b;
  a.Add("ab").Add("c");
  b.Add("a").Add("bc");
  EXPECT_NE(a.Finish(), b.Finish());
  Hasher c;
  c.Add("ab").Add("c");
  EXPECT_EQ(a.Finish(), c.Finish());
}

}  // namespace
}  // namespace kjit
