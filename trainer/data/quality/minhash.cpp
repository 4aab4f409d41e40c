// minhash.cpp: shingling, MinHash signatures, LSH parameter choice and the near-duplicate index.
#include <fmt/format.h>
#include <xxhash.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "ft/core/error.h"
#include "ft/trainer/quality.h"

namespace ft::trainer::data {

namespace {

uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

bool is_word_byte(unsigned char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c >= 0x80;
}

// Hashes of the lower-cased alphanumeric runs of `text`, in order.
void word_hashes(std::string_view text, std::vector<uint64_t>& out) {
  out.clear();
  std::string word;
  size_t i = 0;
  while (i < text.size()) {
    while (i < text.size() && !is_word_byte(static_cast<unsigned char>(text[i]))) ++i;
    word.clear();
    while (i < text.size() && is_word_byte(static_cast<unsigned char>(text[i]))) {
      char c = text[i++];
      if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
      word.push_back(c);
    }
    if (!word.empty()) out.push_back(XXH3_64bits(word.data(), word.size()));
  }
}

void validate(const MinHashOptions& o) {
  if (o.shingle_size < 1) throw ConfigError("shingle size must be >= 1");
  if (o.num_perm < 1 || o.num_perm > 4096) throw ConfigError("--num-perm must be in [1, 4096]");
  if (!(o.threshold > 0 && o.threshold <= 1)) {
    throw ConfigError(fmt::format("--near-dup-threshold {} must be in (0, 1]", o.threshold));
  }
  if ((o.bands > 0) != (o.rows > 0) || o.bands < 0 || o.rows < 0 ||
      static_cast<int64_t>(o.bands) * o.rows > o.num_perm) {
    throw ConfigError(fmt::format("--bands {} x --rows {} must both be set and <= --num-perm {}",
                                  o.bands, o.rows, o.num_perm));
  }
}

// Simpson's rule with 256 intervals.
template <typename F>
double integrate(F f, double a, double b) {
  constexpr int kN = 256;
  const double h = (b - a) / kN;
  double s = f(a) + f(b);
  for (int i = 1; i < kN; ++i) s += f(a + i * h) * (i % 2 ? 4 : 2);
  return s * h / 3;
}

}  // namespace

LshParams lsh_params(double threshold, int bands, int rows) {
  auto p = [bands, rows](double s) { return 1 - std::pow(1 - std::pow(s, rows), bands); };
  return {bands, rows, integrate(p, 0.0, threshold),
          integrate([&](double s) { return 1 - p(s); }, threshold, 1.0)};
}

LshParams choose_lsh_params(double threshold, int num_perm, double fp_weight, double fn_weight) {
  LshParams best;
  double best_err = std::numeric_limits<double>::infinity();
  for (int b = 1; b <= num_perm; ++b) {
    for (int r = 1; r <= num_perm / b; ++r) {
      const LshParams p = lsh_params(threshold, b, r);
      const double err = p.false_positive * fp_weight + p.false_negative * fn_weight;
      if (err < best_err) {
        best_err = err;
        best = p;
      }
    }
  }
  return best;
}

LshParams recall_lsh_params(double threshold, int num_perm, double min_recall) {
  LshParams best = lsh_params(threshold, num_perm, 1);  // one row per band: the most recall
  for (int r = 2; r <= num_perm; ++r) {
    const int b = num_perm / r;
    if (1 - std::pow(1 - std::pow(threshold, r), b) < min_recall) break;
    best = lsh_params(threshold, b, r);
  }
  return best;
}

std::vector<uint64_t> shingle_hashes(std::string_view text, ShingleKind kind, int n) {
  std::vector<uint64_t> out;
  if (text.empty() || n < 1) return out;
  if (kind == ShingleKind::kChar) {
    if (text.size() <= static_cast<size_t>(n)) {
      out.push_back(XXH3_64bits(text.data(), text.size()));
    } else {
      out.reserve(text.size() - n + 1);
      for (size_t i = 0; i + n <= text.size(); ++i) out.push_back(XXH3_64bits(text.data() + i, n));
    }
  } else {
    std::vector<uint64_t> words;
    word_hashes(text, words);
    if (words.empty()) return out;
    const size_t m = std::min<size_t>(n, words.size());
    out.reserve(words.size() - m + 1);
    for (size_t i = 0; i + m <= words.size(); ++i) {
      out.push_back(XXH3_64bits(words.data() + i, m * sizeof(uint64_t)));
    }
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

double exact_jaccard(std::string_view a, std::string_view b, ShingleKind kind, int n) {
  return set_jaccard(shingle_hashes(a, kind, n), shingle_hashes(b, kind, n));
}

double set_jaccard(const std::vector<uint64_t>& sa, const std::vector<uint64_t>& sb) {
  if (sa.empty() && sb.empty()) return 1.0;
  size_t inter = 0, i = 0, j = 0;
  while (i < sa.size() && j < sb.size()) {
    if (sa[i] == sb[j]) {
      ++inter, ++i, ++j;
    } else if (sa[i] < sb[j]) {
      ++i;
    } else {
      ++j;
    }
  }
  return static_cast<double>(inter) / static_cast<double>(sa.size() + sb.size() - inter);
}

MinHasher::MinHasher(const MinHashOptions& options) : options_(options) {
  validate(options);
  uint64_t state = options.seed;
  a_.resize(options.num_perm);
  b_.resize(options.num_perm);
  for (int i = 0; i < options.num_perm; ++i) {
    a_[i] = splitmix64(state) | 1;
    b_[i] = splitmix64(state);
  }
}

void MinHasher::signature_of_shingles(const std::vector<uint64_t>& shingles, uint32_t* out) const {
  const int np = num_perm();
  thread_local std::vector<uint64_t> mins;
  mins.assign(np, std::numeric_limits<uint64_t>::max());
  uint64_t* __restrict m = mins.data();
  const uint64_t* __restrict a = a_.data();
  const uint64_t* __restrict b = b_.data();
  for (const uint64_t x : shingles) {
#pragma omp simd
    for (int i = 0; i < np; ++i) {
      const uint64_t v = (a[i] * x + b[i]) >> 32;
      m[i] = v < m[i] ? v : m[i];
    }
  }
  for (int i = 0; i < np; ++i)
    out[i] = static_cast<uint32_t>(std::min<uint64_t>(m[i], 0xFFFFFFFFu));
}

void MinHasher::signature(std::string_view text, uint32_t* out) const {
  signature_of_shingles(shingle_hashes(text, options_.shingle, options_.shingle_size), out);
}

std::vector<uint32_t> MinHasher::signature(std::string_view text) const {
  std::vector<uint32_t> sig(num_perm());
  signature(text, sig.data());
  return sig;
}

double estimate_jaccard(const uint32_t* a, const uint32_t* b, int num_perm) {
  int eq = 0;
  for (int i = 0; i < num_perm; ++i) eq += a[i] == b[i];
  return static_cast<double>(eq) / num_perm;
}

// ---- NearDupIndex ----------------------------------------------------------------------------

NearDupIndex::NearDupIndex(const MinHashOptions& options) : options_(options) {
  validate(options);
  params_ = options.bands > 0 ? lsh_params(options.threshold, options.bands, options.rows)
                              : recall_lsh_params(options.threshold, options.num_perm);
}

uint32_t NearDupIndex::band_key(const uint32_t* sig, int band) const {
  const uint64_t k = XXH3_64bits_withSeed(sig + static_cast<size_t>(band) * params_.rows,
                                          params_.rows * sizeof(uint32_t), band + 1);
  const uint32_t folded = static_cast<uint32_t>(k ^ (k >> 32));
  return folded == 0 ? 1 : folded;  // a colliding key only adds a candidate, checked later
}

double estimate_jaccard_8bit(const uint8_t* a, const uint8_t* b, int num_perm) {
  int eq = 0;
  for (int i = 0; i < num_perm; ++i) eq += a[i] == b[i];
  // Unequal values share their low byte with probability 1/256 (Li and König's b-bit MinHash).
  constexpr double kChance = 1.0 / 256;
  return std::max(0.0, (static_cast<double>(eq) / num_perm - kChance) / (1 - kChance));
}

double NearDupIndex::estimate(const uint32_t* sig, uint32_t doc) const {
  const int np = options_.num_perm;
  thread_local std::vector<uint8_t> low;
  low.resize(static_cast<size_t>(np));
  for (int i = 0; i < np; ++i) low[static_cast<size_t>(i)] = static_cast<uint8_t>(sig[i]);
  return estimate_jaccard_8bit(
      low.data(), sig8_.data() + static_cast<size_t>(doc) * static_cast<size_t>(np), np);
}

int64_t NearDupIndex::find(const uint32_t* sig, const std::vector<uint32_t>& keys) const {
  if (keys_.empty()) return -1;
  const size_t mask = keys_.size() - 1;
  const int nb = params_.bands;
  thread_local std::vector<uint32_t> seen;
  seen.clear();
  for (int band = 0; band < nb; ++band) {
    const uint32_t key = keys[band];
    size_t i = key & mask;
    while (keys_[i] != 0 && keys_[i] != key) i = (i + 1) & mask;
    if (keys_[i] == 0) continue;
    for (uint32_t doc = heads_[i]; doc != UINT32_MAX;
         doc = next_[static_cast<size_t>(doc) * nb + band]) {
      if (std::find(seen.begin(), seen.end(), doc) != seen.end()) continue;
      seen.push_back(doc);
      ++candidates_checked_;
      if (estimate(sig, doc) >= options_.threshold) return doc;
    }
  }
  return -1;
}

int64_t NearDupIndex::match(const uint32_t* sig) const {
  std::vector<uint32_t> keys(params_.bands);
  for (int band = 0; band < params_.bands; ++band) keys[band] = band_key(sig, band);
  return find(sig, keys);
}

void NearDupIndex::candidates(const uint32_t* sig, double min_estimate,
                              std::vector<uint32_t>* out) const {
  out->clear();
  if (keys_.empty()) return;
  const size_t mask = keys_.size() - 1;
  const int nb = params_.bands;
  for (int band = 0; band < nb; ++band) {
    const uint32_t key = band_key(sig, band);
    size_t i = key & mask;
    while (keys_[i] != 0 && keys_[i] != key) i = (i + 1) & mask;
    if (keys_[i] == 0) continue;
    for (uint32_t doc = heads_[i]; doc != UINT32_MAX;
         doc = next_[static_cast<size_t>(doc) * nb + band]) {
      out->push_back(doc);
    }
  }
  std::sort(out->begin(), out->end());
  out->erase(std::unique(out->begin(), out->end()), out->end());
  candidates_checked_ += out->size();
  out->erase(std::remove_if(out->begin(), out->end(),
                            [&](uint32_t doc) { return estimate(sig, doc) < min_estimate; }),
             out->end());
}

uint32_t NearDupIndex::insert(const uint32_t* sig) {
  if (count_ >= UINT32_MAX - 1) throw ConfigError("near-duplicate index is full (2^32 documents)");
  const uint32_t doc = static_cast<uint32_t>(count_++);
  for (int i = 0; i < options_.num_perm; ++i) sig8_.push_back(static_cast<uint8_t>(sig[i]));
  next_.resize(next_.size() + params_.bands, UINT32_MAX);
  for (int band = 0; band < params_.bands; ++band) table_insert(band_key(sig, band), doc, band);
  return doc;
}

int64_t NearDupIndex::insert_or_match(const uint32_t* sig) {
  thread_local std::vector<uint32_t> keys;
  keys.resize(params_.bands);
  for (int band = 0; band < params_.bands; ++band) keys[band] = band_key(sig, band);
  const int64_t hit = find(sig, keys);
  if (hit >= 0) return hit;
  insert(sig);
  return -1;
}

void NearDupIndex::table_insert(uint32_t key, uint32_t doc, int band) {
  if ((used_ + 1) * 10 > keys_.size() * 7) grow();  // at most 70% full
  const size_t mask = keys_.size() - 1;
  size_t i = key & mask;
  while (keys_[i] != 0 && keys_[i] != key) i = (i + 1) & mask;
  if (keys_[i] == 0) {
    keys_[i] = key;
    heads_[i] = UINT32_MAX;
    ++used_;
  }
  next_[static_cast<size_t>(doc) * params_.bands + band] = heads_[i];
  heads_[i] = doc;
}

void NearDupIndex::grow() {
  std::vector<uint32_t> old_keys = std::move(keys_);
  std::vector<uint32_t> old_heads = std::move(heads_);
  const size_t cap = old_keys.empty() ? 4096 : old_keys.size() * 2;
  keys_.assign(cap, 0);
  heads_.assign(cap, UINT32_MAX);
  const size_t mask = cap - 1;
  for (size_t j = 0; j < old_keys.size(); ++j) {
    if (old_keys[j] == 0) continue;
    size_t i = old_keys[j] & mask;
    while (keys_[i] != 0) i = (i + 1) & mask;
    keys_[i] = old_keys[j];
    heads_[i] = old_heads[j];
  }
}

size_t NearDupIndex::memory_bytes() const {
  return sig8_.capacity() + next_.capacity() * sizeof(uint32_t) +
         keys_.capacity() * sizeof(uint32_t) + heads_.capacity() * sizeof(uint32_t);
}

}  // namespace ft::trainer::data
