// The generators' side of the CPU emulation (gen.cc, pool_gen.cc, reduce_gen.cc, softmax_gen.cc,
// depthwise_conv_gen.cc, matmul_gen.cc): the key's family, its expert default with KNOB=VALUE
// arguments over it and the kernel (EmuGenerate), and the kernel as C++ for emu.h (EmuWriteKernel).
#pragma once
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <regex>
#include <sstream>
#include "kjit/policy/design_space.h"
using namespace kjit; using namespace kjit::policy;
inline IntList List(const std::string& s) {
  IntList v; std::stringstream ss(s); std::string x;
  while (std::getline(ss, x, ',')) if (!x.empty()) v.push_back(atoll(x.c_str()));
  return v;
}
// The harnesses' dtype codes: 0 f32, 1 f16, 2 bf16, 3 i64.
inline int DTypeCode(DType t) { return t == DType::kFloat32 ? 0 : t == DType::kFloat16 ? 1 : t == DType::kBFloat16 ? 2 : 3; }
struct EmuKernel { Match found; Point pt; Candidate c; };
// Prints "nomatch ..." (exit 2) or "invalid ..." (exit 3) when there is no kernel.
inline EmuKernel EmuGenerate(const OpKey& key, int nknobs, char** knobs) {
  EmuKernel k;
  auto found = FindFamily(key);
  if (!found.ok()) { std::printf("nomatch %s\n", found.status().ToString().c_str()); std::exit(2); }
  k.found = std::move(*found);
  DeviceFacts dev = DeviceFacts::H200();
  // A smaller block's shared memory, so that what a kernel stages by it (softmax's strategy 5) runs out at
  // sizes the emulation can run.
  if (const char* bytes = std::getenv("EMU_MAX_SHARED")) {
    dev.max_shared_bytes_per_block = std::atoi(bytes);
    dev.shared_bytes_per_sm = dev.max_shared_bytes_per_block + 1024;  // as the H200's
  }
  k.pt = k.found.family->ExpertDefault(*k.found.problem, dev);
  for (int i = 0; i < nknobs; ++i) {
    const std::string kv = knobs[i];
    const auto eq = kv.find('=');
    k.pt[kv.substr(0, eq)] = atoll(kv.c_str() + eq + 1);
  }
  auto c = k.found.family->Generate(*k.found.problem, k.pt, dev);
  if (!c.ok()) { std::printf("invalid %s %s\n", PointToString(k.pt).c_str(), c.status().ToString().c_str()); std::exit(3); }
  k.c = std::move(*c);
  return k;
}
// How EmuWriteKernel writes a kernel: checked (reduce, softmax, scan) or not (pool, depthwise_conv,
// matmul: their harnesses check the launch's dynamic shared bytes against the slabs instead); prelude:
// what follows #include "emu.h".
struct EmuWrite {
  bool checked = true;
  std::string prelude = "using std::min;\n";
};
// __shared__ variables become per-block slabs (emu_shared(id)); the dynamic shared array (extern
// __shared__ T name[]) the slabs after them: checked, an EmuDynShared whose indices are checked against
// the launch's dynamic_shared_bytes, else a plain T* (which the kernel may offset). Checked, loads
// through a pointer p (*reinterpret_cast<const T*>(p): codegen's load_vec) go through __ldg, checked
// where the harness sets emu_read_lo/hi, and stores through it (store_vec) through emu_store, checked
// for alignment; not checked, they stay as they are. (A checked dynamic array larger than the slabs
// left fails the kernel's compilation.)
inline void EmuWriteKernel(const std::string& path, const Candidate& c, const EmuWrite& how = {}) {
  std::string src = c.source;
  if (how.checked) {
    src = std::regex_replace(src, std::regex(R"(\*reinterpret_cast<const ([^;()]+)\*>\(p\))"),
                             "__ldg(reinterpret_cast<const $1*>(p))");
    src = std::regex_replace(src, std::regex(R"(\*reinterpret_cast<([^;()]+)\*>\(p\) = ([^;]+);)"),
                             "emu_store(reinterpret_cast<$1*>(p), $2);");
  }
  std::regex sh(R"((extern )?__shared__ (?:__align__\(\d+\) )?(\w[\w ]*?) (\w+)((\[[^\]]*\])*);)");
  std::string res; int id = 0; size_t last = 0;
  for (auto it = std::sregex_iterator(src.begin(), src.end(), sh); it != std::sregex_iterator(); ++it) {
    res += src.substr(last, it->position() - last);
    const std::string type = (*it)[2].str(), name = (*it)[3].str(), ext = (*it)[4].str();
    if ((*it)[1].matched && !how.checked) {
      res += type + "* " + name + " = static_cast<" + type + "*>(emu_shared(" + std::to_string(id) + "));";
    } else if ((*it)[1].matched) {
      const std::string bytes = std::to_string(c.launch.dynamic_shared_bytes) + "LL";
      res += "static_assert(" + bytes + " <= (EMU_VARS - " + std::to_string(id) + ") * EMU_SLAB, \"dynamic shared memory " +
             "larger than the slabs left\"); const EmuDynShared<" + type + "> " + name + "{static_cast<" + type +
             "*>(emu_shared(" + std::to_string(id) + ")), " + bytes + " / (long long)sizeof(" + type + ")};";
    } else {
      res += "auto& " + name + " = *reinterpret_cast<" + type + (ext.empty() ? "*" : "(*)" + ext) + ">(emu_shared(" +
             std::to_string(id++) + "));";
    }
    last = it->position() + it->length();
  }
  res += src.substr(last);
  std::ofstream(path) << "#include \"emu.h\"\n" << how.prelude << res;
}
