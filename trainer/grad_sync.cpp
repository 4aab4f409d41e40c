// grad_sync.cpp: the bucket layout (units split into per-rank parts) and the comm thread that
// all-reduces buckets during backward.
#include "ft/trainer/grad_sync.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstring>

#include "ft/core/annotate.h"
#include "ft/core/error.h"

namespace ft::trainer {

namespace {

constexpr int kBlockTensors[] = {kLn1w, kLn1b, kQkvw, kQkvb, kAttprojw, kAttprojb,
                                 kLn2w, kLn2b, kFcw,  kFcb,  kFcprojw,  kFcprojb};
constexpr int kOtherTensors[] = {kWte, kWpe, kLnfw, kLnfb};

struct FlatRange {
  size_t offset, n;
  bool decays;
};

// Flat ranges of unit u (0 = block L-1, ..., L-1 = block 0, L = the non-block tensors).
std::vector<FlatRange> unit_ranges(const ParamLayout& pl, int L, int u) {
  std::vector<FlatRange> out;
  if (u == L) {
    for (int i : kOtherTensors) {
      if (pl.sizes[i]) out.push_back({pl.offsets[i], pl.sizes[i], ParamLayout::decays(i)});
    }
    return out;
  }
  const size_t l = static_cast<size_t>(L - 1 - u);
  for (int i : kBlockTensors) {
    const size_t per = pl.sizes[i] / static_cast<size_t>(L);
    if (per) out.push_back({pl.offsets[i] + l * per, per, ParamLayout::decays(i)});
  }
  return out;
}

// Appends the copies of unit elements [lo, hi) to `out`, placed from `other` on.
void cut(const std::vector<FlatRange>& ranges, size_t lo, size_t hi, size_t other,
         std::vector<ShardLayout::Copy>& out) {
  size_t pos = 0;  // unit offset of the current range
  for (const FlatRange& r : ranges) {
    const size_t a = std::max(lo, pos), b = std::min(hi, pos + r.n);
    if (a < b) out.push_back({r.offset + (a - pos), other + (a - lo), b - a, r.decays});
    pos += r.n;
  }
}

}  // namespace

ShardLayout ShardLayout::make(const GptModel& model, int ranks, size_t bucket_bytes) {
  // A pipeline stage holds only its blocks.
  return make(model.layout(), model.local_layers(), ranks, bucket_bytes);
}

ShardLayout ShardLayout::make(const ParamLayout& pl, int layers, int ranks, size_t bucket_bytes) {
  if (ranks < 1) throw ConfigError("ShardLayout: ranks must be >= 1");
  ShardLayout s;
  s.ranks_ = ranks;
  s.layers_ = layers;
  s.num_units_ = s.layers_ + 1;
  const size_t d = static_cast<size_t>(ranks);
  std::vector<std::vector<FlatRange>> units(static_cast<size_t>(s.num_units_));
  std::vector<size_t> size(units.size()), part(units.size()), shard_off(units.size());
  for (int u = 0; u < s.num_units_; ++u) {
    units[u] = unit_ranges(pl, s.layers_, u);
    for (const FlatRange& r : units[u]) size[u] += r.n;
    part[u] = (size[u] + d - 1) / d;
    shard_off[u] = s.shard_size_;
    s.shard_size_ += part[u];
  }
  const size_t min_elems = std::max<size_t>(1, bucket_bytes / sizeof(float));
  for (int u0 = 0; u0 < s.num_units_;) {
    Bucket b;
    b.first_unit = u0;
    int u = u0;
    size_t elems = 0;
    while (u < s.num_units_ && (elems == 0 || elems < min_elems)) elems += part[u++] * d;
    b.end_unit = u;
    b.last_layer = u - 1 == s.layers_ ? -1 : s.layers_ - u;  // unit u-1 is block L-u
    b.shard_offset = shard_off[u0];
    for (int k = u0; k < u; ++k) b.part += part[k];
    b.blocks.resize(d);
    for (size_t r = 0; r < d; ++r) {
      size_t at = r * b.part;
      for (int k = u0; k < u; ++k) {
        const size_t lo = std::min(size[k], r * part[k]);
        const size_t hi = std::min(size[k], (r + 1) * part[k]);
        cut(units[k], lo, hi, at, b.blocks[r]);
        if (hi - lo < part[k]) b.padding.push_back({at + (hi - lo), part[k] - (hi - lo)});
        at += part[k];
      }
    }
    s.max_bucket_ = std::max(s.max_bucket_, b.elems());
    s.buckets_.push_back(std::move(b));
    u0 = u;
  }
  return s;
}

std::vector<ShardLayout::Copy> ShardLayout::shard_pieces(int r) const {
  std::vector<Copy> out;
  for (const Bucket& b : buckets_) {
    const size_t base = static_cast<size_t>(r) * b.part;
    for (Copy c : b.blocks.at(static_cast<size_t>(r))) {
      c.other = b.shard_offset + (c.other - base);
      out.push_back(c);
    }
  }
  return out;
}

int ShardLayout::bucket_completed_by(int layer) const {
  for (size_t i = 0; i < buckets_.size(); ++i) {
    if (buckets_[i].last_layer == layer) return static_cast<int>(i);
  }
  return -1;
}

void pack_bucket(const ShardLayout::Bucket& b, const float* flat, float* buf) {
  for (const auto& block : b.blocks) {
    for (const auto& c : block) std::memcpy(buf + c.other, flat + c.flat, c.n * sizeof(float));
  }
  for (const auto& [off, n] : b.padding) std::memset(buf + off, 0, n * sizeof(float));
}

void unpack_bucket(const ShardLayout::Bucket& b, const float* buf, float* flat) {
  for (const auto& block : b.blocks) {
    for (const auto& c : block) std::memcpy(flat + c.flat, buf + c.other, c.n * sizeof(float));
  }
}

GradSync::GradSync(GptModel& model, Communicator& dp, CachingAllocator& alloc,
                   const GradSyncOptions& options)
    : model_(model),
      dp_(dp),
      options_(options),
      layout_(ShardLayout::make(model, dp.world_size(), options.bucket_bytes)) {
  // Allocated and touched once: first-touch page faults of a fresh buffer every step cost
  // more than the copies themselves.
  buffer_ = Buffer<float>(alloc, layout_.max_bucket_elems(), "grad_sync.bucket");
  std::memset(buffer_.data(), 0, buffer_.size() * sizeof(float));
  if (options_.reduce_scatter) {
    size_t part = 0;
    for (const auto& b : layout_.buckets()) part = std::max(part, b.part);
    recv_ = Buffer<float>(alloc, part, "grad_sync.recv");
    std::memset(recv_.data(), 0, recv_.size() * sizeof(float));
  }
  queued_.assign(layout_.buckets().size(), 0);
  if (options_.overlap) {
    thread_ = std::thread([this] { thread_loop(); });
    model_.set_grad_ready_hook([this](int layer) { on_grad_ready(layer); });
  }
}

GradSync::~GradSync() {
  model_.set_grad_ready_hook({});
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_work_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void GradSync::arm() {
  std::lock_guard<std::mutex> lock(mu_);
  std::fill(queued_.begin(), queued_.end(), 0);
  armed_ = true;
}

void GradSync::on_grad_ready(int layer) {
  const int b = layout_.bucket_completed_by(layer);
  if (b < 0) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!armed_ || queued_[b]) return;
    queued_[b] = 1;
    queue_.push_back(b);
    ++pending_;
  }
  cv_work_.notify_one();
}

