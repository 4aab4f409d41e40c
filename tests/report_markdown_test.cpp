// report_markdown_test.cpp: report.md golden, escaping of trace names, abbreviation of long runs.
#include <gtest/gtest.h>

#include <string>

#include "ft/reports/report.h"
#include "reference/report_sample.h"

namespace ft::reports {
namespace {

size_t count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
  return n;
}

TEST(ReportMarkdown, MatchesGolden) {
  testing::expect_golden("report_small.md", render_markdown(testing::sample_diagnosis()));
}

TEST(ReportMarkdown, RanksGolden) {
  const std::string md = render_markdown(testing::sample_ranks_diagnosis());
  testing::expect_golden("report_ranks.md", md);
  EXPECT_NE(md.find("## Ranks"), std::string::npos);
  EXPECT_NE(md.find("Straggler: rank 1, late by 2.500 ms at 50.0% of comparable collectives."),
            std::string::npos);
  EXPECT_NE(md.find("| node&lt;1&gt; |"), std::string::npos) << "host names are escaped";
  // One-rank reports have no ranks section.
  EXPECT_EQ(render_markdown(testing::sample_diagnosis()).find("## Ranks"), std::string::npos);
}

TEST(ReportMarkdown, HasEverySection) {
  const std::string md = render_markdown(testing::sample_diagnosis());
  for (const char* s : {"**Summary:**", "## Where the time goes", "## Findings", "## Steps",
                        "## Memory", "## Loss health", "## Configuration", "## Environment"}) {
    EXPECT_NE(md.find(s), std::string::npos) << s;
  }
  // Findings keep their rank order; knobs are inline code.
  EXPECT_LT(md.find("### 1. [critical] data"), md.find("### 2. [warning] loss"));
  EXPECT_NE(md.find("`--loader-workers 4`"), std::string::npos);
  // 12 step rows + header: every table row of the step table has 12 cells.
  EXPECT_NE(md.find("| 7 | 161.00 | 80.50 | 76.00 |"), std::string::npos);
}

TEST(ReportMarkdown, EscapesNamesFromTraces) {
  EXPECT_EQ(markdown_escape("a|b*c_d`e<f>g&h\\i[j]"),
            "a\\|b\\*c\\_d\\`e&lt;f&gt;g&amp;h\\\\i\\[j\\]");
  EXPECT_EQ(markdown_escape("two\nlines"), "two lines");
  const std::string md = render_markdown(testing::hostile_diagnosis());
  EXPECT_EQ(md.find("<script>"), std::string::npos);
  EXPECT_EQ(md.find("<img"), std::string::npos);
  EXPECT_NE(md.find("&lt;script&gt;alert(1)&lt;/script&gt;"), std::string::npos);
  // A knob with a backtick cannot close its code span: it is escaped text instead.
  EXPECT_NE(md.find("\\`--x\\`"), std::string::npos);
  // The config value with a pipe does not split the table row.
  const std::string sample = render_markdown(testing::sample_diagnosis());
  EXPECT_NE(sample.find("| --data | /data/my\\_corpus\\|v2.txt |"), std::string::npos);
}

TEST(ReportMarkdown, AbbreviatesLongRuns) {
  const auto d = testing::sample_diagnosis(500);
  const std::string md = render_markdown(d);
  EXPECT_NE(md.find("| … | 460 steps omitted |"), std::string::npos);
  EXPECT_NE(md.find("| 19 | "), std::string::npos);
  EXPECT_EQ(md.find("| 20 | "), std::string::npos);
  EXPECT_NE(md.find("| 480 | "), std::string::npos);
  EXPECT_NE(md.find("| 499 | "), std::string::npos);
  EXPECT_NE(md.find("Slowest steps: 7 (161.00 ms)"), std::string::npos);
  EXPECT_LT(count(md, "\n"), 145u);  // 40 step rows of 500; the rest is fixed sections
}

TEST(ReportMarkdown, EmptyDiagnosisStillRenders) {
  const std::string md = render_markdown(profiler::Diagnosis{});
  EXPECT_NE(md.find("No steps recorded."), std::string::npos);
  EXPECT_NE(md.find("No findings."), std::string::npos);
  EXPECT_NE(md.find("(none recorded)"), std::string::npos);
}

}  // namespace
}  // namespace ft::reports
