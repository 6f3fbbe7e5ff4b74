// Online episodes (policy/learn/online.h) on a CPU: a fake evaluator answers
// from a key's measured dataset points (every valid point measured, so the
// live action set is all answerable) and stores every trial in a cache as
// kjitd does (server.cc, Record); the cache's measurements then read back as
// dataset rows the trainer loads. Fixed seeds, no timing thresholds.
#include <gtest/gtest.h>

#include <set>

#include <nlohmann/json.hpp>

#include "../cache/cache_test_util.h"
#include "kjit/policy/learn/online.h"

namespace kjit::policy::learn {
namespace {

using cache::testing::TempDir;

const std::vector<ReplayTask>& AllTasks() {
  static const std::vector<ReplayTask> tasks = [] {
    auto files = DatasetFiles(DefaultDatasetDirectory());
    EXPECT_TRUE(files.ok()) << files.status().ToString();
    auto loaded = LoadDatasets(*files, DeviceFacts::H200());
    EXPECT_TRUE(loaded.ok()) << loaded.status().ToString();
    return loaded.ok() ? std::move(*loaded) : std::vector<ReplayTask>{};
  }();
  return tasks;
}

// The first key (loader order) of `family` whose every valid point was measured, with at least 40.
const ReplayTask* ExhaustiveTask(const std::string& family) {
  for (const auto& t : AllTasks()) {
    if (t.family_name != family || t.points.size() < 40) continue;
    if (ValidPoints(*t.family, *t.problem, DeviceFacts::H200()).size() == t.points.size()) return &t;
  }
  return nullptr;
}

// kjitd's evaluator, faked: answers from the task's measurements and records each trial in `cache` the way
// kjitd's server does (the design from the wire, the client's design map in the detail).
class ReplayEvaluator : public LiveEvaluator {
 public:
  ReplayEvaluator(const ReplayTask& task, cache::KernelCache* cache) : task_(task), cache_(cache) {}

  Result<LiveBaseline> Open(const OpKey& key) override {
    EXPECT_EQ(key.Hash(), task_.key.Hash());
    ++opened;
    return LiveBaseline{task_.baseline_us, 0.5, task_.floor_us, 132, gpu_model};
  }
  Result<LiveVerdict> Submit(const Candidate& candidate, const std::map<std::string, std::string>& design) override {
    if (fail_after >= 0 && static_cast<int>(designs.size()) >= fail_after) return Status(StatusCode::kUnavailable, "kjitd went away");
    EXPECT_FALSE(candidate.source.empty());
    EXPECT_FALSE(candidate.entry_point.empty());
    LiveVerdict v;
    if (backoff_first && !backed_off) {
      backed_off = true;
      v.outcome = Outcome::kResourceBackoff;
      v.verdict = "resource_backoff: out of memory under the cap";
      return v;
    }
    designs.push_back(design);
    sources.push_back(candidate.source);
    std::vector<std::string> ahead;
    for (const Candidate& c : compile_ahead()) ahead.push_back(c.source);
    ahead_sources.push_back(std::move(ahead));
    const cache::DesignPoint d = ipc::DesignFromWire(design);
    Point point;
    for (const auto& [name, value] : d.knobs) point[name] = std::stoll(value);
    const int index = task_.IndexOf(point);
    EXPECT_GE(index, 0) << PointToString(point);
    if (index < 0) return Internal("not a measured point");
    const MeasuredPoint& p = task_.points[index];
    v.outcome = p.outcome;
    v.median_us = p.outcome == Outcome::kVerified ? p.time_us : 0;
    v.spread_us = p.spread_us;
    v.reward = Reward(TrialOutcome{p.outcome, p.time_us, task_.baseline_us});
    v.verdict = std::string(OutcomeName(p.outcome)) + ": from the dataset";
    if (cache_ != nullptr) {
      cache::Measurement m;
      m.key_hash = task_.key.Hash();
      m.key_bytes = task_.key.Encode();
      m.design = d;
      m.outcome = OutcomeName(p.outcome);
      m.median_us = v.median_us;
      m.baseline_us = task_.baseline_us;
      m.reward = v.reward;
      m.detail = nlohmann::json{{"reason", "fake"}, {"spread_us", p.spread_us}, {"floor_us", task_.floor_us},
                                {"client_design", design}}
                     .dump();
      EXPECT_TRUE(cache_->measurements().AddMeasurement(m).ok());
    }
    return v;
  }
  void Close() override { ++closed; }

