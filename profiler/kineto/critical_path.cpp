// critical_path.cpp: HTA's critical_path_analysis: the window, the longest path, and its
// breakdown by edge type and bounding resource.
#include "ft/profiler/critical_path.h"

#include <algorithm>
#include <array>
#include <climits>
#include <filesystem>
#include <map>
#include <optional>
#include <regex>

#include "critical_path_graph.h"
#include "ft/core/error.h"
#include "ft/core/parallel.h"
#include "json_stream.h"
#include "kineto_names.h"

namespace ft::profiler {

namespace {

using kineto::CpEdge;
using kineto::CpEdgeType;
using kineto::CpGraph;
using kineto::CpRow;
using kineto::CpTrace;
using nlohmann::json;

struct Window {
  int64_t start = 0;
  int64_t end = INT64_MAX;
  json info;
};

// HTA's window: the chosen instances of the annotation, or the whole rank. nullopt with
// `error` set where HTA returns None or raises.
std::optional<Window> find_window(const CpTrace& t, const CriticalPathOptions& o,
                                  std::string* error) {
  Window w;
  if (o.annotation.empty()) {
    w.start = INT64_MAX;
    for (const CpRow& r : t.rows) w.start = std::min(w.start, r.ts);
    w.info = {{"rule", "empty annotation: whole rank"}, {"start_ts", w.start}};
    return w;
  }
  std::vector<const CpRow*> matches;
  for (const CpRow& r : t.rows) {
    if (r.name.find(o.annotation) != std::string::npos) matches.push_back(&r);
  }
  if (matches.empty()) {
    *error = "no event name contains the annotation (HTA returns None)";
    return std::nullopt;
  }
  if (o.instance_first < 0 || o.instance_first >= static_cast<int64_t>(matches.size()) ||
      o.instance_last < o.instance_first) {
    *error = "instance out of range: the window is NaN (HTA raises UndefinedVariableError)";
    return std::nullopt;
  }
  const size_t last = std::min<size_t>(matches.size() - 1, static_cast<size_t>(o.instance_last));
  w.start = INT64_MAX;
  w.end = INT64_MIN;
  for (size_t i = static_cast<size_t>(o.instance_first); i <= last; ++i) {
    w.start = std::min(w.start, matches[i]->ts);
    w.end = std::max(w.end, matches[i]->end());
  }
  w.info = {{"n_matching_rows", matches.size()}, {"start_ts", w.start}, {"end_ts", w.end}};
  return w;
}

// The rows HTA keeps for the graph, in row order.
std::vector<int64_t> clip(const CpTrace& t, const Window& w) {
  auto inside = [&](const CpRow& r) { return r.ts >= w.start && r.ts <= w.end && r.dur > 0; };
  std::vector<char> keep(t.rows.size(), 0);
  for (size_t i = 0; i < t.rows.size(); ++i) {
    const CpRow& r = t.rows[i];
    if (r.gpu()) {
      if (r.name == "Stream Wait Event") keep[i] = 1;
    } else if (inside(r)) {
      keep[i] = 1;
      // The GPU row this CPU row points at qualifies through it.
      if (r.partner >= 0 && t.rows[r.partner].gpu()) keep[r.partner] = 1;
    }
  }
  std::vector<int64_t> rows;
  for (size_t i = 0; i < t.rows.size(); ++i) {
    if (keep[i]) rows.push_back(static_cast<int64_t>(i));
  }
  std::sort(rows.begin(), rows.end(),
            [&](int64_t a, int64_t b) { return t.rows[a].ev_idx < t.rows[b].ev_idx; });
  return rows;
}

std::string short_name(const std::string& n) {
  // HTA's shorten_name: drop template and argument lists.
  std::string s = n;
  const size_t p = s.find('(');
  if (p != std::string::npos && p > 0) s = s.substr(0, p);
  return s;
}

std::string bound_by(const CpEdge& e, const CpTrace& t, const CriticalPathOptions& o) {
  switch (e.type) {
    case CpEdgeType::kKernelKernelDelay:
      return "gpu_kernel_kernel_overhead";
    case CpEdgeType::kLaunchDelay:
      return "gpu_kernel_launch_overhead";
    case CpEdgeType::kDependency:
    case CpEdgeType::kSyncDependency:
      return "";
    case CpEdgeType::kOperator:
      break;
  }
  if (e.attributed < 0) return "cpu_bound";
  const CpRow& r = t.rows[e.attributed];
  if (r.stream < 0) {
    for (const std::string& p : o.data_load_events) {
      if (std::regex_search(short_name(r.name), std::regex(p))) return "data_loading";
    }
    return "cpu_bound";
  }
  if (kineto::hta_kernel_type(r.name) == kineto::HtaKernelType::kCommunication) {
    return "gpu_communication_bound";
  }
  return "gpu_compute_bound";
}

json count_sum(const std::map<std::string, std::pair<int64_t, int64_t>>& m, const char* sum) {
  json out = json::object();
  for (const auto& [k, v] : m) out[k] = {{"count", v.first}, {sum, v.second}};
  return out;
}

void describe_graph(const CpGraph& g, json* out) {
  std::map<std::string, std::pair<int64_t, int64_t>> by_type;
  json negative = json::array();
  for (const CpEdge& e : g.edges()) {
    auto& s = by_type[kineto::cp_edge_type_name(e.type)];
    ++s.first;
    s.second += e.weight;
    if (e.weight < 0) negative.push_back(e.weight);
  }
  (*out)["graph_nodes"] = g.graph_nodes();
  (*out)["graph_edges"] = g.edges().size();
  (*out)["node_ids_assigned"] = g.nodes().size();
  (*out)["graph_edges_by_type"] = count_sum(by_type, "weight_sum");
  (*out)["negative_weight_edges_zeroed_in_graph"] = {{"count", negative.size()},
                                                     {"weights", negative}};
  (*out)["no_edge_added_warnings"] = g.no_edge_added_warnings();
}

void describe_path(const CpGraph& g, const std::vector<int>& path, const CriticalPathOptions& o,
                   CriticalPathResult* res) {
  const CpTrace& t = g.trace();
  std::map<std::string, std::pair<int64_t, int64_t>> by_type, by_bound;
  std::map<std::pair<std::string, std::string>, std::pair<int64_t, int64_t>> by_both;
  int64_t total = 0, graph_total = 0;
  for (size_t i = 0; i + 1 < path.size(); ++i) {
    const CpEdge& e = g.edge(path[i], path[i + 1]);
    CriticalPathEdge pe;
    pe.type = kineto::cp_edge_type_name(e.type);
    pe.weight = e.weight;
    pe.bound_by = bound_by(e, t, o);
    pe.src_ts = g.nodes()[e.u].ts;
    pe.dst_ts = g.nodes()[e.v].ts;
    if (e.attributed >= 0) {
      pe.attributed_ev_idx = t.rows[e.attributed].ev_idx;
      pe.attributed_name = t.rows[e.attributed].name;
    }
    total += e.weight;
    graph_total += e.graph_weight;
    for (auto* s : {&by_type[pe.type], &by_bound[pe.bound_by], &by_both[{pe.type, pe.bound_by}]}) {
      ++s->first;
      s->second += e.weight;
    }
    res->edges.push_back(std::move(pe));
  }
  res->total_us = total;
  json& out = res->json;
  std::vector<int64_t> events;
  for (const int n : path) events.push_back(g.nodes()[n].row);
  std::sort(events.begin(), events.end());
  out["cp_nodes"] = path.size();
  out["cp_edges"] = res->edges.size();
  out["cp_events"] = std::unique(events.begin(), events.end()) - events.begin();
  out["cp_total_duration_us"] = total;
  out["cp_longest_path_length_graph_weights_us"] = graph_total;
  out["cp_first_node_ts"] = g.nodes()[path.front()].ts;
  out["cp_last_node_ts"] = g.nodes()[path.back()].ts;
  out["cp_span_us"] = g.nodes()[path.back()].ts - g.nodes()[path.front()].ts;
  out["breakdown_by_type"] = count_sum(by_type, "duration_sum");
  out["breakdown_by_bound_by"] = count_sum(by_bound, "duration_sum");
  json both = json::array(), summary = json::array();
  for (const auto& [k, v] : by_both) {
    both.push_back({{"type", k.first},
                    {"bound_by", k.second},
                    {"count", v.first},
                    {"duration_sum", v.second}});
  }
  for (const auto& [k, v] : by_bound) {
    const double pct =
        total == 0 ? 0.0 : 100.0 * static_cast<double>(v.second) / static_cast<double>(total);
    summary.push_back({{"bound_by", k}, {"pct_of_cp_duration", pct}});
  }
  out["breakdown_by_type_and_bound_by"] = both;
  out["summary_records"] = summary;
}

CriticalPathResult analyse(const CpTrace& t, const CriticalPathOptions& o) {
  CriticalPathResult res;
  json& out = res.json;
  out["args"] = {{"rank", o.rank},
                 {"annotation", o.annotation},
                 {"instance_id", json::array({o.instance_first, o.instance_last})}};
  out["trace_has_cuda_sync"] = t.has_cuda_sync;
  const std::optional<Window> w = find_window(t, o, &res.error);
  if (!w) {
    out["success"] = false;
    out["error"] = res.error;
    return res;
  }
  out["window"] = w->info;
  std::vector<int64_t> rows = clip(t, *w);
  out["clipped_events"] = rows.size();
  CpGraph g(t, std::move(rows), o);
  describe_graph(g, &out);
  const bool valid = g.validate();
  const std::vector<int> path = valid ? g.longest_path() : std::vector<int>();
  res.success = path.size() >= 2;
  out["success"] = res.success;
  if (!res.success) {
    res.error = valid ? "the graph has a cycle" : "invalid graph (see HTA's _validate_graph)";
    out["error"] = res.error;
    return res;
  }
  describe_path(g, path, o, &res);
  return res;
}

// The Kineto files of a path: the file itself, or a directory's *.json / *.json.gz by name.
std::vector<std::string> trace_files(const std::string& path) {
  namespace fs = std::filesystem;
  if (!fs::is_directory(path)) return {path};
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(path)) {
    const std::string n = e.path().filename().string();
    const bool json_file = n.size() > 5 && (n.ends_with(".json") || n.ends_with(".json.gz"));
    if (e.is_regular_file() && json_file && n.find("hta_") != 0) files.push_back(e.path());
  }
  if (files.empty()) throw IoError("no Kineto trace (*.json, *.json.gz) in " + path);
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace

CriticalPathResult critical_path_from_text(const std::string& text,
                                           const CriticalPathOptions& options) {
  const CpTrace t = kineto::load_cp_trace(text);
  return analyse(t, options);
}

CriticalPathResult critical_path(const std::string& trace_path,
                                 const CriticalPathOptions& options) {
  return analyse(kineto::load_cp_traces(trace_path, true).front(), options);
}

json critical_path_analysis(const std::string& trace_path, const CriticalPathOptions& options) {
  return critical_path(trace_path, options).json;
}

json gpu_user_annotation_breakdown(const std::string& trace_path, bool use_gpu_annotation,
                                   double duration_ratio, size_t num_kernels) {
  const std::vector<CpTrace> ranks = kineto::load_cp_traces(trace_path, true);
  std::vector<const CpTrace*> ptrs;
  for (const CpTrace& t : ranks) ptrs.push_back(&t);
  return kineto::user_annotation_breakdown(ptrs, use_gpu_annotation, duration_ratio, num_kernels);
}

json hta_json_analyses(const std::string& trace_path, const CriticalPathOptions& options,
                       const KernelSequenceOptions& sequences) {
  json out;
  auto failed = [](const std::exception& e) {
    return json{{"success", false}, {"error", e.what()}};
  };
  std::vector<CpTrace> ranks;
  try {
    ranks = kineto::load_cp_traces(trace_path, true);
  } catch (const std::exception& e) {  // ft::Error, or a JSON parse error
    out["critical_path"] = failed(e);
    out["gpu_user_annotation_breakdown"] = failed(e);
    out["frequent_cuda_kernel_sequences"] = failed(e);
    out["cupti_counter_data_with_operators"] = failed(e);
    out["aten_op_kernels_and_delay"] = failed(e);
    return out;
  }
  // Five independent analyses, on the machine's cores (the critical path the longest: ~40 ms on
  // df_index_resolver), each writing its own key.
  std::array<json, 5> part;
  parallel_for(part.size(), [&](size_t job) {
    switch (job) {
      case 0:
        try {
          part[0] = analyse(ranks.front(), options).json;
        } catch (const std::exception& e) {
          part[0] = failed(e);
        }
        break;
      case 1: {
        std::vector<const CpTrace*> ptrs;
        for (const CpTrace& t : ranks) ptrs.push_back(&t);
        part[1] = json::array();
        for (const bool gpu : {true, false})
          part[1].push_back(kineto::user_annotation_breakdown(ptrs, gpu, 0.8, 1000));
        break;
      }
      case 2:
        part[2]["args"] = {{"operator_name", sequences.operator_name},
                           {"min_pattern_len", sequences.min_pattern_len}};
        part[2]["ranks"] = json::object();
        for (const CpTrace& t : ranks) {
          part[2]["ranks"][std::to_string(t.rank)] = kineto::frequent_kernel_sequences(
              t, sequences.operator_name, sequences.min_pattern_len);
        }
        break;
      case 3:
        part[3] = {{"ranks", json::object()}};
        for (const CpTrace& t : ranks) {
          json rows = kineto::cupti_counter_data_with_operators(t);
          if (!rows.is_null()) part[3]["ranks"][std::to_string(t.rank)] = std::move(rows);
        }
        break;
      default:
        part[4] = {{"ranks", json::object()}};
        for (const CpTrace& t : ranks)
          part[4]["ranks"][std::to_string(t.rank)] = kineto::aten_op_kernels_and_delay(t);
        break;
    }
  });
  out["critical_path"] = std::move(part[0]);
  out["gpu_user_annotation_breakdown"] = std::move(part[1]);
  out["frequent_cuda_kernel_sequences"] = std::move(part[2]);
  out["cupti_counter_data_with_operators"] = std::move(part[3]);
  out["aten_op_kernels_and_delay"] = std::move(part[4]);
  return out;
}

json hta_entry(const std::string& trace_path, const HtaOptions& hta,
               const CriticalPathOptions& options, const KernelSequenceOptions& sequences) {
  json entry, rows;
  parallel_for(2, [&](size_t job) {
    if (job == 0)
      entry = hta_analyses_of(trace_path, hta);
    else
      rows = hta_json_analyses(trace_path, options, sequences);
  });
  for (auto& [k, v] : rows.items()) entry[k] = std::move(v);
  return entry;
}

}  // namespace ft::profiler

namespace ft::profiler::kineto {

bool CpGraph::validate() {
  bool negative = false, same_stream = false;
  for (CpEdge& e : edges_) {
    if (e.weight <= -1 && !options_.strict_negative_weight_checks) {
      e.graph_weight = 0;
    } else if (e.weight < -1) {
      negative = true;
    }
    if (e.type == CpEdgeType::kSyncDependency) {
      const int64_t a = trace_.rows[nodes_[e.u].row].stream;
      const int64_t b = trace_.rows[nodes_[e.v].row].stream;
      if (a != -1 && a == b) same_stream = true;
    }
  }
  return !negative && !same_stream;
}

// networkx 2.8's dag_longest_path over topological_sort (generation by generation, nodes in
// insertion order): each node keeps its first heaviest predecessor; the end is the first
// heaviest node.
std::vector<int> CpGraph::longest_path() {
  std::vector<int> indegree(nodes_.size(), 0), order, gen;
  for (const int n : node_order_) {
    indegree[n] = static_cast<int>(pred_[n].size());
    if (indegree[n] == 0) gen.push_back(n);
  }
  while (!gen.empty()) {
    std::vector<int> next;
    for (const int n : gen) {
      order.push_back(n);
      for (const int e : succ_[n]) {
        if (--indegree[edges_[e].v] == 0) next.push_back(edges_[e].v);
      }
    }
    gen = std::move(next);
  }
  if (order.size() != node_order_.size()) return {};  // a cycle
  std::vector<int64_t> dist(nodes_.size(), 0);
  std::vector<int> from(nodes_.size(), -1);
  for (const int v : order) {
    int64_t best = INT64_MIN;
    int best_u = v;
    for (const int e : pred_[v]) {
      const int64_t d = dist[edges_[e].u] + edges_[e].graph_weight;
      if (d > best) {
        best = d;
        best_u = edges_[e].u;
      }
    }
    if (best_u == v || best < 0) {
      dist[v] = 0;
      from[v] = v;
    } else {
      dist[v] = best;
      from[v] = best_u;
    }
  }
  int end = order.empty() ? -1 : order.front();
  for (const int v : order) {
    if (dist[v] > dist[end]) end = v;
  }
  std::vector<int> path;
  for (int v = end; v >= 0;) {
    path.push_back(v);
    if (from[v] == v) break;
    v = from[v];
  }
  std::reverse(path.begin(), path.end());
  return path;
}

// The path's rank files as HTA loads them; a file without traceEvents beside traces (PyTorch's
// execution trace) is skipped, as the Kineto reader skips it.
std::vector<CpTrace> load_cp_traces(const std::string& trace_path, bool align_and_cut) {
  std::vector<CpTrace> out;
  const std::vector<std::string> files = trace_files(trace_path);
  for (const std::string& f : files) {
    try {
      out.push_back(load_cp_trace_file(f, align_and_cut));
    } catch (const FormatError& e) {
      if (files.size() == 1 || std::string(e.what()) != "trace has no traceEvents") throw;
    }
  }
  if (out.empty()) throw FormatError("no Kineto trace (traceEvents) in " + trace_path);
  return out;
}

}  // namespace ft::profiler::kineto
