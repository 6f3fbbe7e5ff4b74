#include "cache_commands.h"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <iostream>
#include <iterator>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kjit/cache/kernel_cache.h"
#include "kjit/runtime/op_key.h"
#include "kjit/cache/record.h"
#include "cli_format.h"

namespace kjit::cli {

using kjit::cache::KernelCache;
using kjit::cache::KernelRecord;
using kjit::cache::ListFilter;
using kjit::cache::RecordStatus;
using kjit::cache::RecordSummary;

struct CacheCommands::Options {
  CLI::App* cache = nullptr;
  CLI::App* path = nullptr;
  CLI::App* ls = nullptr;
  CLI::App* show = nullptr;
  CLI::App* stats = nullptr;
  CLI::App* rm = nullptr;
  CLI::App* evict = nullptr;
  CLI::App* verify = nullptr;
  CLI::App* export_ = nullptr;
  CLI::App* import = nullptr;
  CLI::App* measurements = nullptr;

  std::string cache_path;  // empty: DefaultCachePath(), resolved when a command runs
  bool json = false;

  std::string ls_op, ls_status, ls_sort = "created";
  CLI::Option* ls_arch_option = nullptr;
  int ls_arch = 0;
  bool ls_ascending = false;
  int ls_limit = 0;

  std::string show_key;
  std::vector<std::string> rm_keys;
  std::string evict_to;

  CLI::Option* verify_arch_option = nullptr;
  int verify_arch = 0;
  int verify_driver = 0;
  std::string verify_nvrtc;
  int verify_codegen = 0;

  std::string export_file, export_status = "verified", export_op;
  std::string import_file;
  bool import_trust = false;
  std::string measurements_family;
  int measurements_limit = 0;
};

namespace {

std::string ShortHash(const Hash128& h) { return h.ToHex().substr(0, 12); }
std::string StatusName(RecordStatus s) { return std::string(kjit::cache::RecordStatusName(s)); }

std::string Join(const std::vector<std::string>& items, const std::string& separator) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) out += (i ? separator : "") + items[i];
  return out;
}

std::string OrNone(const std::string& s) { return s.empty() ? "(none)" : s; }

// Plain bytes, or a binary K/M/G/T multiple ("512M", "1.5G", "4KiB").
Result<uint64_t> ParseSize(const std::string& text) {
  size_t pos = 0;
  while (pos < text.size() && (std::isdigit(static_cast<unsigned char>(text[pos])) || text[pos] == '.')) ++pos;
  const std::string number = text.substr(0, pos);
  std::string suffix = text.substr(pos);
  for (char& c : suffix) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (number.empty() || std::count(number.begin(), number.end(), '.') > 1 || number == ".") {
    return InvalidArgument("'" + text + "' is not a size (bytes, or a number with K, M, G or T)");
  }
  double multiplier = 1;
  if (suffix.empty() || suffix == "B") {
    multiplier = 1;
  } else if (suffix == "K" || suffix == "KB" || suffix == "KIB") {
    multiplier = 0x1p10;
  } else if (suffix == "M" || suffix == "MB" || suffix == "MIB") {
    multiplier = 0x1p20;
  } else if (suffix == "G" || suffix == "GB" || suffix == "GIB") {
    multiplier = 0x1p30;
  } else if (suffix == "T" || suffix == "TB" || suffix == "TIB") {
    multiplier = 0x1p40;
  } else {
    return InvalidArgument("'" + text + "': unknown size suffix '" + text.substr(pos) + "' (use K, M, G or T)");
  }
  // Integers are parsed exactly; only fractional sizes go through a double.
  if (number.find('.') == std::string::npos) {
    uint64_t value = 0;
    for (char c : number) {
      const uint64_t digit = static_cast<uint64_t>(c - '0');
      if (value > (UINT64_MAX - digit) / 10) return InvalidArgument("'" + text + "' is too large");
      value = value * 10 + digit;
    }
    const auto factor = static_cast<uint64_t>(multiplier);
    if (factor != 0 && value > UINT64_MAX / factor) return InvalidArgument("'" + text + "' is too large");
    return value * factor;
  }
  const double value = std::strtod(number.c_str(), nullptr) * multiplier;
  if (!(value < 0x1p64)) return InvalidArgument("'" + text + "' is too large");
  return static_cast<uint64_t>(std::floor(value));
}

// CLI11 validators return an empty string when the value is fine.
CLI::Validator SizeValidator() {
  return CLI::Validator(
      [](std::string& text) {
        auto size = ParseSize(text);
        return size.ok() ? std::string() : size.status().message();
      },
      "");
}

Result<std::pair<int, int>> ParseMajorMinor(const std::string& text) {
  int major = 0, minor = 0;
  char extra = 0;
  if (std::sscanf(text.c_str(), "%d.%d%c", &major, &minor, &extra) != 2 || major < 0 || minor < 0) {
    return InvalidArgument("'" + text + "' is not a MAJOR.MINOR version such as 13.0");
  }
  return std::pair{major, minor};
}

CLI::Validator VersionValidator() {
  return CLI::Validator(
      [](std::string& text) {
        auto version = ParseMajorMinor(text);
        return version.ok() ? std::string() : version.status().message();
      },
      "");
}

// ---- JSON


