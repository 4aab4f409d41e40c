// findings.cpp: rules that turn step breakdowns and run facts into ranked findings with ft knobs.
#include "ft/profiler/findings.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <set>

namespace ft::profiler {
namespace {

constexpr int kMaxEvidenceSteps = 12;

double cls_ms(const StepBreakdown& s, WaitClass c) { return s.ms[static_cast<int>(c)]; }

struct Totals {
  double wall = 0;
  std::array<double, kNumWaitClasses> ms{};
  std::map<std::string, double> detail;
};

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

// On a GPU run the device's time is what matters: while the training thread waits in a sync,
// the device is busy. When the steps carry the device split (deviceN.busy, deviceN.idle.<class>,
// classification.md section 2), the time findings of a live ft trace read it: compute = device
// busy, each wait class = the device idle time attributed to it (mean over the devices), so a
// finding's share is the device time its fix would recover. Imported Kineto traces keep the
// host view their rules were calibrated on.
bool device_view(const Totals& host, Totals* out) {
  std::set<std::string> devices;  // "device0." ...
  for (const auto& [k, v] : host.detail) {
    const size_t dot = k.find('.');
    if (k.rfind("device", 0) == 0 && dot != std::string::npos && k.substr(dot) == ".busy") {
      devices.insert(k.substr(0, dot + 1));
    }
  }
  if (devices.empty()) return false;
  Totals t;
  t.wall = host.wall;
  t.detail = host.detail;
  for (const std::string& dev : devices) {
    auto get = [&](const std::string& key) {
      const auto it = host.detail.find(dev + key);
      return it == host.detail.end() ? 0.0 : it->second;
    };
    t.ms[static_cast<int>(WaitClass::kCompute)] += get("busy");
    for (int c = 0; c < kNumWaitClasses; ++c) {
      if (c == static_cast<int>(WaitClass::kCompute)) continue;
      t.ms[c] += get(std::string("idle.") + wait_class_name(static_cast<WaitClass>(c)));
    }
    t.ms[static_cast<int>(WaitClass::kComm)] += get("idle.comm.sync");
  }
  for (double& v : t.ms) v /= static_cast<double>(devices.size());
  *out = std::move(t);
  return true;
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
  std::sort(hits.begin(), hits.end(),
            [](const Event* a, const Event* b) { return a->dur_ns > b->dur_ns; });
  std::vector<std::string> out;
  const auto name = trace.tracks.count(main) ? trace.tracks.at(main) : std::string("main");
  for (size_t i = 0; i < hits.size() && i < n; ++i) {
    out.push_back(fmt::format("{} {:.3f} ms at step {} (thread {})", trace.names.at(hits[i]->name),
                              hits[i]->dur_ns / 1e6, hits[i]->step, name));
  }
  return out;
}

Severity time_severity(double share, const FindingRules& r) {
  return share >= r.critical_share ? Severity::kCritical : Severity::kWarning;
}

int vector_bits_of_coretype(std::string core) {
  for (auto& ch : core) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  static const std::set<std::string> k512 = {"SKYLAKEX", "COOPERLAKE", "SAPPHIRERAPIDS"};
  static const std::set<std::string> k256 = {
      "HASWELL", "ZEN", "SANDYBRIDGE", "EXCAVATOR", "STEAMROLLER", "PILEDRIVER", "BULLDOZER"};
  if (k512.count(core)) return 512;
  if (k256.count(core)) return 256;
  return core.empty() ? 0 : 128;  // Prescott, Nehalem, Core2, Penryn, Atom, ...
}

int64_t meta_int(const Trace& trace, const char* key, int64_t fallback) {
  const auto it = trace.metadata.find(key);
  if (it == trace.metadata.end()) return fallback;
  char* end = nullptr;
  const long long v = std::strtoll(it->second.c_str(), &end, 10);
  return end != it->second.c_str() && *end == '\0' ? v : fallback;
}

// Across ranks (imported multi-rank traces, prepare_kineto_trace): the rank that arrives last
// at collectives makes every other rank wait; the share is that wait per waiting rank over the
// profiled steps' wall time.
void straggler_finding(std::vector<Finding>* out, const Trace& trace,
                       const std::vector<StepBreakdown>& all, const FindingRules& r) {
  const int64_t rank = meta_int(trace, "run.straggler_rank", -1);
  const int64_t ranks = meta_int(trace, "ranks", 1);
  const int64_t wait = meta_int(trace, "run.straggler_wait_ns", 0);
  double wall_ns = 0;
  for (const StepBreakdown& s : all) wall_ns += s.wall_ms * 1e6;
  if (rank < 0 || ranks < 2 || wait <= 0 || wall_ns <= 0) return;
  const double share = static_cast<double>(wait) / static_cast<double>(ranks - 1) / wall_ns;
  if (share <= r.comm_share / 2) return;
  const double transfer = static_cast<double>(meta_int(trace, "run.comm_transfer_ns", 0));
  const double sync = static_cast<double>(meta_int(trace, "run.comm_sync_ns", 0));
  Finding f;
  f.cls = "parallel";
  f.share = share;
  f.severity = time_severity(share, r);
  f.title =
      fmt::format("Rank {} arrives late at collectives ({:.1f}% of step time)", rank, 100 * share);
  f.explanation =
      "The other ranks wait inside their collectives until this rank joins. Balance its work "
      "(data, shapes, host load) or find what delays it.";
  f.evidence.share = share;
  f.evidence.detail = fmt::format(
      "last to arrive at {} of {} collectives; others waited {:.2f} ms in all; collective time "
      "across ranks: transfer {:.2f} ms, synchronizing {:.2f} ms ({:.0f}%)",
      meta_int(trace, "run.straggler_late", 0), meta_int(trace, "run.comm_collectives", 0),
      wait / 1e6, transfer / 1e6, sync / 1e6,
      transfer + sync > 0 ? 100 * sync / (transfer + sync) : 0.0);
  out->push_back(std::move(f));
}

void add_time_finding(std::vector<Finding>* out, const Trace& trace,
                      const std::vector<const StepBreakdown*>& steps, const Totals& t, WaitClass c,
                      double threshold, const FindingRules& r, std::string title,
                      std::string explanation, std::vector<std::string> knobs, std::string detail) {
  const double share = t.wall > 0 ? t.ms[static_cast<int>(c)] / t.wall : 0;
  if (share <= threshold) return;
  Finding f;
  f.cls = wait_class_name(c);
  f.share = share;
  f.severity = time_severity(share, r);
  f.title = fmt::format("{} ({:.1f}% of step time)", title, 100 * share);
  f.explanation = std::move(explanation);
  f.evidence.steps = steps_with(steps, c, threshold);
  f.evidence.share = share;
  f.evidence.examples = example_spans(trace, c, steps, 3);
  f.evidence.detail = std::move(detail);
  f.knobs = std::move(knobs);
  out->push_back(std::move(f));
}

// The knob that moves batches through page-locked memory on an async copy stream.
std::vector<std::string> pinned_knobs(const Trace& trace, const RunInfo& run) {
  if (trace.source.rfind("kineto", 0) == 0) {  // a PyTorch run
    return {"DataLoader(pin_memory=True)", "tensor.to(device, non_blocking=True)"};
  }
  if (!run.h2d.empty() || trace.source.rfind("ft", 0) == 0) return {"--h2d pinned", "--prefetch 2"};
  return {"page-locked (pinned) host buffers for copies", "--prefetch 2"};
}

// Nsight Systems rules: async copies from pageable memory, synchronous copies over 64 KB.
void copy_findings(std::vector<Finding>* out, const Trace& trace, const RunInfo& run,
                   const FindingRules& r) {
  struct Tally {
    int count = 0;
    uint64_t bytes = 0;
    int64_t ns = 0;
    std::vector<std::string> examples;
  } pageable, sync;
  auto add = [&](Tally& t, const Event& ev) {
    ++t.count;
    t.bytes += ev.bytes;
    t.ns += ev.dur_ns;
    if (t.examples.size() < 3) {
      t.examples.push_back(fmt::format("{} {} bytes {:.3f} ms at step {}", trace.names.at(ev.name),
                                       ev.bytes, ev.dur_ns / 1e6, ev.step));
    }
  };
  // A copy seen on the device is counted there only (its API call carries the same flags).
  bool device_copies = false;
  for (const Event& ev : trace.events) {
    device_copies |=
        ev.track.device && (ev.category == Category::kH2D || ev.category == Category::kD2H);
  }
  for (const Event& ev : trace.events) {
    if (ev.phase != Phase::kSpan ||
        (ev.category != Category::kH2D && ev.category != Category::kD2H) ||
        (device_copies && !ev.track.device)) {
      continue;
    }
    if ((ev.flags & kPageable) && !(ev.flags & kSynchronous)) add(pageable, ev);
    // Nsight: synchronous memcpy, except H2D <= 64 KB.
    if ((ev.flags & kSynchronous) &&
        (ev.category == Category::kD2H || ev.bytes > r.sync_copy_bytes)) {
      add(sync, ev);
    }
  }
  auto emit = [&](const Tally& t, std::string title, std::string why,
                  std::vector<std::string> knobs) {
    if (t.count == 0) return;
    Finding f;
    f.cls = "pcie";
    f.severity = Severity::kWarning;
    f.title = std::move(title);
    f.explanation = std::move(why);
    f.evidence.examples = t.examples;
    f.evidence.detail = fmt::format("{} copies, {} bytes, {:.3f} ms", t.count, t.bytes, t.ns / 1e6);
    f.knobs = std::move(knobs);
    out->push_back(std::move(f));
  };
  emit(pageable, fmt::format("{} asynchronous copies from pageable memory", pageable.count),
       "An asynchronous copy from pageable memory is staged through a driver buffer and runs "
       "synchronously (Nsight Systems rule).",
       pinned_knobs(trace, run));
  emit(sync,
       fmt::format("{} synchronous copies (D2H, or H2D over {} KB)", sync.count,
                   r.sync_copy_bytes / 1024),
       "Synchronous copies block the host until the device is done (Nsight Systems rule: "
       "synchronous memcpy except H2D <= 64 KB).",
       {"asynchronous copies on a side stream", "--prefetch 2"});
}

}  // namespace

std::vector<const StepBreakdown*> steady_steps(const std::vector<StepBreakdown>& steps,
                                               const RunInfo& run) {
  std::vector<const StepBreakdown*> out;
  const size_t skip = static_cast<size_t>(std::max(0, run.warmup_excluded));
  for (size_t i = steps.size() > skip ? skip : 0; i < steps.size(); ++i) out.push_back(&steps[i]);
  return out;
}

void rank_findings(std::vector<Finding>* findings) {
  auto group = [](const Finding& f) {
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
  std::vector<Finding> out;
  const auto steps = steady_steps(all, run);
  Totals t = totals_of(steps);
  Totals device;
  // ft's own runs ("ft", "ft-diagnose run"): on a GPU, findings read device time.
  if (trace.source.rfind("ft", 0) == 0 && device_view(t, &device)) t = std::move(device);
  const double n = std::max<size_t>(steps.size(), 1);
  auto d = [&](const char* key) { return t.detail.count(key) ? t.detail.at(key) : 0.0; };
  auto share = [&](WaitClass c) { return t.wall > 0 ? t.ms[static_cast<int>(c)] / t.wall : 0.0; };

  // Data: the loader is on the training thread's critical path.
  {
    const double data_ms = t.ms[static_cast<int>(WaitClass::kData)] / n;
    const double rest_ms = (t.wall - t.ms[static_cast<int>(WaitClass::kData)]) / n;
    const int cores = std::max(1, run.logical_cpus);
    int workers = static_cast<int>(std::ceil(data_ms / std::max(rest_ms, 1e-3))) + 1;
    if (run.loader_workers > 0) workers = std::max(workers, 2 * run.loader_workers);
    workers = std::clamp(workers, 1, cores);
    std::vector<std::string> knobs = {fmt::format("--loader-workers {}", workers), "--prefetch 2"};
    // Workers that spend less time producing a step's batches than the training thread spends
    // waiting for them: the wait is the hand-off (queue, wake-up, a cold batch), not the work,
    // and producing in-line costs less. Underfilled scenario, Zen 5: 1 worker waited 0.06 ms of
    // a 1.1 ms step; --loader-workers 0 ran 1.037x (11 alternating rounds, 10 faster).
    const bool handoff =
        run.loader_workers > 0 && run.data_produce_ms >= 0 && run.data_produce_ms < data_ms;
    if (handoff) knobs.insert(knobs.begin(), "--loader-workers 0");
    if (trace.source.rfind("kineto", 0) == 0) {  // a PyTorch run: the DataLoader's own knobs
      knobs = {fmt::format("DataLoader(num_workers={})", workers),
               "DataLoader(pin_memory=True, prefetch_factor=2)"};
    }
    add_time_finding(
        &out, trace, steps, t, WaitClass::kData, r.data_share, r,
        "The training thread waits for data",
        handoff ? fmt::format("Each step spends {:.2f} ms waiting for batches that take the loader "
                              "workers only {:.2f} ms to produce: the wait is the hand-off between "
                              "threads, so producing batches in-line on the training thread "
                              "costs less; with more work per batch, more workers hide it.",
                              data_ms, run.data_produce_ms)
                : fmt::format("Each step spends {:.2f} ms producing or waiting for batches on the "
                              "training thread. Worker threads that prepare batches ahead of time "
                              "hide this behind compute.",
                              data_ms),
        knobs,
        fmt::format(
            "data {:.2f} ms/step (preprocess {:.2f}, wait {:.2f}); rest of step {:.2f} ms; "
            "loader workers now {}{}",
            data_ms, d("data.preprocess") / n, d("data.wait") / n, rest_ms,
            run.loader_workers < 0 ? std::string("unknown") : std::to_string(run.loader_workers),
            run.data_produce_ms >= 0
                ? fmt::format("; batches take {:.2f} ms/step to produce", run.data_produce_ms)
                : std::string()));
  }
  // Memory: allocator slow path, retries, OOM handling and first-touch page faults.
  {
    std::vector<std::string> knobs;
    if (!run.allocator_caching) knobs.push_back("--allocator-caching true");
    if (run.alloc_retries > 0 || run.ooms > 0) {
      knobs.push_back(
          run.memory_limit > 0
              ? fmt::format("--memory-limit {}M",
                            static_cast<long>(std::ceil(run.memory_limit * 1.5 / 1048576)))
              : "--memory-limit (raise it)");
      if (run.checkpoint != "block") knobs.push_back("--checkpoint block");
    }
    if (knobs.empty()) knobs.push_back("--allocator-caching true");
    const double faults = d("page_faults.count") / n;
    add_time_finding(
        &out, trace, steps, t, WaitClass::kMemory, r.memory_share, r,
        "Memory management stalls the step",
        fmt::format("Each step spends {:.2f} ms in the allocator or touching freshly mapped pages "
                    "({:.0f} minor page faults per step). A caching allocator that keeps freed "
                    "memory, and enough budget that it need not flush and retry, touches each "
                    "page once per run instead of once per step.",
                    t.ms[static_cast<int>(WaitClass::kMemory)] / n, faults),
        knobs,
        fmt::format("page faults {:.0f}/step costing {:.2f} ms/step; allocator {:.2f} ms/step, "
                    "retries {}, OOMs {}, segments mapped {} / unmapped {}; caching {}",
                    faults, d("memory.page_faults") / n, d("memory.allocator") / n,
                    run.alloc_retries, run.ooms, run.segment_maps, run.segment_unmaps,
                    run.allocator_caching ? "on" : "off"));
  }
  add_time_finding(
      &out, trace, steps, t, WaitClass::kComm, r.comm_share, r, "Communication is exposed",
      "Collectives run on the critical path instead of overlapping with compute. "
      "Fewer, larger all-reduces (more accumulation) amortise them.",
      {fmt::format("--grad-accum {}", std::max(2, 2 * run.grad_accum))},
      fmt::format("comm transfer {:.2f} ms/step, waiting for other ranks {:.2f} ms/step",
                  d("comm.transfer") / n, d("comm.wait") / n));
  {
    // Pageable copies (or a run configured --h2d pageable): the pinned async path is the knob.
    const bool pageable = d("pcie.pageable") > 0 || run.h2d == "pageable";
    std::vector<std::string> knobs = {"--prefetch 2"};
    if (pageable) knobs = pinned_knobs(trace, run);
    add_time_finding(
        &out, trace, steps, t, WaitClass::kPcie, r.pcie_share, r, "Host-device copies are exposed",
        pageable ? "Copies from pageable host memory block the host and run after the "
                   "compute they could overlap. Page-locked staging buffers copied on "
                   "a separate stream let batch k+1 travel while batch k computes."
                 : "Copies between host and device block the step. Pinned buffers and "
                   "prefetching let them overlap with compute.",
        knobs,
        fmt::format("pageable copies {:.2f} ms/step of {:.2f}; device idle on copies "
                    "{:.2f} ms/step",
                    d("pcie.pageable") / n, t.ms[static_cast<int>(WaitClass::kPcie)] / n,
                    device_idle(t, "pcie") / n));
  }
  copy_findings(&out, trace, run, r);
  straggler_finding(&out, trace, all, r);
  add_time_finding(
      &out, trace, steps, t, WaitClass::kSync, r.sync_share, r,
      "The training thread waits on synchronisation",
      "Explicit synchronisation serialises host and device work.", {},
      fmt::format("sync {:.2f} ms/step", t.ms[static_cast<int>(WaitClass::kSync)] / n));
  add_time_finding(
      &out, trace, steps, t, WaitClass::kHost, r.host_share, r, "Host/launch overhead",
      "Host-side bookkeeping between kernels is significant.",
      {fmt::format("--micro-batch {}", std::max(2, 2 * run.micro_batch))},
      fmt::format("host {:.2f} ms/step", t.ms[static_cast<int>(WaitClass::kHost)] / n));
  add_time_finding(
      &out, trace, steps, t, WaitClass::kOther, r.other_share, r,
      "Time outside any annotated phase",
      "Part of the step is covered by no range, so its cause is unknown.", {},
      fmt::format("other {:.2f} ms/step", t.ms[static_cast<int>(WaitClass::kOther)] / n));
  // Precision: compute-bound in fp32.
  const double compute = share(WaitClass::kCompute);
  if (run.precision == "fp32" && compute >= r.compute_bound_share) {
    Finding f;
    f.cls = "precision";
    f.share = compute * (1.0 - 1.0 / r.bf16_speedup);
    f.severity = Severity::kWarning;
    f.title = fmt::format("Compute-bound in fp32 ({:.0f}% of step time is compute)", 100 * compute);
    f.explanation =
        "The step is dominated by fp32 compute. bf16 GEMM operands with fp32 accumulation and fp32 "
        "master weights halve the bytes moved and use the CPU's bf16 units (AMX / AVX512-BF16).";
    f.evidence.steps = steps_with(steps, WaitClass::kCompute, r.compute_bound_share);
    f.evidence.share = compute;
    f.evidence.examples = example_spans(trace, WaitClass::kCompute, steps, 3);
    f.evidence.detail = fmt::format(
        "compute {:.2f} ms/step of {:.2f}; MFU {}; recoverable share assumes a {:.1f}x bf16 "
        "speed-up",
        t.ms[static_cast<int>(WaitClass::kCompute)] / n, t.wall / n,
        run.mfu >= 0 ? fmt::format("{:.1f}%", 100 * run.mfu) : "unknown", r.bf16_speedup);
    f.knobs = {"--precision bf16"};
    out.push_back(std::move(f));
  }
  // Batch: small micro-batches with memory headroom and low MFU.
  const int tokens = run.micro_batch * run.seq_len;
  const double capacity = run.memory_limit > 0 ? run.memory_limit : run.memory_capacity;
  const bool headroom = run.mem_peak > 0 && capacity > 0 && 2 * run.mem_peak <= capacity;
  if (tokens > 0 && tokens <= r.underfilled_tokens && run.mfu >= 0 && run.mfu < r.underfilled_mfu &&
      headroom) {
    Finding f;
    f.cls = "batch";
    f.share = 0.5 * compute * (1.0 - run.mfu / r.underfilled_mfu);
    f.severity = Severity::kWarning;
    f.title =
        fmt::format("Micro-batch under-filled ({} tokens, MFU {:.1f}%)", tokens, 100 * run.mfu);
    f.explanation =
        "Each micro-batch is too small to keep the GEMMs efficient, and memory has room for a "
        "larger one. Doubling the micro-batch and halving accumulation keeps the global batch "
        "(and so the loss curve) the same while each GEMM does twice the work per call.";
    f.evidence.steps = steps_with(steps, WaitClass::kCompute, 0.0);
    f.evidence.share = compute;
    f.evidence.detail = fmt::format(
        "micro-batch {} x seq {} = {} tokens; peak memory {:.1f} MiB of "
        "{:.1f} MiB available; MFU {:.2f}%",
        run.micro_batch, run.seq_len, tokens, run.mem_peak / 1048576, capacity / 1048576,
        100 * run.mfu);
    if (run.grad_accum >= 2) {
      f.knobs = {fmt::format("--micro-batch {} --grad-accum {}", 2 * run.micro_batch,
                             std::max(1, run.grad_accum / 2))};
    } else {
      f.knobs = {fmt::format("--micro-batch {} (doubles the global batch: revisit --lr)",
                             2 * run.micro_batch)};
    }
    out.push_back(std::move(f));
  }
  // Loss stability.
  if (loss.verdict != "healthy" && loss.verdict != "unknown" && !loss.verdict.empty()) {
    Finding f;
    f.cls = "loss";
    f.severity = loss.has_nan || loss.diverged ? Severity::kCritical : Severity::kWarning;
    f.title = fmt::format("Loss curve is {} ({} spikes, oscillation {:.3f})", loss.verdict,
                          loss.spikes, loss.oscillation);
    f.explanation =
        "The loss does not fall steadily: the learning rate is too high for this early phase of "
        "training. A linear warmup, a lower peak LR and gradient clipping steady it.";
    for (const StepBreakdown* s : steps) {
      if (!std::isnan(s->loss)) f.evidence.steps.push_back(s->step);
      if (f.evidence.steps.size() >= kMaxEvidenceSteps) break;
    }
    std::string series;
    for (size_t i = 0; i < all.size() && i < 16; ++i) series += fmt::format(" {:.3f}", all[i].loss);
    f.evidence.detail = fmt::format("loss:{}{}; lr {} warmup {} clip {}", series,
                                    all.size() > 16 ? " ..." : "", run.lr, run.warmup, run.clip);
    const int warm = std::max(10, run.steps / 10);
    if (run.warmup >= 0 && run.warmup < warm) f.knobs.push_back(fmt::format("--warmup {}", warm));
    // A spike or divergence at the peak LR means the LR sits well above the stability edge:
    // cut it by 30 (measured: a spike at lr 0.01 after warmup, none at 0.005 or 0.0033,
    // on the scenario model); oscillation needs less.
    const double lr_cut = loss.verdict == "oscillating" ? 3 : 30;
    if (run.lr > 0) f.knobs.push_back(fmt::format("--lr {:.3g}", run.lr / lr_cut));
    if (run.clip <= 0 || run.clip > 1) f.knobs.push_back("--clip 1.0");
    if (f.knobs.empty()) f.knobs.push_back("--lr (lower it)");
    out.push_back(std::move(f));
  }
  // Environment.
  auto env_finding = [&](Severity sev, std::string title, std::string why, std::string detail,
                         std::vector<std::string> knobs) {
    Finding f;
    f.cls = "environment";
    f.severity = sev;
    f.title = std::move(title);
    f.explanation = std::move(why);
    f.evidence.detail = std::move(detail);
    f.knobs = std::move(knobs);
    out.push_back(std::move(f));
  };
  if (run.env_vars.count("OPENBLAS_CORETYPE") && run.cpu_vector_bits > 0) {
    const std::string core = run.env_vars.at("OPENBLAS_CORETYPE");
    const int bits = vector_bits_of_coretype(core);
    if (bits > 0 && bits < run.cpu_vector_bits) {
      const bool uses = run.gemm_library.find("OpenBLAS") != std::string::npos;
      env_finding(
          uses ? Severity::kWarning : Severity::kInfo,
          fmt::format("OPENBLAS_CORETYPE={} forces {}-bit kernels on a {}-bit CPU", core, bits,
                      run.cpu_vector_bits),
          uses ? "OpenBLAS GEMMs run at a fraction of the CPU's vector width."
               : "ft's GEMMs do not use OpenBLAS, but anything else in the process "
                 "(NumPy, PyTorch) runs its GEMMs at a fraction of the vector width.",
          fmt::format("GEMM: {}", run.gemm_library),
          {run.cpu_vector_bits >= 512 ? "OPENBLAS_CORETYPE=SkylakeX" : "unset OPENBLAS_CORETYPE"});
    }
  }
  if (const auto pos = run.gemm_library.find("max ISA avx2");
      pos != std::string::npos && run.cpu_vector_bits >= 512) {
    env_finding(Severity::kWarning, "oneDNN is limited to AVX2 on an AVX-512 CPU",
                "oneDNN's GEMMs dispatch to 256-bit kernels (ONEDNN_MAX_CPU_ISA?).",
                fmt::format("GEMM: {}", run.gemm_library), {"unset ONEDNN_MAX_CPU_ISA"});
  }
  if (run.threads > 0 && run.logical_cpus > 0) {
    const double busy = std::max(0.0, run.load_average);
    const int free_cores = std::max(1, static_cast<int>(std::lround(run.logical_cpus - busy)));
    if (run.threads > run.logical_cpus || (run.load_average >= 0 && run.threads > free_cores)) {
      env_finding(Severity::kWarning,
                  fmt::format("{} threads for {} free cores ({} logical, load average {:.2f})",
                              run.threads, free_cores, run.logical_cpus, busy),
                  "More compute threads than free cores: OpenMP barriers wait for descheduled "
                  "threads, which can cost a scheduler quantum per parallel region.",
                  fmt::format("threads {}, logical CPUs {}, 1-min load before the run {:.2f}",
                              run.threads, run.logical_cpus, busy),
                  {fmt::format("--threads {}", free_cores), "OMP_WAIT_POLICY=passive"});
    }
  }
  const double per_step_unmaps =
      run.steps > 0 ? static_cast<double>(run.segment_unmaps) / run.steps : 0.0;
  if (!run.allocator_caching || per_step_unmaps >= 1.0) {
    env_finding(Severity::kWarning, "The allocator returns memory to the OS every step",
                "Freed memory goes back to the OS, so every step maps and faults in fresh pages.",
                fmt::format("{} segments unmapped over {} steps; caching {}", run.segment_unmaps,
                            run.steps, run.allocator_caching ? "on" : "off"),
                {"--allocator-caching true"});
  }
  // Allocator overhang (TraceML) and memory near capacity (TensorBoard plugin).
  if (run.mem_peak > 0 && run.mem_reserved_peak >= r.reserved_over_allocated * run.mem_peak) {
    Finding f;
    f.cls = "memory";
    f.severity = Severity::kInfo;
    f.title = fmt::format("Reserved memory is {:.1f}x the peak allocated",
                          run.mem_reserved_peak / run.mem_peak);
    f.explanation = "The allocator holds much more than the run uses (fragmentation or overhang).";
    f.evidence.detail = fmt::format("peak allocated {:.1f} MiB, peak reserved {:.1f} MiB",
                                    run.mem_peak / 1048576, run.mem_reserved_peak / 1048576);
    f.knobs = {"--memory-limit (cap the cache)"};
    out.push_back(std::move(f));
  }
  if (run.mem_reserved_peak > 0 && capacity > 0 &&
      run.mem_reserved_peak > r.memory_capacity_frac * capacity) {
    Finding f;
    f.cls = "memory";
    f.severity = Severity::kWarning;
    f.title = fmt::format("Memory at {:.0f}% of capacity", 100 * run.mem_reserved_peak / capacity);
    f.explanation =
        "Peak reserved memory is close to the budget: the allocator will flush and "
        "retry, or run out.";
    f.evidence.detail = fmt::format("peak reserved {:.1f} MiB of {:.1f} MiB",
                                    run.mem_reserved_peak / 1048576, capacity / 1048576);
    f.knobs = {"--checkpoint block",
               fmt::format("--micro-batch {}", std::max(1, run.micro_batch / 2))};
    out.push_back(std::move(f));
  }
  rank_findings(&out);
  return out;
}

}  // namespace ft::profiler
