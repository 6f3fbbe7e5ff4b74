// Writes the matmul kernel for (key, point) as C++ for emu.h (the dynamic shared array becomes the
// block's slab) and prints matmul_run's arguments after the .so:
//   matmul_gen OUT.cc OP(mm|bmm) DTYPE B,M,K,N SAB,SAM,SAK SBB,SBK,SBN TF32(0|1) [aoff=N] [boff=N] KNOB=VALUE...
// Strides in elements (mm: the batch ones are ignored, B must be 1). Unnamed knobs: the expert default's.
// aoff, boff: the operands' storage offsets in elements (views into a 16-byte aligned storage, the key's
// storage offset and alignment saying so; default 0).
#include "emu_gen.h"
int main(int argc, char** argv) {
  int a = 1;
  std::string out = argv[a++], op = argv[a++];
  const DType dt = *ParseDType(argv[a++]);
  const IntList sz = List(argv[a++]), sa = List(argv[a++]), sb = List(argv[a++]);
  const bool tf32 = atoi(argv[a++]);
  const bool bmm = op == "bmm";
  long long off[2] = {0, 0};
  for (; a < argc; ++a) {
    const std::string kv = argv[a];
    if (kv.rfind("aoff=", 0) == 0) off[0] = atoll(kv.c_str() + 5);
    else if (kv.rfind("boff=", 0) == 0) off[1] = atoll(kv.c_str() + 5);
    else break;
  }
  const int64_t B = sz[0], M = sz[1], K = sz[2], N = sz[3];
  TensorDesc ta, tb;
  ta.dtype = tb.dtype = dt;
  if (bmm) {
    ta.sizes = {B, M, K}; ta.strides = {sa[0], sa[1], sa[2]};
    tb.sizes = {B, K, N}; tb.strides = {sb[0], sb[1], sb[2]};
  } else {
    ta.sizes = {M, K}; ta.strides = {sa[1], sa[2]};
    tb.sizes = {K, N}; tb.strides = {sb[1], sb[2]};
  }
  for (int i = 0; i < 2; ++i) {
    TensorDesc& t = i == 0 ? ta : tb;
    t.storage_offset = off[i];
    t.alignment = TensorDesc::AlignmentOf(static_cast<uintptr_t>(off[i] * DTypeSize(dt)) + 4096);
  }
  OpKey key = OpKey::Single(bmm ? "aten::bmm" : "aten::mm", "", {ta, tb}, 90, tf32 ? kAllowTF32Matmul : 0);
  const EmuKernel k = EmuGenerate(key, argc - a, argv + a);
  const Point& pt = k.pt;
  const Candidate& c = k.c;
  // FP32 FMA only: no inline PTX (mma, cvt to tf32) other than the pipelined strategy's cp.async copies
  // and their group commits and waits, and the bulk copies, mbarriers and proxy fences of the bulk and ring
  // strategies and spans 3 and 4; no wmma. Every source holds every variant (matmul.cuh's #if blocks, which
  // the preprocessor selects by the point's macros), so the bulk copies' asm is in every source, compiled
  // only where the point uses it.
  std::istringstream lines(c.source);
  for (std::string line; std::getline(lines, line);) {
    if (line.find("asm") == std::string::npos) continue;
    const bool copies = line.find("asm volatile(\"cp.async.") != std::string::npos;
    const bool bulk = line.find("asm volatile(\"mbarrier.") != std::string::npos ||
                      line.find("asm volatile(\"fence.") != std::string::npos ||
                      line.find("asm volatile(\"{ .reg .pred p; mbarrier.try_wait.") != std::string::npos;
    if (!copies && !bulk) {
      std::printf("inline PTX other than cp.async in the source: %s\n", line.c_str()); return 4;
    }
  }
  if (c.source.find("wmma") != std::string::npos) { std::printf("wmma in the source\n"); return 4; }
  // The source as NVRTC gets it (OUT.cu), e.g. for `nvcc -arch=sm_90 -Xptxas -v` (registers, spills).
  std::ofstream(out.substr(0, out.rfind('.')) + ".cu") << c.source;
  EmuWriteKernel(out, c,
                 {.checked = false, .prelude = "#include <cmath>\nusing std::min; using std::max; using std::fmaf;\n"});
  // matmul_run's arguments: dtype B M K N SAB SAM SAK SBB SBK SBN grid block shared aoff boff
  std::printf("%d %lld %lld %lld %lld %lld %lld %lld %lld %lld %lld %u %u %u %lld %lld | %s\n", DTypeCode(dt),
              (long long)B, (long long)M, (long long)K, (long long)N, (long long)(bmm ? sa[0] : 0), (long long)sa[1],
              (long long)sa[2], (long long)(bmm ? sb[0] : 0), (long long)sb[1], (long long)sb[2], c.launch.grid[0],
              c.launch.block[0], c.launch.dynamic_shared_bytes, off[0], off[1], PointToString(pt).c_str());
}
