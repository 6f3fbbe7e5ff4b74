// The softmax family: aten::_softmax and aten::_log_softmax over any dim of a
// contiguous float32, float16 or bfloat16 tensor (half_to_float included),
// accumulating in float32.
//
// The key is seen as [outer, len, inner] around the softmax dim. Strategies
// (the `strategy` knob):
//   0 warp      one warp per row, the row in registers (short rows)
//   1 regs      one block per row, the row in registers
//   2 smem      one block per row, the row staged in shared memory: one read
//   3 online    one block per row, online max/sum then a second read to write
//   4 cluster   a row split across a thread-block cluster, online per block,
//               partial max/sum exchanged through distributed shared memory;
//               for long rows and few of them (64 x 1M)
//   5 cluster_smem  as 4, each block's part of the row staged in shared memory: one read; a part
//               larger than a block's shared memory is staged as far as it fits (TMA bulk copies
//               where a vector is 16 bytes) and the rest read twice (rows of 4 MB: 64 x 1M f32)
//   6 columns   dim not last: a thread per (outer, inner) column, online, two reads
//   7 columns_regs  as 6, the column in registers: one read (short columns)
//   8 columns_block a block per tile of 32 x vec columns, the softmax dim split
//               over its warps, partials merged through shared memory
//   9 cluster_hold  as 5 for parts larger than a block's shared memory: what does not fit is
//               held in registers (at most a quarter of a thread's share of them), so the row
//               is read once; with clusters of 16 (non-portable), rows of 4 MB (64 x 1M f32)
// Non-contiguous inputs are declined.
#pragma once

#include "kjit/policy/design_space.h"

namespace kjit::policy {

const Family* SoftmaxFamily();

}  // namespace kjit::policy
