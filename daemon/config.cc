#include "config.h"

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "kjit/cache/kernel_cache.h"
#include "kjit/ipc/endpoint.h"
#include "kjit/runtime/hash.h"

namespace kjit::daemon {
namespace {

std::string Trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return "";
  const size_t e = s.find_last_not_of(" \t\r");
  return s.substr(b, e - b + 1);
}

std::string EnvName(const std::string& key) {
  std::string v = "KJITD_";
  for (char c : key) v += static_cast<char>(c == '-' ? '_' : std::toupper(static_cast<unsigned char>(c)));
  return v;
}

}  // namespace

const std::vector<std::pair<std::string, std::string>>& ConfigKeys() {
  static const std::vector<std::pair<std::string, std::string>> keys = {
      {"endpoint", "where clients connect (ipc://... in a private directory by default)"},
      {"announce_endpoint", "where kjitd publishes newly verified kernels"},
      {"tcp_endpoint", "optional tcp://host:port; needs curve_secret_key_file"},
      {"curve_secret_key_file", "file holding the server's CURVE secret key (Z85, 40 characters)"},
      {"curve_authorized_keys_file",
       "client public keys (Z85, one per line) allowed on tcp_endpoint; required with tcp_endpoint unless "
       "curve_allow_any_client is true"},
      {"curve_allow_any_client",
       "true: without curve_authorized_keys_file, any client that knows the server's public key may connect over "
       "TCP, read-only (look up kernels, report what it ran, list tasks; not submit, tune, report failures or "
       "shut kjitd down)"},
      {"cache", "the kernel cache database"},
      {"pid_file", "pid file; also what keeps one kjitd per endpoint"},
      {"log_file", "where logs go (JSON lines); empty: stderr in the foreground, nowhere when detached (`kjit run` then passes its own)"},
      {"log_level", "error, warn, info or debug"},
      {"watch_interval_ms", "how often kjitd looks for newly verified kernels to announce"},
      {"evaluator", "the evaluator worker program; 'auto': kjit-evaluator beside kjitd"},
      {"devices", "GPUs to evaluate on, one worker each: 'all' (every GPU CUDA_VISIBLE_DEVICES leaves visible to kjitd), or "
                   "ordinals (counted after CUDA_VISIBLE_DEVICES) and UUIDs (GPU-..., as nvidia-smi -L shows) separated by commas"},
      {"when", "when to run trials: idle (only while a GPU is idle enough), always, or never"},
      {"idle_max_utilization", "a GPU is idle while other processes use at most this many percent of it"},
      {"idle_min_free_memory", "... and at least this fraction of its memory is free"},
      {"idle_settle_ms", "... and both have held for this long"},
      {"idle_client_hold_ms", "a program kjit serves that reports running ops on a GPU keeps it busy this long (0: ignore "
                              "such reports)"},
      {"idle_yields_per_trial", "a trial gives the GPU back to another process at most this many times (running "
                                "again from its start once the GPU is idle), then runs to its end: a program "
                                "that is never idle for a whole trial still gets kernels (0: never give it back)"},
      {"memory_cap_fraction", "a trial may use at most this fraction of the GPU's free memory; 'auto': 0.9 with "
                              "when = idle (nobody else is using the GPU), 0.5 with when = always (other work may be)"},
      {"compare", "how candidate outputs are compared: close (torch.testing.assert_close) or bitwise"},
      {"tuner", "the tuner kjitd starts to work its task queue: 'auto' (kjit-policy beside kjitd, run as `kjit-policy "
                "tune`), a program taking the same arguments, or 'off' (tasks wait for `kjit policy tune` or an agent)"},
      {"tune_first_trials", "trials of a key's first round (the expert default first; more: then the policy's proposals)"},
      {"tune_trials", "trials of each later round of a key (0: one round a key)"},
      {"tune_key_seconds", "a round's time budget, seconds"},
      {"tuner_args", "more arguments for the tuner, separated by blanks (see `kjit-policy tune --help`)"},
  };
  return keys;
}

