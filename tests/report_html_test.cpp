// report_html_test.cpp: report.html structure (charts, findings, config), self-containment,
// escaping.
// GCC 12 reports a false -Wmaybe-uninitialized inside <regex> (std::function moves) in
// sanitizer builds.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <regex>
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

// The text between <script id="ft-report-data" ...> and its </script>.
std::string embedded_json(const std::string& html) {
  const std::string open = "<script id=\"ft-report-data\" type=\"application/json\">";
  const size_t a = html.find(open);
  if (a == std::string::npos) return "";
  const size_t b = html.find("</script>", a);
  return html.substr(a + open.size(), b - a - open.size());
}

TEST(ReportHtml, HasChartsFindingsAndConfig) {
  const auto d = testing::sample_diagnosis();
  const std::string html = render_html(d);
  EXPECT_EQ(html.rfind("<!DOCTYPE html>", 0), 0u);
  EXPECT_NE(html.find("</html>"), std::string::npos);
  // Stacked breakdown: one bar group per step, one segment per nonzero class (pcie is 0 here).
  EXPECT_NE(html.find("<svg id=\"ft-breakdown-chart\""), std::string::npos);
  EXPECT_EQ(count(html, "<g class=\"bar\""), 12u);
  for (const char* c : {"compute", "data", "comm", "memory", "host", "sync", "other"}) {
    EXPECT_EQ(count(html, std::string("class=\"seg c-") + c + "\""), 12u) << c;
  }
  EXPECT_EQ(count(html, "class=\"seg c-pcie\""), 0u);
  EXPECT_NE(html.find("<svg id=\"ft-loss-chart\""), std::string::npos);
  EXPECT_NE(html.find("<svg id=\"ft-memory-chart\""), std::string::npos);
  // Loss chart has a path through 12 points; memory chart has the two series.
  EXPECT_EQ(count(html, "<circle "), 12u + 24u + 12u);
  EXPECT_NE(html.find("<title>allocated</title>"), std::string::npos);
  EXPECT_NE(html.find("<title>reserved</title>"), std::string::npos);
  // Findings, in rank order, with evidence and knobs.
  EXPECT_EQ(count(html, "<article class=\"finding"), 2u);
  EXPECT_LT(html.find("finding critical"), html.find("finding warning"));
  EXPECT_NE(html.find("<code class=\"knob\">--loader-workers 4</code>"), std::string::npos);
  EXPECT_NE(html.find("loader.wait 70.0 ms at step 7 (thread main)"), std::string::npos);
  // Config and environment (CPU, BLAS core type, threads, versions).
  for (const char* s : {"--micro-batch", "OPENBLAS_CORETYPE", "Haswell", "brg:avx512_core",
                        "2 of 2 cores", "Intel(R) Xeon(R) Processor"}) {
    EXPECT_NE(html.find(s), std::string::npos) << s;
  }
  // The embedded data is the report JSON.
  const auto j = nlohmann::json::parse(embedded_json(html));
  EXPECT_EQ(j, nlohmann::json::parse(render_json(d)));
}

TEST(ReportHtml, RanksTableForMultiRankRuns) {
  const std::string html = render_html(testing::sample_ranks_diagnosis());
  const size_t a = html.find("<table id=\"ft-ranks\">");
  ASSERT_NE(a, std::string::npos);
  const std::string table = html.substr(a, html.find("</table>", a) - a);
  EXPECT_EQ(count(table, "<tr>"), 3u);  // header + 2 ranks
  EXPECT_NE(table.find("<td>node0</td>"), std::string::npos);
  EXPECT_NE(html.find("Straggler: rank 1, late by 2.500 ms"), std::string::npos);
  EXPECT_NE(html.find("node&lt;1&gt;"), std::string::npos);
  EXPECT_EQ(html.find("node<1>"), std::string::npos);
  EXPECT_EQ(render_html(testing::sample_diagnosis()).find("ft-ranks"), std::string::npos);
}

