// The idle gate: whether kjitd may evaluate kernels on a GPU right now.
//
// kjit tunes on idle GPU time beside the user's programs, so it must stay off a
// GPU someone else is using, and must leave memory for them when it does run.
// The decision is a pure function of a GpuSample (nvml.h) and the thresholds,
// so every branch is testable without a GPU; IdleTracker adds the one piece of
// state, that the GPU must have stayed idle for a settle period, because a
// training loop pausing for a data-loader stall or a checkpoint looks idle for
// a moment and would otherwise be interrupted the instant it resumes.
//
// The rule, for `--when`:
//   never   never run.
//   always  run whatever the load; cap memory at memory_cap_fraction of what is
//           free (by default kAlwaysMemoryCapFraction, 0.5: the user's work may
//           be running and growing), or no cap if NVML cannot say what is free.
//   idle    run only if NVML answered, others' utilization is at most
//           max_utilization_percent, and at least min_free_memory_fraction of
//           memory is free; cap memory at memory_cap_fraction of what is free
//           (by default kIdleMemoryCapFraction, 0.9: nobody else is using the
//           GPU, so a key whose working set fits the idle GPU's free memory is
//           admitted; the rest is headroom for the CUDA context, the
//           allocator's rounding and the ops' own scratch).
//
// In `idle` mode an unanswered sample (no NVML, no such GPU, a transient error)
// means "do not run": without NVML nothing says the user's job is not on that
// GPU, and slowing it down is worse than tuning nothing. The reason says so and
// points at `--when always` for machines without NVML.
//
// "Others' utilization" is GpuSample::others_utilization_percent (every
// process but kjit's excluded workers). Where NVML has no per-process figures
// (MIG, some vGPUs) the device-wide utilization stands in, which counts kjit's
// own kernels too: a sample taken while kjit's worker is busy then reads
// "busy" and the settle period starts again. kjitd still makes progress if it
// samples between trials (as the evaluator pool does), only more slowly.
//
// Programs kjit serves also speak for themselves: the shim reports, about twice a
// second while it runs ops, which GPUs it ran them on (ipc report_activity). A
// GPU with such a report younger than client_hold_ms is busy whatever NVML says,
// because NVML's per-process figures miss other processes on some virtual
// machines (an H100 VM reported none while a program ran, 2026-12-05) and in PID
// namespaces, and the device-wide figure cannot tell kjit's own trials apart.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <string_view>

#include "kjit/runtime/nvml.h"
#include "kjit/runtime/status.h"

namespace kjit {

enum class RunWhen { kIdle, kAlways, kNever };

// "idle", "always", "never".
std::string_view RunWhenName(RunWhen when);
// The inverse of RunWhenName; kInvalidArgument, naming the choices, otherwise.
Result<RunWhen> ParseRunWhen(std::string_view text);

struct IdleThresholds {
  double max_utilization_percent = 10;     // others' utilization above this is "busy"
  double min_free_memory_fraction = 0.25;  // less free memory than this is "busy"
  // Of the free memory, what kjit may take; unset: the default of the `--when` mode (below).
  std::optional<double> memory_cap_fraction;
  int settle_ms = 2000;                    // how long "idle" must hold before running
  int client_hold_ms = 1500;               // a kjit client's report of its ops keeps the GPU busy this long
  // A trial gives the GPU back (and runs again from its start once the GPU is idle) at most this many times;
  // then it runs to its end though another process uses the GPU: a program whose idle gaps are all shorter
  // than a trial would otherwise never get a kernel.
  int yields_per_trial = 3;
};

// The latest report of ops run on the GPU by a program kjit serves (ipc report_activity).
struct ClientActivity {
  uint32_t pid = 0;
  std::chrono::milliseconds age{0};  // since the report arrived
};

// memory_cap_fraction's defaults: of the free memory of an idle GPU, and of a GPU that may be busy.
inline constexpr double kIdleMemoryCapFraction = 0.9;
inline constexpr double kAlwaysMemoryCapFraction = 0.5;
// The fraction DecideIdle applies under `when`: the configured one, else the mode's default.
double MemoryCapFraction(RunWhen when, const IdleThresholds& thresholds);

// memory_cap_bytes when nothing says how much memory is free.
inline constexpr uint64_t kNoMemoryCap = std::numeric_limits<uint64_t>::max();

struct IdleDecision {
  bool run = false;
  std::string reason;             // one line for logs and `kjit daemon status`, either way
  uint64_t memory_cap_bytes = 0;  // when run: the most device memory kjit may allocate
};

// The instantaneous decision (no settle period; see IdleTracker). In `idle` mode, `activity` younger
// than thresholds.client_hold_ms makes the GPU busy.
IdleDecision DecideIdle(RunWhen when, const IdleThresholds& thresholds, const Result<GpuSample>& sample,
                        const std::optional<ClientActivity>& activity = std::nullopt);

// DecideIdle, plus the settle period: in `idle` mode it answers "run" only
// once DecideIdle has said "run" for every sample over at least settle_ms; any
// "no" starts the period again. `always` and `never` pass straight through.
// One tracker per GPU; not thread-safe (its owner's loop samples and asks).
class IdleTracker {
 public:
  using Clock = std::function<std::chrono::steady_clock::time_point()>;
  // `clock` is injectable for tests; it must not go backwards.
  explicit IdleTracker(Clock clock = std::chrono::steady_clock::now);

  IdleDecision Update(RunWhen when, const IdleThresholds& thresholds, const Result<GpuSample>& sample,
                      const std::optional<ClientActivity>& activity = std::nullopt);

  // Forgets any idle time seen so far, e.g. after the GPU was given to a new job.
  void Reset() { idle_since_.reset(); }

 private:
  Clock clock_;
  std::optional<std::chrono::steady_clock::time_point> idle_since_;
};

}  // namespace kjit
