// event_chunk_parser.cpp: one chunk of trace events parsed by simdjson On-Demand, every value
// checked as the streaming reader (kineto_reader.cpp) checks it.
#include <simdjson.h>

#include <charconv>
#include <cstring>

#include "event_chunks.h"
#include "simd_parser.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace ft::profiler::kineto {
namespace {

namespace od = simdjson::ondemand;

// Deeper values go to the streaming reader, which knows the exact limit (512).
constexpr int kMaxFastDepth = 64;

// A string at `raw` (just past its quote) that ends before any backslash or control byte: its
// text. Stage 1 has matched every quote of the chunk, so the string ends inside it and the
// 16-byte reads stay inside the padding.
bool plain_string(const char* raw, std::string_view* out) {
#if defined(__SSE2__)
  const __m128i quote = _mm_set1_epi8('"'), slash = _mm_set1_epi8('\\');
  const __m128i ctl = _mm_set1_epi8(0x1f);
  for (const char* p = raw;; p += 16) {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    const __m128i hit =
        _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, quote), _mm_cmpeq_epi8(v, slash)),
                     _mm_cmpeq_epi8(_mm_max_epu8(v, ctl), ctl));
    const int m = _mm_movemask_epi8(hit);
    if (m == 0) continue;
    const char* q = p + __builtin_ctz(static_cast<unsigned>(m));
    if (*q != '"') return false;
    *out = std::string_view(raw, static_cast<size_t>(q - raw));
    return true;
  }
#else
  (void)raw;
  (void)out;
  return false;
#endif
}

// Parses one chunk; each member mirrors the streaming reader (kineto_reader.cpp).
class ChunkParser {
 public:
  explicit ChunkParser(EventChunk* c) : c_(*c), end_(c->buf.data.get() + c->len + 2) {}

  bool run(od::parser& parser) {
    od::document doc;
    static_assert(simdjson::SIMDJSON_PADDING <= 64, "event_chunks.cpp pads chunks with 64 bytes");
    if (parser.iterate(c_.buf.data.get(), c_.len + 2, c_.len + 2 + 64).get(doc)) return false;
    od::array arr;
    if (doc.get_array().get(arr)) return false;
    for (auto el : arr) {
      od::object obj;
      if (el.error()) return false;
      od::value&& v = std::move(el).value_unsafe();  // in place: no copy
      if (v.get_object().get(obj)) return false;
      RawEvent& ev = c_.events.emplace_back();
      // A span without ts is the streaming reader's error (it names the byte).
      if (!event(obj, &ev) || (ev.ph == 'X' && !ev.has_ts)) return false;
    }
    // Nothing may follow the array (the scan's brackets and simdjson's agree; checked anyway).
    const char* loc = nullptr;
    return doc.current_location().get(loc) == simdjson::OUT_OF_BOUNDS;
  }

 private:
  // A string value or key at `raw` (just past its quote); escaped text is kept in the chunk.
  bool string_at(const char* raw, std::string_view* out) {
    if (plain_string(raw, out)) return true;
    const char* e = scan_json_string(raw, end_, out, &scratch_);
    if (e == nullptr) return false;
    if (out->data() == scratch_.data()) *out = c_.escaped.emplace_back(scratch_);
    return true;
  }
  bool string(od::value& v, std::string_view* out) {
    od::raw_json_string r;
    return !v.get_raw_json_string().get(r) && string_at(r.raw(), out);
  }
  bool key(od::field& f, std::string_view* out) {
    const char* raw = f.key().raw();
    if (plain_string(raw, out)) return true;
    const char* e = scan_json_string(raw, end_, out, &scratch_);
    return e != nullptr;  // classified before the next key is read
  }
  bool number(od::value& v, bool want_value, JsonNumber* n) {
    const std::string_view tok = v.raw_json_token();
    // Most numbers are plain integers (plain_json_integer): read in one pass over the token.
    if (const size_t digits = plain_json_integer(tok.data(), tok.size(), n)) {
      for (size_t i = digits; i < tok.size(); ++i)
        if (!is_json_ws(tok[i])) return false;
      return true;
    }
    size_t len = 0;
    while (len < tok.size() && is_json_number_char(tok[len])) ++len;
    for (size_t i = len; i < tok.size(); ++i)
      if (!is_json_ws(tok[i])) return false;
    return parse_json_number(tok.data(), len, want_value, n);
  }
  bool literal(od::value& v, std::string_view word) {
    const std::string_view tok = v.raw_json_token();
    if (!tok.starts_with(word)) return false;
    for (size_t i = word.size(); i < tok.size(); ++i)
      if (!is_json_ws(tok[i])) return false;
    return true;
  }
  bool type(od::value& v, od::json_type* t) { return !v.type().get(*t); }

