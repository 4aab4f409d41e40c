// tune_cli_test.cpp: ft-tune end to end with real ft-train trials on tiny models.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "ft/core/atomic_file.h"
#include "ft/reports/report.h"
#include "ft/trainer/communicator.h"
#include "ft/trainer/launch.h"
#include "ft/tuner/journal.h"
#include "ft/tuner/search.h"
#include "ft/tuner/trial.h"
#include "ft/tuner/verify.h"
#include "reference/run_cli.h"
#include "test_scratch.h"

namespace ft::tuner {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const std::string kBin = FT_BINARY_DIR;

fs::path temp_dir(const std::string& name) { return ft::test::scratch_dir("ft_tune_cli_" + name); }

fs::path corpus() {
  static const fs::path p = [] {
    const fs::path d = temp_dir("corpus");
    std::string text;
    for (int i = 0; i < 400; ++i) {
      text += "In the beginning God created the heaven and the earth. " + std::to_string(i % 7) +
              "\n\n";
    }
    write_file_atomic(d / "c.txt", text);
    return d / "c.txt";
  }();
  return p;
}

using Result = ft::testing::CliResult;

Result sh(const std::string& cmd) { return ft::testing::run_shell(cmd); }

std::string tiny() {
  return " --data " + corpus().string() +
         " --layers 1 --heads 2 --channels 32 --seq-len 32 --threads 1 ";
}

Result tune(const std::string& args) { return sh(kBin + "/ft-tune " + args); }

std::vector<JournalEntry> journal(const fs::path& dir) {
  Journal j(dir / "journal.jsonl", true);
  return j.entries();
}

json report(const fs::path& dir) { return json::parse(read_file(dir / "report.json")); }

TEST(TuneCli, GridOnATinySpaceWritesReportsAndALoadableBestCfg) {
  const fs::path d = temp_dir("grid");
  const Result r =
      tune("--out " + d.string() +
           " --strategy grid --knobs precision,attention --machine-drift 0 "  // fixed round count
           "--trial-steps 6 --verify-steps 30 --micro-batch 4" +
           tiny());
  ASSERT_EQ(r.status, 0) << r.out;
  const auto entries = journal(d);
  const json rep = report(d);
  EXPECT_EQ(rep["trials_run"].get<size_t>(), entries.size());
  int grid = 0;
  for (size_t i = 0; i < entries.size(); ++i) {
    EXPECT_EQ(entries[i].id, static_cast<int>(i));
    grid += entries[i].phase == "grid" || entries[i].phase == "baseline";
  }
  EXPECT_EQ(grid, 6);  // 3 precisions x 2 attentions; "fp32 + flash" is the baseline itself
  EXPECT_EQ(entries[0].phase, "baseline");
  // The confirmation round: the baseline and the 3 fastest single trials, 3 rounds, alternating.
  ASSERT_EQ(rep["confirmation"].size(), 4u) << rep.dump(1);
  EXPECT_EQ(rep["confirmation"][0]["change"], "baseline");
  std::vector<std::string> order;
  for (const auto& e : entries) {
    if (e.phase == "confirm") order.push_back(e.change);
    if (e.phase == "confirm" || e.phase == "grid") {
      EXPECT_GT(e.result.measured_steps, 0);
      EXPECT_GT(e.result.step_tps_median, 0);
    }
  }
  // 12 (three alternating rounds of 4 rows), or more when the sign test left rows undecided and
  // the promising rows ran as many rounds again with the reference (3 more trials per row).
  ASSERT_GE(order.size(), 12u);
  ASSERT_LE(order.size(), 24u);
  EXPECT_EQ((order.size() - 12) % 3, 0u);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(order[i], order[7 - i]);  // round 1 runs round 0's order backwards
    EXPECT_EQ(order[i], order[8 + i]);
  }
  EXPECT_EQ(order[0], "baseline");
  EXPECT_GT(rep["confirmed_ratio"].get<double>(), 0);
  const std::string html = read_file(d / "report.html");
  EXPECT_NE(html.find("<svg id=\"ft-sweep-throughput\""), std::string::npos);
  EXPECT_NE(html.find("<section id=\"curves\">"), std::string::npos);
  EXPECT_NE(read_file(d / "report.md").find("## Decisions"), std::string::npos);
  EXPECT_NE(r.out.find("trials done"), std::string::npos);  // the progress line
  // best.cfg loads in ft-train.
  const Result t = sh(kBin + "/ft-train --config " + (d / "best.cfg").string() + " --steps 2 -q");
  EXPECT_EQ(t.status, 0) << t.out;
}

