// Writes the pool kernel for (key, point) as C++ for emu.h (the dynamic shared array becomes the
// block's slab) and prints pool_run's arguments after the .so: pool_gen OUT.cc OP DTYPE LAYOUT(c|cl)
// SIZES K S P D CEIL COUNT_INCLUDE_PAD DIVISOR(-1: None) KNOB=VALUE... (lists comma-separated; D is
// ignored for avg; unnamed knobs: the expert default's; offset=K among them: the input starts K elements
// into a 16-byte aligned storage, the key's storage offset and alignment saying so).
#include "emu_gen.h"
int main(int argc, char** argv) {
  int a = 1;
  std::string out = argv[a++], op = argv[a++];
  const DType dt = *ParseDType(argv[a++]);
  const bool cl = std::string(argv[a++]) == "cl";
  const IntList sizes = List(argv[a++]), k = List(argv[a++]), s = List(argv[a++]), p = List(argv[a++]), d = List(argv[a++]);
  const bool ceil = atoi(argv[a++]), cip = atoi(argv[a++]);
  const long long div = atoll(argv[a++]);
  TensorDesc x = TensorDesc::Contiguous(dt, sizes);
  if (cl) {
    x.strides[1] = 1;
    int64_t st = sizes[1];
    for (size_t i = sizes.size() - 1; i >= 2; --i) { x.strides[i] = st; st *= sizes[i]; }
    x.strides[0] = st;
  }
  long long offset = 0;
  std::vector<char*> knobs;
  for (int i = a; i < argc; ++i) {
    if (std::string(argv[i]).rfind("offset=", 0) == 0) offset = atoll(argv[i] + 7);
    else knobs.push_back(argv[i]);
  }
  x.storage_offset = offset;
  x.alignment = TensorDesc::AlignmentOf(static_cast<uintptr_t>(offset * DTypeSize(dt)) + 4096);
  const bool is_max = op.find("max") != std::string::npos;
  OpKey key = is_max ? OpKey::Single(op, "", {x, k, s, p, d, ceil}, 90)
                     : OpKey::Single(op, "", {x, k, s, p, ceil, cip, div < 0 ? Arg(NoneArg{}) : Arg(int64_t(div))}, 90);
  const EmuKernel kern = EmuGenerate(key, (int)knobs.size(), knobs.data());
  EmuWriteKernel(out, kern.c, {.checked = false, .prelude = "using std::min; using std::max;\n"});
  // pool_run's arguments: dtype max cl dims batched sizes(5: N C D H W) k s p d (3 each) ceil cip div grid block offset
  // point
  const int dims = op.find("3d") != std::string::npos ? 3 : 2;
  const bool batched = (int)sizes.size() == dims + 2;
  long long nc[2] = {batched ? sizes[0] : 1, sizes[batched ? 1 : 0]};
  long long sp[3] = {1, 1, 1}, kk[3] = {1, 1, 1}, ss[3] = {1, 1, 1}, pp[3] = {0, 0, 0}, dd[3] = {1, 1, 1};
  auto get = [](const IntList& l, int i, long long dflt) { return l.empty() ? dflt : l.size() == 1 ? l[0] : l[i]; };
  for (int i = 0; i < dims; ++i) {
    const int o = 3 - dims + i;
    sp[o] = sizes[sizes.size() - dims + i];
    kk[o] = get(k, i, 1); ss[o] = get(s, i, kk[o]); pp[o] = get(p, i, 0); dd[o] = is_max ? get(d, i, 1) : 1;
  }
  std::printf("%d %d %d %d %d %lld %lld %lld %lld %lld", DTypeCode(dt), is_max, cl, dims, batched, nc[0], nc[1], sp[0],
              sp[1], sp[2]);
  for (auto* l : {kk, ss, pp, dd}) std::printf(" %lld %lld %lld", l[0], l[1], l[2]);
  std::printf(" %d %d %lld %u %u %lld | %s\n", ceil, cip, div < 0 ? 0 : div, kern.c.launch.grid[0], kern.c.launch.block[0],
              offset, PointToString(kern.pt).c_str());
}
