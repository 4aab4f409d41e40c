// zero_optimizer.h: ZeRO-1/2 AdamW: optimizer state for this rank's shard only, then an all-gather
// of the updated parameters.
#pragma once

#include <cstddef>
#include <vector>

#include "ft/core/allocator.h"
#include "ft/trainer/communicator.h"
#include "ft/trainer/grad_sync.h"
#include "ft/trainer/model.h"

namespace ft::trainer {

struct AdamWSettings {
  float beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f, weight_decay = 0.1f;
};

// Owns AdamW's m and v for rank r's shard of ShardLayout (part r of every unit: about
// num_params / dp elements each instead of num_params). The gradients it reads are the
// reduced ones in the model's flat buffer at this shard's positions (ZeRO-1: the whole buffer
// is reduced; ZeRO-2: only these positions are). `staging` is a buffer of
// layout.max_bucket_elems() floats it may use while no gradient sync is running (GradSync's).
class ZeroOptimizer {
 public:
  // `tp`: the tensor-parallel group when the model is TP-sharded (tp_size() > 1), else nullptr.
  ZeroOptimizer(GptModel& model, Communicator& dp, CachingAllocator& alloc,
                const ShardLayout& layout, float* staging, Communicator* tp = nullptr);

  // Sum of squares of the reduced gradients of the whole model: this shard's, summed over the
  // DP group, and under TP the TP-sharded tensors' part summed over the TP group as well (the
  // replicated tensors count once): the global norm for clipping and the fp16 overflow check,
  // equal on every rank.
  double grad_sum_squares();
  // AdamW step t (1-based) on this shard, then every rank's updated shard is all-gathered into
  // the flat parameters and the low-precision copies are refreshed. Returns the milliseconds
  // spent in the all-gather (packing included).
  double update(float lr, const AdamWSettings& s, float grad_scale, int t);

  float* m() { return m_.data(); }
  float* v() { return v_.data(); }
  size_t shard_size() const { return layout_.shard_size(); }

 private:
  GptModel& model_;
  Communicator& dp_;
  Communicator* tp_;
  ShardLayout layout_;
  std::vector<ShardLayout::Copy> pieces_;  // this rank's shard as flat ranges
  float* staging_;
  Buffer<float> m_, v_;  // (shard_size)
};

}  // namespace ft::trainer
