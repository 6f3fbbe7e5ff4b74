// The reduction family: sum, mean, amax, amin, prod, argmax, argmin over any dim or adjacent set of
// dims, as PyTorch 2.11 runs them on CUDA. The overloads with CUDA kernels (LibTorch's
// *_cuda_dispatch.h), and so the ones the shim can intercept:
//   aten::sum.dim_IntList(self, int[1]? dim, bool keepdim=False, *, ScalarType? dtype=None)
//   aten::mean.dim(self, int[1]? dim, bool keepdim=False, *, ScalarType? dtype=None)
//   aten::amax(self, int[1] dim=[], bool keepdim=False)      aten::amin(...same...)
//   aten::prod(self, *, ScalarType? dtype=None)               (every dim)
//   aten::prod.dim_int(self, int dim, bool keepdim=False, *, ScalarType? dtype=None)
//   aten::argmax(self, int? dim=None, bool keepdim=False)     aten::argmin(...same...)
// `sum(self)` and `mean(self)` are CompositeExplicitAutograd and call the dim overloads with
// dim=[]: they arrive here as those keys. An empty or absent dim list means every dim; argmax with
// dim=None reduces the flattened tensor (the index is the flat, row-major position).
//
// Semantics followed (aten/src/ATen/native/ReduceOps.cpp, cuda/ReduceSumProdKernel.cu,
// ReduceMomentKernel.cu, ReduceMaxValuesKernel.cu, ReduceArgMaxKernel.cu, SharedReduceOps.h):
//   - float32 accumulation for every input dtype (PyTorch's acc_type for float16/bfloat16);
//   - mean = sum * factor, factor = float(outputs) / float(inputs) rounded in float32, as MeanOps;
//   - amax/amin: `isnan(a) || a > b ? a : b` (min: <): NaN propagates;
//   - argmax/argmin: NaN counts as the largest (smallest) value, the first NaN wins, and of equal
//     values the lowest index (GreaterOrNan / LessOrNan): a total order, so any combining tree
//     gives PyTorch's index exactly (compared bitwise);
//   - outputs contiguous, shape with the reduced dims removed or (keepdim) kept as 1: the same
//     bytes either way; dtype the input's, or `dtype` where given (argmax/argmin: int64).
//   - dtype=float32 on a float16/bfloat16 input reads the input as it is and writes float32
//     (PyTorch's gpu_lowp_to_f32 path); a dtype equal to the input's changes nothing.
// Inputs: dense tensors (a permutation of a contiguous one, e.g. channels_last), seen in memory order;
// the output is contiguous in logical order, so the kept dims must lie in memory in their logical
// order (channels_last means over H and W: [N, H*W, C]; over C: [N*H*W, C]).
// Declined, with the reason: other dtypes (integers reduce into int64, float64), other dtype
// arguments (a narrower one rounds the input first), inputs that are not dense, kept dims out of
// logical order in memory, argmax/argmin of a flattened non-contiguous input, empty and 0-d inputs,
// reduced dims in more than one run in memory (size-1 dims dropped) other than two runs around one
// kept run ([segs, outer, len]: dims 0, 2, 3 of NCHW, served as rows of segments), repeated dims, long
// column reductions to so few outputs that no kernel without a grid-wide split can fill the GPU (rows
// have the split strategy; columns do not yet).
//
// The key is seen as [outer, len, inner] in memory order: the reduced dims merged into len. Strategies:
//   0 warp     inner == 1 (rows): a warp per row, threads/32 rows per block, vectors of `vec`
//              along the row, `unroll` vectors in flight per lane, each into its own accumulator
//              (segments: output o's "row" is segs segments of len, segment s at (s * outer + o) * len,
//              walked as whole vectors; rows strategies only)
//   1 block    rows: a block per row (a cluster of `cluster` blocks per row, partials combined
//              through distributed shared memory), block reduction through shared memory
//   4 split    rows: `chunks` blocks per row, each writing its partial to the workspace (kernel
//              ABI v2); the row's last block (an atomic counter) combines them in chunk order,
//              writes the output and restores the workspace's zeros. For long rows to few outputs.
//   2 columns  inner > 1: a thread per `vec` adjacent columns walking down the reduced dim,
//              `unroll` rows in flight, each into its own accumulators
//   3 tile     inner > 1: a block per tile of 32 x vec columns of one outer index, the reduced dim
//              split over its warps (and a cluster's blocks), warps' partials combined in order
//              through shared memory (the middle-dim headroom case: dim 1 of 128x4096x512)
#pragma once

#include "kjit/policy/design_space.h"

namespace kjit::policy {

const Family* ReduceFamily();

}  // namespace kjit::policy
