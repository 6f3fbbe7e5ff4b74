// The launch journal (cache/launch_journal.h): entries of live processes are not abandoned, entries of dead
// ones and of a reused pid are, and names that are not entries are ignored.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <map>

#include "cache_test_util.h"
#include "kjit/cache/launch_journal.h"

namespace kjit::cache {
namespace {

using testing::TempDir;

bool Exists(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0;
}

// Backdates a file by `seconds`: entries younger than kMinAbandonedAgeMs are never abandoned.
void Age(const std::string& path, int seconds = 10) {
  struct timespec times[2];
  clock_gettime(CLOCK_REALTIME, &times[0]);
  times[0].tv_sec -= seconds;
  times[1] = times[0];
  ASSERT_EQ(utimensat(AT_FDCWD, path.c_str(), times, 0), 0) << path;
}

// The pid of a child that has exited and been reaped: a process that is gone.
uint32_t DeadPid() {
  const pid_t child = fork();
  if (child == 0) _exit(0);
  int status = 0;
  waitpid(child, &status, 0);
  return static_cast<uint32_t>(child);
}

TEST(LaunchJournal, ThisProcessHasAStartTime) {
  EXPECT_GT(ProcessStartTicks(static_cast<uint32_t>(getpid())), 0u);
  EXPECT_EQ(ProcessStartTicks(0), 0u);
  EXPECT_EQ(ProcessStartTicks(DeadPid()), 0u);
}

TEST(LaunchJournal, ALiveProcessesEntryIsNotAbandonedAndEndRemovesIt) {
  TempDir dir;
  const LaunchJournal journal(LaunchJournalDir(dir.file("cache.db")));
  EXPECT_EQ(journal.dir(), dir.file("cache.db") + ".launches");
  EXPECT_TRUE(journal.Abandoned()->empty()) << "no journal yet";
  EXPECT_FALSE(journal.KilledAProcess(7));
  ASSERT_TRUE(journal.Begin(7).ok());
  struct stat st {};
  ASSERT_EQ(stat(journal.dir().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  const std::string entry = journal.dir() + "/7-" + std::to_string(getpid()) + "-" +
                            std::to_string(ProcessStartTicks(static_cast<uint32_t>(getpid())));
  EXPECT_TRUE(Exists(entry));
  EXPECT_TRUE(journal.Abandoned()->empty()) << "this process is alive";
  EXPECT_FALSE(journal.KilledAProcess(7));
  journal.End(7);
  EXPECT_FALSE(Exists(entry));
  journal.End(7);  // already gone: no harm
}

TEST(LaunchJournal, ADeadProcessesEntryAndAReusedPidsAreAbandoned) {
  TempDir dir;
  const std::string path = LaunchJournalDir(dir.file("cache.db"));
  const uint32_t dead = DeadPid();
  const LaunchJournal of_dead(path, dead, 12345);
  ASSERT_TRUE(of_dead.Begin(41).ok());
  // This process's pid with another start time: a process that died and whose pid was reused.
  const LaunchJournal of_reused(path, static_cast<uint32_t>(getpid()), 1);
  ASSERT_TRUE(of_reused.Begin(42).ok());
  const LaunchJournal mine(path);
  ASSERT_TRUE(mine.Begin(43).ok());
  // Fresh, a dead process's entry is not yet abandoned: a reader in another pid namespace sees every writer
  // as dead, and a first launch lasts moments.
  EXPECT_TRUE(mine.Abandoned()->empty());
  EXPECT_FALSE(mine.KilledAProcess(41));
  for (const std::string& name : {std::string("41-") + std::to_string(dead) + "-12345",
                                  "42-" + std::to_string(getpid()) + "-1",
                                  "43-" + std::to_string(getpid()) + "-" +
                                      std::to_string(ProcessStartTicks(static_cast<uint32_t>(getpid())))}) {
    Age(path + "/" + name);
  }
  for (const char* junk : {"notes.txt", "41-x-1", "0-1-1", "41-1", "41-1-1-1", "-1-1"}) {
    std::ofstream(path + "/" + junk) << "";
  }
  auto abandoned = mine.Abandoned();
  ASSERT_TRUE(abandoned.ok()) << abandoned.status().ToString();
  ASSERT_EQ(abandoned->size(), 2u);
  std::map<int64_t, LaunchJournalEntry> by_record;
  for (const auto& e : *abandoned) by_record[e.record_id] = e;
  ASSERT_TRUE(by_record.count(41) && by_record.count(42));
  EXPECT_EQ(by_record[41].pid, dead);
  EXPECT_EQ(by_record[41].start_ticks, 12345u);
  EXPECT_TRUE(mine.KilledAProcess(41));
  EXPECT_TRUE(mine.KilledAProcess(42));
  EXPECT_FALSE(mine.KilledAProcess(43));
  EXPECT_FALSE(mine.KilledAProcess(4)) << "a prefix of 41 is not 41";
  ASSERT_TRUE(mine.Remove(by_record[41]).ok());
  EXPECT_FALSE(mine.KilledAProcess(41));
  EXPECT_TRUE(mine.Remove(by_record[41]).ok()) << "removing twice is no error";
  EXPECT_EQ(mine.Abandoned()->size(), 1u);
}

}  // namespace
}  // namespace kjit::cache
