#include "group_norm/group_norm.h"

#include "src/codegen.h"

#include <algorithm>
#include <cstring>
#include <sstream>

namespace kjit::policy {
namespace {

using codegen::CeilDiv;
using codegen::CudaType;

// What PyTorch 2.11's CUDA kernel computes (aten/src/ATen/native/cuda/group_norm_kernel.cu; the
// template signatures below are read from the 2.11 libtorch_cuda.so's symbols, since newer
// sources differ):
//   native_group_norm(Tensor input, Tensor? weight, Tensor? bias, SymInt N, SymInt C, SymInt HxW,
//                     int group, float eps) -> (Tensor out, Tensor mean, Tensor rstd)
// - eps is cast to the input dtype T first (GroupNormKernelImpl passes static_cast<T>(eps)), then
//   to float.
// - RowwiseMomentsCUDAKernel<T>: per slice, Welford in float; var = M2 / count (biased);
//   rstd = rsqrtf(var + eps); mean and rstd are stored as T ([N, G], the input's dtype).
// - y is computed from those T-rounded mean and rstd, read back as float:
//     HxW == 1 (GroupNorm1dForward, lambdas over T x, T mean, T rstd, T gamma, T beta):
//       ((x - mean) * rstd) * gamma + beta, the gamma / beta terms present as given;
//     no weight and no bias: (x - mean) * rstd;
//     otherwise (ComputeFusedParamsCUDAKernel<T>, then a lambda over T x, float a, float b):
//       a = rstd * gamma (or rstd), b = -a * mean + beta (or + 0), y = a * x + b,
//   in float (nvcc contracts a * b + c to fma; the kernels here spell the fma out), rounded once
//   to T.
// For float16 and bfloat16 the rounding of rstd to T alone moves y by up to half an ulp of T,
// about the whole of assert_close's tolerance: the kernels here round mean, rstd and eps exactly
// as PyTorch does and use its formulas.
//
// The ABI (daemon/worker_protocol.h): (x, weight|null, bias|null, y, mean, rstd). Weight and bias
// presence is part of the key: the source is specialised on it and never reads a null pointer.

enum Strategy : int64_t {
  kWarp = 0,
  kRegs = 1,
  kSmem = 2,
  kOnline = 3,
  kCluster = 4,
  kClusterSmem = 5,
};

enum Stats : int64_t {
  kTwoPass = 0,
  kWelford = 1,
};

constexpr int64_t kMaxRegisterFloats = 64;   // per thread, for the slice-in-registers strategies
constexpr int64_t kReductionScratch = 1024;  // shared bytes kept for reductions and the cluster exchange
// Slices at or past this many elements are left to PyTorch: in-slice offsets are 32-bit ints
// (with room for a sweep past the end), and float counts stay exact enough.
constexpr int64_t kMaxSlice = int64_t{1} << 30;

struct GroupNormProblem : Problem {
  DType dtype = DType::kFloat32;
  int64_t n = 1, channels = 1, hxw = 1, groups = 1;
  bool has_weight = false, has_bias = false;
  double eps = 0;
  int alignment = 16;  // of the input's data pointer (weight and bias are read one element at a time)
  int64_t slices() const { return n * groups; }
  int64_t channels_per_group() const { return channels / groups; }
  int64_t len() const { return channels_per_group() * hxw; }
};

// The kernels' CUDA, from group_norm.cuh (kjit_embed_cuda): kPrelude, kHeldKernel, kStreamedKernel.
#include "kjit/cuda/group_norm.cuh.inc"
// Staged strategies: how many elements of a block's part live in shared memory. All of the part
// if it fits, else as many whole sweeps (THREADS * VEC) as fit; the rest is read again.
int64_t StagedElements(int64_t part, int64_t threads, int64_t vec, const DeviceFacts& dev) {
  const int64_t cap = (dev.max_shared_bytes_per_block - kReductionScratch) / 4;
  if (part <= cap) return part;
  return cap / (threads * vec) * threads * vec;
}

class GroupNorm final : public Family {
 public:
  std::string_view name() const override { return "group_norm"; }
  // 2: Welford states carry the sum (the mean is s / n), held values' statistics
  // in up to four partial sums (codegen.cc), no division per element.
  int codegen_version() const override { return 2; }
  std::vector<std::string> ops() const override { return {"aten::native_group_norm"}; }

