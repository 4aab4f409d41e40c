// report_json_test.cpp: report.json golden, round trip, null for NaN, and clear errors on bad
// input.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "ft/core/atomic_file.h"
#include "ft/core/error.h"
#include "ft/profiler/diagnosis_json.h"
#include "ft/reports/report.h"
#include "reference/report_sample.h"

namespace ft::reports {
namespace {

using profiler::Diagnosis;

std::string error_of(const std::string& text) {
  try {
    parse_report_json(text, "bad.json");
  } catch (const FormatError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(ReportJson, MatchesGolden) {
  testing::expect_golden("report_small.json", render_json(testing::sample_diagnosis()));
}

TEST(ReportJson, RanksGoldenAndRoundTrip) {
  const Diagnosis d = testing::sample_ranks_diagnosis();
  const std::string text = render_json(d);
  testing::expect_golden("report_ranks.json", text);
  const Diagnosis back = parse_report_json(text);
  ASSERT_EQ(back.ranks.size(), 2u);
  EXPECT_EQ(back.parallel.straggler, 1);
  EXPECT_EQ(back.parallel.bubble, -1);  // null: no pipeline
  EXPECT_EQ(back.parallel.clock, d.parallel.clock);
  EXPECT_NEAR(back.parallel.transfer_ms, 1.58, 1e-12);
  EXPECT_EQ(back.ranks[1].host, "node<1>");
  EXPECT_EQ(back.ranks[1].late, 6);
  EXPECT_NEAR(back.ranks[0].exposed_wait_ms, 2.52, 1e-12);
  EXPECT_NEAR(back.ranks[1].totals[3], 0.158, 1e-12);
  EXPECT_EQ(render_json(back), text);  // a fixed point
  // One-rank reports carry neither field; half of them is an error.
  const auto one = nlohmann::json::parse(render_json(testing::sample_diagnosis()));
  EXPECT_FALSE(one.contains("ranks"));
  EXPECT_FALSE(one.contains("parallel"));
  auto half = nlohmann::json::parse(text);
  half.erase("parallel");
  EXPECT_NE(error_of(half.dump()).find("come together"), std::string::npos);
}

TEST(ReportJson, CarriesTheInterfaceFields) {
  const auto j = nlohmann::json::parse(render_json(testing::sample_diagnosis()));
  ASSERT_EQ(j["steps"].size(), 12u);
  const auto& s7 = j["steps"][7];
  EXPECT_EQ(s7["step"], 7);
  double sum = 0;
  for (const char* c : {"compute", "data", "pcie", "comm", "memory", "host", "sync", "other"}) {
    ASSERT_TRUE(s7["breakdown"].contains(c)) << c;
    ASSERT_TRUE(j["totals"].contains(c)) << c;
    sum += s7["breakdown"][c].get<double>();
  }
  EXPECT_NEAR(sum, s7["wall_ms"].get<double>(), 1e-9);  // parts sum to the step (exact here)
  EXPECT_DOUBLE_EQ(s7["breakdown"]["data"].get<double>(), 30 + 2 * 3 + 40);
  double total_share = 0;
  for (auto& [k, v] : j["totals"].items()) total_share += v.get<double>();
  EXPECT_NEAR(total_share, 1.0, 1e-5);
  ASSERT_EQ(j["findings"].size(), 2u);
  const auto& f = j["findings"][0];
  for (const char* k :
       {"class", "share", "severity", "title", "evidence", "knobs", "explanation"}) {
    EXPECT_TRUE(f.contains(k)) << k;
  }
  EXPECT_EQ(f["class"], "data");
  EXPECT_EQ(f["severity"], "critical");
  EXPECT_EQ(f["knobs"][0], "--loader-workers 4");
  EXPECT_EQ(f["rank"], 1);
  for (const char* k : {"peak", "reserved", "fragmentation", "alloc_retries", "ooms"}) {
    EXPECT_TRUE(j["memory"].contains(k)) << k;
  }
  EXPECT_EQ(j["memory"]["peak"], 204 * 1024 * 1024);
  EXPECT_EQ(j["loss_health"]["verdict"], "spiky");
  EXPECT_DOUBLE_EQ(j["mfu"].get<double>(), 0.3125);
  EXPECT_GT(j["tokens_per_s"].get<double>(), 0);
  EXPECT_EQ(j["loss_curve"].size(), 12u);
  EXPECT_EQ(j["memory_timeline"].size(), 24u);
  EXPECT_EQ(j["environment"]["OPENBLAS_CORETYPE"], "Haswell");
}

// The profiler's reader (the one ft-tune and parse_report_json use) gives back what the writer
// wrote: findings with severity, evidence and knobs, totals, mfu, tokens/s, memory, loss health.
TEST(ReportJson, ProfilerReaderRoundTripsTheWriter) {
  const Diagnosis d = testing::sample_diagnosis();
  const Diagnosis back = profiler::diagnosis_from_json(nlohmann::json::parse(render_json(d)));
  ASSERT_EQ(back.findings.size(), d.findings.size());
  for (size_t i = 0; i < d.findings.size(); ++i) {
    const auto& a = d.findings[i];
    const auto& b = back.findings[i];
    EXPECT_EQ(b.cls, a.cls);
    EXPECT_NEAR(b.share, a.share, 1e-6);
    EXPECT_EQ(b.severity, a.severity);
    EXPECT_EQ(b.title, a.title);
    EXPECT_EQ(b.explanation, a.explanation);
    EXPECT_EQ(b.evidence.steps, a.evidence.steps);
    EXPECT_EQ(b.evidence.examples, a.evidence.examples);
    EXPECT_EQ(b.evidence.detail, a.evidence.detail);
    EXPECT_EQ(b.knobs, a.knobs);
  }
  for (int c = 0; c < profiler::kNumWaitClasses; ++c) {
    EXPECT_NEAR(back.totals[c], d.totals[c], 1e-6) << c;
  }
  EXPECT_NEAR(back.mfu, d.mfu, 1e-6 * d.mfu);
  EXPECT_NEAR(back.tokens_per_s, d.tokens_per_s, 1e-5 * d.tokens_per_s);
  EXPECT_EQ(back.source, d.source);
  EXPECT_EQ(back.steps.size(), d.steps.size());
  EXPECT_EQ(back.memory.alloc_retries, d.memory.alloc_retries);
  EXPECT_EQ(back.loss_health.verdict, d.loss_health.verdict);
  EXPECT_EQ(back.config, d.config);
  EXPECT_EQ(back.environment, d.environment);
  EXPECT_EQ(render_json(back), render_json(d));
  // read_diagnosis_file: the same, from a file; a malformed one is a FormatError naming it.
  const auto dir = std::filesystem::path(FT_BINARY_DIR) / "report_json_test_out" / "reader";
  std::filesystem::create_directories(dir);
  write_file_atomic(dir / "report.json", render_json(d));
  EXPECT_EQ(render_json(profiler::read_diagnosis_file(dir / "report.json")), render_json(d));
  write_file_atomic(dir / "bad.json", "{\"format\": \"ft-report\", \"version\": 1}");
  try {
    profiler::read_diagnosis_file(dir / "bad.json");
    FAIL() << "no error";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find((dir / "bad.json").string() + ": /: missing field"),
              std::string::npos)
        << e.what();
  }
}

TEST(ReportJson, RoundTripsThroughTheReader) {
  const Diagnosis d = testing::sample_diagnosis();
  const std::string text = render_json(d);
  const Diagnosis back = parse_report_json(text);
  // Reading and rendering again gives the same bytes (rounding is idempotent).
  EXPECT_EQ(render_json(back), text);
  ASSERT_EQ(back.steps.size(), d.steps.size());
  for (size_t i = 0; i < d.steps.size(); ++i) {
    EXPECT_EQ(back.steps[i].step, d.steps[i].step);
    EXPECT_NEAR(back.steps[i].wall_ms, d.steps[i].wall_ms, 5e-4);  // ms rounded to 1 us
    for (int c = 0; c < profiler::kNumWaitClasses; ++c) {
      EXPECT_NEAR(back.steps[i].ms[c], d.steps[i].ms[c], 5e-4);
    }
    EXPECT_NEAR(back.steps[i].loss, d.steps[i].loss, 1e-5 * d.steps[i].loss);  // 6 digits
    EXPECT_NEAR(back.steps[i].lr, d.steps[i].lr, 1e-5 * d.steps[i].lr);
    EXPECT_EQ(back.steps[i].detail.size(), d.steps[i].detail.size());
  }
  for (int c = 0; c < profiler::kNumWaitClasses; ++c)
    EXPECT_NEAR(back.totals[c], d.totals[c], 5e-7);
  ASSERT_EQ(back.findings.size(), 2u);
  EXPECT_EQ(back.findings[0].title, d.findings[0].title);
  EXPECT_EQ(back.findings[0].knobs, d.findings[0].knobs);
  EXPECT_EQ(back.findings[0].evidence.examples, d.findings[0].evidence.examples);
  EXPECT_EQ(back.findings[0].evidence.steps, d.findings[0].evidence.steps);
  EXPECT_EQ(back.findings[1].severity, profiler::Severity::kWarning);
  EXPECT_EQ(back.memory.alloc_retries, 1);
  EXPECT_EQ(back.memory.page_faults, 5120);
  EXPECT_DOUBLE_EQ(back.memory.fragmentation, 0.203125);
  EXPECT_EQ(back.loss_health.spikes, 1);
  EXPECT_EQ(back.memory_timeline.size(), d.memory_timeline.size());
  EXPECT_EQ(back.config, d.config);
  EXPECT_EQ(back.environment, d.environment);
  EXPECT_EQ(back.source, d.source);
}

TEST(ReportJson, UnknownValuesAreNullAndReadBackAsNaN) {
  Diagnosis d = testing::sample_diagnosis(3);
  d.steps[1].loss = std::nan("");
  d.steps[2].grad_norm = INFINITY;
  const std::string text = render_json(d);
  const auto j = nlohmann::json::parse(text);
  EXPECT_TRUE(j["steps"][1]["loss"].is_null());
  EXPECT_TRUE(j["steps"][2]["grad_norm"].is_null());
  EXPECT_TRUE(j["loss_curve"][1][1].is_null());
  const Diagnosis back = parse_report_json(text);
  EXPECT_TRUE(std::isnan(back.steps[1].loss));
  EXPECT_TRUE(std::isnan(back.steps[2].grad_norm));
  EXPECT_FALSE(std::isnan(back.steps[0].loss));
}

TEST(ReportJson, ExtremeValuesRoundTrip) {
  Diagnosis d = testing::sample_diagnosis(4);
  d.steps[0].loss = 1e-313;  // subnormal
  d.steps[1].loss = 1.5e300;
  d.steps[2].loss = -0.0;
  d.steps[3].lr = 3e-9;
  const std::string text = render_json(d);
  const Diagnosis back = parse_report_json(text);
  EXPECT_NEAR(back.steps[0].loss, 1e-313, 1e-318);
  EXPECT_DOUBLE_EQ(back.steps[1].loss, 1.5e300);
  EXPECT_EQ(back.steps[2].loss, 0.0);
  EXPECT_DOUBLE_EQ(back.steps[3].lr, 3e-9);
  EXPECT_EQ(render_json(back), text);
}

TEST(ReportJson, InvalidUtf8FromATraceIsReplacedNotThrown) {
  Diagnosis d = testing::sample_diagnosis(2);
  d.findings[0].evidence.examples = {std::string("span \xff\xfe name")};
  const std::string text = render_json(d);
  const Diagnosis back = parse_report_json(text);
  EXPECT_EQ(back.findings[0].evidence.examples[0], "span \xEF\xBF\xBD\xEF\xBF\xBD name");
}

// The timeline (lanes, names, spans) reads back as written, and a span pointing outside the
// lanes or names, or with an unknown class, is a FormatError naming it.
TEST(ReportJson, TimelineRoundTripsAndBadSpansAreNamed) {
  const Diagnosis d = testing::hostile_diagnosis(6);
  const std::string text = render_json(d);
  const Diagnosis back = parse_report_json(text);
  EXPECT_EQ(render_json(back), text);
  EXPECT_EQ(back.timeline.steps, d.timeline.steps);
  EXPECT_EQ(back.timeline.lanes, d.timeline.lanes);
  EXPECT_EQ(back.timeline.names, d.timeline.names);
  ASSERT_EQ(back.timeline.spans.size(), 3u);
  EXPECT_EQ(back.timeline.spans[1].row, 1);
  EXPECT_EQ(back.timeline.spans[1].cls, 6);  // sync
  EXPECT_DOUBLE_EQ(back.timeline.spans[2].dur_ms, 20.0);
  const auto j = nlohmann::json::parse(text);
  auto broken = j;
  broken["timeline"]["spans"][2][0] = 2;
  EXPECT_NE(error_of(broken.dump()).find("/timeline/spans/2: lane out of range"), std::string::npos)
      << error_of(broken.dump());
  broken = j;
  broken["timeline"]["spans"][0][2] = "gpu";
  EXPECT_NE(error_of(broken.dump()).find("/timeline/spans/0/2: unknown class \"gpu\""),
            std::string::npos)
      << error_of(broken.dump());
  broken = j;
  broken["timeline"]["spans"][1][3] = 7;
  EXPECT_NE(error_of(broken.dump()).find("name out of range"), std::string::npos);
  broken = j;
  broken["timeline"]["spans"][1] = nlohmann::json::array({0, 0});
  EXPECT_NE(error_of(broken.dump()).find("expected [lane, row, class, name, start_ms, dur_ms]"),
            std::string::npos);
}

TEST(ReportJson, MalformedInputGivesAClearFormatError) {
  EXPECT_NE(error_of("{\"format\": \"ft-report\", ").find("bad.json: byte"), std::string::npos)
      << error_of("{\"format\": \"ft-report\", ");
  EXPECT_NE(error_of("").find("not valid JSON"), std::string::npos);
  EXPECT_NE(error_of("[1, 2]").find("expected a JSON object"), std::string::npos);
  EXPECT_NE(error_of("{\"format\": \"chrome-trace\", \"version\": 1}").find("not an ft report"),
            std::string::npos);
  EXPECT_NE(error_of("{\"format\": \"ft-report\", \"version\": 99}").find("unsupported version 99"),
            std::string::npos);

  auto j = nlohmann::json::parse(render_json(testing::sample_diagnosis(3)));
  auto broken = j;
  broken["steps"][1]["breakdown"].erase("comm");
  EXPECT_NE(error_of(broken.dump()).find("/steps/1/breakdown: missing field \"comm\""),
            std::string::npos)
      << error_of(broken.dump());
  broken = j;
  broken["findings"][0]["knobs"][1] = 42;
  EXPECT_NE(error_of(broken.dump()).find("/findings/0/knobs/1: expected a string"),
            std::string::npos)
      << error_of(broken.dump());
  broken = j;
  broken["findings"][1]["severity"] = "fatal";
  EXPECT_NE(error_of(broken.dump()).find("unknown severity \"fatal\""), std::string::npos);
  broken = j;
  broken["memory"]["ooms"] = 1.5;
  EXPECT_NE(error_of(broken.dump()).find("/memory/ooms: expected an integer"), std::string::npos);
  broken = j;
  broken["memory_timeline"][0] = nlohmann::json::array({1});
  EXPECT_NE(error_of(broken.dump()).find("/memory_timeline/0: expected [ms, bytes]"),
            std::string::npos);
  broken = j;
  broken.erase("totals");
  EXPECT_NE(error_of(broken.dump()).find("missing field \"totals\""), std::string::npos);
}

TEST(ReportJson, EveryTruncationIsAFormatErrorNeverACrash) {
  const std::string text = render_json(testing::sample_diagnosis(3));
  size_t checked = 0;
  for (size_t n = 0; n + 2 < text.size(); n += 7) {  // the last bytes are "}\n"
    EXPECT_THROW(parse_report_json(text.substr(0, n)), FormatError)
        << "prefix of " << n << " bytes";
    ++checked;
  }
  EXPECT_GT(checked, 400u);
  // Type confusion anywhere in the tree: every scalar replaced by an object is rejected cleanly.
  const auto j = nlohmann::json::parse(text);
  size_t mutated = 0;
  const auto flat = j.flatten();
  for (const auto& [path, value] : flat.items()) {
    if (path.rfind("/config", 0) == 0 || path.rfind("/environment", 0) == 0 ||
        path.rfind("/loss_curve", 0) == 0 || path == "/source" ||
        path.find("/detail") != std::string::npos ||
        path.find("/explanation") != std::string::npos || path.find("/rank") != std::string::npos) {
      continue;  // optional or informational fields: an object there is still an error, see below
    }
    auto bad = j;
    bad[nlohmann::json::json_pointer(path)] = nlohmann::json::object({{"x", 1}});
    EXPECT_THROW(parse_report_json(bad.dump()), FormatError) << path;
    ++mutated;
  }
  EXPECT_GT(mutated, 100u);
  auto bad = j;
  bad["environment"]["cpu"] = nlohmann::json::array({1});
  EXPECT_THROW(parse_report_json(bad.dump()), FormatError);
}

TEST(ReportJson, ReadReportJsonNamesTheFile) {
  const auto dir = std::filesystem::path(FT_BINARY_DIR) / "report_json_test_read";
  std::filesystem::create_directories(dir);
  EXPECT_THROW(read_report_json(dir / "missing.json"), IoError);
  write_file_atomic(dir / "trunc.json", "{\"format\": \"ft-report\", \"version\": 1, \"mfu\": 0.");
  try {
    read_report_json(dir / "trunc.json");
    FAIL() << "no error";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("trunc.json: byte"), std::string::npos) << e.what();
  }
}

TEST(ReportFiles, WriteReportsWritesAllThreeAtomically) {
  const auto dir = std::filesystem::path(FT_BINARY_DIR) / "report_json_test_out" / "run1";
  std::filesystem::remove_all(dir);
  const Diagnosis d = testing::sample_diagnosis();
  write_reports(d, dir);
  EXPECT_EQ(read_file(dir / "report.json"), render_json(d));
  EXPECT_EQ(read_file(dir / "report.md"), render_markdown(d));
  EXPECT_EQ(read_file(dir / "report.html"), render_html(d));
  // Nothing else (no leftover temp files).
  int files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    (void)e;
    ++files;
  }
  EXPECT_EQ(files, 3);
  EXPECT_EQ(render_json(read_report_json(dir / "report.json")), render_json(d));
  // A path that cannot be a directory is an IoError, not a crash.
  EXPECT_THROW(write_reports(d, dir / "report.json" / "sub"), IoError);
}

}  // namespace
}  // namespace ft::reports
