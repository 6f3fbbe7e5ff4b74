#include "kjit/policy/learn/online.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <random>

#include <nlohmann/json.hpp>

namespace kjit::policy::learn {
namespace {

double MapNumber(const std::map<std::string, std::string>& m, const std::string& key) {
  auto it = m.find(key);
  if (it == m.end()) return 0;
  try {
    return std::stod(it->second);
  } catch (const std::exception&) {
    return 0;
  }
}

}  // namespace

bool IsUnfit(const std::string& why) {
  return why.rfind("unfit: ", 0) == 0 || why.find(": unfit: ") != std::string::npos;
}

// ------------------------------------------------------------------ kjitd

Result<LiveBaseline> KjitdEvaluator::Open(const OpKey& key) {
  KJIT_ASSIGN_OR_RETURN(ipc::Observation o, client_->OpenEpisode(key.Encode()));
  episode_ = o.episode_id;
  LiveBaseline b;
  b.baseline_us = o.baseline_us;
  b.baseline_spread_us = MapNumber(o.device, "baseline_spread_us");
  b.floor_us = MapNumber(o.device, "floor_us");
  b.sm_count = static_cast<int>(MapNumber(o.device, "sm_count"));
  if (auto it = o.device.find("name"); it != o.device.end()) b.gpu_model = it->second;
  return b;
}

Result<LiveVerdict> KjitdEvaluator::Submit(const Candidate& candidate,
                                           const std::map<std::string, std::string>& design) {
  if (episode_ < 0) return InvalidArgument("no open episode");
  ipc::SubmitCandidate submit = SubmitFor(episode_, candidate, design);
  if (!compile_ahead().empty()) {
    submit.compile_ahead.emplace();
    for (const Candidate& next : compile_ahead()) submit.compile_ahead->push_back(CompileAheadEntry(next));
  }
  KJIT_ASSIGN_OR_RETURN(ipc::CandidateResult r, client_->SubmitCandidate(submit));
  LiveVerdict v;
  v.verdict = r.verdict;
  // The verdict reads "<outcome>: <reason>".
  auto outcome = ParseOutcome(r.verdict.substr(0, r.verdict.find(':')));
  v.outcome = outcome.ok() ? *outcome
              : r.verified ? Outcome::kVerified
              : r.compiled ? Outcome::kWrongResult
                           : Outcome::kCompileError;
  v.median_us = r.median_us;
  v.reward = r.reward;
  if (auto it = r.profile.find("spread_us"); it != r.profile.end()) v.spread_us = it->second;
  if (auto it = r.profile.find("accepted"); it != r.profile.end()) v.accepted = it->second > 0;
  if (auto it = r.profile.find("record"); it != r.profile.end()) v.record = static_cast<int64_t>(it->second);
  return v;
}

void KjitdEvaluator::Close() {
  if (episode_ >= 0) (void)client_->CloseEpisode(episode_);
  episode_ = -1;
}

// ---------------------------------------------------------------- episodes

const char* ProposerName(Proposer p) {
  switch (p) {
    case Proposer::kPolicy: return "policy";
    case Proposer::kRandom: return "random";
    case Proposer::kExpertThenRandom: return "expert";
    case Proposer::kCover: return "cover";
  }
  return "?";
}

Result<Proposer> ParseProposer(const std::string& name) {
  for (Proposer p : {Proposer::kPolicy, Proposer::kRandom, Proposer::kExpertThenRandom, Proposer::kCover}) {
    if (name == ProposerName(p)) return p;
  }
  return InvalidArgument("unknown proposer '" + name + "' (policy, random, expert or cover)");
}

std::map<std::string, std::string> TrialDesign(const Family& family, const Point& point,
                                               const std::string& policy_version) {
  auto design = ipc::DesignToWire(ToDesignPoint(std::string(family.name()), point, policy_version));
  design["codegen"] = std::to_string(family.codegen_version());
  return design;
}

Result<OnlineReport> RunOnlineEpisode(Agent* agent, const OpKey& key, LiveEvaluator& evaluator,
                                      const OnlineOptions& options) {
  if (options.proposer == Proposer::kPolicy && agent == nullptr) return InvalidArgument("no policy to propose points");
  KJIT_ASSIGN_OR_RETURN(Match match, FindFamily(key));
  DeviceFacts device = DeviceFacts::H200();
  device.arch = key.arch;
  KJIT_ASSIGN_OR_RETURN(LiveBaseline baseline, evaluator.Open(key));
  if (baseline.sm_count > 0) device.sm_count = baseline.sm_count;
  auto task = MakeLiveTask(key, device, baseline.baseline_us, baseline.floor_us);
  if (!task.ok()) {
    evaluator.Close();
    return task.status();
  }
  OnlineReport report;
  report.key_text = task->key_text;
  report.key_hash = key.Hash().ToHex();
  report.family = task->family_name;
  report.policy_version = agent != nullptr ? agent->version() : "";
  report.baseline = baseline;
  // Earlier rounds' trials first, as if this episode had made them; points no longer in the space (a knob's
  // domain changed) are left out.
  auto same_model = [&](const PriorTrial& p) {
    return p.gpu_model.empty() || baseline.gpu_model.empty() || p.gpu_model == baseline.gpu_model;
  };
  int prior = 0;
  for (const PriorTrial& p : options.prior) prior += same_model(p) && task->IndexOf(p.point) >= 0;
  ReplayEpisode episode(*task, options.budget + prior);
  for (const PriorTrial& p : options.prior) {
    if (!same_model(p)) continue;
    const int index = task->IndexOf(p.point);
    if (index >= 0 && !episode.tried(index)) {
      if (episode.Observe(index, p.outcome, p.median_us).ok()) ++report.prior_trials;
    }
  }
  std::mt19937_64 rng(options.seed);
  // The baselines' searcher (replay.h), as replay and kjit_tune_spaces run it; cloned for compile-ahead guesses.
  // The policy proposes through `agent` below, with the tuner's rules around it.
  std::unique_ptr<Searcher> searcher;
  switch (options.proposer) {
    case Proposer::kRandom: searcher = std::make_unique<RandomSearcher>(); break;
    case Proposer::kExpertThenRandom: searcher = std::make_unique<ExpertThenRandomSearcher>(); break;
    case Proposer::kCover: searcher = std::make_unique<CoverThenClimbSearcher>(); break;
    case Proposer::kPolicy: break;
  }
  if (searcher) searcher->BeginEpisode(*task, options.seed);

  // The next point of `ep` and who proposed it: the policy, or where it has none (the baselines, or a
  // domain the policy never saw) the expert default (not for the random baseline), then random points.
  struct Proposal {
    int index = -1;
    std::string proposer;
  };
  auto propose = [&](const ReplayEpisode& ep, std::mt19937_64& r, int* fallbacks, Searcher* search) {
    Proposal p{-1, report.policy_version};
    if (search != nullptr) {
      const int index = search->Propose(ep);
      return Proposal{index, search->ProposedBy()};
    }
    // The policy, the expert default first where the tuner asks for it.
    if (options.expert_first && task->expert_index >= 0 && !ep.tried(task->expert_index)) {
      return Proposal{task->expert_index, "expert-default"};
    }
    if (auto proposed = agent->Propose(ep, options.greedy, r, options.revise_after); proposed.ok()) {
      p.index = *proposed;
      return p;
    }
    // No head for the space: as ExpertThenRandomSearcher, drawing from the policy's random state.
    if (fallbacks != nullptr) ++*fallbacks;
    if (task->expert_index >= 0 && !ep.tried(task->expert_index)) {
      return Proposal{task->expert_index, "expert-default"};
    }
    std::uniform_int_distribution<int> pick(0, ep.untried_count() - 1);
    int nth = pick(r);
    for (int i = 0; i < static_cast<int>(task->points.size()) && p.index < 0; ++i) {
      if (!ep.tried(i) && nth-- == 0) p.index = i;
    }
    p.proposer = "random";
    return p;
  };
  // Compile-ahead: the candidates this episode would submit after `current` if `current` does not beat the
  // best so far (the common case), proposed on a copy of the episode and of the random state, so that the
  // evaluator compiles them while it verifies and times `current`. Exact for the random and expert
  // proposers; for the policy, a guess that holds while the trials do not improve on the best.
  auto guess_next = [&](const ReplayEpisode& ep, const std::mt19937_64& r, int current) {
    std::vector<Candidate> out;
    ReplayEpisode guess = ep;
    std::mt19937_64 guess_rng = r;
    std::unique_ptr<Searcher> guess_searcher = searcher ? searcher->Clone() : nullptr;
    const double slower = std::isfinite(ep.best_time_us()) ? ep.best_time_us() * 1.5 : baseline.baseline_us * 2;
    for (int k = 0; k < options.compile_ahead; ++k) {
      if (!guess.Observe(current, Outcome::kVerified, slower > 0 ? slower : 1.0).ok()) break;
      if (guess.done() || guess.untried_count() == 0) break;
      const Proposal p = propose(guess, guess_rng, nullptr, guess_searcher.get());
      if (p.index < 0) break;
      auto c = task->family->Generate(*task->problem, task->points[p.index].point, device);
      if (c.ok()) out.push_back(std::move(*c));
      current = p.index;
    }
    return out;
  };

  const auto opened = std::chrono::steady_clock::now();
  while (!episode.done()) {
    if (options.stop != nullptr && options.stop->load()) {
      report.stopped = "stopping";
      break;
    }
    if (options.max_seconds > 0 &&
        std::chrono::duration<double>(std::chrono::steady_clock::now() - opened).count() >= options.max_seconds) {
      report.stopped = "the key's time budget ran out";
      break;
    }
    if (episode.untried_count() == 0) break;
    const Proposal next = propose(episode, rng, &report.fallbacks, searcher.get());
    const int index = next.index;
    const std::string& proposer = next.proposer;
    const Point& point = task->points[index].point;
    auto candidate = task->family->Generate(*task->problem, point, device);
    if (options.compile_ahead > 0) evaluator.set_compile_ahead(guess_next(episode, rng, index));
    LiveVerdict verdict;
    if (!candidate.ok()) {
      // The generator refused a point Check accepted: a design-space bug, recorded as a compile error.
      verdict.outcome = Outcome::kCompileError;
      verdict.verdict = "generate: " + candidate.status().ToString();
      verdict.reward = Reward(TrialOutcome{Outcome::kCompileError});
    } else {
      auto answered = evaluator.Submit(*candidate, TrialDesign(*task->family, point, proposer));
      if (!answered.ok()) {
        report.stopped = "evaluator: " + answered.status().ToString();
        break;
      }
      verdict = *answered;
    }
    if (!IsTrial(verdict.outcome) && IsUnfit(verdict.verdict)) {
      report.stopped = verdict.verdict;
      report.unfit = true;
      break;
    }
    if (!IsTrial(verdict.outcome)) {
      // Not the candidate's fault (GPU busy, memory): try the same point again, a few times.
      if (++report.backoffs > options.max_backoffs) {
        report.stopped = "the evaluator kept backing off: " + verdict.verdict;
        report.resource_backoff = true;
        break;
      }
      continue;
    }
    auto observed = episode.Observe(index, verdict.outcome, verdict.median_us);
    if (!observed.ok()) {
      report.stopped = observed.status().ToString();
      break;
    }
    report.trials.push_back({point, proposer, verdict});
    if (verdict.outcome == Outcome::kVerified &&
        (report.best < 0 || verdict.median_us < report.trials[report.best].verdict.median_us)) {
      report.best = static_cast<int>(report.trials.size()) - 1;
    }
    if (options.on_trial) options.on_trial(report.trials.back());
  }
  evaluator.Close();
  return report;
}

std::string OnlineReportJson(const OnlineReport& report, Proposer proposer, bool expert_first) {
  nlohmann::json trials = nlohmann::json::array();
  for (const auto& t : report.trials) {
    trials.push_back({{"point", PointToString(t.point)},
                      {"proposer", t.proposer},
                      {"outcome", std::string(OutcomeName(t.verdict.outcome))},
                      {"median_us", t.verdict.median_us},
                      {"spread_us", t.verdict.spread_us},
                      {"accepted", t.verdict.accepted}});
  }
  nlohmann::json j = {{"key", report.key_hash},
                      {"key_text", report.key_text},
                      {"family", report.family},
                      {"mode", proposer == Proposer::kPolicy && expert_first ? std::string("tuner")
                                                                              : std::string(ProposerName(proposer))},
                      {"policy_version", report.policy_version},
                      {"baseline_us", report.baseline.baseline_us},
                      {"baseline_spread_us", report.baseline.baseline_spread_us},
                      {"floor_us", report.baseline.floor_us},
                      {"trials", trials},
                      {"best", report.best},
                      {"fallbacks", report.fallbacks},
                      {"stopped", report.stopped}};
  return j.dump();
}

// --------------------------------------------------- measurements as rows

Result<std::vector<std::string>> MeasurementRows(const cache::KernelCache& cache, int* skipped) {
  KJIT_ASSIGN_OR_RETURN(std::vector<cache::Measurement> measurements, cache.measurements().ListMeasurements());
  std::vector<std::string> rows;
  int skip = 0;
  for (const auto& m : measurements) {
    nlohmann::json detail;
    try {
      detail = nlohmann::json::parse(m.detail);
    } catch (const nlohmann::json::exception&) {
      ++skip;
      continue;
    }
    if (!detail.is_object() || !detail.contains("client_design") ||
        !detail["client_design"].is_object() || !detail["client_design"].contains("codegen")) {
      ++skip;  // no codegen version: cannot tell whether the kernel is still generated
      continue;
    }
    auto key = OpKey::Decode(m.key_bytes);
    const Family* family = nullptr;
    for (const Family* f : Families()) {
      if (f->name() == m.design.family) family = f;
    }
    if (!key.ok() || family == nullptr || m.design.knobs.empty()) {
      ++skip;
      continue;
    }
    nlohmann::json point = nlohmann::json::object();
    bool numeric = true;
    for (const auto& [name, value] : m.design.knobs) {
      try {
        point[name] = std::stoll(value);
      } catch (const std::exception&) {
        numeric = false;
      }
    }
    const std::string outcome = m.outcome == "slower" ? "verified" : m.outcome;
    if (!numeric || !ParseOutcome(outcome).ok()) {
      ++skip;
      continue;
    }
    int codegen = 0;
    try {
      codegen = std::stoi(detail["client_design"]["codegen"].get<std::string>());
    } catch (const std::exception&) {
      ++skip;
      continue;
    }
    nlohmann::json row = {{"family", m.design.family},
                          {"key", m.key_hash.ToHex()},
                          {"key_text", key->ToString()},
                          {"point", point},
                          {"outcome", outcome},
                          {"median_us", m.median_us},
                          {"spread_us", detail.value("spread_us", 0.0)},
                          {"baseline_us", m.baseline_us},
                          {"floor_us", detail.value("floor_us", 0.0)},
                          {"codegen", codegen},
                          {"phase", "online"},
                          {"policy_version", m.design.policy_version}};
    rows.push_back(row.dump());
  }
  if (skipped != nullptr) *skipped = skip;
  return rows;
}

Result<std::unique_ptr<Agent>> LearnFromTrials(const std::string& dataset_directory, cache::KernelCache& cache,
                                               int iterations, TrainReport* report) {
  KJIT_ASSIGN_OR_RETURN(std::vector<std::string> files, DatasetFiles(dataset_directory));
  KJIT_ASSIGN_OR_RETURN(std::vector<std::string> rows, MeasurementRows(cache));
  KJIT_ASSIGN_OR_RETURN(std::vector<ReplayTask> tasks, LoadDatasets(files, DeviceFacts::H200(), nullptr, rows));
  std::vector<const ReplayTask*> train;
  for (const auto& t : tasks) {
    if (!IsHeldOut(t)) train.push_back(&t);
  }
  if (train.empty()) return NotFound("no training keys in " + dataset_directory + " or the cache's measurements");
  TrainOptions options;
  options.iterations = iterations;
  options.resume = true;
  options.checkpoint_every = 0;  // one, at the end
  options.report_every = 0;
  return Train(train, &cache, options, report);
}

}  // namespace kjit::policy::learn
