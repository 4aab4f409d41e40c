// dp_cli_test.cpp: `mpirun ... ft-train --dp 2` as a child process: equals one process, rank 0
// alone reports, a killed or stopped rank ends the job.
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
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "ft/core/atomic_file.h"
#include "reference/run_cli.h"
#include "test_scratch.h"

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

#ifdef FT_MPIEXEC
constexpr const char* kMpiexec = FT_MPIEXEC;
#else
constexpr const char* kMpiexec = "";
#endif

#define REQUIRE_MPI()                                                       \
  do {                                                                      \
    if (std::string(kMpiexec).empty()) GTEST_SKIP() << "built without MPI"; \
  } while (0)

fs::path temp_dir(const std::string& name) {
  return ft::test::scratch_dir("ft_dp_cli_" + name);
}

fs::path corpus(const fs::path& dir) {
  std::string text;
  for (int i = 0; i < 400; ++i) {
    text += "In the beginning God created the heaven and the earth. " + std::to_string(i % 7) +
            " And the earth was without form, and void.\n\n";
  }
  ft::write_file_atomic(dir / "c.txt", text);
  return dir / "c.txt";
}

const std::string kModel =
    " --layers 2 --channels 64 --heads 4 --seq-len 32 --micro-batch 4 --threads 1 ";

std::string mpirun(int np, const std::string& extra = "") {
  return "env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 " +
         std::string(kMpiexec) + " -np " + std::to_string(np) + " --oversubscribe " + extra + " " +
         FT_BINARY_DIR + "/ft-train";
}

std::vector<nlohmann::json> read_jsonl(const fs::path& p) {
  std::vector<nlohmann::json> out;
  std::ifstream in(p);
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty()) out.push_back(nlohmann::json::parse(line));
  }
  return out;
}

size_t count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
  return n;
}

TEST(DpCli, TwoRanksMatchOneProcessWithTwiceTheAccumulationAndRankZeroAloneReports) {
  REQUIRE_MPI();
  const fs::path d = temp_dir("equiv");
  const std::string common = " --data " + corpus(d).string() + kModel +
                             "--steps 6 --val-batches 3 --clip 0.5 --loader-workers 0 ";
  const auto ref = ft::testing::run_cli(
      "ft-train", common + "--grad-accum 2 --metrics " + (d / "ref.jsonl").string());
  ASSERT_EQ(ref.status, 0) << ref.out;
  for (const char* extra : {"--bucket-mb 0.02", "--bucket-mb 0.02 --no-overlap --zero 2"}) {
    const std::string cmd = mpirun(2) + common + "--dp 2 " + extra + " --metrics " +
                            (d / "dp.jsonl").string() + " 2>&1";
    FILE* p = popen(cmd.c_str(), "r");
    ASSERT_NE(p, nullptr);
    std::string out;
    char buf[4096];
    while (size_t n = fread(buf, 1, sizeof buf, p)) out.append(buf, n);
    ASSERT_EQ(pclose(p), 0) << out;
    EXPECT_EQ(count(out, "ft-train  model"), 1u) << "one header (rank 0)\n" << out;
    EXPECT_EQ(count(out, "summary:"), 1u) << out;
    EXPECT_NE(out.find("parallel dp 2 x tp 1 x pp 1 = 2 ranks"), std::string::npos) << out;
    EXPECT_NE(out.find("comm: rank 0 blocked"), std::string::npos) << out;
    const auto want = read_jsonl(d / "ref.jsonl");
    for (int r = 0; r < 2; ++r) {
      const auto got = read_jsonl(d / ("dp.rank" + std::to_string(r) + ".jsonl"));
      ASSERT_EQ(got.size(), want.size());
      double worst = 0;
      for (size_t i = 0; i + 1 < want.size(); ++i) {
        const double a = got[i]["loss"], b = want[i]["loss"];
        worst = std::max(worst, std::abs(a - b) / b);
        EXPECT_GE(got[i]["comm_ms"].get<double>(), 0.0);
      }
      std::printf("%s rank %d: max rel loss diff %.2e over %zu steps\n", extra, r, worst,
                  want.size() - 1);
      EXPECT_LT(worst, 1e-5) << extra << " rank " << r;
      EXPECT_TRUE(got.back()["summary"].contains("comm_exposed_share"));
    }
  }
  fs::remove_all(d);
}

