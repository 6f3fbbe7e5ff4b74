// kjit's tuner: works kjitd's task queue with no person in between. kjitd
// starts it (`kjit-policy tune`) beside its evaluator workers and restarts it
// if it dies; it may also run by hand against any kjitd.
//
// Per job (one per GPU worker of kjitd), in a loop: claim the queue's first
// task (highest priority, then expected gain: calls x time a faster kernel
// could save), run one round of the key's episode through kjitd's agent
// environment, write the round's result to the task, move on. A key's first
// round is short (`first_trials`, 1 by default: the family's expert default,
// so that a key gets a verified kernel from its first trial), and the task
// goes back to the queue at a lower priority for a search round (`trials`
// more: the policy's proposals, revising from the trials so far), so that
// every key gets its first kernel before any key gets its search. A round
// also ends at `key_seconds`.
//
// What a round's end writes (KernelCache::CompleteTask):
//   done    the search round ran (a kernel was stored, or none beat PyTorch's)
//   queued  another round follows, or the GPU lacks the memory now: the key
//           waits `wait_when_busy` and the job takes the next task meanwhile
//   unfit   the key can never fit this GPU (the evaluator says "unfit: ..."),
//           written once, not retried (a client's submission reopens it)
//   failed  PyTorch itself cannot run the key, or its trials cannot be made
// A key with no design space is done at once, with the reason. A claim holds
// a lease renewed after every trial; a tuner that dies leaves a claim another
// tuner takes once the lease runs out.
//
// The policy. Each job loads the cache's newest good checkpoint and reloads it
// when a newer one appears. Where the cache has none, a learner thread trains
// one from the datasets (deterministic: fixed seed and iterations) while the
// expert default and random points serve; after every `learn_every` rounds it
// trains `learn_iterations` more on the datasets plus every trial measured so
// far (the cache's measurements), saving the next checkpoint. Every trial is
// submitted with the proposer's version (the policy's, or "expert-default" /
// "random"), which kjitd keeps with the measurement and the stored kernel.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "kjit/cache/kernel_cache.h"
#include "kjit/policy/learn/online.h"

namespace kjit::policy::learn {

struct TunerOptions {
  std::string cache_path;   // the cache kjitd uses (its queue, measurements, checkpoints)
  std::string claimer;      // this tuner's name in claims; a job's is "<claimer>/<job>"
  int jobs = 1;             // rounds at once: one per GPU worker of kjitd
  int first_trials = 1;     // a key's first round: the expert default
  int trials = 8;           // each later round
  double key_seconds = 180; // a round's wall-clock budget
  std::chrono::milliseconds lease{std::chrono::minutes(10)};  // renewed after every trial
  std::chrono::milliseconds idle_poll{200};                   // how often an idle job looks at the queue
  std::chrono::milliseconds wait_when_busy{std::chrono::seconds(30)};  // a key the GPU lacks memory for now
  Proposer proposer = Proposer::kPolicy;  // kExpertThenRandom: no policy (kjit_seed_defaults' configuration)
  bool greedy = true;
  int revise_after = kReviseAfter;
  std::string datasets;        // where a first checkpoint is trained from (empty: DefaultDatasetDirectory)
  bool train_if_missing = true;
  int train_iterations = 1500;
  uint64_t train_seed = 1;
  int learn_every = 8;         // rounds between policy updates (0: never)
  int learn_iterations = 25;
  int max_rounds = 0;          // exit after this many rounds in all (0: run until stopped); for tests
  bool exit_when_idle = false; // exit once the queue has nothing claimable (for tests and one-shot runs)
};

// One line per event, for kjitd's log: (level, event, fields).
using TunerLog = std::function<void(const char* level, const std::string& event,
                                    const std::map<std::string, std::string>& fields)>;

// What became of one round, for logs and tests.
struct RoundSummary {
  int64_t task_id = 0;
  std::string key_text;
  std::string state;  // as written to the task
  std::string detail;
  int trials = 0;
  double best_us = 0, baseline_us = 0;
  int64_t record_id = 0;
};

class Tuner {
 public:
  using EvaluatorFactory = std::function<std::unique_ptr<LiveEvaluator>()>;
  Tuner(TunerOptions options, EvaluatorFactory make_evaluator, TunerLog log);
  ~Tuner();
  Tuner(const Tuner&) = delete;
  Tuner& operator=(const Tuner&) = delete;

  // Runs the jobs (and the learner) until `stop`, or until options' max_rounds / exit_when_idle say so.
  // Returns once every job's trial in flight has finished and its claim is written back.
  Status Run(const std::atomic<bool>& stop);

  // Rounds completed so far, every job.
  int rounds() const { return rounds_.load(); }

 private:
  struct Job;
  void RunJob(int index, const std::atomic<bool>& stop, std::atomic<bool>& done);
  void RunLearner(const std::atomic<bool>& stop, const std::atomic<bool>& jobs_done);
  // One claimed task's round.
  RoundSummary TuneTask(Job& job, const cache::Task& task, const std::atomic<bool>& stop);

  TunerOptions options_;
  EvaluatorFactory make_evaluator_;
  TunerLog log_;
  std::atomic<int> rounds_{0};
};

// The round's episode options for a task, from the tuner's options (exposed for tests).
OnlineOptions RoundOptions(const TunerOptions& options, const cache::Task& task);

// The key's earlier trials, from the cache's measurements of the family's current codegen.
Result<std::vector<PriorTrial>> PriorTrials(const cache::KernelCache& cache, const OpKey& key);

}  // namespace kjit::policy::learn
