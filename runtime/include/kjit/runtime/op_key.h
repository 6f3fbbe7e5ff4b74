// OpKey: the exact signature of an operator call, which kjit's cache is keyed by.
//
// Two calls share a kernel only if everything that can change the right kernel
// or its result is equal: the op's schema name and overload; for every argument,
// tensors by dtype, sizes, strides, storage offset and data-pointer alignment,
// scalars by exact value, lists element by element, None as None; the GPU arch;
// and the numerics settings that change results (TF32, reduced-precision
// reductions, determinism).
//
// A key holds one or more calls. One call is the common case. Several calls form
// a small graph, for fusion of op chains that eager PyTorch runs as separate
// kernels (pow -> mean -> rsqrt -> mul): an argument may then be a ValueRef to an
// earlier call's output, and the graph is keyed exactly as a single call is.
//
// Canonical encoding (version 1), all integers little-endian:
//   "KJK" 0x01                      magic and encoding version
//   u16 arch   u32 numerics         arch = major*10+minor; numerics = Numerics bits
//   varint call_count, then per call:
//     string op   string overload   varint arg_count   arg...
//   string = varint length, bytes (UTF-8, no NUL)
//   arg    = u8 ArgTag, then by tag:
//     None: nothing            Bool: u8 0|1          Int: zigzag varint
//     Double: u64 IEEE-754 bits (every NaN encoded as 0x7ff8000000000000; -0.0 kept)
//     String: string           ScalarType: u8 DType
//     IntList: varint n, n zigzag varints      DoubleList: varint n, n u64
//       (a bool[N] argument, such as a backward's output_mask, is an IntList of 0s and 1s)
//     Tensor: u8 DType, varint ndim, ndim varint sizes, ndim zigzag strides,
//             varint storage_offset, u8 alignment (1, 2, 4, 8 or 16)
//     TensorList: varint n, n times (u8 ArgTag::kTensor, tensor payload)
//     ValueRef: varint call, varint output   (call < index of the current call)
//   Varints are LEB128 with no redundant bytes. Every key has exactly one
//   encoding: Decode rejects any byte string that is not the encoding of what it
//   decodes to. The hash is XXH3-128 of the encoding.
//
// The encoding changes only with a new version byte; caches key on it, so a
// change must come with a migration.
#pragma once

#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "kjit/runtime/hash.h"
#include "kjit/runtime/status.h"

namespace kjit {

// Element types, with wire codes that never change (not c10::ScalarType's).
enum class DType : uint8_t {
  kBool = 1,
  kUInt8 = 2,
  kInt8 = 3,
  kInt16 = 4,
  kInt32 = 5,
  kInt64 = 6,
  kFloat16 = 7,
  kBFloat16 = 8,
  kFloat32 = 9,
  kFloat64 = 10,
  kComplex64 = 11,
  kComplex128 = 12,
  kFloat8E4M3FN = 13,
  kFloat8E5M2 = 14,
  kUInt16 = 15,
  kUInt32 = 16,
  kUInt64 = 17,
};
inline constexpr uint8_t kMaxDTypeCode = 17;

size_t DTypeSize(DType t);            // bytes per element
bool IsFloatingPoint(DType t);        // float16, bfloat16, float32, float64 (not float8, not complex)
bool IsIntegral(DType t);             // the integer types and bool
std::string_view DTypeName(DType t);  // "f32", "bf16", "i64", ...
Result<DType> ParseDType(std::string_view name);

// Numerics settings that change a kernel's results; bits of OpKey::numerics.
enum Numerics : uint32_t {
  kNumericsDefault = 0,
  kAllowTF32Matmul = 1u << 0,          // torch.backends.cuda.matmul.allow_tf32
  kAllowTF32Cudnn = 1u << 1,           // torch.backends.cudnn.allow_tf32
  kAllowFP16ReducedReduction = 1u << 2,  // ...allow_fp16_reduced_precision_reduction
  kAllowBF16ReducedReduction = 1u << 3,  // ...allow_bf16_reduced_precision_reduction
  kDeterministic = 1u << 4,            // torch.use_deterministic_algorithms(True)
  kAllowBF16Matmul = 1u << 5,          // float32 matmul precision "medium": bf16 inside
};
inline constexpr uint32_t kKnownNumericsBits = (1u << 6) - 1;

enum class ArgTag : uint8_t {
  kNone = 0,
  kBool = 1,
  kInt = 2,
  kDouble = 3,
  kString = 4,
  kScalarType = 5,
  kIntList = 6,
  kDoubleList = 7,
  kTensor = 8,
  kTensorList = 9,
  kValueRef = 10,
};

struct TensorDesc {
  DType dtype = DType::kFloat32;
  std::vector<int64_t> sizes;
  std::vector<int64_t> strides;  // in elements, as PyTorch reports them
  int64_t storage_offset = 0;    // in elements
  uint8_t alignment = 16;        // largest power of two <= 16 dividing the data address

