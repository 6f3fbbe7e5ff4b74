// kjitd's configuration: defaults, then a file, then the environment, then
// flags, each overriding the one before. Every value remembers where it came
// from, for `kjitd --print-config`.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "kjit/runtime/status.h"

namespace kjit::daemon {

struct DaemonConfig {
  // Every key, in print order, with its value and its source.
  struct Value {
    std::string value;
    std::string source;  // "default", "file <path>", "env <VAR>", "flag"
  };
  std::map<std::string, Value> values;

  const std::string& Get(const std::string& key) const { return values.at(key).value; }
  std::string ToString() const;  // "key = value    # source" lines
};

// The keys kjitd knows, with what each means (for --help and --print-config).
const std::vector<std::pair<std::string, std::string>>& ConfigKeys();

// The `devices` value: "all" gives an empty list (the caller enumerates the
// GPUs); otherwise ordinals and GPU UUIDs, blanks trimmed, duplicates dropped.
// kInvalidArgument for anything else, or for "all" mixed with devices.
Result<std::vector<std::string>> ParseDevices(const std::string& text);

// $KJIT_CONFIG, else $XDG_CONFIG_HOME/kjit/kjitd.conf, else ~/.config/kjit/kjitd.conf.
std::string DefaultConfigFile();

// Builds the configuration. `file` may be missing unless `file_required`; a
// malformed file or an unknown key is an error naming the line. `flags` are
// the values given on the command line.
Result<DaemonConfig> LoadConfig(const std::string& file, bool file_required,
                                const std::map<std::string, std::string>& flags);

}  // namespace kjit::daemon
