#include "matmul/matmul.h"

#include "src/codegen.h"

#include <algorithm>
#include <limits>
#include <sstream>

#include "kjit/op_limits.h"

namespace kjit::policy {
namespace {

using codegen::CeilDiv;
using codegen::CudaType;

// The ABI (daemon/worker_protocol.h): (self, mat2, out) for both ops.

enum Stage : int64_t { kDirect = 0, kStaged = 1, kDouble = 2, kResident = 3, kPipelined = 4, kBulk = 5, kRing = 6 };

constexpr const char* kMm = "aten::mm";
constexpr const char* kBmm = "aten::bmm";

constexpr int64_t kMaxSharedBytes = 64 * 1024;
constexpr int64_t kMaxAccumulators = 64;  // tm x tn floats a thread holds
constexpr int64_t kMaxFetchRegs = 32;     // elements a thread fetches per operand per slice

struct MatmulProblem : Problem {
  bool batched = false;
  DType dtype = DType::kFloat32;
  int64_t batch = 1, m = 1, n = 1, k = 1;
  // Element strides; those of size-1 dims (and mm's batch) are 0.
  int64_t sab = 0, sam = 0, sak = 0, sbb = 0, sbk = 0, sbn = 0;
  int a_align = 16, b_align = 16;
  bool tf32_allowed = false;  // the key's numerics allow TF32 (not used: FP32 FMA only)
  int64_t elem() const { return static_cast<int64_t>(DTypeSize(dtype)); }
  // Which dim each operand is read along in vectors: A along k (true) or m; B along n (true) or k.
  // Where neither dim has unit stride, the one with the smaller stride (scalar reads only).
  bool a_kcont() const { return sak == 1 || (sam != 1 && sak <= sam); }
  bool b_ncont() const { return sbn == 1 || (sbk != 1 && sbn <= sbk); }
};

int64_t NextPow2(int64_t v) {
  int64_t p = 1;
  while (p < v) p *= 2;
  return p;
}

bool Float(DType t) { return t == DType::kFloat32 || t == DType::kFloat16 || t == DType::kBFloat16; }

// The kernels' CUDA, from matmul.cuh (kjit_embed_cuda): kBody, kSpanRepack, kBulkBody, kEntry.
#include "kjit/cuda/matmul.cuh.inc"
class Matmul final : public Family {
 public:
  std::string_view name() const override { return "matmul"; }
  int codegen_version() const override { return 8; }
  std::vector<std::string> ops() const override { return {kMm, kBmm}; }

  OpTraits traits(std::string_view) const override {
    OpTraits t;
    // Sums of up to 256 products in another order than cuBLAS's (which may also split K): float32
    // results differ by a few ulps of the largest partial sum, which assert_close's 1.3e-6 does not
    // always allow near cancellation; the float64 rule (compare.h) is the second chance either way.
    // f16/bf16: both round one float32 sum, so they differ by at most one ulp of the output
    // (assert_close's defaults already allow it).
    t.tolerance_by_dtype[DType::kFloat32] = {1e-5, 1e-5};
    // Near cancellation (the large-inputs set: bf16 values of 2^13..2^20 with random signs) an output is far
    // smaller than its products, and a float32 sum in ascending k may err by thousands of tolerance units where
    // cuBLAS's order happens to err by a few (seen on an H100, cc78a6f): the float64 rule allows the error any
    // float32 order may make.
    t.sum_of_products = true;
    // float16's large inputs (2^10..2^14) make sums near float16's overflow threshold, where whether
    // the rounded output is Inf depends on the order of the float32 partial sums: not fed.
    t.no_large_inputs = {DType::kFloat16};
    return t;
  }

  std::vector<OpKey> SampleKeys() const override {
    constexpr DType f32 = DType::kFloat32, f16 = DType::kFloat16, bf16 = DType::kBFloat16;
    auto c = [](DType dt, std::vector<int64_t> s) { return TensorDesc::Contiguous(dt, std::move(s)); };
    // x.transpose(-1, -2) of a contiguous tensor of the transposed sizes.
    auto t = [](DType dt, std::vector<int64_t> s) {
      std::vector<int64_t> ts = s;
      std::swap(ts[ts.size() - 1], ts[ts.size() - 2]);
      TensorDesc d = TensorDesc::Contiguous(dt, ts);
      d.sizes = s;
      std::swap(d.strides[d.strides.size() - 1], d.strides[d.strides.size() - 2]);
      return d;
    };
    auto mm = [](TensorDesc a, TensorDesc b, uint32_t numerics = kNumericsDefault) {
      return OpKey::Single(kMm, "", {std::move(a), std::move(b)}, 90, numerics);
    };
    auto bmm = [](TensorDesc a, TensorDesc b, uint32_t numerics = kNumericsDefault) {
      return OpKey::Single(kBmm, "", {std::move(a), std::move(b)}, 90, numerics);
    };
    TensorDesc expanded = c(f32, {64, 24});  // a [24, 64, 24] view of one matrix (batch stride 0)
    expanded.sizes = {24, 64, 24};
    expanded.strides = {0, 24, 1};
    return {
        // The headroom cases: batches of 64x64 products; the tall-skinny float32 product.
        bmm(c(f32, {4096, 64, 64}), c(f32, {4096, 64, 64})),
        mm(c(f32, {32768, 64}), c(f32, {64, 32768})),
        // TF32 allowed: a different key, served with FP32 FMA all the same.
        mm(c(f32, {8192, 32}), c(f32, {32, 8192}), kAllowTF32Matmul),
        // Half types, odd sizes, transposed operands, tiny matrices, an expanded batch.
        bmm(c(f16, {512, 33, 48}), c(f16, {512, 48, 40})),
        bmm(c(bf16, {256, 64, 64}), t(bf16, {256, 64, 64})),
        mm(t(f32, {1000, 33}), c(f32, {33, 777})),
        mm(c(bf16, {4096, 64}), c(bf16, {64, 4096})),
        bmm(c(f32, {16384, 8, 8}), c(f32, {16384, 8, 8})),
        mm(c(f16, {1, 64}), c(f16, {64, 4096})),
        bmm(c(f32, {24, 100, 64}), expanded),
        // Odd contiguous matrices, rows not 16-byte aligned: the pipelined strategy's span copies (codegen 5).
        bmm(c(f32, {600, 63, 63}), c(f32, {600, 63, 63})),
    };
  }

