// Several processes on one cache file: concurrent writers and readers, and a
// writer killed with SIGKILL at random points.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <map>
#include <random>
#include <thread>

#include "cache_test_util.h"

namespace kjit::cache {
namespace {

using namespace testing;

constexpr int kKeys = 12;

Hash128 Key(int64_t cols) { return OpKey::Decode(KeyBytes(cols))->Hash(); }

// A record for a shared key whose CUBIN and entry point say who wrote it.
KernelRecord Written(int writer, int key, int serial) {
  KernelRecord r = MakeRecord(key, 1, 1.0 + serial);
  const uint64_t seed = static_cast<uint64_t>(writer) * 1000003u + static_cast<uint64_t>(key) * 1009u +
                        static_cast<uint64_t>(serial);
  r.cubin = Pattern(seed, 2000 + (seed % 50000));
  r.entry_point = "w" + std::to_string(writer) + "_k" + std::to_string(key) + "_s" + std::to_string(serial);
  return r;
}

// Every served kernel must be exactly one written record, never a mixture.
bool ServedIsWhole(const ServedKernel& s) {
  int w = 0, k = 0, n = 0;
  if (std::sscanf(s.entry_point.c_str(), "w%d_k%d_s%d", &w, &k, &n) != 3) return false;
  return s.cubin == Written(w, k, n).cubin;
}

int RunWriterReader(const std::string& path, int writer) {
  OpenOptions o;
  o.path = path;
  o.busy_timeout = std::chrono::milliseconds(20000);
  auto cache = KernelCache::Open(o);
  if (!cache.ok()) {
    fprintf(stderr, "writer %d open: %s\n", writer, cache.status().ToString().c_str());
    return 2;
  }
  std::mt19937 rng(static_cast<unsigned>(writer));
  for (int serial = 0; serial < 40; ++serial) {
    const int key = 1 + static_cast<int>(rng() % kKeys);
    auto id = (*cache)->Insert(Written(writer, key, serial));
    if (!id.ok()) {
      fprintf(stderr, "writer %d insert: %s\n", writer, id.status().ToString().c_str());
      return 3;
    }
    for (int k = 1; k <= kKeys; ++k) {
      auto served = (*cache)->Lookup(Key(k), kReader);
      if (served.ok() && !ServedIsWhole(*served)) {
        fprintf(stderr, "writer %d: torn record for key %d\n", writer, k);
        return 4;
      }
      if (!served.ok() && served.status().code() != StatusCode::kNotFound) {
        fprintf(stderr, "writer %d lookup: %s\n", writer, served.status().ToString().c_str());
        return 5;
      }
    }
    std::vector<UseReport> uses = {{Key(key), *id, 1, 1, ""}};
    if (!(*cache)->RecordUses(uses).ok()) return 6;
  }
  return 0;
}

TEST(Processes, ConcurrentWritersAndReadersSeeWholeRecords) {
  TempDir dir;
  const std::string path = dir.file("c.db");
  { OpenOrDie(path); }  // create before the children race to
  constexpr int kWriters = 4;
  std::vector<pid_t> children;
  for (int w = 1; w <= kWriters; ++w) {
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) _exit(RunWriterReader(path, w));
    children.push_back(pid);
  }
  for (pid_t pid : children) {
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 0);
  }
  auto cache = OpenOrDie(path);
  auto stats = cache->Stats();
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->records, static_cast<uint64_t>(kWriters * 40));
  EXPECT_EQ(stats->hits, static_cast<uint64_t>(kWriters * 40));
  auto rep = cache->Verify();
  ASSERT_TRUE(rep.ok());
  EXPECT_TRUE(rep->integrity_ok) << rep->integrity_message;
  EXPECT_TRUE(rep->quarantined.empty());
}