  OpTraits traits(std::string_view) const override {
    OpTraits t;
    // As for layer_norm: PyTorch's mean of a slice holding +-Inf (and no NaN) is Inf or NaN
    // depending on where the Inf falls in its Welford merge order (inf - inf when a finite value
    // follows it in one thread's sequence), which no other reduction order reproduces; so special
    // values are not fed to this op. y and rstd are NaN for such slices either way.
    t.special_values = false;
    // Default assert_close tolerances per dtype: y is rounded once from float; mean and rstd are
    // float reductions in a different order, rounded once to the input dtype.
    return t;
  }

  std::vector<OpKey> SampleKeys() const override {
    auto gn = [](DType dt, std::vector<int64_t> sizes, int64_t groups, bool weight, bool bias) {
      int64_t hxw = 1;
      for (size_t i = 2; i < sizes.size(); ++i) hxw *= sizes[i];
      const int64_t n = sizes[0], c = sizes[1];
      std::vector<Arg> args;
      args.push_back(TensorDesc::Contiguous(dt, sizes));
      args.push_back(weight ? Arg(TensorDesc::Contiguous(dt, {c})) : Arg(NoneArg{}));
      args.push_back(bias ? Arg(TensorDesc::Contiguous(dt, {c})) : Arg(NoneArg{}));
      args.push_back(n);
      args.push_back(c);
      args.push_back(hxw);
      args.push_back(groups);
      args.push_back(1e-5);
      return OpKey::Single("aten::native_group_norm", "", std::move(args), 90);
    };
    // Chosen so that, together, they reach every strategy, vector width, dtype and affine
    // combination, while the sum of their valid points stays small enough for CI to compile
    // every one (mid-size slices admit most of the space; these avoid them where possible).
    return {
        // The headroom case: 256 slices of 2 MB, split across clusters (staged in part).
        gn(DType::kFloat32, {32, 64, 256, 256}, 8, true, true),
        // C / G == 1 (instance-norm-like), 256-element slices: the warp strategy, 16-byte vectors.
        gn(DType::kFloat16, {16, 64, 16, 16}, 64, true, true),
        // 3-D [N, C, L], G == 1 (layer-norm-like), no affine: every strategy, 16-byte staging.
        gn(DType::kBFloat16, {4, 8, 96}, 1, false, false),
        // Odd sizes: HxW = 17 * 19 refuses vectors; weight without bias.
        gn(DType::kFloat32, {3, 30, 17, 19}, 5, true, false),
        // 3-D, HxW = 50 (vectors of 2 at most), bias without weight.
        gn(DType::kFloat16, {8, 48, 50}, 12, false, true),
        // Longer slices, few of them: staged in shared memory, by a block or a cluster.
        gn(DType::kBFloat16, {2, 8, 31, 31}, 2, true, true),
        // HxW == 1 ([N, C] input): PyTorch's 1-d formulas.
        gn(DType::kFloat32, {512, 256}, 16, true, true),
    };
  }

