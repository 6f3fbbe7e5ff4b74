#include "server.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <future>
#include <set>
#include <thread>
#include <nlohmann/json.hpp>
#include <zmq.hpp>

#include "evaluator_pool.h"
#include "tuner_process.h"
#include "kjit/cache/launch_journal.h"
#include "kjit/ipc/endpoint.h"
#include "kjit/policy/reward.h"
#include "kjit/runtime/compiler.h"
#include "kjit/runtime/driver.h"
#include "kjit/ipc/task_info.h"
#include "kjit/runtime/op_key.h"
#include "kjit/runtime/untrusted_source.h"

namespace kjit::daemon {
namespace {

using Clock = std::chrono::steady_clock;

// A stored kernel as the evaluator takes it, to verify it again (a failure report, an import).
CandidateSpec CandidateOfRecord(const cache::KernelRecord& record) {
  CandidateSpec c;
  c.source = record.source;
  c.entry_point = record.entry_point;
  c.options = record.compile_options;
  c.launch = record.launch;
  c.design = record.design;
  return c;
}

std::string IsoNow() {
  const auto now = std::chrono::system_clock::now();
  const std::time_t t = std::chrono::system_clock::to_time_t(now);
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[96];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
                tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<int>(ms));
  return buf;
}

// Binds an ipc:// endpoint's socket file inside a private directory.
Status PrepareEndpoint(const std::string& endpoint) {
  if (endpoint.rfind("ipc://", 0) != 0) return Status::Ok();
  const std::string path = endpoint.substr(6);
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos || slash == 0) return Status::Ok();
  return ipc::EnsurePrivateRuntimeDir(path.substr(0, slash));
}

}  // namespace

int Log::Rank(const std::string& level) {
  if (level == "error") return 0;
  if (level == "warn") return 1;
  if (level == "debug") return 3;
  return 2;
}

void Log::Write(const char* level, const std::string& event, const std::map<std::string, std::string>& fields) {
  if (Rank(level) > level_) return;
  nlohmann::ordered_json j;
  j["ts"] = IsoNow();
  j["level"] = level;
  j["event"] = event;
  for (const auto& [k, v] : fields) j[k] = v;
  std::fprintf(stderr, "%s\n", j.dump().c_str());
  std::fflush(stderr);
}

namespace {

// Reads Z85 CURVE public keys, one per line; a line starting with '#' is a
// comment ('#' is also a Z85 digit, so it cannot end a line's key).
Result<std::set<std::string>> ReadAuthorizedKeys(const std::string& path) {
  std::ifstream in(path);
  if (!in) return NotFound("cannot read curve_authorized_keys_file " + path);
  std::set<std::string> keys;
  std::string line;
  int number = 0;
  while (std::getline(in, line)) {
    ++number;
    while (!line.empty() && (line.back() == ' ' || line.back() == '\r' || line.back() == '\t')) line.pop_back();
    while (!line.empty() && (line.front() == ' ' || line.front() == '\t')) line.erase(0, 1);
    if (line.empty() || line.front() == '#') continue;
    if (line.size() != 40) {
      return InvalidArgument(path + ":" + std::to_string(number) + ": a CURVE public key is 40 Z85 characters");
    }
    keys.insert(line);
  }
  return keys;
}

// The ZeroMQ authentication (ZAP) handler: admits a CURVE client only if its
// public key is in `allowed`. Runs until the context is shut down.
void ZapLoop(zmq::context_t& ctx, const std::set<std::string>& allowed, Log& log, std::promise<Status>& bound) {
  zmq::socket_t rep(ctx, zmq::socket_type::rep);
  try {
    rep.set(zmq::sockopt::linger, 0);
    rep.bind("inproc://zeromq.zap.01");
  } catch (const zmq::error_t& e) {
    bound.set_value(Status(StatusCode::kIOError, std::string("cannot start CURVE authentication: ") + e.what()));
    return;
  }
  bound.set_value(Status::Ok());
  while (true) {
    std::vector<zmq::message_t> request;
    try {
      do {
        zmq::message_t frame;
        if (!rep.recv(frame)) break;
        request.push_back(std::move(frame));
      } while (request.back().more());
    } catch (const zmq::error_t& e) {
      if (e.num() == ETERM) return;
      continue;
    }
    // Request: version, request id, domain, address, identity, mechanism, client key.
    bool ok = false;
    std::string client = "?";
    if (request.size() >= 7 && request[5].to_string() == "CURVE" && request[6].size() == 32) {
      char z85[41] = {0};
      zmq_z85_encode(z85, static_cast<const uint8_t*>(request[6].data()), 32);
      client = z85;
      ok = allowed.count(client) > 0;
    }
    if (!ok) log.Write("warn", "client_refused", {{"key", client}});
    const std::string request_id = request.size() > 1 ? request[1].to_string() : "";
    try {
      rep.send(zmq::str_buffer("1.0"), zmq::send_flags::sndmore);
      rep.send(zmq::buffer(request_id), zmq::send_flags::sndmore);
      rep.send(zmq::buffer(std::string(ok ? "200" : "400")), zmq::send_flags::sndmore);
      rep.send(zmq::buffer(std::string(ok ? "OK" : "client key not authorized")), zmq::send_flags::sndmore);
      rep.send(zmq::buffer(ok ? client : std::string()), zmq::send_flags::sndmore);
      rep.send(zmq::str_buffer(""), zmq::send_flags::none);
    } catch (const zmq::error_t& e) {
      if (e.num() == ETERM) return;
    }
  }
}

}  // namespace

struct Server::Impl {
  Impl(DaemonConfig c, std::unique_ptr<cache::KernelCache> k, Log& l)
      : config(std::move(c)), cache(std::move(k)), log(l) {}
  ~Impl() {
    // Sockets first, then wake the authentication thread out of its recv.
    router.reset();
    tcp.reset();
    publisher.reset();
    if (zap.joinable()) {
      ctx.shutdown();
      zap.join();
    }
  }
  DaemonConfig config;
  std::unique_ptr<cache::KernelCache> cache;
  Log& log;
  zmq::context_t ctx{1};
  std::optional<zmq::socket_t> router;  // the local endpoint
  std::optional<zmq::socket_t> tcp;     // optional, CURVE only
  std::optional<zmq::socket_t> publisher;
  std::set<std::string> authorized_keys;  // CURVE client keys admitted on tcp
  std::thread zap;                         // the authentication handler, when keys are configured
  std::map<std::string, double> counters;
  Clock::time_point started = Clock::now();
  int64_t announced_up_to = 0;  // highest record id already announced
  Server* owner = nullptr;      // for Handle()

