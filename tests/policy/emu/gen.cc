// Writes the scan kernel for (key, point) as C++ for emu.h (emu_gen.h: __shared__ arrays become
// per-block slabs; loads and stores checked) and prints its launch: gen OUT.cc OP DTYPE DIM NSIZES SIZES... KNOB=VALUE...
// (unnamed knobs: the expert default's).
#include "emu_gen.h"
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
  const EmuKernel k = EmuGenerate(key, argc - a, argv + a);
  EmuWriteKernel(out, k.c, {.checked = true, .prelude = ""});
  std::printf("%u %u %lld %s\n", k.c.launch.grid[0], k.c.launch.block[0], (long long)k.pt.at("cluster"),
              PointToString(k.pt).c_str());
}
