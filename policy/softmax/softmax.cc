#include "softmax/softmax.h"

#include "src/codegen.h"

#include <algorithm>
#include <sstream>

namespace kjit::policy {
namespace {

using codegen::CeilDiv;
using codegen::CudaType;

enum Strategy : int64_t {
  kWarp = 0,
  kRegs = 1,
  kSmem = 2,
  kOnline = 3,
  kCluster = 4,
  kClusterSmem = 5,
  kColumns = 6,
  kColumnsRegs = 7,
  kColumnsBlock = 8,
  kClusterHold = 9,
};

constexpr int64_t kMaxRegisterFloats = 64;  // per thread, for the row-in-registers strategies
constexpr int64_t kReductionScratch = 1024;  // shared bytes kept for block reductions

// The most elements one block of a cluster strategy holds: a row's whole vectors dealt out to `cluster`
// blocks, the first blocks one more where they do not divide evenly.
int64_t ClusterPartElems(int64_t len, int64_t vec, int64_t cluster) { return CeilDiv(len / vec, cluster) * vec; }

struct SoftmaxProblem : Problem {
  bool log = false;
  DType in = DType::kFloat32;
  DType out = DType::kFloat32;
  int64_t outer = 1, len = 1, inner = 1;
  int alignment = 16;  // of the input's data pointer
  int64_t rows() const { return outer * inner; }
};

// The knobs added after codegen 7 (strategy 4's), 0 where a point predates them.
constexpr const char* kLaterKnobs[] = {"reverse", "per_sm"};

// A knob's value, or `absent` where the point predates the knob (a cached entry, a test's literal point).
int64_t KnobOr(const Point& pt, const std::string& name, int64_t absent) {
  const auto it = pt.find(name);
  return it == pt.end() ? absent : it->second;
}
// The dynamic shared memory a block of strategy 4 reserves so that at most `per_sm` blocks fit an SM:
// more than 1 / (per_sm + 1) of the SM's.
int64_t PerSmReservation(int64_t per_sm, const DeviceFacts& dev) { return dev.shared_bytes_per_sm / (per_sm + 1) + 1; }

// Strategy 5 stages a block's part by TMA bulk copies (sm_90, as clusters), the input's elements as they are,
// where a vector is 16 bytes; otherwise each thread stages the vectors it reads, as floats.
bool ClusterStagesInBulk(const SoftmaxProblem& p, int64_t vec) {
  return vec * static_cast<int64_t>(DTypeSize(p.in)) == 16;
}
// The elements of its part a block of strategy 5 stages: all of them where they fit in a block's shared
// memory; else as many whole vectors as fit, and the rest is read twice. There blocks of 512 threads or
// fewer stage what fits in half an SM's shared memory, so that two of them share an SM.
int64_t ClusterStageElems(const SoftmaxProblem& p, int64_t vec, int64_t cluster, int64_t threads,
                          const DeviceFacts& dev) {
  const int64_t elem = ClusterStagesInBulk(p, vec) ? static_cast<int64_t>(DTypeSize(p.in)) : 4;
  const int64_t part = ClusterPartElems(p.len, vec, cluster);
  const int64_t block_bytes = dev.max_shared_bytes_per_block - kReductionScratch;
  if (part * elem <= block_bytes) return part;
  const int64_t bytes =
      threads <= 512 ? std::min(block_bytes, dev.shared_bytes_per_sm / 2 - 2 * kReductionScratch) : block_bytes;
  return bytes / elem / vec * vec;
}

// Strategy 9 holds its part on chip: the first elements staged in a block's shared memory as far as they fit
// (one block an SM), the rest in registers, HeldVectors a thread.
int64_t ClusterHoldStageElems(const SoftmaxProblem& p, int64_t vec, int64_t cluster, const DeviceFacts& dev) {
  const int64_t elem = ClusterStagesInBulk(p, vec) ? static_cast<int64_t>(DTypeSize(p.in)) : 4;
  const int64_t part = ClusterPartElems(p.len, vec, cluster);
  return std::min(part, (dev.max_shared_bytes_per_block - kReductionScratch) / elem / vec * vec);
}
int64_t HeldVectors(const SoftmaxProblem& p, int64_t vec, int64_t cluster, int64_t threads, const DeviceFacts& dev) {
  return CeilDiv(ClusterPartElems(p.len, vec, cluster) - ClusterHoldStageElems(p, vec, cluster, dev), threads * vec);
}
// The floats a thread of strategy 9 may hold: a quarter of its share of the register file (64 registers a
// thread in blocks of 1024), at most kMaxRegisterFloats.
int64_t MaxHeldFloats(int64_t threads, const DeviceFacts& dev) {
  return std::min<int64_t>(kMaxRegisterFloats, dev.registers_per_sm / threads / 4);
}

// The kernels' CUDA, from softmax.cuh (kjit_embed_cuda): kPrelude, kBackwards, kClusterHelpers, kClusterKernel,
// kClusterHoldKernel, kWarpKernel, kRegsKernel, kSmemKernel, kOnlineKernel, kColumnsKernel, kColumnsBlockKernel.
#include "kjit/cuda/softmax.cuh.inc"
class Softmax final : public Family {
 public:
  std::string_view name() const override { return "softmax"; }
  int codegen_version() const override { return 7; }
  std::vector<std::string> ops() const override { return {"aten::_softmax", "aten::_log_softmax"}; }

