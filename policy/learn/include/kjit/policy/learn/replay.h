// The replay environment: trials answered from measured datasets, so that the
// RL policy can be trained and evaluated on a CPU, reproducibly (issue 8).
//
// A dataset (policy/datasets/<family>-h200.jsonl, format in its README) holds
// measured (key, point) -> outcome, time, PyTorch's time, floor. Loading turns
// every key into a ReplayTask:
//   - the key text is parsed back into an OpKey and accepted only if its hash is
//     the row's `key` (so the problem the family sees is exactly the measured one);
//   - rows of the newest codegen version present for the key are kept, older ones
//     dropped: they describe kernels that are no longer generated (softmax codegen
//     1-2 had a NaN bug), and mixing versions would mix different kernels under
//     one point. The newest codegen in a dataset may still be older than the
//     family's current generator (`stale_codegen`): such keys are kept and counted;
//   - several rows of one point merge into one answer: any failure at that codegen
//     makes the point a failure (a kernel that failed once is never served), else
//     its time is the median of its `verified` rows' times relative to the baseline
//     timed with them (screened rows only when no verified row exists), times the
//     key's median baseline;
//   - points the family's Check now rejects are dropped (counted).
// The action set of a replay task is its measured valid points: points without a
// measurement are masked out of the action space in replay (their outcome is
// unknown, and inventing one would teach the policy the invention). So a replay
// episode can only offer what was measured; on keys measured exhaustively that is
// the whole valid space, on sparsely measured keys it is a sample of it.
//
// Everything here is deterministic: episodes have no randomness of their own;
// searchers draw from a seeded std::mt19937_64.
#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "kjit/policy/design_space.h"
#include "kjit/policy/reward.h"
#include "kjit/runtime/op_key.h"
#include "kjit/runtime/status.h"

namespace kjit::policy::learn {

// Parses OpKey::ToString()'s text back into a key. OpKey's text form is not
// meant to be parsed (it is ambiguous for empty lists, e.g.), so callers must
// check the result's hash against a known one, as LoadDatasets does.
Result<OpKey> ParseKeyText(std::string_view text);

// One measured design point of a task, after merging its rows.
struct MeasuredPoint {
  Point point;
  std::vector<int> value_index;  // per knob of the task's space, the index of the point's value in its domain
  Outcome outcome = Outcome::kVerified;
  double time_us = 0;            // verified only: the merged median time
  double spread_us = 0;          // verified only: the interquartile range of its timed runs, merged like time_us
  bool fully_verified = false;   // a `verified` row exists (else only `screened` rows timed it)
};

// The problem features the policy sees (fixed length, see TaskFeatureNames()).
std::vector<std::string> TaskFeatureNames();

struct ReplayTask {
  std::string family_name;
  const Family* family = nullptr;
  std::shared_ptr<const Problem> problem;
  OpKey key;
  std::string key_hash;  // hex, as in the dataset
  std::string key_text;
  int codegen = 0;            // the dataset rows' codegen version used
  bool stale_codegen = false; // codegen < the family's current codegen_version()
  Space space;
  std::vector<MeasuredPoint> points;  // the action set: measured points Check accepts
  double baseline_us = 0;             // PyTorch eager's median (median over the rows)
  double floor_us = 0;                // bytes moved / copy bandwidth
  int expert_index = -1;              // the family's ExpertDefault in `points`, -1 if it was not measured
  // The ExpertDefault's value index per knob (-1 outside the domain), measured or not: it needs no
  // measurement, so the policy may see it (a prior it learns when to depart from).
  std::vector<int> expert_values;
  int oracle_index = -1;              // the fastest verified point, -1 if none verified
  std::vector<float> features;        // TaskFeatureNames() order
  // The key's whole valid space, as the policy's state counts it (CountSpace): its number of valid points and,
  // per knob, how many of them have each value. Online (MakeLiveTask) the action set is that space; in replay
  // it is the measured subset, whose make-up tells where the search that measured it found fast points (its
  // points crowd there): counted from the action set, the policy would learn from that and meet other counts
  // online. Products of the domains over 2^18 points are sampled (2^15 points), so the counts are estimates
  // there (matmul's: shares off by up to ~0.07). 0 / empty: the state counts the action set (tasks built by
  // hand, e.g. in tests).
  int64_t space_points = 0;
  std::vector<std::vector<int64_t>> space_value_counts;  // [knob][value index]

