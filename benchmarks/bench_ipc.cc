// Load test of kjitd on its local socket: N client processes x M requests each.
// Reports lookup latency (p50/p99, half hits with a 2 KiB CUBIN, half misses)
// and miss-report throughput (acknowledged reports per second, all clients
// together), and exits non-zero if any request failed.
//
//   kjit_bench_ipc --kjitd PATH [--clients 8] [--requests 2000] [--json FILE]
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "kjit/cache/kernel_cache.h"
#include "kjit/ipc/client.h"
#include "kjit/runtime/op_key.h"
#include "kjitd_harness.h"

namespace {

using namespace kjit;
using Clock = std::chrono::steady_clock;

constexpr int kKeys = 256;

std::string KeyBytes(int i) {
  return OpKey::Single("aten::_softmax", "",
                       {TensorDesc::Contiguous(DType::kFloat32, {64, 4096 + i}), int64_t{-1}, false}, 90)
      .Encode();
}

double Percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(q * static_cast<double>(v.size() - 1))];
}

// One client process: M lookups, then M acknowledged miss reports. Writes
// lookup latencies, report latencies (us) and the report phase's wall time.
int RunClient(const std::string& endpoint, int requests, int index, int start_fd, const std::string& out) {
  ipc::ClientOptions o;
  o.endpoint = endpoint;
  o.request_timeout = std::chrono::milliseconds(10000);
  ipc::Client c(o);
  if (!c.Hello().ok()) return 2;
  char go;
  if (read(start_fd, &go, 1) != 1) return 3;  // all clients start together
  std::mt19937 rng(static_cast<unsigned>(index));
  std::vector<double> lookup_us, report_us;
  int failures = 0;
  for (int i = 0; i < requests; ++i) {
    const int key = static_cast<int>(rng() % kKeys);
    const auto t0 = Clock::now();
    auto r = c.Lookup(ipc::Lookup{KeyBytes(key), 90, 13000, 13, 0, 1, std::nullopt, std::nullopt});
    lookup_us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
    if (!r.ok() || r->found != (key % 2 == 0)) ++failures;
  }
  const auto reports_start = Clock::now();
  for (int i = 0; i < requests; ++i) {
    const auto t0 = Clock::now();
    auto r = c.Call(ipc::ReportMiss{KeyBytes(static_cast<int>(rng() % kKeys)), 1, 12.5});
    report_us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
    if (!r.ok()) ++failures;
  }
  const double report_wall_s = std::chrono::duration<double>(Clock::now() - reports_start).count();
  std::ofstream f(out, std::ios::binary);
  const size_t n = lookup_us.size();
  f.write(reinterpret_cast<const char*>(&n), sizeof n);
  f.write(reinterpret_cast<const char*>(lookup_us.data()), static_cast<std::streamsize>(n * sizeof(double)));
  f.write(reinterpret_cast<const char*>(report_us.data()), static_cast<std::streamsize>(n * sizeof(double)));
  f.write(reinterpret_cast<const char*>(&report_wall_s), sizeof report_wall_s);
  return failures == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::string kjitd, json;
  int clients = 8, requests = 2000;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--kjitd") kjitd = next();
    else if (a == "--clients") clients = std::atoi(next().c_str());
    else if (a == "--requests") requests = std::atoi(next().c_str());
    else if (a == "--json") json = next();
    else {
      std::printf("usage: %s --kjitd PATH [--clients N] [--requests M] [--json FILE]\n", argv[0]);
      return a == "--help" || a == "-h" ? 0 : 2;
    }
  }
  if (kjitd.empty() || clients < 1 || requests < 1) {
    std::fprintf(stderr, "kjit_bench_ipc: give --kjitd PATH (and positive --clients, --requests); see --help\n");
    return 2;
  }
  testing::KjitdHarness h(kjitd);
  {
    cache::OpenOptions o;
    o.path = h.cache_path();
    auto c = cache::KernelCache::Open(o);
    if (!c.ok()) return 1;
    for (int k = 0; k < kKeys; k += 2) {  // even keys hit
      cache::KernelRecord r;
      r.key_bytes = KeyBytes(k);
      r.source = "k";
      r.entry_point = "k";
      r.cubin = std::string(2048, 'c');
      r.timing.median_us = 1;
      r.baseline.median_us = 2;
      r.toolchain = {13000, 13, 0, 1};
      r.status = cache::RecordStatus::kVerified;
      if (!(*c)->Insert(r).ok()) return 1;
    }
  }
  if (!h.Start()) {
    std::fprintf(stderr, "kjit_bench_ipc: kjitd did not start\n");
    return 1;
  }
  int start_pipe[2];
  if (pipe(start_pipe) != 0) return 1;
  std::vector<pid_t> pids;
  for (int i = 0; i < clients; ++i) {
    const pid_t pid = fork();
    if (pid == 0) {
      close(start_pipe[1]);
      _exit(RunClient(h.endpoint(), requests, i, start_pipe[0], h.dir() + "/client-" + std::to_string(i)));
    }
    pids.push_back(pid);
  }
  close(start_pipe[0]);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // let every client connect and say hello
  const std::string go(static_cast<size_t>(clients), 'g');
  if (write(start_pipe[1], go.data(), go.size()) != static_cast<ssize_t>(go.size())) return 1;
  int failed = 0;
  for (pid_t pid : pids) {
    int status = 0;
    waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) ++failed;
  }
  std::vector<double> lookups, reports;
  double slowest_report_phase = 0;
  for (int i = 0; i < clients; ++i) {
    std::ifstream f(h.dir() + "/client-" + std::to_string(i), std::ios::binary);
    size_t n = 0;
    if (!f.read(reinterpret_cast<char*>(&n), sizeof n)) continue;
    std::vector<double> l(n), r(n);
    double wall = 0;
    f.read(reinterpret_cast<char*>(l.data()), static_cast<std::streamsize>(n * sizeof(double)));
    f.read(reinterpret_cast<char*>(r.data()), static_cast<std::streamsize>(n * sizeof(double)));
    f.read(reinterpret_cast<char*>(&wall), sizeof wall);
    lookups.insert(lookups.end(), l.begin(), l.end());
    reports.insert(reports.end(), r.begin(), r.end());
    slowest_report_phase = std::max(slowest_report_phase, wall);
  }
  const double throughput = slowest_report_phase > 0 ? static_cast<double>(reports.size()) / slowest_report_phase : 0;
  std::printf("| clients | requests each | lookup p50 | lookup p99 | report p50 | report p99 | reports/s (all clients) |"
              " failed clients |\n|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  std::printf("| %d | %d | %.1f us | %.1f us | %.1f us | %.1f us | %.0f | %d |\n", clients, requests,
              Percentile(lookups, 0.5), Percentile(lookups, 0.99), Percentile(reports, 0.5), Percentile(reports, 0.99),
              throughput, failed);
  if (!json.empty()) {
    std::ofstream j(json);
    j << "{\"clients\": " << clients << ", \"requests\": " << requests << ", \"lookup_p50_us\": "
      << Percentile(lookups, 0.5) << ", \"lookup_p99_us\": " << Percentile(lookups, 0.99)
      << ", \"report_p50_us\": " << Percentile(reports, 0.5) << ", \"report_p99_us\": " << Percentile(reports, 0.99)
      << ", \"reports_per_second\": " << throughput << ", \"failed_clients\": " << failed << "}\n";
  }
  return failed == 0 && lookups.size() == static_cast<size_t>(clients * requests) ? 0 : 1;
}
