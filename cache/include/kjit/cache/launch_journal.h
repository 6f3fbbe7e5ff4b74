// The launch journal: what links a process that died to the cached kernel that killed it.
//
// A kernel that faults in a user's process (an illegal address) leaves a sticky CUDA error, and the process
// dies; without a trace, every rerun of the program loads the same record and dies again. So a process
// guards the first launch of each record it is served: it writes an entry into the journal (a directory
// beside the cache file, "<cache>.launches/"), launches, waits for the stream, and removes the entry. An
// entry whose process is gone is a record that was launching when its process died:
//   - the shim serves no record with such an entry (it runs PyTorch's kernel instead), with or without kjitd;
//   - kjitd takes the record out of service, re-verifies it on its evaluator (a quarantine, as a client's
//     failure report does), and removes the entry.
//
// An entry is one empty file named "<record>-<pid>-<start>", `start` the process's start time in clock ticks
// since boot (/proc/<pid>/stat), so that a later process that reuses the pid does not keep a dead one's entry
// alive. Creating and removing it are one open and one unlink: the first launch of each record per process
// pays them, with two stream synchronizations; no later launch pays anything.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kjit/runtime/status.h"

namespace kjit::cache {

// The journal's directory for a cache file: "<cache path>.launches".
std::string LaunchJournalDir(const std::string& cache_path);

// The start time of a live process, in clock ticks since boot (field 22 of /proc/<pid>/stat); 0 if there is
// no such process (or /proc cannot say).
uint64_t ProcessStartTicks(uint32_t pid);

struct LaunchJournalEntry {
  int64_t record_id = 0;
  uint32_t pid = 0;
  uint64_t start_ticks = 0;
  std::string path;  // the entry's file
};

class LaunchJournal {
 public:
  // `pid` and `start_ticks` name the writing process (tests name others); 0: this process.
  explicit LaunchJournal(std::string dir, uint32_t pid = 0, uint64_t start_ticks = 0);

  const std::string& dir() const { return dir_; }

  // Before a record's first launch in this process: writes its entry, creating the directory (0700) if
  // needed. An error means the launch is unguarded; the caller decides whether to launch anyway.
  Status Begin(int64_t record_id) const;
  // After that launch completed: removes the entry (no error if it is already gone).
  void End(int64_t record_id) const;

  // Every entry whose process is gone (dead, or its pid now another process's) and that is at least
  // kMinAbandonedAge old. Entries of live processes (launching now) are not listed; files whose names are not
  // entries are ignored. The age rule covers a reader in another pid namespace (a container) than the writer,
  // which sees the writer as gone: a first launch in progress is seconds old at most, a dead process's entry
  // stays.
  static constexpr int64_t kMinAbandonedAgeMs = 2000;
  Result<std::vector<LaunchJournalEntry>> Abandoned() const;
  // Whether `record_id` has an abandoned entry (the same rules): the shim's check before it serves a record.
  // False when the journal does not exist.
  bool KilledAProcess(int64_t record_id) const;
  // Removes an abandoned entry once its record is out of service.
  Status Remove(const LaunchJournalEntry& entry) const;

 private:
  std::string EntryPath(int64_t record_id) const;
  std::string dir_;
  uint32_t pid_;
  uint64_t start_ticks_;
};

}  // namespace kjit::cache
