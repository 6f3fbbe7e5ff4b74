#include "kjit/runtime/idle.h"

#include <cmath>
#include <cstdio>

namespace kjit {
namespace {

std::string Format(const char* fmt, double a, double b = 0, double c = 0) {
  char buf[160];
  std::snprintf(buf, sizeof(buf), fmt, a, b, c);
  return buf;
}

std::string Bytes(uint64_t bytes) {
  const double gib = static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0);
  if (gib >= 1) return Format("%.1f GiB", gib);
  return Format("%.0f MiB", static_cast<double>(bytes) / (1024.0 * 1024.0));
}

// The share of `free` kjit may take. A fraction outside [0, 1] (or NaN) from a
// bad config is clamped rather than trusted: over 1 would plan for memory
// that is not there.
uint64_t MemoryCap(double fraction, uint64_t free) {
  if (!(fraction > 0)) return 0;
  if (fraction >= 1) return free;
  return static_cast<uint64_t>(std::floor(fraction * static_cast<double>(free)));
}

std::string CapText(uint64_t cap, double fraction, uint64_t free) {
  return "memory cap " + Bytes(cap) + " (" + Format("%.0f%%", 100 * fraction) + " of " + Bytes(free) + " free)";
}

}  // namespace

std::string_view RunWhenName(RunWhen when) {
  switch (when) {
    case RunWhen::kIdle: return "idle";
    case RunWhen::kAlways: return "always";
    case RunWhen::kNever: return "never";
  }
  return "unknown";
}

Result<RunWhen> ParseRunWhen(std::string_view text) {
  for (RunWhen w : {RunWhen::kIdle, RunWhen::kAlways, RunWhen::kNever}) {
    if (text == RunWhenName(w)) return w;
  }
  return InvalidArgument("unknown --when value \"" + std::string(text) + "\": expected idle, always or never");
}

double MemoryCapFraction(RunWhen when, const IdleThresholds& t) {
  if (t.memory_cap_fraction) return *t.memory_cap_fraction;
  return when == RunWhen::kIdle ? kIdleMemoryCapFraction : kAlwaysMemoryCapFraction;
}

IdleDecision DecideIdle(RunWhen when, const IdleThresholds& t, const Result<GpuSample>& sample,
                        const std::optional<ClientActivity>& activity) {
  IdleDecision d;
  if (when == RunWhen::kNever) {
    d.reason = "evaluation disabled (--when never)";
    return d;
  }

  if (when == RunWhen::kAlways) {
    d.run = true;
    if (!sample.ok()) {
      d.memory_cap_bytes = kNoMemoryCap;
      d.reason = "--when always: running without a GPU reading (" + sample.status().ToString() + "), no memory cap";
    } else if (sample->memory_total_bytes == 0) {
      d.memory_cap_bytes = kNoMemoryCap;
      d.reason = "--when always: running; free memory unknown, no memory cap";
    } else {
      const double fraction = MemoryCapFraction(when, t);
      d.memory_cap_bytes = MemoryCap(fraction, sample->memory_free_bytes);
      d.reason = "--when always: running regardless of load; " +
                 CapText(d.memory_cap_bytes, fraction, sample->memory_free_bytes);
    }
    return d;
  }

  // kIdle. A program kjit serves that says it is running ops outranks any NVML reading.
  if (activity && activity->age.count() < t.client_hold_ms) {
    d.reason = "GPU busy: a program kjit serves (pid " + std::to_string(activity->pid) + ") ran ops on it " +
               Format("%.1f s ago", static_cast<double>(activity->age.count()) / 1000.0);
    return d;
  }
  if (!sample.ok()) {
    d.reason = "idle state unknown (" + sample.status().ToString() +
               "); not evaluating. Use --when always to evaluate without NVML";
    return d;
  }
  const GpuSample& s = *sample;
  double busy = s.others_utilization_percent;
  const char* whose = "other processes' SM utilization";
  if (busy < 0) {
    busy = s.utilization_percent;
    whose = "device utilization (no per-process figures)";
  }
  if (busy < 0) {
    d.reason = "idle state unknown: NVML reports no utilization for " + s.uuid +
               "; not evaluating. Use --when always to evaluate regardless of load";
    return d;
  }
  if (busy > t.max_utilization_percent) {
    d.reason = "GPU busy: " + std::string(whose) + Format(" %.0f%% > %.0f%%", busy, t.max_utilization_percent);
    return d;
  }
  if (s.memory_total_bytes == 0) {
    d.reason = "idle state unknown: NVML reports no memory size for " + s.uuid + "; not evaluating";
    return d;
  }
  const double free_fraction = static_cast<double>(s.memory_free_bytes) / static_cast<double>(s.memory_total_bytes);
  if (free_fraction < t.min_free_memory_fraction) {
    d.reason =
        "GPU memory in use: " + Format("%.0f%% free < %.0f%%", 100 * free_fraction, 100 * t.min_free_memory_fraction);
    return d;
  }
  d.run = true;
  const double fraction = MemoryCapFraction(when, t);
  d.memory_cap_bytes = MemoryCap(fraction, s.memory_free_bytes);
  d.reason = "GPU idle: " + std::string(whose) + Format(" %.0f%% <= %.0f%%; ", busy, t.max_utilization_percent) +
             CapText(d.memory_cap_bytes, fraction, s.memory_free_bytes);
  return d;
}

IdleTracker::IdleTracker(Clock clock) : clock_(std::move(clock)) {}

IdleDecision IdleTracker::Update(RunWhen when, const IdleThresholds& t, const Result<GpuSample>& sample,
                                 const std::optional<ClientActivity>& activity) {
  IdleDecision d = DecideIdle(when, t, sample, activity);
  if (when != RunWhen::kIdle || !d.run) {
    idle_since_.reset();
    return d;
  }
  const auto now = clock_();
  if (!idle_since_) idle_since_ = now;
  const auto idle_ms = std::chrono::duration_cast<std::chrono::milliseconds>(now - *idle_since_).count();
  if (idle_ms >= t.settle_ms) return d;
  d.run = false;
  d.memory_cap_bytes = 0;
  d.reason = "GPU idle for " + Format("%.1f s of the %.1f s settle period", static_cast<double>(idle_ms) / 1000.0,
                                      static_cast<double>(t.settle_ms) / 1000.0);
  return d;
}

}  // namespace kjit
