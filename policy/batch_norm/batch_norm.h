// The batch_norm family: aten::native_batch_norm and aten::cudnn_batch_norm,
// the two ops PyTorch calls on CUDA for batch norm (inference, and training
// without running statistics) and for instance norm (which views [N, C, ...]
// as [1, N*C, ...] and calls them in training mode).
//
// Served: a float32, float16 or bfloat16 input of 2 or more dims, contiguous
// (NCHW with any number of spatial dims, including none), or channels_last
// 4-D in inference; weight, bias, running_mean and running_var each absent or
// a contiguous [C] tensor, all of one dtype, the input's or float32
// (cudnn_batch_norm: float32). Statistics and the affine map in float32; the
// output rounded once to the input's dtype, laid out like the input.
//
// Inference (training=False): out = (x - running_mean) * rsqrt(running_var +
// eps) * weight + bias, per channel. native_batch_norm also returns
// save_mean and save_invstd (float32[C]); cudnn_batch_norm's extra outputs
// have zero elements.
// Training without running statistics: per channel, the mean and biased
// variance over N and the spatial dims; save_mean and save_invstd float32[C]
// (cudnn_batch_norm's third output is cuDNN's saved inverse std too).
// Training with running statistics updates them in place, and is declined:
// kjit serves only calls that leave their inputs unmodified.
//
// Inference strategies (the `strategy` knob): 0 flat (each thread `items`
// vectors of a block's tile of the whole tensor, the channel computed from
// the layout), 1 plane (a block per (n, c) plane of an NCHW input, the
// channel's scale and shift computed once).
// Training strategies: 2 warp (a warp per channel, in registers), 3 regs (a
// block per channel, in registers), 4 smem (a block per channel, staged in
// shared memory in the input's dtype), 5 online (a block per channel,
// Welford from global memory, then a second read), 6 cluster (a channel split
// over a thread-block cluster, Welford from global memory, partials merged
// through distributed shared memory, second read), 7 cluster_smem (the same,
// each block's part staged in shared memory).
#pragma once

#include "kjit/policy/design_space.h"

namespace kjit::policy {

const Family* BatchNormFamily();

}  // namespace kjit::policy
