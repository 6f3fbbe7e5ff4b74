// The policy network, its decoding with exact validity masks, REINFORCE with a
// learned baseline, and its serialisation. All LibTorch code of the policy is
// in this file, so that the rest of kjit_policy_learn and its users compile
// without torch's headers.
#include "kjit/policy/learn/agent.h"

#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <set>
#include <unordered_map>
#include <sstream>

#include <nlohmann/json.hpp>

#include "kjit/runtime/hash.h"

namespace kjit::policy::learn {
namespace {

// 2: the trials feature on a fixed scale (1: a share of the episode's budget); 3: the state counts the key's
// valid space (ReplayTask::space_points), not the action set. Same layout, other meaning each time, so older
// checkpoints are set aside.
constexpr int kFormatVersion = 3;
constexpr std::string_view kMagic = "KJIT-RL-POLICY\n";
constexpr int kEpisodeFeatures = 9;
constexpr int kValueFeatures = 7;
constexpr float kMasked = -1e9f;  // not -inf: p * log p stays 0 for masked values

// A head serves one knob of one family with one domain (batch_norm's inference
// and training spaces share knob names with different domains).
std::string HeadKey(const std::string& family, const Knob& knob) {
  std::string key = family + "/" + knob.name + "/";
  for (size_t i = 0; i < knob.values.size(); ++i) key += (i ? "," : "") + std::to_string(knob.values[i]);
  return key;
}

struct NetImpl : torch::nn::Module {
  NetImpl(int inputs, int hidden) : hidden_size(hidden) {
    fc1 = register_module("fc1", torch::nn::Linear(inputs, hidden));
    fc2 = register_module("fc2", torch::nn::Linear(hidden, hidden));
    value = register_module("value", torch::nn::Linear(hidden, 1));
    vf1 = register_module("vf1", torch::nn::Linear(kValueFeatures, 16));
    vf2 = register_module("vf2", torch::nn::Linear(16, 1));
  }
  // Heads are named by their index, in the order they were added (kept in the checkpoint).
  void AddHead(int domain) {
    const std::string n = std::to_string(logits.size());
    logits.push_back(register_module("logits" + n, torch::nn::Linear(hidden_size, domain)));
    embeds.push_back(register_module("embed" + n, torch::nn::Embedding(domain, hidden_size)));
  }
  torch::Tensor Trunk(const torch::Tensor& x) { return torch::tanh(fc2(torch::tanh(fc1(x)))); }
  torch::Tensor Value(const torch::Tensor& h) { return value(h).squeeze(-1); }
  // [S, D]: the head's view of the state plus the per-value evidence of the episode.
  torch::Tensor Logits(int head, const torch::Tensor& h, const torch::Tensor& vf) {
    return logits[head](h) + vf2(torch::tanh(vf1(vf))).squeeze(-1);
  }
  torch::Tensor Embed(int head, const torch::Tensor& a) { return embeds[head](a); }

