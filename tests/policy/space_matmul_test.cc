// The small-K mm and bmm design space, on CPU: what it declines, the checks that follow the
// layout, the expert defaults, and the sources of older points (space_test.cc compiles every family's points).
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <functional>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "kjit/policy/design_space.h"
#include "space_test_util.h"

namespace kjit::policy {
namespace {

namespace matmul_test {

OpKey MmKey(TensorDesc a, TensorDesc b, uint32_t numerics = kNumericsDefault) {
  return OpKey::Single("aten::mm", "", {std::move(a), std::move(b)}, 90, numerics);
}
OpKey BmmKey(TensorDesc a, TensorDesc b, uint32_t numerics = kNumericsDefault) {
  return OpKey::Single("aten::bmm", "", {std::move(a), std::move(b)}, 90, numerics);
}
// x.t() of a contiguous [cols, rows] matrix: sizes [rows, cols], strides [1, rows].
TensorDesc Transposed(DType dt, int64_t rows, int64_t cols) {
  TensorDesc d = TensorDesc::Contiguous(dt, {cols, rows});
  d.sizes = {rows, cols};
  d.strides = {1, rows};
  return d;
}
// The batched x.transpose(1, 2) of a contiguous [batch, cols, rows] tensor.
TensorDesc Transposed3(DType dt, int64_t batch, int64_t rows, int64_t cols) {
  TensorDesc d = TensorDesc::Contiguous(dt, {batch, cols, rows});
  d.sizes = {batch, rows, cols};
  d.strides = {rows * cols, 1, rows};
  return d;
}
Point MatmulPoint(int64_t stage, int64_t bm, int64_t bn, int64_t bk, int64_t tm, int64_t tn, int64_t vec, int64_t bpb = 1) {
  return Point{{"stage", stage}, {"bm", bm}, {"bn", bn}, {"bk", bk}, {"tm", tm},
               {"tn", tn},       {"vec", vec}, {"bpb", bpb}, {"hint", 0}, {"minb", 1}};
}

// The value of a preprocessor condition (an #if's or #elif's text) over integer macros: integers, names (0 where
// not an integer macro, as the preprocessor reads an undefined one), defined(NAME), ! and unary -, * / %, + -,
// < <= > >=, == !=, && and ||, parentheses.
class Condition {
 public:
  Condition(const std::string& text, const std::map<std::string, long long>& macros) : s_(text), macros_(macros) {}
  long long Value() { return Binary(1); }

 private:
  void Skip() {
    while (at_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[at_]))) ++at_;
  }
  bool Eat(const char* op) {
    Skip();
    if (s_.compare(at_, std::strlen(op), op) != 0) return false;
    at_ += std::strlen(op);
    return true;
  }
  std::string Name() {
    Skip();
    std::string name;
    while (at_ < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[at_])) || s_[at_] == '_')) name += s_[at_++];
    return name;
  }
  long long Unary() {
    if (Eat("!")) return !Unary();
    if (Eat("-")) return -Unary();
    if (Eat("(")) {
      const long long v = Binary(1);
      EXPECT_TRUE(Eat(")")) << s_;
      return v;
    }
    const std::string name = Name();
    EXPECT_FALSE(name.empty()) << "not a condition: " << s_;
    if (std::isdigit(static_cast<unsigned char>(name[0]))) return std::stoll(name, nullptr, 0);
    if (name == "defined") {
      const bool paren = Eat("(");
      const std::string macro = Name();
      if (paren) {
        EXPECT_TRUE(Eat(")")) << s_;
      }
      return macros_.count(macro);
    }
    const auto it = macros_.find(name);
    return it == macros_.end() ? 0 : it->second;
  }
  long long Binary(int min_rank) {
    static const struct { const char* op; int rank; } kOps[] = {
        {"||", 1}, {"&&", 2}, {"==", 3}, {"!=", 3}, {"<=", 4}, {">=", 4}, {"<", 4},
        {">", 4},  {"+", 5},  {"-", 5},  {"*", 6},  {"/", 6},  {"%", 6}};
    long long lhs = Unary();
    for (;;) {
      Skip();
      const auto* op = std::find_if(std::begin(kOps), std::end(kOps),
                                    [&](const auto& o) { return s_.compare(at_, std::strlen(o.op), o.op) == 0; });
      if (op == std::end(kOps) || op->rank < min_rank) return lhs;
      at_ += std::strlen(op->op);
      const long long rhs = Binary(op->rank + 1);
      const std::string o = op->op;
      if (o == "||") lhs = lhs || rhs;
      else if (o == "&&") lhs = lhs && rhs;
      else if (o == "==") lhs = lhs == rhs;
      else if (o == "!=") lhs = lhs != rhs;
      else if (o == "<=") lhs = lhs <= rhs;
      else if (o == ">=") lhs = lhs >= rhs;
      else if (o == "<") lhs = lhs < rhs;
      else if (o == ">") lhs = lhs > rhs;
      else if (o == "+") lhs = lhs + rhs;
      else if (o == "-") lhs = lhs - rhs;
      else if (o == "*") lhs = lhs * rhs;
      else lhs = rhs == 0 ? 0 : o == "/" ? lhs / rhs : lhs % rhs;
    }
  }
  const std::string& s_;
  const std::map<std::string, long long>& macros_;
  size_t at_ = 0;
};

// The lines of a generated source that the device compiler sees: matmul.cuh holds every strategy's and span
// variant's text, selected by #if on the knobs' macros (STAGE, SPAN), so a source's text says what the kernel
// does only through the branches its macros take. The branches of #if, #ifdef, #ifndef, #elif and #else that
// are taken (those lines themselves left out), with __CUDA_ARCH__ defined (the device side of the CPU
// emulation's #ifdef) and the taken `#define NAME INTEGER` lines read as they come.
std::string Compiled(const std::string& source) {
  std::map<std::string, long long> macros = {{"__CUDA_ARCH__", 900}};
  struct Level { bool outer, taken, live; };  // the enclosing branch live, a branch of this #if taken, this one live
  std::vector<Level> levels;
  auto live = [&] { return levels.empty() || levels.back().live; };
  std::string out;
  std::istringstream in(source);
  for (std::string line; std::getline(in, line);) {
    const size_t hash = line.find_first_not_of(" \t");
    if (hash == std::string::npos || line[hash] != '#') {
      if (live()) out += line + "\n";
      continue;
    }
    std::string rest = line.substr(hash + 1);
    if (const size_t comment = rest.find("//"); comment != std::string::npos) rest.resize(comment);
    std::istringstream words(rest);
    std::string word, arg;
    words >> word;
    std::getline(words, arg);
    if (word == "if" || word == "ifdef" || word == "ifndef") {
      const bool outer = live();
      bool take = false;
      if (outer && word == "if") take = Condition(arg, macros).Value() != 0;
      if (outer && word != "if") {
        std::string name;
        std::istringstream(arg) >> name;
        take = (macros.count(name) != 0) == (word == "ifdef");
      }
      levels.push_back({outer, take, outer && take});
    } else if (word == "elif" || word == "else" || word == "endif") {
      EXPECT_FALSE(levels.empty()) << "#" << word << " without #if";
      if (levels.empty()) return out;
      Level& l = levels.back();
      if (word == "endif") {
        levels.pop_back();
      } else {
        const bool take = l.outer && !l.taken && (word == "else" || Condition(arg, macros).Value() != 0);
        l.live = take;
        l.taken = l.taken || take;
      }
    } else if (live()) {
      if (word == "define") {
        std::istringstream def(arg);
        std::string name, value;
        def >> name >> value;
        char* end = nullptr;
        const long long v = std::strtoll(value.c_str(), &end, 0);
        macros[name] = !value.empty() && *end == '\0' ? v : 0;
      }
      out += line + "\n";
    }
  }
  EXPECT_TRUE(levels.empty()) << "an #if without #endif";
  return out;
}

TEST(MatmulSpace, CompiledTakesTheKnobsBranches) {
  const std::string src =
      "#define STAGE 4\n#define SPAN 2\na\n#if STAGE == 4 && SPAN >= 3  // note\nb\n#elif STAGE == 4\nc\n"
      "#if SPAN == 1 || !(STAGE - 4)\nd\n#else\ne\n#endif\n#else\nf\n#endif\n#ifdef __CUDA_ARCH__\ng\n#else\nh\n"
      "#endif\n#ifndef SPAN\ni\n#endif\n#if defined(STAGE) && STAGE * 2 % 5 == 3\nj\n#endif\n";
  EXPECT_EQ(Compiled(src), "#define STAGE 4\n#define SPAN 2\na\nc\nd\ng\nj\n");
}

