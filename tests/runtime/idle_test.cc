#include "kjit/runtime/idle.h"

#include <gtest/gtest.h>

namespace kjit {
namespace {

constexpr uint64_t kGiB = 1ull << 30;

GpuSample Sample(double others, double device, uint64_t free_gib, uint64_t total_gib) {
  GpuSample s;
  s.uuid = "GPU-test";
  s.others_utilization_percent = others;
  s.utilization_percent = device;
  s.memory_free_bytes = free_gib * kGiB;
  s.memory_total_bytes = total_gib * kGiB;
  return s;
}

Result<GpuSample> NoNvml() { return Status(StatusCode::kNoDriver, "cannot load NVML"); }

bool Has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

TEST(RunWhen, NamesRoundTrip) {
  for (RunWhen w : {RunWhen::kIdle, RunWhen::kAlways, RunWhen::kNever}) {
    auto parsed = ParseRunWhen(RunWhenName(w));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, w);
  }
  EXPECT_EQ(RunWhenName(RunWhen::kIdle), "idle");
  EXPECT_EQ(RunWhenName(RunWhen::kAlways), "always");
  EXPECT_EQ(RunWhenName(RunWhen::kNever), "never");
  auto bad = ParseRunWhen("sometimes");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Has(bad.status().message(), "idle, always or never"));
  EXPECT_FALSE(ParseRunWhen("Idle").ok());
  EXPECT_FALSE(ParseRunWhen("").ok());
}

TEST(DecideIdle, NeverNeverRuns) {
  const IdleThresholds t;
  for (const Result<GpuSample>& s : {Result<GpuSample>(Sample(0, 0, 80, 80)), NoNvml()}) {
    IdleDecision d = DecideIdle(RunWhen::kNever, t, s);
    EXPECT_FALSE(d.run);
    EXPECT_EQ(d.reason, "evaluation disabled (--when never)");
  }
}

TEST(DecideIdle, AlwaysRunsWithACapWhereFreeMemoryIsKnown) {
  const IdleThresholds t;  // cap 50% of free
  IdleDecision busy = DecideIdle(RunWhen::kAlways, t, Sample(95, 99, 10, 80));
  EXPECT_TRUE(busy.run);
  EXPECT_EQ(busy.memory_cap_bytes, 5 * kGiB);
  EXPECT_TRUE(Has(busy.reason, "--when always")) << busy.reason;
  EXPECT_TRUE(Has(busy.reason, "5.0 GiB")) << busy.reason;

  IdleDecision blind = DecideIdle(RunWhen::kAlways, t, NoNvml());
  EXPECT_TRUE(blind.run);
  EXPECT_EQ(blind.memory_cap_bytes, kNoMemoryCap);
  EXPECT_TRUE(Has(blind.reason, "no_driver")) << blind.reason;

  IdleDecision no_size = DecideIdle(RunWhen::kAlways, t, Sample(0, 0, 0, 0));
  EXPECT_TRUE(no_size.run);
  EXPECT_EQ(no_size.memory_cap_bytes, kNoMemoryCap);
}

TEST(DecideIdle, IdleGpuRuns) {
  const IdleThresholds t;  // cap 90% of free: nobody else is using the GPU
  IdleDecision d = DecideIdle(RunWhen::kIdle, t, Sample(3, 40, 60, 80));  // device figure includes kjit
  EXPECT_TRUE(d.run) << d.reason;
  EXPECT_EQ(d.memory_cap_bytes, 54 * kGiB);
  EXPECT_TRUE(Has(d.reason, "90% of 60.0 GiB free")) << d.reason;
  EXPECT_TRUE(Has(d.reason, "other processes")) << d.reason;

  // Exactly at the thresholds still counts as idle.
  IdleDecision edge = DecideIdle(RunWhen::kIdle, t, Sample(10, 10, 20, 80));
  EXPECT_TRUE(edge.run) << edge.reason;
}

