// Prints the hash of the sample keys, one per line. The OpKey tests run this as
// a separate process to check that hashes do not depend on the process.
#include <cstdio>

#include "sample_keys.h"

int main() {
  std::printf("%s\n%s\n", kjit::testing::SoftmaxKey().Hash().ToHex().c_str(),
              kjit::testing::KitchenSinkKey().Hash().ToHex().c_str());
  return 0;
}
