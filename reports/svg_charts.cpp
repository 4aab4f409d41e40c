// svg_charts.cpp: hand-written inline SVG charts for report.html (no scripts, no external assets).
#include "svg_charts.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "format.h"
#include "ft/reports/report.h"

namespace ft::reports::detail {
namespace {

constexpr double kWidth = 960, kHeight = 300;
constexpr double kLeft = 72, kRight = 16, kTop = 14, kBottom = 40;
constexpr double kPlotW = kWidth - kLeft - kRight, kPlotH = kHeight - kTop - kBottom;
constexpr size_t kMaxLinePoints = 2000;

// A "nice" tick spacing (1, 2, 2.5, 5 x 10^k) giving about `target` ticks over `span`.
double nice_step(double span, int target) {
  if (!(span > 0)) return 1;
  const double raw = span / target;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 2.5, 5.0, 10.0}) {
    if (m * mag >= raw) return m * mag;
  }
  return 10 * mag;
}

// Tick spacing in the axis' unit: byte axes step in whole KiB/MiB/GiB multiples.
double axis_step(double lo, double hi, int target, AxisUnit unit) {
  if (unit != AxisUnit::kBytes) return nice_step(hi - lo, target);
  double scale = 1;
  while (std::max(std::fabs(hi), std::fabs(lo)) / scale >= 1024 && scale < 1099511627776.0)
    scale *= 1024;
  return nice_step((hi - lo) / scale, target) * scale;
}

std::string tick_label(double v, AxisUnit unit, double step) {
  if (unit == AxisUnit::kBytes) return bytes_h(v);
  if (unit == AxisUnit::kMs && std::fabs(v) >= 10000) return fixed(v / 1000.0, 1) + " s";
  const int decimals = step >= 1 ? 0 : std::min(6, static_cast<int>(std::ceil(-std::log10(step))));
  return fixed(v, decimals) + (unit == AxisUnit::kMs ? " ms" : "");
}

std::string svg_open(const std::string& id, const std::string& label) {
  return fmt::format(
      "<svg id=\"{}\" class=\"chart\" viewBox=\"0 0 {} {}\" width=\"100%\" role=\"img\" "
      "aria-label=\"{}\" xmlns=\"http://www.w3.org/2000/svg\">\n",
      id, kWidth, kHeight, html_escape(label));
}

// Horizontal grid lines and y labels for [0 or lo, hi]; returns the axis maximum used.
std::string y_axis(double lo, double hi, AxisUnit unit) {
  std::string out;
  const double step = axis_step(lo, hi, 5, unit);
  for (double v = std::ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) {
    const double y = kTop + kPlotH * (1 - (v - lo) / (hi - lo));
    out += fmt::format(
        "<line class=\"grid\" x1=\"{:.1f}\" x2=\"{:.1f}\" y1=\"{:.1f}\" y2=\"{:.1f}\"/>"
        "<text class=\"tick\" x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"end\">{}</text>\n",
        kLeft, kLeft + kPlotW, y, y, kLeft - 6, y + 4, html_escape(tick_label(v, unit, step)));
  }
  return out;
}

std::string x_axis(double lo, double hi, AxisUnit unit, const std::string& caption) {
  std::string out;
  const double step = nice_step(hi - lo, 8);
  for (double v = std::ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) {
    const double x = kLeft + kPlotW * (hi > lo ? (v - lo) / (hi - lo) : 0.5);
    out += fmt::format(
        "<line class=\"axis\" x1=\"{:.1f}\" x2=\"{:.1f}\" y1=\"{:.1f}\" y2=\"{:.1f}\"/>"
        "<text class=\"tick\" x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\">{}</text>\n",
        x, x, kTop + kPlotH, kTop + kPlotH + 4, x, kTop + kPlotH + 16,
        html_escape(tick_label(v, unit, step)));
  }
  out += fmt::format(
      "<line class=\"axis\" x1=\"{:.1f}\" x2=\"{:.1f}\" y1=\"{:.1f}\" y2=\"{:.1f}\"/>"
      "<text class=\"caption\" x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\">{}</text>\n",
      kLeft, kLeft + kPlotW, kTop + kPlotH, kTop + kPlotH, kLeft + kPlotW / 2, kHeight - 6,
      html_escape(caption));
  return out;
}

std::string empty_chart(const std::string& id, const std::string& what) {
  return svg_open(id, what) +
         fmt::format(
             "<text class=\"caption\" x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text></svg>\n",
             kWidth / 2, kHeight / 2, html_escape(what));
}

