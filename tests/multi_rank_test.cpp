// multi_rank_test.cpp: cross-rank diagnosis on synthetic per-rank traces (matching, transfer vs
// sync, stragglers by late arrival, clock offsets, pipeline bubble vs (p-1)/m, rank files).
#include "ft/profiler/multi_rank.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <string>

#include "ft/core/error.h"
#include "ft/profiler/collectives.h"
#include "ft/profiler/load_trace.h"
#include "ft/profiler/trace_writer.h"
#include "ft/trainer/communicator.h"

namespace {

namespace fs = std::filesystem;
using namespace ft::profiler;
using ft::trainer::comm_range_arg;
using ft::trainer::CommGroup;

constexpr int64_t kMs = 1'000'000;

// One rank's trace as ft-train under mpirun writes it (metadata keys of TrainingProfile).
struct RankTrace {
  Trace t;
  Track main, side;
  RankTrace(int rank, int world, int dp, int pp, int stage, int micro_batches = 1,
            const std::string& host = "node0") {
    main = {static_cast<uint32_t>(100 + rank), static_cast<uint32_t>(100 + rank), false};
    side = {main.pid, main.tid + 1, false};
    t.source = "ft-train";
    auto& m = t.metadata;
    m["run.rank"] = std::to_string(rank);
    m["run.world_size"] = std::to_string(world);
    m["run.dp_rank"] = std::to_string(rank % dp);
    m["run.tp_rank"] = "0";
    m["run.pp_stage"] = std::to_string(stage);
    m["config.dp"] = std::to_string(dp);
    m["config.tp"] = "1";
    m["config.pp"] = std::to_string(pp);
    m["config.grad_accum"] = std::to_string(micro_batches);
    m["config.micro_batch"] = "4";
    m["config.overlap"] = "false";
    m["config.bucket_mb"] = "25";
    m["env.hostname"] = host;
    m["run.warmup_excluded"] = "0";
  }
  void span(const Track& tr, const std::string& name, Category c, double a_ms, double b_ms,
            int64_t step, int64_t arg = -1) {
    Event e;
    e.track = tr;
    e.name = t.names.intern(name);
    e.category = c;
    e.phase = Phase::kSpan;
    e.ts_ns = std::llround(a_ms * kMs);
    e.dur_ns = std::llround(b_ms * kMs) - e.ts_ns;
    e.step = step;
    e.arg = arg;
    t.events.push_back(e);
  }
  void step(int64_t s, double a_ms, double b_ms) {
    span(main, "ProfilerStep#" + std::to_string(s), Category::kStep, a_ms, b_ms, s);
  }
  void all_reduce(const Track& tr, int64_t seq, double a_ms, double b_ms, int64_t step) {
    span(tr, "comm.all_reduce", Category::kComm, a_ms, b_ms, step,
         comm_range_arg(CommGroup::kDp, static_cast<uint64_t>(seq)));
  }
};

const Finding* find_cls(const Diagnosis& d, const std::string& cls) {
  for (const auto& f : d.findings)
    if (f.cls == cls) return &f;
  return nullptr;
}

// DP=2, 4 steps of 10 ms. Rank 1 does 2.5 ms more compute before the gradient all-reduce, so
// rank 0 waits for it; the loss all-reduce right after arrives within 0.02 ms (jitter).
std::vector<Trace> straggler_ranks(int64_t rank1_clock_ns = 0, const std::string& host1 = "node0") {
  RankTrace r0(0, 2, 2, 1, 0), r1(1, 2, 2, 1, 0, 1, host1);
  for (int s = 0; s < 4; ++s) {
    const double b = 10.0 * s;
    r0.step(s, b, b + 10);
    r0.span(r0.main, "fwd.block", Category::kCompute, b, b + 4, s);
    r0.all_reduce(r0.main, 2 * s, b + 4, b + 8, s);
    r0.all_reduce(r0.main, 2 * s + 1, b + 8, b + 8.1, s);
    r0.span(r0.main, "optimizer", Category::kOptimizer, b + 8.1, b + 10, s);
    r1.step(s, b, b + 10);
    r1.span(r1.main, "fault.straggle", Category::kCompute, b, b + 2.5, s);
    r1.span(r1.main, "fwd.block", Category::kCompute, b + 2.5, b + 6.5, s);
    r1.all_reduce(r1.main, 2 * s, b + 6.5, b + 8, s);
    r1.span(r1.main, "host", Category::kHost, b + 8, b + 8.02, s);
    r1.all_reduce(r1.main, 2 * s + 1, b + 8.02, b + 8.1, s);
    r1.span(r1.main, "optimizer", Category::kOptimizer, b + 8.1, b + 10, s);
  }
  for (Event& e : r1.t.events) e.ts_ns += rank1_clock_ns;
  if (rank1_clock_ns != 0) r1.t.metadata["run.clock_offset_ns"] = std::to_string(rank1_clock_ns);
  return {r0.t, r1.t};
}

TEST(Collectives, MatchesByKeyAndOccurrenceWithinTheGroup) {
  std::vector<std::vector<CollectiveCall>> ranks(3);
  // "a" on all three ranks (twice), "b" on ranks 0 and 2 only (a group of 2), "c" on one rank.
  ranks[0] = {{"a", 0, 50, 0, 0}, {"a", 100, 10, 1, 0}, {"b", 200, 30, 2, 2}, {"c", 0, 5, 3, 2}};
  ranks[1] = {{"a", 120, 12, 0, 0}, {"a", 20, 30, 1, 0}};
  ranks[2] = {{"a", 40, 10, 0, 0}, {"b", 210, 20, 1, 2}, {"a", 110, 11, 2, 0}};
  const auto m = match_collectives(ranks);
  ASSERT_EQ(m.size(), 3u);  // a twice, b once; c has no partner
  // First "a": starts 0, 20, 40 -> rank 2 last by 20 ns; the others waited 40 + 20.
  EXPECT_EQ(m[0].calls.size(), 3u);
  EXPECT_EQ(m[0].transfer_ns, 10);
  EXPECT_EQ(m[0].last, 2);
  EXPECT_EQ(m[0].margin_ns, 20);
  EXPECT_EQ(m[0].waited_ns, 60);
  EXPECT_EQ(m[0].sync_ns(0), 40);  // rank 0's call: 50 ns, of which 40 waiting
  // Second "a": 100, 120, 110 -> rank 1 last by 10.
  EXPECT_EQ(m[1].last, 1);
  EXPECT_EQ(m[1].margin_ns, 10);
  // "b": ranks 0 and 2.
  ASSERT_EQ(m[2].calls.size(), 2u);
  EXPECT_EQ(m[2].calls[1].first, 2);
  EXPECT_EQ(m[2].transfer_ns, 20);
  EXPECT_EQ(m[2].last, 2);
}

TEST(MultiRank, StragglerArrivesLateAndTransferSyncSplit) {
  const Diagnosis d = diagnose_ranks(straggler_ranks());
  ASSERT_EQ(d.ranks.size(), 2u);
  const auto& p = d.parallel;
  EXPECT_EQ(p.ranks, 2);
  EXPECT_EQ(p.collectives, 8);
  // Per rank per step: transfer (1.5 + 0.08) ms each; waiting 2.5 + 0.02 ms on rank 0 only.
  EXPECT_NEAR(p.transfer_ms, 1.58, 1e-9);
  EXPECT_NEAR(p.sync_ms, 2.52 / 2, 1e-9);
  EXPECT_EQ(p.straggler, 1);
  EXPECT_NEAR(p.straggler_late_ms, 2.5, 1e-9);
  EXPECT_NEAR(p.straggler_late_frac, 0.5, 1e-12);  // the loss all-reduce is within the noise
  EXPECT_NEAR(d.ranks[0].exposed_comm_ms, 4.1, 1e-9);
  EXPECT_NEAR(d.ranks[0].exposed_wait_ms, 2.52, 1e-9);
  EXPECT_NEAR(d.ranks[1].exposed_comm_ms, 1.58, 1e-9);
  EXPECT_NEAR(d.ranks[1].exposed_wait_ms, 0, 1e-12);
  EXPECT_EQ(d.ranks[1].late, 4);
  EXPECT_EQ(d.ranks[0].late, 0);
  EXPECT_EQ(d.ranks[0].collectives, 8);
  ASSERT_FALSE(d.findings.empty());
  const Finding& top = d.findings[0];
  EXPECT_EQ(top.cls, "parallel");
  EXPECT_EQ(top.title, "Straggler: rank 1 arrives late by 2.50 ms at 50% of collectives");
  EXPECT_NEAR(top.share, 0.25, 1e-9);  // rank 0 waits 2.5 ms of each 10 ms step for rank 1
  ASSERT_FALSE(top.knobs.empty());
  EXPECT_NE(top.knobs.back().find("check rank 1's host (node0)"), std::string::npos);
  // What is left of the communication: 1.6 ms of 10 on rank 0 (transfer and 0.02 ms of jitter),
  // 1.58 on rank 1.
  const Finding* comm = find_cls(d, "comm");
  ASSERT_NE(comm, nullptr);
  EXPECT_NEAR(comm->share, 0.159, 1e-9);
  EXPECT_EQ(comm->knobs.front(), "--overlap true");
  EXPECT_NE(d.source.find("2 ranks"), std::string::npos);
}

TEST(MultiRank, ClockOffsetOfAnotherHostIsApplied) {
  // Rank 1 on another host whose clock reads 1 s behind: its measured offset lines it up.
  const Diagnosis d = diagnose_ranks(straggler_ranks(-1000 * kMs, "node1"));
  EXPECT_EQ(d.parallel.straggler, 1);
  EXPECT_NEAR(d.parallel.straggler_late_ms, 2.5, 1e-9);
  EXPECT_NEAR(d.ranks[1].clock_offset_ms, -1000, 1e-9);
  EXPECT_NE(d.parallel.clock.find("offset"), std::string::npos);
  // The same offset on the same host is not applied (one CLOCK_MONOTONIC): rank 1 then seems
  // to start every collective a second early, rank 0 seems last, but its own work since the
  // previous collective does not explain that, so nobody is counted late.
  const Diagnosis same = diagnose_ranks(straggler_ranks(-1000 * kMs, "node0"));
  EXPECT_NEAR(same.ranks[1].clock_offset_ms, 0, 1e-12);
  EXPECT_EQ(same.parallel.straggler, -1);
  EXPECT_EQ(same.ranks[0].late + same.ranks[1].late, 0);
}

// A rank that leaves a collective late (descheduled while it waited) reaches the next one late
// without having done more work: that is not lateness of its own.
TEST(MultiRank, LateExitFromTheLastCollectiveIsNotLateArrival) {
  RankTrace r0(0, 2, 2, 1, 0), r1(1, 2, 2, 1, 0);
  for (int s = 0; s < 4; ++s) {
    const double b = 10.0 * s;
    // Rank 1 computes 3 ms longer; rank 0 waits, and wakes 1.5 ms after the all-reduce is done,
    // so it starts the loss all-reduce 1.5 ms after rank 1.
    r0.step(s, b, b + 10);
    r0.span(r0.main, "fwd.block", Category::kCompute, b, b + 3, s);
    r0.all_reduce(r0.main, 2 * s, b + 3, b + 7.5, s);
    r0.all_reduce(r0.main, 2 * s + 1, b + 7.5, b + 7.6, s);
    r0.span(r0.main, "optimizer", Category::kOptimizer, b + 7.6, b + 10, s);
    r1.step(s, b, b + 10);
    r1.span(r1.main, "fwd.block", Category::kCompute, b, b + 6, s);
    r1.all_reduce(r1.main, 2 * s, b + 6, b + 6.1, s);
    r1.all_reduce(r1.main, 2 * s + 1, b + 6.1, b + 7.6, s);
    r1.span(r1.main, "optimizer", Category::kOptimizer, b + 7.6, b + 10, s);
  }
  const Diagnosis d = diagnose_ranks({r0.t, r1.t});
  EXPECT_EQ(d.ranks[1].late, 4);  // the gradient all-reduce: 3 ms more work
  EXPECT_EQ(d.ranks[0].late, 0);  // the loss all-reduce: 1.4 ms later, no more work
  EXPECT_EQ(d.parallel.straggler, 1);
  EXPECT_NEAR(d.parallel.straggler_late_ms, 3.0, 1e-9);  // its 3 ms more work
}

TEST(MultiRank, SymmetricJitterHasNoStragglerAndCommKeepsTheWaiting) {
  RankTrace r0(0, 2, 2, 1, 0), r1(1, 2, 2, 1, 0);
  for (int s = 0; s < 6; ++s) {
    const double b = 10.0 * s;
    const double late0 = s % 2 ? 0 : 1.5, late1 = s % 2 ? 1.5 : 0;  // alternate who is late
    for (RankTrace* r : {&r0, &r1}) {
      const double late = r == &r0 ? late0 : late1;
      r->step(s, b, b + 10);
      r->span(r->main, "fwd.block", Category::kCompute, b, b + 4 + late, s);
      r->all_reduce(r->main, s, b + 4 + late, b + 7, s);
      r->span(r->main, "optimizer", Category::kOptimizer, b + 7, b + 10, s);
    }
  }
  const Diagnosis d = diagnose_ranks({r0.t, r1.t});
  EXPECT_EQ(d.parallel.straggler, -1);
  EXPECT_EQ(d.ranks[0].late, 3);
  EXPECT_EQ(d.ranks[1].late, 3);
  for (const auto& f : d.findings) EXPECT_EQ(f.title.find("Straggler"), std::string::npos);
  // Exposed comm: 3 or 1.5 ms per step alternating = 2.25 ms of 10 on each rank, all of it kept.
  const Finding* comm = find_cls(d, "comm");
  ASSERT_NE(comm, nullptr);
  EXPECT_NEAR(comm->share, 0.225, 1e-9);
}

TEST(MultiRank, OneLongStallIsNotAStraggler) {
  // Rank 1 is late in one step of six (a stall, e.g. a page-cache flush), by a lot: the others
  // waited, but a straggler is late consistently.
  RankTrace r0(0, 2, 2, 1, 0), r1(1, 2, 2, 1, 0);
  for (int s = 0; s < 6; ++s) {
    const double b = 20.0 * s, late = s == 3 ? 8.0 : 0.0;
    r0.step(s, b, b + 20);
    r0.span(r0.main, "fwd.block", Category::kCompute, b, b + 4, s);
    r0.all_reduce(r0.main, s, b + 4, b + 5 + late, s);
    r0.span(r0.main, "optimizer", Category::kOptimizer, b + 5 + late, b + 20, s);
    r1.step(s, b, b + 20);
    r1.span(r1.main, "fwd.block", Category::kCompute, b, b + 4 + late, s);
    r1.all_reduce(r1.main, s, b + 4 + late, b + 5 + late, s);
    r1.span(r1.main, "optimizer", Category::kOptimizer, b + 5 + late, b + 20, s);
  }
  const Diagnosis d = diagnose_ranks({r0.t, r1.t});
  EXPECT_EQ(d.ranks[1].late, 1);
  EXPECT_EQ(d.parallel.straggler, -1);
}

TEST(MultiRank, CommThreadCollectivesHiddenBehindComputeAreNotExposed) {
  // Overlap: the all-reduce runs on a side thread; the training thread waits ("comm.wait", sync)
  // only for the last 1 ms. Rank 1 arrives 2.5 ms late, but rank 0 computes meanwhile.
  RankTrace r0(0, 2, 2, 1, 0), r1(1, 2, 2, 1, 0);
  for (int s = 0; s < 4; ++s) {
    const double b = 10.0 * s;
    r0.step(s, b, b + 10);
    r0.span(r0.main, "bwd.block", Category::kCompute, b, b + 7, s);
    r0.all_reduce(r0.side, s, b + 4, b + 8, s);
    r0.span(r0.main, "comm.wait", Category::kSync, b + 7, b + 8, s);
    r0.span(r0.main, "optimizer", Category::kOptimizer, b + 8, b + 10, s);
    r1.step(s, b, b + 10);
    r1.span(r1.main, "bwd.block", Category::kCompute, b, b + 7.5, s);
    r1.all_reduce(r1.side, s, b + 6.5, b + 8, s);
    r1.span(r1.main, "comm.wait", Category::kSync, b + 7.5, b + 8, s);
    r1.span(r1.main, "optimizer", Category::kOptimizer, b + 8, b + 10, s);
  }
  const Diagnosis d = diagnose_ranks({r0.t, r1.t});
  EXPECT_EQ(d.parallel.collectives, 4);  // matched on the side threads
  EXPECT_NEAR(d.ranks[0].collective_sync_ms, 2.5, 1e-9);
  EXPECT_NEAR(d.ranks[0].exposed_comm_ms, 1.0, 1e-9);
  EXPECT_NEAR(d.ranks[0].exposed_wait_ms, 0.0, 1e-12);  // the waiting was hidden by compute
  EXPECT_EQ(d.ranks[1].late, 4);
  // Late, but nobody lost time to it: no straggler finding (its share is 0).
  for (const auto& f : d.findings) EXPECT_EQ(f.title.find("Straggler"), std::string::npos);
}

// A 1F1B schedule with p stages and m micro-batches, forward f and backward b ms each: stage s
// runs min(p - s - 1, m) forwards, then one forward and one backward alternately, then the
// remaining backwards; each op starts when its input from the neighbour stage is there.
std::vector<Trace> pipeline(int p, int m, double f, double b, int steps) {
  std::vector<RankTrace> rs;
  for (int s = 0; s < p; ++s) rs.emplace_back(s, p, 1, p, s, m);
  double base = 0;
  for (int step = 0; step < steps; ++step) {
    std::vector<std::vector<double>> fend(p, std::vector<double>(m)), bend = fend;
    std::vector<std::vector<std::pair<char, int>>> order(p);
    for (int s = 0; s < p; ++s) {
      const int warm = std::min(p - s - 1, m);
      int nf = 0, nb = 0;
      for (; nf < warm; ++nf) order[s].push_back({'F', nf});
      while (nb < m) {
        if (nf < m) order[s].push_back({'F', nf++});
        order[s].push_back({'B', nb++});
      }
    }
    // Simulate: repeat passes until every op is timed (dependencies across stages).
    std::vector<size_t> next(p, 0);
    std::vector<double> free(p, base);
    bool progress = true;
    std::vector<std::vector<std::tuple<char, int, double, double>>> ops(p);
    while (progress) {
      progress = false;
      for (int s = 0; s < p; ++s) {
        while (next[s] < order[s].size()) {
          const auto [kind, i] = order[s][next[s]];
          double ready = free[s];
          if (kind == 'F' && s > 0) {
            if (fend[s - 1][i] == 0) break;
            ready = std::max(ready, fend[s - 1][i]);
          }
          if (kind == 'B' && s < p - 1) {
            if (bend[s + 1][i] == 0) break;
            ready = std::max(ready, bend[s + 1][i]);
          }
          const double end = ready + (kind == 'F' ? f : b);
          (kind == 'F' ? fend : bend)[s][i] = end;
          ops[s].push_back({kind, i, ready, end});
          free[s] = end;
          ++next[s];
          progress = true;
        }
      }
    }
    double step_end = 0;
    for (int s = 0; s < p; ++s) step_end = std::max(step_end, free[s]);
    step_end += 1;  // optimizer
    for (int s = 0; s < p; ++s) {
      RankTrace& r = rs[static_cast<size_t>(s)];
      r.step(step, base, step_end);
      double cur = base;
      int64_t recv = 0;
      for (const auto& [kind, i, a, e] : ops[s]) {
        if (a > cur) {  // waiting for the neighbour: a receive on the pp group
          r.span(r.main, "comm.recv", Category::kComm, cur, a, step,
                 comm_range_arg(CommGroup::kPp, static_cast<uint64_t>(step * 100 + recv++)));
        }
        r.span(r.main, kind == 'F' ? "pp.forward" : "pp.backward", Category::kCompute, a, e, step,
               i);
        cur = e;
      }
      // The last stage broadcasts the loss; the others wait for it in the broadcast.
      r.span(r.main, "comm.broadcast", Category::kComm, cur, std::max(cur, free[p - 1]) + 0.01,
             step, comm_range_arg(CommGroup::kPp, static_cast<uint64_t>(step)));
      r.span(r.main, "optimizer", Category::kOptimizer, std::max(cur, free[p - 1]) + 0.01, step_end,
             step);
    }
    base = step_end;
  }
  std::vector<Trace> out;
  for (auto& r : rs) out.push_back(r.t);
  return out;
}

TEST(MultiRank, PipelineBubbleMatchesTheOneFOneBTheory) {
  for (const auto& [p, m] : {std::pair{2, 1}, {2, 2}, {2, 4}, {4, 2}, {4, 8}}) {
    const Diagnosis d = diagnose_ranks(pipeline(p, m, 2.0, 4.0, 3));
    SCOPED_TRACE(::testing::Message() << "p " << p << " m " << m);
    const double theory = static_cast<double>(p - 1) / m;
    EXPECT_NEAR(d.parallel.bubble_theory, theory, 1e-12);
    EXPECT_NEAR(d.parallel.bubble, theory, 1e-9);  // uniform f, b: exactly (p-1)/m
    for (const auto& r : d.ranks) EXPECT_NEAR(r.bubble, theory, 1e-9) << "rank " << r.rank;
    // The last stage's loss broadcast is late by design: no straggler across stages.
    EXPECT_EQ(d.parallel.straggler, -1);
    if (m == 1) {
      ASSERT_FALSE(d.findings.empty());
      const Finding& top = d.findings[0];
      EXPECT_EQ(top.cls, "parallel");
      EXPECT_EQ(top.title, "Pipeline bubble 100% (theory (p-1)/m = 100%)");
      ASSERT_FALSE(top.knobs.empty());
      EXPECT_EQ(top.knobs[0],
                "--micro-batch 2 --grad-accum 2 (2 micro-batches, same global batch)");
      // The receives that wait out the bubble are not reported again as communication.
      EXPECT_EQ(find_cls(d, "comm"), nullptr);
    }
  }
}

TEST(MultiRank, UnannotatedPipelineWaitsAreBubbleNotOther) {
  std::vector<Trace> ranks = pipeline(2, 1, 2.0, 4.0, 3);
  // Stage 0 waits for stage 1 outside any range (no comm.recv around it).
  Trace& t = ranks[0];
  const uint32_t recv = t.names.intern("comm.recv");
  std::erase_if(t.events, [&](const Event& e) { return e.name == recv; });
  const Diagnosis alone = diagnose(t);
  ASSERT_NE(find_cls(alone, "other"), nullptr);  // rank 0 classified alone: 6 of 13 ms
  const Diagnosis d = diagnose_ranks(ranks);
  EXPECT_NEAR(d.parallel.bubble, 1.0, 1e-9);
  EXPECT_EQ(find_cls(d, "other"), nullptr);
  EXPECT_EQ(d.findings.at(0).title, "Pipeline bubble 100% (theory (p-1)/m = 100%)");
}

struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::temp_directory_path() / ("ft_multi_rank_" + std::to_string(::getpid()));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
};

