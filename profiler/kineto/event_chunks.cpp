// event_chunks.cpp: the chunk pipeline: the traceEvents array's bytes split at event boundaries
// (Kineto's layout, else a string-aware bracket scan), parsed on worker threads
// (event_chunk_parser.cpp), handed back in document order.
#include "event_chunks.h"

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>

#include "ft/core/parallel.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace ft::profiler::kineto {
namespace {

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

void ByteBuffer::reserve(size_t n, size_t keep) {
  if (n <= cap) return;
  const size_t want = std::max(n, cap + cap / 2);
  std::unique_ptr<char[]> d(new char[want]);  // not zero-filled
  if (keep > 0) std::memcpy(d.get(), data.get(), keep);
  data = std::move(d);
  cap = want;
}

std::string EventChunk::text() const {
  std::string t(buf.data.get() + 1, len);
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
  SimdParserPtr parser = make_simd_parser();  // the caller's thread's

  ChunkParse parse = parse_event_chunk;

  // Parses queued chunks until `until` is done (nullptr: until stopped).
  void serve(SimdParser& p, EventChunk* until) {
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
      const bool ok = parse(c, p);
      lock.lock();
      c->ok = ok;
      c->done = true;
      finished.notify_all();
    }
  }
};

EventPipeline::EventPipeline(std::unique_ptr<ByteSource> src, std::string unread, uint64_t offset,
                             size_t chunk_bytes, ChunkParse parse)
    : src_(std::move(src)),
      pending_offset_(offset),
      chunk_bytes_(std::max<size_t>(chunk_bytes, 1)),
      parse_(parse),
      shared_(std::make_unique<Shared>()) {
  shared_->parse = parse;
  pending_.reserve(unread.size() + 1, 0);
  std::memcpy(pending_.data.get() + 1, unread.data(), unread.size());
  pending_len_ = unread.size();
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
  // Parser threads: one per logical CPU (at least 2), the calling thread's included.
  for (unsigned i = 0; i + 1 < std::max(2u, logical_cpus()); ++i) {
    shared_->threads.emplace_back([s = shared_.get()] {
      SimdParserPtr p = make_simd_parser();
      s->serve(*p, nullptr);
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
  const char* p = pending_.data.get() + 1;
  const size_t n = pending_len_;
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
  constexpr size_t kPad = 64;  // >= simdjson::SIMDJSON_PADDING (static_assert in the parser)
  std::unique_ptr<EventChunk> c;
  ByteBuffer next;
  if (spare_.empty()) {
    c = std::make_unique<EventChunk>();
  } else {  // a chunk handed back: its buffer takes the rest, its events' capacity stays
    c = std::move(spare_.back());
    spare_.pop_back();
    next = std::move(c->buf);
    c->buf = ByteBuffer{};
  }
  c->offset = pending_offset_;
  c->len = boundary_;
  // The rest moves to another buffer; the chunk keeps this one, closed by ']' and padding.
  const size_t rest = pending_len_ - boundary_;
  next.reserve(1 + rest + chunk_bytes_ + 2 + kPad, 0);
  std::memcpy(next.data.get() + 1, pending_.data.get() + 1 + boundary_, rest);
  c->buf = std::move(pending_);
  c->buf.reserve(boundary_ + 2 + kPad, boundary_ + 1);
  char* b = c->buf.data.get();
  b[0] = '[';
  b[1 + boundary_] = ']';
  std::memset(b + 2 + boundary_, 0, kPad);
  pending_ = std::move(next);
  pending_len_ = rest;
  pending_offset_ += boundary_;
  scanned_ = layout_ ? 0 : scanned_ - boundary_;  // a layout cut scans nothing
  boundary_ = 0;
  brace_floor_ = 0;
  // The first chunk starts at its first event; the others at the comma before theirs.
  size_t i = 1;
  while (i <= c->len && is_json_ws(b[i])) ++i;
  bool shape_ok = i <= c->len;
  if (shape_ok && !first_chunk_) {
    shape_ok = b[i] == ',';
    if (shape_ok) {
      b[i] = ' ';
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

void EventPipeline::learn_layout() {
  // The array's first event: '{' on a line of its own after '[', its indentation spaces or tabs.
  const char* p = pending_.data.get() + 1;
  size_t i = 0, line = std::string::npos;
  while (i < pending_len_ && is_json_ws(p[i])) {
    if (p[i] == '\n') line = i + 1;
    ++i;
  }
  if (i == pending_len_ && !eof_) return;  // not yet known: asked again after the next read
  layout_known_ = true;
  if (line == std::string::npos || i == pending_len_ || p[i] != '{') return;
  const std::string_view ind(p + line, i - line);
  if (ind.find_first_not_of(" \t") != std::string_view::npos) return;
  // The candidate: "},\n" + indent + "{", the '{' last.
  pattern_.assign("},\n");
  pattern_.append(ind).push_back('{');
  layout_ = true;
}

size_t EventPipeline::layout_boundary() {
  // The last candidate '{' not checked yet whose boundary is at or after chunk_bytes_. With k the
  // indentation's length, the pattern starts at q + 1 - (k + 4) with its '}', so the boundary
  // (just after the '}') is at q - k - 2.
  const char* p = pending_.data.get() + 1;
  const size_t n = pattern_.size(), k = n - 4;
  const size_t floor = std::max({brace_floor_, chunk_bytes_ + k + 2, n - 1});
  size_t end = pending_len_;
  while (end > floor) {
    const void* hit = memrchr(p + floor, '{', end - floor);
    if (hit == nullptr) break;
    const size_t q = static_cast<size_t>(static_cast<const char*>(hit) - p);
    if (std::memcmp(p + q + 1 - n, pattern_.data(), n) == 0) return q - k - 2;
    end = q;
  }
  brace_floor_ = pending_len_;
  return 0;
}

bool EventPipeline::split_one() {
  for (;;) {
    if (layout_ && !eof_) {
      // Kineto's layout: cut at a candidate without scanning the bytes before it.
      if (const size_t b = layout_boundary(); b > 0) {
        boundary_ = b;
        cut();
        return true;
      }
      if (pending_len_ > chunk_bytes_ + kLayoutLook) layout_ = false;  // not this layout
      if (!layout_) scan();  // from this chunk's first byte: every state is the initial one
    }
    if (boundary_ > 0 && (boundary_ >= chunk_bytes_ || array_end_ || eof_)) {
      cut();
      return true;
    }
    if (array_end_ || eof_) return false;
    pending_.reserve(1 + pending_len_ + chunk_bytes_ + 2 + 64, 1 + pending_len_);
    const size_t got = src_->read(pending_.data.get() + 1 + pending_len_, chunk_bytes_);
    pending_len_ += got;
    if (got == 0) eof_ = true;
    if (!layout_known_) learn_layout();
    // At the input's end the rest is scanned (it holds the array's end).
    if (eof_ && layout_) layout_ = false;
    if (!layout_) scan();
  }
}

EventChunk* EventPipeline::next() {
  if (current_) {
    current_->events.clear();
    current_->escaped.clear();
    current_->rows.clear();
    current_->elements = 0;
    current_->comma = std::string::npos;
    current_->done = current_->ok = false;
    spare_.push_back(std::move(current_));
  }
  if (failed_) return nullptr;
  // Chunks in flight: 2 per parser thread + 1.
  const size_t window = 2 * std::max<size_t>(2, logical_cpus()) + 1;
  while (window_.size() < window && split_one()) {
  }
  if (window_.empty()) return nullptr;
  std::unique_ptr<EventChunk> c = std::move(window_.front());
  window_.pop_front();
  if (shared_->threads.empty()) {
    if (!c->done) {  // a lone chunk: parsed here
      c->ok = parse_(c.get(), *shared_->parser);
      c->done = true;
    }
  } else {
    shared_->serve(*shared_->parser, c.get());
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
  pieces.emplace_back(pending_.data.get() + 1, pending_len_);
  pending_len_ = 0;
  return std::make_unique<ChainSource>(std::move(pieces), std::move(src_));
}

}  // namespace ft::profiler::kineto