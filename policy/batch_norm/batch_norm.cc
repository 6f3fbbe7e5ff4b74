#include "batch_norm/batch_norm.h"

#include "src/codegen.h"

#include <algorithm>
#include <cstring>
#include <initializer_list>
#include <sstream>

namespace kjit::policy {
namespace {

using codegen::CeilDiv;
using codegen::CudaType;

// What PyTorch 2.11 calls and returns on CUDA (traced under torch.no_grad() on an H200):
//   native_batch_norm(Tensor input, Tensor? weight, Tensor? bias, Tensor? running_mean,
//                     Tensor? running_var, bool training, float momentum, float eps)
//     -> (Tensor out, Tensor save_mean, Tensor save_invstd)
//   cudnn_batch_norm(Tensor input, Tensor weight, Tensor? bias, Tensor? running_mean,
//                    Tensor? running_var, bool training, float exponential_average_factor,
//                    float epsilon) -> (Tensor out, Tensor save_mean, Tensor save_var, Tensor reserve)
// out is laid out like the input (empty_like: channels_last stays channels_last).
// native_batch_norm's save_mean and save_invstd are float32[C] (the accumulation type of f32, f16
// and bf16 on CUDA). In inference, batch_norm_cuda_out (aten/src/ATen/native/cuda/Normalization.cu)
// fills them with running_mean converted to float and rsqrt(running_var + eps) (seen on the H200
// with scripts/check_bn_eval_outputs.py: the values do not depend on what the memory held), and
// the kernels here write exactly those.
// cudnn_batch_norm (float32 parameters) returns float32[0], float32[0] and uint8[0] in inference,
// which are not written; in training float32[C] save_mean, float32[C] save_var and uint8[0].
// ASSUMPTION (to be checked on the GPU): cudnn's "save_var" is cuDNN's resultSaveInvVariance, the
// inverse standard deviation 1/sqrt(var + eps), so it is written exactly as save_invstd is.
//
// Numerics, as PyTorch's kernels: per channel c, invstd = rsqrt(var + eps) with eps cast to float;
// out = (x - mean) * invstd * weight + bias in float, rounded once to the input's dtype; missing
// weight 1, missing bias 0. Inference takes mean and var from the running statistics; training
// computes them over N and the spatial dims, var biased (M2 / count).
//
// The ABI (daemon/worker_protocol.h): one pointer per tensor argument, a None as a null pointer,
// then the outputs: (x, weight, bias, running_mean, running_var, out, save_mean, save_invstd
// [, reserve]). Which parameters are present is part of the key: the source is specialised on it
// and never reads a null pointer.

enum Strategy : int64_t {
  // Inference: an elementwise per-channel affine map.
  kFlat = 0,
  kPlane = 1,
  // Training: a reduction per channel, then the map.
  kWarp = 2,
  kRegs = 3,
  kSmem = 4,
  kOnline = 5,
  kCluster = 6,
  kClusterSmem = 7,
};

enum Stats : int64_t {
  kTwoPass = 0,
  kWelford = 1,
};

constexpr int64_t kMaxRegisterFloats = 64;   // per thread, for the channel-in-registers strategies
constexpr int64_t kReductionScratch = 1024;  // shared bytes kept for block reductions and cluster partials
// The expert default stages at most this much per block, so that three blocks share an SM and one
// block's staging read overlaps another's arithmetic.
constexpr int64_t kDefaultStageBytes = 72 * 1024;
// Registers a channel-in-registers kernel needs besides the values it holds (addresses, loop
// state, the reductions): about 20-28 under ptxas for sm_90 (held 36 floats: 55-64 registers).
constexpr int64_t kHeldOverheadRegisters = 24;

struct BatchNormProblem : Problem {
  bool cudnn = false;
  bool training = false;
  DType dtype = DType::kFloat32;        // input and output
  DType param_dtype = DType::kFloat32;  // weight, bias and running statistics (float32 if none)
  bool has_weight = false, has_bias = false;
  // The channel of flat element i: i % C when true (channels_last 4-D, or no spatial extent),
  // else (i / HW) % C (contiguous NCHW...).
  bool channel_inner = false;
  bool channels_last = false;  // (for the description)
  int64_t batch = 1, channels = 1, spatial = 1;  // N, C, HW (product of the spatial dims)
  float eps = 0;
  int alignment = 16;  // of the input's data pointer (parameters are read one element at a time)

