// Writes the reduce kernel for (key, point) as C++ for emu.h (emu_gen.h) and prints reduce_run's
// arguments after the .so:
//   reduce_gen OUT.cc OP DTYPE SIZES DIMS KEEPDIM DTYPE_ARG KNOB=VALUE...
// OP: sum mean amax amin prod prod_all argmax argmin; SIZES comma-separated; DIMS comma-separated,
// or "none" (argmax: dim=None; sum/mean: dim=None); DTYPE_ARG: none or a dtype (sum, mean, prod);
// unnamed knobs: the expert default's.
#include "emu_gen.h"
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
  const EmuKernel k = EmuGenerate(key, argc - a, argv + a);
  EmuWriteKernel(out, k.c);
  // reduce_run's arguments: kind in_dtype out_dtype segs outer len inner grid block cluster workspace | point
  std::smatch m;
  const std::string desc = k.found.problem->description;
  if (!std::regex_search(desc, m, std::regex(R"(outer=(\d+) len=(\d+) inner=(\d+))"))) return 4;
  std::smatch segs;
  const std::string segs_text = std::regex_search(desc, segs, std::regex(R"(segs=(\d+))")) ? segs[1].str() : "1";
  static const char* const kinds[] = {"sum", "mean", "prod", "amax", "amin", "argmax", "argmin"};
  const std::string kind_name = op == "prod_all" ? "prod" : op;
  int kind = 0;
  while (kind_name != kinds[kind]) ++kind;
  const DType out_dt = kind >= 5 ? DType::kInt64 : std::holds_alternative<DType>(dtype) ? std::get<DType>(dtype) : dt;
  std::printf("%d %d %d %s %s %s %s %u %u %lld %llu | %s\n", kind, DTypeCode(dt), DTypeCode(out_dt), segs_text.c_str(),
              m[1].str().c_str(), m[2].str().c_str(), m[3].str().c_str(), k.c.launch.grid[0], k.c.launch.block[0],
              (long long)k.pt.at("cluster"), (unsigned long long)k.c.launch.workspace_bytes, PointToString(k.pt).c_str());
}
