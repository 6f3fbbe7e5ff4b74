// Queues optimization tasks in a kernel cache, as kjitd does for the misses the shim reports, for the
// tests of the programs that take tasks from the queue (kjit_seed_defaults).
//
//   kjit_test_enqueue PATH NAME...
//
// NAME: softmax or softmax32 (f32[64,4096] or f32[32,4096] over the last dim: keys with a design space),
// relu or gelu (keys no family serves). The tasks are queued in the order given.
#include <cstdio>
#include <string>

#include "kjit/cache/kernel_cache.h"
#include "kjit/runtime/op_key.h"

int main(int argc, char** argv) {
  using namespace kjit;
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s PATH softmax|softmax32|relu|gelu...\n", argv[0]);
    return 2;
  }
  cache::OpenOptions options;
  options.path = argv[1];
  auto opened = cache::KernelCache::Open(options);
  if (!opened.ok()) {
    std::fprintf(stderr, "%s\n", opened.status().ToString().c_str());
    return 1;
  }
  for (int i = 2; i < argc; ++i) {
    const std::string name = argv[i];
    std::string bytes;
    if (name == "softmax" || name == "softmax32") {
      const int64_t rows = name == "softmax" ? 64 : 32;
      bytes = OpKey::Single("aten::_softmax", "",
                            {TensorDesc::Contiguous(DType::kFloat32, {rows, 4096}), int64_t{-1}, false}, 90)
                  .Encode();
    } else if (name == "relu" || name == "gelu") {
      bytes = OpKey::Single("aten::" + name, "", {TensorDesc::Contiguous(DType::kFloat32, {1024})}, 90).Encode();
    } else {
      std::fprintf(stderr, "unknown task '%s'\n", name.c_str());
      return 2;
    }
    auto id = (*opened)->tasks().EnqueueTask(bytes, /*priority=*/0, "queued by kjit_test_enqueue");
    if (!id.ok()) {
      std::fprintf(stderr, "%s\n", id.status().ToString().c_str());
      return 1;
    }
  }
  return 0;
}
