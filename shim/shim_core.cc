#include "shim_core.h"

#include <tbb/concurrent_hash_map.h>

#include <algorithm>
#include <fstream>
#include <cstdio>
#include <map>

#include "kjit/op_limits.h"

namespace kjit::shim {
namespace {

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

}  // namespace

std::vector<std::string> ParseOpList(std::string_view value, std::vector<std::string>* unknown) {
  std::vector<bool> wanted(std::size(kInterceptedOps), false);
  while (true) {
    const size_t comma = value.find(',');
    std::string_view name = Trim(value.substr(0, comma));
    if (name.starts_with("aten::")) name.remove_prefix(6);
    if (!name.empty()) {
      const OpName want = SplitOpName(name);
      const bool any_overload = name.find('.') == std::string_view::npos;
      const std::string_view overload = want.overload == "default" ? std::string_view() : want.overload;
      const bool valid = any_overload || !want.overload.empty();  // "amax." names nothing
      bool found = false;
      for (size_t i = 0; valid && i < std::size(kInterceptedOps); ++i) {
        const OpName op = SplitOpName(kInterceptedOps[i]);
        if (op.name == want.name && (any_overload || op.overload == overload)) wanted[i] = found = true;
      }
      if (!found && unknown != nullptr) unknown->emplace_back(name);
    }
    if (comma == std::string_view::npos) break;
    value.remove_prefix(comma + 1);
  }
  std::vector<std::string> ops;
  for (size_t i = 0; i < wanted.size(); ++i) {
    if (wanted[i]) ops.emplace_back(kInterceptedOps[i]);
  }
  return ops;
}

bool CudnnConvMayBeDepthwise(std::span<const int64_t> input_sizes, std::span<const int64_t> weight_sizes,
                             int64_t groups) {
  if (input_sizes.size() != 4 || weight_sizes.size() != 4) return false;
  const int64_t c = input_sizes[1];
  if (c < 2 || groups != c) return false;
  if (weight_sizes[0] != c || weight_sizes[1] != 1) return false;
  return std::all_of(input_sizes.begin(), input_sizes.end(), [](int64_t n) { return n > 0; });
}

bool ConvBackwardMayBeDepthwise(std::span<const int64_t> input_sizes, std::span<const int64_t> weight_sizes,
                                int64_t groups, bool transposed) {
  const size_t rank = input_sizes.size();
  if (transposed || (rank != 3 && rank != 4) || weight_sizes.size() != rank) return false;
  const int64_t c = input_sizes[1];
  if (c < 2 || groups != c) return false;
  if (weight_sizes[0] != c || weight_sizes[1] != 1) return false;
  return std::all_of(input_sizes.begin(), input_sizes.end(), [](int64_t n) { return n > 0; });
}

bool SmallMatmulMayBeServed(bool batched, DType dtype, MatmulOperand self, MatmulOperand mat2) {
  const size_t rank = batched ? 3 : 2;
  if (self.sizes.size() != rank || mat2.sizes.size() != rank || self.strides.size() != rank ||
      mat2.strides.size() != rank) {
    return false;
  }
  const size_t o = batched ? 1 : 0;
  const int64_t k = self.sizes[o + 1];
  if (k > MatmulMaxK(dtype)) return false;  // also every dtype the family does not serve (limit 0)
  if (mat2.sizes[o] != k || (batched && mat2.sizes[0] != self.sizes[0])) return false;  // PyTorch rejects these
  for (const MatmulOperand& x : {self, mat2}) {
    for (size_t i = 0; i < rank; ++i) {
      if (x.sizes[i] <= 0 || x.strides[i] < 0) return false;
    }
  }
  return true;
}

Settings ReadSettings(const std::function<const char*(const char*)>& getenv) {
  Settings s;
  auto set = [&](const char* name) -> std::optional<std::string_view> {
    const char* v = getenv(name);
    if (v == nullptr || *v == '\0') return std::nullopt;
    return std::string_view(v);
  };
  s.disabled = set("KJIT_DISABLE").value_or("0") != "0";
  s.log = set("KJIT_LOG").value_or("0") != "0";
  s.passthrough = set("KJIT_PASSTHROUGH").value_or("0") != "0";
  if (auto profile = set("KJIT_PROFILE"); profile && *profile != "0") {
    s.profile = true;
    if (*profile != "1") s.profile_path = std::string(*profile);
  }
  if (auto fusion = set("KJIT_FUSION")) {
    if (*fusion == "record" || *fusion == "1") {
      s.fusion_record = true;
    } else if (*fusion == "serve") {
      s.fusion_record = true;
      s.fusion_serve = true;
    } else if (*fusion != "0" && *fusion != "off") {
      s.unknown_fusion = std::string(*fusion);
    }
  }
  if (auto ops = set("KJIT_OPS")) {
    s.ops = ParseOpList(*ops, &s.unknown_ops);
  } else {
    for (std::string_view op : kInterceptedOps) s.ops.emplace_back(op);
  }
  // The chains' ops are wrapped only while chains are recorded: otherwise every elementwise call of the program
  // would pass through a wrapper for nothing.
  if (!s.fusion_record) {
    std::erase_if(s.ops, [](const std::string& op) { return PreFilterFor(op) == PreFilter::kChainMember; });
  }
  return s;
}

std::string_view EntryStateName(EntryState state) {
  switch (state) {
    case EntryState::kUnknown: return "unknown";
    case EntryState::kNegative: return "negative";
    case EntryState::kLoaded: return "loaded";
    case EntryState::kFailed: return "failed";
  }
  return "?";
}

bool Entry::Transition(EntryState from, EntryState to) {
  return state_.compare_exchange_strong(from, to, std::memory_order_acq_rel, std::memory_order_acquire);
}

bool Entry::ResolveNegative(std::vector<OutputLayout> outputs) {
  std::lock_guard lock(mutex_);
  if (state() != EntryState::kUnknown) return false;
  outputs_ = std::move(outputs);  // published by the release in Transition
  return Transition(EntryState::kUnknown, EntryState::kNegative);
}

bool Entry::ResolveLoaded(std::vector<OutputLayout> outputs, std::unique_ptr<LoadedKernel> kernel) {
  std::lock_guard lock(mutex_);
  if (state() != EntryState::kUnknown || kernel == nullptr) return false;
  outputs_ = std::move(outputs);
  kernel_.store(kernel.get(), std::memory_order_release);
  kernels_.push_back(std::move(kernel));
  return Transition(EntryState::kUnknown, EntryState::kLoaded);
}

bool Entry::Swap(std::unique_ptr<LoadedKernel> kernel) {
  std::lock_guard lock(mutex_);
  const EntryState now = state();
  if ((now != EntryState::kNegative && now != EntryState::kLoaded) || kernel == nullptr) return false;
  // The pointer first, then the state: a reader that sees kLoaded sees a kernel.
  kernel_.store(kernel.get(), std::memory_order_release);
  kernels_.push_back(std::move(kernel));
  return now == EntryState::kLoaded || Transition(EntryState::kNegative, EntryState::kLoaded);
}

bool Entry::Fail(std::string reason) {
  std::lock_guard lock(mutex_);
  if (state() == EntryState::kFailed) return false;
  failure_ = std::move(reason);
  state_.store(EntryState::kFailed, std::memory_order_release);
  return true;
}

std::string Entry::failure() const {
  std::lock_guard lock(mutex_);
  return failure_;
}

Entry::MissReport Entry::CountMiss(uint64_t host_ns, int64_t now_ns, bool timed) {
  // Time first, then the call: a report that takes this call also takes its time.
  if (timed) {
    pending_ns_.fetch_add(host_ns, std::memory_order_relaxed);
    pending_timed_.fetch_add(1, std::memory_order_relaxed);
  }
  misses_.fetch_add(1, std::memory_order_acq_rel);
  int64_t last = last_report_ns_.load(std::memory_order_relaxed);
  if (last != kNeverReported && now_ns - last < kMissReportIntervalNs) return {};
  // One thread wins the report; the others carry on.
  if (!last_report_ns_.compare_exchange_strong(last, now_ns, std::memory_order_acq_rel)) return {};
  return TakeMissReport(now_ns);
}

Entry::MissReport Entry::TakeMissReport(int64_t now_ns) {
  last_report_ns_.store(now_ns, std::memory_order_relaxed);
  MissReport report;
  // The calls since the last report. Only moved forward: a report that raced with a later one
  // (its thread held up past the next interval) takes what that one left, if anything.
  const uint64_t misses = misses_.load(std::memory_order_acquire);
  uint64_t reported = reported_misses_.load(std::memory_order_relaxed);
  while (reported < misses &&
         !reported_misses_.compare_exchange_weak(reported, misses, std::memory_order_relaxed)) {
  }
  report.calls = reported < misses ? misses - reported : 0;
  const uint64_t timed = pending_timed_.exchange(0, std::memory_order_relaxed);
  const uint64_t ns = pending_ns_.exchange(0, std::memory_order_relaxed);
  if (timed > 0) report.mean_host_us = static_cast<double>(ns) / 1000.0 / static_cast<double>(timed);
  return report;
}

std::string_view LaunchFailureStage(const Status& status) {
  return status.code() == StatusCode::kInvalidArgument ? "argument" : "launch";
}

namespace {
struct TableKey {
  Hash128 hash;
  int device = 0;
  friend bool operator==(const TableKey&, const TableKey&) = default;
};
struct TableKeyCompare {
  static size_t hash(const TableKey& k) {
    return Hash128Hasher{}(k.hash) ^ (static_cast<size_t>(k.device) * 0x9e3779b97f4a7c15ULL);
  }
  static bool equal(const TableKey& a, const TableKey& b) { return a == b; }
};
}  // namespace

struct EntryTable::Impl {
  tbb::concurrent_hash_map<TableKey, std::unique_ptr<Entry>, TableKeyCompare> map;
  // The entries again, for misses(): the map cannot be walked while other threads insert.
  mutable std::mutex mutex;
  std::vector<Entry*> entries;
};

namespace {
std::atomic<uint32_t> g_next_table_id{1};

// A thread's last-found entries, direct-mapped by hash: a hit costs no lock and no atomic
// read-modify-write (the table's find takes its bucket's reader lock). Tagged with the table's
// id, never its address, so that a table made where a destroyed one was (tests) never sees
// the old one's entries.
// 32 bytes, aligned: a slot is one cache line's half, never two lines.
struct alignas(32) CachedEntry {
  Hash128 hash;
  Entry* entry = nullptr;
  uint32_t table = 0;  // 0: empty
  int32_t device = 0;
};
static_assert(sizeof(CachedEntry) == 32);
constexpr size_t kThreadCacheSlots = 256;  // 8 KiB a thread: a model's distinct keys per step, or most of them
thread_local std::array<CachedEntry, kThreadCacheSlots> t_entry_cache;

CachedEntry& CacheSlot(const Hash128& hash, int device) {
  return t_entry_cache[(hash.low ^ static_cast<uint64_t>(device)) % kThreadCacheSlots];
}
}  // namespace

EntryTable::EntryTable() : impl_(std::make_unique<Impl>()), id_(g_next_table_id.fetch_add(1)) {}
EntryTable::~EntryTable() = default;

Entry* EntryTable::Find(const Hash128& hash, int device) const {
  CachedEntry& c = CacheSlot(hash, device);
  if (c.table == id_ && c.device == device && c.hash == hash) return c.entry;
  Entry* e = FindLocked(hash, device);
  if (e != nullptr) c = CachedEntry{hash, e, id_, device};
  return e;
}

Entry* EntryTable::FindLocked(const Hash128& hash, int device) const {
  decltype(impl_->map)::const_accessor a;
  if (!impl_->map.find(a, TableKey{hash, device})) return nullptr;
  return a->second.get();
}

Entry* EntryTable::FindOrCreate(const Hash128& hash, int device, std::string_view key_bytes, bool* created) {
  if (Entry* e = Find(hash, device)) {
    *created = false;
    return e;
  }
  decltype(impl_->map)::accessor a;
  *created = impl_->map.insert(a, TableKey{hash, device});
  if (*created) {
    a->second = std::make_unique<Entry>(std::string(key_bytes), device);
    std::lock_guard lock(impl_->mutex);
    impl_->entries.push_back(a->second.get());
  }
  return a->second.get();
}

size_t EntryTable::size() const { return impl_->map.size(); }

uint64_t EntryTable::misses() const {
  std::lock_guard lock(impl_->mutex);
  uint64_t n = 0;
  for (const Entry* e : impl_->entries) n += e->misses();
  return n;
}

std::vector<std::pair<int, uint64_t>> EntryTable::CallsByDevice() const {
  std::map<int, uint64_t> calls;
  {
    std::lock_guard lock(impl_->mutex);
    for (const Entry* e : impl_->entries) calls[e->device()] += e->misses() + e->hits();
  }
  return {calls.begin(), calls.end()};
}

void EntryTable::ForEachEntry(const std::function<void(const Entry&)>& fn) const {
  std::lock_guard lock(impl_->mutex);
  for (const Entry* e : impl_->entries) fn(*e);
}

void EntryTable::ForEachEntry(const std::function<void(Entry&)>& fn) {
  std::lock_guard lock(impl_->mutex);
  for (Entry* e : impl_->entries) fn(*e);
}

std::string RetimeDetail(const std::string& model, const std::string& timed_on) {
  return "retime on " + model + ": served a kernel timed on " + (timed_on == "?" ? "an unnamed GPU" : timed_on);
}

std::string_view StageName(Stage stage) {
  switch (stage) {
    case Stage::kPreFilter: return "pre-filter";
    case Stage::kKey: return "key";
    case Stage::kHash: return "hash";
    case Stage::kLookup: return "lookup";
    case Stage::kAllocate: return "allocate outputs (hit)";
    case Stage::kLaunch: return "launch (hit)";
    case Stage::kPyTorchDeclined: return "pytorch (not keyed)";
    case Stage::kPyTorchFirst: return "pytorch + resolve (first sight)";
    case Stage::kPyTorchMiss: return "pytorch (miss)";
    case Stage::kMissAccounting: return "miss accounting";
    case Stage::kWrapper: return "wrapper total";
    case Stage::kCount: break;
  }
  return "?";
}

std::string StageProfile::Table() const {
  char line[200];
  std::snprintf(line, sizeof line,
                "kjit profile (KJIT_PROFILE): host time per call by stage; each figure includes one clock read "
                "(%.1f ns)\n",
                clock_ns);
  std::string out = line;
  std::snprintf(line, sizeof line, "  %-32s %12s %12s %12s\n", "stage", "calls", "mean ns", "total ms");
  out += line;
  for (size_t i = 0; i < static_cast<size_t>(Stage::kCount); ++i) {
    const auto stage = static_cast<Stage>(i);
    const uint64_t n = calls(stage);
    if (n == 0) continue;
    std::snprintf(line, sizeof line, "  %-32s %12llu %12.1f %12.3f\n", std::string(StageName(stage)).c_str(),
                  static_cast<unsigned long long>(n), static_cast<double>(ns(stage)) / static_cast<double>(n),
                  static_cast<double>(ns(stage)) / 1e6);
    out += line;
  }
  return out;
}

std::string StageProfile::Json() const {
  char buf[200];
  std::snprintf(buf, sizeof buf, "{\"clock_ns\": %.2f, \"stages\": [", clock_ns);
  std::string out = buf;
  bool first = true;
  for (size_t i = 0; i < static_cast<size_t>(Stage::kCount); ++i) {
    const auto stage = static_cast<Stage>(i);
    const uint64_t n = calls(stage);
    if (n == 0) continue;
    std::snprintf(buf, sizeof buf, "%s{\"stage\": \"%s\", \"calls\": %llu, \"mean_ns\": %.2f, \"total_ns\": %llu}",
                  first ? "" : ", ", std::string(StageName(stage)).c_str(), static_cast<unsigned long long>(n),
                  static_cast<double>(ns(stage)) / static_cast<double>(n),
                  static_cast<unsigned long long>(ns(stage)));
    out += buf;
    first = false;
  }
  return out + "]}";
}

std::string OutputsMismatch(const std::vector<OutputLayout>& first_call,
                            const std::vector<cache::VerifiedOutput>& verified) {
  if (verified.empty()) return "";
  if (first_call.size() != verified.size()) {
    return std::to_string(first_call.size()) + " outputs, verified with " + std::to_string(verified.size());
  }
  for (size_t i = 0; i < verified.size(); ++i) {
    const OutputLayout& a = first_call[i];
    const cache::VerifiedOutput& b = verified[i];
    const bool same = a.defined == b.defined &&
                      (!a.defined || (a.scalar_type == b.scalar_type && a.sizes == b.sizes && a.strides == b.strides));
    if (!same) return "output " + std::to_string(i) + " is laid out otherwise than the verified one";
  }
  return "";
}

std::string LoadedTorchVersion(const std::string& torch_lib_dir) {
  auto first_line_of = [](const std::string& path) {
    std::ifstream in(path);
    std::string line;
    std::getline(in, line);
    return line;
  };
  std::string version;
  std::ifstream py(torch_lib_dir + "/../version.py");
  for (std::string line; std::getline(py, line);) {
    if (line.rfind("__version__", 0) != 0) continue;
    const size_t open = line.find_first_of("'\"");
    const size_t close = open == std::string::npos ? open : line.find(line[open], open + 1);
    if (close != std::string::npos) version = line.substr(open + 1, close - open - 1);
    break;
  }
  if (version.empty()) version = first_line_of(torch_lib_dir + "/../build-version");
  while (!version.empty() && (version.back() == ' ' || version.back() == '\r')) version.pop_back();
  return version.substr(0, version.find('+'));
}

std::string TorchVersionMismatch(const std::string& built, const std::string& loaded) {
  if (loaded.empty() || loaded == built) return "";
  return "kjit: the PyTorch adapter was built against PyTorch " + built + " and this process runs PyTorch " + loaded +
         ": kjit stays off in it (rebuild kjit against this PyTorch to use it)";
}

cache::ReaderContext ReaderFor(int arch, std::string device_model, std::string torch_version) {
  return cache::ReaderContext{arch, cache::RunningToolchain(), std::move(device_model), std::move(torch_version)};
}

}  // namespace kjit::shim
