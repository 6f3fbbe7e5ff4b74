// kjitd's `devices` key (issue 10): which GPUs get an evaluator worker.
#include <gtest/gtest.h>

#include <cstdlib>

#include "config.h"
#include "evaluator_pool.h"

namespace kjit::daemon {
namespace {

using Devices = std::vector<std::string>;

TEST(DevicesConfig, AllMeansEnumerateLater) {
  auto d = ParseDevices("all");
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_TRUE(d->empty());
  EXPECT_TRUE(ParseDevices(" all ").ok());
}

TEST(DevicesConfig, OrdinalsAndUuidsTrimmedAndDeduplicated) {
  auto d = ParseDevices(" 0, 1 ,0,GPU-8f6c1d2e-0000-1111-2222-333344445555, MIG-1234 ,1,,");
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(*d, (Devices{"0", "1", "GPU-8f6c1d2e-0000-1111-2222-333344445555", "MIG-1234"}));
}

TEST(DevicesConfig, AnythingElseIsRefusedWithTheReason) {
  for (const char* bad : {"gpu1", "0,cuda:1", "-1", "12345", "GPU", "1.5"}) {
    auto d = ParseDevices(bad);
    ASSERT_FALSE(d.ok()) << bad;
    EXPECT_EQ(d.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(d.status().message().find("neither a CUDA ordinal"), std::string::npos) << d.status().message();
  }
  EXPECT_NE(ParseDevices("all,0").status().message().find("cannot be combined"), std::string::npos);
  EXPECT_NE(ParseDevices(" , ").status().message().find("empty"), std::string::npos);
}

TEST(DevicesConfig, KjitdRefusesABadListAtStart) {
  auto c = LoadConfig("", false, {{"devices", "0,gpu1"}});
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("'gpu1'"), std::string::npos) << c.status().message();
  auto ok = LoadConfig("", false, {{"devices", "1,GPU-8f6c"}});
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok->Get("devices"), "1,GPU-8f6c");
}

// The pool's options: the list as given (the worker resolves UUIDs); `all` needs the driver.
TEST(DevicesConfig, PoolOptionsKeepTheConfiguredNames) {
  auto c = LoadConfig("", false, {{"devices", "GPU-8f6c,0"}, {"evaluator", "/bin/true"}});
  ASSERT_TRUE(c.ok());
  auto o = PoolOptionsFromConfig(*c);
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_EQ(o->devices, (Devices{"GPU-8f6c", "0"}));
  EXPECT_EQ(o->worker_path, "/bin/true");
}

// memory_cap_fraction: `auto` (the default) leaves the fraction to the `when`
// mode (0.9 of an idle GPU's free memory, 0.5 under always, idle.h); a number
// applies to both; anything else is refused at start.
TEST(MemoryCapConfig, AutoIsTheWhenModesDefault) {
  auto c = LoadConfig("", false, {{"devices", "0"}, {"evaluator", "/bin/true"}});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->Get("memory_cap_fraction"), "auto");
  auto o = PoolOptionsFromConfig(*c);
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_FALSE(o->idle.memory_cap_fraction.has_value());
  EXPECT_EQ(MemoryCapFraction(RunWhen::kIdle, o->idle), 0.9);
  EXPECT_EQ(MemoryCapFraction(RunWhen::kAlways, o->idle), 0.5);

  c = LoadConfig("", false, {{"devices", "0"}, {"evaluator", "/bin/true"}, {"memory_cap_fraction", "0.5"}});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  o = PoolOptionsFromConfig(*c);
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_EQ(o->idle.memory_cap_fraction, 0.5);
  EXPECT_EQ(MemoryCapFraction(RunWhen::kIdle, o->idle), 0.5);

  for (const char* bad : {"1.5", "most", ""}) {
    auto refused = LoadConfig("", false, {{"memory_cap_fraction", bad}});
    ASSERT_FALSE(refused.ok()) << bad;
    EXPECT_NE(refused.status().message().find("from 0 to 1 or auto"), std::string::npos) << refused.status().message();
  }
}

TEST(DevicesConfig, VisibleDevicesNoteSaysWhatKjitdSees) {
  const char* old = std::getenv("CUDA_VISIBLE_DEVICES");
  const std::string saved = old ? old : "";
  unsetenv("CUDA_VISIBLE_DEVICES");
  EXPECT_EQ(VisibleDevicesNote(), "");
  setenv("CUDA_VISIBLE_DEVICES", "GPU-8f6c,2", 1);
  EXPECT_NE(VisibleDevicesNote().find("CUDA_VISIBLE_DEVICES=GPU-8f6c,2"), std::string::npos);
  if (old) {
    setenv("CUDA_VISIBLE_DEVICES", saved.c_str(), 1);
  } else {
    unsetenv("CUDA_VISIBLE_DEVICES");
  }
}

}  // namespace
}  // namespace kjit::daemon
