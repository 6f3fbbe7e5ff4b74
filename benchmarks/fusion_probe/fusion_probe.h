// The C functions of libkjit_fusion_probe.so (fusion_probe.cc says what each mode measures; fusion_probe.py
// calls them through ctypes).
#pragma once

#include <cstdint>

#define KJIT_FP_API extern "C" __attribute__((visibility("default")))

// Registers the catch-all fallback and finds PyTorch's CUDA kernels: 0 with everything, 1 without the
// CUDA-key wrappers (modes 3 and 4; kjit_fp_error says why), -1 on failure.
KJIT_FP_API int kjit_fp_init();
KJIT_FP_API const char* kjit_fp_error();
// Switches this thread to mode 0-5 and closes any window: 0, or -1 for a mode this process cannot run.
KJIT_FP_API int kjit_fp_set_mode(int mode);
// caught, fusible, flushes, flushed_calls, wrapper_calls, start_probes, windows, completed, diverged,
// observed: how many were written.
KJIT_FP_API int kjit_fp_counters(uint64_t* out, int n);
// Clears the wrappers' ring; with `forget`, the learned chains too.
KJIT_FP_API void kjit_fp_reset(int forget);
// Learns the chains the ring repeats: how many were added; *calls: their calls per occurrence, summed.
KJIT_FP_API int kjit_fp_learn(int* calls);
// The ops the CUDA-key wrappers cover, comma-separated.
KJIT_FP_API const char* kjit_fp_wrapped_ops();
