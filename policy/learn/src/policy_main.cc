// kjit-policy: train and evaluate the RL policy on the measured datasets, on a
// CPU. `kjit policy ...` runs it (kjit itself does not link LibTorch).
//
//   kjit policy train [--datasets DIR] [--cache FILE] [--iterations N] [--fresh] ...
//   kjit policy eval  [--datasets DIR] [--cache FILE] [--split heldout|train|all] [--seeds N] [--verbose] ...
//   kjit policy online [--cache FILE] [--endpoint E] [--budget N] [--limit N] ...: an episode per task
//     kjitd has queued, through its agent environment (a GPU behind kjitd), with the newest checkpoint
//
// Exit status: 0 on success, 1 when the operation failed, 2 on bad usage.
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <random>

#include <csignal>
#include <ctime>
#include <mutex>
#include <thread>

#include <nlohmann/json.hpp>
#include <sys/prctl.h>
#include <unistd.h>

#include "kjit/policy/learn/online.h"
#include "kjit/policy/learn/train.h"
#include "kjit/policy/learn/tuner.h"

namespace {

using namespace kjit::policy::learn;

struct Common {
  std::string datasets = DefaultDatasetDirectory();
  std::string cache_path;  // empty: kjit's default cache
  std::string split = "heldout";
  int min_points = 0;
  bool exhaustive = false;
  bool measurements = false;  // add the cache's measurements of online episodes to the datasets
};

void AddCommon(CLI::App* cmd, Common& c) {
  cmd->add_option("--datasets", c.datasets, "Directory of <family>-h200.jsonl datasets")->capture_default_str();
  cmd->add_option("--cache", c.cache_path,
                  "Kernel cache DB holding the policy checkpoints (default: KJIT_CACHE, else ~/.cache/kjit/cache.db)");
  cmd->add_option("--min-points", c.min_points,
                  "Only keys with at least this many measured valid points (0: all)")
      ->capture_default_str();
  cmd->add_flag("--exhaustive", c.exhaustive,
                "Only keys whose every valid point was measured (where replay is the whole task, not a sample)");
  cmd->add_flag("--measurements", c.measurements,
                "Also the cache's measurements of online episodes (`kjit policy online`) as dataset rows; held-out "
                "keys stay held out");
}

int Fail(const kjit::Status& s) {
  std::cerr << "kjit policy: " << s.ToString() << "\n";
  return 1;
}

struct Loaded {
  std::vector<ReplayTask> tasks;
  std::vector<const ReplayTask*> train, heldout;
  std::vector<const ReplayTask*> validation;  // the training keys IsValidation picks (also in `train`)
};

kjit::Result<std::unique_ptr<kjit::cache::KernelCache>> OpenCache(const std::string& path, bool read_only);

kjit::Result<Loaded> LoadTasks(const Common& c) {
  auto files = DatasetFiles(c.datasets);
  if (!files.ok()) return files.status();
  std::vector<std::string> extra;
  if (c.measurements) {
    auto cache = OpenCache(c.cache_path, true);
    if (!cache.ok()) return cache.status();
    int skipped = 0;
    auto rows = MeasurementRows(**cache, &skipped);
    if (!rows.ok()) return rows.status();
    extra = std::move(*rows);
    std::fprintf(stderr, "cache measurements: %zu rows from online episodes (%d without a codegen version or design "
                 "point skipped)\n", extra.size(), skipped);
  }
  DatasetReport report;
  auto tasks = LoadDatasets(*files, kjit::policy::DeviceFacts::H200(), &report, extra);
  if (!tasks.ok()) return tasks.status();
  Loaded l;
  l.tasks = std::move(*tasks);
  int thin = 0;
  for (const auto& t : l.tasks) {
    if (static_cast<int>(t.points.size()) < c.min_points ||
        (c.exhaustive &&
         t.points.size() != kjit::policy::ValidPoints(*t.family, *t.problem, kjit::policy::DeviceFacts::H200()).size())) {
      ++thin;
      continue;
    }
    (IsHeldOut(t) ? l.heldout : l.train).push_back(&t);
    if (IsValidation(t)) l.validation.push_back(&t);
  }
  std::fprintf(stderr,
               "datasets: %d files, %d rows, %d keys -> %d tasks (%d rows of older codegen dropped, %d points invalid "
               "today dropped, %d tasks measured at an older codegen than generated now)\n",
               report.files, report.rows, report.keys, report.tasks, report.rows_older_codegen,
               report.points_invalid_now, report.stale_codegen_tasks);
  for (const auto& s : report.skipped) std::fprintf(stderr, "  skipped %s\n", s.c_str());
  std::fprintf(stderr,
               "split (held out iff the key hash's first byte %% 4 == 0; validation, within training, iff it is 2 "
               "mod 4): %zu training (%zu of them validation), %zu held-out keys",
               l.train.size(), l.validation.size(), l.heldout.size());
  if (c.min_points > 0 || c.exhaustive) {
    std::fprintf(stderr, " (%d keys left out: fewer than %d points%s)", thin, c.min_points,
                 c.exhaustive ? " or not measured exhaustively" : "");
  }
  std::fprintf(stderr, "\n");
  return l;
}

kjit::Result<std::unique_ptr<kjit::cache::KernelCache>> OpenCache(const std::string& path, bool read_only) {
  kjit::cache::OpenOptions o;
  o.path = path;
  o.read_only = read_only;
  o.create = !read_only;
  return kjit::cache::KernelCache::Open(o);
}

// The cache's newest good checkpoint; the ones set aside on the way (corrupt, incompatible) are said on stderr.
kjit::Result<std::unique_ptr<Agent>> LoadPolicy(kjit::cache::KernelCache& cache) {
  std::vector<std::string> notes;
  auto agent = LoadLatestCheckpoint(cache, &notes);
  for (const auto& n : notes) std::fprintf(stderr, "%s\n", n.c_str());
  return agent;
}

std::vector<int> ParseKs(const std::string& text) {
  std::vector<int> ks;
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t comma = std::min(text.find(',', pos), text.size());
    ks.push_back(std::stoi(text.substr(pos, comma - pos)));
    pos = comma + 1;
  }
  return ks;
}

