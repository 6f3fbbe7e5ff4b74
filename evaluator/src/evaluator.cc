#include "kjit/evaluator/evaluator.h"

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <c10/util/Exception.h>
#include <torch/version.h>
#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <random>
#include <regex>
#include <future>
#include <thread>

#include "kjit/evaluator/compare.h"
#include "kjit/evaluator/inputs.h"
#include "kjit/evaluator/memory.h"
#include "kjit/evaluator/sanitizer.h"
#include "kjit/policy/op_traits.h"
#include "kjit/policy/design_space.h"
#include "kjit/policy/reward.h"
#include "kjit/runtime/compiler.h"
#include "kjit/runtime/device.h"
#include "kjit/runtime/gpu.h"
#include "kjit/runtime/untrusted_source.h"
#include "kjit/torch/call_key.h"

namespace kjit::eval {
namespace {

using Clock = std::chrono::steady_clock;
using daemon::BaselineResult;
using daemon::TimingStats;
using daemon::Verdict;
using policy::Outcome;

double MsSince(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

std::string DescribeTensorText(const at::Tensor& t) {
  if (!t.defined()) return "undefined";  // an output the op leaves out (a backward's output_mask)
  auto dtype = kjit::torch::DTypeOf(t.scalar_type());
  std::string s = dtype.ok() ? std::string(DTypeName(*dtype)) : std::string(c10::toString(t.scalar_type()));
  s += "[";
  for (int64_t i = 0; i < t.dim(); ++i) s += (i ? "," : "") + std::to_string(t.size(i));
  s += "]";
  return s;
}

// The CUDA errors after which the context is unusable.
bool IsStickyError(CUresult r) {
  switch (r) {
    case CUDA_ERROR_ILLEGAL_ADDRESS:
    case CUDA_ERROR_MISALIGNED_ADDRESS:
    case CUDA_ERROR_ILLEGAL_INSTRUCTION:
    case CUDA_ERROR_INVALID_ADDRESS_SPACE:
    case CUDA_ERROR_INVALID_PC:
    case CUDA_ERROR_LAUNCH_FAILED:
    case CUDA_ERROR_ASSERT:
    case CUDA_ERROR_HARDWARE_STACK_ERROR:
    case CUDA_ERROR_LAUNCH_TIMEOUT:
    case CUDA_ERROR_ECC_UNCORRECTABLE:
      return true;
    default:
      return false;
  }
}

// Where a candidate run ended when it did not end well.
struct RunFailure {
  Outcome outcome;
  std::string reason;
};

// Set by RequestYield (a signal handler), cleared when a job starts.
std::atomic<bool> g_yield{false};
constexpr const char* kPreempted = "preempted: another process started using the GPU; kjitd runs this again once it is idle";

std::optional<RunFailure> Preempted() {
  if (!g_yield.load(std::memory_order_relaxed)) return std::nullopt;
  return RunFailure{Outcome::kResourceBackoff, kPreempted};
}

// How a candidate is compiled: the same request (hence the same compile-cache
// entry) for Precompile and Evaluate.
CompileRequest CandidateCompileRequest(const daemon::CandidateSpec& c, int arch) {
  CompileRequest r;
  r.source = c.source;
  r.program_name = "candidate.cu";
  r.arch = arch;
  r.options = c.options;
  r.options.push_back("--ptxas-options=-v");  // the log then reports spills
  return r;
}

// Compiles candidates likely to come next on background threads into the compiler's cache, while the
// worker's own thread verifies and times the current one. A newer list replaces the entries of an older
// one not yet started (the client's guess has moved on). The threads start with the first list.
class CompileAheadPool {
 public:
  CompileAheadPool(Compiler& compiler, int threads) : compiler_(compiler), threads_(threads) {}
  ~CompileAheadPool() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    wake_.notify_all();
    for (std::thread& t : pool_) t.join();
  }

  void Replace(std::vector<CompileRequest> requests) {
    if (threads_ <= 0) return;
    {
      std::lock_guard lock(mu_);
      pending_.assign(std::make_move_iterator(requests.begin()), std::make_move_iterator(requests.end()));
      while (static_cast<int>(pool_.size()) < threads_) pool_.emplace_back([this] { Run(); });
    }
    wake_.notify_all();
  }
  uint64_t compiled() const { return compiled_.load(); }

 private:
  void Run() {
    std::unique_lock lock(mu_);
    while (true) {
      wake_.wait(lock, [&] { return stop_ || !pending_.empty(); });
      if (stop_) return;
      CompileRequest r = std::move(pending_.front());
      pending_.pop_front();
      lock.unlock();
      (void)compiler_.Compile(r);  // errors are cached too: Evaluate reports them when the candidate comes
      compiled_.fetch_add(1);
      lock.lock();
    }
  }
  Compiler& compiler_;
  const int threads_;
  std::mutex mu_;
  std::condition_variable wake_;
  std::deque<CompileRequest> pending_;
  bool stop_ = false;
  std::vector<std::thread> pool_;
  std::atomic<uint64_t> compiled_{0};
};

}  // namespace

// kjit links only the CPU library so that its binaries build and start on
// machines with a CPU-only PyTorch.
Status LoadTorchCuda() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&at::globalContext), &info) == 0 || info.dli_fname == nullptr) {
    return Status(StatusCode::kUnavailable, "cannot find where libtorch_cpu.so was loaded from");
  }
  std::string dir = info.dli_fname;
  dir = dir.substr(0, dir.rfind('/') + 1);
  const std::string path = dir + "libtorch_cuda.so";
  if (dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL) == nullptr) {
    const char* error = dlerror();
    return Status(StatusCode::kUnavailable, std::string("PyTorch's CUDA backend could not be loaded (") +
                                                (error ? error : path) + "). The evaluator needs a PyTorch built with CUDA, with its CUDA libraries installed");
  }
  return Status::Ok();
}

daemon::TimingStats Summarize(std::vector<double> runs) {
  TimingStats t;
  if (runs.empty()) return t;
  std::sort(runs.begin(), runs.end());
  const size_t n = runs.size();
  auto at_fraction = [&](double q) {
    const double pos = q * static_cast<double>(n - 1);
    const size_t lo = static_cast<size_t>(std::floor(pos));
    const size_t hi = std::min(lo + 1, n - 1);
    return runs[lo] + (runs[hi] - runs[lo]) * (pos - static_cast<double>(lo));
  };
  t.runs = static_cast<int>(n);
  t.median_us = at_fraction(0.5);
  t.spread_us = at_fraction(0.75) - at_fraction(0.25);
  t.min_us = runs.front();
  t.max_us = runs.back();
  // Distribution-free 95% interval of the median: ranks n/2 -+ 1.96 sqrt(n)/2.
  const double half = 0.98 * std::sqrt(static_cast<double>(n));
  const double mid = static_cast<double>(n - 1) / 2;
  const size_t lo = static_cast<size_t>(std::max(0.0, std::floor(mid - half)));
  const size_t hi = static_cast<size_t>(std::min(static_cast<double>(n - 1), std::ceil(mid + half)));
  t.ci_rel = t.median_us > 0 ? (runs[hi] - runs[lo]) / 2 / t.median_us : 0;
  return t;
}

int ParseSpillBytes(const std::string& log) {
  static const std::regex spill(R"((\d+) bytes spill stores)");
  std::smatch m;
  int total = -1;
  auto begin = log.cbegin();
  while (std::regex_search(begin, log.cend(), m, spill)) {
    total = std::max(total, 0) + std::stoi(m[1].str());
    begin = m.suffix().first;
  }
  return total;
}

struct Evaluator::Impl {
  EvaluatorOptions options;
  daemon::WorkerDevice device;
  std::optional<PrimaryContext> context;
  std::optional<ContextGuard> context_guard;
  c10::Device torch_device{c10::kCUDA, 0};
  CUstream stream = nullptr;
  std::optional<DeviceBuffer> flush;
  std::vector<Event> events;
  Compiler compiler;
  // After `compiler`, so that its threads are joined before the compiler goes.
  std::unique_ptr<CompileAheadPool> compile_ahead;
  bool lost = false;
  uint64_t device_total_bytes = 0;  // the GPU's memory (cuDeviceTotalMem), for telling "not now" from "never"
  std::mt19937_64 seeds{std::random_device{}()};
  // What compute-sanitizer said of a kernel: clean, an error found (`text` says which), or no verdict
  // (`text` says why: the tool missing or unable to run, too large a key).
  // kYielded: stopped because another process wanted the GPU (the job answers retry_later).
  struct SanitizerVerdict {
    enum class State { kClean, kFound, kNotRun, kYielded } state = State::kNotRun;
    std::string text;
  };
  // The verdicts per key and CUBIN (clean or found), so that a kernel is sanitized once.
  std::map<std::pair<Hash128, Hash128>, SanitizerVerdict> sanitized;
  // Per key, the fastest median of a kernel compute-sanitizer passed: a later kernel is checked only if it
  // could replace that one in the cache (policy::ReplacesStored), since kjitd stores no other. A check
  // costs seconds of GPU time (about 1 to 25 s measured, against 0.1 s for a trial's verification and
  // timing), and a search finds many kernels faster than PyTorch's and no faster than its best.
  std::map<Hash128, double> best_clean_us;