  Result<std::unique_ptr<Problem>> Match(const OpKey& key) const override {
    if (key.calls.size() != 1) return InvalidArgument("a single call is needed");
    const OpCall& call = key.calls[0];
    auto p = std::make_unique<MatmulProblem>();
    if (call.op == kMm) {
      p->batched = false;
    } else if (call.op == kBmm) {
      p->batched = true;
    } else {
      return InvalidArgument("not aten::mm or aten::bmm");
    }
    if (!call.overload.empty()) return InvalidArgument("only the default overload (no out=)");
    if (call.args.size() != 2) return InvalidArgument("expected (self, mat2)");
    const auto* a = std::get_if<TensorDesc>(&call.args[0]);
    const auto* b = std::get_if<TensorDesc>(&call.args[1]);
    if (!a || !b) return InvalidArgument("self and mat2 must be tensors");
    const size_t rank = p->batched ? 3 : 2;
    if (a->sizes.size() != rank || b->sizes.size() != rank || a->strides.size() != rank || b->strides.size() != rank) {
      return InvalidArgument(p->batched ? "bmm needs 3-D tensors" : "mm needs 2-D tensors");
    }
    if (!Float(a->dtype)) return InvalidArgument("dtype other than f32, f16, bf16");
    if (a->dtype != b->dtype) return InvalidArgument("mixed dtypes: PyTorch rejects them");
    const size_t o = p->batched ? 1 : 0;
    if (p->batched && a->sizes[0] != b->sizes[0]) return InvalidArgument("batch sizes differ: PyTorch rejects it");
    if (a->sizes[o + 1] != b->sizes[o]) return InvalidArgument("inner dimensions differ: PyTorch rejects it");
    p->dtype = a->dtype;
    p->batch = p->batched ? a->sizes[0] : 1;
    p->m = a->sizes[o];
    p->k = a->sizes[o + 1];
    p->n = b->sizes[o + 1];
    if (p->batch == 0 || p->m == 0 || p->n == 0 || p->k == 0) return InvalidArgument("empty product: declined");
    for (const TensorDesc* d : {a, b}) {
      for (int64_t s : d->strides) {
        if (s < 0) return InvalidArgument("negative strides: declined");
      }
    }
    // The shim's pre-filter declines a larger K with the same limit, before keying the call.
    const int64_t max_k = MatmulMaxK(p->dtype);
    if (p->k > max_k) {
      return InvalidArgument("inner dimension " + std::to_string(p->k) + " over " + std::to_string(max_k) +
                             ": cuBLAS's large tiles" + (p->dtype == DType::kFloat32 ? "" : " and tensor cores") +
                             " are the right answer there");
    }
    if (p->batch * p->m * p->n > (int64_t{1} << 40)) return InvalidArgument("output too large");
    auto stride = [](const TensorDesc& d, size_t dim) { return d.sizes[dim] == 1 ? 0 : d.strides[dim]; };
    if (p->batched) {
      p->sab = stride(*a, 0);
      p->sbb = stride(*b, 0);
    }
    p->sam = stride(*a, o);
    p->sak = stride(*a, o + 1);
    p->sbk = stride(*b, o);
    p->sbn = stride(*b, o + 1);
    if (a->alignment < p->elem() || b->alignment < p->elem()) return InvalidArgument("input not aligned to its element");
    p->a_align = a->alignment;
    p->b_align = b->alignment;
    p->tf32_allowed = (key.numerics & kAllowTF32Matmul) != 0;
    p->op = call.op;
    std::ostringstream desc;
    desc << "matmul " << DTypeName(p->dtype) << (p->batched ? " bmm " : " mm ");
    if (p->batched) desc << p->batch << "x";
    desc << "(" << p->m << "x" << p->k << " @ " << p->k << "x" << p->n << ")";
    desc << " A" << (p->sak == 1 ? "" : p->sam == 1 ? "^T" : "(strided)") << " B"
         << (p->sbn == 1 ? "" : p->sbk == 1 ? "^T" : "(strided)");
    if (p->batched && p->sbb == 0 && p->batch > 1) desc << " B broadcast";
    desc << (p->tf32_allowed ? " tf32-allowed (fp32 fma)" : " tf32-off");
    p->description = desc.str();
    return std::unique_ptr<Problem>(std::move(p));
  }

  Space MakeSpace(const Problem&, const DeviceFacts&) const override {
    Space s;
    s.family = "matmul";
    s.knobs = {
        {"stage", {kDirect, kStaged, kDouble, kResident, kPipelined, kBulk, kRing},
         "0 operands read from global memory (L1) at every k, 1 bk-deep slices staged in shared memory, "
         "2 double-buffered slices, the next fetched into registers during the multiply, 3 resident: the "
         "tile's whole K staged once (k-major), float4 fragments double-buffered in registers, 4 pipelined: "
         "a block walks bpb tiles (of matrices) and cp.async copies the whole-K tiles of the one `ahead` "
         "steps on into another shared buffer while it multiplies this one, 5 bulk (sm_90+, operands whose "
         "tiles are each one contiguous 16-byte aligned run of whole 16-byte rows): as 4, but one thread copies "
         "an item's tiles with one TMA bulk copy an operand, completion counted by an mbarrier, 6 ring (as 5's "
         "operands): a persistent block of bpb consumer groups and a producer warp whose bulk copies fill a ring of "
         "bpb + ahead buffers, each freed by its group through an mbarrier (no block-wide barrier)"},
        {"bm", {16, 32, 64, 128, 256}, "block tile rows (of the output)"},
        {"bn", {16, 32, 64, 128, 256}, "block tile columns"},
        {"bk", {8, 16, 32}, "k values per staged slice (direct and resident: the k loop's unroll)"},
        {"tm", {1, 2, 4, 8}, "output rows per thread (threads = bm/tm x bn/tn)"},
        {"tn", {1, 2, 4, 8}, "output columns per thread, stored together"},
        {"vec", {1, 2, 4, 8}, "elements per global load along each operand's contiguous dim (staged)"},
        {"bpb", {1, 2, 4, 8},
         "matrices of the batch per block, one after another (bmm, one tile a matrix); pipelined: at least "
         "so many work items (tiles of matrices) a block, the grid striding over them and never more blocks "
         "than fit the SMs at once; ring: consumer groups a block"},
        {"hint", {0, 1}, "1: streaming (evict-first) output stores"},
        {"minb", {1, 2, 4}, "blocks per SM the registers must allow (__launch_bounds__): 2 caps them at 32768 / threads, 4 at 16384 / threads"},
        {"ahead", {1, 2, 3},
         "pipelined and bulk: items in flight ahead of the one multiplied (shared buffers: ahead + 1); ring: buffers "
         "beyond one a group (bpb + ahead); 3: bulk and ring only"},
        {"span", {0, 1, 2, 3, 4},
         "pipelined and ring (1 only), operands whose tiles are one contiguous span of memory with rows not "
         "16-byte aligned (odd sizes): 1 copies the span's enclosing 16-byte pieces (ring: one bulk copy an "
         "operand) and reads the tiles at the span's offset in them (scalar fragment reads), 2 copies them so and "
         "repacks each item's tiles into one padded buffer (rows 16-byte aligned: vector fragment reads) before "
         "its multiply, 3 (sm_90+) as 2 with the pieces landed by one thread's TMA bulk copy an operand, "
         "counted by an mbarrier a landing buffer, 4 (sm_90+, ahead 1) as 3 with the tiles repacked in place over "
         "the landing buffer (about half the shared memory: more blocks an SM, launch bounds to match; the next "
         "item's copies wait for the multiply)"},
    };
    // Codegen 4 added `ahead`: points before it had no pipelined strategy, whose knob it is. Codegen 5 added
    // `span`; points without it generate the kernels they did.
    // Stage 5 (bulk), stage 6 (ring) and ahead 3 are new values of existing knobs, not new knobs: every point
    // that existed generates the kernel it did (tests: MatmulSpace.OldPointsKeepTheirSources), so the codegen
    // version stayed. Codegen 6 changed the kernels of span points (stage 4, span 1 and 2: the span copies'
    // unchecked issue; span 2's own output scratch), and only theirs. Span 3 came as a new value (codegen 6
    // still); codegen 7 changed span 2 and 3's repack (rows to warps), so span points' kernels only again;
    // codegen 8 their output store (two of a thread's rows a round: matmul.cuh's SR4), again theirs only. Span 4
    // came as a new value (codegen 8 still).
    s.absent_as = {{"ahead", 1}, {"span", 0}};
    return s;
  }

