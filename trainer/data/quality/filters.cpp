// filters.cpp: Gopher/C4-style noise filters (length, alphabetic/symbol ratios, repetition,
// non-text bytes, C4 boilerplate lines).
#include <xxhash.h>

#include <algorithm>
#include <string>
#include <unordered_set>

#include "ft/trainer/quality.h"

namespace ft::trainer::data {

namespace {

bool is_space(unsigned char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

std::vector<std::string_view> split_words(std::string_view text) {
  std::vector<std::string_view> words;
  size_t i = 0;
  while (i < text.size()) {
    while (i < text.size() && is_space(static_cast<unsigned char>(text[i]))) ++i;
    const size_t b = i;
    while (i < text.size() && !is_space(static_cast<unsigned char>(text[i]))) ++i;
    if (i > b) words.push_back(text.substr(b, i - b));
  }
  return words;
}

std::string_view strip(std::string_view s) {
  while (!s.empty() && is_space(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && is_space(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

double alpha_word_ratio(const std::vector<std::string_view>& words) {
  if (words.empty()) return 0;
  size_t alpha = 0;
  for (std::string_view w : words) {
    alpha += std::any_of(w.begin(), w.end(), [](char ch) {
      const auto c = static_cast<unsigned char>(ch);
      return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c >= 0x80;
    });
  }
  return static_cast<double>(alpha) / words.size();
}

size_t count_substr(std::string_view text, std::string_view needle) {
  size_t n = 0;
  for (size_t p = text.find(needle); p != std::string_view::npos;
       p = text.find(needle, p + needle.size()))
    ++n;
  return n;
}

// max('#' per word, ellipses per word) (Gopher's two symbol-to-word ratios).
double symbol_word_ratio(std::string_view text, size_t words) {
  if (words == 0) return 0;
  const size_t hashes = count_substr(text, "#");
  const size_t ellipses = count_substr(text, "...") + count_substr(text, "\xE2\x80\xA6");
  return static_cast<double>(std::max(hashes, ellipses)) / words;
}

// Gopher's duplicate-line fractions (datatrove's find_duplicates: later occurrences count).
std::pair<double, double> dup_line_ratios(std::string_view text, int64_t* lines_out) {
  std::unordered_set<std::string_view> seen;
  size_t lines = 0, dup_lines = 0, dup_chars = 0;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view line = strip(text.substr(pos, end - pos));
    if (!line.empty()) {
      ++lines;
      if (!seen.insert(line).second) {
        ++dup_lines;
        dup_chars += line.size();
      }
    }
    pos = end + 1;
  }
  if (lines_out) *lines_out = static_cast<int64_t>(lines);
  if (lines == 0 || text.empty()) return {0, 0};
  return {static_cast<double>(dup_lines) / lines, static_cast<double>(dup_chars) / text.size()};
}

struct Ngrams {
  std::vector<uint64_t> hash;  // per word
  std::vector<size_t> len;     // per word, bytes
  std::vector<size_t> prefix;  // prefix sums of len
};

Ngrams prepare(const std::vector<std::string_view>& words) {
  Ngrams g;
  g.hash.reserve(words.size());
  g.len.reserve(words.size());
  g.prefix.assign(words.size() + 1, 0);
  for (size_t i = 0; i < words.size(); ++i) {
    g.hash.push_back(XXH3_64bits(words[i].data(), words[i].size()));
    g.len.push_back(words[i].size());
    g.prefix[i + 1] = g.prefix[i] + words[i].size();
  }
  return g;
}

// Open-addressing map from 64-bit keys to counts, reused across documents (one per thread).
class FlatCounter {
 public:
  void reset(size_t n) {
    size_t cap = 64;
    while (cap < 2 * n) cap <<= 1;
    if (keys_.size() < cap) {
      keys_.resize(cap);
      counts_.resize(cap);
    }
    mask_ = cap - 1;
    std::fill_n(keys_.begin(), cap, 0);
  }
  // The count slot of `key` (0 for a new key).
  uint32_t& slot(uint64_t key) {
    key |= 1;  // 0 marks empty slots
    size_t i = (key ^ (key >> 29)) & mask_;
    while (keys_[i] != 0 && keys_[i] != key) i = (i + 1) & mask_;
    if (keys_[i] == 0) {
      keys_[i] = key;
      counts_[i] = 0;
    }
    return counts_[i];
  }

 private:
  std::vector<uint64_t> keys_;
  std::vector<uint32_t> counts_;
  size_t mask_ = 0;
};

FlatCounter& thread_counter() {
  thread_local FlatCounter c;
  return c;
}

uint64_t ngram_hash(const Ngrams& g, size_t i, int n) {
  return XXH3_64bits(g.hash.data() + i, n * sizeof(uint64_t));
}

// Characters of the most frequent n-gram (words joined by spaces) times its count / chars.
double top_ngram_ratio(const Ngrams& g, int n, size_t text_chars) {
  const size_t m = g.hash.size();
  if (m < static_cast<size_t>(n) || text_chars == 0) return 0;
  FlatCounter& counts = thread_counter();
  counts.reset(m);
  uint32_t best = 0;
  size_t best_pos = 0;
  for (size_t i = 0; i + n <= m; ++i) {
    const uint32_t c = ++counts.slot(ngram_hash(g, i, n));
    if (c > best) best = c, best_pos = i;  // a later occurrence of the same n-gram: same length
  }
  if (best < 2) return 0;
  const size_t chars = g.prefix[best_pos + n] - g.prefix[best_pos] + (n - 1);
  return static_cast<double>(chars) * best / text_chars;
}

// datatrove's find_all_duplicate: characters in n-grams seen before (skipping past them).
double dup_ngram_ratio(const Ngrams& g, int n, size_t text_chars) {
  const size_t m = g.hash.size();
  if (m < static_cast<size_t>(n) || text_chars == 0) return 0;
  FlatCounter& seen = thread_counter();
  seen.reset(m);
  size_t repeated = 0, i = 0;
  while (i + n <= m) {
    if (seen.slot(ngram_hash(g, i, n))++ > 0) {
      repeated += g.prefix[i + n] - g.prefix[i];
      i += n;
    } else {
      ++i;
    }
  }
  return static_cast<double>(repeated) / text_chars;
}

std::string lower(std::string_view s) {
  std::string r(s);
  for (char& c : r) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return r;
}

// C4's line rules (Raffel et al. 2020, section 2.2) that name phrases.
bool c4_boilerplate_line(const std::string& lower_line) {
  static constexpr const char* kPhrases[] = {"javascript",    "terms of use", "privacy policy",
                                             "cookie policy", "uses cookies", "use of cookies",
                                             "use cookies"};
  for (const char* p : kPhrases) {
    if (lower_line.find(p) != std::string::npos) return true;
  }
  return false;
}

}  // namespace

const char* rule_name(Rule rule) {
  switch (rule) {
    case Rule::kNonText:
      return "non_text";
    case Rule::kTooShort:
      return "too_short";
    case Rule::kTooLong:
      return "too_long";
    case Rule::kAlphaRatio:
      return "alpha_ratio";
    case Rule::kSymbolRatio:
      return "symbol_ratio";
    case Rule::kRepeatedLines:
      return "repeated_lines";
    case Rule::kRepeatedNgrams:
      return "repeated_ngrams";
    case Rule::kBoilerplate:
      return "boilerplate";
    case Rule::kCount:
      break;
  }
  return "?";
}

int64_t count_non_text_bytes(std::string_view text) {
  int64_t bad = 0;
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  size_t i = 0;
  while (i < n) {
    const unsigned char c = p[i];
    if (c < 0x80) {
      if ((c < 0x20 && c != '\t' && c != '\n' && c != '\r' && c != '\f' && c != '\v') || c == 0x7F)
        ++bad;
      ++i;
      continue;
    }
    int len = 0;
    uint32_t cp = 0;
    if (c >= 0xC2 && c <= 0xDF)
      len = 2, cp = c & 0x1F;
    else if (c >= 0xE0 && c <= 0xEF)
      len = 3, cp = c & 0x0F;
    else if (c >= 0xF0 && c <= 0xF4)
      len = 4, cp = c & 0x07;
    bool ok = len > 0 && i + len <= n;
    for (int k = 1; ok && k < len; ++k) {
      ok = (p[i + k] & 0xC0) == 0x80;
      cp = (cp << 6) | (p[i + k] & 0x3F);
    }
    // Overlong 3/4-byte forms, surrogates and code points past U+10FFFF are invalid.
    if (ok && ((len == 3 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) ||
               (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)))) {
      ok = false;
    }
    if (ok && cp >= 0x80 && cp < 0xA0) ++bad;  // C1 control characters
    if (ok) {
      i += len;
    } else {
      ++bad;
      ++i;
    }
  }
  return bad;
}

TextSignals text_signals(std::string_view text) {
  TextSignals s;
  s.bytes = static_cast<int64_t>(text.size());
  s.non_text_bytes = count_non_text_bytes(text);
  const std::vector<std::string_view> words = split_words(text);
  s.words = static_cast<int64_t>(words.size());
  s.alpha_word_ratio = alpha_word_ratio(words);
  s.symbol_word_ratio = symbol_word_ratio(text, words.size());
  std::tie(s.dup_line_ratio, s.dup_line_char_ratio) = dup_line_ratios(text, &s.lines);
  const Ngrams g = prepare(words);
  for (int n = 2; n <= 4; ++n) s.top_ngram_ratio[n - 2] = top_ngram_ratio(g, n, text.size());
  for (int n = 5; n <= 10; ++n) s.dup_ngram_ratio[n - 5] = dup_ngram_ratio(g, n, text.size());
  return s;
}

FilterResult apply_filters(std::string_view text, const FilterOptions& o) {
  FilterResult r;
  if (!o.enabled) {
    r.text.assign(text);
    return r;
  }
  auto reject = [&r](Rule rule) {
    r.rejected = rule;
    r.text.clear();
    return r;
  };
  if (!text.empty() &&
      static_cast<double>(count_non_text_bytes(text)) > o.max_non_text_ratio * text.size()) {
    return reject(Rule::kNonText);
  }
  if (o.c4_boilerplate) {
    if (lower(text).find("lorem ipsum") != std::string::npos) return reject(Rule::kBoilerplate);
    size_t pos = 0;
    bool any_kept = false;
    while (pos <= text.size()) {
      size_t end = text.find('\n', pos);
      if (end == std::string_view::npos) end = text.size();
      const std::string_view line = text.substr(pos, end - pos);
      if (c4_boilerplate_line(lower(line))) {
        ++r.lines_removed;
      } else {
        if (any_kept) r.text += '\n';
        r.text.append(line);
        any_kept = true;
      }
      pos = end + 1;
    }
    if (r.lines_removed > 0 && strip(r.text).empty()) return reject(Rule::kBoilerplate);
  } else {
    r.text.assign(text);
  }
  const std::string_view t = r.text;
  const std::vector<std::string_view> words = split_words(t);
  const auto nw = static_cast<int64_t>(words.size());
  const auto nc = static_cast<int64_t>(t.size());
  if (nw < o.min_words || nc < o.min_chars) return reject(Rule::kTooShort);
  if (nw > o.max_words || nc > o.max_chars) return reject(Rule::kTooLong);
  if (alpha_word_ratio(words) < o.min_alpha_word_ratio) return reject(Rule::kAlphaRatio);
  if (symbol_word_ratio(t, words.size()) > o.max_symbol_word_ratio)
    return reject(Rule::kSymbolRatio);
  const auto [dup_lines, dup_line_chars] = dup_line_ratios(t, nullptr);
  if (dup_lines > o.max_dup_line_ratio || dup_line_chars > o.max_dup_line_char_ratio) {
    return reject(Rule::kRepeatedLines);
  }
  const Ngrams g = prepare(words);
  for (int n = 2; n <= 4; ++n) {
    if (top_ngram_ratio(g, n, t.size()) > o.max_top_ngram_ratio - 0.02 * (n - 2)) {
      return reject(Rule::kRepeatedNgrams);
    }
  }
  for (int n = 5; n <= 10; ++n) {
    if (dup_ngram_ratio(g, n, t.size()) > o.max_dup_ngram_ratio - 0.01 * (n - 5)) {
      return reject(Rule::kRepeatedNgrams);
    }
  }
  return r;
}

}  // namespace ft::trainer::data
