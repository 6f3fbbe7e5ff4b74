// The depthwise_conv_backward family: the gradients autograd computes through a depthwise convolution (groups ==
// in_channels == out_channels, weight [C, 1, KH, KW]; F.conv2d and F.conv1d with groups=C). Autograd records
// aten::convolution, whose backward is
//   aten::convolution_backward(grad_output, input, weight, bias_sizes?, stride, padding, dilation, transposed,
//                              output_padding, groups, output_mask[3]) -> (grad_input, grad_weight, grad_bias)
// one CUDA kernel for every convolution (aten/src/ATen/native/Convolution.cpp): it views a 1-D convolution's
// tensors as 2-D ([N, C, 1, L], stride/padding/dilation 1/0/1 along H; the input made contiguous), picks the
// backend as the forward did (select_conv_backend: ConvBackend::Cudnn where use_cudnn_depthwise holds, else
// ConvBackend::CudaDepthwise2d), runs it for grad_input and grad_weight, and sums grad_bias itself as
// grad_output.sum({0, 2, 3}). The shim's pre-filter keys only the depthwise calls; Match declines the rest.
//
// Semantics followed (CudaDepthwise2d: aten/src/ATen/native/cuda/DepthwiseConv2d.cu, conv_depthwise2d_backward_
// kernel and conv_depthwise2d_grad_weight_kernel), in float, each result rounded once to the dtype:
//   grad_input[n, c, h, w] = sum over kh (outer), kw (inner) of weight[c, kh, kw] * grad_output[n, c, ho, wo]
//       where ho = (h + PH - kh*DH) / SH and wo = (w + PW - kw*DW) / SW divide exactly and lie in the output
//       (the taps that reach no output are skipped, not multiplied as zeros), as fused multiply-adds from 0.
//   grad_weight[c, kh, kw] = sum over n, oh, ow of input[n, c, oh*SH - PH + kh*DH, ow*SW - PW + kw*DW] *
//       grad_output[n, c, oh, ow] (positions outside the input skipped).
//   grad_bias[c] = sum over n, oh, ow of grad_output[n, c, oh, ow].
// grad_input is contiguous like the input, grad_weight [C, 1, KH, KW] (1-D: [C, 1, K]) and grad_bias [C] are of
// grad_output's dtype; an output the mask leaves out is an undefined tensor (a null pointer to the kernel) and
// is not computed; the mask is part of the key.
//
// Served: float32, float16 and bfloat16; 4-D (and 3-D: conv1d) contiguous input and grad_output of one dtype, a
// dense [C, 1, KH, KW] weight of that dtype, C >= 2, not transposed, kernels of at most 2048 taps, tensors under
// 2^31 elements (PyTorch's depthwise kernels need 32-bit indexing). Declined, each with its reason: channels_last
// inputs or weights (cuDNN's backward in PyTorch: left to it in this first version), other layouts (PyTorch
// copies them first), grouped convolutions that are not depthwise or have a channel multiplier, transposed
// convolutions, empty tensors, mixed dtypes, arguments PyTorch rejects.
// Backend and order: float32 and bfloat16 NCHW always take CudaDepthwise2d, whose orders kjit follows (grad_input
// exactly; grad_weight exactly with wstrategy 0). float16 NCHW takes cuDNN where cuDNN's depthwise heuristic says
// so (check_cudnn_depthwise_workload_with_filter: stride 1, square 1/3/5 kernels, 32 channels or more, ...),
// whose order and padding-tap treatment are its algorithm's: float16 keys are not fed special values (traits),
// and where the orders differ the evaluator's float64 rule judges. grad_bias is PyTorch's reduction kernel's
// (at::sum, its own order): kjit sums it in a fixed order of its own, also judged by the float64 rule.
//
// One launch, deterministic, no atomics and no workspace: the grid is the weight-gradient blocks, then the bias
// blocks, then the input-gradient blocks.
//   grad_input: a thread per `outs` consecutive elements of a row, each gathered in PyTorch's order (one vector
//       store where `outs` divides W; `hint`: streaming stores).
//   grad_weight, `wstrategy`:
//     0 PyTorch's: a block per (c, kh, kw); PyTorch's block of min(N, 8) warps emulated whatever `threads` is
//       (warp v of it sums samples v, v + 8, ..., lane l positions l, l + 32, ... of each; warp sums by
//       shuffle-down trees, then the warps' sums by another, as BlockReduceSum): PyTorch's value bit for bit.
//     1 a block per channel: each thread sums every tap (and grad_bias) over positions t, t + threads, ... of the
//       channel, reading each grad_output once; per-tap warp trees, then the warps' sums added in warp order.
//       Kernels of at most 64 taps.
//   grad_bias: with wstrategy 1 and grad_weight, inside the channel's block; otherwise a block per channel
//       summing the same way.
#pragma once

#include "kjit/policy/design_space.h"

namespace kjit::policy {

const Family* DepthwiseConvBackwardFamily();

}  // namespace kjit::policy
