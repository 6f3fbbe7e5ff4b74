// The client library: how the shim, the CLI and external agents talk to kjitd.
//
// Contract:
// - Requests (Call and the typed helpers) wait at most `request_timeout` for a
//   reply. If kjitd is not running or does not answer, they return kUnavailable
//   and the next request reconnects: the caller carries on, with PyTorch's own
//   kernel in the shim's case.
// - ReportMiss never blocks and never fails: it queues the report for a
//   background thread, which sends it and waits for kjitd's acknowledgement,
//   retrying while kjitd is away. When the queue is full the report is dropped
//   and counted. A report kjitd has acknowledged is in its task queue on disk.
// - ReportFailure takes the same queue and path: never blocks, never fails.
//   Failure reports are rare (one per record and process) and matter more than
//   misses, so a queue full of misses still takes kFailureReserve of them.
// - ReportActivity takes the same path too, but only the newest report counts:
//   one still waiting is replaced. Once kjitd refuses the message (a kjitd
//   older than it), ReportActivity returns false and sends nothing more.
// - A Client may be used from several threads.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kjit/ipc/messages.h"
#include "kjit/runtime/status.h"

namespace kjit::ipc {

struct ClientOptions {
  std::string endpoint;  // empty: DefaultEndpoint()
  std::string name = "kjit-client/0.1";
  std::chrono::milliseconds request_timeout{2000};
  size_t miss_queue_capacity = 4096;
  std::chrono::milliseconds retry_interval{200};  // between attempts while kjitd is away
  // For tcp:// endpoints: CURVE keys, Z85 text (40 characters each).
  std::string server_public_key;
  std::string public_key;
  std::string secret_key;
};

struct ClientCounters {
  uint64_t requests = 0;
  uint64_t request_failures = 0;
  uint64_t misses_queued = 0;
  uint64_t misses_acked = 0;
  uint64_t misses_dropped = 0;
  uint64_t failures_queued = 0;
  uint64_t failures_acked = 0;
  uint64_t failures_dropped = 0;  // the queue was full, kjitd refused it, or the client was destroyed first
  uint64_t submits_acked = 0;
  uint64_t submits_dropped = 0;  // the queue was full, kjitd refused it, or the client was destroyed first
  uint64_t uses_acked = 0;
  uint64_t uses_dropped = 0;
  uint64_t activity_acked = 0;
  uint64_t activity_dropped = 0;  // replaced by a newer report, refused, or not sent
  uint64_t reconnects = 0;
  uint64_t queue_depth = 0;  // reports not yet acknowledged
};

class Client {
 public:
  explicit Client(ClientOptions options = {});
  ~Client();  // stops the background thread; reports still queued are dropped (and counted)
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  const std::string& endpoint() const;

  // One request, one reply. An Error reply comes back as its Status.
  Result<Body> Call(const Body& request);

  Result<HelloReply> Hello();
  Result<LookupReply> Lookup(const ipc::Lookup& request);
  Result<TaskAck> Submit(const std::string& key_bytes, int priority, const std::string& detail = "");
  Result<TaskInfo> GetTask(int64_t task_id);
  Result<std::vector<TaskInfo>> ListTasks(const std::string& state = "", uint32_t limit = 0);
  Result<StatsReply> Stats();
  Status Shutdown();

  // The agent environment. open_episode measures PyTorch's kernel and
  // submit_candidate compiles, verifies and times a kernel on the GPU: each can
  // take seconds to minutes (a busy GPU delays them), so give this client a
  // request_timeout to match.
  Result<Observation> OpenEpisode(const std::string& key_bytes);
  Result<CandidateResult> SubmitCandidate(const ipc::SubmitCandidate& candidate);
  Status CloseEpisode(int64_t episode_id);

  // Never blocks. Returns false if the report was dropped because the queue is full.
  bool ReportMiss(std::string key_bytes, uint64_t calls, double observed_us);
  // Never blocks. Returns false if the report was dropped because the queue is full.
  static constexpr size_t kFailureReserve = 256;
  bool ReportFailure(ipc::ReportFailure report);
  // Per-key calls (report_uses), through the same queue. Never blocks; false if the queue is full.
  bool ReportUses(ipc::ReportUses report);
  // Submit without waiting: through the reports' queue, retried while kjitd is away. Never blocks;
  // false if the queue is full (the task is dropped and counted).
  bool SubmitAsync(ipc::SubmitTask task);
  // Never blocks. False once kjitd has refused activity reports (it does not know them); a report that
  // finds the queue full is dropped (counted) and the next one tried.
  bool ReportActivity(ipc::ReportActivity report);
  // Waits until every queued report is acknowledged, or the timeout passes (kUnavailable).
  Status Flush(std::chrono::milliseconds timeout);

  ClientCounters counters() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kjit::ipc