  static int64_t Threads(int64_t bm, int64_t bn, int64_t tm, int64_t tn) { return (bm / tm) * (bn / tn); }
  static int64_t SharedBytes(int64_t stage, int64_t bm, int64_t bn, int64_t bk, int64_t k) {
    if (stage == kDirect || stage == kPipelined) return 0;  // pipelined: PipelinedBytes
    if (stage == kResident) return k * ((bm + 4) + (bn + 4)) * 4;
    return (stage == kDouble ? 2 : 1) * bk * ((bm + 4) + (bn + 4)) * 4;
  }
  // The pipelined strategy's ahead + 1 buffers of both whole-K tiles in their global layout (the kernel's
  // Tile4): rows along the operand's contiguous dim, padded by 16 bytes past the 16-byte rounded length.
  // Span copies: ahead + 1 span buffers (span 1), or ahead of them, one padded buffer their tiles are
  // repacked into and the warps' output scratch, threads_tn floats (threads x tn x the store's rows a round,
  // matmul.cuh's SR4) (span 2); span 3 as 2 and
  // an mbarrier (8 bytes) a landing buffer after the scratch (16-byte aligned there: every part before it is
  // a multiple of 16 bytes); span 4 as 3 with the landing buffer inside the padded tiles' region (the larger
  // of the two).
  // Elements of one operand's padded whole-K tile (the kernel's Tile4::ELEMS): R rows of K rounded up to 16 bytes
  // and padded by 16 more (kc), or K rows of R padded by 16 bytes.
  static int64_t PaddedTileElems(const MatmulProblem& p, int64_t r, bool kc) {
    const int64_t q = 16 / p.elem();
    return kc ? r * (CeilDiv(p.k, q) * q + q) : p.k * (r + q);
  }
  static int64_t PipelinedBytes(const MatmulProblem& p, int64_t bm, int64_t bn, int64_t ahead, int64_t span = 0,
                                int64_t threads_tn = 0) {
    const int64_t a = PaddedTileElems(p, bm, p.a_kcont()), b = PaddedTileElems(p, bn, !p.b_ncont());
    const int64_t spans = (SpanPieces(p, bm, p.a_kcont(), p.m) + SpanPieces(p, bn, !p.b_ncont(), p.n)) * 16;
    if (span == 1) return (ahead + 1) * spans;
    if (span == 2 || span == 3) return ahead * spans + (a + b) * p.elem() + threads_tn * 4 + (span == 3 ? ahead * 8 : 0);
    if (span == 4) return std::max(spans, (a + b) * p.elem()) + threads_tn * 4 + 8;  // (both multiples of 16)
    return (ahead + 1) * (a + b) * p.elem();
  }
  // The pipelined grid: bpb work items a block, but no more blocks than the SMs hold at once by their
  // shared memory and threads (registers are not known before compiling: a block they keep out waits
  // for a second wave), so that a block's items are a whole share of the work, all blocks running.
  static int64_t PipelinedGrid(const MatmulProblem& p, const Point& pt, const DeviceFacts& dev) {
    return WaveGrid(p, pt, dev, Threads(pt.at("bm"), pt.at("bn"), pt.at("tm"), pt.at("tn")));
  }
  // The pipelined grid for blocks of `threads` (the ring's: its groups and the producer warp).
  static int64_t WaveGrid(const MatmulProblem& p, const Point& pt, const DeviceFacts& dev, int64_t threads) {
    const int64_t items = CeilDiv(p.m, pt.at("bm")) * CeilDiv(p.n, pt.at("bn")) * p.batch;
    return std::min(CeilDiv(items, pt.at("bpb")), BlocksPerSm(p, pt, dev, threads) * dev.sm_count);
  }
  // The blocks of `threads` an SM holds at once by their shared memory and threads.
  static int64_t BlocksPerSm(const MatmulProblem& p, const Point& pt, const DeviceFacts& dev, int64_t threads) {
    return std::max<int64_t>(
        1, std::min<int64_t>({dev.shared_bytes_per_sm / (BlockShared(p, pt) + 1024), 2048 / threads, 32}));
  }
  static int64_t Ahead(const Point& pt) { return pt.count("ahead") ? pt.at("ahead") : 1; }
  static int64_t SpanOf(const Point& pt) { return pt.count("span") ? pt.at("span") : 0; }
  // The 16-byte pieces of one operand's span buffer (the kernel's Span4): R rows (kc: of K elements, the
  // tile's first row at most 15 bytes into its first piece) or K rows of rlim, whichever the reads reach
  // further (fragments of 4 k past K in the last row; r up to R past rlim).
  static int64_t SpanPieces(const MatmulProblem& p, int64_t r, bool kc, int64_t rlim) {
    const int64_t q = 16 / p.elem(), kq = CeilDiv(p.k, 4) * 4;
    const int64_t len = kc ? r * p.k : p.k * rlim, read = kc ? (r - 1) * p.k + kq : (p.k - 1) * rlim + r;
    return CeilDiv(q - 1 + std::max(len, read), q);
  }
  // Where an operand's tile is one contiguous span: rows of the whole K one after another (kc), or the
  // whole matrix, k-rows of its rlim elements (a tile of r covers them).
  static bool SpanContiguous(bool kc, int64_t sr, int64_t sk, int64_t r, int64_t rlim, int64_t k) {
    if (kc) return sk == 1 && (sr == k || rlim == 1);
    return sr == 1 && (sk == rlim || k == 1) && r >= rlim;
  }
  // The span's offset in its first piece is 0 for every item and a fragment's reads are aligned vectors:
  // a 16-byte aligned tensor, batch stride and row pitch.
  static bool SpanAligned(const MatmulProblem& p, bool kc, int64_t sb, int64_t rlim, int align) {
    return align >= 16 && sb * p.elem() % 16 == 0 && (kc ? p.k : rlim) * p.elem() % 16 == 0;
  }
  // The bulk strategy's buffers (the kernel's Tile5): ahead + 1 of both tiles as in memory (R rows of K, kc;
  // else K rows of rlim and the last row's reads up to r), then ahead + 1 mbarriers of 8 bytes.
  static int64_t BulkTileElems(const MatmulProblem& p, int64_t r, bool kc, int64_t rlim) {
    const int64_t q = 16 / p.elem();
    const int64_t len = kc ? r * p.k : p.k * rlim, read = kc ? r * p.k : (p.k - 1) * rlim + r;
    return CeilDiv(std::max(len, read), q) * q;
  }
  static int64_t BulkBuffer(const MatmulProblem& p, int64_t bm, int64_t bn) {
    return (BulkTileElems(p, bm, p.a_kcont(), p.m) + BulkTileElems(p, bn, !p.b_ncont(), p.n)) * p.elem();
  }
  static int64_t BulkBytes(const MatmulProblem& p, int64_t bm, int64_t bn, int64_t ahead) {
    return (ahead + 1) * BulkBuffer(p, bm, bn) + CeilDiv((ahead + 1) * 8, 16) * 16;
  }
  // The ring's buffers (the bulk strategy's tiles), then a full and an empty mbarrier each.
  // Span copies (span 1): each buffer holds both operands' spans with their enclosing 16-byte pieces (Span6).
  static int64_t RingBytes(const MatmulProblem& p, int64_t bm, int64_t bn, int64_t buffers, int64_t span = 0) {
    const int64_t buffer = span ? (SpanPieces(p, bm, p.a_kcont(), p.m) + SpanPieces(p, bn, !p.b_ncont(), p.n)) * 16
                                : BulkBuffer(p, bm, bn);
    return buffers * buffer + CeilDiv(2 * buffers * 8, 16) * 16;
  }
  // A ring block's threads: its consumer groups and the producer warp.
  static int64_t RingThreads(const Point& pt) {
    return pt.at("bpb") * Threads(pt.at("bm"), pt.at("bn"), pt.at("tm"), pt.at("tn")) + 32;
  }
  // The ring's persistent grid: as many blocks as the SMs hold at once by shared memory and threads, at most
  // one for every bpb items (each group an item at least).
  static int64_t RingGrid(const MatmulProblem& p, const Point& pt, const DeviceFacts& dev) {
    return WaveGrid(p, pt, dev, RingThreads(pt));
  }
  static int64_t BlockShared(const MatmulProblem& p, const Point& pt) {
    const int64_t stage = pt.at("stage");
    if (stage == kBulk) return BulkBytes(p, pt.at("bm"), pt.at("bn"), Ahead(pt));
    if (stage == kRing) return RingBytes(p, pt.at("bm"), pt.at("bn"), pt.at("bpb") + Ahead(pt), SpanOf(pt));
    if (stage == kPipelined) {
      // (span 2 and 3: the output scratch holds SR4 of a thread's rows, matmul.cuh)
      return PipelinedBytes(p, pt.at("bm"), pt.at("bn"), Ahead(pt), SpanOf(pt),
                            Threads(pt.at("bm"), pt.at("bn"), pt.at("tm"), pt.at("tn")) * pt.at("tn") *
                                (pt.at("tm") % 2 == 0 ? 2 : 1));
    }
    return SharedBytes(stage, pt.at("bm"), pt.at("bn"), pt.at("bk"), p.k);
  }
  // Elements of one operand's whole-K tile (rows x K) the resident staging loop covers: read along k
  // (kc), P lanes take a row's consecutive vectors, so a row's vectors round up to P (the kernel's Operand).
  static int64_t ResidentElems(const MatmulProblem& p, int64_t rows, bool kc, int64_t vec) {
    if (!kc) return rows * p.k;
    const int64_t ps = 32 / (vec * p.elem()), pw = std::min<int64_t>(ps, std::max<int64_t>(1, 8 / vec));
    const int64_t lanes = ps < 2 ? 1 : pw >= 2 ? pw : 2;
    return rows * (CeilDiv(p.k / vec, lanes) * lanes) * vec;
  }
  // Output columns stored together: the widest power of two dividing tn and N, within 16 bytes.
  static int64_t StoreWidth(const MatmulProblem& p, int64_t tn) {
    for (int64_t v : {8, 4, 2}) {
      if (tn % v == 0 && p.n % v == 0 && v * p.elem() <= 16) return v;
    }
    return 1;
  }

