// Hot-swap: a background thread subscribed to kjitd's announcements of newly
// verified kernels. For each one that concerns a key this process has seen
// (on a device of the announced arch), it re-reads the record from the cache,
// loads its module in the device's primary context, and publishes it to the
// key's entry (Entry::Swap): the next call launches it. Keys not yet seen are
// ignored: their first call reads the cache itself. A record that fails to
// load blacklists the key for the process and is reported to kjitd.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "kjit/cache/kernel_cache.h"
#include "kjit/runtime/status.h"
#include "shim_core.h"

namespace kjit::shim {

// What the listener needs from the adapter (an interface, so it is tested without torch).
class KernelSource {
 public:
  virtual ~KernelSource() = default;
  // The record the cache serves for the key to a process on `device` (of `arch`): the
  // device's model is part of the question (kernel_cache.h's Lookup prefers records
  // timed on the reader's model), so two GPUs of one arch may be served different records.
  virtual Result<cache::ServedKernel> LookupRecord(const Hash128& hash, int device, int arch) = 0;
  virtual Result<std::unique_ptr<LoadedKernel>> Load(int device, const cache::ServedKernel& served) = 0;
  virtual EntryTable& Table() = 0;
  virtual std::vector<std::pair<int, int>> DevicesInUse() = 0;  // (device, arch)
  virtual void LogLine(const std::string& line) = 0;
  // A record this process blacklisted: tell kjitd, without blocking. Called once
  // per entry (by whoever's Entry::Fail made it fail).
  virtual void ReportFailure(const Entry& entry, int64_t record_id, std::string_view stage,
                             const std::string& reason) = 0;
  // The kernel now served to `entry` on `device` was timed on another GPU model, `timed_on`: ask kjitd,
  // without blocking, to time the key on this device's model. Called once per entry (FirstRetimeRequest).
  virtual void RequestRetime(const Entry& entry, int device, const std::string& timed_on) = 0;
};

class AnnouncementListener {
 public:
  // `endpoint` empty: ipc::DefaultAnnounceEndpoint().
  explicit AnnouncementListener(KernelSource* source, std::string endpoint = "");
  ~AnnouncementListener();  // stops and joins the thread
  AnnouncementListener(const AnnouncementListener&) = delete;
  AnnouncementListener& operator=(const AnnouncementListener&) = delete;

  // Connects (ZeroMQ reconnects by itself while kjitd is away) and starts the thread.
  Status Start();
  void Stop();

  // Handles one announcement as the thread does; returns what it did (for logs and tests):
  // one outcome, or "device N: ...; device M: ..." when the key was seen on several GPUs.
  std::string Handle(int arch, const std::string& key_hash_hex, int64_t record_id);

  uint64_t swaps() const { return swaps_.load(); }

 private:
  void Run();
  KernelSource* source_;
  std::string endpoint_;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> swaps_{0};
  std::thread thread_;
  struct Socket;
  std::unique_ptr<Socket> socket_;
};

}  // namespace kjit::shim
