// What kjitd's children inherit: never kjit's shim (daemon/child_environment.h).
#include "child_environment.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace kjit::daemon
