/* Stands in for libkjit_torch_adapter.so in the preload tests (KJIT_TORCH_ADAPTER): says it was loaded. */
#include <stdio.h>

__attribute__((constructor)) static void Attached(void) {
  printf("fake adapter attached\n");
  fflush(stdout);
}
