// tuner_test.cpp: trial metrics, journal recovery, loss-curve verification, knob space, report
// (in-process; the sweeps are in tuner_sweep_test.cpp).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <stdexcept>
#include <string>

#include "ft/core/atomic_file.h"
#include "ft/core/error.h"
#include "ft/reports/report.h"
#include "ft/tuner/journal.h"
#include "ft/tuner/report.h"
#include "ft/tuner/search.h"
#include "ft/tuner/verify.h"
#include "test_scratch.h"

namespace ft::tuner {
namespace {

namespace fs = std::filesystem;

fs::path temp_dir(const std::string& name) {
  return ft::test::scratch_dir("ft_tuner_test_" + name);
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
  // ft-train's flags add the loader dimension.
  EXPECT_EQ(default_space(base, ft_train_flags(), BatchRule{}).size(), 6u);
}

TEST(Space, ABaselineOnSmallPagesAlsoTriesCachingWithHugePages) {
  const auto allocator_dim = [](const Config& base) {
    for (const auto& d : default_space(base, ft_train_flags(), BatchRule{})) {
      if (d.name == "allocator") return d;
    }
    return Dimension{};
  };
  const Config both{{"allocator-caching", "true"}, {"allocator-huge-pages", "true"}};
  const Dimension plain = allocator_dim({{"micro-batch", "4"}});
  EXPECT_EQ(plain.settings.size(), 2u);
  for (const auto& s : plain.settings) EXPECT_NE(s, both);
  const Dimension small = allocator_dim({{"micro-batch", "4"}, {"allocator-huge-pages", "false"}});
  ASSERT_EQ(small.settings.size(), 3u);
  EXPECT_EQ(small.settings.front(), both);
  // "0" and "false" name the same setting in a trial's key.
  EXPECT_EQ(effective_key({{"allocator-huge-pages", "0"}}, ft_train_defaults()),
            effective_key({{"allocator-huge-pages", "false"}}, ft_train_defaults()));
}

TEST(Space, FlagsAndDefaultsComeFromFtTrainsOptionTable) {
  const std::set<std::string> flags = ft_train_flags();
  for (const char* f : {"micro-batch", "grad-accum", "precision", "loader-workers", "prefetch",
                        "dp", "tp", "pp", "zero", "bucket-mb", "overlap", "quiet", "config"}) {
    EXPECT_TRUE(flags.count(f)) << f;
  }
  const auto defaults = ft_train_defaults();
  EXPECT_EQ(defaults.at("precision"), "fp32");
  EXPECT_EQ(defaults.at("attention"), "auto");
  EXPECT_EQ(defaults.at("micro-batch"), "8");
  EXPECT_EQ(defaults.at("allocator-caching"), "true");
  EXPECT_EQ(defaults.at("bucket-mb"), "25");
  EXPECT_EQ(defaults.at("lr"), "0.001");
  EXPECT_FALSE(defaults.count("metrics"));  // no default
  // validate_config checks names against the table and values through ft_trainer, directly.
  EXPECT_NO_THROW(validate_config({{"micro-batch", "4"}, {"quiet", ""}, {"metrics", "m.jsonl"}}));
  try {
    validate_config({{"micro-batch", "4"}, {"bogus-flag", "3"}});
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("--bogus-flag is neither"), std::string::npos) << e.what();
  }
  EXPECT_THROW(validate_config({{"precision", "fp8"}}), ConfigError);
  EXPECT_THROW(validate_config({{"micro-batch", "many"}}), ConfigError);
  // to_train_config drops what ft-train does not have and keeps the rest.
  const auto tc = to_train_config({{"micro-batch", "4"}, {"newer-flag", "1"}});
  ASSERT_TRUE(tc);
  EXPECT_EQ(tc->micro_batch, 4);
  EXPECT_FALSE(to_train_config({{"micro-batch", "0"}}));
}

TEST(Space, AutoAttentionIsTheKernelItPicksForTheShape) {
  // ft-train's default is --attention auto: naive when T <= 4 x head size, else flash.
  const std::map<std::string, std::string> defaults{
      {"attention", "auto"}, {"seq-len", "128"}, {"channels", "128"}, {"heads", "4"}};
  EXPECT_EQ(effective_attention({}, defaults), "naive");  // T 128 <= 4 x 32
  EXPECT_EQ(effective_attention({{"seq-len", "256"}}, defaults), "flash");
  EXPECT_EQ(effective_attention({{"seq-len", "256"}, {"heads", "2"}}, defaults), "naive");
  EXPECT_EQ(effective_attention({{"attention", "flash"}}, defaults), "flash");
  EXPECT_EQ(effective_attention({{"attention", "tiled"}}, defaults), "flash");
  // The default and its resolved kernel are one configuration (one trial, not two).
  EXPECT_EQ(effective_key({}, defaults), effective_key({{"attention", "naive"}}, defaults));
  EXPECT_NE(effective_key({}, defaults), effective_key({{"attention", "flash"}}, defaults));
  EXPECT_EQ(effective_key({{"seq-len", "512"}}, defaults),
            effective_key({{"seq-len", "512"}, {"attention", "flash"}}, defaults));
  // Without defaults given, unset flags take ft_trainer's own (T 128, C 128, NH 4).
  EXPECT_EQ(effective_attention({}, {}), "naive");
  EXPECT_EQ(effective_attention({{"seq-len", "1024"}}, {}), "flash");
}

TEST(Report, ParetoFront) {
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
}

// The guided loop reads ft-diagnose's report.json through the profiler's one reader: what
// reports::render_json wrote comes back as profiler::Diagnosis (an existing report is read,
// ft-diagnose is not run).
TEST(Diagnosis, RunDiagnosisReadsTheReportThroughTheProfilersReader) {
  const fs::path d = temp_dir("diag");
  profiler::Diagnosis want;
  want.totals[static_cast<size_t>(profiler::WaitClass::kCompute)] = 0.875;
  want.totals[static_cast<size_t>(profiler::WaitClass::kData)] = 0.1;
  profiler::Finding f;
  f.cls = "data";
  f.share = 0.3;
  f.severity = profiler::Severity::kWarning;
  f.title = "the step waits for data";
  f.evidence.detail = "loader.wait 3 ms";
  f.knobs = {"--loader-workers 2"};
  want.findings = {f};
  write_file_atomic(d / "report.json", reports::render_json(want));
  const profiler::Diagnosis got = run_diagnosis("/nonexistent/ft-diagnose", d, {}, 1);
  ASSERT_EQ(got.findings.size(), 1u);
  EXPECT_EQ(got.findings[0].cls, "data");
  EXPECT_EQ(got.findings[0].severity, profiler::Severity::kWarning);
  EXPECT_EQ(got.findings[0].knobs[0], "--loader-workers 2");
  EXPECT_EQ(got.findings[0].evidence.detail, "loader.wait 3 ms");
  EXPECT_NEAR(got.totals[static_cast<size_t>(profiler::WaitClass::kCompute)], 0.875, 1e-12);
  // Anything else is a FormatError naming the file.
  write_file_atomic(d / "report.json", "{\"findings\": [{\"share\": 0.3}]}");
  try {
    run_diagnosis("/nonexistent/ft-diagnose", d, {}, 1);
    FAIL() << "no error";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find((d / "report.json").string()), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace ft::tuner
