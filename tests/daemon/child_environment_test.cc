// What kjitd's children inherit: never kjit's shim (daemon/child_environment.h).
#include "child_environment.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>

namespace kjit::daemon {
namespace {

TEST(ChildEnvironment, KjitsShimLeavesLdPreloadAndTheRestStays) {
  EXPECT_EQ(WithoutKjitShim({"PATH=/bin", "LD_PRELOAD=/opt/kjit/lib/kjit/libkjit_preload.so", "HOME=/h"}),
            (std::vector<std::string>{"PATH=/bin", "HOME=/h"}));
  EXPECT_EQ(WithoutKjitShim({"LD_PRELOAD=/build/lib/kjit/libkjit_preload.so:/usr/lib/libjemalloc.so.2"}),
            (std::vector<std::string>{"LD_PRELOAD=/usr/lib/libjemalloc.so.2"}));
  EXPECT_EQ(WithoutKjitShim({"LD_PRELOAD=libjemalloc.so.2 libkjit_preload.so  /x/liby.so"}),
            (std::vector<std::string>{"LD_PRELOAD=libjemalloc.so.2:/x/liby.so"}));
  // Only that file name: a library that merely contains the name stays.
  EXPECT_EQ(WithoutKjitShim({"LD_PRELOAD=/x/libkjit_preload.so.bak"}),
            (std::vector<std::string>{"LD_PRELOAD=/x/libkjit_preload.so.bak"}));
  EXPECT_EQ(WithoutKjitShim({"LD_PRELOAD="}), (std::vector<std::string>{}));
  EXPECT_EQ(WithoutKjitShim({"MY_LD_PRELOAD=/x/libkjit_preload.so"}),
            (std::vector<std::string>{"MY_LD_PRELOAD=/x/libkjit_preload.so"}));
}

// A worker's descendants are kjit's too (compute-sanitizer and its target): a shell and the sleep it starts,
// two generations below a process of ours, are found; this test's parent is not.
TEST(ChildProcesses, DescendantsOfKjitsProcessesAreFound) {
  char path[] = "/tmp/kjit-descendants-XXXXXX";
  const int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  close(fd);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    setpgid(0, 0);
    const std::string script = std::string("sleep 30 & echo $! > ") + path + "; wait";
    execl("/bin/sh", "sh", "-c", script.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  uint32_t grandchild = 0;
  for (int i = 0; i < 200 && grandchild == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    std::ifstream in(path);
    in >> grandchild;
  }
  const std::vector<uint32_t> found = WithDescendants({static_cast<uint32_t>(child)});
  kill(-child, SIGKILL);
  waitpid(child, nullptr, 0);
  unlink(path);
  ASSERT_NE(grandchild, 0u) << "the shell did not start its child";
  EXPECT_NE(std::find(found.begin(), found.end(), static_cast<uint32_t>(child)), found.end());
  EXPECT_NE(std::find(found.begin(), found.end(), grandchild), found.end()) << "the shell's child";
  EXPECT_EQ(std::find(found.begin(), found.end(), static_cast<uint32_t>(getppid())), found.end());
  EXPECT_EQ(std::find(found.begin(), found.end(), static_cast<uint32_t>(getpid())), found.end());
  EXPECT_TRUE(WithDescendants({}).empty());
}

}  // namespace
}  // namespace kjit::daemon