  // The alignment field for a data pointer. Inline: the shim computes it for every tensor it keys.
  static constexpr uint8_t AlignmentOf(uintptr_t address) {
    if (address == 0) return 16;  // empty tensors may have no storage
    const auto low = static_cast<unsigned>(std::countr_zero(address));
    return static_cast<uint8_t>(1u << (low > 4 ? 4 : low));
  }
  // A contiguous (row-major) descriptor, 16-byte aligned, offset 0.
  static TensorDesc Contiguous(DType dtype, std::vector<int64_t> sizes);

  int64_t numel() const;
  bool is_contiguous() const;  // row-major dense, as torch's is_contiguous()
  friend bool operator==(const TensorDesc&, const TensorDesc&) = default;
};

struct NoneArg {
  friend bool operator==(NoneArg, NoneArg) = default;
};

// An output of an earlier call in the same key (fusion graphs).
struct ValueRef {
  uint32_t call = 0;
  uint32_t output = 0;
  friend bool operator==(const ValueRef&, const ValueRef&) = default;
};

using IntList = std::vector<int64_t>;
using DoubleList = std::vector<double>;
using TensorList = std::vector<TensorDesc>;

// One argument. The alternatives map one-to-one onto ArgTag.
using Arg = std::variant<NoneArg, bool, int64_t, double, std::string, DType, IntList, DoubleList, TensorDesc,
                         TensorList, ValueRef>;

ArgTag TagOf(const Arg& arg);

struct OpCall {
  std::string op;        // schema name with namespace: "aten::_softmax"
  std::string overload;  // "" for the default overload, else e.g. "dim_IntList"
  std::vector<Arg> args;
  friend bool operator==(const OpCall&, const OpCall&);
};

struct OpKey {
  std::vector<OpCall> calls;
  uint16_t arch = 0;      // 90 for sm_90
  uint32_t numerics = 0;  // Numerics bits

  static OpKey Single(std::string op, std::string overload, std::vector<Arg> args, uint16_t arch,
                      uint32_t numerics = kNumericsDefault);
  // A key of several calls (a chain: ValueRefs between them, the pseudo-calls below).
  static OpKey Chain(std::vector<OpCall> calls, uint16_t arch, uint32_t numerics = kNumericsDefault);

  std::string Encode() const;                         // canonical bytes
  static Result<OpKey> Decode(std::string_view bytes);  // inverse of Encode; strict
  Hash128 Hash() const;                               // HashBytes(Encode())
  // "aten::_softmax(f32[64,1048576], -1, False) sm_90". Not parsed back: use
  // Encode/Decode (or the hash) to move keys around.
  std::string ToString() const;
  // What the key runs, for listings: the op of a single call ("aten::_softmax"); for a chain, its ops without
  // the "aten::" prefix and without the kjit::input and kjit::live pseudo-calls:
  // "chain(mul,pow,mul,add,mul,tanh,add,mul)".
  std::string OpName() const;

  friend bool operator==(const OpKey&, const OpKey&);
};

// Chain keys (several calls; shim/FUSION.md, "Chain keys") carry two pseudo-calls that no dispatcher runs:
//   kjit::input(Tensor)  one tensor from outside the chain that several arguments use; they refer to it by
//                        ValueRef, so that a fused kernel reads it once. Its "output" is its argument.
//   kjit::live(IntList)  last, if present: the calls whose outputs the chain must write, in increasing order
//                        (absent: only the last call's). It may not name a kjit::input.
inline constexpr std::string_view kChainInputOp = "kjit::input";
inline constexpr std::string_view kChainLiveOp = "kjit::live";

// A key's calls without its trailing kjit::live, and the calls whose outputs it must write.
struct ChainLive {
  size_t calls = 0;            // calls before kjit::live (all of them when it is absent)
  std::vector<uint32_t> live;  // increasing; never empty: {calls - 1} when kjit::live is absent
};
// Checks the pseudo-calls' rules above (kjit::live last, its list non-empty, increasing, below `calls`, naming
// no kjit::input; kjit::input with one tensor argument) and that at least one call is left; InvalidArgument
// says which rule a key breaks. A single call's key gives {1, {0}}.
Result<ChainLive> ChainLiveOf(const OpKey& key);

// The key encoding's integer and float mappings: signed ints zigzag-encoded (then varints),
// doubles as their bits with every NaN one canonical NaN.
inline constexpr uint64_t kCanonicalNaN = 0x7ff8000000000000ULL;
constexpr uint64_t ZigZag(int64_t v) { return (static_cast<uint64_t>(v) << 1) ^ static_cast<uint64_t>(v >> 63); }
constexpr int64_t UnZigZag(uint64_t v) { return static_cast<int64_t>(v >> 1) ^ -static_cast<int64_t>(v & 1); }
inline uint64_t DoubleBits(double v) { return std::isnan(v) ? kCanonicalNaN : std::bit_cast<uint64_t>(v); }

// Writes the canonical encoding directly, without building an OpKey, for the
// per-call path of the shim. Callers must follow the grammar above (BeginKey,
// then for each call BeginCall and exactly arg_count arguments); Finish checks
// the counts. OpKey::Encode is implemented with it, so both produce the same bytes.
class KeyWriter {
 public:
  // Appends to *out; the string is cleared first and its capacity reused. The bytes reach *out
  // in Finish and when the writer is destroyed: until then they collect in an inline buffer,
  // written with plain stores (a string's push_back per byte, which reloads its size and
  // capacity and stores a terminator each time, was most of the cost of keying a small call).
  explicit KeyWriter(std::string* out);
  ~KeyWriter() {
    if (used_ != 0) Flush();
  }
  KeyWriter(const KeyWriter&) = delete;
  KeyWriter& operator=(const KeyWriter&) = delete;

