// Stable 128-bit content hashes (XXH3-128).
//
// Every key kjit stores or sends (OpKey hashes, compile-cache keys, blob
// checksums) is an XXH3-128 digest: fast enough for the shim's per-call path,
// wide enough that collisions are not a practical concern for a kernel cache,
// and specified byte-for-byte so the same input hashes the same on every
// machine, process and build. Never hash in-memory structs: hash a canonical
// byte encoding.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "kjit/runtime/status.h"

namespace kjit {

struct Hash128 {
  uint64_t high = 0;
  uint64_t low = 0;

  friend bool operator==(const Hash128&, const Hash128&) = default;
  friend auto operator<=>(const Hash128&, const Hash128&) = default;

  // 32 lower-case hex digits, high word first.
  std::string ToHex() const;
  static Result<Hash128> FromHex(std::string_view hex);
};

// Bytes as lower-case hex ("kjit" -> "6b6a6974"), and back; FromHex rejects
// odd lengths and non-hex digits.
std::string HexEncode(std::string_view bytes);
Result<std::string> HexDecode(std::string_view hex);

Hash128 HashBytes(const void* data, size_t size);
inline Hash128 HashBytes(std::string_view bytes) { return HashBytes(bytes.data(), bytes.size()); }

// Streaming form, for hashing several fields without concatenating them. Each
// Add of a string is length-prefixed so ("ab","c") and ("a","bc") differ.
class Hasher {
 public:
  Hasher();
  ~Hasher();
  Hasher(const Hasher&) = delete;
  Hasher& operator=(const Hasher&) = delete;

  Hasher& AddRaw(const void* data, size_t size);
  Hasher& Add(std::string_view s);
  Hasher& Add(uint64_t v);
  Hash128 Finish() const;

 private:
  alignas(64) unsigned char state_[640];  // XXH3_state_t, kept opaque here
};

struct Hash128Hasher {
  size_t operator()(const Hash128& h) const { return static_cast<size_t>(h.low ^ (h.high * 0x9e3779b97f4a7c15ULL)); }
};

}  // namespace kjit
