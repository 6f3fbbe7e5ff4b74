#!/bin/bash
# A CPU check of the matmul family's generated kernels (as depthwise_conv.sh, with emu.h): each kernel
# is compiled with the host compiler and run one std::thread per CUDA thread, and its output compared
# bitwise with the product the family promises (matmul_run.cc): float32 fused multiply-adds in ascending
# k from +0, rounded once; NaN, +-Inf and -0.0 in both operands. It checks the tiling, slices (partial
# last slices, double buffering), vector fetches along either dim, transposed, strided and broadcast
# operands, batches per block, edges and stores of every stage, and (shared memory starting as NaN bytes)
# that no kernel reads shared memory nothing wrote into a stored output or stores past the launch's dynamic
# shared bytes; not NVRTC, the CUDA memory model or timing. Not part of CI (host compiler and CUDA headers
# at run time).
#
#   tests/policy/emu/matmul.sh [BUILD_DIR]     (BUILD_DIR: a configured build with kjit_policy built)
set -euo pipefail
source "$(dirname "$0")/emu_lib.sh"
emu_setup matmul_run.cc matmul_gen.cc "${1:-}"
# r NAME OP(mm|bmm) DTYPE B,M,K,N SAB,SAM,SAK SBB,SBK,SBN TF32 KNOB=VALUE...
# Each stage over odd sizes (partial tiles in m, n and k; K = 33 leaves a last slice of 1).
r s0 mm f32 1,37,19,45 0,19,1 0,45,1 0 stage=0 bm=16 bn=16 bk=8 tm=1 tn=2 vec=1 bpb=1 hint=0 minb=1
r s1 mm f32 1,70,33,50 0,33,1 0,50,1 0 stage=1 bm=32 bn=32 bk=16 tm=2 tn=2 vec=1 bpb=1 hint=0 minb=1
r s2 mm f32 1,64,64,96 0,64,1 0,96,1 0 stage=2 bm=64 bn=32 bk=16 tm=4 tn=2 vec=4 bpb=1 hint=1 minb=1
r s3 mm f32 1,70,33,50 0,33,1 0,50,1 0 stage=2 bm=32 bn=64 bk=8 tm=2 tn=8 vec=1 bpb=1 hint=0 minb=1
# Transposed A (m contiguous: vectors along m), transposed B (k contiguous) in bf16 with 16-byte vectors.
r t1 mm f32 1,48,40,36 0,1,48 0,36,1 0 stage=2 bm=32 bn=32 bk=8 tm=2 tn=2 vec=4 bpb=1 hint=0 minb=1
r t2 bmm bf16 3,33,40,24 1320,40,1 960,1,40 0 stage=2 bm=32 bn=32 bk=8 tm=2 tn=2 vec=8 bpb=1 hint=0 minb=1
r t3 bmm f16 2,20,24,30 480,1,20 720,1,24 0 stage=1 bm=32 bn=32 bk=8 tm=1 tn=4 vec=4 bpb=1 hint=0 minb=1
# No unit stride (a stepped view): scalar reads; an expanded (batch stride 0) operand.
r g1 mm f32 1,17,9,13 0,20,2 0,30,2 0 stage=1 bm=16 bn=16 bk=8 tm=1 tn=2 vec=1 bpb=1 hint=0 minb=1
r g2 bmm f32 5,20,12,24 240,12,1 0,24,1 0 stage=2 bm=32 bn=32 bk=8 tm=2 tn=2 vec=4 bpb=1 hint=0 minb=1
r g3 mm f16 1,31,1,17 0,1,1 0,17,1 0 stage=0 bm=32 bn=32 bk=8 tm=2 tn=2 vec=1 bpb=1 hint=0 minb=1
# Batches of tiny matrices, several a block (the last block's batch runs out).
r b1 bmm f16 10,8,8,8 64,8,1 64,8,1 0 stage=1 bm=16 bn=16 bk=8 tm=1 tn=2 vec=2 bpb=4 hint=0 minb=1
r b2 bmm f32 7,16,16,16 256,16,1 256,16,1 0 stage=2 bm=16 bn=16 bk=8 tm=1 tn=2 vec=4 bpb=2 hint=0 minb=1
r b3 bmm bf16 6,12,16,10 192,16,1 160,10,1 0 stage=0 bm=16 bn=16 bk=16 tm=1 tn=2 vec=1 bpb=4 hint=0 minb=1
# The large tile: 128x128, 8x8 a thread, over 130x64 @ 64x136.
r l1 mm f32 1,130,64,136 0,64,1 0,136,1 0 stage=2 bm=128 bn=128 bk=16 tm=8 tn=8 vec=4 bpb=1 hint=1 minb=2
# Resident (whole K staged once, k-major; grouped float4 fragments): the 128x128 8x8 tile over ragged M and N,
# K odd with scalar reads, K = 256, transposed operands (A along m, B along k) in f32, f16 and bf16 with
# 16-byte vectors, a stepped view, an expanded batch, two matrices a block, a 256x128 tile of 512 threads.
r r1 mm f32 1,130,64,136 0,64,1 0,136,1 0 stage=3 bm=128 bn=128 bk=32 tm=8 tn=8 vec=4 bpb=1 hint=1 minb=2
r r2 mm f32 1,70,33,50 0,33,1 0,50,1 0 stage=3 bm=32 bn=64 bk=8 tm=2 tn=8 vec=1 bpb=1 hint=0 minb=1
r r3 mm f32 1,40,256,24 0,256,1 0,24,1 0 stage=3 bm=64 bn=32 bk=16 tm=4 tn=2 vec=4 bpb=1 hint=0 minb=1
r r4 mm f32 1,48,40,36 0,1,48 0,36,1 0 stage=3 bm=32 bn=32 bk=16 tm=4 tn=4 vec=4 bpb=1 hint=0 minb=1
r r5 bmm bf16 3,33,40,24 1320,40,1 960,1,40 0 stage=3 bm=64 bn=32 bk=8 tm=4 tn=2 vec=8 bpb=1 hint=0 minb=1
r r6 bmm f16 2,20,24,30 480,1,20 720,1,24 0 stage=3 bm=32 bn=32 bk=8 tm=4 tn=8 vec=4 bpb=1 hint=1 minb=1
r r7 mm f16 1,37,64,72 0,64,1 0,72,1 0 stage=3 bm=64 bn=64 bk=32 tm=4 tn=4 vec=8 bpb=1 hint=0 minb=2
r r8 mm f32 1,17,9,13 0,20,2 0,30,2 0 stage=3 bm=16 bn=16 bk=8 tm=1 tn=2 vec=1 bpb=1 hint=0 minb=1
r r9 bmm f32 5,20,12,24 240,12,1 0,24,1 0 stage=3 bm=32 bn=32 bk=8 tm=4 tn=4 vec=4 bpb=1 hint=0 minb=1
r r10 bmm f32 7,16,16,16 256,16,1 256,16,1 0 stage=3 bm=16 bn=16 bk=8 tm=1 tn=2 vec=4 bpb=2 hint=0 minb=1
r r11 bmm f32 3,64,64,64 4096,64,1 4096,64,1 0 stage=3 bm=64 bn=64 bk=32 tm=4 tn=4 vec=4 bpb=1 hint=0 minb=2
r r12 mm f32 1,200,64,260 0,64,1 0,260,1 0 stage=3 bm=256 bn=128 bk=32 tm=8 tn=8 vec=4 bpb=1 hint=1 minb=1
r r13 bmm bf16 4,50,64,40 3200,1,50 2560,40,1 0 stage=3 bm=64 bn=64 bk=16 tm=8 tn=4 vec=2 bpb=1 hint=0 minb=1
# Codegen 3. Odd K read in scalars along k (P lanes a row, k padded to P lanes and neither read nor stored):
# f32 (8 lanes), A and B^T, f16 scalars, bf16 and f32 pairs with an odd count of pairs; float4 fragments all
# the same; the 8x8 tile of 128 threads capped by minb=4 over ragged M and N, N odd (scalar stores).
r o1 mm f32 1,37,63,45 0,63,1 0,45,1 0 stage=3 bm=64 bn=64 bk=8 tm=4 tn=4 vec=1 bpb=1 hint=0 minb=2
r o2 mm f32 1,40,33,50 0,33,1 0,1,33 0 stage=3 bm=32 bn=64 bk=16 tm=2 tn=8 vec=1 bpb=1 hint=1 minb=1
r o3 bmm f16 3,20,27,30 540,27,1 810,30,1 0 stage=3 bm=32 bn=32 bk=8 tm=2 tn=4 vec=1 bpb=1 hint=0 minb=1
r o4 bmm bf16 2,24,30,40 720,30,1 1200,40,1 0 stage=3 bm=32 bn=64 bk=8 tm=4 tn=4 vec=2 bpb=1 hint=0 minb=1
r o5 mm f32 1,33,42,20 0,42,1 0,20,1 0 stage=3 bm=64 bn=32 bk=8 tm=4 tn=2 vec=2 bpb=1 hint=0 minb=1
r o6 mm f32 1,130,63,260 0,63,1 0,260,1 0 stage=3 bm=64 bn=128 bk=8 tm=8 tn=8 vec=1 bpb=1 hint=1 minb=4
r o7 mm f32 1,100,63,99 0,63,1 0,99,1 0 stage=3 bm=64 bn=128 bk=8 tm=8 tn=8 vec=1 bpb=1 hint=1 minb=4
r o8 bmm f16 2,40,31,36 0,1,40 1116,36,1 0 stage=3 bm=64 bn=64 bk=8 tm=4 tn=4 vec=1 bpb=1 hint=0 minb=2
# Several matrices a block fetched in one round: the next matrix's tiles prefetched into registers during the
# multiply (the last group short of BPB), ragged 63x63 with odd K in scalars, B^T in bf16 with 16-byte vectors,
# an expanded f16 operand, A^T in f32.
r p1 bmm f32 7,64,64,64 4096,64,1 4096,64,1 0 stage=3 bm=64 bn=64 bk=32 tm=4 tn=4 vec=4 bpb=2 hint=0 minb=2
r p2 bmm f32 5,63,63,63 3969,63,1 3969,63,1 0 stage=3 bm=64 bn=64 bk=32 tm=4 tn=4 vec=1 bpb=4 hint=1 minb=2
r p3 bmm bf16 6,33,40,24 1320,40,1 960,1,40 0 stage=3 bm=64 bn=32 bk=8 tm=4 tn=2 vec=8 bpb=4 hint=0 minb=1
r p4 bmm f16 5,20,12,24 240,12,1 0,24,1 0 stage=3 bm=32 bn=32 bk=8 tm=4 tn=4 vec=4 bpb=2 hint=0 minb=1
r p5 bmm f32 9,16,16,16 256,1,16 256,16,1 0 stage=3 bm=16 bn=16 bk=8 tm=1 tn=2 vec=4 bpb=4 hint=0 minb=1
# One tile a matrix with N odd: the matrix out through shared memory as one contiguous span (FLAT3): several a
# block without the prefetch (two staging rounds), bf16 with the prefetch and streaming stores; K = 1 keeps
# the per-thread stores (the matrix does not fit over the staged tiles).
r f1 bmm f32 3,63,63,63 3969,63,1 3969,63,1 0 stage=3 bm=64 bn=64 bk=8 tm=8 tn=8 vec=1 bpb=2 hint=0 minb=1
r f2 bmm bf16 5,20,16,33 320,16,1 528,33,1 0 stage=3 bm=32 bn=64 bk=8 tm=2 tn=4 vec=1 bpb=2 hint=1 minb=1
r f3 bmm f32 2,15,1,17 15,1,1 17,17,1 0 stage=3 bm=16 bn=32 bk=8 tm=1 tn=2 vec=1 bpb=2 hint=0 minb=1
# Tiled outputs with stores narrower than a thread's 4 (or 2) columns: rows through a warp's shared buffer,
# consecutive lanes on consecutive columns (WSTORE3): 512 threads (a warp within one row), bf16 pairs, two
# matrices a block in two staging rounds, 2-column groups (o7 above: 8x8 of 128 threads, N = 99).
r w1 mm f32 1,100,63,199 0,63,1 0,199,1 0 stage=3 bm=128 bn=256 bk=8 tm=8 tn=8 vec=1 bpb=1 hint=1 minb=1
r w2 mm bf16 1,70,40,42 0,40,1 0,42,1 0 stage=3 bm=32 bn=64 bk=8 tm=2 tn=8 vec=2 bpb=1 hint=0 minb=1
r w3 bmm f32 3,30,200,30 6000,200,1 6000,30,1 0 stage=3 bm=32 bn=32 bk=8 tm=4 tn=4 vec=2 bpb=2 hint=1 minb=1
r w4 mm f32 1,50,17,33 0,17,1 0,33,1 0 stage=3 bm=64 bn=32 bk=8 tm=4 tn=2 vec=1 bpb=1 hint=0 minb=1
# Expert defaults: a tall-skinny product (TF32 allowed: still FP32 FMA), batches of 64x64, f16 vector @ matrix.
r d1 mm f32 1,200,64,300 0,64,1 0,300,1 1
r d2 bmm f32 6,64,64,64 4096,64,1 4096,64,1 0
r d3 bmm bf16 4,64,64,64 4096,64,1 4096,1,64 0
r d4 mm f16 1,1,64,520 0,64,1 0,520,1 0
# Codegen 3's defaults: the compute-bound rule (64x128 of 8x8, minb=4) with odd K, M and N; odd 63x63 batches.
r d5 mm f32 1,1100,63,3900 0,63,1 0,3900,1 0
r d6 bmm f32 3,63,63,63 3969,63,1 3969,63,1 0
r d7 bmm f32 2200,64,64,64 4096,64,1 4096,64,1 0
# Codegen 4, pipelined (stage 4): a block walks its items (tiles of matrices) with the grid's stride and
# copies the next one's whole-K tiles with cp.async while it multiplies this one. The emulator makes a
# copy when its group is awaited (as late as the hardware may); the *s cases copy at issue
# (KJIT_EMU_CP_ASYNC=sync: as early as it may, over a buffer other threads might still read). Batches not a
# multiple of the grid, 64^3 with float4 copies and 63^3 with 4-byte ones (contiguous stores through shared
# memory), two items in flight ahead, B^T in bf16 with 16-byte copies, A^T (fragments along m), an expanded
# f16 operand, A^T and B^T in f16, mm over several ragged tiles a block, odd K with 2-column stores (through a
# warp's buffer), a stepped view (4-byte copies of strided elements), bf16 B^T two ahead.
r q1 bmm f32 7,64,64,64 4096,64,1 4096,64,1 0 stage=4 bm=64 bn=64 bk=16 tm=4 tn=8 vec=4 bpb=2 hint=0 minb=1 ahead=1
r q2 bmm f32 9,63,63,63 3969,63,1 3969,63,1 0 stage=4 bm=64 bn=64 bk=16 tm=4 tn=8 vec=1 bpb=4 hint=0 minb=1 ahead=1
r q3 bmm f32 11,64,64,64 4096,64,1 4096,64,1 0 stage=4 bm=64 bn=64 bk=32 tm=4 tn=8 vec=4 bpb=4 hint=1 minb=1 ahead=2
r q4 bmm f32 10,63,63,63 3969,63,1 3969,63,1 0 stage=4 bm=64 bn=64 bk=8 tm=8 tn=8 vec=1 bpb=4 hint=1 minb=1 ahead=2
r q5 bmm bf16 6,33,40,24 1320,40,1 960,1,40 0 stage=4 bm=64 bn=32 bk=8 tm=4 tn=2 vec=8 bpb=2 hint=0 minb=1 ahead=1
r q6 bmm f32 9,16,16,16 256,1,16 256,16,1 0 stage=4 bm=16 bn=16 bk=8 tm=1 tn=2 vec=4 bpb=4 hint=0 minb=1 ahead=1
r q7 bmm f16 5,20,12,24 240,12,1 0,24,1 0 stage=4 bm=32 bn=32 bk=8 tm=4 tn=4 vec=4 bpb=2 hint=0 minb=1 ahead=1
r q8 bmm f16 3,20,24,30 480,1,20 720,1,24 0 stage=4 bm=32 bn=32 bk=8 tm=4 tn=8 vec=4 bpb=1 hint=0 minb=1 ahead=1
r q9 mm f32 1,130,64,136 0,64,1 0,136,1 0 stage=4 bm=64 bn=64 bk=16 tm=4 tn=8 vec=4 bpb=2 hint=0 minb=1 ahead=1
r q10 mm f32 1,70,33,50 0,33,1 0,50,1 0 stage=4 bm=32 bn=64 bk=8 tm=2 tn=8 vec=1 bpb=1 hint=0 minb=1 ahead=1
r q11 mm f32 1,17,9,13 0,20,2 0,30,2 0 stage=4 bm=16 bn=16 bk=8 tm=1 tn=2 vec=1 bpb=1 hint=0 minb=1 ahead=1
r q12 bmm bf16 4,64,64,64 4096,64,1 4096,1,64 0 stage=4 bm=64 bn=64 bk=16 tm=4 tn=8 vec=8 bpb=4 hint=0 minb=1 ahead=2
KJIT_EMU_CP_ASYNC=sync r q1s bmm f32 7,64,64,64 4096,64,1 4096,64,1 0 stage=4 bm=64 bn=64 bk=16 tm=4 tn=8 vec=4 bpb=2 hint=0 minb=1 ahead=1
KJIT_EMU_CP_ASYNC=sync r q2s bmm f32 9,63,63,63 3969,63,1 3969,63,1 0 stage=4 bm=64 bn=64 bk=16 tm=4 tn=8 vec=1 bpb=4 hint=0 minb=1 ahead=1
KJIT_EMU_CP_ASYNC=sync r q4s bmm f32 10,63,63,63 3969,63,1 3969,63,1 0 stage=4 bm=64 bn=64 bk=8 tm=8 tn=8 vec=1 bpb=4 hint=1 minb=1 ahead=2
# Codegen 4's default for batches of small matrices (pipelined, one wave of blocks): 64^3 f32 and f16, 63^3.
r d8 bmm f32 600,64,64,64 4096,64,1 4096,64,1 0
r d9 bmm f32 600,63,63,63 3969,63,1 3969,63,1 0
r d10 bmm f16 600,64,64,64 4096,64,1 4096,64,1 0
# Codegen 5, span copies (span=1): each operand's tile one contiguous span, copied as the 16-byte pieces that
# enclose it and read at its offset in them; pieces reaching outside a view copied element by element (the
# read checks: nothing outside the views is read). Odd 63^3 several items a block, views starting 4 and 12
# bytes into their storage, two ahead; 17x33 @ 33x9 (offsets 3 and 1); f16 at a 2-byte offset with 2-byte
# edge elements; bf16 A and B^T with odd K; A^T (k-rows of M) with a broadcast-free odd batch; an expanded
# (batch stride 0) B; mm over ragged m tiles (a span per tile); each copy order (sync).
r sp1 bmm f32 37,63,63,63 3969,63,1 3969,63,1 0 stage=4 bm=64 bn=64 bk=16 tm=4 tn=8 vec=1 bpb=4 hint=0 minb=1 ahead=1 span=1
r sp2 bmm f32 37,63,63,63 3969,63,1 3969,63,1 0 aoff=1 boff=3 stage=4 bm=64 bn=64 bk=16 tm=4 tn=8 vec=1 bpb=4 hint=1 minb=1 ahead=2 span=1
r sp3 bmm f32 5,17,33,9 561,33,1 297,9,1 0 aoff=3 boff=1 stage=4 bm=32 bn=16 bk=8 tm=4 tn=4 vec=1 bpb=2 hint=0 minb=1 ahead=1 span=1
r sp4 bmm f16 9,63,63,63 3969,63,1 3969,63,1 0 aoff=1 boff=5 stage=4 bm=64 bn=64 bk=16 tm=8 tn=4 vec=1 bpb=3 hint=0 minb=1 ahead=1 span=1
r sp5 bmm bf16 6,33,41,25 1353,41,1 1025,1,41 0 aoff=2 stage=4 bm=64 bn=32 bk=8 tm=4 tn=4 vec=1 bpb=3 hint=0 minb=1 ahead=2 span=1
r sp6 bmm f32 5,31,17,29 527,1,31 493,29,1 0 boff=2 stage=4 bm=32 bn=32 bk=8 tm=4 tn=4 vec=1 bpb=2 hint=0 minb=1 ahead=1 span=1
r sp7 bmm f32 7,63,63,63 3969,63,1 0,63,1 0 aoff=2 boff=1 stage=4 bm=64 bn=64 bk=16 tm=4 tn=8 vec=1 bpb=3 hint=0 minb=1 ahead=1 span=1
r sp8 mm f32 1,100,63,50 0,63,1 0,50,1 0 aoff=1 stage=4 bm=32 bn=64 bk=8 tm=2 tn=8 vec=1 bpb=2 hint=0 minb=1 ahead=1 span=1
r sp9 bmm f32 5,64,64,64 4096,64,1 4096,64,1 0 aoff=1 stage=4 bm=64 bn=64 bk=16 tm=4 tn=8 vec=1 bpb=2 hint=0 minb=1 ahead=1 span=1
KJIT_EMU_CP_ASYNC=sync r sp1s bmm f32 37,63,63,63 3969,63,1 3969,63,1 0 stage=4 bm=64 bn=64 bk=16 tm=4 tn=8 vec=1 bpb=4 hint=0 minb=1 ahead=1 span=1
KJIT_EMU_CP_ASYNC=sync r sp2s bmm f32 37,63,63,63 3969,63,1 3969,63,1 0 aoff=1 boff=3 stage=4 bm=64 bn=64 bk=16 tm=4 tn=8 vec=1 bpb=4 hint=1 minb=1 ahead=2 span=1
KJIT_EMU_CP_ASYNC=sync r sp4s bmm f16 9,63,63,63 3969,63,1 3969,63,1 0 aoff=1 boff=5 stage=4 bm=64 bn=64 bk=16 tm=8 tn=4 vec=1 bpb=3 hint=0 minb=1 ahead=1 span=1
# Span 2: the span copies land in `ahead` buffers and each item's tiles are repacked into one padded buffer
# (vector fragment reads): the cases above' shapes, offsets and layouts, each copy order.
r sr1 bmm f32 37,63,63,63 3969,63,1 3969,63,1 0 stage=4 bm=64 bn=64 bk=16 tm=4 tn=8 vec=1 bpb=4 hint=0 minb=1 ahead=1 span=2
r sr2 bmm f32 37,63,63,63 3969,63,1 3969,63,1 0 aoff=1 boff=3 stage=4 bm=64 bn=64 bk=16 tm=4 tn=8 vec=1 bpb=4 hint=1 minb=1 ahead=2 span=2
r sr3 bmm f32 5,17,33,9 561,33,1 297,9,1 0 aoff=3 boff=1 stage=4 bm=32 bn=16 bk=8 tm=4 tn=4 vec=1 bpb=2 hint=0 minb=1 ahead=1 span=2
r sr4 bmm f16 9,63,63,63 3969,63,1 3969,63,1 0 aoff=1 boff=5 stage=4 bm=64 bn=64 bk=16 tm=8 tn=4 vec=1 bpb=3 hint=0 minb=1 ahead=1 span=2
r sr5 bmm bf16 6,33,41,25 1353,41,1 1025,1,41 0 aoff=2 stage=4 bm=64 bn=32 bk=8 tm=4 tn=4 vec=1 bpb=3 hint=0 minb=1 ahead=2 span=2
r sr6 bmm f32 5,31,17,29 527,1,31 493,29,1 0 boff=2 stage=4 bm=32 bn=32 bk=8 tm=4 tn=4 vec=1 bpb=2 hint=0 minb=1 ahead=1 span=2
r sr7 bmm f32 7,63,63,63 3969,63,1 0,63,1 0 aoff=2 boff=1 stage=4 bm=64 bn=64 bk=16 tm=4 tn=8 vec=1 bpb=3 hint=0 minb=1 ahead=1 span=2
r sr8 mm f32 1,100,63,50 0,63,1 0,50,1 0 aoff=1 stage=4 bm=32 bn=64 bk=8 tm=2 tn=8 vec=1 bpb=2 hint=0 minb=1 ahead=1 span=2
r sr9 bmm f32 5,64,64,64 4096,64,1 4096,64,1 0 aoff=1 stage=4 bm=64 bn=64 bk=16 tm=4 tn=8 vec=1 bpb=2 hint=0 minb=1 ahead=1 span=2
KJIT_EMU_CP_ASYNC=sync r sr1s bmm f32 37,63,63,63 3969,63,1 3969,63,1 0 stage=4 bm=64 bn=64 bk=16 tm=4 tn=8 vec=1 bpb=4 hint=0 minb=1 ahead=1 span=2
KJIT_EMU_CP_ASYNC=sync r sr2s bmm f32 37,63,63,63 3969,63,1 3969,63,1 0 aoff=1 boff=3 stage=4 bm=64 bn=64 bk=16 tm=4 tn=8 vec=1 bpb=4 hint=1 minb=1 ahead=2 span=2
KJIT_EMU_CP_ASYNC=sync r sr5s bmm bf16 6,33,41,25 1353,41,1 1025,1,41 0 aoff=2 stage=4 bm=64 bn=32 bk=8 tm=4 tn=4 vec=1 bpb=3 hint=0 minb=1 ahead=2 span=2
# Span 3 (sm_90): span 2 with the pieces landed by one thread's bulk copies, an mbarrier a landing buffer
# (the view's end pieces element by element before the arrival): span 2's cases, and every buffer reused
# several times (bpb 8: the parities flip) one and two ahead, f16 at offsets; each copy order.
r sb1 bmm f32 37,63,63,63 3969,63,1 3969,63,1 0 stage=4 bm=64 bn=64 bk=16 tm=4 tn=8 vec=1 bpb=4 hint=0 minb=1 ahead=1 span=3
r sb2 bmm f32 37,63,63,63 3969,63,1 3969,63,1 0 aoff=1 boff=3 stage=4 bm=64 bn=64 bk=16 tm=4 tn=8 vec=1 bpb=4 hint=1 minb=1 ahead=2 span=3
r sb3 bmm f32 5,17,33,9 561,33,1 297,9,1 0 aoff=3 boff=1 stage=4 bm=32 bn=16 bk=8 tm=4 tn=4 vec=1 bpb=2 hint=0 minb=1 ahead=1 span=3
r sb4 bmm f16 9,63,63,63 3969,63,1 3969,63,1 0 aoff=1 boff=5 stage=4 bm=64 bn=64 bk=16 tm=8 tn=4 vec=1 bpb=3 hint=0 minb=1 ahead=1 span=3
r sb5 bmm bf16 6,33,41,25 1353,41,1 1025,1,41 0 aoff=2 stage=4 bm=64 bn=32 bk=8 tm=4 tn=4 vec=1 bpb=3 hint=0 minb=1 ahead=2 span=3
r sb6 bmm f32 5,31,17,29 527,1,31 493,29,1 0 boff=2 stage=4 bm=32 bn=32 bk=8 tm=4 tn=4 vec=1 bpb=2 hint=0 minb=1 ahead=1 span=3
r sb7 bmm f32 7,63,63,63 3969,63,1 0,63,1 0 aoff=2 boff=1 stage=4 bm=64 bn=64 bk=16 tm=4 tn=8 vec=1 bpb=3 hint=0 minb=1 ahead=1 span=3
r sb8 mm f32 1,100,63,50 0,63,1 0,50,1 0 aoff=1 stage=4 bm=32 bn=64 bk=8 tm=2 tn=8 vec=1 bpb=2 hint=0 minb=1 ahead=1 span=3
r sb9 bmm f32 5,64,64,64 4096,64,1 4096,64,1 0 aoff=1 stage=4 bm=64 bn=64 bk=16 tm=4 tn=8 vec=1 bpb=2 hint=0 minb=1 ahead=1 span=3
r sb10 bmm f32 61,63,63,63 3969,63,1 3969,63,1 0 aoff=3 boff=1 stage=4 bm=64 bn=64 bk=16 tm=8 tn=4 vec=1 bpb=8 hint=0 minb=1 ahead=1 span=3
r sb11 bmm f32 67,63,63,63 3969,63,1 3969,63,1 0 aoff=2 stage=4 bm=64 bn=64 bk=16 tm=8 tn=4 vec=1 bpb=8 hint=0 minb=1 ahead=2 span=3
r sb12 bmm f16 45,63,63,63 3969,63,1 3969,63,1 0 aoff=1 boff=5 stage=4 bm=64 bn=64 bk=16 tm=8 tn=4 vec=1 bpb=8 hint=0 minb=1 ahead=2 span=3
r sb13 mm f32 1,1000,63,50 0,63,1 0,50,1 0 aoff=1 stage=4 bm=32 bn=64 bk=8 tm=2 tn=8 vec=1 bpb=8 hint=0 minb=1 ahead=1 span=3
KJIT_EMU_CP_ASYNC=sync r sb1s bmm f32 37,63,63,63 3969,63,1 3969,63,1 0 stage=4 bm=64 bn=64 bk=16 tm=4 tn=8 vec=1 bpb=4 hint=0 minb=1 ahead=1 span=3
KJIT_EMU_CP_ASYNC=sync r sb2s bmm f32 37,63,63,63 3969,63,1 3969,63,1 0 aoff=1 boff=3 stage=4 bm=64 bn=64 bk=16 tm=4 tn=8 vec=1 bpb=4 hint=1 minb=1 ahead=2 span=3
KJIT_EMU_CP_ASYNC=sync r sb5s bmm bf16 6,33,41,25 1353,41,1 1025,1,41 0 aoff=2 stage=4 bm=64 bn=32 bk=8 tm=4 tn=4 vec=1 bpb=3 hint=0 minb=1 ahead=2 span=3
KJIT_EMU_CP_ASYNC=sync r sb10s bmm f32 61,63,63,63 3969,63,1 3969,63,1 0 aoff=3 boff=1 stage=4 bm=64 bn=64 bk=16 tm=8 tn=4 vec=1 bpb=8 hint=0 minb=1 ahead=1 span=3
KJIT_EMU_CP_ASYNC=sync r sb11s bmm f32 67,63,63,63 3969,63,1 3969,63,1 0 aoff=2 stage=4 bm=64 bn=64 bk=16 tm=8 tn=4 vec=1 bpb=8 hint=0 minb=1 ahead=2 span=3
KJIT_EMU_CP_ASYNC=sync r sb13s mm f32 1,1000,63,50 0,63,1 0,50,1 0 aoff=1 stage=4 bm=32 bn=64 bk=8 tm=2 tn=8 vec=1 bpb=8 hint=0 minb=1 ahead=1 span=3
# Span 4 (sm_90, ahead 1): span 3's cases of one landing buffer with the tiles repacked in place over it (a
# tile's rows past the matrix, f16 at offsets, broadcast B, an mm of ragged tiles, items a block up to 8).
r si1 bmm f32 37,63,63,63 3969,63,1 3969,63,1 0 stage=4 bm=64 bn=64 bk=16 tm=4 tn=8 vec=1 bpb=4 hint=0 minb=1 ahead=1 span=4
r si3 bmm f32 5,17,33,9 561,33,1 297,9,1 0 aoff=3 boff=1 stage=4 bm=32 bn=16 bk=8 tm=4 tn=4 vec=1 bpb=2 hint=0 minb=1 ahead=1 span=4
r si4 bmm f16 9,63,63,63 3969,63,1 3969,63,1 0 aoff=1 boff=5 stage=4 bm=64 bn=64 bk=16 tm=8 tn=4 vec=1 bpb=3 hint=0 minb=1 ahead=1 span=4
r si6 bmm f32 5,31,17,29 527,1,31 493,29,1 0 boff=2 stage=4 bm=32 bn=32 bk=8 tm=4 tn=4 vec=1 bpb=2 hint=0 minb=1 ahead=1 span=4
r si7 bmm f32 7,63,63,63 3969,63,1 0,63,1 0 aoff=2 boff=1 stage=4 bm=64 bn=64 bk=16 tm=4 tn=8 vec=1 bpb=3 hint=0 minb=1 ahead=1 span=4
r si8 mm f32 1,100,63,50 0,63,1 0,50,1 0 aoff=1 stage=4 bm=32 bn=64 bk=8 tm=2 tn=8 vec=1 bpb=2 hint=0 minb=1 ahead=1 span=4
r si9 bmm f32 5,64,64,64 4096,64,1 4096,64,1 0 aoff=1 stage=4 bm=64 bn=64 bk=16 tm=4 tn=8 vec=1 bpb=2 hint=0 minb=1 ahead=1 span=4
r si10 bmm f32 61,63,63,63 3969,63,1 3969,63,1 0 aoff=3 boff=1 stage=4 bm=64 bn=64 bk=16 tm=8 tn=4 vec=1 bpb=8 hint=0 minb=1 ahead=1 span=4
r si13 mm f32 1,1000,63,50 0,63,1 0,50,1 0 aoff=1 stage=4 bm=32 bn=64 bk=8 tm=2 tn=8 vec=1 bpb=8 hint=0 minb=1 ahead=1 span=4
KJIT_EMU_CP_ASYNC=sync r si10s bmm f32 61,63,63,63 3969,63,1 3969,63,1 0 aoff=3 boff=1 stage=4 bm=64 bn=64 bk=16 tm=8 tn=4 vec=1 bpb=8 hint=0 minb=1 ahead=1 span=4
# The default for odd batches (span copies repacked; on sm_90, the emulator's arch, landed by bulk copies: span 3)
# at an offset, and in f16.
r d11 bmm f32 600,63,63,63 3969,63,1 3969,63,1 0 aoff=1 boff=2
r d12 bmm f16 600,63,63,63 3969,63,1 3969,63,1 0
# Stage 5, bulk (sm_90; codegen 5 still): one thread copies an item's tiles with one TMA bulk copy an operand, an
# mbarrier counting the bytes; the emulator makes the copies when a thread waits for the phase (the *s cases:
# at issue). 64^3 f32 one to three items ahead over batches not a multiple of the grid, 32^3, 128x64 @ 64x64
# (two row tiles a matrix), mm over ragged row tiles (a last tile of 2 rows: a shorter copy), A^T (the whole
# matrix, k-rows of M), bf16 B^T, f16, B^T with N = 30 (stores through a warp's buffer), 16^3 with one column
# a thread (the matrix out as one span: FLAT5), an expanded (batch stride 0) B.
r k1 bmm f32 7,64,64,64 4096,64,1 4096,64,1 0 stage=5 bm=64 bn=64 bk=16 tm=4 tn=8 vec=1 bpb=2 hint=0 minb=1 ahead=1 span=0
r k2 bmm f32 11,64,64,64 4096,64,1 4096,64,1 0 stage=5 bm=64 bn=64 bk=32 tm=4 tn=8 vec=1 bpb=3 hint=1 minb=1 ahead=2 span=0
r k3 bmm f32 13,64,64,64 4096,64,1 4096,64,1 0 stage=5 bm=64 bn=64 bk=16 tm=8 tn=4 vec=1 bpb=4 hint=0 minb=1 ahead=3 span=0
r k4 bmm f32 9,32,32,32 1024,32,1 1024,32,1 0 stage=5 bm=32 bn=32 bk=8 tm=2 tn=4 vec=1 bpb=4 hint=0 minb=1 ahead=1 span=0
r k5 bmm f32 5,128,64,64 8192,64,1 4096,64,1 0 stage=5 bm=64 bn=64 bk=16 tm=4 tn=8 vec=1 bpb=3 hint=0 minb=1 ahead=2 span=0
r k6 bmm f32 3,128,64,64 8192,64,1 4096,64,1 0 stage=5 bm=128 bn=64 bk=16 tm=8 tn=8 vec=1 bpb=2 hint=0 minb=1 ahead=1 span=0
r k7 mm f32 1,130,64,64 0,64,1 0,64,1 0 stage=5 bm=64 bn=64 bk=16 tm=4 tn=8 vec=1 bpb=2 hint=0 minb=1 ahead=1 span=0
r k8 bmm f32 5,32,16,32 512,1,32 512,32,1 0 stage=5 bm=32 bn=32 bk=8 tm=2 tn=4 vec=1 bpb=2 hint=0 minb=1 ahead=1 span=0
r k9 bmm bf16 6,64,64,64 4096,64,1 4096,1,64 0 stage=5 bm=64 bn=64 bk=16 tm=4 tn=8 vec=1 bpb=3 hint=0 minb=1 ahead=2 span=0
r k10 bmm f16 5,64,64,64 4096,64,1 4096,64,1 0 stage=5 bm=64 bn=64 bk=16 tm=8 tn=4 vec=1 bpb=2 hint=0 minb=1 ahead=1 span=0
r k11 bmm f32 3,32,32,30 1024,32,1 960,1,32 0 stage=5 bm=32 bn=32 bk=8 tm=2 tn=4 vec=1 bpb=2 hint=0 minb=1 ahead=1 span=0
r k12 bmm f32 5,16,16,16 256,16,1 256,16,1 0 stage=5 bm=16 bn=16 bk=8 tm=2 tn=1 vec=1 bpb=3 hint=0 minb=1 ahead=1 span=0
r k13 bmm f32 7,64,64,64 4096,64,1 0,64,1 0 stage=5 bm=64 bn=64 bk=16 tm=4 tn=8 vec=1 bpb=2 hint=0 minb=1 ahead=1 span=0
KJIT_EMU_CP_ASYNC=sync r k1s bmm f32 7,64,64,64 4096,64,1 4096,64,1 0 stage=5 bm=64 bn=64 bk=16 tm=4 tn=8 vec=1 bpb=2 hint=0 minb=1 ahead=1 span=0
KJIT_EMU_CP_ASYNC=sync r k3s bmm f32 13,64,64,64 4096,64,1 4096,64,1 0 stage=5 bm=64 bn=64 bk=16 tm=8 tn=4 vec=1 bpb=4 hint=0 minb=1 ahead=3 span=0
KJIT_EMU_CP_ASYNC=sync r k7s mm f32 1,130,64,64 0,64,1 0,64,1 0 stage=5 bm=64 bn=64 bk=16 tm=4 tn=8 vec=1 bpb=2 hint=0 minb=1 ahead=1 span=0
KJIT_EMU_CP_ASYNC=sync r k12s bmm f32 5,16,16,16 256,16,1 256,16,1 0 stage=5 bm=16 bn=16 bk=8 tm=2 tn=1 vec=1 bpb=3 hint=0 minb=1 ahead=1 span=0
# Bulk with every buffer reused (bpb 8: up to 8 items a block, more than ahead + 1 buffers; the phase parity
# flips): 64^3 one to three ahead, 32^3, mm over 16 row tiles (the last of 40 rows), stores through the
# buffers (FLAT5, WSTORE5) before their reuse; each copy order. (Without the barrier before a copy is issued
# into a buffer, these fail: wrong outputs, or waits that never end.)
r k14 bmm f32 17,64,64,64 4096,64,1 4096,64,1 0 stage=5 bm=64 bn=64 bk=16 tm=4 tn=8 vec=1 bpb=8 hint=0 minb=1 ahead=1 span=0
r k15 bmm f32 29,64,64,64 4096,64,1 4096,64,1 0 stage=5 bm=64 bn=64 bk=32 tm=8 tn=4 vec=1 bpb=8 hint=1 minb=1 ahead=2 span=0
r k16 bmm f32 25,64,64,64 4096,64,1 4096,64,1 0 stage=5 bm=64 bn=64 bk=16 tm=4 tn=8 vec=1 bpb=8 hint=0 minb=1 ahead=3 span=0
r k17 bmm f32 21,32,32,32 1024,32,1 1024,32,1 0 stage=5 bm=32 bn=32 bk=8 tm=2 tn=4 vec=1 bpb=8 hint=0 minb=1 ahead=2 span=0
r k18 mm f32 1,1000,64,64 0,64,1 0,64,1 0 stage=5 bm=64 bn=64 bk=16 tm=4 tn=8 vec=1 bpb=8 hint=0 minb=1 ahead=1 span=0
r k19 bmm f32 12,16,16,16 256,16,1 256,16,1 0 stage=5 bm=16 bn=16 bk=8 tm=2 tn=1 vec=1 bpb=8 hint=0 minb=1 ahead=1 span=0
r k20 bmm f32 19,32,32,30 1024,32,1 960,1,32 0 stage=5 bm=32 bn=32 bk=8 tm=2 tn=4 vec=1 bpb=8 hint=0 minb=1 ahead=1 span=0
KJIT_EMU_CP_ASYNC=sync r k14s bmm f32 17,64,64,64 4096,64,1 4096,64,1 0 stage=5 bm=64 bn=64 bk=16 tm=4 tn=8 vec=1 bpb=8 hint=0 minb=1 ahead=1 span=0
KJIT_EMU_CP_ASYNC=sync r k16s bmm f32 25,64,64,64 4096,64,1 4096,64,1 0 stage=5 bm=64 bn=64 bk=16 tm=4 tn=8 vec=1 bpb=8 hint=0 minb=1 ahead=3 span=0
KJIT_EMU_CP_ASYNC=sync r k18s mm f32 1,1000,64,64 0,64,1 0,64,1 0 stage=5 bm=64 bn=64 bk=16 tm=4 tn=8 vec=1 bpb=8 hint=0 minb=1 ahead=1 span=0
KJIT_EMU_CP_ASYNC=sync r k19s bmm f32 12,16,16,16 256,16,1 256,16,1 0 stage=5 bm=16 bn=16 bk=8 tm=2 tn=1 vec=1 bpb=8 hint=0 minb=1 ahead=1 span=0
KJIT_EMU_CP_ASYNC=sync r k20s bmm f32 19,32,32,30 1024,32,1 960,1,32 0 stage=5 bm=32 bn=32 bk=8 tm=2 tn=4 vec=1 bpb=8 hint=0 minb=1 ahead=1 span=0
# Ring (stage 6): groups of a persistent block each taking every bpb-th item, buffers freed through their empty
# barriers: 64^3 with 4 groups and 6 buffers, 1200 matrices over 396 blocks of one group and two buffers (every
# buffer reused: the parities flip), mm over 16 row tiles (the last of 40 rows), bf16 B^T, N = 30 in pairs,
# 16^3 with three buffers ahead; each copy order.
r g1 bmm f32 800,64,64,64 4096,64,1 4096,64,1 0 stage=6 bm=64 bn=64 bk=16 tm=8 tn=8 vec=1 bpb=4 hint=0 minb=1 ahead=2 span=0
r g2 bmm f32 1200,64,64,64 4096,64,1 4096,64,1 0 stage=6 bm=64 bn=64 bk=16 tm=8 tn=8 vec=1 bpb=1 hint=1 minb=1 ahead=1 span=0
r g3 mm f32 1,1000,64,64 0,64,1 0,64,1 0 stage=6 bm=64 bn=64 bk=32 tm=4 tn=8 vec=1 bpb=2 hint=0 minb=1 ahead=1 span=0
r g4 bmm bf16 6,64,64,64 4096,64,1 4096,1,64 0 stage=6 bm=64 bn=64 bk=16 tm=8 tn=4 vec=1 bpb=2 hint=0 minb=1 ahead=1 span=0
r g5 bmm f32 5,32,32,30 1024,32,1 960,1,32 0 stage=6 bm=32 bn=32 bk=8 tm=4 tn=2 vec=1 bpb=2 hint=0 minb=1 ahead=1 span=0
r g6 bmm f32 4700,16,16,16 256,16,1 256,16,1 0 stage=6 bm=16 bn=16 bk=8 tm=2 tn=1 vec=1 bpb=2 hint=0 minb=1 ahead=3 span=0
KJIT_EMU_CP_ASYNC=sync r g1s bmm f32 800,64,64,64 4096,64,1 4096,64,1 0 stage=6 bm=64 bn=64 bk=16 tm=8 tn=8 vec=1 bpb=4 hint=0 minb=1 ahead=2 span=0
KJIT_EMU_CP_ASYNC=sync r g2s bmm f32 1200,64,64,64 4096,64,1 4096,64,1 0 stage=6 bm=64 bn=64 bk=16 tm=8 tn=8 vec=1 bpb=1 hint=1 minb=1 ahead=1 span=0
# The shapes that caught the ring's phase aliasing on the H200 (8x8 matrices in 16x16 tiles: tiny copies land
# out of order; one group and many fills a buffer): copies at issue wait on already-landed phases.
KJIT_EMU_CP_ASYNC=sync r g7s bmm f32 5000,8,8,8 64,8,1 64,8,1 0 stage=6 bm=16 bn=16 bk=8 tm=1 tn=4 vec=1 bpb=1 hint=0 minb=1 ahead=1 span=0
r g8 bmm f32 5000,8,8,8 64,8,1 64,8,1 0 stage=6 bm=16 bn=16 bk=8 tm=2 tn=2 vec=1 bpb=2 hint=1 minb=1 ahead=1 span=0
# Stage 6 with span copies (span 1): odd contiguous tiles (rows not 16-byte aligned), each copied with one bulk copy
# of its enclosing 16-byte pieces, the pieces reaching out of the view element by element (aoff/boff: views that
# start inside a piece), fragments read at the offsets, outputs stored element by element: 63^3 over a wrapping
# ring, f16, bf16 B^T, A^T, a broadcast B, ragged row tiles, aligned rows in a misaligned view, 7^3.
r q1 bmm f32 800,63,63,63 3969,63,1 3969,63,1 0 stage=6 bm=64 bn=64 bk=16 tm=8 tn=8 vec=1 bpb=4 hint=0 minb=1 ahead=2 span=1
r q2 bmm f32 37,63,63,63 3969,63,1 3969,63,1 0 aoff=1 boff=3 stage=6 bm=64 bn=64 bk=16 tm=8 tn=8 vec=1 bpb=4 hint=1 minb=1 ahead=1 span=1
r q3 bmm f16 9,63,63,63 3969,63,1 3969,63,1 0 aoff=1 boff=5 stage=6 bm=64 bn=64 bk=16 tm=8 tn=4 vec=1 bpb=2 hint=0 minb=1 ahead=1 span=1
r q4 bmm bf16 6,33,41,25 1353,41,1 1025,1,41 0 aoff=2 stage=6 bm=64 bn=32 bk=8 tm=4 tn=4 vec=1 bpb=2 hint=0 minb=1 ahead=1 span=1
r q5 bmm f32 5,31,17,29 527,1,31 493,29,1 0 boff=2 stage=6 bm=32 bn=32 bk=8 tm=4 tn=4 vec=1 bpb=2 hint=0 minb=1 ahead=1 span=1
r q6 bmm f32 7,63,63,63 3969,63,1 0,63,1 0 aoff=2 boff=1 stage=6 bm=64 bn=64 bk=16 tm=8 tn=8 vec=1 bpb=2 hint=0 minb=1 ahead=1 span=1
r q7 mm f32 1,100,63,50 0,63,1 0,50,1 0 aoff=1 stage=6 bm=32 bn=64 bk=8 tm=2 tn=8 vec=1 bpb=2 hint=0 minb=1 ahead=1 span=1
r q8 bmm f32 5,64,64,64 4096,64,1 4096,64,1 0 aoff=1 stage=6 bm=64 bn=64 bk=16 tm=8 tn=8 vec=1 bpb=2 hint=0 minb=1 ahead=1 span=1
r q9 bmm f32 3000,7,7,7 49,7,1 49,7,1 0 stage=6 bm=16 bn=16 bk=8 tm=2 tn=2 vec=1 bpb=2 hint=0 minb=1 ahead=1 span=1
KJIT_EMU_CP_ASYNC=sync r q1s bmm f32 800,63,63,63 3969,63,1 3969,63,1 0 stage=6 bm=64 bn=64 bk=16 tm=8 tn=8 vec=1 bpb=4 hint=0 minb=1 ahead=2 span=1
KJIT_EMU_CP_ASYNC=sync r q2s bmm f32 37,63,63,63 3969,63,1 3969,63,1 0 aoff=1 boff=3 stage=6 bm=64 bn=64 bk=16 tm=8 tn=8 vec=1 bpb=4 hint=1 minb=1 ahead=1 span=1
KJIT_EMU_CP_ASYNC=sync r q9s bmm f32 3000,7,7,7 49,7,1 49,7,1 0 stage=6 bm=16 bn=16 bk=8 tm=2 tn=2 vec=1 bpb=2 hint=0 minb=1 ahead=1 span=1
exit $failed
