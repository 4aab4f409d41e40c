// loader_bench.cpp: loader batches/s against worker count and preprocessing cost, and data-wait
// share of ft-train steps.
//
//   loader_bench [--seconds S] [--steps N] [--costs 0,200] [--train-costs 0,2000]
//                [--workers 0,1,2,4] [--skip-train]
//
// Part 1 drains the loader alone on the KJV corpus (byte tokens) for S seconds per setting:
// B8 T128 (the default training shape) and a heavier B32 T512. Part 2 trains the default
// configuration (L4 C128 T128 B8, as scripts/setup.sh) for N steps at 0, 1 and 2 workers,
// without and with preprocessing cost, and reports the loader's wait as a share of step time.
#include <fmt/format.h>
#include <sys/resource.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "ft/core/error.h"
#include "ft/trainer/loader.h"
#include "ft/trainer/trainer.h"

namespace {

using namespace ft::trainer;
using Clock = std::chrono::steady_clock;

std::vector<int> parse_list(const std::string& s) {
  std::vector<int> v;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, ',')) v.push_back(std::stoi(item));
  return v;
}

double cpu_ms();

struct LoaderRun {
  double cpu_ms_per_batch = 0;
  double batches_per_s = 0, mean_preprocess_ms = 0, mean_wait_ms = 0;
  long batches = 0;
};

LoaderRun drain(std::shared_ptr<const data::ChunkedDataset> ds, int B, int T, int workers, int cost,
                double seconds) {
  data::LoaderOptions o;
  o.batch_size = B;
  o.seq_len = T;
  o.workers = workers;
  o.prefetch = 4;
  o.preprocess_cost = cost;
  o.timing_capacity = 0;
  data::PrefetchLoader l(ds, o);
  data::Batch b;
  LoaderRun r;
  double pre = 0, wait = 0;
  uint64_t sink = 0;
  const auto t0 = Clock::now();
  const double c0 = cpu_ms();
  double elapsed = 0;
  while (elapsed < seconds) {
    if (!l.next(b)) break;
    sink += static_cast<uint64_t>(b.inputs()[0]) + b.checksum;
    pre += b.timing.preprocess_ns / 1e6;
    wait += b.timing.wait_ns / 1e6;
    ++r.batches;
    elapsed = std::chrono::duration<double>(Clock::now() - t0).count();
  }
  r.batches_per_s = r.batches / elapsed;
  r.cpu_ms_per_batch = (cpu_ms() - c0) / r.batches;
  r.mean_preprocess_ms = pre / r.batches;
  r.mean_wait_ms = wait / r.batches;
  if (sink == 42) std::printf(" ");
  return r;
}

struct TrainRun {
  double step_ms = 0, wait_ms = 0, preprocess_ms = 0;
};

TrainRun train(int workers, int cost, int steps) {
  TrainConfig c;
  c.model.num_layers = 4;
  c.model.num_heads = 4;
  c.model.channels = 128;
  c.model.vocab_size = 256;
  c.model.padded_vocab = 256;
  c.model.max_seq_len = 128;
  c.seq_len = 128;
  c.micro_batch = 8;
  c.steps = steps;
  c.warmup = 10;
  c.lr = 2e-3f;
  c.threads = 0;
  c.loader_workers = workers;
  c.preprocess_cost = cost;
  Trainer t(c);
  TrainRun r;
  int counted = 0;
  for (int s = 0; s < steps; ++s) {
    const StepMetrics m = t.step();
    if (s < 2) continue;  // the first steps create GEMM primitives
    r.step_ms += m.step_ms;
    r.wait_ms += m.data_wait_ms;
    r.preprocess_ms += m.data_preprocess_ms;
    ++counted;
  }
  r.step_ms /= counted;
  r.wait_ms /= counted;
  r.preprocess_ms /= counted;
  return r;
}

// CPU time of the whole process (all threads), in ms.
double cpu_ms() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return (u.ru_utime.tv_sec + u.ru_stime.tv_sec) * 1e3 +
         (u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e3;
}

double load_average() {
  double l[3] = {0, 0, 0};
  return getloadavg(l, 3) > 0 ? l[0] : -1;
}

}  // namespace

int main(int argc, char** argv) {
  double seconds = 1.5;
  int steps = 12;
  bool skip_train = false;
  std::vector<int> costs{0, 200}, train_costs{0, 2000}, workers{0, 1, 2, 4};
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto val = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--seconds")
      seconds = std::stod(val());
    else if (a == "--steps")
      steps = std::stoi(val());
    else if (a == "--costs")
      costs = parse_list(val());
    else if (a == "--train-costs")
      train_costs = parse_list(val());
    else if (a == "--workers")
      workers = parse_list(val());
    else if (a == "--skip-train")
      skip_train = true;
    else {
      std::fprintf(stderr,
                   "usage: loader_bench [--seconds S] [--steps N] [--costs 0,200] "
                   "[--train-costs 0,2000] "
                   "[--workers 0,1,2,4] [--skip-train]\n");
      return 2;
    }
  }
  try {
    auto tok = std::make_shared<data::ByteTokenizer>();
    fmt::print("loader_bench: load average {:.2f} at start\n", load_average());
    fmt::print("\n## loader alone (KJV, byte tokens), {:.1f} s per setting\n", seconds);
    fmt::print(
        "| shape | preprocess-cost | workers | batches/s | CPU ms/batch | preprocess ms/batch | "
        "wait ms/batch |\n");
    fmt::print("|---|---|---|---|---|---|---|\n");
    for (auto [B, T] : {std::pair{8, 128}, std::pair{32, 512}}) {
      data::DataOptions dopt;
      dopt.seq_len = T;
      const data::DataSplit split = data::open_data("kjv", tok, dopt);
      for (int cost : costs) {
        for (int w : workers) {
          const LoaderRun r = drain(split.train, B, T, w, cost, seconds);
          fmt::print("| B{} T{} | {} | {} | {:.0f} | {:.3f} | {:.3f} | {:.3f} |\n", B, T, cost, w,
                     r.batches_per_s, r.cpu_ms_per_batch, r.mean_preprocess_ms, r.mean_wait_ms);
          std::fflush(stdout);
        }
      }
    }
    if (!skip_train) {
      fmt::print(
          "\n## ft-train default config (L4 C128 T128 B8, KJV), {} steps, first 2 excluded\n",
          steps);
      fmt::print(
          "| preprocess-cost | workers | step ms | data wait ms | wait share | preprocess ms |\n");
      fmt::print("|---|---|---|---|---|---|\n");
      for (int cost : train_costs) {
        for (int w : {0, 1, 2}) {
          const TrainRun r = train(w, cost, steps);
          fmt::print("| {} | {} | {:.1f} | {:.3f} | {:.1f}% | {:.3f} |\n", cost, w, r.step_ms,
                     r.wait_ms, 100 * r.wait_ms / r.step_ms, r.preprocess_ms);
          std::fflush(stdout);
        }
      }
    }
    fmt::print("\nload average {:.2f} at end\n", load_average());
  } catch (const ft::Error& e) {
    std::fprintf(stderr, "loader_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
