#include "kjit/policy/design_space.h"

#include <algorithm>
#include <set>

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

namespace {

// Calls `visit` on every point of the cross product, in odometer order (last knob fastest).
template <typename Visit>
void ForEachPoint(const Space& space, Visit&& visit) {
  if (space.knobs.empty()) return;
  std::vector<size_t> index(space.knobs.size(), 0);
  while (true) {
    Point p;
    for (size_t k = 0; k < space.knobs.size(); ++k) p[space.knobs[k].name] = space.knobs[k].values[index[k]];
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

}  // namespace

std::vector<Point> ValidPoints(const Family& family, const Problem& problem, const DeviceFacts& device, size_t limit) {
  const Space space = family.MakeSpace(problem, device);
  std::vector<Point> out;
  ForEachPoint(space, [&](const Point& p) {
    if (family.Check(problem, p, device).ok()) out.push_back(p);
    return limit == 0 || out.size() < limit;
  });
  return out;
}

std::vector<Point> PairwiseCover(const Family& family, const Problem& problem, const DeviceFacts& device) {
  const std::vector<Point> valid = ValidPoints(family, problem, device);
  // A "pair" is (knob a = value, knob b = value) with a < b; single values are pairs of a knob with itself.
  using Pair = std::tuple<std::string, int64_t, std::string, int64_t>;
  auto pairs_of = [](const Point& p) {
    std::vector<Pair> out;
    for (auto a = p.begin(); a != p.end(); ++a) {
      for (auto b = a; b != p.end(); ++b) out.emplace_back(a->first, a->second, b->first, b->second);
    }
    return out;
  };
  std::set<Pair> uncovered;
  for (const Point& p : valid) {
    for (const Pair& q : pairs_of(p)) uncovered.insert(q);
  }
  std::vector<Point> chosen;
  std::vector<bool> used(valid.size(), false);
  while (!uncovered.empty()) {
    size_t best = valid.size();
    size_t best_gain = 0;
    for (size_t i = 0; i < valid.size(); ++i) {
      if (used[i]) continue;
      size_t gain = 0;
      for (const Pair& q : pairs_of(valid[i])) gain += uncovered.count(q);
      if (gain > best_gain) {
        best_gain = gain;
        best = i;
      }
    }
    if (best == valid.size()) break;
    used[best] = true;
    for (const Pair& q : pairs_of(valid[best])) uncovered.erase(q);
    chosen.push_back(valid[best]);
  }
  return chosen;
}

Result<Match> FindFamily(const OpKey& key) {
  std::string reasons;
  for (const Family* f : Families()) {
    auto problem = f->Match(key);
    if (problem.ok()) return Match{f, std::move(*problem)};
    const auto ops = f->ops();
    if (key.calls.size() == 1 && std::find(ops.begin(), ops.end(), key.calls[0].op) != ops.end()) {
      reasons += std::string(reasons.empty() ? "" : "; ") + std::string(f->name()) + ": " + problem.status().message();
    }
  }
  return NotFound("no design space serves " + key.ToString() + (reasons.empty() ? "" : " (" + reasons + ")"));
}

}  // namespace kjit::policy
