// memory_options.cpp: for `ft-diagnose run`, what each memory knob would make of the run: its
// peak by the memory model (scaled by this run's measured / predicted peak) and its step time
// from this run's own measured phases, as trace metadata the memory findings quote.
#include "memory_options.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "ft/core/error.h"
#include "ft/tuner/memory_model.h"

namespace ft::diagnose {

namespace {

// Mean per-step milliseconds of the spans named `name` over the steps that have any.
double per_step_ms(const profiler::Trace& t, const std::string& name) {
  std::map<int64_t, double> by_step;
  for (const profiler::Event& e : t.events) {
    if (e.phase != profiler::Phase::kSpan || e.step < 0) continue;
    if (t.names.at(e.name) == name) by_step[e.step] += static_cast<double>(e.dur_ns) / 1e6;
  }
  if (by_step.empty()) return 0;
  double sum = 0;
  for (const auto& [s, ms] : by_step) sum += ms;
  return sum / static_cast<double>(by_step.size());
}

// ZeRO-3's step from a data-parallel run's own phases. The all-reduces' time per element
// (their transfer across the ranks when the caller matched them, else this rank's
// comm.all_reduce time, waits included) prices the ring: an all-reduce moves 2(D-1)/D of its data, a
// gather or a reduce-scatter (D-1)/D, so one block's gather takes half its all-reduce. A block's
// gather hides behind the previous block's forward, and its gather plus the next block's
// reduce-scatter behind a block's backward (zero3.cpp's one-block-ahead schedule, per
// micro-batch); the first gather of each pass is exposed, and the non-block tensors (wte,
// wpe, lnf) are reduce-scattered and gathered after backward, exposed, in place of their
// all-reduce. The run's own exposed wait (grad_sync) is what ZeRO-3 replaces.
struct Zero3Step {
  double delta_ms = 0;
  bool ok = false;
  std::string basis;
  double predicted(double step_ms) const { return ok && step_ms >= 0 ? step_ms + delta_ms : -1; }
};

Zero3Step zero3_step(const trainer::TrainConfig& c, const profiler::Trace& t, double fwd_blocks,
                     double transfer_ms) {
  Zero3Step z;
  const bool transfer = transfer_ms >= 0;
  const double all_reduce = transfer ? transfer_ms : per_step_ms(t, "comm.all_reduce");
  const double exposed_dp = per_step_ms(t, "grad_sync");
  const double bwd_blocks = per_step_ms(t, "bwd.block");
  const int L = std::max(1, c.model.num_layers);
  const int K = std::max(1, c.grad_accum);
  if (all_reduce <= 0 || fwd_blocks <= 0 || bwd_blocks <= 0) {
    z.basis =
        "the run traced no all-reduce or block phases: its gathers' exposure is not predicted";
    return z;
  }
  const trainer::ParamLayout pl = trainer::ParamLayout::make(c.model);
  size_t block = 0;
  for (int i = 0; i < trainer::kNumParamTensors; ++i) {
    if (trainer::ParamLayout::per_block(i)) block += pl.sizes[static_cast<size_t>(i)];
  }
  const double ms_per_elem = all_reduce / static_cast<double>(pl.total);
  const double g = ms_per_elem * static_cast<double>(block) / L / 2;  // one block's gather
  const double non_block = ms_per_elem * static_cast<double>(pl.total - block);  // RS + gather
  const double f = fwd_blocks / (L * K), b = bwd_blocks / (L * K);  // one block, one micro-batch
  const double per_micro = 2 * g + (L - 1) * (std::max(0.0, g - f) + std::max(0.0, 2 * g - b)) + g;
  const double exposed = K * per_micro + non_block;
  z.delta_ms = exposed - exposed_dp;
  z.ok = true;
  z.basis = fmt::format(
      "{:+.1f} ms: gathers and reduce-scatters priced by this run's all-reduces ({:.1f} ms a "
      "step, {}), {:.1f} ms exposed against its {:.1f} ms",
      z.delta_ms, all_reduce,
      transfer ? "their transfer across the ranks"
               : "waits for the other ranks included: an upper bound",
      exposed, exposed_dp);
  return z;
}

}  // namespace

void add_memory_options(const trainer::TrainConfig& c, double measured_peak, double step_ms,
                        bool completed, profiler::Trace* trace, double all_reduce_transfer_ms) {
  double base = 0;
  try {
    base =
        static_cast<double>(tuner::predict_memory(c, tuner::ParallelLayout::of(c.parallel)).peak);
  } catch (const Error&) {
    return;  // a layout the memory model cannot price: the findings keep their plain knobs
  }
  if (base <= 0) return;
  // A run that stopped out of memory peaked below its need: its peak calibrates nothing, and
  // without a completed step there is no step time to build on.
  const double scale = completed && measured_peak > 0 ? measured_peak / base : 1.0;
  if (!completed) step_ms = -1;
  const double fwd_blocks = per_step_ms(*trace, "fwd.block");
  const double gemm = per_step_ms(*trace, "matmul.fwd") + per_step_ms(*trace, "matmul.bwd");
  struct Option {
    std::string knob;
    trainer::TrainConfig config;
    double step_ms;  // < 0: not predicted
    std::string basis;
  };
  std::vector<Option> options;
  const int L = c.model.num_layers;
  if (c.options.checkpointing != trainer::Checkpointing::kBlock) {
    trainer::TrainConfig v = c;
    v.options.checkpointing = trainer::Checkpointing::kBlock;
    // Every block but the last is recomputed in backward: its forward again.
    options.push_back({"--checkpoint block", v, step_ms + fwd_blocks * (L - 1) / std::max(1, L),
                       fmt::format("+{:.1f} ms of recomputed forward blocks",
                                   fwd_blocks * (L - 1) / std::max(1, L))});
  }
  if (c.micro_batch > 1 && c.micro_batch % 2 == 0) {
    trainer::TrainConfig v = c;
    v.micro_batch /= 2;
    v.grad_accum *= 2;
    options.push_back({fmt::format("--micro-batch {} --grad-accum {}", v.micro_batch, v.grad_accum),
                       v, step_ms, "the same FLOPs per step (GEMMs of half the rows)"});
  }
  if (c.parallel.dp > 1 && c.parallel.tp == 1 && c.parallel.pp == 1 && c.parallel.zero < 3) {
    trainer::TrainConfig v = c;
    v.parallel.zero = 3;
    const Zero3Step z = zero3_step(c, *trace, fwd_blocks, all_reduce_transfer_ms);
    options.push_back({"--zero 3", v, z.predicted(step_ms), z.basis});
  }
  if (!c.init_from.empty() && !c.options.lora.enabled() && c.parallel.size() == 1 &&
      c.options.precision != trainer::Precision::kFp16) {
    trainer::TrainConfig v = c;
    v.options.lora.rank = 8;
    // No weight-gradient GEMMs: a third of the GEMM FLOPs.
    options.push_back({"--qlora", v, step_ms - gemm / 3,
                       fmt::format("-{:.1f} ms of weight-gradient GEMMs", gemm / 3)});
  }
  for (const Option& o : options) {
    double peak = 0;
    try {
      peak = static_cast<double>(
          tuner::predict_memory(o.config, tuner::ParallelLayout::of(o.config.parallel)).peak);
    } catch (const Error&) {
      continue;
    }
    const std::string key = "run.memory_option." + o.knob;
    trace->metadata[key + ".peak"] = fmt::format("{:.0f}", peak * scale);
    if (step_ms >= 0 && o.step_ms >= 0) {
      trace->metadata[key + ".step_ms"] = fmt::format("{:.3f}", o.step_ms);
    }
    trace->metadata[key + ".basis"] =
        step_ms >= 0 ? o.basis : "the run completed no step: its step time is not predicted";
  }
}

}  // namespace ft::diagnose
