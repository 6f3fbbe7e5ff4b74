// What the PyTorch adapter exposes to tests that load it (through dlsym of
// "kjit_adapter_stats", which returns a const AdapterStats*, valid until the
// calling thread's next call of it), and to other languages through the plain C
// "kjit_adapter_counters(uint64_t* out, int n)" (adapter.cc says which counters).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kjit::shim {

struct AdapterStats {
  bool attached = false;                    // the constructor ran and KJIT_DISABLE was not set
  std::vector<std::string> intercepted_ops;  // overridden ops, without "aten::"
  std::vector<std::string> unboxed_ops;      // of those, the ones with the unboxed wrapper
  size_t entries = 0;                       // keys seen (per device)
  uint64_t hits = 0;                        // calls served by a cached kernel
  uint64_t first_sights = 0;                // keys resolved after their first call
  uint64_t misses = 0;                      // calls of keys without a kernel, first sights included
  uint64_t failures = 0;                    // records blacklisted and reported to kjitd
  uint64_t chain_records = 0;               // fusible calls recorded into chains (KJIT_FUSION=record)
  uint64_t chains_reported = 0;             // repeated chains reported to kjitd as misses
  uint64_t chains_fused = 0;                // served chains run as one fused kernel (KJIT_FUSION=serve)
  uint64_t chains_replayed = 0;             // deferred chains run call by call with PyTorch's kernels
};

AdapterStats CurrentAdapterStats();

}  // namespace kjit::shim
