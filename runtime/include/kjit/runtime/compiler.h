// Run-time compilation of CUDA C++ with NVRTC.
//
// NVRTC is a plain library and needs no GPU: kernels for sm_90 compile on a CPU
// machine, which is how CI checks every generated kernel. A compile turns
// (source, options, target arch) into a CUBIN for that arch and, on request, the
// PTX it came from; the compiler log is always kept, since it is the first thing
// a person (or an agent) needs when a kernel does not build.
//
// Compiler is thread-safe. It keeps an in-memory cache of results keyed by a
// hash of (source, entry names, options, arch, want_ptx, NVRTC version), so the
// same request compiles once per process even when it arrives from several
// threads at the same time. The on-disk kernel cache (cache/) sits above this.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "kjit/runtime/hash.h"
#include "kjit/runtime/status.h"

namespace kjit {

struct CompileRequest {
  std::string source;        // CUDA C++ translation unit
  std::string program_name;  // shown in the log, e.g. "softmax_f32.cu"
  int arch = 90;             // compute capability as major*10+minor: 90 -> sm_90
  bool arch_specific = false;  // sm_90a: needed for wgmma and setmaxnreg
  std::vector<std::string> options;  // extra NVRTC options, e.g. "-use_fast_math"
  // C++ names of __global__ functions to instantiate and look up, e.g.
  // "softmax<float, 256>". extern "C" kernels need not be listed.
  std::vector<std::string> name_expressions;
  bool want_ptx = false;  // also return the PTX text
};

struct CompileResult {
  std::string cubin;  // ELF image for cuModuleLoadData
  std::string ptx;    // empty unless requested
  std::string log;    // NVRTC's log, possibly empty on success
  std::map<std::string, std::string> lowered_names;  // name expression -> symbol
  std::vector<std::string> effective_options;        // what NVRTC was given
  std::chrono::microseconds compile_time{0};         // wall time inside NVRTC
  bool from_cache = false;  // true if this came from the in-memory cache
};

struct CompilerStats {
  uint64_t compiles = 0;      // NVRTC invocations that produced code
  uint64_t failures = 0;      // invocations that did not
  uint64_t cache_hits = 0;    // requests answered from the memory cache
  uint64_t cached_entries = 0;
  uint64_t cached_bytes = 0;
};

class Compiler {
 public:
  struct Options {
    // Include directories added to every compile. Empty: the CUDA toolkit's
    // include folder ($KJIT_CUDA_HOME, $CUDA_HOME, /usr/local/cuda) if it exists,
    // so kernels may include <cuda_fp16.h> and <cuda_bf16.h>.
    std::vector<std::string> include_dirs;
    // In-memory cache bound; the least recently used results go first.
    size_t cache_capacity_bytes = 256u << 20;
  };

  Compiler();
  explicit Compiler(Options options);
  ~Compiler();
  Compiler(const Compiler&) = delete;
  Compiler& operator=(const Compiler&) = delete;

  // Compiles, or returns the cached result of an identical request. A source
  // NVRTC rejects yields kCompileError whose message ends with the full log.
  Result<std::shared_ptr<const CompileResult>> Compile(const CompileRequest& request);

  CompilerStats stats() const;
  void ClearCache();

  // NVRTC's version, e.g. {13, 0}.
  static std::pair<int, int> NvrtcVersion();

  // The 128-bit cache key of a request, as 32 hex digits.
  static std::string RequestHash(const CompileRequest& request);
  static Hash128 RequestKey(const CompileRequest& request);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kjit
