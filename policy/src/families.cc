// The op families kjit knows. A new family is a folder under policy/ and one line here.
#include "kjit/policy/design_space.h"
#include "batch_norm/batch_norm.h"
#include "depthwise_conv/depthwise_conv.h"
#include "group_norm/group_norm.h"
#include "layer_norm/layer_norm.h"
#include "matmul/matmul.h"
#include "pool/pool.h"
#include "reduce/reduce.h"
#include "scan/scan.h"
#include "softmax/softmax.h"

namespace kjit::policy {

const std::vector<const Family*>& Families() {
  static const std::vector<const Family*> families = [] {
    std::vector<const Family*> f;
    f.push_back(SoftmaxFamily());
    f.push_back(LayerNormFamily());
    f.push_back(BatchNormFamily());
    f.push_back(GroupNormFamily());
    f.push_back(ScanFamily());
    f.push_back(PoolFamily());
    f.push_back(ReduceFamily());
    f.push_back(DepthwiseConvFamily());
    f.push_back(MatmulFamily());
    // Each family declares what the evaluator must know about its ops.
    for (const Family* family : f) {
      for (const std::string& op : family->ops()) DeclareOpTraits(op, family->traits(op));
    }
    return f;
  }();
  return families;
}

}  // namespace kjit::policy
