#include "kjit/ipc/messages.h"

#include <algorithm>
#include <array>
#include <bit>
#include <concepts>
#include <exception>
#include <limits>
#include <new>
#include <span>
#include <type_traits>
#include <utility>

#include <msgpack.hpp>

namespace kjit::ipc {
namespace {

// ---- The schema: each message's wire name and fields, in one place for both directions.
//
// Schema<T>::Fields(message, visit) calls visit(name, field) for every field in
// declaration order; the encoder and the decoder are both visitors, so they
// cannot disagree on names, order or types. M is T or const T.

// A std::string that travels as msgpack bin (arbitrary bytes) instead of str (text).
template <typename S>
struct AsBin {
  S& bytes;
};
template <typename S>
AsBin(S&) -> AsBin<S>;

template <typename T>
struct Schema;

template <>
struct Schema<Hello> {
  static constexpr std::string_view kName = "hello";
  template <typename M, typename V>
  static void Fields(M& m, V&& visit) {
    visit("client", m.client);
    visit("pid", m.pid);
    visit("capabilities", m.capabilities);
  }
};
template <>
struct Schema<HelloReply> {
  static constexpr std::string_view kName = "hello_reply";
  template <typename M, typename V>
  static void Fields(M& m, V&& visit) {
    visit("server", m.server);
    visit("protocol_version", m.protocol_version);
    visit("capabilities", m.capabilities);
    visit("announce_endpoint", m.announce_endpoint);
  }
};
template <>
struct Schema<Lookup> {
  static constexpr std::string_view kName = "lookup";
  template <typename M, typename V>
  static void Fields(M& m, V&& visit) {
    visit("key_bytes", AsBin{m.key_bytes});
    visit("arch", m.arch);
    visit("driver_version", m.driver_version);
    visit("nvrtc_major", m.nvrtc_major);
    visit("nvrtc_minor", m.nvrtc_minor);
    visit("codegen_version", m.codegen_version);
    visit("device_model", m.device_model);
    visit("torch_version", m.torch_version);
  }
};
template <>
struct Schema<LookupReply> {
  static constexpr std::string_view kName = "lookup_reply";
  template <typename M, typename V>
  static void Fields(M& m, V&& visit) {
    visit("found", m.found);
    visit("record_id", m.record_id);
    visit("cubin", AsBin{m.cubin});
    visit("entry_point", m.entry_point);
    visit("grid", m.grid);
    visit("block", m.block);
    visit("dynamic_shared_bytes", m.dynamic_shared_bytes);
    visit("workspace_bytes", m.workspace_bytes);
    visit("reason", m.reason);
  }
};
template <>
struct Schema<ReportMiss> {
  static constexpr std::string_view kName = "report_miss";
  template <typename M, typename V>
  static void Fields(M& m, V&& visit) {
    visit("key_bytes", AsBin{m.key_bytes});
    visit("calls", m.calls);
    visit("observed_us", m.observed_us);
  }
};
template <>
struct Schema<ReportFailure> {
  static constexpr std::string_view kName = "report_failure";
  template <typename M, typename V>
  static void Fields(M& m, V&& visit) {
    visit("key_bytes", AsBin{m.key_bytes});
    visit("record_id", m.record_id);
    visit("stage", m.stage);
    visit("reason", m.reason);
  }
};
template <>
struct Schema<FailureAck> {
  static constexpr std::string_view kName = "failure_ack";
  template <typename M, typename V>
  static void Fields(M& m, V&& visit) {
    visit("out_of_service", m.out_of_service);
    visit("reverify", m.reverify);
    visit("task_id", m.task_id);
  }
};
template <>
struct Schema<ReportActivity> {
  static constexpr std::string_view kName = "report_activity";
  template <typename M, typename V>
  static void Fields(M& m, V&& visit) {
    visit("pid", m.pid);
    visit("devices", m.devices);
    visit("calls", m.calls);
  }
};
// Not a message of its own: the element of report_uses.
template <>
struct Schema<KeyUse> {
  static constexpr std::string_view kName = "key_use";
  template <typename M, typename V>
  static void Fields(M& m, V&& visit) {
    visit("key_hash", m.key_hash);
    visit("record_id", m.record_id);
    visit("hits", m.hits);
    visit("misses", m.misses);
  }
};
template <>
struct Schema<ReportUses> {
  static constexpr std::string_view kName = "report_uses";
  template <typename M, typename V>
  static void Fields(M& m, V&& visit) {
    visit("pid", m.pid);
    visit("uses", m.uses);
    visit("run_id", m.run_id);
    visit("program", m.program);
    visit("started_unix_ms", m.started_unix_ms);
  }
};
template <>
struct Schema<SubmitTask> {
  static constexpr std::string_view kName = "submit_task";
  template <typename M, typename V>
  static void Fields(M& m, V&& visit) {
    visit("key_bytes", AsBin{m.key_bytes});
    visit("priority", m.priority);
    visit("detail", m.detail);
  }
};
template <>
struct Schema<TaskAck> {
  static constexpr std::string_view kName = "task_ack";
  template <typename M, typename V>
  static void Fields(M& m, V&& visit) {
    visit("task_id", m.task_id);
    visit("merged", m.merged);
  }
};
// Not a message of its own: the element of task_status_reply and list_tasks_reply.
template <>
struct Schema<TaskInfo> {
  static constexpr std::string_view kName = "task_info";
  template <typename M, typename V>
  static void Fields(M& m, V&& visit) {
    visit("id", m.id);
    visit("key_hash", m.key_hash);
    visit("key_text", m.key_text);
    visit("state", m.state);
    visit("priority", m.priority);
    visit("calls", m.calls);
    visit("observed_us", m.observed_us);
    visit("expected_gain_us", m.expected_gain_us);
    visit("attempts", m.attempts);
    visit("detail", m.detail);
    visit("created_unix_ms", m.created_unix_ms);
    visit("updated_unix_ms", m.updated_unix_ms);
    visit("round", m.round);
    visit("trials", m.trials);
    visit("best_us", m.best_us);
    visit("baseline_us", m.baseline_us);
    visit("floor_us", m.floor_us);
    visit("record_id", m.record_id);
    visit("policy_version", m.policy_version);
    visit("claimed_by", m.claimed_by);
  }
};
template <>
struct Schema<TaskStatus> {
  static constexpr std::string_view kName = "task_status";
  template <typename M, typename V>
  static void Fields(M& m, V&& visit) {
    visit("task_id", m.task_id);
  }
};
template <>
struct Schema<TaskStatusReply> {
  static constexpr std::string_view kName = "task_status_reply";
  template <typename M, typename V>
  static void Fields(M& m, V&& visit) {
    visit("task", m.task);
  }
};
template <>
struct Schema<ListTasks> {
  static constexpr std::string_view kName = "list_tasks";
  template <typename M, typename V>
  static void Fields(M& m, V&& visit) {
    visit("state", m.state);
    visit("limit", m.limit);
  }
};
template <>
struct Schema<ListTasksReply> {
  static constexpr std::string_view kName = "list_tasks_reply";
  template <typename M, typename V>
  static void Fields(M& m, V&& visit) {
    visit("tasks", m.tasks);
  }
};
template <>
struct Schema<Stats> {
  static constexpr std::string_view kName = "stats";
  template <typename M, typename V>
  static void Fields(M&, V&&) {}
};
template <>
struct Schema<StatsReply> {
  static constexpr std::string_view kName = "stats_reply";
  template <typename M, typename V>
  static void Fields(M& m, V&& visit) {
    visit("counters", m.counters);
    visit("evaluators", m.evaluators);
  }
};
template <>
struct Schema<Shutdown> {
  static constexpr std::string_view kName = "shutdown";
  template <typename M, typename V>
  static void Fields(M&, V&&) {}
};
template <>
struct Schema<Ack> {
  static constexpr std::string_view kName = "ack";
  template <typename M, typename V>
  static void Fields(M&, V&&) {}
};
template <>
struct Schema<OpenEpisode> {
  static constexpr std::string_view kName = "open_episode";
  template <typename M, typename V>
  static void Fields(M& m, V&& visit) {
    visit("key_bytes", AsBin{m.key_bytes});
  }
};
template <>
struct Schema<Observation> {
  static constexpr std::string_view kName = "observation";
  template <typename M, typename V>
  static void Fields(M& m, V&& visit) {
    visit("episode_id", m.episode_id);
    visit("key_text", m.key_text);
    visit("op", m.op);
    visit("inputs", m.inputs);
    visit("baseline_us", m.baseline_us);
    visit("device", m.device);
  }
};
template <>
struct Schema<SubmitCandidate> {
  static constexpr std::string_view kName = "submit_candidate";
  template <typename M, typename V>
  static void Fields(M& m, V&& visit) {
    visit("episode_id", m.episode_id);
    visit("source", m.source);
    visit("entry_point", m.entry_point);
    visit("options", m.options);
    visit("grid", m.grid);
    visit("block", m.block);
    visit("dynamic_shared_bytes", m.dynamic_shared_bytes);
    visit("design", m.design);
    visit("workspace_bytes", m.workspace_bytes);
    visit("compile_ahead", m.compile_ahead);
  }
};
template <>
struct Schema<CandidateResult> {
  static constexpr std::string_view kName = "candidate_result";
  template <typename M, typename V>
  static void Fields(M& m, V&& visit) {
    visit("compiled", m.compiled);
    visit("compile_log", m.compile_log);
    visit("verified", m.verified);
    visit("verdict", m.verdict);
    visit("median_us", m.median_us);
    visit("baseline_us", m.baseline_us);
    visit("reward", m.reward);
    visit("profile", m.profile);
  }
};
template <>
struct Schema<CloseEpisode> {
  static constexpr std::string_view kName = "close_episode";
  template <typename M, typename V>
  static void Fields(M& m, V&& visit) {
    visit("episode_id", m.episode_id);
  }
};
template <>
struct Schema<Error> {
  static constexpr std::string_view kName = "error";
  template <typename M, typename V>
  static void Fields(M& m, V&& visit) {
    visit("code", m.code);
    visit("message", m.message);
  }
};
template <>
struct Schema<Announce> {
  static constexpr std::string_view kName = "announce";
  template <typename M, typename V>
  static void Fields(M& m, V&& visit) {
    visit("arch", m.arch);
    visit("key_hash", m.key_hash);
    visit("record_id", m.record_id);
  }
};

template <typename T>
concept Struct = requires { Schema<T>::kName; };

template <size_t... I>
constexpr bool BodyNamesAreDistinct(std::index_sequence<I...>) {
  constexpr std::array<std::string_view, sizeof...(I)> names = {Schema<std::variant_alternative_t<I, Body>>::kName...};
  for (size_t a = 0; a < names.size(); ++a) {
    for (size_t b = a + 1; b < names.size(); ++b) {
      if (names[a] == names[b]) return false;
    }
  }
  return true;
}
static_assert(BodyNamesAreDistinct(std::make_index_sequence<std::variant_size_v<Body>>()));

// ---- Encoding

class Writer {
 public:
  explicit Writer(msgpack::sbuffer& out) : out_(out), packer_(out) {}

