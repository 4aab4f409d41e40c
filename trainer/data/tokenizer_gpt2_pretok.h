// tokenizer_gpt2_pretok.h: GPT-2's pre-tokenisation regex as a hand-written scanner (internal).
#pragma once

#include <unicode/uchar.h>

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace ft::trainer::data::gpt2_detail {

enum class CharClass : uint8_t { kLetter, kNumber, kSpace, kOther };

// \p{L}, \p{N}, \s (Unicode White_Space) or anything else, from ICU's character database.
// ICU (Debian libicu-dev, ICU 72 = Unicode 15.0) rather than a generated table: nothing to
// regenerate when Unicode changes, and u_charType is a two-level trie lookup, fast enough
// behind the ASCII table below. \s is White_Space as in tiktoken's Rust regex; JavaScript's
// \s differs on U+0085 and U+FEFF and Python's str.isspace() on U+001C..U+001F, so the golden
// strings avoid those code points.
inline CharClass classify_non_ascii(uint32_t cp) {
  if (u_isUWhiteSpace(static_cast<UChar32>(cp))) return CharClass::kSpace;
  const uint32_t mask = U_GET_GC_MASK(static_cast<UChar32>(cp));
  if (mask & U_GC_L_MASK) return CharClass::kLetter;
  if (mask & U_GC_N_MASK) return CharClass::kNumber;
  return CharClass::kOther;
}

struct AsciiClasses {
  CharClass c[128];
  constexpr AsciiClasses() : c() {
    for (int i = 0; i < 128; ++i) {
      if ((i >= 'a' && i <= 'z') || (i >= 'A' && i <= 'Z')) {
        c[i] = CharClass::kLetter;
      } else if (i >= '0' && i <= '9') {
        c[i] = CharClass::kNumber;
      } else if (i == ' ' || (i >= 9 && i <= 13)) {
        c[i] = CharClass::kSpace;
      } else {
        c[i] = CharClass::kOther;
      }
    }
  }
};
inline constexpr AsciiClasses kAscii{};

struct Char {
  uint32_t len;  // bytes
  CharClass cls;
};

// The character at s[i] (i < n): a well-formed UTF-8 sequence (Unicode table 3-7: no
// overlongs, no surrogates, <= U+10FFFF), or else the single byte, classed kOther.
inline Char char_at(const unsigned char* s, size_t n, size_t i) {
  const unsigned b0 = s[i];
  if (b0 < 0x80) return {1, kAscii.c[b0]};
  uint32_t len = 0, cp = 0;
  unsigned lo = 0x80, hi = 0xbf;
  if (b0 >= 0xc2 && b0 <= 0xdf) {
    len = 2;
    cp = b0 & 0x1f;
  } else if (b0 >= 0xe0 && b0 <= 0xef) {
    len = 3;
    cp = b0 & 0x0f;
    if (b0 == 0xe0) lo = 0xa0;
    if (b0 == 0xed) hi = 0x9f;
  } else if (b0 >= 0xf0 && b0 <= 0xf4) {
    len = 4;
    cp = b0 & 0x07;
    if (b0 == 0xf0) lo = 0x90;
    if (b0 == 0xf4) hi = 0x8f;
  } else {
    return {1, CharClass::kOther};
  }
  if (i + len > n) return {1, CharClass::kOther};
  for (uint32_t k = 1; k < len; ++k) {
    const unsigned b = s[i + k];
    if (b < (k == 1 ? lo : 0x80u) || b > (k == 1 ? hi : 0xbfu)) return {1, CharClass::kOther};
    cp = (cp << 6) | (b & 0x3f);
  }
  return {len, classify_non_ascii(cp)};
}

// Calls fn(std::string_view piece) for each match of
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// scanning left to right with the regex's alternation order and greedy backtracking.
template <typename Fn>
void for_each_piece(std::string_view text, Fn&& fn) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  size_t i = 0;
  while (i < n) {
    // 's 't 're 've 'm 'll 'd (ASCII, lower case only, as in GPT-2).
    if (s[i] == '\'' && i + 1 < n) {
      const unsigned char a = s[i + 1];
      if (a == 's' || a == 't' || a == 'm' || a == 'd') {
        fn(text.substr(i, 2));
        i += 2;
        continue;
      }
      if (i + 2 < n) {
        const unsigned char b = s[i + 2];
        if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) {
          fn(text.substr(i, 3));
          i += 3;
          continue;
        }
      }
    }
    const Char c = char_at(s, n, i);
    size_t j = i;
    CharClass run = c.cls;
    if (s[i] == ' ' && i + 1 < n) {
      // " ?X+": a single ASCII space joins a following letter, number or other run.
      const Char d = char_at(s, n, i + 1);
      if (d.cls != CharClass::kSpace) {
        run = d.cls;
        j = i + 1;
      }
    }
    if (run != CharClass::kSpace) {
      while (j < n) {
        const Char e = char_at(s, n, j);
        if (e.cls != run) break;
        j += e.len;
      }
      fn(text.substr(i, j - i));
      i = j;
      continue;
    }
    // Whitespace run [i, j); `last` is where its final character starts.
    size_t last = i;
    while (j < n) {
      const Char e = char_at(s, n, j);
      if (e.cls != CharClass::kSpace) break;
      last = j;
      j += e.len;
    }
    // \s+(?!\S): at the end of text take it all; before a non-space leave the final space
    // character to prefix the next piece; a single space character falls to \s+.
    const size_t end = (j == n || last == i) ? j : last;
    fn(text.substr(i, end - i));
    i = end;
  }
}

}  // namespace ft::trainer::data::gpt2_detail