  const Driver& driver() const { return context->driver(); }

  // Runs `request`'s candidate under compute-sanitizer (sanitizer.h): memcheck, and racecheck where asked (a
  // kernel with shared memory, of a key not too large for it); the first tool to find an error decides.
  SanitizerVerdict Sanitize(const daemon::EvaluateRequest& request, bool racecheck) {
    using State = SanitizerVerdict::State;
    char path[] = "/tmp/kjit-sanitize-request-XXXXXX";
    const int fd = mkstemp(path);
    if (fd < 0) return {State::kNotRun, "compute-sanitizer not run: no temporary file"};
    struct RemoveFile {
      const char* path;
      ~RemoveFile() { unlink(path); }
    } remove_file{path};
    daemon::EvaluateRequest child = request;
    child.compile_ahead.clear();
    child.screen_only = false;
    const std::string encoded = daemon::EncodeWorkerMessage(child);
    const bool written = write(fd, encoded.data(), encoded.size()) == static_cast<ssize_t>(encoded.size());
    close(fd);
    char self[4096] = {};
    const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (!written || n <= 0) return {State::kNotRun, "compute-sanitizer not run: cannot hand the request to a child"};
    std::vector<std::string> tools = {"memcheck"};
    if (racecheck) tools.push_back("racecheck");
    // The tools run side by side, each in a process of its own: most of a check is the child's start (the
    // sanitizer, CUDA and PyTorch loading) and a key's first verified kernel waits for the slower tool, not
    // for both in turn. Their verdicts are read in the order above.
    std::vector<std::future<Result<ProcessResult>>> runs;
    for (const std::string& tool : tools) {
      auto argv = SanitizerCommand(options.sanitizer, tool, request.candidate.entry_point, self,
                                   {"--sanitize-request", path, "--device", std::to_string(options.device)});
      runs.push_back(std::async(std::launch::async, [argv = std::move(argv), timeout = options.sanitizer_timeout] {
        return RunForSanitizer(argv, timeout, [] { return g_yield.load(std::memory_order_relaxed); });
      }));
    }
    std::vector<Result<ProcessResult>> results;
    for (auto& run : runs) results.push_back(run.get());  // every child is reaped before the file goes
    for (size_t t = 0; t < tools.size(); ++t) {
      const std::string& tool = tools[t];
      auto& run = results[t];
      if (!run.ok()) return {State::kNotRun, "compute-sanitizer not run: " + run.status().ToString()};
      if (run->stopped) return {State::kYielded, kPreempted};
      const SanitizerReport report = ParseSanitizerOutput(run->output, run->exit_code);
      if (report.errors > 0) {
        return {State::kFound, "compute-sanitizer " + tool + " found " + std::to_string(report.errors) + " error" +
                                   (report.errors == 1 ? "" : "s") +
                                   (report.first_error.empty() ? "" : ": " + report.first_error)};
      }
      if (run->timed_out || !report.summary_seen) {
        // The tool did not get to judge the kernel (unsupported here, or too slow): evidence missing, not found.
        std::string tail = run->output.size() > 300 ? run->output.substr(run->output.size() - 300) : run->output;
        return {State::kNotRun, "compute-sanitizer " + tool + " did not finish" +
                                    (run->timed_out ? " (timed out)" : "") + ": " + tail};
      }
    }
    return {State::kClean, "compute-sanitizer clean (" + tools[0] + (tools.size() > 1 ? ", " + tools[1] : "") + ")"};
  }

  // Everything a verification or timing run needs for one input set.
  struct InputSet {
    InputKind kind = InputKind::kNormal;
    uint64_t seed = 0;
    std::vector<c10::IValue> args;
    std::vector<at::Tensor> reference;  // PyTorch's outputs
    std::optional<std::vector<at::Tensor>> exact;  // the op in float64, made on the first mismatch
    // With `exact`, for sum_of_products ops: the op in float64 on the inputs' absolute values (compare.h).
    std::vector<at::Tensor> magnitude;
  };

  // The key as one boxed op (chain.h): a single call's op, or a chain of calls run one by one.
  struct Prepared {
    OpKey key;
    BoxedOp op;
    OpTraits traits;
  };
  // The inputs of screen_only requests, for the last key screened.
  std::optional<std::pair<std::string, InputSet>> screen_set;

  Result<Prepared> Prepare(const std::string& key_bytes) {
    KJIT_ASSIGN_OR_RETURN(OpKey key, OpKey::Decode(key_bytes));
    if (key.arch != device.arch) {
      return InvalidArgument("the key is for sm_" + std::to_string(key.arch) + ", this GPU is sm_" +
                             std::to_string(device.arch));
    }
    KJIT_ASSIGN_OR_RETURN(BoxedOp op, BoxedOpOf(key));
    if (op.schema.is_mutable()) {
      return InvalidArgument(op.call.op + " writes to its arguments; in-place and out= ops are not evaluated yet");
    }
    OpTraits traits = TraitsFor(op.call.op);
    if (op.chain) {
      // A chain's traits are its family's (a fused elementwise chain's tolerances are not any one op's).
      auto match = policy::FindFamily(key);
      traits = match.ok() ? match->family->traits(kChainOp) : DefaultOpTraits();
    }
    if (options.bitwise) traits.compare = ComparePolicy::kBitwise;
    return Prepared{std::move(key), std::move(op), std::move(traits)};
  }

  std::vector<at::Tensor> CallReference(const Prepared& p, const std::vector<c10::IValue>& args) {
    std::vector<c10::IValue> stack(args.begin(), args.end());
    p.op.run(&stack);
    std::vector<at::Tensor> outs;
    for (const c10::IValue& v : stack) {
      if (v.isTensor()) {
        outs.push_back(v.toTensor());
      } else if (v.isTensorList()) {
        for (const at::Tensor& t : v.toTensorVector()) outs.push_back(t);
      } else {
        throw std::runtime_error("the op returned a " + v.tagKind() + "; only tensors are evaluated");
      }
    }
    return outs;
  }

  // An output the op leaves undefined (a backward's output_mask) is an empty GuardedTensor: a null pointer to
  // the kernel, nothing to guard.
  static bool OutputGuardsIntact(const GuardedTensor& g) { return !g.tensor.defined() || GuardsIntact(g); }

  // Guarded outputs laid out like `likes` (PyTorch's outputs, or their LayoutsOf), on this worker's GPU, for a
  // candidate to write; poisoned with `poison` if given.
  Result<std::vector<GuardedTensor>> GuardedOutputs(const std::vector<at::Tensor>& likes,
                                                    std::optional<Poison> poison) const {
    std::vector<GuardedTensor> outs;
    for (const at::Tensor& r : likes) {
      if (!r.defined()) {  // an output the op leaves undefined (OutputGuardsIntact)
        outs.emplace_back();
        continue;
      }
      KJIT_ASSIGN_OR_RETURN(GuardedTensor g, MakeGuarded(r, kDefaultGuardBytes, torch_device));
      if (poison) ResetGuarded(g, *poison);
      outs.push_back(std::move(g));
    }
    return outs;
  }

  // The tolerance a candidate's output is held to against PyTorch's `reference`.
  static Tolerance OutputTolerance(const at::Tensor& reference, const OpTraits& traits) {
    auto dtype = kjit::torch::DTypeOf(reference.scalar_type());
    return ToleranceFor(dtype.ok() ? *dtype : DType::kFloat32, traits);
  }

  // The op on the same arguments with floating-point tensors in float64, for
  // CompareAccuracy. Empty when the op refuses float64 (half_to_float softmax).
  // `magnitude` (sum_of_products ops): then the op again on those tensors'
  // absolute values, made in place on the float64 copies.
  std::vector<at::Tensor> CallReference64(const Prepared& p, const std::vector<c10::IValue>& args,
                                          std::vector<at::Tensor>* magnitude = nullptr) {
    std::vector<c10::IValue> wide;
    std::vector<at::Tensor> widened;
    for (size_t i = 0; i < args.size(); ++i) {
      const c10::IValue& v = args[i];
      // A dtype argument naming a float type (a softmax backward's input_dtype, a sum's dtype) names float64
      // here, or PyTorch refuses float64 tensors beside it (or rounds the exact result back).
      if (v.isInt() && i < p.op.schema.arguments().size()) {
        c10::TypePtr type = p.op.schema.arguments()[i].real_type();
        if (auto opt = type->cast<c10::OptionalType>()) type = opt->getElementType();
        if (type->kind() == c10::TypeKind::ScalarTypeType &&
            at::isFloatingType(static_cast<c10::ScalarType>(v.toInt()))) {
          wide.emplace_back(static_cast<int64_t>(at::kDouble));
          continue;
        }
      }
      if (v.isTensor() && !IsWrappedNumber(v) && at::isFloatingType(v.toTensor().scalar_type())) {
        // A dense copy, so that abs_ below writes no element twice through an expanded view.
        widened.push_back(v.toTensor().to(at::kDouble, /*non_blocking=*/false, /*copy=*/true));
        wide.emplace_back(widened.back());
      } else {
        wide.push_back(v);
      }
    }
    try {
      std::vector<at::Tensor> exact = CallReference(p, wide);
      if (magnitude) {
        for (at::Tensor& t : widened) t.abs_();
        *magnitude = CallReference(p, wide);
        if (magnitude->size() != exact.size()) magnitude->clear();
      }
      return exact;
    } catch (const std::exception&) {
      if (magnitude) magnitude->clear();
      return {};
    }
  }