  OpTraits traits(std::string_view op) const override {
    OpTraits t;
    if (op == "aten::_softmax") {
      // softmax of a long row is ~1/len per element: assert_close's atol of
      // 1e-5 would accept any output for rows past ~1e5, so softmax is held to
      // relative error (float32 allows for a different summation order).
      t.tolerance_by_dtype[DType::kFloat32] = {1e-30, 1e-5};
      t.tolerance_by_dtype[DType::kFloat16] = {1e-7, 1e-3};
      t.tolerance_by_dtype[DType::kBFloat16] = {1e-30, 1.6e-2};
    }
    return t;
  }

  std::vector<OpKey> SampleKeys() const override {
    auto key = [](const char* op, DType dt, std::vector<int64_t> sizes, int64_t dim, bool half_to_float) {
      return OpKey::Single(op, "", {TensorDesc::Contiguous(dt, std::move(sizes)), dim, half_to_float}, 90);
    };
    return {
        key("aten::_softmax", DType::kFloat32, {4096, 16384}, -1, false),
        key("aten::_softmax", DType::kFloat32, {64, 1048576}, -1, false),
        key("aten::_softmax", DType::kFloat32, {262144, 256}, 1, false),
        key("aten::_softmax", DType::kFloat16, {1000, 1000}, -1, true),
        key("aten::_log_softmax", DType::kBFloat16, {8192, 50257}, -1, false),
        key("aten::_softmax", DType::kFloat32, {32, 1000, 64}, 1, false),
        key("aten::_log_softmax", DType::kFloat16, {128, 24, 96}, 1, false),
        // Few long rows of a prime length: the cluster strategies' uneven split, head and tail.
        key("aten::_log_softmax", DType::kFloat32, {48, 100003}, -1, false),
    };
  }

