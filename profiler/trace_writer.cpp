// trace_writer.cpp: Chrome trace-event JSON, streamed without building a document in memory.
#include "ft/profiler/trace_writer.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>

#include "ft/core/atomic_file.h"

namespace ft::profiler {
namespace {

constexpr int kFormatVersion = 1;

// Length of the valid UTF-8 sequence starting at s[i], or 0 if it is not valid.
size_t utf8_length(std::string_view s, size_t i) {
  const auto c = static_cast<unsigned char>(s[i]);
  size_t n = 0;
  uint32_t cp = 0;
  if (c >= 0xC2 && c <= 0xDF) {
    n = 2, cp = c & 0x1F;
  } else if (c >= 0xE0 && c <= 0xEF) {
    n = 3, cp = c & 0x0F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4, cp = c & 0x07;
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    const auto cc = static_cast<unsigned char>(s[i + k]);
    if ((cc & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (cc & 0x3F);
  }
  if ((n == 3 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) ||
      (n == 4 && (cp < 0x10000 || cp > 0x10FFFF))) {
    return 0;
  }
  return n;
}

void append(fmt::memory_buffer& out, std::string_view s) {
  out.append(s.data(), s.data() + s.size());
}

// Finite doubles in shortest round-trip form; NaN and infinities as strings (JSON has none).
void append_number(fmt::memory_buffer& out, double v) {
  if (std::isnan(v)) return append(out, "\"NaN\"");
  if (std::isinf(v)) return append(out, v > 0 ? "\"Infinity\"" : "\"-Infinity\"");
  fmt::format_to(std::back_inserter(out), "{}", v);
}

bool is_flow(const Event& e) { return e.phase == Phase::kFlowStart || e.phase == Phase::kFlowEnd; }

}  // namespace

void append_json_string(fmt::memory_buffer& out, std::string_view s) {
  out.push_back('"');
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      switch (c) {
        case '"':
          append(out, "\\\"");
          break;
        case '\\':
          append(out, "\\\\");
          break;
        case '\n':
          append(out, "\\n");
          break;
        case '\r':
          append(out, "\\r");
          break;
        case '\t':
          append(out, "\\t");
          break;
        case '\b':
          append(out, "\\b");
          break;
        case '\f':
          append(out, "\\f");
          break;
        default:
          if (c < 0x20 || c == 0x7F || c == '<' || c == '>' || c == '&') {
            fmt::format_to(std::back_inserter(out), "\\u{:04x}", c);
          } else {
            out.push_back(static_cast<char>(c));
          }
      }
      ++i;
      continue;
    }
    const size_t n = utf8_length(s, i);
    if (n == 0) {
      append(out, "\\ufffd");
      ++i;
    } else {
      append(out, s.substr(i, n));
      i += n;
    }
  }
  out.push_back('"');
}

const char* kineto_category(const Event& e) {
  if (is_flow(e)) return "ac2g";
  if (e.phase == Phase::kCounter) return "counter";
  if (e.track.device) {
    switch (e.category) {
      case Category::kCompute:
        return "kernel";
      case Category::kH2D:
      case Category::kD2H:
      case Category::kD2D:
        return "gpu_memcpy";
      case Category::kMemset:
        return "gpu_memset";
      case Category::kSync:
        return "cuda_sync";
      default:
        return "gpu_user_annotation";
    }
  }
  // Runtime API calls carry their correlation id; ft's own ranges never do.
  if (e.category == Category::kHost && e.id != 0) return "cuda_runtime";
  return "user_annotation";
}

ChromeTraceWriter::ChromeTraceWriter(Output output, size_t chunk_bytes)
    : output_(std::move(output)), chunk_bytes_(std::max<size_t>(chunk_bytes, 1024)) {}

void ChromeTraceWriter::flush(bool force) {
  if (buf_.size() == 0 || (!force && buf_.size() < chunk_bytes_)) return;
  output_(std::string_view(buf_.data(), buf_.size()));
  written_ += buf_.size();
  buf_.clear();
}

void ChromeTraceWriter::separator() {
  append(buf_, first_ ? "\n" : ",\n");
  first_ = false;
}

void ChromeTraceWriter::append_ts(int64_t ns) {
  const int64_t rel = ns - base_ns_;
  if (rel < 0) {
    const int64_t a = -rel;
    fmt::format_to(std::back_inserter(buf_), "-{}.{:03}", a / 1000, a % 1000);
  } else {
    fmt::format_to(std::back_inserter(buf_), "{}.{:03}", rel / 1000, rel % 1000);
  }
}

void ChromeTraceWriter::begin(const Trace& trace) {
  base_ns_ = 0;
  bool any = false;
  for (const Event& e : trace.events) {
    base_ns_ = any ? std::min(base_ns_, e.ts_ns) : e.ts_ns;
    any = true;
  }
  auto out = std::back_inserter(buf_);
  fmt::format_to(out, "{{\"schemaVersion\":1,\"displayTimeUnit\":\"ms\",\"traceName\":");
  append_json_string(buf_, trace.source.empty() ? std::string("ft") : trace.source);
  fmt::format_to(out,
                 ",\n\"ft\":{{\"format\":\"ft-trace\",\"version\":{},\"source\":", kFormatVersion);
  append_json_string(buf_, trace.source);
  fmt::format_to(out, ",\"base_ns\":{},\"dropped_events\":{},\"metadata\":{{", base_ns_,
                 trace.dropped_events);
  bool first = true;
  for (const auto& [k, v] : trace.metadata) {
    if (!first) buf_.push_back(',');
    first = false;
    append_json_string(buf_, k);
    buf_.push_back(':');
    append_json_string(buf_, v);
  }
  append(buf_, "}},\n\"traceEvents\":[");

  // Process and thread names for every process and track in use, devices marked.
  std::set<Track> tracks;
  for (const auto& [t, name] : trace.tracks) tracks.insert(t);
  for (const Event& e : trace.events) tracks.insert(e.track);
  std::set<std::pair<uint32_t, bool>> pids;
  for (const Track& t : tracks) pids.insert({t.pid, t.device});
  for (const auto& [pid, name] : trace.processes) {
    if (!pids.count({pid, true})) pids.insert({pid, false});
  }
  for (const auto& [pid, device] : pids) {
    separator();
    const auto it = trace.processes.find(pid);
    const std::string name =
        it != trace.processes.end()
            ? it->second
            : (device ? fmt::format("GPU {}", pid) : fmt::format("process {}", pid));
    fmt::format_to(
        out,
        "{{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":{},\"tid\":0,\"args\":{{\"name\":", pid);
    append_json_string(buf_, name);
    append(buf_, device ? ",\"ft_device\":true}}" : "}}");
  }
  for (const Track& t : tracks) {
    separator();
    const auto it = trace.tracks.find(t);
    const std::string name =
        it != trace.tracks.end()
            ? it->second
            : (t.device ? fmt::format("stream {}", t.tid) : fmt::format("thread {}", t.tid));
    fmt::format_to(
        out,
        "{{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":{},\"tid\":{},\"args\":{{\"name\":", t.pid,
        t.tid);
    append_json_string(buf_, name);
    append(buf_, t.device ? ",\"ft_device\":true}}" : "}}");
  }
  flush(false);
}

void ChromeTraceWriter::event(const Trace& trace, const Event& e) {
  separator();
  auto out = std::back_inserter(buf_);
  const char* ph = "X";
  switch (e.phase) {
    case Phase::kSpan:
      ph = "X";
      break;
    case Phase::kInstant:
      ph = "i";
      break;
    case Phase::kCounter:
      ph = "C";
      break;
    case Phase::kFlowStart:
      ph = "s";
      break;
    case Phase::kFlowEnd:
      ph = "f";
      break;
  }
  fmt::format_to(out, "{{\"ph\":\"{}\",\"cat\":\"{}\",\"name\":", ph, kineto_category(e));
  append_json_string(buf_, e.name < trace.names.size() ? trace.names.at(e.name) : std::string());
  fmt::format_to(out, ",\"pid\":{},\"tid\":{},\"ts\":", e.track.pid, e.track.tid);
  append_ts(e.ts_ns);
  if (e.phase == Phase::kSpan) {
    append(buf_, ",\"dur\":");
    const int64_t d = std::max<int64_t>(e.dur_ns, 0);
    fmt::format_to(out, "{}.{:03}", d / 1000, d % 1000);
  }
  if (e.phase == Phase::kInstant) append(buf_, ",\"s\":\"t\"");
  if (is_flow(e)) {
    fmt::format_to(out, ",\"id\":{}", e.id);
    if (e.phase == Phase::kFlowEnd) append(buf_, ",\"bp\":\"e\"");
    if (e.step >= 0) fmt::format_to(out, ",\"ft_step\":{}", e.step);
    append(buf_, "}");
    flush(false);
    return;
  }
  if (e.phase == Phase::kCounter) {
    // Counter args are plotted series: only the value goes there.
    if (e.step >= 0) fmt::format_to(out, ",\"ft_step\":{}", e.step);
    append(buf_, ",\"args\":{");
    append_json_string(buf_, e.name < trace.names.size() ? trace.names.at(e.name) : std::string());
    buf_.push_back(':');
    append_number(buf_, e.value);
    append(buf_, "}}");
    flush(false);
    return;
  }
  fmt::format_to(out, ",\"args\":{{\"ft_cat\":\"{}\"", category_name(e.category));
  if (e.step >= 0) fmt::format_to(out, ",\"step\":{}", e.step);
  if (e.arg >= 0) fmt::format_to(out, ",\"arg\":{}", e.arg);
  if (e.bytes) fmt::format_to(out, ",\"bytes\":{}", e.bytes);
  if (e.flags) fmt::format_to(out, ",\"flags\":{}", e.flags);
  if (e.id) fmt::format_to(out, ",\"correlation\":{}", e.id);
  if (e.value != 0) {
    append(buf_, ",\"value\":");
    append_number(buf_, e.value);
  }
  append(buf_, "}}");
  flush(false);
}

void ChromeTraceWriter::finish(const Trace&) {
  append(buf_, "\n]}\n");
  flush(true);
}

void write_trace(const Trace& trace, TraceSink& sink) {
  std::vector<uint32_t> order(trace.events.size());
  std::iota(order.begin(), order.end(), 0u);
  std::stable_sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
    const Event& x = trace.events[a];
    const Event& y = trace.events[b];
    if (x.ts_ns != y.ts_ns) return x.ts_ns < y.ts_ns;
    return x.dur_ns > y.dur_ns;
  });
  sink.begin(trace);
  for (uint32_t i : order) sink.event(trace, trace.events[i]);
  sink.finish(trace);
}

std::string trace_to_json(const Trace& trace) {
  std::string s;
  ChromeTraceWriter w([&](std::string_view chunk) { s.append(chunk); });
  write_trace(trace, w);
  return s;
}

uint64_t write_trace_json(const Trace& trace, const std::filesystem::path& path) {
  AtomicFileWriter file(path);
  ChromeTraceWriter w([&](std::string_view chunk) { file.write(chunk.data(), chunk.size()); });
  write_trace(trace, w);
  file.commit();
  return w.bytes_written();
}

}  // namespace ft::profiler
