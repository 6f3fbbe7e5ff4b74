#include "activity.h"

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <utility>
#include <vector>

namespace kjit::shim {

ProgramRun CurrentProgramRun(uint32_t pid) {
  ProgramRun run;
  run.started_unix_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                            std::chrono::system_clock::now().time_since_epoch())
                            .count();
  const char* id = std::getenv("KJIT_RUN_ID");
  if (id != nullptr && *id != '\0') {
    run.id.assign(id, strnlen(id, ipc::kMaxRunIdText));
  } else {
    run.id = std::to_string(pid) + "-" + std::to_string(run.started_unix_ms);
  }
  std::ifstream cmdline("/proc/self/cmdline", std::ios::binary);
  std::string args((std::istreambuf_iterator<char>(cmdline)), std::istreambuf_iterator<char>());
  while (!args.empty() && args.back() == '\0') args.pop_back();
  for (char& c : args) {
    if (c == '\0') c = ' ';
  }
  if (args.size() > ipc::kMaxProgramText) args.resize(ipc::kMaxProgramText);
  run.program = std::move(args);
  return run;
}

ActivityReporter::ActivityReporter(const EntryTable& table, ActivitySink* sink, uint32_t pid,
                                   std::chrono::milliseconds interval, int uses_every, ProgramRun run)
    : table_(table), sink_(sink), pid_(pid), interval_(interval), uses_every_(uses_every), run_(std::move(run)) {}

ActivityReporter::~ActivityReporter() { Stop(); }

void ActivityReporter::Start() {
  std::lock_guard lock(mu_);
  if (thread_.joinable() || stop_) return;
  thread_ = std::thread([this] { Run(); });
}

void ActivityReporter::Stop() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id()) thread_.join();
}

std::optional<ipc::ReportActivity> ActivityReporter::Tick() {
  if (refused_.load()) return std::nullopt;
  ipc::ReportActivity report;
  report.pid = pid_;
  for (const auto& [device, calls] : table_.CallsByDevice()) {
    uint64_t& seen = last_[device];
    if (calls == seen) continue;
    const uint64_t moved = calls - seen;
    seen = calls;
    std::string uuid = sink_->DeviceUuid(device);
    if (uuid.empty()) continue;
    report.devices.push_back(std::move(uuid));
    report.calls += moved;
  }
  if (report.devices.empty()) return std::nullopt;
  if (!sink_->SendActivity(report)) {
    refused_ = true;
    return std::nullopt;
  }
  reports_.fetch_add(1);
  return report;
}

std::optional<ipc::ReportUses> ActivityReporter::FlushUses() {
  std::lock_guard lock(uses_mu_);
  ipc::ReportUses report;
  report.pid = pid_;
  table_.ForEachEntry([&](const Entry& e) {
    Reported& r = reported_[&e];
    const uint64_t hits = e.hits(), misses = e.misses();
    if (hits == r.hits && misses == r.misses) return;
    if (r.key_hash.empty()) r.key_hash = HashBytes(e.key_bytes()).ToHex();
    const LoadedKernel* kernel = e.kernel();
    report.uses.push_back({r.key_hash, kernel != nullptr ? kernel->record_id : 0, hits - r.hits, misses - r.misses});
    r.hits = hits;
    r.misses = misses;
  });
  if (report.uses.empty()) return std::nullopt;
  if (!run_.id.empty()) {
    report.run_id = run_.id;
    report.program = run_.program;
    report.started_unix_ms = run_.started_unix_ms;
  }
  sink_->SendUses(report);
  return report;
}

void ActivityReporter::Run() {
  std::unique_lock lock(mu_);
  int looks = 0;
  while (!stop_) {
    wake_.wait_for(lock, interval_, [this] { return stop_; });
    if (stop_) break;
    lock.unlock();
    Tick();
    if (uses_every_ > 0 && ++looks % uses_every_ == 0) FlushUses();
    const bool done = refused_.load();
    lock.lock();
    if (done) break;  // an older kjitd: nothing more to say to it
  }
}

}  // namespace kjit::shim