  int64_t numel() const { return batch * channels * spatial; }
  int64_t channel_len() const { return batch * spatial; }  // elements per channel
  // native_batch_norm always has save_mean/save_invstd of C elements; cudnn_batch_norm only in training.
  bool writes_save() const { return training || !cudnn; }
};

// The kernels' CUDA, from batch_norm.cuh (kjit_embed_cuda): kCommon, kEvalPrelude, kTrainPrelude, kEvalFlatBody,
// kEvalPlaneBody, kTrainHeldBody, kTrainStreamedVisitors, kTrainStreamedBody.
#include "kjit/cuda/batch_norm.cuh.inc"
// The kernel's parameter list (the ABI), for every strategy.
std::string Params(const BatchNormProblem& p) {
  std::string s =
      "const in_t* __restrict__ x, const p_t* __restrict__ w, const p_t* __restrict__ b, "
      "const p_t* __restrict__ rm, const p_t* __restrict__ rv, out_t* __restrict__ y, "
      "float* __restrict__ save_mean, float* __restrict__ save_invstd";
  // cudnn_batch_norm's fourth output (reserve, uint8, zero elements in every call traced).
  if (p.cudnn) s += ", unsigned char* __restrict__ reserve";
  return s;
}

bool IsChannelsLast4d(const TensorDesc& t) {
  if (t.sizes.size() != 4 || t.strides.size() != 4) return false;
  // As torch's is_contiguous(ChannelsLast): dense in the order C, W, H, N; size-1 dims' strides do not matter.
  int64_t expected = 1;
  for (int d : {1, 3, 2, 0}) {
    if (t.sizes[d] == 1) continue;
    if (t.strides[d] != expected) return false;
    expected *= t.sizes[d];
  }
  return true;
}

class BatchNorm final : public Family {
 public:
  std::string_view name() const override { return "batch_norm"; }
  // 2: Welford states carry the sum (the mean is s / n), held values' statistics
  // in up to four partial sums (codegen.cc), no division per element.
  int codegen_version() const override { return 2; }
  std::vector<std::string> ops() const override { return {"aten::native_batch_norm", "aten::cudnn_batch_norm"}; }

  OpTraits traits(std::string_view /*op: the same for both*/) const override {
    OpTraits t;
    // Both ops serve training, where a channel holding +-Inf (and no NaN) gets a mean of Inf or
    // NaN depending on where the Inf falls in PyTorch's Welford merge order (inf - inf when a
    // finite value follows it in one thread's sequence), which no kernel can match; and cuDNN's
    // order is not public. Traits are per op, not per call, so special values are fed to neither
    // op, inference included (where they would come out right: the map is elementwise).
    t.special_values = false;
    // Default assert_close tolerances per dtype: out is rounded once from float; save_mean and
    // save_invstd are float32 reductions in a different order.
    return t;
  }

  std::vector<OpKey> SampleKeys() const override {
    // (x, weight, bias, running_mean, running_var, training, momentum, eps).
    auto key = [](const char* op, TensorDesc x, DType param, bool affine, bool running, bool training) {
      const int64_t c = x.sizes[1];
      const Arg p = Arg(TensorDesc::Contiguous(param, {c}));
      std::vector<Arg> args = {std::move(x), affine ? p : Arg(NoneArg{}), affine ? p : Arg(NoneArg{}),
                               running ? p : Arg(NoneArg{}), running ? p : Arg(NoneArg{}), training, 0.1, 1e-5};
      return OpKey::Single(op, "", std::move(args), 90);
    };
    auto channels_last = [](DType dt, std::vector<int64_t> s) {
      TensorDesc t = TensorDesc::Contiguous(dt, s);
      t.strides = {s[1] * s[2] * s[3], 1, s[3] * s[1], s[1]};
      return t;
    };
    const char* native = "aten::native_batch_norm";
    const char* cudnn = "aten::cudnn_batch_norm";
    using T = TensorDesc;
    constexpr DType f32 = DType::kFloat32, f16 = DType::kFloat16, bf16 = DType::kBFloat16;
    return {
        // Inference.
        key(cudnn, T::Contiguous(f32, {32, 64, 56, 56}), f32, true, true, false),
        key(cudnn, channels_last(f16, {16, 128, 28, 28}), f32, true, true, false),
        key(native, T::Contiguous(bf16, {8, 256, 14, 14}), bf16, true, true, false),
        key(native, channels_last(bf16, {8, 96, 7, 7}), f32, true, true, false),
        key(native, T::Contiguous(f16, {256, 1024}), f16, false, true, false),
        key(native, T::Contiguous(f32, {3, 7, 17, 19}), f32, false, true, false),  // odd: no vectors
        // Training without running statistics: instance norm's [1, N*C, H, W] view, and batch norm.
        key(native, T::Contiguous(f32, {1, 2048, 256, 256}), f32, false, false, true),
        key(native, T::Contiguous(bf16, {1, 1024, 24, 24}), bf16, true, false, true),
        key(cudnn, T::Contiguous(f32, {8, 16, 32, 32}), f32, true, false, true),
        key(native, T::Contiguous(f32, {4, 96, 9, 9}), f32, false, false, true),  // odd: no vectors, warp
    };
  }

