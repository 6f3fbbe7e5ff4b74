// ParseKeyText: OpKey::ToString()'s grammar, read back (single-call keys).
#include <cctype>
#include <charconv>
#include <cmath>
#include <string>

#include "kjit/policy/learn/replay.h"

namespace kjit::policy::learn {
namespace {

class KeyTextParser {
 public:
  explicit KeyTextParser(std::string_view text) : s_(text) {}

  Result<OpKey> Parse() {
    OpCall call;
    const size_t open = s_.find('(');
    if (open == std::string_view::npos || s_.starts_with('%')) return Fail("expected a single call 'op(args) sm_NN'");
    std::string_view name = s_.substr(0, open);
    // Overloads follow the last '.' after the namespace's "::".
    const size_t ns = name.rfind("::");
    const size_t dot = name.find('.', ns == std::string_view::npos ? 0 : ns);
    call.op = std::string(name.substr(0, dot));
    if (dot != std::string_view::npos) call.overload = std::string(name.substr(dot + 1));
    pos_ = open + 1;
    if (!Eat(')')) {
      while (true) {
        auto arg = ParseArg();
        if (!arg.ok()) return arg.status();
        call.args.push_back(std::move(*arg));
        if (Eat(')')) break;
        if (!Eat(',') || !Eat(' ')) return Fail("expected ', ' or ')'");
      }
    }
    if (!EatWord(" sm_")) return Fail("expected ' sm_NN'");
    auto arch = ParseInt();
    if (!arch.ok()) return arch.status();
    uint32_t numerics = 0;
    static constexpr std::pair<uint32_t, std::string_view> kFlags[] = {
        {kAllowTF32Matmul, "tf32"},
        {kAllowTF32Cudnn, "tf32_cudnn"},
        {kAllowFP16ReducedReduction, "fp16_reduced_reduction"},
        {kAllowBF16ReducedReduction, "bf16_reduced_reduction"},
        {kDeterministic, "deterministic"},
        {kAllowBF16Matmul, "bf16_matmul"},
    };
    while (Eat(' ')) {
      const size_t end = std::min(s_.find(' ', pos_), s_.size());
      const std::string_view flag = s_.substr(pos_, end - pos_);
      bool known = false;
      for (const auto& [bit, text] : kFlags) {
        if (flag == text) {
          numerics |= bit;
          known = true;
        }
      }
      if (!known) return Fail("unknown numerics flag '" + std::string(flag) + "'");
      pos_ = end;
    }
    if (pos_ != s_.size()) return Fail("trailing text");
    OpKey key;
    key.calls.push_back(std::move(call));
    key.arch = static_cast<uint16_t>(*arch);
    key.numerics = numerics;
    return key;
  }

 private:
  Status Fail(const std::string& what) const {
    return InvalidArgument("key text '" + std::string(s_) + "' at " + std::to_string(pos_) + ": " + what);
  }
  bool Eat(char c) {
    if (pos_ < s_.size() && s_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  bool EatWord(std::string_view w) {
    if (s_.substr(pos_).starts_with(w)) {
      pos_ += w.size();
      return true;
    }
    return false;
  }
  char Peek() const { return pos_ < s_.size() ? s_[pos_] : '\0'; }

  // The longest run of characters a number can be made of.
  std::string_view NumberToken() {
    const size_t start = pos_;
    while (pos_ < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[pos_])) || s_[pos_] == '.' ||
                                s_[pos_] == '-' || s_[pos_] == '+')) {
      ++pos_;
    }
    return s_.substr(start, pos_ - start);
  }

  Result<int64_t> ParseInt() {
    const size_t start = pos_;
    if (Peek() == '-') ++pos_;
    while (std::isdigit(static_cast<unsigned char>(Peek()))) ++pos_;
    int64_t v = 0;
    const auto [p, ec] = std::from_chars(s_.data() + start, s_.data() + pos_, v);
    if (ec != std::errc() || p != s_.data() + pos_) return Fail("expected an integer");
    return v;
  }

  // An int or a double: doubles always show '.', 'e', nan or inf (DoubleText).
  Result<Arg> ParseNumber() {
    const std::string_view tok = NumberToken();
    if (tok == "nan") return Arg{std::nan("")};
    if (tok == "inf") return Arg{std::numeric_limits<double>::infinity()};
    if (tok == "-inf") return Arg{-std::numeric_limits<double>::infinity()};
    if (tok.find_first_of(".eE") == std::string_view::npos) {
      int64_t v = 0;
      const auto [p, ec] = std::from_chars(tok.data(), tok.data() + tok.size(), v);
      if (ec != std::errc() || p != tok.data() + tok.size()) return Fail("bad integer '" + std::string(tok) + "'");
      return Arg{v};
    }
    double d = 0;
    const auto [p, ec] = std::from_chars(tok.data(), tok.data() + tok.size(), d);
    if (ec != std::errc() || p != tok.data() + tok.size()) return Fail("bad number '" + std::string(tok) + "'");
    return Arg{d};
  }