  int hidden_size;
  torch::nn::Linear fc1{nullptr}, fc2{nullptr}, value{nullptr}, vf1{nullptr}, vf2{nullptr};
  std::vector<torch::nn::Linear> logits;
  std::vector<torch::nn::Embedding> embeds;
};
TORCH_MODULE(Net);

// The state of an episode before its next trial, as network inputs.
struct StateRows {
  std::vector<float> x;                 // rows * inputs
  std::vector<std::vector<float>> vf;   // per knob: rows * D * kValueFeatures
};

void AppendState(const ReplayEpisode& ep, StateRows& rows) {
  const ReplayTask& task = ep.task();
  rows.x.insert(rows.x.end(), task.features.begin(), task.features.end());
  const auto& hist = ep.history();
  const int trials = static_cast<int>(hist.size());
  int failures = 0;
  for (const auto& r : hist) failures += r.outcome != Outcome::kVerified;
  const bool any_verified = ep.best_index() >= 0;
  const double best_roofline =
      any_verified && task.floor_us > 0 ? task.floor_us / ep.best_time_us() : 0.0;
  // The space's counts where the task has them (ReplayTask::space_points: the same state in replay and online),
  // else the action set's.
  const bool counted = task.space_points > 0 && task.space_value_counts.size() == task.space.knobs.size();
  const double space = counted ? static_cast<double>(task.space_points) : static_cast<double>(task.points.size());
  const float episode[kEpisodeFeatures] = {
      // Trials on a fixed scale, not a share of the budget: training episodes (16 trials) and evaluation
      // episodes (64) must show the policy the same feature at the same step.
      static_cast<float>(std::min(trials, 64)) / 64.f,
      static_cast<float>(std::log2(trials + 1.0) / 6),
      any_verified ? 1.f : 0.f,
      static_cast<float>(any_verified ? ep.best_reward() / 5 : -0.6),
      static_cast<float>(best_roofline),
      static_cast<float>(failures) / static_cast<float>(trials + 1),
      hist.empty() ? 0.f : static_cast<float>(hist.back().reward / 5),
      static_cast<float>(std::max(space - trials, 0.0) / space),
      static_cast<float>(std::log2(space + 1.0) / 10),
  };
  rows.x.insert(rows.x.end(), episode, episode + kEpisodeFeatures);

  const size_t knobs = task.space.knobs.size();
  if (rows.vf.size() < knobs) rows.vf.resize(knobs);
  for (size_t k = 0; k < knobs; ++k) {
    const size_t d = task.space.knobs[k].values.size();
    std::vector<double> count(d, 0), fails(d, 0), best(d, -1e9), avail(d, 0);
    for (const auto& r : hist) {
      const int v = task.points[r.index].value_index[k];
      count[v] += 1;
      if (r.outcome != Outcome::kVerified) {
        fails[v] += 1;
      } else {
        best[v] = std::max(best[v], r.reward);
      }
    }
    if (counted) {
      // The space's points with each value that were not tried (every tried point is one of them).
      // (Sampled counts may fall below the tried ones.)
      for (size_t v = 0; v < d; ++v) avail[v] = std::max(0.0, static_cast<double>(task.space_value_counts[k][v]) - count[v]);
    } else {
      for (size_t p = 0; p < task.points.size(); ++p) {
        if (!ep.tried(static_cast<int>(p))) avail[task.points[p].value_index[k]] += 1;
      }
    }
    const int best_value = any_verified ? task.points[ep.best_index()].value_index[k] : -1;
    const double untried = std::max<double>(space - trials, 1);
    for (size_t v = 0; v < d; ++v) {
      const bool has = best[v] > -1e8;
      rows.vf[k].push_back(static_cast<float>(count[v] / std::max(trials, 1)));
      rows.vf[k].push_back(static_cast<float>(count[v] > 0 ? fails[v] / count[v] : 0));
      rows.vf[k].push_back(has ? 1.f : 0.f);
      rows.vf[k].push_back(static_cast<float>(has ? (best[v] - ep.best_reward()) / 5 : 0));
      rows.vf[k].push_back(static_cast<int>(v) == best_value ? 1.f : 0.f);
      rows.vf[k].push_back(static_cast<float>(avail[v] / untried));
      rows.vf[k].push_back(task.expert_values[k] == static_cast<int>(v) ? 1.f : 0.f);
    }
  }
}

torch::Tensor FloatTensor(const std::vector<float>& data, std::vector<int64_t> shape) {
  return torch::from_blob(const_cast<float*>(data.data()), shape, torch::kFloat32).clone();
}

// Which values of knob `k` some untried point has together with `prefix` (the values chosen for knobs < k).
void AllowedValues(const ReplayEpisode& ep, size_t k, const std::vector<int>& prefix, uint8_t* allowed) {
  const ReplayTask& task = ep.task();
  std::fill(allowed, allowed + task.space.knobs[k].values.size(), 0);
  for (size_t p = 0; p < task.points.size(); ++p) {
    if (ep.tried(static_cast<int>(p))) continue;
    const auto& vi = task.points[p].value_index;
    if (std::equal(prefix.begin(), prefix.begin() + static_cast<std::ptrdiff_t>(k), vi.begin())) allowed[vi[k]] = 1;
  }
}

int PointWithValues(const ReplayEpisode& ep, const std::vector<int>& values) {
  const auto& points = ep.task().points;
  for (size_t p = 0; p < points.size(); ++p) {
    if (!ep.tried(static_cast<int>(p)) && points[p].value_index == values) return static_cast<int>(p);
  }
  return -1;
}

// Everything a gradient step needs of one task's episodes: inputs, masks and
// actions per step (rows step-major), and the returns.
struct Rollout {
  const ReplayTask* task = nullptr;
  std::vector<int> heads;
  StateRows states;
  std::vector<std::vector<uint8_t>> masks;    // per knob: rows * D
  std::vector<std::vector<int64_t>> actions;  // per knob: rows
  std::vector<float> returns;                 // rows
  int rows = 0;
};

}  // namespace

struct Agent::Impl {
  AgentOptions options;
  Net net{nullptr};
  std::vector<std::string> head_keys;
  std::map<std::string, int> head_index;
  std::unique_ptr<torch::optim::Adam> optimizer;
  int64_t iteration = 0;
  // The version of the checkpoint these weights were loaded from, as it was saved: a torch archive written
  // again after loading need not be byte for byte the one loaded, so its hash is not recomputed. Cleared
  // when the weights change.
  std::string loaded_version;

  static int Inputs() { return static_cast<int>(TaskFeatureNames().size()) + kEpisodeFeatures; }

  void Init() {
    torch::set_num_threads(1);  // tiny matrices: threads cost more than they give, and results stay reproducible
    torch::manual_seed(options.seed);
    net = Net(Inputs(), options.hidden);
  }

  bool AddHeadsFor(const std::string& family, const Space& space) {
    bool added = false;
    for (const auto& knob : space.knobs) {
      const std::string key = HeadKey(family, knob);
      if (head_index.count(key)) continue;
      head_index[key] = static_cast<int>(head_keys.size());
      head_keys.push_back(key);
      net->AddHead(static_cast<int>(knob.values.size()));
      added = true;
    }
    if (added) {
      optimizer.reset();  // new parameters: the optimizer is rebuilt on the next update
      loaded_version.clear();
    }
    return added;
  }