TEST(DecideIdle, BusyGpuDoesNotRun) {
  const IdleThresholds t;
  IdleDecision d = DecideIdle(RunWhen::kIdle, t, Sample(10.5, 11, 60, 80));
  EXPECT_FALSE(d.run);
  EXPECT_TRUE(Has(d.reason, "GPU busy")) << d.reason;
  EXPECT_TRUE(Has(d.reason, "> 10%")) << d.reason;
}

TEST(DecideIdle, LowMemoryDoesNotRun) {
  const IdleThresholds t;
  IdleDecision d = DecideIdle(RunWhen::kIdle, t, Sample(0, 0, 19, 80));  // 23.75% free
  EXPECT_FALSE(d.run);
  EXPECT_TRUE(Has(d.reason, "memory")) << d.reason;
  EXPECT_TRUE(Has(d.reason, "24% free < 25%")) << d.reason;
}

TEST(DecideIdle, DeviceUtilizationStandsInForUnknownPerProcessFigures) {
  const IdleThresholds t;
  IdleDecision quiet = DecideIdle(RunWhen::kIdle, t, Sample(-1, 4, 60, 80));
  EXPECT_TRUE(quiet.run) << quiet.reason;
  EXPECT_TRUE(Has(quiet.reason, "device utilization")) << quiet.reason;
  IdleDecision loud = DecideIdle(RunWhen::kIdle, t, Sample(-1, 50, 60, 80));
  EXPECT_FALSE(loud.run);
  EXPECT_TRUE(Has(loud.reason, "device utilization")) << loud.reason;
}

TEST(DecideIdle, UnknownStateDoesNotRunInIdleMode) {
  const IdleThresholds t;
  IdleDecision no_nvml = DecideIdle(RunWhen::kIdle, t, NoNvml());
  EXPECT_FALSE(no_nvml.run);
  EXPECT_TRUE(Has(no_nvml.reason, "no_driver")) << no_nvml.reason;
  EXPECT_TRUE(Has(no_nvml.reason, "--when always")) << no_nvml.reason;

  IdleDecision no_util = DecideIdle(RunWhen::kIdle, t, Sample(-1, -1, 60, 80));
  EXPECT_FALSE(no_util.run);
  EXPECT_TRUE(Has(no_util.reason, "--when always")) << no_util.reason;

  IdleDecision no_memory = DecideIdle(RunWhen::kIdle, t, Sample(0, 0, 0, 0));
  EXPECT_FALSE(no_memory.run);
  EXPECT_TRUE(Has(no_memory.reason, "memory")) << no_memory.reason;
}

TEST(DecideIdle, CapFractionIsClamped) {
  IdleThresholds t;
  t.memory_cap_fraction = 2;
  EXPECT_EQ(DecideIdle(RunWhen::kAlways, t, Sample(0, 0, 60, 80)).memory_cap_bytes, 60 * kGiB);
  t.memory_cap_fraction = -1;
  EXPECT_EQ(DecideIdle(RunWhen::kAlways, t, Sample(0, 0, 60, 80)).memory_cap_bytes, 0u);
  t.memory_cap_fraction = 0.25;
  EXPECT_EQ(DecideIdle(RunWhen::kIdle, t, Sample(0, 0, 60, 80)).memory_cap_bytes, 15 * kGiB);
}

