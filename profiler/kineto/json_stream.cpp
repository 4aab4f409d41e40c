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

constexpr size_t kMaxNumberChars = 128;
constexpr size_t kMaxDepth = 512;
constexpr size_t kKeyLookahead = 256;  // keys longer than this take the copying path

}  // namespace

bool parse_json_number(const char* text, size_t n, bool want_value, JsonNumber* out) {
  JsonNumber& num = *out;
  num = JsonNumber{};
  if (n > kMaxNumberChars) return false;
  // Fast path: a plain non-negative integer below 2^53 (ids, µs timestamps, sizes); the same
  // fields as the general path below.
  if (n > 0 && n <= 16 && (text[0] != '0' || n == 1)) {
    int64_t iv = 0;
    size_t k = 0;
    for (; k < n && text[k] >= '0' && text[k] <= '9'; ++k) iv = iv * 10 + (text[k] - '0');
    if (k == n && iv < (int64_t{1} << 53)) {
      num.integral = true;
      num.int_value = iv;
      num.int_ok = true;
      num.micros_to_ns = iv * 1000;
      num.ns_ok = true;
      num.value = static_cast<double>(iv);  // exact below 2^53
      return true;
    }
  }
  // Validate JSON number grammar: -?(0|[1-9]d*)(.d+)?([eE][+-]?d+)?
  size_t i = 0;
  const bool neg = i < n && text[i] == '-';
  if (neg) ++i;
  const size_t int_start = i;
  while (i < n && text[i] >= '0' && text[i] <= '9') ++i;
  const size_t int_end = i;
  if (int_end == int_start) return false;
  if (text[int_start] == '0' && int_end - int_start > 1) return false;
  size_t frac_start = 0, frac_end = 0;
  if (i < n && text[i] == '.') {
    ++i;
    frac_start = i;
    while (i < n && text[i] >= '0' && text[i] <= '9') ++i;
    frac_end = i;
    if (frac_end == frac_start) return false;
  }
  bool has_exp = false;
  if (i < n && (text[i] == 'e' || text[i] == 'E')) {
    has_exp = true;
    ++i;
    if (i < n && (text[i] == '+' || text[i] == '-')) ++i;
    const size_t es = i;
    while (i < n && text[i] >= '0' && text[i] <= '9') ++i;
    if (i == es) return false;
  }
  if (i != n) return false;
  num.integral = frac_start == 0 && !has_exp;
  // Exact integer part (up to 18 digits).
  const size_t int_digits = int_end - int_start;
  int64_t iv16 = 0;
  if (int_digits <= 16) {
    for (size_t k = int_start; k < int_end; ++k) iv16 = iv16 * 10 + (text[k] - '0');
  }
  if (!has_exp && int_digits <= 16 && iv16 < INT64_MAX / 1000 - 1) {
    const int64_t iv = iv16;
    int64_t ns = iv * 1000;
    int64_t frac_ns = 0;
    int round_up = 0;
    if (frac_start) {
      int mult = 100;
      for (size_t k = frac_start; k < frac_end; ++k) {
        const int d = text[k] - '0';
        if (k - frac_start < 3) {
          frac_ns += d * mult;
          mult /= 10;
        } else if (k - frac_start == 3) {
          round_up = d >= 5 ? 1 : 0;
        }
      }
    }
    ns += frac_ns + round_up;
    num.micros_to_ns = neg ? -ns : ns;
    num.ns_ok = true;
    if (num.integral) {
      num.int_value = neg ? -iv : iv;
      num.int_ok = true;
    }
  } else if (num.integral && int_digits <= 18) {
    int64_t iv = 0;
    for (size_t k = int_start; k < int_end; ++k) iv = iv * 10 + (text[k] - '0');
    num.int_value = neg ? -iv : iv;
    num.int_ok = true;
  }
  if (!want_value && num.ns_ok) return true;
  // The double: exact integers below 2^53 convert exactly; up to 15 significant digits without
  // an exponent, digits / 10^k is one correctly rounded division of exact doubles (Clinger's
  // fast path), the same double from_chars gives; anything else goes to from_chars.
  constexpr int64_t kExactInt = int64_t{1} << 53;
  const size_t frac_digits = frac_start ? frac_end - frac_start : 0;
  double v = 0.0;
  if (num.int_ok && num.int_value > -kExactInt && num.int_value < kExactInt) {
    v = neg && num.int_value == 0 ? -0.0 : static_cast<double>(num.int_value);
  } else if (!has_exp && int_digits + frac_digits <= 15) {
    static constexpr double kPow10[16] = {1e0, 1e1, 1e2,  1e3,  1e4,  1e5,  1e6,  1e7,
                                          1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15};
    int64_t digits = 0;
    for (size_t k = int_start; k < int_end; ++k) digits = digits * 10 + (text[k] - '0');
    for (size_t k = frac_start; k < frac_end; ++k) digits = digits * 10 + (text[k] - '0');
    v = static_cast<double>(digits) / kPow10[frac_digits];
    if (neg) v = -v;
  } else {
    const auto res = std::from_chars(text, text + n, v);
    if (res.ec == std::errc::result_out_of_range) {
      v = neg ? -HUGE_VAL : HUGE_VAL;
    } else if (res.ec != std::errc()) {
      return false;
    }
  }
  num.value = v;
  if (!num.ns_ok && std::isfinite(v) && std::fabs(v) < 9e15) {
    num.micros_to_ns = static_cast<int64_t>(std::llround(v * 1000.0));
    num.ns_ok = true;
  }
  return true;
}

