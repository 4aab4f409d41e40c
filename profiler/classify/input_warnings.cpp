// input_warnings.cpp: what a trace holds that the analysis could not use, counted and said
// (Diagnosis::warnings; docs/classification.md, "Input warnings").
#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <string>
#include <vector>

#include "event_order.h"
#include "ft/profiler/findings.h"
#include "rules.h"

namespace ft::profiler {
namespace {

int64_t meta_count(const Trace& t, const std::string& key) {
  const auto it = t.metadata.find(key);
  return it == t.metadata.end() ? 0 : std::stoll(it->second);
}

std::string meta_first(const Trace& t, const std::string& key) {
  const auto it = t.metadata.find(key + ".first");
  return it == t.metadata.end() ? std::string() : fmt::format(" (first: '{}')", it->second);
}

}  // namespace

std::vector<std::string> input_warnings(const Trace& trace,
                                        const std::vector<StepBreakdown>& steps) {
  std::vector<std::string> out;
  if (const int64_t n = meta_count(trace, "input.negative_durations"))
    out.push_back(
        fmt::format("{} spans have a negative duration{}; the step partition leaves "
                    "them out",
                    n, meta_first(trace, "input.negative_durations")));
  if (const int64_t n = meta_count(trace, "input.negative_timestamps"))
    out.push_back(fmt::format("{} events have a negative timestamp{}", n,
                              meta_first(trace, "input.negative_timestamps")));
  if (const int64_t n = meta_count(trace, "input.skipped_files"))
    out.push_back(
        fmt::format("{} files in the folder hold no traceEvents{} (e.g. PyTorch's "
                    "execution trace) and were skipped",
                    n, meta_first(trace, "input.skipped_files")));
  Track main;
  if (!find_training_track(trace, &main)) return out;
  // Step spans that start inside an earlier one: the partition keeps the outermost, in order.
  std::vector<const Event*> step_spans;
  std::vector<uint64_t> host_ids;  // sorted, unique
  for (const Event& e : trace.events) {
    if (e.phase != Phase::kSpan) continue;
    if (!e.track.device && e.id != 0) host_ids.push_back(e.id);
    if (e.track == main && is_step_span(trace, e)) step_spans.push_back(&e);
  }
  std::sort(host_ids.begin(), host_ids.end());
  host_ids.erase(std::unique(host_ids.begin(), host_ids.end()), host_ids.end());
  sort_by_start(&step_spans);
  int64_t end = std::numeric_limits<int64_t>::min(), t0 = std::numeric_limits<int64_t>::max();
  for (const Event& e : trace.events) t0 = std::min(t0, e.ts_ns);
  size_t overlapping = 0;
  const Event* first = nullptr;
  for (const Event* s : step_spans) {
    if (s->ts_ns < end) {
      if (overlapping++ == 0) first = s;
      continue;
    }
    end = s->end_ns();
  }
  // Step spans that outlive everything else in the trace by more than a tenth of themselves:
  // that time holds nothing traced.
  int64_t last_end = std::numeric_limits<int64_t>::min();
  for (const Event& e : trace.events)
    if (e.phase == Phase::kSpan && !is_step_span(trace, e))
      last_end = std::max(last_end, e.end_ns());
  const Event* longest = nullptr;
  size_t outliving = 0;
  // As a double: a malformed trace's times may be far apart enough to overflow 10 x the gap.
  const auto after_last = [&](const Event* e) { return exact_gap(e->end_ns(), last_end); };
  for (const Event* s : step_spans) {
    // A step's own closing work may end it a little after its last op: a tenth of it is not.
    if (last_end == std::numeric_limits<int64_t>::min() ||
        10 * after_last(s) <= static_cast<double>(s->dur_ns))
      continue;
    ++outliving;
    if (!longest || s->end_ns() > longest->end_ns()) longest = s;
  }
  if (outliving > 0)
    out.push_back(fmt::format(
        "{} step spans end well after the last other event of the trace (most: '{}', {:.3f} ms of "
        "its {:.3f} ms after it): that time holds nothing traced (a step span from another "
        "process, or one that outlives the recording)",
        outliving, trace.names.at(longest->name),
        after_last(longest) / 1e6,
        static_cast<double>(longest->dur_ns) / 1e6));
  if (overlapping > 0)
    out.push_back(fmt::format(
        "{} step spans start inside an earlier step and are left out "
        "(first: '{}' at {:.3f} ms)",
        overlapping, trace.names.at(first->name), static_cast<double>(first->ts_ns - t0) / 1e6));
  // Device ops that name a launch the trace does not hold.
  size_t unmatched = 0, linked = 0;
  for (const Event& e : trace.events) {
    if (!e.track.device || e.phase != Phase::kSpan || e.id == 0 || (e.flags & kNoStream)) continue;
    ++linked;
    if (!std::binary_search(host_ids.begin(), host_ids.end(), e.id)) ++unmatched;
  }
  if (unmatched > 0)
    out.push_back(
        fmt::format("{} of {} device ops carry a correlation id that no host call read has "
                    "(their launches are missing, or on a thread the import leaves out: the step "
                    "graph cannot move them)",
                    unmatched, linked));
  // Imported traces: spans of the training thread and the devices outside every step window.
  if (rules::is_pytorch(trace) && !steps.empty()) {
    std::vector<std::pair<int64_t, int64_t>> windows;
    for (const StepBreakdown& s : steps) {
      const int64_t lo = t0 + std::llround(s.start_ms * 1e6);
      windows.emplace_back(lo, lo + std::llround(s.wall_ms * 1e6));
    }
    std::sort(windows.begin(), windows.end());
    size_t host = 0, device = 0;
    for (const Event& e : trace.events) {
      if (e.phase != Phase::kSpan || is_step_span(trace, e)) continue;
      if (!e.track.device && !(e.track == main)) continue;
      const auto it =
          std::upper_bound(windows.begin(), windows.end(),
                           std::make_pair(e.end_ns(), std::numeric_limits<int64_t>::min()));
      // The window starting last before the span ends: does it reach the span?
      const bool inside = it != windows.begin() && std::prev(it)->second > e.ts_ns;
      if (!inside) ++(e.track.device ? device : host);
    }
    if (host + device > 0)
      out.push_back(
          fmt::format("{} spans lie outside every step ({} on the training thread, {} on "
                      "devices) and are not classified",
                      host + device, host, device));
  }
  return out;
}

}  // namespace ft::profiler
