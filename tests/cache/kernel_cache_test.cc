#include "kjit/cache/kernel_cache.h"

#include <gtest/gtest.h>
#include <sqlite3.h>

#include <fstream>
#include <map>

#include "cache_test_util.h"

namespace kjit::cache {
namespace {

using namespace testing;

TEST(KernelCache, CreatesAFreshCacheAtTheCurrentSchema) {
  TempDir dir;
  auto cache = OpenOrDie(dir.file("sub/dir/cache.db"));
  EXPECT_EQ(cache->schema_version(), kSchemaVersion);
  EXPECT_EQ(cache->size_limit(), 1ull << 30);
  auto stats = cache->Stats();
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->records, 0u);
}

TEST(KernelCache, DefaultPathFollowsEnvironment) {
  setenv("KJIT_CACHE", "/x/mine.db", 1);
  EXPECT_EQ(DefaultCachePath(), "/x/mine.db");
  unsetenv("KJIT_CACHE");
  setenv("KJIT_CACHE_DIR", "/x/dir", 1);
  EXPECT_EQ(DefaultCachePath(), "/x/dir/cache.db");
  unsetenv("KJIT_CACHE_DIR");
}

TEST(KernelCache, InsertThenGetKeepsEveryField) {
  TempDir dir;
  auto cache = OpenOrDie(dir.file("c.db"));
  KernelRecord in = MakeRecord(1024);
  auto id = cache->Insert(in);
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  auto out = cache->Get(*id);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(out->key_bytes, in.key_bytes);
  EXPECT_EQ(out->key_text, "aten::_softmax(f32[64,1024], -1, False) sm_90");
  EXPECT_EQ(out->key_hash, OpKey::Decode(in.key_bytes)->Hash());
  EXPECT_EQ(out->op, "aten::_softmax");
  EXPECT_EQ(out->arch, 90);
  EXPECT_EQ(out->source, in.source);
  EXPECT_EQ(out->compile_options, in.compile_options);
  EXPECT_EQ(out->entry_point, in.entry_point);
  EXPECT_EQ(out->cubin, in.cubin);
  EXPECT_EQ(out->launch, in.launch);
  EXPECT_EQ(out->design, in.design);
  EXPECT_EQ(out->timing, in.timing);
  EXPECT_EQ(out->baseline, in.baseline);
  EXPECT_EQ(out->verification, in.verification);
  EXPECT_EQ(out->toolchain, in.toolchain);
  EXPECT_EQ(out->status, RecordStatus::kVerified);
  EXPECT_GT(out->created_unix_ms, 0);
  EXPECT_EQ(out->cubin_checksum, HashBytes(in.cubin));
  EXPECT_EQ(out->record_checksum, out->ComputeRecordChecksum());
  EXPECT_DOUBLE_EQ(out->speedup(), 2.0);
}

TEST(KernelCache, RejectsARecordWhoseKeyDoesNotDecode) {
  TempDir dir;
  auto cache = OpenOrDie(dir.file("c.db"));
  KernelRecord r = MakeRecord(1);
  r.key_bytes = "garbage";
  EXPECT_EQ(cache->Insert(r).status().code(), StatusCode::kCorruption);
}

TEST(KernelCache, LookupServesOnlyVerifiedMatchingRecords) {
  TempDir dir;
  auto cache = OpenOrDie(dir.file("c.db"));
  const Hash128 key = OpKey::Decode(KeyBytes(2048))->Hash();
  EXPECT_EQ(cache->Lookup(key, kReader).status().code(), StatusCode::kNotFound);

  KernelRecord candidate = MakeRecord(2048, 4096, 1.0);
  candidate.status = RecordStatus::kCandidate;
  ASSERT_TRUE(cache->Insert(candidate).ok());
  EXPECT_EQ(cache->Lookup(key, kReader).status().code(), StatusCode::kNotFound);

  auto slow = cache->Insert(MakeRecord(2048, 4096, 20.0));
  auto fast = cache->Insert(MakeRecord(2048, 4096, 5.0));
  ASSERT_TRUE(slow.ok() && fast.ok());
  auto served = cache->Lookup(key, kReader);
  ASSERT_TRUE(served.ok()) << served.status().ToString();
  EXPECT_EQ(served->id, *fast);  // the fastest verified record
  EXPECT_EQ(served->cubin, Pattern(2048, 4096));
  EXPECT_EQ(served->entry_point, "softmax_2048");
  EXPECT_EQ(served->launch.block[0], 256u);

  ReaderContext other_arch = kReader;
  other_arch.arch = 100;
  auto a = cache->Lookup(key, other_arch);
  ASSERT_EQ(a.status().code(), StatusCode::kNotFound);
  EXPECT_NE(a.status().message().find("sm_90"), std::string::npos) << a.status().message();

  ReaderContext other_nvrtc = kReader;
  other_nvrtc.toolchain.nvrtc_minor = 1;
  auto b = cache->Lookup(key, other_nvrtc);
  ASSERT_EQ(b.status().code(), StatusCode::kNotFound);
  EXPECT_NE(b.status().message().find("nvrtc 13.0"), std::string::npos) << b.status().message();

  ReaderContext other_driver = kReader;
  other_driver.toolchain.driver_version = 12080;
  EXPECT_EQ(cache->Lookup(key, other_driver).status().code(), StatusCode::kNotFound);
}

// A kernel is verified against one PyTorch's kernels and output layouts: a reader with another PyTorch is not
// served it, nor a record that does not say; a reader that names none (tools) is served any; a changed
// torch_version column fails the record's checksums.
TEST(KernelCache, OnlyTheReadersPyTorchVersionIsServed) {
  TempDir dir;
  auto cache = OpenOrDie(dir.file("c.db"));
  KernelRecord r = MakeRecord(512);
  r.torch_version = "2.11.0";
  auto id = cache->Insert(r);
  ASSERT_TRUE(id.ok());
  const Hash128 key = OpKey::Decode(KeyBytes(512))->Hash();
  ReaderContext same = kReader;
  same.torch_version = "2.11.0";
  EXPECT_EQ(cache->Lookup(key, same)->id, *id);
  EXPECT_EQ(cache->Lookup(key, kReader)->id, *id) << "a reader that names no PyTorch";
  ReaderContext other = kReader;
  other.torch_version = "2.10.0";
  auto refused = cache->Lookup(key, other);
  ASSERT_EQ(refused.status().code(), StatusCode::kNotFound);
  EXPECT_NE(refused.status().message().find("verified under PyTorch 2.11.0, reader has PyTorch 2.10.0"),
            std::string::npos)
      << refused.status().message();
  EXPECT_EQ(cache->BestVerified(key, "", "2.11.0")->id, *id);
  EXPECT_EQ(cache->BestVerified(key, "", "2.10.0")->id, 0);
  EXPECT_EQ(cache->Get(*id)->torch_version, "2.11.0");
  auto verify = cache->Verify(&other);
  ASSERT_TRUE(verify.ok());
  EXPECT_EQ(verify->mismatched.size(), 1u);

  auto unrecorded = cache->Insert(MakeRecord(513));  // before schema 6: no version
  ASSERT_TRUE(unrecorded.ok());
  const Hash128 key2 = OpKey::Decode(KeyBytes(513))->Hash();
  auto unknown = cache->Lookup(key2, same);
  ASSERT_EQ(unknown.status().code(), StatusCode::kNotFound);
  EXPECT_NE(unknown.status().message().find("an unrecorded PyTorch version"), std::string::npos);

  // The column is covered by the serve checksum: changed on disk, the record is quarantined at lookup.
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(dir.file("c.db").c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, "UPDATE kernels SET torch_version = '2.10.0' WHERE torch_version = '2.11.0'", nullptr,
                         nullptr, nullptr),
            SQLITE_OK);
  sqlite3_close(db);
  EXPECT_EQ(cache->Lookup(key, other).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(cache->Get(*id)->status, RecordStatus::kQuarantined);
}

// The output layouts the evaluator verified travel with the record to the reader, covered by its checksum.
TEST(KernelCache, VerifiedOutputLayoutsReachTheReader) {
  TempDir dir;
  auto cache = OpenOrDie(dir.file("c.db"));
  KernelRecord plain = MakeRecord(600);
  KernelRecord r = MakeRecord(601);
  r.verification.outputs = {{true, 6, {64, 601}, {601, 1}}, {false, 0, {}, {}}};
  EXPECT_NE(r.ComputeRecordChecksum(), MakeRecord(601).ComputeRecordChecksum());
  auto plain_id = cache->Insert(plain);
  auto id = cache->Insert(r);
  ASSERT_TRUE(plain_id.ok() && id.ok());
  EXPECT_TRUE(cache->Get(*plain_id)->verification.outputs.empty());
  EXPECT_EQ(cache->Get(*id)->verification.outputs, r.verification.outputs);
  auto served = cache->Lookup(OpKey::Decode(KeyBytes(601))->Hash(), kReader);
  ASSERT_TRUE(served.ok()) << served.status().ToString();
  EXPECT_EQ(served->outputs, r.verification.outputs);
  EXPECT_TRUE(cache->Lookup(OpKey::Decode(KeyBytes(600))->Hash(), kReader)->outputs.empty());
  auto verify = cache->Verify();
  ASSERT_TRUE(verify.ok());
  EXPECT_TRUE(verify->quarantined.empty());
}

TEST(KernelCache, TimedModelIsTheDeviceNameWithoutItsUuid) {
  EXPECT_EQ(TimedModel("NVIDIA H200 GPU-6d75a55a-1c2e-4f3b-9a0d-0123456789ab"), "NVIDIA H200");
  EXPECT_EQ(TimedModel("NVIDIA H100 80GB HBM3 GPU-1111"), "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(TimedModel("NVIDIA A100-SXM4-40GB MIG-2222"), "NVIDIA A100-SXM4-40GB");
  EXPECT_EQ(TimedModel("NVIDIA H200"), "NVIDIA H200");  // no UUID: all of it
  EXPECT_EQ(TimedModel("GPU-6d75a55a"), "");           // a UUID alone: no model
  EXPECT_EQ(TimedModel(""), "");
}

// One arch spans GPU models whose timings do not compare (an H100's and an H200's
// are both sm_90): a reader is served the fastest record timed on its own model, and
// the fastest of all only when its model has none.
TEST(KernelCache, LookupPrefersRecordsTimedOnTheReadersModel) {
  TempDir dir;
  auto cache = OpenOrDie(dir.file("c.db"));
  const Hash128 key = OpKey::Decode(KeyBytes(2048))->Hash();
  auto timed_on = [](double median_us, const std::string& device) {
    KernelRecord r = MakeRecord(2048, 4096, median_us);
    r.timing.device = r.baseline.device = device;
    r.cubin = Pattern(static_cast<uint64_t>(median_us * 10), 4096);  // another kernel each
    return r;
  };
  const int64_t unknown = *cache->Insert(timed_on(3.0, ""));  // stored before records named their GPU
  const int64_t h100 = *cache->Insert(timed_on(4.0, "NVIDIA H100 80GB HBM3 GPU-1111"));
  const int64_t h200_slower = *cache->Insert(timed_on(9.0, "NVIDIA H200 GPU-3333"));
  const int64_t h200 = *cache->Insert(timed_on(6.0, "NVIDIA H200 GPU-2222"));

  auto served_to = [&](const std::string& model) {
    ReaderContext reader = kReader;
    reader.device_model = model;
    auto served = cache->Lookup(key, reader);
    EXPECT_TRUE(served.ok()) << served.status().ToString();
    return served.ok() ? served->id : int64_t{-1};
  };
  EXPECT_EQ(served_to(""), unknown) << "no model: the fastest of all";
  EXPECT_EQ(served_to("NVIDIA H200"), h200);
  EXPECT_EQ(served_to("NVIDIA H100 80GB HBM3"), h100);
  EXPECT_EQ(served_to("NVIDIA H100"), unknown) << "a model name is matched whole, not as a prefix";
  EXPECT_EQ(served_to("NVIDIA H800"), unknown) << "none timed on this model: the fastest of all";
  // Which says so, and which model timed it ("?": the record does not say), so the reader asks for a retiming.
  auto other = [&](const std::string& model) {
    ReaderContext reader = kReader;
    reader.device_model = model;
    auto served = cache->Lookup(key, reader);
    return served.ok() ? served->timed_on_other_model : "lookup failed";
  };
  EXPECT_EQ(other("NVIDIA H800"), "?");
  EXPECT_EQ(other("NVIDIA H200"), "");
  EXPECT_EQ(other(""), "");
  std::map<int64_t, std::string> listed;  // what `kjit cache ls --json` shows as timed_on
  auto summaries = cache->List();
  ASSERT_TRUE(summaries.ok()) << summaries.status().ToString();
  for (const RecordSummary& r : *summaries) listed[r.id] = r.timed_on;
  EXPECT_EQ(listed, (std::map<int64_t, std::string>{
                        {unknown, ""}, {h100, "NVIDIA H100 80GB HBM3"}, {h200_slower, "NVIDIA H200"}, {h200, "NVIDIA H200"}}));

  ASSERT_TRUE(cache->SetStatus(h200, RecordStatus::kRejected, "test").ok());
  EXPECT_EQ(served_to("NVIDIA H200"), h200_slower) << "only verified records count";
  ASSERT_TRUE(cache->SetStatus(h200_slower, RecordStatus::kRejected, "test").ok());
  EXPECT_EQ(served_to("NVIDIA H200"), unknown);
  ASSERT_TRUE(cache->SetStatus(unknown, RecordStatus::kRejected, "test").ok());
  EXPECT_EQ(served_to("NVIDIA H200"), h100);
  EXPECT_EQ(other("NVIDIA H200"), "NVIDIA H100 80GB HBM3");

  // The best verified record per model, against which kjitd weighs a new kernel before storing it.
  auto best = [&](const std::string& model) {
    auto b = cache->BestVerified(key, model);
    EXPECT_TRUE(b.ok()) << b.status().ToString();
    return b.ok() ? std::make_pair(b->id, b->median_us) : std::make_pair(int64_t{-1}, 0.0);
  };
  EXPECT_EQ(best("NVIDIA H100 80GB HBM3"), std::make_pair(h100, 4.0));
  EXPECT_EQ(best("NVIDIA H200"), std::make_pair(int64_t{0}, 0.0)) << "its two were rejected above";
  EXPECT_EQ(best(""), std::make_pair(h100, 4.0));
  ASSERT_TRUE(cache->SetStatus(unknown, RecordStatus::kVerified, "test").ok());
  EXPECT_EQ(best("NVIDIA H200"), std::make_pair(unknown, 3.0)) << "a record without a model counts for every model";
}

// kjitd asks before storing a kernel it verified again: only a verified record serving exactly the same
// kernel (serve checksum: key, entry point, launch, toolchain, CUBIN) counts; timings and sources do not.
TEST(KernelCache, FindVerifiedMatchesTheServedKernelOnly) {
  TempDir dir;
  auto cache = OpenOrDie(dir.file("c.db"));
  const KernelRecord kernel = MakeRecord(2048, 4096, 5.0);
  EXPECT_EQ(*cache->FindVerified(kernel), 0);
  KernelRecord candidate = kernel;
  candidate.status = RecordStatus::kCandidate;
  ASSERT_TRUE(cache->Insert(candidate).ok());
  EXPECT_EQ(*cache->FindVerified(kernel), 0);  // not verified: not serving it
  auto id = cache->Insert(kernel);
  ASSERT_TRUE(id.ok());

  KernelRecord retimed = kernel;  // measured again, from another source text: the same kernel
  retimed.timing.median_us = 6.0;
  retimed.source += "// again\n";
  EXPECT_EQ(*cache->FindVerified(retimed), *id);

  KernelRecord wider = kernel;
  wider.launch.block[0] = 512;
  EXPECT_EQ(*cache->FindVerified(wider), 0);
  KernelRecord other_cubin = kernel;
  other_cubin.cubin[0] ^= 1;
  EXPECT_EQ(*cache->FindVerified(other_cubin), 0);
  KernelRecord other_toolchain = kernel;
  other_toolchain.toolchain.nvrtc_minor = 1;
  EXPECT_EQ(*cache->FindVerified(other_toolchain), 0);
  EXPECT_EQ(*cache->FindVerified(MakeRecord(1024)), 0);  // another key

  KernelRecord bad_key = kernel;
  bad_key.key_bytes = "not a key";
  EXPECT_FALSE(cache->FindVerified(bad_key).ok());

  // Timed on another GPU model: not the same record for readers of that model, so it is stored again.
  KernelRecord on_h100 = kernel;
  on_h100.timing.device = "NVIDIA H100 80GB HBM3 GPU-1111";
  EXPECT_EQ(*cache->FindVerified(on_h100), 0);
  auto h100_id = cache->Insert(on_h100);
  ASSERT_TRUE(h100_id.ok());
  EXPECT_EQ(*cache->FindVerified(on_h100), *h100_id);
  EXPECT_EQ(*cache->FindVerified(kernel), *id);
  KernelRecord unknown_model = kernel;  // a record that does not say: any model's will do
  unknown_model.timing.device.clear();
  EXPECT_EQ(*cache->FindVerified(unknown_model), *id);
}

TEST(KernelCache, UseCountsAndHitMissCounters) {
  TempDir dir;
  auto cache = OpenOrDie(dir.file("c.db"));
  auto id = cache->Insert(MakeRecord(64));
  ASSERT_TRUE(id.ok());
  const Hash128 hit_key = OpKey::Decode(KeyBytes(64))->Hash();
  const Hash128 miss_key = OpKey::Decode(KeyBytes(65))->Hash();
  std::vector<UseReport> uses = {{hit_key, *id, 10, 0, "k64"}, {miss_key, 0, 0, 3, "k65"}};
  ASSERT_TRUE(cache->RecordUses(uses).ok());
  ASSERT_TRUE(cache->RecordUses(uses).ok());
  auto rec = cache->Get(*id);
  ASSERT_TRUE(rec.ok());
  EXPECT_EQ(rec->use_count, 20u);
  auto stats = cache->Stats();
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->keys_seen, 2u);
  EXPECT_EQ(stats->hits, 20u);
  EXPECT_EQ(stats->misses, 6u);
  EXPECT_NEAR(stats->hit_rate(), 20.0 / 26.0, 1e-12);
}

// Each run keeps its own per-key counters beside the all-time ones; only the newest kMaxRunsKept runs stay.
TEST(KernelCache, RunsKeepTheirOwnCountersAndOnlyTheNewestAreKept) {
  TempDir dir;
  auto cache = OpenOrDie(dir.file("c.db"));
  const Hash128 a = OpKey::Decode(KeyBytes(64))->Hash(), b = OpKey::Decode(KeyBytes(65))->Hash();
  const RunInfo kEmptyRun{};
  const RunInfo first{"first", 10, "python3 app.py", 1000};
  ASSERT_TRUE(cache->RecordUses(std::vector<UseReport>{{a, 0, 4, 1, "ka"}, {b, 0, 0, 2, "kb"}}, &first).ok());
  ASSERT_TRUE(cache->RecordUses(std::vector<UseReport>{{a, 0, 1, 0, ""}}, &first).ok());
  ASSERT_TRUE(cache->RecordUses(std::vector<UseReport>{{a, 0, 100, 0, ""}}).ok());  // no run: all-time only
  auto keys = cache->ListRunKeyStats("first");
  ASSERT_TRUE(keys.ok()) << keys.status().ToString();
  ASSERT_EQ(keys->size(), 2u);
  EXPECT_EQ((*keys)[0].key_text, "ka");
  EXPECT_EQ((*keys)[0].hits, 5u);
  EXPECT_EQ((*keys)[0].misses, 1u);
  EXPECT_EQ((*keys)[1].misses, 2u);
  EXPECT_EQ(cache->ListRunKeyStats("nope").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(cache->RecordUses(std::vector<UseReport>{{a, 0, 1, 0, ""}}, &kEmptyRun).code(),
            StatusCode::kInvalidArgument);

  for (int i = 0; i < kMaxRunsKept + 5; ++i) {
    const RunInfo run{"run-" + std::to_string(i), 20, "p", 0};
    ASSERT_TRUE(cache->RecordUses(std::vector<UseReport>{{b, 0, 1, 0, ""}}, &run).ok());
  }
  auto runs = cache->ListRuns();
  ASSERT_TRUE(runs.ok());
  EXPECT_EQ(runs->size(), static_cast<size_t>(kMaxRunsKept));
  EXPECT_EQ(cache->ListRunKeyStats("first").status().code(), StatusCode::kNotFound) << "the oldest run was dropped";
  EXPECT_EQ(cache->ListRuns(3)->size(), 3u);
  auto stats = cache->Stats();
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->hits, 5u + 100u + kMaxRunsKept + 5u) << "dropping a run keeps the all-time counters";
}

TEST(KernelCache, ListFiltersAndSorts) {
  TempDir dir;
  auto cache = OpenOrDie(dir.file("c.db"));
  for (int i = 1; i <= 5; ++i) {
    KernelRecord r = MakeRecord(i * 100, static_cast<size_t>(1000 * i), 10.0 / i);
    r.baseline.median_us = 10.0;  // speedup i
    if (i == 5) r.status = RecordStatus::kRejected;
    ASSERT_TRUE(cache->Insert(r).ok());
  }
  ListFilter f;
  f.sort = ListFilter::SortBy::kSize;
  auto all = cache->List(f);
  ASSERT_TRUE(all.ok());
  ASSERT_EQ(all->size(), 5u);
  EXPECT_GT((*all)[0].size_bytes, (*all)[4].size_bytes);

  f.status = RecordStatus::kVerified;
  f.sort = ListFilter::SortBy::kSpeedup;
  f.limit = 2;
  auto best = cache->List(f);
  ASSERT_TRUE(best.ok());
  ASSERT_EQ(best->size(), 2u);
  EXPECT_NEAR((*best)[0].speedup, 4.0, 1e-9);  // the rejected 5x one is filtered out
  EXPECT_EQ((*best)[0].key_text, "aten::_softmax(f32[64,400], -1, False) sm_90");
  EXPECT_NEAR((*best)[1].speedup, 3.0, 1e-9);

  ListFilter none;
  none.op = "aten::gelu";
  EXPECT_TRUE(cache->List(none)->empty());
  ListFilter arch;
  arch.arch = 80;
  EXPECT_TRUE(cache->List(arch)->empty());
}

TEST(KernelCache, ResolvesIdsAndHashPrefixes) {
  TempDir dir;
  auto cache = OpenOrDie(dir.file("c.db"));
  auto id = cache->Insert(MakeRecord(777));
  ASSERT_TRUE(id.ok());
  const std::string hex = OpKey::Decode(KeyBytes(777))->Hash().ToHex();
  EXPECT_EQ(*cache->Resolve(std::to_string(*id)), std::vector<int64_t>{*id});
  EXPECT_EQ(*cache->Resolve(hex.substr(0, 8)), std::vector<int64_t>{*id});
  EXPECT_EQ(*cache->Resolve(hex), std::vector<int64_t>{*id});
  EXPECT_EQ(cache->Resolve("zzzz").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(cache->Resolve("999999").status().code(), StatusCode::kNotFound);
}

TEST(KernelCache, RemoveAndSetStatus) {
  TempDir dir;
  auto cache = OpenOrDie(dir.file("c.db"));
  auto id = cache->Insert(MakeRecord(5));
  ASSERT_TRUE(id.ok());
  const Hash128 key = OpKey::Decode(KeyBytes(5))->Hash();
  ASSERT_TRUE(cache->SetStatus(*id, RecordStatus::kRejected, "slower on re-measure").ok());
  EXPECT_FALSE(cache->Lookup(key, kReader).ok());
  EXPECT_EQ(cache->Get(*id)->status_reason, "slower on re-measure");
  ASSERT_TRUE(cache->Remove(*id).ok());
  EXPECT_EQ(cache->Remove(*id).code(), StatusCode::kNotFound);
  EXPECT_EQ(cache->SetStatus(*id, RecordStatus::kVerified, "").code(), StatusCode::kNotFound);
}

TEST(KernelCache, EvictsLeastRecentlyUsedPastTheLimit) {
  TempDir dir;
  auto cache = OpenOrDie(dir.file("c.db"));
  const uint64_t each = MakeRecord(1, 10000).size_bytes();
  ASSERT_TRUE(cache->SetSizeLimit(each * 3 + each / 2).ok());
  std::vector<int64_t> ids;
  for (int i = 1; i <= 3; ++i) {
    KernelRecord r = MakeRecord(i, 10000);
    r.created_unix_ms = 1000 * i;  // oldest first
    ids.push_back(*cache->Insert(r));
  }
  // Using record 1 makes record 2 the least recently used.
  const Hash128 key1 = OpKey::Decode(KeyBytes(1))->Hash();
  ASSERT_TRUE(cache->RecordUses(std::vector<UseReport>{{key1, ids[0], 1, 0, ""}}).ok());
  ASSERT_TRUE(cache->Insert(MakeRecord(4, 10000)).ok());  // over the limit now
  EXPECT_TRUE(cache->Get(ids[0]).ok());
  EXPECT_EQ(cache->Get(ids[1]).status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(cache->Get(ids[2]).ok());
  EXPECT_LE(cache->Stats()->bytes, cache->size_limit());

  auto rep = cache->Evict(0);
  ASSERT_TRUE(rep.ok());
  EXPECT_EQ(rep->removed, 3u);
  EXPECT_EQ(rep->remaining_bytes, 0u);
  EXPECT_EQ(cache->Stats()->records, 0u);
}

TEST(KernelCache, RefusesFilesThatAreNotKjitCaches) {
  TempDir dir;
  {
    std::ofstream(dir.file("junk.db")) << "this is not an sqlite database, just text that is long enough......";
  }
  OpenOptions o;
  o.path = dir.file("junk.db");
  auto junk = KernelCache::Open(o);
  ASSERT_FALSE(junk.ok());
  EXPECT_NE(junk.status().message().find("not a kjit cache"), std::string::npos) << junk.status().ToString();

  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(dir.file("other.db").c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, "CREATE TABLE photos(id INTEGER)", nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(db);
  o.path = dir.file("other.db");
  auto other = KernelCache::Open(o);
  ASSERT_FALSE(other.ok());
  EXPECT_NE(other.status().message().find("not a kjit cache"), std::string::npos) << other.status().ToString();

  o.path = dir.file("missing.db");
  o.read_only = true;
  EXPECT_EQ(KernelCache::Open(o).status().code(), StatusCode::kNotFound);
}

TEST(KernelCache, RefusesANewerSchemaAndLeavesItAlone) {
  TempDir dir;
  const std::string path = dir.file("c.db");
  OpenOrDie(path);
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, "UPDATE meta SET value = '99' WHERE name = 'schema_version'", nullptr, nullptr, nullptr),
            SQLITE_OK);
  sqlite3_close(db);
  OpenOptions o;
  o.path = path;
  auto c = KernelCache::Open(o);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("schema version 99"), std::string::npos) << c.status().message();
  EXPECT_NE(c.status().message().find("Update kjit"), std::string::npos);
}

TEST(KernelCache, MigratesAnEmptyFileAndReopensWithoutChange) {
  TempDir dir;
  const std::string path = dir.file("c.db");
  {
    std::ofstream touch(path);  // a zero-byte file is an empty database: version 0
  }
  {
    auto c = OpenOrDie(path);
    EXPECT_EQ(c->schema_version(), kSchemaVersion);
    ASSERT_TRUE(c->Insert(MakeRecord(3)).ok());
  }
  auto again = OpenOrDie(path, /*read_only=*/true);
  EXPECT_EQ(again->Stats()->records, 1u);
}

TEST(KernelCache, ExportImportRoundTrip) {
  TempDir dir;
  auto src = OpenOrDie(dir.file("src.db"));
  for (int i = 1; i <= 4; ++i) {
    KernelRecord r = MakeRecord(i * 10);
    if (i == 4) r.status = RecordStatus::kRejected;
    ASSERT_TRUE(src->Insert(r).ok());
  }
  ListFilter verified;
  verified.status = RecordStatus::kVerified;
  auto n = src->Export(dir.file("out.kjit"), verified);
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(*n, 3u);
  EXPECT_FALSE(src->Export(dir.file("out.kjit"), verified).ok());  // never overwrites

  // By default the file is not trusted: its verified records wait, quarantined, for kjitd's verification here.
  auto dst = OpenOrDie(dir.file("dst.db"));
  auto rep = dst->Import(dir.file("out.kjit"));
  ASSERT_TRUE(rep.ok()) << rep.status().ToString();
  EXPECT_EQ(rep->imported, 3u);
  EXPECT_EQ(rep->awaiting_verification, 3u);
  EXPECT_TRUE(rep->rejected.empty());
  EXPECT_EQ(dst->Lookup(OpKey::Decode(KeyBytes(20))->Hash(), kReader).status().code(), StatusCode::kNotFound);
  ListFilter quarantined;
  quarantined.status = RecordStatus::kQuarantined;
  auto waiting = dst->List(quarantined);
  ASSERT_TRUE(waiting.ok());
  ASSERT_EQ(waiting->size(), 3u);
  const KernelRecord imported = *dst->Get(waiting->front().id);
  EXPECT_EQ(imported.status_reason.rfind(std::string(kImportedReason) + dir.file("out.kjit"), 0), 0u)
      << imported.status_reason;
  auto verify = dst->Verify();  // statuses are not under the record checksum: the records stay whole
  ASSERT_TRUE(verify.ok());
  EXPECT_TRUE(verify->quarantined.empty());

  auto again = dst->Import(dir.file("out.kjit"));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->imported, 0u);
  EXPECT_EQ(again->duplicates, 3u);