  // The agent environment: episodes over the evaluator workers.
  struct ReplyRoute {
    zmq::socket_t* socket = nullptr;
    std::vector<std::string> frames;  // ROUTER routing frames, then the empty delimiter
    uint64_t id = 0;
  };
  struct Episode {
    std::string key_bytes;
    OpKey key;
    BaselineResult baseline;
    bool ready = false;
  };
  std::unique_ptr<EvaluatorPool> pool;
  std::string pool_error;  // why there is no pool, when there is none
  std::unique_ptr<TunerProcess> tuner;  // works the task queue through the agent environment
  std::map<int64_t, Episode> episodes;
  int64_t next_episode = 1;
  // Set while Serve handles a request, for the handlers that answer later.
  ReplyRoute* current_route = nullptr;
  // The request being handled came over TCP from a client no allow-list named (curve_allow_any_client).
  bool current_read_only = false;

  Status Serve(zmq::socket_t& socket, bool* shutdown);
  void AnnounceNewKernels();
  void Reply(const ReplyRoute& route, const ipc::Body& body);
  ipc::Body OpenEpisode(const ipc::OpenEpisode& r);
  ipc::Body ReportFailure(const ipc::ReportFailure& r);
  void ReverifyDone(int64_t record_id, const std::string& key_bytes, const std::string& why, const Verdict& v);
  // Imported records wait quarantined (cache::kImportedReason) until the evaluator has verified and timed
  // them here; a verified one is stored again with this machine's timing (Record), the import set aside.
  void VerifyImports();
  void ImportVerified(int64_t record_id, const Verdict& v, const WorkerDevice& device);
  std::set<int64_t> imports_in_flight;
  std::set<int64_t> quarantined_not_imports;  // looked at once: an import is always a new record id
  // A process that died during a record's first launch (cache/launch_journal.h): the record goes out of
  // service and is re-verified, as on a client's failure report; a record that kills a second process after
  // passing re-verification is rejected for good, its key queued for a new kernel.
  void HandleLaunchCrashes();
  std::unique_ptr<cache::LaunchJournal> launch_journal;
  bool launch_journal_warned = false;
  void QueueRetune(const std::string& key_bytes, const std::string& detail);
  ipc::Body SubmitCandidate(const ipc::SubmitCandidate& r);
  // Stores the measurement, and an accepted kernel's record: returns the record that holds the kernel
  // (0: none), and whether it was already there.
  struct Stored {
    int64_t record = 0;
    bool already = false;
    bool not_better = false;  // verified, but no faster than the key's best on this GPU model: not stored
  };
  Stored Record(const Episode& e, const CandidateSpec& c, const Verdict& v, const WorkerDevice& device,
                const std::map<std::string, std::string>& client_design);
};

Server::Server(DaemonConfig config, std::unique_ptr<cache::KernelCache> cache, Log& log)
    : impl_(std::make_unique<Impl>(std::move(config), std::move(cache), log)) {}

Server::~Server() = default;

Status Server::Bind() {
  Impl& s = *impl_;
  const std::string endpoint = s.config.Get("endpoint");
  const std::string announce = s.config.Get("announce_endpoint");
  KJIT_RETURN_IF_ERROR(PrepareEndpoint(endpoint));
  KJIT_RETURN_IF_ERROR(PrepareEndpoint(announce));
  try {
    s.router.emplace(s.ctx, zmq::socket_type::router);
    // The reply to a shutdown request is sent just before exit: give it time to
    // leave even on a loaded machine (a peer that is gone costs this much at exit).
    s.router->set(zmq::sockopt::linger, 5000);
    // Oversized messages never reach the decoder: ZeroMQ drops the peer instead.
    s.router->set(zmq::sockopt::maxmsgsize, static_cast<int64_t>(ipc::kMaxMessageBytes) + 1024);
    s.router->bind(endpoint);
    s.publisher.emplace(s.ctx, zmq::socket_type::pub);
    s.publisher->set(zmq::sockopt::linger, 0);
    s.publisher->bind(announce);
    const std::string tcp = s.config.Get("tcp_endpoint");
    if (!tcp.empty()) {
      std::ifstream key_file(s.config.Get("curve_secret_key_file"));
      std::string secret;
      std::getline(key_file, secret);
      if (secret.size() != 40) {
        return InvalidArgument("curve_secret_key_file " + s.config.Get("curve_secret_key_file") +
                               " must hold a 40-character Z85 CURVE secret key (make one with `kjit daemon keygen`)");
      }
      const std::string authorized = s.config.Get("curve_authorized_keys_file");
      if (!authorized.empty()) {
        KJIT_ASSIGN_OR_RETURN(s.authorized_keys, ReadAuthorizedKeys(authorized));
        std::promise<Status> bound;
        auto ready = bound.get_future();
        s.zap = std::thread([&s, &bound] { ZapLoop(s.ctx, s.authorized_keys, s.log, bound); });
        KJIT_RETURN_IF_ERROR(ready.get());
      }
      s.tcp.emplace(s.ctx, zmq::socket_type::router);
      s.tcp->set(zmq::sockopt::zap_domain, std::string("kjit"));
      s.tcp->set(zmq::sockopt::linger, 0);
      s.tcp->set(zmq::sockopt::maxmsgsize, static_cast<int64_t>(ipc::kMaxMessageBytes) + 1024);
      s.tcp->set(zmq::sockopt::curve_server, 1);
      s.tcp->set(zmq::sockopt::curve_secretkey, secret);
      s.tcp->bind(tcp);
    }
  } catch (const zmq::error_t& e) {
    return Status(StatusCode::kIOError, std::string("cannot listen: ") + e.what() + " (endpoint " + endpoint + ")");
  }
  auto pool_options = PoolOptionsFromConfig(s.config);
  if (pool_options.ok()) {
    // Workers start in Run: after kjitd has detached and redirected its
    // output, so they inherit neither the start-up pipe nor the terminal.
    s.pool = std::make_unique<EvaluatorPool>(std::move(*pool_options), s.log, s.counters);
  } else {
    s.pool_error = "no evaluator: " + pool_options.status().ToString();
    s.log.Write("warn", "evaluator_unavailable", {{"reason", s.pool_error}});
  }
  // Kernels already in the cache were announced by an earlier run, or never need to be.
  cache::ListFilter newest;
  newest.limit = 1;
  newest.sort = cache::ListFilter::SortBy::kCreated;
  if (auto last = s.cache->List(newest); last.ok() && !last->empty()) s.announced_up_to = (*last)[0].id;
  return Status::Ok();
}

void Server::Impl::AnnounceNewKernels() {
  cache::ListFilter f;
  f.status = cache::RecordStatus::kVerified;
  f.after_id = announced_up_to;
  f.sort = cache::ListFilter::SortBy::kCreated;
  f.descending = false;
  auto fresh = cache->List(f);
  if (!fresh.ok()) {
    log.Write("warn", "announce_scan_failed", {{"error", fresh.status().ToString()}});
    return;
  }
  for (const auto& r : *fresh) {
    ipc::Announce a{r.arch, r.key_hash.ToHex(), r.id};
    const std::string topic = ipc::AnnounceTopic(a);
    const std::string bytes = ipc::Encode(ipc::Envelope{ipc::kProtocolVersion, 0, a});
    try {
      publisher->send(zmq::buffer(topic), zmq::send_flags::sndmore);
      publisher->send(zmq::buffer(bytes), zmq::send_flags::none);
    } catch (const zmq::error_t&) {
    }
    counters["kernels_announced"] += 1;
    log.Write("info", "kernel_announced", {{"record", std::to_string(r.id)}, {"key", r.key_text}});
    announced_up_to = std::max(announced_up_to, r.id);
  }
}

