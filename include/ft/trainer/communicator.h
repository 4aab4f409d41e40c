// communicator.h: the collective-communication seam; a single-process implementation lives here.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

namespace ft::trainer {

// Collectives the trainer needs. MPI and NCCL backends implement the same
// interface in later work; a dead peer must surface as an ft::Error, never a hang.
class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  virtual std::string name() const = 0;
  // In-place sum across ranks of data (n).
  virtual void all_reduce_sum(float* data, size_t n) = 0;
  virtual void all_reduce_sum(double* data, size_t n) = 0;
  virtual void broadcast(float* data, size_t n, int root) = 0;
  virtual void barrier() = 0;
};

// One process: every collective is the identity.
class LocalCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  std::string name() const override { return "local"; }
  void all_reduce_sum(float*, size_t) override {}
  void all_reduce_sum(double*, size_t) override {}
  void broadcast(float*, size_t, int) override {}
  void barrier() override {}
};

std::unique_ptr<Communicator> make_local_communicator();

}  // namespace ft::trainer