  // --trust serves them at once, as the file says.
  auto trusting = OpenOrDie(dir.file("trusting.db"));
  ImportOptions trust;
  trust.trust = true;
  auto trusted = trusting->Import(dir.file("out.kjit"), trust);
  ASSERT_TRUE(trusted.ok());
  EXPECT_EQ(trusted->awaiting_verification, 0u);
  auto served = trusting->Lookup(OpKey::Decode(KeyBytes(20))->Hash(), kReader);
  ASSERT_TRUE(served.ok()) << served.status().ToString();
  EXPECT_EQ(served->cubin, Pattern(20, 4096));

  // A read-only source can be exported too.
  auto ro = OpenOrDie(dir.file("src.db"), /*read_only=*/true);
  EXPECT_EQ(*ro->Export(dir.file("out2.kjit"), ListFilter{}), 4u);
}

TEST(KernelCache, ImportRejectsTamperedRecordsAndNonCaches) {
  TempDir dir;
  auto src = OpenOrDie(dir.file("src.db"));
  ASSERT_TRUE(src->Insert(MakeRecord(1)).ok());
  ASSERT_TRUE(src->Insert(MakeRecord(2)).ok());
  ASSERT_TRUE(src->Export(dir.file("out.kjit"), ListFilter{}).ok());
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(dir.file("out.kjit").c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, "UPDATE kernels SET source = source || '// evil' WHERE entry_point = 'softmax_2'",
                         nullptr, nullptr, nullptr),
            SQLITE_OK);
  sqlite3_close(db);
  auto dst = OpenOrDie(dir.file("dst.db"));
  auto rep = dst->Import(dir.file("out.kjit"));
  ASSERT_TRUE(rep.ok());
  EXPECT_EQ(rep->imported, 1u);
  ASSERT_EQ(rep->rejected.size(), 1u);
  EXPECT_NE(rep->rejected[0].find("record checksum"), std::string::npos) << rep->rejected[0];

  {
    std::ofstream(dir.file("notes.txt")) << "hello";
  }
  auto bad = dst->Import(dir.file("notes.txt"));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("cannot import"), std::string::npos);
}