Json SummaryJson(const RecordSummary& s) {
  return Json{{"id", s.id},
              {"key_hash", s.key_hash.ToHex()},
              {"key_text", s.key_text},
              {"op", s.op},
              {"arch", s.arch},
              {"status", StatusName(s.status)},
              {"median_us", s.median_us},
              {"baseline_us", s.baseline_us},
              {"speedup", s.speedup},
              {"size_bytes", s.size_bytes},
              {"created_unix_ms", s.created_unix_ms},
              {"last_used_unix_ms", s.last_used_unix_ms},
              {"use_count", s.use_count},
              {"timed_on", s.timed_on}};
}

Json TimingJson(const kjit::cache::Timing& t) {
  return Json{{"median_us", t.median_us},       {"spread_us", t.spread_us},       {"runs", t.runs},
              {"device", t.device},             {"sm_clock_khz", t.sm_clock_khz}, {"memory_clock_khz", t.memory_clock_khz}};
}

// c10::ScalarType's numbering (stable across PyTorch releases) for the dtypes kjit's ops return.
std::string ScalarTypeName(int scalar_type) {
  static const char* const kNames[] = {"u8", "i8", "i16", "i32", "i64", "f16", "f32", "f64",
                                       "c32", "c64", "c128", "bool", "qi8", "qu8", "qi32", "bf16"};
  if (scalar_type >= 0 && scalar_type < static_cast<int>(std::size(kNames))) return kNames[scalar_type];
  return "scalar type " + std::to_string(scalar_type);
}

// "f32[4, 5]{5, 1}" per output; "(undefined)" for an undefined one.
std::string OutputsText(const std::vector<kjit::cache::VerifiedOutput>& outputs) {
  if (outputs.empty()) return "(not recorded: any layout is served)";
  std::string text;
  for (const auto& o : outputs) {
    if (!text.empty()) text += ", ";
    if (!o.defined) {
      text += "(undefined)";
      continue;
    }
    auto list = [](const std::vector<int64_t>& v) {
      std::string s;
      for (int64_t x : v) s += (s.empty() ? "" : ", ") + std::to_string(x);
      return s;
    };
    text += ScalarTypeName(o.scalar_type) + "[" + list(o.sizes) + "]{" + list(o.strides) + "}";
  }
  return text;
}

Json OutputsJson(const std::vector<kjit::cache::VerifiedOutput>& outputs) {
  Json out = Json::array();
  for (const auto& o : outputs) {
    out.push_back(Json{{"defined", o.defined}, {"scalar_type", o.scalar_type}, {"sizes", o.sizes}, {"strides", o.strides}});
  }
  return out;
}

Json RecordJson(const KernelRecord& r) {
  Json knobs = Json::object();
  for (const auto& [name, value] : r.design.knobs) knobs[name] = value;
  const auto& v = r.verification;
  const auto& tc = r.toolchain;
  return Json{
      {"id", r.id},
      {"key_hash", r.key_hash.ToHex()},
      {"key_text", r.key_text},
      {"key_bytes", kjit::HexEncode(r.key_bytes)},  // what `kjit key show` takes
      {"op", r.op},
      {"arch", r.arch},
      {"status", StatusName(r.status)},
      {"status_reason", r.status_reason},
      {"design", {{"family", r.design.family}, {"knobs", knobs}, {"policy_version", r.design.policy_version}}},
      {"timing", TimingJson(r.timing)},
      {"baseline", TimingJson(r.baseline)},
      {"speedup", r.speedup()},
      {"verification",
       {{"seeds", v.seeds},
        {"input_kinds", v.input_kinds},
        {"edge_cases_passed", v.edge_cases_passed},
        {"max_abs_error", v.max_abs_error},
        {"max_rel_error", v.max_rel_error},
        {"atol", v.atol},
        {"rtol", v.rtol},
        {"outputs", OutputsJson(v.outputs)}}},
      {"toolchain",
       {{"driver_version", tc.driver_version},
        {"nvrtc_major", tc.nvrtc_major},
        {"nvrtc_minor", tc.nvrtc_minor},
        {"codegen_version", tc.codegen_version}}},
      {"torch_version", r.torch_version},
      {"launch",
       {{"grid", {r.launch.grid[0], r.launch.grid[1], r.launch.grid[2]}},
        {"block", {r.launch.block[0], r.launch.block[1], r.launch.block[2]}},
        {"dynamic_shared_bytes", r.launch.dynamic_shared_bytes},
        {"workspace_bytes", r.launch.workspace_bytes}}},
      {"entry_point", r.entry_point},
      {"compile_options", r.compile_options},
      {"cubin", {{"size_bytes", r.cubin.size()}, {"checksum", r.cubin_checksum.ToHex()}}},
      {"record_checksum", r.record_checksum.ToHex()},
      {"size_bytes", r.size_bytes()},
      {"created_unix_ms", r.created_unix_ms},
      {"last_used_unix_ms", r.last_used_unix_ms},
      {"use_count", r.use_count},
      {"source", r.source},
  };
}

// ---- opening the cache and naming records


bool FileExists(const std::string& path) {
  std::error_code error;
  return std::filesystem::exists(path, error);
}

std::string CachePath(const CacheCommands::Options& o) {
  return o.cache_path.empty() ? kjit::cache::DefaultCachePath() : o.cache_path;
}

