#include "kjit/runtime/status.h"

#include <gtest/gtest.h>

namespace kjit {
namespace {

Result<int> Half(int v) {
  if (v % 2 != 0) return InvalidArgument(std::to_string(v) + " is odd");
  return v / 2;
}

Result<int> Quarter(int v) {
  KJIT_ASSIGN_OR_RETURN(int h, Half(v));
  return Half(h);
}

TEST(Status, OkAndErrorText) {
  EXPECT_TRUE(Status::Ok().ok());
  EXPECT_EQ(Status::Ok().ToString(), "ok");
  Status s(StatusCode::kNoDriver, "libcuda.so.1 missing");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.ToString(), "no_driver: libcuda.so.1 missing");
  EXPECT_EQ(s.WithContext("loading").message(), "loading: libcuda.so.1 missing");
  EXPECT_EQ(s.WithContext("loading").code(), StatusCode::kNoDriver);
}

TEST(Status, EveryCodeHasAName) {
  for (int c = 0; c <= static_cast<int>(kLastStatusCode); ++c) {
    EXPECT_NE(StatusCodeName(static_cast<StatusCode>(c)), "unknown") << c;
  }
}

TEST(Result, PropagatesThroughMacros) {
  EXPECT_EQ(*Quarter(8), 2);
  auto bad = Quarter(6);  // 6 -> 3 -> odd
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.status().message(), "3 is odd");
}

}  // namespace
}  // namespace kjit
