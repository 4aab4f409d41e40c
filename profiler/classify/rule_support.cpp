// rule_support.cpp: what the diagnosis rules share: totals over the steady steps, the device's
// view of them, evidence (steps, example spans) and the time-share finding every wait class uses.
#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <set>

#include "event_order.h"
#include "rules.h"

namespace ft::profiler::rules {
namespace {
double cls_ms(const StepBreakdown& s, WaitClass c) { return s.ms[static_cast<int>(c)]; }

}  // namespace

Totals totals_of(const std::vector<const StepBreakdown*>& steps) {
  Totals t;
  for (const StepBreakdown* s : steps) {
    t.wall += s->wall_ms;
    for (int i = 0; i < kNumWaitClasses; ++i) t.ms[i] += s->ms[i];
    for (const auto& [k, v] : s->detail) t.detail[k] += v;
  }
  return t;
}

// Device idle time attributed to `cls`, summed over the devices' "deviceN.idle.<cls>" keys.
double device_idle(const Totals& t, const std::string& cls) {
  double sum = 0;
  const std::string suffix = ".idle." + cls;
  for (const auto& [k, v] : t.detail) {
    if (k.rfind("device", 0) == 0 && k.size() > suffix.size() &&
        k.compare(k.size() - suffix.size(), suffix.size(), suffix) == 0) {
      sum += v;
    }
  }
  return sum;
}

// Steps where class c takes more than `min_share` of the step.
std::vector<int64_t> steps_with(const std::vector<const StepBreakdown*>& steps, WaitClass c,
                                double min_share) {
  std::vector<int64_t> out;
  for (const StepBreakdown* s : steps) {
    if (s->wall_ms > 0 && cls_ms(*s, c) / s->wall_ms > min_share) out.push_back(s->step);
    if (out.size() >= kMaxEvidenceSteps) break;
  }
  return out;
}

// The longest spans of class c on the training thread during the given steps.
std::vector<std::string> example_spans(const Trace& trace, WaitClass c,
                                       const std::vector<const StepBreakdown*>& steps, size_t n) {
  Track main;
  if (!find_training_track(trace, &main)) return {};
  std::set<int64_t> wanted;
  for (const StepBreakdown* s : steps) wanted.insert(s->step);
  std::vector<const Event*> hits;
  for (const Event& ev : trace.events) {
    if (ev.phase != Phase::kSpan || is_step_span(trace, ev) || !(ev.track == main)) continue;
    if (wait_class_of(ev.category) != c || !wanted.count(ev.step)) continue;
    hits.push_back(&ev);
  }
  // The longest first; one length: by place in the trace.
  std::sort(hits.begin(), hits.end(), [](const Event* a, const Event* b) {
    return a->dur_ns != b->dur_ns ? a->dur_ns > b->dur_ns : a < b;
  });
  std::vector<std::string> out;
  const auto name = trace.tracks.count(main) ? trace.tracks.at(main) : std::string("main");
  for (size_t i = 0; i < hits.size() && i < n; ++i) {
    out.push_back(fmt::format("{} {:.3f} ms at step {} (thread {})", trace.names.at(hits[i]->name),
                              hits[i]->dur_ns / 1e6, hits[i]->step, name));
  }
  return out;
}

std::map<std::string, double> span_ms_by_name(const Trace& trace,
                                              const std::vector<const StepBreakdown*>& steps,
                                              bool unclassified_only) {
  std::map<std::string, double> out;
  Track main;
  if (steps.empty() || !find_training_track(trace, &main)) return out;
  std::set<int64_t> wanted;
  for (const StepBreakdown* s : steps) wanted.insert(s->step);
  std::vector<const Event*> spans;
  for (const Event& e : trace.events) {
    if (e.phase != Phase::kSpan || !(e.track == main) || is_step_span(trace, e) ||
        !wanted.count(e.step))
      continue;
    if (!unclassified_only || wait_class_of(e.category) == WaitClass::kOther) spans.push_back(&e);
  }
  sort_by_start(&spans);
  std::map<uint32_t, std::pair<int64_t, int64_t>> by_name;  // name -> (open end, total ns)
  for (const Event* e : spans) {
    auto& [open_end, total] = by_name[e->name];
    if (e->ts_ns < open_end) continue;  // nested in an instance of its own name
    open_end = e->end_ns();
    total += e->dur_ns;
  }
  for (const auto& [name, v] : by_name)
    out[trace.names.at(name)] =
        static_cast<double>(v.second) / 1e6 / static_cast<double>(steps.size());
  return out;
}

Severity time_severity(double share, const FindingRules& r) {
  return share >= r.critical_share ? Severity::kCritical : Severity::kWarning;
}

int64_t meta_int(const Trace& trace, const char* key, int64_t fallback) {
  const auto it = trace.metadata.find(key);
  if (it == trace.metadata.end()) return fallback;
  char* end = nullptr;
  const long long v = std::strtoll(it->second.c_str(), &end, 10);
  return end != it->second.c_str() && *end == '\0' ? v : fallback;
}

// The knob that moves batches through page-locked memory on an async copy stream.
std::vector<std::string> pinned_knobs(const Trace& trace, const RunInfo& run) {
  if (is_pytorch(trace)) {  // a PyTorch run
    return {"DataLoader(pin_memory=True)", "tensor.to(device, non_blocking=True)"};
  }
  if (!run.h2d.empty() || trace.source.rfind("ft", 0) == 0) return {"--h2d pinned", "--prefetch 2"};
  return {"page-locked (pinned) host buffers for copies", "--prefetch 2"};
}

// Imported traces carry their format (prepare_kineto_trace); hand-built ones their source.
bool is_pytorch(const Trace& trace) {
  return trace.metadata.count("source_format") > 0 || trace.source.rfind("kineto", 0) == 0;
}

RuleContext::RuleContext(const Trace& trace_in, const std::vector<StepBreakdown>& all_in,
                         const RunInfo& run_in, const LossHealth& loss_in, const FindingRules& r_in)
    : trace(trace_in),
      all(all_in),
      steps(steady_steps(all_in, run_in)),
      run(run_in),
      loss(loss_in),
      r(r_in) {
  t = totals_of(steps);  // on a GPU run, the device's view (partition_steps)
  n = static_cast<double>(std::max<size_t>(steps.size(), 1));
}

double RuleContext::detail(const char* key) const {
  const auto it = t.detail.find(key);
  return it == t.detail.end() ? 0.0 : it->second;
}
double RuleContext::share(WaitClass c) const {
  return t.wall > 0 ? t.ms[static_cast<int>(c)] / t.wall : 0.0;
}
double RuleContext::ms_per_step(WaitClass c) const { return t.ms[static_cast<int>(c)] / n; }

void add_time_finding(const RuleContext& ctx, std::vector<Finding>* out, WaitClass c,
                      double threshold, std::string title, std::string explanation,
                      std::vector<std::string> knobs, std::string detail) {
  const double share = ctx.share(c);
  if (share <= threshold) return;
  Finding f;
  f.cls = wait_class_name(c);
  f.share = share;
  f.severity = time_severity(share, ctx.r);
  f.title = fmt::format("{} ({:.1f}% of step time)", title, 100 * share);
  f.explanation = std::move(explanation);
  f.evidence.steps = steps_with(ctx.steps, c, threshold);
  f.evidence.share = share;
  f.evidence.examples = example_spans(ctx.trace, c, ctx.steps, 3);
  f.evidence.detail = std::move(detail);
  f.knobs = std::move(knobs);
  out->push_back(std::move(f));
}

}  // namespace ft::profiler::rules
