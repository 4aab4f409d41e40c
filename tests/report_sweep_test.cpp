// report_sweep_test.cpp: the sweep report's JSON, Markdown and HTML goldens, charts and escaping.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <string>

#include "ft/reports/report.h"
#include "ft/reports/sweep_report.h"
#include "reference/report_sample.h"

namespace ft::reports {
namespace {

size_t count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
  return n;
}

SweepTrial trial(int id, SweepTrialKind kind, const std::string& phase, const std::string& change,
                 double tps, double mem_mib, const std::string& status = "ok") {
  SweepTrial t;
  t.id = id;
  t.kind = kind;
  t.phase = phase;
  t.change = change;
  t.status = status;
  t.tokens_per_s = tps;
  t.step_tps_spread = 0.04;
  t.mem_peak = mem_mib * 1048576.0;
  t.predicted_mem = mem_mib * 1048576.0 * 1.1;
  t.final_loss = 2.5 + 0.01 * id;
  t.record = {{"id", id}, {"phase", phase}, {"change", change}, {"status", status}};
  return t;
}

// A small guided sweep: baseline, two candidates (one on the Pareto front, one dominated), a
// confirmation round and verification runs (one rejected).
SweepReport sample_sweep() {
  SweepReport r;
  r.strategy = "guided";
  r.seed = 1337;
  r.baseline = {{"micro-batch", "4"}, {"seq-len", "64"}};
  r.best = {{"micro-batch", "4"}, {"precision", "bf16"}, {"seq-len", "64"}};
  r.best_change = "precision bf16";
  r.baseline_trial = 0;
  r.best_trial = 1;
  r.baseline_tokens_per_s = 1000;
  r.best_tokens_per_s = 1500;
  r.speedup = 1.48;
  r.speedup_basis = "median ratio in the confirmation round";
  r.confirmed_ratio = 1.48;
  r.confirmation = {
      {"baseline", r.baseline, {3, 6}, {1000, 1010}, {1, 1}, 1005, 1, 0, false},
      {"precision bf16", r.best, {4, 5}, {1480, 1500}, {1.48, 1.485}, 1490, 1.48, 0.003, true}};
  r.stop_reason = "no finding promises more than 5% of step time";
  r.trials_run = 9;
  r.diagnoses = 2;
  r.trial_time_s = 18.25;
  r.verification_rules = "smoothed final loss within 2% + 0.02 of the baseline's";
  r.baseline_verify = 7;
  r.best_verify = 8;
  r.accepted_verifies = {8};
  r.baseline_verify_final_loss = 2.6;
  r.verified = SweepVerified{2.6, 2.61, 2.672, true};
  using K = SweepTrialKind;
  r.trials = {trial(0, K::kThroughput, "baseline", "baseline", 1000, 10),
              trial(1, K::kThroughput, "trial", "precision bf16", 1500, 8),
              trial(2, K::kThroughput, "trial", "checkpoint block", 900, 12),
              trial(3, K::kThroughput, "confirm", "baseline", 1000, 10),
              trial(4, K::kThroughput, "confirm", "precision bf16", 1480, 8),
              trial(5, K::kThroughput, "confirm", "precision bf16", 1500, 8),
              trial(6, K::kThroughput, "confirm", "baseline", 1010, 10),
              trial(7, K::kVerifyBaseline, "verify-baseline", "baseline", 990, 10),
              trial(8, K::kVerify, "verify", "precision bf16", 1470, 8),
              trial(9, K::kVerify, "verify", "precision fp16", 0, 0, "rejected")};
  r.trials[9].reason = "REJECTED by the loss-curve check: non-finite loss at step 4";
  for (int id : {7, 8, 9}) {
    auto& t = r.trials[static_cast<size_t>(id)];
    for (int s = 1; s <= 6; ++s) {
      t.tokens.push_back(256.0 * s);
      t.losses.push_back(id == 9 && s > 3 ? std::nan("") : 5.0 - 0.4 * s + 0.01 * id);
    }
  }
  r.decisions = {{1, "diagnose", "diagnosis of baseline: compute 40% (fp32 GEMMs)", {}},
                 {1, "measure", "precision bf16: median ratio 1.480", {1, 4, 5}},
                 {1, "accept", "precision bf16", {8}},
                 {2, "reject", "precision fp16: REJECTED by the loss-curve check", {9}},
                 {2, "stop", "no finding promises more than 5% of step time", {}}};
  r.pareto_front = {1};
  r.predictions = {
      {1,
       "precision",
       "fp32 GEMMs <on the SIMT cores>",
       "precision bf16",
       12.5,
       13.2,
       12.5 / 13.2 - 1,
       {1, 0}},
      {1, "precision", "fp32 GEMMs", "precision fp16", 12.5, 12.0, 12.5 / 12.0 - 1, {2, 0}},
      {2, "data", "loader", "loader-workers 2", 10, 8, 0.25, {3, 0}}};
  r.grid_size = 24;
  return r;
}

TEST(ReportSweep, JsonGolden) {
  const std::string text = render_sweep_json(sample_sweep());
  testing::expect_golden("sweep_small.json", text);
  const nlohmann::json j = nlohmann::json::parse(text);
  EXPECT_EQ(j["best_change"], "precision bf16");
  EXPECT_EQ(j["trials"].size(), 10u);
  // The predictions with the median |error| per class: precision (5.3%, 4.2%) -> 4.75%.
  ASSERT_EQ(j["predictions"].size(), 3u);
  EXPECT_NEAR(j["prediction_median_abs_error"]["precision"]["median"].get<double>(),
              (1 - 12.5 / 13.2 + 12.5 / 12.0 - 1) / 2, 1e-12);
  EXPECT_EQ(j["prediction_median_abs_error"]["precision"]["n"], 2);
  EXPECT_DOUBLE_EQ(j["prediction_median_abs_error"]["data"]["median"].get<double>(), 0.25);
  EXPECT_EQ(j["grid_size"], 24);
  EXPECT_EQ(j["trials"][1]["change"], "precision bf16");  // the journal records as given
  EXPECT_EQ(j["confirmation"][1]["beats_baseline"], true);
  EXPECT_EQ(j["verified"]["accepted"], true);
  EXPECT_EQ(j["pareto_front"], nlohmann::json::array({1}));
}

TEST(ReportSweep, MarkdownGolden) {
  const std::string md = render_sweep_markdown(sample_sweep());
  testing::expect_golden("sweep_small.md", md);
  for (const char* s : {"# ft-tune sweep (guided)", "## Confirmation round", "## Trials",
                        "## Pareto front", "## Decisions"}) {
    EXPECT_NE(md.find(s), std::string::npos) << s;
  }
}

TEST(ReportSweep, HtmlGoldenInTheDiagnosisReportsStyle) {
  const std::string html = render_sweep_html(sample_sweep());
  testing::expect_golden("sweep_small.html", html);
  EXPECT_EQ(html.rfind("<!DOCTYPE html>", 0), 0u);
  // The diagnosis report's page: its CSS, a policy without network or scripts, summary cards.
  EXPECT_NE(html.find("svg .tick,svg .legend"), std::string::npos);
  EXPECT_NE(html.find("content=\"default-src 'none'; style-src 'unsafe-inline'; img-src data:\""),
            std::string::npos);
  EXPECT_EQ(html.find("<script"), std::string::npos);
  EXPECT_NE(html.find("<div class=\"card\"><div class=\"k\">speed-up</div>"), std::string::npos);
  // Both charts have axes with ticks, a caption and a legend.
  for (const char* id : {"ft-sweep-throughput", "ft-sweep-curves"}) {
    const size_t a = html.find(std::string("<svg id=\"") + id + "\"");
    ASSERT_NE(a, std::string::npos) << id;
    const std::string svg = html.substr(a, html.find("</svg>", a) - a);
    EXPECT_GT(count(svg, "class=\"tick\""), 4u) << id;
    EXPECT_EQ(count(svg, "class=\"caption\""), 1u) << id;
    EXPECT_GT(count(svg, "class=\"legend\""), 1u) << id;
  }
  // The scatter: every ok throughput trial a marker with its tooltip, the best one apart.
  EXPECT_NE(html.find("<title>trial 2: checkpoint block — 900 tokens/s, 12.0 MiB</title>"),
            std::string::npos);
  EXPECT_NE(html.find(">best</text>"), std::string::npos);
  EXPECT_NE(html.find(">Pareto front</text>"), std::string::npos);
  // The rejected verification run is dashed, its NaN losses marked.
  EXPECT_EQ(count(html, "stroke-dasharray"), 1u);
  EXPECT_GT(count(html, "<line class=\"nan\""), 0u);
  EXPECT_NE(html.find("<tr class=\"st-rejected\">"), std::string::npos);
}

TEST(ReportSweep, TextFromTheSweepIsEscapedInEveryFormat) {
  SweepReport r = sample_sweep();
  r.best_change = "data <script>alert(1)</script>";
  r.trials[2].change = "a|b <img src=x>";
  r.trials[2].reason = "*bold* `code`";
  r.decisions[0].text = "<b>GEMMs</b> & 'quotes'";
  const std::string html = render_sweep_html(r);
  EXPECT_EQ(html.find("<script>"), std::string::npos);
  EXPECT_EQ(html.find("<img"), std::string::npos);
  EXPECT_EQ(html.find("<b>GEMMs"), std::string::npos);
  EXPECT_NE(html.find("&lt;b&gt;GEMMs&lt;/b&gt; &amp; &#39;quotes&#39;"), std::string::npos);
  EXPECT_NE(html.find("<title>trial 2: a|b &lt;img src=x&gt; — 900 tokens/s, 12.0 MiB</title>"),
            std::string::npos);
  const std::string md = render_sweep_markdown(r);
  EXPECT_EQ(md.find("<script>"), std::string::npos);
  EXPECT_NE(md.find("| a\\|b &lt;img src=x&gt; |"), std::string::npos);
  EXPECT_NE(md.find("\\*bold\\* \\`code\\`"), std::string::npos);
  // JSON keeps the text as it is (a string value), so it round-trips.
  const nlohmann::json j = nlohmann::json::parse(render_sweep_json(r));
  EXPECT_EQ(j["best_change"], "data <script>alert(1)</script>");
}

TEST(ReportSweep, AnEmptySweepStillRenders) {
  SweepReport r;
  r.strategy = "grid";
  const std::string html = render_sweep_html(r);
  EXPECT_NE(html.find("No successful trials to plot."), std::string::npos);
  EXPECT_NE(html.find("No verification runs."), std::string::npos);
  EXPECT_EQ(html.find("id=\"confirmation\""), std::string::npos);
  EXPECT_NE(render_sweep_markdown(r).find("## Decisions"), std::string::npos);
  EXPECT_EQ(nlohmann::json::parse(render_sweep_json(r))["trials"].size(), 0u);
}

// A candidate the budget never let run beside the baseline reads "not run", not "x0.000".
TEST(ReportSweep, ARowThatNeverRanIsNotShownAsZero) {
  SweepReport r;
  r.strategy = "guided";
  r.confirmation = {{"baseline", {}, {0}, {1000}, {1}, 1000, 1, 0, false},
                    {"precision bf16", {}, {-1}, {0}, {}, 0, 0, 0, false}};
  const std::string md = render_sweep_markdown(r);
  EXPECT_NE(md.find("| precision bf16 | 0 | not run | - | no |"), std::string::npos) << md;
  EXPECT_EQ(md.find("0.000"), std::string::npos) << md;
  EXPECT_NE(render_sweep_html(r).find("not run"), std::string::npos);
}

// A program that reports no memory (ft-tune --spec): its peak and predicted MiB read "—", the
// Pareto front and the scatter say why they are empty, rather than plot every trial at 0 MiB.
TEST(ReportSweep, TrialsWithoutMemoryAreNotPlottedAtZero) {
  SweepReport r = sample_sweep();
  for (auto& t : r.trials) t.mem_peak = t.predicted_mem = 0;
  r.pareto_front.clear();
  const std::string md = render_sweep_markdown(r);
  EXPECT_NE(md.find("- none: no trial recorded its peak memory"), std::string::npos) << md;
  EXPECT_EQ(md.find("| 0.0 |"), std::string::npos) << md;
  const std::string html = render_sweep_html(r);
  EXPECT_NE(html.find("No trial recorded its peak memory"), std::string::npos);
  EXPECT_EQ(html.find("id=\"ft-sweep-throughput\""), std::string::npos);
}

// A verified change whose loss curve is the baseline's point for point (a loader change on the
// same data) is drawn over it: the legend says so rather than show one line for two runs.
TEST(ReportSweep, ACurveOnTopOfTheBaselinesIsSaidToBe) {
  SweepReport r = sample_sweep();
  r.trials[8].losses = r.trials[7].losses;
  r.trials[8].tokens = r.trials[7].tokens;
  const std::string html = render_sweep_html(r);
  EXPECT_NE(html.find("the same loss as the baseline at every point"), std::string::npos);
  EXPECT_EQ(render_sweep_html(sample_sweep()).find("the same loss as the baseline"),
            std::string::npos);
}
}  // namespace
}  // namespace ft::reports