enum class Access {
  kRead,            // never writes; the file must exist
  kWrite,           // may write; the file must exist
  kWriteOrCreate,   // may write; creates the file if missing
};

// Null after printing why. A missing file is not an error in the usual sense
// (nothing has been cached yet), so Open's explanation is printed without the code.
std::unique_ptr<KernelCache> OpenOrReport(const CacheCommands::Options& o, Access access) {
  kjit::cache::OpenOptions options;
  options.path = CachePath(o);
  options.read_only = access == Access::kRead;
  options.create = access == Access::kWriteOrCreate;
  auto cache = KernelCache::Open(options);
  if (!cache.ok()) {
    if (cache.status().code() == kjit::StatusCode::kNotFound) {
      std::cerr << "kjit: " << cache.status().message() << "\n";
    } else {
      Report(cache.status());
    }
    return nullptr;
  }
  return std::move(cache).value();
}

std::string DescribeRecord(const KernelCache& cache, int64_t id) {
  auto record = cache.Get(id);
  if (!record.ok()) return "#" + std::to_string(id);
  return Format("#%lld  %s  %-11s  ", static_cast<long long>(id), ShortHash(record->key_hash).c_str(),
                StatusName(record->status).c_str()) +
         record->key_text;
}

// The single record `key` (an id or a key-hash prefix) names; otherwise prints why and returns nothing.
std::optional<int64_t> ResolveOneOrReport(const KernelCache& cache, const std::string& key) {
  auto ids = cache.Resolve(key);
  if (!ids.ok() && ids.status().code() == StatusCode::kInvalidArgument) {
    std::cerr << "kjit: no record matches '" << key << "': " << ids.status().message() << "\n";
    return std::nullopt;
  }
  if (!ids.ok() && ids.status().code() != StatusCode::kNotFound) {
    Report(ids.status());
    return std::nullopt;
  }
  if (!ids.ok() || ids->empty()) {
    const bool looks_like_a_key =
        std::all_of(key.begin(), key.end(), [](unsigned char c) { return std::isxdigit(c); }) &&
        (key.size() >= 4 || std::all_of(key.begin(), key.end(), [](unsigned char c) { return std::isdigit(c); }));
    std::cerr << "kjit: no record matches '" << key << "'"
              << (looks_like_a_key ? "" : " (give a record id or at least 4 hex digits of a key hash)") << "\n";
    return std::nullopt;
  }
  if (ids->size() > 1) {
    std::cerr << "kjit: '" << key << "' matches " << ids->size() << " records; give more of the hash or an id:\n";
    for (int64_t id : *ids) std::cerr << "  " << DescribeRecord(cache, id) << "\n";
    return std::nullopt;
  }
  return ids->front();
}

std::optional<RecordStatus> StatusFilter(const std::string& name) {
  if (name.empty() || name == "any") return std::nullopt;
  auto status = kjit::cache::ParseRecordStatus(name);
  return status.ok() ? std::optional(*status) : std::nullopt;  // the option's validator already rejected others
}

// ---- the commands

int CmdPath(const CacheCommands::Options& o) {
  const std::string path = CachePath(o);
  const bool exists = FileExists(path);
  if (o.json) {
    std::cout << DumpJson(Json{{"path", path}, {"exists", exists}}) << "\n";
  } else {
    std::cout << path << "\n" << (exists ? "exists" : "does not exist yet (the first cached kernel creates it)") << "\n";
  }
  return 0;
}

int CmdList(const CacheCommands::Options& o) {
  auto cache = OpenOrReport(o, Access::kRead);
  if (!cache) return 1;
  ListFilter filter;
  filter.op = o.ls_op;
  filter.status = StatusFilter(o.ls_status);
  if (o.ls_arch_option->count() > 0) filter.arch = o.ls_arch;
  if (o.ls_sort == "speedup") filter.sort = ListFilter::SortBy::kSpeedup;
  if (o.ls_sort == "last-use") filter.sort = ListFilter::SortBy::kLastUse;
  if (o.ls_sort == "size") filter.sort = ListFilter::SortBy::kSize;
  if (o.ls_sort == "created") filter.sort = ListFilter::SortBy::kCreated;
  filter.descending = !o.ls_ascending;
  filter.limit = o.ls_limit;
  auto summaries = cache->List(filter);
  if (!summaries.ok()) return Report(summaries.status());

  if (o.json) {
    Json all = Json::array();
    for (const auto& s : *summaries) all.push_back(SummaryJson(s));
    std::cout << DumpJson(all) << "\n";
    return 0;
  }
  if (summaries->empty()) {
    std::cout << "no records" << (filter.op.empty() && !filter.status && !filter.arch ? "" : " match") << "\n";
    return 0;
  }
  std::vector<std::vector<std::string>> rows;
  for (const auto& s : *summaries) {
    rows.push_back({std::to_string(s.id), ShortHash(s.key_hash), StatusName(s.status), SpeedupText(s.speedup),
                    MicrosText(s.median_us), HumanBytes(s.size_bytes), UtcTime(s.last_used_unix_ms),
                    std::to_string(s.use_count), s.key_text});
  }
  PrintTable(std::cout,
             {{"ID", true},
              {"KEY", false},
              {"STATUS", false},
              {"SPEEDUP", true},
              {"MEDIAN(us)", true},
              {"SIZE", true},
              {"LAST USE", false},
              {"USES", true},
              {"OP / KEY", false}},
             rows, TableWidth());
  return 0;
}