TEST(MultiRank, RankFilesAreFoundReadAndCheckedForGaps) {
  TempDir dir;
  const auto ranks = straggler_ranks();
  write_trace_json(ranks[1], dir.path / "trace.rank1.json");
  write_trace_json(ranks[0], dir.path / "trace.rank0.json");
  ASSERT_EQ(find_rank_traces(dir.path).size(), 2u);
  EXPECT_EQ(find_rank_traces(dir.path)[0].filename(), "trace.rank0.json");
  EXPECT_EQ(detect_trace_format(dir.path), TraceFormat::kFt);
  const auto back = read_rank_traces(dir.path);
  ASSERT_EQ(back.size(), 2u);
  EXPECT_EQ(ft_trace_rank(back[1]), 1);
  EXPECT_EQ(diagnose_ranks(back).parallel.straggler, 1);
  const Trace merged = load_trace(dir.path);  // one Perfetto timeline of both
  EXPECT_EQ(merged.metadata.at("ranks"), "2");
  EXPECT_EQ(merged.events.size(), ranks[0].events.size() + ranks[1].events.size());
  // A missing rank: the run had 3.
  Trace third = ranks[0];
  third.metadata["run.world_size"] = "3";
  write_trace_json(third, dir.path / "trace.rank0.json");
  try {
    read_rank_traces(dir.path);
    ADD_FAILURE() << "a missing rank must be an error";
  } catch (const ft::FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("a rank's trace is missing"), std::string::npos)
        << e.what();
  }
  // Two files claiming one rank.
  write_trace_json(ranks[0], dir.path / "trace.rank0.json");
  write_trace_json(ranks[0], dir.path / "other.rank5.json");
  EXPECT_THROW(read_rank_traces(dir.path), ft::FormatError);
}

}  // namespace
