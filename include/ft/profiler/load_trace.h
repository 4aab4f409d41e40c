// load_trace.h: one loader for every trace ft-diagnose accepts (ft's trace.json, Kineto/PyTorch).
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "ft/profiler/diagnosis.h"
#include "ft/profiler/event.h"
#include "ft/profiler/kineto_trace.h"

namespace ft::profiler {

enum class TraceFormat : uint8_t {
  kFt,      // written by write_trace_json ("ft": {"format": "ft-trace"} near the start)
  kKineto,  // torch.profiler / Kineto / legacy autograd-profiler JSON, plain or .gz
};

// Detects the format of a file (gzip, or no ft header: Kineto), or of a directory: one holding
// trace.json or ft's per-rank traces (NAME.rankN.json, multi_rank.h) is an ft run directory,
// else a directory of Kineto ranks (*.json / *.json.gz).
// Throws IoError when there is no trace.
TraceFormat detect_trace_format(const std::filesystem::path& path);

// Loads ft's trace.json (a file, or DIR/trace.json; a directory of ft rank traces merged by
// merge_rank_traces: use diagnose_ranks to analyse them across ranks) or a Kineto trace (a file, or
// a directory of per-rank files) into a Trace the classifier understands. Kineto traces go through
// read_kineto_rank_records + prepare_kineto_trace. Throws IoError / FormatError.
Trace load_trace(const std::filesystem::path& path);

// HTA's critical path (critical_path.h) of the first steady step of rank `rank` (the diagnosed
// one: the headline rank of diagnose_trace_ranks) of the Kineto trace at `path`, into
// d->critical_path. Traces without ProfilerStep spans, and any failure, leave an error there
// instead; never throws.
void add_critical_path(const std::filesystem::path& path, int rank, Diagnosis* d);

// `ft-diagnose --hta-json`: HTA's analyses (hta_analyses) of the Kineto trace at `trace_path`,
// written atomically to `out` as {key: analyses}, keyed as ft-hta keys it (hta_entry_key).
// Reads the trace again (the classifier's Trace is reshaped). Throws IoError / FormatError.
void write_hta_json(const std::filesystem::path& trace_path, const std::filesystem::path& out);

// Cross-rank facts about collectives (the same collective matched by name and occurrence).
struct CollectiveSplit {
  int ranks = 0;
  int64_t collectives = 0;        // matched groups (present on every rank)
  int64_t transfer_ns = 0;        // sum over ranks of the group minimum duration
  int64_t sync_ns = 0;            // sum over ranks of (duration - group minimum)
  int straggler_rank = -1;        // the rank that arrives last most often, weighted by the wait
  int64_t straggler_wait_ns = 0;  // time the other ranks waited for it (sum over groups)
  int64_t straggler_late = 0;     // groups where it arrived last
};

// Matches device collective kernels (Category::kComm on device tracks) across ranks: the k-th
// kernel of a given name on each rank is one collective. Its minimum duration over the ranks is
// the transfer; the rest of each rank's kernel is synchronizing (waiting for late ranks).
CollectiveSplit split_collectives(const std::vector<KinetoTrace>& ranks);

// Turns Kineto ranks into one classifier-ready Trace (merge_ranks, then): host runtime memcpys
// take their device copy's category, bytes and pageable/pinned flags (exposed PCIe time);
// [memory] samples become per-step mem.allocated / mem.reserved counters and run.mem_* metadata;
// device collectives are split into "comm sync: NAME" (waiting) and NAME (transfer) parts by
// split_collectives; run.comm_* / run.straggler_* metadata record the cross-rank facts; where
// the training thread has no span of its own inside a step, the spans other threads of its
// process run then (the autograd engine's backward) are copied onto it, clipped to those gaps.
// The Trace holds the events the classifier reads (device events, counters, the training
// thread's spans, step spans and PCIe copies on every thread, and the earliest event, the time
// origin); other threads' spans, [memory] instants and flows are consumed here and left out.
// Each rank's records are freed as it is converted.
Trace prepare_kineto_trace(std::vector<KinetoTrace> ranks);

// The same, one Trace per rank (in the order given): collectives are matched across all ranks
// first, so each rank's Trace carries its own waiting parts and the run's cross-rank facts
// (run.straggler_*, run.comm_*; "ranks" is the number of ranks given, "rank" its own, and
// run.rank_source says where the rank numbers came from).
std::vector<Trace> prepare_kineto_ranks(std::vector<KinetoTrace> ranks);

// Every rank of a Kineto trace or folder, one Trace each (read_kineto_rank_records: windows of
// one rank merged; prepare_kineto_ranks). Throws IoError / FormatError.
std::vector<Trace> load_kineto_ranks(const std::filesystem::path& path);

}  // namespace ft::profiler
