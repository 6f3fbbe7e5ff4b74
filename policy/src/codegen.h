// Pieces of CUDA source that every op family's code generator shares, and the
// helpers to write them. Internal to kjit_policy.
#pragma once

#include <cstdint>

#include "kjit/runtime/op_key.h"

namespace kjit::policy::codegen {

// The CUDA type of a float dtype: "float", "__half" or "__nv_bfloat16".
const char* CudaType(DType t);

int64_t CeilDiv(int64_t a, int64_t b);

// What every generated translation unit starts with: the half and bfloat16
// headers and KJIT_INF / KJIT_NAN (NVRTC has no <cmath>).
extern const char* const kIncludes;

// Element access between memory and float registers: load_vec<STREAM>(const
// in_t*, float (&)[VEC]) and store_vec(out_t*, const float (&)[VEC]), VEC
// elements aligned to their total size, streaming cache hints when HINT.
// Needs in_t, out_t, VEC and HINT defined before it.
extern const char* const kElementAccess;

// Float reductions every normalization family uses: warp_sum(v) and
// block_sum(v, red) (every thread gets the sum; red holds 32 floats), and
// Welford statistics: struct W {mean, m2, n, s} (the statistic's mean is
// w_mean: s / n), w_add, w_merge (Chan et al.), warp_w and block_w (every
// thread gets lane 0's merge; red holds 4 * 32 floats), and Pairwise<N>::sum,
// a pairwise sum of N held values. Needs THREADS (threads per block) defined
// before it.
extern const char* const kReductions;

}  // namespace kjit::policy::codegen