  Result<std::unique_ptr<Problem>> Match(const OpKey& key) const override {
    if (key.calls.size() != 1) return InvalidArgument("a single call is needed");
    const OpCall& c = key.calls[0];
    auto p = std::make_unique<SoftmaxProblem>();
    if (c.op == "aten::_log_softmax") {
      p->log = true;
    } else if (c.op != "aten::_softmax") {
      return InvalidArgument("not a softmax");
    }
    if (!c.overload.empty() || c.args.size() != 3) return InvalidArgument("unexpected overload or arguments");
    const auto* x = std::get_if<TensorDesc>(&c.args[0]);
    const auto* dim = std::get_if<int64_t>(&c.args[1]);
    const auto* half_to_float = std::get_if<bool>(&c.args[2]);
    if (!x || !dim || !half_to_float) return InvalidArgument("arguments are not (Tensor, int, bool)");
    if (x->dtype != DType::kFloat32 && x->dtype != DType::kFloat16 && x->dtype != DType::kBFloat16) {
      return InvalidArgument("dtype " + std::string(DTypeName(x->dtype)) + " is not served");
    }
    if (*half_to_float && x->dtype == DType::kFloat32) return InvalidArgument("half_to_float needs a half input");
    if (!x->is_contiguous()) return InvalidArgument("non-contiguous inputs are declined");
    if (x->numel() == 0) return codegen::DeclineEmpty();
    KJIT_ASSIGN_OR_RETURN(const codegen::AroundDim around, codegen::SplitAroundDim(x->sizes, *dim));
    p->outer = around.outer;
    p->len = around.len;
    p->inner = around.inner;
    p->in = x->dtype;
    p->out = *half_to_float ? DType::kFloat32 : x->dtype;
    p->alignment = x->alignment;
    p->op = c.op;
    std::ostringstream desc;
    desc << (p->log ? "log_softmax " : "softmax ") << DTypeName(p->in) << "->" << DTypeName(p->out) << " outer=" << p->outer
         << " len=" << p->len << " inner=" << p->inner;
    p->description = desc.str();
    return std::unique_ptr<Problem>(std::move(p));
  }

  Space MakeSpace(const Problem&, const DeviceFacts&) const override {
    Space s;
    s.family = "softmax";
    s.knobs = {
        {"strategy",
         {kWarp, kRegs, kSmem, kOnline, kCluster, kClusterSmem, kColumns, kColumnsRegs, kColumnsBlock, kClusterHold},
         "0 warp/row, 1 block/row in registers, 2 block/row in shared memory, 3 block/row online, 4 cluster/row "
         "online, 5 cluster/row in shared memory, 6 columns online, 7 columns in registers, 8 column tiles with "
         "the softmax dim split over a block's warps, 9 cluster/row held on chip (shared memory, then registers)"},
        {"threads", {32, 64, 128, 256, 512, 1024}, "threads per block"},
        {"vec", {1, 2, 4, 8}, "elements per vector load and store"},
        {"cluster", {1, 2, 4, 8, 16}, "blocks per row (cluster strategies; 16 is a non-portable cluster size)"},
        {"unroll", {1, 2, 4}, "vectors a thread loads before using any, in the loops that stream a row from memory"},
        {"hint", {0, 1}, "1: streaming cache hints (evict-first) on the last read and on stores"},
        {"reverse", {0, 1},
         "strategy 4: 1 reads a block's part backwards the second time, so that the lines the first pass read "
         "last, the likeliest still in L2, are read again first"},
        {"per_sm", {0, 1, 2},
         "strategy 4: at most this many blocks an SM (a shared memory reservation; 0: as many as fit), so that "
         "fewer rows are in flight and more of their second reads hit L2"},
    };
    // Thirteenth session: reverse and per_sm, new knobs of strategy 4 only; a point without them (0) generates
    // the kernel it did (SoftmaxSpace.OldPointsKeepTheirSources), so the codegen version stays.
    for (const char* knob : kLaterKnobs) s.absent_as.emplace(knob, 0);
    return s;
  }

