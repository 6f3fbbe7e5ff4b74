// kjit_test_break_records [--fault] CACHE: for the shim's GPU tests, replaces every
// verified record in CACHE by a copy whose entry point is not in its CUBIN.
// The copies pass every checksum (the cache computes them on insert), so the
// cache serves them, and loading one fails in the process that uses it: the
// path a shim takes when a kernel it was served cannot be used.
// With --fault, replaces only the first verified record, by a kernel (compiled
// with NVRTC for the record's arch) that writes to an address no allocation
// holds: the illegal-address fault that kills the process that launches it.
#include <cstdio>
#include <cstring>

#include "kjit/cache/kernel_cache.h"
#include "kjit/runtime/compiler.h"
#include "kjit/runtime/op_key.h"

namespace {

int Fault(kjit::cache::KernelCache& cache, const kjit::cache::RecordSummary& summary) {
  auto record = cache.Get(summary.id);
  if (!record.ok()) return 1;
  auto key = kjit::OpKey::Decode(record->key_bytes);
  if (!key.ok()) return 1;
  kjit::Compiler compiler;
  kjit::CompileRequest request;
  request.source = "extern \"C\" __global__ void kjit_test_fault() { *(volatile int*)(0x10) = 1; }\n";
  request.program_name = "kjit_test_fault.cu";
  request.arch = key->arch;
  auto compiled = compiler.Compile(request);
  if (!compiled.ok()) {
    std::fprintf(stderr, "%s\n", compiled.status().ToString().c_str());
    return 1;
  }
  kjit::cache::KernelRecord faulting = *record;
  faulting.id = 0;
  faulting.source = request.source;
  faulting.entry_point = "kjit_test_fault";
  faulting.cubin = (*compiled)->cubin;
  faulting.launch.workspace_bytes = 0;
  auto id = cache.Insert(std::move(faulting));
  if (!id.ok() || !cache.Remove(summary.id).ok()) {
    std::fprintf(stderr, "cannot replace record %lld\n", static_cast<long long>(summary.id));
    return 1;
  }
  std::printf("record %lld -> %lld (writes to address 0x10): %s\n", static_cast<long long>(summary.id),
              static_cast<long long>(*id), summary.key_text.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const bool fault = argc == 3 && std::strcmp(argv[1], "--fault") == 0;
  if (argc != 2 && !fault) {
    std::fprintf(stderr, "usage: %s [--fault] CACHE\n", argv[0]);
    return 2;
  }
  kjit::cache::OpenOptions options;
  options.path = argv[fault ? 2 : 1];
  options.create = false;
  auto cache = kjit::cache::KernelCache::Open(options);
  if (!cache.ok()) {
    std::fprintf(stderr, "%s\n", cache.status().ToString().c_str());
    return 1;
  }
  kjit::cache::ListFilter verified;
  verified.status = kjit::cache::RecordStatus::kVerified;
  auto records = (*cache)->List(verified);
  if (!records.ok()) {
    std::fprintf(stderr, "%s\n", records.status().ToString().c_str());
    return 1;
  }
  if (fault) {
    if (records->empty()) {
      std::fprintf(stderr, "no verified record to replace\n");
      return 1;
    }
    return Fault(**cache, records->front());
  }
  for (const auto& summary : *records) {
    auto record = (*cache)->Get(summary.id);
    if (!record.ok()) return 1;
    kjit::cache::KernelRecord broken = *record;
    broken.id = 0;
    broken.entry_point = "kjit_test_no_such_kernel";
    auto id = (*cache)->Insert(std::move(broken));
    if (!id.ok() || !(*cache)->Remove(summary.id).ok()) {
      std::fprintf(stderr, "cannot replace record %lld\n", static_cast<long long>(summary.id));
      return 1;
    }
    std::printf("record %lld -> %lld (entry point kjit_test_no_such_kernel): %s\n",
                static_cast<long long>(summary.id), static_cast<long long>(*id), summary.key_text.c_str());
  }
  return 0;
}
