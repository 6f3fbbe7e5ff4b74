// Runs one generated reduce kernel (rewritten by reduce_gen.cc for emu.h, built as a shared object)
// on the CPU and checks it against PyTorch's reductions transcribed: argmax/argmin indices exactly
// (a sequential walk with PyTorch's rule: NaN beats every number, the first NaN and the first of
// equal values win), amax/amin values exactly (NaN where the slice has one), sums, means and
// products against float64 within float32 accumulation error; and that nothing is written past the
// output. Inputs for min/max are small integers (ties) with NaN, +-Inf and -0.0 in some slices and
// slices wholly -Inf or +Inf; for sums, normal values with NaN/Inf in some slices.
// Usage: reduce_run SO KIND IN_DTYPE OUT_DTYPE SEGS OUTER LEN INNER GRID BLOCK CLUSTER WORKSPACE
//   (the memory-order view: SEGS segments of [OUTER, LEN, INNER]; output (o, i) reduces element
//   ((s * OUTER + o) * LEN + j) * INNER + i over s and j)
//   KIND 0 sum 1 mean 2 prod 3 amax 4 amin 5 argmax 6 argmin; dtypes 0 f32 1 f16 2 bf16 3 i64
//   WORKSPACE: bytes of the kernel's workspace (kernel ABI v2), 0 for none. With one, the kernel is
//   run twice on the same zeroed-once workspace, as the shim runs it: the second run must give the
//   same bytes, and the workspace must be all zero after each run.
#include "emu_harness.h"
#include <dlfcn.h>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
int main(int argc, char** argv) {
  if (argc < 13) { std::printf("usage\n"); return 2; }
  void* so = dlopen(argv[1], RTLD_NOW);
  if (!so) { std::printf("dlopen: %s\n", dlerror()); return 2; }
  void* entry = dlsym(so, "kjit_reduce");
  const int kind = atoi(argv[2]), dt = atoi(argv[3]), odt = atoi(argv[4]);
  const long long segs = atoll(argv[5]), outer = atoll(argv[6]), len = atoll(argv[7]), inner = atoll(argv[8]);
  gridDim.x = atoi(argv[9]); blockDim.x = atoi(argv[10]); emu_cluster = atoi(argv[11]);
  const long long ws_bytes = atoll(argv[12]);
  std::vector<unsigned char> ws(ws_bytes + 64, 0);  // 16-byte aligned by the allocator; 64 guard bytes after
  auto kernel = [&](const void* xp, void* yp) {
    if (ws_bytes > 0) {
      reinterpret_cast<void (*)(const void*, void*, unsigned char*)>(entry)(xp, yp, ws.data());
    } else {
      reinterpret_cast<void (*)(const void*, void*)>(entry)(xp, yp);
    }
  };
  const bool minmax = kind >= 3;
  const long long n = segs * outer * len * inner, n_out = outer * inner, per_out = segs * len;
  // Element j of output (o, i)'s slice (j over segments, then within one).
  auto at = [&](long long o, long long i, long long j) { return ((j / len * outer + o) * len + j % len) * inner + i; };
  const int es = esize(dt), os = esize(odt);
  std::vector<char> x(n * es), y(n_out * os + 64, 0x5a);
  std::vector<float> xv(n);  // the input's values as the kernel reads them
  std::mt19937 gen(11);
  std::normal_distribution<float> nd(kind == 2 ? 1.f : 0.f, kind == 2 ? 0.02f : 1.f);  // products stay finite
  std::uniform_int_distribution<int> small(-3, 3);
  std::uniform_real_distribution<double> u01;
  const float nan = __int_as_float(0x7fc00000), inf = __int_as_float(0x7f800000);
  const float specials[4] = {nan, inf, -inf, -0.f};
  // Per slice (o, i): 0 plain, 1 specials at about two places, 2 all -Inf, 3 all +Inf (min/max only).
  std::vector<int> slice_kind(n_out);
  for (auto& s : slice_kind) {
    const double r = u01(gen);
    s = r < 0.55 ? 0 : r < 0.8 ? 1 : (minmax && r < 0.9) ? 2 : (minmax && r < 0.97) ? 3 : 0;
  }
  for (long long o = 0; o < outer; ++o)
    for (long long i = 0; i < inner; ++i)
      for (long long j = 0; j < per_out; ++j) {
        const long long e = at(o, i, j);
        const int sk = slice_kind[o * inner + i];
        float f = minmax ? (float)small(gen) : nd(gen);
        if (sk == 1 && u01(gen) < 2.0 / per_out) f = specials[gen() % 4];
        if (sk == 2) f = -inf;
        if (sk == 3) f = inf;
        const uint32_t u = from_f(f, dt);
        std::memcpy(&x[e * es], &u, es);
        xv[e] = to_f(u, dt);
      }
  std::vector<char> first_y;
  for (int pass = 0; pass < (ws_bytes > 0 ? 2 : 1); ++pass) {
  if (pass == 1) { first_y = y; std::fill(y.begin(), y.end() - 64, 0x5a); }
  emu_run_grid([&] { kernel(x.data(), y.data()); });
  for (long long k = 0; k < ws_bytes + 64; ++k) {
    if (ws[k] != 0) {
      std::printf("%s at workspace byte %lld of %lld after run %d\n",
                  k < ws_bytes ? "NOT ZEROED" : "WROTE PAST THE WORKSPACE", k, ws_bytes, pass + 1);
      return 1;
    }
  }
  }
  if (!first_y.empty() && first_y != y) { std::printf("SECOND RUN DIFFERS (nondeterministic or stateful)\n"); return 1; }
  // PyTorch's results, slice by slice.
  const float factor = (float)n_out / (float)n;  // MeanOps' factor, rounded as PyTorch rounds it
  long long bad = 0, nan_slices = 0;
  double worst = 0;
  for (long long o = 0; o < outer; ++o)
    for (long long i = 0; i < inner; ++i) {
      const long long out_at = o * inner + i;
      auto elem = [&](long long j) { return xv[at(o, i, j)]; };
      bool ok;
      char what[160];
      if (kind >= 5) {
        // GreaterOrNan / LessOrNan walked in index order.
        long long best_i = 0;
        float best = elem(0);
        for (long long j = 1; j < per_out; ++j) {
          const float v = elem(j);
          if (std::isnan(best)) break;  // the first NaN wins
          if (std::isnan(v) || (kind == 5 ? v > best : v < best)) { best = v; best_i = j; }
        }
        long long got;
        std::memcpy(&got, &y[out_at * 8], 8);
        ok = got == best_i;
        nan_slices += std::isnan(best);
        std::snprintf(what, sizeof what, "got %lld want %lld", got, best_i);
      } else {
        uint32_t gu = 0;
        std::memcpy(&gu, &y[out_at * os], os);
        const float got = to_f(gu, odt);
        if (minmax) {
          float best = elem(0);
          for (long long j = 1; j < per_out; ++j) {
            const float v = elem(j);
            best = (std::isnan(best) || (kind == 3 ? best > v : best < v)) ? best : v;
          }
          ok = (std::isnan(best) && std::isnan(got)) || got == best;
          nan_slices += std::isnan(best);
          std::snprintf(what, sizeof what, "got %g want %g", got, best);
        } else {
          double acc = kind == 2 ? 1 : 0, mag = 0;
          for (long long j = 0; j < per_out; ++j) {
            acc = kind == 2 ? acc * elem(j) : acc + elem(j);
            mag += std::fabs(elem(j));
          }
          if (kind == 1) { acc *= factor; mag *= factor; }
          // float32 accumulation: a few ulps per element of the magnitude; then the output's rounding.
          const double acc_tol = kind == 2 ? 4e-7 * per_out * std::fabs(acc) : 2e-7 * std::sqrt((double)per_out) * 4 * mag;
          const double out_rel = odt == 0 ? 0 : odt == 1 ? 1e-3 : 8e-3;
          const double tol = acc_tol + out_rel * std::fabs(acc) + 1e-30;
          const double err = std::fabs(got - acc);
          ok = (std::isnan(acc) && std::isnan(got)) || (std::isinf(acc) && got == acc) || err <= tol;
          nan_slices += std::isnan(acc);
          if (std::isfinite(acc)) worst = std::max(worst, err / std::max(tol, 1e-30));
          std::snprintf(what, sizeof what, "got %.9g want %.9g (tol %.3g)", got, acc, tol);
        }
      }
      if (!ok) {
        if (bad == 0) std::printf("first bad at o=%lld i=%lld: %s\n", o, i, what);
        ++bad;
      }
    }
  for (int k = 0; k < 64; ++k) {
    if (y[n_out * os + k] != 0x5a) { std::printf("WROTE PAST END\n"); return 1; }
  }
  std::printf("%s bad=%lld of %lld (NaN results %lld, worst error/tolerance %.3g)\n", bad ? "FAIL" : "ok", bad, n_out,
              nan_slices, worst);
  return bad ? 1 : 0;
}