  Result<std::unique_ptr<Problem>> Match(const OpKey& key) const override {
    if (key.calls.size() != 1) return InvalidArgument("a single call is needed");
    const OpCall& c = key.calls[0];
    auto p = std::make_unique<BatchNormProblem>();
    if (c.op == "aten::cudnn_batch_norm") {
      p->cudnn = true;
    } else if (c.op != "aten::native_batch_norm") {
      return InvalidArgument("not a batch_norm");
    }
    if (!c.overload.empty() || c.args.size() != 8) return InvalidArgument("unexpected overload or arguments");
    const auto* x = std::get_if<TensorDesc>(&c.args[0]);
    const auto* training = std::get_if<bool>(&c.args[5]);
    const auto* eps = std::get_if<double>(&c.args[7]);
    if (!x || !training || !eps || !std::holds_alternative<double>(c.args[6])) {
      return InvalidArgument("arguments are not (Tensor, Tensor?, Tensor?, Tensor?, Tensor?, bool, float, float)");
    }
    if (x->dtype != DType::kFloat32 && x->dtype != DType::kFloat16 && x->dtype != DType::kBFloat16) {
      return InvalidArgument("dtype " + std::string(DTypeName(x->dtype)) + " is not served");
    }
    if (x->sizes.size() < 2) return InvalidArgument("batch norm needs an input of 2 or more dims");
    if (x->numel() == 0) return codegen::DeclineEmpty();
    if (x->numel() > (int64_t{1} << 40)) return InvalidArgument("too large");
    p->batch = x->sizes[0];
    p->channels = x->sizes[1];
    for (size_t d = 2; d < x->sizes.size(); ++d) p->spatial *= x->sizes[d];

    // Parameters: each absent or a contiguous [C] tensor, all of one dtype.
    bool present[4] = {false, false, false, false};
    bool have_dtype = false;
    static const char* const kNames[4] = {"weight", "bias", "running_mean", "running_var"};
    for (int i = 0; i < 4; ++i) {
      const Arg& a = c.args[1 + i];
      if (std::holds_alternative<NoneArg>(a)) continue;
      const auto* t = std::get_if<TensorDesc>(&a);
      if (!t) return InvalidArgument(std::string(kNames[i]) + " is not a tensor or None");
      if (t->sizes != std::vector<int64_t>{p->channels}) return InvalidArgument(std::string(kNames[i]) + " is not [C]");
      if (!t->is_contiguous()) return InvalidArgument(std::string("non-contiguous ") + kNames[i] + " is declined");
      if (t->dtype != x->dtype && t->dtype != DType::kFloat32) {
        return InvalidArgument(std::string(kNames[i]) + " dtype is neither the input's nor float32");
      }
      if (have_dtype && t->dtype != p->param_dtype) return InvalidArgument("parameters of different dtypes are left to PyTorch");
      p->param_dtype = t->dtype;
      have_dtype = true;
      present[i] = true;
    }
    if (p->cudnn && have_dtype && p->param_dtype != DType::kFloat32) {
      return InvalidArgument("cudnn_batch_norm with parameters other than float32 is not a call PyTorch makes");
    }
    if (present[2] != present[3]) return InvalidArgument("running_mean and running_var must both be given or both None");
    const bool running = present[2];
    p->training = *training;
    if (p->training && running) {
      return InvalidArgument(
          "training with running statistics updates them in place: kjit serves only calls that leave their inputs "
          "unmodified");
    }
    if (!p->training && !running) return InvalidArgument("inference needs running_mean and running_var");
    p->has_weight = present[0];
    p->has_bias = present[1];

    // Layout.
    if (x->is_contiguous()) {
      p->channel_inner = p->spatial == 1;  // [N, C] (or all-1 spatial dims): channels are the inner dim
    } else if (IsChannelsLast4d(*x)) {
      if (p->training) return InvalidArgument("channels_last input in training is left to PyTorch");
      p->channel_inner = true;
      p->channels_last = true;
    } else {
      return InvalidArgument("input neither contiguous nor channels_last 4-D: declined");
    }
    if (p->training && p->channel_len() >= (int64_t{1} << 24)) {
      return InvalidArgument("channels of 2^24 elements or more: float counts would be inexact");
    }
    p->dtype = x->dtype;
    p->eps = static_cast<float>(*eps);  // PyTorch casts eps to the accumulation type
    p->alignment = x->alignment;
    p->op = c.op;
    std::ostringstream desc;
    desc << (p->cudnn ? "cudnn_batch_norm " : "native_batch_norm ") << (p->training ? "train " : "eval ")
         << DTypeName(p->dtype);
    if (have_dtype) desc << " params=" << DTypeName(p->param_dtype);
    desc << " N=" << p->batch << " C=" << p->channels << " HW=" << p->spatial
         << (p->channels_last ? " channels_last" : "") << (p->has_weight ? " weight" : "")
         << (p->has_bias ? " bias" : "") << " eps=" << *eps;
    p->description = desc.str();
    return std::unique_ptr<Problem>(std::move(p));
  }

