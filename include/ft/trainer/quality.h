// quality.h: data-quality cleaning: exact and MinHash-LSH near-duplicate removal, noise filters.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace ft::trainer::data {

// ---- exact duplicates ---------------------------------------------------------------------

// 128-bit content hash (XXH3-128 of the bytes).
struct Hash128 {
  uint64_t lo = 0, hi = 0;
  bool operator==(const Hash128&) const = default;
};
Hash128 content_hash(std::string_view text);

// Remembers the content hashes of the documents it has seen: 16 bytes of key and 8 of value
// per document in an open-addressing table kept at most half full (<= 48 bytes per document).
class ExactDeduper {
 public:
  // True when `text` (or its hash) was not seen before; it is remembered either way.
  bool insert(std::string_view text) { return insert_hash(content_hash(text)); }
  bool insert_hash(const Hash128& h) { return insert_or_find(h, 0) < 0; }
  // Remembers `h` with `value` (e.g. the document's ordinal) and returns -1, or returns the
  // value stored with `h` when it was seen before.
  int64_t insert_or_find(const Hash128& h, uint64_t value);
  size_t size() const { return size_; }
  size_t memory_bytes() const {
    return slots_.capacity() * sizeof(Hash128) + values_.capacity() * sizeof(uint64_t);
  }

 private:
  void grow();
  std::vector<Hash128> slots_;  // {0,0} marks an empty slot (a real {0,0} hash is remapped)
  std::vector<uint64_t> values_;  // per slot
  size_t size_ = 0;
};

// ---- near duplicates: MinHash LSH ----------------------------------------------------------

enum class ShingleKind { kWord, kChar };

struct MinHashOptions {
  ShingleKind shingle = ShingleKind::kWord;  // word n-grams (lower-cased alphanumeric runs) or
  int shingle_size = 5;                      // character n-grams (bytes); n
  int num_perm = 128;                        // hash functions = signature length
  double threshold = 0.8;                    // Jaccard at or above which a document is a duplicate
  uint64_t seed = 1;                         // hash-function seed
  int bands = 0, rows = 0;                   // 0: chosen from threshold (recall_lsh_params)
  // LSH candidates whose MinHash estimate is below threshold - margin are dropped before the
  // exact check (0.2 is ~6 standard deviations of a 128-permutation estimate at J = 0.8).
  double prefilter_margin = 0.2;
};

// LSH banding: a pair becomes a candidate when all `rows` values of at least one of the
// `bands` bands agree: P(candidate | Jaccard s) = 1 - (1 - s^rows)^bands.
struct LshParams {
  int bands = 0, rows = 0;
  double false_positive = 0;  // integral of P(candidate | s) over s in [0, threshold]
  double false_negative = 0;  // integral of 1 - P(candidate | s) over s in [threshold, 1]
};
// The areas for given bands and rows.
LshParams lsh_params(double threshold, int bands, int rows);
// The rule of datasketch's MinHashLSH: over all bands * rows <= num_perm, minimise
// fp_weight * false_positive + fn_weight * false_negative.
LshParams choose_lsh_params(double threshold, int num_perm, double fp_weight = 0.5,
                            double fn_weight = 0.5);
// For candidates that are then verified exactly: the most rows per band (the fewest false
// candidates) with bands = num_perm / rows such that a pair at the threshold becomes a
// candidate with probability >= min_recall (128 permutations at 0.8: 21 x 6, P = 0.998).
LshParams recall_lsh_params(double threshold, int num_perm, double min_recall = 0.995);

// The set of shingle hashes of `text` (sorted, unique). A text shorter than one shingle
// contributes itself as its only shingle; an empty text has no shingles.
std::vector<uint64_t> shingle_hashes(std::string_view text, ShingleKind kind, int n);
// |A ∩ B| / |A ∪ B| of the shingle sets (1 when both are empty).
double exact_jaccard(std::string_view a, std::string_view b, ShingleKind kind, int n);
// The same for two sorted, unique shingle-hash sets.
double set_jaccard(const std::vector<uint64_t>& a, const std::vector<uint64_t>& b);

