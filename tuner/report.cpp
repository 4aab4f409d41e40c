// report.cpp: best.cfg and the sweep report in Markdown, self-contained HTML (inline SVG) and JSON.
#include "ft/tuner/report.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "ft/core/atomic_file.h"

namespace ft::tuner {
using nlohmann::json;

namespace {

bool is_short(const JournalEntry& e) {
  return e.phase == "baseline" || e.phase == "trial" || e.phase == "grid" || e.phase == "repeat" ||
         e.phase == "confirm";
}

double mib(double b) { return b / 1048576.0; }

const JournalEntry* at(const SweepOutcome& o, int id) {
  return id >= 0 && id < static_cast<int>(o.trials.size()) ? &o.trials[static_cast<size_t>(id)]
                                                           : nullptr;
}

// The best configuration's throughput over the baseline's: the confirmation round's median
// ratio when one chose it, else the ratio of the two short trials.
double speedup(const SweepOutcome& o) {
  if (o.confirmed_ratio > 0) return o.confirmed_ratio;
  const JournalEntry* b = at(o, o.baseline_trial);
  const JournalEntry* t = at(o, o.best_trial);
  return b && t && b->result.tokens_per_s > 0 ? t->result.tokens_per_s / b->result.tokens_per_s : 1;
}

const char* speedup_basis(const SweepOutcome& o) {
  return o.confirmed_ratio > 0 ? "median ratio in the confirmation round"
                               : "short trials, unconfirmed";
}

std::string ratios_text(const ConfirmRow& row) {
  std::string s;
  for (double x : row.ratios) s += fmt::format("{}{:.3f}", s.empty() ? "" : " ", x);
  return s.empty() ? "-" : s;
}

std::string md_cell(std::string s) {
  for (char& c : s) {
    if (c == '|' || c == '\n') c = ' ';
  }
  return s;
}

// Escapes text for inclusion in SVG/HTML; numbers are formatted, never raw user text.
std::string esc(const std::string& s) { return html_escape(s); }

}  // namespace

std::string html_escape(const std::string& s) {
  std::string o;
  o.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&':
        o += "&amp;";
        break;
      case '<':
        o += "&lt;";
        break;
      case '>':
        o += "&gt;";
        break;
      case '"':
        o += "&quot;";
        break;
      case '\'':
        o += "&#39;";
        break;
      default:
        o += c;
    }
  }
  return o;
}

std::vector<int> pareto_front(const std::vector<JournalEntry>& trials) {
  std::vector<int> ok;
  for (size_t i = 0; i < trials.size(); ++i) {
    const auto& e = trials[i];
    if (is_short(e) && e.result.status == TrialStatus::kOk && e.result.mem_peak > 0) {
      ok.push_back(static_cast<int>(i));
    }
  }
  std::vector<int> front;
  for (int i : ok) {
    const auto& a = trials[static_cast<size_t>(i)].result;
    bool dominated = false;
    for (int j : ok) {
      const auto& b = trials[static_cast<size_t>(j)].result;
      if (j != i && b.tokens_per_s >= a.tokens_per_s && b.mem_peak <= a.mem_peak &&
          (b.tokens_per_s > a.tokens_per_s || b.mem_peak < a.mem_peak)) {
        dominated = true;
        break;
      }
    }
    if (!dominated) front.push_back(i);
  }
  std::sort(front.begin(), front.end(), [&](int x, int y) {
    return trials[static_cast<size_t>(x)].result.mem_peak <
           trials[static_cast<size_t>(y)].result.mem_peak;
  });
  return front;
}

