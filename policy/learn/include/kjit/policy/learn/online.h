// Online episodes (issue 8): the policy tunes a live key through kjitd's agent
// environment instead of a replayed dataset. Per queued task, one episode:
// the policy proposes a design point, the family generates its kernel, kjitd's
// evaluator compiles, verifies and times it on the GPU, the verdict is what the
// policy sees next, up to a trial budget. kjitd records every trial in the
// cache's measurements (with the design point, the policy version and the
// generator's codegen version, submit_candidate's `design`), and
// MeasurementRows turns those into dataset rows, so that `kjit policy train
// --measurements` learns from them.
//
// This runs in a client of kjitd (`kjit policy online`), not inside kjitd:
// the policy links LibTorch and kjitd must not (it stays torch-free and runs
// each GPU's evaluator as a separate process), and the dependency direction
// stays runtime <- cache <- ipc <- policy <- daemon. The evaluator is an
// interface so that tests drive episodes with a fake one on a CPU.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "kjit/cache/kernel_cache.h"
#include "kjit/ipc/client.h"
#include "kjit/policy/learn/agent.h"
#include "kjit/policy/learn/train.h"
#include "kjit/policy/submit.h"  // SubmitFor

namespace kjit::policy::learn {

// What opening an episode measured: PyTorch's kernel, the floor and the GPU.
struct LiveBaseline {
  double baseline_us = 0;
  double baseline_spread_us = 0;
  double floor_us = 0;
  int sm_count = 0;  // 0: unknown
  std::string gpu_model;  // the GPU that timed the baseline ("NVIDIA H200"); empty: unknown
};

// What the evaluator said of one candidate.
struct LiveVerdict {
  Outcome outcome = Outcome::kVerified;
  double median_us = 0;
  double spread_us = 0;
  double reward = 0;      // reward.h, as the evaluator computed it
  bool accepted = false;  // entered the cache (or was there already)
  int64_t record = 0;     // the record holding it, when accepted
  std::string verdict;    // the evaluator's words
};

class LiveEvaluator {
 public:
  virtual ~LiveEvaluator() = default;
  virtual Result<LiveBaseline> Open(const OpKey& key) = 0;
  // `design`: submit_candidate's design map (family, policy_version, codegen, knob.<name>).
  virtual Result<LiveVerdict> Submit(const Candidate& candidate, const std::map<std::string, std::string>& design) = 0;
  virtual void Close() = 0;

  // The candidates the episode expects to submit after the next one: kjitd's evaluator compiles them while
  // it runs the next Submit (ipc submit_candidate.compile_ahead). Evaluators that cannot use it ignore it.
  void set_compile_ahead(std::vector<Candidate> next) { compile_ahead_ = std::move(next); }
  const std::vector<Candidate>& compile_ahead() const { return compile_ahead_; }

 private:
  std::vector<Candidate> compile_ahead_;
};

// kjitd's agent environment through the ipc client (open_episode, submit_candidate, close_episode).
class KjitdEvaluator : public LiveEvaluator {
 public:
  explicit KjitdEvaluator(ipc::Client& client) : client_(&client) {}
  Result<LiveBaseline> Open(const OpKey& key) override;
  Result<LiveVerdict> Submit(const Candidate& candidate, const std::map<std::string, std::string>& design) override;
  void Close() override;

 private:
  ipc::Client* client_;
  int64_t episode_ = -1;
};

// The same over a connection of its own, for a thread that has no client (each tuner job).
class OwnedKjitdEvaluator : public LiveEvaluator {
 public:
  explicit OwnedKjitdEvaluator(const ipc::ClientOptions& options) : client_(options), inner_(client_) {}
  Result<LiveBaseline> Open(const OpKey& key) override { return inner_.Open(key); }
  Result<LiveVerdict> Submit(const Candidate& candidate, const std::map<std::string, std::string>& design) override {
    inner_.set_compile_ahead(compile_ahead());
    return inner_.Submit(candidate, design);
  }
  void Close() override { inner_.Close(); }

