// kineto_convert.h: prepare's event conversion: what the classifier reads of each Kineto rank's
// records, converted on the machine's cores into one Trace's events. Internal to profiler/kineto
// (kineto_prepare.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <vector>

#include "ft/profiler/event.h"
#include "ft/profiler/kineto_trace.h"

namespace ft::profiler::kineto {

// Per rank: collective call (event index) -> the time it waited for late ranks (ns).
using Waits = std::vector<std::unordered_map<size_t, int64_t>>;

// Appends to out->events what the classifier reads of every rank, in rank and file order, each
// rank's split collectives' waits ("comm sync: NAME", from `waits`) after its events, then the
// training rank's per-step memory counters, then the training thread's gap copies (other host
// threads' spans where it runs nothing classified; docs/classification.md). Names are interned
// into out->names; each rank's tracks, processes and metadata go under "rank N"; the ranks are
// emptied. Sets run.mem_* and run.gap_fill_spans.
void convert_ranks(std::vector<KinetoTrace>* ranks, const Waits& waits, Trace* out);

}  // namespace ft::profiler::kineto
