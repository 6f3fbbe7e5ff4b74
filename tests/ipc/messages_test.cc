#include "kjit/ipc/messages.h"

#include <gtest/gtest.h>

#include <array>
#include <bit>
#include <chrono>
#include <limits>
#include <random>
#include <set>

#include <msgpack.hpp>

#include "kjit/runtime/hash.h"
#include "kjit/runtime/op_key.h"

namespace kjit::ipc {
namespace {

// Bytes that are not text: a NUL, a byte that is never valid UTF-8, and a high byte.
const std::string kBinaryBytes("KJK\x01\x00\xff\xc1tail", 11);

void SetTriple(uint32_t (&triple)[3], uint32_t x, uint32_t y, uint32_t z) {
  triple[0] = x;
  triple[1] = y;
  triple[2] = z;
}

TaskInfo SampleTask(int64_t id) {
  TaskInfo t;
  t.id = id;
  t.key_hash = "c97c4393cb47064a169d4bec25de480d";
  t.key_text = "aten::_softmax(f32[64,1048576], -1, False) sm_90";
  t.state = "running";
  t.priority = -3;
  t.calls = 1ull << 40;
  t.observed_us = 12.75;
  t.expected_gain_us = 1.5e9;
  t.attempts = 2;
  t.detail = "trial 2 of 8";
  t.created_unix_ms = 1'700'000'000'000 + id;
  t.updated_unix_ms = -1;  // signed on purpose: any int64 travels
  t.round = 2;
  t.trials = 11;
  t.best_us = 3.25;
  t.baseline_us = 9.5;
  t.floor_us = 2.75;
  t.record_id = 41;
  t.policy_version = "p-1500";
  t.claimed_by = "kjitd-tuner:4242:0";
  return t;
}

// One message of every type, every field different from its default.
std::vector<Envelope> SampleMessages() {
  std::vector<Envelope> out;
  uint64_t id = 1;
  auto add = [&](Body body) { out.push_back(Envelope{kProtocolVersion, id++, std::move(body)}); };
  add(Hello{"kjit-shim/0.1", 4242, {"lookup", "report_miss"}});
  add(HelloReply{"kjitd/0.1", 7, {"lookup", "agent_env"}, "ipc:///run/user/1000/kjit/kjitd-announce.sock"});
  add(Lookup{kBinaryBytes, 90, 13000, 13, 1, 5, "NVIDIA H200", "2.11.0"});
  LookupReply lookup_reply;
  lookup_reply.found = true;
  lookup_reply.record_id = 31337;
  lookup_reply.cubin = std::string("\x7f" "ELF\x02\x01\x01\x00\x00\xff", 10);
  lookup_reply.entry_point = "kjit_softmax_f32";
  SetTriple(lookup_reply.grid, 64, 2, 3);
  SetTriple(lookup_reply.block, 256, 4, 0xffffffff);
  lookup_reply.dynamic_shared_bytes = 49152;
  lookup_reply.workspace_bytes = (uint64_t{1} << 33) + 16;
  lookup_reply.reason = "served from cache";
  add(lookup_reply);
  add(ReportMiss{kBinaryBytes, std::numeric_limits<uint64_t>::max(), 41.5});
  add(SubmitTask{kBinaryBytes, std::numeric_limits<int32_t>::min(), "by hand"});
  add(TaskAck{std::numeric_limits<int64_t>::max(), true});
  add(TaskStatus{-9});
  add(TaskStatusReply{SampleTask(5)});
  add(ListTasks{"queued", 100});
  add(ListTasksReply{{SampleTask(1), SampleTask(2), SampleTask(3)}});
  add(Stats{});
  add(StatsReply{{{"requests", 1234}, {"uptime_s", 0.5}, {"misses_reported", -0.0}},
                 std::vector<std::map<std::string, std::string>>{
                     {{"device", "0"}, {"state", "ready"}, {"uuid", "GPU-aaaa"}, {"jobs", "3"}},
                     {{"device", "GPU-bbbb"}, {"state", "unavailable"}, {"note", "no such GPU"}}}});
  add(Shutdown{});
  add(Ack{});
  add(OpenEpisode{kBinaryBytes});
  add(Observation{77,
                  "aten::_softmax(f32[64,1048576], -1, False) sm_90",
                  "aten::_softmax",
                  {"f32[64,1048576]", "-1", "False"},
                  812.25,
                  {{"name", "NVIDIA H200"}, {"arch", "90"}, {"sm_count", "132"}}});
  SubmitCandidate candidate;
  candidate.episode_id = 77;
  candidate.source = "extern \"C\" __global__ void k(float* x) { x[threadIdx.x] = 0.f; }\n";
  candidate.entry_point = "k";
  candidate.options = {"-O3", "--use_fast_math"};
  SetTriple(candidate.grid, 1024, 1, 2);
  SetTriple(candidate.block, 128, 2, 1);
  candidate.dynamic_shared_bytes = 1024;
  candidate.workspace_bytes = 4096;
  add(candidate);
  candidate.design = std::map<std::string, std::string>{
      {"family", "softmax"}, {"policy_version", "rl1-i1500-1a2b3c4d"}, {"knob.threads", "256"}};
  add(candidate);
  candidate.compile_ahead = std::vector<std::vector<std::string>>{{"// next\n", "-O3", "-DROWS=4"}, {"// after\n"}};
  add(candidate);
  add(CandidateResult{true, "warning: unused variable", false, "wrong result at element 17", 700.5, 812.25, -1.25,
                      {{"registers", 32}, {"bandwidth_fraction", 0.875}}});
  add(CloseEpisode{77});
  add(Error{"not_found", "no task 9"});
  add(ReportFailure{kBinaryBytes, 31337, "launch", "CUDA_ERROR_INVALID_VALUE: block of 2048 threads"});
  add(FailureAck{true, "queued", 44});
  add(ReportActivity{4242, {"GPU-0a1b2c3d-0000-1111-2222-333344445555", "GPU-ffffffff-0000-1111-2222-333344445555"},
                     1u << 20});
  add(ReportUses{4242,
                 {{"c97c4393cb47064a169d4bec25de480d", 31337, 1000, 0}, {"721a7d79b31f00000000000000000000", 0, 0, 7}},
                 "20261206-113700-4242",
                 "python3 app.py --iters 30",
                 1796556000123});
  add(ReportUses{4243, {{"c97c4393cb47064a169d4bec25de480d", 0, 0, 1}}, std::nullopt, std::nullopt, std::nullopt});
  add(Announce{90, "c97c4393cb47064a169d4bec25de480d", 31337});
  out.back().id = 0;  // announcements carry id 0
  out.front().id = std::numeric_limits<uint64_t>::max();
  return out;
}

const Envelope& SampleOf(std::string_view type) {
  static const std::vector<Envelope> samples = SampleMessages();
  for (const Envelope& e : samples) {
    if (TypeName(e.body) == type) return e;
  }
  ADD_FAILURE() << "no sample of type " << type;
  return samples.front();
}

// ---- Field-by-field comparison (the structs have no operator==).

void ExpectSameDouble(double a, double b, const char* field) {
  EXPECT_EQ(std::bit_cast<uint64_t>(a), std::bit_cast<uint64_t>(b)) << field << ": " << a << " vs " << b;
}
void ExpectSameTriple(const uint32_t (&a)[3], const uint32_t (&b)[3], const char* field) {
  EXPECT_EQ(std::to_array(a), std::to_array(b)) << field;
}

void ExpectSame(const Hello& a, const Hello& b) {
  EXPECT_EQ(a.client, b.client);
  EXPECT_EQ(a.pid, b.pid);
  EXPECT_EQ(a.capabilities, b.capabilities);
}
void ExpectSame(const HelloReply& a, const HelloReply& b) {
  EXPECT_EQ(a.server, b.server);
  EXPECT_EQ(a.protocol_version, b.protocol_version);
  EXPECT_EQ(a.capabilities, b.capabilities);
  EXPECT_EQ(a.announce_endpoint, b.announce_endpoint);
}
void ExpectSame(const Lookup& a, const Lookup& b) {
  EXPECT_EQ(a.key_bytes, b.key_bytes);
  EXPECT_EQ(a.arch, b.arch);
  EXPECT_EQ(a.driver_version, b.driver_version);
  EXPECT_EQ(a.nvrtc_major, b.nvrtc_major);
  EXPECT_EQ(a.nvrtc_minor, b.nvrtc_minor);
  EXPECT_EQ(a.codegen_version, b.codegen_version);
  EXPECT_EQ(a.device_model, b.device_model);
}
void ExpectSame(const LookupReply& a, const LookupReply& b) {
  EXPECT_EQ(a.found, b.found);
  EXPECT_EQ(a.record_id, b.record_id);
  EXPECT_EQ(a.cubin, b.cubin);
  EXPECT_EQ(a.entry_point, b.entry_point);
  ExpectSameTriple(a.grid, b.grid, "grid");
  ExpectSameTriple(a.block, b.block, "block");
  EXPECT_EQ(a.dynamic_shared_bytes, b.dynamic_shared_bytes);
  EXPECT_EQ(a.workspace_bytes, b.workspace_bytes);
  EXPECT_EQ(a.reason, b.reason);
}
void ExpectSame(const ReportMiss& a, const ReportMiss& b) {
  EXPECT_EQ(a.key_bytes, b.key_bytes);
  EXPECT_EQ(a.calls, b.calls);
  ExpectSameDouble(a.observed_us, b.observed_us, "observed_us");
}
void ExpectSame(const SubmitTask& a, const SubmitTask& b) {
  EXPECT_EQ(a.key_bytes, b.key_bytes);
  EXPECT_EQ(a.priority, b.priority);
  EXPECT_EQ(a.detail, b.detail);
}
void ExpectSame(const TaskAck& a, const TaskAck& b) {
  EXPECT_EQ(a.task_id, b.task_id);
  EXPECT_EQ(a.merged, b.merged);
}
void ExpectSame(const TaskInfo& a, const TaskInfo& b) {
  EXPECT_EQ(a.id, b.id);
  EXPECT_EQ(a.key_hash, b.key_hash);
  EXPECT_EQ(a.key_text, b.key_text);
  EXPECT_EQ(a.state, b.state);
  EXPECT_EQ(a.priority, b.priority);
  EXPECT_EQ(a.calls, b.calls);
  ExpectSameDouble(a.observed_us, b.observed_us, "observed_us");
  ExpectSameDouble(a.expected_gain_us, b.expected_gain_us, "expected_gain_us");
  EXPECT_EQ(a.attempts, b.attempts);
  EXPECT_EQ(a.detail, b.detail);
  EXPECT_EQ(a.created_unix_ms, b.created_unix_ms);
  EXPECT_EQ(a.updated_unix_ms, b.updated_unix_ms);
  EXPECT_EQ(a.round, b.round);
  EXPECT_EQ(a.trials, b.trials);
  EXPECT_EQ(a.best_us, b.best_us);
  EXPECT_EQ(a.baseline_us, b.baseline_us);
  EXPECT_EQ(a.floor_us, b.floor_us);
  EXPECT_EQ(a.record_id, b.record_id);
  EXPECT_EQ(a.policy_version, b.policy_version);
  EXPECT_EQ(a.claimed_by, b.claimed_by);
}
void ExpectSame(const TaskStatus& a, const TaskStatus& b) { EXPECT_EQ(a.task_id, b.task_id); }
void ExpectSame(const TaskStatusReply& a, const TaskStatusReply& b) { ExpectSame(a.task, b.task); }
void ExpectSame(const ListTasks& a, const ListTasks& b) {
  EXPECT_EQ(a.state, b.state);
  EXPECT_EQ(a.limit, b.limit);
}
void ExpectSame(const ListTasksReply& a, const ListTasksReply& b) {
  ASSERT_EQ(a.tasks.size(), b.tasks.size());
  for (size_t i = 0; i < a.tasks.size(); ++i) ExpectSame(a.tasks[i], b.tasks[i]);
}
void ExpectSame(const Stats&, const Stats&) {}
void ExpectSame(const StatsReply& a, const StatsReply& b) {
  ASSERT_EQ(a.counters.size(), b.counters.size());
  for (const auto& [name, value] : a.counters) {
    ASSERT_TRUE(b.counters.contains(name)) << name;
    ExpectSameDouble(value, b.counters.at(name), name.c_str());
  }
  EXPECT_EQ(a.evaluators, b.evaluators);
}
void ExpectSame(const Shutdown&, const Shutdown&) {}
void ExpectSame(const Ack&, const Ack&) {}
void ExpectSame(const OpenEpisode& a, const OpenEpisode& b) { EXPECT_EQ(a.key_bytes, b.key_bytes); }
void ExpectSame(const Observation& a, const Observation& b) {
  EXPECT_EQ(a.episode_id, b.episode_id);
  EXPECT_EQ(a.key_text, b.key_text);
  EXPECT_EQ(a.op, b.op);
  EXPECT_EQ(a.inputs, b.inputs);
  ExpectSameDouble(a.baseline_us, b.baseline_us, "baseline_us");
  EXPECT_EQ(a.device, b.device);
}
void ExpectSame(const SubmitCandidate& a, const SubmitCandidate& b) {
  EXPECT_EQ(a.episode_id, b.episode_id);
  EXPECT_EQ(a.source, b.source);
  EXPECT_EQ(a.entry_point, b.entry_point);
  EXPECT_EQ(a.options, b.options);
  ExpectSameTriple(a.grid, b.grid, "grid");
  ExpectSameTriple(a.block, b.block, "block");
  EXPECT_EQ(a.dynamic_shared_bytes, b.dynamic_shared_bytes);
  EXPECT_EQ(a.design, b.design);
  EXPECT_EQ(a.workspace_bytes, b.workspace_bytes);
  EXPECT_EQ(a.compile_ahead, b.compile_ahead);
}
void ExpectSame(const CandidateResult& a, const CandidateResult& b) {
  EXPECT_EQ(a.compiled, b.compiled);
  EXPECT_EQ(a.compile_log, b.compile_log);
  EXPECT_EQ(a.verified, b.verified);
  EXPECT_EQ(a.verdict, b.verdict);
  ExpectSameDouble(a.median_us, b.median_us, "median_us");
  ExpectSameDouble(a.baseline_us, b.baseline_us, "baseline_us");
  ExpectSameDouble(a.reward, b.reward, "reward");
  EXPECT_EQ(a.profile, b.profile);
}
void ExpectSame(const CloseEpisode& a, const CloseEpisode& b) { EXPECT_EQ(a.episode_id, b.episode_id); }
void ExpectSame(const Error& a, const Error& b) {
  EXPECT_EQ(a.code, b.code);
  EXPECT_EQ(a.message, b.message);
}
void ExpectSame(const Announce& a, const Announce& b) {
  EXPECT_EQ(a.arch, b.arch);
  EXPECT_EQ(a.key_hash, b.key_hash);
  EXPECT_EQ(a.record_id, b.record_id);
}

void ExpectSame(const ReportFailure& a, const ReportFailure& b) {
  EXPECT_EQ(a.key_bytes, b.key_bytes);
  EXPECT_EQ(a.record_id, b.record_id);
  EXPECT_EQ(a.stage, b.stage);
  EXPECT_EQ(a.reason, b.reason);
}
void ExpectSame(const FailureAck& a, const FailureAck& b) {
  EXPECT_EQ(a.out_of_service, b.out_of_service);
  EXPECT_EQ(a.reverify, b.reverify);
  EXPECT_EQ(a.task_id, b.task_id);
}

void ExpectSame(const ReportActivity& a, const ReportActivity& b) {
  EXPECT_EQ(a.pid, b.pid);
  EXPECT_EQ(a.devices, b.devices);
  EXPECT_EQ(a.calls, b.calls);
}

void ExpectSame(const ReportUses& a, const ReportUses& b) {
  EXPECT_EQ(a.pid, b.pid);
  ASSERT_EQ(a.uses.size(), b.uses.size());
  for (size_t i = 0; i < a.uses.size(); ++i) {
    EXPECT_EQ(a.uses[i].key_hash, b.uses[i].key_hash);
    EXPECT_EQ(a.uses[i].record_id, b.uses[i].record_id);
    EXPECT_EQ(a.uses[i].hits, b.uses[i].hits);
    EXPECT_EQ(a.uses[i].misses, b.uses[i].misses);
  }
}

void ExpectSame(const Envelope& a, const Envelope& b) {
  EXPECT_EQ(a.version, b.version);
  EXPECT_EQ(a.id, b.id);
  ASSERT_EQ(a.body.index(), b.body.index()) << TypeName(a.body) << " vs " << TypeName(b.body);
  std::visit([&](const auto& message) { ExpectSame(message, std::get<std::decay_t<decltype(message)>>(b.body)); },
             a.body);
}

// ---- Hand-made and edited messages

std::string ToHex(std::string_view bytes) { return HexEncode(bytes); }

std::string FromHex(std::string_view hex) {
  auto bytes = HexDecode(hex);
  EXPECT_TRUE(bytes.ok()) << hex;
  return bytes.ok() ? *bytes : std::string();
}

// A valid message as an editable msgpack tree, so that a test can break exactly one thing.
class Edit {
 public:
  explicit Edit(const Envelope& envelope) {
    const std::string bytes = Encode(envelope);
    root_ = msgpack::unpack(zone_, bytes.data(), bytes.size());  // copies strings into zone_
  }
  explicit Edit(std::string_view type) : Edit(SampleOf(type)) {}