  Space MakeSpace(const Problem& problem, const DeviceFacts&) const override {
    const auto& p = static_cast<const BatchNormProblem&>(problem);
    Space s;
    s.family = "batch_norm";
    if (!p.training) {
      s.knobs = {
          {"strategy", {kFlat, kPlane},
           "0 flat: tiles of the whole tensor, the channel from the layout; 1 plane: a block per (n, c) plane (NCHW)"},
          {"threads", {128, 256, 512, 1024}, "threads per block"},
          {"vec", {1, 2, 4, 8}, "elements per vector load and store"},
          {"items", {1, 2, 4}, "vectors per thread (flat), unrolling of the plane loop (plane)"},
          {"hint", {0, 1}, "1: streaming cache hints (evict-first) on the read and the store"},
      };
    } else {
      s.knobs = {
          {"strategy", {kWarp, kRegs, kSmem, kOnline, kCluster, kClusterSmem},
           "2 warp/channel in registers, 3 block/channel in registers, 4 block/channel in shared memory, 5 "
           "block/channel from global memory (two reads), 6 cluster/channel from global memory, 7 cluster/channel "
           "in shared memory"},
          {"threads", {32, 64, 128, 256, 512, 1024}, "threads per block"},
          {"vec", {1, 2, 4, 8}, "elements per vector load and store"},
          {"cluster", {1, 2, 4, 8}, "blocks per channel (cluster strategies)"},
          {"stats", {kTwoPass, kWelford},
           "0 two-pass: the mean, then squared deviations from the held channel; 1 Welford with Chan merges"},
          {"hint", {0, 1}, "1: streaming cache hints (evict-first) on stores and on the last read"},
      };
    }
    return s;
  }