// Unset, the cap is 0.9 of the free memory of an idle GPU (a key whose working
// set fits the idle GPU is admitted) and 0.5 under --when always (the user's
// work may be running beside); a configured fraction applies to both.
TEST(DecideIdle, CapFractionDefaultsPerMode) {
  IdleThresholds t;
  EXPECT_FALSE(t.memory_cap_fraction.has_value());
  EXPECT_EQ(MemoryCapFraction(RunWhen::kIdle, t), kIdleMemoryCapFraction);
  EXPECT_EQ(MemoryCapFraction(RunWhen::kAlways, t), kAlwaysMemoryCapFraction);
  EXPECT_EQ(kIdleMemoryCapFraction, 0.9);
  EXPECT_EQ(kAlwaysMemoryCapFraction, 0.5);
  // An idle H200: 140 GiB free of 141.
  EXPECT_EQ(DecideIdle(RunWhen::kIdle, t, Sample(0, 0, 140, 141)).memory_cap_bytes, 126 * kGiB);
  EXPECT_EQ(DecideIdle(RunWhen::kAlways, t, Sample(0, 0, 140, 141)).memory_cap_bytes, 70 * kGiB);
  t.memory_cap_fraction = 0.5;
  EXPECT_EQ(MemoryCapFraction(RunWhen::kIdle, t), 0.5);
  EXPECT_EQ(DecideIdle(RunWhen::kIdle, t, Sample(0, 0, 140, 141)).memory_cap_bytes, 70 * kGiB);
  t.memory_cap_fraction = 0.75;
  EXPECT_EQ(DecideIdle(RunWhen::kAlways, t, Sample(0, 0, 40, 80)).memory_cap_bytes, 30 * kGiB);
}

TEST(DecideIdle, AClientsRecentOpsMakeTheGpuBusyWhateverNvmlSays) {
  IdleThresholds t;  // hold 1500 ms
  const ClientActivity recent{4242, std::chrono::milliseconds(300)};
  // NVML sees nobody (the H100 VM's reading while a program ran): the client's report decides.
  IdleDecision d = DecideIdle(RunWhen::kIdle, t, Sample(0, 0, 60, 80), recent);
  EXPECT_FALSE(d.run);
  EXPECT_EQ(d.memory_cap_bytes, 0u);
  EXPECT_TRUE(Has(d.reason, "pid 4242")) << d.reason;
  EXPECT_TRUE(Has(d.reason, "0.3 s ago")) << d.reason;
  EXPECT_FALSE(DecideIdle(RunWhen::kIdle, t, NoNvml(), recent).run);
  // An old report no longer counts; exactly at the hold it has expired.
  EXPECT_TRUE(DecideIdle(RunWhen::kIdle, t, Sample(0, 0, 60, 80), ClientActivity{4242, std::chrono::milliseconds(1500)}).run);
  EXPECT_FALSE(DecideIdle(RunWhen::kIdle, t, Sample(0, 0, 60, 80), ClientActivity{4242, std::chrono::milliseconds(1499)}).run);
  // --when always runs regardless, and a zero hold ignores reports.
  EXPECT_TRUE(DecideIdle(RunWhen::kAlways, t, Sample(0, 0, 60, 80), recent).run);
  t.client_hold_ms = 0;
  EXPECT_TRUE(DecideIdle(RunWhen::kIdle, t, Sample(0, 0, 60, 80), recent).run);
}

class IdleTrackerTest : public ::testing::Test {
 protected:
  IdleTracker tracker_{[this] { return now_; }};
  std::chrono::steady_clock::time_point now_{};
  IdleThresholds t_;  // settle 2000 ms
  void Advance(int ms) { now_ += std::chrono::milliseconds(ms); }
};

