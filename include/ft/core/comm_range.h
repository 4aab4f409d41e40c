// comm_range.h: how a "comm.*" range names its process group and sequence number, for engines and profilers.
#pragma once

#include <cstdint>

namespace ft {

// Process-group roles; the profiler matches the same collective across ranks by
// (operation, group, sequence number), see comm_range_arg().
enum class CommGroup : uint8_t { kWorld = 0, kDp = 1, kTp = 2, kPp = 3, kOther = 4 };
const char* comm_group_name(CommGroup g);  // "world", "dp", "tp", "pp", "other"

// The int64 argument every "comm.*" range carries: group in bits 48..55, the
// per-communicator sequence number of that operation kind in the low 48 bits.
inline int64_t comm_range_arg(CommGroup g, uint64_t seq) {
  return static_cast<int64_t>((static_cast<uint64_t>(g) << 48) | (seq & ((uint64_t{1} << 48) - 1)));
}
inline CommGroup comm_range_group(int64_t arg) {
  return static_cast<CommGroup>((static_cast<uint64_t>(arg) >> 48) & 0xff);
}
inline uint64_t comm_range_seq(int64_t arg) {
  return static_cast<uint64_t>(arg) & ((uint64_t{1} << 48) - 1);
}

}  // namespace ft