// --ranks 2: every trial is `mpirun -np 2 ft-train --dp 2 ...`; the DP communication knobs are
// a grid dimension.
TEST(TuneCli, RanksRunTrialsUnderMpirunOverTheParallelKnobs) {
  if (!trainer::mpi_supported()) GTEST_SKIP() << "ft built without MPI";
  if (trainer::find_mpirun().empty()) GTEST_SKIP() << "mpirun is not on PATH";
  const fs::path d = temp_dir("ranks");
  const Result r = tune("--out " + d.string() +
                        " --ranks 2 --strategy grid --knobs dp-comm --budget-trials 3 "
                        "--trial-steps 4 --verify-steps 10 --micro-batch 2" +
                        tiny());
  ASSERT_EQ(r.status, 0) << r.out;
  const auto entries = journal(d);
  ASSERT_GE(entries.size(), 3u);
  std::set<std::string> overlap;
  for (size_t i = 0; i < 3; ++i) {
    const auto& e = entries[i];
    EXPECT_EQ(e.result.status, TrialStatus::kOk) << e.result.reason;
    EXPECT_EQ(e.config.at("dp"), "2");  // the baseline became data-parallel over the ranks
    EXPECT_GT(e.result.tokens_per_s, 0);
    EXPECT_EQ(e.result.losses.size(), 4u);
    if (e.config.count("overlap")) overlap.insert(e.config.at("overlap"));
  }
  EXPECT_FALSE(overlap.empty());
  // Rank 0's metrics file of each trial is what was read.
  bool rank0 = false;
  for (const auto& f : fs::directory_iterator(d / "trials"))
    rank0 |= f.path().filename().string().find(".rank0.jsonl") != std::string::npos;
  EXPECT_TRUE(rank0);
  EXPECT_EQ(tune("--out " + d.string() + "x --ranks 0 --strategy grid").status, 2);
}

TEST(TuneCli, OomTimeoutAndPredictedSkipAreRecordedAndTheSweepGoesOn) {
  const std::string model = " --data " + corpus().string() +
                            " --layers 1 --heads 4 --channels 32 --seq-len 256 --micro-batch 4 "
                            "--threads 2 --memory-limit 6M";
  // Measured: flash peaks at 4.0 MiB, naive attention at 8.0 MiB.
  const fs::path a = temp_dir("oom");
  Result r = tune("--out " + a.string() +
                  " --strategy grid --knobs attention --no-memory-skip "
                  "--trial-steps 3 --verify-steps 10" +
                  model);
  ASSERT_EQ(r.status, 0) << r.out;
  auto e = journal(a);
  ASSERT_GE(e.size(), 2u);
  EXPECT_EQ(e[0].result.status, TrialStatus::kOk);
  EXPECT_EQ(e[1].config.at("attention"), "naive");
  EXPECT_EQ(e[1].result.status, TrialStatus::kOom);
  EXPECT_NE(e[1].result.reason.find("out of memory"), std::string::npos) << e[1].result.reason;
  // With the memory model on, the same config is skipped before it runs, and the report says so.
  const fs::path b = temp_dir("skip");
  r = tune("--out " + b.string() +
           " --strategy grid --knobs attention --trial-steps 3 "
           "--verify-steps 10" +
           model);
  ASSERT_EQ(r.status, 0) << r.out;
  e = journal(b);
  ASSERT_GE(e.size(), 2u);
  EXPECT_TRUE(e[1].skipped);
  EXPECT_EQ(e[1].result.status, TrialStatus::kRejected);
  EXPECT_NE(read_file(b / "report.md").find("memory model predicts"), std::string::npos);
  // A trial longer than --trial-timeout is killed and marked. Here it is the baseline: with
  // nothing to compare against, the sweep stops there and fails (exit 1, no best.cfg).
  const fs::path c = temp_dir("timeout");
  r = tune("--out " + c.string() +
           " --strategy grid --knobs attention --trial-steps 200000 "
           "--trial-timeout 1 --micro-batch 4" +
           tiny());
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.out.find("the baseline's trial failed (timeout"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(c / "best.cfg"));
  e = journal(c);
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e[0].result.status, TrialStatus::kTimeout);
  EXPECT_NE(e[0].result.reason.find("time limit"), std::string::npos);
  EXPECT_NE(read_file(c / "report.md").find("the baseline trial failed"), std::string::npos);
}

