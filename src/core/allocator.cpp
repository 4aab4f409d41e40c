// allocator.cpp: best-fit caching allocator over mmapped segments, plus byte-size parsing and formatting.
#include "ft/core/allocator.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <limits>
#include <set>
#include <unordered_map>
#include <utility>

#include <fmt/format.h>

#include "ft/core/annotate.h"
#include "ft/core/error.h"

namespace ft {
namespace {

constexpr size_t kKiB = size_t{1} << 10;
constexpr size_t kMiB = size_t{1} << 20;
constexpr size_t kGiB = size_t{1} << 30;
constexpr size_t kLargeThreshold = kMiB;      // rounded requests >= this use the large pool
constexpr size_t kLargeSegmentRound = 2 * kMiB;  // large segments are multiples of this
constexpr size_t kMinSmallRemainder = 512;    // split a small block if this much would remain
constexpr size_t kMinLargeRemainder = kMiB;   // split a large block if this much would remain
constexpr size_t kHugePage = 2 * kMiB;
constexpr size_t kMinAlignment = 64;
// Requests beyond this are rejected outright (no rounding overflow, no absurd mmap).
constexpr size_t kMaxRequest = size_t{1} << 48;

size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

size_t page_size() {
  static const size_t page = [] {
    long p = sysconf(_SC_PAGESIZE);
    return p > 0 ? static_cast<size_t>(p) : size_t{4096};
  }();
  return page;
}

bool is_pow2(size_t n) { return n != 0 && (n & (n - 1)) == 0; }

}  // namespace

// A contiguous range inside a segment, either free (in a pool index) or live.
struct CachingAllocator::Block {
  Segment* segment = nullptr;
  char* ptr = nullptr;
  size_t size = 0;       // rounded size of the range
  size_t requested = 0;  // caller's byte count while live
  bool allocated = false;
  Block* prev = nullptr;  // address-ordered neighbours within the segment
  Block* next = nullptr;
};

// One mmapped range, split into an address-ordered list of blocks.
struct CachingAllocator::Segment {
  char* base = nullptr;
  size_t size = 0;
  bool large = false;
  size_t index = 0;  // position in segments_
  Block* head = nullptr;
};

namespace {
struct BlockLess {
  template <typename B>
  bool operator()(const B* a, const B* b) const {
    if (a->size != b->size) return a->size < b->size;
    return std::less<const char*>()(a->ptr, b->ptr);
  }
};
}  // namespace

struct CachingAllocator::Impl {
  std::set<Block*, BlockLess> small_free;
  std::set<Block*, BlockLess> large_free;
  std::unordered_map<const void*, Block*> live;

