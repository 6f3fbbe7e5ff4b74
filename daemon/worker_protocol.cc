#include "worker_protocol.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <nlohmann/json.hpp>

#include "kjit/runtime/hash.h"

namespace kjit::daemon {
namespace {

using nlohmann::json;

json ToJson(const TimingStats& t) {
  return {{"median_us", t.median_us}, {"spread_us", t.spread_us}, {"ci_rel", t.ci_rel},
          {"min_us", t.min_us},       {"max_us", t.max_us},       {"runs", t.runs}};
}
TimingStats TimingFrom(const json& j) {
  TimingStats t;
  t.median_us = j.at("median_us").get<double>();
  t.spread_us = j.at("spread_us").get<double>();
  t.ci_rel = j.at("ci_rel").get<double>();
  t.min_us = j.at("min_us").get<double>();
  t.max_us = j.at("max_us").get<double>();
  t.runs = j.at("runs").get<int>();
  return t;
}

json ToJson(const Roofline& r) {
  return {{"bytes", r.bytes},
          {"flops", r.flops},
          {"floor_us", r.floor_us},
          {"bandwidth_fraction", r.bandwidth_fraction},
          {"flop_fraction", r.flop_fraction}};
}
Roofline RooflineFrom(const json& j) {
  Roofline r;
  r.bytes = j.at("bytes").get<double>();
  r.flops = j.at("flops").get<double>();
  r.floor_us = j.at("floor_us").get<double>();
  r.bandwidth_fraction = j.at("bandwidth_fraction").get<double>();
  r.flop_fraction = j.at("flop_fraction").get<double>();
  return r;
}

json ToJson(const cache::LaunchShape& l) {
  json j = {{"grid", {l.grid[0], l.grid[1], l.grid[2]}},
            {"block", {l.block[0], l.block[1], l.block[2]}},
            {"dynamic_shared_bytes", l.dynamic_shared_bytes}};
  if (l.workspace_bytes != 0) j["workspace_bytes"] = l.workspace_bytes;  // absent: none (kernel ABI v1)
  return j;
}
cache::LaunchShape LaunchFrom(const json& j) {
  cache::LaunchShape l;
  const auto grid = j.at("grid").get<std::vector<uint32_t>>();
  const auto block = j.at("block").get<std::vector<uint32_t>>();
  if (grid.size() != 3 || block.size() != 3) throw std::invalid_argument("grid and block need 3 numbers each");
  for (int i = 0; i < 3; ++i) {
    l.grid[i] = grid[i];
    l.block[i] = block[i];
  }
  l.dynamic_shared_bytes = j.at("dynamic_shared_bytes").get<uint32_t>();
  l.workspace_bytes = j.value("workspace_bytes", uint64_t{0});
  return l;
}

json ToJson(const cache::DesignPoint& d) {
  return {{"family", d.family}, {"knobs", d.knobs}, {"policy_version", d.policy_version}};
}
cache::DesignPoint DesignFrom(const json& j) {
  cache::DesignPoint d;
  d.family = j.at("family").get<std::string>();
  d.knobs = j.at("knobs").get<std::map<std::string, std::string>>();
  d.policy_version = j.at("policy_version").get<std::string>();
  return d;
}

json ToJson(const cache::Verification& v) { return json::parse(cache::VerificationJson(v)); }
cache::Verification VerificationFrom(const json& j) {
  auto v = cache::ParseVerificationJson(j.dump());
  if (!v.ok()) throw std::invalid_argument(v.status().message());
  return *v;
}

// Binary fields (keys, CUBINs) travel as hex: JSON strings must be UTF-8.
std::string Hex(std::string_view bytes) { return HexEncode(bytes); }
std::string Unhex(const json& j) {
  auto bytes = HexDecode(j.get<std::string>());
  if (!bytes.ok()) throw std::invalid_argument("bad hex: " + bytes.status().message());
  return *bytes;
}

json Encode(const WorkerMessage& message) {
  return std::visit(
      [](const auto& m) -> json {
        using T = std::decay_t<decltype(m)>;
        if constexpr (std::is_same_v<T, Hello>) {
          const WorkerDevice& d = m.device;
          return {{"type", "hello"},
                  {"device",
                   {{"ordinal", d.ordinal},
                    {"name", d.name},
                    {"uuid", d.uuid},
                    {"arch", d.arch},
                    {"sm_count", d.sm_count},
                    {"sm_clock_khz", d.sm_clock_khz},
                    {"memory_clock_khz", d.memory_clock_khz},
                    {"copy_bandwidth_bytes_per_s", d.copy_bandwidth_bytes_per_s},
                    {"l2_bytes", d.l2_bytes},
                    {"driver_version", d.driver_version},
                    {"nvrtc_major", d.nvrtc_major},
                    {"nvrtc_minor", d.nvrtc_minor},
                    {"torch_version", d.torch_version},
                    {"pid", d.pid}}}};
        } else if constexpr (std::is_same_v<T, Unavailable>) {
          return {{"type", "unavailable"}, {"reason", m.reason}};
        } else if constexpr (std::is_same_v<T, BaselineRequest>) {
          return {{"type", "baseline"}, {"id", m.id}, {"key", Hex(m.key_bytes)}, {"memory_cap_bytes", m.memory_cap_bytes}};
        } else if constexpr (std::is_same_v<T, BaselineResult>) {
          json j = {{"type", "baseline_result"}, {"id", m.id},           {"error_code", m.error_code},
                    {"error", m.error},          {"timing", ToJson(m.timing)}, {"roofline", ToJson(m.roofline)},
                    {"outputs", m.outputs},      {"backoff", m.backoff}};
          if (m.unfit) j["unfit"] = true;  // absent: false, as an older worker sends it
          return j;
        } else if constexpr (std::is_same_v<T, EvaluateRequest>) {
          const CandidateSpec& c = m.candidate;
          json j = {{"type", "evaluate"},
                    {"id", m.id},
                    {"key", Hex(m.key_bytes)},
                    {"memory_cap_bytes", m.memory_cap_bytes},
                    {"screen_only", m.screen_only},
                    {"candidate",
                     {{"source", c.source},
                      {"entry_point", c.entry_point},
                      {"options", c.options},
                      {"launch", ToJson(c.launch)},
                      {"design", ToJson(c.design)}}}};
          if (!m.compile_ahead.empty()) {
            json ahead = json::array();
            for (const CompileAhead& a : m.compile_ahead) ahead.push_back({{"source", a.source}, {"options", a.options}});
            j["compile_ahead"] = std::move(ahead);  // absent: none, as an older kjitd sends it
          }
          return j;
        } else if constexpr (std::is_same_v<T, Verdict>) {
          const KernelResources& r = m.resources;
          json j = {{"type", "verdict"},
                  {"id", m.id},
                  {"outcome", m.outcome},
                  {"reason", m.reason},
                  {"compiled", m.compiled},
                  {"compile_log", m.compile_log},
                  {"compile_ms", m.compile_ms},
                  {"compile_wait_ms", m.compile_wait_ms},
                  {"compile_cached", m.compile_cached},
                  {"resources",
                   {{"registers", r.registers},
                    {"spill_bytes", r.spill_bytes},
                    {"local_bytes", r.local_bytes},
                    {"static_shared_bytes", r.static_shared_bytes},
                    {"max_threads_per_block", r.max_threads_per_block}}},
                  {"cubin", Hex(m.cubin)},
                  {"verification", ToJson(m.verification)},
                  {"timing", ToJson(m.timing)},
                  {"baseline", ToJson(m.baseline)},
                  {"roofline", ToJson(m.roofline)},
                  {"reward", m.reward},
                  {"accepted", m.accepted},
                  {"total_ms", m.total_ms},
                  {"worker_exits", m.worker_exits},
                  {"retry_later", m.retry_later}};
          if (m.unfit) j["unfit"] = true;  // absent: false, as an older worker sends it
          return j;
        } else if constexpr (std::is_same_v<T, Progress>) {
          return {{"type", "progress"}, {"id", m.id}, {"phase", m.phase}, {"deadline_ms", m.deadline_ms}};
        } else {
          static_assert(std::is_same_v<T, Exit>);
          return {{"type", "exit"}};
        }
      },
      message);
}

WorkerMessage DecodeJson(const json& j) {
  const std::string type = j.at("type").get<std::string>();
  if (type == "hello") {
    const json& d = j.at("device");
    Hello h;
    h.device.ordinal = d.at("ordinal").get<int>();
    h.device.name = d.at("name").get<std::string>();
    h.device.uuid = d.at("uuid").get<std::string>();
    h.device.arch = d.at("arch").get<int>();
    h.device.sm_count = d.at("sm_count").get<int>();
    h.device.sm_clock_khz = d.at("sm_clock_khz").get<int>();
    h.device.memory_clock_khz = d.at("memory_clock_khz").get<int>();
    h.device.copy_bandwidth_bytes_per_s = d.at("copy_bandwidth_bytes_per_s").get<double>();
    h.device.l2_bytes = d.at("l2_bytes").get<uint64_t>();
    h.device.driver_version = d.at("driver_version").get<int>();
    h.device.nvrtc_major = d.at("nvrtc_major").get<int>();
    h.device.nvrtc_minor = d.at("nvrtc_minor").get<int>();
    h.device.torch_version = d.at("torch_version").get<std::string>();
    h.device.pid = d.at("pid").get<uint32_t>();
    return h;
  }
  if (type == "unavailable") return Unavailable{j.at("reason").get<std::string>()};
  if (type == "baseline") {
    return BaselineRequest{j.at("id").get<uint64_t>(), Unhex(j.at("key")), j.at("memory_cap_bytes").get<uint64_t>()};
  }
  if (type == "baseline_result") {
    BaselineResult r;
    r.id = j.at("id").get<uint64_t>();
    r.error_code = j.at("error_code").get<std::string>();
    r.error = j.at("error").get<std::string>();
    r.timing = TimingFrom(j.at("timing"));
    r.roofline = RooflineFrom(j.at("roofline"));
    r.outputs = j.at("outputs").get<std::vector<std::string>>();
    r.backoff = j.at("backoff").get<bool>();
    r.unfit = j.value("unfit", false);
    return r;
  }
  if (type == "evaluate") {
    EvaluateRequest r;
    r.id = j.at("id").get<uint64_t>();
    r.key_bytes = Unhex(j.at("key"));
    r.memory_cap_bytes = j.at("memory_cap_bytes").get<uint64_t>();
    r.screen_only = j.value("screen_only", false);
    const json& c = j.at("candidate");
    r.candidate.source = c.at("source").get<std::string>();
    r.candidate.entry_point = c.at("entry_point").get<std::string>();
    r.candidate.options = c.at("options").get<std::vector<std::string>>();
    r.candidate.launch = LaunchFrom(c.at("launch"));
    r.candidate.design = DesignFrom(c.at("design"));
    if (auto it = j.find("compile_ahead"); it != j.end()) {
      for (const json& a : *it) {
        r.compile_ahead.push_back({a.at("source").get<std::string>(), a.at("options").get<std::vector<std::string>>()});
      }
    }
    return r;
  }
  if (type == "verdict") {
    Verdict v;
    v.id = j.at("id").get<uint64_t>();
    v.outcome = j.at("outcome").get<std::string>();
    v.reason = j.at("reason").get<std::string>();
    v.compiled = j.at("compiled").get<bool>();
    v.compile_log = j.at("compile_log").get<std::string>();
    v.compile_ms = j.at("compile_ms").get<double>();
    v.compile_wait_ms = j.value("compile_wait_ms", v.compile_ms);  // an older worker always compiled
    v.compile_cached = j.value("compile_cached", false);
    const json& r = j.at("resources");
    v.resources.registers = r.at("registers").get<int>();
    v.resources.spill_bytes = r.at("spill_bytes").get<int>();
    v.resources.local_bytes = r.at("local_bytes").get<int>();
    v.resources.static_shared_bytes = r.at("static_shared_bytes").get<int>();
    v.resources.max_threads_per_block = r.at("max_threads_per_block").get<int>();
    v.cubin = Unhex(j.at("cubin"));
    v.verification = VerificationFrom(j.at("verification"));
    v.timing = TimingFrom(j.at("timing"));
    v.baseline = TimingFrom(j.at("baseline"));
    v.roofline = RooflineFrom(j.at("roofline"));
    v.reward = j.at("reward").get<double>();
    v.accepted = j.at("accepted").get<bool>();
    v.total_ms = j.at("total_ms").get<double>();
    v.worker_exits = j.at("worker_exits").get<bool>();
    v.retry_later = j.at("retry_later").get<bool>();
    v.unfit = j.value("unfit", false);
    return v;
  }
  if (type == "progress") {
    return Progress{j.at("id").get<uint64_t>(), j.at("phase").get<std::string>(), j.at("deadline_ms").get<int64_t>()};
  }
  if (type == "exit") return Exit{};
  throw std::invalid_argument("unknown worker message type '" + type + "'");
}

}  // namespace

std::string EncodeWorkerMessage(const WorkerMessage& message) {
  // Compile logs and sources are arbitrary bytes: replace what is not UTF-8 rather than throw.
  return Encode(message).dump(-1, ' ', false, json::error_handler_t::replace);
}

Result<WorkerMessage> DecodeWorkerMessage(std::string_view text) {
  try {
    const json j = json::parse(text);
    if (!j.is_object()) return InvalidArgument("worker message is not a JSON object");
    return DecodeJson(j);
  } catch (const std::exception& e) {
    return InvalidArgument(std::string("malformed worker message: ") + e.what());
  }
}

Status WriteFrame(int fd, std::string_view payload) {
  if (payload.size() > kMaxWorkerFrameBytes) return InvalidArgument("worker frame too large");
  const uint32_t n = static_cast<uint32_t>(payload.size());
  std::string frame;
  frame.reserve(4 + payload.size());
  for (int i = 0; i < 4; ++i) frame.push_back(static_cast<char>((n >> (8 * i)) & 0xff));
  frame.append(payload);
  size_t done = 0;
  while (done < frame.size()) {
    const ssize_t w = ::write(fd, frame.data() + done, frame.size() - done);
    if (w < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        usleep(1000);
        continue;
      }
      return IOError(std::string("worker channel write failed: ") + std::strerror(errno));
    }
    done += static_cast<size_t>(w);
  }
  return Status::Ok();
}

