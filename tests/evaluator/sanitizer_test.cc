// compute-sanitizer's side of the evaluator, without a GPU: reading its reports, finding it, the command
// line, and running a target with its environment and a deadline (a shell stands in for the tool).
#include "kjit/evaluator/sanitizer.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>

namespace kjit::eval {
namespace {

// As compute-sanitizer 2025 prints them (the text around the summary varies by tool and version).
constexpr const char* kMemcheckOutOfBounds =
    "========= COMPUTE-SANITIZER\n"
    "ran under compute-sanitizer (one set, no timing)\n"
    "========= Invalid __global__ read of size 4 bytes\n"
    "=========     at k+0x1d0\n"
    "=========     by thread (255,0,0) in block (16415,0,0)\n"
    "=========     Address 0x7f3a2d010000 is out of bounds\n"
    "=========     and is 65,536 bytes after the nearest allocation at 0x7f3a2c000000 of size 16,826,368 bytes\n"
    "=========     Saved host backtrace up to driver entry point at kernel launch time\n"
    "=========         Host Frame: [0x2dfbef] in libcuda.so.1\n"
    "=========\n"
    "========= ERROR SUMMARY: 2 errors\n";
constexpr const char* kMemcheckClean =
    "========= COMPUTE-SANITIZER\n"
    "verified: ran under compute-sanitizer (one set, no timing)\n"
    "========= ERROR SUMMARY: 0 errors\n";
constexpr const char* kRacecheckHazard =
    "========= COMPUTE-SANITIZER\n"
    "========= Error: Race reported between Write access at k+0x150\n"
    "=========     and Read access at k+0x1a0 [128 hazards]\n"
    "=========\n"
    "========= RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)\n";

TEST(Sanitizer, ReadsAnOutOfBoundsReadWithWhereItHappened) {
  const SanitizerReport r = ParseSanitizerOutput(kMemcheckOutOfBounds, kSanitizerErrorExit);
  EXPECT_TRUE(r.summary_seen);
  EXPECT_EQ(r.errors, 2);
  EXPECT_EQ(r.first_error.rfind("Invalid __global__ read of size 4 bytes; at k+0x1d0", 0), 0u) << r.first_error;
  EXPECT_NE(r.first_error.find("out of bounds"), std::string::npos) << r.first_error;
  EXPECT_EQ(r.first_error.find("Host Frame"), std::string::npos) << "the backtrace is not the finding";
}

TEST(Sanitizer, ReadsACleanRunAndARace) {
  const SanitizerReport clean = ParseSanitizerOutput(kMemcheckClean, 0);
  EXPECT_TRUE(clean.summary_seen);
  EXPECT_EQ(clean.errors, 0);
  EXPECT_TRUE(clean.first_error.empty());
  const SanitizerReport race = ParseSanitizerOutput(kRacecheckHazard, kSanitizerErrorExit);
  EXPECT_TRUE(race.summary_seen);
  EXPECT_EQ(race.errors, 1);
  EXPECT_NE(race.first_error.find("Race reported"), std::string::npos) << race.first_error;
}

TEST(Sanitizer, AnErrorExitWithoutASummaryIsStillAnError) {
  const SanitizerReport r = ParseSanitizerOutput("========= Program hit cudaErrorIllegalAddress\n", kSanitizerErrorExit);
  EXPECT_EQ(r.errors, 1);
  EXPECT_FALSE(r.summary_seen);
  // A tool that could not run at all (no summary, another exit code): nothing found, and not seen to run.
  const SanitizerReport refused = ParseSanitizerOutput("========= Error: Device not supported\n", 1);
  EXPECT_FALSE(refused.summary_seen);
  EXPECT_EQ(refused.errors, 0);
}

TEST(Sanitizer, CommandChecksTheCandidateOnly) {
  const auto argv = SanitizerCommand("/cs", "memcheck", "softmax_k", "/w", {"--sanitize-request", "/tmp/r"});
  ASSERT_GE(argv.size(), 4u);
  EXPECT_EQ(argv.front(), "/cs");
  auto at = [&](const std::string& option) {
    const auto it = std::find(argv.begin(), argv.end(), option);
    return it == argv.end() || it + 1 == argv.end() ? std::string() : *(it + 1);
  };
  EXPECT_EQ(at("--tool"), "memcheck");
  EXPECT_EQ(at("--error-exitcode"), std::to_string(kSanitizerErrorExit));
  EXPECT_EQ(at("--kernel-name"), "kns=softmax_k");
  EXPECT_EQ(at("--leak-check"), "no");
  const auto worker = std::find(argv.begin(), argv.end(), "/w");
  ASSERT_NE(worker, argv.end());
  EXPECT_EQ(std::vector<std::string>(worker + 1, argv.end()), (std::vector<std::string>{"--sanitize-request", "/tmp/r"}));
  const auto race = SanitizerCommand("/cs", "racecheck", "k", "/w", {});
  EXPECT_EQ(std::find(race.begin(), race.end(), "--leak-check"), race.end()) << "memcheck's option only";
}

TEST(Sanitizer, FindsTheConfiguredToolOrNone) {
  EXPECT_EQ(FindSanitizer("off"), "");
  EXPECT_EQ(FindSanitizer("/nonexistent/compute-sanitizer"), "");
  char dir_template[] = "/tmp/kjit-sanitizer-test-XXXXXX";
  ASSERT_NE(mkdtemp(dir_template), nullptr);
  const std::string dir = dir_template;
  const std::string tool = dir + "/compute-sanitizer";
  std::ofstream(tool) << "#!/bin/sh\nexit 0\n";
  EXPECT_EQ(FindSanitizer(tool), "") << "not executable yet";
  chmod(tool.c_str(), 0755);
  EXPECT_EQ(FindSanitizer(tool), tool);
  const char* old_path = std::getenv("PATH");
  const std::string saved = old_path ? old_path : "";
  setenv("PATH", (dir + ":" + saved).c_str(), 1);
  EXPECT_EQ(FindSanitizer("auto"), tool);
  EXPECT_EQ(FindSanitizer(""), tool);
  setenv("PATH", saved.c_str(), 1);
  unlink(tool.c_str());
  rmdir(dir.c_str());
}

TEST(Sanitizer, RunsTheTargetWithTheCachingAllocatorOffAndItsOutput) {
  setenv("PYTORCH_NO_CUDA_MEMORY_CACHING", "0", 1);  // replaced, not duplicated
  auto r = RunForSanitizer({"/bin/sh", "-c", "echo cache=$PYTORCH_NO_CUDA_MEMORY_CACHING; echo oops >&2; exit 86"},
                           std::chrono::seconds(20));
  unsetenv("PYTORCH_NO_CUDA_MEMORY_CACHING");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->exit_code, kSanitizerErrorExit);
  EXPECT_FALSE(r->timed_out);
  EXPECT_NE(r->output.find("cache=1\n"), std::string::npos) << r->output;
  EXPECT_NE(r->output.find("oops"), std::string::npos) << "stderr is kept too";
}

TEST(Sanitizer, ATargetPastItsDeadlineIsKilledWithItsChildren) {
  const auto started = std::chrono::steady_clock::now();
  // The shell's own child (sleep) is in the group and goes too: nothing holds the output file open.
  auto r = RunForSanitizer({"/bin/sh", "-c", "sleep 30 & sleep 30; echo never"}, std::chrono::milliseconds(300));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->timed_out);
  EXPECT_EQ(r->exit_code, -1);
  EXPECT_EQ(r->output.find("never"), std::string::npos);
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(10));
  EXPECT_FALSE(RunForSanitizer({"/nonexistent/tool"}, std::chrono::seconds(1)).ok() &&
               RunForSanitizer({"/nonexistent/tool"}, std::chrono::seconds(1))->exit_code == 0);
}

// The user's program wants the GPU (the worker got SIGUSR1): the run stops at the next poll, not at its
// deadline, and says it was stopped rather than timed out.
TEST(Sanitizer, ARunStopsWhenAskedAndSaysSo) {
  int polls = 0;
  auto r = RunForSanitizer({"/bin/sh", "-c", "echo started; sleep 30 & sleep 30; echo never"}, std::chrono::minutes(5),
                           [&polls] { return ++polls >= 5; });
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->stopped);
  EXPECT_FALSE(r->timed_out);
  EXPECT_EQ(r->exit_code, -1);
  EXPECT_EQ(polls, 5) << "stopped at the poll that asked, not later";
  EXPECT_EQ(r->output.find("never"), std::string::npos);
  // A stop that never asks changes nothing.
  auto quiet = RunForSanitizer({"/bin/sh", "-c", "echo done"}, std::chrono::seconds(30), [] { return false; });
  ASSERT_TRUE(quiet.ok());
  EXPECT_FALSE(quiet->stopped);
  EXPECT_EQ(quiet->exit_code, 0);
  EXPECT_NE(quiet->output.find("done"), std::string::npos);
}

}  // namespace
}  // namespace kjit::eval
