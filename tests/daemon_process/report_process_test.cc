// `kjit report` on a cache filled the way kjit fills it: kjitd with the fake evaluator verifies and stores
// kernels, a client reports its calls per key (ipc report_uses) and queues a task, and the report's figures
// (all formats) are checked against what the cache holds. The HTML page is checked for well-formed SVG plots
// (scripts/check_report_html.py); in a headless Chromium too where one is installed.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <array>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "kjit/cache/kernel_cache.h"
#include "kjit/ipc/client.h"
#include "kjit/runtime/op_key.h"
#include "kjitd_harness.h"

namespace kjit {
namespace {

using testing::KjitdHarness;

std::string KeyBytes(int64_t n) {
  return OpKey::Single("aten::relu", "", {TensorDesc::Contiguous(DType::kFloat32, {n})}, 90).Encode();
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// stdout of a shell command, and its exit status.
std::pair<std::string, int> Shell(const std::string& command) {
  std::string out;
  FILE* p = popen(command.c_str(), "r");
  if (p == nullptr) return {"", -1};
  std::array<char, 4096> buf{};
  size_t n = 0;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  const int status = pclose(p);
  return {out, WIFEXITED(status) ? WEXITSTATUS(status) : -1};
}

// One trial of the fake's behaviour (`ok`: 1.0 us against PyTorch's 2.0, stored; `slow`: 2.0 us, not).
void Trial(ipc::Client& c, const std::string& key, const std::string& behaviour) {
  auto obs = c.OpenEpisode(key);
  ASSERT_TRUE(obs.ok()) << obs.status().ToString();
  ipc::SubmitCandidate candidate;
  candidate.episode_id = obs->episode_id;
  candidate.source = behaviour;
  candidate.entry_point = "k";
  candidate.block[0] = 128;
  auto r = c.SubmitCandidate(candidate);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  (void)c.CloseEpisode(obs->episode_id);
}

TEST(KjitReport, FiguresMatchTheCacheInEveryFormat) {
  testing::ScopedEnv env({{"FAKE_EVALUATOR_GPUS", "GPU-aaaa:90"}});
  KjitdHarness h(KJIT_KJITD, {"--evaluator", KJIT_FAKE_EVALUATOR, "--devices", "0", "--when", "always"});
  ASSERT_TRUE(h.Start()) << ReadFile(h.log_path());
  ipc::ClientOptions o;
  o.endpoint = h.endpoint();
  o.request_timeout = std::chrono::milliseconds(20000);
  ipc::Client c(o);
  const std::string served = KeyBytes(100), slow = KeyBytes(200), queued = KeyBytes(300);
  Trial(c, served, "ok");
  Trial(c, slow, "slow");
  ASSERT_TRUE(c.Submit(queued, 0, "from the test").ok());
  auto hex = [](const std::string& key) { return OpKey::Decode(key)->Hash().ToHex(); };
  int64_t record = 0;
  {
    cache::OpenOptions ro;
    ro.path = h.cache_path();
    ro.read_only = true;
    auto kc = cache::KernelCache::Open(ro);
    ASSERT_TRUE(kc.ok());
    auto best = (*kc)->BestVerified(OpKey::Decode(served)->Hash(), "");
    ASSERT_TRUE(best.ok());
    record = best->id;
    ASSERT_GT(record, 0);
  }
  ASSERT_TRUE(c.ReportUses(
      ipc::ReportUses{1, {{hex(served), record, 100, 5}, {hex(slow), 0, 0, 50}}, "run-1", "python3 app.py", 1000}));
  ASSERT_TRUE(c.Flush(std::chrono::seconds(20)).ok());

  const std::string kjit = std::string(KJIT_KJIT) + " report --cache " + h.cache_path();
  auto [json_text, json_rc] = Shell(kjit + " --json");
  ASSERT_EQ(json_rc, 0) << json_text;
  const auto j = nlohmann::json::parse(json_text);
  EXPECT_EQ(j["keys"], 3);
  EXPECT_EQ(j["served"], 1);
  EXPECT_EQ(j["calls"], 155);
  EXPECT_EQ(j["hits"], 100);
  EXPECT_DOUBLE_EQ(j["saved_us"].template get<double>(), 100 * (2.0 - 1.0));
  std::map<std::string, nlohmann::json> rows;
  for (const auto& r : j["rows"]) rows[r["key_hash"]] = r;
  ASSERT_EQ(rows.size(), 3u);
  const auto& s = rows[hex(served)];
  EXPECT_EQ(s["state"], "served");
  EXPECT_EQ(s["op"], "aten::relu");
  EXPECT_EQ(s["calls"], 105);
  EXPECT_EQ(s["record_id"], record);
  EXPECT_DOUBLE_EQ(s["kjit_us"].template get<double>(), 1.0);
  EXPECT_DOUBLE_EQ(s["pytorch_us"].template get<double>(), 2.0);
  EXPECT_DOUBLE_EQ(s["speedup"].template get<double>(), 2.0);
  EXPECT_EQ(s["trials"], 1);
  EXPECT_EQ(s["best_so_far_us"], nlohmann::json::array({1.0}));
  const auto& w = rows[hex(slow)];
  EXPECT_EQ(w["state"], "not tuned");  // an agent's trial, no task: nothing stored, nothing queued
  EXPECT_EQ(w["misses"], 50);
  EXPECT_EQ(w["kjit_us"], 0.0);
  EXPECT_EQ(w["saved_us"], 0.0);
  EXPECT_EQ(w["trials"], 1);
  const auto& q = rows[hex(queued)];
  EXPECT_EQ(q["state"], "queued");
  EXPECT_EQ(q["calls"], 0);
  // Most time saved first.
  EXPECT_EQ(j["rows"][0]["key_hash"], hex(served));

  auto [table, table_rc] = Shell(kjit);
  ASSERT_EQ(table_rc, 0);
  EXPECT_NE(table.find("3 keys, 1 served by kjit; 155 calls, 100 of them kjit's kernels; GPU time saved so far: 100.0 us"),
            std::string::npos)
      << table;
  EXPECT_NE(table.find("2.00x"), std::string::npos) << table;
  auto [md, md_rc] = Shell(kjit + " --markdown");
  ASSERT_EQ(md_rc, 0);
  EXPECT_NE(md.find("| " + hex(served).substr(0, 12) + " | served | 105 | 100 | 2.00 | 1.00 | 2.00x | 100.0 us | 1 |"),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("| " + hex(queued).substr(0, 12) + " | queued | 0 | 0 |"), std::string::npos) << md;

  const std::string html = h.dir() + "/report.html";
  auto [quiet, html_rc] = Shell(kjit + " --html " + html + " 2>&1");
  ASSERT_EQ(html_rc, 0) << quiet;
  const std::string page = ReadFile(html);
  EXPECT_EQ(page.find("<script"), std::string::npos) << "self-contained and script-free";
  // Well-formed: every SVG parses as XML; the plots: speedup, time saved, and a curve per key with trials (2).
  auto [check, check_rc] = Shell("python3 " KJIT_SOURCE_DIR "/scripts/check_report_html.py " + html + " 2>&1");
  EXPECT_EQ(check_rc, 0) << check;
  EXPECT_NE(check.find("4 svg plots"), std::string::npos) << check;

  // A second run of the program: `--run` reports each run's own calls, `last` the newest, `--runs` lists both.
  ASSERT_TRUE(c.ReportUses(ipc::ReportUses{2, {{hex(served), record, 10, 0}}, "run-2", "python3 app.py --again", 2000}));
  ASSERT_TRUE(c.Flush(std::chrono::seconds(20)).ok());
  auto [run1_text, run1_rc] = Shell(kjit + " --run run-1 --json");
  ASSERT_EQ(run1_rc, 0) << run1_text;
  const auto r1 = nlohmann::json::parse(run1_text);
  EXPECT_EQ(r1["run"]["id"], "run-1");
  EXPECT_EQ(r1["run"]["program"], "python3 app.py");
  EXPECT_EQ(r1["keys"], 2);  // the queued key was not called in this run
  EXPECT_EQ(r1["calls"], 155);
  EXPECT_EQ(r1["hits"], 100);
  EXPECT_DOUBLE_EQ(r1["saved_us"].template get<double>(), 100.0);
  auto [last_text, last_rc] = Shell(kjit + " --run last --json");
  ASSERT_EQ(last_rc, 0) << last_text;
  const auto r2 = nlohmann::json::parse(last_text);
  EXPECT_EQ(r2["run"]["id"], "run-2");
  EXPECT_EQ(r2["keys"], 1);
  EXPECT_EQ(r2["calls"], 10);
  EXPECT_DOUBLE_EQ(r2["saved_us"].template get<double>(), 10.0);
  EXPECT_EQ(r2["rows"][0]["state"], "served");
  auto [last_table, last_table_rc] = Shell(kjit + " --run last");
  ASSERT_EQ(last_table_rc, 0);
  EXPECT_NE(last_table.find("run run-2 (python3 app.py --again)"), std::string::npos) << last_table;
  EXPECT_NE(last_table.find("1 keys, 1 served by kjit; 10 calls, 10 of them kjit's kernels; GPU time saved in this "
                            "run: 10.0 us"),
            std::string::npos)
      << last_table;
  auto [runs_text, runs_rc] = Shell(kjit + " --runs --json");
  ASSERT_EQ(runs_rc, 0) << runs_text;
  const auto runs = nlohmann::json::parse(runs_text);
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_EQ(runs[0]["id"], "run-2");  // newest first
  EXPECT_EQ(runs[1]["id"], "run-1");
  EXPECT_EQ(runs[1]["calls"], 155);
  auto [runs_table, runs_table_rc] = Shell(kjit + " --runs");
  ASSERT_EQ(runs_table_rc, 0);
  EXPECT_NE(runs_table.find("python3 app.py --again"), std::string::npos) << runs_table;
  auto [unknown, unknown_rc] = Shell(kjit + " --run no-such-run 2>&1");
  EXPECT_EQ(unknown_rc, 1) << unknown;
  EXPECT_NE(unknown.find("no run \"no-such-run\""), std::string::npos) << unknown;
}

}  // namespace
}  // namespace kjit
