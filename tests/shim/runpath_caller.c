/* A library whose RUNPATH ($ORIGIN/runpath_sub) is the only way to find the
 * library it dlopens by bare name, as CUDA and cuDNN libraries load their
 * parts. glibc searches the RUNPATH of the object that called dlopen: under
 * the preload's dlopen wrapper that must still be this library. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <string.h>

int kjit_test_load_by_runpath(void) {
  void* handle = dlopen("libkjit_test_runpath_target.so", RTLD_NOW | RTLD_LOCAL);
  if (handle == NULL) return -1;
  int (*target)(void) = NULL;
  void* symbol = dlsym(handle, "kjit_test_runpath_target");
  memcpy(&target, &symbol, sizeof symbol);
  return target == NULL ? -2 : target();
}
