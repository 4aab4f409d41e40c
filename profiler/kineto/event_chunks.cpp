// event_chunks.cpp: the traceEvents array split at event boundaries and parsed by simdjson
// On-Demand on worker threads; every value is checked as the streaming reader checks it.
#include "event_chunks.h"

#include <simdjson.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace ft::profiler::kineto {
namespace {

namespace od = simdjson::ondemand;

// Deeper values go to the streaming reader, which knows the exact limit (512).
constexpr int kMaxFastDepth = 64;

bool is_ws(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }
bool number_char(char c) {
  return (c >= '0' && c <= '9') || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E';
}

#if defined(__SSE2__)
// Bit i set where byte i of a 64-byte block is a quote, a backslash, '{' or '[', '}' or ']'.
struct Block64 {
  uint64_t quote = 0, backslash = 0, open = 0, close = 0;
};

Block64 block64(const char* p) {
  Block64 b;
  const __m128i quote = _mm_set1_epi8('"'), slash = _mm_set1_epi8('\\');
  const __m128i open = _mm_set1_epi8('{'), close = _mm_set1_epi8('}'), bit5 = _mm_set1_epi8(0x20);
  for (int k = 0; k < 4; ++k) {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16 * k));
    const __m128i folded = _mm_or_si128(v, bit5);  // '[' -> '{', ']' -> '}'
    auto bits = [&](__m128i eq) {
      return static_cast<uint64_t>(static_cast<uint16_t>(_mm_movemask_epi8(eq))) << (16 * k);
    };
    b.quote |= bits(_mm_cmpeq_epi8(v, quote));
    b.backslash |= bits(_mm_cmpeq_epi8(v, slash));
    b.open |= bits(_mm_cmpeq_epi8(folded, open));
    b.close |= bits(_mm_cmpeq_epi8(folded, close));
  }
  return b;
}

// Bit i = parity of the set bits 0..i.
uint64_t prefix_xor(uint64_t x) {
  x ^= x << 1;
  x ^= x << 2;
  x ^= x << 4;
  x ^= x << 8;
  x ^= x << 16;
  x ^= x << 32;
  return x;
}
#endif

