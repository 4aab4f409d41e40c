// tune_spec_test.cpp: ft-tune --spec, tuning any training program: the spec's checks and
// templates, trials of stand-in shell programs (every failure kind), kill -9 and --resume, and a
// guided sweep over the PyTorch example (examples/pytorch) with Debian's python3-torch.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <thread>

#include "ft/core/atomic_file.h"
#include "ft/core/error.h"
#include "ft/tuner/journal.h"
#include "ft/tuner/search.h"
#include "ft/tuner/spec.h"
#include "reference/run_cli.h"
#include "test_scratch.h"

namespace ft::tuner {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const std::string kBin = FT_BINARY_DIR;
const std::string kSrc = FT_SOURCE_DIR;

fs::path temp_dir(const std::string& name) { return ft::test::scratch_dir("ft_tune_spec_" + name); }

using Result = ft::testing::CliResult;

Result sh(const std::string& cmd) { return ft::testing::run_shell(cmd); }

// A spec around `program` (a shell script in `dir`) with knobs `rate` (fixes data) and `mode`.
std::string fake_spec(const std::string& extra = "") {
  return R"({
    "command": ["sh", "prog.sh", "{steps}", "{rate}", "{trial_dir}/m.jsonl", "{mode}"],
    "env": {"FT_TEST_SPEC": "1"},
    "knobs": {
      "rate": {"values": [100, 200, 300], "baseline": 100, "fixes": ["data"]},
      "mode": {"values": {"plain": "", "loud": "--loud"}, "baseline": "plain"}
    },
    "steps": 6,
    "timeout_s": 20,
    "metrics": "{trial_dir}/m.jsonl")" +
         extra + "}";
}

// The stand-in program: writes `steps` metric lines whose tokens_per_s is `rate` (x1.5 when
// `mode` is --loud), after sleeping 0.05 s; rate 999 crashes, 998 says MemoryError, 997 hangs,
// 996 writes no metrics.
constexpr const char* kProg = R"SH(steps=$1; rate=$2; out=$3; mode=$4
case "$rate" in
  999) echo "Traceback: boom" >&2; exit 1 ;;
  998) echo "MemoryError: cannot allocate" >&2; exit 1 ;;
  997) sleep 60 ;;
  996) exit 0 ;;
esac
[ "$FT_TEST_SPEC" = 1 ] || { echo "env not passed" >&2; exit 5; }
if [ "$mode" = "--loud" ]; then rate=$((rate * 3 / 2)); fi
sleep 0.05
i=1
: > "$out"
while [ $i -le $steps ]; do
  echo "{\"step\": $i, \"loss\": $(awk "BEGIN{print 5/($i+1)}"), \"tokens\": $((i * 64)), \"tokens_per_s\": $rate}" >> "$out"
  i=$((i + 1))
done
)SH";

fs::path fake_dir(const std::string& name, const std::string& extra = "") {
  const fs::path d = temp_dir(name);
  write_file_atomic(d / "prog.sh", kProg);
  write_file_atomic(d / "spec.json", fake_spec(extra));
  return d;
}

TEST(TuneSpec, ParsesKnobsTemplatesAndExpandsACommand) {
  const fs::path d = fake_dir("parse");
  const TuneSpec s = load_spec(d / "spec.json");
  ASSERT_EQ(s.knobs.size(), 2u);
  EXPECT_EQ(s.knobs[0].name, "rate");  // the spec's order
  EXPECT_EQ(s.knobs[0].values, (std::vector<std::string>{"100", "200", "300"}));
  EXPECT_EQ(s.knobs[1].text_of("loud"), "--loud");
  EXPECT_EQ(spec_baseline(s), (Config{{"mode", "plain"}, {"rate", "100"}}));
  // The empty mapped value drops its argument; {steps} comes from the config when set.
  const auto cmd = spec_command(s, Config{{"rate", "200"}, {"steps", "3"}}, "/t");
  const std::vector<std::string> want = {"/usr/bin/env", "-C", d.string(), "FT_TEST_SPEC=1", "sh",
                                         "prog.sh",      "3",  "200",      "/t/m.jsonl"};
  EXPECT_EQ(spec_command(s, Config{{"mode", "loud"}}, "/t").back(), "--loud");
  EXPECT_EQ(cmd, want);
  EXPECT_EQ(expand_template("{{x}} {a}", {{"a", "1"}}, "f"), "{x} 1");
  EXPECT_DOUBLE_EQ(eval_arithmetic("8 * (2 + 1) * 64 / 2 - 1"), 767);
  EXPECT_DOUBLE_EQ(eval_arithmetic("-3 * -2"), 6);
  for (const char* bad : {"8 *", "2 ^ 3", "(1", "1 / 0", "abc", ""}) {
    EXPECT_THROW(eval_arithmetic(bad), ConfigError) << bad;
  }
}