  void Write(const Envelope& envelope) {
    packer_.pack_map(4);
    Str("v");
    packer_.pack_uint32(envelope.version);
    Str("type");
    Str(TypeName(envelope.body));
    Str("id");
    packer_.pack_uint64(envelope.id);
    Str("body");
    std::visit([this](const auto& message) { Value(message); }, envelope.body);
  }

 private:
  void Str(std::string_view s) {
    packer_.pack_str(static_cast<uint32_t>(s.size()));
    packer_.pack_str_body(s.data(), static_cast<uint32_t>(s.size()));
  }

  void Value(const std::string& s) { Str(s); }
  void Value(AsBin<const std::string> bin) {
    packer_.pack_bin(static_cast<uint32_t>(bin.bytes.size()));
    packer_.pack_bin_body(bin.bytes.data(), static_cast<uint32_t>(bin.bytes.size()));
  }
  void Value(bool b) {
    if (b) {
      packer_.pack_true();
    } else {
      packer_.pack_false();
    }
  }
  // msgpack-c writes each integer in its shortest form.
  void Value(int32_t v) { packer_.pack_int32(v); }
  void Value(int64_t v) { packer_.pack_int64(v); }
  void Value(uint32_t v) { packer_.pack_uint32(v); }
  void Value(uint64_t v) { packer_.pack_uint64(v); }
  // Always float64, written here: msgpack-c's pack_double writes integral
  // values as integers (so 2.0 arrives as an int in other languages, and -0.0
  // as 0) and converts values at 2^64 to uint64_t, which is undefined.
  void Value(double v) {
    char bytes[9];
    bytes[0] = static_cast<char>(0xcb);
    const uint64_t bits = std::bit_cast<uint64_t>(v);
    for (int i = 0; i < 8; ++i) bytes[1 + i] = static_cast<char>(bits >> (56 - 8 * i));
    out_.write(bytes, sizeof(bytes));
  }
  void Value(const uint32_t (&triple)[3]) {
    packer_.pack_array(3);
    for (uint32_t v : triple) packer_.pack_uint32(v);
  }
  template <typename T>
  void Value(const std::vector<T>& list) {
    packer_.pack_array(static_cast<uint32_t>(list.size()));
    for (const T& element : list) Value(element);
  }
  template <typename T>
  void Value(const std::map<std::string, T>& map) {
    packer_.pack_map(static_cast<uint32_t>(map.size()));
    for (const auto& [key, value] : map) {
      Str(key);
      Value(value);
    }
  }
  template <typename T>
  static bool Present(const T&) {
    return true;
  }
  template <typename T>
  static bool Present(const std::optional<T>& field) {
    return field.has_value();
  }
  template <typename T>
  void Value(const std::optional<T>& field) {
    Value(*field);  // only called when present
  }
  // An optional field (added within a protocol version) is left out when empty,
  // so a message without it is byte for byte what older peers sent.
  template <Struct T>
  void Value(const T& message) {
    uint32_t field_count = 0;
    Schema<T>::Fields(message, [&field_count](std::string_view, const auto& field) {
      if (Present(field)) ++field_count;
    });
    packer_.pack_map(field_count);
    Schema<T>::Fields(message, [this](std::string_view name, const auto& field) {
      if (!Present(field)) return;
      Str(name);
      Value(field);
    });
  }