  int opened = 0, closed = 0;
  int fail_after = -1;
  std::string gpu_model = "NVIDIA H200";
  bool backoff_first = false, backed_off = false;
  std::vector<std::map<std::string, std::string>> designs;
  std::vector<std::string> sources;                     // each submission's source
  std::vector<std::vector<std::string>> ahead_sources;  // the compile-ahead sources sent with it

 private:
  const ReplayTask& task_;
  cache::KernelCache* cache_;
};

AgentOptions SmallOptions() {
  AgentOptions o;
  o.hidden = 32;
  o.seed = 3;
  return o;
}

TEST(Online, EpisodeProposesValidUntriedPointsAndRecordsThePolicyVersion) {
  const ReplayTask* task = ExhaustiveTask("layer_norm");
  ASSERT_NE(task, nullptr);
  auto agent = Agent::Create({task}, SmallOptions());
  ReplayEvaluator evaluator(*task, nullptr);
  OnlineOptions options;
  options.budget = 6;
  auto report = RunOnlineEpisode(*agent, task->key, evaluator, options);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_EQ(report->stopped, "");
  EXPECT_EQ(report->fallbacks, 0);
  EXPECT_EQ(report->policy_version, agent->version());
  ASSERT_EQ(report->trials.size(), 6u);
  EXPECT_EQ(evaluator.opened, 1);
  EXPECT_EQ(evaluator.closed, 1);
  std::set<Point> seen;
  double best = INFINITY;
  for (size_t i = 0; i < report->trials.size(); ++i) {
    const auto& t = report->trials[i];
    EXPECT_TRUE(seen.insert(t.point).second) << "proposed twice: " << PointToString(t.point);
    EXPECT_TRUE(task->family->Check(*task->problem, t.point, DeviceFacts::H200()).ok());
    EXPECT_EQ(t.proposer, agent->version());
    // The design point kjitd stores with the trial and, if accepted, the kernel.
    const auto& d = evaluator.designs[i];
    EXPECT_EQ(d.at("family"), task->family_name);
    EXPECT_EQ(d.at("policy_version"), agent->version());
    EXPECT_EQ(d.at("codegen"), std::to_string(task->family->codegen_version()));
    EXPECT_EQ(ipc::DesignFromWire(d).knobs.size(), task->space.knobs.size());
    if (t.verdict.outcome == Outcome::kVerified) best = std::min(best, t.verdict.median_us);
  }
  ASSERT_GE(report->best, 0);
  EXPECT_EQ(report->trials[report->best].verdict.median_us, best);

  // Greedy episodes are deterministic.
  ReplayEvaluator again(*task, nullptr);
  auto second = RunOnlineEpisode(*agent, task->key, again, options);
  ASSERT_TRUE(second.ok());
  ASSERT_EQ(second->trials.size(), report->trials.size());
  for (size_t i = 0; i < report->trials.size(); ++i) EXPECT_EQ(second->trials[i].point, report->trials[i].point);

  // As kjitd's tuner runs it: the expert default first, then the policy, nothing proposed twice.
  ReplayEvaluator tuner(*task, nullptr);
  options.expert_first = true;
  auto first = RunOnlineEpisode(*agent, task->key, tuner, options);
  ASSERT_TRUE(first.ok());
  ASSERT_EQ(first->trials.size(), 6u);
  EXPECT_EQ(first->trials[0].point, task->points[task->expert_index].point);
  EXPECT_EQ(first->trials[0].proposer, "expert-default");
  std::set<Point> distinct;
  for (size_t i = 0; i < first->trials.size(); ++i) {
    EXPECT_TRUE(distinct.insert(first->trials[i].point).second);
    if (i > 0) {
      EXPECT_EQ(first->trials[i].proposer, agent->version());
    }
  }
}

TEST(Online, BackoffRetriesAndTransportErrorsEndTheEpisode) {
  const ReplayTask* task = ExhaustiveTask("layer_norm");
  ASSERT_NE(task, nullptr);
  auto agent = Agent::Create({task}, SmallOptions());
  OnlineOptions options;
  options.budget = 4;
  ReplayEvaluator busy(*task, nullptr);
  busy.backoff_first = true;
  auto r = RunOnlineEpisode(*agent, task->key, busy, options);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->backoffs, 1);
  EXPECT_EQ(r->trials.size(), 4u);  // a backoff is not a trial

