// The one SQLite connection that a cache file's stores share (the kernel store,
// the task queue, the measurement log, the checkpoint store), and the encodings
// they share. Internal to cache/.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>

#include "kjit/runtime/hash.h"
#include "sqlite.h"

namespace kjit::cache {

struct Connection {
  std::string path;
  bool read_only = false;
  mutable std::mutex mu;  // one connection; statements are not shared across threads
  sql::Database db;
};

inline int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

inline std::string HashBlob(const Hash128& h) {
  std::string b(16, '\0');
  for (int i = 0; i < 8; ++i) {
    b[static_cast<size_t>(i)] = static_cast<char>(h.high >> (56 - 8 * i));
    b[static_cast<size_t>(8 + i)] = static_cast<char>(h.low >> (56 - 8 * i));
  }
  return b;
}

inline Hash128 BlobHash(std::string_view b) {
  Hash128 h;
  if (b.size() != 16) return h;
  for (int i = 0; i < 8; ++i) {
    h.high = (h.high << 8) | static_cast<unsigned char>(b[static_cast<size_t>(i)]);
    h.low = (h.low << 8) | static_cast<unsigned char>(b[static_cast<size_t>(8 + i)]);
  }
  return h;
}

}  // namespace kjit::cache