void PrintTiming(const char* title, const kjit::cache::Timing& t) {
  std::cout << title << "\n";
  std::cout << "  median        " << MicrosText(t.median_us) << " us (spread " << Format("%.2f", t.spread_us)
            << " us, " << t.runs << " runs)\n";
  std::cout << "  device        " << OrNone(t.device) << "\n";
  std::cout << "  clocks        ";
  if (t.sm_clock_khz > 0 || t.memory_clock_khz > 0) {
    std::cout << "sm " << (t.sm_clock_khz > 0 ? Format("%d MHz", t.sm_clock_khz / 1000) : "unknown") << ", memory "
              << (t.memory_clock_khz > 0 ? Format("%d MHz", t.memory_clock_khz / 1000) : "unknown") << "\n";
  } else {
    std::cout << "unknown\n";
  }
}

void PrintRecord(const KernelRecord& r) {
  std::vector<std::string> knobs, seeds;
  for (const auto& [name, value] : r.design.knobs) knobs.push_back(name + "=" + value);
  for (uint64_t seed : r.verification.seeds) seeds.push_back(std::to_string(seed));
  const auto& v = r.verification;
  const auto& l = r.launch;
  const bool cubin_checksum_holds = r.ComputeCubinChecksum() == r.cubin_checksum;
  const bool record_checksum_holds = r.ComputeRecordChecksum() == r.record_checksum;

  std::cout << "record          " << r.id << "\n"
            << "key             " << r.key_text << "\n"
            << "key hash        " << r.key_hash.ToHex() << "\n"
            << "op              " << r.op << "\n"
            << "arch            sm_" << r.arch << "\n"
            << "status          " << StatusName(r.status) << "\n"
            << "reason          " << OrNone(r.status_reason) << "\n"
            << "speedup         " << SpeedupText(r.speedup()) << "\n"
            << "design\n"
            << "  family        " << OrNone(r.design.family) << "\n"
            << "  knobs         " << OrNone(Join(knobs, ", ")) << "\n"
            << "  policy        " << OrNone(r.design.policy_version) << "\n";
  PrintTiming("timing (kjit kernel)", r.timing);
  PrintTiming("baseline (PyTorch's kernel)", r.baseline);
  std::cout << "verification\n"
            << "  seeds         " << OrNone(Join(seeds, ", ")) << "\n"
            << "  input kinds   " << OrNone(Join(v.input_kinds, ", ")) << "\n"
            << "  edge cases    " << OrNone(Join(v.edge_cases_passed, ", ")) << "\n"
            << "  max error     " << Format("abs %.3g, rel %.3g", v.max_abs_error, v.max_rel_error) << "\n"
            << "  tolerance     " << Format("atol %.3g, rtol %.3g", v.atol, v.rtol) << "\n"
            << "  outputs       " << OutputsText(v.outputs) << "\n"
            << "toolchain       " << r.toolchain.ToString() << "\n"
            << "pytorch         " << (r.torch_version.empty() ? std::string("(not recorded: served to no PyTorch program)")
                                                              : r.torch_version)
            << "\n"
            << "launch          "
            << Format("grid (%u, %u, %u), block (%u, %u, %u), ", l.grid[0], l.grid[1], l.grid[2], l.block[0],
                      l.block[1], l.block[2])
            << "dynamic shared " << HumanBytes(l.dynamic_shared_bytes)
            << (l.workspace_bytes != 0 ? ", workspace " + HumanBytes(l.workspace_bytes) : std::string()) << "\n"
            << "entry point     " << OrNone(r.entry_point) << "\n"
            << "compile options " << OrNone(Join(r.compile_options, " ")) << "\n"
            << "cubin           " << HumanBytes(r.cubin.size()) << " (" << r.cubin.size() << " bytes), checksum "
            << r.cubin_checksum.ToHex() << (cubin_checksum_holds ? " (holds)" : " (DOES NOT MATCH the CUBIN)") << "\n"
            << "record checksum " << r.record_checksum.ToHex()
            << (record_checksum_holds ? " (holds)" : " (DOES NOT MATCH the record)") << "\n"
            << "size            " << HumanBytes(r.size_bytes()) << " (" << r.size_bytes() << " bytes)\n"
            << "created         " << UtcTime(r.created_unix_ms) << "\n"
            << "last used       " << UtcTime(r.last_used_unix_ms) << "\n"
            << "uses            " << r.use_count << "\n";

  std::vector<std::string> lines;
  size_t start = 0;
  while (start < r.source.size()) {
    const size_t end = r.source.find('\n', start);
    if (end == std::string::npos) {
      lines.push_back(r.source.substr(start));
      break;
    }
    lines.push_back(r.source.substr(start, end - start));
    start = end + 1;
  }
  std::cout << "\nsource (" << lines.size() << (lines.size() == 1 ? " line" : " lines") << ")\n";
  const int number_width = static_cast<int>(std::to_string(lines.size()).size());
  for (size_t i = 0; i < lines.size(); ++i) {
    // Blank lines get no separator blank, so that no output line ends in whitespace.
    std::cout << Format("%*zu |", number_width, i + 1) << (lines[i].empty() ? "" : " ") << lines[i] << "\n";
  }
}