  ReplayEvaluator gone(*task, nullptr);
  gone.fail_after = 2;
  r = RunOnlineEpisode(*agent, task->key, gone, options);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->trials.size(), 2u);
  EXPECT_NE(r->stopped.find("kjitd went away"), std::string::npos) << r->stopped;
  EXPECT_EQ(gone.closed, 1);
}

TEST(Online, TrialsStoredInTheCacheLoadAsTrainingRows) {
  const ReplayTask* task = ExhaustiveTask("layer_norm");
  ASSERT_NE(task, nullptr);
  TempDir dir;
  auto cache = cache::KernelCache::Open(cache::OpenOptions{.path = dir.file("cache.db")});
  ASSERT_TRUE(cache.ok());
  // A measurement without the client's codegen version (an external agent's) cannot be replayed.
  cache::Measurement anonymous;
  anonymous.key_hash = task->key.Hash();
  anonymous.key_bytes = task->key.Encode();
  anonymous.design = {"agent", {}, "external-agent"};
  anonymous.outcome = "verified";
  anonymous.median_us = 1;
  anonymous.baseline_us = 2;
  anonymous.detail = "{}";
  ASSERT_TRUE((*cache)->measurements().AddMeasurement(anonymous).ok());

  auto agent = Agent::Create({task}, SmallOptions());
  ReplayEvaluator evaluator(*task, cache->get());
  OnlineOptions options;
  options.budget = 5;
  auto report = RunOnlineEpisode(*agent, task->key, evaluator, options);
  ASSERT_TRUE(report.ok());
  ASSERT_EQ(report->trials.size(), 5u);

  int skipped = 0;
  auto rows = MeasurementRows(**cache, &skipped);
  ASSERT_TRUE(rows.ok()) << rows.status().ToString();
  EXPECT_EQ(skipped, 1);
  ASSERT_EQ(rows->size(), 5u);
  DatasetReport loaded_report;
  auto loaded = LoadDatasets({}, DeviceFacts::H200(), &loaded_report, *rows);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  ASSERT_EQ(loaded->size(), 1u) << (loaded_report.skipped.empty() ? "" : loaded_report.skipped.front());
  const ReplayTask& live = loaded->front();
  EXPECT_EQ(live.key_hash, task->key_hash);
  EXPECT_EQ(IsHeldOut(live), IsHeldOut(*task));  // the split follows the key, wherever its rows came from
  ASSERT_EQ(live.points.size(), 5u);
  for (const auto& t : report->trials) {
    const int i = live.IndexOf(t.point);
    ASSERT_GE(i, 0);
    EXPECT_EQ(live.points[i].outcome, t.verdict.outcome);
    if (t.verdict.outcome == Outcome::kVerified) {
      // Times are stored relative to the baseline timed with them, as dataset rows are.
      EXPECT_NEAR(live.points[i].time_us, t.verdict.median_us, 1e-9 * t.verdict.median_us);
    }
  }
}

