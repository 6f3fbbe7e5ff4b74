// The batch_norm_backward family: the gradients autograd computes through a training-mode batch norm,
//   aten::native_batch_norm_backward(grad_out, input, weight?, running_mean?, running_var?, save_mean?,
//     save_invstd?, train, eps, output_mask[3]) -> (grad_input, grad_weight, grad_bias)
//   aten::cudnn_batch_norm_backward(input, grad_output, weight, running_mean?, running_var?, save_mean?,
//     save_var?, epsilon, reserveSpace) -> (grad_input, grad_weight, grad_bias)
// on a contiguous [N, C, *spatial] float32, float16 or bfloat16 input (any number of spatial dims, none
// included) and a gradient of the same dtype and sizes; save_mean and save_invstd float32 [C] (native_batch_norm
// returns them so; cudnn_batch_norm's save_var is cuDNN's saved inverse standard deviation, the same value);
// an optional [C] weight of the input's dtype or float32 (cudnn: float32, required), running statistics (never
// read in training) absent or [C] of the weight's dtype; cudnn's reserveSpace (uint8) is passed and ignored.
//
// As PyTorch 2.11's CUDA kernels compute it (aten/src/ATen/native/cuda/Normalization.cu/.cuh), in float, per
// channel c with M = N * HxW elements, m = save_mean[c], r = save_invstd[c], g = weight[c] (or 1):
//   s1 = sum dy                 s2 = sum dy * (x - m)          norm = 1 / M (float)
//   grad_weight = s2 * r        grad_bias = s1                 (in the weight's dtype, PyTorch's empty_like(weight))
//   grad_input, rounded once to the input's dtype, in one of PyTorch's two orders of operations:
//   - the fused kernel (batch_norm_backward_kernel), taken when grad_input is asked for on an NCHW input that is
//     not also channels-last (stride of C != 1, not a channels_last-contiguous 4-D) and 32-bit indexable:
//       (dy - (x - m) * (s2 * norm * r * r) - s1 * norm) * (r * g), norm = 1.f / (float)M
//   - otherwise the reduce-then-elementwise kernels ([N, C] inputs, HxW == 1, C == 1 4-D, > 2^31 elements):
//       (dy - s1 * norm - (x - m) * (r * r * s2 * norm)) * (g * r), norm = (float)(1.0 / M)
//   cudnn_batch_norm_backward (cuDNN's own order, not public) is written in the fused order, and always returns
//   all three gradients (grad_weight and grad_bias float32 [C], like its weight).
// An output native's mask leaves out is an undefined tensor (a null pointer to the kernel) and is not computed;
// the mask is part of the key.
//
// One launch, deterministic, no atomics and no workspace: a channel per block, or per thread-block cluster of
// `cluster` blocks (sm_90): each block sums s1 and s2 over its contiguous range of the channel's vectors (N planes
// of HxW, `vec` elements along HxW), a block reduction, the cluster's partial sums added in rank order by every
// block through distributed shared memory; rank 0 writes grad_weight and grad_bias; then each block writes
// grad_input over its range from a second read (evict-first loads and streaming stores with `hint`).
// Declined, each with its reason: eval-mode backward (train=False), channels_last and other non-contiguous
// layouts, empty tensors, dtypes or parameter dtypes PyTorch would not pair, missing save_mean/save_invstd, and
// a weight or bias gradient asked for without a weight (PyTorch allocates both like the weight).
#pragma once

#include "kjit/policy/design_space.h"

namespace kjit::policy {

const Family* BatchNormBackwardFamily();

}  // namespace kjit::policy
