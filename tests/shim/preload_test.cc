// libkjit_preload.so in real processes: it maps no torch library where the
// program loads none, does nothing under KJIT_DISABLE=1, and loads the adapter
// exactly when PyTorch's CUDA library appears (stood in for by a library whose
// soname is libtorch_cuda.so, and a fake adapter that prints a line).
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

namespace {

struct ProcessRun {
  int exit_code = -1;
  std::string output;  // stdout and stderr
};

ProcessRun Sh(const std::string& command) {
  ProcessRun r;
  FILE* p = popen((command + " 2>&1").c_str(), "r");
  if (p == nullptr) return r;
  char buffer[4096];
  size_t n;
  while ((n = fread(buffer, 1, sizeof buffer, p)) > 0) r.output.append(buffer, n);
  const int status = pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

const std::string kPreload = KJIT_PRELOAD;
const std::string kProbe = KJIT_PRELOAD_PROBE;
const std::string kFakeTorch = KJIT_FAKE_TORCH_CUDA;
const std::string kFakeAdapter = KJIT_FAKE_ADAPTER;
const std::string kRunpathCaller = KJIT_RUNPATH_CALLER;

std::string Env(const std::string& extra) {
  return "env -u KJIT_DISABLE -u KJIT_LOG -u KJIT_TORCH_ADAPTER LD_PRELOAD=" + kPreload + " " + extra + " ";
}

bool Has(const ProcessRun& r, const std::string& text) { return r.output.find(text) != std::string::npos; }

TEST(ShimPreload, ProgramWithoutTorchMapsNoTorch) {
  const ProcessRun r = Sh(Env("") + kProbe + " libm.so.6");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(Has(r, "state=0")) << r.output;  // still waiting: nothing was loaded
  EXPECT_TRUE(Has(r, "torch_mapped=0")) << r.output;
  EXPECT_FALSE(Has(r, "kjit:")) << r.output;
}

TEST(ShimPreload, OrdinaryProgramsRunUnchanged) {
  EXPECT_EQ(Sh(Env("KJIT_LOG=1") + "/bin/true").exit_code, 0);
  const ProcessRun r = Sh(Env("KJIT_LOG=1") + "/bin/sh -c 'echo hello; grep -c torch /proc/self/maps'");
  EXPECT_EQ(r.output, "hello\n0\n");
}

TEST(ShimPreload, AdapterIsLookedForBesideItself) {
  const ProcessRun r = Sh(Env("") + kProbe);
  const std::string dir = kPreload.substr(0, kPreload.rfind('/') + 1);
  EXPECT_TRUE(Has(r, "adapter=" + dir + "libkjit_torch_adapter.so\n")) << r.output;
}

TEST(ShimPreload, AttachesWhenTorchCudaIsLoaded) {
  const ProcessRun r = Sh(Env("KJIT_TORCH_ADAPTER=" + kFakeAdapter) + kProbe + " " + kFakeTorch);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(Has(r, "fake adapter attached\nstate=2")) << r.output;
}

TEST(ShimPreload, AttachesWhenTorchCudaWasLoadedFirst) {
  // The fake torch is preloaded before the shim: the shim's constructor finds it.
  const ProcessRun r = Sh("env -u KJIT_DISABLE LD_PRELOAD='" + kFakeTorch + " " + kPreload + "' KJIT_TORCH_ADAPTER=" +
                   kFakeAdapter + " " + kProbe);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(Has(r, "fake adapter attached")) << r.output;
  EXPECT_TRUE(Has(r, "state=2")) << r.output;
}

// glibc resolves a bare name passed to dlopen through the RUNPATH of the
// object that called dlopen; CUDA and cuDNN load their parts that way. The
// wrapper must not become that object, before or after the adapter attached.
TEST(ShimPreload, BareNamesResolveThroughTheCallersRunpath) {
  const ProcessRun plain = Sh(kProbe + " " + kRunpathCaller + " kjit_test_load_by_runpath");
  ASSERT_TRUE(Has(plain, "call=42")) << "the test library itself is broken: " << plain.output;
  const ProcessRun waiting = Sh(Env("") + kProbe + " " + kRunpathCaller + " kjit_test_load_by_runpath");
  EXPECT_TRUE(Has(waiting, "call=42\nstate=0")) << waiting.output;
  const ProcessRun attached = Sh("env -u KJIT_DISABLE LD_PRELOAD='" + kFakeTorch + " " + kPreload +
                                 "' KJIT_TORCH_ADAPTER=" + kFakeAdapter + " " + kProbe + " " + kRunpathCaller +
                                 " kjit_test_load_by_runpath");
  EXPECT_TRUE(Has(attached, "call=42\nstate=2")) << attached.output;
}

TEST(ShimPreload, DisabledDoesNothing) {
  const ProcessRun r = Sh(Env("KJIT_DISABLE=1 KJIT_LOG=1 KJIT_TORCH_ADAPTER=" + kFakeAdapter) + kProbe + " " + kFakeTorch);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_FALSE(Has(r, "attached")) << r.output;
  EXPECT_TRUE(Has(r, "state=2")) << r.output;  // done at the constructor, before any dlopen
}

TEST(ShimPreload, MissingAdapterIsOneLogLineAndNoHarm) {
  const ProcessRun quiet = Sh(Env("KJIT_TORCH_ADAPTER=/nonexistent/libkjit_torch_adapter.so") + kProbe + " " + kFakeTorch);
  ASSERT_EQ(quiet.exit_code, 0) << quiet.output;
  EXPECT_FALSE(Has(quiet, "kjit:")) << quiet.output;
  const ProcessRun logged =
      Sh(Env("KJIT_LOG=1 KJIT_TORCH_ADAPTER=/nonexistent/libkjit_torch_adapter.so") + kProbe + " " + kFakeTorch);
  ASSERT_EQ(logged.exit_code, 0) << logged.output;
  EXPECT_TRUE(Has(logged, "kjit: cannot load the PyTorch adapter: ")) << logged.output;
  EXPECT_TRUE(Has(logged, "state=2")) << logged.output;
}

}  // namespace