void GradSync::sync_bucket(int bi) {
  const ShardLayout::Bucket& b = layout_.buckets()[static_cast<size_t>(bi)];
  float* buf = buffer_.data();
  float* grads = model_.grads();
  {
    FT_RANGE("grad_sync.pack", RangeKind::kHost, bi);
    pack_bucket(b, grads, buf);
  }
  if (!options_.reduce_scatter) {
    dp_.all_reduce_sum(buf, b.elems());
    FT_RANGE("grad_sync.unpack", RangeKind::kHost, bi);
    unpack_bucket(b, buf, grads);
    return;
  }
  dp_.reduce_scatter_sum(buf, recv_.data(), b.part);
  FT_RANGE("grad_sync.unpack", RangeKind::kHost, bi);
  const size_t r = static_cast<size_t>(dp_.rank());
  for (const auto& c : b.blocks[r]) {
    std::memcpy(grads + c.flat, recv_.data() + (c.other - r * b.part), c.n * sizeof(float));
  }
}

void GradSync::thread_loop() {
  for (;;) {
    int b;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_work_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (stopping_) return;
      b = queue_.front();
      queue_.pop_front();
    }
    try {
      bool failed;
      {
        std::lock_guard<std::mutex> lock(mu_);
        failed = error_ != nullptr;  // after a failure the rest are not attempted
      }
      if (!failed) sync_bucket(b);
    } catch (...) {
      std::lock_guard<std::mutex> lock(mu_);
      if (!error_) error_ = std::current_exception();
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      --pending_;
    }
    cv_done_.notify_all();
  }
}

double GradSync::finish() {
  FT_RANGE("grad_sync", RangeKind::kComm);
  const auto t0 = std::chrono::steady_clock::now();
  const int nb = static_cast<int>(layout_.buckets().size());
  if (!options_.overlap) {
    for (int b = 0; b < nb; ++b) sync_bucket(b);  // buckets are in backward order
  } else {
    std::unique_lock<std::mutex> lock(mu_);
    // Buckets whose grad-ready call never came (a model that does not report) go now.
    for (int b = 0; b < nb; ++b) {
      if (!queued_[b]) {
        queued_[b] = 1;
        queue_.push_back(b);
        ++pending_;
      }
    }
    cv_work_.notify_one();
    cv_done_.wait(lock, [&] { return pending_ == 0; });
    armed_ = false;
    if (error_) {
      std::exception_ptr e = error_;
      error_ = nullptr;
      std::rethrow_exception(e);
    }
  }
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace ft::trainer