// `kjit policy online`.
int RunOnline(const std::string& cache_path, const std::string& endpoint, int limit, double timeout_s,
              const OnlineOptions& options, const std::string& json_path, int learn_iterations) {
  auto cache = OpenCache(cache_path, false);
  if (!cache.ok()) return Fail(cache.status());
  std::unique_ptr<Agent> agent;
  if (options.proposer == Proposer::kPolicy) {
    auto loaded = LoadPolicy(**cache);
    if (!loaded.ok()) {
      return Fail(loaded.status().WithContext("no policy (run `kjit policy train --cache` on this cache)"));
    }
    agent = std::move(*loaded);
  }
  std::FILE* json = nullptr;
  if (!json_path.empty()) {
    json = std::fopen(json_path.c_str(), "a");
    if (json == nullptr) return Fail(kjit::InvalidArgument("cannot open --json file " + json_path));
  }
  kjit::ipc::ClientOptions co;
  co.endpoint = endpoint;
  co.name = "kjit-policy-online/0.1";
  co.request_timeout = std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
  kjit::ipc::Client client(co);
  // Listing answers at once: a short timeout, so that a kjitd that is not running is reported in seconds.
  kjit::ipc::ClientOptions lo = co;
  lo.request_timeout = std::chrono::milliseconds(10000);
  auto queued = kjit::ipc::Client(lo).ListTasks("queued", static_cast<uint32_t>(limit));
  if (!queued.ok()) return Fail(queued.status().WithContext("listing kjitd's queued tasks"));
  std::fprintf(stderr, "%s, %zu queued tasks, budget %d trials each\n",
               agent ? ("policy " + agent->version()).c_str() : ProposerName(options.proposer), queued->size(),
               options.budget);
  KjitdEvaluator evaluator(client);
  int episodes = 0;
  for (const auto& info : *queued) {
    // ListTasks carries the key's text and hash, not its bytes: the cache has them.
    auto task = (*cache)->tasks().GetTask(info.id);
    if (!task.ok()) continue;
    auto key = kjit::OpKey::Decode(task->key_bytes);
    if (!key.ok()) continue;
    std::fprintf(stderr, "[%d/%zu] %s\n", episodes + 1, queued->size(), key->ToString().c_str());
    auto report = RunOnlineEpisode(agent.get(), *key, evaluator, options);
    if (!report.ok()) {
      std::printf("%s: skipped: %s\n", key->ToString().c_str(), report.status().ToString().c_str());
      continue;
    }
    ++episodes;
    std::printf("%s (%s): PyTorch %.2f us\n", report->key_text.c_str(), report->family.c_str(),
                report->baseline.baseline_us);
    for (size_t i = 0; i < report->trials.size(); ++i) {
      const auto& t = report->trials[i];
      std::printf("  %2zu %-40s %-22s %s%s\n", i + 1, kjit::policy::PointToString(t.point).c_str(),
                  t.proposer.c_str(), t.verdict.verdict.substr(0, 100).c_str(), t.verdict.accepted ? " [stored]" : "");
    }
    if (report->best >= 0) {
      const auto& b = report->trials[report->best].verdict;
      std::printf("  best %.2f us (%.2fx PyTorch)%s\n", b.median_us, report->baseline.baseline_us / b.median_us,
                  report->stopped.empty() ? "" : "");
    }
    if (!report->stopped.empty()) std::printf("  stopped: %s\n", report->stopped.c_str());
    std::fflush(stdout);
    if (json != nullptr) {
      std::fprintf(json, "%s\n", OnlineReportJson(*report, options.proposer, options.expert_first).c_str());
      std::fflush(json);
    }
    if (agent && learn_iterations > 0) {
      // A failed update keeps the current policy: the episodes go on, the error is reported.
      auto learned = LearnFromTrials(DefaultDatasetDirectory(), **cache, learn_iterations);
      if (learned.ok()) {
        agent = std::move(*learned);
        std::fprintf(stderr, "learned from the trials so far (%d iterations): policy %s\n", learn_iterations,
                     agent->version().c_str());
      } else {
        std::fprintf(stderr, "kjit policy: learning between episodes failed, keeping policy %s: %s\n",
                     agent->version().c_str(), learned.status().ToString().c_str());
      }
    }
  }
  if (json != nullptr) std::fclose(json);
  std::printf("%d episodes; trials are in %s's measurements (train on them: kjit policy train --measurements)\n",
              episodes, (*cache)->path().c_str());
  return 0;
}

}  // namespace

