// model_tp.cpp: tensor parallelism for GptModel: shard geometry, sharded init, the all-reduces,
// gathering the whole model.
#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "ft/core/error.h"
#include "ft/trainer/communicator.h"
#include "ft/trainer/model.h"
#include "ft/trainer/ops.h"
#include "ft/trainer/tensor_parallel.h"

namespace ft::trainer {

TpSplit tp_split(int index) {
  switch (index) {
    case kQkvw:
    case kQkvb:
    case kFcw:
    case kFcb:
      return TpSplit::kRows;
    case kAttprojw:
    case kFcprojw:
      return TpSplit::kCols;
    default:
      return TpSplit::kReplicated;
  }
}

void check_tp_degree(const GptConfig& c, int t) {
  if (t < 1) throw ConfigError(fmt::format("--tp {}: the tensor-parallel degree must be >= 1", t));
  if (c.num_heads % t != 0 || c.channels % t != 0) {
    throw ConfigError(fmt::format(
        "--tp {}: tensor parallelism splits the attention heads and channels evenly across "
        "ranks, but the model has {} heads and {} channels (both must be multiples of {})",
        t, c.num_heads, c.channels, t));
  }
}

ParamLayout tp_shard_layout(const ParamLayout& full, int t) {
  ParamLayout p = full;
  size_t off = 0;
  for (int i = 0; i < kNumParamTensors; ++i) {
    if (tp_sharded(i)) p.sizes[i] = full.sizes[i] / t;
    p.offsets[i] = off;
    off += p.sizes[i];
  }
  p.total = off;
  return p;
}

namespace {

// One layer's slice of a sharded tensor as a (rows, cols) matrix; kRows tensors
// split each of `sections` row blocks (q, k, v for QKV), kCols split the columns.
struct Geometry {
  size_t rows = 0, cols = 0, sections = 1;
};

Geometry geometry(const GptConfig& c, int index) {
  const size_t C = c.channels;
  switch (index) {
    case kQkvw:
      return {3 * C, C, 3};
    case kQkvb:
      return {3 * C, 1, 3};
    case kFcw:
      return {4 * C, C, 1};
    case kFcb:
      return {4 * C, 1, 1};
    case kAttprojw:
      return {C, C, 1};
    case kFcprojw:
      return {C, 4 * C, 1};
    default:
      return {};
  }
}

// Walks rank r's pieces of a whole tensor: calls f(full_offset, shard_offset, n).
template <typename F>
void for_each_piece(const GptConfig& c, int index, int r, int t, size_t full_n, F&& f) {
  const TpSplit split = tp_split(index);
  if (split == TpSplit::kReplicated || t == 1) {
    f(size_t{0}, size_t{0}, full_n);
    return;
  }
  const Geometry g = geometry(c, index);
  const size_t per_layer = g.rows * g.cols;
  if (per_layer == 0 || full_n % per_layer != 0) {
    throw Error(fmt::format("tensor {} of {} elements is not a whole number of layers of {}",
                            ParamLayout::name(index), full_n, per_layer));
  }
  const size_t layers = full_n / per_layer;
  size_t s = 0;  // shard offset
  for (size_t l = 0; l < layers; ++l) {
    const size_t base = l * per_layer;
    if (split == TpSplit::kRows) {
      const size_t sec_rows = g.rows / g.sections, mine = sec_rows / t;
      for (size_t sec = 0; sec < g.sections; ++sec) {
        const size_t row0 = sec * sec_rows + static_cast<size_t>(r) * mine;
        f(base + row0 * g.cols, s, mine * g.cols);
        s += mine * g.cols;
      }
    } else {
      const size_t mine = g.cols / t;
      for (size_t row = 0; row < g.rows; ++row) {
        f(base + row * g.cols + static_cast<size_t>(r) * mine, s, mine);
        s += mine;
      }
    }
  }
}

}  // namespace

void tp_extract_shard(const GptConfig& c, int index, int r, int t, const float* full, size_t full_n,
                      float* shard) {
  for_each_piece(c, index, r, t, full_n, [&](size_t fo, size_t so, size_t n) {
    std::memcpy(shard + so, full + fo, n * sizeof(float));
  });
}

void tp_insert_shard(const GptConfig& c, int index, int r, int t, const float* shard, float* full,
                     size_t full_n) {
  for_each_piece(c, index, r, t, full_n, [&](size_t fo, size_t so, size_t n) {
    std::memcpy(full + fo, shard + so, n * sizeof(float));
  });
}

void GptModel::setup_tensor_parallel() {
  full_layout_ = layout_;
  if (!sharding_.tp || sharding_.tp->world_size() <= 1) return;
  tp_ = sharding_.tp->world_size();
  tp_rank_ = sharding_.tp->rank();
  check_tp_degree(config_, tp_);
  layout_ = tp_shard_layout(full_layout_, tp_);
}

void GptModel::load_full_tensor(int index, const float* full) {
  if (lora_) {  // QLoRA: the block linears are quantized to NF4
    lora_load(index, full);
    return;
  }
  if (sharding_.zero3) {  // ZeRO-3: this rank's share; the non-block tensors also whole here
    if (!blocks_) throw Error("zero3: load_full_tensor before the block provider is attached");
    std::vector<float> local;  // this TP rank's shard of a split tensor
    if (tp_ > 1 && tp_sharded(index)) {
      local.resize(full_layout_.sizes[index] / tp_);
      tp_extract_shard(config_, index, tp_rank_, tp_, full, full_layout_.sizes[index],
                       local.data());
    }
    const float* src = local.empty() ? full : local.data();
    blocks_->load_full_tensor(index, src);
    if (layout_.sizes[index]) std::memcpy(param(index), src, layout_.sizes[index] * sizeof(float));
    return;
  }
  if (tp_ == 1 || !tp_sharded(index)) {
    std::memcpy(param(index), full, layout_.sizes[index] * sizeof(float));
    return;
  }
  tp_extract_shard(config_, index, tp_rank_, tp_, full, full_layout_.sizes[index], param(index));
}

std::vector<float> GptModel::gather_full_params() {
  if (lora_) return lora_merged_params();  // QLoRA: the merged model (W + scale B A)
  // This TP rank's tensors: the flat parameters, or under ZeRO-3 gathered over DP (collective).
  std::vector<float> gathered;
  ParamLayout local = layout_;
  if (blocks_) {
    gathered = blocks_->gather_full_params();
    if (tp_ == 1) return gathered;
    local = tp_shard_layout(full_layout_, tp_);
  }
  auto held = [&](int i) {
    return blocks_ ? gathered.data() + local.offsets[i] : static_cast<const float*>(param(i));
  };
  std::vector<float> full(full_layout_.total);
  for (int i = 0; i < kNumParamTensors; ++i) {
    float* dst = full.data() + full_layout_.offsets[i];
    if (tp_ == 1 || !tp_sharded(i)) {
      std::memcpy(dst, held(i), local.sizes[i] * sizeof(float));
      continue;
    }
    const size_t n = local.sizes[i];
    std::vector<float> all(n * tp_);
    sharding_.tp->all_gather(held(i), all.data(), n);
    for (int r = 0; r < tp_; ++r) {
      tp_insert_shard(config_, i, r, tp_, all.data() + n * r, dst, full_layout_.sizes[i]);
    }
  }
  return full;
}

GptModel::SquareSums GptModel::grad_square_sums(size_t begin, size_t end) const {
  SquareSums s;
  for (int i = 0; i < kNumParamTensors; ++i) {
    const size_t lo = std::max(begin, layout_.offsets[i]);
    const size_t hi = std::min(end, layout_.offsets[i] + layout_.sizes[i]);
    if (lo >= hi) continue;
    const double sq = ops::sum_squares(grads() + lo, hi - lo);
    (tp_ > 1 && tp_sharded(i) ? s.sharded : s.replicated) += sq;
  }
  return s;
}

void GptModel::tp_reduce_output(float* out, const float* bias, int N, int C) {
  sharding_.tp->all_reduce_sum(out, static_cast<size_t>(N) * C);
  if (!bias) return;
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    float* row = out + static_cast<size_t>(n) * C;
    for (int c = 0; c < C; ++c) row[c] += bias[c];
  }
}

void GptModel::tp_reduce_input_grad(float* dinp, int N, int C) {
  sharding_.tp->all_reduce_sum(dinp, static_cast<size_t>(N) * C);
}

}  // namespace ft::trainer