TEST(TuneSpec, EveryMistakeIsAConfigErrorNamingTheField) {
  const auto err = [](const std::string& text) {
    try {
      parse_spec(text, "s.json", ".");
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const std::string ok_knobs = R"("knobs": {"b": {"values": [1, 2]}}, "metrics": "m")";
  EXPECT_NE(err(R"({"command": [], )" + ok_knobs + "}").find("'command'"), std::string::npos);
  EXPECT_NE(
      err(R"({"command": ["x"], "knobs": {"b": {"values": [1, 2], "baseline": 3}}, "metrics": "m"})")
          .find("knobs.b.baseline '3' is not one of its values"),
      std::string::npos);
  EXPECT_NE(
      err(R"({"command": ["x"], "knobs": {"b": {"values": [1], "fixes": ["speed"]}}, "metrics": "m"})")
          .find("unknown finding class 'speed'"),
      std::string::npos);
  EXPECT_NE(err(R"({"command": ["x", "{nope}"], )" + ok_knobs + "}").find("'{nope}' names no knob"),
            std::string::npos);
  EXPECT_NE(
      err(R"({"command": ["x"], "colour": 1, )" + ok_knobs + "}").find("unknown field 'colour'"),
      std::string::npos);
  EXPECT_NE(err(R"({"command": ["x"], "knobs": {"b": {"values": [1, 1]}}, "metrics": "m"})")
                .find("appears twice"),
            std::string::npos);
  EXPECT_NE(
      err(R"({"command": ["x"], "knobs": {"b": {"values": ["a"]}}, "metrics": "m", "tokens_per_step": "{b} * 2"})")
          .find("tokens_per_step"),
      std::string::npos);
  EXPECT_NE(
      err(R"({"command": ["x"], "knobs": {"b": {"values": [1]}}})").find("'metrics' is required"),
      std::string::npos);
  EXPECT_NE(err(R"({"command": ["x"], "knobs": {"steps": {"values": [1]}}, "metrics": "m"})")
                .find("reserved"),
            std::string::npos);
  EXPECT_NE(err("[1, 2").find("not valid JSON"), std::string::npos);
}

TEST(TuneSpec, FindingsPickTheKnobsThatFixThemNearestValueFirst) {
  const TuneSpec s = load_spec(fake_dir("patches") / "spec.json");
  const auto p = spec_patches(s, "data", Config{{"rate", "200"}, {"mode", "plain"}});
  const std::vector<Config> want = {{{"rate", "300"}}, {{"rate", "100"}}};
  EXPECT_EQ(p, want);
  EXPECT_TRUE(spec_patches(s, "memory", spec_baseline(s)).empty());
  const TuneSpec b = parse_spec(
      R"({"command": ["x"], "metrics": "m", "knobs": {"mb": {"values": [2, 8], "scales_batch": true},
          "ga": {"values": [1, 4], "scales_batch": true}, "w": {"values": [0, 9]}}})",
      "b", ".");
  EXPECT_DOUBLE_EQ(spec_batch_scale(b, Config{{"mb", "8"}, {"ga", "4"}, {"w", "9"}}), 32);
  EXPECT_DOUBLE_EQ(spec_batch_scale(b, spec_baseline(b)), 2);
}

