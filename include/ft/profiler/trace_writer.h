// trace_writer.h: streams a Trace as Chrome/Perfetto trace-event JSON with Kineto-like categories.
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <string_view>

#include "ft/profiler/event.h"

namespace ft::profiler {

// Receives a trace event by event, libkineto's ActivityLogger style: begin(), one event()
// per event in time order, finish().
class TraceSink {
 public:
  virtual ~TraceSink() = default;
  virtual void begin(const Trace& trace) = 0;
  virtual void event(const Trace& trace, const Event& e) = 0;
  virtual void finish(const Trace& trace) = 0;
};

// The Kineto category an event is written with: host ranges "user_annotation", runtime API
// calls "cuda_runtime", device "kernel" / "gpu_memcpy" / "gpu_memset" / "cuda_sync", flows
// "ac2g", counters "counter". ft's own category is kept in args.ft_cat.
const char* kineto_category(const Event& e);

// Appends `s` as a JSON string literal: quotes, backslashes and control characters escaped,
// '<', '>' and '&' as \u003c.. (safe inside HTML), invalid UTF-8 replaced by U+FFFD.
void append_json_string(fmt::memory_buffer& out, std::string_view s);

// Chrome trace-event JSON ({"traceEvents": [...]}), one event per line, streamed through
// `output` in chunks; timestamps in microseconds relative to the earliest event, with ns
// precision (3 decimals), the base stored as ft.base_ns so the reader restores them exactly.
class ChromeTraceWriter final : public TraceSink {
 public:
  using Output = std::function<void(std::string_view)>;
  explicit ChromeTraceWriter(Output output, size_t chunk_bytes = size_t{1} << 16);
  void begin(const Trace& trace) override;
  void event(const Trace& trace, const Event& e) override;
  void finish(const Trace& trace) override;
  uint64_t bytes_written() const { return written_; }

 private:
  void separator();
  void flush(bool force);
  void append_ts(int64_t ns);

  Output output_;
  size_t chunk_bytes_;
  fmt::memory_buffer buf_;
  int64_t base_ns_ = 0;
  bool first_ = true;
  uint64_t written_ = 0;
};

// Feeds every event of `trace` to `sink`: metadata first, then by time (longer spans first
// at equal start, so parents precede children).
void write_trace(const Trace& trace, TraceSink& sink);
// The whole trace as JSON text (tests, small traces).
std::string trace_to_json(const Trace& trace);
// Writes `path` atomically (temp file, fsync, rename); returns the bytes written.
// Throws IoError.
uint64_t write_trace_json(const Trace& trace, const std::filesystem::path& path);

}  // namespace ft::profiler