TEST(MatmulSpace, DeclinesWhatItCannotServe) {
  constexpr DType f32 = DType::kFloat32, f16 = DType::kFloat16, bf16 = DType::kBFloat16;
  auto c = [](DType dt, std::vector<int64_t> s) { return TensorDesc::Contiguous(dt, std::move(s)); };
  const Family& f = *FindFamily(MmKey(c(f32, {64, 64}), c(f32, {64, 64})))->family;
  EXPECT_EQ(f.name(), "matmul");
  auto reason = [&](const OpKey& key) {
    auto m = f.Match(key);
    EXPECT_FALSE(m.ok()) << key.ToString();
    return m.ok() ? std::string() : m.status().ToString();
  };
  // Large inner dimensions are cuBLAS's: float32 over 256, the half types over 64.
  EXPECT_NE(reason(MmKey(c(f32, {4096, 512}), c(f32, {512, 4096}))).find("cuBLAS"), std::string::npos);
  EXPECT_NE(reason(BmmKey(c(bf16, {64, 64, 128}), c(bf16, {64, 128, 64}))).find("tensor cores"), std::string::npos);
  EXPECT_TRUE(f.Match(MmKey(c(f32, {4096, 256}), c(f32, {256, 4096}))).ok());
  EXPECT_TRUE(f.Match(MmKey(c(f16, {4096, 64}), c(f16, {64, 4096}))).ok());
  // What PyTorch rejects, other dtypes, empty products, negative strides, other ops and ranks.
  EXPECT_NE(reason(MmKey(c(f32, {8, 16}), c(f16, {16, 8}))).find("mixed"), std::string::npos);
  EXPECT_NE(reason(MmKey(c(f32, {8, 16}), c(f32, {15, 8}))).find("inner"), std::string::npos);
  EXPECT_NE(reason(BmmKey(c(f32, {2, 8, 16}), c(f32, {3, 16, 8}))).find("batch"), std::string::npos);
  EXPECT_NE(reason(MmKey(c(DType::kFloat64, {8, 16}), c(DType::kFloat64, {16, 8}))).find("dtype"), std::string::npos);
  EXPECT_NE(reason(MmKey(c(f32, {0, 16}), c(f32, {16, 8}))).find("empty"), std::string::npos);
  EXPECT_NE(reason(MmKey(c(f32, {8, 0}), c(f32, {0, 8}))).find("empty"), std::string::npos);
  TensorDesc flipped = c(f32, {8, 16});
  flipped.strides = {-16, 1};
  EXPECT_NE(reason(MmKey(flipped, c(f32, {16, 8}))).find("negative"), std::string::npos);
  EXPECT_NE(reason(MmKey(c(f32, {2, 8, 16}), c(f32, {16, 8}))).find("2-D"), std::string::npos);
  EXPECT_NE(reason(BmmKey(c(f32, {8, 16}), c(f32, {16, 8}))).find("3-D"), std::string::npos);
  EXPECT_FALSE(f.Match(OpKey::Single("aten::addmm", "", {c(f32, {8}), c(f32, {8, 16}), c(f32, {16, 8}), 1.0, 1.0}, 90)).ok());
}

TEST(MatmulSpace, TheKeyCarriesTf32AndKernelsUseFp32FmaOnly) {
  // (Three pairwise covers enumerate 6.2 million points each: seconds here, far longer under the sanitizers,
  // whose build checks kjit's own code, and MatmulSpace's other tests generate kernels there: skipped there.)
  const char* sweep = std::getenv("KJIT_SPACE_SWEEP");
  if (sweep != nullptr && std::string(sweep) == "cover") GTEST_SKIP() << "KJIT_SPACE_SWEEP=cover";
  const DeviceFacts device = DeviceFacts::H200();
  const TensorDesc a = TensorDesc::Contiguous(DType::kFloat32, {32768, 64});
  const TensorDesc b = TensorDesc::Contiguous(DType::kFloat32, {64, 32768});
  const OpKey off = MmKey(a, b), on = MmKey(a, b, kAllowTF32Matmul);
  // torch.backends.cuda.matmul.allow_tf32 is OpKey::numerics' bit (kjit_torch::CurrentNumerics): the two
  // settings are two keys, so a kernel verified for one is never served to the other.
  EXPECT_NE(off.Hash(), on.Hash());
  for (const OpKey& key : {off, on, MmKey(a, b, kAllowBF16Matmul)}) {
    auto found = FindFamily(key);
    ASSERT_TRUE(found.ok()) << found.status().ToString();
    // Every point multiplies with float32 fused multiply-adds: no inline PTX (mma, cvt.rna.tf32) but the
    // pipelined strategy's cp.async copies (codegen 4) and the bulk strategy's bulk copies, mbarriers and
    // proxy fences (stage 5), no wmma.
    for (const Point& p : PairwiseCover(*found->family, *found->problem, device)) {
      auto c = found->family->Generate(*found->problem, p, device);
      ASSERT_TRUE(c.ok()) << c.status().ToString();
      EXPECT_NE(c->source.find("fmaf("), std::string::npos);
      std::istringstream lines(Compiled(c->source));  // (every point's text holds the bulk copies' asm)
      for (std::string line; std::getline(lines, line);) {
        if (line.find("asm") == std::string::npos) continue;
        const bool bulk = p.at("stage") == 5 && (line.find("asm volatile(\"mbarrier.") != std::string::npos ||
                                                 line.find("asm volatile(\"fence.") != std::string::npos ||
                                                 line.find("asm volatile(\"{ .reg .pred p; mbarrier.try_wait.") != std::string::npos);
        EXPECT_TRUE(bulk || line.find("asm volatile(\"cp.async.") != std::string::npos) << PointToString(p) << ": " << line;
      }
      EXPECT_EQ(c->source.find("wmma"), std::string::npos) << PointToString(p);
    }
  }
  EXPECT_NE(FindFamily(off)->problem->description.find("tf32-off"), std::string::npos);
  EXPECT_NE(FindFamily(on)->problem->description.find("tf32-allowed"), std::string::npos);
}

