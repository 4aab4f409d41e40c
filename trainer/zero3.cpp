// zero3.cpp: ZeRO-3: parameter, gradient and AdamW shards; block parameters gathered for each
// use, block gradients reduce-scattered as each block's backward completes.
#include "ft/trainer/zero3.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstring>

#include "ft/core/annotate.h"
#include "ft/core/error.h"
#include "ft/trainer/ops.h"
#include "ft/trainer/precision.h"
#include "ft/trainer/tensor_parallel.h"

namespace ft::trainer {

namespace {

constexpr int kBlockTensors[] = {kLn1w, kLn1b, kQkvw, kQkvb, kAttprojw, kAttprojb,
                                 kLn2w, kLn2b, kFcw,  kFcb,  kFcprojw,  kFcprojb};
constexpr int kNonBlockTensors[] = {kWte, kWpe, kLnfw, kLnfb};

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

}  // namespace

Zero3Layout::Zero3Layout(const GptConfig& config, int ranks, int tp) {
  const ParamLayout full = tp_shard_layout(ParamLayout::make(config), tp);
  const size_t L = static_cast<size_t>(config.num_layers), D = static_cast<size_t>(ranks);
  size_t block = 0, non_block = 0;
  for (int i : kBlockTensors) {
    per_unit_[static_cast<size_t>(i)] = full.sizes[static_cast<size_t>(i)] / L;
    in_unit_[static_cast<size_t>(i)] = block;
    block += per_unit_[static_cast<size_t>(i)];
  }
  for (int i : kNonBlockTensors) {
    per_unit_[static_cast<size_t>(i)] = full.sizes[static_cast<size_t>(i)];
    in_unit_[static_cast<size_t>(i)] = non_block;
    non_block += per_unit_[static_cast<size_t>(i)];
  }
  elems_.assign(L, block);
  elems_.push_back(non_block);
  for (size_t e : elems_) {
    const size_t p = (e + D - 1) / D;
    part_.push_back(p);
    shard_off_.push_back(shard_size_);
    shard_size_ += p;
  }
}

Zero3::Zero3(GptModel& model, Communicator& dp, CachingAllocator& alloc, Communicator* tp)
    : model_(model),
      dp_(dp),
      tp_(model.tp_size() > 1 ? tp : nullptr),
      alloc_(alloc),
      layout_(model.config(), dp.world_size(), model.tp_size()),
      rank_(dp.rank()),
      ranks_(dp.world_size()),
      precision_(model.options().precision) {
  const size_t n = layout_.shard_size();
  params_ = Buffer<float>(alloc_, n, "zero3.params");
  grads_ = Buffer<float>(alloc_, n, "zero3.grads");
  m_ = Buffer<float>(alloc_, n, "zero3.adam_m");
  v_ = Buffer<float>(alloc_, n, "zero3.adam_v");
  for (Buffer<float>* b : {&params_, &grads_, &m_, &v_})
    std::memset(b->data(), 0, n * sizeof(float));
  held_.resize(static_cast<size_t>(model.config().num_layers));
  // This shard by tensor: the part of each unit this rank holds, cut at tensor boundaries.
  const int L = model.config().num_layers;
  for (int u = 0; u <= L; ++u) {
    const size_t part = layout_.part(u), lo_r = part * static_cast<size_t>(rank_);
    const size_t hi_r = std::min(lo_r + part, layout_.unit_elems(u));
    for (int i = 0; i < kNumParamTensors; ++i) {
      if (ParamLayout::per_block(i) != (u < L)) continue;
      const size_t lo = std::max(lo_r, layout_.offset_in_unit(i));
      const size_t hi = std::min(hi_r, layout_.offset_in_unit(i) + layout_.unit_size(i));
      if (lo < hi) {
        pieces_.push_back({layout_.shard_offset(u) + (lo - lo_r), hi - lo, ParamLayout::decays(i),
                           tp_ != nullptr && tp_sharded(i)});
      }
    }
  }
  model_.set_block_params(this);
  model_.set_grad_ready_hook([this](int layer) { on_grad_ready(layer); });
  thread_ = std::thread([this] { thread_loop(); });
}

Zero3::~Zero3() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
  model_.set_grad_ready_hook({});
  model_.set_block_params(nullptr);
}

void Zero3::post(std::function<void()> task) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    queue_.push_back(std::move(task));
  }
  cv_.notify_all();
}

