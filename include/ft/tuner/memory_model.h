// memory_model.h: predicts a training configuration's peak memory before running it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "ft/trainer/train_config.h"

namespace ft::tuner {

// Where the predicted peak goes, in bytes. The peak is
//   model_states + activations + max(head_transient, block_transient) + batch.
struct MemoryEstimate {
  // Model states (Rajbhandari et al.'s "model states"), per rank.
  size_t params = 0;     // fp32 master weights: 4 P
  size_t grads = 0;      // fp32 gradients: 4 P (ZeRO-2 too: ft keeps the flat buffer)
  size_t optimizer = 0;  // AdamW m and v: 8 P (/ dp with ZeRO-1 and 2)
  size_t low_precision_weights = 0;  // bf16 (2 P) or fp16-rounded (4 P) shadow; fp32: 0
  // QLoRA (--qlora): params holds the frozen fp32 tensors only (no grads); the block linears
  // are NF4 (~4.13 bits a weight: codes, E4M3 absmaxes, fp32 scales), and the adapters
  // (r (IC + OC) per targeted linear and layer) keep fp32 values and gradients here, their
  // AdamW moments in `optimizer`.
  size_t nf4 = 0;
  size_t adapters = 0;
  // Data parallelism without ZeRO-3: GradSync's bucket staging (the largest bucket; ZeRO-2 a
  // receive buffer of a bucket / dp too).
  size_t comm_buffers = 0;
  // Activations kept from forward to backward (Korthikanti et al. style, ft's fp32 storage):
  // per block 4 B T (16 C + 4) bytes plus attention state (B NH T lse for flash, B NH T^2
  // probabilities for naive); with block recompute only the residual stream at each block
  // input, (L+1) 4 B T C, plus one block's working set.
  size_t activations = 0;
  size_t activations_per_layer = 0;
  // Largest transient on top of that: the LM-head phase (logits chunk, dlnf, dres and GEMM
  // operand conversions) or one block's backward (dres, two gradient scratches and the
  // conversions of its GEMM operands).
  size_t head_transient = 0;
  size_t block_transient = 0;
  size_t batch = 0;  // input and target ids
  size_t peak = 0;
  std::string phase_at_peak;  // "lm-head" or "block backward"

  // One line per component, for reports.
  std::vector<std::pair<std::string, size_t>> components() const;
};

struct ParallelLayout {
  int dp = 1;          // data-parallel ranks sharing ZeRO state
  int zero_stage = 0;  // 0, 1 (optimizer states sharded), 2 (and gradients), 3 (and parameters)
  int tp = 1;          // tensor-parallel ranks: QKV/FC1 rows and attproj/FC2 columns sharded
  int pp = 1;      // pipeline stages: blocks split evenly (the first L % pp stages get one more)
  int stage = -1;  // the stage to predict; -1: the stage with the highest peak
  static ParallelLayout of(const trainer::ParallelConfig& p);
};

// Predicts the peak bytes the engine's caching allocator reports (`mem_peak`) for one
// training step of `config` on one rank. Parallel layouts: data parallelism adds GradSync's
// bucket staging; ZeRO divides the optimizer states (1, 2) by dp (ZeRO-2's gradients stay a
// flat buffer in ft; it adds a receive buffer); ZeRO-3 as above. Every tensor is counted as
// the block the allocator holds for it (allocator_block_bytes). Measured on 2 ranks (L4 C256
// T128 B4, --bucket-mb 1; bench/dp_bench.sh's model; 2026-12-04): DP -0.3%, ZeRO-1 -0.9%,
// ZeRO-2 +0.3%, ZeRO-3 -1.3%, one process -0.3%; the bytes requested at the peak are predicted
// to within 4 KiB in all five, the rest is recycled blocks' unsplit tails. TP and PP (a model of
// the sharded engine, not yet measured against it): TP divides the sharded block tensors, their
// activations (QKV, attention output, FC1, GELU, attention state) and the block GEMMs' operands by
// tp (LayerNorms, residual stream, embeddings and head stay whole); PP keeps a stage's blocks, the
// embeddings on stage 0 and final LayerNorm + tied head on the last, activations of up to min(m, pp
// - stage) micro-batches in flight (1F1B) plus the received activation and gradient buffers.
// Measured (tests/memory_model_test): within 0.9% on models of 24-290 MB peak across precisions,
// recompute and attention variants; what is left is a recycled large block's unsplit tail (up to 1
// MiB) that the model does not predict, because it depends on which freed block a tensor reuses.
// Accumulation does not change the peak (micro-batches run one after another). QLoRA (one rank,
// fp32 or bf16): frozen tensors without gradients, NF4 linears, adapters with their AdamW state,
// the adapters' saved activations (N r floats per adapted linear and layer) and the dequantization
// tile and adapter scratch of one linear in place of the GEMM transients. Throws ConfigError for an
// invalid model shape.
MemoryEstimate predict_memory(const trainer::TrainConfig& config, const ParallelLayout& layout = {});

// The bytes the caching allocator holds for one tensor of `bytes`: rounded to its 512-byte
// blocks, and a large tensor to the 2 MiB segment mapped for it when under 1 MiB would be left
// (BlockPool::fresh_block_size). Every term of MemoryEstimate counts its tensors this way.
size_t allocator_block_bytes(size_t bytes);

// The published rule of thumb for comparison (Korthikanti et al., 16-bit activations):
// s b h (34 + 5 a s / h) bytes per layer without recompute, 2 s b h with full recompute.
double korthikanti_activation_bytes_per_layer(int B, int T, int C, int NH, bool recompute);

}  // namespace ft::tuner