TEST(MatmulSpace, ChecksFollowTheLayout) {
  const DeviceFacts device = DeviceFacts::H200();
  constexpr DType f32 = DType::kFloat32, bf16 = DType::kBFloat16;
  auto why = [&](const OpKey& key, const Point& p) {
    auto found = FindFamily(key);
    EXPECT_TRUE(found.ok()) << found.status().ToString();
    const Status st = found->family->Check(*found->problem, p, device);
    EXPECT_FALSE(st.ok()) << PointToString(p);
    return st.ToString();
  };
  auto ok = [&](const OpKey& key, const Point& p) {
    auto found = FindFamily(key);
    EXPECT_TRUE(found.ok());
    return found->family->Check(*found->problem, p, device).ok();
  };
  const OpKey plain = MmKey(TensorDesc::Contiguous(f32, {256, 64}), TensorDesc::Contiguous(f32, {64, 256}));
  EXPECT_TRUE(ok(plain, MatmulPoint(2, 64, 64, 16, 4, 4, 4)));
  // Threads are bm/tm x bn/tn, a multiple of 32; accumulators are bounded.
  EXPECT_NE(why(plain, MatmulPoint(2, 16, 16, 16, 4, 4, 1)).find("multiple of 32"), std::string::npos);
  EXPECT_NE(why(plain, MatmulPoint(2, 128, 128, 16, 8, 16, 1)).find("accumulators"), std::string::npos);
  // Vectors: 16 bytes at most, not for direct reads, not across a dim without unit stride.
  EXPECT_NE(why(plain, MatmulPoint(2, 64, 64, 16, 4, 4, 8)).find("16 bytes"), std::string::npos);
  EXPECT_NE(why(plain, MatmulPoint(0, 64, 64, 16, 4, 4, 4)).find("direct"), std::string::npos);
  TensorDesc stepped = TensorDesc::Contiguous(f32, {256, 128});
  stepped.sizes = {256, 64};
  stepped.strides = {128, 2};  // x[:, ::2]
  EXPECT_NE(why(MmKey(stepped, TensorDesc::Contiguous(f32, {64, 256})), MatmulPoint(2, 64, 64, 16, 4, 4, 4)).find("unit-stride"),
            std::string::npos);
  EXPECT_TRUE(ok(MmKey(stepped, TensorDesc::Contiguous(f32, {64, 256})), MatmulPoint(2, 64, 64, 16, 4, 4, 1)));
  // A transposed operand is read in vectors along its own contiguous dim (m for A^T).
  EXPECT_TRUE(ok(MmKey(Transposed(f32, 256, 64), TensorDesc::Contiguous(f32, {64, 256})), MatmulPoint(2, 64, 64, 16, 4, 4, 4)));
  // An odd contiguous extent or a misaligned input keeps vectors out.
  EXPECT_NE(why(MmKey(TensorDesc::Contiguous(f32, {256, 66}), TensorDesc::Contiguous(f32, {66, 256})),
                MatmulPoint(2, 64, 64, 16, 4, 4, 4)).find("divide"),
            std::string::npos);
  TensorDesc misaligned = TensorDesc::Contiguous(bf16, {256, 64});
  misaligned.alignment = 4;
  EXPECT_NE(why(MmKey(misaligned, TensorDesc::Contiguous(bf16, {64, 256})), MatmulPoint(2, 64, 64, 16, 4, 4, 8)).find("aligned"),
            std::string::npos);
  EXPECT_TRUE(ok(MmKey(misaligned, TensorDesc::Contiguous(bf16, {64, 256})), MatmulPoint(2, 64, 64, 16, 4, 4, 2)));
  // Double buffering needs two slices; tiles stay within the matrix's next power of two.
  const OpKey small_k = MmKey(TensorDesc::Contiguous(f32, {256, 16}), TensorDesc::Contiguous(f32, {16, 256}));
  EXPECT_NE(why(small_k, MatmulPoint(2, 64, 64, 16, 4, 4, 4)).find("two k slices"), std::string::npos);
  EXPECT_TRUE(ok(small_k, MatmulPoint(1, 64, 64, 16, 4, 4, 4)));
  const OpKey tiny = BmmKey(TensorDesc::Contiguous(f32, {4096, 8, 8}), TensorDesc::Contiguous(f32, {4096, 8, 8}));
  EXPECT_NE(why(tiny, MatmulPoint(1, 32, 16, 8, 1, 1, 1)).find("taller"), std::string::npos);
  // Several matrices a block: bmm only, where one tile covers a matrix.
  EXPECT_TRUE(ok(tiny, MatmulPoint(1, 16, 16, 8, 1, 2, 4, 8)));
  EXPECT_NE(why(plain, MatmulPoint(2, 64, 64, 16, 4, 4, 4, 2)).find("batch"), std::string::npos);
  // Two blocks an SM: only where the cap binds (256 threads or more) and two blocks fit.
  Point two = MatmulPoint(2, 128, 128, 16, 8, 8, 4);
  two["minb"] = 2;
  EXPECT_TRUE(ok(plain, two));
  two = MatmulPoint(2, 64, 64, 16, 8, 8, 4);
  two["minb"] = 2;
  EXPECT_NE(why(plain, two).find("256 threads"), std::string::npos);
  // Resident: the whole K in shared memory up to the opt-in limit (not the slices' 64 KB), its vectors
  // dividing K; two blocks an SM only where two whole-K tiles fit.
  Point res = MatmulPoint(3, 128, 128, 32, 8, 8, 4);
  EXPECT_TRUE(ok(plain, res));
  res["minb"] = 2;
  EXPECT_TRUE(ok(plain, res));
  const OpKey k256 = MmKey(TensorDesc::Contiguous(f32, {4096, 256}), TensorDesc::Contiguous(f32, {256, 4096}));
  EXPECT_NE(why(k256, MatmulPoint(3, 128, 128, 32, 8, 8, 4)).find("shared memory"), std::string::npos);
  EXPECT_TRUE(ok(k256, MatmulPoint(3, 128, 64, 32, 8, 4, 4)));  // 200 KB: one block an SM
  Point res2 = MatmulPoint(3, 128, 64, 32, 8, 4, 4);
  res2["minb"] = 2;
  EXPECT_NE(why(k256, res2).find("two blocks"), std::string::npos);
  const OpKey odd_k = MmKey(TensorDesc::Contiguous(f32, {256, 66}), TensorDesc::Contiguous(f32, {66, 256}));
  EXPECT_NE(why(odd_k, MatmulPoint(3, 64, 64, 16, 4, 4, 4)).find("divide"), std::string::npos);
  EXPECT_TRUE(ok(odd_k, MatmulPoint(3, 64, 64, 16, 4, 4, 2)));
  // Four blocks an SM: 128 threads (a 128-register cap) or 256 with at most 16 accumulators, four whole-K
  // tiles fitting an SM.
  Point four = MatmulPoint(3, 64, 128, 8, 8, 8, 4);
  four["minb"] = 4;
  EXPECT_TRUE(ok(plain, four));
  four = MatmulPoint(3, 128, 128, 8, 8, 8, 4);
  four["minb"] = 4;
  EXPECT_NE(why(plain, four).find("four blocks"), std::string::npos);
  four = MatmulPoint(3, 64, 64, 8, 8, 8, 4);
  four["minb"] = 4;
  EXPECT_NE(why(plain, four).find("four blocks"), std::string::npos);
  four = MatmulPoint(3, 64, 64, 8, 4, 4, 4);
  four["minb"] = 4;
  EXPECT_TRUE(ok(plain, four));
  four = MatmulPoint(3, 64, 128, 8, 8, 8, 4);
  four["minb"] = 4;
  const OpKey k128 = MmKey(TensorDesc::Contiguous(f32, {4096, 128}), TensorDesc::Contiguous(f32, {128, 4096}));
  EXPECT_NE(why(k128, four).find("four blocks"), std::string::npos);  // 100 KB each
  four["minb"] = 3;
  EXPECT_NE(why(plain, four).find("minb"), std::string::npos);
  // Odd K: scalar reads only, the resident 8x8 tile of 128 threads all the same.
  const OpKey k63 = MmKey(TensorDesc::Contiguous(f32, {32767, 63}), TensorDesc::Contiguous(f32, {63, 32767}));
  four = MatmulPoint(3, 64, 128, 8, 8, 8, 1);
  four["minb"] = 4;
  EXPECT_TRUE(ok(k63, four));
  four["vec"] = 2;
  EXPECT_NE(why(k63, four).find("divide"), std::string::npos);
  const OpKey bmm64 = BmmKey(TensorDesc::Contiguous(f32, {4096, 64, 64}), TensorDesc::Contiguous(f32, {4096, 64, 64}));
  EXPECT_NE(why(bmm64, MatmulPoint(2, 32, 32, 16, 2, 2, 4, 2)).find("one tile"), std::string::npos);
  // Span copies (codegen 5): pipelined only, vec 1, tiles that are one contiguous span, not both operands'
  // rows 16-byte aligned already.
  const OpKey bmm63 = BmmKey(TensorDesc::Contiguous(f32, {4095, 63, 63}), TensorDesc::Contiguous(f32, {4095, 63, 63}));
  Point span = MatmulPoint(4, 64, 64, 16, 4, 8, 1);
  span["ahead"] = 1;
  span["span"] = 1;
  EXPECT_TRUE(ok(bmm63, span));
  EXPECT_NE(why(bmm64, span).find("aligned"), std::string::npos);
  span["vec"] = 4;
  EXPECT_NE(why(bmm63, span).find("vec is 1"), std::string::npos);
  span["vec"] = 1;
  span["stage"] = 3;
  EXPECT_NE(why(bmm63, span).find("pipelined"), std::string::npos);
  span["stage"] = 4;
  TensorDesc padded = TensorDesc::Contiguous(f32, {4095, 63, 64});  // rows of 63 of 64 floats
  padded.sizes = {4095, 63, 63};
  EXPECT_NE(why(BmmKey(padded, TensorDesc::Contiguous(f32, {4095, 63, 63})), span).find("contiguous span"),
            std::string::npos);
  // B^T of 63x63 matrices is one span too; an mm's A over several tiles of rows (a span a tile).
  EXPECT_TRUE(ok(BmmKey(TensorDesc::Contiguous(f32, {4095, 63, 63}), Transposed3(f32, 4095, 63, 63)), span));
  span["bm"] = 32;
  span["tm"] = 2;
  EXPECT_TRUE(ok(MmKey(TensorDesc::Contiguous(f32, {1000, 63}), TensorDesc::Contiguous(f32, {63, 63})), span));
  // B's columns over several tiles are not one span.
  EXPECT_NE(why(MmKey(TensorDesc::Contiguous(f32, {1000, 63}), TensorDesc::Contiguous(f32, {63, 99})), span)
                .find("contiguous span"),
            std::string::npos);
}

