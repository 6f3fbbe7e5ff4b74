// The measurement log: every candidate the evaluator judged, whatever its
// outcome, in the order judged. The policy learns from it and the tuner reads a
// key's history from it. Stored in the kernel cache's file (KernelCache::measurements()).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kjit/cache/record.h"
#include "kjit/runtime/hash.h"
#include "kjit/runtime/status.h"

namespace kjit::cache {

// One evaluated candidate, whatever its outcome: what the policy learns from.
struct Measurement {
  int64_t id = 0;
  Hash128 key_hash;
  std::string key_bytes;
  DesignPoint design;
  std::string outcome;  // "verified", "slower", "wrong", "compile_error", "fault", "timeout", ...
  double median_us = 0;
  double baseline_us = 0;
  double reward = 0;
  std::string detail;
  int64_t created_unix_ms = 0;
};

class MeasurementLog {
 public:
  virtual ~MeasurementLog() = default;
  // Appends `m` (created_unix_ms 0: now) and returns its id; kInvalidArgument if key_bytes do not decode.
  virtual Result<int64_t> AddMeasurement(Measurement m) = 0;
  // A family's measurements (every family's when empty), oldest first, at most `limit` (0: all).
  virtual Result<std::vector<Measurement>> ListMeasurements(const std::string& family = "", int limit = 0) const = 0;
  // One key's measurements, oldest first (a tuning round's history).
  virtual Result<std::vector<Measurement>> ListMeasurementsOfKey(const Hash128& key_hash) const = 0;
};

}  // namespace kjit::cache