json report_json(const SweepOutcome& o, const SweepOptions& opt) {
  json j;
  j["strategy"] = o.strategy;
  j["seed"] = opt.seed;
  j["baseline"] = o.baseline;
  j["best"] = o.best;
  j["best_change"] = describe_diff(o.baseline, o.best);
  j["baseline_trial"] = o.baseline_trial;
  j["best_trial"] = o.best_trial;
  if (const auto* b = at(o, o.baseline_trial)) j["baseline_tokens_per_s"] = b->result.tokens_per_s;
  if (const auto* t = at(o, o.best_trial)) j["best_tokens_per_s"] = t->result.tokens_per_s;
  j["speedup"] = speedup(o);
  j["speedup_basis"] = speedup_basis(o);
  j["confirmed_ratio"] = o.confirmed_ratio;
  j["confirmation"] = json::array();
  for (const auto& row : o.confirmation) {
    j["confirmation"].push_back({{"change", row.change},
                                 {"config", row.knobs},
                                 {"trials", row.trials},
                                 {"tokens_per_s", row.tokens_per_s},
                                 {"ratios", row.ratios},
                                 {"median_tokens_per_s", row.median_tps},
                                 {"median_ratio", row.median_ratio},
                                 {"ratio_spread", row.ratio_spread},
                                 {"beats_baseline", row.beats_baseline}});
  }
  j["stop_reason"] = o.stop_reason;
  j["trials_run"] = o.trials_run;
  j["diagnoses"] = o.diagnoses;
  j["trial_time_s"] = o.spent_s;
  j["verification_rules"] = describe_rules(opt.verify);
  j["baseline_verify"] = o.baseline_verify;
  j["accepted_verifies"] = o.accepted_verifies;
  j["best_verify"] = o.best_verify;
  if (const auto* bv = at(o, o.baseline_verify)) {
    j["baseline_verify_final_loss"] = bv->result.final_loss;
    if (const auto* v = at(o, o.best_verify)) {
      const VerifyResult r = verify_curve(Curve{bv->result.tokens, bv->result.losses},
                                          Curve{v->result.tokens, v->result.losses}, opt.verify);
      j["verified"] = {{"baseline_smoothed_loss", r.base_final},
                       {"best_smoothed_loss", r.cand_final},
                       {"limit", r.limit},
                       {"accepted", r.accepted}};
    }
  }
  j["trials"] = json::array();
  for (const auto& e : o.trials) j["trials"].push_back(entry_to_json(e));
  j["decisions"] = json::array();
  for (const auto& d : o.decisions) {
    j["decisions"].push_back(
        {{"round", d.round}, {"kind", d.kind}, {"text", d.text}, {"trials", d.trials}});
  }
  j["pareto_front"] = pareto_front(o.trials);
  return j;
}

std::string report_markdown(const SweepOutcome& o, const SweepOptions& opt) {
  std::string s = fmt::format("# ft-tune sweep ({})\n\n", o.strategy);
  s += fmt::format("- best: **{}** ({:.2f}x the baseline's throughput; {})\n",
                   md_cell(describe_diff(o.baseline, o.best)), speedup(o), speedup_basis(o));
  s += fmt::format("- trials run: {} ({:.1f} s of trial time), diagnoses: {}, seed {}\n",
                   o.trials_run, o.spent_s, o.diagnoses, opt.seed);
  s += fmt::format("- stopped: {}\n", md_cell(o.stop_reason));
  s += fmt::format("- verification: {}\n\n", describe_rules(opt.verify));
  if (!o.confirmation.empty()) {
    s += "## Confirmation round (side by side, alternating order)\n\n| configuration | median "
         "tokens/s | median ratio to baseline | per-round ratios | beats the baseline |\n"
         "|---|---|---|---|---|\n";
    for (const auto& row : o.confirmation) {
      s += fmt::format("| {} | {:.0f} | {:.3f} | {} | {} |\n", md_cell(row.change), row.median_tps,
                       row.median_ratio, ratios_text(row), row.beats_baseline ? "yes" : "no");
    }
    s += "\n";
  }
  s += "## Trials\n\n(tokens/s: the measured steps' tokens over their time; step spread: "
       "interquartile range of the per-step rates over their median)\n\n| id | phase | change | "
       "status | tokens/s | step spread | peak MiB | predicted MiB | final loss | reason |\n"
       "|---|---|---|---|---|---|---|---|---|---|\n";
  for (const auto& e : o.trials) {
    const auto& r = e.result;
    s += fmt::format("| {} | {} | {} | {} | {:.0f} | {:.0f}% | {:.1f} | {:.1f} | {:.4f} | {} |\n",
                     e.id, e.phase, md_cell(e.change), trial_status_name(r.status), r.tokens_per_s,
                     100 * r.step_tps_spread, mib(r.mem_peak), mib(e.predicted_mem), r.final_loss,
                     md_cell(r.reason));
  }
  s += "\n## Pareto front (throughput vs peak memory)\n\n";
  for (int i : pareto_front(o.trials)) {
    const auto& e = o.trials[static_cast<size_t>(i)];
    s += fmt::format("- trial {}: {} — {:.0f} tokens/s at {:.1f} MiB\n", e.id, md_cell(e.change),
                     e.result.tokens_per_s, mib(e.result.mem_peak));
  }
  s += "\n## Decisions\n\n";
  for (const auto& d : o.decisions) {
    std::string ids;
    for (int t : d.trials) ids += fmt::format("{}{}", ids.empty() ? "" : ",", t);
    s += fmt::format("- [round {}] {}: {}{}\n", d.round, d.kind, md_cell(d.text),
                     ids.empty() ? "" : " (trials " + ids + ")");
  }
  return s;
}

