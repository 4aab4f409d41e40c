// critical_path_graph.cpp: building HTA's critical-path graph from a rank's rows.
#include "critical_path_graph.h"

#include <algorithm>
#include <climits>
#include <functional>
#include <optional>
#include <regex>
#include <set>

namespace ft::profiler::kineto {

namespace {

bool is_blocking_call(const std::string& n) {
  return n == "cudaDeviceSynchronize" || n == "cudaStreamSynchronize" || n == "cudaEventQuery" ||
         n == "cudaEventSynchronize" || n == "cudaMemcpy" || n == "cudaMemcpyAsync";
}

bool is_lock_call(const std::string& n) {
  return n == "cudaHostAlloc" || n == "cudaLaunchKernel" || n == "cudaMemcpyAsync";
}

bool is_op_or_runtime(const std::string& cat) {
  return cat == "cpu_op" || cat == "cuda_runtime" || cat == "cuda_driver";
}

}  // namespace

const char* cp_edge_type_name(CpEdgeType t) {
  switch (t) {
    case CpEdgeType::kOperator:
      return "operator";
    case CpEdgeType::kDependency:
      return "dependency";
    case CpEdgeType::kLaunchDelay:
      return "kernel_launch_delay";
    case CpEdgeType::kKernelKernelDelay:
      return "kernel_kernel_delay";
    case CpEdgeType::kSyncDependency:
      return "sync_dependency";
  }
  return "";
}

CpGraph::CpGraph(const CpTrace& trace, std::vector<int64_t> clipped,
                 const CriticalPathOptions& options)
    : trace_(trace), clipped_(std::move(clipped)), options_(options) {
  create_nodes();
  queue_ = cp_queue_lengths(trace_);
  cp_match_event_launches(trace_, &prev_launch_of_record_, &next_launch_of_wait_);
  add_runtime_lock_edges();
  add_call_stack_edges();
  add_kernel_edges();
}

void CpGraph::create_nodes() {
  std::vector<std::regex> load;
  for (const std::string& p : options_.data_load_events) load.emplace_back(p);
  std::vector<CpNode> starts, ends;
  for (const int64_t i : clipped_) {
    const CpRow& r = trace_.rows[i];
    bool want = is_op_or_runtime(r.cat) || (r.gpu() && r.linked_corr);
    for (const std::regex& re : load) want = want || std::regex_search(r.name, re);
    if (!want) continue;
    const bool blocking = is_blocking_call(r.name);
    starts.push_back({i, r.ts, true, blocking});
    ends.push_back({i, r.end(), false, blocking});
  }
  nodes_ = std::move(starts);
  nodes_.insert(nodes_.end(), ends.begin(), ends.end());
  std::stable_sort(nodes_.begin(), nodes_.end(), [&](const CpNode& a, const CpNode& b) {
    if (a.ts != b.ts) return a.ts < b.ts;
    return trace_.rows[a.row].ev_idx < trace_.rows[b.row].ev_idx;
  });
  start_of_.assign(trace_.rows.size(), -1);
  end_of_.assign(trace_.rows.size(), -1);
  for (size_t n = 0; n < nodes_.size(); ++n) {
    (nodes_[n].is_start ? start_of_ : end_of_)[nodes_[n].row] = static_cast<int>(n);
  }
  succ_.resize(nodes_.size());
  pred_.resize(nodes_.size());
  in_graph_.assign(nodes_.size(), 0);
}

// networkx add_edge: a repeated (u, v) replaces the attributes and keeps its place.
int CpGraph::add_edge(int src, int dst, CpEdgeType type, bool zero_weight) {
  const bool zero =
      zero_weight || type == CpEdgeType::kDependency || type == CpEdgeType::kSyncDependency;
  const int64_t w = zero ? 0 : nodes_[dst].ts - nodes_[src].ts;
  const auto [it, fresh] = edge_index_.try_emplace(key(src, dst), static_cast<int>(edges_.size()));
  if (fresh) {
    for (const int n : {src, dst}) {
      if (!in_graph_[n]) {
        in_graph_[n] = 1;
        node_order_.push_back(n);
      }
    }
    edges_.push_back({src, dst, type, w, w, -2});
    succ_[src].push_back(it->second);
    pred_[dst].push_back(it->second);
  } else {
    CpEdge& e = edges_[it->second];
    e.type = type;
    e.weight = e.graph_weight = w;
  }
  return it->second;
}

// HTA's _attribute_edge: which event an operator or kernel-kernel edge belongs to.
void CpGraph::attribute(int e, int64_t src_parent) {
  CpEdge& edge = edges_[e];
  if (edge.type != CpEdgeType::kOperator && edge.type != CpEdgeType::kKernelKernelDelay) return;
  const CpNode& src = nodes_[edge.u];
  const CpNode& dst = nodes_[edge.v];
  if (edge.type == CpEdgeType::kKernelKernelDelay || src.is_start) {
    edge.attributed = src.row;
  } else if (!dst.is_start) {
    edge.attributed = dst.row;
  } else {
    edge.attributed = src_parent;
  }
}

bool CpGraph::is_lock_node(int n) const { return is_lock_call(trace_.rows[nodes_[n].row].name); }

bool CpGraph::shares_lock(int a, int b) const {
  return is_lock_node(a) && is_lock_node(b) && (nodes_[a].is_start || !nodes_[b].is_start);
}

// Lock-taking runtime calls: every pending start joins the next end, and ends chain.
void CpGraph::add_runtime_lock_edges() {
  std::vector<int> pending;
  int last = -1;
  for (int n = 0; n < static_cast<int>(nodes_.size()); ++n) {
    if (!is_lock_node(n)) continue;
    if (nodes_[n].is_start) {
      pending.push_back(n);
    } else {
      while (!pending.empty()) {
        const int p = pending.back();
        pending.pop_back();
        if (nodes_[p].row == nodes_[n].row) {
          attribute(add_edge(p, n, CpEdgeType::kOperator), nodes_[n].row);
        } else {
          add_edge(p, n, CpEdgeType::kDependency);
        }
      }
      if (last >= 0 && !nodes_[last].is_start) add_edge(last, n, CpEdgeType::kDependency);
    }
    last = n;
  }
}

// The thread id of the only thread whose cpu_op/user_annotation names contain `what`, or none.
static std::optional<int64_t> only_tid_with(const CpTrace& t, const std::vector<int64_t>& rows,
                                            const char* what) {
  std::set<int64_t> tids;
  for (const int64_t i : rows) {
    const CpRow& r = t.rows[i];
    if ((r.cat == "cpu_op" || r.cat == "user_annotation") &&
        r.name.find(what) != std::string::npos) {
      tids.insert(r.tid);
    }
  }
  if (tids.size() != 1) return std::nullopt;
  return *tids.begin();
}

void CpGraph::add_call_stack_edges() {
  const auto fwd = only_tid_with(trace_, clipped_, "forward");
  const auto bwd = only_tid_with(trace_, clipped_, "autograd");
  const bool merge = fwd && bwd && *fwd != 0 && *bwd != 0 && *fwd != *bwd;
  std::map<std::pair<int64_t, int64_t>, std::vector<int64_t>> threads;
  for (const int64_t i : clipped_) {
    const CpRow& r = trace_.rows[i];
    const int64_t tid = merge && r.tid == *bwd ? *fwd : r.tid;
    threads[{r.pid, tid}].push_back(i);
  }
  for (const auto& [id, rows] : threads) {
    bool cpu = true;
    for (const int64_t i : rows) cpu = cpu && trace_.rows[i].stream < 0;
    if (cpu) walk_call_stack(rows);
  }
}

// One thread's call stack (HTA's CallStackGraph), walked depth first.
void CpGraph::walk_call_stack(const std::vector<int64_t>& rows) {
  struct Boundary {
    int64_t row, time, dur;
    bool start;
  };
  std::vector<Boundary> b;
  for (const int64_t i : rows) {
    const CpRow& r = trace_.rows[i];
    const int64_t dur = std::max<int64_t>(r.dur, 0);
    b.push_back({i, r.ts, dur, true});
    b.push_back({i, r.ts + dur, dur, false});
  }
  auto ev = [&](int64_t row) { return trace_.rows[row].ev_idx; };
  std::stable_sort(b.begin(), b.end(), [&](const Boundary& x, const Boundary& y) {
    if (x.row == y.row) return x.start && !y.start;
    if (x.time != y.time) return x.time < y.time;
    if (x.start != y.start) return !x.start;  // ends first
    if (x.dur != y.dur) return x.start ? x.dur > y.dur : x.dur < y.dur;
    return x.start ? ev(x.row) < ev(y.row) : ev(x.row) > ev(y.row);
  });
  std::unordered_map<int64_t, std::vector<int64_t>> children;
  std::unordered_map<int64_t, int64_t> parent;
  std::vector<int64_t> stack;
  for (const Boundary& x : b) {
    if (x.start) {
      const int64_t p = stack.empty() ? -1 : stack.back();
      if (parent.count(x.row)) continue;
      parent[x.row] = p;
      children[p].push_back(x.row);
      stack.push_back(x.row);
    } else if (!stack.empty()) {
      stack.pop_back();
    }
  }
  int last = -1, depth = 0;
  int64_t last_parent = -1;
  std::function<void(int64_t)> visit = [&](int64_t row) {
    const bool has = row >= 0 && start_of_[row] >= 0 && end_of_[row] >= 0;
    if (has) {
      const int s = start_of_[row];
      if (last >= 0 && !shares_lock(last, s)) {
        const auto t = depth == 0 ? CpEdgeType::kDependency : CpEdgeType::kOperator;
        attribute(add_edge(last, s, t), last_parent);
      }
      last = s;
      last_parent = parent[row];
      ++depth;
    }
    const auto it = children.find(row);
    if (it != children.end()) {
      for (const int64_t c : it->second) visit(c);
    }
    if (has) {
      const int e = end_of_[row];
      if (last >= 0 && !shares_lock(last, e)) {
        const bool zero = nodes_[start_of_[row]].blocking;
        attribute(add_edge(last, e, CpEdgeType::kOperator, zero), last_parent);
      }
      last = e;
      last_parent = parent[row];
      --depth;
    }
  };
  visit(-1);
}

}  // namespace ft::profiler::kineto