TEST_F(IdleTrackerTest, RunsOnlyAfterTheSettlePeriod) {
  IdleDecision first = tracker_.Update(RunWhen::kIdle, t_, Sample(0, 0, 60, 80));
  EXPECT_FALSE(first.run);
  EXPECT_EQ(first.memory_cap_bytes, 0u);
  EXPECT_TRUE(Has(first.reason, "settle")) << first.reason;
  Advance(1500);
  IdleDecision middle = tracker_.Update(RunWhen::kIdle, t_, Sample(0, 0, 60, 80));
  EXPECT_FALSE(middle.run);
  EXPECT_TRUE(Has(middle.reason, "1.5 s of the 2.0 s")) << middle.reason;
  Advance(500);
  IdleDecision settled = tracker_.Update(RunWhen::kIdle, t_, Sample(0, 0, 60, 80));
  EXPECT_TRUE(settled.run) << settled.reason;
  EXPECT_EQ(settled.memory_cap_bytes, 54 * kGiB);
  Advance(10'000);
  EXPECT_TRUE(tracker_.Update(RunWhen::kIdle, t_, Sample(0, 0, 60, 80)).run);  // stays running while idle
}

TEST_F(IdleTrackerTest, AnyBusySampleRestartsTheSettlePeriod) {
  EXPECT_FALSE(tracker_.Update(RunWhen::kIdle, t_, Sample(0, 0, 60, 80)).run);
  Advance(1900);
  IdleDecision busy = tracker_.Update(RunWhen::kIdle, t_, Sample(50, 50, 60, 80));
  EXPECT_FALSE(busy.run);
  EXPECT_TRUE(Has(busy.reason, "GPU busy")) << busy.reason;
  Advance(100);
  EXPECT_FALSE(tracker_.Update(RunWhen::kIdle, t_, Sample(0, 0, 60, 80)).run);  // 2000 ms since the first, 0 since busy
  Advance(1999);
  EXPECT_FALSE(tracker_.Update(RunWhen::kIdle, t_, Sample(0, 0, 60, 80)).run);
  Advance(1);
  EXPECT_TRUE(tracker_.Update(RunWhen::kIdle, t_, Sample(0, 0, 60, 80)).run);

  // A failed sample is not idle either.
  EXPECT_FALSE(tracker_.Update(RunWhen::kIdle, t_, NoNvml()).run);
  EXPECT_FALSE(tracker_.Update(RunWhen::kIdle, t_, Sample(0, 0, 60, 80)).run);
}

TEST_F(IdleTrackerTest, AClientsReportRestartsTheSettlePeriod) {
  EXPECT_FALSE(tracker_.Update(RunWhen::kIdle, t_, Sample(0, 0, 60, 80)).run);
  Advance(1900);
  EXPECT_FALSE(
      tracker_.Update(RunWhen::kIdle, t_, Sample(0, 0, 60, 80), ClientActivity{7, std::chrono::milliseconds(50)}).run);
  Advance(1500);  // the report has expired, but the settle period starts from here
  EXPECT_FALSE(tracker_.Update(RunWhen::kIdle, t_, Sample(0, 0, 60, 80)).run);
  Advance(2000);
  EXPECT_TRUE(tracker_.Update(RunWhen::kIdle, t_, Sample(0, 0, 60, 80)).run);
}

TEST_F(IdleTrackerTest, ZeroSettleRunsAtOnce) {
  t_.settle_ms = 0;
  EXPECT_TRUE(tracker_.Update(RunWhen::kIdle, t_, Sample(0, 0, 60, 80)).run);
}

TEST_F(IdleTrackerTest, AlwaysAndNeverBypassTheSettlePeriod) {
  EXPECT_TRUE(tracker_.Update(RunWhen::kAlways, t_, Sample(90, 90, 60, 80)).run);
  EXPECT_FALSE(tracker_.Update(RunWhen::kNever, t_, Sample(0, 0, 60, 80)).run);
  // Switching to idle starts the settle period from scratch.
  EXPECT_FALSE(tracker_.Update(RunWhen::kIdle, t_, Sample(0, 0, 60, 80)).run);
}

TEST_F(IdleTrackerTest, ResetForgetsIdleTime) {
  EXPECT_FALSE(tracker_.Update(RunWhen::kIdle, t_, Sample(0, 0, 60, 80)).run);
  Advance(2000);
  tracker_.Reset();
  EXPECT_FALSE(tracker_.Update(RunWhen::kIdle, t_, Sample(0, 0, 60, 80)).run);
  Advance(2000);
  EXPECT_TRUE(tracker_.Update(RunWhen::kIdle, t_, Sample(0, 0, 60, 80)).run);
}

TEST(IdleTracker, DefaultClockWorks) {
  IdleTracker tracker;
  IdleThresholds t;
  t.settle_ms = 0;
  EXPECT_TRUE(tracker.Update(RunWhen::kIdle, t, Sample(0, 0, 60, 80)).run);
}

}  // namespace
}  // namespace kjit
