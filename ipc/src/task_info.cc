#include "kjit/ipc/task_info.h"

#include "kjit/runtime/op_key.h"

namespace kjit::ipc {

TaskInfo ToTaskInfo(const cache::Task& t) {
  TaskInfo i;
  i.id = t.id;
  i.key_hash = t.key_hash.ToHex();
  auto key = OpKey::Decode(t.key_bytes);
  i.key_text = key.ok() ? key->ToString() : "(undecodable key)";
  i.state = t.state;
  i.priority = t.priority;
  i.calls = t.calls;
  i.observed_us = t.observed_us;
  i.expected_gain_us = t.expected_gain_us;
  i.attempts = t.attempts;
  i.detail = t.detail;
  i.created_unix_ms = t.created_unix_ms;
  i.updated_unix_ms = t.updated_unix_ms;
  i.round = t.round;
  i.trials = t.trials;
  i.best_us = t.best_us;
  i.baseline_us = t.baseline_us;
  i.floor_us = t.floor_us;
  i.record_id = t.record_id;
  i.policy_version = t.policy_version;
  if (!t.claimed_by.empty()) i.claimed_by = t.claimed_by;
  return i;
}

}  // namespace kjit::ipc
