#include "kjit/runtime/op_key.h"

#include <bit>
#include <charconv>
#include <cmath>
#include <cstring>
#include <type_traits>

namespace kjit {
namespace {

constexpr char kMagic[3] = {'K', 'J', 'K'};
constexpr uint8_t kEncodingVersion = 1;
// Bounds that no real op reaches; they keep a hostile byte string from
// allocating without limit.
constexpr uint64_t kMaxCount = 1u << 20;
constexpr uint64_t kMaxRank = 64;

struct DTypeEntry {
  DType type;
  const char* name;
  size_t size;
};
constexpr DTypeEntry kDTypes[] = {
    {DType::kBool, "bool", 1},        {DType::kUInt8, "u8", 1},          {DType::kInt8, "i8", 1},
    {DType::kInt16, "i16", 2},        {DType::kInt32, "i32", 4},         {DType::kInt64, "i64", 8},
    {DType::kFloat16, "f16", 2},      {DType::kBFloat16, "bf16", 2},     {DType::kFloat32, "f32", 4},
    {DType::kFloat64, "f64", 8},      {DType::kComplex64, "c64", 8},     {DType::kComplex128, "c128", 16},
    {DType::kFloat8E4M3FN, "f8e4m3fn", 1}, {DType::kFloat8E5M2, "f8e5m2", 1}, {DType::kUInt16, "u16", 2},
    {DType::kUInt32, "u32", 4},       {DType::kUInt64, "u64", 8},
};

const DTypeEntry* FindDType(DType t) {
  for (const auto& e : kDTypes) {
    if (e.type == t) return &e;
  }
  return nullptr;
}

// Reads the canonical encoding. Every method records the first error and
// becomes a no-op afterwards, so the decoder reads straight through.
class Reader {
 public:
  explicit Reader(std::string_view in) : in_(in) {}

  bool ok() const { return error_.empty(); }
  const std::string& error() const { return error_; }
  bool at_end() const { return pos_ == in_.size(); }
  size_t pos() const { return pos_; }

  void Fail(const std::string& what) {
    if (error_.empty()) error_ = what + " at byte " + std::to_string(pos_);
  }
  uint8_t Byte() {
    if (!ok()) return 0;
    if (pos_ >= in_.size()) {
      Fail("unexpected end of key");
      return 0;
    }
    return static_cast<uint8_t>(in_[pos_++]);
  }
  uint64_t Fixed(int bytes) {
    uint64_t v = 0;
    for (int i = 0; i < bytes; ++i) v |= uint64_t{Byte()} << (8 * i);
    return v;
  }
  uint64_t Varint() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64 && ok(); shift += 7) {
      const uint8_t b = Byte();
      v |= uint64_t{b & 0x7fu} << shift;
      if ((b & 0x80) == 0) return v;
    }
    Fail("varint longer than 10 bytes");
    return 0;
  }
  uint64_t Count(const char* what) {
    const uint64_t n = Varint();
    if (n > kMaxCount) Fail(std::string(what) + " count too large");
    return ok() ? n : 0;
  }
  std::string String() {
    const uint64_t n = Count("string");
    if (!ok()) return {};
    if (n > in_.size() - pos_) {
      Fail("string runs past the end");
      return {};
    }
    std::string s(in_.substr(pos_, n));
    pos_ += n;
    return s;
  }
  DType ReadDType() {
    const uint8_t code = Byte();
    if (ok() && FindDType(static_cast<DType>(code)) == nullptr) Fail("unknown dtype code " + std::to_string(code));
    return static_cast<DType>(code);
  }
  TensorDesc Tensor() {
    TensorDesc t;
    t.dtype = ReadDType();
    const uint64_t rank = Varint();
    if (rank > kMaxRank) Fail("tensor rank too large");
    if (!ok()) return t;
    t.sizes.resize(rank);
    t.strides.resize(rank);
    for (auto& s : t.sizes) {
      const uint64_t v = Varint();
      if (v > static_cast<uint64_t>(INT64_MAX)) Fail("tensor size out of range");
      s = static_cast<int64_t>(v);
    }
    for (auto& s : t.strides) s = UnZigZag(Varint());
    const uint64_t off = Varint();
    if (off > static_cast<uint64_t>(INT64_MAX)) Fail("storage offset out of range");
    t.storage_offset = static_cast<int64_t>(off);
    t.alignment = Byte();
    if (ok() && (t.alignment == 0 || t.alignment > 16 || (t.alignment & (t.alignment - 1)) != 0)) {
      Fail("alignment must be 1, 2, 4, 8 or 16");
    }
    return t;
  }

