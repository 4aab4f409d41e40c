// trace_summary_report.cpp: the "What ran" section of the reports (Diagnosis::trace_summary).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "format.h"
#include "ft/profiler/trace_diff.h"
#include "ft/reports/report.h"

namespace ft::reports::detail {
namespace {

double gbps(const profiler::TransferTime& t) { return t.ms > 0 ? t.bytes / t.ms / 1e6 : 0; }

double r6(double x) { return std::round(x * 1e6) / 1e6; }

// Rows under HTA's short names, rows that share one summed (template instances of one kernel:
// "vectorized_elementwise_kernel<4, ...>" and "<2, ...>"), by self time (a kernel's is its total).
std::vector<profiler::OpTime> by_short_name(const std::vector<profiler::OpTime>& v) {
  std::vector<profiler::OpTime> out;
  for (const auto& t : v) {
    const std::string n = profiler::hta_short_name(t.name);
    auto it = std::find_if(out.begin(), out.end(), [&](const auto& o) { return o.name == n; });
    if (it == out.end()) {
      out.push_back({n, 0, 0, 0});
      it = out.end() - 1;
    }
    it->count += t.count, it->total_ms += t.total_ms, it->self_ms += t.self_ms;
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const auto& a, const auto& b) { return a.self_ms > b.self_ms; });
  return out;
}

}  // namespace

void add_trace_summary_json(nlohmann::ordered_json& j, const profiler::Diagnosis& d) {
  const profiler::TraceSummary& s = d.trace_summary;
  if (!s.computed) return;
  nlohmann::ordered_json o;
  o["device_busy_share"] = r6(s.device_busy_share);
  auto ops = [](const std::vector<profiler::OpTime>& v) {
    nlohmann::ordered_json a = nlohmann::ordered_json::array();
    for (const auto& t : v)
      a.push_back({{"name", t.name},
                   {"count", r6(t.count)},
                   {"total_ms", r6(t.total_ms)},
                   {"self_ms", r6(t.self_ms)}});
    return a;
  };
  o["kernels"] = ops(s.kernels);
  o["cpu_ops"] = ops(s.cpu_ops);
  o["streams"] = nlohmann::ordered_json::array();
  for (const auto& [name, ms] : s.streams)
    o["streams"].push_back({{"stream", name}, {"busy_ms", r6(ms)}});
  o["transfers"] = nlohmann::ordered_json::array();
  for (const auto& t : s.transfers)
    o["transfers"].push_back({{"kind", t.kind},
                              {"count", r6(t.count)},
                              {"ms", r6(t.ms)},
                              {"bytes", std::round(t.bytes)},
                              {"gb_per_s", r6(gbps(t))}});
  j["trace_summary"] = std::move(o);
}

std::string trace_summary_markdown(const profiler::Diagnosis& d) {
  const profiler::TraceSummary& s = d.trace_summary;
  if (!s.computed) return "";
  std::string out = fmt::format(
      "## What ran (per steady step)\n\nThe device is busy {} of the steady steps. Names are "
      "HTA's short names, rows of one short name summed (report.json keeps them whole).\n\n",
      percent(s.device_busy_share));
  auto table = [&](const char* title, const std::vector<profiler::OpTime>& v, bool self) {
    if (v.empty()) return;
    out += fmt::format("| {} | count | total ms |{}\n|---|---:|---:|{}\n", title,
                       self ? " self ms |" : "", self ? "---:|" : "");
    for (const auto& t : by_short_name(v)) {
      const std::string self_ms = self ? fmt::format(" {} |", fixed(t.self_ms, 3)) : std::string();
      out += fmt::format("| {} | {} | {} |{}\n", markdown_escape(t.name), fixed(t.count, 1),
                         fixed(t.total_ms, 3), self_ms);
    }
    out += "\n";
  };
  table("kernel", s.kernels, false);
  table("CPU operator (training thread)", s.cpu_ops, true);
  if (!s.streams.empty()) {
    out += "| stream | busy ms |\n|---|---:|\n";
    for (const auto& [name, ms] : s.streams)
      out += fmt::format("| {} | {} |\n", name, fixed(ms, 3));
    out += "\n";
  }
  if (!s.transfers.empty()) {
    out += "| copies and collectives | count | ms | MB | GB/s |\n|---|---:|---:|---:|---:|\n";
    for (const auto& t : s.transfers) {
      out += fmt::format("| {} | {} | {} | {} | {} |\n", t.kind, fixed(t.count, 1), fixed(t.ms, 3),
                         fixed(t.bytes / 1e6, 3), t.bytes > 0 ? fixed(gbps(t), 2) : "n/a");
    }
    out += "\n";
  }
  return out;
}

std::string trace_summary_html(const profiler::Diagnosis& d) {
  const profiler::TraceSummary& s = d.trace_summary;
  if (!s.computed) return "";
  std::string out = fmt::format(
      "<section id=\"what-ran\"><h2>What ran (per steady step)</h2><p>The device is busy {} of "
      "the steady steps.</p>\n",
      percent(s.device_busy_share));
  auto table = [&](const char* title, const std::vector<profiler::OpTime>& v, bool self) {
    if (v.empty()) return;
    out += fmt::format(
        "<table><tr><th>{}</th><th class=\"n\">count</th><th class=\"n\">total ms</th>{}</tr>",
        title, self ? "<th class=\"n\">self ms</th>" : "");
    for (const auto& t : by_short_name(v)) {
      out += fmt::format(
          "<tr><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td>{}</tr>",
          html_escape(t.name), fixed(t.count, 1), fixed(t.total_ms, 3),
          self ? fmt::format("<td class=\"n\">{}</td>", fixed(t.self_ms, 3)) : std::string());
    }
    out += "</table>\n";
  };
  table("kernel", s.kernels, false);
  table("CPU operator (training thread)", s.cpu_ops, true);
  if (!s.streams.empty()) {
    out += "<table><tr><th>stream</th><th class=\"n\">busy ms</th></tr>";
    for (const auto& [name, ms] : s.streams)
      out += fmt::format("<tr><td>{}</td><td class=\"n\">{}</td></tr>", html_escape(name),
                         fixed(ms, 3));
    out += "</table>\n";
  }
  if (!s.transfers.empty()) {
    out +=
        "<table><tr><th>copies and collectives</th><th class=\"n\">count</th><th "
        "class=\"n\">ms</th>"
        "<th class=\"n\">GB/s</th></tr>";
    for (const auto& t : s.transfers)
      out += fmt::format(
          "<tr><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td "
          "class=\"n\">{}</td></tr>",
          html_escape(t.kind), fixed(t.count, 1), fixed(t.ms, 3),
          t.bytes > 0 ? fixed(gbps(t), 2) : std::string("n/a"));
    out += "</table>\n";
  }
  return out + "</section>\n";
}

}  // namespace ft::reports::detail