// A memory limit too small for the baseline: the memory model prunes the memory-knob
// configurations predicted over it unrun, the fitting ones are measured, the fastest whose loss
// converges becomes the baseline, and the pruning is checked by the trial nearest the limit.
// Pretraining fits by recompute / micro-batch split; a fine-tuning run whose model states alone
// exceed the limit fits only as QLoRA.
TEST(TuneCli, ABudgetTooSmallForPlainTrainingIsFittedAndTrains) {
  struct Case {
    std::string name, model, extra;
    bool qlora;
  };
  const std::string shape =
      " --layers 4 --heads 4 --channels 256 --threads 2 --data " + corpus().string();
  const fs::path base = temp_dir("fit_base") / "base.bin";
  ASSERT_EQ(sh(kBin + "/ft-train" + shape +
               " --seq-len 32 --micro-batch 4 --steps 1 --quiet "
               "--export-llmc " +
               base.string())
                .status,
            0);
  const Case cases[] = {
      // Measured: 58.6 MiB plain (model states 51 MiB); QLoRA 13.5 MiB.
      {"qlora", shape + " --seq-len 32 --micro-batch 4 --init-from " + base.string(),
       " --memory-limit 30M", true},
      // Activations dominate (measured 39.8 MiB; recompute 23.7 MiB, micro-batch 4 10.2 MiB):
      // a smaller micro-batch (with or without recompute) fits, recompute alone is pruned.
      {"activations",
       " --layers 2 --heads 2 --channels 32 --threads 2 --data " + corpus().string() +
           " --seq-len 256 --micro-batch 16 --attention naive",
       " --memory-limit 16M", false},
  };
  for (const Case& c : cases) {
    const fs::path d = temp_dir("fit_" + c.name);
    Result r =
        tune("--out " + d.string() +
             " --trial-steps 4 --verify-steps 20 --budget-trials 6 --lr 1e-3" + c.model + c.extra);
    ASSERT_EQ(r.status, 0) << c.name << "\n" << r.out;
    EXPECT_NE(r.out.find("fitted to --memory-limit"), std::string::npos) << r.out;
    const auto e = journal(d);
    ASSERT_GE(e.size(), 2u);
    int fit_trials = 0;
    for (const auto& t : e) {
      if (t.phase != "fit") continue;
      ++fit_trials;
      EXPECT_EQ(t.result.status, TrialStatus::kOk) << t.change;
      EXPECT_GT(t.predicted_mem, 0);
      EXPECT_EQ(t.config.count("qlora") > 0, c.qlora) << t.change;
    }
    EXPECT_GE(fit_trials, 1);
    const json j = report(d);
    ASSERT_TRUE(j.contains("fitted_to_memory")) << j.dump(1);
    const std::string md = read_file(d / "report.md");
    EXPECT_NE(md.find("pruning confirmed"), std::string::npos) << md;
    EXPECT_NE(md.find("loss converges"), std::string::npos) << md;
    // best.cfg trains inside the limit.
    const std::string cfg = read_file(d / "best.cfg");
    EXPECT_EQ(cfg.find("qlora = true") != std::string::npos, c.qlora) << cfg;
    Result t = sh(kBin + "/ft-train --config " + (d / "best.cfg").string() + " --steps 3 --quiet");
    EXPECT_EQ(t.status, 0) << t.out;
    fs::remove_all(d);
  }
}

