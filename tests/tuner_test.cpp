// tuner_test.cpp: journal recovery, loss-curve verification, knob space and sweep logic
// (in-process).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
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
  TrialResult operator()(const std::string&, const Config& c) {
    if (fail_after >= 0 && calls >= fail_after) throw std::runtime_error("killed");
    ++calls;
    const auto get = [&](const char* k, const std::string& d) {
      const auto it = c.find(k);
      return it == c.end() ? d : it->second;
    };
    double tps = 1000;
    const std::string p = get("precision", "fp32");
    if (p == "bf16") tps *= 1.5;
    if (p == "fp16") tps *= 1.8;
    if (get("checkpoint", "none") == "block") tps *= 0.8;
    tps *= 1 + 0.1 * std::log2(std::stod(get("micro-batch", "8")));
    tps *= 1 + 0.01 * ((calls * 7) % 3);  // measurement noise, deterministic
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

TEST(Space, ParallelSplitAndCommDimensionsForRanks) {
  const std::set<std::string> flags = {"precision", "checkpoint", "micro-batch", "grad-accum",
                                       "dp",        "tp",         "pp",          "zero",
                                       "bucket-mb", "overlap"};
  const Config base{{"layers", "2"}, {"heads", "2"}, {"channels", "64"}, {"bucket-mb", "8"}};
  for (const auto& d : default_space(base, flags, BatchRule{})) {
    EXPECT_NE(d.name, "parallel split");  // one rank: no parallel dimensions
  }
  const auto dims = default_space(base, flags, BatchRule{}, 4);
  const Dimension* split = nullptr;
  const Dimension* comm = nullptr;
  for (const auto& d : dims) {
    if (d.name == "parallel split") split = &d;
    if (d.name == "dp communication") comm = &d;
  }
  ASSERT_NE(split, nullptr);
  ASSERT_NE(comm, nullptr);
  std::multiset<std::string> seen;
  for (const Config& c : split->settings) {
    const int dp = std::stoi(c.at("dp")), tp = std::stoi(c.at("tp")), pp = std::stoi(c.at("pp"));
    EXPECT_EQ(dp * tp * pp, 4);
    EXPECT_LE(tp, 2);  // 2 heads
    EXPECT_LE(pp, 2);  // 2 layers
    if (dp == 1) {
      EXPECT_EQ(c.at("zero"), "0");
    }
    seen.insert(c.at("dp") + "x" + c.at("tp") + "x" + c.at("pp"));
  }
  // (4,1,1), (2,2,1), (2,1,2) with ZeRO 0/1/2 each; (1,2,2) once; tp 4 and pp 4 do not fit.
  EXPECT_EQ(split->settings.size(), 10u);
  EXPECT_EQ(seen.count("1x2x2"), 1u);
  EXPECT_EQ(seen.count("4x1x1"), 3u);
  ASSERT_EQ(comm->settings.size(), 3u);
  EXPECT_EQ(comm->settings[1].at("bucket-mb"), "2");
  EXPECT_EQ(comm->settings[2].at("overlap"), "false");
}

TEST(Space, DerivedKnobsForCommunicationAndTheBubble) {
  const Config inc{
      {"micro-batch", "4"}, {"grad-accum", "2"}, {"overlap", "false"}, {"bucket-mb", "10"}};
  const auto comm =
      derived_knobs({"comm", 0.3, "warning", "Communication is exposed", "", {}}, inc);
  ASSERT_EQ(comm.size(), 3u);
  EXPECT_EQ(comm[0], (Config{{"overlap", "true"}}));
  EXPECT_EQ(comm[1], (Config{{"bucket-mb", "20"}}));
  EXPECT_EQ(comm[2], (Config{{"grad-accum", "4"}}));
  Config on = inc;
  on["overlap"] = "true";
  EXPECT_EQ(derived_knobs({"comm", 0.3, "warning", "x", "", {}}, on).size(), 2u);
  const auto bubble = derived_knobs(
      {"parallel", 0.4, "critical", "Pipeline bubble 100% (theory (p-1)/m = 100%)", "", {}}, inc);
  ASSERT_EQ(bubble.size(), 2u);
  EXPECT_EQ(bubble[0], (Config{{"micro-batch", "2"}, {"grad-accum", "4"}}));  // same global batch
  EXPECT_EQ(bubble[1], (Config{{"grad-accum", "8"}}));
  EXPECT_TRUE(
      derived_knobs({"parallel", 0.3, "warning", "Straggler: rank 1 ...", "", {}}, inc).empty());
}

TEST(Sweep, GuidedTriesTheOverlapACommFindingImplies) {
  const fs::path d = temp_dir("guided_comm");
  SweepOptions o = guided_options();
  o.baseline["overlap"] = "false";
  o.baseline["dp"] = "2";
  o.ranks = 2;
  // ft-diagnose's communication finding, its knob strings left out: the sweep derives them.
  const DiagnoseFn diag = [](int round, const Config& c) {
    if (round == 1 && c.at("overlap") == "false")
      return std::vector<Finding>{{"comm", 0.4, "critical", "Communication is exposed", "", {}}};
    return std::vector<Finding>{};
  };
  Synthetic syn;
  const TrialFn run = [&](const std::string& id, const Config& c) {
    TrialResult r = syn(id, c);
    if (c.count("overlap") && c.at("overlap") == "true") r.tokens_per_s *= 1.3;
    return r;
  };
  Journal j(d / "journal.jsonl", false);
  const SweepOutcome out = run_sweep(o, j, run, diag);
  EXPECT_EQ(out.best.at("overlap"), "true");
  bool derived = false;
  for (const auto& dc : out.decisions) derived |= dc.text.find("overlap true") != std::string::npos;
  EXPECT_TRUE(derived);
  bool bucket_tried = false;
  for (const auto& e : j.entries()) bucket_tried |= e.config.count("bucket-mb") > 0;
  EXPECT_TRUE(bucket_tried);  // the second candidate of the round: a bigger bucket
}

TEST(Trial, RanksRunUnderMpirun) {
  TrialOptions t{"/opt/ft/ft-train", "/tmp", 10, 1, ""};
  const Config c{{"dp", "2"}, {"quiet", ""}};
  EXPECT_EQ(trial_command(c, t),
            (std::vector<std::string>{"/opt/ft/ft-train", "--dp", "2", "--quiet"}));
  t.ranks = 2;
  t.mpirun = "/usr/bin/mpirun";
  EXPECT_EQ(trial_command(c, t),
            (std::vector<std::string>{"/usr/bin/mpirun", "-np", "2", "--oversubscribe",
                                      "/opt/ft/ft-train", "--dp", "2", "--quiet"}));
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
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].knobs[0], "--loader-workers 2");
}

}  // namespace
}  // namespace ft::tuner
