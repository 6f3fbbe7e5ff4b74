// The steps every op family's code generator shares, and the CUDA pieces it writes (their text is in
// src/cuda/common.cuh, embedded at build time by kjit_embed_cuda). Internal to kjit_policy.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "kjit/policy/design_space.h"
#include "kjit/runtime/op_key.h"
#include "kjit/runtime/status.h"

namespace kjit::policy::codegen {

// The steps every family's Match, Check, ExpertDefault and Generate share.

// Match: an empty input is PyTorch's (no launch, no output to write); the family declines it with this.
Status DeclineEmpty();

// Check: a block of `threads` within the device's limit and a vector of `vec` elements of `element_bytes`
// within 16 bytes ...
Status CheckThreadsAndVector(int64_t threads, int64_t vec, int64_t element_bytes, const DeviceFacts& device);
// ... and within the least alignment of what it loads (`aligned_what` names those tensors in the reason).
Status CheckVectorAligned(int64_t vec, int64_t element_bytes, int64_t alignment, const char* aligned_what = "input");

// ExpertDefault: `point` with the widest valid vector (8, 4, 2, 1 elements), for each the thread counts in
// `threads` in order (none: the point's own), the first valid; the last tried when none is valid.
Point WidestValid(const Family& family, const Problem& problem, const DeviceFacts& device, Point point,
                  std::initializer_list<int64_t> threads = {});

// Generate: the head of every translation unit (which family, codegen version and problem; the point as
// `shown`; kIncludes; before sm_90, kNoClusters) and the tail of every candidate (NVRTC options, the design
// point). The options are C++17 and diagnostic 177 off (a constant or helper a strategy does not use).
// `comment`, when given, is one more comment line after the point's.
std::string SourceHead(const Family& family, const Problem& problem, const Point& shown, const DeviceFacts& device,
                       const char* comment = nullptr);
void FinishCandidate(const Family& family, const Point& point, Candidate& candidate);

// The CUDA type of a float dtype: "float", "__half" or "__nv_bfloat16".
const char* CudaType(DType t);

int64_t CeilDiv(int64_t a, int64_t b);
// `bytes` rounded up to a multiple of 16: where each part of a kernel's workspace starts.
int64_t Align16(int64_t bytes);

// Key parsing the windowed families (pool, depthwise_conv) share.
// As torch's is_contiguous(ChannelsLast / ChannelsLast3d): a 4-D or 5-D tensor dense in the order
// C, W, H, (D), N; size-1 dims' strides do not matter.
bool IsChannelsLast(const TensorDesc& t);
// As c10's is_channels_last_strides_2d (what suggest_memory_format reads for a 4-D tensor, and so what picks
// cuDNN for a depthwise convolution): strides non-decreasing in the order C, W, H, N, with its rules for size-1
// dims (an N111 tensor and a permuted 1C1W are not channels_last). depthwise_conv and its backward.
bool StridesLikeChannelsLast(const TensorDesc& t);
// A depthwise weight [C, 1, KH, KW] (or a 1-D convolution's [C, 1, K]) whose elements lie at c*KH*KW + i*KW + j:
// contiguous, or channels_last (the same bytes: its channel dim has size 1), or any strides of size-1 dims.
bool DenseDepthwiseWeight(const TensorDesc& w);
// An int-list argument (kernel_size, stride, padding, dilation) expanded to `n` values: one value is
// broadcast; `empty_as` (a pooling stride) stands in for an empty list; otherwise kInvalidArgument.
Result<std::vector<int64_t>> ExpandIntList(const Arg& arg, size_t n, const char* what,
                                           const std::vector<int64_t>* empty_as);
// A 2-D convolution's stride, padding and dilation as the depthwise families take them: stride and dilation
// positive, padding not negative (PyTorch rejects the rest), each at most 2^16 (larger ones are declined).
Status CheckConvolutionWindow(int64_t sh, int64_t sw, int64_t ph, int64_t pw, int64_t dh, int64_t dw);
// A pooled dim's size: PyTorch's pooling_output_shape_pad_lr with equal padding (div_rtn: floor division), what
// the pooling ops and their backward (pool, pool_backward) compute.
int64_t PoolOutputSize(int64_t in, int64_t k, int64_t pad, int64_t stride, int64_t dilation, bool ceil_mode);

// A contiguous tensor of `sizes` seen as [outer, len, inner] around `dim` (negative counts from the end; a 0-d
// tensor is one element along dim 0 or -1), for the families that reduce or scan along one dim (softmax, its
// backward, scan). kInvalidArgument when dim is out of range or the tensor holds more than 2^40 elements.
struct AroundDim {
  int64_t outer = 1, len = 1, inner = 1;
};
Result<AroundDim> SplitAroundDim(const std::vector<int64_t>& sizes, int64_t dim);

// K for held_sum<N, K> (kReductions) in a kernel of `threads` threads holding `held_floats`
// values each: 4 partial sums, or 1 where the held values come close to the register cap.
int HeldPartials(int64_t held_floats, int64_t threads);

// What every generated translation unit starts with: the half and bfloat16
// headers and KJIT_INF / KJIT_NAN (NVRTC has no <cmath>).
extern const char* const kIncludes;

// Element access between memory and float registers: load_vec<STREAM>(const
// in_t*, float (&)[VEC]) and store_vec(out_t*, const float (&)[VEC]), VEC
// elements aligned to their total size, streaming cache hints when HINT.
// Needs in_t, out_t, VEC and HINT defined before it.
extern const char* const kElementAccess;

// Before sm_90 there are no thread block clusters and no cluster intrinsics, but kernels name them in code a
// cluster of one never runs (families admit only clusters of one there): a block as its own cluster of one.
extern const char* const kNoClusters;

// Elements as their raw bits, for kernels that move values without converting them or convert them
// where they choose: raw_t (Bits<in_t>::U), load_raw<CV, STREAM>(const in_t*, raw_t (&)[CV]) (__ldg,
// or evict-first __ldcs when STREAM) and store_raw<CV>(out_t*, const raw_t (&)[CV]) (streaming when
// HINT), CV elements aligned to their total size. Needs kElementAccess (Bits, RawOf) before it.
extern const char* const kRawAccess;

// Float reductions every normalization family uses: warp_sum(v) and
// block_sum(v, red) (every thread gets the sum; red holds 32 floats), and
// Welford statistics: struct W {s, m2, n} (sum, squared deviations, count; the
// mean is w_mean: s / n), w_merge (Chan et al.), warp_w and block_w (every
// thread gets lane 0's merge; red holds 3 * 32 floats); a thread's running
// state WRun with w_add, w_add_batch and w_state; and held_sum<N, K>(term),
// a sum of N held values in K independent partials. Needs THREADS (threads
// per block) defined before it; the source is compiled as C++17.
extern const char* const kReductions;

// struct InRegisters {v, t}: the float v[ITEMS][VEC] a thread of a register strategy holds of a
// row or channel of LEN elements (v[i] at (i * STRIDE + t) * VEC, zeros past the end), with
// local_sum, local_sq, local_dev(m) (in PARTIALS partials) and local_w (its own two-pass W).
// Shared by layer_norm and batch_norm. Needs kReductions and ITEMS, STRIDE, VEC, LEN, PARTIALS.
extern const char* const kHeldValues;

// Hopper's bulk copies (sm_90 and newer; on the host, the CPU emulation's emu_* of
// tests/policy/emu/emu.h): kjit_smem_addr(p), kjit_mbar_init(bar, count) (an mbarrier of COUNT
// arrivals a phase), kjit_fence_init() (after the inits, before the first copy), kjit_fence_async(),
// kjit_mbar_expect(bar, bytes) (the caller's arrival, BYTES more to land this phase),
// kjit_bulk_copy(dst, src, bytes, bar) (BYTES a multiple of 16, both addresses 16-byte aligned) and
// kjit_mbar_wait(bar, parity). Used by matmul's bulk stage and softmax's staged cluster rows.
extern const char* const kBulkCopy;

}  // namespace kjit::policy::codegen