Result<std::vector<std::string>> ParseDevices(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream in(text);
  std::string item;
  bool all = false;
  while (std::getline(in, item, ',')) {
    const size_t b = item.find_first_not_of(" \t");
    if (b == std::string::npos) continue;
    item = item.substr(b, item.find_last_not_of(" \t") - b + 1);
    if (item == "all") {
      all = true;
      continue;
    }
    const bool ordinal = item.find_first_not_of("0123456789") == std::string::npos;
    if (ordinal ? item.size() > 4 : (item.rfind("GPU-", 0) != 0 && item.rfind("MIG-", 0) != 0)) {
      return InvalidArgument("devices: '" + item +
                             "' is neither a CUDA ordinal (0, 1, ...) nor a GPU UUID (GPU-..., as nvidia-smi -L shows)");
    }
    // Two workers on one GPU would only take turns on it: the same name twice is one device.
    if (std::find(out.begin(), out.end(), item) == out.end()) out.push_back(item);
  }
  if (all && !out.empty()) return InvalidArgument("devices: 'all' cannot be combined with other devices");
  if (!all && out.empty()) return InvalidArgument("devices: empty; use 'all' or ordinals and UUIDs separated by commas");
  return out;
}

std::string DefaultConfigFile() {
  if (const char* c = std::getenv("KJIT_CONFIG"); c != nullptr && *c != '\0') return c;
  if (const char* x = std::getenv("XDG_CONFIG_HOME"); x != nullptr && *x != '\0') return std::string(x) + "/kjit/kjitd.conf";
  if (const char* h = std::getenv("HOME"); h != nullptr && *h != '\0') return std::string(h) + "/.config/kjit/kjitd.conf";
  return "";
}

std::string DaemonConfig::ToString() const {
  std::ostringstream out;
  for (const auto& [key, help] : ConfigKeys()) {
    const Value& v = values.at(key);
    out << key << " = " << v.value << "    # " << v.source << "\n";
  }
  return out.str();
}

