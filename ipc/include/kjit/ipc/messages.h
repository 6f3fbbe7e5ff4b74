// The messages kjitd and its clients exchange, and their wire encoding.
//
// Every message is one msgpack map, the envelope:
//   {"v": <protocol version>, "type": <type name>, "id": <request id>, "body": <map>}
// A request's reply carries the same id. A reply is either the request's own
// reply type or an Error. Unknown versions, unknown types, missing or mistyped
// fields, trailing bytes and messages over kMaxMessageBytes are decoding errors,
// answered with an Error reply: never a crash. Fields a decoder does not know are
// ignored, so a newer client may add optional fields within a version.
// ipc/PROTOCOL.md describes every message for clients in other languages.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "kjit/cache/record.h"
#include "kjit/runtime/status.h"

namespace kjit::ipc {

inline constexpr uint32_t kProtocolVersion = 1;
// Large enough for a candidate's source and a CUBIN; anything larger is refused unread.
inline constexpr size_t kMaxMessageBytes = 16u << 20;
// Most elements in one array or entries in one map, and most levels of nested
// arrays and maps (envelope > body > tasks > task): a decoder allocates for a
// declared count before reading the elements, so hostile counts are refused.
// A sender keeps lists, such as list_tasks_reply.tasks, within kMaxCollectionSize.
inline constexpr size_t kMaxCollectionSize = 1u << 16;
inline constexpr size_t kMaxNesting = 4;

// ---- requests and their replies

struct Hello {  // -> HelloReply
  std::string client;  // e.g. "kjit-shim/0.1", "kjit-cli/0.1", "my-agent/2"
  uint32_t pid = 0;
  std::vector<std::string> capabilities;
};
struct HelloReply {
  std::string server;  // e.g. "kjitd/0.1"
  uint32_t protocol_version = kProtocolVersion;
  std::vector<std::string> capabilities;  // e.g. "lookup", "report_miss", "agent_env"
  std::string announce_endpoint;          // where to SUBscribe for announcements
};

// The kernel for a key, for a reader with this arch and toolchain.
struct Lookup {  // -> LookupReply
  std::string key_bytes;  // OpKey::Encode()
  int32_t arch = 0;
  int32_t driver_version = 0;
  int32_t nvrtc_major = 0;
  int32_t nvrtc_minor = 0;
  int32_t codegen_version = 0;
  // Optional (added within version 1): the reader's GPU model ("NVIDIA H200"). Of the key's
  // records, one timed on this model is served first (kernel_cache.h). Absent: any model.
  std::optional<std::string> device_model;
  // Optional (added within version 1): the reader's PyTorch ("2.11.0"). Only records verified under it are
  // served. Absent: any.
  std::optional<std::string> torch_version;
};
struct LookupReply {
  bool found = false;
  int64_t record_id = 0;
  std::string cubin;
  std::string entry_point;
  uint32_t grid[3] = {1, 1, 1};
  uint32_t block[3] = {1, 1, 1};
  uint32_t dynamic_shared_bytes = 0;
  // Per-launch workspace (kernel ABI v2, daemon/worker_protocol.h); absent: none.
  std::optional<uint64_t> workspace_bytes;
  std::string reason;  // why not found
};

// A key the client ran PyTorch's own kernel for: `calls` calls since its last
// report, taking `observed_us` each on average. Misses of one key merge into one task.
struct ReportMiss {  // -> TaskAck
  std::string key_bytes;
  uint64_t calls = 0;
  double observed_us = 0;
};
// A cached kernel failed inside a client (the shim): it ran PyTorch's kernel
// instead and will not use the record again in this process. Sent once per
// record and process, through the client's non-blocking queue. kjitd takes a
// record that failed to load or launch out of service (quarantined) and
// re-verifies it: with the evaluator when it has one, else by queueing a task.
struct ReportFailure {  // -> FailureAck
  std::string key_bytes;  // the key the record was served for
  int64_t record_id = 0;
  std::string stage;   // one of kFailureStages
  std::string reason;  // the error, for logs and the record's status reason
};
// "load": loading the module or finding the entry point failed; "launch": the
// launch was refused (e.g. a launch shape the device cannot run); "argument":
// the call had an argument the shim cannot pass to the kernel (not the
// kernel's fault: kjitd counts it and leaves the record in service).
inline constexpr std::string_view kFailureStages[] = {"load", "launch", "argument"};
struct FailureAck {
  bool out_of_service = false;  // this report took the record out of service
  // What kjitd does about it: "started" (the evaluator re-verifies the record
  // now), "queued" (no evaluator: a task with the key waits for one), "none"
  // (the record was not in service, or the failure was not the kernel's).
  std::string reverify;
  int64_t task_id = 0;  // the queued task when reverify is "queued", else 0
};
// The client ran ops on these GPUs since its last report (the shim sends one about twice a second while
// its program runs intercepted ops, none while it is quiet). Under `when = idle` kjitd counts each GPU
// busy for idle_client_hold_ms after a report, and a trial in flight there yields: NVML's per-process
// figures miss other processes on some virtual machines and across PID namespaces.
struct ReportActivity {  // -> Ack
  uint32_t pid = 0;
  std::vector<std::string> devices;  // GPU UUIDs, "GPU-..." as cuDeviceGetUuid gives them
  uint64_t calls = 0;                // ops run since the last report, on all of them
};
// The calls of each key a client ran since its last report: hits (kjit's kernel, from `record_id`) and misses
// (PyTorch's kernel). The shim sends one every few seconds while its program runs intercepted ops, and once at
// exit; kjitd adds them to the cache's per-key counters, which `kjit report` reads.
struct KeyUse {
  std::string key_hash;  // 32 hex digits
  int64_t record_id = 0;  // the record served on hits; 0: none
  uint64_t hits = 0;
  uint64_t misses = 0;
};
struct ReportUses {  // -> Ack
  uint32_t pid = 0;
  std::vector<KeyUse> uses;
  // The program run the calls belong to, for `kjit report --run`: `kjit run` names it (KJIT_RUN_ID, inherited by
  // the program's child processes, so they count as one run); a process started without it is its own run.
  std::optional<std::string> run_id;
  std::optional<std::string> program;          // the command line, cut to kMaxProgramText bytes
  std::optional<int64_t> started_unix_ms;      // when the reporting process started
};
inline constexpr size_t kMaxRunIdText = 128;
inline constexpr size_t kMaxProgramText = 512;
struct SubmitTask {  // -> TaskAck
  std::string key_bytes;
  int32_t priority = 0;
  std::string detail;
};
struct TaskAck {
  int64_t task_id = 0;
  bool merged = false;  // true if it joined an existing queued task
};

struct TaskInfo {
  int64_t id = 0;
  std::string key_hash;  // 32 hex digits
  std::string key_text;
  std::string state;  // queued, running, done, unfit, failed
  int32_t priority = 0;
  uint64_t calls = 0;
  double observed_us = 0;
  double expected_gain_us = 0;  // calls x time per call: the queue's order
  int32_t attempts = 0;
  std::string detail;
  int64_t created_unix_ms = 0;
  int64_t updated_unix_ms = 0;
  // Optional (absent from kjitds before the tuner): the key's tuning so far.
  std::optional<int32_t> round;           // tuning rounds completed
  std::optional<int32_t> trials;          // candidates evaluated, every round
  std::optional<double> best_us;          // the fastest verified kernel (0: none)
  std::optional<double> baseline_us;      // PyTorch's kernel, as the evaluator timed it
  std::optional<double> floor_us;         // the memory/compute floor
  std::optional<int64_t> record_id;       // the record holding the best kernel (0: none)
  std::optional<std::string> policy_version;  // who proposed it
  std::optional<std::string> claimed_by;  // the tuner working on it (running tasks)
};
struct TaskStatus {  // -> TaskStatusReply
  int64_t task_id = 0;
};
struct TaskStatusReply {
  TaskInfo task;
};
struct ListTasks {  // -> ListTasksReply
  std::string state;   // "" for all
  uint32_t limit = 0;  // 0 for no limit
};
struct ListTasksReply {
  std::vector<TaskInfo> tasks;
};

struct Stats {};  // -> StatsReply
struct StatsReply {
  std::map<std::string, double> counters;  // e.g. "requests", "misses_reported", "tasks_queued", "uptime_s"
  // Optional (absent from kjitds older than issue 10, and from one without an
  // evaluator pool): one map per evaluator worker, in configuration order,
  // e.g. {"device": "0", "state": "ready", "uuid": "GPU-...", "arch": "90", "jobs": "12"}.
  std::optional<std::vector<std::map<std::string, std::string>>> evaluators;
};

struct Shutdown {};  // -> Ack; kjitd finishes the trial in flight and exits
struct Ack {};

// ---- agent environment: an external agent writes kernels against kjit's verifier

struct OpenEpisode {  // -> Observation
  std::string key_bytes;  // the task, as an OpKey
};
struct Observation {
  int64_t episode_id = 0;
  std::string key_text;
  std::string op;
  std::vector<std::string> inputs;  // one line per argument, as in the key's text form
  double baseline_us = 0;           // PyTorch's kernel, measured by the evaluator
  std::map<std::string, std::string> device;  // name, arch, sm_count, l2_bytes, copy_bandwidth, ...
};
struct SubmitCandidate {  // -> CandidateResult
  int64_t episode_id = 0;
  std::string source;  // CUDA C++ for NVRTC
  std::string entry_point;
  std::vector<std::string> options;
  uint32_t grid[3] = {1, 1, 1};
  uint32_t block[3] = {1, 1, 1};
  uint32_t dynamic_shared_bytes = 0;
  // Optional (added within version 1): family, policy_version and "knob.<name>" -> decimal value, recorded
  // with the measurement and the kernel (PROTOCOL.md). Absent: family "agent", policy "external-agent".
  std::optional<std::map<std::string, std::string>> design;
  // Per-launch workspace (kernel ABI v2, daemon/worker_protocol.h); absent: none.
  std::optional<uint64_t> workspace_bytes;
  // Optional (added within version 1): the candidates the client expects to submit next, each as its source
  // followed by its NVRTC options. The evaluator compiles them while it verifies and times this one, so
  // that their own submissions do not wait for NVRTC. At most kMaxCompileAhead are used.
  std::optional<std::vector<std::vector<std::string>>> compile_ahead;
};
inline constexpr size_t kMaxCompileAhead = 8;
struct CandidateResult {
  bool compiled = false;
  std::string compile_log;
  bool verified = false;
  std::string verdict;  // why it failed, or "verified"
  double median_us = 0;
  double baseline_us = 0;
  double reward = 0;
  // What the evaluator measured besides the verdict: registers, spill_bytes,
  // local_bytes, static_shared_bytes, compile_ms, evaluation_ms, runs,
  // spread_us, baseline_spread_us, floor_us, bandwidth_fraction, flop_fraction,
  // accepted (1 if the kernel entered the cache), and for an accepted kernel record (the id of the
  // record that holds it) and already_stored (1: the cache already held the same kernel for the key,
  // verified, so no second record was stored or announced). Keys may be added.
  std::map<std::string, double> profile;
};
struct CloseEpisode {  // -> Ack
  int64_t episode_id = 0;
};

// ---- replies that any request may get, and announcements

struct Error {
  std::string code;  // a StatusCodeName: "invalid_argument", "not_found", "unavailable", ...
  std::string message;
};

// Published on the announce socket when a kernel is verified; topic is
// "sm_<arch>/<key hash hex>" so a subscriber can filter by arch and key.
struct Announce {
  int32_t arch = 0;
  std::string key_hash;  // 32 hex digits
  int64_t record_id = 0;
};

using Body = std::variant<Hello, HelloReply, Lookup, LookupReply, ReportMiss, SubmitTask, TaskAck, TaskStatus,
                          TaskStatusReply, ListTasks, ListTasksReply, Stats, StatsReply, Shutdown, Ack, OpenEpisode,
                          Observation, SubmitCandidate, CandidateResult, CloseEpisode, Error, Announce, ReportFailure,
                          FailureAck, ReportActivity, ReportUses>;

// The wire name of each body type: "hello", "hello_reply", "lookup", ...
std::string_view TypeName(const Body& body);

struct Envelope {
  uint32_t version = kProtocolVersion;
  uint64_t id = 0;
  Body body;
};

// msgpack bytes of an envelope.
std::string Encode(const Envelope& envelope);

// Strict decoding: kInvalidArgument with a message naming the problem (bad
// msgpack, too large, wrong version, unknown type, missing or mistyped field,
// trailing bytes). When the envelope's id could be read, *id_out receives it so
// the error reply can carry it.
Result<Envelope> Decode(std::string_view bytes, uint64_t* id_out = nullptr);

// An Error reply for a failed Status.
Error ToError(const Status& status);

// submit_candidate's `design` map to and from the cache's DesignPoint: "family", "policy_version" and
// "knob.<name>" entries; other entries are ignored.
std::map<std::string, std::string> DesignToWire(const cache::DesignPoint& design);
cache::DesignPoint DesignFromWire(const std::map<std::string, std::string>& wire);
// Back to a Status (unknown codes become kInternal).
Status FromError(const Error& error);

// Topic for an announcement: "sm_90/<hash>".
std::string AnnounceTopic(const Announce& announce);

}  // namespace kjit::ipc
