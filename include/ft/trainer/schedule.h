// schedule.h: learning-rate schedule (linear warmup, cosine decay to a floor) and dynamic loss scaling.
#pragma once

#include <cstdint>

namespace ft::trainer {

// lr(step) for 0-based step: linear warmup over `warmup` steps from lr/warmup
// to lr, then cosine decay from lr to min_lr at step total-1.
float learning_rate(int step, int total, int warmup, float lr, float min_lr);

// fp16 dynamic loss scaling: an overflow halves the scale and skips the step;
// `growth_interval` clean steps in a row double it.
struct LossScaler {
  float scale = 65536.0f;
  int growth_interval = 1000;
  int clean_steps = 0;
  uint64_t overflows = 0;
  float min_scale = 1.0f;
  float max_scale = 16777216.0f;
  // Updates after a step; returns true if the step must be skipped.
  bool update(bool found_overflow);
};

}  // namespace ft::trainer