// A tuner process: claims tasks until none is left, writing each claimed id to `out`, one per line.
int ClaimAll(const std::string& path, int tuner, const std::string& out) {
  OpenOptions o;
  o.path = path;
  o.busy_timeout = std::chrono::milliseconds(20000);
  auto cache = KernelCache::Open(o);
  if (!cache.ok()) return 2;
  FILE* f = std::fopen(out.c_str(), "w");
  if (f == nullptr) return 3;
  ClaimOptions claim;
  claim.claimer = "tuner-" + std::to_string(tuner);
  while (true) {
    auto t = (*cache)->tasks().ClaimTask(claim);
    if (!t.ok()) {
      std::fclose(f);
      return 4;
    }
    if (!t->has_value()) break;
    std::fprintf(f, "%lld\n", static_cast<long long>((*t)->id));
    TaskResult done;
    done.state = "done";
    done.detail = "claimed by " + claim.claimer;
    if (!(*cache)->tasks().CompleteTask((*t)->id, claim.claimer, done).ok()) {
      std::fclose(f);
      return 5;
    }
  }
  std::fclose(f);
  return 0;
}

// Tuners in several processes share one queue: every task is claimed exactly once.
TEST(Processes, ConcurrentTunersClaimEachTaskOnce) {
  TempDir dir;
  const std::string path = dir.file("c.db");
  constexpr int kTasks = 60, kTuners = 4;
  {
    auto cache = OpenOrDie(path);
    for (int k = 1; k <= kTasks; ++k) ASSERT_TRUE(cache->tasks().AddMiss(KeyBytes(k), 1, 1.0).ok());
  }
  std::vector<pid_t> children;
  for (int t = 0; t < kTuners; ++t) {
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) _exit(ClaimAll(path, t, dir.file("claims" + std::to_string(t))));
    children.push_back(pid);
  }
  for (pid_t pid : children) {
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 0);
  }
  std::map<long long, int> claims;
  for (int t = 0; t < kTuners; ++t) {
    FILE* f = std::fopen(dir.file("claims" + std::to_string(t)).c_str(), "r");
    ASSERT_NE(f, nullptr);
    long long id = 0;
    while (std::fscanf(f, "%lld", &id) == 1) ++claims[id];
    std::fclose(f);
  }
  EXPECT_EQ(claims.size(), static_cast<size_t>(kTasks));
  for (const auto& [id, n] : claims) EXPECT_EQ(n, 1) << "task " << id;
  EXPECT_EQ(OpenOrDie(path)->tasks().ListTasks("done")->size(), static_cast<size_t>(kTasks));
}

[[noreturn]] void WriteForever(const std::string& path, int round) {
  OpenOptions o;
  o.path = path;
  auto cache = KernelCache::Open(o);
  if (!cache.ok()) _exit(2);
  for (int serial = 0;; ++serial) {
    const int key = 1 + serial % kKeys;
    auto id = (*cache)->Insert(Written(round, key, serial));
    if (!id.ok()) _exit(3);
    if (serial % 5 == 4) (void)(*cache)->Remove(*id - 2);
    std::vector<UseReport> uses = {{Key(key), *id, 3, 1, ""}};
    (void)(*cache)->RecordUses(uses);
  }
}

TEST(Processes, WriterKilledAtRandomPointsLeavesNoHalfRecord) {
  TempDir dir;
  const std::string path = dir.file("c.db");
  { OpenOrDie(path); }
  std::mt19937 rng(99);
  for (int round = 1; round <= 30; ++round) {
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) WriteForever(path, round);
    std::this_thread::sleep_for(std::chrono::microseconds(2000 + rng() % 60000));
    ASSERT_EQ(kill(pid, SIGKILL), 0);
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFSIGNALED(status)) << "the writer stopped by itself with " << WEXITSTATUS(status);

    auto cache = OpenOrDie(path);
    auto rep = cache->Verify();
    ASSERT_TRUE(rep.ok()) << rep.status().ToString();
    ASSERT_TRUE(rep->integrity_ok) << "round " << round << ": " << rep->integrity_message;
    ASSERT_TRUE(rep->quarantined.empty()) << "round " << round << ": " << rep->quarantined[0].reason;
    for (int k = 1; k <= kKeys; ++k) {
      auto served = cache->Lookup(Key(k), kReader);
      if (served.ok()) {
        EXPECT_TRUE(ServedIsWhole(*served)) << "round " << round;
      }
    }
  }
  auto cache = OpenOrDie(path);
  EXPECT_GT(cache->Stats()->records, 0u) << "no writer got far enough to commit anything";
}

}  // namespace
}  // namespace kjit::cache
