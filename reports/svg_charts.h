// svg_charts.h: inline SVG charts (stacked per-step breakdown, line charts) for report.html.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "ft/profiler/diagnosis.h"

namespace ft::reports::detail {

// Fill colour of each wait class (Tableau 10), indexed by WaitClass.
const char* class_colour(int cls);

// Stacked bars, one per step (steps bucketed to at most `max_bars` averaged bars), the 8 classes.
std::string breakdown_svg(const profiler::Diagnosis& d, size_t max_bars = 300);

struct Series {
  Series() = default;
  Series(std::string series_name, std::string series_colour,
         std::vector<std::pair<double, double>> series_points = {})
      : name(std::move(series_name)),
        colour(std::move(series_colour)),
        points(std::move(series_points)) {}

  std::string name;    // escaped by the chart
  std::string colour;  // CSS colour literal chosen by the caller (not from a trace)
  std::vector<std::pair<double, double>> points;  // (x, y); NaN y marks a gap (and a red tick)
  bool line = true;                       // false: markers only (a scatter), every point drawn
  bool dashed = false;                    // a dashed line
  double radius = 2.2;                    // of the markers
  std::vector<std::string> point_titles;  // optional tooltip per point (escaped by the chart)
};
enum class AxisUnit { kPlain, kBytes, kMs };

// Line chart with axes; `id` is the element id, `x_label` the x-axis caption.
std::string line_svg(const std::string& id, const std::vector<Series>& series,
                     const std::string& x_label, AxisUnit y_unit,
                     AxisUnit x_unit = AxisUnit::kPlain);

}  // namespace ft::reports::detail
