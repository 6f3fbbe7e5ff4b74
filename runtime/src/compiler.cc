#include "kjit/runtime/compiler.h"

#include <nvrtc.h>
#include <sys/stat.h>

#include <cstdlib>
#include <future>
#include <list>
#include <mutex>
#include <unordered_map>

#include "kjit/runtime/hash.h"

namespace kjit {
namespace {

using SharedResult = Result<std::shared_ptr<const CompileResult>>;

Status NvrtcStatus(nvrtcResult r, std::string_view what) {
  std::string m(what);
  m += " failed: ";
  m += nvrtcGetErrorString(r);
  return Status(StatusCode::kNvrtcError, std::move(m));
}

// Owns an nvrtcProgram.
class Program {
 public:
  Program() = default;
  ~Program() {
    if (prog_ != nullptr) nvrtcDestroyProgram(&prog_);
  }
  Program(const Program&) = delete;
  Program& operator=(const Program&) = delete;
  nvrtcProgram* out() { return &prog_; }
  nvrtcProgram get() const { return prog_; }

 private:
  nvrtcProgram prog_ = nullptr;
};

bool IsDirectory(const std::string& path) {
  struct stat st{};
  return stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// The toolkit's include folder, and its CCCL folder where the toolkit keeps
// libcu++ apart (CUDA 13: include/cccl), which <cooperative_groups.h> needs.
std::vector<std::string> ToolkitIncludeDirs(const std::string& include) {
  std::vector<std::string> dirs = {include};
  if (IsDirectory(include + "/cccl")) dirs.push_back(include + "/cccl");
  return dirs;
}

std::vector<std::string> DefaultIncludeDirs() {
  for (const char* var : {"KJIT_CUDA_HOME", "CUDA_HOME", "CUDA_PATH"}) {
    const char* v = std::getenv(var);
    if (v != nullptr && *v != '\0' && IsDirectory(std::string(v) + "/include")) {
      return ToolkitIncludeDirs(std::string(v) + "/include");
    }
  }
  if (IsDirectory("/usr/local/cuda/include")) return ToolkitIncludeDirs("/usr/local/cuda/include");
  return {};
}

std::string ArchOption(const CompileRequest& r) {
  return "--gpu-architecture=sm_" + std::to_string(r.arch) + (r.arch_specific ? "a" : "");
}

Result<CompileResult> RunNvrtc(const CompileRequest& req, const std::vector<std::string>& include_dirs) {
  if (req.arch < 50 || req.arch > 1000) {
    return InvalidArgument("compile target arch " + std::to_string(req.arch) +
                           " is not a compute capability (write 90 for sm_90)");
  }
  CompileResult out;
  out.effective_options.push_back(ArchOption(req));
  out.effective_options.push_back("-std=c++17");
  for (const auto& dir : include_dirs) out.effective_options.push_back("-I" + dir);
  for (const auto& o : req.options) out.effective_options.push_back(o);

  const std::string name = req.program_name.empty() ? "kjit_kernel.cu" : req.program_name;
  Program prog;
  nvrtcResult r = nvrtcCreateProgram(prog.out(), req.source.c_str(), name.c_str(), 0, nullptr, nullptr);
  if (r != NVRTC_SUCCESS) return NvrtcStatus(r, "nvrtcCreateProgram");
  for (const auto& expr : req.name_expressions) {
    r = nvrtcAddNameExpression(prog.get(), expr.c_str());
    if (r != NVRTC_SUCCESS) return NvrtcStatus(r, "nvrtcAddNameExpression(" + expr + ")");
  }

  std::vector<const char*> argv;
  argv.reserve(out.effective_options.size());
  for (const auto& o : out.effective_options) argv.push_back(o.c_str());

  const auto start = std::chrono::steady_clock::now();
  const nvrtcResult compiled = nvrtcCompileProgram(prog.get(), static_cast<int>(argv.size()), argv.data());
  out.compile_time =
      std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - start);

  size_t log_size = 0;
  if (nvrtcGetProgramLogSize(prog.get(), &log_size) == NVRTC_SUCCESS && log_size > 1) {
    out.log.resize(log_size);
    nvrtcGetProgramLog(prog.get(), out.log.data());
    out.log.resize(log_size - 1);  // drop the terminating NUL
  }
  if (compiled == NVRTC_ERROR_COMPILATION) {
    return Status(StatusCode::kCompileError, "NVRTC could not compile " + name + " for sm_" +
                                                 std::to_string(req.arch) + ". Compiler log:\n" + out.log);
  }
  if (compiled != NVRTC_SUCCESS) {
    return NvrtcStatus(compiled, "nvrtcCompileProgram(" + name + ")").WithContext(out.log);
  }

  size_t cubin_size = 0;
  r = nvrtcGetCUBINSize(prog.get(), &cubin_size);
  if (r != NVRTC_SUCCESS) return NvrtcStatus(r, "nvrtcGetCUBINSize");
  out.cubin.resize(cubin_size);
  r = nvrtcGetCUBIN(prog.get(), out.cubin.data());
  if (r != NVRTC_SUCCESS) return NvrtcStatus(r, "nvrtcGetCUBIN");

  if (req.want_ptx) {
    size_t ptx_size = 0;
    r = nvrtcGetPTXSize(prog.get(), &ptx_size);
    if (r != NVRTC_SUCCESS) return NvrtcStatus(r, "nvrtcGetPTXSize");
    out.ptx.resize(ptx_size);
    r = nvrtcGetPTX(prog.get(), out.ptx.data());
    if (r != NVRTC_SUCCESS) return NvrtcStatus(r, "nvrtcGetPTX");
    if (!out.ptx.empty() && out.ptx.back() == '\0') out.ptx.pop_back();
  }

  for (const auto& expr : req.name_expressions) {
    const char* lowered = nullptr;
    r = nvrtcGetLoweredName(prog.get(), expr.c_str(), &lowered);
    if (r != NVRTC_SUCCESS) return NvrtcStatus(r, "nvrtcGetLoweredName(" + expr + ")");
    out.lowered_names[expr] = lowered;
  }
  return out;
}

}  // namespace

struct Compiler::Impl {
  struct Entry {
    std::shared_future<SharedResult> result;
    size_t bytes = 0;  // 0 while the compile is in flight
    std::list<Hash128>::iterator lru;
  };