 private:
  ipc::Client client_;
  KjitdEvaluator inner_;
};

// Who proposes the points of an episode. The policy is what kjit runs; the others are the baselines its
// learning curve is compared with on the same live keys (issue 8): uniform random search over the valid
// untried points, the family's expert default followed by random points, and the search the datasets were
// measured with (CoverThenClimbSearcher, replay.h: the expert default, a pairwise cover, hill-climbing).
enum class Proposer { kPolicy, kRandom, kExpertThenRandom, kCover };
const char* ProposerName(Proposer p);
Result<Proposer> ParseProposer(const std::string& name);  // "policy", "random", "expert", "cover"

// A trial of the key measured in an earlier episode (the cache's measurements): the episode starts from it.
struct PriorTrial {
  Point point;
  Outcome outcome = Outcome::kVerified;
  double median_us = 0;
  // The GPU model that measured it (the measurement's detail.gpu_model); empty: unknown. An episode skips
  // prior trials of another model than its baseline's: their times do not compare, and the point is worth
  // trying again on this model.
  std::string gpu_model;
};

struct OnlineTrial;

struct OnlineOptions {
  Proposer proposer = Proposer::kPolicy;
  // With the policy: the family's expert default is the episode's first trial when the key has not tried it
  // yet, the policy proposing from the second on. Measured on an H100 (RESULTS.md, e889bb4), the expert default
  // is the better first trial and the policy the better search. kjitd's tuner sets it; off, the policy proposes
  // every trial (`kjit policy online` measures the policy alone so).
  bool expert_first = false;
  int budget = 8;        // new trials this episode (prior ones not counted)
  bool greedy = true;    // the policy's mode at every step (false: sampled, seeded)
  int revise_after = kReviseAfter;  // greedy: then the best point's neighbours (Agent::Propose; 0: the mode only)
  uint64_t seed = 1;
  int max_backoffs = 2;  // resource_backoff answers (GPU busy, not the candidate's fault) before giving up
  // Candidates the episode expects to submit next, sent with each submission for the evaluator to compile
  // meanwhile (LiveEvaluator::set_compile_ahead; 0: none).
  int compile_ahead = 3;
  // Earlier episodes' trials of the key: never proposed again, and the policy sees them as this episode's
  // history (so a later round revises from where the last one ended).
  std::vector<PriorTrial> prior;
  // No new proposal once this much time has passed since the episode opened (0: no limit); the trial in
  // flight finishes.
  double max_seconds = 0;
  // No new proposal once this is set (shutdown).
  const std::atomic<bool>* stop = nullptr;
  // Called after each trial, from the episode's thread (logging, renewing a claim).
  std::function<void(const OnlineTrial&)> on_trial;
};

struct OnlineTrial {
  Point point;
  std::string proposer;  // the policy version, or "expert-default"/"random" where the policy had no head
  LiveVerdict verdict;
};

struct OnlineReport {
  std::string key_text;
  std::string key_hash;  // hex, as the datasets' "key"

  std::string family;
  std::string policy_version;
  LiveBaseline baseline;
  std::vector<OnlineTrial> trials;
  int best = -1;       // index into trials of the fastest verified one
  int fallbacks = 0;   // proposals the policy could not make (no head for the space)
  int backoffs = 0;
  int prior_trials = 0;  // options.prior entries the episode started from
  std::string stopped;  // why the episode ended before its budget, if it did
  bool resource_backoff = false;  // stopped because the evaluator kept backing off (GPU memory short now)
  bool unfit = false;             // stopped because the key can never fit the GPU
};

// Whether an evaluator's answer (an error message, or a verdict "<outcome>: <reason>") says the key can never
// be evaluated on this GPU ("unfit: ..."), as opposed to not now.
bool IsUnfit(const std::string& why);

// One episode on `key`. Errors only when the episode cannot start (no family, evaluator refuses to open);
// a transport error mid-episode ends it with `stopped` saying why. `agent` may be null unless
// options.proposer is kPolicy.
Result<OnlineReport> RunOnlineEpisode(Agent* agent, const OpKey& key, LiveEvaluator& evaluator,
                                      const OnlineOptions& options);
inline Result<OnlineReport> RunOnlineEpisode(Agent& agent, const OpKey& key, LiveEvaluator& evaluator,
                                             const OnlineOptions& options) {
  return RunOnlineEpisode(&agent, key, evaluator, options);
}

// An episode as one line of JSON (kjit policy online --json): the key, its hash, the baseline and floor, every trial
// (point, proposer, outcome, median, whether stored) and the best; what learning curves are drawn from. Its
// mode is the proposer's name, or "tuner" for the policy with `expert_first` (as kjitd's tuner runs it).
std::string OnlineReportJson(const OnlineReport& report, Proposer proposer, bool expert_first = false);

// The design map a trial is submitted with.
std::map<std::string, std::string> TrialDesign(const Family& family, const Point& point,
                                               const std::string& policy_version);

// The cache's measurements as dataset rows (policy/datasets/README.md's format), for LoadDatasets'
// extra_rows. Only measurements whose client said the generator's codegen version (online episodes,
// kjit_seed_defaults) and whose family and knobs are known; `skipped` counts the others.
Result<std::vector<std::string>> MeasurementRows(const cache::KernelCache& cache, int* skipped = nullptr);

// The policy update between online episodes: `iterations` training iterations on the training split of the
// datasets in `dataset_directory` plus the trials measured so far (MeasurementRows of `cache`), resumed from
// the cache's newest good checkpoint and saved to it as the next one. Held-out keys stay held out, live ones
// included. Returns the updated policy; on error the caller keeps the one it has.
Result<std::unique_ptr<Agent>> LearnFromTrials(const std::string& dataset_directory, cache::KernelCache& cache,
                                               int iterations, TrainReport* report = nullptr);

}  // namespace kjit::policy::learn