TEST(KernelCache, TaskQueueMeasurementsAndCheckpoints) {
  TempDir dir;
  auto cache = OpenOrDie(dir.file("c.db"));
  ASSERT_TRUE(cache->tasks().EnqueueTask(KeyBytes(1), 1).ok());
  auto urgent = cache->tasks().EnqueueTask(KeyBytes(2), 9, "hot key");
  ASSERT_TRUE(urgent.ok());
  EXPECT_FALSE(cache->tasks().EnqueueTask("junk", 1).ok());
  auto first = cache->tasks().ClaimNextTask();
  ASSERT_TRUE(first.ok() && first->has_value());
  EXPECT_EQ((*first)->id, *urgent);
  EXPECT_EQ((*first)->state, "running");
  ASSERT_TRUE(cache->tasks().FinishTask(*urgent, true, "verified 2.1x").ok());
  EXPECT_EQ(cache->tasks().ListTasks("done")->size(), 1u);
  EXPECT_EQ(cache->tasks().ListTasks("queued")->size(), 1u);
  ASSERT_TRUE(cache->tasks().ClaimNextTask()->has_value());
  EXPECT_FALSE(cache->tasks().ClaimNextTask()->has_value());

  Measurement m;
  m.key_bytes = KeyBytes(1);
  m.design = MakeRecord(1).design;
  m.outcome = "wrong";
  m.detail = "max abs error 3.0 at element 17";
  ASSERT_TRUE(cache->measurements().AddMeasurement(m).ok());
  m.outcome = "verified";
  m.reward = 0.7;
  ASSERT_TRUE(cache->measurements().AddMeasurement(m).ok());
  auto ms = cache->measurements().ListMeasurements("softmax");
  ASSERT_TRUE(ms.ok());
  ASSERT_EQ(ms->size(), 2u);
  EXPECT_EQ((*ms)[1].outcome, "verified");
  EXPECT_EQ((*ms)[1].design, m.design);
  EXPECT_TRUE(cache->measurements().ListMeasurements("layer_norm")->empty());
  m.key_bytes = KeyBytes(2);
  ASSERT_TRUE(cache->measurements().AddMeasurement(m).ok());
  auto of_key = cache->measurements().ListMeasurementsOfKey(OpKey::Decode(KeyBytes(1))->Hash());
  ASSERT_TRUE(of_key.ok()) << of_key.status().ToString();
  ASSERT_EQ(of_key->size(), 2u);
  EXPECT_EQ((*of_key)[0].outcome, "wrong");
  EXPECT_EQ(cache->measurements().ListMeasurementsOfKey(OpKey::Decode(KeyBytes(2))->Hash())->size(), 1u);
  EXPECT_TRUE(cache->measurements().ListMeasurementsOfKey(OpKey::Decode(KeyBytes(3))->Hash())->empty());

  EXPECT_EQ(cache->checkpoints().LatestGoodCheckpoint().status().code(), StatusCode::kNotFound);
  ASSERT_TRUE(cache->checkpoints().PutCheckpoint({0, "ppo-1", "weights-1", {}, "", 0}).ok());
  auto second = cache->checkpoints().PutCheckpoint({0, "ppo-2", "weights-2", {}, "", 0});
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(cache->checkpoints().LatestGoodCheckpoint()->version, "ppo-2");
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(dir.file("c.db").c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, "UPDATE policy_checkpoints SET blob = 'tampered' WHERE version = 'ppo-2'", nullptr,
                         nullptr, nullptr),
            SQLITE_OK);
  sqlite3_close(db);
  auto good = cache->checkpoints().LatestGoodCheckpoint();
  ASSERT_TRUE(good.ok());
  EXPECT_EQ(good->version, "ppo-1");  // ppo-2 failed its checksum and was set aside

  // A checkpoint its reader cannot use (checksum intact) is set aside by the reader.
  auto third = cache->checkpoints().PutCheckpoint({0, "ppo-3", "unreadable", {}, "", 0});
  ASSERT_TRUE(third.ok());
  EXPECT_EQ(cache->checkpoints().LatestGoodCheckpoint()->version, "ppo-3");
  ASSERT_TRUE(cache->checkpoints().SetCheckpointAside(*third).ok());
  EXPECT_EQ(cache->checkpoints().LatestGoodCheckpoint()->version, "ppo-1");
  EXPECT_EQ(cache->checkpoints().SetCheckpointAside(*third + 100).code(), StatusCode::kNotFound);
}

