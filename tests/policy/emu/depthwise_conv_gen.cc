// Writes the depthwise_conv kernel for (key, point) as C++ for emu.h (the dynamic shared array becomes
// the block's slab) and prints depthwise_conv_run's arguments after the .so:
//   depthwise_conv_gen OUT.cc OP(native|cudnn) DTYPE LAYOUT(c|cl) N,C,H,W KH,KW SH,SW PH,PW DH,DW BIAS(0|1) KNOB=VALUE...
// native: aten::_conv_depthwise2d (bias allowed); cudnn: aten::cudnn_convolution (layout c or cl, no
// bias). Unnamed knobs: the expert default's.
#include "emu_gen.h"
int main(int argc, char** argv) {
  int a = 1;
  std::string out = argv[a++], op = argv[a++];
  const DType dt = *ParseDType(argv[a++]);
  const bool cl = std::string(argv[a++]) == "cl";
  const IntList sz = List(argv[a++]), k = List(argv[a++]), s = List(argv[a++]), p = List(argv[a++]), d = List(argv[a++]);
  const bool bias = atoi(argv[a++]);
  TensorDesc x = TensorDesc::Contiguous(dt, sz);
  if (cl) x.strides = {sz[1] * sz[2] * sz[3], 1, sz[3] * sz[1], sz[1]};
  const TensorDesc w = TensorDesc::Contiguous(dt, {sz[1], 1, k[0], k[1]});
  OpKey key = op == "native"
                  ? OpKey::Single("aten::_conv_depthwise2d", "",
                                  {x, w, k, bias ? Arg(TensorDesc::Contiguous(dt, {sz[1]})) : Arg(NoneArg{}), s, p, d}, 90)
                  : OpKey::Single("aten::cudnn_convolution", "", {x, w, p, s, d, sz[1], false, false, true}, 90);
  const EmuKernel kern = EmuGenerate(key, argc - a, argv + a);
  EmuWriteKernel(out, kern.c,
                 {.checked = false, .prelude = "#include <cmath>\nusing std::min; using std::max; using std::fmaf;\n"});
  // depthwise_conv_run's arguments: dtype native cl bias N C H W KH KW SH SW PH PW DH DW grid block shared
  std::printf("%d %d %d %d %lld %lld %lld %lld %lld %lld %lld %lld %lld %lld %lld %lld %u %u %u | %s\n", DTypeCode(dt),
              op == "native", cl, bias, (long long)sz[0], (long long)sz[1], (long long)sz[2], (long long)sz[3],
              (long long)k[0], (long long)k[1], (long long)s[0], (long long)s[1], (long long)p[0], (long long)p[1],
              (long long)d[0], (long long)d[1], kern.c.launch.grid[0], kern.c.launch.block[0],
              kern.c.launch.dynamic_shared_bytes, PointToString(kern.pt).c_str());
}