  Result<std::unique_ptr<Problem>> Match(const OpKey& key) const override {
    if (key.calls.size() != 1) return InvalidArgument("a single call is needed");
    const OpCall& c = key.calls[0];
    if (c.op != "aten::native_group_norm") return InvalidArgument("not a group_norm");
    if (!c.overload.empty() || c.args.size() != 8) return InvalidArgument("unexpected overload or arguments");
    const auto* x = std::get_if<TensorDesc>(&c.args[0]);
    const auto* n = std::get_if<int64_t>(&c.args[3]);
    const auto* channels = std::get_if<int64_t>(&c.args[4]);
    const auto* hxw = std::get_if<int64_t>(&c.args[5]);
    const auto* groups = std::get_if<int64_t>(&c.args[6]);
    const auto* eps = std::get_if<double>(&c.args[7]);
    if (!x || !n || !channels || !hxw || !groups || !eps) {
      return InvalidArgument("arguments are not (Tensor, Tensor?, Tensor?, int, int, int, int, float)");
    }
    if (x->dtype != DType::kFloat32 && x->dtype != DType::kFloat16 && x->dtype != DType::kBFloat16) {
      return InvalidArgument("dtype " + std::string(DTypeName(x->dtype)) + " is not served");
    }
    if (!x->is_contiguous()) return InvalidArgument("non-contiguous inputs are declined");
    if (x->numel() == 0) return codegen::DeclineEmpty();
    // F.group_norm passes N = size(0), C = size(1), HxW = the product of the rest; anything else
    // is a call this family has not been checked against.
    if (x->sizes.size() < 2) return InvalidArgument("input needs at least 2 dims");
    int64_t spatial = 1;
    for (size_t i = 2; i < x->sizes.size(); ++i) spatial *= x->sizes[i];
    if (*n != x->sizes[0] || *channels != x->sizes[1] || *hxw != spatial) {
      return InvalidArgument("N, C, HxW are not the input's [N, C, *spatial] sizes");
    }
    if (*groups <= 0 || *channels % *groups != 0) return InvalidArgument("group does not divide C");
    auto p = std::make_unique<GroupNormProblem>();
    auto param = [&](size_t index, const char* what, bool* present) -> Status {
      if (std::holds_alternative<NoneArg>(c.args[index])) {
        *present = false;
        return Status::Ok();
      }
      const auto* t = std::get_if<TensorDesc>(&c.args[index]);
      if (!t) return InvalidArgument(std::string(what) + " is not a tensor or None");
      if (t->dtype != x->dtype) return InvalidArgument(std::string(what) + " dtype differs from the input's");
      if (t->numel() != *channels || t->sizes.size() != 1) return InvalidArgument(std::string(what) + " shape is not [C]");
      if (!t->is_contiguous()) return InvalidArgument(std::string("non-contiguous ") + what + " is declined");
      *present = true;
      return Status::Ok();
    };
    KJIT_RETURN_IF_ERROR(param(1, "weight", &p->has_weight));
    KJIT_RETURN_IF_ERROR(param(2, "bias", &p->has_bias));
    p->dtype = x->dtype;
    p->n = *n;
    p->channels = *channels;
    p->hxw = *hxw;
    p->groups = *groups;
    p->eps = *eps;
    p->alignment = x->alignment;
    if (x->numel() > (int64_t{1} << 40)) return InvalidArgument("too large");
    if (p->len() >= kMaxSlice) return InvalidArgument("slices of 2^30 elements or more are left to PyTorch");
    p->op = c.op;
    std::ostringstream desc;
    desc << "group_norm " << DTypeName(p->dtype) << " N=" << p->n << " C=" << p->channels << " HxW=" << p->hxw
         << " G=" << p->groups << " (slices=" << p->slices() << " len=" << p->len() << ")"
         << (p->has_weight ? " weight" : "") << (p->has_bias ? " bias" : "") << " eps=" << *eps;
    p->description = desc.str();
    return std::unique_ptr<Problem>(std::move(p));
  }

  Space MakeSpace(const Problem&, const DeviceFacts&) const override {
    Space s;
    s.family = "group_norm";
    s.knobs = {
        {"strategy", {kWarp, kRegs, kSmem, kOnline, kCluster, kClusterSmem},
         "0 warp/slice in registers, 1 block/slice in registers, 2 block/slice staged in shared memory, 3 "
         "block/slice from global memory (two reads), 4 cluster/slice from global memory (second read from L2), 5 "
         "cluster/slice staged in shared memory"},
        {"threads", {32, 64, 128, 256, 512, 1024}, "threads per block"},
        {"vec", {1, 2, 4, 8}, "elements per vector load and store (one channel each: divides HxW)"},
        {"cluster", {1, 2, 4, 8}, "blocks per slice (cluster strategies)"},
        {"stats", {kTwoPass, kWelford},
         "0 two-pass: the mean, then squared deviations from the held slice; 1 Welford per vector with Chan merges"},
        {"unroll", {1, 2, 4}, "vectors a thread loads before using them (streaming and staging loops)"},
        {"hint", {0, 1}, "1: streaming cache hints (evict-first) on stores and on the second read"},
    };
    return s;
  }

