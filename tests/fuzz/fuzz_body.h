// fuzz_body.h: what one fuzz input goes through, shared by the libFuzzer target
// (kineto_reader_fuzz.cpp) and the regression test over tests/data/fuzz/
// (tests/fuzz_regression_test.cpp). Header-only so the regression test needs no extra source.
//
// Every input goes through every reader ft has for text it did not write, and whatever a reader
// accepts goes on through the analyses and every report writer:
//  - HTA's row loader, on the whole text and in chunks (load_cp_trace, load_cp_trace_chunked),
//    which must give the same rows when the chunked read takes the input;
//  - the Kineto reader (read_kineto_records_from_memory, options picked from the input's size),
//    then hta_analyses (one or two ranks, dumped as ft-hta writes it), prepare_kineto_trace,
//    diagnose() on the prepared trace and the report writers;
//  - read_kineto_trace_from_memory (to_trace) on some inputs;
//  - ft's own trace.json reader (parse_trace_json), then diagnose() and the writers;
//  - the report.json reader (parse_report_json), then the writers.
// The report writers: render_json, render_markdown, render_html, and render_json's output read
// back by parse_report_json, which must accept it and render the same JSON again (a fixed point).
//
// Expected outcomes for bad input are the library's documented errors, ft::FormatError and
// ft::ConfigError; they are caught here. Anything else (another exception, a failed check below,
// a sanitizer report) escapes: under libFuzzer that is a crash, in the regression test a failure.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "../../profiler/kineto/critical_path_rows.h"
#include "../../profiler/kineto/json_stream.h"
#include "ft/core/error.h"
#include "ft/profiler/critical_path.h"
#include "ft/profiler/diagnosis.h"
#include "ft/profiler/event.h"
#include "ft/profiler/findings.h"
#include "ft/profiler/hta.h"
#include "ft/profiler/kineto_reader.h"
#include "ft/profiler/kineto_trace.h"
#include "ft/profiler/load_trace.h"
#include "ft/profiler/trace_reader.h"
#include "ft/reports/report.h"

