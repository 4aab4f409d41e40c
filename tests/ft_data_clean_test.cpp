// ft_data_clean_test.cpp: 'ft-data clean' end to end: outputs, statistics JSON, clear errors.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "ft/core/atomic_file.h"
#include "ft/trainer/communicator.h"
#include "ft/trainer/documents.h"
#include "ft/trainer/launch.h"
#include "reference/run_cli.h"

namespace {

namespace fs = std::filesystem;

using Result = ft::testing::CliResult;

Result run(const std::string& args) { return ft::testing::run_cli("ft-data", "clean " + args); }

class CleanCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("ft_clean_cli_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  fs::path dir_;
};

std::vector<std::string> read_docs(const std::string& p) {
  std::vector<std::string> docs;
  ft::trainer::data::for_each_document({p}, [&](std::string_view t, const auto&) {
    docs.emplace_back(t);
    return true;
  });
  return docs;
}

// Distinct documents of Genesis words in random order, 120 words each.
std::string doc(int i) {
  static const char* kWords[] = {"light", "darkness", "waters",  "firmament", "heaven",  "earth",
                                 "seed",  "fruit",    "herb",    "creature",  "cattle",  "fowl",
                                 "whale", "morning",  "evening", "gathered",  "divided", "blessed"};
  std::string s = "Verse " + std::to_string(i) + ":";
  uint32_t x = 2654435761u * (i + 1);
  for (int w = 0; w < 120; ++w) {
    x = x * 1664525u + 1013904223u;
    s += ' ';
    s += kWords[(x >> 16) % 18];
    if (w % 12 == 11) s += ".\nAnd";
  }
  return s + ".";
}

TEST_F(CleanCli, RemovesDuplicatesAndNoiseAndWritesStats) {
  std::string text;
  for (int i = 0; i < 30; ++i) text += doc(i) + "\n\n";
  text += doc(3) + "\n\n" + doc(7) + "\n\n";  // exact duplicates
  std::string near = doc(11);
  near.replace(near.find(' ', 60), 1, " and ");  // one inserted word
  text += near + "\n\n";
  text += "x\x01\x02\x03 random \xFF\xFE bytes here and there\n\n";  // non-text
  text += "ok\n\n";                                                  // too short
  ft::write_file_atomic(path("in.txt"), text);
  Result r = run(path("in.txt") + " --out " + path("out.jsonl") + " --stats " + path("s.json"));
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("exact duplicates"), std::string::npos) << r.out;
  std::ifstream in(path("out.jsonl"));
  std::vector<std::string> kept;
  for (std::string line; std::getline(in, line);)
    kept.push_back(nlohmann::json::parse(line)["text"]);
  ASSERT_EQ(kept.size(), 30u) << r.out;
  for (int i = 0; i < 30; ++i) EXPECT_EQ(kept[i], doc(i));  // first occurrences, in order
  const auto s = nlohmann::json::parse(ft::read_file(path("s.json")));
  EXPECT_EQ(s["in"]["docs"], 35);
  EXPECT_EQ(s["exact_duplicates"]["docs"], 2);
  EXPECT_EQ(s["near_duplicates"]["docs"], 1);
  EXPECT_EQ(s["filters"]["non_text"]["docs"], 1);
  EXPECT_EQ(s["filters"]["too_short"]["docs"], 1);
  EXPECT_EQ(s["kept"]["docs"], 30);
  EXPECT_EQ(s["removed"]["docs"].get<int>() + s["kept"]["docs"].get<int>(), 35);
  EXPECT_EQ(s["options"]["near_dup_threshold"], 0.8);
}