  Result<std::vector<int>> HeadsOf(const ReplayTask& task) const {
    std::vector<int> heads;
    for (const auto& knob : task.space.knobs) {
      auto it = head_index.find(HeadKey(task.family_name, knob));
      if (it == head_index.end()) return NotFound("the policy has no head for " + HeadKey(task.family_name, knob));
      heads.push_back(it->second);
    }
    return heads;
  }

  // Samples the next point of each episode (all on one task, none done), knob by knob (greedy proposals: LogProbs).
  // Records masks and actions into `out` when given.
  std::vector<int> Act(const std::vector<ReplayEpisode*>& eps, const std::vector<int>& heads,
                       std::mt19937_64& rng, Rollout* out) {
    torch::NoGradGuard no_grad;
    const ReplayTask& task = eps.front()->task();
    const int64_t rows = static_cast<int64_t>(eps.size());
    StateRows states;
    for (ReplayEpisode* ep : eps) AppendState(*ep, states);
    torch::Tensor h = net->Trunk(FloatTensor(states.x, {rows, Inputs()}));
    const size_t knobs = task.space.knobs.size();
    std::vector<std::vector<int>> chosen(eps.size(), std::vector<int>(knobs, 0));
    for (size_t k = 0; k < knobs; ++k) {
      const int64_t d = static_cast<int64_t>(task.space.knobs[k].values.size());
      const torch::Tensor vf = FloatTensor(states.vf[k], {rows, d, kValueFeatures});
      std::vector<uint8_t> mask(static_cast<size_t>(rows * d));
      for (int64_t r = 0; r < rows; ++r) AllowedValues(*eps[r], k, chosen[r], mask.data() + r * d);
      const torch::Tensor allowed =
          torch::from_blob(mask.data(), {rows, d}, torch::kUInt8).to(torch::kBool);
      const torch::Tensor probs =
          torch::softmax(net->Logits(heads[k], h, vf).masked_fill(allowed.logical_not(), kMasked), -1).contiguous();
      const auto p = probs.accessor<float, 2>();
      std::vector<int64_t> act(static_cast<size_t>(rows));
      for (int64_t r = 0; r < rows; ++r) {
        int pick = -1;
        double total = 0;
        for (int64_t v = 0; v < d; ++v) total += mask[r * d + v] ? p[r][v] : 0.0;
        double u = std::uniform_real_distribution<double>(0.0, total)(rng);
        for (int64_t v = 0; v < d; ++v) {
          if (!mask[r * d + v]) continue;
          pick = static_cast<int>(v);  // the last allowed value absorbs rounding
          u -= p[r][v];
          if (u < 0) break;
        }
        chosen[r][k] = pick;
        act[r] = pick;
      }
      h = h + net->Embed(heads[k], torch::from_blob(act.data(), {rows}, torch::kInt64).clone());
      if (out != nullptr) {
        out->masks[k].insert(out->masks[k].end(), mask.begin(), mask.end());
        out->actions[k].insert(out->actions[k].end(), act.begin(), act.end());
      }
    }
    if (out != nullptr) {
      out->states.x.insert(out->states.x.end(), states.x.begin(), states.x.end());
      for (size_t k = 0; k < knobs; ++k) {
        out->states.vf[k].insert(out->states.vf[k].end(), states.vf[k].begin(), states.vf[k].end());
      }
      out->rows += static_cast<int>(rows);
    }
    std::vector<int> indices;
    for (size_t r = 0; r < eps.size(); ++r) indices.push_back(PointWithValues(*eps[r], chosen[r]));
    return indices;
  }

  // The log-probability of every untried point of `ep` under the distribution Act samples from (the
  // product over knobs of each knob's masked softmax given the values before it), with the points' indices.
  // Scored exactly over the untried points, so that the argmax is the distribution's mode: each knob's argmax
  // in turn (the greedy decode before the thirteenth session; ProposeEnsemble's still) is not, and after its
  // first point it keeps the earlier knobs' values and walks through the last knob's.
  std::pair<std::vector<int>, std::vector<double>> LogProbs(const ReplayEpisode& ep, const std::vector<int>& heads) {
    torch::NoGradGuard no_grad;
    const ReplayTask& task = ep.task();
    std::vector<int> untried;
    for (size_t p = 0; p < task.points.size(); ++p) {
      if (!ep.tried(static_cast<int>(p))) untried.push_back(static_cast<int>(p));
    }
    std::vector<double> logp(untried.size(), 0.0);
    if (untried.empty()) return {untried, logp};
    const int64_t rows = static_cast<int64_t>(untried.size());
    StateRows states;
    AppendState(ep, states);
    torch::Tensor h = net->Trunk(FloatTensor(states.x, {1, Inputs()})).expand({rows, -1});
    // Each untried point's prefix (its values of the knobs before k) as a number, equal for equal prefixes.
    std::vector<int64_t> prefix(untried.size(), 0);
    for (size_t k = 0; k < task.space.knobs.size(); ++k) {
      const int64_t d = static_cast<int64_t>(task.space.knobs[k].values.size());
      // The values an untried point has after each prefix (AllowedValues, for every prefix at once).
      std::unordered_map<int64_t, std::vector<uint8_t>> after;
      for (size_t i = 0; i < untried.size(); ++i) {
        auto& allowed = after[prefix[i]];
        if (allowed.empty()) allowed.assign(static_cast<size_t>(d), 0);
        allowed[task.points[untried[i]].value_index[k]] = 1;
      }
      std::vector<uint8_t> mask;
      std::vector<int64_t> act;
      mask.reserve(static_cast<size_t>(rows * d));
      std::unordered_map<int64_t, int64_t> next_id;  // (prefix, value) -> the longer prefix's number
      for (size_t i = 0; i < untried.size(); ++i) {
        const int v = task.points[untried[i]].value_index[k];
        const auto& allowed = after[prefix[i]];
        mask.insert(mask.end(), allowed.begin(), allowed.end());
        act.push_back(v);
        prefix[i] = next_id.emplace(prefix[i] * d + v, static_cast<int64_t>(next_id.size())).first->second;
      }
      const torch::Tensor allowed = torch::from_blob(mask.data(), {rows, d}, torch::kUInt8).to(torch::kBool);
      const torch::Tensor vf = FloatTensor(states.vf[k], {1, d, kValueFeatures});  // the same for every row
      const torch::Tensor a = torch::from_blob(act.data(), {rows}, torch::kInt64).clone();
      const torch::Tensor lp = torch::log_softmax(net->Logits(heads[k], h, vf).masked_fill(allowed.logical_not(), kMasked), -1)
                                   .gather(1, a.unsqueeze(1))
                                   .squeeze(1)
                                   .contiguous();
      const auto l = lp.accessor<float, 1>();
      for (int64_t r = 0; r < rows; ++r) logp[static_cast<size_t>(r)] += l[r];
      h = h + net->Embed(heads[k], a);
    }
    return {untried, logp};
  }

