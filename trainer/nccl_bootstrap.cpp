// nccl_bootstrap.cpp: the CUDA-free half of the NCCL backend: id bootstrap and the NCCL-less stubs.
#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "ft/core/error.h"
#include "ft/trainer/nccl_communicator.h"

namespace ft::trainer {

UniqueIdBytes bootstrap_unique_id(Communicator& comm, const std::function<UniqueIdBytes()>& make) {
  // [1 status byte][128 bytes: the id, or rank 0's error message], so that a failure on rank 0
  // reaches every rank instead of leaving them in the broadcast.
  std::array<char, 1 + sizeof(UniqueIdBytes)> msg{};
  if (comm.rank() == 0) {
    try {
      if (!make) throw ConfigError("no id generator");
      const UniqueIdBytes id = make();
      msg[0] = 1;
      std::memcpy(msg.data() + 1, id.data(), id.size());
    } catch (const std::exception& e) {
      msg[0] = 0;
      const size_t n = std::min(std::strlen(e.what()), msg.size() - 2);
      std::memcpy(msg.data() + 1, e.what(), n);
    }
  }
  comm.broadcast_bytes(msg.data(), msg.size(), 0);
  if (msg[0] != 1) {
    msg.back() = 0;
    throw CommError(fmt::format(
        "rank {}: making the unique id on rank 0 of the {} group failed: {}",
        comm.world_rank_of(comm.rank()), comm_group_name(comm.group()), msg.data() + 1));
  }
  UniqueIdBytes id;
  std::memcpy(id.data(), msg.data() + 1, id.size());
  return id;
}

#if !FT_WITH_NCCL
bool nccl_supported() { return false; }

std::unique_ptr<Communicator> make_nccl_communicator(Communicator&, const NcclOptions&) {
  throw ConfigError(
      "the NCCL communicator needs ft built with NCCL (FT_WITH_NCCL: nccl.h and libnccl next "
      "to the CUDA toolkit)");
}
#endif

}  // namespace ft::trainer
