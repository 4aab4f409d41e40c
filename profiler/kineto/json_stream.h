// json_stream.h: incremental JSON tokenizer over a fixed buffer refilled from a plain or gzip file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace ft::profiler::kineto {

// A source of bytes: a plain file, a gzip file (zlib, concatenated members), or memory.
class ByteSource {
 public:
  virtual ~ByteSource() = default;
  // Fills `buf` with up to `cap` bytes; returns 0 at end of input. Throws IoError/FormatError.
  virtual size_t read(char* buf, size_t cap) = 0;
  virtual uint64_t compressed_bytes_read() const = 0;
  // Upper estimate of the decompressed size (0 if unknown); used to reserve address space.
  virtual uint64_t size_hint() const { return 0; }
};

// Opens `path`, detecting gzip by its magic bytes (not by the extension).
std::unique_ptr<ByteSource> open_byte_source(const std::string& path);
std::unique_ptr<ByteSource> memory_byte_source(std::string_view data);
// The whole (decompressed) text of `path`, with `spare` bytes of capacity past its end (simdjson
// reads in place and needs SIMDJSON_PADDING of them).
std::string read_all_text(const std::string& path, size_t spare = 0);

// A parsed JSON number, kept both as text-exact nanoseconds-from-microseconds and as double.
struct JsonNumber {
  double value = 0.0;
  bool integral = false;  // no fraction or exponent
  int64_t int_value = 0;  // valid when integral and in range
  bool int_ok = false;
  int64_t micros_to_ns = 0;  // value * 1000, rounded half away from zero (µs -> ns)
  bool ns_ok = false;
};

// JSON's lexical classes, for the streaming tokenizer and the chunk parser alike.
inline bool is_json_ws(int c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }
inline bool is_json_number_char(int c) {
  return (c >= '0' && c <= '9') || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E';
}
inline int json_hex_digit(int c) {  // -1: not a hex digit
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}
// What a one-character escape (\" \\ \/ \b \f \n \r \t) stands for; 0 for any other.
inline char json_simple_escape(int c) {
  switch (c) {
    case '"':
    case '\\':
    case '/':
      return static_cast<char>(c);
    case 'b':
      return '\b';
    case 'f':
      return '\f';
    case 'n':
      return '\n';
    case 'r':
      return '\r';
    case 't':
      return '\t';
    default:
      return 0;
  }
}

// The longest number either reader accepts (characters).
inline constexpr size_t kMaxNumberChars = 128;

// The common case of a number: a plain non-negative integer of 1-16 digits below 2^53
// (timestamps, ids, sizes) at the start of `text[0, n)`, not followed by another number
// character. Returns the digits read (0: not such an integer) and sets *out as
// parse_json_number would.
inline size_t plain_json_integer(const char* text, size_t n, JsonNumber* out) {
  size_t d = 0;
  int64_t v = 0;
  while (d < n && d <= 16 && text[d] >= '0' && text[d] <= '9') v = v * 10 + (text[d++] - '0');
  if (d == 0 || d > 16 || (text[0] == '0' && d > 1) || v >= (int64_t{1} << 53) ||
      (d < n && is_json_number_char(text[d])))
    return 0;
  *out = JsonNumber{static_cast<double>(v), true, v, true, v * 1000, true};
  return d;
}

// Parses exactly the characters of one JSON number, `text[0, n)`; false when they break JSON's
// number grammar or number more than 128. `want_value` as in JsonCursor::read_number.
bool parse_json_number(const char* text, size_t n, bool want_value, JsonNumber* out);

// A JSON string in a contiguous buffer, `p` just past its opening quote: sets `out` to its text
// (a view of the buffer when it has no escape, else of `scratch`, decoded as
// JsonCursor::read_string decodes) and returns the byte after its closing quote; nullptr when the
// string is malformed or does not end before `end`.
const char* scan_json_string(const char* p, const char* end, std::string_view* out,
                             std::string* scratch);

