// Writes the softmax kernel for (key, point) as C++ for emu.h (emu_gen.h) and prints softmax_run's
// arguments after the .so:
//   softmax_gen OUT.cc OP DTYPE SIZES DIM HALF_TO_FLOAT KNOB=VALUE...
// OP: softmax or log_softmax (aten::_softmax, aten::_log_softmax); SIZES comma-separated; unnamed
// knobs: the expert default's.
#include "emu_gen.h"
int main(int argc, char** argv) {
  if (argc < 7) { std::printf("usage\n"); return 2; }
  const std::string op = argv[2];
  const DType dt = *ParseDType(argv[3]);
  const bool half_to_float = atoi(argv[6]);
  const TensorDesc x = TensorDesc::Contiguous(dt, List(argv[4]));
  const EmuKernel k = EmuGenerate(OpKey::Single("aten::_" + op, "", {x, int64_t(atoll(argv[5])), half_to_float}, 90),
                                  argc - 7, argv + 7);
  EmuWriteKernel(argv[1], k.c);
  // softmax_run's arguments: log in_dtype out_dtype outer len inner grid block cluster | point
  std::smatch m;
  const std::string desc = k.found.problem->description;
  if (!std::regex_search(desc, m, std::regex(R"(outer=(\d+) len=(\d+) inner=(\d+))"))) return 4;
  std::printf("%d %d %d %s %s %s %u %u %lld | %s\n", op == "log_softmax", DTypeCode(dt),
              DTypeCode(half_to_float ? DType::kFloat32 : dt), m[1].str().c_str(), m[2].str().c_str(), m[3].str().c_str(),
              k.c.launch.grid[0], k.c.launch.block[0], (long long)k.pt.at("cluster"), PointToString(k.pt).c_str());
}