int CmdShow(const CacheCommands::Options& o) {
  auto cache = OpenOrReport(o, Access::kRead);
  if (!cache) return 1;
  const auto id = ResolveOneOrReport(*cache, o.show_key);
  if (!id) return 1;
  auto record = cache->Get(*id);
  if (!record.ok()) return Report(record.status());
  if (o.json) {
    std::cout << DumpJson(RecordJson(*record)) << "\n";
  } else {
    PrintRecord(*record);
  }
  return 0;
}

// `kjit cache stats` before anything was cached: an empty cache, not an error (as `ccache -s` does).
int PrintStatsOfNoCache(const CacheCommands::Options& o) {
  static constexpr RecordStatus kStatuses[] = {RecordStatus::kVerified, RecordStatus::kCandidate,
                                               RecordStatus::kRejected, RecordStatus::kQuarantined};
  const std::string path = CachePath(o);
  if (o.json) {
    Json by_status = Json::object();
    for (RecordStatus status : kStatuses) by_status[StatusName(status)] = 0;
    std::cout << DumpJson(Json{{"path", path},
                               {"schema_version", 0},  // no file yet
                               {"records", 0},
                               {"by_status", by_status},
                               {"bytes", 0},
                               {"size_limit_bytes", 0},
                               {"file_bytes", 0},
                               {"keys_seen", 0},
                               {"hits", 0},
                               {"misses", 0},
                               {"hit_rate", 0.0},
                               {"best", Json::array()}})
              << "\n";
    return 0;
  }
  std::cout << "cache       " << path << " (not created yet: nothing has been cached)\n"
            << "records     0\n"
            << "keys seen   0\n"
            << "lookups     0 hits, 0 misses\n";
  return 0;
}

int CmdStats(const CacheCommands::Options& o) {
  {
    kjit::cache::OpenOptions options;
    options.path = CachePath(o);
    options.read_only = true;
    options.create = false;
    auto probe = KernelCache::Open(options);
    if (!probe.ok() && probe.status().code() == kjit::StatusCode::kNotFound) return PrintStatsOfNoCache(o);
  }
  auto cache = OpenOrReport(o, Access::kRead);
  if (!cache) return 1;
  auto stats = cache->Stats(5);
  if (!stats.ok()) return Report(stats.status());
  const auto& s = *stats;
  static constexpr RecordStatus kStatuses[] = {RecordStatus::kVerified, RecordStatus::kCandidate,
                                               RecordStatus::kRejected, RecordStatus::kQuarantined};
  if (o.json) {
    Json by_status = Json::object();
    for (RecordStatus status : kStatuses) by_status[StatusName(status)] = s.by_status[static_cast<int>(status)];
    Json best = Json::array();
    for (const auto& summary : s.best) best.push_back(SummaryJson(summary));
    std::cout << DumpJson(Json{{"path", cache->path()},
                               {"schema_version", cache->schema_version()},
                               {"records", s.records},
                               {"by_status", by_status},
                               {"bytes", s.bytes},
                               {"size_limit_bytes", s.size_limit_bytes},
                               {"file_bytes", s.file_bytes},
                               {"keys_seen", s.keys_seen},
                               {"hits", s.hits},
                               {"misses", s.misses},
                               {"hit_rate", s.hit_rate()},
                               {"best", best}})
              << "\n";
    return 0;
  }
  std::vector<std::string> counts;
  for (RecordStatus status : kStatuses) {
    counts.push_back(std::to_string(s.by_status[static_cast<int>(status)]) + " " + StatusName(status));
  }
  const double percent_of_limit =
      s.size_limit_bytes ? 100.0 * static_cast<double>(s.bytes) / static_cast<double>(s.size_limit_bytes) : 0;
  std::cout << "cache       " << cache->path() << " (schema " << cache->schema_version() << ")\n"
            << "records     " << s.records << ": " << Join(counts, ", ") << "\n"
            << "kernels     " << HumanBytes(s.bytes) << " of " << HumanBytes(s.size_limit_bytes) << " limit ("
            << Format("%.1f%%", percent_of_limit) << ")\n"
            << "file        " << HumanBytes(s.file_bytes) << " (database and WAL)\n"
            << "keys seen   " << s.keys_seen << "\n"
            << "lookups     " << s.hits << " hits, " << s.misses << " misses, hit rate "
            << Format("%.1f%%", 100.0 * s.hit_rate()) << "\n";
  std::cout << "\nbest verified speedups\n";
  if (s.best.empty()) {
    std::cout << "  (no verified kernels yet)\n";
    return 0;
  }
  std::vector<std::vector<std::string>> rows;
  for (const auto& b : s.best) {
    rows.push_back({std::to_string(b.id), ShortHash(b.key_hash), SpeedupText(b.speedup), MicrosText(b.median_us),
                    MicrosText(b.baseline_us), b.key_text});
  }
  PrintTable(std::cout,
             {{"ID", true}, {"KEY", false}, {"SPEEDUP", true}, {"MEDIAN(us)", true}, {"PYTORCH(us)", true},
              {"OP / KEY", false}},
             rows, TableWidth());
  return 0;
}

