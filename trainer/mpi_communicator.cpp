// mpi_communicator.cpp: the MPI backend of Communicator; the one place ft calls MPI.
#include <mpi.h>
#include <sched.h>
#include <signal.h>
#include <unistd.h>

#include <fmt/format.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>

#include "ft/core/annotate.h"
#include "ft/trainer/communicator.h"

namespace ft::trainer {

namespace {

// Where each world rank runs: lets a timeout name the rank whose process is gone.
struct PeerInfo {
  int32_t pid = 0;
  std::array<char, 60> host{};
};

bool mpi_initialized() {
  int flag = 0;
  MPI_Initialized(&flag);
  return flag != 0;
}
bool mpi_finalized() {
  int flag = 0;
  MPI_Finalized(&flag);
  return flag != 0;
}

std::once_flag g_init_once;

void init_mpi() {
  std::call_once(g_init_once, [] {
    if (mpi_initialized()) return;
    int provided = 0;
    if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS) {
      throw CommError("MPI_Init_thread failed");
    }
    if (provided < MPI_THREAD_MULTIPLE) {
      throw CommError(fmt::format(
          "this MPI library gives thread level {} but ft needs MPI_THREAD_MULTIPLE ({}) for its "
          "gradient-communication thread",
          provided, MPI_THREAD_MULTIPLE));
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  });
}

std::string mpi_error_text(int code) {
  char buf[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, buf, &len) != MPI_SUCCESS) return fmt::format("MPI error {}", code);
  return std::string(buf, static_cast<size_t>(len));
}

enum OpKind : int { kAllReduce, kReduceScatter, kAllGather, kBroadcast, kSend, kRecv, kBarrier, kOps };
constexpr std::array<const char*, kOps> kRangeNames = {"comm.all_reduce", "comm.reduce_scatter",
                                                       "comm.all_gather", "comm.broadcast",
                                                       "comm.send",       "comm.recv",
                                                       "comm.barrier"};

// "0,1,3" (fmt::join trips GCC 12's -Wstringop-overflow false positive).
template <typename T>
std::string joined(const std::vector<T>& v, const char* sep = ",") {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) out += sep;
    out += fmt::format("{}", v[i]);
  }
  return out;
}

