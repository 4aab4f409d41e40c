// ft_train_main.cpp: the ft-train command: trains the embedded GPT and prints a per-step table.
#include <fmt/format.h>

#include <atomic>
#include <csignal>
#include <cstdlib>
#include <cstdio>
#include <fstream>
#include <iostream>

#include "cli_main.h"
#include "ft/core/allocator.h"
#include "ft/core/env_info.h"
#include "ft/core/error.h"
#include "ft/profiler/trace_writer.h"
#include "ft/app/training_profile.h"
#include "ft/trainer/checkpoint_io.h"
#include "ft/trainer/device.h"
#include "ft/trainer/grad_sync.h"
#include "ft/trainer/matmul.h"
#include "ft/trainer/trainer.h"

namespace {

std::atomic<bool> g_interrupted{false};
void on_signal(int) { g_interrupted = true; }

using ft::trainer::StepMetrics;
using ft::trainer::TrainConfig;
using ft::trainer::Trainer;

void print_header(const TrainConfig& c, Trainer& t) {
  const ft::EnvInfo env = ft::collect_env_info();
  const auto& g = c.model;
  const auto act = t.backend().activation_memory(c.micro_batch, c.seq_len);
  const auto& model = t.model();
  fmt::print("ft-train  model {}  params {:.2f}M{}  flops/token {:.3g}\n", g.describe(),
             model.full_layout().total / 1e6,
             model.tp_size() > 1 ? fmt::format(" (tp {}: {:.2f}M per rank; activations and "
                                               "memory below are per rank)",
                                               model.tp_size(), model.num_params() / 1e6)
                                 : std::string(),
             ft::trainer::flops_per_token(g, c.seq_len, !model.qlora()));
  fmt::print("  batch B={} T={} K={} (global {} tokens)  precision {}  checkpoint {}  attention {}\n",
             c.micro_batch, c.seq_len, c.grad_accum,
             static_cast<long>(c.micro_batch) * c.seq_len * c.grad_accum * c.parallel.dp,
             ft::trainer::precision_name(c.options.precision),
             ft::trainer::checkpointing_name(c.options.checkpointing),
             fmt::format("{}{}", ft::trainer::attention_name(c.options.attention),
                         c.attention_auto ? " (auto)" : ""));
  if (model.qlora()) {
    // The bytes the model state holds: frozen fp32 tensors, NF4 linears, adapters with their
    // gradients and AdamW moments; full fine-tuning holds 16 bytes per parameter.
    const size_t frozen = model.num_params() * sizeof(float), nf4 = model.nf4_bytes();
    const size_t adapters = model.lora_num_params() * sizeof(float) * 4;
    const size_t linears = model.full_layout().total - model.num_params();
    fmt::print("  qlora r={} alpha={} on {}: NF4 linears {} ({:.2f} bits/weight), frozen fp32 {}, "
               "adapters {:.3f}M params ({} with grads and AdamW); model state {} vs {} for full "
               "fine-tuning ({:.1f}x less)\n",
               c.options.lora.rank, c.options.lora.alpha, c.options.lora.targets_text(),
               ft::format_bytes(nf4), 8.0 * nf4 / std::max<size_t>(linears, 1),
               ft::format_bytes(frozen), model.lora_num_params() / 1e6, ft::format_bytes(adapters),
               ft::format_bytes(frozen + nf4 + adapters),
               ft::format_bytes(model.full_layout().total * 16),
               16.0 * model.full_layout().total / std::max<size_t>(frozen + nf4 + adapters, 1));
  }
  fmt::print("  activations saved {} (without checkpointing {}, saved {})\n",
             ft::format_bytes(act.saved_bytes), ft::format_bytes(act.no_checkpoint_bytes),
             ft::format_bytes(act.no_checkpoint_bytes - act.saved_bytes));
  const auto& par = c.parallel;
  const int world = t.groups().world->world_size();
  if (world > 1 || par.zero > 0) {
    const ft::trainer::GradSync* gs = t.grad_sync();
    fmt::print("  parallel dp {} x tp {} x pp {} = {} ranks, zero {}; {} gradient buckets of >= {} "
               "MiB, overlap {}; comm timeout {:.0f} s\n",
               par.dp, par.tp, par.pp, world, par.zero,
               gs ? gs->layout().buckets().size() : size_t{0}, par.bucket_mb,
               par.overlap ? "on" : "off", par.comm_timeout_s);
    if (par.dp > 1) {
      fmt::print("  global batch: each DP rank takes {} of every {} micro-batches (one process: "
                 "--grad-accum {})\n",
                 c.grad_accum, c.grad_accum * par.dp, c.grad_accum * par.dp);
    }
  }
  fmt::print("  data {}\n", t.data_split().description);
  fmt::print("  loader workers {}  prefetch {}  preprocess-cost {}  shuffle {}\n", c.loader_workers,
             c.prefetch, c.preprocess_cost, c.shuffle ? "on" : "off");
  fmt::print("  GEMM {}  threads {}  CPU {} ({} logical, {})\n", ft::trainer::Gemm::library_info(),
             c.threads, env.cpu_model, env.logical_cpus, env.vector_width());
  const auto core = env.variables.count("OPENBLAS_CORETYPE") ? env.variables.at("OPENBLAS_CORETYPE")
                                                             : std::string("unset");
  fmt::print("  OPENBLAS_CORETYPE={} (ft's GEMMs do not use OpenBLAS)  OMP_PROC_BIND={} OMP_PLACES={}\n",
             core, env.variables.count("OMP_PROC_BIND") ? env.variables.at("OMP_PROC_BIND") : "unset",
             env.variables.count("OMP_PLACES") ? env.variables.at("OMP_PLACES") : "unset");
  const int ranks = t.groups().world->world_size();
  fmt::print("  MFU peak {:.0f} GFLOP/s ({}){}\n", t.peak_gflops(), t.peak_source(),
             ranks > 1 ? fmt::format(" per rank; MFU = the model's flops (6N + 12LCT per token, "
                                     "not TP's replicated work) / (peak x {} ranks)",
                                     ranks)
                       : std::string());
  std::string no_cuda;
  const auto gpus = ft::trainer::cuda_devices(&no_cuda);
  fmt::print("  backend {}; CUDA {}\n", t.backend().describe(),
             gpus.empty() ? "unavailable: " + no_cuda
                          : fmt::format("{} device(s), first {} (sm_{}{})", gpus.size(),
                                        gpus[0].name, gpus[0].sm_major, gpus[0].sm_minor));
  if (c.device == ft::trainer::DeviceKind::kCuda) {
    fmt::print("  input path --h2d {}{}\n", c.h2d,
               c.h2d_payload_mb ? fmt::format(" (+{} MiB side input per batch)", c.h2d_payload_mb)
                                : std::string());
  }
  if (c.memory_limit) fmt::print("  memory limit {}\n", ft::format_bytes(c.memory_limit));
  fmt::print("{:>6} {:>8} {:>9} {:>9} {:>9} {:>10} {:>6} {:>10} {:>10} {:>10}\n", "step", "loss",
             "lr", "gnorm", "ms", "tok/s", "MFU%", "mem", "reserved", "peak");
}

void print_step(const StepMetrics& m, double val_loss) {
  fmt::print("{:>6} {:>8.4f} {:>9.2e} {:>9.3f} {:>9.1f} {:>10.0f} {:>6.1f} {:>10} {:>10} {:>10}{}{}\n",
             m.step, m.loss, m.lr, m.grad_norm, m.step_ms, m.tokens_per_s, 100 * m.mfu,
             ft::format_bytes(m.mem_allocated), ft::format_bytes(m.mem_reserved),
             ft::format_bytes(m.mem_peak), m.skipped ? "  (skipped: fp16 overflow)" : "",
             val_loss >= 0 ? fmt::format("  val {:.4f}", val_loss) : "");
  std::fflush(stdout);
}

// --trace / --profile-steps: the profiler path ft-diagnose run uses too (null when off).
std::unique_ptr<ft::app::TrainingProfile> start_profiler(const TrainConfig& c, Trainer& t) {
  ft::profiler::enable_nvtx_if_tool_attached();  // Nsight Systems sees ft's phases
  if (c.trace.empty() && c.profile_steps.empty()) return nullptr;
  auto p = std::make_unique<ft::app::TrainingProfile>(c.profile_steps);
  p->start(t);
  return p;
}

// Writes the trace; a failure is reported and never fails the training run.
void finish_profiler(ft::app::TrainingProfile& p, const TrainConfig& c, Trainer& t) {
  const std::string path = c.trace.empty() ? std::string("trace.json") : c.trace;
  try {
    const ft::profiler::Trace trace = p.finish(t);
    size_t steps = 0;
    for (const auto& e : trace.events) steps += e.category == ft::profiler::Category::kStep;
    if (steps == 0 && !c.profile_steps.empty()) {
      fmt::print(stderr, "ft-train: warning: no step of --profile-steps {} was run\n",
                 c.profile_steps);
    }
    const uint64_t bytes = ft::profiler::write_trace_json(trace, path);
    fmt::print("trace: {} ({} events, {} steps, {} bytes = {:.0f} per step, {} dropped; "
               "device: {})\n",
               path, trace.events.size(), steps, bytes, steps ? double(bytes) / steps : 0.0,
               trace.dropped_events, p.session().device_status());
  } catch (const std::exception& e) {
    fmt::print(stderr, "ft-train: warning: trace '{}' not written: {}\n", path, e.what());
  }
}

int run(int argc, char** argv) {
  auto parsed = ft::trainer::parse_train_args(argc, argv);
  if (!parsed) return 0;
  TrainConfig c = *parsed;
  // Under mpirun: the world communicator; each rank writes its own metrics and trace
  // (FILE.rankN.ext) and only rank 0 prints the table.
  auto world = ft::trainer::make_world_communicator(c.parallel.comm_timeout_s);
  if (world->world_size() > 1) {
    const int r = world->rank();
    if (!c.metrics.empty()) c.metrics = ft::trainer::rank_path(c.metrics, r);
    if (!c.trace.empty()) c.trace = ft::trainer::rank_path(c.trace, r);
    if (r != 0) c.quiet = true;
  }
  // Declared before the trainer so that it outlives any thread the trainer runs.
  std::unique_ptr<ft::app::TrainingProfile> profiler;
  Trainer t(c, std::move(world));
  c = t.config();
  const size_t mem_at_start = t.memory_stats().allocated;
  std::ofstream metrics;
  if (!c.metrics.empty()) {
    metrics.open(c.metrics, std::ios::out | std::ios::trunc);
    if (!metrics) throw ft::IoError("cannot open metrics file '" + c.metrics + "'");
  }
  if (!c.quiet) print_header(c, t);
  profiler = start_profiler(c, t);
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);

