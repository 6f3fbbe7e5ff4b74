// kjitd's request loop: answers the protocol of ipc/messages.h from the kernel
// cache, keeps the task queue, and announces newly verified kernels.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "config.h"
#include "kjit/cache/kernel_cache.h"
#include "kjit/ipc/messages.h"
#include "kjit/runtime/status.h"

namespace kjit::daemon {

// Structured logging: one JSON object per line.
class Log {
 public:
  explicit Log(std::string level) : level_(Rank(level)) {}
  void SetLevel(const std::string& level) { level_ = Rank(level); }
  // event: a short snake_case name; fields: extra key/values.
  void Write(const char* level, const std::string& event, const std::map<std::string, std::string>& fields = {});

 private:
  static int Rank(const std::string& level);
  int level_;
};

class Server {
 public:
  Server(DaemonConfig config, std::unique_ptr<cache::KernelCache> cache, Log& log);
  ~Server();

  // Binds the sockets. After this, clients can connect.
  Status Bind();
  // Serves until `stop` is set (by a signal or a shutdown request). `reload`
  // set by SIGHUP makes it call `on_reload`.
  Status Run(std::atomic<bool>& stop, std::atomic<bool>& reload, const std::function<void()>& on_reload);

  // Handles one decoded request; public for tests.
  ipc::Body Handle(const ipc::Body& request, bool* shutdown_requested);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kjit::daemon