int checked_count(size_t n, const char* op) {
  if (n > static_cast<size_t>(INT_MAX)) {
    throw CommError(fmt::format("{} of {} elements exceeds MPI's int count", op, n));
  }
  return static_cast<int>(n);
}

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator(MPI_Comm comm, CommGroup role, double timeout_s,
                  std::shared_ptr<const std::vector<PeerInfo>> peers)
      : comm_(comm), role_(role), timeout_s_(timeout_s), peers_(std::move(peers)) {
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
    MPI_Group mine, world;
    MPI_Comm_group(comm_, &mine);
    MPI_Comm_group(MPI_COMM_WORLD, &world);
    std::vector<int> local(static_cast<size_t>(size_));
    for (int i = 0; i < size_; ++i) local[static_cast<size_t>(i)] = i;
    world_ranks_.resize(static_cast<size_t>(size_));
    MPI_Group_translate_ranks(mine, size_, local.data(), world, world_ranks_.data());
    MPI_Group_free(&mine);
    MPI_Group_free(&world);
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank_);
  }
  ~MpiCommunicator() override {
    if (!mpi_finalized()) MPI_Comm_free(&comm_);
  }

  int rank() const override { return rank_; }
  int world_size() const override { return size_; }
  std::string name() const override {
    return fmt::format("mpi {} group of {} (world ranks {})", comm_group_name(role_), size_,
                       joined(world_ranks_));
  }
  CommGroup group() const override { return role_; }
  int world_rank_of(int r) const override { return world_ranks_.at(static_cast<size_t>(r)); }

  void all_reduce_sum(float* data, size_t n) override {
    run(kAllReduce, -1, [&](MPI_Request* r) {
      return MPI_Iallreduce(MPI_IN_PLACE, data, checked_count(n, "all_reduce"), MPI_FLOAT, MPI_SUM,
                            comm_, r);
    });
  }
  void all_reduce_sum(double* data, size_t n) override {
    run(kAllReduce, -1, [&](MPI_Request* r) {
      return MPI_Iallreduce(MPI_IN_PLACE, data, checked_count(n, "all_reduce"), MPI_DOUBLE,
                            MPI_SUM, comm_, r);
    });
  }
  void all_reduce_max(double* data, size_t n) override {
    run(kAllReduce, -1, [&](MPI_Request* r) {
      return MPI_Iallreduce(MPI_IN_PLACE, data, checked_count(n, "all_reduce"), MPI_DOUBLE,
                            MPI_MAX, comm_, r);
    });
  }
  void reduce_scatter_sum(const float* send, float* recv, size_t n) override {
    run(kReduceScatter, -1, [&](MPI_Request* r) {
      return MPI_Ireduce_scatter_block(send, recv, checked_count(n, "reduce_scatter"), MPI_FLOAT,
                                       MPI_SUM, comm_, r);
    });
  }
  void all_gather(const float* send, float* recv, size_t n) override {
    const bool in_place = send == recv + static_cast<size_t>(rank_) * n;
    run(kAllGather, -1, [&](MPI_Request* r) {
      return MPI_Iallgather(in_place ? MPI_IN_PLACE : send, checked_count(n, "all_gather"),
                            MPI_FLOAT, recv, static_cast<int>(n), MPI_FLOAT, comm_, r);
    });
  }
  void all_gather(const double* send, double* recv, size_t n) override {
    const bool in_place = send == recv + static_cast<size_t>(rank_) * n;
    run(kAllGather, -1, [&](MPI_Request* r) {
      return MPI_Iallgather(in_place ? MPI_IN_PLACE : send, checked_count(n, "all_gather"),
                            MPI_DOUBLE, recv, static_cast<int>(n), MPI_DOUBLE, comm_, r);
    });
  }
  void broadcast(float* data, size_t n, int root) override {
    run(kBroadcast, root, [&](MPI_Request* r) {
      return MPI_Ibcast(data, checked_count(n, "broadcast"), MPI_FLOAT, root, comm_, r);
    });
  }
  void broadcast_bytes(void* data, size_t bytes, int root) override {
    run(kBroadcast, root, [&](MPI_Request* r) {
      return MPI_Ibcast(data, checked_count(bytes, "broadcast"), MPI_BYTE, root, comm_, r);
    });
  }
  void send(const float* data, size_t n, int peer, int tag) override {
    run(kSend, peer, [&](MPI_Request* r) {
      return MPI_Isend(data, checked_count(n, "send"), MPI_FLOAT, peer, tag, comm_, r);
    });
  }
  void recv(float* data, size_t n, int peer, int tag) override {
    run(kRecv, peer, [&](MPI_Request* r) {
      return MPI_Irecv(data, checked_count(n, "recv"), MPI_FLOAT, peer, tag, comm_, r);
    });
  }
  void send_bytes(const void* data, size_t bytes, int peer, int tag) override {
    run(kSend, peer, [&](MPI_Request* r) {
      return MPI_Isend(data, checked_count(bytes, "send"), MPI_BYTE, peer, tag, comm_, r);
    });
  }
  void recv_bytes(void* data, size_t bytes, int peer, int tag) override {
    run(kRecv, peer, [&](MPI_Request* r) {
      return MPI_Irecv(data, checked_count(bytes, "recv"), MPI_BYTE, peer, tag, comm_, r);
    });
  }
  void barrier() override {
    run(kBarrier, -1, [&](MPI_Request* r) { return MPI_Ibarrier(comm_, r); });
  }

  std::unique_ptr<Communicator> split(int color, int key, CommGroup role) override {
    MPI_Comm out = MPI_COMM_NULL;
    const int rc = MPI_Comm_split(comm_, color, key, &out);
    if (rc != MPI_SUCCESS) {
      throw CommError(fmt::format("rank {}: MPI_Comm_split of the {} group failed: {}",
                                  world_rank_, comm_group_name(role_), mpi_error_text(rc)));
    }
    return std::make_unique<MpiCommunicator>(out, role, timeout_s_, peers_);
  }
  void set_timeout(double seconds) override { timeout_s_ = seconds; }

 private:
  // Starts a non-blocking operation and polls it to completion or the deadline.
  // Polling (MPI_Test, then yields, then short sleeps) both drives MPI's progress
  // and leaves the core to the peer when ranks oversubscribe the machine.
  template <typename Start>
  void run(OpKind op, int peer, Start&& start) {
    const uint64_t seq = seq_[op].fetch_add(1, std::memory_order_relaxed);
    FT_RANGE(kRangeNames[op], RangeKind::kComm, comm_range_arg(role_, seq));
    MPI_Request req = MPI_REQUEST_NULL;
    int rc = start(&req);
    if (rc != MPI_SUCCESS) fail(op, peer, mpi_error_text(rc));
    const auto t0 = std::chrono::steady_clock::now();
    for (long polls = 0;; ++polls) {
      int done = 0;
      rc = MPI_Test(&req, &done, MPI_STATUS_IGNORE);
      if (rc != MPI_SUCCESS) fail(op, peer, mpi_error_text(rc));
      if (done) return;
      if (polls < 64) continue;
      if (polls < 4096) {
        sched_yield();
      } else {
        std::this_thread::sleep_for(std::chrono::microseconds(polls < 20000 ? 20 : 200));
      }
      if (timeout_s_ > 0 && (polls & 63) == 0) {
        const double waited =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (waited > timeout_s_) {
          fail(op, peer, fmt::format("no completion within {:.0f} s (--comm-timeout)", timeout_s_));
        }
      }
    }
  }

  [[noreturn]] void fail(OpKind op, int peer, const std::string& why) const {
    std::string target = peer >= 0 ? fmt::format(" with rank {}", world_rank_of(peer)) : "";
    throw CommError(fmt::format("rank {}: {}{} on the {} group (world ranks {}) failed: {}; {}",
                                world_rank_, kRangeNames[op] + 5, target, comm_group_name(role_),
                                joined(world_ranks_), why, suspects()));
  }

  // Names group members whose process has exited (checked for ranks on this host).
  std::string suspects() const {
    char host[MPI_MAX_PROCESSOR_NAME];
    int len = 0;
    MPI_Get_processor_name(host, &len);
    const std::string me(host, static_cast<size_t>(len));
    std::vector<std::string> gone, remote;
    for (int w : world_ranks_) {
      if (w == world_rank_ || !peers_ || static_cast<size_t>(w) >= peers_->size()) continue;
      const PeerInfo& p = (*peers_)[static_cast<size_t>(w)];
      const std::string h(p.host.data(), strnlen(p.host.data(), p.host.size()));
      if (h.substr(0, 59) != me.substr(0, 59)) {
        remote.push_back(std::to_string(w));
      } else if (::kill(p.pid, 0) != 0 && errno == ESRCH) {
        gone.push_back(fmt::format("rank {} (pid {})", w, p.pid));
      }
    }
    if (!gone.empty()) return fmt::format("dead: {} has exited", joined(gone, ", "));
    if (!remote.empty()) {
      return fmt::format("no local peer has exited; ranks {} run on other hosts",
                         joined(remote));
    }
    return "every peer process is still alive: one is stuck or much slower";
  }

  MPI_Comm comm_;
  CommGroup role_;
  double timeout_s_;
  std::shared_ptr<const std::vector<PeerInfo>> peers_;
  int rank_ = 0, size_ = 1, world_rank_ = 0;
  std::vector<int> world_ranks_;
  std::array<std::atomic<uint64_t>, kOps> seq_{};
};

}  // namespace

