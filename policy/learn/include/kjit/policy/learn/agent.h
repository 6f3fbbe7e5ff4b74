// The RL policy (issue 8): a neural network in LibTorch (CPU) that proposes
// design points for a task, one trial at a time, from what the episode has
// shown so far, and learns from replayed (or, later, live) rewards.
//
// Inputs. Task features (replay.h, TaskFeatureNames: family, op, dtype, log
// sizes, reduction length/count/stride, layout and alignment, bytes, FLOPs, the
// floor, device facts) and episode features: trials so far, whether
// anything verified yet, the best reward so far (log speedup over PyTorch) and
// roofline fraction (floor / time), the failure rate, the last reward, how much
// of the key's valid space is left. And per value of every knob: how often points
// with that value were tried, their failures, their best reward against the
// best so far, whether the best point has it, what share of the key's untried
// valid points have it (counted over the whole valid space, not the measured
// action set: ReplayTask::space_points), and whether it is the family's expert
// default (known without measuring).
// These per-value features enter that value's logit directly through one small
// network shared by all knobs and families, which is what lets the policy
// revise ("threads=512 was good, vec=1 failed") in a space of any shape.
//
// Outputs. A value estimate, and a distribution over points factored over the
// family's knobs in space order: each knob's logits come from the trunk state
// plus the embeddings of the values already chosen for the earlier knobs
// (autoregressive), so the factors are not independent where validity couples
// them. Validity is exact, not learned: a knob's value is masked out unless some
// untried valid point of the action set has it together with the values chosen
// so far, so every proposal is a valid, not yet tried point (Check holds).
// Heads are per (family, knob, domain), created for every space of the
// families' sample keys and of the tasks given.
//
// Algorithm. REINFORCE with a learned baseline (the value head) and entropy
// regularisation. Per step the reward is the improvement of the best reward
// found so far (so an episode's return is the reward of the best point it
// found: the thing measured, best time within k trials), plus a small share of
// the reward.h penalty for a failed trial (correctness before speed).
// Why not PPO: in replay, experience is free, so fresh on-policy episodes every
// update are cheaper than importance-weighted reuse, and the method has fewer
// knobs (no clip range, epochs or minibatches) to get wrong. PPO's reuse of each
// sample for several updates pays off when trials cost GPU time (online in
// kjitd); the stored steps (features, masks, actions) are what PPO needs too.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kjit/policy/learn/replay.h"
#include "kjit/runtime/status.h"

namespace kjit::policy::learn {

// The greedy searches' revision rule (Agent::Propose): after this many trials by the policy's mode, the
// most probable of the best point's one-knob neighbours. Chosen on the validation keys (benchmarks/RESULTS.md,
// "Moved from policy/README.md").
constexpr int kReviseAfter = 4;

struct AgentOptions {
  int hidden = 128;
  uint64_t seed = 1;             // weight initialisation and sampling
  double learning_rate = 3e-3;   // Adam
  double entropy_coef = 0.01;
  double value_coef = 0.5;
  double failure_coef = 0.1;     // share of the reward.h penalty added for a failed trial
  // Step reward: the best reward so far (anytime; the return is the area under the best-so-far curve)
  // or its improvement (the return is the best reward found by the end of the episode).
  bool anytime_reward = false;
  // Between the two: this share of the anytime reward plus the rest of the improvement (ignored when
  // anytime_reward is set).
  double anytime_weight = 0.0;
  // Zero-shot credit: the first trial's reward minus the expert default's (where the task measured it)
  // times this, added to the first step's reward, so that the first proposal is trained to beat the
  // expert default on its own, not only as the start of a search.
  double first_trial_coef = 0.0;
  // First-proposal bandit: per task drawn in an iteration, this many extra one-trial episodes, whose
  // first proposals are trained as a contextual bandit on the trial's reward (the first trial's step
  // reward above), each against the mean of the task's samples (their state is the same, so the mean is
  // an exact baseline), normalised per task. Zero: off. This trains the zero-shot proposal on far more
  // samples per step than the 8 episodes' first steps, whose returns also carry the later trials.
  int first_trial_bandit = 0;
  int budget = 16;               // trials per training episode
  int episodes_per_task = 8;     // episodes run in lockstep per task and iteration
  int tasks_per_iteration = 8;
};

struct IterationStats {
  int64_t iteration = 0;
  double mean_trial_reward = 0;  // reward.h's reward, mean over every trial of the iteration's episodes
  double mean_best_reward = 0;   // the best reward an episode found, mean over episodes
  double mean_return = 0;
  double entropy = 0;            // summed over knobs, mean over steps
  double value_loss = 0;
};

class Agent {
 public:
  // A new, untrained policy with heads for the families' sample keys' spaces and `tasks`' spaces.
  static std::unique_ptr<Agent> Create(const std::vector<const ReplayTask*>& tasks, const AgentOptions& options);
  // From a checkpoint blob (Serialize). Corruption or InvalidArgument, saying
  // why, when the blob is damaged or was written by an incompatible policy.
  static Result<std::unique_ptr<Agent>> Deserialize(const std::string& blob);
  ~Agent();
  Agent(const Agent&) = delete;
  Agent& operator=(const Agent&) = delete;

