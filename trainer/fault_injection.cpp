// fault_injection.cpp: the straggler fault injection (extra GEMMs on one rank each step).
#include "fault_injection.h"

#include <vector>

#include "ft/core/annotate.h"
#include "ft/trainer/matmul.h"

namespace ft::trainer {
namespace {

// Operands kept across steps: first touch of fresh memory is expensive here, and the work
// should cost the same every step.
struct Operands {
  std::vector<float> in, weight, out;
  double sink = 0;  // every GEMM's result feeds it
};

}  // namespace

int run_straggle_work(const ParallelConfig& p, int world_rank, GptModel& model, int B, int T) {
  if (p.straggle_work <= 0 || world_rank != p.straggle_rank) return 0;
  FT_RANGE("fault.straggle", RangeKind::kCompute, p.straggle_work);
  const int C = model.config().channels;
  const int N = B * T;
  static thread_local Operands ops;
  const size_t nin = static_cast<size_t>(N) * C, nw = static_cast<size_t>(C) * C;
  if (ops.in.size() != nin || ops.weight.size() != nw) {
    ops.in.assign(nin, 0.0f);
    ops.weight.assign(nw, 0.0f);
    ops.out.assign(nin, 0.0f);
    // Small values that stay away from denormals (a GEMM over them costs what a real one does).
    for (size_t i = 0; i < nin; ++i) ops.in[i] = 0.5f + 0.25f * static_cast<float>(i % 7);
    for (size_t i = 0; i < nw; ++i) ops.weight[i] = 0.01f * static_cast<float>(1 + i % 5);
  }
  for (int k = 0; k < p.straggle_work; ++k) {
    model.gemm().forward(ops.out.data(), ops.in.data(), ops.weight.data(), nullptr, nullptr, N, C,
                         C, Precision::kFp32);
    ops.sink += ops.out[static_cast<size_t>(k) % nin];
  }
  return p.straggle_work;
}

}  // namespace ft::trainer