  Status Check(const Problem& problem, const Point& pt, const DeviceFacts& dev) const override {
    const auto& p = static_cast<const GroupNormProblem&>(problem);
    const int64_t strategy = pt.at("strategy"), threads = pt.at("threads"), vec = pt.at("vec"),
                  cluster = pt.at("cluster"), stats = pt.at("stats"), unroll = pt.at("unroll");
    const int64_t size = static_cast<int64_t>(DTypeSize(p.dtype));
    const int64_t len = p.len();
    const bool clustered = strategy == kCluster || strategy == kClusterSmem;
    const bool held = strategy == kWarp || strategy == kRegs;
    if (strategy < kWarp || strategy > kClusterSmem) return InvalidArgument("unknown strategy");
    KJIT_RETURN_IF_ERROR(codegen::CheckThreadsAndVector(threads, vec, size, dev));
    KJIT_RETURN_IF_ERROR(codegen::CheckVectorAligned(vec, size, p.alignment));
    if (p.hxw % vec != 0) return InvalidArgument("vector does not divide HxW (a vector must stay in one channel)");
    if (clustered != (cluster > 1)) return InvalidArgument("cluster > 1 exactly for the cluster strategies");
    if (clustered && (dev.arch < 90 || cluster > dev.max_cluster_size)) return InvalidArgument("no such cluster here");
    if (held && unroll != 1) return InvalidArgument("unroll applies to the streaming and staging loops only");
    if (strategy != kWarp && threads < 64) return InvalidArgument("a single warp is the warp strategy");
    if (clustered && threads < 128) return InvalidArgument("cluster blocks need at least 128 threads");
    const int64_t part = len / cluster;  // elements of the slice one block owns
    if (len % (cluster * vec) != 0) return InvalidArgument("slice does not split evenly into vectors per block");
    const int64_t sweep = threads * vec;  // elements one pass of the block covers
    switch (strategy) {
      case kWarp: {
        const int64_t held_floats = CeilDiv(len, 32 * vec) * vec;
        if (held_floats > kMaxRegisterFloats) return InvalidArgument("slice too long for a warp");
        if (threads / 32 > p.slices()) return InvalidArgument("more warps per block than slices");
        break;
      }
      case kRegs: {
        const int64_t held_floats = CeilDiv(len, sweep) * vec;
        if (held_floats > kMaxRegisterFloats) return InvalidArgument("slice too long for registers");
        if (held_floats * threads > dev.registers_per_sm / 2) {
          return InvalidArgument("held values would take over half the register file (spills)");
        }
        if (len * 2 < sweep) return InvalidArgument("most threads would idle");
        break;
      }
      case kSmem:
      case kOnline:
      case kCluster:
      case kClusterSmem: {
        if (part < sweep * unroll) return InvalidArgument("part shorter than unroll sweeps of the block");
        if (strategy == kSmem || strategy == kClusterSmem) {
          const int64_t staged = StagedElements(part, threads, vec, dev);
          if (staged * 2 < part) return InvalidArgument("less than half the part fits in shared memory");
          if (stats == kTwoPass && staged < part) {
            return InvalidArgument("two-pass statistics need the whole part staged");
          }
        } else if (stats != kWelford) {
          return InvalidArgument("two-pass statistics need the slice held (registers or shared memory)");
        }
        break;
      }
    }
    const int64_t grid = strategy == kWarp ? CeilDiv(p.slices(), threads / 32) : p.slices() * cluster;
    if (grid > int64_t{2147483647}) return InvalidArgument("more blocks than the grid holds");
    return Status::Ok();
  }