ipc::Body Server::Handle(const ipc::Body& request, bool* shutdown_requested) {
  Impl& s = *impl_;
  auto fail = [&](const Status& st) -> ipc::Body {
    s.counters["errors"] += 1;
    return ipc::ToError(st);
  };
  return std::visit(
      [&](const auto& r) -> ipc::Body {
        using T = std::decay_t<decltype(r)>;
        // A read-only client (over TCP, admitted by curve_allow_any_client) looks up kernels and reports what
        // it ran; it cannot queue or prioritise work, run code on the GPU, take records out of service or stop
        // kjitd.
        constexpr bool kWrites = std::is_same_v<T, ipc::Shutdown> || std::is_same_v<T, ipc::SubmitTask> ||
                                 std::is_same_v<T, ipc::ReportFailure> || std::is_same_v<T, ipc::OpenEpisode> ||
                                 std::is_same_v<T, ipc::SubmitCandidate> || std::is_same_v<T, ipc::CloseEpisode>;
        if constexpr (kWrites) {
          if (s.current_read_only) {
            s.counters["requests_refused_read_only"] += 1;
            return fail(Status(StatusCode::kPermissionDenied,
                               std::string(ipc::TypeName(r)) + " is not allowed to a client that no "
                               "curve_authorized_keys_file names (kjitd admits it read-only)"));
          }
        }
        if constexpr (std::is_same_v<T, ipc::Hello>) {
          s.log.Write("info", "client_hello", {{"client", r.client}, {"pid", std::to_string(r.pid)}});
          ipc::HelloReply h;
          h.server = "kjitd/0.1";
          h.capabilities = {"lookup",       "report_miss", "report_failure", "report_activity",
                            "report_uses",  "tasks",       "stats",          "announce"};
          if (s.pool && s.pool->Available().ok()) h.capabilities.push_back("agent_env");
          h.announce_endpoint = s.config.Get("announce_endpoint");
          return h;
        } else if constexpr (std::is_same_v<T, ipc::Lookup>) {
          auto key = OpKey::Decode(r.key_bytes);
          if (!key.ok()) return fail(key.status());
          cache::ReaderContext reader{r.arch, {r.driver_version, r.nvrtc_major, r.nvrtc_minor, r.codegen_version},
                                      r.device_model.value_or(""), r.torch_version.value_or("")};
          auto served = s.cache->Lookup(key->Hash(), reader);
          ipc::LookupReply reply;
          if (!served.ok()) {
            if (served.status().code() != StatusCode::kNotFound) return fail(served.status());
            s.counters["lookup_misses"] += 1;
            reply.reason = served.status().message();
            return reply;
          }
          s.counters["lookup_hits"] += 1;
          reply.found = true;
          reply.record_id = served->id;
          reply.cubin = std::move(served->cubin);
          reply.entry_point = std::move(served->entry_point);
          for (int i = 0; i < 3; ++i) {
            reply.grid[i] = served->launch.grid[i];
            reply.block[i] = served->launch.block[i];
          }
          reply.dynamic_shared_bytes = served->launch.dynamic_shared_bytes;
          if (served->launch.workspace_bytes != 0) reply.workspace_bytes = served->launch.workspace_bytes;
          return reply;
        } else if constexpr (std::is_same_v<T, ipc::ReportMiss>) {
          auto merged = s.cache->tasks().AddMiss(r.key_bytes, r.calls, r.observed_us);
          if (!merged.ok()) return fail(merged.status());
          s.counters["misses_reported"] += 1;
          s.counters[merged->merged ? "tasks_merged" : "tasks_created"] += 1;
          return ipc::TaskAck{merged->task_id, merged->merged};
        } else if constexpr (std::is_same_v<T, ipc::SubmitTask>) {
          auto merged = s.cache->tasks().SubmitTask(r.key_bytes, r.priority, r.detail);
          if (!merged.ok()) return fail(merged.status());
          s.counters["tasks_submitted"] += 1;
          s.log.Write("info", "task_submitted", {{"task", std::to_string(merged->task_id)}});
          return ipc::TaskAck{merged->task_id, merged->merged};
        } else if constexpr (std::is_same_v<T, ipc::TaskStatus>) {
          auto t = s.cache->tasks().GetTask(r.task_id);
          if (!t.ok()) return fail(t.status());
          return ipc::TaskStatusReply{ipc::ToTaskInfo(*t)};
        } else if constexpr (std::is_same_v<T, ipc::ListTasks>) {
          // A reply holds at most kMaxCollectionSize tasks, or no client could decode it.
          const uint32_t cap = static_cast<uint32_t>(ipc::kMaxCollectionSize);
          auto ts = s.cache->tasks().ListTasks(r.state, static_cast<int>(r.limit == 0 ? cap : std::min(r.limit, cap)));
          if (!ts.ok()) return fail(ts.status());
          ipc::ListTasksReply reply;
          for (const auto& t : *ts) reply.tasks.push_back(ipc::ToTaskInfo(t));
          return reply;
        } else if constexpr (std::is_same_v<T, ipc::Stats>) {
          ipc::StatsReply reply;
          reply.counters = s.counters;
          reply.counters["uptime_s"] = std::chrono::duration<double>(Clock::now() - s.started).count();
          reply.counters["pid"] = static_cast<double>(getpid());
          if (s.pool) {
            reply.counters["trials_queued"] = static_cast<double>(s.pool->queued());
            // "evaluators_ready": 1 and so on, one count per worker state.
            for (const auto& [k, v] : s.pool->Describe()) {
              if (k.size() > 6 && k.compare(k.size() - 6, 6, ".state") == 0) reply.counters["evaluators_" + v] += 1;
            }
            reply.evaluators = s.pool->Workers();
          }
          if (auto tasks = s.cache->tasks().ListTasks(); tasks.ok()) {
            reply.counters["tasks_queued"] = 0;
            for (const auto& t : *tasks) reply.counters["tasks_" + t.state] += 1;
          }
          reply.counters["tuner_running"] = s.tuner && s.tuner->pid() > 0 ? 1 : 0;
          if (s.tuner && s.tuner->pid() > 0) reply.counters["tuner_pid"] = static_cast<double>(s.tuner->pid());
          return reply;
        } else if constexpr (std::is_same_v<T, ipc::Shutdown>) {
          s.log.Write("info", "shutdown_requested");
          *shutdown_requested = true;
          return ipc::Ack{};
        } else if constexpr (std::is_same_v<T, ipc::ReportFailure>) {
          ipc::Body reply = s.ReportFailure(r);
          if (std::holds_alternative<ipc::Error>(reply)) s.counters["errors"] += 1;
          return reply;
        } else if constexpr (std::is_same_v<T, ipc::ReportUses>) {
          std::vector<cache::UseReport> uses;
          for (const ipc::KeyUse& u : r.uses) {
            auto hash = Hash128::FromHex(u.key_hash);
            if (!hash.ok()) return fail(InvalidArgument("report_uses: key_hash \"" + u.key_hash.substr(0, 40) +
                                                        "\" is not 32 hex digits"));
            uses.push_back(cache::UseReport{*hash, u.record_id, u.hits, u.misses, ""});
          }
          std::optional<cache::RunInfo> run;
          if (r.run_id && !r.run_id->empty()) {
            if (r.run_id->size() > ipc::kMaxRunIdText)
              return fail(InvalidArgument("report_uses: run_id is longer than " +
                                          std::to_string(ipc::kMaxRunIdText) + " bytes"));
            run = cache::RunInfo{*r.run_id, r.pid, r.program.value_or("").substr(0, ipc::kMaxProgramText),
                                 r.started_unix_ms.value_or(0)};
          }
          if (Status st = s.cache->RecordUses(uses, run ? &*run : nullptr); !st.ok()) return fail(st);
          s.counters["use_reports"] += 1;
          return ipc::Ack{};
        } else if constexpr (std::is_same_v<T, ipc::ReportActivity>) {
          s.counters["client_activity_reports"] += 1;
          if (s.pool) s.pool->NoteClientActivity(r.devices, r.pid);
          return ipc::Ack{};
        } else if constexpr (std::is_same_v<T, ipc::OpenEpisode>) {
          return s.OpenEpisode(r);
        } else if constexpr (std::is_same_v<T, ipc::SubmitCandidate>) {
          return s.SubmitCandidate(r);
        } else if constexpr (std::is_same_v<T, ipc::CloseEpisode>) {
          if (s.episodes.erase(r.episode_id) == 0) {
            return fail(NotFound("no open episode " + std::to_string(r.episode_id)));
          }
          return ipc::Ack{};
        } else {
          return fail(InvalidArgument(std::string("kjitd does not accept ") + std::string(ipc::TypeName(r)) +
                                      " as a request"));
        }
      },
      request);
}