namespace {

// `cp` as UTF-8 (surrogates have been resolved by the callers).
void append_utf8_to(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xc0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3f)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xe0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3f)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3f)));
  } else {
    out->push_back(static_cast<char>(0xf0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3f)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3f)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3f)));
  }
}

bool is_high_surrogate(uint32_t cp) { return cp >= 0xd800 && cp < 0xdc00; }

// The code point of a \u escape `cp` as UTF-8; `lo` is the \u escape right after a high
// surrogate (nullptr: none). A high surrogate pairs with a low one; any surrogate left alone
// becomes U+FFFD (and a non-low `lo` stands on its own).
void append_code_point(uint32_t cp, const uint32_t* lo, std::string* out) {
  if (is_high_surrogate(cp)) {
    if (lo != nullptr && *lo >= 0xdc00 && *lo < 0xe000) {
      cp = 0x10000 + ((cp - 0xd800) << 10) + (*lo - 0xdc00);
    } else if (lo != nullptr) {
      append_utf8_to(0xfffd, out);
      cp = *lo;
    } else {
      cp = 0xfffd;
    }
  } else if (cp >= 0xdc00 && cp < 0xe000) {
    cp = 0xfffd;
  }
  append_utf8_to(cp, out);
}

// Four hex digits at `p` (bounded by `end`); false when they are not.
bool hex4_at(const char* p, const char* end, uint32_t* v) {
  if (end - p < 4) return false;
  uint32_t x = 0;
  for (int i = 0; i < 4; ++i) {
    const char c = p[i];
    x <<= 4;
    if (c >= '0' && c <= '9')
      x |= static_cast<uint32_t>(c - '0');
    else if (c >= 'a' && c <= 'f')
      x |= static_cast<uint32_t>(c - 'a' + 10);
    else if (c >= 'A' && c <= 'F')
      x |= static_cast<uint32_t>(c - 'A' + 10);
    else
      return false;
  }
  *v = x;
  return true;
}

}  // namespace

const char* scan_json_string(const char* p, const char* end, std::string_view* out,
                             std::string* scratch) {
  const char* q = p;
  while (q < end && *q != '"' && *q != '\\' && static_cast<unsigned char>(*q) >= 0x20) ++q;
  if (q == end) return nullptr;
  if (*q == '"') {
    *out = std::string_view(p, static_cast<size_t>(q - p));
    return q + 1;
  }
  // Escapes: decoded as JsonCursor::read_string does (a lone surrogate becomes U+FFFD).
  scratch->assign(p, static_cast<size_t>(q - p));
  for (;;) {
    const char* r = q;
    while (r < end && *r != '"' && *r != '\\' && static_cast<unsigned char>(*r) >= 0x20) ++r;
    scratch->append(q, static_cast<size_t>(r - q));
    if (r == end || static_cast<unsigned char>(*r) < 0x20) return nullptr;
    if (*r == '"') {
      *out = *scratch;
      return r + 1;
    }
    if (++r == end) return nullptr;
    const char esc = *r++;
    switch (esc) {
      case '"':
      case '\\':
      case '/':
        scratch->push_back(esc);
        break;
      case 'b':
        scratch->push_back('\b');
        break;
      case 'f':
        scratch->push_back('\f');
        break;
      case 'n':
        scratch->push_back('\n');
        break;
      case 'r':
        scratch->push_back('\r');
        break;
      case 't':
        scratch->push_back('\t');
        break;
      case 'u': {
        uint32_t cp = 0;
        if (!hex4_at(r, end, &cp)) return nullptr;
        r += 4;
        if (is_high_surrogate(cp) && r < end && *r == '\\') {
          uint32_t lo = 0;
          if (r + 1 == end || r[1] != 'u' || !hex4_at(r + 2, end, &lo)) return nullptr;
          r += 6;
          append_code_point(cp, &lo, scratch);
        } else {
          append_code_point(cp, nullptr, scratch);
        }
        break;
      }
      default:
        return nullptr;
    }
    q = r;
  }
}

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
    v <<= 4;
    if (c >= '0' && c <= '9')
      v |= static_cast<uint32_t>(c - '0');
    else if (c >= 'a' && c <= 'f')
      v |= static_cast<uint32_t>(c - 'a' + 10);
    else if (c >= 'A' && c <= 'F')
      v |= static_cast<uint32_t>(c - 'A' + 10);
    else
      fail(c < 0 ? "unexpected end of input in a \\u escape" : "bad hex digit in a \\u escape");
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
    switch (esc) {
      case '"':
        out->push_back('"');
        break;
      case '\\':
        out->push_back('\\');
        break;
      case '/':
        out->push_back('/');
        break;
      case 'b':
        out->push_back('\b');
        break;
      case 'f':
        out->push_back('\f');
        break;
      case 'n':
        out->push_back('\n');
        break;
      case 'r':
        out->push_back('\r');
        break;
      case 't':
        out->push_back('\t');
        break;
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
  auto number_char = [](int c) {
    return (c >= '0' && c <= '9') || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E';
  };
  size_t n = 0;
  while (n < avail && number_char(text[n])) {
    if (n == kMaxNumberChars) fail("number longer than 128 characters");
    ++n;
  }
  pos_ += n;
  char gathered[kMaxNumberChars + 1];
  if (n == avail && avail <= kMaxNumberChars) {
    std::memcpy(gathered, text, n);
    text = gathered;
    for (int c = peek_char(); c >= 0 && number_char(c); c = peek_char()) {
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
