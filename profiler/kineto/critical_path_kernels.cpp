// critical_path_kernels.cpp: the GPU side of HTA's critical-path graph (launch, kernel-kernel
// and synchronisation edges), with the queue lengths and event matching it depends on.
#include <algorithm>
#include <climits>
#include <unordered_set>

#include "critical_path_graph.h"

namespace ft::profiler::kineto {

bool cp_is_launch(const std::string& n) {
  static const std::unordered_set<std::string> kLaunch = {
      "cudaLaunchKernel",      "cudaLaunchKernelExC",
      "cuLaunchKernel",        "cuLaunchKernelEx",
      "cudaMemcpyAsync",       "cudaMemsetAsync",
      "hipLaunchKernel",       "hipExtModuleLaunchKernel",
      "hipMemsetAsync",        "hipMemcpyAsync",
      "hipMemcpyWithStream",   "hipExtLaunchKernel",
      "hipModuleLaunchKernel", "runFunction - job_prep_and_submit_for_execution"};
  return kLaunch.count(n) != 0;
}

namespace {

// Gaps up to this still chain consecutive kernels on a stream (HTA's threshold).
constexpr int64_t kKernelKernelDelayThresholdUs = 1500;

// The GPU partner of a launch call, or -1.
int64_t gpu_partner(const CpTrace& t, const CpRow& r) {
  return r.partner >= 0 && t.rows[r.partner].gpu() ? r.partner : -1;
}

// Launch calls with a GPU partner, in time order (HTA's launch ids).
std::vector<int64_t> launches_in_time_order(const CpTrace& t) {
  std::vector<int64_t> l;
  for (size_t i = 0; i < t.rows.size(); ++i) {
    if (cp_is_launch(t.rows[i].name) && gpu_partner(t, t.rows[i]) >= 0) {
      l.push_back(static_cast<int64_t>(i));
    }
  }
  std::stable_sort(l.begin(), l.end(),
                   [&](int64_t a, int64_t b) { return t.rows[a].ts < t.rows[b].ts; });
  return l;
}

}  // namespace

std::vector<int64_t> cp_queue_lengths(const CpTrace& t) {
  std::unordered_set<int64_t> launch_corr;
  std::vector<int64_t> order;  // launches first, then kernels, as HTA concatenates them
  for (size_t i = 0; i < t.rows.size(); ++i) {
    if (cp_is_launch(t.rows[i].name)) {
      launch_corr.insert(t.rows[i].corr);
      if (gpu_partner(t, t.rows[i]) >= 0) order.push_back(static_cast<int64_t>(i));
    }
  }
  for (size_t i = 0; i < t.rows.size(); ++i) {
    if (t.rows[i].gpu() && launch_corr.count(t.rows[i].corr))
      order.push_back(static_cast<int64_t>(i));
  }
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return t.rows[a].ts < t.rows[b].ts; });
  std::vector<int64_t> q(t.rows.size(), INT64_MIN);
  std::unordered_map<int64_t, int64_t> running;
  for (const int64_t i : order) {
    const CpRow& r = t.rows[i];
    const bool launch = !r.gpu();
    const int64_t stream = launch ? t.rows[r.partner].stream : r.stream;
    q[i] = running[stream] += launch ? 1 : -1;
  }
  return q;
}

void cp_match_event_launches(const CpTrace& t,
                             std::unordered_map<int64_t, int64_t>* prev_launch_of_record,
                             std::vector<int64_t>* next_launch_of_wait) {
  const std::vector<int64_t> launches = launches_in_time_order(t);
  // Recorded events: correlation of the cudaEventRecord -> (stream, GPU pid).
  std::unordered_map<int64_t, std::pair<int64_t, int64_t>> recorded;
  for (const CpRow& r : t.rows) {
    if (r.wait_stream > -1) recorded.emplace(r.wait_corr, std::make_pair(r.wait_stream, r.pid));
  }
  next_launch_of_wait->assign(t.rows.size(), -1);
  for (size_t i = 0; i < t.rows.size(); ++i) {
    const CpRow& r = t.rows[i];
    if (r.name == "cudaEventRecord") {
      const auto it = recorded.find(r.corr);
      if (it == recorded.end()) continue;
      int64_t prev = -1;
      for (const int64_t l : launches) {
        const CpRow& k = t.rows[t.rows[l].partner];
        if (t.rows[l].ts > r.ts) break;
        if (k.stream == it->second.first && k.pid == it->second.second) prev = l;
      }
      if (prev >= 0) (*prev_launch_of_record)[r.corr] = prev;
    } else if (r.name == "cudaStreamWaitEvent" && r.partner >= 0) {
      const int64_t stream = t.rows[r.partner].stream;
      for (const int64_t l : launches) {
        const CpRow& c = t.rows[l];
        if (c.ts > r.ts && c.pid == r.pid && c.tid == r.tid && t.rows[c.partner].stream == stream) {
          (*next_launch_of_wait)[i] = l;
          break;
        }
      }
    }
  }
}

