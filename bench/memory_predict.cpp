// memory_predict.cpp: the memory model's prediction of one rank's allocator peak for ft-train's
// flags, term by term (bench/memory_model_bench.sh sets it beside the measured peaks).
#include <cstdio>
#include <exception>

#include "ft/trainer/train_config.h"
#include "ft/tuner/memory_model.h"

int main(int argc, char** argv) {
  try {
    const auto c = ft::trainer::parse_train_args(argc, argv, "memory_predict");
    if (!c) return 0;
    const ft::tuner::MemoryEstimate m =
        ft::tuner::predict_memory(*c, ft::tuner::ParallelLayout::of(c->parallel));
    std::printf("predicted %zu (%s)\n", m.peak, m.phase_at_peak.c_str());
    for (const auto& [term, bytes] : m.components())
      std::printf("  %-22s %12zu\n", term.c_str(), bytes);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "memory_predict: %s\n", e.what());
    return 2;
  }
}
