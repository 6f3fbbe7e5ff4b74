// libkjit_fake_nvml.so: a stand-in for libnvidia-ml.so.1, loaded by kjitd
// through KJIT_NVML_LIBRARY, so that per-GPU idle decisions are tested on
// machines without a GPU (tests/daemon_process/evaluator_process_test.cc).
//
// It re-reads the file named by FAKE_NVML_STATE on every call, so a test can
// make a GPU busy or idle while kjitd runs. One GPU per line, in NVML index
// order (PCI order on a real machine, whatever CUDA_VISIBLE_DEVICES says):
//
//   GPU-aaaa 60000000000 80000000000 1234:50 77:5
//   uuid     free bytes  total bytes pid:SM% of each process running kernels
//
// A missing or unreadable file is a machine with no GPU (nvmlInit works,
// nvmlDeviceGetCount says 0). Only what kjit::Nvml calls is implemented.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include "kjit/runtime/nvml_abi.h"

namespace abi = kjit::nvml_abi;

// The exported entry points, declared from the same list kjit::Nvml resolves.
#define KJIT_FAKE_NVML_DECLARE_(ret, name, params) extern "C" __attribute__((visibility("default"))) ret name params;
KJIT_NVML_FUNCTIONS(KJIT_FAKE_NVML_DECLARE_)
#undef KJIT_FAKE_NVML_DECLARE_

namespace {

struct Gpu {
  std::string uuid;
  unsigned long long free = 0, total = 0;
  std::vector<std::pair<unsigned, unsigned>> processes;  // pid, SM %
};

std::mutex g_mutex;
std::vector<Gpu> g_gpus;  // the last reading; handles are 1-based indices into it

void Reload() {
  std::vector<Gpu> gpus;
  const char* path = std::getenv("FAKE_NVML_STATE");
  if (path != nullptr) {
    std::ifstream in(path);
    std::string line;
    while (std::getline(in, line)) {
      std::istringstream fields(line);
      Gpu g;
      if (!(fields >> g.uuid >> g.free >> g.total)) continue;
      std::string p;
      while (fields >> p) {
        const size_t colon = p.find(':');
        if (colon == std::string::npos) continue;
        g.processes.emplace_back(std::stoul(p.substr(0, colon)), std::stoul(p.substr(colon + 1)));
      }
      gpus.push_back(std::move(g));
    }
  }
  // Handles stay valid across reloads as long as the file keeps its lines: tests only change the figures.
  g_gpus = std::move(gpus);
}

// The GPU a handle names, after re-reading the file; null if it is gone.
const Gpu* Find(abi::Device d) {
  Reload();
  const auto i = reinterpret_cast<uintptr_t>(d);
  return i >= 1 && i <= g_gpus.size() ? &g_gpus[i - 1] : nullptr;
}

abi::Device Handle(size_t index) { return reinterpret_cast<abi::Device>(static_cast<uintptr_t>(index + 1)); }

}  // namespace

extern "C" {

abi::Return nvmlInit_v2() { return abi::kSuccess; }
abi::Return nvmlShutdown() { return abi::kSuccess; }
const char* nvmlErrorString(abi::Return r) {
  return r == abi::kErrorNotFound ? "Not Found" : "fake NVML error";
}
abi::Return nvmlDeviceGetCount_v2(unsigned int* count) {
  std::lock_guard lock(g_mutex);
  Reload();
  *count = static_cast<unsigned int>(g_gpus.size());
  return abi::kSuccess;
}
abi::Return nvmlDeviceGetHandleByIndex_v2(unsigned int index,
                                                                                  abi::Device* device) {
  std::lock_guard lock(g_mutex);
  Reload();
  if (index >= g_gpus.size()) return abi::kErrorInvalidArgument;
  *device = Handle(index);
  return abi::kSuccess;
}
abi::Return nvmlDeviceGetHandleByUUID(const char* uuid, abi::Device* device) {
  std::lock_guard lock(g_mutex);
  Reload();
  for (size_t i = 0; i < g_gpus.size(); ++i) {
    if (g_gpus[i].uuid == uuid) {
      *device = Handle(i);
      return abi::kSuccess;
    }
  }
  return abi::kErrorNotFound;
}
abi::Return nvmlDeviceGetUUID(abi::Device d, char* out, unsigned int size) {
  std::lock_guard lock(g_mutex);
  const Gpu* g = Find(d);
  if (g == nullptr) return abi::kErrorGpuIsLost;
  if (g->uuid.size() + 1 > size) return abi::kErrorInsufficientSize;
  std::memcpy(out, g->uuid.c_str(), g->uuid.size() + 1);
  return abi::kSuccess;
}
abi::Return nvmlDeviceGetUtilizationRates(abi::Device d,
                                                                                  abi::Utilization* u) {
  std::lock_guard lock(g_mutex);
  const Gpu* g = Find(d);
  if (g == nullptr) return abi::kErrorGpuIsLost;
  unsigned total = 0;
  for (const auto& [pid, util] : g->processes) total += util;
  u->gpu = total > 100 ? 100 : total;
  u->memory = 0;
  return abi::kSuccess;
}
abi::Return nvmlDeviceGetMemoryInfo(abi::Device d, abi::Memory* m) {
  std::lock_guard lock(g_mutex);
  const Gpu* g = Find(d);
  if (g == nullptr) return abi::kErrorGpuIsLost;
  m->total = g->total;
  m->free = g->free;
  m->used = g->total - g->free;
  return abi::kSuccess;
}
abi::Return nvmlDeviceGetProcessUtilization(
    abi::Device d, abi::ProcessUtilizationSample* samples, unsigned int* count, unsigned long long) {
  std::lock_guard lock(g_mutex);
  const Gpu* g = Find(d);
  if (g == nullptr) return abi::kErrorGpuIsLost;
  if (g->processes.empty()) return abi::kErrorNotFound;  // NVML's "no process ran a kernel"
  if (samples == nullptr || *count < g->processes.size()) {
    *count = static_cast<unsigned int>(g->processes.size());
    return abi::kErrorInsufficientSize;
  }
  const auto now_us = static_cast<unsigned long long>(
      std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count());
  for (size_t i = 0; i < g->processes.size(); ++i) {
    samples[i] = {};
    samples[i].pid = g->processes[i].first;
    samples[i].timeStamp = now_us;
    samples[i].smUtil = g->processes[i].second;
  }
  *count = static_cast<unsigned int>(g->processes.size());
  return abi::kSuccess;
}
abi::Return nvmlDeviceGetComputeRunningProcesses_v3(abi::Device d,
                                                                                            unsigned int* count,
                                                                                            abi::ProcessInfo* infos) {
  std::lock_guard lock(g_mutex);
  const Gpu* g = Find(d);
  if (g == nullptr) return abi::kErrorGpuIsLost;
  if (infos == nullptr || *count < g->processes.size()) {
    const bool none = g->processes.empty();
    *count = static_cast<unsigned int>(g->processes.size());
    return none ? abi::kSuccess : abi::kErrorInsufficientSize;
  }
  for (size_t i = 0; i < g->processes.size(); ++i) {
    infos[i] = {};
    infos[i].pid = g->processes[i].first;
  }
  *count = static_cast<unsigned int>(g->processes.size());
  return abi::kSuccess;
}

}  // extern "C"
