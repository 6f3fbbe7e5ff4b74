#include "kjit/evaluator/inputs.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kjit/torch/call_key.h"

namespace kjit::eval {

at::Tensor StorageBytes(const at::Tensor& t) {
  const auto nbytes = static_cast<int64_t>(t.storage().nbytes());
  return at::empty({0}, at::TensorOptions().dtype(at::kByte).device(t.device())).set_(t.storage(), 0, {nbytes}, {1});
}

namespace {

// ATen reports failures by throwing; nothing thrown may cross kjit's API.
Status FromTorchError(const c10::Error& e, std::string_view what) {
  std::string message = std::string(what) + ": " + e.what_without_backtrace();
  if (dynamic_cast<const c10::OutOfMemoryError*>(&e) != nullptr) return {StatusCode::kUnavailable, message};
  if (dynamic_cast<const c10::AcceleratorError*>(&e) != nullptr) return {StatusCode::kCudaError, message};
  return Internal(std::move(message));
}

using kjit::torch::ScalarTypeOf;

// The representable range of an integer dtype, clipped to int64 (domains are int64).
std::pair<int64_t, int64_t> IntRange(DType t) {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  switch (t) {
    case DType::kBool: return {0, 1};
    case DType::kUInt8: return {0, 255};
    case DType::kInt8: return {-128, 127};
    case DType::kInt16: return {-32768, 32767};
    case DType::kInt32: return {std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max()};
    case DType::kUInt16: return {0, 65535};
    case DType::kUInt32: return {0, std::numeric_limits<uint32_t>::max()};
    case DType::kUInt64: return {0, kMax};
    default: return {std::numeric_limits<int64_t>::min(), kMax};
  }
}

IntDomain DefaultDomain(DType t) {
  if (t == DType::kBool) return {0, 2};
  if (IntRange(t).first == 0) return {0, 16};
  return {-8, 8};
}

// splitmix64's finalizer: decorrelates seeds that differ in a few low bits.
uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

uint64_t TensorSeed(uint64_t seed, size_t arg, size_t item) {
  return Mix(seed ^ Mix((static_cast<uint64_t>(arg) << 32) | static_cast<uint64_t>(item)));
}

struct Layout {
  int64_t itemsize = 0;
  int64_t extent = 0;  // elements of storage the view needs: offset + span of the view
};

Result<Layout> CheckLayout(const TensorDesc& desc) {
  if (desc.sizes.size() != desc.strides.size()) {
    return InvalidArgument("tensor has " + std::to_string(desc.sizes.size()) + " sizes but " +
                           std::to_string(desc.strides.size()) + " strides");
  }
  if (desc.storage_offset < 0) return InvalidArgument("negative storage offset");
  if (desc.alignment == 0 || desc.alignment > 16 || !std::has_single_bit(desc.alignment)) {
    return InvalidArgument("alignment " + std::to_string(desc.alignment) + " is not 1, 2, 4, 8 or 16");
  }
  Layout layout;
  layout.itemsize = static_cast<int64_t>(DTypeSize(desc.dtype));
  bool empty = false;
  int64_t span = 0;
  for (size_t i = 0; i < desc.sizes.size(); ++i) {
    if (desc.sizes[i] < 0) return InvalidArgument("negative size in dim " + std::to_string(i));
    if (desc.strides[i] < 0) return InvalidArgument("negative stride in dim " + std::to_string(i));
    if (desc.sizes[i] == 0) empty = true;
  }
  if (!empty) {
    for (size_t i = 0; i < desc.sizes.size(); ++i) {
      int64_t term = 0;
      if (__builtin_mul_overflow(desc.sizes[i] - 1, desc.strides[i], &term) ||
          __builtin_add_overflow(span, term, &span)) {
        return InvalidArgument("tensor extent overflows int64");
      }
    }
  }
  int64_t extent = desc.storage_offset;
  int64_t bytes = 0;
  if ((!empty && __builtin_add_overflow(extent, span + 1, &extent)) ||
      __builtin_mul_overflow(extent, layout.itemsize, &bytes) || bytes > (int64_t{1} << 48)) {
    return InvalidArgument("tensor storage is too large");
  }
  layout.extent = extent;
  return layout;
}

// A 1-D tensor of `extent` elements on `device` whose element `offset` lies at
// an address of exactly `alignment` (TensorDesc::AlignmentOf). Memory comes
// from a byte buffer with slack; the returned tensor's storage keeps it alive.
at::Tensor AlignedStorage(c10::ScalarType type, int64_t itemsize, int64_t extent, int64_t offset, uint8_t alignment,
                          c10::Device device) {
  constexpr int64_t kSlack = 32;
  const int64_t nbytes = extent * itemsize;
  at::Tensor buffer = at::empty({nbytes + kSlack}, at::TensorOptions().dtype(at::kByte).device(device));
  const auto base = reinterpret_cast<uintptr_t>(buffer.data_ptr());
  const auto a = static_cast<uintptr_t>(alignment);
  const uintptr_t offset_bytes = static_cast<uintptr_t>(offset * itemsize);
  // The data address is an odd multiple of `a` below 16 (so that it is not also
  // a multiple of 2a), any multiple of 16 for 16: the first such address at or
  // after base + offset_bytes, at most 15 bytes further.
  const uintptr_t step = a < 16 ? 2 * a : 16;
  const uintptr_t residue = a < 16 ? a : 0;
  const uintptr_t lowest = base + offset_bytes;
  const uintptr_t data = lowest + (residue + step - lowest % step) % step;
  const uintptr_t start = data - offset_bytes;
  return at::for_blob(reinterpret_cast<void*>(start), {extent})
      .options(at::TensorOptions().dtype(type).device(device))
      .target_device(device)
      .deleter([buffer](void*) {})
      .make_tensor();
}

// Exact powers of two, built from their bits: transcendental functions may
// round differently on other CPUs, and the values must not depend on the machine.
at::Tensor PowersOfTwo(const at::Tensor& exponents) {
  return ((exponents + 1023) * (int64_t{1} << 52)).view(at::kDouble);
}

// (1 + m) * 2^e with random sign, m uniform in [0, 1) and e uniform in [emin, emax],
// in float64. Exponents below float64's normal range are reached in two exact steps.
at::Tensor RandomMagnitudes(int64_t n, int64_t emin, int64_t emax, at::Generator& gen, c10::Device device) {
  const auto f64 = at::TensorOptions().dtype(at::kDouble).device(device);
  const auto i64 = at::TensorOptions().dtype(at::kLong).device(device);
  at::Tensor sign = at::randint(0, 2, {n}, gen, f64) * 2 - 1;
  at::Tensor exponent = at::randint(emin, emax + 1, {n}, gen, i64);
  at::Tensor mantissa = at::rand({n}, gen, f64) + 1;
  constexpr int kShift = 128;
  if (emin < -1022) return sign * mantissa * PowersOfTwo(exponent + kShift) * std::ldexp(1.0, -kShift);
  return sign * mantissa * PowersOfTwo(exponent);
}

struct FloatRanges {
  int64_t small_min, small_max;  // exponents of kSmall: from the least subnormal up
  int64_t large_min, large_max;  // exponents of kLarge
};

// kLarge: float16 in [2^10, 2^14], so any sum or difference of two elements is
// still finite (float16's max is 65504) while exp() overflows; bfloat16 and
// float32 in [2^13, 2^20] (about 8e3 to 1e6), so squares summed over rows of
// millions stay far below float32's max while naive variance (E[x^2] - E[x]^2)
// loses every digit; float64 in [2^20, 2^40] for the same reason. (Upper ends
// closed: rounding to the dtype may reach them.)
// kSmall: from the least subnormal (a third to two thirds of the values are
// subnormal) to well below 1.
FloatRanges RangesFor(DType t) {
  switch (t) {
    case DType::kFloat16: return {-24, -8, 10, 13};
    case DType::kBFloat16: return {-133, -110, 13, 19};
    case DType::kFloat32: return {-149, -110, 13, 19};
    default: return {-1074, -1000, 20, 39};
  }
}

// Up to four distinct storage positions covered by the view, chosen at random.
std::vector<int64_t> DistinctPositions(const TensorDesc& desc, at::Generator& gen) {
  std::vector<int64_t> sizes, strides;
  int64_t n = 1;
  for (size_t i = 0; i < desc.sizes.size(); ++i) {
    if (desc.sizes[i] == 0) return {};
    if (desc.sizes[i] == 1 || desc.strides[i] == 0) continue;  // adds no distinct elements
    sizes.push_back(desc.sizes[i]);
    strides.push_back(desc.strides[i]);
    // Overlapping strides can make the count overflow; picks then reach only some elements, which is fine.
    if (__builtin_mul_overflow(n, desc.sizes[i], &n)) n = std::numeric_limits<int64_t>::max();
  }
  auto position = [&](int64_t flat) {
    int64_t pos = desc.storage_offset;
    for (size_t i = sizes.size(); i-- > 0;) {
      pos += flat % sizes[i] * strides[i];
      flat /= sizes[i];
    }
    return pos;
  };
  std::vector<int64_t> out;
  auto add = [&](int64_t flat) {
    const int64_t pos = position(flat);
    if (out.size() < 4 && std::find(out.begin(), out.end(), pos) == out.end()) out.push_back(pos);
  };
  at::Tensor picks = at::randint(0, std::numeric_limits<int64_t>::max(), {64}, gen, at::kLong);
  const int64_t* p = picks.data_ptr<int64_t>();
  for (int i = 0; i < 64 && out.size() < 4; ++i) add(p[i] % n);
  // Overlapping strides can map many picks to one place; a scan settles it.
  for (int64_t flat = 0; flat < std::min<int64_t>(n, 4096) && out.size() < 4; ++flat) add(flat);
  return out;
}

// The length of a tensor's rows in storage: its innermost dim (the one of stride 1 if any, else the last).
int64_t InnermostRun(const TensorDesc& desc) {
  int64_t run = desc.sizes.empty() ? 1 : desc.sizes.back();
  for (size_t d = 0; d < desc.sizes.size(); ++d) {
    if (desc.strides[d] == 1 && desc.sizes[d] > 1) run = desc.sizes[d];
  }
  return std::max<int64_t>(run, 1);
}

// What a tensor's pieces share, drawn on its first piece from a CPU generator (read on the host).
struct PerTensorDraws {
  // kSpecial and kNaN: storage positions that must hold each special value of the kind, in its order.
  std::optional<std::vector<int64_t>> sure;
  // kSpecial: the storage run (of InnermostRun elements) that is -Inf throughout, -1 if none.
  int64_t neg_inf_run = -1;
  // kConstant: the value of every element.
  double constant = 0;
};

// The first of runs 1 to 5 that holds none of `sure`, if the storage has at least 6 runs: one run of the
// special set is a whole row of -Inf (a softmax whose every input is -Inf), and the sure positions keep theirs.
int64_t NegInfRun(int64_t extent, int64_t run, const std::vector<int64_t>& sure) {
  if (extent / run < 6) return -1;
  for (int64_t r = 1; r < 6; ++r) {
    if (std::none_of(sure.begin(), sure.end(), [&](int64_t p) { return p / run == r; })) return r;
  }
  return -1;
}

// Normal values with `specials` scattered in (1/32 of the elements each) and at `sure` positions.
at::Tensor ScatterSpecials(int64_t first, int64_t count, const std::vector<double>& specials,
                           const std::vector<int64_t>& sure, at::Generator& gen, const at::TensorOptions& opts) {
  at::Tensor v = at::randn({count}, gen, opts);
  at::Tensor u = at::rand({count}, gen, opts.dtype(at::kFloat));
  constexpr double kEach = 1.0 / 32;
  for (size_t i = 0; i < specials.size(); ++i) {
    v.masked_fill_((u >= static_cast<double>(i) * kEach).logical_and_(u < static_cast<double>(i + 1) * kEach),
                   specials[i]);
  }
  for (size_t i = 0; i < sure.size() && i < specials.size(); ++i) {
    const int64_t at_piece = sure[i] - first;
    if (at_piece >= 0 && at_piece < count) v.narrow(0, at_piece, 1).fill_(specials[i]);
  }
  return v;
}

// Values `first` .. `first + count - 1` of the storage (of `extent` elements), on `device` (drawn from `gen`,
// a generator of that device), in the generation dtype (float64 for float64 tensors, else float32; float64
// for every kSmall/kLarge). `draws` is filled in on the first call from `position_gen`, a CPU generator.
Result<at::Tensor> FloatValues(const TensorDesc& desc, int64_t extent, int64_t first, int64_t count, InputKind kind,
                               at::Generator& gen, at::Generator& position_gen,
                               std::optional<PerTensorDraws>& draws, c10::Device device) {
  const auto gen_type = desc.dtype == DType::kFloat64 ? at::kDouble : at::kFloat;
  const auto opts = at::TensorOptions().dtype(gen_type).device(device);
  const FloatRanges r = RangesFor(desc.dtype);
  const int64_t run = InnermostRun(desc);
  constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
  constexpr double kInf = std::numeric_limits<double>::infinity();
  switch (kind) {
    case InputKind::kNormal: return at::randn({count}, gen, opts);
    case InputKind::kUniform: return at::empty({count}, opts).uniform_(-1, 1, gen);
    case InputKind::kLarge: return RandomMagnitudes(count, r.large_min, r.large_max, gen, device);
    case InputKind::kSmall: return RandomMagnitudes(count, r.small_min, r.small_max, gen, device);
    case InputKind::kTies:
      return at::randn({count}, gen, opts).mul_(4).round_().clamp_(-8, 8).div_(4);
    case InputKind::kStructured: {
      at::Tensor v = at::randn({count}, gen, opts).mul_(4).round_().clamp_(-8, 8).div_(4);
      const at::Tensor position = at::arange(first, first + count, at::TensorOptions().dtype(at::kLong).device(device));
      v.masked_fill_(position.remainder(run).eq(0).logical_and_(v.eq(0)), 1.0);  // an outlier is never 0
      return at::where(position.remainder(run).eq(0), v * 64, v);
    }
    case InputKind::kConstant: {
      if (!draws) {
        draws.emplace();
        const at::Tensor pick = at::randint(0, 32, {1}, position_gen, at::kLong);
        const int64_t k = pick.item<int64_t>();
        draws->constant = (k % 2 == 0 ? 1.0 : -1.0) * (1.0 + static_cast<double>(k / 2) / 4);
      }
      return at::full({count}, draws->constant, opts);
    }
    case InputKind::kSpecial: {
      const std::vector<double> specials = {kNaN, kInf, -kInf, -0.0};
      if (!draws) {
        draws.emplace();
        draws->sure = DistinctPositions(desc, position_gen);
        draws->neg_inf_run = NegInfRun(extent, run, *draws->sure);
      }
      at::Tensor v = ScatterSpecials(first, count, specials, *draws->sure, gen, opts);
      if (draws->neg_inf_run >= 0) {
        const int64_t lo = std::max(draws->neg_inf_run * run, first);
        const int64_t hi = std::min((draws->neg_inf_run + 1) * run, first + count);
        if (lo < hi) v.narrow(0, lo - first, hi - lo).fill_(-kInf);
      }
      return v;
    }
    case InputKind::kNaN: {
      if (!draws) {
        draws.emplace();
        draws->sure = DistinctPositions(desc, position_gen);
      }
      return ScatterSpecials(first, count, {kNaN, -0.0}, *draws->sure, gen, opts);
    }
  }
  return InvalidArgument("unknown input kind " + std::to_string(static_cast<int>(kind)));
}

// The domain integer values of `desc` are drawn from: `domain`, checked against the dtype.
Result<IntDomain> UsableDomain(const TensorDesc& desc, IntDomain domain) {
  // A domain sized by an empty dim is empty; so is the view it is for (an index into nothing).
  if (desc.numel() == 0 && domain.high <= domain.low) domain = DefaultDomain(desc.dtype);
  const auto [lo, hi] = IntRange(desc.dtype);
  // high is exclusive: the largest value drawn is high - 1.
  if (domain.high <= domain.low || domain.low < lo || domain.high - 1 > hi) {
    return InvalidArgument("integer domain [" + std::to_string(domain.low) + ", " + std::to_string(domain.high) +
                           ") is empty or does not fit " + std::string(DTypeName(desc.dtype)));
  }
  return domain;
}

Result<at::Tensor> MakeTensorImpl(const TensorDesc& desc, c10::Device device, InputKind kind, uint64_t seed,
                                  const IntDomain* domain, int64_t piece_elements) {
  KJIT_ASSIGN_OR_RETURN(const Layout layout, CheckLayout(desc));
  KJIT_ASSIGN_OR_RETURN(const c10::ScalarType type, ScalarTypeOf(desc.dtype));
  if (device.is_meta()) {
    // Sizes, strides and dtype without memory or values: enough to run an op
    // on the meta device and learn its outputs' sizes (memory.h).
    return at::empty({layout.extent}, at::TensorOptions().dtype(type).device(device))
        .as_strided(desc.sizes, desc.strides, desc.storage_offset);
  }
  if (!IsFloatingPoint(desc.dtype) && !IsIntegral(desc.dtype)) {
    return InvalidArgument("kjit does not generate values of dtype " + std::string(DTypeName(desc.dtype)));
  }
  IntDomain int_domain;
  if (IsIntegral(desc.dtype)) {
    KJIT_ASSIGN_OR_RETURN(int_domain, UsableDomain(desc, domain ? *domain : DefaultDomain(desc.dtype)));
  }
  // Drawn where the tensor lives: generating tens of millions of values on the
  // host took seconds per input set, most of an evaluation of a large key.
  at::Generator position_gen = at::detail::createCPUGenerator(seed);
  at::Generator gen = position_gen;
  if (device.is_cuda()) {
    gen = at::globalContext().defaultGenerator(device).clone();
    gen.set_current_seed(seed);
  }
  at::Tensor storage =
      AlignedStorage(type, layout.itemsize, layout.extent, desc.storage_offset, desc.alignment, device);
  const at::Tensor storage_bytes = StorageBytes(storage);
  std::optional<PerTensorDraws> draws;
  // A piece at a time: the float64 temporaries of kLarge and kSmall take about
  // kValueBytesPerElement per element, ~100 GB at once for a tensor of 2^31 elements.
  const int64_t piece = std::max<int64_t>(piece_elements, 1);
  for (int64_t first = 0; first < layout.extent; first += piece) {
    const int64_t count = std::min(piece, layout.extent - first);
    at::Tensor values;
    if (IsFloatingPoint(desc.dtype)) {
      KJIT_ASSIGN_OR_RETURN(values, FloatValues(desc, layout.extent, first, count, kind, gen, position_gen, draws, device));
    } else {
      values = at::randint(int_domain.low, int_domain.high, {count}, gen,
                           at::TensorOptions().dtype(at::kLong).device(device));
    }
    values = values.to(type);
    // Copied as bytes: the storage may be less aligned than its element type wants.
    storage_bytes.narrow(0, first * layout.itemsize, count * layout.itemsize).copy_(values.view(at::kByte));
  }
  return storage.as_strided(desc.sizes, desc.strides, desc.storage_offset);
}

Result<IntDomain> ResolveDomain(const OpCall& call, const IntDomain& d) {
  if (d.size_of_arg < 0) return d;
  const auto arg = static_cast<size_t>(d.size_of_arg);
  const TensorDesc* ref = arg < call.args.size() ? std::get_if<TensorDesc>(&call.args[arg]) : nullptr;
  if (ref == nullptr) {
    return InvalidArgument("integer domain refers to argument " + std::to_string(arg) + ", which is not a tensor");
  }
  const auto ndim = static_cast<int64_t>(ref->sizes.size());
  const int64_t dim = d.size_of_dim < 0 ? d.size_of_dim + ndim : d.size_of_dim;
  if (d.size_of_dims < 1 || dim < 0 || dim + d.size_of_dims > ndim) {
    return InvalidArgument("integer domain refers to dims " + std::to_string(d.size_of_dim) + " to " +
                           std::to_string(d.size_of_dim + d.size_of_dims - 1) + " of argument " + std::to_string(arg) +
                           ", which has " + std::to_string(ndim));
  }
  IntDomain out = d;
  out.high = 1;
  for (int64_t i = dim; i < dim + d.size_of_dims; ++i) out.high *= ref->sizes[static_cast<size_t>(i)];
  out.size_of_arg = -1;
  out.size_of_dims = 1;
  return out;
}

c10::TypePtr Unoptional(const c10::TypePtr& t) {
  if (auto opt = t->cast<c10::OptionalType>()) return opt->getElementType();
  return t;
}

bool IsOptionalTensorList(const c10::TypePtr& t) {
  auto list = Unoptional(t)->cast<c10::ListType>();
  return list && list->getElementType()->kind() == c10::TypeKind::OptionalType;
}

Result<c10::IValue> MakeArgument(const c10::Argument& formal, const Arg& arg, size_t index, const OpCall& call,
                                 const OpTraits& traits, c10::Device device, InputKind kind, uint64_t seed) {
  const c10::TypePtr type = Unoptional(formal.real_type());
  const IntDomain* domain = nullptr;
  IntDomain resolved;
  if (auto it = traits.int_domains.find(static_cast<int>(index)); it != traits.int_domains.end()) {
    KJIT_ASSIGN_OR_RETURN(resolved, ResolveDomain(call, it->second));
    domain = &resolved;
  }
  // A Python scalar operand of a chain's op (0.5 * x): the wrapped-number tensor PyTorch's argument parser makes
  // of it (a 0-d CPU tensor of float64, int64 or bool), which TensorIterator treats as a CPU scalar (chain.h).
  if (type->kind() == c10::TypeKind::TensorType &&
      (std::holds_alternative<double>(arg) || std::holds_alternative<int64_t>(arg) || std::holds_alternative<bool>(arg))) {
    at::Tensor t;
    if (const auto* d = std::get_if<double>(&arg)) {
      t = at::scalar_tensor(*d, at::TensorOptions().dtype(at::kDouble));
    } else if (const auto* i = std::get_if<int64_t>(&arg)) {
      t = at::scalar_tensor(*i, at::TensorOptions().dtype(at::kLong));
    } else {
      t = at::scalar_tensor(std::get<bool>(arg), at::TensorOptions().dtype(at::kBool));
    }
    t.unsafeGetTensorImpl()->set_wrapped_number(true);
    return c10::IValue(std::move(t));
  }
  switch (TagOf(arg)) {
    case ArgTag::kNone: return c10::IValue();
    case ArgTag::kBool: return c10::IValue(std::get<bool>(arg));
    case ArgTag::kInt: {
      const int64_t v = std::get<int64_t>(arg);
      // A float the caller wrote as an integer: boxed kernels read floats with toDouble().
      if (type->kind() == c10::TypeKind::FloatType) return c10::IValue(static_cast<double>(v));
      return c10::IValue(v);
    }
    case ArgTag::kDouble: return c10::IValue(std::get<double>(arg));
    case ArgTag::kString: return c10::IValue(std::get<std::string>(arg));
    case ArgTag::kScalarType: {
      KJIT_ASSIGN_OR_RETURN(const c10::ScalarType t, ScalarTypeOf(std::get<DType>(arg)));
      return c10::IValue(t);
    }
    case ArgTag::kIntList: {
      const IntList& v = std::get<IntList>(arg);
      // A bool[N] (a backward's output_mask) is keyed as 0s and 1s.
      if (auto list = type->cast<c10::ListType>(); list && list->getElementType()->kind() == c10::TypeKind::BoolType) {
        c10::List<bool> bools;
        for (int64_t x : v) {
          if (x != 0 && x != 1) return InvalidArgument("argument '" + formal.name() + "' is a bool list, keyed as 0s and 1s");
          bools.push_back(x == 1);
        }
        return c10::IValue(std::move(bools));
      }
      return c10::IValue(c10::List<int64_t>(v));
    }
    case ArgTag::kDoubleList: return c10::IValue(c10::List<double>(std::get<DoubleList>(arg)));
    case ArgTag::kTensor: {
      const TensorDesc& desc = std::get<TensorDesc>(arg);
      KJIT_ASSIGN_OR_RETURN(at::Tensor t, MakeTensorImpl(desc, device, kind, TensorSeed(seed, index, 0), domain,
                                                          kValuePieceElements));
      return c10::IValue(std::move(t));
    }
    case ArgTag::kTensorList: {
      const TensorList& descs = std::get<TensorList>(arg);
      std::vector<at::Tensor> tensors;
      for (size_t i = 0; i < descs.size(); ++i) {
        KJIT_ASSIGN_OR_RETURN(at::Tensor t, MakeTensorImpl(descs[i], device, kind, TensorSeed(seed, index, i), domain,
                                                            kValuePieceElements));
        tensors.push_back(std::move(t));
      }
      if (IsOptionalTensorList(formal.real_type())) {
        c10::List<std::optional<at::Tensor>> list;
        for (auto& t : tensors) list.push_back(std::move(t));
        return c10::IValue(std::move(list));
      }
      return c10::IValue(c10::List<at::Tensor>(std::move(tensors)));
    }
    case ArgTag::kValueRef:
      return InvalidArgument("argument '" + formal.name() +
                             "' refers to an earlier call's output; graphs are run call by call, not from one schema");
  }
  return Internal("unknown argument tag");
}

at::Tensor CloneTensor(const at::Tensor& t) {
  const int64_t itemsize = static_cast<int64_t>(t.element_size());
  int64_t extent = t.storage_offset();
  if (t.numel() > 0) {
    extent += 1;
    for (int64_t d = 0; d < t.dim(); ++d) extent += (t.size(d) - 1) * t.stride(d);
  }
  // An empty tensor's data pointer reads as null: any alignment reproduces it.
  const uint8_t alignment = TensorDesc::AlignmentOf(reinterpret_cast<uintptr_t>(t.data_ptr()));
  at::Tensor storage = AlignedStorage(t.scalar_type(), itemsize, extent, t.storage_offset(), alignment, t.device());
  if (extent > 0) StorageBytes(storage).copy_(StorageBytes(t).narrow(0, 0, extent * itemsize));
  return storage.as_strided(t.sizes(), t.strides(), t.storage_offset());
}

c10::IValue CloneValue(const c10::IValue& v) {
  if (v.isTensor()) {
    const at::Tensor& t = v.toTensor();
    if (t.defined() && t.unsafeGetTensorImpl()->is_wrapped_number()) {
      at::Tensor copy = t.clone();
      copy.unsafeGetTensorImpl()->set_wrapped_number(true);
      return copy;
    }
    return t.defined() ? c10::IValue(CloneTensor(t)) : v;
  }
  if (v.isTensorList()) {
    c10::List<at::Tensor> list;
    for (at::Tensor t : v.toTensorList()) list.push_back(t.defined() ? CloneTensor(t) : t);
    return list;
  }
  if (v.isOptionalTensorList()) {
    c10::List<std::optional<at::Tensor>> list;
    for (std::optional<at::Tensor> t : v.toOptionalTensorList()) {
      list.push_back(t.has_value() && t->defined() ? std::optional<at::Tensor>(CloneTensor(*t)) : t);
    }
    return list;
  }
  // Lists are shared by reference in IValues: a kernel that mutated one would change the original.
  return v.deepcopy();
}

}  // namespace

std::string_view InputKindName(InputKind kind) {
  switch (kind) {
    case InputKind::kNormal: return "normal";
    case InputKind::kUniform: return "uniform";
    case InputKind::kLarge: return "large";
    case InputKind::kSmall: return "small";
    case InputKind::kSpecial: return "special";
    case InputKind::kStructured: return "structured";
    case InputKind::kConstant: return "constant";
    case InputKind::kNaN: return "nan";
    case InputKind::kTies: return "ties";
  }
  return "unknown";
}

Result<at::Tensor> MakeTensor(const TensorDesc& desc, c10::Device device, InputKind kind, uint64_t seed,
                              const IntDomain* domain, int64_t piece_elements) {
  try {
    return MakeTensorImpl(desc, device, kind, seed, domain, piece_elements);
  } catch (const c10::Error& e) {
    return FromTorchError(e, "making a " + std::string(DTypeName(desc.dtype)) + " tensor");
  }
}

namespace {

// Makes argument `index` as `derived` says: `derived.op` called on the other arguments, its output copied into the
// tensor already made for the argument (which keeps the key's layout). Throws c10::Error as the op does.
Status MakeDerivedInput(const c10::FunctionSchema& schema, const DerivedInput& derived, size_t index,
                        std::vector<c10::IValue>* args) {
  if (index >= args->size() || !(*args)[index].isTensor()) {
    return InvalidArgument("a derived input must be a tensor argument of " + schema.name());
  }
  const std::string& name = derived.op;
  const auto handle = c10::Dispatcher::singleton().findSchema({name, ""});
  if (!handle) return NotFound("no operator " + name + " makes the derived input");
  ::torch::jit::Stack stack;
  for (int a : derived.args) {
    if (a < 0 || static_cast<size_t>(a) >= args->size()) return InvalidArgument("a derived input's argument is out of range");
    stack.push_back((*args)[static_cast<size_t>(a)]);
  }
  if (stack.size() != handle->schema().arguments().size()) {
    return InvalidArgument(name + " takes " + std::to_string(handle->schema().arguments().size()) + " arguments, " +
                           std::to_string(stack.size()) + " given");
  }
  handle->callBoxed(stack);
  if (derived.output < 0 || static_cast<size_t>(derived.output) >= stack.size() || !stack[derived.output].isTensor()) {
    return InvalidArgument(name + " has no tensor output " + std::to_string(derived.output));
  }
  const at::Tensor made = stack[static_cast<size_t>(derived.output)].toTensor();
  at::Tensor target = (*args)[index].toTensor();
  if (made.sizes() != target.sizes() || made.scalar_type() != target.scalar_type()) {
    return InvalidArgument(name + "'s output " + std::to_string(derived.output) + " is not the argument's dtype and sizes");
  }
  target.copy_(made);
  return Status::Ok();
}

}  // namespace

Result<std::vector<c10::IValue>> MakeArguments(const c10::FunctionSchema& schema, const OpCall& call,
                                               const OpTraits& traits, c10::Device device, InputKind kind,
                                               uint64_t seed) {
  const auto& formals = schema.arguments();
  if (formals.size() != call.args.size()) {
    return InvalidArgument(schema.name() + " takes " + std::to_string(formals.size()) + " arguments, the call has " +
                           std::to_string(call.args.size()));
  }
  std::vector<c10::IValue> out;
  out.reserve(formals.size());
  try {
    for (size_t i = 0; i < formals.size(); ++i) {
      auto v = MakeArgument(formals[i], call.args[i], i, call, traits, device, kind, seed);
      if (!v.ok()) return v.status().WithContext(schema.name() + " argument " + std::to_string(i));
      out.push_back(std::move(v).value());
    }
    // On the meta device an argument is its layout alone, which the key gives: a derived input's op need not run
    // (max_pool3d_with_indices has no meta kernel; the working set's estimate runs here, memory.h).
    for (const auto& [index, derived] : device.is_meta() ? decltype(traits.derived_inputs){} : traits.derived_inputs) {
      if (Status s = MakeDerivedInput(schema, derived, static_cast<size_t>(index), &out); !s.ok()) {
        return s.WithContext(schema.name() + " argument " + std::to_string(index));
      }
    }
  } catch (const c10::Error& e) {
    return FromTorchError(e, "making the arguments of " + schema.name());
  }
  return out;
}

Result<c10::FunctionSchema> FindSchema(const OpCall& call) {
  auto& dispatcher = c10::Dispatcher::singleton();
  if (auto op = dispatcher.findSchema({call.op, call.overload})) return op->schema();
  std::string overloads;
  for (const c10::OperatorName& name : dispatcher.getAllOpNames()) {
    if (name.name != call.op || !dispatcher.findSchema(name)) continue;
    overloads += overloads.empty() ? "" : ", ";
    overloads += name.overload_name.empty() ? "\"\"" : name.overload_name;
  }
  const std::string full = call.op + (call.overload.empty() ? "" : "." + call.overload);
  if (!overloads.empty()) return NotFound("operator " + full + " has no such overload; it has " + overloads);
  return NotFound("no operator " + full +
                  " is registered (ops outside aten need the library that defines them loaded first)");
}

std::vector<at::Tensor> TensorsIn(const std::vector<c10::IValue>& args) {
  std::vector<at::Tensor> out;
  for (const c10::IValue& v : args) {
    if (v.isTensor()) {
      if (v.toTensor().defined()) out.push_back(v.toTensor());
    } else if (v.isTensorList()) {
      for (at::Tensor t : v.toTensorList()) {
        if (t.defined()) out.push_back(t);
      }
    } else if (v.isOptionalTensorList()) {
      for (std::optional<at::Tensor> t : v.toOptionalTensorList()) {
        if (t.has_value() && t->defined()) out.push_back(*t);
      }
    }
  }
  return out;
}

Result<std::vector<c10::IValue>> CloneArguments(const std::vector<c10::IValue>& args) {
  std::vector<c10::IValue> out;
  out.reserve(args.size());
  try {
    for (const c10::IValue& v : args) out.push_back(CloneValue(v));
  } catch (const c10::Error& e) {
    return FromTorchError(e, "cloning arguments");
  }
  return out;
}

}  // namespace kjit::eval