// Signatures: value i is min over shingles x of (a_i * x + b_i) >> 32 (multiply-shift hashing,
// a_i odd, 64-bit arithmetic), so P(sig_a[i] == sig_b[i]) ~= Jaccard(a, b).
class MinHasher {
 public:
  explicit MinHasher(const MinHashOptions& options);
  int num_perm() const { return static_cast<int>(a_.size()); }
  void signature(std::string_view text, uint32_t* out) const;  // out[num_perm()]
  std::vector<uint32_t> signature(std::string_view text) const;
  void signature_of_shingles(const std::vector<uint64_t>& shingles, uint32_t* out) const;

 private:
  MinHashOptions options_;
  std::vector<uint64_t> a_, b_;
};

// Fraction of equal positions: the MinHash estimate of the Jaccard similarity.
double estimate_jaccard(const uint32_t* a, const uint32_t* b, int num_perm);
// The same from the low bytes of two signatures (b-bit MinHash, b = 8: unequal values share
// a low byte with probability 1/256, which the estimate corrects for).
double estimate_jaccard_8bit(const uint8_t* a, const uint8_t* b, int num_perm);

// LSH index over documents' signatures. Memory per document: num_perm bytes of 8-bit signature
// + bands * (4 bytes of chain link) + bands table entries of 8 bytes in a table kept at most
// 70% full (<= 12 bytes each, 23 with growth). Texts are not stored.
class NearDupIndex {
 public:
  explicit NearDupIndex(const MinHashOptions& options);
  // Verifies every LSH candidate by estimated Jaccard. If one reaches the threshold, returns
  // its id (order of insertion) and stores nothing; otherwise stores `sig` as a new document
  // and returns -1.
  int64_t insert_or_match(const uint32_t* sig);
  // Same check without storing.
  int64_t match(const uint32_t* sig) const;
  // Every stored document sharing a band with `sig` whose estimate reaches `min_estimate`, in
  // ascending id order (`out` is cleared first).
  void candidates(const uint32_t* sig, double min_estimate, std::vector<uint32_t>* out) const;
  uint32_t insert(const uint32_t* sig);  // stores `sig` unconditionally; returns its id
  const LshParams& params() const { return params_; }
  // The 32-bit hash of band `band` of `sig` (never 0) that the index files documents under.
  uint32_t band_key(const uint32_t* sig, int band) const;
  size_t size() const { return count_; }
  size_t memory_bytes() const;
  uint64_t candidates_checked() const { return candidates_checked_; }

 private:
  double estimate(const uint32_t* sig, uint32_t doc) const;  // against the stored 8-bit one
  int64_t find(const uint32_t* sig, const std::vector<uint32_t>& keys) const;
  void table_insert(uint32_t key, uint32_t doc, int band);
  void grow();
  MinHashOptions options_;
  LshParams params_;
  // The low byte of each MinHash value (b-bit MinHash, b = 8): enough for the estimate that
  // prefilters candidates, a quarter of the full signature.
  std::vector<uint8_t> sig8_;    // count_ * num_perm
  std::vector<uint32_t> next_;   // count_ * bands: previous document with the same band key
  std::vector<uint32_t> keys_;   // band hashes folded to 32 bits, open addressing; 0 = empty
  std::vector<uint32_t> heads_;  // newest document with that key
  size_t used_ = 0;
  size_t count_ = 0;
  mutable uint64_t candidates_checked_ = 0;
};

// ---- noise filters ---------------------------------------------------------------------------

enum class Rule : int {
  kNonText = 0,     // invalid UTF-8 or control bytes
  kTooShort,        // fewer words / characters than the minimum
  kTooLong,         // more words / characters than the maximum
  kAlphaRatio,      // too few words containing a letter
  kSymbolRatio,     // too many '#' / ellipses per word
  kRepeatedLines,   // duplicate lines
  kRepeatedNgrams,  // top or duplicated word n-grams
  kBoilerplate,     // "lorem ipsum", or nothing left after boilerplate lines were dropped
  kCount
};
constexpr int kRuleCount = static_cast<int>(Rule::kCount);
const char* rule_name(Rule rule);  // e.g. "repeated_lines"

