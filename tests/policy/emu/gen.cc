// Writes the scan kernel for (key, point) as C++ for emu.h (__shared__ arrays become per-block slabs)
// and prints its launch: gen OUT.cc OP DTYPE DIM NSIZES SIZES... KNOB=VALUE... (unnamed knobs: the
// expert default's).
#include <cstdio>
#include <fstream>
#include <regex>
#include <sstream>
#include "kjit/policy/design_space.h"
using namespace kjit; using namespace kjit::policy;
int main(int argc, char** argv) {
  // argv: out.cc op dtype(f32|f16|bf16) dim nsizes sizes... knob=value...
  int a = 1;
  std::string out = argv[a++], op = argv[a++];
  DType dt = *ParseDType(argv[a++]);
  int64_t dim = atoll(argv[a++]);
  int ns = atoi(argv[a++]);
  std::vector<int64_t> sizes;
  for (int i = 0; i < ns; ++i) sizes.push_back(atoll(argv[a++]));
  OpKey key = OpKey::Single(op, "", {TensorDesc::Contiguous(dt, sizes), dim, NoneArg{}}, 90);
  auto found = FindFamily(key);
  if (!found.ok()) { std::printf("nomatch %s\n", found.status().ToString().c_str()); return 2; }
  const DeviceFacts dev = DeviceFacts::H200();
  Point pt = found->family->ExpertDefault(*found->problem, dev);
  for (; a < argc; ++a) { std::string kv = argv[a]; auto eq = kv.find('='); pt[kv.substr(0, eq)] = atoll(kv.c_str() + eq + 1); }
  auto c = found->family->Generate(*found->problem, pt, dev);
  if (!c.ok()) { std::printf("invalid %s %s\n", PointToString(pt).c_str(), c.status().ToString().c_str()); return 3; }
  std::string src = c->source;
  // __shared__ arrays -> per-block slabs.
  std::regex sh(R"(__shared__ float (\w+)((\[[^\]]+\])+);)");
  std::string res; int id = 0; auto it = std::sregex_iterator(src.begin(), src.end(), sh); size_t last = 0;
  for (; it != std::sregex_iterator(); ++it) {
    res += src.substr(last, it->position() - last);
    res += "auto& " + (*it)[1].str() + " = *reinterpret_cast<float(*)" + (*it)[2].str() + ">(emu_shared(" + std::to_string(id++) + "));";
    last = it->position() + it->length();
  }
  res += src.substr(last);
  std::ofstream(out) << "#include \"emu.h\"\n" << res;
  std::printf("%u %u %lld %s\n", c->launch.grid[0], c->launch.block[0], (long long)pt.at("cluster"), PointToString(pt).c_str());
}