TEST(KernelCache, MissesMergeIntoOneTaskOrderedByExpectedGain) {
  TempDir dir;
  auto cache = OpenOrDie(dir.file("c.db"));
  auto a = cache->tasks().AddMiss(KeyBytes(1), 100, 10.0);  // 1000 us to gain
  auto b = cache->tasks().AddMiss(KeyBytes(2), 10, 500.0);  // 5000 us
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_FALSE(a->merged);
  auto a2 = cache->tasks().AddMiss(KeyBytes(1), 300, 30.0);  // now 400 calls at a mean of 25 us: 10000 us
  ASSERT_TRUE(a2.ok());
  EXPECT_TRUE(a2->merged);
  EXPECT_EQ(a2->task_id, a->task_id);
  auto task = cache->tasks().GetTask(a->task_id);
  ASSERT_TRUE(task.ok());
  EXPECT_EQ(task->calls, 400u);
  EXPECT_DOUBLE_EQ(task->observed_us, 25.0);
  EXPECT_DOUBLE_EQ(task->expected_gain_us, 10000.0);
  auto queue = cache->tasks().ListTasks("queued");
  ASSERT_TRUE(queue.ok());
  ASSERT_EQ(queue->size(), 2u);
  EXPECT_EQ((*queue)[0].id, a->task_id);  // the larger expected gain first
  // A submission for a queued key merges too, and its priority wins.
  auto sub = cache->tasks().SubmitTask(KeyBytes(2), 5, "user asked");
  ASSERT_TRUE(sub.ok());
  EXPECT_TRUE(sub->merged);
  EXPECT_EQ(sub->task_id, b->task_id);
  EXPECT_EQ((*cache->tasks().ClaimNextTask())->id, b->task_id);
  // A running task still absorbs misses; once done, the key's row keeps counting them without reopening.
  EXPECT_TRUE(cache->tasks().AddMiss(KeyBytes(2), 1, 1.0)->merged);
  ASSERT_TRUE(cache->tasks().FinishTask(b->task_id, true, "ok").ok());
  auto later = cache->tasks().AddMiss(KeyBytes(2), 1, 1.0);
  ASSERT_TRUE(later.ok());
  EXPECT_TRUE(later->merged);
  EXPECT_FALSE(later->reopened);
  EXPECT_EQ(later->task_id, b->task_id);
  EXPECT_EQ(cache->tasks().GetTask(b->task_id)->state, "done");
  EXPECT_FALSE(cache->tasks().AddMiss(KeyBytes(3), 1, -1.0).ok());
}

