// The task queue: which keys wait to be tuned, who tunes each, and what each
// key's rounds found. Today one implementation stores it in the kernel cache's
// SQLite file (KernelCache::tasks()), shared by every process of a user; the
// interface is what a queue in a shared database implements later, so that a
// fleet of machines with the same GPU tunes each key once (a claim is then a
// row lock taken with SKIP LOCKED, a lease a timestamp column, as here).
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kjit/runtime/hash.h"
#include "kjit/runtime/status.h"

namespace kjit::cache {

// The daemon's task queue: one row per key, the key's tuning history.
// States: "queued" (waiting for a tuner), "running" (claimed by a tuner, which
// holds a lease), "done" (tuned: a kernel was stored, or none beat PyTorch),
// "unfit" (the key can never be evaluated on this machine, e.g. its working set
// exceeds the GPU's memory) and "failed" (an error that trials cannot fix).
// Queued tasks are ordered by priority, then expected gain (calls x time per
// call: what a faster kernel could save), then age. Misses and submissions for
// a key merge into its row: an open (queued or running) one absorbs them; a
// done or failed one is queued again (a later round) when its calls have grown
// kRetuneCallsFactor-fold since it was tuned and its best kernel is not already
// within kNearFloor of the memory floor, or when a client submits it; an unfit
// one only counts the calls.
//
// Claims are safe when several tuners share the file (and, later, a database):
// a claim names its claimer and holds a lease; one key is claimed by one tuner
// at a time; a claim whose lease ran out (its tuner crashed) may be taken by
// another; only the claimer may renew or complete it.
struct Task {
  int64_t id = 0;
  std::string key_bytes;
  Hash128 key_hash;
  int priority = 0;
  std::string state;
  int attempts = 0;           // claims so far
  std::string detail;
  uint64_t calls = 0;         // misses reported for the key
  double observed_us = 0;     // mean time per call of PyTorch's kernel, as the clients saw it
  double expected_gain_us = 0;
  int64_t created_unix_ms = 0;
  int64_t updated_unix_ms = 0;
  // Claims and rounds.
  std::string claimed_by;       // the running claim's owner; empty otherwise
  int64_t lease_until_unix_ms = 0;
  int64_t not_before_unix_ms = 0;  // a queued task handed back to wait (GPU memory short now)
  int round = 0;                // tuning rounds completed
  uint64_t calls_at_tune = 0;   // calls when the last round was claimed
  // Results over every round.
  int trials = 0;
  double best_us = 0;           // the fastest verified kernel's median (0: none)
  double baseline_us = 0;       // PyTorch's, as the evaluator timed it
  double floor_us = 0;          // the memory/compute floor
  int64_t record_id = 0;        // the record holding the best kernel (0: none stored)
  std::string policy_version;   // who proposed the best kernel
};

inline constexpr double kRetuneCallsFactor = 4.0;
inline constexpr double kNearFloor = 1.25;

// Who claims, for how long; `now_unix_ms` 0 reads the clock (tests pass a time).
struct ClaimOptions {
  std::string claimer;
  std::chrono::milliseconds lease{std::chrono::minutes(5)};
  int64_t now_unix_ms = 0;
};

// What became of a claimed task's round.
struct TaskResult {
  std::string state;  // "done", "unfit", "failed", or "queued" (handed back: another round, or wait)
  std::string detail;
  int trials = 0;     // this round's; added to the task's
  double best_us = 0, baseline_us = 0, floor_us = 0;  // 0: unchanged
  int64_t record_id = 0;
  std::string policy_version;
  bool round_done = false;          // counts as a tuning round (false: handed back untried)
  int64_t not_before_unix_ms = 0;   // "queued": not claimed again before this
  std::optional<int> priority;      // "queued": the task's priority from now on
};

struct TaskMerge {
  int64_t task_id = 0;
  bool merged = false;    // joined the key's existing task
  bool reopened = false;  // ... which was closed and is queued again (another round)
};

class TaskQueue {
 public:
  virtual ~TaskQueue() = default;

  // A client ran PyTorch's kernel `calls` times for this key, `observed_us` each:
  // adds to the key's open task, or opens one. kInvalidArgument if key_bytes do not decode.
  virtual Result<TaskMerge> AddMiss(const std::string& key_bytes, uint64_t calls, double observed_us) = 0;
  // Asks for a key to be tuned; merges into an open task, raising its priority, or reopens a closed one.
  virtual Result<TaskMerge> SubmitTask(const std::string& key_bytes, int priority, const std::string& detail = "") = 0;
  Result<int64_t> EnqueueTask(const std::string& key_bytes, int priority, const std::string& detail = "") {
    KJIT_ASSIGN_OR_RETURN(TaskMerge m, SubmitTask(key_bytes, priority, detail));
    return m.task_id;
  }
  // The queue's first claimable task (queued and not waiting, or running with an expired lease),
  // marked running under `claim` atomically for every process sharing the queue; none: an empty optional.
  virtual Result<std::optional<Task>> ClaimTask(const ClaimOptions& claim) = 0;
  Result<std::optional<Task>> ClaimNextTask() { return ClaimTask(ClaimOptions{}); }  // anonymous, 5-minute lease
  // Extends a claim's lease. kUnavailable ("claim lost") when the task is no longer running under
  // this claimer (its lease expired and another tuner took it, or it was completed).
  virtual Status RenewClaim(int64_t id, const ClaimOptions& claim) = 0;
  // Ends a claim with its round's result; kUnavailable ("claim lost") as for RenewClaim.
  virtual Status CompleteTask(int64_t id, const std::string& claimer, const TaskResult& result) = 0;
  // Closes a task done or failed, whoever holds it (tools and tests); kNotFound for an unknown id.
  virtual Status FinishTask(int64_t id, bool ok, const std::string& detail) = 0;
  // Hands back (queued, no round counted) every running task whose claimer starts with `claimer_prefix`
  // (not empty): a tuner that is known to be gone. Returns how many.
  virtual Result<int> ReleaseClaims(const std::string& claimer_prefix) = 0;
  virtual Result<Task> GetTask(int64_t id) const = 0;
  // Tasks in `state` (all when empty) in queue order, at most `limit` (0: all).
  virtual Result<std::vector<Task>> ListTasks(const std::string& state = "", int limit = 0) const = 0;
};

}  // namespace kjit::cache
