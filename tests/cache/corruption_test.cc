// Damage to stored records or to the file is detected; a damaged kernel is
// quarantined and never served; the rest stays usable.
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "cache_test_util.h"

namespace kjit::cache {
namespace {

using namespace testing;

void Sql(const std::string& path, const std::string& statement) {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  char* err = nullptr;
  ASSERT_EQ(sqlite3_exec(db, statement.c_str(), nullptr, nullptr, &err), SQLITE_OK) << (err ? err : "");
  sqlite3_close(db);
}

Hash128 Key(int64_t cols) { return OpKey::Decode(KeyBytes(cols))->Hash(); }

TEST(Corruption, FlippedCubinBytesAreQuarantinedOnLookup) {
  TempDir dir;
  const std::string path = dir.file("c.db");
  int64_t bad_id = 0;
  {
    auto cache = OpenOrDie(path);
    ASSERT_TRUE(cache->Insert(MakeRecord(1)).ok());
    bad_id = *cache->Insert(MakeRecord(2));
  }
  // Flip one byte in the middle of record 2's CUBIN.
  Sql(path, "UPDATE kernels SET cubin = substr(cubin, 1, 99) || x'ff' || substr(cubin, 101) WHERE id = " +
                std::to_string(bad_id));
  auto cache = OpenOrDie(path);
  auto bad = cache->Lookup(Key(2), kReader);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("quarantined"), std::string::npos) << bad.status().message();
  auto rec = cache->Get(bad_id);
  ASSERT_TRUE(rec.ok());
  EXPECT_EQ(rec->status, RecordStatus::kQuarantined);
  EXPECT_NE(rec->status_reason.find("CUBIN checksum"), std::string::npos) << rec->status_reason;
  EXPECT_TRUE(cache->Lookup(Key(1), kReader).ok());  // the rest is served
  EXPECT_FALSE(cache->Lookup(Key(2), kReader).ok());  // and stays out
}

// With a preference for the reader's GPU model (kernel_cache.h), a damaged record of
// that model is still quarantined and the next one of the model served, not another
// model's faster one.
TEST(Corruption, ADamagedRecordOfTheReadersModelGivesWayToTheNextOfItsModel) {
  TempDir dir;
  const std::string path = dir.file("c.db");
  int64_t other_model = 0, bad_id = 0, next_id = 0;
  {
    auto cache = OpenOrDie(path);
    auto timed_on = [](double median_us, const std::string& device) {
      KernelRecord r = MakeRecord(3, 4096, median_us);
      r.timing.device = device;
      r.cubin = Pattern(static_cast<uint64_t>(median_us), 4096);
      return r;
    };
    other_model = *cache->Insert(timed_on(1.0, "NVIDIA H100 GPU-1"));
    bad_id = *cache->Insert(timed_on(2.0, "NVIDIA H200 GPU-2"));
    next_id = *cache->Insert(timed_on(5.0, "NVIDIA H200 GPU-3"));
  }
  Sql(path, "UPDATE kernels SET cubin = substr(cubin, 1, 99) || x'ff' || substr(cubin, 101) WHERE id = " +
                std::to_string(bad_id));
  auto cache = OpenOrDie(path);
  ReaderContext h200 = kReader;
  h200.device_model = "NVIDIA H200";
  auto served = cache->Lookup(Key(3), h200);
  ASSERT_TRUE(served.ok()) << served.status().ToString();
  EXPECT_EQ(served->id, next_id);
  EXPECT_EQ(cache->Get(bad_id)->status, RecordStatus::kQuarantined);
  EXPECT_EQ(cache->Lookup(Key(3), kReader)->id, other_model);
}

TEST(Corruption, ChangedLaunchFieldsAreCaughtByTheServeChecksum) {
  TempDir dir;
  const std::string path = dir.file("c.db");
  { ASSERT_TRUE(OpenOrDie(path)->Insert(MakeRecord(3)).ok()); }
  Sql(path, "UPDATE kernels SET block_x = 2048");
  auto cache = OpenOrDie(path);
  EXPECT_FALSE(cache->Lookup(Key(3), kReader).ok());
  EXPECT_EQ(cache->List()->at(0).status, RecordStatus::kQuarantined);
}

TEST(Corruption, VerifyFindsChangedSourceAndReportsIt) {
  TempDir dir;
  const std::string path = dir.file("c.db");
  { ASSERT_TRUE(OpenOrDie(path)->Insert(MakeRecord(4)).ok()); }
  { ASSERT_TRUE(OpenOrDie(path)->Insert(MakeRecord(5)).ok()); }
  Sql(path, "UPDATE kernels SET source = 'int main;' WHERE entry_point = 'softmax_5'");
  auto cache = OpenOrDie(path);
  auto rep = cache->Verify(&kReader);
  ASSERT_TRUE(rep.ok());
  EXPECT_TRUE(rep->integrity_ok);
  EXPECT_EQ(rep->checked, 2u);
  ASSERT_EQ(rep->quarantined.size(), 1u);
  EXPECT_NE(rep->quarantined[0].reason.find("record checksum"), std::string::npos);
  EXPECT_FALSE(cache->Lookup(Key(5), kReader).ok());
  EXPECT_TRUE(cache->Lookup(Key(4), kReader).ok());
  // A second run finds nothing new.
  EXPECT_TRUE(cache->Verify()->quarantined.empty());
}

TEST(Corruption, VerifyListsToolchainMismatchesWithoutQuarantining) {
  TempDir dir;
  auto cache = OpenOrDie(dir.file("c.db"));
  ASSERT_TRUE(cache->Insert(MakeRecord(6)).ok());
  ReaderContext newer = kReader;
  newer.toolchain.driver_version = 13010;
  auto rep = cache->Verify(&newer);
  ASSERT_TRUE(rep.ok());
  EXPECT_TRUE(rep->quarantined.empty());
  ASSERT_EQ(rep->mismatched.size(), 1u);
  EXPECT_NE(rep->mismatched[0].reason.find("driver 13.0"), std::string::npos) << rep->mismatched[0].reason;
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void WriteAll(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

TEST(Corruption, FlippedBytesInTheFileAreDetectedInTheBlob) {
  TempDir dir;
  const std::string path = dir.file("c.db");
  {
    auto cache = OpenOrDie(path);
    for (int i = 1; i <= 3; ++i) ASSERT_TRUE(cache->Insert(MakeRecord(i, 20000)).ok());
  }  // closing the last connection checkpoints the WAL into the file
  ASSERT_FALSE(std::filesystem::exists(path + "-wal"));
  std::string bytes = ReadAll(path);
  const size_t at = bytes.find(Pattern(2, 20000).substr(5000, 64));
  ASSERT_NE(at, std::string::npos) << "record 2's CUBIN bytes not found in the file";
  bytes[at + 10] = static_cast<char>(bytes[at + 10] ^ 0x5a);
  WriteAll(path, bytes);

  auto cache = OpenOrDie(path);
  EXPECT_FALSE(cache->Lookup(Key(2), kReader).ok());
  for (int i : {1, 3}) {
    auto served = cache->Lookup(Key(i), kReader);
    ASSERT_TRUE(served.ok()) << i << ": " << served.status().ToString();
    EXPECT_EQ(served->cubin, Pattern(static_cast<uint64_t>(i), 20000));
  }
}

// Flips bytes at random places of a copy of the file, many times over. Whatever
// happens to the file, nothing crashes, and every kernel that is served is
// exactly the one that was stored.
TEST(Corruption, RandomFileDamageNeverServesABadKernel) {
  TempDir dir;
  const std::string pristine = dir.file("pristine.db");
  {
    auto cache = OpenOrDie(pristine);
    for (int i = 1; i <= 6; ++i) ASSERT_TRUE(cache->Insert(MakeRecord(i, 3000 * static_cast<size_t>(i))).ok());
  }
  const std::string good = ReadAll(pristine);
  std::mt19937 rng(7);
  int detected = 0, served_total = 0;
  for (int round = 0; round < 60; ++round) {
    std::string bytes = good;
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int f = 0; f < flips; ++f) {
      const size_t at = 100 + rng() % (bytes.size() - 100);  // past the 100-byte file header
      bytes[at] = static_cast<char>(bytes[at] ^ (1 + rng() % 255));
    }
    const std::string path = dir.file("damaged-" + std::to_string(round) + ".db");
    WriteAll(path, bytes);
    OpenOptions o;
    o.path = path;
    auto cache = KernelCache::Open(o);
    if (!cache.ok()) {
      ++detected;  // refused with an error: fine
      continue;
    }
    auto rep = (*cache)->Verify(&kReader);
    if (!rep.ok() || !rep->integrity_ok || !rep->quarantined.empty()) ++detected;
    for (int i = 1; i <= 6; ++i) {
      auto served = (*cache)->Lookup(Key(i), kReader);
      if (!served.ok()) continue;
      ++served_total;
      EXPECT_EQ(served->cubin, Pattern(static_cast<uint64_t>(i), 3000 * static_cast<size_t>(i))) << "round " << round;
      EXPECT_EQ(served->entry_point, "softmax_" + std::to_string(i)) << "round " << round;
    }
  }
  EXPECT_GT(detected, 0);
  EXPECT_GT(served_total, 0);
}

}  // namespace
}  // namespace kjit::cache