  msgpack::sbuffer& out_;
  msgpack::packer<msgpack::sbuffer> packer_;
};

// ---- Decoding

// Where a value sits in a message ("list_tasks_reply.tasks[3].state"), as a
// chain up to the root; spelled out only when an error is reported.
struct Path {
  enum class Kind { kRoot, kField, kIndex, kKey };
  const Path* parent = nullptr;
  Kind kind = Kind::kRoot;
  std::string_view name;  // root, field or map key
  size_t index = 0;

  static Path Root(std::string_view name) { return {nullptr, Kind::kRoot, name, 0}; }
  Path Field(std::string_view field) const { return {this, Kind::kField, field, 0}; }
  Path Index(size_t i) const { return {this, Kind::kIndex, {}, i}; }
  Path Key(std::string_view key) const { return {this, Kind::kKey, key, 0}; }

  std::string ToString() const;
};

// Text from the wire, made safe to put in an error message: printable ASCII
// only, and short, since the input may be hostile and the message is logged.
std::string Quote(std::string_view text) {
  constexpr size_t kShown = 64;
  std::string out = "\"";
  for (char c : text.substr(0, kShown)) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte >= 0x20 && byte < 0x7f && c != '"' && c != '\\') {
      out += c;
    } else {
      constexpr char kHex[] = "0123456789abcdef";
      out += "\\x";
      out += kHex[byte >> 4];
      out += kHex[byte & 15];
    }
  }
  out += '"';
  if (text.size() > kShown) out += "...";
  return out;
}

