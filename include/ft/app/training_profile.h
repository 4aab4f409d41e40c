// training_profile.h: the app-layer glue that profiles a Trainer's run (one Session, a step window,
// run metadata); shared by `ft-train --trace` and `ft-diagnose run`.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include "ft/app/gemm_probe.h"
#include "ft/profiler/classifier.h"
#include "ft/profiler/session.h"
#include "ft/trainer/trainer.h"

namespace ft::app {

// Usage: TrainingProfile p(window); p.start(trainer); ...trainer.step()...; Trace t =
// p.finish(trainer). The session observes the trainer (per-step counters, ProfilerStep#N spans);
// finish() adds what the classifier reads about the run ("config.*", "env.*", "run.*",
// page_fault_ns; docs/classification.md).
// This rank's CLOCK_MONOTONIC minus rank 0's, estimated through the world communicator.
struct ClockOffset {
  bool measured = false;
  int64_t offset_ns = 0;  // from the round with the shortest round trip
  int64_t error_ns = 0;   // half that round trip: the estimate's bound
  int rounds = 0;
};

// Collective over `world` (every rank calls it). Rank 0 exchanges `rounds` ping-pongs with each
// other rank in turn (NTP-style): t0 = rank 0 sends, t1 = the peer reads its clock and replies,
// t3 = rank 0 receives; offset = t1 - (t0 + t3) / 2, within +-(t3 - t0) / 2. The round with the
// shortest round trip is kept (scheduling delays only lengthen a round trip). On one host every
// rank reads the same CLOCK_MONOTONIC and the true offset is 0; the diagnosis applies offsets only
// to ranks on other hosts.
ClockOffset estimate_clock_offset(trainer::Communicator& world, int rounds = 8);

class TrainingProfile {
 public:
  // `window`: "A-B", "A" or "" (whole run). Throws ConfigError on a malformed window.
  explicit TrainingProfile(std::string_view window, bool quiet = false);

  // Measures the page-fault cost (before any profiled step), starts the session and attaches
  // it to `t`. Throws ConfigError when the window starts after the run's last step. In a
  // multi-rank run (world size > 1) every rank must call it: it also estimates this rank's
  // clock offset from rank 0 (collective; see estimate_clock_offset).
  void start(trainer::Trainer& t);
  // Detaches from `t`, collects the trace and fills its metadata.
  profiler::Trace finish(trainer::Trainer& t);

  const profiler::StepWindow& window() const { return window_; }
  profiler::Session& session() { return *session_; }

 private:
  profiler::StepWindow window_;
  bool quiet_ = false;
  double load_average_ = -1;  // 1-minute load before the run
  profiler::PageFaultCosts fault_costs_;
  GemmSpeedup gemm_speedup_;  // fp32 runs: their GEMMs' bf16 speed-up, measured in start()
  ClockOffset clock_;
  std::unique_ptr<profiler::Session> session_;
};

// The run facts TrainingProfile::finish stores, for callers that build a Trace another way:
// config (flattened TrainConfig), environment (CPU, vector ISA, GEMM library, BLAS core type,
// threads, compiler and OpenMP versions, relevant variables) and allocator totals.
std::map<std::string, std::string> run_metadata(trainer::Trainer& t);

}  // namespace ft::app