  Point ExpertDefault(const Problem& problem, const DeviceFacts& dev) const override {
    const auto& p = static_cast<const GroupNormProblem&>(problem);
    // The first valid of `base` with the widest vector (16-byte accesses where the layout
    // allows), then the most threads of `threads`; an invalid point if none is.
    auto first_valid = [&](Point base, std::initializer_list<int64_t> threads) {
      return codegen::WidestValid(*this, problem, dev, std::move(base), threads);
    };
    auto point = [](int64_t strategy, int64_t cluster, int64_t stats, int64_t unroll, int64_t hint) {
      return Point{{"strategy", strategy}, {"threads", 256}, {"vec", 1},          {"cluster", cluster},
                   {"stats", stats},       {"unroll", unroll}, {"hint", hint}};
    };
    auto valid = [&](const Point& pt) { return Check(problem, pt, dev).ok(); };
    // Small slices: a warp each while a lane holds at most 32 values; two-pass statistics from
    // held values (as exact as Welford, fewer divisions).
    Point w = first_valid(point(kWarp, 1, kTwoPass, 1, 0), {128, 64, 32});
    if (valid(w) && CeilDiv(p.len(), 32 * w.at("vec")) * w.at("vec") <= 32) return w;
    // Then a block per slice with the slice in registers, unless the slices are too few to fill
    // the GPU and long enough to be worth splitting across a cluster.
    if (p.slices() >= dev.sm_count || p.len() < 16 * 1024) {
      w = first_valid(point(kRegs, 1, kTwoPass, 1, 0), {256, 512, 1024});
      if (valid(w)) return w;
    }
    // Larger slices: read once, staged whole in shared memory, by as few blocks per slice as make
    // the part fit and fill the GPU (a cluster when there are fewer slices than SMs). A cluster's
    // block only where three of them share an SM: a block staging its part alone has too few loads
    // in flight (H200, f32 N x 64 x 128 x 128, 8 groups: 512 KB slices over 4 blocks of 1024,
    // staged alone, 92.6-324.8 us; over 8 blocks of 512, three an SM, 49.5-166.5 us, N = 16-64).
    const int64_t max_cluster = std::min<int64_t>(8, dev.max_cluster_size);
    for (int64_t cluster : {1, 2, 4, 8}) {
      if (cluster > max_cluster) break;
      if (p.slices() * cluster < dev.sm_count && cluster < max_cluster) continue;
      const int64_t part_bytes = p.len() / cluster * 4 + kReductionScratch;
      if (cluster > 1 && 3 * part_bytes > dev.shared_bytes_per_sm) continue;
      const int64_t strategy = cluster == 1 ? kSmem : kClusterSmem;
      // A cluster's parts with the hint, unrolled once, in blocks of 512 (the best measured there).
      const bool split = cluster > 1;
      for (int64_t unroll : {split ? 1 : 2, split ? 2 : 1}) {
        w = split ? first_valid(point(strategy, cluster, kTwoPass, unroll, 1), {512, 1024, 256, 128})
                  : first_valid(point(strategy, cluster, kTwoPass, unroll, 0), {1024, 512, 256, 128});
        if (valid(w) && StagedElements(p.len() / cluster, w.at("threads"), w.at("vec"), dev) == p.len() / cluster) {
          return w;
        }
      }
    }
    // Past that (1-2 MB slices, the headroom case): read twice by a cluster, the second read from
    // L2, parts of at most 256 KB; Welford on the way in. H200, f32, 8 groups, blocks of 1024: 32 x 128
    // x 128 x 128 (1 MB) 179.7 us over 4 blocks (198.5 over 2); 32 x 64 x 256 x 256 (2 MB) 371.2 over 8,
    // against 397.8 staging what fits; odd 31 x 64 x 255 x 255 499.3 against 628.5.
    int64_t online_cluster = max_cluster;
    for (int64_t cluster = 2; cluster < max_cluster; cluster *= 2) {
      if (p.len() / cluster * 4 <= 256 * 1024 && p.slices() * cluster >= dev.sm_count) {
        online_cluster = cluster;
        break;
      }
    }
    w = first_valid(point(kCluster, online_cluster, kWelford, 4, 1), {1024, 512, 256, 128});
    if (valid(w)) return w;
    for (int64_t unroll : {2, 1}) {
      w = first_valid(point(kClusterSmem, max_cluster, kWelford, unroll, 1), {1024, 512, 256, 128});
      if (valid(w)) return w;
      w = first_valid(point(kCluster, max_cluster, kWelford, unroll, 1), {512, 1024, 256, 128});
      if (valid(w)) return w;
      w = first_valid(point(kOnline, 1, kWelford, unroll, 1), {256, 512, 128, 64});
      if (valid(w)) return w;
    }
    // Whatever is left (never reached for the sample keys): the first valid point.
    const std::vector<Point> any = ValidPoints(*this, problem, dev, 1);
    return any.empty() ? w : any.front();
  }