std::string Path::ToString() const {
  std::string prefix = parent != nullptr ? parent->ToString() : std::string();
  switch (kind) {
    case Kind::kRoot: return std::string(name);
    case Kind::kField: return prefix + "." + std::string(name);
    case Kind::kIndex: return prefix + "[" + std::to_string(index) + "]";
    case Kind::kKey: return prefix + "[" + Quote(name) + "]";
  }
  return prefix;
}

std::string_view WireTypeName(const msgpack::object& o) {
  switch (o.type) {
    case msgpack::type::NIL: return "nil";
    case msgpack::type::BOOLEAN: return "bool";
    case msgpack::type::POSITIVE_INTEGER: return "int";
    case msgpack::type::NEGATIVE_INTEGER: return "negative int";
    case msgpack::type::FLOAT32: return "float32";
    case msgpack::type::FLOAT64: return "float64";
    case msgpack::type::STR: return "str";
    case msgpack::type::BIN: return "bin";
    case msgpack::type::ARRAY: return "array";
    case msgpack::type::MAP: return "map";
    case msgpack::type::EXT: return "ext";
  }
  return "unknown";
}

Status Problem(const Path& path, std::string_view what) {
  return InvalidArgument(path.ToString() + ": " + std::string(what));
}

Status TypeMismatch(const Path& path, std::string_view expected, const msgpack::object& got) {
  return Problem(path, "expected " + std::string(expected) + ", got " + std::string(WireTypeName(got)));
}

