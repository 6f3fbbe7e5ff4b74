// The shim's read path: KernelCache::Lookup on a cache of 100k records.
// Reports per-lookup latency percentiles (p50, p99) as counters, for hits and
// for misses, measured one lookup at a time with a steady clock.
//   kjit_bench_cache [--records N]  (default 100000; the file goes under $TMPDIR)
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <vector>

#include "kjit/cache/kernel_cache.h"
#include "kjit/runtime/op_key.h"

namespace {

using namespace kjit;
using namespace kjit::cache;

int g_records = 100000;
const Toolchain kToolchain{13000, 13, 0, 1};

std::string KeyBytes(int i) {
  return OpKey::Single("aten::_softmax", "", {TensorDesc::Contiguous(DType::kFloat32, {64, 1000 + i}), int64_t{-1},
                                              false},
                       90)
      .Encode();
}

struct Fixture {
  std::string dir;
  std::unique_ptr<KernelCache> cache;
  std::vector<Hash128> keys;
  std::string error;
  double build_seconds = 0;
};

Fixture& Get() {
  static Fixture f = [] {
    Fixture x;
    const char* tmp = std::getenv("TMPDIR");
    x.dir = std::string(tmp ? tmp : "/tmp") + "/kjit-bench-cache-" + std::to_string(getpid());
    OpenOptions o;
    o.path = x.dir + "/cache.db";
    o.default_size_limit_bytes = 8ull << 30;
    auto c = KernelCache::Open(o);
    if (!c.ok()) {
      x.error = c.status().ToString();
      return x;
    }
    x.cache = std::move(*c);
    const auto start = std::chrono::steady_clock::now();
    std::string cubin(2048, 'k');
    for (int i = 0; i < g_records; ++i) {
      KernelRecord r;
      r.key_bytes = KeyBytes(i);
      r.source = "extern \"C\" __global__ void k(float* x) {}";
      r.entry_point = "k";
      std::memcpy(cubin.data(), &i, sizeof i);
      r.cubin = cubin;
      r.launch.grid[0] = 64;
      r.launch.block[0] = 256;
      r.timing.median_us = 10;
      r.baseline.median_us = 20;
      r.toolchain = kToolchain;
      r.status = RecordStatus::kVerified;
      auto id = x.cache->Insert(r);
      if (!id.ok()) {
        x.error = id.status().ToString();
        return x;
      }
      x.keys.push_back(OpKey::Decode(r.key_bytes)->Hash());
      if ((i + 1) % 20000 == 0) std::fprintf(stderr, "[bench_cache] %d records written\n", i + 1);
    }
    x.build_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return x;
  }();
  return f;
}

void Percentiles(benchmark::State& state, std::vector<double>& us) {
  std::sort(us.begin(), us.end());
  auto at = [&](double q) { return us[static_cast<size_t>(q * static_cast<double>(us.size() - 1))]; };
  state.counters["p50_us"] = at(0.50);
  state.counters["p99_us"] = at(0.99);
  state.counters["max_us"] = us.back();
  state.counters["records"] = static_cast<double>(g_records);
}

void LookupLoop(benchmark::State& state, bool hit) {
  Fixture& f = Get();
  if (!f.error.empty()) {
    state.SkipWithError(f.error.c_str());
    return;
  }
  const ReaderContext reader{90, kToolchain, "NVIDIA H200", ""};
  std::mt19937 rng(1);
  std::vector<double> us;
  us.reserve(1 << 20);
  for (auto _ : state) {
    Hash128 key = f.keys[rng() % f.keys.size()];
    if (!hit) key.low ^= 0x5555;  // not in the cache
    const auto t0 = std::chrono::steady_clock::now();
    auto served = f.cache->Lookup(key, reader);
    const auto t1 = std::chrono::steady_clock::now();
    if (served.ok() != hit) state.SkipWithError("lookup gave the wrong answer");
    benchmark::DoNotOptimize(served);
    us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
  }
  Percentiles(state, us);
  state.counters["build_s"] = f.build_seconds;
}

void BM_CacheLookupHit(benchmark::State& state) { LookupLoop(state, true); }
void BM_CacheLookupMiss(benchmark::State& state) { LookupLoop(state, false); }
BENCHMARK(BM_CacheLookupHit)->Iterations(100000);
BENCHMARK(BM_CacheLookupMiss)->Iterations(100000);

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--records") == 0 && i + 1 < argc) {
      g_records = std::atoi(argv[i + 1]);
      for (int j = i; j + 2 <= argc; ++j) argv[j] = argv[j + 2];
      argc -= 2;
      --i;
    }
  }
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  Fixture& f = Get();
  f.cache.reset();
  std::error_code ec;
  std::filesystem::remove_all(f.dir, ec);
  return 0;
}