 private:
  std::string_view in_;
  size_t pos_ = 0;
  std::string error_;
};

Arg ReadArg(Reader& r, uint32_t call_index) {
  const auto tag = static_cast<ArgTag>(r.Byte());
  switch (tag) {
    case ArgTag::kNone: return NoneArg{};
    case ArgTag::kBool: {
      const uint8_t b = r.Byte();
      if (b > 1) r.Fail("bool must be 0 or 1");
      return b == 1;
    }
    case ArgTag::kInt: return UnZigZag(r.Varint());
    case ArgTag::kDouble: return std::bit_cast<double>(r.Fixed(8));
    case ArgTag::kString: return r.String();
    case ArgTag::kScalarType: return r.ReadDType();
    case ArgTag::kIntList: {
      IntList v(r.Count("int list"));
      for (auto& x : v) x = UnZigZag(r.Varint());
      return v;
    }
    case ArgTag::kDoubleList: {
      DoubleList v(r.Count("double list"));
      for (auto& x : v) x = std::bit_cast<double>(r.Fixed(8));
      return v;
    }
    case ArgTag::kTensor: return r.Tensor();
    case ArgTag::kTensorList: {
      const uint64_t n = r.Count("tensor list");
      TensorList v;
      for (uint64_t i = 0; i < n && r.ok(); ++i) {
        if (static_cast<ArgTag>(r.Byte()) != ArgTag::kTensor) r.Fail("tensor list holds a non-tensor");
        v.push_back(r.Tensor());
      }
      return v;
    }
    case ArgTag::kValueRef: {
      ValueRef ref;
      const uint64_t call = r.Varint();
      const uint64_t output = r.Varint();
      if (call >= call_index) r.Fail("value reference to a call that is not earlier");
      if (output > UINT32_MAX) r.Fail("value reference output out of range");
      ref.call = static_cast<uint32_t>(call);
      ref.output = static_cast<uint32_t>(output);
      return ref;
    }
  }
  r.Fail("unknown argument tag " + std::to_string(static_cast<int>(tag)));
  return NoneArg{};
}

std::string DoubleText(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  if (v == 0) return std::signbit(v) ? "-0.0" : "0.0";
  char buf[40];
  const auto end = std::to_chars(buf, buf + sizeof buf, v).ptr;  // shortest text that reads back exactly
  std::string s(buf, end);
  if (s.find_first_of(".eE") == std::string::npos) s += ".0";  // keep doubles visibly doubles
  return s;
}

template <typename T, typename F>
void JoinInto(std::string& out, const std::vector<T>& v, F&& each) {
  for (size_t i = 0; i < v.size(); ++i) {
    if (i != 0) out += ", ";
    each(out, v[i]);
  }
}

void TensorText(std::string& out, const TensorDesc& t) {
  out += DTypeName(t.dtype);
  out += '[';
  for (size_t i = 0; i < t.sizes.size(); ++i) {
    if (i != 0) out += ',';
    out += std::to_string(t.sizes[i]);
  }
  out += ']';
  // Strides are left out only when they are exactly the row-major ones: a tensor torch calls contiguous
  // may differ in the strides of its size-1 dims (a channels_last [C,1,kH,kW] weight), and the key, which
  // hashes every stride, must read back from its text.
  if (t.strides != TensorDesc::Contiguous(t.dtype, t.sizes).strides) {
    out += '{';
    for (size_t i = 0; i < t.strides.size(); ++i) {
      if (i != 0) out += ',';
      out += std::to_string(t.strides[i]);
    }
    out += '}';
  }
  if (t.storage_offset != 0) out += "+" + std::to_string(t.storage_offset);
  if (t.alignment != 16) out += "@a" + std::to_string(t.alignment);
}

