// Workspaces for cached kernels that take one (kernel ABI v2, daemon/worker_protocol.h).
//
// One buffer per (device, stream), zeroed once when it is allocated and reused
// by every later launch of any workspace kernel on that stream: the ABI has the
// kernel leave it zeroed, and launches on one stream run one after another, so
// no launch meets another's bytes. A larger request replaces the buffer by a
// larger one; the old one goes back to its allocator (PyTorch's caching
// allocator in the adapter, whose blocks are reused on the same stream only,
// after the work queued before the free). After a failed launch the stream's
// buffer is dropped (the kernel may have left garbage) and the next launch gets
// a new, zeroed one.
//
// Torch-free: the adapter supplies the allocator (at::empty on the stream,
// then a memset on the stream), so this logic is unit-tested without a GPU.
// The hit path is a mutex and a scan of a few entries, and only launches of
// workspace kernels take it. The mutex is not held across the launch (threads
// launching on other streams do not wait for each other's launches): the
// launching thread holds a reference to the buffer's owner instead, so that a
// thread that replaces or drops the buffer meanwhile does not free it before
// the launch is queued. Freed after that, it goes back to PyTorch's caching
// allocator behind the launch on its stream, as any tensor freed after use.
//
// Bounded: at most kMaxStreams buffers are held. A program that makes streams as it goes (one per request,
// say) would otherwise keep a buffer for every stream it ever launched a workspace kernel on; the buffer of
// the stream that launched one least recently goes when a new stream needs one, released as above.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "kjit/runtime/driver.h"
#include "kjit/runtime/status.h"

namespace kjit::shim {

class WorkspacePool {
 public:
  // Device memory of at least the requested size, all zero once the work
  // queued on the stream so far has run. `owner` keeps it allocated.
  struct Buffer {
    CUdeviceptr ptr = 0;
    uint64_t bytes = 0;
    std::shared_ptr<void> owner;
  };
  using Allocator = std::function<Result<Buffer>(int device, CUstream stream, uint64_t bytes)>;

  explicit WorkspacePool(Allocator allocate) : allocate_(std::move(allocate)) {}

  // Calls launch(workspace pointer) with the stream's buffer, allocated or grown
  // first if it is smaller than `bytes`. If launch fails, the buffer is dropped.
  template <typename Launch>
  Status Run(int device, CUstream stream, uint64_t bytes, Launch&& launch) {
    CUdeviceptr ptr = 0;
    std::shared_ptr<void> hold;  // keeps the buffer allocated until the launch is queued
    {
      std::lock_guard lock(mutex_);
      KJIT_ASSIGN_OR_RETURN(const Buffer* buffer, AcquireLocked(device, stream, bytes));
      ptr = buffer->ptr;
      hold = buffer->owner;
    }
    Status s = launch(ptr);
    if (!s.ok()) {
      std::lock_guard lock(mutex_);
      DropLocked(device, stream, ptr);
    }
    return s;
  }

  // Buffers held now, allocations made so far, and buffers released to stay within kMaxStreams (for tests
  // and logs).
  size_t buffers() const;
  uint64_t allocations() const;
  uint64_t evictions() const;

  // Sizes are rounded up to this, so that slightly different workspaces share one buffer.
  static constexpr uint64_t kGranule = 4096;
  // Buffers held at most: one per (device, stream) of the streams used most recently.
  static constexpr size_t kMaxStreams = 32;

 private:
  struct Slot {
    int device;
    CUstream stream;
    Buffer buffer;
    uint64_t last_use = 0;  // use_clock_ at the slot's latest launch
  };
  Result<const Buffer*> AcquireLocked(int device, CUstream stream, uint64_t bytes);
  // Drops the stream's buffer if it is still the one at `ptr` (another thread may have replaced it).
  void DropLocked(int device, CUstream stream, CUdeviceptr ptr);

  Allocator allocate_;
  mutable std::mutex mutex_;
  std::vector<Slot> slots_;
  uint64_t allocations_ = 0;
  uint64_t evictions_ = 0;
  uint64_t use_clock_ = 0;
};

}  // namespace kjit::shim
