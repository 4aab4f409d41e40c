// pipeline.cpp: the 1F1B schedule, send channels (a thread per direction), tied-wte gradient sum.
#include "ft/trainer/pipeline.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>

#include "ft/core/annotate.h"
#include "ft/core/error.h"
#include "ft/trainer/ops.h"

namespace ft::trainer {

namespace {
using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}
constexpr int kTagActivation = 0x7070;  // stage s -> s + 1
constexpr int kTagGradient = 0x7071;    // stage s -> s - 1
}  // namespace

StageLayers pipeline_stage_layers(int num_layers, int stages, int stage) {
  if (stages < 1 || stage < 0 || stage >= stages) {
    throw ConfigError(fmt::format("pipeline stage {} of {} is out of range", stage, stages));
  }
  if (num_layers < stages) {
    throw ConfigError(
        fmt::format("--pp {} needs at least one transformer block per stage, but the model has {} "
                    "(--layers {})",
                    stages, num_layers, num_layers));
  }
  const int base = num_layers / stages, extra = num_layers % stages;
  StageLayers r;
  r.first = stage * base + std::min(stage, extra);
  r.count = base + (stage < extra ? 1 : 0);
  return r;
}

ModelSharding pipeline_sharding(int num_layers, int stages, int stage) {
  const StageLayers r = pipeline_stage_layers(num_layers, stages, stage);
  ModelSharding s;
  s.first_layer = r.first;
  s.num_layers = r.count;
  s.has_embedding = stage == 0;
  s.has_head = stage == stages - 1;
  return s;
}

std::vector<PipeOp> one_f_one_b(int stages, int stage, int micro) {
  if (stages < 1 || stage < 0 || stage >= stages || micro < 1) {
    throw ConfigError(
        fmt::format("1F1B: stage {} of {} with {} micro-batches is invalid", stage, stages, micro));
  }
  std::vector<PipeOp> ops;
  ops.reserve(2 * static_cast<size_t>(micro));
  const int warm = std::min(stages - stage - 1, micro);
  int f = 0, b = 0;
  for (int i = 0; i < warm; ++i) ops.push_back({PipeOp::kForward, f++});
  while (f < micro) {
    ops.push_back({PipeOp::kForward, f++});
    ops.push_back({PipeOp::kBackward, b++});
  }
  while (b < micro) ops.push_back({PipeOp::kBackward, b++});
  return ops;
}

int pipeline_in_flight(int stages, int stage, int micro) {
  return std::max(1, std::min(stages - stage, micro));
}

// One direction to a neighbour stage: post() copies the data into a pooled
// buffer and queues it; a helper thread sends the queue in order. The thread
// blocks in Communicator::send (bounded by the communicator's timeout) while
// the stage computes on.
class Pipeline::Channel {
 public:
  Channel(Communicator& comm, CachingAllocator& alloc, int peer, int tag)
      : comm_(comm), alloc_(alloc), peer_(peer), tag_(tag), thread_([this] { loop(); }) {}

  ~Channel() {
    {
      std::lock_guard<std::mutex> lk(mu_);
      stop_ = true;  // queued sends not yet started are dropped (only after a failure)
    }
    cv_.notify_all();
    thread_.join();  // an in-flight send ends by completion or the comm timeout
  }

  void post(const float* data, size_t n) {
    Buffer<float> buf;
    {
      std::lock_guard<std::mutex> lk(mu_);
      rethrow_locked();
      if (!free_.empty() && free_.back().size() == n) {
        buf = std::move(free_.back());
        free_.pop_back();
      }
    }
    if (buf.size() != n) buf = Buffer<float>(alloc_, n, "pp.send");
    std::memcpy(buf.data(), data, n * sizeof(float));
    {
      std::lock_guard<std::mutex> lk(mu_);
      queue_.push_back(std::move(buf));
      ++pending_;
    }
    cv_.notify_all();
  }

  // Waits until every posted send has completed; rethrows a send's failure.
  void drain() {
    std::unique_lock<std::mutex> lk(mu_);
    cv_.wait(lk, [&] { return pending_ == 0 || error_; });
    rethrow_locked();
  }

 private:
  void rethrow_locked() {
    if (error_) std::rethrow_exception(error_);
  }

  void loop() {
    for (;;) {
      Buffer<float> buf;
      {
        std::unique_lock<std::mutex> lk(mu_);
        cv_.wait(lk, [&] { return stop_ || !queue_.empty(); });
        if (stop_) return;
        buf = std::move(queue_.front());
        queue_.pop_front();
      }
      std::exception_ptr err;
      try {
        comm_.send(buf.data(), buf.size(), peer_, tag_);
      } catch (...) {
        err = std::current_exception();
      }
      {
        std::lock_guard<std::mutex> lk(mu_);
        if (err && !error_) error_ = err;
        --pending_;
        free_.push_back(std::move(buf));
        if (err) {
          // Later sends would wait for the same broken peer: fail them at once.
          pending_ -= queue_.size();
          queue_.clear();
        }
      }
      cv_.notify_all();
    }
  }

  Communicator& comm_;
  CachingAllocator& alloc_;
  const int peer_, tag_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Buffer<float>> queue_;
  std::vector<Buffer<float>> free_;
  size_t pending_ = 0;  // posted and not yet completed
  bool stop_ = false;
  std::exception_ptr error_;
  std::thread thread_;  // last: starts after the members it uses
};