void ArgText(std::string& out, const Arg& arg) {
  std::visit(
      [&out](const auto& v) {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, NoneArg>) {
          out += "None";
        } else if constexpr (std::is_same_v<T, bool>) {
          out += v ? "True" : "False";
        } else if constexpr (std::is_same_v<T, int64_t>) {
          out += std::to_string(v);
        } else if constexpr (std::is_same_v<T, double>) {
          out += DoubleText(v);
        } else if constexpr (std::is_same_v<T, std::string>) {
          out += '\'';
          out += v;
          out += '\'';
        } else if constexpr (std::is_same_v<T, DType>) {
          out += "dtype=";
          out += DTypeName(v);
        } else if constexpr (std::is_same_v<T, IntList>) {
          out += '[';
          JoinInto(out, v, [](std::string& o, int64_t x) { o += std::to_string(x); });
          out += ']';
        } else if constexpr (std::is_same_v<T, DoubleList>) {
          out += '[';
          JoinInto(out, v, [](std::string& o, double x) { o += DoubleText(x); });
          out += ']';
        } else if constexpr (std::is_same_v<T, TensorDesc>) {
          TensorText(out, v);
        } else if constexpr (std::is_same_v<T, TensorList>) {
          out += '[';
          JoinInto(out, v, [](std::string& o, const TensorDesc& t) { TensorText(o, t); });
          out += ']';
        } else if constexpr (std::is_same_v<T, ValueRef>) {
          out += '%' + std::to_string(v.call) + '.' + std::to_string(v.output);
        }
      },
      arg);
}

void WriteArg(KeyWriter& w, const Arg& arg) {
  std::visit(
      [&w](const auto& v) {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, NoneArg>) {
          w.None();
        } else if constexpr (std::is_same_v<T, bool>) {
          w.Bool(v);
        } else if constexpr (std::is_same_v<T, int64_t>) {
          w.Int(v);
        } else if constexpr (std::is_same_v<T, double>) {
          w.Double(v);
        } else if constexpr (std::is_same_v<T, std::string>) {
          w.String(v);
        } else if constexpr (std::is_same_v<T, DType>) {
          w.ScalarType(v);
        } else if constexpr (std::is_same_v<T, IntList>) {
          w.IntList(v);
        } else if constexpr (std::is_same_v<T, DoubleList>) {
          w.DoubleList(v);
        } else if constexpr (std::is_same_v<T, TensorDesc>) {
          w.Tensor(v.dtype, v.sizes, v.strides, v.storage_offset, v.alignment);
        } else if constexpr (std::is_same_v<T, TensorList>) {
          w.BeginTensorList(static_cast<uint32_t>(v.size()));
          for (const auto& t : v) w.Tensor(t.dtype, t.sizes, t.strides, t.storage_offset, t.alignment);
        } else if constexpr (std::is_same_v<T, ValueRef>) {
          w.Ref(v.call, v.output);
        }
      },
      arg);
}

bool DoublesSame(double a, double b) { return DoubleBits(a) == DoubleBits(b); }

// Equality as the encoding sees it: -0.0 != 0.0, NaN == NaN.
bool ArgsSame(const Arg& a, const Arg& b) {
  if (a.index() != b.index()) return false;
  if (const auto* x = std::get_if<double>(&a)) return DoublesSame(*x, std::get<double>(b));
  if (const auto* x = std::get_if<DoubleList>(&a)) {
    const auto& y = std::get<DoubleList>(b);
    if (x->size() != y.size()) return false;
    for (size_t i = 0; i < x->size(); ++i) {
      if (!DoublesSame((*x)[i], y[i])) return false;
    }
    return true;
  }
  return a == b;
}

}  // namespace

bool IsFloatingPoint(DType t) {
  return t == DType::kFloat16 || t == DType::kBFloat16 || t == DType::kFloat32 || t == DType::kFloat64;
}

bool IsIntegral(DType t) {
  switch (t) {
    case DType::kBool:
    case DType::kUInt8:
    case DType::kInt8:
    case DType::kInt16:
    case DType::kInt32:
    case DType::kInt64:
    case DType::kUInt16:
    case DType::kUInt32:
    case DType::kUInt64:
      return true;
    default:
      return false;
  }
}

size_t DTypeSize(DType t) {
  const auto* e = FindDType(t);
  return e ? e->size : 0;
}

std::string_view DTypeName(DType t) {
  const auto* e = FindDType(t);
  return e ? e->name : "?";
}

Result<DType> ParseDType(std::string_view name) {
  for (const auto& e : kDTypes) {
    if (name == e.name) return e.type;
  }
  return InvalidArgument("unknown dtype '" + std::string(name) + "' (try f32, f16, bf16, i64, ...)");
}

ArgTag TagOf(const Arg& arg) {
  static constexpr ArgTag kByIndex[] = {ArgTag::kNone,       ArgTag::kBool,       ArgTag::kInt,
                                        ArgTag::kDouble,     ArgTag::kString,     ArgTag::kScalarType,
                                        ArgTag::kIntList,    ArgTag::kDoubleList, ArgTag::kTensor,
                                        ArgTag::kTensorList, ArgTag::kValueRef};
  static_assert(std::variant_size_v<Arg> == std::size(kByIndex));
  return kByIndex[arg.index()];
}