  // JsonCursor::skip_value: any value, checked all through.
  bool skip(od::value& v, int depth) {
    od::json_type t;
    if (!type(v, &t)) return false;
    switch (t) {
      case od::json_type::object: {
        od::object o;
        if (depth >= kMaxFastDepth || v.get_object().get(o)) return false;
        for (auto fr : o) {
          if (fr.error()) return false;
          od::field&& f = std::move(fr).value_unsafe();  // in place: no copy of the field
          std::string_view k;
          if (!key(f, &k) || !skip(f.value(), depth + 1)) return false;
        }
        return true;
      }
      case od::json_type::array: {
        od::array a;
        if (depth >= kMaxFastDepth || v.get_array().get(a)) return false;
        for (auto er : a) {
          if (er.error()) return false;
          od::value&& e = std::move(er).value_unsafe();  // in place: no copy
          if (!skip(e, depth + 1)) return false;
        }
        return true;
      }
      case od::json_type::string: {
        std::string_view s;
        return string(v, &s);
      }
      case od::json_type::number: {
        JsonNumber n;
        return number(v, false, &n);
      }
      case od::json_type::boolean:
        return literal(v, "true") || literal(v, "false");
      case od::json_type::null:
        return literal(v, "null");
    }
    return false;
  }

  // Reader::read_id.
  bool id(od::value& v, IdValue* out, int depth) {
    od::json_type t;
    if (!type(v, &t)) return false;
    out->present = true;
    if (t == od::json_type::string) {
      out->is_string = true;
      return string(v, &out->str);
    }
    if (t == od::json_type::number) {
      JsonNumber n;
      if (!number(v, true, &n)) return false;
      out->is_string = false;
      out->num = n.int_ok                              ? n.int_value
                 : (n.value > -9e18 && n.value < 9e18) ? static_cast<int64_t>(n.value)
                                                       : 0;
      return true;
    }
    out->present = false;
    return skip(v, depth);
  }

  // Reader::read_int_or.
  bool int_or(od::value& v, int64_t fallback, int64_t* out, bool* numeric, int depth) {
    od::json_type t;
    if (!type(v, &t)) return false;
    *out = fallback;
    if (t == od::json_type::number) {
      JsonNumber n;
      if (!number(v, true, &n)) return false;
      if (numeric) *numeric = true;
      if (n.int_ok)
        *out = n.int_value;
      else if (n.value > -9e18 && n.value < 9e18)
        *out = static_cast<int64_t>(n.value);
      return true;
    }
    if (t == od::json_type::string) {
      std::string_view s;
      if (!string(v, &s)) return false;
      int64_t x = 0;
      const auto r = std::from_chars(s.data(), s.data() + s.size(), x);
      if (r.ec == std::errc() && r.ptr == s.data() + s.size() && !s.empty()) {
        if (numeric) *numeric = true;
        *out = x;
      }
      return true;
    }
    return skip(v, depth);
  }

  bool double_or(od::value& v, double fallback, double* out, int depth) {
    od::json_type t;
    if (!type(v, &t)) return false;
    if (t != od::json_type::number) {
      *out = fallback;
      return skip(v, depth);
    }
    JsonNumber n;
    if (!number(v, true, &n)) return false;
    *out = n.value;
    return true;
  }

  // Reader::read_time: a µs time as exact ns; out of range is the streaming reader's error.
  bool time(od::value& v, int64_t* ns, bool* has) {
    od::json_type t;
    if (!type(v, &t)) return false;
    if (t != od::json_type::number) return skip(v, 2);
    JsonNumber n;
    if (!number(v, false, &n)) return false;
    constexpr int64_t kMaxNs = int64_t{1} << 62;
    if (!n.ns_ok || n.micros_to_ns >= kMaxNs || n.micros_to_ns <= -kMaxNs) return false;
    *ns = n.micros_to_ns;
    *has = true;
    return true;
  }

  bool string_or_skip(od::value& v, std::string_view* out, bool* has, int depth) {
    od::json_type t;
    if (!type(v, &t)) return false;
    if (t != od::json_type::string) return skip(v, depth);
    if (has) *has = true;
    return string(v, out);
  }

  bool event(od::object& obj, RawEvent* ev);
  bool args(od::value& v, RawEvent* ev);

  EventChunk& c_;
  const char* end_;
  std::string scratch_;
};

