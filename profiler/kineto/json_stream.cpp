// json_stream.cpp: the incremental JSON tokenizer (its byte sources: byte_source.cpp).
#include "json_stream.h"

#include <algorithm>
#include <charconv>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>

#include "ft/core/error.h"

namespace ft::profiler::kineto {
namespace {

constexpr size_t kMaxDepth = 512;
constexpr size_t kKeyLookahead = 256;  // keys longer than this take the copying path

}  // namespace

JsonCursor::JsonCursor(std::unique_ptr<ByteSource> src, std::string label, size_t buffer_bytes)
    : src_(std::move(src)),
      label_(std::move(label)),
      buf_(new char[buffer_bytes]),
      cap_(buffer_bytes) {}

JsonCursor::JsonCursor(std::unique_ptr<ByteSource> src, std::string label, size_t buffer_bytes,
                       uint64_t base, std::string open)
    : JsonCursor(std::move(src), std::move(label), buffer_bytes) {
  base_ = base;
  first_ = std::move(open);
}

std::unique_ptr<ByteSource> JsonCursor::release(std::string* unread) {
  unread->assign(buf_.get() + pos_, len_ - pos_);
  base_ += len_;
  pos_ = len_ = 0;
  return std::move(src_);
}

bool JsonCursor::fill() {
  base_ += len_;
  pos_ = 0;
  len_ = src_->read(buf_.get(), cap_);
  return len_ > 0;
}

size_t JsonCursor::ensure_slow(size_t n) {
  if (pos_ > 0) {
    // Keep the unread tail: move it to the front and read behind it.
    const size_t left = len_ - pos_;
    std::memmove(buf_.get(), buf_.get() + pos_, left);
    base_ += pos_;
    pos_ = 0;
    len_ = left;
  }
  while (len_ < n && len_ < cap_) {
    const size_t got = src_->read(buf_.get() + len_, cap_ - len_);
    if (got == 0) break;
    len_ += got;
  }
  return len_;
}

void JsonCursor::fail(const std::string& what) const {
  throw FormatError(label_ + ": byte " + std::to_string(offset()) + ": " + what);
}

int JsonCursor::skip_ws_slow() {
  for (;;) {
    if (pos_ == len_ && !fill()) return -1;
    // Indentation comes in runs of spaces: step over 8 at a time.
    while (len_ - pos_ >= 8) {
      uint64_t w;
      std::memcpy(&w, buf_.get() + pos_, 8);
      if (w != 0x2020202020202020ull) break;
      pos_ += 8;
    }
    if (pos_ == len_) continue;
    const char c = buf_[pos_];
    if (c == ' ' || c == '\n' || c == '\r' || c == '\t') {
      ++pos_;
      continue;
    }
    return static_cast<unsigned char>(c);
  }
}

void JsonCursor::expect(char c) {
  const int got = skip_ws();
  if (got != c) {
    if (got < 0) fail(std::string("unexpected end of input, expected '") + c + "'");
    fail(std::string("expected '") + c + "', found '" + static_cast<char>(got) + "'");
  }
  ++pos_;
}

JsonType JsonCursor::peek() {
  const int c = skip_ws();
  switch (c) {
    case -1:
      return JsonType::kEnd;
    case '{':
      return JsonType::kObject;
    case '[':
      return JsonType::kArray;
    case '"':
      return JsonType::kString;
    case 't':
      return JsonType::kTrue;
    case 'f':
      return JsonType::kFalse;
    case 'n':
      return JsonType::kNull;
    default:
      if (c == '-' || (c >= '0' && c <= '9')) return JsonType::kNumber;
      fail(std::string("unexpected character '") + static_cast<char>(c) + "'");
  }
}

void JsonCursor::begin_object() {
  if (first_.size() >= kMaxDepth) fail("nesting deeper than 512");
  expect('{');
  first_.push_back('1');
}

bool JsonCursor::next_key(std::string* key) {
  std::string_view view;
  if (!next_key(&view, key)) return false;
  // The view is the buffer's (copied now, before the cursor moves) or `key` itself.
  if (view.data() != key->data()) key->assign(view.data(), view.size());
  return true;
}

bool JsonCursor::next_key(std::string_view* key, std::string* scratch) {
  int c = skip_ws();
  if (first_.empty()) fail("internal: next_key outside an object");
  if (c == '}') {
    ++pos_;
    first_.pop_back();
    return false;
  }
  if (first_.back() == '1') {
    first_.back() = '0';
  } else {
    if (c != ',') {
      if (c < 0) fail("unexpected end of input inside an object");
      fail(std::string("expected ',' or '}' in an object, found '") + static_cast<char>(c) + "'");
    }
    ++pos_;
    c = skip_ws();
  }
  if (c != '"') {
    if (c < 0) fail("unexpected end of input, expected a key");
    fail("expected a string key");
  }
  if (!read_plain_string(key)) {
    read_string(scratch);
    *key = *scratch;
  }
  // The view stays valid through expect(): the buffer moves only when the input must be read.
  if (pos_ < len_ && buf_[pos_] == ':') {
    ++pos_;
  } else {
    if (key->data() != scratch->data()) {
      scratch->assign(key->data(), key->size());
      *key = *scratch;
    }
    expect(':');
  }
  return true;
}

bool JsonCursor::read_plain_string(std::string_view* out) {
  // At the opening quote: the string ends inside the buffer and has no escape or control byte.
  ensure(kKeyLookahead);
  const char* p = buf_.get() + pos_ + 1;
  const char* e = buf_.get() + len_;
  const char* q = p;
  while (q < e && *q != '"' && *q != '\\' && static_cast<unsigned char>(*q) >= 0x20) ++q;
  if (q == e || *q != '"') return false;
  *out = std::string_view(p, static_cast<size_t>(q - p));
  pos_ = static_cast<size_t>(q + 1 - buf_.get());
  return true;
}

void JsonCursor::begin_array() {
  if (first_.size() >= kMaxDepth) fail("nesting deeper than 512");
  expect('[');
  first_.push_back('1');
}

bool JsonCursor::next_element() {
  const int c = skip_ws();
  if (first_.empty()) fail("internal: next_element outside an array");
  if (c == ']') {
    ++pos_;
    first_.pop_back();
    return false;
  }
  if (first_.back() == '1') {
    first_.back() = '0';
    if (c < 0) fail("unexpected end of input inside an array");
    return true;
  }
  if (c != ',') {
    if (c < 0) fail("unexpected end of input inside an array");
    fail(std::string("expected ',' or ']' in an array, found '") + static_cast<char>(c) + "'");
  }
  ++pos_;
  return true;
}

uint32_t JsonCursor::read_hex4() {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) {
    const int c = get();
    const int d = json_hex_digit(c);
    if (d < 0)
      fail(c < 0 ? "unexpected end of input in a \\u escape" : "bad hex digit in a \\u escape");
    v = v << 4 | static_cast<uint32_t>(d);
  }
  return v;
}