  Status Check(const Problem& problem, const Point& pt, const DeviceFacts& dev) const override {
    const auto& p = static_cast<const MatmulProblem&>(problem);
    const int64_t stage = pt.at("stage"), bm = pt.at("bm"), bn = pt.at("bn"), bk = pt.at("bk"), tm = pt.at("tm"),
                  tn = pt.at("tn"), vec = pt.at("vec"), bpb = pt.at("bpb");
    if (stage != kDirect && stage != kStaged && stage != kDouble && stage != kResident && stage != kPipelined &&
        stage != kBulk && stage != kRing) {
      return InvalidArgument("unknown stage");
    }
    const int64_t ahead = Ahead(pt);
    if (ahead < 1 || ahead > 3) return InvalidArgument("ahead is 1, 2 or 3");
    if (ahead != 1 && stage != kPipelined && stage != kBulk && stage != kRing) {
      return InvalidArgument("ahead is a knob of the pipelined, bulk and ring strategies");
    }
    if (ahead == 3 && stage != kBulk && stage != kRing) return InvalidArgument("ahead 3: the bulk and ring strategies only");
    if (stage == kBulk || stage == kRing) {
      // TMA bulk copies (cp.async.bulk) and mbarrier transaction counts are sm_90's.
      if (dev.arch < 90) return InvalidArgument("bulk copies (TMA) need sm_90 or newer");
      // The copies are whole tiles whatever vec says: one value of it, not several equal points.
      if (vec != 1) return InvalidArgument("bulk copies whole tiles: vec is 1");
      // Each operand's tile one contiguous run of memory (rows of the whole K one after another, or the whole
      // matrix), starting 16-byte aligned for every item, of whole 16-byte rows (so its size is a multiple of
      // 16 bytes and the fragments' vector reads of the unpadded tile are aligned).
      if (!SpanContiguous(p.a_kcont(), p.sam, p.sak, bm, p.m, p.k) ||
          !SpanContiguous(!p.b_ncont(), p.sbn, p.sbk, bn, p.n, p.k)) {
        return InvalidArgument("bulk: an operand's tile is not one contiguous run of memory");
      }
      // (The ring's span copies take the enclosing 16-byte pieces of runs that are not so: span 1, below.)
      const bool ring_span = stage == kRing && SpanOf(pt) != 0;
      if (!ring_span &&
          (!SpanAligned(p, p.a_kcont(), p.sab, p.m, p.a_align) || !SpanAligned(p, !p.b_ncont(), p.sbb, p.n, p.b_align))) {
        return InvalidArgument("bulk: an operand's tiles are not 16-byte aligned runs of 16-byte rows");
      }
    }
    const int64_t span = SpanOf(pt);
    if (span < 0 || span > 4) return InvalidArgument("span is 0 to 4");
    if (span) {
      if (stage == kRing && span != 1) return InvalidArgument("ring: span is 0 or 1 (fragments read at the span's offset)");
      if (stage != kPipelined && stage != kRing) return InvalidArgument("span is a knob of the pipelined and ring strategies");
      if (span >= 3 && dev.arch < 90) return InvalidArgument("span 3 and 4: bulk copies (TMA) need sm_90 or newer");
      if (span == 4) {
        if (ahead != 1) return InvalidArgument("span 4: the tiles are repacked over the landing buffer: ahead is 1");
        // Its launch bounds take the blocks an SM by shared memory: one value of minb, not several equal points.
        if (pt.at("minb") != 1) return InvalidArgument("span 4: minb is 1 (the launch bounds follow the shared memory)");
        const int64_t q = 16 / p.elem();
        const int64_t sa = SpanPieces(p, bm, p.a_kcont(), p.m) * q, sb = SpanPieces(p, bn, !p.b_ncont(), p.n) * q;
        const int64_t ta = PaddedTileElems(p, bm, p.a_kcont()), tb = PaddedTileElems(p, bn, !p.b_ncont());
        const int64_t region = CeilDiv(std::max(ta + tb, sa + sb), q) * q, loff = (region - sa - sb) / q * q;
        if (loff + sa < ta) return InvalidArgument("span 4: A's padded tile would overwrite B's landed span");
        // A thread holds its share of one operand's span in registers between the repack's loads and stores.
        const int64_t warps = Threads(bm, bn, tm, tn) / 32;
        auto staged = [&](int64_t r, bool kc, int64_t rlim) {
          const int64_t w = kc ? p.k : rlim, rows = kc ? r : p.k;
          return CeilDiv(rows, warps) * CeilDiv(w, 32);
        };
        if (warps < 1 || staged(bm, p.a_kcont(), p.m) > 64 || staged(bn, !p.b_ncont(), p.n) > 64) {
          return InvalidArgument("span 4: over 64 elements of a span a thread held in registers");
        }
      }
      // The copies are 16-byte pieces whatever vec says: one value of it, not several equal points.
      if (vec != 1) return InvalidArgument("span copies 16-byte pieces: vec is 1");
      if (!SpanContiguous(p.a_kcont(), p.sam, p.sak, bm, p.m, p.k) ||
          !SpanContiguous(!p.b_ncont(), p.sbn, p.sbk, bn, p.n, p.k)) {
        return InvalidArgument("span: an operand's tile is not one contiguous span");
      }
      // Both operands' rows 16-byte aligned: the padded tiles of 16-byte copies (vec) do it without the span.
      if (SpanAligned(p, p.a_kcont(), p.sab, p.m, p.a_align) && SpanAligned(p, !p.b_ncont(), p.sbb, p.n, p.b_align)) {
        return InvalidArgument("span: both operands' rows are 16-byte aligned (vector copies)");
      }
    }
    const int64_t block_shared = BlockShared(p, pt);
    const int64_t items = CeilDiv(p.m, bm) * CeilDiv(p.n, bn) * p.batch;  // pipelined: work items
    if (tm > bm || tn > bn) return InvalidArgument("thread tile larger than the block tile");
    if (tm * tn > kMaxAccumulators) return InvalidArgument("too many accumulators per thread");
    const int64_t threads = Threads(bm, bn, tm, tn);
    if (threads < 32 || threads % 32 != 0) return InvalidArgument("threads (bm/tm x bn/tn) not a multiple of 32");
    if (threads > std::min(1024, dev.max_threads_per_block)) return InvalidArgument("too many threads");
    // Tiles beyond the matrix's next power of two compute nothing but padding.
    if (bm > std::max<int64_t>(16, NextPow2(p.m))) return InvalidArgument("block tile taller than the output");
    if (bn > std::max<int64_t>(16, NextPow2(p.n))) return InvalidArgument("block tile wider than the output");
    if (bk > std::max<int64_t>(8, NextPow2(p.k))) return InvalidArgument("k slice deeper than K");
    // Lopsided tiles reuse each loaded value less for the same registers or shared memory: within a factor
    // of 4, unless the matrix caps the smaller side.
    if (std::max(tm, tn) > 4 * std::min(tm, tn)) return InvalidArgument("thread tile more than 4x longer than wide");
    const int64_t cap_m = std::max<int64_t>(16, NextPow2(p.m)), cap_n = std::max<int64_t>(16, NextPow2(p.n));
    if ((bm > 4 * bn && bn < cap_n) || (bn > 4 * bm && bm < cap_m)) {
      return InvalidArgument("block tile more than 4x longer than wide");
    }
    if (stage == kDouble && CeilDiv(p.k, bk) < 2) return InvalidArgument("double buffering needs two k slices");
    if (vec * p.elem() > 16) return InvalidArgument("vector wider than 16 bytes");
    if (vec > 1) {
      if (stage == kDirect) return InvalidArgument("direct reads are one element (vectors: staged slices)");
      // A: along k or m; B: along n or k. The vector's dim must have unit stride, be divided by the
      // vector (vectors lie wholly inside or outside) and by the slice, and every other stride must keep
      // vectors aligned.
      const bool ak = p.a_kcont(), bn_c = p.b_ncont();
      const int64_t a_unit = ak ? p.sak : p.sam, a_ext = ak ? p.k : p.m, a_other = ak ? p.sam : p.sak;
      const int64_t kslice = stage == kResident || stage == kPipelined ? p.k : bk;  // one slice of all K
      const int64_t a_tile = ak ? kslice : bm;
      const int64_t b_unit = bn_c ? p.sbn : p.sbk, b_ext = bn_c ? p.n : p.k, b_other = bn_c ? p.sbk : p.sbn;
      const int64_t b_tile = bn_c ? bn : kslice;
      if (a_unit != 1 || b_unit != 1) return InvalidArgument("an operand has no unit-stride dim: scalar reads");
      if (a_ext % vec != 0 || b_ext % vec != 0) return InvalidArgument("vector does not divide a contiguous dim");
      if (a_tile % vec != 0 || b_tile % vec != 0) return InvalidArgument("vector does not divide the slice");
      if (a_other % vec != 0 || b_other % vec != 0 || p.sab % vec != 0 || p.sbb % vec != 0) {
        return InvalidArgument("strides would misalign vectors");
      }
      if (p.a_align < vec * p.elem() || p.b_align < vec * p.elem()) return InvalidArgument("inputs not aligned for the vector");
    }
    if (stage == kResident) {
      // The whole K of both tiles in shared memory (up to the opt-in limit), staged in rounds of 32
      // elements a thread; at most 128 elements an operand a thread (the unrolled staging code).
      if (CeilDiv(ResidentElems(p, bm, p.a_kcont(), vec), threads) > 128 ||
          CeilDiv(ResidentElems(p, bn, !p.b_ncont(), vec), threads) > 128) {
        return InvalidArgument("too many elements staged per thread");
      }
      if (SharedBytes(stage, bm, bn, bk, p.k) > dev.max_shared_bytes_per_block) {
        return InvalidArgument("the whole-K tiles exceed the shared memory of a block");
      }
    } else if (stage == kPipelined) {
      // cp.async moves 4, 8 or 16 bytes (its own vector rules are the staged ones, above, over all K).
      if (!span && vec * p.elem() < 4) return InvalidArgument("cp.async moves 4 bytes or more: vector narrower");
      // The copy loop is unrolled: at most 64 copies an operand a thread.
      // (A row's vectors round up to a power of two: the kernel's Tile4::VPRP; a span's pieces: Span4.)
      const int64_t a_vecs = span ? SpanPieces(p, bm, p.a_kcont(), p.m)
                                  : (p.a_kcont() ? bm * NextPow2(p.k / vec) : p.k * (bm / vec));
      const int64_t b_vecs = span ? SpanPieces(p, bn, !p.b_ncont(), p.n)
                                  : (!p.b_ncont() ? bn * NextPow2(p.k / vec) : p.k * (bn / vec));
      if (CeilDiv(a_vecs, threads) > 64 || CeilDiv(b_vecs, threads) > 64) {
        return InvalidArgument("too many copies per thread");
      }
      if (block_shared > dev.max_shared_bytes_per_block) {
        return InvalidArgument("the pipeline's whole-K tile buffers exceed the shared memory of a block");
      }
      if (ahead == 2 && CeilDiv(items, PipelinedGrid(p, pt, dev)) < 3) {
        return InvalidArgument("two items in flight ahead need three items a block");
      }
    } else if (stage == kBulk) {
      if (block_shared > dev.max_shared_bytes_per_block) {
        return InvalidArgument("the bulk pipeline's whole-K tile buffers exceed the shared memory of a block");
      }
      if (ahead > 1 && CeilDiv(items, PipelinedGrid(p, pt, dev)) < ahead + 1) {
        return InvalidArgument("items in flight ahead need one more item a block");
      }
    } else if (stage == kRing) {
      if (block_shared > dev.max_shared_bytes_per_block) {
        return InvalidArgument("the ring's whole-K tile buffers exceed the shared memory of a block");
      }
      if (RingThreads(pt) > std::min(1024, dev.max_threads_per_block)) {
        return InvalidArgument("ring: too many threads (bpb groups and the producer warp)");
      }
      // One block an SM by design (__launch_bounds__(block, 1)): one value of minb, not several equal points.
      if (pt.at("minb") != 1) return InvalidArgument("ring: minb is 1");
      // Outputs leave from registers (no block-wide barrier to stage them through shared memory): a thread's
      // column groups stored whole.
      // Span copies serve odd rows, whose outputs cannot be stored but element by element anyway.
      if (!span && StoreWidth(p, std::min<int64_t>(tn, 4)) != std::min<int64_t>(tn, 4)) {
        return InvalidArgument("ring: outputs are stored from registers, whole column groups (N too odd)");
      }
      if (ahead > 1 && CeilDiv(items, RingGrid(p, pt, dev)) < bpb + ahead) {
        return InvalidArgument("ring: buffers beyond one more than a group's need more items a block");
      }
    } else if (stage != kDirect) {
      const int64_t a_per = CeilDiv(bm * bk / vec, threads) * vec, b_per = CeilDiv(bk * bn / vec, threads) * vec;
      if (a_per > kMaxFetchRegs || b_per > kMaxFetchRegs) return InvalidArgument("too many elements fetched per thread");
      if (bm * bk < vec * 1 || bk * bn < vec) return InvalidArgument("slice smaller than a vector");
      if (SharedBytes(stage, bm, bn, bk, p.k) > std::min<int64_t>(kMaxSharedBytes, dev.max_shared_bytes_per_block)) {
        return InvalidArgument("slices exceed the shared memory budget");
      }
    }
    const int64_t minb = pt.at("minb");
    if (minb != 1 && minb != 2 && minb != 4) return InvalidArgument("minb is 1, 2 or 4");
    if (minb == 4) {
      // Four blocks of 128 (cap 128 registers) or 256 threads (cap 64): the cap binds and does not starve 8x8 tiles.
      if (threads < 128 || threads > 256) return InvalidArgument("four blocks a SM cap registers only for 128 or 256 threads");
      if (4 * (block_shared + 1024) > dev.shared_bytes_per_sm) {
        return InvalidArgument("four blocks do not fit an SM");
      }
      if (threads == 256 && tm * tn > 16) return InvalidArgument("64 registers cannot hold the thread's accumulators");
    }
    if (minb == 2) {
      // Two blocks' threads and shared memory must fit an SM; a cap below 64 registers a thread would spill.
      if (2 * threads > 2048 || 2 * (block_shared + 1024) > dev.shared_bytes_per_sm) {
        return InvalidArgument("two blocks do not fit an SM");
      }
      if (threads < 256) return InvalidArgument("two blocks a SM cap registers only for 256 threads or more");
    }
    if (stage == kPipelined || stage == kBulk || stage == kRing) {
      if (bpb > items) return InvalidArgument("more work items per block than tiles of matrices");
    } else if (bpb > 1) {
      if (!p.batched || bpb > p.batch) return InvalidArgument("more matrices per block than the batch has");
      if (bm < p.m || bn < p.n) return InvalidArgument("several matrices per block only where one tile covers a matrix");
    }
    const int64_t blocks = stage == kPipelined || stage == kBulk || stage == kRing ? CeilDiv(items, bpb) : CeilDiv(p.m, bm) * CeilDiv(p.n, bn) * CeilDiv(p.batch, bpb);
    if (blocks > std::numeric_limits<int32_t>::max()) return InvalidArgument("grid too large");
    return Status::Ok();
  }

