// `kjit cache ...`: inspect and maintain the on-disk kernel cache.
//
//   kjit cache [--cache PATH] [--json] path | ls | show | stats | rm | evict | verify | export | import
//
// --cache and --json belong to `cache` but may also follow the subcommand
// (`kjit cache ls --json`). Commands that only read open the file read-only and
// never create it; a missing file is reported as such, not as a SQLite error.
#pragma once

#include <memory>

namespace CLI {
class App;
}

namespace kjit::cli {

// CLI11 binds options to variables that must outlive parsing, so registration
// returns the object that owns them; run it after CLI::App::parse succeeded.
class CacheCommands {
 public:
  // Adds `cache` and its subcommands to `app`, which must outlive this object.
  explicit CacheCommands(CLI::App& app);
  ~CacheCommands();
  CacheCommands(const CacheCommands&) = delete;
  CacheCommands& operator=(const CacheCommands&) = delete;

  // Whether `cache` was on the parsed command line.
  bool chosen() const;

  // Runs the chosen subcommand; returns the exit status (0 ok, 1 failed, 2 bad usage).
  int Run();

  // The parsed values; defined in the .cc (public only so that its helpers can take it).
  struct Options;

 private:
  std::unique_ptr<Options> options_;
};

}  // namespace kjit::cli
