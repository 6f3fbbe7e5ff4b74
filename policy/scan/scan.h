// The scan family: aten::cumsum and aten::cumprod (the default overloads,
// `cumsum(Tensor self, int dim, *, ScalarType? dtype=None)`, which PyTorch
// 2.11 dispatches to its CUDA kernel directly) over any dim of a contiguous
// float32, float16 or bfloat16 tensor, with dtype=None: the output has the
// input's dtype and layout. Values accumulate in float32 and are rounded once
// on the way out; PyTorch's CUDA kernels accumulate in the input's dtype
// (std::plus<scalar_t>, every partial result rounded to float16/bfloat16), so
// for float16 and bfloat16 kjit is the more accurate of the two and is judged
// by the evaluator's float64 rule where the two differ by more than the
// tolerance (see the traits in scan.cc).
//
// The key is seen as [outer, len, inner] around the scan dim. Strategies
// (the `strategy` knob):
//   0 warp     rows (dim last): one warp per row, threads/32 rows per block;
//              the row in tiles of 32 x vec x items elements, carried from
//              tile to tile in a register (no block barrier)
//   1 block    rows: one block per row, tiles of threads x vec x items; warp
//              shuffle scans, the warps' totals scanned by one warp, the
//              carry held across tiles
//   2 cluster  rows: a row split across a thread-block cluster: each chunk of
//              cluster tiles is scanned block by block and the blocks' totals
//              exchanged through distributed shared memory (few long rows)
//   3 columns  dim not last: a thread per vec adjacent columns, sequential
//              along the dim (PyTorch's order: bitwise equal for float32),
//              `items` rows read ahead; coalesced across the columns
//   4 columns_block dim not last, few columns: a block per tile of 32 x vec
//              columns, the dim cut in chunks of warps x items rows, each
//              warp scanning items rows, the warps' totals combined through
//              shared memory
// Declined: other dtypes (integer inputs scan into int64 in PyTorch), an
// explicit dtype, non-contiguous, empty and 0-d inputs, fusion graphs.
#pragma once

#include "kjit/policy/design_space.h"

namespace kjit::policy {

const Family* ScanFamily();

}  // namespace kjit::policy