  Options options;
  mutable std::mutex mu;
  std::unordered_map<Hash128, Entry, Hash128Hasher> entries;
  std::list<Hash128> lru;  // front: most recently used; only finished entries
  size_t bytes = 0;
  CompilerStats stats;

  void EvictLocked() {
    while (bytes > options.cache_capacity_bytes && !lru.empty()) {
      auto it = entries.find(lru.back());
      bytes -= it->second.bytes;
      entries.erase(it);
      lru.pop_back();
    }
  }
};

Compiler::Compiler() : Compiler(Options{}) {}

Compiler::Compiler(Options options) : impl_(std::make_unique<Impl>()) {
  impl_->options = std::move(options);
  if (impl_->options.include_dirs.empty()) impl_->options.include_dirs = DefaultIncludeDirs();
}

Compiler::~Compiler() = default;

std::pair<int, int> Compiler::NvrtcVersion() {
  int major = 0, minor = 0;
  nvrtcVersion(&major, &minor);
  return {major, minor};
}

std::string Compiler::RequestHash(const CompileRequest& r) { return RequestKey(r).ToHex(); }

Hash128 Compiler::RequestKey(const CompileRequest& r) {
  const auto [major, minor] = NvrtcVersion();
  Hasher h;
  h.Add("kjit-compile-v1").Add(r.source).Add(r.program_name).Add(static_cast<uint64_t>(r.arch));
  h.Add(static_cast<uint64_t>(r.arch_specific)).Add(static_cast<uint64_t>(r.want_ptx));
  h.Add(static_cast<uint64_t>(r.options.size()));
  for (const auto& o : r.options) h.Add(o);
  h.Add(static_cast<uint64_t>(r.name_expressions.size()));
  for (const auto& e : r.name_expressions) h.Add(e);
  h.Add(static_cast<uint64_t>(major)).Add(static_cast<uint64_t>(minor));
  return h.Finish();
}

Result<std::shared_ptr<const CompileResult>> Compiler::Compile(const CompileRequest& request) {
  // Include dirs are per-Compiler, so they need not be part of the key.
  const Hash128 key = RequestKey(request);
  std::promise<SharedResult> promise;
  {
    std::unique_lock lock(impl_->mu);
    auto it = impl_->entries.find(key);
    if (it != impl_->entries.end()) {
      auto future = it->second.result;
      if (it->second.bytes > 0) {
        impl_->lru.splice(impl_->lru.begin(), impl_->lru, it->second.lru);
      }
      ++impl_->stats.cache_hits;
      lock.unlock();
      SharedResult cached = future.get();  // waits if another thread is compiling it
      if (!cached.ok()) return cached;
      auto copy = std::make_shared<CompileResult>(**cached);
      copy->from_cache = true;
      return std::shared_ptr<const CompileResult>(std::move(copy));
    }
    Impl::Entry entry;
    entry.result = promise.get_future().share();
    entry.lru = impl_->lru.end();
    impl_->entries.emplace(key, std::move(entry));
  }

  Result<CompileResult> compiled = RunNvrtc(request, impl_->options.include_dirs);
  SharedResult shared = compiled.ok()
                            ? SharedResult(std::shared_ptr<const CompileResult>(
                                  std::make_shared<CompileResult>(std::move(compiled).value())))
                            : SharedResult(compiled.status());
  promise.set_value(shared);

  std::lock_guard lock(impl_->mu);
  auto it = impl_->entries.find(key);
  if (!shared.ok()) {
    ++impl_->stats.failures;
    // Failures are not kept: waiting threads already hold the future.
    if (it != impl_->entries.end()) impl_->entries.erase(it);
    return shared;
  }
  ++impl_->stats.compiles;
  if (it != impl_->entries.end()) {
    const auto& r = **shared;
    it->second.bytes = r.cubin.size() + r.ptx.size() + r.log.size() + 1;
    impl_->lru.push_front(key);
    it->second.lru = impl_->lru.begin();
    impl_->bytes += it->second.bytes;
    impl_->EvictLocked();
  }
  return shared;
}

CompilerStats Compiler::stats() const {
  std::lock_guard lock(impl_->mu);
  CompilerStats s = impl_->stats;
  s.cached_entries = impl_->lru.size();
  s.cached_bytes = impl_->bytes;
  return s;
}

void Compiler::ClearCache() {
  std::lock_guard lock(impl_->mu);
  // In-flight compiles stay: their threads will insert them when done.
  for (auto key : impl_->lru) impl_->entries.erase(key);
  impl_->lru.clear();
  impl_->bytes = 0;
}

}  // namespace kjit
