#include "kjit/policy/learn/tuner.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <thread>

#include <ATen/Parallel.h>
#include <nlohmann/json.hpp>

#include "kjit/policy/learn/train.h"

namespace kjit::policy::learn {
namespace {

using Clock = std::chrono::steady_clock;

int64_t UnixMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string Fixed(double v, int digits = 2) {
  char b[64];
  std::snprintf(b, sizeof b, "%.*f", digits, v);
  return b;
}

Result<std::unique_ptr<cache::KernelCache>> OpenCache(const std::string& path) {
  cache::OpenOptions o;
  o.path = path;
  o.busy_timeout = std::chrono::milliseconds(30000);  // several tuners and kjitd write the same file
  return cache::KernelCache::Open(o);
}

}  // namespace

OnlineOptions RoundOptions(const TunerOptions& options, const cache::Task& task) {
  OnlineOptions o;
  // Without a policy the baselines' expert-then-random serves; the policy itself falls back to the expert
  // default where it has no head for the space.
  o.proposer = options.proposer;
  o.expert_first = true;  // a key's first trial is its family's expert default, whoever proposes the rest
  o.budget = task.round == 0 ? options.first_trials : options.trials;
  o.greedy = options.greedy;
  o.revise_after = options.revise_after;
  // A fresh seed per round of a key, so that random points of a later round are not the first round's.
  o.seed = task.key_hash.low ^ (static_cast<uint64_t>(task.round) * 0x9e3779b97f4a7c15ull);
  o.max_seconds = options.key_seconds;
  return o;
}

Result<std::vector<PriorTrial>> PriorTrials(const cache::KernelCache& cache, const OpKey& key) {
  KJIT_ASSIGN_OR_RETURN(Match match, FindFamily(key));
  const std::string family(match.family->name());
  const std::string codegen = std::to_string(match.family->codegen_version());
  const Hash128 hash = key.Hash();
  KJIT_ASSIGN_OR_RETURN(std::vector<cache::Measurement> ms, cache.measurements().ListMeasurementsOfKey(hash));
  std::vector<PriorTrial> out;
  for (const auto& m : ms) {
    if (m.design.family != family || m.design.knobs.empty()) continue;
    std::string gpu_model;
    // Only trials of the kernels generated today: an older codegen's point may be another kernel now.
    try {
      const auto detail = nlohmann::json::parse(m.detail);
      if (detail.value("client_design", nlohmann::json::object()).value("codegen", std::string()) != codegen) continue;
      gpu_model = detail.value("gpu_model", std::string());
    } catch (const nlohmann::json::exception&) {
      continue;
    }
    const std::string outcome = m.outcome == "slower" ? "verified" : m.outcome;
    auto parsed = ParseOutcome(outcome);
    if (!parsed.ok() || !IsTrial(*parsed)) continue;
    PriorTrial p;
    bool numeric = true;
    for (const auto& [name, value] : m.design.knobs) {
      try {
        p.point[name] = std::stoll(value);
      } catch (const std::exception&) {
        numeric = false;
      }
    }
    if (!numeric) continue;
    p.outcome = *parsed;
    p.median_us = m.median_us;
    p.gpu_model = std::move(gpu_model);
    out.push_back(std::move(p));
  }
  return out;
}

struct Tuner::Job {
  int index = 0;
  std::string claimer;
  std::unique_ptr<cache::KernelCache> cache;
  std::unique_ptr<LiveEvaluator> evaluator;
  std::unique_ptr<Agent> agent;
  int64_t checkpoint_id = 0;  // the loaded checkpoint's, 0: none
};

Tuner::Tuner(TunerOptions options, EvaluatorFactory make_evaluator, TunerLog log)
    : options_(std::move(options)), make_evaluator_(std::move(make_evaluator)), log_(std::move(log)) {
  if (options_.jobs < 1) options_.jobs = 1;
  if (options_.datasets.empty()) options_.datasets = DefaultDatasetDirectory();
}

Tuner::~Tuner() = default;

Status Tuner::Run(const std::atomic<bool>& stop) {
  // Each thread opens the cache itself: one SQLite connection a thread, as several processes would.
  KJIT_ASSIGN_OR_RETURN(auto probe, OpenCache(options_.cache_path));
  probe.reset();
  log_("info", "tuner_started",
       {{"jobs", std::to_string(options_.jobs)}, {"first_trials", std::to_string(options_.first_trials)},
        {"trials", std::to_string(options_.trials)}, {"key_seconds", Fixed(options_.key_seconds, 0)},
        {"proposer", ProposerName(options_.proposer)}, {"claimer", options_.claimer}});
  std::atomic<bool> jobs_done{false};
  std::vector<std::thread> threads;
  std::vector<std::unique_ptr<std::atomic<bool>>> finished;
  for (int i = 0; i < options_.jobs; ++i) {
    finished.push_back(std::make_unique<std::atomic<bool>>(false));
    threads.emplace_back([this, i, &stop, flag = finished.back().get()] { RunJob(i, stop, *flag); });
  }
  std::thread learner;
  if (options_.proposer == Proposer::kPolicy) learner = std::thread([this, &stop, &jobs_done] { RunLearner(stop, jobs_done); });
  for (auto& t : threads) t.join();
  jobs_done = true;
  if (learner.joinable()) learner.join();
  log_("info", "tuner_stopped", {{"rounds", std::to_string(rounds_.load())}});
  return Status::Ok();
}

void Tuner::RunJob(int index, const std::atomic<bool>& stop, std::atomic<bool>& done) {
  Job job;
  job.index = index;
  job.claimer = options_.claimer + "/" + std::to_string(index);
  auto opened = OpenCache(options_.cache_path);
  if (!opened.ok()) {
    log_("error", "tuner_job_failed", {{"job", job.claimer}, {"error", opened.status().ToString()}});
    done = true;
    return;
  }
  job.cache = std::move(*opened);
  job.evaluator = make_evaluator_();
  cache::ClaimOptions claim;
  claim.claimer = job.claimer;
  claim.lease = options_.lease;
  while (!stop.load()) {
    if (options_.max_rounds > 0 && rounds_.load() >= options_.max_rounds) break;
    auto task = job.cache->tasks().ClaimTask(claim);
    if (!task.ok()) {
      // The file is busy (another writer) or broken: say so, and try again after a pause.
      log_("warn", "tuner_claim_failed", {{"job", job.claimer}, {"error", task.status().ToString()}});
      std::this_thread::sleep_for(options_.idle_poll * 5);
      continue;
    }
    if (!task->has_value()) {
      if (options_.exit_when_idle) break;
      std::this_thread::sleep_for(options_.idle_poll);
      continue;
    }
    const RoundSummary summary = TuneTask(job, **task, stop);
    ++rounds_;
    std::map<std::string, std::string> fields = {{"job", job.claimer},
                                                 {"task", std::to_string(summary.task_id)},
                                                 {"key", summary.key_text},
                                                 {"state", summary.state},
                                                 {"trials", std::to_string(summary.trials)},
                                                 {"detail", summary.detail.substr(0, 300)}};
    if (summary.best_us > 0) {
      fields["best_us"] = Fixed(summary.best_us, 3);
      fields["speedup"] = Fixed(summary.baseline_us / summary.best_us);
    }
    if (summary.record_id > 0) fields["record"] = std::to_string(summary.record_id);
    log_("info", "tuner_round", fields);
  }
  done = true;
}

RoundSummary Tuner::TuneTask(Job& job, const cache::Task& task, const std::atomic<bool>& stop) {
  RoundSummary summary;
  summary.task_id = task.id;
  cache::TaskResult result;
  auto finish = [&](std::string state, std::string detail) {
    result.state = std::move(state);
    result.detail = std::move(detail);
    if (Status st = job.cache->tasks().CompleteTask(task.id, job.claimer, result); !st.ok()) {
      log_("warn", "tuner_claim_lost", {{"job", job.claimer}, {"task", std::to_string(task.id)}, {"error", st.ToString()}});
    }
    summary.state = result.state;
    summary.detail = result.detail;
    summary.trials = result.trials;
    summary.best_us = result.best_us;
    summary.baseline_us = result.baseline_us;
    summary.record_id = result.record_id;
    return summary;
  };
  auto key = OpKey::Decode(task.key_bytes);
  if (!key.ok()) return finish("failed", "the task's key does not decode: " + key.status().ToString());
  summary.key_text = key->ToString();
  if (auto match = FindFamily(*key); !match.ok()) {
    result.round_done = true;
    return finish("done", "no design space: " + match.status().message() + "; PyTorch's kernel serves it");
  }

  // The newest policy, if there is one newer than the job's.
  OnlineOptions options = RoundOptions(options_, task);
  if (options_.proposer == Proposer::kPolicy) {
    auto latest = job.cache->checkpoints().LatestGoodCheckpoint();
    if (latest.ok() && latest->id != job.checkpoint_id) {
      std::vector<std::string> notes;
      auto agent = LoadLatestCheckpoint(*job.cache, &notes);
      if (agent.ok()) {
        job.agent = std::move(*agent);
        job.checkpoint_id = latest->id;
        log_("info", "tuner_policy_loaded", {{"job", job.claimer}, {"policy", job.agent->version()}});
      }
    }
    // Until a checkpoint exists: the expert default, then random points.
    if (!job.agent) options.proposer = Proposer::kExpertThenRandom;
  }
  auto prior = PriorTrials(*job.cache, *key);
  if (prior.ok()) options.prior = std::move(*prior);
  options.stop = &stop;
  cache::ClaimOptions renew;
  renew.claimer = job.claimer;
  renew.lease = options_.lease;
  options.on_trial = [&](const OnlineTrial& t) {
    log_("info", "tuner_trial",
         {{"job", job.claimer}, {"task", std::to_string(task.id)}, {"point", PointToString(t.point)},
          {"proposer", t.proposer}, {"verdict", t.verdict.verdict.substr(0, 200)},
          {"median_us", Fixed(t.verdict.median_us, 3)}, {"stored", t.verdict.accepted ? "yes" : "no"}});
    if (Status st = job.cache->tasks().RenewClaim(task.id, renew); !st.ok()) {
      log_("warn", "tuner_claim_lost", {{"job", job.claimer}, {"task", std::to_string(task.id)}, {"error", st.ToString()}});
    }
  };
  Agent* agent = options.proposer == Proposer::kPolicy ? job.agent.get() : nullptr;
  auto report = RunOnlineEpisode(agent, *key, *job.evaluator, options);
  if (!report.ok()) {
    const Status& st = report.status();
    if (IsUnfit(st.message())) return finish("unfit", st.message());
    if (st.code() == StatusCode::kUnavailable) {
      // Not the key's fault (the GPU lacks memory now, busy, or kjitd's evaluator restarts): the key waits
      // and the job takes the next one meanwhile.
      result.not_before_unix_ms = UnixMs() + options_.wait_when_busy.count();
      return finish("queued", "waiting: " + st.message());
    }
    return finish("failed", st.ToString());
  }
  result.trials = static_cast<int>(report->trials.size());
  result.baseline_us = report->baseline.baseline_us;
  result.floor_us = report->baseline.floor_us;
  for (const auto& t : report->trials) {
    if (t.verdict.outcome != Outcome::kVerified || !t.verdict.accepted) continue;
    if (result.best_us == 0 || t.verdict.median_us < result.best_us) {
      result.best_us = t.verdict.median_us;
      result.record_id = t.verdict.record;
      result.policy_version = t.proposer;
    }
  }
  // The round's own figures; the task keeps the key's best over every round.
  std::string detail = "round " + std::to_string(task.round + 1) + ": " + std::to_string(result.trials) + " trials";
  if (result.best_us > 0) {
    detail += ", best " + Fixed(result.best_us, 3) + " us (" + Fixed(result.baseline_us / result.best_us) +
              "x PyTorch)";
  } else if (!report->trials.empty() && task.best_us > 0) {
    detail += ", none faster than the key's best so far, " + Fixed(task.best_us, 3) + " us (" +
              Fixed(task.baseline_us / task.best_us) + "x PyTorch)";
  } else if (!report->trials.empty()) {
    detail += ", no kernel beat PyTorch's";
  }
  if (!report->stopped.empty()) detail += "; " + report->stopped;
  if (report->unfit) return finish("unfit", report->stopped);
  if (report->resource_backoff && report->trials.empty()) {
    result.not_before_unix_ms = UnixMs() + options_.wait_when_busy.count();
    return finish("queued", "waiting: " + report->stopped);
  }
  if (stop.load() && report->stopped == "stopping") {
    // Cut short by a shutdown: the round is not over; its trials are kept (the measurements) and the next
    // round of the key starts from them.
    return finish("queued", detail + "; handed back: the tuner stopped");
  }
  result.round_done = true;
  if (task.round == 0 && options_.trials > 0) {
    // The search round comes after every key's first round: below any fresh key's priority.
    result.priority = std::min(task.priority, 0) - 1;
    return finish("queued", detail + "; a search round follows");
  }
  return finish("done", detail);
}

void Tuner::RunLearner(const std::atomic<bool>& stop, const std::atomic<bool>& jobs_done) {
  auto opened = OpenCache(options_.cache_path);
  if (!opened.ok()) return;
  cache::KernelCache& cache = **opened;
  // Training shares the CPUs with the evaluator workers' compiles (NVRTC): a quarter of them is enough.
  at::set_num_threads(static_cast<int>(std::max(1u, std::thread::hardware_concurrency() / 4)));
  auto should_stop = [&] { return stop.load() || jobs_done.load(); };
  if (!cache.checkpoints().LatestGoodCheckpoint().ok() && options_.train_if_missing && !should_stop()) {
    // A first policy, from the datasets alone, while the expert default serves.
    auto files = DatasetFiles(options_.datasets);
    auto tasks = files.ok() ? LoadDatasets(*files, DeviceFacts::H200(), nullptr) : Result<std::vector<ReplayTask>>(files.status());
    if (!tasks.ok()) {
      log_("warn", "tuner_no_policy", {{"reason", "cannot read the datasets: " + tasks.status().ToString()}});
    } else {
      std::vector<const ReplayTask*> train;
      for (const auto& t : *tasks) {
        if (!IsHeldOut(t)) train.push_back(&t);
      }
      TrainOptions o = DefaultTrainOptions();
      o.iterations = options_.train_iterations;
      o.agent.seed = options_.train_seed;
      o.resume = false;
      o.report_every = 0;
      o.checkpoint_every = 0;  // one checkpoint, the finished policy: the jobs load it when it lands
      o.should_stop = should_stop;
      log_("info", "tuner_training", {{"keys", std::to_string(train.size())},
                                      {"iterations", std::to_string(o.iterations)},
                                      {"datasets", options_.datasets}});
      const auto started = Clock::now();
      auto agent = Train(train, &cache, o);
      if (agent.ok()) {
        log_("info", "tuner_trained", {{"policy", (*agent)->version()},
                                       {"seconds", Fixed(std::chrono::duration<double>(Clock::now() - started).count(), 1)}});
      } else {
        log_("warn", "tuner_no_policy", {{"reason", agent.status().ToString()}});
      }
    }
  }
  int learned_at = rounds_.load();
  while (!should_stop()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    if (options_.learn_every <= 0 || rounds_.load() - learned_at < options_.learn_every) continue;
    learned_at = rounds_.load();
    if (!cache.checkpoints().LatestGoodCheckpoint().ok()) continue;
    TrainReport report;
    auto learned = LearnFromTrials(options_.datasets, cache, options_.learn_iterations, &report);
    if (learned.ok()) {
      log_("info", "tuner_learned", {{"policy", (*learned)->version()},
                                     {"iterations", std::to_string(options_.learn_iterations)}});
    } else {
      log_("warn", "tuner_learning_failed", {{"error", learned.status().ToString()}});
    }
  }
}

}  // namespace kjit::policy::learn
