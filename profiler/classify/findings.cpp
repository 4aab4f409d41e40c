// findings.cpp: the table of diagnosis rules (class, threshold, knobs, function) and the pass that
// runs them into ranked findings. The rules themselves: rules_time.cpp and rules_run.cpp.
#include "ft/profiler/findings.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <unordered_map>

#include "rules.h"

namespace ft::profiler {
namespace {

using RuleFn = void (*)(const rules::RuleContext&, std::vector<Finding>*);
struct RuleEntry {
  RuleInfo info;
  RuleFn fn;
};

// Every rule, in the order find_issues runs them (ranking sorts the findings afterwards).
const std::vector<RuleEntry>& rule_entries() {
  using namespace rules;  // NOLINT: the rule functions
  static const std::vector<RuleEntry> kRules = {
      {{"oom", "memory", "the run stopped out of memory (run.oom)",
        "--memory-limit 1.5x, --checkpoint block, --micro-batch /2 --grad-accum 2x"},
       oom_rule},
      {{"data", "data", "data share > data_share (5%)",
        "--loader-workers N, --prefetch 2x with workers; --loader-workers 0 when the wait is the "
        "hand-off; "
        "DataLoader(num_workers, pin_memory) for PyTorch"},
       data_rule},
      {{"memory_time", "memory", "memory share > memory_share (5%)",
        "--allocator-caching true, --memory-limit, --checkpoint block"},
       memory_time_rule},
      {{"comm", "comm", "comm share > comm_share (10%)", "--grad-accum 2x"}, comm_rule},
      {{"pcie", "pcie", "pcie share > pcie_share (10%)",
        "--h2d pinned / DataLoader(pin_memory=True), --prefetch 2"},
       pcie_rule},
      {{"copies", "pcie",
        "any async copy from pageable memory; synchronous D2H or H2D > sync_copy_bytes (64 KB)",
        "pinned buffers, async copies on a side stream"},
       copy_rules},
      {{"straggler", "parallel", "a late rank's cost > comm_share / 2", "(balance the late rank)"},
       straggler_rule},
      {{"sync", "sync", "sync share > sync_share (5%)", ""}, sync_rule},
      {{"host", "host", "host share > host_share (10%)", "--micro-batch 2x"}, host_rule},
      {{"other", "other", "other share > other_share (15%)", ""}, other_rule},
      {{"precision", "precision", "fp32 and compute share >= compute_bound_share (50%)",
        "--precision bf16"},
       precision_rule},
      {{"tensor_core", "precision",
        "SIMT fp32 GEMM kernels (sgemm) >= simt_gemm_share (10%) of a GPU step",
        "torch.backends.cuda.matmul.allow_tf32 = True, torch.autocast(dtype=torch.bfloat16)"},
       tensor_core_rule},
      {{"batch", "batch",
        "tokens per micro-batch <= underfilled_tokens (512), MFU < underfilled_mfu (45% of the "
        "measured peak), memory headroom 2x",
        "--micro-batch 2x --grad-accum /2"},
       batch_rule},
      {{"loss", "loss", "loss verdict spiky, oscillating, diverging or nan",
        "--warmup, --lr /3 or /30, --clip 1.0"},
       loss_rule},
      {{"blas_coretype", "environment", "OPENBLAS_CORETYPE narrower than the CPU's vectors",
        "OPENBLAS_CORETYPE=SkylakeX / unset"},
       blas_coretype_rule},
      {{"onednn_isa", "environment", "oneDNN capped at AVX2 on an AVX-512 CPU",
        "unset ONEDNN_MAX_CPU_ISA"},
       onednn_isa_rule},
      {{"threads", "environment", "threads > free cores", "--threads N, OMP_WAIT_POLICY=passive"},
       threads_rule},
      {{"allocator_unmap", "environment", "caching off or >= 1 segment unmapped per step",
        "--allocator-caching true"},
       allocator_unmap_rule},
      {{"reserved_overhang", "memory",
        "peak reserved >= reserved_over_allocated (2x) peak allocated", "--memory-limit"},
       reserved_overhang_rule},
      {{"memory_capacity", "memory", "peak reserved > memory_capacity_frac (90%) of capacity",
        "--checkpoint block, --micro-batch /2"},
       memory_capacity_rule},
  };
  return kRules;
}

}  // namespace

const std::vector<RuleInfo>& finding_rules() {
  static const std::vector<RuleInfo> kInfo = [] {
    std::vector<RuleInfo> out;
    for (const RuleEntry& e : rule_entries()) out.push_back(e.info);
    return out;
  }();
  return kInfo;
}

std::vector<Finding> apply_rule(const std::string& name, const Trace& trace,
                                const std::vector<StepBreakdown>& steps, const RunInfo& run,
                                const LossHealth& loss, const FindingRules& r) {
  for (const RuleEntry& e : rule_entries()) {
    if (name != e.info.name) continue;
    const rules::RuleContext ctx(trace, steps, run, loss, r);
    std::vector<Finding> out;
    e.fn(ctx, &out);
    return out;
  }
  throw std::invalid_argument("no diagnosis rule named '" + name + "'");
}

namespace {

double device_busy_ms(const StepBreakdown& s) {
  double busy = 0;
  for (const auto& [k, v] : s.detail)
    if (k.rfind("device.busy.", 0) == 0) busy += v;
  return busy;
}

}  // namespace

std::vector<const StepBreakdown*> steady_steps(const std::vector<StepBreakdown>& steps,
                                               const RunInfo& run) {
  // Stub steps: shorter than kStubFraction of the median step, or without device work in a run
  // whose other steps have some (a profiler's 49 µs closing step, a step cut by the window).
  // The median is that of the steps after the warm-up: a warm-up step can be far longer (a
  // benchmark's first window holds its autotuning).
  const size_t skip = static_cast<size_t>(std::max(0, run.warmup_excluded));
  // Steps partitioned on a device's timeline run from one step's first device op to the next
  // step's: the last has no next one and is cut short (its successor's data wait or host gap is
  // missing). Like HTA, which drops the last step, it leaves the steady state when others remain.
  bool device_windows = false;
  for (const StepBreakdown& s : steps)
    for (const auto& [k, v] : s.detail) device_windows |= k.rfind("device.busy.", 0) == 0;
  const size_t last = device_windows && steps.size() > skip + 1 ? steps.size() - 1 : steps.size();
  std::vector<double> walls;
  bool any_device = false;
  for (size_t i = 0; i < steps.size(); ++i) {
    if ((i >= skip || steps.size() <= skip) && (i < last || last <= skip))
      walls.push_back(steps[i].wall_ms);
    any_device |= device_busy_ms(steps[i]) > 0;
  }
  double median = 0;
  if (!walls.empty()) {
    std::nth_element(walls.begin(), walls.begin() + walls.size() / 2, walls.end());
    median = walls[walls.size() / 2];
    if (walls.size() % 2 == 0) {
      const double lower = *std::max_element(walls.begin(), walls.begin() + walls.size() / 2);
      median = 0.5 * (median + lower);
    }
  }
  auto stub = [&](const StepBreakdown& s) {
    return s.wall_ms < kStubFraction * median || (any_device && device_busy_ms(s) <= 0);
  };
  std::vector<const StepBreakdown*> out;
  for (size_t i = steps.size() > skip ? skip : 0; i < last; ++i) {
    if (!stub(steps[i])) out.push_back(&steps[i]);
  }
  // Only warm-up steps are real: take those rather than stubs; only stubs: take everything.
  if (out.empty()) {
    for (const StepBreakdown& s : steps)
      if (!stub(s)) out.push_back(&s);
  }
  if (out.empty()) {
    for (size_t i = steps.size() > skip ? skip : 0; i < steps.size(); ++i) out.push_back(&steps[i]);
  }
  return out;
}

void rank_findings(std::vector<Finding>* findings) {
  auto group = [](const Finding& f) {
    if (f.fatal) return -1;  // the run stopped on it: nothing else is fixed first
    if (f.cls == "loss" && f.severity != Severity::kInfo) return 0;
    return f.share > 0 ? 1 : 2;
  };
  std::stable_sort(findings->begin(), findings->end(), [&](const Finding& a, const Finding& b) {
    if (group(a) != group(b)) return group(a) < group(b);
    if (a.share != b.share) return a.share > b.share;
    return a.severity > b.severity;
  });
}

std::vector<Finding> find_issues(const Trace& trace, const std::vector<StepBreakdown>& all,
                                 const RunInfo& run, const LossHealth& loss,
                                 const FindingRules& r) {
  const rules::RuleContext ctx(trace, all, run, loss, r);
  std::vector<Finding> out;
  for (const RuleEntry& e : rule_entries()) e.fn(ctx, &out);
  rank_findings(&out);
  return out;
}

}  // namespace ft::profiler

