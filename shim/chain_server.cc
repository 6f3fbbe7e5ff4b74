#include "chain_server.h"

#include <algorithm>
#include <utility>
#include <variant>

namespace kjit::shim {

Result<ChainPlan> ChainPlan::Of(OpKey key) {
  KJIT_ASSIGN_OR_RETURN(ChainLive live, ChainLiveOf(key));
  ChainPlan plan;
  plan.member_of_.assign(live.calls, -1);
  for (uint32_t i = 0; i < live.calls; ++i) {
    const OpCall& call = key.calls[i];
    for (const Arg& a : call.args) {
      const auto* ref = std::get_if<ValueRef>(&a);
      if (ref != nullptr && (ref->call >= i || ref->output != 0)) {
        return InvalidArgument("call " + std::to_string(i) + " refers to no earlier call's output");
      }
    }
    if (call.op == kChainInputOp) continue;
    plan.member_of_[i] = static_cast<int>(plan.members_.size());
    plan.members_.push_back(i);
  }
  if (plan.members_.size() < 2) return InvalidArgument("a chain of at least two calls is needed");
  for (uint32_t l : live.live) {
    if (plan.member_of_[l] < 0) return InvalidArgument("kjit::live names a kjit::input");
    plan.written_.push_back(static_cast<uint32_t>(plan.member_of_[l]));
  }
  plan.key_ = std::move(key);
  return plan;
}

bool ChainMatch::Next(const OpCall& call, std::span<const uint64_t> ids) {
  if (awaiting_bind_ || complete()) return false;
  const uint32_t at = plan_->members()[matched_];
  const OpCall& want = plan_->key().calls[at];
  if (call.op != want.op || call.overload != want.overload || call.args.size() != want.args.size() ||
      ids.size() != call.args.size()) {
    return false;
  }
  // Bindings of kjit::inputs made by this call, undone if a later argument does not match.
  std::vector<uint32_t> bound_here;
  auto undo = [&] {
    for (uint32_t c : bound_here) bound_[c] = 0;
    return false;
  };
  for (size_t j = 0; j < want.args.size(); ++j) {
    if (const auto* ref = std::get_if<ValueRef>(&want.args[j])) {
      const OpCall& source = plan_->key().calls[ref->call];
      if (source.op == kChainInputOp) {
        if (bound_[ref->call] == 0) {
          const auto* desc = std::get_if<TensorDesc>(&call.args[j]);
          if (ids[j] == 0 || desc == nullptr || !(*desc == std::get<TensorDesc>(source.args[0]))) return undo();
          bound_[ref->call] = ids[j];
          bound_here.push_back(ref->call);
        } else if (ids[j] != bound_[ref->call]) {
          return undo();
        }
      } else if (ids[j] == 0 || ids[j] != bound_[ref->call]) {
        return undo();
      }
      continue;
    }
    if (!(call.args[j] == want.args[j])) return undo();
    // A tensor of the key's is one from outside the chain: it must not be one of the chain's own values.
    if (ids[j] != 0) {
      for (uint64_t b : bound_) {
        if (b == ids[j]) return undo();
      }
    }
  }
  awaiting_bind_ = true;
  return true;
}

void ChainMatch::Bind(uint64_t output_id) {
  if (!awaiting_bind_) return;
  bound_[plan_->members()[matched_]] = output_id;
  awaiting_bind_ = false;
  ++matched_;
}

bool FusedKernelCovers(const ChainPlan& plan, std::span<const long> holders, std::span<const long> window_refs) {
  const size_t n = plan.members().size();
  if (holders.size() != n || window_refs.size() != n) return false;
  for (size_t i = 0; i < n; ++i) {
    if (holders[i] <= window_refs[i]) continue;  // nobody but the window holds it: dead
    if (std::find(plan.written().begin(), plan.written().end(), i) == plan.written().end()) return false;
  }
  return true;
}

}  // namespace kjit::shim
