// A real kjitd in a child process, driven through the client library.
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <zmq.hpp>

#include "kjit/cache/kernel_cache.h"
#include "kjit/ipc/client.h"
#include "kjit/runtime/op_key.h"
#include "kjitd_harness.h"

namespace kjit {
namespace {

using testing::KjitdHarness;

std::string KeyBytes(int64_t cols) {
  return OpKey::Single("aten::_softmax", "", {TensorDesc::Contiguous(DType::kFloat32, {64, cols}), int64_t{-1}, false},
                       90)
      .Encode();
}

ipc::Client MakeClient(const KjitdHarness& h, size_t queue = 4096) {
  ipc::ClientOptions o;
  o.endpoint = h.endpoint();
  // Generous: CI runs these beside other tests on two cores, and nothing here is timed.
  o.request_timeout = std::chrono::milliseconds(10000);
  o.retry_interval = std::chrono::milliseconds(50);
  o.miss_queue_capacity = queue;
  return ipc::Client(o);
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

cache::KernelRecord VerifiedRecord(int64_t cols) {
  cache::KernelRecord r;
  r.key_bytes = KeyBytes(cols);
  r.source = "extern \"C\" __global__ void k(float*) {}";
  r.entry_point = "k";
  r.cubin = std::string(512, 'c');
  r.launch.grid[0] = 7;
  r.launch.block[0] = 128;
  r.timing.median_us = 1;
  r.baseline.median_us = 2;
  r.toolchain = {13000, 13, 0, 1};
  r.status = cache::RecordStatus::kVerified;
  return r;
}

TEST(Kjitd, AnswersEveryRequest) {
  KjitdHarness h(KJIT_KJITD);
  ASSERT_TRUE(h.Start()) << ReadFile(h.log_path());
  ipc::Client c = MakeClient(h);

  auto hello = c.Hello();
  ASSERT_TRUE(hello.ok()) << hello.status().ToString() << "\n" << ReadFile(h.log_path());
  EXPECT_EQ(hello->protocol_version, ipc::kProtocolVersion);
  EXPECT_EQ(hello->announce_endpoint, h.announce_endpoint());

  auto task = c.Submit(KeyBytes(100), 2, "please");
  ASSERT_TRUE(task.ok()) << task.status().ToString();
  EXPECT_FALSE(task->merged);
  auto again = c.Submit(KeyBytes(100), 1);
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->merged);
  EXPECT_EQ(again->task_id, task->task_id);
  auto info = c.GetTask(task->task_id);
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->state, "queued");
  EXPECT_EQ(info->priority, 2);
  EXPECT_EQ(info->key_text, "aten::_softmax(f32[64,100], -1, False) sm_90");
  EXPECT_EQ(c.GetTask(999).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(c.Submit("not a key", 0).status().code(), StatusCode::kCorruption);

  ipc::Lookup lookup{KeyBytes(200), 90, 13000, 13, 0, 1, std::nullopt, std::nullopt};
  auto miss = c.Lookup(lookup);
  ASSERT_TRUE(miss.ok());
  EXPECT_FALSE(miss->found);
  {
    cache::OpenOptions o;
    o.path = h.cache_path();
    auto writer = cache::KernelCache::Open(o);
    ASSERT_TRUE(writer.ok());
    cache::KernelRecord h200 = VerifiedRecord(200);
    h200.timing.device = "NVIDIA H200 GPU-2";
    ASSERT_TRUE((*writer)->Insert(h200).ok());
    cache::KernelRecord h100 = VerifiedRecord(200);  // faster, but timed on another model of the arch
    h100.timing.device = "NVIDIA H100 GPU-1";
    h100.timing.median_us = 0.5;
    h100.cubin = std::string(512, 'd');
    ASSERT_TRUE((*writer)->Insert(h100).ok());
  }
  auto hit = c.Lookup(lookup);
  ASSERT_TRUE(hit.ok()) << hit.status().ToString();
  ASSERT_TRUE(hit->found) << hit->reason;
  EXPECT_EQ(hit->cubin, std::string(512, 'd')) << "no model asked: the fastest of all";
  EXPECT_EQ(hit->grid[0], 7u);
  EXPECT_EQ(hit->block[0], 128u);
  lookup.device_model = "NVIDIA H200";
  auto own_model = c.Lookup(lookup);
  ASSERT_TRUE(own_model.ok() && own_model->found) << own_model.status().ToString();
  EXPECT_EQ(own_model->cubin, std::string(512, 'c')) << "the record timed on the reader's model";

  EXPECT_EQ(c.Call(ipc::OpenEpisode{KeyBytes(1)}).status().code(), StatusCode::kUnavailable);

  auto tasks = c.ListTasks("queued");
  ASSERT_TRUE(tasks.ok());
  EXPECT_EQ(tasks->size(), 1u);
  auto stats = c.Stats();
  ASSERT_TRUE(stats.ok());
  EXPECT_GE(stats->counters["requests"], 9.0);
  EXPECT_EQ(stats->counters["lookup_hits"], 2.0);
  EXPECT_EQ(stats->counters["tasks_queued"], 1.0);

  const Status down = c.Shutdown();
  ASSERT_TRUE(down.ok()) << down.ToString() << "\n" << ReadFile(h.log_path());
  const int status = h.Wait();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_FALSE(std::filesystem::exists(h.pid_file()));
}

TEST(Kjitd, MalformedAndWrongVersionRequestsGetErrorReplies) {
  KjitdHarness h(KJIT_KJITD);
  ASSERT_TRUE(h.Start()) << ReadFile(h.log_path());
  zmq::context_t ctx;
  zmq::socket_t s(ctx, zmq::socket_type::dealer);
  s.set(zmq::sockopt::linger, 0);
  s.set(zmq::sockopt::rcvtimeo, 3000);
  s.connect(h.endpoint());
  auto exchange = [&](const std::string& payload) -> Result<ipc::Envelope> {
    s.send(zmq::message_t(), zmq::send_flags::sndmore);
    s.send(zmq::buffer(payload), zmq::send_flags::none);
    zmq::message_t delimiter, reply;
    if (!s.recv(delimiter) || !s.recv(reply)) return Status(StatusCode::kUnavailable, "no reply");
    return ipc::Decode(std::string_view(static_cast<const char*>(reply.data()), reply.size()));
  };
  for (const std::string& bad : {std::string("\xc1"), std::string("garbage bytes"), std::string()}) {
    auto r = exchange(bad);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    const auto* err = std::get_if<ipc::Error>(&r->body);
    ASSERT_NE(err, nullptr);
    EXPECT_EQ(err->code, "invalid_argument");
  }
  ipc::Envelope future{ipc::kProtocolVersion, 77, ipc::Stats{}};
  std::string bytes = ipc::Encode(future);
  future.version = 99;
  // Re-encoding with another version: the daemon must answer, with an error naming it.
  auto r = exchange(ipc::Encode(future));
  ASSERT_TRUE(r.ok());
  const auto* err = std::get_if<ipc::Error>(&r->body);
  ASSERT_NE(err, nullptr);
  EXPECT_NE(err->message.find("99"), std::string::npos) << err->message;
  EXPECT_EQ(r->id, 77u);
  // And it still serves well-formed requests.
  auto ok = exchange(bytes);
  ASSERT_TRUE(ok.ok());
  EXPECT_TRUE(std::holds_alternative<ipc::StatsReply>(ok->body));
}

TEST(Kjitd, ClientsCarryOnWhileKjitdIsKilledAndLoseNoAcknowledgedReport) {
  KjitdHarness h(KJIT_KJITD);
  ASSERT_TRUE(h.Start()) << ReadFile(h.log_path());
  ipc::Client c = MakeClient(h, /*queue=*/256);
  constexpr int kKeys = 40;
  for (int i = 0; i < 400; ++i) c.ReportMiss(KeyBytes(1000 + i % kKeys), 1, 5.0);
  ASSERT_TRUE(c.Flush(std::chrono::seconds(20)).ok());

  h.Kill(SIGKILL);
  // kjitd is gone: reports are queued or dropped, never blocking; requests fail fast.
  for (int i = 0; i < 2000; ++i) c.ReportMiss(KeyBytes(1000 + i % kKeys), 1, 5.0);
  auto down = c.Stats();
  ASSERT_FALSE(down.ok());
  EXPECT_EQ(down.status().code(), StatusCode::kUnavailable);
  const ipc::ClientCounters during = c.counters();
  EXPECT_GT(during.misses_dropped, 0u);  // the queue of 256 overflowed
  EXPECT_LE(during.queue_depth, 256u);

  ASSERT_TRUE(h.Start()) << ReadFile(h.log_path());  // same cache file: the queue survives
  ASSERT_TRUE(c.Flush(std::chrono::seconds(30)).ok());
  const ipc::ClientCounters after = c.counters();
  // Every report was either queued and then acknowledged, or dropped because the queue was full.
  EXPECT_EQ(after.misses_acked, after.misses_queued);
  EXPECT_EQ(after.misses_acked + after.misses_dropped, 2400u);
  auto tasks = c.ListTasks("queued");
  ASSERT_TRUE(tasks.ok());
  EXPECT_EQ(tasks->size(), static_cast<size_t>(kKeys));  // misses of one key merged into one task
  uint64_t calls = 0;
  for (const auto& t : *tasks) calls += t.calls;
  // Every acknowledged report is on disk (a report committed just before the
  // kill but not acknowledged is sent again, so there may be more, never fewer).
  EXPECT_GE(calls, after.misses_acked);
  EXPECT_GT(after.reconnects, 0u);
}

TEST(Kjitd, AnnouncesNewlyVerifiedKernels) {
  KjitdHarness h(KJIT_KJITD, {"--watch-interval-ms", "50"});
  ASSERT_TRUE(h.Start()) << ReadFile(h.log_path());
  zmq::context_t ctx;
  zmq::socket_t sub(ctx, zmq::socket_type::sub);
  sub.set(zmq::sockopt::linger, 0);
  sub.set(zmq::sockopt::rcvtimeo, 5000);
  sub.set(zmq::sockopt::subscribe, "sm_90/");
  sub.connect(h.announce_endpoint());
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // let the subscription reach kjitd
  int64_t id = 0;
  {
    cache::OpenOptions o;
    o.path = h.cache_path();
    auto writer = cache::KernelCache::Open(o);
    ASSERT_TRUE(writer.ok());
    auto candidate = VerifiedRecord(301);
    candidate.status = cache::RecordStatus::kCandidate;  // not announced
    ASSERT_TRUE((*writer)->Insert(candidate).ok());
    id = *(*writer)->Insert(VerifiedRecord(302));
  }
  zmq::message_t topic, payload;
  ASSERT_TRUE(sub.recv(topic)) << "no announcement within 5 s";
  ASSERT_TRUE(sub.recv(payload));
  const std::string hash = OpKey::Decode(KeyBytes(302))->Hash().ToHex();
  EXPECT_EQ(topic.to_string(), "sm_90/" + hash);
  auto env = ipc::Decode(std::string_view(static_cast<const char*>(payload.data()), payload.size()));
  ASSERT_TRUE(env.ok());
  const auto* a = std::get_if<ipc::Announce>(&env->body);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->record_id, id);
  EXPECT_EQ(a->key_hash, hash);
}

TEST(Kjitd, SighupReloadsAndSigtermStopsCleanly) {
  KjitdHarness h(KJIT_KJITD);
  std::filesystem::create_directories(h.dir() + "/config/kjit");
  std::ofstream(h.dir() + "/config/kjit/kjitd.conf") << "log_level = info\n";
  ASSERT_TRUE(h.Start()) << ReadFile(h.log_path());
  std::ofstream(h.dir() + "/config/kjit/kjitd.conf") << "# now chattier\nlog_level = debug\n";
  kill(h.pid(), SIGHUP);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (ReadFile(h.log_path()).find("\"reloaded\"") == std::string::npos &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_NE(ReadFile(h.log_path()).find("\"log_level\":\"debug\""), std::string::npos) << ReadFile(h.log_path());
  const int status = h.Kill(SIGTERM);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  EXPECT_NE(ReadFile(h.log_path()).find("\"stopped\""), std::string::npos);
  EXPECT_FALSE(std::filesystem::exists(h.pid_file()));
}

struct KeyPair {
  std::string public_key, secret_key;
};
KeyPair MakeKeys() {
  char pub[41] = {0}, sec[41] = {0};
  zmq_curve_keypair(pub, sec);
  return {pub, sec};
}

TEST(Kjitd, TcpAdmitsOnlyAuthorizedCurveClients) {
  const KeyPair server = MakeKeys(), allowed = MakeKeys(), stranger = MakeKeys();
  char tmpl[] = "/tmp/kjitd-keys-XXXXXX";
  const std::string keys = mkdtemp(tmpl);
  std::ofstream(keys + "/server.key") << server.secret_key << "\n";
  std::ofstream(keys + "/authorized") << "# the one client allowed\n" << allowed.public_key << "\n";
  const std::string tcp = "tcp://127.0.0.1:" + std::to_string(20000 + getpid() % 20000);
  KjitdHarness h(KJIT_KJITD, {"--tcp-endpoint", tcp, "--curve-secret-key-file", keys + "/server.key",
                              "--curve-authorized-keys-file", keys + "/authorized"});
  ASSERT_TRUE(h.Start()) << ReadFile(h.log_path());
  auto client = [&](const KeyPair& k) {
    ipc::ClientOptions o;
    o.endpoint = tcp;
    o.request_timeout = std::chrono::milliseconds(3000);
    o.server_public_key = server.public_key;
    o.public_key = k.public_key;
    o.secret_key = k.secret_key;
    return o;
  };
  ipc::Client good(client(allowed));
  auto hello = good.Hello();
  EXPECT_TRUE(hello.ok()) << hello.status().ToString() << "\n" << ReadFile(h.log_path());
  ipc::Client bad(client(stranger));
  auto refused = bad.Hello();
  EXPECT_EQ(refused.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(ReadFile(h.log_path()).find("client_refused"), std::string::npos);
  std::filesystem::remove_all(keys);
}

// TCP without an allow-list: kjitd refuses to start unless curve_allow_any_client says so, and then admits any
// client with the server's public key read-only (lookups and reports, not submissions or shutdown).
TEST(Kjitd, TcpWithoutAnAllowListIsRefusedOrReadOnly) {
  const KeyPair server = MakeKeys(), someone = MakeKeys();
  char tmpl[] = "/tmp/kjitd-keys-XXXXXX";
  const std::string keys = mkdtemp(tmpl);
  std::ofstream(keys + "/server.key") << server.secret_key << "\n";
  const std::string tcp = "tcp://127.0.0.1:" + std::to_string(20000 + (getpid() + 7) % 20000);
  {
    KjitdHarness refused(KJIT_KJITD, {"--tcp-endpoint", tcp, "--curve-secret-key-file", keys + "/server.key"});
    EXPECT_FALSE(refused.Start());
    EXPECT_NE(ReadFile(refused.log_path()).find("without curve_authorized_keys_file"), std::string::npos)
        << ReadFile(refused.log_path());
  }
  KjitdHarness h(KJIT_KJITD, {"--tcp-endpoint", tcp, "--curve-secret-key-file", keys + "/server.key",
                              "--curve-allow-any-client", "true"});
  ASSERT_TRUE(h.Start()) << ReadFile(h.log_path());
  ipc::ClientOptions o;
  o.endpoint = tcp;
  o.request_timeout = std::chrono::milliseconds(3000);
  o.server_public_key = server.public_key;
  o.public_key = someone.public_key;
  o.secret_key = someone.secret_key;
  ipc::Client remote(o);
  EXPECT_TRUE(remote.Hello().ok());
  ipc::Lookup lookup{KeyBytes(1), 90, 13000, 13, 0, 1, std::nullopt, std::nullopt};
  EXPECT_TRUE(remote.Lookup(lookup).ok());
  EXPECT_TRUE(remote.ListTasks().ok());
  auto submit = remote.Submit(KeyBytes(1), 5);
  EXPECT_EQ(submit.status().code(), StatusCode::kPermissionDenied) << submit.status().ToString();
  EXPECT_EQ(remote.Shutdown().code(), StatusCode::kPermissionDenied);
  auto episode = remote.OpenEpisode(KeyBytes(1));
  EXPECT_EQ(episode.status().code(), StatusCode::kPermissionDenied);
  // The local socket is not read-only, and kjitd is still up.
  ipc::Client local = MakeClient(h);
  EXPECT_TRUE(local.Submit(KeyBytes(1), 5).ok());
  EXPECT_TRUE(local.Hello().ok());
  std::filesystem::remove_all(keys);
}

cache::KernelRecord ReadRecord(const KjitdHarness& h, int64_t id) {
  cache::OpenOptions o;
  o.path = h.cache_path();
  o.read_only = true;
  auto kc = cache::KernelCache::Open(o);
  EXPECT_TRUE(kc.ok()) << kc.status().ToString();
  if (!kc.ok()) return {};
  auto r = (*kc)->Get(id);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? *r : cache::KernelRecord{};
}

// A served kernel that failed in a client: the report travels the client's
// non-blocking queue; kjitd (here without an evaluator) takes the record out
// of service and queues its key for re-verification.
TEST(Kjitd, FailureReportTakesTheRecordOutOfServiceAndQueuesReverification) {
  KjitdHarness h(KJIT_KJITD);
  ASSERT_TRUE(h.Start()) << ReadFile(h.log_path());
  int64_t failing = 0, other = 0;
  {
    cache::OpenOptions o;
    o.path = h.cache_path();
    auto writer = cache::KernelCache::Open(o);
    ASSERT_TRUE(writer.ok());
    failing = *(*writer)->Insert(VerifiedRecord(400));
    other = *(*writer)->Insert(VerifiedRecord(401));
  }
  ipc::Client c = MakeClient(h);
  ipc::Lookup lookup{KeyBytes(400), 90, 13000, 13, 0, 1, std::nullopt, std::nullopt};
  ASSERT_TRUE(c.Lookup(lookup)->found);

  ASSERT_TRUE(c.ReportFailure({KeyBytes(400), failing, "launch", "CUDA_ERROR_INVALID_VALUE: too many threads"}));
  ASSERT_TRUE(c.Flush(std::chrono::seconds(20)).ok()) << ReadFile(h.log_path());
  EXPECT_EQ(c.counters().failures_acked, 1u);
  EXPECT_EQ(c.counters().failures_dropped, 0u);

  const cache::KernelRecord record = ReadRecord(h, failing);
  EXPECT_EQ(record.status, cache::RecordStatus::kQuarantined);
  EXPECT_NE(record.status_reason.find("launch failure: CUDA_ERROR_INVALID_VALUE"), std::string::npos)
      << record.status_reason;
  auto served = c.Lookup(lookup);
  ASSERT_TRUE(served.ok());
  EXPECT_FALSE(served->found) << "a record reported failing is still served";
  EXPECT_EQ(ReadRecord(h, other).status, cache::RecordStatus::kVerified);  // only the record named

  auto tasks = c.ListTasks("queued");
  ASSERT_TRUE(tasks.ok());
  ASSERT_EQ(tasks->size(), 1u);
  EXPECT_EQ(tasks->front().key_hash, OpKey::Decode(KeyBytes(400))->Hash().ToHex());
  EXPECT_NE(tasks->front().detail.find("re-verify record " + std::to_string(failing)), std::string::npos)
      << tasks->front().detail;
  EXPECT_EQ(tasks->front().priority, 1);

  // A second process reporting the same record changes nothing more.
  auto again = c.Call(ipc::ReportFailure{KeyBytes(400), failing, "load", "CUDA_ERROR_INVALID_IMAGE"});
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  const auto* ack = std::get_if<ipc::FailureAck>(&*again);
  ASSERT_NE(ack, nullptr);
  EXPECT_FALSE(ack->out_of_service);
  EXPECT_EQ(ack->reverify, "none");
  EXPECT_EQ(c.ListTasks("queued")->size(), 1u);

  auto stats = c.Stats();
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->counters["failures_reported"], 2.0);
  EXPECT_EQ(stats->counters["records_suspended"], 1.0);
  EXPECT_NE(ReadFile(h.log_path()).find("kernel_failed_in_client"), std::string::npos);
}

// report_uses: a program's calls per key, queued by the client and acknowledged, land in the cache's per-key
// counters and the served record's use count; a bad key hash is refused.
TEST(Kjitd, UseReportsLandInThePerKeyCounters) {
  KjitdHarness h(KJIT_KJITD);
  ASSERT_TRUE(h.Start()) << ReadFile(h.log_path());
  int64_t served = 0;
  {
    cache::OpenOptions o;
    o.path = h.cache_path();
    auto writer = cache::KernelCache::Open(o);
    ASSERT_TRUE(writer.ok());
    served = *(*writer)->Insert(VerifiedRecord(500));
  }
  ipc::Client c = MakeClient(h);
  const std::string hit_key = OpKey::Decode(KeyBytes(500))->Hash().ToHex();
  const std::string miss_key = OpKey::Decode(KeyBytes(501))->Hash().ToHex();
  // Two processes of one run (a program and its worker), then a report that names no run.
  ASSERT_TRUE(c.ReportUses(ipc::ReportUses{1, {{hit_key, served, 40, 0}, {miss_key, 0, 0, 3}}, "run-a",
                                           "python3 app.py", 1000}));
  ASSERT_TRUE(c.ReportUses(ipc::ReportUses{2, {{hit_key, served, 2, 1}}, "run-a", "python3 worker.py", 900}));
  ASSERT_TRUE(c.ReportUses(ipc::ReportUses{3, {{hit_key, served, 5, 0}}, std::nullopt, std::nullopt, std::nullopt}));
  ASSERT_TRUE(c.Flush(std::chrono::seconds(20)).ok()) << ReadFile(h.log_path());
  EXPECT_EQ(c.counters().uses_acked, 3u);
  auto bad = c.Call(ipc::ReportUses{1, {{"not hex", 0, 1, 0}}, std::nullopt, std::nullopt, std::nullopt});
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  auto long_run = c.Call(ipc::ReportUses{1, {{hit_key, served, 1, 0}}, std::string(ipc::kMaxRunIdText + 1, 'r'),
                                         std::nullopt, std::nullopt});
  ASSERT_FALSE(long_run.ok());
  EXPECT_EQ(long_run.status().code(), StatusCode::kInvalidArgument);

  cache::OpenOptions o;
  o.path = h.cache_path();
  o.read_only = true;
  auto reader = cache::KernelCache::Open(o);
  ASSERT_TRUE(reader.ok());
  auto stats = (*reader)->Stats(5);
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->keys_seen, 2u);
  EXPECT_EQ(stats->hits, 47u);
  EXPECT_EQ(stats->misses, 4u);
  EXPECT_EQ((*reader)->Get(served)->use_count, 47u);
  auto runs = (*reader)->ListRuns();
  ASSERT_TRUE(runs.ok()) << runs.status().ToString();
  ASSERT_EQ(runs->size(), 1u);
  EXPECT_EQ((*runs)[0].id, "run-a");
  EXPECT_EQ((*runs)[0].program, "python3 app.py");  // the first process to report names the run
  EXPECT_EQ((*runs)[0].started_unix_ms, 900);        // the earliest start of its processes
  EXPECT_EQ((*runs)[0].keys, 2u);
  EXPECT_EQ((*runs)[0].hits, 42u);
  EXPECT_EQ((*runs)[0].misses, 4u);
}

TEST(Kjitd, FailureReportsThatAreNotTheKernelsOrNameTheWrongRecordChangeNothing) {
  KjitdHarness h(KJIT_KJITD);
  ASSERT_TRUE(h.Start()) << ReadFile(h.log_path());
  int64_t id = 0;
  {
    cache::OpenOptions o;
    o.path = h.cache_path();
    auto writer = cache::KernelCache::Open(o);
    ASSERT_TRUE(writer.ok());
    id = *(*writer)->Insert(VerifiedRecord(500));
  }
  ipc::Client c = MakeClient(h);
  // The shim could not pass an argument: the kernel never ran, the record stays in service.
  auto argument = c.Call(ipc::ReportFailure{KeyBytes(500), id, "argument", "argument 0 is on another device"});
  ASSERT_TRUE(argument.ok()) << argument.status().ToString();
  EXPECT_FALSE(std::get<ipc::FailureAck>(*argument).out_of_service);
  EXPECT_EQ(std::get<ipc::FailureAck>(*argument).reverify, "none");
  // Refused: another key's record, an unknown stage, an unknown record, a malformed key.
  EXPECT_EQ(c.Call(ipc::ReportFailure{KeyBytes(501), id, "launch", "x"}).status().code(),
            StatusCode::kInvalidArgument);
  auto stage = c.Call(ipc::ReportFailure{KeyBytes(500), id, "verify", "x"});
  EXPECT_EQ(stage.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(stage.status().message().find("unknown stage"), std::string::npos) << stage.status().ToString();
  EXPECT_EQ(c.Call(ipc::ReportFailure{KeyBytes(500), id + 100, "load", "x"}).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(c.Call(ipc::ReportFailure{"not a key", id, "load", "x"}).status().code(), StatusCode::kCorruption);

  EXPECT_EQ(ReadRecord(h, id).status, cache::RecordStatus::kVerified);
  EXPECT_TRUE(c.ListTasks("queued")->empty());
  // Refused reports are dropped by the client's queue, not retried forever.
  ASSERT_TRUE(c.ReportFailure({KeyBytes(501), id, "launch", "x"}));
  ASSERT_TRUE(c.Flush(std::chrono::seconds(20)).ok());
  EXPECT_EQ(c.counters().failures_dropped, 1u);
  EXPECT_EQ(c.counters().failures_acked, 0u);
}

// While kjitd is away, a queue full of misses still takes failure reports
// (they are rare and worth more), up to its reserve.
TEST(KjitdClient, FailureReportsHaveAReserveInAFullQueue) {
  ipc::ClientOptions o;
  o.endpoint = "ipc:///tmp/kjit-test-no-kjitd-" + std::to_string(getpid()) + ".sock";
  o.miss_queue_capacity = 4;
  o.retry_interval = std::chrono::milliseconds(50);
  ipc::Client c(o);
  int misses_taken = 0;
  for (int i = 0; i < 10; ++i) misses_taken += c.ReportMiss(KeyBytes(i), 1, 1.0);
  EXPECT_EQ(misses_taken, 4);
  int failures_taken = 0;
  for (size_t i = 0; i < ipc::Client::kFailureReserve + 5; ++i) {
    failures_taken += c.ReportFailure({KeyBytes(1), 1, "load", "x"});
  }
  EXPECT_EQ(failures_taken, static_cast<int>(ipc::Client::kFailureReserve));
  const ipc::ClientCounters counters = c.counters();
  EXPECT_EQ(counters.failures_queued, ipc::Client::kFailureReserve);
  EXPECT_EQ(counters.failures_dropped, 5u);
  EXPECT_EQ(counters.misses_dropped, 6u);
  EXPECT_EQ(counters.queue_depth, 4 + ipc::Client::kFailureReserve);
}

// A client talks to a kjitd only in a directory of the user's own that nobody else can write: another user who
// made /tmp/kjit-<uid> first could otherwise listen there and learn what the user's programs run.
TEST(KjitdClient, RefusesARuntimeDirectoryOthersCouldControl) {
  char tmpl[] = "/tmp/kjit-dir-XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  testing::ScopedEnv env({{"KJIT_RUNTIME_DIR", dir}});  // the check is for the runtime directory
  ipc::ClientOptions o;
  o.endpoint = "ipc://" + dir + "/kjitd.sock";
  o.request_timeout = std::chrono::milliseconds(500);
  // Ours and private, but nobody listens: unavailable, as for any kjitd that is not running.
  EXPECT_EQ(ipc::Client(o).Hello().status().code(), StatusCode::kUnavailable);
  ASSERT_EQ(chmod(dir.c_str(), 0777), 0);
  auto open = ipc::Client(o).Hello();
  EXPECT_EQ(open.status().code(), StatusCode::kPermissionDenied);
  EXPECT_NE(open.status().message().find("writable by other users"), std::string::npos) << open.status().message();
  ASSERT_EQ(chmod(dir.c_str(), 0700), 0);
  if (getuid() == 0) {
    ASSERT_EQ(chown(dir.c_str(), 65534, 65534), 0);  // nobody's
    auto theirs = ipc::Client(o).Hello();
    EXPECT_EQ(theirs.status().code(), StatusCode::kPermissionDenied);
    EXPECT_NE(theirs.status().message().find("belongs to another user"), std::string::npos)
        << theirs.status().message();
  } else {
    std::printf("not root: a directory of another user's cannot be made here; only the mode was checked\n");
  }
  // An endpoint the user named elsewhere is the user's choice.
  ASSERT_EQ(chmod(dir.c_str(), 0777), 0);
  testing::ScopedEnv elsewhere({{"KJIT_RUNTIME_DIR", dir + "/other"}});
  EXPECT_EQ(ipc::Client(o).Hello().status().code(), StatusCode::kUnavailable);
  std::filesystem::remove_all(dir);
}

TEST(Kjitd, OneInstancePerEndpoint) {
  KjitdHarness h(KJIT_KJITD);
  ASSERT_TRUE(h.Start()) << ReadFile(h.log_path());
  const std::string cmd = std::string(KJIT_KJITD) + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  char buf[512] = {0};
  const size_t n = fread(buf, 1, sizeof buf - 1, p);
  const int rc = pclose(p);
  EXPECT_NE(rc, 0);
  EXPECT_NE(std::string(buf, n).find("already running"), std::string::npos) << std::string(buf, n);
}

}  // namespace
}  // namespace kjit