// The baselines of the online learning curve: no policy needed, no point proposed twice, every one valid;
// "expert" starts at the family's expert default, "random" does not favour it.
TEST(Online, BaselineProposersNeedNoPolicyAndWriteJson) {
  const ReplayTask* task = ExhaustiveTask("layer_norm");
  ASSERT_NE(task, nullptr);
  ASSERT_GE(task->expert_index, 0);
  for (Proposer proposer : {Proposer::kRandom, Proposer::kExpertThenRandom}) {
    SCOPED_TRACE(ProposerName(proposer));
    ReplayEvaluator evaluator(*task, nullptr);
    OnlineOptions options;
    options.proposer = proposer;
    options.budget = 5;
    options.seed = 7;
    auto report = RunOnlineEpisode(nullptr, task->key, evaluator, options);
    ASSERT_TRUE(report.ok()) << report.status().ToString();
    ASSERT_EQ(report->trials.size(), 5u);
    EXPECT_EQ(report->fallbacks, 0);
    std::set<Point> seen;
    for (const auto& t : report->trials) {
      EXPECT_TRUE(seen.insert(t.point).second);
      EXPECT_TRUE(task->family->Check(*task->problem, t.point, DeviceFacts::H200()).ok());
    }
    const bool first_is_expert = report->trials[0].point == task->points[task->expert_index].point;
    EXPECT_EQ(first_is_expert, proposer == Proposer::kExpertThenRandom);
    EXPECT_EQ(report->trials[0].proposer, proposer == Proposer::kExpertThenRandom ? "expert-default" : "random");

    auto j = nlohmann::json::parse(OnlineReportJson(*report, proposer));
    EXPECT_EQ(j["mode"], ProposerName(proposer));
    EXPECT_EQ(j["key"], task->key.Hash().ToHex());
    ASSERT_EQ(j["trials"].size(), 5u);
    EXPECT_EQ(j["trials"][0]["point"], PointToString(report->trials[0].point));
    EXPECT_EQ(j["best"], report->best);
  }
  // The datasets' search (CoverThenClimbSearcher) online: the expert default, then the cover, with the compile-ahead
  // guesses exact (the cover does not depend on the times).
  {
    ReplayEvaluator evaluator(*task, nullptr);
    OnlineOptions options;
    options.proposer = Proposer::kCover;
    options.budget = 6;
    options.compile_ahead = 2;
    auto report = RunOnlineEpisode(nullptr, task->key, evaluator, options);
    ASSERT_TRUE(report.ok()) << report.status().ToString();
    ASSERT_EQ(report->trials.size(), 6u);
    EXPECT_EQ(report->trials[0].point, task->points[task->expert_index].point);
    EXPECT_EQ(report->trials[0].proposer, "expert-default");
    EXPECT_EQ(report->trials[1].proposer, "cover");
    for (size_t i = 0; i + 1 < evaluator.sources.size(); ++i) EXPECT_EQ(evaluator.ahead_sources[i][0], evaluator.sources[i + 1]);
    EXPECT_EQ(ParseProposer("cover").value(), Proposer::kCover);
  }
  // The policy proposer without a policy is refused, not a crash.
  ReplayEvaluator evaluator(*task, nullptr);
  EXPECT_FALSE(RunOnlineEpisode(nullptr, task->key, evaluator, OnlineOptions{}).ok());
  EXPECT_EQ(evaluator.opened, 0);
  EXPECT_EQ(ParseProposer("expert").value(), Proposer::kExpertThenRandom);
  EXPECT_FALSE(ParseProposer("oracle").ok());
}

