#include "kjit/policy/learn/replay.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

namespace kjit::policy::learn {
namespace {

double Log2p(double v) { return std::log2(std::max(v, 0.0) + 1.0); }

// The index of the point's value of `knob` in the knob's domain; -1 if the point has no such knob or a value
// outside the domain.
int ValueIndex(const Knob& knob, const Point& point) {
  auto it = point.find(knob.name);
  if (it == point.end()) return -1;
  auto v = std::find(knob.values.begin(), knob.values.end(), it->second);
  return v == knob.values.end() ? -1 : static_cast<int>(v - knob.values.begin());
}

// Every knob's ValueIndex, in space order; empty if any is -1 (the point is outside the space's domains).
std::vector<int> ValueIndices(const Space& space, const Point& point) {
  std::vector<int> index;
  for (const auto& knob : space.knobs) {
    const int v = ValueIndex(knob, point);
    if (v < 0) return {};
    index.push_back(v);
  }
  return index;
}

// ReplayTask::space_points and space_value_counts, zeroed for the task's space; AddToSpace counts one point.
void ClearSpaceCounts(ReplayTask& task) {
  task.space_points = 0;
  task.space_value_counts.assign(task.space.knobs.size(), {});
  for (size_t k = 0; k < task.space.knobs.size(); ++k) task.space_value_counts[k].assign(task.space.knobs[k].values.size(), 0);
}
void AddToSpace(ReplayTask& task, const std::vector<int>& value_index) {
  ++task.space_points;
  for (size_t k = 0; k < value_index.size(); ++k) ++task.space_value_counts[k][static_cast<size_t>(value_index[k])];
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

const TensorDesc* FirstTensor(const OpCall& call) {
  for (const auto& a : call.args) {
    if (const auto* t = std::get_if<TensorDesc>(&a)) return t;
  }
  return nullptr;
}

int64_t IntArg(const OpCall& call, size_t i, int64_t fallback) {
  if (i < call.args.size()) {
    if (const auto* v = std::get_if<int64_t>(&call.args[i])) return *v;
  }
  return fallback;
}

// The reduction (or scan) each output depends on: its length, how many there are,
// and the stride between its elements (1: along the last dim).
struct ReductionShape {
  double length = 1;
  double count = 1;
  double inner = 1;
};

ReductionShape ReductionOf(const OpCall& call, const TensorDesc& x) {
  ReductionShape r;
  const double numel = static_cast<double>(std::max<int64_t>(x.numel(), 1));
  const int64_t ndim = static_cast<int64_t>(x.sizes.size());
  const std::string& op = call.op;
  if (op == "aten::_softmax" || op == "aten::_log_softmax" || op == "aten::cumsum" || op == "aten::cumprod") {
    int64_t dim = IntArg(call, 1, -1);
    if (dim < 0) dim += ndim;
    if (dim >= 0 && dim < ndim) {
      r.length = static_cast<double>(x.sizes[dim]);
      for (int64_t d = dim + 1; d < ndim; ++d) r.inner *= static_cast<double>(x.sizes[d]);
    }
  } else if (op == "aten::native_layer_norm" || op == "aten::_fused_rms_norm") {
    if (call.args.size() > 1) {
      if (const auto* shape = std::get_if<IntList>(&call.args[1])) {
        for (int64_t s : *shape) r.length *= static_cast<double>(s);
      }
    }
  } else if (op == "aten::native_group_norm") {
    const double n = static_cast<double>(IntArg(call, 3, 1)), c = static_cast<double>(IntArg(call, 4, 1));
    const double hxw = static_cast<double>(IntArg(call, 5, 1)), g = static_cast<double>(IntArg(call, 6, 1));
    r.length = c / std::max(g, 1.0) * hxw;
    r.count = n * g;
    r.inner = hxw;
    return r;
  } else if (op == "aten::native_batch_norm" || op == "aten::cudnn_batch_norm") {
    const bool training = call.args.size() > 5 && std::holds_alternative<bool>(call.args[5]) &&
                          std::get<bool>(call.args[5]);
    const double channels = ndim > 1 ? static_cast<double>(x.sizes[1]) : 1;
    for (int64_t d = 2; d < ndim; ++d) r.inner *= static_cast<double>(x.sizes[d]);
    if (training) {
      r.length = numel / std::max(channels, 1.0);
      r.count = channels;
      return r;
    }
    r.length = 1;  // inference: elementwise with a per-channel scale
  } else if (op == "aten::mm" || op == "aten::bmm") {
    // Each output is a dot product of K terms; there are (batch x) M x N of them, N to a row.
    const TensorDesc* mat2 = call.args.size() > 1 ? std::get_if<TensorDesc>(&call.args[1]) : nullptr;
    if (ndim >= 2 && mat2 != nullptr && !mat2->sizes.empty()) {
      r.length = static_cast<double>(x.sizes.back());
      r.inner = static_cast<double>(mat2->sizes.back());
      r.count = numel / std::max(r.length, 1.0) * r.inner;
      return r;
    }
  } else if (ndim > 0) {
    r.length = static_cast<double>(x.sizes.back());
  }
  r.count = numel / std::max(r.length, 1.0);
  return r;
}

constexpr DType kDTypes[] = {DType::kFloat32, DType::kFloat16, DType::kBFloat16};

std::vector<float> TaskFeatures(const OpKey& key, const Family& family, double floor_us, const DeviceFacts& device) {
  std::vector<float> f;
  const auto& families = Families();
  for (const Family* fam : families) f.push_back(fam == &family ? 1.f : 0.f);
  // Which op of the family (softmax vs log_softmax, cumsum vs cumprod, ...): up to 4 slots.
  const auto ops = family.ops();
  const OpCall& call = key.calls.front();
  for (size_t i = 0; i < 4; ++i) f.push_back(i < ops.size() && ops[i] == call.op ? 1.f : 0.f);
  const TensorDesc* x = FirstTensor(call);
  TensorDesc empty;
  if (x == nullptr) x = &empty;
  for (DType t : kDTypes) f.push_back(x->dtype == t ? 1.f : 0.f);
  const ReductionShape r = ReductionOf(call, *x);
  double bytes = 0;
  int tensors = 0;
  for (const auto& a : call.args) {
    if (const auto* t = std::get_if<TensorDesc>(&a)) {
      bytes += static_cast<double>(t->numel()) * static_cast<double>(DTypeSize(t->dtype));
      ++tensors;
    }
  }
  bytes += static_cast<double>(x->numel()) * static_cast<double>(DTypeSize(x->dtype));  // the output
  const double numel = static_cast<double>(x->numel());
  f.push_back(static_cast<float>(Log2p(numel) / 32));
  f.push_back(static_cast<float>(Log2p(r.length) / 24));
  f.push_back(static_cast<float>(Log2p(r.count) / 24));
  f.push_back(static_cast<float>(Log2p(r.inner) / 24));
  f.push_back(static_cast<float>(x->sizes.size()) / 5.f);
  f.push_back(x->is_contiguous() ? 1.f : 0.f);
  f.push_back(static_cast<float>(x->alignment) / 16.f);
  // Alignment of the reduction length in elements: what vector widths can divide.
  const int64_t len = static_cast<int64_t>(r.length);
  f.push_back(len % 8 == 0 ? 1.f : 0.f);
  f.push_back(len % 2 == 0 ? 1.f : 0.f);
  f.push_back(static_cast<float>(tensors) / 5.f);
  f.push_back(static_cast<float>(Log2p(bytes) / 40));
  // FLOPs: the declared compute floor, else ~5 per element (these families are memory-bound).
  const double declared = FlopsOf(key);  // matrix products: from their shapes
  const double flops = declared > 0 ? declared : 5 * numel;
  f.push_back(static_cast<float>(Log2p(flops) / 40));
  f.push_back(static_cast<float>(Log2p(floor_us) / 16));
  // Bytes per SM and per reduction against the shared memory of one block: what decides register,
  // shared-memory or cluster strategies.
  const double row_bytes = r.length * static_cast<double>(DTypeSize(x->dtype));
  f.push_back(static_cast<float>(std::clamp(std::log2(row_bytes / device.max_shared_bytes_per_block + 1e-9), -20.0,
                                            10.0) / 10));
  f.push_back(static_cast<float>(std::clamp(std::log2(r.count / device.sm_count + 1e-9), -20.0, 20.0) / 10));
  f.push_back(static_cast<float>(device.arch) / 100.f);
  f.push_back(static_cast<float>(device.sm_count) / 132.f);
  f.push_back(static_cast<float>(device.max_shared_bytes_per_block) / 232448.f);
  f.push_back(static_cast<float>(device.max_cluster_size) / 8.f);
  return f;
}

}  // namespace

std::vector<std::string> TaskFeatureNames() {
  std::vector<std::string> names;
  for (const Family* fam : Families()) names.push_back("family=" + std::string(fam->name()));
  for (int i = 0; i < 4; ++i) names.push_back("op#" + std::to_string(i));
  for (DType t : kDTypes) names.push_back("dtype=" + std::string(DTypeName(t)));
  for (const char* n : {"log2 numel", "log2 reduction length", "log2 reduction count", "log2 reduction stride",
                        "ndim", "contiguous", "alignment", "length%8==0", "length%2==0", "tensor args",
                        "log2 bytes", "log2 flops", "log2 floor_us", "log2 row bytes/smem", "log2 rows/SM",
                        "arch", "SMs", "smem/block", "max cluster"}) {
    names.push_back(n);
  }
  return names;
}

int ReplayTask::verified_count() const {
  int n = 0;
  for (const auto& p : points) n += p.outcome == Outcome::kVerified;
  return n;
}

int ReplayTask::IndexOf(const Point& point) const {
  for (size_t i = 0; i < points.size(); ++i) {
    if (points[i].point == point) return static_cast<int>(i);
  }
  return -1;
}

KeySplit SplitOfKeyHash(std::string_view key_hash) {
  if (key_hash.size() < 2 || !std::isxdigit(static_cast<unsigned char>(key_hash[0])) ||
      !std::isxdigit(static_cast<unsigned char>(key_hash[1]))) {
    return KeySplit::kTraining;
  }
  const int first_byte = std::stoi(std::string(key_hash.substr(0, 2)), nullptr, 16);
  if (first_byte % 4 == 0) return KeySplit::kHeldOut;
  return first_byte % 4 == 2 ? KeySplit::kValidation : KeySplit::kTraining;
}

const char* KeySplitName(KeySplit split) {
  switch (split) {
    case KeySplit::kTraining:
      return "training";
    case KeySplit::kValidation:
      return "validation";
    case KeySplit::kHeldOut:
      return "held out";
  }
  return "?";
}

bool IsHeldOut(const ReplayTask& task) { return SplitOfKeyHash(task.key_hash) == KeySplit::kHeldOut; }

bool IsValidation(const ReplayTask& task) { return SplitOfKeyHash(task.key_hash) == KeySplit::kValidation; }

std::string DefaultDatasetDirectory() {
  if (const char* env = std::getenv("KJIT_DATASETS"); env != nullptr && *env != '\0') return env;
  // An installed kjit (cmake --install): <prefix>/bin/kjit-policy and <prefix>/share/kjit/datasets.
  std::error_code error;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", error);
  if (!error) {
    const auto installed = self.parent_path().parent_path() / "share" / "kjit" / "datasets";
    if (std::filesystem::is_directory(installed, error)) return installed.string();
  }
  return KJIT_SOURCE_DIR "/policy/datasets";
}

Result<std::vector<std::string>> DatasetFiles(const std::string& directory) {
  std::error_code ec;
  std::vector<std::string> files;
  for (const auto& entry : std::filesystem::directory_iterator(directory, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.ends_with("-h200.jsonl")) files.push_back(entry.path().string());
  }
  if (ec) return IOError("cannot list " + directory + ": " + ec.message());
  if (files.empty()) return NotFound("no *-h200.jsonl datasets in " + directory);
  std::sort(files.begin(), files.end());
  return files;
}

namespace {

struct Row {
  Point point;
  Outcome outcome;
  bool screened;
  double median_us, baseline_us, floor_us;
  double spread_us;  // interquartile range of the kernel's timed runs (0 when the row has none)
  int codegen;
};

struct KeyRows {
  std::string family, key_text;
  std::vector<Row> rows;
};

}  // namespace

Result<std::vector<ReplayTask>> LoadDatasets(const std::vector<std::string>& files, const DeviceFacts& device,
                                             DatasetReport* report_out, const std::vector<std::string>& extra_rows) {
  DatasetReport report;
  std::map<std::string, KeyRows> by_key;  // key hash -> rows; ordered, so tasks come out in a fixed order
  // Every file, then the extra rows (named "(extra rows)" in errors).
  for (size_t source = 0; source <= files.size(); ++source) {
    const bool extra = source == files.size();
    const std::string file = extra ? std::string("(extra rows)") : files[source];
    std::ifstream in;
    if (!extra) {
      in.open(file);
      if (!in) return IOError("cannot read " + file);
      ++report.files;
    }
    std::string line;
    int line_no = 0;
    size_t next_extra = 0;
    auto next_line = [&]() -> bool {
      if (!extra) return static_cast<bool>(std::getline(in, line));
      if (next_extra >= extra_rows.size()) return false;
      line = extra_rows[next_extra++];
      return true;
    };
    while (next_line()) {
      ++line_no;
      if (line.empty()) continue;
      ++report.rows;
      try {
        const auto j = nlohmann::json::parse(line);
        Row r;
        for (const auto& [k, v] : j.at("point").items()) r.point[k] = v.get<int64_t>();
        const std::string outcome = j.at("outcome").get<std::string>();
        r.screened = outcome == "screened";
        auto parsed = ParseOutcome(r.screened ? "verified" : outcome);
        if (!parsed.ok() || !IsTrial(*parsed)) {
          ++report.rows_not_trials;
          continue;
        }
        r.outcome = *parsed;
        r.median_us = j.value("median_us", 0.0);
        r.spread_us = j.value("spread_us", 0.0);
        r.baseline_us = j.value("baseline_us", 0.0);
        r.floor_us = j.value("floor_us", 0.0);
        r.codegen = j.value("codegen", 0);
        auto& kr = by_key[j.at("key").get<std::string>()];
        kr.family = j.at("family").get<std::string>();
        kr.key_text = j.at("key_text").get<std::string>();
        kr.rows.push_back(std::move(r));
      } catch (const nlohmann::json::exception& e) {
        return InvalidArgument(file + ":" + std::to_string(line_no) + ": " + e.what());
      }
    }
  }
  report.keys = static_cast<int>(by_key.size());

  std::vector<ReplayTask> tasks;
  for (auto& [hash, kr] : by_key) {
    auto skip = [&](const std::string& why) { report.skipped.push_back(kr.key_text + " (" + hash + "): " + why); };
    auto key = ParseKeyText(kr.key_text);
    if (!key.ok()) {
      skip(key.status().message());
      continue;
    }
    if (key->Hash().ToHex() != hash) {
      skip("the key text does not read back to the key's hash");
      continue;
    }
    auto match = FindFamily(*key);
    if (!match.ok()) {
      skip("no family serves it: " + match.status().message());
      continue;
    }
    if (match->family->name() != kr.family) {
      skip("dataset says family " + kr.family + ", the registry " + std::string(match->family->name()));
      continue;
    }
    ReplayTask task;
    task.family_name = kr.family;
    task.family = match->family;
    task.problem = std::shared_ptr<const Problem>(std::move(match->problem));
    task.key = *key;
    task.key_hash = hash;
    task.key_text = kr.key_text;
    task.space = task.family->MakeSpace(*task.problem, device);

    int newest = 0;
    for (const auto& r : kr.rows) newest = std::max(newest, r.codegen);
    task.codegen = newest;
    task.stale_codegen = newest < task.family->codegen_version();

    // Merge rows by point.
    std::map<Point, std::vector<const Row*>> by_point;
    std::vector<double> baselines, floors;
    for (const auto& r : kr.rows) {
      if (r.codegen != newest) {
        ++report.rows_older_codegen;
        continue;
      }
      // Knobs added since the row was measured take the value they had in effect.
      Point point = r.point;
      for (const auto& [name, value] : task.space.absent_as) point.emplace(name, value);
      by_point[point].push_back(&r);
      if (r.outcome == Outcome::kVerified && r.baseline_us > 0) baselines.push_back(r.baseline_us);
      if (r.floor_us > 0) floors.push_back(r.floor_us);
    }
    task.baseline_us = Median(baselines);
    task.floor_us = Median(floors);
    if (task.baseline_us <= 0) {
      skip("no timed row (no baseline)");
      continue;
    }
    for (const auto& [point, rows] : by_point) {
      if (!task.family->Check(*task.problem, point, device).ok()) {
        ++report.points_invalid_now;
        continue;
      }
      MeasuredPoint mp;
      mp.point = point;
      // Knob values to domain indices; a point outside the domains (or with knobs the space lacks) is invalid today.
      mp.value_index = ValueIndices(task.space, point);
      if (point.size() != task.space.knobs.size() || mp.value_index.empty()) {
        ++report.points_invalid_now;
        continue;
      }
      std::vector<double> verified_ratio, screened_ratio, verified_spread, screened_spread;
      for (const Row* r : rows) {
        if (r->outcome != Outcome::kVerified) {
          mp.outcome = r->outcome;
        } else if (r->baseline_us > 0 && r->median_us > 0) {
          (r->screened ? screened_ratio : verified_ratio).push_back(r->median_us / r->baseline_us);
          (r->screened ? screened_spread : verified_spread).push_back(std::max(r->spread_us, 0.0) / r->baseline_us);
        }
      }
      if (mp.outcome == Outcome::kVerified) {
        mp.fully_verified = !verified_ratio.empty();
        const auto& ratios = mp.fully_verified ? verified_ratio : screened_ratio;
        if (ratios.empty()) continue;  // verified without a time: nothing to replay
        mp.time_us = Median(ratios) * task.baseline_us;
        mp.spread_us = Median(mp.fully_verified ? verified_spread : screened_spread) * task.baseline_us;
      }
      task.points.push_back(std::move(mp));
    }
    if (task.points.empty()) {
      skip("no measured point is valid today");
      continue;
    }
    const Point expert = task.family->ExpertDefault(*task.problem, device);
    task.expert_index = task.IndexOf(expert);
    for (const auto& knob : task.space.knobs) task.expert_values.push_back(ValueIndex(knob, expert));
    for (size_t i = 0; i < task.points.size(); ++i) {
      const auto& p = task.points[i];
      if (p.outcome == Outcome::kVerified &&
          (task.oracle_index < 0 || p.time_us < task.points[task.oracle_index].time_us)) {
        task.oracle_index = static_cast<int>(i);
      }
    }
    if (task.oracle_index < 0) {
      skip("no measured point verified");
      continue;
    }
    task.features = TaskFeatures(task.key, *task.family, task.floor_us, device);
    CountSpace(task, device);
    report.stale_codegen_tasks += task.stale_codegen;
    tasks.push_back(std::move(task));
  }
  std::stable_sort(tasks.begin(), tasks.end(),
                   [](const ReplayTask& a, const ReplayTask& b) { return a.family_name < b.family_name; });
  report.tasks = static_cast<int>(tasks.size());
  if (report_out != nullptr) *report_out = std::move(report);
  return tasks;
}

// ------------------------------------------------------------------ episodes

ReplayEpisode::ReplayEpisode(const ReplayTask& task, int budget)
    : task_(&task), budget_(budget), tried_(task.points.size(), false) {}

bool ReplayEpisode::done() const {
  return static_cast<int>(history_.size()) >= budget_ || history_.size() >= task_->points.size();
}

Result<TrialResult> ReplayEpisode::Trial(int index) {
  if (index < 0 || index >= static_cast<int>(task_->points.size())) {
    return InvalidArgument("point index " + std::to_string(index) + " is not a measured point of the task");
  }
  const MeasuredPoint& p = task_->points[index];
  return Observe(index, p.outcome, p.time_us);
}

Result<TrialResult> ReplayEpisode::Observe(int index, Outcome outcome, double time_us) {
  if (done()) return InvalidArgument("the episode is over");
  if (index < 0 || index >= static_cast<int>(task_->points.size())) {
    return InvalidArgument("point index " + std::to_string(index) + " is not a point of the task");
  }
  if (tried_[index]) return InvalidArgument("point index " + std::to_string(index) + " was already tried");
  if (outcome == Outcome::kVerified && !(time_us > 0)) return InvalidArgument("a verified trial needs a time");
  TrialResult r;
  r.index = index;
  r.outcome = outcome;
  TrialOutcome trial;
  trial.outcome = outcome;
  if (outcome == Outcome::kVerified) {
    r.time_us = time_us;
    r.roofline = task_->floor_us > 0 ? task_->floor_us / time_us : 0;
    trial.candidate_us = time_us;
    trial.baseline_us = task_->baseline_us;
  }
  r.reward = Reward(trial);
  tried_[index] = true;
  history_.push_back(r);
  if (outcome == Outcome::kVerified && time_us < best_time_us_) {
    best_time_us_ = time_us;
    best_reward_ = r.reward;
    best_index_ = index;
  }
  return r;
}

// CountSpace: products of the knobs' domains up to this size are enumerated; larger ones sampled.
constexpr double kCountSpaceExactly = 1 << 18;
constexpr int64_t kCountSpaceSamples = 1 << 15;

Result<ReplayTask> MakeLiveTask(const OpKey& key, const DeviceFacts& device, double baseline_us, double floor_us) {
  KJIT_ASSIGN_OR_RETURN(Match match, FindFamily(key));
  ReplayTask task;
  task.family = match.family;
  task.family_name = std::string(match.family->name());
  task.problem = std::shared_ptr<const Problem>(std::move(match.problem));
  task.key = key;
  task.key_hash = key.Hash().ToHex();
  task.key_text = key.ToString();
  task.codegen = task.family->codegen_version();
  task.space = task.family->MakeSpace(*task.problem, device);
  task.baseline_us = baseline_us;
  task.floor_us = floor_us;
  for (Point& point : ValidPoints(*task.family, *task.problem, device)) {
    MeasuredPoint mp;
    mp.value_index = ValueIndices(task.space, point);
    if (mp.value_index.empty()) continue;
    mp.point = std::move(point);
    task.points.push_back(std::move(mp));
  }
  if (task.points.empty()) return NotFound("no valid point for " + task.key_text);
  const Point expert = task.family->ExpertDefault(*task.problem, device);
  task.expert_index = task.IndexOf(expert);
  for (const auto& knob : task.space.knobs) task.expert_values.push_back(ValueIndex(knob, expert));
  task.features = TaskFeatures(task.key, *task.family, task.floor_us, device);
  ClearSpaceCounts(task);
  for (const MeasuredPoint& mp : task.points) AddToSpace(task, mp.value_index);
  return task;
}

void CountSpace(ReplayTask& task, const DeviceFacts& device) {
  const size_t knobs = task.space.knobs.size();
  ClearSpaceCounts(task);
  double product = 1;
  for (const auto& knob : task.space.knobs) product *= static_cast<double>(knob.values.size());
  if (product <= kCountSpaceExactly) {
    for (const Point& point : ValidPoints(*task.family, *task.problem, device)) {
      // As MakeLiveTask: a point outside the space's domains is not in its action set.
      if (const std::vector<int> index = ValueIndices(task.space, point); !index.empty()) AddToSpace(task, index);
    }
    return;
  }
  // Larger products (matmul's, up to millions of points: Check on each took ~2 s a key) are sampled: uniform
  // points of the product, seeded by the key, their valid share scaled to the product. The state reads the
  // counts as shares of the untried points; with ~2% of matmul's product valid, ~500 samples are, so a share
  // is off by a few hundredths (tests/policy/replay_test.cc, CountSpaceAgreesWithTheLiveActionSet): a small
  // difference between replay and online that exact counts would remove at ~100 s a dataset load.
  uint64_t seed = 0;
  for (char c : task.key_hash.substr(0, 16)) seed = seed * 131 + static_cast<unsigned char>(c);
  std::mt19937_64 rng(seed);
  std::vector<std::vector<int64_t>> hits(knobs);
  for (size_t k = 0; k < knobs; ++k) hits[k].assign(task.space.knobs[k].values.size(), 0);
  int64_t valid = 0;
  Point point;
  std::vector<size_t> index(knobs);
  for (int64_t s = 0; s < kCountSpaceSamples; ++s) {
    for (size_t k = 0; k < knobs; ++k) {
      const auto& values = task.space.knobs[k].values;
      index[k] = static_cast<size_t>(rng() % values.size());
      point[task.space.knobs[k].name] = values[index[k]];
    }
    if (!task.family->Check(*task.problem, point, device).ok()) continue;
    ++valid;
    for (size_t k = 0; k < knobs; ++k) ++hits[k][index[k]];
  }
  const double scale = product / static_cast<double>(kCountSpaceSamples);
  task.space_points = std::max<int64_t>(1, std::llround(static_cast<double>(valid) * scale));
  for (size_t k = 0; k < knobs; ++k) {
    for (size_t v = 0; v < hits[k].size(); ++v) {
      task.space_value_counts[k][v] = std::llround(static_cast<double>(hits[k][v]) * scale);
    }
  }
}

// ----------------------------------------------------------------- searchers

void RandomSearcher::BeginEpisode(const ReplayTask& /*task*/, uint64_t seed) { rng_.seed(seed); }

int RandomSearcher::Propose(const ReplayEpisode& episode) {
  std::uniform_int_distribution<int> pick(0, episode.untried_count() - 1);
  int nth = pick(rng_);
  for (int i = 0; i < static_cast<int>(episode.task().points.size()); ++i) {
    if (episode.tried(i)) continue;
    if (nth-- == 0) return i;
  }
  return -1;  // unreachable while the episode is not done
}

void ExpertThenRandomSearcher::BeginEpisode(const ReplayTask& task, uint64_t seed) {
  random_.BeginEpisode(task, seed);
}

int ExpertThenRandomSearcher::Propose(const ReplayEpisode& episode) {
  const int expert = episode.task().expert_index;
  expert_last_ = expert >= 0 && !episode.tried(expert);
  if (expert_last_) return expert;
  return random_.Propose(episode);
}

void CoverThenClimbSearcher::BeginEpisode(const ReplayTask& task, uint64_t seed) {
  task_ = &task;
  random_.BeginEpisode(task, seed);
  by_values_.clear();
  std::vector<Point> points;
  points.reserve(task.points.size());
  for (size_t i = 0; i < task.points.size(); ++i) {
    by_values_.emplace(task.points[i].value_index, static_cast<int>(i));
    points.push_back(task.points[i].point);
  }
  batch_.clear();
  if (task.expert_index >= 0) batch_.push_back(task.expert_index);
  for (size_t i : PairwiseCoverOf(points)) {
    if (static_cast<int>(i) != task.expert_index) batch_.push_back(static_cast<int>(i));
  }
  next_ = 0;
  round_ = 0;
  climbing_done_ = false;
  phase_ = "cover";
}

void CoverThenClimbSearcher::Refill(const ReplayEpisode& episode) {
  while (next_ < batch_.size() && episode.tried(batch_[next_])) ++next_;
  if (next_ < batch_.size() || climbing_done_) return;
  // A climb round: the one-knob changes of the fastest verified points, in knob then value order.
  std::vector<const TrialResult*> verified;
  for (const TrialResult& t : episode.history()) {
    if (t.outcome == Outcome::kVerified) verified.push_back(&t);
  }
  std::stable_sort(verified.begin(), verified.end(),
                   [](const TrialResult* a, const TrialResult* b) { return a->time_us < b->time_us; });
  batch_.clear();
  next_ = 0;
  if (round_ < climb_rounds_) {
    std::set<int> queued;
    for (size_t top = 0; top < std::min<size_t>(static_cast<size_t>(std::max(climb_from_, 0)), verified.size()); ++top) {
      const std::vector<int>& from = task_->points[verified[top]->index].value_index;
      for (size_t k = 0; k < task_->space.knobs.size() && k < from.size(); ++k) {
        for (size_t v = 0; v < task_->space.knobs[k].values.size(); ++v) {
          std::vector<int> q = from;
          q[k] = static_cast<int>(v);
          const auto it = by_values_.find(q);
          if (it != by_values_.end() && !episode.tried(it->second) && queued.insert(it->second).second) {
            batch_.push_back(it->second);
          }
        }
      }
    }
  }
  if (batch_.empty()) {
    climbing_done_ = true;
    return;
  }
  ++round_;
  phase_ = "climb";
}

std::vector<int> CoverThenClimbSearcher::ProposeBatch(const ReplayEpisode& episode) {
  Refill(episode);
  std::vector<int> out;
  for (size_t i = next_; i < batch_.size(); ++i) {
    if (!episode.tried(batch_[i])) out.push_back(batch_[i]);
  }
  return out;
}

int CoverThenClimbSearcher::Propose(const ReplayEpisode& episode) {
  Refill(episode);
  if (next_ < batch_.size()) {
    const int index = batch_[next_++];
    if (round_ == 0) phase_ = index == task_->expert_index ? "expert-default" : "cover";
    return index;
  }
  phase_ = "random";
  return random_.Propose(episode);
}

std::vector<double> SearchCurve::Mean() const {
  std::vector<double> m(ks.size(), 0.0);
  for (const auto& row : fraction) {
    for (size_t k = 0; k < ks.size(); ++k) m[k] += row[k];
  }
  for (auto& v : m) v /= std::max<size_t>(fraction.size(), 1);
  return m;
}

SearchCurve RunSearch(Searcher& searcher, const std::vector<const ReplayTask*>& tasks, const std::vector<int>& ks,
                      int seeds, uint64_t seed_base) {
  SearchCurve curve;
  curve.name = searcher.name();
  curve.ks = ks;
  const int max_k = ks.empty() ? 0 : *std::max_element(ks.begin(), ks.end());
  const int runs = searcher.stochastic() ? seeds : 1;
  for (const ReplayTask* task : tasks) {
    std::vector<double> frac(ks.size(), 0.0);
    std::vector<double> firsts;
    std::vector<int> first_indices;
    for (int s = 0; s < runs; ++s) {
      // The seed depends on the task and the run only, so adding tasks changes no other task's result.
      const uint64_t seed = seed_base * 1000003ull + std::hash<std::string>{}(task->key_hash) + static_cast<uint64_t>(s);
      searcher.BeginEpisode(*task, seed);
      ReplayEpisode episode(*task, max_k);
      std::vector<double> best_after;  // best time after trial t+1
      while (!episode.done()) {
        const int index = searcher.Propose(episode);
        auto r = episode.Trial(index);
        if (!r.ok()) {
          std::fprintf(stderr, "kjit policy: %s proposed a bad point on %s: %s\n", searcher.name().c_str(),
                       task->key_text.c_str(), r.status().ToString().c_str());
          break;
        }
        if (best_after.empty()) {
          firsts.push_back(r->outcome == Outcome::kVerified ? r->time_us : INFINITY);
          first_indices.push_back(index);
        }
        best_after.push_back(episode.best_time_us());
      }
      for (size_t k = 0; k < ks.size(); ++k) {
        if (best_after.empty()) continue;
        const double best = best_after[std::min<size_t>(ks[k], best_after.size()) - 1];
        frac[k] += std::isfinite(best) ? task->oracle_us() / best : 0.0;
      }
    }
    for (auto& v : frac) v /= runs;
    curve.fraction.push_back(std::move(frac));
    curve.first_time_us.push_back(std::move(firsts));
    curve.first_index.push_back(std::move(first_indices));
  }
  return curve;
}

const char* VersusExpertName(VersusExpert v) {
  switch (v) {
    case VersusExpert::kFaster: return "faster";
    case VersusExpert::kTie: return "tie";
    case VersusExpert::kSlower: return "slower";
  }
  return "?";
}

VersusExpert CompareWithExpert(const ReplayTask& task, int index) {
  const MeasuredPoint& e = task.points[task.expert_index];
  const MeasuredPoint& p = task.points[index];
  const bool ev = e.outcome == Outcome::kVerified, pv = p.outcome == Outcome::kVerified;
  if (index == task.expert_index || (!ev && !pv)) return VersusExpert::kTie;
  if (!ev) return VersusExpert::kFaster;
  if (!pv) return VersusExpert::kSlower;
  return CompareTimes(p.time_us, p.spread_us, e.time_us, e.spread_us);
}

VersusExpert CompareTimes(double median_us, double spread_us, double expert_us, double expert_spread_us) {
  if (Accept(median_us, spread_us, expert_us, expert_spread_us)) return VersusExpert::kFaster;
  if (Accept(expert_us, expert_spread_us, median_us, spread_us)) return VersusExpert::kSlower;
  return VersusExpert::kTie;
}

bool ExpertBeatable(const ReplayTask& task) {
  for (size_t i = 0; i < task.points.size(); ++i) {
    if (CompareWithExpert(task, static_cast<int>(i)) == VersusExpert::kFaster) return true;
  }
  return false;
}

std::string EvalSummary::FirstTrialMarkdown() const {
  std::ostringstream out;
  out << "| key | family | points | expert us (iqr) | oracle us | first proposal us (iqr) | vs expert | beatable |\n"
         "|---|---|---:|---:|---:|---:|---|---|\n";
  char buf[512];
  auto time = [](const MeasuredPoint& p) {
    char b[64];
    if (p.outcome == Outcome::kVerified) {
      std::snprintf(b, sizeof b, "%.2f (%.2f)", p.time_us, p.spread_us);
    } else {
      std::snprintf(b, sizeof b, "%s", std::string(OutcomeName(p.outcome)).c_str());
    }
    return std::string(b);
  };
  for (const auto& d : first_trials) {
    const ReplayTask& t = *d.task;
    // How many measured points win: where only the oracle or a handful do, a first proposal wins only by
    // hitting one of those few, not by being near the best.
    int winners = 0;
    for (size_t i = 0; i < t.points.size(); ++i) {
      winners += CompareWithExpert(t, static_cast<int>(i)) == VersusExpert::kFaster;
    }
    const std::string beatable = d.beatable ? "yes (" + std::to_string(winners) + (winners == 1 ? " point" : " points") +
                                                  " faster)"
                                            : std::string("no (expert ~ oracle)");
    const std::string first = d.policy_index < 0 ? std::string("-")
                              : d.policy_index == t.expert_index
                                  ? "= expert"
                                  : time(t.points[d.policy_index]);
    std::snprintf(buf, sizeof buf, "| `%s` | %s | %zu | %s | %.2f | %s | %s | %s |\n", t.key_text.c_str(),
                  t.family_name.c_str(), t.points.size(), time(t.points[t.expert_index]).c_str(), t.oracle_us(),
                  first.c_str(), VersusExpertName(d.versus), beatable.c_str());
    out << buf;
  }
  return out.str();
}

std::string EvalSummary::ShortfallMarkdown(double below) const {
  // curves: expert default, random search, the policy, the oracle (Evaluate's order).
  if (!has_policy || curves.size() < 3 || tasks_in_order.size() != curves[2].fraction.size()) return "";
  const SearchCurve* random = &curves[1];
  const SearchCurve* policy = &curves[2];
  auto at = [&](const SearchCurve& c, size_t t, int k) {
    const auto it = std::find(c.ks.begin(), c.ks.end(), k);
    return it == c.ks.end() ? -1.0 : c.fraction[t][static_cast<size_t>(it - c.ks.begin())];
  };
  std::ostringstream out;
  out << "| key | family | points | policy k=4 | k=16 | k=64 | random k=4 | k=16 | k=64 |\n"
         "|---|---|---:|---:|---:|---:|---:|---:|---:|\n";
  char buf[768];
  int rows = 0;
  for (size_t t = 0; t < tasks_in_order.size(); ++t) {
    if (at(*policy, t, 16) >= below) continue;
    const ReplayTask& task = *tasks_in_order[t];
    std::snprintf(buf, sizeof buf, "| `%s` | %s | %zu | %.3f | %.3f | %.3f | %.3f | %.3f | %.3f |\n",
                  task.key_text.c_str(), task.family_name.c_str(), task.points.size(), at(*policy, t, 4),
                  at(*policy, t, 16), at(*policy, t, 64), at(*random, t, 4), at(*random, t, 16), at(*random, t, 64));
    out << buf;
    ++rows;
  }
  return rows == 0 ? "" : out.str();
}

std::string EvalSummary::Markdown() const {
  std::ostringstream out;
  out << "Best time found within k trials as a fraction of the oracle's (1.000 = the best measured point), mean over "
      << tasks_in_order.size() << " " << split << " keys";
  if (seeds > 1) out << " and " << seeds << " seeds (stochastic searchers)";
  out << ".\n\n| searcher |";
  for (int k : ks) out << " k=" << k << " |";
  out << "\n|---|";
  for (size_t i = 0; i < ks.size(); ++i) out << "---:|";
  out << "\n";
  char buf[32];
  for (const auto& c : curves) {
    out << "| " << c.name << " |";
    for (double v : c.Mean()) {
      std::snprintf(buf, sizeof buf, " %.3f |", v);
      out << buf;
    }
    out << "\n";
  }
  if (has_policy) {
    out << "\nk=1 against the expert default (keys whose expert point was measured: " << expert_measured
        << "; faster = beyond the noise, as the cache accepts a kernel): policy faster on " << policy_beats_expert
        << ", tied on " << policy_ties_expert << " (the expert default itself on " << policy_same_point
        << "), slower on " << expert_measured - policy_beats_expert - policy_ties_expert << ". Keys where no measured "
        << "point beats the expert default: " << expert_unbeatable << " (so at most "
        << expert_measured - expert_unbeatable << " can be won); median strictly below the expert's, noise ignored: "
        << policy_faster_raw << ".\n";
  }
  // The trials random search needs is measured against the policy at k=16 only.
  if (has_policy && std::find(ks.begin(), ks.end(), 16) != ks.end()) {
    if (random_trials_to_match_policy_k16 > 0) {
      std::snprintf(buf, sizeof buf, "%.1fx", random_trials_to_match_policy_k16 / 16.0);
      out << "Random search reaches the policy's k=16 fraction at k=" << random_trials_to_match_policy_k16 << " ("
          << buf << " the trials).\n";
    } else {
      out << "Random search does not reach the policy's k=16 fraction within k=" << ks.back() << ".\n";
    }
    if (random_at_k63 > 0) {
      std::snprintf(buf, sizeof buf, "%.3f", random_at_k63);
      out << "4x the trials would need the policy's k=16 fraction above random search's at k=63: " << buf << ".\n";
    }
  }
  if (!random_trials_within_5pct.empty()) {
    std::vector<double> e = random_trials_within_5pct;
    std::sort(e.begin(), e.end());
    const auto under = [&](double x) { return std::lower_bound(e.begin(), e.end(), x) - e.begin(); };
    const double median = e.size() % 2 ? e[e.size() / 2] : (e[e.size() / 2 - 1] + e[e.size() / 2]) / 2;
    std::snprintf(buf, sizeof buf, "%.1f", median);
    out << "Random search's expected trials to come within 5% of the oracle ((n + 1) / (m + 1): n measured points, m "
        << "of them within 5%), over " << e.size() << " keys: median " << buf << "; under 2 on " << under(2.0)
        << ", under 4 on " << under(4.0) << " (where no searcher can need 4x fewer), under 16 on " << under(16.0)
        << ".\n";
  }
  return out.str();
}

}  // namespace kjit::policy::learn