TEST(MatmulSpace, BulkFollowsTheArchAndTheLayout) {
  DeviceFacts device = DeviceFacts::H200();
  constexpr DType f32 = DType::kFloat32, bf16 = DType::kBFloat16;
  auto why = [&](const OpKey& key, const Point& p) {
    auto found = FindFamily(key);
    EXPECT_TRUE(found.ok()) << found.status().ToString();
    const Status st = found->family->Check(*found->problem, p, device);
    EXPECT_FALSE(st.ok()) << PointToString(p);
    return st.ToString();
  };
  auto ok = [&](const OpKey& key, const Point& p) {
    auto found = FindFamily(key);
    EXPECT_TRUE(found.ok());
    const Status st = found->family->Check(*found->problem, p, device);
    EXPECT_TRUE(st.ok()) << PointToString(p) << ": " << st.ToString();
    return st.ok();
  };
  const OpKey bmm64 = BmmKey(TensorDesc::Contiguous(f32, {4096, 64, 64}), TensorDesc::Contiguous(f32, {4096, 64, 64}));
  Point bulk = MatmulPoint(5, 64, 64, 16, 4, 8, 1);
  bulk["ahead"] = 1;
  bulk["span"] = 0;
  EXPECT_TRUE(ok(bmm64, bulk));
  // Generated: one bulk copy an operand an item (a thread), an mbarrier a buffer; two buffers of both 16 KB
  // tiles unpadded and two 8-byte barriers (64 KB: three blocks an SM), one wave of 3 x 132 blocks.
  {
    auto found = FindFamily(bmm64);
    auto c = found->family->Generate(*found->problem, bulk, device);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    EXPECT_NE(c->source.find("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes"), std::string::npos);
    EXPECT_NE(c->source.find("mbarrier.try_wait.parity.shared::cta.b64"), std::string::npos);
    EXPECT_NE(c->source.find("#define STAGE 5"), std::string::npos);
    EXPECT_EQ(c->launch.dynamic_shared_bytes, 2u * (4096u + 4096u) * 4u + 16u);
    EXPECT_EQ(c->launch.grid[0], 3u * 132u);
    EXPECT_EQ(c->launch.block[0], 128u);
  }
  // Up to three items ahead (four buffers: 128 KB, one block an SM), ahead 3 for this strategy only.
  bulk["ahead"] = 3;
  EXPECT_TRUE(ok(bmm64, bulk));
  bulk["stage"] = 4;
  bulk["vec"] = 4;
  EXPECT_NE(why(bmm64, bulk).find("bulk and ring strategies only"), std::string::npos);
  bulk["stage"] = 5;
  bulk["vec"] = 1;
  bulk["ahead"] = 1;
  // Whole tiles a copy: vec 1 only; no span copies.
  bulk["vec"] = 4;
  EXPECT_NE(why(bmm64, bulk).find("vec is 1"), std::string::npos);
  bulk["vec"] = 1;
  bulk["span"] = 1;
  EXPECT_NE(why(bmm64, bulk).find("pipelined"), std::string::npos);
  bulk["span"] = 0;
  // sm_90 or newer: TMA and mbarrier transaction counts; no stage-5 point is valid before it.
  device.arch = 80;
  EXPECT_NE(why(bmm64, bulk).find("sm_90"), std::string::npos);
  {
    auto found = FindFamily(bmm64);
    size_t stage5 = 0;
    for (const Point& p : ValidPoints(*found->family, *found->problem, device)) stage5 += p.at("stage") == 5;
    EXPECT_EQ(stage5, 0u);
  }
  device.arch = 90;
  // Layouts: both operands' tiles contiguous runs (B's tile the whole matrix), 16-byte aligned, of 16-byte rows.
  Point narrow = bulk;
  narrow["bn"] = 32;
  narrow["tn"] = 4;
  EXPECT_NE(why(bmm64, narrow).find("contiguous run"), std::string::npos);  // B's columns over two tiles
  EXPECT_TRUE(ok(bmm64, [&] { Point q = bulk; q["bm"] = 32; q["tm"] = 2; return q; }()));  // A's rows over two tiles
  const OpKey bmm63 = BmmKey(TensorDesc::Contiguous(f32, {4095, 63, 63}), TensorDesc::Contiguous(f32, {4095, 63, 63}));
  EXPECT_NE(why(bmm63, bulk).find("16-byte"), std::string::npos);
  TensorDesc padded = TensorDesc::Contiguous(f32, {4096, 64, 68});  // rows of 64 of 68 floats
  padded.sizes = {4096, 64, 64};
  EXPECT_NE(why(BmmKey(padded, TensorDesc::Contiguous(f32, {4096, 64, 64})), bulk).find("contiguous run"), std::string::npos);
  TensorDesc offset = TensorDesc::Contiguous(f32, {4096, 64, 64});
  offset.alignment = 4;  // a view one float into its storage
  EXPECT_NE(why(BmmKey(offset, TensorDesc::Contiguous(f32, {4096, 64, 64})), bulk).find("16-byte"), std::string::npos);
  // bf16 B^T (rows of n, K of 128 bytes) and the mm of tall A over row tiles (the last one shorter) qualify.
  EXPECT_TRUE(ok(BmmKey(TensorDesc::Contiguous(bf16, {256, 64, 64}), Transposed3(bf16, 256, 64, 64)), bulk));
  EXPECT_TRUE(ok(MmKey(TensorDesc::Contiguous(f32, {1000, 64}), TensorDesc::Contiguous(f32, {64, 64})), bulk));
  EXPECT_NE(why(MmKey(TensorDesc::Contiguous(f32, {1000, 64}), TensorDesc::Contiguous(f32, {64, 4096})), bulk)
                .find("contiguous run"),
            std::string::npos);
}

// Stage 6 (ring) takes the bulk strategy's layout rules and owns its block: bpb consumer groups and a producer
// warp, bpb + ahead buffers with two mbarriers each, one block an SM over a persistent grid, outputs stored from
// registers only (no block-wide barrier after the start).
TEST(MatmulSpace, RingTakesTheBulkRulesAndOwnsItsBlock) {
  DeviceFacts device = DeviceFacts::H200();
  constexpr DType f32 = DType::kFloat32;
  auto check = [&](const OpKey& key, const Point& p) {
    auto found = FindFamily(key);
    EXPECT_TRUE(found.ok()) << found.status().ToString();
    return found->family->Check(*found->problem, p, device);
  };
  const OpKey bmm64 = BmmKey(TensorDesc::Contiguous(f32, {4096, 64, 64}), TensorDesc::Contiguous(f32, {4096, 64, 64}));
  Point ring = MatmulPoint(6, 64, 64, 16, 8, 8, 1, 4);
  ring["ahead"] = 2;
  ring["span"] = 0;
  ASSERT_TRUE(check(bmm64, ring).ok()) << check(bmm64, ring).ToString();
  {
    auto found = FindFamily(bmm64);
    auto c = found->family->Generate(*found->problem, ring, device);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    EXPECT_NE(c->source.find("#define STAGE 6"), std::string::npos);
    EXPECT_NE(c->source.find("mbarrier.arrive.shared::cta.b64"), std::string::npos);  // a buffer freed
    EXPECT_NE(c->source.find("__launch_bounds__(BLOCK6, 1) kjit_matmul("), std::string::npos);
    EXPECT_NE(Compiled(c->source).find("chunk5<4>(As, Bs, k, ty, tx, acc);"), std::string::npos);  // stage 5's helpers
    // 4 groups of 64 threads and the producer warp; 6 buffers of both 16 KB tiles and 12 barriers; a block an SM.
    EXPECT_EQ(c->launch.block[0], 4u * 64u + 32u);
    EXPECT_EQ(c->launch.dynamic_shared_bytes, 6u * (4096u + 4096u) * 4u + 96u);
    EXPECT_EQ(c->launch.grid[0], 132u);
  }
  auto why = [&](Point p) { return check(bmm64, p).ToString(); };
  EXPECT_NE(why([&] { Point q = ring; q["minb"] = 2; return q; }()).find("ring: minb is 1"), std::string::npos);
  EXPECT_NE(why([&] { Point q = ring; q["vec"] = 4; return q; }()).find("vec is 1"), std::string::npos);
  // 8 groups of 128 threads (32x64 items, 4x4 a thread) and the producer: 1056 threads (9 buffers of 24 KB fit).
  EXPECT_NE(why([&] { Point q = ring; q["bm"] = 32; q["tm"] = 4; q["tn"] = 4; q["bpb"] = 8; q["ahead"] = 1; return q; }())
                .find("too many threads"),
            std::string::npos);
  // 8 + 3 buffers of 32 KB do not fit a block.
  EXPECT_NE(why([&] { Point q = ring; q["bpb"] = 8; q["ahead"] = 3; return q; }()).find("shared memory"), std::string::npos);
  // As the bulk strategy: 16-byte aligned contiguous tiles, sm_90.
  const OpKey bmm63 = BmmKey(TensorDesc::Contiguous(f32, {4095, 63, 63}), TensorDesc::Contiguous(f32, {4095, 63, 63}));
  Point ring63 = ring;
  EXPECT_NE(check(bmm63, ring63).ToString().find("16-byte"), std::string::npos);
  device.arch = 80;
  EXPECT_NE(why(ring).find("sm_90"), std::string::npos);
  device.arch = 90;
  // Outputs from registers only: N of 4 columns (a thread's 8 columns, stored in 4s) qualifies; N = 66 (rows 8
  // bytes apart from 16-byte alignment) would need the bulk strategy's staged stores (and fails its layout rule
  // first, as B's rows are not 16-byte rows either).
  const OpKey bmm_n4 = BmmKey(TensorDesc::Contiguous(f32, {4096, 64, 64}), TensorDesc::Contiguous(f32, {4096, 64, 4}));
  EXPECT_TRUE(check(bmm_n4, [&] { Point q = ring; q["bn"] = 16; q["tn"] = 4; q["tm"] = 4; return q; }()).ok());
}

