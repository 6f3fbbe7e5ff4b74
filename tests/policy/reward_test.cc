#include "kjit/policy/reward.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <set>
#include <string>

namespace kjit::policy {
namespace {

constexpr Outcome kAll[] = {
    Outcome::kVerified,        Outcome::kCompileError, Outcome::kLaunchError,      Outcome::kWrongResult,
    Outcome::kUnwrittenOutput, Outcome::kOutOfBounds,  Outcome::kNondeterministic, Outcome::kStateful,
    Outcome::kFault,           Outcome::kHang,         Outcome::kResourceBackoff,
};

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

double Verified(double candidate_us, double baseline_us) {
  return Reward(TrialOutcome{Outcome::kVerified, candidate_us, baseline_us});
}

TEST(Outcome, NamesAreStableAndRoundTrip) {
  std::set<std::string> seen;
  for (Outcome o : kAll) {
    const std::string name(OutcomeName(o));
    EXPECT_TRUE(seen.insert(name).second) << name;
    auto parsed = ParseOutcome(name);
    ASSERT_TRUE(parsed.ok()) << name;
    EXPECT_EQ(*parsed, o);
  }
  // These strings are on the wire and in every cache file.
  EXPECT_EQ(OutcomeName(Outcome::kVerified), "verified");
  EXPECT_EQ(OutcomeName(Outcome::kCompileError), "compile_error");
  EXPECT_EQ(OutcomeName(Outcome::kLaunchError), "launch_error");
  EXPECT_EQ(OutcomeName(Outcome::kWrongResult), "wrong_result");
  EXPECT_EQ(OutcomeName(Outcome::kUnwrittenOutput), "unwritten_output");
  EXPECT_EQ(OutcomeName(Outcome::kOutOfBounds), "out_of_bounds");
  EXPECT_EQ(OutcomeName(Outcome::kNondeterministic), "nondeterministic");
  EXPECT_EQ(OutcomeName(Outcome::kStateful), "stateful");
  EXPECT_EQ(OutcomeName(Outcome::kFault), "fault");
  EXPECT_EQ(OutcomeName(Outcome::kHang), "hang");
  EXPECT_EQ(OutcomeName(Outcome::kResourceBackoff), "resource_backoff");
  auto bad = ParseOutcome("slower");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(ParseOutcome("").ok());
  EXPECT_FALSE(ParseOutcome("Verified").ok());
}

TEST(Outcome, OnlyResourceBackoffIsNotATrial) {
  for (Outcome o : kAll) EXPECT_EQ(IsTrial(o), o != Outcome::kResourceBackoff) << OutcomeName(o);
  EXPECT_EQ(Reward(TrialOutcome{Outcome::kResourceBackoff, 1, 100}), 0);
}

TEST(Reward, VerifiedIsLogSpeedup) {
  EXPECT_DOUBLE_EQ(Verified(10, 10), 0);
  EXPECT_DOUBLE_EQ(Verified(5, 10), std::log(2.0));
  EXPECT_DOUBLE_EQ(Verified(20, 10), -std::log(2.0));
  EXPECT_DOUBLE_EQ(Verified(1, 10), std::log(10.0));
  // Symmetric: 2x faster and 2x slower are equally far from PyTorch.
  EXPECT_DOUBLE_EQ(Verified(5, 10), -Verified(20, 10));
}

TEST(Reward, VerifiedIsClamped) {
  EXPECT_DOUBLE_EQ(Verified(1000, 10), kSlowestCorrectReward);  // 100x slower
  EXPECT_DOUBLE_EQ(Verified(kInf, 10), kSlowestCorrectReward);
  EXPECT_DOUBLE_EQ(Verified(0.01, 10), kFastestCorrectReward);  // 1000x faster: a measurement problem
  EXPECT_DOUBLE_EQ(Verified(0, 10), kFastestCorrectReward);     // below timer resolution
  EXPECT_DOUBLE_EQ(Verified(-3, 10), kFastestCorrectReward);
  EXPECT_NEAR(kSlowestCorrectReward, std::log(1.0 / 20), 0.01);
}

TEST(Reward, VerifiedWithoutABaselineHasNoSpeed) {
  EXPECT_EQ(Verified(5, 0), 0);
  EXPECT_EQ(Verified(5, -1), 0);
  EXPECT_EQ(Verified(5, kNaN), 0);
  EXPECT_EQ(Verified(5, kInf), 0);
  EXPECT_EQ(Verified(kNaN, 10), 0);
}

TEST(Reward, FailuresArePenalizedByKind) {
  auto r = [](Outcome o) { return Reward(TrialOutcome{o, 1, 1000}); };  // times are ignored
  EXPECT_EQ(r(Outcome::kCompileError), -4.0);
  EXPECT_EQ(r(Outcome::kLaunchError), -4.0);
  EXPECT_EQ(r(Outcome::kWrongResult), -5.0);
  EXPECT_EQ(r(Outcome::kUnwrittenOutput), -5.0);
  EXPECT_EQ(r(Outcome::kNondeterministic), -5.0);
  EXPECT_EQ(r(Outcome::kOutOfBounds), -5.5);
  EXPECT_EQ(r(Outcome::kStateful), -5.5);
  EXPECT_EQ(r(Outcome::kFault), -6.0);
  EXPECT_EQ(r(Outcome::kHang), -6.0);
  // Worse the later it is caught and the more harm it would do.
  EXPECT_GT(r(Outcome::kCompileError), r(Outcome::kWrongResult));
  EXPECT_GT(r(Outcome::kWrongResult), r(Outcome::kOutOfBounds));
  EXPECT_GT(r(Outcome::kOutOfBounds), r(Outcome::kFault));
}

TEST(Reward, AnyCorrectKernelBeatsAnyFailure) {
  double worst_correct = kInf;
  for (double slowdown : {1.0, 2.0, 20.0, 1e3, 1e9, kInf}) {
    worst_correct = std::min(worst_correct, Verified(10 * slowdown, 10));
  }
  for (Outcome o : kAll) {
    if (o == Outcome::kVerified || !IsTrial(o)) continue;
    EXPECT_LT(Reward(TrialOutcome{o, 1, 1000}), worst_correct) << OutcomeName(o);
  }
}

TEST(Reward, AlwaysFinite) {
  const double values[] = {0, -1, 1e-300, 1, 1e300, kInf, -kInf, kNaN};
  for (Outcome o : kAll) {
    for (double c : values) {
      for (double b : values) {
        EXPECT_TRUE(std::isfinite(Reward(TrialOutcome{o, c, b}))) << OutcomeName(o) << " " << c << " " << b;
      }
    }
  }
}

TEST(Accept, NeedsToBeatTheBaselineByMoreThanTheNoise) {
  // Spreads 2 + 2 -> noise 2 (> 1% of 100): the candidate must be under 98.
  EXPECT_TRUE(Accept(97.9, 2, 100, 2));
  EXPECT_FALSE(Accept(98, 2, 100, 2));
  EXPECT_FALSE(Accept(99, 2, 100, 2));
  // Wide spreads on either side demand a bigger win.
  EXPECT_FALSE(Accept(80, 30, 100, 20));  // noise 25
  EXPECT_TRUE(Accept(74, 30, 100, 20));
  // Tiny spreads: the 1% floor applies.
  EXPECT_FALSE(Accept(99.5, 0, 100, 0));
  EXPECT_FALSE(Accept(99, 0, 100, 0));
  EXPECT_TRUE(Accept(98.9, 0, 100, 0));
  // Slower or equal is never accepted.
  EXPECT_FALSE(Accept(100, 0, 100, 0));
  EXPECT_FALSE(Accept(150, 1, 100, 1));
}

TEST(Accept, RejectsBrokenMeasurements) {
  EXPECT_FALSE(Accept(0, 0, 100, 0));
  EXPECT_FALSE(Accept(50, 0, 0, 0));
  EXPECT_FALSE(Accept(-1, 0, 100, 0));
  EXPECT_FALSE(Accept(50, -1, 100, 0));
  EXPECT_FALSE(Accept(50, 0, 100, -1));
  EXPECT_FALSE(Accept(kNaN, 0, 100, 0));
  EXPECT_FALSE(Accept(50, kNaN, 100, 0));
  EXPECT_FALSE(Accept(50, 0, kInf, 0));
  EXPECT_FALSE(Accept(50, 0, 100, kInf));
}

}  // namespace
}  // namespace kjit::policy
