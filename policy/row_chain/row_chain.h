// The row_chain family: chains with one sum, mean or cumsum over the last dim and elementwise ops before and
// after it, run as one kernel that reads each row once: RMS norm as Hugging Face's Llama writes it on a float32
// tensor (`x.pow(2).mean(-1, keepdim=True)`, `x * torch.rsqrt(v + eps)`, `weight * h`), a row's centring
// (`x - x.mean(-1, keepdim=True)`), `x * torch.rsqrt((x * x).sum(-1, keepdim=True))`, a masked cumsum
// (`torch.cumsum(x * mask, -1)`). A chain key's calls:
//   elementwise ops, as elementwise_chain takes them (src/chain_ops.h; the same eager semantics, one rounding to
//     its dtype per op), on the chain's tensors: [.., LEN] ones of the reduced tensor's shape, [LEN] ones
//     broadcast over the rows (a weight), and the per-row values below;
//   exactly one aten::mean.dim or aten::sum.dim_IntList of a [.., LEN] value over dim -1 (or rank - 1), keepdim
//     True, dtype None: a [.., 1] value, summed in float and rounded to its input's dtype (mean: the sum times
//     PyTorch's factor, float(rows) / float(rows * LEN), as MeanOps computes it);
//   or exactly one aten::cumsum of a [.., LEN] value over dim -1 (or rank - 1), dtype None: a [.., LEN] value,
//     each element the row's float sum up to it, rounded to its input's dtype;
//   elementwise ops of per-row values (and numbers) are per-row values; one of a per-row value and a [.., LEN]
//     or [LEN] operand is a [.., LEN] value;
// then an optional kjit::live naming the [.., LEN] values written (else the last call's). Float32, float16 and
// bfloat16, contiguous; rows of at most 65536 elements (a row is held in registers). The sum's order is the
// kernel's own (a fixed tree; a scan: a thread's elements in order, then the threads and pieces before it), so
// results are compared with tolerances, as the reduce and scan families' are.
//
// Kernel parameters (kernel ABI v2): the external tensors in the order their arguments come in the key (call
// order, then argument order), then the live outputs in order. A block of `block_rows` rows, `row_threads`
// threads a row, each thread holding its `vec`-wide pieces of the row's inputs in registers between the sum and
// the epilogue.
#pragma once

#include "kjit/policy/design_space.h"

namespace kjit::policy {

const Family* RowChainFamily();

}  // namespace kjit::policy
