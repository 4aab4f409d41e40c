// tensor_parallel.h: Megatron-style tensor-parallel sharding of the GPT block weights (which tensor
// splits how, shard copies).
#pragma once

#include <cstddef>

#include "ft/trainer/gpt_config.h"

namespace ft::trainer {

// How a parameter tensor is divided among the t ranks of a tensor-parallel group.
//   kRows: a column-parallel layer (QKV, FC1): each rank holds a block of output
//     features, i.e. weight rows and bias entries. QKV keeps the single-process
//     order [q; k; v] inside each shard: rank r holds rows [r*C/t, (r+1)*C/t) of
//     each of q, k and v, which are its NH/t heads (heads are contiguous).
//   kCols: a row-parallel layer (attention projection, FC2): each rank holds a
//     block of input features, i.e. weight columns. Its output is a partial sum
//     that is all-reduced over the group; its bias is replicated and added once,
//     after the all-reduce.
//   kReplicated: embeddings, LayerNorms, row-parallel biases: whole on every rank.
enum class TpSplit { kReplicated, kRows, kCols };
TpSplit tp_split(int index);
inline bool tp_sharded(int index) { return tp_split(index) != TpSplit::kReplicated; }

// Throws ConfigError unless t >= 1 and both heads and channels divide by t.
void check_tp_degree(const GptConfig& c, int t);

// The flat layout of one rank's shard of `full`: the split tensors shrink by t,
// the llm.c tensor order stays.
ParamLayout tp_shard_layout(const ParamLayout& full, int t);

// Copies rank r's shard of tensor `index` out of the whole tensor `full`
// (full_n elements: all the layers it holds) into `shard` (full_n / t elements).
void tp_extract_shard(const GptConfig& c, int index, int r, int t, const float* full, size_t full_n,
                      float* shard);
// The inverse: writes rank r's `shard` into its place in the whole tensor `full`.
void tp_insert_shard(const GptConfig& c, int index, int r, int t, const float* shard, float* full,
                     size_t full_n);

}  // namespace ft::trainer