TEST(TuneSpec, TrialsReadMetricsAndJournalEveryFailureWithItsReason) {
  const fs::path d = fake_dir("trials");
  const TuneSpec s = load_spec(d / "spec.json");
  const fs::path work = d / "trials";
  TrialResult r = run_spec_trial(s, "0", Config{{"rate", "200"}, {"mode", "loud"}}, work);
  ASSERT_EQ(r.status, TrialStatus::kOk) << r.reason;
  EXPECT_DOUBLE_EQ(r.tokens_per_s, 300);  // the metrics' own rate, x1.5 for --loud
  EXPECT_EQ(r.losses.size(), 6u);
  EXPECT_DOUBLE_EQ(r.tokens.back(), 6 * 64);
  EXPECT_NEAR(r.final_loss, 5.0 / 7, 1e-5);
  r = run_spec_trial(s, "1", Config{{"rate", "999"}}, work);
  EXPECT_EQ(r.status, TrialStatus::kCrash);
  EXPECT_NE(r.reason.find("exit status 1: Traceback: boom"), std::string::npos) << r.reason;
  r = run_spec_trial(s, "2", Config{{"rate", "998"}}, work);
  EXPECT_EQ(r.status, TrialStatus::kOom);
  EXPECT_NE(r.reason.find("MemoryError"), std::string::npos) << r.reason;
  r = run_spec_trial(s, "3", Config{{"rate", "996"}}, work);
  EXPECT_EQ(r.status, TrialStatus::kCrash);
  EXPECT_NE(r.reason.find("no metrics file"), std::string::npos) << r.reason;
  TuneSpec quick = s;
  quick.timeout_s = 0.5;
  const auto t0 = std::chrono::steady_clock::now();
  r = run_spec_trial(quick, "4", Config{{"rate", "997"}}, work);
  EXPECT_EQ(r.status, TrialStatus::kTimeout);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(30));
  // A spec that names a trace the program does not write.
  const TuneSpec traced = parse_spec(
      fake_spec(R"(, "trace": "{trial_dir}/none.json", "tokens_per_step": "64")"), "t", d);
  r = run_spec_trial(traced, "5", Config{{"rate", "100"}}, work);
  EXPECT_EQ(r.status, TrialStatus::kCrash);
  EXPECT_NE(r.reason.find("wrote no trace"), std::string::npos) << r.reason;
}

std::vector<JournalEntry> journal(const fs::path& dir) {
  Journal j(dir / "journal.jsonl", true);
  return j.entries();
}

TEST(TuneSpec, CliExitsSayWhatWentWrong) {
  const fs::path d = fake_dir("cli");
  // A configuration error is one (exit 2), not a crash.
  write_file_atomic(d / "bad.json", R"({"command": ["sh"], "knobs": {}, "metrics": "m"})");
  Result r = sh(kBin + "/ft-tune --spec " + (d / "bad.json").string() + " --out " +
                (d / "o1").string() + " --strategy grid");
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(r.out.find("'knobs' must be a non-empty object"), std::string::npos) << r.out;
  r = sh(kBin + "/ft-tune --spec " + (d / "spec.json").string() + " --out " + (d / "o2").string() +
         " --strategy grid --micro-batch 4");
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(r.out.find("do not apply with --spec"), std::string::npos) << r.out;
  // Guided needs the program's trace to diagnose.
  r = sh(kBin + "/ft-tune --spec " + (d / "spec.json").string() + " --out " + (d / "o3").string() +
         " --strategy guided");
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(r.out.find("needs 'trace'"), std::string::npos) << r.out;
  // The lengths the trials run are said.
  r = sh(kBin + "/ft-tune --spec " + (d / "spec.json").string() + " --out " + (d / "o4").string() +
         " --strategy grid --confirm-rounds 0 --budget-trials 2");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("trials run 6 steps (the spec's steps)"), std::string::npos) << r.out;
  EXPECT_TRUE(fs::exists(d / "o4" / "best.json"));
  EXPECT_FALSE(fs::exists(d / "o4" / "best.cfg"));
  // A budget that runs only the baseline says that nothing was compared.
  r = sh(kBin + "/ft-tune --spec " + (d / "spec.json").string() + " --out " + (d / "o5").string() +
         " --strategy grid --budget-trials 1");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("only the baseline ran"), std::string::npos) << r.out;
  // A failed baseline fails the sweep: exit 1, no best.json, and the report says why.
  const fs::path f = fake_dir("cli_fail", "");
  std::string text = read_file(f / "spec.json");
  const std::string rate = R"("values": [100, 200, 300], "baseline": 100)";
  text.replace(text.find(rate), rate.size(), R"("values": [999, 200, 300], "baseline": 999)");
  write_file_atomic(f / "spec.json", text);
  r = sh(kBin + "/ft-tune --spec " + (f / "spec.json").string() + " --out " + (f / "o").string() +
         " --strategy grid");
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.out.find("the baseline's trial failed (crash: exit status 1: Traceback: boom)"),
            std::string::npos)
      << r.out;
  EXPECT_FALSE(fs::exists(f / "o" / "best.json"));
  EXPECT_NE(read_file(f / "o" / "report.md").find("the baseline trial failed"), std::string::npos);
  EXPECT_EQ(journal(f / "o").size(), 1u);  // the grid stops at its failed baseline
}