// Keeps at most kMaxLinePoints points: per bucket the first, min and max (so spikes survive).
std::vector<std::pair<double, double>> decimate(const std::vector<std::pair<double, double>>& p) {
  if (p.size() <= kMaxLinePoints) return p;
  std::vector<std::pair<double, double>> out;
  const size_t buckets = kMaxLinePoints / 3;
  for (size_t b = 0; b < buckets; ++b) {
    const size_t lo = p.size() * b / buckets, hi = p.size() * (b + 1) / buckets;
    if (lo >= hi) continue;
    size_t mn = lo, mx = lo;
    bool nan = false;
    for (size_t i = lo; i < hi; ++i) {
      if (std::isnan(p[i].second)) {
        nan = true;
        continue;
      }
      if (std::isnan(p[mn].second) || p[i].second < p[mn].second) mn = i;
      if (std::isnan(p[mx].second) || p[i].second > p[mx].second) mx = i;
    }
    std::vector<size_t> keep = {lo, std::min(mn, mx), std::max(mn, mx)};
    keep.erase(std::unique(keep.begin(), keep.end()), keep.end());
    for (size_t i : keep) out.push_back(p[i]);
    if (nan && !std::isnan(out.back().second)) out.emplace_back(p[hi - 1].first, std::nan(""));
  }
  return out;
}

}  // namespace

const char* class_colour(int cls) {
  static const char* kColours[profiler::kNumWaitClasses] = {
      "#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#9c755f"};
  return kColours[std::clamp(cls, 0, profiler::kNumWaitClasses - 1)];
}

std::string breakdown_svg(const profiler::Diagnosis& d, size_t max_bars) {
  const std::string id = "ft-breakdown-chart";
  if (d.steps.empty()) return empty_chart(id, "no steps recorded");
  const size_t n = d.steps.size();
  const size_t bars = std::min(n, std::max<size_t>(max_bars, 1));
  struct Bar {
    size_t first = 0, last = 0;  // step indices
    std::array<double, profiler::kNumWaitClasses> ms{};
    double wall = 0;
  };
  std::vector<Bar> bs(bars);
  double top = 0;
  for (size_t b = 0; b < bars; ++b) {
    Bar& bar = bs[b];
    bar.first = n * b / bars;
    bar.last = n * (b + 1) / bars - 1;
    const double cnt = static_cast<double>(bar.last - bar.first + 1);
    for (size_t i = bar.first; i <= bar.last; ++i) {
      for (int c = 0; c < profiler::kNumWaitClasses; ++c) {
        bar.ms[c] += std::max(0.0, d.steps[i].ms[c]) / cnt;
      }
      bar.wall += d.steps[i].wall_ms / cnt;
    }
    double stacked = 0;
    for (double v : bar.ms) stacked += v;
    top = std::max({top, stacked, bar.wall});
  }
  if (!(top > 0)) top = 1;
  const double ymax = std::ceil(top / nice_step(top, 5)) * nice_step(top, 5);
  std::string out = svg_open(id, "per-step time breakdown by class (ms)");
  out += y_axis(0, ymax, AxisUnit::kMs);
  const double slot = kPlotW / static_cast<double>(bars);
  const double bw = std::max(slot * 0.8, std::min(slot, 1.0));
  for (size_t b = 0; b < bars; ++b) {
    const Bar& bar = bs[b];
    const int64_t s0 = d.steps[bar.first].step, s1 = d.steps[bar.last].step;
    std::string tip = s0 == s1
                          ? fmt::format("step {}: {} ms", s0, fixed(bar.wall, 2))
                          : fmt::format("steps {}-{} (mean): {} ms", s0, s1, fixed(bar.wall, 2));
    for (int c = 0; c < profiler::kNumWaitClasses; ++c) {
      if (bar.ms[c] > 0) {
        tip += fmt::format("\n{} {} ms", profiler::wait_class_name(profiler::WaitClass(c)),
                           fixed(bar.ms[c], 2));
      }
    }
    out += fmt::format("<g class=\"bar\" data-first=\"{}\" data-last=\"{}\"><title>{}</title>",
                       bar.first, bar.last, html_escape(tip));
    double y = kTop + kPlotH;
    const double x = kLeft + slot * static_cast<double>(b) + (slot - bw) / 2;
    for (int c = 0; c < profiler::kNumWaitClasses; ++c) {
      const double h = kPlotH * bar.ms[c] / ymax;
      if (h <= 0) continue;
      y -= h;
      out += fmt::format(
          "<rect class=\"seg c-{}\" x=\"{:.2f}\" y=\"{:.2f}\" width=\"{:.2f}\" height=\"{:.2f}\" "
          "fill=\"{}\"/>",
          profiler::wait_class_name(profiler::WaitClass(c)), x, y, bw, h, class_colour(c));
    }
    out += "</g>\n";
  }
  const double x_lo = static_cast<double>(d.steps.front().step);
  const double x_hi = static_cast<double>(d.steps.back().step);
  // Step labels under the first and last bar and at nice steps in between.
  const double step_tick = nice_step(std::max(1.0, x_hi - x_lo), 8);
  for (double v = std::ceil(x_lo / step_tick) * step_tick; v <= x_hi; v += step_tick) {
    const double frac = x_hi > x_lo ? (v - x_lo) / (x_hi - x_lo) : 0.5;
    const double x = kLeft + slot / 2 + (kPlotW - slot) * frac;
    out += fmt::format(
        "<text class=\"tick\" x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\">{}</text>\n", x,
        kTop + kPlotH + 16, static_cast<int64_t>(v));
  }
  out += fmt::format(
      "<line class=\"axis\" x1=\"{:.1f}\" x2=\"{:.1f}\" y1=\"{:.1f}\" y2=\"{:.1f}\"/>"
      "<text class=\"caption\" x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\">step{}</text>\n",
      kLeft, kLeft + kPlotW, kTop + kPlotH, kTop + kPlotH, kLeft + kPlotW / 2, kHeight - 6,
      bars < n ? fmt::format(" ({} steps averaged per bar)", fixed(double(n) / double(bars), 1))
               : "");
  out += "</svg>\n";
  return out;
}

