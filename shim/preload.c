/* libkjit_preload.so: what LD_PRELOAD puts into every process.
 *
 * It links neither LibTorch nor any kjit library, so a process that never
 * loads PyTorch (a shell, a compiler, a subprocess) only gains this small
 * library and one extra dlopen(RTLD_NOLOAD) per dlopen it makes. It wraps
 * dlopen; once PyTorch's CUDA library is in the process (checked after every
 * dlopen and once at load time, in case torch came in before us) it loads the
 * torch-linked adapter, libkjit_torch_adapter.so from this library's own
 * directory (or $KJIT_TORCH_ADAPTER), whose constructor overrides the kernels.
 *
 * KJIT_DISABLE=1 (any value but "0"): nothing at all happens.
 * Any failure: one line on stderr when KJIT_LOG is set; the program carries on untouched.
 *
 * Plain C: no C++ runtime, no static constructors other than ours. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum {
  kWaiting = 0,   /* torch's CUDA library not seen yet */
  kAttaching = 1, /* one thread is loading the adapter (its own dlopens pass straight through) */
  kDone = 2,      /* attached, failed, or disabled: the wrapper only forwards */
};

static atomic_int g_state = kWaiting;
static void* (*g_real_dlopen)(const char*, int);

#define KJIT_TORCH_CUDA_LIBRARY "libtorch_cuda.so"
#define KJIT_ADAPTER_NAME "libkjit_torch_adapter.so"

static int LogEnabled(void) {
  const char* v = getenv("KJIT_LOG");
  return v != NULL && *v != '\0' && strcmp(v, "0") != 0;
}

static int Disabled(void) {
  const char* v = getenv("KJIT_DISABLE");
  return v != NULL && *v != '\0' && strcmp(v, "0") != 0;
}

static void* (*RealDlopen(void))(const char*, int) {
  if (g_real_dlopen == NULL) {
    /* Harmless if two threads race: both store the same address. */
    void* symbol = dlsym(RTLD_NEXT, "dlopen");
    memcpy(&g_real_dlopen, &symbol, sizeof symbol); /* object -> function pointer, as POSIX allows */
  }
  return g_real_dlopen;
}

/* Exported for tests: where the adapter is looked for (in `out`, at most `size` bytes). Returns 0 on success. */
__attribute__((visibility("default"))) int kjit_preload_adapter_path(char* out, size_t size) {
  const char* override = getenv("KJIT_TORCH_ADAPTER");
  if (override != NULL && *override != '\0') {
    if (strlen(override) + 1 > size) return -1;
    strcpy(out, override);
    return 0;
  }
  Dl_info info;
  /* Any object of this library will do; g_state is one. */
  if (dladdr((const void*)&g_state, &info) == 0 || info.dli_fname == NULL) return -1;
  const char* slash = strrchr(info.dli_fname, '/');
  size_t dir = slash == NULL ? 0 : (size_t)(slash - info.dli_fname) + 1;
  if (dir + sizeof(KJIT_ADAPTER_NAME) > size) return -1;
  memcpy(out, info.dli_fname, dir);
  memcpy(out + dir, KJIT_ADAPTER_NAME, sizeof(KJIT_ADAPTER_NAME));
  return 0;
}

/* Exported for tests: 0 waiting for torch, 1 attaching, 2 done (attached, failed or disabled). */
__attribute__((visibility("default"))) int kjit_preload_state(void) { return atomic_load(&g_state); }

static void AttachIfTorchPresent(void) {
  if (atomic_load_explicit(&g_state, memory_order_acquire) != kWaiting) return;
  void* (*real)(const char*, int) = RealDlopen();
  if (real == NULL) return;
  void* torch_cuda = real(KJIT_TORCH_CUDA_LIBRARY, RTLD_LAZY | RTLD_NOLOAD);
  if (torch_cuda == NULL) return;
  dlclose(torch_cuda); /* RTLD_NOLOAD took a reference */
  int expected = kWaiting;
  if (!atomic_compare_exchange_strong(&g_state, &expected, kAttaching)) return;
  char path[4096];
  if (kjit_preload_adapter_path(path, sizeof path) != 0) {
    if (LogEnabled()) fprintf(stderr, "kjit: cannot find %s beside libkjit_preload.so\n", KJIT_ADAPTER_NAME);
  } else if (real(path, RTLD_NOW | RTLD_LOCAL) == NULL) {
    if (LogEnabled()) fprintf(stderr, "kjit: cannot load the PyTorch adapter: %s\n", dlerror());
  }
  /* Loaded (or not): never again. The adapter is never unloaded. */
  atomic_store_explicit(&g_state, kDone, memory_order_release);
}

/* glibc resolves a bare name (no '/') through the RUNPATH and $ORIGIN of the
 * object that called dlopen, which it finds from dlopen's return address;
 * CUDA, cuDNN and NCCL load their parts that way. So a bare name is forwarded
 * as a tail call (a jump: the caller's return address stays on the stack and
 * glibc sees the real caller), and torch is looked for before it instead of
 * after. A path with a '/' is found without the caller's help: it is forwarded
 * as a plain call, and torch (which Python loads by path) is looked for right
 * after. Built with -O2 in any build type (CMakeLists.txt) so the jump is one. */
__attribute__((visibility("default"))) void* dlopen(const char* filename, int flags) {
  void* (*real)(const char*, int) = RealDlopen();
  if (real == NULL) return NULL; /* cannot happen with a working libc; nothing sensible to forward to */
  if (atomic_load_explicit(&g_state, memory_order_acquire) == kWaiting) {
    if (filename == NULL || strchr(filename, '/') != NULL) {
      void* handle = real(filename, flags);
      /* Keep dlerror() as the caller's dlopen left it: only look further on success. */
      if (handle != NULL) AttachIfTorchPresent();
      return handle;
    }
    AttachIfTorchPresent(); /* torch may have come in with an earlier load */
  }
  return real(filename, flags);
}

__attribute__((constructor)) static void KjitPreloadInit(void) {
  if (Disabled()) {
    atomic_store(&g_state, kDone);
    return;
  }
  AttachIfTorchPresent();
}
