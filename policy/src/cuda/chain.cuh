// The CUDA every chain family (elementwise_chain, row_chain) writes after policy/src/cuda/common.cuh's
// kElementAccess (its Bits and RawOf are what these use), embedded by chain_ops.cc (kjit_embed_cuda, at build
// time) and exposed as chain::kChainAccess (src/chain_ops.h). Needs VEC and HINT defined before it. Lines
// starting "//@" document a section and are not embedded.
//@section kChainAccess
//@ Loads and stores of VEC consecutive elements of any float type as floats (aligned to their total size),
//@ the rounding of an intermediate to its dtype, and eager's arithmetic with no contraction across ops.

template <typename T>
__device__ __forceinline__ void load_any(const T* p, float (&f)[VEC]) {
  typedef typename RawOf<sizeof(T) * VEC>::T Raw;
  union { Raw raw; typename Bits<T>::U u[VEC]; } v;
  v.raw = HINT ? __ldcs(reinterpret_cast<const Raw*>(p)) : __ldg(reinterpret_cast<const Raw*>(p));
#pragma unroll
  for (int i = 0; i < VEC; ++i) f[i] = Bits<T>::to_f(v.u[i]);
}
template <typename T>
__device__ __forceinline__ void store_any(T* p, const float (&f)[VEC]) {
  typedef typename RawOf<sizeof(T) * VEC>::T Raw;
  union { Raw raw; typename Bits<T>::U u[VEC]; } v;
#pragma unroll
  for (int i = 0; i < VEC; ++i) v.u[i] = Bits<T>::from_f(f[i]);
  if (HINT) __stcs(reinterpret_cast<Raw*>(p), v.raw);
  else *reinterpret_cast<Raw*>(p) = v.raw;
}
template <typename T>
__device__ __forceinline__ float load_one(const T* p) {
  return Bits<T>::to_f(*reinterpret_cast<const typename Bits<T>::U*>(p));
}
template <typename T>
__device__ __forceinline__ void store_one(T* p, float f) {
  *reinterpret_cast<typename Bits<T>::U*>(p) = Bits<T>::from_f(f);
}
// An intermediate rounded to its dtype, as eager stores it between two ops (float32: nothing to do).
template <typename T>
__device__ __forceinline__ float as_dtype(float x) { return Bits<T>::to_f(Bits<T>::from_f(x)); }
template <>
__device__ __forceinline__ float as_dtype<float>(float x) { return x; }
// Every op of the chain is its own kernel in eager, so no multiply may fuse with a later add: the _rn
// intrinsics are never contracted. add/sub with alpha != 1 are one op in eager (a + alpha * b, which nvcc
// contracts into one fused multiply-add): fmaf there.
__device__ __forceinline__ float op_mul(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ float op_add(float a, float b) { return __fadd_rn(a, b); }
__device__ __forceinline__ float op_sub(float a, float b) { return __fsub_rn(a, b); }
__device__ __forceinline__ float op_div(float a, float b) { return __fdiv_rn(a, b); }
__device__ __forceinline__ float op_axpy(float a, float alpha, float b) { return __fmaf_rn(alpha, b, a); }
__device__ __forceinline__ float op_sigmoid(float a) { return __fdiv_rn(1.0f, __fadd_rn(1.0f, expf(-a))); }