int CmdRemove(const CacheCommands::Options& o) {
  auto cache = OpenOrReport(o, Access::kWrite);
  if (!cache) return 1;
  bool failed = false;
  std::vector<int64_t> ids;
  for (const auto& key : o.rm_keys) {
    const auto id = ResolveOneOrReport(*cache, key);
    if (!id) {
      failed = true;
    } else if (std::find(ids.begin(), ids.end(), *id) == ids.end()) {
      ids.push_back(*id);
    }
  }
  Json removed = Json::array();
  for (int64_t id : ids) {
    // Described before removal: afterwards there is nothing left to describe.
    const std::string description = DescribeRecord(*cache, id);
    if (auto s = cache->Remove(id); !s.ok()) {
      failed = true;
      Report(s);
      continue;
    }
    if (o.json) {
      removed.push_back(id);
    } else {
      std::cout << "removed " << description << "\n";
    }
  }
  if (o.json) std::cout << DumpJson(Json{{"removed", removed}, {"ok", !failed}}) << "\n";
  return failed ? 1 : 0;
}

int CmdEvict(const CacheCommands::Options& o) {
  auto target = ParseSize(o.evict_to);
  if (!target.ok()) return Report(target.status());  // the option's validator makes this unreachable
  auto cache = OpenOrReport(o, Access::kWrite);
  if (!cache) return 1;
  auto report = cache->Evict(*target);
  if (!report.ok()) return Report(report.status());
  if (o.json) {
    std::cout << DumpJson(Json{{"target_bytes", *target},
                               {"removed", report->removed},
                               {"freed_bytes", report->freed_bytes},
                               {"remaining_bytes", report->remaining_bytes}})
              << "\n";
    return 0;
  }
  std::cout << "evicted " << report->removed << (report->removed == 1 ? " record" : " records") << ", freed "
            << HumanBytes(report->freed_bytes) << " (" << report->freed_bytes << " bytes); "
            << HumanBytes(report->remaining_bytes) << " (" << report->remaining_bytes << " bytes) remain\n";
  return 0;
}

Json ProblemsJson(const std::vector<kjit::cache::VerifyReport::Problem>& problems) {
  Json all = Json::array();
  for (const auto& p : problems) all.push_back(Json{{"id", p.id}, {"key_text", p.key_text}, {"reason", p.reason}});
  return all;
}

int CmdVerify(const CacheCommands::Options& o) {
  std::optional<kjit::cache::ReaderContext> reader;
  if (o.verify_arch_option->count() > 0) {
    auto nvrtc = ParseMajorMinor(o.verify_nvrtc);
    if (!nvrtc.ok()) return Report(nvrtc.status());  // the option's validator makes this unreachable
    reader.emplace();
    reader->arch = o.verify_arch;
    reader->toolchain.driver_version = o.verify_driver;
    reader->toolchain.nvrtc_major = nvrtc->first;
    reader->toolchain.nvrtc_minor = nvrtc->second;
    reader->toolchain.codegen_version = o.verify_codegen;
  }
  auto cache = OpenOrReport(o, Access::kWrite);
  if (!cache) return 1;
  auto report = cache->Verify(reader ? &*reader : nullptr);
  if (!report.ok()) return Report(report.status());
  const auto& r = *report;
  const bool healthy = r.integrity_ok && r.quarantined.empty();
  if (o.json) {
    Json out{{"checked", r.checked},
             {"integrity_ok", r.integrity_ok},
             {"integrity_message", r.integrity_message},
             {"quarantined", ProblemsJson(r.quarantined)}};
    if (reader) out["mismatched"] = ProblemsJson(r.mismatched);
    out["ok"] = healthy;
    std::cout << DumpJson(out) << "\n";
    return healthy ? 0 : 1;
  }
  std::cout << "checked " << r.checked << (r.checked == 1 ? " record" : " records") << "\n";
  if (r.integrity_ok) {
    std::cout << "database integrity: ok\n";
  } else {
    std::cout << "database integrity: FAILED\n";
    size_t start = 0;
    while (start < r.integrity_message.size()) {
      size_t end = r.integrity_message.find('\n', start);
      if (end == std::string::npos) end = r.integrity_message.size();
      std::cout << "  " << r.integrity_message.substr(start, end - start) << "\n";
      start = end + 1;
    }
  }
  std::cout << "quarantined now: " << r.quarantined.size() << "\n";
  for (const auto& p : r.quarantined) std::cout << "  #" << p.id << "  " << p.key_text << ": " << p.reason << "\n";
  if (reader) {
    std::cout << "not served to sm_" << reader->arch << " with " << reader->toolchain.ToString() << ": "
              << r.mismatched.size() << "\n";
    for (const auto& p : r.mismatched) std::cout << "  #" << p.id << "  " << p.key_text << ": " << p.reason << "\n";
  }
  return healthy ? 0 : 1;
}

int CmdExport(const CacheCommands::Options& o) {
  auto cache = OpenOrReport(o, Access::kRead);
  if (!cache) return 1;
  ListFilter filter;
  filter.status = StatusFilter(o.export_status);
  filter.op = o.export_op;
  auto written = cache->Export(o.export_file, filter);
  if (!written.ok()) return Report(written.status());
  if (o.json) {
    std::cout << DumpJson(Json{{"file", o.export_file}, {"exported", *written}}) << "\n";
  } else {
    std::cout << "exported " << *written << (*written == 1 ? " record" : " records") << " to " << o.export_file
              << "\n";
  }
  return 0;
}

