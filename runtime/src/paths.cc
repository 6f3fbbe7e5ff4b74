#include "kjit/runtime/paths.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

namespace kjit {
namespace {

std::string ErrnoText(int err) { return std::strerror(err); }

}  // namespace

std::string CacheDir() {
  if (const char* d = std::getenv("KJIT_CACHE_DIR"); d != nullptr && *d != '\0') return d;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x != nullptr && *x != '\0') return std::string(x) + "/kjit";
  if (const char* h = std::getenv("HOME"); h != nullptr && *h != '\0') return std::string(h) + "/.cache/kjit";
  return "/tmp/kjit-cache-" + std::to_string(getuid());
}

Status MakeDirectories(const std::string& path, unsigned mode) {
  if (path.empty()) return InvalidArgument("empty directory path");
  std::string partial;
  size_t pos = 0;
  while (pos != std::string::npos) {
    pos = path.find('/', pos + 1);
    partial = path.substr(0, pos);
    if (partial.empty()) continue;
    if (mkdir(partial.c_str(), static_cast<mode_t>(mode)) != 0 && errno != EEXIST) {
      return IOError("cannot create directory " + partial + ": " + ErrnoText(errno));
    }
  }
  struct stat st{};
  if (stat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) return IOError(path + " exists and is not a directory");
  return Status::Ok();
}

Status WriteFileAtomic(const std::string& path, std::string_view contents) {
  const std::string tmp = path + ".tmp." + std::to_string(getpid());
  const int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return IOError("cannot create " + tmp + ": " + ErrnoText(errno));
  size_t done = 0;
  while (done < contents.size()) {
    const ssize_t n = write(fd, contents.data() + done, contents.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      close(fd);
      unlink(tmp.c_str());
      return IOError("cannot write " + tmp + ": " + ErrnoText(err));
    }
    done += static_cast<size_t>(n);
  }
  if (fsync(fd) != 0 || close(fd) != 0) {
    const int err = errno;
    unlink(tmp.c_str());
    return IOError("cannot flush " + tmp + ": " + ErrnoText(err));
  }
  if (rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    unlink(tmp.c_str());
    return IOError("cannot rename " + tmp + " to " + path + ": " + ErrnoText(err));
  }
  return Status::Ok();
}

Result<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound("cannot open " + path + ": " + ErrnoText(errno));
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return IOError("cannot read " + path);
  return ss.str();
}

}  // namespace kjit