// Stage 6 with span 1: the ring's bulk copies take the enclosing 16-byte pieces of odd contiguous tiles; its
// buffers are span buffers, outputs leave element by element, and aligned operands keep span 0.
TEST(MatmulSpace, RingSpanCopiesOddContiguousTiles) {
  const DeviceFacts device = DeviceFacts::H200();
  constexpr DType f32 = DType::kFloat32;
  const OpKey bmm63 = BmmKey(TensorDesc::Contiguous(f32, {4095, 63, 63}), TensorDesc::Contiguous(f32, {4095, 63, 63}));
  const OpKey bmm64 = BmmKey(TensorDesc::Contiguous(f32, {4096, 64, 64}), TensorDesc::Contiguous(f32, {4096, 64, 64}));
  auto found = FindFamily(bmm63);
  ASSERT_TRUE(found.ok()) << found.status().ToString();
  Point ring = MatmulPoint(6, 64, 64, 16, 8, 8, 1, 4);
  ring["ahead"] = 1;
  ring["span"] = 1;
  ASSERT_TRUE(found->family->Check(*found->problem, ring, device).ok())
      << found->family->Check(*found->problem, ring, device).ToString();
  auto c = found->family->Generate(*found->problem, ring, device);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  const std::string compiled = Compiled(c->source);
  EXPECT_NE(compiled.find("struct Span6"), std::string::npos);
  EXPECT_NE(compiled.find("TA5::plain(a, sa"), std::string::npos);  // the issue copies the enclosing pieces
  EXPECT_NE(compiled.find("TA5::offset(a + sbt * SAB"), std::string::npos);  // and the groups read at the offsets
  EXPECT_EQ(compiled.find("typedef Tile5<A_KCONT"), std::string::npos);
  // Span buffers: A's 64 rows of 63 (reads up to row 63's k of 64) and B's 63 k-rows of 63 (reads up to column 63
  // of the last), each with the 3 elements a start can be into its piece, in 16-byte pieces; 5 of them and 10
  // barriers.
  const uint32_t a_pieces = (3 + 63 * 63 + 64 + 3) / 4, b_pieces = (3 + 62 * 63 + 64 + 3) / 4;
  EXPECT_EQ(c->launch.dynamic_shared_bytes, 5u * (a_pieces + b_pieces) * 16u + 80u);
  auto why = [&](const OpKey& key, Point p) {
    auto f = FindFamily(key);
    return f->family->Check(*f->problem, p, device).ToString();
  };
  EXPECT_NE(why(bmm63, [&] { Point q = ring; q["span"] = 0; return q; }()).find("16-byte"), std::string::npos);
  EXPECT_NE(why(bmm63, [&] { Point q = ring; q["span"] = 2; return q; }()).find("ring: span is 0 or 1"), std::string::npos);
  EXPECT_NE(why(bmm64, ring).find("both operands' rows are 16-byte aligned"), std::string::npos);
  // The bulk strategy keeps its rule: no span.
  EXPECT_NE(why(bmm63, [&] { Point q = ring; q["stage"] = 5; q["bpb"] = 2; return q; }()).find("16-byte aligned runs"),
            std::string::npos);
}

// Codegen 6: span copies issue an item's pieces without a bounds test each when they all lie inside the view
// (the tests stay for the items at its ends), and span 2's warps store through output scratch of their own,
// past the landing buffers, so no block barrier precedes the stores; span 1 keeps the barrier (its scratch is
// the buffer just multiplied from).
TEST(MatmulSpace, SpanCopiesTestPiecesOnlyAtTheViewsEnds) {
  const DeviceFacts device = DeviceFacts::H200();
  const OpKey bmm63 = BmmKey(TensorDesc::Contiguous(DType::kFloat32, {4095, 63, 63}),
                             TensorDesc::Contiguous(DType::kFloat32, {4095, 63, 63}));
  auto found = FindFamily(bmm63);
  ASSERT_TRUE(found.ok()) << found.status().ToString();
  const std::string unchecked = "if (g >= lo && g + (unsigned long long)n * 16 <= hi) {";
  const std::string barrier = "  __syncthreads();  // every thread is done reading the staged tiles\n"
                              "  const int lane = threadIdx.x % 32, warp";
  for (int64_t span : {1, 2}) {
    Point p = MatmulPoint(4, 64, 64, 16, 8, 4, 1);
    p["ahead"] = 1;
    p["span"] = span;
    ASSERT_TRUE(found->family->Check(*found->problem, p, device).ok()) << PointToString(p);
    auto c = found->family->Generate(*found->problem, p, device);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    const std::string compiled = Compiled(c->source);
    EXPECT_NE(compiled.find(unchecked), std::string::npos) << "span " << span;
    EXPECT_EQ(compiled.find(barrier) == std::string::npos, span == 2) << "span " << span;
    // Pieces: A's 64 rows of 63 (reads reach row 63's k of 64), B's 63 k-rows of 63 (reads reach column 63 of
    // the last), each with the 3 elements a start can be into its piece.
    const uint32_t spans = ((3 + 63 * 63 + 64 + 3) / 4 + (3 + 62 * 63 + 64 + 3) / 4) * 16;
    // 128 threads x tn 4 floats x two of a thread's rows a store round (codegen 8, tm 8 even)
    const uint32_t padded = (64 * 68 + 63 * 68) * 4, scratch = 128 * 4 * 4 * 2;
    EXPECT_EQ(c->launch.dynamic_shared_bytes, span == 1 ? 2 * spans : spans + padded + scratch) << "span " << span;
    if (span == 2) {
      EXPECT_NE(compiled.find("float* scratch = reinterpret_cast<float*>(land + AHEAD * SBUF4);"), std::string::npos);
      // The span store (codegen 8): SR4 of a thread's rows a round, and stage 3's one-row store gone.
      EXPECT_NE(compiled.find("constexpr int SR4 = TM % 2 == 0 ? 2 : 1;"), std::string::npos);
      EXPECT_NE(compiled.find("  for (int i = 0; i < TM; i += SR4) {"), std::string::npos);
      EXPECT_EQ(compiled.find("// read before the next row is written"), std::string::npos);
      EXPECT_NE(compiled.find("store_warp3(c + bt * (M_ * N_), m0, n0, scratch, ty, tx, acc);"), std::string::npos);
    }
  }
  // Span 0 (4-byte copies into the padded tiles) has no span copies.
  Point p = MatmulPoint(4, 64, 64, 16, 8, 4, 1);
  p["ahead"] = 1;
  p["span"] = 0;
  auto c = found->family->Generate(*found->problem, p, device);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(Compiled(c->source).find(unchecked), std::string::npos);
  EXPECT_NE(Compiled(c->source).find(barrier), std::string::npos);
}

