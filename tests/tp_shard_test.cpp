// tp_shard_test.cpp: tensor-parallel shard geometry: which tensors split how, QKV heads per rank,
// round trips, bad degrees.
#include <gtest/gtest.h>

#include <numeric>
#include <string>
#include <vector>

#include "ft/core/error.h"
#include "ft/trainer/tensor_parallel.h"

namespace ft::trainer {
namespace {

GptConfig config() {
  GptConfig g;
  g.vocab_size = 60;
  g.padded_vocab = 64;
  g.channels = 24;
  g.num_heads = 6;
  g.num_layers = 2;
  g.max_seq_len = 8;
  return g;
}

TEST(TpShard, LayoutShrinksOnlyTheSplitTensors) {
  const GptConfig g = config();
  const ParamLayout full = ParamLayout::make(g);
  const ParamLayout s = tp_shard_layout(full, 3);
  size_t off = 0;
  for (int i = 0; i < kNumParamTensors; ++i) {
    EXPECT_EQ(s.sizes[i], tp_sharded(i) ? full.sizes[i] / 3 : full.sizes[i])
        << ParamLayout::name(i);
    EXPECT_EQ(s.offsets[i], off);
    off += s.sizes[i];
  }
  EXPECT_EQ(s.total, off);
  for (int i : {kQkvw, kQkvb, kFcw, kFcb}) EXPECT_EQ(tp_split(i), TpSplit::kRows);
  for (int i : {kAttprojw, kFcprojw}) EXPECT_EQ(tp_split(i), TpSplit::kCols);
  for (int i : {kWte, kWpe, kLn1w, kLn1b, kAttprojb, kLn2w, kLn2b, kFcprojb, kLnfw, kLnfb}) {
    EXPECT_EQ(tp_split(i), TpSplit::kReplicated);
  }
}

// Element values = their index in the whole tensor, so a shard shows where it came from.
std::vector<float> iota_tensor(size_t n) {
  std::vector<float> v(n);
  std::iota(v.begin(), v.end(), 0.0f);
  return v;
}

TEST(TpShard, QkvShardHoldsThisRanksHeadsOfQKAndV) {
  const GptConfig g = config();
  const int t = 3, C = g.channels, L = g.num_layers;
  const size_t n = ParamLayout::make(g).sizes[kQkvw];
  const std::vector<float> whole = iota_tensor(n);
  const int Cl = C / t;  // 8 channels = 2 of the 6 heads
  for (int r = 0; r < t; ++r) {
    std::vector<float> shard(n / t, -1);
    tp_extract_shard(g, kQkvw, r, t, whole.data(), n, shard.data());
    for (int l = 0; l < L; ++l) {
      for (int sec = 0; sec < 3; ++sec) {     // q, k, v
        for (int row = 0; row < Cl; ++row) {  // this rank's output features of that section
          for (int k = 0; k < C; ++k) {
            const size_t local = ((static_cast<size_t>(l) * 3 * Cl + sec * Cl + row) * C) + k;
            const size_t global =
                ((static_cast<size_t>(l) * 3 * C + sec * C + r * Cl + row) * C) + k;
            ASSERT_EQ(shard[local], whole[global]) << "rank " << r << " layer " << l;
          }
        }
      }
    }
  }
}

TEST(TpShard, RowParallelShardHoldsThisRanksInputColumns) {
  const GptConfig g = config();
  const int t = 2, C = g.channels;
  const size_t n = ParamLayout::make(g).sizes[kFcprojw];  // (L, C, 4C)
  const std::vector<float> whole = iota_tensor(n);
  std::vector<float> shard(n / t);
  tp_extract_shard(g, kFcprojw, 1, t, whole.data(), n, shard.data());
  const int in = 4 * C, mine = in / t;
  for (int l = 0; l < g.num_layers; ++l) {
    for (int o = 0; o < C; ++o) {
      for (int k = 0; k < mine; ++k) {
        const size_t local = (static_cast<size_t>(l) * C + o) * mine + k;
        const size_t global = (static_cast<size_t>(l) * C + o) * in + mine + k;
        ASSERT_EQ(shard[local], whole[global]);
      }
    }
  }
}

TEST(TpShard, ShardsOfAllRanksTileEveryTensorExactlyOnce) {
  const GptConfig g = config();
  const ParamLayout full = ParamLayout::make(g);
  for (int t : {1, 2, 3, 6}) {
    for (int i = 0; i < kNumParamTensors; ++i) {
      const size_t n = full.sizes[i];
      const std::vector<float> whole = iota_tensor(n);
      std::vector<float> rebuilt(n, -1);
      const int ranks = tp_sharded(i) ? t : 1;
      const size_t local = tp_sharded(i) ? n / t : n;
      for (int r = 0; r < ranks; ++r) {
        std::vector<float> shard(local);
        tp_extract_shard(g, i, r, tp_sharded(i) ? t : 1, whole.data(), n, shard.data());
        tp_insert_shard(g, i, r, tp_sharded(i) ? t : 1, shard.data(), rebuilt.data(), n);
      }
      EXPECT_EQ(rebuilt, whole) << ParamLayout::name(i) << " t=" << t;
    }
  }
}

TEST(TpShard, DegreeMustDivideHeadsAndChannels) {
  const GptConfig g = config();  // 6 heads, 24 channels
  EXPECT_NO_THROW(check_tp_degree(g, 1));
  EXPECT_NO_THROW(check_tp_degree(g, 2));
  EXPECT_NO_THROW(check_tp_degree(g, 6));
  try {
    check_tp_degree(g, 4);
    ADD_FAILURE() << "--tp 4 with 6 heads was accepted";
  } catch (const ConfigError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("--tp 4"), std::string::npos) << msg;
    EXPECT_NE(msg.find("6 heads"), std::string::npos) << msg;
  }
  EXPECT_THROW(check_tp_degree(g, 0), ConfigError);
}

}  // namespace
}  // namespace ft::trainer
