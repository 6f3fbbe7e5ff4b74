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
  return i;
}

}  // namespace kjit::ipc
