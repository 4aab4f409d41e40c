// memory_timeline.cpp: HTA v0.6.1's MemoryAnalysis over PyTorch's raw memory timeline export.
#include <fmt/format.h>
#include <simdjson.h>

#include <array>
#include <string>
#include <vector>

#include "ft/core/error.h"
#include "ft/profiler/hta.h"
#include "json_stream.h"

namespace ft::profiler {
namespace {

namespace od = simdjson::ondemand;

// PyTorch's memory categories in the index order the export writes (HTA's _CATEGORY_TO_INDEX).
constexpr std::array<const char*, 8> kCategories = {"Parameter", "Optimizer state", "Input",
                                                    "Temporary", "Activation",      "Gradient",
                                                    "Autograd",  "Unknown"};

int64_t integer(od::value v, const std::string& where) {
  od::number n = v.get_number();
  if (n.get_number_type() == od::number_type::floating_point_number)
    throw FormatError(fmt::format("{}: expected an integer", where));
  return n.get_number_type() == od::number_type::unsigned_integer
             ? static_cast<int64_t>(n.get_uint64())
             : n.get_int64();
}

}  // namespace

nlohmann::json hta_memory_timeline(const std::string& path) {
  std::string text = kineto::read_all_text(path, simdjson::SIMDJSON_PADDING);
  std::vector<int64_t> times;
  std::vector<std::array<int64_t, kCategories.size()>> sizes;
  int64_t t_min = -1;
  try {
    od::parser parser;
    od::document doc =
        parser.iterate(simdjson::padded_string_view(text.data(), text.size(), text.capacity()));
    size_t i = 0;
    for (auto entry : doc.get_array()) {
      // [time, action, bytes, category]; a free's bytes are negative.
      const std::string where = fmt::format("{}: entry {}", path, i++);
      std::array<int64_t, 4> f{};
      size_t k = 0;
      for (auto v : entry.get_array()) {
        if (k == 4) throw FormatError(where + ": expected [time, action, bytes, category]");
        f[k] = integer(v.value(), where);
        ++k;
      }
      if (k != 4) throw FormatError(where + ": expected [time, action, bytes, category]");
      const int64_t t = f[0], bytes = f[2], category = f[3];
      if (category < 0 || category >= static_cast<int64_t>(kCategories.size()))
        throw FormatError(fmt::format("{}: category {} is not 0..7", where, category));
      // HTA: the first time, or the earliest positive one, stands in for negative times (the
      // allocations that existed before profiling).
      if (t_min == -1 || (t < t_min && t > 0)) t_min = t;
      if (times.empty() || t != times.back()) {
        times.push_back(t);
        sizes.push_back(sizes.empty() ? std::array<int64_t, kCategories.size()>{} : sizes.back());
      }
      sizes.back()[static_cast<size_t>(category)] += bytes;
    }
  } catch (const simdjson::simdjson_error& e) {
    throw FormatError(
        fmt::format("{}: not a memory timeline (a JSON array of [time, action, "
                    "bytes, category]): {}",
                    path, e.what()));
  }
  nlohmann::json out;
  out["categories"] = kCategories;
  out["times"] = nlohmann::json::array();
  out["sizes"] = nlohmann::json::array();
  int64_t peak = -1;
  size_t at = 0;
  for (size_t i = 0; i < times.size(); ++i) {
    out["times"].push_back(times[i] < 0 ? t_min : times[i]);
    out["sizes"].push_back(sizes[i]);
    int64_t total = 0;
    for (const int64_t b : sizes[i]) total += b;
    if (total > peak) {
      peak = total;
      at = i;
    }
  }
  if (!times.empty()) {
    out["peak"] = {{"time", out["times"][at]}, {"bytes", peak}, {"by_category", sizes[at]}};
  }
  return out;
}

}  // namespace ft::profiler