  std::set<Block*, BlockLess>& pool(bool large) { return large ? large_free : small_free; }
};

double AllocatorStats::fragmentation() const {
  if (reserved <= allocated) return 0.0;
  const size_t free_bytes = reserved - allocated;
  return 1.0 - static_cast<double>(largest_free_block) / static_cast<double>(free_bytes);
}

CachingAllocator::CachingAllocator(AllocatorOptions options)
    : options_(options), impl_(std::make_unique<Impl>()) {
  if (!is_pow2(options_.round_to) || options_.round_to < kMinAlignment) {
    throw ConfigError(fmt::format("allocator round_to must be a power of two >= {}, got {}",
                                  kMinAlignment, options_.round_to));
  }
  if (options_.min_segment == 0) throw ConfigError("allocator min_segment must be > 0");
}

CachingAllocator::~CachingAllocator() {
  for (Segment* seg : segments_) {
    munmap(seg->base, seg->size);
    for (Block* b = seg->head; b != nullptr;) {
      Block* next = b->next;
      delete b;
      b = next;
    }
    delete seg;
  }
}

CachingAllocator::Block* CachingAllocator::find_free_block(size_t size, bool large) {
  auto& pool = impl_->pool(large);
  Block key;
  key.size = size;
  key.ptr = nullptr;
  auto it = pool.lower_bound(&key);
  if (it == pool.end()) return nullptr;
  Block* b = *it;
  pool.erase(it);
  return b;
}

CachingAllocator::Block* CachingAllocator::map_segment(size_t size, bool large, size_t requested,
                                                       const char* tag) {
  const size_t granule = std::max(page_size(), options_.round_to);
  const size_t seg_size = large ? round_up(round_up(size, kLargeSegmentRound), granule)
                                : round_up(std::max(options_.min_segment, size), granule);
  const bool want_huge = options_.huge_pages && seg_size >= kHugePage;

  for (int attempt = 0;; ++attempt) {
    const size_t limit = options_.memory_limit;
    const bool over_budget = limit != 0 && (seg_size > limit || stats_.reserved > limit - seg_size);
    std::string failure;
    char* base = nullptr;
    if (!over_budget) {
      // Over-map by a huge page when advising THP so the segment can be 2 MiB aligned.
      const size_t map_size = want_huge ? seg_size + kHugePage : seg_size;
      void* p = mmap(nullptr, map_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (p == MAP_FAILED) {
        failure = fmt::format("mmap of {} failed: {}", format_bytes(seg_size), std::strerror(errno));
      } else if (want_huge) {
        const auto addr = reinterpret_cast<uintptr_t>(p);
        const uintptr_t aligned = (addr + kHugePage - 1) & ~(uintptr_t{kHugePage} - 1);
        const size_t head = aligned - addr;
        const size_t tail = map_size - head - seg_size;
        if (head) munmap(p, head);
        if (tail) munmap(reinterpret_cast<char*>(aligned) + seg_size, tail);
        base = reinterpret_cast<char*>(aligned);
        madvise(base, seg_size, MADV_HUGEPAGE);  // advisory: failure is harmless
      } else {
        base = static_cast<char*>(p);
      }
    }
    if (base != nullptr) {
      auto* seg = new Segment;
      seg->base = base;
      seg->size = seg_size;
      seg->large = large;
      seg->index = segments_.size();
      auto* b = new Block;
      b->segment = seg;
      b->ptr = base;
      b->size = seg_size;
      seg->head = b;
      segments_.push_back(seg);
      stats_.reserved += seg_size;
      stats_.peak_reserved = std::max(stats_.peak_reserved, stats_.reserved);
      ++stats_.segments;
      ++stats_.segment_maps;
      ++stats_.slow_path_allocs;
      return b;
    }
    // Release wholly free cached segments and retry once; retry only if that freed something.
    bool freed = false;
    if (attempt == 0) {
      FT_RANGE("alloc.retry.flush_cache", RangeKind::kAlloc);  // time; the instant below counts
      freed = release_cached_locked() > 0;
    }
    if (freed) {
      ++stats_.cache_flush_retries;
      mark("alloc.retry", RangeKind::kAlloc, static_cast<int64_t>(requested));
      continue;
    }
    if (failure.empty()) {
      failure = fmt::format("a new {} segment would exceed the limit", format_bytes(seg_size));
    }
    throw_oom_locked(requested, tag, failure);
  }
}

void CachingAllocator::throw_oom_locked(size_t requested, const char* tag, const std::string& why) {
  FT_RANGE("alloc.oom.report", RangeKind::kAlloc);
  ++stats_.ooms;
  mark("alloc.oom", RangeKind::kAlloc,
       static_cast<int64_t>(std::min<size_t>(requested, kMaxRequest)));
  update_largest_free_locked();
  const size_t free_bytes = stats_.reserved - stats_.allocated;
  const std::string limit =
      options_.memory_limit ? format_bytes(options_.memory_limit) : std::string("unlimited");
  throw OutOfMemoryError(fmt::format(
      "out of memory: '{}' requested {}; limit {}, reserved {}, allocated {}, free in cache {} "
      "(largest free block {}, fragmentation {:.0f}%); {}",
      tag ? tag : "", format_bytes(requested), limit, format_bytes(stats_.reserved),
      format_bytes(stats_.allocated), format_bytes(free_bytes),
      format_bytes(stats_.largest_free_block), stats_.fragmentation() * 100.0, why));
}

void CachingAllocator::unmap_segment(Segment* seg) {
  // Caller guarantees the segment is one free block that is in no pool index.
  munmap(seg->base, seg->size);
  stats_.reserved -= seg->size;
  --stats_.segments;
  ++stats_.segment_unmaps;
  Segment* last = segments_.back();
  segments_[seg->index] = last;
  last->index = seg->index;
  segments_.pop_back();
  delete seg->head;
  delete seg;
}

size_t CachingAllocator::release_cached_locked() {
  size_t released = 0;
  for (size_t i = segments_.size(); i-- > 0;) {
    Segment* seg = segments_[i];
    Block* b = seg->head;
    if (b->allocated || b->next != nullptr) continue;
    impl_->pool(seg->large).erase(b);
    released += seg->size;
    unmap_segment(seg);  // swaps the last segment into slot i, which was already visited
  }
  return released;
}

void CachingAllocator::update_largest_free_locked() const {
  size_t largest = 0;
  if (!impl_->small_free.empty()) largest = (*impl_->small_free.rbegin())->size;
  if (!impl_->large_free.empty()) largest = std::max(largest, (*impl_->large_free.rbegin())->size);
  stats_.largest_free_block = largest;
}

void* CachingAllocator::allocate(size_t bytes, const char* tag) {
  std::lock_guard<std::mutex> lock(mu_);
  if (bytes > kMaxRequest) {
    throw_oom_locked(bytes, tag, "request exceeds the maximum supported size");
  }
  const size_t size = round_up(std::max<size_t>(bytes, 1), options_.round_to);
  const bool large = size >= kLargeThreshold;
  Block* b = find_free_block(size, large);
  if (b == nullptr) {
    // Slow path: map a new segment (and maybe flush the cache and retry), as a kAlloc range.
    FT_RANGE("alloc.slow_path", RangeKind::kAlloc, static_cast<int64_t>(bytes));
    b = map_segment(size, large, bytes, tag);
  }

  // Split off the tail when the remainder is worth keeping as a free block.
  const size_t remainder = b->size - size;
  const bool split = large ? (options_.split_large && remainder >= kMinLargeRemainder)
                           : remainder >= kMinSmallRemainder;
  if (split) {
    auto* rest = new Block;
    rest->segment = b->segment;
    rest->ptr = b->ptr + size;
    rest->size = remainder;
    rest->prev = b;
    rest->next = b->next;
    if (b->next) b->next->prev = rest;
    b->next = rest;
    b->size = size;
    impl_->pool(large).insert(rest);
  }
  b->allocated = true;
  b->requested = bytes;
  impl_->live.emplace(b->ptr, b);
  stats_.allocated += b->size;
  stats_.requested += bytes;
  stats_.peak_allocated = std::max(stats_.peak_allocated, stats_.allocated);
  ++stats_.num_allocs;
  return b->ptr;
}

void CachingAllocator::deallocate(void* ptr) {
  if (ptr == nullptr) return;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = impl_->live.find(ptr);
  if (it == impl_->live.end()) {
    throw Error(fmt::format("allocator: deallocate of unknown pointer {} (double free or foreign)",
                            ptr));
  }
  Block* b = it->second;
  impl_->live.erase(it);
  stats_.allocated -= b->size;
  stats_.requested -= b->requested;
  ++stats_.num_frees;
  b->allocated = false;
  b->requested = 0;

  Segment* seg = b->segment;
  auto& pool = impl_->pool(seg->large);
  // Coalesce with the free neighbours inside the segment.
  if (Block* prev = b->prev; prev != nullptr && !prev->allocated) {
    pool.erase(prev);
    prev->size += b->size;
    prev->next = b->next;
    if (b->next) b->next->prev = prev;
    delete b;
    b = prev;
  }
  if (Block* next = b->next; next != nullptr && !next->allocated) {
    pool.erase(next);
    b->size += next->size;
    b->next = next->next;
    if (next->next) next->next->prev = b;
    delete next;
  }
  if (!options_.caching && b->prev == nullptr && b->next == nullptr) {
    FT_RANGE("alloc.unmap", RangeKind::kAlloc, static_cast<int64_t>(seg->size));
    unmap_segment(seg);
    return;
  }
  pool.insert(b);
}

void CachingAllocator::release_cached() {
  std::lock_guard<std::mutex> lock(mu_);
  release_cached_locked();
}

AllocatorStats CachingAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  update_largest_free_locked();
  return stats_;
}

void CachingAllocator::reset_peak() {
  std::lock_guard<std::mutex> lock(mu_);
  stats_.peak_allocated = stats_.allocated;
  stats_.peak_reserved = stats_.reserved;
}

void CachingAllocator::set_memory_limit(size_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  options_.memory_limit = bytes;
  if (bytes != 0 && stats_.reserved > bytes) release_cached_locked();
}

CachingAllocator& default_allocator() {
  static CachingAllocator allocator;
  return allocator;
}

size_t parse_bytes(const std::string& text) {
  auto fail = [&text]() -> ConfigError {
    return ConfigError(fmt::format(
        "invalid byte size '{}' (expected e.g. 1048576, 512K, 64MiB, 1.5G)", text));
  };
  size_t i = 0;
  const size_t n = text.size();
  while (i < n && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
  // Integer part: plain decimal digits, no sign.
  const size_t int_begin = i;
  unsigned __int128 whole = 0;
  while (i < n && std::isdigit(static_cast<unsigned char>(text[i]))) {
    whole = whole * 10 + static_cast<unsigned>(text[i] - '0');
    if (whole > std::numeric_limits<uint64_t>::max()) throw fail();
    ++i;
  }
  const bool has_int = i > int_begin;
  // Optional fraction.
  long double frac = 0.0L;
  bool has_frac = false;
  if (i < n && text[i] == '.') {
    ++i;
    long double scale = 0.1L;
    while (i < n && std::isdigit(static_cast<unsigned char>(text[i]))) {
      frac += scale * static_cast<long double>(text[i] - '0');
      scale /= 10;
      has_frac = true;
      ++i;
    }
    if (!has_frac) throw fail();
  }
  if (!has_int && !has_frac) throw fail();
  while (i < n && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
  // Suffix: K/M/G/T with optional "B" or "iB", or a bare "B"; binary multiples, any case.
  std::string suffix;
  while (i < n && !std::isspace(static_cast<unsigned char>(text[i]))) {
    suffix += static_cast<char>(std::toupper(static_cast<unsigned char>(text[i])));
    ++i;
  }
  while (i < n && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
  if (i != n) throw fail();
  size_t mult = 1;
  if (!suffix.empty() && suffix != "B") {
    const char unit = suffix[0];
    const std::string rest = suffix.substr(1);
    if (rest != "" && rest != "B" && rest != "IB") throw fail();
    switch (unit) {
      case 'K': mult = kKiB; break;
      case 'M': mult = kMiB; break;
      case 'G': mult = kGiB; break;
      case 'T': mult = kGiB * kKiB; break;
      default: throw fail();
    }
  }
  if (has_frac && mult == 1 && frac != 0.0L) throw fail();  // fractional bytes make no sense
  const unsigned __int128 total =
      whole * mult + static_cast<unsigned __int128>(std::llround(frac * static_cast<long double>(mult)));
  if (total > std::numeric_limits<size_t>::max()) throw fail();
  return static_cast<size_t>(total);
}

std::string format_bytes(size_t bytes) {
  if (bytes < kKiB) return fmt::format("{} B", bytes);
  const double b = static_cast<double>(bytes);
  if (bytes < kMiB) return fmt::format("{:.1f} KiB", b / kKiB);
  if (bytes < kGiB) return fmt::format("{:.1f} MiB", b / kMiB);
  if (bytes < kGiB * kKiB) return fmt::format("{:.2f} GiB", b / kGiB);
  return fmt::format("{:.2f} TiB", b / (static_cast<double>(kGiB) * kKiB));
}

}  // namespace ft