  Point ExpertDefault(const Problem& problem, const DeviceFacts& dev) const override {
    const auto& p = static_cast<const MatmulProblem&>(problem);
    // Streaming stores where the output outgrows L2 (50 MB on the H200): it is not read again here.
    const int64_t hint = p.batch * p.m * p.n * p.elem() > (int64_t{64} << 20);
    // Not yet measured on the H200: the classic SIMT choices. The largest of these tiles that still gives
    // two blocks per SM (outer products of 8x8 per thread reuse each loaded value 8 times), 16-deep
    // slices double-buffered, the widest vector the layouts allow; a tile per small matrix, several
    // matrices a block while blocks stay plentiful.
    struct Shape { int64_t bm, bn, tm, tn; };
    const Shape shapes[] = {{128, 128, 8, 8}, {128, 64, 8, 4}, {64, 128, 4, 8}, {64, 64, 4, 4},
                            {64, 32, 4, 2},   {32, 64, 2, 4},  {32, 32, 2, 2},  {16, 32, 1, 2},
                            {32, 16, 2, 1},   {16, 16, 1, 1}};
    std::vector<Point> tries;
    // Compute-bound products (issue 7's tall-skinny ones: more FLOPs per byte moved than the H200's
    // FP32-FMA peak per byte of DRAM bandwidth, ~67 TFLOP/s / 4.1 TB/s = 16): resident tiles of 8x8 a
    // thread (64 FMAs per four float4 fragment reads). A resident block loads, then multiplies with no
    // global access, then stores; the overlap of those phases comes only from the other blocks on the SM,
    // and the FMA pipes need enough warps: so the block tile is the one that keeps the most threads resident
    // an SM (the least of the shared-memory limit of its whole-K tiles, the 65536 registers at ~128 a
    // thread, 2048 threads), ties to the most blocks (finer interleaving of load and multiply phases), then
    // to the wider tile (longer output row segments). K = 64: 64x128 (4 blocks of 128 threads, 51 KB each)
    // over 128x128 (2 of 256) and 128x256 (1 of 512), all 512 threads; K = 128: 128x256 (one 196 KB block
    // of 512 threads) over 64x128 and 128x128 (256 threads). The k loop is unrolled for 8 trips (bk =
    // K/8 within 8..32). Measured on the H200 (codegen 2 search): these were the best points of both keys.
    const double flops = 2.0 * p.batch * p.m * p.n * p.k;
    const double bytes = static_cast<double>(p.elem()) * p.batch * (p.m * p.k + p.k * p.n + p.m * p.n);
    if (flops > 16.0 * bytes) {
      struct Big { int64_t bm, bn; };
      const Big bigs[] = {{128, 256}, {256, 128}, {64, 128}, {128, 64}, {128, 128}, {64, 64}};
      int64_t best_threads = 0, best_blocks = 0;
      Point best;
      const int64_t bk = std::clamp<int64_t>(NextPow2(std::max<int64_t>(1, p.k / 8)), 8, 32);
      for (const Big& t : bigs) {
        const int64_t threads = Threads(t.bm, t.bn, 8, 8);
        const int64_t smem = SharedBytes(kResident, t.bm, t.bn, bk, p.k) + 1024;
        const int64_t per_sm = std::min({dev.shared_bytes_per_sm / smem, int64_t{dev.registers_per_sm} / (threads * 128),
                                         2048 / threads, int64_t{32}});
        const int64_t grid = CeilDiv(p.m, t.bm) * CeilDiv(p.n, t.bn) * p.batch;
        if (per_sm < 1 || grid < per_sm * dev.sm_count) continue;
        for (int64_t vec : {8, 4, 2, 1}) {
          // The register cap that lets per_sm blocks in (128 a thread): launch bounds of 4 blocks for 128
          // threads, 2 for 256; 512 threads are capped at 128 by their size alone.
          const int64_t minb = threads == 128 && per_sm >= 4 ? 4 : threads == 256 && per_sm >= 2 ? 2 : 1;
          Point pt{{"stage", kResident}, {"bm", t.bm}, {"bn", t.bn}, {"bk", bk}, {"tm", 8}, {"tn", 8}, {"vec", vec},
                   {"bpb", 1}, {"hint", hint}, {"minb", minb}, {"ahead", 1}, {"span", 0}};
          if (!Check(problem, pt, dev).ok()) continue;
          const int64_t resident = per_sm * threads;
          if (resident > best_threads || (resident == best_threads && per_sm > best_blocks)) {
            best_threads = resident;
            best_blocks = per_sm;
            best = pt;
          }
          break;
        }
      }
      if (best_threads >= 256) return best;
    }
    // Batches of small matrices (codegen 4; NOT yet measured on the H200, the reasoning only): the pipelined
    // strategy, one tile a matrix. Such a batch is memory-bound (a 64^3 f32 product moves 48 KB for 0.5
    // MFLOP: 11 FLOP a byte, under the 16 of the H200's FMA peak per byte of DRAM), and the resident
    // strategy's blocks load, then multiply: DRAM idles during the multiply unless other blocks of the SM
    // happen to be loading (codegen 3's best point: 1.48x the floor at 4096 x 64^3, and slower than cuBLAS
    // at 63^3). The pipelined block copies the next matrix with cp.async while it multiplies this one, its
    // grid one wave of blocks (bpb 1: as many as the SMs hold by shared memory and threads) sharing the
    // batch evenly. 128 threads of 4x8 (codegen 3's best resident thread tile), the widest copies the
    // layout allows (4 bytes a element for odd sizes, still asynchronous), 16 k values an unrolled trip.
    if (p.batched && p.batch >= 4 * dev.sm_count && p.m <= 128 && p.n <= 128 && p.k >= 16) {
      const int64_t bm = std::max<int64_t>(16, NextPow2(p.m)), bn = std::max<int64_t>(16, NextPow2(p.n));
      struct Thread { int64_t tm, tn; };
      // Rows not 16-byte aligned (odd sizes) of contiguous matrices: span copies of 16-byte pieces repacked
      // into padded tiles (codegen 5; Check declines the span where both operands' rows are aligned, so such
      // keys keep codegen 4's point). Timed on the H200 outside the evaluator at 4095 x 63^3 f32 (one
      // launch a CUDA event pair): 81.8 us with 8x4 a thread, 83.3 with 4x8, 85.3 reading the landed spans
      // in place (span 1), against 94.2 for codegen 4's best point (4-byte copies) and 92.5 for cuBLAS's
      // strided batched SGEMM.
      // Hopper's bulk copies (stage 5: one thread copies an item's tiles with one cp.async.bulk an operand)
      // where each operand's tile is one contiguous 16-byte-aligned run: measured on the H200 (sixth
      // session, 300 of the 4224 stage-5 points of 4096 x 64^3 f32 screened, 200 at 2048 and 8192), this
      // point was the best or within 1.5% of it at all three sizes: 35.1 / 60.9 / 114.4 us against stage 4's
      // default at 40.6 / 68.4 / 128.2 (1.42 / 1.23 / 1.17x the memory floor). Half-matrix row tiles (bm 32,
      // B's whole matrix a tile), 8x4 a thread, 4 items a block, plain stores.
      // Not the ring (stage 6), though it measured 1-5% faster for float32 64x64 outputs on the H200 (a2df7d8:
      // 33.6 / 58.5 / 108.4 us at 2048 / 4096 / 8192 matrices against this point's 34.6 / 60.8 / 114.4):
      // compute-sanitizer's racecheck reports hazards in its mbarrier handoff (H100, cc78a6f and 9af708d), so
      // kjitd never serves it and, as the default, it cost each such key a first trial and a 21 s check. On
      // the H100 this point served the 4096 x 64^3 key at 78.9 us against the ring's 79.9.
      {
        Point pt{{"stage", kBulk}, {"bm", std::min<int64_t>(bm, 32)}, {"bn", bn}, {"bk", 16}, {"tm", 8}, {"tn", 4},
                 {"vec", 1}, {"bpb", 4}, {"hint", 0}, {"minb", 1}, {"ahead", 1}, {"span", 0}};
        if (Check(problem, pt, dev).ok()) return pt;
      }
      // Plain stores even where the output outgrows L2: measured on the H200 (batches of 2559 to 8191 63^3 f32
      // matrices, codegen 5), of 49 pairs of span-2 points that differ only in the hint, streaming stores were
      // slower in 48, by 4-10% with this thread tile (8191 matrices: 158.6 vs 146.5 us).
      // Span 3 (sm_90: the pieces landed by bulk copies) where it is allowed: through the evaluator on the H200
      // (a9c9c81, 8x4 a thread, one ahead), 69.5 / 47.8 / 55.8 / 93.2 / 101.7 / 131.1 us at 4095 / 2559 / 3071 /
      // 5631 / 6143 / 8191 x 63^3 f32 against span 2's 77.0 / 52.5 / 61.0 / 102.5 / 111.3 / 144.6 in the same
      // run; at 4095, two ahead 72.2, 4x8 72.9, 4x4 80.7, 8x8 86.8. With codegen 7's repack (f6825e9): 68.2 /
      // 46.6 / 54.2 / 91.7 / 100.2 / 128.8 against span 2's 76.0 / 51.1 / 60.2 / 102.0 / 111.4 / 143.2.
      for (const Thread t : {Thread{8, 4}, Thread{4, 8}, Thread{4, 4}}) {
        for (const int64_t span : {3, 2}) {
          Point pt{{"stage", kPipelined}, {"bm", bm}, {"bn", bn}, {"bk", 16}, {"tm", t.tm}, {"tn", t.tn}, {"vec", 1},
                   {"bpb", 1}, {"hint", 0}, {"minb", 1}, {"ahead", 1}, {"span", span}};
          if (Check(problem, pt, dev).ok() &&
              2 * (PipelinedBytes(p, bm, bn, 1, span, Threads(bm, bn, t.tm, t.tn) * t.tn) + 1024) <= dev.shared_bytes_per_sm) {
            return pt;
          }
        }
      }
      for (const Thread t : {Thread{4, 8}, Thread{8, 4}, Thread{4, 4}, Thread{2, 4}, Thread{4, 2}, Thread{2, 2}}) {
        for (int64_t vec : {8, 4, 2, 1}) {
          Point pt{{"stage", kPipelined}, {"bm", bm}, {"bn", bn}, {"bk", 16}, {"tm", t.tm}, {"tn", t.tn}, {"vec", vec},
                   {"bpb", 1}, {"hint", hint}, {"minb", 1}, {"ahead", 1}, {"span", 0}};
          if (!Check(problem, pt, dev).ok()) continue;
          // Two blocks an SM at least (one's stores and pipeline fill beside the other's multiply).
          if (2 * (PipelinedBytes(p, bm, bn, 1) + 1024) > dev.shared_bytes_per_sm) break;
          return pt;
        }
      }
    }
    for (bool need_blocks : {true, false}) {
      for (const Shape& s : shapes) {
        const int64_t blocks = CeilDiv(p.m, s.bm) * CeilDiv(p.n, s.bn) * p.batch;
        if (need_blocks && blocks < 2 * dev.sm_count) continue;
        int64_t bpb = 1;
        // Matrices of little work (up to 32^3 multiply-adds) several a block, while blocks stay plentiful;
        // so too matrices a resident block fetches in one round (the next matrix's tiles in flight while
        // this one is multiplied and stored: codegen 3's prefetch).
        // (64x64 tiles of 4x4, 256 threads: 117 registers with the prefetch and float4 reads, 116 with
        // scalar reads, no spills under minb=2's cap; 61 and 96 without it.)
        const int64_t threads_s = Threads(s.bm, s.bn, s.tm, s.tn);
        const bool one_round = CeilDiv(ResidentElems(p, s.bm, p.a_kcont(), 1), threads_s) <= 32 &&
                               CeilDiv(ResidentElems(p, s.bn, !p.b_ncont(), 1), threads_s) <= 32;
        if (p.batched && s.bm >= p.m && s.bn >= p.n && (p.m * p.n * p.k <= 32 * 32 * 32 || one_round)) {
          while (bpb < 8 && CeilDiv(p.batch, bpb * 2) >= 8 * dev.sm_count) bpb *= 2;
        }
        // Resident first where two blocks of its whole-K tiles fit an SM (one block loads while the other
        // multiplies): K outer products from shared memory with no barrier between them, the register cap of
        // two 256-thread blocks (128) holding 8x8 accumulators and two fragment buffers without spills.
        const int64_t resident_bytes = SharedBytes(kResident, s.bm, s.bn, 8, p.k);
        if (2 * (resident_bytes + 1024) <= dev.shared_bytes_per_sm) {
          const int64_t threads = Threads(s.bm, s.bn, s.tm, s.tn);
          for (int64_t bk : {32, 16, 8}) {
            for (int64_t vec : {8, 4, 2, 1}) {
              tries.push_back(Point{{"stage", kResident}, {"bm", s.bm}, {"bn", s.bn}, {"bk", bk}, {"tm", s.tm},
                                    {"tn", s.tn}, {"vec", vec}, {"bpb", bpb}, {"hint", hint},
                                    {"minb", threads >= 256 ? 2 : 1}, {"ahead", 1}, {"span", 0}});
            }
          }
        }
        for (int64_t bk : {16, 8, 32}) {
          for (int64_t stage : {kDouble, kStaged}) {
            for (int64_t vec : {8, 4, 2, 1}) {
              tries.push_back(Point{{"stage", stage}, {"bm", s.bm}, {"bn", s.bn}, {"bk", bk}, {"tm", s.tm},
                                    {"tn", s.tn}, {"vec", vec}, {"bpb", bpb}, {"hint", hint}, {"minb", 1}, {"ahead", 1},
                                    {"span", 0}});
            }
          }
        }
      }
    }
    tries.push_back(Point{{"stage", kDirect}, {"bm", 16}, {"bn", 16}, {"bk", 8}, {"tm", 1},
                          {"tn", 2}, {"vec", 1}, {"bpb", 1}, {"hint", hint}, {"minb", 1}, {"ahead", 1}, {"span", 0}});
    for (const Point& t : tries) {
      if (Check(problem, t, dev).ok()) return t;
    }
    return tries.back();
  }