  void BeginKey(uint16_t arch, uint32_t numerics, uint32_t call_count);
  void BeginCall(std::string_view op, std::string_view overload, uint32_t arg_count);
  // BeginCall's bytes for one op, made once (EncodeCall) and written per call by
  // BeginEncodedCall: the same bytes, without reading the op's name and overload each time.
  static std::string EncodeCall(std::string_view op, std::string_view overload, uint32_t arg_count);
  void BeginEncodedCall(std::string_view encoded, uint32_t arg_count);
  // The scalar writers are inline: a keyed call writes several, and a call each was a tenth of
  // keying a small call.
  void None() {
    CountArg();
    Byte(static_cast<uint8_t>(ArgTag::kNone));
  }
  void Bool(bool v) {
    CountArg();
    Advance(PutByte(PutByte(Room(2), static_cast<uint8_t>(ArgTag::kBool)), v ? 1 : 0));
  }
  void Int(int64_t v) {
    CountArg();
    Advance(PutVarint(PutByte(Room(1 + kMaxVarintBytes), static_cast<uint8_t>(ArgTag::kInt)), ZigZag(v)));
  }
  void Double(double v) {
    CountArg();
    Advance(PutFixed(PutByte(Room(9), static_cast<uint8_t>(ArgTag::kDouble)), DoubleBits(v), 8));
  }
  void String(std::string_view v);
  void ScalarType(DType t) {
    CountArg();
    Advance(PutByte(PutByte(Room(2), static_cast<uint8_t>(ArgTag::kScalarType)), static_cast<uint8_t>(t)));
  }
  void IntList(std::span<const int64_t> v);
  void DoubleList(std::span<const double> v);
  void Tensor(DType dtype, std::span<const int64_t> sizes, std::span<const int64_t> strides, int64_t storage_offset,
              uint8_t alignment);
  void BeginTensorList(uint32_t count);  // then `count` Tensor() calls
  void Ref(uint32_t call, uint32_t output);

  // Moves the bytes written so far to *out; OK if every declared call and argument was written.
  // Writing may go on after it.
  Status Finish();
  // Finish for a caller that only reads the bytes (to hash them): *bytes views them in the
  // writer's buffer where they all fit there, without the copy into *out, else in *out. The view
  // lasts while the writer does; nothing may be written after it.
  Status FinishView(std::string_view* bytes);

 private:
  static constexpr size_t kBufferBytes = 256;
  static constexpr size_t kMaxVarintBytes = 10;
  // Room for `n` more bytes at the cursor (n <= kBufferBytes).
  char* Room(size_t n) {
    if (kBufferBytes - used_ < n) Flush();
    return buffer_ + used_;
  }
  void Advance(const char* end) { used_ = static_cast<size_t>(end - buffer_); }
  void Flush();
  void Bytes(std::string_view bytes);
  void Byte(uint8_t b) { Advance(PutByte(Room(1), b)); }
  void Varint(uint64_t v) { Advance(PutVarint(Room(kMaxVarintBytes), v)); }
  void Fixed(uint64_t v, int bytes) { Advance(PutFixed(Room(8), v, bytes)); }
  static char* PutByte(char* p, uint8_t b) {
    *p = static_cast<char>(b);
    return p + 1;
  }
  static char* PutVarint(char* p, uint64_t v) {
    while (v >= 0x80) {
      *p++ = static_cast<char>(v | 0x80);
      v >>= 7;
    }
    *p++ = static_cast<char>(v);
    return p;
  }
  static char* PutFixed(char* p, uint64_t v, int bytes) {
    for (int i = 0; i < bytes; ++i) *p++ = static_cast<char>(v >> (8 * i));
    return p;
  }
  void CountArg() {
    if (args_left_ == 0 || list_left_ != 0) {
      bad_ = true;
      return;
    }
    --args_left_;
  }
  Status CountsWritten() const;
  std::string* out_;
  uint32_t calls_left_ = 0;
  uint32_t args_left_ = 0;
  uint32_t list_left_ = 0;
  bool bad_ = false;
  size_t used_ = 0;  // bytes of buffer_ not yet in *out_
  char buffer_[kBufferBytes];
};

}  // namespace kjit