// Span 3 (sm_90): span 2's repack and stores with the pieces landed by one thread's bulk copies (the ring's
// span issue: the view's end pieces element by element), an mbarrier a landing buffer after the output scratch.
TEST(MatmulSpace, SpanThreeLandsPiecesByBulkCopies) {
  DeviceFacts device = DeviceFacts::H200();
  const OpKey bmm63 = BmmKey(TensorDesc::Contiguous(DType::kFloat32, {4095, 63, 63}),
                             TensorDesc::Contiguous(DType::kFloat32, {4095, 63, 63}));
  auto found = FindFamily(bmm63);
  ASSERT_TRUE(found.ok()) << found.status().ToString();
  const uint32_t spans = ((3 + 63 * 63 + 64 + 3) / 4 + (3 + 62 * 63 + 64 + 3) / 4) * 16;
  const uint32_t padded = (64 * 68 + 63 * 68) * 4, scratch = 128 * 4 * 4 * 2;  // two rows a store round
  for (int64_t ahead : {1, 2}) {
    Point p = MatmulPoint(4, 64, 64, 16, 8, 4, 1);
    p["ahead"] = ahead;
    p["span"] = 3;
    ASSERT_TRUE(found->family->Check(*found->problem, p, device).ok())
        << found->family->Check(*found->problem, p, device).ToString();
    auto c = found->family->Generate(*found->problem, p, device);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    const std::string compiled = Compiled(c->source);
    EXPECT_NE(compiled.find("  pipelined4b(a, b, c, reinterpret_cast<raw_t*>(smem));"), std::string::npos);
    EXPECT_NE(compiled.find("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes"), std::string::npos);
    EXPECT_NE(compiled.find("TA5::plain(a, sa"), std::string::npos);
    EXPECT_EQ(compiled.find("K4UNROLL"), std::string::npos);
    EXPECT_EQ(c->launch.dynamic_shared_bytes, ahead * spans + padded + scratch + ahead * 8) << "ahead " << ahead;
  }
  {
    // An odd tm stores one of a thread's rows a round: 1024 threads x tn 4 floats of scratch.
    Point p = MatmulPoint(4, 64, 64, 16, 1, 4, 1);
    p["ahead"] = 1;
    p["span"] = 3;
    ASSERT_TRUE(found->family->Check(*found->problem, p, device).ok())
        << found->family->Check(*found->problem, p, device).ToString();
    auto c = found->family->Generate(*found->problem, p, device);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    EXPECT_EQ(c->launch.dynamic_shared_bytes, spans + padded + 1024 * 4 * 4 + 8);
  }
  auto why = [&](Point p) { return found->family->Check(*found->problem, p, device).ToString(); };
  Point p = MatmulPoint(4, 64, 64, 16, 8, 4, 1);
  p["ahead"] = 1;
  p["span"] = 3;
  EXPECT_NE(why([&] { Point q = p; q["stage"] = 6; q["tm"] = 8; q["tn"] = 8; return q; }()).find("ring: span is 0 or 1"),
            std::string::npos);
  EXPECT_NE(why([&] { Point q = p; q["span"] = 5; return q; }()).find("span is 0 to 4"), std::string::npos);
  device.arch = 80;
  EXPECT_NE(why(p).find("sm_90"), std::string::npos);
  p["span"] = 2;
  EXPECT_TRUE(found->family->Check(*found->problem, p, device).ok());
}

// Span 4: span 3's landing buffer inside the padded tiles' region (the larger of the two), so the odd bmm's block
// takes 38,648 bytes (against span 3's 70,696), five blocks an SM on the H200: the grid and the launch bounds
// follow (registers for five blocks of 128 threads), and the repack goes through registers in place.
TEST(MatmulSpace, SpanFourRepacksInPlace) {
  DeviceFacts device = DeviceFacts::H200();
  auto bmm = [](int64_t batch) {
    return BmmKey(TensorDesc::Contiguous(DType::kFloat32, {batch, 63, 63}),
                  TensorDesc::Contiguous(DType::kFloat32, {batch, 63, 63}));
  };
  auto found = FindFamily(bmm(4095));
  ASSERT_TRUE(found.ok()) << found.status().ToString();
  const uint32_t spans = ((3 + 63 * 63 + 64 + 3) / 4 + (3 + 62 * 63 + 64 + 3) / 4) * 16;
  const uint32_t padded = (64 * 68 + 63 * 68) * 4, scratch = 128 * 4 * 4 * 2;
  ASSERT_GT(padded, spans);  // the region is the padded tiles'
  Point p = MatmulPoint(4, 64, 64, 16, 8, 4, 1);
  p["ahead"] = 1;
  p["span"] = 4;
  ASSERT_TRUE(found->family->Check(*found->problem, p, device).ok())
      << found->family->Check(*found->problem, p, device).ToString();
  auto c = found->family->Generate(*found->problem, p, device);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->launch.dynamic_shared_bytes, padded + scratch + 8);
  const uint32_t per_sm = device.shared_bytes_per_sm / (c->launch.dynamic_shared_bytes + 1024);
  EXPECT_EQ(per_sm, 5u);
  EXPECT_EQ(c->launch.grid[0], per_sm * device.sm_count);
  EXPECT_NE(c->source.find("MINB = 5,"), std::string::npos);
  const std::string compiled = Compiled(c->source);
  EXPECT_NE(compiled.find("  pipelined4b(a, b, c, reinterpret_cast<raw_t*>(smem));"), std::string::npos);
  EXPECT_NE(compiled.find("Staged4<TA4, A_KCONT, BM, M_> r;"), std::string::npos);
  EXPECT_NE(compiled.find("  raw_t* land = smem4 + LOFF4;"), std::string::npos);
  EXPECT_EQ(compiled.find("repack4<TA4"), std::string::npos);  // (the function remains, uncalled)
  // The refill after the multiply: the next copies are issued after the last fragment read.
  const size_t multiply = compiled.find("chunk4<4>(As, Bs, k, ty, tx, acc);\n  if (K_ % 4");
  const size_t refill = compiled.find("  refill();\n", compiled.find("Staged4<TB4"));
  ASSERT_NE(multiply, std::string::npos);
  ASSERT_NE(refill, std::string::npos);
  EXPECT_LT(multiply, refill);
  // Fewer matrices than blocks the SMs hold: one block a matrix.
  auto small = FindFamily(bmm(600));
  ASSERT_TRUE(small.ok());
  auto c600 = small->family->Generate(*small->problem, p, device);
  ASSERT_TRUE(c600.ok()) << c600.status().ToString();
  EXPECT_EQ(c600->launch.grid[0], 600u);

  auto why = [&](Point q) { return found->family->Check(*found->problem, q, device).ToString(); };
  EXPECT_NE(why([&] { Point q = p; q["ahead"] = 2; return q; }()).find("ahead is 1"), std::string::npos);
  EXPECT_NE(why([&] { Point q = p; q["minb"] = 2; return q; }()).find("minb is 1"), std::string::npos);
  // A thread would hold 16 rows x 8 columns of a tile with K = 255 in registers between loads and stores.
  auto wide = FindFamily(BmmKey(TensorDesc::Contiguous(DType::kFloat32, {64, 63, 255}),
                                TensorDesc::Contiguous(DType::kFloat32, {64, 255, 63})));
  ASSERT_TRUE(wide.ok());
  const Status held = wide->family->Check(*wide->problem, p, device);
  EXPECT_NE(held.ToString().find("over 64 elements"), std::string::npos) << held.ToString();
  device.arch = 80;
  EXPECT_NE(why(p).find("sm_90"), std::string::npos);
}

