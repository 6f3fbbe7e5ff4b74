#include "src/codegen.h"

#include <algorithm>
#include <string>

namespace kjit::policy::codegen {

// kIncludes, kNoClusters, kElementAccess, kRawAccess, kReductions, kBulkCopy, kHeldValues (codegen.h says
// what each is).
#include "kjit/cuda/common.cuh.inc"

const char* CudaType(DType t) {
  switch (t) {
    case DType::kFloat16: return "__half";
    case DType::kBFloat16: return "__nv_bfloat16";
    default: return "float";
  }
}

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
int64_t Align16(int64_t bytes) { return (bytes + 15) / 16 * 16; }

Status DeclineEmpty() { return InvalidArgument("empty inputs are left to PyTorch"); }

Status CheckThreadsAndVector(int64_t threads, int64_t vec, int64_t element_bytes, const DeviceFacts& device) {
  if (threads > device.max_threads_per_block) return InvalidArgument("too many threads");
  if (vec * element_bytes > 16) return InvalidArgument("vector wider than 16 bytes");
  return Status::Ok();
}

Status CheckVectorAligned(int64_t vec, int64_t element_bytes, int64_t alignment, const char* aligned_what) {
  if (vec * element_bytes > alignment) return InvalidArgument(std::string(aligned_what) + " not aligned for the vector");
  return Status::Ok();
}

Point WidestValid(const Family& family, const Problem& problem, const DeviceFacts& device, Point point,
                  std::initializer_list<int64_t> threads) {
  for (int64_t vec : {8, 4, 2, 1}) {
    point["vec"] = vec;
    if (threads.size() == 0) {
      if (family.Check(problem, point, device).ok()) return point;
      continue;
    }
    for (int64_t t : threads) {
      point["threads"] = t;
      if (family.Check(problem, point, device).ok()) return point;
    }
  }
  return point;
}

std::string SourceHead(const Family& family, const Problem& problem, const Point& shown, const DeviceFacts& device,
                       const char* comment) {
  std::string head = "// kjit " + std::string(family.name()) + " family, codegen " +
                     std::to_string(family.codegen_version()) + ": " + problem.description + "\n// point " +
                     PointToString(shown) + "\n";
  if (comment) head += std::string("// ") + comment + "\n";
  return head + kIncludes + (device.arch < 90 ? kNoClusters : "");
}

void FinishCandidate(const Family& family, const Point& point, Candidate& candidate) {
  candidate.options = {"--std=c++17", "--diag-suppress=177"};
  candidate.design = ToDesignPoint(std::string(family.name()), point, "");
}

bool IsChannelsLast(const TensorDesc& t) {
  const size_t nd = t.sizes.size();
  if ((nd != 4 && nd != 5) || t.strides.size() != nd) return false;
  std::vector<size_t> order = {1};
  for (size_t d = nd - 1; d >= 2; --d) order.push_back(d);
  order.push_back(0);
  int64_t expected = 1;
  for (size_t d : order) {
    if (t.sizes[d] == 1) continue;
    if (t.strides[d] != expected) return false;
    expected *= t.sizes[d];
  }
  return true;
}

bool StridesLikeChannelsLast(const TensorDesc& t) {
  if (t.sizes.size() != 4 || t.strides.size() != 4 || t.strides[1] == 0) return false;
  int64_t min = 0;
  for (size_t d : {size_t{1}, size_t{3}, size_t{2}, size_t{0}}) {
    if (t.sizes[d] == 0 || t.strides[d] < min) return false;
    if (d == 0 && min == t.strides[1]) return false;
    min = t.strides[d];
    if (t.sizes[d] > 1) min *= t.sizes[d];
  }
  return true;
}

bool DenseDepthwiseWeight(const TensorDesc& w) {
  const size_t nd = w.sizes.size();
  if ((nd != 3 && nd != 4) || w.strides.size() != nd) return false;
  int64_t expected = 1;  // the product of the sizes after d
  for (size_t d = nd; d-- > 0;) {
    if (w.sizes[d] != 1 && w.strides[d] != expected) return false;
    expected *= w.sizes[d];
  }
  return true;
}

Status CheckConvolutionWindow(int64_t sh, int64_t sw, int64_t ph, int64_t pw, int64_t dh, int64_t dw) {
  if (sh <= 0 || sw <= 0 || dh <= 0 || dw <= 0) return InvalidArgument("stride and dilation must be positive");
  if (ph < 0 || pw < 0) return InvalidArgument("negative padding: PyTorch rejects it");
  for (int64_t v : {sh, sw, ph, pw, dh, dw}) {
    if (v > (1 << 16)) return InvalidArgument("stride, padding or dilation too large");
  }
  return Status::Ok();
}

int64_t PoolOutputSize(int64_t in, int64_t k, int64_t pad, int64_t stride, int64_t dilation, bool ceil_mode) {
  const int64_t num = in + 2 * pad - dilation * (k - 1) - 1 + (ceil_mode ? stride - 1 : 0);
  int64_t q = num / stride;
  if ((num % stride != 0) && ((num < 0) != (stride < 0))) --q;
  int64_t out = q + 1;
  if (ceil_mode && (out - 1) * stride >= in + pad) --out;
  return out;
}

Result<std::vector<int64_t>> ExpandIntList(const Arg& arg, size_t n, const char* what,
                                           const std::vector<int64_t>* empty_as) {
  const auto* list = std::get_if<IntList>(&arg);
  if (!list) return InvalidArgument(std::string(what) + " is not an int list");
  if (list->empty() && empty_as) return *empty_as;
  if (list->size() == 1) return std::vector<int64_t>(n, (*list)[0]);
  if (list->size() != n) return InvalidArgument(std::string(what) + " has " + std::to_string(list->size()) + " values");
  return *list;
}

Result<AroundDim> SplitAroundDim(const std::vector<int64_t>& sizes, int64_t dim) {
  const int64_t nd = std::max<int64_t>(static_cast<int64_t>(sizes.size()), 1);
  const int64_t d = dim < 0 ? dim + nd : dim;
  if (d < 0 || d >= nd) return InvalidArgument("dim out of range");
  AroundDim a;
  for (int64_t i = 0; i < static_cast<int64_t>(sizes.size()); ++i) {
    if (i < d) a.outer *= sizes[i];
    if (i == d) a.len = sizes[i];
    if (i > d) a.inner *= sizes[i];
  }
  if (a.outer * a.len * a.inner > (int64_t{1} << 40)) return InvalidArgument("too large");
  return a;
}

int HeldPartials(int64_t held_floats, int64_t threads) {
  // 65536 registers per SM shared by the block, at most 255 per thread; the held values, their
  // addresses, the statistics and the partials must fit without spilling.
  const int64_t cap = std::min<int64_t>(255, 65536 / threads);
  return held_floats + 16 <= cap ? 4 : 1;
}

}  // namespace kjit::policy::codegen
