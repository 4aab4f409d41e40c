// json_text.cpp: JSON text decoded in place: the number grammar (with exact µs -> ns) and strings
// with their escapes, shared by the streaming tokenizer and the chunk parser.
#include <charconv>
#include <climits>
#include <cmath>
#include <string>

#include "json_stream.h"

namespace ft::profiler::kineto {

bool parse_json_number(const char* text, size_t n, bool want_value, JsonNumber* out) {
  JsonNumber& num = *out;
  num = JsonNumber{};
  if (n > kMaxNumberChars) return false;
  if (plain_json_integer(text, n, &num) == n) return true;  // the common case
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

}  // namespace

bool is_high_surrogate(uint32_t cp) { return cp >= 0xd800 && cp < 0xdc00; }

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

namespace {

// Four hex digits at `p` (bounded by `end`); false when they are not.
bool hex4_at(const char* p, const char* end, uint32_t* v) {
  if (end - p < 4) return false;
  uint32_t x = 0;
  for (int i = 0; i < 4; ++i) {
    const int d = json_hex_digit(static_cast<unsigned char>(p[i]));
    if (d < 0) return false;
    x = x << 4 | static_cast<uint32_t>(d);
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
    if (const char decoded = json_simple_escape(esc)) {
      scratch->push_back(decoded);
      q = r;
      continue;
    }
    switch (esc) {
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

}  // namespace ft::profiler::kineto
