// ChainRecorder: the recording half of shim/FUSION.md's design (b), torch-free. A thread's wrappers of fusible
// ops append one CallRecord per call; the recorder groups the records into chains by dataflow, builds each
// chain's key and counts how often the program repeats it, so that the chains worth fusing can be reported to
// kjitd as misses are today.
//
// Grouping. Records are taken in program order. Two records are in one chain when one reads a tensor the other
// wrote (an input id equal to an earlier record's output id), transitively: the connected components of the
// dataflow, not single paths (minGPT's GELU computes `0.5 * x` first, and it joins the rest of the chain only
// through the last multiply). A record joins only chains still open: a chain closes once `window` records have
// passed its last member (a tensor written long before is an input of a chain, not part of it), and Flush()
// closes every chain.
//
// The chain key. First a kjit::input(Tensor) for each tensor from outside the chain that several arguments use
// (first use first); then the members' one-call keys' calls in program order, where a tensor argument whose id is
// an earlier member's output becomes ValueRef{that member's call, 0} and one with a kjit::input a ValueRef to it;
// then kjit::live(IntList) lists the members whose outputs no member reads (the chain's results). Outputs that a member reads and something outside the recorded
// ops may also read (Python, a view, autograd) cannot be seen here: a server of the chain checks those at run
// time (FUSION.md, "Serving", step 3). Chains of one call are not chains and are dropped.
//
// Ids are the caller's: a tensor's identity while it lives (its TensorImpl address mixed with its data pointer,
// say). An id reused after a tensor died would join two unrelated calls (eager PyTorch frees a temporary as soon
// as Python drops it, and its allocator hands the same memory to the next one): CallRecord::pins keeps a
// record's ids unique while the recorder holds it, i.e. while its chain is open.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>
#include <utility>

#include "kjit/runtime/hash.h"
#include "kjit/runtime/op_key.h"

namespace kjit::shim {

struct CallRecord {
  OpCall call;                     // the call as its one-call key holds it
  std::vector<uint64_t> input_ids;  // per argument of `call`: the tensor's id, 0 for an argument that is no tensor
  uint64_t output_id = 0;          // the call's (single) output tensor's id
  uint16_t arch = 0;
  uint32_t numerics = 0;
  // Whatever keeps the ids above from being reused while the recorder holds this record (the adapter's:
  // kjit::torch::PinTensorIds). Without it, a temporary that died and a new one made at its address would join
  // unrelated calls.
  std::shared_ptr<const void> pins;
};

struct RecordedChain {
  OpKey key;
  uint64_t count = 0;  // times the program ran it
};

class ChainRecorder {
 public:
  // `window`: how many records back a call may find a producer, and how long a chain stays open.
  // `max_chains`: distinct chains counted at most (a program that makes ever new shapes makes ever new keys:
  // the ones after the first `max_chains` are not counted).
  explicit ChainRecorder(size_t window = 16, size_t max_chains = 4096)
      : window_(window == 0 ? 1 : window), max_chains_(max_chains) {}

  void Add(CallRecord record);
  // Closes every open chain (at a synchronisation, or before reading the counts).
  void Flush();
  // Sampling's edges. A burst of recorded calls that starts after calls went unrecorded may start inside a chain,
  // and one that ends may end inside one: a chain whose first record is among such a burst's first `window`
  // records, or that is still open when the burst ends, may lack members, and is not counted (only whole chains
  // are keyed: a program's partial chains would be tuned, and served in the way of the whole ones). BeginBurst:
  // the thread's next record follows fusible calls that were not recorded.
  void BeginBurst();
  // Drops the open chains uncounted (a burst's end).
  void Discard();

  // Chains seen at least `min_count` times and not returned before, most frequent first.
  std::vector<RecordedChain> TakeRepeated(uint64_t min_count);
  // Every distinct chain closed so far, with its count (tests and `kjit report`).
  std::vector<RecordedChain> Chains() const;
  uint64_t records() const { return records_; }

  // The key of `members` (records in program order), as described above. Exposed for tests.
  static OpKey KeyOf(const std::vector<const CallRecord*>& members);

 private:
  struct Member {
    uint64_t seq = 0;  // the record's place in the thread's calls
    CallRecord record;
  };
  struct Open {
    std::vector<Member> members;  // in program order
    uint64_t last = 0;            // seq of its last member
  };
  struct Seen {
    OpKey key;
    uint64_t count = 0;
    bool taken = false;
  };
  void Close(Open& chain);
  void CloseStale();

  size_t window_;
  size_t max_chains_;
  uint64_t records_ = 0;
  uint64_t uncertain_until_ = 0;  // chains whose first record's seq is at most this may lack their head
  // Chains still open: a handful at most (each closes `window` records after its last member), so a new record
  // finds its producers by scanning them.
  std::deque<Open> open_;
  std::unordered_map<Hash128, Seen, Hash128Hasher> seen_;
};

// Which of a thread's fusible calls are recorded. Recording a call keys it (about what a miss costs), so a
// thread records its first `learn` fusible calls, then bursts of `burst` consecutive calls once every `period`:
// in its steady state a program pays for burst/period of its fusible calls (1/64 by default), and a chain,
// much shorter than a burst, is seen whole in each burst but the ones it straddles.
class RecordingGate {
 public:
  RecordingGate(uint64_t learn = 8192, uint64_t burst = 1024, uint64_t period = 65536)
      : learn_(learn), burst_(burst), period_(period == 0 ? 1 : period) {}
  // Whether the next call is recorded. *burst_ended: the call before it was the last one recorded for a while
  // (the recorder drops its open chains then: ids do not carry across the gap). *burst_started (if given): this
  // call is the first of a burst that follows unrecorded calls.
  bool Next(bool* burst_ended, bool* burst_started = nullptr) {
    const uint64_t n = calls_++;
    const bool record = n < learn_ || n % period_ < burst_;
    *burst_ended = recording_ && !record;
    if (burst_started != nullptr) *burst_started = record && !recording_ && n > 0;
    recording_ = record;
    return record;
  }

 private:
  uint64_t learn_, burst_, period_;
  uint64_t calls_ = 0;
  bool recording_ = false;
};

// A thread's recording: its gate, its recorder, and when its repeated chains are reported. Torch-free; the
// adapter keeps one per thread and makes the records.
class ThreadChains {
 public:
  // A chain is reported once it was seen `report_after` times; the recorder is asked every `check_every` records.
  explicit ThreadChains(RecordingGate gate = RecordingGate(), uint64_t report_after = 3, uint64_t check_every = 64)
      : gate_(gate), report_after_(report_after), check_every_(check_every == 0 ? 1 : check_every) {}

  // Whether the thread's next fusible call is recorded (the gate; flushes the recorder after a burst).
  bool ShouldRecord() {
    bool ended = false, started = false;
    const bool record = gate_.Next(&ended, &started);
    if (ended) recorder_.Discard();
    if (started) recorder_.BeginBurst();
    return record;
  }
  // Adds a recorded call; returns the chains due for a report now (each chain once per thread).
  std::vector<RecordedChain> Add(CallRecord record) {
    recorder_.Add(std::move(record));
    if (recorder_.records() % check_every_ != 0) return {};
    return recorder_.TakeRepeated(report_after_);
  }
  const ChainRecorder& recorder() const { return recorder_; }

 private:
  RecordingGate gate_;
  ChainRecorder recorder_;
  uint64_t report_after_, check_every_;
};

}  // namespace kjit::shim