TEST(ReportHtml, IsSelfContained) {
  const std::string html = render_html(testing::sample_diagnosis(40));
  EXPECT_EQ(html.find("src="), std::string::npos);
  EXPECT_EQ(html.find("href="), std::string::npos);
  EXPECT_EQ(html.find("http://"), html.find("http://www.w3.org/2000/svg"));
  EXPECT_EQ(html.find("https://"), std::string::npos);
  EXPECT_EQ(html.find("@import"), std::string::npos);
  EXPECT_NE(html.find("Content-Security-Policy\" content=\"default-src 'none'"), std::string::npos);
  // Every executable script carries the page's nonce.
  const std::regex nonce_re("script-src 'nonce-(ft[0-9a-f]{8})'");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(html, m, nonce_re));
  EXPECT_EQ(count(html, "<script nonce=\"" + m[1].str() + "\">"), 2u);
  EXPECT_EQ(count(html, "<script"), 3u);  // + the JSON data block
}

TEST(ReportHtml, EscapesEverythingFromTraces) {
  EXPECT_EQ(html_escape("<a href=\"x\">'&'</a>"),
            "&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;");
  EXPECT_EQ(json_for_script("\"</script>&\xE2\x80\xA8\xE2\x80\xA9\""),
            "\"\\u003c/script\\u003e\\u0026\\u2028\\u2029\"");
  const auto d = testing::hostile_diagnosis();
  const std::string html = render_html(d);
  // No markup from the names survives: the only <script tags are the page's own three, and
  // no <img> or onload/onerror attribute appears anywhere.
  EXPECT_EQ(count(html, "<script"), 3u);
  EXPECT_EQ(count(html, "</script>"), 3u);
  EXPECT_EQ(html.find("<img"), std::string::npos);
  EXPECT_EQ(html.find("<svg onload"), std::string::npos);
  EXPECT_EQ(html.find("<b>bold</b>"), std::string::npos);
  EXPECT_EQ(std::regex_search(html, std::regex("<[^>]*\\son(error|load)=", std::regex::icase)),
            false);
  // They are shown as text.
  EXPECT_NE(html.find("span &lt;script&gt;alert(1)&lt;/script&gt;"), std::string::npos);
  EXPECT_NE(html.find("&quot;&gt;&lt;img src=x onerror=alert(1)&gt;"), std::string::npos);
  EXPECT_NE(html.find("&lt;/SCRIPT&gt;&lt;svg onload=alert(3)&gt;"), std::string::npos);
  EXPECT_NE(html.find("&lt;b&gt;bold&lt;/b&gt;"), std::string::npos);
  // The embedded JSON cannot end its script element and still parses to the same names.
  const std::string data = embedded_json(html);
  EXPECT_EQ(data.find('<'), std::string::npos);
  EXPECT_EQ(data.find('>'), std::string::npos);
  EXPECT_EQ(data.find('&'), std::string::npos);
  EXPECT_EQ(data.find("\xE2\x80\xA8"), std::string::npos);
  const auto j = nlohmann::json::parse(data);
  EXPECT_EQ(j["findings"][0]["title"], "span <script>alert(1)</script>");
  EXPECT_EQ(j["findings"][0]["evidence"]["examples"][2], "line\u2028separator\u2029end");
}

TEST(ReportHtml, LongRunsAreBucketedAndAbbreviated) {
  const auto d = testing::sample_diagnosis(1000);
  const std::string html = render_html(d);
  EXPECT_EQ(count(html, "<g class=\"bar\""), 300u);
  EXPECT_NE(html.find("steps averaged per bar"), std::string::npos);
  EXPECT_NE(html.find("… 940 steps omitted …"), std::string::npos);
  EXPECT_LT(html.size(), 2u * 1024 * 1024);
}

TEST(ReportHtml, NaNLossIsMarkedAndEmptyRunsRender) {
  auto d = testing::sample_diagnosis(8);
  d.steps[4].loss = std::nan("");
  const std::string html = render_html(d);
  EXPECT_EQ(count(html, "class=\"nan\""), 1u);
  const std::string empty = render_html(profiler::Diagnosis{});
  EXPECT_NE(empty.find("no steps recorded"), std::string::npos);
  EXPECT_NE(empty.find("No findings."), std::string::npos);
}

}  // namespace
}  // namespace ft::reports
