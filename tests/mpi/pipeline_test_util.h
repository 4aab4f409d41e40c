// pipeline_test_util.h: set-up shared by the pipeline tests under mpirun (corpus, run, compare).
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "ft/core/atomic_file.h"
#include "ft/core/rng.h"
#include "ft/trainer/communicator.h"
#include "ft/trainer/trainer.h"
#include "test_corpus.h"

namespace ft::trainer::pipetest {

namespace fs = std::filesystem;

// Per process (pid): ranks never share files.
inline fs::path temp_dir(const std::string& name) {
  fs::path d =
      fs::temp_directory_path() / ("ft_pipeline_test_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

// A synthetic text corpus with learnable structure.
inline fs::path write_corpus(const fs::path& dir) {
  return ft::test::write_word_corpus(dir, 40);
}

// A tiny model that trains in milliseconds per step on one thread.
inline TrainConfig tiny_run(const fs::path& corpus, int layers, int micro_batches) {
  TrainConfig c;
  c.model.vocab_size = 256;
  c.model.padded_vocab = 256;
  c.model.channels = 32;
  c.model.num_heads = 4;
  c.model.num_layers = layers;
  c.model.max_seq_len = 32;
  c.seq_len = 32;
  c.micro_batch = 4;
  c.grad_accum = micro_batches;
  c.steps = 8;
  c.warmup = 2;
  c.lr = 3e-3f;
  c.min_lr = 3e-4f;
  c.threads = 1;
  c.loader_workers = 0;
  c.data = corpus.string();
  c.val_batches = 2;
  c.quiet = true;
  c.parallel.comm_timeout_s = 60;
  return c;
}

struct RunResult {
  std::vector<double> losses, norms;
  double val = -1;
};

// Trains `steps` steps (default: to the end) and evaluates.
inline RunResult train(Trainer& t, int steps = -1) {
  RunResult r;
  for (int i = 0; !t.done() && (steps < 0 || i < steps); ++i) {
    const StepMetrics m = t.step();
    r.losses.push_back(m.loss);
    r.norms.push_back(m.grad_norm);
  }
  r.val = t.evaluate();
  return r;
}

// The same run on one process (this rank alone).
inline RunResult one_process(TrainConfig c) {
  c.parallel = ParallelConfig{};
  Trainer t(c, make_local_communicator());
  return train(t);
}

// Max |a - b| over steps, printed on rank 0 with `what`.
inline double max_loss_diff(const RunResult& a, const RunResult& b, const char* what, int rank) {
  EXPECT_EQ(a.losses.size(), b.losses.size());
  double d = 0, dn = 0;
  for (size_t i = 0; i < std::min(a.losses.size(), b.losses.size()); ++i) {
    d = std::max(d, std::fabs(a.losses[i] - b.losses[i]));
    dn = std::max(dn, std::fabs(a.norms[i] - b.norms[i]) / std::max(1e-12, b.norms[i]));
  }
  if (rank == 0) {
    std::printf(
        "%s: %zu steps, loss %.6f -> %.6f, max |loss diff| %.3g, max relative grad-norm "
        "diff %.3g, val %.6f vs %.6f\n",
        what, a.losses.size(), b.losses.front(), b.losses.back(), d, dn, a.val, b.val);
  }
  return d;
}

// Losses of a run against one process: fp32 sums in a different order (the tied
// wte gradient, the norm over stages) move the losses by ~1e-6; 1e-4 absolute
// (on losses of 2.5-5.6) leaves a wide margin while catching any real mismatch
// (a wrong gradient moves them by > 1e-2 within 8 steps).
constexpr double kLossTol = 1e-4;
// bf16: the same ~1e-7 parameter differences can flip a bf16 rounding, which
// moves the losses by ~1e-5 (measured 2.4e-5); 5e-4 absolute.
constexpr double kBf16LossTol = 5e-4;

}  // namespace ft::trainer::pipetest