  Status Check(const Problem& problem, const Point& pt, const DeviceFacts& dev) const override {
    const auto& p = static_cast<const SoftmaxProblem&>(problem);
    const int64_t strategy = pt.at("strategy"), threads = pt.at("threads"), vec = pt.at("vec"),
                  cluster = pt.at("cluster"), unroll = pt.at("unroll");
    const int64_t in_size = static_cast<int64_t>(DTypeSize(p.in)), out_size = static_cast<int64_t>(DTypeSize(p.out));
    const bool columns = strategy == kColumns || strategy == kColumnsRegs || strategy == kColumnsBlock;
    const bool clustered = strategy == kCluster || strategy == kClusterSmem || strategy == kClusterHold;
    // Strategy 5 reads twice what its blocks cannot stage, in an online loop.
    const bool rereads = strategy == kClusterSmem && cluster > 1 &&
                         ClusterStageElems(p, vec, cluster, threads, dev) < ClusterPartElems(p.len, vec, cluster);
    const bool online = strategy == kOnline || strategy == kCluster || strategy == kColumns ||
                        strategy == kColumnsBlock || rereads;
    if (columns != (p.inner > 1)) return InvalidArgument(columns ? "columns need dim not last" : "rows need dim last");
    if (clustered != (cluster > 1)) return InvalidArgument("cluster > 1 exactly for the cluster strategies");
    if (clustered && (dev.arch < 90 || cluster > std::max(dev.max_cluster_size, dev.max_nonportable_cluster_size))) {
      return InvalidArgument("no such cluster here");
    }
    if (!online && unroll != 1) return InvalidArgument("unroll applies to the online loops only");
    const int64_t reverse = KnobOr(pt, "reverse", 0), per_sm = KnobOr(pt, "per_sm", 0);
    if (reverse != 0 && reverse != 1) return InvalidArgument("reverse is 0 or 1");
    if (per_sm < 0 || per_sm > 2) return InvalidArgument("per_sm is 0, 1 or 2");
    if ((reverse != 0 || per_sm != 0) && strategy != kCluster) {
      return InvalidArgument("reverse and per_sm are knobs of strategy 4 (cluster/row online)");
    }
    if (per_sm != 0 && PerSmReservation(per_sm, dev) + kReductionScratch > dev.max_shared_bytes_per_block) {
      return InvalidArgument("per_sm: the reservation does not fit a block");
    }
    KJIT_RETURN_IF_ERROR(codegen::CheckThreadsAndVector(threads, vec, std::max(in_size, out_size), dev));
    KJIT_RETURN_IF_ERROR(codegen::CheckVectorAligned(vec, in_size, p.alignment));
    const int64_t vec_extent = columns ? p.inner : p.len;  // vectors run along the contiguous dim
    // A block or a cluster per row takes a ragged row (RowSplit in the generated code); the others need
    // whole vectors.
    const bool takes_ragged = strategy == kSmem || strategy == kOnline || clustered;
    if (vec_extent % vec != 0 && !takes_ragged) {
      return InvalidArgument("vector does not divide the contiguous extent");
    }
    const int64_t smem_cap = dev.max_shared_bytes_per_block - kReductionScratch;
    switch (strategy) {
      case kWarp:
        if (CeilDiv(p.len, 32 * vec) * vec > kMaxRegisterFloats) return InvalidArgument("row too long for a warp");
        break;
      case kRegs:
        if (threads < 64) return InvalidArgument("use the warp strategy");
        if (CeilDiv(p.len, threads * vec) * vec > kMaxRegisterFloats) return InvalidArgument("row too long for registers");
        if (p.len < threads * vec / 2) return InvalidArgument("most threads would idle");
        break;
      case kSmem:
        if (threads < 64) return InvalidArgument("use the warp strategy");
        if (p.len * 4 > smem_cap) return InvalidArgument("row larger than shared memory");
        if (p.len < threads * vec) return InvalidArgument("row shorter than one pass");
        break;
      case kOnline:
        if (threads < 64) return InvalidArgument("use the warp strategy");
        if (p.len < threads * vec) return InvalidArgument("row shorter than one pass");
        break;
      case kCluster:
      case kClusterSmem:
      case kClusterHold: {
        if (threads < 128) return InvalidArgument("cluster blocks need at least 128 threads");
        // The row's whole vectors are dealt out to the blocks, the first blocks one more where they do
        // not divide evenly (ClusterPart in the generated code).
        const int64_t vectors = (p.len - (p.len % vec == 0 ? 0 : vec - 1)) / vec;  // fewest a row holds
        if (vectors / cluster < threads) return InvalidArgument("row part shorter than one pass");
        if (strategy == kClusterHold) {
          const int64_t held = HeldVectors(p, vec, cluster, threads, dev);
          if (held < 1) return InvalidArgument("the part fits in shared memory: strategy 5 stages it");
          if (held * vec > MaxHeldFloats(threads, dev)) return InvalidArgument("the part does not fit on chip");
        }
        break;
      }
      case kColumns:
        break;
      case kColumnsRegs:
        if (p.len * vec > kMaxRegisterFloats) return InvalidArgument("column too long for registers");
        break;
      case kColumnsBlock:
        if (threads < 64) return InvalidArgument("a single warp is the columns strategy");
        if (p.len < threads / 32) return InvalidArgument("more warps than elements along the softmax dim");
        if (256 * (threads / 32) * vec > 48 * 1024) return InvalidArgument("partials exceed static shared memory");
        break;
      default:
        return InvalidArgument("unknown strategy");
    }
    if (!columns && strategy != kWarp && !clustered && p.rows() > int64_t{2147483647}) return InvalidArgument("grid");
    return Status::Ok();
  }

