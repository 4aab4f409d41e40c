// timeline_report.cpp: the timeline of steady steps in report.json and report.html (inline SVG).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "format.h"
#include "ft/reports/report.h"
#include "svg_charts.h"

namespace ft::reports::detail {
namespace {

double r3(double ms) { return std::round(ms * 1e3) / 1e3; }  // ms to 1 µs

constexpr double kWidth = 1180, kLabelW = 210, kRowH = 13, kLaneGap = 6, kTop = 22;

// The first bytes of `s`, at most `n`, cut at a UTF-8 character boundary.
std::string utf8_prefix(const std::string& s, size_t n) {
  if (s.size() <= n) return s;
  while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;
  return s.substr(0, n);
}

// "1.234 ms" / "56 µs" for a tooltip.
std::string duration(double ms) {
  return ms >= 1 ? fmt::format("{:.3f} ms", ms) : fmt::format("{:.1f} µs", ms * 1e3);
}

// A tick step of 1, 2 or 5 x 10^k giving about `n` ticks over `span`.
double tick_step(double span, int n) {
  const double raw = span / n;
  const double p = std::pow(10.0, std::floor(std::log10(raw)));
  for (const double m : {1.0, 2.0, 5.0})
    if (m * p >= raw) return m * p;
  return 10 * p;
}

}  // namespace

void add_timeline_json(nlohmann::ordered_json& j, const profiler::Diagnosis& d) {
  const profiler::Timeline& t = d.timeline;
  if (t.steps.empty()) return;
  nlohmann::ordered_json o;
  o["steps"] = t.steps;
  o["start_ms"] = r3(t.start_ms);
  o["end_ms"] = r3(t.end_ms);
  o["lanes"] = t.lanes;
  o["names"] = t.names;
  o["spans"] = nlohmann::ordered_json::array();  // [lane, row, class, name, start_ms, dur_ms]
  for (const auto& s : t.spans)
    o["spans"].push_back({s.lane, s.row, profiler::wait_class_name(profiler::WaitClass(s.cls)),
                          s.name, r3(s.start_ms), r3(s.dur_ms)});
  o["hidden"] = t.hidden;
  j["timeline"] = std::move(o);
}

std::string timeline_html(const profiler::Diagnosis& d) {
  const profiler::Timeline& t = d.timeline;
  if (t.steps.empty() || t.lanes.empty()) return "";
  const double span_ms = std::max(t.end_ms - t.start_ms, 1e-6);
  const double plot_w = kWidth - kLabelW - 10;
  auto x = [&](double ms) { return kLabelW + plot_w * ms / span_ms; };
  // Each lane has one row, or two when it has host runtime calls or waits (row 1).
  std::vector<int> rows(t.lanes.size(), 1);
  for (const auto& s : t.spans) rows[s.lane] = std::max(rows[s.lane], s.row + 1);
  std::vector<double> lane_y(t.lanes.size());
  double y = kTop;
  for (size_t i = 0; i < t.lanes.size(); ++i) {
    lane_y[i] = y;
    y += rows[i] * kRowH + kLaneGap;
  }
  const double height = y + 8;
  std::string steps = std::to_string(t.steps.front());
  if (t.steps.size() > 1) steps += "–" + std::to_string(t.steps.back());
  std::string out = fmt::format(
      "<section id=\"timeline\"><h2>Timeline (step{} {})</h2><p>The steady step of median "
      "length{}, as the classifier sees it: each thread's outermost spans, then (second row) "
      "the runtime calls and waits inside them; each stream's kernels, copies and collectives. "
      "Colours are the classes above; hover a span for its name and length.{}</p>\n",
      t.steps.size() > 1 ? "s" : "", steps, t.steps.size() > 1 ? " and the next" : "",
      t.hidden > 0 ? fmt::format(" {} shorter spans are not drawn.", t.hidden) : std::string());
  out += fmt::format(
      "<svg id=\"ft-timeline\" class=\"chart\" viewBox=\"0 0 {} {:.0f}\" width=\"{}\" "
      "height=\"{:.0f}\" role=\"img\" aria-label=\"timeline\">\n",
      kWidth, height, kWidth, height);
  // Time axis with ticks in ms from the window's start, and the step boundaries.
  const double step = tick_step(span_ms, 8);
  for (double ms = 0; ms <= span_ms + 1e-9; ms += step) {
    out += fmt::format(
        "<line x1=\"{0:.1f}\" x2=\"{0:.1f}\" y1=\"{1}\" y2=\"{2:.0f}\" stroke=\"#eee\"/>"
        "<text x=\"{0:.1f}\" y=\"{3}\" font-size=\"10\" text-anchor=\"middle\" "
        "fill=\"#555\">{4} ms</text>\n",
        x(ms), kTop - 4, height - 8, kTop - 8, fixed(ms, step < 1 ? 2 : 0));
  }
  for (const profiler::StepBreakdown& s : d.steps) {
    if (std::find(t.steps.begin() + 1, t.steps.end(), s.step) == t.steps.end()) continue;
    const double boundary = s.start_ms - t.start_ms;
    out += fmt::format(
        "<line class=\"step-boundary\" x1=\"{0:.1f}\" x2=\"{0:.1f}\" y1=\"{1}\" y2=\"{2:.0f}\" "
        "stroke=\"#333\" stroke-dasharray=\"4 3\"><title>step {3} starts</title></line>\n",
        x(boundary), kTop - 4, height - 8, s.step);
  }
  for (size_t i = 0; i < t.lanes.size(); ++i) {
    // "training thread: rank 3 thread 3113936 (python3.8)" is labelled "training thread".
    const std::string& full = t.lanes[i];
    std::string label = full.rfind("training thread: ", 0) == 0 ? "training thread" : full;
    if (label.size() > 34) label = utf8_prefix(label, 32) + "…";
    out += fmt::format(
        "<text x=\"4\" y=\"{:.1f}\" font-size=\"11\" fill=\"#222\"><title>{}</title>{}</text>\n",
        lane_y[i] + kRowH - 3, html_escape(full), html_escape(label));
    out += fmt::format(
        "<rect x=\"{}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{}\" fill=\"#f7f7f7\"/>\n", kLabelW,
        lane_y[i], plot_w, rows[i] * kRowH);
  }
  for (const auto& s : t.spans) {
    const double x0 = x(s.start_ms), w = std::max(plot_w * s.dur_ms / span_ms, 0.6);
    out += fmt::format(
        "<rect class=\"span\" x=\"{:.2f}\" y=\"{:.1f}\" width=\"{:.2f}\" height=\"{}\" "
        "fill=\"{}\"><title>{} · {} · {}</title></rect>\n",
        x0, lane_y[s.lane] + s.row * kRowH + 1, w, kRowH - 2, class_colour(s.cls),
        html_escape(t.names[s.name]), duration(s.dur_ms),
        profiler::wait_class_name(profiler::WaitClass(s.cls)));
  }
  return out + "</svg></section>\n";
}

}  // namespace ft::reports::detail