  double oracle_us() const {
    return oracle_index < 0 ? std::numeric_limits<double>::infinity() : points[oracle_index].time_us;
  }
  int verified_count() const;
  // The index of a point in `points`, or -1.
  int IndexOf(const Point& point) const;
};

// The fixed rule that splits keys into training and held-out: a key is held out
// iff the first byte of its hash (the dataset's `key`, XXH3-128 of the canonical
// key) is divisible by 4, i.e. about a quarter of the keys, independent of
// family, file order or anything measured.
bool IsHeldOut(const ReplayTask& task);

// The fixed rule that carves a validation split out of the training keys, for
// choosing a configuration (reward, weights, ensemble) without looking at the
// held-out keys: a key is a validation key iff the first byte of its hash is 2
// mod 4, i.e. about a third of the keys that are not held out (never a held-out
// key: those are 0 mod 4). Runs that choose train without them (`kjit policy
// train --exclude-validation`) and compare on them (`eval --split validation`);
// the chosen configuration's final runs train on every training key.
bool IsValidation(const ReplayTask& task);

// The split the rules above put a key in, from its hash as hex text (the dataset's `key`,
// `OpKey::Hash().ToHex()`); text that is not hex is a training key, as for IsHeldOut.
enum class KeySplit { kTraining, kValidation, kHeldOut };
KeySplit SplitOfKeyHash(std::string_view key_hash);
const char* KeySplitName(KeySplit split);  // "training", "validation", "held out"

struct DatasetReport {
  int files = 0;
  int rows = 0;
  int keys = 0;
  int tasks = 0;                 // keys that became tasks
  int rows_older_codegen = 0;    // dropped: an older codegen than the key's newest
  int points_invalid_now = 0;    // dropped: Check rejects them today
  int rows_not_trials = 0;       // resource_backoff and unknown outcomes
  int stale_codegen_tasks = 0;   // tasks measured at an older codegen than generated today
  std::vector<std::string> skipped;  // keys not turned into tasks, with the reason
};

// Loads the given JSONL files, and `extra_rows` (lines in the same format, e.g. the cache's measurements
// of online episodes, MeasurementRows in online.h). Tasks come out in a fixed order (family, then key hash).
Result<std::vector<ReplayTask>> LoadDatasets(const std::vector<std::string>& files, const DeviceFacts& device,
                                             DatasetReport* report = nullptr,
                                             const std::vector<std::string>& extra_rows = {});

// A task for a key measured live (an online episode): the action set is every valid point of the
// family's space, none measured (the episode's trials are observed, ReplayEpisode::Observe); the
// expert default is located in it; oracle_index stays -1.
Result<ReplayTask> MakeLiveTask(const OpKey& key, const DeviceFacts& device, double baseline_us, double floor_us);
// Fills task.space_points and task.space_value_counts from the family's valid points for the task's problem.
void CountSpace(ReplayTask& task, const DeviceFacts& device);
// Every *-h200.jsonl file in a directory, sorted.
Result<std::vector<std::string>> DatasetFiles(const std::string& directory);
// $KJIT_DATASETS; else <prefix>/share/kjit/datasets beside an installed binary (<prefix>/bin); else
// policy/datasets in the source tree this binary was built from.
std::string DefaultDatasetDirectory();

// What a trial returned.
struct TrialResult {
  int index = -1;  // in task.points
  Outcome outcome = Outcome::kVerified;
  double time_us = 0;    // verified only
  double reward = 0;     // policy::Reward (reward.h)
  double roofline = 0;   // floor_us / time_us, verified only
};

// One episode on a task: propose a point, observe, revise; ends at the trial
// budget or when every point was tried. A point is tried at most once.
class ReplayEpisode {
 public:
  ReplayEpisode(const ReplayTask& task, int budget);

  const ReplayTask& task() const { return *task_; }
  int budget() const { return budget_; }
  bool done() const;
  const std::vector<TrialResult>& history() const { return history_; }
  bool tried(int index) const { return tried_[index]; }
  int untried_count() const { return static_cast<int>(task_->points.size()) - static_cast<int>(history_.size()); }
  // Best verified time so far; +inf before the first verified trial.
  double best_time_us() const { return best_time_us_; }
  double best_reward() const { return best_reward_; }  // kSlowestCorrectReward before the first verified trial
  int best_index() const { return best_index_; }

  // Runs a trial of task().points[index]. InvalidArgument when the index is out
  // of range, already tried, or the episode is done.
  Result<TrialResult> Trial(int index);
  // Records a trial of task().points[index] whose outcome was measured elsewhere (online, by kjitd's
  // evaluator) instead of answered from the task's data. Same refusals as Trial.
  Result<TrialResult> Observe(int index, Outcome outcome, double time_us);