// The keys of a split (--split): held-out, then training keys for "all".
static std::vector<const ReplayTask*> TasksOfSplit(const Loaded& loaded, const std::string& split) {
  if (split == "validation") return loaded.validation;
  std::vector<const ReplayTask*> tasks;
  if (split != "train") tasks.insert(tasks.end(), loaded.heldout.begin(), loaded.heldout.end());
  if (split != "heldout") tasks.insert(tasks.end(), loaded.train.begin(), loaded.train.end());
  return tasks;
}

// `kjit policy propose`: what the policy would try first on each key if the key were new to kjitd.
// ---- tune: kjit's tuner (tuner.h), as kjitd starts it

namespace {

std::atomic<bool> g_stop{false};
// The first SIGTERM/SIGINT asks the jobs to finish their trials in flight; if one waits on a kjitd that is
// gone (its request would wait out --timeout-s), the alarm ends the process 10 s later. Its claims are then
// released by the kjitd that starts next, or taken by another tuner when their leases run out.
void OnStopSignal(int) {
  g_stop = true;
  alarm(10);
}
void OnAlarm(int) { _exit(3); }

// One JSON object a line on stderr, as kjitd logs (kjitd passes its own stderr, its log, to the tuner).
void LogLine(const char* level, const std::string& event, const std::map<std::string, std::string>& fields) {
  static std::mutex mu;
  const auto now = std::chrono::system_clock::now();
  const std::time_t t = std::chrono::system_clock::to_time_t(now);
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm tm{};
  gmtime_r(&t, &tm);
  char ts[96];
  std::snprintf(ts, sizeof ts, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
                tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<int>(ms));
  nlohmann::ordered_json j;
  j["ts"] = ts;
  j["level"] = level;
  j["event"] = event;
  j["pid"] = static_cast<int64_t>(getpid());
  for (const auto& [k, v] : fields) j[k] = v;
  std::lock_guard lock(mu);
  std::fprintf(stderr, "%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  std::fflush(stderr);
}

int RunTune(TunerOptions options, const std::string& endpoint, double timeout_s, pid_t parent_pid) {
  std::signal(SIGTERM, OnStopSignal);
  std::signal(SIGINT, OnStopSignal);
  std::signal(SIGALRM, OnAlarm);
  if (parent_pid > 0) {
    // Started by kjitd: end with it (a kjitd killed with SIGKILL cannot stop its tuner itself).
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent_pid) return Fail(kjit::Status(kjit::StatusCode::kUnavailable, "kjitd exited"));
  }
  if (options.cache_path.empty()) options.cache_path = kjit::cache::DefaultCachePath();
  if (options.claimer.empty()) {
    char host[256] = {0};
    gethostname(host, sizeof host - 1);
    options.claimer = host;
  }
  // Each run's claims carry its pid, so that whoever supervises it can release them when it dies.
  options.claimer += "/" + std::to_string(getpid());
  kjit::ipc::ClientOptions co;
  co.endpoint = endpoint;
  co.name = "kjit-tuner/0.1";
  co.request_timeout = std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
  Tuner tuner(options, [co] { return std::make_unique<OwnedKjitdEvaluator>(co); }, LogLine);
  kjit::Status st = tuner.Run(g_stop);
  if (!st.ok()) return Fail(st);
  return 0;
}

}  // namespace

