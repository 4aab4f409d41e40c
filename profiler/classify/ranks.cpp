// ranks.cpp: cross-rank analysis of ft's per-rank traces: exposed communication, transfer vs
// synchronizing time, late arrival at collectives and the pipeline bubble.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
#include <set>

#include "event_order.h"
#include "ft/core/comm_range.h"
#include "ft/core/error.h"
#include "ft/profiler/collectives.h"
#include "ft/profiler/multi_rank.h"
#include "ranks_internal.h"

namespace ft::profiler {
namespace {

using ft::CommGroup;

const std::set<std::string> kCollectiveNames = {
    "comm.all_reduce", "comm.reduce_scatter", "comm.all_gather", "comm.broadcast", "comm.barrier"};

Ivs normalized(Ivs v) {
  std::sort(v.begin(), v.end());
  Ivs out;
  for (const auto& [a, b] : v) {
    if (b <= a) continue;
    if (!out.empty() && a <= out.back().second) {
      out.back().second = std::max(out.back().second, b);
    } else {
      out.emplace_back(a, b);
    }
  }
  return out;
}

// Both normalized.
Ivs intersect(const Ivs& x, const Ivs& y) {
  Ivs out;
  size_t i = 0, j = 0;
  while (i < x.size() && j < y.size()) {
    const int64_t a = std::max(x[i].first, y[j].first), b = std::min(x[i].second, y[j].second);
    if (a < b) out.emplace_back(a, b);
    (x[i].second < y[j].second) ? ++i : ++j;
  }
  return out;
}

std::string meta(const Trace& t, const char* key, const std::string& fallback = "") {
  const auto it = t.metadata.find(key);
  return it == t.metadata.end() ? fallback : it->second;
}
int64_t meta_int(const Trace& t, const char* key, int64_t fallback) {
  const std::string v = meta(t, key);
  char* end = nullptr;
  const long long x = std::strtoll(v.c_str(), &end, 10);
  return !v.empty() && *end == '\0' ? x : fallback;
}

// The group instance a collective of role `g` belongs to, from the rank's coordinates (the
// colors ParallelGroups::make splits by).
int group_instance(CommGroup g, const Layout& l) {
  switch (g) {
    case CommGroup::kDp:
      return l.pp_stage * l.tp + l.tp_rank;
    case CommGroup::kTp:
      return l.pp_stage * l.dp + l.dp_rank;
    case CommGroup::kPp:
      return l.dp_rank * l.tp + l.tp_rank;
    default:
      return 0;
  }
}
int group_size(CommGroup g, const Layout& l, int world) {
  switch (g) {
    case CommGroup::kWorld:
      return world;
    case CommGroup::kDp:
      return l.dp;
    case CommGroup::kTp:
      return l.tp;
    case CommGroup::kPp:
      return l.pp;
    default:
      return -1;  // unknown membership: not matched
  }
}

// Steady step spans of the training thread (the classifier's steps minus the warm-up ones).
void steady_windows(RankData* rd) {
  const Trace& t = *rd->trace;
  if (!find_training_track(t, &rd->main)) {
    throw FormatError(fmt::format("rank {} ({}): the trace has no training steps", rd->rank,
                                  meta(t, "path", "trace")));
  }
  std::vector<const Event*> steps;
  for (const Event& e : t.events) {
    if (e.phase == Phase::kSpan && e.track == rd->main && is_step_span(t, e)) steps.push_back(&e);
  }
  sort_by_start(&steps);
  std::vector<const Event*> outer;
  for (const Event* s : steps) {
    if (!outer.empty() && s->ts_ns < outer.back()->end_ns()) continue;
    outer.push_back(s);
  }
  const RunInfo run = RunInfo::from_metadata(t.metadata);
  const size_t skip = static_cast<size_t>(std::max(0, run.warmup_excluded));
  for (size_t i = outer.size() > skip ? skip : 0; i < outer.size(); ++i) {
    rd->windows.emplace_back(outer[i]->ts_ns, outer[i]->end_ns());
    rd->window_steps.push_back(outer[i]->step >= 0 ? outer[i]->step : static_cast<int64_t>(i));
    rd->wall_ns += outer[i]->dur_ns;
  }
  rd->steps = static_cast<int64_t>(rd->windows.size());
}

// Exposed communication and the pipeline's idle stretches on the training thread.
void training_thread(RankData* rd) {
  const Trace& t = *rd->trace;
  Ivs comm, pp, any;
  for (const Event& e : t.events) {
    if (e.phase != Phase::kSpan || !(e.track == rd->main) || e.dur_ns <= 0) continue;
    if (!is_step_span(t, e)) any.emplace_back(e.ts_ns, e.end_ns());
    if (e.category == Category::kComm || e.category == Category::kSync) {
      comm.emplace_back(e.ts_ns, e.end_ns());
    }
    const std::string& n = t.names.at(e.name);
    if (n == "pp.forward" || n == "pp.backward") pp.emplace_back(e.ts_ns, e.end_ns());
  }
  rd->exposed = intersect(normalized(comm), rd->windows);
  rd->covered = intersect(normalized(any), rd->windows);
  if (pp.empty()) return;
  rd->has_pipeline = true;
  const Ivs busy = normalized(pp);
  for (const auto& w : rd->windows) {
    rd->pp_busy.push_back(intersect(busy, Ivs{w}));
    rd->pp_busy_ns += length(rd->pp_busy.back());
  }
}

// The pipeline's span of each step runs from the first stage's first pp range to the last
// range of any stage (clocks lined up); inside it, a stage is idle where it runs no pp range.
// With p stages and m micro-batches of forward f and backward b each, 1F1B takes (m + p - 1)
// (f + b) and every stage is busy m (f + b): idle / busy = (p - 1) / m.
void pipeline_idle(std::vector<RankData>* rs) {
  std::map<int64_t, std::pair<int64_t, int64_t>> span;  // step -> [first start, last end]
  for (const RankData& rd : *rs) {
    for (size_t w = 0; w < rd.pp_busy.size(); ++w) {
      if (rd.pp_busy[w].empty()) continue;
      const int64_t a = rd.pp_busy[w].front().first - rd.offset_ns;
      const int64_t b = rd.pp_busy[w].back().second - rd.offset_ns;
      auto [it, fresh] = span.try_emplace(rd.window_steps[w], a, b);
      if (!fresh) {
        it->second.first = std::min(it->second.first, a);
        it->second.second = std::max(it->second.second, b);
      }
    }
  }
  for (RankData& rd : *rs) {
    if (!rd.has_pipeline) continue;
    Ivs idle;
    for (size_t w = 0; w < rd.pp_busy.size(); ++w) {
      const auto it = span.find(rd.window_steps[w]);
      if (it == span.end()) continue;
      int64_t cur = it->second.first + rd.offset_ns;
      const int64_t end = it->second.second + rd.offset_ns;
      for (const auto& [a, b] : rd.pp_busy[w]) {
        if (a > cur) idle.emplace_back(cur, std::min(a, end));
        cur = std::max(cur, b);
      }
      if (cur < end) idle.emplace_back(cur, end);
    }
    rd.idle = normalized(std::move(idle));
  }
}

// Each rank's collective calls, keyed so that the same collective has the same key everywhere,
// with the work each rank did since its previous collective on that thread (CollectiveCall::gap_ns;
// the first one's since its step began).
std::vector<std::vector<CollectiveCall>> collective_calls(const std::vector<RankData>& rs) {
  std::vector<std::vector<CollectiveCall>> calls(rs.size());
  const int world = static_cast<int>(rs.size());
  for (size_t r = 0; r < rs.size(); ++r) {
    const RankData& rd = rs[r];
    const Trace& t = *rd.trace;
    std::vector<size_t> mine;
    for (size_t i = 0; i < t.events.size(); ++i) {
      const Event& e = t.events[i];
      if (e.phase == Phase::kSpan && !e.track.device && e.category == Category::kComm &&
          e.arg >= 0 && kCollectiveNames.count(t.names.at(e.name))) {
        mine.push_back(i);
      }
    }
    std::stable_sort(mine.begin(), mine.end(), [&](size_t a, size_t b) {
      const Event &x = t.events[a], &y = t.events[b];
      return x.track < y.track || (x.track == y.track && x.ts_ns < y.ts_ns);
    });
    for (size_t k = 0; k < mine.size(); ++k) {
      const Event& e = t.events[mine[k]];
      const auto w = std::upper_bound(rd.windows.begin(), rd.windows.end(),
                                      std::make_pair(e.ts_ns, INT64_MAX));
      if (w == rd.windows.begin() || std::prev(w)->second <= e.ts_ns) continue;  // not steady
      const CommGroup g = ft::comm_range_group(e.arg);
      const int size = group_size(g, rd.lay, world);
      if (size < 2) continue;
      const Event* prev =
          k > 0 && t.events[mine[k - 1]].track == e.track ? &t.events[mine[k - 1]] : nullptr;
      const int64_t since = prev ? prev->end_ns() : std::prev(w)->first;
      const bool on_main = e.track == rd.main;
      calls[r].push_back({fmt::format("{}|{}|{}|{}|{}", t.names.at(e.name), static_cast<int>(g),
                                      group_instance(g, rd.lay), ft::comm_range_seq(e.arg),
                                      on_main ? "main" : "side"),
                          e.ts_ns - rd.offset_ns, e.dur_ns, mine[k], size,
                          std::max<int64_t>(0, e.ts_ns - since)});
    }
  }
  return calls;
}

double median(std::vector<int64_t> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? static_cast<double>(v[n / 2]) : 0.5 * static_cast<double>(v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

CrossRank analyse_ranks(std::vector<RankData>* ranks_in, const FindingRules& rules) {
  std::vector<RankData>& rs = *ranks_in;
  CrossRank x;
  for (RankData& rd : rs) {
    steady_windows(&rd);
    training_thread(&rd);
  }
  pipeline_idle(&rs);
  // Noise margin for "arrives late": scheduling jitter is not lateness.
  std::vector<int64_t> walls;
  for (const RankData& rd : rs)
    if (rd.steps > 0) walls.push_back(rd.wall_ns / rd.steps);
  x.noise_ns = static_cast<int64_t>(
      std::max(rules.late_margin_ms * 1e6, rules.late_margin_step * median(walls)));
  const auto calls = collective_calls(rs);
  std::vector<Ivs> sync(rs.size());
  struct Wait {
    int64_t a, b;
    int late;  // the rank index that arrived late beyond the noise margin, else -1
  };
  std::vector<std::vector<Wait>> waits(rs.size());
  const bool pipelined = !rs.empty() && rs[0].lay.pp > 1;
  for (const MatchedCollective& m : match_collectives(calls)) {
    ++x.collectives;
    const CommGroup g = ft::comm_range_group(
        rs[static_cast<size_t>(m.calls[0].first)].trace->events[m.calls[0].second->ref].arg);
    // Ranks of one DP or TP group do the same work between collectives; across pipeline stages
    // they do not (the last stage's loss broadcast is late by design).
    const bool comparable =
        g == CommGroup::kDp || g == CommGroup::kTp || (g == CommGroup::kWorld && !pipelined);
    // Late: last by more than the noise, and by its own work since its previous collective.
    const bool late = comparable && m.work_margin_ns >= x.noise_ns;
    for (size_t i = 0; i < m.calls.size(); ++i) {
      const auto& [r, c] = m.calls[i];
      RankData& rd = rs[static_cast<size_t>(r)];
      const int64_t s = m.sync_ns(i);
      rd.coll_ns += c->dur_ns;
      rd.coll_sync_ns += s;
      x.transfer_ns += m.transfer_ns;
      x.sync_ns += s;
      const int64_t local = c->ts_ns + rd.offset_ns;
      if (s > 0) {
        sync[static_cast<size_t>(r)].emplace_back(local, local + s);
        waits[static_cast<size_t>(r)].push_back({local, local + s, late ? m.last : -1});
      }
      if (comparable) ++rd.comparable;
    }
    if (late) {
      RankData& late = rs[static_cast<size_t>(m.last)];
      const CollectiveCall* last_call = nullptr;
      for (const auto& [r, c] : m.calls)
        if (r == m.last) last_call = c;
      ++late.late;
      late.margins.push_back(m.work_margin_ns);
      late.late_steps.insert(late.trace->events[last_call->ref].step);
      // The others' wait, the share of it its own work explains.
      late.caused_ns += m.margin_ns > 0 ? static_cast<int64_t>(static_cast<double>(m.waited_ns) *
                                                               m.work_margin_ns / m.margin_ns)
                                        : 0;
    }
  }
  for (size_t r = 0; r < rs.size(); ++r) {
    RankData& rd = rs[r];
    rd.sync = normalized(std::move(sync[r]));
    rd.exposed_wait_ns = length(intersect(rd.exposed, rd.sync));
    rd.exposed_idle_ns = length(intersect(rd.exposed, rd.idle));
    rd.uncovered_idle_ns = length(rd.idle) - length(intersect(rd.covered, rd.idle));
  }
  // The straggler: its late arrivals cost the others clearly more than anyone else's.
  int best = -1;
  for (size_t r = 0; r < rs.size(); ++r) {
    if (rs[r].caused_ns > 0 &&
        (best < 0 || rs[r].caused_ns > rs[static_cast<size_t>(best)].caused_ns))
      best = static_cast<int>(r);
  }
  if (best >= 0) {
    int64_t runner_up = 0;
    for (size_t r = 0; r < rs.size(); ++r)
      if (static_cast<int>(r) != best) runner_up = std::max(runner_up, rs[r].caused_ns);
    // Consistently: late in most steps, not in a few long stalls.
    const RankData& b = rs[static_cast<size_t>(best)];
    if (static_cast<double>(b.caused_ns) >=
            rules.straggler_dominance * static_cast<double>(runner_up) &&
        static_cast<double>(b.late_steps.size()) >=
            rules.straggler_steps * static_cast<double>(b.steps)) {
      x.straggler = best;
    }
  }
  // What the straggler costs each other rank: its exposed waiting at the collectives the
  // straggler reached late, outside the pipeline's idle time (that is the bubble's).
  if (x.straggler >= 0) {
    for (size_t r = 0; r < rs.size(); ++r) {
      Ivs mine;
      for (const Wait& w : waits[r])
        if (w.late == x.straggler && static_cast<int>(r) != x.straggler)
          mine.emplace_back(w.a, w.b);
      const Ivs waiting = intersect(rs[r].exposed, normalized(std::move(mine)));
      rs[r].exposed_straggler_wait_ns = length(waiting) - length(intersect(waiting, rs[r].idle));
    }
  }
  return x;
}

int64_t length(const Ivs& v) {
  int64_t n = 0;
  for (const auto& [a, b] : v) n += b - a;
  return n;
}

double median_ms(const std::vector<int64_t>& v) { return median(v) / 1e6; }

Layout layout_of(const Trace& t) {
  Layout l;
  l.dp = static_cast<int>(meta_int(t, "config.dp", 1));
  l.tp = static_cast<int>(meta_int(t, "config.tp", 1));
  l.pp = static_cast<int>(meta_int(t, "config.pp", 1));
  l.dp_rank = static_cast<int>(meta_int(t, "run.dp_rank", 0));
  l.tp_rank = static_cast<int>(meta_int(t, "run.tp_rank", 0));
  l.pp_stage = static_cast<int>(meta_int(t, "run.pp_stage", 0));
  return l;
}

}  // namespace ft::profiler