Pipeline::Pipeline(GptModel& model, Communicator& pp, CachingAllocator& alloc)
    : model_(model), pp_(pp), alloc_(alloc), stage_(pp.rank()), stages_(pp.world_size()) {
  const ModelSharding& s = model.sharding();
  if (s.has_embedding != (stage_ == 0) || s.has_head != (stage_ == stages_ - 1)) {
    throw Error(
        fmt::format("pipeline stage {} of {}: the model's sharding (embedding {}, head {}) "
                    "does not match the stage",
                    stage_, stages_, s.has_embedding, s.has_head));
  }
  const bool end = stage_ == 0 || stage_ == stages_ - 1;
  // kOther: its collectives must not share (group, sequence) numbers with the pp group's.
  std::unique_ptr<Communicator> ends = pp.split(end ? 0 : 1, stage_, CommGroup::kOther);
  if (end && stages_ > 1) ends_ = std::move(ends);
  if (stage_ + 1 < stages_) {
    to_next_ = std::make_unique<Channel>(pp, alloc, stage_ + 1, kTagActivation);
  }
  if (stage_ > 0) to_prev_ = std::make_unique<Channel>(pp, alloc, stage_ - 1, kTagGradient);
}

Pipeline::~Pipeline() = default;

double Pipeline::run(int m, int B, int T, float dloss_per_token,
                     const std::function<MicroBatch(int)>& next,
                     const std::function<void(int)>& before_backward) {
  const int slots = pipeline_in_flight(stages_, stage_, m);
  model_.stage_prepare(slots, B, T);
  const size_t n = static_cast<size_t>(B) * T * model_.config().channels;
  const bool first = stage_ == 0, last = stage_ == stages_ - 1;
  PipelineStats st;
  st.micro_batches = m;
  const auto t0 = Clock::now();
  double loss_sum = 0;
  for (const PipeOp& op : one_f_one_b(stages_, stage_, m)) {
    const int slot = op.micro % slots;
    if (op.kind == PipeOp::kForward) {
      const MicroBatch mb = next(op.micro);
      if (!first) {
        const auto tw = Clock::now();
        pp_.recv(model_.stage_input(slot), n, stage_ - 1, kTagActivation);
        st.wait_ms += ms_since(tw);
      }
      {
        const auto tc = Clock::now();
        FT_RANGE("pp.forward", RangeKind::kCompute, op.micro);
        model_.stage_forward(slot, mb.inputs, mb.targets);
        st.busy_ms += ms_since(tc);
      }
      if (!last) to_next_->post(model_.stage_output(slot), n);
    } else {
      if (!last) {
        const auto tw = Clock::now();
        pp_.recv(model_.stage_grad(), n, stage_ + 1, kTagGradient);
        st.wait_ms += ms_since(tw);
      }
      if (before_backward) before_backward(op.micro);
      {
        const auto tc = Clock::now();
        FT_RANGE("pp.backward", RangeKind::kCompute, op.micro);
        loss_sum += model_.stage_backward(slot, dloss_per_token, op.micro == 0);
        st.busy_ms += ms_since(tc);
      }
      if (!first) to_prev_->post(model_.stage_grad(), n);
    }
  }
  const auto tw = Clock::now();
  if (to_next_) to_next_->drain();
  if (to_prev_) to_prev_->drain();
  // The loss lives on the last stage: summing zeros from the others broadcasts
  // it, and the all-reduce ends the step's pipeline on every stage together.
  if (!last) loss_sum = 0;
  pp_.all_reduce_sum(&loss_sum, 1);
  st.wait_ms += ms_since(tw);
  st.wall_ms = ms_since(t0);
  stats_ = st;
  return loss_sum;
}

void Pipeline::sync_tied_grads() {
  if (!ends_) return;
  const ParamLayout& L = model_.layout();
  ends_->all_reduce_sum(model_.grad(kWte), L.sizes[kWte]);
}

double Pipeline::global_grad_sum_squares() {
  const ParamLayout& L = model_.layout();
  // wte is the first tensor of the flat layout; the first stage counts it.
  const size_t skip = stage_ == stages_ - 1 && stages_ > 1 ? L.sizes[kWte] : 0;
  static_assert(kWte == 0, "wte must lead the flat layout");
  double sq = ops::sum_squares(model_.grads() + skip, model_.num_params() - skip);
  pp_.all_reduce_sum(&sq, 1);
  return sq;
}

double Pipeline::evaluate(int B, int T, const std::function<bool(MicroBatch*)>& next) {
  model_.stage_prepare(1, B, T);
  const size_t n = static_cast<size_t>(B) * T * model_.config().channels;
  const bool first = stage_ == 0, last = stage_ == stages_ - 1;
  double sum = 0;
  int count = 0;
  MicroBatch mb;
  while (next(&mb)) {
    if (!first) pp_.recv(model_.stage_input(0), n, stage_ - 1, kTagActivation);
    model_.stage_forward(0, mb.inputs, mb.targets);
    if (last) {
      sum += model_.stage_loss(0);
    } else {
      to_next_->post(model_.stage_output(0), n);
      model_.stage_release(0);
    }
    ++count;
  }
  if (to_next_) to_next_->drain();
  if (!last) sum = 0;
  pp_.all_reduce_sum(&sum, 1);
  return count > 0 ? sum / count : -1;
}

}  // namespace ft::trainer
