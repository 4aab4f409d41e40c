// zero_optimizer.cpp: AdamW over this rank's shard (ZeRO-1/2), global grad norm, parameter
// all-gather by bucket.
#include "ft/trainer/zero_optimizer.h"

#include <chrono>
#include <cstring>

#include "ft/core/annotate.h"
#include "ft/trainer/ops.h"

namespace ft::trainer {

ZeroOptimizer::ZeroOptimizer(GptModel& model, Communicator& dp, CachingAllocator& alloc,
                             const ShardLayout& layout, float* staging, Communicator* tp)
    : model_(model),
      dp_(dp),
      tp_(model.tp_size() > 1 ? tp : nullptr),
      layout_(layout),
      pieces_(layout.shard_pieces(dp.rank())),
      staging_(staging) {
  m_ = Buffer<float>(alloc, layout_.shard_size(), "zero.adam_m");
  v_ = Buffer<float>(alloc, layout_.shard_size(), "zero.adam_v");
  std::memset(m_.data(), 0, m_.size() * sizeof(float));
  std::memset(v_.data(), 0, v_.size() * sizeof(float));
}

double ZeroOptimizer::grad_sum_squares() {
  double sums[2] = {0, 0};  // this shard's TP-split tensors, its replicated ones
  for (const auto& c : pieces_) {
    const GptModel::SquareSums s = model_.grad_square_sums(c.flat, c.flat + c.n);
    sums[0] += s.sharded;
    sums[1] += s.replicated;
  }
  dp_.all_reduce_sum(sums, 2);
  if (tp_) tp_->all_reduce_sum(&sums[0], 1);
  return sums[0] + sums[1];
}

double ZeroOptimizer::update(float lr, const AdamWSettings& s, float grad_scale, int t) {
  float* p = model_.params();
  const float* g = model_.grads();
  for (const auto& c : pieces_) {
    ops::adamw_update(p + c.flat, g + c.flat, m_.data() + c.other, v_.data() + c.other, c.n, lr,
                      s.beta1, s.beta2, s.eps, c.decays ? s.weight_decay : 0.0f, grad_scale, t);
  }
  FT_RANGE("zero.all_gather", RangeKind::kComm);
  const auto t0 = std::chrono::steady_clock::now();
  const size_t r = static_cast<size_t>(dp_.rank());
  for (const auto& b : layout_.buckets()) {
    float* mine = staging_ + r * b.part;
    for (const auto& c : b.blocks[r])
      std::memcpy(staging_ + c.other, p + c.flat, c.n * sizeof(float));
    dp_.all_gather(mine, staging_, b.part);
    for (size_t q = 0; q < b.blocks.size(); ++q) {
      for (const auto& c : b.blocks[q]) {
        if (q != r) std::memcpy(p + c.flat, staging_ + c.other, c.n * sizeof(float));
        model_.refresh_low_precision(c.flat, c.n);
      }
    }
  }
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace ft::trainer