TensorDesc TensorDesc::Contiguous(DType dtype, std::vector<int64_t> sizes) {
  TensorDesc t;
  t.dtype = dtype;
  t.strides.assign(sizes.size(), 1);
  for (size_t i = sizes.size(); i-- > 1;) t.strides[i - 1] = t.strides[i] * std::max<int64_t>(sizes[i], 1);
  t.sizes = std::move(sizes);
  return t;
}

int64_t TensorDesc::numel() const {
  int64_t n = 1;
  for (auto s : sizes) n *= s;
  return n;
}

bool TensorDesc::is_contiguous() const {
  // As torch: size-1 dims' strides do not matter, and an empty tensor is contiguous.
  if (numel() == 0) return true;
  int64_t expected = 1;
  for (size_t i = sizes.size(); i-- > 0;) {
    if (sizes[i] == 1) continue;
    if (strides[i] != expected) return false;
    expected *= sizes[i];
  }
  return true;
}

bool operator==(const OpCall& a, const OpCall& b) {
  if (a.op != b.op || a.overload != b.overload || a.args.size() != b.args.size()) return false;
  for (size_t i = 0; i < a.args.size(); ++i) {
    if (!ArgsSame(a.args[i], b.args[i])) return false;
  }
  return true;
}

bool operator==(const OpKey& a, const OpKey& b) {
  return a.arch == b.arch && a.numerics == b.numerics && a.calls == b.calls;
}

OpKey OpKey::Single(std::string op, std::string overload, std::vector<Arg> args, uint16_t arch, uint32_t numerics) {
  OpKey k;
  k.calls.push_back(OpCall{std::move(op), std::move(overload), std::move(args)});
  k.arch = arch;
  k.numerics = numerics;
  return k;
}

OpKey OpKey::Chain(std::vector<OpCall> calls, uint16_t arch, uint32_t numerics) {
  OpKey k;
  k.calls = std::move(calls);
  k.arch = arch;
  k.numerics = numerics;
  return k;
}

std::string OpKey::Encode() const {
  std::string out;
  {
    KeyWriter w(&out);  // its bytes reach `out` when it goes
    w.BeginKey(arch, numerics, static_cast<uint32_t>(calls.size()));
    for (const auto& c : calls) {
      w.BeginCall(c.op, c.overload, static_cast<uint32_t>(c.args.size()));
      for (const auto& a : c.args) WriteArg(w, a);
    }
  }
  return out;
}

Result<OpKey> OpKey::Decode(std::string_view bytes) {
  Reader r(bytes);
  for (char c : kMagic) {
    if (static_cast<char>(r.Byte()) != c) return Corruption("not an OpKey encoding (bad magic)");
  }
  const uint8_t version = r.Byte();
  if (version != kEncodingVersion) {
    return Corruption("OpKey encoding version " + std::to_string(version) + " is not supported (this kjit reads " +
                      std::to_string(kEncodingVersion) + ")");
  }
  OpKey key;
  key.arch = static_cast<uint16_t>(r.Fixed(2));
  key.numerics = static_cast<uint32_t>(r.Fixed(4));
  if (r.ok() && (key.numerics & ~kKnownNumericsBits) != 0) r.Fail("unknown numerics bits");
  const uint64_t calls = r.Count("call");
  if (r.ok() && calls == 0) r.Fail("a key needs at least one call");
  for (uint64_t i = 0; i < calls && r.ok(); ++i) {
    OpCall c;
    c.op = r.String();
    c.overload = r.String();
    if (r.ok() && c.op.empty()) r.Fail("empty op name");
    const uint64_t argc = r.Count("argument");
    for (uint64_t j = 0; j < argc && r.ok(); ++j) c.args.push_back(ReadArg(r, static_cast<uint32_t>(i)));
    key.calls.push_back(std::move(c));
  }
  if (r.ok() && !r.at_end()) r.Fail("trailing bytes after key");
  if (!r.ok()) return Corruption("malformed OpKey: " + r.error());
  if (key.Encode() != bytes) return Corruption("OpKey bytes are not in canonical form");
  return key;
}

Hash128 OpKey::Hash() const { return HashBytes(Encode()); }

