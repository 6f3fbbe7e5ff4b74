// The shim's torch-free logic: settings, the entry state machine, the table,
// and announcement handling against a fake kernel source.
#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <thread>

#include "announcements.h"
#include "shim_core.h"

namespace kjit::shim {
namespace {

Settings FromEnv(std::map<std::string, std::string> env) {
  return ReadSettings([&](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  });
}

TEST(ShimSettings, DefaultsInterceptEveryOp) {
  Settings s = FromEnv({});
  EXPECT_FALSE(s.disabled);
  EXPECT_FALSE(s.log);
  EXPECT_EQ(s.ops.size(), std::size(kInterceptedOps));
}

TEST(ShimSettings, DisableAndLog) {
  EXPECT_TRUE(FromEnv({{"KJIT_DISABLE", "1"}}).disabled);
  EXPECT_FALSE(FromEnv({{"KJIT_DISABLE", "0"}}).disabled);
  EXPECT_FALSE(FromEnv({{"KJIT_DISABLE", ""}}).disabled);
  EXPECT_TRUE(FromEnv({{"KJIT_LOG", "1"}}).log);
  EXPECT_FALSE(FromEnv({{"KJIT_LOG", "0"}}).log);
}

TEST(ShimSettings, OpListRestrictsInInterceptOrder) {
  std::vector<std::string> unknown;
  EXPECT_EQ(ParseOpList(" native_layer_norm, aten::_softmax ,_softmax,,gelu", &unknown),
            (std::vector<std::string>{"_softmax", "native_layer_norm"}));
  EXPECT_EQ(unknown, std::vector<std::string>{"gelu"});
  Settings s = FromEnv({{"KJIT_OPS", "_softmax,native_layer_norm"}});
  EXPECT_EQ(s.ops, (std::vector<std::string>{"_softmax", "native_layer_norm"}));
  // Only unknown names: nothing is intercepted (not everything).
  EXPECT_TRUE(FromEnv({{"KJIT_OPS", "gelu"}}).ops.empty());
}

std::vector<OutputLayout> OneOutput() { return {OutputLayout{true, 6, {4, 8}, {8, 1}}}; }

std::unique_ptr<LoadedKernel> FakeKernel(int64_t id) {
  auto k = std::make_unique<LoadedKernel>();
  k->record_id = id;
  return k;
}

TEST(ShimEntry, NegativeThenHotSwapThenFail) {
  Entry e("key", 0);
  EXPECT_EQ(e.state(), EntryState::kUnknown);
  EXPECT_EQ(e.kernel(), nullptr);
  EXPECT_FALSE(e.Swap(FakeKernel(1))) << "no swap before the first call recorded the outputs";
  EXPECT_TRUE(e.ResolveNegative(OneOutput()));
  EXPECT_FALSE(e.ResolveNegative(OneOutput())) << "resolved once";
  EXPECT_EQ(e.state(), EntryState::kNegative);
  EXPECT_EQ(e.outputs(), OneOutput());
  EXPECT_TRUE(e.Swap(FakeKernel(7)));
  EXPECT_EQ(e.state(), EntryState::kLoaded);
  const LoadedKernel* first = e.kernel();
  ASSERT_NE(first, nullptr);
  EXPECT_EQ(first->record_id, 7);
  EXPECT_TRUE(e.Swap(FakeKernel(9)));
  EXPECT_EQ(e.kernel()->record_id, 9);
  EXPECT_EQ(first->record_id, 7) << "a replaced kernel stays alive (launches may be queued)";
  e.Fail("launch failed");
  e.Fail("second reason");
  EXPECT_EQ(e.state(), EntryState::kFailed);
  EXPECT_EQ(e.kernel(), nullptr);
  EXPECT_EQ(e.failure(), "launch failed");
  EXPECT_FALSE(e.Swap(FakeKernel(10))) << "blacklisted for the process";
}

TEST(ShimEntry, LoadedOnFirstSight) {
  Entry e("key", 1);
  EXPECT_FALSE(e.ResolveLoaded(OneOutput(), nullptr));
  EXPECT_TRUE(e.ResolveLoaded(OneOutput(), FakeKernel(3)));
  EXPECT_EQ(e.state(), EntryState::kLoaded);
  EXPECT_EQ(e.kernel()->record_id, 3);
  EXPECT_FALSE(e.ResolveNegative(OneOutput()));
}

TEST(ShimEntry, MissesReportedFirstThenInBatches) {
  Entry e("key", 0);
  uint64_t reported = 0;
  int reports = 0;
  const uint64_t calls = 3 * Entry::kMissBatch + 5;
  for (uint64_t i = 0; i < calls; ++i) {
    if (uint64_t n = e.CountMiss()) {
      reported += n;
      ++reports;
    }
  }
  EXPECT_EQ(reports, 4);
  EXPECT_EQ(reported, 1 + 3 * Entry::kMissBatch);
  EXPECT_EQ(e.misses(), calls);
}

TEST(ShimTable, OneCreatorPerKeyAndDevice) {
  EntryTable table;
  const Hash128 h = HashBytes("a key");
  constexpr int kThreads = 8;
  std::atomic<int> creators{0};
  std::vector<std::thread> threads;
  std::vector<Entry*> seen(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      bool created = false;
      seen[static_cast<size_t>(t)] = table.FindOrCreate(h, 0, "a key", &created);
      if (created) creators.fetch_add(1);
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(creators.load(), 1);
  for (Entry* e : seen) EXPECT_EQ(e, seen[0]);
  EXPECT_EQ(seen[0]->key_bytes(), "a key");
  bool created = false;
  Entry* other_device = table.FindOrCreate(h, 1, "a key", &created);
  EXPECT_TRUE(created);
  EXPECT_NE(other_device, seen[0]) << "a module of one device's context cannot run on another";
  EXPECT_EQ(table.Find(h, 1), other_device);
  EXPECT_EQ(table.Find(HashBytes("other"), 0), nullptr);
  EXPECT_EQ(table.size(), 2u);
}

class FakeSource : public KernelSource {
 public:
  EntryTable table;
  std::map<std::string, int64_t> records;  // key hash hex -> record id served
  bool fail_load = false;
  int loads = 0;
  Result<cache::ServedKernel> LookupRecord(const Hash128& hash, int) override {
    auto it = records.find(hash.ToHex());
    if (it == records.end()) return NotFound("no record");
    cache::ServedKernel k;
    k.id = it->second;
    return k;
  }
  Result<std::unique_ptr<LoadedKernel>> Load(int, const cache::ServedKernel& served) override {
    ++loads;
    if (fail_load) return Status(StatusCode::kCudaError, "cuModuleLoadData: CUDA_ERROR_INVALID_IMAGE");
    return FakeKernel(served.id);
  }
  EntryTable& Table() override { return table; }
  std::vector<std::pair<int, int>> DevicesInUse() override { return {{0, 90}}; }
  void LogLine(const std::string&) override {}
};

TEST(ShimAnnouncements, SwapsSeenNegativeKeysOnly) {
  FakeSource source;
  AnnouncementListener listener(&source, "ipc:///nonexistent/kjit-test.sock");  // never started
  const Hash128 h = HashBytes("seen");
  bool created = false;
  Entry* e = source.table.FindOrCreate(h, 0, "seen", &created);
  EXPECT_EQ(listener.Handle(90, h.ToHex(), 5), "ignored: entry unknown");
  ASSERT_TRUE(e->ResolveNegative(OneOutput()));
  EXPECT_EQ(listener.Handle(80, h.ToHex(), 5), "ignored: key not seen here") << "other arch";
  EXPECT_EQ(listener.Handle(90, HashBytes("unseen").ToHex(), 5), "ignored: key not seen here");
  EXPECT_EQ(listener.Handle(90, "zz", 5), "ignored: bad key hash");
  EXPECT_EQ(listener.Handle(90, h.ToHex(), 5).substr(0, 11), "not served:") << "announced but not servable here";
  source.records[h.ToHex()] = 5;
  EXPECT_EQ(listener.Handle(90, h.ToHex(), 5), "swapped in record 5");
  EXPECT_EQ(e->kernel()->record_id, 5);
  EXPECT_EQ(listener.Handle(90, h.ToHex(), 5), "ignored: already loaded");
  source.fail_load = true;
  source.records[h.ToHex()] = 6;
  EXPECT_EQ(listener.Handle(90, h.ToHex(), 6).substr(0, 11), "load failed");
  EXPECT_EQ(e->state(), EntryState::kFailed);
  EXPECT_EQ(listener.swaps(), 1u);
}

TEST(ShimAnnouncements, StartsAndStopsWithoutKjitd) {
  FakeSource source;
  AnnouncementListener listener(&source, "ipc:///tmp/kjit-shim-test-no-daemon.sock");
  ASSERT_TRUE(listener.Start().ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  listener.Stop();  // within the receive timeout
}

}  // namespace
}  // namespace kjit::shim
