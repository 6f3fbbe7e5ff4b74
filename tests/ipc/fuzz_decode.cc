// Fuzz target for kjit::ipc::Decode, the first code that touches every byte a
// client sends kjitd. Whatever the input: Decode returns (no crash, no
// exception, no sanitizer report), fails only with kInvalidArgument, and what it
// accepts re-encodes canonically: Encode(Decode(Encode(x))) == Encode(x).
//
// Two builds of this file (tests/ipc/CMakeLists.txt):
//  - clang: a libFuzzer target (-fsanitize=fuzzer,address,undefined);
//    scripts/fuzz-ipc.sh runs it. KJIT_FUZZ_SEED_DIR=DIR makes it write encoded
//    sample messages into DIR first, as a starting corpus.
//  - other compilers (CI's g++): KJIT_FUZZ_STANDALONE adds a main() that feeds it
//    mutated sample messages and random bytes for a time budget, so the checks
//    run as the ctest ipc.fuzz_decode everywhere.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kjit/ipc/messages.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

using namespace kjit::ipc;

[[noreturn]] void Fail(const char* what, std::string_view input) {
  std::fprintf(stderr, "fuzz_decode: %s\ninput (%zu bytes):", what, input.size());
  for (unsigned char c : input) std::fprintf(stderr, " %02x", c);
  std::fprintf(stderr, "\n");
  std::abort();
}

// Every message type once with default values, and a few with content in the
// fields that have structure (bin, lists, maps, triples, nested tasks).
std::vector<std::string> SeedMessages() {
  std::vector<std::string> seeds;
  [&]<size_t... I>(std::index_sequence<I...>) {
    (seeds.push_back(Encode(Envelope{kProtocolVersion, I, Body(std::in_place_index<I>)})), ...);
  }(std::make_index_sequence<std::variant_size_v<Body>>());

  Lookup lookup{std::string("KJK\x01\x5a\x00\x00\x00", 8), 90, 13000, 13, 1, 2, "NVIDIA H200", "2.11.0"};
  seeds.push_back(Encode(Envelope{kProtocolVersion, 1000, lookup}));
  LookupReply reply;
  reply.found = true;
  reply.record_id = 12;
  reply.cubin = std::string("\x7f" "ELF\x00\x01", 6);
  reply.entry_point = "k";
  reply.grid[0] = 128;
  reply.block[0] = 256;
  seeds.push_back(Encode(Envelope{kProtocolVersion, 1001, reply}));
  TaskInfo task{7, "c97c4393cb47064a169d4bec25de480d", "aten::add", "queued", 1, 3, 2.5, 7.5, 0, "", 1, 2,
                1, 4, 1.5, 3.0, 1.0, 9, "p-1", "kjitd-x/1/0"};
  seeds.push_back(Encode(Envelope{kProtocolVersion, 1002, ListTasksReply{{task, task}}}));
  seeds.push_back(Encode(Envelope{kProtocolVersion, 1003, StatsReply{{{"requests", 3}, {"uptime_s", 1.5}}, std::nullopt}}));
  seeds.push_back(Encode(Envelope{
      kProtocolVersion, 1010,
      StatsReply{{{"requests", 3}},
                 std::vector<std::map<std::string, std::string>>{{{"device", "0"}, {"state", "ready"}}, {}}}}));
  seeds.push_back(Encode(Envelope{kProtocolVersion, 1004,
                                  Observation{1, "t", "aten::add", {"f32[4]", "f32[4]"}, 3.5, {{"arch", "90"}}}}));
  seeds.push_back(Encode(Envelope{kProtocolVersion, 1005, Hello{"fuzz", 1, {"lookup", "agent_env"}}}));
  seeds.push_back(Encode(Envelope{kProtocolVersion, 1006,
                                  ReportFailure{std::string("KJK\x01\x5a\x00", 6), 12, "launch", "too many threads"}}));
  seeds.push_back(Encode(Envelope{kProtocolVersion, 1007, FailureAck{true, "started", 0}}));
  seeds.push_back(Encode(Envelope{kProtocolVersion, 1008, ReportActivity{7, {"GPU-1234"}, 99}}));
  return seeds;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  uint64_t id = 0;
  kjit::Result<Envelope> decoded = Decode(input, &id);
  if (!decoded.ok()) {
    if (decoded.status().code() != kjit::StatusCode::kInvalidArgument) Fail("error other than invalid_argument", input);
    if (decoded.status().message().empty()) Fail("error without a message", input);
    return 0;
  }
  if (id != decoded->id) Fail("id_out differs from the decoded id", input);
  const std::string encoded = Encode(*decoded);
  kjit::Result<Envelope> again = Decode(encoded);
  if (!again.ok()) Fail(("re-encoded message does not decode: " + again.status().ToString()).c_str(), input);
  if (Encode(*again) != encoded) Fail("re-encoding is not stable", input);
  return 0;
}