TEST(TuneSpec, KillDashNineThenResumeLosesAndRepeatsNoTrial) {
  const fs::path d = fake_dir("kill");
  const fs::path a = d / "a", b = d / "b";
  const std::string args = " --spec " + (d / "spec.json").string() +
                           " --strategy grid --confirm-rounds 2 --confirm-top 2";
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    const std::string cmd = "exec " + kBin + "/ft-tune --out " + a.string() + args + " > " +
                            (d / "a.log").string() + " 2>&1";
    execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  size_t lines = 0;
  const auto t0 = std::chrono::steady_clock::now();
  while (lines < 3 && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(60)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));  // polling the journal
    std::ifstream in(a / "journal.jsonl");
    lines = 0;
    for (std::string l; std::getline(in, l);) ++lines;
  }
  ASSERT_GE(lines, 3u);
  ASSERT_EQ(kill(pid, SIGKILL), 0);
  int st = 0;
  waitpid(pid, &st, 0);
  const size_t before = journal(a).size();
  Result r = sh(kBin + "/ft-tune --out " + a.string() + args + " --resume");
  ASSERT_EQ(r.status, 0) << r.out;
  const auto resumed = journal(a);
  EXPECT_GT(resumed.size(), before);
  r = sh(kBin + "/ft-tune --out " + b.string() + args);
  ASSERT_EQ(r.status, 0) << r.out;
  const auto whole = journal(b);
  // The same trials in the same order as the sweep that was never killed: none lost, none run
  // twice (the grid has 6 points, each once).
  ASSERT_EQ(resumed.size(), whole.size());
  std::set<std::string> grid;
  for (size_t k = 0; k < whole.size(); ++k) {
    EXPECT_EQ(resumed[k].id, static_cast<int>(k));
    EXPECT_EQ(config_key(resumed[k].config), config_key(whole[k].config));
    EXPECT_EQ(resumed[k].phase, whole[k].phase);
    if (resumed[k].phase == "grid" || resumed[k].phase == "baseline") {
      EXPECT_TRUE(grid.insert(config_key(resumed[k].config)).second);
    }
  }
  EXPECT_EQ(grid.size(), 6u);
  const json best = json::parse(read_file(a / "best.json"));
  EXPECT_EQ(best["knobs"]["rate"], "300");  // 300 x1.5 loud is the fastest
  EXPECT_EQ(best["knobs"]["mode"], "loud");
  EXPECT_EQ(json::parse(read_file(b / "best.json"))["knobs"], best["knobs"]);
}

