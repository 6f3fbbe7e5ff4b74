// The small-matrix-product family: aten::mm and aten::bmm of f32, f16 and bf16 with a small inner
// dimension K (tall-skinny products such as 32768x64 @ 64x32768, and batches of small matrices such as
// 4096 x 64x64 @ 64x64), where cuBLAS's kernels leave time on the table (../shared/notes/h200-headroom.md:
// eager 2.0x and 1.76x the floor).
//
// Semantics: out[b, m, n] = sum over k of A[b, m, k] * B[b, k, n], accumulated in float32 (f16/bf16
// inputs converted exactly) as fused multiply-adds in ascending k from +0, rounded once to the
// inputs' dtype; the output is contiguous [M, N] (mm) or [B, M, N] (bmm), as PyTorch allocates it.
// Inputs may have any non-negative strides (transposed views, expanded batches). Every point of the
// space computes each output with the same arithmetic in the same order, so all points are bitwise
// equal to one another (and to a sequential float32 fma loop; tests/policy/emu/matmul.sh).
//
// Numerics: kernels use FP32 FMA only, never TF32 or reduced precision, whatever the key's numerics
// bits say. The key carries torch.backends.cuda.matmul.allow_tf32 (and float32_matmul_precision
// "medium") in OpKey::numerics (kjit_torch::CurrentNumerics), so TF32-on and TF32-off calls are
// different keys: a TF32-off key is never served by a TF32 kernel. A TF32-on key may be served by
// FP32 FMA (more accurate than what PyTorch would compute; the evaluator's float64 rule accepts it).
//
// Strategies (knob `stage`), a thread always computing tm x tn outputs of a bm x bn block tile:
//   0 direct   operands read from global memory through L1 at every k (no shared memory)
//   1 staged   bk-deep slices of the A and B tiles staged in shared memory (as float), one barrier
//              pair per slice
//   2 double   as staged, two shared buffers: the next slice is fetched into registers while the
//              current one is multiplied, one barrier per slice
//   3 resident the tile's whole K staged once (k-major, A transposed on the way in), then K outer products
//              from shared memory with no barrier: a thread's rows and columns are groups of 4, read as
//              float4 fragments (double-buffered in registers, whatever the global vector width), a
//              warp's stores whole tile rows; with several matrices a block staged in one round, the
//              next matrix's tiles are fetched into registers during this one's multiply (codegen 3)
//   4 pipelined (codegen 4, not yet measured) a block walks bpb or more work items (tiles of matrices) with
//              the grid's stride, the grid one wave of blocks; the whole-K tiles of the item `ahead` (1 or 2)
//              steps on are copied global -> shared with cp.async (4/8/16 bytes, raw, in their global
//              layout) into another of ahead + 1 buffers while this one is multiplied (fragments converted on
//              the way out of shared memory, 4 k a read along a k-contiguous operand), one barrier an item:
//              DRAM reads continue through the FMAs, for batches of small matrices; stores as resident.
//              Knob `span` (codegen 5, timed outside the evaluator only): where each operand's tile is
//              one contiguous span of memory whose rows are not 16-byte aligned (a batch of contiguous
//              63x63 matrices), the span's enclosing 16-byte pieces are copied (16 bytes a cp.async, not
//              4) and the tiles read at the span's offset (span 1), or repacked into padded tiles for
//              vector fragment reads (span 2, the default for such batches); pieces reaching outside a
//              view are copied element by element
//   5 bulk     (sm_90 and newer; not yet measured, no default uses it) as pipelined, for operands whose tile
//              of an item is one contiguous, 16-byte aligned run of whole 16-byte rows (a contiguous batch item
//              of a 64x64 f32 matrix: 16 KB): ONE thread copies each operand's tile with one TMA bulk copy
//              (cp.async.bulk ... mbarrier::complete_tx::bytes), an mbarrier a buffer counting the bytes
//              (phase parity: the buffer's use count mod 2), `ahead` 1, 2 or 3 items in flight (3: bulk only);
//              the tiles land unpadded, in their global layout, and all threads multiply from them as the
//              pipelined strategy does; stores as resident. A new value of `stage` (and of `ahead`): older
//              points generate what they did, and the codegen version stays 5
// Declined: other ops and dtypes, mixed dtypes, empty products, negative strides, K over 256 (f32) or
// over 64 (f16/bf16): there cuBLAS's large tiles and tensor cores are the right answer. The limits are
// policy/matmul/limits.h's, shared with the shim's pre-filter (PreFilter::kSmallMatmul).
#pragma once

#include "kjit/policy/design_space.h"

namespace kjit::policy {

const Family* MatmulFamily();

}  // namespace kjit::policy
