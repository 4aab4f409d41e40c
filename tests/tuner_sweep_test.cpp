// tuner_sweep_test.cpp: the grid and guided sweeps' decisions (side-by-side rounds, sign test,
// confirmation, compute knobs, resume, budget) against a deterministic stand-in for ft-train.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <functional>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "ft/core/error.h"
#include "ft/tuner/journal.h"
#include "ft/tuner/report.h"
#include "ft/tuner/search.h"
#include "test_scratch.h"

namespace ft::tuner {
namespace {

namespace fs = std::filesystem;

fs::path temp_dir(const std::string& name) {
  return ft::test::scratch_dir("ft_tuner_sweep_test_" + name);
}

using profiler::Diagnosis;
using profiler::Finding;
using profiler::Severity;
constexpr size_t kCompute = static_cast<size_t>(profiler::WaitClass::kCompute);
constexpr size_t kData = static_cast<size_t>(profiler::WaitClass::kData);

// A finding as ft-diagnose reports it (explanation and evidence left empty).
Finding finding(const std::string& cls, double share, Severity severity, const std::string& title,
                const std::vector<std::string>& knobs) {
  Finding f;
  f.cls = cls;
  f.share = share;
  f.severity = severity;
  f.title = title;
  f.knobs = knobs;
  return f;
}

Diagnosis diagnosis(std::vector<Finding> findings) {
  Diagnosis d;
  d.findings = std::move(findings);
  return d;
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
  double naive = 1;    // naive attention's speed-up
  double unlucky = 1;  // the first bf16 trial measures this factor of its speed
  bool unlucky_seen = false;
  double step_ms = 0;        // > 0: every trial reports this mean step time
  double batch_gain = 0.1;   // x (1 + batch_gain * log2(micro-batch))
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
    if (get("attention", "flash") == "naive") tps *= naive;
    if (get("checkpoint", "none") == "block") tps *= 0.8;
    tps *= 1 + batch_gain * std::log2(std::stod(get("micro-batch", "8")));
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
    r.step_ms = step_ms;
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

Diagnosis findings(int round, const Config&) {
  if (round == 1) {
    return diagnosis({finding("batch", 0.2, Severity::kWarning, "under-filled micro-batch",
                              {"--micro-batch 8 (fills it)"}),
                      finding("compute", 0.4, Severity::kWarning, "fp32 GEMMs",
                              {"--precision fp16", "--precision bf16"})});
  }
  return diagnosis(
      {finding("compute", 0.02, Severity::kInfo, "little left", {"--checkpoint block"})});
}

SweepOptions guided_options() {
  SweepOptions o;
  o.strategy = "guided";
  o.baseline = {{"micro-batch", "2"}, {"grad-accum", "4"}, {"steps", "40"}};
  o.trial_steps = 4;
  o.verify_steps = 20;
  o.candidates_per_round = 3;
  // The synthetic runner's "no --attention" is the tiled kernel (ft-train's default is auto).
  o.train_defaults = {{"attention", "flash"}};
  return o;
}

TEST(Sweep, GuidedRejectsAFastButBrokenChangeAndKeepsTheVerifiedOne) {
  const fs::path d = temp_dir("guided");
  Journal j(d / "journal.jsonl", false);
  Synthetic syn;
  syn.batch_gain = 0;  // the micro-batch knob runs but gains nothing: bf16 alone is kept
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
  const std::string html = reports::render_sweep_html(sweep_report(out, o));
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
  EXPECT_NE(reports::render_sweep_markdown(sweep_report(out, o)).find("## Confirmation round"),
            std::string::npos);
}

TEST(Sweep, GuidedNeedsEveryRoundToFavourTheCandidate) {
  // bf16 no faster than fp32, but its first measurement caught the machine idle (x1.5): the
  // two later rounds disagree (a tie is not a win), so it is not accepted. A real 1.5x is.
  const DiagnoseFn diag = [](int round, const Config&) {
    return round == 1 ? diagnosis({finding("compute", 0.4, Severity::kWarning, "fp32",
                                           {"--precision bf16"})})
                      : Diagnosis{};
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

TEST(Sweep, AFasterUndecidedCandidateIsExtendedBeforeASlowerDecidedOneIsTaken) {
  // Round 1 measures bf16 (a real 1.5x whose first trial caught a busy machine: it loses that
  // round) and micro-batch 4 (1.09x in every round: decided). bf16 is faster by the median, so
  // both undecided-but-faster rows run 3 more rounds before the round is decided, and bf16 (5
  // of 6) is taken instead of the slower decided change. Micro-batch 4, the runner-up, is
  // measured again on top of bf16 in round 2 and taken there.
  const DiagnoseFn diag = [](int round, const Config&) {
    return round == 1 ? diagnosis({finding("compute", 0.4, Severity::kWarning, "fp32",
                                           {"--precision bf16", "--micro-batch 4"})})
                      : Diagnosis{};
  };
  const fs::path d = temp_dir("faster_undecided");
  Journal j(d / "journal.jsonl", false);
  Synthetic syn;
  syn.noise = 0;
  syn.unlucky = 0.6;
  const SweepOutcome out = run_sweep(guided_options(), j, std::ref(syn), diag);
  ASSERT_EQ(out.best.count("precision"), 1u);
  EXPECT_EQ(out.best.at("precision"), "bf16");
  bool extended = false;
  std::vector<std::string> accepted;
  for (const auto& dcs : out.decisions) {
    extended |= dcs.round == 1 && dcs.text.rfind("undecided: round", 0) == 0 &&
                dcs.text.find("precision bf16") != std::string::npos;
    if (dcs.kind == "accept" && dcs.round <= 2)
      accepted.push_back(dcs.text.substr(0, dcs.text.find(':')));
  }
  EXPECT_TRUE(extended);
  EXPECT_EQ(accepted, (std::vector<std::string>{"precision bf16",
                                                "grad-accum 2, micro-batch 4, precision bf16"}));
  EXPECT_EQ(out.best.at("micro-batch"), "4");
}

TEST(Sweep, AComputeBoundStepAlsoTriesAttentionAndTheMicroBatchSplit) {
  // No finding names a knob, but compute is 90% of step time: guided tries the split of the
  // global batch 8 two steps deep (2 x 4 -> 1 x 8, 4 x 2, 8 x 1) and the other attention, and
  // keeps the fastest, 8 x 1, in one round; attention makes no difference here and is not kept.
  const DiagnoseFn diag = [](int, const Config&) {
    Diagnosis d;
    d.totals[kCompute] = 0.9;
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
  EXPECT_EQ(out.diagnoses, 2);
  int rounds_trying = 0;
  for (const auto& dcs : out.decisions) {
    rounds_trying += dcs.text.find("compute is 90% of step time") != std::string::npos;
  }
  EXPECT_EQ(rounds_trying, 2);
  // With --candidates 1 a round holds at most 3 candidates: the micro-batch halved and doubled
  // and the other attention come first; the quadrupled micro-batch waits.
  SweepOptions one = guided_options();
  one.candidates_per_round = 1;
  const fs::path d1 = temp_dir("compute_one");
  Journal j1(d1 / "journal.jsonl", false);
  Synthetic syn1;
  syn1.noise = 0;
  run_sweep(one, j1, std::ref(syn1), diag);
  std::set<std::string> round1;
  for (const auto& e : j1.entries()) {
    if (e.phase == "trial" && e.round == 1) round1.insert(e.change);
  }
  EXPECT_EQ(round1, (std::set<std::string>{"baseline", "grad-accum 8, micro-batch 1",
                                           "grad-accum 2, micro-batch 4", "attention naive"}));
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

TEST(Sweep, ARunnerUpIsMeasuredAgainstTheNewIncumbent) {
  // Global batch 4 from 1 x 4; micro-batch 2 is 1.1x and 4 is 1.2x. In round 1 a co-tenant
  // slows every micro-batch-4 trial by 12% (1.056x): both beat the baseline beyond noise, and
  // micro-batch 2 wins the round. Micro-batch 4, the runner-up, is measured again against
  // micro-batch 2 in round 2 (undisturbed: 1.09x) and taken. Without the carry it would never
  // run again (it was tried), and the sweep would end on the second-best split.
  const DiagnoseFn diag = [](int, const Config&) {
    Diagnosis d;
    d.totals[kCompute] = 0.9;
    return d;
  };
  struct Busy {
    Synthetic syn;
    TrialResult operator()(const std::string& id, const Config& c) {
      TrialResult r = syn(id, c);
      if (syn.calls <= 14 && c.at("micro-batch") == "4") r.tokens_per_s *= 0.88;
      return r;
    }
  } busy;
  busy.syn.noise = 0;
  busy.syn.naive = 0.9;
  SweepOptions o = guided_options();
  o.baseline = {{"micro-batch", "1"}, {"grad-accum", "4"}, {"steps", "40"}};
  const fs::path d = temp_dir("runner_up");
  Journal j(d / "journal.jsonl", false);
  const SweepOutcome out = run_sweep(o, j, std::ref(busy), diag);
  EXPECT_EQ(out.best.at("micro-batch"), "4");
  std::vector<std::string> accepted;
  bool carried = false;
  for (const auto& dcs : out.decisions) {
    if (dcs.kind == "accept" && dcs.round <= 2) {
      accepted.push_back(dcs.text.substr(0, dcs.text.find(':')));
    }
    carried |= dcs.round == 2 && dcs.text.rfind("runners-up of round 1", 0) == 0 &&
               dcs.text.find("grad-accum 1, micro-batch 4 (was grad-accum 1, micro-batch 4)") !=
                   std::string::npos;
  }
  EXPECT_EQ(accepted, (std::vector<std::string>{"grad-accum 2, micro-batch 2",
                                                "grad-accum 1, micro-batch 4"}));
  EXPECT_TRUE(carried);
  // Round 2: the new incumbent, the runner-up and the compute candidates still untried (the
  // other attention; micro-batch 1 is what the accepted change left; the in-line loader lost
  // in round 1, which is final for a sweep), each once per round.
  std::set<std::string> round2;
  for (const auto& e : j.entries()) {
    if (e.phase == "trial" && e.round == 2) round2.insert(e.change);
  }
  EXPECT_EQ(round2,
            (std::set<std::string>{"grad-accum 2, micro-batch 2", "grad-accum 1, micro-batch 4",
                                   "attention naive, grad-accum 2, micro-batch 2"}));
  int inline_loader = 0;
  for (const auto& e : j.entries()) {
    inline_loader += e.phase == "trial" && e.round == 1 && e.config.count("loader-workers");
  }
  EXPECT_GT(inline_loader, 0) << "the in-line loader is measured in round 1";
}

TEST(Sweep, ComputeKnobsNeverGoBackToASettingAnAcceptedChangeLeft) {
  // Global batch 32 from 2 x 16. Naive attention is 1.5x here, more than any split in reach of
  // round 1 (8 x 4: 1.3x): accepted first; then micro-batch 2 -> 8 -> 32. Flash with
  // micro-batch 32 is a configuration never measured, but flash is what the first change left,
  // so it is not proposed again (without the rule the search oscillates between settings);
  // nor is micro-batch 2 x 16 (from 8 x 4, a quarter) once the second change left it.
  const DiagnoseFn diag = [](int, const Config&) {
    Diagnosis d;
    d.totals[kCompute] = 0.9;
    return d;
  };
  const fs::path d = temp_dir("no_back");
  Journal j(d / "journal.jsonl", false);
  Synthetic syn;
  syn.noise = 0;
  syn.naive = 1.5;
  SweepOptions o = guided_options();
  o.baseline["grad-accum"] = "16";
  const SweepOutcome out = run_sweep(o, j, std::ref(syn), diag);
  EXPECT_EQ(out.best.at("attention"), "naive");
  EXPECT_EQ(out.best.at("micro-batch"), "32");
  std::vector<std::string> accepted;
  std::set<std::string> tried;
  for (const auto& e : j.entries()) {
    if (e.phase == "verify") accepted.push_back(e.change);
    if (e.phase != "trial") continue;
    tried.insert(e.change);
    const bool flash = !e.config.count("attention") || e.config.at("attention") == "flash";
    EXPECT_FALSE(flash && e.config.at("micro-batch") == "32") << e.change;
    EXPECT_FALSE(!flash && e.round > 2 && e.config.at("micro-batch") == "2") << e.change;
  }
  EXPECT_EQ(accepted, (std::vector<std::string>{"attention naive",
                                                "attention naive, grad-accum 4, micro-batch 8",
                                                "attention naive, grad-accum 1, micro-batch 32"}));
  EXPECT_TRUE(tried.count("attention naive, grad-accum 2, micro-batch 16")) << "last round ran";
}

TEST(Sweep, AKnobNotTakenIsRetriedOnlyWhenItsFindingGrows) {
  // Round 1: bf16 is taken, --loader-workers 2 (no effect here) is not. Round 2 names the
  // workers again: at a data share of 20% (as before) it is skipped; at 35% (>= 1.5 x 20%) it
  // is measured again.
  for (double share2 : {0.2, 0.35}) {
    const DiagnoseFn diag = [share2](int round, const Config&) {
      std::vector<Finding> f{finding("data", round == 1 ? 0.2 : share2, Severity::kWarning,
                                     "data waits", {"--loader-workers 2"})};
      if (round == 1)
        f.push_back(finding("compute", 0.4, Severity::kWarning, "fp32", {"--precision bf16"}));
      return diagnosis(f);
    };
    const fs::path d = temp_dir("retry" + std::to_string(share2 > 0.3));
    Journal j(d / "journal.jsonl", false);
    Synthetic syn;
    syn.noise = 0;
    const SweepOutcome out = run_sweep(guided_options(), j, std::ref(syn), diag);
    EXPECT_EQ(out.best.at("precision"), "bf16");
    int workers_round2 = 0;
    for (const auto& e : j.entries()) {
      workers_round2 += e.round == 2 && e.config.count("loader-workers") > 0;
    }
    bool skipped = false;
    for (const auto& dcs : out.decisions) {
      skipped |= dcs.kind == "skip" &&
                 dcs.text.find("retried once the finding reaches 1.5x") != std::string::npos;
    }
    EXPECT_EQ(skipped, share2 < 0.3);
    EXPECT_EQ(workers_round2 > 0, share2 > 0.3);
  }
}

TEST(Sweep, AnUndecidedFindingKnobIsMeasuredAgainstTheNewIncumbent) {
  // Round 1: bf16 (1.5x) wins; allocator caching (a real 8%, the memory finding's knob) loses
  // its second round to a co-tenant (x0.9 that trial): faster by the median, undecided. The
  // round accepts bf16 and is not extended, so caching was never decided against: it is
  // measured again on bf16 in round 2 (while its finding's share is unchanged, which the
  // "retried once the finding grows" rule alone would skip) and taken there.
  const DiagnoseFn diag = [](int round, const Config&) {
    std::vector<Finding> f{finding("memory", 0.26, Severity::kWarning, "allocator stalls",
                                   {"--allocator-caching true"})};
    if (round == 1)
      f.push_back(finding("compute", 0.4, Severity::kWarning, "fp32", {"--precision bf16"}));
    return diagnosis(f);
  };
  struct Cotenant {
    Synthetic syn;
    int caching_trials = 0;
    TrialResult operator()(const std::string& id, const Config& c) {
      TrialResult r = syn(id, c);
      const auto it = c.find("allocator-caching");
      if (it != c.end() && it->second == "true") {
        r.tokens_per_s *= 1.08;
        if (++caching_trials == 2) r.tokens_per_s *= 0.9;
      }
      return r;
    }
  } busy;
  busy.syn.noise = 0;
  SweepOptions o = guided_options();
  o.compute_bound = 0;  // only the findings' knobs
  const fs::path d = temp_dir("undecided_carry");
  Journal j(d / "journal.jsonl", false);
  const SweepOutcome out = run_sweep(o, j, std::ref(busy), diag);
  EXPECT_EQ(out.best.at("precision"), "bf16");
  ASSERT_TRUE(out.best.count("allocator-caching")) << "caching was never measured again";
  EXPECT_EQ(out.best.at("allocator-caching"), "true");
  int caching_round2 = 0;
  for (const auto& e : j.entries()) {
    caching_round2 += e.phase == "trial" && e.round == 2 && e.config.count("allocator-caching");
  }
  EXPECT_GE(caching_round2, 3);  // every side-by-side round of round 2
  for (const auto& dcs : out.decisions) {
    EXPECT_EQ(dcs.text.find("retried once the finding reaches 1.5x"), std::string::npos)
        << dcs.text;
  }
}

TEST(Sweep, AComputeBoundBf16StepAlsoTriesFp32) {
  // A tiny model whose bf16 GEMMs are slower than fp32 (operand conversion outweighs them):
  // no finding names fp32, but on a compute-bound step guided measures it and takes it; from
  // an fp32 baseline it is never proposed (fp32 is not a setting to go back to).
  const DiagnoseFn diag = [](int, const Config&) {
    Diagnosis d;
    d.totals[kCompute] = 0.9;
    return d;
  };
  for (const std::string base : {"bf16", "fp32"}) {
    Synthetic syn;
    syn.noise = 0;
    syn.bf16 = 0.8;
    syn.batch_gain = 0;
    SweepOptions o = guided_options();
    o.baseline["precision"] = base;
    const fs::path d = temp_dir("fp32_knob_" + base);
    Journal j(d / "journal.jsonl", false);
    const SweepOutcome out = run_sweep(o, j, std::ref(syn), diag);
    EXPECT_EQ(out.best.at("precision"), "fp32") << base;
    int fp32_trials = 0;
    for (const Config& c : syn.seen) fp32_trials += c.at("precision") == "fp32";
    if (base == "fp32") {
      EXPECT_EQ(fp32_trials, static_cast<int>(syn.seen.size()));
    }
  }
}

TEST(Sweep, AComputeBoundStepThatBarelyWaitsForDataTriesTheInLineLoader) {
  // One loader worker (ft-train's default) on a step that waits 1% for data: no finding names
  // the loader, but guided measures --loader-workers 0 and takes it when it is faster (x1.05
  // here). When the step waits 20% for data (the data finding's business) it is not proposed.
  struct InLine {
    Synthetic syn;
    TrialResult operator()(const std::string& id, const Config& c) {
      TrialResult r = syn(id, c);
      if (c.count("loader-workers") && c.at("loader-workers") == "0") r.tokens_per_s *= 1.05;
      return r;
    }
  };
  for (const double data : {0.01, 0.2}) {
    const DiagnoseFn diag = [data](int, const Config&) {
      Diagnosis d;
      d.totals[kCompute] = 0.9;
      d.totals[kData] = data;
      return d;
    };
    InLine run;
    run.syn.noise = 0;
    run.syn.batch_gain = 0;
    const fs::path d = temp_dir("inline_loader_" + std::to_string(data));
    Journal j(d / "journal.jsonl", false);
    const SweepOutcome out = run_sweep(guided_options(), j, std::ref(run), diag);
    int inline_trials = 0;
    for (const Config& c : run.syn.seen) {
      inline_trials += c.count("loader-workers") && c.at("loader-workers") == "0";
    }
    if (data < 0.05) {
      EXPECT_GT(inline_trials, 0);
      ASSERT_TRUE(out.best.count("loader-workers")) << out.stop_reason;
      EXPECT_EQ(out.best.at("loader-workers"), "0");
    } else {
      EXPECT_EQ(inline_trials, 0);
      EXPECT_FALSE(out.best.count("loader-workers"));
    }
  }
}

TEST(Sweep, AComputeKnobThatLostIsNotRetriedWhileTheMathIsTheSame) {
  // Compute-bound step; allocator caching (the finding's knob) is 1.3x, every micro-batch split
  // and the other attention are worth nothing. Round 1 takes caching; the compute knobs lost
  // beside the same precision, attention and split, so round 2 proposes none of them again.
  const DiagnoseFn diag = [](int, const Config&) {
    Diagnosis d;
    d.totals[kCompute] = 0.9;
    d.findings = {finding("memory", 0.25, Severity::kWarning, "allocator stalls",
                          {"--allocator-caching true"})};
    return d;
  };
  struct Caching {
    Synthetic syn;
    TrialResult operator()(const std::string& id, const Config& c) {
      TrialResult r = syn(id, c);
      if (c.count("allocator-caching") && c.at("allocator-caching") == "true") {
        r.tokens_per_s *= 1.3;
      }
      return r;
    }
  } run;
  run.syn.noise = 0;
  run.syn.batch_gain = 0;
  const fs::path d = temp_dir("compute_lost");
  Journal j(d / "journal.jsonl", false);
  const SweepOutcome out = run_sweep(guided_options(), j, std::ref(run), diag);
  EXPECT_EQ(out.best.at("allocator-caching"), "true");
  int round1_compute = 0, round2_compute = 0;
  for (const auto& e : j.entries()) {
    if (e.phase != "trial" || e.change == "baseline") continue;
    const bool compute = e.config.at("micro-batch") != "2" || e.config.count("attention") ||
                         e.config.count("precision");
    (e.round == 1 ? round1_compute : round2_compute) += compute && e.round <= 2;
  }
  EXPECT_GT(round1_compute, 0);
  EXPECT_EQ(round2_compute, 0) << out.stop_reason;
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

TEST(Confirm, AnEarlierIncumbentReplacesTheLatestOnlyWhenFasterBeyondNoise) {
  // Guided's confirmation keeps its latest accepted change unless an earlier one beats it
  // beyond noise in the same rounds (the run that motivated it: the earlier change's median
  // was higher after 3 noisy rounds, 1.649 against 1.415, with per-round ratios crossing).
  ConfirmRow latest, earlier, clearly;
  latest.tokens_per_s = {181, 136, 141};
  earlier.tokens_per_s = {166, 113, 164};  // faster in 1 of 3 rounds: noise
  clearly.tokens_per_s = {200, 150, 160};  // faster in all 3, median ratio 1.10
  EXPECT_FALSE(faster_beyond_noise(earlier, latest, 0.02, 2));
  EXPECT_TRUE(faster_beyond_noise(clearly, latest, 0.02, 2));
  EXPECT_FALSE(faster_beyond_noise(latest, clearly, 0.02, 2));
  ConfirmRow slight = latest;  // 1% faster every round: below the 2% floor
  for (double& t : slight.tokens_per_s) t *= 1.01;
  EXPECT_FALSE(faster_beyond_noise(slight, latest, 0.02, 2));
  ConfirmRow once;  // only one round where both ran: fewer than min_rounds
  once.tokens_per_s = {300, 0, 0};
  EXPECT_FALSE(faster_beyond_noise(once, latest, 0.02, 2));
  EXPECT_TRUE(faster_beyond_noise(once, latest, 0.02, 1));
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

TEST(Sweep, TrialSecondsSetsEveryShortTrialsLengthFromOneCalibrationRun) {
  // The baseline measures 2.5 ms/step in a --trial-steps 4 run, so one measured second is 400
  // steps, plus ft-train's 2 warm-up steps: every short trial runs 402; verify runs keep their
  // own length and the diagnosis runs --trial-steps.
  SweepOptions o = guided_options();
  o.trial_seconds = 1;
  std::vector<std::string> diag_steps;
  const auto diag = [&](int round, const Config& c) {
    diag_steps.push_back(c.at("steps"));
    return findings(round, c);
  };
  const fs::path a = temp_dir("seconds_a"), b = temp_dir("seconds_b");
  Synthetic whole;
  whole.step_ms = 2.5;
  Journal ja(a / "journal.jsonl", false);
  const SweepOutcome full = run_sweep(o, ja, std::ref(whole), diag);
  ASSERT_GT(ja.entries().size(), 8u);
  EXPECT_EQ(ja.entries()[0].phase, "calibrate");
  EXPECT_EQ(ja.entries()[0].config.at("steps"), "4");
  int short_trials = 0;
  for (size_t i = 1; i < ja.entries().size(); ++i) {
    const JournalEntry& e = ja.entries()[i];
    if (e.phase == "verify" || e.phase == "verify-baseline") {
      EXPECT_NE(e.config.at("steps"), "402") << i;
      continue;
    }
    ++short_trials;
    EXPECT_EQ(e.config.at("steps"), "402") << i << " " << e.phase;
    EXPECT_EQ(e.config.at("warmup-excluded"), "2");
  }
  EXPECT_GT(short_trials, 5);
  ASSERT_FALSE(diag_steps.empty());
  for (const auto& s : diag_steps) EXPECT_EQ(s, "4");
  bool said = false;
  for (const auto& d : full.decisions) {
    said = said || d.text.find("runs 402 steps (400 measured, 1.00 s") != std::string::npos;
  }
  EXPECT_TRUE(said);
  // A sweep killed after the calibration resumes with the same trial length and trials.
  Synthetic killed;
  killed.step_ms = 2.5;
  killed.fail_after = 3;
  {
    Journal jb(b / "journal.jsonl", false);
    EXPECT_THROW(run_sweep(o, jb, std::ref(killed), diag), std::runtime_error);
  }
  Synthetic rest;
  rest.step_ms = 99;  // only the journaled calibration may set the length
  rest.calls = 3;
  Journal jb(b / "journal.jsonl", true);
  run_sweep(o, jb, std::ref(rest), diag);
  ASSERT_EQ(jb.entries().size(), ja.entries().size());
  for (size_t i = 0; i < ja.entries().size(); ++i) {
    EXPECT_EQ(jb.entries()[i].config, ja.entries()[i].config) << i;
  }
  // The length is capped, and a negative --trial-seconds is refused.
  Synthetic fast;
  fast.step_ms = 1e-6;
  const fs::path c = temp_dir("seconds_c");
  Journal jc(c / "journal.jsonl", false);
  o.strategy = "grid";
  o.space = {{"precision", {{{"precision", "fp32"}}, {{"precision", "bf16"}}}}};
  run_sweep(o, jc, std::ref(fast), diag);
  EXPECT_EQ(jc.entries()[1].config.at("steps"), std::to_string(kMaxTrialSteps));
  o.trial_seconds = -1;
  Journal jd(c / "journal2.jsonl", false);
  EXPECT_THROW(run_sweep(o, jd, std::ref(fast), diag), ConfigError);
}

TEST(Sweep, ARoundWhoseMachineSpeedMovedIsVoidedAndRunAgain) {
  // The machine runs at speed 100 except during trials 5-7 (calls counted from 1), when a
  // co-tenant halves it and every trial measures half its throughput. Round 1 of the guided
  // side-by-side (trials 2-5: the incumbent and three compute candidates) straddles the change:
  // its probes read 100 and 50, so it is voided and run again. The
  // decision then rests on rounds measured in one machine state each.
  const DiagnoseFn diag = [](int, const Config&) {
    Diagnosis d;
    d.totals[kCompute] = 0.9;
    return d;
  };
  struct Slow {
    Synthetic syn;
    int probes = 0;
    bool slow() const { return syn.calls >= 5 && syn.calls <= 7; }
    TrialResult run(const std::string& id, const Config& c) {
      TrialResult r = syn(id, c);
      if (slow()) r.tokens_per_s *= 0.5;
      return r;
    }
  } m;
  m.syn.noise = 0;
  m.syn.naive = 1.1;
  SweepOptions o = guided_options();
  o.machine_probe = [&] { return m.slow() ? 50.0 : 100.0; };
  const fs::path a = temp_dir("drift_a");
  Journal ja(a / "journal.jsonl", false);
  const auto run = [&](const std::string& id, const Config& c) { return m.run(id, c); };
  const SweepOutcome out = run_sweep(o, ja, run, diag);
  int voided = 0;
  for (const auto& d : out.decisions) {
    if (d.text.find("voided and run again") == std::string::npos) continue;
    ++voided;
    EXPECT_NE(d.text.find("moved by 100%"), std::string::npos) << d.text;
  }
  EXPECT_GE(voided, 1);
  for (const auto& row : out.confirmation) {
    for (double r : row.ratios) EXPECT_GT(r, 0.9) << row.change;  // no 0.5x or 2x ratios
  }
  EXPECT_GT(ja.entries()[1].machine_before, 0);
  // Resumed from a journal cut after the voided round, the sweep replays the same decisions
  // (the probes come from the journal, not from the machine now).
  const fs::path b = temp_dir("drift_b");
  {
    Journal jb(b / "journal.jsonl", false);
    for (size_t i = 0; i < 9; ++i) jb.append(ja.entries()[i]);
  }
  Journal jb(b / "journal.jsonl", true);
  SweepOptions fast = o;
  fast.machine_probe = [] { return 100.0; };
  Synthetic rest;
  rest.noise = 0;
  rest.naive = 1.1;
  rest.calls = 9;
  const SweepOutcome resumed = run_sweep(fast, jb, std::ref(rest), diag);
  ASSERT_EQ(resumed.decisions.size(), out.decisions.size());
  for (size_t i = 0; i < out.decisions.size(); ++i) {
    EXPECT_EQ(resumed.decisions[i].text, out.decisions[i].text) << i;
  }
  // With the check off the straddling round counts.
  SweepOptions off = o;
  off.machine_drift = 0;
  m = Slow{};
  m.syn.noise = 0;
  m.syn.naive = 1.1;
  const fs::path c = temp_dir("drift_c");
  Journal jc(c / "journal.jsonl", false);
  const SweepOutcome plain = run_sweep(off, jc, run, diag);
  for (const auto& d : plain.decisions) {
    EXPECT_EQ(d.text.find("voided"), std::string::npos) << d.text;
  }
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
    return diagnosis(
        {finding("batch", 0.3, Severity::kWarning, "small batch", {"--micro-batch 64"}),
         finding("compute", 0.3, Severity::kWarning, "fp32", {"--precision bf16"})});
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
      derived_knobs(finding("comm", 0.3, Severity::kWarning, "Communication is exposed", {}), inc);
  ASSERT_EQ(comm.size(), 3u);
  EXPECT_EQ(comm[0], (Config{{"overlap", "true"}}));
  EXPECT_EQ(comm[1], (Config{{"bucket-mb", "20"}}));
  EXPECT_EQ(comm[2], (Config{{"grad-accum", "4"}}));
  Config on = inc;
  on["overlap"] = "true";
  EXPECT_EQ(derived_knobs(finding("comm", 0.3, Severity::kWarning, "x", {}), on).size(), 2u);
  const auto bubble = derived_knobs(finding("parallel", 0.4, Severity::kCritical,
                                            "Pipeline bubble 100% (theory (p-1)/m = 100%)", {}),
                                    inc);
  ASSERT_EQ(bubble.size(), 2u);
  EXPECT_EQ(bubble[0], (Config{{"micro-batch", "2"}, {"grad-accum", "4"}}));  // same global batch
  EXPECT_EQ(bubble[1], (Config{{"grad-accum", "8"}}));
  EXPECT_TRUE(
      derived_knobs(finding("parallel", 0.3, Severity::kWarning, "Straggler: rank 1 ...", {}), inc)
          .empty());
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
      return diagnosis({finding("comm", 0.4, Severity::kCritical, "Communication is exposed", {})});
    return Diagnosis{};
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

}  // namespace
}  // namespace ft::tuner
