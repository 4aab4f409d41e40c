// critical_path_rows.cpp: Kineto JSON -> the rows HTA's critical-path analysis works on.
#include "critical_path_rows.h"

#include <fmt/format.h>
#include <simdjson.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <functional>
#include <optional>
#include <string_view>
#include <unordered_map>
#include <unordered_set>

#include "event_chunks.h"
#include "ft/core/error.h"
#include "json_stream.h"
#include "simd_parser.h"

namespace ft::profiler::kineto {

namespace {

namespace od = simdjson::ondemand;

// A JSON number as an integer the way nlohmann's get<int64_t> gives it (a float truncated).
int64_t int_of(od::value v) {
  od::number n = v.get_number();
  switch (n.get_number_type()) {
    case od::number_type::signed_integer:
      return n.get_int64();
    case od::number_type::unsigned_integer:
      return static_cast<int64_t>(n.get_uint64());
    default:
      return static_cast<int64_t>(n.get_double());
  }
}

// A pid/tid as an integer; names (e.g. "Spans") are hashed to a stable negative id.
int64_t id_of(od::value v) {
  switch (v.type()) {
    case od::json_type::number:
      return int_of(v);
    case od::json_type::string: {
      const std::string_view s = v.get_string();
      return -static_cast<int64_t>(std::hash<std::string_view>{}(s) >> 2) - 2;
    }
    default:
      return 0;
  }
}

int64_t arg_int(od::value v) { return v.type() == od::json_type::number ? int_of(v) : -1; }

// One traceEvents element as a row, or false when HTA's loader drops it (no ts, dur or cat, a
// cat that is not a string or is "Trace", a dur that is not a number).
bool read_row(od::value ev, int64_t ev_idx, CpRow* out) {
  if (ev.type() != od::json_type::object) return false;
  CpRow r;
  r.ev_idx = ev_idx;
  bool has_ts = false, has_dur = false, has_cat = false, cat_string = false, dur_number = false;
  bool ts_number = false;
  double ts = 0, dur = 0;
  for (auto field : ev.get_object()) {
    const std::string_view key = field.unescaped_key();
    od::value v = field.value();
    if (key == "name") {
      r.name = v.type() == od::json_type::string ? std::string(std::string_view(v.get_string()))
                                                 : std::string();
    } else if (key == "cat") {
      has_cat = true;
      cat_string = v.type() == od::json_type::string;
      if (cat_string) r.cat = std::string(std::string_view(v.get_string()));
    } else if (key == "pid") {
      r.pid = id_of(v);
    } else if (key == "tid") {
      r.tid = id_of(v);
    } else if (key == "ts") {
      has_ts = true;
      ts_number = v.type() == od::json_type::number;
      if (ts_number) ts = v.get_double();
    } else if (key == "dur") {
      has_dur = true;
      dur_number = v.type() == od::json_type::number;
      if (dur_number) dur = v.get_double();
    } else if (key == "args" && v.type() == od::json_type::object) {
      // A range-profiler kernel's numeric args are its counters (its category comes first in
      // Kineto's output; one written after args would lose them).
      const bool counters = r.cat == "cuda_profiler_range";
      for (auto a : v.get_object()) {
        const std::string_view k = a.unescaped_key();
        od::value av = a.value();
        if (k == "stream") {
          r.stream = arg_int(av);
        } else if (k == "correlation") {
          r.corr = arg_int(av);
        } else if (k == "wait_on_stream") {
          r.wait_stream = arg_int(av);
        } else if (k == "wait_on_cuda_event_record_corr_id") {
          r.wait_corr = arg_int(av);
        } else if (counters && av.type() == od::json_type::number) {
          r.counters.emplace_back(std::string(k), av.get_double());
        }
      }
    }
  }
  if (!has_ts || !has_dur || !has_cat || !cat_string || r.cat == "Trace" || !dur_number)
    return false;
  if (!ts_number) throw FormatError(fmt::format("traceEvents[{}]: ts is not a number", ev_idx));
  r.ts = static_cast<int64_t>(std::ceil(ts));
  r.dur = static_cast<int64_t>(std::floor(ts + dur)) - r.ts;
  *out = std::move(r);
  return true;
}

// HTA's last-step drop: with two or more ProfilerSteps, CPU rows from the last step's start on
// go, and so do GPU rows whose correlation no kept CPU row carries. CPU rows come first.
std::vector<CpRow> drop_last_step(std::vector<CpRow> rows) {
  int64_t last_step = INT64_MIN;
  size_t steps = 0;
  for (const CpRow& r : rows) {
    if (r.name.rfind("ProfilerStep#", 0) == 0) {
      ++steps;
      last_step = std::max(last_step, r.ts);
    }
  }
  if (steps < 2) return rows;
  std::vector<CpRow> kept;
  std::unordered_set<int64_t> kept_corr;
  for (CpRow& r : rows) {
    if (r.gpu() || r.ts >= last_step) continue;
    if (r.corr != -1) kept_corr.insert(r.corr);
    kept.push_back(std::move(r));
  }
  for (CpRow& r : rows) {
    if (r.gpu() && r.corr != -1 && kept_corr.count(r.corr)) kept.push_back(std::move(r));
  }
  return kept;
}

// HTA's index_correlation: GPU-side rows (a stream and a correlation, or a device-level sync)
// and CPU-side rows with the same correlation point at each other.
void link_partners(std::vector<CpRow>* rows) {
  std::unordered_map<int64_t, int64_t> cpu, gpu;
  auto gpu_side = [](const CpRow& r) {
    return (r.stream >= 0 && r.corr >= 0) || r.name == "Event Sync" || r.name == "Context Sync";
  };
  for (size_t i = 0; i < rows->size(); ++i) {
    CpRow& r = (*rows)[i];
    r.linked_corr = r.corr >= 0;
    if (r.corr == -1) continue;
    (gpu_side(r) ? gpu : cpu)[r.corr] = static_cast<int64_t>(i);
  }
  for (size_t i = 0; i < rows->size(); ++i) {
    CpRow& r = (*rows)[i];
    if (r.corr == -1) continue;
    const auto& other = gpu_side(r) ? cpu : gpu;
    const auto it = other.find(r.corr);
    if (it != other.end()) r.partner = it->second;
  }
}

// A document's rows and what load_cp_trace takes from beside them, before HTA's loading rules.
struct CpDocument {
  std::vector<CpRow> rows;
  bool has_cuda_sync = false;
  int64_t rank = 0;
  int event_arrays = 0;  // traceEvents arrays read (a repeated key: the last one counts)
};

CpDocument parse_cp_document(std::string& text) {
  // simdjson's On-Demand parser reads the text in place (it needs SIMDJSON_PADDING spare bytes):
  // no DOM of the whole trace is built.
  text.reserve(text.size() + simdjson::SIMDJSON_PADDING);
  CpDocument d;
  try {
    od::parser parser;
    od::document doc =
        parser.iterate(simdjson::padded_string_view(text.data(), text.size(), text.capacity()));
    int64_t ev_idx = 0;
    auto read_events = [&](od::array events) {
      ++d.event_arrays;
      for (auto e : events) {
        CpRow r;
        if (read_row(e.value(), ev_idx++, &r)) {
          if (r.cat == "cuda_sync") d.has_cuda_sync = true;
          d.rows.push_back(std::move(r));
        }
      }
    };
    if (doc.type() == od::json_type::array) {
      read_events(doc.get_array());
    } else {
      for (auto field : doc.get_object()) {
        const std::string_view key = field.unescaped_key();
        od::value v = field.value();
        if (key == "traceEvents" && v.type() == od::json_type::array) {
          d.rows.clear();  // a repeated key: the last one counts, as in a DOM
          ev_idx = 0;
          read_events(v.get_array());
        } else if (key == "distributedInfo" && v.type() == od::json_type::object) {
          for (auto f : v.get_object()) {
            if (f.unescaped_key() == std::string_view("rank")) {
              od::value rank = f.value();
              if (rank.type() == od::json_type::number &&
                  rank.get_number_type() != od::number_type::floating_point_number)
                d.rank = int_of(rank);
            }
          }
        }
      }
    }
  } catch (const simdjson::simdjson_error& e) {
    throw FormatError(std::string("invalid JSON: ") + e.what());
  }
  if (d.event_arrays == 0) throw FormatError("trace has no traceEvents");
  return d;
}

CpTrace finish_cp_trace(CpDocument d, bool align_and_cut) {
  CpTrace t;
  t.has_cuda_sync = d.has_cuda_sync;
  t.rank = d.rank;
  if (align_and_cut) {
    int64_t min_ts = INT64_MAX;
    for (const CpRow& r : d.rows) min_ts = std::min(min_ts, r.ts);
    for (CpRow& r : d.rows) r.ts -= min_ts;
    d.rows = drop_last_step(std::move(d.rows));
  }
  t.rows = std::move(d.rows);
  link_partners(&t.rows);
  return t;
}

// One chunk's rows, read as parse_cp_document reads the array's elements (EventPipeline's parse,
// on its threads), ev_idx counted from the chunk's first element. False on anything refused.
bool parse_cp_chunk(EventChunk* c, SimdParser& simd) {
  try {
    // A chunk's events sit one level higher than in the document (its array is the root).
    constexpr size_t kDepth = simdjson::DEFAULT_MAX_DEPTH - 1;
    if (simd.parser.max_depth() != kDepth) {
      if (simd.parser.allocate(c->len + 2, kDepth)) return false;
    }
    od::document doc = simd.parser.iterate(c->buf.data.get(), c->len + 2, c->len + 2 + 64);
    int64_t idx = 0;
    for (auto e : doc.get_array()) {
      CpRow r;
      if (read_row(e.value(), idx++, &r)) c->rows.push_back(std::move(r));
    }
    c->elements = static_cast<size_t>(idx);
    const char* loc = nullptr;
    return doc.current_location().get(loc) == simdjson::OUT_OF_BOUNDS;  // nothing follows
  } catch (...) {  // simdjson's errors, read_row's FormatError, allocation
    return false;
  }
}

// The bytes another source gives, kept as they pass until taken: the document's head.
class RecordingSource : public ByteSource {
 public:
  explicit RecordingSource(std::unique_ptr<ByteSource> in) : in_(std::move(in)) {}
  size_t read(char* buf, size_t cap) override {
    const size_t n = in_->read(buf, cap);
    if (recording_) kept_.append(buf, n);
    return n;
  }
  uint64_t compressed_bytes_read() const override { return in_->compressed_bytes_read(); }
  uint64_t size_hint() const override { return in_->size_hint(); }
  std::string take() {
    recording_ = false;
    return std::move(kept_);
  }