// A round's end, as a tuner writes it.
TaskResult Ended(const std::string& state, const std::string& detail = "", int trials = 0) {
  TaskResult r;
  r.state = state;
  r.detail = detail;
  r.trials = trials;
  return r;
}

TaskResult Found(const std::string& state, const std::string& detail, int trials, double best_us, double baseline_us,
                 double floor_us, int64_t record, const std::string& policy) {
  TaskResult r = Ended(state, detail, trials);
  r.best_us = best_us;
  r.baseline_us = baseline_us;
  r.floor_us = floor_us;
  r.record_id = record;
  r.policy_version = policy;
  return r;
}

ClaimOptions By(const std::string& claimer, int64_t lease_ms = 300000, int64_t now = 0) {
  ClaimOptions c;
  c.claimer = claimer;
  c.lease = std::chrono::milliseconds(lease_ms);
  c.now_unix_ms = now;
  return c;
}

// A done key comes back when its calls grow kRetuneCallsFactor-fold since it was tuned, unless its kernel is
// already near the floor; an unfit key never does; a submission always reopens.
TEST(KernelCache, ClosedTasksReopenWhenTheirCallsGrow) {
  TempDir dir;
  auto cache = OpenOrDie(dir.file("c.db"));
  const std::string slow = KeyBytes(1), near_floor = KeyBytes(2), unfit = KeyBytes(3);
  for (const auto& key : {slow, near_floor, unfit}) ASSERT_TRUE(cache->tasks().AddMiss(key, 100, 10.0).ok());
  std::map<std::string, int64_t> ids;
  for (int i = 0; i < 3; ++i) {
    auto t = cache->tasks().ClaimTask(By("tuner-a"));
    ASSERT_TRUE(t.ok() && t->has_value());
    EXPECT_EQ((*t)->calls_at_tune, 100u);
    ids[(*t)->key_bytes] = (*t)->id;
  }
  TaskResult done = Ended("done", "no kernel beat PyTorch", 3);
  done.round_done = true;
  done.baseline_us = 10;
  done.floor_us = 4;
  ASSERT_TRUE(cache->tasks().CompleteTask(ids[slow], "tuner-a", done).ok());
  TaskResult good = done;
  good.detail = "kernel";
  good.best_us = 4.5;  // within kNearFloor of the 4 us floor
  good.record_id = 7;
  good.policy_version = "p-1";
  ASSERT_TRUE(cache->tasks().CompleteTask(ids[near_floor], "tuner-a", good).ok());
  ASSERT_TRUE(cache->tasks().CompleteTask(ids[unfit], "tuner-a", Ended("unfit", "needs 200 GB")).ok());

  // 299 more calls leave each key under 4 x 100; the 400th reopens the slow key only.
  for (const auto& key : {slow, near_floor, unfit}) {
    auto m = cache->tasks().AddMiss(key, 299, 10.0);
    ASSERT_TRUE(m.ok());
    EXPECT_FALSE(m->reopened);
  }
  auto grown = cache->tasks().AddMiss(slow, 1, 10.0);
  ASSERT_TRUE(grown.ok());
  EXPECT_TRUE(grown->reopened);
  EXPECT_EQ(grown->task_id, ids[slow]);
  EXPECT_FALSE(cache->tasks().AddMiss(near_floor, 1000, 10.0)->reopened);
  EXPECT_FALSE(cache->tasks().AddMiss(unfit, 1000, 10.0)->reopened);
  auto slow_task = cache->tasks().GetTask(ids[slow]);
  ASSERT_TRUE(slow_task.ok());
  EXPECT_EQ(slow_task->state, "queued");
  EXPECT_EQ(slow_task->round, 1);
  EXPECT_EQ(slow_task->trials, 3);
  auto kept = cache->tasks().GetTask(ids[near_floor]);
  ASSERT_TRUE(kept.ok());
  EXPECT_EQ(kept->state, "done");
  EXPECT_DOUBLE_EQ(kept->best_us, 4.5);
  EXPECT_EQ(kept->record_id, 7);
  EXPECT_EQ(kept->policy_version, "p-1");
  EXPECT_EQ(cache->tasks().GetTask(ids[unfit])->state, "unfit");
  EXPECT_EQ(cache->tasks().ListTasks()->size(), 3u);  // one row a key

  // A user's submission reopens even an unfit key.
  auto asked = cache->tasks().SubmitTask(unfit, 5, "user asked");
  ASSERT_TRUE(asked.ok());
  EXPECT_TRUE(asked->reopened);
  EXPECT_EQ(cache->tasks().GetTask(ids[unfit])->state, "queued");
}

