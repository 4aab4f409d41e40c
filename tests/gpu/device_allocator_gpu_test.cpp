// device_allocator_gpu_test.cpp: the device caching allocator on cudaMalloc with real streams:
// stream-ordered reuse, record_stream, OOM.
#include "../../trainer/cuda/device_allocator.h"
#include "engine_test_util.h"
#include "ft/core/error.h"

namespace ft::test::gpu {
namespace {

namespace tg = ft::trainer::gpu;

// About 20 ms of spinning on a ~2 GHz GPU: far longer than a memset, so a missing
// cross-stream wait would let the memset finish first.
constexpr long long kSpinCycles = 40'000'000;

class Streams {
 public:
  Streams() {
    cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking);
    cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking);
  }
  ~Streams() {
    cudaStreamDestroy(a);
    cudaStreamDestroy(b);
  }
  cudaStream_t a = nullptr, b = nullptr;
};

tg::StreamId id(cudaStream_t s) { return reinterpret_cast<tg::StreamId>(s); }

TEST(DeviceAllocatorGpuTest, SameStreamReuseAndStats) {
  FT_REQUIRE_GPU();
  tg::DeviceCachingAllocator alloc(tg::make_cuda_device_memory(0));
  Streams s;
  void* p = alloc.allocate(3 << 20, id(s.a), "p");
  alloc.deallocate(p);
  void* q = alloc.allocate(3 << 20, id(s.a), "q");
  EXPECT_EQ(q, p);
  const AllocatorStats st = alloc.stats();
  EXPECT_EQ(st.segment_maps, 1u);
  EXPECT_EQ(st.allocated, size_t{3} << 20);
  EXPECT_EQ(st.reserved, size_t{4} << 20);
  alloc.deallocate(q);
}

TEST(DeviceAllocatorGpuTest, CrossStreamReuseWaitsForTheOldStreamsWork) {
  FT_REQUIRE_GPU();
  tg::DeviceCachingAllocator alloc(tg::make_cuda_device_memory(0));
  Streams s;
  const size_t n = 1 << 20;
  auto* p = static_cast<float*>(alloc.allocate(n * sizeof(float), id(s.a), "slow writer"));
  tg::spin_then_fill(p, n, 1.0f, kSpinCycles, s.a);  // writes 1.0 after ~20 ms
  alloc.deallocate(p);                               // reusable at once on a, after an event on b
  auto* q = static_cast<float*>(alloc.allocate(n * sizeof(float), id(s.b), "fast writer"));
  ASSERT_EQ(q, p);
  EXPECT_EQ(alloc.cross_stream_reuses(), 1u);
  FT_TEST_CUDA(cudaMemsetAsync(q, 0, n * sizeof(float), s.b));  // must run after the fill
  FT_TEST_CUDA(cudaDeviceSynchronize());
  std::vector<float> host(n);
  FT_TEST_CUDA(cudaMemcpy(host.data(), q, n * sizeof(float), cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < n; i += 4099) ASSERT_EQ(host[i], 0.0f) << "b's write ran before a's";
  alloc.deallocate(q);
}

TEST(DeviceAllocatorGpuTest, RecordStreamKeepsTheBlockUntilTheOtherStreamIsDone) {
  FT_REQUIRE_GPU();
  tg::DeviceCachingAllocator alloc(tg::make_cuda_device_memory(0));
  Streams s;
  const size_t n = 1 << 20;
  auto* p = static_cast<float*>(alloc.allocate(n * sizeof(float), id(s.a)));
  tg::spin_then_fill(p, n, 2.0f, kSpinCycles, s.b);  // used on b
  alloc.record_stream(p, id(s.b));
  alloc.deallocate(p);
  void* q = alloc.allocate(n * sizeof(float), id(s.a));
  EXPECT_NE(q, p) << "reused while stream b still writes it";
  FT_TEST_CUDA(cudaStreamSynchronize(s.b));
  void* r = alloc.allocate(n * sizeof(float), id(s.a));
  EXPECT_EQ(r, p) << "b has finished: the block is free again";
  alloc.deallocate(q);
  alloc.deallocate(r);
}

TEST(DeviceAllocatorGpuTest, OomIsAnErrorWithAReportAndLeavesTheDeviceUsable) {
  FT_REQUIRE_GPU();
  tg::DeviceCachingAllocator alloc(tg::make_cuda_device_memory(0));
  void* keep = alloc.allocate(1 << 20, 0, "keep");
  try {
    alloc.allocate(size_t{1} << 45, 0, "act.huge");  // 32 TiB
    FAIL() << "expected OutOfMemoryError";
  } catch (const OutOfMemoryError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("'act.huge' requested 32.00 TiB"), std::string::npos) << m;
    EXPECT_NE(m.find("reserved"), std::string::npos) << m;
    EXPECT_NE(m.find("largest free block"), std::string::npos) << m;
    EXPECT_NE(m.find("cudaMalloc on device 0"), std::string::npos) << m;
  }
  EXPECT_EQ(alloc.stats().ooms, 1u);
  EXPECT_EQ(alloc.stats().cache_flush_retries, 1u);
  void* after = alloc.allocate(1 << 20, 0, "after");  // no sticky error
  EXPECT_NE(after, nullptr);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  alloc.deallocate(after);
  alloc.deallocate(keep);
}

TEST(DeviceAllocatorGpuTest, MemoryLimitBudget) {
  FT_REQUIRE_GPU();
  tg::DeviceAllocatorOptions o;
  o.memory_limit = 8 << 20;
  tg::DeviceCachingAllocator alloc(tg::make_cuda_device_memory(0), o);
  void* p = alloc.allocate(6 << 20, 0);
  EXPECT_THROW(alloc.allocate(4 << 20, 0), OutOfMemoryError);
  alloc.deallocate(p);
}

}  // namespace
}  // namespace ft::test::gpu