namespace ft::profiler {

namespace {

// A wait class whose time the fix removes (or, for copies and collectives, hides behind the
// step's compute), and what that assumes.
struct Reduction {
  const char* cls;
  WaitClass wait;
  bool behind_compute;
  const char* assumes;
};
const Reduction kReductions[] = {
    {"data", WaitClass::kData, false,
     "the loader hands each batch over at once (enough workers to produce a batch within a "
     "step, prefetched)"},
    {"pcie", WaitClass::kPcie, true,
     "the copies come from page-locked memory on a side stream and overlap the step's "
     "compute at their measured rate; what exceeds the compute stays exposed"},
    {"memory", WaitClass::kMemory, false,
     "no allocator slow path or page fault inside the step (a warm caching allocator)"},
    {"sync", WaitClass::kSync, false,
     "the blocking read-backs leave the step, so the queue never drains for them"},
    {"host", WaitClass::kHost, false,
     "the device never waits for the host between launches (CUDA graphs / torch.compile "
     "reduce-overhead, or more work per launch)"},
    {"comm", WaitClass::kComm, true,
     "the collectives overlap the step's compute (bucketed during backward); what exceeds "
     "the compute stays exposed"},
};

}  // namespace

double host_lead_ms(const Trace& trace, const std::vector<const StepBreakdown*>& steady) {
  std::set<int64_t> wanted;
  for (const StepBreakdown* s : steady) wanted.insert(s->step);
  std::unordered_map<uint64_t, int64_t> launch_end;  // correlation id -> host call's end
  std::map<int64_t, const Event*> last;              // step -> its last-ending kernel
  for (const Event& e : trace.events) {
    if (e.phase != Phase::kSpan || e.id == 0) continue;
    if (!e.track.device) {
      if (e.category == Category::kHost) launch_end.emplace(e.id, e.end_ns());
    } else if (e.category == Category::kCompute && wanted.count(e.step)) {
      const Event*& l = last[e.step];
      if (!l || e.end_ns() > l->end_ns()) l = &e;
    }
  }
  double sum = 0;
  int counted = 0;
  for (const auto& [step, k] : last) {
    const auto it = launch_end.find(k->id);
    if (it == launch_end.end()) continue;
    sum += static_cast<double>(std::max<int64_t>(0, k->ts_ns - it->second)) / 1e6;
    ++counted;
  }
  return counted > 0 ? sum / counted : -1;
}

void predict_findings(const std::vector<const StepBreakdown*>& steady,
                      std::vector<Finding>* findings, double host_lead_ms) {
  if (steady.empty()) return;
  double step = 0;
  std::array<double, kNumWaitClasses> ms{};
  for (const StepBreakdown* s : steady) {
    step += s->wall_ms;
    for (int c = 0; c < kNumWaitClasses; ++c) ms[c] += s->ms[c];
  }
  const auto n = static_cast<double>(steady.size());
  step /= n;
  for (double& v : ms) v /= n;
  auto cls_ms = [&](WaitClass c) { return ms[static_cast<int>(c)]; };
  // Device-partitioned steps: faster kernels shorten the step only as far as the host is ahead
  // of the device (host_lead_ms); a CPU-bound host, whose kernels start as soon as they are
  // launched, would take as long.
  bool device_view = false;
  for (const StepBreakdown* s : steady)
    for (const auto& [k, v] : s->detail) device_view |= k.rfind("device.busy.", 0) == 0;
  const double compute = cls_ms(WaitClass::kCompute);
  for (Finding& f : *findings) {
    if (f.share <= 0 || !f.predictable) continue;
    double saving = -1;
    std::string assumes;
    // The finding's own recoverable time (a comm finding beside a straggler keeps only its
    // transfer part), at most its class's time.
    const double own = f.share * step;
    const Reduction* red = nullptr;
    for (const Reduction& r : kReductions)
      if (f.cls == r.cls) red = &r;
    if (red) {
      saving = std::min(own, cls_ms(red->wait));
      if (red->behind_compute) saving = std::min(saving, compute);
      assumes = red->assumes;
    } else if (f.cls == "parallel") {
      saving = std::min(own, step - compute);
      assumes = "the late rank arrives with the others, so no rank waits in its collectives";
    } else if (f.cls == "precision" || f.cls == "batch") {
      saving = std::min(own, compute);
      assumes = "the rule's estimate of the compute saved (" + f.cls + " finding)";
      if (device_view && host_lead_ms >= 0) {
        saving = std::min(saving, host_lead_ms);
        assumes += fmt::format(
            ", of which the step gains at most the host's lead over the device ({:.2f} ms/step: "
            "how long each step's last kernel waited in the queue after its launch)",
            host_lead_ms);
      }
    }
    if (saving < 0) continue;  // other: the cause is unknown
    f.predicted_step_ms = std::max(0.0, step - saving);
    f.prediction = fmt::format("{} (from {:.2f} ms, saving {:.2f} ms)", assumes, step, saving);
  }
}

}  // namespace ft::profiler
