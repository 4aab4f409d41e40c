// dedup.cpp: exact deduplication by XXH3-128 content hash in an open-addressing table.
#include <xxhash.h>

#include "ft/trainer/quality.h"

namespace ft::trainer::data {

Hash128 content_hash(std::string_view text) {
  const XXH128_hash_t h = XXH3_128bits(text.data(), text.size());
  Hash128 r{h.low64, h.high64};
  if (r.lo == 0 && r.hi == 0) r.lo = 1;  // {0,0} marks empty slots
  return r;
}

int64_t ExactDeduper::insert_or_find(const Hash128& h_in, uint64_t value) {
  Hash128 h = h_in;
  if (h.lo == 0 && h.hi == 0) h.lo = 1;
  if ((size_ + 1) * 2 > slots_.size()) grow();
  const size_t mask = slots_.size() - 1;
  for (size_t i = h.lo & mask;; i = (i + 1) & mask) {
    Hash128& s = slots_[i];
    if (s.lo == 0 && s.hi == 0) {
      s = h;
      values_[i] = value;
      ++size_;
      return -1;
    }
    if (s == h) return static_cast<int64_t>(values_[i]);
  }
}

void ExactDeduper::grow() {
  std::vector<Hash128> old = std::move(slots_);
  std::vector<uint64_t> old_values = std::move(values_);
  slots_.assign(old.empty() ? 1024 : old.size() * 2, Hash128{});
  values_.assign(slots_.size(), 0);
  const size_t mask = slots_.size() - 1;
  for (size_t j = 0; j < old.size(); ++j) {
    const Hash128& h = old[j];
    if (h.lo == 0 && h.hi == 0) continue;
    size_t i = h.lo & mask;
    while (slots_[i].lo != 0 || slots_[i].hi != 0) i = (i + 1) & mask;
    slots_[i] = h;
    values_[i] = old_values[j];
  }
}

}  // namespace ft::trainer::data
