// kjit_seed_defaults: the family's expert-default kernel for every key kjitd has
// queued, and nothing else: one trial a key.
//
// kjitd tunes queued keys by itself (its tuner: the expert default first, then
// the policy's proposals). This program is the same tuner in one configuration,
// for when only the expert defaults are wanted, at once:
//
//   (default)  kjit's tuner (policy/learn/include/kjit/policy/learn/tuner.h) with
//              the expert default as its only proposal, one trial a key, until no
//              task is left to claim: kjitd's evaluator verifies each kernel
//              against PyTorch on the GPU and times it; a verified kernel that
//              beats PyTorch enters the cache and is announced to running
//              processes. Copies share the queue through claims (--jobs runs
//              several in one process). Needs kjit built with LibTorch.
//   --direct   compiled here with NVRTC and stored as verified WITHOUT being
//              verified or timed. For tests only: they compare every output
//              with eager PyTorch themselves. Needs no kjitd, only NVRTC.
//
// Prints one line per task: the key and what became of its kernel. Exit
// status 0 when every task was handled (whatever the verdicts), 1 on an error.
#include <CLI/CLI.hpp>

#include <atomic>
#include <chrono>
#include <mutex>
#include <unistd.h>
#include <cstdio>
#include <string>
#include <vector>

#include "kjit/cache/kernel_cache.h"
#include "kjit/ipc/client.h"
#ifdef KJIT_SEED_WITH_TUNER
#include "kjit/policy/learn/tuner.h"
#endif
#include "kjit/policy/design_space.h"
#include "kjit/runtime/compiler.h"
#include "kjit/runtime/op_key.h"