namespace ft::fuzz {

// A broken invariant (not bad input): thrown so that it is never mistaken for an expected error.
class FuzzCheckFailed : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

inline void fuzz_check(bool ok, const char* what) {
  if (!ok) throw FuzzCheckFailed(std::string("fuzz check failed: ") + what);
}

// Every report writer on `d`; render_json's output must read back and render identically.
inline void fuzz_render_all(const profiler::Diagnosis& d) {
  const std::string json = reports::render_json(d);
  const std::string md = reports::render_markdown(d);
  const std::string html = reports::render_html(d);
  fuzz_check(!json.empty() && !md.empty() && !html.empty(), "a report writer wrote nothing");
  // The writer's own output is valid input: a FormatError here is a bug, not bad input.
  const profiler::Diagnosis back = reports::parse_report_json(json, "fuzz report.json");
  fuzz_check(reports::render_json(back) == json, "render_json(parse_report_json(j)) == j");
}

// diagnose() and the writers; no steps (or bad configuration in the trace) is a documented error.
inline void fuzz_diagnose(const profiler::Trace& t) {
  profiler::Diagnosis d;
  try {
    d = profiler::diagnose(t);
  } catch (const FormatError&) {
    return;
  } catch (const ConfigError&) {
    return;
  }
  fuzz_render_all(d);
}

// Every field of every record, the tables and the metadata, as text.
inline std::string records_fingerprint(const profiler::KinetoTrace& t) {
  std::string o;
  for (size_t i = 0; i < t.size(); ++i) {
    const profiler::Event e = t.event(i);
    o += std::to_string(e.ts_ns) + ' ' + std::to_string(e.dur_ns) + ' ' + std::to_string(e.arg) +
         ' ' + std::to_string(e.bytes) + ' ' + std::to_string(e.value) + ' ' +
         std::to_string(e.id) + ' ' + std::to_string(e.track.pid) + ' ' +
         std::to_string(e.track.tid) + ' ' + std::to_string(e.track.device) + ' ' +
         t.names.at(e.name) + ' ' + std::to_string(static_cast<int>(e.phase)) + ' ' +
         std::to_string(static_cast<int>(e.category)) + ' ' + std::to_string(e.flags) + '\n';
  }
  for (const auto& [k, v] : t.tracks)
    o += "track " + std::to_string(k.pid) + ' ' + std::to_string(k.tid) + ' ' + v + '\n';
  for (const auto& [k, v] : t.processes) o += "process " + std::to_string(k) + ' ' + v + '\n';
  for (const auto& [k, v] : t.metadata) o += "meta " + k + '=' + v + '\n';
  return o;
}

// HTA's rows of a trace (critical_path_rows.h), every field, as text.
inline std::string cp_rows_fingerprint(const profiler::kineto::CpTrace& t) {
  std::string o = "rank " + std::to_string(t.rank) + " sync " + std::to_string(t.has_cuda_sync) +
                  " rows " + std::to_string(t.rows.size()) + '\n';
  for (const profiler::kineto::CpRow& r : t.rows) {
    for (const int64_t v : {r.ev_idx, r.pid, r.tid, r.ts, r.dur, r.stream, r.corr, r.wait_stream,
                            r.wait_corr, r.partner, static_cast<int64_t>(r.linked_corr)})
      o += std::to_string(v) + '|';
    o += r.name + '|' + r.cat;
    for (const auto& [k, v] : r.counters) o += '|' + k + '=' + std::to_string(v);
    o += '\n';
  }
  return o;
}

// The records' fingerprint of `text` read with `opt`, or "error: <message>".
inline std::string kineto_fingerprint(const std::string& text,
                                      const profiler::KinetoReadOptions& opt) {
  try {
    return records_fingerprint(profiler::read_kineto_records_from_memory(text, "fuzz", opt));
  } catch (const FormatError& e) {
    return std::string("error: ") + e.what();
  }
}

inline void fuzz_kineto(const std::string& text, size_t size) {
  // The reader's options from the size's low bits, so that mutations reach every combination.
  profiler::KinetoReadOptions opt;
  opt.keep_flows = (size & 1) != 0;
  opt.keep_instants = (size & 2) != 0;
  opt.keep_memory = (size & 4) == 0;
  opt.assign_steps = (size & 8) == 0;
  // Small buffers: tokens straddle refills.
  static constexpr size_t kBuffers[4] = {64, 1 << 20, 7, 4096};
  opt.buffer_bytes = kBuffers[(size >> 4) & 3];
  const bool two_ranks = (size & 64) != 0;
  // The chunked simdjson path and the streaming tokenizer agree on every input: the same
  // records, or the same error.
  {
    profiler::KinetoReadOptions streaming = opt;
    streaming.parallel_events = false;
    fuzz_check(kineto_fingerprint(text, opt) == kineto_fingerprint(text, streaming),
               "chunked and streaming Kineto readers disagree");
  }

  std::vector<profiler::KinetoTrace> ranks;
  try {
    ranks.push_back(profiler::read_kineto_records_from_memory(text, "fuzz", opt));
    if (two_ranks) {
      profiler::KinetoReadOptions other = opt;
      other.buffer_bytes = 1 << 20;
      ranks.push_back(profiler::read_kineto_records_from_memory(text, "fuzz rank 1", other));
    }
  } catch (const FormatError&) {
    return;
  }
  // ft-hta and ft-diagnose --hta-json write the analyses so (invalid UTF-8 as U+FFFD).
  (void)profiler::hta_analyses(ranks).dump(1, ' ', false, nlohmann::json::error_handler_t::replace);
  // HTA's row loader read in chunks gives the whole text's rows, or declines (then the whole
  // text is read).
  {
    const bool align = (size & 512) == 0;
    std::string whole;
    try {
      whole = cp_rows_fingerprint(profiler::kineto::load_cp_trace(text, align));
    } catch (const Error& e) {
      whole = std::string("error: ") + e.what();
    }
    const std::optional<profiler::kineto::CpTrace> chunked =
        profiler::kineto::load_cp_trace_chunked(profiler::kineto::memory_byte_source(text), "fuzz",
                                                align);
    fuzz_check(!chunked || cp_rows_fingerprint(*chunked) == whole,
               "HTA's rows read in chunks == those of the whole text");
  }
  // HTA's row loader (simdjson On-Demand) and critical path over the whole text: a bad input is
  // an ft::Error, never a crash.
  if ((size & 256) != 0) {
    try {
      profiler::CriticalPathOptions cp;
      cp.annotation = (size & 512) != 0 ? "" : "ProfilerStep";
      (void)profiler::critical_path_from_text(text, cp);
    } catch (const Error&) {
    }
  }
  profiler::Trace t;
  try {
    t = profiler::prepare_kineto_trace(std::move(ranks));
  } catch (const FormatError&) {
    return;
  }
  fuzz_diagnose(t);
  if ((size & 128) != 0) {
    try {
      (void)profiler::read_kineto_trace_from_memory(text, "fuzz", opt);
    } catch (const FormatError&) {
      fuzz_check(false, "read_kineto_trace_from_memory rejects what the records reader read");
    }
  }
}

inline void fuzz_ft_trace(const std::string& text) {
  profiler::Trace t;
  try {
    t = profiler::parse_trace_json(text, "fuzz trace.json");
  } catch (const FormatError&) {
    return;
  }
  fuzz_diagnose(t);
}

inline void fuzz_report_json(const std::string& text) {
  profiler::Diagnosis d;
  try {
    d = reports::parse_report_json(text, "fuzz");
  } catch (const FormatError&) {
    return;
  }
  fuzz_render_all(d);
}

}  // namespace ft::fuzz

// One input, start to end. Returns normally for good and for bad input alike.
inline void fuzz_one_input(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  ft::fuzz::fuzz_kineto(text, size);
  ft::fuzz::fuzz_ft_trace(text);
  ft::fuzz::fuzz_report_json(text);
}