bool mpi_supported() { return true; }

std::unique_ptr<Communicator> make_world_communicator(double timeout_s) {
  if (!launched_by_mpi()) return make_local_communicator();
  init_mpi();
  MPI_Comm dup = MPI_COMM_NULL;
  int rc = MPI_Comm_dup(MPI_COMM_WORLD, &dup);
  if (rc != MPI_SUCCESS) throw CommError("MPI_Comm_dup failed: " + mpi_error_text(rc));
  int size = 1;
  MPI_Comm_size(dup, &size);
  PeerInfo me;
  me.pid = static_cast<int32_t>(::getpid());
  char host[MPI_MAX_PROCESSOR_NAME];
  int len = 0;
  MPI_Get_processor_name(host, &len);
  std::memcpy(me.host.data(), host, std::min<size_t>(static_cast<size_t>(len), me.host.size() - 1));
  auto peers = std::make_shared<std::vector<PeerInfo>>(static_cast<size_t>(size));
  rc = MPI_Allgather(&me, sizeof(PeerInfo), MPI_BYTE, peers->data(), sizeof(PeerInfo), MPI_BYTE,
                     dup);
  if (rc != MPI_SUCCESS) throw CommError("MPI_Allgather of peer info failed: " + mpi_error_text(rc));
  return std::make_unique<MpiCommunicator>(dup, CommGroup::kWorld, timeout_s, std::move(peers));
}

void abort_job(int exit_code) {
  if (mpi_initialized() && !mpi_finalized()) MPI_Abort(MPI_COMM_WORLD, exit_code);
  std::exit(exit_code);
}

void finalize_comm() {
  if (mpi_initialized() && !mpi_finalized()) MPI_Finalize();
}

}  // namespace ft::trainer
