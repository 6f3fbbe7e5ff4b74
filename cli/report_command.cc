#include "report_command.h"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iostream>
#include <map>
#include <set>
#include <sstream>

#include "cli_format.h"
#include "kjit/cache/record.h"
#include "kjit/runtime/op_key.h"

namespace kjit::cli {

struct ReportCommand::Options {
  CLI::App* report = nullptr;
  std::string cache_path;
  bool json = false;
  bool markdown = false;
  std::string html;
  int limit = 0;
  std::string run;
  bool runs = false;
};

namespace {

// What a task's state says of its key, when no kernel serves it.
std::string StateOfTask(const std::string& task_state) {
  if (task_state == "running") return "tuning";
  if (task_state == "done") return "no faster kernel found";
  return task_state;  // queued, unfit, failed
}

std::string OpOf(const std::string& key_bytes) {
  auto key = OpKey::Decode(key_bytes);
  if (!key.ok() || key->calls.empty()) return "";
  return key->OpName();
}

std::string OpOfText(const std::string& key_text) { return key_text.substr(0, key_text.find('(')); }

std::string Html(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string SavedText(double us) {
  if (us <= 0) return "-";
  if (us >= 1e6) return Format("%.2f s", us / 1e6);
  if (us >= 1e3) return Format("%.1f ms", us / 1e3);
  return Format("%.1f us", us);
}


// A run as `--json` names it (the report's "run", and each of `--runs`).
Json RunJson(const cache::RunSummary& run) {
  return Json{{"id", run.id},
              {"program", run.program},
              {"pid", run.pid},
              {"started_unix_ms", run.started_unix_ms},
              {"last_seen_unix_ms", run.last_seen_unix_ms}};
}

}  // namespace

Result<KeyReport> BuildReport(const cache::KernelCache& cache, const std::string& run_id) {
  KeyReport report;
  report.cache_path = cache.path();
  if (!run_id.empty()) {
    KJIT_ASSIGN_OR_RETURN(std::vector<cache::RunSummary> runs, cache.ListRuns());
    for (const cache::RunSummary& r : runs) {
      if (r.id == run_id || (run_id == "last" && !report.run)) report.run = r;
    }
    if (!report.run) {
      return NotFound(runs.empty() ? "no program run has reported its calls to kjitd yet (run one under `kjit run`)"
                                   : "no run \"" + run_id + "\" in " + cache.path() +
                                         " (`kjit report --runs` lists the kept runs)");
    }
  }
  std::map<std::string, ReportRow> rows;  // by key hash
  auto row_of = [&](const Hash128& hash) -> ReportRow& {
    ReportRow& r = rows[hash.ToHex()];
    r.key_hash = hash.ToHex();
    return r;
  };

  KJIT_ASSIGN_OR_RETURN(std::vector<cache::Task> tasks, cache.tasks().ListTasks());
  for (const cache::Task& t : tasks) {
    ReportRow& r = row_of(t.key_hash);
    auto key = OpKey::Decode(t.key_bytes);
    if (key.ok()) r.key_text = key->ToString();
    r.op = OpOf(t.key_bytes);
    r.state = StateOfTask(t.state);
    r.misses = t.calls;  // until a use report says more
    r.pytorch_us = t.baseline_us;
    r.floor_us = t.floor_us;
    r.trials = t.trials;
  }
  std::vector<cache::KeyStats> stats;
  if (report.run) {
    KJIT_ASSIGN_OR_RETURN(stats, cache.ListRunKeyStats(report.run->id));
    // A run's counts are its own: the queue's all-time miss counts do not belong to it.
    for (auto& [hash, r] : rows) r.misses = 0;
  } else {
    KJIT_ASSIGN_OR_RETURN(stats, cache.ListKeyStats());
  }
  std::set<std::string> in_run;  // key hashes the run called
  for (const cache::KeyStats& k : stats) {
    ReportRow& r = row_of(k.key_hash);
    if (r.key_text.empty()) r.key_text = k.key_text;
    r.hits = k.hits;
    r.misses = report.run ? k.misses : std::max<uint64_t>(k.misses, r.misses);
    if (r.state.empty()) r.state = "not tuned";
    in_run.insert(r.key_hash);
  }
  cache::ListFilter verified;
  verified.status = cache::RecordStatus::kVerified;
  KJIT_ASSIGN_OR_RETURN(std::vector<cache::RecordSummary> records, cache.List(verified));
  for (const cache::RecordSummary& rec : records) {
    ReportRow& r = row_of(rec.key_hash);
    if (r.key_text.empty()) r.key_text = rec.key_text;
    if (r.op.empty()) r.op = rec.op;
    if (r.kjit_us > 0 && rec.median_us >= r.kjit_us) continue;
    r.kjit_us = rec.median_us;
    r.record_id = rec.id;
    r.timed_on = rec.timed_on;
    if (r.pytorch_us <= 0) r.pytorch_us = rec.baseline_us;
  }

  for (auto& [hash, r] : rows) {
    if (report.run && !in_run.count(hash)) continue;
    if (r.op.empty()) r.op = OpOfText(r.key_text);
    if (r.key_text.empty()) r.key_text = "(key " + hash.substr(0, 12) + ", not named by any report)";
    if (r.kjit_us > 0) r.state = "served";
    if (r.state.empty()) r.state = "not tuned";
    r.calls = r.hits + r.misses;
    if (r.kjit_us > 0 && r.pytorch_us > 0) {
      r.speedup = r.pytorch_us / r.kjit_us;
      r.saved_us = static_cast<double>(r.hits) * std::max(0.0, r.pytorch_us - r.kjit_us);
    }
    // Best-so-far against trials: the key's measurements in the order they were made.
    auto hash128 = Hash128::FromHex(hash);
    if (hash128.ok()) {
      auto ms = cache.measurements().ListMeasurementsOfKey(*hash128);
      if (ms.ok()) {
        double best = 0;
        for (const cache::Measurement& m : *ms) {
          const bool verified_run = (m.outcome == "verified" || m.outcome == "slower") && m.median_us > 0;
          if (verified_run && (best == 0 || m.median_us < best)) best = m.median_us;
          r.best_so_far_us.push_back(best);
        }
        r.trials = std::max<int>(r.trials, static_cast<int>(r.best_so_far_us.size()));
      }
    }
    report.calls += r.calls;
    report.hits += r.hits;
    report.saved_us += r.saved_us;
    report.served += r.kjit_us > 0;
    report.rows.push_back(std::move(r));
  }
  std::stable_sort(report.rows.begin(), report.rows.end(), [](const ReportRow& a, const ReportRow& b) {
    if (a.saved_us != b.saved_us) return a.saved_us > b.saved_us;
    if (a.calls != b.calls) return a.calls > b.calls;
    return a.key_hash < b.key_hash;
  });
  return report;
}

std::string ReportJson(const KeyReport& report) {
  Json rows = Json::array();
  for (const ReportRow& r : report.rows) {
    rows.push_back(Json{{"key_hash", r.key_hash},
                        {"key_text", r.key_text},
                        {"op", r.op},
                        {"state", r.state},
                        {"calls", r.calls},
                        {"hits", r.hits},
                        {"misses", r.misses},
                        {"pytorch_us", r.pytorch_us},
                        {"kjit_us", r.kjit_us},
                        {"speedup", r.speedup},
                        {"floor_us", r.floor_us},
                        {"trials", r.trials},
                        {"record_id", r.record_id},
                        {"timed_on", r.timed_on},
                        {"saved_us", r.saved_us},
                        {"best_so_far_us", r.best_so_far_us}});
  }
  return DumpJson(Json{{"cache", report.cache_path},
                       {"run", report.run ? RunJson(*report.run) : Json(nullptr)},
                       {"keys", report.rows.size()},
                       {"served", report.served},
                       {"calls", report.calls},
                       {"hits", report.hits},
                       {"saved_us", report.saved_us},
                       {"rows", rows}});
}

std::string RunsJson(const std::vector<cache::RunSummary>& runs) {
  Json out = Json::array();
  for (const cache::RunSummary& r : runs) {
    Json j = RunJson(r);
    j["keys"] = r.keys;
    j["calls"] = r.hits + r.misses;
    j["hits"] = r.hits;
    out.push_back(std::move(j));
  }
  return DumpJson(out);
}

namespace {

std::vector<std::string> Cells(const ReportRow& r) {
  return {r.key_hash.substr(0, 12), r.state, std::to_string(r.calls), std::to_string(r.hits),
          MicrosText(r.pytorch_us), MicrosText(r.kjit_us), SpeedupText(r.speedup), SavedText(r.saved_us),
          std::to_string(r.trials), r.key_text};
}

const std::vector<Column>& Columns() {
  static const std::vector<Column> columns = {{"KEY", false},       {"STATE", false},     {"CALLS", true},
                                              {"HITS", true},        {"PYTORCH(us)", true}, {"KJIT(us)", true},
                                              {"SPEEDUP", true},     {"SAVED", true},       {"TRIALS", true},
                                              {"OP / KEY", false}};
  return columns;
}

std::string Summary(const KeyReport& report) {
  std::string run_line;
  if (report.run) {
    const cache::RunSummary& run = *report.run;
    run_line = "run " + run.id + " (" + (run.program.empty() ? std::string("program not named") : run.program) +
               "), started " + UtcTime(run.started_unix_ms) + ", last report " + UtcTime(run.last_seen_unix_ms) + "\n";
  }
  return run_line + Format("%zu keys, %zu served by kjit; %llu calls, %llu of them kjit's kernels; GPU time saved %s: %s",
                           report.rows.size(), report.served, static_cast<unsigned long long>(report.calls),
                           static_cast<unsigned long long>(report.hits), report.run ? "in this run" : "so far",
                           report.saved_us > 0 ? SavedText(report.saved_us).c_str() : "none");
}

}  // namespace

std::string ReportMarkdown(const KeyReport& report) {
  std::ostringstream out;
  out << "**kjit report** (" << report.cache_path << "): " << Summary(report) << "\n\n";
  out << "|";
  for (const Column& c : Columns()) out << " " << c.header << " |";
  out << "\n|";
  for (const Column& c : Columns()) out << (c.right_aligned ? "---:|" : "---|");
  out << "\n";
  for (const ReportRow& r : report.rows) {
    std::vector<std::string> cells = Cells(r);
    cells.back() = "`" + cells.back() + "`";
    out << "|";
    for (const std::string& cell : cells) {
      std::string escaped;
      for (char ch : cell) escaped += ch == '|' ? std::string("\\|") : std::string(1, ch);
      out << " " << escaped << " |";
    }
    out << "\n";
  }
  return out.str();
}

namespace {

// A horizontal bar chart, one bar per row: label, value, the value's text.
std::string BarChart(const std::string& title, const std::vector<std::pair<std::string, double>>& bars,
                     const std::function<std::string(double)>& text, double reference = 0) {
  std::ostringstream svg;
  const int bar_h = 18, label_w = 330, chart_w = 420, top = 30;
  const int height = top + static_cast<int>(bars.size()) * (bar_h + 4) + 10;
  double most = reference;
  for (const auto& [label, v] : bars) most = std::max(most, v);
  if (most <= 0) most = 1;
  svg << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << label_w + chart_w + 90 << "\" height=\"" << height
      << "\" role=\"img\"><title>" << Html(title) << "</title>\n";
  svg << "<text x=\"0\" y=\"16\" font-weight=\"bold\">" << Html(title) << "</text>\n";
  int y = top;
  for (const auto& [label, v] : bars) {
    const double w = std::max(0.0, v) / most * chart_w;
    svg << "<text x=\"" << label_w - 6 << "\" y=\"" << y + 13 << "\" text-anchor=\"end\" font-size=\"11\">"
        << Html(Truncate(label, 55)) << "</text>";
    svg << "<rect x=\"" << label_w << "\" y=\"" << y << "\" width=\"" << Format("%.1f", w) << "\" height=\"" << bar_h
        << "\" fill=\"#4e79a7\"/>";
    svg << "<text x=\"" << label_w + static_cast<int>(w) + 4 << "\" y=\"" << y + 13 << "\" font-size=\"11\">"
        << Html(text(v)) << "</text>\n";
    y += bar_h + 4;
  }
  if (reference > 0) {
    const double x = label_w + reference / most * chart_w;
    svg << "<line x1=\"" << Format("%.1f", x) << "\" y1=\"" << top - 4 << "\" x2=\"" << Format("%.1f", x) << "\" y2=\""
        << y << "\" stroke=\"#e15759\" stroke-dasharray=\"4 3\"/>\n";
  }
  svg << "</svg>\n";
  return svg.str();
}

// Best-so-far time against trials for one key, as a step line, with PyTorch's time as a reference.
std::string CurveChart(const ReportRow& r) {
  const int w = 360, h = 160, left = 50, bottom = 24, top = 22;
  double most = r.pytorch_us;
  for (double v : r.best_so_far_us) most = std::max(most, v);
  if (most <= 0) return "";
  const size_t n = r.best_so_far_us.size();
  auto x_of = [&](size_t i) { return left + (n <= 1 ? 0.0 : static_cast<double>(i) / static_cast<double>(n - 1) * (w - left - 10)); };
  auto y_of = [&](double v) { return top + (1.0 - v / most) * (h - top - bottom); };
  std::ostringstream svg;
  svg << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << w << "\" height=\"" << h << "\" role=\"img\"><title>"
      << Html(r.key_text) << "</title>\n";
  svg << "<text x=\"0\" y=\"14\" font-size=\"11\">" << Html(Truncate(r.key_text, 60)) << "</text>\n";
  svg << "<line x1=\"" << left << "\" y1=\"" << h - bottom << "\" x2=\"" << w - 10 << "\" y2=\"" << h - bottom
      << "\" stroke=\"#888\"/><line x1=\"" << left << "\" y1=\"" << top << "\" x2=\"" << left << "\" y2=\"" << h - bottom
      << "\" stroke=\"#888\"/>\n";
  svg << "<text x=\"" << left - 4 << "\" y=\"" << top + 4 << "\" text-anchor=\"end\" font-size=\"10\">"
      << Format("%.0f", most) << "</text><text x=\"" << left - 4 << "\" y=\"" << h - bottom
      << "\" text-anchor=\"end\" font-size=\"10\">0 us</text>\n";
  svg << "<text x=\"" << w - 10 << "\" y=\"" << h - 6 << "\" text-anchor=\"end\" font-size=\"10\">" << n
      << " trials</text>\n";
  if (r.pytorch_us > 0) {
    svg << "<line x1=\"" << left << "\" y1=\"" << Format("%.1f", y_of(r.pytorch_us)) << "\" x2=\"" << w - 10
        << "\" y2=\"" << Format("%.1f", y_of(r.pytorch_us)) << "\" stroke=\"#e15759\" stroke-dasharray=\"4 3\"/>"
        << "<text x=\"" << w - 10 << "\" y=\"" << Format("%.1f", y_of(r.pytorch_us) - 3)
        << "\" text-anchor=\"end\" font-size=\"10\" fill=\"#e15759\">PyTorch</text>\n";
  }
  std::string points;
  for (size_t i = 0; i < n; ++i) {
    if (r.best_so_far_us[i] <= 0) continue;
    points += Format("%.1f,%.1f ", x_of(i), y_of(r.best_so_far_us[i]));
  }
  if (!points.empty()) {
    svg << "<polyline points=\"" << points << "\" fill=\"none\" stroke=\"#4e79a7\" stroke-width=\"2\"/>\n";
  }
  svg << "</svg>\n";
  return svg.str();
}

}  // namespace

std::string ReportHtml(const KeyReport& report) {
  std::ostringstream out;
  out << "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>kjit report</title>\n"
      << "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse;font-size:12px}"
      << "td,th{border:1px solid #ccc;padding:3px 6px}td.n{text-align:right}code{font-size:11px}"
      << ".curves{display:flex;flex-wrap:wrap;gap:12px}</style></head><body>\n";
  out << "<h1>kjit report</h1>\n<p>" << Html(report.cache_path) << ": " << Html(Summary(report)) << "</p>\n";
  out << "<table><thead><tr>";
  for (const Column& c : Columns()) out << "<th>" << Html(c.header) << "</th>";
  out << "</tr></thead><tbody>\n";
  for (const ReportRow& r : report.rows) {
    const std::vector<std::string> cells = Cells(r);
    out << "<tr>";
    for (size_t i = 0; i < cells.size(); ++i) {
      const bool last = i + 1 == cells.size();
      out << (Columns()[i].right_aligned ? "<td class=\"n\">" : "<td>") << (last ? "<code>" : "") << Html(cells[i])
          << (last ? "</code>" : "") << "</td>";
    }
    out << "</tr>\n";
  }
  out << "</tbody></table>\n";
  std::vector<std::pair<std::string, double>> speedups, saved;
  for (const ReportRow& r : report.rows) {
    if (r.speedup > 0) speedups.emplace_back(r.key_text, r.speedup);
    if (r.saved_us > 0) saved.emplace_back(r.key_text, r.saved_us);
  }
  out << "<h2>Speedup over PyTorch, per key</h2>\n";
  if (speedups.empty()) {
    out << "<p>No key has a kernel yet.</p>\n";
  } else {
    out << BarChart("speedup (dashed: PyTorch, 1x)", speedups, [](double v) { return Format("%.2fx", v); }, 1.0);
  }
  out << "<h2>GPU time saved so far, per key</h2>\n";
  if (saved.empty()) {
    out << "<p>No time saved yet: no program has reported running kjit's kernels.</p>\n";
  } else {
    out << BarChart("time saved (hits x time saved per hit)", saved, [](double v) { return SavedText(v); });
  }
  out << "<h2>Best time against trials, per tuned key</h2>\n<div class=\"curves\">\n";
  for (const ReportRow& r : report.rows) {
    if (!r.best_so_far_us.empty()) out << CurveChart(r);
  }
  out << "</div>\n</body></html>\n";
  return out.str();
}

ReportCommand::ReportCommand(CLI::App& app) : options_(std::make_unique<Options>()) {
  Options& o = *options_;
  o.report = app.add_subcommand(
      "report", "What kjit did for your programs, per key: calls, PyTorch's time and the kernel's, speedup, state "
                "and GPU time saved (from the kernel cache; programs report their calls as they run)");
  o.report->add_option("--cache", o.cache_path, "The cache file (default: $KJIT_CACHE, else ~/.cache/kjit/cache.db)");
  auto* json = o.report->add_flag("--json", o.json, "Machine-readable output");
  auto* markdown = o.report->add_flag("--markdown", o.markdown, "A markdown table (for notes and RESULTS files)");
  auto* html = o.report->add_option("--html", o.html,
                                    "Also write one self-contained HTML page with plots (no scripts, no network) here");
  json->excludes(markdown);
  html->type_name("FILE");
  o.report->add_option("--limit", o.limit, "At most this many keys in the table (0: all)")->check(CLI::NonNegativeNumber);
  auto* run = o.report->add_option("--run", o.run,
                                   "Only this program run's keys and calls: a run id from --runs, or `last` (the run "
                                   "seen most recently); `kjit run` names each run (KJIT_RUN_ID)");
  run->type_name("ID|last");
  auto* runs = o.report->add_flag("--runs", o.runs, "List the kept program runs (the newest 200), newest first");
  runs->excludes(run)->excludes(markdown)->excludes(html);
}

ReportCommand::~ReportCommand() = default;

bool ReportCommand::chosen() const { return options_->report->parsed(); }

int ReportCommand::Run() {
  const Options& o = *options_;
  cache::OpenOptions options;
  options.path = o.cache_path.empty() ? cache::DefaultCachePath() : o.cache_path;
  options.read_only = true;
  options.create = false;
  auto cache = cache::KernelCache::Open(options);
  if (!cache.ok()) {
    if (cache.status().code() == StatusCode::kNotFound) {
      std::cerr << "kjit: " << cache.status().message() << "\n";
      return 1;
    }
    return Report(cache.status());
  }
  if (o.runs) {
    auto runs = (*cache)->ListRuns();
    if (!runs.ok()) return Report(runs.status());
    if (o.json) {
      std::cout << RunsJson(*runs) << "\n";
      return 0;
    }
    if (runs->empty()) {
      std::cout << "(no program run has reported its calls yet: run one under `kjit run`)\n";
      return 0;
    }
    static const std::vector<Column> columns = {{"RUN", false},  {"STARTED", false}, {"LAST REPORT", false},
                                                {"KEYS", true},  {"CALLS", true},    {"HITS", true},
                                                {"PROGRAM", false}};
    std::vector<std::vector<std::string>> rows;
    for (const cache::RunSummary& r : *runs) {
      rows.push_back({r.id, UtcTime(r.started_unix_ms), UtcTime(r.last_seen_unix_ms), std::to_string(r.keys),
                      std::to_string(r.hits + r.misses), std::to_string(r.hits), r.program});
    }
    PrintTable(std::cout, columns, rows, TableWidth());
    return 0;
  }
  auto report = BuildReport(**cache, o.run);
  if (!report.ok()) {
    if (report.status().code() == StatusCode::kNotFound) {
      std::cerr << "kjit: " << report.status().message() << "\n";
      return 1;
    }
    return Report(report.status());
  }
  if (o.limit > 0 && report->rows.size() > static_cast<size_t>(o.limit)) report->rows.resize(o.limit);
  if (!o.html.empty()) {
    std::ofstream out(o.html);
    out << ReportHtml(*report);
    if (!out) return Report(IOError("cannot write " + o.html));
    std::cerr << "kjit: wrote " << o.html << "\n";
  }
  if (o.json) {
    std::cout << ReportJson(*report) << "\n";
  } else if (o.markdown) {
    std::cout << ReportMarkdown(*report);
  } else {
    std::cout << Summary(*report) << "\n";
    if (report->rows.empty()) {
      std::cout << "(no key yet: run a program under `kjit run`)\n";
      return 0;
    }
    std::vector<std::vector<std::string>> rows;
    for (const ReportRow& r : report->rows) rows.push_back(Cells(r));
    PrintTable(std::cout, Columns(), rows, TableWidth());
  }
  return 0;
}

}  // namespace kjit::cli