std::string line_svg(const std::string& id, const std::vector<Series>& series,
                     const std::string& x_label, AxisUnit y_unit, AxisUnit x_unit) {
  double xlo = std::numeric_limits<double>::infinity(), xhi = -xlo, ylo = xlo, yhi = -xlo;
  for (const auto& s : series) {
    for (const auto& [x, y] : s.points) {
      if (!std::isfinite(x)) continue;
      xlo = std::min(xlo, x);
      xhi = std::max(xhi, x);
      if (!std::isfinite(y)) continue;
      ylo = std::min(ylo, y);
      yhi = std::max(yhi, y);
    }
  }
  if (!std::isfinite(xlo)) return empty_chart(id, "no data recorded");
  if (!std::isfinite(ylo)) ylo = 0, yhi = 1;
  if (y_unit == AxisUnit::kBytes) ylo = 0;
  if (yhi - ylo <= 0) {
    const double pad = std::max(std::fabs(yhi) * 0.05, 1e-9);
    ylo -= pad;
    yhi += pad;
  }
  const double ystep = axis_step(ylo, yhi, 5, y_unit);
  ylo = std::floor(ylo / ystep) * ystep;
  yhi = std::ceil(yhi / ystep) * ystep;
  if (xhi <= xlo) xhi = xlo + 1;
  const auto px = [&](double x) { return kLeft + kPlotW * (x - xlo) / (xhi - xlo); };
  const auto py = [&](double y) { return kTop + kPlotH * (1 - (y - ylo) / (yhi - ylo)); };

  std::string out = svg_open(id, x_label);
  out += y_axis(ylo, yhi, y_unit);
  out += x_axis(xlo, xhi, x_unit, x_label);
  double legend_x = kLeft + 8;
  for (const auto& s : series) {
    // A scatter and a series with tooltips keep every point (the titles belong to them).
    const bool keep_all = !s.line || !s.point_titles.empty();
    const auto pts = keep_all ? s.points : decimate(s.points);
    std::string path, gaps;
    bool pen = false;
    for (const auto& [x, y] : pts) {
      if (!std::isfinite(x)) continue;
      if (!std::isfinite(y)) {
        pen = false;
        gaps += fmt::format(
            "<line class=\"nan\" x1=\"{0:.1f}\" x2=\"{0:.1f}\" y1=\"{1:.1f}\" y2=\"{2:.1f}\"/>",
            px(x), kTop, kTop + 10);
        continue;
      }
      path += fmt::format("{}{:.1f},{:.1f} ", pen ? "L" : "M", px(x), py(y));
      pen = true;
    }
    out += fmt::format("<g class=\"series\"><title>{}</title>", html_escape(s.name));
    if (!path.empty() && s.line) {
      out += fmt::format("<path d=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"1.6\"{}/>",
                         path, html_escape(s.colour), s.dashed ? " stroke-dasharray=\"5 3\"" : "");
    }
    if (pts.size() <= 60 || !s.line) {
      for (size_t i = 0; i < pts.size(); ++i) {
        const auto [x, y] = pts[i];
        if (!std::isfinite(x) || !std::isfinite(y)) continue;
        out += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"{}\" fill=\"{}\"", px(x), py(y),
                           fixed(s.radius, 1), html_escape(s.colour));
        out += i < s.point_titles.size()
                   ? fmt::format("><title>{}</title></circle>", html_escape(s.point_titles[i]))
                   : std::string("/>");
      }
    }
    out += gaps + "</g>\n";
    out += fmt::format(
        "<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"12\" height=\"4\" fill=\"{}\"/>"
        "<text class=\"legend\" x=\"{:.1f}\" y=\"{:.1f}\">{}</text>\n",
        legend_x, kTop + 6, html_escape(s.colour), legend_x + 16, kTop + 11, html_escape(s.name));
    legend_x += 24 + 7.0 * static_cast<double>(s.name.size());
  }
  out += "</svg>\n";
  return out;
}

}  // namespace ft::reports::detail
