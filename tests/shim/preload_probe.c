/* Run under LD_PRELOAD=libkjit_preload.so by preload_test.cc: dlopens argv[1]
 * (if given) and calls its function argv[2] (if given: int f(void), printing
 * "call=<result>"), then prints what the preload library did and whether any
 * torch library is mapped into this process. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

int main(int argc, char** argv) {
  if (argc > 1 && dlopen(argv[1], RTLD_NOW | RTLD_GLOBAL) == NULL) {
    printf("dlopen failed: %s\n", dlerror());
    return 2;
  }
  if (argc > 2) {
    int (*function)(void) = NULL;
    void* f = dlsym(RTLD_DEFAULT, argv[2]);
    memcpy(&function, &f, sizeof f);
    printf("call=%d\n", function == NULL ? -100 : function());
  }
  int (*state)(void) = NULL;
  int (*adapter_path)(char*, size_t) = NULL;
  void* symbol = dlsym(RTLD_DEFAULT, "kjit_preload_state");
  memcpy(&state, &symbol, sizeof symbol);
  symbol = dlsym(RTLD_DEFAULT, "kjit_preload_adapter_path");
  memcpy(&adapter_path, &symbol, sizeof symbol);
  if (state == NULL) {
    printf("state=none\n");
  } else {
    printf("state=%d\n", state());
  }
  char path[4096];
  if (adapter_path != NULL && adapter_path(path, sizeof path) == 0) printf("adapter=%s\n", path);
  FILE* maps = fopen("/proc/self/maps", "r");
  int torch = 0;
  char line[8192];
  while (maps != NULL && fgets(line, sizeof line, maps) != NULL) {
    if (strstr(line, "libtorch") != NULL || strstr(line, "libc10") != NULL) torch = 1;
  }
  if (maps != NULL) fclose(maps);
  printf("torch_mapped=%d\n", torch);
  fflush(stdout);
  return 0;
}
