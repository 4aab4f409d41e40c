// zero3.h: ZeRO-3 over data parallelism: each rank holds 1/D of every parameter, gradient and
// AdamW moment; a block's parameters are all-gathered just before use and freed after it.
#pragma once

#include <array>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "ft/core/allocator.h"
#include "ft/trainer/communicator.h"
#include "ft/trainer/model.h"
#include "ft/trainer/zero_optimizer.h"

namespace ft::trainer {

// The flat model cut into units: unit l < L is block l's 12 tensors (in ParamIndex order, its
// layer slices concatenated), unit L the non-block tensors (wte, wpe, lnfw, lnfb). Each unit
// is split into D equal parts (the last padded); rank r's shard is part r of every unit, in
// unit order.
class Zero3Layout {
 public:
  // `tp` > 1: units of this rank's tensor-parallel shard (the split tensors shrink by tp).
  Zero3Layout(const GptConfig& config, int ranks, int tp = 1);
  int units() const { return static_cast<int>(elems_.size()); }
  size_t unit_elems(int u) const { return elems_[static_cast<size_t>(u)]; }
  size_t part(int u) const { return part_[static_cast<size_t>(u)]; }
  size_t shard_offset(int u) const { return shard_off_[static_cast<size_t>(u)]; }
  size_t shard_size() const { return shard_size_; }
  // Offset of tensor `index` (a block tensor for l < L, a non-block one for unit L) in its unit.
  size_t offset_in_unit(int index) const { return in_unit_[static_cast<size_t>(index)]; }
  // Elements of tensor `index` in one unit (a layer's slice for block tensors).
  size_t unit_size(int index) const { return per_unit_[static_cast<size_t>(index)]; }

 private:
  std::vector<size_t> elems_, part_, shard_off_;
  std::array<size_t, kNumParamTensors> in_unit_{}, per_unit_{};
  size_t shard_size_ = 0;
};

// The model's block parameters under ZeRO-3 (GptModel::BlockParams). The block collectives
// run on a communication thread, in the same order on every rank: a block's parameters are
// all-gathered one block ahead (the next block's gather overlaps this block's compute), before
// its forward and again before its backward, and freed after each use; its gradients are
// reduce-scattered into this rank's shard while the next block's backward runs. The non-block
// tensors are gathered once per step (after the update), their gradients reduce-scattered after
// the last micro-batch's backward. The training thread's waits are "zero3.wait" comm ranges:
// the exposed part. In bf16/fp16 the comm thread also makes the gathered block's low-precision
// copy. With --tp the units are this rank's TP shard. No --pp.
class Zero3 : public BlockParams {
 public:
  // Attaches itself to `model` (built with ModelSharding::zero3). `tp`: the tensor-parallel
  // group when the model is a TP shard (its units are the shard's; the gradient norm sums the
  // split tensors over it), else null.
  Zero3(GptModel& model, Communicator& dp, CachingAllocator& alloc, Communicator* tp = nullptr);
  ~Zero3() override;

  // BlockParams.
  void acquire(int layer, bool backward) override;
  void release(int layer) override;
  const float* param(int index, int layer) const override;
  float* grad(int index, int layer) override;
  const void* param_lp(int index, int layer) const override;
  void load_full_tensor(int index, const float* full) override;
  std::vector<float> gather_full_params() override;

  // Per optimizer step: zero_grads() before the first micro-batch, arm() before the last (the
  // non-block gradients accumulate over the micro-batches and are reduced once).
  void zero_grads();
  void arm() { armed_ = true; }
  // The global squared gradient norm: this shard's, summed over the DP group, the TP-split
  // tensors' part over the TP group too (the replicated ones count once).
  double grad_sum_squares();
  // AdamW on this shard, then the non-block tensors gathered into the model.
  void update(float lr, const AdamWSettings& s, float grad_scale, int t);
  // Gathers the non-block tensors into the model from the shards (after init or a load).
  void gather_non_block();
  // Milliseconds the training thread waited on ZeRO-3 collectives since the last call.
  double take_comm_ms();

  const Zero3Layout& layout() const { return layout_; }
  float* params() { return params_.data(); }  // (shard_size)
  float* m() { return m_.data(); }
  float* v() { return v_.data(); }
  size_t shard_size() const { return layout_.shard_size(); }

 private:
  void on_grad_ready(int layer);
  // Reduce-scatters unit u's gradients (part(u) * D floats, zero past the unit) and adds this
  // rank's part into the shard, on the comm thread.
  void reduce_unit(int u, Buffer<float> padded);
  // The communication thread: tasks run in posting order; drain() waits for all of them (and
  // rethrows a task's error) before the training thread uses the communicator itself.
  void post(std::function<void()> task);
  void drain();
  void gather_block(int layer);  // posts block `layer`'s all-gather unless already gathered
  void wait_block(int layer);
  void thread_loop();

  GptModel& model_;
  Communicator& dp_;
  Communicator* tp_;
  CachingAllocator& alloc_;
  Zero3Layout layout_;
  int rank_ = 0, ranks_ = 1;
  Precision precision_ = Precision::kFp32;
  Buffer<float> params_, grads_, m_, v_;  // (shard_size)
  struct Held {
    Buffer<float> params, grads;  // the gathered unit; its gradients during backward
    Buffer<char> lp;              // bf16 / fp16: its low-precision copy, made after the gather
    std::shared_ptr<bool> ready;  // set by the comm thread when the gather is done (mu_)
  };
  std::vector<Held> held_;  // per block
  struct Piece {
    size_t shard = 0, n = 0;
    bool decays = false;
    bool tp_split = false;  // a tensor-parallel-split tensor's
  };
  std::vector<Piece> pieces_;  // this shard by tensor, for AdamW's weight decay
  bool armed_ = false;
  double comm_ms_ = 0;  // the training thread's waits on communication
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  int running_ = 0;
  bool stopping_ = false;
  std::exception_ptr error_;
  std::thread thread_;
};

}  // namespace ft::trainer
