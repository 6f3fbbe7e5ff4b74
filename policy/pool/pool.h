// The pooling family: max and average pooling, forward, as PyTorch 2.11 runs them on CUDA. The ops
// with CUDA kernels, and so the only ones kjit can intercept (the shim overrides CUDA-key kernels):
//   aten::max_pool2d_with_indices(self, kernel_size, stride, padding, dilation, ceil_mode) -> (out, indices)
//   aten::max_pool3d_with_indices(...same...)                                              -> (out, indices)
//   aten::avg_pool2d(self, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override)
//   aten::avg_pool3d(...same...)
// max_pool1d/2d/3d and avg_pool1d are CompositeImplicitAutograd: on CUDA, max_poolNd calls
// max_poolNd_with_indices and drops the indices; the 1-D ops unsqueeze [N, C, L] to [N, C, 1, L]
// and call the 2-D op with a kernel of (1, k). Those calls arrive here as the 2-D/3-D keys.
//
// Semantics followed exactly (max pooling is compared bitwise, values and indices):
//   - windows start at o * stride - pad, take every dilation-th element, clipped to the input;
//     max pooling's padding never wins (it is -inf); in window order (t, h, w) a value replaces the
//     best when it is greater or NaN, so the last NaN of a window wins, and of equal maxima the
//     first; the output is the winning element's bits, the index its flat position in the input
//     plane (t * H * W + h * W + w, whatever the layout);
//   - a window with no element in the input (possible with dilation > input size) gives -inf with
//     the index PyTorch's kernel starts from: the first in-bounds-or-beyond start position's flat
//     index (contiguous 2-D and all 3-D kernels), 0 (channels_last 2-D kernel);
//   - average pooling sums in float32 in window order and divides by divisor_override, or the
//     window's size clipped to input + padding (count_include_pad), or its size in the input;
//   - output sizes: floor (or ceil with ceil_mode) of (in + 2 pad - dilation (k - 1) - 1) / stride
//     + 1, minus one in ceil_mode when the last window would start at or past in + pad.
// Layouts: contiguous (batched or not), and channels_last for batched 2-D and 3-D max pooling and
// 2-D average pooling, where PyTorch's output is channels_last too. avg_pool3d makes a channels_last
// input contiguous first: declined. Other strides, other dtypes than f32/f16/bf16, empty inputs,
// arguments PyTorch rejects: declined.
//
// The key is seen as N x C planes of D x H x W (2-D: D = 1, kernel depth 1). Strategies:
//   0 direct  a thread per `outs` consecutive outputs along W (channels_last: times `vec` channels),
//             the window read straight from global memory (through L1, which catches the overlap)
//   1 staged  contiguous only: a block per `rows` output rows of one (plane, output frame); the
//             kernel frames x input rows it needs (whole rows) staged in shared memory with loads
//             of `vec` elements along W, then every output of the tile computed from there
//   2 sliding contiguous only (codegen 2): a thread per `frames` x `rows` x `outs` outputs of one
//             plane, walking the input rows under them once each and reading each row's segment
//             once, every element folded into each output whose window holds it, in window order
//             (the same bits, ties, NaN, indices and float sums as the other strategies). The
//             segment's loads: where `vec` divides W and outs x stride W and the input is aligned
//             to `vec` elements, scalars up to a vector boundary, aligned vectors, scalars after
//             (a constant offset); otherwise (codegen 3: odd widths, inputs off a 16-byte boundary)
//             aligned vectors from the boundary at or before the segment, its offset in them
//             computed per row and its elements picked by selects. A vector holding none of the
//             segment's columns inside the row is not loaded, and one reaching outside the tensor
//             (its first or last) is read element by element: nothing outside the tensor's bytes
//             is read, even within a 16-byte line. Needs an input aligned to its element for `vec` > 1.
//   3 warp rows  contiguous, scalar (codegen 3, a new strategy value: other points' sources are
//             unchanged): the sliding thread mapping and fold, but a warp's 32 lanes take consecutive
//             groups of one output row (each row's groups padded to whole warps) and read each input
//             row's segment under them together, lane l loading columns base + 32 j + l (every load
//             instruction contiguous, each element loaded once per warp and row); a lane's columns
//             come from the lanes that loaded them by __shfl_sync (where outs x stride divides 32,
//             rounds in which each lane serves one reader: outs x stride shuffles per group of that many
//             columns). For odd rows, where a thread's own
//             vectors do not fit and its scalar loads, outs x stride apart across the warp, touch that
//             many times the sectors per load. Windows along W must meet (stride <= dilated kernel)
//             and a warp's segment take at most 9 loads per lane.
// Every strategy's kernel takes `minb` (codegen 4): 1 writes its launch bounds with one block an SM, so
// ptxas may spend registers on loads in flight rather than keep them few for occupancy (the odd-row
// max_pool3d's default); 0 leaves the count out, as every point before codegen 4.
#pragma once

#include "kjit/policy/design_space.h"

namespace kjit::policy {

const Family* PoolFamily();

}  // namespace kjit::policy
