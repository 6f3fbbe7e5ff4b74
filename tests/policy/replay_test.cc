// The replay environment over the repository's measured datasets: key texts read
// back to their hashes, the codegen and merge rules, episodes, the baselines.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "kjit/policy/design_space.h"
#include "kjit/policy/learn/replay.h"

namespace kjit::policy::learn {
namespace {

const std::vector<ReplayTask>& Tasks(DatasetReport* report_out = nullptr) {
  static DatasetReport report;
  static const std::vector<ReplayTask> tasks = [] {
    auto files = DatasetFiles(DefaultDatasetDirectory());
    EXPECT_TRUE(files.ok()) << files.status().ToString();
    auto loaded = LoadDatasets(*files, DeviceFacts::H200(), &report);
    EXPECT_TRUE(loaded.ok()) << loaded.status().ToString();
    return loaded.ok() ? std::move(*loaded) : std::vector<ReplayTask>{};
  }();
  if (report_out != nullptr) *report_out = report;
  return tasks;
}

TEST(KeyText, ReadsBackEveryKindOfArgument) {
  TensorDesc strided = TensorDesc::Contiguous(DType::kBFloat16, {8, 96, 7, 7});
  strided.strides = {4704, 1, 672, 96};
  strided.storage_offset = 3;
  strided.alignment = 2;
  const OpKey key = OpKey::Single(
      "aten::foo", "out",
      {strided, NoneArg{}, true, int64_t{-3}, 1e-05, 2.0, std::string("mean"), DType::kFloat16, IntList{128, 96},
       DoubleList{0.5, -1.0}, TensorList{TensorDesc::Contiguous(DType::kFloat32, {3})}, IntList{}},
      90, kDeterministic | kAllowTF32Matmul);
  auto parsed = ParseKeyText(key.ToString());
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(parsed->ToString(), key.ToString());
  EXPECT_EQ(parsed->Hash(), key.Hash());
  EXPECT_FALSE(ParseKeyText("aten::_softmax(f32[4,4], -1, False)").ok());
  EXPECT_FALSE(ParseKeyText("aten::_softmax(q32[4,4], -1, False) sm_90").ok());
}

TEST(Replay, EveryDatasetKeyBecomesATask) {
  DatasetReport report;
  const auto& tasks = Tasks(&report);
  for (const auto& why : report.skipped) ADD_FAILURE() << "skipped " << why;
  EXPECT_EQ(report.tasks, report.keys);
  EXPECT_GE(report.tasks, 60);  // 67 keys in the datasets as committed
  std::set<std::string> families;
  for (const auto& t : tasks) {
    families.insert(t.family_name);
    EXPECT_EQ(t.key.Hash().ToHex(), t.key_hash);
    ASSERT_GE(t.oracle_index, 0);
    EXPECT_EQ(t.features.size(), TaskFeatureNames().size());
    for (const auto& p : t.points) {
      // Every point offered is valid today and is addressed by its domain indices.
      EXPECT_TRUE(t.family->Check(*t.problem, p.point, DeviceFacts::H200()).ok()) << PointToString(p.point);
      ASSERT_EQ(p.value_index.size(), t.space.knobs.size());
      for (size_t k = 0; k < p.value_index.size(); ++k) {
        EXPECT_EQ(t.space.knobs[k].values[p.value_index[k]], p.point.at(t.space.knobs[k].name));
      }
      if (p.outcome == Outcome::kVerified) {
        EXPECT_GE(p.time_us, t.oracle_us());
      }
    }
  }
  // One family per dataset file; softmax, the norms, scan, pool, reduce, depthwise_conv and matmul have files.
  EXPECT_GE(families.size(), 5u);
  // reduce's codegen-1 rows were measured before its chunks knob (codegen 2) existed: they read as
  // chunks=1 (Space::absent_as) and stay in the space; codegen-2 rows carry their own chunks.
  size_t reduce_codegen1_points = 0;
  for (const auto& t : tasks) {
    if (t.family_name != "reduce" || t.codegen != 1) continue;
    for (const auto& p : t.points) {
      ++reduce_codegen1_points;
      EXPECT_EQ(p.point.at("chunks"), 1) << PointToString(p.point);
    }
  }
  EXPECT_GT(reduce_codegen1_points, 0u);
  // softmax codegen 1-3 rows are older than its newest (4) and are dropped.
  EXPECT_GT(report.rows_older_codegen, 0);
}

TEST(Replay, HeldOutRuleIsFixedAndSplitsBothWays) {
  int held = 0;
  for (const auto& t : Tasks()) held += IsHeldOut(t);
  EXPECT_GT(held, 0);
  EXPECT_LT(held, static_cast<int>(Tasks().size()));
  ReplayTask t;
  t.key_hash = "c97c4393cb47064a169d4bec25de480d";  // 0xc9 = 201: not divisible by 4
  EXPECT_FALSE(IsHeldOut(t));
  t.key_hash = "8975b403b1f1aeb8a82f41bf847e7e96";  // 0x89 = 137
  EXPECT_FALSE(IsHeldOut(t));
  t.key_hash = "70daaad8c9ee208f3ae46801da2072dc";  // 0x70 = 112
  EXPECT_TRUE(IsHeldOut(t));
}

// The split from a hash's text alone (kjit_tune_spaces --list-keys prints it), as the task rules read it.
TEST(Replay, SplitOfKeyHashFollowsTheFirstByte) {
  EXPECT_EQ(SplitOfKeyHash("70daaad8c9ee208f3ae46801da2072dc"), KeySplit::kHeldOut);     // 112 = 0 mod 4
  EXPECT_EQ(SplitOfKeyHash("de00"), KeySplit::kValidation);                              // 222 = 2 mod 4
  EXPECT_EQ(SplitOfKeyHash("c97c4393cb47064a169d4bec25de480d"), KeySplit::kTraining);    // 201 = 1 mod 4
  EXPECT_EQ(SplitOfKeyHash("7f2a"), KeySplit::kTraining);                                // 127 = 3 mod 4
  EXPECT_EQ(SplitOfKeyHash("zz"), KeySplit::kTraining);  // not hex: neither held out nor validation
  EXPECT_EQ(SplitOfKeyHash(""), KeySplit::kTraining);
  EXPECT_STREQ(KeySplitName(KeySplit::kHeldOut), "held out");
  for (const auto& t : Tasks()) {
    const KeySplit split = SplitOfKeyHash(t.key_hash);
    EXPECT_EQ(split == KeySplit::kHeldOut, IsHeldOut(t)) << t.key_text;
    EXPECT_EQ(split == KeySplit::kValidation, IsValidation(t)) << t.key_text;
  }
}

TEST(Replay, ValidationRuleIsFixedAndDisjointFromHeldOut) {
  int validation = 0, held = 0, train = 0;
  for (const auto& t : Tasks()) {
    EXPECT_FALSE(IsValidation(t) && IsHeldOut(t)) << t.key_text;
    validation += IsValidation(t);
    held += IsHeldOut(t);
    train += !IsHeldOut(t);
  }
  // Validation keys are training keys, some but not all of them.
  EXPECT_GT(held, 0);
  EXPECT_GT(validation, 0);
  EXPECT_LT(validation, train);
  ReplayTask t;
  t.key_hash = "c97c4393cb47064a169d4bec25de480d";  // 0xc9 = 201 = 1 mod 4: training, not validation
  EXPECT_FALSE(IsValidation(t));
  t.key_hash = "8a75b403b1f1aeb8a82f41bf847e7e96";  // 0x8a = 138 = 2 mod 4: validation
  EXPECT_TRUE(IsValidation(t));
  EXPECT_FALSE(IsHeldOut(t));
  t.key_hash = "70daaad8c9ee208f3ae46801da2072dc";  // 0x70 = 112 = 0 mod 4: held out, never validation
  EXPECT_FALSE(IsValidation(t));
  t.key_hash = "zz";  // not hex: neither
  EXPECT_FALSE(IsValidation(t));
  EXPECT_FALSE(IsHeldOut(t));
}

TEST(Replay, EpisodeAnswersFromTheDataAndRefusesRepeats) {
  const ReplayTask& task = Tasks().front();
  ReplayEpisode episode(task, 2);
  auto r = episode.Trial(task.oracle_index);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->time_us, task.oracle_us());
  EXPECT_EQ(episode.best_time_us(), task.oracle_us());
  EXPECT_GT(r->roofline, 0);
  EXPECT_FALSE(episode.Trial(task.oracle_index).ok());
  EXPECT_FALSE(episode.Trial(-1).ok());
  EXPECT_FALSE(episode.Trial(static_cast<int>(task.points.size())).ok());
}

TEST(Replay, RandomSearchIsSeededAndReachesTheOracleWhenExhaustive) {
  std::vector<const ReplayTask*> tasks;
  for (const auto& t : Tasks()) {
    if (t.points.size() <= 64) tasks.push_back(&t);
  }
  ASSERT_FALSE(tasks.empty());
  RandomSearcher random;
  const auto a = RunSearch(random, tasks, {1, 4, 64}, 3);
  const auto b = RunSearch(random, tasks, {1, 4, 64}, 3);
  EXPECT_EQ(a.fraction, b.fraction);
  const auto mean = a.Mean();
  EXPECT_LE(mean[0], mean[1]);
  EXPECT_DOUBLE_EQ(mean[2], 1.0);  // 64 trials try every point of these tasks
}

// kjit_tune_spaces' search as a Searcher: the expert default, a pairwise cover of the task's points, then
// rounds of one-knob changes of the fastest verified points, every proposal untried; deterministic.
TEST(Replay, CoverThenClimbCoversEveryPairThenClimbsFromTheBest) {
  const ReplayTask* task = nullptr;
  for (const auto& t : Tasks()) {
    if (t.expert_index >= 0 && t.points.size() >= 40 && t.space.knobs.size() >= 3) {
      task = &t;
      break;
    }
  }
  ASSERT_NE(task, nullptr);
  CoverThenClimbSearcher search(/*climb_rounds=*/2);
  search.BeginEpisode(*task, 1);
  ReplayEpisode episode(*task, static_cast<int>(task->points.size()));
  // The first batch: the expert default first, then the cover.
  const std::vector<int> cover = search.ProposeBatch(episode);
  ASSERT_FALSE(cover.empty());
  EXPECT_EQ(cover.front(), task->expert_index);
  std::vector<Point> points;
  for (const MeasuredPoint& p : task->points) points.push_back(p.point);
  const std::vector<size_t> pairwise = PairwiseCoverOf(points);
  EXPECT_EQ(cover.size(), pairwise.size() + (std::find(pairwise.begin(), pairwise.end(),
                                                       static_cast<size_t>(task->expert_index)) == pairwise.end()));
  // Every (knob value, knob value) pair of the task's points occurs in the cover.
  std::set<std::tuple<size_t, int, size_t, int>> pairs_all, pairs_cover;
  auto add_pairs = [&](const MeasuredPoint& p, auto& into) {
    for (size_t a = 0; a < p.value_index.size(); ++a) {
      for (size_t b = a; b < p.value_index.size(); ++b) into.insert({a, p.value_index[a], b, p.value_index[b]});
    }
  };
  for (const MeasuredPoint& p : task->points) add_pairs(p, pairs_all);
  for (int i : cover) add_pairs(task->points[i], pairs_cover);
  EXPECT_EQ(pairs_cover, pairs_all);
  std::set<int> proposed;
  for (int i : cover) {
    const int index = search.Propose(episode);
    EXPECT_EQ(index, i);
    EXPECT_STREQ(search.phase(), i == task->expert_index ? "expert-default" : "cover");
    ASSERT_TRUE(episode.Trial(index).ok());
    proposed.insert(index);
  }
  // Then the climb: one-knob changes of one of the two fastest verified points.
  std::vector<int> best;
  for (const TrialResult& t : episode.history()) {
    if (t.outcome == Outcome::kVerified) best.push_back(t.index);
  }
  std::stable_sort(best.begin(), best.end(),
                   [&](int a, int b) { return task->points[a].time_us < task->points[b].time_us; });
  ASSERT_GE(best.size(), 2u);
  const std::vector<int> round = search.ProposeBatch(episode);
  ASSERT_FALSE(round.empty());
  EXPECT_EQ(search.rounds(), 1);
  for (int i : round) {
    EXPECT_EQ(proposed.count(i), 0u);
    int differs0 = 0, differs1 = 0;
    for (size_t k = 0; k < task->points[i].value_index.size(); ++k) {
      differs0 += task->points[i].value_index[k] != task->points[best[0]].value_index[k];
      differs1 += task->points[i].value_index[k] != task->points[best[1]].value_index[k];
    }
    EXPECT_TRUE(differs0 == 1 || differs1 == 1) << PointToString(task->points[i].point);
  }
  // Deterministic: another seed proposes the same cover.
  CoverThenClimbSearcher again(2);
  again.BeginEpisode(*task, 99);
  ReplayEpisode second(*task, static_cast<int>(task->points.size()));
  EXPECT_EQ(again.ProposeBatch(second), cover);
}

// Run to the end, the cover-then-climb search tries every point once and stops climbing after its rounds.
TEST(Replay, CoverThenClimbEndsInRandomPointsAfterItsRounds) {
  const ReplayTask* largest = &Tasks().front();
  for (const auto& t : Tasks()) {
    if (t.points.size() > largest->points.size() && t.points.size() <= 400) largest = &t;
  }
  const ReplayTask& task = *largest;
  ASSERT_GE(task.points.size(), 40u);
  CoverThenClimbSearcher search(/*climb_rounds=*/1);
  search.BeginEpisode(task, 5);
  ReplayEpisode episode(task, static_cast<int>(task.points.size()));
  std::set<int> seen;
  int climbs = 0, randoms = 0;
  while (!episode.done() && episode.untried_count() > 0) {
    const int index = search.Propose(episode);
    ASSERT_GE(index, 0);
    ASSERT_TRUE(seen.insert(index).second) << index;
    const std::string phase = search.phase();
    climbs += phase == "climb";
    randoms += phase == "random";
    if (phase == "random") {
      EXPECT_TRUE(search.ProposeBatch(episode).empty());
    }
    ASSERT_TRUE(episode.Trial(index).ok());
  }
  EXPECT_EQ(seen.size(), task.points.size());
  EXPECT_EQ(search.rounds(), climbs > 0 ? 1 : 0);
  // What the cover and one round left is proposed at random.
  EXPECT_GT(randoms, 0);
}

// The k=1 comparison with the expert default is the cache's acceptance rule (reward.h, Accept) on the
// datasets' medians and interquartile ranges: a point "beats" the expert only beyond the noise.
TEST(Replay, FirstTrialComparisonIsBeyondTheNoise) {
  int compared = 0, unbeatable = 0;
  for (const auto& t : Tasks()) {
    if (t.expert_index < 0) continue;
    ++compared;
    EXPECT_EQ(CompareWithExpert(t, t.expert_index), VersusExpert::kTie);
    const MeasuredPoint& e = t.points[t.expert_index];
    bool any_faster = false;
    for (size_t i = 0; i < t.points.size(); ++i) {
      const MeasuredPoint& p = t.points[i];
      const VersusExpert v = CompareWithExpert(t, static_cast<int>(i));
      any_faster |= v == VersusExpert::kFaster;
      if (p.outcome == Outcome::kVerified && e.outcome == Outcome::kVerified) {
        EXPECT_GE(p.spread_us, 0);
        // Faster needs more than 1% of the expert's time; a tie may be either side of it.
        if (v == VersusExpert::kFaster) {
          EXPECT_LT(p.time_us, 0.99 * e.time_us);
        }
        if (v == VersusExpert::kSlower) {
          EXPECT_GT(p.time_us, e.time_us);
        }
      }
    }
    EXPECT_EQ(any_faster, ExpertBeatable(t));
    unbeatable += !ExpertBeatable(t);
  }
  EXPECT_GT(compared, 0);
  EXPECT_LT(unbeatable, compared);
}

// Live trials: an outcome observed elsewhere enters the episode as a replayed one would.
TEST(Replay, ObservedTrialsCountLikeReplayedOnes) {
  const ReplayTask& task = Tasks().front();
  ReplayEpisode episode(task, 3);
  ASSERT_TRUE(episode.Observe(0, Outcome::kWrongResult, 0).ok());
  EXPECT_EQ(episode.best_index(), -1);
  EXPECT_FALSE(episode.Observe(0, Outcome::kVerified, 1.0).ok());  // tried
  EXPECT_FALSE(episode.Observe(1, Outcome::kVerified, 0).ok());    // verified without a time
  auto r = episode.Observe(1, Outcome::kVerified, task.baseline_us / 2);
  ASSERT_TRUE(r.ok());
  EXPECT_NEAR(r->reward, std::log(2.0), 1e-9);
  EXPECT_EQ(episode.best_index(), 1);
}

// The state counts a key's valid space the same way in replay (CountSpace) as online, where the action set
// is that space (MakeLiveTask): exactly where the knobs' product is enumerated (softmax), to within the
// sampling error where it is sampled (matmul's product is millions of points, ~2% of them valid, so 2^15
// samples give ~500 valid ones: a value's share is off by up to ~0.07 on this key, 3 standard deviations;
// the bounds below are ~4.5).
TEST(Replay, CountSpaceAgreesWithTheLiveActionSet) {
  const DeviceFacts device = DeviceFacts::H200();
  for (const char* family : {"softmax", "matmul"}) {
    const Family* f = nullptr;
    for (const Family* g : Families()) {
      if (g->name() == family) f = g;
    }
    ASSERT_NE(f, nullptr) << family;
    const OpKey key = f->SampleKeys().front();
    auto live = MakeLiveTask(key, device, 100, 10);
    ASSERT_TRUE(live.ok()) << live.status().ToString();
    ReplayTask counted = *live;
    counted.space_points = 0;
    counted.space_value_counts.clear();
    CountSpace(counted, device);
    const bool sampled = std::string(family) == "matmul";
    double product = 1;
    for (const auto& knob : live->space.knobs) product *= static_cast<double>(knob.values.size());
    if (sampled) {
      ASSERT_GT(product, 1 << 18) << "matmul's sample key no longer takes the sampled path";
    }
    ASSERT_EQ(counted.space_value_counts.size(), live->space.knobs.size());
    if (!sampled) {
      EXPECT_EQ(counted.space_points, live->space_points);
      EXPECT_EQ(counted.space_value_counts, live->space_value_counts);
      continue;
    }
    const double exact = static_cast<double>(live->space_points);
    EXPECT_NEAR(static_cast<double>(counted.space_points) / exact, 1.0, 0.2) << family;
    for (size_t k = 0; k < live->space.knobs.size(); ++k) {
      for (size_t v = 0; v < live->space_value_counts[k].size(); ++v) {
        EXPECT_NEAR(static_cast<double>(counted.space_value_counts[k][v]) / static_cast<double>(counted.space_points),
                    static_cast<double>(live->space_value_counts[k][v]) / exact, 0.1)
            << family << " knob " << live->space.knobs[k].name << " value " << live->space.knobs[k].values[v];
      }
    }
  }
}

}  // namespace
}  // namespace kjit::policy::learn