std::string_view View(const msgpack::object_str& s) { return {s.ptr, s.size}; }

// The value of `field` in the map `o`, or null if absent. Field names must be
// str and appear once: with two, different readers could pick different ones.
Status FindField(const msgpack::object& o, const Path& map_path, std::string_view field,
                 const msgpack::object** value) {
  *value = nullptr;
  for (const msgpack::object_kv& entry : std::span(o.via.map.ptr, o.via.map.size)) {
    if (entry.key.type != msgpack::type::STR || View(entry.key.via.str) != field) continue;
    if (*value != nullptr) return Problem(map_path.Field(field), "field appears twice");
    *value = &entry.val;
  }
  return Status::Ok();
}

Status CheckFieldNames(const msgpack::object& o, const Path& path) {
  for (uint32_t i = 0; i < o.via.map.size; ++i) {
    const msgpack::object& key = o.via.map.ptr[i].key;
    if (key.type != msgpack::type::STR) {
      return Problem(path, "field names must be str, got " + std::string(WireTypeName(key)) + " (entry " +
                               std::to_string(i) + ")");
    }
  }
  return Status::Ok();
}

template <Struct T>
Status ReadValue(const msgpack::object& o, const Path& path, T& out);

Status ReadValue(const msgpack::object& o, const Path& path, std::string& out) {
  if (o.type != msgpack::type::STR) return TypeMismatch(path, "str", o);
  out.assign(o.via.str.ptr, o.via.str.size);
  return Status::Ok();
}

Status ReadValue(const msgpack::object& o, const Path& path, AsBin<std::string> out) {
  if (o.type != msgpack::type::BIN) return TypeMismatch(path, "bin", o);
  out.bytes.assign(o.via.bin.ptr, o.via.bin.size);
  return Status::Ok();
}

Status ReadValue(const msgpack::object& o, const Path& path, bool& out) {
  if (o.type != msgpack::type::BOOLEAN) return TypeMismatch(path, "bool", o);
  out = o.via.boolean;
  return Status::Ok();
}

template <typename Int>
constexpr std::string_view IntTypeName() {
  if constexpr (std::is_same_v<Int, int32_t>) {
    return "int32";
  } else if constexpr (std::is_same_v<Int, int64_t>) {
    return "int64";
  } else if constexpr (std::is_same_v<Int, uint32_t>) {
    return "uint32";
  } else {
    static_assert(std::is_same_v<Int, uint64_t>, "a field of an integer type the protocol does not use");
    return "uint64";
  }
}

// Any msgpack integer encoding is accepted (senders need not pick the shortest)
// as long as the value fits the field.
template <typename Int>
  requires(std::integral<Int> && !std::same_as<Int, bool>)
Status ReadValue(const msgpack::object& o, const Path& path, Int& out) {
  using Limits = std::numeric_limits<Int>;
  if (o.type == msgpack::type::POSITIVE_INTEGER) {
    if (o.via.u64 > static_cast<uint64_t>(Limits::max())) {
      return Problem(path, std::to_string(o.via.u64) + " is out of range for " + std::string(IntTypeName<Int>()));
    }
    out = static_cast<Int>(o.via.u64);
    return Status::Ok();
  }
  if (o.type == msgpack::type::NEGATIVE_INTEGER) {
    if (std::is_unsigned_v<Int> || o.via.i64 < static_cast<int64_t>(Limits::min())) {
      return Problem(path, std::to_string(o.via.i64) + " is out of range for " + std::string(IntTypeName<Int>()));
    }
    out = static_cast<Int>(o.via.i64);
    return Status::Ok();
  }
  return TypeMismatch(path, "int", o);
}