  Point ExpertDefault(const Problem& problem, const DeviceFacts& dev) const override {
    Point pt = ExpertDefaultOfOlderKnobs(problem, dev);
    for (const char* knob : kLaterKnobs) pt.emplace(knob, 0);
    return pt;
  }

  Point ExpertDefaultOfOlderKnobs(const Problem& problem, const DeviceFacts& dev) const {
    const auto& p = static_cast<const SoftmaxProblem&>(problem);
    // Widest vector that is valid: 16-byte accesses where the layout allows.
    auto widest = [&](Point pt) { return codegen::WidestValid(*this, problem, dev, std::move(pt)); };
    Point pt{{"strategy", kOnline}, {"threads", 256}, {"vec", 1}, {"cluster", 1}, {"unroll", 1}, {"hint", 0}};
    if (p.inner > 1) {
      pt["strategy"] = p.len <= 16 ? kColumnsRegs : kColumnsBlock;
      pt["threads"] = 256;
      Point w = widest(pt);
      if (Check(problem, w, dev).ok()) return w;
      pt["strategy"] = kColumns;
      return widest(pt);
    }
    const std::vector<Point> tries = {
        {{"strategy", kWarp}, {"threads", 128}, {"vec", 1}, {"cluster", 1}, {"unroll", 1}, {"hint", 0}},
        {{"strategy", kRegs}, {"threads", 256}, {"vec", 1}, {"cluster", 1}, {"unroll", 1}, {"hint", 0}},
        {{"strategy", kRegs}, {"threads", 512}, {"vec", 1}, {"cluster", 1}, {"unroll", 1}, {"hint", 0}},
        {{"strategy", kRegs}, {"threads", 1024}, {"vec", 1}, {"cluster", 1}, {"unroll", 1}, {"hint", 0}},
    };
    // A row held in registers only with the widest vector any strategy gets for it and at most 16
    // floats a thread: on the H200, f32 rows of 16384 took 208 us held 64 floats a thread, 162 us
    // held 16 a thread, 159 us staged in shared memory; an odd length allows registers only VEC 1
    // (417 us for 4095x16383) while the staged row keeps VEC 4 between a scalar head and tail.
    const int64_t widest_vec = widest({{"strategy", kSmem}, {"threads", 64}, {"vec", 1}, {"cluster", 1},
                                       {"unroll", 1}, {"hint", 0}}).at("vec");
    for (const Point& t : tries) {
      Point w = widest(t);
      if (!Check(problem, w, dev).ok() || w.at("vec") < widest_vec) continue;
      const int64_t per_thread = w.at("strategy") == kWarp ? 32 : w.at("threads");
      if (CeilDiv(p.len, per_thread * w.at("vec")) * w.at("vec") <= 16) return w;
    }
    // Long rows: too few of them to fill the GPU one block each -> split each over a cluster. Blocks of
    // 1024 where there are a third to one row an SM: H200, f32, clusters of 8 with the hint, blocks of
    // 1024 (of 512): 48x2000003 388.8 us (409.6), 64x1000003 260.6 (287.9), 64x1048576 252.1 (273.0),
    // 96x500003 189.9 (191.0), 128x1000003 473.5 (501.5); fewer rows (32) or more (160) were 1-4% faster
    // in blocks of 512. Four vectors a thread in flight (codegen 7's batched loads), without the hint:
    // 64x1048576 212.8 us (244.1 one at a time, with the hint), 128x1048576 401.7 (444.9), 32x1048576 125.8
    // (140.1; 122.9 with the hint); with the hint 2-5% slower on odd rows (96x500003 170.1 against 162.0).
    // Batches of 4 vectors by blocks of 1024 only where a thread's part holds 8 of them: the loads past the
    // last whole batch go one at a time (96x500003: 212.6 us in blocks of 1024, 3.8 batches a thread, against
    // 162.0 in blocks of 512, 7.6 batches); 64x1000003 and 48x2000003 are within 1% either way.
    // Clusters of 16 (non-portable) where the rows are at most half the SMs and a block's part still holds 6
    // batches of 4 vectors a thread in blocks of 512: twice the blocks of clusters of 8, with the same loads
    // in flight a thread. H200, f32, clusters of 16 (of 8), blocks of 512, no hint, same runs: 32x1048576
    // 119.3 us (125.2; 8 batches), 64x1048576 209.4 (212.2; 8), 32x1000003 124.9 (127.2; 7.6), 48x2000003
    // 328.2 (328.5, the default's blocks of 1024; 15.3). More rows, with shorter parts, lost: 96x500003 176.1
    // (162.0; 3.8 batches), 160x500003 281.1 (252.0), 128x1000003 408.7 (403.9); blocks of 1024 in clusters
    // of 16 lost everywhere but 48x2000003.
    if (2 * p.rows() <= dev.sm_count && dev.max_nonportable_cluster_size >= 16) {
      Point c{{"strategy", kCluster}, {"threads", 512}, {"vec", 1}, {"cluster", 16}, {"unroll", 4}, {"hint", 0}};
      Point w = widest(c);
      const int64_t batch = 512 * w.at("vec") * w.at("unroll");
      if (ClusterPartElems(p.len, w.at("vec"), w.at("cluster")) >= 6 * batch && Check(problem, w, dev).ok()) return w;
    }
    if (p.rows() < 2 * dev.sm_count) {
      Point c{{"strategy", kCluster}, {"threads", 512}, {"vec", 1}, {"cluster", 8}, {"unroll", 4}, {"hint", 0}};
      Point w = widest(c);
      const bool rows_for_1024 = 3 * p.rows() >= dev.sm_count && p.rows() <= dev.sm_count;
      const int64_t batch = 1024 * w.at("vec") * w.at("unroll");
      if (rows_for_1024 && ClusterPartElems(p.len, w.at("vec"), w.at("cluster")) >= 8 * batch) {
        Point big = w;
        big["threads"] = 1024;
        if (Check(problem, big, dev).ok()) return big;
      }
      if (Check(problem, w, dev).ok()) return w;
    }
    // Staged in shared memory only while two blocks' rows fit on an SM: a row staged alone on its
    // SM (f32 2047x32767: 128 KiB a row, one block of 512 threads an SM) has too few loads in
    // flight to stream the row in (H200: 302.8 us, against 204.4 us read twice by the online
    // block of 1024 below).
    Point s{{"strategy", kSmem}, {"threads", 512}, {"vec", 1}, {"cluster", 1}, {"unroll", 1}, {"hint", 0}};
    Point w = widest(s);
    const bool two_rows_an_sm = 2 * (p.len * 4 + kReductionScratch) <= dev.shared_bytes_per_sm;
    if (two_rows_an_sm && Check(problem, w, dev).ok()) {
      // Rows whose length VEC does not divide start at every alignment, and their vectors sit
      // between a scalar head and tail: there the streaming stores pay. H200, f32 rows of 16383,
      // 1023 to 12287 rows: 9-15% faster with the hint (4095 rows: 201.1 -> 180.8 us); rows of
      // 16384 or 8192 floats are 0-2% slower with it, so aligned rows keep it off.
      Point hinted = w;
      hinted["hint"] = 1;
      if (w.at("vec") > 1 && p.len % w.at("vec") != 0 && Check(problem, hinted, dev).ok()) return hinted;
      return w;
    }
    // Read twice (the second read streams, evict-first), by blocks of 1024: half as many rows in
    // flight an SM as blocks of 512 at the same occupancy, so the rows read a second time stay in
    // L2 more often, and each row finishes in half the time; where there are fewer rows than SMs
    // it doubles the loads in flight. H200, f32, blocks of 1024 (of 512): 2047x32767 204.4 us (229.0
    // without the hint), 1024x65536 202.1 (213.9), 64x1000003 422.7 (726.1). Two vectors a thread in flight
    // (codegen 7): 2047x32767 173.5 us (189.2 one, 219.9 four), 1024x65536 189.0 (198.1 one, 181.8 four).
    Point o{{"strategy", kOnline}, {"threads", 1024}, {"vec", 1}, {"cluster", 1}, {"unroll", 2}, {"hint", 1}};
    w = widest(o);
    if (Check(problem, w, dev).ok()) return w;
    if (Check(problem, w = widest(s), dev).ok()) return w;
    o["threads"] = 512;
    w = widest(o);
    if (Check(problem, w, dev).ok()) return w;
    // Rows too short for a block of 512 (an odd 255): held after all, at whatever vector fits.
    for (const Point& t : tries) {
      w = widest(t);
      if (Check(problem, w, dev).ok()) return w;
    }
    return widest(o);
  }

