#include "kjit/policy/op_traits.h"

#include <mutex>
#include <utility>

namespace kjit::policy {
namespace {

struct Registry {
  std::mutex mu;
  std::map<std::string, OpTraits, std::less<>> traits;
};

// Leaked on purpose: op families may declare traits from static initializers
// and workers may look them up during exit, in any order.
Registry& GetRegistry() {
  static auto* registry = new Registry;
  return *registry;
}

}  // namespace

OpTraits DefaultOpTraits() { return OpTraits{}; }

OpTraits TraitsFor(std::string_view op) {
  Registry& r = GetRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.traits.find(op);
  return it == r.traits.end() ? DefaultOpTraits() : it->second;
}

double FlopsOf(const OpKey& key) {
  if (key.calls.size() == 1) {
    const OpCall& call = key.calls[0];
    if ((call.op == "aten::mm" || call.op == "aten::bmm") && call.args.size() >= 2) {
      const auto* a = std::get_if<TensorDesc>(&call.args[0]);
      const auto* b = std::get_if<TensorDesc>(&call.args[1]);
      if (a && b && a->sizes.size() >= 2 && !b->sizes.empty()) {
        return 2.0 * static_cast<double>(a->numel()) * static_cast<double>(b->sizes.back());
      }
    }
    return TraitsFor(call.op).flops;
  }
  return 0;
}

int64_t SummedTermsOf(const OpKey& key) {
  if (key.calls.size() != 1) return 0;
  const OpCall& call = key.calls[0];
  if ((call.op == "aten::mm" || call.op == "aten::bmm") && !call.args.empty()) {
    if (const auto* a = std::get_if<TensorDesc>(&call.args[0]); a && !a->sizes.empty()) return a->sizes.back();
  }
  return 0;
}

void DeclareOpTraits(std::string op, OpTraits traits) {
  Registry& r = GetRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.traits.insert_or_assign(std::move(op), std::move(traits));
}

}  // namespace kjit::policy
