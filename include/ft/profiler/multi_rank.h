// multi_rank.h: diagnosis across ranks of ft's own per-rank traces (exposed comm, transfer vs
// sync, stragglers by late arrival, pipeline bubble).
#pragma once

#include <filesystem>
#include <vector>

#include "ft/profiler/classifier.h"
#include "ft/profiler/diagnosis.h"
#include "ft/profiler/event.h"
#include "ft/profiler/findings.h"

namespace ft::profiler {

// ft's per-rank traces in `dir`: files named NAME.rankN.json (ft-train --trace under mpirun)
// that are ft traces, ordered by N. Empty when there are none.
std::vector<std::filesystem::path> find_rank_traces(const std::filesystem::path& dir);

// Reads them (read_trace_json). The rank is the trace's "run.rank" metadata, else N of the
// file name; the world size must match the number of files and no rank may repeat (FormatError
// naming the files otherwise).
std::vector<Trace> read_rank_traces(const std::filesystem::path& dir);

// The rank of a trace: metadata "run.rank", else "rank", else 0.
int ft_trace_rank(const Trace& t);

// Cross-rank analysis (docs/classification.md, "Across ranks"):
//  - each rank is classified alone (its training thread); exposed communication is its
//    training thread's comm + sync time; the part of it inside the synchronizing stretch of a
//    matched collective (on any of its threads) is waiting for other ranks;
//  - collectives ("comm.all_reduce", ... ranges with comm_range_arg) match across ranks by
//    (operation, group role, group instance from the rank's dp/tp/pp coordinates, sequence
//    number, training thread or not); the minimum duration is the transfer, the rest synchronizing;
//  - stragglers: at each matched DP/TP collective (world too without pipelining) the rank that
//    starts last, by more than a noise margin, arrives late; the straggler is the rank whose
//    late arrivals make the others wait at least `straggler_dominance` times as long as any
//    other rank's;
//  - pipeline bubble: per stage, the idle time between its "pp.forward" / "pp.backward" ranges
//    inside each step's pipeline span, against (p - 1) / m.
// Timestamps of ranks on another host than rank 0 are shifted by their measured clock offset
// (run.clock_offset_ns); ranks on one host share CLOCK_MONOTONIC and are not shifted.
// The Diagnosis is rank 0's (steps, totals, its findings) with the generic comm finding
// replaced by the cross-rank communication, straggler and bubble findings, plus `ranks` and
// `parallel`. Throws FormatError when a rank has no steps.
Diagnosis diagnose_ranks(const std::vector<Trace>& ranks, const ClassifyOptions& options = {},
                         const FindingRules& rules = {});

// Every rank of an imported (Kineto) run, each prepared by prepare_kineto_ranks: each rank is
// diagnosed alone; the result is rank 0's diagnosis plus one row per rank (`ranks`), the
// cross-rank facts (`parallel`: collectives matched by name and step, the straggler = the rank
// whose calls are shortest, since it arrives last), the straggler finding naming the span whose
// time per step most exceeds the other ranks' (what it does that they do not), and the top
// finding of any other rank whose class rank 0 does not show. One rank: diagnose().
Diagnosis diagnose_trace_ranks(const std::vector<Trace>& ranks, const ClassifyOptions& options = {},
                               const FindingRules& rules = {});

// One Perfetto-loadable trace of every rank (pids split by rank as merge_ranks does, process
// names "rank N ..."), clock offsets applied.
Trace merge_rank_traces(std::vector<Trace> ranks);

}  // namespace ft::profiler