  msgpack::object& envelope() { return root_; }
  msgpack::object& body() { return *Find(root_, "body"); }

  template <typename T>
  msgpack::object Value(const T& v) {
    return msgpack::object(v, zone_);
  }
  msgpack::object Bin(std::string_view bytes) { return Value(std::vector<char>(bytes.begin(), bytes.end())); }

  static msgpack::object* Find(msgpack::object& map, std::string_view key) {
    for (uint32_t i = 0; i < map.via.map.size; ++i) {
      msgpack::object_kv& kv = map.via.map.ptr[i];
      if (kv.key.type == msgpack::type::STR && std::string_view(kv.key.via.str.ptr, kv.key.via.str.size) == key) {
        return &kv.val;
      }
    }
    return nullptr;
  }

  // Replaces the value of `key`, or appends the entry (even if it is already there, when `append`).
  void Set(msgpack::object& map, std::string_view key, msgpack::object value, bool append = false) {
    if (msgpack::object* existing = Find(map, key); existing != nullptr && !append) {
      *existing = value;
      return;
    }
    const uint32_t n = map.via.map.size;
    auto* entries =
        static_cast<msgpack::object_kv*>(zone_.allocate_align(sizeof(msgpack::object_kv) * (n + 1)));
    std::copy(map.via.map.ptr, map.via.map.ptr + n, entries);
    entries[n].key = Value(std::string(key));
    entries[n].val = value;
    map.via.map.ptr = entries;
    map.via.map.size = n + 1;
  }
  void SetRawKey(msgpack::object& map, msgpack::object key, msgpack::object value) {
    Set(map, "placeholder-key", value, /*append=*/true);
    map.via.map.ptr[map.via.map.size - 1].key = key;
  }