Status Server::Impl::Serve(zmq::socket_t& socket, bool* shutdown) {
  // ROUTER frames: [peer identity][empty delimiter][envelope].
  std::vector<zmq::message_t> frames;
  while (true) {
    zmq::message_t frame;
    if (!socket.recv(frame, zmq::recv_flags::dontwait)) break;
    const bool more = frame.more();
    frames.push_back(std::move(frame));
    if (!more) break;
  }
  if (frames.size() < 2) return Status::Ok();
  counters["requests"] += 1;
  const zmq::message_t& payload = frames.back();
  uint64_t id = 0;
  auto envelope = ipc::Decode(std::string_view(static_cast<const char*>(payload.data()), payload.size()), &id);
  ipc::Body reply;
  ReplyRoute route{&socket, {}, id};
  for (size_t i = 0; i + 1 < frames.size(); ++i) route.frames.push_back(frames[i].to_string());
  if (!envelope.ok()) {
    counters["malformed"] += 1;
    log.Write("warn", "malformed_request", {{"error", envelope.status().message()}});
    reply = ipc::ToError(envelope.status());
  } else {
    counters[std::string("requests_") + std::string(ipc::TypeName(envelope->body))] += 1;
    current_route = &route;
    current_read_only = tcp && &socket == &*tcp && authorized_keys.empty();
    reply = owner->Handle(envelope->body, shutdown);
    current_route = nullptr;
    current_read_only = false;
    // A handler that answers later takes the route and clears route.socket.
    if (std::holds_alternative<ipc::Ack>(reply) && route.socket == nullptr) return Status::Ok();
  }
  Reply(route, reply);
  return Status::Ok();
}

void Server::Impl::Reply(const ReplyRoute& route, const ipc::Body& reply) {
  const uint64_t id = route.id;
  std::string bytes = ipc::Encode(ipc::Envelope{ipc::kProtocolVersion, id, reply});
  if (bytes.size() > ipc::kMaxMessageBytes) {
    counters["errors"] += 1;
    bytes = ipc::Encode(ipc::Envelope{
        ipc::kProtocolVersion, id,
        ipc::ToError(Status(StatusCode::kInternal, "the reply would exceed the protocol's message size limit"))});
  }
  try {
    for (const std::string& f : route.frames) route.socket->send(zmq::buffer(f), zmq::send_flags::sndmore);
    route.socket->send(zmq::buffer(bytes), zmq::send_flags::dontwait);
  } catch (const zmq::error_t& e) {
    log.Write("warn", "reply_failed", {{"error", e.what()}});
  }
}

// ---- failure reports: a served kernel failed inside a client

// A re-verification task outranks plain misses: the key is known to be hot
// (it had a kernel that a program used) and its kernel is now out of service.
constexpr int kRetunePriority = 1;

// In a record's status reason: a process died during its first launch (HandleLaunchCrashes).
constexpr const char* kProcessDiedMarker = "a process died during the kernel's first launch";