// A background `mpirun ... ft-train` whose output goes to a file; its ranks are found by the
// OMPI_COMM_WORLD_RANK in their environment among mpirun's children.
class Job {
 public:
  Job(const std::string& cmd, const fs::path& out) : out_(out) {
    pid_ = ::fork();
    if (pid_ == 0) {
      ::setpgid(0, 0);
      const std::string sh = "exec " + cmd + " > " + out.string() + " 2>&1";
      ::execl("/bin/sh", "sh", "-c", sh.c_str(), static_cast<char*>(nullptr));
      ::_exit(127);
    }
  }
  ~Job() {
    for (pid_t r : ranks_) {
      ::kill(r, SIGKILL);
      ::kill(r, SIGCONT);
    }
    if (pid_ > 0 && !reaped_) {
      ::kill(-pid_, SIGKILL);
      ::kill(pid_, SIGKILL);
      int st;
      ::waitpid(pid_, &st, 0);
    }
  }
  pid_t rank_pid(int rank) {
    for (const auto& e : fs::directory_iterator("/proc")) {
      const std::string name = e.path().filename();
      if (name.find_first_not_of("0123456789") != std::string::npos) continue;
      std::ifstream st(e.path() / "stat");
      std::string stat;
      std::getline(st, stat);
      const size_t close = stat.rfind(')');
      if (close == std::string::npos) continue;
      std::istringstream rest(stat.substr(close + 2));
      char state;
      pid_t ppid = 0;
      rest >> state >> ppid;
      if (ppid != pid_) continue;
      std::ifstream env(e.path() / "environ");
      std::string all((std::istreambuf_iterator<char>(env)), std::istreambuf_iterator<char>());
      if (all.find("OMPI_COMM_WORLD_RANK=" + std::to_string(rank) + '\0') != std::string::npos) {
        const pid_t p = std::stoi(name);
        ranks_.push_back(p);
        return p;
      }
    }
    return -1;
  }
  // Waits up to `seconds` for mpirun to exit; its wait status, or -1 on timeout.
  int wait(double seconds) {
    const auto t0 = Clock::now();
    while (std::chrono::duration<double>(Clock::now() - t0).count() < seconds) {
      int st = 0;
      if (::waitpid(pid_, &st, WNOHANG) == pid_) {
        reaped_ = true;
        return st;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return -1;
  }
  std::string output() const {
    std::ifstream in(out_);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  }

 private:
  pid_t pid_ = -1;
  fs::path out_;
  bool reaped_ = false;
  std::vector<pid_t> ranks_;
};

// Starts a long DP=2 run and returns once rank 1 has written `steps` metrics lines.
void wait_until_training(const fs::path& metrics_rank1, Job& job, int steps = 3) {
  const auto t0 = Clock::now();
  while (std::chrono::duration<double>(Clock::now() - t0).count() < 60) {
    if (read_jsonl(metrics_rank1).size() >= static_cast<size_t>(steps)) return;
    if (job.wait(0.1) != -1) FAIL() << "the job ended before training:\n" << job.output();
  }
  FAIL() << "no training progress within 60 s:\n" << job.output();
}

struct FaultCase {
  const char* name;
  const char* launcher_flags;
  int signal;
};

// kill -9 or SIGSTOP one rank of a running DP=2 job; the job must end within a bound and say
// which rank failed. Returns the job's output, its wait status and the seconds it took.
void run_fault(const FaultCase& fc, std::string& out, int& status, double& seconds, pid_t& victim) {
  const fs::path d = temp_dir(fc.name);
  const std::string cmd = mpirun(2, fc.launcher_flags) + " --data " + corpus(d).string() + kModel +
                          "--dp 2 --steps 1000000 --val-batches 0 --comm-timeout 3 --metrics " +
                          (d / "m.jsonl").string();
  Job job(cmd, d / "out.txt");
  wait_until_training(d / "m.rank1.jsonl", job);
  if (::testing::Test::HasFatalFailure()) return;
  victim = job.rank_pid(1);
  ASSERT_GT(victim, 0) << "rank 1's process not found among mpirun's children";
  const auto t0 = Clock::now();
  ASSERT_EQ(::kill(victim, fc.signal), 0);
  status = job.wait(60);
  seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  out = job.output();
  std::printf("%s: job ended %.1f s after signal %d to rank 1 (pid %d)\n", fc.name, seconds,
              fc.signal, victim);
  ASSERT_NE(status, -1) << "the job did not end within 60 s of the fault:\n" << out;
  fs::remove_all(d);
}

TEST(DpCli, KilledRankEndsTheJobAndMpirunNamesIt) {
  // OpenMPI 4.1's default: mpirun sees the rank die and kills the others at once.
  REQUIRE_MPI();
  std::string out;
  int status = 0;
  double s = 0;
  pid_t victim = 0;
  run_fault({"kill", "", SIGKILL}, out, status, s, victim);
  if (HasFatalFailure()) return;
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) != 0) << out;
  EXPECT_NE(out.find("process rank 1"), std::string::npos) << out;
  EXPECT_NE(out.find("signal 9"), std::string::npos) << out;
  EXPECT_LT(s, 20.0) << out;
}

TEST(DpCli, KilledRankUnderEnableRecoveryIsNamedByThePeerAfterTheCommTimeout) {
  // mpirun --enable-recovery leaves the survivors running: rank 0's collective times out
  // (--comm-timeout 3) and its CommError names the dead rank and pid; MPI_Abort ends the job.
  REQUIRE_MPI();
  std::string out;
  int status = 0;
  double s = 0;
  pid_t victim = 0;
  run_fault({"recovery", "--enable-recovery", SIGKILL}, out, status, s, victim);
  if (HasFatalFailure()) return;
  const std::string want = "rank 1 (pid " + std::to_string(victim) + ") has exited";
  EXPECT_NE(out.find(want), std::string::npos) << out;
  EXPECT_NE(out.find("--comm-timeout"), std::string::npos) << out;
  EXPECT_GE(s, 2.5) << "ended before the timeout: was it mpirun, not the peer?\n" << out;
  EXPECT_LT(s, 25.0) << out;
}

TEST(DpCli, StoppedRankMakesThePeerTimeOutAndTheJobEnds) {
  REQUIRE_MPI();
  std::string out;
  int status = 0;
  double s = 0;
  pid_t victim = 0;
  run_fault({"stop", "", SIGSTOP}, out, status, s, victim);
  if (HasFatalFailure()) return;
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) != 0) << out;
  EXPECT_NE(out.find("no completion within 3 s (--comm-timeout)"), std::string::npos) << out;
  EXPECT_NE(out.find("every peer process is still alive: one is stuck"), std::string::npos) << out;
  EXPECT_GE(s, 2.5) << out;
  EXPECT_LT(s, 25.0) << out;
}

}  // namespace
