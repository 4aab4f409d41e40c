// std_allocator.h: a standard-library allocator over ft's CachingAllocator, so that a
// std::vector's bytes count in the engine's memory statistics and budget.
#pragma once

#include <cstddef>
#include <memory>
#include <type_traits>

#include "ft/core/allocator.h"

namespace ft {

// Allocates from `alloc`, or from the global heap when default-constructed.
template <typename T>
struct CachedStdAllocator {
  using value_type = T;
  using propagate_on_container_move_assignment = std::true_type;
  using propagate_on_container_copy_assignment = std::true_type;
  using propagate_on_container_swap = std::true_type;
  CachingAllocator* alloc = nullptr;
  const char* tag = "";
  CachedStdAllocator() = default;
  explicit CachedStdAllocator(CachingAllocator* a, const char* t = "") : alloc(a), tag(t) {}
  template <typename U>
  CachedStdAllocator(const CachedStdAllocator<U>& o) : alloc(o.alloc), tag(o.tag) {}  // NOLINT
  T* allocate(size_t n) {
    if (alloc) return static_cast<T*>(alloc->allocate(n * sizeof(T), tag));
    return std::allocator<T>().allocate(n);
  }
  void deallocate(T* p, size_t n) {
    if (alloc) {
      alloc->deallocate(p);
    } else {
      std::allocator<T>().deallocate(p, n);
    }
  }
  template <typename U>
  bool operator==(const CachedStdAllocator<U>& o) const {
    return alloc == o.alloc;
  }
  template <typename U>
  bool operator!=(const CachedStdAllocator<U>& o) const {
    return alloc != o.alloc;
  }
};

}  // namespace ft
