// tuner_test.cpp: journal recovery, loss-curve verification, knob space and sweep logic
// (in-process).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

#include "ft/core/atomic_file.h"
#include "ft/core/error.h"
#include "ft/tuner/journal.h"
#include "ft/tuner/report.h"
#include "ft/tuner/search.h"
#include "ft/tuner/verify.h"

namespace ft::tuner {
namespace {

namespace fs = std::filesystem;

fs::path temp_dir(const std::string& name) {
  const fs::path d =
      fs::temp_directory_path() / ("ft_tuner_test_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

Curve decaying(int steps, double tokens_per_step, double floor = 2.0, double tau = 4000) {
  Curve c;
  for (int s = 1; s <= steps; ++s) {
    const double t = s * tokens_per_step;
    c.tokens.push_back(t);
    c.losses.push_back(floor + 3.5 * std::exp(-t / tau));
  }
  return c;
}

TEST(Verify, IdenticalCurveIsAccepted) {
  const Curve b = decaying(50, 256);
  const VerifyResult r = verify_curve(b, b);
  EXPECT_TRUE(r.accepted) << r.reason;
  EXPECT_EQ(r.compared_points, 50);
  EXPECT_NEAR(r.cand_final, r.base_final, 1e-12);
  // Smoothing = mean of the last 20% (10 points).
  double s = 0;
  for (int i = 40; i < 50; ++i) s += b.losses[static_cast<size_t>(i)];
  EXPECT_NEAR(r.base_final, s / 10, 1e-12);
}

TEST(Verify, ToleranceIsRelativePlusAbsolute) {
  const Curve b = decaying(50, 256);
  Curve inside = b, outside = b;
  for (auto& l : inside.losses) l = l * 1.015 + 0.005;  // within x1.02 + 0.01
  for (auto& l : outside.losses) l = l * 1.04 + 0.02;
  EXPECT_TRUE(verify_curve(b, inside).accepted) << verify_curve(b, inside).reason;
  const VerifyResult r = verify_curve(b, outside);
  EXPECT_FALSE(r.accepted);
  EXPECT_NE(r.reason.find("exceeds the tolerance"), std::string::npos) << r.reason;
}

TEST(Verify, NanSpikeAndDivergenceAreRejected) {
  const Curve b = decaying(50, 256);
  Curve nan = b;
  nan.losses[30] = std::nan("");
  EXPECT_NE(verify_curve(b, nan).reason.find("non-finite"), std::string::npos);
  Curve spike = b;
  spike.losses[25] += 1.5;  // one step far above the baseline at equal tokens
  const VerifyResult rs = verify_curve(b, spike);
  EXPECT_FALSE(rs.accepted);
  EXPECT_NE(rs.reason.find("spike"), std::string::npos) << rs.reason;
  // Better than the baseline for 80% of the run, then turning upward: within the final
  // tolerance and below the spike bound, but diverging.
  Curve rising = b;
  for (auto& l : rising.losses) l -= 0.3;
  for (size_t i = 40; i < 50; ++i) rising.losses[i] = rising.losses[39] + 0.05 * (i - 39);
  const VerifyResult rd = verify_curve(b, rising);
  EXPECT_FALSE(rd.accepted);
  EXPECT_NE(rd.reason.find("diverg"), std::string::npos) << rd.reason;
}

TEST(Verify, DifferentGlobalBatchComparesAtEqualTokens) {
  const Curve b = decaying(60, 256);
  const Curve big = decaying(15, 1024);  // 4x the batch: the same function of tokens
  const VerifyResult r = verify_curve(b, big);
  EXPECT_TRUE(r.accepted) << r.reason;
  EXPECT_GT(r.compared_points, 50);
  // Step-indexed comparison would be wrong: the big batch's step 15 is the baseline's step 60.
  EXPECT_NEAR(interpolate_loss(big, 60 * 256), b.losses.back(), 1e-12);
  EXPECT_NEAR(interpolate_loss(big, 1.5 * 1024), 0.5 * (big.losses[0] + big.losses[1]), 1e-12);
  const VerifyResult short_run = verify_curve(b, decaying(5, 1024));
  EXPECT_FALSE(short_run.accepted);
  EXPECT_NE(short_run.reason.find("overlap"), std::string::npos);
}

// An ft-train metrics file: one line per step (1000 tokens at the given rate), then a summary.
fs::path metrics_file(const std::string& name, const std::vector<double>& rates) {
  const fs::path d = temp_dir(name);
  std::string text;
  for (size_t i = 0; i < rates.size(); ++i) {
    text +=
        nlohmann::json{
            {"step", i}, {"loss", 3.0}, {"tokens_per_s", rates[i]}, {"step_ms", 1e6 / rates[i]}}
            .dump() +
        "\n";
  }
  text += R"({"summary": {"mean_tokens_per_s": 1, "mem_peak": 5e6, "final_loss": 3.0}})"
          "\n";
  write_file_atomic(d / "m.jsonl", text);
  return d / "m.jsonl";
}

TEST(Trial, ThroughputIsTokensOverTimeOfTheMeasuredSteps) {
  // Two slow warm-up steps, then seven steps of 10 ms and one 80 ms stall (an in-line loader
  // preparing its next chunk of eight batches), 1000 tokens each.
  std::vector<double> rates{1000, 2000, 1e5, 1e5, 1e5, 1e5, 1e5, 1e5, 12500, 1e5};
  TrialResult r;
  ASSERT_TRUE(read_metrics(metrics_file("metrics", rates), &r, 2)) << r.reason;
  EXPECT_EQ(r.measured_steps, 8);
  EXPECT_NEAR(r.tokens_per_s, 8000 / 0.150, 1e-6);  // the mean of rates would be 89062.5
  EXPECT_NEAR(r.step_ms, 150.0 / 8, 1e-9);
  EXPECT_NEAR(r.step_tps_median, 1e5, 1e-6);
  EXPECT_NEAR(r.step_tps_spread, 0, 1e-12);  // the stall is one step: outside the quartiles
  EXPECT_EQ(r.losses.size(), 10u);
  EXPECT_NEAR(r.tokens.back(), 10000, 1e-9);
  EXPECT_EQ(r.mem_peak, 5e6);
  // Within-run spread: the interquartile range over the median.
  TrialResult s;
  ASSERT_TRUE(read_metrics(metrics_file("metrics2", {1, 80e3, 90e3, 100e3, 110e3, 120e3}), &s, 1));
  EXPECT_NEAR(s.step_tps_median, 100e3, 1e-6);
  EXPECT_NEAR(s.step_tps_spread, 0.2, 1e-12);
  // A run no longer than its warm-up measures every step, as ft-train's summary does.
  TrialResult t;
  ASSERT_TRUE(read_metrics(metrics_file("metrics3", {1000, 3000}), &t, 2));
  EXPECT_EQ(t.measured_steps, 2);
  EXPECT_NEAR(t.tokens_per_s, 2000 / (1.0 + 1.0 / 3), 1e-9);
}

JournalEntry entry(int id, const std::string& tps) {
  JournalEntry e;
  e.id = id;
  e.phase = "grid";
  e.config = {{"precision", "bf16"}, {"quiet", ""}, {"steps", "4"}};
  e.change = "precision bf16";
  e.result.status = TrialStatus::kOk;
  e.result.tokens_per_s = std::stod(tps);
  e.result.losses = {5.0, std::nan(""), 3.0};
  e.result.tokens = {64, 128, 192};
  e.result.wall_s = 1.5;
  return e;
}

TEST(Journal, RoundTripsAndDropsATornTail) {
  const fs::path d = temp_dir("journal");
  {
    Journal j(d / "journal.jsonl", false);
    j.append(entry(0, "1000"));
    j.append(entry(1, "2000"));
  }
  const auto size_ok = fs::file_size(d / "journal.jsonl");
  {
    std::ofstream f(d / "journal.jsonl", std::ios::app);
    f << "{\"id\": 2, \"phase\": \"gr";  // a writer killed mid-line
  }
  EXPECT_THROW(Journal(d / "journal.jsonl", false), ConfigError);  // never silently mixed
  Journal j(d / "journal.jsonl", true);
  ASSERT_EQ(j.entries().size(), 2u);
  EXPECT_GT(j.dropped_bytes(), 0u);
  EXPECT_EQ(fs::file_size(d / "journal.jsonl"), size_ok);  // truncated to the last good line
  EXPECT_EQ(j.entries()[1].result.tokens_per_s, 2000);
  EXPECT_EQ(j.entries()[1].config.at("quiet"), "");
  EXPECT_TRUE(std::isnan(j.entries()[0].result.losses[1]));
  j.append(entry(2, "3000"));
  Journal again(d / "journal.jsonl", true);
  ASSERT_EQ(again.entries().size(), 3u);
  EXPECT_EQ(again.find(2)->result.tokens_per_s, 3000);
}

TEST(Journal, CorruptMiddleLineIsAFormatErrorWithTheLine) {
  const fs::path d = temp_dir("journal_bad");
  write_file_atomic(d / "journal.jsonl",
                    "{\"id\": 0}\nnot json\n" + entry_to_json(entry(0, "1")).dump() + "\n");
  try {
    Journal j(d / "journal.jsonl", true);
    FAIL() << "expected FormatError";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("journal.jsonl:1"), std::string::npos) << e.what();
  }
}

TEST(Space, BatchSplitKeepsTheGlobalBatchUnlessAllowed) {
  const Config base{{"micro-batch", "4"}, {"grad-accum", "4"}, {"lr", "0.001"}, {"steps", "40"}};
  std::string why;
  auto c = apply_knob(base, {{"micro-batch", "8"}}, BatchRule{}, &why);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->at("grad-accum"), "2");
  EXPECT_FALSE(apply_knob(base, {{"micro-batch", "32"}, {"grad-accum", "2"}}, BatchRule{}, &why));
  EXPECT_NE(why.find("--allow-batch-change"), std::string::npos);
  c = apply_knob(base, {{"micro-batch", "16"}, {"grad-accum", "4"}}, BatchRule{true, "sqrt"}, &why);
  ASSERT_TRUE(c);  // global 16 -> 64: lr x sqrt(4), steps / 4 (same tokens)
  EXPECT_NEAR(std::stod(c->at("lr")), 0.002, 1e-9);
  EXPECT_EQ(c->at("steps"), "10");
  c = apply_knob(base, {{"micro-batch", "16"}, {"grad-accum", "4"}}, BatchRule{true, "linear"},
                 &why);
  EXPECT_NEAR(std::stod(c->at("lr")), 0.004, 1e-9);
}

TEST(Space, GridIsTheFullProductBaselineFirstSeeded) {
  const Config base{{"micro-batch", "4"}, {"grad-accum", "2"}};
  const auto space = default_space(base, {}, BatchRule{});
  size_t product = 1;
  for (const auto& d : space) product *= d.settings.size();
  EXPECT_EQ(space.size(), 5u);  // no loader flags in this (empty) flag set
  const auto g1 = grid_configs(base, space, 7, BatchRule{});
  EXPECT_EQ(g1.size(), product + 1);  // every combination plus the baseline's own flags
  EXPECT_EQ(g1.front(), base);
  EXPECT_EQ(grid_configs(base, space, 7, BatchRule{}), g1);
  EXPECT_NE(grid_configs(base, space, 8, BatchRule{}), g1);
  for (const auto& c : g1) EXPECT_EQ(global_batch(c), 8);
  EXPECT_EQ(help_flags("  --loader-workers arg   workers\n  --prefetch arg\n").count("prefetch"),
            1u);
}

// A deterministic stand-in for ft-train, for the sweep's bookkeeping only: throughput follows
// from the flags, and fp16 "without loss scaling" is fast but produces NaN losses.
struct Synthetic {
  int calls = 0;
  int fail_after = -1;  // throw (a killed sweep) on this call
  double noise = 0.01;  // deterministic measurement noise: x (1 + noise * (calls * 7 % 3))
  double lucky = 1;     // the first fp32 + naive-attention trial measures this much faster
  bool lucky_seen = false;
  double bf16 = 1.5;   // bf16's speed-up
  double unlucky = 1;  // the first bf16 trial measures this factor of its speed
  bool unlucky_seen = false;
  std::vector<Config> seen;  // every config run, in order
  TrialResult operator()(const std::string&, const Config& c) {
    if (fail_after >= 0 && calls >= fail_after) throw std::runtime_error("killed");
    ++calls;
    seen.push_back(c);
    const auto get = [&](const char* k, const std::string& d) {
      const auto it = c.find(k);
      return it == c.end() ? d : it->second;
    };
    double tps = 1000;
    const std::string p = get("precision", "fp32");
    if (p == "bf16") tps *= bf16;
    if (p == "fp16") tps *= 1.8;
    if (get("checkpoint", "none") == "block") tps *= 0.8;
    tps *= 1 + 0.1 * std::log2(std::stod(get("micro-batch", "8")));
    tps *= 1 + noise * ((calls * 7) % 3);  // measurement noise, deterministic
    if (p == "fp32" && get("attention", "flash") == "naive" && !lucky_seen) {
      lucky_seen = true;  // one measurement caught the machine idle
      tps *= lucky;
    }
    if (p == "bf16" && !unlucky_seen) {
      unlucky_seen = true;  // the machine's load changed during this one
      tps *= unlucky;
    }
    TrialResult r;
    r.status = TrialStatus::kOk;
    r.tokens_per_s = tps;
    r.wall_s = 2;
    r.mem_peak = 1e6 * std::stod(get("micro-batch", "8"));
    const int steps = std::stoi(get("steps", "50"));
    const double per_step = 32.0 * global_batch(c);
    for (int s = 1; s <= steps; ++s) {
      r.tokens.push_back(s * per_step);
      r.losses.push_back(p == "fp16" && s > 3 ? std::nan("")
                                              : 2 + 3 * std::exp(-s * per_step / 3000));
    }
    r.final_loss = r.losses.back();
    return r;
  }
};

std::vector<Finding> findings(int round, const Config&) {
  if (round == 1) {
    return {
        {"batch", 0.2, "warning", "under-filled micro-batch", "", {"--micro-batch 8 (fills it)"}},
        {"compute", 0.4, "warning", "fp32 GEMMs", "", {"--precision fp16", "--precision bf16"}}};
  }
  return {{"compute", 0.02, "info", "little left", "", {"--checkpoint block"}}};
}

SweepOptions guided_options() {
  SweepOptions o;
  o.strategy = "guided";
  o.baseline = {{"micro-batch", "2"}, {"grad-accum", "4"}, {"steps", "40"}};
  o.trial_steps = 4;
  o.verify_steps = 20;
  o.candidates_per_round = 3;
  return o;
}

TEST(Sweep, GuidedRejectsAFastButBrokenChangeAndKeepsTheVerifiedOne) {
  const fs::path d = temp_dir("guided");
  Journal j(d / "journal.jsonl", false);
  Synthetic syn;
  const SweepOptions o = guided_options();
  const SweepOutcome out = run_sweep(o, j, std::ref(syn), findings);
  EXPECT_EQ(out.best.at("precision"), "bf16");
  bool annotated_knob_ran = false;  // "--micro-batch 8 (fills it)": B 8, K 1 keeps 2 x 4
  for (const auto& e : j.entries()) {
    annotated_knob_ran |= e.config.count("micro-batch") && e.config.at("micro-batch") == "8" &&
                          e.config.at("grad-accum") == "1";
  }
  EXPECT_TRUE(annotated_knob_ran);
  bool rejected_fp16 = false;
  for (const auto& dcs : out.decisions) {
    if (dcs.kind == "reject" && dcs.text.find("precision fp16") != std::string::npos &&
        dcs.text.find("non-finite") != std::string::npos) {
      rejected_fp16 = true;
    }
  }
  EXPECT_TRUE(rejected_fp16);
  EXPECT_NE(out.stop_reason.find("no finding promises"), std::string::npos) << out.stop_reason;
  EXPECT_EQ(out.diagnoses, 2);
  int rejected_entries = 0;
  for (const auto& e : j.entries()) rejected_entries += e.result.status == TrialStatus::kRejected;
  EXPECT_EQ(rejected_entries, 1);
  EXPECT_EQ(static_cast<int>(j.entries().size()), syn.calls);
  const std::string html = report_html(out, o);
  EXPECT_NE(html.find("<svg"), std::string::npos);
  EXPECT_NE(html.find("REJECTED by the loss-curve check"), std::string::npos);
  // Round 1: the incumbent and the three candidates side by side, 3 rounds, the order reversed
  // every other round.
  std::vector<std::string> block;
  for (const auto& e : j.entries()) {
    if (e.phase == "trial" && e.round == 1) block.push_back(e.change);
  }
  const std::vector<std::string> fwd{"baseline", "precision fp16", "precision bf16",
                                     "grad-accum 1, micro-batch 8"};
  std::vector<std::string> want = fwd;
  want.insert(want.end(), fwd.rbegin(), fwd.rend());
  want.insert(want.end(), fwd.begin(), fwd.end());
  EXPECT_EQ(block, want);
  // The confirmation round: baseline and bf16 side by side, 3 rounds in A B, B A, A B order.
  ASSERT_EQ(out.confirmation.size(), 2u);
  std::vector<std::string> order;
  for (const auto& e : j.entries()) {
    if (e.phase == "confirm") order.push_back(e.change);
  }
  EXPECT_EQ(order, (std::vector<std::string>{"baseline", "precision bf16", "precision bf16",
                                             "baseline", "baseline", "precision bf16"}));
  EXPECT_TRUE(out.confirmation[1].beats_baseline);
  EXPECT_EQ(out.confirmation[1].ratios.size(), 3u);
  // bf16 is 1.5x by construction; the synthetic noise is at most 2% per measurement.
  EXPECT_NEAR(out.confirmed_ratio, 1.5, 0.05);
  EXPECT_NE(report_markdown(out, o).find("## Confirmation round"), std::string::npos);
}

TEST(Sweep, GuidedNeedsEveryRoundToFavourTheCandidate) {
  // bf16 no faster than fp32, but its first measurement caught the machine idle (x1.5): the
  // two later rounds disagree (a tie is not a win), so it is not accepted. A real 1.5x is.
  const DiagnoseFn diag = [](int round, const Config&) {
    return round == 1
               ? std::vector<Finding>{{"compute", 0.4, "warning", "fp32", "", {"--precision bf16"}}}
               : std::vector<Finding>{};
  };
  for (double real : {1.0, 1.5}) {
    const fs::path d = temp_dir("every" + std::to_string(real > 1));
    Journal j(d / "journal.jsonl", false);
    Synthetic syn;
    syn.noise = 0;
    syn.bf16 = real;
    syn.unlucky = 1.5 / real;  // the first bf16 trial measures 1.5x either way
    const SweepOutcome out = run_sweep(guided_options(), j, std::ref(syn), diag);
    if (real == 1.0) {
      EXPECT_EQ(out.best.count("precision"), 0u);
      EXPECT_NE(out.stop_reason.find("beat the incumbent beyond noise"), std::string::npos)
          << out.stop_reason;
    } else {
      ASSERT_EQ(out.best.count("precision"), 1u);
      EXPECT_NEAR(out.confirmed_ratio, 1.5, 1e-9);
    }
  }
  // A real 1.5x whose first trial caught a busy machine (x0.6: 10% slower than fp32) loses one
  // of 3 rounds: undecided, so both run 3 more rounds; 5 of 6 passes the sign test.
  const fs::path d = temp_dir("extended");
  Journal j(d / "journal.jsonl", false);
  Synthetic syn;
  syn.noise = 0;
  syn.unlucky = 0.6;
  const SweepOutcome out = run_sweep(guided_options(), j, std::ref(syn), diag);
  ASSERT_EQ(out.best.count("precision"), 1u);
  EXPECT_EQ(out.best.at("precision"), "bf16");
  int round1 = 0;
  for (const auto& e : j.entries()) round1 += e.phase == "trial" && e.round == 1;
  EXPECT_EQ(round1, 12);  // 2 configurations x (3 + 3) rounds
  bool undecided = false;
  for (const auto& dcs : out.decisions) undecided |= dcs.text.rfind("undecided: round", 0) == 0;
  EXPECT_TRUE(undecided);
}

TEST(Sweep, AComputeBoundStepAlsoTriesAttentionAndTheMicroBatchSplit) {
  // No finding names a knob, but compute is 90% of step time: guided tries the other attention
  // and the split of the global batch 8 (2 x 4 -> 1 x 8, 4 x 2), keeps the faster 4 x 2, then
  // from there 8 x 1; attention makes no difference here and is not kept.
  const DiagnoseFn diag = [](int, const Config&) {
    Diagnosis d;
    d.compute_share = 0.9;
    return d;
  };
  const fs::path d = temp_dir("compute");
  Journal j(d / "journal.jsonl", false);
  Synthetic syn;
  syn.noise = 0;
  const SweepOutcome out = run_sweep(guided_options(), j, std::ref(syn), diag);
  EXPECT_EQ(out.best.at("micro-batch"), "8");
  EXPECT_EQ(out.best.at("grad-accum"), "1");
  EXPECT_EQ(out.best.count("attention"), 0u);
  EXPECT_EQ(out.diagnoses, 3);
  int rounds_trying = 0;
  for (const auto& dcs : out.decisions) {
    rounds_trying += dcs.text.find("compute is 90% of step time") != std::string::npos;
  }
  EXPECT_EQ(rounds_trying, 3);
  // Off: nothing to try.
  SweepOptions o = guided_options();
  o.compute_bound = 0;
  const fs::path d2 = temp_dir("compute_off");
  Journal j2(d2 / "journal.jsonl", false);
  Synthetic syn2;
  const SweepOutcome off = run_sweep(o, j2, std::ref(syn2), diag);
  EXPECT_EQ(off.best, o.baseline);
  EXPECT_NE(off.stop_reason.find("no finding promises"), std::string::npos) << off.stop_reason;
}

TEST(Sweep, GuidedWithKnobsStaysInsideTheGridSpace) {
  const fs::path d = temp_dir("guided_space");
  SweepOptions o = guided_options();
  o.space = {{"precision", {{{"precision", "fp32"}}, {{"precision", "bf16"}}}}};
  Journal j(d / "journal.jsonl", false);
  Synthetic syn;
  const SweepOutcome out = run_sweep(o, j, std::ref(syn), findings);
  EXPECT_EQ(out.best.at("precision"), "bf16");
  bool skipped = false;
  for (const auto& dcs : out.decisions) {
    skipped |= dcs.kind == "skip" && dcs.text.find("outside the search space") != std::string::npos;
  }
  EXPECT_TRUE(skipped);
  for (const Config& c : syn.seen) {
    EXPECT_NE(c.at("micro-batch"), "8") << "micro-batch is not a dimension of this space";
    EXPECT_EQ(c.count("precision") && c.at("precision") == "fp16", false);
  }
}

TEST(Confirm, OrderAlternatesAndEveryRoundMustFavourTheCandidate) {
  EXPECT_EQ(confirm_order(3, 0), (std::vector<size_t>{0, 1, 2}));
  EXPECT_EQ(confirm_order(3, 1), (std::vector<size_t>{2, 1, 0}));
  EXPECT_EQ(confirm_order(3, 2), (std::vector<size_t>{0, 1, 2}));
  std::vector<ConfirmRow> rows(5);
  rows[0].tokens_per_s = {100, 50, 100};  // the baseline; load halved round 1 for everyone
  rows[1].tokens_per_s = {110, 45, 130};  // faster on average but slower in round 1
  rows[2].tokens_per_s = {150, 80, 160};  // 1.5-1.6x in every round
  rows[3].tokens_per_s = {101, 51, 101};  // 1% faster: below the 2% floor
  rows[4].tokens_per_s = {0, 60, 120};    // failed once: 1.2x in the two rounds it ran
  const auto ranked = score_confirmation(&rows, 0.02, 2);
  EXPECT_EQ(ranked, (std::vector<size_t>{2, 4, 1, 3}));
  EXPECT_NEAR(rows[2].median_ratio, 1.6, 1e-12);
  EXPECT_NEAR(rows[2].median_tps, 150, 1e-12);
  EXPECT_NEAR(rows[2].ratio_spread, (1.6 - 1.5) / 1.6, 1e-12);
  EXPECT_TRUE(rows[2].beats_baseline);
  EXPECT_FALSE(rows[1].beats_baseline);  // median 1.1, but round 1 favoured the baseline
  EXPECT_NEAR(rows[1].median_ratio, 1.1, 1e-12);
  EXPECT_FALSE(rows[3].beats_baseline);
  EXPECT_TRUE(rows[4].beats_baseline);
  EXPECT_EQ(rows[4].ratios.size(), 2u);
  EXPECT_FALSE(score_confirmation(&rows, 0.02, 3).empty());
  EXPECT_FALSE(rows[4].beats_baseline);  // two rounds are too few when three are required
  EXPECT_FALSE(rows[0].beats_baseline);
  EXPECT_NEAR(rows[0].median_ratio, 1, 1e-12);
  // More rounds tolerate a losing round at the same chance level (<= 1/8).
  EXPECT_EQ(sign_test_wins(3), 3);
  EXPECT_EQ(sign_test_wins(5), 5);
  EXPECT_EQ(sign_test_wins(6), 5);
  EXPECT_EQ(sign_test_wins(7), 6);
  EXPECT_EQ(sign_test_wins(9), 7);
  EXPECT_EQ(sign_test_wins(12), 9);
  std::vector<ConfirmRow> seven(3);
  seven[0].tokens_per_s = {100, 100, 100, 100, 100, 100, 100};
  seven[1].tokens_per_s = {120, 90, 115, 130, 110, 125, 118};  // 6 of 7 rounds faster
  seven[2].tokens_per_s = {120, 90, 115, 95, 110, 125, 118};   // 5 of 7
  score_confirmation(&seven, 0.02, 2);
  EXPECT_TRUE(seven[1].beats_baseline);
  EXPECT_FALSE(seven[2].beats_baseline);
}

SweepOptions small_grid() {
  SweepOptions o;
  o.strategy = "grid";
  o.baseline = {{"micro-batch", "2"}, {"grad-accum", "4"}, {"steps", "40"}};
  o.trial_steps = 4;
  o.verify_steps = 20;
  o.confirm_top = 4;
  o.space = {
      {"precision", {{{"precision", "fp32"}}, {{"precision", "bf16"}}, {{"precision", "fp16"}}}},
      {"attention", {{{"attention", "flash"}}, {{"attention", "naive"}}}}};
  return o;
}

TEST(Sweep, GridConfirmationOverridesALuckySingleTrial) {
  // fp32 + naive attention is no faster than the baseline, but its one grid trial caught the
  // machine idle and measured 4x. fp16 is fastest but its loss goes NaN (rejected); bf16 (1.5x)
  // is the right answer.
  SweepOptions o = small_grid();
  Synthetic unconfirmed;
  unconfirmed.lucky = 4;
  o.confirm_rounds = 0;
  {
    const fs::path d = temp_dir("grid_lucky0");
    Journal j(d / "journal.jsonl", false);
    const SweepOutcome out = run_sweep(o, j, std::ref(unconfirmed), findings);
    EXPECT_EQ(out.best.at("attention"), "naive") << "one measurement per point trusts the fluke";
    EXPECT_EQ(out.best.at("precision"), "fp32");
    EXPECT_TRUE(out.confirmation.empty());
  }
  o.confirm_rounds = 3;
  const fs::path d = temp_dir("grid_lucky");
  Journal j(d / "journal.jsonl", false);
  Synthetic syn;
  syn.lucky = 4;
  const SweepOutcome out = run_sweep(o, j, std::ref(syn), findings);
  EXPECT_EQ(out.best.at("precision"), "bf16");
  ASSERT_EQ(out.confirmation.size(), 5u);  // the baseline and the 4 fastest single trials
  for (const auto& row : out.confirmation) {
    if (row.knobs.count("attention") && row.knobs.at("attention") == "naive" &&
        (!row.knobs.count("precision") || row.knobs.at("precision") == "fp32")) {
      EXPECT_FALSE(row.beats_baseline) << row.change;
      EXPECT_NEAR(row.median_ratio, 1, 0.03);
    }
  }
  EXPECT_NEAR(out.confirmed_ratio, 1.5, 0.05);
  int confirms = 0;
  for (const auto& e : j.entries()) confirms += e.phase == "confirm";
  EXPECT_EQ(confirms, 15);
}

TEST(Sweep, KilledSweepResumesWithTheSameTrialsAndDecisions) {
  const SweepOptions o = guided_options();
  const fs::path a = temp_dir("resume_a"), b = temp_dir("resume_b");
  Synthetic whole;
  Journal ja(a / "journal.jsonl", false);
  const SweepOutcome full = run_sweep(o, ja, std::ref(whole), findings);
  ASSERT_GT(whole.calls, 8);
  Synthetic killed;
  killed.fail_after = 6;
  {
    Journal jb(b / "journal.jsonl", false);
    EXPECT_THROW(run_sweep(o, jb, std::ref(killed), findings), std::runtime_error);
    EXPECT_EQ(jb.entries().size(), 6u);
  }
  Synthetic rest;
  rest.calls = 6;  // same deterministic noise sequence as an uninterrupted run
  Journal jb(b / "journal.jsonl", true);
  const SweepOutcome resumed = run_sweep(o, jb, std::ref(rest), findings);
  EXPECT_EQ(rest.calls, whole.calls);  // only the missing trials ran
  ASSERT_EQ(jb.entries().size(), ja.entries().size());
  for (size_t i = 0; i < ja.entries().size(); ++i) {
    EXPECT_EQ(entry_to_json(jb.entries()[i]).dump(), entry_to_json(ja.entries()[i]).dump()) << i;
  }
  ASSERT_EQ(resumed.decisions.size(), full.decisions.size());
  for (size_t i = 0; i < full.decisions.size(); ++i) {
    EXPECT_EQ(resumed.decisions[i].text, full.decisions[i].text);
  }
  EXPECT_EQ(resumed.best, full.best);
  // A different seed asks for a different baseline: the journal is refused, not mixed.
  SweepOptions other = o;
  other.baseline["seed"] = "99";
  Journal jc(b / "journal.jsonl", true);
  EXPECT_THROW(run_sweep(other, jc, std::ref(rest), findings), ConfigError);
}

TEST(Sweep, BudgetAndMemorySkipAreJournaled) {
  const fs::path d = temp_dir("budget");
  SweepOptions o = guided_options();
  o.baseline = {{"micro-batch", "2"}, {"grad-accum", "32"}, {"steps", "40"},  {"layers", "2"},
                {"channels", "64"},   {"heads", "2"},       {"seq-len", "64"}};
  const double small = predicted_peak(o.baseline);
  Config big = o.baseline;
  big["micro-batch"] = "64";
  big["grad-accum"] = "1";
  const double large = predicted_peak(big);
  ASSERT_GT(small, 0);
  ASSERT_GT(large, 2 * small);
  o.memory_limit = 0.5 * (small + large);
  o.budget_trials = 3;
  const DiagnoseFn diag = [](int, const Config&) {
    return std::vector<Finding>{{"batch", 0.3, "warning", "small batch", "", {"--micro-batch 64"}},
                                {"compute", 0.3, "warning", "fp32", "", {"--precision bf16"}}};
  };
  Journal j(d / "journal.jsonl", false);
  Synthetic syn;
  const SweepOutcome out = run_sweep(o, j, std::ref(syn), diag);
  ASSERT_GE(j.entries().size(), 2u);
  const JournalEntry& skipped = j.entries()[1];
  EXPECT_TRUE(skipped.skipped);
  EXPECT_EQ(skipped.result.status, TrialStatus::kRejected);
  EXPECT_NE(skipped.result.reason.find("memory model predicts"), std::string::npos);
  EXPECT_NEAR(skipped.predicted_mem, large, 1);
  EXPECT_EQ(out.trials_run, 3);
  EXPECT_NE(out.stop_reason.find("budget"), std::string::npos) << out.stop_reason;
}

TEST(Report, ParetoFrontAndEscaping) {
  std::vector<JournalEntry> t;
  for (auto [tps, mem] : {std::pair{100.0, 10.0}, {150.0, 20.0}, {120.0, 25.0}, {90.0, 5.0}}) {
    JournalEntry e;
    e.id = static_cast<int>(t.size());
    e.phase = "grid";
    e.result.status = TrialStatus::kOk;
    e.result.tokens_per_s = tps;
    e.result.mem_peak = mem;
    t.push_back(e);
  }
  EXPECT_EQ(pareto_front(t), (std::vector<int>{3, 0, 1}));  // 2 is dominated by 1
  EXPECT_EQ(html_escape("<a href=\"x\">&'"), "&lt;a href=&quot;x&quot;&gt;&amp;&#39;");
}

TEST(Diagnosis, MalformedReportIsAFormatError) {
  const fs::path d = temp_dir("diag");
  write_file_atomic(d / "report.json", "{\"findings\": [{\"share\": 0.3}]}");
  EXPECT_THROW(read_diagnosis(d / "report.json"), FormatError);
  write_file_atomic(d / "report.json",
                    "{\"findings\": [{\"class\": \"data\", \"share\": 0.3, "
                    "\"knobs\": [\"--loader-workers 2\"]}]}");
  const auto f = read_diagnosis(d / "report.json");
  ASSERT_EQ(f.findings.size(), 1u);
  EXPECT_EQ(f.findings[0].knobs[0], "--loader-workers 2");
  EXPECT_EQ(f.compute_share, 0);
  write_file_atomic(d / "report.json",
                    "{\"findings\": [], \"totals\": {\"compute\": 0.875, \"data\": 0.1}}");
  EXPECT_NEAR(read_diagnosis(d / "report.json").compute_share, 0.875, 1e-12);
}

}  // namespace
}  // namespace ft::tuner
