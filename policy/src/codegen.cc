#include "src/codegen.h"

namespace kjit::policy::codegen {

const char* CudaType(DType t) {
  switch (t) {
    case DType::kFloat16: return "__half";
    case DType::kBFloat16: return "__nv_bfloat16";
    default: return "float";
  }
}

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

const char* const kIncludes = R"(
#include <cuda_fp16.h>
#include <cuda_bf16.h>
// (Cluster intrinsics are built in for sm_90: no <cooperative_groups.h>, which costs 1.5 s to compile.)
// NVRTC has no <cmath>: the special values by their bits.
#define KJIT_INF __int_as_float(0x7f800000)
#define KJIT_NAN __int_as_float(0x7fc00000)
)";

const char* const kElementAccess = R"(
template <int BYTES> struct RawOf;
template <> struct RawOf<2> { typedef unsigned short T; };
template <> struct RawOf<4> { typedef unsigned int T; };
template <> struct RawOf<8> { typedef uint2 T; };
template <> struct RawOf<16> { typedef uint4 T; };

// Elements travel as their bit patterns (integers) between memory and
// registers, through unions of integers: punning the half and bfloat16
// classes through pointers is undefined behaviour (and the suspect for wrong
// f16 log_softmax results seen with codegen 1).
template <typename T> struct Bits;
template <> struct Bits<float> {
  typedef unsigned int U;
  static __device__ __forceinline__ float to_f(U u) { return __uint_as_float(u); }
  static __device__ __forceinline__ U from_f(float x) { return __float_as_uint(x); }
};
template <> struct Bits<__half> {
  typedef unsigned short U;
  static __device__ __forceinline__ float to_f(U u) { return __half2float(__ushort_as_half(u)); }
  static __device__ __forceinline__ U from_f(float x) { return __half_as_ushort(__float2half_rn(x)); }
};
template <> struct Bits<__nv_bfloat16> {
  typedef unsigned short U;
  static __device__ __forceinline__ float to_f(U u) { return __bfloat162float(__ushort_as_bfloat16(u)); }
  static __device__ __forceinline__ U from_f(float x) { return __bfloat16_as_ushort(__float2bfloat16_rn(x)); }
};

// VEC consecutive elements at p (aligned to their total size), as floats.
template <bool STREAM>
__device__ __forceinline__ void load_vec(const in_t* p, float (&f)[VEC]) {
  typedef typename RawOf<sizeof(in_t) * VEC>::T Raw;
  union { Raw raw; typename Bits<in_t>::U u[VEC]; } v;
  if (STREAM) v.raw = __ldcs(reinterpret_cast<const Raw*>(p));
  else v.raw = *reinterpret_cast<const Raw*>(p);
#pragma unroll
  for (int i = 0; i < VEC; ++i) f[i] = Bits<in_t>::to_f(v.u[i]);
}
__device__ __forceinline__ void store_vec(out_t* p, const float (&f)[VEC]) {
  typedef typename RawOf<sizeof(out_t) * VEC>::T Raw;
  union { Raw raw; typename Bits<out_t>::U u[VEC]; } v;
#pragma unroll
  for (int i = 0; i < VEC; ++i) v.u[i] = Bits<out_t>::from_f(f[i]);
  if (HINT) __stcs(reinterpret_cast<Raw*>(p), v.raw);
  else *reinterpret_cast<Raw*>(p) = v.raw;
}
)";

}  // namespace kjit::policy::codegen
