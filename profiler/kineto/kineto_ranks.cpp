// kineto_ranks.cpp: a directory of per-rank Kineto traces, and merging ranks into one Trace.
#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <map>
#include <regex>
#include <set>
#include <utility>

#include "ft/core/error.h"
#include "ft/core/parallel.h"
#include "ft/profiler/kineto_reader.h"
#include "kineto_names.h"

namespace ft::profiler {

namespace {

int rank_of_metadata(const std::map<std::string, std::string>& metadata) {
  const auto it = metadata.find("rank");
  return it == metadata.end() ? 0 : std::stoi(it->second);
}

}  // namespace

int trace_rank(const Trace& trace) { return rank_of_metadata(trace.metadata); }
int trace_rank(const KinetoTrace& trace) { return rank_of_metadata(trace.metadata); }

namespace {

// torch.profiler.tensorboard_trace_handler names its files WORKER.MILLISECONDS.pt.trace.json[.gz]
// with WORKER = hostname_pid by default: the worker, and the window's time stamp.
bool handler_file_name(const std::string& name, std::string* worker, int64_t* stamp) {
  static const std::regex kName(R"(^(.+)\.([0-9]+)\.pt\.trace\.json(\.gz)?$)");
  std::smatch m;
  if (!std::regex_match(name, m, kName)) return false;
  *worker = m[1].str();
  *stamp = std::stoll(m[2].str().substr(0, 18));
  return true;
}

// The ProfilerStep#N numbers of a trace (its windows are ordered by the first).
std::set<int64_t> profiler_steps(const KinetoTrace& t) {
  std::set<int64_t> steps;
  for (size_t i = 0; i < t.size(); ++i) {
    if (static_cast<Category>(t.record(i).kind & 15) != Category::kStep) continue;
    const int64_t n = kineto::profiler_step_number(t.names.at(t.name_of(i)));
    if (n >= 0) steps.insert(n);
  }
  return steps;
}

std::pair<int64_t, int64_t> time_range(const KinetoTrace& t) {
  int64_t lo = INT64_MAX, hi = INT64_MIN;
  for (size_t i = 0; i < t.size(); ++i) {
    const Event e = t.event(i);
    lo = std::min(lo, e.ts_ns);
    hi = std::max(hi, e.phase == Phase::kSpan ? e.end_ns() : e.ts_ns);
  }
  return {lo, hi};
}

// Appends window `w` of the same rank to `into`. Windows on one clock (Kineto's absolute time)
// keep their times; windows whose clocks restart (the legacy format's per-window relative time)
// and so overlap the earlier ones are shifted to start 1 ms after them.
void append_window(KinetoTrace* into, KinetoTrace&& w) {
  const int64_t hi = time_range(*into).second;
  const int64_t wlo = time_range(w).first;
  const int64_t shift = into->size() > 0 && w.size() > 0 && wlo < hi ? hi - wlo + 1'000'000 : 0;
  std::vector<uint32_t> remap(w.names.size());
  for (uint32_t i = 0; i < w.names.size(); ++i) remap[i] = into->names.intern(w.names.at(i));
  for (size_t i = 0; i < w.size(); ++i) {
    Event e = w.event(i);
    e.ts_ns += shift;
    e.name = remap[e.name];
    into->append(e);
  }
  for (const auto& [k, v] : w.tracks) into->tracks.emplace(k, v);
  for (const auto& [k, v] : w.processes) into->processes.emplace(k, v);
}

}  // namespace

namespace {

// Reads every file on the machine's cores (ft::parallel_for). A file without traceEvents (an
// execution trace) comes back empty with "skipped_not_a_trace" set; any other error is
// rethrown, the first file's in name order, as a sequential read would.
std::vector<KinetoTrace> read_files_parallel(const std::vector<std::string>& files,
                                             const KinetoReadOptions& options) {
  std::vector<KinetoTrace> out(files.size());
  parallel_for(files.size(), [&](size_t i) {
    try {
      out[i] = read_kineto_records(files[i], options);
    } catch (const FormatError& e) {
      if (std::string(e.what()).find("no traceEvents array") == std::string::npos) throw;
      out[i].metadata["skipped_not_a_trace"] = "1";
    }
  });
  return out;
}

}  // namespace

std::vector<KinetoTrace> read_kineto_rank_records(const std::string& path,
                                                  const KinetoReadOptions& options) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(path, ec)) {
    std::vector<KinetoTrace> one;
    one.push_back(read_kineto_records(path, options));
    KinetoTrace& t = one.back();
    t.metadata["windows"] = "1";
    t.metadata["rank_source"] = t.metadata.at("has_rank") == "1"
                                    ? "distributedInfo.rank"
                                    : "none recorded: one trace file, taken as rank 0";
    return one;
  }
  std::vector<std::string> files;
  for (const auto& entry : fs::directory_iterator(path, ec)) {
    if (!entry.is_regular_file()) continue;
    const std::string name = entry.path().filename().string();
    if (name.ends_with(".json") || name.ends_with(".json.gz"))
      files.push_back(entry.path().string());
  }
  if (ec) throw IoError(path + ": cannot list directory: " + ec.message());
  if (files.empty()) throw IoError(path + ": no *.json or *.json.gz trace files in the directory");
  std::sort(files.begin(), files.end());
  // Files of one rank are its profiling windows (a schedule with repeat=0 writes one per active
  // window): the rank is distributedInfo.rank, else the worker of the handler's file name, else
  // the file itself.
  struct Window {
    KinetoTrace t;
    int64_t first_step = -1, stamp = 0;
    std::set<int64_t> steps;
  };
  std::map<std::string, std::vector<Window>> by_rank;
  std::vector<std::string> order;  // keys in file-name order
  bool any_worker_key = false;
  // A file without traceEvents beside the traces (PyTorch's execution trace, "nodes") is not a
  // rank: it is skipped and said (input warnings), unless no file is a trace.
  std::vector<std::string> skipped;
  std::vector<KinetoTrace> read = read_files_parallel(files, options);
  for (size_t fi = 0; fi < files.size(); ++fi) {
    const std::string& f = files[fi];
    if (read[fi].metadata.count("skipped_not_a_trace")) {
      skipped.push_back(fs::path(f).filename().string());
      continue;
    }
    Window w{std::move(read[fi]), -1, 0, {}};
    std::string key, worker;
    const std::string name = fs::path(f).filename().string();
    if (w.t.metadata.at("has_rank") == "1") {
      key = "rank " + w.t.metadata.at("rank");
    } else if (handler_file_name(name, &worker, &w.stamp)) {
      key = "worker " + worker;
      any_worker_key = true;
    } else {
      key = "file " + name;
    }
    w.steps = profiler_steps(w.t);
    w.first_step = w.steps.empty() ? -1 : *w.steps.begin();
    if (!by_rank.count(key)) order.push_back(key);
    by_rank[key].push_back(std::move(w));
  }
  if (order.empty()) {
    throw FormatError(path + ": no Kineto trace in the directory (no traceEvents in " +
                      skipped.front() + (skipped.size() > 1 ? " and the others)" : ")"));
  }
  std::vector<KinetoTrace> ranks;
  for (const std::string& key : order) {
    std::vector<Window>& ws = by_rank[key];
    std::stable_sort(ws.begin(), ws.end(), [](const Window& a, const Window& b) {
      if (a.first_step >= 0 && b.first_step >= 0 && a.first_step != b.first_step)
        return a.first_step < b.first_step;
      return a.stamp < b.stamp;
    });
    // Windows are disjoint runs of steps: two files of one rank with a step in common (or, both
    // without steps, overlapping in time) are two traces claiming one rank.
    for (size_t i = 0; i < ws.size(); ++i) {
      for (size_t j = i + 1; j < ws.size(); ++j) {
        bool clash = false;
        for (int64_t n : ws[i].steps) clash = clash || ws[j].steps.count(n) > 0;
        if (ws[i].steps.empty() && ws[j].steps.empty()) {
          const auto a = time_range(ws[i].t), b = time_range(ws[j].t);
          clash = a.first < b.second && b.first < a.second;
        }
        if (clash) {
          throw FormatError(path + ": two traces claim " + key + " with the same steps (" +
                            ws[i].t.metadata["path"] + ", " + ws[j].t.metadata["path"] + ")");
        }
      }
    }
    KinetoTrace t = std::move(ws.front().t);
    std::string paths = t.metadata["path"];
    for (size_t i = 1; i < ws.size(); ++i) {
      paths += ", " + ws[i].t.metadata["path"];
      append_window(&t, std::move(ws[i].t));
    }
    t.metadata["windows"] = std::to_string(ws.size());
    if (ws.size() > 1) t.metadata["window_paths"] = paths;
    t.metadata["rank_key"] = key;
    ranks.push_back(std::move(t));
  }
  int next = 0;
  for (const auto& t : ranks) {
    if (t.metadata.at("has_rank") == "1") next = std::max(next, trace_rank(t) + 1);
  }
  for (auto& t : ranks) {
    if (t.metadata.at("has_rank") == "1") {
      t.metadata["rank_source"] = "distributedInfo.rank";
    } else {
      t.metadata["rank"] = std::to_string(next++);
      t.metadata["rank_source"] =
          any_worker_key
              ? "none recorded: ranks numbered in the sorted order of the workers (hostname_pid) "
                "in the file names"
              : "none recorded: ranks numbered in file-name order";
    }
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
  if (!skipped.empty()) {  // said by the first rank
    ranks.front().metadata["input.skipped_files"] = std::to_string(skipped.size());
    ranks.front().metadata["input.skipped_files.first"] = skipped.front();
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
