// Helpers shared by the design-space tests (space_*_test.cc).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "kjit/policy/design_space.h"

namespace kjit::policy {

// FNV-1a over a candidate's source and launch shape: the digests the OldPointsKeepTheirSources tests keep.
inline constexpr uint64_t kFnvOffset = 1469598103934665603ull;
inline uint64_t HashCandidate(uint64_t h, const Candidate& c) {
  const std::string s = c.source + "|" + std::to_string(c.launch.grid[0]) + "," + std::to_string(c.launch.block[0]) +
                        "," + std::to_string(c.launch.dynamic_shared_bytes);
  for (unsigned char ch : s) {
    h ^= ch;
    h *= 1099511628211ull;
  }
  return h;
}

// The digest of the old points of each of the family's sample keys (`is_old`, in ValidPoints' order) must be
// `golden`'s: their dataset rows stay true of what they measured. `each`, when given, sees every valid point's
// candidate (old or not).
struct SourceGolden { size_t old_points; uint64_t digest; };
inline void ExpectOldPointsKeepTheirSources(const Family& f, const std::vector<SourceGolden>& golden,
                                     const std::function<bool(const OpKey&, const Point&)>& is_old,
                                     const std::function<void(const OpKey&, const Point&, const Candidate&)>& each = {}) {
  const DeviceFacts device = DeviceFacts::H200();
  const std::vector<OpKey> keys = f.SampleKeys();
  ASSERT_EQ(keys.size(), golden.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    auto problem = f.Match(keys[i]);
    ASSERT_TRUE(problem.ok());
    uint64_t h = kFnvOffset;
    size_t old_points = 0;
    for (const Point& p : ValidPoints(f, **problem, device)) {
      const bool old = is_old(keys[i], p);
      if (!old && !each) continue;
      auto c = f.Generate(**problem, p, device);
      ASSERT_TRUE(c.ok()) << c.status().ToString();
      if (each) each(keys[i], p, *c);
      if (!old) continue;
      ++old_points;
      h = HashCandidate(h, *c);
    }
    EXPECT_EQ(old_points, golden[i].old_points) << (*problem)->description;
    EXPECT_EQ(h, golden[i].digest) << (*problem)->description << ": an old point's source changed; digest 0x" << std::hex
                                   << h;
  }
}

// A channels_last (NHWC or NDHWC in memory) descriptor of a tensor of sizes `s` (N, C, spatial...).
inline TensorDesc ChannelsLast(DType dt, std::vector<int64_t> s) {
  TensorDesc t = TensorDesc::Contiguous(dt, s);
  t.strides[1] = 1;
  int64_t stride = s[1];
  for (size_t d = s.size() - 1; d >= 2; --d) {
    t.strides[d] = stride;
    stride *= s[d];
  }
  t.strides[0] = stride;
  return t;
}

}  // namespace kjit::policy