TEST(TuneCli, TrialSecondsCalibratesTheTrialLengthFromTheBaseline) {
  // --trial-seconds with --trial-steps as the floor: a calibration run of the baseline, then
  // every grid trial long enough for ~0.3 s of the baseline's steps (more than the floor of 3).
  const fs::path a = temp_dir("seconds");
  const Result r = tune("--out " + a.string() +
                        " --strategy grid --knobs attention --trial-steps 3 --trial-seconds 0.3 "
                        "--confirm-rounds 0 --verify-steps 10 --micro-batch 2 --steps 7" +
                        tiny());
  ASSERT_EQ(r.status, 0) << r.out;
  // The user's --steps is not replaced silently: the lengths used, and the calibration's.
  EXPECT_NE(r.out.find("the baseline's --steps 7 is not used by the sweep"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("ft-tune: trial length: the baseline ran"), std::string::npos) << r.out;
  const auto e = journal(a);
  ASSERT_GE(e.size(), 3u);
  EXPECT_EQ(e[0].phase, "calibrate");
  EXPECT_EQ(e[0].config.at("steps"), "3");
  ASSERT_EQ(e[0].result.status, TrialStatus::kOk);
  const int steps = std::stoi(e[1].config.at("steps"));
  const int want = static_cast<int>(std::ceil(300.0 / e[0].result.step_ms)) + 2;
  EXPECT_EQ(steps, std::max(3, want));
  EXPECT_GT(steps, 3);
  EXPECT_EQ(e[2].config.at("steps"), e[1].config.at("steps"));
  EXPECT_NE(read_file(a / "report.md").find("trial length: the baseline ran"), std::string::npos);
  // --trial-steps alone keeps the fixed length (no calibration run).
  const fs::path b = temp_dir("fixed");
  ASSERT_EQ(tune("--out " + b.string() +
                 " --strategy grid --knobs attention --trial-steps 3 --confirm-rounds 0 "
                 "--verify-steps 10 --micro-batch 2" +
                 tiny())
                .status,
            0);
  const auto f = journal(b);
  ASSERT_GE(f.size(), 2u);
  EXPECT_EQ(f[0].phase, "baseline");
  EXPECT_EQ(f[1].config.at("steps"), "3");
  EXPECT_EQ(tune("--out " + b.string() + "x --strategy grid --trial-seconds -1" + tiny()).status,
            2);
}

// A configuration ft-train refuses is journaled as a configuration error (not "crash: exit
// status 2"), and as the baseline it fails the sweep: exit 1, no best.cfg, a report that says so
// and claims no confirmation round.
TEST(TuneCli, ABaselineFtTrainRefusesFailsTheSweep) {
  const fs::path d = temp_dir("refused");
  const Result r = tune("--out " + d.string() + " --strategy guided --data /nonexistent");
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.out.find("nothing to compare with"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(d / "best.cfg"));
  const auto e = journal(d);
  ASSERT_GE(e.size(), 1u);
  EXPECT_EQ(e[0].result.status, TrialStatus::kConfigError);
  EXPECT_NE(e[0].result.reason.find("--data '/nonexistent'"), std::string::npos);
  const json rep = report(d);
  EXPECT_EQ(rep["best_change"], "none");
  EXPECT_EQ(rep["speedup_basis"].get<std::string>().find("the baseline's trial failed"), 0u);
  EXPECT_EQ(read_file(d / "report.md").find("confirmation round"), std::string::npos);
}

TEST(TuneCli, KillDashNineMidSweepThenResumeLosesAndRepeatsNothing) {
  const fs::path a = temp_dir("kill"), b = temp_dir("whole");
  const std::string args =
      " --strategy grid --knobs precision,attention "
      "--trial-steps 20 --verify-steps 20 --micro-batch 4" +
      tiny();
  const fs::path log = temp_dir("kill_log") / "ft-tune.log";  // removed at exit like a and b
  const std::string cmd =
      kBin + "/ft-tune --out " + a.string() + args + " > " + log.string() + " 2>&1";
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    execl("/bin/sh", "sh", "-c", ("exec " + cmd).c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  // Wait for a few journaled trials, then kill the sweep without warning.
  size_t lines = 0;
  const auto t0 = std::chrono::steady_clock::now();
  while (lines < 3 && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(120)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));  // polling the journal
    std::ifstream in(a / "journal.jsonl");
    lines = 0;
    for (std::string l; std::getline(in, l);) ++lines;
  }
  ASSERT_GE(lines, 3u) << "the sweep journaled too few trials to kill it mid-sweep";
  ASSERT_EQ(kill(pid, SIGKILL), 0);
  int st = 0;
  waitpid(pid, &st, 0);
  const size_t before = journal(a).size();
  Result r = tune("--out " + a.string() + args);
  EXPECT_EQ(r.status, 2) << "an existing journal without --resume must be refused: " << r.out;
  r = tune("--out " + a.string() + args + " --resume");
  ASSERT_EQ(r.status, 0) << r.out;
  const auto resumed = journal(a);
  EXPECT_GT(resumed.size(), before);
  const Result w = tune("--out " + b.string() + args);
  ASSERT_EQ(w.status, 0) << w.out;
  const auto whole = journal(b);
  // Every grid point exactly once, in the uninterrupted sweep's order.
  std::set<std::string> seen;
  size_t k = 0;
  for (const auto& e : resumed) {
    EXPECT_EQ(e.id, static_cast<int>(k));
    if (e.phase == "grid" || e.phase == "baseline") {
      EXPECT_TRUE(seen.insert(config_key(e.config)).second) << "repeated: " << config_key(e.config);
      ASSERT_LT(k, whole.size());
      EXPECT_EQ(config_key(e.config), config_key(whole[k].config));
    }
    ++k;
  }
  EXPECT_EQ(seen.size(), 6u);
  // Decisions depend only on the journal: resuming the finished sweep replays it, runs nothing
  // and decides the same.
  const json first = report(a);
  r = tune("--out " + a.string() + args + " --resume");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(journal(a).size(), resumed.size());
  EXPECT_EQ(report(a)["decisions"], first["decisions"]);
  EXPECT_EQ(report(a)["best"], first["best"]);
}

