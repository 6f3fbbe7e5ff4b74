// The pool_backward family: the gradients autograd computes through 2-D pooling, as PyTorch 2.11's CUDA kernels
// compute them for contiguous (NCHW) tensors (AveragePool2d.cu avg_pool2d_backward_out_cuda_frame,
// DilatedMaxPool2d.cu max_pool_backward_nchw):
//   aten::avg_pool2d_backward(grad_output, self, kernel_size, stride, padding, ceil_mode, count_include_pad,
//                             divisor_override) -> grad_input
//   aten::max_pool2d_with_indices_backward(grad_output, self, kernel_size, stride, padding, dilation, ceil_mode,
//                                          indices) -> grad_input
// (max_pool1d/2d's and avg_pool1d's gradients arrive here too: their forwards decompose into the 2-D ops.)
// Each grad_input element (n, c, h, w) gathers over the outputs whose windows can hold it, ph outer, pw inner, in
// a float from 0, rounded once to the dtype:
//   max: ph in [p_start(h), p_end(h)) with p_start(i) = i + pad < ext ? 0 : (i + pad - ext) / stride + 1 (ext =
//        (k - 1) * dilation + 1) and p_end(i) = min((i + pad) / stride + 1, pooled); it adds grad_output[ph, pw]
//        where indices[ph, pw] == h * W + w (whatever the window holds: the indices are taken as given).
//   avg: the same ranges with dilation 1; per window hstart = ph * stride - pad, hend = min(hstart + k, H + pad),
//        pool_size = the window's size within input + padding, then clipped to the input (an empty window is
//        skipped); divide_factor = divisor_override, else pool_size (count_include_pad), else the clipped size;
//        it adds grad_output / divide_factor, in float16/bfloat16 as c10 computes `scalar_t / int`: the int
//        converted to the dtype, the quotient rounded to it, then added to the float accumulator.
// Output sizes as the forward's (codegen::PoolOutputSize, PyTorch's pooling_output_shape); grad_output (and the
// indices, int64) must have them.
//
// Served: batched [N, C, H, W] or unbatched [C, H, W] contiguous float32, float16 or bfloat16 `self` with a
// contiguous grad_output of its dtype (and contiguous indices). `self`'s pointer reaches the kernel (the ABI
// passes every tensor argument) but only its shape matters. Declined: channels_last and other layouts (PyTorch's
// NHWC kernels), arguments PyTorch rejects, windows over 4096 elements, empty tensors.
//
// One kernel: a thread per `rows` x `outs` grad_input elements of one plane (consecutive rows and columns); it
// walks the union of its elements' output ranges in (ph, pw) order, loading each grad_output (and index, and for
// avg computing each window's divisor) once, and adds it to each of its elements whose own range holds it: every
// element sees its windows in PyTorch's order. Where `outs` divides W, a thread's columns are stored as one
// vector; `hint` makes the stores streaming (evict-first). Index arithmetic is 32-bit where every index the
// kernel forms provably fits, else 64-bit.
#pragma once

#include "kjit/policy/design_space.h"

namespace kjit::policy {

const Family* PoolBackwardFamily();

}  // namespace kjit::policy