Result<ChainLive> ChainLiveOf(const OpKey& key) {
  ChainLive out;
  out.calls = key.calls.size();
  if (out.calls > 0 && key.calls.back().op == kChainLiveOp) {
    out.calls -= 1;
    if (out.calls == 0) return InvalidArgument("the key has no call but kjit::live");
    const OpCall& marker = key.calls.back();
    const IntList* list = marker.args.size() == 1 ? std::get_if<IntList>(&marker.args[0]) : nullptr;
    if (list == nullptr || list->empty()) return InvalidArgument("kjit::live takes one non-empty list of call indices");
    for (int64_t c : *list) {
      if (c < 0 || static_cast<size_t>(c) >= out.calls || (!out.live.empty() && c <= static_cast<int64_t>(out.live.back()))) {
        return InvalidArgument("kjit::live lists calls in increasing order below " + std::to_string(out.calls));
      }
      out.live.push_back(static_cast<uint32_t>(c));
    }
  }
  if (out.calls == 0) return InvalidArgument(key.calls.empty() ? "the key has no call" : "the key has no call but kjit::live");
  for (size_t i = 0; i < out.calls; ++i) {
    const OpCall& c = key.calls[i];
    if (c.op == kChainLiveOp) return InvalidArgument("kjit::live may only end a key");
    if (c.op != kChainInputOp) continue;
    if (c.args.size() != 1 || !std::holds_alternative<TensorDesc>(c.args[0])) {
      return InvalidArgument("kjit::input takes one tensor");
    }
    for (uint32_t l : out.live) {
      if (l == i) {
        return InvalidArgument("kjit::live names a kjit::input (call " + std::to_string(i) + "), which is no result");
      }
    }
  }
  if (out.live.empty()) {
    if (key.calls[out.calls - 1].op == kChainInputOp) return InvalidArgument("the last call is a kjit::input, which is no result");
    out.live.push_back(static_cast<uint32_t>(out.calls - 1));
  }
  return out;
}

std::string OpKey::OpName() const {
  if (calls.size() == 1) return calls[0].op;
  std::string out = "chain(";
  bool first = true;
  for (const OpCall& c : calls) {
    if (c.op == kChainLiveOp || c.op == kChainInputOp) continue;
    out += first ? "" : ",";
    first = false;
    out += c.op.rfind("aten::", 0) == 0 ? c.op.substr(6) : c.op;
  }
  return out + ")";
}

std::string OpKey::ToString() const {
  std::string out;
  const bool graph = calls.size() > 1;
  for (size_t i = 0; i < calls.size(); ++i) {
    const auto& c = calls[i];
    if (i != 0) out += "; ";
    if (graph) out += '%' + std::to_string(i) + " = ";
    out += c.op;
    if (!c.overload.empty()) out += '.' + c.overload;
    out += '(';
    JoinInto(out, c.args, ArgText);
    out += ')';
  }
  out += " sm_" + std::to_string(arch);
  static constexpr std::pair<uint32_t, const char*> kFlags[] = {
      {kAllowTF32Matmul, "tf32"},
      {kAllowTF32Cudnn, "tf32_cudnn"},
      {kAllowFP16ReducedReduction, "fp16_reduced_reduction"},
      {kAllowBF16ReducedReduction, "bf16_reduced_reduction"},
      {kDeterministic, "deterministic"},
      {kAllowBF16Matmul, "bf16_matmul"},
  };
  for (const auto& [bit, name] : kFlags) {
    if (numerics & bit) {
      out += ' ';
      out += name;
    }
  }
  return out;
}

// ---------------------------------------------------------------- KeyWriter

KeyWriter::KeyWriter(std::string* out) : out_(out) { out_->clear(); }

void KeyWriter::Flush() {
  out_->append(buffer_, used_);
  used_ = 0;
}

// Strings longer than the buffer go straight to *out, after what the buffer holds.
void KeyWriter::Bytes(std::string_view bytes) {
  if (bytes.size() > kBufferBytes) {
    Flush();
    out_->append(bytes);
    return;
  }
  char* p = Room(bytes.size());
  std::memcpy(p, bytes.data(), bytes.size());
  Advance(p + bytes.size());
}

void KeyWriter::BeginKey(uint16_t arch, uint32_t numerics, uint32_t call_count) {
  Bytes(std::string_view(kMagic, sizeof kMagic));
  Byte(kEncodingVersion);
  Fixed(arch, 2);
  Fixed(numerics, 4);
  Varint(call_count);
  calls_left_ = call_count;
}

