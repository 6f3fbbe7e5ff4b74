#include "kjit/ipc/endpoint.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "kjit/runtime/paths.h"

namespace kjit::ipc {

std::string RuntimeDir() {
  if (const char* d = std::getenv("KJIT_RUNTIME_DIR"); d != nullptr && *d != '\0') return d;
  if (const char* x = std::getenv("XDG_RUNTIME_DIR"); x != nullptr && *x != '\0') return std::string(x) + "/kjit";
  return "/tmp/kjit-" + std::to_string(getuid());
}

Status EnsurePrivateRuntimeDir(const std::string& dir) {
  if (mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    const std::string parent = dir.substr(0, dir.rfind('/'));
    if (!parent.empty()) KJIT_RETURN_IF_ERROR(MakeDirectories(parent, 0755));
    if (mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
      return IOError("cannot create " + dir + ": " + std::strerror(errno));
    }
  }
  struct stat st{};
  if (lstat(dir.c_str(), &st) != 0) return IOError("cannot inspect " + dir + ": " + std::strerror(errno));
  if (!S_ISDIR(st.st_mode)) return IOError(dir + " is not a directory");
  if (st.st_uid != getuid()) {
    return IOError(dir + " belongs to another user; kjit will not put its socket there (set KJIT_RUNTIME_DIR)");
  }
  if ((st.st_mode & 0077) != 0) {
    // Tighten a directory we own rather than expose the socket.
    if (chmod(dir.c_str(), 0700) != 0) return IOError("cannot make " + dir + " private: " + std::strerror(errno));
  }
  return Status::Ok();
}

Status CheckEndpointDirectory(const std::string& endpoint) {
  if (endpoint.rfind("ipc://", 0) != 0) return Status::Ok();
  const std::string path = endpoint.substr(6);
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos || slash == 0) return Status::Ok();  // a relative or root-level socket: the caller's choice
  const std::string dir = path.substr(0, slash);
  // The runtime directory is where another user could get first (/tmp/kjit-<uid>); an endpoint elsewhere was
  // named by the user (KJIT_ENDPOINT, --endpoint), who chose its directory.
  if (dir != RuntimeDir()) return Status::Ok();
  struct stat st{};
  if (stat(dir.c_str(), &st) != 0) {
    return Status(StatusCode::kUnavailable, "kjitd at " + endpoint + " is not running (" + dir + " does not exist)");
  }
  if (st.st_uid != getuid()) {
    return Status(StatusCode::kPermissionDenied,
                  dir + " belongs to another user (uid " + std::to_string(st.st_uid) +
                      "): kjit will not talk to a kjitd there. Remove it, or set KJIT_RUNTIME_DIR to a directory of "
                      "your own");
  }
  if ((st.st_mode & 0022) != 0) {
    return Status(StatusCode::kPermissionDenied,
                  dir + " is writable by other users: kjit will not talk to a kjitd there (`chmod 700 " + dir + "`)");
  }
  return Status::Ok();
}

std::string DefaultEndpoint() {
  if (const char* e = std::getenv("KJIT_ENDPOINT"); e != nullptr && *e != '\0') return e;
  return "ipc://" + RuntimeDir() + "/kjitd.sock";
}

std::string DefaultAnnounceEndpoint() { return "ipc://" + RuntimeDir() + "/kjitd-announce.sock"; }

std::string DefaultPidFile() { return RuntimeDir() + "/kjitd.pid"; }

}  // namespace kjit::ipc