// Integers are accepted too: some msgpack libraries write 2.0 as 2.
Status ReadValue(const msgpack::object& o, const Path& path, double& out) {
  switch (o.type) {
    case msgpack::type::FLOAT32:
    case msgpack::type::FLOAT64: out = o.via.f64; return Status::Ok();
    case msgpack::type::POSITIVE_INTEGER: out = static_cast<double>(o.via.u64); return Status::Ok();
    case msgpack::type::NEGATIVE_INTEGER: out = static_cast<double>(o.via.i64); return Status::Ok();
    default: return TypeMismatch(path, "float or int", o);
  }
}

Status ReadValue(const msgpack::object& o, const Path& path, uint32_t (&out)[3]) {
  if (o.type != msgpack::type::ARRAY) return TypeMismatch(path, "array", o);
  if (o.via.array.size != 3) {
    return Problem(path, "expected 3 elements (x, y, z), got " + std::to_string(o.via.array.size));
  }
  for (size_t i = 0; i < 3; ++i) KJIT_RETURN_IF_ERROR(ReadValue(o.via.array.ptr[i], path.Index(i), out[i]));
  return Status::Ok();
}

template <typename T>
Status ReadValue(const msgpack::object& o, const Path& path, std::vector<T>& out) {
  if (o.type != msgpack::type::ARRAY) return TypeMismatch(path, "array", o);
  out.clear();
  out.resize(o.via.array.size);
  for (size_t i = 0; i < out.size(); ++i) KJIT_RETURN_IF_ERROR(ReadValue(o.via.array.ptr[i], path.Index(i), out[i]));
  return Status::Ok();
}

template <typename T>
Status ReadValue(const msgpack::object& o, const Path& path, std::map<std::string, T>& out) {
  if (o.type != msgpack::type::MAP) return TypeMismatch(path, "map", o);
  out.clear();
  for (const msgpack::object_kv& entry : std::span(o.via.map.ptr, o.via.map.size)) {
    if (entry.key.type != msgpack::type::STR) {
      return Problem(path, "keys must be str, got " + std::string(WireTypeName(entry.key)));
    }
    const std::string_view key = View(entry.key.via.str);
    auto [it, inserted] = out.try_emplace(std::string(key));
    if (!inserted) return Problem(path, "key " + Quote(key) + " appears twice");
    KJIT_RETURN_IF_ERROR(ReadValue(entry.val, path.Key(key), it->second));
  }
  return Status::Ok();
}

template <typename T>
struct IsOptional : std::false_type {};
template <typename T>
struct IsOptional<std::optional<T>> : std::true_type {};

template <typename T>
Status ReadValue(const msgpack::object& o, const Path& path, std::optional<T>& out) {
  out.emplace();
  return ReadValue(o, path, *out);
}

// Every field is required except std::optional ones (fields added within a
// protocol version: absent from older peers' messages). Fields the schema does
// not name are skipped unread, so a newer peer may add fields within a version.
template <Struct T>
Status ReadValue(const msgpack::object& o, const Path& path, T& out) {
  if (o.type != msgpack::type::MAP) return TypeMismatch(path, "map", o);
  KJIT_RETURN_IF_ERROR(CheckFieldNames(o, path));
  Status status;
  Schema<T>::Fields(out, [&](std::string_view name, auto&& field) {
    if (!status.ok()) return;
    const msgpack::object* value = nullptr;
    status = FindField(o, path, name, &value);
    if (!status.ok()) return;
    const Path field_path = path.Field(name);
    if (value == nullptr) {
      if constexpr (IsOptional<std::decay_t<decltype(field)>>::value) {
        field.reset();
      } else {
        status = Problem(field_path, "required field is missing");
      }
      return;
    }
    status = ReadValue(*value, field_path, field);
  });
  return status;
}