// Compile-ahead: each submission carries the candidates the episode expects to submit next, for kjitd's
// evaluator to compile meanwhile. For the expert-then-random proposer the guess is exact: the next submission
// is the first one guessed, and the guesses are valid, distinct and untried.
TEST(Online, EachSubmissionCarriesTheNextCandidatesToCompile) {
  const ReplayTask* task = ExhaustiveTask("layer_norm");
  ASSERT_NE(task, nullptr);
  ReplayEvaluator evaluator(*task, nullptr);
  OnlineOptions options;
  options.proposer = Proposer::kExpertThenRandom;
  options.budget = 6;
  options.seed = 11;
  options.compile_ahead = 2;
  auto report = RunOnlineEpisode(nullptr, task->key, evaluator, options);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  ASSERT_EQ(evaluator.sources.size(), 6u);
  for (size_t i = 0; i + 1 < evaluator.sources.size(); ++i) {
    SCOPED_TRACE(i);
    // Two guesses, fewer near the end of the budget (nothing is guessed past it).
    ASSERT_EQ(evaluator.ahead_sources[i].size(), std::min<size_t>(2, 6 - (i + 1)));
    EXPECT_EQ(evaluator.ahead_sources[i][0], evaluator.sources[i + 1]);
    if (evaluator.ahead_sources[i].size() < 2) continue;
    EXPECT_NE(evaluator.ahead_sources[i][0], evaluator.ahead_sources[i][1]);
    for (size_t j = 0; j <= i; ++j) EXPECT_NE(evaluator.ahead_sources[i][1], evaluator.sources[j]);
  }
  EXPECT_TRUE(evaluator.ahead_sources.back().empty());
  // The same trials as without compile-ahead: guessing draws from a copy of the random state.
  ReplayEvaluator plain(*task, nullptr);
  options.compile_ahead = 0;
  ASSERT_TRUE(RunOnlineEpisode(nullptr, task->key, plain, options).ok());
  EXPECT_EQ(plain.sources, evaluator.sources);
  for (const auto& a : plain.ahead_sources) EXPECT_TRUE(a.empty());
}

// An episode starts from the key's earlier trials (OnlineOptions::prior) measured on its baseline's GPU model or
// an unknown one: those points are not proposed again. Another model's trials are left out (their times do not
// compare with this model's), so their points may be tried again here: a kernel served on an H200 that an H100
// timed is timed anew.
TEST(Online, PriorTrialsOfAnotherGpuModelAreNotThisModels) {
  const ReplayTask* task = ExhaustiveTask("layer_norm");
  ASSERT_NE(task, nullptr);
  ASSERT_GE(task->points.size(), 4u);
  std::vector<PriorTrial> prior;
  auto add = [&](int i, const std::string& model) {
    prior.push_back(PriorTrial{task->points[i].point, Outcome::kVerified, 10.0, model});
  };
  add(0, "NVIDIA H200");
  add(1, "");
  add(2, "NVIDIA H100 80GB HBM3");
  add(3, "NVIDIA H100 80GB HBM3");
  ReplayEvaluator evaluator(*task, nullptr);
  OnlineOptions options;
  options.proposer = Proposer::kRandom;
  options.budget = static_cast<int>(task->points.size());  // every point not yet tried on this model
  options.prior = prior;
  auto report = RunOnlineEpisode(nullptr, task->key, evaluator, options);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_EQ(report->prior_trials, 2);
  std::set<Point> tried;
  for (const auto& t : report->trials) tried.insert(t.point);
  EXPECT_EQ(tried.count(task->points[0].point), 0u);
  EXPECT_EQ(tried.count(task->points[1].point), 0u);
  EXPECT_EQ(tried.count(task->points[2].point), 1u);
  EXPECT_EQ(tried.count(task->points[3].point), 1u);

  // A baseline that does not name its GPU: every prior trial counts.
  ReplayEvaluator unnamed(*task, nullptr);
  unnamed.gpu_model.clear();
  options.budget = 1;
  report = RunOnlineEpisode(nullptr, task->key, unnamed, options);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_EQ(report->prior_trials, 4);
}

