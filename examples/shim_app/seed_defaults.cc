// kjit_seed_defaults: kernels for the keys a program missed, until the RL
// policy (issue 8) proposes them inside kjitd.
//
// kjitd queues every key the shim reports as a miss, but does not yet propose
// kernels of its own. This program takes the queued tasks and, for each key
// that has a design space, the family's expert-default kernel:
//
//   (default)  submitted through kjitd's agent environment (open_episode,
//              submit_candidate): kjitd's evaluator verifies it against
//              PyTorch on the GPU and times it; a verified kernel that beats
//              PyTorch enters the cache and is announced to running processes.
//   --direct   compiled here with NVRTC and stored as verified WITHOUT being
//              verified or timed. For tests only: they compare every output
//              with eager PyTorch themselves. Needs no kjitd, only NVRTC.
//
// Prints one line per task: the key and what became of its kernel. Exit
// status 0 when every task was handled (whatever the verdicts), 1 on an error.
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "kjit/cache/kernel_cache.h"
#include "kjit/ipc/client.h"
#include "kjit/policy/design_space.h"
#include "kjit/policy/submit.h"
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
  record.status = cache::RecordStatus::kVerified;
  record.status_reason = "stored by kjit_seed_defaults --direct without verification (tests only)";
  auto id = cache.Insert(std::move(record));
  if (!id.ok()) return "not stored: " + id.status().ToString();
  return "stored unverified as record " + std::to_string(*id);
}

// Default: through kjitd's agent environment, which verifies, times and stores.
std::string ThroughKjitd(ipc::Client& client, const OpKey& key) {
  auto observation = client.OpenEpisode(key.Encode());
  if (!observation.ok()) return "no episode: " + observation.status().ToString();
  policy::DeviceFacts facts = policy::DeviceFacts::H200();
  facts.arch = key.arch;
  if (auto it = observation->device.find("sm_count"); it != observation->device.end()) {
    facts.sm_count = std::stoi(it->second);
  }
  std::string what;
  auto candidate = ExpertKernel(key, facts);
  if (!candidate.ok()) {
    what = "skipped: " + candidate.status().message();
  } else {
    // Where the kernel came from, kept with its measurement (and `kjit policy train --measurements` learns from it).
    auto design = ipc::DesignToWire(candidate->design);
    if (auto m = policy::FindFamily(key); m.ok()) design["codegen"] = std::to_string(m->family->codegen_version());
    const ipc::SubmitCandidate submit = policy::SubmitFor(observation->episode_id, *candidate, design);
    auto result = client.SubmitCandidate(submit);
    if (!result.ok()) {
      what = "not evaluated: " + result.status().ToString();
    } else {
      const auto profile = [&result](const char* name) {
        auto it = result->profile.find(name);
        return it == result->profile.end() ? 0.0 : it->second;
      };
      std::string stored = ": not stored";
      if (profile("accepted") > 0) {
        stored = profile("already_stored") > 0
                     ? ": already stored as record " + std::to_string(static_cast<int64_t>(profile("record")))
                     : ": stored";
      }
      char line[256];
      std::snprintf(line, sizeof line, "%s, %.2f us vs PyTorch %.2f us%s", result->verdict.substr(0, 120).c_str(),
                    result->median_us, result->baseline_us, stored.c_str());
      what = line;
    }
  }
  (void)client.CloseEpisode(observation->episode_id);
  return what;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"kjit_seed_defaults: the expert-default kernel for every key kjitd has queued (the stand-in for the "
               "RL policy until it lands)"};
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
                 "I/N: only every N-th queued task, from the I-th (0-based); N copies with I = 0..N-1 share the "
                 "queue, so that kjitd's workers on several GPUs evaluate at once");
  app.add_option("--timeout-s", timeout_s, "How long kjitd may take to evaluate one kernel")->capture_default_str();
  app.footer("Without --direct, kjitd must run with an evaluator (a GPU; `kjit daemon status` lists agent_env).");
  CLI11_PARSE(app, argc, argv);

  std::vector<Task> tasks;
  std::unique_ptr<cache::KernelCache> cache;
  std::unique_ptr<ipc::Client> client;
  if (direct) {
    cache::OpenOptions options;
    options.path = cache_path;
    auto opened = cache::KernelCache::Open(options);
    if (!opened.ok()) {
      std::fprintf(stderr, "kjit_seed_defaults: %s\n", opened.status().ToString().c_str());
      return 1;
    }
    cache = std::move(*opened);
    auto queued = cache->ListTasks("queued", limit);
    if (!queued.ok()) {
      std::fprintf(stderr, "kjit_seed_defaults: %s\n", queued.status().ToString().c_str());
      return 1;
    }
    for (const auto& t : *queued) tasks.push_back({t.key_bytes, ""});
  } else {
    ipc::ClientOptions options;
    options.endpoint = endpoint;
    options.name = "kjit-seed-defaults/0.1";
    options.request_timeout = std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
    client = std::make_unique<ipc::Client>(options);
    auto queued = client->ListTasks("queued", static_cast<uint32_t>(limit));
    if (!queued.ok()) {
      std::fprintf(stderr, "kjit_seed_defaults: %s\n", queued.status().ToString().c_str());
      return 1;
    }
    // ListTasks carries the key's text and hash, not its bytes: the cache file has them.
    cache::OpenOptions read;
    read.path = cache_path;
    read.read_only = true;
    auto opened = cache::KernelCache::Open(read);
    if (!opened.ok()) {
      std::fprintf(stderr, "kjit_seed_defaults: reading the task keys: %s\n", opened.status().ToString().c_str());
      return 1;
    }
    for (const auto& info : *queued) {
      auto task = (*opened)->GetTask(info.id);
      if (task.ok()) tasks.push_back({task->key_bytes, info.key_text});
    }
  }
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
    const std::string what = direct ? Direct(*cache, *key) : ThroughKjitd(*client, *key);
    std::printf("%s: %s\n", key->ToString().c_str(), what.c_str());
    std::fflush(stdout);
  }
  return 0;
}