Status FrameReader::ReadAvailable(int fd) {
  char chunk[65536];
  while (true) {
    const ssize_t r = ::read(fd, chunk, sizeof chunk);
    if (r > 0) {
      buffer_.append(chunk, static_cast<size_t>(r));
      if (buffer_.size() >= 4) {
        uint32_t n = 0;
        for (int i = 0; i < 4; ++i) n |= static_cast<uint32_t>(static_cast<uint8_t>(buffer_[i])) << (8 * i);
        if (n > kMaxWorkerFrameBytes) return Corruption("worker frame of " + std::to_string(n) + " bytes is over the limit");
      }
      continue;
    }
    if (r == 0) return IOError("worker channel closed");
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return Status::Ok();
    return IOError(std::string("worker channel read failed: ") + std::strerror(errno));
  }
}

std::optional<std::string> FrameReader::Next() {
  if (buffer_.size() < 4) return std::nullopt;
  uint32_t n = 0;
  for (int i = 0; i < 4; ++i) n |= static_cast<uint32_t>(static_cast<uint8_t>(buffer_[i])) << (8 * i);
  if (buffer_.size() < 4 + size_t{n}) return std::nullopt;
  std::string frame = buffer_.substr(4, n);
  buffer_.erase(0, 4 + size_t{n});
  return frame;
}

Result<std::string> ReadFrameBlocking(int fd) {
  auto read_exactly = [fd](char* out, size_t n) -> Status {
    size_t done = 0;
    while (done < n) {
      const ssize_t r = ::read(fd, out + done, n - done);
      if (r == 0) return IOError("worker channel closed");
      if (r < 0) {
        if (errno == EINTR) continue;
        return IOError(std::string("worker channel read failed: ") + std::strerror(errno));
      }
      done += static_cast<size_t>(r);
    }
    return Status::Ok();
  };
  unsigned char header[4];
  KJIT_RETURN_IF_ERROR(read_exactly(reinterpret_cast<char*>(header), 4));
  const uint32_t n = header[0] | (header[1] << 8) | (header[2] << 16) | (uint32_t{header[3]} << 24);
  if (n > kMaxWorkerFrameBytes) return Corruption("worker frame over the limit");
  std::string payload(n, '\0');
  KJIT_RETURN_IF_ERROR(read_exactly(payload.data(), n));
  return payload;
}

}  // namespace kjit::daemon
