// kjit_test_break_records CACHE: for the shim's GPU tests, replaces every
// verified record in CACHE by a copy whose entry point is not in its CUBIN.
// The copies pass every checksum (the cache computes them on insert), so the
// cache serves them, and loading one fails in the process that uses it: the
// path a shim takes when a kernel it was served cannot be used.
#include <cstdio>

#include "kjit/cache/kernel_cache.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s CACHE\n", argv[0]);
    return 2;
  }
  kjit::cache::OpenOptions options;
  options.path = argv[1];
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