 private:
  const ReplayTask* task_;
  int budget_;
  std::vector<bool> tried_;
  std::vector<TrialResult> history_;
  double best_time_us_ = std::numeric_limits<double>::infinity();
  double best_reward_ = kSlowestCorrectReward;
  int best_index_ = -1;
};

// Something that chooses the next point of an episode.
class Searcher {
 public:
  virtual ~Searcher() = default;
  virtual std::string name() const = 0;
  // Called once per episode before the first Propose.
  virtual void BeginEpisode(const ReplayTask& /*task*/, uint64_t /*seed*/) {}
  // The index of an untried point of episode.task(); the episode is not done.
  virtual int Propose(const ReplayEpisode& episode) = 0;
  // Whether results depend on the seed (if not, evaluation runs one seed).
  virtual bool stochastic() const { return true; }
  // Who proposed the last point, as trials record it ("random", "expert-default", ...; online episodes).
  virtual std::string ProposedBy() const { return name(); }
  // A copy in the same state, whose proposals continue where this one's would (online episodes guess the
  // next candidates on a copy, to compile them ahead); nullptr where a searcher cannot be copied.
  virtual std::unique_ptr<Searcher> Clone() const { return nullptr; }
};

// Uniform random search without replacement.
class RandomSearcher : public Searcher {
 public:
  std::string name() const override { return "random search"; }
  void BeginEpisode(const ReplayTask& task, uint64_t seed) override;
  int Propose(const ReplayEpisode& episode) override;
  std::string ProposedBy() const override { return "random"; }
  std::unique_ptr<Searcher> Clone() const override { return std::make_unique<RandomSearcher>(*this); }

 private:
  std::mt19937_64 rng_;
};

// The family's expert default first (when measured, and not tried in an earlier episode), then random search.
class ExpertThenRandomSearcher : public Searcher {
 public:
  std::string name() const override { return "expert default, then random"; }
  void BeginEpisode(const ReplayTask& task, uint64_t seed) override;
  int Propose(const ReplayEpisode& episode) override;
  std::string ProposedBy() const override { return expert_last_ ? "expert-default" : "random"; }
  std::unique_ptr<Searcher> Clone() const override { return std::make_unique<ExpertThenRandomSearcher>(*this); }

 private:
  RandomSearcher random_;
  bool expert_last_ = false;
};

// The search the datasets were measured with (kjit_tune_spaces --search), as a Searcher: the family's expert
// default, then a pairwise cover of the task's points (every value of every knob, and every pair of values of
// two knobs, at least once: PairwiseCoverOf), then hill-climbing rounds: every untried one-knob change of the
// `climb_from` fastest verified points so far, until a round has none or `climb_rounds` rounds have run; then
// uniform random untried points. Deterministic until the random phase. kjit_tune_spaces screens each batch
// (ProposeBatch) at once; an online episode (Proposer::kCover) takes the points one at a time.
class CoverThenClimbSearcher : public Searcher {
 public:
  explicit CoverThenClimbSearcher(int climb_rounds = 4, int climb_from = 2)
      : climb_rounds_(climb_rounds), climb_from_(climb_from) {}
  std::string name() const override { return "pairwise cover, then hill-climbing"; }
  void BeginEpisode(const ReplayTask& task, uint64_t seed) override;
  int Propose(const ReplayEpisode& episode) override;
  bool stochastic() const override { return false; }
  std::string ProposedBy() const override { return phase_; }
  std::unique_ptr<Searcher> Clone() const override { return std::make_unique<CoverThenClimbSearcher>(*this); }
  // The rest of the current batch (the cover, or this round's neighbours), refilled with the next round's
  // when it is spent; empty once the climb has nothing more (only random points would follow). Every index
  // is untried in `episode`. Proposing them is the caller's: Propose still returns them one by one.
  std::vector<int> ProposeBatch(const ReplayEpisode& episode);
  // "expert-default", "cover", "climb" or "random": the phase of the last proposal.
  const char* phase() const { return phase_; }
  int rounds() const { return round_; }

 private:
  void Refill(const ReplayEpisode& episode);

