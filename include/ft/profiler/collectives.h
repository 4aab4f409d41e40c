// collectives.h: matches the same collective across ranks (Kineto kernels and ft's comm ranges
// alike).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace ft::profiler {

// One call of a collective on one rank, as the caller keys it: calls with the same key on
// different ranks are one collective; the k-th call of a key on each rank (in time order)
// matches the k-th on the others.
struct CollectiveCall {
  std::string key;
  int64_t ts_ns = 0;  // start (the arrival), on a clock common to all ranks
  int64_t dur_ns = 0;
  size_t ref = 0;      // the caller's index (e.g. of the event)
  int group_size = 0;  // ranks taking part; 0: every rank given to match_collectives
  // Time since this rank's previous synchronisation point on the same thread (the end of its
  // previous collective there): the work it did before arriving. -1: unknown.
  int64_t gap_ns = -1;
};

// One collective: its call on each participating rank.
struct MatchedCollective {
  std::vector<std::pair<int, const CollectiveCall*>> calls;  // (rank index, call), rank order
  int64_t transfer_ns = 0;                                   // the minimum duration over the ranks
  int last = -1;          // rank index that started last (ties: the lowest index)
  int64_t margin_ns = 0;  // its start minus the next-latest start
  // The part of the margin its own work explains: its gap minus the largest other gap (the
  // margin when gaps are unknown). A rank that leaves the previous collective late (it was
  // descheduled while waiting in it) arrives late at the next one with no more work: that is
  // the previous collective's skew, not lateness of its own.
  int64_t work_margin_ns = 0;
  int64_t waited_ns = 0;  // sum over the other ranks of (last start - their start)
  // The synchronizing part of rank index `r`'s call (its duration minus the transfer).
  int64_t sync_ns(size_t i) const { return calls[i].second->dur_ns - transfer_ns; }
};

// Matches calls across ranks (ranks[i] = rank index i's calls, any order). A key counts when it
// appears on as many ranks as its group_size (or on every rank); keys seen on fewer are
// dropped. Result in key order, then occurrence.
std::vector<MatchedCollective> match_collectives(
    const std::vector<std::vector<CollectiveCall>>& ranks);

}  // namespace ft::profiler
