// event.cpp: category names and the string table of the trace event model.
#include "ft/profiler/event.h"

#include <array>

namespace ft::profiler {
namespace {

constexpr std::array<const char*, 14> kCategoryNames = {
    "compute", "data", "h2d",  "d2h",  "d2d",     "memset",  "comm",
    "alloc",   "sync", "optimizer", "host", "step", "counter", "other"};

}  // namespace

const char* category_name(Category c) {
  const auto i = static_cast<size_t>(c);
  return i < kCategoryNames.size() ? kCategoryNames[i] : "other";
}

bool parse_category(std::string_view s, Category* out) {
  for (size_t i = 0; i < kCategoryNames.size(); ++i) {
    if (s == kCategoryNames[i]) {
      *out = static_cast<Category>(i);
      return true;
    }
  }
  return false;
}

uint32_t StringTable::intern(std::string_view s) {
  const auto it = index_.find(std::string(s));
  if (it != index_.end()) return it->second;
  const auto id = static_cast<uint32_t>(strings_.size());
  strings_.emplace_back(s);
  step_.push_back(s.starts_with(kProfilerStep) ? 1 : 0);
  index_.emplace(strings_.back(), id);
  return id;
}

}  // namespace ft::profiler
