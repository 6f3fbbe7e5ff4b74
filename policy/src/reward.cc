#include "kjit/policy/reward.h"

#include <algorithm>
#include <cmath>
#include <string>

namespace kjit::policy {
namespace {

constexpr Outcome kAllOutcomes[] = {
    Outcome::kVerified,        Outcome::kCompileError, Outcome::kLaunchError,      Outcome::kWrongResult,
    Outcome::kUnwrittenOutput, Outcome::kOutOfBounds,  Outcome::kNondeterministic, Outcome::kStateful,
    Outcome::kFault,           Outcome::kHang,         Outcome::kResourceBackoff,
};

// Below the CUDA event timer's resolution (~0.5 us); a candidate "faster" than
// this was not measured, and the clamp to the ceiling takes it from there.
constexpr double kMinMeasurableUs = 1e-3;

// Drift between runs that a single run's spread does not show (see Accept).
constexpr double kMinNoiseFraction = 0.01;

}  // namespace

std::string_view OutcomeName(Outcome outcome) {
  switch (outcome) {
    case Outcome::kVerified: return "verified";
    case Outcome::kCompileError: return "compile_error";
    case Outcome::kLaunchError: return "launch_error";
    case Outcome::kWrongResult: return "wrong_result";
    case Outcome::kUnwrittenOutput: return "unwritten_output";
    case Outcome::kOutOfBounds: return "out_of_bounds";
    case Outcome::kNondeterministic: return "nondeterministic";
    case Outcome::kStateful: return "stateful";
    case Outcome::kFault: return "fault";
    case Outcome::kHang: return "hang";
    case Outcome::kResourceBackoff: return "resource_backoff";
  }
  return "unknown";
}

Result<Outcome> ParseOutcome(std::string_view name) {
  for (Outcome o : kAllOutcomes) {
    if (OutcomeName(o) == name) return o;
  }
  return InvalidArgument("unknown trial outcome \"" + std::string(name) + "\"");
}

bool IsTrial(Outcome outcome) { return outcome != Outcome::kResourceBackoff; }

double Reward(const TrialOutcome& trial) {
  switch (trial.outcome) {
    case Outcome::kVerified: {
      const double base = trial.baseline_us;
      if (!std::isfinite(base) || base <= 0 || std::isnan(trial.candidate_us)) return 0;
      const double candidate = std::max(trial.candidate_us, kMinMeasurableUs);  // +inf stays +inf: the floor
      return std::clamp(std::log(base / candidate), kSlowestCorrectReward, kFastestCorrectReward);
    }
    case Outcome::kCompileError:
    case Outcome::kLaunchError: return kBuildFailurePenalty;
    case Outcome::kWrongResult:
    case Outcome::kUnwrittenOutput:
    case Outcome::kNondeterministic: return kWrongResultPenalty;
    case Outcome::kOutOfBounds:
    case Outcome::kStateful: return kHiddenCorruptionPenalty;
    case Outcome::kFault:
    case Outcome::kHang: return kCrashPenalty;
    case Outcome::kResourceBackoff: return 0;
  }
  return 0;
}

bool Accept(double candidate_median_us, double candidate_spread_us, double baseline_median_us,
            double baseline_spread_us) {
  for (double v : {candidate_median_us, candidate_spread_us, baseline_median_us, baseline_spread_us}) {
    if (!std::isfinite(v) || v < 0) return false;
  }
  if (candidate_median_us <= 0 || baseline_median_us <= 0) return false;
  const double noise = std::max((candidate_spread_us + baseline_spread_us) / 2, kMinNoiseFraction * baseline_median_us);
  return candidate_median_us + noise < baseline_median_us;
}

}  // namespace kjit::policy
