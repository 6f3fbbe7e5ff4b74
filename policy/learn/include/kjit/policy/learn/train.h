// Training the policy from the replay environment, and its checkpoints in the
// kernel cache DB (table policy_checkpoints: blob, checksum, status).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kjit/cache/kernel_cache.h"
#include "kjit/policy/learn/agent.h"

namespace kjit::policy::learn {

// Stores the policy as a new "good" checkpoint; returns its id.
Result<int64_t> SaveCheckpoint(cache::KernelCache& cache, const Agent& agent);

// The newest checkpoint that loads. A checkpoint whose checksum fails is set
// aside by the cache; one whose checksum holds but which does not load here
// (damaged before it was stored, or written by an incompatible policy) is set
// aside by this function: each with a line in *notes saying which and why, and
// the next older good one is tried. NotFound when none is left.
Result<std::unique_ptr<Agent>> LoadLatestCheckpoint(cache::KernelCache& cache, std::vector<std::string>* notes);

struct TrainOptions {
  AgentOptions agent;
  int iterations = 1500;      // gradient steps in this run (~2 minutes on one core)
  int checkpoint_every = 250; // iterations between checkpoints (and one at the end); needs a cache
  int report_every = 10;      // iterations between progress lines
  bool resume = true;         // continue from the cache's newest good checkpoint, if any
  std::function<void(const std::string&)> progress;  // one line at a time; may be empty
  std::function<bool()> should_stop;  // asked before each iteration; true: stop (kUnavailable), nothing saved
};

// What `kjit policy train` and the tuner's first policy use: the configuration chosen on the validation keys.
TrainOptions DefaultTrainOptions();

struct TrainReport {
  bool resumed = false;
  int64_t start_iteration = 0;
  IterationStats last;
  std::vector<std::string> notes;  // checkpoints set aside
  int checkpoints_saved = 0;
};

// Trains on `tasks` (the training split). With a cache, resumes from and
// saves checkpoints to it. Returns the trained policy.
Result<std::unique_ptr<Agent>> Train(const std::vector<const ReplayTask*>& tasks, cache::KernelCache* cache,
                                     const TrainOptions& options, TrainReport* report = nullptr);

}  // namespace kjit::policy::learn
