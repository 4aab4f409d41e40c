// memory_options.h: the memory knobs' predicted peak and step time for an `ft-diagnose run`.
#pragma once

#include "ft/profiler/event.h"
#include "ft/trainer/train_config.h"

namespace ft::diagnose {

// Adds run.memory_option.<knob>.{peak,step_ms,basis} to the trace's metadata for the knobs that
// would lower the run's memory (--checkpoint block, a micro-batch split at the same global
// batch, --zero 3 under --dp, --qlora for a fine-tuning run): the memory model's peak scaled by
// this run's measured / predicted peak, and the step from this run's measured phases; a run
// that did not complete (out of memory) calibrates nothing and predicts no step time.
// `all_reduce_transfer_ms` (>= 0: measured across the ranks, the waits for the slowest rank
// left out) prices ZeRO-3's gathers; else the rank's own all-reduce time, waits included.
void add_memory_options(const trainer::TrainConfig& config, double measured_peak, double step_ms,
                        bool completed, profiler::Trace* trace,
                        double all_reduce_transfer_ms = -1);

}  // namespace ft::diagnose
