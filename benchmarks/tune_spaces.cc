// kjit_tune_spaces: the design spaces measured through the evaluator, on a GPU.
//
//   --verify N      N random (sample key, valid point) pairs per family go
//                   through the evaluator's full verification (edge cases
//                   included); every failure is listed (a bug to fix).
//   --search        every valid point of every sample key is evaluated (or
//                   --max-points of them, evenly spread); prints per key the
//                   expert default and the best point, as times, fractions of
//                   the floor and speedups over PyTorch eager (same run).
//   --dataset FILE  appends every measurement as a JSON line (the RL policy's data).
// A candidate that faults ends the run (the CUDA context is lost): rerun with
// --skip to go past it, and fix the generator.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <random>

#include "kjit/evaluator/evaluator.h"
#include "kjit/policy/design_space.h"

using namespace kjit;

namespace {

daemon::Verdict Evaluate(eval::Evaluator& e, const OpKey& key, const policy::Candidate& c, uint64_t id) {
  daemon::EvaluateRequest r;
  r.id = id;
  r.key_bytes = key.Encode();
  r.candidate.source = c.source;
  r.candidate.entry_point = c.entry_point;
  r.candidate.options = c.options;
  r.candidate.launch = c.launch;
  r.candidate.design = c.design;
  return e.Evaluate(r, [](const std::string&, std::chrono::milliseconds) {});
}

void Record(std::ofstream* out, const policy::Family& f, const OpKey& key, const policy::Point& p,
            const daemon::Verdict& v) {
  if (out == nullptr) return;
  std::string knobs;
  for (const auto& [k, val] : p) knobs += std::string(knobs.empty() ? "" : ",") + "\"" + k + "\":" + std::to_string(val);
  char line[4096];
  std::snprintf(line, sizeof line,
                "{\"family\":\"%s\",\"key\":\"%s\",\"key_text\":\"%s\",\"point\":{%s},\"outcome\":\"%s\","
                "\"median_us\":%.4f,\"spread_us\":%.4f,\"baseline_us\":%.4f,\"floor_us\":%.4f,\"registers\":%d,"
                "\"spill_bytes\":%d}\n",
                std::string(f.name()).c_str(), key.Hash().ToHex().c_str(), key.ToString().c_str(), knobs.c_str(),
                v.outcome.c_str(), v.timing.median_us, v.timing.spread_us, v.baseline.median_us, v.roofline.floor_us,
                v.resources.registers, v.resources.spill_bytes);
  *out << line;
  out->flush();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Measure kjit's design spaces through the evaluator (needs a GPU)."};
  int verify = 0, max_points = 0, skip = 0;
  bool search = false;
  uint64_t seed = 1;
  std::string dataset, family_filter;
  app.add_option("--verify", verify, "random (key, point) pairs to verify per family");
  app.add_flag("--search", search, "evaluate the points of every sample key; report default and best");
  app.add_option("--max-points", max_points, "at most this many points per key in --search (0: all)");
  app.add_option("--family", family_filter, "only this family");
  app.add_option("--seed", seed, "for --verify's choice of pairs")->capture_default_str();
  app.add_option("--skip", skip, "skip the first N evaluations (to get past a fault)");
  app.add_option("--dataset", dataset, "append every measurement here as JSON lines");
  CLI11_PARSE(app, argc, argv);
  // A run may be cut off (a fault, a time limit): every line must already be out.
  std::setvbuf(stdout, nullptr, _IOLBF, 0);

  auto evaluator = eval::Evaluator::Create(eval::EvaluatorOptions{});
  if (!evaluator.ok()) {
    std::fprintf(stderr, "tune_spaces: %s\n", evaluator.status().ToString().c_str());
    return 2;
  }
  eval::Evaluator& e = **evaluator;
  policy::DeviceFacts device = policy::DeviceFacts::H200();
  device.sm_count = e.device().sm_count;
  std::ofstream out_file;
  std::ofstream* out = nullptr;
  if (!dataset.empty()) {
    out_file.open(dataset, std::ios::app);
    out = &out_file;
  }
  uint64_t id = 0;
  int failures = 0;
  auto lost = [&] {
    if (!e.context_lost()) return false;
    std::printf("\nthe CUDA context is lost after evaluation %llu; rerun with --skip %llu\n",
                static_cast<unsigned long long>(id), static_cast<unsigned long long>(id));
    return true;
  };

  for (const policy::Family* f : policy::Families()) {
    if (!family_filter.empty() && f->name() != family_filter) continue;
    std::vector<std::pair<OpKey, std::unique_ptr<policy::Problem>>> keys;
    for (const OpKey& k : f->SampleKeys()) {
      auto p = f->Match(k);
      if (p.ok()) keys.emplace_back(k, std::move(*p));
    }
    if (verify > 0) {
      std::printf("\n### %s: %d random (key, point) pairs through verification\n\n", std::string(f->name()).c_str(),
                  verify);
      std::mt19937_64 rng(seed);
      int passed = 0;
      for (int i = 0; i < verify; ++i) {
        auto& [key, problem] = keys[rng() % keys.size()];
        const auto points = policy::ValidPoints(*f, *problem, device);
        const policy::Point& p = points[rng() % points.size()];
        if (++id <= static_cast<uint64_t>(skip)) continue;
        auto c = f->Generate(*problem, p, device);
        const daemon::Verdict v = c.ok() ? Evaluate(e, key, *c, id) : daemon::Verdict{};
        Record(out, *f, key, p, v);
        if (v.outcome == "verified") {
          ++passed;
        } else {
          ++failures;
          std::printf("- FAIL %s | %s | %s: %s\n", problem->description.c_str(), policy::PointToString(p).c_str(),
                      v.outcome.c_str(), (c.ok() ? v.reason : c.status().ToString()).substr(0, 400).c_str());
        }
        if (lost()) return 1;
      }
      std::printf("%d of %d verified\n", passed, verify);
    }
    if (search) {
      std::printf("\n### %s: search\n\n| key | points | eager us | floor us | default us | default/floor | best us | "
                  "best/floor | best speedup | best point |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---|\n",
                  std::string(f->name()).c_str());
      for (auto& [key, problem] : keys) {
        auto points = policy::ValidPoints(*f, *problem, device);
        if (max_points > 0 && points.size() > static_cast<size_t>(max_points)) {
          std::vector<policy::Point> spread;
          for (int i = 0; i < max_points; ++i) spread.push_back(points[i * points.size() / max_points]);
          points = spread;
        }
        const policy::Point def = f->ExpertDefault(*problem, device);
        if (std::find(points.begin(), points.end(), def) == points.end()) points.insert(points.begin(), def);
        double best = 0, best_base = 0, def_us = 0, eager = 0, floor = 0;
        policy::Point best_point;
        for (const policy::Point& p : points) {
          if (++id <= static_cast<uint64_t>(skip)) continue;
          auto c = f->Generate(*problem, p, device);
          if (!c.ok()) continue;
          const daemon::Verdict v = Evaluate(e, key, *c, id);
          Record(out, *f, key, p, v);
          if (lost()) return 1;
          if (v.outcome != "verified") {
            ++failures;
            std::printf("<!-- FAIL %s %s: %s -->\n", problem->description.c_str(), policy::PointToString(p).c_str(),
                        v.reason.substr(0, 300).c_str());
            continue;
          }
          eager = v.baseline.median_us;
          floor = v.roofline.floor_us;
          if (p == def) def_us = v.timing.median_us;
          if (best == 0 || v.timing.median_us < best) {
            best = v.timing.median_us;
            best_base = v.baseline.median_us;
            best_point = p;
          }
        }
        std::printf("| %s | %zu | %.1f | %.1f | %.1f | %.2f | %.1f | %.2f | %.2f | %s |\n", problem->description.c_str(),
                    points.size(), eager, floor, def_us, floor > 0 ? def_us / floor : 0, best,
                    floor > 0 ? best / floor : 0, best > 0 ? best_base / best : 0,
                    policy::PointToString(best_point).c_str());
        std::fflush(stdout);
      }
    }
  }
  return failures == 0 ? 0 : 1;
}
