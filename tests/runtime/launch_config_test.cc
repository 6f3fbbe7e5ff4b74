#include <gtest/gtest.h>

#include "kjit/runtime/gpu.h"

namespace kjit {
namespace {

// H100/H200-like limits, for a kernel using 64 registers per thread.
LaunchLimits HopperLimits() {
  LaunchLimits l;
  l.max_threads_per_block = 1024;
  l.max_block_dim[0] = 1024;
  l.max_block_dim[1] = 1024;
  l.max_block_dim[2] = 64;
  l.max_grid_dim[0] = 2147483647;
  l.max_grid_dim[1] = 65535;
  l.max_grid_dim[2] = 65535;
  l.static_shared_bytes = 1024;
  l.max_shared_bytes_optin = 232448;
  l.default_dynamic_shared_limit = 48 * 1024 - 1024;
  l.registers_per_thread = 64;
  return l;
}

Status Check(Dim3 grid, Dim3 block, unsigned shared = 0) {
  return CheckLaunchConfig(LaunchConfig{grid, block, shared}, HopperLimits());
}

TEST(LaunchConfig, AcceptsValidConfigurations) {
  EXPECT_TRUE(Check({1, 1, 1}, {1, 1, 1}).ok());
  EXPECT_TRUE(Check({2147483647, 65535, 65535}, {1024, 1, 1}).ok());
  EXPECT_TRUE(Check({132, 1, 1}, {32, 32, 1}, 200000).ok());  // opt-in shared memory
}

TEST(LaunchConfig, RejectsEachLimitWithAReason) {
  struct Case {
    Dim3 grid, block;
    unsigned shared;
    const char* mentions;
  };
  const Case cases[] = {
      {{0, 1, 1}, {32, 1, 1}, 0, "zero"},
      {{1, 1, 1}, {32, 0, 1}, 0, "zero"},
      {{1, 1, 1}, {1025, 1, 1}, 0, "block.x"},
      {{1, 1, 1}, {1, 1, 65}, 0, "block.z"},
      {{1, 65536, 1}, {32, 1, 1}, 0, "grid.y"},
      {{1, 1, 1}, {64, 32, 1}, 0, "2048 threads"},
      {{1, 1, 1}, {32, 1, 1}, 232448, "shared memory"},
  };
  for (const auto& c : cases) {
    Status s = Check(c.grid, c.block, c.shared);
    ASSERT_FALSE(s.ok()) << c.mentions;
    EXPECT_EQ(s.code(), StatusCode::kLaunchConfig);
    EXPECT_NE(s.message().find(c.mentions), std::string::npos) << s.message();
  }
}

TEST(LaunchConfig, RegisterLimitedThreadsAreEnforced) {
  LaunchLimits l = HopperLimits();
  l.max_threads_per_block = 384;  // what a register-heavy kernel reports
  Status s = CheckLaunchConfig(LaunchConfig{{1, 1, 1}, {512, 1, 1}, 0}, l);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("at most 384"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace kjit
