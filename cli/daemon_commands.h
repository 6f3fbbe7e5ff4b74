// `kjit daemon ...`, `kjit tasks` and `kjit submit`: run kjitd and talk to it.
//
//   kjit daemon [--endpoint EP] [--timeout-ms MS] start [--foreground] [-- KJITD FLAGS...]
//   kjit daemon stop [--timeout SECONDS]      Shutdown request, else SIGTERM to the pid file's kjitd
//   kjit daemon status [--json]               exit 0 running, 3 not running (as systemctl)
//   kjit daemon keygen --out PREFIX [--force] CURVE keypair for kjitd's tcp_endpoint
//   kjit tasks [--state S] [--limit N] [--json]   the task queue (from the cache file when kjitd is away)
//   kjit submit KEYHEX|--example [--priority N] [--detail TEXT] [--json]
//   kjit run [--no-daemon] -- CMD ARGS...     CMD with the shim preloaded; starts kjitd if none answers
//
// --endpoint (default: kjit::ipc::DefaultEndpoint()) and --timeout-ms (per
// request, default 2000) are accepted by daemon, tasks and submit, before or
// after the daemon subcommand. Errors print "kjit: <status>" and exit 1; bad
// usage exits 2. `kjit run` does not return once the command starts: the
// command replaces kjit, so its exit status is the command's (127 or 126 when
// it cannot be started, as from a shell).
#pragma once

#include <memory>

#include "kjit/runtime/op_key.h"

namespace CLI {
class App;
}

namespace kjit::cli {

// The sample key `kjit key example` prints and `kjit submit --example` submits.
OpKey ExampleKey();

// CLI11 binds options to variables that must outlive parsing, so registration
// returns the object that owns them; run it after CLI::App::parse succeeded.
class DaemonCommands {
 public:
  // Adds `daemon`, `tasks`, `submit` and `run` to `app`, which must outlive this object.
  explicit DaemonCommands(CLI::App& app);
  ~DaemonCommands();
  DaemonCommands(const DaemonCommands&) = delete;
  DaemonCommands& operator=(const DaemonCommands&) = delete;

  // Whether one of its commands was on the parsed command line.
  bool chosen() const;

  // Runs the chosen command; returns the exit status (0 ok, 1 failed, 2 bad
  // usage, 3 from `daemon status` when kjitd is not running). `daemon start
  // --foreground` does not return when it could start kjitd: it becomes kjitd.
  int Run();

  // The parsed values; defined in the .cc (public only so that its helpers can take it).
  struct Options;

 private:
  std::unique_ptr<Options> options_;
};

}  // namespace kjit::cli
