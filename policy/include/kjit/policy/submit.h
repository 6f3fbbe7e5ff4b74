// The submit_candidate request (ipc/PROTOCOL.md) for a generated kernel: every client that sends
// kjitd's evaluator a design-space candidate builds it here, so that none of them forgets a field of
// the launch shape (a kernel of ABI v2 takes one more parameter, its workspace: a launch without it
// fails). Header-only: it needs kjit::ipc's message types, which kjit::policy itself does not link;
// its users (kjit-policy online, kjit_seed_defaults) do.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "kjit/ipc/messages.h"
#include "kjit/policy/design_space.h"

namespace kjit::policy {

inline ipc::SubmitCandidate SubmitFor(int64_t episode, const Candidate& candidate,
                                      const std::map<std::string, std::string>& design) {
  ipc::SubmitCandidate submit;
  submit.episode_id = episode;
  submit.source = candidate.source;
  submit.entry_point = candidate.entry_point;
  submit.options = candidate.options;
  for (int i = 0; i < 3; ++i) {
    submit.grid[i] = candidate.launch.grid[i];
    submit.block[i] = candidate.launch.block[i];
  }
  submit.dynamic_shared_bytes = candidate.launch.dynamic_shared_bytes;
  if (candidate.launch.workspace_bytes != 0) submit.workspace_bytes = candidate.launch.workspace_bytes;
  submit.design = design;
  return submit;
}

// submit_candidate's compile_ahead entry for a candidate: its source, then its NVRTC options.
inline std::vector<std::string> CompileAheadEntry(const Candidate& candidate) {
  std::vector<std::string> entry{candidate.source};
  entry.insert(entry.end(), candidate.options.begin(), candidate.options.end());
  return entry;
}

}  // namespace kjit::policy