  ft::trainer::TrainSummary sum;
  double tok_sum = 0, ms_sum = 0, mfu_sum = 0, wait_sum = 0, pre_sum = 0, comm_sum = 0;
  int counted = 0;
  double last_val = -1;
  const int first = t.next_step();
  while (!t.done() && !g_interrupted) {
    StepMetrics m = t.step();
    double val = -1;
    const bool stopping = c.stop_after > 0 && t.next_step() - first >= c.stop_after;
    const bool last = t.done() || stopping;
    if ((c.val_every > 0 && (m.step + 1) % c.val_every == 0) || last) {
      val = t.evaluate();
      last_val = val;
    }
    if (!c.quiet) print_step(m, val);
    if (metrics) {
      auto j = m.to_json();
      if (val >= 0) j["val_loss"] = val;
      metrics << j.dump() << "\n";
      metrics.flush();
    }
    if (m.step - first >= c.warmup_steps_excluded || t.config().steps - first <= c.warmup_steps_excluded) {
      tok_sum += m.tokens_per_s;
      ms_sum += m.step_ms;
      mfu_sum += m.mfu;
      wait_sum += m.data_wait_ms;
      pre_sum += m.data_preprocess_ms;
      comm_sum += m.comm_ms;
      ++counted;
    }
    sum.final_loss = m.loss;
    sum.skipped_steps += m.skipped;
    ++sum.steps_run;
    if (!c.save_dir.empty() && c.save_every > 0 && t.next_step() % c.save_every == 0) {
      t.save(c.save_dir);
    }
    if (stopping) break;
  }
  if (g_interrupted) fmt::print(stderr, "ft-train: interrupted after step {}\n", t.next_step() - 1);
  if (profiler) finish_profiler(*profiler, c, t);
  if (!c.save_dir.empty()) t.save(c.save_dir);
  if (!c.merge_lora.empty()) t.write_merged(c.merge_lora);
  if (!c.export_llmc.empty()) {
    t.sync_host_state();  // --device cuda: the device's parameters into the host model
    // Tensor parallel: the shards are gathered (collective); rank 0 writes the whole model.
    const std::vector<float> full = t.model().gather_full_params();
    if (t.groups().world->rank() == 0) {
      ft::trainer::write_llmc_model(c.export_llmc, c.model, full.data());
    }
  }
  if (counted) {
    sum.mean_tokens_per_s = tok_sum / counted;
    sum.mean_step_ms = ms_sum / counted;
    sum.mean_mfu = mfu_sum / counted;
    sum.mean_data_wait_ms = wait_sum / counted;
    sum.mean_data_preprocess_ms = pre_sum / counted;
    sum.mean_comm_ms = comm_sum / counted;
  }
  sum.val_loss = last_val;
  sum.memory = t.memory_stats();
  sum.mem_at_start = mem_at_start;
  sum.activations = t.backend().activation_memory(c.micro_batch, c.seq_len);
  if (metrics) metrics << nlohmann::json{{"summary", sum.to_json()}}.dump() << "\n";
  if (c.quiet && t.groups().world->rank() != 0) return g_interrupted ? 130 : 0;  // rank 0 reports
  fmt::print(
        "summary: {} steps, mean {:.0f} tok/s ({:.1f} ms/step, MFU {:.1f}%) after {} warm-up "
        "steps, final loss {:.4f}, val loss {}, peak memory {} (reserved {}, {:.1f}% of it unused at peak; "
        "cache fragmentation {:.1f}%; {} held before step 0)\n",
        sum.steps_run, sum.mean_tokens_per_s, sum.mean_step_ms, 100 * sum.mean_mfu,
        c.warmup_steps_excluded, sum.final_loss,
        sum.val_loss >= 0 ? fmt::format("{:.4f}", sum.val_loss) : std::string("n/a"),
        ft::format_bytes(sum.memory.peak_allocated), ft::format_bytes(sum.memory.peak_reserved),
        100 * sum.reserved_unused_at_peak(), 100 * sum.memory.fragmentation(),
        ft::format_bytes(sum.mem_at_start));
  if (counted) {
    fmt::print("loader: waited {:.3f} ms/step for data ({:.1f}% of step time), preprocessing {:.3f} ms/step\n",
               sum.mean_data_wait_ms, 100 * sum.data_wait_share(), sum.mean_data_preprocess_ms);
    if (t.groups().world->world_size() > 1) {
      fmt::print("comm: rank 0 blocked {:.3f} ms/step on data-parallel communication ({:.1f}% of "
                 "step time; per-rank figures in the metrics files)\n",
                 sum.mean_comm_ms, 100 * sum.comm_exposed_share());
    }
  }
  return g_interrupted ? 130 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  const int rc = ft::run_command_line("ft-train", [&] { return run(argc, argv); });
  // One rank's failure ends the whole job at once instead of leaving its peers to time out.
  if (rc != 0 && rc != 130 && ft::trainer::launched_by_mpi()) ft::trainer::abort_job(rc);
  ft::trainer::finalize_comm();
  return rc;
}