TEST_F(CleanCli, TextOutputReadsBackAsTheSameDocuments) {
  // JSONL input whose documents contain blank lines and a "%" line.
  std::string jsonl;
  std::vector<std::string> docs = {"first line\n\nsecond line after a blank one ok",
                                   "a fortune\n%\nwith a percent line in it",
                                   "plain document with enough words"};
  for (const auto& d : docs) jsonl += nlohmann::json{{"body", d}}.dump() + "\n";
  ft::write_file_atomic(path("in.jsonl"), jsonl);
  Result r = run(path("in.jsonl") + " --text-field body --out " + path("out.txt") + " -q");
  ASSERT_EQ(r.status, 0) << r.out;
  const auto back = read_docs(path("out.txt"));
  ASSERT_EQ(back.size(), 3u) << ft::read_file(path("out.txt"));
  EXPECT_EQ(back[0], "first line\nsecond line after a blank one ok");
  EXPECT_EQ(back[1], "a fortune\n% \nwith a percent line in it");
  EXPECT_EQ(back[2], docs[2]);
  // Cleaning the text output again changes nothing.
  r = run(path("out.txt") + " --out " + path("again.txt") + " -q");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(ft::read_file(path("again.txt")), ft::read_file(path("out.txt")));
}

TEST_F(CleanCli, OptionsTurnStagesOff) {
  std::string text;
  for (int i = 0; i < 5; ++i) text += doc(0) + "\n\n";
  text += "ok\n\n";
  ft::write_file_atomic(path("in.txt"), text);
  Result r = run(path("in.txt") + " --no-exact-dedup --no-near-dedup --no-filters --out " +
                 path("o.jsonl") + " --stats " + path("s.json") + " -q");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(nlohmann::json::parse(ft::read_file(path("s.json")))["kept"]["docs"], 6);
  r = run(path("in.txt") + " --no-exact-dedup --out " + path("o.jsonl") + " --stats " +
          path("s.json") + " -q --shingle char --shingle-size 7");
  ASSERT_EQ(r.status, 0) << r.out;
  const auto s = nlohmann::json::parse(ft::read_file(path("s.json")));
  EXPECT_EQ(s["near_duplicates"]["docs"], 4);  // caught by MinHash instead
  EXPECT_EQ(s["kept"]["docs"], 1);
}