ipc::Body Server::Impl::ReportFailure(const ipc::ReportFailure& r) {
  auto key = OpKey::Decode(r.key_bytes);
  if (!key.ok()) return ipc::ToError(key.status());
  if (std::find(std::begin(ipc::kFailureStages), std::end(ipc::kFailureStages), r.stage) ==
      std::end(ipc::kFailureStages)) {
    return ipc::ToError(InvalidArgument("report_failure.stage: unknown stage \"" + r.stage.substr(0, 32) +
                                        "\" (expected load, launch or argument)"));
  }
  auto record = cache->Get(r.record_id);
  if (!record.ok()) return ipc::ToError(record.status());
  // A client naming the wrong record must not take another key's kernel out of service.
  if (record->key_hash != key->Hash()) {
    return ipc::ToError(InvalidArgument("record " + std::to_string(r.record_id) + " is not a kernel of " +
                                        key->ToString()));
  }
  counters["failures_reported"] += 1;
  // The reason comes from the client: kept short in the log and the record.
  const std::string reason = r.reason.substr(0, 500);
  log.Write("warn", "kernel_failed_in_client", {{"record", std::to_string(r.record_id)}, {"key", record->key_text},
                                                {"stage", r.stage}, {"reason", reason},
                                                {"status", std::string(cache::RecordStatusName(record->status))}});
  ipc::FailureAck ack;
  ack.reverify = "none";
  // The kernel never ran: the shim could not pass an argument. Its own blacklist is enough.
  if (r.stage == "argument") return ack;
  // Already out of service (another client's report, a failed checksum, rejected): nothing more to do.
  if (record->status != cache::RecordStatus::kVerified) return ack;

  const std::string why = "a client reported a " + r.stage + " failure: " + reason;
  if (Status st = cache->SetStatus(r.record_id, cache::RecordStatus::kQuarantined, why + " (re-verifying)");
      !st.ok()) {
    return ipc::ToError(st);
  }
  counters["records_suspended"] += 1;
  ack.out_of_service = true;
  if (pool && pool->Available(key->arch).ok()) {
    EvaluateRequest request;
    request.key_bytes = r.key_bytes;
    request.candidate = CandidateOfRecord(*record);
    const int64_t id = r.record_id;
    pool->SubmitEvaluate(std::move(request), key->arch,
                         [this, id, key_bytes = r.key_bytes, why](const Verdict& v, const WorkerDevice&) { ReverifyDone(id, key_bytes, why, v); });
    ack.reverify = "started";
    return ack;
  }
  // No evaluator here (no GPU, --when never): the key waits in the queue for one. The record
  // stays out of service until then; a re-run tuning of the key finds it a kernel again.
  auto task = cache->tasks().SubmitTask(r.key_bytes, kRetunePriority, "re-verify record " + std::to_string(r.record_id) + ": " + why);
  if (!task.ok()) {
    log.Write("warn", "reverify_not_queued", {{"record", std::to_string(r.record_id)}, {"error", task.status().ToString()}});
  } else {
    ack.task_id = task->task_id;
  }
  ack.reverify = "queued";
  return ack;
}

void Server::Impl::ReverifyDone(int64_t record_id, const std::string& key_bytes, const std::string& why,
                                const Verdict& v) {
  const bool verified = v.outcome == policy::OutcomeName(policy::Outcome::kVerified);
  auto record = cache->Get(record_id);
  if (!record.ok() || record->status != cache::RecordStatus::kQuarantined) {
    // Removed, or its status changed by hand meanwhile: that decision stands.
    log.Write("info", "reverify_result_unused", {{"record", std::to_string(record_id)}, {"outcome", v.outcome}});
    return;
  }
  if (verified) {
    // The kernel is sound on the evaluator: the client's failure was its own (a context, memory).
    if (Status st = cache->SetStatus(record_id, cache::RecordStatus::kVerified, "re-verified after " + why); !st.ok()) {
      log.Write("warn", "reverify_not_stored", {{"record", std::to_string(record_id)}, {"error", st.ToString()}});
      return;
    }
    counters["records_reverified"] += 1;
    log.Write("info", "record_reverified", {{"record", std::to_string(record_id)}});
    return;
  }
  if (v.outcome == policy::OutcomeName(policy::Outcome::kResourceBackoff)) {
    // Not the kernel's fault, but not a verdict either: it stays out of service, its key queued.
    QueueRetune(key_bytes, "re-verify record " + std::to_string(record_id) + " (the evaluator was busy): " + why);
    return;
  }
  const std::string verdict = v.outcome + ": " + v.reason.substr(0, 300);
  if (Status st = cache->SetStatus(record_id, cache::RecordStatus::kRejected,
                                   "failed re-verification (" + verdict + ") after " + why);
      !st.ok()) {
    log.Write("warn", "reverify_not_stored", {{"record", std::to_string(record_id)}, {"error", st.ToString()}});
  }
  counters["records_rejected"] += 1;
  log.Write("warn", "record_rejected", {{"record", std::to_string(record_id)}, {"verdict", verdict}});
  QueueRetune(key_bytes, "record " + std::to_string(record_id) + " failed re-verification: find a new kernel");
}

void Server::Impl::HandleLaunchCrashes() {
  if (!launch_journal) launch_journal = std::make_unique<cache::LaunchJournal>(cache::LaunchJournalDir(cache->path()));
  auto abandoned = launch_journal->Abandoned();
  if (!abandoned.ok()) {
    if (!launch_journal_warned) log.Write("warn", "launch_journal_unreadable", {{"error", abandoned.status().ToString()}});
    launch_journal_warned = true;
    return;
  }
  for (const cache::LaunchJournalEntry& e : *abandoned) {
    auto record = cache->Get(e.record_id);
    if (!record.ok()) {
      (void)launch_journal->Remove(e);  // removed from the cache meanwhile: nothing to take out of service
      continue;
    }
    counters["launch_crashes"] += 1;
    const std::string reason = std::string(kProcessDiedMarker) + " (pid " + std::to_string(e.pid) + ")";
    log.Write("warn", "kernel_killed_a_process", {{"record", std::to_string(e.record_id)}, {"key", record->key_text},
                                                  {"pid", std::to_string(e.pid)}});
    if (record->status == cache::RecordStatus::kVerified &&
        record->status_reason.find(kProcessDiedMarker) != std::string::npos) {
      // It passed re-verification after killing a process, and killed another: the evaluator cannot see
      // what goes wrong, so the record is never served again.
      if (Status st = cache->SetStatus(e.record_id, cache::RecordStatus::kRejected, reason + ", a second time");
          !st.ok()) {
        log.Write("warn", "launch_crash_not_stored", {{"record", std::to_string(e.record_id)}, {"error", st.ToString()}});
        continue;  // the entry stays: the shim keeps refusing the record, and the next pass tries again
      }
      counters["records_rejected"] += 1;
      QueueRetune(record->key_bytes, "record " + std::to_string(e.record_id) + " killed two processes: find a new kernel");
    } else {
      const ipc::Body reply = ReportFailure(ipc::ReportFailure{record->key_bytes, e.record_id, "launch", reason});
      if (std::holds_alternative<ipc::Error>(reply)) {
        log.Write("warn", "launch_crash_not_stored",
                  {{"record", std::to_string(e.record_id)}, {"error", std::get<ipc::Error>(reply).message}});
        continue;
      }
    }
    if (Status st = launch_journal->Remove(e); !st.ok()) log.Write("warn", "launch_journal_entry_kept", {{"error", st.ToString()}});
  }
}

void Server::Impl::VerifyImports() {
  if (!pool) return;
  cache::ListFilter quarantined;
  quarantined.status = cache::RecordStatus::kQuarantined;
  auto records = cache->List(quarantined);
  if (!records.ok()) return;
  for (const cache::RecordSummary& summary : *records) {
    if (imports_in_flight.count(summary.id) != 0 || quarantined_not_imports.count(summary.id) != 0 ||
        !pool->Available(summary.arch).ok()) {
      continue;
    }
    auto record = cache->Get(summary.id);
    if (!record.ok()) continue;
    if (record->status_reason.rfind(cache::kImportedReason, 0) != 0) {
      quarantined_not_imports.insert(summary.id);  // not read again every watch interval
      continue;
    }
    EvaluateRequest request;
    request.key_bytes = record->key_bytes;
    request.candidate = CandidateOfRecord(*record);
    const int64_t id = summary.id;
    imports_in_flight.insert(id);
    counters["imports_verifying"] += 1;
    log.Write("info", "import_verifying", {{"record", std::to_string(id)}, {"key", record->key_text}});
    pool->SubmitEvaluate(std::move(request), summary.arch,
                         [this, id](const Verdict& v, const WorkerDevice& device) { ImportVerified(id, v, device); });
  }
}

