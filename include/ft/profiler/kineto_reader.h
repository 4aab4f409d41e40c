// kineto_reader.h: streaming reader for PyTorch profiler (Kineto / Chrome-trace) JSON traces.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ft/profiler/event.h"
#include "ft/profiler/kineto_trace.h"

namespace ft::profiler {

// How Kineto events map onto ft's Event (see docs/hta_parity.md for the full table):
//  - ts/dur: µs in the JSON -> ns (3 decimals kept exactly; a 4th rounds).
//  - GPU events (numeric args.stream != -1): Track{device=true, pid=args.device (else pid),
//    tid=stream}. Device events without a stream (gpu_user_annotation, context syncs) keep
//    their pid/tid and carry kNoStream.
//  - Host events: Track{device=false, pid, tid}; string pids/tids ("CPU functions", "Spans")
//    get ids from 0x80000000 up, named in Trace::processes / Trace::tracks.
//  - Event::id = args.correlation (0 = none); Event::arg = args["External id"] (-1 = none).
//  - bytes: memcpy/memset args.bytes; NCCL kernels In msg nelems x dtype size; [memory] |Bytes|.
//  - [memory] instants: Phase::kInstant, Category::kAlloc, arg = signed Bytes, bytes = |Bytes|,
//    value = Total Allocated; a kCounter "[memory] Total Reserved" follows whenever the
//    reserved total changes.
//  - ProfilerStep#N: Category::kStep with step = N; every host span inside a step's interval
//    (and every GPU event whose launch is inside) gets step = N when converted to a Trace
//    (to_trace, prepare_kineto_trace); KinetoTrace records do not store it.
// Trace::metadata: "source_format" (kineto | kineto-2021 | autograd-legacy), "rank" (from
// distributedInfo.rank when present), "has_rank" ("1"/"0"), "path", "schemaVersion".
struct KinetoReadOptions {
  bool keep_flows = false;     // ac2g / fwdbwd flow events (correlation already links them)
  bool keep_instants = false;  // instants other than [memory] (cpu_instant_event, ...)
  bool keep_memory = true;     // [memory] instants and their counters
  bool assign_steps = true;    // fill Event::step from ProfilerStep#N spans
  // traceEvents parsed in chunks by simdjson on every core (false: by the streaming tokenizer
  // alone). Both give the same records and the same errors: a chunk the fast path refuses is
  // read by the streaming tokenizer.
  bool parallel_events = true;
  size_t buffer_bytes = 1 << 20;  // the tokenizer's buffer; chunks are min(this, 128 KiB)
};

// Reads one trace file (plain or gzip, detected by magic bytes) into compact records (32 B per
// event; the form the HTA analyses and prepare_kineto_trace take). Throws IoError if it cannot be
// read and FormatError (with the byte offset in the decompressed JSON) if it is malformed or
// truncated.
KinetoTrace read_kineto_records(const std::string& path, const KinetoReadOptions& options = {});
// Parses a trace from memory (tests, fuzzing). `label` names it in errors.
KinetoTrace read_kineto_records_from_memory(const std::string& data, const std::string& label,
                                            const KinetoReadOptions& options = {});

// The same as a Trace of Events (80 B each; steps assigned when options.assign_steps).
Trace read_kineto_trace(const std::string& path, const KinetoReadOptions& options = {});
Trace read_kineto_trace_from_memory(const std::string& data, const std::string& label,
                                    const KinetoReadOptions& options = {});

// A directory of ranks: every *.json / *.json.gz file directly inside `dir`, one trace per file,
// sorted by rank (files without distributedInfo.rank get ranks after the highest known one, in
// file-name order). A plain file path returns a single trace.
std::vector<KinetoTrace> read_kineto_rank_records(const std::string& path,
                                                  const KinetoReadOptions& options = {});
std::vector<Trace> read_kineto_ranks(const std::string& path,
                                     const KinetoReadOptions& options = {});

// Rank of a trace read by this reader (metadata "rank", 0 if absent).
int trace_rank(const Trace& trace);
int trace_rank(const KinetoTrace& trace);

// Where rank `rank`'s track goes when ranks are merged into one Trace (merge_ranks).
inline Track rank_track(Track track, uint32_t rank) {
  track.pid =
      track.device ? rank * 256u + (track.pid & 0xffu) : (rank << 24) | (track.pid & 0xffffffu);
  return track;
}

// Merges ranks into one Trace whose pid space is split by rank: host pids become
// rank * 2^24 + (pid mod 2^24) and device pids rank * 256 + device, so tracks never collide.
Trace merge_ranks(std::vector<Trace> ranks);

}  // namespace ft::profiler