// The code point of a \u escape `cp` as UTF-8; `lo` is the \u escape right after a high
// surrogate (nullptr: none). A high surrogate pairs with a low one; any surrogate left alone
// becomes U+FFFD (and a non-low `lo` stands on its own). The decoders above and below share it.
bool is_high_surrogate(uint32_t cp);
void append_code_point(uint32_t cp, const uint32_t* lo, std::string* out);

enum class JsonType { kObject, kArray, kString, kNumber, kTrue, kFalse, kNull, kEnd };

// Pull tokenizer. Memory is the fixed buffer plus the longest string read; values are never
// materialised unless asked for. Every error is a FormatError naming the byte offset.
class JsonCursor {
 public:
  JsonCursor(std::unique_ptr<ByteSource> src, std::string label, size_t buffer_bytes = 1 << 20);
  // Resumes inside a document: `base` is the document offset of the source's first byte and
  // `open` the open containers, outermost first ('1': none of its members read yet, '0': some).
  JsonCursor(std::unique_ptr<ByteSource> src, std::string label, size_t buffer_bytes, uint64_t base,
             std::string open);
  // Hands over the source and the bytes read from it but not consumed; the cursor is spent.
  std::unique_ptr<ByteSource> release(std::string* unread);
  size_t buffer_bytes() const { return cap_; }
  const std::string& open_containers() const { return first_; }  // as `open` above

  // Type of the next value (skips whitespace); kEnd at end of input.
  JsonType peek();
  uint64_t offset() const { return base_ + pos_; }  // byte offset of the next unread byte
  uint64_t compressed_bytes_read() const { return src_->compressed_bytes_read(); }
  uint64_t size_hint() const { return src_->size_hint(); }

  void begin_object();  // consumes '{'
  // Next key of the current object into `key`; false (consuming '}') when the object ends.
  bool next_key(std::string* key);
  // The same, but `key` views the buffer when the key needs no unescaping (else `scratch`); it
  // stays valid until the next call on this cursor.
  bool next_key(std::string_view* key, std::string* scratch);
  void begin_array();   // consumes '['
  bool next_element();  // true if another element follows; consumes ']' at end
  void read_string(std::string* out);
  // `want_value` false: JsonNumber::value is left 0 when micros_to_ns is exact (ns_ok), which
  // spares the double conversion of timestamps.
  JsonNumber read_number(bool want_value = true);
  bool read_bool();
  void read_null();
  void skip_value();  // any value, iteratively (no recursion)
  [[noreturn]] void fail(const std::string& what) const;
  void expect_end();  // only whitespace may follow

 private:
  bool fill();  // refills the buffer, keeping unread bytes; false when nothing more came
  // Makes at least `n` unread bytes contiguous in the buffer when the input has them; returns
  // the number available (fewer only at the end of input).
  size_t ensure(size_t n) {
    if (len_ - pos_ >= n) return len_ - pos_;
    return ensure_slow(n);
  }
  size_t ensure_slow(size_t n);
  int get() {
    if (pos_ == len_ && !fill()) return -1;
    return static_cast<unsigned char>(buf_[pos_++]);
  }
  int peek_char() {
    if (pos_ == len_ && !fill()) return -1;
    return static_cast<unsigned char>(buf_[pos_]);
  }
  // Returns the next non-space char without consuming it (-1 at EOF).
  int skip_ws() {
    if (pos_ < len_) {
      const unsigned char c = static_cast<unsigned char>(buf_[pos_]);
      if (c > ' ') return c;
    }
    return skip_ws_slow();
  }
  int skip_ws_slow();
  bool read_plain_string(std::string_view* out);  // fast path of a string without escapes
  void expect(char c);
  void expect_literal(const char* lit);
  uint32_t read_hex4();

  std::unique_ptr<ByteSource> src_;
  std::string label_;
  std::unique_ptr<char[]> buf_;
  size_t cap_ = 0;
  size_t pos_ = 0;
  size_t len_ = 0;
  uint64_t base_ = 0;
  std::string first_;  // per open container: '1' if it has not yet produced an element
};

}  // namespace ft::profiler::kineto
