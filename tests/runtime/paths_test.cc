#include "kjit/runtime/paths.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>

namespace kjit {
namespace {

std::string TempDir() {
  char tmpl[] = "/tmp/kjit-paths-test-XXXXXX";
  const char* d = mkdtemp(tmpl);
  return d ? d : "";
}

TEST(Paths, CacheDirFollowsEnvironment) {
  setenv("KJIT_CACHE_DIR", "/x/kjit-cache", 1);
  EXPECT_EQ(CacheDir(), "/x/kjit-cache");
  unsetenv("KJIT_CACHE_DIR");
  setenv("XDG_CACHE_HOME", "/x/xdg", 1);
  EXPECT_EQ(CacheDir(), "/x/xdg/kjit");
  unsetenv("XDG_CACHE_HOME");
  setenv("HOME", "/x/home", 1);
  EXPECT_EQ(CacheDir(), "/x/home/.cache/kjit");
}

TEST(Paths, AtomicWriteThenRead) {
  const std::string dir = TempDir();
  ASSERT_FALSE(dir.empty());
  ASSERT_TRUE(MakeDirectories(dir + "/a/b/c").ok());
  const std::string path = dir + "/a/b/c/file";
  ASSERT_TRUE(WriteFileAtomic(path, "first").ok());
  ASSERT_TRUE(WriteFileAtomic(path, std::string("second\0with nul", 15)).ok());
  auto back = ReadFile(path);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, std::string("second\0with nul", 15));
  EXPECT_EQ(ReadFile(dir + "/missing").status().code(), StatusCode::kNotFound);
  EXPECT_FALSE(WriteFileAtomic(dir + "/no/such/dir/file", "x").ok());
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace kjit
