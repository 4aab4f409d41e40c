// nccl_bootstrap_test.cpp: the NCCL backend's CUDA-free parts in one process: the local
// communicator's byte broadcast, the id bootstrap and the errors without NCCL or a device.
#include <gtest/gtest.h>

#include <string>

#include "ft/trainer/communicator.h"
#include "ft/trainer/device.h"
#include "ft/trainer/nccl_communicator.h"

namespace ft::trainer {
namespace {

TEST(NcclBootstrapLocal, OneProcessKeepsItsOwnId) {
  auto local = make_local_communicator();
  std::string bytes = "unchanged";
  local->broadcast_bytes(bytes.data(), bytes.size(), 0);
  EXPECT_EQ(bytes, "unchanged");
  UniqueIdBytes want{};
  want[0] = 'x';
  want[127] = 'y';
  EXPECT_EQ(bootstrap_unique_id(*local, [&] { return want; }), want);
  try {
    bootstrap_unique_id(*local, []() -> UniqueIdBytes { throw Error("boom"); });
    FAIL() << "expected CommError";
  } catch (const CommError& e) {
    EXPECT_NE(std::string(e.what()).find("boom"), std::string::npos) << e.what();
  }
}

TEST(NcclBootstrapLocal, NoNcclOrNoDeviceIsAConfigError) {
  if (!cuda_devices().empty() && nccl_supported()) GTEST_SKIP() << "a GPU is present";
  auto local = make_local_communicator();
  try {
    make_nccl_communicator(*local, NcclOptions{});
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    const std::string msg = e.what();
    EXPECT_TRUE(nccl_supported() ? msg.find("needs a CUDA device") != std::string::npos
                                 : msg.find("built with NCCL") != std::string::npos)
        << msg;
  }
}

}  // namespace
}  // namespace ft::trainer