// Several tuners on one queue: a key is claimed once; a lease that runs out frees the claim; only the claimer
// renews or completes; a task handed back to wait is not claimed before its time; results keep the best.
TEST(KernelCache, ClaimsHoldLeasesAndOneKeyHasOneTuner) {
  TempDir dir;
  auto cache = OpenOrDie(dir.file("c.db"));
  OpenOptions other_options;
  other_options.path = dir.file("c.db");
  auto opened = KernelCache::Open(other_options);  // a second tuner's connection
  ASSERT_TRUE(opened.ok());
  KernelCache& other = **opened;
  ASSERT_TRUE(cache->tasks().AddMiss(KeyBytes(1), 10, 5.0).ok());
  ASSERT_TRUE(cache->tasks().AddMiss(KeyBytes(2), 1, 5.0).ok());
  const int64_t t0 = 1'000'000;
  ClaimOptions a = By("tuner-a", 1000, t0);
  ClaimOptions b = By("tuner-b", 1000, t0);
  auto first = cache->tasks().ClaimTask(a);
  ASSERT_TRUE(first.ok() && first->has_value());
  EXPECT_EQ((*first)->key_bytes, KeyBytes(1));  // the larger expected gain
  auto second = other.tasks().ClaimTask(b);
  ASSERT_TRUE(second.ok() && second->has_value());
  EXPECT_EQ((*second)->key_bytes, KeyBytes(2));
  EXPECT_FALSE(other.tasks().ClaimTask(b)->has_value());  // nothing left: a running key is not claimed again

  // b renews; a does not, and its lease runs out: b may take a's key, and a's claim is lost.
  b.now_unix_ms = t0 + 900;
  ASSERT_TRUE(other.tasks().RenewClaim((*second)->id, b).ok());
  b.now_unix_ms = t0 + 1500;
  auto taken = other.tasks().ClaimTask(b);
  ASSERT_TRUE(taken.ok() && taken->has_value());
  EXPECT_EQ((*taken)->id, (*first)->id);
  EXPECT_EQ((*taken)->attempts, 2);
  EXPECT_EQ(cache->tasks().RenewClaim((*first)->id, a).code(), StatusCode::kUnavailable);
  EXPECT_EQ(cache->tasks().CompleteTask((*first)->id, "tuner-a", Ended("done", "late")).code(), StatusCode::kUnavailable);
  EXPECT_EQ(other.tasks().GetTask((*second)->id)->claimed_by, "tuner-b");  // renewed: not expired at t0 + 1500

  // b hands key 1 back to wait 10 s (GPU memory short now): it is not claimable before then.
  TaskResult wait = Ended("queued", "the GPU lacks the memory now");
  wait.not_before_unix_ms = t0 + 11'500;
  ASSERT_TRUE(other.tasks().CompleteTask((*taken)->id, "tuner-b", wait).ok());
  ASSERT_TRUE(other.tasks().CompleteTask((*second)->id, "tuner-b", Ended("done", "key 2 tuned", 1)).ok());
  ClaimOptions c = By("tuner-c", 1000, t0 + 2000);
  EXPECT_FALSE(cache->tasks().ClaimTask(c)->has_value());
  c.now_unix_ms = t0 + 12'000;
  auto back = cache->tasks().ClaimTask(c);
  ASSERT_TRUE(back.ok() && back->has_value());
  EXPECT_EQ((*back)->id, (*first)->id);
  EXPECT_EQ((*back)->round, 0);  // handed back untried: no round counted

  // Results: a slower kernel in a later round does not displace the best.
  TaskResult r1 = Found("queued", "first round", 2, 3.0, 5.0, 1.0, 11, "expert-default");
  r1.round_done = true;
  r1.priority = -1;
  ASSERT_TRUE(cache->tasks().CompleteTask((*back)->id, "tuner-c", r1).ok());
  c.now_unix_ms = t0 + 13'000;
  auto again = cache->tasks().ClaimTask(c);
  ASSERT_TRUE(again.ok() && again->has_value());
  EXPECT_EQ((*again)->priority, -1);
  TaskResult r2 = Found("done", "second round", 6, 3.5, 5.2, 1.0, 12, "p-2");
  r2.round_done = true;
  ASSERT_TRUE(cache->tasks().CompleteTask((*again)->id, "tuner-c", r2).ok());
  auto t = cache->tasks().GetTask((*first)->id);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->state, "done");
  EXPECT_EQ(t->round, 2);
  EXPECT_EQ(t->trials, 8);
  EXPECT_DOUBLE_EQ(t->best_us, 3.0);
  EXPECT_EQ(t->record_id, 11);
  EXPECT_EQ(t->policy_version, "expert-default");
  EXPECT_DOUBLE_EQ(t->baseline_us, 5.2);
  EXPECT_TRUE(t->claimed_by.empty());
  EXPECT_FALSE(cache->tasks().CompleteTask((*first)->id, "tuner-c", Ended("bogus")).ok());
}