#ifndef KJIT_FUZZ_STANDALONE

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv);

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const char* dir = std::getenv("KJIT_FUZZ_SEED_DIR");
  if (dir == nullptr || *dir == '\0') return 0;
  std::filesystem::create_directories(dir);
  const std::vector<std::string> seeds = SeedMessages();
  for (size_t i = 0; i < seeds.size(); ++i) {
    std::ofstream(std::filesystem::path(dir) / ("seed-" + std::to_string(i)), std::ios::binary) << seeds[i];
  }
  return 0;
}

#else  // KJIT_FUZZ_STANDALONE

namespace {

// Bytes that change a msgpack value's type or declared size: most interesting
// decoder paths start at one of them.
constexpr unsigned char kFormatBytes[] = {0x00, 0x7f, 0x80, 0x8f, 0x90, 0x9f, 0xa0, 0xbf, 0xc0, 0xc1, 0xc2, 0xc3,
                                          0xc4, 0xc5, 0xc6, 0xca, 0xcb, 0xcc, 0xcf, 0xd0, 0xd3, 0xd9, 0xda, 0xdb,
                                          0xdc, 0xdd, 0xde, 0xdf, 0xe0, 0xff};

class Mutator {
 public:
  explicit Mutator(uint64_t seed) : rng_(seed) {}

  size_t Below(size_t n) { return n == 0 ? 0 : static_cast<size_t>(rng_() % n); }

  std::string Mutate(std::string bytes, const std::vector<std::string>& pool) {
    for (size_t edits = 1 + Below(4); edits > 0; --edits) {
      const size_t at = Below(bytes.size());
      switch (Below(8)) {
        case 0:
          if (!bytes.empty()) bytes[at] = static_cast<char>(bytes[at] ^ (1u << Below(8)));
          break;
        case 1:
          if (!bytes.empty()) bytes[at] = static_cast<char>(kFormatBytes[Below(sizeof(kFormatBytes))]);
          break;
        case 2: bytes.insert(at, 1, static_cast<char>(rng_())); break;
        case 3: bytes.erase(at, 1 + Below(8)); break;
        case 4: bytes.resize(Below(bytes.size() + 1)); break;
        case 5: {  // splice in part of another message
          const std::string& other = pool[Below(pool.size())];
          const size_t from = Below(other.size());
          bytes.insert(at, other.substr(from, 1 + Below(other.size() - from)));
          break;
        }
        case 6:  // a big-endian length or count next to a format byte
          for (size_t i = 0; i < 4 && at + i < bytes.size(); ++i) bytes[at + i] = static_cast<char>(0xff);
          break;
        default:
          if (!bytes.empty()) bytes[at] = static_cast<char>(bytes[at] + 1 - static_cast<char>(Below(3)));
          break;
      }
    }
    return bytes;
  }

  std::string RandomBytes() {
    std::string bytes(Below(64), '\0');
    for (char& c : bytes) c = static_cast<char>(rng_());
    return bytes;
  }

 private:
  std::mt19937_64 rng_;
};

void Run(std::string_view bytes) {
  LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
}

}  // namespace

// fuzz_decode [SECONDS [SEED]]: mutates encoded sample messages for SECONDS (20).
int main(int argc, char** argv) {
  const double seconds = argc > 1 ? std::atof(argv[1]) : 20.0;
  const uint64_t seed = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 1;
  const std::vector<std::string> seeds = SeedMessages();
  // Mutants that still decode are valid messages of new shapes: mutating them
  // further reaches deeper than mutating the seeds alone.
  std::vector<std::string> pool = seeds;
  constexpr size_t kMaxPool = 4096;
  Mutator mutator(seed);

  for (const std::string& s : seeds) Run(s);
  const auto start = std::chrono::steady_clock::now();
  const auto deadline = start + std::chrono::duration<double>(seconds);
  uint64_t inputs = 0, accepted = 0;
  while (true) {
    if (inputs % 256 == 0 && std::chrono::steady_clock::now() >= deadline) break;
    ++inputs;
    const std::string input = mutator.Below(16) == 0 ? mutator.RandomBytes()
                                                     : mutator.Mutate(pool[mutator.Below(pool.size())], pool);
    Run(input);
    if (Decode(input).ok()) {
      ++accepted;
      if (pool.size() < kMaxPool) {
        pool.push_back(input);
      } else {
        pool[seeds.size() + mutator.Below(kMaxPool - seeds.size())] = input;
      }
    }
  }
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("fuzz_decode: %llu inputs in %.1f s (seed %llu), %llu decoded, none crashed\n",
              static_cast<unsigned long long>(inputs), elapsed, static_cast<unsigned long long>(seed),
              static_cast<unsigned long long>(accepted));
  return 0;
}

#endif  // KJIT_FUZZ_STANDALONE
