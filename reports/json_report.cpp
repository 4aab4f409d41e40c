// json_report.cpp: report.json writer and reader (round trip for ft-tune and CI gates).
#include <fmt/format.h>

#include <cmath>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>

#include "format.h"
#include "ft/core/atomic_file.h"
#include "ft/core/error.h"
#include "ft/reports/report.h"

namespace ft::reports {
namespace {

using Json = nlohmann::ordered_json;
using profiler::Diagnosis;
using profiler::kNumWaitClasses;
using profiler::WaitClass;

// Fixed-precision rounding so the text is deterministic; NaN/inf become null.
Json round_to(double x, double scale) {
  if (!std::isfinite(x)) return nullptr;
  double r = std::round(x * scale) / scale;
  if (r == 0) r = 0;  // no -0
  return r;
}
Json ms(double x) { return round_to(x, 1e3); }
Json share(double x) { return round_to(x, 1e6); }
Json whole(double x) {
  if (!std::isfinite(x)) return nullptr;
  return static_cast<int64_t>(std::llround(x));
}
Json sig6(double x) {
  if (!std::isfinite(x)) return nullptr;
  if (x == 0) return 0.0;
  // strtod, not stod: a subnormal result sets ERANGE, which stod turns into an exception.
  return std::strtod(fmt::format("{:.6g}", x).c_str(), nullptr);
}

Json classes(const std::array<double, kNumWaitClasses>& v, Json (*conv)(double)) {
  Json o = Json::object();
  for (int c = 0; c < kNumWaitClasses; ++c) o[profiler::wait_class_name(WaitClass(c))] = conv(v[c]);
  return o;
}

// ---- reading ----------------------------------------------------------------------------------

struct Reader {
  const std::string& origin;