void Server::Impl::ImportVerified(int64_t record_id, const Verdict& v, const WorkerDevice& device) {
  imports_in_flight.erase(record_id);
  auto record = cache->Get(record_id);
  if (!record.ok() || record->status != cache::RecordStatus::kQuarantined ||
      record->status_reason.rfind(cache::kImportedReason, 0) != 0) {
    return;  // removed or decided by hand meanwhile
  }
  if (v.outcome == policy::OutcomeName(policy::Outcome::kResourceBackoff)) return;  // the next pass tries again
  auto key = OpKey::Decode(record->key_bytes);
  if (!key.ok()) return;
  std::string reason;
  if (v.outcome != policy::OutcomeName(policy::Outcome::kVerified)) {
    reason = "failed verification here (" + v.outcome + ": " + v.reason.substr(0, 300) + ")";
    counters["imports_rejected"] += 1;
  } else if (!v.accepted) {
    reason = "verified here but not faster than PyTorch's kernel on this GPU";
    counters["imports_rejected"] += 1;
  } else {
    // Stored anew with this machine's timing and device, through the path every trial takes.
    Episode e;
    e.key_bytes = record->key_bytes;
    e.key = *key;
    const Stored stored = Record(e, CandidateOfRecord(*record), v, device, {});
    reason = stored.record == 0      ? std::string("verified here, but it could not be stored (kjitd's log says why)")
             : stored.not_better ? "verified here, but record " + std::to_string(stored.record) + " is faster"
                                 : "verified and timed here as record " + std::to_string(stored.record);
    counters["imports_verified"] += 1;
  }
  // The imported copy, with the file's claims, is never served.
  (void)cache->SetStatus(record_id, cache::RecordStatus::kRejected, "import: " + reason);
  log.Write("info", "import_verified", {{"record", std::to_string(record_id)}, {"result", reason}});
}

void Server::Impl::QueueRetune(const std::string& key_bytes, const std::string& detail) {
  if (auto task = cache->tasks().SubmitTask(key_bytes, kRetunePriority, detail); !task.ok()) {
    log.Write("warn", "retune_not_queued", {{"error", task.status().ToString()}});
  }
}

// ---- the agent environment

ipc::Body Server::Impl::OpenEpisode(const ipc::OpenEpisode& r) {
  if (!pool) return ipc::ToError(Status(StatusCode::kUnavailable, pool_error));
  auto key = OpKey::Decode(r.key_bytes);
  if (!key.ok()) return ipc::ToError(key.status());
  if (Status st = pool->Available(key->arch); !st.ok()) return ipc::ToError(st);
  const int64_t episode_id = next_episode++;
  Episode& e = episodes[episode_id];
  e.key_bytes = r.key_bytes;
  e.key = *key;
  ReplyRoute route = *current_route;
  current_route->socket = nullptr;
  BaselineRequest request;
  request.key_bytes = r.key_bytes;
  pool->SubmitBaseline(std::move(request), key->arch, [this, episode_id, route](const BaselineResult& b,
                                                                                 const WorkerDevice& device) {
    auto it = episodes.find(episode_id);
    if (!b.error_code.empty() || it == episodes.end()) {
      if (it != episodes.end()) episodes.erase(it);
      if (b.unfit) {
        // The key can never fit this GPU's memory: not retryable, and marked so a client can tell it apart.
        const std::string why = b.error.rfind("unfit: ", 0) == 0 ? b.error : "unfit: " + b.error;
        Reply(route, ipc::ToError(Status(StatusCode::kInvalidArgument, why)));
        return;
      }
      const StatusCode code = b.backoff ? StatusCode::kUnavailable : StatusCode::kInvalidArgument;
      Reply(route, ipc::ToError(Status(code, "cannot measure PyTorch's kernel for this key: " + b.error)));
      return;
    }
    Episode& ep = it->second;
    ep.baseline = b;
    ep.ready = true;
    ipc::Observation o;
    o.episode_id = episode_id;
    o.key_text = ep.key.ToString();
    o.op = ep.key.OpName();
    // A chain's inputs are its calls' arguments that are no earlier call's output, in order.
    for (const OpCall& call : ep.key.calls) {
      for (const Arg& a : call.args) {
        if (std::holds_alternative<ValueRef>(a)) continue;
        OpKey one = OpKey::Single("x", "", {a}, ep.key.arch);
        std::string text = one.ToString();
        const size_t open = text.find('('), close = text.rfind(')');
        o.inputs.push_back(open != std::string::npos && close != std::string::npos
                               ? text.substr(open + 1, close - open - 1)
                               : text);
      }
    }
    o.baseline_us = b.timing.median_us;
    o.device["baseline_spread_us"] = std::to_string(b.timing.spread_us);
    o.device["floor_us"] = std::to_string(b.roofline.floor_us);
    o.device["bytes"] = std::to_string(static_cast<uint64_t>(b.roofline.bytes));
    std::string outputs;
    for (const std::string& out : b.outputs) outputs += (outputs.empty() ? "" : ", ") + out;
    o.device["outputs"] = outputs;
    o.device["arch"] = std::to_string(ep.key.arch);
    o.device["name"] = device.name;
    o.device["uuid"] = device.uuid;
    o.device["sm_count"] = std::to_string(device.sm_count);
    o.device["sm_clock_khz"] = std::to_string(device.sm_clock_khz);
    o.device["l2_bytes"] = std::to_string(device.l2_bytes);
    o.device["copy_bandwidth_bytes_per_s"] = std::to_string(static_cast<uint64_t>(device.copy_bandwidth_bytes_per_s));
    o.device["kernel_abi"] =
        "2: input tensor pointers in argument order (null for None), then output pointers, then (only when "
        "workspace_bytes > 0) the workspace pointer: zeroed bytes the kernel must leave zeroed";
    log.Write("info", "episode_opened", {{"episode", std::to_string(episode_id)}, {"key", o.key_text},
                                          {"baseline_us", std::to_string(o.baseline_us)}});
    Reply(route, o);
  });
  return ipc::Ack{};
}