  // Runs `episodes` sampled episodes on a task in lockstep. Fills `rollout` (if
  // given) and adds to the statistics.
  Status RunEpisodes(const ReplayTask& task, int episodes, std::mt19937_64& rng, Rollout* rollout,
                     IterationStats& stats, int& trial_count, int& episode_count) {
    KJIT_ASSIGN_OR_RETURN(std::vector<int> heads, HeadsOf(task));
    std::vector<ReplayEpisode> eps(static_cast<size_t>(episodes), ReplayEpisode(task, options.budget));
    std::vector<ReplayEpisode*> ptrs;
    for (auto& e : eps) ptrs.push_back(&e);
    if (rollout != nullptr) {
      rollout->task = &task;
      rollout->heads = heads;
      rollout->masks.resize(task.space.knobs.size());
      rollout->actions.resize(task.space.knobs.size());
      rollout->states.vf.resize(task.space.knobs.size());
    }
    std::vector<std::vector<float>> step_reward(eps.size());
    // The expert default's reward, where it was measured (for first_trial_coef).
    std::optional<double> expert_reward;
    if (task.expert_index >= 0) {
      ReplayEpisode probe(task, 1);
      if (auto r = probe.Trial(task.expert_index); r.ok()) expert_reward = r->reward;
    }
    while (!eps.front().done()) {
      std::vector<double> best_before;
      for (auto& e : eps) best_before.push_back(e.best_reward());
      const std::vector<int> picks = Act(ptrs, heads, rng, rollout);
      for (size_t i = 0; i < eps.size(); ++i) {
        auto r = eps[i].Trial(picks[i]);
        if (!r.ok()) return r.status().WithContext("the policy proposed a point the episode refused");
        // Anytime: the best reward so far after every trial (from the slowest correct reward as zero),
        // over the budget, so the return is the area under the best-so-far curve, which is what the
        // metric averages over k. Otherwise: its improvement, so the return is the final best only.
        // Mixed: anytime_weight of the one plus the rest of the other (--anytime: all anytime).
        const double w = options.anytime_reward ? 1.0 : std::clamp(options.anytime_weight, 0.0, 1.0);
        double reward = w * (eps[i].best_reward() - kSlowestCorrectReward) / options.budget +
                        (1 - w) * (eps[i].best_reward() - best_before[i]);
        if (r->outcome != Outcome::kVerified) reward += options.failure_coef * r->reward;
        if (eps[i].history().size() == 1 && options.first_trial_coef != 0 && expert_reward.has_value()) {
          reward += options.first_trial_coef * (r->reward - *expert_reward);
        }
        step_reward[i].push_back(static_cast<float>(reward));
        stats.mean_trial_reward += r->reward;
        ++trial_count;
      }
    }
    for (auto& e : eps) {
      stats.mean_best_reward += e.best_reward();
      ++episode_count;
    }
    if (rollout != nullptr) {
      // Returns-to-go, laid out step-major like the rows.
      const size_t steps = step_reward.front().size();
      std::vector<float> ret(steps * eps.size());
      for (size_t i = 0; i < eps.size(); ++i) {
        float g = 0;
        for (size_t t = steps; t-- > 0;) {
          g += step_reward[i][t];
          ret[t * eps.size() + i] = g;
        }
        stats.mean_return += g;
      }
      rollout->returns = std::move(ret);
    }
    return Status::Ok();
  }

