// format.cpp: deterministic number formatting, escaping and run summaries for the report writers.
// GCC 12 reports a false -Wrestrict inside std::string's assignment once the escape tables below
// are inlined (libstdc++ bug 105651).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wrestrict"
#endif
#include "format.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <numeric>

#include "ft/reports/report.h"

namespace ft::reports {

namespace {

// A byte-to-replacement table (empty: copy the byte) and the one loop that applies it.
using EscapeTable = std::array<std::string, 256>;

std::string escape_with(std::string_view s, const EscapeTable& table) {
  std::string out;
  out.reserve(s.size() + 16);
  for (char c : s) {
    const std::string& r = table[static_cast<unsigned char>(c)];
    if (r.empty()) {
      out += c;
    } else {
      out += r;
    }
  }
  return out;
}

// What HTML text and attributes and Markdown table cells both need: the markup characters as
// entities and NUL (not allowed in HTML text) as U+FFFD.
EscapeTable entity_table() {
  EscapeTable t;
  t['&'] = "&amp;";
  t['<'] = "&lt;";
  t['>'] = "&gt;";
  t['\0'] = "\xEF\xBF\xBD";
  return t;
}

}  // namespace

std::string html_escape(std::string_view s) {
  static const EscapeTable table = [] {
    EscapeTable t = entity_table();
    t['"'] = "&quot;";
    t['\''] = "&#39;";
    return t;
  }();
  return escape_with(s, table);
}

std::string markdown_escape(std::string_view s) {
  static const EscapeTable table = [] {
    EscapeTable t = entity_table();
    for (char c : std::string_view("\\`*_|[]#~")) {
      std::string& r = t[static_cast<unsigned char>(c)];
      r.push_back('\\');
      r.push_back(c);
    }
    for (char c : std::string_view("\n\r\t")) t[static_cast<unsigned char>(c)] = " ";  // one line
    return t;
  }();
  return escape_with(s, table);
}

std::string json_for_script(std::string_view json) {
  std::string out;
  out.reserve(json.size() + 64);
  for (size_t i = 0; i < json.size(); ++i) {
    const char c = json[i];
    if (c == '<') {
      out += "\\u003c";
    } else if (c == '>') {
      out += "\\u003e";
    } else if (c == '&') {
      out += "\\u0026";
    } else if (c == '\xE2' && i + 2 < json.size() && json[i + 1] == '\x80' &&
               (json[i + 2] == '\xA8' || json[i + 2] == '\xA9')) {
      out += json[i + 2] == '\xA8' ? "\\u2028" : "\\u2029";
      i += 2;
    } else {
      out += c;
    }
  }
  return out;
}

namespace detail {

std::string fixed(double x, int decimals) {
  if (!std::isfinite(x)) return "n/a";
  std::string s = fmt::format("{:.{}f}", x, decimals);
  if (s.find_first_not_of("-0.") == std::string::npos && s[0] == '-') s.erase(0, 1);  // no "-0.00"
  return s;
}

std::string percent(double share, int decimals) {
  if (!std::isfinite(share)) return "n/a";
  return fixed(share * 100.0, decimals) + "%";
}

std::string known_percent(double share) {
  return std::isfinite(share) ? percent(share) : std::string("unknown");
}

std::string tokens_rate(double per_s) {
  return std::isfinite(per_s) ? fixed(per_s, 0) + " tokens/s" : std::string("tokens/s unknown");
}

std::string bytes_h(double bytes) {
  if (!std::isfinite(bytes)) return "n/a";
  const double a = std::fabs(bytes);
  if (a < 1024) return fmt::format("{} B", static_cast<int64_t>(std::llround(bytes)));
  static const char* kUnits[] = {"KiB", "MiB", "GiB", "TiB"};
  double v = bytes / 1024.0;
  int u = 0;
  while (std::fabs(v) >= 1024.0 && u < 3) {
    v /= 1024.0;
    ++u;
  }
  return fixed(v, std::fabs(v) < 10 ? 2 : 1) + " " + kUnits[u];
}

std::string recorded_bytes(double bytes) {
  return std::isfinite(bytes) ? bytes_h(bytes) : "not recorded";
}

std::string sig(double x, int digits) {
  if (!std::isfinite(x)) return std::isnan(x) ? "NaN" : (x > 0 ? "inf" : "-inf");
  if (x == 0) return "0";
  return fmt::format("{:.{}g}", x, digits);
}

RunSummary summarize(const profiler::Diagnosis& d) {
  RunSummary s;
  s.steps = static_cast<int64_t>(d.steps.size());
  if (d.steps.empty()) return s;
  std::vector<double> walls;
  walls.reserve(d.steps.size());
  for (const auto& st : d.steps) {
    walls.push_back(st.wall_ms);
    s.total_ms += st.wall_ms;
    for (int c = 0; c < profiler::kNumWaitClasses; ++c) s.class_ms[c] += st.ms[c];
  }
  std::sort(walls.begin(), walls.end());
  s.mean_ms = s.total_ms / static_cast<double>(walls.size());
  const size_t n = walls.size();
  s.median_ms = n % 2 ? walls[n / 2] : 0.5 * (walls[n / 2 - 1] + walls[n / 2]);
  s.min_ms = walls.front();
  s.max_ms = walls.back();
  return s;
}

std::vector<size_t> abbreviated_rows(size_t n, size_t limit) {
  std::vector<size_t> rows;
  if (n <= limit) {
    rows.resize(n);
    std::iota(rows.begin(), rows.end(), size_t{0});
    return rows;
  }
  const size_t half = limit / 2;
  for (size_t i = 0; i < half; ++i) rows.push_back(i);
  for (size_t i = n - half; i < n; ++i) rows.push_back(i);
  return rows;
}

std::vector<size_t> slowest_steps(const profiler::Diagnosis& d, size_t k) {
  std::vector<size_t> idx(d.steps.size());
  std::iota(idx.begin(), idx.end(), size_t{0});
  std::stable_sort(idx.begin(), idx.end(),
                   [&](size_t a, size_t b) { return d.steps[a].wall_ms > d.steps[b].wall_ms; });
  if (idx.size() > k) idx.resize(k);
  return idx;
}

std::string step_ranges(std::vector<int64_t> steps, size_t max_items) {
  std::sort(steps.begin(), steps.end());
  steps.erase(std::unique(steps.begin(), steps.end()), steps.end());
  std::string out;
  size_t items = 0, i = 0;
  while (i < steps.size()) {
    size_t j = i;
    while (j + 1 < steps.size() && steps[j + 1] == steps[j] + 1) ++j;
    if (items == max_items) {
      out += fmt::format(", … ({} more steps)", steps.size() - i);
      break;
    }
    if (!out.empty()) out += ", ";
    out += j > i ? fmt::format("{}-{}", steps[i], steps[j]) : fmt::format("{}", steps[i]);
    ++items;
    i = j + 1;
  }
  return out;
}

}  // namespace detail
}  // namespace ft::reports