  [[noreturn]] void fail(const std::string& path, const std::string& what) const {
    throw FormatError(fmt::format("{}: {}: {}", origin, path.empty() ? "/" : path, what));
  }
  const Json& field(const Json& o, const std::string& path, const char* key) const {
    if (!o.is_object()) fail(path, "expected an object");
    auto it = o.find(key);
    if (it == o.end()) fail(path, fmt::format("missing field \"{}\"", key));
    return *it;
  }
  const Json* optional(const Json& o, const char* key) const {
    auto it = o.find(key);
    return it == o.end() ? nullptr : &*it;
  }
  double number(const Json& v, const std::string& path) const {
    if (v.is_null()) return std::nan("");
    if (!v.is_number()) fail(path, "expected a number or null");
    return v.get<double>();
  }
  int64_t integer(const Json& v, const std::string& path) const {
    if (!v.is_number_integer()) fail(path, "expected an integer");
    return v.get<int64_t>();
  }
  std::string string(const Json& v, const std::string& path) const {
    if (!v.is_string()) fail(path, "expected a string");
    return v.get<std::string>();
  }
  bool boolean(const Json& v, const std::string& path) const {
    if (!v.is_boolean()) fail(path, "expected true or false");
    return v.get<bool>();
  }
  const Json& array(const Json& v, const std::string& path) const {
    if (!v.is_array()) fail(path, "expected an array");
    return v;
  }
  double num_field(const Json& o, const std::string& path, const char* key) const {
    return number(field(o, path, key), path + "/" + key);
  }
  std::array<double, kNumWaitClasses> classes(const Json& o, const std::string& path) const {
    std::array<double, kNumWaitClasses> v{};
    for (int c = 0; c < kNumWaitClasses; ++c) {
      v[c] = num_field(o, path, profiler::wait_class_name(WaitClass(c)));
    }
    return v;
  }
  std::map<std::string, std::string> string_map(const Json& o, const std::string& path) const {
    if (!o.is_object()) fail(path, "expected an object of strings");
    std::map<std::string, std::string> m;
    for (auto it = o.begin(); it != o.end(); ++it)
      m[it.key()] = string(it.value(), path + "/" + it.key());
    return m;
  }
};

profiler::Severity parse_severity(const Reader& r, const std::string& s, const std::string& path) {
  for (auto sev :
       {profiler::Severity::kInfo, profiler::Severity::kWarning, profiler::Severity::kCritical}) {
    if (s == profiler::severity_name(sev)) return sev;
  }
  r.fail(path, fmt::format("unknown severity \"{}\" (info, warning, critical)", s));
}

// Multi-rank runs: the cross-rank summary and one row per rank (absent for one rank).
void add_ranks(Json& j, const Diagnosis& d) {
  if (d.ranks.empty()) return;
  const auto& p = d.parallel;
  j["parallel"] =
      Json{{"ranks", p.ranks},
           {"dp", p.dp},
           {"tp", p.tp},
           {"pp", p.pp},
           {"micro_batches", p.micro_batches},
           {"collectives", p.collectives},
           {"transfer_ms", ms(p.transfer_ms)},
           {"sync_ms", ms(p.sync_ms)},
           {"straggler", p.straggler},
           {"straggler_late_ms", ms(p.straggler_late_ms)},
           {"straggler_late_frac", share(p.straggler_late_frac)},
           {"bubble", p.bubble < 0 ? Json(nullptr) : share(p.bubble)},
           {"bubble_theory", p.bubble_theory < 0 ? Json(nullptr) : share(p.bubble_theory)},
           {"clock", p.clock}};
  Json rows = Json::array();
  for (const auto& r : d.ranks) {
    rows.push_back(Json{{"rank", r.rank},
                        {"dp_rank", r.dp_rank},
                        {"tp_rank", r.tp_rank},
                        {"pp_stage", r.pp_stage},
                        {"host", r.host},
                        {"steps", r.steps},
                        {"step_ms", ms(r.step_ms)},
                        {"totals", classes(r.totals, share)},
                        {"exposed_comm_ms", ms(r.exposed_comm_ms)},
                        {"exposed_wait_ms", ms(r.exposed_wait_ms)},
                        {"collective_ms", ms(r.collective_ms)},
                        {"collective_sync_ms", ms(r.collective_sync_ms)},
                        {"collectives", r.collectives},
                        {"late", r.late},
                        {"late_ms", ms(r.late_ms)},
                        {"bubble", r.bubble < 0 ? Json(nullptr) : share(r.bubble)},
                        {"bubble_ms", ms(r.bubble_ms)},
                        {"clock_offset_ms", ms(r.clock_offset_ms)}});
  }
  j["ranks"] = std::move(rows);
}

void read_ranks(const Reader& r, const Json& j, Diagnosis* d) {
  const Json* pj = r.optional(j, "parallel");
  const Json* rj = r.optional(j, "ranks");
  if (!pj && !rj) return;
  if (!pj || !rj) r.fail("", "\"parallel\" and \"ranks\" come together");
  auto& p = d->parallel;
  const std::string pp = "/parallel";
  auto integer = [&](const Json& o, const std::string& path, const char* key) {
    return r.integer(r.field(o, path, key), path + "/" + key);
  };
  // null (no pipeline) reads as -1.
  auto maybe = [&](const Json& o, const std::string& path, const char* key) {
    const double v = r.num_field(o, path, key);
    return std::isnan(v) ? -1.0 : v;
  };
  p.ranks = static_cast<int>(integer(*pj, pp, "ranks"));
  p.dp = static_cast<int>(integer(*pj, pp, "dp"));
  p.tp = static_cast<int>(integer(*pj, pp, "tp"));
  p.pp = static_cast<int>(integer(*pj, pp, "pp"));
  p.micro_batches = static_cast<int>(integer(*pj, pp, "micro_batches"));
  p.collectives = integer(*pj, pp, "collectives");
  p.transfer_ms = r.num_field(*pj, pp, "transfer_ms");
  p.sync_ms = r.num_field(*pj, pp, "sync_ms");
  p.straggler = static_cast<int>(integer(*pj, pp, "straggler"));
  p.straggler_late_ms = r.num_field(*pj, pp, "straggler_late_ms");
  p.straggler_late_frac = r.num_field(*pj, pp, "straggler_late_frac");
  p.bubble = maybe(*pj, pp, "bubble");
  p.bubble_theory = maybe(*pj, pp, "bubble_theory");
  p.clock = r.string(r.field(*pj, pp, "clock"), pp + "/clock");
  r.array(*rj, "/ranks");
  for (size_t i = 0; i < rj->size(); ++i) {
    const std::string q = fmt::format("/ranks/{}", i);
    const Json& o = (*rj)[i];
    profiler::RankBreakdown b;
    b.rank = static_cast<int>(integer(o, q, "rank"));
    b.dp_rank = static_cast<int>(integer(o, q, "dp_rank"));
    b.tp_rank = static_cast<int>(integer(o, q, "tp_rank"));
    b.pp_stage = static_cast<int>(integer(o, q, "pp_stage"));
    b.host = r.string(r.field(o, q, "host"), q + "/host");
    b.steps = integer(o, q, "steps");
    b.step_ms = r.num_field(o, q, "step_ms");
    b.totals = r.classes(r.field(o, q, "totals"), q + "/totals");
    b.exposed_comm_ms = r.num_field(o, q, "exposed_comm_ms");
    b.exposed_wait_ms = r.num_field(o, q, "exposed_wait_ms");
    b.collective_ms = r.num_field(o, q, "collective_ms");
    b.collective_sync_ms = r.num_field(o, q, "collective_sync_ms");
    b.collectives = integer(o, q, "collectives");
    b.late = integer(o, q, "late");
    b.late_ms = r.num_field(o, q, "late_ms");
    b.bubble = maybe(o, q, "bubble");
    b.bubble_ms = r.num_field(o, q, "bubble_ms");
    b.clock_offset_ms = r.num_field(o, q, "clock_offset_ms");
    d->ranks.push_back(b);
  }
}

Json build_json(const Diagnosis& d) {
  Json j;
  j["format"] = "ft-report";
  j["version"] = kReportJsonVersion;
  j["source"] = d.source;
  j["mfu"] = sig6(d.mfu);
  j["tokens_per_s"] = sig6(d.tokens_per_s);
  j["totals"] = classes(d.totals, share);
  Json findings = Json::array();
  int rank = 0;
  for (const auto& f : d.findings) {
    Json e;
    e["steps"] = f.evidence.steps;
    e["share"] = share(f.evidence.share);
    e["examples"] = f.evidence.examples;
    e["detail"] = f.evidence.detail;
    Json o;
    o["rank"] = ++rank;
    o["class"] = f.cls;
    o["share"] = share(f.share);
    o["severity"] = profiler::severity_name(f.severity);
    o["title"] = f.title;
    o["explanation"] = f.explanation;
    o["evidence"] = std::move(e);
    o["knobs"] = f.knobs;
    findings.push_back(std::move(o));
  }
  j["findings"] = std::move(findings);
  add_ranks(j, d);
  j["memory"] = Json{{"peak", whole(d.memory.peak)},
                     {"reserved", whole(d.memory.reserved)},
                     {"fragmentation", share(d.memory.fragmentation)},
                     {"alloc_retries", d.memory.alloc_retries},
                     {"ooms", d.memory.ooms},
                     {"page_faults", d.memory.page_faults}};
  j["loss_health"] = Json{{"verdict", d.loss_health.verdict},
                          {"has_nan", d.loss_health.has_nan},
                          {"diverged", d.loss_health.diverged},
                          {"spikes", d.loss_health.spikes},
                          {"oscillation", sig6(d.loss_health.oscillation)}};
  Json steps = Json::array();
  Json loss_curve = Json::array();
  for (const auto& s : d.steps) {
    Json o;
    o["step"] = s.step;
    o["start_ms"] = ms(s.start_ms);
    o["wall_ms"] = ms(s.wall_ms);
    o["breakdown"] = classes(s.ms, ms);
    Json det = Json::object();
    for (const auto& [k, v] : s.detail) det[k] = ms(v);
    o["detail"] = std::move(det);
    o["loss"] = sig6(s.loss);
    o["lr"] = sig6(s.lr);
    o["grad_norm"] = sig6(s.grad_norm);
    o["mem_allocated"] = whole(s.mem_allocated);
    o["mem_reserved"] = whole(s.mem_reserved);
    o["tokens_per_s"] = sig6(s.tokens_per_s);
    steps.push_back(std::move(o));
    loss_curve.push_back(Json::array({s.step, sig6(s.loss)}));
  }
  j["steps"] = std::move(steps);
  j["loss_curve"] = std::move(loss_curve);
  Json timeline = Json::array();
  for (const auto& [t, b] : d.memory_timeline) timeline.push_back(Json::array({ms(t), whole(b)}));
  j["memory_timeline"] = std::move(timeline);
  j["config"] = d.config;
  j["environment"] = d.environment;
  return j;
}

}  // namespace

// Names from traces may hold invalid UTF-8: replace it rather than throw.
std::string render_json(const Diagnosis& d) {
  return build_json(d).dump(2, ' ', false, Json::error_handler_t::replace) + "\n";
}

namespace detail {
std::string render_json_compact(const Diagnosis& d) {
  return build_json(d).dump(-1, ' ', false, Json::error_handler_t::replace);
}
}  // namespace detail

Diagnosis parse_report_json(std::string_view text, const std::string& origin) {
  Json j;
  try {
    j = Json::parse(text.begin(), text.end());
  } catch (const Json::parse_error& e) {
    throw FormatError(fmt::format("{}: byte {}: not valid JSON ({})", origin, e.byte, e.what()));
  }
  const Reader r{origin};
  if (!j.is_object()) r.fail("", "expected a JSON object (an ft report)");
  if (r.string(r.field(j, "", "format"), "/format") != "ft-report") {
    r.fail("/format", "not an ft report (expected \"ft-report\")");
  }
  const int64_t version = r.integer(r.field(j, "", "version"), "/version");
  if (version != kReportJsonVersion) {
    r.fail("/version", fmt::format("unsupported version {} (this build reads {})", version,
                                   kReportJsonVersion));
  }
  Diagnosis d;
  if (const Json* s = r.optional(j, "source")) d.source = r.string(*s, "/source");
  d.mfu = r.num_field(j, "", "mfu");
  d.tokens_per_s = r.num_field(j, "", "tokens_per_s");
  d.totals = r.classes(r.field(j, "", "totals"), "/totals");

  const Json& findings = r.array(r.field(j, "", "findings"), "/findings");
  for (size_t i = 0; i < findings.size(); ++i) {
    const std::string p = fmt::format("/findings/{}", i);
    const Json& o = findings[i];
    profiler::Finding f;
    f.cls = r.string(r.field(o, p, "class"), p + "/class");
    f.share = r.num_field(o, p, "share");
    f.severity =
        parse_severity(r, r.string(r.field(o, p, "severity"), p + "/severity"), p + "/severity");
    f.title = r.string(r.field(o, p, "title"), p + "/title");
    if (const Json* e = r.optional(o, "explanation"))
      f.explanation = r.string(*e, p + "/explanation");
    const Json& ev = r.field(o, p, "evidence");
    const std::string pe = p + "/evidence";
    if (const Json* s = r.optional(ev, "steps")) {
      r.array(*s, pe + "/steps");
      for (size_t k = 0; k < s->size(); ++k) {
        f.evidence.steps.push_back(r.integer((*s)[k], fmt::format("{}/steps/{}", pe, k)));
      }
    }
    if (const Json* s = r.optional(ev, "share")) f.evidence.share = r.number(*s, pe + "/share");
    if (const Json* s = r.optional(ev, "examples")) {
      r.array(*s, pe + "/examples");
      for (size_t k = 0; k < s->size(); ++k) {
        f.evidence.examples.push_back(r.string((*s)[k], fmt::format("{}/examples/{}", pe, k)));
      }
    }
    if (const Json* s = r.optional(ev, "detail")) f.evidence.detail = r.string(*s, pe + "/detail");
    const Json& knobs = r.array(r.field(o, p, "knobs"), p + "/knobs");
    for (size_t k = 0; k < knobs.size(); ++k) {
      f.knobs.push_back(r.string(knobs[k], fmt::format("{}/knobs/{}", p, k)));
    }
    d.findings.push_back(std::move(f));
  }

  read_ranks(r, j, &d);
  const Json& mem = r.field(j, "", "memory");
  d.memory.peak = r.num_field(mem, "/memory", "peak");
  d.memory.reserved = r.num_field(mem, "/memory", "reserved");
  d.memory.fragmentation = r.num_field(mem, "/memory", "fragmentation");
  d.memory.alloc_retries =
      r.integer(r.field(mem, "/memory", "alloc_retries"), "/memory/alloc_retries");
  d.memory.ooms = r.integer(r.field(mem, "/memory", "ooms"), "/memory/ooms");
  if (const Json* v = r.optional(mem, "page_faults")) {
    d.memory.page_faults = r.integer(*v, "/memory/page_faults");
  }

  const Json& lh = r.field(j, "", "loss_health");
  d.loss_health.verdict = r.string(r.field(lh, "/loss_health", "verdict"), "/loss_health/verdict");
  d.loss_health.has_nan = r.boolean(r.field(lh, "/loss_health", "has_nan"), "/loss_health/has_nan");
  d.loss_health.diverged =
      r.boolean(r.field(lh, "/loss_health", "diverged"), "/loss_health/diverged");
  d.loss_health.spikes =
      static_cast<int>(r.integer(r.field(lh, "/loss_health", "spikes"), "/loss_health/spikes"));
  d.loss_health.oscillation = r.num_field(lh, "/loss_health", "oscillation");

  const Json& steps = r.array(r.field(j, "", "steps"), "/steps");
  for (size_t i = 0; i < steps.size(); ++i) {
    const std::string p = fmt::format("/steps/{}", i);
    const Json& o = steps[i];
    profiler::StepBreakdown s;
    s.step = r.integer(r.field(o, p, "step"), p + "/step");
    s.wall_ms = r.num_field(o, p, "wall_ms");
    s.ms = r.classes(r.field(o, p, "breakdown"), p + "/breakdown");
    const auto opt_num = [&](const char* key, double fallback) {
      const Json* v = r.optional(o, key);
      return v ? r.number(*v, p + "/" + key) : fallback;
    };
    const double nan = std::nan("");
    s.start_ms = opt_num("start_ms", 0);
    s.loss = opt_num("loss", nan);
    s.lr = opt_num("lr", nan);
    s.grad_norm = opt_num("grad_norm", nan);
    s.mem_allocated = opt_num("mem_allocated", 0);
    s.mem_reserved = opt_num("mem_reserved", 0);
    s.tokens_per_s = opt_num("tokens_per_s", 0);
    if (const Json* det = r.optional(o, "detail")) {
      if (!det->is_object()) r.fail(p + "/detail", "expected an object of numbers");
      for (auto it = det->begin(); it != det->end(); ++it) {
        s.detail[it.key()] = r.number(it.value(), p + "/detail/" + it.key());
      }
    }
    d.steps.push_back(std::move(s));
  }
  if (const Json* tl = r.optional(j, "memory_timeline")) {
    r.array(*tl, "/memory_timeline");
    for (size_t i = 0; i < tl->size(); ++i) {
      const std::string p = fmt::format("/memory_timeline/{}", i);
      const Json& pt = (*tl)[i];
      if (!pt.is_array() || pt.size() != 2) r.fail(p, "expected [ms, bytes]");
      d.memory_timeline.emplace_back(r.number(pt[0], p + "/0"), r.number(pt[1], p + "/1"));
    }
  }
  if (const Json* c = r.optional(j, "config")) d.config = r.string_map(*c, "/config");
  if (const Json* e = r.optional(j, "environment"))
    d.environment = r.string_map(*e, "/environment");
  return d;
}

profiler::Diagnosis read_report_json(const std::filesystem::path& path) {
  return parse_report_json(read_file(path), path.string());
}

void write_reports(const Diagnosis& d, const std::filesystem::path& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec)
    throw IoError(
        fmt::format("{}: cannot create report directory: {}", dir.string(), ec.message()));
  // Render all three first so a rendering error leaves no partial set behind.
  const std::string json = render_json(d);
  const std::string md = render_markdown(d);
  const std::string html = render_html(d);
  write_file_atomic(dir / "report.json", json);
  write_file_atomic(dir / "report.md", md);
  write_file_atomic(dir / "report.html", html);
}

}  // namespace ft::reports