  // Output i of a candidate against set's reference: assert_close's rule, or,
  // for a float output that fails it, no less accurate than PyTorch against
  // float64 (compare.h), as verification judges; `judged_by_float64` says which.
  Comparison JudgeOutput(const Prepared& p, InputSet& set, size_t i, const at::Tensor& actual,
                         bool* judged_by_float64 = nullptr) {
    if (judged_by_float64) *judged_by_float64 = false;
    // An output the op leaves undefined (a backward's output_mask): the candidate has none either.
    if (!set.reference[i].defined() || !actual.defined()) return Compare(actual, set.reference[i], Tolerance{});
    const Tolerance tol = OutputTolerance(set.reference[i], p.traits);
    Comparison cmp = Compare(actual, set.reference[i], tol);
    if (judged_by_float64) *judged_by_float64 = false;
    if (cmp.ok || tol.bitwise || !at::isFloatingType(set.reference[i].scalar_type())) return cmp;
    if (!set.exact) set.exact = CallReference64(p, set.args, p.traits.sum_of_products ? &set.magnitude : nullptr);
    if (set.exact->size() != set.reference.size()) return cmp;
    SummationBound summation;
    if (p.traits.sum_of_products && i < set.magnitude.size()) {
      summation.magnitude = set.magnitude[i];
      summation.terms = policy::SummedTermsOf(p.key);
    }
    const Comparison accuracy = CompareAccuracy(actual, set.reference[i], (*set.exact)[i], tol, summation);
    if (accuracy.ok) {
      if (judged_by_float64) *judged_by_float64 = true;
      return accuracy;
    }
    cmp.reason += "; " + accuracy.reason;
    return cmp;
  }

  // `with_reference` false: PyTorch's outputs are left for the caller to make once the candidate has run on
  // the set (see Scrub).
  Result<InputSet> MakeSet(const Prepared& p, InputKind kind, uint64_t seed, bool with_reference = true) {
    InputSet set;
    set.kind = kind;
    set.seed = seed;
    KJIT_ASSIGN_OR_RETURN(set.args, MakeArguments(p.op.schema, p.op.call, p.traits, torch_device, kind, seed));
    if (with_reference) set.reference = CallReference(p, set.args);
    return set;
  }

  // PyTorch's answers are kept out of a candidate's reach: a kernel runs in this process and could read any
  // device memory it finds, so a verified set's reference is made only after the candidate's runs on it, and
  // every other reference call's outputs are overwritten (Scrub) before their memory goes back to the
  // allocator, where a later candidate could find them.
  static void Scrub(const std::vector<at::Tensor>& outputs) {
    for (const at::Tensor& t : outputs) PoisonStorage(t, Poison::kFinite);
  }
  // Shapes, strides and dtypes of `outputs`, on the meta device (no memory, no values).
  static std::vector<at::Tensor> LayoutsOf(const std::vector<at::Tensor>& outputs) {
    std::vector<at::Tensor> likes;
    for (const at::Tensor& t : outputs) {
      likes.push_back(t.defined() ? at::empty_strided(t.sizes(), t.strides(), t.options().device(c10::kMeta))
                                  : at::Tensor());
    }
    return likes;
  }

  // The kernel's parameter values (ABI v2, worker_protocol.h): input tensor
  // pointers in argument order (a chain's external arguments, wrapped numbers left out: chain.h), null for
  // absent optional tensors, then outputs, then the workspace when the candidate has one.
  std::vector<CUdeviceptr> Params(const Prepared& p, const std::vector<c10::IValue>& args,
                                  const std::vector<GuardedTensor>& outs, const GuardedTensor* workspace) {
    std::vector<CUdeviceptr> values;
    for (size_t i = 0; i < args.size(); ++i) {
      const c10::IValue& v = args[i];
      const auto& type = p.op.schema.arguments()[i].type();
      if (IsWrappedNumber(v)) continue;
      if (v.isTensor()) {
        values.push_back(reinterpret_cast<CUdeviceptr>(v.toTensor().data_ptr()));
      } else if (v.isTensorList()) {
        for (const at::Tensor& t : v.toTensorVector()) values.push_back(reinterpret_cast<CUdeviceptr>(t.data_ptr()));
      } else if (v.isNone() && type->kind() == c10::TypeKind::OptionalType &&
                 type->castRaw<c10::OptionalType>()->getElementType()->kind() == c10::TypeKind::TensorType) {
        values.push_back(0);
      }
    }
    for (const GuardedTensor& g : outs) {
      values.push_back(g.tensor.defined() ? reinterpret_cast<CUdeviceptr>(g.tensor.data_ptr()) : CUdeviceptr{0});
    }
    if (workspace != nullptr) values.push_back(reinterpret_cast<CUdeviceptr>(workspace->tensor.data_ptr()));
    return values;
  }

  // A candidate's workspace (kernel ABI v2): `bytes` zeroed bytes between guard
  // bytes, on the evaluation stream, zeroed once, as the shim zeroes a buffer once.
  Result<GuardedTensor> MakeWorkspace(uint64_t bytes) {
    const at::Tensor like =
        at::empty({static_cast<int64_t>(bytes)}, at::TensorOptions().dtype(at::kByte).device(torch_device));
    KJIT_ASSIGN_OR_RETURN(GuardedTensor g, MakeGuarded(like));
    g.tensor.zero_();
    return g;
  }

  // Whether the kernel kept the workspace contract after its runs so far: no
  // write outside it, and every byte zero again (the next launch relies on it).
  std::optional<RunFailure> CheckWorkspace(const GuardedTensor* workspace, const std::string& where) {
    if (workspace == nullptr) return std::nullopt;
    if (!GuardsIntact(*workspace)) return RunFailure{Outcome::kOutOfBounds, "wrote outside the workspace " + where};
    const int64_t nonzero = workspace->tensor.count_nonzero().item<int64_t>();
    if (nonzero != 0) {
      return RunFailure{Outcome::kStateful, "left " + std::to_string(nonzero) + " of " +
                                                std::to_string(workspace->tensor.numel()) +
                                                " workspace bytes non-zero " + where +
                                                " (the kernel must leave its workspace zeroed)"};
    }
    return std::nullopt;
  }

