// communicator.h: the collective-communication seam (MPI now, NCCL later) and the single-process implementation.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ft/core/comm_range.h"
#include "ft/core/error.h"

namespace ft::trainer {

// A collective or point-to-point operation failed or timed out (a dead or stuck
// peer). The message names the operation, the group and, where it can be told,
// the world rank(s) at fault.
class CommError : public Error {
 public:
  using Error::Error;
};

using ft::comm_group_name;
using ft::comm_range_arg;
using ft::comm_range_group;
using ft::comm_range_seq;
using ft::CommGroup;

// Collectives the trainer needs. Every call blocks until complete and throws
// CommError instead of hanging when a peer is dead or the timeout passes.
// Implementations are safe to use from two threads at once (the training thread
// and a gradient-communication thread) when they operate on different
// communicators, or on the same one in the same order on every rank.
// Every operation is recorded as an FT_RANGE named "comm.<op>" (kind kComm) with
// comm_range_arg(group(), seq).
class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;        // in this group
  virtual int world_size() const = 0;  // of this group
  virtual std::string name() const = 0;
  virtual CommGroup group() const = 0;
  // World rank of group rank r (for messages and traces).
  virtual int world_rank_of(int r) const = 0;

  // In-place sum across ranks of data (n).
  virtual void all_reduce_sum(float* data, size_t n) = 0;
  virtual void all_reduce_sum(double* data, size_t n) = 0;
  virtual void all_reduce_max(double* data, size_t n) = 0;
  // send (world_size * n) summed across ranks; this rank receives block rank() into recv (n).
  virtual void reduce_scatter_sum(const float* send, float* recv, size_t n) = 0;
  // Every rank contributes send (n); recv (world_size * n) holds them in rank order.
  // send may alias recv + rank() * n.
  virtual void all_gather(const float* send, float* recv, size_t n) = 0;
  virtual void all_gather(const double* send, double* recv, size_t n) = 0;
  virtual void broadcast(float* data, size_t n, int root) = 0;
  // Raw bytes from root to every rank (e.g. an NCCL unique id over MPI). Host memory for the
  // local and MPI communicators.
  virtual void broadcast_bytes(void* data, size_t bytes, int root);
  // Point-to-point, matched by (peer, tag) in order.
  virtual void send(const float* data, size_t n, int peer, int tag) = 0;
  virtual void recv(float* data, size_t n, int peer, int tag) = 0;
  // The same for raw host bytes (records exchanged by ft-data's sharded mode); the receiver
  // knows the size. MPI only: the other communicators throw CommError.
  virtual void send_bytes(const void* data, size_t bytes, int peer, int tag);
  virtual void recv_bytes(void* data, size_t bytes, int peer, int tag);
  virtual void barrier() = 0;

  // A new communicator over the ranks of this one that pass the same color,
  // ordered by key (collective: every rank calls it).
  virtual std::unique_ptr<Communicator> split(int color, int key, CommGroup role) = 0;
  // Seconds any single operation may take before it throws CommError (<= 0: never).
  virtual void set_timeout(double seconds) = 0;
};

// One process: every collective is the identity (copies where buffers differ).
std::unique_ptr<Communicator> make_local_communicator(CommGroup role = CommGroup::kWorld);

// Whether this process was started by an MPI launcher (mpirun/mpiexec/srun with PMIx).
bool launched_by_mpi();
// Whether ft was built with MPI (FT_WITH_MPI).
bool mpi_supported();
// The world communicator: MPI when launched by mpirun (initialises MPI with
// MPI_THREAD_MULTIPLE on first use), else the local one. Throws ConfigError when
// launched by mpirun but built without MPI.
std::unique_ptr<Communicator> make_world_communicator(double timeout_s);
// Ends the whole job after a fatal error on one rank (MPI_Abort; exit() without MPI).
[[noreturn]] void abort_job(int exit_code);
// Finalises MPI if it was initialised (idempotent; call before returning from main).
void finalize_comm();

}  // namespace ft::trainer
