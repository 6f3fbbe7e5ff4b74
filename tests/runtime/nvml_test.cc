#include "kjit/runtime/nvml.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <thread>

#include "kjit/runtime/nvml_abi.h"

namespace kjit {
namespace {

namespace abi = nvml_abi;

// --- A fake NVML, handed to Nvml::LoadWith, so every path runs without a GPU.

struct FakeGpu {
  std::string uuid;
  abi::Return utilization_rc = abi::kSuccess;
  abi::Utilization utilization{};
  abi::Return memory_rc = abi::kSuccess;
  abi::Memory memory{};
  abi::Return processes_rc = abi::kSuccess;
  std::vector<abi::ProcessInfo> processes;
  bool process_starts_between_calls = false;  // one more process appears after the size query
  abi::Return samples_rc = abi::kSuccess;
  std::vector<abi::ProcessUtilizationSample> samples;
  bool samples_ignore_since = false;  // returns samples older than asked for
};

struct FakeNvml {
  abi::Return init_rc = abi::kSuccess;
  std::atomic<int> init_calls{0};
  std::atomic<int> shutdown_calls{0};
  std::vector<FakeGpu> gpus;
  std::set<std::string> missing_symbols;
  std::atomic<unsigned long long> last_since{0};
};

FakeNvml* g_fake = nullptr;

FakeGpu* Gpu(abi::Device d) { return reinterpret_cast<FakeGpu*>(d); }

abi::Return FakeInit() {
  ++g_fake->init_calls;
  return g_fake->init_rc;
}
abi::Return FakeShutdown() {
  ++g_fake->shutdown_calls;
  return abi::kSuccess;
}
const char* FakeErrorString(abi::Return r) {
  switch (r) {
    case abi::kErrorNotFound: return "Not Found";
    case abi::kErrorInvalidArgument: return "Invalid Argument";
    default: return "Fake Error";
  }
}
abi::Return FakeGetCount(unsigned int* count) {
  *count = static_cast<unsigned int>(g_fake->gpus.size());
  return abi::kSuccess;
}
abi::Return FakeByIndex(unsigned int index, abi::Device* d) {
  if (index >= g_fake->gpus.size()) return abi::kErrorInvalidArgument;
  *d = reinterpret_cast<abi::Device>(&g_fake->gpus[index]);
  return abi::kSuccess;
}
abi::Return FakeByUuid(const char* uuid, abi::Device* d) {
  for (auto& g : g_fake->gpus) {
    if (g.uuid == uuid) {
      *d = reinterpret_cast<abi::Device>(&g);
      return abi::kSuccess;
    }
  }
  return abi::kErrorNotFound;
}
abi::Return FakeUuid(abi::Device d, char* buf, unsigned int length) {
  std::snprintf(buf, length, "%s", Gpu(d)->uuid.c_str());
  return abi::kSuccess;
}
abi::Return FakeUtilization(abi::Device d, abi::Utilization* u) {
  if (Gpu(d)->utilization_rc != abi::kSuccess) return Gpu(d)->utilization_rc;
  *u = Gpu(d)->utilization;
  return abi::kSuccess;
}
abi::Return FakeMemory(abi::Device d, abi::Memory* m) {
  if (Gpu(d)->memory_rc != abi::kSuccess) return Gpu(d)->memory_rc;
  *m = Gpu(d)->memory;
  return abi::kSuccess;
}
// Follows nvml.h: NOT_FOUND when no sample is newer than `since`, else the
// size query / fill protocol.
abi::Return FakeProcessUtilization(abi::Device d, abi::ProcessUtilizationSample* buf, unsigned int* count,
                                   unsigned long long since) {
  g_fake->last_since = since;
  FakeGpu* g = Gpu(d);
  if (g->samples_rc != abi::kSuccess) return g->samples_rc;
  std::vector<abi::ProcessUtilizationSample> newer;
  for (const auto& s : g->samples) {
    if (g->samples_ignore_since || s.timeStamp > since) newer.push_back(s);
  }
  if (newer.empty()) return abi::kErrorNotFound;
  if (buf == nullptr || *count < newer.size()) {
    *count = static_cast<unsigned int>(newer.size());
    return abi::kErrorInsufficientSize;
  }
  std::copy(newer.begin(), newer.end(), buf);
  *count = static_cast<unsigned int>(newer.size());
  return abi::kSuccess;
}
abi::Return FakeComputeProcesses(abi::Device d, unsigned int* count, abi::ProcessInfo* buf) {
  FakeGpu* g = Gpu(d);
  if (g->processes_rc != abi::kSuccess) return g->processes_rc;
  if (*count < g->processes.size()) {
    *count = static_cast<unsigned int>(g->processes.size());
    if (g->process_starts_between_calls) {
      g->process_starts_between_calls = false;
      g->processes.push_back({9999, 1, 0xFFFFFFFF, 0xFFFFFFFF});
    }
    return abi::kErrorInsufficientSize;
  }
  std::copy(g->processes.begin(), g->processes.end(), buf);
  *count = static_cast<unsigned int>(g->processes.size());
  return abi::kSuccess;
}

// The fakes must have exactly the ABI's types: this does not compile otherwise.
template <typename Pointer>
void* Entry(Pointer p) {
  return reinterpret_cast<void*>(p);
}
#define KJIT_FAKE_(symbol, fake) \
  { #symbol, Entry < decltype(abi::Api::symbol)>(&fake) }

void* ResolveFake(const char* symbol) {
  static const std::map<std::string, void*> table = {
      KJIT_FAKE_(nvmlInit_v2, FakeInit),
      KJIT_FAKE_(nvmlShutdown, FakeShutdown),
      KJIT_FAKE_(nvmlErrorString, FakeErrorString),
      KJIT_FAKE_(nvmlDeviceGetCount_v2, FakeGetCount),
      KJIT_FAKE_(nvmlDeviceGetHandleByIndex_v2, FakeByIndex),
      KJIT_FAKE_(nvmlDeviceGetHandleByUUID, FakeByUuid),
      KJIT_FAKE_(nvmlDeviceGetUUID, FakeUuid),
      KJIT_FAKE_(nvmlDeviceGetUtilizationRates, FakeUtilization),
      KJIT_FAKE_(nvmlDeviceGetMemoryInfo, FakeMemory),
      KJIT_FAKE_(nvmlDeviceGetProcessUtilization, FakeProcessUtilization),
      KJIT_FAKE_(nvmlDeviceGetComputeRunningProcesses_v3, FakeComputeProcesses),
  };
  if (g_fake->missing_symbols.count(symbol) != 0) return nullptr;
  auto it = table.find(symbol);
  return it == table.end() ? nullptr : it->second;
}

unsigned long long NowMicros() {
  return static_cast<unsigned long long>(
      std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count());
}

constexpr uint64_t kGiB = 1ull << 30;

class FakeNvmlTest : public ::testing::Test {
 protected:
  void SetUp() override {
    g_fake = &fake_;
    FakeGpu a;
    a.uuid = "GPU-00000000-1111-2222-3333-444444444444";
    a.utilization = {37, 12};
    a.memory = {80 * kGiB, 60 * kGiB, 20 * kGiB};
    a.processes = {
        {300, kGiB, 0xFFFFFFFF, 0xFFFFFFFF}, {100, kGiB, 0xFFFFFFFF, 0xFFFFFFFF}, {300, kGiB, 0xFFFFFFFF, 0xFFFFFFFF}};
    const unsigned long long now = NowMicros();
    a.samples = {{100, now - 100'000, 30, 0, 0, 0},     // kjit's worker, to be excluded
                 {200, now - 200'000, 5, 0, 0, 0},      // someone else
                 {300, now - 300'000, 2, 0, 0, 0},      // someone else, twice:
                 {300, now - 150'000, 4, 0, 0, 0},      //   the busier sample stands
                 {400, now - 5'000'000, 50, 0, 0, 0}};  // long ago: outside the default 1 s window
    FakeGpu b;
    b.uuid = "GPU-bbbbbbbb-1111-2222-3333-444444444444";
    b.memory = {16 * kGiB, 16 * kGiB, 0};
    fake_.gpus = {a, b};
  }
  void TearDown() override { g_fake = nullptr; }

  std::shared_ptr<Nvml> Load() {
    auto n = Nvml::LoadWith(ResolveFake, "fake-nvml");
    EXPECT_TRUE(n.ok()) << n.status().ToString();
    return n.ok() ? *n : nullptr;
  }

  FakeNvml fake_;
};

TEST_F(FakeNvmlTest, InitAndShutdownArePaired) {
  {
    auto first = Load();
    auto second = Load();
    ASSERT_TRUE(first && second);
    EXPECT_EQ(first->device_count(), 2u);
    EXPECT_EQ(first->library(), "fake-nvml");
    EXPECT_EQ(fake_.init_calls, 2);
    EXPECT_EQ(fake_.shutdown_calls, 0);
    first.reset();
    EXPECT_EQ(fake_.shutdown_calls, 1);
  }
  EXPECT_EQ(fake_.shutdown_calls, 2);
}

TEST_F(FakeNvmlTest, MissingEntryPointIsDriverTooOld) {
  fake_.missing_symbols = {"nvmlDeviceGetComputeRunningProcesses_v3"};
  auto n = Nvml::LoadWith(ResolveFake, "old-nvml");
  ASSERT_FALSE(n.ok());
  EXPECT_EQ(n.status().code(), StatusCode::kDriverTooOld);
  EXPECT_NE(n.status().message().find("nvmlDeviceGetComputeRunningProcesses_v3"), std::string::npos);
  EXPECT_NE(n.status().message().find("old-nvml"), std::string::npos);
  EXPECT_EQ(fake_.init_calls, 0);
}

TEST_F(FakeNvmlTest, InitFailuresAreTypedAndNotShutDown) {
  const std::pair<abi::Return, StatusCode> cases[] = {
      {abi::kErrorDriverNotLoaded, StatusCode::kNoDriver}, {abi::kErrorLibRmVersionMismatch, StatusCode::kNoDriver},
      {abi::kErrorNoPermission, StatusCode::kNoDevice},    {abi::kErrorTimeout, StatusCode::kUnavailable},
      {abi::kErrorUnknown, StatusCode::kNoDriver},
  };
  for (const auto& [rc, code] : cases) {
    fake_.init_rc = rc;
    auto n = Nvml::LoadWith(ResolveFake, "fake-nvml");
    ASSERT_FALSE(n.ok());
    EXPECT_EQ(n.status().code(), code) << rc << ": " << n.status().ToString();
    EXPECT_NE(n.status().message().find("nvmlInit"), std::string::npos);
  }
  EXPECT_EQ(fake_.shutdown_calls, 0);
}

TEST_F(FakeNvmlTest, NoGpuIsNoDeviceAndStillShutsDown) {
  fake_.gpus.clear();
  auto n = Nvml::LoadWith(ResolveFake, "fake-nvml");
  ASSERT_FALSE(n.ok());
  EXPECT_EQ(n.status().code(), StatusCode::kNoDevice);
  EXPECT_EQ(fake_.init_calls, 1);
  EXPECT_EQ(fake_.shutdown_calls, 1);
}

TEST_F(FakeNvmlTest, SampleReadsEveryFigure) {
  auto nvml = Load();
  ASSERT_TRUE(nvml);
  SampleOptions options;
  options.exclude_pids = {100};
  auto s = nvml->Sample("0", options);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->uuid, "GPU-00000000-1111-2222-3333-444444444444");
  EXPECT_EQ(s->utilization_percent, 37);
  EXPECT_EQ(s->memory_total_bytes, 80 * kGiB);
  EXPECT_EQ(s->memory_free_bytes, 60 * kGiB);
  EXPECT_EQ(s->compute_pids, (std::vector<uint32_t>{100, 300}));  // sorted, once each
  EXPECT_EQ(s->others_utilization_percent, 5 + 4);                // pid 200, and pid 300's busier sample

  // Without the exclusion, the worker's own 30% counts.
  auto all = nvml->Sample("0");
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->others_utilization_percent, 30 + 5 + 4);
}

TEST_F(FakeNvmlTest, SampleByUuidMatchesSampleByIndex) {
  auto nvml = Load();
  ASSERT_TRUE(nvml);
  auto by_uuid = nvml->Sample("GPU-bbbbbbbb-1111-2222-3333-444444444444");
  ASSERT_TRUE(by_uuid.ok()) << by_uuid.status().ToString();
  EXPECT_EQ(by_uuid->uuid, "GPU-bbbbbbbb-1111-2222-3333-444444444444");
  EXPECT_EQ(by_uuid->memory_total_bytes, 16 * kGiB);
  EXPECT_TRUE(by_uuid->compute_pids.empty());
  EXPECT_EQ(by_uuid->others_utilization_percent, 0);  // NOT_FOUND: nobody ran a kernel
}

TEST_F(FakeNvmlTest, UnknownDevicesAreNoDevice) {
  auto nvml = Load();
  ASSERT_TRUE(nvml);
  auto index = nvml->Sample("2");
  ASSERT_FALSE(index.ok());
  EXPECT_EQ(index.status().code(), StatusCode::kNoDevice);
  EXPECT_NE(index.status().message().find("CUDA_VISIBLE_DEVICES"), std::string::npos) << index.status().message();
  EXPECT_NE(index.status().message().find("sees 2 GPU"), std::string::npos) << index.status().message();

  auto uuid = nvml->Sample("GPU-not-there");
  ASSERT_FALSE(uuid.ok());
  EXPECT_EQ(uuid.status().code(), StatusCode::kNoDevice);
  EXPECT_NE(uuid.status().message().find("GPU-not-there"), std::string::npos);

  auto huge = nvml->Sample("99999999999999999999");  // not an index: looked up as a UUID, not wrapped around
  EXPECT_EQ(huge.status().code(), StatusCode::kNoDevice);

  EXPECT_EQ(nvml->Sample("").status().code(), StatusCode::kInvalidArgument);
}

TEST_F(FakeNvmlTest, ProcessUtilizationWindow) {
  auto nvml = Load();
  ASSERT_TRUE(nvml);
  const unsigned long long before = NowMicros();
  auto s = nvml->Sample("0");
  ASSERT_TRUE(s.ok());
  // NVML was asked for samples newer than now - 1 s (the default window)...
  EXPECT_GE(fake_.last_since.load(), before - 1'000'000);
  EXPECT_LE(fake_.last_since.load(), NowMicros() - 1'000'000);
  // ...which leaves out pid 400's sample from 5 s ago.
  EXPECT_EQ(s->others_utilization_percent, 30 + 5 + 4);

  SampleOptions wide;
  wide.window = std::chrono::seconds(10);
  auto w = nvml->Sample("0", wide);
  ASSERT_TRUE(w.ok());
  EXPECT_EQ(w->others_utilization_percent, 30 + 5 + 4 + 50);

  // A driver that hands back older samples anyway does not make them count.
  fake_.gpus[0].samples_ignore_since = true;
  auto again = nvml->Sample("0");
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->others_utilization_percent, 30 + 5 + 4);
}

TEST_F(FakeNvmlTest, OthersUtilizationIsCappedAt100) {
  const unsigned long long now = NowMicros();
  fake_.gpus[0].samples = {{1, now, 80, 0, 0, 0}, {2, now, 70, 0, 0, 0}};
  auto nvml = Load();
  ASSERT_TRUE(nvml);
  auto s = nvml->Sample("0");
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->others_utilization_percent, 100);
}

// exclude_descendants: a process NVML reports counts as kjit's when its parent is an excluded one (here this
// test stands for a worker's child, its parent for the worker); without the flag, only the listed pids.
TEST_F(FakeNvmlTest, DescendantsOfExcludedProcessesAreExcludedWhenAsked) {
  const unsigned long long now = NowMicros();
  const auto self = static_cast<unsigned int>(getpid());
  fake_.gpus[0].samples = {{self, now, 40, 0, 0, 0}, {2, now, 7, 0, 0, 0}};
  auto nvml = Load();
  ASSERT_TRUE(nvml);
  SampleOptions options;
  options.exclude_pids = {static_cast<uint32_t>(getppid())};
  auto listed_only = nvml->Sample("0", options);
  ASSERT_TRUE(listed_only.ok());
  EXPECT_EQ(listed_only->others_utilization_percent, 40 + 7);
  options.exclude_descendants = true;
  auto with_descendants = nvml->Sample("0", options);
  ASSERT_TRUE(with_descendants.ok());
  EXPECT_EQ(with_descendants->others_utilization_percent, 7);
}

TEST_F(FakeNvmlTest, UnsupportedFiguresAreUnknownNotErrors) {
  fake_.gpus[0].utilization_rc = abi::kErrorNotSupported;  // e.g. a MIG instance
  fake_.gpus[0].samples_rc = abi::kErrorNotSupported;
  fake_.gpus[0].processes_rc = abi::kErrorNoPermission;
  auto nvml = Load();
  ASSERT_TRUE(nvml);
  auto s = nvml->Sample("0");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_LT(s->utilization_percent, 0);
  EXPECT_LT(s->others_utilization_percent, 0);
  EXPECT_TRUE(s->compute_pids.empty());
  EXPECT_EQ(s->memory_total_bytes, 80 * kGiB);

  // Any failure of the per-process query only makes that figure unknown.
  fake_.gpus[0].samples_rc = abi::kErrorUnknown;
  auto t = nvml->Sample("0");
  ASSERT_TRUE(t.ok());
  EXPECT_LT(t->others_utilization_percent, 0);
}

TEST_F(FakeNvmlTest, QueryFailuresAreTyped) {
  auto nvml = Load();
  ASSERT_TRUE(nvml);
  fake_.gpus[0].memory_rc = abi::kErrorTimeout;
  auto busy = nvml->Sample("0");
  EXPECT_EQ(busy.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(busy.status().message().find("nvmlDeviceGetMemoryInfo"), std::string::npos);

  fake_.gpus[0].memory_rc = abi::kErrorGpuIsLost;
  EXPECT_EQ(nvml->Sample("0").status().code(), StatusCode::kNoDevice);

  fake_.gpus[0].memory_rc = abi::kSuccess;
  fake_.gpus[0].utilization_rc = abi::kErrorUnknown;
  EXPECT_EQ(nvml->Sample("0").status().code(), StatusCode::kUnavailable);

  fake_.gpus[0].utilization_rc = abi::kSuccess;
  fake_.gpus[0].processes_rc = abi::kErrorInUse;
  EXPECT_EQ(nvml->Sample("0").status().code(), StatusCode::kUnavailable);
}

TEST_F(FakeNvmlTest, ProcessStartingBetweenSizeAndFillIsSeen) {
  fake_.gpus[0].process_starts_between_calls = true;
  auto nvml = Load();
  ASSERT_TRUE(nvml);
  auto s = nvml->Sample("0");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->compute_pids, (std::vector<uint32_t>{100, 300, 9999}));
}

TEST_F(FakeNvmlTest, ConcurrentSamples) {
  auto nvml = Load();
  ASSERT_TRUE(nvml);
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 200; ++i) {
        auto s = nvml->Sample(t % 2 == 0 ? "0" : "GPU-bbbbbbbb-1111-2222-3333-444444444444");
        if (!s.ok() || s->memory_total_bytes == 0) ++failures;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures, 0);
}

// --- The real loader.

class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    const char* old = std::getenv(name);
    if (old != nullptr) old_ = old;
    setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (old_) {
      setenv(name_, old_->c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

TEST(Nvml, MissingLibraryIsNoDriver) {
  auto n = Nvml::Load("/nonexistent/libnvidia-ml.so.1");
  ASSERT_FALSE(n.ok());
  EXPECT_EQ(n.status().code(), StatusCode::kNoDriver);
  EXPECT_NE(n.status().message().find("/nonexistent/libnvidia-ml.so.1"), std::string::npos);
}

TEST(Nvml, EnvironmentNamesTheLibrary) {
  ScopedEnv env("KJIT_NVML_LIBRARY", "/nonexistent/from-env/libnvidia-ml.so");
  auto n = Nvml::Load();
  ASSERT_FALSE(n.ok());
  EXPECT_EQ(n.status().code(), StatusCode::kNoDriver);
  EXPECT_NE(n.status().message().find("/nonexistent/from-env/"), std::string::npos) << n.status().message();
}

TEST(Nvml, LibraryWithoutNvmlIsDriverTooOld) {
  // A real shared library that loads but has no NVML in it.
  std::ifstream probe(KJIT_STUB_DRIVER);
  if (!probe) GTEST_SKIP() << "the CUDA toolkit here has no stub driver at " KJIT_STUB_DRIVER;
  auto n = Nvml::Load(KJIT_STUB_DRIVER);
  ASSERT_FALSE(n.ok());
  EXPECT_EQ(n.status().code(), StatusCode::kDriverTooOld) << n.status().ToString();
  EXPECT_NE(n.status().message().find("nvmlInit_v2"), std::string::npos);
}

TEST(Nvml, RealNvmlSamplesEveryGpu) {
  auto loaded = Nvml::Load();
  if (!loaded.ok()) {
    const StatusCode c = loaded.status().code();
    ASSERT_TRUE(c == StatusCode::kNoDriver || c == StatusCode::kNoDevice) << loaded.status().ToString();
    GTEST_SKIP() << "no usable NVML here: " << loaded.status().ToString();
  }
  const auto& nvml = *loaded;
  ASSERT_GE(nvml->device_count(), 1u);
  SampleOptions options;
  options.exclude_pids = {static_cast<uint32_t>(getpid())};
  for (unsigned i = 0; i < nvml->device_count(); ++i) {
    auto s = nvml->Sample(std::to_string(i), options);
    ASSERT_TRUE(s.ok()) << i << ": " << s.status().ToString();
    EXPECT_TRUE(s->uuid.rfind("GPU-", 0) == 0 || s->uuid.rfind("MIG-", 0) == 0) << s->uuid;
    EXPECT_GT(s->memory_total_bytes, 0u);
    EXPECT_LE(s->memory_free_bytes, s->memory_total_bytes);
    EXPECT_LE(s->utilization_percent, 100);
    EXPECT_LE(s->others_utilization_percent, 100);
    auto again = nvml->Sample(s->uuid, options);
    ASSERT_TRUE(again.ok()) << again.status().ToString();
    EXPECT_EQ(again->uuid, s->uuid);
    EXPECT_EQ(again->memory_total_bytes, s->memory_total_bytes);
    std::printf("  %s: %.0f%% busy, others %.0f%%, %llu of %llu MiB free, %zu compute process(es)\n", s->uuid.c_str(),
                s->utilization_percent, s->others_utilization_percent,
                static_cast<unsigned long long>(s->memory_free_bytes >> 20),
                static_cast<unsigned long long>(s->memory_total_bytes >> 20), s->compute_pids.size());
  }
  EXPECT_EQ(nvml->Sample(std::to_string(nvml->device_count())).status().code(), StatusCode::kNoDevice);
  EXPECT_EQ(nvml->Sample("GPU-00000000-0000-0000-0000-000000000000").status().code(), StatusCode::kNoDevice);
}

// A worker's descendants are kjit's too (compute-sanitizer and its target): a shell and the sleep it starts,
// below a process of ours, are found (runtime/nvml.h, for SampleOptions::exclude_descendants); this test and its
// parent are not.
TEST(DescendsFrom, DescendantsOfKjitsProcessesAreFound) {
  char path[] = "/tmp/kjit-descendants-XXXXXX";
  const int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  close(fd);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    setpgid(0, 0);
    const std::string script = std::string("sleep 30 & echo $! > ") + path + "; wait";
    execl("/bin/sh", "sh", "-c", script.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  uint32_t grandchild = 0;
  for (int i = 0; i < 200 && grandchild == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    std::ifstream in(path);
    in >> grandchild;
  }
  const std::vector<uint32_t> ours = {static_cast<uint32_t>(child)};
  const bool grandchild_found = grandchild != 0 && DescendsFrom(grandchild, ours);
  const bool self_found = DescendsFrom(static_cast<uint32_t>(getpid()), ours);
  const bool parent_found = DescendsFrom(static_cast<uint32_t>(getppid()), ours);
  const bool without_ancestors = grandchild != 0 && DescendsFrom(grandchild, {});
  kill(-child, SIGKILL);
  waitpid(child, nullptr, 0);
  unlink(path);
  ASSERT_NE(grandchild, 0u) << "the shell did not start its child";
  EXPECT_TRUE(grandchild_found) << "the shell's child";
  EXPECT_FALSE(self_found);
  EXPECT_FALSE(parent_found);
  EXPECT_FALSE(without_ancestors);
}

TEST(GpuUuidString, FormatsLikeNvml) {
  CUuuid u;
  const unsigned char bytes[16] = {0x8f, 0x6c, 0x01, 0x02, 0xab, 0xcd, 0x00, 0xff,
                                   0x10, 0x20, 0x30, 0x40, 0x50, 0x60, 0x70, 0x80};
  std::memcpy(u.bytes, bytes, 16);
  EXPECT_EQ(GpuUuidString(u), "GPU-8f6c0102-abcd-00ff-1020-304050607080");
}

}  // namespace
}  // namespace kjit
