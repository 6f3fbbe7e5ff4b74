// The task queue, measurement log and checkpoint store kept in a cache file,
// over the connection the kernel store opened (and migrated). Internal to cache/.
#pragma once

#include <memory>

#include "connection.h"
#include "kjit/cache/checkpoint_store.h"
#include "kjit/cache/measurement_log.h"
#include "kjit/cache/task_queue.h"

namespace kjit::cache {

// Each keeps a reference to `connection`, which must outlive it.
std::unique_ptr<TaskQueue> NewSqliteTaskQueue(Connection& connection);
std::unique_ptr<MeasurementLog> NewSqliteMeasurementLog(Connection& connection);
std::unique_ptr<CheckpointStore> NewSqliteCheckpointStore(Connection& connection);

}  // namespace kjit::cache
