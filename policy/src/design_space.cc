#include "kjit/policy/design_space.h"

#include <algorithm>
#include <map>
#include <unordered_map>
#include <utility>

namespace kjit::policy {

DeviceFacts DeviceFacts::H200() { return DeviceFacts{}; }

uint64_t Space::size() const {
  uint64_t n = 1;
  for (const Knob& k : knobs) n *= std::max<uint64_t>(k.values.size(), 1);
  return n;
}

std::string PointToString(const Point& point) {
  std::string s;
  for (const auto& [name, value] : point) s += (s.empty() ? "" : " ") + name + "=" + std::to_string(value);
  return s;
}

cache::DesignPoint ToDesignPoint(const std::string& family, const Point& point, const std::string& policy_version) {
  cache::DesignPoint d;
  d.family = family;
  for (const auto& [name, value] : point) d.knobs[name] = std::to_string(value);
  d.policy_version = policy_version;
  return d;
}

OpTraits Family::traits(std::string_view) const { return DefaultOpTraits(); }

void ForEachPoint(const Space& space, const std::function<bool(const Point&)>& visit) {
  if (space.knobs.empty()) return;
  std::vector<size_t> index(space.knobs.size(), 0);
  // One point whose values are rewritten in place: a new map per point (string keys, an allocation
  // per knob) was most of the time of enumerating matmul's space of a million points.
  Point p;
  std::vector<int64_t*> slots;
  for (const Knob& knob : space.knobs) slots.push_back(&p[knob.name]);
  while (true) {
    for (size_t k = 0; k < space.knobs.size(); ++k) *slots[k] = space.knobs[k].values[index[k]];
    if (!visit(p)) return;
    size_t k = space.knobs.size();
    while (k > 0) {
      --k;
      if (++index[k] < space.knobs[k].values.size()) break;
      index[k] = 0;
      if (k == 0) return;
    }
  }
}

std::vector<Point> ValidPoints(const Family& family, const Problem& problem, const DeviceFacts& device, size_t limit) {
  const Space space = family.MakeSpace(problem, device);
  std::vector<Point> out;
  ForEachPoint(space, [&](const Point& p) {
    if (family.Check(problem, p, device).ok()) out.push_back(p);
    return limit == 0 || out.size() < limit;
  });
  return out;
}

std::vector<size_t> PairwiseCoverOf(const std::vector<Point>& valid) {
  // A "pair" is (knob a = value, knob b = value) with a before b in the point's (sorted) knob order; single
  // values are pairs of a knob with itself. Pairs are numbered once, so that the greedy rounds below
  // count integers: with string-keyed pairs, matmul's ~20000 valid points took a minute per key.
  std::map<std::pair<std::string, int64_t>, uint64_t> value_ids;
  std::unordered_map<uint64_t, uint32_t> pair_ids;
  std::vector<std::vector<uint32_t>> pairs_of(valid.size());
  std::vector<uint64_t> values;
  for (size_t i = 0; i < valid.size(); ++i) {
    values.clear();
    for (const auto& [name, value] : valid[i]) {
      values.push_back(value_ids.try_emplace({name, value}, value_ids.size()).first->second);
    }
    for (size_t a = 0; a < values.size(); ++a) {
      for (size_t b = a; b < values.size(); ++b) {
        const uint64_t pair = (values[a] << 32) | values[b];
        pairs_of[i].push_back(pair_ids.try_emplace(pair, static_cast<uint32_t>(pair_ids.size())).first->second);
      }
    }
  }
  std::vector<bool> covered(pair_ids.size(), false);
  size_t uncovered = pair_ids.size();
  std::vector<size_t> chosen;
  std::vector<bool> used(valid.size(), false);
  while (uncovered > 0) {
    size_t best = valid.size();
    size_t best_gain = 0;
    for (size_t i = 0; i < valid.size(); ++i) {
      if (used[i]) continue;
      size_t gain = 0;
      for (uint32_t q : pairs_of[i]) gain += covered[q] ? 0 : 1;
      if (gain > best_gain) {
        best_gain = gain;
        best = i;
      }
    }
    if (best == valid.size()) break;
    used[best] = true;
    for (uint32_t q : pairs_of[best]) {
      if (!covered[q]) {
        covered[q] = true;
        --uncovered;
      }
    }
    chosen.push_back(best);
  }
  return chosen;
}

std::vector<Point> PairwiseCover(const Family& family, const Problem& problem, const DeviceFacts& device) {
  const std::vector<Point> valid = ValidPoints(family, problem, device);
  std::vector<Point> chosen;
  for (size_t i : PairwiseCoverOf(valid)) chosen.push_back(valid[i]);
  return chosen;
}

Result<Match> FindFamily(const OpKey& key) {
  std::string reasons;
  for (const Family* f : Families()) {
    auto problem = f->Match(key);
    if (problem.ok()) return Match{f, std::move(*problem)};
    const auto ops = f->ops();
    // A single call: the reasons of the families that serve its op; a chain: those of the chain families.
    const bool concerned = key.calls.size() == 1
                               ? std::find(ops.begin(), ops.end(), key.calls[0].op) != ops.end()
                               : !f->chain_ops().empty();
    if (concerned) {
      reasons += std::string(reasons.empty() ? "" : "; ") + std::string(f->name()) + ": " + problem.status().message();
    }
  }
  return NotFound("no design space serves " + key.ToString() + (reasons.empty() ? "" : " (" + reasons + ")"));
}

}  // namespace kjit::policy