  Status Check(const Problem& problem, const Point& pt, const DeviceFacts& dev) const override {
    const auto& p = static_cast<const BatchNormProblem&>(problem);
    const Space space = MakeSpace(problem, dev);
    for (const Knob& k : space.knobs) {
      auto it = pt.find(k.name);
      if (it == pt.end()) return InvalidArgument("no value for knob " + k.name);
      if (std::find(k.values.begin(), k.values.end(), it->second) == k.values.end()) {
        return InvalidArgument(k.name + " outside its domain");
      }
    }
    if (pt.size() != space.knobs.size()) return InvalidArgument("knobs of the other mode's space");
    const int64_t strategy = pt.at("strategy"), threads = pt.at("threads"), vec = pt.at("vec");
    const int64_t size = static_cast<int64_t>(DTypeSize(p.dtype));
    KJIT_RETURN_IF_ERROR(codegen::CheckThreadsAndVector(threads, vec, size, dev));
    KJIT_RETURN_IF_ERROR(codegen::CheckVectorAligned(vec, size, p.alignment));
    const int64_t max_grid = 2147483647;
    if (!p.training) {
      const int64_t items = pt.at("items");
      // A vector stays in one channel's plane (NCHW) or covers VEC whole channels (channel innermost).
      if (p.channel_inner ? p.channels % vec != 0 : p.spatial % vec != 0) {
        return InvalidArgument(p.channel_inner ? "vector does not divide the channels" : "vector does not divide the plane");
      }
      if (strategy == kFlat) {
        const int64_t tile = threads * vec * items;
        if (p.numel() * 2 < tile) return InvalidArgument("most threads would idle");
        if (CeilDiv(p.numel(), tile) > max_grid) return InvalidArgument("more blocks than the grid holds");
      } else if (strategy == kPlane) {
        if (p.channel_inner) return InvalidArgument("planes need an NCHW input with spatial dims");
        if (p.spatial * 2 < threads * vec) return InvalidArgument("most threads would idle");
        if (CeilDiv(p.spatial, threads * vec) < items) return InvalidArgument("unrolled past the loop's trip count");
        if (p.batch * p.channels > max_grid) return InvalidArgument("more blocks than the grid holds");
      } else {
        return InvalidArgument("not an inference strategy");
      }
      return Status::Ok();
    }

    const int64_t cluster = pt.at("cluster"), stats = pt.at("stats");
    const int64_t len = p.channel_len();
    const bool clustered = strategy == kCluster || strategy == kClusterSmem;
    const bool held = strategy == kWarp || strategy == kRegs || strategy == kSmem || strategy == kClusterSmem;
    if (p.spatial % vec != 0) return InvalidArgument("vector does not divide the channel's runs (H*W)");
    if (clustered != (cluster > 1)) return InvalidArgument("cluster > 1 exactly for the cluster strategies");
    if (clustered && (dev.arch < 90 || cluster > dev.max_cluster_size)) return InvalidArgument("no such cluster here");
    if (!held && stats != kWelford) {
      return InvalidArgument("two-pass statistics need the channel held (registers or shared memory)");
    }
    const int64_t smem_cap = dev.max_shared_bytes_per_block - kReductionScratch;
    int64_t blocks = p.channels;
    switch (strategy) {
      case kWarp:
        if (CeilDiv(len, 32 * vec) * vec > kMaxRegisterFloats) return InvalidArgument("channel too long for a warp");
        if (threads / 32 > p.channels) return InvalidArgument("more warps than channels");
        blocks = CeilDiv(p.channels, threads / 32);
        break;
      case kRegs:
        if (threads < 64) return InvalidArgument("use the warp strategy");
        if (CeilDiv(len, threads * vec) * vec > kMaxRegisterFloats) return InvalidArgument("channel too long for registers");
        if (len * 2 < threads * vec) return InvalidArgument("most threads would idle");
        break;
      case kSmem:
        if (threads < 64) return InvalidArgument("use the warp strategy");
        if (len * size > smem_cap) return InvalidArgument("channel larger than shared memory");
        if (len < threads * vec) return InvalidArgument("channel shorter than one pass");
        break;
      case kOnline:
        if (threads < 64) return InvalidArgument("use the warp strategy");
        if (len < threads * vec) return InvalidArgument("channel shorter than one pass");
        break;
      case kCluster:
      case kClusterSmem: {
        if (threads < 128) return InvalidArgument("cluster blocks need at least 128 threads");
        if (len % (cluster * vec) != 0) return InvalidArgument("channel does not split evenly");
        const int64_t part = len / cluster;
        if (part < threads * vec) return InvalidArgument("channel part shorter than one pass");
        if (strategy == kClusterSmem && part * size > smem_cap) {
          return InvalidArgument("channel part larger than shared memory");
        }
        blocks = p.channels * cluster;
        break;
      }
      default:
        return InvalidArgument("not a training strategy");
    }
    if (blocks > max_grid) return InvalidArgument("more blocks than the grid holds");
    return Status::Ok();
  }