void KeyWriter::BeginCall(std::string_view op, std::string_view overload, uint32_t arg_count) {
  if (calls_left_ == 0 || args_left_ != 0 || list_left_ != 0) {
    bad_ = true;
  } else {
    --calls_left_;
  }
  Varint(op.size());
  Bytes(op);
  Varint(overload.size());
  Bytes(overload);
  Varint(arg_count);
  args_left_ = arg_count;
}

std::string KeyWriter::EncodeCall(std::string_view op, std::string_view overload, uint32_t arg_count) {
  std::string out;
  {
    KeyWriter w(&out);
    w.calls_left_ = 1;
    w.BeginCall(op, overload, arg_count);
  }
  return out;
}

void KeyWriter::BeginEncodedCall(std::string_view encoded, uint32_t arg_count) {
  if (calls_left_ == 0 || args_left_ != 0 || list_left_ != 0) {
    bad_ = true;
  } else {
    --calls_left_;
  }
  Bytes(encoded);
  args_left_ = arg_count;
}

void KeyWriter::String(std::string_view v) {
  CountArg();
  Byte(static_cast<uint8_t>(ArgTag::kString));
  Varint(v.size());
  Bytes(v);
}

void KeyWriter::IntList(std::span<const int64_t> v) {
  CountArg();
  Byte(static_cast<uint8_t>(ArgTag::kIntList));
  Varint(v.size());
  for (auto x : v) Varint(ZigZag(x));
}

void KeyWriter::DoubleList(std::span<const double> v) {
  CountArg();
  Byte(static_cast<uint8_t>(ArgTag::kDoubleList));
  Varint(v.size());
  for (auto x : v) Fixed(DoubleBits(x), 8);
}

void KeyWriter::Tensor(DType dtype, std::span<const int64_t> sizes, std::span<const int64_t> strides,
                       int64_t storage_offset, uint8_t alignment) {
  if (list_left_ > 0) {
    --list_left_;
  } else {
    CountArg();
  }
  if (sizes.size() != strides.size() || storage_offset < 0) bad_ = true;
  // Tag, dtype, rank, sizes, strides, offset, alignment: one room check for the whole tensor
  // where its longest encoding fits the buffer (up to rank 11), not one per field.
  const size_t longest = 3 + kMaxVarintBytes * (2 + sizes.size() + strides.size());
  if (longest <= kBufferBytes) {
    char* p = Room(longest);
    p = PutByte(p, static_cast<uint8_t>(ArgTag::kTensor));
    p = PutByte(p, static_cast<uint8_t>(dtype));
    p = PutVarint(p, sizes.size());
    for (auto s : sizes) {
      if (s < 0) bad_ = true;
      p = PutVarint(p, static_cast<uint64_t>(s));
    }
    for (auto s : strides) p = PutVarint(p, ZigZag(s));
    p = PutVarint(p, static_cast<uint64_t>(storage_offset));
    Advance(PutByte(p, alignment));
    return;
  }
  char* p = Room(2 + kMaxVarintBytes);
  p = PutByte(p, static_cast<uint8_t>(ArgTag::kTensor));
  p = PutByte(p, static_cast<uint8_t>(dtype));
  Advance(PutVarint(p, sizes.size()));
  for (auto s : sizes) {
    if (s < 0) bad_ = true;
    Varint(static_cast<uint64_t>(s));
  }
  for (auto s : strides) Varint(ZigZag(s));
  Advance(PutByte(PutVarint(Room(kMaxVarintBytes + 1), static_cast<uint64_t>(storage_offset)), alignment));
}

void KeyWriter::BeginTensorList(uint32_t count) {
  CountArg();
  Byte(static_cast<uint8_t>(ArgTag::kTensorList));
  Varint(count);
  list_left_ = count;
}

void KeyWriter::Ref(uint32_t call, uint32_t output) {
  CountArg();
  Byte(static_cast<uint8_t>(ArgTag::kValueRef));
  Varint(call);
  Varint(output);
}

Status KeyWriter::CountsWritten() const {
  if (bad_ || calls_left_ != 0 || args_left_ != 0 || list_left_ != 0) {
    return InvalidArgument("KeyWriter: the calls and arguments written do not match the counts declared");
  }
  return Status::Ok();
}

Status KeyWriter::Finish() {
  Flush();
  return CountsWritten();
}

Status KeyWriter::FinishView(std::string_view* bytes) {
  if (out_->empty()) {
    *bytes = std::string_view(buffer_, used_);
    used_ = 0;  // viewed where they are: nothing left for the destructor to move
  } else {
    Flush();
    *bytes = *out_;
  }
  return CountsWritten();
}

}  // namespace kjit
