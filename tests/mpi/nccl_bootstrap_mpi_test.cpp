// nccl_bootstrap_mpi_test.cpp: the CPU half of the NCCL backend on 3 MPI ranks: raw-byte
// broadcast, the unique-id bootstrap (and its failure on rank 0 reaching every rank), and the
// clear error every rank gets when there is no GPU.
// FT_TEST_RANKS 3
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "ft/core/rng.h"
#include "ft/trainer/communicator.h"
#include "ft/trainer/device.h"
#include "ft/trainer/nccl_communicator.h"

namespace ft::trainer {
namespace {

Communicator& world() {
  static std::unique_ptr<Communicator> w = make_world_communicator(30.0);
  return *w;
}

TEST(NcclBootstrap, BroadcastBytesFromAnyRoot) {
  const int me = world().rank(), n = world().world_size();
  ASSERT_EQ(n, 3);
  for (int root = 0; root < n; ++root) {
    std::vector<unsigned char> buf(1000 + root, me == root ? 0 : 0xEE);
    if (me == root) {
      for (size_t i = 0; i < buf.size(); ++i) buf[i] = static_cast<unsigned char>(i * 7 + root);
    }
    world().broadcast_bytes(buf.data(), buf.size(), root);
    for (size_t i = 0; i < buf.size(); ++i) {
      ASSERT_EQ(buf[i], static_cast<unsigned char>(i * 7 + root))
          << "root " << root << " byte " << i;
    }
  }
}

TEST(NcclBootstrap, EveryRankGetsRankZerosId) {
  // Each rank's generator would make different bytes; only rank 0's may be used.
  const int me = world().rank();
  int calls = 0;
  const UniqueIdBytes id = bootstrap_unique_id(world(), [&] {
    ++calls;
    Rng rng(1234 + static_cast<uint64_t>(me));
    UniqueIdBytes b;
    for (char& c : b) c = static_cast<char>(rng.next_u64());
    return b;
  });
  EXPECT_EQ(calls, me == 0 ? 1 : 0);
  Rng rng(1234);
  for (size_t i = 0; i < id.size(); ++i) ASSERT_EQ(id[i], static_cast<char>(rng.next_u64())) << i;
}

TEST(NcclBootstrap, AFailureOnRankZeroReachesEveryRank) {
  try {
    bootstrap_unique_id(world(), []() -> UniqueIdBytes { throw Error("no network interface"); });
    FAIL() << "expected CommError";
  } catch (const CommError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("rank 0"), std::string::npos) << msg;
    EXPECT_NE(msg.find("no network interface"), std::string::npos) << msg;
  }
  world().barrier();  // nobody was left in the broadcast
}

TEST(NcclBootstrap, WithoutADeviceEveryRankSaysWhy) {
  if (!cuda_devices().empty()) GTEST_SKIP() << "a GPU is present: tests/gpu covers NCCL";
  NcclOptions o;
  try {
    make_nccl_communicator(world(), o);
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    const std::string msg = e.what();
    EXPECT_TRUE(msg.find("needs a CUDA device") != std::string::npos ||
                msg.find("built with NCCL") != std::string::npos)
        << msg;
  }
  world().barrier();
}

}  // namespace
}  // namespace ft::trainer