ipc::Body Server::Impl::SubmitCandidate(const ipc::SubmitCandidate& r) {
  auto it = episodes.find(r.episode_id);
  if (it == episodes.end() || !it->second.ready) {
    return ipc::ToError(NotFound("no open episode " + std::to_string(r.episode_id) + " (open_episode first)"));
  }
  if (!pool) return ipc::ToError(Status(StatusCode::kUnavailable, pool_error));
  // NVRTC reads files (#include, --pre-include, -I): a submission may name only its built-in headers, and the
  // reply carries no compile log for a refused one (runtime/untrusted_source.h).
  if (Status st = CheckUntrustedCandidate(r.source, r.options); !st.ok()) {
    counters["candidates_refused"] += 1;
    return ipc::ToError(st.WithContext("submit_candidate refused"));
  }
  EvaluateRequest request;
  request.key_bytes = it->second.key_bytes;
  CandidateSpec& c = request.candidate;
  c.source = r.source;
  c.entry_point = r.entry_point;
  c.options = r.options;
  for (int i = 0; i < 3; ++i) {
    c.launch.grid[i] = r.grid[i];
    c.launch.block[i] = r.block[i];
  }
  c.launch.dynamic_shared_bytes = r.dynamic_shared_bytes;
  c.launch.workspace_bytes = r.workspace_bytes.value_or(0);
  // Where the client says the kernel came from (family, policy version, knobs); else an anonymous agent's.
  if (r.design.has_value()) c.design = ipc::DesignFromWire(*r.design);
  if (c.design.family.empty()) c.design.family = "agent";
  if (c.design.policy_version.empty()) c.design.policy_version = "external-agent";
  // The client's guess at its next candidates: the worker compiles them while it runs this one.
  if (r.compile_ahead) {
    for (const auto& entry : *r.compile_ahead) {
      if (entry.empty() || request.compile_ahead.size() >= ipc::kMaxCompileAhead) continue;
      std::vector<std::string> options(entry.begin() + 1, entry.end());
      if (!CheckUntrustedCandidate(entry[0], options).ok()) continue;  // never compiled: its log could leak a file
      request.compile_ahead.push_back({entry[0], std::move(options)});
    }
    counters["compile_ahead_sent"] += static_cast<double>(request.compile_ahead.size());
  }
  ReplyRoute route = *current_route;
  current_route->socket = nullptr;
  const int64_t episode_id = r.episode_id;
  const int arch = it->second.key.arch;
  const std::map<std::string, std::string> client_design = r.design.value_or(std::map<std::string, std::string>{});
  pool->SubmitEvaluate(std::move(request), arch, [this, route, episode_id, c, client_design](const Verdict& v,
                                                                                              const WorkerDevice& device) {
    ipc::CandidateResult result;
    result.compiled = v.compiled;
    result.compile_log = v.compile_log;
    result.verified = v.outcome == policy::OutcomeName(policy::Outcome::kVerified);
    result.verdict = v.outcome + ": " + v.reason;
    result.median_us = v.timing.median_us;
    result.baseline_us = v.baseline.median_us;
    result.reward = v.reward;
    result.profile = {{"registers", v.resources.registers},
                      {"spill_bytes", v.resources.spill_bytes},
                      {"local_bytes", v.resources.local_bytes},
                      {"static_shared_bytes", v.resources.static_shared_bytes},
                      {"compile_ms", v.compile_ms},
                      {"compile_wait_ms", v.compile_wait_ms},
                      {"compile_cached", v.compile_cached ? 1.0 : 0.0},
                      {"evaluation_ms", v.total_ms},
                      {"runs", v.timing.runs},
                      {"spread_us", v.timing.spread_us},
                      {"baseline_spread_us", v.baseline.spread_us},
                      {"floor_us", v.roofline.floor_us},
                      {"bandwidth_fraction", v.roofline.bandwidth_fraction},
                      {"flop_fraction", v.roofline.flop_fraction},
                      {"accepted", v.accepted ? 1.0 : 0.0}};
    auto e = episodes.find(episode_id);
    if (e != episodes.end()) {
      const Stored stored = Record(e->second, c, v, device, client_design);
      if (stored.not_better) {
        result.profile["accepted"] = 0.0;
        result.profile["best_record"] = static_cast<double>(stored.record);
      } else if (stored.record > 0) {
        result.profile["record"] = static_cast<double>(stored.record);
        result.profile["already_stored"] = stored.already ? 1.0 : 0.0;
      }
    }
    log.Write("info", "trial", {{"episode", std::to_string(episode_id)}, {"outcome", v.outcome},
                                 {"reason", v.reason.substr(0, 300)}, {"median_us", std::to_string(v.timing.median_us)},
                                 {"baseline_us", std::to_string(v.baseline.median_us)},
                                 {"accepted", v.accepted ? "yes" : "no"}, {"total_ms", std::to_string(v.total_ms)},
                                 {"gpu", device.uuid}});
    Reply(route, result);
  });
  return ipc::Ack{};
}

