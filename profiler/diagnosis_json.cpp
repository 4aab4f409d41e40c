// diagnosis_json.cpp: report.json -> Diagnosis, field by field, with the JSON path of any error.
#include "ft/profiler/diagnosis_json.h"

#include <fmt/format.h>

#include <cmath>

#include "ft/core/atomic_file.h"
#include "ft/core/error.h"

namespace ft::profiler {
namespace {

using Json = nlohmann::json;

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
  int64_t int_field(const Json& o, const std::string& path, const char* key) const {
    return integer(field(o, path, key), path + "/" + key);
  }
  std::string str_field(const Json& o, const std::string& path, const char* key) const {
    return string(field(o, path, key), path + "/" + key);
  }
  // A share that is null when there is none (no pipeline) reads as -1.
  double maybe_field(const Json& o, const std::string& path, const char* key) const {
    const double v = num_field(o, path, key);
    return std::isnan(v) ? -1.0 : v;
  }
  std::array<double, kNumWaitClasses> classes(const Json& o, const std::string& path) const {
    std::array<double, kNumWaitClasses> v{};
    for (int c = 0; c < kNumWaitClasses; ++c) {
      v[c] = num_field(o, path, wait_class_name(WaitClass(c)));
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

Severity parse_severity(const Reader& r, const std::string& s, const std::string& path) {
  for (auto sev : {Severity::kInfo, Severity::kWarning, Severity::kCritical}) {
    if (s == severity_name(sev)) return sev;
  }
  r.fail(path, fmt::format("unknown severity \"{}\" (info, warning, critical)", s));
}

Evidence read_evidence(const Reader& r, const Json& ev, const std::string& pe) {
  Evidence e;
  if (!ev.is_object()) r.fail(pe, "expected an object");
  if (const Json* s = r.optional(ev, "steps")) {
    r.array(*s, pe + "/steps");
    for (size_t k = 0; k < s->size(); ++k) {
      e.steps.push_back(r.integer((*s)[k], fmt::format("{}/steps/{}", pe, k)));
    }
  }
  if (const Json* s = r.optional(ev, "share")) e.share = r.number(*s, pe + "/share");
  if (const Json* s = r.optional(ev, "examples")) {
    r.array(*s, pe + "/examples");
    for (size_t k = 0; k < s->size(); ++k) {
      e.examples.push_back(r.string((*s)[k], fmt::format("{}/examples/{}", pe, k)));
    }
  }
  if (const Json* s = r.optional(ev, "detail")) e.detail = r.string(*s, pe + "/detail");
  return e;
}

std::vector<Finding> read_findings(const Reader& r, const Json& j) {
  std::vector<Finding> out;
  const Json& findings = r.array(r.field(j, "", "findings"), "/findings");
  for (size_t i = 0; i < findings.size(); ++i) {
    const std::string p = fmt::format("/findings/{}", i);
    const Json& o = findings[i];
    Finding f;
    f.cls = r.str_field(o, p, "class");
    f.share = r.num_field(o, p, "share");
    f.severity = parse_severity(r, r.str_field(o, p, "severity"), p + "/severity");
    f.title = r.str_field(o, p, "title");
    if (const Json* e = r.optional(o, "explanation")) {
      f.explanation = r.string(*e, p + "/explanation");
    }
    f.evidence = read_evidence(r, r.field(o, p, "evidence"), p + "/evidence");
    const Json& knobs = r.array(r.field(o, p, "knobs"), p + "/knobs");
    for (size_t k = 0; k < knobs.size(); ++k) {
      f.knobs.push_back(r.string(knobs[k], fmt::format("{}/knobs/{}", p, k)));
    }
    if (const Json* p_ms = r.optional(o, "predicted_step_ms")) {
      f.predicted_step_ms = r.number(*p_ms, p + "/predicted_step_ms");
      f.prediction = r.str_field(o, p, "prediction");
    }
    out.push_back(std::move(f));
  }
  return out;
}

// Multi-rank runs: "parallel" (the cross-rank summary) and "ranks" come together or not at all.
void read_ranks(const Reader& r, const Json& j, Diagnosis* d) {
  const Json* pj = r.optional(j, "parallel");
  const Json* rj = r.optional(j, "ranks");
  if (!pj && !rj) return;
  if (!pj || !rj) r.fail("", "\"parallel\" and \"ranks\" come together");
  auto& p = d->parallel;
  const std::string pp = "/parallel";
  p.ranks = static_cast<int>(r.int_field(*pj, pp, "ranks"));
  p.dp = static_cast<int>(r.int_field(*pj, pp, "dp"));
  p.tp = static_cast<int>(r.int_field(*pj, pp, "tp"));
  p.pp = static_cast<int>(r.int_field(*pj, pp, "pp"));
  p.micro_batches = static_cast<int>(r.int_field(*pj, pp, "micro_batches"));
  p.collectives = r.int_field(*pj, pp, "collectives");
  p.transfer_ms = r.num_field(*pj, pp, "transfer_ms");
  p.sync_ms = r.num_field(*pj, pp, "sync_ms");
  p.straggler = static_cast<int>(r.int_field(*pj, pp, "straggler"));
  p.straggler_late_ms = r.num_field(*pj, pp, "straggler_late_ms");
  p.straggler_late_frac = r.num_field(*pj, pp, "straggler_late_frac");
  p.bubble = r.maybe_field(*pj, pp, "bubble");
  p.bubble_theory = r.maybe_field(*pj, pp, "bubble_theory");
  p.clock = r.str_field(*pj, pp, "clock");
  r.array(*rj, "/ranks");
  for (size_t i = 0; i < rj->size(); ++i) {
    const std::string q = fmt::format("/ranks/{}", i);
    const Json& o = (*rj)[i];
    RankBreakdown b;
    b.rank = static_cast<int>(r.int_field(o, q, "rank"));
    b.dp_rank = static_cast<int>(r.int_field(o, q, "dp_rank"));
    b.tp_rank = static_cast<int>(r.int_field(o, q, "tp_rank"));
    b.pp_stage = static_cast<int>(r.int_field(o, q, "pp_stage"));
    b.host = r.str_field(o, q, "host");
    b.steps = r.int_field(o, q, "steps");
    b.step_ms = r.num_field(o, q, "step_ms");
    b.totals = r.classes(r.field(o, q, "totals"), q + "/totals");
    b.exposed_comm_ms = r.num_field(o, q, "exposed_comm_ms");
    b.exposed_wait_ms = r.num_field(o, q, "exposed_wait_ms");
    b.collective_ms = r.num_field(o, q, "collective_ms");
    b.collective_sync_ms = r.num_field(o, q, "collective_sync_ms");
    b.collectives = r.int_field(o, q, "collectives");
    b.late = r.int_field(o, q, "late");
    b.late_ms = r.num_field(o, q, "late_ms");
    b.bubble = r.maybe_field(o, q, "bubble");
    b.bubble_ms = r.num_field(o, q, "bubble_ms");
    b.clock_offset_ms = r.num_field(o, q, "clock_offset_ms");
    d->ranks.push_back(b);
  }
}

void read_memory_and_loss(const Reader& r, const Json& j, Diagnosis* d) {
  const Json& mem = r.field(j, "", "memory");
  const std::string pm = "/memory";
  d->memory.peak = r.num_field(mem, pm, "peak");
  d->memory.reserved = r.num_field(mem, pm, "reserved");
  d->memory.fragmentation = r.num_field(mem, pm, "fragmentation");
  d->memory.alloc_retries = r.int_field(mem, pm, "alloc_retries");
  d->memory.ooms = r.int_field(mem, pm, "ooms");
  if (const Json* v = r.optional(mem, "page_faults")) {
    d->memory.page_faults = r.integer(*v, pm + "/page_faults");
  }
  const Json& lh = r.field(j, "", "loss_health");
  const std::string pl = "/loss_health";
  d->loss_health.verdict = r.str_field(lh, pl, "verdict");
  d->loss_health.has_nan = r.boolean(r.field(lh, pl, "has_nan"), pl + "/has_nan");
  d->loss_health.diverged = r.boolean(r.field(lh, pl, "diverged"), pl + "/diverged");
  d->loss_health.spikes = static_cast<int>(r.int_field(lh, pl, "spikes"));
  d->loss_health.oscillation = r.num_field(lh, pl, "oscillation");
}

void read_steps(const Reader& r, const Json& j, Diagnosis* d) {
  const Json& steps = r.array(r.field(j, "", "steps"), "/steps");
  for (size_t i = 0; i < steps.size(); ++i) {
    const std::string p = fmt::format("/steps/{}", i);
    const Json& o = steps[i];
    StepBreakdown s;
    s.step = r.int_field(o, p, "step");
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
    d->steps.push_back(std::move(s));
  }
  if (const Json* tl = r.optional(j, "memory_timeline")) {
    r.array(*tl, "/memory_timeline");
    for (size_t i = 0; i < tl->size(); ++i) {
      const std::string p = fmt::format("/memory_timeline/{}", i);
      const Json& pt = (*tl)[i];
      if (!pt.is_array() || pt.size() != 2) r.fail(p, "expected [ms, bytes]");
      d->memory_timeline.emplace_back(r.number(pt[0], p + "/0"), r.number(pt[1], p + "/1"));
    }
  }
}

// report.json's "timeline": lanes, names, and spans [lane, row, class, name, start_ms, dur_ms]
// whose indices must point inside them.
void read_timeline(const Reader& r, const Json& t, Timeline* out) {
  const std::string p = "/timeline";
  const Json& steps = r.array(r.field(t, p, "steps"), p + "/steps");
  for (size_t k = 0; k < steps.size(); ++k)
    out->steps.push_back(r.integer(steps[k], fmt::format("{}/steps/{}", p, k)));
  out->start_ms = r.num_field(t, p, "start_ms");
  out->end_ms = r.num_field(t, p, "end_ms");
  for (const char* key : {"lanes", "names"}) {
    const Json& a = r.array(r.field(t, p, key), p + "/" + key);
    auto& v = std::string(key) == "lanes" ? out->lanes : out->names;
    for (size_t k = 0; k < a.size(); ++k)
      v.push_back(r.string(a[k], fmt::format("{}/{}/{}", p, key, k)));
  }
  const Json& spans = r.array(r.field(t, p, "spans"), p + "/spans");
  for (size_t k = 0; k < spans.size(); ++k) {
    const std::string pk = fmt::format("{}/spans/{}", p, k);
    const Json& a = r.array(spans[k], pk);
    if (a.size() != 6) r.fail(pk, "expected [lane, row, class, name, start_ms, dur_ms]");
    const int64_t lane = r.integer(a[0], pk + "/0"), row = r.integer(a[1], pk + "/1");
    const int64_t name = r.integer(a[3], pk + "/3");
    if (lane < 0 || static_cast<size_t>(lane) >= out->lanes.size()) r.fail(pk, "lane out of range");
    if (row != 0 && row != 1) r.fail(pk, "row must be 0 or 1");
    if (name < 0 || static_cast<size_t>(name) >= out->names.size()) r.fail(pk, "name out of range");
    const std::string cls = r.string(a[2], pk + "/2");
    int c = 0;
    while (c < kNumWaitClasses && cls != wait_class_name(WaitClass(c))) ++c;
    if (c == kNumWaitClasses) r.fail(pk + "/2", fmt::format("unknown class \"{}\"", cls));
    TimelineSpan s;
    s.lane = static_cast<uint16_t>(lane);
    s.row = static_cast<uint8_t>(row);
    s.cls = static_cast<uint8_t>(c);
    s.name = static_cast<uint32_t>(name);
    s.start_ms = r.number(a[4], pk + "/4");
    s.dur_ms = r.number(a[5], pk + "/5");
    if (!(s.dur_ms >= 0) || !(s.start_ms >= 0)) r.fail(pk, "start_ms and dur_ms must be >= 0");
    out->spans.push_back(s);
  }
  out->hidden = r.int_field(t, p, "hidden");
  if (out->steps.empty()) r.fail(p + "/steps", "a timeline shows at least one step");
  if (out->lanes.size() > 65535) r.fail(p + "/lanes", "more than 65535 lanes");
}

}  // namespace

Diagnosis diagnosis_from_json(const nlohmann::json& j, const std::string& origin) {
  const Reader r{origin};
  if (!j.is_object()) r.fail("", "expected a JSON object (an ft report)");
  if (r.str_field(j, "", "format") != kDiagnosisJsonFormat) {
    r.fail("/format", fmt::format("not an ft report (expected \"{}\")", kDiagnosisJsonFormat));
  }
  const int64_t version = r.int_field(j, "", "version");
  if (version != kDiagnosisJsonVersion) {
    r.fail("/version", fmt::format("unsupported version {} (this build reads {})", version,
                                   kDiagnosisJsonVersion));
  }
  Diagnosis d;
  if (const Json* s = r.optional(j, "source")) d.source = r.string(*s, "/source");
  if (const Json* s = r.optional(j, "steps_rule")) d.steps_rule = r.string(*s, "/steps_rule");
  if (const Json* t = r.optional(j, "trace_summary")) {
    TraceSummary& ts = d.trace_summary;
    ts.computed = true;
    ts.device_busy_share = r.num_field(*t, "/trace_summary", "device_busy_share");
    auto ops = [&](const char* key, std::vector<OpTime>* out) {
      const std::string p = std::string("/trace_summary/") + key;
      const Json& a = r.field(*t, "/trace_summary", key);
      r.array(a, p);
      for (size_t k = 0; k < a.size(); ++k) {
        const std::string pk = fmt::format("{}/{}", p, k);
        out->push_back({r.str_field(a[k], pk, "name"), r.num_field(a[k], pk, "count"),
                        r.num_field(a[k], pk, "total_ms"), r.num_field(a[k], pk, "self_ms")});
      }
    };
    ops("kernels", &ts.kernels);
    ops("cpu_ops", &ts.cpu_ops);
    const Json& st = r.field(*t, "/trace_summary", "streams");
    r.array(st, "/trace_summary/streams");
    for (size_t k = 0; k < st.size(); ++k) {
      const std::string pk = fmt::format("/trace_summary/streams/{}", k);
      ts.streams.emplace_back(r.str_field(st[k], pk, "stream"), r.num_field(st[k], pk, "busy_ms"));
    }
    const Json& tr = r.field(*t, "/trace_summary", "transfers");
    r.array(tr, "/trace_summary/transfers");
    for (size_t k = 0; k < tr.size(); ++k) {
      const std::string pk = fmt::format("/trace_summary/transfers/{}", k);
      ts.transfers.push_back({r.str_field(tr[k], pk, "kind"), r.num_field(tr[k], pk, "count"),
                              r.num_field(tr[k], pk, "ms"), r.num_field(tr[k], pk, "bytes")});
    }
  }
  if (const Json* t = r.optional(j, "timeline")) read_timeline(r, *t, &d.timeline);
  if (const Json* s = r.optional(j, "warnings")) {
    r.array(*s, "/warnings");
    for (size_t k = 0; k < s->size(); ++k)
      d.warnings.push_back(r.string((*s)[k], fmt::format("/warnings/{}", k)));
  }
  d.mfu = r.num_field(j, "", "mfu");
  d.tokens_per_s = r.num_field(j, "", "tokens_per_s");
  d.totals = r.classes(r.field(j, "", "totals"), "/totals");
  d.findings = read_findings(r, j);
  read_ranks(r, j, &d);
  if (const Json* c = r.optional(j, "critical_path")) {
    CriticalPathSummary& cp = d.critical_path;
    cp.computed = true;
    cp.success = r.boolean(r.field(*c, "/critical_path", "success"), "/critical_path/success");
    if (const Json* e = r.optional(*c, "error")) cp.error = r.string(*e, "/critical_path/error");
    const Json& a = r.field(*c, "/critical_path", "args");
    cp.rank = static_cast<int>(r.int_field(a, "/critical_path/args", "rank"));
    cp.annotation = r.str_field(a, "/critical_path/args", "annotation");
    cp.instance = r.int_field(a, "/critical_path/args", "instance_id");
    cp.step = r.int_field(*c, "/critical_path", "step");
    if (cp.success) {
      cp.total_us = r.int_field(*c, "/critical_path", "cp_total_duration_us");
      auto sums = [&](const char* key, std::map<std::string, int64_t>* out) {
        const Json& o = r.field(*c, "/critical_path", key);
        if (!o.is_object()) r.fail(std::string("/critical_path/") + key, "expected an object");
        for (const auto& [k, v] : o.items())
          (*out)[k] =
              r.int_field(v, std::string("/critical_path/") + key + "/" + k, "duration_sum");
      };
      sums("breakdown_by_type", &cp.by_type_us);
      sums("breakdown_by_bound_by", &cp.by_bound_us);
    }
  }
  read_memory_and_loss(r, j, &d);
  read_steps(r, j, &d);
  if (const Json* c = r.optional(j, "config")) d.config = r.string_map(*c, "/config");
  if (const Json* e = r.optional(j, "environment")) {
    d.environment = r.string_map(*e, "/environment");
  }
  return d;
}

Diagnosis diagnosis_from_json_text(std::string_view text, const std::string& origin) {
  Json j;
  try {
    j = Json::parse(text.begin(), text.end());
  } catch (const Json::parse_error& e) {
    throw FormatError(fmt::format("{}: byte {}: not valid JSON ({})", origin, e.byte, e.what()));
  } catch (const Json::out_of_range& e) {  // a number beyond double's range (1e400)
    throw FormatError(fmt::format("{}: not valid JSON ({})", origin, e.what()));
  }
  return diagnosis_from_json(j, origin);
}

Diagnosis read_diagnosis_file(const std::filesystem::path& path) {
  return diagnosis_from_json_text(read_file(path), path.string());
}

}  // namespace ft::profiler
