#include "kjit/cache/record.h"

#include <bit>

#include "kjit/runtime/compiler.h"
#include "kjit/runtime/driver.h"
#include "record_json.h"

namespace kjit::cache {
namespace {

constexpr const char* kStatusNames[] = {"candidate", "verified", "rejected", "quarantined"};

void AddDouble(Hasher& h, double v) { h.Add(std::bit_cast<uint64_t>(v)); }
void AddHash(Hasher& h, const Hash128& v) { h.Add(v.high).Add(v.low); }
void AddInt(Hasher& h, int64_t v) { h.Add(static_cast<uint64_t>(v)); }

void AddTiming(Hasher& h, const Timing& t) {
  AddDouble(h, t.median_us);
  AddDouble(h, t.spread_us);
  AddInt(h, t.runs);
  h.Add(t.device);
  AddInt(h, t.sm_clock_khz);
  AddInt(h, t.memory_clock_khz);
}

template <typename T>
Result<T> Parse(const std::string& text, const char* what, T (*convert)(const nlohmann::json&)) {
  try {
    return convert(nlohmann::json::parse(text));
  } catch (const std::exception& e) {
    return Corruption(std::string("stored ") + what + " is not valid: " + e.what());
  }
}

}  // namespace

std::string_view RecordStatusName(RecordStatus s) {
  const int i = static_cast<int>(s);
  return (i >= 0 && i < 4) ? kStatusNames[i] : "unknown";
}

Result<RecordStatus> ParseRecordStatus(std::string_view name) {
  for (int i = 0; i < 4; ++i) {
    if (name == kStatusNames[i]) return static_cast<RecordStatus>(i);
  }
  return InvalidArgument("unknown record status '" + std::string(name) +
                         "' (one of candidate, verified, rejected, quarantined)");
}

std::string TimedModel(std::string_view device) {
  const size_t space = device.rfind(' ');
  const std::string_view last = space == std::string_view::npos ? device : device.substr(space + 1);
  if (!last.starts_with("GPU-") && !last.starts_with("MIG-")) return std::string(device);
  return space == std::string_view::npos ? std::string() : std::string(device.substr(0, space));
}

std::string Toolchain::ToString() const {
  auto cuda = [](int v) { return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10); };
  return "driver " + cuda(driver_version) + ", nvrtc " + std::to_string(nvrtc_major) + "." +
         std::to_string(nvrtc_minor) + ", codegen " + std::to_string(codegen_version);
}

Toolchain RunningToolchain() {
  const auto nvrtc = Compiler::NvrtcVersion();
  Toolchain t{0, nvrtc.first, nvrtc.second, 0};
  if (auto driver = Driver::Get(); driver.ok()) t.driver_version = (*driver)->version();
  return t;
}

Hash128 KernelRecord::ComputeCubinChecksum() const { return HashBytes(cubin); }

Hash128 KernelRecord::ComputeServeChecksum() const {
  Hasher h;
  h.Add("kjit-serve-v1").Add(key_bytes).Add(entry_point);
  for (uint32_t v : launch.grid) h.Add(uint64_t{v});
  for (uint32_t v : launch.block) h.Add(uint64_t{v});
  h.Add(uint64_t{launch.dynamic_shared_bytes});
  AddInt(h, toolchain.driver_version);
  AddInt(h, toolchain.nvrtc_major);
  AddInt(h, toolchain.nvrtc_minor);
  AddInt(h, toolchain.codegen_version);
  AddHash(h, cubin_checksum);
  // Appended, and only when set: a record without a workspace hashes exactly
  // as before the field existed (its stored checksums stay valid); one with a
  // workspace hashes one more field at the end, which no record without one has.
  if (launch.workspace_bytes != 0) h.Add("workspace_bytes").Add(launch.workspace_bytes);
  // The same rule for the PyTorch version (schema 6).
  if (!torch_version.empty()) h.Add("torch_version").Add(torch_version);
  return h.Finish();
}

