// Design spaces: what kernels kjit can build for an operator call, as data.
//
// An op family (softmax, layer_norm, ...) lives in one folder under policy/
// and implements Family. For a key it serves, the family says
//   - the problem it sees in the key (Match): sizes, dtypes, layout, parsed once;
//   - the space (Space): knobs and their domains, each a short list of integers;
//   - which points are valid for this problem on this device (Check), with the
//     reason when not, so a policy never proposes an invalid point and a person
//     can see why a point is out;
//   - the point an expert would pick without measuring (ExpertDefault);
//   - the kernel for a point (Generate): CUDA C++ for NVRTC, specialised to the
//     key's sizes, with its entry point and launch shape, following the kernel
//     ABI in daemon/worker_protocol.h.
// A key the family cannot serve is declined (Match fails with the reason);
// it is never served wrongly. The registry maps keys to families, so adding a
// family means adding a folder that registers itself (kjit_family in its
// CMakeLists.txt; see policy/README.md), not touching the daemon or the shim.
// The shape of this follows TVM MetaSchedule's SpaceGenerator.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kjit/cache/record.h"
#include "kjit/policy/op_traits.h"
#include "kjit/runtime/op_key.h"
#include "kjit/runtime/status.h"

namespace kjit::policy {

// The device facts validity rules depend on.
struct DeviceFacts {
  int arch = 90;
  int sm_count = 132;
  int max_threads_per_block = 1024;
  int max_shared_bytes_per_block = 232448;  // with opt-in
  int shared_bytes_per_sm = 233472;
  int registers_per_sm = 65536;
  int max_cluster_size = 8;  // portable cluster size
  // The largest cluster with the non-portable opt-in (the runtime's GetFunction opts in a kernel compiled
  // for more than 8 blocks). Whether one fits with a kernel's blocks is the occupancy's call at launch.
  int max_nonportable_cluster_size = 16;
  // The H200 (sm_90) as the GPU machine reports it: the facts used when no device is at hand (CI).
  static DeviceFacts H200();
};

struct Knob {
  std::string name;
  std::vector<int64_t> values;  // the domain, in the order a person would list it
  std::string help;             // what it changes in the kernel
};

struct Space {
  std::string family;
  std::vector<Knob> knobs;
  // Knobs added to a family later: the value that a point recorded before one
  // existed (a dataset row without it) had in effect. A knob not listed here
  // and absent from a point puts the point outside today's space.
  std::map<std::string, int64_t> absent_as;
  // Number of points in the full cross product (valid or not).
  uint64_t size() const;
};

// A point: one value per knob, by name.
using Point = std::map<std::string, int64_t>;

// "threads=256 vec=4 ..." in knob order, for logs and tests.
std::string PointToString(const Point& point);
// The DesignPoint stored with a kernel: family, knobs as strings, and who proposed it.
cache::DesignPoint ToDesignPoint(const std::string& family, const Point& point, const std::string& policy_version);

// A kernel for a point, ready for the evaluator.
struct Candidate {
  std::string source;
  std::string entry_point;
  std::vector<std::string> options;
  cache::LaunchShape launch;
  cache::DesignPoint design;
};

// What a family parsed from a key. Families derive from it.
struct Problem {
  virtual ~Problem() = default;
  std::string op;           // "aten::_softmax"
  std::string description;  // one line, e.g. "softmax f32 rows=64 len=1048576 (last dim)"
};

class Family {
 public:
  virtual ~Family() = default;
  virtual std::string_view name() const = 0;
  // Bumped whenever generated code changes for some point. Measurements and dataset rows carry it (a point's
  // time at another codegen is not this code's); stored kernels do not depend on it (cache::RunningToolchain
  // records codegen 0: a record holds its own CUBIN, which stays what was verified).
  virtual int codegen_version() const = 0;
  // The aten ops (schema names) this family can serve.
  virtual std::vector<std::string> ops() const = 0;
  // The aten ops whose calls this family fuses in chains (keys of several calls): the shim records their calls
  // into chains (PreFilter kChainMember) and never keys one alone. Empty for the one-op families.
  virtual std::vector<std::string> chain_ops() const { return {}; }
  // What the evaluator must know about those ops (domains, tolerances).
  virtual OpTraits traits(std::string_view op) const;
  // Keys the family serves, covering its strategies and dtypes: what CI
  // compiles every point of (or a pairwise cover) and the GPU script verifies.
  virtual std::vector<OpKey> SampleKeys() const = 0;

  // Parses the key; kInvalidArgument saying why when the family declines it.
  virtual Result<std::unique_ptr<Problem>> Match(const OpKey& key) const = 0;
  virtual Space MakeSpace(const Problem& problem, const DeviceFacts& device) const = 0;
  // OK if the point is valid for the problem on the device; otherwise why not.
  virtual Status Check(const Problem& problem, const Point& point, const DeviceFacts& device) const = 0;
  virtual Point ExpertDefault(const Problem& problem, const DeviceFacts& device) const = 0;
  // The kernel for a valid point.
  virtual Result<Candidate> Generate(const Problem& problem, const Point& point, const DeviceFacts& device) const = 0;
};

// Calls `visit` on every point of the space's cross product, in odometer order (the last knob fastest), until
// it returns false. The point is rewritten in place between calls: copy it to keep it.
void ForEachPoint(const Space& space, const std::function<bool(const Point&)>& visit);

// Every valid point of the space, in a fixed order (the cross product,
// filtered by Check). `limit` stops early (0: no limit).
std::vector<Point> ValidPoints(const Family& family, const Problem& problem, const DeviceFacts& device,
                               size_t limit = 0);

// A subset of the valid points in which every value of every knob and every
// pair of values of two knobs that occur together in some valid point occur
// together at least once (greedy pairwise cover): the CI sweep when the full
// space takes too long to compile.
std::vector<Point> PairwiseCover(const Family& family, const Problem& problem, const DeviceFacts& device);
// The same cover of any list of points (indices into `points`, in the order chosen): of a replay task's
// measured points, or of the points a filter leaves.
std::vector<size_t> PairwiseCoverOf(const std::vector<Point>& points);

// The families kjit knows, in registration order.
const std::vector<const Family*>& Families();
// The family that serves a key, with its problem; kNotFound listing every
// family's reason when none does.
struct Match {
  const Family* family = nullptr;
  std::unique_ptr<Problem> problem;
};
Result<Match> FindFamily(const OpKey& key);

}  // namespace kjit::policy