  std::string Serialize() const;
  // "rl1-i<iteration>-<hash of the weights>": recorded with every kernel the policy proposes.
  std::string version() const;
  int64_t iteration() const;
  const AgentOptions& options() const;
  // Adds heads for spaces not seen yet (fresh weights); true if any were added.
  bool EnsureHeads(const std::vector<const ReplayTask*>& tasks);

  // The next point of an episode: sampled from `rng`, or (greedy) the policy's mode, the most probable
  // untried point (scored exactly over the untried points, not each knob's argmax in turn). With
  // `revise_after` > 0, a greedy proposal from that many trials on, once a point has verified, is the most
  // probable untried point that differs from the episode's best in one knob (the mode where the best has no
  // untried neighbour): the policy ranks the revisions of its best point. (Why: the policy's distribution is
  // peaked, and its next modes after the first lie beside it, in knobs that matter little; searches by the
  // mode alone stopped improving after ~4 trials on a third of the held-out keys; benchmarks/RESULTS.md.) Always
  // an untried point of the action set; NotFound if the policy has no head for the task's space.
  Result<int> Propose(const ReplayEpisode& episode, bool greedy, std::mt19937_64& rng, int revise_after = 0);
  // The greedy point of an ensemble (e.g. policies trained with different seeds): knob by knob, the value
  // with the highest log-probability summed over the members, each member conditioned on the values
  // chosen so far. NotFound if a member has no head for the task's space.
  static Result<int> ProposeEnsemble(const std::vector<Agent*>& agents, const ReplayEpisode& episode);

  // One update: `options().tasks_per_iteration` tasks drawn from `tasks` with
  // `rng`, episodes sampled from the policy, one gradient step.
  Result<IterationStats> TrainIteration(const std::vector<const ReplayTask*>& tasks, std::mt19937_64& rng);

  // Mean per-trial reward and mean best reward of sampled episodes of `budget`
  // trials (0: options().budget), no learning, `episodes` per task, seeded: what
  // the CI test compares before and after training.
  Result<IterationStats> Measure(const std::vector<const ReplayTask*>& tasks, int episodes, uint64_t seed,
                                 int budget = 0);

 private:
  struct Impl;
  explicit Agent(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// The policy as a Searcher (greedy: deterministic, so one seed is enough).
class PolicySearcher : public Searcher {
 public:
  explicit PolicySearcher(Agent& agent, bool greedy = true, int revise_after = kReviseAfter)
      : agent_(&agent), greedy_(greedy), revise_after_(revise_after) {}
  std::string name() const override {
    if (!greedy_) return "policy (sampled)";
    if (revise_after_ <= 0) return "policy (greedy)";
    return "policy (greedy; from trial " + std::to_string(revise_after_ + 1) + ", the best's neighbours)";
  }
  void BeginEpisode(const ReplayTask& task, uint64_t seed) override;
  int Propose(const ReplayEpisode& episode) override;
  bool stochastic() const override { return !greedy_; }
  // Proposals that failed (no head for the space): each falls back to a random untried point.
  int fallbacks() const { return fallbacks_; }

 private:
  Agent* agent_;
  bool greedy_;
  int revise_after_;
  std::mt19937_64 rng_;
  int fallbacks_ = 0;
};

// An ensemble of policies as a Searcher (greedy).
class EnsembleSearcher : public Searcher {
 public:
  explicit EnsembleSearcher(std::vector<Agent*> agents) : agents_(std::move(agents)) {}
  std::string name() const override { return "policy ensemble of " + std::to_string(agents_.size()) + " (greedy)"; }
  void BeginEpisode(const ReplayTask& /*task*/, uint64_t seed) override { rng_.seed(seed); }
  int Propose(const ReplayEpisode& episode) override;
  bool stochastic() const override { return false; }

 private:
  std::vector<Agent*> agents_;
  std::mt19937_64 rng_;
};

// The eval table for `tasks`: expert default then random, random search, the
// policy (when given) and the oracle, at each k, averaged over `seeds`.
// With more than one agent, the policy row is their ensemble (EnsembleSearcher).
EvalSummary Evaluate(const std::vector<const ReplayTask*>& tasks, Agent* agent, const std::vector<int>& ks,
                     int seeds, const std::vector<Agent*>& ensemble = {}, int revise_after = kReviseAfter);

}  // namespace kjit::policy::learn