static int RunPropose(const Loaded& loaded, const Common& common, const std::string& points_file, int limit) {
  auto cache = OpenCache(common.cache_path, false);
  if (!cache.ok()) return Fail(cache.status());
  auto agent = LoadPolicy(**cache);
  if (!agent.ok()) return Fail(agent.status().WithContext("no policy (run `kjit policy train` first)"));
  std::vector<const ReplayTask*> tasks = TasksOfSplit(loaded, common.split);
  if (limit > 0 && static_cast<int>(tasks.size()) > limit) tasks.resize(static_cast<size_t>(limit));
  std::ofstream out;
  if (!points_file.empty()) {
    out.open(points_file, std::ios::trunc);
    if (!out) return Fail(kjit::IOError("cannot write " + points_file));
  }
  std::printf("policy %s: first proposals over every valid point\n\n| key | valid points | proposal | measured | its us "
              "| expert us | the replay's first proposal |\n|---|---:|---|---|---:|---:|---|\n",
              (*agent)->version().c_str());
  int measured = 0, same_as_replay = 0, expert = 0;
  std::mt19937_64 rng(1);
  for (const ReplayTask* t : tasks) {
    auto live = MakeLiveTask(t->key, kjit::policy::DeviceFacts::H200(), t->baseline_us, t->floor_us);
    if (!live.ok()) return Fail(live.status().WithContext(t->key_text));
    ReplayEpisode episode(*live, 1);
    auto index = (*agent)->Propose(episode, /*greedy=*/true, rng);
    if (!index.ok()) return Fail(index.status().WithContext(t->key_text));
    const kjit::policy::Point& point = live->points[static_cast<size_t>(*index)].point;
    const int in_replay = t->IndexOf(point);
    ReplayEpisode replay_episode(*t, 1);
    auto replay_index = (*agent)->Propose(replay_episode, /*greedy=*/true, rng);
    const bool same = replay_index.ok() && *replay_index == in_replay && in_replay >= 0;
    measured += in_replay >= 0;
    same_as_replay += same;
    expert += *index == live->expert_index;
    auto us = [](const ReplayTask& task, int i) {
      if (i < 0 || task.points[static_cast<size_t>(i)].outcome != kjit::policy::Outcome::kVerified) return std::string("-");
      char b[32];
      std::snprintf(b, sizeof b, "%.2f", task.points[static_cast<size_t>(i)].time_us);
      return std::string(b);
    };
    std::printf("| `%s` | %zu | %s%s | %s | %s | %s | %s |\n", t->key_text.c_str(), live->points.size(),
                kjit::policy::PointToString(point).c_str(), *index == live->expert_index ? " (expert)" : "",
                in_replay >= 0 ? "yes" : "no", us(*t, in_replay).c_str(), us(*t, t->expert_index).c_str(),
                same ? "the same" : replay_index.ok() ? kjit::policy::PointToString(t->points[*replay_index].point).c_str()
                                                       : "-");
    if (out) out << t->key_hash << "\t" << kjit::policy::PointToString(point) << "\t" << (*agent)->version() << "\n";
  }
  std::printf("\n%zu keys: the proposal was measured on %d (the replay proposes the same point on %d), is the expert "
              "default on %d\n", tasks.size(), measured, same_as_replay, expert);
  return 0;
}

