// The protocol's view of a task in the cache's queue.
#pragma once

#include "kjit/cache/kernel_cache.h"
#include "kjit/ipc/messages.h"

namespace kjit::ipc {

// Converts a queued task as the cache stores it into the TaskInfo kjitd sends;
// the key is shown in its text form ("(undecodable key)" if it does not decode).
TaskInfo ToTaskInfo(const cache::Task& task);

}  // namespace kjit::ipc