// Stage 5, ahead 3 and span 3 and 4 are new values of existing knobs: every point valid before them (stage 4 or less,
// ahead 1 or 2, span 0 to 2) still generates the same source and launch shape, byte for byte (the datasets store measured
// sources). Digests of every 64th such point of each sample key (FNV-1a over the source and the launch).
// Codegens 6 and 7 changed the span points' kernels (stage 4, span 1 or 2; 7: span 2's repack by rows) and only
// theirs: the other points' digest (`digest`, their version stamp read as codegen 5's) was recorded at codegen 5
// (4f6715a) with this test, and the span points' (`span_digest`) at codegen 7. Both again after a5037c9, when the
// k loops' `#pragma unroll N` became `#pragma unroll kUnrollBk` and kin (enumerators ahead of the body, in
// place of text replaced in Generate): NVRTC 13.0's PTX of all 475 points of the sample keys' pairwise covers
// is byte-identical to before. Both again when matmul.cuh came to hold every strategy's and span's variant,
// selected by #if on the knobs (SPAN and the views' A_VIEW and kin defined ahead of them), in place of text
// replaced in Generate: NVRTC 13.0's PTX byte-identical to before for the pairwise covers' 475 points (sm_90)
// and 418 (sm_80), the expert defaults, SampledSourcesArePinned's 154 points, and 1,725 (sm_90) and 1,400
// (sm_80) valid points sampled alike from each stage and span.
TEST(MatmulSpace, OldPointsKeepTheirSources) {
  // (Enumerating every sample key's valid points takes ~40 s here, many times that under the sanitizers, whose
  // build checks kjit's own code: skipped there.)
  const char* sweep = std::getenv("KJIT_SPACE_SWEEP");
  if (sweep != nullptr && std::string(sweep) == "cover") GTEST_SKIP() << "KJIT_SPACE_SWEEP=cover";
  const DeviceFacts device = DeviceFacts::H200();
  struct Golden { size_t old_points, span_points, hashed, span_hashed; uint64_t digest, span_digest; };
  const Golden golden[] = {
      {41784u, 0u, 653u, 0u, 0x44050e47b64bc543ull, 0x14650fb0739d0383ull},  // matmul f32 bmm 4096x(64x64 @ 64x64) A B tf32-off
      {54594u, 0u, 854u, 0u, 0xa4e94ad314a600e8ull, 0x14650fb0739d0383ull},  // matmul f32 mm (32768x64 @ 64x32768) A B tf32-off
      {62172u, 0u, 972u, 0u, 0xb43b882c439d2626ull, 0x14650fb0739d0383ull},  // matmul f32 mm (8192x32 @ 32x8192) A B tf32-allowed (fp32 fma)
      {43920u, 0u, 687u, 0u, 0x0044f8231c56b8a8ull, 0x14650fb0739d0383ull},  // matmul f16 bmm 512x(33x48 @ 48x40) A B tf32-off
      {42768u, 0u, 669u, 0u, 0xb9c0597429f7760bull, 0x14650fb0739d0383ull},  // matmul bf16 bmm 256x(64x64 @ 64x64) A B^T tf32-off
      {18892u, 0u, 296u, 0u, 0xcd14a3b576e8edeeull, 0x14650fb0739d0383ull},  // matmul f32 mm (1000x33 @ 33x777) A^T B tf32-off
      {69448u, 0u, 1086u, 0u, 0xfdaa1b86f1fe6cfeull, 0x14650fb0739d0383ull},  // matmul bf16 mm (4096x64 @ 64x4096) A B tf32-off
      {1248u, 0u, 20u, 0u, 0x430c738ca37a7dbaull, 0x14650fb0739d0383ull},  // matmul f32 bmm 16384x(8x8 @ 8x8) A B tf32-off
      {18040u, 0u, 282u, 0u, 0x9abfb8dc52959bf9ull, 0x14650fb0739d0383ull},  // matmul f16 mm (1x64 @ 64x4096) A B tf32-off
      {27600u, 0u, 432u, 0u, 0xcb1126fc44c3b3e6ull, 0x14650fb0739d0383ull},  // matmul f32 bmm 24x(100x64 @ 64x24) A B B broadcast tf32-off
      {14808u, 6000u, 232u, 94u, 0xd6a7c27b55a3469bull, 0x6f84a14a15f353f2ull},  // matmul f32 bmm 600x(63x63 @ 63x63) A B tf32-off
  };
  auto found = FindFamily(BmmKey(TensorDesc::Contiguous(DType::kFloat32, {4096, 64, 64}),
                                 TensorDesc::Contiguous(DType::kFloat32, {4096, 64, 64})));
  ASSERT_TRUE(found.ok());
  const Family& f = *found->family;
  const std::string stamp = "// kjit matmul family, codegen " + std::to_string(f.codegen_version()) + ":";
  const std::string stamp5 = "// kjit matmul family, codegen 5:";
  const std::vector<OpKey> keys = f.SampleKeys();
  ASSERT_EQ(keys.size(), std::size(golden));
  for (size_t i = 0; i < keys.size(); ++i) {
    auto problem = f.Match(keys[i]);
    ASSERT_TRUE(problem.ok());
    uint64_t h = kFnvOffset, hs = kFnvOffset;
    size_t old_points = 0, span_points = 0, hashed = 0, span_hashed = 0;
    for (const Point& p : ValidPoints(f, **problem, device)) {
      if (p.at("stage") > 4 || p.at("ahead") > 2 || (p.count("span") != 0 && p.at("span") >= 3)) continue;
      // Span points are sampled apart from the others, so a change to theirs (which valid points there are,
      // by their shared memory) leaves the other points' sample and digest alone.
      if (p.at("stage") == 4 && p.count("span") != 0 && p.at("span") != 0) {
        if (span_points++ % 64 != 0) continue;
        auto c = f.Generate(**problem, p, device);
        ASSERT_TRUE(c.ok()) << c.status().ToString();
        hs = HashCandidate(hs, *c);
        ++span_hashed;
        continue;
      }
      if (old_points++ % 64 != 0) continue;
      auto c = f.Generate(**problem, p, device);
      ASSERT_TRUE(c.ok()) << c.status().ToString();
      const size_t at = c->source.find(stamp);
      ASSERT_NE(at, std::string::npos) << "no version stamp";
      c->source.replace(at, stamp.size(), stamp5);
      h = HashCandidate(h, *c);
      ++hashed;
    }
    EXPECT_EQ(old_points, golden[i].old_points) << (*problem)->description;
    EXPECT_EQ(span_points, golden[i].span_points) << (*problem)->description;
    EXPECT_EQ(hashed, golden[i].hashed) << (*problem)->description;
    EXPECT_EQ(span_hashed, golden[i].span_hashed) << (*problem)->description;
    EXPECT_EQ(h, golden[i].digest) << (*problem)->description << ": an old point's source changed; digest 0x"
                                   << std::hex << h;
    EXPECT_EQ(hs, golden[i].span_digest) << (*problem)->description << ": a span point's source changed; digest 0x"
                                         << std::hex << hs;
  }
}