  static void Erase(msgpack::object& map, std::string_view key) {
    for (uint32_t i = 0; i < map.via.map.size; ++i) {
      const msgpack::object& k = map.via.map.ptr[i].key;
      if (k.type == msgpack::type::STR && std::string_view(k.via.str.ptr, k.via.str.size) == key) {
        map.via.map.ptr[i] = map.via.map.ptr[map.via.map.size - 1];
        --map.via.map.size;
        return;
      }
    }
    ADD_FAILURE() << "no field " << key;
  }

  std::string Bytes() const {
    msgpack::sbuffer buffer;
    msgpack::pack(buffer, root_);
    return std::string(buffer.data(), buffer.size());
  }

 private:
  msgpack::zone zone_;
  msgpack::object root_;
};

// Decodes bytes that must fail, and returns the error message.
std::string DecodeError(std::string_view bytes, uint64_t* id_out = nullptr) {
  Result<Envelope> decoded = Decode(bytes, id_out);
  EXPECT_FALSE(decoded.ok()) << "decoded as " << TypeName(decoded->body);
  if (decoded.ok()) return "";
  EXPECT_EQ(decoded.status().code(), StatusCode::kInvalidArgument) << decoded.status().ToString();
  EXPECT_FALSE(decoded.status().message().empty());
  return decoded.status().message();
}

// ---- Round trips

TEST(IpcMessages, SamplesCoverEveryType) {
  std::set<size_t> covered;
  for (const Envelope& e : SampleMessages()) covered.insert(e.body.index());
  EXPECT_EQ(covered.size(), std::variant_size_v<Body>);
}

TEST(IpcMessages, TypeNamesAreSnakeCaseOfTheStructs) {
  EXPECT_EQ(TypeName(Hello{}), "hello");
  EXPECT_EQ(TypeName(HelloReply{}), "hello_reply");
  EXPECT_EQ(TypeName(TaskStatusReply{}), "task_status_reply");
  EXPECT_EQ(TypeName(ListTasksReply{}), "list_tasks_reply");
  EXPECT_EQ(TypeName(SubmitCandidate{}), "submit_candidate");
  EXPECT_EQ(TypeName(Error{}), "error");
  EXPECT_EQ(TypeName(Announce{}), "announce");
  EXPECT_EQ(TypeName(ReportFailure{}), "report_failure");
  EXPECT_EQ(TypeName(FailureAck{}), "failure_ack");
  EXPECT_EQ(TypeName(ReportActivity{}), "report_activity");
}

// The failure report's fields as documented in ipc/PROTOCOL.md: the key as bin,
// the record id as an int64, stage and reason as str, every one required.
TEST(IpcMessages, FailureReportIsDecodedStrictly) {
  const Envelope& sample = SampleOf("report_failure");
  Result<Envelope> decoded = Decode(Encode(sample));
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  ExpectSame(*decoded, sample);

  for (const char* field : {"key_bytes", "record_id", "stage", "reason"}) {
    Edit missing("report_failure");
    missing.Erase(missing.body(), field);
    EXPECT_EQ(DecodeError(missing.Bytes()), "report_failure." + std::string(field) + ": required field is missing");
  }
  Edit text_key("report_failure");
  text_key.Set(text_key.body(), "key_bytes", text_key.Value(std::string("KJK")));
  EXPECT_EQ(DecodeError(text_key.Bytes()), "report_failure.key_bytes: expected bin, got str");
  Edit float_id("report_failure");
  float_id.Set(float_id.body(), "record_id", float_id.Value(3.5));
  EXPECT_EQ(DecodeError(float_id.Bytes()), "report_failure.record_id: expected int, got float64");
  Edit huge_id("report_failure");
  huge_id.Set(huge_id.body(), "record_id", huge_id.Value(std::numeric_limits<uint64_t>::max()));
  EXPECT_EQ(DecodeError(huge_id.Bytes()),
            "report_failure.record_id: 18446744073709551615 is out of range for int64");
  Edit bin_stage("report_failure");
  bin_stage.Set(bin_stage.body(), "stage", bin_stage.Bin("load"));
  EXPECT_EQ(DecodeError(bin_stage.Bytes()), "report_failure.stage: expected str, got bin");
  Edit int_flag("failure_ack");
  int_flag.Set(int_flag.body(), "out_of_service", int_flag.Value(1));
  EXPECT_EQ(DecodeError(int_flag.Bytes()), "failure_ack.out_of_service: expected bool, got int");
  Edit duplicate("report_failure");
  duplicate.Set(duplicate.body(), "stage", duplicate.Value(std::string("load")), /*append=*/true);
  EXPECT_EQ(DecodeError(duplicate.Bytes()), "report_failure.stage: field appears twice");
}

TEST(IpcMessages, EveryTypeRoundTrips) {
  for (const Envelope& original : SampleMessages()) {
    SCOPED_TRACE(std::string(TypeName(original.body)));
    const std::string bytes = Encode(original);
    uint64_t id = 12345;
    Result<Envelope> decoded = Decode(bytes, &id);
    ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
    EXPECT_EQ(id, original.id);
    ExpectSame(*decoded, original);
    EXPECT_EQ(Encode(*decoded), bytes);
  }
}

TEST(IpcMessages, DefaultValuedMessagesRoundTrip) {
  [&]<size_t... I>(std::index_sequence<I...>) {
    (([&] {
       const Envelope original{kProtocolVersion, I, Body(std::in_place_index<I>)};
       Result<Envelope> decoded = Decode(Encode(original));
       ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
       ExpectSame(*decoded, original);
     }()),
     ...);
  }(std::make_index_sequence<std::variant_size_v<Body>>());
}

TEST(IpcMessages, SpecialDoublesSurviveBitForBit) {
  for (double v : {-0.0, 2.0, std::numeric_limits<double>::infinity(), std::numeric_limits<double>::quiet_NaN(),
                   std::numeric_limits<double>::denorm_min(), 18446744073709551616.0 /* 2^64 */}) {
    const Envelope original{kProtocolVersion, 1, ReportMiss{"k", 1, v}};
    const std::string bytes = Encode(original);
    // Always float64 (0xcb), so other languages see a float even for 2.0.
    EXPECT_NE(bytes.find(std::string("\xcb", 1)), std::string::npos) << v;
    Result<Envelope> decoded = Decode(bytes);
    ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
    ExpectSameDouble(std::get<ReportMiss>(decoded->body).observed_us, v, "observed_us");
  }
}

// The worked example in ipc/PROTOCOL.md: if this changes, so must the document.
TEST(IpcMessages, WireFormatOfTheDocumentedExample) {
  const OpKey key = OpKey::Single(
      "aten::_softmax", "", {TensorDesc::Contiguous(DType::kFloat32, {64, 1048576}), int64_t{-1}, false}, 90);
  const Envelope example{kProtocolVersion, 7, ReportMiss{key.Encode(), 120, 41.5}};
  EXPECT_EQ(ToHex(Encode(example)),
            "84a17601a474797065ab7265706f72745f6d697373a26964"
            "07a4626f647983a96b65795f6279746573c42e4b4a4b015a"
            "0000000000010e6174656e3a3a5f736f66746d6178000308"
            "0902408080408080800102001002010100a563616c6c7378"
            "ab6f627365727665645f7573cb4044c00000000000");
}

TEST(IpcMessages, AcceptsAnyIntegerWidthAndIntegersForDoubles) {
  // {"v": uint64 1, "type": "task_status", "id": int8 5, "body": {"task_id": int64 12}}
  const std::string wide = FromHex(
      "84a176cf0000000000000001a474797065ab7461736b5f737461747573a269"
      "64d005a4626f647981a77461736b5f6964d3000000000000000c");
  Result<Envelope> decoded = Decode(wide);
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  EXPECT_EQ(decoded->id, 5u);
  EXPECT_EQ(std::get<TaskStatus>(decoded->body).task_id, 12);

  Edit edit("report_miss");
  edit.Set(edit.body(), "observed_us", edit.Value(-3));
  decoded = Decode(edit.Bytes());
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  EXPECT_EQ(std::get<ReportMiss>(decoded->body).observed_us, -3.0);

  edit.Set(edit.body(), "observed_us", edit.Value(1.5f));
  ASSERT_NE(edit.Bytes().find(std::string("\xca", 1)), std::string::npos);  // float32 on the wire
  decoded = Decode(edit.Bytes());
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  EXPECT_EQ(std::get<ReportMiss>(decoded->body).observed_us, 1.5);
}

TEST(IpcMessages, UnknownFieldsAreIgnored) {
  Edit edit("lookup");
  edit.Set(edit.body(), "added_in_a_later_release", edit.Value(std::vector<int>{1, 2, 3}));
  edit.Set(edit.body(), "another", edit.Value(std::map<std::string, std::string>{{"a", "b"}}));
  edit.Set(edit.envelope(), "trace", edit.Value(std::string("abc")));
  Result<Envelope> decoded = Decode(edit.Bytes());
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  ExpectSame(*decoded, SampleOf("lookup"));

  Edit nested("task_status_reply");
  nested.Set(*Edit::Find(nested.body(), "task"), "future", nested.Value(true));
  decoded = Decode(nested.Bytes());
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  ExpectSame(*decoded, SampleOf("task_status_reply"));
}

// stats_reply.evaluators came within version 1: a reply without it (from an older
// kjitd, or one without evaluators) still decodes, and one that leaves it out is
// encoded exactly as before the field existed.
TEST(IpcMessages, OptionalFieldMayBeAbsent) {
  Edit edit("stats_reply");
  edit.Erase(edit.body(), "evaluators");
  Result<Envelope> decoded = Decode(edit.Bytes());
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  const auto& reply = std::get<StatsReply>(decoded->body);
  EXPECT_FALSE(reply.evaluators.has_value());
  EXPECT_EQ(reply.counters.at("requests"), 1234);

  StatsReply plain{{{"requests", 1}}, std::nullopt};
  const std::string bytes = Encode(Envelope{kProtocolVersion, 5, plain});
  EXPECT_EQ(bytes.find("evaluators"), std::string::npos);

  // lookup.device_model too: an older shim's lookup decodes with no model preference.
  Edit lookup("lookup");
  lookup.Erase(lookup.body(), "device_model");
  Result<Envelope> old_lookup = Decode(lookup.Bytes());
  ASSERT_TRUE(old_lookup.ok()) << old_lookup.status().ToString();
  EXPECT_FALSE(std::get<Lookup>(old_lookup->body).device_model.has_value());

  // Present, it is checked like any field.
  Edit wrong("stats_reply");
  wrong.Set(wrong.body(), "evaluators", wrong.Value(std::string("all fine")));
  EXPECT_EQ(DecodeError(wrong.Bytes()), "stats_reply.evaluators: expected array, got str");
}

// ---- Decoding errors: each names the problem.

TEST(IpcDecode, RejectsInvalidMsgpack) {
  uint64_t id = 99;
  // 0xc1 is the one byte msgpack never uses.
  EXPECT_EQ(DecodeError(std::string("\xc1", 1), &id), "invalid msgpack");
  std::string bytes = Encode(SampleOf("ack"));
  ASSERT_EQ(bytes.back(), '\x80');  // the empty body
  bytes.back() = '\xc1';
  EXPECT_EQ(DecodeError(bytes, &id), "invalid msgpack");
  EXPECT_EQ(id, 99u);  // the id is read only from valid msgpack
  EXPECT_EQ(DecodeError(""), "empty message");
}

TEST(IpcDecode, RejectsEveryTruncation) {
  for (const Envelope& e : SampleMessages()) {
    SCOPED_TRACE(std::string(TypeName(e.body)));
    const std::string bytes = Encode(e);
    for (size_t n = 1; n < bytes.size(); ++n) {
      // A container header near the end can declare more elements than the bytes left could hold.
      const std::string message = DecodeError(std::string_view(bytes).substr(0, n));
      ASSERT_TRUE(message.find("truncated") != std::string::npos || message.find("declares more") != std::string::npos)
          << n << ": " << message;
    }
  }
}

TEST(IpcDecode, RejectsOversizedInputUnread) {
  // A valid message padded past the limit: refused for its size, before parsing.
  std::string bytes = Encode(SampleOf("hello"));
  bytes.resize(kMaxMessageBytes + 1, '\0');
  EXPECT_EQ(DecodeError(bytes),
            "message of 16777217 bytes exceeds the limit of 16777216 bytes");
}

TEST(IpcDecode, RejectsWrongVersionAndKeepsTheId) {
  Envelope e = SampleOf("stats");
  e.version = 2;
  e.id = 77;
  uint64_t id = 0;
  EXPECT_EQ(DecodeError(Encode(e), &id), "unsupported protocol version 2; this kjitd speaks 1");
  EXPECT_EQ(id, 77u);

  Edit negative("stats");
  negative.Set(negative.envelope(), "v", negative.Value(-1));
  EXPECT_EQ(DecodeError(negative.Bytes()), "unsupported protocol version -1; this kjitd speaks 1");

  Edit text("stats");
  text.Set(text.envelope(), "v", text.Value(std::string("1")));
  EXPECT_EQ(DecodeError(text.Bytes()), "envelope.v: expected int, got str");
}

TEST(IpcDecode, RejectsUnknownTypeAndKeepsTheId) {
  Edit edit("stats");
  edit.Set(edit.envelope(), "type", edit.Value(std::string("frobnicate\n")));
  edit.Set(edit.envelope(), "id", edit.Value(uint64_t{31}));
  uint64_t id = 0;
  EXPECT_EQ(DecodeError(edit.Bytes(), &id), "unknown message type \"frobnicate\\x0a\"");
  EXPECT_EQ(id, 31u);
}

TEST(IpcDecode, RejectsMissingFields) {
  Edit body_field("lookup");
  body_field.Erase(body_field.body(), "arch");
  uint64_t id = 0;
  EXPECT_EQ(DecodeError(body_field.Bytes(), &id), "lookup.arch: required field is missing");
  EXPECT_EQ(id, SampleOf("lookup").id);

  Edit nested("list_tasks_reply");
  msgpack::object& tasks = *Edit::Find(nested.body(), "tasks");
  nested.Erase(tasks.via.array.ptr[2], "key_hash");
  EXPECT_EQ(DecodeError(nested.Bytes()), "list_tasks_reply.tasks[2].key_hash: required field is missing");

  for (const char* key : {"v", "type", "id", "body"}) {
    Edit envelope_field("ack");
    envelope_field.Erase(envelope_field.envelope(), key);
    EXPECT_EQ(DecodeError(envelope_field.Bytes()), "envelope." + std::string(key) + ": required field is missing");
  }
}

TEST(IpcDecode, RejectsMistypedFields) {
  Edit text_for_bin("lookup");
  text_for_bin.Set(text_for_bin.body(), "key_bytes", text_for_bin.Value(std::string("KJK")));
  EXPECT_EQ(DecodeError(text_for_bin.Bytes()), "lookup.key_bytes: expected bin, got str");

  Edit bin_for_text("hello");
  bin_for_text.Set(bin_for_text.body(), "client", bin_for_text.Bin("x"));
  EXPECT_EQ(DecodeError(bin_for_text.Bytes()), "hello.client: expected str, got bin");

  Edit int_for_bool("task_ack");
  int_for_bool.Set(int_for_bool.body(), "merged", int_for_bool.Value(1));
  EXPECT_EQ(DecodeError(int_for_bool.Bytes()), "task_ack.merged: expected bool, got int");

  Edit float_for_int("task_status");
  float_for_int.Set(float_for_int.body(), "task_id", float_for_int.Value(1.5));
  EXPECT_EQ(DecodeError(float_for_int.Bytes()), "task_status.task_id: expected int, got float64");

  Edit str_for_double("report_miss");
  str_for_double.Set(str_for_double.body(), "observed_us", str_for_double.Value(std::string("fast")));
  EXPECT_EQ(DecodeError(str_for_double.Bytes()), "report_miss.observed_us: expected float or int, got str");

  Edit nested("list_tasks_reply");
  msgpack::object& tasks = *Edit::Find(nested.body(), "tasks");
  nested.Set(tasks.via.array.ptr[1], "state", nested.Value(3));
  EXPECT_EQ(DecodeError(nested.Bytes()), "list_tasks_reply.tasks[1].state: expected str, got int");

  Edit element("hello");
  element.Set(element.body(), "capabilities", element.Value(std::vector<msgpack::object>{
                                                  element.Value(std::string("lookup")), msgpack::object()}));
  EXPECT_EQ(DecodeError(element.Bytes()), "hello.capabilities[1]: expected str, got nil");

  Edit map_value("stats_reply");
  map_value.Set(*Edit::Find(map_value.body(), "counters"), "requests", map_value.Value(std::string("many")));
  EXPECT_EQ(DecodeError(map_value.Bytes()), "stats_reply.counters[\"requests\"]: expected float or int, got str");

  Edit body("stats");
  body.Set(body.envelope(), "body", body.Value(std::vector<int>{}));
  EXPECT_EQ(DecodeError(body.Bytes()), "stats: expected map, got array");

  Edit nested_struct("task_status_reply");
  nested_struct.Set(nested_struct.body(), "task", nested_struct.Value(std::string("5")));
  EXPECT_EQ(DecodeError(nested_struct.Bytes()), "task_status_reply.task: expected map, got str");
}

TEST(IpcDecode, RejectsOutOfRangeIntegers) {
  Edit negative("hello");
  negative.Set(negative.body(), "pid", negative.Value(-1));
  EXPECT_EQ(DecodeError(negative.Bytes()), "hello.pid: -1 is out of range for uint32");

  Edit too_big("lookup");
  too_big.Set(too_big.body(), "arch", too_big.Value(uint64_t{1} << 31));
  EXPECT_EQ(DecodeError(too_big.Bytes()), "lookup.arch: 2147483648 is out of range for int32");

  Edit too_small("submit_task");
  too_small.Set(too_small.body(), "priority", too_small.Value(int64_t{-2147483649}));
  EXPECT_EQ(DecodeError(too_small.Bytes()), "submit_task.priority: -2147483649 is out of range for int32");

  Edit negative_id("ack");
  negative_id.Set(negative_id.envelope(), "id", negative_id.Value(-4));
  uint64_t id = 99;
  EXPECT_EQ(DecodeError(negative_id.Bytes(), &id), "envelope.id: -4 is out of range for uint64");
  EXPECT_EQ(id, 99u);

  Edit huge("task_ack");
  huge.Set(huge.body(), "task_id", huge.Value(std::numeric_limits<uint64_t>::max()));
  EXPECT_EQ(DecodeError(huge.Bytes()), "task_ack.task_id: 18446744073709551615 is out of range for int64");
}

TEST(IpcDecode, RejectsTriplesOfOtherLengths) {
  Edit two("lookup_reply");
  two.Set(two.body(), "grid", two.Value(std::vector<uint32_t>{1, 2}));
  EXPECT_EQ(DecodeError(two.Bytes()), "lookup_reply.grid: expected 3 elements (x, y, z), got 2");

  Edit four("submit_candidate");
  four.Set(four.body(), "block", four.Value(std::vector<uint32_t>{1, 2, 3, 4}));
  EXPECT_EQ(DecodeError(four.Bytes()), "submit_candidate.block: expected 3 elements (x, y, z), got 4");

  Edit negative("submit_candidate");
  negative.Set(negative.body(), "grid", negative.Value(std::vector<int>{1, -2, 3}));
  EXPECT_EQ(DecodeError(negative.Bytes()), "submit_candidate.grid[1]: -2 is out of range for uint32");
}

TEST(IpcDecode, RejectsTrailingBytes) {
  const std::string bytes = Encode(SampleOf("ack"));
  EXPECT_EQ(DecodeError(bytes + std::string(1, '\0')),
            "1 trailing byte after the message (a frame holds exactly one message)");
  EXPECT_EQ(DecodeError(bytes + bytes), std::to_string(bytes.size()) +
                                            " trailing bytes after the message (a frame holds exactly one message)");
}

TEST(IpcDecode, RejectsEnvelopesThatAreNotMaps) {
  EXPECT_EQ(DecodeError(FromHex("9401a3616b6b0080")), "envelope: expected map, got array");
  EXPECT_EQ(DecodeError(FromHex("c0")), "envelope: expected map, got nil");
  EXPECT_EQ(DecodeError(FromHex("a568656c6c6f")), "envelope: expected map, got str");
}

TEST(IpcDecode, RejectsDuplicateAndNonStringKeys) {
  Edit duplicate("lookup");
  duplicate.Set(duplicate.body(), "arch", duplicate.Value(80), /*append=*/true);
  EXPECT_EQ(DecodeError(duplicate.Bytes()), "lookup.arch: field appears twice");

  Edit duplicate_envelope("ack");
  duplicate_envelope.Set(duplicate_envelope.envelope(), "type", duplicate_envelope.Value(std::string("stats")),
                         /*append=*/true);
  EXPECT_EQ(DecodeError(duplicate_envelope.Bytes()), "envelope.type: field appears twice");

  Edit int_key("lookup");  // its sample has 8 fields (entries 0-7): the int key comes after them
  int_key.SetRawKey(int_key.body(), int_key.Value(7), int_key.Value(7));
  EXPECT_EQ(DecodeError(int_key.Bytes()), "lookup: field names must be str, got int (entry 8)");

  Edit counter_key("stats_reply");
  counter_key.SetRawKey(*Edit::Find(counter_key.body(), "counters"), counter_key.Value(7), counter_key.Value(1.0));
  EXPECT_EQ(DecodeError(counter_key.Bytes()), "stats_reply.counters: keys must be str, got int");

  Edit counter_twice("stats_reply");
  counter_twice.Set(*Edit::Find(counter_twice.body(), "counters"), "requests", counter_twice.Value(1.0),
                    /*append=*/true);
  EXPECT_EQ(DecodeError(counter_twice.Bytes()), "stats_reply.counters: key \"requests\" appears twice");
}

TEST(IpcDecode, RejectsNestingDeeperThanTheProtocolUses) {
  // envelope > body > unknown field > list > list: one level more than list_tasks_reply's envelope > body
  // > tasks > task.
  Edit deep("ack");
  deep.Set(deep.body(), "future", deep.Value(std::vector<std::vector<std::vector<int>>>{{{1}}}));
  EXPECT_EQ(DecodeError(deep.Bytes()),
            "arrays and maps nested deeper than 4 levels (envelope > body > list > element is the deepest the "
            "protocol uses)");

  // A deeply nested hostile message fails at the limit instead of recursing through it.
  std::string nested(100000, '\x91');
  nested += '\xc0';
  EXPECT_NE(DecodeError(nested).find("nested deeper than 4 levels"), std::string::npos);
}

TEST(IpcDecode, HostileDeclaredSizesFailFast) {
  const auto start = std::chrono::steady_clock::now();
  // Headers claiming 2^32-1 elements or entries: msgpack-c would allocate for
  // them before reading a single element (about 100 GB for the array).
  EXPECT_NE(DecodeError(FromHex("ddffffffff")).find("an array declares more elements than"),
            std::string::npos);
  EXPECT_NE(DecodeError(FromHex("dfffffffff")).find("a map declares more entries than"),
            std::string::npos);
  // Within kMaxCollectionSize, but more than the input could hold.
  EXPECT_NE(DecodeError(FromHex("dcffff")).find("an array declares more elements"), std::string::npos);
  // Inside an otherwise valid message, as an unknown field.
  Edit inner("ack");
  inner.Set(inner.body(), "future", inner.Value(0));
  std::string bytes = inner.Bytes();
  ASSERT_EQ(bytes.back(), '\0');
  bytes.back() = '\xdd';
  bytes += FromHex("ffffffff");
  EXPECT_NE(DecodeError(bytes).find("an array declares more elements"), std::string::npos);
  // A large input does not lift the fixed limit.
  std::string large = FromHex("ddffffffff");
  large.resize(kMaxMessageBytes, '\xc0');
  EXPECT_NE(DecodeError(large).find("an array declares more elements"), std::string::npos);
  // Strings and bins are bounded by the input itself.
  EXPECT_NE(DecodeError(FromHex("c6ffffffff00")).find("truncated"), std::string::npos);
  EXPECT_NE(DecodeError(FromHex("dbffffffff00")).find("truncated"), std::string::npos);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
}

TEST(IpcDecode, AcceptsTheLargestCollectionsAllowed) {
  Hello hello;
  hello.capabilities.assign(kMaxCollectionSize, "");
  Result<Envelope> decoded = Decode(Encode(Envelope{kProtocolVersion, 1, hello}));
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  EXPECT_EQ(std::get<Hello>(decoded->body).capabilities.size(), kMaxCollectionSize);

  hello.capabilities.push_back("");
  EXPECT_NE(DecodeError(Encode(Envelope{kProtocolVersion, 1, hello})).find("than allowed (at most 65536)"),
            std::string::npos);
}

TEST(IpcDecode, RandomMutationsFailCleanly) {
  std::vector<std::string> seeds;
  for (const Envelope& e : SampleMessages()) seeds.push_back(Encode(e));
  std::mt19937_64 rng(20240613);
  auto below = [&rng](size_t n) { return static_cast<size_t>(rng() % n); };
  int decoded_count = 0;
  constexpr int kMutations = 5000;
  for (int i = 0; i < kMutations; ++i) {
    std::string bytes = seeds[below(seeds.size())];
    for (size_t edits = 1 + below(4); edits > 0 && !bytes.empty(); --edits) {
      const size_t at = below(bytes.size());
      switch (below(5)) {
        case 0: bytes[at] = static_cast<char>(bytes[at] ^ (1 << below(8))); break;
        case 1: bytes[at] = static_cast<char>(rng()); break;
        case 2: bytes.insert(at, 1, static_cast<char>(rng())); break;
        case 3: bytes.erase(at, 1 + below(4)); break;
        default: bytes.insert(at, bytes.substr(below(bytes.size()), 1 + below(8))); break;
      }
    }
    uint64_t id = 0;
    Result<Envelope> decoded = Decode(bytes, &id);
    if (!decoded.ok()) {
      ASSERT_EQ(decoded.status().code(), StatusCode::kInvalidArgument) << ToHex(bytes);
      ASSERT_FALSE(decoded.status().message().empty());
      continue;
    }
    ++decoded_count;
    EXPECT_EQ(id, decoded->id);
    const std::string encoded = Encode(*decoded);
    Result<Envelope> again = Decode(encoded);
    ASSERT_TRUE(again.ok()) << again.status().ToString() << " for " << ToHex(bytes);
    ASSERT_EQ(Encode(*again), encoded) << ToHex(bytes);
  }
  // Some mutations (a changed number or letter) still decode; most must not.
  EXPECT_GT(decoded_count, 0);
  EXPECT_LT(decoded_count, kMutations);
}

// ---- Errors and announcements

TEST(IpcErrors, EveryStatusCodeRoundTrips) {
  for (int c = static_cast<int>(StatusCode::kOk) + 1; c <= static_cast<int>(kLastStatusCode); ++c) {
    const Status status(static_cast<StatusCode>(c), "details for code " + std::to_string(c));
    const Error error = ToError(status);
    EXPECT_EQ(error.code, StatusCodeName(status.code()));
    EXPECT_EQ(error.message, status.message());
    const Status back = FromError(error);
    EXPECT_EQ(back.code(), status.code()) << error.code;
    EXPECT_EQ(back.message(), status.message());
  }
  EXPECT_EQ(ToError(Status(StatusCode::kUnavailable, "evaluator is not running")).code, "unavailable");
}

TEST(IpcErrors, UnknownCodesAndOkBecomeInternal) {
  const Status unknown = FromError(Error{"quota_exceeded", "too many episodes"});
  EXPECT_EQ(unknown.code(), StatusCode::kInternal);
  EXPECT_EQ(unknown.message(), "error reply with unknown code \"quota_exceeded\": too many episodes");
  // An error reply is never a success, whatever its code says.
  EXPECT_EQ(FromError(Error{"ok", ""}).code(), StatusCode::kInternal);
}

TEST(IpcAnnounce, TopicIsArchThenKeyHash) {
  EXPECT_EQ(AnnounceTopic(Announce{90, "c97c4393cb47064a169d4bec25de480d", 3}),
            "sm_90/c97c4393cb47064a169d4bec25de480d");
  EXPECT_EQ(AnnounceTopic(Announce{100, "00", 3}), "sm_100/00");
}

}  // namespace
}  // namespace kjit::ipc