  Point ExpertDefault(const Problem& problem, const DeviceFacts& dev) const override {
    const auto& p = static_cast<const BatchNormProblem&>(problem);
    // The widest valid vector: 16-byte accesses where the layout and alignment allow.
    auto widest = [&](Point pt) { return codegen::WidestValid(*this, problem, dev, std::move(pt)); };
    if (!p.training) {
      // Memory-bound and elementwise: 16-byte accesses, several per thread in flight; a block
      // per plane where planes are long enough to keep a block busy (no channel arithmetic).
      std::vector<Point> tries;
      if (!p.channel_inner && p.spatial >= 4096) {
        tries.push_back({{"strategy", kPlane}, {"threads", 256}, {"vec", 1}, {"items", 2}, {"hint", 0}});
      }
      for (int64_t items : {4, 2, 1}) {
        tries.push_back({{"strategy", kFlat}, {"threads", 256}, {"vec", 1}, {"items", items}, {"hint", 0}});
      }
      for (int64_t items : {4, 2, 1}) {
        tries.push_back({{"strategy", kFlat}, {"threads", 128}, {"vec", 1}, {"items", items}, {"hint", 0}});
      }
      for (const Point& t : tries) {
        Point w = widest(t);
        if (Check(problem, w, dev).ok()) return w;
      }
      return widest(tries.back());
    }
    auto train = [](int64_t strategy, int64_t threads, int64_t cluster, int64_t stats, int64_t hint) {
      return Point{{"strategy", strategy}, {"threads", threads}, {"vec", 1},
                   {"cluster", cluster},   {"stats", stats},     {"hint", hint}};
    };
    // The widest valid vector first, then the first valid thread count: 16-byte accesses matter
    // more than the block size.
    auto best = [&](Point pt, std::initializer_list<int64_t> thread_counts, Point* out) {
      pt = codegen::WidestValid(*this, problem, dev, std::move(pt), thread_counts);
      if (!Check(problem, pt, dev).ok()) return false;
      *out = pt;
      return true;
    };
    const int64_t len = p.channel_len(), size = static_cast<int64_t>(DTypeSize(p.dtype));
    // Streaming (evict-first) stores for the staged kernels where input and output outgrow L2
    // (50 MB on the H200). A staged kernel reads global memory once (into shared memory, no
    // hint on that read) and never reads its output: the hint only marks the stores, which then
    // leave L2 first instead of competing with the input still being fetched. H200, f32
    // training, cluster staged, 16-byte vectors, hint 0 -> 1: 1x1024x256x256 (512 MiB in+out)
    // cluster 4 x 512 threads 276.4 -> 160.8 us (best measured 159.9); 1x2048x256x256 cluster 4
    // x 512 535.6 -> 311.1 us (best 308.8); 1x2048x128x128 cluster 2 x 128 101.0 -> 78.6;
    // 1x512x192x192 cluster 4 x 256 69.2 -> 50.5. Every measured cluster-staged 16-byte point
    // with both hints on these four keys is faster or within 7% with the hint (most 0.51-0.95x).
    // Below L2 nothing is measured to gain: the hint stays off (the small keys are unchanged).
    const int64_t stage_hint = 2 * p.numel() * size > (int64_t{64} << 20) ? 1 : 0;
    Point chosen;
    // Few channels (batch norm of a small layer): split each over a cluster so that the GPU
    // fills, staged in shared memory when the parts fit.
    if (p.channels * 2 <= dev.sm_count) {
      for (int64_t cluster : {2, 4, 8}) {
        if (p.channels * cluster < dev.sm_count && cluster != 8) continue;
        if (best(train(kClusterSmem, 256, cluster, kTwoPass, stage_hint), {256, 128, 512}, &chosen)) return chosen;
        if (best(train(kCluster, 256, cluster, kWelford, 1), {256, 128, 512}, &chosen)) return chosen;
      }
    }
    // Short channels in registers, two-pass (as exact as Welford, fewer divisions), while a
    // thread holds at most 32 values (64 would spill at 1024 threads).
    for (const Point& t : {train(kWarp, 128, 1, kTwoPass, 0), train(kRegs, 256, 1, kTwoPass, 0),
                           train(kRegs, 512, 1, kTwoPass, 0), train(kRegs, 1024, 1, kTwoPass, 0)}) {
      Point w = widest(t);
      const int64_t lanes = t.at("strategy") == kWarp ? 32 : t.at("threads");
      if (Check(problem, w, dev).ok() && CeilDiv(len, lanes * w.at("vec")) * w.at("vec") <= 32) return w;
    }
    // A block of 1024 still holds a longer channel in registers while a thread's values and the
    // kernel's own ~24 registers fit the 64 registers a thread gets at 1024 threads (ptxas: 36
    // floats a thread took 55-64 registers, no spill; 64 floats spilled). That beats staging
    // the channel: a 144 KiB channel staged alone on its SM (or split over a cluster of 2) has
    // too few loads in flight. H200, f32 training, instance-norm-like planes: 1x512x192x192
    // 45.3 us = 1.22x the floor (cluster of 2 staged: 80.1 us, 2.16x); 1x1020x191x191 100.7 us
    // = 1.38x (Welford from global memory: 176.2 us, 2.41x).
    {
      const int64_t budget = dev.registers_per_sm / 1024 - kHeldOverheadRegisters;
      Point w = widest(train(kRegs, 1024, 1, kTwoPass, 0));
      if (Check(problem, w, dev).ok() && CeilDiv(len, 1024 * w.at("vec")) * w.at("vec") <= budget) return w;
    }
    // Longer channels staged in shared memory (one read of global memory), split over a cluster
    // when a block's part would be too large for three blocks to share an SM.
    for (int64_t cluster : {1, 2, 4, 8}) {
      if (cluster != 8 && len * size / cluster > kDefaultStageBytes) continue;
      if (best(train(cluster == 1 ? kSmem : kClusterSmem, 512, cluster, kTwoPass, stage_hint), {512, 256, 128},
               &chosen)) {
        return chosen;
      }
    }
    // Not stageable (the channel does not split evenly over a cluster, e.g. an odd H*W, or is
    // too long even split eight ways), but at most 64 values a thread at 1024 threads: held in
    // registers all the same, though they spill (ptxas: 64 registers, 132-288 bytes of local
    // memory). Welford visits the held values once where two-pass visits them twice (each visit
    // reads the spilled ones back), and streaming stores keep the output from evicting the
    // spilled values from L2 (they are the data read a second time here). H200, f32 training,
    // 1x1984x255x255 (65025 a channel, odd: no cluster, 254 KiB: no shared memory): this 412.8
    // us (two-pass 439.9, Welford without the hint 483.4) against 680.8 for Welford from global
    // memory at 512 threads with the hint and 462.0 at 1024 without (the best of that strategy).
    {
      Point w = widest(train(kRegs, 1024, 1, kWelford, 1));
      if (Check(problem, w, dev).ok()) return w;
    }
    // Too long for registers and for shared memory: Welford from global memory, then a second
    // read (from L2 where the channel fits). No measured key comes here; the nearest are the
    // three with channels of ~64K elements, where this strategy was fastest at 1024 threads at
    // every vector width and hint (more loads in flight; 1x2048x128x128: within 5% of its
    // fastest, 512). The hint (here also on the second read) only with vectors of 8 bytes or
    // more: at 1024 threads with 4-byte loads it slowed those three keys (1x1984x255x255 462.0
    // -> 565.0 us, 1x2048x256x256 400.4 -> 417.7, 1x1024x256x256 207.1 -> 218.0), with 8- and
    // 16-byte ones it sped them up (1x2048x256x256 390.1 -> 357.2 and 389.9 -> 364.3,
    // 1x1024x256x256 200.2 -> 187.1 and 200.3 -> 189.3).
    if (best(train(kOnline, 1024, 1, kWelford, 1), {1024, 512, 256, 128, 64}, &chosen)) {
      if (chosen.at("vec") * size < 8) chosen["hint"] = 0;
      return chosen;
    }
    return widest(train(kWarp, 32, 1, kWelford, 0));
  }

