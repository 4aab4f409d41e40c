// schedule.cpp: learning-rate schedule and loss scaler.
#include "ft/trainer/schedule.h"

#include <algorithm>
#include <cmath>

namespace ft::trainer {

float learning_rate(int step, int total, int warmup, float lr, float min_lr) {
  if (warmup > 0 && step < warmup) return lr * static_cast<float>(step + 1) / warmup;
  const int decay_steps = total - 1 - warmup;
  if (decay_steps <= 0) return lr;
  const double progress = std::clamp(static_cast<double>(step - warmup) / decay_steps, 0.0, 1.0);
  const double coeff = 0.5 * (1.0 + std::cos(M_PI * progress));
  return static_cast<float>(min_lr + coeff * (lr - min_lr));
}

bool LossScaler::update(bool found_overflow) {
  if (found_overflow) {
    ++overflows;
    scale = std::max(min_scale, scale * 0.5f);
    clean_steps = 0;
    return true;
  }
  if (++clean_steps >= growth_interval) {
    scale = std::min(max_scale, scale * 2.0f);
    clean_steps = 0;
  }
  return false;
}

}  // namespace ft::trainer
