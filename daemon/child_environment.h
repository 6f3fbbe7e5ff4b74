// The environment kjitd gives the processes it starts (evaluator workers, the tuner).
//
// kjitd inherits its starter's environment, and a kjitd started from a program under `kjit run` (or by hand
// in such a shell) has kjit's shim in LD_PRELOAD. An evaluator worker with the shim loaded would serve the
// cache's kernels where PyTorch's reference should run, and so verify candidates against kjit's own kernels:
// the shim is taken out of LD_PRELOAD (any other entry stays; an empty LD_PRELOAD goes).
#pragma once

#include <string>
#include <vector>

namespace kjit::daemon {

// `env` ("NAME=value" entries) without kjit's preload library in LD_PRELOAD.
std::vector<std::string> WithoutKjitShim(const std::vector<std::string>& env);

// This process's environment, so filtered; owns the strings `pointers()` points into.
class ChildEnvironment {
 public:
  ChildEnvironment();
  char** pointers() { return pointers_.data(); }

 private:
  std::vector<std::string> entries_;
  std::vector<char*> pointers_;
};

}  // namespace kjit::daemon