int CmdImport(const CacheCommands::Options& o) {
  auto cache = OpenOrReport(o, Access::kWriteOrCreate);
  if (!cache) return 1;
  kjit::cache::ImportOptions options;
  options.trust = o.import_trust;
  auto report = cache->Import(o.import_file, options);
  if (!report.ok()) return Report(report.status());
  const auto& r = *report;
  if (o.json) {
    std::cout << DumpJson(Json{{"file", o.import_file},
                               {"imported", r.imported},
                               {"awaiting_verification", r.awaiting_verification},
                               {"duplicates", r.duplicates},
                               {"rejected", r.rejected}})
              << "\n";
  } else {
    std::cout << "imported " << r.imported << ", duplicates " << r.duplicates << ", rejected " << r.rejected.size()
              << "\n";
    if (r.awaiting_verification > 0) {
      std::cout << r.awaiting_verification << " verified kernel(s) wait, quarantined, until kjitd verifies and times "
                << "them on this machine's GPU (nothing is served them before)\n";
    }
    for (const auto& reason : r.rejected) std::cout << "  rejected: " << reason << "\n";
  }
  return r.rejected.empty() ? 0 : 1;
}

// Every evaluated kernel (kjitd's trials, kjit_tune_spaces --cache): the RL
// policy's experience. --json writes one object per line, the format of the
// dataset files in policy/datasets/ (README there), so a cache's history can be
// exported with `kjit cache measurements --json > FILE.jsonl`.
int CmdMeasurements(const CacheCommands::Options& o) {
  auto cache = OpenOrReport(o, Access::kRead);
  if (!cache) return 1;
  auto list = cache->measurements().ListMeasurements(o.measurements_family, o.measurements_limit);
  if (!list.ok()) return Report(list.status());
  auto key_text = [](const cache::Measurement& m) {
    auto key = kjit::OpKey::Decode(m.key_bytes);
    return key.ok() ? key->ToString() : std::string("(undecodable key)");
  };
  if (o.json) {
    for (const cache::Measurement& m : *list) {
      Json point = Json::object();
      for (const auto& [knob, value] : m.design.knobs) {
        // Knob values are integers in kjit's spaces; anything else stays text.
        char* end = nullptr;
        const long long v = std::strtoll(value.c_str(), &end, 10);
        if (!value.empty() && end != nullptr && *end == '\0') {
          point[knob] = v;
        } else {
          point[knob] = value;
        }
      }
      Json line{{"id", m.id},
                {"family", m.design.family},
                {"key", m.key_hash.ToHex()},
                {"key_text", key_text(m)},
                {"point", point},
                {"policy_version", m.design.policy_version},
                {"outcome", m.outcome},
                {"median_us", m.median_us},
                {"baseline_us", m.baseline_us},
                {"reward", m.reward},
                {"created", UtcTime(m.created_unix_ms)}};
      // detail is JSON where kjit wrote it (profile, reason); kept as text otherwise.
      Json detail = Json::parse(m.detail, nullptr, /*allow_exceptions=*/false);
      line["detail"] = detail.is_discarded() ? Json(m.detail) : detail;
      std::cout << line.dump(-1, ' ', false, Json::error_handler_t::replace) << "\n";
    }
    return 0;
  }
  if (list->empty()) {
    std::cout << "no measurements" << (o.measurements_family.empty() ? "" : " for this family") << "\n";
    return 0;
  }
  std::vector<std::vector<std::string>> rows;
  for (const cache::Measurement& m : *list) {
    std::string point;
    for (const auto& [knob, value] : m.design.knobs) point += (point.empty() ? "" : " ") + knob + "=" + value;
    rows.push_back({std::to_string(m.id), ShortHash(m.key_hash), m.design.family, m.outcome,
                    m.median_us > 0 ? MicrosText(m.median_us) : "-", m.baseline_us > 0 ? MicrosText(m.baseline_us) : "-",
                    Format("%.2f", m.reward), point + "  " + key_text(m)});
  }
  PrintTable(std::cout,
             {{"ID", true},
              {"KEY", false},
              {"FAMILY", false},
              {"OUTCOME", false},
              {"MEDIAN(us)", true},
              {"EAGER(us)", true},
              {"REWARD", true},
              {"POINT / KEY", false}},
             rows, TableWidth());
  return 0;
}

int Dispatch(const CacheCommands::Options& o) {
  if (*o.path) return CmdPath(o);
  if (*o.ls) return CmdList(o);
  if (*o.show) return CmdShow(o);
  if (*o.stats) return CmdStats(o);
  if (*o.rm) return CmdRemove(o);
  if (*o.evict) return CmdEvict(o);
  if (*o.verify) return CmdVerify(o);
  if (*o.export_) return CmdExport(o);
  if (*o.import) return CmdImport(o);
  if (*o.measurements) return CmdMeasurements(o);
  return 2;
}

}  // namespace

