#include "kjit/runtime/driver.h"

#include <gtest/gtest.h>

#include <fstream>

namespace kjit {
namespace {

TEST(Driver, MissingLibraryIsNoDriver) {
  auto d = Driver::Load("/nonexistent/libcuda.so.1");
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), StatusCode::kNoDriver);
  EXPECT_NE(d.status().message().find("/nonexistent/libcuda.so.1"), std::string::npos);
}

TEST(Driver, ToolkitStubIsNoDriver) {
  std::ifstream probe(KJIT_STUB_DRIVER);
  if (!probe) GTEST_SKIP() << "the CUDA toolkit here has no stub driver at " KJIT_STUB_DRIVER;
  auto d = Driver::Load(KJIT_STUB_DRIVER);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), StatusCode::kNoDriver) << d.status().ToString();
  EXPECT_NE(d.status().message().find("stub"), std::string::npos) << d.status().message();
}

TEST(Driver, ProcessDriverIsEitherUsableOrATypedError) {
  // On a GPU machine this loads; elsewhere it must fail with a typed reason
  // and a message a person can act on, not crash.
  auto d = Driver::Get();
  if (d.ok()) {
    EXPECT_GE((*d)->version(), 12000);
    EXPECT_GE((*d)->device_count(), 1);
    return;
  }
  const StatusCode c = d.status().code();
  EXPECT_TRUE(c == StatusCode::kNoDriver || c == StatusCode::kNoDevice || c == StatusCode::kDriverTooOld)
      << d.status().ToString();
  EXPECT_FALSE(d.status().message().empty());
  // The outcome is remembered: asking again gives the same answer.
  auto again = Driver::Get();
  EXPECT_EQ(again.status().code(), c);
}

TEST(Driver, DescribesResultsWithoutADriver) {
  EXPECT_EQ(DescribeCuResult(nullptr, CUDA_ERROR_INVALID_VALUE), "CUresult 1");
}

}  // namespace
}  // namespace kjit