// Nothing a user keeps is lost: a kept JSONL line is written byte for byte with all its fields;
// bad lines are refused (naming the line) or, with --on-bad-line skip, counted; --removed
// records every dropped document and skipped line, in input order, with the id it duplicates.
TEST_F(CleanCli, JsonlFieldsPassThroughAndEveryRemovalIsAudited) {
  std::string near = doc(1);
  near.replace(near.find(' ', 60), 1, " and ");  // one inserted word
  const std::vector<std::string> lines = {
      R"({"id":"a","url":"http://x/1","text":)" + nlohmann::json(doc(0)).dump() +
          R"(,"meta":{"n":[1, 2]}})",
      nlohmann::json{{"text", doc(0)}, {"id", "b"}}.dump(),  // exact duplicate of a
      "not json",
      R"({"id": "c", "text": )" + nlohmann::json(doc(1)).dump() + "}",
      nlohmann::json{{"id", 5}, {"text", near}}.dump(),  // near duplicate of c
      R"({"id": "d"})",                                  // no text field
      R"({"id": "e", "text": "ok"})",                    // too short
  };
  std::string in;
  for (const auto& l : lines) in += l + "\n\n";  // blank lines between: no documents
  ft::write_file_atomic(path("in.jsonl"), in);

  Result r = run(path("in.jsonl") + " --out " + path("o.jsonl"));
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.out.find("in.jsonl:5: not valid JSON"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("--on-bad-line skip"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(path("o.jsonl")));

  r = run(path("in.jsonl") + " --out " + path("o.jsonl") + " --on-bad-line skip --removed " +
          path("rm.jsonl") + " --stats " + path("s.json") + " -q");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(ft::read_file(path("o.jsonl")), lines[0] + "\n" + lines[3] + "\n");
  const auto s = nlohmann::json::parse(ft::read_file(path("s.json")));
  EXPECT_EQ(s["bad_lines_skipped"], 2);
  EXPECT_EQ(s["in"]["docs"], 5);
  EXPECT_EQ(s["kept"]["docs"], 2);
  std::vector<nlohmann::json> rm;
  std::ifstream rf(path("rm.jsonl"));
  for (std::string line; std::getline(rf, line);) rm.push_back(nlohmann::json::parse(line));
  ASSERT_EQ(rm.size(), 5u) << ft::read_file(path("rm.jsonl"));
  EXPECT_EQ(rm[0]["rule"], "exact_duplicate");
  EXPECT_EQ(rm[0]["id"], "b");
  EXPECT_EQ(rm[0]["duplicate_of"], "a");
  EXPECT_EQ(rm[0]["document"], nlohmann::json::parse(lines[1]));
  EXPECT_EQ(rm[1]["rule"], "bad_line");
  EXPECT_EQ(rm[1]["origin"], path("in.jsonl") + ":5");
  EXPECT_EQ(rm[1]["line"], "not json");
  EXPECT_EQ(rm[2]["rule"], "near_duplicate");
  EXPECT_EQ(rm[2]["id"], "5");
  EXPECT_EQ(rm[2]["duplicate_of"], "c");
  EXPECT_GE(rm[2]["similarity"].get<double>(), 0.8);
  EXPECT_EQ(rm[3]["rule"], "bad_line");
  EXPECT_NE(rm[3]["error"].get<std::string>().find("no string field"), std::string::npos);
  EXPECT_EQ(rm[4]["rule"], "too_short");
  EXPECT_EQ(rm[4]["id"], "e");
  r = run(path("in.jsonl") + " --out " + path("o.jsonl") + " --on-bad-line maybe");
  EXPECT_EQ(r.status, 2) << r.out;
}

// The sharded mode (ft-data clean under mpirun) gives the single-process output and --removed
// audit byte for byte: exact and near copies that cross the ranks' file slices, a bad line
// skipped, JSONL and text.
TEST_F(CleanCli, ShardedAcrossRanksEqualsOneProcess) {
  if (!ft::trainer::mpi_supported()) GTEST_SKIP() << "ft built without MPI";
  const std::string mpirun = ft::trainer::find_mpirun();
  if (mpirun.empty()) GTEST_SKIP() << "mpirun is not on PATH";
  std::vector<std::string> docs;
  for (int i = 0; i < 40; ++i) {
    docs.push_back(doc(i));
    if (i % 4 == 3) docs.push_back(doc(i / 2));  // an exact copy of an earlier document
    if (i % 5 == 4) {
      std::string near = doc(i / 3);
      near.replace(near.find(' ', 100), 1, " and ");  // a near copy
      docs.push_back(near);
    }
  }
  docs.push_back("ok");  // filtered: too short
  std::string a, b, c;
  for (size_t k = 0; k < docs.size(); ++k) {
    if (k % 3 == 0) a += nlohmann::json{{"id", k}, {"text", docs[k]}}.dump() + "\n";
    if (k % 3 == 1) b += docs[k] + "\n\n";
    if (k % 3 == 2) c += nlohmann::json{{"text", docs[k]}, {"k", k}}.dump() + "\n";
  }
  a += "not json\n";
  ft::write_file_atomic(path("a.jsonl"), a);
  ft::write_file_atomic(path("b.txt"), b);
  ft::write_file_atomic(path("c.jsonl"), c);
  const std::string in = path("a.jsonl") + " " + path("b.txt") + " " + path("c.jsonl");
  Result r = run(in + " --on-bad-line skip --out " + path("one.jsonl") + " --stats " +
                 path("one.json") + " --removed " + path("one_removed.jsonl") + " -q");
  ASSERT_EQ(r.status, 0) << r.out;
  const auto one = nlohmann::json::parse(ft::read_file(path("one.json")));
  ASSERT_GT(one["exact_duplicates"]["docs"].get<int>(), 0);
  ASSERT_GT(one["near_duplicates"]["docs"].get<int>(), 0);
  for (const int ranks : {2, 3}) {
    std::string cmd = "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1";
    for (const auto& w : ft::trainer::mpirun_command(
             mpirun, ranks, std::string(FT_BINARY_DIR) + "/ft-data",
             {"clean", path("a.jsonl"), path("b.txt"), path("c.jsonl"), "--on-bad-line", "skip",
              "--out", path("sharded.jsonl"), "--stats", path("sharded.json"), "--removed",
              path("sharded_removed.jsonl"), "-q"})) {
      cmd += " " + w;
    }
    r = ft::testing::run_shell(cmd);
    ASSERT_EQ(r.status, 0) << r.out;
    EXPECT_EQ(ft::read_file(path("sharded.jsonl")), ft::read_file(path("one.jsonl"))) << ranks;
    EXPECT_EQ(ft::read_file(path("sharded_removed.jsonl")), ft::read_file(path("one_removed.jsonl")))
        << ranks;
    const auto sh = nlohmann::json::parse(ft::read_file(path("sharded.json")));
    EXPECT_EQ(sh["ranks"], ranks);
    for (const char* k :
         {"in", "exact_duplicates", "near_duplicates", "kept", "filters", "bad_lines_skipped"}) {
      EXPECT_EQ(sh[k], one[k]) << k << " with " << ranks << " ranks";
    }
    for (int rank = 0; rank < ranks; ++rank) {
      EXPECT_FALSE(fs::exists(path("sharded.jsonl") + ".part" + std::to_string(rank)));
      EXPECT_FALSE(fs::exists(path("sharded_removed.jsonl") + ".part" + std::to_string(rank)));
    }
  }
  // One large file is cut between the ranks (a document goes where its first byte is).
  ft::write_file_atomic(path("all.jsonl"), a + c);
  r = run(path("all.jsonl") + " --on-bad-line skip --out " + path("one_all.jsonl") + " -q");
  ASSERT_EQ(r.status, 0) << r.out;
  for (const int ranks : {2, 3}) {
    std::string cmd = "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1";
    for (const auto& w : ft::trainer::mpirun_command(
             mpirun, ranks, std::string(FT_BINARY_DIR) + "/ft-data",
             {"clean", path("all.jsonl"), "--on-bad-line", "skip", "--out", path("sharded_all.jsonl"),
              "-q"})) {
      cmd += " " + w;
    }
    r = ft::testing::run_shell(cmd);
    ASSERT_EQ(r.status, 0) << r.out;
    EXPECT_EQ(ft::read_file(path("sharded_all.jsonl")), ft::read_file(path("one_all.jsonl")))
        << "one file, " << ranks << " ranks";
  }
}

TEST_F(CleanCli, BadInputIsAClearErrorAndWritesNothing) {
  ft::write_file_atomic(path("bad.jsonl"), "{\"text\": \"fine document here\"}\n{\"text\": 3}\n");
  Result r = run(path("bad.jsonl") + " --out " + path("o.jsonl"));
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.out.find("bad.jsonl:2"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(path("o.jsonl")));
  ft::write_file_atomic(path("bad2.jsonl"), "{\"text\": \"ok\"}\nnot json\n");
  r = run(path("bad2.jsonl") + " --out " + path("o.jsonl"));
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.out.find("bad2.jsonl:2: not valid JSON"), std::string::npos) << r.out;

  ft::write_file_atomic(path("in.txt"), doc(1) + "\n");
  r = run(path("missing.txt") + " --out " + path("o.jsonl"));
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(r.out.find("missing.txt"), std::string::npos) << r.out;
  r = run(path("in.txt"));
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.out.find("--out is required"), std::string::npos) << r.out;
  r = run(path("in.txt") + " --out " + path("o.jsonl") + " --near-dup-threshold 1.5");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.out.find("--near-dup-threshold 1.5 must be in (0, 1]"), std::string::npos) << r.out;
  r = run(path("in.txt") + " --out " + path("o.jsonl") + " --bands 20 --rows 20");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.out.find("--num-perm"), std::string::npos) << r.out;
  r = run(path("in.txt") + " --out " + path("o.jsonl") + " --min-alpha-ratio 2");
  EXPECT_EQ(r.status, 2);
  r = run(path("in.txt") + " --out " + path("o.jsonl") + " --shingle line");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.out.find("--shingle 'line'"), std::string::npos) << r.out;
  r = run(path("in.txt") + " --out " + path("nodir/o.jsonl"));
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.out.find("does not exist"), std::string::npos) << r.out;
  r = run(path("in.txt") + " --out " + path("o.jsonl") + " --bogus");
  EXPECT_EQ(r.status, 2);
  EXPECT_FALSE(fs::exists(path("o.jsonl")));
}

}  // namespace