  // Log-probabilities of the recorded actions, entropies and values, with gradients.
  void Replay(const Rollout& ro, torch::Tensor& logp, torch::Tensor& entropy, torch::Tensor& value) {
    const int64_t rows = ro.rows;
    torch::Tensor h = net->Trunk(FloatTensor(ro.states.x, {rows, Inputs()}));
    value = net->Value(h);
    logp = torch::zeros({rows});
    entropy = torch::zeros({rows});
    for (size_t k = 0; k < ro.heads.size(); ++k) {
      const int64_t d = static_cast<int64_t>(ro.task->space.knobs[k].values.size());
      const torch::Tensor vf = FloatTensor(ro.states.vf[k], {rows, d, kValueFeatures});
      const torch::Tensor allowed =
          torch::from_blob(const_cast<uint8_t*>(ro.masks[k].data()), {rows, d}, torch::kUInt8).to(torch::kBool);
      const torch::Tensor act =
          torch::from_blob(const_cast<int64_t*>(ro.actions[k].data()), {rows}, torch::kInt64).clone();
      const torch::Tensor lp =
          torch::log_softmax(net->Logits(ro.heads[k], h, vf).masked_fill(allowed.logical_not(), kMasked), -1);
      logp = logp + lp.gather(1, act.unsqueeze(1)).squeeze(1);
      entropy = entropy - (lp.exp() * lp).sum(1);
      h = h + net->Embed(ro.heads[k], act);
    }
  }
};

Agent::Agent(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Agent::~Agent() = default;

std::unique_ptr<Agent> Agent::Create(const std::vector<const ReplayTask*>& tasks, const AgentOptions& options) {
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  impl->Init();
  std::unique_ptr<Agent> agent(new Agent(std::move(impl)));
  // Heads for every family's sample keys first, so that a policy can act on keys of any family it knows.
  for (const Family* family : Families()) {
    for (const OpKey& key : family->SampleKeys()) {
      auto problem = family->Match(key);
      if (!problem.ok()) continue;
      agent->impl_->AddHeadsFor(std::string(family->name()), family->MakeSpace(**problem, DeviceFacts::H200()));
    }
  }
  agent->EnsureHeads(tasks);
  return agent;
}

bool Agent::EnsureHeads(const std::vector<const ReplayTask*>& tasks) {
  bool added = false;
  for (const ReplayTask* t : tasks) added |= impl_->AddHeadsFor(t->family_name, t->space);
  return added;
}

int64_t Agent::iteration() const { return impl_->iteration; }
const AgentOptions& Agent::options() const { return impl_->options; }

Result<int> Agent::Propose(const ReplayEpisode& episode, bool greedy, std::mt19937_64& rng, int revise_after) {
  if (episode.done()) return InvalidArgument("the episode is over");
  KJIT_ASSIGN_OR_RETURN(std::vector<int> heads, impl_->HeadsOf(episode.task()));
  if (greedy) {
    const auto [untried, logp] = impl_->LogProbs(episode, heads);
    if (untried.empty()) return Internal("an episode not over has no untried point");
    // Revision: from `revise_after` trials on, the most probable untried point one knob away from the best.
    const int best = episode.best_index();
    int pick = -1;
    if (revise_after > 0 && best >= 0 && static_cast<int>(episode.history().size()) >= revise_after) {
      const auto& best_values = episode.task().points[best].value_index;
      for (size_t i = 0; i < untried.size(); ++i) {
        const auto& values = episode.task().points[untried[i]].value_index;
        int differ = 0;
        for (size_t k = 0; k < values.size(); ++k) differ += values[k] != best_values[k];
        if (differ == 1 && (pick < 0 || logp[i] > logp[static_cast<size_t>(pick)])) pick = static_cast<int>(i);
      }
    }
    if (pick < 0) pick = static_cast<int>(std::max_element(logp.begin(), logp.end()) - logp.begin());
    return untried[static_cast<size_t>(pick)];
  }
  // Act reads the episode only.
  std::vector<ReplayEpisode*> eps{const_cast<ReplayEpisode*>(&episode)};
  const int index = impl_->Act(eps, heads, rng, nullptr).front();
  if (index < 0) return Internal("decoding produced no untried point (a mask bug)");
  return index;
}

Result<int> Agent::ProposeEnsemble(const std::vector<Agent*>& agents, const ReplayEpisode& episode) {
  if (agents.empty()) return InvalidArgument("an empty ensemble");
  if (episode.done()) return InvalidArgument("the episode is over");
  torch::NoGradGuard no_grad;
  const ReplayTask& task = episode.task();
  StateRows states;
  AppendState(episode, states);
  std::vector<std::vector<int>> heads;
  std::vector<torch::Tensor> h;
  for (Agent* a : agents) {
    KJIT_ASSIGN_OR_RETURN(std::vector<int> member_heads, a->impl_->HeadsOf(task));
    heads.push_back(std::move(member_heads));
    h.push_back(a->impl_->net->Trunk(FloatTensor(states.x, {1, Impl::Inputs()})));
  }
  const size_t knobs = task.space.knobs.size();
  std::vector<int> chosen(knobs, 0);
  for (size_t k = 0; k < knobs; ++k) {
    const int64_t d = static_cast<int64_t>(task.space.knobs[k].values.size());
    const torch::Tensor vf = FloatTensor(states.vf[k], {1, d, kValueFeatures});
    std::vector<uint8_t> mask(static_cast<size_t>(d));
    AllowedValues(episode, k, chosen, mask.data());
    const torch::Tensor allowed = torch::from_blob(mask.data(), {1, d}, torch::kUInt8).to(torch::kBool);
    torch::Tensor total = torch::zeros({1, d});
    for (size_t m = 0; m < agents.size(); ++m) {
      total = total + torch::log_softmax(
                          agents[m]->impl_->net->Logits(heads[m][k], h[m], vf).masked_fill(allowed.logical_not(), kMasked),
                          -1);
    }
    const auto t = total.accessor<float, 2>();
    int pick = -1;
    for (int64_t v = 0; v < d; ++v) {
      if (mask[v] && (pick < 0 || t[0][v] > t[0][pick])) pick = static_cast<int>(v);
    }
    chosen[k] = pick;
    const torch::Tensor act = torch::full({1}, static_cast<int64_t>(pick), torch::kInt64);
    for (size_t m = 0; m < agents.size(); ++m) h[m] = h[m] + agents[m]->impl_->net->Embed(heads[m][k], act);
  }
  const int index = PointWithValues(episode, chosen);
  if (index < 0) return Internal("decoding produced no untried point (a mask bug)");
  return index;
}

Result<IterationStats> Agent::TrainIteration(const std::vector<const ReplayTask*>& tasks, std::mt19937_64& rng) {
  if (tasks.empty()) return InvalidArgument("no tasks to train on");
  auto& im = *impl_;
  if (!im.optimizer) {
    im.optimizer = std::make_unique<torch::optim::Adam>(im.net->parameters(),
                                                        torch::optim::AdamOptions(im.options.learning_rate));
  }
  IterationStats stats;
  int trials = 0, episodes = 0;
  std::vector<Rollout> rollouts(static_cast<size_t>(im.options.tasks_per_iteration));
  std::uniform_int_distribution<size_t> pick(0, tasks.size() - 1);
  for (auto& ro : rollouts) {
    KJIT_RETURN_IF_ERROR(im.RunEpisodes(*tasks[pick(rng)], im.options.episodes_per_task, rng, &ro, stats, trials,
                                        episodes));
  }
  // The first-proposal bandit: one-trial episodes on the same tasks (AgentOptions::first_trial_bandit).
  std::vector<Rollout> bandits;
  if (im.options.first_trial_bandit > 0) {
    const int budget = im.options.budget;
    im.options.budget = 1;
    IterationStats unused;
    int unused_trials = 0, unused_episodes = 0;
    for (const auto& ro : rollouts) {
      bandits.emplace_back();
      const Status s = im.RunEpisodes(*ro.task, im.options.first_trial_bandit, rng, &bandits.back(), unused,
                                      unused_trials, unused_episodes);
      if (!s.ok()) {
        im.options.budget = budget;
        return s;
      }
    }
    im.options.budget = budget;
  }
  std::vector<torch::Tensor> logps, ents, values, returns;
  for (const auto& ro : rollouts) {
    torch::Tensor lp, ent, v;
    im.Replay(ro, lp, ent, v);
    logps.push_back(lp);
    ents.push_back(ent);
    values.push_back(v);
    returns.push_back(FloatTensor(ro.returns, {ro.rows}));
  }
  const torch::Tensor logp = torch::cat(logps), entropy = torch::cat(ents), value = torch::cat(values);
  const torch::Tensor ret = torch::cat(returns);
  torch::Tensor advantage = ret - value.detach();
  advantage = (advantage - advantage.mean()) / (advantage.std() + 1e-6);
  const torch::Tensor value_loss = torch::mse_loss(value, ret);
  torch::Tensor loss = -(logp * advantage).mean() + im.options.value_coef * value_loss -
                       im.options.entropy_coef * entropy.mean();
  if (!bandits.empty()) {
    torch::Tensor bandit_loss = torch::zeros({});
    for (const auto& b : bandits) {
      torch::Tensor lp, ent, v;
      im.Replay(b, lp, ent, v);
      const torch::Tensor r = FloatTensor(b.returns, {b.rows});
      const torch::Tensor adv = b.rows > 1 ? (r - r.mean()) / (r.std() + 1e-6) : torch::zeros_like(r);
      bandit_loss = bandit_loss - (lp * adv).mean();
    }
    loss = loss + bandit_loss / static_cast<double>(bandits.size());
  }
  im.optimizer->zero_grad();
  loss.backward();
  torch::nn::utils::clip_grad_norm_(im.net->parameters(), 1.0);
  im.optimizer->step();
  ++im.iteration;
  im.loaded_version.clear();
  stats.iteration = im.iteration;
  stats.mean_trial_reward /= std::max(trials, 1);
  stats.mean_best_reward /= std::max(episodes, 1);
  stats.mean_return /= std::max(episodes, 1);
  stats.entropy = entropy.mean().item<double>();
  stats.value_loss = value_loss.item<double>();
  return stats;
}

Result<IterationStats> Agent::Measure(const std::vector<const ReplayTask*>& tasks, int episodes, uint64_t seed,
                                      int budget) {
  IterationStats stats;
  const int training_budget = impl_->options.budget;
  if (budget > 0) impl_->options.budget = budget;
  stats.iteration = impl_->iteration;
  int trials = 0, count = 0;
  std::mt19937_64 rng(seed);
  for (const ReplayTask* t : tasks) {
    const Status s = impl_->RunEpisodes(*t, episodes, rng, nullptr, stats, trials, count);
    if (!s.ok()) {
      impl_->options.budget = training_budget;
      return s;
    }
  }
  impl_->options.budget = training_budget;
  stats.mean_trial_reward /= std::max(trials, 1);
  stats.mean_best_reward /= std::max(count, 1);
  return stats;
}

// ------------------------------------------------------------- serialisation

std::string Agent::Serialize() const {
  const auto& im = *impl_;
  nlohmann::json header;
  header["format"] = kFormatVersion;
  header["inputs"] = Impl::Inputs();
  header["task_features"] = TaskFeatureNames();
  header["episode_features"] = kEpisodeFeatures;
  header["value_features"] = kValueFeatures;
  header["hidden"] = im.options.hidden;
  header["heads"] = im.head_keys;
  header["iteration"] = im.iteration;
  header["options"] = {{"seed", im.options.seed},
                       {"learning_rate", im.options.learning_rate},
                       {"entropy_coef", im.options.entropy_coef},
                       {"value_coef", im.options.value_coef},
                       {"failure_coef", im.options.failure_coef},
                       {"anytime_reward", im.options.anytime_reward},
                       {"first_trial_coef", im.options.first_trial_coef},
                       {"anytime_weight", im.options.anytime_weight},
                       {"first_trial_bandit", im.options.first_trial_bandit},
                       {"budget", im.options.budget},
                       {"episodes_per_task", im.options.episodes_per_task},
                       {"tasks_per_iteration", im.options.tasks_per_iteration}};
  torch::serialize::OutputArchive archive;
  im.net->save(archive);
  std::ostringstream weights;
  archive.save_to(weights);
  return std::string(kMagic) + header.dump() + "\n" + weights.str();
}

Result<std::unique_ptr<Agent>> Agent::Deserialize(const std::string& blob) {
  if (!blob.starts_with(kMagic)) return Corruption("not a kjit policy checkpoint (bad magic)");
  const size_t eol = blob.find('\n', kMagic.size());
  if (eol == std::string::npos) return Corruption("policy checkpoint truncated in its header");
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(blob.substr(kMagic.size(), eol - kMagic.size()));
  } catch (const nlohmann::json::exception& e) {
    return Corruption(std::string("policy checkpoint header is not JSON: ") + e.what());
  }
  auto impl = std::make_unique<Impl>();
  try {
    if (header.at("format").get<int>() != kFormatVersion) {
      return InvalidArgument("policy checkpoint format " + std::to_string(header.at("format").get<int>()) +
                             " (this kjit reads " + std::to_string(kFormatVersion) + ")");
    }
    if (header.at("task_features").get<std::vector<std::string>>() != TaskFeatureNames() ||
        header.at("episode_features").get<int>() != kEpisodeFeatures ||
        header.at("value_features").get<int>() != kValueFeatures) {
      return InvalidArgument("policy checkpoint was trained on other features than this kjit computes");
    }
    const auto& o = header.at("options");
    impl->options.seed = o.at("seed").get<uint64_t>();
    impl->options.learning_rate = o.at("learning_rate").get<double>();
    impl->options.entropy_coef = o.at("entropy_coef").get<double>();
    impl->options.value_coef = o.at("value_coef").get<double>();
    impl->options.failure_coef = o.at("failure_coef").get<double>();
    impl->options.anytime_reward = o.value("anytime_reward", false);  // absent before the option existed
    impl->options.first_trial_coef = o.value("first_trial_coef", 0.0);
    impl->options.anytime_weight = o.value("anytime_weight", 0.0);
    impl->options.first_trial_bandit = o.value("first_trial_bandit", 0);
    impl->options.budget = o.at("budget").get<int>();
    impl->options.episodes_per_task = o.at("episodes_per_task").get<int>();
    impl->options.tasks_per_iteration = o.at("tasks_per_iteration").get<int>();
    impl->options.hidden = header.at("hidden").get<int>();
    impl->iteration = header.at("iteration").get<int64_t>();
    impl->Init();
    for (const auto& key : header.at("heads").get<std::vector<std::string>>()) {
      // The domain is the key's last field: "family/knob/v1,v2,...".
      const std::string domain = key.substr(key.rfind('/') + 1);
      const int size = static_cast<int>(std::count(domain.begin(), domain.end(), ',')) + 1;
      impl->head_index[key] = static_cast<int>(impl->head_keys.size());
      impl->head_keys.push_back(key);
      impl->net->AddHead(size);
    }
  } catch (const nlohmann::json::exception& e) {
    return Corruption(std::string("policy checkpoint header is incomplete: ") + e.what());
  }
  try {
    torch::serialize::InputArchive archive;
    archive.load_from(blob.data() + eol + 1, blob.size() - eol - 1);
    impl->net->load(archive);
  } catch (const c10::Error& e) {
    return Corruption(std::string("policy checkpoint weights do not load: ") + e.what_without_backtrace());
  } catch (const std::exception& e) {
    return Corruption(std::string("policy checkpoint weights do not load: ") + e.what());
  }
  impl->loaded_version = "rl1-i" + std::to_string(impl->iteration) + "-" + HashBytes(blob).ToHex().substr(0, 8);
  return std::unique_ptr<Agent>(new Agent(std::move(impl)));
}

std::string Agent::version() const {
  if (!impl_->loaded_version.empty()) return impl_->loaded_version;
  return "rl1-i" + std::to_string(impl_->iteration) + "-" + HashBytes(Serialize()).ToHex().substr(0, 8);
}

// ------------------------------------------------------------------- search

void PolicySearcher::BeginEpisode(const ReplayTask& /*task*/, uint64_t seed) { rng_.seed(seed); }

int PolicySearcher::Propose(const ReplayEpisode& episode) {
  auto index = agent_->Propose(episode, greedy_, rng_, revise_after_);
  if (index.ok()) return *index;
  ++fallbacks_;
  RandomSearcher random;
  random.BeginEpisode(episode.task(), rng_());
  return random.Propose(episode);
}

int EnsembleSearcher::Propose(const ReplayEpisode& episode) {
  auto index = Agent::ProposeEnsemble(agents_, episode);
  if (index.ok()) return *index;
  RandomSearcher random;
  random.BeginEpisode(episode.task(), rng_());
  return random.Propose(episode);
}

namespace {

// The best measured point first: the 1.000 row, and a check on the metric.
class OracleSearcher : public Searcher {
 public:
  std::string name() const override { return "oracle"; }
  bool stochastic() const override { return false; }
  int Propose(const ReplayEpisode& episode) override {
    if (!episode.tried(episode.task().oracle_index)) return episode.task().oracle_index;
    for (int i = 0;; ++i) {
      if (!episode.tried(i)) return i;
    }
  }
};

}  // namespace

EvalSummary Evaluate(const std::vector<const ReplayTask*>& tasks, Agent* agent, const std::vector<int>& ks,
                     int seeds, const std::vector<Agent*>& ensemble, int revise_after) {
  EvalSummary s;
  s.ks = ks;
  s.tasks_in_order = tasks;
  s.seeds = seeds;
  ExpertThenRandomSearcher expert;
  RandomSearcher random;
  OracleSearcher oracle;
  s.curves.push_back(RunSearch(expert, tasks, ks, seeds));
  s.curves.push_back(RunSearch(random, tasks, ks, seeds));
  if (agent != nullptr) {
    s.has_policy = true;
    PolicySearcher single(*agent, /*greedy=*/true, revise_after);
    EnsembleSearcher together(ensemble);
    Searcher& policy = ensemble.size() > 1 ? static_cast<Searcher&>(together) : single;
    s.curves.push_back(RunSearch(policy, tasks, ks, seeds));
    const SearchCurve& pc = s.curves.back();
    for (size_t t = 0; t < tasks.size(); ++t) {
      const ReplayTask& task = *tasks[t];
      if (task.expert_index < 0 || pc.first_index[t].empty()) continue;
      ++s.expert_measured;
      FirstTrialDetail d;
      d.task = &task;
      d.policy_index = pc.first_index[t].front();
      d.versus = CompareWithExpert(task, d.policy_index);
      d.beatable = ExpertBeatable(task);
      s.expert_unbeatable += !d.beatable;
      s.policy_beats_expert += d.versus == VersusExpert::kFaster;
      s.policy_ties_expert += d.versus == VersusExpert::kTie;
      s.policy_same_point += d.policy_index == task.expert_index;
      const MeasuredPoint& e = task.points[task.expert_index];
      const double expert_us = e.outcome == Outcome::kVerified ? e.time_us : INFINITY;
      s.policy_faster_raw += pc.first_time_us[t].front() < expert_us;
      s.first_trials.push_back(d);
    }
    // Random search's curve at every k up to the largest, for the trials it needs to match the policy at 16.
    const auto k16 = std::find(ks.begin(), ks.end(), 16);
    if (k16 != ks.end()) {
      const double target = pc.Mean()[static_cast<size_t>(k16 - ks.begin())];
      std::vector<int> every;
      for (int k = 1; k <= ks.back(); ++k) every.push_back(k);
      const auto dense = RunSearch(random, tasks, every, seeds).Mean();
      for (size_t i = 0; i < dense.size(); ++i) {
        if (dense[i] >= target - 1e-12) {
          s.random_trials_to_match_policy_k16 = every[i];
          break;
        }
      }
      if (dense.size() >= 63) s.random_at_k63 = dense[62];
    }
  }
  s.curves.push_back(RunSearch(oracle, tasks, ks, seeds));
  for (const ReplayTask* task : tasks) {
    if (task->oracle_index < 0) continue;
    const double near = task->oracle_us() / 0.95;  // a fraction of the oracle of at least 0.95
    int m = 0;
    for (const MeasuredPoint& p : task->points) m += p.outcome == Outcome::kVerified && p.time_us <= near;
    s.random_trials_within_5pct.push_back((static_cast<double>(task->points.size()) + 1) / (m + 1));
  }
  return s;
}

}  // namespace kjit::policy::learn