namespace {

struct Axis {
  double lo = 0, hi = 1;
  void fit(double v) {
    if (!std::isfinite(v)) return;
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
};

std::string scatter_svg(const SweepOutcome& o) {
  const double W = 640, H = 360, L = 70, B = 40;
  Axis x{1e300, -1e300}, y{0, -1e300};
  for (const auto& e : o.trials) {
    if (!is_short(e) || e.result.status != TrialStatus::kOk) continue;
    x.fit(mib(e.result.mem_peak));
    y.fit(e.result.tokens_per_s);
  }
  if (x.lo > x.hi) return "<p>No successful trials to plot.</p>";
  if (x.hi - x.lo < 1e-9) {
    x.lo -= 1;
    x.hi += 1;
  }
  y.hi = y.hi * 1.05 + 1;
  const auto px = [&](double v) { return L + (v - x.lo) / (x.hi - x.lo) * (W - L - 20); };
  const auto py = [&](double v) { return H - B - (v - y.lo) / (y.hi - y.lo) * (H - B - 20); };
  std::string s =
      fmt::format("<svg xmlns='http://www.w3.org/2000/svg' width='{}' height='{}'>", W, H);
  s +=
      fmt::format("<line x1='{}' y1='{}' x2='{}' y2='{}' stroke='#000'/>", L, H - B, W - 10, H - B);
  s += fmt::format("<line x1='{}' y1='20' x2='{}' y2='{}' stroke='#000'/>", L, L, H - B);
  s += fmt::format("<text x='{}' y='{}' font-size='12'>peak memory (MiB) {:.1f} .. {:.1f}</text>",
                   L, H - 10, x.lo, x.hi);
  s += fmt::format("<text x='5' y='15' font-size='12'>tokens/s (max {:.0f})</text>", y.hi);
  std::string line;
  for (int i : pareto_front(o.trials)) {
    const auto& r = o.trials[static_cast<size_t>(i)].result;
    line += fmt::format("{:.1f},{:.1f} ", px(mib(r.mem_peak)), py(r.tokens_per_s));
  }
  s += "<polyline fill='none' stroke='#d62728' stroke-width='2' points='" + line + "'/>";
  for (const auto& e : o.trials) {
    if (!is_short(e) || e.result.status != TrialStatus::kOk) continue;
    const bool best = e.id == o.best_trial;
    s += fmt::format("<circle cx='{:.1f}' cy='{:.1f}' r='{}' fill='{}'><title>{}</title></circle>",
                     px(mib(e.result.mem_peak)), py(e.result.tokens_per_s), best ? 6 : 4,
                     best ? "#2ca02c" : "#1f77b4",
                     esc(fmt::format("trial {}: {} — {:.0f} tokens/s, {:.1f} MiB", e.id, e.change,
                                     e.result.tokens_per_s, mib(e.result.mem_peak))));
  }
  return s + "</svg>";
}

std::string curves_svg(const SweepOutcome& o) {
  std::vector<const JournalEntry*> shown;
  for (const auto& e : o.trials) {
    if ((e.phase == "verify" || e.phase == "verify-baseline") && !e.result.losses.empty()) {
      shown.push_back(&e);
    }
  }
  if (shown.empty()) return "<p>No verification runs.</p>";
  const double W = 640, H = 360, L = 70, B = 40;
  Axis x{0, -1e300}, y{1e300, -1e300};
  for (const auto* e : shown) {
    for (size_t i = 0; i < e->result.losses.size(); ++i) {
      x.fit(e->result.tokens[i]);
      if (std::isfinite(e->result.losses[i])) y.fit(std::min(e->result.losses[i], 20.0));
    }
  }
  if (y.lo > y.hi) {
    y.lo = 0;
    y.hi = 1;
  }
  if (x.hi <= x.lo) x.hi = x.lo + 1;
  if (y.hi - y.lo < 1e-9) y.hi = y.lo + 1;
  const auto px = [&](double v) { return L + (v - x.lo) / (x.hi - x.lo) * (W - L - 20); };
  const auto py = [&](double v) {
    return H - B - (std::min(v, 20.0) - y.lo) / (y.hi - y.lo) * (H - B - 20);
  };
  std::string s =
      fmt::format("<svg xmlns='http://www.w3.org/2000/svg' width='{}' height='{}'>", W, H);
  s +=
      fmt::format("<line x1='{}' y1='{}' x2='{}' y2='{}' stroke='#000'/>", L, H - B, W - 10, H - B);
  s += fmt::format("<line x1='{}' y1='20' x2='{}' y2='{}' stroke='#000'/>", L, L, H - B);
  s += fmt::format("<text x='{}' y='{}' font-size='12'>tokens {:.0f} .. {:.0f}</text>", L, H - 10,
                   x.lo, x.hi);
  s += fmt::format("<text x='5' y='15' font-size='12'>loss {:.2f} .. {:.2f}</text>", y.lo, y.hi);
  static const char* kColors[] = {"#1f77b4", "#2ca02c", "#9467bd", "#8c564b", "#17becf"};
  int n = 0, row = 0;
  for (const auto* e : shown) {
    const bool base = e->phase == "verify-baseline";
    const bool rejected = e->result.status != TrialStatus::kOk;
    const std::string color = base ? "#000" : rejected ? "#d62728" : kColors[n++ % 5];
    std::string pts;
    for (size_t i = 0; i < e->result.losses.size(); ++i) {
      if (!std::isfinite(e->result.losses[i])) break;
      pts += fmt::format("{:.1f},{:.1f} ", px(e->result.tokens[i]), py(e->result.losses[i]));
    }
    const std::string label = fmt::format("trial {}: {}{}", e->id, base ? "baseline" : e->change,
                                          rejected ? " (rejected)" : " (accepted)");
    s += fmt::format(
        "<polyline fill='none' stroke='{}' stroke-width='1.5'{} points='{}'><title>{}"
        "</title></polyline>",
        color, rejected ? " stroke-dasharray='4 3'" : "", pts, esc(label));
    s += fmt::format("<text x='{}' y='{}' font-size='11' fill='{}'>{}</text>", W - 300,
                     30 + 14 * row++, color, esc(label));
  }
  return s + "</svg>";
}

}  // namespace

std::string report_html(const SweepOutcome& o, const SweepOptions& opt) {
  std::string s =
      "<!DOCTYPE html><html><head><meta charset='utf-8'><title>ft-tune sweep</title>"
      "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}"
      "td,th{border:1px solid #ccc;padding:2px 6px;font-size:13px}"
      ".rejected,.oom,.crash,.timeout{color:#b00}</style></head><body>";
  s += "<h1>ft-tune sweep (" + esc(o.strategy) + ")</h1><ul>";
  s += "<li>best: <b>" + esc(describe_diff(o.baseline, o.best)) +
       fmt::format("</b> ({:.2f}x the baseline's throughput; {})</li>", speedup(o),
                   speedup_basis(o));
  s += fmt::format("<li>trials run: {} ({:.1f} s), diagnoses: {}, seed {}</li>", o.trials_run,
                   o.spent_s, o.diagnoses, opt.seed);
  s += "<li>stopped: " + esc(o.stop_reason) + "</li>";
  s += "<li>verification: " + esc(describe_rules(opt.verify)) + "</li></ul>";
  s += "<h2>Throughput vs peak memory (red: Pareto front, green: best)</h2>" + scatter_svg(o);
  s += "<h2>Loss curves of the verification runs (black: baseline; dashed red: rejected)</h2>" +
       curves_svg(o);
  if (!o.confirmation.empty()) {
    s += "<h2>Confirmation round (side by side, alternating order)</h2><table><tr>"
         "<th>configuration</th><th>median tokens/s</th><th>median ratio to baseline</th>"
         "<th>per-round ratios</th><th>beats the baseline</th></tr>";
    for (const auto& row : o.confirmation) {
      s += fmt::format("<tr><td>{}</td><td>{:.0f}</td><td>{:.3f}</td><td>{}</td><td>{}</td></tr>",
                       esc(row.change), row.median_tps, row.median_ratio, ratios_text(row),
                       row.beats_baseline ? "yes" : "no");
    }
    s += "</table>";
  }
  s += "<h2>Decisions</h2><ol>";
  for (const auto& d : o.decisions) {
    s += fmt::format("<li>[round {}] <b>{}</b>: {}</li>", d.round, esc(d.kind), esc(d.text));
  }
  s += "</ol><h2>Trials</h2><table><tr><th>id</th><th>phase</th><th>change</th><th>status</th>"
       "<th>tokens/s</th><th>peak MiB</th><th>predicted MiB</th><th>final "
       "loss</th><th>reason</th></tr>";
  for (const auto& e : o.trials) {
    const auto& r = e.result;
    s += fmt::format(
        "<tr class='{}'><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{:.0f}</td>"
        "<td>{:.1f}</td><td>{:.1f}</td><td>{:.4f}</td><td>{}</td></tr>",
        trial_status_name(r.status), e.id, esc(e.phase), esc(e.change), trial_status_name(r.status),
        r.tokens_per_s, mib(r.mem_peak), mib(e.predicted_mem), r.final_loss, esc(r.reason));
  }
  return s + "</table></body></html>\n";
}

void write_outputs(const std::filesystem::path& dir, const SweepOutcome& o,
                   const SweepOptions& opt) {
  write_file_atomic(dir / "best.cfg", config_file_text(o.best));
  write_file_atomic(dir / "report.json", report_json(o, opt).dump(1) + "\n");
  write_file_atomic(dir / "report.md", report_markdown(o, opt));
  write_file_atomic(dir / "report.html", report_html(o, opt));
}

}  // namespace ft::tuner
