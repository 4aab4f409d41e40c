// communicator.cpp: the single-process communicator, group names and the MPI-less stubs.
#include "ft/trainer/communicator.h"

#include <fmt/format.h>

#include <cstdlib>
#include <cstring>

#include "ft/core/annotate.h"

namespace ft::trainer {

void Communicator::broadcast_bytes(void*, size_t, int) {
  throw CommError(fmt::format("broadcast_bytes is not supported by {}", name()));
}

void Communicator::send_bytes(const void*, size_t, int, int) {
  throw CommError(fmt::format("send_bytes is not supported by {}", name()));
}

void Communicator::recv_bytes(void*, size_t, int, int) {
  throw CommError(fmt::format("recv_bytes is not supported by {}", name()));
}

namespace {

// One process: sums of one contribution are the identity; gathers copy.
class LocalCommunicator final : public Communicator {
 public:
  explicit LocalCommunicator(CommGroup role) : role_(role) {}
  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  std::string name() const override { return fmt::format("local ({})", comm_group_name(role_)); }
  CommGroup group() const override { return role_; }
  int world_rank_of(int r) const override { return r; }
  void all_reduce_sum(float*, size_t) override {}
  void all_reduce_sum(double*, size_t) override {}
  void all_reduce_max(double*, size_t) override {}
  void reduce_scatter_sum(const float* send, float* recv, size_t n) override { copy(send, recv, n); }
  void all_gather(const float* send, float* recv, size_t n) override { copy(send, recv, n); }
  void all_gather(const double* send, double* recv, size_t n) override { copy(send, recv, n); }
  void broadcast(float*, size_t, int) override {}
  void broadcast_bytes(void*, size_t, int) override {}
  void send(const float*, size_t, int peer, int) override { no_peer("send to", peer); }
  void recv(float*, size_t, int peer, int) override { no_peer("recv from", peer); }
  void barrier() override {}
  std::unique_ptr<Communicator> split(int, int, CommGroup role) override {
    return std::make_unique<LocalCommunicator>(role);
  }
  void set_timeout(double) override {}

 private:
  template <typename T>
  static void copy(const T* from, T* to, size_t n) {
    if (from != to && n) std::memmove(to, from, n * sizeof(T));
  }
  [[noreturn]] void no_peer(const char* what, int peer) const {
    throw CommError(fmt::format("{} rank {}: the {} group has one process", what, peer,
                                comm_group_name(role_)));
  }
  CommGroup role_;
};

}  // namespace

std::unique_ptr<Communicator> make_local_communicator(CommGroup role) {
  return std::make_unique<LocalCommunicator>(role);
}

bool launched_by_mpi() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE", "MPI_LOCALNRANKS"}) {
    if (std::getenv(v)) return true;
  }
  return false;
}

#if !FT_WITH_MPI
bool mpi_supported() { return false; }

std::unique_ptr<Communicator> make_world_communicator(double) {
  if (launched_by_mpi()) {
    throw ConfigError(
        "started by an MPI launcher, but this ft was built without MPI (configure with "
        "-DFT_WITH_MPI=ON and install libopenmpi-dev)");
  }
  return make_local_communicator();
}

void abort_job(int exit_code) { std::exit(exit_code); }
void finalize_comm() {}
#endif

}  // namespace ft::trainer
