// diff_report.cpp: ft-diagnose diff's reports (diff_report.h).
#include "ft/reports/diff_report.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "format.h"
#include "ft/core/atomic_file.h"
#include "ft/reports/report.h"

namespace ft::reports {
namespace {

using detail::fixed;
using nlohmann::json;
using profiler::RunDiff;
using profiler::WaitClass;

json num(double x) { return std::isfinite(x) ? json(std::round(x * 1e6) / 1e6) : json(nullptr); }

json stats(const profiler::StepStats& s) {
  return {{"steps", s.n},
          {"median_ms", num(s.median)},
          {"mean_ms", num(s.mean)},
          {"p10_ms", num(s.p10)},
          {"p90_ms", num(s.p90)}};
}

std::string verdict(const RunDiff& d) {
  if (d.a.n < profiler::kMinDiffSteps || d.b.n < profiler::kMinDiffSteps)
    return fmt::format("too few steady steps for a verdict ({} and {}; at least {} each)", d.a.n,
                       d.b.n, profiler::kMinDiffSteps);
  if (d.ratio_lo > 1)
    return fmt::format("B is slower: {:.1f}% on the median step", 100 * (d.ratio - 1));
  if (d.ratio_hi < 1)
    return fmt::format("B is faster: {:.1f}% on the median step", 100 * (1 - d.ratio));
  return "no measurable difference (the interval holds 1)";
}

// The TraceDiff rows with the largest duration changes (at most `n`).
std::vector<const json*> top_changes(const RunDiff& d, size_t n) {
  std::vector<const json*> rows;
  if (d.trace_diff.is_object() && d.trace_diff.contains("records"))
    for (const json& r : d.trace_diff["records"]) rows.push_back(&r);
  std::stable_sort(rows.begin(), rows.end(), [](const json* x, const json* y) {
    return std::abs((*x)["diff_duration"].get<int64_t>()) >
           std::abs((*y)["diff_duration"].get<int64_t>());
  });
  if (rows.size() > n) rows.resize(n);
  return rows;
}

std::string name_of(const json& r) {
  return r.contains("short_name") ? r["short_name"].get<std::string>()
                                  : r["name"].get<std::string>();
}

}  // namespace

std::string render_diff_json(const RunDiff& d) {
  json j;
  j["format"] = "ft-diff";
  j["version"] = 1;
  j["a"] = {{"source", d.a_source}, {"step", stats(d.a)}};
  j["b"] = {{"source", d.b_source}, {"step", stats(d.b)}};
  j["median_ratio"] = {
      {"b_over_a", num(d.ratio)}, {"lo95", num(d.ratio_lo)}, {"hi95", num(d.ratio_hi)}};
  j["verdict"] = verdict(d);
  json cls = json::object();
  for (int c = 0; c < profiler::kNumWaitClasses; ++c) {
    cls[profiler::wait_class_name(WaitClass(c))] = {
        {"a_ms", num(d.a_class_ms[c])},
        {"b_ms", num(d.b_class_ms[c])},
        {"delta_ms", num(d.b_class_ms[c] - d.a_class_ms[c])}};
  }
  j["classes_ms_per_step"] = cls;
  j["knobs"] = json::array();
  for (const auto& [k, v] : d.knobs)
    j["knobs"].push_back({{"key", k}, {"a", v.first}, {"b", v.second}});
  j["findings_appeared"] = d.findings_appeared;
  j["findings_vanished"] = d.findings_vanished;
  j["kernels_appeared"] = d.kernels_appeared;
  j["kernels_vanished"] = d.kernels_vanished;
  j["trace_diff"] = d.trace_diff;
  return j.dump(1) + "\n";
}

std::string render_diff_markdown(const RunDiff& d) {
  const auto md = [](const std::string& s) { return markdown_escape(s); };
  std::string out = "# ft diff\n\n";
  out += fmt::format("A: {}\n\nB: {}\n\n", md(d.a_source), md(d.b_source));
  out += fmt::format(
      "**{}.** Median step {} ms (A, {} steps; p10-p90 {}-{}) and {} ms (B, {} steps; {}-{}); B / "
      "A "
      "= {} [95% bootstrap interval {}, {}]\n\n",
      md(verdict(d)), fixed(d.a.median, 2), d.a.n, fixed(d.a.p10, 2), fixed(d.a.p90, 2),
      fixed(d.b.median, 2), d.b.n, fixed(d.b.p10, 2), fixed(d.b.p90, 2), fixed(d.ratio, 3),
      fixed(d.ratio_lo, 3), fixed(d.ratio_hi, 3));
  if (!d.knobs.empty()) {
    out += "## Knobs that differ\n\n| knob | A | B |\n|---|---|---|\n";
    for (const auto& [k, v] : d.knobs)
      out += fmt::format("| {} | {} | {} |\n", md(k), md(v.first), md(v.second));
    out += "\n";
  }
  out +=
      "## Step time by class (ms per steady step)\n\n| class | A | B | B - A "
      "|\n|---|---:|---:|---:|\n";
  for (int c = 0; c < profiler::kNumWaitClasses; ++c) {
    out += fmt::format("| {} | {} | {} | {} |\n", profiler::wait_class_name(WaitClass(c)),
                       fixed(d.a_class_ms[c], 2), fixed(d.b_class_ms[c], 2),
                       fixed(d.b_class_ms[c] - d.a_class_ms[c], 2));
  }
  out += "\n## Findings\n\n";
  if (d.findings_appeared.empty() && d.findings_vanished.empty()) out += "The same findings.\n";
  for (const std::string& f : d.findings_appeared) out += "- appeared: " + md(f) + "\n";
  for (const std::string& f : d.findings_vanished) out += "- vanished: " + md(f) + "\n";
  out += "\n";
  if (d.trace_diff.is_object() && d.trace_diff.contains("error")) {
    out += "HTA TraceDiff: " + md(d.trace_diff["error"].get<std::string>()) + "\n\n";
  } else if (d.trace_diff.is_object()) {
    out +=
        "## Operators and kernels (HTA TraceDiff of the first steady steps, largest changes)\n\n";
    out +=
        "| name | A count | A µs | B count | B µs | count change "
        "|\n|---|---:|---:|---:|---:|---|\n";
    const json& cols = d.trace_diff["columns"];
    for (const json* r : top_changes(d, 20)) {
      out += fmt::format("| {} | {} | {} | {} | {} | {} |\n", md(name_of(*r)),
                         (*r)[cols[1].get<std::string>()].get<int64_t>(),
                         (*r)[cols[2].get<std::string>()].get<int64_t>(),
                         (*r)[cols[3].get<std::string>()].get<int64_t>(),
                         (*r)[cols[4].get<std::string>()].get<int64_t>(),
                         md((*r)["counts_change_categories"].get<std::string>()));
    }
    out += "\n";
    for (const std::string& k : d.kernels_appeared) out += "- kernel appeared: " + md(k) + "\n";
    for (const std::string& k : d.kernels_vanished) out += "- kernel vanished: " + md(k) + "\n";
  }
  return out;
}

std::string render_diff_html(const RunDiff& d) {
  const auto h = [](const std::string& s) { return html_escape(s); };
  std::string out = detail::html_head("ft diff", "ftdiff");
  out += "</head>\n<body>\n<header><h1>ft diff</h1>";
  out += "<p class=\"source\">A: " + h(d.a_source) + "</p><p class=\"source\">B: " + h(d.b_source) +
         "</p></header>\n<main>\n";
  out += "<section id=\"summary\"><h2>" + h(verdict(d)) + "</h2><div class=\"cards\">";
  out += detail::html_card("median step A", fixed(d.a.median, 2) + " ms");
  out += detail::html_card("median step B", fixed(d.b.median, 2) + " ms");
  out += detail::html_card("B / A (95%)", fixed(d.ratio, 3) + " [" + fixed(d.ratio_lo, 3) + ", " +
                                              fixed(d.ratio_hi, 3) + "]");
  out += "</div></section>\n";
  if (!d.knobs.empty()) {
    out +=
        "<section id=\"knobs\"><h2>Knobs that "
        "differ</h2><table><tr><th>knob</th><th>A</th><th>B</th></tr>";
    for (const auto& [k, v] : d.knobs)
      out +=
          "<tr><td>" + h(k) + "</td><td>" + h(v.first) + "</td><td>" + h(v.second) + "</td></tr>";
    out += "</table></section>\n";
  }
  out +=
      "<section id=\"classes\"><h2>Step time by class (ms per steady "
      "step)</h2><table><tr><th>class</th>"
      "<th class=\"n\">A</th><th class=\"n\">B</th><th class=\"n\">B - A</th></tr>";
  for (int c = 0; c < profiler::kNumWaitClasses; ++c) {
    out += fmt::format(
        "<tr><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td></tr>",
        profiler::wait_class_name(WaitClass(c)), fixed(d.a_class_ms[c], 2),
        fixed(d.b_class_ms[c], 2), fixed(d.b_class_ms[c] - d.a_class_ms[c], 2));
  }
  out += "</table></section>\n<section id=\"findings\"><h2>Findings</h2><ul>";
  for (const std::string& f : d.findings_appeared) out += "<li>appeared: " + h(f) + "</li>";
  for (const std::string& f : d.findings_vanished) out += "<li>vanished: " + h(f) + "</li>";
  out += "</ul></section>\n";
  if (d.trace_diff.is_object() && d.trace_diff.contains("records")) {
    out +=
        "<section id=\"ops\"><h2>Operators and kernels (HTA TraceDiff, largest changes)</h2><table>"
        "<tr><th>name</th><th class=\"n\">A count</th><th class=\"n\">A µs</th><th class=\"n\">B "
        "count</th><th class=\"n\">B µs</th></tr>";
    const json& cols = d.trace_diff["columns"];
    for (const json* r : top_changes(d, 20)) {
      out += fmt::format(
          "<tr><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}"
          "</td><td class=\"n\">{}</td></tr>",
          h(name_of(*r)), (*r)[cols[1].get<std::string>()].get<int64_t>(),
          (*r)[cols[2].get<std::string>()].get<int64_t>(),
          (*r)[cols[3].get<std::string>()].get<int64_t>(),
          (*r)[cols[4].get<std::string>()].get<int64_t>());
    }
    out += "</table></section>\n";
  }
  out += "</main>\n</body>\n</html>\n";
  return out;
}

void write_diff_reports(const RunDiff& d, const std::filesystem::path& dir) {
  std::filesystem::create_directories(dir);
  write_file_atomic(dir / "diff.json", render_diff_json(d));
  write_file_atomic(dir / "diff.md", render_diff_markdown(d));
  write_file_atomic(dir / "diff.html", render_diff_html(d));
}

}  // namespace ft::reports
