// nccl_communicator.cpp: the NCCL backend of Communicator; the one place ft calls NCCL.
#include "ft/trainer/nccl_communicator.h"

#include <cuda_runtime.h>
#include <fmt/format.h>
#include <nccl.h>
#include <sched.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "cuda_check.h"
#include "ft/core/annotate.h"
#include "ft/trainer/device.h"

namespace ft::trainer {
namespace {

static_assert(sizeof(ncclUniqueId) == sizeof(UniqueIdBytes), "ncclUniqueId is 128 bytes");

enum OpKind : int {
  kInit,
  kAllReduce,
  kReduceScatter,
  kAllGather,
  kBroadcast,
  kSend,
  kRecv,
  kBarrier,
  kOps
};
constexpr std::array<const char*, kOps> kRangeNames = {
    "comm.init",      "comm.all_reduce", "comm.reduce_scatter", "comm.all_gather",
    "comm.broadcast", "comm.send",       "comm.recv",           "comm.barrier"};

// "0,1,3" (fmt::join and string + trip GCC 12's -Wrestrict / -Wstringop-overflow false alarms).
std::string joined(const std::vector<int>& v) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) out.push_back(',');
    out += fmt::format("{}", v[i]);
  }
  return out;
}

UniqueIdBytes new_unique_id() {
  ncclUniqueId id;
  const ncclResult_t r = ncclGetUniqueId(&id);
  if (r != ncclSuccess) {
    throw CommError(fmt::format("ncclGetUniqueId: {}", ncclGetErrorString(r)));
  }
  UniqueIdBytes out;
  std::memcpy(out.data(), &id, sizeof(id));
  return out;
}

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(std::unique_ptr<Communicator> mpi, const NcclOptions& o, CommGroup role)
      : mpi_(std::move(mpi)), o_(o), role_(role) {
    rank_ = mpi_->rank();
    size_ = mpi_->world_size();
    for (int r = 0; r < size_; ++r) world_ranks_.push_back(mpi_->world_rank_of(r));
    world_rank_ = world_ranks_.at(static_cast<size_t>(rank_));
    stream_name_ = fmt::format("ft.nccl.{}", comm_group_name(role_));
    try {
      FT_CUDA_CHECK(cudaSetDevice(o_.device));
      const UniqueIdBytes idb = bootstrap_unique_id(*mpi_, new_unique_id);
      ncclUniqueId id;
      std::memcpy(&id, idb.data(), sizeof(id));
      ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
      cfg.blocking = 0;  // every call returns; we poll, so a dead peer is a timeout, not a hang
      cfg.commName = stream_name_.c_str();
      FT_RANGE(kRangeNames[kInit], RangeKind::kComm, comm_range_arg(role_, 0));
      const auto t0 = std::chrono::steady_clock::now();
      const ncclResult_t r = ncclCommInitRankConfig(&comm_, size_, id, rank_, &cfg);
      if (r != ncclSuccess && r != ncclInProgress) fail_nccl(kInit, -1, r);
      await_enqueue(kInit, -1, t0);
      FT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
      name_cuda_stream(stream_, stream_name_.c_str());
      FT_CUDA_CHECK(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming));
      FT_CUDA_CHECK(cudaMalloc(&scratch_, sizeof(float)));
      FT_CUDA_CHECK(cudaMemsetAsync(scratch_, 0, sizeof(float), stream_));  // ordered with stream_
    } catch (...) {
      release();
      throw;
    }
  }
  ~NcclCommunicator() override { release(); }

  int rank() const override { return rank_; }
  int world_size() const override { return size_; }
  std::string name() const override {
    return fmt::format("nccl {} group of {} (world ranks {}) on device {}", comm_group_name(role_),
                       size_, joined(world_ranks_), o_.device);
  }
  CommGroup group() const override { return role_; }
  int world_rank_of(int r) const override { return world_ranks_.at(static_cast<size_t>(r)); }

  void all_reduce_sum(float* data, size_t n) override {
    run(kAllReduce, -1, n,
        [&] { return ncclAllReduce(data, data, n, ncclFloat32, ncclSum, comm_, stream_); });
  }
  void all_reduce_sum(double* data, size_t n) override {
    run(kAllReduce, -1, n,
        [&] { return ncclAllReduce(data, data, n, ncclFloat64, ncclSum, comm_, stream_); });
  }
  void all_reduce_max(double* data, size_t n) override {
    run(kAllReduce, -1, n,
        [&] { return ncclAllReduce(data, data, n, ncclFloat64, ncclMax, comm_, stream_); });
  }
  // send (size * n) -> recv (n): NCCL's recvcount is the per-rank block.
  void reduce_scatter_sum(const float* send, float* recv, size_t n) override {
    run(kReduceScatter, -1, n,
        [&] { return ncclReduceScatter(send, recv, n, ncclFloat32, ncclSum, comm_, stream_); });
  }
  // send (n) -> recv (size * n); NCCL treats send == recv + rank * n as in place.
  void all_gather(const float* send, float* recv, size_t n) override {
    run(kAllGather, -1, n,
        [&] { return ncclAllGather(send, recv, n, ncclFloat32, comm_, stream_); });
  }
  void all_gather(const double* send, double* recv, size_t n) override {
    run(kAllGather, -1, n,
        [&] { return ncclAllGather(send, recv, n, ncclFloat64, comm_, stream_); });
  }
  void broadcast(float* data, size_t n, int root) override {
    check_peer(kBroadcast, root);
    run(kBroadcast, root, n,
        [&] { return ncclBroadcast(data, data, n, ncclFloat32, root, comm_, stream_); });
  }
  void broadcast_bytes(void* data, size_t bytes, int root) override {
    check_peer(kBroadcast, root);
    run(kBroadcast, root, bytes,
        [&] { return ncclBroadcast(data, data, bytes, ncclUint8, root, comm_, stream_); });
  }
  void send(const float* data, size_t n, int peer, int) override {
    check_peer(kSend, peer);
    run(kSend, peer, n, [&] { return ncclSend(data, n, ncclFloat32, peer, comm_, stream_); });
  }
  void recv(float* data, size_t n, int peer, int) override {
    check_peer(kRecv, peer);
    run(kRecv, peer, n, [&] { return ncclRecv(data, n, ncclFloat32, peer, comm_, stream_); });
  }
  void barrier() override {
    run(kBarrier, -1, 1,
        [&] { return ncclAllReduce(scratch_, scratch_, 1, ncclFloat32, ncclSum, comm_, stream_); });
  }

  std::unique_ptr<Communicator> split(int color, int key, CommGroup role) override {
    // The MPI side splits the same way (ordered by key, then rank), and the part bootstraps its
    // own NCCL communicator over it.
    std::unique_ptr<Communicator> part = mpi_->split(color, key, role);
    return std::make_unique<NcclCommunicator>(std::move(part), o_, role);
  }
  void set_timeout(double seconds) override {
    o_.timeout_s = seconds;
    mpi_->set_timeout(seconds);
  }

 private:
  // Waits for the enqueued operation to complete on the device, polling the stream and the
  // communicator's asynchronous error, with the MPI backend's back-off and deadline.
  template <typename Enqueue>
  void run(OpKind op, int peer, size_t count, Enqueue&& enqueue) {
    const uint64_t seq = seq_[op].fetch_add(1, std::memory_order_relaxed);
    FT_RANGE(kRangeNames[op], RangeKind::kComm, comm_range_arg(role_, seq));
    std::lock_guard<std::mutex> lock(mu_);  // NCCL communicators are not thread-safe
    if (comm_ == nullptr) fail(op, peer, "the communicator was aborted after an earlier failure");
    if (count == 0) return;
    FT_CUDA_CHECK(cudaSetDevice(o_.device));
    // The buffers are the compute stream's: start after the work enqueued there so far.
    FT_CUDA_CHECK(cudaEventRecord(ready_, static_cast<cudaStream_t>(o_.compute_stream)));
    FT_CUDA_CHECK(cudaStreamWaitEvent(stream_, ready_, 0));
    const auto t0 = std::chrono::steady_clock::now();
    const ncclResult_t r = enqueue();
    if (r != ncclSuccess && r != ncclInProgress) fail_nccl(op, peer, r);
    await_enqueue(op, peer, t0);
    for (long polls = 0;; ++polls) {
      const cudaError_t q = cudaStreamQuery(stream_);
      if (q == cudaSuccess) return;
      if (q != cudaErrorNotReady) {
        abort_comm();
        fail(op, peer,
             fmt::format("CUDA error {} ({})", cudaGetErrorName(q), cudaGetErrorString(q)));
      }
      check_async(op, peer);
      back_off(op, peer, polls, t0);
    }
  }

  // Non-blocking communicators may still be enqueuing (ncclInProgress) when a call returns.
  void await_enqueue(OpKind op, int peer, std::chrono::steady_clock::time_point t0) {
    for (long polls = 0;; ++polls) {
      ncclResult_t state = ncclSuccess;
      const ncclResult_t r = ncclCommGetAsyncError(comm_, &state);
      if (r != ncclSuccess) fail_nccl(op, peer, r);
      if (state == ncclSuccess) return;
      if (state != ncclInProgress) fail_nccl(op, peer, state);
      back_off(op, peer, polls, t0);
    }
  }

  void check_async(OpKind op, int peer) {
    ncclResult_t state = ncclSuccess;
    const ncclResult_t r = ncclCommGetAsyncError(comm_, &state);
    if (r != ncclSuccess) fail_nccl(op, peer, r);
    if (state != ncclSuccess && state != ncclInProgress) fail_nccl(op, peer, state);
  }

  void back_off(OpKind op, int peer, long polls, std::chrono::steady_clock::time_point t0) {
    if (polls < 64) return;
    if (polls < 4096) {
      sched_yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(polls < 20000 ? 20 : 200));
    }
    if (o_.timeout_s > 0 && (polls & 63) == 0) {
      const double waited =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (waited > o_.timeout_s) {
        abort_comm();
        fail(op, peer,
             fmt::format("no completion within {:.0f} s (--comm-timeout); communicator aborted",
                         o_.timeout_s));
      }
    }
  }

  void check_peer(OpKind op, int peer) const {
    if (peer < 0 || peer >= size_) {
      throw CommError(fmt::format("rank {}: nccl {} on the {} group: rank {} is not in [0, {})",
                                  world_rank_, kRangeNames[op] + 5, comm_group_name(role_), peer,
                                  size_));
    }
  }

  [[noreturn]] void fail_nccl(OpKind op, int peer, ncclResult_t r) {
    std::string why = fmt::format("{} ({})", ncclGetErrorString(r), static_cast<int>(r));
    if (comm_ != nullptr) {
      const char* last = ncclGetLastError(comm_);
      if (last != nullptr && last[0] != 0) why += fmt::format(": {}", last);
    }
    abort_comm();
    fail(op, peer, why);
  }

  [[noreturn]] void fail(OpKind op, int peer, const std::string& why) const {
    const std::string target = peer >= 0 && peer < size_
                                   ? fmt::format(" with rank {}", world_rank_of(peer))
                                   : std::string();
    throw CommError(fmt::format("rank {}: nccl {}{} on the {} group (world ranks {}) failed: {}",
                                world_rank_, kRangeNames[op] + 5, target, comm_group_name(role_),
                                joined(world_ranks_), why));
  }

  // Tears down a stuck or failed communicator; later calls fail fast.
  void abort_comm() noexcept {
    if (comm_ != nullptr) ncclCommAbort(comm_);
    comm_ = nullptr;
  }

  void release() noexcept {
    if (comm_ != nullptr) {
      if (stream_ != nullptr) cudaStreamSynchronize(stream_);
      ncclCommDestroy(comm_);
      comm_ = nullptr;
    }
    if (scratch_ != nullptr) cudaFree(scratch_);
    if (ready_ != nullptr) cudaEventDestroy(ready_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
    scratch_ = nullptr;
    ready_ = nullptr;
    stream_ = nullptr;
  }

  std::unique_ptr<Communicator> mpi_;  // the same ranks over MPI: bootstrap, splits, rank names
  NcclOptions o_;
  CommGroup role_;
  int rank_ = 0, size_ = 1, world_rank_ = 0;
  std::vector<int> world_ranks_;
  std::string stream_name_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t ready_ = nullptr;
  float* scratch_ = nullptr;  // the barrier's one-element all-reduce
  std::mutex mu_;
  std::array<std::atomic<uint64_t>, kOps> seq_{};
};

}  // namespace

bool nccl_supported() { return true; }

std::unique_ptr<Communicator> make_nccl_communicator(Communicator& world,
                                                     const NcclOptions& options) {
  std::string reason;
  const std::vector<CudaDeviceInfo> devices = cuda_devices(&reason);
  if (devices.empty()) {
    throw ConfigError("the NCCL communicator needs a CUDA device: " +
                      (reason.empty() ? std::string("none found") : reason));
  }
  if (options.device < 0 || options.device >= static_cast<int>(devices.size())) {
    throw ConfigError(fmt::format("NCCL communicator: CUDA device {} does not exist ({} visible)",
                                  options.device, devices.size()));
  }
  // An MPI communicator of its own over the same ranks (collective), for bootstrap and splits.
  std::unique_ptr<Communicator> mine = world.split(0, world.rank(), world.group());
  return std::make_unique<NcclCommunicator>(std::move(mine), options, world.group());
}

}  // namespace ft::trainer
