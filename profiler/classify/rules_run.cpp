// rules_run.cpp: the diagnosis rules on run facts: copies (Nsight), stragglers, precision, batch,
// loss stability, the environment and memory capacity, one function each.
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>
#include <set>
#include <utility>

#include "device_attribution.h"
#include "rules.h"

namespace ft::profiler::rules {
namespace {

int vector_bits_of_coretype(std::string core) {
  for (auto& ch : core) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  static const std::set<std::string> k512 = {"SKYLAKEX", "COOPERLAKE", "SAPPHIRERAPIDS"};
  static const std::set<std::string> k256 = {
      "HASWELL", "ZEN", "SANDYBRIDGE", "EXCAVATOR", "STEAMROLLER", "PILEDRIVER", "BULLDOZER"};
  if (k512.count(core)) return 512;
  if (k256.count(core)) return 256;
  return core.empty() ? 0 : 128;  // Prescott, Nehalem, Core2, Penryn, Atom, ...
}

// Adds an environment finding (risk, no recoverable share).
void env_finding(std::vector<Finding>* out, Severity sev, std::string title, std::string why,
                 std::string detail, std::vector<std::string> knobs) {
  Finding f;
  f.cls = "environment";
  f.severity = sev;
  f.title = std::move(title);
  f.explanation = std::move(why);
  f.evidence.detail = std::move(detail);
  f.knobs = std::move(knobs);
  out->push_back(std::move(f));
}

double memory_capacity(const RunInfo& run) {
  return run.memory_limit > 0 ? run.memory_limit : run.memory_capacity;
}

}  // namespace

// Across ranks (imported multi-rank traces, prepare_kineto_trace): the rank that arrives last
// at collectives makes every other rank wait; the share is that wait per waiting rank over the
// profiled steps' wall time.
void straggler_rule(const RuleContext& ctx, std::vector<Finding>* out) {
  const Trace& trace = ctx.trace;
  const FindingRules& r = ctx.r;
  const int64_t rank = meta_int(trace, "run.straggler_rank", -1);
  const int64_t ranks = meta_int(trace, "ranks", 1);
  const int64_t wait = meta_int(trace, "run.straggler_wait_ns", 0);
  double wall_ns = 0;
  for (const StepBreakdown& s : ctx.all) wall_ns += s.wall_ms * 1e6;
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

// Nsight Systems rules: async copies from pageable memory, synchronous copies over 64 KB.
void copy_rules(const RuleContext& ctx, std::vector<Finding>* out) {
  const Trace& trace = ctx.trace;
  const FindingRules& r = ctx.r;
  // Copies inside the steps cost step time; those outside every step (setup: the model's
  // weights, the first batch) do not, and are counted apart.
  struct Tally {
    int count = 0, outside = 0;
    uint64_t bytes = 0, outside_bytes = 0;
    int64_t ns = 0;
    std::vector<std::string> examples, outside_examples;
  } pageable, sync;
  auto add = [&](Tally& t, const Event& ev) {
    const std::string example =
        fmt::format("{} {} bytes {:.3f} ms", trace.names.at(ev.name), ev.bytes, ev.dur_ns / 1e6);
    if (ev.step < 0) {
      ++t.outside;
      t.outside_bytes += ev.bytes;
      if (t.outside_examples.size() < 3)
        t.outside_examples.push_back(example + " outside the steps");
      return;
    }
    ++t.count;
    t.bytes += ev.bytes;
    t.ns += ev.dur_ns;
    if (t.examples.size() < 3) t.examples.push_back(fmt::format("{} at step {}", example, ev.step));
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
    // A device-to-host copy of a few bytes is a read-back (loss.item(), .cpu() of a scalar): what
    // it costs is the wait for the queue to drain, which the sync rule judges, not a transfer.
    const bool read_back = ev.category == Category::kD2H && ev.bytes < r.sync_copy_bytes;
    if ((ev.flags & kPageable) && !(ev.flags & kSynchronous) && !read_back) add(pageable, ev);
    // Nsight: synchronous memcpy, except H2D <= 64 KB.
    if ((ev.flags & kSynchronous) &&
        (ev.category == Category::kD2H || ev.bytes > r.sync_copy_bytes)) {
      add(sync, ev);
    }
  }
  auto emit = [&](const Tally& t, std::string title, std::string why,
                  std::vector<std::string> knobs) {
    if (t.count == 0 && t.outside == 0) return;
    Finding f;
    f.cls = "pcie";
    f.severity = Severity::kWarning;
    f.title = std::move(title);
    f.explanation = std::move(why);
    f.evidence.examples = t.examples;
    f.evidence.detail = fmt::format("{} copies, {} bytes, {:.3f} ms", t.count, t.bytes, t.ns / 1e6);
    if (t.outside > 0)
      f.evidence.detail += fmt::format("; {} more outside the steps ({} bytes, no step time)",
                                       t.outside, t.outside_bytes);
    if (t.count == 0) {
      // Only setup copies: worth knowing, not a step cost.
      f.severity = Severity::kInfo;
      f.title += " outside the steps (setup)";
      f.explanation += " These all run outside the steps (setup), so they cost no step time.";
      f.evidence.examples = t.outside_examples;
      f.evidence.detail = fmt::format("{} copies outside the steps, {} bytes (no step time)",
                                      t.outside, t.outside_bytes);
    }
    f.knobs = std::move(knobs);
    out->push_back(std::move(f));
  };
  emit(pageable,
       fmt::format("{} asynchronous copies from pageable memory",
                   pageable.count > 0 ? pageable.count : pageable.outside),
       "An asynchronous copy from pageable memory is staged through a driver buffer and runs "
       "synchronously (Nsight Systems rule).",
       pinned_knobs(trace, ctx.run));
  emit(sync,
       fmt::format("{} synchronous copies (D2H, or H2D over {} KB)",
                   sync.count > 0 ? sync.count : sync.outside, r.sync_copy_bytes / 1024),
       "Synchronous copies block the host until the device is done (Nsight Systems rule: "
       "synchronous memcpy except H2D <= 64 KB).",
       {"asynchronous copies on a side stream", "--prefetch 2"});
}

// GPU traces: fp32 GEMMs on the SIMT units ("volta_sgemm_*", "ampere_sgemm_*", cutlass simt
// sgemm) of a GPU whose tensor cores sit idle; TF32 or bf16 autocast moves them onto the cores.
void tensor_core_rule(const RuleContext& ctx, std::vector<Finding>* out) {
  std::set<int64_t> wanted;
  double wall = 0;
  for (const StepBreakdown* s : ctx.steps) wanted.insert(s->step), wall += s->wall_ms;
  std::map<uint32_t, int64_t> by_name;
  int64_t ns = 0;
  for (const Event& ev : ctx.trace.events) {
    if (!ev.track.device || ev.phase != Phase::kSpan || ev.category != Category::kCompute ||
        !wanted.count(ev.step) || ev.name >= ctx.trace.names.size())
      continue;
    const std::string& n = ctx.trace.names.at(ev.name);
    if (!device_attribution::is_simt_fp32_gemm(n)) continue;
    ns += ev.dur_ns;
    by_name[ev.name] += ev.dur_ns;
  }
  const double gemm_share = wall > 0 ? static_cast<double>(ns) / 1e6 / wall : 0;
  if (gemm_share < ctx.r.simt_gemm_share) return;
  Finding f;
  f.cls = "precision";
  f.share = gemm_share * (1.0 - 1.0 / ctx.r.tensor_core_speedup);
  f.severity = time_severity(f.share, ctx.r);
  f.title = fmt::format(
      "fp32 GEMMs run on the SIMT units, not the tensor cores ({:.1f}% of step time in them)",
      100 * gemm_share);
  // Volta and Turing tensor cores take fp16 only (no TF32, no bf16): mixed precision there is
  // fp16 autocast with a gradient scaler.
  bool fp16_only = false;
  for (const auto& [name, t] : by_name) {
    const std::string& n = ctx.trace.names.at(name);
    fp16_only |= n.rfind("volta_", 0) == 0 || n.rfind("turing_", 0) == 0;
  }
  f.explanation = fmt::format(
      "The step's matrix multiplies are fp32 SIMT kernels (sgemm), so the GPU's tensor cores sit "
      "idle. {} runs them on the tensor cores; the recoverable share assumes {:.0f}x on these "
      "kernels.",
      fp16_only ? "On this Volta/Turing GPU (fp16 tensor cores only), fp16 autocast with a "
                  "GradScaler"
                : "TF32 (torch.backends.cuda.matmul.allow_tf32 = True) or bf16 autocast",
      ctx.r.tensor_core_speedup);
  f.evidence.steps = std::vector<int64_t>(wanted.begin(), wanted.end());
  f.evidence.share = gemm_share;
  std::vector<std::pair<int64_t, uint32_t>> top;
  for (const auto& [name, t] : by_name) top.emplace_back(t, name);
  std::sort(top.rbegin(), top.rend());
  for (size_t i = 0; i < top.size() && i < 3; ++i) {
    f.evidence.examples.push_back(fmt::format("{} {:.3f} ms/step",
                                              ctx.trace.names.at(top[i].second),
                                              static_cast<double>(top[i].first) / 1e6 / ctx.n));
  }
  f.evidence.detail = fmt::format("SIMT fp32 GEMM kernels {:.2f} ms/step of {:.2f}",
                                  static_cast<double>(ns) / 1e6 / ctx.n, wall / ctx.n);
  f.knobs = fp16_only ? std::vector<std::string>{"torch.autocast(device_type='cuda', "
                                                 "dtype=torch.float16)",
                                                 "torch.cuda.amp.GradScaler()"}
                      : std::vector<std::string>{
                            "torch.backends.cuda.matmul.allow_tf32 = True",
                            "torch.autocast(device_type='cuda', dtype=torch.bfloat16)"};
  out->push_back(std::move(f));
}

// Compute-bound in fp32: bf16 operands would halve the GEMM time.
void precision_rule(const RuleContext& ctx, std::vector<Finding>* out) {
  const double compute = ctx.share(WaitClass::kCompute);
  // A CPU without bf16 GEMM units (AVX2 only) runs bf16 as fp32 GEMMs on widened operands:
  // bf16 then only adds the conversions, so the advice turns round.
  const bool emulated = ctx.run.gemm_library.find("bf16 emulated") != std::string::npos;
  if (emulated && ctx.run.precision == "bf16" && compute >= ctx.r.compute_bound_share) {
    Finding f;
    f.cls = "precision";
    f.severity = Severity::kWarning;
    f.title = fmt::format("bf16 is emulated on this CPU ({:.0f}% of step time is compute)",
                          100 * compute);
    f.explanation =
        "This CPU has no bf16 GEMM units, so bf16 GEMMs run as fp32 GEMMs on widened operands "
        "plus the conversions. fp32 does the same arithmetic without them.";
    f.evidence.share = compute;
    f.evidence.detail = fmt::format("GEMM: {}", ctx.run.gemm_library);
    f.knobs = {"--precision fp32"};
    out->push_back(std::move(f));
    return;
  }
  // The run timed its own GEMMs in both precisions: where bf16 ran no faster, it is no advice.
  const bool no_gain = ctx.run.gemm_bf16_speedup > 0 && ctx.run.gemm_bf16_speedup <= 1.0;
  if (ctx.run.precision == "fp32" && compute >= ctx.r.compute_bound_share && !emulated &&
      !no_gain) {
    Finding f;
    f.cls = "precision";
    // Only the GEMMs run in bf16 (Amdahl): their traced time, at the speed-up the run measured
    // on its own GEMM shapes before training (operand conversions included), else the rule's
    // assumption. Without GEMM spans in the trace, all compute is taken as GEMM.
    const double gemm_ms = ctx.detail("compute.gemm") / ctx.n;
    const double speedup =
        ctx.run.gemm_bf16_speedup > 0 ? ctx.run.gemm_bf16_speedup : ctx.r.bf16_speedup;
    const double step_ms = ctx.t.wall / ctx.n;
    const double sped = gemm_ms > 0 && step_ms > 0 ? std::min(gemm_ms / step_ms, compute) : compute;
    f.share = sped * std::max(0.0, 1.0 - 1.0 / speedup);
    f.severity = Severity::kWarning;
    f.title = fmt::format("Compute-bound in fp32 ({:.0f}% of step time is compute)", 100 * compute);
    f.explanation =
        "The step is dominated by fp32 compute. bf16 GEMM operands with fp32 accumulation and fp32 "
        "master weights halve the bytes moved and use the CPU's bf16 units (AMX / AVX512-BF16).";
    f.evidence.steps = steps_with(ctx.steps, WaitClass::kCompute, ctx.r.compute_bound_share);
    f.evidence.share = compute;
    f.evidence.examples = example_spans(ctx.trace, WaitClass::kCompute, ctx.steps, 3);
    f.evidence.detail = fmt::format(
        "compute {:.2f} ms/step of {:.2f}; MFU {}; {}; recoverable share assumes a {:.2f}x "
        "bf16 speed-up of {}",
        ctx.ms_per_step(WaitClass::kCompute), step_ms,
        ctx.run.mfu >= 0 ? fmt::format("{:.1f}%", 100 * ctx.run.mfu) : "unknown",
        gemm_ms > 0 ? fmt::format("GEMMs {:.2f} ms/step", gemm_ms) : "no GEMM spans traced",
        speedup,
        ctx.run.gemm_bf16_speedup > 0 ? "the GEMMs (measured on this run's shapes)"
        : gemm_ms > 0                 ? "the GEMMs (assumed)"
                                      : "all compute (assumed)");
    f.knobs = {"--precision bf16"};
    out->push_back(std::move(f));
  }
}

// Small micro-batches with memory headroom and low MFU (a fraction of the measured peak).
void batch_rule(const RuleContext& ctx, std::vector<Finding>* out) {
  // A larger micro-batch speeds the forward and backward GEMMs, not the optimizer: its update
  // costs the same per step whatever the batch (on a tiny model it can be most of the compute).
  const double optimizer = ctx.t.wall > 0 ? ctx.detail("compute.optimizer") / ctx.t.wall : 0.0;
  const double compute = std::max(0.0, ctx.share(WaitClass::kCompute) - optimizer);
  const int tokens = ctx.run.micro_batch * ctx.run.seq_len;
  const double capacity = memory_capacity(ctx.run);
  const bool headroom = ctx.run.mem_peak > 0 && capacity > 0 && 2 * ctx.run.mem_peak <= capacity;
  if (tokens > 0 && tokens <= ctx.r.underfilled_tokens && ctx.run.mfu >= 0 &&
      ctx.run.mfu < ctx.r.underfilled_mfu && headroom) {
    Finding f;
    f.cls = "batch";
    f.share = 0.5 * compute * (1.0 - ctx.run.mfu / ctx.r.underfilled_mfu);
    f.severity = Severity::kWarning;
    f.title =
        fmt::format("Micro-batch under-filled ({} tokens, MFU {:.1f}%)", tokens, 100 * ctx.run.mfu);
    f.explanation =
        "Each micro-batch is too small to keep the GEMMs efficient, and memory has room for a "
        "larger one. Doubling the micro-batch and halving accumulation keeps the global batch "
        "(and so the loss curve) the same while each GEMM does twice the work per call.";
    f.evidence.steps = steps_with(ctx.steps, WaitClass::kCompute, 0.0);
    f.evidence.share = compute;
    f.evidence.detail = fmt::format(
        "micro-batch {} x seq {} = {} tokens; peak memory {:.1f} MiB of "
        "{:.1f} MiB available; MFU {:.2f}%; forward and backward {:.0f}% of the step (the "
        "optimizer's {:.0f}% does not shrink with a larger micro-batch)",
        ctx.run.micro_batch, ctx.run.seq_len, tokens, ctx.run.mem_peak / 1048576,
        capacity / 1048576, 100 * ctx.run.mfu, 100 * compute, 100 * optimizer);
    if (ctx.run.grad_accum >= 2) {
      f.knobs = {fmt::format("--micro-batch {} --grad-accum {}", 2 * ctx.run.micro_batch,
                             std::max(1, ctx.run.grad_accum / 2))};
    } else {
      f.knobs = {fmt::format("--micro-batch {} (doubles the global batch: revisit --lr)",
                             2 * ctx.run.micro_batch)};
    }
    out->push_back(std::move(f));
  }
}

// Loss stability: spikes, oscillation, divergence or NaN.
void loss_rule(const RuleContext& ctx, std::vector<Finding>* out) {
  if (ctx.loss.verdict != "healthy" && ctx.loss.verdict != "unknown" && !ctx.loss.verdict.empty()) {
    Finding f;
    f.cls = "loss";
    f.severity = ctx.loss.has_nan || ctx.loss.diverged ? Severity::kCritical : Severity::kWarning;
    f.title = fmt::format("Loss curve is {} ({} spikes, oscillation {:.3f})", ctx.loss.verdict,
                          ctx.loss.spikes, ctx.loss.oscillation);
    f.explanation =
        "The loss does not fall steadily: the learning rate is too high for this early phase of "
        "training. A linear warmup, a lower peak LR and gradient clipping steady it.";
    for (const StepBreakdown* s : ctx.steps) {
      if (!std::isnan(s->loss)) f.evidence.steps.push_back(s->step);
      if (f.evidence.steps.size() >= kMaxEvidenceSteps) break;
    }
    std::string series;
    for (size_t i = 0; i < ctx.all.size() && i < 16; ++i)
      series += fmt::format(" {:.3f}", ctx.all[i].loss);
    f.evidence.detail =
        fmt::format("loss:{}{}; lr {} warmup {} clip {}", series, ctx.all.size() > 16 ? " ..." : "",
                    ctx.run.lr, ctx.run.warmup, ctx.run.clip);
    const int warm = std::max(10, ctx.run.steps / 10);
    if (ctx.run.warmup >= 0 && ctx.run.warmup < warm)
      f.knobs.push_back(fmt::format("--warmup {}", warm));
    // A spike or divergence at the peak LR means the LR sits well above the stability edge:
    // cut it by 30 (measured: a spike at lr 0.01 after warmup, none at 0.005 or 0.0033,
    // on the scenario model); oscillation needs less.
    const double lr_cut = ctx.loss.verdict == "oscillating" ? 3 : 30;
    if (ctx.run.lr > 0) f.knobs.push_back(fmt::format("--lr {:.3g}", ctx.run.lr / lr_cut));
    if (ctx.run.clip <= 0 || ctx.run.clip > 1) f.knobs.push_back("--clip 1.0");
    if (f.knobs.empty()) f.knobs.push_back("--lr (lower it)");
    out->push_back(std::move(f));
  }
}

// OPENBLAS_CORETYPE forcing narrower kernels than the CPU has.
void blas_coretype_rule(const RuleContext& ctx, std::vector<Finding>* out) {
  if (ctx.run.env_vars.count("OPENBLAS_CORETYPE") && ctx.run.cpu_vector_bits > 0) {
    const std::string core = ctx.run.env_vars.at("OPENBLAS_CORETYPE");
    const int bits = vector_bits_of_coretype(core);
    if (bits > 0 && bits < ctx.run.cpu_vector_bits) {
      const bool uses = ctx.run.gemm_library.find("OpenBLAS") != std::string::npos;
      env_finding(out, uses ? Severity::kWarning : Severity::kInfo,
                  fmt::format("OPENBLAS_CORETYPE={} forces {}-bit kernels on a {}-bit CPU", core,
                              bits, ctx.run.cpu_vector_bits),
                  uses ? "OpenBLAS GEMMs run at a fraction of the CPU's vector width."
                       : "ft's GEMMs do not use OpenBLAS, but anything else in the process "
                         "(NumPy, PyTorch) runs its GEMMs at a fraction of the vector width.",
                  fmt::format("GEMM: {}", ctx.run.gemm_library),
                  {ctx.run.cpu_vector_bits >= 512 ? "OPENBLAS_CORETYPE=SkylakeX"
                                                  : "unset OPENBLAS_CORETYPE"});
    }
  }
}

// oneDNN capped below the CPU's vector width.
void onednn_isa_rule(const RuleContext& ctx, std::vector<Finding>* out) {
  if (const auto pos = ctx.run.gemm_library.find("max ISA avx2");
      pos != std::string::npos && ctx.run.cpu_vector_bits >= 512) {
    env_finding(out, Severity::kWarning, "oneDNN is limited to AVX2 on an AVX-512 CPU",
                "oneDNN's GEMMs dispatch to 256-bit kernels (ONEDNN_MAX_CPU_ISA?).",
                fmt::format("GEMM: {}", ctx.run.gemm_library), {"unset ONEDNN_MAX_CPU_ISA"});
  }
}

// More compute threads than free cores.
void threads_rule(const RuleContext& ctx, std::vector<Finding>* out) {
  if (ctx.run.threads > 0 && ctx.run.logical_cpus > 0) {
    const double busy = std::max(0.0, ctx.run.load_average);
    const int free_cores = std::max(1, static_cast<int>(std::lround(ctx.run.logical_cpus - busy)));
    if (ctx.run.threads > ctx.run.logical_cpus ||
        (ctx.run.load_average >= 0 && ctx.run.threads > free_cores)) {
      env_finding(out, Severity::kWarning,
                  fmt::format("{} threads for {} free cores ({} logical, load average {:.2f})",
                              ctx.run.threads, free_cores, ctx.run.logical_cpus, busy),
                  "More compute threads than free cores: OpenMP barriers wait for descheduled "
                  "threads, which can cost a scheduler quantum per parallel region.",
                  fmt::format("threads {}, logical CPUs {}, 1-min load before the run {:.2f}",
                              ctx.run.threads, ctx.run.logical_cpus, busy),
                  {fmt::format("--threads {}", free_cores), "OMP_WAIT_POLICY=passive"});
    }
  }
}

// The allocator returns memory to the OS every step.
void allocator_unmap_rule(const RuleContext& ctx, std::vector<Finding>* out) {
  const double per_step_unmaps =
      ctx.run.steps > 0 ? static_cast<double>(ctx.run.segment_unmaps) / ctx.run.steps : 0.0;
  if (!ctx.run.allocator_caching || per_step_unmaps >= 1.0) {
    env_finding(
        out, Severity::kWarning, "The allocator returns memory to the OS every step",
        "Freed memory goes back to the OS, so every step maps and faults in fresh pages.",
        fmt::format("{} segments unmapped over {} steps; caching {}", ctx.run.segment_unmaps,
                    ctx.run.steps, ctx.run.allocator_caching ? "on" : "off"),
        {"--allocator-caching true"});
  }
}

// Allocator overhang (TraceML): reserved far above the peak allocated.
void reserved_overhang_rule(const RuleContext& ctx, std::vector<Finding>* out) {
  if (ctx.run.mem_peak > 0 &&
      ctx.run.mem_reserved_peak >= ctx.r.reserved_over_allocated * ctx.run.mem_peak) {
    Finding f;
    f.cls = "memory";
    f.severity = Severity::kInfo;
    f.title = fmt::format("Reserved memory is {:.1f}x the peak allocated",
                          ctx.run.mem_reserved_peak / ctx.run.mem_peak);
    f.explanation = "The allocator holds much more than the run uses (fragmentation or overhang).";
    f.evidence.detail =
        fmt::format("peak allocated {:.1f} MiB, peak reserved {:.1f} MiB",
                    ctx.run.mem_peak / 1048576, ctx.run.mem_reserved_peak / 1048576);
    f.knobs = {"--memory-limit (cap the cache)"};
    out->push_back(std::move(f));
  }
}

// The memory findings' knobs with what `ft-diagnose run` predicted for each (peak, step time),
// and the memory knobs it priced that the finding did not name yet.
void annotate_memory_knobs(const RunInfo& run, std::vector<std::string>* knobs) {
  if (run.memory_options.empty()) return;
  for (const auto& [knob, o] : run.memory_options) {
    if (std::find(knobs->begin(), knobs->end(), knob) == knobs->end()) knobs->push_back(knob);
  }
  for (std::string& k : *knobs) {
    const auto it = run.memory_options.find(k);
    if (it == run.memory_options.end()) continue;
    const RunInfo::MemoryOption& o = it->second;
    k += o.step_ms >= 0
             ? fmt::format(" (predicted peak {:.1f} MiB, step {:.1f} ms: {})", o.peak / 1048576,
                           o.step_ms, o.basis)
             : fmt::format(" (predicted peak {:.1f} MiB; {})", o.peak / 1048576, o.basis);
  }
}

// Memory near capacity (TensorBoard plugin).
void memory_capacity_rule(const RuleContext& ctx, std::vector<Finding>* out) {
  const double capacity = memory_capacity(ctx.run);
  if (ctx.run.mem_reserved_peak > 0 && capacity > 0 &&
      ctx.run.mem_reserved_peak > ctx.r.memory_capacity_frac * capacity) {
    Finding f;
    f.cls = "memory";
    f.severity = Severity::kWarning;
    f.title =
        fmt::format("Memory at {:.0f}% of capacity", 100 * ctx.run.mem_reserved_peak / capacity);
    f.explanation =
        "Peak reserved memory is close to the budget: the allocator will flush and "
        "retry, or run out.";
    f.evidence.detail = fmt::format("peak reserved {:.1f} MiB of {:.1f} MiB",
                                    ctx.run.mem_reserved_peak / 1048576, capacity / 1048576);
    f.knobs = {"--checkpoint block"};
    if (ctx.run.micro_batch > 1) {  // the same global batch in half-size micro-batches
      f.knobs.push_back(fmt::format("--micro-batch {} --grad-accum {}", ctx.run.micro_batch / 2,
                                    std::max(1, ctx.run.grad_accum) * 2));
    }
    annotate_memory_knobs(ctx.run, &f.knobs);
    out->push_back(std::move(f));
  }
}

// The run stopped out of memory: the allocator's request and state, and what makes it fit.
void oom_rule(const RuleContext& ctx, std::vector<Finding>* out) {
  if (ctx.run.oom.empty()) return;
  Finding f;
  f.cls = "memory";
  f.severity = Severity::kCritical;
  f.title = ctx.run.oom_step >= 0 ? fmt::format("{} at step {}", kOomTitle, ctx.run.oom_step)
                                  : std::string(kOomTitle);
  f.explanation =
      "The allocator could not satisfy a request within its budget and the run stopped there; "
      "the trace holds the steps before it. Less activation memory (recompute blocks, a smaller "
      "micro-batch with more accumulation) or a larger budget lets it finish.";
  f.evidence.detail = ctx.run.oom;
  if (ctx.run.memory_limit > 0) {
    f.knobs.push_back(fmt::format(
        "--memory-limit {}M", static_cast<long>(std::ceil(ctx.run.memory_limit * 1.5 / 1048576))));
  }
  if (ctx.run.checkpoint != "block") f.knobs.push_back("--checkpoint block");
  if (ctx.run.micro_batch > 1) {
    f.knobs.push_back(fmt::format("--micro-batch {} --grad-accum {}", ctx.run.micro_batch / 2,
                                  std::max(1, ctx.run.grad_accum) * 2));
  }
  annotate_memory_knobs(ctx.run, &f.knobs);
  f.predictable = false;
  f.fatal = true;
  out->push_back(std::move(f));
}

}  // namespace ft::profiler::rules
