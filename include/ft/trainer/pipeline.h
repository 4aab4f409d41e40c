// pipeline.h: pipeline parallelism: 1F1B over micro-batches, activations/gradients between stages.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "ft/core/allocator.h"
#include "ft/trainer/communicator.h"
#include "ft/trainer/model.h"

namespace ft::trainer {

// The blocks of one stage: [first, first + count).
struct StageLayers {
  int first = 0;
  int count = 0;
};
// Splits `num_layers` blocks over `stages`; earlier stages take the remainder
// (the last stage also runs the LM head). ConfigError when there are fewer
// blocks than stages.
StageLayers pipeline_stage_layers(int num_layers, int stages, int stage);
// The ModelSharding of `stage` of `stages` (embedding on the first, head on the last).
ModelSharding pipeline_sharding(int num_layers, int stages, int stage);

// One operation of a stage's schedule.
struct PipeOp {
  enum Kind : uint8_t { kForward, kBackward };
  Kind kind = kForward;
  int micro = 0;
};
// The 1F1B order for `stage` of `stages` over `micro` micro-batches:
// min(p - s - 1, m) warm-up forwards, then one forward one backward, then the
// remaining backwards. Backwards run in micro-batch order.
std::vector<PipeOp> one_f_one_b(int stages, int stage, int micro);
// Most micro-batches in flight (forward done, backward not) on a stage: min(p - s, m).
int pipeline_in_flight(int stages, int stage, int micro);

// One micro-batch's tokens, valid until the next call of the source.
struct MicroBatch {
  const int32_t* inputs = nullptr;   // (B, T)
  const int32_t* targets = nullptr;  // (B, T)
};

// This stage's time in the last run(), in milliseconds.
struct PipelineStats {
  double wall_ms = 0;  // from the first operation to the end-of-step loss all-reduce
  double busy_ms = 0;  // inside "pp.forward" / "pp.backward" (stage compute)
  double wait_ms = 0;  // blocked on a neighbour: receives, the last sends, the final all-reduce
  int micro_batches = 0;
  // The measured bubble as a fraction of the ideal (busy) time; theory (p - 1) / m.
  double bubble_fraction() const { return busy_ms > 0 ? wait_ms / busy_ms : 0; }
};

// Runs a GptModel stage in a pipeline. Activations go downstream and gradients
// upstream through the pp communicator's send/recv; sends are copied and made
// by one helper thread per direction, so a stage never blocks on a send and
// each direction is an in-order channel: with the receives posted in schedule
// order, a pair of stages can never both wait to send (no deadlock for any p, m).
class Pipeline {
 public:
  // `pp`: the pipeline group (group rank = stage), `model` built with
  // pipeline_sharding() of this stage. Collective over `pp` (it splits off the
  // group of the first and last stage, which share the tied embedding).
  Pipeline(GptModel& model, Communicator& pp, CachingAllocator& alloc);
  ~Pipeline();
  Pipeline(const Pipeline&) = delete;
  Pipeline& operator=(const Pipeline&) = delete;

  int stage() const { return stage_; }
  int stages() const { return stages_; }

  // One step: `m` micro-batches of (B, T) through the 1F1B schedule; `next(k)`
  // is called on every stage for k = 0..m-1 in order (at micro-batch k's
  // forward). Gradients scale and accumulate as in GptModel::forward_backward.
  // Returns the sum of the micro-batches' mean losses, the same on every stage.
  // `before_backward(k)`, when set, runs before micro-batch k's backward.
  double run(int m, int B, int T, float dloss_per_token, const std::function<MicroBatch(int)>& next,
             const std::function<void(int)>& before_backward = {});
  // Sums the tied wte gradient between the first and the last stage so that
  // both copies get the same update (no-op on the other stages).
  void sync_tied_grads();
  // Sum of squares of every gradient over the stages, the tied wte counted once.
  double global_grad_sum_squares();
  // Forward only over the micro-batches `next` yields until it returns false
  // (every stage must see the same count); mean loss, the same on every stage
  // (-1 when there were none).
  double evaluate(int B, int T, const std::function<bool(MicroBatch*)>& next);

  const PipelineStats& stats() const { return stats_; }

 private:
  class Channel;
  GptModel& model_;
  Communicator& pp_;
  CachingAllocator& alloc_;
  int stage_ = 0, stages_ = 1;
  std::unique_ptr<Communicator> ends_;  // first + last stage (the tied wte); null elsewhere
  std::unique_ptr<Channel> to_next_;    // activations downstream
  std::unique_ptr<Channel> to_prev_;    // gradients upstream
  PipelineStats stats_;
};

}  // namespace ft::trainer