// A string at `raw` (just past its quote) that ends before any backslash or control byte: its
// text. Stage 1 has matched every quote of the chunk, so the string ends inside it and the
// 16-byte reads stay inside the padding.
bool plain_string(const char* raw, std::string_view* out) {
#if defined(__SSE2__)
  const __m128i quote = _mm_set1_epi8('"'), slash = _mm_set1_epi8('\\');
  const __m128i ctl = _mm_set1_epi8(0x1f);
  for (const char* p = raw;; p += 16) {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    const __m128i hit = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, quote), _mm_cmpeq_epi8(v, slash)),
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
  explicit ChunkParser(EventChunk* c) : c_(*c), end_(c->buf.data() + c->len + 2) {}

  bool run(od::parser& parser) {
    od::document doc;
    if (parser.iterate(c_.buf.data(), c_.len + 2, c_.buf.size()).get(doc)) return false;
    od::array arr;
    if (doc.get_array().get(arr)) return false;
    for (auto el : arr) {
      od::value v;
      od::object obj;
      if (el.get(v) || v.get_object().get(obj)) return false;
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
    size_t len = 0;
    while (len < tok.size() && number_char(tok[len])) ++len;
    for (size_t i = len; i < tok.size(); ++i)
      if (!is_ws(tok[i])) return false;
    return parse_json_number(tok.data(), len, want_value, n);
  }
  bool literal(od::value& v, std::string_view word) {
    const std::string_view tok = v.raw_json_token();
    if (!tok.starts_with(word)) return false;
    for (size_t i = word.size(); i < tok.size(); ++i)
      if (!is_ws(tok[i])) return false;
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
          od::field f;
          std::string_view k;
          if (std::move(fr).get(f) || !key(f, &k) || !skip(f.value(), depth + 1)) return false;
        }
        return true;
      }
      case od::json_type::array: {
        od::array a;
        if (depth >= kMaxFastDepth || v.get_array().get(a)) return false;
        for (auto er : a) {
          od::value e;
          if (er.get(e) || !skip(e, depth + 1)) return false;
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
    od::field f;
    std::string_view k;
    if (std::move(fr).get(f) || !key(f, &k)) return false;
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
    od::field f;
    std::string_view k;
    if (std::move(fr).get(f) || !key(f, &k)) return false;
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

bool parse_chunk(EventChunk* c, od::parser& parser) {
  try {
    return ChunkParser(c).run(parser);
  } catch (...) {  // allocation failure: the streaming reader tries again and reports
    return false;
  }
}

// The bytes of the chunks the fast path gave up on, then the rest of the input.
class ChainSource : public ByteSource {
 public:
  ChainSource(std::deque<std::string> pieces, std::unique_ptr<ByteSource> tail)
      : pieces_(std::move(pieces)), tail_(std::move(tail)) {}
  size_t read(char* buf, size_t cap) override {
    while (!pieces_.empty()) {
      std::string& p = pieces_.front();
      if (at_ == p.size()) {
        pieces_.pop_front();
        at_ = 0;
        continue;
      }
      const size_t n = std::min(cap, p.size() - at_);
      std::memcpy(buf, p.data() + at_, n);
      at_ += n;
      return n;
    }
    return tail_ ? tail_->read(buf, cap) : 0;
  }
  uint64_t compressed_bytes_read() const override {
    return tail_ ? tail_->compressed_bytes_read() : 0;
  }
  uint64_t size_hint() const override { return tail_ ? tail_->size_hint() : 0; }

 private:
  std::deque<std::string> pieces_;
  size_t at_ = 0;
  std::unique_ptr<ByteSource> tail_;
};

}  // namespace

std::string EventChunk::text() const {
  std::string t = buf.substr(1, len);
  if (comma != std::string::npos) t[comma - 1] = ',';
  return t;
}

// Worker threads and their queue; the caller's thread takes queued chunks too while it waits.
struct EventPipeline::Shared {
  std::mutex mu;
  std::condition_variable work, finished;
  std::deque<EventChunk*> queue;
  bool stop = false;
  std::vector<std::thread> threads;
  od::parser parser;  // the caller's thread's

  // Parses queued chunks until `until` is done (nullptr: until stopped).
  void serve(od::parser& p, EventChunk* until) {
    std::unique_lock<std::mutex> lock(mu);
    for (;;) {
      if (until ? until->done : stop) return;
      if (queue.empty()) {
        (until ? finished : work).wait(lock);
        continue;
      }
      EventChunk* c = queue.front();
      queue.pop_front();
      lock.unlock();
      const bool ok = parse_chunk(c, p);
      lock.lock();
      c->ok = ok;
      c->done = true;
      finished.notify_all();
    }
  }
};

EventPipeline::EventPipeline(std::unique_ptr<ByteSource> src, std::string unread, uint64_t offset,
                             size_t chunk_bytes)
    : src_(std::move(src)),
      pending_(std::move(unread)),
      pending_offset_(offset),
      chunk_bytes_(std::max<size_t>(chunk_bytes, 1)),
      shared_(std::make_unique<Shared>()) {
  scan();
}

EventPipeline::~EventPipeline() {
  {
    std::lock_guard<std::mutex> lock(shared_->mu);
    shared_->stop = true;
    shared_->queue.clear();
  }
  shared_->work.notify_all();
  for (std::thread& t : shared_->threads) t.join();
}

void EventPipeline::start_workers() {
  const unsigned hw = std::max(2u, std::thread::hardware_concurrency());
  for (unsigned i = 0; i + 1 < hw; ++i) {
    shared_->threads.emplace_back([s = shared_.get()] {
      od::parser p;
      s->serve(p, nullptr);
    });
  }
}

void EventPipeline::scan_byte(char c, size_t pos) {
  if (in_string_) {
    if (escape_)
      escape_ = false;
    else if (c == '\\')
      escape_ = true;
    else if (c == '"')
      in_string_ = false;
    return;
  }
  if (c == '"') {
    in_string_ = true;
  } else if (c == '{' || c == '[') {
    ++depth_;
  } else if (c == '}' || c == ']') {
    if (--depth_ == 0)
      boundary_ = pos + 1;
    else if (depth_ < 0)
      array_end_ = true;  // the array's own ']'
  }
}

void EventPipeline::scan() {
  const char* p = pending_.data();
  const size_t n = pending_.size();
  size_t i = scanned_;
  while (i < n && !array_end_) {
#if defined(__SSE2__)
    // 64 bytes at a time when they hold no backslash: the bytes inside strings are the prefix
    // XOR of the quotes, and only the brackets outside them are walked.
    if (n - i >= 64 && !escape_) {
      const Block64 b = block64(p + i);
      if (b.backslash == 0) {
        uint64_t in = prefix_xor(b.quote);
        if (in_string_) in = ~in;
        const uint64_t opens = b.open & ~in;
        uint64_t brackets = (b.open | b.close) & ~in;
        while (brackets != 0) {
          const int k = __builtin_ctzll(brackets);
          brackets &= brackets - 1;
          if ((opens >> k) & 1) {
            ++depth_;
          } else if (--depth_ == 0) {
            boundary_ = i + static_cast<size_t>(k) + 1;
          } else if (depth_ < 0) {
            array_end_ = true;
            break;
          }
        }
        in_string_ = (in >> 63) != 0;
        i += 64;
        continue;
      }
      for (const size_t e = i + 64; i < e && !array_end_; ++i) scan_byte(p[i], i);
      continue;
    }
#endif
    scan_byte(p[i], i);
    ++i;
  }
  scanned_ = i;
}

void EventPipeline::cut() {
  auto c = std::make_unique<EventChunk>();
  c->offset = pending_offset_;
  c->len = boundary_;
  c->buf.reserve(boundary_ + 2 + simdjson::SIMDJSON_PADDING);
  c->buf.push_back('[');
  c->buf.append(pending_, 0, boundary_);
  c->buf.push_back(']');
  c->buf.append(simdjson::SIMDJSON_PADDING, '\0');
  pending_.erase(0, boundary_);
  pending_offset_ += boundary_;
  scanned_ -= boundary_;
  boundary_ = 0;
  // The first chunk starts at its first event; the others at the comma before theirs.
  size_t i = 1;
  while (i <= c->len && is_ws(c->buf[i])) ++i;
  bool shape_ok = i <= c->len;
  if (shape_ok && !first_chunk_) {
    shape_ok = c->buf[i] == ',';
    if (shape_ok) {
      c->buf[i] = ' ';
      c->comma = i;
    }
  }
  first_chunk_ = false;
  EventChunk* raw = c.get();
  window_.push_back(std::move(c));
  if (!shape_ok) {
    raw->done = true;  // left to the streaming reader
    return;
  }
  if (window_.size() == 2 && shared_->threads.empty()) {
    start_workers();
    std::lock_guard<std::mutex> lock(shared_->mu);
    if (!window_.front()->done) shared_->queue.push_back(window_.front().get());
  }
  if (!shared_->threads.empty()) {
    std::lock_guard<std::mutex> lock(shared_->mu);
    shared_->queue.push_back(raw);
  }
  shared_->work.notify_one();
}

bool EventPipeline::split_one() {
  for (;;) {
    if (boundary_ > 0 && (boundary_ >= chunk_bytes_ || array_end_ || eof_)) {
      cut();
      return true;
    }
    if (array_end_ || eof_) return false;
    const size_t old = pending_.size();
    pending_.resize(old + chunk_bytes_);
    const size_t got = src_->read(pending_.data() + old, chunk_bytes_);
    pending_.resize(old + got);
    if (got == 0) {
      eof_ = true;
      continue;
    }
    scan();
  }
}

const EventChunk* EventPipeline::next() {
  current_.reset();
  if (failed_) return nullptr;
  const size_t window = 2 * std::max(2u, std::thread::hardware_concurrency()) + 1;
  while (window_.size() < window && split_one()) {
  }
  if (window_.empty()) return nullptr;
  std::unique_ptr<EventChunk> c = std::move(window_.front());
  window_.pop_front();
  if (shared_->threads.empty()) {
    if (!c->done) {  // a lone chunk: parsed here
      c->ok = parse_chunk(c.get(), shared_->parser);
      c->done = true;
    }
  } else {
    shared_->serve(shared_->parser, c.get());
  }
  if (!c->ok) {
    failed_ = std::move(c);
    return nullptr;
  }
  current_ = std::move(c);
  return current_.get();
}

std::unique_ptr<ByteSource> EventPipeline::rest(uint64_t* offset) {
  {  // chunks still queued are not parsed; those being parsed are waited for
    std::lock_guard<std::mutex> lock(shared_->mu);
    shared_->queue.clear();
    shared_->stop = true;
  }
  shared_->work.notify_all();
  for (std::thread& t : shared_->threads) t.join();
  shared_->threads.clear();
  std::deque<std::string> pieces;
  *offset = pending_offset_;
  if (failed_) {
    *offset = failed_->offset;
    pieces.push_back(failed_->text());
    failed_.reset();
  }
  for (const auto& c : window_) pieces.push_back(c->text());
  window_.clear();
  pieces.push_back(std::move(pending_));
  pending_.clear();
  return std::make_unique<ChainSource>(std::move(pieces), std::move(src_));
}

}  // namespace ft::profiler::kineto
