// sweep_report.cpp: an ft-tune sweep's report.json, report.md and report.html.
#include "ft/reports/sweep_report.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "format.h"
#include "ft/reports/report.h"
#include "svg_charts.h"

namespace ft::reports {
namespace {

using detail::AxisUnit;
using detail::fixed;
using detail::html_card;
using detail::line_svg;
using detail::Series;
using nlohmann::json;

constexpr double kMiB = 1048576.0;
constexpr double kLossCap = 20;  // loss curves are drawn clipped here (a diverged run's 1e6)

std::string h(std::string_view s) { return html_escape(s); }
std::string md(std::string_view s) { return markdown_escape(s); }

// "—" when not recorded (a program that reports no memory; a trial the model did not predict).
std::string mib(double bytes) { return bytes > 0 ? fixed(bytes / kMiB, 1) : "—"; }

std::string ratios_text(const SweepConfirmRow& row) {
  std::string s;
  for (double x : row.ratios) {
    if (!s.empty()) s += ' ';
    s += fixed(x, 3);
  }
  return s.empty() ? "-" : s;
}

// A row's median ratio, or "not run" for a candidate never measured beside row 0.
std::string ratio_text(const SweepConfirmRow& row) {
  return row.ratios.empty() && row.median_ratio <= 0 ? "not run" : fixed(row.median_ratio, 3);
}

std::string ids_text(const std::vector<int>& ids) {
  std::string s;
  for (int t : ids) s += fmt::format("{}{}", s.empty() ? "" : ",", t);
  return s;
}

const SweepTrial* trial_at(const SweepReport& r, int id) {
  for (const auto& t : r.trials) {
    if (t.id == id) return &t;
  }
  return nullptr;
}

bool failed(const SweepTrial& t) { return t.status != "ok"; }

json confirmation_json(const SweepReport& r) {
  json rows = json::array();
  for (const auto& row : r.confirmation) {
    rows.push_back({{"change", row.change},
                    {"config", row.config},
                    {"trials", row.trials},
                    {"tokens_per_s", row.tokens_per_s},
                    {"ratios", row.ratios},
                    {"median_tokens_per_s", row.median_tps},
                    {"median_ratio", row.median_ratio},
                    {"ratio_spread", row.ratio_spread},
                    {"beats_baseline", row.beats_baseline}});
  }
  return rows;
}

// ---- report.md ---------------------------------------------------------------------------------

std::string markdown_trials(const SweepReport& r) {
  std::string s =
      "## Trials\n\n(tokens/s: the measured steps' tokens over their time; step spread: "
      "interquartile range of the per-step rates over their median)\n\n| id | phase | change | "
      "status | tokens/s | step spread | peak MiB | predicted MiB | final loss | reason |\n"
      "|---|---|---|---|---|---|---|---|---|---|\n";
  for (const auto& t : r.trials) {
    s += fmt::format("| {} | {} | {} | {} | {} | {}% | {} | {} | {} | {} |\n", t.id, md(t.phase),
                     md(t.change), md(t.status), fixed(t.tokens_per_s, 0),
                     fixed(100 * t.step_tps_spread, 0), mib(t.mem_peak), mib(t.predicted_mem),
                     fixed(t.final_loss, 4), md(t.reason));
  }
  return s;
}

// ---- report.html -------------------------------------------------------------------------------

const char* kSweepStyle = R"css(
tr.st-rejected td,tr.st-oom td,tr.st-crash td,tr.st-timeout td{color:#b00}
)css";

// Throughput against peak memory of the throughput trials that ran: the Pareto front as a line,
// the best configuration's trial marked.
std::string scatter_html(const SweepReport& r) {
  Series all("trials", "#4e79a7"), front("Pareto front", "#e15759"), best("best", "#59a14f");
  all.line = best.line = false;  // markers
  all.radius = 3.5;
  best.radius = 6;
  for (const auto& t : r.trials) {
    if (t.kind != SweepTrialKind::kThroughput || failed(t)) continue;
    const std::pair<double, double> p{t.mem_peak / kMiB, t.tokens_per_s};
    const std::string title = fmt::format("trial {}: {} — {} tokens/s, {} MiB", t.id, t.change,
                                          fixed(t.tokens_per_s, 0), mib(t.mem_peak));
    Series& s = t.id == r.best_trial ? best : all;
    s.points.push_back(p);
    s.point_titles.push_back(title);
  }
  if (all.points.empty() && best.points.empty()) {
    return "<p class=\"muted\">No successful trials to plot.</p>\n";
  }
  bool any_memory = false;
  for (const Series* s : {&all, &best})
    for (const auto& p : s->points) any_memory |= p.first > 0;
  if (!any_memory) {
    return "<p class=\"muted\">No trial recorded its peak memory (the program reports none): "
           "nothing to plot throughput against.</p>\n";
  }
  for (int id : r.pareto_front) {
    if (const SweepTrial* t = trial_at(r, id)) {
      front.points.emplace_back(t->mem_peak / kMiB, t->tokens_per_s);
    }
  }
  std::vector<Series> series{all, front};
  if (!best.points.empty()) series.push_back(best);
  return line_svg("ft-sweep-throughput", series, "peak memory (MiB)", AxisUnit::kPlain);
}

// The verification runs' loss curves over tokens: the baseline's, accepted and rejected ones.
std::string curves_html(const SweepReport& r) {
  static const char* kColours[] = {"#4e79a7", "#59a14f", "#b07aa1", "#9c755f", "#76b7b2"};
  std::vector<Series> series;
  std::string list;
  int n = 0;
  const SweepTrial* baseline = nullptr;
  for (const auto& t : r.trials)
    if (t.kind == SweepTrialKind::kVerifyBaseline && !t.losses.empty()) baseline = &t;
  for (const auto& t : r.trials) {
    const bool base = t.kind == SweepTrialKind::kVerifyBaseline;
    if ((!base && t.kind != SweepTrialKind::kVerify) || t.losses.empty()) continue;
    const bool rejected = failed(t);
    Series s{base       ? fmt::format("baseline (trial {})", t.id)
             : rejected ? fmt::format("trial {} (rejected)", t.id)
                        : fmt::format("trial {} (accepted)", t.id),
             base       ? "#1d2330"
             : rejected ? "#e15759"
                        : kColours[n++ % 5],
             {}};
    s.dashed = rejected;
    for (size_t i = 0; i < t.losses.size() && i < t.tokens.size(); ++i) {
      s.points.emplace_back(t.tokens[i], std::min(t.losses[i], kLossCap));
    }
    // A curve drawn exactly over the baseline's would hide it: say so.
    const bool same =
        !base && baseline && baseline->losses == t.losses && baseline->tokens == t.tokens;
    list +=
        fmt::format("<li>{}: {}{}{}</li>", h(s.name), h(base ? "baseline" : t.change),
                    rejected && !t.reason.empty() ? " — " + h(t.reason) : "",
                    same ? " — the same loss as the baseline at every point (drawn over it)" : "");
    series.push_back(std::move(s));
  }
  if (series.empty()) return "<p class=\"muted\">No verification runs.</p>\n";
  return line_svg("ft-sweep-curves", series, "tokens", AxisUnit::kPlain) + "<ul>" + list +
         "</ul>\n";
}

std::string confirmation_html(const SweepReport& r) {
  if (r.confirmation.empty()) return "";
  std::string s =
      "<section id=\"confirmation\"><h2>Confirmation round (side by side, alternating "
      "order)</h2>\n<table><tr><th>configuration</th><th class=\"n\">median tokens/s</th>"
      "<th class=\"n\">median ratio to baseline</th><th>per-round ratios</th>"
      "<th>beats the baseline</th></tr>\n";
  for (const auto& row : r.confirmation) {
    s += fmt::format(
        "<tr><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td>{}</td><td>{}</td>"
        "</tr>\n",
        h(row.change), fixed(row.median_tps, 0), ratio_text(row), ratios_text(row),
        row.beats_baseline ? "yes" : "no");
  }
  return s + "</table></section>\n";
}

std::string trials_html(const SweepReport& r) {
  std::string s =
      "<section id=\"trials\"><h2>Trials</h2>\n<table><tr><th class=\"n\">id</th><th>phase</th>"
      "<th>change</th><th>status</th><th class=\"n\">tokens/s</th><th class=\"n\">step "
      "spread</th><th class=\"n\">peak MiB</th><th class=\"n\">predicted MiB</th>"
      "<th class=\"n\">final loss</th><th>reason</th></tr>\n";
  for (const auto& t : r.trials) {
    s += fmt::format(
        "<tr class=\"st-{}\"><td class=\"n\">{}</td><td>{}</td><td>{}</td><td>{}</td>"
        "<td class=\"n\">{}</td><td class=\"n\">{}%</td><td class=\"n\">{}</td>"
        "<td class=\"n\">{}</td><td class=\"n\">{}</td><td>{}</td></tr>\n",
        h(t.status), t.id, h(t.phase), h(t.change), h(t.status), fixed(t.tokens_per_s, 0),
        fixed(100 * t.step_tps_spread, 0), mib(t.mem_peak), mib(t.predicted_mem),
        fixed(t.final_loss, 4), h(t.reason));
  }
  return s + "</table></section>\n";
}

}  // namespace

std::map<std::string, std::pair<double, int>> prediction_errors(const SweepReport& r) {
  std::map<std::string, std::vector<double>> by;
  for (const auto& p : r.predictions) by[p.cls].push_back(std::fabs(p.error));
  std::map<std::string, std::pair<double, int>> out;
  for (auto& [cls, v] : by) {
    std::sort(v.begin(), v.end());
    const size_t n = v.size();
    out[cls] = {n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2, static_cast<int>(n)};
  }
  return out;
}

namespace {

std::string guided_saving_text(const SweepReport& r) {
  return fmt::format(
      "guided ran {} trials; a grid over the same space runs {} configurations, "
      "one short trial each, before any verification or confirmation",
      r.trials_run, r.grid_size);
}

std::string predictions_markdown(const SweepReport& r) {
  if (r.predictions.empty()) return "";
  std::string s =
      "## Predictions checked (each finding's predicted step against its knob's side-by-side "
      "measurement)\n\n| round | finding | class | knob | predicted ms/step | measured ms/step | "
      "error |\n|---|---|---|---|---|---|---|\n";
  for (const auto& p : r.predictions) {
    s += fmt::format("| {} | {} | {} | {} | {} | {} | {:+.1f}% |\n", p.round, md(p.finding),
                     md(p.cls), md(p.knob), fixed(p.predicted_step_ms, 2),
                     fixed(p.measured_step_ms, 2), 100 * p.error);
  }
  s += "\nMedian |error| by class:";
  for (const auto& [cls, e] : prediction_errors(r))
    s += fmt::format(" {} {:.1f}% (n={});", md(cls), 100 * e.first, e.second);
  s.back() = '\n';
  return s + "\n";
}

std::string predictions_html(const SweepReport& r) {
  if (r.predictions.empty()) return "";
  std::string out =
      "<section id=\"predictions\"><h2>Predictions checked</h2>\n<table><tr><th>round</th>"
      "<th>finding</th><th>class</th><th>knob</th><th class=\"n\">predicted ms/step</th>"
      "<th class=\"n\">measured ms/step</th><th class=\"n\">error</th></tr>\n";
  for (const auto& p : r.predictions) {
    out += fmt::format(
        "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"n\">{}</td><td "
        "class=\"n\">{}</td><td class=\"n\">{:+.1f}%</td></tr>\n",
        p.round, h(p.finding), h(p.cls), h(p.knob), fixed(p.predicted_step_ms, 2),
        fixed(p.measured_step_ms, 2), 100 * p.error);
  }
  out += "</table>\n<p>Median |error| by class:";
  for (const auto& [cls, e] : prediction_errors(r))
    out += fmt::format(" {} {:.1f}% (n={});", h(cls), 100 * e.first, e.second);
  return out + "</p></section>\n";
}

}  // namespace

json sweep_report_json(const SweepReport& r) {
  json j;
  j["strategy"] = r.strategy;
  j["seed"] = r.seed;
  j["baseline"] = r.baseline;
  j["best"] = r.best;
  j["best_change"] = r.best_change;
  j["baseline_trial"] = r.baseline_trial;
  j["best_trial"] = r.best_trial;
  if (r.baseline_tokens_per_s) j["baseline_tokens_per_s"] = *r.baseline_tokens_per_s;
  if (r.best_tokens_per_s) j["best_tokens_per_s"] = *r.best_tokens_per_s;
  j["speedup"] = r.speedup;
  j["speedup_basis"] = r.speedup_basis;
  if (!r.fitted_to_memory.empty()) j["fitted_to_memory"] = r.fitted_to_memory;
  j["confirmed_ratio"] = r.confirmed_ratio;
  j["confirmation"] = confirmation_json(r);
  j["stop_reason"] = r.stop_reason;
  j["trials_run"] = r.trials_run;
  j["diagnoses"] = r.diagnoses;
  j["trial_time_s"] = r.trial_time_s;
  j["verification_rules"] = r.verification_rules;
  j["baseline_verify"] = r.baseline_verify;
  j["accepted_verifies"] = r.accepted_verifies;
  j["best_verify"] = r.best_verify;
  if (r.baseline_verify_final_loss) j["baseline_verify_final_loss"] = *r.baseline_verify_final_loss;
  if (r.verified) {
    j["verified"] = {{"baseline_smoothed_loss", r.verified->baseline_smoothed_loss},
                     {"best_smoothed_loss", r.verified->best_smoothed_loss},
                     {"limit", r.verified->limit},
                     {"accepted", r.verified->accepted}};
  }
  j["trials"] = json::array();
  for (const auto& t : r.trials) j["trials"].push_back(t.record);
  j["decisions"] = json::array();
  for (const auto& d : r.decisions) {
    j["decisions"].push_back(
        {{"round", d.round}, {"kind", d.kind}, {"text", d.text}, {"trials", d.trials}});
  }
  j["pareto_front"] = r.pareto_front;
  j["predictions"] = json::array();
  for (const auto& p : r.predictions) {
    j["predictions"].push_back({{"round", p.round},
                                {"class", p.cls},
                                {"finding", p.finding},
                                {"knob", p.knob},
                                {"predicted_step_ms", p.predicted_step_ms},
                                {"measured_step_ms", p.measured_step_ms},
                                {"error", p.error},
                                {"trials", p.trials}});
  }
  j["prediction_median_abs_error"] = json::object();
  for (const auto& [cls, e] : prediction_errors(r))
    j["prediction_median_abs_error"][cls] = {{"median", e.first}, {"n", e.second}};
  j["grid_size"] = r.grid_size;
  return j;
}

std::string render_sweep_json(const SweepReport& r) {
  return sweep_report_json(r).dump(1, ' ', false, json::error_handler_t::replace) + "\n";
}

std::string render_sweep_markdown(const SweepReport& r) {
  std::string s = fmt::format("# ft-tune sweep ({})\n\n", md(r.strategy));
  s += fmt::format("- best: **{}** ({}x the baseline's throughput; {})\n", md(r.best_change),
                   fixed(r.speedup, 2), md(r.speedup_basis));
  if (!r.fitted_to_memory.empty()) {
    s += fmt::format("- the requested baseline is predicted over the memory limit; fitted: **{}**\n",
                     md(r.fitted_to_memory));
  }
  s += fmt::format("- trials run: {} ({} s of trial time), diagnoses: {}, seed {}\n", r.trials_run,
                   fixed(r.trial_time_s, 1), r.diagnoses, r.seed);
  s += fmt::format("- stopped: {}\n", md(r.stop_reason));
  s += fmt::format("- verification: {}\n", md(r.verification_rules));
  if (r.grid_size > 0) s += fmt::format("- {}\n", md(guided_saving_text(r)));
  s += "\n";
  if (!r.confirmation.empty()) {
    s += "## Confirmation round (side by side, alternating order)\n\n| configuration | median "
         "tokens/s | median ratio to baseline | per-round ratios | beats the baseline |\n"
         "|---|---|---|---|---|\n";
    for (const auto& row : r.confirmation) {
      s += fmt::format("| {} | {} | {} | {} | {} |\n", md(row.change), fixed(row.median_tps, 0),
                       ratio_text(row), ratios_text(row), row.beats_baseline ? "yes" : "no");
    }
    s += "\n";
  }
  s += predictions_markdown(r);
  s += markdown_trials(r);
  s += "\n## Pareto front (throughput vs peak memory)\n\n";
  if (r.pareto_front.empty()) s += "- none: no trial recorded its peak memory\n";
  for (int id : r.pareto_front) {
    if (const SweepTrial* t = trial_at(r, id)) {
      s += fmt::format("- trial {}: {} — {} tokens/s at {} MiB\n", t->id, md(t->change),
                       fixed(t->tokens_per_s, 0), mib(t->mem_peak));
    }
  }
  s += "\n## Decisions\n\n";
  for (const auto& d : r.decisions) {
    const std::string ids = ids_text(d.trials);
    s += fmt::format("- [round {}] {}: {}{}\n", d.round, md(d.kind), md(d.text),
                     ids.empty() ? "" : " (trials " + ids + ")");
  }
  return s;
}

std::string render_sweep_html(const SweepReport& r) {
  std::string out = detail::html_head("ft-tune sweep", "", kSweepStyle);
  out += "</head>\n<body>\n";
  out +=
      fmt::format("<header><h1>ft-tune sweep</h1><p>strategy {} · seed {}</p></header>\n<main>\n",
                  h(r.strategy), r.seed);
  out += "<section id=\"summary\"><h2>Summary</h2><div class=\"cards\">";
  out += html_card("best", r.best_change);
  out += html_card("speed-up", fixed(r.speedup, 2) + "x");
  out += html_card("trials run", std::to_string(r.trials_run));
  out += html_card("diagnoses", std::to_string(r.diagnoses));
  out += html_card("trial time", fixed(r.trial_time_s, 1) + " s");
  out += "</div>\n";
  out += fmt::format("<p>Speed-up measured by: {}.</p>\n<p><b>Stopped:</b> {}</p>\n",
                     h(r.speedup_basis), h(r.stop_reason));
  if (!r.fitted_to_memory.empty()) {
    out += fmt::format(
        "<p><b>Fitted to memory:</b> the requested baseline is predicted over the memory limit; "
        "the baseline is {}.</p>\n",
        h(r.fitted_to_memory));
  }
  out += fmt::format("<p><b>Verification:</b> {}</p>", h(r.verification_rules));
  if (r.grid_size > 0) out += fmt::format("<p>{}.</p>", h(guided_saving_text(r)));
  out += "</section>\n";
  out += "<section id=\"throughput\"><h2>Throughput vs peak memory</h2>\n" + scatter_html(r) +
         "</section>\n";
  out += "<section id=\"curves\"><h2>Loss curves of the verification runs</h2>\n" + curves_html(r) +
         "</section>\n";
  out += confirmation_html(r);
  out += predictions_html(r);
  out += "<section id=\"decisions\"><h2>Decisions</h2>\n<ol>\n";
  for (const auto& d : r.decisions) {
    const std::string ids = ids_text(d.trials);
    out += fmt::format("<li>[round {}] <b>{}</b>: {}{}</li>\n", d.round, h(d.kind), h(d.text),
                       ids.empty() ? "" : " (trials " + ids + ")");
  }
  out += "</ol></section>\n";
  out += trials_html(r);
  out += "</main>\n</body>\n</html>\n";
  return out;
}

}  // namespace ft::reports
