#include "kjit/policy/learn/train.h"

namespace kjit::policy::learn {

Result<int64_t> SaveCheckpoint(cache::KernelCache& cache, const Agent& agent) {
  cache::PolicyCheckpoint c;
  c.version = agent.version();
  c.blob = agent.Serialize();
  c.status = "good";
  return cache.checkpoints().PutCheckpoint(std::move(c));
}

Result<std::unique_ptr<Agent>> LoadLatestCheckpoint(cache::KernelCache& cache, std::vector<std::string>* notes) {
  while (true) {
    auto c = cache.checkpoints().LatestGoodCheckpoint();
    if (!c.ok()) return c.status();
    auto agent = Agent::Deserialize(c->blob);
    if (agent.ok()) return agent;
    if (notes != nullptr) {
      notes->push_back("policy checkpoint " + std::to_string(c->id) + " (" + c->version +
                       ") set aside: " + agent.status().ToString());
    }
    // Without this the same checkpoint would come back forever.
    KJIT_RETURN_IF_ERROR(cache.checkpoints().SetCheckpointAside(c->id));
  }
}

}  // namespace kjit::policy::learn
