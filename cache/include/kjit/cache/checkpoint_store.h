// The checkpoint store: the policy's saved weights, newest last, each with a
// checksum. Stored in the kernel cache's file (KernelCache::checkpoints()).
#pragma once

#include <cstdint>
#include <string>

#include "kjit/runtime/hash.h"
#include "kjit/runtime/status.h"

namespace kjit::cache {

struct PolicyCheckpoint {
  int64_t id = 0;
  std::string version;
  std::string blob;
  Hash128 checksum;  // filled in by PutCheckpoint
  std::string status;  // "good" or "set_aside"
  int64_t created_unix_ms = 0;
};

class CheckpointStore {
 public:
  virtual ~CheckpointStore() = default;
  // Stores `checkpoint` (status "good" when empty; created_unix_ms 0: now) with its checksum; returns its id.
  virtual Result<int64_t> PutCheckpoint(PolicyCheckpoint checkpoint) = 0;
  // The newest checkpoint whose status is "good" and whose checksum holds;
  // checkpoints that fail their checksum are set aside on the way. kNotFound if none.
  virtual Result<PolicyCheckpoint> LatestGoodCheckpoint() = 0;
  // Marks a checkpoint "set_aside" (its checksum held but its reader could not
  // use it: damaged before it was stored, or written by an incompatible
  // policy), so LatestGoodCheckpoint passes over it from then on.
  virtual Status SetCheckpointAside(int64_t id) = 0;
};

}  // namespace kjit::cache