// Guided checks each finding's prediction against the side-by-side measurement of the knob it
// proposed, orders findings by predicted gain, and skips one predicted to save less than the
// noise floor (synthetic trials: knob a=1 makes the step 1.25x faster, b=1 1.01x).
TEST(TuneSpec, GuidedChecksPredictionsAndSkipsThoseUnderTheNoiseFloor) {
  SweepOptions o;
  o.strategy = "guided";
  o.baseline = {{"a", "0"}, {"b", "0"}};
  o.space = {{"a", {{{"a", "0"}}, {{"a", "1"}}}}, {"b", {{{"b", "0"}}, {{"b", "1"}}}}};
  o.ft_engine = false;
  o.memory_skip = false;
  o.compute_bound = 0;
  o.repeats = 2;
  o.confirm_rounds = 0;
  o.trial_steps = 10;
  o.verify_steps = 10;
  o.finding_patches = [](const profiler::Finding& f, const Config&) {
    return f.cls == "data"   ? std::vector<Config>{{{"a", "1"}}}
           : f.cls == "host" ? std::vector<Config>{{{"b", "1"}}}
                             : std::vector<Config>{};
  };
  const TrialFn run = [](const std::string&, const Config& c) {
    TrialResult r;
    r.status = TrialStatus::kOk;
    const double speed = (c.at("a") == "1" ? 1.25 : 1.0) * (c.at("b") == "1" ? 1.01 : 1.0);
    r.tokens_per_s = 1000 * speed;
    r.step_ms = 10 / speed;
    for (int s = 1; s <= 10; ++s) {
      r.tokens.push_back(100.0 * s);
      r.losses.push_back(3.0 / s);
    }
    r.final_loss = r.losses.back();
    return r;
  };
  const DiagnoseFn diag = [](int round, const Config&) {
    profiler::Diagnosis d;
    for (int s = 0; s < 4; ++s) {
      profiler::StepBreakdown b;
      b.step = s;
      b.wall_ms = 10;
      d.steps.push_back(b);
    }
    if (round > 1) return d;
    profiler::Finding host, data;
    host.cls = "host";  // the larger share, but predicted to save 0.5%: under the 2% floor
    host.share = 0.3;
    host.title = "host";
    host.predicted_step_ms = 9.95;
    data.cls = "data";
    data.share = 0.2;
    data.title = "data";
    data.predicted_step_ms = 8.0;
    d.findings = {host, data};
    return d;
  };
  Journal j(temp_dir("predict") / "journal.jsonl", false);
  const SweepOutcome out = run_sweep(o, j, run, diag);
  EXPECT_EQ(out.best.at("a"), "1");
  EXPECT_EQ(out.best.at("b"), "0");
  bool skipped = false;
  for (const Decision& d : out.decisions)
    skipped |= d.kind == "skip" && d.text.find("finding 'host': predicted to save 0.5%") == 0;
  EXPECT_TRUE(skipped);
  ASSERT_EQ(out.predictions.size(), 1u);
  const PredictionCheck& p = out.predictions[0];
  EXPECT_EQ(p.cls, "data");
  EXPECT_NEAR(p.incumbent_step_ms, 10, 1e-9);
  EXPECT_NEAR(p.predicted_step_ms, 8.0, 1e-9);  // 10 ms x 8.0 / 10 (the diagnosed step)
  EXPECT_NEAR(p.measured_step_ms, 8.0, 1e-9);   // 10 ms / the 1.25 ratio
  EXPECT_NEAR(p.error, 0, 1e-9);
  EXPECT_EQ(out.grid_size, 4);
}

// How much faster two threads finish two equal chains of dependent arithmetic than one thread
// finishes one (~1.95 on two free cores of the Zen 4 VM, 1.0-1.1 with one taken); the best of
// 5 tries. Each chain runs ~40 ms: with ~10 ms chains an idle VM read 1.04-1.37 now and then
// (its second vCPU is slow to wake), which skipped the test on a free machine.
double two_thread_speedup() {
  const auto chain = [] {
    volatile double seed = 1.0;
    double x = seed;
    for (int i = 0; i < (1 << 25); ++i) x = x * 0.9999999 + 1e-7;
    seed = x;
  };
  double best = 0;
  for (int rep = 0; rep < 5; ++rep) {
    auto t0 = std::chrono::steady_clock::now();
    chain();
    const double one = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    t0 = std::chrono::steady_clock::now();
    std::thread other(chain);
    chain();
    other.join();
    const double two = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, 2 * one / two);
  }
  return best;
}