 private:
  std::unique_ptr<ByteSource> in_;
  std::string kept_;
  bool recording_ = true;
};

}  // namespace

// The top level is walked by the streaming tokenizer to traceEvents, the array read by
// EventPipeline in chunks of rows, and the rest of the document (its head and tail around an
// empty traceEvents) read by parse_cp_document for distributedInfo, its other keys and its syntax.
std::optional<CpTrace> load_cp_trace_chunked(std::unique_ptr<ByteSource> src,
                                             const std::string& label, bool align_and_cut) {
  constexpr size_t kChunkBytes = 128 << 10;  // as the Kineto reader's
  try {
    auto recording = std::make_unique<RecordingSource>(std::move(src));
    RecordingSource* rec = recording.get();
    JsonCursor cur(std::move(recording), label);
    if (cur.peek() != JsonType::kObject) return std::nullopt;
    cur.begin_object();
    std::string key;
    for (;;) {
      if (!cur.next_key(&key)) return std::nullopt;
      if (key == "traceEvents") break;
      cur.skip_value();
    }
    if (cur.peek() != JsonType::kArray) return std::nullopt;
    const uint64_t open_at = cur.offset();  // the array's '['
    cur.begin_array();
    const uint64_t offset = cur.offset();
    std::string unread;
    std::unique_ptr<ByteSource> events = cur.release(&unread);
    std::string skeleton = rec->take();
    skeleton.resize(open_at + 1);
    EventPipeline pipe(std::move(events), std::move(unread), offset, kChunkBytes, parse_cp_chunk);
    CpDocument d;
    size_t elements = 0;
    while (EventChunk* c = pipe.next()) {
      for (CpRow& r : c->rows) {
        r.ev_idx += static_cast<int64_t>(elements);
        if (r.cat == "cuda_sync") d.has_cuda_sync = true;
        d.rows.push_back(std::move(r));
      }
      elements += c->elements;
    }
    if (pipe.failed()) return std::nullopt;
    uint64_t rest_offset = 0;
    std::unique_ptr<ByteSource> rest = pipe.rest(&rest_offset);
    char buf[1 << 16];
    while (const size_t n = rest->read(buf, sizeof(buf))) skeleton.append(buf, n);
    const CpDocument around = parse_cp_document(skeleton);
    if (around.event_arrays != 1 || !around.rows.empty()) return std::nullopt;
    d.rank = around.rank;
    return finish_cp_trace(std::move(d), align_and_cut);
  } catch (const Error&) {
    return std::nullopt;
  }
}

CpTrace load_cp_trace(std::string text, bool align_and_cut) {
  return finish_cp_trace(parse_cp_document(text), align_and_cut);
}

CpTrace load_cp_trace_file(const std::string& path, bool align_and_cut) {
  if (std::optional<CpTrace> t = load_cp_trace_chunked(open_byte_source(path), path, align_and_cut))
    return std::move(*t);
  return load_cp_trace(read_all_text(path, simdjson::SIMDJSON_PADDING), align_and_cut);
}

}  // namespace ft::profiler::kineto
