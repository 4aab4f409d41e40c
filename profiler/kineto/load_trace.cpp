// load_trace.cpp: detects ft's own trace.json vs a Kineto/PyTorch trace and loads either.
#include "ft/profiler/load_trace.h"

#include <fmt/format.h>

#include <fstream>

#include "ft/core/atomic_file.h"
#include "ft/core/error.h"
#include "ft/profiler/critical_path.h"
#include "ft/profiler/hta.h"
#include "ft/profiler/kineto_reader.h"
#include "ft/profiler/multi_rank.h"
#include "ft/profiler/trace_reader.h"

namespace ft::profiler {
namespace {

namespace fs = std::filesystem;

constexpr size_t kSniffBytes = 64 * 1024;

// The writer puts its "ft" header before the first event; the first 64 KiB always hold it.
TraceFormat sniff_file(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) throw IoError(fmt::format("{}: cannot open trace", file.string()));
  std::string head(kSniffBytes, '\0');
  in.read(head.data(), static_cast<std::streamsize>(head.size()));
  head.resize(static_cast<size_t>(in.gcount()));
  if (head.size() >= 2 && static_cast<unsigned char>(head[0]) == 0x1f &&
      static_cast<unsigned char>(head[1]) == 0x8b) {
    return TraceFormat::kKineto;  // ft never gzips its traces
  }
  if (head.find("\"format\":\"ft-trace\"") != std::string::npos ||
      head.find("\"ftSource\"") != std::string::npos) {
    return TraceFormat::kFt;
  }
  return TraceFormat::kKineto;
}

}  // namespace

TraceFormat detect_trace_format(const fs::path& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    // A run directory holds trace.json (ft's reader reports what is wrong with it); a directory
    // of ranks holds Kineto's *.json / *.json.gz files under other names.
    const fs::path own = path / "trace.json";
    if (fs::exists(own, ec)) return TraceFormat::kFt;
    if (!find_rank_traces(path).empty()) return TraceFormat::kFt;  // ft-train under mpirun
    for (const auto& e : fs::directory_iterator(path, ec)) {
      const std::string n = e.path().filename().string();
      if (e.is_regular_file() && (n.ends_with(".json") || n.ends_with(".json.gz")))
        return TraceFormat::kKineto;
    }
    throw IoError(fmt::format("no trace at '{}' (and no Kineto *.json / *.json.gz files in '{}')",
                              own.string(), path.string()));
  }
  if (!fs::exists(path, ec)) throw IoError(fmt::format("no trace at '{}'", path.string()));
  return sniff_file(path);
}

Trace load_trace(const fs::path& path) {
  if (detect_trace_format(path) == TraceFormat::kFt) {
    std::error_code ec;
    if (fs::is_directory(path, ec) && !fs::exists(path / "trace.json", ec)) {
      return merge_rank_traces(read_rank_traces(path));
    }
    return read_trace_json(fs::is_directory(path, ec) ? path / "trace.json" : path);
  }
  Trace t = prepare_kineto_trace(read_kineto_rank_records(path.string()));
  t.metadata["path"] = path.string();
  t.source = fmt::format("{} ({} trace, {} rank{})", path.string(), t.metadata["source_format"],
                         t.metadata["ranks"], t.metadata["ranks"] == "1" ? "" : "s");
  return t;
}

std::vector<Trace> load_kineto_ranks(const fs::path& path) {
  std::vector<Trace> out = prepare_kineto_ranks(read_kineto_rank_records(path.string()));
  for (Trace& t : out) {
    t.metadata["path"] = path.string();
    // "rank 3 of a world of 8, 1 rank traced" (the world size when the trace records it).
    std::string world;
    for (const auto& [k, v] : t.metadata)
      if (std::string_view(k).ends_with("distributed.world_size")) world = v;
    t.source = fmt::format("{} ({} trace, rank {}{}, {} rank{} traced)", path.string(),
                           t.metadata["source_format"], t.metadata["rank"],
                           world.empty() ? "" : " of a world of " + world, out.size(),
                           out.size() == 1 ? "" : "s");
  }
  return out;
}

void write_hta_json(const fs::path& trace_path, const fs::path& out) {
  nlohmann::json doc = nlohmann::json::object();
  // As ft-hta writes it with its defaults; the analyses over HTA's rows (critical path,
  // annotation breakdown, kernel sequences, CUPTI counters) read the file a second time.
  doc[hta_entry_key(trace_path.string())] = hta_entry(trace_path.string(), {}, {});
  // Kernel names are the trace's bytes: invalid UTF-8 is written as U+FFFD, never thrown on.
  write_file_atomic(out, doc.dump(1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
}

}  // namespace ft::profiler
