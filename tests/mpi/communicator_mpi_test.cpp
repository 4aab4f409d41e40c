// communicator_mpi_test.cpp: the MPI Communicator's collectives, splits and timeouts on 4 ranks.
// FT_TEST_RANKS 4
#include <gtest/gtest.h>

#include <chrono>
#include <numeric>
#include <thread>
#include <vector>

#include "ft/trainer/communicator.h"
#include "ft/trainer/parallel.h"

namespace ft::trainer {
namespace {

Communicator& world() {
  static std::unique_ptr<Communicator> w = make_world_communicator(30.0);
  return *w;
}

TEST(MpiCommunicator, LaunchedWithFourRanks) {
  ASSERT_TRUE(launched_by_mpi());
  ASSERT_TRUE(mpi_supported());
  EXPECT_EQ(world().world_size(), 4);
  EXPECT_EQ(world().group(), CommGroup::kWorld);
}

TEST(MpiCommunicator, AllReduceSumAndMax) {
  const int r = world().rank(), n = world().world_size();
  std::vector<float> f(1000);
  for (size_t i = 0; i < f.size(); ++i) f[i] = static_cast<float>(r + 1) * static_cast<float>(i);
  world().all_reduce_sum(f.data(), f.size());
  const float tri = static_cast<float>(n * (n + 1) / 2);
  for (size_t i = 0; i < f.size(); ++i) ASSERT_EQ(f[i], tri * static_cast<float>(i)) << i;
  double d[2] = {0.25 * r, -1.0 * r};
  world().all_reduce_sum(d, 2);
  EXPECT_DOUBLE_EQ(d[0], 0.25 * 6);
  EXPECT_DOUBLE_EQ(d[1], -6.0);
  double m = 10.0 * r;
  world().all_reduce_max(&m, 1);
  EXPECT_DOUBLE_EQ(m, 30.0);
}

TEST(MpiCommunicator, ReduceScatterAndAllGather) {
  const int r = world().rank(), n = world().world_size();
  const size_t k = 3;
  std::vector<float> send(k * n);
  for (size_t i = 0; i < send.size(); ++i) send[i] = static_cast<float>(i + 100 * r);
  std::vector<float> mine(k);
  world().reduce_scatter_sum(send.data(), mine.data(), k);
  for (size_t j = 0; j < k; ++j) {
    const size_t i = r * k + j;
    EXPECT_EQ(mine[j], static_cast<float>(n * i + 100 * (0 + 1 + 2 + 3))) << j;
  }
  std::vector<float> all(k * n, -1);
  world().all_gather(mine.data(), all.data(), k);
  for (size_t i = 0; i < all.size(); ++i) {
    EXPECT_EQ(all[i], static_cast<float>(n * i + 600)) << i;
  }
  // In place: this rank's block already sits in recv.
  std::vector<float> inplace(k * n, 0);
  for (size_t j = 0; j < k; ++j) inplace[r * k + j] = static_cast<float>(r);
  world().all_gather(inplace.data() + r * k, inplace.data(), k);
  for (size_t i = 0; i < inplace.size(); ++i) EXPECT_EQ(inplace[i], static_cast<float>(i / k));
  std::vector<double> ds(n);
  const double me = 1.5 * r;
  world().all_gather(&me, ds.data(), 1);
  for (int i = 0; i < n; ++i) EXPECT_DOUBLE_EQ(ds[i], 1.5 * i);
}

TEST(MpiCommunicator, BroadcastAndSendRecvRing) {
  const int r = world().rank(), n = world().world_size();
  std::vector<float> b(17, static_cast<float>(r));
  world().broadcast(b.data(), b.size(), 2);
  for (float x : b) EXPECT_EQ(x, 2.0f);
  // Ring: even ranks send first, odd ranks receive first (no deadlock with blocking calls).
  std::vector<float> out(5, static_cast<float>(r)), in(5, -1);
  const int next = (r + 1) % n, prev = (r + n - 1) % n;
  if (r % 2 == 0) {
    world().send(out.data(), out.size(), next, 7);
    world().recv(in.data(), in.size(), prev, 7);
  } else {
    world().recv(in.data(), in.size(), prev, 7);
    world().send(out.data(), out.size(), next, 7);
  }
  for (float x : in) EXPECT_EQ(x, static_cast<float>(prev));
}

TEST(MpiCommunicator, ParallelGroupsTwoByTwo) {
  ParallelConfig cfg;
  cfg.dp = 2;
  cfg.tp = 2;
  const int r = world().rank();
  ParallelGroups g = ParallelGroups::make(world().split(0, r, CommGroup::kWorld), cfg);
  EXPECT_EQ(g.tp_rank, r % 2);
  EXPECT_EQ(g.dp_rank, r / 2);
  EXPECT_EQ(g.pp_stage, 0);
  EXPECT_EQ(g.tp->world_size(), 2);
  EXPECT_EQ(g.dp->world_size(), 2);
  EXPECT_EQ(g.pp->world_size(), 1);
  EXPECT_EQ(g.tp->world_rank_of(0), (r / 2) * 2);
  EXPECT_EQ(g.dp->world_rank_of(1), 2 + r % 2);
  // A sum over the TP group only sees the two ranks of this DP replica.
  float x = static_cast<float>(r);
  g.tp->all_reduce_sum(&x, 1);
  EXPECT_EQ(x, static_cast<float>((r / 2) * 4 + 1));
  ParallelConfig bad;
  bad.dp = 3;
  EXPECT_THROW(ParallelGroups::make(world().split(0, r, CommGroup::kWorld), bad), ConfigError);
}

TEST(MpiCommunicator, TimeoutNamesTheGroupInsteadOfHanging) {
  const int r = world().rank();
  auto pair = world().split(r / 2, r, CommGroup::kOther);  // {0,1} and {2,3}
  if (pair->rank() == 0) {
    pair->set_timeout(0.3);
    const auto t0 = std::chrono::steady_clock::now();
    try {
      pair->barrier();
      ADD_FAILURE() << "the barrier completed although the peer had not arrived";
    } catch (const CommError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("barrier"), std::string::npos) << what;
      EXPECT_NE(what.find("other group"), std::string::npos) << what;
      EXPECT_NE(what.find("still alive"), std::string::npos) << what;
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_LT(s, 5.0);
  } else {
    std::this_thread::sleep_for(std::chrono::milliseconds(800));
    pair->barrier();  // matches the abandoned one; the world barrier below drives it home
  }
  world().barrier();
}

}  // namespace
}  // namespace ft::trainer
