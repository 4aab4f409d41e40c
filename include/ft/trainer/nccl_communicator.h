// nccl_communicator.h: the NCCL backend of Communicator (device buffers), bootstrapped over MPI.
#pragma once

#include <array>
#include <functional>
#include <memory>

#include "ft/trainer/communicator.h"

namespace ft::trainer {

// Whether ft was built with NCCL (FT_WITH_NCCL).
bool nccl_supported();

struct NcclOptions {
  int device = 0;        // CUDA device of this rank
  double timeout_s = 0;  // per operation (--comm-timeout); <= 0: never
  // The engine's compute stream (cudaStream_t as void*): each operation's stream waits for the
  // work enqueued on it so far. nullptr: the legacy default stream.
  void* compute_stream = nullptr;
};

// An NCCL communicator over the ranks of `world` (collective: every rank of `world` calls it).
// The ncclUniqueId is made on rank 0 and broadcast with world.broadcast_bytes(); each
// communicator runs its operations on its own NVTX-named stream ("ft.nccl.<group>").
// Its buffers are DEVICE memory. Operations block until complete like the MPI backend's: they
// poll the stream and ncclCommGetAsyncError, and past the timeout abort the communicator
// (ncclCommAbort) and throw CommError naming the operation and the group; an aborted
// communicator throws CommError on every later call. send/recv ignore the tag: NCCL matches
// point-to-point operations per peer in issue order. split() splits `world` the same way (MPI)
// and bootstraps a new NCCL communicator over the part.
// Throws ConfigError without NCCL, without a device, or for a device index out of range.
std::unique_ptr<Communicator> make_nccl_communicator(Communicator& world,
                                                     const NcclOptions& options);

// Bootstrap of an opaque id (an ncclUniqueId is 128 bytes): rank 0 of `comm` calls `make`, every
// rank returns rank 0's bytes (comm.broadcast_bytes). CUDA-free, so it is testable under mpirun.
using UniqueIdBytes = std::array<char, 128>;
UniqueIdBytes bootstrap_unique_id(Communicator& comm, const std::function<UniqueIdBytes()>& make);

}  // namespace ft::trainer
