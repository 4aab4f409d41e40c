// h2d_gpu_test.cpp: the batch uploader on a real GPU: bytes intact in both modes, and pinned
// copies overlapping a busy kernel (timed with CUDA events). Skips without a device.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <vector>

#include "ft/trainer/data.h"
#include "ft/trainer/h2d.h"
#include "ft/trainer/loader.h"
#include "gpu_test_util.h"

namespace ft::trainer {
namespace {

#define CHECK_CUDA(x)                                                             \
  do {                                                                            \
    const cudaError_t ft_err_ = (x);                                              \
    ASSERT_EQ(ft_err_, cudaSuccess) << #x << ": " << cudaGetErrorString(ft_err_); \
  } while (0)

std::shared_ptr<const data::ChunkedDataset> dataset(int T) {
  std::vector<int32_t> tokens(1 << 18);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>((i * 7919) % 50257);
  return data::make_token_dataset(data::make_vector_source(std::move(tokens)), T, 16);
}

class H2DGpu : public ::testing::TestWithParam<H2DMode> {};

TEST_P(H2DGpu, BytesArriveIntact) {
  FT_REQUIRE_GPU();
  constexpr int B = 4, T = 64, kBatches = 12;
  constexpr size_t kPayload = (size_t{1} << 20) + 3;
  cudaStream_t compute = nullptr;
  CHECK_CUDA(cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking));
  H2DOptions o;
  o.mode = GetParam();
  o.batch_size = B;
  o.seq_len = T;
  o.payload_bytes = kPayload;
  {
    auto up = make_batch_uploader(o, compute);
    EXPECT_EQ(up->staging()->name(), h2d_mode_name(GetParam()));
    data::LoaderOptions lo;
    lo.batch_size = B;
    lo.seq_len = T;
    lo.workers = 2;
    lo.staging = up->staging();
    data::PrefetchLoader loader(dataset(T), lo);
    // Read back every batch (ordered on the compute stream after its copy) into pinned memory
    // filled with a sentinel, with a busy kernel in between so copies run under compute.
    const size_t bt = static_cast<size_t>(B) * T;
    int32_t* back = nullptr;
    unsigned char* payload_back = nullptr;
    CHECK_CUDA(cudaMallocHost(&back, kBatches * 2 * bt * sizeof(int32_t)));
    CHECK_CUDA(cudaMallocHost(&payload_back, kBatches * kPayload));
    std::memset(back, 0xFF, kBatches * 2 * bt * sizeof(int32_t));
    std::memset(payload_back, 0xFF, kBatches * kPayload);
    std::vector<std::vector<int32_t>> expected;
    for (int j = 0; j < kBatches; ++j) {
      data::Batch b;
      ASSERT_TRUE(loader.next(b));
      expected.emplace_back(b.inputs(), b.inputs() + 2 * bt);
      const DeviceBatch d = up->upload(std::move(b));
      ASSERT_EQ(d.index, j);
      gputest::launch_spin(compute, 200000);  // 0.2 ms of "compute" before the reads
      CHECK_CUDA(cudaMemcpyAsync(back + j * 2 * bt, d.inputs, 2 * bt * sizeof(int32_t),
                                 cudaMemcpyDeviceToHost, compute));
      CHECK_CUDA(cudaMemcpyAsync(payload_back + j * kPayload, d.payload, kPayload,
                                 cudaMemcpyDeviceToHost, compute));
    }
    CHECK_CUDA(cudaStreamSynchronize(compute));
    for (int j = 0; j < kBatches; ++j) {
      EXPECT_EQ(std::memcmp(back + j * 2 * bt, expected[j].data(), 2 * bt * sizeof(int32_t)), 0)
          << "batch " << j;
      size_t bad = 0;
      for (size_t i = 0; i < kPayload; ++i)
        bad += payload_back[j * kPayload + i] != h2d_payload_byte(i);
      EXPECT_EQ(bad, 0u) << "payload of batch " << j;
    }
    const H2DStats s = up->stats();
    EXPECT_EQ(s.uploads, kBatches);
    EXPECT_EQ(s.bytes, kBatches * (o.batch_bytes() + kPayload));
    up->drain();
    cudaFreeHost(back);
    cudaFreeHost(payload_back);
  }
  CHECK_CUDA(cudaStreamDestroy(compute));
}

INSTANTIATE_TEST_SUITE_P(Modes, H2DGpu, ::testing::Values(H2DMode::kPinned, H2DMode::kPageable),
                         [](const auto& info) { return std::string(h2d_mode_name(info.param)); });

// Device time from `a` to `b` in ms.
float elapsed_ms(cudaEvent_t a, cudaEvent_t b) {
  float ms = -1;
  cudaEventElapsedTime(&ms, a, b);
  return ms;
}

// One upload after a busy kernel of `spin_ns`: (device ms from before the kernel to the point
// where the compute stream may use the batch, host ms spent in upload()).
struct Timed {
  float device_ms = 0;
  double host_ms = 0;
};

void timed_upload(BatchUploader& up, data::PrefetchLoader& loader, cudaStream_t compute,
                  int64_t spin_ns, Timed* out) {
  cudaEvent_t e0, e1;
  CHECK_CUDA(cudaEventCreate(&e0));
  CHECK_CUDA(cudaEventCreate(&e1));
  data::Batch b;
  ASSERT_TRUE(loader.next(b));
  CHECK_CUDA(cudaEventRecord(e0, compute));
  if (spin_ns > 0) gputest::launch_spin(compute, spin_ns);
  const auto t0 = std::chrono::steady_clock::now();
  up.upload(std::move(b));
  out->host_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  CHECK_CUDA(cudaEventRecord(e1, compute));  // after the compute stream's wait on the copy
  CHECK_CUDA(cudaEventSynchronize(e1));
  out->device_ms = elapsed_ms(e0, e1);
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
}

TEST(H2DGpuOverlap, PinnedCopyOverlapsABusyKernelPageableDoesNot) {
  FT_REQUIRE_GPU();
  constexpr int B = 1, T = 64;
  constexpr size_t kPayload = size_t{256} << 20;  // ~5-20 ms over PCIe
  cudaStream_t compute = nullptr;
  CHECK_CUDA(cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking));
  for (H2DMode mode : {H2DMode::kPinned, H2DMode::kPageable}) {
    SCOPED_TRACE(h2d_mode_name(mode));
    H2DOptions o;
    o.mode = mode;
    o.batch_size = B;
    o.seq_len = T;
    o.payload_bytes = kPayload;
    auto up = make_batch_uploader(o, compute);
    data::LoaderOptions lo;
    lo.batch_size = B;
    lo.seq_len = T;
    lo.workers = 1;
    lo.staging = up->staging();
    data::PrefetchLoader loader(dataset(T), lo);
    Timed warm, alone, busy;
    timed_upload(*up, loader, compute, 0, &warm);  // first-touch costs
    timed_upload(*up, loader, compute, 0, &alone);
    const float copy_ms = alone.device_ms;
    ASSERT_GT(copy_ms, 0.5f) << "the payload copy is too short to time";
    const int64_t spin_ns = static_cast<int64_t>(2.0 * copy_ms * 1e6);
    timed_upload(*up, loader, compute, spin_ns, &busy);
    const float spin_ms = static_cast<float>(spin_ns / 1e6);
    RecordProperty("copy_ms", std::to_string(copy_ms));
    RecordProperty("spin_ms", std::to_string(spin_ms));
    RecordProperty("busy_device_ms", std::to_string(busy.device_ms));
    RecordProperty("busy_host_ms", std::to_string(busy.host_ms));
    std::printf(
        "%s: copy alone %.2f ms; spin %.2f ms + upload: device %.2f ms, host in upload %.2f ms\n",
        h2d_mode_name(mode), copy_ms, spin_ms, busy.device_ms, busy.host_ms);
    if (mode == H2DMode::kPinned) {
      // Overlapped: the copy hides under the kernel (tolerance: a quarter of the copy).
      EXPECT_LT(busy.device_ms, spin_ms + 0.25f * copy_ms);
      EXPECT_LT(busy.host_ms, 0.25 * spin_ms) << "the host only enqueues";
    } else {
      // Serialised after the kernel, and the host waits for both.
      EXPECT_GT(busy.device_ms, spin_ms + 0.75f * copy_ms);
      EXPECT_GT(busy.host_ms, 0.9 * spin_ms);
    }
    up->drain();
  }
  CHECK_CUDA(cudaStreamDestroy(compute));
}

}  // namespace
}  // namespace ft::trainer