TEST(MatmulSpace, ExpertDefaultsFitTheShapeAndTheAbi) {
  const DeviceFacts device = DeviceFacts::H200();
  constexpr DType f32 = DType::kFloat32, f16 = DType::kFloat16, bf16 = DType::kBFloat16;
  auto default_of = [&](const OpKey& key, Candidate* out = nullptr) {
    auto found = FindFamily(key);
    EXPECT_TRUE(found.ok()) << found.status().ToString();
    const Point p = found->family->ExpertDefault(*found->problem, device);
    EXPECT_TRUE(found->family->Check(*found->problem, p, device).ok()) << PointToString(p);
    auto c = found->family->Generate(*found->problem, p, device);
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    if (out && c.ok()) *out = *c;
    return p;
  };
  // Tall-skinny headroom case (compute-bound): resident 64x128 tiles of 8x8 per thread (the whole K = 64
  // staged once, four 128-thread blocks an SM, registers capped at 128 by minb=4: 512 threads, as many as
  // 128x128 or 128x256 keep, in more blocks), float4 fetches, streaming stores (a 4 GB output), 8 trips.
  Candidate c;
  Point p = default_of(MmKey(TensorDesc::Contiguous(f32, {32768, 64}), TensorDesc::Contiguous(f32, {64, 32768})), &c);
  EXPECT_EQ(p.at("stage"), 3) << PointToString(p);
  EXPECT_EQ(p.at("minb"), 4) << PointToString(p);
  EXPECT_EQ(p.at("bm"), 64) << PointToString(p);
  EXPECT_EQ(p.at("bn"), 128) << PointToString(p);
  EXPECT_EQ(p.at("tm"), 8) << PointToString(p);
  EXPECT_EQ(p.at("tn"), 8) << PointToString(p);
  EXPECT_EQ(p.at("bk"), 8) << PointToString(p);
  EXPECT_EQ(p.at("vec"), 4) << PointToString(p);
  EXPECT_EQ(p.at("hint"), 1) << PointToString(p);
  EXPECT_EQ(c.launch.grid[0], 512u * 256u);
  EXPECT_EQ(c.launch.block[0], 128u);
  EXPECT_EQ(c.launch.dynamic_shared_bytes, 64u * (68u + 132u) * 4u);
  // K = 128: two 64x128 blocks (256 threads) or one 128x128 (256) an SM; one 128x256 block keeps 512.
  p = default_of(MmKey(TensorDesc::Contiguous(f32, {32768, 128}), TensorDesc::Contiguous(f32, {128, 32768})), &c);
  EXPECT_EQ(p.at("stage"), 3) << PointToString(p);
  EXPECT_EQ(p.at("bm"), 128) << PointToString(p);
  EXPECT_EQ(p.at("bn"), 256) << PointToString(p);
  EXPECT_EQ(p.at("bk"), 16) << PointToString(p);
  EXPECT_EQ(p.at("minb"), 1) << PointToString(p);
  EXPECT_EQ(c.launch.block[0], 512u);
  // Odd sizes: the same tile, scalar reads (coalesced along k), float4 fragments all the same.
  p = default_of(MmKey(TensorDesc::Contiguous(f32, {32767, 63}), TensorDesc::Contiguous(f32, {63, 32767})), &c);
  EXPECT_EQ(p.at("stage"), 3) << PointToString(p);
  EXPECT_EQ(p.at("bm"), 64) << PointToString(p);
  EXPECT_EQ(p.at("bn"), 128) << PointToString(p);
  EXPECT_EQ(p.at("vec"), 1) << PointToString(p);
  // (self, mat2, out).
  EXPECT_NE(c.source.find("kjit_matmul(const in_t* __restrict__ a,"), std::string::npos);
  EXPECT_EQ(c.entry_point, "kjit_matmul");
  // Batched 64x64 float32 headroom case, sm_90: the bulk strategy (stage 5), not the ring (stage 6), which
  // racecheck rejects: half-matrix row tiles against B's whole matrix, 8x4 a thread, 4 items a block.
  p = default_of(BmmKey(TensorDesc::Contiguous(f32, {4096, 64, 64}), TensorDesc::Contiguous(f32, {4096, 64, 64})), &c);
  EXPECT_EQ(p.at("stage"), 5) << PointToString(p);
  EXPECT_EQ(p.at("bm"), 32) << PointToString(p);
  EXPECT_EQ(p.at("bn"), 64) << PointToString(p);
  EXPECT_EQ(p.at("tm"), 8) << PointToString(p);
  EXPECT_EQ(p.at("tn"), 4) << PointToString(p);
  EXPECT_EQ(p.at("bpb"), 4) << PointToString(p);
  p = default_of(BmmKey(TensorDesc::Contiguous(f32, {2048, 64, 64}), TensorDesc::Contiguous(f32, {2048, 64, 64})));
  EXPECT_EQ(p.at("stage"), 5) << PointToString(p);
  // Other batched shapes keep the bulk strategy too: half-matrix row tiles (here the whole 32x32 matrix)
  // against B's whole matrix, 8x4 a thread, 4 items a block.
  p = default_of(BmmKey(TensorDesc::Contiguous(f32, {4096, 32, 32}), TensorDesc::Contiguous(f32, {4096, 32, 32})), &c);
  EXPECT_EQ(p.at("stage"), 5) << PointToString(p);
  EXPECT_EQ(p.at("bm"), 32) << PointToString(p);
  EXPECT_EQ(p.at("tn"), 4) << PointToString(p);
  EXPECT_EQ(c.launch.block[0], 32u);
  // Before sm_90 (no bulk copies): pipelined (codegen 4), one 64x64 tile a matrix, 4x8 a thread, float4
  // copies, two buffers of both tiles (68 KB: three blocks an SM), one wave of 3 x 132 blocks.
  DeviceFacts ampere = device;
  ampere.arch = 80;
  {
    auto found = FindFamily(BmmKey(TensorDesc::Contiguous(f32, {4096, 64, 64}), TensorDesc::Contiguous(f32, {4096, 64, 64})));
    ASSERT_TRUE(found.ok()) << found.status().ToString();
    p = found->family->ExpertDefault(*found->problem, ampere);
    auto g = found->family->Generate(*found->problem, p, ampere);
    ASSERT_TRUE(g.ok()) << g.status().ToString();
    c = *g;
  }
  EXPECT_EQ(p.at("stage"), 4) << PointToString(p);
  EXPECT_EQ(c.launch.dynamic_shared_bytes, 2u * 64u * (68u + 68u) * 4u);
  EXPECT_EQ(p.at("bm"), 64) << PointToString(p);
  EXPECT_EQ(p.at("bn"), 64) << PointToString(p);
  EXPECT_EQ(p.at("tm"), 4) << PointToString(p);
  EXPECT_EQ(p.at("tn"), 8) << PointToString(p);
  EXPECT_EQ(p.at("vec"), 4) << PointToString(p);
  EXPECT_EQ(p.at("ahead"), 1) << PointToString(p);
  EXPECT_EQ(p.at("span"), 0) << PointToString(p);
  EXPECT_EQ(c.launch.grid[0], 3u * 132u);
  EXPECT_EQ(c.launch.block[0], 128u);
  // Odd 63x63 batches: pipelined with span copies (codegen 5): 16-byte pieces of each matrix's 3969 floats
  // landing in one buffer, repacked into padded tiles (65 KB in all: three blocks an SM), 8x4 a thread; on
  // sm_90 the pieces landed by bulk copies (span 3), before it by cp.async (span 2).
  const OpKey odd = BmmKey(TensorDesc::Contiguous(f32, {4095, 63, 63}), TensorDesc::Contiguous(f32, {4095, 63, 63}));
  p = default_of(odd, &c);
  EXPECT_EQ(p.at("stage"), 4) << PointToString(p);
  EXPECT_EQ(p.at("vec"), 1) << PointToString(p);
  EXPECT_EQ(p.at("bpb"), 1) << PointToString(p);
  EXPECT_EQ(p.at("span"), 3) << PointToString(p);
  EXPECT_EQ(p.at("tm"), 8) << PointToString(p);
  EXPECT_EQ(p.at("tn"), 4) << PointToString(p);
  EXPECT_EQ(c.launch.grid[0], 3u * 132u);
  {
    DeviceFacts a100 = device;
    a100.arch = 80;
    auto found = FindFamily(odd);
    ASSERT_TRUE(found.ok());
    const Point before = found->family->ExpertDefault(*found->problem, a100);
    EXPECT_EQ(before.at("span"), 2) << PointToString(before);
    EXPECT_EQ(before.at("tm"), 8) << PointToString(before);
  }
  // Tiny matrices: several a block.
  p = default_of(BmmKey(TensorDesc::Contiguous(f32, {65536, 8, 8}), TensorDesc::Contiguous(f32, {65536, 8, 8})));
  EXPECT_GT(p.at("bpb"), 1) << PointToString(p);
  // Odd, transposed, half-type, strided and one-row keys each have a valid default that generates.
  default_of(MmKey(Transposed(f32, 1000, 33), TensorDesc::Contiguous(f32, {33, 777})));
  default_of(BmmKey(TensorDesc::Contiguous(bf16, {3, 33, 40}), TensorDesc::Contiguous(bf16, {3, 40, 24})));
  default_of(MmKey(TensorDesc::Contiguous(f16, {1, 64}), TensorDesc::Contiguous(f16, {64, 1})));
  default_of(MmKey(TensorDesc::Contiguous(f32, {5, 1}), TensorDesc::Contiguous(f32, {1, 7})));
  default_of(MmKey(TensorDesc::Contiguous(f32, {100000, 256}), TensorDesc::Contiguous(f32, {256, 3})));
  // K = 256 with 128x128 tiles: two resident blocks do not fit an SM, so double-buffered slices.
  p = default_of(MmKey(TensorDesc::Contiguous(f32, {8192, 256}), TensorDesc::Contiguous(f32, {256, 8192})));
  EXPECT_EQ(p.at("stage"), 2) << PointToString(p);
  EXPECT_EQ(p.at("bm"), 128) << PointToString(p);
}

TEST(MatmulSpace, TraitsAllowReorderedSumsAndKeepHalfOverflowAway) {
  (void)Families();  // declares the traits
  for (const char* op : {"aten::mm", "aten::bmm"}) {
    const OpTraits t = TraitsFor(op);
    EXPECT_TRUE(t.special_values);
    EXPECT_EQ(t.compare, ComparePolicy::kClose);
    EXPECT_DOUBLE_EQ(t.tolerance_by_dtype.at(DType::kFloat32).rtol, 1e-5);
    EXPECT_EQ(t.no_large_inputs.count(DType::kFloat16), 1u);
    EXPECT_EQ(t.no_large_inputs.count(DType::kFloat32), 0u);
    EXPECT_TRUE(t.sum_of_products);
  }
  // The terms each output sums: K, for mm and bmm and any layout.
  EXPECT_EQ(SummedTermsOf(MmKey(TensorDesc::Contiguous(DType::kBFloat16, {4096, 64}),
                                TensorDesc::Contiguous(DType::kBFloat16, {64, 4096}))),
            64);
  const OpKey bmm = BmmKey(TensorDesc::Contiguous(DType::kFloat32, {8, 5, 7}), TensorDesc::Contiguous(DType::kFloat32, {8, 7, 3}));
  EXPECT_EQ(SummedTermsOf(bmm), 7);
  OpKey other = bmm;
  other.calls[0].op = "aten::_softmax";
  EXPECT_EQ(SummedTermsOf(other), 0);
  EXPECT_FALSE(TraitsFor("aten::_softmax").sum_of_products);
}

}  // namespace matmul_test

}  // namespace
}  // namespace kjit::policy
