// The elementwise_chain family: chains of elementwise ops (fusion keys, op_key.h and evaluator/chain.h) run as
// one kernel, with eager PyTorch 2.11's values. A chain key's calls, as the CUDA key sees a Python expression
// such as minGPT's tanh-GELU (shim/FUSION.md): each call one of
//   aten::mul.Tensor(a, b), aten::add.Tensor(a, b, alpha), aten::sub.Tensor(a, b, alpha), aten::div.Tensor(a, b)
//   aten::pow.Tensor_Scalar(a, exponent) for exponents 2, 3, 0.5, -0.5 and -1 (PyTorch's own specialisations:
//     b * b, b * b * b, sqrt, rsqrt and reciprocal; other exponents are declined)
//   aten::tanh, exp, neg, abs, sqrt, rsqrt, reciprocal, sigmoid (one tensor each)
//   aten::_to_copy(a, dtype, None, None, None, False, None): a cast between float32, float16 and bfloat16
// whose tensor operands are the chain's external tensors (float32, float16 or bfloat16, all of one shape,
// contiguous), earlier calls' outputs (ValueRef), or Python scalars (a Double or Int: wrapped numbers); then an
// optional kjit::live(IntList) naming the calls whose outputs are written (else the last call's).
//
// Semantics followed (BinaryOps, UnaryOps, PowKernel.cu, opmath_type): each op computes in float (its opmath
// type) from its operands' values and rounds its result to its dtype: the operands' promoted dtype (equal
// dtypes: that one; float16 with bfloat16, or anything with float32: float32), a wrapped number taking no part
// beyond its value, which is converted to float; a cast rounds to its dtype. add and sub compute a + alpha * b
// (alpha -alpha for sub) as one fused multiply-add where alpha != 1, as nvcc compiles PyTorch's functor; no other
// multiply and add are contracted, since eager runs them as separate kernels. A division by a wrapped number
// multiplies by its float reciprocal, as PyTorch's div_true kernel does. pow's specialisations round each
// product to the dtype (b * b * b in float16 rounds twice). Results are compared with assert_close's tolerances
// (transcendental functions are the CUDA math library's in both, so most results match bit for bit).
//
// Kernel parameters (kernel ABI v2): the external tensors in the order their arguments come in the key (call
// order, then argument order), then the live outputs in order. One kernel: a thread per `vec` consecutive
// elements, loaded as vectors (where every tensor's alignment allows), the chain computed in registers,
// every live output stored; the last thread's elements past a multiple of `vec` one at a time.
#pragma once

#include "kjit/policy/design_space.h"

namespace kjit::policy {

const Family* ElementwiseChainFamily();

}  // namespace kjit::policy
