// Serving a chain (shim/FUSION.md, design (b), "Serving"), the torch-free half: a chain key read as the calls a
// thread must make for its fused kernel to stand in for them (ChainPlan), and the check of a thread's calls
// against it, one call at a time (ChainMatch). The adapter (KJIT_FUSION=serve) defers the matched calls: it
// returns their outputs unwritten and launches the fused kernel only once the chain is complete and the next
// operation of the thread arrives, or runs the deferred calls with PyTorch's own kernels if anything else comes
// first. Nothing here touches a tensor: calls are described as the recorder describes them (CallRecord's call
// and ids: kjit::torch::ChainMemberCall and TensorId).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "kjit/runtime/op_key.h"
#include "kjit/runtime/status.h"

namespace kjit::shim {

class ChainPlan {
 public:
  // The plan of a chain key: InvalidArgument for a key ChainLiveOf refuses, one without at least two calls that
  // are not pseudo-calls, or a ValueRef to anything but an earlier call's only output.
  static Result<ChainPlan> Of(OpKey key);

  const OpKey& key() const { return key_; }
  // The calls a thread makes (the key's calls but its kjit::input and kjit::live), in order, as key call indices.
  const std::vector<uint32_t>& members() const { return members_; }
  const OpCall& member(size_t i) const { return key_.calls[members_[i]]; }
  // Member indices whose outputs the fused kernel writes (the key's kjit::live, or its last call), increasing.
  const std::vector<uint32_t>& written() const { return written_; }
  // The key call index's member index, or -1 for a pseudo-call.
  int MemberOf(uint32_t call) const { return call < member_of_.size() ? member_of_[call] : -1; }

 private:
  OpKey key_;
  std::vector<uint32_t> members_;
  std::vector<int> member_of_;
  std::vector<uint32_t> written_;
};

// The check of one thread's calls against a plan. A call is the plan's next member when it has the member's op
// and overload, and argument by argument: the same scalar or None; for a tensor of the key, a tensor of the same
// description; for a ValueRef to an earlier member, that member's output (by id: the tensor the adapter returned
// for it); for a ValueRef to a kjit::input, the one tensor every use of it passes (by id; the first use fixes it,
// and its description must be the input's).
class ChainMatch {
 public:
  explicit ChainMatch(const ChainPlan& plan) : plan_(&plan), bound_(plan.key().calls.size(), 0) {}

  // Whether `call` (with `ids`, per argument: TensorId, 0 for no tensor) is the next member. On true the caller
  // makes the call's output and passes its id to Bind before the next call.
  bool Next(const OpCall& call, std::span<const uint64_t> ids);
  void Bind(uint64_t output_id);

  size_t matched() const { return matched_; }
  bool complete() const { return matched_ == plan_->members().size(); }
  const ChainPlan& plan() const { return *plan_; }

 private:
  const ChainPlan* plan_;
  std::vector<uint64_t> bound_;  // per key call: its output's id (a kjit::input's: its tensor's), 0 while unbound
  size_t matched_ = 0;
  bool awaiting_bind_ = false;
};

// Which members' outputs are still needed once the chain is complete: member i's output is needed when something
// besides the window holds it (`holders[i]`, the output tensor's use count, above `window_refs[i]`, the window's
// own references: its pending call's output and later pending calls' arguments). The fused kernel may stand in
// for the chain only if it writes every needed output: true then.
bool FusedKernelCovers(const ChainPlan& plan, std::span<const long> holders, std::span<const long> window_refs);

}  // namespace kjit::shim
