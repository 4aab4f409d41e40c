// grad_sync_test.cpp: the DP bucket/shard layout and GradSync's comm thread, against a recording
// two-rank stand-in communicator.
#include "ft/trainer/grad_sync.h"

#include <gtest/gtest.h>

#include <mutex>
#include <thread>
#include <vector>

#include "ft/core/allocator.h"
#include "ft/core/rng.h"

namespace ft::trainer {
namespace {

GptConfig tiny_config(int layers = 3) {
  GptConfig g;
  g.vocab_size = 60;
  g.padded_vocab = 64;
  g.channels = 16;
  g.num_heads = 2;
  g.num_layers = layers;
  g.max_seq_len = 8;
  return g;
}

TEST(ShardLayout, EveryParameterBelongsToExactlyOneRankAndRoundTripsThroughItsBucket) {
  CachingAllocator alloc;
  GptModel model(tiny_config(), alloc, {});
  const size_t n = model.num_params();
  for (int d : {1, 2, 3, 4}) {
    for (size_t bucket_bytes : {size_t{1}, size_t{8192}, size_t{1} << 30}) {
      const ShardLayout s = ShardLayout::make(model, d, bucket_bytes);
      SCOPED_TRACE(::testing::Message() << "d=" << d << " bucket " << bucket_bytes);
      ASSERT_EQ(s.num_units(), 4);
      EXPECT_GE(s.padded_total(), n);
      EXPECT_LT(s.padded_total(), n + static_cast<size_t>(s.num_units() * d));
      // Shards: every flat element exactly once over the ranks; shard offsets disjoint.
      std::vector<int> owner(n, -1);
      for (int r = 0; r < d; ++r) {
        std::vector<char> used(s.shard_size(), 0);
        for (const auto& c : s.shard_pieces(r)) {
          ASSERT_LE(c.other + c.n, s.shard_size());
          for (size_t i = 0; i < c.n; ++i) {
            ASSERT_EQ(owner[c.flat + i], -1) << "element " << c.flat + i << " owned twice";
            owner[c.flat + i] = r;
            ASSERT_FALSE(used[c.other + i]);
            used[c.other + i] = 1;
          }
        }
      }
      for (size_t i = 0; i < n; ++i) ASSERT_GE(owner[i], 0) << "element " << i << " unowned";
      // Decay flags follow the tensor: qkvw decays, ln1w does not.
      for (const auto& c : s.shard_pieces(0)) {
        const ParamLayout& pl = model.layout();
        if (c.flat >= pl.offsets[kQkvw] && c.flat < pl.offsets[kQkvw] + pl.sizes[kQkvw]) {
          EXPECT_TRUE(c.decays);
        }
        if (c.flat >= pl.offsets[kLn1w] && c.flat < pl.offsets[kLn1w] + pl.sizes[kLn1w]) {
          EXPECT_FALSE(c.decays);
        }
      }
      // Buckets: consecutive units in backward order; the last is completed by layer -1.
      const auto& bs = s.buckets();
      if (bucket_bytes == 1) {
        EXPECT_EQ(bs.size(), 4u);
      }
      if (bucket_bytes == size_t{1} << 30) {
        EXPECT_EQ(bs.size(), 1u);
      }
      EXPECT_EQ(bs.front().first_unit, 0);
      EXPECT_EQ(bs.back().end_unit, 4);
      EXPECT_EQ(bs.back().last_layer, -1);
      EXPECT_EQ(s.bucket_completed_by(-1), static_cast<int>(bs.size()) - 1);
      for (size_t b = 1; b < bs.size(); ++b) EXPECT_EQ(bs[b].first_unit, bs[b - 1].end_unit);
      // Pack then unpack restores the flat values; padding is zero.
      std::vector<float> flat(n), back(n, 0.0f), buf(s.max_bucket_elems(), -1.0f);
      for (size_t i = 0; i < n; ++i) flat[i] = static_cast<float>(i % 1000) + 0.5f;
      for (const auto& b : bs) {
        std::fill(buf.begin(), buf.end(), -1.0f);
        pack_bucket(b, flat.data(), buf.data());
        for (const auto& [off, cnt] : b.padding) {
          for (size_t i = 0; i < cnt; ++i) ASSERT_EQ(buf[off + i], 0.0f);
        }
        unpack_bucket(b, buf.data(), back.data());
      }
      ASSERT_EQ(back, flat);
    }
  }
}

// Two-rank stand-in: the peer is taken to hold the same gradients, so a sum doubles them.
// Records each collective's size and thread.
class TwinCommunicator final : public Communicator {
 public:
  explicit TwinCommunicator(int rank) : rank_(rank) {}
  int rank() const override { return rank_; }
  int world_size() const override { return 2; }
  std::string name() const override { return "twin"; }
  CommGroup group() const override { return CommGroup::kDp; }
  int world_rank_of(int r) const override { return r; }
  void all_reduce_sum(float* data, size_t n) override {
    record(n);
    for (size_t i = 0; i < n; ++i) data[i] *= 2;
  }
  void all_reduce_sum(double* data, size_t n) override {
    for (size_t i = 0; i < n; ++i) data[i] *= 2;
  }
  void all_reduce_max(double*, size_t) override {}
  void reduce_scatter_sum(const float* send, float* recv, size_t n) override {
    record(n);
    for (size_t i = 0; i < n; ++i) recv[i] = 2 * send[static_cast<size_t>(rank_) * n + i];
  }
  void all_gather(const float*, float*, size_t) override {}
  void all_gather(const double*, double*, size_t) override {}
  void broadcast(float*, size_t, int) override {}
  void send(const float*, size_t, int, int) override {}
  void recv(float*, size_t, int, int) override {}
  void barrier() override {}
  std::unique_ptr<Communicator> split(int, int, CommGroup) override { return nullptr; }
  void set_timeout(double) override {}