// Reader::read_event_object.
bool ChunkParser::event(od::object& obj, RawEvent* ev) {
  for (auto fr : obj) {
    if (fr.error()) return false;
    od::field&& f = std::move(fr).value_unsafe();  // in place: no copy of the field
    std::string_view k;
    if (!key(f, &k)) return false;
    od::value& v = f.value();
    bool ok = true;
    switch (event_key(k)) {
      case EventKey::kPh: {
        od::json_type t;
        if (!type(v, &t)) return false;
        if (t == od::json_type::string) {
          std::string_view s;
          ok = string(v, &s);
          ev->ph = s.size() == 1 ? s[0] : '?';
        } else {
          ok = skip(v, 2);
        }
        break;
      }
      case EventKey::kTs:
        ok = time(v, &ev->ts_ns, &ev->has_ts);
        break;
      case EventKey::kDur:
        ok = time(v, &ev->dur_ns, &ev->has_dur);
        break;
      case EventKey::kName:
        ok = string_or_skip(v, &ev->name, nullptr, 2);
        break;
      case EventKey::kCat:
        ok = string_or_skip(v, &ev->cat, &ev->has_cat, 2);
        break;
      case EventKey::kPid:
        ok = id(v, &ev->pid, 2);
        break;
      case EventKey::kTid:
        ok = id(v, &ev->tid, 2);
        break;
      case EventKey::kId: {
        bool numeric = false;
        int64_t x = 0;
        ok = int_or(v, 0, &x, &numeric, 2);
        ev->flow_id = static_cast<uint64_t>(x);
        ev->has_flow_id = numeric;
        break;
      }
      case EventKey::kArgs: {
        od::json_type t;
        if (!type(v, &t)) return false;
        ok = t == od::json_type::object ? args(v, ev) : skip(v, 2);
        break;
      }
      case EventKey::kOther:
        ok = skip(v, 2);
        break;
    }
    if (!ok) return false;
  }
  return true;
}

// Reader::read_args.
bool ChunkParser::args(od::value& av, RawEvent* ev) {
  od::object o;
  if (av.get_object().get(o)) return false;
  for (auto fr : o) {
    if (fr.error()) return false;
    od::field&& f = std::move(fr).value_unsafe();  // in place: no copy of the field
    std::string_view k;
    if (!key(f, &k)) return false;
    const ArgKey ak = arg_key(k);
    od::value& v = f.value();
    od::json_type t;
    if (!type(v, &t)) return false;
    bool ok = true;
    bool other = false;
    switch (ak) {
      case ArgKey::kStream: {
        bool numeric = false;
        int64_t x = 0;
        ok = int_or(v, -1, &x, &numeric, 3);
        ev->stream_numeric = numeric;
        ev->stream = numeric ? x : -1;
        break;
      }
      case ArgKey::kCorrelation:
        ok = int_or(v, 0, &ev->correlation, nullptr, 3);
        break;
      case ArgKey::kExternalId:
        ok = int_or(v, -1, &ev->external_id, nullptr, 3);
        break;
      case ArgKey::kDevice: {
        bool numeric = false;
        ok = int_or(v, -1, &ev->device, &numeric, 3);
        ev->has_device = numeric;
        break;
      }
      case ArgKey::kBytes:
        ok = int_or(v, -1, &ev->bytes, nullptr, 3);
        break;
      case ArgKey::kMemBw:
        if (t != od::json_type::number) {
          other = true;
          break;
        }
        ok = double_or(v, 0, &ev->mem_bw, 3);
        ev->has_mem_bw = true;
        break;
      case ArgKey::kMemBytes:
        ok = int_or(v, 0, &ev->mem_bytes, nullptr, 3);
        ev->has_mem = true;
        break;
      case ArgKey::kTotalAllocated:
        ok = double_or(v, 0, &ev->total_allocated, 3);
        break;
      case ArgKey::kTotalReserved:
        ok = double_or(v, 0, &ev->total_reserved, 3);
        break;
      case ArgKey::kInNelems:
        ok = int_or(v, -1, &ev->in_nelems, nullptr, 3);
        break;
      case ArgKey::kDtype:
      case ArgKey::kName:
      case ArgKey::kDirection:
        if (t != od::json_type::string) {
          other = true;
          break;
        }
        ok = string(v, ak == ArgKey::kDtype  ? &ev->dtype
                       : ak == ArgKey::kName ? &ev->arg_name
                                             : &ev->direction);
        break;
      case ArgKey::kOther:
        other = true;
        break;
    }
    if (other) {
      // The first other number is a counter event's value (when the phase allows one).
      if (!ev->has_counter_value && t == od::json_type::number && (ev->ph == 0 || ev->ph == 'C')) {
        ok = double_or(v, 0, &ev->counter_value, 3);
        ev->has_counter_value = true;
      } else {
        ok = skip(v, 3);
      }
    }
    if (!ok) return false;
  }
  return true;
}

}  // namespace

SimdParserPtr make_simd_parser() { return SimdParserPtr(new SimdParser); }
void SimdParserDeleter::operator()(SimdParser* p) const { delete p; }

bool parse_event_chunk(EventChunk* c, SimdParser& simd) {
  od::parser& parser = simd.parser;
  try {
    return ChunkParser(c).run(parser);
  } catch (...) {  // allocation failure: the streaming reader tries again and reports
    return false;
  }
}

}  // namespace ft::profiler::kineto