// The rejection itself, deterministic: loss curves do not depend on timing.
TEST(TuneCli, VerificationRejectsALinearlyScaledLrThatBreaksConvergence) {
  const fs::path d = temp_dir("verify");
  const Config base = parse_flag_words({"--data",        corpus().string(),
                                        "--layers",      "2",
                                        "--heads",       "2",
                                        "--channels",    "32",
                                        "--seq-len",     "32",
                                        "--threads",     "1",
                                        "--micro-batch", "1",
                                        "--lr",          "0.03",
                                        "--min-lr",      "0",
                                        "--warmup",      "0",
                                        "--steps",       "160",
                                        "--quiet"});
  std::string why;
  const auto big = apply_knob(base, {{"micro-batch", "16"}}, BatchRule{true, "linear"}, &why);
  ASSERT_TRUE(big) << why;
  EXPECT_EQ(big->at("lr"), "0.48");
  EXPECT_EQ(big->at("steps"), "10");
  TrialOptions opt{kBin + "/ft-train", d, 300};
  const TrialResult rb = run_trial("base", base, opt);
  const TrialResult rc = run_trial("big", *big, opt);
  ASSERT_EQ(rb.status, TrialStatus::kOk) << rb.reason;
  ASSERT_EQ(rc.status, TrialStatus::kOk) << rc.reason;
  EXPECT_NEAR(rb.tokens.back(), rc.tokens.back(), 1);  // equal tokens: 160 x 32 = 10 x 512
  const VerifyResult v = verify_curve({rb.tokens, rb.losses}, {rc.tokens, rc.losses});
  EXPECT_FALSE(v.accepted);
  EXPECT_GT(v.cand_final, v.limit) << v.reason;
  // The same run compared with itself passes: the rule is not simply rejecting everything.
  EXPECT_TRUE(verify_curve({rb.tokens, rb.losses}, {rb.tokens, rb.losses}).accepted);
}