Hash128 KernelRecord::ComputeRecordChecksum() const {
  Hasher h;
  h.Add("kjit-record-v1");
  AddHash(h, ComputeServeChecksum());
  h.Add(source);
  h.Add(static_cast<uint64_t>(compile_options.size()));
  for (const auto& o : compile_options) h.Add(o);
  h.Add(design.family).Add(design.policy_version).Add(static_cast<uint64_t>(design.knobs.size()));
  for (const auto& [k, v] : design.knobs) h.Add(k).Add(v);
  AddTiming(h, timing);
  AddTiming(h, baseline);
  h.Add(static_cast<uint64_t>(verification.seeds.size()));
  for (uint64_t s : verification.seeds) h.Add(s);
  h.Add(static_cast<uint64_t>(verification.input_kinds.size()));
  for (const auto& k : verification.input_kinds) h.Add(k);
  h.Add(static_cast<uint64_t>(verification.edge_cases_passed.size()));
  for (const auto& k : verification.edge_cases_passed) h.Add(k);
  AddDouble(h, verification.max_abs_error);
  AddDouble(h, verification.max_rel_error);
  AddDouble(h, verification.atol);
  AddDouble(h, verification.rtol);
  if (!verification.outputs.empty()) {  // appended only when recorded: older records hash as before
    h.Add("outputs").Add(static_cast<uint64_t>(verification.outputs.size()));
    for (const VerifiedOutput& o : verification.outputs) {
      h.Add(uint64_t{o.defined}).Add(static_cast<uint64_t>(static_cast<int64_t>(o.scalar_type)));
      h.Add(static_cast<uint64_t>(o.sizes.size()));
      for (int64_t v : o.sizes) h.Add(static_cast<uint64_t>(v));
      for (int64_t v : o.strides) h.Add(static_cast<uint64_t>(v));
    }
  }
  AddInt(h, created_unix_ms);
  return h.Finish();
}

// ---------------------------------------------------------------- JSON

nlohmann::json ToJson(const DesignPoint& d) {
  return {{"family", d.family}, {"knobs", d.knobs}, {"policy_version", d.policy_version}};
}

nlohmann::json ToJson(const Timing& t) {
  return {{"median_us", t.median_us}, {"spread_us", t.spread_us},   {"runs", t.runs},
          {"device", t.device},       {"sm_clock_khz", t.sm_clock_khz}, {"memory_clock_khz", t.memory_clock_khz}};
}

nlohmann::json ToJson(const Verification& v) {
  nlohmann::json j = {{"seeds", v.seeds},
                      {"input_kinds", v.input_kinds},
                      {"edge_cases_passed", v.edge_cases_passed},
                      {"max_abs_error", v.max_abs_error},
                      {"max_rel_error", v.max_rel_error},
                      {"atol", v.atol},
                      {"rtol", v.rtol}};
  // Only when recorded, so that records from before the field read and hash as they did.
  if (!v.outputs.empty()) {
    nlohmann::json outputs = nlohmann::json::array();
    for (const VerifiedOutput& o : v.outputs) {
      outputs.push_back({{"defined", o.defined}, {"scalar_type", o.scalar_type}, {"sizes", o.sizes}, {"strides", o.strides}});
    }
    j["outputs"] = std::move(outputs);
  }
  return j;
}

std::string VerificationJson(const Verification& v) { return ToJson(v).dump(); }
Result<Verification> ParseVerificationJson(const std::string& text) { return VerificationFromJson(text); }

nlohmann::json OptionsToJson(const std::vector<std::string>& options) { return options; }

Result<DesignPoint> DesignFromJson(const std::string& text) {
  return Parse<DesignPoint>(text, "design point", [](const nlohmann::json& j) {
    DesignPoint d;
    d.family = j.at("family").get<std::string>();
    d.knobs = j.at("knobs").get<std::map<std::string, std::string>>();
    d.policy_version = j.at("policy_version").get<std::string>();
    return d;
  });
}

Result<Timing> TimingFromJson(const std::string& text) {
  return Parse<Timing>(text, "timing", [](const nlohmann::json& j) {
    Timing t;
    t.median_us = j.at("median_us").get<double>();
    t.spread_us = j.at("spread_us").get<double>();
    t.runs = j.at("runs").get<int>();
    t.device = j.at("device").get<std::string>();
    t.sm_clock_khz = j.at("sm_clock_khz").get<int>();
    t.memory_clock_khz = j.at("memory_clock_khz").get<int>();
    return t;
  });
}

Result<Verification> VerificationFromJson(const std::string& text) {
  return Parse<Verification>(text, "verification", [](const nlohmann::json& j) {
    Verification v;
    v.seeds = j.at("seeds").get<std::vector<uint64_t>>();
    v.input_kinds = j.at("input_kinds").get<std::vector<std::string>>();
    v.edge_cases_passed = j.at("edge_cases_passed").get<std::vector<std::string>>();
    v.max_abs_error = j.at("max_abs_error").get<double>();
    v.max_rel_error = j.at("max_rel_error").get<double>();
    v.atol = j.at("atol").get<double>();
    v.rtol = j.at("rtol").get<double>();
    if (j.contains("outputs")) {
      for (const auto& o : j.at("outputs")) {
        v.outputs.push_back({o.at("defined").get<bool>(), o.at("scalar_type").get<int>(),
                             o.at("sizes").get<std::vector<int64_t>>(), o.at("strides").get<std::vector<int64_t>>()});
      }
    }
    return v;
  });
}

Result<std::vector<std::string>> OptionsFromJson(const std::string& text) {
  return Parse<std::vector<std::string>>(text, "compile options", [](const nlohmann::json& j) {
    return j.get<std::vector<std::string>>();
  });
}

}  // namespace kjit::cache