void Zero3::thread_loop() {
  for (;;) {
    std::function<void()> task;
    bool failed = false;
    {
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait(lk, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, nothing left
      task = std::move(queue_.front());
      queue_.pop_front();
      ++running_;
      failed = error_ != nullptr;
    }
    try {
      if (!failed) task();  // after an error the rest is skipped; drain() rethrows it
    } catch (...) {
      std::lock_guard<std::mutex> lk(mu_);
      error_ = std::current_exception();
    }
    {
      std::lock_guard<std::mutex> lk(mu_);
      --running_;
    }
    cv_.notify_all();
  }
}

void Zero3::drain() {
  FT_RANGE("zero3.wait", RangeKind::kComm);
  const auto t0 = Clock::now();
  std::unique_lock<std::mutex> lk(mu_);
  cv_.wait(lk, [&] { return queue_.empty() && running_ == 0; });
  comm_ms_ += ms_since(t0);
  if (error_) std::rethrow_exception(error_);
}

void Zero3::gather_block(int layer) {
  Held& h = held_[static_cast<size_t>(layer)];
  if (h.ready) return;  // gathered, or on its way
  const size_t part = layout_.part(layer);
  h.params = Buffer<float>(alloc_, part * static_cast<size_t>(ranks_), "zero3.gathered");
  h.ready = std::make_shared<bool>(false);
  const size_t n = part * static_cast<size_t>(ranks_);
  if (precision_ != Precision::kFp32) {
    h.lp = Buffer<char>(alloc_, n * (precision_ == Precision::kBf16 ? 2 : 4), "zero3.gathered_lp");
  }
  float* dst = h.params.data();
  char* lp = h.lp.data();
  const float* src = params_.data() + layout_.shard_offset(layer);
  std::shared_ptr<bool> ready = h.ready;
  post([this, dst, lp, src, part, n, ready] {
    dp_.all_gather(src, dst, part);
    if (precision_ == Precision::kBf16) fp32_to_bf16(reinterpret_cast<uint16_t*>(lp), dst, n);
    if (precision_ == Precision::kFp16) round_through_fp16(reinterpret_cast<float*>(lp), dst, n);
    std::lock_guard<std::mutex> lk(mu_);
    *ready = true;
  });
}

void Zero3::wait_block(int layer) {
  const std::shared_ptr<bool> ready = held_[static_cast<size_t>(layer)].ready;
  std::unique_lock<std::mutex> lk(mu_);
  if (*ready) return;
  FT_RANGE("zero3.wait", RangeKind::kComm, layer);
  const auto t0 = Clock::now();
  cv_.wait(lk, [&] { return *ready || error_ != nullptr; });
  comm_ms_ += ms_since(t0);
  if (error_) std::rethrow_exception(error_);
}

void Zero3::acquire(int layer, bool backward) {
  // This block (unless prefetched), then the next one in this pass's direction.
  gather_block(layer);
  const int next = backward ? layer - 1 : layer + 1;
  if (next >= 0 && next < model_.config().num_layers) gather_block(next);
  wait_block(layer);
  Held& h = held_[static_cast<size_t>(layer)];
  if (backward && !h.grads.data()) {
    const size_t n = layout_.part(layer) * static_cast<size_t>(ranks_);
    h.grads = Buffer<float>(alloc_, n, "zero3.block_grads");
    std::memset(h.grads.data(), 0, n * sizeof(float));
  }
}

void Zero3::release(int layer) {
  Held& h = held_[static_cast<size_t>(layer)];
  h.params.reset();
  h.grads.reset();  // moved into its reduce-scatter by then
  h.lp.reset();
  h.ready.reset();
}

const float* Zero3::param(int index, int layer) const {
  const Held& h = held_[static_cast<size_t>(layer)];
  if (!h.params.data())
    throw Error(fmt::format("zero3: block {} used before it was gathered", layer));
  return h.params.data() + layout_.offset_in_unit(index);
}

const void* Zero3::param_lp(int index, int layer) const {
  if (precision_ == Precision::kFp32) return nullptr;
  const Held& h = held_[static_cast<size_t>(layer)];
  if (!h.lp.data()) throw Error(fmt::format("zero3: block {} used before it was gathered", layer));
  const size_t elem = precision_ == Precision::kBf16 ? 2 : 4;
  return h.lp.data() + layout_.offset_in_unit(index) * elem;
}

float* Zero3::grad(int index, int layer) {
  Held& h = held_[static_cast<size_t>(layer)];
  if (!h.grads.data()) throw Error(fmt::format("zero3: block {} has no gradient buffer", layer));
  return h.grads.data() + layout_.offset_in_unit(index);
}

void Zero3::reduce_unit(int u, Buffer<float> padded) {
  // The unit's gradients, padded to D parts, move into the task; the caller may go on.
  const size_t part = layout_.part(u);
  auto send = std::make_shared<Buffer<float>>(std::move(padded));
  float* g = grads_.data() + layout_.shard_offset(u);
  post([this, send, part, g] {
    Buffer<float> recv(alloc_, part, "zero3.rs_recv");
    dp_.reduce_scatter_sum(send->data(), recv.data(), part);
    for (size_t i = 0; i < part; ++i) g[i] += recv.data()[i];
  });
}

void Zero3::on_grad_ready(int layer) {
  if (layer >= 0) {  // the block's buffer is already padded (and zeroed past the unit)
    reduce_unit(layer, std::move(held_[static_cast<size_t>(layer)].grads));
    return;
  }
  if (!armed_) return;  // the non-block gradients accumulate until the last micro-batch
  armed_ = false;
  const int u = model_.config().num_layers;
  const size_t n = layout_.part(u) * static_cast<size_t>(ranks_), e = layout_.unit_elems(u);
  Buffer<float> padded(alloc_, n, "zero3.rs_send");
  std::memcpy(padded.data(), model_.grads(), e * sizeof(float));
  std::memset(padded.data() + e, 0, (n - e) * sizeof(float));
  reduce_unit(u, std::move(padded));
  drain();  // the step's gradients are complete in this shard
}

void Zero3::zero_grads() {
  drain();
  std::memset(grads_.data(), 0, layout_.shard_size() * sizeof(float));
}

double Zero3::grad_sum_squares() {
  drain();
  double sums[2] = {0, 0};  // this shard's TP-split tensors, its replicated ones
  for (const Piece& p : pieces_) {
    sums[p.tp_split ? 0 : 1] += ops::sum_squares(grads_.data() + p.shard, p.n);
  }
  const auto t0 = Clock::now();
  dp_.all_reduce_sum(sums, 2);
  if (tp_) tp_->all_reduce_sum(&sums[0], 1);
  comm_ms_ += ms_since(t0);
  return sums[0] + sums[1];
}

void Zero3::update(float lr, const AdamWSettings& s, float grad_scale, int t) {
  drain();
  for (const Piece& p : pieces_) {
    ops::adamw_update(params_.data() + p.shard, grads_.data() + p.shard, m_.data() + p.shard,
                      v_.data() + p.shard, p.n, lr, s.beta1, s.beta2, s.eps,
                      p.decays ? s.weight_decay : 0.0f, grad_scale, t);
  }
  gather_non_block();
}

void Zero3::gather_non_block() {
  drain();
  const int u = model_.config().num_layers;
  const size_t part = layout_.part(u);
  Buffer<float> buf(alloc_, part * static_cast<size_t>(ranks_), "zero3.gathered");
  FT_RANGE("zero3.all_gather", RangeKind::kComm, u);
  const auto t0 = Clock::now();
  dp_.all_gather(params_.data() + layout_.shard_offset(u), buf.data(), part);
  // The model's flat buffer holds exactly the non-block tensors, in the unit's order.
  std::memcpy(model_.params(), buf.data(), layout_.unit_elems(u) * sizeof(float));
  model_.refresh_low_precision();  // the tied wte's shadow for the LM head
  comm_ms_ += ms_since(t0);
}

double Zero3::take_comm_ms() {
  const double ms = comm_ms_;
  comm_ms_ = 0;
  return ms;
}

void Zero3::load_full_tensor(int index, const float* full) {  // this TP rank's tensor
  drain();
  const bool block = ParamLayout::per_block(index);
  const int L = model_.config().num_layers;
  const size_t per = layout_.unit_size(index), off = layout_.offset_in_unit(index);
  for (int l = 0; l < (block ? L : 1); ++l) {
    const int u = block ? l : L;
    const size_t part = layout_.part(u), lo_r = part * static_cast<size_t>(rank_);
    const size_t lo = std::max(lo_r, off), hi = std::min(lo_r + part, off + per);
    if (lo >= hi) continue;
    std::memcpy(params_.data() + layout_.shard_offset(u) + (lo - lo_r),
                full + per * static_cast<size_t>(l) + (lo - off), (hi - lo) * sizeof(float));
  }
}

std::vector<float> Zero3::gather_full_params() {
  drain();
  const ParamLayout full_layout =
      tp_shard_layout(ParamLayout::make(model_.config()), model_.tp_size());
  std::vector<float> full(full_layout.total);
  const int L = model_.config().num_layers;
  for (int u = 0; u <= L; ++u) {
    const size_t part = layout_.part(u);
    Buffer<float> buf(alloc_, part * static_cast<size_t>(ranks_), "zero3.gathered");
    dp_.all_gather(params_.data() + layout_.shard_offset(u), buf.data(), part);
    for (int i = 0; i < kNumParamTensors; ++i) {
      if (ParamLayout::per_block(i) != (u < L)) continue;
      const size_t per = layout_.unit_size(i);
      std::memcpy(full.data() + full_layout.offsets[static_cast<size_t>(i)] +
                      (u < L ? per * static_cast<size_t>(u) : 0),
                  buf.data() + layout_.offset_in_unit(i), per * sizeof(float));
    }
  }
  return full;
}

}  // namespace ft::trainer