TEST(TuneCli, GuidedNeverKeepsTheBrokenChangeAndNeedsARealDiagnoser) {
  const fs::path d = temp_dir("guided");
  const std::string fake = (d / "fake-ft-diagnose").string();
  // Test double for ft-diagnose: writes the findings file into --out DIR/report.json.
  write_file_atomic(fake,
                    "#!/bin/sh\nout=''; prev=''\nfor a in \"$@\"; do [ \"$prev\" = --out ] && "
                    "out=\"$a\"; prev=\"$a\"; done\nmkdir -p \"$out\"\ncp \"" +
                        (d / "findings.json").string() + "\" \"$out/report.json\"\n");
  fs::permissions(fake, fs::perms::owner_all);
  // ft-diagnose's report.json, as reports::render_json writes it.
  profiler::Diagnosis findings;
  profiler::Finding f;
  f.cls = "batch";
  f.share = 0.6;
  f.severity = profiler::Severity::kWarning;
  f.title = "under-filled micro-batch";
  f.evidence.detail = "tiny <b>GEMMs</b>";
  f.knobs = {"--micro-batch 16"};
  findings.findings = {f};
  write_file_atomic(d / "findings.json", reports::render_json(findings));
  const std::string model = " --data " + corpus().string() +
                            " --layers 2 --heads 2 --channels 32 --seq-len 32 --threads 1 "
                            "--micro-batch 1 --lr 0.03 --min-lr 0 --warmup 0 --steps 160";
  const fs::path out = d / "sweep";
  Result r = sh("FT_DIAGNOSE=" + fake + " " + kBin + "/ft-tune --out " + out.string() +
                " --strategy guided --allow-batch-change --lr-scaling linear --repeats 1 "
                "--trial-steps 8 --verify-steps 160" +
                model);
  ASSERT_EQ(r.status, 0) << r.out;
  const std::string cfg = read_file(out / "best.cfg");
  EXPECT_EQ(cfg.find("micro-batch = 16"), std::string::npos) << cfg;
  const std::string md = read_file(out / "report.md");
  bool verified = false;
  for (const auto& e : journal(out)) {
    if (e.phase == "verify") {
      verified = true;
      EXPECT_EQ(e.result.status, TrialStatus::kRejected) << e.result.reason;
    }
  }
  // Whether it got past the speed gate depends on this machine's load; when it did, the report
  // must say the loss curve rejected it.
  if (verified) {
    EXPECT_NE(md.find("REJECTED by the loss-curve check"), std::string::npos) << md;
  }
  EXPECT_NE(md.find("under-filled micro-batch"), std::string::npos);
  EXPECT_EQ(read_file(out / "report.html").find("<b>GEMMs"), std::string::npos);
  // Without ft-diagnose, guided fails with a clear message instead of guessing.
  r = sh("FT_DIAGNOSE=/nonexistent/ft-diagnose " + kBin + "/ft-tune --out " + (d / "x").string() +
         " --strategy guided" + model);
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.out.find("needs ft-diagnose"), std::string::npos) << r.out;
  EXPECT_EQ(tune("--out " + (d / "y").string() + " --strategy fastest").status, 2);
  EXPECT_EQ(tune("--out " + (d / "y").string() + " --strategy grid --bogus-flag 3").status, 2);
  EXPECT_EQ(tune("--strategy grid").status, 2);
}

}  // namespace
}  // namespace ft::tuner