  Result<std::vector<int64_t>> IntsUntil(char close) {
    std::vector<int64_t> v;
    if (Eat(close)) return v;
    while (true) {
      auto x = ParseInt();
      if (!x.ok()) return x.status();
      v.push_back(*x);
      if (Eat(close)) return v;
      if (!Eat(',')) return Fail("expected ','");
    }
  }

  Result<TensorDesc> ParseTensor() {
    const size_t bracket = s_.find('[', pos_);
    if (bracket == std::string_view::npos) return Fail("expected a tensor");
    auto dtype = ParseDType(s_.substr(pos_, bracket - pos_));
    if (!dtype.ok()) return Fail("unknown dtype '" + std::string(s_.substr(pos_, bracket - pos_)) + "'");
    pos_ = bracket + 1;
    auto sizes = IntsUntil(']');
    if (!sizes.ok()) return sizes.status();
    TensorDesc t = TensorDesc::Contiguous(*dtype, *sizes);
    if (Eat('{')) {
      auto strides = IntsUntil('}');
      if (!strides.ok()) return strides.status();
      if (strides->size() != t.sizes.size()) return Fail("strides and sizes differ in rank");
      t.strides = *strides;
    }
    if (Eat('+')) {
      auto offset = ParseInt();
      if (!offset.ok()) return offset.status();
      t.storage_offset = *offset;
    }
    if (EatWord("@a")) {
      auto align = ParseInt();
      if (!align.ok()) return align.status();
      t.alignment = static_cast<uint8_t>(*align);
    }
    return t;
  }

  bool AtTensor() const {
    // A dtype name (letters and digits) directly followed by '['.
    size_t i = pos_;
    while (i < s_.size() && std::isalnum(static_cast<unsigned char>(s_[i]))) ++i;
    return i > pos_ && i < s_.size() && s_[i] == '[' && std::isalpha(static_cast<unsigned char>(s_[pos_]));
  }

  Result<Arg> ParseList() {
    // After '['. Elements are all tensors, all ints or all doubles.
    if (Eat(']')) return Arg{IntList{}};
    if (AtTensor()) {
      TensorList list;
      while (true) {
        auto t = ParseTensor();
        if (!t.ok()) return t.status();
        list.push_back(std::move(*t));
        if (Eat(']')) return Arg{std::move(list)};
        if (!Eat(',') || !Eat(' ')) return Fail("expected ', ' in a tensor list");
      }
    }
    std::vector<Arg> items;
    while (true) {
      auto x = ParseNumber();
      if (!x.ok()) return x.status();
      items.push_back(std::move(*x));
      if (Eat(']')) break;
      if (!Eat(',') || !Eat(' ')) return Fail("expected ', ' in a list");
    }
    bool any_double = false;
    for (const auto& a : items) any_double |= std::holds_alternative<double>(a);
    if (!any_double) {
      IntList v;
      for (const auto& a : items) v.push_back(std::get<int64_t>(a));
      return Arg{std::move(v)};
    }
    DoubleList v;
    for (const auto& a : items) {
      if (!std::holds_alternative<double>(a)) return Fail("a list mixes ints and doubles");
      v.push_back(std::get<double>(a));
    }
    return Arg{std::move(v)};
  }

  Result<Arg> ParseArg() {
    if (EatWord("None")) return Arg{NoneArg{}};
    if (EatWord("True")) return Arg{true};
    if (EatWord("False")) return Arg{false};
    if (EatWord("dtype=")) {
      const size_t start = pos_;
      while (std::isalnum(static_cast<unsigned char>(Peek()))) ++pos_;
      auto dtype = ParseDType(s_.substr(start, pos_ - start));
      if (!dtype.ok()) return Fail("unknown dtype");
      return Arg{*dtype};
    }
    if (Eat('\'')) {
      const size_t end = s_.find('\'', pos_);
      if (end == std::string_view::npos) return Fail("unterminated string");
      std::string v(s_.substr(pos_, end - pos_));
      pos_ = end + 1;
      return Arg{std::move(v)};
    }
    if (Eat('[')) return ParseList();
    if (Eat('%')) return Fail("value references (graph keys) are not parsed");
    if (AtTensor()) {
      auto t = ParseTensor();
      if (!t.ok()) return t.status();
      return Arg{std::move(*t)};
    }
    return ParseNumber();
  }

  std::string_view s_;
  size_t pos_ = 0;
};

}  // namespace

Result<OpKey> ParseKeyText(std::string_view text) { return KeyTextParser(text).Parse(); }

}  // namespace kjit::policy::learn
