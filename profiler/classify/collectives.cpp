// collectives.cpp: matching one collective's calls across ranks; transfer, waiting and late
// arrival.
#include "ft/profiler/collectives.h"

#include <algorithm>
#include <limits>
#include <map>

namespace ft::profiler {

std::vector<MatchedCollective> match_collectives(
    const std::vector<std::vector<CollectiveCall>>& ranks) {
  std::vector<MatchedCollective> out;
  const int n = static_cast<int>(ranks.size());
  if (n < 2) return out;
  // key -> per rank index: its calls in time order.
  std::map<std::string, std::map<int, std::vector<const CollectiveCall*>>> by_key;
  for (int r = 0; r < n; ++r) {
    for (const CollectiveCall& c : ranks[static_cast<size_t>(r)]) by_key[c.key][r].push_back(&c);
  }
  for (auto& [key, per_rank] : by_key) {
    const int want = per_rank.begin()->second.front()->group_size > 0
                         ? per_rank.begin()->second.front()->group_size
                         : n;
    // Fewer ranks: a collective some ranks did not record (outside their window); more: the key
    // does not identify one group. Neither can be split honestly.
    if (want < 2 || static_cast<int>(per_rank.size()) != want) continue;
    size_t occurrences = std::numeric_limits<size_t>::max();
    for (auto& [r, calls] : per_rank) {
      std::stable_sort(
          calls.begin(), calls.end(),
          [](const CollectiveCall* a, const CollectiveCall* b) { return a->ts_ns < b->ts_ns; });
      occurrences = std::min(occurrences, calls.size());
    }
    for (size_t k = 0; k < occurrences; ++k) {
      MatchedCollective m;
      m.transfer_ns = std::numeric_limits<int64_t>::max();
      int64_t last_start = 0;
      for (const auto& [r, calls] : per_rank) {
        const CollectiveCall* c = calls[k];
        m.calls.emplace_back(r, c);
        m.transfer_ns = std::min(m.transfer_ns, c->dur_ns);
        if (m.last < 0 || c->ts_ns > last_start) last_start = c->ts_ns, m.last = r;
      }
      int64_t next_latest = std::numeric_limits<int64_t>::min();
      int64_t other_gap = std::numeric_limits<int64_t>::min(), last_gap = -1;
      bool gaps = true;
      for (const auto& [r, c] : m.calls) {
        gaps = gaps && c->gap_ns >= 0;
        if (r == m.last) {
          last_gap = c->gap_ns;
          continue;
        }
        next_latest = std::max(next_latest, c->ts_ns);
        other_gap = std::max(other_gap, c->gap_ns);
        m.waited_ns += std::max<int64_t>(0, last_start - c->ts_ns);
      }
      m.margin_ns = last_start - next_latest;
      m.work_margin_ns =
          gaps ? std::clamp<int64_t>(last_gap - other_gap, 0, m.margin_ns) : m.margin_ns;
      out.push_back(std::move(m));
    }
  }
  return out;
}

}  // namespace ft::profiler