// The real thing: the PyTorch example on the CPU, data-bound (12000 preprocessing iterations per
// sample, no loader workers). The guided sweep diagnoses its trace, tries the knobs that fix
// data, refuses the preprocessing shortcut whose loss curve breaks, and takes a loader worker.
TEST(TuneSpec, PytorchExampleIsTunedToLoaderWorkersAndTheBrokenShortcutIsRefused) {
  if (sh("/usr/bin/python3 -c 'import torch'").status != 0)
    GTEST_SKIP() << "Debian's python3-torch is not installed (scripts/deps.sh core)";
  if (sh("command -v bible").status != 0) GTEST_SKIP() << "bible-kjv is not installed";
  // A loader worker helps only with a core of its own beside the training thread: with one free
  // core (another process busy on a 2-core machine) no worker count can win, and the sweep
  // rightly keeps the baseline. Two threads of fixed work must run near twice one's rate.
  const double parallel = two_thread_speedup();
  if (parallel < 1.4)
    GTEST_SKIP() << "two threads ran only " << parallel << "x one: fewer than two free cores";
  const fs::path out = temp_dir("pytorch");
  const Result r =
      sh(kBin + "/ft-tune --spec " + kSrc + "/examples/pytorch/spec.json --out " + out.string() +
         " --strategy guided --repeats 2 --confirm-rounds 0 --trial-steps 10 "
         "--verify-steps 16 --budget-trials 10");
  ASSERT_EQ(r.status, 0) << r.out;
  const json best = json::parse(read_file(out / "best.json"));
  EXPECT_NE(best["knobs"]["loader_workers"], "0") << best.dump(2);
  EXPECT_EQ(best["knobs"]["prep"], "full") << best.dump(2);
  bool shortcut_refused = false, workers_accepted = false;
  for (const JournalEntry& e : journal(out)) {
    if (e.phase != "verify") continue;
    if (e.config.at("prep") == "shortcut") {
      EXPECT_EQ(e.result.status, TrialStatus::kRejected) << e.result.reason;
      shortcut_refused = e.result.status == TrialStatus::kRejected;
    }
    if (e.config.at("loader_workers") != "0" && e.result.status == TrialStatus::kOk)
      workers_accepted = true;
  }
  EXPECT_TRUE(workers_accepted) << read_file(out / "report.md");
  // The data finding's prediction is checked against the side-by-side measurement of every
  // knob it proposed (the error's size is recorded in docs/benchmarks.md, not asserted).
  const json rep = json::parse(read_file(out / "report.json"));
  bool data_checked = false;
  for (const auto& p : rep["predictions"]) {
    if (p["class"] != "data") continue;
    data_checked = true;
    EXPECT_GT(p["predicted_step_ms"].get<double>(), 0);
    EXPECT_GT(p["measured_step_ms"].get<double>(), 0);
  }
  EXPECT_TRUE(data_checked) << rep["predictions"].dump();
  EXPECT_GT(rep["grid_size"].get<int>(), rep["trials_run"].get<int>());
  // A round verifies its candidates fastest first and stops at the first accepted one, so the
  // shortcut is verified (and must be refused) when it out-ran the loader worker in round 1;
  // when the worker ran faster (1.96x against 1.73x in one run) the worker is taken and the
  // shortcut may never be verified within the budget.
  std::map<std::string, std::vector<double>> round1;  // change -> tokens/s of its repeats
  for (const JournalEntry& e : journal(out)) {
    if ((e.phase == "trial" || e.phase == "repeat") && e.round == 1 &&
        e.result.status == TrialStatus::kOk) {
      round1[e.change].push_back(e.result.tokens_per_s);
    }
  }
  const auto med = [&](const std::string& change) {
    std::vector<double> v = round1[change];
    if (v.empty()) return 0.0;
    std::sort(v.begin(), v.end());
    return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
  };
  if (med("prep shortcut") > med("loader_workers 1") && med("loader_workers 1") > 0) {
    EXPECT_TRUE(shortcut_refused) << read_file(out / "report.md");
  }
}

}  // namespace
}  // namespace ft::tuner