  // Waits for `event` with a deadline, so a kernel that never ends is found.
  std::optional<RunFailure> Wait(const Event& event, std::chrono::milliseconds deadline, const std::string& what) {
    const auto until = Clock::now() + deadline;
    const auto& api = driver().api();
    while (true) {
      const CUresult r = api.cuEventQuery(event.get());
      if (r == CUDA_SUCCESS) return std::nullopt;
      if (r != CUDA_ERROR_NOT_READY) {
        if (IsStickyError(r)) lost = true;
        return RunFailure{Outcome::kFault, what + " faulted: " + DescribeCuResult(&driver(), r)};
      }
      if (Clock::now() > until) {
        lost = true;  // the kernel is still running; only ending the process stops it
        return RunFailure{Outcome::kHang, what + " did not finish within " + std::to_string(deadline.count()) + " ms"};
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

  std::optional<RunFailure> Launch(const Function& fn, const LaunchConfig& config, std::vector<CUdeviceptr>& values) {
    std::vector<void*> params;
    for (CUdeviceptr& v : values) params.push_back(&v);
    params.push_back(nullptr);
    Status st = fn.Launch(config, stream, params.data());
    if (!st.ok()) return RunFailure{Outcome::kLaunchError, st.ToString()};
    return std::nullopt;
  }

  std::optional<RunFailure> RunOnce(const Function& fn, const LaunchConfig& config, std::vector<CUdeviceptr> values,
                                    std::chrono::milliseconds deadline) {
    if (auto f = Launch(fn, config, values)) return f;
    if (Status st = events[0].Record(stream); !st.ok()) return RunFailure{Outcome::kFault, st.ToString()};
    return Wait(events[0], deadline, "the candidate");
  }

  Status FlushL2(uint32_t value) {
    return driver().Check(driver().api().cuMemsetD32Async(flush->get(), value, flush->size() / 4, stream),
                          "cuMemsetD32Async (L2 flush)");
  }

  std::chrono::milliseconds RunDeadline(double baseline_us) const {
    const auto scaled = std::chrono::milliseconds(static_cast<int64_t>(baseline_us * options.run_deadline_factor / 1000));
    return std::max(options.min_run_deadline, scaled);
  }

  double BytesOf(const at::Tensor& t) const {
    if (!t.defined()) return 0;  // an output the op leaves out
    // Storage elements a view can reach; an expanded (stride 0) input is read once.
    int64_t extent = t.numel() > 0 ? 1 : 0;
    if (t.numel() > 0) {
      for (int64_t d = 0; d < t.dim(); ++d) extent += (t.size(d) - 1) * t.stride(d);
    }
    return static_cast<double>(std::min(extent, t.numel()) * static_cast<int64_t>(t.element_size()));
  }

  daemon::Roofline Floor(const Prepared& p, const InputSet& set) const {
    daemon::Roofline r;
    for (const at::Tensor& t : TensorsIn(set.args)) r.bytes += BytesOf(t);
    for (const at::Tensor& t : set.reference) r.bytes += BytesOf(t);
    r.flops = policy::FlopsOf(p.key);  // the traits' flops, or a matrix product's from its shapes
    const double bw_us = device.copy_bandwidth_bytes_per_s > 0 ? r.bytes / device.copy_bandwidth_bytes_per_s * 1e6 : 0;
    // FP32 FMA peak of the SMs: 128 lanes x 2 FLOPs per clock (Hopper and Ampere).
    const double peak = static_cast<double>(device.sm_count) * 128 * 2 * device.sm_clock_khz * 1e3;
    const double flop_us = (r.flops > 0 && peak > 0) ? r.flops / peak * 1e6 : 0;
    r.floor_us = std::max(bw_us, flop_us);
    return r;
  }

  void FinishRoofline(daemon::Roofline& r, double measured_us) const {
    if (measured_us <= 0) return;
    if (device.copy_bandwidth_bytes_per_s > 0) {
      r.bandwidth_fraction = r.bytes / (measured_us * 1e-6) / device.copy_bandwidth_bytes_per_s;
    }
    const double peak = static_cast<double>(device.sm_count) * 128 * 2 * device.sm_clock_khz * 1e3;
    if (r.flops > 0 && peak > 0) r.flop_fraction = r.flops / (measured_us * 1e-6) / peak;
  }

  // The peak device memory of one input set of the key (memory.h), before any is allocated.
  Result<WorkingSet> WorkingSetOf(const Prepared& p) const {
    return EstimateWorkingSet(p.op.run, p.op.schema, p.op.call, p.traits, options.bitwise);
  }

  // `working` against this GPU and `memory_cap` (the request's; 0: none). `held`:
  // bytes of the job's working set already resident (a cached screening set),
  // which kjitd's reading of free memory has already left out of the cap.
  MemoryJudgement JudgeWorkingSet(const WorkingSet& working, uint64_t memory_cap, uint64_t held = 0) const {
    uint64_t cap = memory_cap;
    if (cap > 0 && held > 0) cap = cap > UINT64_MAX - held ? UINT64_MAX : cap + held;
    return JudgeMemory(working, flush ? flush->size() : 0, cap, device_total_bytes);
  }

  // Where the estimate had to guess the outputs' sizes, judges it again once a
  // set's reference shows them; nothing when it was known or still fits.
  std::optional<MemoryJudgement> Rejudge(WorkingSet& working, const std::vector<at::Tensor>& reference,
                                         uint64_t memory_cap, uint64_t held = 0) const {
    if (working.outputs_known) return std::nullopt;
    UpdateOutputs(working, reference);
    MemoryJudgement j = JudgeWorkingSet(working, memory_cap, held);
    if (j.fit == MemoryFit::kFits) return std::nullopt;
    return j;
  }

  // Gives the blocks PyTorch's caching allocator keeps for reuse back to the
  // driver, so that the free memory kjitd reads before the next job (and the
  // cap it derives from it) is not shrunk by kjit's own cache.
  void ReleaseCachedMemory() {
    if (lost) return;  // after a sticky error the allocator's calls fail too, and the process exits
    try {
      c10::getDeviceAllocator(c10::DeviceType::CUDA)->emptyCache();
    } catch (const std::exception&) {
      // Only a broken context gets here; the next job finds out.
    }
  }

  // Declared first in a job, so that it runs after every tensor of the job is gone.
  struct ReleaseCachedMemoryAtExit {
    Impl& impl;
    ~ReleaseCachedMemoryAtExit() { impl.ReleaseCachedMemory(); }
  };

  // Device bytes the tensors of a set hold (its arguments and PyTorch's outputs).
  static uint64_t BytesHeld(const InputSet& set) {
    uint64_t bytes = 0;
    for (const at::Tensor& t : TensorsIn(set.args)) bytes += t.storage().nbytes();
    for (const at::Tensor& t : set.reference) bytes += t.defined() ? t.storage().nbytes() : 0;
    return bytes;
  }

  // When TimeLoop stops: after min_runs once both medians' 95% CI are within
  // target_ci_rel, or at max_runs, or past the budget.
  struct TimingLimits {
    int min_runs;
    int max_runs;
    double target_ci_rel;
    std::chrono::milliseconds budget;
  };
  TimingLimits FullTiming() const {
    return {options.min_runs, options.max_runs, options.target_ci_rel, options.timing_budget};
  }
  // screen_only requests: a rough time to rank points by, not a verdict.
  TimingLimits ScreenTiming() const { return {10, options.max_runs, 0.03, std::chrono::milliseconds(1000)}; }

  // Times `run_candidate` (may be empty) and `run_reference` alternately, after a flush each.
  struct TimedPair {
    std::vector<double> candidate_us;
    std::vector<double> reference_us;
    std::optional<RunFailure> failure;
  };
  // `before_candidate`, if given, runs before each candidate run (warm-up ones too), outside its events and
  // before the L2 flush (the evaluator re-poisons the outputs there, so that a kernel that skips work it did
  // before shows, and scrubs the reference's outputs).
  TimedPair TimeLoop(const std::function<std::optional<RunFailure>()>& run_candidate,
                     const std::function<void()>& run_reference, std::chrono::milliseconds deadline,
                     const TimingLimits& limits, const std::function<void()>& before_candidate = {}) {
    TimedPair out;
    const bool with_candidate = static_cast<bool>(run_candidate);
    const auto& api = driver().api();
    for (int i = 0; i < options.warmup_runs; ++i) {
      if (with_candidate) {
        if (before_candidate) before_candidate();
        if (auto f = run_candidate()) {
          out.failure = f;
          return out;
        }
      }
      run_reference();
    }
    const auto started = Clock::now();
    constexpr int kBatch = 10;
    uint32_t flush_value = 1;
    while (true) {
      // Another process wants the GPU: stop here rather than slow it down for the rest of the budget.
      if (auto f = Preempted()) {
        out.failure = f;
        return out;
      }
      // Events 0..4*kBatch-1: per iteration, candidate start/end and reference start/end.
      for (int b = 0; b < kBatch; ++b) {
        const Event* e = &events[static_cast<size_t>(1 + 4 * b)];
        const bool candidate_first = (out.reference_us.size() + static_cast<size_t>(b)) % 2 == 0;
        auto time_candidate = [&]() -> std::optional<RunFailure> {
          if (!with_candidate) return std::nullopt;
          if (before_candidate) before_candidate();
          (void)FlushL2(flush_value++);
          (void)e[0].Record(stream);
          if (auto f = run_candidate()) return f;
          (void)e[1].Record(stream);
          return std::nullopt;
        };
        auto time_reference = [&] {
          (void)FlushL2(flush_value++);
          (void)e[2].Record(stream);
          run_reference();
          (void)e[3].Record(stream);
        };
        if (candidate_first) {
          if (auto f = time_candidate()) {
            out.failure = f;
            return out;
          }
          time_reference();
        } else {
          time_reference();
          if (auto f = time_candidate()) {
            out.failure = f;
            return out;
          }
        }
      }
      if (auto f = Wait(events[static_cast<size_t>(4 * kBatch)], deadline * kBatch * 2, "a timed run")) {
        out.failure = f;
        return out;
      }
      for (int b = 0; b < kBatch; ++b) {
        const Event* e = &events[static_cast<size_t>(1 + 4 * b)];
        float ms = 0;
        if (with_candidate && api.cuEventElapsedTime(&ms, e[0].get(), e[1].get()) == CUDA_SUCCESS) {
          out.candidate_us.push_back(ms * 1000.0);
        }
        if (api.cuEventElapsedTime(&ms, e[2].get(), e[3].get()) == CUDA_SUCCESS) out.reference_us.push_back(ms * 1000.0);
      }
      const int n = static_cast<int>(out.reference_us.size());
      if (n >= limits.max_runs || Clock::now() - started > limits.budget) break;
      if (n >= limits.min_runs) {
        const bool ref_ok = Summarize(out.reference_us).ci_rel <= limits.target_ci_rel;
        const bool cand_ok = !with_candidate || Summarize(out.candidate_us).ci_rel <= limits.target_ci_rel;
        if (ref_ok && cand_ok) break;
      }
    }
    return out;
  }
};

void RequestYield() { g_yield.store(true, std::memory_order_relaxed); }

Evaluator::Evaluator(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Evaluator::~Evaluator() = default;

const daemon::WorkerDevice& Evaluator::device() const { return impl_->device; }
bool Evaluator::context_lost() const { return impl_->lost; }

void Evaluator::CompileAhead(const std::vector<daemon::CompileAhead>& ahead) {
  if (ahead.empty()) return;
  if (!impl_->compile_ahead) {
    impl_->compile_ahead = std::make_unique<CompileAheadPool>(impl_->compiler, impl_->options.compile_ahead_threads);
  }
  std::vector<CompileRequest> requests;
  for (const daemon::CompileAhead& a : ahead) {
    if (!CheckUntrustedCandidate(a.source, a.options).ok()) continue;  // kjitd checked too; never compiled
    daemon::CandidateSpec c;
    c.source = a.source;
    c.options = a.options;
    requests.push_back(CandidateCompileRequest(c, impl_->device.arch));
  }
  impl_->compile_ahead->Replace(std::move(requests));
}

uint64_t Evaluator::compiled_ahead() const { return impl_->compile_ahead ? impl_->compile_ahead->compiled() : 0; }

void Evaluator::Precompile(const std::vector<daemon::CandidateSpec>& candidates, int threads) {
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i = next++; i < candidates.size(); i = next++) {
      (void)impl_->compiler.Compile(CandidateCompileRequest(candidates[i], impl_->device.arch));
    }
  };
  std::vector<std::thread> pool;
  const int n = std::clamp<int>(threads, 1, static_cast<int>(std::max<size_t>(candidates.size(), 1)));
  for (int t = 1; t < n; ++t) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();
}

Result<std::unique_ptr<Evaluator>> Evaluator::Create(const EvaluatorOptions& options) {
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  // The op families declare their ops' traits (domains, tolerances) on first use.
  (void)policy::Families();
  KJIT_RETURN_IF_ERROR(LoadTorchCuda());
  try {
    c10::impl::VirtualGuardImpl guard(c10::DeviceType::CUDA);
    const auto count = guard.deviceCount();
    if (count <= 0) return Status(StatusCode::kNoDevice, "PyTorch sees no CUDA device");
    if (options.device < 0 || options.device >= count) {
      return Status(StatusCode::kNoDevice, "device " + std::to_string(options.device) + " does not exist (" +
                                               std::to_string(count) + " visible)");
    }
    impl->torch_device = c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(options.device));
    guard.setDevice(impl->torch_device);
    // A pool stream of the lowest priority, made PyTorch's current stream so
    // that its kernels and kjit's are ordered on one queue.
    c10::Stream s = guard.getStreamFromGlobalPool(impl->torch_device, /*isHighPriority=*/false);
    guard.exchangeStream(s);
    impl->stream = static_cast<CUstream>(s.native_handle());
    // PyTorch creates the primary context lazily: make it exist before the driver looks for it.
    (void)at::empty({1}, at::TensorOptions().device(impl->torch_device));
  } catch (const std::exception& e) {
    return Status(StatusCode::kUnavailable, std::string("PyTorch could not use the GPU: ") + e.what());
  }
  KJIT_ASSIGN_OR_RETURN(PrimaryContext ctx, PrimaryContext::Retain(options.device));
  impl->context.emplace(std::move(ctx));
  KJIT_ASSIGN_OR_RETURN(ContextGuard cg, ContextGuard::Push(*impl->context));
  impl->context_guard.emplace(std::move(cg));
  const DeviceInfo& info = impl->context->info();
  daemon::WorkerDevice& d = impl->device;
  d.ordinal = options.device;
  d.name = info.name;
  d.uuid = info.uuid;
  d.arch = info.arch();
  d.sm_count = info.sm_count;
  d.sm_clock_khz = info.sm_clock_khz;
  d.memory_clock_khz = info.memory_clock_khz;
  d.l2_bytes = static_cast<uint64_t>(info.l2_bytes);
  impl->device_total_bytes = info.memory_bytes;
  d.driver_version = impl->context->driver().version();
  std::tie(d.nvrtc_major, d.nvrtc_minor) = Compiler::NvrtcVersion();
  d.torch_version = TORCH_VERSION;
  d.pid = static_cast<uint32_t>(getpid());
  KJIT_ASSIGN_OR_RETURN(CopyBandwidth bw, DeviceCopyBandwidth(*impl->context));
  d.copy_bandwidth_bytes_per_s = bw.bytes_per_second;
  KJIT_ASSIGN_OR_RETURN(DeviceBuffer flush,
                        DeviceBuffer::Allocate(*impl->context, std::max<uint64_t>(2 * d.l2_bytes, 64u << 20)));
  impl->flush.emplace(std::move(flush));
  for (int i = 0; i < 1 + 4 * 10 + 1; ++i) {
    KJIT_ASSIGN_OR_RETURN(Event e, Event::Create(*impl->context));
    impl->events.push_back(std::move(e));
  }
  return std::unique_ptr<Evaluator>(new Evaluator(std::move(impl)));
}

daemon::BaselineResult Evaluator::Baseline(const daemon::BaselineRequest& request, const ProgressFn& progress) {
  Impl& s = *impl_;
  const Impl::ReleaseCachedMemoryAtExit release{s};  // first: runs after the job's tensors are freed
  g_yield = false;  // a request for an earlier job does not carry over
  BaselineResult result;
  result.id = request.id;
  auto fail = [&](const Status& st) {
    result.error_code = std::string(StatusCodeName(st.code()));
    result.error = st.message();
    return result;
  };
  // Too little memory: not now (kjitd retries), or never on this GPU (unfit, not retried).
  auto refuse = [&](const MemoryJudgement& j) {
    result.unfit = j.fit == MemoryFit::kUnfit;
    result.backoff = !result.unfit;
    return fail(Status(result.unfit ? StatusCode::kInvalidArgument : StatusCode::kUnavailable, j.reason));
  };
  try {
    auto prepared = s.Prepare(request.key_bytes);
    if (!prepared.ok()) return fail(prepared.status());
    // The same working set as a candidate's evaluation: a baseline is measured to evaluate candidates.
    auto working = s.WorkingSetOf(*prepared);
    if (!working.ok()) return fail(working.status());
    if (MemoryJudgement j = s.JudgeWorkingSet(*working, request.memory_cap_bytes); j.fit != MemoryFit::kFits) {
      return refuse(j);
    }
    progress("baseline", s.options.min_run_deadline * 20);
    auto set = s.MakeSet(*prepared, InputKind::kNormal, s.seeds());
    if (!set.ok()) {
      result.backoff = set.status().code() == StatusCode::kUnavailable;  // out of memory: may pass
      return fail(set.status());
    }
    if (auto j = s.Rejudge(*working, set->reference, request.memory_cap_bytes)) return refuse(*j);
    for (const at::Tensor& t : set->reference) result.outputs.push_back(DescribeTensorText(t));
    result.roofline = s.Floor(*prepared, *set);
    auto timed = s.TimeLoop({}, [&] { (void)s.CallReference(*prepared, set->args); }, s.options.min_run_deadline,
                            s.FullTiming());
    if (timed.failure && timed.failure->outcome == Outcome::kResourceBackoff) {
      result.backoff = true;  // preempted: the client tries again later
      return fail(Status(StatusCode::kUnavailable, timed.failure->reason));
    }
    if (timed.failure) return fail(Status(StatusCode::kCudaError, timed.failure->reason));
    result.timing = Summarize(timed.reference_us);
    s.FinishRoofline(result.roofline, result.timing.median_us);
  } catch (const c10::OutOfMemoryError& e) {
    result.backoff = true;
    return fail(Status(StatusCode::kUnavailable, std::string("out of GPU memory: ") + e.what_without_backtrace()));
  } catch (const c10::Error& e) {
    return fail(Status(StatusCode::kInvalidArgument, std::string("PyTorch: ") + e.what_without_backtrace()));
  } catch (const std::exception& e) {
    return fail(Internal(e.what()));
  }
  return result;
}

daemon::Verdict Evaluator::Evaluate(const daemon::EvaluateRequest& request, const ProgressFn& progress) {
  Impl& s = *impl_;
  const Impl::ReleaseCachedMemoryAtExit release{s};  // first: runs after the job's tensors are freed
  g_yield = false;  // a request for an earlier job does not carry over
  const auto started = Clock::now();
  ChoosePatterns(s.seeds());  // this evaluation's poison and guard bytes: no fixed pattern to recognise
  Verdict v;
  v.id = request.id;
  CompileAhead(request.compile_ahead);  // the next candidates compile while this one runs
  auto finish = [&](Outcome outcome, std::string reason) {
    v.outcome = std::string(policy::OutcomeName(outcome));
    v.reason = std::move(reason);
    v.reward = policy::Reward(policy::TrialOutcome{outcome, v.timing.median_us, v.baseline.median_us});
    v.accepted = outcome == Outcome::kVerified && !request.screen_only &&
                 policy::Accept(v.timing.median_us, v.timing.spread_us, v.baseline.median_us, v.baseline.spread_us);
    if (outcome != Outcome::kVerified) v.cubin.clear();
    v.total_ms = MsSince(started);
    v.worker_exits = s.lost;
    return v;
  };
  try {
    auto prepared = s.Prepare(request.key_bytes);
    if (!prepared.ok()) return finish(Outcome::kResourceBackoff, "cannot evaluate this key: " + prepared.status().ToString());
    const Impl::Prepared& p = *prepared;
    const uint64_t workspace_bytes = request.candidate.launch.workspace_bytes;
    if (workspace_bytes > daemon::kMaxWorkspaceBytes) {
      return finish(Outcome::kLaunchError, "a workspace of " + std::to_string(workspace_bytes) +
                                               " bytes is over the limit of " + std::to_string(daemon::kMaxWorkspaceBytes));
    }
    // Too little memory: not now (kjitd retries the job), or never on this GPU (unfit, not retried).
    auto refuse = [&](const MemoryJudgement& j) {
      v.unfit = j.fit == MemoryFit::kUnfit;
      v.retry_later = !v.unfit;
      return finish(Outcome::kResourceBackoff, j.reason);
    };
    // The screening set kept from earlier requests is memory this job cannot use
    // unless it screens the same key: freed before the job's memory is judged if
    // it is another key's, or if a full evaluation (which builds sets of its
    // own) would find it in the way; a small one stays for the screens that follow.
    constexpr uint64_t kScreenSetKeptBesideEvaluation = uint64_t{1} << 30;
    const bool reuses_screen_set = request.screen_only && s.screen_set && s.screen_set->first == request.key_bytes;
    if (s.screen_set && !reuses_screen_set &&
        (s.screen_set->first != request.key_bytes || Impl::BytesHeld(s.screen_set->second) > kScreenSetKeptBesideEvaluation)) {
      s.screen_set.reset();
      s.ReleaseCachedMemory();
    }
    auto working = s.WorkingSetOf(p);
    if (!working.ok()) return finish(Outcome::kResourceBackoff, "cannot evaluate this key: " + working.status().ToString());
    // The workspace and its guard bytes (MakeGuarded's default guards on both sides).
    if (workspace_bytes > 0) working->workspace = workspace_bytes + 2 * 4096 + 16;
    const uint64_t held = reuses_screen_set ? Impl::BytesHeld(s.screen_set->second) : 0;
    if (MemoryJudgement j = s.JudgeWorkingSet(*working, request.memory_cap_bytes, held); j.fit != MemoryFit::kFits) {
      return refuse(j);
    }

    // 1. Compile, load, check the launch.
    progress("compile", std::chrono::minutes(2));
    const daemon::CandidateSpec& c = request.candidate;
    // What kjitd checked, checked again where NVRTC runs: a submitted kernel includes no file.
    if (Status st = CheckUntrustedCandidate(c.source, c.options); !st.ok()) {
      return finish(Outcome::kCompileError, "refused before compiling: " + st.message());
    }
    const auto compile_start = std::chrono::steady_clock::now();
    auto compiled = s.compiler.Compile(CandidateCompileRequest(c, s.device.arch));
    // What this job waited for NVRTC: near 0 when compile-ahead (or an earlier job) already compiled it.
    v.compile_wait_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - compile_start).count();
    if (!compiled.ok()) {
      v.compile_log = compiled.status().message();
      return finish(Outcome::kCompileError, "compile error: " + compiled.status().message());
    }
    v.compiled = true;
    v.compile_log = (*compiled)->log;
    v.compile_ms = static_cast<double>((*compiled)->compile_time.count()) / 1000.0;
    v.compile_cached = (*compiled)->from_cache;
    v.resources.spill_bytes = ParseSpillBytes(v.compile_log);
    auto loaded = Module::Load(*s.context, (*compiled)->cubin);
    if (!loaded.ok()) return finish(Outcome::kLaunchError, "module load: " + loaded.status().ToString());
    // Unloading a module waits for its kernels: after a hang that would never
    // return, so a module whose kernel took the context down is left to the process exit.
    auto keep_if_lost = [&s](Module* m) {
      if (!s.lost) delete m;
    };
    std::unique_ptr<Module, decltype(keep_if_lost)> module(new Module(std::move(*loaded)), keep_if_lost);
    auto fn = module->GetFunction(c.entry_point);
    if (!fn.ok()) return finish(Outcome::kLaunchError, fn.status().ToString());
    const LaunchLimits& limits = fn->limits();
    v.resources.registers = limits.registers_per_thread;
    v.resources.local_bytes = limits.local_bytes_per_thread;
    v.resources.static_shared_bytes = limits.static_shared_bytes;
    v.resources.max_threads_per_block = limits.max_threads_per_block;
    LaunchConfig config;
    config.grid = {c.launch.grid[0], c.launch.grid[1], c.launch.grid[2]};
    config.block = {c.launch.block[0], c.launch.block[1], c.launch.block[2]};
    config.dynamic_shared_bytes = c.launch.dynamic_shared_bytes;
    if (Status st = CheckLaunchConfig(config, limits); !st.ok()) return finish(Outcome::kLaunchError, st.ToString());
    v.cubin = (*compiled)->cubin;
    // One workspace for the whole evaluation, zeroed once: every run after the
    // first relies on the kernel leaving it zeroed, as the shim's launches do.
    std::optional<GuardedTensor> workspace_storage;
    if (workspace_bytes > 0) {
      auto made = s.MakeWorkspace(workspace_bytes);
      if (!made.ok()) return finish(Outcome::kResourceBackoff, "workspace: " + made.status().ToString());
      workspace_storage.emplace(std::move(*made));
    }
    const GuardedTensor* workspace = workspace_storage ? &*workspace_storage : nullptr;

    if (request.screen_only) {
      // One run on the key's cached screening set, compared, then a short timing (see EvaluateRequest).
      progress("time", s.options.timing_budget * 3 + std::chrono::minutes(1));
      if (!s.screen_set || s.screen_set->first != request.key_bytes) {
        s.screen_set.reset();  // frees the previous key's tensors first
        auto made = s.MakeSet(p, InputKind::kNormal, s.seeds());
        if (!made.ok()) {
          v.retry_later = made.status().code() == StatusCode::kUnavailable;  // out of memory: may pass
          return finish(Outcome::kResourceBackoff, "cannot build inputs: " + made.status().ToString());
        }
        s.screen_set.emplace(request.key_bytes, std::move(*made));
      }
      Impl::InputSet& set = s.screen_set->second;
      if (auto j = s.Rejudge(*working, set.reference, request.memory_cap_bytes, held)) {
        s.screen_set.reset();
        return refuse(*j);
      }
      // The float64 reference (made only for a mismatch) is the inputs and outputs again in float64:
      // not kept between requests with the set.
      struct DropFloat64Reference {
        Impl::InputSet& set;
        ~DropFloat64Reference() {
          set.exact.reset();
          set.magnitude.clear();
        }
      } drop_float64_reference{set};
      const std::chrono::milliseconds deadline = s.options.min_run_deadline * 5;
      auto guarded = s.GuardedOutputs(set.reference, Poison::kNaN);
      if (!guarded.ok()) return finish(Outcome::kResourceBackoff, guarded.status().ToString());
      const std::vector<GuardedTensor>& outs = *guarded;
      std::vector<CUdeviceptr> values = s.Params(p, set.args, outs, workspace);
      if (auto f = s.RunOnce(*fn, config, values, deadline)) return finish(f->outcome, f->reason + " on the screening set");
      if (auto f = s.CheckWorkspace(workspace, "on the screening set")) return finish(f->outcome, f->reason);
      for (size_t i = 0; i < outs.size(); ++i) {
        if (!Impl::OutputGuardsIntact(outs[i])) return finish(Outcome::kOutOfBounds, "wrote outside output " + std::to_string(i));
        const Comparison cmp = s.JudgeOutput(p, set, i, outs[i].tensor);
        if (!cmp.ok) return finish(Outcome::kWrongResult, "output " + std::to_string(i) + " on the screening set: " + cmp.reason);
      }
      auto pair = s.TimeLoop([&]() -> std::optional<RunFailure> { return s.Launch(*fn, config, values); },
                             [&] { (void)s.CallReference(p, set.args); }, deadline, s.ScreenTiming());
      if (pair.failure && pair.failure->outcome == Outcome::kResourceBackoff) v.retry_later = true;  // preempted
      if (pair.failure) return finish(pair.failure->outcome, pair.failure->reason + " while timing");
      if (auto f = s.CheckWorkspace(workspace, "while timing")) return finish(f->outcome, f->reason);
      v.timing = Summarize(pair.candidate_us);
      v.baseline = Summarize(pair.reference_us);
      v.roofline = s.Floor(p, set);
      s.FinishRoofline(v.roofline, v.timing.median_us);
      v.verification.input_kinds.push_back("screen");
      return finish(Outcome::kVerified, "screened: one input set and a short timing, not verified");
    }

    progress("verify", std::chrono::minutes(2));
    std::vector<std::pair<InputKind, std::string>> kinds;
    bool any_float_input = false, large_order_dependent = false, special_order_dependent = false;
    bool non_contiguous = false, unaligned = false, empty = false;
    for (const Arg& a : p.op.call.args) {
      if (const auto* t = std::get_if<TensorDesc>(&a)) {
        any_float_input |= IsFloatingPoint(t->dtype);
        large_order_dependent |= p.traits.no_large_inputs.count(t->dtype) > 0;
        special_order_dependent |= p.traits.no_special_inputs.count(t->dtype) > 0;
        non_contiguous |= !t->is_contiguous();
        unaligned |= t->alignment < 16;
        empty |= t->numel() == 0;
      }
    }
    // Where PyTorch's result on large values depends on its own order (op_traits.h), normal values instead.
    const InputKind random_kinds[] = {InputKind::kNormal, InputKind::kUniform,
                                      large_order_dependent ? InputKind::kNormal : InputKind::kLarge};
    // The sanitizer's target needs the kernel to run, not to be judged again: one set does.
    const int random_sets = s.options.sanitizer_target ? 1 : s.options.random_sets;
    for (int i = 0; i < random_sets; ++i) kinds.push_back({random_kinds[i % 3], ""});
    if (!s.options.sanitizer_target) kinds.push_back({InputKind::kSmall, "subnormal"});
    // Ties and outliers (inputs.h): the first-index rule of argmax and pooling, a softmax's max subtraction;
    // constant tensors: a variance of exactly 0, every element a tie.
    const bool edge_sets = any_float_input && !s.options.sanitizer_target;
    if (edge_sets) {
      // The outliers (x16 to x128) are large values too: where those are order-dependent, ties alone.
      if (large_order_dependent) {
        kinds.push_back({InputKind::kTies, "ties"});
      } else {
        kinds.push_back({InputKind::kStructured, "ties_outliers"});
      }
      kinds.push_back({InputKind::kConstant, "constant"});
    }
    if (p.traits.special_values && !special_order_dependent && edge_sets) {
      kinds.push_back({InputKind::kSpecial, "nan_inf_neg_zero"});
    } else if (p.traits.nan_values && edge_sets) {
      // Where an Inf's result is PyTorch's order's own, a NaN's still is not (op_traits.h).
      kinds.push_back({InputKind::kNaN, "nan_neg_zero"});
    }

    std::chrono::milliseconds deadline = s.options.min_run_deadline;
    bool deadline_known = false;
    // One input set is resident at a time (memory.h): each iteration's tensors
    // are freed before the next set is built; what carries over is a digest of
    // PyTorch's outputs, to tell whether they depend on the inputs at all.
    std::optional<std::vector<Digest>> previous_digests;
    bool reference_changes = false;
    std::vector<at::Tensor> output_layouts;  // LayoutsOf PyTorch's outputs, from the first set
    for (const auto& [kind, edge_name] : kinds) {
      if (auto f = Preempted()) {
        v.retry_later = true;
        return finish(f->outcome, f->reason);
      }
      const uint64_t seed = s.seeds();
      auto set = s.MakeSet(p, kind, seed, /*with_reference=*/false);
      if (!set.ok()) {
        v.retry_later = set.status().code() == StatusCode::kUnavailable;  // out of memory: may pass
        return finish(Outcome::kResourceBackoff, "cannot build inputs: " + set.status().ToString());
      }
      const std::string where = std::string(InputKindName(kind)) + " inputs (seed " + std::to_string(seed) + ")";
      if (!deadline_known) {
        deadline_known = true;
        // PyTorch's outputs' layouts (the same for every set of the key), then, from a second (warm) call, the
        // reference's time, which bounds how long a candidate run may take. Both calls' outputs are scrubbed.
        const std::vector<at::Tensor> first_outputs = s.CallReference(p, set->args);
        if (auto j = s.Rejudge(*working, first_outputs, request.memory_cap_bytes)) return refuse(*j);
        output_layouts = Impl::LayoutsOf(first_outputs);
        Impl::Scrub(first_outputs);
        const auto t0 = Clock::now();
        Impl::Scrub(s.CallReference(p, set->args));
        (void)s.events[0].Record(s.stream);
        if (auto f = s.Wait(s.events[0], std::chrono::minutes(1), "the reference")) {
          return finish(Outcome::kResourceBackoff, f->reason);
        }
        deadline = s.RunDeadline(MsSince(t0) * 1000.0);
        // kjitd's watchdog, now that the reference's time is known: every
        // remaining run at its deadline, plus time to build and compare inputs.
        progress("verify", deadline * static_cast<int>(2 * kinds.size()) + std::chrono::seconds(60));
      }
      auto guarded = s.GuardedOutputs(output_layouts, std::nullopt);
      if (!guarded.ok()) return finish(Outcome::kResourceBackoff, guarded.status().ToString());
      const std::vector<GuardedTensor>& outs = *guarded;
      // The first run's outputs (poisoned with NaN first), copied; the second's stay in `outs`.
      std::vector<at::Tensor> first_run;
      {
        // The inputs as they were, to catch a kernel writing into them; freed before outputs are judged.
        auto pristine = CloneArguments(set->args);
        if (!pristine.ok()) return finish(Outcome::kResourceBackoff, pristine.status().ToString());
        const Poison poisons[2] = {Poison::kNaN, Poison::kFinite};
        for (int run = 0; run < 2; ++run) {
          for (const GuardedTensor& g : outs) ResetGuarded(g, poisons[run]);
          if (auto f = s.RunOnce(*fn, config, s.Params(p, set->args, outs, workspace), deadline)) {
            return finish(f->outcome, f->reason + " on " + where);
          }
          if (auto f = s.CheckWorkspace(workspace, "on " + where)) return finish(f->outcome, f->reason);
          for (size_t i = 0; i < outs.size(); ++i) {
            if (!Impl::OutputGuardsIntact(outs[i])) {
              return finish(Outcome::kOutOfBounds, "wrote outside output " + std::to_string(i) + " on " + where);
            }
            if (run == 0) first_run.push_back(outs[i].tensor.defined() ? outs[i].tensor.clone() : at::Tensor());
          }
        }
        const std::vector<at::Tensor> inputs = TensorsIn(set->args);
        const std::vector<at::Tensor> originals = TensorsIn(*pristine);
        for (size_t i = 0; i < inputs.size(); ++i) {
          if (!BitwiseEqual(inputs[i], originals[i])) {
            return finish(Outcome::kOutOfBounds, "modified input tensor " + std::to_string(i) + " on " + where);
          }
        }
      }
      // PyTorch's answer, now that the candidate has run on the set (and left its inputs as they were).
      set->reference = s.CallReference(p, set->args);
      if (set->reference.size() != outs.size()) {
        return finish(Outcome::kResourceBackoff, "PyTorch returned " + std::to_string(set->reference.size()) +
                                                     " outputs on " + where + ", " + std::to_string(outs.size()) +
                                                     " on the first set");
      }
      std::vector<Digest> digests;
      for (const at::Tensor& r : set->reference) digests.push_back(DigestOf(r));
      if (previous_digests && *previous_digests != digests) reference_changes = true;
      previous_digests = std::move(digests);
      for (size_t i = 0; i < outs.size(); ++i) {
        if (!outs[i].tensor.defined()) continue;  // judged below: PyTorch's must be undefined too
        const Unwritten unwritten = FindUnwritten(first_run[i], outs[i].tensor);
        if (unwritten.count > 0) {
          return finish(Outcome::kUnwrittenOutput, std::to_string(unwritten.count) + " of " +
                                                       std::to_string(outs[i].tensor.numel()) + " elements of output " +
                                                       std::to_string(i) + " were never written (first at " +
                                                       unwritten.first_index + ") on " + where);
        }
        if (!p.traits.nondeterministic && !BitwiseEqual(first_run[i], outs[i].tensor)) {
          return finish(Outcome::kNondeterministic,
                        "two runs on the same inputs gave different output " + std::to_string(i) + " on " + where +
                            " (a data race, or uninitialised memory read)");
        }
      }
      // Both runs gave the same bits: judging the second judges the first too,
      // and its copy is freed before the judging (which may make float64 copies).
      if (!p.traits.nondeterministic) first_run.clear();
      for (size_t i = 0; i < outs.size(); ++i) {
        if (!outs[i].tensor.defined() || !set->reference[i].defined()) {
          const Comparison cmp = s.JudgeOutput(p, *set, i, outs[i].tensor);
          if (!cmp.ok) return finish(Outcome::kWrongResult, "output " + std::to_string(i) + " on " + where + ": " + cmp.reason);
          continue;
        }
        const Tolerance tol = Impl::OutputTolerance(set->reference[i], p.traits);
        std::vector<const at::Tensor*> judged;
        if (!first_run.empty()) judged.push_back(&first_run[i]);
        judged.push_back(&outs[i].tensor);
        for (size_t run = 0; run < judged.size(); ++run) {
          // Ill-conditioned inputs are judged for accuracy against float64 instead (compare.h).
          bool by_float64 = false;
          const Comparison cmp = s.JudgeOutput(p, *set, i, *judged[run], &by_float64);
          if (!cmp.ok) return finish(Outcome::kWrongResult, "output " + std::to_string(i) + " on " + where + ": " + cmp.reason);
          if (by_float64) {
            if (run == 0) v.verification.edge_cases_passed.push_back("float64_accuracy:" + std::string(InputKindName(kind)) +
                                                                      ":output" + std::to_string(i));
            continue;
          }
          v.verification.max_abs_error = std::max(v.verification.max_abs_error, cmp.max_abs_error);
          v.verification.max_rel_error = std::max(v.verification.max_rel_error, cmp.max_rel_error);
        }
        if (i == 0) {
          v.verification.atol = tol.atol;
          v.verification.rtol = tol.rtol;
        }
      }
      if (v.verification.outputs.empty()) {
        // PyTorch's output layouts for the key: the shim serves the kernel only where its process's first call
        // returned the same (it allocates a hit's outputs like that call's).
        for (const at::Tensor& t : set->reference) {
          cache::VerifiedOutput o;
          o.defined = t.defined();
          if (t.defined()) {
            o.scalar_type = static_cast<int>(t.scalar_type());
            o.sizes.assign(t.sizes().begin(), t.sizes().end());
            o.strides.assign(t.strides().begin(), t.strides().end());
          }
          v.verification.outputs.push_back(std::move(o));
        }
      }
      v.verification.seeds.push_back(seed);
      v.verification.input_kinds.push_back(std::string(InputKindName(kind)));
      if (!edge_name.empty()) v.verification.edge_cases_passed.push_back(edge_name);
    }
    if (non_contiguous) v.verification.edge_cases_passed.push_back("non_contiguous");
    if (unaligned) v.verification.edge_cases_passed.push_back("unaligned");
    if (empty) v.verification.edge_cases_passed.push_back("empty");
    if (!reference_changes && kinds.size() > 1) {
      // Every input set gave the reference the same output: the checks above
      // could not tell a kernel that ignores its inputs from a correct one.
      v.verification.edge_cases_passed.push_back("input_independent_output");
    }

    if (s.options.sanitizer_target) return finish(Outcome::kVerified, "ran under compute-sanitizer (one set, no timing)");

    // 3. Time on unseen inputs, interleaved with the reference.
    const uint64_t seed = s.seeds();
    auto set = s.MakeSet(p, InputKind::kNormal, seed, /*with_reference=*/false);
    if (!set.ok()) {
      v.retry_later = set.status().code() == StatusCode::kUnavailable;  // out of memory: may pass
      return finish(Outcome::kResourceBackoff, set.status().ToString());
    }
    auto guarded = s.GuardedOutputs(output_layouts, Poison::kNaN);
    if (!guarded.ok()) return finish(Outcome::kResourceBackoff, guarded.status().ToString());
    const std::vector<GuardedTensor>& outs = *guarded;
    std::vector<CUdeviceptr> values = s.Params(p, set->args, outs, workspace);
    auto timed = [&]() -> std::optional<RunFailure> { return s.Launch(*fn, config, values); };
    progress("time", std::chrono::milliseconds(s.options.timing_budget * 3 + deadline * 40));
    // Every timed run starts from poisoned outputs (the two poisons in turn; the guards stay as set): a kernel
    // that remembers its outputs (by pointer, say) and skips the work the next time is judged on what its
    // last timed run wrote, below, not on a first run's outputs.
    // The reference calls' outputs are held until the next candidate run is due and scrubbed then, outside
    // the timed events (two at most: the loop may run the reference twice in a row).
    int poison_turn = 0;
    std::vector<std::vector<at::Tensor>> held_references;
    auto scrub_held = [&] {
      for (const auto& r : held_references) Impl::Scrub(r);
      held_references.clear();
    };
    auto repoison = [&] {
      scrub_held();
      for (const GuardedTensor& g : outs) PoisonStorage(g.tensor, poison_turn % 2 == 0 ? Poison::kFinite : Poison::kNaN);
      ++poison_turn;
    };
    auto pair = s.TimeLoop(timed, [&] { held_references.push_back(s.CallReference(p, set->args)); }, deadline,
                           s.FullTiming(), repoison);
    scrub_held();
    if (pair.failure) return finish(pair.failure->outcome, pair.failure->reason + " while timing");
    if (auto f = s.Wait(s.events[0], deadline, "the candidate")) return finish(f->outcome, f->reason);
    if (auto f = s.CheckWorkspace(workspace, "after the timed runs")) return finish(f->outcome, f->reason);
    set->reference = s.CallReference(p, set->args);
    v.timing = Summarize(pair.candidate_us);
    v.baseline = Summarize(pair.reference_us);
    v.roofline = s.Floor(p, *set);
    s.FinishRoofline(v.roofline, v.timing.median_us);
    for (size_t i = 0; i < outs.size(); ++i) {
      const Comparison cmp = s.JudgeOutput(p, *set, i, outs[i].tensor);
      if (!cmp.ok || !Impl::OutputGuardsIntact(outs[i])) {
        return finish(Outcome::kStateful, "after " + std::to_string(v.timing.runs + s.options.warmup_runs) +
                                              " calls on unseen inputs (seed " + std::to_string(seed) +
                                              ") output " + std::to_string(i) + " no longer matches: " +
                                              (cmp.ok ? "guard bytes changed" : cmp.reason));
      }
    }
    // 4. compute-sanitizer, for a kernel that would be served (faster than PyTorch), once per key and CUBIN.
    const bool would_serve = policy::Accept(v.timing.median_us, v.timing.spread_us, v.baseline.median_us,
                                            v.baseline.spread_us);
    const Hash128 key_hash = HashBytes(request.key_bytes);
    const auto best_clean = s.best_clean_us.find(key_hash);
    const double best_clean_us = best_clean == s.best_clean_us.end() ? 0.0 : best_clean->second;
    const bool sanitizing = !s.options.sanitizer.empty() && !s.options.sanitizer_target;
    if (sanitizing && would_serve && !s.options.sanitize_every_verified &&
        !policy::ReplacesStored(v.timing.median_us, best_clean_us)) {
      return finish(Outcome::kVerified, "verified; compute-sanitizer not run: no faster than a kernel it passed for "
                                        "this key (" + std::to_string(best_clean_us) + " us), which kjitd keeps");
    }
    if (sanitizing && (would_serve || s.options.sanitize_every_verified)) {
      using State = Impl::SanitizerVerdict::State;
      const auto memo = std::make_pair(key_hash, HashBytes((*compiled)->cubin));
      Impl::SanitizerVerdict verdict;
      if (auto known = s.sanitized.find(memo); known != s.sanitized.end()) {
        verdict = known->second;
        if (verdict.state == State::kClean) verdict.text = "compute-sanitizer clean (earlier run)";
      } else if (working->inputs + working->outputs > s.options.sanitizer_max_bytes) {
        verdict.text = "compute-sanitizer not run: inputs and outputs over " + FormatBytes(s.options.sanitizer_max_bytes);
      } else {
        progress("sanitize", s.options.sanitizer_timeout * 2 + std::chrono::seconds(30));
        const bool uses_shared = limits.static_shared_bytes > 0 || config.dynamic_shared_bytes > 0;
        const bool racecheck = uses_shared && working->inputs + working->outputs <= s.options.racecheck_max_bytes;
        verdict = s.Sanitize(request, racecheck);
        if (uses_shared && !racecheck && verdict.state == State::kClean) {
          verdict.text += "; racecheck not run: inputs and outputs over " + FormatBytes(s.options.racecheck_max_bytes);
        }
        if (s.sanitized.size() >= 4096) s.sanitized.clear();
        if (verdict.state == State::kClean || verdict.state == State::kFound) s.sanitized[memo] = verdict;
      }
      if (verdict.state == State::kYielded) {
        // The user's program wants the GPU: stop here and run the whole job again once it is idle (nothing of
        // a kernel is served before its check has run).
        v.retry_later = true;
        return finish(Outcome::kResourceBackoff, verdict.text);
      }
      if (verdict.state == State::kFound) return finish(Outcome::kOutOfBounds, verdict.text);
      if (verdict.state == State::kClean) {
        v.verification.edge_cases_passed.push_back("compute_sanitizer");
        if (best_clean_us <= 0 || v.timing.median_us < best_clean_us) {
          if (s.best_clean_us.size() >= 4096) s.best_clean_us.clear();
          s.best_clean_us[key_hash] = v.timing.median_us;
        }
      }
      return finish(Outcome::kVerified, "verified; " + verdict.text);
    }
    return finish(Outcome::kVerified, "verified");
  } catch (const c10::OutOfMemoryError& e) {
    v.retry_later = true;
    return finish(Outcome::kResourceBackoff, std::string("out of GPU memory: ") + e.what_without_backtrace());
  } catch (const c10::Error& e) {
    // After a candidate faults, PyTorch's next call reports the sticky error.
    if (std::string(e.what()).find("illegal") != std::string::npos) s.lost = true;
    return finish(s.lost ? Outcome::kFault : Outcome::kResourceBackoff,
                  std::string("PyTorch: ") + e.what_without_backtrace());
  } catch (const std::exception& e) {
    return finish(Outcome::kResourceBackoff, std::string("internal error: ") + e.what());
  }
}

}  // namespace kjit::eval