  int climb_rounds_;
  int climb_from_;
  const ReplayTask* task_ = nullptr;
  std::vector<int> batch_;  // the current batch, in order; spent from the front
  size_t next_ = 0;
  int round_ = 0;           // climb rounds started
  bool climbing_done_ = false;
  const char* phase_ = "cover";
  std::map<std::vector<int>, int> by_values_;  // a point's value indices -> its index in the task
  RandomSearcher random_;
};

// Best time found within k trials as a fraction of the oracle's (1 = found the
// best measured point; 0 = nothing verified yet), for each k in `ks`, per task,
// averaged over seeds.
struct SearchCurve {
  std::string name;
  std::vector<int> ks;
  std::vector<std::vector<double>> fraction;  // [task][k index]
  std::vector<std::vector<double>> first_time_us;  // [task][seed]: the first trial's time (+inf if it failed)
  std::vector<std::vector<int>> first_index;       // [task][seed]: the first trial's point (index in task.points)
  std::vector<double> Mean() const;           // over tasks, per k
};

SearchCurve RunSearch(Searcher& searcher, const std::vector<const ReplayTask*>& tasks, const std::vector<int>& ks,
                      int seeds, uint64_t seed_base = 1);

// How a first proposal compares with the family's expert default on one key,
// judged as the cache judges a kernel against PyTorch (reward.h, Accept): a
// point "beats" the expert default only if its median plus the noise (the mean
// of the two interquartile ranges the datasets record, at least 1% of the
// expert's median) is below the expert's median. A difference inside the noise
// is a tie. Where the expert default failed, any verified point beats it.
enum class VersusExpert { kFaster, kTie, kSlower };
const char* VersusExpertName(VersusExpert v);
// `index` against task.expert_index (which must be >= 0).
VersusExpert CompareWithExpert(const ReplayTask& task, int index);
// Two verified timings (medians and interquartile ranges) compared that way.
VersusExpert CompareTimes(double median_us, double spread_us, double expert_us, double expert_spread_us);
// Whether any measured point of the task beats its expert default (as above).
// Where none does, no proposal can: the expert default is the oracle, or within noise of it.
bool ExpertBeatable(const ReplayTask& task);

// One held-out key's k=1 comparison, for `kjit policy eval --verbose`.
struct FirstTrialDetail {
  const ReplayTask* task = nullptr;
  int policy_index = -1;  // the policy's first proposal
  VersusExpert versus = VersusExpert::kTie;
  bool beatable = false;  // ExpertBeatable
};

// The eval table: `kjit policy eval` prints it.
struct EvalSummary {
  std::vector<int> ks;
  std::vector<SearchCurve> curves;  // expert default, random search, [policy], oracle
  std::vector<const ReplayTask*> tasks_in_order;  // the curves' rows
  int seeds = 0;
  bool has_policy = false;  // curves hold a policy row
  // k=1 against the expert default, on tasks whose expert point was measured:
  int expert_measured = 0;
  int policy_beats_expert = 0;  // first trial faster beyond the noise (CompareWithExpert)
  int policy_ties_expert = 0;   // within the noise (the same point included)
  int policy_same_point = 0;    // ... of which the expert default itself
  int policy_faster_raw = 0;    // first trial's median strictly below the expert's, noise ignored
  int expert_unbeatable = 0;    // keys where no measured point beats the expert default (ExpertBeatable false)
  std::vector<FirstTrialDetail> first_trials;  // per key whose expert point was measured, in task order
  // The fewest random-search trials whose mean fraction reaches the policy's at
  // k=16 (0 if random never does within the largest k evaluated).
  int random_trials_to_match_policy_k16 = 0;
  // Random search's mean fraction at k=63 (0 if not evaluated): "random needs 4x the policy's 16 trials"
  // means the policy's k=16 fraction is above this.
  double random_at_k63 = 0;
  // What bounds that ratio, from the keys' measured points alone (no searcher run): per key with a verified
  // point, the expected number of uniform random trials without replacement until one lands within 5% of the
  // oracle, (n + 1) / (m + 1) for n points of which m are that close. Where it is under 4, no searcher can
  // need 4x fewer trials than random search to get that close, since it needs at least one.
  std::vector<double> random_trials_within_5pct;  // per key with a verified point, in task order
  std::string split = "held-out";  // which keys, for the table's caption
  std::string Markdown() const;
  // Per key: expert default, oracle and the policy's first proposal, times and spreads, and the verdict.
  std::string FirstTrialMarkdown() const;
  // Per key where the policy's k=16 fraction is below `below`: the policy's and random search's fractions at
  // k=4, 16 and 64 (what keeps the policy's mean under random search's at k=63); empty without a policy row.
  std::string ShortfallMarkdown(double below) const;
};

}  // namespace kjit::policy::learn
