#include "kjit/runtime/hash.h"

#include <new>

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace kjit {
namespace {

XXH3_state_t* State(unsigned char* raw) { return std::launder(reinterpret_cast<XXH3_state_t*>(raw)); }
const XXH3_state_t* State(const unsigned char* raw) {
  return std::launder(reinterpret_cast<const XXH3_state_t*>(raw));
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

std::string Hash128::ToHex() const {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out(32, '0');
  for (int i = 0; i < 16; ++i) {
    out[static_cast<size_t>(15 - i)] = kDigits[(high >> (4 * i)) & 0xf];
    out[static_cast<size_t>(31 - i)] = kDigits[(low >> (4 * i)) & 0xf];
  }
  return out;
}

Result<Hash128> Hash128::FromHex(std::string_view hex) {
  if (hex.size() != 32) return InvalidArgument("a 128-bit hash is 32 hex digits, got " + std::to_string(hex.size()));
  Hash128 h;
  for (size_t i = 0; i < 32; ++i) {
    int v = HexValue(hex[i]);
    if (v < 0) return InvalidArgument("not a hex digit in hash: '" + std::string(1, hex[i]) + "'");
    uint64_t& word = i < 16 ? h.high : h.low;
    word = (word << 4) | static_cast<uint64_t>(v);
  }
  return h;
}

std::string HexEncode(std::string_view bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char c : bytes) {
    out += kDigits[c >> 4];
    out += kDigits[c & 0xf];
  }
  return out;
}

Result<std::string> HexDecode(std::string_view hex) {
  if (hex.size() % 2 != 0) return InvalidArgument("hex text has an odd number of digits");
  std::string out;
  out.reserve(hex.size() / 2);
  for (size_t i = 0; i < hex.size(); i += 2) {
    const int hi = HexValue(hex[i]), lo = HexValue(hex[i + 1]);
    if (hi < 0 || lo < 0) return InvalidArgument("not a hex digit at position " + std::to_string(hi < 0 ? i : i + 1));
    out += static_cast<char>(hi * 16 + lo);
  }
  return out;
}

Hash128 HashBytes(const void* data, size_t size) {
  XXH128_hash_t h = XXH3_128bits(data, size);
  return Hash128{h.high64, h.low64};
}

Hasher::Hasher() {
  static_assert(sizeof(XXH3_state_t) <= sizeof(state_), "grow Hasher::state_");
  static_assert(alignof(XXH3_state_t) <= 64, "Hasher::state_ alignment");
  new (state_) XXH3_state_t;
  XXH3_128bits_reset(State(state_));
}

Hasher::~Hasher() = default;  // XXH3_state_t is trivially destructible

Hasher& Hasher::AddRaw(const void* data, size_t size) {
  XXH3_128bits_update(State(state_), data, size);
  return *this;
}

Hasher& Hasher::Add(std::string_view s) {
  Add(static_cast<uint64_t>(s.size()));
  return AddRaw(s.data(), s.size());
}

Hasher& Hasher::Add(uint64_t v) {
  unsigned char le[8];
  for (int i = 0; i < 8; ++i) le[i] = static_cast<unsigned char>(v >> (8 * i));
  return AddRaw(le, sizeof le);
}

Hash128 Hasher::Finish() const {
  XXH128_hash_t h = XXH3_128bits_digest(State(state_));
  return Hash128{h.high64, h.low64};
}

}  // namespace kjit
