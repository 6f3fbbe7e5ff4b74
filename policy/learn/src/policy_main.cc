// kjit-policy: train and evaluate the RL policy on the measured datasets, on a
// CPU. `kjit policy ...` runs it (kjit itself does not link LibTorch).
//
//   kjit policy train [--datasets DIR] [--cache FILE] [--iterations N] [--fresh] ...
//   kjit policy eval  [--datasets DIR] [--cache FILE] [--split heldout|train|all] [--seeds N] ...
//
// Exit status: 0 on success, 1 when the operation failed, 2 on bad usage.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <iostream>

#include "kjit/policy/learn/train.h"

namespace {

using namespace kjit::policy::learn;

struct Common {
  std::string datasets = DefaultDatasetDirectory();
  std::string cache_path;  // empty: kjit's default cache
  std::string split = "heldout";
  int min_points = 0;
  bool exhaustive = false;
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
}

int Fail(const kjit::Status& s) {
  std::cerr << "kjit policy: " << s.ToString() << "\n";
  return 1;
}

struct Loaded {
  std::vector<ReplayTask> tasks;
  std::vector<const ReplayTask*> train, heldout;
};

kjit::Result<Loaded> LoadTasks(const Common& c) {
  auto files = DatasetFiles(c.datasets);
  if (!files.ok()) return files.status();
  DatasetReport report;
  auto tasks = LoadDatasets(*files, kjit::policy::DeviceFacts::H200(), &report);
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
  }
  std::fprintf(stderr,
               "datasets: %d files, %d rows, %d keys -> %d tasks (%d rows of older codegen dropped, %d points invalid "
               "today dropped, %d tasks measured at an older codegen than generated now)\n",
               report.files, report.rows, report.keys, report.tasks, report.rows_older_codegen,
               report.points_invalid_now, report.stale_codegen_tasks);
  for (const auto& s : report.skipped) std::fprintf(stderr, "  skipped %s\n", s.c_str());
  std::fprintf(stderr, "split (held out iff the key hash's first byte %% 4 == 0): %zu training, %zu held-out keys",
               l.train.size(), l.heldout.size());
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

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"kjit policy: train and evaluate the RL policy that chooses design points, from the measured "
               "datasets (replay; no GPU needed)"};
  app.require_subcommand(1);

  Common common;
  TrainOptions train_options;
  bool fresh = false;
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
  train->add_flag("--fresh", fresh, "Start from new weights instead of the newest good checkpoint");

  std::string ks_text = "1,4,16,64";
  int seeds = 20;
  bool no_policy = false;
  auto* eval = app.add_subcommand("eval", "Print best time within k trials against the oracle: expert default, "
                                          "random search, the policy (newest good checkpoint), oracle");
  AddCommon(eval, common);
  eval->add_option("--split", common.split, "Keys to evaluate on")
      ->check(CLI::IsMember({"heldout", "train", "all"}))
      ->capture_default_str();
  eval->add_option("--k", ks_text, "Trial counts, comma-separated")->capture_default_str();
  eval->add_option("--seeds", seeds, "Seeds for the stochastic searchers")->capture_default_str();
  eval->add_flag("--no-policy", no_policy, "Only the baselines (no checkpoint needed)");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }

  auto loaded = LoadTasks(common);
  if (!loaded.ok()) return Fail(loaded.status());

  if (*train) {
    auto cache = OpenCache(common.cache_path, false);
    if (!cache.ok()) return Fail(cache.status());
    train_options.resume = !fresh;
    train_options.progress = [](const std::string& line) { std::fprintf(stderr, "%s\n", line.c_str()); };
    std::fprintf(stderr, "training on %zu keys, %d iterations of %d keys x %d episodes x %d trials; cache %s\n",
                 loaded->train.size(), train_options.iterations, train_options.agent.tasks_per_iteration,
                 train_options.agent.episodes_per_task, train_options.agent.budget, (*cache)->path().c_str());
    TrainReport report;
    auto agent = Train(loaded->train, cache->get(), train_options, &report);
    if (!agent.ok()) return Fail(agent.status());
    std::printf("trained policy %s (iterations %lld..%lld, %d checkpoints saved)\n", (*agent)->version().c_str(),
                static_cast<long long>(report.start_iteration), static_cast<long long>((*agent)->iteration()),
                report.checkpoints_saved);
    return 0;
  }

  if (*eval) {
    std::unique_ptr<Agent> agent;
    if (!no_policy) {
      auto cache = OpenCache(common.cache_path, false);
      if (!cache.ok()) return Fail(cache.status());
      std::vector<std::string> notes;
      auto a = LoadLatestCheckpoint(**cache, &notes);
      for (const auto& n : notes) std::fprintf(stderr, "%s\n", n.c_str());
      if (!a.ok()) {
        return Fail(a.status().WithContext("no policy to evaluate (run `kjit policy train` first, or --no-policy)"));
      }
      agent = std::move(*a);
      std::fprintf(stderr, "policy %s from %s\n", agent->version().c_str(), (*cache)->path().c_str());
    }
    std::vector<const ReplayTask*> tasks;
    if (common.split != "train") tasks.insert(tasks.end(), loaded->heldout.begin(), loaded->heldout.end());
    if (common.split != "heldout") tasks.insert(tasks.end(), loaded->train.begin(), loaded->train.end());
    if (tasks.empty()) return Fail(kjit::NotFound("no keys in the " + common.split + " split"));
    std::vector<int> ks;
    try {
      ks = ParseKs(ks_text);
    } catch (const std::exception&) {
      return Fail(kjit::InvalidArgument("--k takes comma-separated integers, e.g. 1,4,16,64"));
    }
    std::fprintf(stderr, "evaluating on %zu keys (%s), %d seeds...\n", tasks.size(), common.split.c_str(), seeds);
    EvalSummary summary = Evaluate(tasks, agent.get(), ks, seeds);
    summary.split = common.split == "heldout" ? "held-out" : common.split == "train" ? "training" : "training and held-out";
    std::printf("%s", summary.Markdown().c_str());
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
