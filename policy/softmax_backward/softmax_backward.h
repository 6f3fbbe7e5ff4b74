// The softmax_backward family: the gradients autograd computes through a softmax,
// aten::_softmax_backward_data and aten::_log_softmax_backward_data(grad_output,
// output, dim, input_dtype), over any dim of contiguous float32, float16 or
// bfloat16 tensors (a float32 gradient for a half input too: half_to_float's
// backward), accumulating in float32. Per row along dim, with dot the row's sum:
//   softmax      grad_input = output * (grad_output - dot),  dot = sum(grad_output * output)
//   log_softmax  grad_input = grad_output - exp(output) * dot, dot = sum(grad_output)
// as PyTorch's CUDA kernels compute them (SoftMaxBackwardEpilogue).
//
// The key is seen as [outer, len, inner] around dim. Strategies (the `strategy` knob):
//   0 warp     one warp per row, the row's gradient and output held in registers: one read
//   1 block    one block per row, read twice (the sum, then the gradient)
//   2 columns  dim not last: a thread per VEC columns, read twice
// Non-contiguous or empty tensors are declined.
#pragma once

#include "kjit/policy/design_space.h"

namespace kjit::policy {

const Family* SoftmaxBackwardFamily();

}  // namespace kjit::policy
