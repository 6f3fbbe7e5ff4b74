// GCC 13 reports -Wmaybe-uninitialized inside std::variant's copy when an
// OpKey's argument is reassigned below (a known false positive of its variant
// analysis; GCC 12 and clang are silent). Every TensorDesc field has an initialiser.
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 13
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#include "kjit/runtime/op_key.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "sample_keys.h"


namespace kjit {
namespace {

using testing::KitchenSinkKey;
using testing::SoftmaxKey;

TEST(OpKey, RoundTripsThroughEncoding) {
  for (const OpKey& key : {SoftmaxKey(), KitchenSinkKey()}) {
    const std::string bytes = key.Encode();
    auto decoded = OpKey::Decode(bytes);
    ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
    EXPECT_EQ(*decoded, key);
    EXPECT_EQ(decoded->Encode(), bytes);
    EXPECT_EQ(decoded->Hash(), key.Hash());
    EXPECT_EQ(decoded->ToString(), key.ToString());
  }
}

TEST(OpKey, KeyWriterMatchesEncode) {
  std::string bytes;
  KeyWriter w(&bytes);
  const auto t = TensorDesc::Contiguous(DType::kFloat32, {64, 1048576});
  w.BeginKey(90, kNumericsDefault, 1);
  w.BeginCall("aten::_softmax", "", 3);
  w.Tensor(t.dtype, t.sizes, t.strides, t.storage_offset, t.alignment);
  w.Int(-1);
  w.Bool(false);
  ASSERT_TRUE(w.Finish().ok());
  EXPECT_EQ(bytes, SoftmaxKey().Encode());

  // FinishView: the same bytes, viewed in the writer's buffer, none moved to the string.
  std::string unused = "untouched";
  KeyWriter v(&unused);
  v.BeginKey(90, kNumericsDefault, 1);
  v.BeginCall("aten::_softmax", "", 3);
  v.Tensor(t.dtype, t.sizes, t.strides, t.storage_offset, t.alignment);
  v.Int(-1);
  v.Bool(false);
  std::string_view view;
  ASSERT_TRUE(v.FinishView(&view).ok());
  EXPECT_EQ(view, bytes);
  EXPECT_TRUE(unused.empty());
}

// The shim writes an op's call header from bytes made once (CallKeyPlan): they must be
// BeginCall's, and the writer must count the call and its arguments as BeginCall does.
TEST(OpKey, EncodedCallMatchesBeginCall) {
  std::string bytes;
  KeyWriter w(&bytes);
  const auto t = TensorDesc::Contiguous(DType::kFloat32, {64, 1048576});
  w.BeginKey(90, kNumericsDefault, 1);
  w.BeginEncodedCall(KeyWriter::EncodeCall("aten::_softmax", "", 3), 3);
  w.Tensor(t.dtype, t.sizes, t.strides, t.storage_offset, t.alignment);
  w.Int(-1);
  EXPECT_FALSE(w.Finish().ok());  // one argument missing
  w.Bool(false);
  ASSERT_TRUE(w.Finish().ok());
  EXPECT_EQ(bytes, SoftmaxKey().Encode());
  // A second call where the key declares one.
  w.BeginEncodedCall(KeyWriter::EncodeCall("aten::relu", "", 0), 0);
  EXPECT_FALSE(w.Finish().ok());
}

// KeyWriter collects bytes in an inline buffer: a key longer than it (a long string, long lists,
// many tensor dims) must come out exactly as a byte-at-a-time encoder writes it, whichever field
// crosses the buffer's end.
TEST(OpKey, KeyWriterLongKeysCrossItsBuffer) {
  std::string expected;
  auto byte = [&](uint8_t b) { expected.push_back(static_cast<char>(b)); };
  auto varint = [&](uint64_t v) {
    for (; v >= 0x80; v >>= 7) byte(static_cast<uint8_t>(v | 0x80));
    byte(static_cast<uint8_t>(v));
  };
  auto zigzag = [](int64_t v) { return (static_cast<uint64_t>(v) << 1) ^ static_cast<uint64_t>(v >> 63); };
  auto str = [&](std::string_view v) {
    varint(v.size());
    expected.append(v);
  };
  for (size_t prefix : {0, 1, 7, 100, 250, 255, 256, 300}) {
    SCOPED_TRACE(prefix);
    const std::string op = "aten::" + std::string(prefix, 'o');
    const std::string long_string(1000, 'x');
    std::vector<int64_t> ints;
    for (int i = 0; i < 300; ++i) ints.push_back(i % 3 == 0 ? -(int64_t{1} << (i % 60)) : int64_t{1} << (i % 62));
    const std::vector<int64_t> sizes(40, 1'000'000'007), strides(40, -3);
    const std::vector<int64_t> small_sizes{3, 500, 7}, small_strides{-3500, 7, int64_t{1} << 40};
    expected.clear();
    expected.append("KJK");
    byte(1);
    byte(90);
    byte(0);
    for (int i = 0; i < 4; ++i) byte(0);
    varint(1);
    str(op);
    str("");
    varint(5);
    byte(static_cast<uint8_t>(ArgTag::kString));
    str(long_string);
    byte(static_cast<uint8_t>(ArgTag::kIntList));
    varint(ints.size());
    for (int64_t v : ints) varint(zigzag(v));
    byte(static_cast<uint8_t>(ArgTag::kTensor));
    byte(static_cast<uint8_t>(DType::kFloat32));
    varint(sizes.size());
    for (int64_t v : sizes) varint(static_cast<uint64_t>(v));
    for (int64_t v : strides) varint(zigzag(v));
    varint(12345678901);
    byte(16);
    // A tensor of small rank, written under one room check wherever the buffer's end falls.
    byte(static_cast<uint8_t>(ArgTag::kTensor));
    byte(static_cast<uint8_t>(DType::kFloat16));
    varint(3);
    for (int64_t v : small_sizes) varint(static_cast<uint64_t>(v));
    for (int64_t v : small_strides) varint(zigzag(v));
    varint(prefix);
    byte(2);
    byte(static_cast<uint8_t>(ArgTag::kInt));
    varint(zigzag(INT64_MIN));

    auto write = [&](KeyWriter& w) {
      w.BeginKey(90, kNumericsDefault, 1);
      w.BeginCall(op, "", 5);
      w.String(long_string);
      w.IntList(ints);
      w.Tensor(DType::kFloat32, sizes, strides, 12345678901, 16);
      w.Tensor(DType::kFloat16, small_sizes, small_strides, static_cast<int64_t>(prefix), 2);
      w.Int(INT64_MIN);
    };
    std::string bytes = "left over";
    {
      KeyWriter w(&bytes);
      write(w);
      ASSERT_TRUE(w.Finish().ok());
    }
    EXPECT_EQ(bytes, expected);
    // FinishView of a key that outgrew the buffer: the whole key, in the string.
    std::string scratch = "left over";
    KeyWriter v(&scratch);
    write(v);
    std::string_view view;
    ASSERT_TRUE(v.FinishView(&view).ok());
    EXPECT_EQ(view, expected);
  }
}

TEST(OpKey, KeyWriterCatchesMiscounts) {
  std::string bytes;
  KeyWriter w(&bytes);
  w.BeginKey(90, 0, 1);
  w.BeginCall("aten::relu", "", 2);
  w.Int(1);
  EXPECT_FALSE(w.Finish().ok());  // one argument missing
  w.Int(2);
  EXPECT_TRUE(w.Finish().ok());
  w.Int(3);
  EXPECT_FALSE(w.Finish().ok());  // one too many
}

// The hash of a key is part of the on-disk format: it must never change for
// the same key. These values were computed once by this code and are the
// contract from now on; if this test fails, the encoding or hash changed and
// every existing cache is invalid.
TEST(OpKey, HashIsStableAcrossBuilds) {
  EXPECT_EQ(SoftmaxKey().Hash().ToHex(), "c97c4393cb47064a169d4bec25de480d");
  EXPECT_EQ(KitchenSinkKey().Hash().ToHex(), "b30731a7055da8884169c16f83ba2f9d");
}

TEST(OpKey, HashIsStableAcrossProcesses) {
  FILE* p = popen(KJIT_KEY_TOOL, "r");
  ASSERT_NE(p, nullptr);
  char line1[64] = {0}, line2[64] = {0};
  ASSERT_EQ(std::fscanf(p, "%63s %63s", line1, line2), 2);
  ASSERT_EQ(pclose(p), 0);
  EXPECT_EQ(std::string(line1), SoftmaxKey().Hash().ToHex());
  EXPECT_EQ(std::string(line2), KitchenSinkKey().Hash().ToHex());
}

TEST(OpKey, EveryFieldChangesTheHash) {
  const OpKey base = SoftmaxKey();
  std::vector<OpKey> variants;
  auto vary = [&](auto&& edit) {
    OpKey k = base;
    edit(k);
    variants.push_back(k);
  };
  auto t = [](OpKey& k) -> TensorDesc& { return std::get<TensorDesc>(k.calls[0].args[0]); };
  vary([](OpKey& k) { k.calls[0].op = "aten::_log_softmax"; });
  vary([](OpKey& k) { k.calls[0].overload = "out"; });
  vary([](OpKey& k) { k.arch = 100; });
  vary([](OpKey& k) { k.numerics = kAllowTF32Matmul; });
  vary([&](OpKey& k) { t(k).dtype = DType::kBFloat16; });
  vary([&](OpKey& k) { t(k).sizes[1] = 1048575; });
  vary([&](OpKey& k) { t(k).strides = {1, 64}; });
  vary([&](OpKey& k) { t(k).storage_offset = 1; });
  vary([&](OpKey& k) { t(k).alignment = 8; });
  vary([](OpKey& k) { k.calls[0].args[1] = int64_t{1}; });
  vary([](OpKey& k) { k.calls[0].args[1] = -1.0; });  // same value, other type
  vary([](OpKey& k) { k.calls[0].args[2] = true; });
  vary([](OpKey& k) { k.calls[0].args.pop_back(); });
  vary([](OpKey& k) { k.calls[0].args.push_back(NoneArg{}); });
  std::vector<Hash128> hashes{base.Hash()};
  for (const auto& v : variants) hashes.push_back(v.Hash());
  for (size_t i = 0; i < hashes.size(); ++i) {
    for (size_t j = i + 1; j < hashes.size(); ++j) EXPECT_NE(hashes[i], hashes[j]) << i << " vs " << j;
  }
}

TEST(OpKey, DoublesAreKeyedByExactValue) {
  auto key = [](double v) { return OpKey::Single("aten::mul", "Scalar", {v}, 90); };
  EXPECT_NE(key(0.0).Hash(), key(-0.0).Hash());
  EXPECT_NE(key(0.1).Hash(), key(std::nextafter(0.1, 1.0)).Hash());
  // Every NaN is the same key: ops treat all NaN payloads alike.
  EXPECT_EQ(key(std::nan("1")).Hash(), key(-std::numeric_limits<double>::quiet_NaN()).Hash());
  EXPECT_EQ(key(std::nan("1")), key(std::nan("2")));
  // The text form is the shortest decimal that reads back as the same double.
  EXPECT_EQ(key(0.1).ToString(), "aten::mul.Scalar(0.1) sm_90");
  EXPECT_EQ(key(1e-5).ToString(), "aten::mul.Scalar(1e-05) sm_90");
  EXPECT_EQ(key(std::nextafter(0.1, 1.0)).ToString(), "aten::mul.Scalar(0.10000000000000002) sm_90");
  EXPECT_EQ(key(3.0).ToString(), "aten::mul.Scalar(3.0) sm_90");
}

TEST(OpKey, TextForm) {
  EXPECT_EQ(SoftmaxKey().ToString(), "aten::_softmax(f32[64,1048576], -1, False) sm_90");
  EXPECT_EQ(KitchenSinkKey().ToString(),
            "%0 = aten::pow.Tensor_Scalar(bf16[8,3,5]{1,40,8}+3@a2, 2.0); "
            "%1 = aten::mean.dim(%0.0, [-1, 1, -9223372036854775808], True, None, dtype=f32); "
            "%2 = aten::custom('tanh', -0.0, inf, [1.5, -0.0, nan], [f16[0,7], i64[]], %1.0, 9223372036854775807)"
            " sm_90 tf32 deterministic");
}

TEST(OpKey, OpNameIsTheOpOrTheChainsOps) {
  EXPECT_EQ(SoftmaxKey().OpName(), "aten::_softmax");
  EXPECT_EQ(KitchenSinkKey().OpName(), "chain(pow,mean,custom)");
  OpKey live = KitchenSinkKey();
  live.calls.push_back(OpCall{"kjit::live", "", {IntList{1, 2}}});
  EXPECT_EQ(live.OpName(), "chain(pow,mean,custom)");
}

TEST(OpKey, ChainLiveOfChecksThePseudoCalls) {
  const TensorDesc x = TensorDesc::Contiguous(DType::kFloat32, {8});
  const OpCall tanh{"aten::tanh", "", {ValueRef{0, 0}}}, neg{"aten::neg", "", {ValueRef{1, 0}}};
  const OpCall input{std::string(kChainInputOp), "", {x}};
  auto live = [](std::vector<int64_t> calls) { return OpCall{std::string(kChainLiveOp), "", {IntList(calls)}}; };
  // Without kjit::live, the last call is the result; a single call is {1, {0}}.
  auto single = ChainLiveOf(OpKey::Single("aten::neg", "", {x}, 90));
  ASSERT_TRUE(single.ok());
  EXPECT_EQ(single->calls, 1u);
  EXPECT_EQ(single->live, std::vector<uint32_t>{0});
  auto chain = ChainLiveOf(OpKey::Chain({input, tanh, neg, live({1, 2})}, 90));
  ASSERT_TRUE(chain.ok()) << chain.status().ToString();
  EXPECT_EQ(chain->calls, 3u);
  EXPECT_EQ(chain->live, (std::vector<uint32_t>{1, 2}));
  auto reason = [](const OpKey& key) {
    auto r = ChainLiveOf(key);
    return r.ok() ? std::string("accepted") : r.status().message();
  };
  EXPECT_NE(reason(OpKey::Chain({}, 90)).find("no call"), std::string::npos);
  EXPECT_NE(reason(OpKey::Chain({live({0})}, 90)).find("no call"), std::string::npos);
  EXPECT_NE(reason(OpKey::Chain({input, live({0}), tanh}, 90)).find("only end"), std::string::npos);
  EXPECT_NE(reason(OpKey::Chain({input, tanh, neg, live({2, 1})}, 90)).find("increasing"), std::string::npos);
  EXPECT_NE(reason(OpKey::Chain({input, tanh, live({2})}, 90)).find("below 2"), std::string::npos);
  EXPECT_NE(reason(OpKey::Chain({input, tanh, OpCall{std::string(kChainLiveOp), "", {IntList{}}}}, 90)).find("non-empty"),
            std::string::npos);
  EXPECT_NE(reason(OpKey::Chain({input, tanh, live({0, 1})}, 90)).find("no result"), std::string::npos);
  EXPECT_NE(reason(OpKey::Chain({input}, 90)).find("no result"), std::string::npos);
  EXPECT_NE(reason(OpKey::Chain({OpCall{std::string(kChainInputOp), "", {1.0}}, tanh}, 90)).find("one tensor"),
            std::string::npos);
}

TEST(OpKey, TextShowsStridesOfSizeOneDimsThatDifferFromRowMajor) {
  // A channels_last depthwise weight [C,1,3,3] is contiguous to torch (size-1 dims' strides do not count)
  // but hashes differently from the row-major one: two keys must never share a text.
  TensorDesc row_major = TensorDesc::Contiguous(DType::kFloat16, {40, 1, 3, 3});
  TensorDesc channels_last = row_major;
  channels_last.strides = {9, 1, 3, 1};
  ASSERT_TRUE(channels_last.is_contiguous());
  auto key = [](TensorDesc w) { return OpKey::Single("aten::neg", "", {std::move(w)}, 90); };
  EXPECT_EQ(key(row_major).ToString(), "aten::neg(f16[40,1,3,3]) sm_90");
  EXPECT_EQ(key(channels_last).ToString(), "aten::neg(f16[40,1,3,3]{9,1,3,1}) sm_90");
}

TEST(OpKey, DecodeRejectsEveryTruncation) {
  const std::string bytes = KitchenSinkKey().Encode();
  for (size_t n = 0; n < bytes.size(); ++n) {
    auto r = OpKey::Decode(std::string_view(bytes).substr(0, n));
    EXPECT_FALSE(r.ok()) << "prefix of " << n << " bytes decoded";
    if (!r.ok()) {
      EXPECT_EQ(r.status().code(), StatusCode::kCorruption);
    }
  }
}

TEST(OpKey, DecodeRejectsNonCanonicalBytes) {
  const std::string good = SoftmaxKey().Encode();
  EXPECT_FALSE(OpKey::Decode(good + '\0').ok());  // trailing byte
  std::string bad_magic = good;
  bad_magic[0] = 'X';
  EXPECT_FALSE(OpKey::Decode(bad_magic).ok());
  std::string bad_version = good;
  bad_version[3] = 2;
  auto v = OpKey::Decode(bad_version);
  ASSERT_FALSE(v.ok());
  EXPECT_NE(v.status().message().find("version 2"), std::string::npos);
  // A redundant varint byte: call count 1 written as 0x81 0x00.
  std::string padded = good.substr(0, 10) + "\x81" + std::string(1, '\0') + good.substr(11);
  EXPECT_FALSE(OpKey::Decode(padded).ok());
}

TEST(OpKey, DecodeSurvivesRandomCorruption) {
  // Flipping bytes must give either an error or a key that re-encodes to exactly
  // the corrupted bytes; never a crash, never two encodings for one key.
  const std::string good = KitchenSinkKey().Encode();
  std::mt19937 rng(12345);
  for (int i = 0; i < 20000; ++i) {
    std::string bytes = good;
    const int flips = 1 + static_cast<int>(rng() % 3);
    for (int f = 0; f < flips; ++f) bytes[rng() % bytes.size()] = static_cast<char>(rng() & 0xff);
    auto r = OpKey::Decode(bytes);
    if (r.ok()) {
      EXPECT_EQ(r->Encode(), bytes);
    }
  }
}

TEST(OpKey, DecodeBoundsHostileCounts) {
  // A header claiming 2^40 calls must fail fast, not allocate.
  std::string bytes = "KJK\x01";
  bytes += std::string("\x5a\x00\x00\x00\x00\x00", 6);
  bytes += "\x80\x80\x80\x80\x80\x20";
  auto r = OpKey::Decode(bytes);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("too large"), std::string::npos) << r.status().message();
}

TEST(TensorDesc, ContiguityAndAlignment) {
  auto t = TensorDesc::Contiguous(DType::kFloat32, {4, 1, 5});
  EXPECT_EQ(t.strides, (std::vector<int64_t>{5, 5, 1}));
  EXPECT_TRUE(t.is_contiguous());
  t.strides[1] = 999;  // size-1 dims do not matter
  EXPECT_TRUE(t.is_contiguous());
  t.strides = {1, 4, 4};
  EXPECT_FALSE(t.is_contiguous());
  EXPECT_EQ(t.numel(), 20);
  EXPECT_EQ(TensorDesc::AlignmentOf(0x1000), 16);
  EXPECT_EQ(TensorDesc::AlignmentOf(0x1008), 8);
  EXPECT_EQ(TensorDesc::AlignmentOf(0x1002), 2);
  EXPECT_EQ(TensorDesc::AlignmentOf(0x1001), 1);
}

TEST(DType, NamesRoundTrip) {
  for (uint8_t c = 1; c <= kMaxDTypeCode; ++c) {
    const auto t = static_cast<DType>(c);
    EXPECT_GT(DTypeSize(t), 0u);
    auto back = ParseDType(DTypeName(t));
    ASSERT_TRUE(back.ok()) << DTypeName(t);
    EXPECT_EQ(*back, t);
  }
  EXPECT_FALSE(ParseDType("float").ok());
}

}  // namespace
}  // namespace kjit