// Thresholds. Defaults follow Gopher (Rae et al. 2021, appendix A) and C4 (Raffel et al. 2020)
// where those define them; docs/benchmarks.md lists each with its source.
struct FilterOptions {
  bool enabled = true;
  double max_non_text_ratio = 0.001;  // (invalid UTF-8 bytes + control bytes) / bytes (ft)
  int64_t min_words = 3;              // C4: lines need >= 3 words (applied per document)
  int64_t max_words = 100000;         // Gopher
  int64_t min_chars = 0;
  int64_t max_chars = 1000000;
  double min_alpha_word_ratio = 0.8;     // Gopher: 80% of words contain an alphabetic character
  double max_symbol_word_ratio = 0.1;    // Gopher: '#' or '...' per word
  double max_dup_line_ratio = 0.3;       // Gopher: duplicate lines / lines
  double max_dup_line_char_ratio = 0.2;  // Gopher: chars in duplicate lines / chars
  double max_top_ngram_ratio = 0.20;     // Gopher: chars of the top 2-gram (3: -0.02, 4: -0.04)
  double max_dup_ngram_ratio = 0.15;     // Gopher: chars in dup. 5-grams (-0.01 per n up to 10)
  bool c4_boilerplate = true;            // C4: drop lines with "javascript", "terms of use", ...
};

struct FilterResult {
  std::optional<Rule> rejected;  // the first rule that failed
  int64_t lines_removed = 0;     // boilerplate lines dropped
  std::string text;              // the document after line cleaning (when kept)
};
FilterResult apply_filters(std::string_view text, const FilterOptions& options);

// The individual signals (exposed for tests and ft-data stats).
struct TextSignals {
  int64_t bytes = 0, words = 0, lines = 0;
  int64_t non_text_bytes = 0;
  double alpha_word_ratio = 0, symbol_word_ratio = 0;
  double dup_line_ratio = 0, dup_line_char_ratio = 0;
  std::array<double, 3> top_ngram_ratio{};  // n = 2, 3, 4
  std::array<double, 6> dup_ngram_ratio{};  // n = 5 .. 10
};
TextSignals text_signals(std::string_view text);
int64_t count_non_text_bytes(std::string_view text);

// ---- the cleaning pipeline -----------------------------------------------------------------

struct CleanOptions {
  FilterOptions filters;
  bool exact_dedup = true;
  bool near_dedup = true;
  MinHashOptions minhash;
  size_t batch_docs = 2048;          // documents buffered per parallel batch, at most
  size_t batch_bytes = 64ull << 20;  // and at most this many bytes (one document may exceed it)
};

struct CleanStats {
  uint64_t docs_in = 0, bytes_in = 0;
  uint64_t exact_dups = 0, exact_dup_bytes = 0;
  uint64_t near_dups = 0, near_dup_bytes = 0;
  std::array<uint64_t, kRuleCount> rule_docs{}, rule_bytes{};
  uint64_t boilerplate_lines_removed = 0;
  uint64_t docs_kept = 0, bytes_kept = 0;
  uint64_t bad_lines_skipped = 0;  // input lines that were no document (--on-bad-line skip)
  uint64_t candidate_pairs = 0;    // LSH candidates listed in the first pass (after prefilter)
  uint64_t jaccard_checks = 0;     // exact Jaccards computed in the second pass
  uint64_t peak_held_sets = 0;     // most shingle sets held at once in the second pass
  LshParams lsh;
  int num_perm = 0;
  uint64_t exact_index_bytes = 0, near_index_bytes = 0;
  double seconds = 0;
  uint64_t peak_rss_bytes = 0;

  uint64_t docs_removed() const;
  nlohmann::json to_json() const;
  std::string to_table() const;
};

// What the cleaner decided for one document, in input order.
struct CleanDecision {
  uint64_t ordinal = 0;  // 0-based position of the document in the input
  bool kept = false;
  std::string_view text;      // kept: the text after line cleaning (valid during the call)
  bool text_changed = false;  // kept: boilerplate lines were dropped from it
  std::string_view rule;      // removed: a filter rule_name, "exact_duplicate" or "near_duplicate"
  int64_t duplicate_of = -1;  // duplicates: ordinal of the kept document it duplicates
  double similarity = 0;      // near duplicates: the MinHash estimate of their Jaccard
};