  Result<Candidate> Generate(const Problem& problem, const Point& pt, const DeviceFacts& dev) const override {
    KJIT_RETURN_IF_ERROR(Check(problem, pt, dev));
    const auto& p = static_cast<const SoftmaxProblem&>(problem);
    const int64_t strategy = pt.at("strategy"), threads = pt.at("threads"), vec = pt.at("vec"),
                  cluster = pt.at("cluster"), unroll = pt.at("unroll"), hint = pt.at("hint");
    // The point as written in the source leaves out the knobs newer than codegen 7 at their absent values, so
    // that the points that existed before them keep their sources byte for byte.
    Point shown = pt;
    for (const char* knob : kLaterKnobs) {
      if (KnobOr(shown, knob, 0) == 0) shown.erase(knob);
    }
    std::ostringstream src;
    src << codegen::SourceHead(*this, p, shown, dev);
    src << "typedef " << CudaType(p.in) << " in_t;\ntypedef " << CudaType(p.out) << " out_t;\n";
    src << "#define VEC " << vec << "\n#define HINT " << hint << "\n#define LOG " << (p.log ? 1 : 0) << "\n";
    src << "constexpr long long OUTER = " << p.outer << "LL, LEN = " << p.len << "LL, INNER = " << p.inner << "LL;\n";
    src << "constexpr int THREADS = " << threads << ", CLUSTER = " << cluster << ";\n#define UNROLL " << unroll << "\n";
    src << "constexpr bool RAGGED = " << (p.inner == 1 && p.len % vec != 0 ? "true" : "false") << ";\n";
    src << codegen::kElementAccess << kPrelude;
    const int64_t reverse = KnobOr(pt, "reverse", 0), per_sm = KnobOr(pt, "per_sm", 0);
    if (reverse) src << kBackwards;
    Candidate c;
    c.entry_point = "kjit_softmax";
    c.launch.block[0] = static_cast<uint32_t>(threads);
    const int64_t rows = p.rows();
    switch (strategy) {
      case kWarp: {
        const int64_t items = CeilDiv(p.len, 32 * vec);
        src << "constexpr int ITEMS = " << items << ";\n" << kWarpKernel;
        c.launch.grid[0] = static_cast<uint32_t>(CeilDiv(rows, threads / 32));
        break;
      }
      case kRegs: {
        const int64_t items = CeilDiv(p.len, threads * vec);
        src << "constexpr int ITEMS = " << items << ";\n" << kRegsKernel;
        c.launch.grid[0] = static_cast<uint32_t>(rows);
        break;
      }
      case kSmem:
      case kOnline: {
        const bool staged = strategy == kSmem;
        if (staged) {
          // The row staged in shared memory: max while staging, then the sum, then the output.
          src << kSmemKernel;
          c.launch.grid[0] = static_cast<uint32_t>(rows);
          c.launch.dynamic_shared_bytes = static_cast<uint32_t>(p.len * 4);
          break;
        }
        src << kOnlineKernel;
        c.launch.grid[0] = static_cast<uint32_t>(rows);
        break;
      }
      case kCluster:
      case kClusterSmem:
      case kClusterHold: {
        const bool hold = strategy == kClusterHold;
        const bool staged = strategy == kClusterSmem || hold;
        const bool bulk = staged && ClusterStagesInBulk(p, vec);
        const int64_t stage = hold     ? ClusterHoldStageElems(p, vec, cluster, dev)
                              : staged ? ClusterStageElems(p, vec, cluster, threads, dev)
                                       : 0;
        // stage_t: float where each thread stages what it reads; else the input's type (unused by 4).
        src << "typedef " << (staged && !bulk ? "float" : "in_t") << " stage_t;\nconstexpr long long STAGE = " << stage
            << "LL;\nconstexpr bool BULK = " << (bulk ? "true" : "false") << ";\n";
        if (hold) src << "constexpr int HOLD = " << HeldVectors(p, vec, cluster, threads, dev) << ";\n";
        std::string kernel = strategy == kClusterHold ? kClusterHoldKernel : kClusterKernel;
        if (reverse) {
          const std::string second = "for_vectors<HINT>(xr, first, part.len,";
          const size_t at = kernel.find(second);
          if (at == std::string::npos) return Internal("softmax: no second pass to reverse in the cluster kernel");
          kernel.replace(at, second.size(), "for_vectors_back<HINT>(xr, first, part.len,");
        }
        src << codegen::kBulkCopy << kClusterHelpers << kernel;
        c.launch.grid[0] = static_cast<uint32_t>(rows * cluster);
        if (staged) c.launch.dynamic_shared_bytes = static_cast<uint32_t>(stage * (bulk ? DTypeSize(p.in) : 4));
        if (per_sm) c.launch.dynamic_shared_bytes = static_cast<uint32_t>(PerSmReservation(per_sm, dev));
        break;
      }
      case kColumns:
      case kColumnsRegs: {
        const bool cached = strategy == kColumnsRegs;
        src << "#define CACHED " << (cached ? 1 : 0) << "\nconstexpr int CLEN = " << (cached ? p.len : 1) << ";\n"
            << kColumnsKernel;
        c.launch.grid[0] = static_cast<uint32_t>(CeilDiv(p.outer * (p.inner / vec), threads));
        break;
      }
      case kColumnsBlock: {
        src << "constexpr int WARPS = THREADS / 32;\n" << kColumnsBlockKernel;
        c.launch.grid[0] = static_cast<uint32_t>(p.outer * CeilDiv(p.inner, 32 * vec));
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

const Family* SoftmaxFamily() {
  static const Softmax family;
  return &family;
}

}  // namespace kjit::policy