namespace {

using namespace kjit;

struct Task {
  std::string key_bytes;
  std::string key_text;
};

// The expert default for a key, for a device with these facts.
Result<policy::Candidate> ExpertKernel(const OpKey& key, const policy::DeviceFacts& facts) {
  KJIT_ASSIGN_OR_RETURN(policy::Match match, policy::FindFamily(key));
  const policy::Point point = match.family->ExpertDefault(*match.problem, facts);
  KJIT_ASSIGN_OR_RETURN(policy::Candidate candidate, match.family->Generate(*match.problem, point, facts));
  candidate.design = policy::ToDesignPoint(std::string(match.family->name()), point, "expert-default");
  return candidate;
}

// --direct: compile and store, unverified.
std::string Direct(cache::KernelCache& cache, const OpKey& key) {
  policy::DeviceFacts facts = policy::DeviceFacts::H200();
  facts.arch = key.arch;
  auto candidate = ExpertKernel(key, facts);
  if (!candidate.ok()) return "skipped: " + candidate.status().message();
  Compiler compiler;
  CompileRequest request;
  request.source = candidate->source;
  request.program_name = "seed_default.cu";
  request.arch = key.arch;
  request.options = candidate->options;
  auto compiled = compiler.Compile(request);
  if (!compiled.ok()) return "compile failed: " + compiled.status().ToString();
  cache::KernelRecord record;
  record.key_bytes = key.Encode();
  record.source = candidate->source;
  record.compile_options = candidate->options;
  record.entry_point = candidate->entry_point;
  record.cubin = (*compiled)->cubin;
  record.launch = candidate->launch;
  record.design = candidate->design;
  record.toolchain = cache::RunningToolchain();
#ifdef KJIT_SEED_TORCH_VERSION
  record.torch_version = KJIT_SEED_TORCH_VERSION;  // served to programs on the PyTorch kjit was built against
#endif
  record.status = cache::RecordStatus::kVerified;
  record.status_reason = "stored by kjit_seed_defaults --direct without verification (tests only)";
  auto id = cache.Insert(std::move(record));
  if (!id.ok()) return "not stored: " + id.status().ToString();
  return "stored unverified as record " + std::to_string(*id);
}

#ifdef KJIT_SEED_WITH_TUNER
// The tuner with the expert default as its only proposal: one trial a key, until nothing is left to claim.
int ThroughKjitd(const std::string& cache_path, const std::string& endpoint, int limit, int jobs, double timeout_s) {
  policy::learn::TunerOptions options;
  options.cache_path = cache_path.empty() ? cache::DefaultCachePath() : cache_path;
  options.claimer = "kjit_seed_defaults/" + std::to_string(getpid());
  options.jobs = jobs;
  options.proposer = policy::learn::Proposer::kExpertThenRandom;
  options.first_trials = 1;
  options.trials = 0;
  options.train_if_missing = false;
  options.learn_every = 0;
  options.max_rounds = limit;
  options.exit_when_idle = true;
  ipc::ClientOptions client;
  client.endpoint = endpoint;
  client.name = "kjit-seed-defaults/0.1";
  client.request_timeout = std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
  std::mutex mu;
  int rounds = 0;
  const auto log = [&](const char* level, const std::string& event, const std::map<std::string, std::string>& f) {
    auto get = [&f](const char* k) {
      auto it = f.find(k);
      return it == f.end() ? std::string() : it->second;
    };
    std::lock_guard lock(mu);
    if (event == "tuner_round") {
      ++rounds;
      const std::string record = get("record");
      std::printf("%s: %s%s\n", get("key").c_str(), get("detail").c_str(),
                  record.empty() ? "" : ("; kernel in record " + record).c_str());
      std::fflush(stdout);
    } else if (std::string(level) != "info") {
      std::fprintf(stderr, "kjit_seed_defaults: %s %s\n", event.c_str(), get("error").c_str());
    }
  };
  policy::learn::Tuner tuner(
      options, [client] { return std::make_unique<policy::learn::OwnedKjitdEvaluator>(client); }, log);
  std::atomic<bool> stop{false};
  if (Status st = tuner.Run(stop); !st.ok()) {
    std::fprintf(stderr, "kjit_seed_defaults: %s\n", st.ToString().c_str());
    return 1;
  }
  if (rounds == 0) std::printf("no queued tasks (run a program under `kjit run` first)\n");
  return 0;
}
#endif

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"kjit_seed_defaults: the expert-default kernel for every key kjitd has queued, one trial a key (kjit's "
               "tuner with the expert default as its only proposal)"};
  std::string cache_path, endpoint;
  bool direct = false;
  int limit = 0;
  double timeout_s = 600;
  app.add_flag("--direct", direct,
               "Compile here and store as verified WITHOUT verification (tests only; no kjitd needed)");
  app.add_option("--cache", cache_path, "The kernel cache kjitd uses (default: $KJIT_CACHE, else the user's)");
  app.add_option("--endpoint", endpoint, "kjitd's endpoint (default: $KJIT_ENDPOINT, else the user's kjitd)");
  app.add_option("--limit", limit, "At most this many tasks (0: all)")->capture_default_str();
  std::string shard;
  app.add_option("--shard", shard,
                 "With --direct, I/N: only every N-th queued task, from the I-th (0-based). Through kjitd copies "
                 "need no shards: they share the queue through claims");
  int jobs = 1;
  app.add_option("--jobs", jobs, "Keys evaluated at once through kjitd (one per GPU worker of kjitd)")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  app.add_option("--timeout-s", timeout_s, "How long kjitd may take to evaluate one kernel")->capture_default_str();
  app.footer("Without --direct, kjitd must run with an evaluator (a GPU; `kjit daemon status` lists agent_env). kjitd "
             "also tunes queued keys by itself, further than the expert default: this program is for when only "
             "the expert defaults are wanted, now.");
  CLI11_PARSE(app, argc, argv);

  if (!direct) {
#ifdef KJIT_SEED_WITH_TUNER
    if (!shard.empty()) {
      std::fprintf(stderr, "kjit_seed_defaults: --shard is for --direct; through kjitd, copies share the queue "
                           "(or use --jobs)\n");
      return 1;
    }
    return ThroughKjitd(cache_path, endpoint, limit, jobs, timeout_s);
#else
    std::fprintf(stderr, "kjit_seed_defaults: built without LibTorch, so without kjit's tuner; use --direct, or "
                         "let kjitd tune (it does by itself)\n");
    return 1;
#endif
  }
  (void)jobs;
  cache::OpenOptions options;
  options.path = cache_path;
  auto opened = cache::KernelCache::Open(options);
  if (!opened.ok()) {
    std::fprintf(stderr, "kjit_seed_defaults: %s\n", opened.status().ToString().c_str());
    return 1;
  }
  std::unique_ptr<cache::KernelCache> cache = std::move(*opened);
  auto queued = cache->tasks().ListTasks("queued", limit);
  if (!queued.ok()) {
    std::fprintf(stderr, "kjit_seed_defaults: %s\n", queued.status().ToString().c_str());
    return 1;
  }
  std::vector<Task> tasks;
  for (const auto& t : *queued) tasks.push_back({t.key_bytes, ""});
  if (!shard.empty()) {
    int index = -1, count = 0;
    if (std::sscanf(shard.c_str(), "%d/%d", &index, &count) != 2 || count < 1 || index < 0 || index >= count) {
      std::fprintf(stderr, "kjit_seed_defaults: --shard takes I/N with 0 <= I < N, not '%s'\n", shard.c_str());
      return 1;
    }
    std::vector<Task> mine;
    for (size_t i = static_cast<size_t>(index); i < tasks.size(); i += static_cast<size_t>(count)) mine.push_back(tasks[i]);
    tasks = std::move(mine);
  }
  if (tasks.empty()) std::printf("no queued tasks (run a program under `kjit run` first)\n");
  for (const Task& t : tasks) {
    auto key = OpKey::Decode(t.key_bytes);
    if (!key.ok()) {
      std::printf("(undecodable key): %s\n", key.status().ToString().c_str());
      continue;
    }
    std::printf("%s: %s\n", key->ToString().c_str(), Direct(*cache, *key).c_str());
    std::fflush(stdout);
  }
  return 0;
}
