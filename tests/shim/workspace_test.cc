// The shim's per-stream workspaces (shim/workspace.h), with a fake allocator.
#include "workspace.h"

#include <gtest/gtest.h>

#include <map>
#include <set>

namespace kjit::shim {
namespace {

// Hands out distinct fake addresses and counts live buffers.
struct FakeAllocator {
  CUdeviceptr next = 0x10000;
  int live = 0;
  std::vector<std::pair<CUstream, uint64_t>> calls;
  bool fail = false;
  WorkspacePool::Allocator fn() {
    return [this](int, CUstream stream, uint64_t bytes) -> Result<WorkspacePool::Buffer> {
      if (fail) return Status(StatusCode::kUnavailable, "out of memory");
      calls.push_back({stream, bytes});
      ++live;
      WorkspacePool::Buffer b;
      b.ptr = next;
      next += bytes + 0x1000;
      b.bytes = bytes;
      b.owner = std::shared_ptr<void>(nullptr, [this](void*) { --live; });
      return b;
    };
  }
};

CUstream S(uintptr_t v) { return reinterpret_cast<CUstream>(v); }

TEST(WorkspacePool, ReusesOneZeroedBufferPerStream) {
  FakeAllocator a;
  WorkspacePool pool(a.fn());
  CUdeviceptr seen[3] = {};
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(pool.Run(0, S(1), 100, [&](CUdeviceptr p) {
                      seen[i] = p;
                      return Status::Ok();
                    }).ok());
  }
  EXPECT_NE(seen[0], 0u);
  EXPECT_EQ(seen[0], seen[1]);
  EXPECT_EQ(seen[1], seen[2]);
  ASSERT_EQ(a.calls.size(), 1u);
  EXPECT_EQ(a.calls[0].second, WorkspacePool::kGranule);  // rounded up
  // A smaller request on the same stream shares it too.
  CUdeviceptr small = 0;
  ASSERT_TRUE(pool.Run(0, S(1), 8, [&](CUdeviceptr p) { small = p; return Status::Ok(); }).ok());
  EXPECT_EQ(small, seen[0]);
  EXPECT_EQ(pool.allocations(), 1u);
}

TEST(WorkspacePool, StreamsAndDevicesGetTheirOwn) {
  FakeAllocator a;
  WorkspacePool pool(a.fn());
  std::map<std::pair<int, uintptr_t>, CUdeviceptr> got;
  for (int device : {0, 1}) {
    for (uintptr_t stream : {0u, 7u}) {  // the null stream is per device
      ASSERT_TRUE(pool.Run(device, S(stream), 64, [&](CUdeviceptr p) {
                        got[{device, stream}] = p;
                        return Status::Ok();
                      }).ok());
    }
  }
  EXPECT_EQ(pool.buffers(), 4u);
  std::set<CUdeviceptr> distinct;
  for (const auto& [k, p] : got) distinct.insert(p);
  EXPECT_EQ(distinct.size(), 4u);
}

TEST(WorkspacePool, GrowsByReplacingTheBuffer) {
  FakeAllocator a;
  WorkspacePool pool(a.fn());
  CUdeviceptr first = 0, second = 0;
  ASSERT_TRUE(pool.Run(0, S(1), 100, [&](CUdeviceptr p) { first = p; return Status::Ok(); }).ok());
  ASSERT_TRUE(pool.Run(0, S(1), 3 * WorkspacePool::kGranule + 1, [&](CUdeviceptr p) {
                    second = p;
                    return Status::Ok();
                  }).ok());
  EXPECT_NE(first, second);
  EXPECT_EQ(a.calls.back().second, 4 * WorkspacePool::kGranule);
  EXPECT_EQ(a.live, 1);  // the smaller one was released
  EXPECT_EQ(pool.buffers(), 1u);
}

TEST(WorkspacePool, AFailedLaunchDropsTheBuffer) {
  FakeAllocator a;
  WorkspacePool pool(a.fn());
  CUdeviceptr first = 0, after = 0;
  Status s = pool.Run(0, S(1), 100, [&](CUdeviceptr p) {
    first = p;
    return Status(StatusCode::kCudaError, "cuLaunchKernel: CUDA_ERROR_LAUNCH_FAILED");
  });
  EXPECT_EQ(s.code(), StatusCode::kCudaError);
  EXPECT_EQ(a.live, 0);  // not kept: the kernel may have left it non-zero
  EXPECT_EQ(pool.buffers(), 0u);
  ASSERT_TRUE(pool.Run(0, S(1), 100, [&](CUdeviceptr p) { after = p; return Status::Ok(); }).ok());
  EXPECT_NE(after, first);  // a new, zeroed one
  EXPECT_EQ(pool.allocations(), 2u);
}

// The pool's lock is not held across a launch: a launch on one stream may run while another
// thread grows, replaces or drops buffers; the buffer being launched with stays allocated
// until its launch returns, and a failed launch drops only the buffer it was given.
TEST(WorkspacePool, ABufferOutlivesItsReplacementDuringALaunch) {
  FakeAllocator a;
  WorkspacePool pool(a.fn());
  CUdeviceptr outer = 0, inner = 0;
  Status s = pool.Run(0, S(1), 100, [&](CUdeviceptr p) {
    outer = p;
    // Another launch on the same stream that needs a larger workspace replaces the buffer
    // (and fails, dropping its own new one).
    EXPECT_TRUE(pool.Run(0, S(1), 3 * WorkspacePool::kGranule, [&](CUdeviceptr q) {
                      inner = q;
                      return Status::Ok();
                    }).ok());
    EXPECT_EQ(a.live, 2) << "the replaced buffer stays allocated while a launch holds it";
    return Status(StatusCode::kCudaError, "cuLaunchKernel: CUDA_ERROR_LAUNCH_FAILED");
  });
  EXPECT_FALSE(s.ok());
  EXPECT_NE(outer, inner);
  EXPECT_EQ(a.live, 1) << "the replaced buffer is freed once its launch returned";
  EXPECT_EQ(pool.buffers(), 1u) << "the failed launch's buffer was already replaced: the new one stays";
  CUdeviceptr again = 0;
  ASSERT_TRUE(pool.Run(0, S(1), 100, [&](CUdeviceptr p) { again = p; return Status::Ok(); }).ok());
  EXPECT_EQ(again, inner);
}

// A program that makes a stream per request: the pool keeps kMaxStreams buffers, the least recently used
// stream's going first; a stream in steady use keeps its buffer.
TEST(WorkspacePool, HoldsAtMostMaxStreamsBuffersDroppingTheLeastRecentlyUsed) {
  FakeAllocator a;
  WorkspacePool pool(a.fn());
  CUdeviceptr hot = 0;
  auto run = [&](uintptr_t stream, CUdeviceptr* seen = nullptr) {
    ASSERT_TRUE(pool.Run(0, S(stream), 64, [&](CUdeviceptr p) {
                      if (seen != nullptr) *seen = p;
                      return Status::Ok();
                    }).ok());
  };
  run(1, &hot);
  for (uintptr_t s = 100; s < 100 + 3 * WorkspacePool::kMaxStreams; ++s) {
    run(s);
    CUdeviceptr again = 0;
    run(1, &again);  // stream 1 launches between every new stream's
    EXPECT_EQ(again, hot) << "the stream in steady use lost its buffer at stream " << s;
  }
  EXPECT_EQ(pool.buffers(), WorkspacePool::kMaxStreams);
  EXPECT_EQ(a.live, static_cast<int>(WorkspacePool::kMaxStreams)) << "evicted buffers are released";
  EXPECT_EQ(pool.evictions(), 3 * WorkspacePool::kMaxStreams + 1 - WorkspacePool::kMaxStreams);
}

TEST(WorkspacePool, AllocationFailureIsReturnedAndNothingLaunches) {
  FakeAllocator a;
  a.fail = true;
  WorkspacePool pool(a.fn());
  bool launched = false;
  Status s = pool.Run(0, S(1), 100, [&](CUdeviceptr) {
    launched = true;
    return Status::Ok();
  });
  EXPECT_FALSE(s.ok());
  EXPECT_FALSE(launched);
  EXPECT_FALSE(pool.Run(0, S(1), 0, [&](CUdeviceptr) { return Status::Ok(); }).ok());
}

}  // namespace
}  // namespace kjit::shim