Result<DaemonConfig> LoadConfig(const std::string& file, bool file_required,
                                const std::map<std::string, std::string>& flags) {
  DaemonConfig c;
  auto set = [&](const std::string& k, const std::string& v, const std::string& source) { c.values[k] = {v, source}; };
  const std::string endpoint_default = ipc::DefaultEndpoint();
  set("endpoint", endpoint_default, std::getenv("KJIT_ENDPOINT") ? "env KJIT_ENDPOINT" : "default");
  set("announce_endpoint", ipc::DefaultAnnounceEndpoint(), "default");
  set("tcp_endpoint", "", "default");
  set("curve_secret_key_file", "", "default");
  set("curve_authorized_keys_file", "", "default");
  set("curve_allow_any_client", "false", "default");
  set("cache", cache::DefaultCachePath(), std::getenv("KJIT_CACHE") ? "env KJIT_CACHE" : "default");
  set("pid_file", "", "default");  // derived from the endpoint below
  set("log_file", "", "default");
  set("log_level", "info", "default");
  set("watch_interval_ms", "1000", "default");
  set("evaluator", "auto", "default");
  set("devices", "all", "default");
  set("when", "idle", "default");
  set("idle_max_utilization", "10", "default");
  set("idle_min_free_memory", "0.25", "default");
  set("idle_settle_ms", "2000", "default");
  set("idle_client_hold_ms", "1500", "default");
  set("idle_yields_per_trial", "3", "default");
  set("memory_cap_fraction", "auto", "default");
  set("compare", "close", "default");
  set("tuner", "auto", "default");
  set("tune_first_trials", "1", "default");
  set("tune_trials", "8", "default");
  set("tune_key_seconds", "180", "default");
  set("tuner_args", "", "default");

  if (!file.empty()) {
    std::ifstream in(file);
    if (!in) {
      if (file_required) return NotFound("cannot read the configuration file " + file);
    } else {
      std::string line;
      int number = 0;
      while (std::getline(in, line)) {
        ++number;
        line = Trim(line.substr(0, line.find('#')));
        if (line.empty()) continue;
        const size_t eq = line.find('=');
        const std::string where = file + ":" + std::to_string(number);
        if (eq == std::string::npos) return InvalidArgument(where + ": expected 'key = value', got '" + line + "'");
        const std::string key = Trim(line.substr(0, eq));
        if (!c.values.count(key)) return InvalidArgument(where + ": unknown key '" + key + "' (see kjitd --help)");
        set(key, Trim(line.substr(eq + 1)), "file " + file);
      }
    }
  }
  for (const auto& [key, help] : ConfigKeys()) {
    const std::string var = EnvName(key);
    if (const char* v = std::getenv(var.c_str()); v != nullptr) set(key, v, "env " + var);
  }
  for (const auto& [key, value] : flags) {
    if (!c.values.count(key)) return InvalidArgument("unknown configuration key '" + key + "'");
    set(key, value, "flag");
  }
  if (c.values["announce_endpoint"].source == "default" &&
      c.values["endpoint"].value != ipc::DefaultEndpoint()) {
    // Each kjitd needs its own announce socket, or a second one would take over the first one's.
    const std::string ep = c.values["endpoint"].value;
    c.values["announce_endpoint"] = {
        "ipc://" + ipc::RuntimeDir() + "/kjitd-announce-" + HashBytes(ep).ToHex().substr(0, 12) + ".sock",
        "derived from endpoint"};
  }
  if (c.values["pid_file"].value.empty()) {
    // One kjitd per endpoint: the default endpoint has the default pid file,
    // any other gets its own, named after the endpoint.
    const std::string ep = c.values["endpoint"].value;
    const std::string pid = ep == ipc::DefaultEndpoint()
                                ? ipc::DefaultPidFile()
                                : ipc::RuntimeDir() + "/kjitd-" + HashBytes(ep).ToHex().substr(0, 12) + ".pid";
    c.values["pid_file"] = {pid, "derived from endpoint"};
  }
  const std::string& level = c.values["log_level"].value;
  if (level != "error" && level != "warn" && level != "info" && level != "debug") {
    return InvalidArgument("log_level must be error, warn, info or debug, not '" + level + "'");
  }
  const std::string& interval = c.values["watch_interval_ms"].value;
  if (interval.empty() || interval.find_first_not_of("0123456789") != std::string::npos || std::stoll(interval) < 10) {
    return InvalidArgument("watch_interval_ms must be a whole number of milliseconds, at least 10");
  }
  if (auto devices = ParseDevices(c.values["devices"].value); !devices.ok()) return devices.status();
  const std::string& when = c.values["when"].value;
  if (when != "idle" && when != "always" && when != "never") {
    return InvalidArgument("when must be idle, always or never, not '" + when + "'");
  }
  if (c.values["compare"].value != "close" && c.values["compare"].value != "bitwise") {
    return InvalidArgument("compare must be close or bitwise, not '" + c.values["compare"].value + "'");
  }
  for (const char* key :
       {"idle_max_utilization", "idle_min_free_memory", "memory_cap_fraction", "idle_settle_ms", "idle_client_hold_ms",
        "idle_yields_per_trial"}) {
    const std::string& v = c.values[key].value;
    if (std::string(key) == "memory_cap_fraction" && v == "auto") continue;  // the `when` mode's default (idle.h)
    char* end = nullptr;
    const double x = std::strtod(v.c_str(), &end);
    const bool ms = std::string(key) == "idle_settle_ms" || std::string(key) == "idle_client_hold_ms" ||
                    std::string(key) == "idle_yields_per_trial";
    const double most = std::string(key) == "idle_max_utilization" ? 100 : ms ? 1e9 : 1;
    if (v.empty() || end == nullptr || *end != '\0' || !(x >= 0) || x > most) {
      return InvalidArgument(std::string(key) + " must be a number from 0 to " + (most == 1 ? "1" : most == 100 ? "100" : "1e9") +
                             (std::string(key) == "memory_cap_fraction" ? " or auto" : "") + ", not '" + v + "'");
    }
  }
  if (!c.values["tcp_endpoint"].value.empty() && c.values["curve_secret_key_file"].value.empty()) {
    return InvalidArgument("tcp_endpoint " + c.values["tcp_endpoint"].value +
                           " is set without curve_secret_key_file: kjitd refuses to listen on TCP without CURVE "
                           "encryption (make keys with `kjit daemon keygen`)");
  }
  const std::string& any = c.values["curve_allow_any_client"].value;
  if (any != "true" && any != "false") {
    return InvalidArgument("curve_allow_any_client must be true or false, not '" + any + "'");
  }
  if (!c.values["tcp_endpoint"].value.empty() && c.values["curve_authorized_keys_file"].value.empty() &&
      any != "true") {
    return InvalidArgument("tcp_endpoint " + c.values["tcp_endpoint"].value +
                           " is set without curve_authorized_keys_file: any client that knows the server's public "
                           "key could submit kernels, quarantine records or shut kjitd down. List the clients' public "
                           "keys there (each client makes its pair with `kjit daemon keygen`), or set "
                           "curve_allow_any_client = true to admit any such client read-only");
  }
  return c;
}

}  // namespace kjit::daemon