Server::Impl::Stored Server::Impl::Record(const Episode& e, const CandidateSpec& c, const Verdict& v,
                                          const WorkerDevice& device,
                                          const std::map<std::string, std::string>& client_design) {
  if (v.outcome == policy::OutcomeName(policy::Outcome::kResourceBackoff)) return {};
  cache::Measurement m;
  m.key_hash = e.key.Hash();
  m.key_bytes = e.key_bytes;
  m.design = c.design;
  m.outcome = v.outcome == policy::OutcomeName(policy::Outcome::kVerified) && !v.accepted ? "slower" : v.outcome;
  m.median_us = v.timing.median_us;
  m.baseline_us = v.baseline.median_us;
  m.reward = v.reward;
  // The profile beside the reason, for the policy's features.
  nlohmann::json detail = {{"reason", v.reason.substr(0, 2000)},
                           {"registers", v.resources.registers},
                           {"spill_bytes", v.resources.spill_bytes},
                           {"static_shared_bytes", v.resources.static_shared_bytes},
                           {"spread_us", v.timing.spread_us},
                           {"baseline_spread_us", v.baseline.spread_us},
                           {"floor_us", v.roofline.floor_us},
                           {"bandwidth_fraction", v.roofline.bandwidth_fraction},
                           {"compile_ms", v.compile_ms},
                           {"compile_wait_ms", v.compile_wait_ms},
                           {"evaluation_ms", v.total_ms},
                           {"launch", {c.launch.grid[0], c.launch.grid[1], c.launch.grid[2], c.launch.block[0],
                                       c.launch.block[1], c.launch.block[2], c.launch.dynamic_shared_bytes}}};
  // What the client said of the kernel's origin, whole (e.g. the generator's codegen version, which the
  // RL policy's training needs to tell current measurements from stale ones).
  if (!client_design.empty()) detail["client_design"] = client_design;
  if (c.launch.workspace_bytes != 0) detail["workspace_bytes"] = c.launch.workspace_bytes;
  // The GPU model that timed it: times of one key compare only within a model (an H100 and an H200 share sm_90).
  if (!device.name.empty()) detail["gpu_model"] = device.name;
  m.detail = detail.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  if (auto id = cache->measurements().AddMeasurement(m); !id.ok()) {
    log.Write("warn", "measurement_not_stored", {{"error", id.status().ToString()}});
  }
  if (!v.accepted) return {};
  cache::KernelRecord rec;
  rec.key_bytes = e.key_bytes;
  rec.source = c.source;
  rec.compile_options = c.options;
  rec.entry_point = c.entry_point;
  rec.cubin = v.cubin;
  rec.launch = c.launch;
  rec.design = c.design;
  // The GPU that timed it, by model and UUID: any GPU of the arch may serve it, but its times are this one's
  // (an H100 and an H200 share sm_90 and rank memory-bound kernels differently).
  const std::string timed_on = device.name + (device.uuid.empty() ? "" : (device.name.empty() ? "" : " ") + device.uuid);
  rec.timing = {v.timing.median_us, v.timing.spread_us, v.timing.runs, timed_on, device.sm_clock_khz,
                device.memory_clock_khz};
  rec.baseline = {v.baseline.median_us, v.baseline.spread_us, v.baseline.runs, timed_on, device.sm_clock_khz,
                  device.memory_clock_khz};
  rec.verification = v.verification;
  rec.toolchain = cache::RunningToolchain();
  rec.torch_version = device.torch_version;  // the worker's PyTorch, whose kernels it was verified against
  rec.status = cache::RecordStatus::kVerified;
  // Which GPU verified it: any GPU of the arch may serve it, and on a host of several that is worth knowing.
  rec.status_reason = "verified against PyTorch" + (device.uuid.empty() ? std::string() : " on " + device.uuid) + ", " +
                      std::to_string(v.baseline.median_us / v.timing.median_us) + "x faster";
  // The same kernel again (an agent or the seeder resubmitting it): the record that holds it stands. A
  // second copy would only grow the cache and send every running process an announcement to weigh.
  auto same = cache->FindVerified(rec);
  if (!same.ok()) log.Write("warn", "duplicate_check_failed", {{"error", same.status().ToString()}});
  if (same.ok() && *same > 0) {
    counters["kernels_already_stored"] += 1;
    log.Write("info", "kernel_already_stored",
              {{"record", std::to_string(*same)}, {"key", e.key.ToString()}, {"gpu", device.uuid}});
    return {*same, true};
  }
  // Only a kernel faster than the key's best on this GPU model by policy::kStoreMargin enters the cache
  // (72 records for 15 keys before this rule, 2026-12-05).
  auto best = cache->BestVerified(e.key.Hash(), cache::TimedModel(timed_on), device.torch_version);
  if (!best.ok()) log.Write("warn", "best_kernel_check_failed", {{"error", best.status().ToString()}});
  if (best.ok() && best->id > 0 && !policy::ReplacesStored(v.timing.median_us, best->median_us)) {
    counters["kernels_not_better"] += 1;
    log.Write("info", "kernel_not_better",
              {{"best_record", std::to_string(best->id)}, {"best_us", std::to_string(best->median_us)},
               {"median_us", std::to_string(v.timing.median_us)}, {"key", e.key.ToString()}, {"gpu", device.uuid}});
    return {best->id, false, true};
  }
  auto id = cache->Insert(std::move(rec));
  if (!id.ok()) {
    log.Write("warn", "kernel_not_stored", {{"error", id.status().ToString()}});
    return {};
  }
  counters["kernels_verified"] += 1;
  log.Write("info", "kernel_verified", {{"record", std::to_string(*id)}, {"key", e.key.ToString()}, {"gpu", device.uuid}});
  AnnounceNewKernels();
  return {*id, false};
}

Status Server::Run(std::atomic<bool>& stop, std::atomic<bool>& reload, const std::function<void()>& on_reload) {
  Impl& s = *impl_;
  s.owner = this;
  if (s.pool) s.pool->Start();
  // The tuner needs trials, so only where there are evaluator workers (and one job per worker).
  const int workers = s.pool ? static_cast<int>(s.pool->Workers().size()) : 0;
  if (s.pool && workers > 0 && s.pool->Available().ok()) {
    auto tuner_options = TunerOptionsFromConfig(s.config, workers);
    if (!tuner_options.ok()) return tuner_options.status();
    s.tuner = std::make_unique<TunerProcess>(std::move(*tuner_options), s.log, s.counters);
    s.tuner->Start();
  } else {
    s.log.Write("info", "tuner_off", {{"reason", s.pool ? "no evaluator worker can run trials (" +
                                                              s.pool->Available().message() + ")"
                                                        : s.pool_error}});
  }
  const auto watch = std::chrono::milliseconds(std::stoll(s.config.Get("watch_interval_ms")));
  auto next_watch = Clock::now();
  bool shutdown = false;
  // After a shutdown request, kjitd keeps serving briefly so that its reply is
  // read before the connection closes (closing right away lost it now and then
  // on a loaded machine, linger notwithstanding).
  std::optional<Clock::time_point> drain_until;
  while (!stop.load() && !(drain_until && Clock::now() >= *drain_until)) {
    if (shutdown && !drain_until) drain_until = Clock::now() + std::chrono::milliseconds(300);
    if (reload.exchange(false)) on_reload();
    std::vector<zmq::pollitem_t> items = {{static_cast<void*>(*s.router), 0, ZMQ_POLLIN, 0},
                                          {s.tcp ? static_cast<void*>(*s.tcp) : nullptr, -1, ZMQ_POLLIN, 0}};
    const std::vector<int> worker_fds = s.pool ? s.pool->Fds() : std::vector<int>{};
    for (int fd : worker_fds) items.push_back({nullptr, fd, ZMQ_POLLIN, 0});
    try {
      // The tcp slot is polled as an empty item when there is no tcp socket.
      zmq::poll(items.data(), items.size(), std::chrono::milliseconds(100));
    } catch (const zmq::error_t& e) {
      if (e.num() == EINTR) continue;  // a signal: look at the flags
      return Status(StatusCode::kIOError, std::string("poll failed: ") + e.what());
    }
    if (items[0].revents & ZMQ_POLLIN) KJIT_RETURN_IF_ERROR(s.Serve(*s.router, &shutdown));
    if (s.tcp && (items[1].revents & ZMQ_POLLIN)) KJIT_RETURN_IF_ERROR(s.Serve(*s.tcp, &shutdown));
    for (size_t i = 0; i < worker_fds.size(); ++i) {
      if (items[2 + i].revents & (ZMQ_POLLIN | ZMQ_POLLERR)) s.pool->OnReadable(worker_fds[i]);
    }
    if (s.pool) s.pool->Tick();
    if (s.tuner) s.tuner->Tick();
    if (Clock::now() >= next_watch) {
      s.AnnounceNewKernels();
      s.HandleLaunchCrashes();
      s.VerifyImports();
      next_watch = Clock::now() + watch;
    }
  }
  // The tuner first: it finishes its trials in flight while the workers still answer.
  if (s.tuner) s.tuner->Stop();
  return Status::Ok();
}

}  // namespace kjit::daemon