int main(int argc, char** argv) {
  CLI::App app{"kjit policy: train and evaluate the RL policy that chooses design points, from the measured "
               "datasets (replay; no GPU needed)"};
  app.require_subcommand(1);

  Common common;
  // The default configuration of `kjit policy train` (DefaultTrainOptions), which the tuner's first policy
  // also uses. AgentOptions' own defaults stay as they are for the library and its tests.
  TrainOptions train_options = DefaultTrainOptions();
  bool fresh = false;
  bool exclude_validation = false;
  auto* train = app.add_subcommand("train", "Train the policy on the training keys; checkpoints go to the cache DB");
  AddCommon(train, common);
  train->add_option("--iterations", train_options.iterations, "Gradient steps")->capture_default_str();
  train->add_option("--seed", train_options.agent.seed, "Seed of weights and sampling")->capture_default_str();
  train->add_option("--budget", train_options.agent.budget, "Trials per training episode")->capture_default_str();
  train->add_option("--hidden", train_options.agent.hidden, "Hidden units")->capture_default_str();
  train->add_option("--lr", train_options.agent.learning_rate, "Adam learning rate")->capture_default_str();
  train->add_option("--entropy", train_options.agent.entropy_coef, "Entropy bonus coefficient")->capture_default_str();
  train->add_option("--checkpoint-every", train_options.checkpoint_every, "Iterations between checkpoints")
      ->capture_default_str();
  train->add_flag("--anytime", train_options.agent.anytime_reward,
                  "Reward the best-so-far after every trial (area under the curve) instead of its improvement");
  train->add_option("--anytime-weight", train_options.agent.anytime_weight,
                    "Share of the anytime reward, the rest the improvement (0: improvement only; --anytime: 1)")
      ->capture_default_str();
  train->add_option("--first-trial", train_options.agent.first_trial_coef,
                    "Weight of the first trial's reward relative to the expert default's (zero-shot credit)")
      ->capture_default_str();
  train->add_option("--first-trial-bandit", train_options.agent.first_trial_bandit,
                    "One-trial episodes per task and iteration whose first proposal is trained as a bandit on its "
                    "reward (0: off)")
      ->capture_default_str();
  train->add_flag("--fresh", fresh, "Start from new weights instead of the newest good checkpoint");
  train->add_flag("--exclude-validation", exclude_validation,
                  "Train without the validation keys (for choosing a configuration with `eval --split validation`)");

  std::string ks_text = "1,4,16,64";
  int seeds = 20;
  bool no_policy = false;
  bool verbose = false;
  std::vector<std::string> ensemble_caches;
  auto* eval = app.add_subcommand("eval", "Print best time within k trials against the oracle: expert default, "
                                          "random search, the policy (newest good checkpoint), oracle");
  AddCommon(eval, common);
  eval->add_option("--split", common.split, "Keys to evaluate on")
      ->check(CLI::IsMember({"heldout", "train", "validation", "all"}))
      ->capture_default_str();
  eval->add_option("--k", ks_text, "Trial counts, comma-separated")->capture_default_str();
  eval->add_option("--seeds", seeds, "Seeds for the stochastic searchers")->capture_default_str();
  eval->add_flag("--no-policy", no_policy, "Only the baselines (no checkpoint needed)");
  eval->add_option("--ensemble", ensemble_caches,
                   "More cache DBs whose newest good checkpoints join --cache's in a greedy ensemble (e.g. runs "
                   "with other seeds)");
  int revise_after = kjit::policy::learn::kReviseAfter;
  eval->add_option("--revise-after", revise_after,
                   "Trials by the policy's mode before it ranks the best point's one-knob neighbours (0: the mode "
                   "throughout)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  int eval_train_iterations = train_options.iterations;
  eval->add_option("--train-iterations", eval_train_iterations,
                   "Where the cache holds no checkpoint: iterations of the default policy trained first")
      ->check(CLI::Range(1, 1000000))
      ->capture_default_str();
  eval->add_flag("--verbose", verbose,
                 "Per key: expert default, oracle and the policy's first proposal (times, spreads, verdict)");

  OnlineOptions online_options;
  std::string endpoint;
  int limit = 0;
  double timeout_s = 600;
  auto* online = app.add_subcommand(
      "online", "An episode per task kjitd has queued: the newest checkpoint proposes points, kjitd's evaluator "
                "verifies and times them (GPU), up to the budget; every trial lands in the cache's measurements");
  online->add_option("--cache", common.cache_path,
                     "The kernel cache kjitd uses, holding the policy checkpoints (default: KJIT_CACHE, else the user's)");
  online->add_option("--endpoint", endpoint, "kjitd's endpoint (default: $KJIT_ENDPOINT, else the user's kjitd)");
  online->add_option("--budget", online_options.budget, "Trials per episode")->capture_default_str();
  online->add_option("--limit", limit, "At most this many tasks (0: all queued)")->capture_default_str();
  online->add_option("--timeout-s", timeout_s, "How long kjitd may take to evaluate one kernel")->capture_default_str();
  bool sampled = false;
  online->add_flag("--sampled", sampled, "Sample proposals from the policy (seeded) instead of its mode");
  online->add_option("--revise-after", online_options.revise_after,
                     "Trials by the policy's mode before it ranks the best point's one-knob neighbours (0: the "
                     "mode throughout)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  online->add_option("--seed", online_options.seed, "Seed for --sampled and the random proposers")
      ->capture_default_str();
  online->add_flag("--expert-first", online_options.expert_first,
                   "With --proposer policy: the expert default as each key's first trial, then the policy (as "
                   "kjitd's tuner runs it)");
  std::string proposer_name = "policy";
  online->add_option("--proposer", proposer_name,
                     "Who proposes: the policy, or a baseline for its learning curve: random (uniform over the "
                     "valid untried points), expert (the expert default, then random), cover (the expert default, a "
                     "pairwise cover of the space, then hill-climbing: kjit_tune_spaces' search); no checkpoint "
                     "needed for those")
      ->check(CLI::IsMember({"policy", "random", "expert", "cover"}))
      ->capture_default_str();
  std::string online_json;
  online->add_option("--json", online_json, "Append one JSON line per episode here (trials, times, baseline)");
  int learn_iterations = 25;
  online->add_option("--learn", learn_iterations,
                     "Training iterations between episodes on the datasets plus the trials measured so far (the "
                     "cache's measurements), from the newest checkpoint, saved as the next one (0: no updates)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();

  TunerOptions tune_options;
  std::string tune_endpoint, tune_proposer = "policy";
  double tune_timeout_s = 1800;
  int64_t tune_lease_s = 600, tune_wait_s = 30;
  bool tune_no_train = false;
  auto* tune = app.add_subcommand(
      "tune", "kjit's tuner: claims kjitd's queued tasks, highest expected gain first, and runs each key's episode "
              "through kjitd's evaluator (the expert default first, then the policy's proposals), until stopped. "
              "kjitd starts it by itself (its `tuner` setting); run it by hand to tune with another configuration");
  tune->add_option("--cache", tune_options.cache_path,
                   "The kernel cache kjitd uses (default: $KJIT_CACHE, else the user's)");
  tune->add_option("--endpoint", tune_endpoint, "kjitd's endpoint (default: $KJIT_ENDPOINT, else the user's kjitd)");
  tune->add_option("--jobs", tune_options.jobs, "Keys tuned at once (one per GPU worker of kjitd)")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  tune->add_option("--first-trials", tune_options.first_trials,
                   "Trials of a key's first round (the expert default, then the policy's first proposal)")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  tune->add_option("--trials", tune_options.trials, "Trials of each later round (0: one round a key)")
      ->check(CLI::Range(0, 1000))
      ->capture_default_str();
  tune->add_option("--key-seconds", tune_options.key_seconds, "A round's time budget, seconds")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  tune->add_option("--proposer", tune_proposer,
                   "policy (the newest checkpoint; the expert default and random points until one exists), expert "
                   "(the expert default, then random points), random, cover (the expert default, a pairwise cover "
                   "of the space, then hill-climbing: many trials a key)")
      ->check(CLI::IsMember({"policy", "random", "expert", "cover"}))
      ->capture_default_str();
  tune_options.datasets = DefaultDatasetDirectory();
  tune->add_option("--datasets", tune_options.datasets, "Where the first policy is trained from")->capture_default_str();
  tune->add_flag("--no-train", tune_no_train,
                 "Do not train a first policy when the cache has none (the expert default serves instead)");
  tune->add_option("--train-iterations", tune_options.train_iterations, "Iterations of that first training")
      ->check(CLI::Range(1, 1000000))
      ->capture_default_str();
  tune->add_option("--learn-every", tune_options.learn_every,
                   "Rounds between policy updates on the trials measured so far (0: never)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  tune->add_option("--learn", tune_options.learn_iterations, "Training iterations of each update")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  tune->add_option("--lease-s", tune_lease_s, "How long a claim holds without a trial before another tuner may take it")
      ->check(CLI::Range(int64_t{1}, int64_t{86400}))
      ->capture_default_str();
  tune->add_option("--wait-s", tune_wait_s, "How long a key the GPU lacks memory for now waits before it is tried again")
      ->check(CLI::Range(int64_t{0}, int64_t{86400}))
      ->capture_default_str();
  tune->add_option("--timeout-s", tune_timeout_s, "How long kjitd may take to answer one request (a whole evaluation)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  tune->add_option("--claimer", tune_options.claimer,
                   "This tuner's name in claims (default: the host name); claims read <claimer>/<pid>/<job>");
  int64_t tune_parent = 0;
  tune->add_option("--parent-pid", tune_parent, "Exit when this process (kjitd, which passes its own) exits");
  tune->add_option("--max-rounds", tune_options.max_rounds, "Exit after this many rounds (0: run until stopped)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  tune->add_flag("--exit-when-idle", tune_options.exit_when_idle, "Exit once no task can be claimed");
  tune->footer("Logs one JSON line per trial and per round on stderr. SIGTERM or SIGINT: finish the trials in "
               "flight, hand their tasks back, exit.");

  std::string propose_points_file;
  auto* propose = app.add_subcommand(
      "propose", "The policy's first proposal (its mode, as an online episode makes it) over each key's whole valid "
                 "space, not only the measured points replay offers; says whether the datasets measured it");
  AddCommon(propose, common);
  propose->add_option("--split", common.split, "Keys to propose for")
      ->check(CLI::IsMember({"heldout", "train", "validation", "all"}))
      ->capture_default_str();
  int propose_limit = 0;
  propose->add_option("--limit", propose_limit, "At most this many keys, in the datasets' order (0: all)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  propose->add_option("--points-file", propose_points_file,
                      "Write one line per key: its hash, the proposal and the policy's version, tab-separated "
                      "(`kjit_tune_spaces --search --point-list` measures them beside the expert default)");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }

  if (*tune) {
    tune_options.proposer = *ParseProposer(tune_proposer);
    tune_options.train_if_missing = !tune_no_train;
    tune_options.lease = std::chrono::seconds(tune_lease_s);
    tune_options.wait_when_busy = std::chrono::seconds(tune_wait_s);
    return RunTune(tune_options, tune_endpoint, tune_timeout_s, static_cast<pid_t>(tune_parent));
  }

  if (*online) {
    online_options.greedy = !sampled;
    online_options.proposer = *ParseProposer(proposer_name);
    return RunOnline(common.cache_path, endpoint, limit, timeout_s, online_options, online_json, learn_iterations);
  }

  auto loaded = LoadTasks(common);
  if (!loaded.ok()) return Fail(loaded.status());

  if (*train) {
    auto cache = OpenCache(common.cache_path, false);
    if (!cache.ok()) return Fail(cache.status());
    train_options.resume = !fresh;
    train_options.progress = [](const std::string& line) { std::fprintf(stderr, "%s\n", line.c_str()); };
    std::vector<const ReplayTask*> keys;
    for (const ReplayTask* t : loaded->train) {
      if (!exclude_validation || !IsValidation(*t)) keys.push_back(t);
    }
    std::fprintf(stderr,
                 "training on %zu keys%s, %d iterations of %d keys x %d episodes x %d trials; reward: %.2f anytime + "
                 "%.2f improvement, first trial x %.2f, first-trial bandit %d; seed %llu; cache %s\n",
                 keys.size(), exclude_validation ? " (validation keys excluded)" : "", train_options.iterations, train_options.agent.tasks_per_iteration,
                 train_options.agent.episodes_per_task, train_options.agent.budget,
                 train_options.agent.anytime_reward ? 1.0 : train_options.agent.anytime_weight,
                 train_options.agent.anytime_reward ? 0.0 : 1.0 - train_options.agent.anytime_weight,
                 train_options.agent.first_trial_coef, train_options.agent.first_trial_bandit, static_cast<unsigned long long>(train_options.agent.seed),
                 (*cache)->path().c_str());
    TrainReport report;
    auto agent = Train(keys, cache->get(), train_options, &report);
    if (!agent.ok()) return Fail(agent.status());
    std::printf("trained policy %s (iterations %lld..%lld, %d checkpoints saved)\n", (*agent)->version().c_str(),
                static_cast<long long>(report.start_iteration), static_cast<long long>((*agent)->iteration()),
                report.checkpoints_saved);
    return 0;
  }

  if (*propose) return RunPropose(*loaded, common, propose_points_file, propose_limit);

  if (*eval) {
    std::unique_ptr<Agent> agent;
    if (!no_policy) {
      auto cache = OpenCache(common.cache_path, false);
      if (!cache.ok()) return Fail(cache.status());
      auto a = LoadPolicy(**cache);
      if (!a.ok() && a.status().code() == kjit::StatusCode::kNotFound) {
        // A fresh cache: the default policy first, as kjitd's tuner trains it at its first start.
        std::fprintf(stderr,
                     "no policy checkpoint in %s: training the default one first (%d iterations on the training "
                     "keys, seed %llu; kjitd's tuner trains the same at its first start)\n",
                     (*cache)->path().c_str(), eval_train_iterations,
                     static_cast<unsigned long long>(train_options.agent.seed));
        TrainOptions first = DefaultTrainOptions();
        first.iterations = eval_train_iterations;
        first.resume = false;
        first.checkpoint_every = 0;
        first.report_every = std::max(1, eval_train_iterations / 10);
        first.progress = [](const std::string& line) { std::fprintf(stderr, "%s\n", line.c_str()); };
        a = Train(loaded->train, cache->get(), first);
      }
      if (!a.ok()) {
        return Fail(a.status().WithContext("no policy to evaluate (run `kjit policy train` first, or --no-policy)"));
      }
      agent = std::move(*a);
      std::fprintf(stderr, "policy %s from %s\n", agent->version().c_str(), (*cache)->path().c_str());
    }
    std::vector<const ReplayTask*> tasks = TasksOfSplit(*loaded, common.split);
    if (tasks.empty()) return Fail(kjit::NotFound("no keys in the " + common.split + " split"));
    std::vector<int> ks;
    try {
      ks = ParseKs(ks_text);
    } catch (const std::exception&) {
      return Fail(kjit::InvalidArgument("--k takes comma-separated integers, e.g. 1,4,16,64"));
    }
    std::fprintf(stderr, "evaluating on %zu keys (%s), %d seeds...\n", tasks.size(), common.split.c_str(), seeds);
    std::vector<std::unique_ptr<Agent>> members;
    std::vector<Agent*> ensemble;
    if (agent && !ensemble_caches.empty()) {
      ensemble.push_back(agent.get());
      for (const auto& path : ensemble_caches) {
        auto cache = OpenCache(path, false);
        if (!cache.ok()) return Fail(cache.status());
        auto a = LoadPolicy(**cache);
        if (!a.ok()) return Fail(a.status().WithContext(path));
        std::fprintf(stderr, "ensemble member %s from %s\n", (*a)->version().c_str(), path.c_str());
        members.push_back(std::move(*a));
        ensemble.push_back(members.back().get());
      }
    }
    EvalSummary summary = Evaluate(tasks, agent.get(), ks, seeds, ensemble, revise_after);
    summary.split = common.split == "heldout"      ? "held-out"
                    : common.split == "train"      ? "training"
                    : common.split == "validation" ? "validation"
                                                   : "training and held-out";
    std::printf("%s", summary.Markdown().c_str());
    if (verbose && summary.has_policy) {
      std::printf("\nk=1 per key (times in us, iqr = interquartile range of the timed runs; faster/slower = beyond the "
                  "noise, tie = within it):\n\n%s",
                  summary.FirstTrialMarkdown().c_str());
      const std::string shortfall = summary.ShortfallMarkdown(0.999);
      if (!shortfall.empty()) {
        std::printf("\nKeys where the policy's k=16 is below 0.999 of the oracle (fractions of the oracle; random search "
                    "mean over the seeds):\n\n%s",
                    shortfall.c_str());
      }
    }
    // How much of each key's valid space was measured: replay offers only measured points.
    std::printf("\n| key | family | measured points | valid points | verified | expert measured | codegen |\n"
                "|---|---|---:|---:|---:|---|---|\n");
    for (const ReplayTask* t : tasks) {
      const size_t valid = kjit::policy::ValidPoints(*t->family, *t->problem, kjit::policy::DeviceFacts::H200()).size();
      std::printf("| `%s` | %s | %zu | %zu | %d | %s | %d%s |\n", t->key_text.c_str(), t->family_name.c_str(),
                  t->points.size(), valid, t->verified_count(), t->expert_index >= 0 ? "yes" : "no", t->codegen,
                  t->stale_codegen ? " (stale)" : "");
    }
    return 0;
  }
  return 2;
}
