// html_report.cpp: report.html, one self-contained offline page with inline SVG charts.
#include <fmt/format.h>

#include <cmath>
#include <string>

#include "format.h"
#include "ft/core/atomic_file.h"
#include "ft/reports/report.h"
#include "svg_charts.h"

namespace ft::reports {
namespace {

using detail::abbreviated_rows;
using detail::AxisUnit;
using detail::breakdown_svg;
using detail::bytes_h;
using detail::class_colour;
using detail::fixed;
using detail::html_card;
using detail::known_percent;
using detail::line_svg;
using detail::percent;
using detail::render_json_compact;
using detail::RunSummary;
using detail::Series;
using detail::step_ranges;
using detail::summarize;
using profiler::Diagnosis;
using profiler::kNumWaitClasses;
using profiler::WaitClass;

constexpr size_t kStepRowLimit = 60;

std::string h(std::string_view s) { return html_escape(s); }

const char* kStyle = R"css(
:root{--fg:#1d2330;--muted:#5b6475;--bg:#f6f7f9;--card:#fff;--line:#d9dde5}
*{box-sizing:border-box}
body{margin:0;font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:var(--fg);background:var(--bg)}
header{background:#1d2330;color:#fff;padding:18px 28px}
header h1{margin:0;font-size:22px}
header p{margin:4px 0 0;color:#c6cbd6}
main{max-width:1100px;margin:0 auto;padding:12px 20px 40px}
section{background:var(--card);border:1px solid var(--line);border-radius:8px;padding:14px 18px;margin:14px 0}
h2{font-size:17px;margin:0 0 10px}
.cards{display:flex;flex-wrap:wrap;gap:10px}
.card{flex:1 1 160px;border:1px solid var(--line);border-radius:6px;padding:8px 12px;background:#fbfcfd}
.card .k{color:var(--muted);font-size:12px}.card .v{font-size:20px;font-weight:600}
table{border-collapse:collapse;font-size:13px;margin:6px 0}
th,td{border-bottom:1px solid var(--line);padding:3px 8px;text-align:left}
td.n,th.n{text-align:right;font-variant-numeric:tabular-nums}
.swatch{display:inline-block;width:11px;height:11px;border-radius:2px;margin-right:5px;vertical-align:-1px}
.legend-row{display:flex;flex-wrap:wrap;gap:12px;margin:6px 0;font-size:13px}
svg.chart{display:block;max-width:100%;height:auto;background:#fff}
svg .grid{stroke:#e6e9ef;stroke-width:1}svg .axis{stroke:#8a93a5;stroke-width:1}
svg .tick,svg .legend{font-size:11px;fill:#5b6475}svg .caption{font-size:12px;fill:#1d2330}
svg .nan{stroke:#d62728;stroke-width:2}
svg .bar:hover rect{opacity:.75}
.finding{border-left:5px solid #8a93a5;padding:8px 12px;margin:10px 0;background:#fbfcfd;border-radius:4px}
.finding.critical{border-color:#d62728}.finding.warning{border-color:#f28e2b}.finding.info{border-color:#4e79a7}
.finding h3{margin:0 0 4px;font-size:15px}
.badge{display:inline-block;font-size:11px;padding:1px 6px;border-radius:8px;background:#e6e9ef;margin-right:6px;text-transform:uppercase}
.finding.critical .badge.sev{background:#fbd5d5}.finding.warning .badge.sev{background:#fde3c8}
code{background:#eef0f4;padding:1px 4px;border-radius:3px}
.muted{color:var(--muted)}
#ft-readout{min-height:1.5em;font-size:13px;color:var(--muted);white-space:pre-wrap}
)css";

// Hooks run before anything else: script errors and alert() calls are recorded on <html>
// (data-ft-error / data-ft-alert) so a headless check can see that nothing went wrong.
const char* kHookScript = R"js(
(function(){var r=document.documentElement;
window.addEventListener('error',function(e){r.setAttribute('data-ft-error',String(e.message||e));});
window.alert=function(m){r.setAttribute('data-ft-alert',String(m));};})();
)js";

// Reads the embedded report JSON, checks it, and shows per-step details on hover / click.
const char* kMainScript = R"js(
(function(){'use strict';
var root=document.documentElement;
var data=JSON.parse(document.getElementById('ft-report-data').textContent);
if(data.format!=='ft-report'||!Array.isArray(data.steps))throw new Error('ft report data missing');
var classes=['compute','data','pcie','comm','memory','host','sync','other'];
var readout=document.getElementById('ft-readout');
function show(first,last){
  var n=last-first+1,wall=0,sums=classes.map(function(){return 0;});
  for(var i=first;i<=last;i++){var s=data.steps[i];wall+=s.wall_ms||0;
    classes.forEach(function(c,k){sums[k]+=s.breakdown[c]||0;});}
  var head=n===1?'step '+data.steps[first].step:'steps '+data.steps[first].step+'-'+data.steps[last].step+' (mean)';
  var parts=classes.map(function(c,k){return c+' '+(sums[k]/n).toFixed(2)+' ms';});
  readout.textContent=head+': '+(wall/n).toFixed(2)+' ms = '+parts.join(', ');
}
var bars=document.querySelectorAll('#ft-breakdown-chart .bar');
Array.prototype.forEach.call(bars,function(g){
  var a=+g.getAttribute('data-first'),b=+g.getAttribute('data-last');
  if(!(a>=0&&b<data.steps.length))throw new Error('chart bar out of range');
  g.addEventListener('mouseenter',function(){show(a,b);});
  g.addEventListener('click',function(){show(a,b);});
});
var worst=0;
data.steps.forEach(function(s,i){if(s.wall_ms>data.steps[worst].wall_ms)worst=i;});
if(data.steps.length){readout.textContent='slowest: ';show(worst,worst);
  readout.textContent='slowest '+readout.textContent+' (hover a bar for others)';}
root.setAttribute('data-ft-ready',String(data.steps.length));
})();
)js";

std::string map_table(const std::map<std::string, std::string>& m, const char* key) {
  if (m.empty()) return "<p class=\"muted\">(none recorded)</p>\n";
  std::string out = fmt::format("<table><tr><th>{}</th><th>value</th></tr>\n", key);
  for (const auto& [k, v] : m) out += fmt::format("<tr><td>{}</td><td>{}</td></tr>\n", h(k), h(v));
  return out + "</table>\n";
}

std::string findings_html(const Diagnosis& d) {
  if (d.findings.empty()) return "<p class=\"muted\">No findings.</p>\n";
  std::string out;
  int rank = 0;
  for (const auto& f : d.findings) {
    const char* sev = profiler::severity_name(f.severity);
    out += fmt::format(
        "<article class=\"finding {}\"><h3>{}. <span class=\"badge sev\">{}</span>"
        "<span class=\"badge\">{}</span>{}</h3>\n",
        sev, ++rank, sev, h(f.cls), h(f.title));
    if (f.share > 0) {
      out += fmt::format("<p><b>Recoverable:</b> {} of wall time</p>\n", percent(f.share));
    }
    if (f.predicted_step_ms >= 0) {
      out += fmt::format("<p><b>Predicted step:</b> {} ms, assuming {}</p>\n",
                         fixed(f.predicted_step_ms, 2), h(f.prediction));
    }
    if (!f.explanation.empty()) out += fmt::format("<p>{}</p>\n", h(f.explanation));
    const auto& e = f.evidence;
    out += "<ul class=\"evidence\">";
    if (!e.steps.empty()) {
      out += fmt::format("<li>Steps: {}{}</li>", h(step_ranges(e.steps)),
                         e.share > 0 ? " (" + percent(e.share) + " of wall time)" : "");
    }
    if (!e.detail.empty()) out += fmt::format("<li>Detail: {}</li>", h(e.detail));
    for (const auto& x : e.examples) out += fmt::format("<li>Example: <code>{}</code></li>", h(x));
    out += "</ul>\n";
    if (!f.knobs.empty()) {
      out += "<p><b>Knobs:</b>";
      for (const auto& k : f.knobs) out += fmt::format(" <code class=\"knob\">{}</code>", h(k));
      out += "</p>\n";
    }
    out += "</article>\n";
  }
  return out;
}

std::string steps_table(const Diagnosis& d) {
  if (d.steps.empty()) return "<p class=\"muted\">No steps recorded.</p>\n";
  std::string out = "<table><tr><th class=\"n\">step</th><th class=\"n\">wall ms</th>";
  for (int c = 0; c < kNumWaitClasses; ++c) {
    out += fmt::format("<th class=\"n\">{}</th>", profiler::wait_class_name(WaitClass(c)));
  }
  out +=
      "<th class=\"n\">loss</th><th class=\"n\">tokens/s</th><th class=\"n\">allocated</th></tr>\n";
  const auto rows = abbreviated_rows(d.steps.size(), kStepRowLimit);
  for (size_t i = 0; i < rows.size(); ++i) {
    if (i > 0 && rows[i] != rows[i - 1] + 1) {
      out += fmt::format("<tr><td colspan=\"{}\" class=\"muted\">… {} steps omitted …</td></tr>\n",
                         kNumWaitClasses + 5, rows[i] - rows[i - 1] - 1);
    }
    const auto& s = d.steps[rows[i]];
    out += fmt::format("<tr><td class=\"n\">{}</td><td class=\"n\">{}</td>", s.step,
                       fixed(s.wall_ms, 2));
    for (int c = 0; c < kNumWaitClasses; ++c)
      out += fmt::format("<td class=\"n\">{}</td>", fixed(s.ms[c], 2));
    out +=
        fmt::format("<td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td></tr>\n",
                    std::isnan(s.loss) ? "n/a" : fixed(s.loss, 4),
                    s.tokens_per_s > 0 ? fixed(s.tokens_per_s, 0) : std::string("n/a"),
                    bytes_h(s.mem_allocated));
  }
  return out + "</table>\n";
}

// HTA's critical path of the first steady step (imported traces; empty otherwise).
std::string critical_path_html(const Diagnosis& d) {
  const profiler::CriticalPathSummary& cp = d.critical_path;
  if (!cp.computed) return "";
  std::string out = "<section id=\"critical-path\"><h2>Critical path (HTA's analysis)</h2>\n";
  if (!cp.success) return out + "<p>Not available: " + h(cp.error) + "</p></section>\n";
  out += fmt::format(
      "<p>Step {} (instance {} of <code>{}</code> on rank {}): {} µs on the "
      "critical path.</p>\n<table><tr><th>edge type</th><th>µs</th><th>share</th>"
      "</tr>\n",
      cp.step, cp.instance, h(cp.annotation), cp.rank, cp.total_us);
  auto rows = [&](const std::map<std::string, int64_t>& m) {
    for (const auto& [k, v] : m) {
      out += fmt::format("<tr><td>{}</td><td>{}</td><td>{}</td></tr>\n",
                         h(k.empty() ? std::string("(dependency)") : k), v,
                         percent(cp.total_us > 0 ? static_cast<double>(v) / cp.total_us : 0));
    }
  };
  rows(cp.by_type_us);
  out += "</table>\n<table><tr><th>bound by</th><th>µs</th><th>share</th></tr>\n";
  rows(cp.by_bound_us);
  return out + "</table></section>\n";
}

// Multi-rank runs: cross-rank summary and the per-rank table (empty for one rank).
std::string ranks_html(const Diagnosis& d) {
  if (d.ranks.empty()) return "";
  const auto& p = d.parallel;
  std::string out = "<section id=\"ranks\"><h2>Ranks</h2>\n";
  out += fmt::format(
      "<p>{} ranks · dp {} · tp {} · pp {} · {} micro-batch(es) per step. Clock: {}.</p>\n",
      p.ranks, p.dp, p.tp, p.pp, p.micro_batches, h(p.clock));
  out += fmt::format(
      "<p>Collectives matched across ranks: {}; per rank per step transfer {} ms, synchronizing "
      "{} ms. {}{}</p>\n",
      p.collectives, fixed(p.transfer_ms, 3), fixed(p.sync_ms, 3),
      p.straggler >= 0
          ? fmt::format("Straggler: rank {}, late by {} ms at {} of comparable "
                        "collectives.",
                        p.straggler, fixed(p.straggler_late_ms, 3), percent(p.straggler_late_frac))
          : std::string("No straggler."),
      p.bubble >= 0 ? fmt::format(" Pipeline bubble {} (theory (p-1)/m = {}).", percent(p.bubble),
                                  percent(p.bubble_theory))
                    : std::string());
  out +=
      "<table id=\"ft-ranks\"><tr><th class=\"n\">rank</th><th>host</th><th class=\"n\">dp</th>"
      "<th class=\"n\">tp</th><th class=\"n\">pp</th><th class=\"n\">step ms</th>"
      "<th class=\"n\">compute</th><th class=\"n\">comm</th><th class=\"n\">sync</th>"
      "<th class=\"n\">exposed comm ms</th><th class=\"n\">waiting ms</th>"
      "<th class=\"n\">synchronizing in collectives ms</th><th class=\"n\">late / compared</th>"
      "<th class=\"n\">late ms</th><th class=\"n\">bubble</th></tr>\n";
  for (const auto& r : d.ranks) {
    out += fmt::format(
        "<tr><td class=\"n\">{}</td><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td>"
        "<td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td>"
        "<td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td>"
        "<td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{} / {}</td>"
        "<td class=\"n\">{}</td><td class=\"n\">{}</td></tr>\n",
        r.rank, h(r.host), r.dp_rank, r.tp_rank, r.pp_stage, fixed(r.step_ms, 2),
        percent(r.totals[static_cast<int>(WaitClass::kCompute)]),
        percent(r.totals[static_cast<int>(WaitClass::kComm)]),
        percent(r.totals[static_cast<int>(WaitClass::kSync)]), fixed(r.exposed_comm_ms, 3),
        fixed(r.exposed_wait_ms, 3), fixed(r.collective_sync_ms, 3), r.late, r.collectives,
        fixed(r.late_ms, 3), r.bubble < 0 ? "n/a" : percent(r.bubble));
  }
  return out + "</table></section>\n";
}

}  // namespace

namespace detail {

std::string html_head(const std::string& title, const std::string& script_nonce,
                      const std::string& extra_style) {
  std::string out = "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n";
  // No network at all, and only the page's own (nonce'd) scripts may run.
  out += fmt::format(
      "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; "
      "style-src 'unsafe-inline'; img-src data:{}\">\n",
      script_nonce.empty() ? "" : fmt::format("; script-src 'nonce-{}'", script_nonce));
  out += "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n";
  out +=
      "<title>" + h(title) + "</title>\n<style>" + std::string(kStyle) + extra_style + "</style>\n";
  return out;
}

std::string html_card(const std::string& key, const std::string& value) {
  return fmt::format("<div class=\"card\"><div class=\"k\">{}</div><div class=\"v\">{}</div></div>",
                     h(key), h(value));
}

}  // namespace detail

namespace detail {

std::string html_body(const Diagnosis& d) {
  const RunSummary sum = summarize(d);
  std::string out;
  out += fmt::format(
      "<header><h1>ft diagnosis report</h1><p class=\"source\">{}</p>{}</header>\n<main>\n",
      h(d.source.empty() ? std::string("(unknown source)") : d.source),
      d.steps_rule.empty() ? std::string()
                           : "<p class=\"source\">Steps: " + h(d.steps_rule) + "</p>");

  if (!d.warnings.empty()) {
    out += "<section id=\"warnings\"><h2>Input warnings</h2><ul>";
    for (const std::string& w : d.warnings) out += "<li>" + h(w) + "</li>";
    out += "</ul></section>\n";
  }
  out += "<section id=\"summary\"><h2>Summary</h2><div class=\"cards\">";
  out += html_card("tokens/s", std::isfinite(d.tokens_per_s) ? fixed(d.tokens_per_s, 0)
                                                             : std::string("unknown"));
  out += html_card("MFU", known_percent(d.mfu));
  out += html_card("step time (mean)", fixed(sum.mean_ms, 2) + " ms");
  out += html_card("steps", std::to_string(sum.steps));
  out += html_card("loss health", d.loss_health.verdict.empty() ? "n/a" : d.loss_health.verdict);
  out += html_card("peak memory", detail::recorded_bytes(d.memory.peak));
  out += "</div>";
  if (!d.findings.empty()) {
    out += fmt::format("<p><b>Top finding:</b> {} ({}, {})</p>", h(d.findings[0].title),
                       h(d.findings[0].cls), percent(d.findings[0].share));
  }
  out += "</section>\n";

  out +=
      "<section id=\"breakdown\"><h2>Where each step's time goes</h2>\n<div class=\"legend-row\">";
  for (int c = 0; c < kNumWaitClasses; ++c) {
    out +=
        fmt::format("<span><span class=\"swatch\" style=\"background:{}\"></span>{} {}</span>",
                    class_colour(c), profiler::wait_class_name(WaitClass(c)), percent(d.totals[c]));
  }
  out += "</div>\n" + breakdown_svg(d) + "<div id=\"ft-readout\"></div>\n";
  out +=
      "<table id=\"ft-totals\"><tr><th>class</th><th class=\"n\">share (steady state)</th><th "
      "class=\"n\">ms per step (all steps)</th></tr>\n";
  for (int c = 0; c < kNumWaitClasses; ++c) {
    const double per_step = sum.steps ? sum.class_ms[c] / static_cast<double>(sum.steps) : 0.0;
    out += fmt::format(
        "<tr><td><span class=\"swatch\" style=\"background:{}\"></span>{}</td>"
        "<td class=\"n\">{}</td><td class=\"n\">{}</td></tr>\n",
        class_colour(c), profiler::wait_class_name(WaitClass(c)), percent(d.totals[c]),
        fixed(per_step, 2));
  }
  out += "</table></section>\n";

  out +=
      "<section id=\"findings\"><h2>Findings (ranked)</h2>\n" + findings_html(d) + "</section>\n";
  out += ranks_html(d);
  out += detail::trace_summary_html(d);
  out += detail::timeline_html(d);
  out += critical_path_html(d);

  std::vector<Series> loss(1), mem;
  loss[0] = {"loss", "#4e79a7", {}};
  Series allocated{"allocated", "#59a14f", {}}, reserved{"reserved", "#e15759", {}};
  for (const auto& s : d.steps) {
    loss[0].points.emplace_back(static_cast<double>(s.step), s.loss);
    reserved.points.emplace_back(s.start_ms + s.wall_ms, s.mem_reserved);
    if (d.memory_timeline.empty())
      allocated.points.emplace_back(s.start_ms + s.wall_ms, s.mem_allocated);
  }
  for (const auto& [t, b] : d.memory_timeline) allocated.points.emplace_back(t, b);
  mem.push_back(std::move(allocated));
  mem.push_back(std::move(reserved));
  const auto& lh = d.loss_health;
  out += "<section id=\"loss\"><h2>Loss curve</h2>\n";
  out += line_svg("ft-loss-chart", loss, "step", AxisUnit::kPlain);
  out += fmt::format(
      "<p>Verdict: <b>{}</b> · NaN: {} · diverged: {} · spikes: {} · oscillation: "
      "{}</p></section>\n",
      h(lh.verdict.empty() ? std::string("n/a") : lh.verdict), lh.has_nan ? "yes" : "no",
      lh.diverged ? "yes" : "no", lh.spikes, fixed(lh.oscillation, 3));

  out += "<section id=\"memory\"><h2>Memory over time</h2>\n";
  out +=
      line_svg("ft-memory-chart", mem, "time since trace start", AxisUnit::kBytes, AxisUnit::kMs);
  out += fmt::format(
      "<table><tr><th class=\"n\">peak</th><th class=\"n\">reserved</th><th "
      "class=\"n\">fragmentation</th>"
      "<th class=\"n\">allocator retries</th><th class=\"n\">OOMs</th><th class=\"n\">page "
      "faults</th></tr>"
      "<tr><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td "
      "class=\"n\">{}</td>"
      "<td class=\"n\">{}</td><td class=\"n\">{}</td></tr></table></section>\n",
      detail::recorded_bytes(d.memory.peak), detail::recorded_bytes(d.memory.reserved),
      percent(d.memory.fragmentation), d.memory.alloc_retries, d.memory.ooms, d.memory.page_faults);

  out += "<section id=\"steps\"><details><summary><b>Per-step table</b></summary>\n" +
         steps_table(d) + "</details></section>\n";
  out += "<section id=\"config\"><h2>Configuration</h2>\n" + map_table(d.config, "flag") +
         "<h2>Environment</h2>\n" + map_table(d.environment, "key") + "</section>\n";
  out += "</main>\n";
  return out;
}

std::string html_page(const std::string& body, const std::string& json) {
  // The scripts' nonce: the data's checksum (a page's scripts run only with the page's data).
  const std::string nonce = fmt::format("ft{:08x}", crc32(json.data(), json.size()));
  std::string out;
  out.reserve(body.size() + json.size() * 2 + 65536);
  out += html_head("ft diagnosis report", nonce);
  out += fmt::format("<script nonce=\"{}\">{}</script>\n</head>\n<body>\n", nonce, kHookScript);
  out += body;
  out += "<script id=\"ft-report-data\" type=\"application/json\">" + json_for_script(json) +
         "</script>\n";
  out += fmt::format("<script nonce=\"{}\">{}</script>\n</body>\n</html>\n", nonce, kMainScript);
  return out;
}

}  // namespace detail

std::string render_html(const Diagnosis& d) {
  return detail::html_page(detail::html_body(d), render_json_compact(d));
}

}  // namespace ft::reports
