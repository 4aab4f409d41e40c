// step_observer.h: the hook an engine calls around every optimizer step, and the metrics it reports.
#pragma once

#include <cstddef>
#include <cstdint>

#include <nlohmann/json.hpp>

namespace ft {

// One optimizer step as the engine measured it. Engine-neutral: a profiler reads these fields
// without knowing which engine produced them.
struct StepMetrics {
  int step = 0;             // 0-based optimizer step
  double loss = 0;          // mean training loss over the global batch
  float lr = 0;
  double grad_norm = 0;     // before clipping (unscaled)
  double step_ms = 0;
  double tokens_per_s = 0;
  double mfu = 0;           // fraction of the stated peak
  bool skipped = false;     // fp16 overflow: update skipped
  float loss_scale = 1.0f;
  size_t mem_allocated = 0, mem_reserved = 0, mem_peak = 0;
  double data_ms = 0;       // time spent in the loader's next() (training thread)
  double data_wait_ms = 0;  // of which blocked waiting for a batch (in-line: all of it)
  double data_preprocess_ms = 0;  // preprocessing of this step's batches (worker side)
  double pp_busy_ms = 0;          // pipeline (--pp > 1): this stage's forward/backward compute
  double pp_wait_ms = 0;          // pipeline: blocked on neighbour stages (the bubble)
  // Training thread blocked on data-parallel communication: waiting for the gradient buckets
  // (without overlap: all of their synchronisation), the loss and norm reductions and ZeRO's
  // parameter all-gather. 0 on one process.
  double comm_ms = 0;
  double comm_exposed_share() const { return step_ms > 0 ? comm_ms / step_ms : 0; }
  nlohmann::json to_json() const;
};

// Sees every optimizer step (e.g. a profiler session). Called on the training thread;
// implementations must not throw.
class StepObserver {
 public:
  virtual ~StepObserver() = default;
  virtual void on_step_begin(int64_t step) noexcept = 0;
  virtual void on_step_end(const StepMetrics& metrics) noexcept = 0;
};

}  // namespace ft