void JsonCursor::read_string(std::string* out) {
  out->clear();
  expect('"');
  for (;;) {
    if (pos_ == len_ && !fill()) fail("unexpected end of input inside a string");
    // Fast path: copy the run up to the next quote, backslash or control byte.
    const char* p = buf_.get() + pos_;
    const char* e = buf_.get() + len_;
    const char* q = p;
    while (q < e && *q != '"' && *q != '\\' && static_cast<unsigned char>(*q) >= 0x20) ++q;
    out->append(p, static_cast<size_t>(q - p));
    pos_ += static_cast<size_t>(q - p);
    if (q == e) continue;
    const char c = *q;
    ++pos_;
    if (c == '"') return;
    if (c != '\\') {
      --pos_;
      fail("control character inside a string");
    }
    const int esc = get();
    if (const char decoded = json_simple_escape(esc)) {
      out->push_back(decoded);
      continue;
    }
    switch (esc) {
      case 'u': {
        const uint32_t cp = read_hex4();
        if (is_high_surrogate(cp) && peek_char() == '\\') {
          ++pos_;
          if (get() != 'u') fail("expected a low surrogate escape");
          const uint32_t lo = read_hex4();
          append_code_point(cp, &lo, out);
        } else {
          append_code_point(cp, nullptr, out);
        }
        break;
      }
      case -1:
        fail("unexpected end of input in an escape");
      default:
        fail("bad escape character in a string");
    }
  }
}