void CpGraph::add_kernel_edges() {
  std::vector<int64_t> rows;
  for (const int64_t i : clipped_) {
    const CpRow& r = trace_.rows[i];
    if ((r.gpu() || r.name == "Event Sync" || r.name == "Context Sync") && r.linked_corr) {
      rows.push_back(i);
    }
  }
  auto sort_by = [&](int64_t i) {
    const CpRow& r = trace_.rows[i];
    return r.cat == "cuda_sync" ? r.end() : r.ts;
  };
  std::stable_sort(rows.begin(), rows.end(),
                   [&](int64_t a, int64_t b) { return sort_by(a) < sort_by(b); });
  std::map<int64_t, int> last_end;                   // stream -> end node of its last kernel
  std::unordered_map<int64_t, int64_t> kernel_sync;  // kernel row -> source kernel row
  for (const int64_t i : rows) {
    if (trace_.rows[i].cat == "cuda_sync") {
      add_sync_edges(trace_.rows[i], &last_end, &kernel_sync);
    } else {
      add_kernel(i, &last_end, &kernel_sync);
    }
  }
}

void CpGraph::add_sync_edges(const CpRow& s, std::map<int64_t, int>* last_end,
                             std::unordered_map<int64_t, int64_t>* kernel_sync) {
  const int cpu_end = s.partner >= 0 ? end_of_[s.partner] : -1;
  if (s.name == "Stream Wait Event" || s.name == "Event Sync") {
    const auto rec = prev_launch_of_record_.find(s.wait_corr);
    if (s.wait_corr == -1 || rec == prev_launch_of_record_.end()) return;
    const int64_t src_kernel = trace_.rows[rec->second].partner;
    if (s.name == "Stream Wait Event") {
      if (s.partner < 0) return;
      const int64_t launch = next_launch_of_wait_[s.partner];
      if (launch < 0) return;
      (*kernel_sync)[trace_.rows[launch].partner] = src_kernel;
    } else if (end_of_[src_kernel] >= 0 && cpu_end >= 0) {
      add_edge(end_of_[src_kernel], cpu_end, CpEdgeType::kSyncDependency);
    }
    return;
  }
  if (cpu_end < 0) return;
  if (s.name == "Context Sync") {
    for (const int64_t stream : stream_order_) {
      add_edge(last_end->at(stream), cpu_end, CpEdgeType::kSyncDependency);
    }
  } else if (s.name == "Stream Sync") {
    const auto it = last_end->find(s.stream);
    if (it != last_end->end()) add_edge(it->second, cpu_end, CpEdgeType::kSyncDependency);
  }
}

void CpGraph::add_kernel(int64_t row, std::map<int64_t, int>* last_end,
                         std::unordered_map<int64_t, int64_t>* kernel_sync) {
  const CpRow& k = trace_.rows[row];
  const int start = start_of_[row], end = end_of_[row];
  if (start < 0 || end < 0) return;
  attribute(add_edge(start, end, CpEdgeType::kOperator), -1);
  int sync_end = -1;
  bool synced = false, edge_added = false, launch_added = false;
  const auto ks = kernel_sync->find(row);
  if (ks != kernel_sync->end() && ks->second >= 0) {
    synced = true;
    sync_end = end_of_[ks->second];
    if (sync_end < 0) {
      synced = false;
    } else {
      add_edge(sync_end, start, CpEdgeType::kSyncDependency);
      edge_added = true;
    }
    ks->second = -1;
  }
  const auto last = last_end->find(k.stream);
  const int last_node = last == last_end->end() ? -1 : last->second;
  const int64_t rt = k.partner;
  const int rt_start = rt >= 0 ? start_of_[rt] : -1;
  const int64_t rt_ts = rt >= 0 ? trace_.rows[rt].ts : INT64_MIN;
  const int64_t q_rt = rt >= 0 ? queue_[rt] : INT64_MIN;
  if (q_rt == 1 && queue_[row] == 0 && (last_node < 0 || nodes_[last_node].ts < rt_ts) &&
      (!synced || nodes_[sync_end].ts < rt_ts) && rt_start >= 0) {
    add_edge(rt_start, start, CpEdgeType::kLaunchDelay);
    edge_added = launch_added = true;
  } else if (last_node >= 0 &&
             nodes_[start].ts - nodes_[last_node].ts < kKernelKernelDelayThresholdUs &&
             (!synced || nodes_[sync_end].ts < nodes_[last_node].ts)) {
    attribute(add_edge(last_node, start, CpEdgeType::kKernelKernelDelay), -1);
    edge_added = true;
  }
  if (!edge_added) ++no_edge_added_;
  if (options_.add_zero_weight_launch_edges && !launch_added && rt_start >= 0) {
    add_edge(rt_start, start, CpEdgeType::kLaunchDelay, /*zero_weight=*/true);
  }
  if (last == last_end->end()) stream_order_.push_back(k.stream);
  (*last_end)[k.stream] = end;
}

}  // namespace ft::profiler::kineto
