// kjit_dump_kernels: writes the CUDA source of each op family's expert default for each of its sample keys, as
// generated for one GPU architecture, one .cu file a kernel, so that nvcc can compile them ahead of run time
// (scripts/nvcc-kernels.sh: syntax errors and register counts per architecture at build time; at run time
// NVRTC compiles the same text for the GPU at hand).
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "kjit/policy/design_space.h"

namespace {

// The device facts a family's validity rules read, for the architectures kjit's kernels are checked for:
// sm_80 (A100: 164 KB of shared memory a block, no clusters), sm_90 (H100/H200) and sm_100 (B200).
bool FactsFor(int arch, kjit::policy::DeviceFacts* facts) {
  *facts = kjit::policy::DeviceFacts::H200();
  facts->arch = arch;
  switch (arch) {
    case 80:
      facts->sm_count = 108;
      facts->max_shared_bytes_per_block = 166912;
      facts->shared_bytes_per_sm = 167936;
      facts->max_cluster_size = 1;
      facts->max_nonportable_cluster_size = 1;
      return true;
    case 90:
      return true;
    case 100:
      facts->sm_count = 148;
      return true;
    default:
      return false;
  }
}

int Usage(const char* argv0, int rc) {
  std::fprintf(rc == 0 ? stdout : stderr,
               "usage: %s --arch 80|90|100 --out DIR [--family NAME] [--points default|cover]\n"
               "Writes DIR/<family>-<key>.cu, the expert default's source for each sample key of each family\n"
               "(or of NAME only), as generated for that architecture, and DIR/manifest.tsv (file, entry point,\n"
               "NVRTC options, the key's description and the point). --points cover: a pairwise cover of each\n"
               "key's valid points instead (files <family>-<key>-<n>.cu).\n",
               argv0);
  return rc;
}

}  // namespace

int main(int argc, char** argv) {
  int arch = 0;
  std::string out, only, which = "default";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "-h" || a == "--help") return Usage(argv[0], 0);
    if (i + 1 >= argc) return Usage(argv[0], 2);
    if (a == "--arch") arch = std::atoi(argv[++i]);
    else if (a == "--out") out = argv[++i];
    else if (a == "--family") only = argv[++i];
    else if (a == "--points") which = argv[++i];
    else return Usage(argv[0], 2);
  }
  kjit::policy::DeviceFacts facts;
  if (out.empty() || !FactsFor(arch, &facts) || (which != "default" && which != "cover")) return Usage(argv[0], 2);
  std::filesystem::create_directories(out);
  std::ofstream manifest(out + "/manifest.tsv", std::ios::trunc);
  int written = 0, failed = 0;
  for (const kjit::policy::Family* family : kjit::policy::Families()) {
    const std::string name(family->name());
    if (!only.empty() && name != only) continue;
    const std::vector<kjit::OpKey> keys = family->SampleKeys();
    for (size_t k = 0; k < keys.size(); ++k) {
      auto problem = family->Match(keys[k]);
      if (!problem.ok()) {
        std::fprintf(stderr, "%s key %zu: not matched: %s\n", name.c_str(), k, problem.status().ToString().c_str());
        ++failed;
        continue;
      }
      std::vector<kjit::policy::Point> points = {family->ExpertDefault(**problem, facts)};
      if (which == "cover") points = kjit::policy::PairwiseCover(*family, **problem, facts);
      for (size_t n = 0; n < points.size(); ++n) {
        auto candidate = family->Generate(**problem, points[n], facts);
        if (!candidate.ok()) {
          // A key whose default this architecture cannot run (it needs a cluster, say) is not an error.
          std::printf("%s key %zu: none for sm_%d: %s\n", name.c_str(), k, arch, candidate.status().ToString().c_str());
          continue;
        }
        const std::string file =
            name + "-" + std::to_string(k) + (which == "cover" ? "-" + std::to_string(n) : std::string()) + ".cu";
        std::ofstream(out + "/" + file, std::ios::trunc) << candidate->source;
        std::string options;
        for (const std::string& o : candidate->options) options += (options.empty() ? "" : " ") + o;
        manifest << file << '\t' << candidate->entry_point << '\t' << options << '\t' << (*problem)->description
                 << '\t' << kjit::policy::PointToString(points[n]) << '\n';
        ++written;
      }
    }
  }
  std::printf("kjit_dump_kernels: %d kernels for sm_%d in %s\n", written, arch, out.c_str());
  return failed == 0 && written > 0 ? 0 : 1;
}
