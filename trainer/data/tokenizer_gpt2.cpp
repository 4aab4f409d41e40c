// tokenizer_gpt2.cpp: GPT-2 byte-level BPE: merge tables, per-thread piece cache, encode/decode.
#include "ft/trainer/tokenizer_gpt2.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstring>
#include <functional>
#include <queue>

#include "ft/core/error.h"
#include "tokenizer_gpt2_pretok.h"

namespace ft::trainer::data {
namespace {

std::atomic<uint64_t> g_next_instance{1};

constexpr size_t kLongPiece = 64;        // longer pieces use the heap-based merge
constexpr size_t kMaxCachedPiece = 256;  // longer pieces are not cached (rarely repeat)

// Transparent hashing so the cache is probed with string_views without allocating.
struct PieceHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

// One per thread: the ids of each piece seen, stored back to back in `ids`.
struct PieceCache {
  static constexpr size_t kMaxEntries = 1 << 18;
  uint64_t owner = 0;
  std::unordered_map<std::string, std::pair<uint32_t, uint32_t>, PieceHash, std::equal_to<>> map;
  std::vector<int32_t> ids;

  void reset(uint64_t new_owner) {
    owner = new_owner;
    map.clear();
    ids.clear();
  }
};

PieceCache& thread_cache() {
  thread_local PieceCache cache;
  return cache;
}

}  // namespace

uint32_t gpt2_byte_to_unicode(uint8_t b) {
  // Printable Latin-1 bytes map to themselves; the other 68 bytes to 256, 257, ... in order.
  auto printable = [](unsigned x) {
    return (x >= '!' && x <= '~') || (x >= 0xA1 && x <= 0xAC) || (x >= 0xAE && x <= 0xFF);
  };
  if (printable(b)) return b;
  uint32_t n = 0;
  for (unsigned x = 0; x < b; ++x) {
    if (!printable(x)) ++n;
  }
  return 256 + n;
}

Gpt2Tokenizer::Gpt2Tokenizer(const std::vector<std::pair<std::string, int32_t>>& vocab,
                             const std::vector<std::pair<std::string, std::string>>& merges,
                             const std::string& origin)
    : instance_id_(g_next_instance.fetch_add(1)) {
  int32_t max_id = -1;
  for (const auto& [bytes, id] : vocab) {
    if (id < 0) throw FormatError(fmt::format("{}: negative token id {}", origin, id));
    max_id = std::max(max_id, id);
  }
  id_to_bytes_.assign(static_cast<size_t>(max_id + 1), std::string());
  std::unordered_map<std::string, int32_t> bytes_to_id;
  bytes_to_id.reserve(vocab.size());
  std::vector<bool> seen(id_to_bytes_.size(), false);
  for (const auto& [bytes, id] : vocab) {
    if (seen[static_cast<size_t>(id)]) {
      throw FormatError(fmt::format("{}: token id {} appears twice", origin, id));
    }
    seen[static_cast<size_t>(id)] = true;
    id_to_bytes_[static_cast<size_t>(id)] = bytes;
    if (bytes == kEndOfTextText) {
      end_of_text_ = id;
      continue;  // special: never produced by merges
    }
    if (bytes.empty()) throw FormatError(fmt::format("{}: token id {} is empty", origin, id));
    if (!bytes_to_id.emplace(bytes, id).second) {
      throw FormatError(fmt::format("{}: two ids for the same token bytes (id {})", origin, id));
    }
  }
  for (int b = 0; b < 256; ++b) {
    const auto it = bytes_to_id.find(std::string(1, static_cast<char>(b)));
    if (it == bytes_to_id.end()) {
      throw FormatError(fmt::format(
          "{}: no token for byte 0x{:02x} (a byte-level BPE vocabulary needs all 256)", origin, b));
    }
    byte_id_[b] = it->second;
  }
  merges_.reserve(merges.size() * 2);
  for (size_t r = 0; r < merges.size(); ++r) {
    const auto& [a, b] = merges[r];
    const auto ia = bytes_to_id.find(a);
    const auto ib = bytes_to_id.find(b);
    const auto im = bytes_to_id.find(a + b);
    if (ia == bytes_to_id.end() || ib == bytes_to_id.end() || im == bytes_to_id.end()) {
      throw FormatError(
          fmt::format("{}: merge {} (rank {}) uses a token that is not in the "
                      "vocabulary",
                      origin, r + 1, r));
    }
    const uint64_t key =
        (static_cast<uint64_t>(ia->second) << 32) | static_cast<uint32_t>(ib->second);
    // The first (lowest-rank) occurrence of a pair wins, as in GPT-2's dict of ranks.
    merges_.emplace(key, (static_cast<uint64_t>(r) << 32) | static_cast<uint32_t>(im->second));
  }
  num_merges_ = merges.size();
}

uint32_t Gpt2Tokenizer::merge_rank(int32_t a, int32_t b, int32_t* merged) const {
  const auto it = merges_.find((static_cast<uint64_t>(a) << 32) | static_cast<uint32_t>(b));
  if (it == merges_.end()) return UINT32_MAX;
  if (merged) *merged = static_cast<int32_t>(it->second & 0xffffffffu);
  return static_cast<uint32_t>(it->second >> 32);
}

// Merges the lowest-ranked adjacent pair, all its occurrences left to right, until none is left:
// exactly GPT-2's bpe().
void Gpt2Tokenizer::bpe(std::string_view piece, std::vector<int32_t>& out) const {
  if (piece.size() > kLongPiece) {
    bpe_long(piece, out);
    return;
  }
  thread_local std::vector<int32_t> ids;
  thread_local std::vector<uint32_t> ranks;  // ranks[k]: rank of (ids[k], ids[k+1])
  ids.resize(piece.size());
  for (size_t k = 0; k < piece.size(); ++k) ids[k] = byte_id_[static_cast<uint8_t>(piece[k])];
  ranks.resize(ids.size() > 0 ? ids.size() - 1 : 0);
  for (size_t k = 0; k + 1 < ids.size(); ++k) ranks[k] = merge_rank(ids[k], ids[k + 1], nullptr);
  while (ids.size() > 1) {
    const auto best = std::min_element(ranks.begin(), ranks.end());
    if (*best == UINT32_MAX) break;
    const size_t p = static_cast<size_t>(best - ranks.begin());
    const int32_t first = ids[p], second = ids[p + 1];
    int32_t merged = 0;
    merge_rank(first, second, &merged);
    const uint32_t rank = *best;
    // One left-to-right pass merging every (first, second).
    size_t w = 0;
    for (size_t k = 0; k < ids.size();) {
      if (k + 1 < ids.size() && ranks[k] == rank && ids[k] == first && ids[k + 1] == second) {
        ids[w++] = merged;
        k += 2;
      } else {
        ids[w++] = ids[k++];
      }
    }
    ids.resize(w);
    ranks.resize(w > 0 ? w - 1 : 0);
    for (size_t k = 0; k + 1 < w; ++k) ranks[k] = merge_rank(ids[k], ids[k + 1], nullptr);
  }
  out.insert(out.end(), ids.begin(), ids.end());
}

// The same merges with a doubly linked list of symbols and a min-heap of (rank, left symbol).
// All heap entries of the lowest rank are taken as one batch and applied in position order,
// which is GPT-2's left-to-right pass; entries made stale by earlier merges are skipped.
void Gpt2Tokenizer::bpe_long(std::string_view piece, std::vector<int32_t>& out) const {
  const auto n = static_cast<int32_t>(piece.size());
  std::vector<int32_t> id(static_cast<size_t>(n)), prev(static_cast<size_t>(n)),
      next(static_cast<size_t>(n));
  std::vector<uint8_t> alive(static_cast<size_t>(n), 1);
  for (int32_t k = 0; k < n; ++k) {
    id[static_cast<size_t>(k)] = byte_id_[static_cast<uint8_t>(piece[static_cast<size_t>(k)])];
    prev[static_cast<size_t>(k)] = k - 1;
    next[static_cast<size_t>(k)] = k + 1 < n ? k + 1 : -1;
  }
  using Entry = std::pair<uint32_t, int32_t>;  // (rank, left symbol)
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> heap;
  auto push = [&](int32_t l) {
    if (l < 0) return;
    const int32_t r = next[static_cast<size_t>(l)];
    if (r < 0) return;
    const uint32_t rank =
        merge_rank(id[static_cast<size_t>(l)], id[static_cast<size_t>(r)], nullptr);
    if (rank != UINT32_MAX) heap.emplace(rank, l);
  };
  for (int32_t k = 0; k + 1 < n; ++k) push(k);
  std::vector<int32_t> batch, touched;
  while (!heap.empty()) {
    const uint32_t rank = heap.top().first;
    batch.clear();
    while (!heap.empty() && heap.top().first == rank) {
      batch.push_back(heap.top().second);
      heap.pop();
    }
    std::sort(batch.begin(), batch.end());
    touched.clear();
    int32_t first = -1, second = -1, merged = -1;
    for (const int32_t l : batch) {
      const auto ul = static_cast<size_t>(l);
      const int32_t r = next[ul];
      if (!alive[ul] || r < 0) continue;
      const auto ur = static_cast<size_t>(r);
      if (first < 0) {
        // The pair this rank stands for, from the first entry that is still current.
        if (merge_rank(id[ul], id[ur], &merged) != rank) continue;
        first = id[ul];
        second = id[ur];
      }
      if (id[ul] != first || id[ur] != second) continue;
      id[ul] = merged;
      alive[ur] = 0;
      next[ul] = next[ur];
      if (next[ur] >= 0) prev[static_cast<size_t>(next[ur])] = l;
      touched.push_back(l);
    }
    for (const int32_t l : touched) {
      if (!alive[static_cast<size_t>(l)]) continue;
      push(prev[static_cast<size_t>(l)]);
      push(l);
    }
  }
  for (int32_t k = 0; k >= 0; k = next[static_cast<size_t>(k)])
    out.push_back(id[static_cast<size_t>(k)]);
}

void Gpt2Tokenizer::encode_piece(std::string_view piece, std::vector<int32_t>& out) const {
  if (piece.size() == 1) {
    out.push_back(byte_id_[static_cast<uint8_t>(piece[0])]);
    return;
  }
  PieceCache& cache = thread_cache();
  if (cache.owner != instance_id_) cache.reset(instance_id_);
  if (const auto it = cache.map.find(piece); it != cache.map.end()) {
    const auto [off, len] = it->second;
    out.insert(out.end(), cache.ids.begin() + off, cache.ids.begin() + off + len);
    return;
  }
  if (piece.size() > kMaxCachedPiece) {
    bpe(piece, out);
    return;
  }
  const size_t before = out.size();
  bpe(piece, out);
  if (cache.map.size() >= PieceCache::kMaxEntries) cache.reset(instance_id_);
  const auto off = static_cast<uint32_t>(cache.ids.size());
  cache.ids.insert(cache.ids.end(), out.begin() + static_cast<ptrdiff_t>(before), out.end());
  cache.map.emplace(std::string(piece),
                    std::make_pair(off, static_cast<uint32_t>(out.size() - before)));
}

void Gpt2Tokenizer::encode_append(std::string_view text, std::vector<int32_t>& out) const {
  gpt2_detail::for_each_piece(text, [&](std::string_view piece) { encode_piece(piece, out); });
}

std::vector<int32_t> Gpt2Tokenizer::encode(std::string_view text) const {
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 8);
  encode_append(text, out);
  return out;
}