TEST(KernelCache, WorkspaceBytesRoundTripAndAreChecksummed) {
  TempDir dir;
  auto cache = OpenOrDie(dir.file("c.db"));
  KernelRecord in = MakeRecord(4096);
  in.launch.workspace_bytes = (uint64_t{1} << 33) + 520;  // past 32 bits
  auto id = cache->Insert(in);
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  auto out = cache->Get(*id);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(out->launch, in.launch);
  EXPECT_EQ(out->launch.workspace_bytes, (uint64_t{1} << 33) + 520);
  auto served = cache->Lookup(OpKey::Decode(in.key_bytes)->Hash(), kReader);
  ASSERT_TRUE(served.ok()) << served.status().ToString();
  EXPECT_EQ(served->launch.workspace_bytes, in.launch.workspace_bytes);
  EXPECT_TRUE(cache->Verify()->quarantined.empty());
  // The workspace is part of what is served: another size is another checksum.
  KernelRecord other = *out;
  other.launch.workspace_bytes = 0;
  EXPECT_NE(other.ComputeServeChecksum(), out->ComputeServeChecksum());
  EXPECT_NE(other.ComputeRecordChecksum(), out->ComputeRecordChecksum());
  other.launch.workspace_bytes = 520;
  EXPECT_NE(other.ComputeServeChecksum(), out->ComputeServeChecksum());
  // A stored workspace size changed behind the cache's back is caught by lookup.
  {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(dir.file("c.db").c_str(), &db), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(db, "UPDATE kernels SET workspace_bytes = 64", nullptr, nullptr, nullptr), SQLITE_OK);
    sqlite3_close(db);
  }
  EXPECT_FALSE(cache->Lookup(OpKey::Decode(in.key_bytes)->Hash(), kReader).ok());
  EXPECT_EQ(cache->Get(*id)->status, RecordStatus::kQuarantined);
}