JsonNumber JsonCursor::read_number(bool want_value) {
  skip_ws();
  // Normally the whole number is in the buffer after ensure() and is parsed in place; a number
  // running into the end of a small buffer is gathered byte by byte.
  ensure(kMaxNumberChars + 1);
  const uint64_t start = offset();
  const char* text = buf_.get() + pos_;
  const size_t avail = len_ - pos_;
  size_t n = 0;
  while (n < avail && is_json_number_char(text[n])) {
    if (n == kMaxNumberChars) fail("number longer than 128 characters");
    ++n;
  }
  pos_ += n;
  char gathered[kMaxNumberChars + 1];
  if (n == avail && avail <= kMaxNumberChars) {
    std::memcpy(gathered, text, n);
    text = gathered;
    for (int c = peek_char(); c >= 0 && is_json_number_char(c); c = peek_char()) {
      if (n == kMaxNumberChars) fail("number longer than 128 characters");
      gathered[n++] = static_cast<char>(c);
      ++pos_;
    }
  }
  JsonNumber num;
  if (!parse_json_number(text, n, want_value, &num)) {
    throw FormatError(label_ + ": byte " + std::to_string(start) + ": malformed number '" +
                      std::string(text, n) + "'");
  }
  return num;
}

void JsonCursor::expect_literal(const char* lit) {
  skip_ws();
  for (const char* p = lit; *p; ++p) {
    const int c = get();
    if (c != *p) fail(c < 0 ? "unexpected end of input in a literal" : "bad literal");
  }
}

bool JsonCursor::read_bool() {
  const JsonType t = peek();
  if (t == JsonType::kTrue) {
    expect_literal("true");
    return true;
  }
  if (t == JsonType::kFalse) {
    expect_literal("false");
    return false;
  }
  fail("expected true or false");
}

void JsonCursor::read_null() { expect_literal("null"); }

void JsonCursor::skip_value() {
  // Iterative skip: tracks nesting with a counter and the kind of each open container.
  std::string kinds;
  std::string scratch;
  for (;;) {
    const JsonType t = peek();
    switch (t) {
      case JsonType::kEnd:
        fail("unexpected end of input, expected a value");
      case JsonType::kString:
        read_string(&scratch);
        break;
      case JsonType::kNumber:
        read_number(/*want_value=*/false);  // validated, not converted
        break;
      case JsonType::kTrue:
      case JsonType::kFalse:
        read_bool();
        break;
      case JsonType::kNull:
        read_null();
        break;
      case JsonType::kObject:
      case JsonType::kArray: {
        if (kinds.size() + first_.size() >= kMaxDepth) fail("nesting deeper than 512");
        ++pos_;
        const int c = skip_ws();
        const char close = t == JsonType::kObject ? '}' : ']';
        if (c == close) {
          ++pos_;
          break;  // empty container: a complete value
        }
        kinds.push_back(t == JsonType::kObject ? 'o' : 'a');
        if (t == JsonType::kObject) {
          if (c != '"') fail(c < 0 ? "unexpected end of input inside an object" : "expected a key");
          read_string(&scratch);
          expect(':');
        }
        continue;  // parse the first member's value
      }
    }
    // A value finished: close containers or move to the next member.
    for (;;) {
      if (kinds.empty()) return;
      const int c = skip_ws();
      const char k = kinds.back();
      if (c == ',') {
        ++pos_;
        if (k == 'o') {
          if (skip_ws() != '"') fail("expected a key after ','");
          read_string(&scratch);
          expect(':');
        }
        break;
      }
      if ((k == 'o' && c == '}') || (k == 'a' && c == ']')) {
        ++pos_;
        kinds.pop_back();
        continue;
      }
      if (c < 0) fail("unexpected end of input inside a container");
      fail(std::string("expected ',' or a closing bracket, found '") + static_cast<char>(c) + "'");
    }
  }
}

void JsonCursor::expect_end() {
  const int c = skip_ws();
  if (c >= 0) fail("trailing characters after the JSON document");
}

}  // namespace ft::profiler::kineto
