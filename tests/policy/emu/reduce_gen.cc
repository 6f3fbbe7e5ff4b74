// Writes the reduce kernel for (key, point) as C++ for emu.h (__shared__ variables become per-block
// slabs) and prints reduce_run's arguments after the .so:
//   reduce_gen OUT.cc OP DTYPE SIZES DIMS KEEPDIM DTYPE_ARG KNOB=VALUE...
// OP: sum mean amax amin prod prod_all argmax argmin; SIZES comma-separated; DIMS comma-separated,
// or "none" (argmax: dim=None; sum/mean: dim=None); DTYPE_ARG: none or a dtype (sum, mean, prod);
// unnamed knobs: the expert default's.
#include <cstdio>
#include <fstream>
#include <regex>
#include <sstream>
#include "kjit/policy/design_space.h"
using namespace kjit; using namespace kjit::policy;
static IntList List(const std::string& s) {
  IntList v; std::stringstream ss(s); std::string x;
  while (std::getline(ss, x, ',')) if (!x.empty()) v.push_back(atoll(x.c_str()));
  return v;
}
int main(int argc, char** argv) {
  int a = 1;
  const std::string out = argv[a++], op = argv[a++];
  const DType dt = *ParseDType(argv[a++]);
  const TensorDesc x = TensorDesc::Contiguous(dt, List(argv[a++]));
  const std::string dims_s = argv[a++];
  const bool keep = atoi(argv[a++]);
  const std::string dtype_s = argv[a++];
  const Arg dims = dims_s == "none" ? Arg(NoneArg{}) : Arg(List(dims_s));
  const Arg dtype = dtype_s == "none" ? Arg(NoneArg{}) : Arg(*ParseDType(dtype_s));
  OpKey key;
  if (op == "sum") key = OpKey::Single("aten::sum", "dim_IntList", {x, dims, keep, dtype}, 90);
  else if (op == "mean") key = OpKey::Single("aten::mean", "dim", {x, dims, keep, dtype}, 90);
  else if (op == "amax" || op == "amin") key = OpKey::Single("aten::" + op, "", {x, List(dims_s), keep}, 90);
  else if (op == "prod") key = OpKey::Single("aten::prod", "dim_int", {x, List(dims_s).at(0), keep, dtype}, 90);
  else if (op == "prod_all") key = OpKey::Single("aten::prod", "", {x, dtype}, 90);
  else key = OpKey::Single("aten::" + op, "", {x, dims_s == "none" ? Arg(NoneArg{}) : Arg(List(dims_s).at(0)), keep}, 90);
  auto found = FindFamily(key);
  if (!found.ok()) { std::printf("nomatch %s\n", found.status().ToString().c_str()); return 2; }
  const DeviceFacts dev = DeviceFacts::H200();
  Point pt = found->family->ExpertDefault(*found->problem, dev);
  for (; a < argc; ++a) { std::string kv = argv[a]; auto eq = kv.find('='); pt[kv.substr(0, eq)] = atoll(kv.c_str() + eq + 1); }
  auto c = found->family->Generate(*found->problem, pt, dev);
  if (!c.ok()) { std::printf("invalid %s %s\n", PointToString(pt).c_str(), c.status().ToString().c_str()); return 3; }
  // __shared__ variables and arrays -> per-block slabs.
  const std::string src = c->source;
  std::regex sh(R"(__shared__ (\w+) (\w+)((\[[^\]]+\])*);)");
  std::string res; int id = 0; size_t last = 0;
  for (auto it = std::sregex_iterator(src.begin(), src.end(), sh); it != std::sregex_iterator(); ++it) {
    res += src.substr(last, it->position() - last);
    const std::string type = (*it)[1].str(), name = (*it)[2].str(), ext = (*it)[3].str();
    res += "auto& " + name + " = *reinterpret_cast<" + type + (ext.empty() ? "*" : "(*)" + ext) + ">(emu_shared(" +
           std::to_string(id++) + "));";
    last = it->position() + it->length();
  }
  res += src.substr(last);
  std::ofstream(out) << "#include \"emu.h\"\nusing std::min;\n" << res;
  // reduce_run's arguments: kind in_dtype out_dtype segs outer len inner grid block cluster workspace | point
  std::smatch m;
  const std::string desc = found->problem->description;
  if (!std::regex_search(desc, m, std::regex(R"(outer=(\d+) len=(\d+) inner=(\d+))"))) return 4;
  std::smatch segs;
  const std::string segs_text = std::regex_search(desc, segs, std::regex(R"(segs=(\d+))")) ? segs[1].str() : "1";
  static const char* const kinds[] = {"sum", "mean", "prod", "amax", "amin", "argmax", "argmin"};
  const std::string kind_name = op == "prod_all" ? "prod" : op;
  int kind = 0;
  while (kind_name != kinds[kind]) ++kind;
  auto code = [](DType t) { return t == DType::kFloat32 ? 0 : t == DType::kFloat16 ? 1 : t == DType::kBFloat16 ? 2 : 3; };
  const DType out_dt = kind >= 5 ? DType::kInt64 : std::holds_alternative<DType>(dtype) ? std::get<DType>(dtype) : dt;
  std::printf("%d %d %d %s %s %s %s %u %u %lld %llu | %s\n", kind, code(dt), code(out_dt), segs_text.c_str(),
              m[1].str().c_str(), m[2].str().c_str(), m[3].str().c_str(), c->launch.grid[0], c->launch.block[0],
              (long long)pt.at("cluster"), (unsigned long long)c->launch.workspace_bytes, PointToString(pt).c_str());
}