// A split reduction (kernel ABI v2) takes a workspace: the request must say so, or kjitd's launch passes one
// parameter too few and every such point fails with CUDA_ERROR_INVALID_VALUE (seen on the H200).
TEST(Online, SubmitCarriesTheLaunchShapeAndWorkspace) {
  const ReplayTask* split = nullptr;
  int index = -1;
  for (const auto& t : AllTasks()) {
    if (t.family_name != "reduce") continue;
    for (size_t i = 0; i < t.points.size() && index < 0; ++i) {
      auto c = t.family->Generate(*t.problem, t.points[i].point, DeviceFacts::H200());
      if (c.ok() && c->launch.workspace_bytes != 0) {
        split = &t;
        index = static_cast<int>(i);
      }
    }
    if (split != nullptr) break;
  }
  ASSERT_NE(split, nullptr) << "no reduce point in the datasets uses a workspace";
  auto c = split->family->Generate(*split->problem, split->points[index].point, DeviceFacts::H200());
  ASSERT_TRUE(c.ok());
  const auto design = TrialDesign(*split->family, split->points[index].point, "test");
  const ipc::SubmitCandidate s = SubmitFor(42, *c, design);
  EXPECT_EQ(s.episode_id, 42);
  EXPECT_EQ(s.source, c->source);
  EXPECT_EQ(s.entry_point, c->entry_point);
  EXPECT_EQ(s.dynamic_shared_bytes, c->launch.dynamic_shared_bytes);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(s.grid[i], c->launch.grid[i]);
    EXPECT_EQ(s.block[i], c->launch.block[i]);
  }
  ASSERT_TRUE(s.workspace_bytes.has_value());
  EXPECT_EQ(*s.workspace_bytes, c->launch.workspace_bytes);
  EXPECT_EQ(s.design, design);
  c->launch.workspace_bytes = 0;
  EXPECT_FALSE(SubmitFor(42, *c, design).workspace_bytes.has_value());  // v1 kernels: the field is absent
}


// Online learning between episodes: the trials of an episode (stored as kjitd stores them) join the datasets,
// training resumes from the checkpoint that proposed them, and the next checkpoint is what the cache serves.
TEST(Online, LearnFromTrialsResumesAndSavesTheNextCheckpoint) {
  const ReplayTask* task = ExhaustiveTask("layer_norm");
  ASSERT_NE(task, nullptr);
  TempDir dir;
  auto cache = cache::KernelCache::Open(cache::OpenOptions{.path = dir.file("cache.db")});
  ASSERT_TRUE(cache.ok());
  auto agent = Agent::Create({task}, SmallOptions());
  ASSERT_TRUE(SaveCheckpoint(**cache, *agent).ok());
  ReplayEvaluator evaluator(*task, cache->get());
  OnlineOptions options;
  options.budget = 3;
  ASSERT_TRUE(RunOnlineEpisode(*agent, task->key, evaluator, options).ok());

  TrainReport report;
  auto learned = LearnFromTrials(DefaultDatasetDirectory(), **cache, 2, &report);
  ASSERT_TRUE(learned.ok()) << learned.status().ToString();
  EXPECT_TRUE(report.resumed);
  EXPECT_EQ(report.start_iteration, agent->iteration());
  EXPECT_EQ((*learned)->iteration(), agent->iteration() + 2);
  EXPECT_EQ(report.checkpoints_saved, 1);
  auto newest = LoadLatestCheckpoint(**cache, nullptr);
  ASSERT_TRUE(newest.ok()) << newest.status().ToString();
  EXPECT_EQ((*newest)->version(), (*learned)->version());
  EXPECT_NE((*learned)->version(), agent->version());

  // No datasets and nothing measured: an error, and the cache keeps its checkpoints.
  TempDir empty;
  auto bare = cache::KernelCache::Open(cache::OpenOptions{.path = empty.file("cache.db")});
  ASSERT_TRUE(bare.ok());
  EXPECT_FALSE(LearnFromTrials(empty.path(), **bare, 2).ok());
}

}  // namespace
}  // namespace kjit::policy::learn
