// rules_time.cpp: the diagnosis rules on shares of step time, one function per wait class (data,
// memory, comm, pcie, sync, host, other), each with its knobs.
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <map>
#include <set>
#include <string>
#include <utility>

#include "ft/profiler/classifier.h"
#include "rules.h"

namespace ft::profiler::rules {

// The loader is on the training thread's critical path.
void data_rule(const RuleContext& ctx, std::vector<Finding>* out) {
  {
    const double data_ms = ctx.ms_per_step(WaitClass::kData);
    const double rest_ms = (ctx.t.wall - ctx.t.ms[static_cast<int>(WaitClass::kData)]) / ctx.n;
    const int cores = std::max(1, ctx.run.logical_cpus);
    int workers = static_cast<int>(std::ceil(data_ms / std::max(rest_ms, 1e-3))) + 1;
    if (ctx.run.loader_workers > 0) workers = std::max(workers, 2 * ctx.run.loader_workers);
    // Workers share the cores with the training thread's compute threads: on 2 cores with one
    // compute thread, a second worker only takes time from it (data scenario, Zen 3: 2 workers
    // made each step 1.0-1.45x the compute, 1 worker left it alone).
    // The cores bound the workers only where the trace records them (ft's runs); an imported
    // PyTorch trace does not, so the workers that would hide the wait are named as they are,
    // with the bound said in words (a slow DataLoader on 8 cores: 0 workers 45.5 ms/step, 1
    // worker 40.9 ms, 7 workers 7.3 ms; a cap of one core named the useless 1).
    const bool cores_known = ctx.run.logical_cpus > 0;
    const int free_cores = ctx.run.threads > 0 ? std::max(1, cores - ctx.run.threads) : cores;
    workers = cores_known ? std::clamp(workers, 1, free_cores) : std::max(workers, 1);
    // A deeper queue absorbs jitter between worker threads and the step; an in-line loader
    // (no workers) has no queue, so the depth changes nothing there (data-bound scenario, Zen 4:
    // --prefetch 2 in-line ran x1.015, within noise).
    std::vector<std::string> knobs = {fmt::format("--loader-workers {}", workers)};
    if (ctx.run.loader_workers > 0 && ctx.run.prefetch > 0) {
      knobs.push_back(fmt::format("--prefetch {}", 2 * ctx.run.prefetch));
    }
    // Workers that spend less time producing a step's batches than the training thread spends
    // waiting for them: the wait is the hand-off (queue, wake-up, a cold batch), not the work,
    // and producing in-line costs less. Underfilled scenario, Zen 5: 1 worker waited 0.06 ms of
    // a 1.1 ms step; --loader-workers 0 ran 1.037x (11 alternating rounds, 10 faster).
    const bool handoff = ctx.run.loader_workers > 0 && ctx.run.data_produce_ms >= 0 &&
                         ctx.run.data_produce_ms < data_ms;
    if (handoff) knobs.insert(knobs.begin(), "--loader-workers 0");
    if (is_pytorch(ctx.trace)) {  // a PyTorch run: the DataLoader's own knobs
      knobs = {fmt::format("DataLoader(num_workers={})", workers),
               "DataLoader(pin_memory=True, prefetch_factor=2)"};
    }
    // What the first knob recovers. Producing a step's batches takes `work` ms of one thread:
    // the in-line loader's data time, or the workers' recorded production. N workers, each on a
    // core of its own, produce them in work / N while the training thread runs the rest of the
    // step, so the step becomes max(rest, work / N); in-line production (the hand-off knob)
    // makes it rest + work. Unknown work (a trace without the loader's facts) keeps the whole
    // data time as the saving. Data-bound scenario, Zen 4: 1 worker (the cores allow one beside
    // the compute thread) for 5.66 ms of work over a 4.95 ms rest: predicted 5.66, ran 5.56.
    double work = -1;
    if (ctx.run.loader_workers == 0) work = data_ms;
    if (ctx.run.loader_workers > 0 && ctx.run.data_produce_ms >= 0) {
      work = ctx.run.data_produce_ms;
    }
    double after = -1;  // the step predicted with the first knob; -1: the data time removed
    std::string model;
    if (handoff) {
      after = rest_ms + work;
      model = fmt::format("; in-line production predicts {:.2f} + {:.2f} ms", rest_ms, work);
    } else if (work >= 0) {
      after = std::max(rest_ms, work / workers);
      model = fmt::format("; {} workers predict max(rest {:.2f}, {:.2f} / {}) = {:.2f} ms", workers,
                          rest_ms, work, workers, after);
    }
    const size_t before = out->size();
    add_time_finding(
        ctx, out, WaitClass::kData, ctx.r.data_share, "The training thread waits for data",
        handoff ? fmt::format("Each step spends {:.2f} ms waiting for batches that take the loader "
                              "workers only {:.2f} ms to produce: the wait is the hand-off between "
                              "threads, so producing batches in-line on the training thread "
                              "costs less; with more work per batch, more workers hide it.",
                              data_ms, ctx.run.data_produce_ms)
                : fmt::format("Each step spends {:.2f} ms producing or waiting for batches on the "
                              "training thread. Worker threads that prepare batches ahead of time "
                              "hide this behind compute.",
                              data_ms),
        knobs,
        fmt::format(
            "data {:.2f} ms/step (preprocess {:.2f}, wait {:.2f}); rest of step {:.2f} ms; "
            "loader workers now {}{}{}",
            data_ms, ctx.detail("data.preprocess") / ctx.n, ctx.detail("data.wait") / ctx.n,
            rest_ms,
            ctx.run.loader_workers < 0 ? std::string("unknown")
                                       : std::to_string(ctx.run.loader_workers),
            ctx.run.data_produce_ms >= 0
                ? fmt::format("; batches take {:.2f} ms/step to produce", ctx.run.data_produce_ms)
                : std::string(),
            cores_known ? std::string()
                        : fmt::format("; {} workers = data / rest of step + 1, at most the cores "
                                      "the job can spare (the trace does not record its cores)",
                                      workers)) +
            model);
    if (out->size() > before && after >= 0) {
      Finding& f = out->back();
      const double step_ms = ctx.t.wall / ctx.n;
      f.share = std::clamp((step_ms - after) / std::max(step_ms, 1e-9), 0.0, f.share);
      if (!handoff && after >= step_ms) {
        f.explanation += fmt::format(
            " Here the cores leave room for {} worker(s), which need {:.2f} ms to produce a "
            "step's batches: more workers would not shorten the step; less work per batch would.",
            workers, work / workers);
      }
    }
  }
}

// Allocator slow path, retries, OOM handling and first-touch page faults.
void memory_time_rule(const RuleContext& ctx, std::vector<Finding>* out) {
  {
    std::vector<std::string> knobs;
    if (!ctx.run.allocator_caching) knobs.push_back("--allocator-caching true");
    // 4 KiB pages take 512 faults per 2 MiB where a huge page takes one (docs/classification.md).
    if (!ctx.run.allocator_huge_pages) knobs.push_back("--allocator-huge-pages true");
    if (ctx.run.alloc_retries > 0 || ctx.run.ooms > 0) {
      knobs.push_back(
          ctx.run.memory_limit > 0
              ? fmt::format("--memory-limit {}M",
                            static_cast<long>(std::ceil(ctx.run.memory_limit * 1.5 / 1048576)))
              : "--memory-limit (raise it)");
      if (ctx.run.checkpoint != "block") knobs.push_back("--checkpoint block");
    }
    if (knobs.empty()) knobs.push_back("--allocator-caching true");
    if (is_pytorch(ctx.trace)) {  // PyTorch's caching allocator: keep it warm, let it grow
      knobs = {"no torch.cuda.empty_cache() between steps (a cold cache pays cudaMalloc again)",
               "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"};
    }
    const double faults = ctx.detail("page_faults.count") / ctx.n;
    add_time_finding(
        ctx, out, WaitClass::kMemory, ctx.r.memory_share, "Memory management stalls the step",
        fmt::format("Each step spends {:.2f} ms in the allocator or touching freshly mapped pages "
                    "({:.0f} minor page faults per step). A caching allocator that keeps freed "
                    "memory, and enough budget that it need not flush and retry, touches each "
                    "page once per run instead of once per step.",
                    ctx.ms_per_step(WaitClass::kMemory), faults),
        knobs,
        is_pytorch(ctx.trace)
            ? fmt::format("allocator calls (cudaMalloc / cudaFree) {:.2f} ms/step",
                          ctx.ms_per_step(WaitClass::kMemory))
            : fmt::format("page faults {:.0f}/step costing {:.2f} ms/step; allocator {:.2f} "
                          "ms/step, retries {}, OOMs {}, segments mapped {} / unmapped {}; "
                          "caching {}, huge pages {}",
                          faults, ctx.detail("memory.page_faults") / ctx.n,
                          ctx.detail("memory.allocator") / ctx.n, ctx.run.alloc_retries,
                          ctx.run.ooms, ctx.run.segment_maps, ctx.run.segment_unmaps,
                          ctx.run.allocator_caching ? "on" : "off",
                          ctx.run.allocator_huge_pages ? "on" : "off"));
  }
}

// Collectives on the critical path.
void comm_rule(const RuleContext& ctx, std::vector<Finding>* out) {
  std::vector<std::string> knobs = {
      fmt::format("--grad-accum {}", std::max(2, 2 * ctx.run.grad_accum))};
  if (is_pytorch(ctx.trace)) {  // DDP's own knobs
    knobs = {"DistributedDataParallel(bucket_cap_mb=50)",
             "gradient accumulation under DistributedDataParallel.no_sync()"};
  }
  // Waiting for a rank that arrives late is the straggler finding's time (rules_run.cpp), and
  // bucket sizes do not shorten it: only the transfer part is left here.
  // Waiting for late ranks: the device's "comm sync" idle when the step is partitioned on a
  // device (the busiest device's), else the training thread's comm.wait.
  bool device_view = false;
  std::map<std::string, double> device_sync;
  for (const StepBreakdown* s : ctx.steps) {
    for (const auto& [k, v] : s->detail) {
      device_view |= k.rfind("device.busy.", 0) == 0;
      if (k.rfind("device", 0) == 0 && k.ends_with(".idle.comm.sync")) device_sync[k] += v;
    }
  }
  double sync_ms = 0;
  for (const auto& [k, v] : device_sync) sync_ms = std::max(sync_ms, v);
  const double wait_ms = (device_view ? sync_ms : ctx.detail("comm.wait")) / ctx.n;
  const double transfer_ms = device_view
                                 ? std::max(0.0, ctx.ms_per_step(WaitClass::kComm) - wait_ms)
                                 : ctx.detail("comm.transfer") / ctx.n;
  const int64_t straggler = meta_int(ctx.trace, "run.straggler_rank", -1);
  if (straggler >= 0 && straggler != meta_int(ctx.trace, "rank", -1) && wait_ms > transfer_ms) {
    const double comm_ms = ctx.ms_per_step(WaitClass::kComm);
    const double step_ms = comm_ms / std::max(ctx.share(WaitClass::kComm), 1e-12);
    const double share = std::max(0.0, comm_ms - wait_ms) / std::max(step_ms, 1e-12);
    if (share <= ctx.r.comm_share) return;
    Finding f;
    f.cls = "comm";
    f.share = share;
    f.severity = time_severity(share, ctx.r);
    f.title = fmt::format(
        "Communication is exposed beyond the wait for rank {} ({:.1f}% of step "
        "time)",
        straggler, 100 * share);
    f.explanation =
        "Besides waiting for the late rank, collectives run on the critical path "
        "instead of overlapping with compute.";
    f.evidence.share = share;
    f.evidence.detail =
        fmt::format("comm transfer {:.2f} ms/step, waiting for other ranks {:.2f} ms/step",
                    transfer_ms, wait_ms);
    f.knobs = knobs;
    out->push_back(std::move(f));
    return;
  }
  // One rank of many: how much of a collective waits for the others cannot be told.
  int64_t world = 0;
  for (const auto& [k, v] : ctx.trace.metadata) {
    if (k.ends_with(".distributed.world_size"))
      world = std::max<int64_t>(world, std::atoll(v.c_str()));
  }
  const int64_t ranks = meta_int(ctx.trace, "ranks", 1);
  if (world > ranks && wait_ms == 0) {
    add_time_finding(
        ctx, out, WaitClass::kComm, ctx.r.comm_share, "Communication is exposed",
        fmt::format("Collectives run on the critical path instead of overlapping with compute. "
                    "The trace holds {} of the job's {} ranks, so how much of that time is "
                    "waiting for the other ranks (a straggler) rather than transfer is unknown: "
                    "profile all ranks, or several, to split them.",
                    ranks, world),
        knobs,
        fmt::format("comm {:.2f} ms/step (transfer and waiting not separable: {} of {} ranks "
                    "traced)",
                    ctx.ms_per_step(WaitClass::kComm), ranks, world));
    return;
  }
  add_time_finding(
      ctx, out, WaitClass::kComm, ctx.r.comm_share, "Communication is exposed",
      "Collectives run on the critical path instead of overlapping with compute. "
      "Fewer, larger all-reduces (more accumulation) amortise them.",
      knobs,
      fmt::format("comm transfer {:.2f} ms/step, waiting for other ranks {:.2f} ms/step",
                  transfer_ms, wait_ms));
}

// Exposed host-device copies; pageable ones name the pinned async path.
void pcie_rule(const RuleContext& ctx, std::vector<Finding>* out) {
  {
    // Pageable copies (or a run configured --h2d pageable): the pinned async path is the knob.
    const bool pageable = ctx.detail("pcie.pageable") > 0 || ctx.run.h2d == "pageable";
    std::vector<std::string> knobs = {"--prefetch 2"};
    if (pageable) knobs = pinned_knobs(ctx.trace, ctx.run);
    add_time_finding(
        ctx, out, WaitClass::kPcie, ctx.r.pcie_share, "Host-device copies are exposed",
        pageable ? "Copies from pageable host memory block the host and run after the "
                   "compute they could overlap. Page-locked staging buffers copied on "
                   "a separate stream let batch k+1 travel while batch k computes."
                 : "Copies between host and device block the step. Pinned buffers and "
                   "prefetching let them overlap with compute.",
        knobs,
        fmt::format("pageable copies {:.2f} ms/step of {:.2f}; device idle on copies "
                    "{:.2f} ms/step",
                    ctx.detail("pcie.pageable") / ctx.n, ctx.ms_per_step(WaitClass::kPcie),
                    device_idle(ctx.t, "pcie") / ctx.n));
  }
}

// The read-back whose drained queue cost the device most ("sync.by.<stack>" details), or "".
std::string top_sync_stack(const RuleContext& ctx, double* ms) {
  std::string best;
  *ms = 0;
  for (const auto& [k, v] : ctx.t.detail) {
    if (k.rfind("sync.by.", 0) == 0 && v > *ms) best = k.substr(8), *ms = v;
  }
  return best;
}

void sync_rule(const RuleContext& ctx, std::vector<Finding>* out) {
  double by_ms = 0;
  const std::string by = top_sync_stack(ctx, &by_ms);
  std::vector<std::string> knobs;
  if (is_pytorch(ctx.trace)) {
    knobs = {"remove .item()/.cpu()/print(tensor) from the step (read values every N steps)",
             "tensor.to('cpu', non_blocking=True) into pinned memory"};
  }
  add_time_finding(
      ctx, out, WaitClass::kSync, ctx.r.sync_share, "The training thread waits on synchronisation",
      "Explicit synchronisation serialises host and device work: the device's queue drains "
      "while the host waits, and refills only as fast as the host launches again.",
      knobs,
      by.empty() ? fmt::format("sync {:.2f} ms/step", ctx.ms_per_step(WaitClass::kSync))
                 : fmt::format("sync {:.2f} ms/step; most after {} ({:.2f} ms/step)",
                               ctx.ms_per_step(WaitClass::kSync), by, by_ms / ctx.n));
}

// Below this share of the host-class time in traced CPU operators and runtime calls, the host
// time is taken as untraced.
constexpr double kTracedHostFloor = 0.1;
// A CUDA/HIP kernel launch costs the host a few µs; a runtime call this long per call is slow
// itself (a blocking submit, job preparation), not a sign of many short kernels.
constexpr double kSlowCallUs = 50;

// The training thread's runtime calls in the steady steps: count, total ms, the most frequent
// name, and whether they are CUDA/HIP calls (whose launches CUDA graphs can replay).
struct HostCalls {
  int64_t count = 0;
  double ms = 0;
  double median_us = 0;  // what one call costs (a few slow calls, e.g. a first launch that loads
                         // its module, do not move it)
  std::string top;
  bool graphable = false;
};
HostCalls host_calls(const RuleContext& ctx) {
  HostCalls out;
  Track main;
  if (!find_training_track(ctx.trace, &main)) return out;
  std::set<int64_t> wanted;
  for (const StepBreakdown* s : ctx.steps) wanted.insert(s->step);
  std::map<uint32_t, int64_t> by_name;
  std::vector<int64_t> durs;
  for (const Event& e : ctx.trace.events) {
    if (e.track != main || e.phase != Phase::kSpan || e.category != Category::kHost ||
        !wanted.count(e.step))
      continue;
    ++out.count;
    out.ms += static_cast<double>(e.dur_ns) / 1e6;
    durs.push_back(e.dur_ns);
    ++by_name[e.name];
  }
  if (!durs.empty()) {
    std::nth_element(durs.begin(), durs.begin() + static_cast<std::ptrdiff_t>(durs.size() / 2),
                     durs.end());
    out.median_us = static_cast<double>(durs[durs.size() / 2]) / 1e3;
  }
  int64_t best = 0;
  for (const auto& [name, n] : by_name) {
    const std::string& s = ctx.trace.names.at(name);
    out.graphable |= s.rfind("cuda", 0) == 0 || s.rfind("cu", 0) == 0 || s.rfind("hip", 0) == 0;
    if (n > best) {
      best = n;
      out.top = s;
    }
  }
  return out;
}

// At least this share of the host-class device idle under CPU work (kCpuWork operators): the
// step waits on the program's CPU computation, not on dispatch.
constexpr double kCpuWorkMajority = 0.5;

// The CPU operators the device waited on most ("host_op.<operator>" details), as examples.
std::vector<std::string> host_op_examples(const RuleContext& ctx, size_t k) {
  std::vector<std::pair<double, std::string>> by;
  for (const auto& [key, v] : ctx.t.detail)
    if (key.rfind("host_op.", 0) == 0) by.emplace_back(v, key.substr(8));
  std::sort(by.rbegin(), by.rend());
  std::vector<std::string> out;
  for (size_t i = 0; i < by.size() && i < k; ++i) {
    out.push_back(fmt::format("{}: the device idles {:.2f} ms/step under it", by[i].second,
                              by[i].first / ctx.n));
  }
  return out;
}

// The device idles while the training thread computes on the CPU (operators that launch no
// device work: tensor math on CPU tensors, input preparation): CUDA graphs and compilation do
// not remove that work; moving it off the thread (loader workers) or onto the device does.
void cpu_work_finding(const RuleContext& ctx, double cpu_ms, double host_ms,
                      std::vector<Finding>* out) {
  std::vector<std::string> knobs = {
      "move the CPU computation off the training thread (loader workers) or onto the device"};
  // Workers enough to prepare a batch per step once the step no longer waits: the CPU work over
  // the rest of the step (what it takes without the host's idle).
  const double step_ms = ctx.t.wall / ctx.n;
  const double rest_ms = std::max(step_ms - host_ms, 0.05 * step_ms);
  const int workers = std::max(1, static_cast<int>(std::ceil(cpu_ms / rest_ms)));
  if (is_pytorch(ctx.trace)) {
    knobs = {fmt::format("DataLoader(num_workers={}): prepare batches in worker processes, ahead "
                         "of the step ({:.1f} ms of CPU work per batch against a {:.1f} ms step "
                         "without the wait)",
                         workers, cpu_ms, rest_ms),
             "the preprocessing on the GPU (the same ops on CUDA tensors)"};
  }
  const size_t before = out->size();
  add_time_finding(
      ctx, out, WaitClass::kHost, ctx.r.host_share,
      "The device waits while the host computes on the CPU",
      "The training thread runs CPU operators that launch no device work (tensor math on CPU "
      "tensors, input preparation, host-side metrics) while the device has nothing queued. "
      "This is the program's own CPU work, not dispatch or launch overhead: CUDA graphs and "
      "torch.compile on the model do not remove it. Done in loader workers it overlaps the "
      "device; done on the device it is a few kernels.",
      knobs,
      fmt::format("host {:.2f} ms/step of device idle, {:.2f} ms/step of it under CPU operators "
                  "that launch no device work (at least {} us each, no runtime call inside)",
                  host_ms, cpu_ms, kCpuWorkMinNs / 1000));
  if (out->size() > before) {
    Finding& f = out->back();
    f.evidence.examples = host_op_examples(ctx, 3);
    for (std::string& e : f.evidence.examples) e = "CPU operator " + e;
    f.remedy = "cpu_work";
  }
}

void host_rule(const RuleContext& ctx, std::vector<Finding>* out) {
  std::vector<std::string> knobs = {
      fmt::format("--micro-batch {}", std::max(2, 2 * ctx.run.micro_batch))};
  if (is_pytorch(ctx.trace)) {  // the program's own launch-overhead remedies
    knobs = {"torch.compile(mode=\"reduce-overhead\") or torch.cuda.graphs",
             "a larger batch per step (DataLoader(batch_size=...))"};
  }
  // On a device's timeline, what the host did meanwhile (its own view): CPU operators (dispatch,
  // Python) or the launch calls themselves.
  const double ops_ms = ctx.detail("host.compute") / ctx.n;
  const double calls_ms = ctx.detail("host.host") / ctx.n;
  const double host_ms = ctx.ms_per_step(WaitClass::kHost);
  if (ctx.detail("device.idle.host") > 0 && ops_ms + calls_ms < kTracedHostFloor * host_ms) {
    // The device idles while the training thread runs (almost) no traced span: the trace does
    // not show the host's work (Python outside operators, compilation, another process), so no
    // launch remedy is evidenced and no fix can be modelled.
    std::vector<std::string> untraced = {
        "annotate the host's work between kernels (NVTX ranges, record_function) to see it"};
    if (is_pytorch(ctx.trace)) {
      untraced = {
          "torch.profiler.schedule(wait=1, warmup=1, active=N): profile steady steps, after "
          "warm-up and compilation",
          "torch.profiler.record_function(...) around the step's phases, or with_stack=True, "
          "to see the host's work"};
    }
    const size_t before = out->size();
    add_time_finding(
        ctx, out, WaitClass::kHost, ctx.r.host_share,
        "The device waits on host time the trace does not show",
        "The device idles while the training thread runs no traced operator or runtime call: "
        "Python outside operators, compilation (torch.compile, Triton), data handling, or a "
        "wait on another process. The trace cannot tell which, so this is not evidence of "
        "launch overhead, and no step time is predicted.",
        untraced,
        fmt::format("host {:.2f} ms/step of device idle; the host's own view: CPU operators "
                    "{:.2f} ms/step, runtime calls {:.2f} ms/step, untraced the rest",
                    host_ms, ops_ms, calls_ms));
    if (out->size() > before) out->back().predictable = false;
    return;
  }
  const double cpu_ms = ctx.detail("host.cpu_work") / ctx.n;
  if (cpu_ms > 0 && cpu_ms >= kCpuWorkMajority * host_ms) {
    cpu_work_finding(ctx, cpu_ms, host_ms, out);
    return;
  }
  if (ops_ms + calls_ms > 0) {
    const size_t before = out->size();
    // What one runtime call costs: a few µs is a launch (many short kernels); much more is a
    // slow call (a blocking submit, job preparation) that no launch remedy shortens.
    const HostCalls calls = host_calls(ctx);
    const double call_us = calls.median_us;
    if (is_pytorch(ctx.trace) && calls.count > 0 && !calls.graphable) {
      knobs = {"fewer, larger operators (torch.compile, fused ops)",
               "a larger batch per step (DataLoader(batch_size=...))"};
    }
    std::string why =
        ops_ms >= calls_ms
            ? "The device waits for the host, which spends the step in CPU operators (framework "
              "dispatch, Python between ops) more than in launch calls: the step is CPU-bound. "
              "Fewer, larger operators (torch.compile), CUDA graphs or more work per step move "
              "the bound back to the device."
            : "The device waits for the host between launches: many short kernels, each costing "
              "a launch call. CUDA graphs replay them for the cost of one launch.";
    if (ops_ms < calls_ms && call_us > kSlowCallUs) {
      why = fmt::format(
          "The device waits for the host, which spends the step in runtime calls of {:.0f} µs "
          "each (median; {:.0f} per step, most '{}'): the calls themselves are slow (a launch "
          "costs a "
          "few µs), so the cost is per submission, not many short kernels. Fewer, larger "
          "submissions (fused operators, more work per step) cut it{}.",
          call_us, static_cast<double>(calls.count) / ctx.n, calls.top,
          calls.graphable ? "; CUDA graphs replay captured work without the calls" : "");
    }
    add_time_finding(
        ctx, out, WaitClass::kHost, ctx.r.host_share, "Host/launch overhead", why, knobs,
        fmt::format("host {:.2f} ms/step of device idle; the host's own view: CPU operators "
                    "{:.2f} ms/step, runtime calls {:.2f} ms/step",
                    ctx.ms_per_step(WaitClass::kHost), ops_ms, calls_ms));
    if (out->size() > before) {
      Finding& f = out->back();
      // The CPU operators the device waited on most, else the longest CPU operators.
      f.evidence.examples = host_op_examples(ctx, 3);
      if (f.evidence.examples.empty())
        f.evidence.examples = example_spans(ctx.trace, WaitClass::kCompute, ctx.steps, 3);
      bool compiled = false;
      for (std::string& e : f.evidence.examples) {
        compiled |= e.find("CompiledFunction") != std::string::npos;
        e = "CPU operator " + e;
      }
      if (compiled && is_pytorch(ctx.trace)) {
        // torch.compile already runs (CompiledFunction / CompiledFunctionBackward hold the host):
        // what is left is its per-kernel launch cost, which CUDA graphs remove.
        f.explanation =
            "The device waits for the host, which spends the step inside torch.compile's graphs "
            "(CompiledFunction): the model is compiled already, and the compiled code still pays "
            "a launch per kernel. mode=\"reduce-overhead\" replays them as CUDA graphs.";
        f.knobs = {"torch.compile(mode=\"reduce-overhead\")", "a larger batch per step"};
      }
    }
    return;
  }
  add_time_finding(ctx, out, WaitClass::kHost, ctx.r.host_share, "Host/launch overhead",
                   "Host-side bookkeeping between kernels is significant: the device waits "
                   "for the host to launch its next work.",
                   knobs, fmt::format("host {:.2f} ms/step", ctx.ms_per_step(WaitClass::kHost)));
}

namespace {

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// The unclassified span (a user annotation such as record_function("extra_work")) on the
// training thread that holds the most time in the steady steps, outermost instances only:
// (name, ms per step), or ("", 0).
std::pair<std::string, double> largest_unclassified_span(const RuleContext& ctx) {
  std::pair<std::string, double> best{"", 0};
  for (const auto& [name, ms] : span_ms_by_name(ctx.trace, ctx.steps, true))
    if (ms > best.second) best = {name, ms};
  return best;
}

}  // namespace

// Time no classified range covers: inside annotations of the program's own (named, when one
// holds most of it), or covered by nothing.
void other_rule(const RuleContext& ctx, std::vector<Finding>* out) {
  const double other_ms = ctx.ms_per_step(WaitClass::kOther);
  const auto [name, ms] = largest_unclassified_span(ctx);
  if (!name.empty() && ms >= 0.5 * other_ms) {
    add_time_finding(
        ctx, out, WaitClass::kOther, ctx.r.other_share,
        fmt::format("Time inside '{}', which runs no operation ft classifies", name),
        fmt::format("The program's own annotation '{}' holds {:.2f} ms per step, and nothing "
                    "inside it is a known operator, copy, collective or loader call on this "
                    "thread: {}",
                    name, std::min(ms, other_ms),
                    lower(name).find("backward") != std::string::npos
                        ? "PyTorch runs backward on the autograd engine's threads, and the trace "
                          "holds none of their work inside it (a trimmed trace, or threads the "
                          "profiler did not record). Profile with every thread to see what it "
                          "runs."
                        : "code of the program's own (Python work, a sleep, a busy loop), or work "
                          "on threads the trace does not hold. Profile it with its own ranges, "
                          "or move it off the training step."),
        {}, fmt::format("other {:.2f} ms/step, of which in '{}' up to {:.2f}", other_ms, name, ms));
    return;
  }
  add_time_finding(ctx, out, WaitClass::kOther, ctx.r.other_share,
                   "Time outside any annotated phase",
                   "Part of the step is covered by no range, so its cause is unknown.", {},
                   fmt::format("other {:.2f} ms/step", other_ms));
}

}  // namespace ft::profiler::rules
