// parallel.h: the distributed layout (DP x TP x PP, ZeRO stage, buckets) and the process groups built from it.
#pragma once

#include <memory>
#include <string>

#include "ft/trainer/communicator.h"

namespace ft::trainer {

struct ParallelConfig {
  int dp = 1;                 // data-parallel degree
  int tp = 1;                 // tensor-parallel degree (Megatron column/row split)
  int pp = 1;                 // pipeline stages (1F1B over the step's micro-batches)
  int zero = 0;  // 0 | 1 (optimizer states sharded) | 2 (+ gradients) | 3 (+ parameters)
  double bucket_mb = 25;      // gradient bucket size for the DP all-reduce (MiB of fp32)
  bool overlap = true;        // all-reduce buckets on a comm thread while backward runs
  double comm_timeout_s = 120;  // any single collective longer than this fails the job
  int straggle_rank = -1;     // fault injection: this world rank does extra real compute ...
  int straggle_work = 0;      // ... of this many GEMM passes (C x C x B*T) every step
  int size() const { return dp * tp * pp; }
  void validate() const;  // throws ConfigError (degrees >= 1, zero in 0..3, bucket > 0)
};

// This rank's coordinates and its three groups. World rank layout (TP innermost,
// as in Megatron-LM): world = (pp_stage * dp + dp_rank) * tp + tp_rank.
struct ParallelGroups {
  std::unique_ptr<Communicator> world;
  std::unique_ptr<Communicator> dp;  // same tp_rank and stage
  std::unique_ptr<Communicator> tp;  // same dp_rank and stage
  std::unique_ptr<Communicator> pp;  // same dp_rank and tp_rank; group rank = stage
  int dp_rank = 0, tp_rank = 0, pp_stage = 0;
  // Splits `world` (size must equal cfg.size(), else ConfigError naming both).
  static ParallelGroups make(std::unique_ptr<Communicator> world, const ParallelConfig& cfg);
  std::string describe() const;
};

// "m.jsonl" -> "m.rank1.jsonl" (per-rank outputs of a multi-process run).
std::string rank_path(const std::string& path, int rank);

}  // namespace ft::trainer
