// grad_sync.h: data-parallel gradient synchronisation in buckets (backward order), overlapped with
// backward on a comm thread.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "ft/core/allocator.h"
#include "ft/trainer/communicator.h"
#include "ft/trainer/model.h"

namespace ft::trainer {

// How the flat parameters are cut for data parallelism over `ranks` ranks.
//  - A unit is the gradient of one block (its 12 ranges, one per tensor: the flat layout is
//    tensor-major) or of the non-block tensors (wte, wpe, lnf), in backward order: block L-1
//    first, the non-block tensors last.
//  - Each unit is split into `ranks` equal parts (the last padded); part r belongs to rank r.
//    Rank r's shard (ZeRO's optimizer state) is part r of every unit, in unit order, so it does
//    not depend on the bucket size.
//  - A bucket is a run of consecutive units of at least bucket_bytes (or the rest). Its staging
//    buffer holds part 0 of its units, then part 1, ...: a reduce-scatter of the buffer leaves
//    rank r exactly its parts, which are one contiguous range of its shard.
class ShardLayout {
 public:
  // A copy between the flat buffer and a bucket buffer (or a shard).
  struct Copy {
    size_t flat = 0;   // offset in the flat parameters / gradients
    size_t other = 0;  // offset in the bucket buffer, or in the shard
    size_t n = 0;
    bool decays = false;  // AdamW weight decay applies (matrices)
  };
  struct Bucket {
    int first_unit = 0, end_unit = 0;  // units [first_unit, end_unit)
    int last_layer = 0;       // the layer whose grad-ready call completes it (-1: non-block)
    size_t part = 0;          // elements per rank block of the buffer
    size_t shard_offset = 0;  // where block r lies in rank r's shard
    std::vector<std::vector<Copy>> blocks;  // [r]: block r's copies (other = buffer offset)
    std::vector<std::pair<size_t, size_t>> padding;  // (buffer offset, n) never holding data
    size_t elems() const { return part * blocks.size(); }
  };

  static ShardLayout make(const GptModel& model, int ranks, size_t bucket_bytes);
  // The same from a rank's flat layout and its number of blocks (e.g. for memory prediction).
  static ShardLayout make(const ParamLayout& layout, int layers, int ranks, size_t bucket_bytes);

  int ranks() const { return ranks_; }
  int num_units() const { return num_units_; }
  int num_layers() const { return layers_; }
  const std::vector<Bucket>& buckets() const { return buckets_; }
  size_t shard_size() const { return shard_size_; }  // elements per rank
  size_t padded_total() const { return shard_size_ * static_cast<size_t>(ranks_); }
  size_t max_bucket_elems() const { return max_bucket_; }
  // Rank r's shard as flat ranges (other = shard offset), in shard order.
  std::vector<Copy> shard_pieces(int r) const;
  // The bucket a layer's grad-ready call completes, or -1.
  int bucket_completed_by(int layer) const;

 private:
  int ranks_ = 1, num_units_ = 0, layers_ = 0;
  std::vector<Bucket> buckets_;
  size_t shard_size_ = 0, max_bucket_ = 0;
};

// Copies a bucket's ranges between the flat gradients and its staging buffer.
void pack_bucket(const ShardLayout::Bucket& b, const float* flat, float* buf);
void unpack_bucket(const ShardLayout::Bucket& b, const float* buf, float* flat);

struct GradSyncOptions {
  bool overlap = true;          // buckets on the comm thread as backward completes them
  bool reduce_scatter = false;  // ZeRO-2: each rank keeps only its parts, reduced
  size_t bucket_bytes = 25u << 20;
};

// Sums the gradients over the DP group. Per optimizer step: arm() before the last micro-batch's
// backward, finish() after it. While armed, the model's grad-ready hook queues each completed
// bucket to the communication thread (overlap), which packs it, all-reduces (or
// reduce-scatters) it and unpacks the result into the flat gradients; finish() waits for the
// rest. Without overlap finish() does all of it on the calling thread.
// The comm thread uses `dp` only between arm() and finish(); the training thread must not use
// the same communicator in that window (nothing in Trainer::step does).
class GradSync {
 public:
  GradSync(GptModel& model, Communicator& dp, CachingAllocator& alloc,
           const GradSyncOptions& options);
  ~GradSync();  // uninstalls the hook, stops and joins the thread
  GradSync(const GradSync&) = delete;
  GradSync& operator=(const GradSync&) = delete;

  void arm();
  // Waits until every bucket is synchronised; rethrows a communication error. Returns the
  // milliseconds the caller was blocked (all of the synchronisation without overlap).
  double finish();

  const ShardLayout& layout() const { return layout_; }
  const GradSyncOptions& options() const { return options_; }
  // The bucket staging buffer (layout().max_bucket_elems() floats), free for others to use
  // between finish() and the next arm().
  float* staging() { return buffer_.data(); }

 private:
  void on_grad_ready(int layer);
  void sync_bucket(int b);  // pack, collective, unpack
  void thread_loop();

  GptModel& model_;
  Communicator& dp_;
  GradSyncOptions options_;
  ShardLayout layout_;
  Buffer<float> buffer_;  // max bucket (elements), reused by every bucket
  Buffer<float> recv_;    // reduce-scatter: this rank's block

  std::mutex mu_;
  std::condition_variable cv_work_, cv_done_;
  std::deque<int> queue_;
  std::vector<char> queued_;  // per bucket, this step
  int pending_ = 0;           // queued or running
  bool armed_ = false, stopping_ = false;
  std::exception_ptr error_;
  std::thread thread_;
};

}  // namespace ft::trainer