  std::vector<size_t> sizes;
  std::vector<std::thread::id> threads;

 private:
  void record(size_t n) {
    std::lock_guard<std::mutex> lock(mu_);
    sizes.push_back(n);
    threads.push_back(std::this_thread::get_id());
  }
  int rank_;
  std::mutex mu_;
};

// Runs K micro-batches of a tiny model (fixed inputs), arming `sync` (when given) for the last
// one; returns the gradients after synchronisation.
std::vector<float> run_step(GptModel& model, GradSync* sync, int K) {
  const int B = 2, T = 8, V = model.config().vocab_size;
  Rng rng(5);
  std::vector<int32_t> in(B * T), tg(B * T);
  for (int k = 0; k < K; ++k) {
    for (auto& x : in) x = static_cast<int32_t>(rng.next_u64() % V);
    for (auto& x : tg) x = static_cast<int32_t>(rng.next_u64() % V);
    if (sync && k == K - 1) sync->arm();
    model.forward_backward(in.data(), tg.data(), B, T, 1.0f / (B * T * K), k == 0);
  }
  if (sync) sync->finish();
  return std::vector<float>(model.grads(), model.grads() + model.num_params());
}

TEST(GradSync, BucketsAreSummedInBackwardOrderOnTheCommThreadOnlyForTheLastMicroBatch) {
  for (bool overlap : {true, false}) {
    for (bool scatter : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "overlap " << overlap << " reduce-scatter " << scatter);
      CachingAllocator alloc;
      GptModel model(tiny_config(), alloc, {});
      model.init_weights(3);
      // Reference gradients: the same two micro-batches without any sync.
      CachingAllocator a2;
      GptModel plain(tiny_config(), a2, {});
      plain.init_weights(3);
      const std::vector<float> ref = run_step(plain, nullptr, 2);
      TwinCommunicator comm(1);
      GradSync sync(model, comm, alloc,
                    {.overlap = overlap, .reduce_scatter = scatter, .bucket_bytes = 1});
      const std::vector<float> synced = run_step(model, &sync, 2);
      const auto& bs = sync.layout().buckets();
      ASSERT_EQ(comm.sizes.size(), bs.size()) << "one collective per bucket, last micro only";
      for (size_t b = 0; b < bs.size(); ++b) {
        EXPECT_EQ(comm.sizes[b], scatter ? bs[b].part : bs[b].elems()) << "bucket " << b;
        EXPECT_EQ(comm.threads[b] != std::this_thread::get_id(), overlap) << "bucket " << b;
      }
      // Every gradient doubled (all-reduce) or only rank 1's shard (reduce-scatter).
      std::vector<char> mine(model.num_params(), !scatter);
      for (const auto& c : sync.layout().shard_pieces(1)) {
        for (size_t i = 0; i < c.n; ++i) mine[c.flat + i] = 1;
      }
      for (size_t i = 0; i < ref.size(); ++i) {
        ASSERT_EQ(synced[i], mine[i] ? 2 * ref[i] : ref[i]) << "element " << i;
      }
      // A second step re-arms: the same number of collectives again.
      run_step(model, &sync, 1);
      EXPECT_EQ(comm.sizes.size(), 2 * bs.size());
    }
  }
}

}  // namespace
}  // namespace ft::trainer
