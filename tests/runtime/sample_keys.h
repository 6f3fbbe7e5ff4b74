// Keys shared by the OpKey tests and the key-hash tool, so that one fixed key
// is hashed in two processes.
#pragma once

#include <limits>

#include "kjit/runtime/op_key.h"

namespace kjit::testing {

// aten::_softmax on 64 x 1M floats over the last dim, sm_90.
inline OpKey SoftmaxKey() {
  return OpKey::Single("aten::_softmax", "", {TensorDesc::Contiguous(DType::kFloat32, {64, 1048576}), int64_t{-1}, false},
                       90);
}

// Every argument kind at least once, with awkward values.
inline OpKey KitchenSinkKey() {
  TensorDesc strided;
  strided.dtype = DType::kBFloat16;
  strided.sizes = {8, 3, 5};
  strided.strides = {1, 40, 8};
  strided.storage_offset = 3;
  strided.alignment = 2;
  OpKey k;
  k.arch = 90;
  k.numerics = kAllowTF32Matmul | kDeterministic;
  k.calls.push_back(OpCall{"aten::pow", "Tensor_Scalar", {strided, 2.0}});
  k.calls.push_back(OpCall{"aten::mean",
                           "dim",
                           {ValueRef{0, 0}, IntList{-1, 1, std::numeric_limits<int64_t>::min()}, true, NoneArg{},
                            DType::kFloat32}});
  k.calls.push_back(OpCall{"aten::custom",
                           "",
                           {std::string("tanh"), -0.0, std::numeric_limits<double>::infinity(),
                            DoubleList{1.5, -0.0, std::numeric_limits<double>::quiet_NaN()},
                            TensorList{TensorDesc::Contiguous(DType::kFloat16, {0, 7}),
                                       TensorDesc::Contiguous(DType::kInt64, {})},
                            ValueRef{1, 0}, std::numeric_limits<int64_t>::max()}});
  return k;
}

}  // namespace kjit::testing
