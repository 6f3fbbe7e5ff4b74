// Writes the depthwise_conv_backward kernel for (key, point) as C++ for emu.h and prints
// depthwise_conv_backward_run's arguments after the .so:
//   depthwise_conv_backward_gen OUT.cc DTYPE SIZES KERNEL STRIDE PADDING DILATION MASK KNOB=VALUE...
// SIZES N,C,H,W (2-D) or N,C,L (conv1d: then KERNEL, STRIDE, PADDING and DILATION have one value each); MASK
// three digits (grad_input, grad_weight, grad_bias), e.g. 111. Unnamed knobs: the expert default's.
#include "emu_gen.h"
int main(int argc, char** argv) {
  int a = 1;
  std::string out = argv[a++];
  const DType dt = *ParseDType(argv[a++]);
  const IntList sz = List(argv[a++]), k = List(argv[a++]), s = List(argv[a++]), p = List(argv[a++]), d = List(argv[a++]);
  const std::string mask = argv[a++];
  const bool one_d = sz.size() == 3;
  const size_t spatial = sz.size() - 2;
  std::vector<int64_t> out_sizes = sz, w = {sz[1], 1};
  for (size_t i = 0; i < spatial; ++i) {
    out_sizes[2 + i] = (sz[2 + i] + 2 * p[i] - d[i] * (k[i] - 1) - 1) / s[i] + 1;
    w.push_back(k[i]);
  }
  const IntList m = {mask[0] == '1', mask[1] == '1', mask[2] == '1'};
  std::vector<Arg> args;
  args.push_back(TensorDesc::Contiguous(dt, out_sizes));
  args.push_back(TensorDesc::Contiguous(dt, sz));
  args.push_back(TensorDesc::Contiguous(dt, w));
  args.push_back(NoneArg{});
  args.push_back(s);
  args.push_back(p);
  args.push_back(d);
  args.push_back(false);
  args.push_back(IntList(spatial, 0));
  args.push_back(sz[1]);
  args.push_back(m);
  const EmuKernel kern = EmuGenerate(OpKey::Single("aten::convolution_backward", "", std::move(args), 90), argc - a, argv + a);
  EmuWriteKernel(out, kern.c, {.checked = false, .prelude = "#include <cmath>\nusing std::min; using std::max; using std::fmaf;\n"});
  // depthwise_conv_backward_run's arguments: dtype dx dw db N C H W KH KW SH SW PH PW DH DW grid block wstrategy
  // specials (fed where the family's traits feed them: not float16, which PyTorch may send to cuDNN)
  const long long H = one_d ? 1 : sz[2], W = sz[sz.size() - 1];
  const long long KH = one_d ? 1 : k[0], KW = k[spatial - 1];
  const long long SH = one_d ? 1 : s[0], SW = s[spatial - 1], PH = one_d ? 0 : p[0], PW = p[spatial - 1];
  const long long DH = one_d ? 1 : d[0], DW = d[spatial - 1];
  std::printf("%d %d %d %d %lld %lld %lld %lld %lld %lld %lld %lld %lld %lld %lld %lld %u %u %lld %d | %s\n", DTypeCode(dt),
              (int)m[0], (int)m[1], (int)m[2], (long long)sz[0], (long long)sz[1], H, W, KH, KW, SH, SW, PH, PW, DH, DW,
              kern.c.launch.grid[0], kern.c.launch.block[0], (long long)kern.pt.at("wstrategy"),
              dt != DType::kFloat16, PointToString(kern.pt).c_str());
}