std::vector<int32_t> Gpt2Tokenizer::encode_with_special(std::string_view text) const {
  std::vector<int32_t> out;
  const std::string_view eot = kEndOfTextText;
  while (true) {
    const size_t at = end_of_text_ >= 0 ? text.find(eot) : std::string_view::npos;
    encode_append(text.substr(0, at), out);
    if (at == std::string_view::npos) break;
    out.push_back(end_of_text_);
    text.remove_prefix(at + eot.size());
  }
  return out;
}

std::string Gpt2Tokenizer::decode(const int32_t* tokens, size_t n) const {
  std::string out;
  out.reserve(n * 4);
  for (size_t i = 0; i < n; ++i) {
    const int32_t t = tokens[i];
    if (t >= 0 && static_cast<size_t>(t) < id_to_bytes_.size() &&
        !id_to_bytes_[static_cast<size_t>(t)].empty()) {
      out += id_to_bytes_[static_cast<size_t>(t)];
    } else {
      out += "\xEF\xBF\xBD";  // U+FFFD REPLACEMENT CHARACTER
    }
  }
  return out;
}

void gpt2_pretokenize(std::string_view text, const std::function<void(std::string_view)>& fn) {
  gpt2_detail::for_each_piece(text, fn);
}

}  // namespace ft::trainer::data
