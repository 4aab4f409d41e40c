// kineto_iterations.cpp: iterations of a Kineto trace that has no ProfilerStep spans (a
// benchmark, an inference loop, a script without a profiler schedule).
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "kineto_steps.h"

namespace ft::profiler::kineto {
namespace {

// Iteration marks must span at least this share of their level's time range.
constexpr double kMinReach = 0.5;

struct Span {
  int64_t ts, end;
  uint32_t name;
  uint16_t track;
  bool annotation;  // Category::kOther: a user annotation or Python function, not an operator
  int parent = -1;
  std::vector<int> children;
};

bool names_warm_up(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s.find("warmup") != std::string::npos || s.find("warm_up") != std::string::npos ||
         s.find("warm-up") != std::string::npos;
}

// Host spans of the trace (any category), by track.
std::map<uint16_t, std::vector<Span>> host_spans(const KinetoTrace& t) {
  std::map<uint16_t, std::vector<Span>> out;
  for (size_t i = 0; i < t.size(); ++i) {
    const KinetoRecord& r = t.record(i);
    if (static_cast<Phase>(r.kind >> 4) != Phase::kSpan || t.track_of(i).device) continue;
    const Event e = t.event(i);
    if (e.dur_ns <= 0) continue;
    out[r.track].push_back(
        {e.ts_ns, e.end_ns(), e.name, r.track, e.category == Category::kOther, -1, {}});
  }
  return out;
}

// Sorts a track's spans by (start, longest first) and links each to its enclosing span.
std::vector<int> build_tree(std::vector<Span>* spans) {
  std::sort(spans->begin(), spans->end(), [](const Span& a, const Span& b) {
    return a.ts != b.ts ? a.ts < b.ts : a.end > b.end;
  });
  std::vector<int> roots, open;
  for (int i = 0; i < static_cast<int>(spans->size()); ++i) {
    Span& s = (*spans)[static_cast<size_t>(i)];
    while (!open.empty() && (*spans)[static_cast<size_t>(open.back())].end <= s.ts) open.pop_back();
    // A span that starts inside another but outlives it (clock jitter) is nested all the same.
    if (open.empty()) {
      roots.push_back(i);
    } else {
      s.parent = open.back();
      (*spans)[static_cast<size_t>(open.back())].children.push_back(i);
    }
    open.push_back(i);
  }
  return roots;
}

struct Candidate {
  uint32_t name = 0;
  std::vector<int> instances;  // in time order
  int64_t total = 0;
  bool regular = true;   // starts evenly spaced (longest gap <= 4x the median gap)
  bool warm_up = false;  // the name marks warm-up ("warmup", "warm_up", "warm-up")
  bool own = false;      // the instances cover at least half their range: windows of their own
  double reach = 0;      // share of the level's time range that the windows span
};

// The repeating name at one level of the nesting, by the rule in docs/classification.md.
const Candidate* pick(std::vector<Candidate>* cands) {
  if (cands->empty()) return nullptr;
  const bool any_steady =
      std::any_of(cands->begin(), cands->end(), [](const Candidate& c) { return !c.warm_up; });
  const bool any_regular = std::any_of(cands->begin(), cands->end(), [&](const Candidate& c) {
    return c.regular && (!any_steady || !c.warm_up);
  });
  const Candidate* best = nullptr;
  for (const Candidate& c : *cands) {
    if (any_steady && c.warm_up) continue;
    if (any_regular && !c.regular) continue;
    if (!best || c.instances.size() < best->instances.size() ||
        (c.instances.size() == best->instances.size() && c.total > best->total)) {
      best = &c;
    }
  }
  return best;
}

std::vector<Candidate> candidates(const std::vector<Span>& spans, const std::vector<int>& level,
                                  const StringTable& names, bool annotations_only) {
  std::map<uint32_t, Candidate> by_name;
  int64_t lo = INT64_MAX, hi = INT64_MIN;
  for (int i : level) {
    lo = std::min(lo, spans[static_cast<size_t>(i)].ts);
    hi = std::max(hi, spans[static_cast<size_t>(i)].end);
  }
  for (int i : level) {
    const Span& s = spans[static_cast<size_t>(i)];
    if (annotations_only && !s.annotation) continue;
    Candidate& c = by_name[s.name];
    c.name = s.name;
    c.instances.push_back(i);
    c.total += s.end - s.ts;
  }
  std::vector<Candidate> out;
  for (auto& [name, c] : by_name) {
    if (c.instances.size() < 2) continue;
    std::sort(c.instances.begin(), c.instances.end(), [&](int a, int b) {
      return spans[static_cast<size_t>(a)].ts < spans[static_cast<size_t>(b)].ts;
    });
    std::vector<int64_t> gaps;
    for (size_t k = 1; k < c.instances.size(); ++k)
      gaps.push_back(spans[static_cast<size_t>(c.instances[k])].ts -
                     spans[static_cast<size_t>(c.instances[k - 1])].ts);
    std::vector<int64_t> sorted = gaps;
    std::nth_element(sorted.begin(), sorted.begin() + static_cast<long>(sorted.size() / 2),
                     sorted.end());
    const int64_t median = sorted[sorted.size() / 2];
    c.regular = *std::max_element(gaps.begin(), gaps.end()) <= 4 * std::max<int64_t>(median, 1);
    c.warm_up = names_warm_up(names.at(name));
    const Span& a = spans[static_cast<size_t>(c.instances.front())];
    const Span& z = spans[static_cast<size_t>(c.instances.back())];
    const auto n = static_cast<double>(c.instances.size());
    c.own = 2 * c.total >= z.end - a.ts;
    const double range =
        c.own ? static_cast<double>(z.end - a.ts) : static_cast<double>(z.ts - a.ts) * n / (n - 1);
    c.reach = range / static_cast<double>(std::max<int64_t>(hi - lo, 1));
    // Repeats confined to a corner of the level (set-up, one phase) are not the loop.
    if (c.reach < kMinReach) continue;
    out.push_back(std::move(c));
  }
  return out;
}

void append_step(KinetoTrace* t, const Track& track, int64_t a, int64_t b, int n) {
  Event s;
  s.ts_ns = a;
  s.dur_ns = std::max<int64_t>(b - a, 1);
  s.phase = Phase::kSpan;
  s.category = Category::kStep;
  s.track = track;
  s.name = t->names.intern(fmt::format("ProfilerStep#{}", n));
  t->append(s);
}

// Appends one step per instance of `c` and returns how they were found.
std::string append_iterations(KinetoTrace* t, const Track& track, const std::vector<Span>& spans,
                              const std::vector<int>& roots, const Candidate& c,
                              const std::vector<Candidate>& cands, int depth) {
  const Span& z = spans[static_cast<size_t>(c.instances.back())];
  // Marks that do not cover the loop (an op called once per iteration) start windows that run
  // to the next mark; the last runs to the end of its enclosing span or of the thread.
  int64_t tail = 0;
  for (int i : roots) tail = std::max(tail, spans[static_cast<size_t>(i)].end);
  if (z.parent >= 0) tail = spans[static_cast<size_t>(z.parent)].end;
  const size_t n = c.instances.size();
  for (size_t k = 0; k < n; ++k) {
    const Span& s = spans[static_cast<size_t>(c.instances[k])];
    const int64_t end = c.own       ? s.end
                        : k + 1 < n ? spans[static_cast<size_t>(c.instances[k + 1])].ts
                                    : std::max(tail, s.end);
    append_step(t, track, s.ts, end, static_cast<int>(k));
  }
  const bool skipped_warm_up =
      std::any_of(cands.begin(), cands.end(), [](const Candidate& x) { return x.warm_up; });
  return fmt::format(
      "{} iterations: the instances of '{}' (no ProfilerStep spans; the repeating {} {} at depth "
      "{} of the busiest host thread{}{})",
      n, t->names.at(c.name), z.annotation ? "annotation" : "operator",
      c.own ? "span" : "call, each window running to its next instance", depth,
      cands.size() > 1 ? fmt::format(", the rarest of {} repeating names", cands.size())
                       : std::string(),
      skipped_warm_up && !c.warm_up ? ", warm-up spans left out" : "");
}

}  // namespace

std::string synthesize_iterations(KinetoTrace* t) {
  for (size_t i = 0; i < t->size(); ++i) {
    const KinetoRecord& r = t->record(i);
    if (static_cast<Category>(r.kind & 15) == Category::kStep && !t->track_of(i).device &&
        static_cast<Phase>(r.kind >> 4) == Phase::kSpan) {
      return "ProfilerStep#N spans";
    }
  }
  std::map<uint16_t, std::vector<Span>> tracks = host_spans(*t);
  // The host thread whose outermost spans cover the most time runs the loop.
  uint16_t best_track = 0;
  int64_t best_cover = -1;
  std::map<uint16_t, std::vector<int>> roots;
  for (auto& [track, spans] : tracks) {
    roots[track] = build_tree(&spans);
    int64_t cover = 0;
    for (int i : roots[track])
      cover += spans[static_cast<size_t>(i)].end - spans[static_cast<size_t>(i)].ts;
    if (cover > best_cover) best_cover = cover, best_track = track;
  }
  int64_t first = INT64_MAX, last = INT64_MIN;
  size_t any_host = t->size();
  for (size_t i = 0; i < t->size(); ++i) {
    const Event e = t->event(i);
    first = std::min(first, e.ts_ns);
    last = std::max(last, e.phase == Phase::kSpan ? e.end_ns() : e.ts_ns);
    if (any_host == t->size() && !e.track.device) any_host = i;
  }
  if (t->size() == 0 || any_host == t->size()) return "none: the trace has no host events";
  if (tracks.empty()) {
    append_step(t, t->track_of(any_host), first, last, 0);
    return "the whole trace as one window (no ProfilerStep spans and no host spans)";
  }
  const std::vector<Span>& spans = tracks[best_track];
  Track track;
  for (size_t i = 0; i < t->size(); ++i) {
    if (t->record(i).track == best_track) {
      track = t->track_of(i);
      break;
    }
  }
  // The program's own annotations mark iterations better than the operators inside them:
  // first the shallowest level where an annotation repeats, then the shallowest where any span
  // does.
  for (const bool annotations_only : {true, false}) {
    std::vector<int> level = roots[best_track];
    for (int depth = 0; depth < 16 && !level.empty(); ++depth) {
      std::vector<Candidate> cands = candidates(spans, level, t->names, annotations_only);
      if (const Candidate* c = pick(&cands)) {
        return append_iterations(t, track, spans, roots[best_track], *c, cands, depth);
      }
      std::vector<int> next;
      for (int i : level) {
        const auto& ch = spans[static_cast<size_t>(i)].children;
        next.insert(next.end(), ch.begin(), ch.end());
      }
      level = std::move(next);
    }
  }
  append_step(t, track, first, last, 0);
  return "the whole trace as one window (no ProfilerStep spans and no repeating span on the "
         "busiest host thread)";
}

}  // namespace ft::profiler::kineto
