// ranks_io.cpp: finding, reading and merging ft's per-rank traces (NAME.rankN.json).
#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <map>
#include <regex>

#include "ft/core/error.h"
#include "ft/profiler/kineto_reader.h"
#include "ft/profiler/multi_rank.h"
#include "ft/profiler/trace_reader.h"

namespace ft::profiler {
namespace {

namespace fs = std::filesystem;

// ft's writer puts its header before the first event.
bool is_ft_trace(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  std::string head(64 * 1024, '\0');
  in.read(head.data(), static_cast<std::streamsize>(head.size()));
  head.resize(static_cast<size_t>(in.gcount()));
  return head.find("\"format\":\"ft-trace\"") != std::string::npos;
}

int64_t meta_int(const Trace& t, const char* key, int64_t fallback) {
  const auto it = t.metadata.find(key);
  if (it == t.metadata.end()) return fallback;
  char* end = nullptr;
  const long long v = std::strtoll(it->second.c_str(), &end, 10);
  return end != it->second.c_str() && *end == '\0' ? v : fallback;
}

}  // namespace

int ft_trace_rank(const Trace& t) {
  return static_cast<int>(meta_int(t, "run.rank", meta_int(t, "rank", 0)));
}

std::vector<fs::path> find_rank_traces(const fs::path& dir) {
  std::error_code ec;
  std::vector<std::pair<int, fs::path>> found;
  if (!fs::is_directory(dir, ec)) return {};
  static const std::regex re(R"(.*\.rank([0-9]+)\.json)");
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    std::smatch m;
    if (!e.is_regular_file() || !std::regex_match(name, m, re) || !is_ft_trace(e.path())) continue;
    found.emplace_back(std::stoi(m[1].str()), e.path());
  }
  std::sort(found.begin(), found.end());
  std::vector<fs::path> out;
  for (auto& [r, p] : found) out.push_back(std::move(p));
  return out;
}

std::vector<Trace> read_rank_traces(const fs::path& dir) {
  const std::vector<fs::path> files = find_rank_traces(dir);
  if (files.empty()) {
    throw IoError(fmt::format("no per-rank ft traces (NAME.rankN.json) in '{}'", dir.string()));
  }
  std::vector<Trace> ranks;
  std::map<int, std::string> seen;
  static const std::regex re(R"(.*\.rank([0-9]+)\.json)");
  for (const fs::path& f : files) {
    Trace t = read_trace_json(f);
    std::smatch m;
    const std::string name = f.filename().string();
    std::regex_match(name, m, re);
    const int from_name = std::stoi(m[1].str());
    if (!t.metadata.count("run.rank")) t.metadata["run.rank"] = std::to_string(from_name);
    const int r = ft_trace_rank(t);
    if (seen.count(r)) {
      throw FormatError(fmt::format("{}: two traces claim rank {} ({}, {})", dir.string(), r,
                                    seen[r], f.filename().string()));
    }
    seen[r] = f.filename().string();
    t.metadata["path"] = f.string();
    ranks.push_back(std::move(t));
  }
  std::stable_sort(ranks.begin(), ranks.end(), [](const Trace& a, const Trace& b) {
    return ft_trace_rank(a) < ft_trace_rank(b);
  });
  const int64_t world = meta_int(ranks[0], "run.world_size", static_cast<int64_t>(ranks.size()));
  if (world != static_cast<int64_t>(ranks.size())) {
    std::string names;
    for (const fs::path& f : files) names += (names.empty() ? "" : ", ") + f.filename().string();
    throw FormatError(fmt::format(
        "{}: the run had {} ranks but {} rank traces are here ({}); a rank's trace is missing",
        dir.string(), world, ranks.size(), names));
  }
  return ranks;
}

Trace merge_rank_traces(std::vector<Trace> ranks) {
  const std::string host0 = ranks.empty() || !ranks[0].metadata.count("env.hostname")
                                ? ""
                                : ranks[0].metadata["env.hostname"];
  for (Trace& t : ranks) {
    t.metadata["rank"] = std::to_string(ft_trace_rank(t));
    const auto h = t.metadata.find("env.hostname");
    const int64_t off = meta_int(t, "run.clock_offset_ns", 0);
    if (off != 0 && h != t.metadata.end() && h->second != host0) {
      for (Event& e : t.events) e.ts_ns -= off;
      t.metadata["clock_offset_applied_ns"] = std::to_string(off);
    }
  }
  Trace out = merge_ranks(std::move(ranks));
  out.source = fmt::format("ft, {} ranks merged", out.metadata["ranks"]);
  return out;
}

}  // namespace ft::profiler
