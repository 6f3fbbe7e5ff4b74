// The reward: how one evaluated candidate kernel scores, defined here and only here.
//
// Every trial the evaluator runs ends in one Outcome. The RL policy learns from
// Reward(), the measurement table stores it, and external agents receive it
// over the protocol, so all of them agree on what "good" means by calling
// these functions rather than re-deriving a score.
//
// The scale, in natural-log units of speed:
//
//   verified   log(baseline_us / candidate_us), clamped to
//              [kSlowestCorrectReward, kFastestCorrectReward] = [-3, +5]:
//              0 is as fast as PyTorch, +0.69 twice as fast, -0.69 half as fast.
//              Log because speedups compose multiplicatively and are symmetric
//              (2x faster and 2x slower are equally far from 0). The floor of -3
//              (~20x slower) is where "slow" stops carrying information: no one
//              will use such a kernel and its exact slowness would only add
//              variance. The ceiling of +5 (~150x) keeps one mis-measured
//              baseline (a cold first call, a timer glitch) from dominating
//              what the policy learns; real wins stay well inside it.
//
//   failures   fixed penalties, all below -3, so that *every* correct kernel,
//              however slow, outscores *every* failure: the policy must learn
//              correctness before speed, and a space where nothing compiles
//              must never look better than one whose kernels are merely slow.
//              Among failures the penalty grows with how late the failure is
//              caught and how much damage it would do had it slipped through:
//                -4    compile_error, launch_error: caught before anything runs,
//                      harmless, and usually a design-space bug, not a bad idea.
//                -5    wrong_result, unwritten_output, nondeterministic: a kernel
//                      that runs but computes the wrong thing (a race counts).
//                -5.5  out_of_bounds, stateful: wrong in ways that single-shot
//                      comparison misses and that would corrupt a user's memory or
//                      results once hot-swapped in.
//                -6    fault, hang: kills or wedges the worker, costs a restart or
//                      a watchdog timeout of GPU time, and would take the user's
//                      process down.
//
//   resource_backoff  not the candidate's doing (out of memory under the cap,
//              GPU taken by the user, kjitd stopping): not a trial. IsTrial() is
//              false, Reward() is 0, and callers neither learn from it nor
//              store it as a measurement.
//
// Acceptance into the cache is a separate, stricter question than reward: see
// Accept().
#pragma once

#include <string_view>

#include "kjit/runtime/status.h"

namespace kjit::policy {

enum class Outcome {
  kVerified,          // matched PyTorch on every check; timed
  kCompileError,      // NVRTC rejected the source
  kLaunchError,       // bad launch configuration, module load or symbol lookup failed
  kWrongResult,       // an output differs from PyTorch's beyond tolerance
  kUnwrittenOutput,   // some output elements were never written
  kOutOfBounds,       // wrote guard bytes around an output, or modified an input
  kNondeterministic,  // two runs on the same inputs disagree
  kStateful,          // results depend on earlier calls
  kFault,             // illegal address, trap, ...: the worker died
  kHang,              // the watchdog stopped it
  kResourceBackoff,   // not the candidate's fault (OOM, GPU busy): no reward, not a trial
};

// Stable lower-case names ("verified", "compile_error", ..., "resource_backoff"),
// used in the wire protocol, logs and the measurement table: never rename one.
std::string_view OutcomeName(Outcome outcome);
// The inverse of OutcomeName; kInvalidArgument for anything else.
Result<Outcome> ParseOutcome(std::string_view name);

// False only for kResourceBackoff: such an evaluation says nothing about the
// candidate and must not be learned from or recorded as a measurement.
bool IsTrial(Outcome outcome);

struct TrialOutcome {
  Outcome outcome = Outcome::kResourceBackoff;
  double candidate_us = 0;  // median kernel time; read only for kVerified
  double baseline_us = 0;   // PyTorch's median time for the same call; read only for kVerified
};

inline constexpr double kSlowestCorrectReward = -3.0;     // ~ log(1/20)
inline constexpr double kFastestCorrectReward = 5.0;      // ~ log(150)
inline constexpr double kBuildFailurePenalty = -4.0;      // compile_error, launch_error
inline constexpr double kWrongResultPenalty = -5.0;       // wrong_result, unwritten_output, nondeterministic
inline constexpr double kHiddenCorruptionPenalty = -5.5;  // out_of_bounds, stateful
inline constexpr double kCrashPenalty = -6.0;             // fault, hang

// The score of one trial, as described above. Always finite. A verified trial
// whose baseline time is not a positive finite number, or whose candidate time
// is NaN, has no measured speed and scores 0; a candidate time <= 0 (below the
// timer's resolution) counts as the fastest measurable, i.e. the ceiling.
double Reward(const TrialOutcome& trial);

// Whether a verified candidate is faster than PyTorch by more than the
// measurement noise, and so goes into the cache to replace PyTorch's kernel.
// Medians and spreads are in microseconds; a spread is the interquartile range
// (p75 - p25) of the timed runs.
//
// Accepted iff   candidate_median + noise < baseline_median,
//   noise = max((candidate_spread + baseline_spread) / 2,  1% of baseline_median).
// The first term asks that the two middle halves of the timing distributions
// not overlap (candidate's p75 below the baseline's p25, were both symmetric):
// a difference smaller than that is one the next measurement could reverse.
// The 1% floor is run-to-run drift (clocks, temperature, co-tenants) that one
// run's spread does not show, and a win that small is not worth a cache entry
// and a hot-swap. Erring towards rejection is deliberate: a wrongly rejected
// kernel is only a missed win; a wrongly accepted one slows the user down.
// False for any non-finite, negative spread or non-positive median input.
bool Accept(double candidate_median_us, double candidate_spread_us, double baseline_median_us,
            double baseline_spread_us);

// A verified kernel enters the cache only when it is faster than the key's best stored kernel (on the same
// GPU model) by this fraction: each stored kernel is announced and hot-swapped into every running process
// that uses the key, and a search finds many kernels faster than PyTorch's, most no faster than the one
// already served; a smaller gain would be within the timings' run-to-run spread (about 1% on an H100). kjitd applies it when storing; the evaluator, to check with compute-sanitizer only
// kernels that could be stored.
inline constexpr double kStoreMargin = 0.02;
// Whether a kernel of `median_us` would replace a stored best of `best_us` (none: best_us <= 0).
inline bool ReplacesStored(double median_us, double best_us) {
  return best_us <= 0 || median_us <= best_us * (1.0 - kStoreMargin);
}

}  // namespace kjit::policy
