// What a kernel written by someone else may ask of NVRTC.
//
// kjitd compiles what agents and other clients submit (ipc submit_candidate), and the compile log goes back
// to them. NVRTC reads files: `#include "/home/u/.ssh/id_ed25519"`, `--pre-include`, `-I`/`--include-path`
// and the like would put any file the user can read into that log. So a submitted candidate may include only
// NVRTC's built-in headers, by a literal name, and pass only options that change code generation or
// diagnostics. kjitd checks a submission before it queues it, and the evaluator worker again before it
// compiles (also what it compiles ahead). kjit's own generated kernels pass the same checks
// (tests/policy/space_test.cc compiles every point through them).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "kjit/runtime/status.h"

namespace kjit {

// kInvalidArgument naming the first option that is not allowed, and what is.
Status CheckUntrustedOptions(const std::vector<std::string>& options);

// kInvalidArgument naming the first line whose preprocessor directive could read a file: an #include (or
// #include_next, #import, #embed, digraph %:include) of anything but a literal built-in header name, or
// __has_include, or a trigraph (?\?= spells #).
Status CheckUntrustedIncludes(std::string_view source);

// Both.
Status CheckUntrustedCandidate(std::string_view source, const std::vector<std::string>& options);

// The headers a candidate may include: NVRTC's built-in ones ("cuda_fp16.h", "cuda_bf16.h", ...).
const std::vector<std::string>& AllowedCandidateHeaders();

}  // namespace kjit
