#include <cstdio>

#include "kjit/policy/learn/train.h"

namespace kjit::policy::learn {
namespace {

std::string StatsLine(const IterationStats& s) {
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "iteration %lld: mean trial reward %+.3f, mean best reward %+.3f, return %.3f, entropy %.3f, "
                "value loss %.3f",
                static_cast<long long>(s.iteration), s.mean_trial_reward, s.mean_best_reward, s.mean_return, s.entropy,
                s.value_loss);
  return buf;
}

}  // namespace

TrainOptions DefaultTrainOptions() {
  TrainOptions o;
  // The configuration chosen on the validation keys (benchmarks/RESULTS.md, "Moved from policy/README.md"): the anytime reward, zero-shot credit
  // for the first trial against the expert default, and the first-proposal bandit.
  o.agent.anytime_weight = 1.0;
  o.agent.first_trial_coef = 3.0;
  o.agent.first_trial_bandit = 32;
  return o;
}

Result<std::unique_ptr<Agent>> Train(const std::vector<const ReplayTask*>& tasks, cache::KernelCache* cache,
                                     const TrainOptions& options, TrainReport* report_out) {
  if (tasks.empty()) return InvalidArgument("no training tasks");
  TrainReport report;
  auto say = [&](const std::string& line) {
    if (options.progress) options.progress(line);
  };
  std::unique_ptr<Agent> agent;
  if (cache != nullptr && options.resume) {
    auto loaded = LoadLatestCheckpoint(*cache, &report.notes);
    for (const auto& n : report.notes) say(n);
    if (loaded.ok()) {
      agent = std::move(*loaded);
      report.resumed = true;
      say("resuming from checkpoint " + agent->version());
    } else if (loaded.status().code() != StatusCode::kNotFound) {
      return loaded.status();
    }
  }
  if (!agent) agent = Agent::Create(tasks, options.agent);
  agent->EnsureHeads(tasks);
  report.start_iteration = agent->iteration();
  // Seeded by the options' seed and where training starts, so a resumed run does not replay the same draws.
  std::mt19937_64 rng(options.agent.seed * 7919 + static_cast<uint64_t>(agent->iteration()));
  for (int i = 0; i < options.iterations; ++i) {
    if (options.should_stop && options.should_stop()) {
      return Status(StatusCode::kUnavailable, "training stopped after " + std::to_string(i) + " of " +
                                                  std::to_string(options.iterations) + " iterations");
    }
    auto stats = agent->TrainIteration(tasks, rng);
    if (!stats.ok()) return stats.status();
    report.last = *stats;
    const bool last = i + 1 == options.iterations;
    if (options.report_every > 0 && ((i + 1) % options.report_every == 0 || last)) say(StatsLine(*stats));
    if (cache != nullptr && ((options.checkpoint_every > 0 && (i + 1) % options.checkpoint_every == 0) || last)) {
      auto id = SaveCheckpoint(*cache, *agent);
      if (!id.ok()) return id.status().WithContext("saving a policy checkpoint");
      ++report.checkpoints_saved;
      say("checkpoint " + std::to_string(*id) + ": " + agent->version());
    }
  }
  if (report_out != nullptr) *report_out = std::move(report);
  return agent;
}

}  // namespace kjit::policy::learn