  Result<Candidate> Generate(const Problem& problem, const Point& pt, const DeviceFacts& dev) const override {
    KJIT_RETURN_IF_ERROR(Check(problem, pt, dev));
    const auto& p = static_cast<const GroupNormProblem&>(problem);
    const int64_t strategy = pt.at("strategy"), threads = pt.at("threads"), vec = pt.at("vec"),
                  cluster = pt.at("cluster"), stats = pt.at("stats"), unroll = pt.at("unroll"),
                  hint = pt.at("hint");
    const float eps = static_cast<float>(p.eps);  // then to the input dtype, on the device (finish())
    uint32_t eps_bits = 0;
    std::memcpy(&eps_bits, &eps, sizeof(eps_bits));
    std::ostringstream src;
    src << codegen::SourceHead(*this, p, pt, dev);
    src << "typedef " << CudaType(p.dtype) << " in_t;\ntypedef in_t out_t;\n";
    src << "#define VEC " << vec << "\n#define HINT " << hint << "\n";
    src << "constexpr bool WELFORD = " << (stats == kWelford ? "true" : "false") << ";\n";
    src << "constexpr bool HAS_W = " << (p.has_weight ? "true" : "false")
        << ", HAS_B = " << (p.has_bias ? "true" : "false") << ";\n";
    // Slices are [C/G channels][HxW], LEN < 2^30 elements: in-slice offsets are ints.
    src << "constexpr long long SLICES = " << p.slices() << "LL;\n";
    src << "constexpr int LEN = " << p.len() << ", HXW = " << p.hxw << ", D = " << p.channels_per_group()
        << ", G = " << p.groups << ";\n";
    src << "constexpr int THREADS = " << threads << ", CLUSTER = " << cluster << ", UNROLL = " << unroll << ";\n";
    // eps by its float bits: exactly static_cast<float>(eps), whatever it is.
    src << "#define EPS __uint_as_float(" << eps_bits << "u)\n";
    src << codegen::kElementAccess << codegen::kReductions << kPrelude;
    src << "#define KJIT_PARAMS const in_t* __restrict__ x, const in_t* __restrict__ w, const in_t* __restrict__ b, "
           "out_t* __restrict__ y, out_t* __restrict__ mean_out, out_t* __restrict__ rstd_out\n";
    Candidate c;
    c.entry_point = "kjit_group_norm";
    c.launch.block[0] = static_cast<uint32_t>(threads);
    switch (strategy) {
      case kWarp:
      case kRegs: {
        const bool warp = strategy == kWarp;
        const int64_t items = CeilDiv(p.len(), (warp ? 32 : threads) * vec);
        src << "constexpr bool SLICE_BY_WARP = " << (warp ? "true" : "false") << ";\n";
        src << "constexpr int ITEMS = " << items << ", STRIDE = " << (warp ? 32 : threads)
            << ", PARTIALS = " << codegen::HeldPartials(items * vec, threads) << ";\n" << kHeldKernel;
        c.launch.grid[0] = static_cast<uint32_t>(warp ? CeilDiv(p.slices(), threads / 32) : p.slices());
        break;
      }
      case kSmem:
      case kOnline:
      case kCluster:
      case kClusterSmem: {
        const bool staging = strategy == kSmem || strategy == kClusterSmem;
        const int64_t part = p.len() / cluster;
        const int64_t staged = staging ? StagedElements(part, threads, vec, dev) : 0;
        src << "constexpr int PART = " << part << ";    // elements of the slice one block owns\n";
        src << "constexpr int STAGED = " << staged << ";  // of them held in shared memory\n";
        src << "constexpr int SWEEP = THREADS * VEC;\n";
        src << (cluster > 1 ? "#define KJIT_CLUSTER_DIMS __cluster_dims__(CLUSTER, 1, 1)\n"
                            : "#define KJIT_CLUSTER_DIMS\n");
        src << kStreamedKernel;
        c.launch.grid[0] = static_cast<uint32_t>(p.slices() * cluster);
        c.launch.dynamic_shared_bytes = static_cast<uint32_t>(staged * 4);
        break;
      }
      default:
        return InvalidArgument("unknown strategy");
    }
    c.source = src.str();
    codegen::FinishCandidate(*this, pt, c);
    return c;
  }
};

}  // namespace

const Family* GroupNormFamily() {
  static const GroupNorm family;
  return &family;
}

}  // namespace kjit::policy
