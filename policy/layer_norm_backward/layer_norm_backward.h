// The layer_norm_backward family: the gradients autograd computes through a layer norm or an RMS norm,
// aten::native_layer_norm_backward(grad_out, input, normalized_shape, mean, rstd, weight?, bias?,
// output_mask[3]) -> (grad_input, grad_weight, grad_bias) and aten::_fused_rms_norm_backward(grad_out, input,
// normalized_shape, rstd, weight?, output_mask[2]) -> (grad_input, grad_weight), on contiguous float32,
// float16 or bfloat16 tensors (weight and bias of the input's dtype; mean and rstd M float32 values), as
// PyTorch 2.11's CUDA kernels compute them (layer_norm_kernel.cu, rms_norm a template flag there):
// per row i of N = prod(normalized_shape) elements, with g = weight (or 1) and m = mean[i] (0 for rms_norm),
//   s1 = sum_j dy * g                      s2 = sum_j dy * g * (x - m) * rstd
//   grad_input = ((N * g * dy) - (x - m) * rstd * s2 - s1) * (1 / N * rstd)   (rms_norm: no s1 term)
// and per column j, over the M rows,
//   grad_weight = sum_i dy * (x - m) * rstd      grad_bias = sum_i dy
// in float32, rounded once to the input's dtype. An output the mask leaves out is an undefined tensor (a
// null pointer to the kernel) and is not computed; the mask is part of the key (keyed as 0s and 1s).
//
// One launch, two kinds of blocks: the first compute grad_input a row each (strategy 0: a warp per row,
// held in registers; 1: a block per row, held; 2: a block per row, read twice), the rest grad_weight and
// grad_bias a tile of 32 x `col_vec` columns over a chunk of the rows each (`chunks` chunks). With more
// than one chunk, each block writes its column sums to the workspace and the tile's last block to finish
// adds the chunks' sums in chunk order: the result does not depend on which block finishes when, so it is
// deterministic, as PyTorch's two-kernel reduction is (no atomics on values, whatever
// torch.use_deterministic_algorithms says).
// Non-contiguous, empty or mixed-dtype calls, and a weight or bias gradient asked for without its tensor,
// are declined.
#pragma once

#include "kjit/policy/design_space.h"

namespace kjit::policy {

const Family* LayerNormBackwardFamily();

}  // namespace kjit::policy