using BodyReader = Status (*)(const msgpack::object&, const Path&, Body&);

template <typename T>
Status ReadBody(const msgpack::object& o, const Path& path, Body& body) {
  T message;
  KJIT_RETURN_IF_ERROR(ReadValue(o, path, message));
  body = std::move(message);
  return Status::Ok();
}

struct BodyType {
  std::string_view name;
  BodyReader read;
};

template <size_t... I>
constexpr std::array<BodyType, sizeof...(I)> MakeBodyTypes(std::index_sequence<I...>) {
  return {{{Schema<std::variant_alternative_t<I, Body>>::kName, &ReadBody<std::variant_alternative_t<I, Body>>}...}};
}
constexpr auto kBodyTypes = MakeBodyTypes(std::make_index_sequence<std::variant_size_v<Body>>());

// msgpack-c allocates room for a container's declared element count before
// reading any element (24 bytes each). Every element takes at least one byte of
// input and every map entry two, so limits no larger than the input keep what a
// small hostile message can make it allocate small, whatever count it declares.
msgpack::unpack_limit LimitsFor(size_t input_bytes) {
  const size_t array = std::min(input_bytes, kMaxCollectionSize);
  const size_t map = std::min(input_bytes / 2, kMaxCollectionSize);
  return msgpack::unpack_limit(array, map, /*str=*/kMaxMessageBytes, /*bin=*/kMaxMessageBytes,
                               /*ext=*/kMaxMessageBytes, /*depth=*/kMaxNesting);
}

// Strings and bins point into the caller's input instead of being copied into
// msgpack's zone: the input outlives the parsed tree, which never leaves Decode.
bool ReferenceInput(msgpack::type::object_type, std::size_t, void*) { return true; }

Result<Envelope> DecodeOrThrow(std::string_view bytes, uint64_t* id_out) {
  size_t parsed = 0;
  const msgpack::object_handle handle =
      msgpack::unpack(bytes.data(), bytes.size(), parsed, &ReferenceInput, nullptr, LimitsFor(bytes.size()));
  if (parsed != bytes.size()) {
    const size_t extra = bytes.size() - parsed;
    return InvalidArgument(std::to_string(extra) + (extra == 1 ? " trailing byte" : " trailing bytes") +
                           " after the message (a frame holds exactly one message)");
  }

  const msgpack::object& root = handle.get();
  const Path envelope_path = Path::Root("envelope");
  if (root.type != msgpack::type::MAP) return TypeMismatch(envelope_path, "map", root);
  KJIT_RETURN_IF_ERROR(CheckFieldNames(root, envelope_path));
  const msgpack::object* fields[4];
  constexpr std::string_view kFieldNames[4] = {"id", "v", "type", "body"};
  for (size_t i = 0; i < 4; ++i) {
    KJIT_RETURN_IF_ERROR(FindField(root, envelope_path, kFieldNames[i], &fields[i]));
    if (fields[i] == nullptr) return Problem(envelope_path.Field(kFieldNames[i]), "required field is missing");
  }
  const auto& [id, version, type, body] = fields;

  // The id first, so that whatever is wrong after it, the error reply can carry it.
  Envelope envelope;
  KJIT_RETURN_IF_ERROR(ReadValue(*id, envelope_path.Field("id"), envelope.id));
  if (id_out != nullptr) *id_out = envelope.id;

  if (version->type != msgpack::type::POSITIVE_INTEGER && version->type != msgpack::type::NEGATIVE_INTEGER) {
    return TypeMismatch(envelope_path.Field("v"), "int", *version);
  }
  if (version->type == msgpack::type::NEGATIVE_INTEGER || version->via.u64 != kProtocolVersion) {
    const std::string got = version->type == msgpack::type::NEGATIVE_INTEGER ? std::to_string(version->via.i64)
                                                                             : std::to_string(version->via.u64);
    return InvalidArgument("unsupported protocol version " + got + "; this kjitd speaks " +
                           std::to_string(kProtocolVersion));
  }
  envelope.version = kProtocolVersion;

  if (type->type != msgpack::type::STR) return TypeMismatch(envelope_path.Field("type"), "str", *type);
  const std::string_view type_name = View(type->via.str);
  const auto known = std::find_if(kBodyTypes.begin(), kBodyTypes.end(),
                                  [type_name](const BodyType& t) { return t.name == type_name; });
  if (known == kBodyTypes.end()) return InvalidArgument("unknown message type " + Quote(type_name));

  KJIT_RETURN_IF_ERROR(known->read(*body, Path::Root(known->name), envelope.body));
  return envelope;
}

}  // namespace

