// kineto_ranks.cpp: a directory of per-rank Kineto traces, and merging ranks into one Trace.
#include <algorithm>
#include <filesystem>

#include "ft/core/error.h"
#include "ft/profiler/kineto_reader.h"

namespace ft::profiler {

namespace {

int rank_of_metadata(const std::map<std::string, std::string>& metadata) {
  const auto it = metadata.find("rank");
  return it == metadata.end() ? 0 : std::stoi(it->second);
}

}  // namespace

int trace_rank(const Trace& trace) { return rank_of_metadata(trace.metadata); }
int trace_rank(const KinetoTrace& trace) { return rank_of_metadata(trace.metadata); }

Track rank_track(Track k, uint32_t rank) {
  if (k.device) {
    k.pid = rank * 256u + (k.pid & 0xffu);
  } else {
    k.pid = (rank << 24) | (k.pid & 0xffffffu);
  }
  return k;
}

std::vector<KinetoTrace> read_kineto_rank_records(const std::string& path,
                                                  const KinetoReadOptions& options) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(path, ec)) {
    std::vector<KinetoTrace> one;
    one.push_back(read_kineto_records(path, options));
    return one;
  }
  std::vector<std::string> files;
  for (const auto& entry : fs::directory_iterator(path, ec)) {
    if (!entry.is_regular_file()) continue;
    const std::string name = entry.path().filename().string();
    const auto ends = [&](const char* suf) {
      const std::string s(suf);
      return name.size() >= s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0;
    };
    if (ends(".json") || ends(".json.gz")) files.push_back(entry.path().string());
  }
  if (ec) throw IoError(path + ": cannot list directory: " + ec.message());
  if (files.empty()) throw IoError(path + ": no *.json or *.json.gz trace files in the directory");
  std::sort(files.begin(), files.end());
  std::vector<KinetoTrace> ranks;
  for (const auto& f : files) ranks.push_back(read_kineto_records(f, options));
  int next = 0;
  for (const auto& t : ranks) {
    if (t.metadata.at("has_rank") == "1") next = std::max(next, trace_rank(t) + 1);
  }
  for (auto& t : ranks) {
    if (t.metadata.at("has_rank") != "1") t.metadata["rank"] = std::to_string(next++);
  }
  std::stable_sort(ranks.begin(), ranks.end(), [](const KinetoTrace& a, const KinetoTrace& b) {
    return trace_rank(a) < trace_rank(b);
  });
  for (size_t i = 1; i < ranks.size(); ++i) {
    if (trace_rank(ranks[i]) == trace_rank(ranks[i - 1])) {
      throw FormatError(path + ": two traces claim rank " + std::to_string(trace_rank(ranks[i])) +
                        " (" + ranks[i - 1].metadata["path"] + ", " + ranks[i].metadata["path"] +
                        ")");
    }
  }
  return ranks;
}

std::vector<Trace> read_kineto_ranks(const std::string& path, const KinetoReadOptions& options) {
  std::vector<Trace> out;
  for (KinetoTrace& t : read_kineto_rank_records(path, options))
    out.push_back(to_trace(std::move(t), options.assign_steps));
  return out;
}

Trace merge_ranks(std::vector<Trace> ranks) {
  Trace out;
  out.source = "kineto";
  for (auto& t : ranks) {
    const uint32_t rank = static_cast<uint32_t>(trace_rank(t));
    auto map_track = [&](Track k) { return rank_track(k, rank); };
    std::vector<uint32_t> remap(t.names.size());
    for (size_t i = 0; i < t.names.size(); ++i) remap[i] = out.names.intern(t.names.at(i));
    for (Event e : t.events) {
      e.track = map_track(e.track);
      e.name = remap[e.name];
      out.events.push_back(e);
    }
    for (const auto& [k, v] : t.tracks)
      out.tracks[map_track(k)] = "rank " + std::to_string(rank) + " " + v;
    for (const auto& [pid, v] : t.processes) {
      out.processes[(rank << 24) | (pid & 0xffffffu)] = "rank " + std::to_string(rank) + " " + v;
    }
    out.dropped_events += t.dropped_events;
    for (const auto& [k, v] : t.metadata) out.metadata["rank" + std::to_string(rank) + "." + k] = v;
    t = Trace{};
  }
  out.metadata["ranks"] = std::to_string(ranks.size());
  return out;
}

}  // namespace ft::profiler
