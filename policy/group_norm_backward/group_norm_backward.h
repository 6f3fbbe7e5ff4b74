// The group_norm_backward family: the gradients autograd computes through a group norm,
// aten::native_group_norm_backward(grad_out, input, mean, rstd, weight?, N, C, HxW, group, output_mask[3])
// -> (grad_input, grad_weight, grad_bias), on a contiguous [N, C, *spatial] float32, float16 or bfloat16 input
// with HxW > 1 (HxW == 1 takes PyTorch's separate 1-d formulas: declined), mean and rstd [N, G] in the input's
// dtype (as native_group_norm returns them), an optional [C] weight of the input's dtype. As PyTorch 2.11's
// CUDA kernels compute it (group_norm_kernel.cu), in float32, with D = C / G channels a group, g(c) = weight[c]
// (or 1), m and r the slice's mean and rstd:
//   per (n, c)  ds = sum_hw dy * x             db = sum_hw dy
//   per (n, g)  s1 = sum_c ds * g(c)           s2 = sum_c db * g(c)          s = 1 / (D * HxW)
//               c2 = (s2 * m - s1) * r * r * r * s                           c3 = -c2 * m - s2 * r * s
//   grad_input  = r * g(c) * dy + c2 * x + c3
//   grad_weight = sum_n (ds - db * m) * r     grad_bias = sum_n db
// rounded once to the input's dtype. An output the mask leaves out is an undefined tensor (a null pointer to
// the kernel) and is not computed; the mask is part of the key.
//
// One launch, a block per slice (n, g) of D * HxW contiguous elements: a warp a channel for ds and db (lanes
// `vec` elements apart, summed by a butterfly), the group's s1 and s2 by a block reduction, then a second read
// of the slice for grad_input (evict-first with `hint`). With N > 1, each block writes its channels'
// per-sample terms to the workspace and the group's last block to finish (a counter per group) adds them over
// n in sample order: deterministic, with no atomics on values.
// Non-contiguous, empty or mixed-dtype calls, groups of more than 4096 channels, and a weight or bias gradient
// asked for without a weight, are declined.
#pragma once

#include "kjit/policy/design_space.h"

namespace kjit::policy {

const Family* GroupNormBackwardFamily();

}  // namespace kjit::policy