std::string_view TypeName(const Body& body) {
  return std::visit([](const auto& message) { return Schema<std::decay_t<decltype(message)>>::kName; }, body);
}

std::string Encode(const Envelope& envelope) {
  msgpack::sbuffer buffer;
  Writer(buffer).Write(envelope);
  return std::string(buffer.data(), buffer.size());
}

Result<Envelope> Decode(std::string_view bytes, uint64_t* id_out) {
  if (bytes.size() > kMaxMessageBytes) {
    return InvalidArgument("message of " + std::to_string(bytes.size()) + " bytes exceeds the limit of " +
                           std::to_string(kMaxMessageBytes) + " bytes");
  }
  if (bytes.empty()) return InvalidArgument("empty message");
  // msgpack-c reports malformed input by throwing; nothing may escape to the caller.
  try {
    return DecodeOrThrow(bytes, id_out);
  } catch (const msgpack::insufficient_bytes&) {
    return InvalidArgument("truncated message: the msgpack data ends inside a value");
  } catch (const msgpack::depth_size_overflow&) {
    return InvalidArgument("arrays and maps nested deeper than " + std::to_string(kMaxNesting) +
                           " levels (envelope > body > list > element is the deepest the protocol uses)");
  } catch (const msgpack::array_size_overflow&) {
    return InvalidArgument("an array declares more elements than the message holds or than allowed (at most " +
                           std::to_string(kMaxCollectionSize) + ")");
  } catch (const msgpack::map_size_overflow&) {
    return InvalidArgument("a map declares more entries than the message holds or than allowed (at most " +
                           std::to_string(kMaxCollectionSize) + ")");
  } catch (const msgpack::size_overflow&) {
    return InvalidArgument("a str, bin or ext declares more bytes than the message can hold");
  } catch (const msgpack::parse_error&) {
    return InvalidArgument("invalid msgpack");
  } catch (const std::bad_alloc&) {
    return InvalidArgument("out of memory decoding a message of " + std::to_string(bytes.size()) + " bytes");
  } catch (const std::exception& e) {
    return InvalidArgument(std::string("invalid msgpack: ") + e.what());
  } catch (...) {
    return InvalidArgument("invalid msgpack");
  }
}

Error ToError(const Status& status) {
  return Error{std::string(StatusCodeName(status.code())), status.message()};
}

Status FromError(const Error& error) {
  // An Error reply always means failure: a code of "ok" must not turn it into success.
  for (int c = static_cast<int>(StatusCode::kOk) + 1; c <= static_cast<int>(kLastStatusCode); ++c) {
    const auto code = static_cast<StatusCode>(c);
    if (StatusCodeName(code) == error.code) return Status(code, error.message);
  }
  return Internal("error reply with unknown code " + Quote(error.code) + ": " + error.message);
}

std::string AnnounceTopic(const Announce& announce) {
  return "sm_" + std::to_string(announce.arch) + "/" + announce.key_hash;
}

}  // namespace kjit::ipc

namespace kjit::ipc {

std::map<std::string, std::string> DesignToWire(const cache::DesignPoint& design) {
  std::map<std::string, std::string> wire{{"family", design.family}, {"policy_version", design.policy_version}};
  for (const auto& [name, value] : design.knobs) wire["knob." + name] = value;
  return wire;
}

cache::DesignPoint DesignFromWire(const std::map<std::string, std::string>& wire) {
  cache::DesignPoint design;
  for (const auto& [name, value] : wire) {
    if (name == "family") {
      design.family = value;
    } else if (name == "policy_version") {
      design.policy_version = value;
    } else if (name.starts_with("knob.") && name.size() > 5) {
      design.knobs[name.substr(5)] = value;
    }
  }
  return design;
}

}  // namespace kjit::ipc