// The checksums of a record without a workspace are what kjit computed before
// LaunchShape had one (values from the code at e05cd84): records already in
// users' caches stay valid.
TEST(KernelCache, ChecksumsWithoutWorkspaceAreThoseBeforeItExisted) {
  KernelRecord r = MakeRecord(64);
  r.created_unix_ms = 1764583200000;
  r.cubin_checksum = r.ComputeCubinChecksum();
  ASSERT_EQ(r.launch.workspace_bytes, 0u);
  EXPECT_EQ(r.ComputeServeChecksum().ToHex(), "2cf25dd07bdda9b7d7e81c24077a2b56");
  EXPECT_EQ(r.ComputeRecordChecksum().ToHex(), "3fa422116f96165e95b14a9fa4cb563b");
}

// A record stored by a schema-2 kjit (no workspace column) is migrated, still
// passes its checksums, and is served with no workspace.
TEST(KernelCache, RecordFromBeforeWorkspacesStillVerifiesAndServes) {
  TempDir dir;
  const std::string fresh = dir.file("v3.db"), old = dir.file("v2.db");
  KernelRecord in = MakeRecord(128);
  {
    auto cache = OpenOrDie(fresh);
    ASSERT_TRUE(cache->Insert(in).ok());
  }
  ASSERT_TRUE(KernelCache::CreateAtSchemaVersion(old, 2).ok());
  {
    // Copy the row into the version-2 table: every column but the new one, checksums as stored.
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(old.c_str(), &db), SQLITE_OK);
    const std::string attach = "ATTACH DATABASE '" + fresh + "' AS fresh";
    ASSERT_EQ(sqlite3_exec(db, attach.c_str(), nullptr, nullptr, nullptr), SQLITE_OK);
    const char* copy =
        "INSERT INTO main.kernels SELECT id, key_hash, key_bytes, key_text, op, arch, status, status_reason, source, "
        "compile_options, entry_point, grid_x, grid_y, grid_z, block_x, block_y, block_z, dynamic_shared_bytes, "
        "family, policy_version, design, timing, baseline, median_us, baseline_us, verification, driver_version, "
        "nvrtc_major, nvrtc_minor, codegen_version, cubin, cubin_checksum, serve_checksum, record_checksum, "
        "size_bytes, created_ms, last_used_ms, use_count FROM fresh.kernels";
    char* error = nullptr;
    ASSERT_EQ(sqlite3_exec(db, copy, nullptr, nullptr, &error), SQLITE_OK) << (error ? error : "");
    sqlite3_close(db);
  }
  auto cache = OpenOrDie(old);  // migrates to the current schema
  EXPECT_EQ(cache->schema_version(), kSchemaVersion);
  auto report = cache->Verify();
  ASSERT_TRUE(report.ok());
  EXPECT_EQ(report->checked, 1u);
  EXPECT_TRUE(report->quarantined.empty());
  auto served = cache->Lookup(OpKey::Decode(in.key_bytes)->Hash(), kReader);
  ASSERT_TRUE(served.ok()) << served.status().ToString();
  EXPECT_EQ(served->launch, in.launch);
  EXPECT_EQ(served->launch.workspace_bytes, 0u);
}

TEST(KernelCache, MigratesVersion1KeepingItsData) {
  TempDir dir;
  const std::string path = dir.file("v1.db");
  ASSERT_TRUE(KernelCache::CreateAtSchemaVersion(path, 1).ok());
  {
    // A version-1 task row, written as version 1 wrote them.
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
    sqlite3_stmt* st = nullptr;
    ASSERT_EQ(sqlite3_prepare_v2(db,
                                 "INSERT INTO tasks (key_hash, key_bytes, priority, state, created_ms, updated_ms) "
                                 "VALUES (?, ?, 3, 'queued', 1, 1)",
                                 -1, &st, nullptr),
              SQLITE_OK);
    const std::string key = KeyBytes(9);
    const Hash128 h = OpKey::Decode(key)->Hash();
    std::string hash(16, '\0');
    for (int i = 0; i < 8; ++i) {
      hash[static_cast<size_t>(i)] = static_cast<char>(h.high >> (56 - 8 * i));
      hash[static_cast<size_t>(8 + i)] = static_cast<char>(h.low >> (56 - 8 * i));
    }
    sqlite3_bind_blob(st, 1, hash.data(), 16, SQLITE_TRANSIENT);
    sqlite3_bind_blob(st, 2, key.data(), static_cast<int>(key.size()), SQLITE_TRANSIENT);
    ASSERT_EQ(sqlite3_step(st), SQLITE_DONE);
    sqlite3_finalize(st);
    sqlite3_close(db);
  }
  OpenOptions ro;
  ro.path = path;
  ro.read_only = true;
  auto refused = KernelCache::Open(ro);  // a reader must not migrate
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("must be migrated"), std::string::npos);

  auto cache = OpenOrDie(path);
  EXPECT_EQ(cache->schema_version(), kSchemaVersion);
  auto tasks = cache->tasks().ListTasks();
  ASSERT_TRUE(tasks.ok());
  ASSERT_EQ(tasks->size(), 1u);
  EXPECT_EQ((*tasks)[0].priority, 3);
  EXPECT_EQ((*tasks)[0].calls, 0u);
  auto merged = cache->tasks().AddMiss(KeyBytes(9), 7, 2.0);  // the version-2 columns work on old rows
  ASSERT_TRUE(merged.ok());
  EXPECT_TRUE(merged->merged);
  EXPECT_EQ(cache->tasks().GetTask((*tasks)[0].id)->calls, 7u);
  ASSERT_TRUE(cache->Insert(MakeRecord(9)).ok());
  EXPECT_TRUE(cache->Verify()->quarantined.empty());
}

}  // namespace
}  // namespace kjit::cache