// Streams documents through filters, exact and near-duplicate removal (in that order; the
// first occurrence is kept). Documents are buffered in batches (batch_docs / batch_bytes) whose
// filters, hashes, signatures and shingle sets are computed in parallel (OpenMP); decisions
// are then made in input order, so the output does not depend on the thread count.
//
// Near duplicates take two passes over the same documents, in the same order. The first
// (add, finish) filters, removes exact copies and lists each document's LSH candidates among
// the earlier ones (MinHash signatures, bands chosen for recall: recall_lsh_params). The second
// (verify, finish_verify) decides: a document is a near duplicate of the first earlier *kept*
// candidate whose exact Jaccard of shingle sets reaches the threshold. Only the index (the
// signatures, the candidate lists, 2 bytes a document) lives through both passes; a shingle set
// is held in the second pass only from its document to the last candidate that names it.
// Without near dedup (or when no document has a candidate) decisions come out of the first
// pass and needs_second_pass() is false.
class Cleaner {
 public:
  using Sink = std::function<void(std::string_view text)>;         // kept texts only
  using DecisionSink = std::function<void(const CleanDecision&)>;  // every document
  Cleaner(CleanOptions options, Sink sink);
  Cleaner(CleanOptions options, DecisionSink sink);
  void add(std::string_view text);
  void finish();  // flushes the last batch of the first pass
  bool needs_second_pass() const { return options_.near_dedup; }
  // The second pass: every document of the first, in the same order. Throws Error when the
  // documents differ in number (or a filtered one no longer is) from the first pass.
  void verify(std::string_view text);
  void finish_verify();
  const CleanStats& stats() const { return stats_; }
  const CleanOptions& options() const { return options_; }

 private:
  // Per-document state between the passes (kind_): a filter Rule, or one of these, | kCleaned.
  enum Kind : uint8_t { kExactDup = 100, kUnique, kHasCandidates, kKept, kNearDup };
  static constexpr uint8_t kCleaned = 0x80;  // line cleaning changed its text
  void process_batch();
  void verify_batch();
  // Counts `d` (`filter`: the Rule that removed it, or -1) and hands it to the sink.
  void decide(CleanDecision& d, uint64_t bytes, const FilterResult* r, int filter);
  CleanOptions options_;
  DecisionSink sink_;
  MinHasher hasher_;
  ExactDeduper exact_;
  NearDupIndex near_;
  std::vector<uint64_t> near_ordinal_;               // the input ordinal of each document in near_
  std::vector<uint8_t> kind_;                        // per input document
  std::unordered_map<uint64_t, uint64_t> exact_of_;  // exact duplicate -> its original
  std::unordered_map<uint64_t, std::pair<uint64_t, uint32_t>> cands_;  // -> (offset, count)
  std::vector<uint64_t> cand_list_;                // candidates' ordinals, ascending per document
  std::unordered_map<uint64_t, uint32_t> needed_;  // later documents naming this candidate
  std::unordered_map<uint64_t, std::vector<uint64_t>> sets_;  // held shingle sets
  std::vector<std::string> batch_;
  size_t batch_bytes_ = 0;
  uint64_t verified_ = 0;  // second pass: documents seen
  CleanStats stats_;
};

// Peak resident set size of this process (getrusage), in bytes.
uint64_t peak_rss_bytes();

// ---- labelled near-duplicate pairs -----------------------------------------------------------

struct LabelledPair {
  std::string a, b;
  double true_jaccard = 0;  // exact, on the shingle sets of the MinHash options
  double edit_rate = 0;     // fraction of words edited to make b from a (1: unrelated)
};

// Pairs built from `docs` (real text): for each edit rate, b is a with that fraction of its
// words substituted, deleted or inserted (seeded); plus negatives pairing unrelated documents.
std::vector<LabelledPair> make_labelled_pairs(const std::vector<std::string>& docs,
                                              const std::vector<double>& edit_rates,
                                              size_t pairs_per_rate, const MinHashOptions& opts,
                                              uint64_t seed);

struct NearDupEval {
  uint64_t tp = 0, fp = 0, fn = 0, tn = 0;
  double precision() const { return tp + fp ? double(tp) / double(tp + fp) : 1.0; }
  double recall() const { return tp + fn ? double(tp) / double(tp + fn) : 1.0; }
};
// Label: true_jaccard >= threshold. Prediction: the Cleaner's rule: b is an LSH candidate of a
// (prefiltered by estimate) and their exact Jaccard reaches the threshold.
NearDupEval evaluate_near_dup(const std::vector<LabelledPair>& pairs, const MinHashOptions& opts);

}  // namespace ft::trainer::data