CacheCommands::CacheCommands(CLI::App& app) : options_(std::make_unique<Options>()) {
  Options& o = *options_;
  o.cache = app.add_subcommand("cache", "Inspect and maintain the kernel cache");
  o.cache->require_subcommand(1);
  o.cache->add_option("--cache", o.cache_path, "Cache file (default: $KJIT_CACHE, else $XDG_CACHE_HOME/kjit/cache.db)")
      ->type_name("PATH");
  o.cache->add_flag("--json", o.json, "Machine-readable output");

  const std::vector<std::string> statuses = {"candidate", "verified", "rejected", "quarantined"};
  auto add = [&](const char* name, const char* description) {
    CLI::App* sub = o.cache->add_subcommand(name, description);
    // So that `kjit cache ls --json` works as well as `kjit cache --json ls`.
    sub->fallthrough();
    sub->footer("Also accepted here: --cache PATH and --json (see kjit cache --help).");
    return sub;
  };

  o.path = add("path", "Print where the cache file is and whether it exists");

  o.ls = add("ls", "List the cached kernels");
  o.ls->add_option("--op", o.ls_op, "Only this op (exact schema name, e.g. aten::_softmax)")->type_name("OP");
  o.ls->add_option("--status", o.ls_status, "Only records with this status")->check(CLI::IsMember(statuses));
  o.ls_arch_option = o.ls->add_option("--arch", o.ls_arch, "Only this arch (e.g. 90 for sm_90)");
  o.ls->add_option("--sort", o.ls_sort, "Order by")
      ->check(CLI::IsMember({"speedup", "last-use", "size", "created"}))
      ->capture_default_str();
  o.ls->add_flag("--asc", o.ls_ascending, "Ascending order (default: descending)");
  o.ls->add_option("--limit", o.ls_limit, "At most this many records (0: all)")->check(CLI::NonNegativeNumber);

  o.show = add("show", "Print everything stored about one kernel, its source with line numbers last");
  o.show->add_option("key", o.show_key, "Record id, or a prefix (at least 4 hex digits) of the key hash")
      ->required()
      ->type_name("KEY");

  o.stats = add("stats", "Counts, sizes, hit rate and the best speedups");

  o.rm = add("rm", "Remove records");
  o.rm->add_option("keys", o.rm_keys, "Record ids or key-hash prefixes")->required()->type_name("KEY");

  o.evict = add("evict", "Remove least recently used records until the kernels fit in SIZE");
  o.evict->add_option("--to", o.evict_to, "Target size: bytes, or with K, M, G suffix (KiB-based: 512M, 1.5G)")
      ->required()
      ->type_name("SIZE")
      ->check(SizeValidator());

  o.verify = add("verify", "Re-check every record's checksums (quarantining failures) and the database's integrity");
  o.verify_arch_option =
      o.verify->add_option("--arch", o.verify_arch, "Also list records a reader with this arch would not be served");
  auto* driver = o.verify->add_option("--driver", o.verify_driver, "The reader's CUDA driver version (e.g. 13000)");
  auto* nvrtc = o.verify->add_option("--nvrtc", o.verify_nvrtc, "The reader's NVRTC version (e.g. 13.0)")
                    ->type_name("MAJ.MIN")
                    ->check(VersionValidator());
  auto* codegen = o.verify->add_option("--codegen", o.verify_codegen, "The reader's code generator version");
  // A reader is served only on an exact toolchain match, so a partial context would report everything.
  o.verify_arch_option->needs(driver)->needs(nvrtc)->needs(codegen);
  driver->needs(o.verify_arch_option);
  nvrtc->needs(o.verify_arch_option);
  codegen->needs(o.verify_arch_option);

  std::vector<std::string> export_statuses = statuses;
  export_statuses.push_back("any");
  o.export_ = add("export", "Write records to a portable file (itself a kernel cache)");
  o.export_->add_option("file", o.export_file, "Output file (must not exist yet)")->required()->type_name("FILE");
  o.export_->add_option("--status", o.export_status, "Only records with this status")
      ->check(CLI::IsMember(export_statuses))
      ->capture_default_str();
  o.export_->add_option("--op", o.export_op, "Only this op (exact schema name)")->type_name("OP");

  o.import = add("import", "Add the records of an exported file, checking each one");
  o.import->add_option("file", o.import_file, "File written by `kjit cache export`")
      ->required()
      ->check(CLI::ExistingFile);
  o.import->add_flag("--trust", o.import_trust,
                     "Serve the file's verified kernels at once, with the file's timings. DANGEROUS: a record's "
                     "checksums do not prove where it came from, so a forged file can make every process run its "
                     "kernels. Without --trust, kjitd verifies and times each on this GPU first");

  o.measurements = add("measurements",
                       "List every evaluated kernel (the RL policy's experience); --json: one line each, the "
                       "format of policy/datasets/");
  o.measurements->add_option("--family", o.measurements_family, "Only this op family (e.g. softmax)");
  o.measurements->add_option("--limit", o.measurements_limit, "At most this many, oldest first (0: all)")
      ->check(CLI::NonNegativeNumber);
}

CacheCommands::~CacheCommands() = default;

bool CacheCommands::chosen() const { return static_cast<bool>(*options_->cache); }

int CacheCommands::Run() {
  // The standard library and nlohmann/json throw (allocation, filesystem); none of it may reach main.
  try {
    return Dispatch(*options_);
  } catch (const std::exception& e) {
    std::cerr << "kjit: internal: " << e.what() << "\n";
    return 1;
  }
}

}  // namespace kjit::cli
