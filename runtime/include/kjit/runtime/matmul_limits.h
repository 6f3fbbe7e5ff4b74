// The inner dimensions the small-matrix-product family (policy/matmul) serves, in one place for
// the two that must agree on them: the family's Match, which declines a larger K, and the shim's
// pre-filter (shim/: PreFilter::kSmallMatmul), which must decline, before keying, every
// mm/bmm the family would decline, and which cannot depend on policy/. Runtime is what both use.
#pragma once

#include <cstdint>

#include "kjit/runtime/op_key.h"

namespace kjit {

inline constexpr int64_t kMatmulMaxKFloat32 = 256;  // larger inner dimensions are cuBLAS's (near peak from K ~ 512 on)
inline constexpr int64_t kMatmulMaxKHalf = 64;      // f16/bf16: tensor cores beat FP32 FMA once K grows

// The largest K the family serves for operands of `dtype`; 0 for a dtype it does not serve.
constexpr int64_t MatmulMaxK(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return kMatmulMaxKFloat32;
    case DType::kFloat16:
    case DType::kBFloat16: return kMatmulMaxKHalf;
    default: return 0;
  }
}

}  // namespace kjit