  Result<Candidate> Generate(const Problem& problem, const Point& pt, const DeviceFacts& dev) const override {
    KJIT_RETURN_IF_ERROR(Check(problem, pt, dev));
    const auto& p = static_cast<const BatchNormProblem&>(problem);
    const int64_t strategy = pt.at("strategy"), threads = pt.at("threads"), vec = pt.at("vec"), hint = pt.at("hint");
    uint32_t eps_bits = 0;
    std::memcpy(&eps_bits, &p.eps, sizeof(eps_bits));
    std::ostringstream src;
    src << codegen::SourceHead(*this, p, pt, dev);
    src << "typedef " << CudaType(p.dtype) << " in_t;\ntypedef in_t out_t;\ntypedef " << CudaType(p.param_dtype)
        << " p_t;\n";
    src << "#define VEC " << vec << "\n#define HINT " << hint << "\n";
    src << "constexpr bool HAS_W = " << (p.has_weight ? "true" : "false")
        << ", HAS_B = " << (p.has_bias ? "true" : "false")
        << ", WRITE_SAVE = " << (p.writes_save() ? "true" : "false") << ";\n";
    src << "constexpr long long BATCH = " << p.batch << "LL, CHANNELS = " << p.channels << "LL, HW = " << p.spatial
        << "LL;\nconstexpr long long CHW = CHANNELS * HW, NUMEL = BATCH * CHW, LEN = BATCH * HW;\n";
    src << "constexpr int THREADS = " << threads << ";\n";
    // eps by its float bits: exactly PyTorch's static_cast<float>(eps), whatever it is.
    src << "#define EPS __uint_as_float(" << eps_bits << "u)\n";
    src << codegen::kElementAccess << kCommon;
    Candidate c;
    c.entry_point = "kjit_batch_norm";
    c.launch.block[0] = static_cast<uint32_t>(threads);
    const std::string params = Params(p);
    if (!p.training) {
      const int64_t items = pt.at("items");
      src << kEvalPrelude << "constexpr int ITEMS = " << items << ";\n#define UNROLL " << items << "\n";
      src << "constexpr bool CHANNEL_INNER = " << (p.channel_inner ? "true" : "false") << ";\n";
      if (strategy == kFlat) {
        src << "extern \"C\" __global__ void __launch_bounds__(THREADS) kjit_batch_norm(" << params << ") {" << kEvalFlatBody;
        c.launch.grid[0] = static_cast<uint32_t>(CeilDiv(p.numel(), threads * vec * items));
      } else {  // kPlane
        src << "extern \"C\" __global__ void __launch_bounds__(THREADS) kjit_batch_norm(" << params << ") {" << kEvalPlaneBody;
        c.launch.grid[0] = static_cast<uint32_t>(p.batch * p.channels);
      }
    } else {
      const int64_t cluster = pt.at("cluster"), stats = pt.at("stats");
      src << "constexpr bool WELFORD = " << (stats == kWelford ? "true" : "false")
          << ", BY_WARP = " << (strategy == kWarp ? "true" : "false") << ";\n";
      src << codegen::kReductions << kTrainPrelude;
      switch (strategy) {
        case kWarp:
        case kRegs: {
          const bool warp = strategy == kWarp;
          const int64_t items = CeilDiv(p.channel_len(), (warp ? 32 : threads) * vec);
          src << "constexpr int ITEMS = " << items << ", STRIDE = " << (warp ? 32 : threads)
            << ", PARTIALS = " << codegen::HeldPartials(items * vec, threads) << ";\n" << codegen::kHeldValues;
          src << "extern \"C\" __global__ void __launch_bounds__(THREADS) kjit_batch_norm(" << params << ") {" << kTrainHeldBody;
          c.launch.grid[0] = static_cast<uint32_t>(warp ? CeilDiv(p.channels, threads / 32) : p.channels);
          break;
        }
        case kSmem:
        case kOnline:
        case kCluster:
        case kClusterSmem: {
          const bool staged = strategy == kSmem || strategy == kClusterSmem;
          const bool clustered = strategy == kCluster || strategy == kClusterSmem;
          const int64_t part = p.channel_len() / cluster;
          // A streaming visitor's part of group_stats: its values one by one through the functors.
          src << "#define KJIT_LOCAL_STATS "
                 "__device__ __forceinline__ float local_sum() const { AddSum a = {0.f}; (*this)(a); return a.s; } "
                 "__device__ __forceinline__ float local_dev(float m) const { AddDev a = {m, 0.f}; (*this)(a); return a.q; } "
                 "__device__ __forceinline__ W local_w() const { AddW a = {{0.f, 0.f, 0.f, 0.f}}; (*this)(a); return w_state(a.w); }\n";
          src << "#define STAGED " << (staged ? 1 : 0) << "\nconstexpr int CLUSTER = " << cluster
              << ";\nconstexpr long long PART = LEN / CLUSTER;\n" << kTrainStreamedVisitors;
          src << "extern \"C\" __global__ void ";
          if (clustered) src << "__cluster_dims__(CLUSTER, 1, 1) ";
          src << "__launch_bounds__(THREADS) kjit_batch_norm(" << params << ") {" << kTrainStreamedBody;
          c.launch.grid[0] = static_cast<uint32_t>(p.channels * cluster);
          if (staged) c.launch.dynamic_shared_bytes = static_cast<uint32_t>(part * DTypeSize(p.dtype));
          break;
        }
        default:
          return InvalidArgument("unknown strategy");
      }
    }
    c.source = src.str();
    codegen::FinishCandidate(*this, pt, c);
    return c;
  }
};

}  // namespace

const Family* BatchNormFamily() {
  static const BatchNorm family;
  return &family;
}

}  // namespace kjit::policy
