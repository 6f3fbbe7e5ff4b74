// The layer_norm family: aten::native_layer_norm and aten::_fused_rms_norm
// (the CUDA op behind torch.nn.functional.rms_norm) on a contiguous float32,
// float16 or bfloat16 input, with optional contiguous weight (and bias) of the
// input's dtype, statistics in float32.
//
// The key is seen as M rows of N = prod(normalized_shape) elements. Outputs,
// as PyTorch's CUDA kernel (layer_norm_cuda, _fused_rms_norm_cuda) lays them
// out: y like the input (contiguous, input dtype); mean and rstd (layer_norm)
// or rstd (rms_norm) as M contiguous float32 values, viewed with shape
// input.sizes()[:axis] + [1] * len(normalized_shape) (acc_type of f32, f16
// and bf16 on CUDA is float).
//
// Strategies (the `strategy` knob):
//   0 warp    one warp per row, the row in registers (short rows)
//   1 regs    one block per row, the row in registers
//   2 smem    one block per row, the row staged in shared memory: one read
//   3 online  one block per row, Welford (or sum of squares) from global
//             memory, then a second read to write
// Statistics (the `stats` knob): 0 two-pass (the mean, then the sum of
// squared deviations from the held row; rms_norm: the sum of squares), 1
// Welford (running mean and M2, merged with Chan's formula).
// Non-contiguous inputs, mixed dtypes and fusion graphs are declined.
#pragma once

#include "kjit/policy/design_space.h"

namespace kjit::policy {

const Family* LayerNormFamily();

}  // namespace kjit::policy
