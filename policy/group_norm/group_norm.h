// The group_norm family: aten::native_group_norm (what torch.nn.functional.group_norm
// and nn.GroupNorm call) on a contiguous [N, C, *spatial] float32, float16 or
// bfloat16 input, with optional contiguous [C] weight and bias of the input's dtype.
//
// The input is seen as N * G slices of LEN = C / G * HxW contiguous elements:
// slice (n, g) holds channels g * C/G .. (g + 1) * C/G - 1 of sample n, HxW
// elements each. Outputs as PyTorch 2.11's CUDA kernel makes them: y like the
// input; mean and rstd as [N, G] contiguous in the input's dtype.
//
// Strategies (the `strategy` knob):
//   0 warp          one warp per slice, the slice in registers (small slices)
//   1 regs          one block per slice, the slice in registers
//   2 smem          one block per slice, staged in shared memory (the part that
//                   fits, at least half; the rest read again, from L2)
//   3 online        one block per slice, Welford from global memory, then a
//                   second read to write
//   4 cluster       a thread-block cluster per slice, each block owning
//                   1/cluster of it: Welford partials merged through
//                   distributed shared memory, then a second read (which hits
//                   L2: only ~sm_count/cluster slices are in flight)
//   5 cluster_smem  as 4, each block's part staged in shared memory (what fits,
//                   at least half)
// Statistics (`stats`): 0 two-pass from the held slice, 1 Welford (per
// vector, merged with Chan's formula). Other knobs: threads, vector width,
// cluster size, unroll (vectors loaded before use in the streaming loops),
// cache hints.
// Non-contiguous inputs (channels_last is made contiguous by PyTorch before
// this op), mixed dtypes, empty inputs and fusion graphs are declined.
#pragma once

#include "kjit/policy/design_space.h"

namespace kjit::policy {

const Family* GroupNormFamily();

}  // namespace kjit::policy
