// allocator.cpp: the host caching allocator (the block policy of block_pool.cpp over mmapped
// segments), plus byte-size parsing and formatting.
#include "ft/core/allocator.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <limits>
#include <utility>

#include <fmt/format.h>

#include "ft/core/block_pool.h"
#include "ft/core/error.h"

namespace ft {
namespace {

constexpr size_t kKiB = size_t{1} << 10;
constexpr size_t kMiB = size_t{1} << 20;
constexpr size_t kGiB = size_t{1} << 30;
constexpr size_t kHugePage = 2 * kMiB;
constexpr size_t kMinAlignment = 64;
constexpr BlockPool::Owner kHost = 0;  // the host allocator's blocks all have one owner

size_t page_size() {
  static const size_t page = [] {
    long p = sysconf(_SC_PAGESIZE);
    return p > 0 ? static_cast<size_t>(p) : size_t{4096};
  }();
  return page;
}

// Anonymous private mappings, 2 MiB aligned and advised to use transparent huge pages when
// asked and large enough.
class MmapSource final : public SegmentSource {
 public:
  explicit MmapSource(bool huge_pages) : huge_pages_(huge_pages) {}

  void* map(size_t bytes, std::string* why) override {
    const bool want_huge = huge_pages_ && bytes >= kHugePage;
    // Over-map by a huge page when advising THP so the segment can be 2 MiB aligned.
    const size_t map_size = want_huge ? bytes + kHugePage : bytes;
    void* p = mmap(nullptr, map_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
      *why = fmt::format("mmap of {} failed: {}", format_bytes(bytes), std::strerror(errno));
      return nullptr;
    }
    if (!want_huge) return p;
    const auto addr = reinterpret_cast<uintptr_t>(p);
    const uintptr_t aligned = (addr + kHugePage - 1) & ~(uintptr_t{kHugePage} - 1);
    const size_t head = aligned - addr;
    const size_t tail = map_size - head - bytes;
    if (head) munmap(p, head);
    if (tail) munmap(reinterpret_cast<char*>(aligned) + bytes, tail);
    void* base = reinterpret_cast<void*>(aligned);
    madvise(base, bytes, MADV_HUGEPAGE);  // advisory: failure is harmless
    return base;
  }
  void unmap(void* base, size_t bytes) override { munmap(base, bytes); }

 private:
  bool huge_pages_;
};

BlockPoolOptions pool_options(const AllocatorOptions& o) {
  BlockPoolOptions p;
  p.min_round_to = kMinAlignment;
  p.round_to = o.round_to;
  p.min_segment = o.min_segment;
  p.segment_granule = std::max(page_size(), o.round_to);
  p.memory_limit = o.memory_limit;
  p.max_request = size_t{1} << 48;  // no rounding overflow, no absurd mmap
  p.caching = o.caching;
  p.split_large = o.split_large;
  return p;
}

}  // namespace

double AllocatorStats::fragmentation() const {
  if (reserved <= allocated) return 0.0;
  const size_t free_bytes = reserved - allocated;
  return 1.0 - static_cast<double>(largest_free_block) / static_cast<double>(free_bytes);
}

CachingAllocator::CachingAllocator(AllocatorOptions options)
    : options_(options),
      pool_(std::make_unique<BlockPool>(pool_options(options_),
                                        std::make_unique<MmapSource>(options_.huge_pages))) {}

CachingAllocator::~CachingAllocator() = default;  // the pool unmaps every segment

size_t CachingAllocator::release_cached_locked() { return pool_->release_free_segments(); }

void* CachingAllocator::allocate(size_t bytes, const char* tag) {
  std::lock_guard<std::mutex> lock(mu_);
  const size_t size = pool_->round_request(bytes, tag);
  const bool large = BlockPool::is_large(size);
  PoolBlock* b = pool_->take_best_fit(size, large, kHost);
  if (b == nullptr) {
    // Slow path: map a new segment, releasing wholly free cached segments and retrying once.
    b = pool_->grow(size, large, kHost, bytes, tag, [this] {
      return BlockPool::FlushResult{release_cached_locked(), nullptr};
    });
  }
  return pool_->commit(b, size, bytes, kHost);
}

void CachingAllocator::deallocate(void* ptr) {
  if (ptr == nullptr) return;
  std::lock_guard<std::mutex> lock(mu_);
  pool_->free(pool_->take_live(ptr));
}

void CachingAllocator::release_cached() {
  std::lock_guard<std::mutex> lock(mu_);
  release_cached_locked();
}

AllocatorStats CachingAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return pool_->stats();
}

void CachingAllocator::reset_peak() {
  std::lock_guard<std::mutex> lock(mu_);
  pool_->reset_peak();
}

void CachingAllocator::set_memory_limit(size_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  options_.memory_limit = bytes;
  pool_->set_memory_limit(bytes);
  if (pool_->over_limit()) release_cached_locked();
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