  Result<Candidate> Generate(const Problem& problem, const Point& pt, const DeviceFacts& dev) const override {
    KJIT_RETURN_IF_ERROR(Check(problem, pt, dev));
    const auto& p = static_cast<const MatmulProblem&>(problem);
    const int64_t stage = pt.at("stage"), bm = pt.at("bm"), bn = pt.at("bn"), bk = pt.at("bk"), tm = pt.at("tm"),
                  tn = pt.at("tn"), vec = pt.at("vec"), bpb = pt.at("bpb"), hint = pt.at("hint");
    const int64_t threads = Threads(bm, bn, tm, tn);
    // Span 4's blocks are small enough for more of them an SM than the registers of unbounded threads allow:
    // its launch bounds ask for as many as its grid assumes.
    const int64_t minb = stage == kPipelined && SpanOf(pt) == 4 ? BlocksPerSm(p, pt, dev, threads) : pt.at("minb");
    std::ostringstream src;
    src << codegen::SourceHead(*this, p, pt, dev, "FP32 fused multiply-adds only (no TF32), ascending k from +0, rounded once.");
    src << "typedef " << CudaType(p.dtype) << " in_t;\ntypedef in_t out_t;\n";
    src << "#define VEC " << vec << "\n#define HINT " << hint << "\n#define STAGE " << stage << "\n#define SPAN "
        << SpanOf(pt) << "\n";
    // Pipelined: the block's work items are blockIdx.x + j * GRID.
    const int64_t grid = stage == kRing ? RingGrid(p, pt, dev)
                         : stage == kPipelined || stage == kBulk ? PipelinedGrid(p, pt, dev)
                                             : CeilDiv(p.m, bm) * CeilDiv(p.n, bn) * CeilDiv(p.batch, bpb);
    src << "constexpr long long M_ = " << p.m << ", N_ = " << p.n << ", K_ = " << p.k << ", BATCH = " << p.batch << ";\n";
    src << "constexpr long long SAB = " << p.sab << ", SAM = " << p.sam << ", SAK = " << p.sak << ", SBB = " << p.sbb
        << ", SBK = " << p.sbk << ", SBN = " << p.sbn << ";\n";
    src << "constexpr int BM = " << bm << ", BN = " << bn << ", BK = " << bk << ", TM = " << tm << ", TN = " << tn
        << ", BPB = " << bpb << ", MINB = " << minb << ", THREADS = " << threads << ", SW = "
        << StoreWidth(p, stage == kResident || stage == kPipelined || stage == kBulk || stage == kRing ? std::min<int64_t>(tn, 4) : tn) << ", AHEAD = " << Ahead(pt)
        << ";\nconstexpr long long GRID = " << grid << ";\n";
    src << "constexpr bool A_KCONT = " << (p.a_kcont() ? "true" : "false")
        << ", B_NCONT = " << (p.b_ncont() ? "true" : "false") << ";\n";
    // The span copies' bounds (SPAN != 0; matmul.cuh's EXT_A and kin): each operand's view, x[0, A_VIEW), which
    // they read up to and no further, and whether every item's span starts 16-byte aligned in rows of 16 bytes.
    const int64_t view_a = (p.batch - 1) * p.sab + (p.m - 1) * p.sam + (p.k - 1) * p.sak + 1;
    const int64_t view_b = (p.batch - 1) * p.sbb + (p.k - 1) * p.sbk + (p.n - 1) * p.sbn + 1;
    src << "#define A_VIEW " << view_a << "\n#define B_VIEW " << view_b << "\n#define A_ALIGNED "
        << SpanAligned(p, p.a_kcont(), p.sab, p.m, p.a_align) << "\n#define B_ALIGNED "
        << SpanAligned(p, !p.b_ncont(), p.sbb, p.n, p.b_align) << "\n";
    src << codegen::kElementAccess << codegen::kRawAccess;
    // The k loops' unrolling: a k slice (kUnrollBk), the resident stage's two k values an iteration
    // (kUnrollHalf), the pipelined, bulk and ring stages' four (kUnrollQuarter). Enumerators, not macros
    // (nvcc expands no macro in #pragma unroll) nor variables (which PTX would hold as globals).
    src << "enum : int { kUnrollBk = " << bk << ", kUnrollHalf = " << std::max<int64_t>(1, bk / 2)
        << ", kUnrollQuarter = " << std::max<int64_t>(1, bk / 4) << " };\n";
    // The kernel: the same sections for every point, its strategy's and span variant's parts selected by #if on
    // STAGE and SPAN (matmul.cuh). The bulk copies (sm_90) sit inside the #if that ends kSpanRepack (and that
    // kBulkBody closes), which only stages 5 and 6 and spans 3 and 4 take.
    src << kBody << kSpanRepack << codegen::kBulkCopy << kBulkBody << kEntry;
    Candidate c;
    c.source = src.str();
    c.entry_point = "kjit_matmul";
    c.launch.block[0] = static_cast<uint32_t>(stage == kRing ? RingThreads(pt) : threads);
    c.launch.grid[0] = static_cast<uint32_t>(grid);
    c.launch.dynamic_shared_bytes = static_cast<uint32_t>(BlockShared(p, pt));
    codegen::FinishCandidate(*this, pt, c);
    return c;
  }
};

}  // namespace

const Family* MatmulFamily() {
  static const Matmul family;
  return &family;
}

}  // namespace kjit::policy
