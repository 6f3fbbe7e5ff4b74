#include "workspace.h"

#include <algorithm>

namespace kjit::shim {

Result<const WorkspacePool::Buffer*> WorkspacePool::AcquireLocked(int device, CUstream stream, uint64_t bytes) {
  if (bytes == 0) return InvalidArgument("a workspace of 0 bytes");
  auto it = std::find_if(slots_.begin(), slots_.end(),
                         [&](const Slot& s) { return s.device == device && s.stream == stream; });
  const uint64_t now = ++use_clock_;
  if (it != slots_.end()) it->last_use = now;
  if (it != slots_.end() && it->buffer.bytes >= bytes) return &it->buffer;
  const uint64_t want = (bytes + kGranule - 1) / kGranule * kGranule;
  KJIT_ASSIGN_OR_RETURN(Buffer buffer, allocate_(device, stream, want));
  if (buffer.ptr == 0 || buffer.bytes < bytes) return Internal("the workspace allocator returned too little");
  ++allocations_;
  if (it != slots_.end()) {
    it->buffer = std::move(buffer);  // the old one is released after the work queued on this stream
    return &it->buffer;
  }
  if (slots_.size() >= kMaxStreams) {
    // The least recently used stream's buffer goes (released behind the work queued on its stream).
    auto oldest = std::min_element(slots_.begin(), slots_.end(),
                                   [](const Slot& a, const Slot& b) { return a.last_use < b.last_use; });
    slots_.erase(oldest);
    ++evictions_;
  }
  slots_.push_back(Slot{device, stream, std::move(buffer), now});
  return &slots_.back().buffer;
}

void WorkspacePool::DropLocked(int device, CUstream stream, CUdeviceptr ptr) {
  std::erase_if(slots_,
                [&](const Slot& s) { return s.device == device && s.stream == stream && s.buffer.ptr == ptr; });
}

size_t WorkspacePool::buffers() const {
  std::lock_guard lock(mutex_);
  return slots_.size();
}

uint64_t WorkspacePool::allocations() const {
  std::lock_guard lock(mutex_);
  return allocations_;
}

uint64_t WorkspacePool::evictions() const {
  std::lock_guard lock(mutex_);
  return evictions_;
}

}  // namespace kjit::shim
